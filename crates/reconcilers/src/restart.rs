//! Graph restarts requested through `spec.restart.id`.
//!
//! [`next_status`] is the whole state machine, a pure function of the request, the previous
//! [`RestartStatus`], whether a rolling update is running, and which components finished
//! restarting:
//! - no `spec.restart.id`: a terminal status (Completed, Failed, Superseded) is kept, anything
//!   else is dropped;
//! - the id was already processed (same `observedID`, terminal phase): kept;
//! - a rolling update is pending or in progress: `Superseded` (the new pods restart anyway), and
//!   the caller queues a Warning `RestartSuperseded` once per transition ([`Resolved::superseded`]);
//! - parallel: a new id puts every component in `inProgress` (`Restarting`); `Completed` once
//!   none is left;
//! - sequential (the default, in `strategy.order` or alphabetical order): one component at a
//!   time; the next starts when the current one finished; a current component that left the
//!   order restarts the sequence.
//!
//! [`stamps`] turns the status into the `nvidia.com/restartAt` pod-template annotation the
//! workloads step sets (the value is the restart id, so it is stable across reconciles).
//! Components it does not name keep the value their live DCD already carries.
//!
//! [`Restart::resolve`] adds the only input that needs reading: a component has finished
//! restarting when its DCD carries the stamp and is ready (observed its generation, Available).

use std::collections::BTreeSet;
use std::sync::Arc;

use api::common::{RestartPhase, RestartStatus, RestartStrategyType};
use api::labels;
use api::{DynamoComponentDeployment, DynamoGraphDeployment};
use kit::{Event, Reader, ReaderExt};
use kube::ResourceExt;

use crate::naming;
use crate::rollout::WorkerGeneration;

/// Warning event: a restart was superseded by a rolling update.
pub const EVENT_RESTART_SUPERSEDED: &str = "RestartSuperseded";
/// Failure reason of the restart step.
pub const REASON_RESTART_FAILED: &str = "failed_to_resolve_restart_progress";

/// Why the restart step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A component's DCD could not be read.
    #[error("read DynamoComponentDeployment {name}: {source}")]
    Read {
        /// The DCD name.
        name: String,
        /// The read error.
        #[source]
        source: kit::Error,
    },
}

/// The restart annotation to stamp: `value` on the pod templates of `components`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartStamps {
    /// The annotation value (the restart id).
    pub value: String,
    /// The components whose pod template carries it.
    pub components: BTreeSet<String>,
}

impl RestartStamps {
    /// The value to stamp on `component`, if it is named.
    pub fn value_for(&self, component: &str) -> Option<&str> {
        self.components
            .contains(component)
            .then_some(self.value.as_str())
    }
}

/// A restart that a rolling update superseded in this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superseded {
    /// The restart id.
    pub id: String,
}

impl Superseded {
    /// The Warning event the program queues.
    pub fn event(&self) -> Event {
        Event::warning(
            EVENT_RESTART_SUPERSEDED,
            format!("Restart {} superseded by rolling update", self.id),
        )
    }
}

/// What the restart step decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// The next `status.restart`.
    pub status: Option<RestartStatus>,
    /// What the workloads step stamps.
    pub stamps: Option<RestartStamps>,
    /// Set when the restart became superseded in this reconcile.
    pub superseded: Option<Superseded>,
}

/// The restart step. Reads only the DCDs of components being restarted.
pub struct Restart {
    reader: Arc<dyn Reader>,
}

impl Restart {
    /// A restart step reading DCDs with `reader`.
    pub fn new(reader: Arc<dyn Reader>) -> Self {
        Restart { reader }
    }

    /// The next restart status for `dgd` (its `status.restart` is the previous one), given
    /// whether a rolling update runs and the worker generation DCDs are rendered at.
    pub async fn resolve(
        &self,
        dgd: &DynamoGraphDeployment,
        generation: &WorkerGeneration,
    ) -> Result<Resolved, Error> {
        let previous = dgd.status.as_ref().and_then(|s| s.restart.as_ref());
        let request_id = request_id(dgd);
        let mut finished = BTreeSet::new();
        if let Some((id, in_progress)) = in_progress(dgd) {
            for component in in_progress {
                if self.restarted(dgd, generation, component, id).await? {
                    finished.insert(component.clone());
                }
            }
        }
        let status = next_status(dgd, previous, generation.rolling, &finished);
        let became_superseded = status
            .as_ref()
            .is_some_and(|s| s.phase == Some(RestartPhase::Superseded))
            && previous.map(|p| (p.observed_id.as_deref(), p.phase))
                != status.as_ref().map(|s| (s.observed_id.as_deref(), s.phase));
        let superseded = became_superseded.then(|| Superseded {
            id: request_id.unwrap_or_default().to_string(),
        });
        Ok(Resolved {
            stamps: stamps(dgd, status.as_ref()),
            status,
            superseded,
        })
    }

    /// Whether `component`'s DCD carries restart stamp `id` and is ready.
    async fn restarted(
        &self,
        dgd: &DynamoGraphDeployment,
        generation: &WorkerGeneration,
        component: &str,
        id: &str,
    ) -> Result<bool, Error> {
        let Some(spec) = dgd.spec.component(component) else {
            // A component that left the graph has nothing left to restart.
            return Ok(true);
        };
        let name = naming::dcd_name(dgd, spec, Some(&generation.target));
        let dcd: Option<DynamoComponentDeployment> = self
            .reader
            .get(dgd.namespace().as_deref(), &name)
            .await
            .map_err(|source| Error::Read {
                name: name.clone(),
                source,
            })?;
        Ok(dcd.is_some_and(|d| {
            let stamped = d
                .spec
                .component
                .pod_template
                .as_ref()
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(labels::RESTART_AT))
                .is_some_and(|v| v == id);
            stamped && d.is_ready().is_ok()
        }))
    }
}

/// The graph's restart request id (`spec.restart.id`), when set.
pub fn request_id(dgd: &DynamoGraphDeployment) -> Option<&str> {
    dgd.spec
        .restart
        .as_ref()
        .map(|r| r.id.as_str())
        .filter(|id| !id.is_empty())
}

/// The current request id and its components marked in progress, when the previous status is
/// restarting that same request: the only components whose progress needs a read.
pub fn in_progress(dgd: &DynamoGraphDeployment) -> Option<(&str, &[String])> {
    let id = request_id(dgd)?;
    let previous = dgd.status.as_ref()?.restart.as_ref()?;
    (previous.observed_id.as_deref() == Some(id)
        && previous.phase == Some(RestartPhase::Restarting)
        && !previous.in_progress.is_empty())
    .then_some((id, previous.in_progress.as_slice()))
}

fn is_terminal(phase: Option<RestartPhase>) -> bool {
    matches!(
        phase,
        Some(RestartPhase::Completed | RestartPhase::Failed | RestartPhase::Superseded)
    )
}

fn is_parallel(dgd: &DynamoGraphDeployment) -> bool {
    dgd.spec
        .restart
        .as_ref()
        .and_then(|r| r.strategy.as_ref())
        .and_then(|s| s.r#type)
        == Some(RestartStrategyType::Parallel)
}

/// The sequential restart order: `strategy.order`, else the component names sorted.
pub fn restart_order(dgd: &DynamoGraphDeployment) -> Vec<String> {
    if let Some(order) = dgd
        .spec
        .restart
        .as_ref()
        .and_then(|r| r.strategy.as_ref())
        .map(|s| &s.order)
        .filter(|o| !o.is_empty())
    {
        return order.clone();
    }
    let mut names: Vec<String> = dgd.spec.components.iter().map(|c| c.name.clone()).collect();
    names.sort();
    names
}

fn all_components(dgd: &DynamoGraphDeployment) -> Vec<String> {
    let mut names: Vec<String> = dgd.spec.components.iter().map(|c| c.name.clone()).collect();
    names.sort();
    names
}

fn status(id: &str, phase: RestartPhase, in_progress: Vec<String>) -> Option<RestartStatus> {
    Some(RestartStatus {
        observed_id: Some(id.to_string()),
        phase: Some(phase),
        in_progress,
    })
}

/// The next restart status. `previous` is the current `status.restart`; `rolling` whether a
/// rolling update is pending or in progress; `finished` the in-progress components whose restart
/// completed.
pub fn next_status(
    dgd: &DynamoGraphDeployment,
    previous: Option<&RestartStatus>,
    rolling: bool,
    finished: &BTreeSet<String>,
) -> Option<RestartStatus> {
    let Some(id) = dgd
        .spec
        .restart
        .as_ref()
        .map(|r| r.id.as_str())
        .filter(|id| !id.is_empty())
    else {
        return previous.filter(|p| is_terminal(p.phase)).cloned();
    };
    let same_request = previous.is_some_and(|p| p.observed_id.as_deref() == Some(id));
    if same_request && previous.is_some_and(|p| is_terminal(p.phase)) {
        return previous.cloned();
    }
    if rolling {
        return status(id, RestartPhase::Superseded, Vec::new());
    }
    let in_progress: Vec<String> = previous
        .filter(|_| same_request)
        .map(|p| p.in_progress.clone())
        .unwrap_or_default();

    if is_parallel(dgd) {
        let checking = if !same_request || in_progress.is_empty() {
            all_components(dgd)
        } else {
            in_progress
        };
        if !same_request {
            return if checking.is_empty() {
                status(id, RestartPhase::Completed, Vec::new())
            } else {
                status(id, RestartPhase::Restarting, checking)
            };
        }
        let left: Vec<String> = checking
            .into_iter()
            .filter(|c| !finished.contains(c))
            .collect();
        return if left.is_empty() {
            status(id, RestartPhase::Completed, Vec::new())
        } else {
            status(id, RestartPhase::Restarting, left)
        };
    }

    let order = restart_order(dgd);
    let Some(first) = order.first() else {
        return status(id, RestartPhase::Completed, Vec::new());
    };
    let Some(current) = in_progress.first().filter(|_| same_request) else {
        return status(id, RestartPhase::Restarting, vec![first.clone()]);
    };
    if !finished.contains(current) {
        return status(id, RestartPhase::Restarting, vec![current.clone()]);
    }
    match order.iter().position(|c| c == current) {
        None => status(id, RestartPhase::Restarting, vec![first.clone()]),
        Some(i) => match order.get(i + 1) {
            Some(next) => status(id, RestartPhase::Restarting, vec![next.clone()]),
            None => status(id, RestartPhase::Completed, Vec::new()),
        },
    }
}

/// The restart stamps for `status` (upstream's `DetermineRestartState`):
/// - no request but an observed id: every component keeps that id;
/// - superseded: nothing new (live values are kept);
/// - completed or parallel: every component;
/// - sequential: every component up to and including the one in progress.
pub fn stamps(
    dgd: &DynamoGraphDeployment,
    status: Option<&RestartStatus>,
) -> Option<RestartStamps> {
    let status = status?;
    let all: BTreeSet<String> = dgd.spec.components.iter().map(|c| c.name.clone()).collect();
    let Some(id) = dgd
        .spec
        .restart
        .as_ref()
        .map(|r| r.id.clone())
        .filter(|id| !id.is_empty())
    else {
        return status.observed_id.clone().map(|value| RestartStamps {
            value,
            components: all,
        });
    };
    let same = status.observed_id.as_deref() == Some(id.as_str());
    if same && status.phase == Some(RestartPhase::Superseded) {
        return None;
    }
    if (same && status.phase == Some(RestartPhase::Completed)) || is_parallel(dgd) {
        return Some(RestartStamps {
            value: id,
            components: all,
        });
    }
    let order = restart_order(dgd);
    let components: BTreeSet<String> =
        if status.phase == Some(RestartPhase::Pending) || status.in_progress.is_empty() {
            order.first().cloned().into_iter().collect()
        } else {
            let last = order.iter().rposition(|c| status.in_progress.contains(c));
            match last {
                Some(i) => order[..=i].iter().cloned().collect(),
                None => BTreeSet::new(),
            }
        };
    Some(RestartStamps {
        value: id,
        components,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{component, dgd};
    use api::common::{Restart as RestartSpec, RestartStrategy};
    use api::dcd::CONDITION_AVAILABLE;
    use api::{ComponentType, DynamoComponentDeploymentSpec, DynamoComponentDeploymentStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kit::conditions::{self, Status};
    use kit::testing::{Double, Verb};
    use kube::Resource;

    fn graph(id: Option<&str>, parallel: bool, order: &[&str]) -> DynamoGraphDeployment {
        let mut g = dgd(
            "g",
            vec![
                component("Frontend", ComponentType::Frontend),
                component("Worker", ComponentType::Worker),
                component("Planner", ComponentType::Planner),
            ],
        );
        g.spec.restart = id.map(|id| RestartSpec {
            id: id.into(),
            strategy: Some(RestartStrategy {
                r#type: Some(if parallel {
                    RestartStrategyType::Parallel
                } else {
                    RestartStrategyType::Sequential
                }),
                order: order.iter().map(|s| s.to_string()).collect(),
            }),
        });
        g
    }

    fn st(id: &str, phase: RestartPhase, in_progress: &[&str]) -> RestartStatus {
        RestartStatus {
            observed_id: Some(id.into()),
            phase: Some(phase),
            in_progress: in_progress.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    use RestartPhase::*;

    #[test]
    fn next_status_table() {
        let none = BTreeSet::new();
        struct Case {
            what: &'static str,
            dgd: DynamoGraphDeployment,
            previous: Option<RestartStatus>,
            rolling: bool,
            finished: BTreeSet<String>,
            want: Option<RestartStatus>,
        }
        let cases = [
            Case {
                what: "no request, nothing before",
                dgd: graph(None, false, &[]),
                previous: None,
                rolling: false,
                finished: none.clone(),
                want: None,
            },
            Case {
                what: "no request keeps a terminal status",
                dgd: graph(None, false, &[]),
                previous: Some(st("a", Completed, &[])),
                rolling: false,
                finished: none.clone(),
                want: Some(st("a", Completed, &[])),
            },
            Case {
                what: "no request drops a running status",
                dgd: graph(None, false, &[]),
                previous: Some(st("a", Restarting, &["Worker"])),
                rolling: false,
                finished: none.clone(),
                want: None,
            },
            Case {
                what: "an id already processed is kept",
                dgd: graph(Some("a"), false, &[]),
                previous: Some(st("a", Superseded, &[])),
                rolling: false,
                finished: none.clone(),
                want: Some(st("a", Superseded, &[])),
            },
            Case {
                what: "a rolling update supersedes a new request",
                dgd: graph(Some("b"), false, &[]),
                previous: Some(st("a", Completed, &[])),
                rolling: true,
                finished: none.clone(),
                want: Some(st("b", Superseded, &[])),
            },
            Case {
                what: "parallel: a new id restarts every component",
                dgd: graph(Some("b"), true, &[]),
                previous: Some(st("a", Completed, &[])),
                rolling: false,
                finished: set(&["Worker"]),
                want: Some(st("b", Restarting, &["Frontend", "Planner", "Worker"])),
            },
            Case {
                what: "parallel: finished components leave inProgress",
                dgd: graph(Some("b"), true, &[]),
                previous: Some(st("b", Restarting, &["Frontend", "Planner", "Worker"])),
                rolling: false,
                finished: set(&["Frontend", "Worker"]),
                want: Some(st("b", Restarting, &["Planner"])),
            },
            Case {
                what: "parallel: completed when none is left",
                dgd: graph(Some("b"), true, &[]),
                previous: Some(st("b", Restarting, &["Planner"])),
                rolling: false,
                finished: set(&["Planner"]),
                want: Some(st("b", Completed, &[])),
            },
            Case {
                what: "sequential default order is alphabetical",
                dgd: graph(Some("b"), false, &[]),
                previous: None,
                rolling: false,
                finished: none.clone(),
                want: Some(st("b", Restarting, &["Frontend"])),
            },
            Case {
                what: "sequential follows strategy.order",
                dgd: graph(Some("b"), false, &["Worker", "Frontend", "Planner"]),
                previous: None,
                rolling: false,
                finished: none.clone(),
                want: Some(st("b", Restarting, &["Worker"])),
            },
            Case {
                what: "sequential waits for the current component",
                dgd: graph(Some("b"), false, &["Worker", "Frontend", "Planner"]),
                previous: Some(st("b", Restarting, &["Worker"])),
                rolling: false,
                finished: none.clone(),
                want: Some(st("b", Restarting, &["Worker"])),
            },
            Case {
                what: "sequential advances",
                dgd: graph(Some("b"), false, &["Worker", "Frontend", "Planner"]),
                previous: Some(st("b", Restarting, &["Worker"])),
                rolling: false,
                finished: set(&["Worker"]),
                want: Some(st("b", Restarting, &["Frontend"])),
            },
            Case {
                what: "sequential completes after the last",
                dgd: graph(Some("b"), false, &["Worker", "Frontend", "Planner"]),
                previous: Some(st("b", Restarting, &["Planner"])),
                rolling: false,
                finished: set(&["Planner"]),
                want: Some(st("b", Completed, &[])),
            },
            Case {
                what: "a current component that left the order restarts the sequence",
                dgd: graph(Some("b"), false, &["Worker", "Frontend", "Planner"]),
                previous: Some(st("b", Restarting, &["Gone"])),
                rolling: false,
                finished: set(&["Gone"]),
                want: Some(st("b", Restarting, &["Worker"])),
            },
        ];
        for c in cases {
            assert_eq!(
                next_status(&c.dgd, c.previous.as_ref(), c.rolling, &c.finished),
                c.want,
                "{}",
                c.what
            );
        }
    }

    #[test]
    fn stamps_table() {
        let seq = graph(Some("b"), false, &["Worker", "Frontend", "Planner"]);
        let s = stamps(&seq, Some(&st("b", Restarting, &["Frontend"]))).unwrap();
        assert_eq!(s.value, "b");
        assert_eq!(s.components, set(&["Worker", "Frontend"]));
        assert_eq!(s.value_for("Worker"), Some("b"));
        assert_eq!(s.value_for("Planner"), None);
        let done = stamps(&seq, Some(&st("b", Completed, &[]))).unwrap();
        assert_eq!(done.components, set(&["Worker", "Frontend", "Planner"]));
        assert_eq!(stamps(&seq, Some(&st("b", Superseded, &[]))), None);
        assert_eq!(stamps(&seq, None), None);
        let par = graph(Some("c"), true, &[]);
        let p = stamps(&par, Some(&st("c", Restarting, &["Worker"]))).unwrap();
        assert_eq!(p.components.len(), 3);
        // The request was removed: the observed id stays on every component.
        let gone = graph(None, false, &[]);
        let g = stamps(&gone, Some(&st("b", Completed, &[]))).unwrap();
        assert_eq!((g.value.as_str(), g.components.len()), ("b", 3));
    }

    fn stamped_dcd(
        d: &Double,
        g: &DynamoGraphDeployment,
        component: &str,
        value: &str,
        ready: bool,
    ) {
        let spec = g.spec.component(component).unwrap().clone();
        let mut spec = spec;
        spec.pod_template
            .as_mut()
            .unwrap()
            .metadata
            .get_or_insert_with(Default::default)
            .annotations = Some([(labels::RESTART_AT.to_string(), value.to_string())].into());
        d.insert(DynamoComponentDeployment {
            metadata: ObjectMeta {
                name: Some(naming::dcd_name(g, &spec, Some("h"))),
                namespace: Some("ns".into()),
                generation: Some(2),
                owner_references: Some(vec![g.controller_owner_ref(&()).unwrap()]),
                ..Default::default()
            },
            spec: DynamoComponentDeploymentSpec {
                backend_framework: None,
                component: spec,
            },
            status: Some(DynamoComponentDeploymentStatus {
                observed_generation: Some(2),
                conditions: vec![conditions::new(
                    CONDITION_AVAILABLE,
                    Status::from(ready),
                    "DeploymentReady",
                    "",
                    2,
                )],
                component: None,
            }),
        });
    }

    #[tokio::test]
    async fn resolve_advances_when_the_stamped_dcd_is_ready() {
        let d = Double::new();
        let mut g = graph(Some("b"), false, &["Worker", "Frontend", "Planner"]);
        g.status = Some(api::DynamoGraphDeploymentStatus {
            restart: Some(st("b", Restarting, &["Worker"])),
            ..Default::default()
        });
        let g = d.insert(g);
        let generation = WorkerGeneration::settled("h");
        let restart = Restart::new(d.reader());

        // Not stamped yet (the cache may lag behind the stamp): not finished.
        stamped_dcd(&d, &g, "Worker", "a", true);
        let r = restart.resolve(&g, &generation).await.unwrap();
        assert_eq!(r.status, Some(st("b", Restarting, &["Worker"])));
        // Stamped but not ready.
        stamped_dcd(&d, &g, "Worker", "b", false);
        let r = restart.resolve(&g, &generation).await.unwrap();
        assert_eq!(r.status, Some(st("b", Restarting, &["Worker"])));
        // Stamped and ready: the next component.
        stamped_dcd(&d, &g, "Worker", "b", true);
        let r = restart.resolve(&g, &generation).await.unwrap();
        assert_eq!(r.status, Some(st("b", Restarting, &["Frontend"])));
        assert_eq!(r.stamps.unwrap().components, set(&["Worker", "Frontend"]));
        assert!(r.superseded.is_none());
        assert!(d.writes().is_empty(), "the restart step never writes");
    }

    #[tokio::test]
    async fn supersession_is_reported_once() {
        let d = Double::new();
        let g = d.insert(graph(Some("b"), false, &[]));
        let rolling = WorkerGeneration {
            rolling: true,
            ..WorkerGeneration::settled("h")
        };
        let restart = Restart::new(d.reader());
        let r = restart.resolve(&g, &rolling).await.unwrap();
        assert_eq!(r.status, Some(st("b", Superseded, &[])));
        let event = r.superseded.unwrap().event();
        assert_eq!(
            (event.reason.as_str(), event.type_),
            (EVENT_RESTART_SUPERSEDED, kit::EventType::Warning)
        );
        assert_eq!(
            event.note.as_deref(),
            Some("Restart b superseded by rolling update")
        );
        let mut g = g;
        g.status = Some(api::DynamoGraphDeploymentStatus {
            restart: r.status,
            ..Default::default()
        });
        let again = restart.resolve(&g, &rolling).await.unwrap();
        assert!(again.superseded.is_none());
        assert_eq!(again.stamps, None);
    }

    #[tokio::test]
    async fn a_read_failure_is_the_steps_error() {
        let d = Double::new();
        let mut g = graph(Some("b"), true, &[]);
        g.status = Some(api::DynamoGraphDeploymentStatus {
            restart: Some(st("b", Restarting, &["Worker"])),
            ..Default::default()
        });
        let g = d.insert(g);
        d.fail_next(
            Verb::Get,
            "DynamoComponentDeployment",
            kit::Error::Forbidden("no".into()),
        );
        let err = Restart::new(d.reader())
            .resolve(&g, &WorkerGeneration::settled("h"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Read { .. }));
    }
}
