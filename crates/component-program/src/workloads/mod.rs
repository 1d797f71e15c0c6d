//! The component pathway's workloads: one DynamoComponentDeployment (DCD) per component.
//!
//! [`render`] builds the desired DCDs (pure); [`Workloads::reconcile`] converges them and
//! removes the ones no longer wanted.
//!
//! # What a DCD carries
//! - **Name** `<dgd>-<component, lowercased>`, plus `-<worker hash>` for worker components.
//! - **Labels**: the component pod template's labels, then graph name, component, component
//!   type, Dynamo namespace, and on workers the worker hash and, in a graph with an EPP
//!   component, `nvidia.com/dynamo-component-class: worker` (as upstream's DCD generation).
//! - **Spec**: the component spec with `backendFramework` from the graph, and on the pod
//!   template, as upstream: the graph's `env` prepended to the `main` container's env (component
//!   entries with the same name win; the `dynamoSidecar` init container's too), the graph's `annotations`/`labels` and its propagated
//!   metadata annotations (`nvidia.com/enable-metrics`, discovery settings, ...) added where the
//!   pod template does not set them, the worker hash label (and the worker component class in a
//!   graph with an EPP component) on workers, the planner service
//!   account on planners, and `nvidia.com/restartAt` when a restart asks for it (otherwise the
//!   live DCD's value is kept, so restarts are never undone).
//! - **Replicas**: the component's, except for components with a scaling adapter: then
//!   `spec.replicas` is left out of what this step applies, so the adapter's side owns it; and
//!   0 while a `WaitForCheckpoint` component's checkpoint is not Ready. During a rolling update
//!   a worker component's new generation gets the count the rollout steps it to
//!   ([`WorkerGeneration::replicas`](reconcilers::rollout::WorkerGeneration::replicas)), with or
//!   without an adapter.
//! - **Checkpoint** (`experimental.checkpoint.enabled`): once the component's DynamoCheckpoint
//!   exists, the DCD names it (`checkpointRef`, `startupPolicy`; no `identity`, no `job`), so the
//!   DCD controller restores from exactly that one; an `Immediate` component's pod template
//!   carries the restore-candidate annotations (`pod_render::restore::metadata`).
//! - A controller owner reference to the graph (garbage collection deletes DCDs with it).
//!
//! # Writing only what changed
//! Each desired DCD is stamped with `nvidia.com/last-applied-hash`, a digest of the body this
//! step applies. A DCD is applied (server-side, field manager [`FIELD_MANAGER`], forced) only
//! when the live one carries a different digest or no longer holds a field we set (user drift);
//! the exact rule is `kit::child`'s. A converged graph therefore issues no write, however often
//! DCD status changes, and a field removed from the spec is removed from the DCD (server-side
//! apply drops fields the manager stops applying).
//!
//! # Removing DCDs
//! DCDs the graph controls (label `nvidia.com/dynamo-graph-deployment-name`, controller uid)
//! that are not desired are deleted with a uid precondition, except worker DCDs of a generation
//! the rollout retains (the old generations it steps down during a rolling update; their
//! replicas are the rollout's to write). DCDs controlled by
//! another object are never touched; one in the way of a desired name is an ownership conflict.

mod checkpoint;
mod pod_template;
mod reconcile;
mod render;

use std::collections::BTreeMap;

use api::v1beta1::ComponentReplicaStatus;
use kit::child::Applier;

pub use pod_template::merge_env;
pub use reconcile::Workloads;
pub use render::render;

/// Annotation: digest of the DCD body last applied.
pub use api::labels::LAST_APPLIED_HASH;
/// Field manager of the DCDs this step applies: the graph's.
pub use reconcilers::child::FIELD_MANAGER;
/// Failure reason of the workloads step (upstream's default failure reason).
pub use reconcilers::error::REASON_FAILED_TO_RECONCILE_RESOURCES as REASON_WORKLOADS_FAILED;
/// Event: a DCD was created.
pub const EVENT_DCD_CREATED: &str = "DynamoComponentDeploymentCreated";
/// Event: a DCD was changed back to its desired state.
pub const EVENT_DCD_UPDATED: &str = "DynamoComponentDeploymentUpdated";
/// Event: a DCD no longer wanted was deleted.
pub const EVENT_DCD_DELETED: &str = "DynamoComponentDeploymentDeleted";

/// How DCDs are converged: applied under [`FIELD_MANAGER`], stamped with [`LAST_APPLIED_HASH`].
const CHILDREN: Applier = Applier::succeeding(
    FIELD_MANAGER,
    LAST_APPLIED_HASH,
    reconcilers::child::UPSTREAM,
);

/// Graph metadata annotations copied onto every pod template that does not set them.
pub use api::labels::PROPAGATED_ANNOTATIONS;

/// Why the workloads step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing the graph's DCDs failed.
    #[error("list DynamoComponentDeployments: {0}")]
    List(#[source] kit::Error),
    /// Applying a DCD failed.
    #[error("apply DynamoComponentDeployment {name}: {source}")]
    Apply {
        /// The DCD.
        name: String,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// Deleting a DCD failed.
    #[error("delete DynamoComponentDeployment {name}: {source}")]
    Delete {
        /// The DCD.
        name: String,
        /// The write error.
        #[source]
        source: kit::Error,
    },
    /// A DCD with a desired name is controlled by another object.
    #[error("DynamoComponentDeployment {name} {owner}; refusing to modify it")]
    OwnershipConflict {
        /// The DCD.
        name: String,
        /// Who controls it, as a phrase.
        owner: String,
    },
    /// A DCD could not be converted to or from its JSON form.
    #[error("convert DynamoComponentDeployment {name}: {source}")]
    Convert {
        /// The DCD.
        name: String,
        /// The conversion error.
        #[source]
        source: kit::Error,
    },
    /// The graph has no uid (it was never stored).
    #[error("DynamoGraphDeployment {0} has no uid")]
    NoUid(String),
}

/// Readiness of one desired DCD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// The DCD name.
    pub resource: String,
    /// The component it deploys.
    pub component: String,
    /// `None` when ready, else why not (`DynamoComponentDeployment::is_ready`).
    pub not_ready: Option<String>,
}

/// What the workloads step observed after converging.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Per-component replica status (from each DCD's `status.component`; during a rolling
    /// update the retained generation's backing names are added to `componentNames`).
    pub components: BTreeMap<String, ComponentReplicaStatus>,
    /// Readiness of every desired DCD, sorted by DCD name.
    pub readiness: Vec<Readiness>,
}

#[cfg(test)]
mod tests;
