//! The pod spec of a clique: the operator's defaults for the component type under the user's
//! pod template, as the component pathway renders them (upstream's `GenerateBasePodSpec`), plus
//! what Grove needs for multinode components.
//!
//! Layering: the operator's `main` container for the component type, the user's `main`
//! container merged over it (user values win; lists are replaced whole, objects merged, a user
//! probe replaces the default probe, env vars merged by name and sorted), the pod-level
//! defaults under the user's pod spec, then the `/dev/shm` volume, service account, image pull
//! secrets and the multinode adjustments:
//! - worker pods of multinode SGLang and vLLM components have no probes;
//! - SGLang multinode pods get `--dist-init-addr <leader>:29500 --nnodes <n> --node-rank <r>`,
//!   the leader found through Grove's headless Service
//!   (`$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-<component>-ldr-0.$(GROVE_HEADLESS_SERVICE)`), the
//!   worker rank computed by the shell from `GROVE_PCLQ_POD_INDEX` (the command becomes
//!   `sh -c "exec <command> <args> <flags>"`).
//!
//! This duplicates the defaults of the DynamoComponentDeployment renderer (which the grove
//! pathway cannot depend on); the two must stay equal.

use std::collections::BTreeMap;

use api::labels;
use api::v1beta1::{ComponentType, KvTransferPolicy, MAIN_CONTAINER_NAME};
use api::{BackendFramework, DynamoComponentDeploymentSharedSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, HTTPGetAction, LocalObjectReference, ObjectFieldSelector,
    PodSecurityContext, PodSpec, Probe, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::names::{ROLE_SUFFIX_LEADER, Role};

/// Port of the frontend's HTTP server.
pub const HTTP_PORT: i32 = 8000;
/// Port of the Dynamo system server (health endpoints) on workers and the planner.
pub const SYSTEM_PORT: i32 = 9090;
/// Port of the NIXL telemetry exporter on workers.
pub const NIXL_PORT: i32 = 19090;
/// Port of the planner's Prometheus metrics.
pub const PLANNER_METRICS_PORT: i32 = 9085;
/// Port SGLang multinode ranks rendezvous on at the leader.
pub const SGLANG_DIST_INIT_PORT: i32 = 29500;
/// Name of the `/dev/shm` volume.
pub const SHARED_MEMORY_VOLUME: &str = "shared-memory";
/// Size of `/dev/shm` when `sharedMemorySize` is unset.
pub const DEFAULT_SHARED_MEMORY_SIZE: &str = "8Gi";
/// `fsGroup` set when the user gives no pod security context.
pub const DEFAULT_FS_GROUP: i64 = 1000;
/// `terminationGracePeriodSeconds` unless the user sets one.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 60;
/// ServiceAccount of pods that name none and get no discovery account.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Name of the topology label volume of KV-transfer-aware workers.
pub const TOPOLOGY_VOLUME: &str = "topology-labels";
/// Mount path of the topology label volume.
pub const TOPOLOGY_MOUNT_PATH: &str = "/etc/dynamo/topology";
/// Pod label prefix under which the topology controller exposes a domain.
pub const TOPOLOGY_LABEL_PREFIX: &str = "nvidia.com/dynamo-topology.";
/// Annotation (pod template, user): `"true"` turns off image pull secret discovery.
pub const DISABLE_IMAGE_PULL_SECRET_DISCOVERY: &str =
    "nvidia.com/disable-image-pull-secret-discovery";

/// Which inference backend a worker runs (upstream's detection: the main container's command
/// line `python… -m dynamo.<backend>`, else the graph's `backendFramework`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SGLang.
    Sglang,
    /// vLLM.
    Vllm,
    /// TensorRT-LLM.
    Trtllm,
    /// Not a worker, or nothing to detect.
    None,
}

impl Backend {
    /// The backend of `component` in a graph whose `backendFramework` is `explicit`. Errors when
    /// the command line names a backend different from `explicit`, or more than one.
    pub fn detect(
        component: &DynamoComponentDeploymentSharedSpec,
        explicit: Option<BackendFramework>,
    ) -> Result<Backend, String> {
        if !component.r#type.is_some_and(ComponentType::is_worker) {
            return Ok(Backend::None);
        }
        let line: Vec<String> = component
            .main_container()
            .map(|m| {
                m.command
                    .iter()
                    .flatten()
                    .chain(m.args.iter().flatten())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let detected: Vec<Backend> = [
            (Backend::Vllm, "vllm"),
            (Backend::Sglang, "sglang"),
            (Backend::Trtllm, "trtllm"),
        ]
        .into_iter()
        .filter(|(_, module)| runs_module(&line, &format!("dynamo.{module}")))
        .map(|(b, _)| b)
        .collect();
        let explicit = explicit.map(|e| match e {
            BackendFramework::Sglang => Backend::Sglang,
            BackendFramework::Vllm => Backend::Vllm,
            BackendFramework::Trtllm => Backend::Trtllm,
        });
        match (detected.as_slice(), explicit) {
            ([one], Some(e)) if *one != e => Err(format!(
                "backend framework mismatch: the command runs {one:?} but backendFramework is {e:?}"
            )),
            ([one], _) => Ok(*one),
            ([], Some(e)) => Ok(e),
            ([], None) => Ok(Backend::None),
            (many, _) => Err(format!(
                "multiple backend frameworks detected from the command: {many:?}"
            )),
        }
    }
}

/// Whether the command line runs `python… [...] -m [...] <module>[...]` (no shell operator in
/// between), upstream's detection pattern.
fn runs_module(line: &[String], module: &str) -> bool {
    let joined = line.join(" ");
    let words: Vec<&str> = joined.split_whitespace().collect();
    words.iter().enumerate().any(|(i, w)| {
        let is_python = w
            .rsplit('/')
            .next()
            .is_some_and(|base| base.starts_with("python"));
        if !is_python {
            return false;
        }
        let rest = &words[i + 1..];
        let segment: Vec<&&str> = rest
            .iter()
            .take_while(|w| !w.contains('|') && !w.contains('&') && !w.contains(';'))
            .collect();
        segment
            .iter()
            .position(|w| **w == "-m")
            .is_some_and(|m| segment[m + 1..].iter().any(|w| w.contains(module)))
    })
}

/// Everything the pod spec of one clique depends on.
pub(crate) struct PodInput<'a> {
    pub dgd_name: &'a str,
    pub namespace: &'a str,
    pub component: &'a DynamoComponentDeploymentSharedSpec,
    /// The type rendered into env (`worker` for legacy worker selectors).
    pub component_type: &'a str,
    pub dynamo_namespace: &'a str,
    pub worker_hash: Option<&'a str>,
    /// The clique's annotations (discovery settings are read from them).
    pub annotations: &'a BTreeMap<String, String>,
    pub kube_discovery: bool,
    pub role: Role,
    pub backend: Backend,
    /// The graph's env, prepended to main's (main's entries win).
    pub graph_env: &'a [EnvVar],
    /// KV transfer policy and ClusterTopology domains, for workers that get topology wiring.
    pub kv_transfer: Option<(&'a KvTransferPolicy, &'a [String])>,
    /// Image pull secrets discovered for the main image.
    pub pull_secrets: &'a [String],
}

/// The pod spec of one clique.
pub(crate) fn pod_spec(input: &PodInput<'_>) -> PodSpec {
    let component = input.component;
    let user_spec = component
        .pod_template
        .as_ref()
        .and_then(|t| t.spec.as_ref());
    let user_main =
        user_spec.and_then(|s| s.containers.iter().find(|c| c.name == MAIN_CONTAINER_NAME));
    let sidecars: Vec<Container> = user_spec
        .map(|s| {
            s.containers
                .iter()
                .filter(|c| c.name != MAIN_CONTAINER_NAME)
                .cloned()
                .collect()
        })
        .unwrap_or_default();

    let mut user_main = user_main.cloned();
    if let Some(main) = user_main.as_mut()
        && !input.graph_env.is_empty()
    {
        main.env = Some(merge_envs(
            input.graph_env.to_vec(),
            main.env.clone().unwrap_or_default(),
        ));
    }
    let user_main = match (user_main, input.graph_env.is_empty()) {
        (Some(m), _) => Some(m),
        (None, false) => Some(Container {
            name: MAIN_CONTAINER_NAME.into(),
            env: Some(input.graph_env.to_vec()),
            ..Default::default()
        }),
        (None, true) => None,
    };
    let mut main = merge_container(base_container(input), user_main.as_ref());

    let base = PodSpec {
        termination_grace_period_seconds: Some(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS),
        restart_policy: Some("Always".into()),
        service_account_name: (component.r#type == Some(ComponentType::Planner))
            .then(|| labels::PLANNER_SERVICE_ACCOUNT.to_string()),
        ..Default::default()
    };
    let mut spec = match user_spec {
        Some(user) => {
            let mut user = serde_json::to_value(user).unwrap_or(Value::Null);
            if let Some(object) = user.as_object_mut() {
                object.remove("containers");
            }
            let mut merged = serde_json::to_value(&base).unwrap_or(Value::Null);
            merge(&mut merged, &user);
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
    if input.kube_discovery && unnamed(&spec) {
        spec.service_account_name = Some(format!("{}-k8s-service-discovery", input.dgd_name));
    }
    shared_memory(&mut spec, &mut main, component.shared_memory_size.as_ref());
    if let Some((policy, domains)) = input.kv_transfer {
        topology_wiring(&mut spec, &mut main, policy, domains);
    }
    multinode(&mut main, input);
    spec.containers = std::iter::once(main).chain(sidecars).collect();
    if unnamed(&spec) {
        spec.service_account_name = Some(DEFAULT_SERVICE_ACCOUNT.into());
    }
    if spec.image_pull_secrets.as_ref().is_none_or(Vec::is_empty) && !input.pull_secrets.is_empty()
    {
        spec.image_pull_secrets = Some(
            input
                .pull_secrets
                .iter()
                .map(|name| LocalObjectReference { name: name.clone() })
                .collect(),
        );
    }
    spec
}

/// The operator's defaults for the `main` container of the component's type.
fn base_container(input: &PodInput<'_>) -> Container {
    let mut vars = vec![
        env("DYN_NAMESPACE", input.dynamo_namespace),
        env("DYN_COMPONENT", input.component_type),
        env("DYN_PARENT_DGD_K8S_NAME", input.dgd_name),
        env("DYN_PARENT_DGD_K8S_NAMESPACE", input.namespace),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_UID", "metadata.uid"),
    ];
    if input.kube_discovery {
        vars.push(env("DYN_DISCOVERY_BACKEND", "kubernetes"));
    }
    if input
        .annotations
        .get(labels::DYNAMO_KUBE_DISCOVERY_MODE)
        .map(String::as_str)
        == Some("container")
    {
        vars.push(env("CONTAINER_NAME", MAIN_CONTAINER_NAME));
        vars.push(env("DYN_KUBE_DISCOVERY_MODE", "container"));
    }
    let mut container = Container {
        name: MAIN_CONTAINER_NAME.into(),
        command: Some(vec!["/bin/sh".into(), "-c".into()]),
        ..Default::default()
    };
    match input.component.r#type {
        Some(ComponentType::Frontend) => {
            container.command = Some(vec!["python3".into()]);
            container.args = Some(vec!["-m".into(), "dynamo.frontend".into()]);
            container.ports = Some(vec![port("http", HTTP_PORT)]);
            container.liveness_probe = Some(http_probe("/live", "http", 15, 10, 1, 3));
            container.readiness_probe = Some(http_probe("/health", "http", 10, 10, 3, 3));
            vars.extend([
                env("DYNAMO_PORT", &HTTP_PORT.to_string()),
                env("DYN_HTTP_PORT", &HTTP_PORT.to_string()),
                env("DYN_NAMESPACE_PREFIX", input.dynamo_namespace),
            ]);
        }
        Some(ComponentType::Worker | ComponentType::Prefill | ComponentType::Decode) => {
            container.ports = Some(vec![port("system", SYSTEM_PORT), port("nixl", NIXL_PORT)]);
            container.liveness_probe = Some(http_probe("/live", "system", 0, 5, 4, 1));
            container.readiness_probe = Some(http_probe("/health", "system", 0, 10, 4, 3));
            container.startup_probe = Some(http_probe("/live", "system", 0, 10, 5, 720));
            vars.extend([
                env("DYN_SYSTEM_ENABLED", "true"),
                env("DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS", "[\"generate\"]"),
                env("DYN_SYSTEM_PORT", &SYSTEM_PORT.to_string()),
                env("DYN_HEALTH_CHECK_ENABLED", "false"),
                env("NIXL_TELEMETRY_ENABLE", "n"),
                env("NIXL_TELEMETRY_EXPORTER", "prometheus"),
                env("NIXL_TELEMETRY_PROMETHEUS_PORT", &NIXL_PORT.to_string()),
                env(
                    labels::ENV_FORWARDPASS_METRIC_PORT,
                    &labels::FORWARDPASS_METRIC_BASE_PORT.to_string(),
                ),
            ]);
            if let Some(hash) = input.worker_hash {
                vars.push(env("DYN_NAMESPACE_WORKER_SUFFIX", hash));
            }
        }
        Some(ComponentType::Planner) => {
            container.ports = Some(vec![
                port("metrics", PLANNER_METRICS_PORT),
                port("system", SYSTEM_PORT),
            ]);
            container.liveness_probe = Some(http_probe("/live", "system", 0, 5, 4, 1));
            container.readiness_probe = Some(http_probe("/health", "system", 0, 10, 4, 3));
            container.startup_probe = Some(http_probe("/live", "system", 0, 10, 5, 720));
            vars.extend([
                env("PLANNER_PROMETHEUS_PORT", &PLANNER_METRICS_PORT.to_string()),
                env("DYN_SYSTEM_PORT", &SYSTEM_PORT.to_string()),
            ]);
        }
        Some(ComponentType::Epp) | None => {}
    }
    container.env = Some(vars);
    container
}

/// Multinode adjustments of the merged main container (see the module docs).
fn multinode(main: &mut Container, input: &PodInput<'_>) {
    let nodes = input.component.number_of_nodes();
    if nodes <= 1 {
        return;
    }
    if input.role == Role::Worker && matches!(input.backend, Backend::Sglang | Backend::Vllm) {
        main.liveness_probe = None;
        main.readiness_probe = None;
        main.startup_probe = None;
    }
    if input.backend != Backend::Sglang {
        return;
    }
    let leader = format!(
        "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-{}-{ROLE_SUFFIX_LEADER}-0.$(GROVE_HEADLESS_SERVICE)",
        input.component.name.to_lowercase()
    );
    let (rank, needs_shell) = match input.role {
        Role::Worker => ("$((GROVE_PCLQ_POD_INDEX + 1))", true),
        Role::Leader | Role::Main => ("0", false),
    };
    let flags = format!(
        "--dist-init-addr {leader}:{SGLANG_DIST_INIT_PORT} --nnodes {nodes} --node-rank {rank}"
    );
    let python = main
        .command
        .as_ref()
        .and_then(|c| c.first())
        .is_some_and(|c| is_python(c));
    if !python {
        // A shell command line (`sh -c "python3 -m ..."`) is left as the user wrote it.
        return;
    }
    if needs_shell {
        let command: Vec<String> = main
            .command
            .iter()
            .flatten()
            .chain(main.args.iter().flatten())
            .map(|t| shell_quote(t))
            .collect();
        main.command = Some(vec!["sh".into(), "-c".into()]);
        main.args = Some(vec![format!("exec {} {flags}", command.join(" "))]);
    } else {
        main.args
            .get_or_insert_with(Vec::new)
            .extend(flags.split_whitespace().map(str::to_string));
    }
}

/// `python`, `python3`, `python3.11`, optionally with a directory.
fn is_python(command: &str) -> bool {
    let base = command.rsplit('/').next().unwrap_or(command);
    let Some(version) = base.strip_prefix("python") else {
        return false;
    };
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or_default();
    major.chars().all(|c| c.is_ascii_digit())
        && parts.all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// A token that survives `sh -c`: unchanged when simple, else double-quoted with `\`, `"`, `$`
/// and backquote escaped (upstream's quoting).
fn shell_quote(token: &str) -> String {
    const SPECIAL: &[char] = &[
        ' ', '\t', '\n', '\'', '"', '\\', '{', '}', '[', ']', '$', '`', '!',
    ];
    if !token.contains(SPECIAL) {
        return token.to_string();
    }
    let escaped = token
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('$', "\\$")
        .replace('`', "\\`")
        .replace('\'', "'\"'\"'");
    format!("\"{escaped}\"")
}

/// Env, mount and Downward API volume of a KV-transfer-aware worker.
fn topology_wiring(
    spec: &mut PodSpec,
    main: &mut Container,
    policy: &KvTransferPolicy,
    domains: &[String],
) {
    let enforcement = match policy.enforcement {
        Some(api::common::KvTransferEnforcement::Preferred) => "preferred",
        _ => "required",
    };
    let mut vars = vec![
        env("DYN_KV_TRANSFER_DOMAIN", &policy.domain),
        env("DYN_KV_TRANSFER_ENFORCEMENT", enforcement),
        env("DYN_TOPOLOGY_ENABLED", "true"),
        env("DYN_TOPOLOGY_MOUNT_PATH", TOPOLOGY_MOUNT_PATH),
    ];
    if let Some(weight) = policy.preferred_weight {
        vars.push(env("DYN_KV_TRANSFER_PREFERRED_WEIGHT", &weight.to_string()));
    }
    main.env = Some(merge_envs(main.env.take().unwrap_or_default(), vars));
    let mut mounts: Vec<VolumeMount> = main
        .volume_mounts
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.name != TOPOLOGY_VOLUME && m.mount_path != TOPOLOGY_MOUNT_PATH)
        .collect();
    mounts.push(VolumeMount {
        name: TOPOLOGY_VOLUME.into(),
        mount_path: TOPOLOGY_MOUNT_PATH.into(),
        read_only: Some(true),
        ..Default::default()
    });
    main.volume_mounts = Some(mounts);
    let item = |path: &str, label: &str| DownwardAPIVolumeFile {
        path: path.into(),
        field_ref: Some(ObjectFieldSelector {
            field_path: format!("metadata.labels['{label}']"),
            api_version: None,
        }),
        ..Default::default()
    };
    let items = match &policy.label_key {
        Some(key) => vec![item(&policy.domain, key)],
        None => domains
            .iter()
            .map(|d| item(d, &format!("{TOPOLOGY_LABEL_PREFIX}{d}")))
            .collect(),
    };
    let mut volumes: Vec<Volume> = spec
        .volumes
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.name != TOPOLOGY_VOLUME)
        .collect();
    volumes.push(Volume {
        name: TOPOLOGY_VOLUME.into(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(items),
            ..Default::default()
        }),
        ..Default::default()
    });
    spec.volumes = Some(volumes);
}

/// An env var; an empty value is left out, as upstream's serialization does.
fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: (!value.is_empty()).then(|| value.to_string()),
        value_from: None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        }),
    }
}

fn port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: number,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn http_probe(
    path: &str,
    port: &str,
    initial_delay: i32,
    period: i32,
    timeout: i32,
    failure: i32,
) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(port.into()),
            ..Default::default()
        }),
        initial_delay_seconds: (initial_delay > 0).then_some(initial_delay),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failure),
        ..Default::default()
    }
}

/// The user's `main` container over the defaults (see the module docs).
fn merge_container(mut base: Container, user: Option<&Container>) -> Container {
    let Some(user) = user else {
        base.env = base.env.map(|e| merge_envs(e, Vec::new()));
        return base;
    };
    let base_env = base.env.take().unwrap_or_default();
    let fallback = base.clone();
    let mut target = serde_json::to_value(&base).unwrap_or(Value::Null);
    let mut patch = serde_json::to_value(user).unwrap_or(Value::Null);
    if let (Some(target), Some(patch)) = (target.as_object_mut(), patch.as_object_mut()) {
        patch.remove("name");
        patch.remove("env");
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if patch.get(probe).is_some_and(|p| !p.is_null()) {
                target.remove(probe);
            }
        }
    }
    merge(&mut target, &patch);
    let mut merged: Container = serde_json::from_value(target).unwrap_or(fallback);
    merged.name = MAIN_CONTAINER_NAME.into();
    let env = merge_envs(base_env, user.env.clone().unwrap_or_default());
    merged.env = (!env.is_empty()).then_some(env);
    merged
}

/// `common` and `specific` merged by name, `specific` winning, sorted by name (upstream's
/// `MergeEnvs`).
pub fn merge_envs(common: Vec<EnvVar>, specific: Vec<EnvVar>) -> Vec<EnvVar> {
    let mut by_name: BTreeMap<String, EnvVar> = BTreeMap::new();
    for e in common.into_iter().chain(specific) {
        by_name.insert(e.name.clone(), e);
    }
    by_name.into_values().collect()
}

/// Merge `patch` into `target`: objects recursively, anything else replaced. `null` and empty
/// lists in `patch` count as unset and leave `target` alone.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (k, v) in patch {
                if v.is_null() || v.as_array().is_some_and(Vec::is_empty) {
                    continue;
                }
                match target.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        target.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// The `/dev/shm` tmpfs: `sharedMemorySize` (default 8Gi), none when it is zero.
fn shared_memory(spec: &mut PodSpec, main: &mut Container, size: Option<&Quantity>) {
    let size = match size {
        Some(q) if quantity_is_zero(q) => return,
        Some(q) => q.clone(),
        None => Quantity(DEFAULT_SHARED_MEMORY_SIZE.into()),
    };
    let mut volumes: Vec<Volume> = spec
        .volumes
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.name != SHARED_MEMORY_VOLUME)
        .collect();
    volumes.push(Volume {
        name: SHARED_MEMORY_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(size),
        }),
        ..Default::default()
    });
    spec.volumes = Some(volumes);
    let mut mounts: Vec<VolumeMount> = main
        .volume_mounts
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.name != SHARED_MEMORY_VOLUME && m.mount_path != "/dev/shm")
        .collect();
    mounts.push(VolumeMount {
        name: SHARED_MEMORY_VOLUME.into(),
        mount_path: "/dev/shm".into(),
        ..Default::default()
    });
    main.volume_mounts = Some(mounts);
}

/// Whether a quantity is zero (`0`, `0Gi`, `0.0`, ...).
fn quantity_is_zero(q: &Quantity) -> bool {
    let number: String =
        q.0.trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | '+' | '-'))
            .collect();
    number.parse::<f64>().is_ok_and(|n| n == 0.0)
}

/// The registry host of an image reference (`nvcr.io/nvidia/x:1` → `nvcr.io`; no registry
/// part → `docker.io`), as image pull secrets are keyed.
pub fn registry_host(image: &str) -> String {
    let image = image
        .split_once("://")
        .map_or(image, |(_, rest)| rest)
        .trim();
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_string()
        }
        _ => "docker.io".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn python_commands_and_quoting() {
        for yes in ["python", "python3", "python3.11", "/usr/bin/python3.8"] {
            assert!(is_python(yes), "{yes}");
        }
        for no in ["sh", "pythonx", "python3.", "ipython"] {
            assert!(!is_python(no), "{no}");
        }
        assert_eq!(shell_quote("--tp-size"), "--tp-size");
        assert_eq!(shell_quote(r#"{"a": "$b"}"#), r#""{\"a\": \"\$b\"}""#);
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
}
