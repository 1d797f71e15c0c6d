//! The component pathway's workloads: one DynamoComponentDeployment (DCD) per component.
//!
//! [`render`] builds the desired DCDs (pure); [`Workloads::reconcile`] converges them and
//! removes the ones no longer wanted.
//!
//! # What a DCD carries
//! - **Name** `<dgd>-<component, lowercased>`, plus `-<worker hash>` for worker components.
//! - **Labels**: the component pod template's labels, then graph name, component, component
//!   type, Dynamo namespace, and on workers the worker hash and, in a graph with an EPP
//!   component, `nvidia.com/dynamo-component-class: worker` (as upstream's DCD generation).
//! - **Spec**: the component spec with `backendFramework` from the graph, and on the pod
//!   template, as upstream: the graph's `env` prepended to the `main` container's env (component
//!   entries with the same name win; the `dynamoSidecar` init container's too), the graph's `annotations`/`labels` and its propagated
//!   metadata annotations (`nvidia.com/enable-metrics`, discovery settings, ...) added where the
//!   pod template does not set them, the worker hash label (and the worker component class in a
//!   graph with an EPP component) on workers, the planner service
//!   account on planners, and `nvidia.com/restartAt` when a restart asks for it (otherwise the
//!   live DCD's value is kept, so restarts are never undone).
//! - **Replicas**: the component's, except for components with a scaling adapter: then
//!   `spec.replicas` is left out of what this step applies, so the adapter's side owns it; and
//!   0 while a `WaitForCheckpoint` component's checkpoint is not Ready. During a rolling update
//!   a worker component's new generation gets the count the rollout steps it to
//!   ([`WorkerGeneration::replicas`]), with or without an adapter.
//! - **Checkpoint** (`experimental.checkpoint.enabled`): once the component's DynamoCheckpoint
//!   exists, the DCD names it (`checkpointRef`, `startupPolicy`; no `identity`, no `job`), so the
//!   DCD controller restores from exactly that one; an `Immediate` component's pod template
//!   carries the restore-candidate annotations (`pod_render::restore::metadata`).
//! - A controller owner reference to the graph (garbage collection deletes DCDs with it).
//!
//! # Writing only what changed
//! Each desired DCD is stamped with `nvidia.com/last-applied-hash`, a digest of the body this
//! step applies. A DCD is applied (server-side, field manager [`FIELD_MANAGER`], forced) only
//! when the live one carries a different digest or no longer holds a field we set (user drift);
//! the exact rule is `kit::child`'s. A converged graph therefore issues no write, however often
//! DCD status changes, and a field removed from the spec is removed from the DCD (server-side
//! apply drops fields the manager stops applying).
//!
//! # Removing DCDs
//! DCDs the graph controls (label `nvidia.com/dynamo-graph-deployment-name`, controller uid)
//! that are not desired are deleted with a uid precondition, except worker DCDs of a generation
//! the rollout retains (the old generations it steps down during a rolling update; their
//! replicas are the rollout's to write). DCDs controlled by
//! another object are never touched; one in the way of a desired name is an ownership conflict.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::labels;
use api::v1beta1::{CheckpointStartupPolicy, ComponentReplicaStatus, MAIN_CONTAINER_NAME};
use api::{
    ComponentType, DynamoComponentDeployment, DynamoComponentDeploymentSharedSpec,
    DynamoComponentDeploymentSpec, DynamoGraphDeployment, DynamoGraphDeploymentStatus,
};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kit::child::{Applier, Change, EnsureError, Ownership, is_controlled_by};
use kit::{Deleted, Outcome, Preconditions, Reader, ReaderExt, Selector, Writer, WriterExt};
use kube::{Resource, ResourceExt};
use reconcilers::checkpoints::{CheckpointInfo, CheckpointInfos};
use reconcilers::naming;
use reconcilers::restart::RestartStamps;
use reconcilers::rollout::WorkerGeneration;

/// Annotation: digest of the DCD body last applied.
pub use api::labels::LAST_APPLIED_HASH;
/// Field manager of the DCDs this step applies: the graph's.
pub use reconcilers::child::FIELD_MANAGER;
/// Failure reason of the workloads step (upstream's default failure reason).
pub const REASON_WORKLOADS_FAILED: &str = "failed_to_reconcile_the_resources";
/// Event: a DCD was created.
pub const EVENT_DCD_CREATED: &str = "DynamoComponentDeploymentCreated";
/// Event: a DCD was changed back to its desired state.
pub const EVENT_DCD_UPDATED: &str = "DynamoComponentDeploymentUpdated";
/// Event: a DCD no longer wanted was deleted.
pub const EVENT_DCD_DELETED: &str = "DynamoComponentDeploymentDeleted";

/// How DCDs are converged: applied under [`FIELD_MANAGER`], stamped with [`LAST_APPLIED_HASH`].
const CHILDREN: Applier = Applier::new(FIELD_MANAGER, LAST_APPLIED_HASH);

/// Graph metadata annotations copied onto every pod template that does not set them.
pub const PROPAGATED_ANNOTATIONS: [&str; 5] = [
    labels::ENABLE_METRICS,
    labels::DYNAMO_DISCOVERY_BACKEND,
    labels::DYNAMO_KUBE_DISCOVERY_MODE,
    labels::DYNAMO_OPERATOR_ORIGIN_VERSION,
    labels::VLLM_DISTRIBUTED_EXECUTOR_BACKEND,
];

/// Why the workloads step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing the graph's DCDs failed.
    #[error("list DynamoComponentDeployments: {0}")]
    List(#[source] kit::Error),
    /// Applying a DCD failed.
    #[error("apply DynamoComponentDeployment {name}: {source}")]
    Apply {
        /// The DCD.
        name: String,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// Deleting a DCD failed.
    #[error("delete DynamoComponentDeployment {name}: {source}")]
    Delete {
        /// The DCD.
        name: String,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// A DCD with a desired name is controlled by another object.
    #[error("DynamoComponentDeployment {name} {owner}; refusing to modify it")]
    OwnershipConflict {
        /// The DCD.
        name: String,
        /// Who controls it, as a phrase.
        owner: String,
    },
    /// A DCD could not be converted to or from its JSON form.
    #[error("convert DynamoComponentDeployment {name}: {source}")]
    Convert {
        /// The DCD.
        name: String,
        /// The conversion error.
        #[source]
        source: kit::Error,
    },
    /// The graph has no uid (it was never stored).
    #[error("DynamoGraphDeployment {0} has no uid")]
    NoUid(String),
}

/// Readiness of one desired DCD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// The DCD name.
    pub resource: String,
    /// The component it deploys.
    pub component: String,
    /// `None` when ready, else why not (`DynamoComponentDeployment::is_ready`).
    pub not_ready: Option<String>,
}

/// What the workloads step observed after converging.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Per-component replica status (from each DCD's `status.component`; during a rolling
    /// update the retained generation's backing names are added to `componentNames`).
    pub components: BTreeMap<String, ComponentReplicaStatus>,
    /// Readiness of every desired DCD, sorted by DCD name.
    pub readiness: Vec<Readiness>,
}

/// The workloads step.
pub struct Workloads {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl Workloads {
    /// A workloads step reading DCDs with `reader` and writing them with `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        Workloads { reader, writer }
    }

    /// Converge the DCDs of `dgd` at worker `generation`, stamping `restart`, holding components
    /// that wait for a checkpoint at zero replicas; mutation events go to `out`.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        generation: &WorkerGeneration,
        restart: Option<&RestartStamps>,
        checkpoints: &CheckpointInfos,
        out: &mut Outcome<DynamoGraphDeploymentStatus>,
    ) -> Result<Report, Error> {
        let ns = dgd.namespace();
        let selector = Selector::from_iter([(
            labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
            dgd.name_any(),
        )]);
        let listed: Vec<DynamoComponentDeployment> = self
            .reader
            .list(ns.as_deref(), &selector)
            .await
            .map_err(Error::List)?;
        let mut live: BTreeMap<String, DynamoComponentDeployment> =
            listed.into_iter().map(|d| (d.name_any(), d)).collect();
        let desired = render(dgd, generation, restart, checkpoints, &live)?;
        let desired_names: BTreeSet<String> = desired.iter().map(|d| d.name_any()).collect();

        let mut report = Report::default();
        for dcd in &desired {
            let name = dcd.name_any();
            let component = dcd.spec.component.name.clone();
            // The list selects by label; a DCD whose labels drifted still holds the name.
            let observed = match live.remove(&name) {
                Some(d) => Some(d),
                None => self
                    .reader
                    .get::<DynamoComponentDeployment>(ns.as_deref(), &name)
                    .await
                    .map_err(Error::List)?,
            };
            let current = self.ensure(dgd, dcd, observed, out).await?;
            if let Some(status) = current.status.as_ref().and_then(|s| s.component.clone()) {
                report.components.insert(component.clone(), status);
            }
            report.readiness.push(Readiness {
                resource: name,
                component,
                not_ready: current.is_ready().err(),
            });
        }
        report.readiness.sort_by(|a, b| a.resource.cmp(&b.resource));

        for (name, dcd) in &live {
            if desired_names.contains(name) || !controlled_by(&dcd.metadata, dgd) {
                continue;
            }
            if retained(dgd, generation, dcd) {
                let component = dcd.spec.component.name.clone();
                if let (Some(entry), Some(old)) = (
                    report.components.get_mut(&component),
                    dcd.status.as_ref().and_then(|s| s.component.as_ref()),
                ) {
                    for n in &old.component_names {
                        if !entry.component_names.contains(n) {
                            entry.component_names.push(n.clone());
                        }
                    }
                }
                continue;
            }
            self.delete(dcd, out).await?;
        }
        Ok(report)
    }

    /// Apply `desired` unless `observed` already matches; returns the DCD as it now is.
    async fn ensure(
        &self,
        dgd: &DynamoGraphDeployment,
        desired: &DynamoComponentDeployment,
        observed: Option<DynamoComponentDeployment>,
        out: &mut Outcome<DynamoGraphDeploymentStatus>,
    ) -> Result<DynamoComponentDeployment, Error> {
        let name = desired.name_any();
        let uid = dgd.metadata.uid.as_deref().unwrap_or_default();
        let ensured = CHILDREN
            .ensure_observed(
                self.writer.as_ref(),
                desired,
                observed.as_ref(),
                Ownership::Controlled(uid),
            )
            .await
            .map_err(|error| match error {
                EnsureError::Conflict(conflict) => Error::OwnershipConflict {
                    name: name.clone(),
                    owner: conflict.owner(),
                },
                EnsureError::Apply(source) => Error::Apply {
                    name: name.clone(),
                    source,
                },
                EnsureError::Read(source) => Error::List(source),
                EnsureError::Convert(source) => Error::Convert {
                    name: name.clone(),
                    source,
                },
            })?;
        let key = kit::object::key(desired.namespace().as_deref(), &name);
        match ensured.change {
            Change::Created => {
                tracing::info!(dcd = %key, "created DynamoComponentDeployment");
                out.normal(
                    EVENT_DCD_CREATED,
                    format!("Created DynamoComponentDeployment {key}"),
                );
            }
            Change::Updated => {
                tracing::info!(dcd = %key, "restored DynamoComponentDeployment");
                out.normal(
                    EVENT_DCD_UPDATED,
                    format!("Updated DynamoComponentDeployment {key}"),
                );
            }
            Change::Unchanged => {}
        }
        Ok(ensured.object)
    }

    async fn delete(
        &self,
        dcd: &DynamoComponentDeployment,
        out: &mut Outcome<DynamoGraphDeploymentStatus>,
    ) -> Result<(), Error> {
        if dcd.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let name = dcd.name_any();
        let preconditions = Preconditions {
            uid: dcd.metadata.uid.clone(),
            resource_version: None,
        };
        match self
            .writer
            .delete::<DynamoComponentDeployment>(
                dcd.namespace().as_deref(),
                &name,
                &preconditions,
                None,
            )
            .await
        {
            Ok(Deleted::NotFound) => Ok(()),
            Ok(_) => {
                let key = kit::object::key(dcd.namespace().as_deref(), &name);
                tracing::info!(dcd = %key, "deleted DynamoComponentDeployment");
                out.normal(
                    EVENT_DCD_DELETED,
                    format!("Deleted DynamoComponentDeployment {key}"),
                );
                Ok(())
            }
            // Replaced by another object of that name since it was read: not ours.
            Err(e) if e.is_conflict() => Ok(()),
            Err(source) => Err(Error::Delete { name, source }),
        }
    }
}

/// Whether a non-desired DCD is a worker DCD of a generation the rollout keeps.
fn retained(
    dgd: &DynamoGraphDeployment,
    generation: &WorkerGeneration,
    dcd: &DynamoComponentDeployment,
) -> bool {
    let is_current_worker = dgd
        .spec
        .component(&dcd.spec.component.name)
        .is_some_and(|c| naming::is_worker(c.r#type));
    let hash = dcd.labels().get(labels::DYNAMO_WORKER_HASH);
    is_current_worker && hash.is_some_and(|h| generation.retained.contains(h))
}

fn controlled_by(meta: &ObjectMeta, dgd: &DynamoGraphDeployment) -> bool {
    dgd.metadata
        .uid
        .as_deref()
        .is_some_and(|uid| is_controlled_by(meta, uid))
}

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

/// The resolved checkpoint on a component's DCD, as upstream's graph controller hands it
/// down: once the checkpoint exists the DCD names it (`checkpointRef`, with the startup policy;
/// no `identity`, no `job`), so the DCD controller restores from exactly that one; a
/// `WaitForCheckpoint` component waits at zero replicas until it is Ready; an `Immediate`
/// component's pod template carries the restore-candidate annotations
/// (`pod_render::restore::metadata`).
fn checkpoint_startup(spec: &mut DynamoComponentDeploymentSharedSpec, info: &CheckpointInfo) {
    if !info.enabled {
        return;
    }
    if let Some(name) = info
        .checkpoint_name
        .as_ref()
        .filter(|n| info.exists && !n.is_empty())
    {
        let checkpoint = spec
            .experimental
            .get_or_insert_with(Default::default)
            .checkpoint
            .get_or_insert_with(Default::default);
        checkpoint.enabled = true;
        checkpoint.checkpoint_ref = Some(name.clone());
        checkpoint.identity = None;
        checkpoint.job = None;
        checkpoint.startup_policy = Some(info.startup_policy);
    }
    if info.waits() {
        spec.replicas = Some(0);
        return;
    }
    if info.startup_policy == CheckpointStartupPolicy::Immediate {
        let pod = info.pod(spec);
        let meta = spec
            .pod_template
            .get_or_insert_with(PodTemplateSpec::default)
            .metadata
            .get_or_insert_with(ObjectMeta::default);
        let mut pod_labels = meta.labels.take().unwrap_or_default();
        let mut annotations = meta.annotations.take().unwrap_or_default();
        pod_render::restore::metadata(&mut pod_labels, &mut annotations, &pod);
        meta.labels = (!pod_labels.is_empty()).then_some(pod_labels);
        meta.annotations = (!annotations.is_empty()).then_some(annotations);
    }
}

fn owner_reference(dgd: &DynamoGraphDeployment) -> Result<OwnerReference, Error> {
    dgd.controller_owner_ref(&())
        .filter(|o| !o.uid.is_empty())
        .ok_or_else(|| Error::NoUid(dgd.name_any()))
}

fn template_annotation(spec: &DynamoComponentDeploymentSharedSpec, key: &str) -> Option<String> {
    spec.pod_template
        .as_ref()?
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(key)
        .cloned()
}

fn render_one(
    dgd: &DynamoGraphDeployment,
    component: &DynamoComponentDeploymentSharedSpec,
    name: String,
    worker_hash: &str,
    restart_at: Option<String>,
    owner: &OwnerReference,
) -> DynamoComponentDeployment {
    let dgd_name = dgd.name_any();
    let k8s_ns = dgd.namespace().unwrap_or_default();
    let worker = naming::is_worker(component.r#type);
    let worker_class = worker && dgd.spec.epp_component().is_some();
    let mut spec = component.clone();

    // Metadata labels: the pod template's, then ours.
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
    if worker {
        dcd_labels.insert(
            labels::DYNAMO_WORKER_HASH.to_string(),
            worker_hash.to_string(),
        );
    }
    if worker_class {
        dcd_labels.insert(
            labels::DYNAMO_COMPONENT_CLASS.to_string(),
            labels::COMPONENT_CLASS_WORKER.to_string(),
        );
    }

    // Pod template: graph env, metadata, worker hash, restart, planner service account.
    let template = spec
        .pod_template
        .get_or_insert_with(PodTemplateSpec::default);
    if !dgd.spec.env.is_empty() {
        let main = main_container(template);
        main.env = Some(merge_env(
            &dgd.spec.env,
            main.env.as_deref().unwrap_or_default(),
        ));
        // The runtime sidecar, where the component names one, carries it too.
        let runtime = component.dynamo_sidecar.as_deref().and_then(|name| {
            template
                .spec
                .as_mut()?
                .init_containers
                .as_mut()?
                .iter_mut()
                .find(|c| c.name == name)
        });
        if let Some(runtime) = runtime {
            runtime.env = Some(merge_env(
                &dgd.spec.env,
                runtime.env.as_deref().unwrap_or_default(),
            ));
        }
    }
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
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
    let template_labels = meta.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in &dgd.spec.labels {
        template_labels
            .entry(k.clone())
            .or_insert_with(|| v.clone());
    }
    if worker {
        template_labels.insert(
            labels::DYNAMO_WORKER_HASH.to_string(),
            worker_hash.to_string(),
        );
    }
    if worker_class {
        template_labels.insert(
            labels::DYNAMO_COMPONENT_CLASS.to_string(),
            labels::COMPONENT_CLASS_WORKER.to_string(),
        );
    }
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
    if component.scaling_adapter.is_some() {
        spec.replicas = None;
    }

    DynamoComponentDeployment {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: dgd.namespace(),
            labels: Some(dcd_labels),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{all_ready, env, graph, stored};
    use kit::testing::{Double, Verb};
    use reconcilers::rollout::worker_hash;

    fn outcome() -> Outcome<DynamoGraphDeploymentStatus> {
        Outcome::new(DynamoGraphDeploymentStatus::default())
    }

    fn reasons(out: &Outcome<DynamoGraphDeploymentStatus>) -> Vec<String> {
        out.events.iter().map(|e| e.reason.clone()).collect()
    }

    async fn pass(
        d: &Double,
        generation: &WorkerGeneration,
        restart: Option<&RestartStamps>,
    ) -> (Result<Report, Error>, Outcome<DynamoGraphDeploymentStatus>) {
        let mut out = outcome();
        let report = Workloads::new(d.reader(), d.writer())
            .reconcile(
                &stored(d),
                generation,
                restart,
                &CheckpointInfos::new(),
                &mut out,
            )
            .await;
        (report, out)
    }

    fn settled(d: &Double) -> WorkerGeneration {
        WorkerGeneration::settled(worker_hash(&stored(d)))
    }

    fn dcd(d: &Double, name: &str) -> DynamoComponentDeployment {
        d.object(Some("ns"), name)
            .unwrap_or_else(|| panic!("DCD {name}"))
    }

    fn main_env(dcd: &DynamoComponentDeployment) -> Vec<(String, String)> {
        dcd.spec
            .component
            .pod_template
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    }

    #[tokio::test]
    async fn creates_one_dcd_per_component_on_the_first_run() {
        let d = Double::new();
        d.insert(graph());
        let generation = settled(&d);
        let (report, out) = pass(&d, &generation, None).await;
        let report = report.unwrap();
        assert_eq!(reasons(&out), [EVENT_DCD_CREATED, EVENT_DCD_CREATED]);
        let worker_name = format!("g-vllmdecodeworker-{}", generation.target);
        let frontend = dcd(&d, "g-frontend");
        let worker = dcd(&d, &worker_name);
        assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 2);

        // Labels, owner, worker hash.
        assert_eq!(frontend.labels()[labels::DYNAMO_GRAPH_DEPLOYMENT_NAME], "g");
        assert_eq!(frontend.labels()[labels::DYNAMO_COMPONENT], "Frontend");
        assert_eq!(frontend.labels()[labels::DYNAMO_COMPONENT_TYPE], "frontend");
        assert_eq!(frontend.labels()[labels::DYNAMO_NAMESPACE], "ns-g");
        assert!(!frontend.labels().contains_key(labels::DYNAMO_WORKER_HASH));
        assert_eq!(
            worker.labels()[labels::DYNAMO_WORKER_HASH],
            generation.target
        );
        let template_labels = worker
            .spec
            .component
            .pod_template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .clone()
            .unwrap();
        assert_eq!(
            template_labels[labels::DYNAMO_WORKER_HASH],
            generation.target
        );
        let owner = &worker.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.controller, Some(true));
        assert_eq!(Some(owner.uid.as_str()), stored(&d).metadata.uid.as_deref());
        assert_eq!(worker.spec.component.replicas, Some(1));

        // Graph env first, component entries win and follow.
        assert_eq!(
            main_env(&worker),
            [
                ("GRAPH".to_string(), "1".to_string()),
                ("SHARED".to_string(), "component".to_string()),
                ("COMPONENT".to_string(), "1".to_string()),
            ]
        );

        // Nothing is ready yet, in name order.
        assert_eq!(report.readiness.len(), 2);
        assert_eq!(report.readiness[0].resource, "g-frontend");
        assert_eq!(
            report.readiness[0].not_ready.as_deref(),
            Some("spec not yet processed: generation=1, observedGeneration=0")
        );
        assert!(report.components.is_empty());
    }

    #[tokio::test]
    async fn a_second_run_writes_nothing_and_reports_status() {
        let d = Double::new();
        d.insert(graph());
        let generation = settled(&d);
        pass(&d, &generation, None).await.0.unwrap();
        all_ready(&d);
        d.clear_writes();
        let (report, out) = pass(&d, &generation, None).await;
        let report = report.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(out.events.is_empty());
        assert!(report.readiness.iter().all(|r| r.not_ready.is_none()));
        assert_eq!(report.components["Frontend"].ready_replicas, Some(1));
        assert_eq!(report.components.len(), 2);
    }

    #[tokio::test]
    async fn user_drift_on_an_owned_field_is_restored() {
        let d = Double::new();
        d.insert(graph());
        let generation = settled(&d);
        pass(&d, &generation, None).await.0.unwrap();
        let mut frontend = dcd(&d, "g-frontend");
        frontend
            .spec
            .component
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("hacked".into());
        frontend
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("user".into(), "kept".into());
        d.insert(frontend);
        d.clear_writes();
        let (_, out) = pass(&d, &generation, None).await;
        assert_eq!(reasons(&out), [EVENT_DCD_UPDATED]);
        let frontend = dcd(&d, "g-frontend");
        let image = frontend
            .spec
            .component
            .pod_template
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .image
            .clone();
        assert_eq!(image.as_deref(), Some("runtime:1"));
        assert_eq!(d.changes().len(), 1);
    }

    #[tokio::test]
    async fn replicas_of_a_scaling_adapter_component_belong_to_others() {
        let d = Double::new();
        let mut g = graph();
        g.spec.components[1].scaling_adapter = Some(Default::default());
        g.spec.components[1].replicas = Some(2);
        d.insert(g);
        let generation = settled(&d);
        pass(&d, &generation, None).await.0.unwrap();
        let name = format!("g-vllmdecodeworker-{}", generation.target);
        assert_eq!(dcd(&d, &name).spec.component.replicas, None);
        // The adapter's controller scales the DCD; the graph's value does not come back.
        let mut worker = dcd(&d, &name);
        worker.spec.component.replicas = Some(5);
        d.insert(worker);
        d.clear_writes();
        let (_, out) = pass(&d, &generation, None).await;
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(out.events.is_empty());
        assert_eq!(dcd(&d, &name).spec.component.replicas, Some(5));
    }

    #[tokio::test]
    async fn a_removed_field_is_removed_from_the_dcd() {
        let d = Double::new();
        d.insert(graph());
        let generation = settled(&d);
        pass(&d, &generation, None).await.0.unwrap();
        let mut g = stored(&d);
        g.spec.env.clear();
        d.insert(g);
        let (_, out) = pass(&d, &generation, None).await;
        assert_eq!(reasons(&out), [EVENT_DCD_UPDATED, EVENT_DCD_UPDATED]);
        let names: Vec<String> = main_env(&dcd(&d, "g-frontend"))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["COMPONENT", "SHARED"]);
    }

    #[tokio::test]
    async fn dcds_of_removed_components_are_deleted() {
        let d = Double::new();
        d.insert(graph());
        let generation = settled(&d);
        pass(&d, &generation, None).await.0.unwrap();
        let mut g = stored(&d);
        g.spec.components.truncate(1);
        d.insert(g);
        let generation = settled(&d);
        let (_, out) = pass(&d, &generation, None).await;
        assert_eq!(reasons(&out), [EVENT_DCD_DELETED]);
        let names: Vec<String> = d
            .objects::<DynamoComponentDeployment>()
            .iter()
            .map(|d| d.name_any())
            .collect();
        assert_eq!(names, ["g-frontend"]);
    }

    #[tokio::test]
    async fn a_rolling_update_keeps_the_old_generation_until_it_settles() {
        let d = Double::new();
        let mut g = graph();
        g.spec.components[1].scaling_adapter = Some(Default::default());
        d.insert(g);
        let old = settled(&d);
        pass(&d, &old, None).await.0.unwrap();
        assert_eq!(
            dcd(&d, &format!("g-vllmdecodeworker-{}", old.target))
                .spec
                .component
                .replicas,
            None,
            "the adapter's count"
        );
        let rolling = WorkerGeneration {
            target: "11112222".into(),
            retained: BTreeSet::from([old.target.clone()]),
            rolling: true,
            replicas: BTreeMap::from([("VllmDecodeWorker".to_string(), 0)]),
            stuck: None,
        };
        let (_, out) = pass(&d, &rolling, None).await;
        assert_eq!(reasons(&out), [EVENT_DCD_CREATED]);
        assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 3);
        // The new generation at the count the rollout steps it to, adapter or not.
        assert_eq!(
            dcd(&d, "g-vllmdecodeworker-11112222")
                .spec
                .component
                .replicas,
            Some(0)
        );
        // Settled on the new generation: the count is the adapter's again (left out).
        let (_, out) = pass(&d, &WorkerGeneration::settled("11112222"), None).await;
        assert_eq!(reasons(&out), [EVENT_DCD_UPDATED, EVENT_DCD_DELETED]);
        assert_eq!(
            dcd(&d, "g-vllmdecodeworker-11112222")
                .spec
                .component
                .replicas,
            None
        );
        let mut names: Vec<String> = d
            .objects::<DynamoComponentDeployment>()
            .iter()
            .map(|d| d.name_any())
            .collect();
        names.sort();
        assert_eq!(names, ["g-frontend", "g-vllmdecodeworker-11112222"]);
    }

    #[tokio::test]
    async fn restart_stamps_are_applied_and_kept() {
        let d = Double::new();
        d.insert(graph());
        let generation = settled(&d);
        let stamps = RestartStamps {
            value: "r1".into(),
            components: BTreeSet::from(["Frontend".to_string()]),
        };
        pass(&d, &generation, Some(&stamps)).await.0.unwrap();
        let at = |d: &Double| {
            template_annotation(&dcd(d, "g-frontend").spec.component, labels::RESTART_AT)
        };
        assert_eq!(at(&d).as_deref(), Some("r1"));
        // Without stamps the live value stays: no write.
        d.clear_writes();
        pass(&d, &generation, None).await.0.unwrap();
        assert!(d.writes().is_empty());
        assert_eq!(at(&d).as_deref(), Some("r1"));
    }

    #[tokio::test]
    async fn graph_metadata_is_propagated_where_the_template_does_not_set_it() {
        let d = Double::new();
        let mut g = graph();
        g.spec.annotations = BTreeMap::from([("a".to_string(), "graph".to_string())]);
        g.spec.labels = BTreeMap::from([("l".to_string(), "graph".to_string())]);
        g.metadata.annotations = Some(BTreeMap::from([(
            labels::ENABLE_METRICS.to_string(),
            "false".to_string(),
        )]));
        g.spec.components[0].pod_template.as_mut().unwrap().metadata = Some(ObjectMeta {
            annotations: Some(BTreeMap::from([("a".to_string(), "component".to_string())])),
            ..Default::default()
        });
        d.insert(g);
        pass(&d, &settled(&d), None).await.0.unwrap();
        let meta = dcd(&d, "g-frontend")
            .spec
            .component
            .pod_template
            .unwrap()
            .metadata
            .unwrap();
        let annotations = meta.annotations.unwrap();
        assert_eq!(annotations["a"], "component");
        assert_eq!(annotations[labels::ENABLE_METRICS], "false");
        assert_eq!(meta.labels.unwrap()["l"], "graph");
    }

    #[tokio::test]
    async fn a_dcd_controlled_by_another_object_is_a_conflict() {
        let d = Double::new();
        d.insert(graph());
        let generation = settled(&d);
        d.insert(DynamoComponentDeployment {
            metadata: ObjectMeta {
                name: Some("g-frontend".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: None,
        });
        let (report, _) = pass(&d, &generation, None).await;
        let err = report.unwrap_err();
        assert!(matches!(err, Error::OwnershipConflict { .. }), "{err}");
        assert!(err.to_string().contains("has no controller owner"));
    }

    #[tokio::test]
    async fn write_failures_are_the_steps_error() {
        let d = Double::new();
        d.insert(graph());
        let generation = settled(&d);
        d.fail_next(
            Verb::Apply,
            "DynamoComponentDeployment",
            kit::Error::Forbidden("no".into()),
        );
        assert!(matches!(
            pass(&d, &generation, None).await.0.unwrap_err(),
            Error::Apply { .. }
        ));
        d.fail_next(
            Verb::List,
            "DynamoComponentDeployment",
            kit::Error::Forbidden("no".into()),
        );
        assert!(matches!(
            pass(&d, &generation, None).await.0.unwrap_err(),
            Error::List(_)
        ));
    }

    /// The resolved checkpoint on the DCD (upstream's `applyCheckpointStartupPolicy`; rows 1-2
    /// are upstream's `TestComponentWorkloadsReconciler_ApplyCheckpointStartupPolicy`).
    #[test]
    fn the_dcd_names_its_checkpoint_and_waits_for_it() {
        use api::snapshot::{
            ARTIFACT_VERSION_ANNOTATION, CHECKPOINT_ID_LABEL, TARGET_CONTAINERS_ANNOTATION,
        };
        let info = |policy, exists: bool, ready: bool| reconcilers::checkpoints::CheckpointInfo {
            enabled: true,
            exists,
            ready,
            checkpoint_name: exists.then(|| "checkpoint-name".into()),
            identity_hash: Some("checkpoint-id".into()),
            checkpoint_id: None,
            startup_policy: policy,
            automatic: false,
            target_container: MAIN_CONTAINER_NAME.into(),
            artifact_version: "1".into(),
            restore: None,
        };
        use CheckpointStartupPolicy::{Immediate, WaitForCheckpoint};
        // (case, info, replicas, names the checkpoint, restore-candidate annotations)
        let rows = [
            (
                "immediate stamps stable restore candidate metadata",
                info(Immediate, true, true),
                1,
                true,
                true,
            ),
            (
                "wait for checkpoint gates replicas until ready",
                info(WaitForCheckpoint, true, false),
                0,
                true,
                false,
            ),
            (
                "wait for checkpoint starts once ready",
                info(WaitForCheckpoint, true, true),
                1,
                true,
                false,
            ),
            (
                "no checkpoint yet: the component's own config",
                info(WaitForCheckpoint, false, false),
                0,
                false,
                false,
            ),
            (
                "immediate without a checkpoint: nothing to name",
                info(Immediate, false, false),
                1,
                false,
                false,
            ),
        ];
        for (name, info, replicas, named, candidate) in rows {
            let mut g = graph();
            g.metadata.uid = Some("uid-1".into());
            let worker = &mut g.spec.components[1];
            let meta = worker
                .pod_template
                .get_or_insert_with(Default::default)
                .metadata
                .get_or_insert_with(Default::default);
            meta.labels = Some(BTreeMap::from([(
                CHECKPOINT_ID_LABEL.into(),
                "stale".into(),
            )]));
            meta.annotations = Some(BTreeMap::from([(
                ARTIFACT_VERSION_ANNOTATION.into(),
                "stale".into(),
            )]));
            worker.experimental = Some(api::v1beta1::ExperimentalSpec {
                checkpoint: Some(api::v1beta1::ComponentCheckpointConfig {
                    enabled: true,
                    startup_policy: Some(info.startup_policy),
                    job: Some(Default::default()),
                    ..Default::default()
                }),
                ..Default::default()
            });
            let infos = CheckpointInfos::from([("VllmDecodeWorker".to_string(), info)]);
            let generation = WorkerGeneration::settled("h");
            let dcds = render(&g, &generation, None, &infos, &BTreeMap::new()).unwrap();
            assert_eq!(dcds[0].spec.component.replicas, Some(1), "{name}");
            let dcd = &dcds[1].spec.component;
            assert_eq!(dcd.replicas, Some(replicas), "{name}");
            let ckpt = dcd
                .experimental
                .as_ref()
                .unwrap()
                .checkpoint
                .as_ref()
                .unwrap();
            assert_eq!(ckpt.checkpoint_ref.is_some(), named, "{name}");
            if named {
                assert_eq!(
                    ckpt.checkpoint_ref.as_deref(),
                    Some("checkpoint-name"),
                    "{name}"
                );
                assert!(ckpt.identity.is_none() && ckpt.job.is_none(), "{name}");
            } else {
                assert!(ckpt.job.is_some(), "{name}: the component's config is kept");
            }
            let meta = dcd
                .pod_template
                .as_ref()
                .unwrap()
                .metadata
                .as_ref()
                .unwrap();
            let annotations = meta.annotations.clone().unwrap_or_default();
            let labels = meta.labels.clone().unwrap_or_default();
            if candidate {
                assert!(!labels.contains_key(CHECKPOINT_ID_LABEL), "{name}");
                assert_eq!(
                    annotations[labels::CHECKPOINT_RESTORE_CANDIDATE],
                    "true",
                    "{name}"
                );
                assert_eq!(
                    annotations[labels::CHECKPOINT_NAME],
                    "checkpoint-name",
                    "{name}"
                );
                assert_eq!(
                    annotations[labels::CHECKPOINT_STARTUP_POLICY],
                    "Immediate",
                    "{name}"
                );
                assert_eq!(annotations[TARGET_CONTAINERS_ANNOTATION], "main", "{name}");
            } else {
                assert!(
                    !annotations.contains_key(labels::CHECKPOINT_RESTORE_CANDIDATE),
                    "{name}"
                );
            }
        }
    }

    /// Upstream's `TestNativeSidecarRendering` (DCD materialization): a DCD keeps
    /// `dynamoSidecar`, and its runtime init container carries the graph's env under its own.
    #[test]
    fn the_runtime_sidecar_of_a_dcd_carries_the_graph_env() {
        let mut g = graph();
        g.metadata.uid = Some("uid-1".into());
        let worker = &mut g.spec.components[1];
        worker.dynamo_sidecar = Some("runtime".into());
        let spec = worker.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
        spec.init_containers = Some(vec![
            Container {
                name: "setup".into(),
                ..Default::default()
            },
            Container {
                name: "runtime".into(),
                restart_policy: Some("Always".into()),
                env: Some(vec![env("SHARED", "runtime")]),
                ..Default::default()
            },
        ]);
        let dcds = render(
            &g,
            &WorkerGeneration::settled("h"),
            None,
            &CheckpointInfos::new(),
            &BTreeMap::new(),
        )
        .unwrap();
        let component = &dcds[1].spec.component;
        assert_eq!(component.dynamo_sidecar.as_deref(), Some("runtime"));
        let inits = component
            .pod_template
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.init_containers.as_ref())
            .unwrap();
        let pairs = |c: &Container| -> Vec<(String, String)> {
            c.env
                .iter()
                .flatten()
                .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
                .collect()
        };
        assert!(
            inits[0].env.is_none(),
            "other init containers are left alone"
        );
        assert_eq!(
            pairs(&inits[1]),
            [
                ("GRAPH".to_string(), "1".to_string()),
                ("SHARED".to_string(), "runtime".to_string()),
            ]
        );
    }

    /// Upstream stamps `sidecar.istio.io/inject: "false"` on EPP pod templates before the
    /// graph's annotations; the component's own value is kept.
    #[test]
    fn epp_pods_opt_out_of_istio_injection() {
        use crate::testutil::component;
        let annotation = |own: Option<&str>, on_graph: Option<&str>| {
            let mut g = graph();
            g.metadata.uid = Some("uid-1".into());
            let mut epp = component("Epp", ComponentType::Epp, "epp:1");
            if let Some(v) = own {
                let meta = epp
                    .pod_template
                    .get_or_insert_with(Default::default)
                    .metadata
                    .get_or_insert_with(Default::default);
                meta.annotations = Some(BTreeMap::from([(
                    labels::ISTIO_SIDECAR_INJECT.to_string(),
                    v.to_string(),
                )]));
            }
            if let Some(v) = on_graph {
                g.spec
                    .annotations
                    .insert(labels::ISTIO_SIDECAR_INJECT.to_string(), v.to_string());
            }
            g.spec.components = vec![epp, component("F", ComponentType::Frontend, "rt:1")];
            let dcds = render(
                &g,
                &WorkerGeneration::settled("h"),
                None,
                &CheckpointInfos::new(),
                &BTreeMap::new(),
            )
            .unwrap();
            dcds.iter()
                .map(|d| {
                    d.spec
                        .component
                        .pod_template
                        .as_ref()
                        .and_then(|t| t.metadata.as_ref())
                        .and_then(|m| m.annotations.as_ref())
                        .and_then(|a| a.get(labels::ISTIO_SIDECAR_INJECT).cloned())
                })
                .collect::<Vec<_>>()
        };
        let s = |v: &str| Some(v.to_string());
        assert_eq!(annotation(None, None), [s("false"), None]);
        assert_eq!(annotation(None, Some("true")), [s("false"), s("true")]);
        assert_eq!(annotation(Some("true"), None), [s("true"), None]);
    }

    /// Upstream's DCD generation: worker-class components of a graph with an EPP component
    /// carry `nvidia.com/dynamo-component-class: worker` on the DCD and its pod template (so the
    /// DCD controller renders it onto the Deployment, its pods and the Service); nothing else
    /// does.
    #[test]
    fn worker_component_class_in_graphs_with_an_epp_component() {
        use crate::testutil::component;
        // (component type, graph has an EPP component, class expected)
        let rows = [
            (ComponentType::Worker, true, true),
            (ComponentType::Prefill, true, true),
            (ComponentType::Decode, true, true),
            (ComponentType::Frontend, true, false),
            (ComponentType::Planner, true, false),
            (ComponentType::Epp, true, false),
            (ComponentType::Worker, false, false),
            (ComponentType::Prefill, false, false),
            (ComponentType::Decode, false, false),
        ];
        for (type_, with_epp, expected) in rows {
            let mut g = graph();
            g.metadata.uid = Some("uid-1".into());
            g.spec.components = vec![component("C", type_, "runtime:1")];
            if with_epp && type_ != ComponentType::Epp {
                g.spec
                    .components
                    .push(component("Epp", ComponentType::Epp, "epp:1"));
            }
            let generation = WorkerGeneration::settled("h");
            let dcds = render(
                &g,
                &generation,
                None,
                &CheckpointInfos::new(),
                &BTreeMap::new(),
            )
            .unwrap();
            let dcd = &dcds[0];
            let template_labels = dcd
                .spec
                .component
                .pod_template
                .as_ref()
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.labels.clone())
                .unwrap_or_default();
            let want = expected.then_some(labels::COMPONENT_CLASS_WORKER);
            for (place, got) in [
                ("DCD", dcd.labels().get(labels::DYNAMO_COMPONENT_CLASS)),
                (
                    "pod template",
                    template_labels.get(labels::DYNAMO_COMPONENT_CLASS),
                ),
            ] {
                assert_eq!(
                    got.map(String::as_str),
                    want,
                    "{type_:?} (EPP in graph: {with_epp}): {place}"
                );
            }
        }
    }

    #[test]
    fn merge_env_keeps_the_graph_order_and_lets_components_win() {
        let merged = merge_env(
            &[env("A", "g"), env("B", "g")],
            &[env("C", "c"), env("A", "c")],
        );
        let pairs: Vec<(String, String)> = merged
            .into_iter()
            .map(|e| (e.name, e.value.unwrap()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("A".into(), "c".into()),
                ("B".into(), "g".into()),
                ("C".into(), "c".into())
            ]
        );
    }
}
