//! Client types for Grove (`grove.io/v1alpha1`): `PodCliqueSet`, `PodClique`,
//! `PodCliqueScalingGroup` and `ClusterTopologyBinding`, limited to the fields the grove
//! pathway renders and reads.
//!
//! These types are never installed as CRDs: tests install Grove's own CRDs, and a unit test
//! checks that every field here exists in Grove's schema with the same type.

use k8s_openapi::api::autoscaling::v2::MetricSpec;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::resource::v1::ResourceClaimTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// API group of Grove.
pub const GROUP: &str = "grove.io";
/// Grove condition type on a PodCliqueSet whose topology levels are unavailable.
pub const CONDITION_TOPOLOGY_LEVELS_UNAVAILABLE: &str = "TopologyLevelsUnavailable";
/// Grove condition reason when the ClusterTopology is missing.
pub const REASON_CLUSTER_TOPOLOGY_NOT_FOUND: &str = "ClusterTopologyNotFound";
/// PodClique condition type: pods are scheduled.
pub const CONDITION_POD_CLIQUE_SCHEDULED: &str = "PodCliqueScheduled";
/// PodClique condition reason: not enough pods scheduled.
pub const REASON_INSUFFICIENT_SCHEDULED_PODS: &str = "InsufficientScheduledPods";
/// PodClique / PodCliqueScalingGroup condition type: fewer than minAvailable ready.
pub const CONDITION_MIN_AVAILABLE_BREACHED: &str = "MinAvailableBreached";

/// Desired state of a Grove PodCliqueSet.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "grove.io",
    version = "v1alpha1",
    kind = "PodCliqueSet",
    plural = "podcliquesets",
    namespaced,
    status = "PodCliqueSetStatus",
    shortname = "pcs",
    derive = "PartialEq",
    derive = "Default",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.hpaPodSelector"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueSetSpec {
    /// Number of replicas of the whole template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// How replicas are updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<PodCliqueSetUpdateStrategy>,
    /// Template of one replica.
    pub template: PodCliqueSetTemplateSpec,
}

/// Update strategy of a PodCliqueSet.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueSetUpdateStrategy {
    /// RollingRecreate (default) or OnDelete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<UpdateStrategyType>,
}

/// Update strategy type of a PodCliqueSet.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpdateStrategyType {
    RollingRecreate,
    OnDelete,
}

/// Template of one PodCliqueSet replica.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueSetTemplateSpec {
    /// The cliques (groups of identical pods).
    pub cliques: Vec<PodCliqueTemplateSpec>,
    /// Startup order of the cliques.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clique_startup_type: Option<CliqueStartupType>,
    /// PriorityClass of every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Headless Service settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headless_service_config: Option<HeadlessServiceConfig>,
    /// Topology constraint of the whole replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<TopologyConstraint>,
    /// Delay before a replica with breached minAvailable is terminated (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_delay: Option<String>,
    /// ResourceClaimTemplates shared by the pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_claim_templates: Vec<ResourceClaimTemplateConfig>,
    /// Resource sharing of the replica.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_sharing: Vec<PcsResourceSharingSpec>,
    /// Scaling groups of cliques that scale together.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_clique_scaling_groups: Vec<PodCliqueScalingGroupConfig>,
}

/// Startup order of the cliques of a PodCliqueSet.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CliqueStartupType {
    CliqueStartupTypeAnyOrder,
    CliqueStartupTypeInOrder,
    CliqueStartupTypeExplicit,
}

/// Headless Service of a PodCliqueSet.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HeadlessServiceConfig {
    /// Publish addresses of pods that are not ready.
    pub publish_not_ready_addresses: bool,
}

/// Topology placement of Grove pods.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TopologyConstraint {
    /// Name of the ClusterTopology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_name: Option<String>,
    /// Pack domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<TopologyPack>,
    /// Deprecated single pack domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack_domain: Option<String>,
}

/// Required and preferred pack domains.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TopologyPack {
    /// Domain all pods must share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<String>,
    /// Domain pods should share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<String>,
}

/// A named ResourceClaimTemplate of a PodCliqueSet.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimTemplateConfig {
    /// Name of the template.
    pub name: String,
    /// The ResourceClaimTemplate spec.
    pub template_spec: ResourceClaimTemplateSpec,
}

/// Sharing of a resource claim by the pods of a clique.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSharingSpec {
    /// Name of the shared claim template.
    pub name: String,
    /// Namespace of an external claim template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// AllReplicas or PerReplica.
    pub scope: ResourceSharingScope,
}

/// Sharing of a resource claim at the PodCliqueSet level.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PcsResourceSharingSpec {
    /// Name of the shared claim template.
    pub name: String,
    /// Namespace of an external claim template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// AllReplicas or PerReplica.
    pub scope: ResourceSharingScope,
    /// Children the claim is shared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<PcsResourceSharingFilter>,
}

/// Sharing of a resource claim at the scaling group level.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PcsgResourceSharingSpec {
    /// Name of the shared claim template.
    pub name: String,
    /// Namespace of an external claim template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// AllReplicas or PerReplica.
    pub scope: ResourceSharingScope,
    /// Cliques the claim is shared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<PcsgResourceSharingFilter>,
}

/// Scope of a shared resource claim.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ResourceSharingScope {
    #[default]
    AllReplicas,
    PerReplica,
}

/// Children of a PodCliqueSet a resource claim is shared with.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PcsResourceSharingFilter {
    /// Cliques sharing the claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_clique_names: Vec<String>,
    /// Scaling groups sharing the claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_scaling_group_names: Vec<String>,
}

/// Cliques of a scaling group a resource claim is shared with.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PcsgResourceSharingFilter {
    /// Cliques sharing the claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_clique_names: Vec<String>,
}

/// A clique of a PodCliqueSet template.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueTemplateSpec {
    /// Name of the clique (immutable).
    pub name: String,
    /// Labels of the clique's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations of the clique's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Topology constraint of the clique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<TopologyConstraint>,
    /// Resource sharing of the clique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_sharing: Vec<ResourceSharingSpec>,
    /// Spec of the clique.
    pub spec: PodCliqueSpec,
}

/// Spec of a clique (also the spec of a PodClique).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueSpec {
    /// Role of the clique's pods.
    pub role_name: String,
    /// Pod spec of the clique's pods.
    pub pod_spec: PodSpec,
    /// Number of pods.
    pub replicas: i32,
    /// Minimum ready pods before the clique counts as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    /// Cliques that must start first (CliqueStartupTypeExplicit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starts_after: Vec<String>,
    /// Autoscaling of the clique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_scaling_config: Option<AutoScalingConfig>,
}

/// Autoscaling bounds of a clique or scaling group.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AutoScalingConfig {
    /// Lower bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Upper bound.
    pub max_replicas: i32,
    /// HPA metrics.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricSpec>,
}

/// A scaling group of a PodCliqueSet template.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueScalingGroupConfig {
    /// Name of the scaling group.
    pub name: String,
    /// Cliques that scale together.
    pub clique_names: Vec<String>,
    /// Annotations of the scaling group.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Replicas of the scaling group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Minimum available replicas of the scaling group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    /// Autoscaling of the scaling group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_config: Option<AutoScalingConfig>,
    /// Resource sharing of the scaling group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_sharing: Vec<PcsgResourceSharingSpec>,
    /// Topology constraint of the scaling group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<TopologyConstraint>,
}

/// An error Grove recorded.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Error code.
    pub code: String,
    /// Error description.
    pub description: String,
    /// When it was observed.
    pub observed_at: Time,
}

/// Observed state of a PodCliqueSet.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueSetStatus {
    /// Generation observed by Grove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (e.g. TopologyLevelsUnavailable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Recent errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<LastError>,
    /// Replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Replicas at the current generation.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Replicas whose cliques and scaling groups all have minAvailable ready.
    #[serde(default)]
    pub available_replicas: i32,
    /// Label selector for HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa_pod_selector: Option<String>,
    /// Generation hash of the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_generation_hash: Option<String>,
    /// Progress of a rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_progress: Option<PodCliqueSetUpdateProgress>,
}

/// Progress of a PodCliqueSet rolling update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueSetUpdateProgress {
    /// When the update started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_started_at: Option<Time>,
    /// When the update ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_ended_at: Option<Time>,
    /// Updated PodCliques.
    #[serde(default)]
    pub updated_pod_cliques_count: i32,
    /// Total PodCliques.
    #[serde(default)]
    pub total_pod_cliques_count: i32,
    /// Updated scaling groups.
    #[serde(default)]
    pub updated_pod_clique_scaling_groups_count: i32,
    /// Total scaling groups.
    #[serde(default)]
    pub total_pod_clique_scaling_groups_count: i32,
}

/// A Grove PodClique (created by Grove from a PodCliqueSet clique).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "grove.io",
    version = "v1alpha1",
    kind = "PodClique",
    plural = "podcliques",
    namespaced,
    status = "PodCliqueStatus",
    shortname = "pclq",
    derive = "PartialEq",
    derive = "Default",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.hpaPodSelector"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueResourceSpec {
    /// Spec of the clique.
    #[serde(flatten)]
    pub clique: PodCliqueSpec,
}

/// Observed state of a PodClique.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueStatus {
    /// Generation observed by Grove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (PodCliqueScheduled, MinAvailableBreached).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Recent errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<LastError>,
    /// Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready pods.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Pods at the current template.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Pods held by scheduling gates.
    #[serde(default)]
    pub schedule_gated_replicas: i32,
    /// Scheduled pods.
    #[serde(default)]
    pub scheduled_replicas: i32,
    /// Label selector for HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa_pod_selector: Option<String>,
    /// PodCliqueSet generation hash this clique has completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_pod_clique_set_generation_hash: Option<String>,
    /// Hash of the current pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_pod_template_hash: Option<String>,
    /// Progress of a rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_progress: Option<PodCliqueUpdateProgress>,
}

/// Progress of a PodClique rolling update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueUpdateProgress {
    /// When the update started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_started_at: Option<Time>,
    /// When the update ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_ended_at: Option<Time>,
    /// PodCliqueSet generation hash being rolled out.
    #[serde(default)]
    pub pod_clique_set_generation_hash: String,
    /// Pod template hash being rolled out.
    #[serde(default)]
    pub pod_template_hash: String,
}

/// A Grove PodCliqueScalingGroup (created by Grove from a PodCliqueSet scaling group).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "grove.io",
    version = "v1alpha1",
    kind = "PodCliqueScalingGroup",
    plural = "podcliquescalinggroups",
    namespaced,
    status = "PodCliqueScalingGroupStatus",
    shortname = "pcsg",
    derive = "PartialEq",
    derive = "Default",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueScalingGroupSpec {
    /// Replicas of the scaling group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Minimum available replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    /// Cliques of the group.
    #[serde(default)]
    pub clique_names: Vec<String>,
}

/// Observed state of a PodCliqueScalingGroup.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueScalingGroupStatus {
    /// Generation observed by Grove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (MinAvailableBreached, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Recent errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<LastError>,
    /// Replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Scheduled replicas.
    #[serde(default)]
    pub scheduled_replicas: i32,
    /// Available replicas.
    #[serde(default)]
    pub available_replicas: i32,
    /// Replicas at the current generation.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Label selector for HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// PodCliqueSet generation hash this group has completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_pod_clique_set_generation_hash: Option<String>,
    /// Progress of a rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_progress: Option<PodCliqueScalingGroupUpdateProgress>,
}

/// Progress of a PodCliqueScalingGroup rolling update.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodCliqueScalingGroupUpdateProgress {
    /// When the update started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_started_at: Option<Time>,
    /// When the update ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_ended_at: Option<Time>,
    /// PodCliqueSet generation hash being rolled out.
    #[serde(default)]
    pub pod_clique_set_generation_hash: String,
    /// Updated PodCliques.
    #[serde(default)]
    pub updated_pod_cliques_count: i32,
    /// Total PodCliques.
    #[serde(default)]
    pub total_pod_cliques_count: i32,
}

/// Grove's cluster topology (cluster-scoped): the topology domains of a cluster, widest first,
/// each with the node label that identifies it. Read by the grove pathway for
/// `spec.experimental.kvTransferPolicy.clusterTopologyName`.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "grove.io",
    version = "v1alpha1",
    kind = "ClusterTopologyBinding",
    plural = "clustertopologybindings",
    shortname = "ct",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTopologyBindingSpec {
    /// The topology levels.
    pub levels: Vec<TopologyLevel>,
}

/// One level of a cluster topology.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    /// Name of the topology domain (for example `zone`, `rack`).
    pub domain: String,
    /// Node label key identifying the domain.
    pub key: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;
    use serde_json::Value;
    use std::path::Path;

    fn grove_crd(file: &str) -> Value {
        serde_yaml::from_str(&testkit::testdata::read(Path::new("grove-crds").join(file))).unwrap()
    }

    fn grove_schema(file: &str) -> Value {
        grove_crd(file)["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    fn ours<K: CustomResourceExt>() -> Value {
        let crd = serde_json::to_value(K::crd()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    /// Subtrees holding Kubernetes core types: compared by type only (Grove embeds the core
    /// schemas of the Kubernetes release it was built against).
    const CORE: &[&str] = &["podSpec", "templateSpec", "metrics", "conditions"];

    fn kind_of(schema: &Value) -> String {
        if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return "int-or-string".into();
        }
        schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("any")
            .to_string()
    }

    fn compare(path: &str, ours: &Value, theirs: &Value, errors: &mut Vec<String>) {
        let (a, b) = (kind_of(ours), kind_of(theirs));
        if a != b && !(b == "any" && theirs.get("x-kubernetes-preserve-unknown-fields").is_some()) {
            errors.push(format!("{path}: ours {a}, Grove {b}"));
            return;
        }
        if let Some(values) = ours.get("enum").and_then(Value::as_array) {
            let allowed = theirs.get("enum").and_then(Value::as_array);
            for v in values.iter().filter(|v| !v.is_null()) {
                if allowed.is_some_and(|allowed| !allowed.contains(v)) {
                    errors.push(format!("{path}: enum value {v} not allowed by Grove"));
                }
            }
        }
        let leaf = path.rsplit('.').next().unwrap_or_default();
        if CORE.contains(&leaf.trim_end_matches("[]")) {
            return;
        }
        if let Some(props) = ours.get("properties").and_then(Value::as_object) {
            for (name, schema) in props {
                match theirs.get("properties").and_then(|p| p.get(name)) {
                    Some(t) => compare(&format!("{path}.{name}"), schema, t, errors),
                    None => errors.push(format!("{path}.{name}: not in Grove's schema")),
                }
            }
        }
        if let (Some(a), Some(b)) = (ours.get("items"), theirs.get("items")) {
            compare(&format!("{path}[]"), a, b, errors);
        }
        if let (Some(a), Some(b)) = (
            ours.get("additionalProperties").filter(|v| v.is_object()),
            theirs.get("additionalProperties").filter(|v| v.is_object()),
        ) {
            compare(&format!("{path}{{}}"), a, b, errors);
        }
    }

    fn check<K: CustomResourceExt>(file: &str) {
        check_parts::<K>(file, &["spec", "status"]);
    }

    fn check_parts<K: CustomResourceExt>(file: &str, parts: &[&str]) {
        let (ours, theirs) = (ours::<K>(), grove_schema(file));
        let mut errors = Vec::new();
        for &part in parts {
            compare(
                part,
                &ours["properties"][part],
                &theirs["properties"][part],
                &mut errors,
            );
        }
        assert!(errors.is_empty(), "{file}:\n{}", errors.join("\n"));
    }

    #[test]
    fn pod_clique_set_fields_exist_in_grove_schema() {
        check::<PodCliqueSet>("grove.io_podcliquesets.yaml");
    }

    #[test]
    fn pod_clique_fields_exist_in_grove_schema() {
        check::<PodClique>("grove.io_podcliques.yaml");
    }

    #[test]
    fn pod_clique_scaling_group_fields_exist_in_grove_schema() {
        check::<PodCliqueScalingGroup>("grove.io_podcliquescalinggroups.yaml");
    }

    #[test]
    fn cluster_topology_binding_fields_exist_in_grove_schema() {
        check_parts::<ClusterTopologyBinding>("grove.io_clustertopologybindings.yaml", &["spec"]);
        let theirs = grove_crd("grove.io_clustertopologybindings.yaml");
        let ours = serde_json::to_value(ClusterTopologyBinding::crd()).unwrap();
        assert_eq!(ours["spec"]["scope"], theirs["spec"]["scope"]);
        assert_eq!(
            ours["spec"]["names"]["plural"],
            theirs["spec"]["names"]["plural"]
        );
    }

    #[test]
    fn scale_subresources_match_grove() {
        for (ours, file) in [
            (PodCliqueSet::crd(), "grove.io_podcliquesets.yaml"),
            (PodClique::crd(), "grove.io_podcliques.yaml"),
            (
                PodCliqueScalingGroup::crd(),
                "grove.io_podcliquescalinggroups.yaml",
            ),
        ] {
            let theirs = grove_crd(file);
            let ours = serde_json::to_value(&ours).unwrap();
            assert_eq!(
                ours["spec"]["versions"][0]["subresources"]["scale"],
                theirs["spec"]["versions"][0]["subresources"]["scale"],
                "{file}"
            );
            assert_eq!(
                ours["spec"]["names"]["plural"],
                theirs["spec"]["names"]["plural"]
            );
        }
    }
}
