//! The unsupported-rollout reconciler: Grove rolls PodCliques itself, so the managed rolling
//! update of the component pathway (two worker generations side by side) is refused.
//!
//! The worker generation is still tracked, with the component pathway's hash
//! ([`reconcilers::rollout::worker_hash`]) and record (`nvidia.com/current-worker-hash-v2` on
//! the graph; a v1 `nvidia.com/current-worker-hash` is migrated and dropped):
//! | observed | writes | event |
//! | --- | --- | --- |
//! | nothing recorded (first deploy) | record the hash | none |
//! | recorded = current | nothing | none |
//! | recorded ≠ current (the worker spec changed: the edge) | record the new hash | Warning `RollingUpdateNotSupported`, queued only after the record write succeeded and changed the graph |
//!
//! It returns the [`Workers`] rendering needs: the current hash, and whether it changed
//! since the recorded one.

use std::sync::Arc;

use api::labels;
use api::{DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use grove_render::Workers;
use kit::{Outcome, Patch, Writer, WriterExt};
use kube::ResourceExt;
use reconcilers::rollout::{EVENT_ROLLING_UPDATE_NOT_SUPPORTED, recorded_hash, worker_hash};
use serde_json::{Value, json};

/// Why the rollout step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The worker hash could not be recorded on the graph.
    #[error("record the active worker hash on the DynamoGraphDeployment: {0}")]
    Record(#[source] kit::Error),
}

/// Message of the `RollingUpdateNotSupported` warning (upstream's text).
pub const MESSAGE_ROLLING_UPDATE_NOT_SUPPORTED: &str = "Worker spec changed but custom rolling updates are not supported for Grove/multinode deployments";

/// The unsupported-rollout reconciler.
pub struct UnsupportedRollout {
    writer: Arc<dyn Writer>,
}

impl UnsupportedRollout {
    /// A rollout reconciler recording the worker hash with `writer`.
    pub fn new(writer: Arc<dyn Writer>) -> Self {
        UnsupportedRollout { writer }
    }

    /// Record the worker generation of `dgd`; queue the refusal warning in `out` on an edge.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        out: &mut Outcome<DynamoGraphDeploymentStatus>,
    ) -> Result<Workers, Error> {
        let hash = worker_hash(dgd);
        let recorded = recorded_hash(dgd);
        let annotations = dgd.metadata.annotations.as_ref();
        let v2 = annotations.and_then(|a| a.get(labels::CURRENT_WORKER_HASH_V2));
        let has_v1 = annotations.is_some_and(|a| a.contains_key(labels::CURRENT_WORKER_HASH));
        let changed = recorded.as_deref().is_some_and(|r| r != hash);
        if v2.map(String::as_str) == Some(hash.as_str()) && !has_v1 {
            return Ok(Workers { hash, changed });
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
        if applied.changed && changed {
            tracing::info!(
                dgd = %kit::object::key_of(dgd),
                from = recorded.as_deref().unwrap_or_default(),
                to = %hash,
                "worker spec changed; Grove rolls the PodCliques itself (managed rolling updates are not supported)"
            );
            out.warning(
                EVENT_ROLLING_UPDATE_NOT_SUPPORTED,
                MESSAGE_ROLLING_UPDATE_NOT_SUPPORTED,
            );
        }
        Ok(Workers { hash, changed })
    }
}
