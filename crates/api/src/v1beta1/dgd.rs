//! DynamoGraphDeployment, nvidia.com/v1beta1 (the storage version).

use super::component::{DynamoComponentDeploymentSharedSpec, ProviderOverride, ScalingAdapter};
use crate::common::{
    BackendFramework, ComponentCheckpointStatus, ComponentGroupComponentSpec, ComponentKind,
    DgdState, KvTransferEnforcement, PlacementStatus, Restart, RestartStatus, RollingUpdatePhase,
};
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Desired state of a DynamoGraphDeployment: the components of an inference graph and the
/// settings they share.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "nvidia.com",
    version = "v1beta1",
    kind = "DynamoGraphDeployment",
    plural = "dynamographdeployments",
    namespaced,
    status = "DynamoGraphDeploymentStatus",
    shortname = "dgd",
    category = "dynamo",
    derive = "PartialEq",
    derive = "Default",
    doc = "DynamoGraphDeployment deploys an NVIDIA Dynamo inference graph (frontend, workers, planner, ...). v1beta1 is the storage version.",
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
    /// Provider-native fragment for the graph-level workload (Grove: apiVersion
    /// grove.io/v1alpha1, target PodCliqueSet, only spec.template.topologyConstraint). Cannot
    /// select or change the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_override: Option<ProviderOverride>,

    /// Annotations propagated to every child resource and pod template; component pod template
    /// values win. Keys must be valid Kubernetes annotation keys.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::annotation_map")]
    pub annotations: BTreeMap<String, String>,

    /// Labels propagated to every child resource and pod template; component pod template
    /// values win. Keys and values must be valid Kubernetes labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::label_map")]
    pub labels: BTreeMap<String, String>,

    /// PriorityClass of the Grove PodCliqueSet (Grove pathway only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// The components of the graph. Names are unique case-insensitively; at most one component
    /// has type epp.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 25), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(
        validation = Rule::new("self.filter(c, has(c.type) && c.type == 'epp').size() <= 1").message("at most one component may have type epp"),
        validation = Rule::new("self.all(c1, !has(c1.name) || self.filter(c2, has(c2.name) && c2.name.lowerAscii() == c1.name.lowerAscii()).size() == 1)").message("component names must be unique case-insensitively"),
    )]
    pub components: Vec<DynamoComponentDeploymentSharedSpec>,

    /// Environment prepended to every component's main container; component entries with the
    /// same name win.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Backend framework: sglang, vllm or trtllm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_framework: Option<BackendFramework>,

    /// Graph restart request. Must be unset on create; set restart.id afterwards to restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,

    /// Deployment-level topology constraint; components without their own inherit it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<SpecTopologyConstraint>,

    /// Graph-level preview features (KV transfer policy, component groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<DynamoGraphDeploymentExperimentalSpec>,
}

impl DynamoGraphDeploymentSpec {
    /// The component with this name.
    pub fn component(&self, name: &str) -> Option<&DynamoComponentDeploymentSharedSpec> {
        self.components.iter().find(|c| c.name == name)
    }

    /// The component groups (`spec.experimental.componentGroups`), in spec order.
    pub fn component_groups(&self) -> &[ComponentGroupSpec] {
        self.experimental
            .as_ref()
            .map(|e| e.component_groups.as_slice())
            .unwrap_or_default()
    }

    /// The component group `component` (a component name, matched exactly) belongs to.
    pub fn component_group(&self, component: &str) -> Option<&ComponentGroupSpec> {
        self.component_groups()
            .iter()
            .find(|g| g.components.iter().any(|m| m.name == component))
    }

    /// Any component spans more than one node.
    pub fn has_multinode_component(&self) -> bool {
        self.components.iter().any(|c| c.is_multinode())
    }

    /// The epp component, if any.
    pub fn epp_component(&self) -> Option<&DynamoComponentDeploymentSharedSpec> {
        self.components
            .iter()
            .find(|c| c.r#type == Some(super::ComponentType::Epp))
    }

    /// A topology constraint is set at any level.
    pub fn has_topology_constraint(&self) -> bool {
        self.topology_constraint.is_some()
            || self
                .components
                .iter()
                .any(|c| c.topology_constraint.is_some())
    }
}

/// Deployment-level topology placement.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SpecTopologyConstraint {
    /// Name of the ClusterTopology resource that defines the topology hierarchy.
    #[schemars(length(min = 1))]
    pub cluster_topology_name: String,
    /// Default topology domain to pack pods within; omit when only components carry
    /// constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub pack_domain: Option<String>,
}

/// Graph-level preview features.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentExperimentalSpec {
    /// Topology-aware routing of KV-cache transfers between prefill and decode workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_policy: Option<KvTransferPolicy>,
    /// Multi-component scale units; each renders as one Grove PodCliqueScalingGroup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub component_groups: Vec<ComponentGroupSpec>,
}

/// Topology-aware routing of KV-cache transfers.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("(has(self.labelKey) && !has(self.clusterTopologyName)) || (!has(self.labelKey) && has(self.clusterTopologyName))").message("exactly one of labelKey or clusterTopologyName is required"),
    validation = Rule::new("!has(self.enforcement) || self.enforcement != 'preferred' || has(self.preferredWeight)").message("preferredWeight is required when enforcement is preferred"),
    validation = Rule::new("!has(self.preferredWeight) || (has(self.enforcement) && self.enforcement == 'preferred')").message("preferredWeight may only be set when enforcement is preferred"),
)]
pub struct KvTransferPolicy {
    /// ClusterTopology whose levels are projected onto worker pod labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub cluster_topology_name: Option<String>,
    /// Node label key whose value identifies each worker's topology domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317))]
    pub label_key: Option<String>,
    /// Logical name of the topology level to enforce (zone, rack, ...).
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub domain: String,
    /// required (default): same-domain decode workers only; preferred: bias towards them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "required"))]
    pub enforcement: Option<KvTransferEnforcement>,
    /// Strength of the same-domain preference in [0, 1]; only with enforcement preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub preferred_weight: Option<f32>,
}

/// A multi-component scale unit.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentGroupSpec {
    /// Name of the group, unique within spec.experimental.componentGroups.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$")
    )]
    pub name: String,
    /// Desired replicas of the group; owned by a scaling adapter when scalingAdapter is set.
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// Presence opts the group into a DynamoGraphDeploymentScalingAdapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_adapter: Option<ScalingAdapter>,
    /// Components in the group.
    #[schemars(length(min = 1, max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub components: Vec<ComponentGroupComponentSpec>,
}

fn default_state() -> DgdState {
    DgdState::Initializing
}

/// Observed state of a DynamoGraphDeployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentStatus {
    /// Most recent generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Lifecycle state: initializing, pending, successful or failed.
    #[serde(default = "default_state")]
    #[schemars(extend("default" = "initializing"))]
    pub state: DgdState,
    /// Latest observed conditions (Ready, OwnershipConflict, TopologyLevelsAvailable, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Replica status per component, keyed by component name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ComponentReplicaStatus>,
    /// Status of the graph-level restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartStatus>,
    /// Checkpoint status per component, keyed by component name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checkpoints: BTreeMap<String, ComponentCheckpointStatus>,
    /// Progress of an operator-managed rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateStatus>,
    /// Scheduler placement signals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementStatus>,
}

/// Progress of an operator-managed rolling update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateStatus {
    /// Current phase: Pending, InProgress, Completed, Failed (or empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RollingUpdatePhase>,
    /// When the rolling update began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the rolling update ended (successfully or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Components that completed the rolling update.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updated_components: Vec<String>,
}

/// Replica status of one component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentReplicaStatus {
    /// Kind of the backing resource: PodClique, PodCliqueScalingGroup, Deployment or
    /// LeaderWorkerSet.
    pub component_kind: ComponentKind,
    /// Deprecated: name of the primary backing resource; use componentNames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_name: Option<String>,
    /// Names of the backing resources (old and new during a rolling update).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub component_names: Vec<String>,
    /// Effective Dynamo runtime namespace of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_namespace: Option<String>,
    /// GPUs of one inference engine of a replica, across its nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpus_per_engine: Option<i64>,
    /// GPUs added when the component scales by one replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpus_per_replica: Option<i64>,
    /// Non-terminated replicas.
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// Replicas at the desired revision.
    #[schemars(range(min = 0))]
    pub updated_replicas: i32,
    /// Ready replicas (PodClique, Deployment, LeaderWorkerSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ready_replicas: Option<i32>,
    /// Available replicas (Deployment, PodCliqueScalingGroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub available_replicas: Option<i32>,
    /// Replicas the scheduler has placed, in component-replica units; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub scheduled_replicas: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's `TestComponentGroupsLookup` and `TestComponentGroupsNilExperimental`: members
    /// resolve to their group by exact name; no experimental section means no groups.
    #[test]
    fn component_groups_resolve_members_by_exact_name() {
        let group = |name: &str, members: &[&str]| ComponentGroupSpec {
            name: name.into(),
            replicas: 1,
            scaling_adapter: None,
            components: members
                .iter()
                .map(|m| ComponentGroupComponentSpec {
                    name: m.to_string(),
                })
                .collect(),
        };
        let mut spec = DynamoGraphDeploymentSpec {
            experimental: Some(DynamoGraphDeploymentExperimentalSpec {
                kv_transfer_policy: None,
                component_groups: vec![
                    group("runtime", &["frontend", "worker"]),
                    group("planner", &["planner"]),
                ],
            }),
            ..Default::default()
        };
        let of = |spec: &DynamoGraphDeploymentSpec, c: &str| {
            spec.component_group(c).map(|g| g.name.clone())
        };
        let rows = [
            ("worker", Some("runtime")),
            ("frontend", Some("runtime")),
            ("planner", Some("planner")),
            ("Worker", None),
            ("missing", None),
        ];
        for (component, want) in rows {
            assert_eq!(of(&spec, component).as_deref(), want, "{component}");
        }
        assert_eq!(spec.component_groups().len(), 2);
        spec.experimental = None;
        assert!(spec.component_groups().is_empty());
        assert_eq!(of(&spec, "worker"), None);
    }
}
