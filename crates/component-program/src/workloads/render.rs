//! [`render`]: the desired DCDs of a graph (pure).

use std::collections::BTreeMap;

use api::labels;
use api::{
    DynamoComponentDeployment, DynamoComponentDeploymentSharedSpec, DynamoComponentDeploymentSpec,
    DynamoGraphDeployment,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use reconcilers::checkpoints::CheckpointInfos;
use reconcilers::naming;
use reconcilers::restart::RestartStamps;
use reconcilers::rollout::WorkerGeneration;

use super::checkpoint::checkpoint_startup;
use super::pod_template::pod_template;
use super::{CHILDREN, Error};

/// The desired DCDs of `dgd` at worker `generation`. `live` are the graph's DCDs by name (their
/// `nvidia.com/restartAt` values are kept where `restart` does not set one); during a rolling
/// update worker components get the replicas `generation` steps them to (also with a scaling
/// adapter: the rollout owns the count until it completes); components whose checkpoint startup
/// policy is `WaitForCheckpoint` get zero replicas until `checkpoints` says their checkpoint is
/// ready.
pub fn render(
    dgd: &DynamoGraphDeployment,
    generation: &WorkerGeneration,
    restart: Option<&RestartStamps>,
    checkpoints: &CheckpointInfos,
    live: &BTreeMap<String, DynamoComponentDeployment>,
) -> Result<Vec<DynamoComponentDeployment>, Error> {
    let owner = owner_reference(dgd)?;
    dgd.spec
        .components
        .iter()
        .map(|component| {
            let name = naming::dcd_name(dgd, component, Some(&generation.target));
            let live_restart = live
                .get(&name)
                .and_then(|d| template_annotation(&d.spec.component, labels::RESTART_AT));
            let restart_at = restart
                .and_then(|r| r.value_for(&component.name))
                .map(str::to_string)
                .or(live_restart);
            let mut dcd = render_one(dgd, component, name, &generation.target, restart_at, &owner);
            if let Some(replicas) = generation.replicas.get(&component.name) {
                // During a rolling update the rollout steps the new generation's count.
                dcd.spec.component.replicas = Some(*replicas);
            }
            if let Some(info) = checkpoints.get(&component.name) {
                checkpoint_startup(&mut dcd.spec.component, info);
            }
            CHILDREN.stamp(&mut dcd).map_err(|source| Error::Convert {
                name: dcd.name_any(),
                source,
            })?;
            Ok(dcd)
        })
        .collect()
}

fn owner_reference(dgd: &DynamoGraphDeployment) -> Result<OwnerReference, Error> {
    dgd.controller_owner_ref(&())
        .filter(|o| !o.uid.is_empty())
        .ok_or_else(|| Error::NoUid(dgd.name_any()))
}

pub(super) fn template_annotation(
    spec: &DynamoComponentDeploymentSharedSpec,
    key: &str,
) -> Option<String> {
    spec.pod_template
        .as_ref()?
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(key)
        .cloned()
}

/// The DCD of `component` named `name`: the component spec with the graph's backend framework and
/// the pod template upstream's DCD generation writes ([`pod_template`]), labelled
/// ([`dcd_labels`]) and controlled by the graph (`owner`).
fn render_one(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    name: String,
    worker_hash: &str,
    restart_at: Option<String>,
    owner: &OwnerReference,
) -> DynamoComponentDeployment {
    let worker = worker_labels(dgd, component, worker_hash);
    let mut spec = component.clone();
    let template = spec
        .pod_template
        .get_or_insert_with(PodTemplateSpec::default);
    pod_template(template, dgd, component, &worker, restart_at);
    if component.scaling_adapter.is_some() {
        spec.replicas = None;
    }

    DynamoComponentDeployment {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: dgd.namespace(),
            labels: Some(dcd_labels(dgd, component, &worker)),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        spec: DynamoComponentDeploymentSpec {
            backend_framework: dgd.spec.backend_framework,
            component: spec,
        },
        status: None,
    }
}

/// Metadata labels: the pod template's, then ours (graph name, component, component type,
/// Dynamo namespace, and the `worker` labels).
fn dcd_labels(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    worker: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let dgd_name = dgd.name_any();
    let k8s_ns = dgd.namespace().unwrap_or_default();
    let mut dcd_labels: BTreeMap<String, String> = component
        .pod_template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    dcd_labels.extend(naming::component_labels(&dgd_name, component));
    dcd_labels.insert(
        labels::DYNAMO_NAMESPACE.to_string(),
        naming::dynamo_namespace(component.global_dynamo_namespace, &k8s_ns, &dgd_name),
    );
    dcd_labels.extend(worker.clone());
    dcd_labels
}

/// The labels a worker component's DCD and pod template carry: the worker hash and, in a graph
/// with an EPP component, the worker component class. Empty for other components.
fn worker_labels(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    worker_hash: &str,
) -> BTreeMap<String, String> {
    let worker = naming::is_worker(component.r#type);
    let worker_class = worker && dgd.spec.epp_component().is_some();
    let mut labels = BTreeMap::new();
    if worker {
        labels.insert(
            labels::DYNAMO_WORKER_HASH.to_string(),
            worker_hash.to_string(),
        );
    }
    if worker_class {
        labels.insert(
            labels::DYNAMO_COMPONENT_CLASS.to_string(),
            labels::COMPONENT_CLASS_WORKER.to_string(),
        );
    }
    labels
}
