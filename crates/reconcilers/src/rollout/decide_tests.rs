//! The rolling update decision: table tests (upstream's cases of
//! `dgd_worker_rollout_reconciler_test.go` as rows), the transition table, and a property test
//! that rolls simulated generations on a simulated cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use api::common::RollingUpdatePhase as Phase;
use api::deployment_strategy::DeploymentStrategy;
use api::labels;
use api::v1beta1::RollingUpdateStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::decide::*;

const OLD: &str = "oldhash1";
const NEW: &str = "newhash2";
const T0: i64 = 1_700_000_000;

fn at(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
}

fn rolling(surge: &str, unavailable: &str) -> DeploymentStrategy {
    DeploymentStrategy::from_annotations(&BTreeMap::from([
        (
            labels::DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE.to_string(),
            surge.to_string(),
        ),
        (
            labels::DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE.to_string(),
            unavailable.to_string(),
        ),
    ]))
}

fn default_strategy() -> DeploymentStrategy {
    DeploymentStrategy::from_annotations(&BTreeMap::new())
}

/// A DCD of `component` at `hash`: `(spec, status replicas, available)`, ready = available,
/// observed, settled when available reaches spec.
fn dcd(component: &str, hash: &str, (spec, replicas, available): (i32, i32, i32)) -> Workload {
    Workload {
        name: format!("g-{}-{hash}", component.to_lowercase()),
        hash: hash.into(),
        created: if hash == NEW { T0 + 100 } else { T0 },
        spec: Some(spec),
        replicas: Some(replicas),
        ready: available,
        available,
        observed: true,
        settled: available >= spec,
        running_pods: false,
    }
}

fn component(
    name: &str,
    desired: i32,
    strategy: DeploymentStrategy,
    old: Vec<Workload>,
    new: Option<Workload>,
) -> Component {
    Component {
        name: name.into(),
        desired,
        strategy,
        new,
        old,
        pending: Vec::new(),
    }
}

fn observed(components: Vec<Component>, phase: Option<Phase>) -> Observed {
    Observed {
        target: NEW.into(),
        active: Some(OLD.into()),
        multinode: false,
        status: phase.map(|p| RollingUpdateStatus {
            phase: Some(p),
            start_time: Some(at(T0)),
            ..Default::default()
        }),
        components,
        now: at(T0 + 200),
        deadline: Duration::from_secs(600),
    }
}

/// The total old and the new target of one component.
fn totals(c: &Component) -> (i32, i32) {
    let t = targets(c);
    (t.old.values().sum(), t.new)
}

/// Upstream's `TestBuildRollingUpdateContext` (15 cases) and
/// `TestBuildRollingUpdateContext_NoNewDCDExists` (1): old and new replicas per component.
#[test]
fn replicas_per_generation_as_upstream() {
    let mut default_old = dcd("Worker", OLD, (1, 1, 1));
    default_old.spec = None;
    let mut zero_old = dcd("Worker", OLD, (0, 0, 0));
    zero_old.observed = true;
    let mut terminating_old = zero_old.clone();
    terminating_old.running_pods = true;
    let mut second_old = dcd("Worker", "oldhash0", (4, 4, 4));
    second_old.created = T0 - 100;
    let graph_recreate = DeploymentStrategy::of_component(
        &BTreeMap::from([(
            labels::DEPLOYMENT_STRATEGY.to_string(),
            "Recreate".to_string(),
        )]),
        &Default::default(),
    );
    type Case = (
        &'static str,
        i32,
        DeploymentStrategy,
        Vec<Workload>,
        Option<Workload>,
        (i32, i32),
    );
    let w = |s: (i32, i32, i32)| dcd("Worker", OLD, s);
    let n = |s: (i32, i32, i32)| Some(dcd("Worker", NEW, s));
    let cases: Vec<Case> = vec![
        (
            "normal rollout start",
            10,
            rolling("0", "2"),
            vec![w((10, 10, 10))],
            None,
            (8, 0),
        ),
        (
            "default old replica counts as one",
            1,
            rolling("1", "0"),
            vec![default_old],
            None,
            (1, 1),
        ),
        (
            "surge budget uses spec not actual",
            10,
            rolling("0", "2"),
            vec![w((8, 9, 8))],
            None,
            (8, 2),
        ),
        (
            "old fleet degraded",
            10,
            default_strategy(),
            vec![w((8, 8, 4))],
            n((3, 3, 3)),
            (5, 5),
        ),
        (
            "some unhealthy old pods",
            10,
            default_strategy(),
            vec![w((10, 10, 6))],
            None,
            (8, 3),
        ),
        (
            "terminating pods",
            10,
            default_strategy(),
            vec![w((5, 8, 5))],
            n((5, 5, 5)),
            (3, 8),
        ),
        (
            "new pods unavailable",
            10,
            default_strategy(),
            vec![w((10, 10, 6))],
            n((4, 4, 0)),
            (8, 4),
        ),
        (
            "multiple old generations aggregate",
            10,
            default_strategy(),
            vec![second_old, w((4, 4, 4))],
            n((2, 2, 2)),
            (6, 5),
        ),
        (
            "recreate drains old before new",
            3,
            recreate_with_knobs(),
            vec![w((3, 3, 3))],
            n((2, 2, 2)),
            (0, 0),
        ),
        (
            "recreate starts new after old zero",
            3,
            DeploymentStrategy::Recreate,
            vec![zero_old],
            None,
            (0, 3),
        ),
        (
            "recreate waits for a terminating old pod",
            3,
            DeploymentStrategy::Recreate,
            vec![terminating_old],
            None,
            (0, 0),
        ),
        (
            "recreate from the graph's annotations",
            3,
            graph_recreate,
            vec![w((3, 3, 3))],
            None,
            (0, 0),
        ),
        (
            "no new DCD yet",
            10,
            default_strategy(),
            vec![w((10, 10, 10))],
            None,
            (8, 3),
        ),
    ];
    for (name, desired, strategy, old, new, want) in cases {
        let c = component("Worker", desired, strategy, old, new);
        assert_eq!(totals(&c), want, "{name}");
    }

    // Multi-service independence; recreate and rolling components progress independently.
    let prefill = component(
        "Prefill",
        4,
        default_strategy(),
        vec![dcd("Prefill", OLD, (0, 0, 0))],
        Some(dcd("Prefill", NEW, (4, 4, 4))),
    );
    let decode = component(
        "Decode",
        8,
        default_strategy(),
        vec![dcd("Decode", OLD, (6, 6, 6))],
        Some(dcd("Decode", NEW, (2, 2, 0))),
    );
    assert_eq!((totals(&prefill), totals(&decode)), ((0, 4), (6, 4)));
    let recreate = component(
        "Prefill",
        2,
        recreate_with_knobs(),
        vec![dcd("Prefill", OLD, (2, 2, 2))],
        None,
    );
    let decode = component(
        "Decode",
        4,
        default_strategy(),
        vec![dcd("Decode", OLD, (4, 4, 4))],
        None,
    );
    assert_eq!((totals(&recreate), totals(&decode)), ((0, 0), (3, 1)));
}

/// `Recreate`, whatever the surge and unavailable annotations next to it say.
fn recreate_with_knobs() -> DeploymentStrategy {
    DeploymentStrategy::from_annotations(&BTreeMap::from([
        (
            labels::DEPLOYMENT_STRATEGY.to_string(),
            "Recreate".to_string(),
        ),
        (
            labels::DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE.to_string(),
            "100%".to_string(),
        ),
        (
            labels::DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE.to_string(),
            "0".to_string(),
        ),
    ]))
}

/// Upstream's `TestAllocateOldWorkerDCDReplicas` (3 cases) and
/// `TestScaleOldWorkerDCDs_MultipleOldGenerationsPreservesAvailableReplicas` (1).
#[test]
fn old_replicas_are_spread_as_upstream() {
    let old_dcd = |name: &str, created: i64, spec: i32, available: i32| Workload {
        name: name.into(),
        created,
        spec: Some(spec),
        available,
        ..Default::default()
    };
    let cases = [
        (
            "overlapping update keeps the healthy original, drops the unavailable intermediate",
            15,
            vec![old_dcd("a", T0, 15, 15), old_dcd("b", T0 + 60, 10, 0)],
            [("a", 15), ("b", 0)],
        ),
        (
            "a surplus leaves the oldest generation first",
            3,
            vec![old_dcd("a", T0, 3, 3), old_dcd("b", T0 + 60, 1, 1)],
            [("a", 2), ("b", 1)],
        ),
        (
            "a degraded original is filled from the newest old generation",
            15,
            vec![old_dcd("a", T0, 15, 12), old_dcd("b", T0 + 60, 10, 0)],
            [("a", 12), ("b", 3)],
        ),
    ];
    for (name, target, old, want) in cases {
        let want: BTreeMap<String, i32> = want.iter().map(|(n, r)| (n.to_string(), *r)).collect();
        assert_eq!(allocate(&old, target), want, "{name}");
    }

    let c = component(
        "Worker",
        20,
        default_strategy(),
        vec![old_dcd("a", T0, 15, 15), old_dcd("b", T0 + 60, 10, 0)],
        None,
    );
    let t = targets(&c);
    assert_eq!(t.new, 0);
    assert_eq!(
        t.old,
        BTreeMap::from([("a".to_string(), 15), ("b".to_string(), 0)])
    );
}

/// Upstream's `TestOldWorkerDCDsAtZero` (7 cases), per DCD (a component is drained when all of
/// its old DCDs are).
#[test]
fn drained_as_upstream() {
    let w = |spec: Option<i32>, observed: bool, replicas: Option<i32>| Workload {
        spec,
        observed,
        replicas,
        ..Default::default()
    };
    let all = |ws: &[Workload]| ws.iter().all(Workload::drained);
    assert!(all(&[]), "no old generations");
    assert!(!all(&[w(Some(1), true, Some(1))]), "not scaled down");
    assert!(!all(&[w(None, true, Some(0))]), "the default replica");
    assert!(
        !all(&[w(Some(0), false, Some(0))]),
        "scale-down not observed"
    );
    assert!(!all(&[w(Some(0), true, None)]), "replicas not reported");
    assert!(!all(&[w(Some(0), true, Some(1))]), "replicas remain");
    assert!(all(&[w(Some(0), true, Some(0)), w(Some(0), true, Some(0))]));
    assert!(!all(&[
        w(Some(0), true, Some(0)),
        w(Some(0), true, Some(1))
    ]));
    let mut running = w(Some(0), true, Some(0));
    running.running_pods = true;
    assert!(!all(&[running]), "a pod still runs");
}

fn phase(d: &Decision) -> Option<Phase> {
    phase_of(d.status.as_ref())
}

/// Upstream's `TestContinueRollingUpdate_*` (4 cases) and `TestReconcileRollingUpdate_*`
/// (10 cases, `RecreateAtZeroWaitsForOldPodTermination` with its 2 subcases), and
/// `TestIsRollingUpdateInProgress` (5 cases), as decisions.
#[test]
fn steps_as_upstream() {
    let ready = |name: &str, hash: &str, n: i32| dcd(name, hash, (n, n, n));
    let partly = |name: &str, hash: &str, spec: i32, n: i32| dcd(name, hash, (spec, spec, n));
    let two = |prefill: Vec<Workload>, new_prefill, decode: Vec<Workload>, new_decode| {
        vec![
            component("Prefill", 2, default_strategy(), prefill, new_prefill),
            component("Decode", 3, default_strategy(), decode, new_decode),
        ]
    };
    struct Row {
        name: &'static str,
        observed: Observed,
        step: Step,
        phase: Option<Phase>,
        updated: &'static [&'static str],
        record: bool,
    }
    let mut settled = observed(
        vec![component(
            "Worker",
            1,
            default_strategy(),
            vec![],
            Some(ready("Worker", NEW, 1)),
        )],
        Some(Phase::Completed),
    );
    settled.active = Some(NEW.into());
    let mut hash_matches_in_progress = settled.clone();
    hash_matches_in_progress.status.as_mut().unwrap().phase = Some(Phase::InProgress);
    let mut stale_annotation_all_ready = observed(
        two(
            vec![],
            Some(ready("Prefill", NEW, 2)),
            vec![],
            Some(ready("Decode", NEW, 3)),
        ),
        Some(Phase::Completed),
    );
    stale_annotation_all_ready.active = Some("stale000".into());
    let rows = vec![
        Row {
            name: "partial completion: prefill updated, decode not",
            observed: observed(
                two(
                    vec![],
                    Some(ready("Prefill", NEW, 2)),
                    vec![ready("Decode", OLD, 2)],
                    Some(partly("Decode", NEW, 3, 1)),
                ),
                Some(Phase::InProgress),
            ),
            step: Step::Progress,
            phase: Some(Phase::InProgress),
            updated: &["Prefill"],
            record: false,
        },
        Row {
            name: "aggregate ready but not per component",
            observed: observed(
                two(
                    vec![],
                    Some(ready("Prefill", NEW, 5)),
                    vec![],
                    Some(partly("Decode", NEW, 3, 0)),
                ),
                Some(Phase::InProgress),
            ),
            step: Step::Progress,
            phase: Some(Phase::InProgress),
            updated: &["Prefill"],
            record: false,
        },
        Row {
            name: "all components updated",
            observed: observed(
                two(
                    vec![],
                    Some(ready("Prefill", NEW, 2)),
                    vec![],
                    Some(ready("Decode", NEW, 3)),
                ),
                Some(Phase::InProgress),
            ),
            step: Step::Complete,
            phase: Some(Phase::Completed),
            updated: &["Decode", "Prefill"],
            record: true,
        },
        Row {
            name: "cascading spec change: two old generations serve, the newest is not ready",
            observed: observed(
                vec![component(
                    "Worker",
                    2,
                    default_strategy(),
                    vec![
                        ready("Worker", "hashaaaa", 1),
                        ready("Worker", "hashbbbb", 1),
                    ],
                    Some(partly("Worker", NEW, 2, 0)),
                )],
                Some(Phase::InProgress),
            ),
            step: Step::Progress,
            phase: Some(Phase::InProgress),
            updated: &[],
            record: false,
        },
        Row {
            name: "no change",
            observed: settled.clone(),
            step: Step::Settled,
            phase: Some(Phase::Completed),
            updated: &[],
            record: true,
        },
        Row {
            name: "a spec change starts a rollout",
            observed: observed(
                vec![component(
                    "Worker",
                    1,
                    default_strategy(),
                    vec![ready("Worker", OLD, 1)],
                    None,
                )],
                Some(Phase::Completed),
            ),
            step: Step::Start,
            phase: Some(Phase::Pending),
            updated: &[],
            record: false,
        },
        Row {
            name: "pending to in progress",
            observed: observed(
                vec![component(
                    "Worker",
                    1,
                    default_strategy(),
                    vec![ready("Worker", OLD, 1)],
                    None,
                )],
                Some(Phase::Pending),
            ),
            step: Step::Begin,
            phase: Some(Phase::InProgress),
            updated: &[],
            record: false,
        },
        Row {
            name: "hash matches but in progress: completes",
            observed: hash_matches_in_progress,
            step: Step::Complete,
            phase: Some(Phase::Completed),
            updated: &["Worker"],
            record: true,
        },
        Row {
            name: "a DCD of another generation is ready: still a new rollout",
            observed: observed(
                vec![component(
                    "Worker",
                    1,
                    default_strategy(),
                    vec![ready("Worker", "otherhash", 1)],
                    None,
                )],
                Some(Phase::Completed),
            ),
            step: Step::Start,
            phase: Some(Phase::Pending),
            updated: &[],
            record: false,
        },
        Row {
            name: "stale annotation: not every new worker ready",
            observed: {
                let mut o = observed(
                    two(vec![], Some(ready("Prefill", NEW, 2)), vec![], None),
                    Some(Phase::Completed),
                );
                o.active = Some("stale000".into());
                o
            },
            step: Step::Start,
            phase: Some(Phase::Pending),
            updated: &[],
            record: false,
        },
        Row {
            name: "stale annotation: every new worker ready",
            observed: stale_annotation_all_ready,
            step: Step::Complete,
            phase: Some(Phase::Completed),
            updated: &["Decode", "Prefill"],
            record: true,
        },
        Row {
            name: "the empty phase starts a rollout",
            observed: observed(
                vec![component(
                    "Worker",
                    1,
                    default_strategy(),
                    vec![ready("Worker", OLD, 1)],
                    None,
                )],
                Some(Phase::None),
            ),
            step: Step::Start,
            phase: Some(Phase::Pending),
            updated: &[],
            record: false,
        },
    ];
    for row in rows {
        let d = decide(&row.observed);
        assert_eq!(d.step, Some(row.step), "{}", row.name);
        assert_eq!(phase(&d), row.phase, "{}", row.name);
        assert_eq!(
            d.status
                .as_ref()
                .map(|s| s.updated_components.clone())
                .unwrap_or_default(),
            row.updated,
            "{}",
            row.name
        );
        assert_eq!(d.record, row.record, "{}", row.name);
        if row.step == Step::Start {
            let s = d.status.as_ref().unwrap();
            assert_eq!(s.start_time, Some(row.observed.now.clone()), "{}", row.name);
            assert!(s.end_time.is_none(), "{}", row.name);
        }
        if row.step == Step::Complete {
            assert!(
                d.status.as_ref().unwrap().end_time.is_some(),
                "{}",
                row.name
            );
            assert!(
                d.retained.is_empty() && d.targets.is_empty(),
                "{}",
                row.name
            );
        }
        assert_transition(&row.observed, &d);
    }

    // Recreate at zero replicas waits for the old pod to terminate, from a rollout in progress
    // and from a completed status whose record is stale.
    for (from, want) in [
        (Phase::InProgress, Step::Progress),
        // Upstream resumes to InProgress here; a new rollout starts instead (Pending).
        (Phase::Completed, Step::Start),
    ] {
        let mut old = dcd("Worker", OLD, (0, 0, 0));
        old.running_pods = true;
        let new = dcd("Worker", NEW, (0, 0, 0));
        let mut o = observed(
            vec![component(
                "Worker",
                0,
                DeploymentStrategy::Recreate,
                vec![old.clone()],
                Some(new),
            )],
            Some(from),
        );
        let d = decide(&o);
        assert_eq!(d.step, Some(want), "{from:?}");
        assert!(d.retained.contains(OLD) && !d.record);
        assert_transition(&o, &d);
        o.components[0].old[0].running_pods = false;
        o.status = d.status;
        let d = decide(&o);
        let d = if d.step == Some(Step::Begin) {
            o.status = d.status;
            decide(&o)
        } else {
            d
        };
        assert_eq!(d.step, Some(Step::Complete), "{from:?}");
        assert!(d.record && d.retained.is_empty());
    }

    for (status, running) in [
        (None, false),
        (Some(Phase::None), false),
        (Some(Phase::Pending), true),
        (Some(Phase::InProgress), true),
        (Some(Phase::Completed), false),
    ] {
        let s = status.map(|p| RollingUpdateStatus {
            phase: Some(p),
            ..Default::default()
        });
        assert_eq!(
            s.as_ref().is_some_and(super::in_progress),
            running,
            "{status:?}"
        );
    }
}

fn assert_transition(o: &Observed, d: &Decision) {
    let from = phase_of(o.status.as_ref());
    let step = d.step.unwrap();
    assert!(
        allowed(from, step, phase(d)),
        "{from:?} --{step:?}--> {:?} not in the table",
        phase(d)
    );
}

/// Ours: first deploy, multinode graphs, reverts, stuck rollouts.
#[test]
fn first_unsupported_revert_and_stuck() {
    let ready = |hash: &str, n: i32| dcd("Worker", hash, (n, n, n));
    // First deploy: nothing active, the target is recorded, the phase kept.
    let mut first = observed(
        vec![component("Worker", 1, default_strategy(), vec![], None)],
        None,
    );
    first.active = None;
    let d = decide(&first);
    assert_eq!(
        (d.step, d.record, phase(&d)),
        (Some(Step::First), true, None)
    );

    // Multinode: recorded; a running rollout fails.
    for (from, to) in [
        (None, None),
        (Some(Phase::Completed), Some(Phase::Completed)),
        (Some(Phase::InProgress), Some(Phase::Failed)),
    ] {
        let mut o = observed(vec![], from);
        o.multinode = true;
        let d = decide(&o);
        assert_eq!(
            (d.step, d.record, phase(&d)),
            (Some(Step::Unsupported), true, to)
        );
        assert_transition(&o, &d);
    }

    // A revert mid-rollout: the active generation is the target again. Its DCD was stepped
    // down to 1 of 2; the aborted generation serves 1. Both are kept and the aborted one is
    // stepped down like any old generation: one unavailable replica is allowed, so it goes
    // first, and the serving generation comes back up once that is done.
    let mut revert = observed(
        vec![component(
            "Worker",
            2,
            rolling("0", "1"),
            vec![dcd("Worker", NEW, (1, 1, 1))],
            Some(dcd("Worker", OLD, (1, 1, 1))),
        )],
        Some(Phase::InProgress),
    );
    revert.target = OLD.into();
    let d = decide(&revert);
    assert_eq!(d.step, Some(Step::Progress));
    assert!(d.retained.contains(NEW));
    let t = &d.targets["Worker"];
    assert_eq!((t.old.values().sum::<i32>(), t.new), (0, 1));
    revert.components[0].old[0].spec = Some(0);
    revert.components[0].old[0].available = 0;
    revert.components[0].old[0].ready = 0;
    let t = &decide(&revert).targets["Worker"];
    assert_eq!((t.old.values().sum::<i32>(), t.new), (0, 2));

    // The aborted generation never got a DCD: the revert completes at once.
    let mut gone = observed(
        vec![component(
            "Worker",
            1,
            default_strategy(),
            vec![],
            Some(ready(OLD, 1)),
        )],
        Some(Phase::Pending),
    );
    gone.target = OLD.into();
    let d = decide(&gone);
    assert_eq!(
        (d.step, phase(&d), d.record),
        (Some(Step::Complete), Some(Phase::Completed), true)
    );

    // Stuck: a pod of the new generation unschedulable past the deadline.
    let message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.";
    let pending = |created: i64, unschedulable: bool| PendingPod {
        name: format!("w-{created}"),
        created,
        unschedulable: unschedulable.then(|| message.to_string()),
    };
    let mut o = observed(
        vec![component(
            "Worker",
            1,
            default_strategy(),
            vec![ready(OLD, 1)],
            Some(dcd("Worker", NEW, (1, 1, 0))),
        )],
        Some(Phase::InProgress),
    );
    o.components[0].pending = vec![pending(T0 + 100, true)];
    let d = decide(&o);
    assert_eq!(d.step, Some(Step::Progress));
    assert_eq!(d.stuck, None);
    assert_eq!(
        d.requeue_after,
        Some(Duration::from_secs(500)),
        "at the deadline"
    );
    o.now = at(T0 + 700);
    let d = decide(&o);
    assert_eq!(d.step, Some(Step::Stuck));
    assert_transition(&o, &d);
    assert_eq!(
        d.stuck.as_deref(),
        Some(format!("Rolling update cannot progress: Worker: pod w-{} unschedulable for 600s: {message}", T0 + 100).as_str())
    );
    assert_eq!(d.requeue_after, None);
    // Pods with the same message are named together, with the longest wait.
    o.components[0].pending = vec![pending(T0 + 100, true), pending(T0 + 50, true)];
    assert_eq!(
        decide(&o).stuck.as_deref(),
        Some(format!("Rolling update cannot progress: Worker: pods w-{}, w-{} unschedulable for 650s: {message}", T0 + 50, T0 + 100).as_str())
    );
    // Scheduled but still pending (pulling images): not stuck.
    o.components[0].pending = vec![pending(T0 + 100, false)];
    assert_eq!(decide(&o).step, Some(Step::Progress));
    // A rollout that only starts is not reported stuck yet.
    o.components[0].pending = vec![pending(T0 + 100, true)];
    o.status = None;
    let d = decide(&o);
    assert_eq!((d.step, d.stuck), (Some(Step::Start), None));
}

#[test]
fn the_document_shows_the_table() {
    let doc = include_str!("../../../../docs/dgd-reconcile.md");
    let table = transitions_markdown();
    assert!(
        doc.contains(&table),
        "docs/dgd-reconcile.md is out of date; its rolling update transition table must be:\n{table}"
    );
}

#[test]
fn the_table_refuses_what_it_does_not_list() {
    assert!(!allowed(None, Step::Begin, Some(Phase::InProgress)));
    assert!(!allowed(
        Some(Phase::InProgress),
        Step::Start,
        Some(Phase::Pending)
    ));
    assert!(!allowed(
        Some(Phase::Completed),
        Step::Progress,
        Some(Phase::InProgress)
    ));
    assert!(!allowed(
        Some(Phase::InProgress),
        Step::Settled,
        Some(Phase::InProgress)
    ));
    assert!(!allowed(Some(Phase::Completed), Step::Settled, None));
    assert!(allowed(
        Some(Phase::Completed),
        Step::Settled,
        Some(Phase::Completed)
    ));
}

// --- the property test: a simulated cluster ---------------------------------------------------

/// One generation of the simulated component: its DCD and its pods.
#[derive(Clone, Debug)]
struct Gen {
    hash: String,
    created: i64,
    spec: i32,
    /// Pods placed on a node (running, ready or not).
    scheduled: i32,
    available: i32,
    /// Pods going away, still holding their GPU until the next tick.
    terminating: i32,
    /// Creation times of the pods not scheduled yet.
    pending: Vec<i64>,
}

impl Gen {
    fn workload(&self) -> Workload {
        Workload {
            name: format!("w-{}", self.hash),
            hash: self.hash.clone(),
            created: self.created,
            spec: Some(self.spec),
            replicas: Some(self.spec),
            ready: self.available,
            available: self.available,
            observed: true,
            settled: self.available >= self.spec,
            running_pods: self.spec > 0 || self.terminating > 0,
        }
    }

    /// Scale to `spec`: pending pods go first, then unavailable ones, then available ones (as a
    /// ReplicaSet picks them); new pods start pending.
    fn scale(&mut self, spec: i32, now: i64) {
        let mut remove = (self.spec - spec).max(0);
        while remove > 0 && !self.pending.is_empty() {
            self.pending.pop();
            remove -= 1;
        }
        let unavailable = (self.scheduled - self.available).min(remove);
        self.scheduled -= unavailable;
        self.terminating += unavailable;
        remove -= unavailable;
        if remove > 0 {
            self.scheduled -= remove;
            self.available -= remove;
            self.terminating += remove;
        }
        for _ in self.spec..spec {
            self.pending.push(now);
        }
        self.spec = spec;
    }
}

struct Sim {
    desired: i32,
    strategy: DeploymentStrategy,
    /// GPUs: one per pod.
    capacity: i32,
    gens: Vec<Gen>,
    target: String,
    active: String,
    status: Option<RollingUpdateStatus>,
    now: i64,
    stuck_seen: bool,
}

impl Sim {
    fn used(&self) -> i32 {
        self.gens.iter().map(|g| g.scheduled + g.terminating).sum()
    }

    fn observed(&self) -> Observed {
        let full = self.used() >= self.capacity;
        let new = self.gens.iter().find(|g| g.hash == self.target);
        Observed {
            target: self.target.clone(),
            active: Some(self.active.clone()),
            multinode: false,
            status: self.status.clone(),
            components: vec![Component {
                name: "Worker".into(),
                desired: self.desired,
                strategy: self.strategy.clone(),
                new: new.map(Gen::workload),
                old: self
                    .gens
                    .iter()
                    .filter(|g| g.hash != self.target)
                    .map(Gen::workload)
                    .collect(),
                pending: new
                    .map(|g| {
                        g.pending
                            .iter()
                            .enumerate()
                            .map(|(i, created)| PendingPod {
                                name: format!("p{i}"),
                                created: *created,
                                unschedulable: full.then(|| "Insufficient nvidia.com/gpu".into()),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }],
            now: at(self.now),
            deadline: Duration::from_secs(600),
        }
    }

    /// One reconcile: decide, check the move, apply it to the simulated DCDs.
    fn reconcile(&mut self) -> Decision {
        let o = self.observed();
        let d = decide(&o);
        assert_transition(&o, &d);
        self.stuck_seen |= d.stuck.is_some();
        self.status = d.status.clone();
        if d.record {
            self.active = self.target.clone();
        }
        if let Some(t) = d.targets.get("Worker") {
            if !self.gens.iter().any(|g| g.hash == self.target) {
                self.gens.push(Gen {
                    hash: self.target.clone(),
                    created: self.now,
                    spec: 0,
                    scheduled: 0,
                    available: 0,
                    terminating: 0,
                    pending: Vec::new(),
                });
            }
            let now = self.now;
            for g in &mut self.gens {
                let spec = if g.hash == self.target {
                    t.new
                } else {
                    t.old[&format!("w-{}", g.hash)]
                };
                g.scale(spec, now);
            }
        } else if d.step == Some(Step::Complete) {
            self.gens.retain(|g| g.hash == self.target);
            let (desired, now) = (self.desired, self.now);
            self.gens[0].scale(desired, now);
        }
        d
    }

    /// The cluster moves: terminating pods leave, pending pods are placed while GPUs are free,
    /// placed pods become available, time passes. `dice` decides how much of it happens.
    fn tick(&mut self, dice: u8) {
        for g in &mut self.gens {
            g.terminating = 0;
        }
        let mut free = self.capacity - self.used();
        for g in &mut self.gens {
            let place = (i32::from(dice % 3)).min(free).min(g.pending.len() as i32);
            for _ in 0..place {
                g.pending.remove(0);
            }
            g.scheduled += place;
            free -= place;
            let up = (g.scheduled - g.available).min(i32::from(dice / 3 % 3));
            g.available += up;
        }
        self.now += 30 + i64::from(dice % 7) * 20;
    }

    fn check(&self) {
        let budget = self.strategy.budget(self.desired);
        let available: i32 = self.gens.iter().map(|g| g.available).sum();
        let spec: i32 = self.gens.iter().map(|g| g.spec).sum();
        if !matches!(self.strategy, DeploymentStrategy::Recreate) {
            assert!(
                available >= self.desired - budget.max_unavailable,
                "available {available} below {} - {}: {:?}",
                self.desired,
                budget.max_unavailable,
                self.gens
            );
        }
        assert!(
            available <= self.desired + budget.max_surge && spec <= self.desired + budget.max_surge,
            "above {} + {}: {:?}",
            self.desired,
            budget.max_surge,
            self.gens
        );
        if matches!(self.strategy, DeploymentStrategy::Recreate) {
            let new_runs = self
                .gens
                .iter()
                .any(|g| g.hash == self.target && g.spec > 0);
            let old_runs = self
                .gens
                .iter()
                .any(|g| g.hash != self.target && (g.spec > 0 || g.terminating > 0));
            assert!(
                !(new_runs && old_runs),
                "both generations run: {:?}",
                self.gens
            );
        }
    }
}

fn strategies() -> impl Strategy<Value = DeploymentStrategy> {
    let knob = prop_oneof![
        (0..4i32).prop_map(|n| n.to_string()),
        prop::sample::select(vec!["25%", "50%", "100%", "0%"]).prop_map(str::to_string),
    ];
    prop_oneof![
        1 => Just(DeploymentStrategy::Recreate),
        4 => (knob.clone(), knob).prop_map(|(s, u)| rolling(&s, &u)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Ready replicas stay within `[desired − maxUnavailable, desired + maxSurge]`, `Recreate`
    /// never runs both generations, every move is in the table, and a rollout that can finish
    /// (room for the surge, or an unavailable budget, or `Recreate`) ends with one generation;
    /// one that cannot is reported stuck. A revert at a random moment is a rollout back, under
    /// the same invariants.
    #[test]
    fn rollouts_keep_their_budgets_and_end_with_one_generation(
        desired in 1..6i32,
        strategy in strategies(),
        room in 0..3i32,
        revert_at in proptest::option::of(0..40usize),
        dice in proptest::collection::vec(any::<u8>(), 300),
    ) {
        let budget = strategy.budget(desired);
        let mut sim = Sim {
            desired,
            strategy: strategy.clone(),
            capacity: desired + room,
            gens: vec![Gen {
                hash: OLD.into(),
                created: T0,
                spec: desired,
                scheduled: desired,
                available: desired,
                terminating: 0,
                pending: Vec::new(),
            }],
            target: NEW.into(),
            active: OLD.into(),
            status: Some(RollingUpdateStatus { phase: Some(Phase::Completed), ..Default::default() }),
            now: T0 + 1000,
            stuck_seen: false,
        };
        let finishes = room >= 1
            || budget.max_unavailable >= 1
            || matches!(strategy, DeploymentStrategy::Recreate);
        let mut done = false;
        for (i, d) in dice.iter().enumerate() {
            if revert_at == Some(i) && sim.gens.len() > 1 {
                sim.target = OLD.into();
            }
            let decision = sim.reconcile();
            sim.check();
            if decision.step == Some(Step::Settled) {
                done = true;
                break;
            }
            sim.tick(*d);
            sim.check();
        }
        if finishes {
            prop_assert!(done, "did not finish: {:?} {:?}", sim.status, sim.gens);
            prop_assert_eq!(sim.gens.len(), 1);
            prop_assert_eq!(&sim.gens[0].hash, &sim.target);
            prop_assert_eq!(&sim.active, &sim.target);
            prop_assert_eq!(sim.gens[0].spec, desired);
        } else if !done {
            prop_assert!(sim.stuck_seen, "a rollout that cannot finish is reported stuck");
        }
    }
}
