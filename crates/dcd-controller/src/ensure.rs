//! `ensure`: converge one child by server-side apply, skipping the request when the live object
//! already holds everything this controller would apply.
//!
//! The desired object is stamped with `nvidia.com/last-applied-hash` (the hash of its body, the
//! annotation upstream's operator writes too). The apply is skipped when the live object
//! *covers* the stamped body: every field of the body is present in the live object with the
//! same value (objects compared key by key, lists element by element with equal length). A
//! change of the desired body changes the hash, so removed fields are never skipped over; a
//! foreign change of any field this controller owns breaks the cover, so drift is restored.
//! Fields that only the API server or other managers set (defaults, status, other labels) do
//! not matter.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kit::{Reader, Writer};
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Annotation (controller, on children): hash of the body last applied.
pub const LAST_APPLIED_HASH: &str = "nvidia.com/last-applied-hash";

/// What `ensure` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The object did not exist and was created.
    Created,
    /// The object existed and the apply changed it.
    Updated,
    /// Nothing needed to change (no request, or a no-op apply).
    Unchanged,
}

/// Why `ensure` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EnsureError {
    /// The child exists and another object is its controller.
    #[error("controlled by {kind} {name} (uid {uid})")]
    Conflict {
        kind: String,
        name: String,
        uid: String,
    },
    /// A read or the apply failed.
    #[error(transparent)]
    Api(#[from] kit::Error),
}

/// The controller owner reference of an object, if any.
pub(crate) fn controller_of(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    owners
        .into_iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Converge the child `desired` (of `resource`), which must carry the owner's controller
/// reference with `owner_uid`. Returns the object as the server (or the cache) holds it.
pub(crate) async fn ensure(
    reader: &dyn Reader,
    writer: &dyn Writer,
    resource: &ApiResource,
    mut desired: DynamicObject,
    owner_uid: Option<&str>,
    field_manager: &str,
) -> Result<(DynamicObject, Change), EnsureError> {
    stamp(&mut desired)?;
    let name = desired.metadata.name.clone().unwrap_or_default();
    let namespace = desired.metadata.namespace.clone();
    let live = reader
        .get_dynamic(resource, namespace.as_deref(), &name)
        .await?;
    if let Some(live) = &live {
        if let Some(owner) = controller_of(live.metadata.owner_references.as_ref())
            && Some(owner.uid.as_str()) != owner_uid
        {
            return Err(EnsureError::Conflict {
                kind: owner.kind.clone(),
                name: owner.name.clone(),
                uid: owner.uid.clone(),
            });
        }
        if covers(
            &serde_json::to_value(live).map_err(kit::Error::from)?,
            &serde_json::to_value(&desired).map_err(kit::Error::from)?,
        ) {
            return Ok((live.clone(), Change::Unchanged));
        }
    }
    let applied = writer
        .apply_dynamic(resource, &desired, Some(field_manager))
        .await?;
    let change = match (applied.changed, live.is_some()) {
        (false, _) => Change::Unchanged,
        (true, false) => Change::Created,
        (true, true) => Change::Updated,
    };
    Ok((applied.object, change))
}

/// Set `nvidia.com/last-applied-hash` to the hash of the body without it.
fn stamp(object: &mut DynamicObject) -> Result<(), kit::Error> {
    if let Some(annotations) = object.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_HASH);
    }
    let body = serde_json::to_string(&canonical(serde_json::to_value(&*object)?))?;
    let hash = hex::encode(&Sha256::digest(body.as_bytes())[..8]);
    object
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(LAST_APPLIED_HASH.into(), hash);
    Ok(())
}

/// `value` with object keys sorted, so the hash does not depend on map ordering.
fn canonical(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, canonical(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

/// Whether `live` holds every field of `desired` with the same value. Empty objects and lists
/// and `null` in `desired` are satisfied by absence.
pub(crate) fn covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (_, Value::Null) => true,
        (Value::Object(live), Value::Object(desired)) => {
            desired.iter().all(|(k, d)| match live.get(k) {
                Some(l) => covers(l, d),
                None => is_empty(d),
            })
        }
        (Value::Array(live), Value::Array(desired)) => {
            live.len() == desired.len() && live.iter().zip(desired).all(|(l, d)| covers(l, d))
        }
        (Value::Number(l), Value::Number(d)) => l.as_f64() == d.as_f64(),
        (l, d) => l == d,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn covers_ignores_extra_live_fields_but_not_changed_or_missing_ones() {
        let desired = json!({"a": 1, "m": {"x": "1"}, "l": [{"n": "a"}], "e": {}});
        assert!(covers(
            &json!({"a": 1, "m": {"x": "1", "y": "2"}, "l": [{"n": "a", "d": 0}], "z": true}),
            &desired
        ));
        assert!(!covers(
            &json!({"a": 2, "m": {"x": "1"}, "l": [{"n": "a"}]}),
            &desired
        ));
        assert!(!covers(&json!({"a": 1, "l": [{"n": "a"}]}), &desired));
        assert!(!covers(
            &json!({"a": 1, "m": {"x": "1"}, "l": [{"n": "a"}, {"n": "b"}]}),
            &desired
        ));
    }

    #[test]
    fn the_hash_is_stable_and_follows_the_body() {
        let object = |v: &str| {
            let mut o = DynamicObject::new(
                "x",
                &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            )
            .data(json!({"data": {"k": v}}));
            stamp(&mut o).unwrap();
            o.metadata.annotations.unwrap()[LAST_APPLIED_HASH].clone()
        };
        assert_eq!(object("1"), object("1"));
        assert_ne!(object("1"), object("2"));
        assert_eq!(object("1").len(), 16);
    }
}
