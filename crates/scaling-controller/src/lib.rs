//! The DynamoGraphDeploymentScalingAdapter (DGDSA) controller: the single owner of the replica
//! count of a component that sets `scalingAdapter`.
//!
//! # One writer per replica field
//! | field | written by | from |
//! | --- | --- | --- |
//! | adapter `spec.replicas` | the DGD (only when it creates the adapter: the component's `replicas`, default 1), then whoever scales the adapter: `kubectl scale`, an HPA, KEDA, the Planner | the `/scale` subresource or the spec |
//! | DCD `spec.replicas` of the component's DCDs | this controller, server-side apply of only that field under [`FIELD_MANAGER`] | adapter `spec.replicas` |
//! | DCD `spec.replicas` of a worker component's DCDs while its graph rolls a new worker generation | the graph (`reconcilers::rollout`): the new generation's under `dynamo-operator/dgd`, the old ones' under `dynamo-operator/rollout` | adapter `spec.replicas` as the desired count, stepped by the strategy |
//! | Deployment / LeaderWorkerSet `spec.replicas` | the DCD controller | DCD `spec.replicas` |
//! | PodClique / PodCliqueScalingGroup `spec.replicas` (grove) | this controller ([`grove`]), through their `/scale` subresource | adapter `spec.replicas` |
//!
//! The DGD never applies a DCD's `replicas` while the component has an adapter (except while it
//! rolls a new worker generation, when the adapter writes nothing), so a reconcile of the graph
//! never resets a count the adapter owns. A foreign edit of a DCD's replicas
//! changes a field this controller watches and is restored once (a forced apply takes the
//! field back); an edit of the Deployment is restored by the DCD controller the same way.
//!
//! # The reconcile
//! [`ScalingAdapterReconciler::reconcile`] reads the adapter's graph, decides with the pure
//! [`resolve()`] what it may do, then scales the component's workloads and reports:
//!
//! | observed | Ready | writes |
//! | --- | --- | --- |
//! | the graph does not exist | False `GraphNotFound` | none |
//! | the graph has no component `dgdRef.componentName` | False `ComponentNotFound` | none |
//! | the component does not set `scalingAdapter` (the graph owns its replicas) | False `ScalingAdapterDisabled` | none |
//! | the component waits for its checkpoint (`startupPolicy: WaitForCheckpoint`, not ready): the graph holds it at zero | False `WaitingForCheckpoint` | none |
//! | a worker component of a graph rolling a new worker generation (the recorded generation is not the spec's, or `status.rollingUpdate` is pending or in progress): the graph steps the generations | False `RollingUpdate` | none |
//! | the graph's workload provider is one this controller does not serve | False `WorkloadProviderUnavailable` | none |
//! | the component's workload does not exist yet | False `WorkloadNotFound` | none |
//! | a workload's replicas differ from the adapter's | False `Scaling` (or True once settled) | one apply (or `/scale` patch) per such workload; event `Scaled` |
//! | every workload carries the adapter's replicas, observed at that count | True `Scaled` | none |
//! | reading or scaling failed | False `ReadFailed` / `ScaleFailed`, Warning event | retried with backoff |
//!
//! Waiting states never retry on a timer (`requeue: None`): the watches of the graph and of its
//! DCDs wake the adapter when what it waits for appears.
//!
//! # Status
//! - `replicas` (the scale subresource's current count): the largest `status.component.replicas`
//!   among the component's DCDs (the Grove child's `status.replicas` on grove). During a
//!   rolling update two generations run side by side; the larger one is reported, so an
//!   autoscaler sees neither a doubled count nor the new generation ramping up. 0 when nothing
//!   runs or the graph is unknown.
//! - `selector`: `nvidia.com/dynamo-graph-deployment-name=<dgd>,nvidia.com/dynamo-component=<component>`,
//!   the component's pods across generations (what an HPA measures).
//! - `lastScaleTime`: when this controller last changed a workload's explicit count.
//! - `observedGeneration`, `conditions` (`Ready`).
//!
//! # Events
//! `Scaled` ("Scaled component X from A to B replicas", upstream's wording) only when a write
//! changed a count that was set to another value. Filling the count of a workload that had none
//! (a new worker generation, the hand-over when the adapter is enabled) is not a scale change
//! and emits nothing.

pub mod component;
pub mod grove;
mod reconcile;
pub mod resolve;
pub mod workload;

#[cfg(test)]
mod tests;

pub use reconcile::{Error, ScalingAdapterReconciler};
pub use resolve::{Pathway, Resolution, resolve};
pub use workload::{Scaled, Workload};

/// Field manager of the replica counts this controller writes.
pub const FIELD_MANAGER: &str = "dynamo-operator/dgdsa";

/// Ready reason: every workload carries the adapter's replicas and runs that many.
pub const REASON_SCALED: &str = "Scaled";
/// Ready reason: the adapter's replicas were applied; the workloads have not caught up yet.
pub const REASON_SCALING: &str = "Scaling";
/// Ready reason: the adapter's graph does not exist.
pub const REASON_GRAPH_NOT_FOUND: &str = "GraphNotFound";
/// Ready reason: the graph has no component of the adapter's `dgdRef.componentName`.
pub const REASON_COMPONENT_NOT_FOUND: &str = "ComponentNotFound";
/// Ready reason: the component does not set `scalingAdapter`; the graph owns its replicas.
pub const REASON_SCALING_ADAPTER_DISABLED: &str = "ScalingAdapterDisabled";
/// Ready reason: the graph holds the component at zero until its checkpoint is ready.
pub const REASON_WAITING_FOR_CHECKPOINT: &str = "WaitingForCheckpoint";
/// Ready reason: the graph rolls a new worker generation and steps the component's replicas
/// until it completes.
pub const REASON_ROLLING_UPDATE: &str = "RollingUpdate";
/// Ready reason: the graph runs on a workload provider this controller does not scale.
pub const REASON_WORKLOAD_PROVIDER_UNAVAILABLE: &str = "WorkloadProviderUnavailable";
/// Ready reason: the component's workload does not exist yet.
pub const REASON_WORKLOAD_NOT_FOUND: &str = "WorkloadNotFound";
/// Failure reason: reading the graph or the workloads failed.
pub const REASON_READ_FAILED: &str = "ReadFailed";
/// Failure reason: writing a workload's replicas failed.
pub const REASON_SCALE_FAILED: &str = "ScaleFailed";
/// Event: a workload's replica count changed.
pub const EVENT_SCALED: &str = "Scaled";
