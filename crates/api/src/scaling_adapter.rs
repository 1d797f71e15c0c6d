//! DynamoGraphDeploymentScalingAdapter, nvidia.com/v1beta1: the scale subresource of one DGD
//! component, for HPA, KEDA and the Planner.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a DynamoGraphDeploymentScalingAdapter.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "nvidia.com",
    version = "v1beta1",
    kind = "DynamoGraphDeploymentScalingAdapter",
    plural = "dynamographdeploymentscalingadapters",
    namespaced,
    status = "DynamoGraphDeploymentScalingAdapterStatus",
    shortname = "dgdsa",
    category = "dynamo",
    derive = "PartialEq",
    derive = "Default",
    doc = "DynamoGraphDeploymentScalingAdapter exposes one DynamoGraphDeployment component through the scale subresource; it alone writes that component's replicas.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "DGD",
        type_ = "string",
        json_path = ".spec.dgdRef.name",
        description = "DynamoGraphDeployment name"
    ),
    printcolumn(
        name = "Component",
        type_ = "string",
        json_path = ".spec.dgdRef.componentName",
        description = "Component name"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Desired replicas"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Current replicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Ready condition"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentScalingAdapterSpec {
    /// Desired replicas of the target component, written by autoscalers or users.
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// The DynamoGraphDeployment and component to scale.
    pub dgd_ref: DynamoGraphDeploymentComponentRef,
}

/// A component of a DynamoGraphDeployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentComponentRef {
    /// metadata.name of the DynamoGraphDeployment.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Name of the entry of spec.components to scale.
    #[schemars(length(min = 1))]
    pub component_name: String,
}

/// Observed state of a DynamoGraphDeploymentScalingAdapter.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentScalingAdapterStatus {
    /// Current replicas of the target component (scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label selector of the component's pods (scale subresource, for HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// When the adapter last scaled the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// The adapter generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Latest observed conditions (Ready).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
