//! Worker generations and the managed rolling update of worker components.
//!
//! A **worker generation** is identified by the worker hash ([`worker_hash`]): a digest of the
//! fields of worker-class components (`worker`, `prefill`, `decode`) that shape their pods, plus
//! the graph's backend framework and env. Worker DynamoComponentDeployments are named
//! `<dgd>-<component>-<hash>` and labelled `nvidia.com/dynamo-worker-hash=<hash>`.
//!
//! The **active** generation is the one serving. It is recorded on the DGD in
//! `nvidia.com/current-worker-hash-v2`, but never only there: when the annotation is missing
//! (for example after `kubectl replace` or `helm --force` dropped it), it is recovered from the
//! hash labels of the worker DCDs the graph owns (the oldest generation wins) and recorded again.
//! The **target** generation is the one the spec asks for.
//!
//! # The rolling update
//! A pure decision ([`decide::decide`]) and a thin applier ([`Rollout::reconcile`]):
//! 1. **Observe**: the graph's worker DCDs, per worker component its DCD of the target generation
//!    and those of every other generation (replicas, ready, available, observed), its desired
//!    replicas (its `replicas`; with `scalingAdapter` the adapter's `spec.replicas`), its
//!    strategy ([`api::deployment_strategy`]: `nvidia.com/deployment-strategy`,
//!    `nvidia.com/deployment-rolling-update-max-surge|-max-unavailable` on the component's pod
//!    template or the graph's `spec.annotations`), and, while a rollout runs and pods are
//!    watched ([`Config::pods`]), the worker pods ([`pods::WorkerPod`]); the clock is read once.
//! 2. **Decide** ([`decide`]): the step, the phase (checked against [`decide::TRANSITIONS`]),
//!    the replicas of every generation, the old generations kept, whether the target is
//!    recorded, and why the rollout cannot progress.
//! 3. **Apply**: old generations' `spec.replicas` by server-side apply of that field only under
//!    [`FIELD_MANAGER`]; the record; `status.rollingUpdate`; events; a requeue when a pending pod
//!    reaches the progress deadline. The target generation's replicas and the deletion of the
//!    old generations are the workloads step's, from the returned [`WorkerGeneration`].
//!
//! Each worker component steps its generations by its strategy, as upstream Dynamo does
//! (`RollingUpdate` with `maxSurge` / `maxUnavailable`, default 25% / 25%; `Recreate`); see
//! [`decide`] for the arithmetic. A component with fewer than four replicas rolls surge-first
//! by default (one extra replica, none unavailable), and `max-surge: 100%`,
//! `max-unavailable: 0` rolls a whole new generation next to the old one. On a cluster without
//! spare GPUs, `max-surge: 0` with `max-unavailable: 1` (or `Recreate`) completes where a surge
//! cannot: the new pods are unschedulable, and after the progress deadline
//! ([`Config::progress_deadline`], counted from each pod's creation) the graph says so
//! (`Ready=False`, reason [`REASON_ROLLING_UPDATE_STUCK`], the scheduler's message).
//!
//! **Reverts are rollouts back.** The target is whatever the spec asks for; every other
//! generation is old and is stepped down by the same rules, so a revert mid-rollout (upstream
//! issue #13620) or a second change mid-rollout (#13353) never leaves fewer available replicas
//! than the strategy allows: the generation that serves is scaled up again before the aborted
//! one is scaled down. Several old generations are stepped down together (oldest first).
//!
//! **One owner per replica count.** While a rollout runs, the graph owns every worker DCD's
//! `spec.replicas`: the target generation's through the workloads step (field manager
//! `dynamo-operator/dgd`), the old generations' here ([`FIELD_MANAGER`]), also for components
//! with a scaling adapter, whose `spec.replicas` is then the desired count; the adapter's
//! controller observes and writes nothing ([`owns_worker_replicas`]). When the rollout
//! completes, the adapter takes the count back.
//!
//! The new hash is recorded before the old generation is deleted, so an interrupted completion
//! never leaves the record pointing at deleted workers.
//!
//! Graphs with a multinode component do not get managed rollouts (as upstream): the desired hash
//! is recorded whenever it changes, and a Warning `RollingUpdateNotSupported` is queued once the
//! record was written.
//!
//! The hash is [`api::worker_hash::worker_hash`]: upstream's v2 hash, byte for byte (Go's JSON
//! encoding of the same input), so a graph keeps its worker names when it moves from the upstream
//! operator.

pub mod decide;
pub mod pods;
pub mod record;

#[cfg(test)]
mod decide_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use api::common::RollingUpdatePhase;
use api::deployment_strategy::DeploymentStrategy;
use api::labels;
use api::v1beta1::{DynamoComponentDeploymentSharedSpec, RollingUpdateStatus};
use api::{DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentScalingAdapter};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kit::{Event, Reader, ReaderExt, Selector, Writer};
use kube::ResourceExt;
use serde_json::json;

use crate::naming;
use decide::{Component, Decision, Observed, PendingPod, Step, Workload};
use pods::WorkerPod;

pub use api::worker_hash::worker_hash;
pub use record::{
    MESSAGE_ROLLING_UPDATE_NOT_SUPPORTED, Record, WorkerHashRecord, record_worker_hash,
};

/// Failure reason of the rollout step (upstream's value).
pub const REASON_ROLLING_UPDATE_FAILED: &str = "rolling_update_failed";
/// Ready reason while a rolling update is pending or in progress (upstream's value).
pub const REASON_ROLLING_UPDATE_IN_PROGRESS: &str = "rolling_update_in_progress";
/// Ready message while a rolling update is pending or in progress (upstream's text).
pub const MESSAGE_ROLLING_UPDATE_IN_PROGRESS: &str = "Rolling update in progress";
/// Ready reason while a rolling update cannot progress: a pod of the new generation is
/// unschedulable past the progress deadline.
pub const REASON_ROLLING_UPDATE_STUCK: &str = "rolling_update_stuck";
/// Event: a rolling update started.
pub const EVENT_ROLLING_UPDATE_STARTED: &str = "RollingUpdateStarted";
/// Event: a rolling update completed.
pub const EVENT_ROLLING_UPDATE_COMPLETED: &str = "RollingUpdateCompleted";
/// Warning event: the worker spec changed on a graph that cannot have managed rollouts.
pub const EVENT_ROLLING_UPDATE_NOT_SUPPORTED: &str = "RollingUpdateNotSupported";
/// Field manager of the old generations' `spec.replicas` during a rolling update.
pub const FIELD_MANAGER: &str = "dynamo-operator/rollout";
/// How long a pod of the new generation may stay unschedulable before the rollout reports it
/// cannot progress (Kubernetes' default `progressDeadlineSeconds` of a Deployment).
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// Why the rollout step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The worker DCDs could not be listed.
    #[error("list worker DynamoComponentDeployments: {0}")]
    List(#[source] kit::Error),
    /// A scaling adapter or the worker pods could not be read.
    #[error("read {kind}: {source}")]
    Read {
        /// What was read.
        kind: &'static str,
        /// The read error.
        #[source]
        source: kit::Error,
    },
    /// The active worker hash could not be recorded on the graph.
    #[error("record the active worker hash on the DynamoGraphDeployment: {0}")]
    Record(#[source] kit::Error),
    /// An old generation's replicas could not be written.
    #[error("scale DynamoComponentDeployment {name} to {replicas}: {source}")]
    Scale {
        /// The DCD.
        name: String,
        /// The replicas it was to get.
        replicas: i32,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// The decision left the state machine (a bug).
    #[error("illegal rolling update transition {from:?} --{step:?}--> {to:?}")]
    IllegalTransition {
        /// The phase before.
        from: Option<RollingUpdatePhase>,
        /// The step.
        step: Step,
        /// The phase after.
        to: Option<RollingUpdatePhase>,
    },
}

/// What the rollout step returns to its program.
#[derive(Clone, Debug, PartialEq)]
pub struct Rolled {
    /// The worker generations the workloads step renders.
    pub workers: WorkerGeneration,
    /// `status.rollingUpdate`, the status field this step owns.
    pub status: Option<RollingUpdateStatus>,
    /// The active worker hash to record on the graph, when it is to be (re)written; the
    /// program writes it ([`WorkerHashRecord`]) before the workloads step deletes any old
    /// generation.
    pub record: Option<Record>,
}

/// Which worker generations the workloads step renders and keeps, and at which replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerGeneration {
    /// The hash worker DCDs are rendered at (their name suffix and hash label).
    pub target: String,
    /// Other generations whose worker DCDs stay next to the target (stepped down by the
    /// rollout) instead of being deleted.
    pub retained: BTreeSet<String>,
    /// A managed rolling update is pending or in progress.
    pub rolling: bool,
    /// During a rolling update: the replicas of each worker component's target-generation DCD
    /// (by component name), which the workloads step applies instead of the component's own.
    pub replicas: BTreeMap<String, i32>,
    /// Why the rolling update cannot progress, when it cannot.
    pub stuck: Option<String>,
}

impl WorkerGeneration {
    /// A settled generation: only `target`, no rolling update.
    pub fn settled(target: impl Into<String>) -> Self {
        WorkerGeneration {
            target: target.into(),
            retained: BTreeSet::new(),
            rolling: false,
            replicas: BTreeMap::new(),
            stuck: None,
        }
    }

    /// Whether worker DCDs at `hash` are kept.
    pub fn keeps(&self, hash: &str) -> bool {
        hash == self.target || self.retained.contains(hash)
    }
}

/// Operator configuration of the rollout.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a pod of the new generation may stay unschedulable.
    pub progress_deadline: Duration,
    /// Worker pods ([`pods::WorkerPod`]) are in the reader's watch cache. Without it the
    /// rollout reads no pods: `Recreate` waits for the old DCDs only, and no rollout is
    /// reported stuck.
    pub pods: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            progress_deadline: DEFAULT_PROGRESS_DEADLINE,
            pods: false,
        }
    }
}

/// The rollout reconciler: worker hash bookkeeping and the rolling update state machine.
pub struct Rollout {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
    config: Config,
}

impl Rollout {
    /// A rollout reconciler reading worker DCDs with `reader` and recording the active hash on
    /// the graph with `writer`, with the default [`Config`].
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        Self::with_config(reader, writer, Config::default())
    }

    /// As [`Rollout::new`], with `config`.
    pub fn with_config(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: Config) -> Self {
        Rollout {
            reader,
            writer,
            config,
        }
    }

    /// Observe the worker generations, decide, and apply: old generations' replicas,
    /// transition events, a requeue at the next progress deadline. Returns what the workloads
    /// step renders, the `status.rollingUpdate` fragment this step owns, and the record the
    /// program writes on the graph ([`Rolled`]).
    pub async fn reconcile(&self, dgd: &DynamoGraphDeployment) -> kit::Step<Rolled, Error> {
        let mut events = Vec::new();
        let result = self.converge(dgd, &mut events).await;
        let requeue = result.as_ref().ok().and_then(|(_, after)| *after);
        kit::Step::new(result.map(|(rolled, _)| rolled), events).requeue(requeue)
    }

    async fn converge(
        &self,
        dgd: &DynamoGraphDeployment,
        events: &mut Vec<Event>,
    ) -> Result<(Rolled, Option<Duration>), Error> {
        let previous = dgd.status.as_ref().and_then(|s| s.rolling_update.clone());
        let observed = self.observe(dgd, previous, kit::conditions::now()).await?;
        let decision = decide::decide(&observed);
        let step = decision.step.expect("decide always names a step");
        let from = decide::phase_of(observed.status.as_ref());
        let to = decide::phase_of(decision.status.as_ref());
        if !decide::allowed(from, step, to) {
            return Err(Error::IllegalTransition { from, step, to });
        }
        self.apply(dgd, &observed, &decision, events).await?;
        let target = &observed.target;
        let active = observed.active.as_deref().unwrap_or(target);
        let record = decision.record.then(|| Record {
            hash: target.clone(),
            unsupported_from: (step == Step::Unsupported).then(|| active.to_string()),
        });
        let workers = WorkerGeneration {
            target: target.clone(),
            retained: decision.retained.clone(),
            rolling: decision.rolling(),
            replicas: decision
                .targets
                .iter()
                .map(|(c, t)| (c.clone(), t.new))
                .collect(),
            stuck: decision.stuck.clone(),
        };
        let rolled = Rolled {
            workers,
            status: decision.status.clone(),
            record,
        };
        Ok((rolled, decision.requeue_after))
    }

    /// What [`decide::decide`] needs, read from the cache.
    async fn observe(
        &self,
        dgd: &DynamoGraphDeployment,
        status: Option<RollingUpdateStatus>,
        now: Time,
    ) -> Result<Observed, Error> {
        let target = worker_hash(dgd);
        let dcds = self.worker_dcds(dgd).await?;
        let active = recorded_hash(dgd).or_else(|| recover_active(&dcds));
        let multinode = dgd.spec.has_multinode_component();
        let rolling = !multinode
            && (active.as_deref().is_some_and(|a| a != target)
                || dcds.iter().any(|d| hash_of(d).is_some_and(|h| h != target)));
        let pods = if rolling && self.config.pods {
            self.worker_pods(dgd).await?
        } else {
            Vec::new()
        };
        let mut components = Vec::new();
        for c in dgd
            .spec
            .components
            .iter()
            .filter(|c| naming::is_worker(c.r#type))
        {
            components.push(Component {
                name: c.name.clone(),
                desired: self.desired(dgd, c, rolling).await?,
                strategy: DeploymentStrategy::of_component(&dgd.spec.annotations, c),
                new: dcds
                    .iter()
                    .find(|d| d.name_any() == naming::dcd_name(dgd, c, Some(&target)))
                    .map(|d| workload(d, &pods)),
                old: dcds
                    .iter()
                    .filter(|d| d.spec.component.name == c.name)
                    .filter(|d| hash_of(d).is_some_and(|h| h != target))
                    .map(|d| workload(d, &pods))
                    .collect(),
                pending: pending_pods(&naming::dcd_name(dgd, c, Some(&target)), &pods),
            });
        }
        Ok(Observed {
            target,
            active,
            multinode,
            status,
            components,
            now,
            deadline: self.config.progress_deadline,
        })
    }

    /// The replicas `component` should run: its adapter's count while a rollout runs (the
    /// graph then owns the DCDs' counts), else its own `replicas` (default 1).
    async fn desired(
        &self,
        dgd: &DynamoGraphDeployment,
        component: &DynamoComponentDeploymentSharedSpec,
        rolling: bool,
    ) -> Result<i32, Error> {
        let own = component.replicas.unwrap_or(1);
        if !rolling || component.scaling_adapter.is_none() {
            return Ok(own);
        }
        let adapter: Option<DynamoGraphDeploymentScalingAdapter> = self
            .reader
            .get(
                dgd.namespace().as_deref(),
                &naming::component_base_name(&dgd.name_any(), &component.name),
            )
            .await
            .map_err(|source| Error::Read {
                kind: "DynamoGraphDeploymentScalingAdapter",
                source,
            })?;
        Ok(adapter.map_or(own, |a| a.spec.replicas))
    }

    /// Carry out `decision` on the old generations and queue its transition event.
    async fn apply(
        &self,
        dgd: &DynamoGraphDeployment,
        observed: &Observed,
        decision: &Decision,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        let key = format!("{}/{}", dgd.namespace().unwrap_or_default(), dgd.name_any());
        let target = &observed.target;
        let active = observed.active.as_deref().unwrap_or(target);
        for (component, targets) in &decision.targets {
            let live = observed.components.iter().find(|c| &c.name == component);
            for (name, replicas) in &targets.old {
                let current = live
                    .and_then(|c| c.old.iter().find(|w| &w.name == name))
                    .and_then(|w| w.spec);
                if current != Some(*replicas) {
                    self.scale(dgd, name, *replicas).await?;
                    tracing::info!(dgd = %key, dcd = %name, from = ?current, to = replicas, "stepped old worker generation");
                }
            }
        }
        match decision.step {
            Some(Step::Start) => {
                tracing::info!(dgd = %key, from = %active, to = %target, "rolling update started");
                events.push(Event::normal(
                    EVENT_ROLLING_UPDATE_STARTED,
                    format!("Rolling update started: worker generation {active} to {target}"),
                ));
            }
            Some(Step::Complete) if active == target => {
                tracing::info!(dgd = %key, hash = %target, "rolling update ended on the active worker generation");
                events.push(Event::normal(
                    EVENT_ROLLING_UPDATE_COMPLETED,
                    format!("Rolling update ended: worker generation {target} is active"),
                ));
            }
            Some(Step::Complete) => {
                tracing::info!(dgd = %key, from = %active, to = %target, "rolling update completed");
                events.push(Event::normal(
                    EVENT_ROLLING_UPDATE_COMPLETED,
                    format!(
                        "Rolling update completed: worker generation {active} replaced by {target}"
                    ),
                ));
            }
            Some(Step::Stuck) => {
                tracing::warn!(dgd = %key, to = %target, reason = ?decision.stuck, "rolling update cannot progress");
            }
            _ => {}
        }
        Ok(())
    }

    /// Worker DCDs the graph controls that are not being deleted.
    async fn worker_dcds(
        &self,
        dgd: &DynamoGraphDeployment,
    ) -> Result<Vec<DynamoComponentDeployment>, Error> {
        let selector = Selector::from_iter([(
            labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
            dgd.name_any(),
        )]);
        let dcds: Vec<DynamoComponentDeployment> = self
            .reader
            .list(dgd.namespace().as_deref(), &selector)
            .await
            .map_err(Error::List)?;
        Ok(dcds
            .into_iter()
            .filter(|d| controlled_by(&d.metadata, dgd))
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .filter(|d| naming::is_worker(d.spec.component.r#type))
            .collect())
    }

    /// The graph's worker pods (from the pod watch).
    async fn worker_pods(&self, dgd: &DynamoGraphDeployment) -> Result<Vec<WorkerPod>, Error> {
        let selector = Selector::from_iter([(
            labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
            dgd.name_any(),
        )]);
        self.reader
            .list(dgd.namespace().as_deref(), &selector)
            .await
            .map_err(|source| Error::Read {
                kind: "Pods",
                source,
            })
    }

    /// Set `spec.replicas` of the old-generation DCD `name` (and nothing else).
    async fn scale(
        &self,
        dgd: &DynamoGraphDeployment,
        name: &str,
        replicas: i32,
    ) -> Result<(), Error> {
        apply_replicas(
            self.writer.as_ref(),
            dgd.namespace().as_deref(),
            name,
            replicas,
            FIELD_MANAGER,
        )
        .await
        .map(|_| ())
        .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
        .map_err(|source| Error::Scale {
            name: name.to_string(),
            replicas,
            source,
        })
    }
}

/// Server-side apply `spec.replicas` of the DCD `name` in `namespace` (and no other field) under
/// `field_manager`, forced. A DCD deleted since it was read is not recreated: the API server
/// rejects a DCD without its spec (`Invalid`), reported like NotFound.
pub async fn apply_replicas(
    writer: &dyn Writer,
    namespace: Option<&str>,
    name: &str,
    replicas: i32,
    field_manager: &str,
) -> Result<kit::Applied<kube::api::DynamicObject>, kit::Error> {
    use kube::Resource;
    let ar = kit::object::resource::<DynamoComponentDeployment>();
    let body = kube::api::DynamicObject {
        types: Some(kube::api::TypeMeta {
            api_version: DynamoComponentDeployment::api_version(&()).into_owned(),
            kind: DynamoComponentDeployment::kind(&()).into_owned(),
        }),
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: namespace.map(str::to_string),
            ..Default::default()
        },
        data: json!({ "spec": { "replicas": replicas } }),
    };
    writer
        .apply_dynamic(&ar, &body, Some(field_manager))
        .await
        .map_err(|e| {
            if e.is_invalid() {
                kit::Error::NotFound(name.to_string())
            } else {
                e
            }
        })
}

/// Whether the graph's rollout owns the `spec.replicas` of its worker DCDs now (the scaling
/// adapters of worker components then write nothing): a generation other than the spec's is
/// recorded as active (or none is recorded yet), or a rolling update is recorded as pending or
/// in progress. Graphs with a multinode component have no managed rollout.
pub fn owns_worker_replicas(dgd: &DynamoGraphDeployment) -> bool {
    if dgd.spec.has_multinode_component() {
        return false;
    }
    recorded_hash(dgd).is_none_or(|h| h != worker_hash(dgd))
        || dgd
            .status
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref())
            .is_some_and(in_progress)
}

/// Whether a rolling update is pending or in progress.
pub fn in_progress(status: &RollingUpdateStatus) -> bool {
    matches!(
        status.phase,
        Some(RollingUpdatePhase::Pending | RollingUpdatePhase::InProgress)
    )
}

/// The hash recorded on the graph: the v2 annotation, else the v1 one.
pub fn recorded_hash(dgd: &DynamoGraphDeployment) -> Option<String> {
    let annotations = dgd.metadata.annotations.as_ref()?;
    annotations
        .get(labels::CURRENT_WORKER_HASH_V2)
        .or_else(|| annotations.get(labels::CURRENT_WORKER_HASH))
        .filter(|h| !h.is_empty())
        .cloned()
}

/// The active generation according to the worker DCDs: the hash label of the oldest one.
pub fn recover_active(worker_dcds: &[DynamoComponentDeployment]) -> Option<String> {
    worker_dcds
        .iter()
        .filter_map(|d| {
            let hash = hash_of(d)?;
            let created = d
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second());
            Some((created, d.name_any(), hash.to_string()))
        })
        .min()
        .map(|(_, _, hash)| hash)
}

/// A DCD's worker generation (its non-empty hash label).
fn hash_of(dcd: &DynamoComponentDeployment) -> Option<&str> {
    dcd.labels()
        .get(labels::DYNAMO_WORKER_HASH)
        .map(String::as_str)
        .filter(|h| !h.is_empty())
}

/// The decision's view of a worker DCD; `pods` tell whether a pod of it still runs.
fn workload(dcd: &DynamoComponentDeployment, pods: &[WorkerPod]) -> Workload {
    let name = dcd.name_any();
    let status = dcd.status.as_ref();
    let component = status.and_then(|s| s.component.as_ref());
    Workload {
        hash: hash_of(dcd).unwrap_or_default().to_string(),
        created: dcd
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        spec: dcd.spec.component.replicas,
        replicas: component.map(|c| c.replicas),
        ready: component.and_then(|c| c.ready_replicas).unwrap_or(0),
        available: component.and_then(|c| c.available_replicas).unwrap_or(0),
        observed: status.and_then(|s| s.observed_generation).unwrap_or(0)
            >= dcd.metadata.generation.unwrap_or(0),
        settled: dcd.is_ready().is_ok(),
        running_pods: pods
            .iter()
            .any(|p| p.workload() == Some(name.as_str()) && !p.terminal()),
        name,
    }
}

/// The pending pods of the DCD `workload`, sorted by name.
fn pending_pods(workload: &str, pods: &[WorkerPod]) -> Vec<PendingPod> {
    let mut pending: Vec<PendingPod> = pods
        .iter()
        .filter(|p| p.workload() == Some(workload) && p.pending())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| PendingPod {
            name: p.name_any(),
            created: p
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
            unschedulable: p.unschedulable(),
        })
        .collect();
    pending.sort_by(|a, b| a.name.cmp(&b.name));
    pending
}

fn controlled_by(meta: &ObjectMeta, dgd: &DynamoGraphDeployment) -> bool {
    let uid = dgd.metadata.uid.as_deref();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}
