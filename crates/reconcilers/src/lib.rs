//! Concrete shared DynamoGraphDeployment reconcilers, one module per resource family. Both
//! workload programs nest them; each owns one family, takes only the capabilities it uses, and
//! returns data (status fragments, queued events) instead of writing status.

pub mod checkpoints;
pub mod child;
pub mod discovery;
pub mod epp;
pub mod error;
pub mod finish;
pub mod gms;
pub mod ingress;
pub mod model_service;
pub mod naming;
pub mod optional;
pub mod pull_secrets;
pub mod pvc;
pub mod rbac;
pub mod ready;
pub mod restart;
pub mod rollout;
pub mod scaling_adapters;
pub mod shared;
pub mod ssh_keys;
pub mod wait_for_leader;

#[cfg(test)]
mod testutil;

pub use error::{Error, Step};
