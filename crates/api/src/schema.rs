//! Schema helpers for fields whose OpenAPI shape cannot be derived directly.

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
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

/// The CEL cost budget of a rule bounds what admission can check of map keys: the apiserver
/// estimates `matches` at (longest key × pattern length) per entry, and an unbounded map has
/// many entries. These patterns are kept short to fit (about 70 % of the budget, measured against
/// the real apiserver); they are looser than Kubernetes' rule in the DNS prefix (`a..b/c`
/// passes), which [`crate::validate()`] checks exactly. `[^\W_]` is an ASCII alphanumeric.
/// Only for maps outside lists (a list's length multiplies the cost).
const LABEL_KEYS_RULE: &str =
    r"self.all(k, k.matches('^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[^\\W_]([-\\w.]{0,61}[^\\W_])?$'))";
const LABEL_KEYS_MESSAGE: &str = "label keys must be an optional DNS subdomain prefix and '/', \
     then a name of at most 63 alphanumerics, '-', '_' or '.', starting and ending with an \
     alphanumeric";
/// Annotation keys: the same, with upper case allowed in the prefix (the apiserver checks
/// annotation keys in lower case).
const ANNOTATION_KEYS_RULE: &str = r"self.all(k, k.matches('^([^\\W_]([-A-Za-z0-9.]*[^\\W_])?/)?[^\\W_]([-\\w.]{0,61}[^\\W_])?$'))";
const ANNOTATION_KEYS_MESSAGE: &str = "annotation keys must be an optional DNS subdomain prefix \
     and '/', then a name of at most 63 alphanumerics, '-', '_' or '.', starting and ending with \
     an alphanumeric";

/// A label value as the apiserver accepts it.
fn label_value() -> serde_json::Value {
    serde_json::json!({
        "type": "string",
        "maxLength": crate::metadata::LABEL_VALUE_MAX_LENGTH,
        "pattern": crate::metadata::LABEL_VALUE_PATTERN,
    })
}

/// Labels the operator copies onto children: values must be valid label values, keys
/// qualified names (CEL; see [`LABEL_KEYS_RULE`]).
pub(crate) fn label_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": label_value(),
        "x-kubernetes-validations": [{"rule": LABEL_KEYS_RULE, "message": LABEL_KEYS_MESSAGE}],
    })
}

/// Labels inside a list or map (no CEL): only the values are checked.
pub(crate) fn label_values_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": label_value(),
    })
}

/// Annotations the operator copies onto children: keys must be qualified names (CEL); any
/// value. The total size is checked by [`crate::validate()`].
pub(crate) fn annotation_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": [{"rule": ANNOTATION_KEYS_RULE, "message": ANNOTATION_KEYS_MESSAGE}],
    })
}

/// A pod template whose label values must be valid (the operator copies them onto children
/// and pods).
pub(crate) fn pod_template(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = PodTemplateSpec::json_schema(generator);
    let labels = schema
        .as_object_mut()
        .and_then(|o| o.get_mut("properties"))
        .and_then(|p| p.get_mut("metadata"))
        .and_then(|m| m.get_mut("properties"))
        .and_then(|p| p.get_mut("labels"))
        .and_then(|l| l.as_object_mut())
        .expect("PodTemplateSpec has metadata.labels");
    labels.insert("additionalProperties".into(), label_value());
    schema
}

/// [`pod_template`] for `Option<PodTemplateSpec>` fields.
pub(crate) fn optional_pod_template(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = pod_template(generator);
    schema.insert("nullable".into(), true.into());
    schema
}
