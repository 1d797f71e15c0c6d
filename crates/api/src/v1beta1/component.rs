//! The component spec shared by DynamoGraphDeployment components and DynamoComponentDeployment.

use crate::common::{
    CheckpointMode, DynamoCheckpointIdentity, EppConfig, ModelReference, MultinodeSpec,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Name of the container in `podTemplate.spec.containers` that runs the Dynamo workload.
pub const MAIN_CONTAINER_NAME: &str = "main";

/// Role of a component within a Dynamo graph.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum ComponentType {
    Frontend,
    Worker,
    Prefill,
    Decode,
    Planner,
    Epp,
}

impl ComponentType {
    /// The wire value (also the `nvidia.com/dynamo-component-type` label value).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Frontend => "frontend",
            Self::Worker => "worker",
            Self::Prefill => "prefill",
            Self::Decode => "decode",
            Self::Planner => "planner",
            Self::Epp => "epp",
        }
    }

    /// Worker-class types (`worker`, `prefill`, `decode`) run inference engines.
    pub fn is_worker(self) -> bool {
        matches!(self, Self::Worker | Self::Prefill | Self::Decode)
    }

    /// The v1alpha1 `subComponentType` this type converts to (`prefill`, `decode`; the alpha
    /// type is then `worker`), which is also the value of the
    /// `nvidia.com/dynamo-sub-component-type` label; `None` for the other types.
    pub fn sub_component_type(self) -> Option<&'static str> {
        matches!(self, Self::Prefill | Self::Decode).then(|| self.as_str())
    }
}

/// A component of a Dynamo graph: its role, pod template, scale and runtime options.
///
/// The operator merges its defaults (command, env, ports, probes, resources, volume mounts) into
/// the container named `main` of `podTemplate`; every other container is a user sidecar.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.eppConfig) || (has(self.type) && self.type == 'epp')").message("eppConfig may only be set when type is epp"),
    validation = Rule::new("!has(self.minAvailable) || (has(self.replicas) && self.replicas == 0) || self.minAvailable <= (has(self.replicas) ? self.replicas : 1)").message("minAvailable must be less than or equal to replicas unless replicas is 0"),
    validation = Rule::new("!has(oldSelf.minAvailable) || (has(self.minAvailable) && self.minAvailable == oldSelf.minAvailable)").message("minAvailable is immutable after creation"),
    validation = Rule::new("!has(oldSelf.type) || (has(self.type) && self.type == oldSelf.type)").message("type is immutable after it is set"),
)]
pub struct DynamoComponentDeploymentSharedSpec {
    /// Provider-native fragment for this component's Grove unit (apiVersion grove.io/v1alpha1,
    /// target PodCliqueTemplateSpec or PodCliqueScalingGroupConfig); may set only
    /// topologyConstraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_override: Option<ProviderOverride>,

    /// Stable logical name of the component, unique (case-insensitively) within the graph.
    /// Decoupled from the names of the generated Kubernetes resources.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$")
    )]
    pub name: String,

    /// Role of the component in the graph: frontend, worker, prefill, decode, planner or epp.
    /// Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<ComponentType>,

    /// Dynamo runtime version in the runtime image (MAJOR.MINOR.PATCH), for images whose tag is
    /// not a Dynamo semantic version. Does not change the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$"
    ))]
    pub runtime_version_override: Option<String>,

    /// Place the component in the global Dynamo namespace instead of the per-deployment one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global_dynamo_namespace: bool,

    /// Pod template of the component. New components must include a container named `main`
    /// with an image; other containers are user-managed sidecars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::optional_pod_template")]
    pub pod_template: Option<PodTemplateSpec>,

    /// Desired number of replicas. Owned by the DynamoGraphDeploymentScalingAdapter when
    /// scalingAdapter is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,

    /// Grove only: minimum replicas gang-scheduled together (default 1, immutable). Positive
    /// replicas must be at least minAvailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_available: Option<i32>,

    /// Multinode layout for worker, prefill or decode components spanning several pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multinode: Option<MultinodeSpec>,

    /// Named pod-producing roles of a compound component; for multinode, exactly one leader
    /// and one worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub roles: Vec<ComponentRoleSpec>,

    /// Size of the tmpfs at /dev/shm: unset means 8Gi, "0" disables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_memory_size: Option<Quantity>,

    /// Model served by the component; creates a headless Service for endpoint discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_ref: Option<ModelReference>,

    /// Presence (even `{}`) opts into a DynamoGraphDeploymentScalingAdapter that owns replicas
    /// through the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_adapter: Option<ScalingAdapter>,

    /// Deprecated legacy Go EPP configuration; only with type epp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epp_config: Option<EppConfig>,

    /// Name of a container in podTemplate.spec.containers that receives the frontend sidecar
    /// defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_sidecar: Option<String>,

    /// Name of a restartable init container that runs the Dynamo runtime for a worker-class
    /// component; main then runs only the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamo_sidecar: Option<String>,

    /// PVC-backed compilation cache; the operator wires backend-specific paths and env.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compilation_cache: Option<CompilationCacheConfig>,

    /// Component-level topology constraint; the topology is inherited from
    /// spec.topologyConstraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<TopologyConstraint>,

    /// Preview features (GPU memory service, failover, Grove options, checkpoint); not covered
    /// by the v1beta1 deprecation policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<ExperimentalSpec>,
}

impl DynamoComponentDeploymentSharedSpec {
    /// Number of nodes per replica (1 unless multinode).
    pub fn number_of_nodes(&self) -> i32 {
        self.multinode.as_ref().map_or(1, |m| m.node_count)
    }

    /// More than one node per replica.
    pub fn is_multinode(&self) -> bool {
        self.number_of_nodes() > 1
    }

    /// Inter-pod GPU memory service requested.
    pub fn is_inter_pod_gms(&self) -> bool {
        self.experimental
            .as_ref()
            .and_then(|e| e.gpu_memory_service.as_ref())
            .is_some_and(|g| g.mode == Some(GpuMemoryServiceMode::InterPod))
    }

    /// The GPU memory service settings when it runs inside the pod (set, mode unset or
    /// IntraPod).
    pub fn intra_pod_gms(&self) -> Option<&GpuMemoryServiceSpec> {
        self.experimental
            .as_ref()?
            .gpu_memory_service
            .as_ref()
            .filter(|g| g.mode != Some(GpuMemoryServiceMode::InterPod))
    }

    /// Intra-pod failover requested: `experimental.failover` set, mode unset or IntraPod (the
    /// engine is cloned inside the pod).
    pub fn is_intra_pod_failover(&self) -> bool {
        self.experimental
            .as_ref()
            .and_then(|e| e.failover.as_ref())
            .is_some_and(|f| f.mode != Some(GpuMemoryServiceMode::InterPod))
    }

    /// `experimental.grove.forceScalingGroup` is true.
    pub fn is_grove_scaling_group_forced(&self) -> bool {
        self.experimental
            .as_ref()
            .and_then(|e| e.grove.as_ref())
            .and_then(|g| g.force_scaling_group)
            .unwrap_or(false)
    }

    /// Grove renders this component as a PodCliqueScalingGroup rather than a PodClique.
    pub fn uses_pcsg(&self) -> bool {
        self.is_multinode() || self.is_inter_pod_gms() || self.is_grove_scaling_group_forced()
    }

    /// The `main` container of the pod template, if present.
    pub fn main_container(&self) -> Option<&k8s_openapi::api::core::v1::Container> {
        self.pod_template
            .as_ref()?
            .spec
            .as_ref()?
            .containers
            .iter()
            .find(|c| c.name == MAIN_CONTAINER_NAME)
    }

    /// The `dynamoSidecar` init container of the pod template, when the component names one
    /// that exists.
    pub fn dynamo_sidecar(&self) -> Option<&k8s_openapi::api::core::v1::Container> {
        let name = self.dynamo_sidecar.as_deref()?;
        self.pod_template
            .as_ref()?
            .spec
            .as_ref()?
            .init_containers
            .as_ref()?
            .iter()
            .find(|c| c.name == name)
    }

    /// The container that runs the Dynamo runtime: the `dynamoSidecar` init container, else
    /// `main`.
    pub fn dynamo_container(&self) -> Option<&k8s_openapi::api::core::v1::Container> {
        self.dynamo_sidecar().or_else(|| self.main_container())
    }

    /// The container named `main` of the pod template, to change it.
    pub fn main_container_mut(&mut self) -> Option<&mut k8s_openapi::api::core::v1::Container> {
        self.pod_template
            .as_mut()?
            .spec
            .as_mut()?
            .containers
            .iter_mut()
            .find(|c| c.name == MAIN_CONTAINER_NAME)
    }
}

/// Marker: its presence opts a component into the DynamoGraphDeploymentScalingAdapter.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq, Default)]
pub struct ScalingAdapter {}

/// A sparse provider-native fragment (Grove: apiVersion grove.io/v1alpha1; value may set only
/// the target's topologyConstraint).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ProviderOverride {
    /// API group and version of the provider schema; Grove requires grove.io/v1alpha1.
    #[schemars(length(min = 1))]
    pub api_version: String,
    /// Provider resource kind or embedded schema (PodCliqueSet, PodCliqueTemplateSpec,
    /// PodCliqueScalingGroupConfig); resolved by admission when unambiguous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Sparse fragment of the provider schema.
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub value: serde_json::Value,
}

/// One named pod-producing role of a compound component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentRoleSpec {
    /// Role name (`leader` or `worker` for multinode components).
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Pods of this role in one component instance; multinode: leader 1, worker nodeCount-1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub replicas: Option<i32>,
    /// Provider-native fragment for the workload unit of this role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_override: Option<ProviderOverride>,
    /// Role-specific pod template (no component type supports it yet; kept schemaless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::optional_preserve_unknown_object")]
    pub pod_template: Option<PodTemplateSpec>,
}

/// Leader role name of a multinode component.
pub const ROLE_LEADER: &str = "leader";
/// Worker role name of a multinode component.
pub const ROLE_WORKER: &str = "worker";

/// PVC-backed compilation cache.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CompilationCacheConfig {
    /// Name of a user-created PVC in the DGD's namespace.
    #[schemars(length(min = 1))]
    pub pvc_name: String,
    /// Mount path; a backend-specific default when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_path: Option<String>,
}

/// Component-level topology placement.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TopologyConstraint {
    /// Topology domain to pack pods within; must exist in the referenced ClusterTopology and be
    /// at most as wide as spec.topologyConstraint.packDomain.
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub pack_domain: String,
}

/// Preview features of a component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExperimentalSpec {
    /// GPU Memory Service: GPU access for GMS clients through DRA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_service: Option<GpuMemoryServiceSpec>,
    /// Active-passive GPU failover; requires gpuMemoryService with the same mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
    /// Grove-specific rendering options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grove: Option<GroveSpec>,
    /// Checkpoint capture and restore for faster cold start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<ComponentCheckpointConfig>,
}

/// GPU Memory Service topology.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuMemoryServiceMode {
    // GMS runs inside the pod.
    IntraPod,
    // GMS runs as rank-local pods sharing GPUs through DRA.
    InterPod,
}

/// GPU Memory Service configuration.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.extraClientContainers) || size(self.extraClientContainers) == 0 || self.mode == 'IntraPod'").message("extraClientContainers is only supported with mode=IntraPod"),
    validation = Rule::new("!has(self.extraClientPods) || size(self.extraClientPods) == 0 || self.mode == 'InterPod'").message("extraClientPods is only supported with mode=InterPod"),
    validation = Rule::new("!has(self.extraClientPods) || size(self.extraClientPods) == 0").message("extraClientPods is reserved for inter-pod GMS and is not implemented yet"),
)]
pub struct GpuMemoryServiceSpec {
    /// GMS topology: IntraPod (default) or InterPod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "IntraPod"))]
    pub mode: Option<GpuMemoryServiceMode>,
    /// DRA DeviceClass to request GPUs from (default gpu.nvidia.com).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "gpu.nvidia.com"))]
    pub device_class_name: Option<String>,
    /// Additional containers of podTemplate.spec.containers wired as GMS clients.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"), inner(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")))]
    pub extra_client_containers: Vec<String>,
    /// Additional GMS client pods for inter-pod GMS (reserved; rejected for now).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub extra_client_pods: Vec<GmsClientPodSpec>,
}

/// An additional GMS client pod.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GmsClientPodSpec {
    /// Name of the client pod.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Pod template of the client pod (schemaless).
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub pod_template: PodTemplateSpec,
}

/// Active-passive failover.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// Failover topology; must match gpuMemoryService.mode (default IntraPod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "IntraPod"))]
    pub mode: Option<GpuMemoryServiceMode>,
    /// Standby engine containers per rank (exactly 1 for now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1), extend("default" = 1))]
    pub num_shadows: Option<i32>,
}

/// Grove-specific rendering options.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GroveSpec {
    /// Render a single-node component as a PodCliqueScalingGroup with one single-pod PodClique
    /// per replica. Immutable after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_scaling_group: Option<bool>,
}

/// When worker pods start relative to checkpoint readiness.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckpointStartupPolicy {
    // Start cold immediately; later pods restore once the checkpoint is Ready.
    Immediate,
    // Keep worker replicas at zero until the checkpoint is Ready.
    WaitForCheckpoint,
}

/// What happens to automatic checkpoints when the DGD is deleted.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckpointDeletionPolicy {
    Delete,
    Retain,
}

/// Checkpointing of one component.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.job) || !has(self.checkpointRef) || size(self.checkpointRef) == 0").message("checkpoint.job cannot be set when checkpointRef is specified"))]
pub struct ComponentCheckpointConfig {
    /// Enable checkpointing: without checkpointRef the DGD manages an automatic checkpoint,
    /// with it the named checkpoint is restored.
    pub enabled: bool,
    /// Deprecated: omit (Auto or Manual).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CheckpointMode>,
    /// When worker replicas start: Immediate (default) or WaitForCheckpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Immediate"))]
    pub startup_policy: Option<CheckpointStartupPolicy>,
    /// Delete (default) or Retain automatic checkpoints when the DGD is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Delete"))]
    pub deletion_policy: Option<CheckpointDeletionPolicy>,
    /// Name of an existing checkpoint in the same namespace to restore from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ref: Option<String>,
    /// Deprecated legacy identity; ignored for DGD-managed checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<DynamoCheckpointIdentity>,
    /// Workload container to snapshot and restore (default main).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), extend("default" = "main"))]
    pub target_container_name: Option<String>,
    /// Customizes the capture pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<ComponentCheckpointJobConfig>,
}

/// Customization of a component's checkpoint capture pod.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentCheckpointJobConfig {
    /// Capture pod containers that receive GMS client wiring (requires gpuMemoryService).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"), inner(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")))]
    pub gms_client_containers: Vec<String>,
    /// Merged over the capture pod derived from the workload container (schemaless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::optional_preserve_unknown_object")]
    pub pod_template: Option<PodTemplateSpec>,
}
