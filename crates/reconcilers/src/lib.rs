//! Concrete shared DynamoGraphDeployment reconcilers, one module per resource family. Both
//! workload programs nest them; each owns one family, takes only the capabilities it uses, and
//! returns data (status fragments, queued events) instead of writing status.

pub mod naming;
pub mod restart;
pub mod rollout;
pub mod scaling_adapters;
