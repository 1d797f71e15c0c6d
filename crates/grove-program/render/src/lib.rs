//! Rendering of a DynamoGraphDeployment into the Grove PodCliqueSet upstream Dynamo renders
//! for it. **Pure**: this crate has no client and no capability. It does not depend on `kit`
//! or `kube`, so no reader, writer or client type can even be named here:
//! ```compile_fail
//! use kit::Reader;
//! ```
//! ```compile_fail
//! use kube::Client;
//! ```
//!
//! [`render()`] takes [`Inputs`]: the graph, the PodCliqueSet as it exists, and the facts the
//! grove program resolved from the cluster beforehand (worker generation, restart stamps,
//! checkpoint gating and restore, ClusterTopology domains, image pull secrets) plus the operator
//! [`Settings`]. A checkpointed component's clique carries its checkpoint's labels and
//! annotations and its pod is restore-shaped exactly as on the component pathway
//! (`pod_render::restore`). Every input is read, none is changed, and equal inputs give equal output.
//!
//! - [`names`]: PodCliqueSet, clique, scaling group and Grove child names.
//! - [`pod`]: the pod spec of a clique (operator defaults under the user's template, the
//!   multinode launch wiring of its role with the Grove addresses).
//! - [`compat`]: the compatibility rules against the existing object.
//! - [`services`]: the component Services that accompany the PodCliqueSet.

pub mod compat;
pub mod names;
pub mod pod;
mod render;
pub mod services;

use std::collections::{BTreeMap, BTreeSet};

use api::DynamoGraphDeployment;
use api::grove::PodCliqueSet;
pub use pod_render::restore::Checkpoint;

pub use render::{
    GROVE_UPDATE_STRATEGY, PRESERVED_ALPHA_SPEC, PROPAGATED_ANNOTATIONS, has_topology_overrides,
    preflight, render,
};

/// Termination delay of PodCliqueSets the operator renders unless configured otherwise.
pub const DEFAULT_TERMINATION_DELAY: &str = "15m";

/// Everything [`render()`] reads.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The graph.
    pub dgd: &'a DynamoGraphDeployment,
    /// Its PodCliqueSet as it exists, if it does (the compatibility rules read it).
    pub existing: Option<&'a PodCliqueSet>,
    /// The worker generation.
    pub workers: &'a Workers,
    /// The `nvidia.com/restartAt` values a restart asks for.
    pub restart: Option<&'a RestartStamps>,
    /// Components whose startup waits for a checkpoint that is not ready (rendered at zero
    /// replicas).
    pub waiting_for_checkpoint: &'a BTreeSet<String>,
    /// What each checkpointed component's pods know of its checkpoint, by component name
    /// (`pod_render::restore`: restore-candidate annotations, or the restore of a Ready
    /// checkpoint).
    pub checkpoints: &'a BTreeMap<String, Checkpoint>,
    /// Domains of the ClusterTopology named by `spec.experimental.kvTransferPolicy`, widest
    /// first (empty when it names none).
    pub topology_domains: &'a [String],
    /// Image pull secrets of the graph's namespace, by registry host (empty with discovery
    /// off); every pod gets those of its images unless its annotations turn discovery off.
    pub pull_secrets: &'a pod::PullSecrets,
    /// Operator settings.
    pub settings: &'a Settings,
}

/// The worker generation of a graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workers {
    /// The worker hash of the current spec (labels worker cliques
    /// `nvidia.com/dynamo-worker-hash`).
    pub hash: String,
    /// The worker spec changed since the recorded generation.
    pub changed: bool,
}

/// A restart's `nvidia.com/restartAt` value and the components whose cliques carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestartStamps {
    /// The annotation value.
    pub value: String,
    /// The components stamped.
    pub components: BTreeSet<String>,
}

/// The discovery backend of graphs without the `nvidia.com/dynamo-discovery-backend`
/// annotation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Discovery {
    /// Kubernetes discovery (the default).
    #[default]
    Kubernetes,
    /// etcd discovery.
    Etcd,
}

impl Discovery {
    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Discovery::Kubernetes => "kubernetes",
            Discovery::Etcd => "etcd",
        }
    }
}

/// Operator settings rendering depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `spec.template.terminationDelay` (a Go duration); `None` leaves Grove's default.
    pub termination_delay: Option<String>,
    /// Discovery backend of graphs that do not choose one.
    pub discovery: Discovery,
    /// The operator's infrastructure endpoints, rendered as env into every pod.
    pub infrastructure: pod_render::Infrastructure,
}

impl Default for Settings {
    /// Upstream's defaults: termination delay [`DEFAULT_TERMINATION_DELAY`], Kubernetes
    /// discovery.
    fn default() -> Self {
        Settings {
            termination_delay: Some(DEFAULT_TERMINATION_DELAY.into()),
            discovery: Discovery::Kubernetes,
            infrastructure: pod_render::Infrastructure::default(),
        }
    }
}

/// Why a graph cannot be rendered. Every variant is a property of the inputs: rendering the
/// same inputs again fails the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The graph has no name.
    #[error("the DynamoGraphDeployment has no name")]
    Unnamed,
    /// The graph has no uid (it was never stored), so no owner reference can point at it.
    #[error("the DynamoGraphDeployment has no uid")]
    NoUid,
    /// A feature the grove pathway does not render.
    #[error("{0} is not supported on the grove pathway yet")]
    Unsupported(String),
    /// The backend of a worker cannot be determined.
    #[error("component {component}: {message}")]
    Backend {
        /// The component.
        component: String,
        /// Why.
        message: String,
    },
    /// An annotation has a value rendering cannot use.
    #[error("annotation {key}: {message}")]
    Annotation {
        /// The annotation.
        key: String,
        /// Why.
        message: String,
    },
    /// A provider override cannot be applied.
    #[error("{path}: {message}")]
    ProviderOverride {
        /// Where the override is.
        path: String,
        /// Why.
        message: String,
    },
}
