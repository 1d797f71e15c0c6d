//! The error of the shared reconcilers.

use std::fmt;

/// Why a shared reconciler could not converge.
///
/// The class decides the retry: [`Error::awaits_change`] errors (a spec or operator configuration
/// that cannot work) wait for the object to change, everything else is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read or write failed.
    #[error("{action}: {source}")]
    Api {
        /// What was attempted, e.g. `apply ServiceAccount ns/name`.
        action: String,
        /// The capability's error.
        #[source]
        source: kit::Error,
    },
    /// The spec asks for something that cannot be done as written.
    #[error("{0}")]
    InvalidSpec(String),
    /// The operator configuration lacks a setting this graph needs.
    #[error("{0}")]
    Config(String),
    /// Something the graph depends on does not exist (yet).
    #[error("{0}")]
    Missing(String),
    /// An API the graph needs is not served by this cluster.
    #[error("{0}")]
    Unavailable(String),
    /// A child exists but another object (or nobody) is its controller.
    #[error("{kind} {key} {owner}; refusing to modify it")]
    OwnershipConflict {
        /// Kind of the child.
        kind: String,
        /// `namespace/name` of the child.
        key: String,
        /// Who controls it, as a phrase (`is controlled by DynamoGraphDeployment other`).
        owner: String,
    },
    /// A shared step failed; the message says which, as upstream's messages do.
    #[error("{step}: {source}")]
    Step {
        /// The step.
        step: Step,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// An [`Error::Api`] for `action`.
    pub(crate) fn api(action: impl Into<String>) -> impl FnOnce(kit::Error) -> Error {
        let action = action.into();
        move |source| Error::Api { action, source }
    }

    /// Retrying cannot help until the object (or the operator configuration) changes.
    pub fn awaits_change(&self) -> bool {
        match self {
            Error::InvalidSpec(_) | Error::Config(_) => true,
            Error::Api { source, .. } => source.is_invalid(),
            Error::Step { source, .. } => source.awaits_change(),
            _ => false,
        }
    }

    /// A child is controlled by another object: the caller may set `OwnershipConflict`.
    pub fn is_ownership_conflict(&self) -> bool {
        match self {
            Error::OwnershipConflict { .. } => true,
            Error::Step { source, .. } => source.is_ownership_conflict(),
            _ => false,
        }
    }

    /// The shared step that failed, for errors returned by
    /// [`crate::shared::SharedResources::reconcile`].
    pub fn step(&self) -> Option<Step> {
        match self {
            Error::Step { step, .. } => Some(*step),
            _ => None,
        }
    }
}

/// The steps of [`crate::shared::SharedResources`], in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Planner and EPP service accounts ([`crate::rbac`]).
    Rbac,
    /// Preserved v1alpha1 top-level PVCs ([`crate::pvc`]).
    Pvc,
    /// Kubernetes discovery RBAC ([`crate::discovery`]).
    Discovery,
    /// GPU memory service ResourceClaimTemplates ([`crate::gms`]).
    Gms,
    /// Checkpoint lookup and automatic checkpoints ([`crate::checkpoints`]).
    Checkpoints,
    /// EPP ConfigMap and InferencePool ([`crate::epp`]).
    Epp,
    /// Wait-for-leader script ConfigMap ([`crate::wait_for_leader`]).
    WaitForLeader,
    /// MPI SSH key Secret ([`crate::ssh_keys`]).
    SshKeys,
    /// Frontends' Ingresses, VirtualServices and HTTPRoutes ([`crate::ingress`]).
    Ingress,
}

/// The `Ready` reason of every failed shared step: upstream's default DGD failure reason. Upstream
/// reports all shared-resource failures under it and tells the steps apart by the message prefix
/// ([`Step::context`]); the same holds here, so alerts written against upstream keep working.
pub const REASON_FAILED_TO_RECONCILE_RESOURCES: &str = "failed_to_reconcile_the_resources";

impl Step {
    /// Every step, in the order [`crate::shared::SharedResources`] runs them.
    pub const ALL: [Step; 9] = [
        Step::Rbac,
        Step::Pvc,
        Step::Discovery,
        Step::Gms,
        Step::Checkpoints,
        Step::Epp,
        Step::WaitForLeader,
        Step::SshKeys,
        Step::Ingress,
    ];

    /// The `Ready` reason when this step fails ([`REASON_FAILED_TO_RECONCILE_RESOURCES`] for
    /// every step, as upstream).
    pub fn reason(self) -> &'static str {
        REASON_FAILED_TO_RECONCILE_RESOURCES
    }

    /// The prefix of the failure message, as upstream words it.
    pub fn context(self) -> &'static str {
        match self {
            Step::Rbac => "failed to reconcile planner/EPP RBAC",
            Step::Pvc => "failed to reconcile top-level PVCs",
            Step::Discovery => "failed to reconcile K8s discovery resources",
            Step::Gms => "failed to reconcile GMS ResourceClaimTemplates",
            Step::Checkpoints => "failed to reconcile checkpoints",
            Step::Epp => "failed to reconcile EPP resources",
            Step::WaitForLeader => "failed to reconcile wait-leader ConfigMap",
            Step::SshKeys => "failed to reconcile MPI SSH keys",
            Step::Ingress => "failed to sync the main component ingress",
        }
    }

    /// Wrap `source` as this step's failure.
    pub fn wrap(self, source: Error) -> Error {
        Error::Step {
            step: self,
            source: Box::new(source),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.context())
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
