//! The graph-level `Ready` reasons and messages both workload programs report (upstream's
//! values), and the list of components waiting for a checkpoint they name.

use api::{DgdState, DynamoGraphDeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::conditions::{self, READY, Status};
use kit::{Event, Outcome};

use crate::checkpoints::CheckpointInfos;

/// Ready reason when every component is ready.
pub const REASON_ALL_READY: &str = "all_resources_are_ready";
/// Ready message when every component is ready.
pub const MESSAGE_ALL_READY: &str = "All resources are ready";
/// Ready reason when some component is not ready (cause unknown or mixed).
pub const REASON_SOME_NOT_READY: &str = "some_resources_are_not_ready";
/// Ready reason while a `WaitForCheckpoint` component waits for its checkpoint.
pub const REASON_WAITING_FOR_CHECKPOINT: &str = "waiting_for_checkpoint";

/// The components (with their checkpoint) whose startup waits for a checkpoint that is not
/// ready yet, sorted.
pub fn waiting_for_checkpoints(infos: &CheckpointInfos) -> Vec<String> {
    let mut waiting: Vec<String> = infos
        .iter()
        .filter(|(_, i)| i.waits())
        .map(|(name, i)| match &i.checkpoint_name {
            Some(ckpt) => format!("{name} ({ckpt})"),
            None => name.clone(),
        })
        .collect();
    waiting.sort();
    waiting
}

/// The graph state and `Ready` condition while components wait for their checkpoints
/// ([`waiting_for_checkpoints`]); none when no component waits.
pub fn waiting(generation: i64, waiting: &[String]) -> Option<(DgdState, Condition)> {
    (!waiting.is_empty()).then(|| {
        not_ready(
            generation,
            REASON_WAITING_FOR_CHECKPOINT,
            format!("Waiting for checkpoints: {}", waiting.join(", ")),
        )
    })
}

/// The graph state and `Ready` condition when every component is ready.
pub fn all_ready(generation: i64) -> (DgdState, Condition) {
    (
        DgdState::Successful,
        conditions::new(
            READY,
            Status::True,
            REASON_ALL_READY,
            MESSAGE_ALL_READY,
            generation,
        ),
    )
}

/// The graph state and `Ready` condition when it is not ready, for `reason` and `message`.
pub fn not_ready(generation: i64, reason: &str, message: String) -> (DgdState, Condition) {
    (
        DgdState::Pending,
        conditions::new(READY, Status::False, reason, message, generation),
    )
}

/// Install a program's `(state, Ready)` in `out`, queuing a Normal event (reason and message of
/// the new condition) when `Ready` changed since the `previous` conditions. The first `False`
/// (a graph starting, whose children were just announced as created) is not announced, as a
/// component's first `Available=False` is not.
pub fn install(
    out: &mut Outcome<DynamoGraphDeploymentStatus>,
    previous: &[Condition],
    (state, ready): (DgdState, Condition),
) {
    out.status.state = state;
    if ready.status == "False" && ready.reason == REASON_SOME_NOT_READY {
        // Children still converging: a new graph's first status may wait for them.
        out.settling();
    }
    conditions::set(&mut out.status.conditions, ready);
    for t in conditions::changed(previous, &out.status.conditions) {
        let starting = t.from.is_none() && t.to.as_deref() == Some("False");
        if t.type_ == READY && t.to.is_some() && !starting {
            out.event(Event::normal(&t.reason, t.message.clone()));
        }
    }
}
