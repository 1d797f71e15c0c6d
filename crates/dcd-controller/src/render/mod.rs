//! Rendering: a DynamoComponentDeployment to the objects it wants. Pure: no client, no I/O, same
//! input ⇒ same output.
//!
//! The pod spec is the one both pathways render ([`pod_render::pod_spec`]: operator defaults
//! for the component type, the user's `main` container over them, pod-level defaults under the
//! user's pod spec, `/dev/shm`); this module adds the pod template's labels and annotations,
//! the workload around it and the Service. See the crate docs for the complete list.
//!
//! By concern: `identity` (what the DCD says about itself), the workloads
//! (`workloads`: the Deployment or LeaderWorkerSet), the pod template (`pod`), the Service
//! (`service`), the replicas applied (`replicas`) and the GPUs counted (`gpus`).

mod gpus;
mod identity;
mod pod;
mod replicas;
mod service;
mod workloads;

use reconcilers::discovery::DiscoveryBackend;
use std::collections::BTreeMap;

use api::DynamoComponentDeployment;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::DynamicObject;
use pod_render::restore::Checkpoint;
use pod_render::{Infrastructure, PullSecrets};

pub(crate) use gpus::{engine_gpus, pod_gpus};
pub(crate) use identity::Identity;
pub use pod::component_pod_account;
pub use replicas::{applied_replicas, held_replicas, hold_replicas};
pub use service::service_name;
pub use workloads::leader_worker_set_name;

// --- names and values that are part of the compatibility contract ---------------------------

/// Rolling-update `maxSurge` and `maxUnavailable` unless the annotations set them.
pub use api::deployment_strategy::DEFAULT_ROLLING_UPDATE;
/// Resource name of NVIDIA GPUs.
pub use api::gpu::NVIDIA_GPU as GPU_RESOURCE;

/// Label (controller, LWS pods): `leader` or `worker`; multinode Services select `leader`.
pub const ROLE_LABEL: &str = "role";
/// Discovery backend value that enables Kubernetes discovery (the operator default).
pub const DISCOVERY_KUBERNETES: &str = "kubernetes";
/// Discovery backend value that selects etcd discovery.
pub const DISCOVERY_ETCD: &str = "etcd";

/// The `ApiResource` of `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
pub use reconcilers::optional::leader_worker_set as leader_worker_set_resource;

// --- what render returns ---------------------------------------------------------------------

/// Everything a DynamoComponentDeployment wants, rendered.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The workload: a Deployment, or a LeaderWorkerSet for multinode components.
    pub workload: Workload,
    /// The component Service; `None` when the component wants none (a Service this DCD owns is
    /// then deleted).
    pub service: Option<Service>,
}

/// The workload of a component.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Single-node components: one Deployment named like the DCD.
    Deployment(Box<Deployment>),
    /// Multinode components: one `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet named
    /// `<dcd>-0` (there are no typed client bindings for it, hence the dynamic object).
    LeaderWorkerSet(Box<DynamicObject>),
}

/// Render the objects `dcd` wants, with no operator infrastructure settings, no labelled
/// ServiceAccount and no discovered image pull secrets in the namespace. Pure and
/// deterministic.
pub fn render(dcd: &DynamoComponentDeployment) -> Rendered {
    render_with(
        dcd,
        &Pods {
            infrastructure: &Infrastructure::default(),
            account: None,
            pull_secrets: &PullSecrets::default(),
            checkpoint: None,
            discovery: DiscoveryBackend::default(),
        },
    )
}

/// Render the objects `dcd` wants, its pods with what the cluster and the operator add
/// ([`Pods`]). Pure and deterministic.
pub fn render_with(dcd: &DynamoComponentDeployment, pods: &Pods<'_>) -> Rendered {
    let identity = Identity::resolve(dcd, pods.discovery);
    let pods = *pods;
    let workload = if identity.nodes > 1 {
        Workload::LeaderWorkerSet(Box::new(workloads::leader_worker_set(
            dcd, &identity, &pods,
        )))
    } else {
        Workload::Deployment(Box::new(workloads::deployment(dcd, &identity, &pods)))
    };
    Rendered {
        workload,
        service: service::service(dcd, &identity),
    }
}

/// What every pod template of a DCD is rendered with besides the DCD.
#[derive(Clone, Copy, Debug)]
pub struct Pods<'a> {
    /// The operator's infrastructure endpoints (env of every Dynamo container).
    pub infrastructure: &'a Infrastructure,
    /// The namespace's labelled ServiceAccount ([`component_pod_account`]): pods run as it
    /// when nothing else names their ServiceAccount (`default` when `None`).
    pub account: Option<&'a str>,
    /// The namespace's image pull secrets by registry host (`reconcilers::pull_secrets`;
    /// empty with discovery off).
    pub pull_secrets: &'a PullSecrets,
    /// The component's checkpoint, as resolved (`reconcilers::checkpoints::resolve_component`;
    /// see `pod_render::restore`).
    pub checkpoint: Option<&'a Checkpoint>,
    /// The operator's discovery backend, for DCDs without the discovery annotation.
    pub discovery: DiscoveryBackend,
}

fn owner_references(dcd: &DynamoComponentDeployment) -> Option<Vec<OwnerReference>> {
    dcd.controller_owner_ref(&()).map(|o| vec![o])
}

fn non_empty<K: Ord, V>(map: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!map.is_empty()).then_some(map)
}

#[cfg(test)]
mod tests;
