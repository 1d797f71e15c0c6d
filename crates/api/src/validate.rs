//! placeholder
pub struct InvalidSpec;
pub struct ValidationContext;
pub struct Violation;
pub fn validate() {}
