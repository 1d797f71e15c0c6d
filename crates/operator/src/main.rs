//! The dynamo-operator binary.

fn main() {}
