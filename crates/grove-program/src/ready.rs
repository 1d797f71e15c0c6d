//! The `Ready` policy of the grove pathway: one pure function, installed once per reconcile by
//! the program. Reasons and messages are upstream's (users alert on them).
//!
//! | observed | state | Ready | reason | message |
//! | --- | --- | --- | --- | --- |
//! | a `WaitForCheckpoint` component's checkpoint is not ready | `pending` | False | `waiting_for_checkpoint` | `Waiting for checkpoints: <component> (<checkpoint>), ...` |
//! | every component's PodClique / PodCliqueScalingGroup ready | `successful` | True | `all_resources_are_ready` | `All resources are ready` |
//! | otherwise | `pending` | False | the readiness classification (`insufficient_capacity`, `updating`, `pods_not_ready`, `some_resources_are_not_ready`, `mixed_not_ready_reasons`) | `Resources not ready: <pcs>: <component>: <why>; ...` |
//!
//! Grove has no managed rolling updates, so `rolling_update_in_progress` never applies here.

use api::DgdState;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use reconcilers::ready;

use crate::readiness::Readiness;

pub use reconcilers::ready::{
    MESSAGE_ALL_READY, REASON_WAITING_FOR_CHECKPOINT, waiting_for_checkpoints,
};

/// The graph state and `Ready` condition at `generation`, given the components waiting for a
/// checkpoint ([`waiting_for_checkpoints`]), the PodCliqueSet's name and the readiness of the
/// components.
pub fn ready_condition(
    generation: i64,
    waiting: &[String],
    pcs_name: &str,
    readiness: &Readiness,
) -> (DgdState, Condition) {
    if let Some(waiting) = ready::waiting(generation, waiting) {
        return waiting;
    }
    if readiness.ready {
        return ready::all_ready(generation);
    }
    ready::not_ready(
        generation,
        readiness.classification,
        format!("Resources not ready: {pcs_name}: {}", readiness.message),
    )
}
