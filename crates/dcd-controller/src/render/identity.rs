//! Identity: what the DCD says about itself (names, component type, Dynamo namespace, worker
//! hash, the labels and annotations its children carry).

use reconcilers::discovery::DiscoveryBackend;
use std::collections::BTreeMap;

use api::DynamoComponentDeployment;
use api::labels;
use api::v1beta1::ComponentType;
use kube::ResourceExt;

use super::DISCOVERY_KUBERNETES;

/// The identities a DCD's children are named and labelled with, resolved once.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Identity {
    /// The DCD's name (also the Deployment's and the selector label's value).
    pub name: String,
    pub namespace: Option<String>,
    /// The stable component name (`spec.name`).
    pub component: String,
    /// The component type rendered into labels, env and selectors (`worker` for DCDs that keep
    /// alpha-era worker selectors; empty when the type is unset).
    pub component_type: String,
    pub spec_type: Option<ComponentType>,
    /// The parent DynamoGraphDeployment's name, if known.
    pub graph: Option<String>,
    pub dynamo_namespace: String,
    pub worker_hash: Option<String>,
    /// Annotations rendered onto children (pod template annotations, filtered).
    pub annotations: BTreeMap<String, String>,
    /// Labels rendered onto children (DCD labels, pod template labels, identities).
    pub labels: BTreeMap<String, String>,
    pub nodes: i32,
    /// The operator's discovery backend, for DCDs without the discovery annotation.
    pub default_discovery: DiscoveryBackend,
}

impl Identity {
    pub(crate) fn resolve(
        dcd: &DynamoComponentDeployment,
        default_discovery: DiscoveryBackend,
    ) -> Identity {
        let own = dcd.metadata.labels.clone().unwrap_or_default();
        let component = &dcd.spec.component;
        let spec_type = component.r#type;
        let graph = dcd.graph_name();
        let namespace = dcd.namespace();
        let dynamo_namespace = own
            .get(labels::DYNAMO_NAMESPACE)
            .filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or_else(|| {
                labels::dynamo_namespace(
                    component.global_dynamo_namespace,
                    namespace.as_deref().unwrap_or_default(),
                    graph.as_deref().unwrap_or(&dcd.name_any()),
                )
            });
        let template_labels = pod_template_labels(dcd);
        let worker_hash = spec_type
            .filter(|t| t.is_worker())
            .and_then(|_| {
                own.get(labels::DYNAMO_WORKER_HASH)
                    .or_else(|| template_labels.get(labels::DYNAMO_WORKER_HASH))
            })
            .filter(|v| !v.is_empty())
            .cloned();
        let component_type = workload_component_type(&own, spec_type);

        let mut kube_labels = own.clone();
        kube_labels.extend(template_labels);
        // As upstream's `GetDCDKubeLabels` / `GetDCDKubeAnnotations`: on the workload, its pods
        // and the component Service (the model Service selects the pods by the hash).
        let base_model = labels::base_model(component.model_ref.as_ref());
        if let Some((hash, _)) = &base_model {
            kube_labels.insert(labels::DYNAMO_BASE_MODEL_HASH.into(), hash.clone());
        }
        // Prefill and decode components carry their v1alpha1 sub-component type (over any
        // label of that name), as upstream's alpha view of the DCD gives it.
        if let Some(sub) = spec_type.and_then(ComponentType::sub_component_type) {
            kube_labels.insert(labels::DYNAMO_SUB_COMPONENT_TYPE.into(), sub.into());
        }
        kube_labels.insert(labels::DYNAMO_COMPONENT.into(), component.name.clone());
        kube_labels.insert(labels::DYNAMO_NAMESPACE.into(), dynamo_namespace.clone());
        for key in [
            labels::DYNAMO_COMPONENT,
            labels::DYNAMO_NAMESPACE,
            labels::DYNAMO_GRAPH_DEPLOYMENT_NAME,
            labels::DYNAMO_WORKER_HASH,
            labels::DYNAMO_COMPONENT_CLASS,
        ] {
            if let Some(v) = own.get(key).filter(|v| !v.is_empty()) {
                kube_labels.insert(key.into(), v.clone());
            }
        }

        let own_annotations = dcd.metadata.annotations.clone().unwrap_or_default();
        let mut annotations = pod_template_annotations(dcd);
        if let Some((_, name)) = base_model {
            annotations.insert(labels::DYNAMO_BASE_MODEL.into(), name);
        }
        annotations.remove(labels::DYNAMO_OPERATOR_ORIGIN_VERSION);
        for key in [
            labels::TOPOLOGY_LABEL_KEY,
            labels::TOPOLOGY_CLUSTER_TOPOLOGY_NAME,
        ] {
            annotations.remove(key);
            if let Some(v) = own_annotations.get(key).filter(|v| !v.is_empty()) {
                annotations.insert(key.into(), v.clone());
            }
        }

        Identity {
            name: dcd.name_any(),
            namespace,
            component: component.name.clone(),
            component_type,
            spec_type,
            graph,
            dynamo_namespace,
            worker_hash,
            annotations,
            labels: kube_labels,
            nodes: component.number_of_nodes(),
            default_discovery,
        }
    }

    /// The discovery backend: the `nvidia.com/dynamo-discovery-backend` annotation, else the
    /// operator default (`kubernetes` unless configured).
    fn discovery_backend(&self) -> &str {
        self.annotations
            .get(labels::DYNAMO_DISCOVERY_BACKEND)
            .map(String::as_str)
            .unwrap_or(self.default_discovery.as_str())
    }

    /// Kubernetes discovery is on: every component gets a Service and discovery labels.
    pub(crate) fn kube_discovery(&self) -> bool {
        self.discovery_backend() == DISCOVERY_KUBERNETES
    }

    /// The Dynamo runtime namespace of the pods: worker components append their worker hash.
    pub(crate) fn runtime_namespace(&self) -> String {
        match (
            &self.worker_hash,
            self.spec_type.is_some_and(|t| t.is_worker()),
        ) {
            (Some(hash), true) => format!("{}-{hash}", self.dynamo_namespace),
            _ => self.dynamo_namespace.clone(),
        }
    }

    pub(super) fn is_frontend(&self) -> bool {
        self.spec_type == Some(ComponentType::Frontend)
    }
}

/// `worker` for a prefill/decode DCD that the graph labelled with alpha-era worker selectors
/// (graph and worker-hash labels, component-type `worker`, matching or absent sub-type);
/// otherwise the spec's type.
fn workload_component_type(
    own: &BTreeMap<String, String>,
    spec_type: Option<ComponentType>,
) -> String {
    let spec = spec_type.map(ComponentType::as_str).unwrap_or_default();
    let legacy = own
        .get(labels::DYNAMO_GRAPH_DEPLOYMENT_NAME)
        .is_some_and(|v| !v.is_empty())
        && own
            .get(labels::DYNAMO_WORKER_HASH)
            .is_some_and(|v| !v.is_empty())
        && own.get(labels::DYNAMO_COMPONENT_TYPE).map(String::as_str) == Some("worker")
        && matches!(
            spec_type,
            Some(ComponentType::Prefill | ComponentType::Decode)
        )
        && own
            .get(labels::DYNAMO_SUB_COMPONENT_TYPE)
            .is_none_or(|sub| sub.is_empty() || sub == spec);
    if legacy { "worker".into() } else { spec.into() }
}

fn pod_template_labels(dcd: &DynamoComponentDeployment) -> BTreeMap<String, String> {
    dcd.spec
        .component
        .pod_template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

fn pod_template_annotations(dcd: &DynamoComponentDeployment) -> BTreeMap<String, String> {
    dcd.spec
        .component
        .pod_template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default()
}
