//! The persist-then-publish half of the run loop, on the double.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::run::{RunError, finish};
use kit::testing::{Double, Verb};
use kit::{Error, Outcome, ReconcileStatus, Reconciled, Retry};
use kube::CustomResource;
use kube::runtime::controller::Action;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "kit.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    schema = "disabled"
)]
struct WidgetSpec {
    size: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct WidgetStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    state: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    conditions: Vec<Condition>,
}

impl ReconcileStatus for WidgetStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
    fn set_failed(&mut self, _generation: i64, _reason: &str, _message: &str) {
        self.state = "failed".into();
    }
}

fn widget(d: &Double) -> Widget {
    let mut w = Widget::new("w", WidgetSpec { size: 1 });
    w.metadata.namespace = Some("ns".into());
    d.insert(w)
}

fn ok(state: &str) -> Reconciled<WidgetStatus, Error> {
    let mut out = Outcome::new(WidgetStatus {
        state: state.into(),
        conditions: vec![],
    });
    out.normal("Done", "done");
    Ok(out)
}

async fn run(
    d: &Double,
    w: &Widget,
    result: Reconciled<WidgetStatus, Error>,
) -> Result<Action, RunError<Error>> {
    finish(
        w,
        result,
        d.status_writer().as_ref(),
        d.event_sink().as_ref(),
    )
    .await
}

#[tokio::test]
async fn writes_status_then_publishes_and_waits_for_change() {
    let d = Double::new();
    let w = widget(&d);
    assert_eq!(
        run(&d, &w, ok("ready")).await.unwrap(),
        Action::await_change()
    );
    let stored: Widget = d.object(Some("ns"), "w").unwrap();
    assert_eq!(stored.status.unwrap().state, "ready");
    let verbs: Vec<_> = d.writes().iter().map(|w| w.verb).collect();
    assert_eq!(verbs, [Verb::ApplyStatus]);
    assert_eq!(d.event_reasons(), ["Done"]);
}

#[tokio::test]
async fn an_equal_status_is_not_written() {
    let d = Double::new();
    let w = widget(&d);
    run(&d, &w, ok("ready")).await.unwrap();
    d.clear_writes();
    let current: Widget = d.object(Some("ns"), "w").unwrap();
    run(&d, &current, ok("ready")).await.unwrap();
    assert!(d.writes().is_empty());
}

#[tokio::test]
async fn requeue_is_honoured() {
    let d = Double::new();
    let w = widget(&d);
    let mut out = Outcome::new(WidgetStatus::default());
    out.requeue_after(Duration::from_secs(7));
    assert_eq!(
        run(&d, &w, Ok(out)).await.unwrap(),
        Action::requeue(Duration::from_secs(7))
    );
}

#[tokio::test]
async fn a_failure_persists_the_partial_status_and_keeps_its_retry() {
    let d = Double::new();
    let w = widget(&d);
    let failed = Outcome::new(WidgetStatus::default())
        .fail(1, "Invalid", Error::Invalid("size too big".into()))
        .await_change();
    let err = run(&d, &w, Err(failed.into())).await.unwrap_err();
    assert!(matches!(
        err,
        RunError::Reconcile {
            retry: Retry::AwaitChange,
            ..
        }
    ));
    let stored: Widget = d.object(Some("ns"), "w").unwrap();
    let status = stored.status.unwrap();
    assert_eq!(status.state, "failed");
    assert_eq!(status.conditions[0].reason, "Invalid");
    assert_eq!(d.event_reasons(), ["Invalid"]);
}

#[tokio::test]
async fn a_failed_status_write_publishes_nothing() {
    let d = Double::new();
    let w = widget(&d);
    d.fail_next(
        Verb::ApplyStatus,
        "Widget",
        Error::Conflict("injected".into()),
    );
    assert!(matches!(
        run(&d, &w, ok("ready")).await.unwrap_err(),
        RunError::Status(_)
    ));
    assert!(d.events().is_empty());
}

#[tokio::test]
async fn a_deleted_object_is_dropped_quietly() {
    let d = Double::new();
    let mut w = Widget::new("gone", WidgetSpec { size: 1 });
    w.metadata.namespace = Some("ns".into());
    assert_eq!(
        run(&d, &w, ok("ready")).await.unwrap(),
        Action::await_change()
    );
    assert!(d.events().is_empty());
}
