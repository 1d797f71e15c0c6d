//! Dynamo-compatible CRD types, Grove client types, validation and CRD generation.
