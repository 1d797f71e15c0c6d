//! Command line: every flag also reads an environment variable (`DYNAMO_OPERATOR_*`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::optional_apis::{Mode, Policy};

/// Kubernetes operator for NVIDIA Dynamo inference graphs (DynamoGraphDeployment).
#[derive(Parser, Debug, Clone)]
#[command(name = "dynamo-operator", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Run the operator (the default).
    Run,
    /// Print the CustomResourceDefinitions this operator serves, as YAML (install them with
    /// `kubectl apply --server-side -f -`).
    Crds,
    /// Print the event→action map: every watch, what changes trigger work, which object is
    /// reconciled.
    Triggers,
    /// Print every object the operator would write for a graph, offline (no cluster): the
    /// operator's own reconcilers run against an in-memory API server. `--namespace` sets the
    /// graph's namespace when the manifest has none.
    Render(crate::render::RenderArgs),
}

/// Where Dynamo components discover each other (`--discovery-backend`, `discovery.backend`).
#[derive(
    ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Discovery {
    /// Kubernetes objects (EndpointSlices, DynamoWorkerMetadata): upstream's default.
    #[default]
    Kubernetes,
    /// An etcd cluster (`--etcd-address`).
    Etcd,
}

impl From<Discovery> for reconcilers::discovery::DiscoveryBackend {
    fn from(d: Discovery) -> Self {
        match d {
            Discovery::Kubernetes => Self::Kubernetes,
            Discovery::Etcd => Self::Etcd,
        }
    }
}

/// Log output format.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Operator configuration file (`OperatorConfiguration`, docs/configuration.md). A setting
    /// given on the command line or by its environment variable overrides the file.
    #[arg(long, env = "DYNAMO_OPERATOR_CONFIG", global = true)]
    pub config: Option<PathBuf>,

    /// Kubeconfig file; in-cluster configuration (or $KUBECONFIG) when unset.
    #[arg(long, env = "DYNAMO_OPERATOR_KUBECONFIG", global = true)]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace-restricted mode: watch and manage only this namespace, with no cluster-scoped
    /// request (a namespaced Role suffices; docs/configuration.md, "Namespace-restricted mode").
    /// All namespaces when unset.
    #[arg(long, env = "DYNAMO_OPERATOR_NAMESPACE", global = true)]
    pub namespace: Option<String>,

    /// Manage only DynamoGraphDeployments (and their children) whose labels match this selector,
    /// e.g. `shard=a` (for sharding several operators over one cluster).
    #[arg(long, env = "DYNAMO_OPERATOR_SELECTOR", global = true)]
    pub selector: Option<String>,

    /// Address of the /healthz, /readyz and /metrics endpoints. Bind to 127.0.0.1 to keep them
    /// local to the pod.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080",
        global = true
    )]
    pub metrics_address: SocketAddr,

    /// Log format.
    #[arg(long, env = "DYNAMO_OPERATOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Log filter (tracing `EnvFilter` syntax), e.g. `info,operator=debug`.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_LOG",
        default_value = "info",
        global = true
    )]
    pub log: String,

    /// Elect a leader through a coordination.k8s.io Lease, so only one replica reconciles.
    #[arg(long, env = "DYNAMO_OPERATOR_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub leader_elect: bool,

    /// Name of the leader election Lease.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_LEASE_NAME",
        default_value = "dynamo-operator-leader",
        global = true
    )]
    pub lease_name: String,

    /// Namespace of the leader election Lease; the pod's namespace (POD_NAMESPACE) or the
    /// watched namespace or `default` when unset.
    #[arg(long, env = "DYNAMO_OPERATOR_LEASE_NAMESPACE", global = true)]
    pub lease_namespace: Option<String>,

    /// Lease duration in seconds: how long a dead leader blocks the others.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_LEASE_DURATION",
        default_value_t = 15,
        global = true
    )]
    pub lease_duration: u64,

    /// Seconds in-flight reconciles get to finish after SIGTERM/SIGINT; what is still running
    /// then is cancelled (it is idempotent and resumes on the next leader). Keep it below the
    /// pod's terminationGracePeriodSeconds.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_SHUTDOWN_TIMEOUT",
        default_value_t = 5,
        global = true
    )]
    pub shutdown_timeout: u64,

    /// This replica's identity in the Lease; POD_NAME or the host name when unset.
    #[arg(long, env = "POD_NAME", global = true)]
    pub identity: Option<String>,

    /// Serve the webhooks over HTTPS: the DynamoGraphDeployment conversion webhook (v1alpha1 ⇄
    /// v1beta1) and the checkpoint restore webhook (`--checkpoint-restore-webhook`).
    #[arg(long, env = "DYNAMO_OPERATOR_WEBHOOK", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub webhook: bool,

    /// Address of the webhooks (HTTPS).
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_WEBHOOK_ADDRESS",
        default_value = "0.0.0.0:9443",
        global = true
    )]
    pub webhook_address: SocketAddr,

    /// Folder with `tls.crt`, `tls.key` (and optionally `ca.crt`) for the webhook, e.g. mounted
    /// from cert-manager. When unset, a self-signed CA is kept in `--webhook-secret`.
    #[arg(long, env = "DYNAMO_OPERATOR_WEBHOOK_CERT_DIR", global = true)]
    pub webhook_cert_dir: Option<PathBuf>,

    /// Secret (in the operator's namespace) holding the self-signed webhook CA.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_WEBHOOK_SECRET",
        default_value = "dynamo-operator-webhook-ca",
        global = true
    )]
    pub webhook_secret: String,

    /// Service that routes to the webhook (in the operator's namespace).
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_WEBHOOK_SERVICE",
        default_value = "dynamo-operator-webhook",
        global = true
    )]
    pub webhook_service: String,

    /// Port of that Service.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_WEBHOOK_SERVICE_PORT",
        default_value_t = 443,
        global = true
    )]
    pub webhook_service_port: i32,

    /// Reach the webhook at this base URL instead of the Service (an operator running outside
    /// the cluster), e.g. `https://127.0.0.1:9443`.
    #[arg(long, env = "DYNAMO_OPERATOR_WEBHOOK_URL", global = true)]
    pub webhook_url: Option<String>,

    /// Point the conversion webhook of the CRDs served in v1alpha1 and v1beta1 (graphs, DCDs,
    /// scaling adapters) at this operator at start-up, and migrate objects stored as v1alpha1 to
    /// v1beta1 (`storedVersions`).
    #[arg(long, env = "DYNAMO_OPERATOR_MANAGE_CRD_CONVERSION", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub manage_crd_conversion: bool,

    /// Serve the checkpoint restore webhook (with `--webhook`): each new pod of a
    /// `startupPolicy: Immediate` checkpoint component whose DynamoCheckpoint is Ready is
    /// restore-shaped at creation. The operator applies its MutatingWebhookConfiguration
    /// `dynamo-operator-checkpoint-restore` (pointing at this operator, `failurePolicy` from
    /// `--checkpoint-restore-failure-policy`) at start-up and watches DynamoCheckpoints and
    /// snapshot-agent DaemonSets for it.
    #[arg(long, env = "DYNAMO_OPERATOR_CHECKPOINT_RESTORE_WEBHOOK", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub checkpoint_restore_webhook: bool,

    /// The restore webhook's `failurePolicy`: `Ignore` (a pod is created cold when the webhook
    /// cannot be reached) or `Fail` (it is refused, and its controller retries).
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_CHECKPOINT_RESTORE_FAILURE_POLICY",
        value_enum,
        default_value_t = crate::restore_webhook::FailurePolicy::Ignore,
        global = true
    )]
    pub checkpoint_restore_failure_policy: crate::restore_webhook::FailurePolicy,

    /// ClusterRole the namespaces' `planner-serviceaccount` is bound to (RoleBinding
    /// `planner-serviceaccount-binding`).
    #[arg(long, env = "DYNAMO_OPERATOR_PLANNER_CLUSTER_ROLE", default_value = reconcilers::shared::DEFAULT_PLANNER_CLUSTER_ROLE, global = true)]
    pub planner_cluster_role: String,

    /// ClusterRole the namespaces' `epp-serviceaccount` is bound to (RoleBinding
    /// `epp-serviceaccount-binding`).
    #[arg(long, env = "DYNAMO_OPERATOR_EPP_CLUSTER_ROLE", default_value = reconcilers::shared::DEFAULT_EPP_CLUSTER_ROLE, global = true)]
    pub epp_cluster_role: String,

    /// Namespace of the MPI SSH key pair (Secret `mpi-run-ssh-secret`) copied into every graph
    /// namespace that needs it; unset: a key pair is generated per namespace.
    #[arg(long, env = "DYNAMO_OPERATOR_MPI_SSH_SECRET_NAMESPACE", global = true)]
    pub mpi_ssh_secret_namespace: Option<String>,

    /// Checkpointing. `false` refuses every graph with a component that enables
    /// `experimental.checkpoint`, as upstream does.
    #[arg(long, env = "DYNAMO_OPERATOR_CHECKPOINTS", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub checkpoints: bool,

    /// `terminationDelay` of the PodCliqueSets of the Grove pathway (a Go duration).
    #[arg(long, env = "DYNAMO_OPERATOR_GROVE_TERMINATION_DELAY", default_value = grove_program::grove_render::DEFAULT_TERMINATION_DELAY, global = true)]
    pub grove_termination_delay: String,

    /// Grove (`grove.io`): `auto` uses it while served, `on` refuses to start without it,
    /// `off` never uses it (graphs then take the component pathway).
    #[arg(long, env = "DYNAMO_OPERATOR_GROVE_API", value_enum, default_value_t = Mode::Auto, global = true)]
    pub grove_api: Mode,

    /// LeaderWorkerSet (`leaderworkerset.x-k8s.io`) for multinode components: auto, on, off.
    #[arg(long, env = "DYNAMO_OPERATOR_LWS_API", value_enum, default_value_t = Mode::Auto, global = true)]
    pub lws_api: Mode,

    /// Dynamic Resource Allocation (`resource.k8s.io/v1`) for the GPU memory service and
    /// failover: auto, on, off.
    #[arg(long, env = "DYNAMO_OPERATOR_DRA_API", value_enum, default_value_t = Mode::Auto, global = true)]
    pub dra_api: Mode,

    /// The Gateway API Inference Extension (`inference.networking.k8s.io`, InferencePool) for
    /// EPP components: auto, on, off.
    #[arg(long, env = "DYNAMO_OPERATOR_GAIE_API", value_enum, default_value_t = Mode::Auto, global = true)]
    pub gaie_api: Mode,

    /// NATS address every Dynamo container gets as `NATS_SERVER` (unset: none; a user env of
    /// that name wins).
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_NATS_ADDRESS",
        alias = "natsAddr",
        global = true
    )]
    pub nats_address: Option<String>,

    /// etcd endpoints every Dynamo container gets as `ETCD_ENDPOINTS` (unset: none).
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_ETCD_ADDRESS",
        alias = "etcdAddr",
        global = true
    )]
    pub etcd_address: Option<String>,

    /// Model Express URL every Dynamo container gets as `MODEL_EXPRESS_URL` (unset: none).
    #[arg(long, env = "DYNAMO_OPERATOR_MODEL_EXPRESS_URL", global = true)]
    pub model_express_url: Option<String>,

    /// Prometheus endpoint every Dynamo container gets as `PROMETHEUS_ENDPOINT` (unset: none).
    #[arg(long, env = "DYNAMO_OPERATOR_PROMETHEUS_ENDPOINT", global = true)]
    pub prometheus_endpoint: Option<String>,

    /// Discovery backend of graphs (and DCDs) without the `nvidia.com/dynamo-discovery-backend`
    /// annotation.
    #[arg(long, env = "DYNAMO_OPERATOR_DISCOVERY_BACKEND", value_enum, default_value_t = Discovery::Kubernetes, global = true)]
    pub discovery_backend: Discovery,

    /// Class of the Ingress every frontend gets (host `<graph>.<ingress host suffix>`, path `/`
    /// to the frontend Service's port 8000); unset: none, unless a v1alpha1 graph asks.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_INGRESS_CONTROLLER_CLASS_NAME",
        global = true
    )]
    pub ingress_controller_class_name: Option<String>,

    /// Secret holding the TLS certificate of the frontends' Ingresses (unset: no TLS).
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_INGRESS_CONTROLLER_TLS_SECRET_NAME",
        global = true
    )]
    pub ingress_controller_tls_secret_name: Option<String>,

    /// Domain of the frontends' hosts, `<graph>.<suffix>` (unset: `local`).
    #[arg(long, env = "DYNAMO_OPERATOR_INGRESS_HOST_SUFFIX", global = true)]
    pub ingress_host_suffix: Option<String>,

    /// Istio gateway (`<namespace>/<name>`) of the VirtualService every frontend gets (unset:
    /// none, unless a v1alpha1 graph asks); needs Istio's `networking.istio.io` CRDs.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_ISTIO_VIRTUAL_SERVICE_GATEWAY",
        global = true
    )]
    pub istio_virtual_service_gateway: Option<String>,

    /// Gateway (`<namespace>/<name>`, or `<name>` in the graph's namespace) the HTTPRoute every
    /// frontend gets attaches to (unset: none); needs the Gateway API CRDs.
    #[arg(long, env = "DYNAMO_OPERATOR_HTTP_ROUTE_GATEWAY", global = true)]
    pub http_route_gateway: Option<String>,

    /// Discover image pull secrets, as upstream does: every pod gets the Secrets of type
    /// `kubernetes.io/dockerconfigjson` of its namespace whose registries its images are pulled
    /// from (unless its annotation `nvidia.com/disable-image-pull-secret-discovery` is
    /// `"true"`). Needs `list` and `watch` on Secrets across the watched namespaces; `false`
    /// keeps the operator to reading Secrets by name (the trade-off: docs/architecture.md,
    /// "Image pull secret discovery").
    #[arg(long, env = "DYNAMO_OPERATOR_DISCOVER_IMAGE_PULL_SECRETS", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub discover_image_pull_secrets: bool,

    /// Concurrent reconciles of DynamoGraphDeployments.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_DGD_CONCURRENCY",
        default_value_t = 4,
        global = true
    )]
    pub dgd_concurrency: u16,

    /// Concurrent reconciles of DynamoComponentDeployments.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_DCD_CONCURRENCY",
        default_value_t = 8,
        global = true
    )]
    pub dcd_concurrency: u16,

    /// Concurrent reconciles of DynamoCheckpoints.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_CHECKPOINT_CONCURRENCY",
        default_value_t = 2,
        global = true
    )]
    pub checkpoint_concurrency: u16,

    /// Concurrent reconciles of DynamoGraphDeploymentScalingAdapters.
    #[arg(
        long,
        env = "DYNAMO_OPERATOR_DGDSA_CONCURRENCY",
        default_value_t = 4,
        global = true
    )]
    pub dgdsa_concurrency: u16,
}

impl RunArgs {
    /// The infrastructure endpoints rendered as env into every Dynamo pod.
    pub fn infrastructure(&self) -> pod_render::Infrastructure {
        pod_render::Infrastructure {
            nats_address: self.nats_address.clone(),
            etcd_address: self.etcd_address.clone(),
            model_express_url: self.model_express_url.clone(),
            prometheus_endpoint: self.prometheus_endpoint.clone(),
        }
    }

    /// Which optional APIs the operator uses.
    pub fn api_policy(&self) -> Policy {
        Policy {
            grove: self.grove_api,
            lws: self.lws_api,
            dra: self.dra_api,
            gaie: self.gaie_api,
        }
    }

    /// The built-in settings (no flag given; environment variables still apply).
    pub fn defaults() -> Self {
        <Cli as clap::Parser>::parse_from(["dynamo-operator"]).run
    }

    /// The shared resources' settings: scope, ClusterRoles, SSH keys, checkpoints, infrastructure,
    /// discovery, ingress.
    pub fn shared_config(&self) -> reconcilers::shared::SharedConfig {
        reconcilers::shared::SharedConfig {
            planner_cluster_role: Some(self.planner_cluster_role.clone()),
            epp_cluster_role: Some(self.epp_cluster_role.clone()),
            checkpoints_enabled: self.checkpoints,
            ssh_keys: Some(reconcilers::ssh_keys::SshKeyConfig {
                source_namespace: self.mpi_ssh_secret_namespace.clone(),
                ..Default::default()
            }),
            infrastructure: self.infrastructure(),
            discovery_backend: self.discovery_backend.into(),
            scope: match &self.namespace {
                Some(ns) => reconcilers::shared::NamespaceScope::Restricted(ns.clone()),
                None => reconcilers::shared::NamespaceScope::ClusterWide,
            },
            ingress: reconcilers::ingress::IngressConfig {
                controller_class_name: self.ingress_controller_class_name.clone(),
                controller_tls_secret_name: self.ingress_controller_tls_secret_name.clone(),
                host_suffix: self.ingress_host_suffix.clone(),
                virtual_service_gateway: self.istio_virtual_service_gateway.clone(),
                http_route_gateway: self.http_route_gateway.clone(),
            },
        }
    }

    /// The identity this replica claims the Lease with.
    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("dynamo-operator-{}", std::process::id()))
    }

    /// The operator's own namespace (webhook Secret and Service).
    pub fn own_namespace(&self) -> String {
        std::env::var("POD_NAMESPACE")
            .ok()
            .or_else(|| self.namespace.clone())
            .unwrap_or_else(|| "dynamo-system".to_string())
    }

    /// The namespace of the Lease.
    pub fn lease_namespace(&self) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| self.namespace.clone())
            .unwrap_or_else(|| "default".to_string())
    }
}
