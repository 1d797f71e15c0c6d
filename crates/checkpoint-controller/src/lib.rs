//! DynamoCheckpoint controller: the create-or-reuse state machine for checkpoint Jobs.
//!
//! A DynamoCheckpoint produces an artifact (a container checkpoint of a worker) by running a
//! capture Job. This crate decides, per reconcile and as a pure function ([`decide()`]), whether
//! to create a Job, replace it, wait, record the result, or reuse what exists; executes that one
//! action; and returns the complete status. The state machine (phases, steps, transitions) is
//! [`decide::TRANSITIONS`], documented in `docs/checkpoint-state-machine.md`.
//!
//! # Identity and attempts
//! - The **identity** is [`api::checkpoint_identity::identity_hash`] of `spec.identity`
//!   (upstream's hash). The Job and the artifact record are named after it, so a new identity
//!   gets new objects and the old identity's are left alone.
//! - An **attempt** is one capture Job: `checkpoint-job-<hash>-<n>`. A rebuild, a retry after a
//!   spec change, or a lost artifact starts attempt `n+1`; the checkpoint keeps its name. The
//!   attempt's inputs (number, generation, honoured rebuild token) are annotations on its Job and
//!   are mirrored in status (`attempt`, `observedRebuildToken`, the `JobCreated` condition's
//!   `observedGeneration`), so every decision can be made again from persisted state alone.
//!
//! # The artifact
//! The capture writes the checkpoint to storage the API cannot look into (a PVC). Its presence is
//! modelled by an **artifact record**: the ConfigMap `checkpoint-artifact-<hash>`, owned by the
//! checkpoint, written by this controller when the attempt's Job completes, carrying the attempt
//! number and the location. Whatever removes the artifact removes the record; a ready checkpoint
//! whose record is gone is captured again.
//!
//! # Rebuilds
//! The annotation [`REBUILD_ANNOTATION`] (`nvidia.com/checkpoint-rebuild`) holds an opaque
//! token. A token no attempt honoured yet requests exactly one rebuild; the honoured token is
//! recorded on the new Job and in `status.observedRebuildToken`, durably.
//!
//! # Wiring
//! [`CheckpointReconciler::new`] takes a `Reader` and a `Writer`; its
//! [`CheckpointReconciler::reconcile`] returns a [`kit::Reconciled`] for `kit::run::Runner`,
//! which persists the status and then publishes the events. [`WATCHES`] lists the watches and
//! what triggers work, for the operator's event→action map.

pub mod decide;
pub mod error;
pub mod reconcile;
pub mod render;
pub mod watches;

pub use decide::{Action, Observed, decide};
pub use error::Error;
pub use reconcile::{CheckpointReconciler, FIELD_MANAGER};
pub use render::REBUILD_ANNOTATION;
pub use watches::{Enqueue, WATCHES, Watch};

#[cfg(test)]
mod tests;
