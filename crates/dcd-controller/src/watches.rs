//! What this controller watches and which changes matter, for the operator's event → action
//! table.
//!
//! [`WATCHES`] describes each watch; the `*_key` functions are the matching predicates: each
//! hashes exactly the fields whose change can alter what the reconciler writes or reports, so an
//! unchanged key means the event can be dropped. They are `Fn(&K) -> Option<u64>`, which
//! kube-runtime accepts as a `Predicate` (`WatchStreamExt::predicate_filter`). Deletions of owned
//! children must still trigger (a deleted Deployment is re-created): filter updates only.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use api::DynamoComponentDeployment;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::DynamicObject;
use serde_json::Value;

/// How a watched kind relates to the DCD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// The reconciled kind itself.
    Primary,
    /// Children with a controller owner reference to a DCD; map to that DCD.
    Owned,
    /// Children with owner references (controller or not) to DCDs, such as the shared model
    /// Service; map to every owning DCD.
    Owners,
    /// Objects of the DCDs' namespace they read; map to every DCD of the namespace.
    Namespace,
}

/// One watch of this controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watch {
    /// `group/version` of the watched kind.
    pub api_version: &'static str,
    /// The watched kind.
    pub kind: &'static str,
    /// Primary or owned (enqueue the controlling DCD).
    pub relation: Relation,
    /// Which changes trigger a reconcile.
    pub triggers: &'static str,
    /// Only when the cluster serves the kind (or, for Secrets, with image pull secret
    /// discovery on).
    pub optional: bool,
}

/// Every watch of the DCD controller.
pub const WATCHES: [Watch; 7] = [
    Watch {
        api_version: "nvidia.com/v1beta1",
        kind: "DynamoComponentDeployment",
        relation: Relation::Primary,
        triggers: "metadata.generation changes; labels or annotations change (they are rendered onto the children); deletionTimestamp appears. Status-only updates never trigger",
        optional: false,
    },
    Watch {
        api_version: "apps/v1",
        kind: "Deployment",
        relation: Relation::Owned,
        triggers: "status fields that feed the DCD status (observedGeneration, replicas, updatedReplicas, readyReplicas, availableReplicas, the Available condition); spec changes (generation) and label/annotation changes, to restore drift; deletion",
        optional: false,
    },
    Watch {
        api_version: "v1",
        kind: "Service",
        relation: Relation::Owners,
        triggers: "spec changes (Services have no generation), to restore drift; deletion (the component Service has the DCD as controller; the model Service has every DCD serving the model as a non-controller owner)",
        optional: false,
    },
    Watch {
        api_version: "v1",
        kind: "ServiceAccount",
        relation: Relation::Namespace,
        triggers: "creation, deletion, and changes of the `nvidia.com/dynamo-component-pod` label (the account pods run as when nothing names one); the graph's own accounts enqueue nothing",
        optional: false,
    },
    Watch {
        api_version: "v1",
        kind: "Secret",
        relation: Relation::Namespace,
        triggers: "with image pull secret discovery only, and only Secrets of type `kubernetes.io/dockerconfigjson`: creation, deletion, and data changes (the registries they hold credentials for)",
        optional: true,
    },
    Watch {
        api_version: "apps/v1",
        kind: "DaemonSet",
        relation: Relation::Namespace,
        triggers: "the snapshot agent's DaemonSet only (label `app.kubernetes.io/component=snapshot-agent`): creation, deletion, and pod template changes (the checkpoint storage restore pods mount)",
        optional: false,
    },
    Watch {
        api_version: "leaderworkerset.x-k8s.io/v1",
        kind: "LeaderWorkerSet",
        relation: Relation::Owned,
        triggers: "status fields that feed the DCD status (replicas, updatedReplicas, readyReplicas, the Available condition); generation; deletion",
        optional: true,
    },
];

fn finish(hasher: DefaultHasher) -> Option<u64> {
    Some(hasher.finish())
}

fn json_hash(value: Option<&Value>, hasher: &mut DefaultHasher) {
    value.map(Value::to_string).hash(hasher);
}

/// Predicate key of a DCD: generation, labels and annotations (rendered onto the children), and
/// whether deletion started.
pub fn dcd_key(dcd: &DynamoComponentDeployment) -> Option<u64> {
    let mut h = DefaultHasher::new();
    dcd.metadata.generation.hash(&mut h);
    dcd.metadata.deletion_timestamp.is_some().hash(&mut h);
    dcd.metadata.labels.hash(&mut h);
    dcd.metadata.annotations.hash(&mut h);
    finish(h)
}

/// Predicate key of an owned Deployment: generation, labels, annotations, deletion, and the
/// status fields the DCD status is computed from.
pub fn deployment_key(deployment: &Deployment) -> Option<u64> {
    let mut h = DefaultHasher::new();
    let meta = &deployment.metadata;
    meta.generation.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    if let Some(status) = &deployment.status {
        status.observed_generation.hash(&mut h);
        status.replicas.hash(&mut h);
        status.updated_replicas.hash(&mut h);
        status.ready_replicas.hash(&mut h);
        status.available_replicas.hash(&mut h);
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Available")
            .map(|c| c.status.clone())
            .hash(&mut h);
    }
    finish(h)
}

/// Predicate key of an owned Service: spec, labels, annotations and deletion.
pub fn service_key(service: &Service) -> Option<u64> {
    let mut h = DefaultHasher::new();
    let meta = &service.metadata;
    meta.deletion_timestamp.is_some().hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    json_hash(serde_json::to_value(&service.spec).ok().as_ref(), &mut h);
    finish(h)
}

/// Predicate key of an owned LeaderWorkerSet: generation, labels, annotations, deletion, and
/// the status fields the DCD status is computed from.
pub fn leader_worker_set_key(lws: &DynamicObject) -> Option<u64> {
    let mut h = DefaultHasher::new();
    let meta = &lws.metadata;
    meta.generation.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    for field in ["replicas", "updatedReplicas", "readyReplicas"] {
        json_hash(lws.data.pointer(&format!("/status/{field}")), &mut h);
    }
    let available = lws
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"))
        .and_then(|c| c.get("status"));
    json_hash(available, &mut h);
    finish(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};

    #[test]
    fn deployment_key_follows_status_fields_that_matter_only() {
        let mut d = Deployment::default();
        d.metadata.generation = Some(1);
        let base = deployment_key(&d);
        let mut touched = d.clone();
        touched.metadata.resource_version = Some("99".into());
        touched.metadata.managed_fields = Some(vec![]);
        assert_eq!(deployment_key(&touched), base);
        let mut ready = d.clone();
        ready.status = Some(DeploymentStatus {
            ready_replicas: Some(1),
            ..Default::default()
        });
        assert_ne!(deployment_key(&ready), base);
        let mut available = ready.clone();
        available.status.as_mut().unwrap().conditions = Some(vec![DeploymentCondition {
            type_: "Available".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        assert_ne!(deployment_key(&available), deployment_key(&ready));
        let mut progressing = available.clone();
        progressing
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(DeploymentCondition {
                type_: "Progressing".into(),
                status: "True".into(),
                ..Default::default()
            });
        assert_eq!(deployment_key(&progressing), deployment_key(&available));
    }

    #[test]
    fn dcd_key_ignores_status_and_bookkeeping_churn() {
        let mut dcd = DynamoComponentDeployment::new("d", Default::default());
        dcd.metadata.generation = Some(2);
        let base = dcd_key(&dcd);
        dcd.status = Some(Default::default());
        dcd.metadata.resource_version = Some("7".into());
        dcd.metadata.managed_fields = Some(vec![]);
        assert_eq!(dcd_key(&dcd), base);
        let mut labelled = dcd.clone();
        labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert_ne!(dcd_key(&labelled), base);
        dcd.metadata.generation = Some(3);
        assert_ne!(dcd_key(&dcd), base);
    }
}
