//! Types whose JSON shape is identical in v1alpha1 and v1beta1.

use k8s_openapi::api::core::v1::ConfigMapKeySelector;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Regex of a topology domain name (`zone`, `rack`, `host`, ...).
pub const TOPOLOGY_DOMAIN_PATTERN: &str = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$";
/// Regex of a component name (`spec.components[*].name`).
pub const COMPONENT_NAME_PATTERN: &str = "^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$";
/// Regex of a DNS-1123 label (container names, role names).
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// The inference backend framework.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum BackendFramework {
    Sglang,
    Vllm,
    Trtllm,
}

impl BackendFramework {
    /// The wire value (`sglang`, `vllm`, `trtllm`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sglang => "sglang",
            Self::Vllm => "vllm",
            Self::Trtllm => "trtllm",
        }
    }
}

/// Kind of the Kubernetes resource backing a component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ComponentKind {
    PodClique,
    PodCliqueScalingGroup,
    Deployment,
    LeaderWorkerSet,
}

/// High-level lifecycle state of a DynamoGraphDeployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "lowercase")]
pub enum DgdState {
    #[default]
    Initializing,
    Pending,
    Successful,
    Failed,
}

impl DgdState {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initializing => "initializing",
            Self::Pending => "pending",
            Self::Successful => "successful",
            Self::Failed => "failed",
        }
    }
}

/// How a graph-level restart proceeds.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RestartStrategyType {
    // One component at a time, in `order` (the default).
    Sequential,
    // Every component at once.
    Parallel,
}

/// A restart request for the whole graph.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Restart {
    /// An arbitrary string; changing it requests a restart of the graph according to
    /// `strategy`.
    #[schemars(length(min = 1))]
    pub id: String,
    /// How components are restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RestartStrategy>,
}

/// How components are restarted.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RestartStrategy {
    /// The restart strategy: Sequential (default) or Parallel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Sequential"))]
    pub r#type: Option<RestartStrategyType>,
    /// The complete ordered list of component names for a sequential restart. Omit to use the
    /// default order. Must not be set for parallel restarts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<String>,
}

/// Phase of a graph-level restart.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RestartPhase {
    Pending,
    Restarting,
    Completed,
    Failed,
    Superseded,
}

/// Progress of a graph-level restart.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RestartStatus {
    /// The restart id being processed; matches `spec.restart.id`.
    #[serde(
        rename = "observedID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_id: Option<String>,
    /// Phase of the restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestartPhase>,
    /// Names of the components being restarted right now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_progress: Vec<String>,
}

/// Phase of an operator-managed rolling update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RollingUpdatePhase {
    Pending,
    InProgress,
    Completed,
    Failed,
    // No rolling update (the empty string).
    #[serde(rename = "")]
    None,
}

/// Whether a placement score is available, and how complete it is.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlacementScoreState {
    Reported,
    Partial,
    Unsupported,
    Unknown,
}

/// Scheduler placement signals for the graph.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// Placement score in [0, 1], the minimum over placement units; higher is better.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub score: Option<f64>,
    /// Placement score reporting state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<PlacementScoreState>,
}

/// Checkpoint status of one component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentCheckpointStatus {
    /// Name of the active checkpoint object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_name: Option<String>,
    /// Artifact id of the checkpoint (legacy).
    #[serde(
        rename = "checkpointID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub checkpoint_id: Option<String>,
    /// Identity hash of the checkpoint (deprecated; legacy checkpoints only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_hash: Option<String>,
    /// Whether the checkpoint artifact is ready for new pods to restore from.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
}

/// A model served by a component; a headless Service is created for endpoint discovery.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ModelReference {
    /// Base model identifier, e.g. `llama-3-70b-instruct-v1`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Model revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

fn default_node_count() -> i32 {
    2
}

/// Multinode layout of a worker-class component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MultinodeSpec {
    /// Number of nodes (pods) per replica; total GPUs are nodeCount times the container GPU
    /// request. Immutable after creation.
    #[serde(default = "default_node_count")]
    #[schemars(range(min = 2))]
    pub node_count: i32,
}

impl Default for MultinodeSpec {
    fn default() -> Self {
        Self { node_count: 2 }
    }
}

/// Configuration of an Endpoint Picker Plugin (legacy Go EPP) component.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.configMapRef) != has(self.config)").message("exactly one of configMapRef or config must be specified"))]
pub struct EppConfig {
    /// A user ConfigMap key holding EndpointPickerConfig YAML. Mutually exclusive with config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeySelector>,
    /// EndpointPickerConfig as an object; the operator writes it into a ConfigMap. Mutually
    /// exclusive with configMapRef.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::optional_preserve_unknown_object")]
    pub config: Option<serde_json::Value>,
}

/// Inputs that determine checkpoint equivalence (legacy identity).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DynamoCheckpointIdentity {
    /// Model identifier, e.g. `meta-llama/Llama-3-70B`.
    #[schemars(length(min = 1))]
    pub model: String,
    /// Runtime framework.
    pub backend_framework: BackendFramework,
    /// Dynamo platform version; when empty it is left out of the identity hash so checkpoints
    /// stay portable across releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamo_version: Option<String>,
    /// Tensor parallel size (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("default" = 1))]
    pub tensor_parallel_size: Option<i32>,
    /// Pipeline parallel size (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("default" = 1))]
    pub pipeline_parallel_size: Option<i32>,
    /// Data type (`fp16`, `bf16`, `fp8`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// Maximum sequence length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_model_len: Option<i32>,
    /// Additional parameters that affect the identity hash.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_parameters: BTreeMap<String, String>,
}

impl Default for DynamoCheckpointIdentity {
    fn default() -> Self {
        Self {
            model: String::new(),
            backend_framework: BackendFramework::Vllm,
            dynamo_version: None,
            tensor_parallel_size: None,
            pipeline_parallel_size: None,
            dtype: None,
            max_model_len: None,
            extra_parameters: BTreeMap::new(),
        }
    }
}

/// How a prefill worker's topology is applied to decode routing.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum KvTransferEnforcement {
    // Only decode workers in the same topology domain.
    Required,
    // Bias towards decode workers in the same topology domain.
    Preferred,
}

/// Checkpoint creation mode (deprecated in v1beta1).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckpointMode {
    // The DGD controller creates the checkpoint.
    Auto,
    // The user creates the checkpoint.
    Manual,
}

/// One component of a component group.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentGroupComponentSpec {
    /// Name of the DGD component included in the group.
    #[schemars(length(min = 1))]
    pub name: String,
}
