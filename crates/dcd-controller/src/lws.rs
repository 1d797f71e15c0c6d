//! The LeaderWorkerSet kind, typed only as far as a watch cache needs: metadata, and `spec` and
//! `status` kept whole as JSON (the controller renders and reads them as JSON, see
//! [`crate::render`] and [`crate::status`]). Reads from a cache of this type return the complete
//! object.

kit::json_kind! {
    /// A `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
    pub struct LeaderWorkerSet = reconcilers::optional::LEADER_WORKER_SET_GROUP, "v1", "LeaderWorkerSet", "leaderworkersets";
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
