//! Readiness of the workloads and the DCD status derived from them (`resolve`: no writes).

use api::ComponentKind;
use api::dcd::{CONDITION_AVAILABLE, CONDITION_DYNAMO_COMPONENT_READY};
use api::v1beta1::ComponentReplicaStatus;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::conditions::{self, Status};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::render::{Identity, pod_gpus};

/// `Available` reason: the Deployment is ready.
pub const REASON_DEPLOYMENT_READY: &str = "DeploymentReady";
/// `Available` reason: the Deployment is not ready yet.
pub const REASON_DEPLOYMENT_NOT_READY: &str = "DeploymentNotReady";
/// `Available` reason: the LeaderWorkerSet is ready.
pub const REASON_LEADER_WORKER_SET_READY: &str = "LeaderWorkerSetReady";
/// `Available` reason: the LeaderWorkerSet is not ready yet.
pub const REASON_LEADER_WORKER_SET_NOT_READY: &str = "LeaderWorkerSetNotReady";
/// `Available` reason: the component is multinode and the cluster serves no LeaderWorkerSet
/// API.
pub const REASON_LEADER_WORKER_SET_UNAVAILABLE: &str = "LeaderWorkerSetUnavailable";
/// `DynamoComponentReady` reason: the workload is ready.
pub const REASON_COMPONENT_READY: &str = "ComponentReady";
/// `DynamoComponentReady` reason: the workload is not ready.
pub const REASON_COMPONENT_NOT_READY: &str = "ComponentNotReady";

/// Upstream's `IsDeploymentReady`: not paused, and either zero replicas are desired or the
/// Deployment controller has observed the latest generation, every desired replica is updated
/// and available, no surge pods remain (`status.replicas == desired`), and its `Available`
/// condition is `True`. Desired replicas default to 1.
pub fn deployment_ready(deployment: &Deployment) -> bool {
    let spec = deployment.spec.as_ref();
    if spec.and_then(|s| s.paused).unwrap_or(false) {
        return false;
    }
    let desired = spec.and_then(|s| s.replicas).unwrap_or(1);
    if desired == 0 {
        return true;
    }
    let Some(status) = deployment.status.as_ref() else {
        return false;
    };
    let generation = deployment.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation
        || status.updated_replicas.unwrap_or(0) < desired
        || status.available_replicas.unwrap_or(0) < desired
        || status.replicas.unwrap_or(0) != desired
    {
        return false;
    }
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Available" && c.status == "True")
}

/// Upstream's `IsLeaderWorkerSetReady`: zero desired replicas, or at least the desired number of
/// ready replicas and the `Available` condition `True`. Desired replicas default to 1.
pub fn leader_worker_set_ready(lws: &DynamicObject) -> bool {
    let desired = lws
        .data
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if desired == 0 {
        return true;
    }
    let status = lws.data.get("status");
    let ready = status
        .and_then(|s| s.get("readyReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if ready < desired {
        return false;
    }
    status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"))
        .is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// `status.component` for a Deployment-backed DCD.
pub(crate) fn deployment_component(
    deployment: &Deployment,
    id: &Identity,
    engine_gpus: i64,
) -> ComponentReplicaStatus {
    let status = deployment.status.clone().unwrap_or_default();
    let replica_gpus = pod_gpus(
        deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref()),
        engine_gpus,
    );
    ComponentReplicaStatus {
        component_kind: ComponentKind::Deployment,
        component_name: None,
        component_names: vec![deployment.name_any()],
        runtime_namespace: Some(id.runtime_namespace()),
        gpus_per_engine: Some(engine_gpus),
        gpus_per_replica: Some(replica_gpus),
        replicas: status.replicas.unwrap_or(0),
        updated_replicas: status.updated_replicas.unwrap_or(0),
        ready_replicas: Some(status.ready_replicas.unwrap_or(0)),
        available_replicas: Some(status.available_replicas.unwrap_or(0)),
        scheduled_replicas: None,
    }
}

/// `status.component` for a LeaderWorkerSet-backed DCD.
pub(crate) fn leader_worker_set_component(
    lws: &DynamicObject,
    id: &Identity,
    engine_gpus: i64,
) -> ComponentReplicaStatus {
    let int = |path: &str| {
        lws.data
            .pointer(path)
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(0)
    };
    let template = |path: &str| -> Option<PodTemplateSpec> {
        lws.data
            .pointer(path)
            .and_then(|t| serde_json::from_value(t.clone()).ok())
    };
    let leader = template("/spec/leaderWorkerTemplate/leaderTemplate");
    let worker = template("/spec/leaderWorkerTemplate/workerTemplate");
    let workers = i64::from(id.nodes.saturating_sub(1));
    // Main's GPUs on each node, which a GMS pod claims instead of requesting.
    let claimed = engine_gpus / i64::from(id.nodes.max(1));
    let replica_gpus = pod_gpus(leader.as_ref().and_then(|t| t.spec.as_ref()), claimed)
        + workers * pod_gpus(worker.as_ref().and_then(|t| t.spec.as_ref()), claimed);
    ComponentReplicaStatus {
        component_kind: ComponentKind::LeaderWorkerSet,
        component_name: None,
        component_names: vec![lws.name_any()],
        runtime_namespace: Some(id.runtime_namespace()),
        gpus_per_engine: Some(engine_gpus),
        gpus_per_replica: Some(replica_gpus),
        replicas: int("/status/replicas"),
        updated_replicas: int("/status/updatedReplicas"),
        ready_replicas: Some(int("/status/readyReplicas")),
        available_replicas: None,
        scheduled_replicas: None,
    }
}

/// The `Available` and `DynamoComponentReady` conditions for a workload that is `ready` or
/// not, with the `Available` reason and message given.
pub(crate) fn readiness_conditions(
    ready: bool,
    reason: &str,
    message: &str,
    generation: i64,
) -> [Condition; 2] {
    let (component_reason, component_message) = if ready {
        (REASON_COMPONENT_READY, "DynamoComponent is ready")
    } else {
        (REASON_COMPONENT_NOT_READY, "DynamoComponent is not ready")
    };
    [
        conditions::new(
            CONDITION_AVAILABLE,
            Status::from(ready),
            reason,
            message,
            generation,
        ),
        conditions::new(
            CONDITION_DYNAMO_COMPONENT_READY,
            Status::from(ready),
            component_reason,
            component_message,
            generation,
        ),
    ]
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
