//! The optional kinds the workload programs and the DCD controller use: APIs a cluster may not
//! serve, one `ApiResource` each. Whether they are served is the operator's shared
//! [`kit::served::Served`] set; a reconciler asks it rather than the API server.

use kube::api::ApiResource;

pub use crate::epp::inference_pool_resource as inference_pool;
pub use crate::ingress::http_route_resource as http_route;
pub use crate::ingress::virtual_service_resource as virtual_service;

/// API group of LeaderWorkerSet.
pub const LEADER_WORKER_SET_GROUP: &str = "leaderworkerset.x-k8s.io";

/// `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet: a multinode component on the component
/// pathway.
pub fn leader_worker_set() -> ApiResource {
    ApiResource {
        group: LEADER_WORKER_SET_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{LEADER_WORKER_SET_GROUP}/v1"),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    }
}

/// `resource.k8s.io/v1` ResourceClaimTemplate: the GPU memory service's DRA claims.
pub fn resource_claim_template() -> ApiResource {
    kit::object::resource::<k8s_openapi::api::resource::v1::ResourceClaimTemplate>()
}
