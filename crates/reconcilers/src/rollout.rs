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
//! The hash input follows upstream's v2 rules (same fields, same exclusions), hashed with SHA-256
//! over canonical JSON (object keys sorted), first 8 hex digits. The digest is not byte-identical
//! to upstream's (Go's JSON encoding of pod templates differs from ours), so a graph adopted from
//! the upstream operator rolls its workers once.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use api::common::RollingUpdatePhase;
use api::labels;
use api::v1beta1::{DynamoComponentDeploymentSharedSpec, RollingUpdateStatus};
use api::{DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::{Outcome, Patch, Reader, ReaderExt, Selector, Writer, WriterExt};
use kube::ResourceExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::naming;

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

/// Version tag of the hash input (upstream's v2 input).
const HASH_INPUT_VERSION: &str = "dgd-worker-rollout-v2";

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

/// The worker hash of a graph: 8 hex digits of SHA-256 over the canonical JSON of upstream's v2
/// hash input (backend framework, graph env, and per worker component the fields that shape its
/// pods: globalDynamoNamespace, podTemplate, multinode, sharedMemorySize, frontendSidecar,
/// compilationCache, experimental). Replicas, scaling adapter, model reference, EPP config and
/// topology constraints do not count.
pub fn worker_hash(dgd: &DynamoGraphDeployment) -> String {
    let spec = &dgd.spec;
    let mut workers = serde_json::Map::new();
    for c in spec
        .components
        .iter()
        .filter(|c| naming::is_worker(c.r#type))
    {
        workers.insert(c.name.clone(), worker_input(c));
    }
    let mut input = serde_json::Map::new();
    input.insert("version".into(), json!(HASH_INPUT_VERSION));
    if let Some(backend) = spec.backend_framework {
        input.insert("backendFramework".into(), json!(backend.as_str()));
    }
    if !spec.env.is_empty() {
        input.insert("env".into(), json!(spec.env));
    }
    if !workers.is_empty() {
        input.insert("workers".into(), Value::Object(workers));
    }
    let digest = Sha256::digest(canonical(&Value::Object(input)).as_bytes());
    hex::encode(digest)[..8].to_string()
}

fn worker_input(c: &DynamoComponentDeploymentSharedSpec) -> Value {
    let mut m = serde_json::Map::new();
    if c.global_dynamo_namespace {
        m.insert("globalDynamoNamespace".into(), json!(true));
    }
    if let Some(template) = &c.pod_template {
        let value = json!(template);
        if value.as_object().is_some_and(|o| !o.is_empty()) {
            m.insert("podTemplate".into(), value);
        }
    }
    if let Some(v) = &c.multinode {
        m.insert("multinode".into(), json!(v));
    }
    if let Some(v) = &c.shared_memory_size {
        m.insert("sharedMemorySize".into(), json!(v));
    }
    if let Some(v) = &c.frontend_sidecar {
        m.insert("frontendSidecar".into(), json!(v));
    }
    if let Some(v) = &c.compilation_cache {
        m.insert("compilationCache".into(), json!(v));
    }
    if let Some(v) = &c.experimental {
        m.insert("experimental".into(), json!(v));
    }
    Value::Object(m)
}

/// JSON with object keys sorted at every level, independent of map implementations.
fn canonical(value: &Value) -> String {
    fn write(out: &mut String, value: &Value) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{}:", Value::String(k.clone()));
                    write(out, &map[k]);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(out, v);
                }
                out.push(']');
            }
            other => {
                let _ = write!(out, "{other}");
            }
        }
    }
    let mut out = String::new();
    write(&mut out, value);
    out
}
