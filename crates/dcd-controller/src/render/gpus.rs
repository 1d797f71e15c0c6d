//! GPUs: of a container, of a pod, of one inference engine.

use std::collections::BTreeMap;

use api::DynamoComponentDeployment;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::GPU_RESOURCE;

/// GPUs (`nvidia.com/gpu`, limits else requests) a container asks for.
pub(crate) fn container_gpus(container: &Container) -> i64 {
    let resources = container.resources.as_ref();
    let get = |m: Option<&BTreeMap<String, Quantity>>| {
        m.and_then(|m| m.get(GPU_RESOURCE))
            .and_then(|q| q.0.trim().parse::<i64>().ok())
    };
    get(resources.and_then(|r| r.limits.as_ref()))
        .or_else(|| get(resources.and_then(|r| r.requests.as_ref())))
        .unwrap_or(0)
}

/// GPUs of a pod: every container's, plus `claimed` (main's GPUs) once when the pod shares them
/// through the GPU memory service's claim (they left the containers' resources).
pub(crate) fn pod_gpus(spec: Option<&PodSpec>, claimed: i64) -> i64 {
    spec.map(|s| {
        let shared = if pod_render::gms::shares_gpus(s) {
            claimed
        } else {
            0
        };
        s.containers.iter().map(container_gpus).sum::<i64>() + shared
    })
    .unwrap_or(0)
}

/// GPUs of one inference engine: the user's main container times the nodes of a replica.
pub(crate) fn engine_gpus(dcd: &DynamoComponentDeployment) -> i64 {
    let component = &dcd.spec.component;
    component.main_container().map(container_gpus).unwrap_or(0)
        * i64::from(component.number_of_nodes())
}
