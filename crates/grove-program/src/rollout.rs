//! The unsupported rollout: Grove rolls PodCliques itself, so the managed rolling update of the
//! component pathway (two worker generations side by side) is refused.
//!
//! The worker generation is still tracked, with the component pathway's hash
//! ([`reconcilers::rollout::worker_hash`]) and record (`nvidia.com/current-worker-hash-v2` on
//! the graph, written by the program through [`reconcilers::rollout::WorkerHashRecord`]):
//! | observed | record | event |
//! | --- | --- | --- |
//! | nothing recorded (first deploy) | the hash | none |
//! | recorded = current | nothing | none |
//! | recorded ≠ current (the worker spec changed: the edge) | the new hash | Warning `RollingUpdateNotSupported`, queued only after the record write succeeded and changed the graph |
//!
//! [`resolve`] is pure: it returns the [`Workers`] rendering needs (the current hash, and whether
//! it changed since the recorded one) and the [`Record`] the program writes.

use api::DynamoGraphDeployment;
use grove_render::Workers;
use reconcilers::rollout::{Record, recorded_hash, worker_hash};

pub use reconcilers::rollout::MESSAGE_ROLLING_UPDATE_NOT_SUPPORTED;

/// Why the rollout step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The worker hash could not be recorded on the graph.
    #[error("record the active worker hash on the DynamoGraphDeployment: {0}")]
    Record(#[source] kit::Error),
}

/// The worker generation of `dgd` and the record that keeps it.
pub fn resolve(dgd: &DynamoGraphDeployment) -> (Workers, Record) {
    let hash = worker_hash(dgd);
    let recorded = recorded_hash(dgd);
    let changed = recorded.as_deref().is_some_and(|r| r != hash);
    let record = Record {
        hash: hash.clone(),
        unsupported_from: recorded,
    };
    (Workers { hash, changed }, record)
}
