//! The pod of a Dynamo component, rendered once for both workload pathways: the component
//! pathway's Deployments and LeaderWorkerSets (`dcd-controller`) and the Grove pathway's
//! PodCliques (`grove-render`) call [`pod_spec`], so a default fixed here is fixed for both.
//! **Pure**: no client, no I/O; equal inputs give equal output.
//!
//! Layering (upstream's `GenerateBasePodSpec`):
//! 1. the operator's `main` container for the component type ([`base_container`]: command,
//!    ports, probes, env), some defaults gated on the component's Dynamo runtime version
//!    ([`gates`]; [`PodInput::runtime_version`], which both pathways resolve with
//!    `api::runtime_version::RuntimeVersion::of_component`);
//! 2. the graph's env under the user's `main` env, then the user's `main` container over the
//!    defaults ([`merge::merge_container`]: user values win, lists are replaced whole, objects
//!    merged, a user probe replaces the default probe, env vars merged by name and sorted);
//! 3. the pod-level defaults (termination grace, restart policy, `fsGroup`, the planner's
//!    ServiceAccount) under the user's pod spec;
//! 4. the discovery ServiceAccount; the volumes: the compilation cache ([`cache`]), the EPP's
//!    configuration or cache ([`epp`]), the topology wiring of KV-transfer-aware workers and
//!    `/dev/shm` ([`volumes`]); the user's other containers after `main`, the
//!    `frontendSidecar` container with the frontend's defaults, and the discovered image pull
//!    secrets of every container's and init container's image ([`pull_secrets`]). With
//!    `dynamoSidecar`, the named init container gets the runtime's defaults and the topology
//!    wiring, and `main` (the engine) none of step 1 (see `sidecar`). A pod nothing names a
//!    ServiceAccount for keeps none, as upstream's `GenerateBasePodSpec`: the component pathway
//!    then picks one (`dcd-controller`), the Grove pathway leaves it to the kubelet (`default`);
//! 5. for a multinode component, the backend's launch wiring of the engine container (before
//!    `/dev/shm` is mounted) and of the pod (after it) for the pod's [`Role`], written once for
//!    both pathways and parameterised by how the pathway's pods find each other ([`Deployer`]:
//!    LeaderWorkerSet or Grove; see [`multinode`]);
//! 6. last, on the finished pod: the GPU memory service inside the pod ([`gms`]), then
//!    intra-pod failover ([`failover`]: `main` becomes the engines `engine-0` and `engine-1`,
//!    both with the multinode wiring), then checkpoint restore ([`restore`]: a Ready checkpoint
//!    of a `WaitForCheckpoint` component restore-shapes the pod; [`restore::metadata`] gives
//!    both pathways the pod template's checkpoint labels and annotations).
//!
//! What is pathway-specific stays with the pathway: labels and annotations of the pod
//! template, and which [`Role`] and [`Deployer`] a pod is rendered for.

pub mod cache;
pub mod epp;
pub mod failover;
pub mod gates;
pub mod gms;
pub mod infrastructure;
pub mod merge;
pub mod multinode;
pub mod parts;
pub mod pull_secrets;
pub mod restore;
mod sidecar;
pub mod volumes;

use std::collections::BTreeMap;

use api::DynamoComponentDeploymentSharedSpec;
use api::labels;
use api::runtime_version::RuntimeVersion;
use api::v1beta1::{ComponentType, KvTransferPolicy, MAIN_CONTAINER_NAME};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSecurityContext, PodSpec};
use serde_json::Value;

pub use api::backend::{self, Backend};
pub use infrastructure::Infrastructure;
pub use merge::merge_envs;
pub use multinode::{Deployer, Role};
use parts::{env, field_env, http_probe, port};
pub use pull_secrets::{PullSecrets, registry_host};

/// Port of the frontend's HTTP server.
pub const HTTP_PORT: i32 = 8000;
/// Name of the frontend's HTTP port.
pub const HTTP_PORT_NAME: &str = "http";
/// Port of the Dynamo system server (health endpoints) on workers and the planner.
pub const SYSTEM_PORT: i32 = 9090;
/// Name of the system port.
pub const SYSTEM_PORT_NAME: &str = "system";
/// Port of the NIXL telemetry exporter on workers.
pub const NIXL_PORT: i32 = 19090;
/// Name of the NIXL telemetry port.
pub const NIXL_PORT_NAME: &str = "nixl";
/// Port of the planner's Prometheus metrics.
pub const PLANNER_METRICS_PORT: i32 = 9085;
/// Name of a metrics port.
pub const METRICS_PORT_NAME: &str = "metrics";
/// `fsGroup` set when the user gives no pod security context.
pub const DEFAULT_FS_GROUP: i64 = 1000;
/// `terminationGracePeriodSeconds` unless the user sets one.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 60;
/// ServiceAccount of component-pathway pods that name none, get no discovery account and find
/// no labelled account in their namespace (the kubelet's default on the Grove pathway).
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Annotation (pod template, user): `"true"` turns off image pull secret discovery
/// ([`pull_secrets`]).
pub const DISABLE_IMAGE_PULL_SECRET_DISCOVERY: &str =
    "nvidia.com/disable-image-pull-secret-discovery";

/// Environment variable names of the Dynamo runtime that the operator sets.
pub mod env_names {
    /// The Dynamo namespace of the component.
    pub const DYN_NAMESPACE: &str = "DYN_NAMESPACE";
    /// The frontend's namespace prefix (which worker namespaces it serves).
    pub const DYN_NAMESPACE_PREFIX: &str = "DYN_NAMESPACE_PREFIX";
    /// `true`: the prefix matches the namespace and its worker generations only.
    pub const DYN_NAMESPACE_PREFIX_STRICT: &str = "DYN_NAMESPACE_PREFIX_STRICT";
    /// The worker generation's suffix of the namespace.
    pub const DYN_NAMESPACE_WORKER_SUFFIX: &str = "DYN_NAMESPACE_WORKER_SUFFIX";
    /// The component type.
    pub const DYN_COMPONENT: &str = "DYN_COMPONENT";
    /// The discovery backend (`kubernetes`).
    pub const DYN_DISCOVERY_BACKEND: &str = "DYN_DISCOVERY_BACKEND";
}

/// Everything the pod spec of one component depends on.
#[derive(Clone, Copy, Debug)]
pub struct PodInput<'a> {
    /// The parent DynamoGraphDeployment's name, if known.
    pub graph: Option<&'a str>,
    /// The Kubernetes namespace.
    pub namespace: &'a str,
    /// The component's spec (its pod template is the user's layer).
    pub component: &'a DynamoComponentDeploymentSharedSpec,
    /// The type rendered into env (`worker` for legacy worker selectors; empty when unset).
    pub component_type: &'a str,
    /// The Dynamo namespace of the component.
    pub dynamo_namespace: &'a str,
    /// The worker generation's hash (workers only).
    pub worker_hash: Option<&'a str>,
    /// The pod's annotations (the discovery mode is read from them).
    pub annotations: &'a BTreeMap<String, String>,
    /// Kubernetes discovery is on.
    pub kube_discovery: bool,
    /// The component's inference backend (the compilation cache's defaults depend on it).
    pub backend: Backend,
    /// The graph's env, under main's own (main's entries win).
    pub graph_env: &'a [k8s_openapi::api::core::v1::EnvVar],
    /// KV transfer policy and ClusterTopology domains, for workers that get topology wiring.
    pub kv_transfer: Option<(&'a KvTransferPolicy, &'a [String])>,
    /// The namespace's image pull secrets by registry host ([`pull_secrets`]; empty when
    /// discovery is off).
    pub pull_secrets: &'a PullSecrets,
    /// The operator's infrastructure endpoints (env of every Dynamo container).
    pub infrastructure: &'a Infrastructure,
    /// The component's Dynamo runtime version (`RuntimeVersion::of_component`; `None` when
    /// unknown): it gates some defaults ([`gates`]).
    pub runtime_version: Option<RuntimeVersion>,
    /// The component's checkpoint (`experimental.checkpoint.enabled`), as resolved.
    pub checkpoint: Option<&'a restore::Checkpoint>,
    /// What the pod does: the only pod of a single-node component, or the leader or a worker of
    /// a multinode replica ([`multinode`]).
    pub role: Role,
    /// How the pods of a multinode replica find each other (the pathway).
    pub deployer: Deployer,
}

/// The ServiceAccount the graph creates for Kubernetes discovery: `<dgd>-k8s-service-discovery`.
pub fn discovery_service_account(graph: &str) -> String {
    format!("{graph}-k8s-service-discovery")
}

/// The pod spec of one component (see the crate docs for the layering). `main` is the first
/// container (with intra-pod failover, the engines are the first ones).
pub fn pod_spec(input: &PodInput<'_>) -> PodSpec {
    let component = input.component;
    let user_spec = component
        .pod_template
        .as_ref()
        .and_then(|t| t.spec.as_ref());
    let sidecars: Vec<Container> = user_spec
        .map(|s| {
            s.containers
                .iter()
                .filter(|c| c.name != MAIN_CONTAINER_NAME)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let user_main = user_main(input);
    let mut main = match &component.dynamo_sidecar {
        // The runtime runs in the sidecar: main is the user's engine as it is.
        Some(_) => user_main.unwrap_or_else(|| Container {
            name: MAIN_CONTAINER_NAME.into(),
            ..Default::default()
        }),
        None => merge::merge_container(base_container(input), user_main.as_ref()),
    };

    let mut spec = pod_level(input, user_spec);
    let mut runtime = component
        .dynamo_sidecar
        .as_deref()
        .and_then(|name| sidecar::dynamo(&spec, input, name));
    volumes_of_main(
        &mut spec,
        &mut main,
        runtime.as_mut().map(|(_, c)| c),
        input,
    );
    if let (Some((index, runtime)), Some(inits)) = (runtime, spec.init_containers.as_mut()) {
        inits[index] = runtime;
    }
    let main_mounts = main.volume_mounts.clone().unwrap_or_default();
    multinode::container(&mut main, input);
    volumes::shared_memory(&mut spec, &mut main, component.shared_memory_size.as_ref());
    spec.containers = std::iter::once(main).chain(sidecars).collect();
    multinode::pod(&mut spec, input);
    if let Some(name) = &component.frontend_sidecar {
        sidecar::frontend(&mut spec, input, name, &main_mounts);
    }
    pull_secrets::apply(&mut spec, input);
    gms::apply(&mut spec, input);
    failover::apply(&mut spec, input);
    restore::apply(&mut spec, input.checkpoint);
    spec
}

/// The compilation cache, the EPP's volumes and the KV-transfer topology wiring (on the
/// `dynamoSidecar` container `runtime` when there is one, else on `main`).
fn volumes_of_main(
    spec: &mut PodSpec,
    main: &mut Container,
    runtime: Option<&mut Container>,
    input: &PodInput<'_>,
) {
    let component = input.component;
    if let Some(cache) = &component.compilation_cache {
        cache::apply(spec, main, cache, input.backend);
    }
    if component.r#type == Some(ComponentType::Epp) {
        epp::volumes(spec, main, component, input.graph.unwrap_or_default());
    }
    if let Some((policy, domains)) = input.kv_transfer {
        volumes::topology_wiring(spec, runtime.unwrap_or(main), policy, domains);
    }
}

/// The pod-level defaults (termination grace, restart policy, the planner's and the EPP's
/// ServiceAccount) under the user's pod spec (its containers left out), then `fsGroup` when the
/// user gives no security context, and the discovery ServiceAccount when nothing names one.
fn pod_level(input: &PodInput<'_>, user_spec: Option<&PodSpec>) -> PodSpec {
    let r#type = input.component.r#type;
    let base = PodSpec {
        termination_grace_period_seconds: Some(if r#type == Some(ComponentType::Epp) {
            epp::TERMINATION_GRACE_PERIOD_SECONDS
        } else {
            DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
        }),
        restart_policy: Some("Always".into()),
        service_account_name: match r#type {
            Some(ComponentType::Planner) => Some(labels::PLANNER_SERVICE_ACCOUNT.to_string()),
            Some(ComponentType::Epp) => Some(labels::EPP_SERVICE_ACCOUNT.to_string()),
            _ => None,
        },
        ..Default::default()
    };
    let mut spec = match user_spec {
        Some(user) => {
            let mut user = serde_json::to_value(user).unwrap_or(Value::Null);
            if let Some(object) = user.as_object_mut() {
                object.remove("containers");
            }
            let mut merged = serde_json::to_value(&base).unwrap_or(Value::Null);
            merge::merge(&mut merged, &user);
            serde_json::from_value(merged).unwrap_or(base)
        }
        None => base,
    };
    if user_spec
        .and_then(|s| s.security_context.as_ref())
        .is_none()
    {
        spec.security_context = Some(PodSecurityContext {
            fs_group: Some(DEFAULT_FS_GROUP),
            ..Default::default()
        });
    }
    let unnamed = |s: &PodSpec| s.service_account_name.as_deref().is_none_or(str::is_empty);
    if input.kube_discovery
        && unnamed(&spec)
        && let Some(graph) = input.graph
    {
        spec.service_account_name = Some(discovery_service_account(graph));
    }
    spec
}

/// The user's `main` container with the graph's env under its own (a bare `main` carrying
/// only the graph's env when the user gives none).
fn user_main(input: &PodInput<'_>) -> Option<Container> {
    let mut main = input.component.main_container().cloned();
    if input.graph_env.is_empty() {
        return main;
    }
    let main = main.get_or_insert_with(|| Container {
        name: MAIN_CONTAINER_NAME.into(),
        ..Default::default()
    });
    main.env = Some(merge_envs(
        input.graph_env.to_vec(),
        main.env.take().unwrap_or_default(),
    ));
    Some(main.clone())
}

/// The operator's defaults for the `main` container of the component's type, for the
/// component's runtime version.
pub fn base_container(input: &PodInput<'_>) -> Container {
    defaults(
        input,
        input.component.r#type,
        input.component_type,
        MAIN_CONTAINER_NAME,
        input.runtime_version,
    )
}

/// The operator's defaults for a container named `name` running a component of type `type_`
/// (rendered into env as `component_type`) on Dynamo runtime `version` ([`gates`]).
pub(crate) fn defaults(
    input: &PodInput<'_>,
    type_: Option<ComponentType>,
    component_type: &str,
    name: &str,
    version: Option<RuntimeVersion>,
) -> Container {
    let (mut container, mut vars) = common(input, component_type, name);
    match type_ {
        Some(ComponentType::Frontend) => frontend(&mut container, &mut vars, input, version),
        Some(ComponentType::Worker | ComponentType::Prefill | ComponentType::Decode) => {
            worker(&mut container, &mut vars, input, version)
        }
        Some(ComponentType::Planner) => {
            container.ports = Some(vec![
                port(METRICS_PORT_NAME, PLANNER_METRICS_PORT),
                port(SYSTEM_PORT_NAME, SYSTEM_PORT),
            ]);
            system_probes(&mut container, 1);
            vars.extend([
                env("PLANNER_PROMETHEUS_PORT", &PLANNER_METRICS_PORT.to_string()),
                env("DYN_SYSTEM_PORT", &SYSTEM_PORT.to_string()),
            ]);
        }
        Some(ComponentType::Epp) => epp::container(
            &mut container,
            &mut vars,
            input,
            gates::STRICT_NAMESPACE_PREFIX.enabled(version),
        ),
        None => {}
    }
    container.env = Some(vars);
    container
}

/// What every Dynamo container gets: the container `name` running `/bin/sh -c`, and the env
/// naming its namespace, component, graph and pod, the discovery backend, the operator's
/// infrastructure and, in container discovery mode, the container.
pub(crate) fn common(
    input: &PodInput<'_>,
    component_type: &str,
    name: &str,
) -> (Container, Vec<EnvVar>) {
    use env_names::*;
    let mut vars = vec![
        env(DYN_NAMESPACE, input.dynamo_namespace),
        env(DYN_COMPONENT, component_type),
        env("DYN_PARENT_DGD_K8S_NAME", input.graph.unwrap_or_default()),
        env("DYN_PARENT_DGD_K8S_NAMESPACE", input.namespace),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_UID", "metadata.uid"),
    ];
    if input.kube_discovery {
        vars.push(env(DYN_DISCOVERY_BACKEND, "kubernetes"));
    }
    vars.extend(input.infrastructure.env());
    if input
        .annotations
        .get(labels::DYNAMO_KUBE_DISCOVERY_MODE)
        .map(String::as_str)
        == Some("container")
    {
        vars.push(env("CONTAINER_NAME", name));
        vars.push(env("DYN_KUBE_DISCOVERY_MODE", "container"));
    }
    let container = Container {
        name: name.into(),
        command: Some(vec!["/bin/sh".into(), "-c".into()]),
        ..Default::default()
    };
    (container, vars)
}

/// The frontend's command, `http` port, probes and env.
fn frontend(
    container: &mut Container,
    vars: &mut Vec<EnvVar>,
    input: &PodInput<'_>,
    version: Option<RuntimeVersion>,
) {
    use env_names::*;
    container.command = Some(vec!["python3".into()]);
    container.args = Some(vec!["-m".into(), "dynamo.frontend".into()]);
    container.ports = Some(vec![port(HTTP_PORT_NAME, HTTP_PORT)]);
    container.liveness_probe = Some(http_probe("/live", HTTP_PORT_NAME, 15, 10, 1, 3));
    container.readiness_probe = Some(http_probe("/health", HTTP_PORT_NAME, 10, 10, 3, 3));
    if gates::FRONTEND_STARTUP_PROBE.enabled(version) {
        container.startup_probe = Some(http_probe("/live", HTTP_PORT_NAME, 0, 10, 1, 30));
    }
    vars.extend([
        env("DYNAMO_PORT", &HTTP_PORT.to_string()),
        env("DYN_HTTP_PORT", &HTTP_PORT.to_string()),
        env(DYN_NAMESPACE_PREFIX, input.dynamo_namespace),
    ]);
    if gates::STRICT_NAMESPACE_PREFIX.enabled(version) {
        vars.push(env(DYN_NAMESPACE_PREFIX_STRICT, "true"));
    }
}

/// A worker's `system` and `nixl` ports, probes and env.
fn worker(
    container: &mut Container,
    vars: &mut Vec<EnvVar>,
    input: &PodInput<'_>,
    version: Option<RuntimeVersion>,
) {
    container.ports = Some(vec![
        port(SYSTEM_PORT_NAME, SYSTEM_PORT),
        port(NIXL_PORT_NAME, NIXL_PORT),
    ]);
    let liveness_failures = if gates::INCREASED_WORKER_FAILURE_THRESHOLD.enabled(version) {
        3
    } else {
        1
    };
    system_probes(container, liveness_failures);
    let canary = gates::CANARY_HEALTH_CHECKS.enabled(version);
    vars.extend([
        env("DYN_SYSTEM_ENABLED", "true"),
        env("DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS", "[\"generate\"]"),
        env("DYN_SYSTEM_PORT", &SYSTEM_PORT.to_string()),
        env(
            "DYN_HEALTH_CHECK_ENABLED",
            if canary { "true" } else { "false" },
        ),
        env("NIXL_TELEMETRY_ENABLE", "n"),
        env("NIXL_TELEMETRY_EXPORTER", "prometheus"),
        env("NIXL_TELEMETRY_PROMETHEUS_PORT", &NIXL_PORT.to_string()),
        env(
            labels::ENV_FORWARDPASS_METRIC_PORT,
            &labels::FORWARDPASS_METRIC_BASE_PORT.to_string(),
        ),
    ]);
    if let Some(hash) = input.worker_hash {
        vars.push(env(env_names::DYN_NAMESPACE_WORKER_SUFFIX, hash));
    }
}

/// The live, ready and startup probes on the system port (workers and the planner); liveness
/// restarts after `liveness_failures` failed checks.
fn system_probes(container: &mut Container, liveness_failures: i32) {
    container.liveness_probe = Some(http_probe(
        "/live",
        SYSTEM_PORT_NAME,
        0,
        5,
        4,
        liveness_failures,
    ));
    container.readiness_probe = Some(http_probe("/health", SYSTEM_PORT_NAME, 0, 10, 4, 3));
    container.startup_probe = Some(http_probe("/live", SYSTEM_PORT_NAME, 0, 10, 5, 720));
}

#[cfg(test)]
mod tests;
