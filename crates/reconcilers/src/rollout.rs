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
//!
//! # The rolling update
//! | observed | phase | action |
//! | --- | --- | --- |
//! | no active generation (first deploy) | unchanged | record the desired hash |
//! | desired = active | `Completed` if one was running (a revert) | drop other generations |
//! | desired ≠ active, none running | `Pending`, `startTime`, event `RollingUpdateStarted` | create the new generation next to the active one |
//! | `Pending` | `InProgress` | keep both generations |
//! | `InProgress`, not every new worker DCD ready | `InProgress`, `updatedComponents` so far | keep both generations |
//! | `InProgress`, every new worker DCD ready | `Completed`, `endTime`, every worker in `updatedComponents`, event `RollingUpdateCompleted` | record the new hash, then drop the old generation |
//!
//! This is **surge-first**: the old generation keeps its replicas until every new worker DCD is
//! ready at its desired replicas, then it is deleted whole. Upstream Dynamo scales the old
//! generation down step by step (`maxSurge`/`maxUnavailable`, or `Recreate`); here the peak
//! footprint is two full generations, and in exchange serving capacity never drops and a revert
//! mid-rollout is always safe (the active generation was never scaled down). A generation that
//! is neither active nor the target (the spec changed again mid-rollout) is dropped at once.
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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::common::RollingUpdatePhase;
use api::labels;
use api::v1beta1::{DynamoComponentDeploymentSharedSpec, RollingUpdateStatus};
use api::{DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::{Outcome, Patch, Reader, ReaderExt, Selector, Writer, WriterExt};
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::naming;

pub use api::worker_hash::worker_hash;

/// Failure reason of the rollout step (upstream's value).
pub const REASON_ROLLING_UPDATE_FAILED: &str = "rolling_update_failed";
/// Ready reason while a rolling update is pending or in progress (upstream's value).
pub const REASON_ROLLING_UPDATE_IN_PROGRESS: &str = "rolling_update_in_progress";
/// Ready message while a rolling update is pending or in progress (upstream's text).
pub const MESSAGE_ROLLING_UPDATE_IN_PROGRESS: &str = "Rolling update in progress";
/// Event: a rolling update started.
pub const EVENT_ROLLING_UPDATE_STARTED: &str = "RollingUpdateStarted";
/// Event: a rolling update completed.
pub const EVENT_ROLLING_UPDATE_COMPLETED: &str = "RollingUpdateCompleted";
/// Warning event: the worker spec changed on a graph that cannot have managed rollouts.
pub const EVENT_ROLLING_UPDATE_NOT_SUPPORTED: &str = "RollingUpdateNotSupported";

/// Why the rollout step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The worker DCDs could not be listed.
    #[error("list worker DynamoComponentDeployments: {0}")]
    List(#[source] kit::Error),
    /// The active worker hash could not be recorded on the graph.
    #[error("record the active worker hash on the DynamoGraphDeployment: {0}")]
    Record(#[source] kit::Error),
}

/// Which worker generations the workloads step renders and keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerGeneration {
    /// The hash worker DCDs are rendered at (their name suffix and hash label).
    pub target: String,
    /// Other generations whose worker DCDs stay untouched next to the target (the serving
    /// generation during a rolling update).
    pub retained: BTreeSet<String>,
    /// A managed rolling update is pending or in progress.
    pub rolling: bool,
}

impl WorkerGeneration {
    /// A settled generation: only `target`, no rolling update.
    pub fn settled(target: impl Into<String>) -> Self {
        WorkerGeneration {
            target: target.into(),
            retained: BTreeSet::new(),
            rolling: false,
        }
    }

    /// Whether worker DCDs at `hash` are kept.
    pub fn keeps(&self, hash: &str) -> bool {
        hash == self.target || self.retained.contains(hash)
    }
}

/// The rollout reconciler: worker hash bookkeeping and the rolling update state machine.
pub struct Rollout {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

impl Rollout {
    /// A rollout reconciler reading worker DCDs with `reader` and recording the active hash on
    /// the graph with `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        Rollout { reader, writer }
    }

    /// Observe the worker generations, advance the rolling update in `out.status.rollingUpdate`,
    /// record the active hash when it changes, queue transition events, and return what the
    /// workloads step renders.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        out: &mut Outcome<DynamoGraphDeploymentStatus>,
    ) -> Result<WorkerGeneration, Error> {
        let desired = worker_hash(dgd);
        let dcds = self.worker_dcds(dgd).await?;
        let recorded = recorded_hash(dgd);
        let active = recorded.clone().or_else(|| recover_active(&dcds));
        let key = format!("{}/{}", dgd.namespace().unwrap_or_default(), dgd.name_any());
        let running = out.status.rolling_update.as_ref().is_some_and(in_progress);

        if dgd.spec.has_multinode_component() {
            if running {
                let status = out
                    .status
                    .rolling_update
                    .get_or_insert_with(Default::default);
                status.phase = Some(RollingUpdatePhase::Failed);
                status.end_time = Some(kit::conditions::now());
            }
            if self.record(dgd, &desired).await? && active.as_deref().is_some_and(|a| a != desired)
            {
                tracing::info!(dgd = %key, hash = %desired, "worker spec changed; managed rolling update not supported for multinode graphs");
                out.warning(
                    EVENT_ROLLING_UPDATE_NOT_SUPPORTED,
                    "Worker spec changed but custom rolling updates are not supported for Grove/multinode deployments",
                );
            }
            return Ok(WorkerGeneration::settled(desired));
        }

        let Some(active) = active else {
            self.record(dgd, &desired).await?;
            tracing::debug!(dgd = %key, hash = %desired, "first worker generation");
            return Ok(WorkerGeneration::settled(desired));
        };

        if active == desired {
            self.record(dgd, &desired).await?;
            if running {
                let status = out
                    .status
                    .rolling_update
                    .get_or_insert_with(Default::default);
                status.phase = Some(RollingUpdatePhase::Completed);
                status.end_time = Some(kit::conditions::now());
                tracing::info!(dgd = %key, hash = %desired, "rolling update reverted to the active worker generation");
                out.normal(
                    EVENT_ROLLING_UPDATE_COMPLETED,
                    format!("Rolling update ended: worker generation {desired} is active"),
                );
            }
            return Ok(WorkerGeneration::settled(desired));
        }

        let rolling = WorkerGeneration {
            target: desired.clone(),
            retained: BTreeSet::from([active.clone()]),
            rolling: true,
        };
        let phase = out.status.rolling_update.as_ref().and_then(|s| s.phase);
        match phase {
            Some(RollingUpdatePhase::Pending) => {
                let status = out
                    .status
                    .rolling_update
                    .get_or_insert_with(Default::default);
                status.phase = Some(RollingUpdatePhase::InProgress);
                Ok(rolling)
            }
            Some(RollingUpdatePhase::InProgress) => {
                let (updated, total) = updated_components(dgd, &dcds, &desired);
                if updated.len() < total {
                    let status = out
                        .status
                        .rolling_update
                        .get_or_insert_with(Default::default);
                    status.updated_components = updated;
                    return Ok(rolling);
                }
                // Every new worker is ready: record the new generation first, then the
                // workloads step drops the old one.
                self.record(dgd, &desired).await?;
                let status = out
                    .status
                    .rolling_update
                    .get_or_insert_with(Default::default);
                status.phase = Some(RollingUpdatePhase::Completed);
                status.end_time = Some(kit::conditions::now());
                status.updated_components = updated;
                tracing::info!(dgd = %key, from = %active, to = %desired, "rolling update completed");
                out.normal(
                    EVENT_ROLLING_UPDATE_COMPLETED,
                    format!(
                        "Rolling update completed: worker generation {active} replaced by {desired}"
                    ),
                );
                Ok(WorkerGeneration::settled(desired))
            }
            _ => {
                out.status.rolling_update = Some(RollingUpdateStatus {
                    phase: Some(RollingUpdatePhase::Pending),
                    start_time: Some(kit::conditions::now()),
                    end_time: None,
                    updated_components: Vec::new(),
                });
                tracing::info!(dgd = %key, from = %active, to = %desired, "rolling update started");
                out.normal(
                    EVENT_ROLLING_UPDATE_STARTED,
                    format!("Rolling update started: worker generation {active} to {desired}"),
                );
                Ok(rolling)
            }
        }
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

    /// Record `hash` as the active generation (dropping the v1 annotation). Returns whether a
    /// write happened and changed the graph.
    async fn record(&self, dgd: &DynamoGraphDeployment, hash: &str) -> Result<bool, Error> {
        let annotations = dgd.metadata.annotations.as_ref();
        let current = annotations.and_then(|a| a.get(labels::CURRENT_WORKER_HASH_V2));
        let has_v1 = annotations.is_some_and(|a| a.contains_key(labels::CURRENT_WORKER_HASH));
        if current.map(String::as_str) == Some(hash) && !has_v1 {
            return Ok(false);
        }
        let patch = json!({"metadata": {"annotations": {
            labels::CURRENT_WORKER_HASH_V2: hash,
            labels::CURRENT_WORKER_HASH: Value::Null,
        }}});
        let applied = self
            .writer
            .patch::<DynamoGraphDeployment>(
                dgd.namespace().as_deref(),
                &dgd.name_any(),
                &Patch::Merge(patch),
            )
            .await
            .map_err(Error::Record)?;
        Ok(applied.changed)
    }
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
            let hash = d.labels().get(labels::DYNAMO_WORKER_HASH)?;
            (!hash.is_empty()).then(|| {
                let created = d
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_second());
                (created, d.name_any(), hash.clone())
            })
        })
        .min()
        .map(|(_, _, hash)| hash)
}

/// The worker components whose DCD at `hash` is ready at its desired replicas (sorted), and the
/// number of worker components.
pub fn updated_components(
    dgd: &DynamoGraphDeployment,
    worker_dcds: &[DynamoComponentDeployment],
    hash: &str,
) -> (Vec<String>, usize) {
    let by_name: BTreeMap<String, &DynamoComponentDeployment> =
        worker_dcds.iter().map(|d| (d.name_any(), d)).collect();
    let workers: Vec<&DynamoComponentDeploymentSharedSpec> = dgd
        .spec
        .components
        .iter()
        .filter(|c| naming::is_worker(c.r#type))
        .collect();
    let mut updated: Vec<String> = workers
        .iter()
        .filter(|c| {
            let name = naming::dcd_name(dgd, c, Some(hash));
            by_name.get(&name).is_some_and(|d| {
                let ready = d
                    .status
                    .as_ref()
                    .and_then(|s| s.component.as_ref())
                    .and_then(|c| c.ready_replicas)
                    .unwrap_or(0);
                d.is_ready().is_ok() && ready >= c.replicas.unwrap_or(1)
            })
        })
        .map(|c| c.name.clone())
        .collect();
    updated.sort();
    (updated, workers.len())
}

fn controlled_by(meta: &ObjectMeta, dgd: &DynamoGraphDeployment) -> bool {
    let uid = dgd.metadata.uid.as_deref();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd, reasons};
    use api::ComponentKind;
    use api::ComponentType;
    use api::DynamoComponentDeploymentSpec;
    use api::DynamoComponentDeploymentStatus;
    use api::dcd::CONDITION_AVAILABLE;
    use api::v1beta1::ComponentReplicaStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kit::conditions::{self, Status};
    use kit::testing::{Double, Verb};
    use kube::Resource;

    fn graph(d: &Double) -> DynamoGraphDeployment {
        d.insert(dgd(
            "g",
            vec![
                component("Frontend", ComponentType::Frontend),
                component("Worker", ComponentType::Worker),
            ],
        ))
    }

    fn stored(d: &Double) -> DynamoGraphDeployment {
        d.object(Some("ns"), "g").unwrap()
    }

    fn set_image(d: &Double, image: &str) {
        let mut g = stored(d);
        let worker = g
            .spec
            .components
            .iter()
            .position(|c| c.name == "Worker")
            .unwrap();
        g.spec.components[worker]
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some(image.into());
        d.insert(g);
    }

    /// A worker DCD of `g` at `hash`, ready with `ready` replicas when given.
    fn worker_dcd(d: &Double, hash: &str, ready: Option<i32>, created: i64) {
        let g = stored(d);
        let spec = g.spec.component("Worker").unwrap().clone();
        let available = ready.is_some();
        d.insert(DynamoComponentDeployment {
            metadata: ObjectMeta {
                name: Some(naming::dcd_name(&g, &spec, Some(hash))),
                namespace: Some("ns".into()),
                labels: Some(
                    [
                        (
                            labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                            "g".to_string(),
                        ),
                        (labels::DYNAMO_WORKER_HASH.to_string(), hash.to_string()),
                    ]
                    .into(),
                ),
                owner_references: Some(vec![g.controller_owner_ref(&()).unwrap()]),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
                )),
                generation: Some(1),
                ..Default::default()
            },
            spec: DynamoComponentDeploymentSpec {
                backend_framework: None,
                component: spec,
            },
            status: Some(DynamoComponentDeploymentStatus {
                observed_generation: Some(1),
                conditions: vec![conditions::new(
                    CONDITION_AVAILABLE,
                    Status::from(available),
                    "DeploymentReady",
                    "",
                    1,
                )],
                component: Some(ComponentReplicaStatus {
                    component_kind: ComponentKind::Deployment,
                    component_name: None,
                    component_names: vec![],
                    runtime_namespace: None,
                    gpus_per_engine: None,
                    gpus_per_replica: None,
                    replicas: 1,
                    updated_replicas: 1,
                    ready_replicas: ready,
                    available_replicas: ready,
                    scheduled_replicas: None,
                }),
            }),
        });
    }

    /// One pass: the rollout step on the stored graph, its status persisted as the root would.
    async fn pass(d: &Double) -> (WorkerGeneration, Outcome<DynamoGraphDeploymentStatus>) {
        let g = stored(d);
        let mut out = Outcome::new(g.status.clone().unwrap_or_default());
        let plan = Rollout::new(d.reader(), d.writer())
            .reconcile(&g, &mut out)
            .await
            .unwrap();
        let mut g = stored(d);
        g.status = Some(out.status.clone());
        d.insert(g);
        (plan, out)
    }

    fn recorded(d: &Double) -> Option<String> {
        recorded_hash(&stored(d))
    }

    #[tokio::test]
    async fn first_deploy_records_the_hash_and_a_second_run_writes_nothing() {
        let d = Double::new();
        let g = graph(&d);
        let (plan, out) = pass(&d).await;
        assert_eq!(plan, WorkerGeneration::settled(worker_hash(&g)));
        assert_eq!(recorded(&d), Some(worker_hash(&g)));
        assert!(out.events.is_empty());
        assert!(out.status.rolling_update.is_none());
        d.clear_writes();
        let (again, out) = pass(&d).await;
        assert_eq!(again, plan);
        assert!(
            d.writes()
                .iter()
                .all(|w| w.kind != "DynamoGraphDeployment" || w.verb != Verb::Patch)
        );
        assert!(out.events.is_empty());
    }

    #[tokio::test]
    async fn a_lost_record_is_recovered_from_the_worker_dcds() {
        let d = Double::new();
        let g = graph(&d);
        let hash = worker_hash(&g);
        worker_dcd(&d, &hash, Some(1), 100);
        // No annotation (as after `kubectl replace`): not a first deploy, the DCD says which
        // generation serves; the record is restored.
        let (plan, out) = pass(&d).await;
        assert_eq!(plan, WorkerGeneration::settled(hash.clone()));
        assert_eq!(recorded(&d), Some(hash));
        assert!(out.events.is_empty());
    }

    #[tokio::test]
    async fn a_lost_record_with_an_old_generation_rolls_instead_of_leaking_it() {
        let d = Double::new();
        graph(&d);
        worker_dcd(&d, "0ld0ld00", Some(1), 100);
        let (plan, out) = pass(&d).await;
        assert!(plan.rolling);
        assert!(plan.retained.contains("0ld0ld00"));
        assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_STARTED]);
        // The record is only written when the new generation takes over.
        assert_eq!(recorded(&d), None);
    }

    #[tokio::test]
    async fn the_oldest_generation_is_the_active_one() {
        let d = Double::new();
        graph(&d);
        worker_dcd(&d, "bbbbbbbb", Some(1), 200);
        worker_dcd(&d, "aaaaaaaa", Some(1), 100);
        let dcds: Vec<DynamoComponentDeployment> = d.objects();
        assert_eq!(recover_active(&dcds).as_deref(), Some("aaaaaaaa"));
    }

    #[tokio::test]
    async fn a_worker_change_rolls_surge_first_and_completes_when_the_new_generation_is_ready() {
        let d = Double::new();
        let g = graph(&d);
        let old = worker_hash(&g);
        pass(&d).await;
        worker_dcd(&d, &old, Some(1), 100);

        set_image(&d, "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0");
        let new = worker_hash(&stored(&d));
        assert_ne!(old, new);

        // Pending: the new generation is rendered next to the old one.
        let (plan, out) = pass(&d).await;
        assert_eq!(plan.target, new);
        assert_eq!(plan.retained, BTreeSet::from([old.clone()]));
        assert!(plan.rolling);
        let status = out.status.rolling_update.clone().unwrap();
        assert_eq!(status.phase, Some(RollingUpdatePhase::Pending));
        assert!(status.start_time.is_some());
        assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_STARTED]);
        assert_eq!(recorded(&d), Some(old.clone()));

        // InProgress.
        let (plan, out) = pass(&d).await;
        assert!(plan.rolling);
        assert_eq!(
            out.status.rolling_update.as_ref().unwrap().phase,
            Some(RollingUpdatePhase::InProgress)
        );
        assert!(out.events.is_empty());

        // The new DCD exists but is not ready: still in progress, nothing recorded.
        worker_dcd(&d, &new, None, 300);
        let (plan, out) = pass(&d).await;
        assert!(plan.rolling);
        assert!(
            out.status
                .rolling_update
                .as_ref()
                .unwrap()
                .updated_components
                .is_empty()
        );
        assert_eq!(recorded(&d), Some(old.clone()));

        // Ready: completed, the new hash recorded, the old generation no longer retained.
        worker_dcd(&d, &new, Some(1), 300);
        let (plan, out) = pass(&d).await;
        assert_eq!(plan, WorkerGeneration::settled(new.clone()));
        let status = out.status.rolling_update.clone().unwrap();
        assert_eq!(status.phase, Some(RollingUpdatePhase::Completed));
        assert!(status.end_time.is_some());
        assert_eq!(status.updated_components, ["Worker"]);
        assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_COMPLETED]);
        assert_eq!(recorded(&d), Some(new));

        // Settled: nothing more to do.
        d.clear_writes();
        let (_, out) = pass(&d).await;
        assert!(out.events.is_empty());
        assert!(d.writes().iter().all(|w| w.verb != Verb::Patch));
    }

    #[tokio::test]
    async fn a_revert_mid_rollout_keeps_the_serving_generation() {
        let d = Double::new();
        let g = graph(&d);
        let old = worker_hash(&g);
        pass(&d).await;
        worker_dcd(&d, &old, Some(1), 100);
        set_image(&d, "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0");
        pass(&d).await;
        pass(&d).await;
        // Back to the original image: the active generation is the target again.
        set_image(&d, "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1");
        let (plan, out) = pass(&d).await;
        assert_eq!(plan, WorkerGeneration::settled(old.clone()));
        assert_eq!(
            out.status.rolling_update.unwrap().phase,
            Some(RollingUpdatePhase::Completed)
        );
        assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_COMPLETED]);
        assert_eq!(recorded(&d), Some(old));
    }

    #[tokio::test]
    async fn multinode_graphs_record_the_hash_and_warn_after_the_write() {
        let d = Double::new();
        let mut g = dgd("g", vec![component("Worker", ComponentType::Worker)]);
        g.spec.components[0].multinode = Some(api::common::MultinodeSpec { node_count: 2 });
        d.insert(g);
        let (_, out) = pass(&d).await;
        assert!(out.events.is_empty(), "first generation: no warning");
        set_image(&d, "other");
        // A failed write queues no warning.
        d.fail_next(
            Verb::Patch,
            "DynamoGraphDeployment",
            kit::Error::Conflict("x".into()),
        );
        let g = stored(&d);
        let mut out = Outcome::new(g.status.clone().unwrap_or_default());
        let err = Rollout::new(d.reader(), d.writer())
            .reconcile(&g, &mut out)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Record(_)));
        assert!(out.events.is_empty());
        let (plan, out) = pass(&d).await;
        assert!(!plan.rolling);
        assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_NOT_SUPPORTED]);
        assert_eq!(out.events[0].type_, kit::EventType::Warning);
        assert_eq!(recorded(&d), Some(worker_hash(&stored(&d))));
    }

    #[tokio::test]
    async fn a_list_failure_is_the_steps_error() {
        let d = Double::new();
        let g = graph(&d);
        d.fail_next(
            Verb::List,
            "DynamoComponentDeployment",
            kit::Error::Forbidden("no".into()),
        );
        let mut out = Outcome::new(DynamoGraphDeploymentStatus::default());
        let err = Rollout::new(d.reader(), d.writer())
            .reconcile(&g, &mut out)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::List(_)));
        assert!(d.writes().is_empty());
    }

    #[test]
    fn the_hash_covers_worker_pods_only() {
        let mut g = dgd(
            "g",
            vec![
                component("Frontend", ComponentType::Frontend),
                component("Worker", ComponentType::Worker),
            ],
        );
        let base = worker_hash(&g);
        assert_eq!(base.len(), 8);
        assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
        // Replicas, scaling adapter and the frontend do not count.
        g.spec.components[1].replicas = Some(5);
        g.spec.components[1].scaling_adapter = Some(Default::default());
        g.spec.components[0].replicas = Some(3);
        g.spec.components[0].pod_template = None;
        assert_eq!(worker_hash(&g), base);
        // The worker pod template, graph env and backend do.
        let mut image = g.clone();
        image.spec.components[1]
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("x".into());
        assert_ne!(worker_hash(&image), base);
        let mut env = g.clone();
        env.spec.env = vec![k8s_openapi::api::core::v1::EnvVar {
            name: "A".into(),
            value: Some("1".into()),
            ..Default::default()
        }];
        assert_ne!(worker_hash(&env), base);
        let mut backend = g.clone();
        backend.spec.backend_framework = Some(api::BackendFramework::Vllm);
        assert_ne!(worker_hash(&backend), base);
    }
}
