//! DynamoComponentDeployment, nvidia.com/v1alpha1 (served, deprecated, converted to v1beta1 for
//! storage): one v1alpha1 service with its backend framework.

use super::component::DynamoComponentDeploymentSharedSpec;
use super::dgd::ServiceReplicaStatus;
use crate::common::BackendFramework;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Desired state of a v1alpha1 DynamoComponentDeployment.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "nvidia.com",
    version = "v1alpha1",
    kind = "DynamoComponentDeployment",
    plural = "dynamocomponentdeployments",
    namespaced,
    status = "DynamoComponentDeploymentStatus",
    shortname = "dcd",
    category = "dynamo",
    derive = "PartialEq",
    derive = "Default",
    storage = false,
    deprecated = "nvidia.com/v1alpha1 DynamoComponentDeployment is deprecated; use nvidia.com/v1beta1 DynamoComponentDeployment",
    doc = "DynamoComponentDeployment deploys one component of a Dynamo graph (v1alpha1 shape: one service).",
    printcolumn(
        name = "DynamoComponent",
        type_ = "string",
        json_path = ".spec.dynamoComponent",
        description = "Dynamo component"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status",
        description = "Available"
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
pub struct DynamoComponentDeploymentSpec {
    /// Backend framework: sglang, vllm or trtllm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_framework: Option<BackendFramework>,
    /// The service.
    #[serde(flatten)]
    pub service: DynamoComponentDeploymentSharedSpec,
}

/// Observed state of a v1alpha1 DynamoComponentDeployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoComponentDeploymentStatus {
    /// Most recent generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Latest observed conditions (Available, DynamoComponentReady).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Label selector of the pods (never written by the controller; kept for v1alpha1 clients).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_selector: BTreeMap<String, String>,
    /// Replica status of the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceReplicaStatus>,
}
