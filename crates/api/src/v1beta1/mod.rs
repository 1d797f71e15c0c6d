//! `nvidia.com/v1beta1`: DynamoGraphDeployment (storage version) and the component spec.

mod component;
mod dgd;

pub use component::*;
pub use dgd::*;
