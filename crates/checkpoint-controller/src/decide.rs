//! The create-or-reuse decision, as a pure function, and the phase state machine it drives.
//!
//! [`decide`] maps what a reconcile observed ([`Observed`]) to one [`Action`]. It performs no I/O
//! and reads no clock, so every branch is a table row in the unit tests. The reconciler executes
//! the action, then computes the new phase with [`phase_after`] and checks the move against
//! [`TRANSITIONS`] (also written down in `docs/checkpoint-state-machine.md`, kept equal by a test).

use api::checkpoint::DynamoCheckpointPhase as Phase;

/// One capture attempt of the current identity: the Job it ran and the inputs it ran with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first Job of an identity, +1 per rebuild or retry.
    pub number: i64,
    /// The checkpoint's `metadata.generation` the attempt's Job was rendered from.
    pub generation: i64,
    /// The rebuild token (annotation value) the attempt honoured, if any.
    pub rebuild: Option<String>,
}

/// The persisted outcome of the current attempt (status condition `JobCompleted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recorded {
    /// Nothing recorded yet: the attempt is in flight (or its status was lost).
    None,
    /// The attempt's Job completed and the artifact was recorded.
    Succeeded,
    /// The attempt's Job failed.
    Failed,
}

/// The state of the Job of the current attempt (or, with no attempt yet, of the first attempt's
/// name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// No such Job (confirmed: the cache of Jobs answered).
    Absent,
    /// Exists, neither complete nor failed.
    Running,
    /// Being deleted (`deletionTimestamp` set).
    Terminating,
    /// `Complete=True`.
    Complete,
    /// `Failed=True`, with the condition's reason and message.
    Failed {
        /// The Job's reason (`BackoffLimitExceeded`, `DeadlineExceeded`, ...).
        reason: String,
        /// The Job's message.
        message: String,
    },
    /// The name is taken by a Job this checkpoint does not control.
    Foreign,
}

/// Whether the artifact of the current attempt exists, per its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Artifact {
    /// The record of the current attempt exists and belongs to this checkpoint.
    Present,
    /// The record of the current attempt exists but a field it must carry was changed.
    Drifted,
    /// No record (confirmed NotFound), or only a record of an older attempt.
    Missing,
    /// The record's name is taken by an object this checkpoint does not control.
    Foreign,
}

/// Everything [`decide`] looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The desired identity hash (from `spec.identity`).
    pub identity: String,
    /// `metadata.generation` of the checkpoint.
    pub generation: i64,
    /// The rebuild annotation's value (trimmed, non-empty), if set.
    pub rebuild: Option<String>,
    /// The identity recorded in status, when it differs from [`Observed::identity`].
    pub previous_identity: Option<String>,
    /// The current attempt of this identity; `None` when no Job was ever made for it.
    pub attempt: Option<Attempt>,
    /// The recorded outcome of that attempt.
    pub recorded: Recorded,
    /// Its Job.
    pub job: JobState,
    /// Its artifact.
    pub artifact: Artifact,
}

/// Why a new Job is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The first attempt of this identity on a checkpoint that never had one.
    First,
    /// The identity changed: a new artifact under the new hash; the old identity's Job and
    /// artifact are left alone.
    NewIdentity,
    /// The attempt's Job disappeared before it finished; made again under the same name.
    JobLost,
    /// The rebuild annotation carries a token no attempt honoured yet.
    Rebuild,
    /// The checkpoint was ready but its artifact record is gone.
    ArtifactMissing,
    /// The attempt failed and the spec changed since it was made.
    SpecChanged,
}

impl Cause {
    /// PascalCase, for reasons and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::First => "First",
            Cause::NewIdentity => "NewIdentity",
            Cause::JobLost => "JobLost",
            Cause::Rebuild => "Rebuild",
            Cause::ArtifactMissing => "ArtifactMissing",
            Cause::SpecChanged => "SpecChanged",
        }
    }
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the Job of `attempt`; delete nothing.
    Create {
        /// The attempt number of the Job to create.
        attempt: i64,
        /// Why.
        cause: Cause,
    },
    /// Delete the current attempt's Job (if any) and artifact record, then create the Job of
    /// `attempt` (the next number): same checkpoint, same identity, new attempt.
    Recreate {
        /// The attempt number of the Job to create.
        attempt: i64,
        /// Why.
        cause: Cause,
    },
    /// The current attempt's Job is running: write nothing.
    Wait,
    /// A Job that has to go first is still being deleted: write nothing, look again soon.
    WaitForDeletion,
    /// The current attempt's Job completed: record the artifact if `record` (no record yet),
    /// then report Ready.
    Succeed {
        /// Whether the artifact record still has to be written.
        record: bool,
    },
    /// The current attempt's Job failed: report Failed with its reason; no retry until the
    /// spec changes or a rebuild is requested.
    Fail {
        /// The Job's reason.
        reason: String,
        /// The Job's message.
        message: String,
    },
    /// Nothing to do: no new object, no new Job, no write.
    Reuse,
    /// A name this checkpoint needs is taken by an object it does not control.
    Blocked,
}

/// The kind of an [`Action`] (and of the invalid-spec outcome), the label of a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The spec failed validation; no child touched.
    InvalidSpec,
    /// [`Action::Create`].
    Create,
    /// [`Action::Recreate`] with the new Job created.
    Recreate,
    /// [`Action::Recreate`] whose old Job is still being deleted (foreground): the new Job
    /// comes on a later pass.
    RecreatePending,
    /// [`Action::Wait`].
    Wait,
    /// [`Action::WaitForDeletion`].
    WaitForDeletion,
    /// [`Action::Succeed`].
    Succeed,
    /// [`Action::Fail`].
    Fail,
    /// [`Action::Reuse`].
    Reuse,
    /// [`Action::Blocked`] (or a create that found its name taken).
    Blocked,
}

/// The create-or-reuse decision.
///
/// | observed | action |
/// | --- | --- |
/// | a name we need is held by an object we do not control | [`Action::Blocked`] |
/// | no attempt for this identity (new checkpoint, or new identity) | [`Action::Create`] attempt 1, no pre-delete |
/// | rebuild token not yet honoured | [`Action::Recreate`] (cause `Rebuild`) |
/// | recorded success, artifact present | [`Action::Reuse`] |
/// | recorded success, artifact record drifted | [`Action::Succeed`] (restore the record) |
/// | recorded success, artifact missing | [`Action::Recreate`] (cause `ArtifactMissing`) |
/// | recorded failure, spec changed since the attempt | [`Action::Recreate`] (cause `SpecChanged`) |
/// | recorded failure, spec unchanged | [`Action::Reuse`] (stay Failed) |
/// | in flight: Job running | [`Action::Wait`] |
/// | in flight: Job complete | [`Action::Succeed`] (record the artifact if missing) |
/// | in flight: Job failed | [`Action::Fail`] with the Job's reason |
/// | in flight: Job gone | [`Action::Create`] same attempt (cause `JobLost`) |
/// | a Job to be replaced, or the name to be reused, is still being deleted | [`Action::WaitForDeletion`] |
pub fn decide(o: &Observed) -> Action {
    if o.job == JobState::Foreign || o.artifact == Artifact::Foreign {
        return Action::Blocked;
    }
    let action = match &o.attempt {
        None => Action::Create {
            attempt: 1,
            cause: if o.previous_identity.is_some() {
                Cause::NewIdentity
            } else {
                Cause::First
            },
        },
        Some(a) => {
            let next = a.number + 1;
            let rebuild = o
                .rebuild
                .as_ref()
                .is_some_and(|t| a.rebuild.as_ref() != Some(t));
            if rebuild {
                Action::Recreate {
                    attempt: next,
                    cause: Cause::Rebuild,
                }
            } else {
                match o.recorded {
                    Recorded::Succeeded => match o.artifact {
                        Artifact::Present => Action::Reuse,
                        Artifact::Drifted => Action::Succeed { record: true },
                        Artifact::Missing | Artifact::Foreign => Action::Recreate {
                            attempt: next,
                            cause: Cause::ArtifactMissing,
                        },
                    },
                    Recorded::Failed if o.generation > a.generation => Action::Recreate {
                        attempt: next,
                        cause: Cause::SpecChanged,
                    },
                    Recorded::Failed => Action::Reuse,
                    Recorded::None => match &o.job {
                        JobState::Running => Action::Wait,
                        JobState::Complete => Action::Succeed {
                            record: o.artifact != Artifact::Present,
                        },
                        JobState::Failed { reason, message } => Action::Fail {
                            reason: reason.clone(),
                            message: message.clone(),
                        },
                        JobState::Absent | JobState::Terminating | JobState::Foreign => {
                            Action::Create {
                                attempt: a.number,
                                cause: Cause::JobLost,
                            }
                        }
                    },
                }
            }
        }
    };
    // A new Job never overlaps a Job that is still going away: the old attempt's pods may still
    // run, and a same-named Job cannot be created before the old one is gone.
    match action {
        Action::Create { .. } | Action::Recreate { .. } if o.job == JobState::Terminating => {
            Action::WaitForDeletion
        }
        action => action,
    }
}

/// The transition label of an executed action.
pub fn step_of(action: &Action) -> Step {
    match action {
        Action::Create { .. } => Step::Create,
        Action::Recreate { .. } => Step::Recreate,
        Action::Wait => Step::Wait,
        Action::WaitForDeletion => Step::WaitForDeletion,
        Action::Succeed { .. } => Step::Succeed,
        Action::Fail { .. } => Step::Fail,
        Action::Reuse => Step::Reuse,
        Action::Blocked => Step::Blocked,
    }
}

/// The phase after `step`, from the phase before it and the recorded outcome of the current
/// attempt (which decides where [`Step::Reuse`] stays).
pub fn phase_after(step: Step, from: Option<Phase>, recorded: Recorded) -> Option<Phase> {
    Some(match step {
        Step::InvalidSpec | Step::Fail => Phase::Failed,
        Step::Create | Step::Recreate | Step::Wait => Phase::Creating,
        Step::RecreatePending | Step::WaitForDeletion => Phase::Pending,
        Step::Succeed => Phase::Ready,
        Step::Reuse => match recorded {
            Recorded::Succeeded => Phase::Ready,
            Recorded::Failed => Phase::Failed,
            // Reuse needs a recorded outcome; keep the phase if asked anyway (not in the table).
            Recorded::None => return from,
        },
        Step::Blocked => from.unwrap_or(Phase::Pending),
    })
}

/// A phase of [`TRANSITIONS`]; `None` is "no status yet".
pub type From = Option<Phase>;

/// One allowed move of the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The phases this move may start from (`None`: no status yet).
    pub from: &'static [From],
    /// The step.
    pub step: Step,
    /// The phase it ends in (`None` for [`Step::Blocked`]: the phase is kept).
    pub to: Option<Phase>,
    /// When it happens.
    pub when: &'static str,
}

const ANY: &[From] = &[
    None,
    Some(Phase::Pending),
    Some(Phase::Creating),
    Some(Phase::Ready),
    Some(Phase::Failed),
];
const RECORDED: &[From] = &[
    Some(Phase::Pending),
    Some(Phase::Ready),
    Some(Phase::Failed),
];

/// Every allowed transition. Anything else is a bug: the reconciler refuses it
/// ([`crate::Error::IllegalTransition`]) and the tests walk the machine to prove it never happens.
pub const TRANSITIONS: &[Transition] = &[
    Transition {
        from: ANY,
        step: Step::InvalidSpec,
        to: Some(Phase::Failed),
        when: "the spec fails validation; no child is touched until the spec changes",
    },
    Transition {
        from: ANY,
        step: Step::Create,
        to: Some(Phase::Creating),
        when: "no Job for the current attempt: first attempt, new identity, or the attempt's Job vanished before finishing",
    },
    Transition {
        from: ANY,
        step: Step::Recreate,
        to: Some(Phase::Creating),
        when: "rebuild requested, artifact missing, or a failed attempt whose spec changed: old Job and record deleted, next attempt's Job created",
    },
    Transition {
        from: ANY,
        step: Step::RecreatePending,
        to: Some(Phase::Pending),
        when: "as Recreate, but the old Job is still being deleted (its pods are stopping): the new Job follows once it is gone",
    },
    Transition {
        from: ANY,
        step: Step::WaitForDeletion,
        to: Some(Phase::Pending),
        when: "a Job that must go first is still being deleted",
    },
    Transition {
        from: ANY,
        step: Step::Wait,
        to: Some(Phase::Creating),
        when: "the current attempt's Job is running",
    },
    Transition {
        from: ANY,
        step: Step::Succeed,
        to: Some(Phase::Ready),
        when: "the current attempt's Job completed: the artifact is recorded",
    },
    Transition {
        from: ANY,
        step: Step::Fail,
        to: Some(Phase::Failed),
        when: "the current attempt's Job failed",
    },
    Transition {
        from: RECORDED,
        step: Step::Reuse,
        to: Some(Phase::Ready),
        when: "recorded success and the artifact is present (also: the spec became valid again)",
    },
    Transition {
        from: RECORDED,
        step: Step::Reuse,
        to: Some(Phase::Failed),
        when: "recorded failure, spec unchanged, no rebuild requested",
    },
    Transition {
        from: ANY,
        step: Step::Blocked,
        to: None,
        when: "a name this checkpoint needs is held by an object it does not control: nothing is written",
    },
];

fn phase_name(phase: From) -> &'static str {
    match phase {
        None => "(none)",
        Some(Phase::Pending) => "Pending",
        Some(Phase::Creating) => "Creating",
        Some(Phase::Ready) => "Ready",
        Some(Phase::Failed) => "Failed",
    }
}

/// [`TRANSITIONS`] as the Markdown table of `docs/checkpoint-state-machine.md`.
pub fn transitions_markdown() -> String {
    let to = |t: &Transition| match t.to {
        Some(_) => phase_name(t.to).to_string(),
        None => "unchanged (Pending if none)".to_string(),
    };
    let rows = TRANSITIONS
        .iter()
        .map(|t| (t.from, format!("{:?}", t.step), to(t), t.when));
    kit::table::transitions(rows, ANY, phase_name)
}

/// Whether moving from `from` to `to` by `step` is in [`TRANSITIONS`].
pub fn allowed(from: From, step: Step, to: From) -> bool {
    TRANSITIONS.iter().any(|t| {
        t.step == step
            && t.from.contains(&from)
            && match t.to {
                Some(phase) => to == Some(phase),
                None => to == from || (from.is_none() && to == Some(Phase::Pending)),
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "0123456789abcdef";

    fn attempt(number: i64, generation: i64, rebuild: Option<&str>) -> Option<Attempt> {
        Some(Attempt {
            number,
            generation,
            rebuild: rebuild.map(str::to_string),
        })
    }

    /// A Ready checkpoint at attempt 1, generation 1, no rebuild token.
    fn ready() -> Observed {
        Observed {
            identity: H.into(),
            generation: 1,
            rebuild: None,
            previous_identity: None,
            attempt: attempt(1, 1, None),
            recorded: Recorded::Succeeded,
            job: JobState::Complete,
            artifact: Artifact::Present,
        }
    }

    fn fresh() -> Observed {
        Observed {
            attempt: None,
            recorded: Recorded::None,
            job: JobState::Absent,
            artifact: Artifact::Missing,
            ..ready()
        }
    }

    fn in_flight(job: JobState) -> Observed {
        Observed {
            recorded: Recorded::None,
            job,
            artifact: Artifact::Missing,
            ..ready()
        }
    }

    fn failed_job() -> JobState {
        JobState::Failed {
            reason: "DeadlineExceeded".into(),
            message: "Job was active longer than specified deadline".into(),
        }
    }

    /// Every row of the table, and the rows the table implies.
    #[test]
    fn decision_table() {
        let create = |attempt, cause| Action::Create { attempt, cause };
        let recreate = |attempt, cause| Action::Recreate { attempt, cause };
        let rows: Vec<(&str, Observed, Action)> = vec![
            (
                "no object/Job for this identity: create attempt 1",
                fresh(),
                create(1, Cause::First),
            ),
            (
                "new identity (pool-change-like): create under the new hash, no pre-delete",
                Observed {
                    previous_identity: Some("00000000deadbeef".into()),
                    ..fresh()
                },
                create(1, Cause::NewIdentity),
            ),
            (
                "new identity while the old identity's Job is still there: still no pre-delete",
                Observed {
                    previous_identity: Some("00000000deadbeef".into()),
                    rebuild: Some("t1".into()),
                    ..fresh()
                },
                create(1, Cause::NewIdentity),
            ),
            (
                "annotation at creation: the first attempt honours it, nothing to rebuild",
                Observed {
                    rebuild: Some("t1".into()),
                    ..fresh()
                },
                create(1, Cause::First),
            ),
            (
                "rebuild not yet honoured on a ready checkpoint: recreate",
                Observed {
                    rebuild: Some("t1".into()),
                    ..ready()
                },
                recreate(2, Cause::Rebuild),
            ),
            (
                "rebuild already honoured: reuse (no second rebuild)",
                Observed {
                    rebuild: Some("t1".into()),
                    attempt: attempt(2, 1, Some("t1")),
                    ..ready()
                },
                Action::Reuse,
            ),
            (
                "annotation removed after it was honoured: reuse",
                Observed {
                    rebuild: None,
                    attempt: attempt(2, 1, Some("t1")),
                    ..ready()
                },
                Action::Reuse,
            ),
            (
                "a new token after an honoured one: recreate again",
                Observed {
                    rebuild: Some("t2".into()),
                    attempt: attempt(2, 1, Some("t1")),
                    ..ready()
                },
                recreate(3, Cause::Rebuild),
            ),
            (
                "rebuild while the Job runs: recreate (the running Job is replaced)",
                Observed {
                    rebuild: Some("t1".into()),
                    ..in_flight(JobState::Running)
                },
                recreate(2, Cause::Rebuild),
            ),
            (
                "rebuild of a failed checkpoint: recreate",
                Observed {
                    rebuild: Some("t1".into()),
                    recorded: Recorded::Failed,
                    job: failed_job(),
                    artifact: Artifact::Missing,
                    ..ready()
                },
                recreate(2, Cause::Rebuild),
            ),
            (
                "rebuild while the old Job is being deleted: wait for it",
                Observed {
                    rebuild: Some("t1".into()),
                    job: JobState::Terminating,
                    ..ready()
                },
                Action::WaitForDeletion,
            ),
            (
                "artifact missing although ready, Job still there: recreate",
                Observed {
                    artifact: Artifact::Missing,
                    ..ready()
                },
                recreate(2, Cause::ArtifactMissing),
            ),
            (
                "artifact missing although ready, Job gone: recreate",
                Observed {
                    artifact: Artifact::Missing,
                    job: JobState::Absent,
                    ..ready()
                },
                recreate(2, Cause::ArtifactMissing),
            ),
            (
                "Job running: wait",
                in_flight(JobState::Running),
                Action::Wait,
            ),
            (
                "Job failed: fail with the Job's reason",
                in_flight(failed_job()),
                Action::Fail {
                    reason: "DeadlineExceeded".into(),
                    message: "Job was active longer than specified deadline".into(),
                },
            ),
            (
                "failure recorded, spec unchanged: stay failed, no retry",
                Observed {
                    recorded: Recorded::Failed,
                    job: failed_job(),
                    artifact: Artifact::Missing,
                    ..ready()
                },
                Action::Reuse,
            ),
            (
                "failure recorded, failed Job deleted since: still no retry",
                Observed {
                    recorded: Recorded::Failed,
                    job: JobState::Absent,
                    artifact: Artifact::Missing,
                    ..ready()
                },
                Action::Reuse,
            ),
            (
                "failure recorded, spec changed: retry with a new attempt",
                Observed {
                    generation: 2,
                    recorded: Recorded::Failed,
                    job: failed_job(),
                    artifact: Artifact::Missing,
                    ..ready()
                },
                recreate(2, Cause::SpecChanged),
            ),
            (
                "spec changed while ready: reuse (the artifact is defined by the identity)",
                Observed {
                    generation: 5,
                    ..ready()
                },
                Action::Reuse,
            ),
            (
                "artifact record drifted: restore it, stay ready",
                Observed {
                    artifact: Artifact::Drifted,
                    ..ready()
                },
                Action::Succeed { record: true },
            ),
            (
                "Job complete, no record yet: record it and report ready",
                in_flight(JobState::Complete),
                Action::Succeed { record: true },
            ),
            (
                "Job complete, record written but status lost: report ready",
                Observed {
                    artifact: Artifact::Present,
                    ..in_flight(JobState::Complete)
                },
                Action::Succeed { record: false },
            ),
            (
                "in-flight Job vanished (deleted, or not in the cache yet): create it again under the same name",
                in_flight(JobState::Absent),
                create(1, Cause::JobLost),
            ),
            (
                "in-flight Job being deleted: wait before re-creating the same name",
                in_flight(JobState::Terminating),
                Action::WaitForDeletion,
            ),
            (
                "first attempt's name held by a terminating leftover: wait",
                Observed {
                    job: JobState::Terminating,
                    ..fresh()
                },
                Action::WaitForDeletion,
            ),
            (
                "Job name held by another owner: blocked",
                Observed {
                    job: JobState::Foreign,
                    ..fresh()
                },
                Action::Blocked,
            ),
            (
                "artifact record held by another owner: blocked",
                Observed {
                    artifact: Artifact::Foreign,
                    ..ready()
                },
                Action::Blocked,
            ),
            ("otherwise: reuse", ready(), Action::Reuse),
        ];
        for (name, observed, expected) in rows {
            assert_eq!(decide(&observed), expected, "{name}");
        }
    }

    fn all_observed() -> Vec<Observed> {
        let mut all = Vec::new();
        let attempts = [
            None,
            attempt(1, 1, None),
            attempt(1, 2, None),
            attempt(2, 1, Some("t1")),
        ];
        let jobs = [
            JobState::Absent,
            JobState::Running,
            JobState::Terminating,
            JobState::Complete,
            failed_job(),
            JobState::Foreign,
        ];
        for attempt in &attempts {
            for recorded in [Recorded::None, Recorded::Succeeded, Recorded::Failed] {
                for job in &jobs {
                    for artifact in [
                        Artifact::Present,
                        Artifact::Drifted,
                        Artifact::Missing,
                        Artifact::Foreign,
                    ] {
                        for rebuild in [None, Some("t1"), Some("t2")] {
                            for previous_identity in [None, Some("ffffffffffffffff")] {
                                for generation in [1, 2] {
                                    all.push(Observed {
                                        identity: H.into(),
                                        generation,
                                        rebuild: rebuild.map(str::to_string),
                                        previous_identity: previous_identity.map(str::to_string),
                                        attempt: attempt.clone(),
                                        recorded,
                                        job: job.clone(),
                                        artifact,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        all
    }

    /// Properties over every combination of inputs.
    #[test]
    fn decide_invariants_over_all_inputs() {
        for o in all_observed() {
            let action = decide(&o);
            // New identity never deletes first.
            if o.attempt.is_none() {
                assert!(
                    !matches!(action, Action::Recreate { .. }),
                    "{o:?} -> {action:?}"
                );
            }
            // A new Job never starts while a Job is terminating.
            if o.job == JobState::Terminating {
                assert!(
                    !matches!(action, Action::Create { .. } | Action::Recreate { .. }),
                    "{o:?} -> {action:?}"
                );
            }
            // A failed attempt is retried only on a spec change or a rebuild request.
            if let (Recorded::Failed, Some(a)) = (o.recorded, &o.attempt) {
                let asked = o.rebuild.is_some() && o.rebuild != a.rebuild;
                if !asked && o.generation <= a.generation {
                    assert!(
                        matches!(action, Action::Reuse | Action::Blocked),
                        "{o:?} -> {action:?}"
                    );
                }
            }
            // Attempt numbers only move forward, by one.
            match (&action, &o.attempt) {
                (Action::Recreate { attempt, .. }, Some(a)) => assert_eq!(*attempt, a.number + 1),
                (Action::Create { attempt, .. }, Some(a)) => assert_eq!(*attempt, a.number),
                (Action::Create { attempt, .. }, None) => assert_eq!(*attempt, 1),
                (Action::Recreate { .. }, None) => panic!("{o:?} -> {action:?}"),
                _ => {}
            }
            // Foreign names are never written over.
            if o.job == JobState::Foreign || o.artifact == Artifact::Foreign {
                assert_eq!(action, Action::Blocked);
            }
        }
    }

    /// Every decision, from every phase consistent with its recorded outcome, is a transition
    /// of the table.
    #[test]
    fn every_decision_is_a_transition_of_the_table() {
        for o in all_observed() {
            let step = step_of(&decide(&o));
            let froms: &[From] = match o.recorded {
                Recorded::None => ANY,
                _ => RECORDED,
            };
            for from in froms {
                let to = phase_after(step, *from, o.recorded);
                assert!(
                    allowed(*from, step, to),
                    "{from:?} --{step:?}--> {to:?} for {o:?}"
                );
            }
        }
        for from in ANY {
            let to = phase_after(Step::InvalidSpec, *from, Recorded::None);
            assert!(allowed(*from, Step::InvalidSpec, to));
            for step in [Step::RecreatePending, Step::Blocked] {
                assert!(allowed(
                    *from,
                    step,
                    phase_after(step, *from, Recorded::None)
                ));
            }
        }
    }

    #[test]
    fn the_document_shows_the_table() {
        let doc = include_str!("../../../docs/checkpoint-state-machine.md");
        let table = transitions_markdown();
        assert!(
            doc.contains(&table),
            "docs/checkpoint-state-machine.md is out of date; its transition table must be:\n{table}"
        );
    }

    #[test]
    fn the_table_refuses_what_it_does_not_list() {
        assert!(!allowed(None, Step::Reuse, Some(Phase::Ready)));
        assert!(!allowed(Some(Phase::Ready), Step::Wait, Some(Phase::Ready)));
        assert!(!allowed(
            Some(Phase::Creating),
            Step::Reuse,
            Some(Phase::Ready)
        ));
        assert!(!allowed(
            Some(Phase::Ready),
            Step::Blocked,
            Some(Phase::Pending)
        ));
        assert!(!allowed(Some(Phase::Ready), Step::Succeed, None));
        assert!(!allowed(
            Some(Phase::Failed),
            Step::Fail,
            Some(Phase::Ready)
        ));
    }
}
