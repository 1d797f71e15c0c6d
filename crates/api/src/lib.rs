//! Dynamo-compatible CRD types, Grove client types, validation and CRD generation.
//!
//! - [`v1beta1`]: `DynamoGraphDeployment` (storage version) and the component spec.
//! - [`v1alpha1`]: the older `DynamoGraphDeployment` shape, served and converted
//!   ([`conversion`]).
//! - [`dcd`], [`scaling_adapter`], [`checkpoint`]: the other Dynamo kinds the operator
//!   reconciles; [`worker_metadata`]: the discovery kind workers write (CRD only).
//! - [`grove`]: client types for Grove's `PodCliqueSet`, `PodClique` and
//!   `PodCliqueScalingGroup` (installed from Grove's own CRDs, never from these types).
//! - [`validate()`]: the checks reconcilers run before acting on a spec; [`metadata`]:
//!   Kubernetes' label and annotation rules it applies to what the children will carry.
//! - [`crds()`]: every CRD this operator installs.
//! - [`gpu`]: which container resources are GPUs (the GPU memory service's rule).
//! - [`runtime_version`]: a component's Dynamo runtime version (override, else image tag),
//!   which gates rendered defaults.
//! - [`deployment_strategy`]: the rollout strategy a component's annotations ask for.
//! - [`worker_hash`]: the worker generation hash, equal to upstream's; [`gojson`]: the Go JSON
//!   encoding it hashes.

// `#[kube(printcolumn(type_ = ..), printcolumn(type_ = ..))]` repeats keys by design.
#![allow(clippy::duplicated_attributes)]

pub mod backend;
pub mod checkpoint;
pub mod checkpoint_identity;
pub mod common;
pub mod conversion;
pub mod crds;
pub mod dcd;
pub mod deployment_strategy;
pub mod gojson;
pub mod gpu;
pub mod grove;
pub mod labels;
pub mod metadata;
pub mod runtime_version;
pub mod scaling_adapter;
mod schema;
pub mod snapshot;
#[cfg(feature = "reconcile")]
mod status;
pub mod v1alpha1;
pub mod v1beta1;
pub mod validate;
pub mod worker_hash;
pub mod worker_metadata;

pub use checkpoint::{DynamoCheckpoint, DynamoCheckpointSpec, DynamoCheckpointStatus};
pub use common::{BackendFramework, ComponentKind, DgdState};
pub use crds::crds;
pub use dcd::{
    DynamoComponentDeployment, DynamoComponentDeploymentSpec, DynamoComponentDeploymentStatus,
};
pub use scaling_adapter::{
    DynamoGraphDeploymentScalingAdapter, DynamoGraphDeploymentScalingAdapterSpec,
    DynamoGraphDeploymentScalingAdapterStatus,
};
pub use v1beta1::{
    ComponentType, DynamoComponentDeploymentSharedSpec, DynamoGraphDeployment,
    DynamoGraphDeploymentSpec, DynamoGraphDeploymentStatus,
};
pub use validate::{InvalidSpec, Provider, Rule, ValidationContext, Violation, validate};

/// API group of the Dynamo kinds.
pub const GROUP: &str = "nvidia.com";
