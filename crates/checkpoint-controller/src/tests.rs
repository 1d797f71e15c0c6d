//! Unit tests of the reconciler on the in-memory API server (`kit::testing::Double`): one pass
//! is reconcile, then the run loop's persist-then-publish (`kit::run::finish`).

use std::collections::BTreeMap;
use std::time::Duration;

use api::DynamoCheckpoint;
use api::checkpoint::{
    DynamoCheckpointJobConfig, DynamoCheckpointPhase as Phase, DynamoCheckpointSpec,
    DynamoCheckpointStatus,
};
use api::checkpoint_identity::identity_hash;
use api::common::{BackendFramework, DynamoCheckpointIdentity};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::conditions::{self, READY};
use kit::run::{RunError, finish};
use kit::testing::{Double, Verb, Write};
use kit::{Patch, Retry, StatusWriterExt, WriterExt};
use kube::runtime::controller::Action as Next;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::reconcile::{JOB_COMPLETED, reasons};
use crate::render::{REBUILD_ANNOTATION, job_name, record_name};
use crate::{CheckpointReconciler, Error};

const NS: &str = "ns";
const NAME: &str = "ck";

fn identity() -> DynamoCheckpointIdentity {
    DynamoCheckpointIdentity {
        model: "Qwen/Qwen3-0.6B".into(),
        backend_framework: BackendFramework::Vllm,
        tensor_parallel_size: Some(1),
        dtype: Some("bfloat16".into()),
        max_model_len: Some(4096),
        ..Default::default()
    }
}

fn hash() -> String {
    identity_hash(&identity())
}

fn spec() -> DynamoCheckpointSpec {
    DynamoCheckpointSpec {
        identity: identity(),
        capture: Some(DynamoCheckpointJobConfig {
            pod_template_spec: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "main".into(),
                        image: Some("registry.example.com/dynamo/vllm-placeholder:1.0.0".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn fixture(d: &Double) -> DynamoCheckpoint {
    let mut c = DynamoCheckpoint::new(NAME, spec());
    c.metadata.namespace = Some(NS.into());
    d.insert(c)
}

fn ckpt(d: &Double) -> DynamoCheckpoint {
    d.object(Some(NS), NAME).expect("checkpoint exists")
}

fn status(d: &Double) -> DynamoCheckpointStatus {
    ckpt(d).status.unwrap_or_default()
}

fn reconciler(d: &Double) -> CheckpointReconciler {
    CheckpointReconciler::new(d.reader(), d.writer())
}

/// One pass of the run loop: reconcile, persist the status, publish the events.
async fn pass(d: &Double) -> Result<Next, RunError<Error>> {
    let c = ckpt(d);
    let result = reconciler(d).reconcile(&c).await;
    finish(
        &c,
        result,
        d.status_writer().as_ref(),
        d.event_sink().as_ref(),
    )
    .await
}

fn job(d: &Double, attempt: i64) -> Option<Job> {
    d.object(Some(NS), &job_name(&hash(), attempt))
}

fn record(d: &Double) -> Option<ConfigMap> {
    d.object(Some(NS), &record_name(&hash()))
}

fn jobs(d: &Double) -> Vec<String> {
    d.objects::<Job>().iter().map(|j| j.name_any()).collect()
}

/// Set the Job's condition as the Job controller would.
async fn finish_job(d: &Double, attempt: i64, type_: &str, reason: &str) {
    let j = job(d, attempt).expect("job exists");
    let mut conditions = vec![
        json!({"type": type_, "status": "True", "reason": reason, "message": format!("job {type_}")}),
    ];
    if type_ == "Complete" {
        conditions.insert(0, json!({"type": "SuccessCriteriaMet", "status": "True"}));
    }
    d.status_writer()
        .apply_status(&j, &json!({ "conditions": conditions }))
        .await
        .unwrap();
}

async fn annotate(d: &Double, token: &str) {
    d.writer()
        .patch::<DynamoCheckpoint>(
            Some(NS),
            NAME,
            &Patch::Merge(json!({"metadata": {"annotations": {REBUILD_ANNOTATION: token}}})),
        )
        .await
        .unwrap();
}

async fn bump_spec(d: &Double, deadline: i64) {
    d.writer()
        .patch::<DynamoCheckpoint>(
            Some(NS),
            NAME,
            &Patch::Merge(json!({"spec": {"capture": {"activeDeadlineSeconds": deadline}}})),
        )
        .await
        .unwrap();
}

fn ready_reason(s: &DynamoCheckpointStatus) -> (String, String) {
    let c = conditions::find(&s.conditions, READY).expect("Ready condition");
    (c.status.clone(), c.reason.clone())
}

fn changes(d: &Double) -> Vec<(Verb, String, String)> {
    d.changes()
        .into_iter()
        .filter(|w: &Write| w.verb != Verb::ApplyStatus)
        .map(|w| (w.verb, w.kind, w.name))
        .collect()
}

/// Fixture, first pass, Job completes, second pass: Ready at attempt 1.
async fn ready_checkpoint(d: &Double) {
    fixture(d);
    pass(d).await.unwrap();
    finish_job(d, 1, "Complete", "CompletionsReached").await;
    pass(d).await.unwrap();
    assert_eq!(status(d).phase, Some(Phase::Ready));
    d.clear_writes();
    d.clear_events();
}

/// A second pass writes nothing and publishes nothing.
async fn idle(d: &Double) {
    d.clear_writes();
    d.clear_events();
    pass(d).await.unwrap();
    assert!(d.writes().is_empty(), "idle pass wrote {:?}", d.writes());
    assert!(
        d.events().is_empty(),
        "idle pass published {:?}",
        d.event_reasons()
    );
}

#[tokio::test]
async fn first_pass_creates_the_job_of_attempt_one() {
    let d = Double::new();
    fixture(&d);
    assert_eq!(pass(&d).await.unwrap(), Next::await_change());
    assert_eq!(jobs(&d), [job_name(&hash(), 1)]);
    let j = job(&d, 1).unwrap();
    assert_eq!(j.owner_references()[0].name, NAME);
    assert_eq!(j.owner_references()[0].controller, Some(true));
    let s = status(&d);
    assert_eq!(s.phase, Some(Phase::Creating));
    assert_eq!(s.identity_hash.as_deref(), Some(hash().as_str()));
    assert_eq!(s.checkpoint_id, s.identity_hash);
    assert_eq!(s.job_name, Some(job_name(&hash(), 1)));
    assert_eq!(s.attempt, Some(1));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(s.location, Some(format!("/checkpoints/{}", hash())));
    assert_eq!(ready_reason(&s), ("False".into(), reasons::CREATING.into()));
    assert!(conditions::is_true(&s.conditions, "JobCreated"));
    assert!(record(&d).is_none());
    assert_eq!(d.event_reasons(), [reasons::JOB_CREATED]);
    // The Job runs: nothing to do.
    idle(&d).await;
}

#[tokio::test]
async fn a_completed_job_records_the_artifact_and_reports_ready() {
    let d = Double::new();
    fixture(&d);
    pass(&d).await.unwrap();
    finish_job(&d, 1, "Complete", "CompletionsReached").await;
    d.clear_events();
    pass(&d).await.unwrap();
    let s = status(&d);
    assert_eq!(s.phase, Some(Phase::Ready));
    assert_eq!(ready_reason(&s), ("True".into(), reasons::READY.into()));
    assert!(conditions::is_true(&s.conditions, JOB_COMPLETED));
    assert!(s.created_at.is_some());
    let r = record(&d).expect("artifact record");
    assert_eq!(r.owner_references()[0].name, NAME);
    assert_eq!(
        r.data.unwrap()["jobUID"],
        job(&d, 1).unwrap().uid().unwrap()
    );
    assert_eq!(d.event_reasons(), [reasons::CHECKPOINT_READY]);
    // Reuse: no new object, no new Job, no write.
    idle(&d).await;
}

#[tokio::test]
async fn rebuild_deletes_then_recreates_exactly_once() {
    let d = Double::new();
    ready_checkpoint(&d).await;
    let old_uid = job(&d, 1).unwrap().uid();
    annotate(&d, "2026-01-01T00:00:00Z").await;
    d.clear_writes();
    pass(&d).await.unwrap();
    assert_eq!(
        changes(&d),
        [
            (Verb::Delete, "Job".into(), job_name(&hash(), 1)),
            (Verb::Delete, "ConfigMap".into(), record_name(&hash())),
            (Verb::Create, "Job".into(), job_name(&hash(), 2)),
        ]
    );
    assert_eq!(jobs(&d), [job_name(&hash(), 2)]);
    assert_ne!(job(&d, 2).unwrap().uid(), old_uid);
    // The same checkpoint, a new attempt; the request is recorded durably.
    let s = status(&d);
    assert_eq!(ckpt(&d).name_any(), NAME);
    assert_eq!(s.phase, Some(Phase::Creating));
    assert_eq!(s.attempt, Some(2));
    assert_eq!(
        s.observed_rebuild_token.as_deref(),
        Some("2026-01-01T00:00:00Z")
    );
    assert!(conditions::find(&s.conditions, JOB_COMPLETED).is_none());
    assert!(s.created_at.is_none());
    assert_eq!(d.event_reasons(), [reasons::REBUILD]);
    // A second reconcile does not rebuild again.
    idle(&d).await;
    finish_job(&d, 2, "Complete", "CompletionsReached").await;
    pass(&d).await.unwrap();
    assert_eq!(status(&d).phase, Some(Phase::Ready));
    assert_eq!(
        record(&d).unwrap().annotations()["nvidia.com/checkpoint-attempt"],
        "2"
    );
    idle(&d).await;
    // The same token again is no request; a new one is.
    annotate(&d, "2026-01-01T00:00:00Z").await;
    idle(&d).await;
    annotate(&d, "second").await;
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 3)]);
}

#[tokio::test]
async fn rebuild_requested_at_creation_is_honoured_by_the_first_attempt() {
    let d = Double::new();
    let mut c = DynamoCheckpoint::new(NAME, spec());
    c.metadata.namespace = Some(NS.into());
    c.metadata.annotations = Some(BTreeMap::from([(REBUILD_ANNOTATION.into(), "t".into())]));
    d.insert(c);
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 1)]);
    assert_eq!(status(&d).observed_rebuild_token.as_deref(), Some("t"));
    idle(&d).await;
}

#[tokio::test]
async fn rebuild_of_a_running_job_waits_for_its_pods_without_blocking() {
    let d = Double::new();
    fixture(&d);
    pass(&d).await.unwrap();
    // The Job is running; with foreground deletion it stays until its pods are gone, which the
    // double models with a finalizer.
    let j = job(&d, 1).unwrap();
    d.writer()
        .patch::<Job>(
            Some(NS),
            &j.name_any(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["foregroundDeletion"]}})),
        )
        .await
        .unwrap();
    annotate(&d, "t").await;
    d.clear_events();
    let next = pass(&d).await.unwrap();
    assert_eq!(next, Next::requeue(Duration::from_secs(5)));
    assert_eq!(
        jobs(&d),
        [job_name(&hash(), 1)],
        "no new Job while the old one is stopping"
    );
    assert!(job(&d, 1).unwrap().metadata.deletion_timestamp.is_some());
    let s = status(&d);
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(
        ready_reason(&s),
        ("False".into(), reasons::WAITING_FOR_DELETION.into())
    );
    assert_eq!(s.observed_rebuild_token, None, "not honoured yet");
    // Still terminating: no write.
    d.clear_writes();
    assert_eq!(
        pass(&d).await.unwrap(),
        Next::requeue(Duration::from_secs(5))
    );
    assert!(d.changes().is_empty(), "{:?}", d.changes());
    // Garbage collection finishes: the next pass starts attempt 2.
    d.writer()
        .patch::<Job>(
            Some(NS),
            &j.name_any(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 2)]);
    let s = status(&d);
    assert_eq!((s.phase, s.attempt), (Some(Phase::Creating), Some(2)));
    assert_eq!(s.observed_rebuild_token.as_deref(), Some("t"));
}

#[tokio::test]
async fn a_missing_artifact_is_captured_again() {
    let d = Double::new();
    ready_checkpoint(&d).await;
    let r = record(&d).unwrap();
    d.writer()
        .delete::<ConfigMap>(Some(NS), &r.name_any(), &Default::default(), None)
        .await
        .unwrap();
    d.clear_writes();
    pass(&d).await.unwrap();
    assert_eq!(
        changes(&d),
        [
            (Verb::Delete, "Job".into(), job_name(&hash(), 1)),
            (Verb::Create, "Job".into(), job_name(&hash(), 2)),
        ]
    );
    assert_eq!(status(&d).phase, Some(Phase::Creating));
    assert_eq!(d.event_reasons(), [reasons::ARTIFACT_MISSING]);
    idle(&d).await;
    finish_job(&d, 2, "Complete", "CompletionsReached").await;
    pass(&d).await.unwrap();
    assert!(record(&d).is_some());
    assert_eq!(status(&d).phase, Some(Phase::Ready));
}

#[tokio::test]
async fn a_missing_artifact_after_the_job_was_cleaned_up_is_captured_again() {
    let d = Double::new();
    ready_checkpoint(&d).await;
    for name in jobs(&d) {
        d.writer()
            .delete::<Job>(Some(NS), &name, &Default::default(), None)
            .await
            .unwrap();
    }
    // Ready without its Job: reuse.
    idle(&d).await;
    d.writer()
        .delete::<ConfigMap>(Some(NS), &record_name(&hash()), &Default::default(), None)
        .await
        .unwrap();
    d.clear_writes();
    pass(&d).await.unwrap();
    assert_eq!(
        changes(&d),
        [(Verb::Create, "Job".into(), job_name(&hash(), 2))]
    );
}

#[tokio::test]
async fn a_new_identity_creates_new_objects_without_deleting_first() {
    let d = Double::new();
    // A checkpoint whose status and Job were made for another identity (for example an older
    // hash of the same inputs): the new identity gets its own Job, the old one is left alone.
    let old = "0ef92fc0f723";
    let c = fixture(&d);
    let old_job = Job {
        metadata: ObjectMeta {
            name: Some(job_name(old, 1)),
            namespace: Some(NS.into()),
            labels: Some(BTreeMap::from([
                ("nvidia.com/checkpoint-name".to_string(), NAME.to_string()),
                (
                    "nvidia.com/snapshot-checkpoint-id".to_string(),
                    old.to_string(),
                ),
            ])),
            owner_references: Some(vec![c.controller_owner_ref(&()).unwrap()]),
            ..Default::default()
        },
        ..Default::default()
    };
    d.insert(old_job);
    d.status_writer()
        .apply_status(
            &c,
            &DynamoCheckpointStatus {
                phase: Some(Phase::Ready),
                identity_hash: Some(old.into()),
                attempt: Some(1),
                job_name: Some(job_name(old, 1)),
                conditions: vec![conditions::new(
                    JOB_COMPLETED,
                    conditions::Status::True,
                    "JobSucceeded",
                    "",
                    1,
                )],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    d.clear_writes();
    pass(&d).await.unwrap();
    assert_eq!(
        changes(&d),
        [(Verb::Create, "Job".into(), job_name(&hash(), 1))]
    );
    assert!(d.object::<Job>(Some(NS), &job_name(old, 1)).is_some());
    let s = status(&d);
    assert_eq!(s.identity_hash, Some(hash()));
    assert_eq!((s.phase, s.attempt), (Some(Phase::Creating), Some(1)));
    assert!(conditions::find(&s.conditions, JOB_COMPLETED).is_none());
    assert_eq!(d.event_reasons(), [reasons::JOB_CREATED]);
}

#[tokio::test]
async fn a_failed_job_fails_the_checkpoint_until_the_spec_changes() {
    let d = Double::new();
    fixture(&d);
    pass(&d).await.unwrap();
    finish_job(&d, 1, "Failed", "DeadlineExceeded").await;
    d.clear_events();
    pass(&d).await.unwrap();
    let s = status(&d);
    assert_eq!(s.phase, Some(Phase::Failed));
    assert_eq!(
        ready_reason(&s),
        ("False".into(), "DeadlineExceeded".into())
    );
    assert_eq!(s.message.as_deref(), Some("job Failed"));
    let completed = conditions::find(&s.conditions, JOB_COMPLETED).unwrap();
    assert_eq!(
        (completed.status.as_str(), completed.reason.as_str()),
        ("False", "DeadlineExceeded")
    );
    assert_eq!(d.event_reasons(), [reasons::CHECKPOINT_FAILED]);
    // No retry: not on the next pass, not when the failed Job goes away.
    idle(&d).await;
    d.writer()
        .delete::<Job>(Some(NS), &job_name(&hash(), 1), &Default::default(), None)
        .await
        .unwrap();
    idle(&d).await;
    assert_eq!(status(&d).phase, Some(Phase::Failed));
    // A spec change retries with a new attempt.
    bump_spec(&d, 120).await;
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 2)]);
    let j = job(&d, 2).unwrap();
    assert_eq!(j.spec.unwrap().active_deadline_seconds, Some(120));
    let s = status(&d);
    assert_eq!((s.phase, s.attempt), (Some(Phase::Creating), Some(2)));
    assert_eq!(d.event_reasons(), [reasons::RETRY]);
}

#[tokio::test]
async fn a_failed_job_is_retried_on_a_rebuild_request() {
    let d = Double::new();
    fixture(&d);
    pass(&d).await.unwrap();
    finish_job(&d, 1, "Failed", "BackoffLimitExceeded").await;
    pass(&d).await.unwrap();
    annotate(&d, "retry").await;
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 2)]);
    assert_eq!(status(&d).phase, Some(Phase::Creating));
}

#[tokio::test]
async fn a_spec_change_while_ready_reuses_the_artifact() {
    let d = Double::new();
    ready_checkpoint(&d).await;
    bump_spec(&d, 60).await;
    d.clear_writes();
    pass(&d).await.unwrap();
    assert!(changes(&d).is_empty(), "{:?}", changes(&d));
    let s = status(&d);
    assert_eq!(
        (s.phase, s.observed_generation),
        (Some(Phase::Ready), Some(2))
    );
}

#[tokio::test]
async fn drift_is_restored() {
    let d = Double::new();
    ready_checkpoint(&d).await;
    // The artifact record's identifying data edited by hand.
    d.writer()
        .patch::<ConfigMap>(
            Some(NS),
            &record_name(&hash()),
            &Patch::Merge(json!({"data": {"location": "/somewhere/else"}})),
        )
        .await
        .unwrap();
    pass(&d).await.unwrap();
    assert_eq!(
        record(&d).unwrap().data.unwrap()["location"],
        format!("/checkpoints/{}", hash())
    );
    assert_eq!(d.event_reasons(), [reasons::ARTIFACT_RESTORED]);
    assert_eq!(status(&d).phase, Some(Phase::Ready));
    idle(&d).await;
}

#[tokio::test]
async fn a_running_job_deleted_by_hand_is_created_again_under_its_name() {
    let d = Double::new();
    fixture(&d);
    pass(&d).await.unwrap();
    let uid = job(&d, 1).unwrap().uid();
    d.writer()
        .delete::<Job>(Some(NS), &job_name(&hash(), 1), &Default::default(), None)
        .await
        .unwrap();
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 1)]);
    assert_ne!(job(&d, 1).unwrap().uid(), uid);
    assert_eq!(status(&d).attempt, Some(1));
    idle(&d).await;
}

#[tokio::test]
async fn a_lost_status_is_recovered_from_the_jobs() {
    let d = Double::new();
    ready_checkpoint(&d).await;
    annotate(&d, "t").await;
    pass(&d).await.unwrap();
    finish_job(&d, 2, "Complete", "CompletionsReached").await;
    // The status is lost (restored from an old backup, or written by another version).
    d.status_writer()
        .apply_status(&ckpt(&d), &json!({}))
        .await
        .unwrap();
    d.clear_writes();
    pass(&d).await.unwrap();
    // No new Job: attempt 2 is found on its Job, the honoured token with it.
    assert!(
        changes(&d)
            .iter()
            .all(|(verb, kind, _)| !(kind == "Job" && *verb == Verb::Create)),
        "{:?}",
        changes(&d)
    );
    let s = status(&d);
    assert_eq!((s.phase, s.attempt), (Some(Phase::Ready), Some(2)));
    assert_eq!(s.observed_rebuild_token.as_deref(), Some("t"));
}

#[tokio::test]
async fn a_create_that_finds_its_own_job_adopts_it() {
    let d = Double::new();
    fixture(&d);
    pass(&d).await.unwrap();
    // The status write of the first pass was lost: the next pass tries to create again.
    d.status_writer()
        .apply_status(&ckpt(&d), &json!({}))
        .await
        .unwrap();
    d.clear_writes();
    d.clear_events();
    pass(&d).await.unwrap();
    assert!(changes(&d).is_empty(), "{:?}", changes(&d));
    assert_eq!(status(&d).attempt, Some(1));
    assert!(d.events().is_empty(), "adopting is not creating");
}

#[tokio::test]
async fn a_name_held_by_another_owner_blocks_without_writes() {
    let d = Double::new();
    d.insert(Job {
        metadata: ObjectMeta {
            name: Some(job_name(&hash(), 1)),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        ..Default::default()
    });
    fixture(&d);
    d.clear_writes();
    assert_eq!(
        pass(&d).await.unwrap(),
        Next::requeue(Duration::from_secs(30))
    );
    assert!(changes(&d).is_empty());
    let s = status(&d);
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(
        ready_reason(&s),
        ("False".into(), reasons::NAME_CONFLICT.into())
    );
    assert_eq!(d.event_reasons(), [reasons::NAME_CONFLICT]);
    d.clear_writes();
    d.clear_events();
    pass(&d).await.unwrap();
    assert!(d.writes().is_empty());
    assert!(d.events().is_empty(), "the conflict is reported once");
}

#[tokio::test]
async fn an_invalid_spec_touches_no_child_and_awaits_a_change() {
    let d = Double::new();
    let mut c = DynamoCheckpoint::new(NAME, spec());
    c.metadata.namespace = Some(NS.into());
    c.spec.capture.as_mut().unwrap().target_container_name = Some("absent".into());
    d.insert(c);
    let err = pass(&d).await.unwrap_err();
    assert!(matches!(
        err,
        RunError::Reconcile {
            retry: Retry::AwaitChange,
            error: Error::InvalidSpec(_)
        }
    ));
    assert!(d.objects::<Job>().is_empty());
    let s = status(&d);
    assert_eq!(s.phase, Some(Phase::Failed));
    assert_eq!(ready_reason(&s), ("False".into(), "InvalidSpec".into()));
    assert!(s.message.unwrap().contains("absent"));
    assert_eq!(d.event_reasons(), ["InvalidSpec"]);
    // Again: same status, no event.
    d.clear_writes();
    d.clear_events();
    pass(&d).await.unwrap_err();
    assert!(d.writes().is_empty());
    assert!(d.events().is_empty());
}

#[tokio::test]
async fn errors_map_to_the_step_reason_and_keep_the_phase() {
    async fn failing(
        d: &Double,
        verb: Verb,
        kind: &str,
    ) -> (DynamoCheckpointStatus, RunError<Error>) {
        d.fail_next(verb, kind, kit::Error::Forbidden("injected".into()));
        let err = pass(d).await.unwrap_err();
        (status(d), err)
    }
    let d = Double::new();
    fixture(&d);
    let (s, err) = failing(&d, Verb::List, "Job").await;
    assert!(matches!(
        err,
        RunError::Reconcile {
            retry: Retry::Backoff,
            ..
        }
    ));
    assert_eq!(
        ready_reason(&s),
        ("False".into(), reasons::READ_FAILED.into())
    );
    assert_eq!(
        s.phase, None,
        "a transient error is not a checkpoint failure"
    );
    let (s, _) = failing(&d, Verb::Create, "Job").await;
    assert_eq!(
        ready_reason(&s),
        ("False".into(), reasons::JOB_CREATE_FAILED.into())
    );
    assert!(d.objects::<Job>().is_empty());
    // Recovery.
    pass(&d).await.unwrap();
    assert_eq!(status(&d).phase, Some(Phase::Creating));
    finish_job(&d, 1, "Complete", "CompletionsReached").await;
    let (s, _) = failing(&d, Verb::Apply, "ConfigMap").await;
    assert_eq!(
        ready_reason(&s),
        ("False".into(), reasons::RECORD_FAILED.into())
    );
    assert_eq!(s.phase, Some(Phase::Creating));
    pass(&d).await.unwrap();
    assert_eq!(status(&d).phase, Some(Phase::Ready));
    annotate(&d, "t").await;
    let (s, _) = failing(&d, Verb::Delete, "Job").await;
    assert_eq!(
        ready_reason(&s),
        ("False".into(), reasons::DELETE_FAILED.into())
    );
    assert_eq!(s.phase, Some(Phase::Ready), "nothing was deleted");
    // The old attempt is deleted, then the new Job cannot be created: no longer Ready.
    let (s, _) = failing(&d, Verb::Create, "Job").await;
    assert_eq!(s.phase, Some(Phase::Pending));
    assert!(record(&d).is_none());
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 2)]);
    assert_eq!(status(&d).observed_rebuild_token.as_deref(), Some("t"));
}

#[tokio::test]
async fn a_failed_status_write_publishes_no_events() {
    let d = Double::new();
    fixture(&d);
    d.fail_next(
        Verb::ApplyStatus,
        "DynamoCheckpoint",
        kit::Error::Conflict("injected".into()),
    );
    assert!(matches!(pass(&d).await.unwrap_err(), RunError::Status(_)));
    assert!(d.events().is_empty());
    // The Job exists; the next pass adopts it and reports.
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 1)]);
    assert_eq!(status(&d).phase, Some(Phase::Creating));
}

/// The machine, walked: random sequences of what the world does (Jobs finish, fail or vanish,
/// artifacts disappear, users edit, rebuild, break and fix the spec, statuses get lost), each
/// followed by reconciles. No pass may take a transition outside the table, and the invariants
/// below hold after every pass.
mod walk {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum World {
        CompleteJob,
        FailJob,
        DeleteJob,
        DeleteJobSlowly,
        ReleaseFinalizers,
        DeleteRecord,
        EditRecord,
        Rebuild(u8),
        BumpSpec,
        BreakSpec,
        FixSpec,
        LoseStatus,
    }

    fn world() -> impl Strategy<Value = World> {
        prop_oneof![
            3 => Just(World::CompleteJob),
            1 => Just(World::FailJob),
            1 => Just(World::DeleteJob),
            1 => Just(World::DeleteJobSlowly),
            2 => Just(World::ReleaseFinalizers),
            1 => Just(World::DeleteRecord),
            1 => Just(World::EditRecord),
            2 => (0u8..3).prop_map(World::Rebuild),
            1 => Just(World::BumpSpec),
            1 => Just(World::BreakSpec),
            1 => Just(World::FixSpec),
            1 => Just(World::LoseStatus),
        ]
    }

    /// The newest Job of the identity, if any.
    fn newest(d: &Double) -> Option<Job> {
        d.objects::<Job>()
            .into_iter()
            .max_by_key(|j| crate::render::attempt_of(j).unwrap_or_default())
    }

    async fn apply(d: &Double, event: &World) {
        let w = d.writer();
        match event {
            World::CompleteJob | World::FailJob => {
                if let Some(j) = newest(d).filter(|j| j.metadata.deletion_timestamp.is_none()) {
                    let type_ = if matches!(event, World::CompleteJob) {
                        "Complete"
                    } else {
                        "Failed"
                    };
                    let done = j
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some();
                    if !done {
                        d.status_writer()
                            .apply_status(&j, &json!({"conditions": [{"type": type_, "status": "True", "reason": "Simulated"}]}))
                            .await
                            .unwrap();
                    }
                }
            }
            World::DeleteJob => {
                if let Some(j) = newest(d) {
                    let _ = w
                        .delete::<Job>(Some(NS), &j.name_any(), &Default::default(), None)
                        .await;
                }
            }
            World::DeleteJobSlowly => {
                if let Some(j) = newest(d).filter(|j| j.metadata.deletion_timestamp.is_none()) {
                    w.patch::<Job>(
                        Some(NS),
                        &j.name_any(),
                        &Patch::Merge(json!({"metadata": {"finalizers": ["foregroundDeletion"]}})),
                    )
                    .await
                    .unwrap();
                    let _ = w
                        .delete::<Job>(Some(NS), &j.name_any(), &Default::default(), None)
                        .await;
                }
            }
            World::ReleaseFinalizers => {
                for j in d.objects::<Job>() {
                    if j.finalizers().is_empty() {
                        continue;
                    }
                    w.patch::<Job>(
                        Some(NS),
                        &j.name_any(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await
                    .unwrap();
                }
            }
            World::DeleteRecord => {
                let _ = w
                    .delete::<ConfigMap>(Some(NS), &record_name(&hash()), &Default::default(), None)
                    .await;
            }
            World::EditRecord => {
                if record(d).is_some() {
                    w.patch::<ConfigMap>(
                        Some(NS),
                        &record_name(&hash()),
                        &Patch::Merge(json!({"data": {"location": "x"}})),
                    )
                    .await
                    .unwrap();
                }
            }
            World::Rebuild(token) => annotate(d, &format!("t{token}")).await,
            World::BumpSpec => {
                let deadline = ckpt(d).metadata.generation.unwrap_or(1) + 100;
                bump_spec(d, deadline).await;
            }
            World::BreakSpec | World::FixSpec => {
                let target = if matches!(event, World::BreakSpec) {
                    "absent"
                } else {
                    "main"
                };
                w.patch::<DynamoCheckpoint>(
                    Some(NS),
                    NAME,
                    &Patch::Merge(json!({"spec": {"capture": {"targetContainerName": target}}})),
                )
                .await
                .unwrap();
            }
            World::LoseStatus => {
                d.status_writer()
                    .apply_status(&ckpt(d), &json!({}))
                    .await
                    .unwrap();
            }
        }
    }

    fn check_invariants(d: &Double) {
        let s = status(d);
        let live: Vec<_> = d
            .objects::<Job>()
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .filter(|j| {
                j.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_none()
            })
            .map(|j| j.name_any())
            .collect();
        assert!(
            live.len() <= 1,
            "two capture Jobs running at once: {live:?}"
        );
        if s.phase == Some(Phase::Ready) {
            let r = record(d).expect("Ready without an artifact record");
            assert_eq!(
                crate::render::attempt_of(&r),
                s.attempt,
                "Ready points at another attempt's record"
            );
        }
        if s.phase == Some(Phase::Creating) {
            let name = s.job_name.clone().unwrap();
            assert!(
                d.object::<Job>(Some(NS), &name).is_some(),
                "Creating without its Job {name}"
            );
        }
    }

    async fn run(events: Vec<World>) {
        let d = Double::new();
        fixture(&d);
        for event in std::iter::once(None).chain(events.iter().map(Some)) {
            if let Some(event) = event {
                apply(&d, event).await;
            }
            // Converge: a handful of passes, like the queue does on the events of its writes.
            for _ in 0..4 {
                match pass(&d).await {
                    Err(RunError::Reconcile {
                        error: error @ Error::IllegalTransition { .. },
                        ..
                    }) => panic!("{error} after {event:?}"),
                    _ => check_invariants(&d),
                }
            }
            // Converged: one more pass writes nothing.
            d.clear_writes();
            d.clear_events();
            let _ = pass(&d).await;
            assert!(
                d.writes().is_empty() && d.events().is_empty(),
                "not idle after {event:?}: {:?} {:?}",
                d.writes(),
                d.event_reasons()
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn walks_stay_inside_the_table(events in proptest::collection::vec(world(), 1..14)) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(run(events));
        }
    }
}

#[tokio::test]
async fn a_create_that_collides_with_an_uncached_job_looks_again_soon() {
    let d = Double::new();
    fixture(&d);
    d.fail_next(
        Verb::Create,
        "Job",
        kit::Error::AlreadyExists("checkpoint-job".into()),
    );
    assert_eq!(
        pass(&d).await.unwrap(),
        Next::requeue(Duration::from_secs(1))
    );
    let s = status(&d);
    assert_eq!((s.phase, s.attempt), (Some(Phase::Creating), Some(1)));
    assert!(d.events().is_empty(), "nothing was created");
    // Next look: the Job is not there after all, so it is made.
    pass(&d).await.unwrap();
    assert_eq!(jobs(&d), [job_name(&hash(), 1)]);
    assert_eq!(d.event_reasons(), [reasons::JOB_CREATED]);
}
