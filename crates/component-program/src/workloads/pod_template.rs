//! The pod template of a component's DCD, as upstream's DCD generation writes it.

use std::collections::BTreeMap;

use api::labels;
use api::v1beta1::MAIN_CONTAINER_NAME;
use api::{ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::PROPAGATED_ANNOTATIONS;

/// The pod template of a component's DCD (`template`, the component's own): the graph's env
/// ([`graph_env`]), its annotations ([`annotations`]) and `labels` where the template does not
/// set them, the `worker` labels, and the planner service account on planners. Maps left empty
/// are dropped.
pub(super) fn pod_template(
    template: &mut PodTemplateSpec,
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    worker: &BTreeMap<String, String>,
    restart_at: Option<String>,
) {
    if !dgd.spec.env.is_empty() {
        graph_env(template, &dgd.spec.env, component.dynamo_sidecar.as_deref());
    }
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    annotations(
        meta.annotations.get_or_insert_with(BTreeMap::new),
        dgd,
        component,
        restart_at,
    );
    let template_labels = meta.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in &dgd.spec.labels {
        template_labels
            .entry(k.clone())
            .or_insert_with(|| v.clone());
    }
    template_labels.extend(worker.clone());
    if meta.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.annotations = None;
    }
    if meta.labels.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.labels = None;
    }
    if component.r#type == Some(ComponentType::Planner) {
        template
            .spec
            .get_or_insert_with(PodSpec::default)
            .service_account_name = Some(labels::PLANNER_SERVICE_ACCOUNT.to_string());
    }
}

/// The graph env (`env`) before the `main` container's own, and before the runtime sidecar's
/// (the `sidecar` init container) where the component names one.
fn graph_env(template: &mut PodTemplateSpec, env: &[EnvVar], sidecar: Option<&str>) {
    let main = main_container(template);
    main.env = Some(merge_env(env, main.env.as_deref().unwrap_or_default()));
    // The runtime sidecar, where the component names one, carries it too.
    let runtime = sidecar.and_then(|name| {
        template
            .spec
            .as_mut()?
            .init_containers
            .as_mut()?
            .iter_mut()
            .find(|c| c.name == name)
    });
    if let Some(runtime) = runtime {
        runtime.env = Some(merge_env(env, runtime.env.as_deref().unwrap_or_default()));
    }
}

/// The pod template's annotations: Istio injection off on epp pods, then the graph's
/// `annotations` and its [`PROPAGATED_ANNOTATIONS`] where the template does not set them, and
/// `nvidia.com/restartAt` when a restart asks for it (`restart_at`).
fn annotations(
    annotations: &mut BTreeMap<String, String>,
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    restart_at: Option<String>,
) {
    if component.r#type == Some(ComponentType::Epp) {
        // Before the graph's annotations: only the component's own value overrides it.
        annotations
            .entry(labels::ISTIO_SIDECAR_INJECT.to_string())
            .or_insert_with(|| "false".to_string());
    }
    for (k, v) in &dgd.spec.annotations {
        annotations.entry(k.clone()).or_insert_with(|| v.clone());
    }
    if let Some(graph_annotations) = dgd.metadata.annotations.as_ref() {
        for key in PROPAGATED_ANNOTATIONS {
            if let Some(v) = graph_annotations.get(key) {
                annotations
                    .entry(key.to_string())
                    .or_insert_with(|| v.clone());
            }
        }
    }
    if let Some(at) = restart_at {
        annotations.insert(labels::RESTART_AT.to_string(), at);
    }
}

/// The `main` container, created if the template has none.
fn main_container(template: &mut PodTemplateSpec) -> &mut Container {
    let spec = template.spec.get_or_insert_with(PodSpec::default);
    let index = match spec
        .containers
        .iter()
        .position(|c| c.name == MAIN_CONTAINER_NAME)
    {
        Some(i) => i,
        None => {
            spec.containers.push(Container {
                name: MAIN_CONTAINER_NAME.to_string(),
                ..Default::default()
            });
            spec.containers.len() - 1
        }
    };
    &mut spec.containers[index]
}

/// The graph env first (in its order, an entry replaced by the component's of the same name),
/// then the component's other entries.
pub fn merge_env(graph: &[EnvVar], component: &[EnvVar]) -> Vec<EnvVar> {
    let mut merged: Vec<EnvVar> = graph
        .iter()
        .map(|g| {
            component
                .iter()
                .find(|c| c.name == g.name)
                .unwrap_or(g)
                .clone()
        })
        .collect();
    merged.extend(
        component
            .iter()
            .filter(|c| !graph.iter().any(|g| g.name == c.name))
            .cloned(),
    );
    merged
}
