//! The grove workload program: one Grove PodCliqueSet per graph.
//!
//! [`GroveProgram`] is a struct of its concrete reconcilers, run once per reconcile in this
//! order (the program owns order and timing; no step writes status). Each step returns a
//! [`kit::Step`]: its own result (the status fields it owns, or what a later step needs) and
//! its events; the program folds them in with [`kit::Outcome::take`]. Each step writes only
//! its own kinds ([`kit::Scoped`]).
//!
//! | # | step | does | failure reason |
//! | --- | --- | --- | --- |
//! | 0 | preflight ([`grove_render::preflight`]) | a graph that cannot be rendered stops here, nothing written, no retry until it changes | `failed_to_reconcile_the_resources` |
//! | 1 | rollout ([`rollout::resolve`], then the program's [`reconcilers::rollout::WorkerHashRecord`], the only write on the graph) | worker hash record; refuses managed rolling updates (Warning `RollingUpdateNotSupported` after the record write) | `rolling_update_failed` |
//! | 2 | shared resources ([`reconcilers::shared`]) | RBAC, PVCs, discovery, GMS claims, checkpoints, EPP, wait-for-leader, SSH keys | the shared step's reason |
//! | 3 | restart ([`restart::GroveRestart`]) | next `status.restart` from Grove's progress | `failed_to_resolve_restart_progress` |
//! | 4 | workload ([`workload::PodCliqueSetWorkload`]) | resolve → render → apply the PodCliqueSet → scale Grove children → readiness, `status.components` | `failed_to_reconcile_the_resources` |
//! | 4b | model Services ([`reconcilers::model_service`]) | the graph's share of the headless `dynamo-model-<hash>` Service of each `modelRef` (shared with the other graphs of the namespace serving the model; one it no longer serves is given up, the last owner deletes it); upstream runs it after the PodCliqueSet too | `failed_to_reconcile_the_resources`, message `failed to reconcile model services: …` |
//! | 5 | ready condition ([`ready::ready_condition`]) | `state` and `Ready` | — |
//! | 6 | finish ([`reconcilers::finish`]) | once Ready, delete what pods stopped using (the discovery account after discovery was turned off); one scaling adapter per scalable component (skipped while a component waits for its checkpoint) | `failed_to_reconcile_the_resources`, `failed_to_reconcile_scaling_adapters` |
//! | ∞ | topology condition ([`topology::TopologyCondition`]) | `TopologyLevelsAvailable` from Grove; runs last, also after a failed step | — |
//!
//! The returned status starts from the graph's current status with `observedGeneration` set, so
//! a failing step leaves everything earlier steps completed: a failure marks `state: failed` and
//! `Ready=False` with the step's reason and message. An input that only a change of the graph
//! can fix (it cannot be rendered, say) is not retried until the graph changes.
//!
//! Rendering is pure and lives in the `grove-render` crate, which has no client
//! ([`grove_render::render`]); this crate resolves its inputs and converges the result.

pub mod readiness;
pub mod ready;
pub mod resolve;
pub mod restart;
pub mod rollout;
pub mod simulate;
pub mod topology;
pub mod workload;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

use std::sync::Arc;

use api::grove::{PodClique, PodCliqueScalingGroup, PodCliqueSet};
use api::{DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use grove_render::names::pcs_name;
use k8s_openapi::api::core::v1::Service;
use kit::{Failed, OrFail, Outcome, Reader, Reconciled, Scoped, Writer};
use kube::ResourceExt;
use reconcilers::finish::Finish;
use reconcilers::model_service::ModelServices;
use reconcilers::rollout::WorkerHashRecord;
use reconcilers::shared::{SharedConfig, SharedResources};

pub use grove_render;

use crate::restart::GroveRestart;
use crate::topology::TopologyCondition;
use crate::workload::PodCliqueSetWorkload;

/// Failure reason of the rollout step (upstream's value).
pub const REASON_ROLLING_UPDATE_FAILED: &str = reconcilers::rollout::REASON_ROLLING_UPDATE_FAILED;
/// Failure reason of the restart step.
pub const REASON_RESTART_FAILED: &str = reconcilers::restart::REASON_RESTART_FAILED;

/// Why a step of the grove program failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The rollout step failed.
    #[error("failed to reconcile the worker rollout: {0}")]
    Rollout(#[from] rollout::Error),
    /// A shared resource failed.
    #[error("{0}")]
    Shared(#[source] reconcilers::Error),
    /// The restart step failed.
    #[error("failed to resolve restart progress: {0}")]
    Restart(#[from] restart::Error),
    /// The workload step failed.
    #[error("failed to reconcile the Grove PodCliqueSet: {0}")]
    Workload(#[from] workload::Error),
    /// The model Services step failed.
    #[error("failed to reconcile model services: {0}")]
    ModelServices(#[source] reconcilers::Error),
    /// The last steps (release, scaling adapters) failed.
    #[error(transparent)]
    Finish(reconcilers::finish::Error),
}

/// Operator configuration of the grove program.
#[derive(Clone, Debug, Default)]
pub struct GroveConfig {
    /// Configuration of the shared resources.
    pub shared: SharedConfig,
    /// Rendering settings (termination delay, default discovery backend).
    pub render: grove_render::Settings,
    /// Discover image pull secrets from the namespace's Docker registry Secrets
    /// ([`reconcilers::pull_secrets`]; needs `list`/`watch` on Secrets, so off unless the
    /// operator is started with it).
    pub discover_pull_secrets: bool,
}

/// The grove program.
pub struct GroveProgram {
    record: WorkerHashRecord,
    shared: SharedResources,
    restart: GroveRestart,
    workload: PodCliqueSetWorkload,
    model_services: ModelServices,
    finish: Finish,
    topology: TopologyCondition,
}

impl GroveProgram {
    /// The grove program reading with `reader`, writing children with `writer`: each step
    /// gets it scoped to the kinds it owns ([`Scoped`]); only the program's worker-hash record
    /// writes the graph.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: GroveConfig) -> Self {
        let discovery = config.shared.discovery_backend;
        let scoped = || Scoped::new(writer.clone());
        GroveProgram {
            record: WorkerHashRecord::new(writer.clone()),
            shared: SharedResources::new(reader.clone(), writer.clone(), config.shared),
            restart: GroveRestart::new(reader.clone()),
            workload: PodCliqueSetWorkload::new(
                reader.clone(),
                scoped()
                    .allow::<PodCliqueSet>()
                    .allow::<PodClique>()
                    .allow::<PodCliqueScalingGroup>()
                    .allow::<Service>()
                    .build(),
                config.render,
                config.discover_pull_secrets,
            ),
            model_services: ModelServices::new(reader.clone(), scoped().allow::<Service>().build()),
            finish: Finish::new(reader.clone(), writer.clone(), discovery),
            topology: TopologyCondition::new(reader),
        }
    }

    /// Run every step once for `dgd` and return the complete desired status and queued events.
    /// Each step returns its own result and events; only this program composes the status.
    pub async fn reconcile(
        &self,
        dgd: &DynamoGraphDeployment,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error> {
        let pcs = pcs_name(&dgd.name_any(), &dgd.spec);
        match self.steps(dgd, &pcs).await {
            Ok(mut out) => {
                self.topology(dgd, &pcs, &mut out).await;
                Ok(out)
            }
            Err(mut failed) => {
                self.topology(dgd, &pcs, &mut failed.outcome).await;
                Err(failed)
            }
        }
    }

    /// The topology condition, set in `out` when the step has one.
    async fn topology(
        &self,
        dgd: &DynamoGraphDeployment,
        pcs: &str,
        out: &mut Outcome<DynamoGraphDeploymentStatus>,
    ) {
        let Ok(condition) = out.take(self.topology.reconcile(dgd, pcs).await);
        if let Some(condition) = condition {
            kit::conditions::set(&mut out.status.conditions, condition);
        }
    }

    async fn steps(
        &self,
        dgd: &DynamoGraphDeployment,
        pcs: &str,
    ) -> Reconciled<DynamoGraphDeploymentStatus, Error> {
        let generation = dgd.metadata.generation.unwrap_or_default();
        let previous = dgd.status.clone().unwrap_or_default();
        let mut out = Outcome::new(DynamoGraphDeploymentStatus {
            observed_generation: Some(generation),
            ..previous.clone()
        });

        // Every render error is a property of the graph: find it before touching anything.
        if let Err(error) = grove_render::preflight(dgd) {
            let error = Error::Workload(workload::Error::Render(error));
            return Err(out
                .fail(generation, workload::REASON_WORKLOADS_FAILED, error)
                .await_change()
                .into());
        }

        let (workers, record) = rollout::resolve(dgd);
        out.take(self.record.reconcile(dgd, &record).await)
            .map_err(|e| Error::Rollout(rollout::Error::Record(e)))
            .or_fail(&mut out, generation, REASON_ROLLING_UPDATE_FAILED)?;

        let step = self.shared.reconcile(dgd).await;
        let checkpoints = reconcilers::shared::fold(&mut out, step, generation)
            .map_err(|failed| Box::new((*failed).map_err(Error::Shared)))?;

        let restart = self
            .restart
            .resolve(dgd, pcs)
            .await
            .map_err(Error::from)
            .or_fail(&mut out, generation, REASON_RESTART_FAILED)?;
        out.status.restart = restart.status.clone();

        let step = self
            .workload
            .reconcile(dgd, &workers, restart.stamps.as_ref(), &checkpoints)
            .await;
        let report = match out.take(step) {
            Ok(report) => report,
            Err(error) => {
                let awaits = error.awaits_change();
                return Err(fail_resources(
                    out,
                    generation,
                    Error::Workload(error),
                    awaits,
                ));
            }
        };
        out.status.components = report.readiness.components.clone();

        if let Err(error) = out.take(self.model_services.reconcile(dgd).await) {
            let awaits = error.awaits_change();
            let error = Error::ModelServices(error);
            return Err(fail_resources(out, generation, error, awaits));
        }

        let waiting = ready::waiting_for_checkpoints(&checkpoints);
        let ready =
            ready::ready_condition(generation, &waiting, &report.pcs_name, &report.readiness);
        reconcilers::ready::install(&mut out, &previous.conditions, ready);
        let ready = out.status.state == api::DgdState::Successful;
        let finished = self.finish.reconcile(dgd, ready, !waiting.is_empty()).await;
        if let Err(error) = out.take(finished) {
            return Err(out
                .fail(generation, error.reason(), Error::Finish(error))
                .into());
        }
        Ok(out)
    }
}

/// The failed outcome of a step reported with upstream's `failed_to_reconcile_the_resources`; no
/// retry until the graph changes when `awaits` (an input only a change can fix).
fn fail_resources(
    out: Outcome<DynamoGraphDeploymentStatus>,
    generation: i64,
    error: Error,
    awaits: bool,
) -> Box<Failed<DynamoGraphDeploymentStatus, Error>> {
    let failed = out.fail(generation, workload::REASON_WORKLOADS_FAILED, error);
    Box::new(if awaits {
        failed.await_change()
    } else {
        failed
    })
}
