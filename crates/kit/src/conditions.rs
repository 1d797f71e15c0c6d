//! Status conditions with apimachinery semantics.
//!
//! - [`set`] keeps `lastTransitionTime` unless `status` changes, like `meta.SetStatusCondition`;
//!   reason, message and `observedGeneration` are always updated.
//! - [`changed`] lists the status transitions between two condition sets, for status-transition
//!   events that the top level emits after the status write succeeded.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{Timestamp, TimestampRound, Unit};

/// The `Ready` condition type.
pub const READY: &str = "Ready";

/// The status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// `"True"`
    True,
    /// `"False"`
    False,
    /// `"Unknown"`
    Unknown,
}

impl Status {
    /// The wire form: `"True"`, `"False"` or `"Unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(value: bool) -> Self {
        if value { Status::True } else { Status::False }
    }
}

/// The current time at the precision the API server stores (`Time` is second-precision on the
/// wire), so a condition compares equal to its own round trip.
pub fn now() -> Time {
    let now = Timestamp::now();
    Time(
        now.round(
            TimestampRound::new()
                .smallest(Unit::Second)
                .mode(k8s_openapi::jiff::RoundMode::Trunc),
        )
        .unwrap_or(now),
    )
}

/// A condition observed at `generation`, transitioning now.
pub fn new(
    type_: &str,
    status: impl Into<Status>,
    reason: &str,
    message: impl Into<String>,
    generation: i64,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.into().as_str().to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time: now(),
    }
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present with `status`.
pub fn is(conditions: &[Condition], type_: &str, status: Status) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == status.as_str())
}

/// Whether the condition of `type_` is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    is(conditions, type_, Status::True)
}

/// Equal in everything but `lastTransitionTime`.
pub fn same(a: &Condition, b: &Condition) -> bool {
    a.type_ == b.type_
        && a.status == b.status
        && a.reason == b.reason
        && a.message == b.message
        && a.observed_generation == b.observed_generation
}

/// Insert or update `condition` by type. Keeps the existing `lastTransitionTime` when the status
/// does not change; takes the new one when it does (or when the condition is new). Returns whether
/// anything other than the time changed.
pub fn set(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        None => {
            conditions.push(condition);
            true
        }
        Some(existing) => {
            if same(existing, &condition) {
                return false;
            }
            let time = if existing.status == condition.status {
                existing.last_transition_time.clone()
            } else {
                condition.last_transition_time.clone()
            };
            *existing = Condition {
                last_transition_time: time,
                ..condition
            };
            true
        }
    }
}

/// Remove the condition of `type_`; returns whether it was present.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// A change of a condition's status between two condition sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The condition type.
    pub type_: String,
    /// The previous status (`None`: the condition was absent).
    pub from: Option<String>,
    /// The new status (`None`: the condition was removed).
    pub to: Option<String>,
    /// The new reason (empty if removed).
    pub reason: String,
    /// The new message (empty if removed).
    pub message: String,
}

/// The status transitions from `previous` to `next`, in the order of `next` (removals last).
/// Reason or message changes without a status change are not transitions.
pub fn changed(previous: &[Condition], next: &[Condition]) -> Vec<Transition> {
    let mut transitions: Vec<Transition> = next
        .iter()
        .filter_map(|n| {
            let from = find(previous, &n.type_).map(|p| p.status.clone());
            (from.as_deref() != Some(n.status.as_str())).then(|| Transition {
                type_: n.type_.clone(),
                from,
                to: Some(n.status.clone()),
                reason: n.reason.clone(),
                message: n.message.clone(),
            })
        })
        .collect();
    transitions.extend(
        previous
            .iter()
            .filter(|p| find(next, &p.type_).is_none())
            .map(|p| Transition {
                type_: p.type_.clone(),
                from: Some(p.status.clone()),
                to: None,
                reason: String::new(),
                message: String::new(),
            }),
    );
    transitions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn cond(type_: &str, status: Status, reason: &str, generation: i64, time: i64) -> Condition {
        Condition {
            last_transition_time: at(time),
            ..new(type_, status, reason, "", generation)
        }
    }

    #[test]
    fn set_inserts_new_condition() {
        let mut cs = vec![];
        assert!(set(&mut cs, cond(READY, Status::True, "Ok", 1, 10)));
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].last_transition_time, at(10));
    }

    #[test]
    fn set_keeps_time_when_status_unchanged() {
        let mut cs = vec![cond(READY, Status::False, "Waiting", 1, 10)];
        assert!(set(
            &mut cs,
            cond(READY, Status::False, "StillWaiting", 2, 20)
        ));
        assert_eq!(cs[0].last_transition_time, at(10));
        assert_eq!(cs[0].reason, "StillWaiting");
        assert_eq!(cs[0].observed_generation, Some(2));
    }

    #[test]
    fn set_takes_new_time_when_status_changes() {
        let mut cs = vec![cond(READY, Status::False, "Waiting", 1, 10)];
        assert!(set(&mut cs, cond(READY, Status::True, "Ok", 1, 20)));
        assert_eq!(cs[0].last_transition_time, at(20));
        assert_eq!(cs[0].status, "True");
    }

    #[test]
    fn set_identical_is_not_a_change() {
        let mut cs = vec![cond(READY, Status::True, "Ok", 1, 10)];
        assert!(!set(&mut cs, cond(READY, Status::True, "Ok", 1, 99)));
        assert_eq!(cs[0].last_transition_time, at(10));
    }

    #[test]
    fn set_keeps_other_conditions_and_order() {
        let mut cs = vec![
            cond("A", Status::True, "Ok", 1, 1),
            cond("B", Status::True, "Ok", 1, 1),
        ];
        set(&mut cs, cond("A", Status::False, "No", 1, 2));
        assert_eq!(
            cs.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["A", "B"]
        );
    }

    #[test]
    fn find_and_is_true() {
        let cs = vec![cond(READY, Status::True, "Ok", 1, 1)];
        assert!(find(&cs, READY).is_some());
        assert!(find(&cs, "Other").is_none());
        assert!(is_true(&cs, READY));
        assert!(!is(&cs, READY, Status::False));
        assert!(!is_true(&cs, "Other"));
    }

    #[test]
    fn remove_reports_presence() {
        let mut cs = vec![cond(READY, Status::True, "Ok", 1, 1)];
        assert!(remove(&mut cs, READY));
        assert!(!remove(&mut cs, READY));
    }

    #[test]
    fn changed_reports_status_transitions_only() {
        let prev = vec![
            cond(READY, Status::False, "Waiting", 1, 1),
            cond("Stable", Status::True, "Ok", 1, 1),
            cond("Gone", Status::True, "Ok", 1, 1),
        ];
        let next = vec![
            cond(READY, Status::True, "Ok", 2, 2),
            cond("Stable", Status::True, "OtherReason", 2, 2),
            cond("New", Status::Unknown, "Starting", 2, 2),
        ];
        let t = changed(&prev, &next);
        assert_eq!(t.len(), 3);
        assert_eq!(
            (
                t[0].type_.as_str(),
                t[0].from.as_deref(),
                t[0].to.as_deref()
            ),
            (READY, Some("False"), Some("True"))
        );
        assert_eq!((t[1].type_.as_str(), t[1].from.as_deref()), ("New", None));
        assert_eq!((t[2].type_.as_str(), t[2].to.as_deref()), ("Gone", None));
        assert!(changed(&next, &next).is_empty());
    }

    #[test]
    fn now_round_trips_through_json() {
        let t = now();
        let back: Time = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
        assert_eq!(t, back);
    }
}
