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

use api::{DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use grove_render::Workers;
use kit::{Outcome, Writer};
use reconcilers::rollout::{
    EVENT_ROLLING_UPDATE_NOT_SUPPORTED, record_worker_hash, recorded_hash, worker_hash,
};

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
        let changed = recorded.as_deref().is_some_and(|r| r != hash);
        let written = record_worker_hash(self.writer.as_ref(), dgd, &hash)
            .await
            .map_err(Error::Record)?;
        if written && changed {
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
