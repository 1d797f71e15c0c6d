//! Schema helpers for fields whose OpenAPI shape cannot be derived directly.

use k8s_openapi::api::core::v1::{Container, PodSpec};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A free-form object kept as-is by the apiserver (`x-kubernetes-preserve-unknown-fields`).
pub(crate) fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Like [`preserve_unknown_object`], but the value may be absent (`Option<_>` fields).
pub(crate) fn optional_preserve_unknown_object(generator: &mut SchemaGenerator) -> Schema {
    preserve_unknown_object(generator)
}

/// A container whose `name` is optional: v1alpha1's `extraPodSpec.mainContainer` is always
/// renamed to `main` by the operator, so upstream manifests omit the name.
pub(crate) fn unnamed_container(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = Container::json_schema(generator);
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("required");
    }
    schema
}

/// v1alpha1 `extraPodSpec`: a `PodSpec` (every field optional, `containers` included) plus
/// `mainContainer`.
pub(crate) fn extra_pod_spec(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = PodSpec::json_schema(generator);
    let main = unnamed_container(generator);
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("required");
        obj.insert(
            "description".into(),
            "extraPodSpec overrides the component's pod spec (a Kubernetes PodSpec, every field \
             optional). mainContainer overrides the main container."
                .into(),
        );
        if let Some(props) = obj.get_mut("properties").and_then(|p| p.as_object_mut()) {
            let mut main = main.to_value();
            if let Some(m) = main.as_object_mut() {
                m.insert(
                    "description".into(),
                    "mainContainer overrides the main container (a Kubernetes Container; its name \
                     is always main)."
                        .into(),
                );
            }
            props.insert("mainContainer".into(), main);
        }
    }
    schema
}
