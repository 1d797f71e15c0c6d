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

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v1::Scale;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch as KubePatch, PatchParams, PostParams,
    Preconditions, PropagationPolicy,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::cache::Cache;
use crate::capability::{Applied, Deleted, Patch, StatusWriter, Writer, require_name};
use crate::error::{Error, Result};
use crate::object::{Deep, key, strip_managed_fields};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct MemoKey {
    kind: String,
    namespace: Option<String>,
    name: String,
    manager: String,
}

#[derive(Clone, Debug)]
struct Memo {
    body: Value,
    resource_version: Option<String>,
}

/// Writes ordinary resources with server-side apply under a field manager.
pub struct KubeWriter {
    client: Client,
    field_manager: String,
    cache: Option<Cache>,
    memo: Mutex<HashMap<MemoKey, Memo>>,
}

impl KubeWriter {
    /// A writer applying as `field_manager` by default.
    pub fn new(client: Client, field_manager: &str) -> Self {
        KubeWriter {
            client,
            field_manager: field_manager.to_string(),
            cache: None,
            memo: Mutex::new(HashMap::new()),
        }
    }

    /// Use `cache` to know the current revision of objects and to skip no-op applies.
    pub fn with_cache(mut self, cache: Cache) -> Self {
        self.cache = Some(cache);
        self
    }

    fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<Deep<DynamicObject>> {
        dynamic_api(&self.client, resource, namespace)
    }

    fn forget(&self, resource: &ApiResource, namespace: Option<&str>, name: &str) {
        self.memo.lock().expect("memo lock").retain(|k, _| {
            !(k.kind == kind_of(resource) && k.namespace.as_deref() == namespace && k.name == name)
        });
    }
}

fn kind_of(resource: &ApiResource) -> String {
    format!("{}/{}", resource.api_version, resource.kind)
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
        let memo_key = MemoKey {
            kind: kind_of(resource),
            namespace: namespace.clone(),
            name: name.clone(),
            manager: manager.clone(),
        };
        let memo = self.memo.lock().expect("memo lock").get(&memo_key).cloned();
        let cached = self
            .cache
            .as_ref()
            .and_then(|c| c.cached(resource, ns, &name));

        if let (Some(memo), Some(Some(current))) = (&memo, &cached)
            && memo.body == body
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
        self.memo.lock().expect("memo lock").insert(
            memo_key,
            Memo {
                body,
                resource_version: after,
            },
        );
        Ok(Applied {
            object: applied,
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
        self.forget(resource, namespace, name);
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
    use super::newest;

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
