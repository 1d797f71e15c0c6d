//! The workload of a DCD: a Deployment, or a LeaderWorkerSet for multinode components.

use std::collections::BTreeMap;

use api::DynamoComponentDeployment;
use api::deployment_strategy::DeploymentStrategy as Strategy;
use api::labels;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;
use kube::api::DynamicObject;
use pod_render::Role;
use serde_json::json;

use super::pod::pod_template;
use super::{
    Identity, Pods, applied_replicas, leader_worker_set_resource, non_empty, owner_references,
};

/// Name of the LeaderWorkerSet of a multinode DCD: `<dcd>-0`.
pub fn leader_worker_set_name(dcd: &DynamoComponentDeployment) -> String {
    format!("{}-0", dcd.name_any())
}

pub(super) fn deployment(
    dcd: &DynamoComponentDeployment,
    id: &Identity,
    pods: &Pods<'_>,
) -> Deployment {
    let strategy = match Strategy::from_annotations(&id.annotations) {
        Strategy::Recreate => DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        },
        Strategy::RollingUpdate {
            max_surge,
            max_unavailable,
        } => DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(max_surge),
                max_unavailable: Some(max_unavailable),
            }),
        },
    };
    Deployment {
        metadata: ObjectMeta {
            name: Some(id.name.clone()),
            namespace: id.namespace.clone(),
            labels: non_empty(id.labels.clone()),
            annotations: non_empty(id.annotations.clone()),
            owner_references: owner_references(dcd),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: applied_replicas(dcd),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    labels::SELECTOR.to_string(),
                    id.name.clone(),
                )])),
                ..Default::default()
            },
            template: pod_template(dcd, id, Role::Main, pods),
            strategy: Some(strategy),
            ..Default::default()
        }),
        status: None,
    }
}

pub(super) fn leader_worker_set(
    dcd: &DynamoComponentDeployment,
    id: &Identity,
    pods: &Pods<'_>,
) -> DynamicObject {
    let template = |role: Role| {
        let mut t = pod_template(dcd, id, role, pods);
        if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(labels::SELECTOR);
        }
        serde_json::to_value(t).expect("pod templates serialize")
    };
    let mut spec = json!({
        "startupPolicy": "LeaderCreated",
        "leaderWorkerTemplate": {
            "leaderTemplate": template(Role::Leader),
            "workerTemplate": template(Role::Worker),
            "size": id.nodes,
        },
    });
    if let Some(replicas) = applied_replicas(dcd) {
        spec["replicas"] = json!(replicas);
    }
    let metadata = ObjectMeta {
        name: Some(leader_worker_set_name(dcd)),
        namespace: id.namespace.clone(),
        labels: non_empty(id.labels.clone()),
        owner_references: owner_references(dcd),
        ..Default::default()
    };
    let mut object =
        DynamicObject::new(&leader_worker_set_name(dcd), &leader_worker_set_resource())
            .data(json!({ "spec": spec }));
    object.metadata = metadata;
    object
}
