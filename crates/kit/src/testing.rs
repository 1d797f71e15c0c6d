//! An in-memory double of the API server for unit tests of reconcilers.
//!
//! [`Double`] implements [`Reader`], [`Writer`], [`StatusWriter`] and [`EventSink`] over one map of
//! objects keyed by (apiVersion, kind, namespace, name), so one double serves every kind. It keeps
//! the API semantics a reconciler can observe:
//! - every persisted change bumps a cluster-wide revision, stored as `resourceVersion`; a write
//!   that changes nothing does not bump it;
//! - `uid`, `creationTimestamp` and `generation` are set on create; `generation` increments when
//!   anything outside `metadata` and `status` changes;
//! - `get` of a missing object is `None`; patch and status writes of a missing object fail with
//!   [`Error::NotFound`]; create of an existing name fails with [`Error::AlreadyExists`];
//! - a `metadata.resourceVersion` in an apply or merge-patch body, and delete preconditions (uid,
//!   resourceVersion), are checked: a mismatch fails with [`Error::Conflict`];
//! - delete of an object with finalizers sets `deletionTimestamp` and keeps it
//!   ([`Deleted::Pending`]) until a write removes the last finalizer, which removes the object; new
//!   finalizers cannot be added while it is being deleted;
//! - owner references are stored like any field; there is **no garbage collection** and the
//!   propagation policy is ignored;
//! - lists filter by namespace and label selector, sorted by namespace and name;
//! - the scale subresource ([`Writer::scale_dynamic`]) sets `spec.replicas` of any kind;
//! - every kind behaves as if it had a status subresource: `status` in create, apply and patch
//!   bodies is ignored; only the [`StatusWriter`] changes it.
//!
//! Server-side apply is simplified to a view of each field manager's last applied configuration:
//! the applied fields are merged into the object (objects recursively, lists replaced whole) and
//! the fields that the same manager applied last time but omits now are removed, unless another
//! manager's last applied configuration holds the field with the value the object has (then that
//! manager still owns it, as two managers applying equal values co-own a field).
//! `metadata.ownerReferences` is a list map keyed by `uid`, as the API server treats it: each
//! manager's entries are merged in by uid, and an entry a manager stops applying is removed unless
//! another manager applies that uid too. So several owners of one object, each applying only its
//! own owner reference under its own manager, keep each other's references, and an owner applying
//! an empty configuration (name only) gives up exactly what it alone held. `changed` is whether
//! the resulting object differs. There is no defaulting, and a forced apply of a value another
//! manager applied differently is not tracked as taking the field over (the other manager's
//! record keeps the old value, so the field counts as owned by the forcing manager only). The
//! status writer uses the same rule on `.status`.
//!
//! Every successful write is recorded ([`Double::writes`]), including no-ops (`changed: false`),
//! so a test can assert that a reconcile wrote nothing. [`Double::fail_next`] injects a failure
//! into the next matching call.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v1::{Scale, ScaleSpec, ScaleStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, Preconditions, PropagationPolicy};
use kube::core::{Selector, SelectorExt};
use serde_json::{Map, Value, json};

use crate::capability::{
    Applied, Deleted, EventSink, Kind, Patch, Reader, StatusWriter, Writer, require_name,
};
use crate::conditions;
use crate::error::{Error, Result};
use crate::object::{from_dynamic, key, resource, to_dynamic};
use crate::outcome::Event;

/// A call on the double, for failure injection and write records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `Reader::get_dynamic`
    Get,
    /// `Reader::list_dynamic`
    List,
    /// `Writer::create_dynamic`
    Create,
    /// `Writer::apply_dynamic`
    Apply,
    /// `Writer::patch_dynamic`
    Patch,
    /// `Writer::delete_dynamic`
    Delete,
    /// `Writer::scale_dynamic`
    Scale,
    /// `StatusWriter::apply_status_dynamic`
    ApplyStatus,
    /// `EventSink::publish`
    Publish,
}

/// One recorded write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// What was called.
    pub verb: Verb,
    /// The kind written.
    pub kind: String,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Whether the write changed the stored object.
    pub changed: bool,
}

/// One published event.
#[derive(Clone, Debug, PartialEq)]
pub struct PublishedEvent {
    /// The event.
    pub event: Event,
    /// The object it is about.
    pub regarding: ObjectReference,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
}

impl Key {
    fn new(resource: &ApiResource, namespace: Option<&str>, name: &str) -> Self {
        Key {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
            namespace: namespace.unwrap_or_default().to_string(),
            name: name.to_string(),
        }
    }

    fn namespace(&self) -> Option<String> {
        (!self.namespace.is_empty()).then(|| self.namespace.clone())
    }

    fn describe(&self) -> String {
        format!("{} {}", self.kind, key(Some(&self.namespace), &self.name))
    }
}

struct Injected {
    verb: Verb,
    kind: String,
    error: Error,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Key, Value>,
    revision: u64,
    uids: u64,
    /// Last applied body per (object, field manager); the status writer uses manager `""`.
    applied: HashMap<(Key, String), Value>,
    status_applied: HashMap<Key, Value>,
    writes: Vec<Write>,
    events: Vec<PublishedEvent>,
    failures: Vec<Injected>,
}

/// The in-memory API server double. Clones share state.
#[derive(Clone, Default)]
pub struct Double {
    state: Arc<Mutex<State>>,
}

const SERVER_FIELDS: [&str; 7] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
];

/// The default field manager of the double's writer.
pub const FIELD_MANAGER: &str = "kit-double";

impl Double {
    /// An empty double.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("double lock")
    }

    /// This double as a `Reader` capability.
    pub fn reader(&self) -> Arc<dyn Reader> {
        Arc::new(self.clone())
    }

    /// This double as a `Writer` capability.
    pub fn writer(&self) -> Arc<dyn Writer> {
        Arc::new(self.clone())
    }

    /// This double as a `StatusWriter` capability.
    pub fn status_writer(&self) -> Arc<dyn StatusWriter> {
        Arc::new(self.clone())
    }

    /// This double as an `EventSink`.
    pub fn event_sink(&self) -> Arc<dyn EventSink> {
        Arc::new(self.clone())
    }

    /// Store a fixture as it would exist on the server (status included), without recording a
    /// write. Assigns uid, resourceVersion, creationTimestamp and generation unless set. Returns
    /// the stored object.
    pub fn insert<K: Kind>(&self, object: K) -> K {
        let dynamic = to_dynamic(&object).expect("fixture serializes");
        let resource = resource::<K>();
        let name = require_name(&dynamic).expect("fixture has a name");
        let key = Key::new(&resource, dynamic.metadata.namespace.as_deref(), &name);
        let mut state = self.lock();
        let mut value = serde_json::to_value(&dynamic).expect("fixture serializes");
        state.revision += 1;
        let revision = state.revision.to_string();
        state.uids += 1;
        let uid = format!("uid-{}", state.uids);
        let meta = metadata_mut(&mut value);
        meta.entry("uid").or_insert(json!(uid));
        meta.entry("creationTimestamp")
            .or_insert(json!(timestamp()));
        meta.entry("generation").or_insert(json!(1));
        meta.insert("resourceVersion".into(), json!(revision));
        state.objects.insert(key, value.clone());
        serde_json::from_value(value).expect("fixture round-trips")
    }

    /// The stored object of kind `K`, for assertions (no failure injection, not recorded).
    pub fn object<K: Kind>(&self, namespace: Option<&str>, name: &str) -> Option<K> {
        let key = Key::new(&resource::<K>(), namespace, name);
        let value = self.lock().objects.get(&key).cloned()?;
        Some(serde_json::from_value(value).expect("stored object deserializes"))
    }

    /// All stored objects of kind `K`, sorted by namespace and name.
    pub fn objects<K: Kind>(&self) -> Vec<K> {
        let resource = resource::<K>();
        self.lock()
            .objects
            .iter()
            .filter(|(k, _)| k.api_version == resource.api_version && k.kind == resource.kind)
            .map(|(_, v)| serde_json::from_value(v.clone()).expect("stored object deserializes"))
            .collect()
    }

    /// Every stored object as JSON, sorted by apiVersion, kind, namespace and name.
    pub fn all(&self) -> Vec<Value> {
        self.lock().objects.values().cloned().collect()
    }

    /// The cluster-wide revision: it moves with every persisted change.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// Every successful write so far, in order, including no-ops.
    pub fn writes(&self) -> Vec<Write> {
        self.lock().writes.clone()
    }

    /// The writes that changed something.
    pub fn changes(&self) -> Vec<Write> {
        self.lock()
            .writes
            .iter()
            .filter(|w| w.changed)
            .cloned()
            .collect()
    }

    /// Forget the recorded writes.
    pub fn clear_writes(&self) {
        self.lock().writes.clear();
    }

    /// Every published event so far, in order.
    pub fn events(&self) -> Vec<PublishedEvent> {
        self.lock().events.clone()
    }

    /// The reasons of the published events, in order.
    pub fn event_reasons(&self) -> Vec<String> {
        self.lock()
            .events
            .iter()
            .map(|e| e.event.reason.clone())
            .collect()
    }

    /// Forget the published events.
    pub fn clear_events(&self) {
        self.lock().events.clear();
    }

    /// Make the next `verb` call on `kind` (for example `"ConfigMap"`, or `"*"` for any kind)
    /// fail with `error`. Injections are consumed in the order given.
    pub fn fail_next(&self, verb: Verb, kind: &str, error: Error) {
        self.lock().failures.push(Injected {
            verb,
            kind: kind.to_string(),
            error,
        });
    }

    fn injected(state: &mut State, verb: Verb, kind: &str) -> Result<()> {
        if let Some(i) = state
            .failures
            .iter()
            .position(|f| f.verb == verb && (f.kind == kind || f.kind == "*"))
        {
            return Err(state.failures.remove(i).error);
        }
        Ok(())
    }
}

fn timestamp() -> Value {
    serde_json::to_value(conditions::now()).expect("time serializes")
}

fn metadata_mut(value: &mut Value) -> &mut Map<String, Value> {
    let object = value.as_object_mut().expect("objects are JSON objects");
    object
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("metadata is an object")
}

fn metadata(value: &Value) -> Option<&Map<String, Value>> {
    value.get("metadata")?.as_object()
}

fn meta_str<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    metadata(value)?.get(field)?.as_str()
}

fn finalizers(value: &Value) -> Vec<String> {
    metadata(value)
        .and_then(|m| m.get("finalizers"))
        .and_then(|f| serde_json::from_value(f.clone()).ok())
        .unwrap_or_default()
}

/// The body of an apply or patch without status and server-managed metadata.
fn user_fields(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(object) = body.as_object_mut() {
        object.remove("status");
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in SERVER_FIELDS {
                meta.remove(field);
            }
        }
    }
    body
}

/// Everything but metadata and status: what `generation` tracks.
fn content(value: &Value) -> Value {
    let mut value = value.clone();
    if let Some(object) = value.as_object_mut() {
        object.remove("metadata");
        object.remove("status");
    }
    value
}

/// Merge `patch` into `target`: objects recursively, anything else replaced, `null` removes.
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(target), Some(patch)) => {
            for (k, v) in patch {
                if v.is_null() {
                    target.remove(k);
                } else if let Some(existing) =
                    target.get_mut(k).filter(|e| e.is_object() && v.is_object())
                {
                    merge(existing, v);
                } else {
                    target.insert(k.clone(), v.clone());
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// Remove from `target` the fields present in `previous` but absent from `next`, except those
/// another manager still owns: `others` are the other managers' last applied configurations at
/// the same place, and one owns a field when it applied it with the value `target` holds (an
/// object field: when it applied any part of it, which is then kept).
fn remove_omitted(target: &mut Value, previous: &Value, next: &Value, others: &[&Value]) {
    let (Some(target), Some(previous)) = (target.as_object_mut(), previous.as_object()) else {
        return;
    };
    let empty = json!({});
    for (k, pv) in previous {
        let theirs: Vec<&Value> = others.iter().filter_map(|o| o.get(k)).collect();
        let nv = match next.get(k) {
            Some(nv) if pv.is_object() && nv.is_object() => nv,
            Some(_) => continue,
            None if pv.is_object() && theirs.iter().any(|o| o.is_object()) => &empty,
            None => {
                if !theirs.iter().any(|o| Some(*o) == target.get(k)) {
                    target.remove(k);
                }
                continue;
            }
        };
        if let Some(t) = target.get_mut(k) {
            let theirs: Vec<&Value> = theirs.into_iter().filter(|o| o.is_object()).collect();
            remove_omitted(t, pv, nv, &theirs);
        }
    }
}

/// The owner references (by uid) of a configuration or object.
fn owner_references(value: &Value) -> Vec<Value> {
    metadata(value)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn uid_of(reference: &Value) -> Option<&str> {
    reference.get("uid").and_then(Value::as_str)
}

/// `body` without `metadata.ownerReferences` (they are merged by uid, not as one field).
fn without_owner_references(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("ownerReferences");
    }
    body
}

/// Apply `fields`' owner references to `target` as a list map keyed by uid: the entries
/// `previous` applied and `fields` omits go (unless one of `others` applies that uid), the
/// entries of `fields` are merged into the entry of their uid or appended.
fn apply_owner_references(target: &mut Value, previous: &Value, fields: &Value, others: &[&Value]) {
    let applied = owner_references(fields);
    let applied_uids: Vec<&str> = applied.iter().filter_map(uid_of).collect();
    let kept_by_others: Vec<String> = others
        .iter()
        .flat_map(|o| owner_references(o))
        .filter_map(|r| uid_of(&r).map(str::to_string))
        .collect();
    let dropped: Vec<String> = owner_references(previous)
        .iter()
        .filter_map(uid_of)
        .filter(|uid| !applied_uids.contains(uid) && !kept_by_others.iter().any(|k| k == uid))
        .map(str::to_string)
        .collect();
    let mut references = owner_references(target);
    references.retain(|r| uid_of(r).is_none_or(|uid| !dropped.iter().any(|d| d == uid)));
    for entry in applied {
        match references.iter_mut().find(|r| uid_of(r) == uid_of(&entry)) {
            Some(existing) => merge(existing, &entry),
            None => references.push(entry),
        }
    }
    let meta = metadata_mut(target);
    if references.is_empty() {
        meta.remove("ownerReferences");
    } else {
        meta.insert("ownerReferences".into(), Value::Array(references));
    }
}

fn check_resource_version(body: &Value, current: &Value, what: &str) -> Result<()> {
    if let Some(expected) = meta_str(body, "resourceVersion")
        && Some(expected) != meta_str(current, "resourceVersion")
    {
        return Err(Error::Conflict(format!(
            "{what}: the object has been modified; please apply your changes to the latest version and try again"
        )));
    }
    Ok(())
}

enum Committed {
    Stored(Value, bool),
    Removed(Value),
}

impl State {
    /// Store `next` as the new state of an existing object `key`, with API server rules.
    fn commit(&mut self, key: &Key, next: Value, status_only: bool) -> Result<Committed> {
        let current = self
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| Error::NotFound(key.describe()))?;
        let mut next = next;
        {
            let current_meta = metadata(&current).cloned().unwrap_or_default();
            let meta = metadata_mut(&mut next);
            for field in SERVER_FIELDS {
                match current_meta.get(field) {
                    Some(v) => meta.insert(field.to_string(), v.clone()),
                    None => meta.remove(field),
                };
            }
        }
        let object = next.as_object_mut().expect("objects are JSON objects");
        if status_only {
            let status = object.get("status").cloned();
            let mut restored = current.clone();
            let restored_object = restored.as_object_mut().expect("objects are JSON objects");
            match status {
                Some(s) => restored_object.insert("status".into(), s),
                None => restored_object.remove("status"),
            };
            next = restored;
        } else {
            match current.get("status") {
                Some(s) => object.insert("status".into(), s.clone()),
                None => object.remove("status"),
            };
        }
        let deleting = metadata(&current).is_some_and(|m| m.contains_key("deletionTimestamp"));
        if deleting {
            let before = finalizers(&current);
            if let Some(added) = finalizers(&next).into_iter().find(|f| !before.contains(f)) {
                return Err(Error::Invalid(format!(
                    "{}: no new finalizers can be added if the object is being deleted (found {added})",
                    key.describe()
                )));
            }
        }
        if next == current {
            return Ok(Committed::Stored(current, false));
        }
        if content(&next) != content(&current) {
            let generation = metadata(&current)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            metadata_mut(&mut next).insert("generation".into(), json!(generation + 1));
        }
        self.revision += 1;
        metadata_mut(&mut next).insert("resourceVersion".into(), json!(self.revision.to_string()));
        if deleting && finalizers(&next).is_empty() {
            self.remove(key);
            return Ok(Committed::Removed(next));
        }
        self.objects.insert(key.clone(), next.clone());
        Ok(Committed::Stored(next, true))
    }

    fn remove(&mut self, key: &Key) {
        self.objects.remove(key);
        self.applied.retain(|(k, _), _| k != key);
        self.status_applied.remove(key);
    }

    fn create(&mut self, resource: &ApiResource, key: &Key, body: &Value) -> Value {
        let mut value = user_fields(body);
        let object = value.as_object_mut().expect("objects are JSON objects");
        object.insert("apiVersion".into(), json!(resource.api_version));
        object.insert("kind".into(), json!(resource.kind));
        self.revision += 1;
        self.uids += 1;
        let (revision, uid) = (self.revision, self.uids);
        let meta = metadata_mut(&mut value);
        meta.insert("name".into(), json!(key.name));
        if !key.namespace.is_empty() {
            meta.insert("namespace".into(), json!(key.namespace));
        }
        meta.insert("uid".into(), json!(format!("uid-{uid}")));
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
        meta.insert("generation".into(), json!(1));
        meta.insert("creationTimestamp".into(), timestamp());
        self.objects.insert(key.clone(), value.clone());
        value
    }

    fn record(&mut self, verb: Verb, key: &Key, changed: bool) {
        self.writes.push(Write {
            verb,
            kind: key.kind.clone(),
            namespace: key.namespace(),
            name: key.name.clone(),
            changed,
        });
    }
}

fn dynamic(value: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(value)?)
}

#[async_trait]
impl Reader for Double {
    async fn get_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<DynamicObject>> {
        let mut state = self.lock();
        Double::injected(&mut state, Verb::Get, &resource.kind)?;
        let key = Key::new(resource, namespace, name);
        state.objects.get(&key).cloned().map(dynamic).transpose()
    }

    async fn list_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Result<Vec<DynamicObject>> {
        let mut state = self.lock();
        Double::injected(&mut state, Verb::List, &resource.kind)?;
        state
            .objects
            .iter()
            .filter(|(k, _)| k.api_version == resource.api_version && k.kind == resource.kind)
            .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
            .filter(|(_, v)| {
                let labels: BTreeMap<String, String> = metadata(v)
                    .and_then(|m| m.get("labels"))
                    .and_then(|l| serde_json::from_value(l.clone()).ok())
                    .unwrap_or_default();
                selector.matches(&labels)
            })
            .map(|(_, v)| dynamic(v.clone()))
            .collect()
    }
}

#[async_trait]
impl Writer for Double {
    async fn create_dynamic(
        &self,
        resource: &ApiResource,
        object: &DynamicObject,
    ) -> Result<DynamicObject> {
        let mut state = self.lock();
        Double::injected(&mut state, Verb::Create, &resource.kind)?;
        let body = serde_json::to_value(object)?;
        let name = match (&object.metadata.name, &object.metadata.generate_name) {
            (Some(name), _) => name.clone(),
            (None, Some(prefix)) => format!("{prefix}{:05}", state.uids + 1),
            (None, None) => {
                return Err(Error::Invalid(
                    "metadata.name or generateName is required".into(),
                ));
            }
        };
        let key = Key::new(resource, object.metadata.namespace.as_deref(), &name);
        if state.objects.contains_key(&key) {
            return Err(Error::AlreadyExists(key.describe()));
        }
        if meta_str(&body, "resourceVersion").is_some() {
            return Err(Error::Invalid(format!(
                "{}: resourceVersion should not be set on objects to be created",
                key.describe()
            )));
        }
        let created = state.create(resource, &key, &body);
        state.record(Verb::Create, &key, true);
        dynamic(created)
    }

    async fn apply_dynamic(
        &self,
        resource: &ApiResource,
        object: &DynamicObject,
        field_manager: Option<&str>,
    ) -> Result<Applied<DynamicObject>> {
        let mut state = self.lock();
        Double::injected(&mut state, Verb::Apply, &resource.kind)?;
        let name = require_name(object)?;
        let key = Key::new(resource, object.metadata.namespace.as_deref(), &name);
        let manager = field_manager.unwrap_or(FIELD_MANAGER).to_string();
        let body = serde_json::to_value(object)?;
        let fields = user_fields(&body);
        let Some(current) = state.objects.get(&key).cloned() else {
            if meta_str(&body, "resourceVersion").is_some() {
                return Err(Error::NotFound(key.describe()));
            }
            let created = state.create(resource, &key, &body);
            state.applied.insert((key.clone(), manager), fields);
            state.record(Verb::Apply, &key, true);
            return Ok(Applied {
                object: dynamic(created)?,
                changed: true,
            });
        };
        check_resource_version(&body, &current, &key.describe())?;
        let mut next = current.clone();
        let previous = state
            .applied
            .get(&(key.clone(), manager.clone()))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let others: Vec<Value> = state
            .applied
            .iter()
            .filter(|((k, m), _)| *k == key && *m != manager)
            .map(|(_, v)| v.clone())
            .collect();
        let others: Vec<&Value> = others.iter().collect();
        apply_owner_references(&mut next, &previous, &fields, &others);
        let plain: Vec<Value> = others.iter().map(|o| without_owner_references(o)).collect();
        let plain: Vec<&Value> = plain.iter().collect();
        let body_fields = without_owner_references(&fields);
        remove_omitted(
            &mut next,
            &without_owner_references(&previous),
            &body_fields,
            &plain,
        );
        merge(&mut next, &body_fields);
        let committed = state.commit(&key, next, false)?;
        state.applied.insert((key.clone(), manager), fields);
        let (value, changed) = match committed {
            Committed::Stored(v, changed) => (v, changed),
            Committed::Removed(v) => (v, true),
        };
        state.record(Verb::Apply, &key, changed);
        Ok(Applied {
            object: dynamic(value)?,
            changed,
        })
    }

    async fn patch_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<Applied<DynamicObject>> {
        let mut state = self.lock();
        Double::injected(&mut state, Verb::Patch, &resource.kind)?;
        let key = Key::new(resource, namespace, name);
        let current = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| Error::NotFound(key.describe()))?;
        let mut next = current.clone();
        match patch {
            Patch::Merge(body) => {
                check_resource_version(body, &current, &key.describe())?;
                json_patch::merge(&mut next, body);
            }
            Patch::Json(ops) => {
                json_patch::patch(&mut next, ops)
                    .map_err(|e| Error::Invalid(format!("{}: {e}", key.describe())))?;
            }
        }
        let (value, changed) = match state.commit(&key, next, false)? {
            Committed::Stored(v, changed) => (v, changed),
            Committed::Removed(v) => (v, true),
        };
        state.record(Verb::Patch, &key, changed);
        Ok(Applied {
            object: dynamic(value)?,
            changed,
        })
    }

    async fn delete_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
        _propagation: Option<PropagationPolicy>,
    ) -> Result<Deleted> {
        let mut state = self.lock();
        Double::injected(&mut state, Verb::Delete, &resource.kind)?;
        let key = Key::new(resource, namespace, name);
        let Some(current) = state.objects.get(&key).cloned() else {
            return Ok(Deleted::NotFound);
        };
        if let Some(uid) = &preconditions.uid
            && Some(uid.as_str()) != meta_str(&current, "uid")
        {
            return Err(Error::Conflict(format!(
                "{}: precondition failed: uid {uid} does not match",
                key.describe()
            )));
        }
        if let Some(rv) = &preconditions.resource_version
            && Some(rv.as_str()) != meta_str(&current, "resourceVersion")
        {
            return Err(Error::Conflict(format!(
                "{}: precondition failed: resourceVersion {rv} does not match",
                key.describe()
            )));
        }
        if finalizers(&current).is_empty() {
            state.remove(&key);
            state.record(Verb::Delete, &key, true);
            return Ok(Deleted::Gone);
        }
        if metadata(&current).is_some_and(|m| m.contains_key("deletionTimestamp")) {
            state.record(Verb::Delete, &key, false);
            return Ok(Deleted::Pending(dynamic(current)?));
        }
        let mut next = current;
        state.revision += 1;
        let revision = state.revision.to_string();
        let meta = metadata_mut(&mut next);
        meta.insert("deletionTimestamp".into(), timestamp());
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        meta.insert("resourceVersion".into(), json!(revision));
        state.objects.insert(key.clone(), next.clone());
        state.record(Verb::Delete, &key, true);
        Ok(Deleted::Pending(dynamic(next)?))
    }

    /// Sets `spec.replicas`, as the scale subresource of any kind would; the `Scale` reports
    /// `status.replicas` and `status.selector` (or `status.hpaPodSelector`) when present.
    async fn scale_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        replicas: i32,
    ) -> Result<Applied<Scale>> {
        let mut state = self.lock();
        Double::injected(&mut state, Verb::Scale, &resource.kind)?;
        let key = Key::new(resource, namespace, name);
        let current = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| Error::NotFound(key.describe()))?;
        let mut next = current.clone();
        json_patch::merge(&mut next, &json!({"spec": {"replicas": replicas}}));
        let (value, changed) = match state.commit(&key, next, false)? {
            Committed::Stored(v, changed) => (v, changed),
            Committed::Removed(v) => (v, true),
        };
        state.record(Verb::Scale, &key, changed);
        let status = value.get("status");
        let selector = status
            .and_then(|s| s.get("selector").or_else(|| s.get("hpaPodSelector")))
            .and_then(Value::as_str)
            .map(str::to_string);
        let scale = Scale {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: namespace.map(str::to_string),
                uid: meta_str(&value, "uid").map(str::to_string),
                resource_version: meta_str(&value, "resourceVersion").map(str::to_string),
                ..Default::default()
            },
            spec: Some(ScaleSpec {
                replicas: Some(replicas),
            }),
            status: Some(ScaleStatus {
                replicas: status
                    .and_then(|s| s.get("replicas"))
                    .and_then(Value::as_i64)
                    .and_then(|r| i32::try_from(r).ok())
                    .unwrap_or(0),
                selector,
            }),
        };
        Ok(Applied {
            object: scale,
            changed,
        })
    }
}

#[async_trait]
impl StatusWriter for Double {
    async fn apply_status_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        status: &Value,
    ) -> Result<Applied<DynamicObject>> {
        let mut state = self.lock();
        Double::injected(&mut state, Verb::ApplyStatus, &resource.kind)?;
        let key = Key::new(resource, namespace, name);
        let current = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| Error::NotFound(key.describe()))?;
        let mut next_status = current.get("status").cloned().unwrap_or_else(|| json!({}));
        if let Some(previous) = state.status_applied.get(&key) {
            remove_omitted(&mut next_status, previous, status, &[]);
        }
        merge(&mut next_status, status);
        let mut next = current;
        next.as_object_mut()
            .expect("objects are JSON objects")
            .insert("status".into(), next_status);
        let (value, changed) = match state.commit(&key, next, true)? {
            Committed::Stored(v, changed) => (v, changed),
            Committed::Removed(v) => (v, true),
        };
        state.status_applied.insert(key.clone(), status.clone());
        state.record(Verb::ApplyStatus, &key, changed);
        Ok(Applied {
            object: dynamic(value)?,
            changed,
        })
    }
}

#[async_trait]
impl EventSink for Double {
    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<()> {
        let mut state = self.lock();
        Double::injected(
            &mut state,
            Verb::Publish,
            regarding.kind.as_deref().unwrap_or_default(),
        )?;
        state.events.push(PublishedEvent {
            event: event.clone(),
            regarding: regarding.clone(),
        });
        Ok(())
    }
}

/// Convert a typed object for a call on the double's dynamic methods.
pub fn typed<K: Kind>(object: DynamicObject) -> K {
    from_dynamic(object).expect("object converts")
}
