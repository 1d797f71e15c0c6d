//! DynamoCheckpoint, nvidia.com/v1alpha1: a container snapshot that lets workers restore warm.

use crate::common::DynamoCheckpointIdentity;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a DynamoCheckpoint.
///
/// The capture Job is described by `job` (upstream's field name); `capture` is accepted as a
/// synonym because published examples use it. Exactly one of the two must be set.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "nvidia.com",
    version = "v1alpha1",
    kind = "DynamoCheckpoint",
    plural = "dynamocheckpoints",
    namespaced,
    status = "DynamoCheckpointStatus",
    shortname = "dckpt",
    category = "dynamo",
    derive = "PartialEq",
    derive = "Default",
    doc = "DynamoCheckpoint is a container checkpoint that worker pods restore from for a fast warm start.",
    printcolumn(
        name = "Model",
        type_ = "string",
        json_path = ".spec.identity.model",
        description = "Model identifier"
    ),
    printcolumn(
        name = "Backend",
        type_ = "string",
        json_path = ".spec.identity.backendFramework",
        description = "Backend framework"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Phase of the checkpoint"
    ),
    printcolumn(
        name = "CheckpointID",
        type_ = "string",
        json_path = ".status.checkpointID",
        description = "Artifact id of the checkpoint"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(oldSelf.identity) || self.identity == oldSelf.identity").message("spec.identity is immutable after creation"),
    validation = Rule::new("has(self.job) != has(self.capture)").message("exactly one of job or capture must be specified"),
)]
pub struct DynamoCheckpointSpec {
    /// Identity of the checkpoint (model, backend, parallelism, ...). Immutable.
    pub identity: DynamoCheckpointIdentity,
    /// GPU Memory Service metadata of a prepared capture pod; not part of the identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_service: Option<crate::v1alpha1::GpuMemoryServiceSpec>,
    /// The checkpoint creation Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<DynamoCheckpointJobConfig>,
    /// Synonym of job, as written by published examples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<DynamoCheckpointJobConfig>,
}

impl DynamoCheckpointSpec {
    /// The capture Job configuration, whichever of `job` and `capture` is set.
    pub fn job_config(&self) -> Option<&DynamoCheckpointJobConfig> {
        self.job.as_ref().or(self.capture.as_ref())
    }
}

/// The checkpoint creation Job.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoCheckpointJobConfig {
    /// Pod template of the capture Job; includes the workload container to checkpoint.
    #[schemars(schema_with = "crate::schema::pod_template")]
    pub pod_template_spec: PodTemplateSpec,
    /// Container of podTemplateSpec to snapshot (default main).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), extend("default" = "main"))]
    pub target_container_name: Option<String>,
    /// tmpfs at /dev/shm of the capture pod (default 8Gi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_memory: Option<SharedMemorySpec>,
    /// Maximum run time of the Job in seconds (default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("default" = 3600))]
    pub active_deadline_seconds: Option<i64>,
    /// Deprecated and ignored: checkpoint Jobs never retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,
    /// Deprecated and ignored: checkpoint Jobs use a fixed 300 s TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// tmpfs mounted at /dev/shm.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.disabled) && self.disabled && has(self.size))").message("sharedMemory.size must not be set when sharedMemory.disabled is true"))]
pub struct SharedMemorySpec {
    /// Disable the /dev/shm volume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// Size of the tmpfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Quantity>,
}

/// Phase of a checkpoint.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DynamoCheckpointPhase {
    Pending,
    Creating,
    Ready,
    Failed,
}

/// Deprecated storage type of a checkpoint artifact.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum DynamoCheckpointStorageType {
    Pvc,
    S3,
    Oci,
}

/// Observed state of a DynamoCheckpoint.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoCheckpointStatus {
    /// Lifecycle phase: Pending, Creating, Ready or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DynamoCheckpointPhase>,
    /// Artifact id used by the snapshot protocol.
    #[serde(
        rename = "checkpointID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub checkpoint_id: Option<String>,
    /// Deprecated: identity hash; use checkpointID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_hash: Option<String>,
    /// Deprecated and no longer populated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Deprecated and no longer populated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_type: Option<DynamoCheckpointStorageType>,
    /// Name of the capture Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// When the checkpoint became ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    /// Details about the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Deprecated conditions (JobCreated, JobCompleted); use phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The value of the `nvidia.com/checkpoint-rebuild` annotation the current attempt honoured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_rebuild_token: Option<String>,
    /// Number of the current capture attempt for this identity (1 for the first Job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
}
