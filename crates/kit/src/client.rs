//! Production writers: [`KubeWriter`] (server-side apply, create, patch, delete) and
//! [`KubeStatusWriter`] (server-side apply on the status subresource).
//!
//! # `changed`
//! A write reports `changed: true` exactly when the object's `resourceVersion` after the write
//! differs from the newest revision known before it (the cache's, or this writer's own last
//! result). The API server does not persist a server-side apply that changes nothing, so its
//! `resourceVersion` stays put and the apply reports `changed: false`. When nothing is known about
//! the object (an uncached kind), the writer reads it first, live. A write that removes the last
//! finalizer of an object being deleted (and so deletes it) is always a change.
//!
//! # Skipping no-op applies
//! With a [`Cache`] attached, [`KubeWriter`] issues **no request** for an apply when all hold:
//! 1. this writer applied the identical body (same JSON, same field manager) to the same object
//!    before, and that apply returned `resourceVersion` R;
//! 2. the cache is authoritative for the object (see [`crate::cache`]) and holds it at
//!    `resourceVersion` R, i.e. nobody has written it since.
//!
//! Applying the same configuration to an unchanged object is a no-op by definition, so the
//! skipped apply reports `changed: false` and the cached object. Anything else (a first apply
//! after start, a different body, any foreign write, a cache that lags) sends the request and lets
//! the server decide. A cache that lags behind a foreign write can make one apply skip; the watch
//! event of that write then triggers a reconcile whose apply is sent.
//!
//! # What the writer remembers
//! Per object and field manager, a digest of the last applied body and the resourceVersion the
//! apply returned; nothing else. An object's entries are dropped when it leaves the cache
//! (deleted by anyone, see [`Cache::on_deleted`]) or when this writer deletes it, and the memo
//! never holds more than [`MEMO_CAPACITY`] objects (the least recently used go first: objects of
//! kinds the cache does not watch, whose deletion is never seen). Forgetting costs at most one
//! apply that could have been skipped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v1::Scale;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch as KubePatch, PatchParams, PostParams,
    Preconditions, PropagationPolicy,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::cache::{Cache, Gone};
use crate::capability::{Applied, Deleted, Patch, StatusWriter, Writer, require_name};
use crate::error::{Error, Result};
use crate::object::{Deep, key, strip_managed_fields};
use crate::takeover::{self, Predecessor};

/// The most objects a writer remembers applies of (a few hundred bytes each).
pub const MEMO_CAPACITY: usize = 65_536;

/// An object: `apiVersion/Kind`, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjectKey {
    kind: String,
    namespace: Option<String>,
    name: String,
}

impl ObjectKey {
    fn new(resource: &ApiResource, namespace: Option<&str>, name: &str) -> Self {
        ObjectKey {
            kind: crate::cache::resource_key(resource),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }
}

/// The last apply of one field manager to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Memo {
    digest: [u8; 32],
    resource_version: Option<String>,
}

/// What a writer applied, per object and field manager, bounded by `capacity` objects.
#[derive(Debug)]
struct Memos {
    capacity: usize,
    table: Mutex<MemoTable>,
}

#[derive(Debug, Default)]
struct MemoTable {
    /// Per object: the tick of its last use, and each field manager's last apply.
    objects: HashMap<ObjectKey, (u64, Vec<(String, Memo)>)>,
    tick: u64,
}

impl Memos {
    fn new(capacity: usize) -> Self {
        Memos {
            capacity: capacity.max(2),
            table: Mutex::default(),
        }
    }

    fn get(&self, key: &ObjectKey, manager: &str) -> Option<Memo> {
        let mut table = self.table.lock().expect("memo lock");
        table.tick += 1;
        let tick = table.tick;
        let (used, memos) = table.objects.get_mut(key)?;
        *used = tick;
        memos
            .iter()
            .find(|(m, _)| m == manager)
            .map(|(_, memo)| memo.clone())
    }

    fn put(&self, key: ObjectKey, manager: &str, memo: Memo) {
        let mut table = self.table.lock().expect("memo lock");
        table.tick += 1;
        let tick = table.tick;
        let (used, memos) = table.objects.entry(key).or_default();
        *used = tick;
        match memos.iter_mut().find(|(m, _)| m == manager) {
            Some((_, old)) => *old = memo,
            None => memos.push((manager.to_string(), memo)),
        }
        if table.objects.len() > self.capacity {
            table.evict(self.capacity / 2);
        }
    }

    fn forget(&self, key: &ObjectKey) {
        self.table.lock().expect("memo lock").objects.remove(key);
    }

    fn len(&self) -> usize {
        self.table.lock().expect("memo lock").objects.len()
    }
}

impl MemoTable {
    /// Keeps the `keep` most recently used objects.
    fn evict(&mut self, keep: usize) {
        let mut ticks: Vec<u64> = self.objects.values().map(|(used, _)| *used).collect();
        if ticks.len() <= keep {
            return;
        }
        let cut = ticks.len() - keep;
        let (_, oldest_kept, _) = ticks.select_nth_unstable(cut);
        let oldest_kept = *oldest_kept;
        self.objects.retain(|_, (used, _)| *used >= oldest_kept);
        self.objects.shrink_to_fit();
    }
}

/// The digest of an apply body (serde_json writes object keys sorted, so equal bodies give equal
/// bytes).
fn digest(body: &Value) -> Result<[u8; 32]> {
    use sha2::Digest;
    Ok(sha2::Sha256::digest(serde_json::to_vec(body)?).into())
}

/// Writes ordinary resources with server-side apply under a field manager.
pub struct KubeWriter {
    client: Client,
    field_manager: String,
    cache: Option<Cache>,
    memo: Arc<Memos>,
}

impl KubeWriter {
    /// A writer applying as `field_manager` by default.
    pub fn new(client: Client, field_manager: &str) -> Self {
        KubeWriter {
            client,
            field_manager: field_manager.to_string(),
            cache: None,
            memo: Arc::new(Memos::new(MEMO_CAPACITY)),
        }
    }

    /// Use `cache` to know the current revision of objects and to skip no-op applies; what the
    /// writer remembers of an object is dropped when the object leaves the cache.
    pub fn with_cache(mut self, cache: Cache) -> Self {
        let memo = Arc::downgrade(&self.memo);
        cache.on_deleted(move |gone: Gone<'_>| {
            if let Some(memo) = memo.upgrade() {
                memo.forget(&ObjectKey {
                    kind: gone.kind.to_string(),
                    namespace: gone.namespace.map(str::to_string),
                    name: gone.name.to_string(),
                });
            }
        });
        self.cache = Some(cache);
        self
    }

    /// How many objects this writer remembers an apply of.
    pub fn remembered(&self) -> usize {
        self.memo.len()
    }

    fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<Deep<DynamicObject>> {
        dynamic_api(&self.client, resource, namespace)
    }
}

/// An API for `resource` whose responses decode objects nested up to
/// [`crate::object::MAX_DEPTH`] levels.
fn dynamic_api(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<Deep<DynamicObject>> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// The newer of two resourceVersions (etcd revisions are numeric; otherwise prefer `a`).
fn newest(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(x), Ok(y)) if y > x => Some(b),
            _ => Some(a),
        },
        (a, b) => a.or(b),
    }
}

/// Whether a write removed the last finalizer of an object being deleted. The API server then
/// deletes the object and answers with its last state, at the revision it had before the write.
fn finalized(object: &DynamicObject) -> bool {
    object.metadata.deletion_timestamp.is_some() && object.finalizers().is_empty()
}

/// The resourceVersion of the object before a write: from the cache when it is authoritative,
/// else from a live read.
async fn revision_before(
    client: &Client,
    cache: Option<&Cache>,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<String>> {
    if let Some(cached) = cache.and_then(|c| c.cached(resource, namespace, name)) {
        return Ok(cached.and_then(|o| o.resource_version()));
    }
    let live = dynamic_api(client, resource, namespace)
        .get_metadata_opt(name)
        .await?;
    Ok(live.and_then(|o| o.resource_version()))
}

#[async_trait]
impl Writer for KubeWriter {
    async fn create_dynamic(
        &self,
        resource: &ApiResource,
        object: &DynamicObject,
    ) -> Result<DynamicObject> {
        let namespace = object.namespace();
        let params = PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        };
        let mut created = self
            .api(resource, namespace.as_deref())
            .create(&params, &Deep(object.clone()))
            .await?
            .0;
        strip_managed_fields(&mut created);
        tracing::debug!(kind = %resource.kind, object = %key(namespace.as_deref(), &created.name_any()), "created");
        Ok(created)
    }

    async fn apply_dynamic(
        &self,
        resource: &ApiResource,
        object: &DynamicObject,
        field_manager: Option<&str>,
    ) -> Result<Applied<DynamicObject>> {
        let name = require_name(object)?;
        let namespace = object.namespace();
        let ns = namespace.as_deref();
        let manager = field_manager.unwrap_or(&self.field_manager).to_string();
        let mut body = serde_json::to_value(object)?;
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        let memo_key = ObjectKey::new(resource, ns, &name);
        let body_digest = digest(&body)?;
        let memo = self.memo.get(&memo_key, &manager);
        let cached = self
            .cache
            .as_ref()
            .and_then(|c| c.cached(resource, ns, &name));

        if let (Some(memo), Some(Some(current))) = (&memo, &cached)
            && memo.digest == body_digest
            && memo.resource_version.is_some()
            && current.resource_version() == memo.resource_version
        {
            tracing::debug!(kind = %resource.kind, object = %key(ns, &name), "apply: unchanged since last apply; skipped");
            return Ok(Applied {
                object: current.clone(),
                changed: false,
            });
        }

        let before = match &cached {
            Some(current) => newest(
                memo.as_ref().and_then(|m| m.resource_version.clone()),
                current.as_ref().and_then(|c| c.resource_version()),
            ),
            None => match &memo {
                Some(m) => m.resource_version.clone(),
                None => revision_before(&self.client, None, resource, ns, &name).await?,
            },
        };
        let params = PatchParams::apply(&manager).force();
        let mut applied = self
            .api(resource, ns)
            .patch(&name, &params, &KubePatch::Apply(&body))
            .await?
            .0;
        strip_managed_fields(&mut applied);
        let after = applied.resource_version();
        let changed = before.is_none() || before != after || finalized(&applied);
        tracing::debug!(kind = %resource.kind, object = %key(ns, &name), changed, "applied");
        self.memo.put(
            memo_key,
            &manager,
            Memo {
                digest: body_digest,
                resource_version: after,
            },
        );
        Ok(Applied {
            object: applied,
            changed,
        })
    }

    async fn take_over_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        predecessor: &Predecessor,
        manager: &str,
        desired: &Value,
    ) -> Result<bool> {
        let api = self.api(resource, namespace);
        let Some(Deep(live)) = api.get_opt(name).await? else {
            return Ok(false);
        };
        let entries = live.metadata.managed_fields.as_deref().unwrap_or_default();
        let Some(fields) = takeover::transfer(entries, predecessor, manager, desired) else {
            return Ok(false);
        };
        let ops: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": live.resource_version()},
            {"op": "replace", "path": "/metadata/managedFields", "value": fields},
        ]))?;
        let params = PatchParams {
            field_manager: Some(manager.to_string()),
            ..PatchParams::default()
        };
        api.patch(name, &params, &KubePatch::Json::<()>(ops))
            .await?;
        tracing::info!(kind = %resource.kind, object = %key(namespace, name), from = predecessor.manager, "took over the fields we set");
        Ok(true)
    }

    async fn patch_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<Applied<DynamicObject>> {
        let before =
            revision_before(&self.client, self.cache.as_ref(), resource, namespace, name).await?;
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let api = self.api(resource, namespace);
        let mut patched = match patch {
            Patch::Merge(value) => api.patch(name, &params, &KubePatch::Merge(value)).await?.0,
            Patch::Json(ops) => {
                api.patch(name, &params, &KubePatch::Json::<()>(ops.clone()))
                    .await?
                    .0
            }
        };
        strip_managed_fields(&mut patched);
        let changed = before != patched.resource_version() || finalized(&patched);
        tracing::debug!(kind = %resource.kind, object = %key(namespace, name), changed, "patched");
        Ok(Applied {
            object: patched,
            changed,
        })
    }

    async fn delete_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
        propagation: Option<PropagationPolicy>,
    ) -> Result<Deleted> {
        let params = DeleteParams {
            preconditions: Some(preconditions.clone()),
            propagation_policy: propagation,
            ..DeleteParams::default()
        };
        self.memo.forget(&ObjectKey::new(resource, namespace, name));
        let result = self.api(resource, namespace).delete(name, &params).await;
        let deleted = match result.map(|response| response.left()) {
            // The API server returns the object while it still exists (finalizers or graceful
            // deletion pending), and a Status or the final object once it is gone.
            Ok(Some(Deep(mut object))) if object.metadata.deletion_timestamp.is_some() => {
                strip_managed_fields(&mut object);
                Deleted::Pending(object)
            }
            Ok(_) => Deleted::Gone,
            Err(err) => match Error::from(err) {
                Error::NotFound(_) => Deleted::NotFound,
                other => return Err(other),
            },
        };
        tracing::debug!(kind = %resource.kind, object = %key(namespace, name), ?deleted, "deleted");
        Ok(deleted)
    }

    async fn scale_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        replicas: i32,
    ) -> Result<Applied<Scale>> {
        let before =
            revision_before(&self.client, self.cache.as_ref(), resource, namespace, name).await?;
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let patch = json!({"spec": {"replicas": replicas}});
        let scale = self
            .api(resource, namespace)
            .patch_scale(name, &params, &KubePatch::Merge(&patch))
            .await?;
        let changed = before != scale.metadata.resource_version;
        tracing::debug!(kind = %resource.kind, object = %key(namespace, name), replicas, changed, "scaled");
        Ok(Applied {
            object: scale,
            changed,
        })
    }
}

/// Writes the status subresource with server-side apply under a field manager.
pub struct KubeStatusWriter {
    client: Client,
    field_manager: String,
    cache: Option<Cache>,
}

impl KubeStatusWriter {
    /// A status writer applying as `field_manager`.
    pub fn new(client: Client, field_manager: &str) -> Self {
        KubeStatusWriter {
            client,
            field_manager: field_manager.to_string(),
            cache: None,
        }
    }

    /// Use `cache` to know the current revision of objects.
    pub fn with_cache(mut self, cache: Cache) -> Self {
        self.cache = Some(cache);
        self
    }
}

#[async_trait]
impl StatusWriter for KubeStatusWriter {
    async fn apply_status_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        status: &Value,
    ) -> Result<Applied<DynamicObject>> {
        let before =
            revision_before(&self.client, self.cache.as_ref(), resource, namespace, name).await?;
        let mut metadata = json!({ "name": name });
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        let body = json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": metadata,
            "status": status,
        });
        let params = PatchParams::apply(&self.field_manager).force();
        let mut applied = dynamic_api(&self.client, resource, namespace)
            .patch_status(name, &params, &KubePatch::Apply(&body))
            .await?
            .0;
        strip_managed_fields(&mut applied);
        let changed = before != applied.resource_version();
        tracing::debug!(kind = %resource.kind, object = %key(namespace, name), changed, "status applied");
        Ok(Applied {
            object: applied,
            changed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: "v1/ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    fn memo(rv: &str) -> Memo {
        Memo {
            digest: digest(&serde_json::json!({"rv": rv})).unwrap(),
            resource_version: Some(rv.into()),
        }
    }

    #[test]
    fn memo_keeps_each_managers_last_apply_and_forgets_the_object() {
        let memos = Memos::new(8);
        memos.put(key("a"), "one", memo("1"));
        memos.put(key("a"), "two", memo("2"));
        memos.put(key("a"), "one", memo("3"));
        assert_eq!(memos.get(&key("a"), "one"), Some(memo("3")));
        assert_eq!(memos.get(&key("a"), "two"), Some(memo("2")));
        assert_eq!(memos.get(&key("a"), "three"), None);
        assert_eq!(memos.len(), 1);
        memos.forget(&key("a"));
        assert_eq!(memos.get(&key("a"), "one"), None);
        assert_eq!(memos.len(), 0);
    }

    #[test]
    fn memo_is_bounded_and_keeps_the_recently_used() {
        let memos = Memos::new(100);
        memos.put(key("hot"), "m", memo("1"));
        for i in 0..10_000 {
            memos.put(key(&format!("o{i}")), "m", memo("1"));
            if i % 10 == 0 {
                assert!(memos.get(&key("hot"), "m").is_some(), "evicted at {i}");
            }
            assert!(memos.len() <= 100);
        }
        assert!(memos.get(&key("o9999"), "m").is_some());
        assert!(memos.get(&key("o0"), "m").is_none());
    }

    #[test]
    fn digest_is_independent_of_key_order() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":{"c":2,"d":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"d":3,"c":2},"a":1}"#).unwrap();
        assert_eq!(digest(&a).unwrap(), digest(&b).unwrap());
        assert_ne!(
            digest(&a).unwrap(),
            digest(&serde_json::json!({"a": 2})).unwrap()
        );
    }

    #[test]
    fn newest_prefers_the_higher_numeric_revision() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(newest(s("5"), s("7")), s("7"));
        assert_eq!(newest(s("9"), s("7")), s("9"));
        assert_eq!(newest(None, s("7")), s("7"));
        assert_eq!(newest(s("a"), s("b")), s("a"));
        assert_eq!(newest(None, None), None);
    }
}
