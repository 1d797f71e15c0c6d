//! The EPP (endpoint picker) component's pod: upstream's two contracts.
//!
//! - **Native EPP** (no `eppConfig`): the image's entrypoint with no arguments, configured by
//!   env only; `HOME` is [`NATIVE_HOME`] and the Hugging Face cache is an `emptyDir` at
//!   `<HOME>/.cache`.
//! - **Legacy Go EPP** (`eppConfig` set): the entrypoint with the pool and gRPC flags and
//!   `--config-file` pointing at the `epp-config` volume, mounted read-only at
//!   [`CONFIG_MOUNT_PATH`] from `<dgd>-epp-config` (the inline `config`, written by the graph's
//!   EPP reconciler) or from `configMapRef` (its key mapped to [`CONFIG_FILE`]).
//!
//! Both: ports `grpc` 9002, `grpc-health` 9003 and `metrics` 9090; gRPC probes on
//! `grpc-health` for the service [`PROBE_SERVICE`]; `USE_STREAMING`, `RUST_LOG`,
//! `DYN_ENFORCE_DISAGG`, `DYN_NAMESPACE_PREFIX` (and, native only, from runtime 1.6,
//! `DYN_NAMESPACE_PREFIX_STRICT=true`: [`crate::gates`]); the `epp-serviceaccount`
//! ServiceAccount and a termination grace of [`TERMINATION_GRACE_PERIOD_SECONDS`].

use api::DynamoComponentDeploymentSharedSpec;
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, GRPCAction, KeyToPath, PodSpec,
    Probe, Volume, VolumeMount,
};

use crate::parts::{env, port};
use crate::{METRICS_PORT_NAME, PodInput, SYSTEM_PORT, env_names, volumes};

/// gRPC port of the EPP (the InferencePool's endpoint picker port).
pub const GRPC_PORT: i32 = 9002;
/// Name of the gRPC port.
pub const GRPC_PORT_NAME: &str = "grpc";
/// gRPC health port of the EPP.
pub const GRPC_HEALTH_PORT: i32 = 9003;
/// Name of the gRPC health port.
pub const GRPC_HEALTH_PORT_NAME: &str = "grpc-health";
/// The gRPC health service the probes ask for.
pub const PROBE_SERVICE: &str = "inference-extension";
/// `terminationGracePeriodSeconds` of EPP pods unless the user sets one.
pub const TERMINATION_GRACE_PERIOD_SECONDS: i64 = 130;
/// `HOME` of the native EPP.
pub const NATIVE_HOME: &str = "/home/dynamo"; // path inside the container
/// Name of the native EPP's Hugging Face cache volume.
pub const HF_CACHE_VOLUME: &str = "hf-cache";
/// Name of the legacy EPP's configuration volume.
pub const CONFIG_VOLUME: &str = "epp-config";
/// Where the legacy EPP's configuration volume is mounted.
pub const CONFIG_MOUNT_PATH: &str = "/etc/epp";
/// File name (and ConfigMap key) of the legacy EPP's configuration.
pub const CONFIG_FILE: &str = "epp-config-dynamo.yaml";
/// API group of InferencePool (`--pool-group`).
pub const INFERENCE_POOL_GROUP: &str = "inference.networking.k8s.io";

/// `<dgd>-epp-config`: the ConfigMap holding the legacy EPP's inline `eppConfig.config`.
pub fn epp_config_map_name(graph: &str) -> String {
    format!("{graph}-epp-config")
}

/// `<dgd>-pool`: the InferencePool of a graph with an EPP component.
pub fn inference_pool_name(graph: &str) -> String {
    format!("{graph}-pool")
}

/// Whether the component runs the legacy Go EPP (it carries `eppConfig`).
pub fn is_legacy(component: &DynamoComponentDeploymentSharedSpec) -> bool {
    component.epp_config.is_some()
}

/// The EPP defaults of the `main` container: no command, the legacy flags, ports, probes and
/// env (`vars` holds the common env and receives the EPP's); `strict` (runtime 1.6 on) adds
/// `DYN_NAMESPACE_PREFIX_STRICT=true` to the native EPP.
pub(crate) fn container(
    container: &mut Container,
    vars: &mut Vec<EnvVar>,
    input: &PodInput<'_>,
    strict: bool,
) {
    let component = input.component;
    let graph = input.graph.unwrap_or_default();
    let namespace = input.namespace;
    container.command = None;
    if is_legacy(component) {
        let config_file = format!("{CONFIG_MOUNT_PATH}/{CONFIG_FILE}");
        let args = [
            ("--pool-name", inference_pool_name(graph)),
            ("--pool-namespace", namespace.to_string()),
            ("--pool-group", INFERENCE_POOL_GROUP.to_string()),
            ("-v", "4".to_string()),
            ("--zap-encoder", "json".to_string()),
            ("--grpc-port", GRPC_PORT.to_string()),
            ("--grpc-health-port", GRPC_HEALTH_PORT.to_string()),
            ("--config-file", config_file),
        ];
        container.args = Some(
            args.into_iter()
                .flat_map(|(flag, value)| [flag.to_string(), value])
                .collect(),
        );
    }
    container.ports = Some(vec![
        port(GRPC_PORT_NAME, GRPC_PORT),
        port(GRPC_HEALTH_PORT_NAME, GRPC_HEALTH_PORT),
        port(METRICS_PORT_NAME, SYSTEM_PORT),
    ]);
    container.liveness_probe = Some(grpc_probe(Some(5), None));
    container.readiness_probe = Some(grpc_probe(Some(5), None));
    container.startup_probe = Some(grpc_probe(None, Some(180)));
    vars.extend([
        env("USE_STREAMING", "true"),
        env("RUST_LOG", "info"),
        env("DYN_ENFORCE_DISAGG", "false"),
        env(env_names::DYN_NAMESPACE_PREFIX, input.dynamo_namespace),
    ]);
    if !is_legacy(component) {
        vars.push(env("HOME", NATIVE_HOME));
        if strict {
            vars.push(env(env_names::DYN_NAMESPACE_PREFIX_STRICT, "true"));
        }
    }
}

/// A gRPC probe on the health port, every 10 s.
fn grpc_probe(initial_delay: Option<i32>, failure: Option<i32>) -> Probe {
    Probe {
        grpc: Some(GRPCAction {
            port: GRPC_HEALTH_PORT,
            service: Some(PROBE_SERVICE.into()),
        }),
        initial_delay_seconds: initial_delay,
        period_seconds: Some(10),
        failure_threshold: failure,
        ..Default::default()
    }
}

/// The EPP's volume: the legacy configuration, or the native Hugging Face cache.
pub(crate) fn volumes(
    spec: &mut PodSpec,
    main: &mut Container,
    component: &DynamoComponentDeploymentSharedSpec,
    graph: &str,
) {
    let Some(config) = component.epp_config.as_ref() else {
        let volume = Volume {
            name: HF_CACHE_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        };
        let mount = VolumeMount {
            name: HF_CACHE_VOLUME.into(),
            mount_path: format!("{NATIVE_HOME}/.cache"),
            ..Default::default()
        };
        volumes::attach(spec, main, volume, mount);
        return;
    };
    let reference = config.config_map_ref.as_ref();
    let name = reference
        .map(|r| r.name.clone())
        .unwrap_or_else(|| epp_config_map_name(graph));
    let key = reference
        .map(|r| r.key.clone())
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| CONFIG_FILE.into());
    let volume = Volume {
        name: CONFIG_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name,
            items: Some(vec![KeyToPath {
                key,
                path: CONFIG_FILE.into(),
                mode: None,
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mount = VolumeMount {
        name: CONFIG_VOLUME.into(),
        mount_path: CONFIG_MOUNT_PATH.into(),
        read_only: Some(true),
        ..Default::default()
    };
    volumes::attach(spec, main, volume, mount);
}
