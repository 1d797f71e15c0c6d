//! The pod spec of a clique: the pod both pathways render ([`pod_render::pod_spec`]: the
//! operator's defaults for the component type under the user's pod template), for the clique's
//! [`Role`](crate::names::Role) with the Grove [`Deployer`] (a multinode component's leader and
//! worker cliques get the backend's launch wiring with the leader found through Grove's
//! headless Service and the worker rank computed from `GROVE_PCLQ_POD_INDEX`; see
//! [`pod_render::multinode`]).
//!
//! A pod nothing names a ServiceAccount for (the user, the planner/EPP defaults, Kubernetes
//! discovery) keeps none, as upstream renders it: the kubelet runs it as `default`, and the
//! PodCliqueSet of a graph adopted from upstream stays byte-equal (writing `default` would
//! change every clique template and so roll the pods).

pub use pod_render::{
    Backend, DISABLE_IMAGE_PULL_SECRET_DISCOVERY, Deployer, HTTP_PORT, PodInput, PullSecrets,
    SYSTEM_PORT, registry_host,
};
