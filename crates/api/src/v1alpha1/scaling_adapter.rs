//! DynamoGraphDeploymentScalingAdapter, nvidia.com/v1alpha1 (served, deprecated, converted to
//! v1beta1 for storage): the same adapter with the component named `serviceName`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a v1alpha1 DynamoGraphDeploymentScalingAdapter.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "nvidia.com",
    version = "v1alpha1",
    kind = "DynamoGraphDeploymentScalingAdapter",
    plural = "dynamographdeploymentscalingadapters",
    namespaced,
    status = "DynamoGraphDeploymentScalingAdapterStatus",
    shortname = "dgdsa",
    category = "dynamo",
    derive = "PartialEq",
    derive = "Default",
    storage = false,
    deprecated = "nvidia.com/v1alpha1 DynamoGraphDeploymentScalingAdapter is deprecated; use nvidia.com/v1beta1 DynamoGraphDeploymentScalingAdapter",
    doc = "DynamoGraphDeploymentScalingAdapter exposes one DynamoGraphDeployment service through the scale subresource (v1alpha1 shape: dgdRef.serviceName).",
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
        name = "Service",
        type_ = "string",
        json_path = ".spec.dgdRef.serviceName",
        description = "Service name"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Current replicas"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentScalingAdapterSpec {
    /// Desired replicas of the target service.
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// The DynamoGraphDeployment and service to scale.
    pub dgd_ref: DynamoGraphDeploymentServiceRef,
}

/// A service of a v1alpha1 DynamoGraphDeployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentServiceRef {
    /// metadata.name of the DynamoGraphDeployment.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Key of spec.services to scale.
    #[schemars(length(min = 1))]
    pub service_name: String,
}

/// Observed state of a v1alpha1 DynamoGraphDeploymentScalingAdapter.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoGraphDeploymentScalingAdapterStatus {
    /// Current replicas of the target service (scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label selector of the service's pods (scale subresource, for HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// When the adapter last scaled the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
}
