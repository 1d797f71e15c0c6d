//! The LeaderWorkerSet kind, typed only as far as a watch cache needs: metadata, and `spec` and
//! `status` kept whole as JSON (the controller renders and reads them as JSON, see
//! [`crate::render`] and [`crate::status`]). Reads from a cache of this type return the complete
//! object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

/// A `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaderWorkerSet {
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// `spec`, as stored.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
    /// `status`, as its controller reports it.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub status: Value,
}

impl Resource for LeaderWorkerSet {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "LeaderWorkerSet".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        reconcilers::optional::LEADER_WORKER_SET_GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "leaderworkersets".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_kind_is_the_rendered_one() {
        assert_eq!(
            kit::object::resource::<LeaderWorkerSet>(),
            reconcilers::optional::leader_worker_set()
        );
        let object: LeaderWorkerSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "x", "namespace": "ns"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3}},
            "status": {"readyReplicas": 1},
        }))
        .unwrap();
        let dynamic = kit::object::to_dynamic(&object).unwrap();
        assert_eq!(dynamic.data["spec"]["leaderWorkerTemplate"]["size"], 3);
        assert_eq!(dynamic.data["status"]["readyReplicas"], 1);
    }
}
