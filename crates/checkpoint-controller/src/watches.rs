//! The watches of the checkpoint controller and what triggers work, as data the operator's
//! event→action map includes (same shape as its rows: the watched kind as `group/version/Kind`,
//! JSON pointers of the fields whose change triggers work, and how the watched object names the
//! DynamoCheckpoint to reconcile).
//!
//! As for every row of the operator: a watched object seen for the first time triggers work once,
//! its deletion always does, and otherwise only a change of one of the listed fields does. Our own
//! status writes, `resourceVersion` and `managedFields` never trigger work. One queue; no
//! periodic resync (a reconcile asks for a timed look again only while waiting for a deletion or
//! a name conflict to clear).

use crate::render::CHECKPOINT_NAME_LABEL;

/// How a watched object names the DynamoCheckpoint to reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueue {
    /// The object is the DynamoCheckpoint.
    Itself,
    /// Its controller owner reference of kind DynamoCheckpoint (same namespace).
    ControllerOwner,
    /// The value of this label names the DynamoCheckpoint (same namespace).
    Label(&'static str),
}

/// One watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watch {
    /// `group/version/Kind` (core kinds: `v1/Kind`).
    pub kind: &'static str,
    /// JSON pointers (RFC 6901) of the fields whose change triggers work.
    pub fields: &'static [&'static str],
    /// Which DynamoCheckpoint is reconciled.
    pub enqueue: Enqueue,
    /// Label selector the watch may use to see only relevant objects (`None`: all).
    pub selector: Option<&'static str>,
    /// Why these fields.
    pub note: &'static str,
}

/// The rebuild annotation as a JSON pointer segment (`/` escaped as `~1`).
const REBUILD_POINTER: &str = "/metadata/annotations/nvidia.com~1checkpoint-rebuild";

/// Every watch of the checkpoint controller.
pub const WATCHES: &[Watch] = &[
    Watch {
        kind: "nvidia.com/v1alpha1/DynamoCheckpoint",
        fields: &["/metadata/generation", REBUILD_POINTER],
        enqueue: Enqueue::Itself,
        selector: None,
        note: "spec changes (identity, Job template) and rebuild requests; never our own status writes",
    },
    Watch {
        kind: "batch/v1/Job",
        fields: &["/status/conditions", "/metadata/deletionTimestamp"],
        enqueue: Enqueue::ControllerOwner,
        selector: Some(CHECKPOINT_NAME_LABEL),
        note: "the capture Job's Complete/Failed conditions (the only Job status that changes the phase) and the start of its deletion; pod counts and start times are ignored",
    },
    Watch {
        kind: "v1/ConfigMap",
        fields: &["/metadata/annotations", "/metadata/labels", "/data"],
        enqueue: Enqueue::Label(CHECKPOINT_NAME_LABEL),
        selector: Some(CHECKPOINT_NAME_LABEL),
        note: "the artifact record: its deletion means the artifact is gone (recreate); an edit of its identifying fields is drift (restore)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::REBUILD_ANNOTATION;

    #[test]
    fn the_rebuild_pointer_names_the_annotation() {
        assert_eq!(
            REBUILD_POINTER,
            format!(
                "/metadata/annotations/{}",
                REBUILD_ANNOTATION.replace('/', "~1")
            )
        );
    }

    #[test]
    fn one_row_per_kind_and_the_primary_is_first() {
        assert_eq!(WATCHES[0].enqueue, Enqueue::Itself);
        let mut kinds: Vec<_> = WATCHES.iter().map(|w| w.kind).collect();
        kinds.dedup();
        assert_eq!(kinds.len(), WATCHES.len());
        for w in WATCHES {
            for f in w.fields {
                assert!(f.starts_with('/'), "{f}");
            }
        }
    }
}
