//! Conversion between v1alpha1 and v1beta1 (the hub, the storage version) of the
//! DynamoGraphDeployment (`spec.services` ⇄ `spec.components`), and of its children
//! DynamoComponentDeployment and DynamoGraphDeploymentScalingAdapter ([`children`]); and the
//! ConversionReview handler the operator's webhook serves.
//!
//! Represented fields always come from the live source object. What the target version cannot
//! represent is kept in one private annotation per direction on the converted object, holding
//! the source spec; converting back restores it unit by unit (the top-level fields, and each
//! component by name) where the unit is unchanged since the conversion. Where it changed, the
//! live fields win and only the fields the other version cannot represent at all are carried
//! over. Round trips hub → spoke → hub and spoke → hub → spoke are lossless.

pub mod children;

use crate::v1alpha1 as a;
use crate::v1beta1 as b;
use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec,
    SecretEnvSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::Value;
use std::collections::BTreeMap;

/// Annotation on v1beta1 objects: the v1alpha1 spec they were converted from.
pub const ALPHA_SPEC: &str = "nvidia.com/dgd-v1alpha1-spec";
/// Annotation on v1alpha1 objects: the v1beta1 spec they were converted from.
const BETA_SPEC: &str = "nvidia.com/dgd-v1beta1-spec";
/// Name of the container that holds a v1alpha1 `frontendSidecar` in v1beta1.
pub const FRONTEND_SIDECAR_CONTAINER: &str = "frontend-sidecar";
/// Resource name of a v1alpha1 `gpu` quantity without `gpuType`.
pub const DEFAULT_GPU_RESOURCE: &str = crate::gpu::NVIDIA_GPU;

/// A conversion that cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The object does not decode as its declared version.
    #[error("cannot decode {what}: {source}")]
    Decode {
        /// What was decoded.
        what: String,
        /// Why it failed.
        source: serde_json::Error,
    },
    /// A kind or version this webhook does not convert.
    #[error("cannot convert {kind} {from} to {to}")]
    Unsupported {
        /// Kind of the object.
        kind: String,
        /// Its apiVersion.
        from: String,
        /// The desired apiVersion.
        to: String,
    },
}

const V1ALPHA1: &str = "nvidia.com/v1alpha1";
const V1BETA1: &str = "nvidia.com/v1beta1";

/// v1alpha1 → v1beta1.
pub fn to_v1beta1(src: &a::DynamoGraphDeployment) -> b::DynamoGraphDeployment {
    let restored = payload::<b::DynamoGraphDeploymentSpec>(&src.metadata, BETA_SPEC);
    let mut spec = spec_from_alpha(&src.spec);
    if let Some(restored) = &restored {
        restore_beta(&src.spec, &mut spec, restored);
    }
    let mut metadata = scrubbed(&src.metadata);
    // Keep what v1beta1 cannot represent: the source spec, when converting back would differ.
    if spec_to_alpha(&spec) != src.spec {
        set_payload(&mut metadata, ALPHA_SPEC, &src.spec);
    }
    b::DynamoGraphDeployment {
        metadata,
        spec,
        status: src.status.as_ref().map(status_from_alpha),
    }
}

/// v1beta1 → v1alpha1.
pub fn to_v1alpha1(src: &b::DynamoGraphDeployment) -> a::DynamoGraphDeployment {
    let restored = payload::<a::DynamoGraphDeploymentSpec>(&src.metadata, ALPHA_SPEC);
    let mut spec = spec_to_alpha(&src.spec);
    if let Some(restored) = &restored {
        restore_alpha(&src.spec, &mut spec, restored);
    }
    let mut metadata = scrubbed(&src.metadata);
    if spec_from_alpha(&spec) != src.spec {
        set_payload(&mut metadata, BETA_SPEC, &src.spec);
    }
    a::DynamoGraphDeployment {
        metadata,
        spec,
        status: src.status.as_ref().map(status_to_alpha),
    }
}

/// The v1alpha1 `spec.pvcs` a v1beta1 object was converted from (v1beta1 has no such field;
/// the PVC reconciler still creates them).
pub fn preserved_alpha_pvcs(dgd: &b::DynamoGraphDeployment) -> Vec<a::Pvc> {
    payload::<a::DynamoGraphDeploymentSpec>(&dgd.metadata, ALPHA_SPEC)
        .map(|s| s.pvcs)
        .unwrap_or_default()
}

/// The `ingress` of each v1alpha1 service a v1beta1 object was converted from (v1beta1 has no
/// such field), by service name; services without one are absent.
pub fn preserved_alpha_ingresses(
    dgd: &b::DynamoGraphDeployment,
) -> BTreeMap<String, a::IngressSpec> {
    payload::<a::DynamoGraphDeploymentSpec>(&dgd.metadata, ALPHA_SPEC)
        .map(|s| {
            s.services
                .into_iter()
                .filter_map(|(name, service)| service.ingress.map(|i| (name, i)))
                .collect()
        })
        .unwrap_or_default()
}

/// Converts one object (any served version of a kind this webhook converts) to
/// `desired_api_version`.
pub fn convert(object: &Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let from = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let unsupported = || ConversionError::Unsupported {
        kind: kind.clone(),
        from: from.clone(),
        to: desired_api_version.to_string(),
    };
    let served = |v: &str| v == V1ALPHA1 || v == V1BETA1;
    if !served(&from) || !served(desired_api_version) {
        return Err(unsupported());
    }
    if from == desired_api_version {
        return Ok(object.clone());
    }
    // The apiserver also converts partial objects (e.g. the fields one field manager owns,
    // such as only `status`); what is absent stays absent.
    let has_spec = object.get("spec").is_some_and(|s| !s.is_null());
    let has_metadata = object.get("metadata").is_some();
    let input = object.clone();
    let up = from == V1ALPHA1;
    let mut out = match kind.as_str() {
        "DynamoGraphDeployment" => typed(input, up, to_v1beta1, to_v1alpha1)?,
        "DynamoComponentDeployment" => typed(
            input,
            up,
            children::dcd_to_v1beta1,
            children::dcd_to_v1alpha1,
        )?,
        "DynamoGraphDeploymentScalingAdapter" => typed(
            input,
            up,
            children::adapter_to_v1beta1,
            children::adapter_to_v1alpha1,
        )?,
        _ => return Err(unsupported()),
    };
    out["apiVersion"] = desired_api_version.into();
    out["kind"] = kind.into();
    if let Some(map) = out.as_object_mut() {
        if !has_spec {
            map.remove("spec");
        }
        if !has_metadata {
            map.remove("metadata");
        }
    }
    Ok(out)
}

/// `input` decoded as the v1alpha1 type `A` and converted `up` to the v1beta1 type `B`, or the
/// other way round. A partial object without `metadata` or `spec` is decoded with empty ones
/// (the type's default spec; the caller drops them from the result).
fn typed<A, B>(
    mut input: Value,
    up: bool,
    to_beta: fn(&A) -> B,
    to_alpha: fn(&B) -> A,
) -> Result<Value, ConversionError>
where
    A: serde::de::DeserializeOwned + serde::Serialize + Default,
    B: serde::de::DeserializeOwned + serde::Serialize + Default,
{
    let decode = |what: &str, e| ConversionError::Decode {
        what: what.to_string(),
        source: e,
    };
    if input.get("metadata").is_none() {
        input["metadata"] = serde_json::json!({});
    }
    if input.get("spec").is_none_or(Value::is_null) {
        let placeholder = if up {
            serde_json::to_value(A::default())
        } else {
            serde_json::to_value(B::default())
        };
        input["spec"] = placeholder.map_err(|e| decode("a default spec", e))?["spec"].take();
    }
    if up {
        let src: A = serde_json::from_value(input).map_err(|e| decode(V1ALPHA1, e))?;
        serde_json::to_value(to_beta(&src)).map_err(|e| decode(V1BETA1, e))
    } else {
        let src: B = serde_json::from_value(input).map_err(|e| decode(V1BETA1, e))?;
        serde_json::to_value(to_alpha(&src)).map_err(|e| decode(V1ALPHA1, e))
    }
}

/// Handles a ConversionReview (the body of a `POST /convert`).
pub fn review(review: ConversionReview) -> ConversionReview {
    let request = match ConversionRequest::from_review(review) {
        Ok(r) => r,
        Err(_) => {
            return ConversionResponse::invalid(status_failure("ConversionReview without request"))
                .into_review();
        }
    };
    let desired = request.desired_api_version.clone();
    let converted: Result<Vec<Value>, ConversionError> = request
        .objects
        .iter()
        .map(|o| convert(o, &desired))
        .collect();
    let response = ConversionResponse::for_request(request);
    match converted {
        Ok(objects) => response.success(objects),
        Err(e) => response.failure(status_failure(&e.to_string())),
    }
    .into_review()
}

fn status_failure(message: &str) -> kube::core::Status {
    kube::core::Status::failure(message, "ConversionFailed")
}

// --- payload annotations -------------------------------------------------------------------

fn payload<T: serde::de::DeserializeOwned>(meta: &ObjectMeta, key: &str) -> Option<T> {
    let text = meta.annotations.as_ref()?.get(key)?;
    serde_json::from_str(text).ok()
}

fn set_payload<T: serde::Serialize>(meta: &mut ObjectMeta, key: &str, value: &T) {
    let text = serde_json::to_string(value).expect("spec serializes");
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), text);
}

fn scrubbed(meta: &ObjectMeta) -> ObjectMeta {
    scrubbed_of(meta, &[ALPHA_SPEC, BETA_SPEC])
}

/// `meta` without the payload annotations `keys`.
fn scrubbed_of(meta: &ObjectMeta, keys: &[&str]) -> ObjectMeta {
    let mut meta = meta.clone();
    if let Some(annotations) = meta.annotations.as_mut() {
        for key in keys {
            annotations.remove(*key);
        }
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
    meta
}

// --- restore -------------------------------------------------------------------------------

/// Restores hub-only data into `live` (converted from `src`) from `saved`, the hub spec that
/// `src` was produced from.
fn restore_beta(
    src: &a::DynamoGraphDeploymentSpec,
    live: &mut b::DynamoGraphDeploymentSpec,
    saved: &b::DynamoGraphDeploymentSpec,
) {
    // Top-level fields: unchanged since the projection → take them all from `saved`.
    let projected = spec_to_alpha(saved);
    if top_alpha(&projected) == top_alpha(src) {
        let components = std::mem::take(&mut live.components);
        *live = b::DynamoGraphDeploymentSpec {
            components,
            ..saved.clone()
        };
    }
    // Components by name.
    for component in &mut live.components {
        let Some(before) = saved.components.iter().find(|c| c.name == component.name) else {
            continue;
        };
        let Some(now) = src.services.get(&component.name) else {
            continue;
        };
        let (_, projected) = component_to_alpha(before);
        if strip_alpha_only(&projected) == strip_alpha_only(now) {
            *component = before.clone();
        } else {
            carry_beta_only(component, before);
        }
    }
    // Order of the list, as it was.
    let position = |name: &str| saved.components.iter().position(|c| c.name == name);
    live.components
        .sort_by_key(|c| position(&c.name).unwrap_or(usize::MAX));
}

/// Restores spoke-only data into `live` (converted from `src`) from `saved`, the v1alpha1 spec
/// that `src` was produced from.
fn restore_alpha(
    src: &b::DynamoGraphDeploymentSpec,
    live: &mut a::DynamoGraphDeploymentSpec,
    saved: &a::DynamoGraphDeploymentSpec,
) {
    let projected = spec_from_alpha(saved);
    if top_beta(&projected) == top_beta(src) {
        let services = std::mem::take(&mut live.services);
        *live = a::DynamoGraphDeploymentSpec {
            services,
            ..saved.clone()
        };
    } else {
        live.pvcs = saved.pvcs.clone();
    }
    for (name, service) in &mut live.services {
        let Some(before) = saved.services.get(name) else {
            continue;
        };
        let Some(now) = src.components.iter().find(|c| &c.name == name) else {
            continue;
        };
        if &component_from_alpha(name, before) == now {
            *service = before.clone();
        } else {
            service.service_name = before.service_name.clone();
            service.dynamo_namespace = before.dynamo_namespace.clone();
            service.autoscaling = before.autoscaling.clone();
            service.ingress = before.ingress.clone();
        }
    }
}

/// The fields of a v1alpha1 service that v1beta1 cannot represent at all, cleared.
fn strip_alpha_only(
    s: &a::DynamoComponentDeploymentSharedSpec,
) -> a::DynamoComponentDeploymentSharedSpec {
    a::DynamoComponentDeploymentSharedSpec {
        service_name: None,
        dynamo_namespace: None,
        autoscaling: None,
        ingress: None,
        ..s.clone()
    }
}

/// Copies the v1beta1-only fields of `before` into a component whose v1alpha1 form changed.
fn carry_beta_only(
    component: &mut b::DynamoComponentDeploymentSharedSpec,
    before: &b::DynamoComponentDeploymentSharedSpec,
) {
    component.provider_override = before.provider_override.clone();
    component.runtime_version_override = before.runtime_version_override.clone();
    component.min_available = before.min_available;
    component.roles = before.roles.clone();
    component.dynamo_sidecar = before.dynamo_sidecar.clone();
    if let Some(grove) = before.experimental.as_ref().and_then(|e| e.grove.clone()) {
        component
            .experimental
            .get_or_insert_with(Default::default)
            .grove = Some(grove);
    }
}

fn top_alpha(s: &a::DynamoGraphDeploymentSpec) -> a::DynamoGraphDeploymentSpec {
    a::DynamoGraphDeploymentSpec {
        services: BTreeMap::new(),
        ..s.clone()
    }
}

fn top_beta(s: &b::DynamoGraphDeploymentSpec) -> b::DynamoGraphDeploymentSpec {
    b::DynamoGraphDeploymentSpec {
        components: Vec::new(),
        ..s.clone()
    }
}

// --- spec: v1alpha1 → v1beta1 --------------------------------------------------------------

fn spec_from_alpha(s: &a::DynamoGraphDeploymentSpec) -> b::DynamoGraphDeploymentSpec {
    b::DynamoGraphDeploymentSpec {
        provider_override: s.provider_override.clone(),
        annotations: s.annotations.clone(),
        labels: s.labels.clone(),
        priority_class_name: s.priority_class_name.clone(),
        components: s
            .services
            .iter()
            .map(|(name, svc)| component_from_alpha(name, svc))
            .collect(),
        env: s.envs.clone(),
        backend_framework: s.backend_framework,
        restart: s.restart.clone(),
        topology_constraint: s
            .topology_constraint
            .as_ref()
            .map(|t| b::SpecTopologyConstraint {
                cluster_topology_name: t.topology_profile.clone(),
                pack_domain: t.pack_domain.clone(),
            }),
        experimental: s
            .experimental
            .as_ref()
            .map(|e| b::DynamoGraphDeploymentExperimentalSpec {
                kv_transfer_policy: e.kv_transfer_policy.as_ref().map(|k| b::KvTransferPolicy {
                    cluster_topology_name: None,
                    label_key: Some(k.label_key.clone()),
                    domain: k.domain.clone(),
                    enforcement: k.enforcement,
                    preferred_weight: k.preferred_weight,
                }),
                component_groups: e
                    .component_groups
                    .iter()
                    .map(|g| b::ComponentGroupSpec {
                        name: g.name.clone(),
                        replicas: g.replicas,
                        scaling_adapter: g
                            .scaling_adapter
                            .as_ref()
                            .filter(|s| s.enabled)
                            .map(|_| b::ScalingAdapter {}),
                        components: g.components.clone(),
                    })
                    .collect(),
            }),
    }
}

fn component_type_from_alpha(
    s: &a::DynamoComponentDeploymentSharedSpec,
) -> Option<b::ComponentType> {
    use b::ComponentType as T;
    let sub = match s.sub_component_type.as_deref() {
        Some("prefill") => Some(T::Prefill),
        Some("decode") => Some(T::Decode),
        _ => None,
    };
    match s.component_type.as_deref() {
        Some("frontend") => Some(T::Frontend),
        Some("planner") => Some(T::Planner),
        Some("epp") => Some(T::Epp),
        Some("worker") => Some(sub.unwrap_or(T::Worker)),
        Some("prefill") => Some(T::Prefill),
        Some("decode") => Some(T::Decode),
        None => sub,
        Some(_) => None,
    }
}

fn gms_mode_from_alpha(m: Option<a::GpuMemoryServiceMode>) -> Option<b::GpuMemoryServiceMode> {
    m.map(|m| match m {
        a::GpuMemoryServiceMode::IntraPod => b::GpuMemoryServiceMode::IntraPod,
        a::GpuMemoryServiceMode::InterPod => b::GpuMemoryServiceMode::InterPod,
    })
}

fn gms_mode_to_alpha(m: Option<b::GpuMemoryServiceMode>) -> Option<a::GpuMemoryServiceMode> {
    m.map(|m| match m {
        b::GpuMemoryServiceMode::IntraPod => a::GpuMemoryServiceMode::IntraPod,
        b::GpuMemoryServiceMode::InterPod => a::GpuMemoryServiceMode::InterPod,
    })
}

fn component_from_alpha(
    name: &str,
    s: &a::DynamoComponentDeploymentSharedSpec,
) -> b::DynamoComponentDeploymentSharedSpec {
    let gms = s
        .gpu_memory_service
        .as_ref()
        .filter(|g| g.enabled)
        .map(|g| b::GpuMemoryServiceSpec {
            mode: gms_mode_from_alpha(g.mode),
            device_class_name: g.device_class_name.clone(),
            ..Default::default()
        });
    let failover = s
        .failover
        .as_ref()
        .filter(|f| f.enabled)
        .map(|f| b::FailoverSpec {
            mode: gms_mode_from_alpha(f.mode),
            num_shadows: f.num_shadows,
        });
    let checkpoint = s.checkpoint.as_ref().map(|c| b::ComponentCheckpointConfig {
        enabled: c.enabled,
        mode: c.mode,
        checkpoint_ref: c.checkpoint_ref.clone(),
        identity: c.identity.clone(),
        ..Default::default()
    });
    let any = gms.is_some() || failover.is_some() || checkpoint.is_some();
    let experimental = any.then_some(b::ExperimentalSpec {
        gpu_memory_service: gms,
        failover,
        grove: None,
        checkpoint,
    });
    let cache = s.volume_mounts.iter().find(|v| v.use_as_compilation_cache);
    b::DynamoComponentDeploymentSharedSpec {
        name: name.to_string(),
        r#type: component_type_from_alpha(s),
        global_dynamo_namespace: s.global_dynamo_namespace,
        pod_template: Some(pod_template_from_alpha(s)),
        replicas: s.replicas,
        multinode: s.multinode.clone(),
        shared_memory_size: s.shared_memory.as_ref().and_then(|m| {
            if m.disabled {
                Some(Quantity("0".into()))
            } else {
                m.size.clone()
            }
        }),
        model_ref: s.model_ref.clone(),
        scaling_adapter: s
            .scaling_adapter
            .as_ref()
            .filter(|a| a.enabled)
            .map(|_| b::ScalingAdapter {}),
        epp_config: s.epp_config.clone(),
        frontend_sidecar: s
            .frontend_sidecar
            .as_ref()
            .map(|_| FRONTEND_SIDECAR_CONTAINER.to_string()),
        compilation_cache: cache.map(|v| b::CompilationCacheConfig {
            pvc_name: v.name.clone(),
            mount_path: v.mount_point.clone(),
        }),
        topology_constraint: s.topology_constraint.clone(),
        experimental,
        ..Default::default()
    }
}

fn pod_template_from_alpha(s: &a::DynamoComponentDeploymentSharedSpec) -> PodTemplateSpec {
    let extra = s.extra_pod_spec.clone().unwrap_or_default();
    let mut spec = extra.pod_spec.unwrap_or_default();
    let mut main = extra.main_container.unwrap_or_default();
    main.name = b::MAIN_CONTAINER_NAME.to_string();

    if !s.envs.is_empty() {
        let mut env = s.envs.clone();
        env.extend(main.env.take().unwrap_or_default());
        main.env = Some(env);
    }
    if let Some(secret) = &s.env_from_secret {
        main.env_from
            .get_or_insert_with(Vec::new)
            .push(secret_env(secret));
    }
    if let Some(resources) = &s.resources {
        let mut req = main.resources.take().unwrap_or_default();
        merge_quantities(&mut req.requests, resources.requests.as_ref());
        merge_quantities(&mut req.limits, resources.limits.as_ref());
        if !resources.claims.is_empty() {
            req.claims = Some(resources.claims.clone());
        }
        main.resources = Some(req);
    }
    if main.liveness_probe.is_none() {
        main.liveness_probe = s.liveness_probe.clone();
    }
    if main.readiness_probe.is_none() {
        main.readiness_probe = s.readiness_probe.clone();
    }
    for vm in s
        .volume_mounts
        .iter()
        .filter(|v| !v.use_as_compilation_cache)
    {
        spec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: vm.name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: vm.name.clone(),
                read_only: None,
            }),
            ..Default::default()
        });
        main.volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: vm.name.clone(),
                mount_path: vm
                    .mount_point
                    .clone()
                    .unwrap_or_else(|| format!("/mnt/{}", vm.name)),
                ..Default::default()
            });
    }

    let mut containers = vec![main];
    containers.append(&mut spec.containers);
    if let Some(f) = &s.frontend_sidecar {
        containers.push(Container {
            name: FRONTEND_SIDECAR_CONTAINER.to_string(),
            image: Some(f.image.clone()),
            args: (!f.args.is_empty()).then(|| f.args.clone()),
            env: (!f.envs.is_empty()).then(|| f.envs.clone()),
            env_from: f.env_from_secret.as_deref().map(|n| vec![secret_env(n)]),
            ..Default::default()
        });
    }
    spec.containers = containers;

    let mut labels = s.labels.clone();
    let mut annotations = s.annotations.clone();
    if let Some(m) = &s.extra_pod_metadata {
        labels.extend(m.labels.clone());
        annotations.extend(m.annotations.clone());
    }
    let metadata = (!labels.is_empty() || !annotations.is_empty()).then(|| ObjectMeta {
        labels: (!labels.is_empty()).then_some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..Default::default()
    });
    PodTemplateSpec {
        metadata,
        spec: Some(spec),
    }
}

fn secret_env(name: &str) -> EnvFromSource {
    EnvFromSource {
        secret_ref: Some(SecretEnvSource {
            name: name.to_string(),
            optional: None,
        }),
        ..Default::default()
    }
}

fn merge_quantities(
    target: &mut Option<BTreeMap<String, Quantity>>,
    item: Option<&a::ResourceItem>,
) {
    let Some(item) = item else { return };
    let map = target.get_or_insert_with(BTreeMap::new);
    if let Some(cpu) = &item.cpu {
        map.insert("cpu".into(), Quantity(cpu.clone()));
    }
    if let Some(memory) = &item.memory {
        map.insert("memory".into(), Quantity(memory.clone()));
    }
    if let Some(gpu) = &item.gpu {
        let resource = item
            .gpu_type
            .clone()
            .unwrap_or_else(|| DEFAULT_GPU_RESOURCE.into());
        map.insert(resource, Quantity(gpu.clone()));
    }
    for (k, v) in &item.custom {
        map.insert(k.clone(), Quantity(v.clone()));
    }
    if map.is_empty() {
        *target = None;
    }
}

// --- spec: v1beta1 → v1alpha1 --------------------------------------------------------------

fn spec_to_alpha(s: &b::DynamoGraphDeploymentSpec) -> a::DynamoGraphDeploymentSpec {
    a::DynamoGraphDeploymentSpec {
        provider_override: s.provider_override.clone(),
        annotations: s.annotations.clone(),
        labels: s.labels.clone(),
        priority_class_name: s.priority_class_name.clone(),
        pvcs: Vec::new(),
        services: s.components.iter().map(component_to_alpha).collect(),
        envs: s.env.clone(),
        backend_framework: s.backend_framework,
        restart: s.restart.clone(),
        topology_constraint: s
            .topology_constraint
            .as_ref()
            .map(|t| a::SpecTopologyConstraint {
                topology_profile: t.cluster_topology_name.clone(),
                pack_domain: t.pack_domain.clone(),
            }),
        experimental: s
            .experimental
            .as_ref()
            .map(|e| a::DynamoGraphDeploymentExperimentalSpec {
                kv_transfer_policy: e.kv_transfer_policy.as_ref().and_then(|k| {
                    Some(a::KvTransferPolicy {
                        label_key: k.label_key.clone()?,
                        domain: k.domain.clone(),
                        enforcement: k.enforcement,
                        preferred_weight: k.preferred_weight,
                    })
                }),
                component_groups: e
                    .component_groups
                    .iter()
                    .map(|g| a::ComponentGroupSpec {
                        name: g.name.clone(),
                        replicas: g.replicas,
                        scaling_adapter: g
                            .scaling_adapter
                            .as_ref()
                            .map(|_| a::ScalingAdapter { enabled: true }),
                        components: g.components.clone(),
                    })
                    .collect(),
            }),
    }
}

fn component_to_alpha(
    c: &b::DynamoComponentDeploymentSharedSpec,
) -> (String, a::DynamoComponentDeploymentSharedSpec) {
    use b::ComponentType as T;
    let (component_type, sub) = match c.r#type {
        None => (None, None),
        Some(T::Frontend) => (Some("frontend"), None),
        Some(T::Worker) => (Some("worker"), None),
        Some(T::Prefill) => (Some("worker"), Some("prefill")),
        Some(T::Decode) => (Some("worker"), Some("decode")),
        Some(T::Planner) => (Some("planner"), None),
        Some(T::Epp) => (Some("epp"), None),
    };
    let experimental = c.experimental.as_ref();
    let mut volume_mounts = Vec::new();
    if let Some(cache) = &c.compilation_cache {
        volume_mounts.push(a::VolumeMount {
            name: cache.pvc_name.clone(),
            mount_point: cache.mount_path.clone(),
            use_as_compilation_cache: true,
        });
    }
    let (extra_pod_metadata, extra_pod_spec, frontend_sidecar) =
        pod_template_to_alpha(c.pod_template.as_ref(), c.frontend_sidecar.as_deref());
    let service = a::DynamoComponentDeploymentSharedSpec {
        component_type: component_type.map(str::to_string),
        sub_component_type: sub.map(str::to_string),
        global_dynamo_namespace: c.global_dynamo_namespace,
        volume_mounts,
        model_ref: c.model_ref.clone(),
        shared_memory: c.shared_memory_size.as_ref().map(|q| {
            if q.0 == "0" {
                crate::checkpoint::SharedMemorySpec {
                    disabled: true,
                    size: None,
                }
            } else {
                crate::checkpoint::SharedMemorySpec {
                    disabled: false,
                    size: Some(q.clone()),
                }
            }
        }),
        extra_pod_metadata,
        extra_pod_spec,
        replicas: c.replicas,
        multinode: c.multinode.clone(),
        scaling_adapter: c
            .scaling_adapter
            .as_ref()
            .map(|_| a::ScalingAdapter { enabled: true }),
        epp_config: c.epp_config.clone(),
        frontend_sidecar,
        checkpoint: experimental.and_then(|e| e.checkpoint.as_ref()).map(|k| {
            a::ServiceCheckpointConfig {
                enabled: k.enabled,
                mode: k.mode,
                checkpoint_ref: k.checkpoint_ref.clone(),
                identity: k.identity.clone(),
            }
        }),
        topology_constraint: c.topology_constraint.clone(),
        gpu_memory_service: experimental
            .and_then(|e| e.gpu_memory_service.as_ref())
            .map(|g| a::GpuMemoryServiceSpec {
                enabled: true,
                mode: gms_mode_to_alpha(g.mode),
                device_class_name: g.device_class_name.clone(),
            }),
        failover: experimental
            .and_then(|e| e.failover.as_ref())
            .map(|f| a::FailoverSpec {
                enabled: true,
                mode: gms_mode_to_alpha(f.mode),
                num_shadows: f.num_shadows,
            }),
        ..Default::default()
    };
    (c.name.clone(), service)
}

type AlphaPodParts = (
    Option<a::ExtraPodMetadata>,
    Option<a::ExtraPodSpec>,
    Option<a::FrontendSidecarSpec>,
);

fn pod_template_to_alpha(
    template: Option<&PodTemplateSpec>,
    frontend: Option<&str>,
) -> AlphaPodParts {
    let Some(template) = template else {
        return (None, None, None);
    };
    let metadata = template.metadata.as_ref().and_then(|m| {
        let labels = m.labels.clone().unwrap_or_default();
        let annotations = m.annotations.clone().unwrap_or_default();
        (!labels.is_empty() || !annotations.is_empty()).then_some(a::ExtraPodMetadata {
            annotations,
            labels,
        })
    });
    let mut spec = template.spec.clone().unwrap_or_default();
    let mut main = None;
    let mut sidecar = None;
    let mut rest = Vec::new();
    for container in std::mem::take(&mut spec.containers) {
        if container.name == b::MAIN_CONTAINER_NAME && main.is_none() {
            main = Some(Container {
                name: String::new(),
                ..container
            });
        } else if frontend == Some(container.name.as_str()) && sidecar.is_none() {
            sidecar = Some(a::FrontendSidecarSpec {
                image: container.image.clone().unwrap_or_default(),
                args: container.args.clone().unwrap_or_default(),
                env_from_secret: container
                    .env_from
                    .as_ref()
                    .and_then(|e| e.first())
                    .and_then(|e| e.secret_ref.as_ref())
                    .map(|s| s.name.clone()),
                envs: container.env.clone().unwrap_or_default(),
            });
        } else {
            rest.push(container);
        }
    }
    spec.containers = rest;
    let pod_spec = (spec != PodSpec::default()).then_some(spec);
    let extra = (pod_spec.is_some() || main.is_some()).then_some(a::ExtraPodSpec {
        pod_spec,
        main_container: main,
    });
    (metadata, extra, sidecar)
}

// --- status --------------------------------------------------------------------------------

fn status_from_alpha(s: &a::DynamoGraphDeploymentStatus) -> b::DynamoGraphDeploymentStatus {
    b::DynamoGraphDeploymentStatus {
        observed_generation: s.observed_generation,
        state: s.state,
        conditions: s.conditions.clone(),
        components: s
            .services
            .iter()
            .map(|(k, v)| (k.clone(), replica_from_alpha(v)))
            .collect(),
        restart: s.restart.clone(),
        checkpoints: s.checkpoints.clone(),
        rolling_update: s.rolling_update.as_ref().map(|r| b::RollingUpdateStatus {
            phase: r.phase,
            start_time: r.start_time.clone(),
            end_time: r.end_time.clone(),
            updated_components: r.updated_services.clone(),
        }),
        placement: s.placement.clone(),
    }
}

fn status_to_alpha(s: &b::DynamoGraphDeploymentStatus) -> a::DynamoGraphDeploymentStatus {
    a::DynamoGraphDeploymentStatus {
        observed_generation: s.observed_generation,
        state: s.state,
        conditions: s.conditions.clone(),
        services: s
            .components
            .iter()
            .map(|(k, v)| (k.clone(), replica_to_alpha(v)))
            .collect(),
        restart: s.restart.clone(),
        checkpoints: s.checkpoints.clone(),
        rolling_update: s.rolling_update.as_ref().map(|r| a::RollingUpdateStatus {
            phase: r.phase,
            start_time: r.start_time.clone(),
            end_time: r.end_time.clone(),
            updated_services: r.updated_components.clone(),
        }),
        placement: s.placement.clone(),
    }
}

fn replica_from_alpha(v: &a::ServiceReplicaStatus) -> b::ComponentReplicaStatus {
    b::ComponentReplicaStatus {
        component_kind: v.component_kind,
        component_name: (!v.component_name.is_empty()).then(|| v.component_name.clone()),
        component_names: v.component_names.clone(),
        runtime_namespace: v.runtime_namespace.clone(),
        gpus_per_engine: v.gpus_per_engine,
        gpus_per_replica: v.gpus_per_replica,
        replicas: v.replicas,
        updated_replicas: v.updated_replicas,
        ready_replicas: v.ready_replicas,
        available_replicas: v.available_replicas,
        scheduled_replicas: v.scheduled_replicas,
    }
}

fn replica_to_alpha(v: &b::ComponentReplicaStatus) -> a::ServiceReplicaStatus {
    a::ServiceReplicaStatus {
        component_kind: v.component_kind,
        component_name: v.component_name.clone().unwrap_or_default(),
        component_names: v.component_names.clone(),
        runtime_namespace: v.runtime_namespace.clone(),
        gpus_per_engine: v.gpus_per_engine,
        gpus_per_replica: v.gpus_per_replica,
        replicas: v.replicas,
        updated_replicas: v.updated_replicas,
        ready_replicas: v.ready_replicas,
        available_replicas: v.available_replicas,
        scheduled_replicas: v.scheduled_replicas,
    }
}
