//! The capture pod of an automatic checkpoint: the component's own pod, rendered by
//! `pod-render` as the Grove pathway renders it (operator defaults, the graph's env, the
//! discovery ServiceAccount, `/dev/shm`, the compilation cache, ...), for the component without
//! its checkpoint, GPU memory service, failover and `frontendSidecar` settings (the capture sets
//! those up itself), then:
//! - only the target container is kept (`targetContainerName`, default `main`);
//! - `restartPolicy: Never`;
//! - metadata: the component pod template's labels and annotations, and
//!   `nvidia.com/dynamo-component: <component>`;
//! - `checkpoint.job.podTemplate` over it, as upstream merges it: its labels and annotations win
//!   key by key; its pod-level fields replace (objects merge), its volumes and init containers
//!   replace or join by name, and each of its containers merges over the rendered container of
//!   its name (fields win, env merges by name, a probe replaces the probe) or joins the pod.

use std::collections::BTreeMap;

use api::DynamoGraphDeployment;
use api::labels;
use api::v1beta1::{ComponentCheckpointConfig, DynamoComponentDeploymentSharedSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use pod_render::{Backend, Infrastructure, PodInput};

use crate::discovery::{DiscoveryBackend, kubernetes_discovery_enabled};
use crate::error::{Error, Result};
use crate::{naming, rollout};

/// What the capture pod is rendered with besides the graph and the component.
pub(crate) struct Settings<'a> {
    pub discovery: DiscoveryBackend,
    pub infrastructure: &'a Infrastructure,
    pub backend: Backend,
    pub target: &'a str,
}

/// The capture pod template of `component` (see the module docs).
pub(crate) fn template(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    cfg: &ComponentCheckpointConfig,
    settings: &Settings<'_>,
) -> Result<PodTemplateSpec> {
    let mut spec = pod(dgd, component, settings);
    spec.containers.retain(|c| c.name == settings.target);
    if spec.containers.is_empty() {
        return Err(Error::InvalidSpec(format!(
            "component {}: checkpoint target container {:?} not found",
            component.name, settings.target
        )));
    }
    spec.restart_policy = Some("Never".into());
    let own = component
        .pod_template
        .as_ref()
        .and_then(|t| t.metadata.as_ref());
    let mut pod_labels = own.and_then(|m| m.labels.clone()).unwrap_or_default();
    let mut annotations = own.and_then(|m| m.annotations.clone()).unwrap_or_default();
    pod_labels.insert(labels::DYNAMO_COMPONENT.into(), component.name.clone());
    let mut template = PodTemplateSpec {
        metadata: None,
        spec: Some(spec),
    };
    if let Some(overlay) = cfg.job.as_ref().and_then(|j| j.pod_template.as_ref()) {
        if let Some(meta) = &overlay.metadata {
            pod_labels.extend(meta.labels.clone().unwrap_or_default());
            annotations.extend(meta.annotations.clone().unwrap_or_default());
        }
        if let (Some(spec), Some(over)) = (template.spec.as_mut(), overlay.spec.as_ref()) {
            merge_spec(spec, over).map_err(|e| {
                Error::InvalidSpec(format!(
                    "component {}: checkpoint.job.podTemplate cannot be merged: {e}",
                    component.name
                ))
            })?;
        }
    }
    template.metadata = Some(ObjectMeta {
        labels: Some(pod_labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..Default::default()
    });
    Ok(template)
}

/// The component's pod as the Grove pathway renders it, for the component stripped as the
/// module docs say.
fn pod(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    settings: &Settings<'_>,
) -> PodSpec {
    let mut stripped = component.clone();
    if let Some(experimental) = stripped.experimental.as_mut() {
        experimental.checkpoint = None;
        experimental.gpu_memory_service = None;
        experimental.failover = None;
    }
    if stripped
        .experimental
        .as_ref()
        .is_some_and(|e| e.grove.is_none())
    {
        stripped.experimental = None;
    }
    stripped.frontend_sidecar = None;
    let graph = dgd.name_any();
    let namespace = dgd.namespace().unwrap_or_default();
    let dynamo_namespace =
        naming::dynamo_namespace(component.global_dynamo_namespace, &namespace, &graph);
    let worker_hash = naming::is_worker(component.r#type).then(|| rollout::worker_hash(dgd));
    // The discovery mode the pod-level defaults read: the component's annotation, else the
    // graph's.
    let mut annotations: BTreeMap<String, String> = component
        .pod_template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    if let Some(mode) = dgd.annotations().get(labels::DYNAMO_KUBE_DISCOVERY_MODE) {
        annotations
            .entry(labels::DYNAMO_KUBE_DISCOVERY_MODE.into())
            .or_insert_with(|| mode.clone());
    }
    pod_render::pod_spec(&PodInput {
        graph: Some(&graph),
        namespace: &namespace,
        component: &stripped,
        component_type: component
            .r#type
            .map(api::ComponentType::as_str)
            .unwrap_or_default(),
        dynamo_namespace: &dynamo_namespace,
        worker_hash: worker_hash.as_deref(),
        annotations: &annotations,
        kube_discovery: kubernetes_discovery_enabled(settings.discovery, dgd),
        backend: settings.backend,
        graph_env: &dgd.spec.env,
        kv_transfer: None,
        pull_secrets: &pod_render::PullSecrets::default(),
        infrastructure: settings.infrastructure,
        runtime_version: api::runtime_version::RuntimeVersion::of_component(component),
        checkpoint: None,
        // The capture pod is one pod, whatever the component's layout.
        role: pod_render::Role::Main,
        deployer: pod_render::Deployer::LeaderWorkerSet,
    })
}

/// `over` merged into the rendered `spec` (see the module docs).
fn merge_spec(spec: &mut PodSpec, over: &PodSpec) -> std::result::Result<(), serde_json::Error> {
    let mut rest = over.clone();
    let containers = std::mem::take(&mut rest.containers);
    let init_containers = rest.init_containers.take().unwrap_or_default();
    let volumes = rest.volumes.take().unwrap_or_default();
    let rendered = std::mem::take(&mut spec.containers);
    let rendered_init = spec.init_containers.take().unwrap_or_default();
    let rendered_volumes = spec.volumes.take().unwrap_or_default();
    let mut merged = serde_json::to_value(&*spec)?;
    pod_render::merge::merge(&mut merged, &serde_json::to_value(&rest)?);
    *spec = serde_json::from_value(merged)?;
    spec.volumes = non_empty(by_name(rendered_volumes, volumes, |v: &Volume| {
        v.name.clone()
    }));
    spec.init_containers = non_empty(by_name(rendered_init, init_containers, |c: &Container| {
        c.name.clone()
    }));
    let mut out = rendered;
    for container in containers {
        match out
            .iter_mut()
            .find(|c| !container.name.is_empty() && c.name == container.name)
        {
            Some(existing) => {
                *existing = pod_render::merge::merge_container(existing.clone(), Some(&container));
            }
            None => out.push(container),
        }
    }
    spec.containers = out;
    Ok(())
}

/// `base` with each of `over` replacing the item of its name, or appended.
fn by_name<T>(mut base: Vec<T>, over: Vec<T>, name: impl Fn(&T) -> String) -> Vec<T> {
    for item in over {
        match base.iter().position(|b| name(b) == name(&item)) {
            Some(i) => base[i] = item,
            None => base.push(item),
        }
    }
    base
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}
