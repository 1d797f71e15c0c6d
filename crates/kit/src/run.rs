//! The run loop: reconcile, persist status, publish events, requeue or back off.
//!
//! [`Runner`] wraps a kube-runtime [`Controller`] that the caller built (primary watch, owned and
//! watched kinds, shared streams from [`crate::cache::Cache`], predicates, concurrency,
//! shutdown). Per object and attempt it:
//! 0. retries shortly instead (250 ms), when the object it is handed is at the version its own
//!    last status write replaced, less than 5 s ago: the cache has not seen that write yet, and
//!    a reconcile from it would find (and announce) the same transition again;
//! 1. calls the reconcile function once, which returns an [`Outcome`] or a [`Failed`] carrying
//!    the partial outcome;
//! 2. persists `outcome.status` through the [`StatusWriter`], also when the attempt failed, and
//!    skips the write when the status equals the one the object already has, or when it is a new
//!    object's first status and only says that children are still converging
//!    ([`Outcome::settling`]): that one is held for up to [`FIRST_STATUS_GRACE`] (or the
//!    runner's [`Runner::first_status_grace`]) after the object's creation (a requeue at its end writes it), so that an object whose children
//!    converge promptly writes its status once. Later, while children keep converging, one
//!    settling status replaces the settling status this runner last wrote at most once per
//!    [`SETTLING_INTERVAL`] (a requeue at its end writes the latest), unless the generation
//!    observed changed or the reconcile queued a transition event: progress is coalesced, a
//!    transition (Ready, a failure, a new generation) is written at once;
//! 3. publishes `outcome.events`, only if the status write succeeded (or was not needed), the
//!    child writes of one verb announced together ([`crate::outcome::summarize`]);
//! 4. requeues after `outcome.requeue`, or waits for the next change when it is `None`; on failure
//!    retries with per-object exponential backoff ([`ErrorBackoff`], reset on success), or waits
//!    for a change if the failure said [`Retry::AwaitChange`].
//!
//! When a scheduled object is gone (deleted by anyone), its backoff is forgotten and the
//! [`Runner::on_gone`] hook runs, so nothing keyed by the object outlives it.
//!
//! [`finish`] is steps 2–4 without a controller, for tests.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use kube::core::object::HasStatus;
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::capability::{Cached, EventSink, StatusWriter};
use crate::error::Error;
use crate::object::{key_of, resource};
use crate::outcome::{Event, Failed, Outcome, Reconciled, Retry};

/// Per-object exponential backoff for failed reconciles: `base`, `2·base`, `4·base`, ... capped at
/// `max`, reset when the object reconciles successfully.
#[derive(Debug)]
pub struct ErrorBackoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for ErrorBackoff {
    /// 1 s doubling up to 5 min.
    fn default() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl ErrorBackoff {
    /// Backoff from `base` doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        ErrorBackoff {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Record a failure of `key` and return how long to wait before retrying it.
    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().expect("backoff lock");
        let n = failures.entry(key.to_string()).or_insert(0);
        let delay = self
            .base
            .checked_mul(2u32.saturating_pow(*n))
            .unwrap_or(self.max)
            .min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    /// Forget the failures of `key`.
    pub fn reset(&self, key: &str) {
        self.failures.lock().expect("backoff lock").remove(key);
    }

    /// Consecutive failures of `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .expect("backoff lock")
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

/// Why an attempt did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E: std::error::Error + 'static> {
    /// The reconcile function failed; its partial status was persisted.
    #[error("reconcile failed: {error}")]
    Reconcile {
        /// The reconcile error.
        #[source]
        error: E,
        /// When to retry.
        retry: Retry,
    },
    /// Persisting the status failed; no events were published.
    #[error("status write failed: {0}")]
    Status(#[source] Error),
}

/// Persist the status of `result`, then publish its events, then decide the next action.
///
/// The status write is skipped when the serialized desired status equals the object's current
/// one. If the write fails, no event is published and [`RunError::Status`] is returned (the
/// reconcile error, if any, is logged). If the object is gone (NotFound), nothing is published
/// and the object is not requeued. Unlike the [`Runner`], it never holds a first status back
/// ([`FIRST_STATUS_GRACE`]): one pass of a test, or of an offline rendering, writes what it got.
pub async fn finish<K, E>(
    object: &K,
    result: Reconciled<K::Status, E>,
    status_writer: &dyn StatusWriter,
    events: &dyn EventSink,
) -> Result<Action, RunError<E>>
where
    K: Resource<DynamicType = ()> + HasStatus,
    K::Status: Serialize,
    E: std::error::Error + 'static,
{
    complete(object, result, status_writer, events, None).await
}

/// [`finish`], holding settling statuses by `pacing` as of its time when given (what the
/// [`Runner`] does).
async fn complete<K, E>(
    object: &K,
    result: Reconciled<K::Status, E>,
    status_writer: &dyn StatusWriter,
    events: &dyn EventSink,
    pacing: Option<(&Pacing, SystemTime)>,
) -> Result<Action, RunError<E>>
where
    K: Resource<DynamicType = ()> + HasStatus,
    K::Status: Serialize,
    E: std::error::Error + 'static,
{
    let (outcome, failure): (Outcome<K::Status>, _) = match result {
        Ok(outcome) => (outcome, None),
        Err(failed) => {
            let Failed {
                outcome,
                error,
                retry,
            } = *failed;
            (outcome, Some((error, retry)))
        }
    };
    let object_key = key_of(object);
    let desired =
        serde_json::to_value(&outcome.status).map_err(|e| RunError::Status(Error::from(e)))?;
    let current = object
        .status()
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| RunError::Status(Error::from(e)))?;
    let changed = current.as_ref() != Some(&desired);
    let settling = outcome.settling && failure.is_none();
    let transition = outcome.events.iter().any(|e| e.mutation.is_none());
    let held = pacing
        .filter(|_| settling && changed && !transition)
        .and_then(|(pacing, now)| pacing.hold(object, current.as_ref(), &desired, now));
    if let Some(wait) = held {
        tracing::debug!(object = %object_key, ?wait, "settling status held while children converge");
        publish(object, outcome.events, events).await;
        return Ok(Action::requeue(
            outcome.requeue.map_or(wait, |r| r.min(wait)),
        ));
    }
    if changed {
        let written = status_writer
            .apply_status_dynamic(
                &resource::<K>(),
                object.namespace().as_deref(),
                &object.name_any(),
                &desired,
            )
            .await;
        match written {
            Ok(applied) => {
                tracing::debug!(object = %object_key, changed = applied.changed, "status written");
                if let Some((pacing, now)) = pacing {
                    pacing.written(&object_key, settling, now);
                    if applied.changed {
                        pacing
                            .superseded
                            .record(&object_key, object.resource_version(), now);
                    }
                }
            }
            Err(err) if err.is_not_found() => {
                tracing::debug!(object = %object_key, "object gone; status not written");
                return Ok(Action::await_change());
            }
            Err(err) => {
                if let Some((error, _)) = &failure {
                    tracing::warn!(object = %object_key, %error, "reconcile failed");
                }
                return Err(RunError::Status(err));
            }
        }
    } else {
        tracing::trace!(object = %object_key, "status unchanged; not written");
    }
    publish(object, outcome.events, events).await;
    match failure {
        Some((error, retry)) => Err(RunError::Reconcile { error, retry }),
        None => Ok(match outcome.requeue {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        }),
    }
}

/// How often a settling status ([`Outcome::settling`]) may replace the settling status the
/// runner last wrote for the same object and generation.
pub const SETTLING_INTERVAL: Duration = Duration::from_secs(20);

/// When the runner last wrote a settling status, per object (`namespace/name`): only objects
/// whose last written status was settling, and only for [`SETTLING_INTERVAL`] (older records
/// are dropped with the next write), so nothing outlives the objects.
#[derive(Debug)]
struct Pacing {
    /// How long a first settling status may be held after the object's creation.
    first_grace: Duration,
    written: Mutex<HashMap<String, SystemTime>>,
    /// The versions this runner's status writes replaced.
    superseded: Superseded,
}

/// How long a status write of this runner marks the version it replaced as outdated: a watch
/// that has not delivered the write by then is left to the cache's own recovery.
const SUPERSEDED_WINDOW: Duration = Duration::from_secs(5);

/// When a reconcile is handed an object at a version this runner's status write replaced:
/// retried after this long, by when the watch has usually delivered the write.
const SUPERSEDED_RETRY: Duration = Duration::from_millis(250);

/// Per object (`namespace/name`), the `resourceVersion` it had when this runner last changed its
/// status, for [`SUPERSEDED_WINDOW`]. A reconcile handed the object at that version works from a
/// cache that has not seen the write yet: it would find the transition it already wrote (and
/// announce it again); it is retried shortly instead. Records go when the object is seen at
/// another version or the window is over, so nothing outlives the objects.
#[derive(Debug, Default)]
struct Superseded {
    versions: Mutex<HashMap<String, (String, SystemTime)>>,
}

impl Superseded {
    /// The status of `key`, at `version` when the reconcile read it, was changed at `now`.
    fn record(&self, key: &str, version: Option<String>, now: SystemTime) {
        let mut versions = self.versions.lock().expect("superseded lock");
        versions.retain(|_, (_, at)| within_window(*at, now));
        if let Some(version) = version {
            versions.insert(key.to_string(), (version, now));
        }
    }

    /// Whether `key` at `version` is what this runner's status write replaced, at `now`.
    fn holds(&self, key: &str, version: Option<&str>, now: SystemTime) -> bool {
        let mut versions = self.versions.lock().expect("superseded lock");
        let Some((replaced, at)) = versions.get(key) else {
            return false;
        };
        let holds = version == Some(replaced.as_str()) && within_window(*at, now);
        if !holds {
            versions.remove(key);
        }
        holds
    }
}

/// Whether `at` is less than [`SUPERSEDED_WINDOW`] before `now`.
fn within_window(at: SystemTime, now: SystemTime) -> bool {
    now.duration_since(at)
        .is_ok_and(|since| since < SUPERSEDED_WINDOW)
}

impl Default for Pacing {
    fn default() -> Self {
        Pacing::new(FIRST_STATUS_GRACE)
    }
}

impl Pacing {
    /// Pacing that holds a first settling status for up to `first_grace` after the creation.
    fn new(first_grace: Duration) -> Self {
        Pacing {
            first_grace,
            written: Mutex::default(),
            superseded: Superseded::default(),
        }
    }

    /// How long the settling status `desired` of `object` waits at `now` before it replaces
    /// `current`: a first status for the rest of the first-status grace since the creation;
    /// a later one of the same observed generation for the rest of the interval since the last
    /// settling status was written.
    fn hold<K: Resource>(
        &self,
        object: &K,
        current: Option<&Value>,
        desired: &Value,
        now: SystemTime,
    ) -> Option<Duration> {
        let Some(current) = current.filter(|c| !c.is_null() && *c != &json!({})) else {
            return first_status_wait(object, self.first_grace, now);
        };
        (current["observedGeneration"] == desired["observedGeneration"])
            .then(|| self.wait(&key_of(object), now))
            .flatten()
    }

    /// How much longer a settling status of `key` waits at `now`: the rest of
    /// [`SETTLING_INTERVAL`] since its last settling status was written; `None` when none was
    /// written within it.
    fn wait(&self, key: &str, now: SystemTime) -> Option<Duration> {
        let written = *self.written.lock().expect("pacing lock").get(key)?;
        let since = now.duration_since(written).ok()?;
        SETTLING_INTERVAL
            .checked_sub(since)
            .filter(|w| !w.is_zero())
    }

    /// Record that a status of `key` was written at `now`: a settling one starts an interval,
    /// any other ends it.
    fn written(&self, key: &str, settling: bool, now: SystemTime) {
        let mut written = self.written.lock().expect("pacing lock");
        written.retain(|_, at| {
            now.duration_since(*at)
                .is_ok_and(|since| since < SETTLING_INTERVAL)
        });
        if settling {
            written.insert(key.to_string(), now);
        } else {
            written.remove(key);
        }
    }
}

/// How long a new object's first status may be held back while it only says that children are
/// still converging ([`Outcome::settling`]), counted from the object's creation: the default of
/// [`Runner::first_status_grace`].
pub const FIRST_STATUS_GRACE: Duration = Duration::from_secs(10);

/// How much longer the first status of `object` may be held at `now`: the rest of `grace` since
/// its creation; `None` once it is over, or when the creation time is unknown or ahead of this
/// clock.
fn first_status_wait<K: Resource>(
    object: &K,
    grace: Duration,
    now: SystemTime,
) -> Option<Duration> {
    let created = object.meta().creation_timestamp.as_ref()?;
    let created = SystemTime::from(created.0);
    let age = now.duration_since(created).ok()?;
    grace.checked_sub(age).filter(|w| !w.is_zero())
}

/// Publish the events of one reconcile, the child writes of one verb together
/// ([`crate::outcome::summarize`]); a failure is logged, never retried.
async fn publish<K: Resource<DynamicType = ()>>(
    object: &K,
    queued: Vec<Event>,
    events: &dyn EventSink,
) {
    let regarding = object.object_ref(&());
    for event in &crate::outcome::summarize(queued) {
        if let Err(err) = events.publish(event, &regarding).await {
            tracing::warn!(object = %key_of(object), reason = %event.reason, error = %err, "event not published");
        }
    }
}

/// Runs a kube-runtime controller with the reconcile contract of this crate.
pub struct Runner<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + 'static,
{
    controller: Controller<K>,
    status_writer: Arc<dyn StatusWriter>,
    events: Arc<dyn EventSink>,
    backoff: ErrorBackoff,
    first_status_grace: Duration,
    on_gone: Option<GoneHook>,
}

/// Called with the key (`namespace/name`) of a primary object found gone when its reconcile was
/// due.
type GoneHook = Box<dyn Fn(&str) + Send + Sync>;

struct Shared<Ctx, F> {
    ctx: Arc<Ctx>,
    reconcile: F,
    status_writer: Arc<dyn StatusWriter>,
    events: Arc<dyn EventSink>,
    backoff: ErrorBackoff,
    pacing: Pacing,
}

impl<K> Runner<K>
where
    K: Cached + HasStatus,
    K::Status: Serialize + Send + Sync,
{
    /// Run `controller`, persisting status with `status_writer` and publishing events to `events`
    /// (one shared [`crate::events::Publisher`] in production).
    pub fn new(
        controller: Controller<K>,
        status_writer: Arc<dyn StatusWriter>,
        events: Arc<dyn EventSink>,
    ) -> Self {
        Runner {
            controller,
            status_writer,
            events,
            backoff: ErrorBackoff::default(),
            first_status_grace: FIRST_STATUS_GRACE,
            on_gone: None,
        }
    }

    /// How long a new object's first status may be held while it only says that children are
    /// still converging, counted from the object's creation (default [`FIRST_STATUS_GRACE`]).
    pub fn first_status_grace(mut self, grace: Duration) -> Self {
        self.first_status_grace = grace;
        self
    }

    /// Run `hook` with the key (`namespace/name`) of every object that is gone when its reconcile
    /// is due, to drop what the caller keeps per object.
    pub fn on_gone(mut self, hook: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_gone = Some(Box::new(hook));
        self
    }

    /// Replace the default error backoff (1 s doubling up to 5 min).
    pub fn backoff(mut self, backoff: ErrorBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Reconcile until the controller shuts down (see `Controller::graceful_shutdown_on`).
    pub async fn run<Ctx, F, Fut, E>(self, reconcile: F, ctx: Arc<Ctx>)
    where
        Ctx: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Reconciled<K::Status, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared {
            ctx,
            reconcile,
            status_writer: self.status_writer,
            events: self.events,
            backoff: self.backoff,
            pacing: Pacing::new(self.first_status_grace),
        });
        let on_gone = self.on_gone;
        let forget = shared.clone();
        self.controller
            .run(
                |object: Arc<K>, shared: Arc<Shared<Ctx, F>>| {
                    let object_key = key_of(object.as_ref());
                    let span = tracing::info_span!("reconcile", object = %object_key);
                    async move {
                        let version = object.resource_version();
                        if shared.pacing.superseded.holds(&object_key, version.as_deref(), SystemTime::now()) {
                            tracing::debug!(object = %object_key, "cached object predates this runner's last status write; reconciled once the cache has it");
                            return Ok(Action::requeue(SUPERSEDED_RETRY));
                        }
                        let result = (shared.reconcile)(object.clone(), shared.ctx.clone()).await;
                        let action = complete(
                            object.as_ref(),
                            result,
                            shared.status_writer.as_ref(),
                            shared.events.as_ref(),
                            Some((&shared.pacing, SystemTime::now())),
                        )
                        .await;
                        if action.is_ok() {
                            shared.backoff.reset(&object_key);
                        }
                        action
                    }
                    .instrument(span)
                },
                |object: Arc<K>, error: &RunError<E>, shared: Arc<Shared<Ctx, F>>| {
                    let object_key = key_of(object.as_ref());
                    match error {
                        RunError::Reconcile {
                            retry: Retry::AwaitChange,
                            ..
                        } => {
                            shared.backoff.reset(&object_key);
                            Action::await_change()
                        }
                        _ => Action::requeue(shared.backoff.next(&object_key)),
                    }
                },
                shared,
            )
            .for_each(move |result| {
                match result {
                    Ok((object, action)) => {
                        tracing::debug!(object = %object, ?action, "reconciled")
                    }
                    Err(ControllerError::ReconcilerFailed(error, object)) => {
                        tracing::warn!(object = %object, error = %error, "reconcile failed")
                    }
                    Err(ControllerError::ObjectNotFound(object)) => {
                        tracing::debug!(object = %object, "object gone before reconcile");
                        let key = crate::object::key(object.namespace.as_deref(), &object.name);
                        forget.backoff.reset(&key);
                        if let Some(hook) = &on_gone {
                            hook(&key);
                        }
                    }
                    Err(error) => tracing::warn!(error = %error, "controller error"),
                }
                futures::future::ready(())
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_resets_per_key() {
        let b = ErrorBackoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let delays: Vec<_> = (0..5).map(|_| b.next("a").as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        assert_eq!(b.next("b").as_secs(), 1);
        assert_eq!(b.failures("a"), 5);
        b.reset("a");
        assert_eq!(b.failures("a"), 0);
        assert_eq!(b.next("a").as_secs(), 1);
        for _ in 0..100 {
            b.next("c");
        }
        assert_eq!(b.next("c").as_secs(), 5);
    }

    #[test]
    fn a_first_status_is_held_for_the_grace_after_creation() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let created = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let object = |at: Option<SystemTime>| {
            let mut o = ConfigMap::default();
            o.metadata.creation_timestamp = at.map(|t| Time(t.try_into().unwrap()));
            o
        };
        let secs = Duration::from_secs;
        // (created at, now, wait)
        let cases = [
            (Some(created), created, Some(FIRST_STATUS_GRACE)),
            (
                Some(created),
                created + secs(3),
                Some(FIRST_STATUS_GRACE - secs(3)),
            ),
            (Some(created), created + FIRST_STATUS_GRACE, None),
            (Some(created), created + secs(3600), None),
            // A creation time ahead of this clock, or none: written at once.
            (Some(created + secs(60)), created, None),
            (None, created, None),
        ];
        for (at, now, wait) in cases {
            assert_eq!(
                first_status_wait(&object(at), FIRST_STATUS_GRACE, now),
                wait,
                "{at:?} {now:?}"
            );
        }
        // A runner's own grace.
        let grace = secs(30);
        assert_eq!(
            first_status_wait(&object(Some(created)), grace, created + secs(12)),
            Some(secs(18))
        );
        assert_eq!(
            first_status_wait(&object(Some(created)), grace, created + grace),
            None
        );
    }

    #[test]
    fn a_settling_status_replaces_the_last_settling_one_once_per_interval() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let secs = Duration::from_secs;
        let mut object = ConfigMap::default();
        object.metadata.namespace = Some("ns".into());
        object.metadata.name = Some("g".into());
        object.metadata.creation_timestamp = Some(Time((t0 - secs(600)).try_into().unwrap()));
        let status = |generation: i64, message: &str| json!({"observedGeneration": generation, "message": message});
        let current = status(1, "2 of 3 ready");
        // (last write: settling?, seconds before now; desired; wait)
        let cases = [
            // Written 3 s ago as settling: the next progress waits out the interval.
            (
                Some((true, 3)),
                status(1, "1 of 3 ready"),
                Some(SETTLING_INTERVAL - secs(3)),
            ),
            (
                Some((true, SETTLING_INTERVAL.as_secs())),
                status(1, "1 of 3 ready"),
                None,
            ),
            (Some((true, 60)), status(1, "1 of 3 ready"), None),
            // A new generation observed, or a last write that was no settling one: at once.
            (Some((true, 3)), status(2, "1 of 3 ready"), None),
            (Some((false, 3)), status(1, "1 of 3 ready"), None),
            // Nothing written by this runner (another process wrote it): at once.
            (None, status(1, "1 of 3 ready"), None),
        ];
        for (last, desired, wait) in cases {
            let pacing = Pacing::default();
            if let Some((settling, ago)) = last {
                pacing.written("ns/g", settling, t0 - secs(ago));
            }
            assert_eq!(
                pacing.hold(&object, Some(&current), &desired, t0),
                wait,
                "{last:?} {desired}"
            );
        }
        // A first status follows the grace after creation instead.
        let pacing = Pacing::default();
        object.metadata.creation_timestamp = Some(Time((t0 - secs(4)).try_into().unwrap()));
        for first in [None, Some(Value::Null), Some(json!({}))] {
            assert_eq!(
                pacing.hold(&object, first.as_ref(), &current, t0),
                Some(FIRST_STATUS_GRACE - secs(4))
            );
        }
    }

    #[test]
    fn a_version_a_status_write_replaced_is_outdated_for_the_window() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ms = Duration::from_millis;
        // (version handed to the reconcile, after the write; outdated)
        let cases = [
            (Some("5"), ms(100), true),
            (Some("5"), SUPERSEDED_WINDOW - ms(1), true),
            (Some("5"), SUPERSEDED_WINDOW, false),
            // The cache has the write, or a later change: current.
            (Some("6"), ms(100), false),
            (None, ms(100), false),
        ];
        for (version, after, outdated) in cases {
            let superseded = Superseded::default();
            superseded.record("ns/g", Some("5".into()), t0);
            assert_eq!(
                superseded.holds("ns/g", version, t0 + after),
                outdated,
                "{version:?} {after:?}"
            );
            assert!(!superseded.holds("ns/other", Some("5"), t0 + after));
        }
        // Seen current once, the record is gone; expired records go with the next write.
        let superseded = Superseded::default();
        superseded.record("a", Some("5".into()), t0);
        superseded.record("b", Some("7".into()), t0);
        assert!(!superseded.holds("a", Some("6"), t0 + ms(10)));
        assert!(!superseded.holds("a", Some("5"), t0 + ms(20)));
        superseded.record("c", Some("9".into()), t0 + SUPERSEDED_WINDOW);
        let kept: Vec<String> = superseded
            .versions
            .lock()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(kept, ["c"]);
    }

    #[test]
    fn pacing_forgets_what_is_older_than_the_interval() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let pacing = Pacing::default();
        pacing.written("a", true, t0);
        pacing.written("b", true, t0 + Duration::from_secs(5));
        pacing.written("c", true, t0 + SETTLING_INTERVAL);
        let kept: std::collections::BTreeSet<String> =
            pacing.written.lock().unwrap().keys().cloned().collect();
        assert_eq!(kept, ["b", "c"].map(String::from).into());
        pacing.written("b", false, t0 + SETTLING_INTERVAL);
        assert_eq!(pacing.written.lock().unwrap().len(), 1);
    }
}
