//! The graph's record of its active worker generation: the annotation
//! `nvidia.com/current-worker-hash-v2` on the DynamoGraphDeployment (a v1
//! `nvidia.com/current-worker-hash` is migrated and dropped).
//!
//! This is the one write a program makes on the graph itself. It is not a nested step's: the
//! steps' writers cannot write the graph, so the program holds a [`WorkerHashRecord`] and writes
//! the record a step asked for ([`Record`]) once that step succeeded.
//!
//! | observed | writes | event |
//! | --- | --- | --- |
//! | the hash is recorded, no v1 annotation | nothing | none |
//! | another hash (or none) is recorded | the hash | Warning `RollingUpdateNotSupported` when the record replaced the generation the graph cannot roll from ([`Record::unsupported_from`]), queued only after the write succeeded and changed the graph |

use std::sync::Arc;

use api::{DynamoGraphDeployment, labels};
use kit::{Event, Patch, Scoped, Writer, WriterExt};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::EVENT_ROLLING_UPDATE_NOT_SUPPORTED;

/// Message of the `RollingUpdateNotSupported` warning (upstream's text).
pub const MESSAGE_ROLLING_UPDATE_NOT_SUPPORTED: &str = "Worker spec changed but custom rolling updates are not supported for Grove/multinode deployments";

/// A record a step asks its program to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The worker hash to record as active.
    pub hash: String,
    /// The generation the graph was on when it cannot have a managed rollout (Grove, or a
    /// multinode component): replacing it by another hash queues the warning.
    pub unsupported_from: Option<String>,
}

/// Writes the active worker hash on the graph, with a writer for DynamoGraphDeployments only.
pub struct WorkerHashRecord {
    writer: Arc<dyn Writer>,
}

impl WorkerHashRecord {
    /// A record writing through `writer`, scoped here to DynamoGraphDeployments.
    pub fn new(writer: Arc<dyn Writer>) -> Self {
        WorkerHashRecord {
            writer: Scoped::new(writer).allow::<DynamoGraphDeployment>().build(),
        }
    }

    /// Write `record` on `dgd` (no request when it is already there); the warning as the
    /// module docs say.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        record: &Record,
    ) -> kit::Step<(), kit::Error> {
        let written = match record_worker_hash(self.writer.as_ref(), dgd, &record.hash).await {
            Ok(written) => written,
            Err(error) => return kit::Step::new(Err(error), Vec::new()),
        };
        let mut events = Vec::new();
        if let Some(from) = &record.unsupported_from
            && written
            && *from != record.hash
        {
            tracing::info!(
                dgd = %kit::object::key_of(dgd),
                from = %from,
                to = %record.hash,
                "worker spec changed; managed rolling updates are not supported for Grove/multinode graphs"
            );
            events.push(Event::warning(
                EVENT_ROLLING_UPDATE_NOT_SUPPORTED,
                MESSAGE_ROLLING_UPDATE_NOT_SUPPORTED,
            ));
        }
        kit::Step::new(Ok(()), events)
    }
}

/// Record `hash` as the graph's active worker generation (`current-worker-hash-v2`, dropping
/// the v1 annotation): no request when it is already recorded. Returns whether a write happened
/// and changed the graph.
pub async fn record_worker_hash(
    writer: &dyn Writer,
    dgd: &DynamoGraphDeployment,
    hash: &str,
) -> Result<bool, kit::Error> {
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
    let applied = writer
        .patch::<DynamoGraphDeployment>(
            dgd.namespace().as_deref(),
            &dgd.name_any(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(applied.changed)
}
