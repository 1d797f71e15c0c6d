//! `nvidia.com/v1alpha1`: the older shapes (a graph's `spec.services`, a DCD's service, an
//! adapter's `dgdRef.serviceName`), still served and converted to v1beta1.

mod component;
pub mod dcd;
mod dgd;
pub mod scaling_adapter;

pub use component::*;
pub use dgd::*;
