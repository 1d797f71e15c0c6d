//! Converging one child: server-side apply under a field manager, and **no request at all** when
//! the live object already holds everything the apply would set.
//!
//! An [`Applier`] names the field manager a controller applies its children with and the
//! annotation that carries the hash of the applied body (the caller chooses the key: it is
//! visible on every child). [`Applier::ensure`] converges one desired child:
//!
//! 1. **Stamp.** The desired body gets the hash annotation set to [`Applier::hash`] of the body
//!    without it (16 hex digits of SHA-256 over the body's JSON with object keys sorted; an
//!    annotations map that held only the hash counts as absent). Stamping is idempotent.
//! 2. **Read.** The live object comes from the [`Reader`] (the watch cache in production), or
//!    from the caller ([`Applier::ensure_observed`]) when it has just listed it.
//! 3. **Ownership.** A live object must pass the [`Ownership`] check, else the call fails with
//!    [`EnsureError::Conflict`] and writes nothing. The controller owner reference (the one with
//!    `controller: true`) decides; other owner references do not matter.
//! 4. **Skip.** No request is sent when the live object [`covers`] the stamped body. Because
//!    the hash annotation is part of that body, this means: the live object carries the same
//!    hash (so the desired body has not changed since it was applied: a field the caller stops
//!    setting changes the hash and forces the apply that removes it), and it still holds every
//!    field of the body with the same value (so drift of a field this manager set, by anyone,
//!    forces the apply that restores it). Fields only the API server or other managers set
//!    (defaults, `status`, other labels, other owners' references) are ignored.
//! 5. **Apply.** Otherwise, when the applier succeeds a predecessor
//!    ([`Applier::succeeding`]) and the live child carries its marker annotation, the fields of
//!    the predecessor's that the body sets are first handed over to the field manager
//!    ([`crate::takeover`]: no value changes), so that the apply owns them alone. Then the
//!    stamped body is server-side applied under the field manager,
//!    forcing conflicts, and the result reports [`Change::Created`] (there was no live object
//!    and the apply changed something), [`Change::Updated`] (there was one and the apply changed
//!    it) or [`Change::Unchanged`] (the apply was a no-op, e.g. an annotation-only drift the
//!    server already agreed with). Callers emit mutation events only for the first two.
//!
//! # `covers`
//! `covers(live, desired)`: every field `desired` sets is in `live` with the same value.
//! - **Objects** field by field; extra live fields are fine. A field missing from `live` is
//!   covered only when the desired value is empty: `null`, `[]`, or an object whose values are
//!   all empty (`{}`, `{"a": {}}`): the API server drops empty maps and lists of built-in kinds,
//!   so they never come back on reads.
//! - **Lists** element by element, with equal length: an element added or removed by anyone is
//!   drift. Exceptions: `metadata.ownerReferences` and `metadata.finalizers` are sets (every
//!   desired element is covered by some live element): other controllers add their own, and
//!   server-side apply merges them by key.
//! - **Numbers** by value: `1`, `1.0` and `1e0` are equal; integers compare exactly.
//! - **Other scalars** by equality.
//! - At the top level, `apiVersion` and `kind` (the identity the object was read by) and
//!   `status` (not written by an apply when the kind has a status subresource) are not compared.
//!   A change of a desired `status` still changes the hash.
//!
//! The live object may lag (a cache a moment behind a foreign write): then one apply is skipped,
//! and the watch event of that write triggers the reconcile whose apply is sent.

use std::borrow::Cow;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

use crate::capability::{Kind, Reader, Writer};
use crate::error::Error;
use crate::object::{from_dynamic, key, resource, to_dynamic};
use crate::takeover::Predecessor;

/// How a controller converges its children: the field manager it applies them with and the
/// annotation that carries the hash of the applied body. A `const` per controller:
/// ```
/// use kit::child::Applier;
/// const CHILDREN: Applier = Applier::new("example.com/controller", "example.com/last-applied-hash");
/// assert_eq!(CHILDREN.field_manager(), "example.com/controller");
/// ```
/// A child several owners apply together (each its own part, e.g. its own owner reference)
/// takes one applier per owner, built at run time ([`Applier::owned`]): a field manager and a
/// hash annotation of its own, so the owners' applies neither take each other's fields nor
/// overwrite each other's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applier {
    field_manager: Cow<'static, str>,
    hash_annotation: Cow<'static, str>,
    predecessor: Option<Predecessor>,
}

/// Who may control an existing child (see [`Applier::ensure`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership<'a> {
    /// The live child must have a controller owner reference with this uid. A child controlled
    /// by another object, or by none, is a conflict.
    Controlled(&'a str),
    /// The live child must be controlled by this uid or by nothing; an uncontrolled child is
    /// adopted (the apply sets the desired owner references). A child controlled by another
    /// object is a conflict.
    Adopt(&'a str),
    /// No check: an object shared by several owners (or by none).
    Shared,
}

/// What [`Applier::ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The child did not exist and the apply created it.
    Created,
    /// The child existed and the apply changed it.
    Updated,
    /// Nothing changed: no request was sent, or the apply was a no-op.
    Unchanged,
}

impl Change {
    /// Whether the child was written (created or updated): the condition of a mutation event.
    pub fn changed(self) -> bool {
        !matches!(self, Change::Unchanged)
    }

    /// `"Created"` or `"Updated"`, the verb of a mutation event; `None` when unchanged.
    pub fn verb(self) -> Option<&'static str> {
        match self {
            Change::Created => Some("Created"),
            Change::Updated => Some("Updated"),
            Change::Unchanged => None,
        }
    }
}

/// The result of [`Applier::ensure`].
#[derive(Clone, Debug, PartialEq)]
pub struct Ensured<K> {
    /// The child as the server holds it after the apply, or the live object when no request was
    /// needed.
    pub object: K,
    /// What happened.
    pub change: Change,
}

/// A live child that fails the [`Ownership`] check.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind} {key} {}", self.owner())]
pub struct Conflict {
    /// Kind of the child.
    pub kind: String,
    /// `namespace/name` of the child.
    pub key: String,
    /// Its controller owner reference; `None` when it has none.
    pub controller: Option<OwnerReference>,
}

impl Conflict {
    /// Who controls the child, as a phrase: `is controlled by <Kind> <name>` or `has no
    /// controller owner`.
    pub fn owner(&self) -> String {
        match &self.controller {
            Some(o) => format!("is controlled by {} {}", o.kind, o.name),
            None => "has no controller owner".to_string(),
        }
    }
}

/// Why [`Applier::ensure`] failed. Nothing was written unless the variant says so.
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    /// The live child is controlled by someone else.
    #[error(transparent)]
    Conflict(Box<Conflict>),
    /// Reading the live child failed.
    #[error("read: {0}")]
    Read(#[source] Error),
    /// The apply failed.
    #[error("apply: {0}")]
    Apply(#[source] Error),
    /// An object could not be converted between its typed and its dynamic form (before any
    /// write, or of the result after the apply).
    #[error("convert: {0}")]
    Convert(#[source] Error),
}

impl Applier {
    /// An applier writing as `field_manager` and stamping `hash_annotation`.
    pub const fn new(field_manager: &'static str, hash_annotation: &'static str) -> Self {
        Applier {
            field_manager: Cow::Borrowed(field_manager),
            hash_annotation: Cow::Borrowed(hash_annotation),
            predecessor: None,
        }
    }

    /// An applier as [`Applier::new`] builds it that takes children over from `predecessor`
    /// (see step 5 of the module docs).
    pub const fn succeeding(
        field_manager: &'static str,
        hash_annotation: &'static str,
        predecessor: Predecessor,
    ) -> Self {
        Applier {
            field_manager: Cow::Borrowed(field_manager),
            hash_annotation: Cow::Borrowed(hash_annotation),
            predecessor: Some(predecessor),
        }
    }

    /// An applier whose field manager and hash annotation are computed at run time (one per
    /// owner of a shared child).
    pub fn owned(field_manager: String, hash_annotation: String) -> Self {
        Applier {
            field_manager: Cow::Owned(field_manager),
            hash_annotation: Cow::Owned(hash_annotation),
            predecessor: None,
        }
    }

    /// The field manager of every apply.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// The annotation carrying the body hash.
    pub fn hash_annotation(&self) -> &str {
        &self.hash_annotation
    }

    /// The hash of `object`'s body without the hash annotation (see the module docs).
    pub fn hash<K: Serialize>(&self, object: &K) -> Result<String, Error> {
        Ok(self.hash_value(serde_json::to_value(object)?))
    }

    /// Set the hash annotation of `object` to [`Applier::hash`]; returns the hash.
    pub fn stamp<K: Resource + Serialize>(&self, object: &mut K) -> Result<String, Error> {
        let hash = self.hash(&*object)?;
        object
            .meta_mut()
            .annotations
            .get_or_insert_with(Default::default)
            .insert(self.hash_annotation.to_string(), hash.clone());
        Ok(hash)
    }

    fn hash_value(&self, mut body: Value) -> String {
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            let empty = match meta.get_mut("annotations").and_then(Value::as_object_mut) {
                Some(annotations) => {
                    annotations.remove(self.hash_annotation.as_ref());
                    annotations.is_empty()
                }
                None => false,
            };
            if empty {
                meta.remove("annotations");
            }
        }
        let mut text = String::new();
        canonical(&mut text, &body);
        Sha256::digest(text.as_bytes())[..8].iter().fold(
            String::with_capacity(16),
            |mut hex, byte| {
                let _ = write!(hex, "{byte:02x}");
                hex
            },
        )
    }

    /// Converge the typed child `desired`, reading the live one through `reader` (see the module
    /// docs for the rule).
    pub async fn ensure<K: Kind>(
        &self,
        reader: &dyn Reader,
        writer: &dyn Writer,
        desired: &K,
        ownership: Ownership<'_>,
    ) -> Result<Ensured<K>, EnsureError> {
        let desired = to_dynamic(desired).map_err(EnsureError::Convert)?;
        let ensured = self
            .ensure_dynamic(reader, writer, &resource::<K>(), &desired, ownership)
            .await?;
        typed(ensured)
    }

    /// Converge the dynamic child `desired` of kind `resource`, reading the live one through
    /// `reader`.
    pub async fn ensure_dynamic(
        &self,
        reader: &dyn Reader,
        writer: &dyn Writer,
        resource: &ApiResource,
        desired: &DynamicObject,
        ownership: Ownership<'_>,
    ) -> Result<Ensured<DynamicObject>, EnsureError> {
        let live = reader
            .get_dynamic(
                resource,
                desired.namespace().as_deref(),
                &desired.name_any(),
            )
            .await
            .map_err(EnsureError::Read)?;
        self.converge(writer, resource, desired, live.as_ref(), ownership)
            .await
    }

    /// Converge the typed child `desired`, given the live one as the caller just read it
    /// (`None`: it does not exist), e.g. from a list of all children.
    pub async fn ensure_observed<K: Kind>(
        &self,
        writer: &dyn Writer,
        desired: &K,
        observed: Option<&K>,
        ownership: Ownership<'_>,
    ) -> Result<Ensured<K>, EnsureError> {
        let desired = to_dynamic(desired).map_err(EnsureError::Convert)?;
        let observed = observed
            .map(to_dynamic)
            .transpose()
            .map_err(EnsureError::Convert)?;
        let ensured = self
            .converge(
                writer,
                &resource::<K>(),
                &desired,
                observed.as_ref(),
                ownership,
            )
            .await?;
        typed(ensured)
    }

    async fn converge(
        &self,
        writer: &dyn Writer,
        resource: &ApiResource,
        desired: &DynamicObject,
        live: Option<&DynamicObject>,
        ownership: Ownership<'_>,
    ) -> Result<Ensured<DynamicObject>, EnsureError> {
        let mut desired = desired.clone();
        self.stamp(&mut desired).map_err(EnsureError::Convert)?;
        let object = key(desired.namespace().as_deref(), &desired.name_any());
        if let Some(live) = live {
            ownership
                .check(&resource.kind, live)
                .map_err(EnsureError::Conflict)?;
            let covered = covers(
                &serde_json::to_value(live).map_err(|e| EnsureError::Convert(e.into()))?,
                &serde_json::to_value(&desired).map_err(|e| EnsureError::Convert(e.into()))?,
            );
            if covered {
                tracing::debug!(kind = %resource.kind, %object, "child holds the desired body; no request");
                return Ok(Ensured {
                    object: live.clone(),
                    change: Change::Unchanged,
                });
            }
        }
        if let Some(live) = live {
            self.take_over_dynamic(writer, resource, &desired, live)
                .await
                .map_err(EnsureError::Apply)?;
        }
        let applied = writer
            .apply_dynamic(resource, &desired, Some(&self.field_manager))
            .await
            .map_err(EnsureError::Apply)?;
        let change = match (applied.changed, live.is_some()) {
            (false, _) => Change::Unchanged,
            (true, false) => Change::Created,
            (true, true) => Change::Updated,
        };
        tracing::debug!(kind = %resource.kind, %object, ?change, "child applied");
        Ok(Ensured {
            object: applied.object,
            change,
        })
    }
}

impl Applier {
    /// Step 5's handover alone, for a caller that converges `desired` (kind `resource`) by its
    /// own rule: when this applier succeeds a predecessor and `live` carries its marker, the
    /// predecessor's fields that `desired` sets are handed over to the field manager
    /// ([`crate::takeover`]). Whether `managedFields` changed; no request otherwise.
    pub async fn take_over_dynamic(
        &self,
        writer: &dyn Writer,
        resource: &ApiResource,
        desired: &DynamicObject,
        live: &DynamicObject,
    ) -> Result<bool, Error> {
        let Some(predecessor) = &self.predecessor else {
            return Ok(false);
        };
        if !live.annotations().contains_key(predecessor.marker) {
            return Ok(false);
        }
        let body = serde_json::to_value(desired)?;
        writer
            .take_over_dynamic(
                resource,
                desired.namespace().as_deref(),
                &desired.name_any(),
                predecessor,
                &self.field_manager,
                &body,
            )
            .await
    }

    /// [`Applier::take_over_dynamic`] for typed objects.
    pub async fn take_over<K: Kind>(
        &self,
        writer: &dyn Writer,
        desired: &K,
        live: &K,
    ) -> Result<bool, Error> {
        self.take_over_dynamic(
            writer,
            &resource::<K>(),
            &to_dynamic(desired)?,
            &to_dynamic(live)?,
        )
        .await
    }
}

impl Ownership<'_> {
    /// `Ok` when `live` may be written under this ownership.
    pub fn check(&self, kind: &str, live: &DynamicObject) -> Result<(), Box<Conflict>> {
        let controller = controller_of(&live.metadata);
        let allowed = match *self {
            Ownership::Shared => true,
            Ownership::Controlled(uid) => controller.is_some_and(|o| o.uid == uid),
            Ownership::Adopt(uid) => controller.is_none_or(|o| o.uid == uid),
        };
        if allowed {
            return Ok(());
        }
        Err(Box::new(Conflict {
            kind: kind.to_string(),
            key: key(live.metadata.namespace.as_deref(), &live.name_any()),
            controller: controller.cloned(),
        }))
    }
}

fn typed<K: Kind>(ensured: Ensured<DynamicObject>) -> Result<Ensured<K>, EnsureError> {
    Ok(Ensured {
        object: from_dynamic(ensured.object).map_err(EnsureError::Convert)?,
        change: ensured.change,
    })
}

/// The controller owner reference of an object (`controller: true`), if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Whether the object's controller owner reference has `uid`.
pub fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller_of(meta).is_some_and(|o| o.uid == uid)
}

/// Whether the object `live` holds every field the object `desired` sets (the rule is in the
/// module docs).
pub fn covers(live: &Value, desired: &Value) -> bool {
    let (Value::Object(live), Value::Object(desired)) = (live, desired) else {
        return value_covers(live, desired);
    };
    desired.iter().all(|(k, d)| match k.as_str() {
        "apiVersion" | "kind" | "status" => true,
        "metadata" => match (live.get(k), d) {
            (Some(Value::Object(lm)), Value::Object(dm)) => {
                dm.iter().all(|(mk, md)| match (mk.as_str(), lm.get(mk)) {
                    ("ownerReferences" | "finalizers", Some(lv)) => set_covers(lv, md),
                    (_, lv) => field_covers(lv, md),
                })
            }
            (l, d) => field_covers(l, d),
        },
        _ => field_covers(live.get(k), d),
    })
}

/// A desired field against the live one (`None`: absent).
fn field_covers(live: Option<&Value>, desired: &Value) -> bool {
    match live {
        Some(l) => value_covers(l, desired),
        None => is_empty(desired),
    }
}

fn value_covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (_, Value::Null) => true,
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| field_covers(l.get(k), dv)),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| value_covers(lv, dv))
        }
        (Value::Number(l), Value::Number(d)) => numbers_equal(l, d),
        (l, d) => l == d,
    }
}

/// Every desired element is covered by some live element.
fn set_covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Array(l), Value::Array(d)) => {
            d.iter().all(|dv| l.iter().any(|lv| value_covers(lv, dv)))
        }
        _ => value_covers(live, desired),
    }
}

/// Equal numbers: integers exactly, others by value (`1` and `1.0` are equal).
pub(crate) fn numbers_equal(a: &Number, b: &Number) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    a.as_f64() == b.as_f64()
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(m) => m.values().all(is_empty),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Compact JSON with object keys sorted, whatever the map type of `serde_json`.
fn canonical(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:", Value::String(k.clone()));
                canonical(out, &map[k]);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(out, v);
            }
            out.push(']');
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

#[cfg(all(test, feature = "testing"))]
#[path = "child_tests.rs"]
mod tests;
