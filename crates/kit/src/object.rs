//! Conversions between typed objects and the dynamic form the capabilities speak.

use kube::api::{ApiResource, DynamicObject, TypeMeta};
use kube::{Resource, ResourceExt};
use serde::{Serialize, de::DeserializeOwned};

use crate::error::Result;

/// The [`ApiResource`] of a statically typed kind.
pub fn resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Convert a typed object into a [`DynamicObject`] carrying its `apiVersion` and `kind`.
pub fn to_dynamic<K>(object: &K) -> Result<DynamicObject>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let mut dynamic: DynamicObject = serde_json::from_value(serde_json::to_value(object)?)?;
    dynamic.types = Some(TypeMeta {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
    });
    Ok(dynamic)
}

/// Convert a [`DynamicObject`] into a typed object.
pub fn from_dynamic<K: DeserializeOwned>(object: DynamicObject) -> Result<K> {
    Ok(serde_json::from_value(serde_json::to_value(object)?)?)
}

/// `namespace/name` (or `name` for cluster-scoped objects), for logs and error messages.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// `namespace/name` of an object.
pub fn key_of<K: Resource>(object: &K) -> String {
    key(object.namespace().as_deref(), &object.name_any())
}

/// Drop `metadata.managedFields`: the framework never reads them, and they are often larger than
/// the rest of the object.
pub fn strip_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// How deeply nested an object the framework decodes. serde_json stops at 128 levels, which is
/// less than the API server stores (a field that preserves unknown fields takes any JSON), so
/// [`decode`] lifts that limit up to this bound; an object nested deeper is reported as
/// unreadable rather than decoded (recursive decoding, cloning and dropping of such a value could
/// exhaust a thread's stack).
pub const MAX_DEPTH: usize = 256;

/// A JSON text that [`decode`] refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DecodeError {
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("nested {depth} levels deep, more than the {MAX_DEPTH} this operator reads")]
    TooDeep {
        /// The depth found (at least `MAX_DEPTH + 1`).
        depth: usize,
    },
    /// Not a value of the expected type (an unknown enum value, a wrong type, ...).
    #[error("{0}")]
    Invalid(String),
}

/// The nesting depth of a JSON text (objects and arrays; `0` for a scalar), counted iteratively,
/// stopping once it exceeds `limit`.
pub fn depth(json: &str, limit: usize) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for byte in json.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    max = depth;
                    if max > limit {
                        break;
                    }
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Decode a JSON text as `T`, nested up to [`MAX_DEPTH`] levels (serde_json alone stops at 128).
pub fn decode<T: DeserializeOwned>(json: &str) -> Result<T, DecodeError> {
    let found = depth(json, MAX_DEPTH);
    if found > MAX_DEPTH {
        return Err(DecodeError::TooDeep { depth: found });
    }
    let mut de = serde_json::Deserializer::from_str(json);
    de.disable_recursion_limit();
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let message = without_position(e.inner());
        DecodeError::Invalid(if path == "." {
            message
        } else {
            format!("{path}: {message}")
        })
    })?;
    de.end()
        .map_err(|e| DecodeError::Invalid(without_position(&e)))?;
    Ok(value)
}

/// serde_json's message without its ` at line L column C`: a position in a response nobody sees
/// helps no one, and it moves whenever another part of the object changes size.
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    text.strip_suffix(&suffix).unwrap_or(&text).to_string()
}

/// A `K` decoded with [`decode`]: as the element of an API response (`Api<Deep<K>>`), it lets the
/// client read objects nested deeper than serde_json's own limit. The response is captured as raw
/// text first (serde_json skips values without recursion), then decoded on its own.
#[derive(Clone, Debug)]
pub struct Deep<K>(pub K);

impl<'de, K: DeserializeOwned> serde::Deserialize<'de> for Deep<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        decode(raw.get())
            .map(Deep)
            .map_err(serde::de::Error::custom)
    }
}

impl<K: Serialize> Serialize for Deep<K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<K: Resource> Resource for Deep<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        self.0.meta_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn decode_errors_name_the_field_and_no_position() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        enum Mode {
            A,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Spec {
            mode: Mode,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Object {
            spec: Spec,
        }
        let short = decode::<Object>(r#"{"spec":{"mode":"C"}}"#)
            .unwrap_err()
            .to_string();
        let long = decode::<Object>(r#"{"metadata":{"a":"bbbbbbbb"},"spec":{"mode":"C"}}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(short, "spec.mode: unknown variant `C`, expected `A`");
        assert_eq!(short, long);
    }

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_counts_objects_and_arrays_outside_strings() {
        assert_eq!(depth("1", 10), 0);
        assert_eq!(depth(r#"{"a":[{"b":"[[[{{"}]}"#, 10), 3);
        assert_eq!(depth(r#"{"a":"\"[[["}"#, 10), 1);
        assert_eq!(depth(&nested(1000), 10), 11);
    }

    #[test]
    fn decode_reads_deeper_than_serde_json_and_stops_at_the_bound() {
        let deep = format!(r#"{{"v":{}}}"#, nested(MAX_DEPTH - 1));
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        // Decoded, cloned, serialized and dropped on a thread with the default stack.
        std::thread::spawn(move || {
            let value: Value = decode(&deep).expect("within the bound");
            let copy = value.clone();
            assert_eq!(serde_json::to_string(&copy).unwrap(), deep);
        })
        .join()
        .unwrap();
        let too_deep = format!(r#"{{"v":{}}}"#, nested(MAX_DEPTH));
        assert!(matches!(
            decode::<Value>(&too_deep),
            Err(DecodeError::TooDeep { depth }) if depth == MAX_DEPTH + 1
        ));
    }

    #[test]
    fn deep_is_read_inside_a_list() {
        let item = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let list = format!(
            r#"{{"items":[{item},{{"metadata":{{"name":"b"}},"data":{{"x":{}}}}}]}}"#,
            nested(200)
        );
        #[derive(serde::Deserialize)]
        struct List {
            items: Vec<Deep<kube::api::DynamicObject>>,
        }
        let list: List = serde_json::from_str(&list).expect("deep items decode");
        assert_eq!(list.items.len(), 2);
        assert_eq!(list.items[1].0.metadata.name.as_deref(), Some("b"));
        assert!(decode::<i32>("\"x\"").is_err());
    }
}

#[doc(hidden)]
pub mod __private {
    pub use k8s_openapi;
    pub use kube;
    pub use serde;
    pub use serde_json;
}

/// Declares a namespaced third-party kind typed only as far as a watch cache needs: `metadata`,
/// and `spec` and `status` kept whole as JSON (absent ones stay absent on the way back), with
/// its `kube::Resource` identity.
///
/// ```
/// kit::json_kind! {
///     /// A `example.com/v1` Widget.
///     pub struct Widget = "example.com", "v1", "Widget", "widgets";
/// }
/// assert_eq!(kit::object::resource::<Widget>().plural, "widgets");
/// ```
#[macro_export]
macro_rules! json_kind {
    ($(#[$doc:meta])* pub struct $name:ident = $group:expr, $version:expr, $kind:expr, $plural:expr;) => {
        $(#[$doc])*
        #[derive(
            Clone,
            Debug,
            Default,
            PartialEq,
            $crate::object::__private::serde::Serialize,
            $crate::object::__private::serde::Deserialize,
        )]
        #[serde(crate = "kit::object::__private::serde")]
        pub struct $name {
            /// Its metadata.
            pub metadata: $crate::object::__private::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// `spec`, as stored.
            #[serde(default, skip_serializing_if = "kit::object::__private::serde_json::Value::is_null")]
            pub spec: $crate::object::__private::serde_json::Value,
            /// `status`, as its controller reports it.
            #[serde(default, skip_serializing_if = "kit::object::__private::serde_json::Value::is_null")]
            pub status: $crate::object::__private::serde_json::Value,
        }

        impl $crate::object::__private::kube::Resource for $name {
            type DynamicType = ();
            type Scope = $crate::object::__private::k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &$crate::object::__private::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut $crate::object::__private::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
