//! `nvidia.com/v1alpha1`: the older DynamoGraphDeployment shape (`spec.services`), still served
//! and converted to v1beta1.

mod component;
mod dgd;

pub use component::*;
pub use dgd::*;
