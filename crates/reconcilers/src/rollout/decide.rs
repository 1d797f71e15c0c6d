//! The rolling update as a pure decision, and the phase state machine it drives.
//!
//! [`decide`] maps what a reconcile observed ([`Observed`]: the target and active worker
//! generations, every worker component's DCDs per generation with their replica counts, the
//! strategy, the target generation's pending pods, the recorded phase and the time) to one
//! [`Decision`]: the step, the next `status.rollingUpdate`, the replicas of every generation,
//! which old generations are kept, whether the target is recorded as active, and whether (and
//! why) the rollout cannot progress. It performs no I/O and reads no clock (`now` is observed),
//! so every branch is a table row in the tests. The reconciler ([`super::Rollout`]) observes,
//! decides, checks the move against [`TRANSITIONS`] (written down in `docs/dgd-reconcile.md`,
//! kept equal by a test), then applies.
//!
//! # Replicas per generation
//! Per worker component, as upstream's `buildRollingUpdateContext` (a DCD without
//! `spec.replicas` counts as 1; a missing new DCD as 0; "available" is
//! `status.component.availableReplicas`):
//!
//! | strategy | old generations (together) | new generation |
//! | --- | --- | --- |
//! | `RollingUpdate` | `old − min(maxScaledDown, oldUnhealthy + availableSurplus)` where `minAvailable = desired − maxUnavailable`, `maxScaledDown = old + new − minAvailable − newUnavailable`, `availableSurplus = oldAvailable + newAvailable − minAvailable` (each at least 0) | `min(desired, new + max(0, desired + maxSurge − old − new))` |
//! | `Recreate` | 0 | 0 until every old DCD is drained, then `desired` |
//!
//! The old count is spread over the old DCDs ([`allocate`]): each keeps its available replicas
//! (unavailable ones go first), a surplus is removed from the oldest generation first, a
//! shortfall is filled back into the newest. An old DCD is **drained** when it asks for 0
//! replicas, its controller observed that, it reports 0 replicas, and (with a pod watch) no pod
//! of it is still running. A component is **updated** when its new DCD is ready with at least
//! the desired replicas and no old DCD of it has a ready replica; the rollout is **complete**
//! when every worker component is updated and every old DCD drained.
//!
//! # Cannot progress
//! A pod of the target generation that is `Pending` with `PodScheduled=False` for longer than
//! the progress deadline (counted from its creation) makes the step [`Step::Stuck`], with the
//! scheduler's message. Until a pending pod reaches the deadline, the decision asks to look
//! again when it does ([`Decision::requeue_after`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::common::RollingUpdatePhase as Phase;
use api::deployment_strategy::DeploymentStrategy;
use api::v1beta1::RollingUpdateStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// One worker DCD, as the decision sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// Its worker generation (the worker hash label).
    pub hash: String,
    /// Its creation, in seconds since the epoch (orders old generations).
    pub created: i64,
    /// Its `spec.replicas` (`None`: unset, counts as 1).
    pub spec: Option<i32>,
    /// `status.component.replicas`: its non-terminated pods (`None`: not reported).
    pub replicas: Option<i32>,
    /// `status.component.readyReplicas`.
    pub ready: i32,
    /// `status.component.availableReplicas`.
    pub available: i32,
    /// Its controller observed its latest generation.
    pub observed: bool,
    /// Observed and `Available=True` (`DynamoComponentDeployment::is_ready`).
    pub settled: bool,
    /// A pod of it is not yet terminal (only known with a pod watch; otherwise `false`).
    pub running_pods: bool,
}

impl Workload {
    /// Its `spec.replicas`, an unset count being 1.
    pub fn desired(&self) -> i32 {
        self.spec.unwrap_or(1)
    }

    /// Asks for nothing, observed so, runs nothing.
    pub fn drained(&self) -> bool {
        self.spec == Some(0) && self.observed && self.replicas == Some(0) && !self.running_pods
    }
}

/// A pod of the target generation that is not running yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingPod {
    /// Its name.
    pub name: String,
    /// Its creation, in seconds since the epoch.
    pub created: i64,
    /// The scheduler's message while it cannot be scheduled (`PodScheduled=False`).
    pub unschedulable: Option<String>,
}

/// One worker component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    /// The component name.
    pub name: String,
    /// The replicas it should run (its `replicas`, or its scaling adapter's).
    pub desired: i32,
    /// Its strategy.
    pub strategy: DeploymentStrategy,
    /// Its DCD of the target generation, if it exists.
    pub new: Option<Workload>,
    /// Its DCDs of every other generation.
    pub old: Vec<Workload>,
    /// The target generation's pods that are still `Pending`.
    pub pending: Vec<PendingPod>,
}

impl Component {
    /// The new DCD is ready at the desired replicas and no old replica is ready.
    pub fn updated(&self) -> bool {
        self.new
            .as_ref()
            .is_some_and(|n| n.settled && n.ready >= self.desired)
            && self.old.iter().map(|w| w.ready).sum::<i32>() == 0
    }
}

/// Everything [`decide`] looks at.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The generation the spec asks for (the worker hash).
    pub target: String,
    /// The generation recorded as serving (or recovered from the DCDs); `None` on a first
    /// deploy.
    pub active: Option<String>,
    /// The graph has a multinode component (no managed rollout).
    pub multinode: bool,
    /// The current `status.rollingUpdate`.
    pub status: Option<RollingUpdateStatus>,
    /// The worker components, in spec order.
    pub components: Vec<Component>,
    /// Now.
    pub now: Time,
    /// How long a pod of the target generation may stay unschedulable.
    pub deadline: Duration,
}

impl Observed {
    /// Another generation than the target is active or still has DCDs.
    pub fn rolling(&self) -> bool {
        self.active.as_deref().is_some_and(|a| a != self.target)
            || self.components.iter().any(|c| !c.old.is_empty())
    }
}

/// The replicas of one component's generations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targets {
    /// The target generation's DCD.
    pub new: i32,
    /// Each old DCD, by name.
    pub old: BTreeMap<String, i32>,
}

/// What a reconcile did, the label of a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// No generation is active yet (first deploy): the target is recorded.
    First,
    /// The target is active and alone: the record is kept (or restored).
    Settled,
    /// The graph has a multinode component: the target is recorded, no managed rollout.
    Unsupported,
    /// A rollout starts.
    Start,
    /// The started rollout is under way.
    Begin,
    /// The rollout steps the generations.
    Progress,
    /// The rollout cannot progress: a new pod is unschedulable past the deadline.
    Stuck,
    /// The rollout is complete: the target is recorded, the old generations go.
    Complete,
}

/// What to do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// The step (`None` only in [`Decision::default`]).
    pub step: Option<Step>,
    /// The next `status.rollingUpdate`.
    pub status: Option<RollingUpdateStatus>,
    /// Record the target as the active generation.
    pub record: bool,
    /// Old generations whose DCDs are kept (all of them while the rollout runs).
    pub retained: BTreeSet<String>,
    /// While the rollout runs: the replicas of every worker component's generations.
    pub targets: BTreeMap<String, Targets>,
    /// Why the rollout cannot progress.
    pub stuck: Option<String>,
    /// Look again after this long (a pending pod reaches the deadline then).
    pub requeue_after: Option<Duration>,
}

impl Decision {
    /// A rolling update is pending or in progress after this step.
    pub fn rolling(&self) -> bool {
        matches!(
            phase_of(self.status.as_ref()),
            Some(Phase::Pending | Phase::InProgress)
        )
    }
}

/// A phase of [`TRANSITIONS`]; `None` is "no rolling update" (no status, or the empty phase).
pub type From = Option<Phase>;

/// The phase of `status`, the empty phase counting as none.
pub fn phase_of(status: Option<&RollingUpdateStatus>) -> From {
    status.and_then(|s| s.phase).filter(|p| *p != Phase::None)
}

/// The rolling update decision.
///
/// | observed | step |
/// | --- | --- |
/// | a multinode component | [`Step::Unsupported`] |
/// | no active generation | [`Step::First`] |
/// | the target is active and alone, no rollout recorded as running | [`Step::Settled`] |
/// | the target is active and alone, a rollout recorded as running (a revert whose other generation is gone) | [`Step::Complete`] |
/// | every component updated, every old DCD drained | [`Step::Complete`] |
/// | otherwise, no rollout running | [`Step::Start`] |
/// | otherwise, `Pending` | [`Step::Begin`] |
/// | otherwise, a new pod unschedulable past the deadline | [`Step::Stuck`] |
/// | otherwise | [`Step::Progress`] |
pub fn decide(o: &Observed) -> Decision {
    let phase = phase_of(o.status.as_ref());
    let running = matches!(phase, Some(Phase::Pending | Phase::InProgress));
    let kept = Decision {
        step: None,
        status: o.status.clone(),
        record: true,
        ..Decision::default()
    };
    if o.multinode {
        let mut d = Decision {
            step: Some(Step::Unsupported),
            ..kept
        };
        if running {
            d.status = Some(RollingUpdateStatus {
                phase: Some(Phase::Failed),
                end_time: Some(o.now.clone()),
                ..o.status.clone().unwrap_or_default()
            });
        }
        return d;
    }
    if o.active.is_none() {
        return Decision {
            step: Some(Step::First),
            ..kept
        };
    }
    if !o.rolling() {
        if running {
            // A revert (or a second change back) whose other generation is gone already.
            return completed(o);
        }
        return Decision {
            step: Some(Step::Settled),
            ..kept
        };
    }
    let complete = o.components.iter().all(Component::updated)
        && o.components
            .iter()
            .all(|c| c.old.iter().all(Workload::drained));
    if complete {
        return completed(o);
    }
    rolling(o, phase)
}

/// [`Step::Complete`]: the target recorded, every old generation dropped.
fn completed(o: &Observed) -> Decision {
    let previous = o.status.clone().unwrap_or_default();
    let mut updated: Vec<String> = o.components.iter().map(|c| c.name.clone()).collect();
    updated.sort();
    Decision {
        step: Some(Step::Complete),
        status: Some(RollingUpdateStatus {
            phase: Some(Phase::Completed),
            start_time: previous.start_time.or_else(|| Some(o.now.clone())),
            end_time: Some(o.now.clone()),
            updated_components: updated,
        }),
        record: true,
        ..Decision::default()
    }
}

/// [`Step::Start`], [`Step::Begin`], [`Step::Stuck`] or [`Step::Progress`]: both generations
/// kept, stepped per component.
fn rolling(o: &Observed, phase: From) -> Decision {
    let targets: BTreeMap<String, Targets> = o
        .components
        .iter()
        .map(|c| (c.name.clone(), targets(c)))
        .collect();
    let retained: BTreeSet<String> = o
        .components
        .iter()
        .flat_map(|c| c.old.iter().map(|w| w.hash.clone()))
        .chain(o.active.clone().filter(|a| *a != o.target))
        .collect();
    let (stuck, requeue_after) = progress(o);
    let previous = o.status.clone().unwrap_or_default();
    let (step, status) = match phase {
        Some(Phase::Pending) => (
            Step::Begin,
            RollingUpdateStatus {
                phase: Some(Phase::InProgress),
                ..previous
            },
        ),
        Some(Phase::InProgress) => {
            let mut updated: Vec<String> = o
                .components
                .iter()
                .filter(|c| c.updated())
                .map(|c| c.name.clone())
                .collect();
            updated.sort();
            let step = if stuck.is_some() {
                Step::Stuck
            } else {
                Step::Progress
            };
            (
                step,
                RollingUpdateStatus {
                    phase: Some(Phase::InProgress),
                    updated_components: updated,
                    ..previous
                },
            )
        }
        _ => (
            Step::Start,
            RollingUpdateStatus {
                phase: Some(Phase::Pending),
                start_time: Some(o.now.clone()),
                end_time: None,
                updated_components: Vec::new(),
            },
        ),
    };
    Decision {
        step: Some(step),
        status: Some(status),
        record: false,
        retained,
        targets,
        // Only a rollout under way is reported stuck.
        stuck: stuck.filter(|_| step == Step::Stuck),
        requeue_after,
    }
}

/// Why the rollout cannot progress (pods of the target generation unschedulable past the
/// deadline, grouped per component and scheduler message), and when the next pending pod
/// reaches the deadline.
fn progress(o: &Observed) -> (Option<String>, Option<Duration>) {
    let now = o.now.0.as_second();
    let deadline = i64::try_from(o.deadline.as_secs()).unwrap_or(i64::MAX);
    let mut stuck = Vec::new();
    let mut next: Option<i64> = None;
    for c in o.components.iter().filter(|c| !c.updated()) {
        // Per message (in order of first appearance): the pods, the longest wait.
        let mut groups: Vec<(&str, Vec<&str>, i64)> = Vec::new();
        let mut pods: Vec<&PendingPod> = c.pending.iter().collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        for pod in pods {
            let due = pod.created.saturating_add(deadline);
            if due > now {
                next = Some(next.map_or(due - now, |n| n.min(due - now)));
            } else if let Some(message) = &pod.unschedulable {
                let waited = now - pod.created;
                match groups.iter_mut().find(|g| g.0 == message) {
                    Some(group) => {
                        group.1.push(&pod.name);
                        group.2 = group.2.max(waited);
                    }
                    None => groups.push((message, vec![&pod.name], waited)),
                }
            }
        }
        for (message, names, waited) in groups {
            let pods = if names.len() == 1 { "pod" } else { "pods" };
            stuck.push(format!(
                "{}: {pods} {} unschedulable for {waited}s: {message}",
                c.name,
                names.join(", ")
            ));
        }
    }
    let stuck = (!stuck.is_empty())
        .then(|| format!("Rolling update cannot progress: {}", stuck.join("; ")));
    let requeue = next.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
    (stuck, requeue)
}

/// The replicas of one component's generations (see the module docs).
pub fn targets(c: &Component) -> Targets {
    let old_spec: i32 = c.old.iter().map(Workload::desired).sum();
    let old_available: i32 = c.old.iter().map(|w| w.available).sum();
    let (new_spec, new_available) = c
        .new
        .as_ref()
        .map_or((0, 0), |w| (w.desired(), w.available));
    let desired = c.desired;
    let (old, new) = match &c.strategy {
        DeploymentStrategy::Recreate => {
            let drained = c.old.iter().all(Workload::drained);
            (0, if drained { desired } else { 0 })
        }
        strategy => {
            let budget = strategy.budget(desired);
            let min_available = desired - budget.max_unavailable;
            let new_unavailable = (new_spec - new_available).max(0);
            let max_scaled_down = (old_spec + new_spec - min_available - new_unavailable).max(0);
            let old_unhealthy = (old_spec - old_available).max(0);
            let surplus = (old_available + new_available - min_available).max(0);
            let old = (old_spec - max_scaled_down.min(old_unhealthy + surplus)).max(0);
            let scale_up = (desired + budget.max_surge - old_spec - new_spec).max(0);
            (old, desired.min(new_spec + scale_up))
        }
    };
    Targets {
        new,
        old: allocate(&c.old, old),
    }
}

/// Spread `target` replicas over the old DCDs `old`: each keeps `min(spec, available)`; a
/// surplus is removed from the oldest first, a shortfall filled (up to each one's spec) into
/// the newest first (upstream's `allocateOldWorkerDCDReplicas`).
pub fn allocate(old: &[Workload], target: i32) -> BTreeMap<String, i32> {
    let mut plans: Vec<(i64, &str, i32, i32)> = old
        .iter()
        .map(|w| {
            (
                w.created,
                w.name.as_str(),
                w.desired(),
                w.desired().min(w.available),
            )
        })
        .collect();
    let serving: i32 = plans.iter().map(|p| p.3).sum();
    if serving > target {
        plans.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let mut remove = serving - target;
        for plan in &mut plans {
            let removed = plan.3.min(remove);
            plan.3 -= removed;
            remove -= removed;
        }
    } else if serving < target {
        plans.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let mut add = target - serving;
        for plan in &mut plans {
            let added = (plan.2 - plan.3).min(add).max(0);
            plan.3 += added;
            add -= added;
        }
    }
    plans
        .into_iter()
        .map(|(_, name, _, replicas)| (name.to_string(), replicas))
        .collect()
}

/// One allowed move of the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The phases this move may start from (`None`: no rolling update).
    pub from: &'static [From],
    /// The step.
    pub step: Step,
    /// The phase it ends in (`None` with [`Transition::keeps`]: the phase is kept).
    pub to: From,
    /// The phase is kept.
    pub keeps: bool,
    /// When it happens.
    pub when: &'static str,
}

const ANY: &[From] = &[
    None,
    Some(Phase::Pending),
    Some(Phase::InProgress),
    Some(Phase::Completed),
    Some(Phase::Failed),
];
const IDLE: &[From] = &[None, Some(Phase::Completed), Some(Phase::Failed)];
const RUNNING: &[From] = &[Some(Phase::Pending), Some(Phase::InProgress)];

/// Every allowed transition. Anything else is a bug: the reconciler refuses it
/// ([`super::Error::IllegalTransition`]) and the tests walk the machine to prove it never
/// happens.
pub const TRANSITIONS: &[Transition] = &[
    Transition {
        from: ANY,
        step: Step::First,
        to: None,
        keeps: true,
        when: "no generation is active (first deploy): the target is recorded",
    },
    Transition {
        from: IDLE,
        step: Step::Settled,
        to: None,
        keeps: true,
        when: "the target is the active generation and no other generation has DCDs: the record is kept (restored when it was lost)",
    },
    Transition {
        from: IDLE,
        step: Step::Unsupported,
        to: None,
        keeps: true,
        when: "the graph has a multinode component: the target is recorded at once, a Warning `RollingUpdateNotSupported` once it changed",
    },
    Transition {
        from: RUNNING,
        step: Step::Unsupported,
        to: Some(Phase::Failed),
        keeps: false,
        when: "as above, while a rollout ran: `endTime`",
    },
    Transition {
        from: IDLE,
        step: Step::Start,
        to: Some(Phase::Pending),
        keeps: false,
        when: "the target is not the active generation, or another generation still has DCDs: `startTime`, event `RollingUpdateStarted`; the generations are stepped",
    },
    Transition {
        from: &[Some(Phase::Pending)],
        step: Step::Begin,
        to: Some(Phase::InProgress),
        keeps: false,
        when: "the next pass of a started rollout; the generations are stepped",
    },
    Transition {
        from: &[Some(Phase::InProgress)],
        step: Step::Progress,
        to: Some(Phase::InProgress),
        keeps: false,
        when: "not every component is updated or an old DCD is not drained: the generations are stepped, `updatedComponents` so far",
    },
    Transition {
        from: &[Some(Phase::InProgress)],
        step: Step::Stuck,
        to: Some(Phase::InProgress),
        keeps: false,
        when: "as Progress, and a pod of the target generation is unschedulable past the progress deadline: Ready reason `rolling_update_stuck` with the scheduler's message",
    },
    Transition {
        from: ANY,
        step: Step::Complete,
        to: Some(Phase::Completed),
        keeps: false,
        when: "every component is updated and every old DCD drained (also a revert, and a rollout a lost status forgot): `endTime`, every worker in `updatedComponents`, the target recorded, then the old generations deleted; event `RollingUpdateCompleted`",
    },
];

fn phase_name(phase: From) -> &'static str {
    match phase {
        None | Some(Phase::None) => "(none)",
        Some(Phase::Pending) => "Pending",
        Some(Phase::InProgress) => "InProgress",
        Some(Phase::Completed) => "Completed",
        Some(Phase::Failed) => "Failed",
    }
}

/// [`TRANSITIONS`] as the Markdown table of `docs/dgd-reconcile.md`.
pub fn transitions_markdown() -> String {
    let to = |t: &Transition| {
        if t.keeps {
            "unchanged".to_string()
        } else {
            phase_name(t.to).to_string()
        }
    };
    let rows = TRANSITIONS
        .iter()
        .map(|t| (t.from, format!("{:?}", t.step), to(t), t.when));
    kit::table::transitions(rows, ANY, phase_name)
}

/// Whether moving from `from` to `to` by `step` is in [`TRANSITIONS`].
pub fn allowed(from: From, step: Step, to: From) -> bool {
    TRANSITIONS.iter().any(|t| {
        t.step == step && t.from.contains(&from) && if t.keeps { to == from } else { to == t.to }
    })
}
