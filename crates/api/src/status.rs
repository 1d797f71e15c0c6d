//! The statuses as reconcile outcomes: [`kit::ReconcileStatus`] for each kind, so a failed step
//! marks the status the way upstream does (state, observedGeneration) and `Ready=False`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::ReconcileStatus;
use kit::conditions::{self, Status};

use crate::checkpoint::{DynamoCheckpointPhase, DynamoCheckpointStatus};
use crate::common::DgdState;
use crate::dcd::{CONDITION_AVAILABLE, DynamoComponentDeploymentStatus};
use crate::scaling_adapter::DynamoGraphDeploymentScalingAdapterStatus;
use crate::v1beta1::DynamoGraphDeploymentStatus;

impl ReconcileStatus for DynamoGraphDeploymentStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }

    /// `state: failed` at `generation`.
    fn set_failed(&mut self, generation: i64, _reason: &str, _message: &str) {
        self.state = DgdState::Failed;
        self.observed_generation = Some(generation);
    }
}

impl ReconcileStatus for DynamoComponentDeploymentStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }

    /// `Available=False` with the failure's reason, at `generation`.
    fn set_failed(&mut self, generation: i64, reason: &str, message: &str) {
        self.observed_generation = Some(generation);
        conditions::set(
            &mut self.conditions,
            conditions::new(
                CONDITION_AVAILABLE,
                Status::False,
                reason,
                message,
                generation,
            ),
        );
    }
}

impl ReconcileStatus for DynamoCheckpointStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }

    /// Phase `Failed` with the message.
    fn set_failed(&mut self, _generation: i64, _reason: &str, message: &str) {
        self.phase = Some(DynamoCheckpointPhase::Failed);
        self.message = Some(message.to_string());
    }
}

impl ReconcileStatus for DynamoGraphDeploymentScalingAdapterStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }

    /// `observedGeneration` at `generation` (the caller sets `Ready=False`).
    fn set_failed(&mut self, generation: i64, _reason: &str, _message: &str) {
        self.observed_generation = Some(generation);
    }
}
