//! The v1alpha1 component (service) spec.

use crate::common::{
    CheckpointMode, DynamoCheckpointIdentity, EppConfig, ModelReference, MultinodeSpec,
};
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscalerBehavior, MetricSpec};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, Probe, ResourceClaim};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// A service of a v1alpha1 graph (or the spec of a v1alpha1 component deployment).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DynamoComponentDeploymentSharedSpec {
    /// Annotations added to the generated resources of this component (Pod, Service, Ingress).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Labels added to the generated resources of this component.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::label_values_map")]
    pub labels: BTreeMap<String, String>,
    /// Name of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Role of the component (frontend, worker, planner, epp, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_type: Option<String>,
    /// Sub-role of the component (prefill, decode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_component_type: Option<String>,
    /// Deprecated and ignored: the Dynamo namespace is derived from the Kubernetes namespace
    /// and the graph name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamo_namespace: Option<String>,
    /// Place the component in the global Dynamo namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global_dynamo_namespace: bool,
    /// Requests and limits of the main container (cpu, memory, gpu, custom).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// Deprecated and ignored: use a DynamoGraphDeploymentScalingAdapter with HPA, KEDA or the
    /// Planner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    /// Environment variables of the component containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub envs: Vec<EnvVar>,
    /// A Secret whose keys become environment variables of the component containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from_secret: Option<String>,
    /// PVCs of spec.pvcs mounted by the component.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Exposes the component outside the cluster (Ingress or VirtualService).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressSpec>,
    /// Model served by the component; creates a headless Service for endpoint discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_ref: Option<ModelReference>,
    /// tmpfs mounted at /dev/shm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_memory: Option<crate::checkpoint::SharedMemorySpec>,
    /// Labels and annotations added to the created pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_pod_metadata: Option<ExtraPodMetadata>,
    /// Overrides of the pod spec, and of the main container through mainContainer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::extra_pod_spec")]
    pub extra_pod_spec: Option<ExtraPodSpec>,
    /// Liveness probe of the main container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    /// Readiness probe of the main container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    /// Desired number of pods; owned by the scaling adapter when it is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Multinode layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multinode: Option<MultinodeSpec>,
    /// Whether a DynamoGraphDeploymentScalingAdapter owns replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_adapter: Option<ScalingAdapter>,
    /// Endpoint Picker Plugin configuration; only with componentType epp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epp_config: Option<EppConfig>,
    /// An operator-generated frontend sidecar container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_sidecar: Option<FrontendSidecarSpec>,
    /// Container checkpointing of this service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<ServiceCheckpointConfig>,
    /// Service-level topology constraint; packDomain is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<crate::v1beta1::TopologyConstraint>,
    /// GPU Memory Service sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_service: Option<GpuMemoryServiceSpec>,
    /// Active-passive GPU failover; requires gpuMemoryService.enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
}

/// Requests and limits of a component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// Minimum resources of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceItem>,
    /// Maximum resources of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceItem>,
    /// Dynamic resource allocation claims.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ResourceClaim>,
}

/// A set of resource quantities.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceItem {
    /// CPU, e.g. 1000m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory, e.g. 4Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Number of GPUs (per node for multinode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// GPU resource name (default nvidia.com/gpu).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Additional resources by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub custom: BTreeMap<String, String>,
}

/// Deprecated and ignored autoscaling settings.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Deprecated and ignored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enabled: bool,
    /// Deprecated and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i64>,
    /// Deprecated and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i64>,
    /// Deprecated and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
    /// Deprecated and ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricSpec>,
}

/// A PVC of spec.pvcs mounted by a component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    /// Name of a PVC in spec.pvcs.
    pub name: String,
    /// Mount path; a backend default when used as compilation cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_point: Option<String>,
    /// Use the volume as compilation cache (backend-specific env and default mount path).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub use_as_compilation_cache: bool,
}

/// Ingress or VirtualService exposure of a component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    /// Expose the component.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enabled: bool,
    /// Base host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Use a service-mesh VirtualService instead of an Ingress.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_virtual_service: bool,
    /// Gateway of the VirtualService.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_service_gateway: Option<String>,
    /// Prefix added before the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_prefix: Option<String>,
    /// Annotations of the generated Ingress or VirtualService.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Labels of the generated Ingress or VirtualService.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// TLS settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<IngressTlsSpec>,
    /// Suffix appended after the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_suffix: Option<String>,
    /// Ingress controller class, e.g. nginx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_controller_class_name: Option<String>,
}

/// TLS of an Ingress.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngressTlsSpec {
    /// Secret holding the TLS certificate and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
}

/// Labels and annotations of the created pods.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExtraPodMetadata {
    /// Pod annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Pod labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::label_values_map")]
    pub labels: BTreeMap<String, String>,
}

/// v1alpha1 `extraPodSpec`: PodSpec fields inline, plus `mainContainer`.
///
/// `pod_spec` is `None` when no PodSpec field is present; its `containers` are the sidecars.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ExtraPodSpec {
    /// The inline PodSpec fields.
    pub pod_spec: Option<PodSpec>,
    /// Overrides of the main container (its name is ignored).
    pub main_container: Option<Container>,
}

impl Serialize for ExtraPodSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut map = match &self.pod_spec {
            Some(spec) => match serde_json::to_value(spec).map_err(S::Error::custom)? {
                serde_json::Value::Object(m) => m,
                _ => serde_json::Map::new(),
            },
            None => serde_json::Map::new(),
        };
        if map
            .get("containers")
            .and_then(|c| c.as_array())
            .is_some_and(|c| c.is_empty())
        {
            map.remove("containers");
        }
        if let Some(main) = &self.main_container {
            let mut main = serde_json::to_value(main).map_err(S::Error::custom)?;
            if let Some(m) = main.as_object_mut()
                && m.get("name").and_then(|n| n.as_str()) == Some("")
            {
                m.remove("name");
            }
            map.insert("mainContainer".into(), main);
        }
        map.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ExtraPodSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let main_container = match map.remove("mainContainer") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v).map_err(D::Error::custom)?),
        };
        let pod_spec = if map.is_empty() {
            None
        } else {
            Some(serde_json::from_value(serde_json::Value::Object(map)).map_err(D::Error::custom)?)
        };
        Ok(Self {
            pod_spec,
            main_container,
        })
    }
}

/// Scaling adapter switch (v1alpha1 shape).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScalingAdapter {
    /// Create a DynamoGraphDeploymentScalingAdapter that owns replicas (default false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub enabled: bool,
}

/// An operator-generated frontend sidecar.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontendSidecarSpec {
    /// Image of the frontend sidecar.
    pub image: String,
    /// Replaces the default frontend arguments (-m dynamo.frontend).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// A Secret whose keys become environment variables of the sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from_secret: Option<String>,
    /// Additional environment variables of the sidecar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub envs: Vec<EnvVar>,
}

/// Checkpointing of a service (v1alpha1 shape).
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!self.enabled || (has(self.checkpointRef) && size(self.checkpointRef) > 0) || (has(self.identity) && has(self.identity.model) && has(self.identity.backendFramework))").message("When enabled, either checkpointRef or both identity.model and identity.backendFramework must be specified"))]
pub struct ServiceCheckpointConfig {
    /// Enable checkpointing (default false).
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub enabled: bool,
    /// Auto (default): the controller creates the checkpoint; Manual: the user does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Auto"))]
    pub mode: Option<CheckpointMode>,
    /// An existing DynamoCheckpoint by name; identity is then ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ref: Option<String>,
    /// Identity used to find or create the checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<DynamoCheckpointIdentity>,
}

/// GPU Memory Service topology (v1alpha1 spelling).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub enum GpuMemoryServiceMode {
    IntraPod,
    InterPod,
}

/// GPU Memory Service sidecar (v1alpha1 shape).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GpuMemoryServiceSpec {
    /// Enable the GMS sidecar.
    pub enabled: bool,
    /// GMS topology: intraPod (default) or interPod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "intraPod"))]
    pub mode: Option<GpuMemoryServiceMode>,
    /// DRA DeviceClass to request GPUs from (default gpu.nvidia.com).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "gpu.nvidia.com"))]
    pub device_class_name: Option<String>,
}

/// Active-passive failover (v1alpha1 shape).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// Enable failover.
    pub enabled: bool,
    /// Failover topology; must match gpuMemoryService.mode (default intraPod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "intraPod"))]
    pub mode: Option<GpuMemoryServiceMode>,
    /// Standby engine containers per rank (exactly 1 for now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1), extend("default" = 1))]
    pub num_shadows: Option<i32>,
}

/// A PersistentVolumeClaim components can mount.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.create) || self.create == false || (has(self.size) && has(self.storageClass) && has(self.volumeAccessMode))").message("When create is true, size, storageClass, and volumeAccessMode are required"))]
pub struct Pvc {
    /// Create the PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<bool>,
    /// Name of the PVC.
    pub name: String,
    /// StorageClass of a created PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// Size of a created PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Quantity>,
    /// Access mode of a created PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_access_mode: Option<String>,
}
