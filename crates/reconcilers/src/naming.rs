//! Names and labels of the children a DynamoGraphDeployment owns. These are observable by users
//! (they select on them, script against them), so they follow upstream Dynamo exactly.

use std::collections::BTreeMap;

use api::labels;
use api::{ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use kube::ResourceExt;

/// The Dynamo runtime namespace used when a component sets `globalDynamoNamespace`.
pub use api::labels::GLOBAL_DYNAMO_NAMESPACE;

/// Whether a component type runs inference engines (`worker`, `prefill`, `decode`): these are
/// the components a managed rolling update replaces by worker generation.
pub fn is_worker(component_type: Option<ComponentType>) -> bool {
    component_type.is_some_and(ComponentType::is_worker)
}

/// `<dgd>-<component, lowercased>`: the base name of a component's children (its
/// DynamoComponentDeployment, Deployment, Service, scaling adapter).
pub fn component_base_name(dgd_name: &str, component: &str) -> String {
    format!("{dgd_name}-{}", component.to_lowercase())
}

/// The DynamoComponentDeployment name of `component`: the base name, plus `-<worker suffix>`
/// for worker components when a worker generation suffix is given.
pub fn dcd_name(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    worker_suffix: Option<&str>,
) -> String {
    let base = component_base_name(&dgd.name_any(), &component.name);
    match worker_suffix {
        Some(suffix) if !suffix.is_empty() && is_worker(component.r#type) => {
            format!("{base}-{suffix}")
        }
        _ => base,
    }
}

/// A name acceptable for kinds that reject dots (Services): lowercased, dots become dashes.
pub fn normalize_kube_name(name: &str) -> String {
    name.replace('.', "-").to_lowercase()
}

/// The Dynamo runtime namespace: `<k8s namespace>-<dgd name, dots as dashes>`, or
/// [`GLOBAL_DYNAMO_NAMESPACE`].
pub fn dynamo_namespace(global: bool, k8s_namespace: &str, dgd_name: &str) -> String {
    if global {
        GLOBAL_DYNAMO_NAMESPACE.to_string()
    } else {
        format!("{k8s_namespace}-{}", dgd_name.replace('.', "-"))
    }
}

/// The labels every child of a component carries (and selects on): graph name, component name,
/// component type and the pod selector label.
pub fn component_labels(
    dgd_name: &str,
    component: &DynamoComponentDeploymentSharedSpec,
) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(
        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
        dgd_name.to_string(),
    );
    l.insert(labels::DYNAMO_COMPONENT.to_string(), component.name.clone());
    if let Some(t) = component.r#type {
        l.insert(
            labels::DYNAMO_COMPONENT_TYPE.to_string(),
            t.as_str().to_string(),
        );
    }
    l
}

/// The label selector of a component's pods across worker generations (what a scaling adapter
/// reports for an HPA): `nvidia.com/dynamo-graph-deployment-name=<dgd>,nvidia.com/dynamo-component=<component>`.
pub fn component_selector(dgd_name: &str, component: &str) -> String {
    format!(
        "{}={dgd_name},{}={component}",
        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME,
        labels::DYNAMO_COMPONENT
    )
}

/// The label every DGD-level child carries: `nvidia.com/dynamo-graph-deployment-name=<dgd>`.
pub fn graph_labels(dgd_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(
        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
        dgd_name.to_string(),
    )])
}

/// `<dgd>-k8s-service-discovery`: the ServiceAccount of a graph's pods when Kubernetes discovery
/// is on (its Role and RoleBinding add `-role` and `-binding`); defined with the pod renderer.
pub use pod_render::discovery_service_account;

/// `<dgd>-<component, lowercased>-gpu`: the GPU memory service ResourceClaimTemplate of a
/// component; defined with the pod renderer, whose pods claim it.
pub use pod_render::gms::resource_claim_template_name;

/// `<dgd>-epp-config` (the legacy EPP's inline configuration) and `<dgd>-pool` (the
/// InferencePool), defined with the EPP pod that mounts and names them.
pub use pod_render::epp::{epp_config_map_name, inference_pool_name};

/// `<dgd>-wait-leader-script`: the ConfigMap with the wait-for-leader script of multinode
/// workers, defined with the init container that mounts it.
pub use pod_render::multinode::vllm::wait_leader_config_map as wait_leader_config_map_name;

/// `checkpoint-<identity hash>`: the DynamoCheckpoint a graph creates for an automatic
/// checkpoint.
pub fn auto_checkpoint_name(identity_hash: &str) -> String {
    format!("checkpoint-{identity_hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_upstream() {
        assert_eq!(
            component_base_name("vllm-agg", "VllmDecodeWorker"),
            "vllm-agg-vllmdecodeworker"
        );
        assert_eq!(normalize_kube_name("Qwen3-0.6B"), "qwen3-0-6b");
        assert_eq!(dynamo_namespace(false, "ns", "a.b"), "ns-a-b");
        assert_eq!(dynamo_namespace(true, "ns", "a.b"), "dynamo");
        assert_eq!(
            component_selector("g", "Frontend"),
            "nvidia.com/dynamo-graph-deployment-name=g,nvidia.com/dynamo-component=Frontend"
        );
    }
}
