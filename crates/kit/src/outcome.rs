//! What one reconcile attempt returns: [`Outcome`] on success, [`Failed`] on error.

use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{self, READY, Status};

pub use kube::runtime::events::EventType;

/// The action reported on events that do not name one.
pub const DEFAULT_ACTION: &str = "Reconcile";

/// The longest note an event carries, in bytes (the apiserver refuses notes over 1 KiB); a
/// longer one is cut at a character boundary.
pub const NOTE_LIMIT: usize = 1000;

/// A Kubernetes Event queued by a reconciler, published by the top level after the status write.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// Short PascalCase reason, at most 128 characters.
    pub reason: String,
    /// What was done, PascalCase (events.k8s.io `action`); [`DEFAULT_ACTION`] unless set.
    pub action: String,
    /// Human-readable message, at most 1 kB.
    pub note: Option<String>,
    /// Another object the event is about (events.k8s.io `related`).
    pub secondary: Option<ObjectReference>,
    /// The child write this event reports, when it reports one: what [`summarize`] folds.
    pub mutation: Option<Mutation>,
}

/// The child write a mutation event (`DeploymentCreated`, ...) reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutation {
    /// `Created`, `Updated` or `Deleted`.
    pub verb: String,
    /// The child's kind.
    pub kind: String,
    /// The child's name (it lives in the regarding object's namespace).
    pub name: String,
}

impl Event {
    /// A `Normal` event.
    pub fn normal(reason: &str, note: impl Into<String>) -> Self {
        Self::new(EventType::Normal, reason, note)
    }

    /// A `Warning` event.
    pub fn warning(reason: &str, note: impl Into<String>) -> Self {
        Self::new(EventType::Warning, reason, note)
    }

    /// An event of `type_`; `note` is cut to [`NOTE_LIMIT`] bytes.
    pub fn new(type_: EventType, reason: &str, note: impl Into<String>) -> Self {
        let mut note = note.into();
        if note.len() > NOTE_LIMIT {
            let mut end = NOTE_LIMIT;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
        }
        Event {
            type_,
            reason: reason.to_string(),
            action: DEFAULT_ACTION.to_string(),
            note: Some(note),
            secondary: None,
            mutation: None,
        }
    }

    /// Set the action.
    pub fn action(mut self, action: &str) -> Self {
        self.action = action.to_string();
        self
    }

    /// Set the related object.
    pub fn secondary(mut self, related: ObjectReference) -> Self {
        self.secondary = Some(related);
        self
    }

    /// Mark the event as reporting the write of a child (`verb` `kind` `name`), so that the
    /// writes of one reconcile can be announced together ([`summarize`]).
    pub fn mutation(mut self, verb: &str, kind: &str, name: &str) -> Self {
        self.mutation = Some(Mutation {
            verb: verb.to_string(),
            kind: kind.to_string(),
            name: name.to_string(),
        });
        self
    }
}

/// The events of one reconcile as they are published: the `Normal` mutation events of one verb
/// (two or more children created, say) become one `Resources<Verb>` event at the place of the
/// first, whose note names every child, grouped by kind in the order they were written
/// (`Created DynamoComponentDeployment a, b; ServiceAccount c`); a lone mutation event and every
/// other event stay as they are. A note over [`NOTE_LIMIT`] ends with how many names it left out.
pub fn summarize(events: Vec<Event>) -> Vec<Event> {
    let mut groups: Vec<(String, Vec<Mutation>)> = Vec::new();
    for m in events
        .iter()
        .filter(|e| matches!(e.type_, EventType::Normal))
        .filter_map(|e| e.mutation.clone())
    {
        match groups.iter_mut().find(|(verb, _)| *verb == m.verb) {
            Some((_, all)) => all.push(m),
            None => groups.push((m.verb.clone(), vec![m])),
        }
    }
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        let group = match (&event.mutation, event.type_) {
            (Some(m), EventType::Normal) => groups.iter_mut().find(|(verb, _)| *verb == m.verb),
            _ => None,
        };
        match group {
            // The first of several: the summary takes its place; the rest were folded into it.
            Some((verb, all)) if all.len() > 1 => out.push(summary(verb, &std::mem::take(all))),
            Some((_, all)) if all.is_empty() => {}
            // A lone mutation, or any other event.
            _ => out.push(event),
        }
    }
    out
}

/// One event naming every child of `all` (mutations of `verb`).
fn summary(verb: &str, all: &[Mutation]) -> Event {
    let mut kinds: Vec<(&str, Vec<&str>)> = Vec::new();
    for m in all {
        match kinds.iter_mut().find(|(k, _)| *k == m.kind) {
            Some((_, names)) => names.push(&m.name),
            None => kinds.push((&m.kind, vec![&m.name])),
        }
    }
    let mut note = verb.to_string();
    let mut left = all.len();
    for (i, (kind, names)) in kinds.iter().enumerate() {
        let sep = if i == 0 { " " } else { "; " };
        let mut part = format!("{sep}{kind} ");
        for (j, name) in names.iter().enumerate() {
            let item = if j == 0 {
                name.to_string()
            } else {
                format!(", {name}")
            };
            // Room for the count of what is left out.
            if note.len() + part.len() + item.len() + 24 > NOTE_LIMIT {
                if j > 0 {
                    note.push_str(&part);
                }
                note.push_str(&format!(" ({left} more)"));
                return Event::normal(&format!("Resources{verb}"), note);
            }
            part.push_str(&item);
            left -= 1;
        }
        note.push_str(&part);
    }
    Event::normal(&format!("Resources{verb}"), note)
}

/// A status type that `Outcome::fail` can mark as failed.
pub trait ReconcileStatus {
    /// The status conditions; `fail` sets `Ready=False` here.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;

    /// Record the failure in the type's own fields (for example `state = "failed"` and
    /// `observedGeneration`). The `Ready` condition is set by `fail`, not here.
    fn set_failed(&mut self, generation: i64, reason: &str, message: &str);
}

/// The complete desired status after one reconcile attempt, the events to publish once that
/// status is persisted, and when to look again.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome<S> {
    /// The complete desired status, including conditions and `observedGeneration`.
    pub status: S,
    /// Status-transition events, published only after the status write succeeded.
    pub events: Vec<Event>,
    /// Reconcile again after this long; `None` waits for the next watch event.
    pub requeue: Option<Duration>,
    /// The status only says that children are still converging (no failure, nothing the user
    /// must act on): the run loop may hold back a new object's first status for
    /// [`crate::run::FIRST_STATUS_GRACE`], so that an object whose children converge promptly
    /// writes its status once.
    pub settling: bool,
}

impl<S> Outcome<S> {
    /// An outcome with `status`, no events, no requeue.
    pub fn new(status: S) -> Self {
        Outcome {
            status,
            events: Vec::new(),
            requeue: None,
            settling: false,
        }
    }

    /// Mark the status as only saying that children are still converging ([`Outcome::settling`]).
    pub fn settling(&mut self) {
        self.settling = true;
    }

    /// Queue `event`.
    pub fn event(&mut self, event: Event) {
        self.events.push(event);
    }

    /// Queue an event whose note is formatted: `out.eventf(EventType::Normal, "Scaled",
    /// format_args!("scaled to {n}"))`.
    pub fn eventf(&mut self, type_: EventType, reason: &str, note: fmt::Arguments<'_>) {
        self.events
            .push(Event::new(type_, reason, note.to_string()));
    }

    /// Queue a `Normal` event.
    pub fn normal(&mut self, reason: &str, note: impl Into<String>) {
        self.events.push(Event::normal(reason, note));
    }

    /// Queue a `Warning` event.
    pub fn warning(&mut self, reason: &str, note: impl Into<String>) {
        self.events.push(Event::warning(reason, note));
    }

    /// Reconcile again after `after` at the latest (the earliest of all requests wins).
    pub fn requeue_after(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    /// Take a nested reconciler's [`Step`]: queue its events (also those of a failed step,
    /// whose writes before the failure did happen), keep the earlier requeue request, and return
    /// its result for the caller to fold into its own status.
    pub fn take<T, E>(&mut self, step: Step<T, E>) -> Result<T, E> {
        self.events.extend(step.events);
        if let Some(after) = step.requeue {
            self.requeue_after(after);
        }
        step.result
    }
}

/// What a nested reconciler returns to its program: its own result (the status fragment it owns,
/// or what a later step needs), the events of the writes it made (also when it failed after some
/// of them succeeded), and when it wants to look again. It never sees the whole status; the
/// program folds the result in with [`Outcome::take`].
#[must_use]
#[derive(Debug)]
pub struct Step<T, E> {
    /// The step's result.
    pub result: Result<T, E>,
    /// Events of what the step did, published after the program's status write.
    pub events: Vec<Event>,
    /// Reconcile again after this long at the latest; `None`: no request.
    pub requeue: Option<Duration>,
}

impl<T, E> Step<T, E> {
    /// A step that ended with `result` after queuing `events`.
    pub fn new(result: Result<T, E>, events: Vec<Event>) -> Self {
        Step {
            result,
            events,
            requeue: None,
        }
    }

    /// A step that succeeded with `value` and queued nothing.
    pub fn ok(value: T) -> Self {
        Self::new(Ok(value), Vec::new())
    }

    /// Ask to reconcile again after `after` at the latest (`None`: no request).
    pub fn requeue(mut self, after: Option<Duration>) -> Self {
        self.requeue = after;
        self
    }

    /// Convert the error, keeping the events and the requeue request.
    pub fn map_err<F>(self, f: impl FnOnce(E) -> F) -> Step<T, F> {
        Step {
            result: self.result.map_err(f),
            events: self.events,
            requeue: self.requeue,
        }
    }

    /// Move the events into the caller's queue and return the result: for a composite step
    /// (such as the shared resources) collecting its sub-steps, which never ask for a requeue
    /// (debug builds check it).
    pub fn events_into(self, events: &mut Vec<Event>) -> Result<T, E> {
        debug_assert!(
            self.requeue.is_none(),
            "events_into drops a requeue request"
        );
        events.extend(self.events);
        self.result
    }

    /// Convert the value, keeping the events and the requeue request.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Step<U, E> {
        Step {
            result: self.result.map(f),
            events: self.events,
            requeue: self.requeue,
        }
    }
}

impl<S: ReconcileStatus> Outcome<S> {
    /// Mark the status failed at `generation` with `reason` and the error's message: the type's
    /// own failed state, `Ready=False` with that reason and message, and a `Warning` event with
    /// the same reason. The status keeps everything already completed in this attempt ("partial
    /// status on error"): the top level persists it, then reports the error for backoff.
    pub fn fail<E: fmt::Display>(
        mut self,
        generation: i64,
        reason: &str,
        error: E,
    ) -> Failed<S, E> {
        let message = error.to_string();
        self.status.set_failed(generation, reason, &message);
        conditions::set(
            self.status.conditions_mut(),
            conditions::new(READY, Status::False, reason, message.clone(), generation),
        );
        self.events.push(Event::warning(reason, message));
        Failed {
            outcome: self,
            error,
            retry: Retry::Backoff,
        }
    }
}

/// When to retry after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Retry with per-object exponential backoff.
    Backoff,
    /// Do not retry until the object changes (for example an invalid spec).
    AwaitChange,
}

/// A failed attempt: the partial outcome to persist, the error, and when to retry.
#[derive(Debug)]
pub struct Failed<S, E> {
    /// The status completed so far (already marked failed by [`Outcome::fail`]) and its events.
    pub outcome: Outcome<S>,
    /// What went wrong.
    pub error: E,
    /// When to retry.
    pub retry: Retry,
}

impl<S, E> Failed<S, E> {
    /// Do not retry until the object changes.
    pub fn await_change(mut self) -> Self {
        self.retry = Retry::AwaitChange;
        self
    }

    /// Convert the error, keeping the outcome.
    pub fn map_err<F>(self, f: impl FnOnce(E) -> F) -> Failed<S, F> {
        Failed {
            outcome: self.outcome,
            error: f(self.error),
            retry: self.retry,
        }
    }
}

/// What a reconcile function returns. The failure is boxed so the `Result` stays small; `?` on a
/// `Result<T, Failed<S, E>>` (from [`OrFail::or_fail`]) boxes it, and `Err(failed.into())` does
/// by hand.
pub type Reconciled<S, E> = Result<Outcome<S>, Box<Failed<S, E>>>;

/// `?`-friendly failure: `step().await.or_fail(&mut out, generation, "StepFailed")?`.
pub trait OrFail<T, E> {
    /// On `Err`, take the outcome out of `out` (leaving a default) and [`Outcome::fail`] it.
    fn or_fail<S: ReconcileStatus + Default>(
        self,
        out: &mut Outcome<S>,
        generation: i64,
        reason: &str,
    ) -> Result<T, Failed<S, E>>;
}

impl<T, E: fmt::Display> OrFail<T, E> for Result<T, E> {
    fn or_fail<S: ReconcileStatus + Default>(
        self,
        out: &mut Outcome<S>,
        generation: i64,
        reason: &str,
    ) -> Result<T, Failed<S, E>> {
        self.map_err(|error| std::mem::take(out).fail(generation, reason, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, Default, PartialEq)]
    struct St {
        state: String,
        observed: i64,
        conditions: Vec<Condition>,
        done: Vec<&'static str>,
    }

    impl ReconcileStatus for St {
        fn conditions_mut(&mut self) -> &mut Vec<Condition> {
            &mut self.conditions
        }
        fn set_failed(&mut self, generation: i64, _reason: &str, _message: &str) {
            self.state = "failed".into();
            self.observed = generation;
        }
    }

    #[test]
    fn event_notes_are_cut_at_the_limit_on_a_character_boundary() {
        let short = Event::warning("R", "fine");
        assert_eq!(short.note.as_deref(), Some("fine"));
        let long = Event::warning("R", "é".repeat(NOTE_LIMIT));
        let note = long.note.unwrap();
        assert!(note.len() <= NOTE_LIMIT && note.len() > NOTE_LIMIT - 2);
        assert!(note.chars().all(|c| c == 'é'));
    }

    #[test]
    fn fail_sets_state_ready_and_warning_keeping_partial_status() {
        let mut out = Outcome::new(St::default());
        out.status.done.push("rbac");
        out.normal("Created", "created rbac");
        let failed = out.fail(3, "PvcFailed", "disk full");
        let st = &failed.outcome.status;
        assert_eq!(st.state, "failed");
        assert_eq!(st.observed, 3);
        assert_eq!(st.done, ["rbac"]);
        let ready = conditions::find(&st.conditions, READY).unwrap();
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                ready.message.as_str()
            ),
            ("False", "PvcFailed", "disk full")
        );
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(failed.outcome.events.len(), 2);
        assert_eq!(failed.outcome.events[1].type_, EventType::Warning);
        assert_eq!(failed.retry, Retry::Backoff);
        assert_eq!(failed.await_change().retry, Retry::AwaitChange);
    }

    #[test]
    fn or_fail_takes_the_outcome() {
        fn step(fail: bool) -> Result<u8, String> {
            if fail { Err("boom".into()) } else { Ok(7) }
        }
        let mut out = Outcome::new(St::default());
        out.status.done.push("a");
        assert_eq!(step(false).or_fail(&mut out, 1, "StepFailed").unwrap(), 7);
        let failed = step(true).or_fail(&mut out, 1, "StepFailed").unwrap_err();
        assert_eq!(failed.outcome.status.done, ["a"]);
        assert_eq!(failed.error, "boom");
    }

    #[test]
    fn requeue_takes_the_earliest_and_take_merges() {
        let mut out = Outcome::new(());
        out.requeue_after(Duration::from_secs(30));
        out.eventf(EventType::Normal, "Scaled", format_args!("to {}", 3));
        let nested: Step<u8, String> =
            Step::new(Ok(5), vec![Event::normal("Created", "created a")])
                .requeue(Some(Duration::from_secs(10)));
        assert_eq!(out.take(nested), Ok(5));
        assert_eq!(out.requeue, Some(Duration::from_secs(10)));
        assert_eq!(out.events[0].note.as_deref(), Some("to 3"));
        assert_eq!(out.events[1].reason, "Created");
        out.requeue_after(Duration::from_secs(60));
        assert_eq!(out.requeue, Some(Duration::from_secs(10)));
    }

    #[test]
    fn a_failed_step_still_hands_over_its_events() {
        let mut out = Outcome::new(St::default());
        let failed: Step<(), &str> =
            Step::new(Err("boom"), vec![Event::normal("RoleCreated", "created")]);
        assert_eq!(out.take(failed.map(|()| 1u8).map_err(|e| e.len())), Err(4));
        assert_eq!(out.events.len(), 1);
        assert_eq!(out.requeue, None);
        assert_eq!(out.take(Step::<u8, ()>::ok(2)), Ok(2));
        assert_eq!(out.events.len(), 1);
    }

    fn created(kind: &str, name: &str) -> Event {
        Event::normal(
            &format!("{kind}Created"),
            format!("Created {kind} ns/{name}"),
        )
        .mutation("Created", kind, name)
    }

    fn reasons_and_notes(events: &[Event]) -> Vec<(String, String)> {
        events
            .iter()
            .map(|e| (e.reason.clone(), e.note.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn summarize_folds_the_child_writes_of_one_verb() {
        let ready = Event::normal("all_resources_are_ready", "All resources are ready");
        let updated =
            Event::normal("RoleUpdated", "Updated Role ns/r").mutation("Updated", "Role", "r");
        let warning =
            Event::warning("DeploymentSyncFailed", "boom").mutation("Created", "Deployment", "x");
        // (events in, events out) as (reason, note)
        type Case = (Vec<Event>, Vec<(&'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            (vec![], vec![]),
            // A lone mutation keeps its own reason.
            (
                vec![created("Deployment", "a")],
                vec![("DeploymentCreated", "Created Deployment ns/a")],
            ),
            (
                vec![
                    created("DynamoComponentDeployment", "g-frontend"),
                    created("DynamoComponentDeployment", "g-decode"),
                    ready.clone(),
                    created("ServiceAccount", "g-k8s-service-discovery"),
                    updated.clone(),
                    created("Role", "g-k8s-service-discovery"),
                ],
                vec![
                    (
                        "ResourcesCreated",
                        "Created DynamoComponentDeployment g-frontend, g-decode; \
                         ServiceAccount g-k8s-service-discovery; Role g-k8s-service-discovery",
                    ),
                    ("all_resources_are_ready", "All resources are ready"),
                    ("RoleUpdated", "Updated Role ns/r"),
                ],
            ),
            // Warnings are never folded.
            (
                vec![
                    warning.clone(),
                    created("Service", "s"),
                    created("Deployment", "d"),
                ],
                vec![
                    ("DeploymentSyncFailed", "boom"),
                    ("ResourcesCreated", "Created Service s; Deployment d"),
                ],
            ),
        ];
        for (input, expected) in cases {
            let got = reasons_and_notes(&summarize(input.clone()));
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|(r, n)| (r.to_string(), n.to_string()))
                .collect();
            assert_eq!(got, expected, "{input:?}");
        }
    }

    #[test]
    fn a_long_summary_says_how_many_names_it_left_out() {
        let many: Vec<Event> = (0..200)
            .map(|i| created("Service", &format!("service-number-{i:03}")))
            .collect();
        let out = summarize(many);
        assert_eq!(out.len(), 1);
        let note = out[0].note.clone().unwrap();
        assert!(note.len() <= NOTE_LIMIT, "{}", note.len());
        assert!(note.starts_with("Created Service service-number-000, "));
        let shown = note.matches("service-number-").count();
        assert!(
            note.ends_with(&format!(" ({} more)", 200 - shown)),
            "{note}"
        );
    }
}
