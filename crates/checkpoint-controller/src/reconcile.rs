//! The controller's top level: observe, [`decide`], execute the one action, report status.

use std::sync::Arc;
use std::time::Duration;

use api::DynamoCheckpoint;
use api::checkpoint::{
    DynamoCheckpointPhase as Phase, DynamoCheckpointStatus, DynamoCheckpointStorageType,
};
use api::checkpoint_identity::identity_hash;
use api::validate::{REASON_INVALID_SPEC, validate_checkpoint};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kit::conditions::{self, READY, Status};
use kit::{
    Deleted, Event, Failed, Outcome, Preconditions, PropagationPolicy, Reader, ReaderExt,
    Reconciled, Retry, Selector, Writer, WriterExt,
};
use kube::ResourceExt;

use crate::decide::{
    Action, Artifact, Attempt, Cause, JobState, Observed, Recorded, Step, allowed, decide,
    phase_after, step_of,
};
use crate::error::Error;
use crate::render::{
    CHECKPOINT_ID_LABEL, CHECKPOINT_NAME_LABEL, REBUILD_ANNOTATION, artifact_state, attempt_of,
    attempt_of_job, controlled_by, job_name, job_state, location, record_keys, record_name,
    record_value, render_job, render_record,
};

/// Field manager of everything this controller applies.
pub const FIELD_MANAGER: &str = "dynamo-operator/checkpoint";

/// Condition (upstream's): the current attempt's Job was created. Its `observedGeneration` is
/// the generation the Job was rendered from.
pub const JOB_CREATED: &str = "JobCreated";
/// Condition (upstream's): the current attempt's Job finished (`True`: succeeded and the
/// artifact is recorded; `False`: failed, with the Job's reason). Absent while it runs.
pub const JOB_COMPLETED: &str = "JobCompleted";

/// Reasons of the `Ready` condition and of events.
pub mod reasons {
    /// Ready: the artifact is recorded.
    pub const READY: &str = "CheckpointReady";
    /// Not ready: the current attempt's Job runs.
    pub const CREATING: &str = "CheckpointCreating";
    /// Not ready: a Job must be gone before the next one starts.
    pub const WAITING_FOR_DELETION: &str = "WaitingForJobDeletion";
    /// Not ready: a name the checkpoint needs is held by an object it does not control.
    pub const NAME_CONFLICT: &str = "NameConflict";
    /// Event: a capture Job was created.
    pub const JOB_CREATED: &str = "CheckpointJobCreated";
    /// Event: a rebuild request was honoured.
    pub const REBUILD: &str = "CheckpointRebuild";
    /// Event: the artifact record of a ready checkpoint is gone; capturing again.
    pub const ARTIFACT_MISSING: &str = "CheckpointArtifactMissing";
    /// Event: a drifted artifact record was restored.
    pub const ARTIFACT_RESTORED: &str = "CheckpointArtifactRestored";
    /// Event: a failed attempt is retried after a spec change.
    pub const RETRY: &str = "CheckpointRetry";
    /// Event (upstream's): the checkpoint became ready.
    pub const CHECKPOINT_READY: &str = "CheckpointReady";
    /// Event (upstream's): the checkpoint failed.
    pub const CHECKPOINT_FAILED: &str = "CheckpointFailed";
    /// Step failures (Ready=False reason, Warning event).
    pub const READ_FAILED: &str = "ReadFailed";
    /// Creating the Job failed.
    pub const JOB_CREATE_FAILED: &str = "JobCreateFailed";
    /// Deleting a superseded Job or record failed.
    pub const DELETE_FAILED: &str = "DeleteFailed";
    /// Writing the artifact record failed.
    pub const RECORD_FAILED: &str = "ArtifactRecordFailed";
    /// The state machine refused a transition (a bug).
    pub const ILLEGAL_TRANSITION: &str = "IllegalTransition";
}

/// How soon to look again while a Job is being deleted (its deletion event usually comes first).
pub const DELETION_RECHECK: Duration = Duration::from_secs(5);
/// How soon to look again while a name is held by another owner (a previous incarnation of the
/// checkpoint, being garbage-collected, is the common case).
pub const CONFLICT_RECHECK: Duration = Duration::from_secs(30);

/// How soon to look again when a create found a Job the cache does not show yet.
pub const CACHE_RECHECK: Duration = Duration::from_secs(1);

/// Reconciles a DynamoCheckpoint into a capture Job and an artifact record.
pub struct CheckpointReconciler {
    reader: Arc<dyn Reader>,
    writer: Arc<dyn Writer>,
}

/// What a reconcile observed, with the objects behind it.
struct Resolved {
    observed: Observed,
    /// Jobs of this checkpoint and identity (controlled by it), by attempt.
    jobs: Vec<Job>,
    /// The Job named for the current attempt, whoever owns it.
    job: Option<Job>,
    /// The artifact record of this identity, whoever owns it.
    record: Option<ConfigMap>,
}

/// What the execution of an action did.
struct Done {
    step: Step,
    /// The attempt whose Job was created (or adopted) by this pass.
    attempt: Option<Attempt>,
    /// Whether a Job was really created (not found already there).
    created: bool,
    /// Names of the Jobs deleted by this pass.
    deleted: Vec<String>,
    /// The object in the way, for [`Step::Blocked`].
    blocking: Option<String>,
    /// Whether the artifact record write changed it.
    record_changed: bool,
    /// Look again after this long.
    requeue: Option<Duration>,
}

impl Done {
    fn step(step: Step) -> Self {
        Done {
            step,
            attempt: None,
            created: false,
            deleted: Vec::new(),
            blocking: None,
            record_changed: false,
            requeue: None,
        }
    }
}

/// A failed execution: the step's reason, the error, and whether something was deleted first.
struct Halt {
    reason: &'static str,
    error: Error,
    deleted: bool,
}

impl Halt {
    fn new(reason: &'static str) -> impl FnOnce(Error) -> Halt {
        move |error| Halt {
            reason,
            error,
            deleted: false,
        }
    }
}

fn key(ckpt: &DynamoCheckpoint) -> String {
    format!(
        "{}/{}",
        ckpt.namespace().unwrap_or_default(),
        ckpt.name_any()
    )
}

fn rebuild_token(ckpt: &DynamoCheckpoint) -> Option<String> {
    ckpt.annotations()
        .get(REBUILD_ANNOTATION)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn set_condition(
    status: &mut DynamoCheckpointStatus,
    type_: &str,
    value: Status,
    reason: &str,
    message: &str,
    generation: i64,
) -> bool {
    conditions::set(
        &mut status.conditions,
        conditions::new(type_, value, reason, message, generation),
    )
}

/// The recorded outcome of attempt `number` of `hash`, per the status.
fn recorded(previous: &DynamoCheckpointStatus, hash: &str, number: i64) -> Recorded {
    if previous.identity_hash.as_deref() != Some(hash) || previous.attempt != Some(number) {
        return Recorded::None;
    }
    match conditions::find(&previous.conditions, JOB_COMPLETED).map(|c| c.status.as_str()) {
        Some("True") => Recorded::Succeeded,
        Some("False") => Recorded::Failed,
        _ => Recorded::None,
    }
}

impl CheckpointReconciler {
    /// A reconciler reading through `reader` and writing children through `writer`.
    pub fn new(reader: Arc<dyn Reader>, writer: Arc<dyn Writer>) -> Self {
        CheckpointReconciler { reader, writer }
    }

    /// Observe the checkpoint's Jobs and artifact, take the one action [`decide`] picks, and
    /// return the complete status (persisted by the caller, then its events published).
    pub async fn reconcile(
        &self,
        ckpt: &DynamoCheckpoint,
    ) -> Reconciled<DynamoCheckpointStatus, Error> {
        let generation = ckpt.metadata.generation.unwrap_or_default();
        let previous = ckpt.status.clone().unwrap_or_default();
        let mut out = Outcome::new(DynamoCheckpointStatus {
            observed_generation: Some(generation),
            ..previous.clone()
        });

        if let Err(invalid) = validate_checkpoint(ckpt) {
            let message = invalid.to_string();
            tracing::info!(checkpoint = %key(ckpt), %message, "invalid spec");
            out.status.phase = phase_after(Step::InvalidSpec, previous.phase, Recorded::None);
            out.status.message = Some(message.clone());
            if set_condition(
                &mut out.status,
                READY,
                Status::False,
                REASON_INVALID_SPEC,
                &message,
                generation,
            ) {
                out.warning(REASON_INVALID_SPEC, message);
            }
            return Err(Box::new(Failed {
                outcome: out,
                error: Error::InvalidSpec(invalid),
                retry: Retry::AwaitChange,
            }));
        }

        let hash = identity_hash(&ckpt.spec.identity);
        let resolved = match self.resolve(ckpt, &hash, &previous, generation).await {
            Ok(r) => r,
            Err(error) => {
                return Err(fail(
                    out,
                    &previous,
                    generation,
                    reasons::READ_FAILED,
                    error,
                    false,
                ));
            }
        };
        let action = decide(&resolved.observed);
        tracing::debug!(checkpoint = %key(ckpt), identity = %hash, ?action, observed = ?resolved.observed, "decided");
        let done = match self
            .execute(ckpt, &hash, &resolved, &action, generation)
            .await
        {
            Ok(done) => done,
            Err(halt) => {
                return Err(fail(
                    out,
                    &previous,
                    generation,
                    halt.reason,
                    halt.error,
                    halt.deleted,
                ));
            }
        };
        let from = previous.phase;
        report(
            &mut out, &previous, generation, &hash, &resolved, &action, &done,
        );
        let to = out.status.phase;
        if !allowed(from, done.step, to) {
            let error = Error::IllegalTransition {
                from,
                step: done.step,
                to,
            };
            tracing::error!(checkpoint = %key(ckpt), %error, "state machine violated");
            let mut out = Outcome::new(DynamoCheckpointStatus {
                observed_generation: Some(generation),
                ..previous.clone()
            });
            set_condition(
                &mut out.status,
                READY,
                Status::False,
                reasons::ILLEGAL_TRANSITION,
                &error.to_string(),
                generation,
            );
            return Err(Box::new(Failed {
                outcome: out,
                error,
                retry: Retry::AwaitChange,
            }));
        }
        if from != to {
            tracing::info!(checkpoint = %key(ckpt), from = ?from, to = ?to, step = ?done.step, "phase changed");
        }
        Ok(out)
    }

    /// Read the Jobs and the artifact record of the checkpoint's identity.
    async fn resolve(
        &self,
        ckpt: &DynamoCheckpoint,
        hash: &str,
        previous: &DynamoCheckpointStatus,
        generation: i64,
    ) -> Result<Resolved, Error> {
        let ns = ckpt.namespace();
        let ns = ns.as_deref();
        let selector = Selector::from_iter([
            (CHECKPOINT_NAME_LABEL.to_string(), ckpt.name_any()),
            (CHECKPOINT_ID_LABEL.to_string(), hash.to_string()),
        ]);
        let mut jobs: Vec<Job> = self
            .reader
            .list(ns, &selector)
            .await
            .map_err(Error::api(format!("list Jobs of {}", key(ckpt))))?;
        jobs.retain(|j| controlled_by(j, ckpt));
        jobs.sort_by_key(|j| attempt_of(j).unwrap_or_default());

        // The current attempt: the newest of what the status recorded and what the Jobs say
        // (a Job is authoritative for its own attempt; the status may lag behind the cache).
        let from_status = previous
            .attempt
            .filter(|_| previous.identity_hash.as_deref() == Some(hash))
            .map(|number| Attempt {
                number,
                generation: conditions::find(&previous.conditions, JOB_CREATED)
                    .and_then(|c| c.observed_generation)
                    .unwrap_or(generation),
                rebuild: previous.observed_rebuild_token.clone(),
            });
        let from_jobs = jobs
            .iter()
            .filter_map(attempt_of_job)
            .max_by_key(|a| a.number);
        let attempt = match (from_status, from_jobs) {
            (Some(s), Some(j)) => Some(if j.number >= s.number { j } else { s }),
            (s, j) => s.or(j),
        };
        let number = attempt.as_ref().map_or(1, |a| a.number);
        let name = job_name(hash, number);
        let job: Option<Job> = self
            .reader
            .get(ns, &name)
            .await
            .map_err(Error::api(format!(
                "get Job {}/{name}",
                ns.unwrap_or_default()
            )))?;
        let record_name = record_name(hash);
        let record: Option<ConfigMap> =
            self.reader
                .get(ns, &record_name)
                .await
                .map_err(Error::api(format!(
                    "get ConfigMap {}/{record_name}",
                    ns.unwrap_or_default()
                )))?;
        let observed = Observed {
            identity: hash.to_string(),
            generation,
            rebuild: rebuild_token(ckpt),
            previous_identity: previous
                .identity_hash
                .clone()
                .filter(|h| !h.is_empty() && h != hash),
            recorded: recorded(previous, hash, number),
            job: job_state(job.as_ref(), ckpt),
            artifact: artifact_state(record.as_ref(), ckpt, hash, number),
            attempt,
        };
        Ok(Resolved {
            observed,
            jobs,
            job,
            record,
        })
    }

    async fn execute(
        &self,
        ckpt: &DynamoCheckpoint,
        hash: &str,
        r: &Resolved,
        action: &Action,
        generation: i64,
    ) -> Result<Done, Halt> {
        let step = step_of(action);
        match action {
            Action::Create { attempt, cause } => {
                let attempt = match (cause, &r.observed.attempt) {
                    // The same attempt again, with the inputs it was made with.
                    (Cause::JobLost, Some(a)) => a.clone(),
                    _ => Attempt {
                        number: *attempt,
                        generation,
                        rebuild: r.observed.rebuild.clone(),
                    },
                };
                self.create_job(ckpt, hash, attempt, step).await
            }
            Action::Recreate { attempt, cause } => {
                let next = Attempt {
                    number: *attempt,
                    generation,
                    rebuild: r.observed.rebuild.clone(),
                };
                self.recreate(ckpt, hash, r, next, cause, step).await
            }
            Action::Succeed { record } => {
                let mut done = Done::step(step);
                if *record && let Some(a) = &r.observed.attempt {
                    done.record_changed = self.write_record(ckpt, hash, r, a).await?;
                }
                Ok(done)
            }
            Action::Blocked => Ok(Done {
                blocking: Some(blocking(r)),
                ..Done::step(step)
            }),
            Action::Wait | Action::WaitForDeletion | Action::Fail { .. } | Action::Reuse => {
                Ok(Done::step(step))
            }
        }
    }

    /// Replace the previous attempt with `next`: its Jobs go ([`Self::delete_jobs`]), then the
    /// artifact record this checkpoint controls, then the Job of `next` is created. While a Job
    /// is still being deleted nothing else happens ([`Step::RecreatePending`]).
    async fn recreate(
        &self,
        ckpt: &DynamoCheckpoint,
        hash: &str,
        r: &Resolved,
        next: Attempt,
        cause: &Cause,
        step: Step,
    ) -> Result<Done, Halt> {
        let (deleted, pending) = self.delete_jobs(ckpt, r).await?;
        if pending {
            tracing::info!(checkpoint = %key(ckpt), cause = cause.as_str(), "waiting for the previous attempt's Job to be deleted");
            return Ok(Done {
                deleted,
                ..Done::step(Step::RecreatePending)
            });
        }
        let mut any_deleted = !deleted.is_empty();
        if let Some(record) = r.record.as_ref().filter(|rec| controlled_by(*rec, ckpt)) {
            self.delete::<ConfigMap>(record, PropagationPolicy::Background)
                .await
                .map_err(|error| Halt {
                    reason: reasons::DELETE_FAILED,
                    error,
                    deleted: any_deleted,
                })?;
            any_deleted = true;
        }
        let mut done = self
            .create_job(ckpt, hash, next, step)
            .await
            .map_err(|h| Halt {
                deleted: any_deleted,
                ..h
            })?;
        done.deleted = deleted;
        Ok(done)
    }

    /// Delete the Jobs of the previous attempts. Returns the names of those deleted, and
    /// whether one is still being deleted.
    async fn delete_jobs(
        &self,
        ckpt: &DynamoCheckpoint,
        r: &Resolved,
    ) -> Result<(Vec<String>, bool), Halt> {
        let mut deleted = Vec::new();
        let mut pending = false;
        // Every Job of this identity this checkpoint controls goes: the current attempt's
        // and any superseded one left behind.
        let mut superseded: Vec<&Job> = r.jobs.iter().collect();
        if let Some(job) = r.job.as_ref().filter(|j| controlled_by(*j, ckpt))
            && !superseded.iter().any(|j| j.name_any() == job.name_any())
        {
            superseded.push(job);
        }
        for job in superseded {
            // A running capture is stopped before the next starts (foreground: the Job
            // stays until its pods are gone); a finished one just goes.
            let propagation = match job_state(Some(job), ckpt) {
                JobState::Running => PropagationPolicy::Foreground,
                _ => PropagationPolicy::Background,
            };
            match self.delete::<Job>(job, propagation).await {
                Ok(Deleted::Pending(_)) => pending = true,
                Ok(_) => deleted.push(job.name_any()),
                Err(error) => {
                    return Err(Halt {
                        reason: reasons::DELETE_FAILED,
                        error,
                        deleted: !deleted.is_empty(),
                    });
                }
            }
        }
        Ok((deleted, pending))
    }

    /// Apply the artifact record of attempt `a`, naming its Job (the one this checkpoint
    /// controls, else as the current record or the attempt names it). Returns whether the write
    /// changed the record.
    async fn write_record(
        &self,
        ckpt: &DynamoCheckpoint,
        hash: &str,
        r: &Resolved,
        a: &Attempt,
    ) -> Result<bool, Halt> {
        let from_job = r.job.as_ref().filter(|j| controlled_by(*j, ckpt));
        let job_name = from_job
            .map(|j| j.name_any())
            .or_else(|| record_value(r.record.as_ref(), record_keys::JOB_NAME).map(str::to_string))
            .unwrap_or_else(|| job_name(hash, a.number));
        let job_uid = from_job
            .and_then(|j| j.uid())
            .or_else(|| record_value(r.record.as_ref(), record_keys::JOB_UID).map(str::to_string))
            .unwrap_or_default();
        let desired = render_record(ckpt, hash, a.number, &job_name, &job_uid);
        let applied = self
            .writer
            .apply(&desired, Some(FIELD_MANAGER))
            .await
            .map_err(Error::api(format!(
                "apply ConfigMap {}/{}",
                ckpt.namespace().unwrap_or_default(),
                desired.name_any()
            )))
            .map_err(Halt::new(reasons::RECORD_FAILED))?;
        Ok(applied.changed)
    }

    /// Create the Job of `attempt`. A Job of that name that is already ours is adopted (a
    /// previous pass created it and its status write was lost, or the cache was behind).
    async fn create_job(
        &self,
        ckpt: &DynamoCheckpoint,
        hash: &str,
        attempt: Attempt,
        step: Step,
    ) -> Result<Done, Halt> {
        let name = job_name(hash, attempt.number);
        let ns = ckpt.namespace().unwrap_or_default();
        let Some(job) = render_job(ckpt, hash, &attempt) else {
            // Validation guarantees a Job configuration with its target container.
            return Err(Halt::new(reasons::JOB_CREATE_FAILED)(Error::Api {
                what: format!("render Job {ns}/{name}"),
                source: kit::Error::Invalid("no job configuration or target container".into()),
            }));
        };
        match self.writer.create(&job).await {
            Ok(_) => {
                tracing::info!(checkpoint = %key(ckpt), job = %name, attempt = attempt.number, "created capture Job");
                Ok(Done {
                    attempt: Some(attempt),
                    created: true,
                    ..Done::step(step)
                })
            }
            Err(e) if e.is_already_exists() => {
                let existing: Option<Job> = self
                    .reader
                    .get(Some(&ns), &name)
                    .await
                    .map_err(Error::api(format!("get Job {ns}/{name}")))
                    .map_err(Halt::new(reasons::JOB_CREATE_FAILED))?;
                match existing {
                    Some(existing) if controlled_by(&existing, ckpt) => Ok(Done {
                        attempt: Some(attempt_of_job(&existing).unwrap_or(attempt)),
                        ..Done::step(step)
                    }),
                    Some(_) => Ok(Done {
                        blocking: Some(format!("Job {ns}/{name}")),
                        ..Done::step(Step::Blocked)
                    }),
                    // Someone created it (most likely a previous pass whose Job the cache has
                    // not seen yet): take it as this attempt's and look again soon; if it is not
                    // ours, that pass reports the conflict.
                    None => {
                        tracing::debug!(checkpoint = %key(ckpt), job = %name, "Job exists but is not cached yet");
                        Ok(Done {
                            attempt: Some(attempt),
                            requeue: Some(CACHE_RECHECK),
                            ..Done::step(step)
                        })
                    }
                }
            }
            Err(source) => Err(Halt::new(reasons::JOB_CREATE_FAILED)(Error::Api {
                what: format!("create Job {ns}/{name}"),
                source,
            })),
        }
    }

    /// Delete exactly the object observed (uid precondition).
    async fn delete<K: kit::Kind + ResourceExt>(
        &self,
        object: &K,
        propagation: PropagationPolicy,
    ) -> Result<Deleted<K>, Error> {
        let ns = object.namespace();
        let name = object.name_any();
        let policy = format!("{propagation:?}");
        let preconditions = Preconditions {
            uid: object.uid(),
            resource_version: None,
        };
        let deleted = self
            .writer
            .delete::<K>(ns.as_deref(), &name, &preconditions, Some(propagation))
            .await
            .map_err(Error::api(format!(
                "delete {} {}/{name}",
                K::kind(&()),
                ns.as_deref().unwrap_or_default()
            )))?;
        tracing::info!(kind = %K::kind(&()), object = %format!("{}/{name}", ns.unwrap_or_default()), %policy, pending = matches!(deleted, Deleted::Pending(_)), "deleted");
        Ok(deleted)
    }
}

fn blocking(r: &Resolved) -> String {
    let describe = |kind: &str, ns: Option<String>, name: String| {
        format!("{kind} {}/{name}", ns.unwrap_or_default())
    };
    match (&r.observed.job, &r.job, &r.record) {
        (JobState::Foreign, Some(job), _) => describe("Job", job.namespace(), job.name_any()),
        (_, _, Some(record)) => describe("ConfigMap", record.namespace(), record.name_any()),
        _ => "an object".into(),
    }
}

/// The outcome of a failed step: the status keeps its phase (a transient error is not a
/// checkpoint failure; Failed is only for failed Jobs and invalid specs) unless this pass already
/// deleted the previous attempt, in which case it is Pending. `Ready=False` carries the step's
/// reason; a Warning is queued when that condition changed. Retried with backoff.
fn fail(
    mut out: Outcome<DynamoCheckpointStatus>,
    previous: &DynamoCheckpointStatus,
    generation: i64,
    reason: &'static str,
    error: Error,
    deleted: bool,
) -> Box<Failed<DynamoCheckpointStatus, Error>> {
    let message = error.to_string();
    tracing::warn!(reason, %message, "checkpoint reconcile step failed");
    if deleted {
        out.status.phase = phase_after(Step::RecreatePending, previous.phase, Recorded::None);
        out.status.created_at = None;
        conditions::remove(&mut out.status.conditions, JOB_COMPLETED);
    }
    if set_condition(
        &mut out.status,
        READY,
        Status::False,
        reason,
        &message,
        generation,
    ) {
        out.warning(reason, message);
    }
    Box::new(Failed {
        outcome: out,
        error,
        retry: Retry::Backoff,
    })
}

/// Fill the outcome's status and events after `done`.
fn report(
    out: &mut Outcome<DynamoCheckpointStatus>,
    previous: &DynamoCheckpointStatus,
    generation: i64,
    hash: &str,
    r: &Resolved,
    action: &Action,
    done: &Done,
) {
    let o = &r.observed;
    let location = location(hash);
    let s = &mut out.status;
    s.identity_hash = Some(hash.to_string());
    s.checkpoint_id = Some(hash.to_string());
    s.location = Some(location.clone());
    s.storage_type = Some(DynamoCheckpointStorageType::Pvc);

    let recorded = attempt_status(s, previous, hash, o, done);
    let recorded_after = match (done.step, action) {
        (Step::Succeed, _) => {
            succeeded(s, previous, &location, generation);
            Recorded::Succeeded
        }
        (Step::Fail, Action::Fail { reason, message }) => {
            set_condition(s, JOB_COMPLETED, Status::False, reason, message, generation);
            s.message = Some(message.clone());
            s.created_at = None;
            set_condition(s, READY, Status::False, reason, message, generation);
            Recorded::Failed
        }
        (Step::Create | Step::Recreate | Step::Wait, _) => {
            creating(s, generation);
            recorded
        }
        (Step::RecreatePending | Step::WaitForDeletion, _) => {
            waiting_for_deletion(s, done.step, generation);
            recorded
        }
        (Step::Reuse, _) => {
            reused(s, recorded, &location, generation);
            recorded
        }
        (Step::Blocked, _) => {
            if let Some(event) = blocked(s, done.blocking.as_deref(), generation) {
                out.events.push(event);
            }
            recorded
        }
        _ => recorded,
    };
    let s = &mut out.status;
    let to = phase_after(done.step, previous.phase, recorded_after);
    s.phase = to;
    if matches!(done.step, Step::RecreatePending | Step::WaitForDeletion) {
        out.requeue_after(DELETION_RECHECK);
    }
    if done.step == Step::Blocked {
        out.requeue_after(CONFLICT_RECHECK);
    }
    if let Some(after) = done.requeue {
        out.requeue_after(after);
    }

    // Mutation events: only for writes that changed something.
    if done.created {
        out.events.push(created_event(o, hash, action, done));
    }
    if done.record_changed && o.recorded == Recorded::Succeeded && o.artifact == Artifact::Drifted {
        out.events.push(Event::normal(
            reasons::ARTIFACT_RESTORED,
            format!("restored artifact record {}", record_name(hash)),
        ));
    }
    // Status-transition events, published after the status write.
    if to != previous.phase {
        match to {
            Some(Phase::Ready) => out.events.push(Event::normal(
                reasons::CHECKPOINT_READY,
                "Checkpoint creation completed successfully",
            )),
            Some(Phase::Failed) if done.step == Step::Fail => out.events.push(Event::warning(
                reasons::CHECKPOINT_FAILED,
                out.status.message.clone().unwrap_or_default(),
            )),
            _ => {}
        }
    }
}

/// The current attempt's part of the status (its number, Job name, rebuild token and
/// `JobCreated`); a new attempt clears what the previous one finished with. Returns what the
/// artifact record is known to say afterwards.
fn attempt_status(
    s: &mut DynamoCheckpointStatus,
    previous: &DynamoCheckpointStatus,
    hash: &str,
    o: &Observed,
    done: &Done,
) -> Recorded {
    let current = done.attempt.clone().or_else(|| o.attempt.clone());
    let mut recorded_after = o.recorded;
    if let Some(a) = &current {
        let same =
            previous.identity_hash.as_deref() == Some(hash) && previous.attempt == Some(a.number);
        let fresh = !same || done.attempt.is_some() && done.step != Step::Blocked;
        if fresh {
            conditions::remove(&mut s.conditions, JOB_COMPLETED);
            s.created_at = None;
            s.message = None;
            recorded_after = Recorded::None;
        }
        let name = job_name(hash, a.number);
        s.attempt = Some(a.number);
        s.observed_rebuild_token = a.rebuild.clone();
        set_condition(
            s,
            JOB_CREATED,
            Status::True,
            "JobCreated",
            &format!("Checkpoint job {name} created"),
            a.generation,
        );
        s.job_name = Some(name);
    }
    recorded_after
}

/// The Job succeeded and the artifact at `location` is recorded: `JobCompleted=True`, ready.
fn succeeded(
    s: &mut DynamoCheckpointStatus,
    previous: &DynamoCheckpointStatus,
    location: &str,
    generation: i64,
) {
    set_condition(
        s,
        JOB_COMPLETED,
        Status::True,
        "JobSucceeded",
        "Checkpoint job completed successfully",
        generation,
    );
    if previous.phase != Some(Phase::Ready) || s.created_at.is_none() {
        s.created_at = Some(conditions::now());
    }
    s.message = None;
    set_condition(
        s,
        READY,
        Status::True,
        reasons::READY,
        &format!("artifact at {location}"),
        generation,
    );
}

/// The current attempt's Job runs: not ready, [`reasons::CREATING`].
fn creating(s: &mut DynamoCheckpointStatus, generation: i64) {
    let job = s.job_name.clone().unwrap_or_default();
    let running = format!(
        "checkpoint job {job} (attempt {}) is running",
        s.attempt.unwrap_or(1)
    );
    s.message = None;
    set_condition(
        s,
        READY,
        Status::False,
        reasons::CREATING,
        &running,
        generation,
    );
}

/// A Job must be gone before the next starts (`step`): not ready,
/// [`reasons::WAITING_FOR_DELETION`]; a pending recreate also clears the previous result.
fn waiting_for_deletion(s: &mut DynamoCheckpointStatus, step: Step, generation: i64) {
    let job = s.job_name.clone().unwrap_or_default();
    if step == Step::RecreatePending {
        conditions::remove(&mut s.conditions, JOB_COMPLETED);
        s.created_at = None;
    }
    s.message = None;
    let message = format!("waiting for checkpoint job {job} to be deleted");
    set_condition(
        s,
        READY,
        Status::False,
        reasons::WAITING_FOR_DELETION,
        &message,
        generation,
    );
}

/// The recorded result is reused: ready when the artifact is recorded (`recorded`), else not
/// ready with the failed Job's reason.
fn reused(s: &mut DynamoCheckpointStatus, recorded: Recorded, location: &str, generation: i64) {
    match recorded {
        Recorded::Succeeded => {
            s.message = None;
            set_condition(
                s,
                READY,
                Status::True,
                reasons::READY,
                &format!("artifact at {location}"),
                generation,
            );
        }
        _ => {
            let (reason, message) = conditions::find(&s.conditions, JOB_COMPLETED)
                .map(|c| (c.reason.clone(), c.message.clone()))
                .unwrap_or_else(|| ("JobFailed".into(), "checkpoint job failed".into()));
            s.message = Some(message.clone());
            set_condition(s, READY, Status::False, &reason, &message, generation);
        }
    }
}

/// A name the checkpoint needs is held by an object it does not control (`blocking`): not
/// ready, [`reasons::NAME_CONFLICT`]. Returns the Warning to publish when that condition
/// changed.
fn blocked(
    s: &mut DynamoCheckpointStatus,
    blocking: Option<&str>,
    generation: i64,
) -> Option<Event> {
    let message = format!(
        "{} is not controlled by this checkpoint",
        blocking.unwrap_or("an object")
    );
    s.message = Some(message.clone());
    set_condition(
        s,
        READY,
        Status::False,
        reasons::NAME_CONFLICT,
        &message,
        generation,
    )
    .then(|| Event::warning(reasons::NAME_CONFLICT, message))
}

/// The event of a Job this pass created: why it was created (a rebuild, a missing artifact
/// record, a retry after a spec change, a new identity, or the first attempt).
fn created_event(o: &Observed, hash: &str, action: &Action, done: &Done) -> Event {
    let a = done.attempt.as_ref().map_or(1, |a| a.number);
    let job = job_name(hash, a);
    let replaced = if done.deleted.is_empty() {
        String::new()
    } else {
        format!(", replacing {}", done.deleted.join(", "))
    };
    let (type_, reason, note) = match action {
        Action::Recreate {
            cause: Cause::Rebuild,
            ..
        } => (
            kit::EventType::Normal,
            reasons::REBUILD,
            format!(
                "rebuild requested (token {}): created job {job} (attempt {a}){replaced}",
                o.rebuild.as_deref().unwrap_or_default()
            ),
        ),
        Action::Recreate {
            cause: Cause::ArtifactMissing,
            ..
        } => (
            kit::EventType::Warning,
            reasons::ARTIFACT_MISSING,
            format!(
                "artifact record {} is gone: created job {job} (attempt {a}){replaced}",
                record_name(hash)
            ),
        ),
        Action::Recreate { .. } => (
            kit::EventType::Normal,
            reasons::RETRY,
            format!(
                "spec changed since the failed attempt: created job {job} (attempt {a}){replaced}"
            ),
        ),
        Action::Create {
            cause: Cause::NewIdentity,
            ..
        } => (
            kit::EventType::Normal,
            reasons::JOB_CREATED,
            format!(
                "created job {job} for new identity {hash}; identity {} is left as is",
                o.previous_identity.as_deref().unwrap_or_default()
            ),
        ),
        _ => (
            kit::EventType::Normal,
            reasons::JOB_CREATED,
            format!("created job {job} (attempt {a})"),
        ),
    };
    Event::new(type_, reason, note)
}
