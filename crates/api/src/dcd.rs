//! DynamoComponentDeployment, nvidia.com/v1beta1: one component rendered as a Deployment (or a
//! LeaderWorkerSet when multinode) by the component pathway.

use crate::common::BackendFramework;
use crate::v1beta1::{ComponentReplicaStatus, DynamoComponentDeploymentSharedSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition type: the component is available and serving.
pub const CONDITION_AVAILABLE: &str = "Available";
/// Condition type: the underlying Dynamo component is ready.
pub const CONDITION_DYNAMO_COMPONENT_READY: &str = "DynamoComponentReady";

/// Desired state of a DynamoComponentDeployment.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "nvidia.com",
    version = "v1beta1",
    kind = "DynamoComponentDeployment",
    plural = "dynamocomponentdeployments",
    namespaced,
    status = "DynamoComponentDeploymentStatus",
    shortname = "dcd",
    category = "dynamo",
    derive = "PartialEq",
    derive = "Default",
    doc = "DynamoComponentDeployment deploys one component of a Dynamo graph.",
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status",
        description = "Available condition"
    ),
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.type",
        description = "Component type"
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
    /// The component.
    #[serde(flatten)]
    pub component: DynamoComponentDeploymentSharedSpec,
}

/// Observed state of a DynamoComponentDeployment.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoComponentDeploymentStatus {
    /// Most recent generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Latest observed conditions (Available, DynamoComponentReady).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Replica status of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentReplicaStatus>,
}

impl DynamoComponentDeployment {
    /// The DynamoGraphDeployment the DCD belongs to: its `nvidia.com/dynamo-graph-deployment-name`
    /// label, else its DynamoGraphDeployment owner; `None` for a standalone DCD.
    pub fn graph_name(&self) -> Option<String> {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::labels::DYNAMO_GRAPH_DEPLOYMENT_NAME))
            .filter(|v| !v.is_empty())
            .cloned()
            .or_else(|| {
                self.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.kind == "DynamoGraphDeployment")
                    .map(|o| o.name.clone())
            })
    }

    /// Ready when the latest spec was processed and Available is True.
    pub fn is_ready(&self) -> Result<(), String> {
        let generation = self.metadata.generation.unwrap_or(0);
        let status = self.status.as_ref();
        let observed = status.and_then(|s| s.observed_generation).unwrap_or(0);
        if observed < generation {
            return Err(format!(
                "spec not yet processed: generation={generation}, observedGeneration={observed}"
            ));
        }
        let available = status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == CONDITION_AVAILABLE && c.status == "True")
        });
        if available {
            Ok(())
        } else {
            Err("Component deployment not ready - Available condition not true".into())
        }
    }
}
