//! The component workload program: one DynamoComponentDeployment per component.
//!
//! [`ComponentProgram`] is a struct of its concrete reconcilers, run once per reconcile in this
//! order (the program owns order and timing; no step writes status). Each step returns a
//! [`kit::Step`]: its own result (the status fields it owns, or what a later step needs) and
//! its events; the program folds them in with [`kit::Outcome::take`]. Each step writes only
//! its own kinds ([`kit::Scoped`]).
//!
//! | # | step | does | failure reason |
//! | --- | --- | --- | --- |
//! | 1 | rollout ([`reconcilers::rollout`]) | worker hash, rolling update phase, old generations' replicas; then the program writes the active hash record it asks for ([`reconcilers::rollout::WorkerHashRecord`], the only write on the graph) | `rolling_update_failed` |
//! | 2 | shared resources | RBAC, PVCs, discovery, GMS claims, checkpoints, EPP, wait-for-leader, SSH keys | the shared step's reason |
//! | 3 | multinode guard | a multinode component needs the LeaderWorkerSet API | `no_multinode_orchestrator_available` (no retry until the graph changes or the API is installed: the operator re-queues waiting graphs when it is) |
//! | 4 | restart ([`reconcilers::restart`]) | next `status.restart`; queues `RestartSuperseded` | `failed_to_resolve_restart_progress` |
//! | 5 | workloads ([`workloads`]) | DCDs (the new worker generation at the rollout's count), per-component status | `failed_to_reconcile_the_resources` |
//! | 6 | ready condition ([`ready::ready_condition`]) | `state` and `Ready` (a stuck rollout says why) | — |
//! | 7 | finish ([`reconcilers::finish`]) | once Ready, delete what pods stopped using (the discovery account after discovery was turned off); one scaling adapter per scalable component (skipped while a component waits for its checkpoint) | `failed_to_reconcile_the_resources`, `failed_to_reconcile_scaling_adapters` |
//!
//! The returned status starts from the graph's current status with `observedGeneration` set, so
//! a failing step leaves everything earlier steps completed (and what it did not reach as it
//! was): a failure marks `state: failed` and `Ready=False` with the step's reason and message.

pub mod ready;
pub mod workloads;

#[cfg(test)]
mod testutil;

use std::sync::Arc;

use api::{DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentStatus};
use kit::served::Served;
use kit::{OrFail, Outcome, Reader, Reconciled, Scoped, Writer};
use reconcilers::finish::Finish;
use reconcilers::optional;
use reconcilers::restart::{self, Restart};
use reconcilers::rollout::{self, Rollout, WorkerHashRecord};
use reconcilers::shared::{SharedConfig, SharedResources};

use crate::ready::ready_condition;
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
    Shared(#[source] reconcilers::Error),
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
    /// The last steps (release, scaling adapters) failed.
    #[error(transparent)]
    Finish(reconcilers::finish::Error),
}

/// Operator configuration of the component program.
#[derive(Clone, Debug, Default)]
pub struct ComponentConfig {
    /// Configuration of the shared resources.
    pub shared: SharedConfig,
    /// The optional kinds the cluster serves, kept current by the operator: multinode
    /// components can be deployed while it serves the LeaderWorkerSet API.
    pub served: Served,
    /// Configuration of the worker rollout (progress deadline, whether worker pods are
    /// watched).
    pub rollout: rollout::Config,
}

/// The component program.
pub struct ComponentProgram {
    rollout: Rollout,
    record: WorkerHashRecord,
    shared: SharedResources,
    restart: Restart,
    workloads: Workloads,
    finish: Finish,
    served: Served,
}

impl ComponentProgram {
    /// The component program reading with `reader`, writing children with `writer`: each step
    /// gets it scoped to the kinds it owns ([`Scoped`]); only the program's worker-hash record
    /// writes the graph.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>, config: ComponentConfig) -> Self {
        let discovery = config.shared.discovery_backend;
        let dcds = || {
            Scoped::new(writer.clone())
                .allow::<DynamoComponentDeployment>()
                .build()
        };
        ComponentProgram {
            rollout: Rollout::with_config(reader.clone(), dcds(), config.rollout),
            record: WorkerHashRecord::new(writer.clone()),
            shared: SharedResources::new(reader.clone(), writer.clone(), config.shared),
            restart: Restart::new(reader.clone()),
            workloads: Workloads::new(reader.clone(), dcds()),
            finish: Finish::new(reader, writer, discovery),
            served: config.served,
        }
    }

    /// Run every step once for `dgd` and return the complete desired status and queued events.
    /// Each step returns its own result and events; only this function composes the status.
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

        let rolled = out
            .take(self.rollout.reconcile(dgd).await)
            .map_err(Error::from)
            .or_fail(&mut out, generation, rollout::REASON_ROLLING_UPDATE_FAILED)?;
        if let Some(record) = &rolled.record {
            out.take(self.record.reconcile(dgd, record).await)
                .map_err(|e| Error::Rollout(rollout::Error::Record(e)))
                .or_fail(&mut out, generation, rollout::REASON_ROLLING_UPDATE_FAILED)?;
        }
        out.status.rolling_update = rolled.status;
        let plan = rolled.workers;

        let step = self.shared.reconcile(dgd).await;
        let checkpoints = reconcilers::shared::fold(&mut out, step, generation)
            .map_err(|failed| Box::new((*failed).map_err(Error::Shared)))?;

        if !self.served.serves(&optional::leader_worker_set())
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

        let step = self
            .workloads
            .reconcile(dgd, &plan, restart.stamps.as_ref(), &checkpoints)
            .await;
        let report = out.take(step).map_err(Error::from).or_fail(
            &mut out,
            generation,
            workloads::REASON_WORKLOADS_FAILED,
        )?;
        out.status.components = report.components;

        let waiting = ready::waiting_for_checkpoints(&checkpoints);
        let ready = ready_condition(
            generation,
            ready::RollingUpdate::of(&plan),
            &waiting,
            &report.readiness,
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{all_ready, graph, stored};
    use api::common::{Restart as RestartSpec, RestartPhase, RestartStatus, RollingUpdatePhase};
    use api::{DgdState, DynamoComponentDeployment, DynamoGraphDeploymentScalingAdapter, labels};
    use kit::Retry;
    use kit::conditions::READY;
    use kit::conditions::find;
    use kit::run::{RunError, finish};
    use kit::testing::{Double, Verb};
    use kube::ResourceExt;
    use kube::runtime::controller::Action;
    use reconcilers::scaling_adapters;

    fn program(d: &Double, leader_worker_sets: bool) -> ComponentProgram {
        let served = if leader_worker_sets {
            Served::of([&optional::leader_worker_set()])
        } else {
            Served::new()
        };
        ComponentProgram::new(
            d.reader(),
            d.writer(),
            ComponentConfig {
                shared: SharedConfig::default(),
                served,
                ..Default::default()
            },
        )
    }

    /// One pass of the run loop: reconcile, persist the status, publish the events.
    async fn pass(d: &Double, p: &ComponentProgram) -> Result<Action, RunError<Error>> {
        let g = stored(d);
        let result = p.reconcile(&g).await;
        finish(
            &g,
            result,
            d.status_writer().as_ref(),
            d.event_sink().as_ref(),
        )
        .await
    }

    fn status(d: &Double) -> api::DynamoGraphDeploymentStatus {
        stored(d).status.unwrap()
    }

    fn ready(d: &Double) -> (String, String, String) {
        let s = status(d);
        let c = find(&s.conditions, READY).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    fn retry_of(err: RunError<Error>) -> Retry {
        match err {
            RunError::Reconcile { retry, .. } => retry,
            RunError::Status(e) => panic!("status write failed: {e}"),
        }
    }

    fn scalable_graph() -> api::DynamoGraphDeployment {
        let mut g = graph();
        g.spec.components[1].scaling_adapter = Some(Default::default());
        g
    }

    fn kinds(d: &Double) -> Vec<(Verb, String)> {
        d.writes().into_iter().map(|w| (w.verb, w.kind)).collect()
    }

    #[tokio::test]
    async fn steps_run_in_order_and_a_converged_pass_writes_nothing() {
        let d = Double::new();
        d.insert(scalable_graph());
        let p = program(&d, false);
        pass(&d, &p).await.unwrap();
        let dgd = "DynamoGraphDeployment".to_string();
        let dcd = "DynamoComponentDeployment".to_string();
        assert_eq!(
            kinds(&d),
            [
                (Verb::Patch, dgd.clone()),
                (Verb::Apply, "ServiceAccount".to_string()),
                (Verb::Apply, "Role".to_string()),
                (Verb::Apply, "RoleBinding".to_string()),
                (Verb::Apply, dcd.clone()),
                (Verb::Apply, dcd.clone()),
                (
                    Verb::Create,
                    "DynamoGraphDeploymentScalingAdapter".to_string()
                ),
                (Verb::ApplyStatus, dgd.clone()),
            ]
        );
        let s = status(&d);
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(s.state, DgdState::Pending);
        assert_eq!(ready(&d).1, "some_resources_are_not_ready");
        assert!(
            stored(&d)
                .annotations()
                .contains_key(labels::CURRENT_WORKER_HASH_V2)
        );
        assert_eq!(d.objects::<DynamoGraphDeploymentScalingAdapter>().len(), 1);
        assert_eq!(
            d.event_reasons(),
            [
                // Every child of the first pass in one event; the graph starting is not
                // announced.
                "ResourcesCreated",
            ]
        );

        all_ready(&d);
        pass(&d, &p).await.unwrap();
        let s = status(&d);
        assert_eq!(s.state, DgdState::Successful);
        assert_eq!(
            ready(&d),
            (
                "True".into(),
                "all_resources_are_ready".into(),
                "All resources are ready".into()
            )
        );
        assert_eq!(s.components.len(), 2);

        d.clear_writes();
        d.clear_events();
        pass(&d, &p).await.unwrap();
        assert!(d.writes().is_empty(), "{:?}", d.writes());
        assert!(d.events().is_empty());
    }

    #[tokio::test]
    async fn a_rollout_failure_stops_before_any_child() {
        let d = Double::new();
        d.insert(graph());
        d.fail_next(
            Verb::Patch,
            "DynamoGraphDeployment",
            kit::Error::Forbidden("denied".into()),
        );
        let err = pass(&d, &program(&d, false)).await.unwrap_err();
        assert_eq!(retry_of(err), Retry::Backoff);
        let (s, reason, message) = ready(&d);
        assert_eq!(
            (s.as_str(), reason.as_str()),
            ("False", rollout::REASON_ROLLING_UPDATE_FAILED)
        );
        assert!(message.contains("denied"), "{message}");
        assert_eq!(status(&d).state, DgdState::Failed);
        assert_eq!(status(&d).observed_generation, Some(1));
        assert!(d.objects::<DynamoComponentDeployment>().is_empty());
        assert_eq!(d.event_reasons(), [rollout::REASON_ROLLING_UPDATE_FAILED]);
    }

    #[tokio::test]
    async fn a_shared_resource_failure_stops_before_the_workloads() {
        let d = Double::new();
        d.insert(graph());
        d.fail_next(
            Verb::Apply,
            "ServiceAccount",
            kit::Error::Forbidden("denied".into()),
        );
        let err = pass(&d, &program(&d, false)).await.unwrap_err();
        assert_eq!(retry_of(err), Retry::Backoff);
        let (_, reason, message) = ready(&d);
        assert_eq!(
            reason,
            reconcilers::error::REASON_FAILED_TO_RECONCILE_RESOURCES
        );
        assert!(
            message.starts_with("failed to reconcile K8s discovery resources"),
            "{message}"
        );
        // The rollout step before it ran; nothing after it did.
        assert!(
            stored(&d)
                .annotations()
                .contains_key(labels::CURRENT_WORKER_HASH_V2)
        );
        assert!(d.objects::<DynamoComponentDeployment>().is_empty());
        assert_eq!(status(&d).state, DgdState::Failed);
    }

    #[tokio::test]
    async fn multinode_without_leader_worker_sets_waits_for_a_change() {
        let d = Double::new();
        let mut g = graph();
        g.spec.components[1].multinode = Some(api::common::MultinodeSpec { node_count: 2 });
        d.insert(g);
        let err = pass(&d, &program(&d, false)).await.unwrap_err();
        assert_eq!(retry_of(err), Retry::AwaitChange);
        let (_, reason, message) = ready(&d);
        assert_eq!(reason, REASON_NO_MULTINODE_ORCHESTRATOR);
        assert!(message.contains("VllmDecodeWorker") && message.contains("LeaderWorkerSet"));
        // The rollout step ran (hash recorded), no workload was touched.
        assert!(
            stored(&d)
                .annotations()
                .contains_key(labels::CURRENT_WORKER_HASH_V2)
        );
        assert!(d.objects::<DynamoComponentDeployment>().is_empty());
    }

    /// The served set is read at every reconcile: once the operator sees the LeaderWorkerSet
    /// API, the waiting graph deploys its components.
    #[tokio::test]
    async fn a_waiting_multinode_graph_proceeds_once_the_api_is_served() {
        let d = Double::new();
        let mut g = graph();
        g.spec.components[1].multinode = Some(api::common::MultinodeSpec { node_count: 2 });
        d.insert(g);
        let served = Served::new();
        let p = ComponentProgram::new(
            d.reader(),
            d.writer(),
            ComponentConfig {
                served: served.clone(),
                ..Default::default()
            },
        );
        pass(&d, &p).await.unwrap_err();
        assert_eq!(ready(&d).1, REASON_NO_MULTINODE_ORCHESTRATOR);
        served.set(&optional::leader_worker_set(), true);
        pass(&d, &p).await.unwrap();
        assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 2);
        assert_eq!(ready(&d).1, "some_resources_are_not_ready");
    }

    #[tokio::test]
    async fn a_restart_failure_keeps_the_previous_restart_status() {
        let d = Double::new();
        let mut g = graph();
        g.spec.restart = Some(RestartSpec {
            id: "r1".into(),
            strategy: None,
        });
        let previous = RestartStatus {
            observed_id: Some("r1".into()),
            phase: Some(RestartPhase::Restarting),
            in_progress: vec!["Frontend".into()],
        };
        g.status = Some(api::DynamoGraphDeploymentStatus {
            restart: Some(previous.clone()),
            ..Default::default()
        });
        d.insert(g);
        d.fail_next(
            Verb::Get,
            "DynamoComponentDeployment",
            kit::Error::Forbidden("no".into()),
        );
        pass(&d, &program(&d, false)).await.unwrap_err();
        assert_eq!(ready(&d).1, restart::REASON_RESTART_FAILED);
        assert_eq!(status(&d).restart, Some(previous));
        assert!(d.objects::<DynamoComponentDeployment>().is_empty());
    }

    #[tokio::test]
    async fn a_workloads_failure_keeps_what_earlier_steps_computed() {
        let d = Double::new();
        let mut g = graph();
        g.spec.restart = Some(RestartSpec {
            id: "r1".into(),
            strategy: None,
        });
        d.insert(g);
        d.fail_next(
            Verb::Apply,
            "DynamoComponentDeployment",
            kit::Error::Forbidden("no".into()),
        );
        pass(&d, &program(&d, false)).await.unwrap_err();
        assert_eq!(ready(&d).1, workloads::REASON_WORKLOADS_FAILED);
        let s = status(&d);
        assert_eq!(s.state, DgdState::Failed);
        assert_eq!(
            s.restart.unwrap().phase,
            Some(RestartPhase::Restarting),
            "the restart step's result is kept"
        );
        assert!(
            d.objects::<DynamoGraphDeploymentScalingAdapter>()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_scaling_adapter_failure_keeps_component_status() {
        let d = Double::new();
        d.insert(graph());
        let p = program(&d, false);
        pass(&d, &p).await.unwrap();
        all_ready(&d);
        let mut g = stored(&d);
        g.spec.components[1].scaling_adapter = Some(Default::default());
        d.insert(g);
        d.fail_next(
            Verb::Create,
            "DynamoGraphDeploymentScalingAdapter",
            kit::Error::Forbidden("no".into()),
        );
        pass(&d, &p).await.unwrap_err();
        let s = status(&d);
        assert_eq!(
            ready(&d).1,
            scaling_adapters::REASON_SCALING_ADAPTERS_FAILED
        );
        assert_eq!(s.state, DgdState::Failed);
        assert_eq!(s.components.len(), 2);
    }

    #[tokio::test]
    async fn an_image_change_is_a_reported_rolling_update_then_ready() {
        let d = Double::new();
        d.insert(graph());
        let p = program(&d, false);
        pass(&d, &p).await.unwrap();
        all_ready(&d);
        pass(&d, &p).await.unwrap();
        assert_eq!(ready(&d).0, "True");

        let mut g = stored(&d);
        g.spec.components[1]
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("runtime:2".into());
        g.metadata.generation = Some(2);
        d.insert(g);
        d.clear_events();
        pass(&d, &p).await.unwrap();
        assert_eq!(ready(&d).1, "rolling_update_in_progress");
        assert_eq!(status(&d).state, DgdState::Pending);
        assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 3);
        assert!(
            d.event_reasons()
                .contains(&rollout::EVENT_ROLLING_UPDATE_STARTED.to_string())
        );

        // Pending → InProgress; then the new generation becomes ready, the old one is
        // stepped down to zero, and once it ran down the new one replaces it.
        pass(&d, &p).await.unwrap();
        assert_eq!(
            status(&d).rolling_update.unwrap().phase,
            Some(RollingUpdatePhase::InProgress)
        );
        all_ready(&d);
        pass(&d, &p).await.unwrap();
        assert_eq!(
            status(&d).rolling_update.unwrap().phase,
            Some(RollingUpdatePhase::InProgress)
        );
        let old: Vec<_> = d
            .objects::<DynamoComponentDeployment>()
            .into_iter()
            .filter(|dcd| dcd.spec.component.replicas == Some(0))
            .collect();
        assert_eq!(old.len(), 1, "the old worker generation at zero");
        all_ready(&d);
        pass(&d, &p).await.unwrap();
        let s = status(&d);
        assert_eq!(
            s.rolling_update.unwrap().phase,
            Some(RollingUpdatePhase::Completed)
        );
        assert_eq!(ready(&d).0, "True");
        assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 2);
        assert!(
            d.event_reasons()
                .contains(&rollout::EVENT_ROLLING_UPDATE_COMPLETED.to_string())
        );
        assert!(
            d.event_reasons()
                .contains(&workloads::EVENT_DCD_DELETED.to_string())
        );
    }
}
