//! Taking over a child another controller wrote: moving its field manager's ownership of the
//! fields we set to ours, so that our server-side applies own them alone.
//!
//! A controller that wrote its children with `create`/`update` requests (as controller-runtime
//! controllers do) leaves `managedFields` entries with `operation: Update` under its manager
//! name. A server-side apply of the same values then shares those fields with it, and a field we
//! later stop setting is **not** removed: the predecessor still owns it. [`transfer`] computes
//! the `managedFields` that hand over to our apply manager the part of the predecessor's fields
//! that the desired body sets (plus the fields the [`Predecessor`] names as released: its
//! bookkeeping, which our apply then removes). The predecessor keeps the rest: fields only it
//! wrote stay as it left them, nothing is removed by the takeover itself, and no field value
//! changes, so a pod template is not touched. This is what `kubectl` does when it upgrades a
//! client-side-applied object, limited to what we set.
//!
//! A child is taken over at most once: the predecessor's [`Predecessor::marker`] annotation
//! tells it is still the predecessor's, and the apply that follows removes it (released).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::ResourceExt;
use serde_json::{Map, Value, json};

use crate::capability::{Kind, Patch, Writer, WriterExt};
use crate::child::numbers_equal;
use crate::error::Error;
use crate::object::key;

/// The controller a child is taken over from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Predecessor {
    /// Its field manager (`managedFields[].manager`).
    pub manager: &'static str,
    /// An annotation it stamps on every child it writes: a child carrying it is taken over
    /// before the first apply.
    pub marker: &'static str,
    /// Fields it owns that we release (they are removed by our apply), as `fieldsV1` paths,
    /// e.g. `["f:metadata", "f:finalizers", "v:\"example.com/finalizer\""]`.
    pub released: &'static [&'static [&'static str]],
}

/// The `managedFields` of an object after taking over from `predecessor`, for the apply manager
/// `manager` and the desired body `desired`; `None` when there is nothing to take over.
pub fn transfer(
    entries: &[ManagedFieldsEntry],
    predecessor: &Predecessor,
    manager: &str,
    desired: &Value,
) -> Option<Vec<ManagedFieldsEntry>> {
    let released = released_tree(predecessor.released);
    let mut taken = Map::new();
    let mut api_version = None;
    let mut kept = Vec::with_capacity(entries.len() + 1);
    for entry in entries {
        let theirs = entry.manager.as_deref() == Some(predecessor.manager)
            && entry.operation.as_deref() == Some("Update")
            && entry.subresource.as_deref().unwrap_or_default().is_empty();
        let fields = entry.fields_v1.as_ref().and_then(|f| f.0.as_object());
        let (true, Some(fields)) = (theirs, fields) else {
            kept.push(entry.clone());
            continue;
        };
        let overlap = overlap(fields, Some(desired), Some(&released));
        if overlap.is_empty() {
            kept.push(entry.clone());
            continue;
        }
        api_version = api_version.or_else(|| entry.api_version.clone());
        let rest = difference(fields, &overlap);
        union(&mut taken, &overlap);
        if !rest.is_empty() {
            kept.push(ManagedFieldsEntry {
                fields_v1: Some(FieldsV1(Value::Object(rest))),
                ..entry.clone()
            });
        }
    }
    if taken.is_empty() {
        return None;
    }
    let ours = |e: &ManagedFieldsEntry| {
        e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some("Apply")
            && e.subresource.as_deref().unwrap_or_default().is_empty()
    };
    match kept.iter_mut().find(|e| ours(e)) {
        Some(entry) => {
            let mut fields = entry
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.as_object().cloned())
                .unwrap_or_default();
            union(&mut fields, &taken);
            entry.fields_v1 = Some(FieldsV1(Value::Object(fields)));
        }
        None => kept.push(ManagedFieldsEntry {
            manager: Some(manager.to_string()),
            operation: Some("Apply".into()),
            api_version,
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(Value::Object(taken))),
            time: None,
            subresource: None,
        }),
    }
    Some(kept)
}

/// Remove the predecessor's `finalizer` from `object` (kind `K`), if it has it: a JSON patch that
/// tests the finalizer is still at its index. The object as patched, or `None` when it did not
/// carry the finalizer (no request).
pub async fn release_finalizer<K: Kind>(
    writer: &dyn Writer,
    object: &K,
    finalizer: &str,
) -> Result<Option<K>, Error> {
    let Some(index) = object.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(None);
    };
    let path = format!("/metadata/finalizers/{index}");
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ]))?;
    let ns = object.namespace();
    let patched = writer
        .patch::<K>(ns.as_deref(), &object.name_any(), &Patch::Json(ops))
        .await?;
    tracing::info!(kind = %K::kind(&()), object = %key(ns.as_deref(), &object.name_any()), %finalizer, "released the predecessor's finalizer");
    Ok(Some(patched.object))
}

/// The `fieldsV1` tree of `paths`.
fn released_tree(paths: &[&[&str]]) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for step in *path {
            node = node
                .entry(step.to_string())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("a fieldsV1 node is an object");
        }
    }
    Value::Object(root)
}

/// The part of the `fieldsV1` set `fields` that `desired` sets or `released` names.
fn overlap(
    fields: &Map<String, Value>,
    desired: Option<&Value>,
    released: Option<&Value>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, sub) in fields {
        let released = released.and_then(|r| r.get(key));
        let desired = desired.and_then(|d| member(d, key));
        if desired.is_none() && released.is_none() {
            continue;
        }
        match sub.as_object() {
            Some(children) if !children.is_empty() && key != "." => {
                let inner = overlap(children, desired, released);
                if !inner.is_empty() {
                    out.insert(key.clone(), Value::Object(inner));
                }
            }
            _ => {
                out.insert(key.clone(), sub.clone());
            }
        }
    }
    out
}

/// The member of `value` a `fieldsV1` key names: `f:<field>`, `k:<keys>` (the list element
/// with those key fields), `v:<value>` (a set element), `i:<index>`, `.` (the value itself).
fn member<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    if key == "." {
        return Some(value);
    }
    let (kind, rest) = key.split_at_checked(2)?;
    let found = match kind {
        "f:" => value.get(rest),
        "k:" => {
            let keys: Map<String, Value> = serde_json::from_str(rest).ok()?;
            value.as_array()?.iter().find(|item| {
                keys.iter()
                    .all(|(k, v)| item.get(k).is_some_and(|i| same(i, v)))
            })
        }
        "v:" => {
            let wanted: Value = serde_json::from_str(rest).ok()?;
            value.as_array()?.iter().find(|item| same(item, &wanted))
        }
        "i:" => value.as_array()?.get(rest.parse::<usize>().ok()?),
        _ => None,
    };
    found.filter(|v| !v.is_null())
}

/// Equal JSON values, numbers by value ([`crate::child`]'s rule).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        _ => a == b,
    }
}

/// `fields` without the leaves of `taken` (interior nodes left empty are dropped).
fn difference(fields: &Map<String, Value>, taken: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, sub) in fields {
        let children = sub.as_object().filter(|c| !c.is_empty());
        match (taken.get(key).and_then(Value::as_object), children) {
            (None, _) => {
                out.insert(key.clone(), sub.clone());
            }
            (Some(_), None) => {}
            (Some(taken_children), Some(children)) => {
                let rest = difference(children, taken_children);
                if !rest.is_empty() {
                    out.insert(key.clone(), Value::Object(rest));
                }
            }
        }
    }
    out
}

/// Add the set `other` to the set `into`.
fn union(into: &mut Map<String, Value>, other: &Map<String, Value>) {
    for (key, sub) in other {
        match (into.get_mut(key), sub.as_object()) {
            (Some(Value::Object(existing)), Some(children)) => union(existing, children),
            (Some(_), _) => {}
            (None, _) => {
                into.insert(key.clone(), sub.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UPSTREAM: Predecessor = Predecessor {
        manager: "manager",
        marker: "example.com/last-applied-generation",
        released: &[
            &[
                "f:metadata",
                "f:annotations",
                "f:example.com/last-applied-generation",
            ],
            &["f:metadata", "f:finalizers", "v:\"example.com/finalizer\""],
        ],
    };

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        fields: Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            api_version: Some("apps/v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            time: None,
            subresource: subresource.map(Into::into),
        }
    }

    fn upstream_fields() -> Value {
        json!({
            "f:metadata": {
                "f:annotations": {".": {}, "f:example.com/last-applied-generation": {}, "f:example.com/hash": {}},
                "f:finalizers": {".": {}, "v:\"example.com/finalizer\"": {}},
                "f:labels": {".": {}, "f:app": {}, "f:legacy": {}},
            },
            "f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":8000,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}},
                    "k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}},
                }}},
            },
        })
    }

    fn desired() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "x"}, "annotations": {"example.com/hash": "1"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "i", "ports": [{"containerPort": 8000, "protocol": "TCP"}]},
            ]}}},
        })
    }

    #[test]
    fn takes_over_what_we_set_and_what_is_released_and_leaves_the_rest() {
        let entries = vec![
            entry("manager", "Update", None, upstream_fields()),
            entry(
                "kube-controller-manager",
                "Update",
                Some("status"),
                json!({"f:status": {}}),
            ),
        ];
        let out = transfer(&entries, &UPSTREAM, "ours", &desired()).unwrap();
        assert_eq!(out.len(), 3, "{out:#?}");
        let upstream = out[0].fields_v1.as_ref().unwrap().0.clone();
        assert_eq!(
            upstream,
            json!({
                "f:metadata": {"f:finalizers": {".": {}}, "f:labels": {"f:legacy": {}}},
                "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}},
                }}}},
            })
        );
        assert_eq!(out[1], entries[1], "other managers are untouched");
        let ours = &out[2];
        assert_eq!(ours.manager.as_deref(), Some("ours"));
        assert_eq!(ours.operation.as_deref(), Some("Apply"));
        assert_eq!(ours.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(
            ours.fields_v1.as_ref().unwrap().0,
            json!({
                "f:metadata": {
                    "f:annotations": {".": {}, "f:example.com/last-applied-generation": {}, "f:example.com/hash": {}},
                    "f:finalizers": {"v:\"example.com/finalizer\"": {}},
                    "f:labels": {".": {}, "f:app": {}},
                },
                "f:spec": {"f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":8000,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}},
                }}}},
            })
        );
    }

    #[test]
    fn merges_into_our_existing_apply_entry() {
        let entries = vec![
            entry("ours", "Apply", None, json!({"f:spec": {"f:paused": {}}})),
            entry(
                "manager",
                "Update",
                None,
                json!({"f:metadata": {"f:labels": {"f:app": {}}}}),
            ),
        ];
        let out = transfer(&entries, &UPSTREAM, "ours", &desired()).unwrap();
        assert_eq!(out.len(), 1, "the predecessor had nothing else: {out:#?}");
        assert_eq!(
            out[0].fields_v1.as_ref().unwrap().0,
            json!({"f:spec": {"f:paused": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
        );
    }

    #[test]
    fn nothing_to_take_over() {
        let cases = [
            (
                "no predecessor entry",
                vec![entry("someone", "Update", None, upstream_fields())],
            ),
            (
                "its status entry only",
                vec![entry(
                    "manager",
                    "Update",
                    Some("status"),
                    json!({"f:status": {}}),
                )],
            ),
            (
                "its apply entry",
                vec![entry("manager", "Apply", None, upstream_fields())],
            ),
            (
                "fields we do not set",
                vec![entry(
                    "manager",
                    "Update",
                    None,
                    json!({"f:spec": {"f:replicas": {}}}),
                )],
            ),
        ];
        for (name, entries) in cases {
            assert_eq!(
                transfer(&entries, &UPSTREAM, "ours", &desired()),
                None,
                "{name}"
            );
        }
    }
}
