//! The operator configuration file (`--config`): upstream's `OperatorConfiguration`
//! (`operator.config.dynamo.nvidia.com/v1alpha1`), the sections and fields this operator
//! implements, each mapped onto the command-line setting of the same meaning.
//!
//! - **Strict.** A field this operator does not implement, a misspelt one, a value of the wrong
//!   type or out of range is refused at start with the field's path (`server.metrics.port:
//!   invalid value: ...`); the operator exits. Nothing is accepted and ignored, with one
//!   exception kept for upstream's files: `rbac.dgdrProfilingClusterRoleName` (this operator
//!   serves no DynamoGraphDeploymentRequests) is accepted and a warning says it has no effect.
//! - **Flags win.** A setting given on the command line or by its environment variable
//!   overrides the file; the file overrides the built-in default ([`apply`]).
//! - The effective settings are logged once at start (`effective configuration`).
//!
//! `docs/configuration.md` documents every field.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cli::RunArgs;
use crate::optional_apis::Mode;

/// `apiVersion` of the file.
pub const API_VERSION: &str = "operator.config.dynamo.nvidia.com/v1alpha1";
/// `kind` of the file.
pub const KIND: &str = "OperatorConfiguration";

/// The file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperatorConfiguration {
    /// [`API_VERSION`].
    pub api_version: String,
    /// [`KIND`].
    pub kind: String,
    /// Endpoints the operator serves.
    #[serde(default)]
    pub server: Server,
    /// Leader election.
    #[serde(default)]
    pub leader_election: LeaderElection,
    /// Namespace restriction.
    #[serde(default)]
    pub namespace: Namespace,
    /// Workload orchestrators.
    #[serde(default)]
    pub orchestrators: Orchestrators,
    /// Dynamic Resource Allocation.
    #[serde(default)]
    pub dra: Switch,
    /// The Gateway API Inference Extension (InferencePool).
    #[serde(default)]
    pub gaie: Switch,
    /// Infrastructure endpoints rendered into Dynamo pods.
    #[serde(default)]
    pub infrastructure: Infrastructure,
    /// How frontends are exposed outside the cluster.
    #[serde(default)]
    pub ingress: Ingress,
    /// ClusterRoles the planner's and EPP's accounts are bound to.
    #[serde(default)]
    pub rbac: Rbac,
    /// The MPI SSH key Secret of multinode TensorRT-LLM components.
    #[serde(default)]
    pub mpi: Mpi,
    /// Automatic checkpoints.
    #[serde(default)]
    pub checkpoint: Checkpoint,
    /// Discovery.
    #[serde(default)]
    pub discovery: Discovery,
    /// The operator's logs.
    #[serde(default)]
    pub logging: Logging,
}

/// `logging`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Logging {
    /// Log filter: a level (`info`, `debug`) or any `EnvFilter` expression
    /// (`info,operator=debug`).
    pub level: Option<String>,
    /// `text` or `json`.
    pub format: Option<crate::cli::LogFormat>,
}

/// `server`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Server {
    /// `/metrics`, `/healthz` and `/readyz`.
    pub metrics: Option<Endpoint>,
    /// The webhook server.
    pub webhook: Option<Webhook>,
}

/// An address and port.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    /// IP address to bind.
    pub bind_address: Option<IpAddr>,
    /// Port.
    pub port: Option<u16>,
}

/// `server.webhook`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Webhook {
    /// IP address to bind.
    pub host: Option<IpAddr>,
    /// Port.
    pub port: Option<u16>,
    /// Folder with `tls.crt`, `tls.key` (and `ca.crt`) provided by the install.
    pub cert_dir: Option<PathBuf>,
    /// Secret holding the self-signed webhook CA.
    pub secret_name: Option<String>,
    /// Service routing to the webhook.
    pub service_name: Option<String>,
}

/// `leaderElection`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElection {
    /// Elect a leader.
    pub enabled: Option<bool>,
    /// Name of the Lease.
    pub id: Option<String>,
    /// Namespace of the Lease.
    pub namespace: Option<String>,
}

/// `namespace`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Namespace {
    /// Watch and manage only this namespace.
    pub restricted: Option<String>,
}

/// `orchestrators`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Orchestrators {
    /// Grove.
    pub grove: Option<Grove>,
    /// LeaderWorkerSet.
    pub lws: Option<Switch>,
}

/// An optional API: unset uses it while served, `true` requires it, `false` never uses it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Switch {
    /// On, off, or unset (auto).
    pub enabled: Option<bool>,
}

/// `orchestrators.grove`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grove {
    /// Unset uses Grove while served, `true` requires it, `false` never uses it.
    pub enabled: Option<bool>,
    /// PodCliqueSets' `terminationDelay` (a Go duration such as `15m`).
    pub termination_delay: Option<GoDuration>,
}

/// `infrastructure`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Infrastructure {
    /// `NATS_SERVER` of Dynamo containers.
    pub nats_address: Option<String>,
    /// `ETCD_ENDPOINTS` of Dynamo containers.
    pub etcd_address: Option<String>,
    /// `MODEL_EXPRESS_URL` of Dynamo containers.
    #[serde(rename = "modelExpressURL")]
    pub model_express_url: Option<String>,
    /// `PROMETHEUS_ENDPOINT` of Dynamo containers.
    pub prometheus_endpoint: Option<String>,
}

/// `ingress`: what each frontend component gets (an Ingress, an Istio VirtualService, a Gateway
/// API HTTPRoute), unless its v1alpha1 graph says otherwise.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ingress {
    /// An Istio VirtualService on this gateway (`<namespace>/<name>`).
    pub virtual_service_gateway: Option<String>,
    /// An Ingress of this class.
    pub controller_class_name: Option<String>,
    /// TLS of the Ingress with this Secret.
    #[serde(rename = "controllerTLSSecretName")]
    pub controller_tls_secret_name: Option<String>,
    /// Hosts are `<graph>.<hostSuffix>` (`local` when unset).
    pub host_suffix: Option<String>,
    /// An HTTPRoute attached to this Gateway (`<namespace>/<name>`, or `<name>` in the graph's
    /// namespace). Not in upstream's file.
    #[serde(rename = "httpRouteGateway")]
    pub http_route_gateway: Option<String>,
}

/// `rbac`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rbac {
    /// ClusterRole bound to `planner-serviceaccount`.
    pub planner_cluster_role_name: Option<String>,
    /// ClusterRole bound to `epp-serviceaccount`.
    pub epp_cluster_role_name: Option<String>,
    /// Upstream's profiling role: no effect here (a warning says so).
    pub dgdr_profiling_cluster_role_name: Option<String>,
}

/// `mpi`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mpi {
    /// Name of the Secret: only `mpi-run-ssh-secret`, the name pods mount.
    pub ssh_secret_name: Option<String>,
    /// Namespace of the key pair copied into every graph namespace; unset: one generated per
    /// namespace.
    pub ssh_secret_namespace: Option<String>,
}

/// `checkpoint`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkpoint {
    /// Checkpointing (`false`: graphs enabling checkpoints are refused).
    pub enabled: Option<bool>,
}

/// `discovery`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Discovery {
    /// Discovery backend of graphs (and DCDs) without the `nvidia.com/dynamo-discovery-backend`
    /// annotation: `kubernetes` or `etcd`.
    pub backend: Option<crate::cli::Discovery>,
}

/// A Go duration (`15m`, `1h30m`, `90s`), checked when the file is read.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct GoDuration(pub String);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if is_go_duration(&text) {
            Ok(GoDuration(text))
        } else {
            Err(serde::de::Error::custom(format!(
                "{text:?} is not a duration (e.g. 15m, 1h30m, 90s)"
            )))
        }
    }
}

/// Whether `text` is a non-negative Go duration: number-unit pairs, units ns us µs ms s m h.
fn is_go_duration(text: &str) -> bool {
    let mut rest = text;
    if rest == "0" {
        return true;
    }
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .iter()
            .filter(|u| rest.starts_with(*u))
            .max_by_key(|u| u.len());
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

/// Why the file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// It could not be read.
    #[error("configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A field is unknown, of the wrong type, or has a bad value.
    #[error("configuration file {path}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
}

/// Reads and checks the file at `path`.
pub fn load(path: &Path) -> Result<OperatorConfiguration, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|(field, message)| ConfigError::Invalid {
        path: path.to_path_buf(),
        field,
        message,
    })
}

/// Parses and checks `text`: the refused field's path and why.
pub fn parse(text: &str) -> Result<OperatorConfiguration, (String, String)> {
    let deserializer = serde_yaml::Deserializer::from_str(text);
    let config: OperatorConfiguration =
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let field = e.path().to_string();
            let message = e.into_inner().to_string();
            // serde_yaml appends the position and may prefix its own path; ours says where.
            let message = message.split(" at line ").next().unwrap_or_default();
            let message = match message.split_once(": ") {
                Some((prefix, rest)) if field.starts_with(prefix) => rest,
                _ => message,
            };
            let field = if field == "." { String::new() } else { field };
            (field, message.to_string())
        })?;
    let refuse = |field: &str, message: String| Err((field.to_string(), message));
    if config.api_version != API_VERSION {
        return refuse(
            "apiVersion",
            format!("{:?}: expected {API_VERSION}", config.api_version),
        );
    }
    if config.kind != KIND {
        return refuse("kind", format!("{:?}: expected {KIND}", config.kind));
    }
    if let Some(name) = &config.mpi.ssh_secret_name
        && name != reconcilers::ssh_keys::DEFAULT_SECRET_NAME
    {
        return refuse(
            "mpi.sshSecretName",
            format!(
                "{name:?}: only {} is supported (the name multinode pods mount)",
                reconcilers::ssh_keys::DEFAULT_SECRET_NAME
            ),
        );
    }
    if let Some(level) = &config.logging.level
        && tracing_subscriber::EnvFilter::try_new(level).is_err()
    {
        return refuse(
            "logging.level",
            format!("{level:?} is not a level or a log filter expression"),
        );
    }
    Ok(config)
}

/// Whether the command line or the environment gave the setting with clap id `id`.
pub type Given<'a> = &'a dyn Fn(&str) -> bool;

/// Sets every setting of `args` the file sets and the command line did not give.
pub fn apply(config: &OperatorConfiguration, args: &mut RunArgs, given: Given<'_>) {
    let mut set = |id: &str, apply: &mut dyn FnMut(&mut RunArgs)| {
        if !given(id) {
            apply(args);
        }
    };
    if let Some(metrics) = &config.server.metrics {
        set("metrics_address", &mut |a| {
            a.metrics_address = endpoint(a.metrics_address, metrics.bind_address, metrics.port)
        });
    }
    if let Some(webhook) = &config.server.webhook {
        set("webhook_address", &mut |a| {
            a.webhook_address = endpoint(a.webhook_address, webhook.host, webhook.port)
        });
        set("webhook_cert_dir", &mut |a| {
            or(&mut a.webhook_cert_dir, &webhook.cert_dir)
        });
        set("webhook_secret", &mut |a| {
            some(&mut a.webhook_secret, &webhook.secret_name)
        });
        set("webhook_service", &mut |a| {
            some(&mut a.webhook_service, &webhook.service_name)
        });
    }
    let le = &config.leader_election;
    set("leader_elect", &mut |a| {
        some(&mut a.leader_elect, &le.enabled)
    });
    set("lease_name", &mut |a| some(&mut a.lease_name, &le.id));
    set("lease_namespace", &mut |a| {
        or(&mut a.lease_namespace, &le.namespace)
    });
    set("namespace", &mut |a| {
        or(&mut a.namespace, &config.namespace.restricted)
    });
    let infra = &config.infrastructure;
    set("nats_address", &mut |a| {
        or(&mut a.nats_address, &infra.nats_address)
    });
    set("etcd_address", &mut |a| {
        or(&mut a.etcd_address, &infra.etcd_address)
    });
    set("model_express_url", &mut |a| {
        or(&mut a.model_express_url, &infra.model_express_url)
    });
    set("prometheus_endpoint", &mut |a| {
        or(&mut a.prometheus_endpoint, &infra.prometheus_endpoint)
    });
    ingress(&config.ingress, &mut set);
    let rbac = &config.rbac;
    set("planner_cluster_role", &mut |a| {
        some(&mut a.planner_cluster_role, &rbac.planner_cluster_role_name)
    });
    set("epp_cluster_role", &mut |a| {
        some(&mut a.epp_cluster_role, &rbac.epp_cluster_role_name)
    });
    set("mpi_ssh_secret_namespace", &mut |a| {
        or(
            &mut a.mpi_ssh_secret_namespace,
            &config.mpi.ssh_secret_namespace,
        )
    });
    set("checkpoints", &mut |a| {
        some(&mut a.checkpoints, &config.checkpoint.enabled)
    });
    set("discovery_backend", &mut |a| {
        some(&mut a.discovery_backend, &config.discovery.backend)
    });
    set("log", &mut |a| some(&mut a.log, &config.logging.level));
    set("log_format", &mut |a| {
        some(&mut a.log_format, &config.logging.format)
    });
    let grove = config.orchestrators.grove.clone().unwrap_or_default();
    let delay = grove.termination_delay.map(|d| d.0);
    set("grove_termination_delay", &mut |a| {
        some(&mut a.grove_termination_delay, &delay)
    });
    let lws = config.orchestrators.lws.clone().unwrap_or_default();
    set("grove_api", &mut |a| {
        some(&mut a.grove_api, &mode(grove.enabled))
    });
    set("lws_api", &mut |a| some(&mut a.lws_api, &mode(lws.enabled)));
    set("dra_api", &mut |a| {
        some(&mut a.dra_api, &mode(config.dra.enabled))
    });
    set("gaie_api", &mut |a| {
        some(&mut a.gaie_api, &mode(config.gaie.enabled))
    });
}

/// The `ingress` section's settings, through `set` ([`apply`]'s).
fn ingress(ingress: &Ingress, set: &mut impl FnMut(&str, &mut dyn FnMut(&mut RunArgs))) {
    set("ingress_controller_class_name", &mut |a| {
        or(
            &mut a.ingress_controller_class_name,
            &ingress.controller_class_name,
        )
    });
    set("ingress_controller_tls_secret_name", &mut |a| {
        or(
            &mut a.ingress_controller_tls_secret_name,
            &ingress.controller_tls_secret_name,
        )
    });
    set("ingress_host_suffix", &mut |a| {
        or(&mut a.ingress_host_suffix, &ingress.host_suffix)
    });
    set("istio_virtual_service_gateway", &mut |a| {
        or(
            &mut a.istio_virtual_service_gateway,
            &ingress.virtual_service_gateway,
        )
    });
    set("http_route_gateway", &mut |a| {
        or(&mut a.http_route_gateway, &ingress.http_route_gateway)
    });
}

/// `current` with the file's address and port where it sets them.
fn endpoint(current: SocketAddr, ip: Option<IpAddr>, port: Option<u16>) -> SocketAddr {
    SocketAddr::new(ip.unwrap_or(current.ip()), port.unwrap_or(current.port()))
}

/// The mode of an optional API switch: unset leaves it (auto unless a flag said otherwise).
fn mode(enabled: Option<bool>) -> Option<Mode> {
    enabled.map(|on| if on { Mode::On } else { Mode::Off })
}

/// `target` becomes `value` where the file sets it.
fn some<T: Clone>(target: &mut T, value: &Option<T>) {
    if let Some(value) = value {
        target.clone_from(value);
    }
}

/// An optional `target` becomes `value` where the file sets it.
fn or<T: Clone>(target: &mut Option<T>, value: &Option<T>) {
    if value.is_some() {
        target.clone_from(value);
    }
}

/// Warnings about what the file sets to no effect.
pub fn warnings(config: &OperatorConfiguration) -> Vec<String> {
    let mut out = Vec::new();
    if config.rbac.dgdr_profiling_cluster_role_name.is_some() {
        out.push("rbac.dgdrProfilingClusterRoleName has no effect: this operator serves no DynamoGraphDeploymentRequests".to_string());
    }
    out
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
