//! DynamoGraphDeployment, nvidia.com/v1alpha1 (served, converted to v1beta1 for storage).

use super::component::{DynamoComponentDeploymentSharedSpec, Pvc, ScalingAdapter};
use crate::common::{
    BackendFramework, ComponentCheckpointStatus, ComponentGroupComponentSpec, ComponentKind,
    DgdState, KvTransferEnforcement, PlacementStatus, Restart, RestartStatus, RollingUpdatePhase,
};
use crate::v1beta1::ProviderOverride;
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Desired state of a v1alpha1 DynamoGraphDeployment: services keyed by name.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "nvidia.com",
    version = "v1alpha1",
    kind = "DynamoGraphDeployment",
    plural = "dynamographdeployments",
    namespaced,
    status = "DynamoGraphDeploymentStatus",
    shortname = "dgd",
    category = "dynamo",
    derive = "PartialEq",
    derive = "Default",
    storage = false,
    deprecated = "nvidia.com/v1alpha1 DynamoGraphDeployment is deprecated; use nvidia.com/v1beta1 DynamoGraphDeployment",
    doc = "DynamoGraphDeployment deploys an NVIDIA Dynamo inference graph (v1alpha1 shape: spec.services).",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Ready condition of the graph deployment"
    ),
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.state",
        description = "Lifecycle state"
    ),
    printcolumn(
        name = "Backend",
        type_ = "string",
        json_path = ".spec.backendFramework",
        description = "Backend framework (sglang, vllm, trtllm)"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("oldSelf.hasValue() || !has(self.restart)").message("spec.restart must be unset on create; set spec.restart.id after creation to request a restart").optional_old_self(true))]
pub struct DynamoGraphDeploymentSpec {
    /// Provider-native fragment for the graph-level workload (Grove: only
    /// spec.template.topologyConstraint of the PodCliqueSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_override: Option<ProviderOverride>,
    /// Annotations propagated to every child resource; service values win.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::annotation_map")]
    pub annotations: BTreeMap<String, String>,
    /// Labels propagated to every child resource; service values win.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::label_map")]
    pub labels: BTreeMap<String, String>,
    /// PriorityClass of the Grove PodCliqueSet (Grove pathway only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// PersistentVolumeClaims that services can mount by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub pvcs: Vec<Pvc>,
    /// The services of the graph, keyed by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 25))]
    pub services: BTreeMap<String, DynamoComponentDeploymentSharedSpec>,
    /// Environment variables of every service unless overridden by the service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub envs: Vec<EnvVar>,
    /// Backend framework: sglang, vllm or trtllm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_framework: Option<BackendFramework>,
    /// Graph restart request. Must be unset on create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,
    /// Deployment-level topology constraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<SpecTopologyConstraint>,
    /// Graph-level preview features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<DynamoGraphDeploymentExperimentalSpec>,
}

/// Deployment-level topology placement (v1alpha1 shape).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SpecTopologyConstraint {
    /// Name of the ClusterTopology that defines the topology hierarchy.
    #[schemars(length(min = 1))]
    pub topology_profile: String,
    /// Default topology domain to pack pods within.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub pack_domain: Option<String>,
}

/// Graph-level preview features (v1alpha1 shape).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentExperimentalSpec {
    /// Topology-aware routing of KV-cache transfers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_policy: Option<KvTransferPolicy>,
    /// Multi-service scale units.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub component_groups: Vec<ComponentGroupSpec>,
}

/// Topology-aware routing of KV-cache transfers (v1alpha1 shape).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KvTransferPolicy {
    /// Node label key whose value identifies each worker's topology domain.
    #[schemars(length(min = 1))]
    pub label_key: String,
    /// Logical name of the topology level to enforce.
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub domain: String,
    /// required (default) or preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "required"))]
    pub enforcement: Option<KvTransferEnforcement>,
    /// Strength of the same-domain preference in [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub preferred_weight: Option<f32>,
}

/// A multi-service scale unit (v1alpha1 shape).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentGroupSpec {
    /// Name of the group.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$")
    )]
    pub name: String,
    /// Desired replicas of the group.
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// Whether a scaling adapter owns replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_adapter: Option<ScalingAdapter>,
    /// Services in the group.
    #[schemars(length(min = 1, max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub components: Vec<ComponentGroupComponentSpec>,
}

fn default_state() -> DgdState {
    DgdState::Initializing
}

/// Observed state of a v1alpha1 DynamoGraphDeployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentStatus {
    /// Most recent generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Lifecycle state.
    #[serde(default = "default_state")]
    #[schemars(extend("default" = "initializing"))]
    pub state: DgdState,
    /// Latest observed conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Replica status per service.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub services: BTreeMap<String, ServiceReplicaStatus>,
    /// Status of the graph-level restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartStatus>,
    /// Checkpoint status per service.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checkpoints: BTreeMap<String, ComponentCheckpointStatus>,
    /// Progress of an operator-managed rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateStatus>,
    /// Scheduler placement signals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementStatus>,
}

/// Progress of a rolling update (v1alpha1 shape).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateStatus {
    /// Current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RollingUpdatePhase>,
    /// When the rolling update began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the rolling update ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Services that completed the rolling update.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updated_services: Vec<String>,
}

/// Replica status of one service.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReplicaStatus {
    /// Kind of the backing resource.
    pub component_kind: ComponentKind,
    /// Deprecated: name of the primary backing resource; use componentNames.
    #[serde(default)]
    pub component_name: String,
    /// Names of the backing resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub component_names: Vec<String>,
    /// Effective Dynamo runtime namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_namespace: Option<String>,
    /// GPUs of one inference engine of a replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpus_per_engine: Option<i64>,
    /// GPUs added per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpus_per_replica: Option<i64>,
    /// Non-terminated replicas.
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// Replicas at the desired revision.
    #[schemars(range(min = 0))]
    pub updated_replicas: i32,
    /// Ready replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ready_replicas: Option<i32>,
    /// Available replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub available_replicas: Option<i32>,
    /// Scheduled replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub scheduled_replicas: Option<i32>,
}
