//! Rendering: a DynamoComponentDeployment to the objects it wants. Pure: no client, no I/O, same
//! input ⇒ same output.
//!
//! The pod spec is the one both pathways render ([`pod_render::pod_spec`]: operator defaults
//! for the component type, the user's `main` container over them, pod-level defaults under the
//! user's pod spec, `/dev/shm`); this module adds the pod template's labels and annotations,
//! the workload around it and the Service. See the crate docs for the complete list.

use std::collections::BTreeMap;

use api::DynamoComponentDeployment;
use api::deployment_strategy::DeploymentStrategy as Strategy;
use api::labels;
use api::runtime_version::RuntimeVersion;
use api::v1beta1::ComponentType;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Container, PodSpec, PodTemplateSpec, Service, ServiceAccount, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use pod_render::restore::Checkpoint;
use pod_render::{
    Backend, DEFAULT_SERVICE_ACCOUNT, Deployer, HTTP_PORT, HTTP_PORT_NAME, Infrastructure,
    PodInput, PullSecrets, Role, SYSTEM_PORT, SYSTEM_PORT_NAME, epp,
};
use serde_json::{Value, json};

// --- names and values that are part of the compatibility contract ---------------------------

/// Rolling-update `maxSurge` and `maxUnavailable` unless the annotations set them.
pub use api::deployment_strategy::DEFAULT_ROLLING_UPDATE;
/// Resource name of NVIDIA GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Label (controller, LWS pods): `leader` or `worker`; multinode Services select `leader`.
pub const ROLE_LABEL: &str = "role";
/// Discovery backend value that enables Kubernetes discovery (the operator default).
pub const DISCOVERY_KUBERNETES: &str = "kubernetes";
/// Discovery backend value that selects etcd discovery.
pub const DISCOVERY_ETCD: &str = "etcd";

/// The `ApiResource` of `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
pub use reconcilers::optional::leader_worker_set as leader_worker_set_resource;

// --- what render returns ---------------------------------------------------------------------

/// Everything a DynamoComponentDeployment wants, rendered.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The workload: a Deployment, or a LeaderWorkerSet for multinode components.
    pub workload: Workload,
    /// The component Service; `None` when the component wants none (a Service this DCD owns is
    /// then deleted).
    pub service: Option<Service>,
}

/// The workload of a component.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Single-node components: one Deployment named like the DCD.
    Deployment(Box<Deployment>),
    /// Multinode components: one `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet named
    /// `<dcd>-0` (there are no typed client bindings for it, hence the dynamic object).
    LeaderWorkerSet(Box<DynamicObject>),
}

/// The [`ROLE_LABEL`] value of a LeaderWorkerSet pod of `role` (none for single-node pods).
fn role_label(role: Role) -> Option<&'static str> {
    match role {
        Role::Main => None,
        Role::Leader => Some("leader"),
        Role::Worker => Some("worker"),
    }
}

/// Render the objects `dcd` wants, with no operator infrastructure settings, no labelled
/// ServiceAccount and no discovered image pull secrets in the namespace. Pure and
/// deterministic.
pub fn render(dcd: &DynamoComponentDeployment) -> Rendered {
    render_with(
        dcd,
        &Pods {
            infrastructure: &Infrastructure::default(),
            account: None,
            pull_secrets: &PullSecrets::default(),
            checkpoint: None,
        },
    )
}

/// Render the objects `dcd` wants, its pods with what the cluster and the operator add
/// ([`Pods`]). Pure and deterministic.
pub fn render_with(dcd: &DynamoComponentDeployment, pods: &Pods<'_>) -> Rendered {
    let identity = Identity::resolve(dcd);
    let pods = *pods;
    let workload = if identity.nodes > 1 {
        Workload::LeaderWorkerSet(Box::new(leader_worker_set(dcd, &identity, &pods)))
    } else {
        Workload::Deployment(Box::new(deployment(dcd, &identity, &pods)))
    };
    Rendered {
        workload,
        service: service(dcd, &identity),
    }
}

/// The replicas this controller applies to the workload: the DCD's `spec.replicas` whenever it
/// is set (whoever set it: the graph, or the scaling adapter's controller for a component with
/// `scalingAdapter`), else `None`, leaving `spec.replicas` out of the applied configuration.
/// See [`held_replicas`] for an unset count of a component whose adapter has not written it
/// yet.
pub fn applied_replicas(dcd: &DynamoComponentDeployment) -> Option<i32> {
    dcd.spec.component.replicas
}

/// The replicas to apply when [`applied_replicas`] is `None` but the component has a
/// `scalingAdapter`: the live workload's current `spec.replicas` (`live`), so the count holds
/// while ownership passes from the graph to the adapter. (The graph stops applying the DCD's
/// replicas when the adapter is enabled, before the adapter's controller writes them; leaving
/// the field out would let server-side apply drop it and the API server default it to 1.) With
/// no live workload, or without an adapter, the field stays out (`None`).
pub fn held_replicas(dcd: &DynamoComponentDeployment, live: Option<i32>) -> Option<i32> {
    let component = &dcd.spec.component;
    match component.replicas {
        Some(replicas) => Some(replicas),
        None if component.scaling_adapter.is_some() => live,
        None => None,
    }
}

/// Set the workload's `spec.replicas` to `replicas` (see [`held_replicas`]); `None` leaves it
/// as rendered.
pub fn hold_replicas(workload: &mut Workload, replicas: Option<i32>) {
    let Some(replicas) = replicas else { return };
    match workload {
        Workload::Deployment(d) => {
            if let Some(spec) = d.spec.as_mut() {
                spec.replicas = Some(replicas);
            }
        }
        Workload::LeaderWorkerSet(lws) => {
            if let Some(spec) = lws.data.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("replicas".into(), json!(replicas));
            }
        }
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

/// What every pod template of a DCD is rendered with besides the DCD.
#[derive(Clone, Copy, Debug)]
pub struct Pods<'a> {
    /// The operator's infrastructure endpoints (env of every Dynamo container).
    pub infrastructure: &'a Infrastructure,
    /// The namespace's labelled ServiceAccount ([`component_pod_account`]): pods run as it
    /// when nothing else names their ServiceAccount (`default` when `None`).
    pub account: Option<&'a str>,
    /// The namespace's image pull secrets by registry host (`reconcilers::pull_secrets`;
    /// empty with discovery off).
    pub pull_secrets: &'a PullSecrets,
    /// The component's checkpoint, as resolved (`reconcilers::checkpoints::resolve_component`;
    /// see `pod_render::restore`).
    pub checkpoint: Option<&'a Checkpoint>,
}

/// Name of the component Service: the DCD name, lowercased, dots as dashes.
pub fn service_name(dcd: &DynamoComponentDeployment) -> String {
    dcd.name_any().replace('.', "-").to_lowercase()
}

/// Name of the LeaderWorkerSet of a multinode DCD: `<dcd>-0`.
pub fn leader_worker_set_name(dcd: &DynamoComponentDeployment) -> String {
    format!("{}-0", dcd.name_any())
}

// --- identity: what the DCD says about itself -----------------------------------------------

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
}

impl Identity {
    pub(crate) fn resolve(dcd: &DynamoComponentDeployment) -> Identity {
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
        }
    }

    /// The discovery backend: the `nvidia.com/dynamo-discovery-backend` annotation, else the
    /// operator default (`kubernetes`).
    fn discovery_backend(&self) -> &str {
        self.annotations
            .get(labels::DYNAMO_DISCOVERY_BACKEND)
            .map(String::as_str)
            .unwrap_or(DISCOVERY_KUBERNETES)
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

    fn is_frontend(&self) -> bool {
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

fn owner_references(dcd: &DynamoComponentDeployment) -> Option<Vec<OwnerReference>> {
    dcd.controller_owner_ref(&()).map(|o| vec![o])
}

fn non_empty<K: Ord, V>(map: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!map.is_empty()).then_some(map)
}

// --- workloads -------------------------------------------------------------------------------

fn deployment(dcd: &DynamoComponentDeployment, id: &Identity, pods: &Pods<'_>) -> Deployment {
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

fn leader_worker_set(
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

// --- the pod ---------------------------------------------------------------------------------

/// The pod template of `role`: labels, annotations, and the pod spec with operator defaults
/// under the user's values.
fn pod_template(
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

// --- the Service ---------------------------------------------------------------------------

fn service(dcd: &DynamoComponentDeployment, id: &Identity) -> Option<Service> {
    let discovery = id.kube_discovery();
    if !(discovery || id.is_frontend()) {
        return None;
    }
    let port = match id.component_type.as_str() {
        "frontend" => ServicePort {
            name: Some(HTTP_PORT_NAME.into()),
            port: HTTP_PORT,
            target_port: Some(IntOrString::String(HTTP_PORT_NAME.into())),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
        "epp" => ServicePort {
            name: Some(epp::GRPC_PORT_NAME.into()),
            port: epp::GRPC_PORT,
            target_port: Some(IntOrString::Int(epp::GRPC_PORT)),
            protocol: Some("TCP".into()),
            app_protocol: Some("http2".into()),
            ..Default::default()
        },
        _ => ServicePort {
            name: Some(SYSTEM_PORT_NAME.into()),
            port: SYSTEM_PORT,
            target_port: Some(IntOrString::String(SYSTEM_PORT_NAME.into())),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
    };
    let mut labels = id.labels.clone();
    if discovery {
        labels.insert(
            labels::DYNAMO_DISCOVERY_BACKEND.into(),
            DISCOVERY_KUBERNETES.into(),
        );
        labels.insert(labels::DYNAMO_DISCOVERY_ENABLED.into(), "true".into());
    }
    let mut selector = BTreeMap::from([
        (
            labels::DYNAMO_COMPONENT_TYPE.to_string(),
            id.component_type.clone(),
        ),
        (
            labels::DYNAMO_NAMESPACE.to_string(),
            id.dynamo_namespace.clone(),
        ),
        (labels::DYNAMO_COMPONENT.to_string(), id.component.clone()),
    ]);
    if id.nodes > 1 {
        selector.insert(ROLE_LABEL.into(), "leader".into());
    }
    Some(Service {
        metadata: ObjectMeta {
            name: Some(service_name(dcd)),
            namespace: id.namespace.clone(),
            labels: non_empty(labels),
            annotations: non_empty(id.annotations.clone()),
            owner_references: owner_references(dcd),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![port]),
            ..Default::default()
        }),
        status: None,
    })
}

// --- GPUs ------------------------------------------------------------------------------------

/// GPUs (`nvidia.com/gpu`, limits else requests) a container asks for.
pub(crate) fn container_gpus(container: &Container) -> i64 {
    let resources = container.resources.as_ref();
    let get = |m: Option<&BTreeMap<String, Quantity>>| {
        m.and_then(|m| m.get(GPU_RESOURCE))
            .and_then(|q| q.0.trim().parse::<i64>().ok())
    };
    get(resources.and_then(|r| r.limits.as_ref()))
        .or_else(|| get(resources.and_then(|r| r.requests.as_ref())))
        .unwrap_or(0)
}

/// GPUs of a pod: every container's, plus `claimed` (main's GPUs) once when the pod shares them
/// through the GPU memory service's claim (they left the containers' resources).
pub(crate) fn pod_gpus(spec: Option<&PodSpec>, claimed: i64) -> i64 {
    spec.map(|s| {
        let shared = if pod_render::gms::shares_gpus(s) {
            claimed
        } else {
            0
        };
        s.containers.iter().map(container_gpus).sum::<i64>() + shared
    })
    .unwrap_or(0)
}

/// GPUs of one inference engine: the user's main container times the nodes of a replica.
pub(crate) fn engine_gpus(dcd: &DynamoComponentDeployment) -> i64 {
    let component = &dcd.spec.component;
    component.main_container().map(container_gpus).unwrap_or(0)
        * i64::from(component.number_of_nodes())
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
