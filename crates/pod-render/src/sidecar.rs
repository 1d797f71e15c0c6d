//! The two sidecars a component can name.
//!
//! `frontendSidecar`: the named container of the pod template runs a Dynamo frontend beside
//! `main`. It keeps its name and place among the containers and gets the frontend's defaults
//! (command, args, `http` port, probes, env; its own name as `CONTAINER_NAME` in container
//! discovery mode) under its own values, as `main` does, and every volume mount of `main` it
//! does not have by name (the compilation cache and topology included; `/dev/shm` not). Its
//! runtime-gated defaults ([`crate::gates`]) follow its own image's tag, not the component's
//! version (`runtimeVersionOverride` and `main`'s image do not apply to it): a frontend image
//! whose tag is no version gets none.
//!
//! `dynamoSidecar` (worker-class components): the named init container (validation: it exists
//! with `restartPolicy: Always`, a native sidecar) runs the Dynamo runtime, and `main` runs only
//! the engine. The sidecar keeps its place among the init containers and gets, under its own
//! values (a probe of its own replaces the default whole, env merges by name):
//! - `restartPolicy: Always`, no command (the image's entrypoint), the `system` port 9090;
//! - the env of every Dynamo container (namespace, component type, graph, pod, discovery, the
//!   operator's infrastructure; its own name as `CONTAINER_NAME` in container discovery mode),
//!   `DYN_SYSTEM_ENABLED=true`, `DYN_SYSTEM_PORT=9090`, the worker generation's
//!   `DYN_NAMESPACE_WORKER_SUFFIX`, and the graph's env under its own; none of the engine's
//!   (`DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS`, `DYN_HEALTH_CHECK_ENABLED`, NIXL telemetry,
//!   `DYN_FORWARDPASS_METRIC_PORT`) and no resources;
//! - probes on `system` that cover its own listener, not model loading: startup `/live` every
//!   2 s (timeout 1 s, 30 failures), liveness `/live` and readiness `/health` every 5 s
//!   (timeout 4 s, 3 failures);
//! - the KV-transfer topology env and mount (instead of `main`).
//!
//! `main` then gets none of the operator's container defaults (command, ports, probes, env):
//! only the graph's env under its own, the compilation cache and `/dev/shm`. The component's
//! runtime version is the sidecar image's (or the override).

use api::runtime_version::RuntimeVersion;
use api::v1beta1::ComponentType;
use k8s_openapi::api::core::v1::{Container, PodSpec, VolumeMount};

use crate::parts::{env, http_probe, port};
use crate::{PodInput, SYSTEM_PORT, SYSTEM_PORT_NAME, common, defaults, env_names, merge};

/// Apply the frontend defaults to the container named `name` (validation guarantees it
/// exists; a missing one is left alone).
pub(crate) fn frontend(
    spec: &mut PodSpec,
    input: &PodInput<'_>,
    name: &str,
    main_mounts: &[VolumeMount],
) {
    let Some(user) = spec.containers.iter_mut().find(|c| c.name == name) else {
        return;
    };
    let version = user.image.as_deref().and_then(RuntimeVersion::from_image);
    let base = defaults(
        input,
        Some(ComponentType::Frontend),
        ComponentType::Frontend.as_str(),
        name,
        version,
    );
    let mut merged = merge::merge_container(base, Some(user));
    let mounts = merged.volume_mounts.get_or_insert_with(Vec::new);
    for mount in main_mounts {
        if !mounts.iter().any(|m| m.name == mount.name) {
            mounts.push(mount.clone());
        }
    }
    *user = merged;
}

/// The `dynamoSidecar` init container named `name` with the runtime's defaults under its own
/// values (and the graph's env under them), with its index among the pod's init containers;
/// `None` when the pod has no such init container (validation refuses that).
pub(crate) fn dynamo(
    spec: &PodSpec,
    input: &PodInput<'_>,
    name: &str,
) -> Option<(usize, Container)> {
    let inits = spec.init_containers.as_deref()?;
    let index = inits.iter().position(|c| c.name == name)?;
    let mut user = inits[index].clone();
    if !input.graph_env.is_empty() {
        user.env = Some(merge::merge_envs(
            input.graph_env.to_vec(),
            user.env.take().unwrap_or_default(),
        ));
    }
    let (mut base, mut vars) = common(input, input.component_type, name);
    base.command = None;
    base.restart_policy = Some("Always".into());
    base.ports = Some(vec![port(SYSTEM_PORT_NAME, SYSTEM_PORT)]);
    vars.extend([
        env("DYN_SYSTEM_ENABLED", "true"),
        env("DYN_SYSTEM_PORT", &SYSTEM_PORT.to_string()),
    ]);
    if let Some(hash) = input.worker_hash {
        vars.push(env(env_names::DYN_NAMESPACE_WORKER_SUFFIX, hash));
    }
    base.env = Some(vars);
    base.startup_probe = Some(http_probe("/live", SYSTEM_PORT_NAME, 0, 2, 1, 30));
    base.liveness_probe = Some(http_probe("/live", SYSTEM_PORT_NAME, 0, 5, 4, 3));
    base.readiness_probe = Some(http_probe("/health", SYSTEM_PORT_NAME, 0, 5, 4, 3));
    Some((index, merge::merge_container(base, Some(&user))))
}
