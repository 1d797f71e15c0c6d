//! Renderer tests: defaults per component type, user values winning, labels, Services, shared
//! memory, replica ownership, multinode, and every conformance component.

use std::collections::BTreeMap;

use api::common::MultinodeSpec;
use api::labels;
use api::v1beta1::{ComponentType, ScalingAdapter};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, Service,
    Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::gpus::container_gpus;
use super::*;
use crate::fixtures::{conformance_dcd, conformance_graphs, dcd_of};

fn deployment_of(dcd: &DynamoComponentDeployment) -> Deployment {
    match render(dcd).workload {
        Workload::Deployment(d) => *d,
        Workload::LeaderWorkerSet(_) => panic!("expected a Deployment"),
    }
}

fn pod(dcd: &DynamoComponentDeployment) -> PodSpec {
    deployment_of(dcd).spec.unwrap().template.spec.unwrap()
}

fn main_of(spec: &PodSpec) -> &Container {
    assert_eq!(spec.containers[0].name, "main", "main comes first");
    &spec.containers[0]
}

fn env_map(c: &Container) -> BTreeMap<String, Value> {
    c.env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), serde_json::to_value(e).unwrap()))
        .collect()
}

fn env_value(c: &Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

fn pod_labels(dcd: &DynamoComponentDeployment) -> BTreeMap<String, String> {
    deployment_of(dcd)
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .labels
        .unwrap()
}

fn worker() -> DynamoComponentDeployment {
    conformance_dcd("v1beta1", "vllm-agg.yaml", "VllmDecodeWorker")
}

fn frontend() -> DynamoComponentDeployment {
    conformance_dcd("v1beta1", "vllm-agg.yaml", "Frontend")
}

fn main_mut(dcd: &mut DynamoComponentDeployment) -> &mut Container {
    dcd.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers
        .iter_mut()
        .find(|c| c.name == "main")
        .unwrap()
}

fn user_spec_mut(dcd: &mut DynamoComponentDeployment) -> &mut PodSpec {
    dcd.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
}

fn annotate(dcd: &mut DynamoComponentDeployment, key: &str, value: &str) {
    dcd.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_with(Default::default)
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

fn probe_json(p: &Option<Probe>) -> Value {
    serde_json::to_value(p).unwrap()
}

#[test]
fn same_input_same_output() {
    for (path, dgd) in conformance_graphs() {
        for c in &dgd.spec.components {
            let mut dcd = dcd_of(&dgd, &c.name);
            dcd.metadata.uid = Some("u".into());
            assert_eq!(render(&dcd), render(&dcd), "{}: {}", path.display(), c.name);
        }
    }
}

#[test]
fn every_conformance_component_renders_with_the_users_main_container() {
    let mut rendered = 0;
    for (path, dgd) in conformance_graphs() {
        for c in &dgd.spec.components {
            let mut dcd = dcd_of(&dgd, &c.name);
            dcd.metadata.uid = Some("u".into());
            let at = format!("{}: {}", path.display(), c.name);
            let user = c.main_container().unwrap();
            let r = render(&dcd);
            let (template, name) = match &r.workload {
                Workload::Deployment(d) => {
                    let spec = d.spec.clone().unwrap();
                    assert_eq!(
                        spec.selector.match_labels.unwrap()[labels::SELECTOR],
                        dcd.name_any(),
                        "{at}"
                    );
                    (spec.template, d.name_any())
                }
                Workload::LeaderWorkerSet(l) => {
                    assert!(c.is_multinode(), "{at}");
                    let leader = l.data["spec"]["leaderWorkerTemplate"]["leaderTemplate"].clone();
                    (serde_json::from_value(leader).unwrap(), l.name_any())
                }
            };
            assert!(name.starts_with(&dcd.name_any()), "{at}");
            let spec = template.spec.unwrap();
            let main = main_of(&spec);
            assert_eq!(main.image, user.image, "{at}");
            // A multinode leader's command line is the engine's with the backend's launch
            // wiring (`leader_worker_set_templates_carry_the_launch_wiring`).
            if user.command.is_some() && !c.is_multinode() {
                assert_eq!(main.command, user.command, "{at}: user command kept");
            }
            if user.args.is_some() && !c.is_multinode() {
                assert_eq!(main.args, user.args, "{at}: user args kept");
            }
            assert_eq!(main.resources, user.resources, "{at}: user resources kept");
            assert_eq!(main.env_from, user.env_from, "{at}");
            let names: Vec<_> = main.env.iter().flatten().map(|e| e.name.clone()).collect();
            let mut sorted = names.clone();
            sorted.sort();
            assert_eq!(names, sorted, "{at}: env sorted by name");
            for e in user.env.iter().flatten() {
                assert!(
                    main.env.iter().flatten().any(|m| m == e),
                    "{at}: {}",
                    e.name
                );
            }
            assert_eq!(
                env_value(main, "DYN_NAMESPACE").as_deref(),
                Some(format!("ns-{}", dgd.name_any()).as_str()),
                "{at}"
            );
            assert!(
                main.volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.mount_path == "/dev/shm"),
                "{at}"
            );
            // Every component gets a Service (Kubernetes discovery is the default).
            assert!(r.service.is_some(), "{at}");
            rendered += 1;
        }
    }
    assert!(rendered >= 10, "only {rendered} components");
}

#[test]
fn frontend_defaults() {
    let dcd = frontend();
    let spec = pod(&dcd);
    let main = main_of(&spec);
    assert_eq!(
        main.image.as_deref(),
        Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")
    );
    assert_eq!(main.command, Some(vec!["python3".to_string()]));
    assert_eq!(
        main.args,
        Some(vec!["-m".to_string(), "dynamo.frontend".to_string()])
    );
    assert_eq!(
        main.ports,
        Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8000,
            protocol: Some("TCP".into()),
            ..Default::default()
        }])
    );
    assert_eq!(
        probe_json(&main.liveness_probe),
        json!({"httpGet": {"path": "/live", "port": "http"}, "initialDelaySeconds": 15,
               "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3})
    );
    assert_eq!(
        probe_json(&main.readiness_probe),
        json!({"httpGet": {"path": "/health", "port": "http"}, "initialDelaySeconds": 10,
               "periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 3})
    );
    assert_eq!(main.startup_probe, None);
    let env = env_map(main);
    let names: Vec<_> = env.keys().cloned().collect();
    assert_eq!(
        names,
        [
            "DYNAMO_PORT",
            "DYN_COMPONENT",
            "DYN_DISCOVERY_BACKEND",
            "DYN_HTTP_PORT",
            "DYN_NAMESPACE",
            "DYN_NAMESPACE_PREFIX",
            "DYN_PARENT_DGD_K8S_NAME",
            "DYN_PARENT_DGD_K8S_NAMESPACE",
            "POD_NAME",
            "POD_NAMESPACE",
            "POD_UID",
        ]
    );
    assert_eq!(env_value(main, "DYNAMO_PORT").as_deref(), Some("8000"));
    assert_eq!(
        env_value(main, "DYN_COMPONENT").as_deref(),
        Some("frontend")
    );
    assert_eq!(
        env_value(main, "DYN_NAMESPACE").as_deref(),
        Some("ns-vllm-agg")
    );
    assert_eq!(
        env_value(main, "DYN_NAMESPACE_PREFIX").as_deref(),
        Some("ns-vllm-agg")
    );
    assert_eq!(
        env_value(main, "DYN_PARENT_DGD_K8S_NAME").as_deref(),
        Some("vllm-agg")
    );
    assert_eq!(
        env_value(main, "DYN_PARENT_DGD_K8S_NAMESPACE").as_deref(),
        Some("ns")
    );
    assert_eq!(
        env_value(main, "DYN_DISCOVERY_BACKEND").as_deref(),
        Some("kubernetes")
    );
    assert_eq!(
        env["POD_UID"],
        json!({"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}})
    );
    assert_eq!(spec.termination_grace_period_seconds, Some(60));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.security_context.unwrap().fs_group, Some(1000));
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some("vllm-agg-k8s-service-discovery")
    );
}

/// The DCD's runtime version reaches its pods: `runtimeVersionOverride` when set, else the
/// image's tag; the worker gates (canary health checks from 1.5.0) follow it.
#[test]
fn the_runtime_version_override_or_the_image_tag_gates_the_defaults() {
    let rows: [(&str, Option<&str>, &str); 4] = [
        (
            "nvcr.io/nvidia/ai-dynamo/vllm-runtime:my-tag",
            None,
            "false",
        ),
        ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0", None, "true"),
        (
            "nvcr.io/nvidia/ai-dynamo/vllm-runtime:my-tag",
            Some("1.5.0"),
            "true",
        ),
        (
            "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0",
            Some("1.4.0"),
            "false",
        ),
    ];
    for (image, runtime_version_override, canary) in rows {
        let mut dcd = worker();
        main_mut(&mut dcd).image = Some(image.into());
        dcd.spec.component.runtime_version_override = runtime_version_override.map(Into::into);
        let spec = pod(&dcd);
        assert_eq!(
            env_value(main_of(&spec), "DYN_HEALTH_CHECK_ENABLED").as_deref(),
            Some(canary),
            "{image} {runtime_version_override:?}"
        );
    }
}

#[test]
fn worker_defaults_keep_the_users_command_args_and_resources() {
    let dcd = worker();
    let spec = pod(&dcd);
    let main = main_of(&spec);
    assert_eq!(
        main.command,
        Some(vec!["python3".into(), "-m".into(), "dynamo.vllm".into()])
    );
    assert_eq!(
        main.args,
        Some(vec!["--model".into(), "Qwen/Qwen3-0.6B".into()])
    );
    assert_eq!(
        main.working_dir.as_deref(),
        Some("/workspace/examples/backends/vllm")
    );
    let resources = serde_json::to_value(&main.resources).unwrap();
    assert_eq!(
        resources,
        json!({"limits": {"nvidia.com/gpu": "1"}, "requests": {"ephemeral-storage": "2Gi"}})
    );
    assert_eq!(
        serde_json::to_value(&main.env_from).unwrap(),
        json!([{"secretRef": {"name": "hf-token-secret"}}])
    );
    let ports: Vec<_> = main
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.container_port))
        .collect();
    assert_eq!(
        ports,
        [("system".to_string(), 9090), ("nixl".to_string(), 19090)]
    );
    assert_eq!(
        probe_json(&main.liveness_probe),
        json!({"httpGet": {"path": "/live", "port": "system"}, "periodSeconds": 5,
               "timeoutSeconds": 4, "failureThreshold": 1})
    );
    assert_eq!(
        probe_json(&main.readiness_probe),
        json!({"httpGet": {"path": "/health", "port": "system"}, "periodSeconds": 10,
               "timeoutSeconds": 4, "failureThreshold": 3})
    );
    assert_eq!(
        probe_json(&main.startup_probe),
        json!({"httpGet": {"path": "/live", "port": "system"}, "periodSeconds": 10,
               "timeoutSeconds": 5, "failureThreshold": 720})
    );
    for (name, value) in [
        ("DYN_SYSTEM_ENABLED", "true"),
        ("DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS", "[\"generate\"]"),
        ("DYN_SYSTEM_PORT", "9090"),
        ("DYN_HEALTH_CHECK_ENABLED", "false"),
        ("NIXL_TELEMETRY_ENABLE", "n"),
        ("NIXL_TELEMETRY_EXPORTER", "prometheus"),
        ("NIXL_TELEMETRY_PROMETHEUS_PORT", "19090"),
        ("DYN_FORWARDPASS_METRIC_PORT", "20380"),
        ("DYN_COMPONENT", "worker"),
    ] {
        assert_eq!(env_value(main, name).as_deref(), Some(value), "{name}");
    }
    assert_eq!(env_value(main, "DYN_NAMESPACE_WORKER_SUFFIX"), None);
    assert_eq!(env_value(main, "DYNAMO_PORT"), None);
}

#[test]
fn planner_defaults_and_service_account() {
    let dcd = conformance_dcd("v1beta1", "sglang-disagg-planner.yaml", "Planner");
    let spec = pod(&dcd);
    let main = main_of(&spec);
    let ports: Vec<_> = main
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.container_port))
        .collect();
    assert_eq!(
        ports,
        [("metrics".to_string(), 9085), ("system".to_string(), 9090)]
    );
    assert_eq!(
        env_value(main, "PLANNER_PROMETHEUS_PORT").as_deref(),
        Some("9085")
    );
    assert_eq!(env_value(main, "DYN_SYSTEM_PORT").as_deref(), Some("9090"));
    assert!(main.startup_probe.is_some());
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some("planner-serviceaccount")
    );
}

#[test]
fn a_component_without_a_type_gets_the_common_defaults() {
    let mut dcd = worker();
    dcd.spec.component.r#type = None;
    dcd.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(labels::DYNAMO_COMPONENT_TYPE);
    let spec = pod(&dcd);
    let main = main_of(&spec);
    assert_eq!(main.ports, None);
    assert_eq!(main.liveness_probe, None);
    assert_eq!(env_value(main, "DYN_COMPONENT"), None);
    assert!(!pod_labels(&dcd).contains_key(labels::DYNAMO_COMPONENT_TYPE));
    // Without user command the common shell command stays.
    main_mut(&mut dcd).command = None;
    assert_eq!(
        main_of(&pod(&dcd)).command,
        Some(vec!["/bin/sh".to_string(), "-c".to_string()])
    );
}

#[test]
fn user_values_in_the_pod_template_win_over_defaults() {
    let mut dcd = frontend();
    {
        let main = main_mut(&mut dcd);
        main.command = Some(vec![
            "python3".into(),
            "-m".into(),
            "dynamo.frontend".into(),
        ]);
        main.args = Some(vec!["--http-port".into(), "8080".into()]);
        main.env = Some(vec![
            EnvVar {
                name: "DYN_NAMESPACE".into(),
                value: Some("mine".into()),
                value_from: None,
            },
            EnvVar {
                name: "A_USER_VAR".into(),
                value: Some("x".into()),
                value_from: None,
            },
        ]);
        main.ports = Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }]);
        main.liveness_probe = Some(Probe {
            period_seconds: Some(99),
            ..Default::default()
        });
        main.image_pull_policy = Some("Always".into());
    }
    {
        let spec = user_spec_mut(&mut dcd);
        spec.termination_grace_period_seconds = Some(5);
        spec.restart_policy = Some("Never".into());
        spec.service_account_name = Some("my-sa".into());
        spec.security_context = Some(PodSecurityContext {
            run_as_user: Some(0),
            ..Default::default()
        });
        spec.node_selector = Some([("gpu".to_string(), "a100".to_string())].into());
        spec.containers.push(Container {
            name: "sidecar".into(),
            image: Some("busybox".into()),
            ..Default::default()
        });
    }
    let spec = pod(&dcd);
    let main = main_of(&spec);
    assert_eq!(main.args, Some(vec!["--http-port".into(), "8080".into()]));
    assert_eq!(env_value(main, "DYN_NAMESPACE").as_deref(), Some("mine"));
    assert_eq!(env_value(main, "A_USER_VAR").as_deref(), Some("x"));
    // Defaults the user did not touch stay.
    assert_eq!(env_value(main, "DYNAMO_PORT").as_deref(), Some("8000"));
    assert_eq!(main.ports.as_ref().unwrap().len(), 1);
    assert_eq!(main.ports.as_ref().unwrap()[0].container_port, 8080);
    // A user probe replaces the default one whole.
    assert_eq!(
        probe_json(&main.liveness_probe),
        json!({"periodSeconds": 99})
    );
    assert!(main.readiness_probe.is_some());
    assert_eq!(main.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(spec.termination_grace_period_seconds, Some(5));
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.service_account_name.as_deref(), Some("my-sa"));
    // A user security context is kept as given: no fsGroup default.
    assert_eq!(
        spec.security_context,
        Some(PodSecurityContext {
            run_as_user: Some(0),
            ..Default::default()
        })
    );
    assert_eq!(spec.node_selector.unwrap()["gpu"], "a100");
    let names: Vec<_> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["main", "sidecar"]);
    assert_eq!(spec.containers[1].image.as_deref(), Some("busybox"));
    assert_eq!(spec.containers[1].env, None, "sidecars are kept as written");
}

#[test]
fn shared_memory_default_size_and_zero() {
    let shm = |dcd: &DynamoComponentDeployment| {
        let spec = pod(dcd);
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "shared-memory")
            .cloned();
        let mounted = main_of(&spec)
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "shared-memory" && m.mount_path == "/dev/shm");
        (volume, mounted)
    };
    let mut dcd = worker();
    let (volume, mounted) = shm(&dcd);
    assert!(mounted);
    assert_eq!(
        serde_json::to_value(volume.unwrap()).unwrap(),
        json!({"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}})
    );
    dcd.spec.component.shared_memory_size = Some(Quantity("16Gi".into()));
    let (volume, _) = shm(&dcd);
    assert_eq!(
        volume.unwrap().empty_dir.unwrap().size_limit,
        Some(Quantity("16Gi".into()))
    );
    for zero in ["0", "0Gi", "0.0"] {
        dcd.spec.component.shared_memory_size = Some(Quantity(zero.into()));
        assert_eq!(shm(&dcd), (None, false), "{zero}");
    }
}

#[test]
fn shared_memory_replaces_a_user_volume_and_mount_of_the_same_name_or_path() {
    let mut dcd = worker();
    user_spec_mut(&mut dcd).volumes = Some(vec![
        Volume {
            name: "shared-memory".into(),
            ..Default::default()
        },
        Volume {
            name: "cache".into(),
            ..Default::default()
        },
    ]);
    main_mut(&mut dcd).volume_mounts = Some(vec![
        k8s_openapi::api::core::v1::VolumeMount {
            name: "mine".into(),
            mount_path: "/dev/shm".into(),
            ..Default::default()
        },
        k8s_openapi::api::core::v1::VolumeMount {
            name: "cache".into(),
            mount_path: "/cache".into(),
            ..Default::default()
        },
    ]);
    let spec = pod(&dcd);
    let volumes: Vec<_> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(volumes, ["cache", "shared-memory"]);
    let mounts: Vec<_> = main_of(&spec)
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert_eq!(mounts, [("cache", "/cache"), ("shared-memory", "/dev/shm")]);
}

#[test]
fn deployment_metadata_labels_and_owner() {
    let mut dcd = worker();
    dcd.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_with(Default::default)
        .labels = Some([("team".to_string(), "a".to_string())].into());
    annotate(
        &mut dcd,
        "nvidia.com/dynamo-operator-origin-version",
        "1.2.0",
    );
    annotate(&mut dcd, "note", "kept");
    let d = deployment_of(&dcd);
    assert_eq!(d.name_any(), "vllm-agg-vllmdecodeworker");
    assert_eq!(d.namespace().as_deref(), Some("ns"));
    let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.controller
        ),
        (
            "DynamoComponentDeployment",
            "vllm-agg-vllmdecodeworker",
            "dcd-uid",
            Some(true)
        )
    );
    let expected: BTreeMap<String, String> = [
        (labels::DYNAMO_GRAPH_DEPLOYMENT_NAME, "vllm-agg"),
        (labels::DYNAMO_COMPONENT, "VllmDecodeWorker"),
        (labels::DYNAMO_COMPONENT_TYPE, "worker"),
        (labels::DYNAMO_NAMESPACE, "ns-vllm-agg"),
        ("team", "a"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(d.metadata.labels.clone().unwrap(), expected);
    assert_eq!(
        d.metadata.annotations.clone().unwrap(),
        BTreeMap::from([("note".to_string(), "kept".to_string())])
    );
    let template = d.spec.unwrap().template.metadata.unwrap();
    let mut pod_expected = expected.clone();
    for (k, v) in [
        (labels::SELECTOR, "vllm-agg-vllmdecodeworker"),
        ("nvidia.com/metrics-enabled", "true"),
        ("nvidia.com/dynamo-discovery-backend", "kubernetes"),
        ("nvidia.com/dynamo-discovery-enabled", "true"),
    ] {
        pod_expected.insert(k.into(), v.into());
    }
    assert_eq!(template.labels.unwrap(), pod_expected);
    assert_eq!(
        template.annotations.unwrap(),
        BTreeMap::from([("note".to_string(), "kept".to_string())])
    );
}

#[test]
fn the_dcds_identity_labels_win_over_the_pod_templates() {
    let mut dcd = worker();
    dcd.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_with(Default::default)
        .labels = Some(
        [
            (labels::DYNAMO_COMPONENT.to_string(), "other".to_string()),
            (labels::SELECTOR.to_string(), "other".to_string()),
        ]
        .into(),
    );
    let l = pod_labels(&dcd);
    assert_eq!(l[labels::DYNAMO_COMPONENT], "VllmDecodeWorker");
    assert_eq!(l[labels::SELECTOR], "vllm-agg-vllmdecodeworker");
}

#[test]
fn dynamo_namespace_from_label_global_or_standalone() {
    let mut dcd = worker();
    dcd.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(labels::DYNAMO_NAMESPACE.into(), "custom".into());
    assert_eq!(
        env_value(main_of(&pod(&dcd)), "DYN_NAMESPACE").as_deref(),
        Some("custom")
    );
    let mut global = worker();
    global.spec.component.global_dynamo_namespace = true;
    assert_eq!(
        env_value(main_of(&pod(&global)), "DYN_NAMESPACE").as_deref(),
        Some("dynamo")
    );
    // A standalone DCD (no graph label or owner) is its own graph.
    let mut alone = worker();
    alone.metadata.labels = None;
    alone.metadata.owner_references = None;
    let spec = pod(&alone);
    assert_eq!(
        env_value(main_of(&spec), "DYN_NAMESPACE").as_deref(),
        Some("ns-vllm-agg-vllmdecodeworker")
    );
    assert_eq!(env_value(main_of(&spec), "DYN_PARENT_DGD_K8S_NAME"), None);
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    // The owner reference names the graph when the label is missing.
    let mut owned = worker();
    owned.metadata.labels = None;
    assert_eq!(
        env_value(main_of(&pod(&owned)), "DYN_NAMESPACE").as_deref(),
        Some("ns-vllm-agg")
    );
    // Dots in the graph name become dashes.
    let mut dotted = worker();
    dotted
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.into(), "a.b".into());
    assert_eq!(
        env_value(main_of(&pod(&dotted)), "DYN_NAMESPACE").as_deref(),
        Some("ns-a-b")
    );
}

#[test]
fn metrics_label_can_be_disabled() {
    let mut dcd = worker();
    annotate(&mut dcd, labels::ENABLE_METRICS, "false");
    assert!(!pod_labels(&dcd).contains_key("nvidia.com/metrics-enabled"));
    annotate(&mut dcd, labels::ENABLE_METRICS, "yes");
    assert_eq!(pod_labels(&dcd)["nvidia.com/metrics-enabled"], "true");
}

#[test]
fn etcd_discovery_drops_discovery_labels_env_and_worker_services() {
    let mut dcd = worker();
    annotate(&mut dcd, labels::DYNAMO_DISCOVERY_BACKEND, "etcd");
    let r = render(&dcd);
    assert_eq!(
        r.service, None,
        "workers get a Service only with Kubernetes discovery"
    );
    let spec = pod(&dcd);
    assert_eq!(env_value(main_of(&spec), "DYN_DISCOVERY_BACKEND"), None);
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let l = pod_labels(&dcd);
    assert!(!l.contains_key("nvidia.com/dynamo-discovery-backend"));
    assert!(!l.contains_key("nvidia.com/dynamo-discovery-enabled"));
    // A frontend keeps its Service.
    let mut fe = frontend();
    annotate(&mut fe, labels::DYNAMO_DISCOVERY_BACKEND, "etcd");
    let svc = render(&fe).service.unwrap();
    assert!(
        !svc.metadata
            .labels
            .unwrap()
            .contains_key("nvidia.com/dynamo-discovery-enabled")
    );
}

/// The operator's default backend (`--discovery-backend`, `discovery.backend`) decides for a DCD
/// without the annotation; the annotation wins either way.
#[test]
fn the_operators_discovery_default_applies_without_the_annotation() {
    use reconcilers::discovery::DiscoveryBackend;
    let with = |dcd: &DynamoComponentDeployment, discovery: DiscoveryBackend| {
        let pods = Pods {
            infrastructure: &Infrastructure::default(),
            account: None,
            pull_secrets: &PullSecrets::default(),
            checkpoint: None,
            discovery,
        };
        render_with(dcd, &pods).service.is_some()
    };
    let mut dcd = worker();
    assert!(with(&dcd, DiscoveryBackend::Kubernetes));
    assert!(
        !with(&dcd, DiscoveryBackend::Etcd),
        "etcd: no worker Service"
    );
    annotate(&mut dcd, labels::DYNAMO_DISCOVERY_BACKEND, "kubernetes");
    assert!(with(&dcd, DiscoveryBackend::Etcd), "the annotation wins");
}

#[test]
fn container_discovery_mode_adds_its_env() {
    let mut dcd = worker();
    annotate(&mut dcd, labels::DYNAMO_KUBE_DISCOVERY_MODE, "container");
    let spec = pod(&dcd);
    let main = main_of(&spec);
    assert_eq!(env_value(main, "CONTAINER_NAME").as_deref(), Some("main"));
    assert_eq!(
        env_value(main, "DYN_KUBE_DISCOVERY_MODE").as_deref(),
        Some("container")
    );
}

#[test]
fn strategy_defaults_and_annotations() {
    let strategy = |dcd: &DynamoComponentDeployment| {
        serde_json::to_value(deployment_of(dcd).spec.unwrap().strategy).unwrap()
    };
    let mut dcd = worker();
    assert_eq!(
        strategy(&dcd),
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    );
    annotate(&mut dcd, labels::DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE, "1");
    annotate(
        &mut dcd,
        labels::DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE,
        "0%",
    );
    assert_eq!(
        strategy(&dcd),
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "0%"}})
    );
    annotate(&mut dcd, labels::DEPLOYMENT_STRATEGY, "Recreate");
    assert_eq!(strategy(&dcd), json!({"type": "Recreate"}));
}

#[test]
fn replicas_are_applied_whenever_the_dcd_sets_them() {
    let replicas = |dcd: &DynamoComponentDeployment| deployment_of(dcd).spec.unwrap().replicas;
    let mut dcd = worker();
    dcd.spec.component.replicas = Some(3);
    assert_eq!(replicas(&dcd), Some(3));
    assert_eq!(applied_replicas(&dcd), Some(3));
    dcd.spec.component.replicas = Some(0);
    assert_eq!(replicas(&dcd), Some(0));
    dcd.spec.component.replicas = None;
    assert_eq!(replicas(&dcd), None);
    let body = serde_json::to_value(deployment_of(&dcd)).unwrap();
    assert!(
        body["spec"].get("replicas").is_none(),
        "left out of the applied body"
    );
    // A scaling adapter's count (written into the DCD by its controller) is applied too.
    dcd.spec.component.replicas = Some(3);
    dcd.spec.component.scaling_adapter = Some(ScalingAdapter {});
    assert_eq!(replicas(&dcd), Some(3));
}

#[test]
fn an_unset_adapter_count_holds_the_live_one() {
    let mut dcd = worker();
    dcd.spec.component.replicas = None;
    assert_eq!(held_replicas(&dcd, Some(4)), None, "no adapter: left out");
    dcd.spec.component.scaling_adapter = Some(ScalingAdapter {});
    assert_eq!(held_replicas(&dcd, Some(4)), Some(4));
    assert_eq!(held_replicas(&dcd, Some(0)), Some(0));
    assert_eq!(
        held_replicas(&dcd, None),
        None,
        "no live workload: API default"
    );
    dcd.spec.component.replicas = Some(2);
    assert_eq!(held_replicas(&dcd, Some(4)), Some(2), "a set count wins");
    dcd.spec.component.replicas = None;
    let mut workload = render(&dcd).workload;
    hold_replicas(&mut workload, Some(4));
    let Workload::Deployment(dep) = &workload else {
        panic!()
    };
    assert_eq!(dep.spec.as_ref().unwrap().replicas, Some(4));
    let mut multinode = conformance_dcd("v1beta1", "sglang-disagg-multinode.yaml", "decode");
    multinode.spec.component.replicas = None;
    let mut workload = render(&multinode).workload;
    hold_replicas(&mut workload, Some(2));
    let Workload::LeaderWorkerSet(lws) = &workload else {
        panic!()
    };
    assert_eq!(lws.data["spec"]["replicas"], 2);
}

#[test]
fn services_per_component_type() {
    let svc = |dcd: &DynamoComponentDeployment| -> Service { render(dcd).service.unwrap() };
    let fe = svc(&frontend());
    assert_eq!(fe.name_any(), "vllm-agg-frontend");
    let spec = fe.spec.clone().unwrap();
    assert_eq!(
        serde_json::to_value(&spec.ports).unwrap(),
        json!([{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}])
    );
    assert_eq!(
        spec.selector.unwrap(),
        BTreeMap::from([
            (
                labels::DYNAMO_COMPONENT_TYPE.to_string(),
                "frontend".to_string()
            ),
            (
                labels::DYNAMO_NAMESPACE.to_string(),
                "ns-vllm-agg".to_string()
            ),
            (labels::DYNAMO_COMPONENT.to_string(), "Frontend".to_string()),
        ])
    );
    let labels_ = fe.metadata.labels.clone().unwrap();
    assert_eq!(labels_["nvidia.com/dynamo-discovery-backend"], "kubernetes");
    assert_eq!(labels_["nvidia.com/dynamo-discovery-enabled"], "true");
    assert_eq!(fe.metadata.owner_references.unwrap()[0].uid, "dcd-uid");
    let w = svc(&worker());
    assert_eq!(
        serde_json::to_value(w.spec.unwrap().ports).unwrap(),
        json!([{"name": "system", "port": 9090, "targetPort": "system", "protocol": "TCP"}])
    );
    let mut epp = worker();
    epp.spec.component.r#type = Some(ComponentType::Epp);
    assert_eq!(
        serde_json::to_value(svc(&epp).spec.unwrap().ports).unwrap(),
        json!([{"name": "grpc", "port": 9002, "targetPort": 9002, "protocol": "TCP", "appProtocol": "http2"}])
    );
}

#[test]
fn service_names_are_normalized() {
    let mut dcd = frontend();
    dcd.metadata.name = Some("Qwen3-0.6B-frontend".into());
    assert_eq!(
        render(&dcd).service.unwrap().name_any(),
        "qwen3-0-6b-frontend"
    );
    assert_eq!(deployment_of(&dcd).name_any(), "Qwen3-0.6B-frontend");
}

#[test]
fn legacy_worker_selectors_keep_type_worker() {
    let mut dcd = conformance_dcd("v1beta1", "vllm-disagg.yaml", "VllmPrefillWorker");
    assert_eq!(pod_labels(&dcd)[labels::DYNAMO_COMPONENT_TYPE], "prefill");
    let own = dcd.metadata.labels.as_mut().unwrap();
    own.insert(labels::DYNAMO_COMPONENT_TYPE.into(), "worker".into());
    own.insert(labels::DYNAMO_WORKER_HASH.into(), "abc123".into());
    let l = pod_labels(&dcd);
    assert_eq!(l[labels::DYNAMO_COMPONENT_TYPE], "worker");
    assert_eq!(l[labels::DYNAMO_WORKER_HASH], "abc123");
    let main = pod(&dcd).containers[0].clone();
    assert_eq!(env_value(&main, "DYN_COMPONENT").as_deref(), Some("worker"));
    assert_eq!(
        env_value(&main, "DYN_NAMESPACE_WORKER_SUFFIX").as_deref(),
        Some("abc123")
    );
    assert_eq!(
        render(&dcd)
            .service
            .unwrap()
            .spec
            .unwrap()
            .selector
            .unwrap()[labels::DYNAMO_COMPONENT_TYPE],
        "worker"
    );
    assert_eq!(
        Identity::resolve(&dcd, Default::default()).runtime_namespace(),
        "ns-vllm-disagg-abc123"
    );
    // Without the worker hash it is the spec's type.
    dcd.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(labels::DYNAMO_WORKER_HASH);
    assert_eq!(pod_labels(&dcd)[labels::DYNAMO_COMPONENT_TYPE], "prefill");
    assert_eq!(
        Identity::resolve(&dcd, Default::default()).runtime_namespace(),
        "ns-vllm-disagg"
    );
}

/// The templates a render produces: the Deployment's pod template, or the LeaderWorkerSet's
/// leader and worker templates.
fn templates(dcd: &DynamoComponentDeployment) -> Vec<PodTemplateSpec> {
    match render(dcd).workload {
        Workload::Deployment(d) => vec![d.spec.unwrap().template],
        Workload::LeaderWorkerSet(l) => ["leaderTemplate", "workerTemplate"]
            .into_iter()
            .map(|t| {
                serde_json::from_value(l.data["spec"]["leaderWorkerTemplate"][t].clone()).unwrap()
            })
            .collect(),
    }
}

/// Upstream's worker defaults (`component_worker.go`): every worker-class `main` container gets
/// `DYN_FORWARDPASS_METRIC_PORT` = 20380, on every template (single node, LeaderWorkerSet
/// leader and worker), without a container port; no other type gets it; a user value wins
/// (`MergeEnvs`).
#[test]
fn forward_pass_metric_port_on_worker_class_main_containers() {
    // (manifest, component, type override, expected value)
    let rows: [(&str, &str, Option<ComponentType>, Option<&str>); 9] = [
        ("vllm-agg.yaml", "VllmDecodeWorker", None, Some("20380")),
        ("vllm-disagg.yaml", "VllmPrefillWorker", None, Some("20380")),
        ("vllm-disagg.yaml", "VllmDecodeWorker", None, Some("20380")),
        (
            "sglang-disagg-multinode.yaml",
            "decode",
            None,
            Some("20380"),
        ),
        (
            "sglang-disagg-multinode.yaml",
            "prefill",
            None,
            Some("20380"),
        ),
        ("vllm-agg.yaml", "Frontend", None, None),
        ("sglang-disagg-planner.yaml", "Planner", None, None),
        (
            "vllm-agg.yaml",
            "VllmDecodeWorker",
            Some(ComponentType::Epp),
            None,
        ),
        (
            "vllm-agg.yaml",
            "Frontend",
            Some(ComponentType::Worker),
            Some("20380"),
        ),
    ];
    for (file, component, type_, want) in rows {
        let mut dcd = conformance_dcd("v1beta1", file, component);
        if let Some(t) = type_ {
            dcd.spec.component.r#type = Some(t);
        }
        let at = format!("{file}: {component} as {:?}", dcd.spec.component.r#type);
        for template in templates(&dcd) {
            let spec = template.spec.unwrap();
            let main = main_of(&spec);
            assert_eq!(
                env_value(main, labels::ENV_FORWARDPASS_METRIC_PORT).as_deref(),
                want,
                "{at}"
            );
            assert!(
                !main
                    .ports
                    .iter()
                    .flatten()
                    .any(|p| p.container_port == labels::FORWARDPASS_METRIC_BASE_PORT),
                "{at}: no container port"
            );
        }
    }
    // The user's value wins.
    let mut dcd = worker();
    main_mut(&mut dcd)
        .env
        .get_or_insert_with(Vec::new)
        .push(EnvVar {
            name: labels::ENV_FORWARDPASS_METRIC_PORT.into(),
            value: Some("23456".into()),
            value_from: None,
        });
    assert_eq!(
        env_value(main_of(&pod(&dcd)), labels::ENV_FORWARDPASS_METRIC_PORT).as_deref(),
        Some("23456")
    );
}

/// Upstream's DCD labels (`GetDCDKubeLabels`, `getDCDWorkloadPodLabels`): a prefill or decode DCD
/// carries `nvidia.com/dynamo-sub-component-type` (its v1alpha1 sub-type) on the workload, its
/// pods (every LeaderWorkerSet template too) and the Service, over a label of that name the
/// DCD or its pod template sets; the legacy worker selector keeps it with component type
/// `worker`; other types carry none of their own (a DCD's own label is kept).
#[test]
fn sub_component_type_on_workload_pods_and_service() {
    struct Row {
        name: &'static str,
        file: &'static str,
        component: &'static str,
        own: &'static [(&'static str, &'static str)],
        template: &'static [(&'static str, &'static str)],
        component_type: &'static str,
        sub: Option<&'static str>,
    }
    let rows = [
        Row {
            name: "native prefill",
            file: "vllm-disagg.yaml",
            component: "VllmPrefillWorker",
            own: &[],
            template: &[],
            component_type: "prefill",
            sub: Some("prefill"),
        },
        Row {
            name: "native decode",
            file: "vllm-disagg.yaml",
            component: "VllmDecodeWorker",
            own: &[],
            template: &[],
            component_type: "decode",
            sub: Some("decode"),
        },
        Row {
            name: "multinode decode (LeaderWorkerSet)",
            file: "sglang-disagg-multinode.yaml",
            component: "decode",
            own: &[],
            template: &[],
            component_type: "decode",
            sub: Some("decode"),
        },
        Row {
            name: "the type wins over a pod template label",
            file: "vllm-disagg.yaml",
            component: "VllmPrefillWorker",
            own: &[],
            template: &[(labels::DYNAMO_SUB_COMPONENT_TYPE, "decode")],
            component_type: "prefill",
            sub: Some("prefill"),
        },
        Row {
            name: "legacy worker selector (decode)",
            file: "vllm-disagg.yaml",
            component: "VllmDecodeWorker",
            own: &[
                (labels::DYNAMO_COMPONENT_TYPE, "worker"),
                (labels::DYNAMO_WORKER_HASH, "db6b6891"),
            ],
            template: &[],
            component_type: "worker",
            sub: Some("decode"),
        },
        Row {
            name: "legacy worker selector with the same sub-type label",
            file: "sglang-disagg-multinode.yaml",
            component: "decode",
            own: &[
                (labels::DYNAMO_COMPONENT_TYPE, "worker"),
                (labels::DYNAMO_SUB_COMPONENT_TYPE, "decode"),
                (labels::DYNAMO_WORKER_HASH, "db6b6891"),
            ],
            template: &[],
            component_type: "worker",
            sub: Some("decode"),
        },
        Row {
            name: "aggregated worker: none",
            file: "vllm-agg.yaml",
            component: "VllmDecodeWorker",
            own: &[],
            template: &[],
            component_type: "worker",
            sub: None,
        },
        Row {
            name: "frontend: none",
            file: "vllm-agg.yaml",
            component: "Frontend",
            own: &[],
            template: &[],
            component_type: "frontend",
            sub: None,
        },
        Row {
            name: "a worker DCD's own label is kept",
            file: "vllm-agg.yaml",
            component: "VllmDecodeWorker",
            own: &[(labels::DYNAMO_SUB_COMPONENT_TYPE, "prefill")],
            template: &[],
            component_type: "worker",
            sub: Some("prefill"),
        },
    ];
    for row in rows {
        let mut dcd = conformance_dcd("v1beta1", row.file, row.component);
        let own = dcd.metadata.labels.get_or_insert_with(Default::default);
        for (k, v) in row.own {
            own.insert(k.to_string(), v.to_string());
        }
        if !row.template.is_empty() {
            let meta = dcd
                .spec
                .component
                .pod_template
                .get_or_insert_with(Default::default)
                .metadata
                .get_or_insert_with(Default::default);
            for (k, v) in row.template {
                meta.labels
                    .get_or_insert_with(Default::default)
                    .insert(k.to_string(), v.to_string());
            }
        }
        let at = row.name;
        let r = render(&dcd);
        let workload_labels = match &r.workload {
            Workload::Deployment(d) => d.metadata.labels.clone().unwrap(),
            Workload::LeaderWorkerSet(l) => l.metadata.labels.clone().unwrap(),
        };
        let service = r.service.clone().unwrap();
        let mut sets = vec![
            ("workload", workload_labels),
            ("Service", service.metadata.labels.clone().unwrap()),
        ];
        for t in templates(&dcd) {
            let pod_labels = t.metadata.unwrap().labels.unwrap();
            assert_eq!(
                pod_labels[labels::DYNAMO_COMPONENT_TYPE],
                row.component_type,
                "{at}"
            );
            sets.push(("pod", pod_labels));
        }
        for (place, l) in sets {
            assert_eq!(
                l.get(labels::DYNAMO_SUB_COMPONENT_TYPE).map(String::as_str),
                row.sub,
                "{at}: {place}"
            );
        }
        // The Service selector is unchanged: type, Dynamo namespace, component.
        let selector = service.spec.unwrap().selector.unwrap();
        assert_eq!(
            selector[labels::DYNAMO_COMPONENT_TYPE],
            row.component_type,
            "{at}"
        );
        assert!(
            !selector.contains_key(labels::DYNAMO_SUB_COMPONENT_TYPE),
            "{at}"
        );
    }
}

/// Upstream (`graph.go` `generateSingleDCD`, `GetDCDKubeLabels`): the graph stamps
/// `nvidia.com/dynamo-component-class: worker` on the worker DCDs of a graph with an EPP
/// component and their pod templates; the DCD's own value wins and reaches the workload, its
/// pods and the Service. Without it (no EPP component) none is rendered, also for legacy worker
/// selectors (upstream's non-EPP worker identity cases: Deployment, LeaderWorkerSet).
#[test]
fn component_class_from_the_dcd() {
    /// (manifest, component, DCD label, pod template label, legacy selector, expected)
    type Row = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        bool,
        Option<&'static str>,
    );
    let rows: [Row; 6] = [
        (
            "vllm-agg.yaml",
            "VllmDecodeWorker",
            Some("worker"),
            Some("worker"),
            false,
            Some("worker"),
        ),
        (
            "sglang-disagg-multinode.yaml",
            "decode",
            Some("worker"),
            Some("worker"),
            false,
            Some("worker"),
        ),
        (
            "vllm-agg.yaml",
            "VllmDecodeWorker",
            Some("worker"),
            Some("other"),
            false,
            Some("worker"),
        ),
        ("vllm-agg.yaml", "VllmDecodeWorker", None, None, false, None),
        (
            "vllm-disagg.yaml",
            "VllmDecodeWorker",
            None,
            None,
            true,
            None,
        ),
        (
            "sglang-disagg-multinode.yaml",
            "decode",
            None,
            None,
            true,
            None,
        ),
    ];
    for (file, component, own, template, legacy, want) in rows {
        let mut dcd = conformance_dcd("v1beta1", file, component);
        let at = format!("{file}: {component} {own:?} {template:?} legacy={legacy}");
        let labels_ = dcd.metadata.labels.get_or_insert_with(Default::default);
        if let Some(v) = own {
            labels_.insert(labels::DYNAMO_COMPONENT_CLASS.into(), v.into());
        }
        if legacy {
            labels_.insert(labels::DYNAMO_COMPONENT_TYPE.into(), "worker".into());
            labels_.insert(labels::DYNAMO_WORKER_HASH.into(), "db6b6891".into());
        }
        if let Some(v) = template {
            dcd.spec
                .component
                .pod_template
                .get_or_insert_with(Default::default)
                .metadata
                .get_or_insert_with(Default::default)
                .labels
                .get_or_insert_with(Default::default)
                .insert(labels::DYNAMO_COMPONENT_CLASS.into(), v.into());
        }
        let r = render(&dcd);
        let workload_labels = match &r.workload {
            Workload::Deployment(d) => d.metadata.labels.clone().unwrap(),
            Workload::LeaderWorkerSet(l) => l.metadata.labels.clone().unwrap(),
        };
        let mut sets = vec![
            ("workload", workload_labels),
            ("Service", r.service.unwrap().metadata.labels.unwrap()),
        ];
        for t in templates(&dcd) {
            let pod_labels = t.metadata.unwrap().labels.unwrap();
            if legacy {
                assert_eq!(pod_labels[labels::DYNAMO_COMPONENT_TYPE], "worker", "{at}");
                assert_eq!(
                    pod_labels[labels::DYNAMO_SUB_COMPONENT_TYPE],
                    "decode",
                    "{at}"
                );
            }
            sets.push(("pod", pod_labels));
        }
        for (place, l) in sets {
            assert_eq!(
                l.get(labels::DYNAMO_COMPONENT_CLASS).map(String::as_str),
                want,
                "{at}: {place}"
            );
        }
    }
}

#[test]
fn topology_annotations_come_from_the_dcd() {
    let mut dcd = worker();
    annotate(&mut dcd, labels::TOPOLOGY_LABEL_KEY, "from-template");
    dcd.metadata.annotations = Some(
        [(
            labels::TOPOLOGY_CLUSTER_TOPOLOGY_NAME.to_string(),
            "cluster".to_string(),
        )]
        .into(),
    );
    let a = deployment_of(&dcd).metadata.annotations.unwrap();
    assert!(!a.contains_key(labels::TOPOLOGY_LABEL_KEY));
    assert_eq!(a[labels::TOPOLOGY_CLUSTER_TOPOLOGY_NAME], "cluster");
}

#[test]
fn multinode_renders_a_leader_worker_set() {
    let mut dcd = conformance_dcd("v1beta1", "sglang-disagg-multinode.yaml", "decode");
    dcd.spec.component.replicas = Some(2);
    let r = render(&dcd);
    let Workload::LeaderWorkerSet(lws) = &r.workload else {
        panic!("multinode renders a LeaderWorkerSet");
    };
    assert_eq!(lws.name_any(), "sglang-disagg-multinode-decode-0");
    let body = serde_json::to_value(lws.as_ref()).unwrap();
    assert_eq!(body["apiVersion"], "leaderworkerset.x-k8s.io/v1");
    assert_eq!(body["kind"], "LeaderWorkerSet");
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "dcd-uid");
    let spec = &body["spec"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(spec["startupPolicy"], "LeaderCreated");
    assert_eq!(spec["leaderWorkerTemplate"]["size"], 2);
    for (template, role) in [("leaderTemplate", "leader"), ("workerTemplate", "worker")] {
        let l = &spec["leaderWorkerTemplate"][template]["metadata"]["labels"];
        assert_eq!(l["role"], role);
        assert!(l.get(labels::SELECTOR).is_none());
        assert_eq!(l[labels::DYNAMO_COMPONENT], "decode");
    }
    let svc = r.service.unwrap();
    assert_eq!(svc.spec.unwrap().selector.unwrap()["role"], "leader");
    // The replica rule applies to the LeaderWorkerSet too: an unset count is left out.
    dcd.spec.component.replicas = None;
    let Workload::LeaderWorkerSet(lws) = render(&dcd).workload else {
        panic!()
    };
    assert!(lws.data["spec"].get("replicas").is_none());
    // One node is a Deployment.
    dcd.spec.component.multinode = Some(MultinodeSpec { node_count: 1 });
    assert!(matches!(render(&dcd).workload, Workload::Deployment(_)));
}

/// The leader and worker pod specs of a multinode DCD.
fn leader_and_worker(dcd: &DynamoComponentDeployment) -> (PodSpec, PodSpec) {
    let [leader, worker]: [PodTemplateSpec; 2] =
        templates(dcd).try_into().expect("a LeaderWorkerSet");
    (leader.spec.unwrap(), worker.spec.unwrap())
}

/// Upstream's `generateLeaderWorkerSet - nominal case` (the launch wiring of its templates: a
/// vLLM engine whose TP × PP exceeds its GPUs runs a Ray cluster; the leader keeps its probes,
/// the worker has none) and the other backends on the LeaderWorkerSet: what
/// `pod_render::multinode` renders with the LeaderWorkerSet's addresses.
#[test]
fn leader_worker_set_templates_carry_the_launch_wiring() {
    let sglang = conformance_dcd("v1beta1", "sglang-disagg-multinode.yaml", "decode");
    fn main_mut(dcd: &mut DynamoComponentDeployment) -> &mut Container {
        dcd.spec
            .component
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers
            .iter_mut()
            .find(|c| c.name == "main")
            .unwrap()
    }

    // vLLM (upstream's case): Ray.
    let mut vllm = sglang.clone();
    vllm.spec.backend_framework = Some(api::BackendFramework::Vllm);
    let main = main_mut(&mut vllm);
    main.command = Some(vec!["some".into(), "dynamo".into(), "command".into()]);
    main.args = Some(vec![
        "--tensor-parallel-size".into(),
        "4".into(),
        "--pipeline-parallel-size".into(),
        "1".into(),
    ]);
    main.resources.as_mut().unwrap().limits = Some(BTreeMap::from([(
        "nvidia.com/gpu".into(),
        Quantity("1".into()),
    )]));
    let (leader, worker) = leader_and_worker(&vllm);
    let (leader, worker) = (main_of(&leader), main_of(&worker));
    assert_eq!(
        leader.command,
        Some(vec!["/bin/sh".to_string(), "-c".into()])
    );
    assert_eq!(
        leader.args,
        Some(vec!["ray start --head --port=6379 && some dynamo command --tensor-parallel-size 4 --pipeline-parallel-size 1 --distributed-executor-backend ray".to_string()])
    );
    assert!(
        leader.liveness_probe.is_some()
            && leader.readiness_probe.is_some()
            && leader.startup_probe.is_some()
    );
    assert_eq!(worker.command, leader.command);
    assert_eq!(
        worker.args,
        Some(vec![
            "ray start --address=$(LWS_LEADER_ADDRESS):6379 --block".to_string()
        ])
    );
    assert!(
        worker.liveness_probe.is_none()
            && worker.readiness_probe.is_none()
            && worker.startup_probe.is_none()
    );

    // vLLM with multiprocessing: the worker waits for the leader on the graph's script.
    let mut mp = vllm.clone();
    mp.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_with(Default::default)
        .annotations = Some(BTreeMap::from([(
        labels::VLLM_DISTRIBUTED_EXECUTOR_BACKEND.to_string(),
        "mp".to_string(),
    )]));
    main_mut(&mut mp).command = Some(vec!["python3".into(), "-m".into(), "dynamo.vllm".into()]);
    let (leader, worker) = leader_and_worker(&mp);
    assert!(leader.init_containers.is_none());
    assert_eq!(
        main_of(&leader).args.as_ref().unwrap()[4..],
        [
            "--distributed-executor-backend",
            "mp",
            "--nnodes",
            "2",
            "--master-addr",
            "$(LWS_LEADER_ADDRESS)",
            "--master-port",
            "29500",
            "--node-rank",
            "0"
        ]
    );
    let init = &worker.init_containers.as_ref().unwrap()[0];
    assert_eq!(init.name, "wait-for-leader-mp");
    assert_eq!(
        init.command.as_ref().unwrap()[2],
        "export LEADER_HOST=\"${LWS_LEADER_ADDRESS}\" LEADER_PORT=\"29500\" && exec python3 /scripts/wait-for-leader.py"
    );
    let script = worker
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "wait-leader-script")
        .unwrap();
    assert_eq!(
        script.config_map.as_ref().unwrap().name,
        "sglang-disagg-multinode-wait-leader-script"
    );

    // SGLang: the rendezvous flags, the worker's rank from the LeaderWorkerSet.
    let (leader, worker) = leader_and_worker(&sglang);
    let tail = |c: &Container| {
        c.args
            .clone()
            .unwrap()
            .split_off(c.args.as_ref().unwrap().len() - 6)
    };
    assert_eq!(
        tail(main_of(&leader)),
        [
            "--dist-init-addr",
            "$(LWS_LEADER_ADDRESS):29500",
            "--nnodes",
            "2",
            "--node-rank",
            "0"
        ]
    );
    assert_eq!(
        tail(main_of(&worker)),
        [
            "--dist-init-addr",
            "$(LWS_LEADER_ADDRESS):29500",
            "--nnodes",
            "2",
            "--node-rank",
            "$(LWS_WORKER_INDEX)"
        ]
    );
    assert!(main_of(&leader).liveness_probe.is_some());
    assert!(main_of(&worker).liveness_probe.is_none());

    // TensorRT-LLM: mpirun over SSH with the MPI key Secret on both.
    let mut trtllm = sglang.clone();
    trtllm.spec.backend_framework = Some(api::BackendFramework::Trtllm);
    main_mut(&mut trtllm).command =
        Some(vec!["python3".into(), "-m".into(), "dynamo.trtllm".into()]);
    let (leader, worker) = leader_and_worker(&trtllm);
    for spec in [&leader, &worker] {
        let secret = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "mpi-run-ssh-secret")
            .unwrap();
        assert_eq!(secret.secret.as_ref().unwrap().default_mode, Some(0o644));
        assert!(
            main_of(spec)
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == "/ssh-pk")
        );
    }
    let line = &main_of(&leader).args.as_ref().unwrap()[0];
    assert!(line.contains("mpirun $([ \"$(id -u)\" = \"0\" ] && echo --allow-run-as-root) --oversubscribe -n 8 -H $(LWS_LEADER_ADDRESS),$(echo \"$LWS_LEADER_ADDRESS\" | sed 's/\\./-1\\./')"), "{line}");
    assert!(
        line.contains("bash -c 'trtllm-llmapi-launch python3 -m dynamo.trtllm --model-path"),
        "{line}"
    );
    assert!(
        main_of(&worker).args.as_ref().unwrap()[0]
            .ends_with("/usr/sbin/sshd -D -f $HOME/.ssh/sshd_config")
    );
    assert_eq!(
        main_of(&worker)
            .readiness_probe
            .as_ref()
            .unwrap()
            .tcp_socket
            .as_ref()
            .unwrap()
            .port,
        IntOrString::Int(2222)
    );
}

#[test]
fn gpus_per_engine_and_replica() {
    let dcd = worker();
    assert_eq!(engine_gpus(&dcd), 1);
    assert_eq!(pod_gpus(Some(&pod(&dcd)), 1), 1);
    let multinode = conformance_dcd("v1beta1", "sglang-disagg-multinode.yaml", "decode");
    assert_eq!(engine_gpus(&multinode), 8, "4 GPUs per node, 2 nodes");
    assert_eq!(engine_gpus(&frontend()), 0);
    // With the GPU memory service main claims its GPUs instead: counted once, through the
    // pod's claim, even with both failover engines.
    let mut gms = worker();
    gms.spec.component.experimental = Some(api::v1beta1::ExperimentalSpec {
        gpu_memory_service: Some(Default::default()),
        failover: Some(Default::default()),
        ..Default::default()
    });
    let spec = pod(&gms);
    assert_eq!(spec.containers.iter().map(container_gpus).sum::<i64>(), 0);
    assert_eq!(pod_gpus(Some(&spec), engine_gpus(&gms)), 1);
}

/// The component pathway renders the GPU memory service and intra-pod failover: the claim
/// names the DCD's graph's template; the engines replace `main`.
#[test]
fn gms_and_failover_on_the_component_pathway() {
    let mut dcd = worker();
    dcd.spec.component.experimental = Some(api::v1beta1::ExperimentalSpec {
        gpu_memory_service: Some(Default::default()),
        failover: Some(Default::default()),
        ..Default::default()
    });
    let graph = dcd.graph_name().unwrap();
    let spec = pod(&dcd);
    let claim = &spec.resource_claims.as_ref().unwrap()[0];
    assert_eq!(
        claim.resource_claim_template_name.as_deref(),
        Some(pod_render::gms::resource_claim_template_name(&graph, "VllmDecodeWorker").as_str())
    );
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(&names[..2], ["engine-0", "engine-1"]);
    assert_eq!(spec.init_containers.as_ref().unwrap()[0].name, "gms-server");
}

/// A component with `modelRef` gets the base model's hash as a label and its name as an
/// annotation (upstream's `AddBaseModelLabel` / `AddBaseModelAnnotation` inside
/// `GetDCDKubeLabels` / `GetDCDKubeAnnotations`, which `generateDeployment`,
/// `generateLeaderWorkerSet` (labels only), the pod templates and `generateService` →
/// `GenerateComponentService` all use): on the pods, the Deployment or LeaderWorkerSet, and the
/// component Service (whose selector stays the component's). No `modelRef`, or an empty name:
/// none of them.
#[test]
fn base_model_label_and_annotation_on_pods_workload_and_service() {
    let rows = [
        (
            "vllm-agg.yaml",
            "VllmDecodeWorker",
            Some("Qwen/Qwen3-0.6B"),
            Some("fb68f5a6"),
        ),
        (
            "vllm-disagg.yaml",
            "VllmPrefillWorker",
            Some("llama-3-70b-instruct-v1"),
            Some("c21c2fb2"),
        ),
        (
            "sglang-disagg-multinode.yaml",
            "decode",
            Some("Qwen/Qwen3-0.6B"),
            Some("fb68f5a6"),
        ),
        ("vllm-agg.yaml", "VllmDecodeWorker", Some(""), None),
        ("vllm-agg.yaml", "VllmDecodeWorker", None, None),
    ];
    for (file, component, model, hash) in rows {
        let at = format!("{file} {component} {model:?}");
        let mut dcd = conformance_dcd("v1beta1", file, component);
        dcd.spec.component.model_ref = model.map(|name| api::common::ModelReference {
            name: name.into(),
            revision: None,
        });
        let name = model.filter(|_| hash.is_some());
        let check = |what: &str, meta: ObjectMeta, annotated: bool| {
            let label = meta.labels.unwrap_or_default();
            assert_eq!(
                label
                    .get(labels::DYNAMO_BASE_MODEL_HASH)
                    .map(String::as_str),
                hash,
                "{at} {what} label"
            );
            if annotated {
                let annotations = meta.annotations.unwrap_or_default();
                assert_eq!(
                    annotations
                        .get(labels::DYNAMO_BASE_MODEL)
                        .map(String::as_str),
                    name,
                    "{at} {what} annotation"
                );
            }
        };
        for t in templates(&dcd) {
            check("pod", t.metadata.unwrap(), true);
        }
        let r = render(&dcd);
        match &r.workload {
            Workload::Deployment(d) => check("Deployment", d.metadata.clone(), true),
            // Upstream's LeaderWorkerSet metadata has labels only.
            Workload::LeaderWorkerSet(l) => check("LeaderWorkerSet", l.metadata.clone(), false),
        }
        let service = r.service.unwrap();
        let selector = service.spec.clone().unwrap().selector.unwrap();
        assert!(
            !selector.contains_key(labels::DYNAMO_BASE_MODEL_HASH),
            "{at}"
        );
        check("Service", service.metadata, true);
    }
}

fn service_account(
    name: &str,
    labelled: Option<&str>,
) -> k8s_openapi::api::core::v1::ServiceAccount {
    k8s_openapi::api::core::v1::ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: labelled.map(|v| {
                BTreeMap::from([(labels::DYNAMO_COMPONENT_POD.to_string(), v.to_string())])
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The ServiceAccount of every pod template of `dcd` rendered with the namespace's `accounts`.
fn accounts_of(
    dcd: &DynamoComponentDeployment,
    accounts: &[k8s_openapi::api::core::v1::ServiceAccount],
) -> Vec<Option<String>> {
    let account = component_pod_account(accounts);
    let pods = Pods {
        infrastructure: &Infrastructure::default(),
        account: account.as_deref(),
        pull_secrets: &PullSecrets::default(),
        checkpoint: None,
        discovery: Default::default(),
    };
    pod_templates(dcd, &pods)
        .into_iter()
        .map(|t| t.spec.unwrap().service_account_name)
        .collect()
}

/// Every pod template of `dcd` rendered with `pods`.
fn pod_templates(dcd: &DynamoComponentDeployment, pods: &Pods<'_>) -> Vec<PodTemplateSpec> {
    match render_with(dcd, pods).workload {
        Workload::Deployment(d) => vec![d.spec.unwrap().template],
        Workload::LeaderWorkerSet(l) => ["leaderTemplate", "workerTemplate"]
            .into_iter()
            .map(|t| {
                serde_json::from_value::<PodTemplateSpec>(
                    l.data["spec"]["leaderWorkerTemplate"][t].clone(),
                )
                .unwrap()
            })
            .collect(),
    }
}

/// Upstream's `TestDynamoComponentDeploymentReconciler_generateLeaderWorkerSet` ServiceAccount
/// row (an SA `default-test-sa` labelled `nvidia.com/dynamo-component-pod: "true"` in the
/// namespace: leader and worker templates run as it; none: `default`), and the rule around it:
/// only accounts labelled `"true"` count, the first by name wins (upstream: its cache's list
/// order), and a name from the user, the planner/EPP defaults or Kubernetes discovery comes
/// first (upstream looks only when the pod spec has none).
#[test]
fn component_pod_service_account() {
    let standalone = |mut dcd: DynamoComponentDeployment| {
        dcd.metadata.labels = None;
        dcd.metadata.owner_references = None;
        dcd
    };
    let lws = standalone(conformance_dcd(
        "v1beta1",
        "sglang-disagg-multinode.yaml",
        "decode",
    ));
    let single = standalone(worker());
    let labelled = service_account("default-test-sa", Some("true"));
    let mut named = single.clone();
    named
        .spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .service_account_name = Some("my-sa".into());
    let mut planner = conformance_dcd("v1beta1", "sglang-disagg-planner.yaml", "Planner");
    planner.metadata.labels = None;
    planner.metadata.owner_references = None;
    let graph_worker = worker();
    let some = |names: &[&str]| {
        names
            .iter()
            .map(|n| Some(n.to_string()))
            .collect::<Vec<_>>()
    };
    let rows: Vec<(
        &str,
        &DynamoComponentDeployment,
        Vec<_>,
        Vec<Option<String>>,
    )> = vec![
        (
            "upstream row: LWS",
            &lws,
            vec![labelled.clone()],
            some(&["default-test-sa", "default-test-sa"]),
        ),
        (
            "no labelled account",
            &lws,
            vec![],
            some(&["default", "default"]),
        ),
        (
            "single node",
            &single,
            vec![labelled.clone()],
            some(&["default-test-sa"]),
        ),
        (
            "first by name",
            &single,
            vec![
                service_account("zz", Some("true")),
                service_account("aa", Some("true")),
            ],
            some(&["aa"]),
        ),
        (
            "only \"true\" counts",
            &single,
            vec![
                service_account("aa", Some("false")),
                service_account("bb", None),
            ],
            some(&["default"]),
        ),
        (
            "the user's name wins",
            &named,
            vec![labelled.clone()],
            some(&["my-sa"]),
        ),
        (
            "planner default wins",
            &planner,
            vec![labelled.clone()],
            some(&["planner-serviceaccount"]),
        ),
        (
            "discovery account wins",
            &graph_worker,
            vec![labelled.clone()],
            some(&["vllm-agg-k8s-service-discovery"]),
        ),
    ];
    for (row, dcd, accounts, expected) in rows {
        assert_eq!(accounts_of(dcd, &accounts), expected, "{row}");
    }
}

/// The DCD's `backendFramework` selects the backend when the command names none: a vLLM DCD
/// gets vLLM's compilation cache path, a DCD without one gets no cache path at all.
#[test]
fn the_dcds_backend_framework_selects_the_backend() {
    for (framework, want) in [
        (
            Some(api::BackendFramework::Vllm),
            Some(api::backend::VLLM_COMPILATION_CACHE_PATH),
        ),
        (None, None),
    ] {
        let mut dcd = worker();
        dcd.spec.backend_framework = framework;
        main_mut(&mut dcd).command = Some(vec!["/bin/sh".into(), "-c".into(), "serve".into()]);
        main_mut(&mut dcd).args = None;
        dcd.spec.component.compilation_cache = Some(api::v1beta1::CompilationCacheConfig {
            pvc_name: "cache".into(),
            mount_path: None,
        });
        let spec = pod(&dcd);
        let main = main_of(&spec);
        let mounted = main
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "cache")
            .map(|m| m.mount_path.as_str());
        assert_eq!(mounted, want, "{framework:?}");
        assert_eq!(
            env_value(main, pod_render::cache::VLLM_CACHE_ROOT).as_deref(),
            want,
            "{framework:?}"
        );
    }
}

/// The pull secrets of every pod template of `dcd` rendered with the namespace's `pull_secrets`.
fn pull_secrets_of(
    dcd: &DynamoComponentDeployment,
    pull_secrets: &PullSecrets,
) -> Vec<Vec<String>> {
    let pods = Pods {
        infrastructure: &Infrastructure::default(),
        account: None,
        pull_secrets,
        checkpoint: None,
        discovery: Default::default(),
    };
    pod_templates(dcd, &pods)
        .into_iter()
        .map(|t| {
            t.spec
                .unwrap()
                .image_pull_secrets
                .into_iter()
                .flatten()
                .map(|r| r.name)
                .collect()
        })
        .collect()
}

/// The component pathway attaches the namespace's discovered pull secrets as the Grove pathway
/// does (one renderer, `pod_render::pull_secrets`): on the Deployment's and both
/// LeaderWorkerSet templates, after the user's own, unless the pod template's annotation turns
/// discovery off.
#[test]
fn discovered_image_pull_secrets() {
    let nvcr: PullSecrets = [
        ("nvcr.io".to_string(), vec!["ngc".to_string()]),
        ("other.example".to_string(), vec!["other".to_string()]),
    ]
    .into_iter()
    .collect();
    let lws = conformance_dcd("v1beta1", "sglang-disagg-multinode.yaml", "decode");
    let single = worker();
    let mut explicit = single.clone();
    user_spec_mut(&mut explicit).image_pull_secrets =
        Some(vec![k8s_openapi::api::core::v1::LocalObjectReference {
            name: "mine".into(),
        }]);
    let mut off = single.clone();
    annotate(
        &mut off,
        pod_render::DISABLE_IMAGE_PULL_SECRET_DISCOVERY,
        "true",
    );
    let mut off_explicit = explicit.clone();
    annotate(
        &mut off_explicit,
        pod_render::DISABLE_IMAGE_PULL_SECRET_DISCOVERY,
        "true",
    );
    let none = PullSecrets::default();
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let rows: Vec<(
        &str,
        &DynamoComponentDeployment,
        &PullSecrets,
        Vec<Vec<String>>,
    )> = vec![
        ("single node", &single, &nvcr, vec![names(&["ngc"])]),
        (
            "both LeaderWorkerSet templates",
            &lws,
            &nvcr,
            vec![names(&["ngc"]), names(&["ngc"])],
        ),
        (
            "after the user's own",
            &explicit,
            &nvcr,
            vec![names(&["mine", "ngc"])],
        ),
        ("turned off", &off, &nvcr, vec![names(&[])]),
        (
            "turned off keeps the user's",
            &off_explicit,
            &nvcr,
            vec![names(&["mine"])],
        ),
        ("discovery off", &single, &none, vec![names(&[])]),
    ];
    for (row, dcd, pull_secrets, expected) in rows {
        assert_eq!(pull_secrets_of(dcd, pull_secrets), expected, "{row}");
    }
}
