//! The pod template of a DCD's workload: labels and annotations, and the pod both pathways
//! render ([`pod_render::pod_spec`]).

use api::DynamoComponentDeployment;
use api::labels;
use api::runtime_version::RuntimeVersion;
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use pod_render::{Backend, DEFAULT_SERVICE_ACCOUNT, Deployer, PodInput, Role};

use super::{DISCOVERY_KUBERNETES, Identity, Pods, ROLE_LABEL, non_empty};

/// The [`ROLE_LABEL`] value of a LeaderWorkerSet pod of `role` (none for single-node pods).
fn role_label(role: Role) -> Option<&'static str> {
    match role {
        Role::Main => None,
        Role::Leader => Some("leader"),
        Role::Worker => Some("worker"),
    }
}

/// The ServiceAccount component pods run as when neither the user, the planner/EPP defaults nor
/// Kubernetes discovery names one: of the namespace's ServiceAccounts labelled
/// `nvidia.com/dynamo-component-pod: "true"` (`labelled`, in any order), the first by name.
/// Upstream takes the first its cache lists, in no guaranteed order, so two labelled accounts
/// can make its pods flip between them; here the choice is stable. `None` (no labelled account):
/// `default`.
pub fn component_pod_account(labelled: &[ServiceAccount]) -> Option<String> {
    labelled
        .iter()
        .filter(|sa| {
            sa.labels()
                .get(labels::DYNAMO_COMPONENT_POD)
                .map(String::as_str)
                == Some("true")
        })
        .map(ResourceExt::name_any)
        .min()
}

/// The pod template of `role`: labels, annotations, and the pod spec with operator defaults
/// under the user's values.
pub(super) fn pod_template(
    dcd: &DynamoComponentDeployment,
    id: &Identity,
    role: Role,
    pods: &Pods<'_>,
) -> PodTemplateSpec {
    let mut labels = id.labels.clone();
    if id
        .annotations
        .get(labels::ENABLE_METRICS)
        .map(String::as_str)
        != Some("false")
    {
        labels.insert(labels::METRICS_ENABLED.into(), "true".into());
    }
    if let Some(graph) = &id.graph {
        labels.insert(labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.into(), graph.clone());
    }
    if !id.component_type.is_empty() {
        labels.insert(
            labels::DYNAMO_COMPONENT_TYPE.into(),
            id.component_type.clone(),
        );
    }
    labels.insert(labels::DYNAMO_COMPONENT.into(), id.component.clone());
    labels.insert(labels::DYNAMO_NAMESPACE.into(), id.dynamo_namespace.clone());
    labels.insert(labels::SELECTOR.into(), id.name.clone());
    if id.kube_discovery() {
        labels.insert(
            labels::DYNAMO_DISCOVERY_BACKEND.into(),
            DISCOVERY_KUBERNETES.into(),
        );
        labels.insert(labels::DYNAMO_DISCOVERY_ENABLED.into(), "true".into());
    }
    if let Some(role) = role_label(role) {
        labels.insert(ROLE_LABEL.into(), role.into());
    }
    let mut annotations = id.annotations.clone();
    if let Some(checkpoint) = pods.checkpoint {
        pod_render::restore::metadata(&mut labels, &mut annotations, checkpoint);
    }
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: non_empty(labels),
            annotations: non_empty(annotations),
            ..Default::default()
        }),
        spec: Some(pod_spec(dcd, id, role, pods)),
    }
}

/// The pod both pathways render, for `role` on a LeaderWorkerSet (the multinode launch wiring),
/// running as the namespace's labelled ServiceAccount, else `default`, when nothing named one
/// (upstream's component pathway; the Grove pathway leaves it unnamed, as upstream, and the
/// kubelet uses `default`).
fn pod_spec(
    dcd: &DynamoComponentDeployment,
    id: &Identity,
    role: Role,
    pods: &Pods<'_>,
) -> PodSpec {
    let mut spec = pod_render::pod_spec(&PodInput {
        graph: id.graph.as_deref(),
        namespace: id.namespace.as_deref().unwrap_or_default(),
        component: &dcd.spec.component,
        component_type: &id.component_type,
        dynamo_namespace: &id.dynamo_namespace,
        worker_hash: id.worker_hash.as_deref(),
        annotations: &id.annotations,
        kube_discovery: id.kube_discovery(),
        backend: Backend::detect(&dcd.spec.component, dcd.spec.backend_framework)
            .unwrap_or(Backend::None),
        graph_env: &[],
        kv_transfer: None,
        pull_secrets: pods.pull_secrets,
        infrastructure: pods.infrastructure,
        runtime_version: RuntimeVersion::of_component(&dcd.spec.component),
        checkpoint: pods.checkpoint,
        role,
        deployer: Deployer::LeaderWorkerSet,
    });
    if spec
        .service_account_name
        .as_deref()
        .is_none_or(str::is_empty)
    {
        spec.service_account_name =
            Some(pods.account.unwrap_or(DEFAULT_SERVICE_ACCOUNT).to_string());
    }
    spec
}
