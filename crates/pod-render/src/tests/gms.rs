//! The GPU memory service inside the pod: upstream's `gms_test.go` (1.5-era revision) and
//! `dra_test.go` cases as rows, through the whole pod.

use super::*;
use api::v1beta1::{ExperimentalSpec, GpuMemoryServiceSpec};
use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, HostPathVolumeSource, ObjectFieldSelector, ResourceRequirements,
    Toleration, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::gms::{self, CLAIM, GMS_SOCKET_DIR, SERVER_CONTAINER, SOCKET_DIR, SOCKET_VOLUME};

fn quantities(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect(),
    )
}

/// A vLLM worker with GMS, `nvidia.com/gpu: 2` on main, and the `extra` containers.
pub(super) fn gms_worker(extra: &[&str]) -> DynamoComponentDeploymentSharedSpec {
    let mut main = container("main");
    main.command = Some(strings(&["python3", "-m", "dynamo.vllm"]));
    main.resources = Some(ResourceRequirements {
        limits: quantities(&[("nvidia.com/gpu", "2"), ("memory", "64Gi")]),
        requests: quantities(&[("nvidia.com/gpu", "2")]),
        ..Default::default()
    });
    let containers = std::iter::once(main)
        .chain(extra.iter().map(|n| container(n)))
        .collect();
    let mut c = component(ComponentType::Worker, containers);
    c.name = "Worker".into();
    c.experimental = Some(ExperimentalSpec {
        gpu_memory_service: Some(GpuMemoryServiceSpec {
            extra_client_containers: extra.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        }),
        ..Default::default()
    });
    c
}

fn user_spec(c: &mut DynamoComponentDeploymentSharedSpec) -> &mut PodSpec {
    c.pod_template.as_mut().unwrap().spec.as_mut().unwrap()
}

fn claims(c: &Container) -> Vec<&str> {
    c.resources
        .iter()
        .flat_map(|r| r.claims.iter().flatten())
        .map(|c| c.name.as_str())
        .collect()
}

fn resource_names(list: Option<&BTreeMap<String, Quantity>>) -> Vec<&str> {
    list.into_iter()
        .flatten()
        .map(|(k, _)| k.as_str())
        .collect()
}

fn gpu_tolerations(spec: &PodSpec) -> usize {
    spec.tolerations
        .iter()
        .flatten()
        .filter(|t| t.key.as_deref() == Some("nvidia.com/gpu"))
        .count()
}

/// `TestEnsureServerSidecar`, `TestApplyClaim_ReplacesGPUWithDRAClaim`,
/// `TestApplyClaim_AlwaysTargetsFirstContainer`: main's GPUs become the claim, the pod claims
/// the graph's template and tolerates GPU nodes, the server is a native sidecar without a
/// startup probe; a container that is no client gets nothing.
#[test]
fn main_gets_the_claim_and_the_server_sidecar() {
    let mut c = gms_worker(&[]);
    user_spec(&mut c).containers.push(container("sidecar"));
    let spec = render(&c, Backend::Vllm);
    let main = &spec.containers[0];
    let resources = main.resources.as_ref().unwrap();
    assert_eq!(resource_names(resources.limits.as_ref()), ["memory"]);
    assert_eq!(resources.requests, None, "the GPU request is gone too");
    assert_eq!(claims(main), [CLAIM]);
    assert!(
        claims(&spec.containers[1]).is_empty(),
        "only main is claimed"
    );
    assert!(mount(&spec.containers[1], SOCKET_VOLUME).is_none());

    let pod_claims = spec.resource_claims.clone().unwrap();
    assert_eq!(pod_claims.len(), 1);
    assert_eq!(
        (
            pod_claims[0].name.as_str(),
            pod_claims[0].resource_claim_template_name.as_deref()
        ),
        (CLAIM, Some("dgd-worker-gpu"))
    );
    assert_eq!(
        spec.tolerations.clone().unwrap(),
        [Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }]
    );

    let inits = spec.init_containers.clone().unwrap();
    assert_eq!(inits.len(), 1);
    let server = &inits[0];
    assert_eq!(server.name, SERVER_CONTAINER);
    assert_eq!(server.image, main.image);
    assert_eq!(
        server.command.clone().unwrap(),
        ["python3", "-m", "gpu_memory_service.cli.server"]
    );
    assert_eq!(server.args, None);
    assert_eq!(server.restart_policy.as_deref(), Some("Always"));
    assert!(
        server.startup_probe.is_none(),
        "clients drive readiness via connect-retry"
    );
    assert_eq!(claims(server), [CLAIM]);
    assert_eq!(env_of(server, GMS_SOCKET_DIR).as_deref(), Some(SOCKET_DIR));
    assert_eq!(
        mount(server, SOCKET_VOLUME).map(|m| m.mount_path.as_str()),
        Some(SOCKET_DIR)
    );

    assert_eq!(env_of(main, GMS_SOCKET_DIR).as_deref(), Some(SOCKET_DIR));
    assert_eq!(
        mount(main, SOCKET_VOLUME).map(|m| m.mount_path.as_str()),
        Some(SOCKET_DIR)
    );
    let socket = volume(&spec, SOCKET_VOLUME).unwrap();
    assert_eq!(socket.empty_dir, Some(Default::default()));
    // `TestEnsureServerSidecarDoesNotAddCheckpointControl`.
    assert!(volume(&spec, "gms-control").is_none());
    assert!(volume(&spec, "snapshot-control").is_none());
    // Not touched: command, probes, ports.
    assert_eq!(main.command, c.main_container().unwrap().command);
    assert!(
        main.ports
            .iter()
            .flatten()
            .any(|p| p.name.as_deref() == Some("system"))
    );
}

/// `TestEnsureServerSidecarIdempotent` and the once-only toleration
/// (`TestAddGPUToleration_Idempotent`): applying twice changes nothing.
#[test]
fn wiring_is_idempotent() {
    let c = gms_worker(&["loader"]);
    let once = render(&c, Backend::Vllm);
    let mut twice = once.clone();
    let input = input(&c, Backend::Vllm);
    gms::apply(&mut twice, &input);
    assert_eq!(twice, once);
    assert_eq!(twice.init_containers.iter().flatten().count(), 1);
    assert_eq!(gpu_tolerations(&twice), 1);
}

/// `TestEnsureClientOverridesOperatorOwnedSocketFields`: the operator owns the socket volume,
/// mount and env; a user toleration, a user pod claim of that name and a user `gms-server` are
/// handled as upstream does (kept once, replaced, kept).
#[test]
fn operator_owned_socket_fields_override_the_users() {
    let mut c = gms_worker(&[]);
    let spec = user_spec(&mut c);
    spec.volumes = Some(vec![Volume {
        name: SOCKET_VOLUME.into(),
        host_path: Some(HostPathVolumeSource {
            path: "/wrong".into(),
            type_: None,
        }),
        ..Default::default()
    }]);
    let main = &mut spec.containers[0];
    main.volume_mounts = Some(vec![VolumeMount {
        name: SOCKET_VOLUME.into(),
        mount_path: "/wrong".into(),
        ..Default::default()
    }]);
    main.env = Some(vec![EnvVar {
        name: GMS_SOCKET_DIR.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.name".into(),
                api_version: None,
            }),
            ..Default::default()
        }),
    }]);
    spec.tolerations = Some(vec![Toleration {
        key: Some("nvidia.com/gpu".into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    }]);
    let rendered = render(&c, Backend::Vllm);
    let socket = volume(&rendered, SOCKET_VOLUME).unwrap();
    assert!(socket.host_path.is_none() && socket.empty_dir.is_some());
    assert_eq!(
        rendered
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name == SOCKET_VOLUME)
            .count(),
        1
    );
    let main = &rendered.containers[0];
    let mounts: Vec<&VolumeMount> = main
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| m.name == SOCKET_VOLUME)
        .collect();
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0].mount_path, SOCKET_DIR);
    let socket_env: Vec<&EnvVar> = main
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == GMS_SOCKET_DIR)
        .collect();
    assert_eq!(socket_env.len(), 1);
    assert_eq!(socket_env[0].value.as_deref(), Some(SOCKET_DIR));
    assert!(socket_env[0].value_from.is_none());
    assert_eq!(claims(main), [CLAIM]);
    assert_eq!(gpu_tolerations(&rendered), 1);

    // A user gms-server wins; a user pod claim of that name points at the graph's template.
    let mut c = gms_worker(&[]);
    let spec = user_spec(&mut c);
    spec.init_containers = Some(vec![Container {
        name: SERVER_CONTAINER.into(),
        image: Some("mine:1".into()),
        ..Default::default()
    }]);
    spec.resource_claims = Some(vec![k8s_openapi::api::core::v1::PodResourceClaim {
        name: CLAIM.into(),
        resource_claim_name: Some("elsewhere".into()),
        ..Default::default()
    }]);
    let rendered = render(&c, Backend::Vllm);
    let inits = rendered.init_containers.unwrap();
    assert_eq!(inits.len(), 1);
    assert_eq!(inits[0].image.as_deref(), Some("mine:1"));
    let pod_claims = rendered.resource_claims.unwrap();
    assert_eq!(pod_claims.len(), 1);
    assert_eq!(pod_claims[0].resource_claim_name, None);
    assert_eq!(
        pod_claims[0].resource_claim_template_name.as_deref(),
        Some("dgd-worker-gpu")
    );
}

/// Each `extraClientContainers` entry gets the client wiring (claim, GPUs removed, mount, env);
/// its place among the containers is kept.
#[test]
fn extra_clients_are_wired() {
    let mut c = gms_worker(&["loader", "other"]);
    c.experimental
        .as_mut()
        .unwrap()
        .gpu_memory_service
        .as_mut()
        .unwrap()
        .extra_client_containers = vec!["other".into()];
    user_spec(&mut c).containers[2].resources = Some(ResourceRequirements {
        limits: quantities(&[("nvidia.com/gpu", "1"), ("cpu", "1")]),
        ..Default::default()
    });
    let spec = render(&c, Backend::Vllm);
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["main", "loader", "other"]);
    let other = &spec.containers[2];
    assert_eq!(claims(other), [CLAIM]);
    assert_eq!(
        resource_names(other.resources.as_ref().unwrap().limits.as_ref()),
        ["cpu"]
    );
    assert_eq!(env_of(other, GMS_SOCKET_DIR).as_deref(), Some(SOCKET_DIR));
    assert!(mount(other, SOCKET_VOLUME).is_some());
    let loader = &spec.containers[1];
    assert!(claims(loader).is_empty() && mount(loader, SOCKET_VOLUME).is_none());
}

/// Without GMS, or with inter-pod GMS (refused by validation; Grove would render it in its
/// own pods), the pod is not touched; `TestApplyClaim_EmptyContainers`: a pod without
/// containers is left alone.
#[test]
fn no_intra_pod_gms_no_wiring() {
    let mut c = gms_worker(&[]);
    let plain = {
        let mut p = c.clone();
        p.experimental = None;
        render(&p, Backend::Vllm)
    };
    c.experimental
        .as_mut()
        .unwrap()
        .gpu_memory_service
        .as_mut()
        .unwrap()
        .mode = Some(api::v1beta1::GpuMemoryServiceMode::InterPod);
    assert_eq!(render(&c, Backend::Vllm), plain);
    assert!(plain.init_containers.is_none() && plain.resource_claims.is_none());
    assert_eq!(
        resource_names(
            plain.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
        ),
        ["memory", "nvidia.com/gpu"]
    );

    let c = gms_worker(&[]);
    let input = input(&c, Backend::Vllm);
    let mut empty = PodSpec::default();
    gms::apply(&mut empty, &input);
    assert_eq!(empty, PodSpec::default());
}

/// `TestResourceClaimTemplateName`.
#[test]
fn claim_template_names() {
    for (graph, component, want) in [
        ("myapp", "Worker", "myapp-worker-gpu"),
        ("app", "VllmDecodeWorker", "app-vllmdecodeworker-gpu"),
    ] {
        assert_eq!(gms::resource_claim_template_name(graph, component), want);
    }
}

/// The pod shares its GPUs through the claim (what the DCD status counts).
#[test]
fn shares_gpus_reads_the_pod_claim() {
    assert!(gms::shares_gpus(&render(&gms_worker(&[]), Backend::Vllm)));
    let mut plain = gms_worker(&[]);
    plain.experimental = None;
    assert!(!gms::shares_gpus(&render(&plain, Backend::Vllm)));
}
