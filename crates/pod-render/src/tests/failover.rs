//! Intra-pod failover: upstream's `failover_test.go` intra-pod cases (the vLLM-only revision)
//! as rows, through the whole pod (main already wired to the GPU memory service).

use super::gms::gms_worker;
use super::*;
use api::common::MultinodeSpec;
use api::v1beta1::{FailoverSpec, GpuMemoryServiceMode};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::failover::{self, ENGINE_COUNT};
use crate::gms::{CLAIM, SOCKET_VOLUME};

/// A vLLM worker with GMS, failover and a `frontend-sidecar` container.
fn failover_worker() -> DynamoComponentDeploymentSharedSpec {
    let mut c = gms_worker(&[]);
    c.pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers
        .push(container("frontend-sidecar"));
    c.experimental.as_mut().unwrap().failover = Some(FailoverSpec::default());
    c
}

fn engines(spec: &PodSpec) -> &[Container] {
    &spec.containers[..ENGINE_COUNT]
}

fn has_env(c: &Container, name: &str) -> bool {
    c.env.iter().flatten().any(|e| e.name == name)
}

/// `TestBuildFailoverPod_TwoEnginesPlusSidecar` and `TestIntraPodFailoverEngineContainerNames`.
#[test]
fn main_becomes_two_engines_before_the_sidecars() {
    let spec = render(&failover_worker(), Backend::Vllm);
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["engine-0", "engine-1", "frontend-sidecar"]);
    assert_eq!(failover::engine_names(), ["engine-0", "engine-1"]);
    assert_eq!(
        spec.init_containers.iter().flatten().count(),
        1,
        "one gms-server for both engines"
    );
}

/// `TestBuildFailoverPod_EmptyContainers`: a pod without containers is left alone.
#[test]
fn a_pod_without_containers_is_left_alone() {
    let c = failover_worker();
    let mut empty = PodSpec::default();
    failover::apply(&mut empty, &input(&c, Backend::Vllm));
    assert_eq!(empty, PodSpec::default());
}

/// `TestBuildFailoverPod_EngineEnvVars`, `_PreservesDiscoveryBackend`: the engines' identity,
/// lock and health env; main's endpoint-health and health-check env are gone, the discovery
/// backend stays; vLLM's shadow mode and side-channel ports.
#[test]
fn engine_env() {
    let spec = render(&failover_worker(), Backend::Vllm);
    for (i, engine) in engines(&spec).iter().enumerate() {
        let get = |name| env_of(engine, name);
        assert_eq!(get("ENGINE_ID"), Some(i.to_string()));
        assert_eq!(get("CONTAINER_NAME"), Some(format!("engine-{i}")));
        assert_eq!(
            get("FAILOVER_LOCK_PATH").as_deref(),
            Some("/gms-intrapod-control/failover.lock")
        );
        assert_eq!(
            get("DYN_SYSTEM_STARTING_HEALTH_STATUS").as_deref(),
            Some("notready")
        );
        assert_eq!(get("DYN_SYSTEM_ENABLED").as_deref(), Some("true"));
        assert!(!has_env(engine, "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"));
        assert!(!has_env(engine, "DYN_HEALTH_CHECK_ENABLED"));
        assert_eq!(get("DYN_DISCOVERY_BACKEND").as_deref(), Some("kubernetes"));
        assert_eq!(get("DYN_VLLM_GMS_SHADOW_MODE").as_deref(), Some("true"));
        assert_eq!(
            get("VLLM_NIXL_SIDE_CHANNEL_PORT"),
            Some((5600 + i).to_string())
        );
        // Late-revision extras are not rendered (not in 1.5.0).
        assert!(!has_env(engine, "DYN_GMS_FAILOVER_PRIMARY_ENGINE_ID"));
        assert!(!has_env(engine, "DYN_VLLM_GMS_LOCK_BEFORE_INIT"));
        let mut names: Vec<&str> = engine
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        let count = names.len();
        names.dedup();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count, "no env var twice");
    }
    let sidecar = &spec.containers[2];
    assert!(!has_env(sidecar, "ENGINE_ID"));
}

/// `TestBuildFailoverPod_StaggeredPorts` and `_ProbesRetargetedToNamedPort`.
#[test]
fn staggered_ports_and_probes() {
    let spec = render(&failover_worker(), Backend::Vllm);
    for (i, engine) in engines(&spec).iter().enumerate() {
        let name = format!("system-{i}");
        assert_eq!(
            env_of(engine, "DYN_SYSTEM_PORT"),
            Some((9090 + i).to_string())
        );
        let ports = engine.ports.clone().unwrap();
        assert_eq!(ports.len(), 1, "nixl is dropped");
        assert_eq!(
            (ports[0].name.as_deref(), ports[0].container_port),
            (Some(name.as_str()), 9090 + i as i32)
        );
        for probe in [
            &engine.startup_probe,
            &engine.liveness_probe,
            &engine.readiness_probe,
        ] {
            let port = &probe.as_ref().unwrap().http_get.as_ref().unwrap().port;
            assert_eq!(port, &IntOrString::String(name.clone()));
        }
    }
}

/// `TestBuildFailoverPod_PreservesDRAClaim`: each engine keeps main's claim and socket mount.
#[test]
fn engines_keep_the_claim() {
    let spec = render(&failover_worker(), Backend::Vllm);
    for engine in engines(&spec) {
        let claims: Vec<&str> = engine
            .resources
            .iter()
            .flat_map(|r| r.claims.iter().flatten())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(claims, [CLAIM]);
        assert!(mount(engine, SOCKET_VOLUME).is_some());
    }
}

/// `TestBuildFailoverPod_MultinodeNNODES` and `_SingleNodeNoNNODES`.
#[test]
fn nnodes_only_when_multinode() {
    let single = render(&failover_worker(), Backend::Vllm);
    let mut c = failover_worker();
    c.multinode = Some(MultinodeSpec { node_count: 4 });
    let multi = render(&c, Backend::Vllm);
    for i in 0..ENGINE_COUNT {
        assert!(!has_env(&single.containers[i], "NNODES"));
        assert_eq!(env_of(&multi.containers[i], "NNODES").as_deref(), Some("4"));
    }
}

/// vLLM's `--master-port` staggering on engine-1: appended when absent, shifted by 100 as an
/// argument pair, inside a shell line of the args, or inside the command.
#[test]
fn master_port_staggering() {
    /// Main's command and args, then engine-1's.
    type Row<'a> = (Vec<&'a str>, Vec<&'a str>, Vec<&'a str>, Vec<&'a str>);
    let rows: [Row; 4] = [
        (
            vec!["python3", "-m", "dynamo.vllm"],
            vec!["--model", "m"],
            vec!["python3", "-m", "dynamo.vllm"],
            vec!["--model", "m", "--master-port", "29600"],
        ),
        (
            vec!["python3", "-m", "dynamo.vllm"],
            vec!["--master-port", "30000"],
            vec!["python3", "-m", "dynamo.vllm"],
            vec!["--master-port", "30100"],
        ),
        (
            vec!["/bin/sh", "-c"],
            vec!["python3 -m dynamo.vllm --master-port 29500 --x 1"],
            vec!["/bin/sh", "-c"],
            vec!["python3 -m dynamo.vllm --master-port 29600 --x 1"],
        ),
        (
            vec!["sh", "-c", "python3 -m dynamo.vllm --master-port 1000"],
            vec![],
            vec!["sh", "-c", "python3 -m dynamo.vllm --master-port 1100"],
            vec![],
        ),
    ];
    for (command, args, want_command, want_args) in rows {
        let mut c = failover_worker();
        let main = c.main_container_mut().unwrap();
        main.command = Some(strings(&command));
        main.args = (!args.is_empty()).then(|| strings(&args));
        let spec = render(&c, Backend::Vllm);
        let (zero, one) = (&spec.containers[0], &spec.containers[1]);
        assert_eq!(
            zero.command.clone().unwrap(),
            strings(&command),
            "{command:?}"
        );
        assert_eq!(zero.args.clone().unwrap_or_default(), strings(&args));
        assert_eq!(one.command.clone().unwrap(), strings(&want_command));
        assert_eq!(one.args.clone().unwrap_or_default(), strings(&want_args));
    }
}

/// Only vLLM gets the vLLM settings (validation refuses failover for other backends).
#[test]
fn other_backends_get_no_vllm_settings() {
    let spec = render(&failover_worker(), Backend::Sglang);
    for engine in engines(&spec) {
        assert!(!has_env(engine, "DYN_VLLM_GMS_SHADOW_MODE"));
        assert!(!has_env(engine, "VLLM_NIXL_SIDE_CHANNEL_PORT"));
    }
}

/// `TestIsIntraPodFailoverEnabled`: intra-pod (or unset mode) clones; inter-pod, or no
/// failover, keeps `main`.
#[test]
fn intra_pod_failover_only() {
    for (mode, engines) in [
        (Some(Some(GpuMemoryServiceMode::IntraPod)), 2),
        (Some(None), 2),
        (Some(Some(GpuMemoryServiceMode::InterPod)), 1),
        (None, 1),
    ] {
        let mut c = failover_worker();
        c.experimental.as_mut().unwrap().failover = mode.map(|mode| FailoverSpec {
            mode,
            num_shadows: None,
        });
        assert_eq!(c.is_intra_pod_failover(), engines == 2, "{mode:?}");
        assert_eq!(failover::engine_containers(&c), engines);
        let spec = render(&c, Backend::Vllm);
        assert_eq!(spec.containers[0].name == "main", engines == 1, "{mode:?}");
    }
    let mut none = failover_worker();
    none.experimental = None;
    assert!(!none.is_intra_pod_failover());
}
