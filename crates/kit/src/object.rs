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
