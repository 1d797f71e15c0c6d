//! The configuration file through the real binary: a bad file stops the operator before it
//! does anything, naming the field; a good one is logged as the effective configuration, with
//! the command line overriding it.

use std::process::Command;

fn operator(config: &str, extra: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_dynamo-operator"))
        .arg(format!("--config={}", path.display()))
        // No cluster: the run stops at the first request, after the configuration is logged.
        .arg(format!(
            "--kubeconfig={}",
            dir.path().join("missing").display()
        ))
        .args(["--log-format=json", "--log=info"])
        .args(extra)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

const HEAD: &str =
    "apiVersion: operator.config.dynamo.nvidia.com/v1alpha1\nkind: OperatorConfiguration\n";

#[test]
fn a_bad_file_stops_the_operator_naming_the_field() {
    let (code, text) = operator(
        &format!("{HEAD}server:\n  metrics:\n    port: 70000\n"),
        &[],
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("server.metrics.port: invalid value: integer `70000`"),
        "{text}"
    );
    assert!(!text.contains("effective configuration"), "{text}");

    let (code, text) = operator(&format!("{HEAD}serviceMesh:\n  provider: istio\n"), &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("unknown field `serviceMesh`"), "{text}");
}

#[test]
fn the_effective_configuration_is_logged_once_with_flags_winning() {
    let (_, text) = operator(
        &format!(
            "{HEAD}rbac:\n  plannerClusterRoleName: planner-from-file\n  eppClusterRoleName: epp-from-file\n  dgdrProfilingClusterRoleName: profiling\n"
        ),
        &["--epp-cluster-role=epp-from-flag"],
    );
    let effective: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("effective configuration"))
        .collect();
    assert_eq!(effective.len(), 1, "{text}");
    assert!(
        effective[0].contains(r#"planner_cluster_role: \"planner-from-file\""#),
        "{}",
        effective[0]
    );
    assert!(
        effective[0].contains(r#"epp_cluster_role: \"epp-from-flag\""#),
        "{}",
        effective[0]
    );
    assert!(
        text.contains("rbac.dgdrProfilingClusterRoleName has no effect"),
        "{text}"
    );
}
