//! The topology condition reconciler: projects Grove's `TopologyLevelsUnavailable` condition of
//! the PodCliqueSet onto the graph's `TopologyLevelsAvailable` condition. It runs only for
//! graphs with a topology constraint or a Grove topology provider override, reads only the
//! PodCliqueSet, and never writes.
//!
//! | Grove's `TopologyLevelsUnavailable` | ours | reason | message |
//! | --- | --- | --- | --- |
//! | PodCliqueSet missing or unreadable | unchanged | | |
//! | absent | `Unknown` | `TopologyConditionPending` | `Waiting for topology condition from the scheduling framework` |
//! | `True`, reason `ClusterTopologyNotFound` | `False` | `TopologyDefinitionNotFound` | Grove's message |
//! | `True`, any other reason | `False` | `TopologyLevelsUnavailable` | Grove's message |
//! | `False` / `Unknown` | `True` | `AllTopologyLevelsAvailable` | `All required topology levels are available in the cluster topology` |
//!
//! When ours becomes `False` (or its reason or message changes while `False`), a Warning event
//! with that reason, `Topology constraints no longer enforced: <message>`, is queued for the
//! root to emit after the status is persisted.

use std::convert::Infallible;
use std::sync::Arc;

use api::DynamoGraphDeployment;
use api::grove::{
    CONDITION_TOPOLOGY_LEVELS_UNAVAILABLE, PodCliqueSet, REASON_CLUSTER_TOPOLOGY_NOT_FOUND,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::conditions::{self, Status};
use kit::{Event, Reader, ReaderExt};
use kube::ResourceExt;

/// Our condition type.
pub const CONDITION_TOPOLOGY_LEVELS_AVAILABLE: &str = "TopologyLevelsAvailable";
/// Reason: every required level exists.
pub const REASON_ALL_TOPOLOGY_LEVELS_AVAILABLE: &str = "AllTopologyLevelsAvailable";
/// Reason: Grove reports unavailable levels.
pub const REASON_TOPOLOGY_LEVELS_UNAVAILABLE: &str = "TopologyLevelsUnavailable";
/// Reason: the ClusterTopology does not exist.
pub const REASON_TOPOLOGY_DEFINITION_NOT_FOUND: &str = "TopologyDefinitionNotFound";
/// Reason: Grove has not reported yet.
pub const REASON_TOPOLOGY_CONDITION_PENDING: &str = "TopologyConditionPending";
/// Message while Grove has not reported.
pub const MESSAGE_TOPOLOGY_CONDITION_PENDING: &str =
    "Waiting for topology condition from the scheduling framework";
/// Message when every level is available.
pub const MESSAGE_ALL_TOPOLOGY_LEVELS_AVAILABLE: &str =
    "All required topology levels are available in the cluster topology";

/// The topology condition reconciler.
pub struct TopologyCondition {
    reader: Arc<dyn Reader>,
}

impl TopologyCondition {
    /// A reconciler reading the PodCliqueSet with `reader`.
    pub fn new(reader: Arc<dyn Reader>) -> Self {
        TopologyCondition { reader }
    }

    /// `TopologyLevelsAvailable` from the PodCliqueSet `pcs_name` of `dgd` (`None`: leave the
    /// condition as it is), with the Warning on a transition to `False` from the graph's
    /// current condition. Never fails: an unreadable PodCliqueSet leaves the condition.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
        pcs_name: &str,
    ) -> kit::Step<Option<Condition>, Infallible> {
        if !dgd.spec.has_topology_constraint() && !grove_render::has_topology_overrides(dgd) {
            return kit::Step::ok(None);
        }
        let pcs = match self
            .reader
            .get::<PodCliqueSet>(dgd.namespace().as_deref(), pcs_name)
            .await
        {
            Ok(Some(pcs)) => pcs,
            Ok(None) => return kit::Step::ok(None),
            Err(error) => {
                tracing::debug!(dgd = %kit::object::key_of(dgd), %error, "topology condition: PodCliqueSet unreadable; condition unchanged");
                return kit::Step::ok(None);
            }
        };
        let generation = dgd.metadata.generation.unwrap_or_default();
        let condition = condition(&pcs, generation);
        let current = dgd.status.as_ref().map(|s| s.conditions.as_slice());
        let previous = conditions::find(
            current.unwrap_or_default(),
            CONDITION_TOPOLOGY_LEVELS_AVAILABLE,
        );
        let became_false = condition.status == Status::False.as_str()
            && previous.is_none_or(|p| {
                p.status != condition.status
                    || p.reason != condition.reason
                    || p.message != condition.message
            });
        let mut events = Vec::new();
        if became_false {
            tracing::info!(dgd = %kit::object::key_of(dgd), reason = %condition.reason, message = %condition.message, "topology constraints no longer enforced");
            events.push(Event::warning(
                &condition.reason,
                format!(
                    "Topology constraints no longer enforced: {}",
                    condition.message
                ),
            ));
        }
        kit::Step::new(Ok(Some(condition)), events)
    }
}

/// Our condition for `pcs` at graph `generation` (the table in the module docs).
pub fn condition(pcs: &PodCliqueSet, generation: i64) -> Condition {
    let grove = pcs
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, CONDITION_TOPOLOGY_LEVELS_UNAVAILABLE));
    match grove {
        None => conditions::new(
            CONDITION_TOPOLOGY_LEVELS_AVAILABLE,
            Status::Unknown,
            REASON_TOPOLOGY_CONDITION_PENDING,
            MESSAGE_TOPOLOGY_CONDITION_PENDING,
            generation,
        ),
        Some(c) if c.status == Status::True.as_str() => {
            let reason = if c.reason == REASON_CLUSTER_TOPOLOGY_NOT_FOUND {
                REASON_TOPOLOGY_DEFINITION_NOT_FOUND
            } else {
                REASON_TOPOLOGY_LEVELS_UNAVAILABLE
            };
            conditions::new(
                CONDITION_TOPOLOGY_LEVELS_AVAILABLE,
                Status::False,
                reason,
                c.message.clone(),
                generation,
            )
        }
        Some(_) => conditions::new(
            CONDITION_TOPOLOGY_LEVELS_AVAILABLE,
            Status::True,
            REASON_ALL_TOPOLOGY_LEVELS_AVAILABLE,
            MESSAGE_ALL_TOPOLOGY_LEVELS_AVAILABLE,
            generation,
        ),
    }
}
