//! The `Ready` policy of the component pathway: one pure function, installed once per
//! reconcile by the program. Reasons and messages are upstream's (users alert on them).
//!
//! | observed | state | Ready | reason | message |
//! | --- | --- | --- | --- | --- |
//! | rolling update in progress, a pod of the new generation unschedulable past the progress deadline | `pending` | False | `rolling_update_stuck` | `Rolling update cannot progress: <component>: pods <pod>, ... unschedulable for <n>s: <scheduler message>; ...` |
//! | rolling update pending or in progress | `pending` | False | `rolling_update_in_progress` | `Rolling update in progress` |
//! | a `WaitForCheckpoint` component's checkpoint is not ready | `pending` | False | `waiting_for_checkpoint` | `Waiting for checkpoints: <component> (<checkpoint>), ...` |
//! | every component DCD ready | `successful` | True | `all_resources_are_ready` | `All resources are ready` |
//! | otherwise | `pending` | False | `some_resources_are_not_ready` | `Resources not ready: <dcd>: <why>; ...` |
//!
//! A DCD is ready when its controller observed its latest generation and reports
//! `Available=True` (`DynamoComponentDeployment::is_ready`), so a rollout's old pods never make a
//! graph look ready early.

use api::DgdState;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use reconcilers::rollout::{
    MESSAGE_ROLLING_UPDATE_IN_PROGRESS, REASON_ROLLING_UPDATE_IN_PROGRESS,
    REASON_ROLLING_UPDATE_STUCK, WorkerGeneration,
};

use crate::workloads::Readiness;

pub use reconcilers::ready::{
    MESSAGE_ALL_READY, REASON_ALL_READY, REASON_SOME_NOT_READY, REASON_WAITING_FOR_CHECKPOINT,
    waiting_for_checkpoints,
};

/// Whether a rolling update runs, and why it cannot progress when it cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RollingUpdate<'a> {
    /// No rolling update.
    Idle,
    /// Pending or in progress.
    Running,
    /// In progress but unable to progress, with the reason.
    Stuck(&'a str),
}

impl<'a> RollingUpdate<'a> {
    /// The rolling update of a rollout step's plan.
    pub fn of(plan: &'a WorkerGeneration) -> Self {
        match (&plan.stuck, plan.rolling) {
            (Some(why), true) => RollingUpdate::Stuck(why),
            (None, true) => RollingUpdate::Running,
            (_, false) => RollingUpdate::Idle,
        }
    }
}

/// The graph state and `Ready` condition at `generation`, given the rolling update, the
/// components waiting for a checkpoint ([`waiting_for_checkpoints`]) and the readiness of every
/// desired DCD (in the order to report them).
pub fn ready_condition(
    generation: i64,
    rolling: RollingUpdate<'_>,
    waiting: &[String],
    readiness: &[Readiness],
) -> (DgdState, Condition) {
    let (reason, message) = match rolling {
        RollingUpdate::Idle => ("", String::new()),
        RollingUpdate::Running => (
            REASON_ROLLING_UPDATE_IN_PROGRESS,
            MESSAGE_ROLLING_UPDATE_IN_PROGRESS.to_string(),
        ),
        RollingUpdate::Stuck(why) => (REASON_ROLLING_UPDATE_STUCK, why.to_string()),
    };
    if !reason.is_empty() {
        return reconcilers::ready::not_ready(generation, reason, message);
    }
    if let Some(waiting) = reconcilers::ready::waiting(generation, waiting) {
        return waiting;
    }
    let not_ready: Vec<String> = readiness
        .iter()
        .filter_map(|r| {
            r.not_ready
                .as_ref()
                .map(|why| format!("{}: {why}", r.resource))
        })
        .collect();
    if not_ready.is_empty() {
        reconcilers::ready::all_ready(generation)
    } else {
        reconcilers::ready::not_ready(
            generation,
            REASON_SOME_NOT_READY,
            format!("Resources not ready: {}", not_ready.join("; ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(resource: &str, not_ready: Option<&str>) -> Readiness {
        Readiness {
            resource: resource.into(),
            component: resource.into(),
            not_ready: not_ready.map(str::to_string),
        }
    }

    #[test]
    fn rollout_wins_over_readiness() {
        let (state, c) = ready_condition(
            4,
            RollingUpdate::Running,
            &["w (c)".into()],
            &[r("a", None)],
        );
        assert_eq!(state, DgdState::Pending);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "False",
                "rolling_update_in_progress",
                "Rolling update in progress"
            )
        );
        assert_eq!(c.observed_generation, Some(4));
    }

    #[test]
    fn a_stuck_rollout_says_why() {
        let why = "Rolling update cannot progress: W: pod w-1 unschedulable for 601s: 0/3 nodes are available";
        let (state, c) = ready_condition(4, RollingUpdate::Stuck(why), &[], &[r("a", None)]);
        assert_eq!(state, DgdState::Pending);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", "rolling_update_stuck", why)
        );
        let mut plan = WorkerGeneration::settled("h");
        assert_eq!(RollingUpdate::of(&plan), RollingUpdate::Idle);
        plan.rolling = true;
        assert_eq!(RollingUpdate::of(&plan), RollingUpdate::Running);
        plan.stuck = Some(why.into());
        assert_eq!(RollingUpdate::of(&plan), RollingUpdate::Stuck(why));
    }

    #[test]
    fn all_ready_is_successful() {
        let (state, c) =
            ready_condition(1, RollingUpdate::Idle, &[], &[r("a", None), r("b", None)]);
        assert_eq!(state, DgdState::Successful);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("True", "all_resources_are_ready", "All resources are ready")
        );
    }

    #[test]
    fn a_checkpoint_wait_wins_over_readiness() {
        let (state, c) = ready_condition(
            1,
            RollingUpdate::Idle,
            &["w (ckpt-1)".into()],
            &[r("a", None)],
        );
        assert_eq!(state, DgdState::Pending);
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            (
                "waiting_for_checkpoint",
                "Waiting for checkpoints: w (ckpt-1)"
            )
        );
    }

    #[test]
    fn an_empty_graph_is_ready() {
        let (state, c) = ready_condition(1, RollingUpdate::Idle, &[], &[]);
        assert_eq!(state, DgdState::Successful);
        assert_eq!(c.status, "True");
    }

    #[test]
    fn not_ready_names_every_component_in_order() {
        let (state, c) = ready_condition(
            2,
            RollingUpdate::Idle,
            &[],
            &[
                r(
                    "g-frontend",
                    Some("spec not yet processed: generation=1, observedGeneration=0"),
                ),
                r("g-planner", None),
                r(
                    "g-worker-1234abcd",
                    Some("Component deployment not ready - Available condition not true"),
                ),
            ],
        );
        assert_eq!(state, DgdState::Pending);
        assert_eq!(c.reason, "some_resources_are_not_ready");
        assert_eq!(
            c.message,
            "Resources not ready: g-frontend: spec not yet processed: generation=1, observedGeneration=0; \
             g-worker-1234abcd: Component deployment not ready - Available condition not true"
        );
    }
}
