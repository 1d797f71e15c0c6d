//! The rules of one component (of a graph, or of a DynamoComponentDeployment): its own fields
//! here, the rest by concern.

use super::collector::{Collector, Seg};
use super::containers::{dynamo_sidecar, frontend_sidecar, main_container};
use super::experimental::experimental;
use super::grove_only::grove_only_component;
use super::multinode::{multinode_type, roles};
use super::pod_metadata::pod_metadata;
use super::{Rule, ValidationContext};
use crate::runtime_version::RuntimeVersion;
use crate::v1beta1::{
    ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeploymentSpec,
};

/// `framework`: the graph's (or the DCD's) `backendFramework`; with `graph` unknown, a backend
/// that cannot be determined is not held against the component.
pub(super) fn component(
    c: &DynamoComponentDeploymentSharedSpec,
    ctx: &ValidationContext,
    graph: Option<&DynamoGraphDeploymentSpec>,
    framework: Option<crate::BackendFramework>,
    v: &mut Collector,
) {
    let pod = c.pod_template.as_ref();
    let containers = pod
        .and_then(|p| p.spec.as_ref())
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();

    // The pod template's labels and annotations go onto the children (and the pods), the
    // graph's annotations with them.
    pod_metadata(
        pod.and_then(|p| p.metadata.as_ref()),
        &[Seg::Key("podTemplate")],
        graph.map(|g| &g.annotations),
        v,
    );
    main_container(containers, v);
    min_available(c, v);
    grove_only_component(c, ctx, v);
    epp_config(c, v);
    compilation_cache(c, graph.is_some(), framework, v);
    frontend_sidecar(c, containers, v);
    runtime_version_override(c, v);
    dynamo_sidecar(c, v);
    multinode_type(c, v);
    roles(c, v);
    experimental(c, containers, framework, v);
    topology_inheritance(c, graph, v);
}

/// minAvailable ≤ replicas (replicas 0 is scale-to-zero).
fn min_available(c: &DynamoComponentDeploymentSharedSpec, v: &mut Collector) {
    let Some(min) = c.min_available else {
        return;
    };
    let replicas = c.replicas.unwrap_or(1);
    if replicas != 0 && replicas < min {
        if c.replicas.is_some() {
            v.at(&[Seg::Key("replicas")]).push(
                Rule::ReplicasBelowMinAvailable,
                format!("must be ≥ minAvailable ({min})"),
            );
        } else {
            v.at(&[Seg::Key("minAvailable")]).push(
                Rule::ReplicasBelowMinAvailable,
                format!("must be ≤ replicas (1 when unset), got {min}"),
            );
        }
    }
}

/// `eppConfig` only on a component of type epp.
fn epp_config(c: &DynamoComponentDeploymentSharedSpec, v: &mut Collector) {
    if c.epp_config.is_some() && c.r#type != Some(ComponentType::Epp) {
        v.at(&[Seg::Key("eppConfig")])
            .push(Rule::EppConfigType, "may only be set when type is epp");
    }
}

/// `compilationCache.mountPath` of a worker-class component, required unless its backend has a
/// default cache path. `in_graph`: a backend that cannot be determined is named `unknown`
/// (outside a graph it is not held against the component).
fn compilation_cache(
    c: &DynamoComponentDeploymentSharedSpec,
    in_graph: bool,
    framework: Option<crate::BackendFramework>,
    v: &mut Collector,
) {
    if let Some(cache) = &c.compilation_cache
        && cache.mount_path.as_deref().is_none_or(str::is_empty)
        && c.r#type.is_none_or(ComponentType::is_worker)
    {
        // Only vLLM has a default path; a mismatch of backends is refused elsewhere.
        use crate::backend::Backend;
        let named = match Backend::detect(c, framework) {
            Ok(b) if b.compilation_cache_path().is_some() => None,
            Err(_) => None,
            Ok(Backend::None) => in_graph.then_some("unknown"),
            Ok(b) => b.framework().map(crate::BackendFramework::as_str),
        };
        if let Some(named) = named {
            v.at(&[Seg::Key("compilationCache"), Seg::Key("mountPath")]).push(
                Rule::CompilationCacheMountPath,
                format!(
                    "is required for backend framework {named} (no default available; only vllm has one)"
                ),
            );
        }
    }
}

/// `runtimeVersionOverride`, when set, is a semantic version.
fn runtime_version_override(c: &DynamoComponentDeploymentSharedSpec, v: &mut Collector) {
    if let Some(value) = c
        .runtime_version_override
        .as_deref()
        .filter(|o| !o.is_empty())
        && let Err(e) = RuntimeVersion::parse(value)
    {
        v.at(&[Seg::Key("runtimeVersionOverride")])
            .push(Rule::RuntimeVersionOverride, e.to_string());
    }
}

/// A component's `topologyConstraint` inherits the graph's topology, so needs
/// `spec.topologyConstraint` (checked only with the graph known).
fn topology_inheritance(
    c: &DynamoComponentDeploymentSharedSpec,
    graph: Option<&DynamoGraphDeploymentSpec>,
    v: &mut Collector,
) {
    if let Some(graph) = graph
        && c.topology_constraint.is_some()
        && graph.topology_constraint.is_none()
    {
        v.at(&[Seg::Key("topologyConstraint")]).push(
            Rule::TopologyInheritance,
            "requires spec.topologyConstraint (the clusterTopologyName it inherits)",
        );
    }
}
