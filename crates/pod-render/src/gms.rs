//! The GPU memory service inside the pod (`experimental.gpuMemoryService`, mode unset or
//! `IntraPod`), as upstream 1.5 renders it (`dra.ApplyClaim`, `gms.EnsureServerSidecar`,
//! `gms.EnsureClient`), applied to the finished pod:
//! - `main` (the first container) gets the pod's DRA claim instead of GPUs: every scalar GPU
//!   resource ([`api::gpu::is_gpu_resource`]) leaves its limits and requests, and
//!   `resources.claims` gets [`CLAIM`]; the pod gets the toleration `nvidia.com/gpu` (Exists,
//!   NoSchedule; once) and `resourceClaims: [{name: intrapod-shared-gpu,
//!   resourceClaimTemplateName: <dgd>-<component lowercased>-gpu}]`
//!   ([`resource_claim_template_name`], the template the graph creates), replacing an entry of
//!   that name;
//! - every GMS client (`main` and each `extraClientContainers` entry) gets the same claim, its
//!   GPUs removed, the socket volume [`SOCKET_VOLUME`] (emptyDir; a user volume of that name is
//!   replaced) mounted at [`SOCKET_DIR`] and `GMS_SOCKET_DIR=/gms-intrapod-control`: the
//!   operator owns these, a user mount or env var of that name is overwritten in place;
//! - the init container [`SERVER_CONTAINER`] (a native sidecar, `restartPolicy: Always`; no
//!   startup probe: clients retry the connection) runs `python3 -m
//!   gpu_memory_service.cli.server` with main's image, the env, the mount and the claim, unless
//!   the user already has an init container of that name (theirs wins).
//!
//! Labels, annotations, commands, probes and ports are not touched. `DYN_GMS_USE_V1` (which
//! later upstream revisions set when the component also has `experimental.checkpoint`) is not
//! set: it could not be placed in 1.5.0. Validation guarantees what this relies on: GPUs on
//! `main`, client names that exist once each, a graph the pod belongs to, and no inter-pod
//! mode (not supported).

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, PodResourceClaim, PodSpec, ResourceClaim, Toleration, Volume,
    VolumeMount,
};

use crate::PodInput;
use crate::parts::env;

/// Name of the GMS server init container.
pub const SERVER_CONTAINER: &str = "gms-server";
/// Python module of the GMS server.
pub const SERVER_MODULE: &str = "gpu_memory_service.cli.server";
/// Name of the socket volume the server and its clients share.
pub const SOCKET_VOLUME: &str = "gms-intrapod-control";
/// Mount path of the socket volume.
pub const SOCKET_DIR: &str = "/gms-intrapod-control";
/// Env var naming the socket directory.
pub const GMS_SOCKET_DIR: &str = "GMS_SOCKET_DIR";
/// Name of the pod-level DRA claim every GMS client shares.
pub const CLAIM: &str = "intrapod-shared-gpu";
/// Key of the taint GPU nodes carry (tolerated: DRA does not add the device plugin's
/// toleration).
pub const GPU_TOLERATION_KEY: &str = "nvidia.com/gpu";

/// `<dgd>-<component lowercased>-gpu`: the ResourceClaimTemplate of a component's GMS GPUs
/// (created by the graph, referenced by its pods).
pub fn resource_claim_template_name(graph: &str, component: &str) -> String {
    format!("{graph}-{}-gpu", component.to_lowercase())
}

/// Whether a rendered pod shares GPUs through the GMS claim (its GPUs are then in the claim's
/// template, not in the containers' resources).
pub fn shares_gpus(spec: &PodSpec) -> bool {
    spec.resource_claims
        .iter()
        .flatten()
        .any(|c| c.name == CLAIM)
}

/// Wire the GPU memory service into the rendered pod (see the module docs); nothing without
/// intra-pod GMS.
pub(crate) fn apply(spec: &mut PodSpec, input: &PodInput<'_>) {
    let Some(gms) = input.component.intra_pod_gms() else {
        return;
    };
    if spec.containers.is_empty() {
        return;
    }
    let template =
        resource_claim_template_name(input.graph.unwrap_or_default(), &input.component.name);
    let mut main = spec.containers.remove(0);
    pod_claim(spec, &template);
    client(spec, &mut main);
    if !spec
        .init_containers
        .iter()
        .flatten()
        .any(|c| c.name == SERVER_CONTAINER)
    {
        let server = server(main.image.clone());
        spec.init_containers
            .get_or_insert_with(Vec::new)
            .push(server);
    }
    spec.containers.insert(0, main);
    for name in &gms.extra_client_containers {
        let Some(index) = spec.containers.iter().position(|c| &c.name == name) else {
            continue;
        };
        let mut container = spec.containers.remove(index);
        client(spec, &mut container);
        spec.containers.insert(index, container);
    }
}

/// The pod-level half of upstream's `ApplyClaim` (main's half is [`client`]'s): the GPU
/// toleration and the pod's claim on `template`.
fn pod_claim(spec: &mut PodSpec, template: &str) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    if !tolerations.iter().any(|t| {
        t.key.as_deref() == Some(GPU_TOLERATION_KEY) && t.effect.as_deref() == Some("NoSchedule")
    }) {
        tolerations.push(Toleration {
            key: Some(GPU_TOLERATION_KEY.into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        });
    }
    let pod_claim = PodResourceClaim {
        name: CLAIM.into(),
        resource_claim_template_name: Some(template.into()),
        ..Default::default()
    };
    let claims = spec.resource_claims.get_or_insert_with(Vec::new);
    match claims.iter_mut().find(|c| c.name == CLAIM) {
        Some(existing) => *existing = pod_claim,
        None => claims.push(pod_claim),
    }
}

/// The container's scalar GPUs removed and the shared claim added (once).
fn claim_container(container: &mut Container) {
    let resources = container.resources.get_or_insert_with(Default::default);
    api::gpu::remove_gpu_resources(resources);
    let claims = resources.claims.get_or_insert_with(Vec::new);
    if !claims.iter().any(|c| c.name == CLAIM) {
        claims.push(ResourceClaim {
            name: CLAIM.into(),
            request: None,
        });
    }
}

/// A GMS client (upstream's `EnsureClient`): the socket volume, its mount, `GMS_SOCKET_DIR`
/// (each replacing what has its name, in place) and the claim. Idempotent.
fn client(spec: &mut PodSpec, container: &mut Container) {
    let volume = Volume {
        name: SOCKET_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    match volumes.iter_mut().find(|v| v.name == SOCKET_VOLUME) {
        Some(existing) => *existing = volume,
        None => volumes.push(volume),
    }
    let mount = socket_mount();
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    match mounts.iter_mut().find(|m| m.name == SOCKET_VOLUME) {
        Some(existing) => *existing = mount,
        None => mounts.push(mount),
    }
    let socket_dir = env(GMS_SOCKET_DIR, SOCKET_DIR);
    let vars = container.env.get_or_insert_with(Vec::new);
    match vars.iter_mut().find(|e| e.name == GMS_SOCKET_DIR) {
        Some(existing) => *existing = socket_dir,
        None => vars.push(socket_dir),
    }
    claim_container(container);
}

fn socket_mount() -> VolumeMount {
    VolumeMount {
        name: SOCKET_VOLUME.into(),
        mount_path: SOCKET_DIR.into(),
        ..Default::default()
    }
}

/// The GMS server: a native sidecar with main's image.
fn server(image: Option<String>) -> Container {
    Container {
        name: SERVER_CONTAINER.into(),
        image,
        command: Some(vec!["python3".into(), "-m".into(), SERVER_MODULE.into()]),
        env: Some(vec![env(GMS_SOCKET_DIR, SOCKET_DIR)]),
        volume_mounts: Some(vec![socket_mount()]),
        resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
            claims: Some(vec![ResourceClaim {
                name: CLAIM.into(),
                request: None,
            }]),
            ..Default::default()
        }),
        restart_policy: Some("Always".into()),
        ..Default::default()
    }
}
