//! The component workload program: one DynamoComponentDeployment per component.
//!
//! [`ComponentProgram`] is a struct of its concrete reconcilers, run once per reconcile in this
//! order (the program owns order and timing; no step writes status):
//!
//! | # | step | does | failure reason |
//! | --- | --- | --- | --- |
//! | 1 | rollout ([`reconcilers::rollout`]) | worker hash, rolling update phase, active hash record | `rolling_update_failed` |
//! | 2 | shared resources | RBAC, PVCs, discovery, GMS claims, checkpoints, EPP, wait-for-leader, SSH keys | the shared step's reason |
//! | 3 | multinode guard | a multinode component needs the LeaderWorkerSet API | `no_multinode_orchestrator_available` (no retry until the graph changes) |
//! | 4 | restart ([`reconcilers::restart`]) | next `status.restart`; queues `RestartSuperseded` | `failed_to_resolve_restart_progress` |
//! | 5 | workloads ([`workloads`]) | DCDs, per-component status | `failed_to_reconcile_the_resources` |
//! | 6 | ready condition ([`ready::ready_condition`]) | `state` and `Ready` | — |
//! | 7 | scaling adapters ([`reconcilers::scaling_adapters`]) | one adapter per scalable component | `failed_to_reconcile_scaling_adapters` |
//!
//! The returned status starts from the graph's current status with `observedGeneration` set, so
//! a failing step leaves everything earlier steps completed (and what it did not reach as it
//! was): a failure marks `state: failed` and `Ready=False` with the step's reason and message.

pub mod ready;
pub mod shared;
pub mod workloads;

use std::sync::Arc;

use api::{DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use kit::conditions::{self, READY};
use kit::{Event, OrFail, Outcome, Reader, Reconciled, Writer};
use reconcilers::restart::{self, Restart};
use reconcilers::rollout::{self, Rollout};
use reconcilers::scaling_adapters::{self, ScalingAdapters};

use crate::ready::ready_condition;
use crate::shared::{SharedConfig, SharedResources};
use crate::workloads::Workloads;

/// Failure reason when a multinode component has no orchestrator (upstream's value).
pub const REASON_NO_MULTINODE_ORCHESTRATOR: &str = "no_multinode_orchestrator_available";

/// Why a step of the component program failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The rollout step failed.
    #[error("failed to reconcile the worker rollout: {0}")]
    Rollout(#[from] rollout::Error),
    /// A shared resource failed.
    #[error("{0}")]
    Shared(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A multinode component cannot be deployed.
    #[error(
        "component {0} is multinode, but no multinode orchestrator is available: the LeaderWorkerSet API (leaderworkerset.x-k8s.io) is not served"
    )]
    NoMultinodeOrchestrator(String),
    /// The restart step failed.
    #[error("failed to resolve restart progress: {0}")]
    Restart(#[from] restart::Error),
    /// The workloads step failed.
    #[error("failed to reconcile the DynamoComponentDeployments: {0}")]
    Workloads(#[from] workloads::Error),
    /// The scaling adapters step failed.
    #[error("failed to reconcile the scaling adapters: {0}")]
    ScalingAdapters(#[from] scaling_adapters::Error),
}

/// Operator configuration of the component program.
#[derive(Clone, Debug, Default)]
pub struct ComponentConfig {
    /// Configuration of the shared resources.
    pub shared: SharedConfig,
    /// The LeaderWorkerSet API is served: multinode components can be deployed.
    pub leader_worker_sets: bool,
}

/// The component program.
pub struct ComponentProgram {
    rollout: Rollout,
    shared: SharedResources,
    restart: Restart,
    workloads: Workloads,
    scaling_adapters: ScalingAdapters,
    leader_worker_sets: bool,
}

impl ComponentProgram {
    /// The component program reading with `reader`, writing children with `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: ComponentConfig) -> Self {
        ComponentProgram {
            rollout: Rollout::new(reader.clone(), writer.clone()),
            shared: SharedResources::new(reader.clone(), writer.clone(), config.shared),
            restart: Restart::new(reader.clone()),
            workloads: Workloads::new(reader.clone(), writer.clone()),
            scaling_adapters: ScalingAdapters::new(reader, writer),
            leader_worker_sets: config.leader_worker_sets,
        }
    }

    /// Run every step once for `dgd` and return the complete desired status and queued events.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error> {
        let generation = dgd.metadata.generation.unwrap_or_default();
        let previous = dgd.status.clone().unwrap_or_default();
        let mut out = Outcome::new(DynamoGraphDeploymentStatus {
            observed_generation: Some(generation),
            ..previous.clone()
        });

        let plan = self
            .rollout
            .reconcile(dgd, &mut out)
            .await
            .map_err(Error::from)
            .or_fail(&mut out, generation, rollout::REASON_ROLLING_UPDATE_FAILED)?;

        let _checkpoints = self
            .shared
            .reconcile(dgd, &mut out)
            .await
            .map_err(|failed| failed.map_err(|e| Error::Shared(Box::new(e))))?;

        if !self.leader_worker_sets
            && let Some(multinode) = dgd.spec.components.iter().find(|c| c.is_multinode())
        {
            let error = Error::NoMultinodeOrchestrator(multinode.name.clone());
            return Err(out
                .fail(generation, REASON_NO_MULTINODE_ORCHESTRATOR, error)
                .await_change()
                .into());
        }

        let restart = self
            .restart
            .resolve(dgd, &plan)
            .await
            .map_err(Error::from)
            .or_fail(&mut out, generation, restart::REASON_RESTART_FAILED)?;
        out.status.restart = restart.status.clone();
        if let Some(superseded) = &restart.superseded {
            out.event(superseded.event());
        }

        let report = self
            .workloads
            .reconcile(dgd, &plan, restart.stamps.as_ref(), &mut out)
            .await
            .map_err(Error::from)
            .or_fail(&mut out, generation, workloads::REASON_WORKLOADS_FAILED)?;
        out.status.components = report.components;

        let (state, ready) = ready_condition(generation, plan.rolling, &report.readiness);
        out.status.state = state;
        conditions::set(&mut out.status.conditions, ready);
        for t in conditions::changed(&previous.conditions, &out.status.conditions) {
            if t.type_ == READY && t.to.is_some() {
                out.event(Event::normal(&t.reason, t.message.clone()));
            }
        }

        self.scaling_adapters
            .reconcile(dgd, &mut out)
            .await
            .map_err(Error::from)
            .or_fail(
                &mut out,
                generation,
                scaling_adapters::REASON_SCALING_ADAPTERS_FAILED,
            )?;
        Ok(out)
    }
}
