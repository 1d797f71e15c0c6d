use super::*;
use crate::backend::runs_module;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn backend_detection_follows_upstream() {
    assert!(runs_module(
        &strings(&["python3", "-m", "dynamo.vllm"]),
        "dynamo.vllm"
    ));
    assert!(runs_module(
        &strings(&["/bin/sh", "-c", "python3.11 -u -m dynamo.sglang --x 1"]),
        "dynamo.sglang"
    ));
    assert!(!runs_module(
        &strings(&["sh", "-c", "python3 x.py | -m dynamo.vllm"]),
        "dynamo.vllm"
    ));
    assert!(!runs_module(&strings(&["dynamo.vllm"]), "dynamo.vllm"));
}

#[test]
fn registry_hosts() {
    assert_eq!(
        registry_host("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1"),
        "nvcr.io"
    );
    assert_eq!(registry_host("localhost:5000/x"), "localhost:5000");
    assert_eq!(registry_host("ubuntu:22.04"), "docker.io");
    assert_eq!(registry_host("library/ubuntu"), "docker.io");
}

#[test]
fn merge_envs_by_name_user_wins_sorted() {
    let merged = merge_envs(
        vec![parts::env("B", "1"), parts::env("A", "1")],
        vec![parts::env("B", "2"), parts::env("C", "3")],
    );
    let got: Vec<(&str, Option<&str>)> = merged
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_deref()))
        .collect();
    assert_eq!(got, [("A", Some("1")), ("B", Some("2")), ("C", Some("3"))]);
}
