//! The capabilities: [`Reader`], [`Writer`], [`StatusWriter`] and [`EventSink`].
//!
//! Each capability is an object-safe trait over the dynamic form of an object
//! ([`DynamicObject`] plus its [`ApiResource`]), so a reconciler holds `Arc<dyn Reader>` and one
//! in-memory double serves every kind. Typed access goes through the extension traits
//! ([`ReaderExt`], [`WriterExt`], [`StatusWriterExt`]), implemented for every capability,
//! including `dyn` ones.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, DynamicObject, Preconditions, PropagationPolicy};
use kube::core::Selector;
use kube::{Resource, ResourceExt};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::object::{from_dynamic, resource, to_dynamic};
use crate::outcome::Event;
use crate::takeover::Predecessor;

/// Read access: get one object, list objects by namespace and labels.
///
/// Production reads are served from shared watch caches ([`crate::cache::Cache`]).
#[async_trait]
pub trait Reader: Send + Sync {
    /// The object, or `None` if it does not exist.
    async fn get_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<DynamicObject>>;

    /// The objects of a kind in `namespace` (`None`: all namespaces, or a cluster-scoped kind)
    /// whose labels match `selector`.
    async fn list_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Result<Vec<DynamicObject>>;

    /// The watch cache behind this reader, whose stores [`ReaderExt`] reads typed objects from
    /// without converting them (`None`: every read goes through the dynamic form).
    fn cache(&self) -> Option<&crate::cache::Cache> {
        None
    }
}

/// The result of a write that may or may not have changed anything.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied<K> {
    /// The object as the server holds it after the write.
    pub object: K,
    /// Whether the write changed the object. `false` for a no-op apply: callers emit mutation
    /// events only when this is `true`.
    pub changed: bool,
}

/// The result of a delete.
#[derive(Clone, Debug, PartialEq)]
pub enum Deleted<K = DynamicObject> {
    /// The object is gone.
    Gone,
    /// Deletion started but the object still exists (finalizers, graceful deletion); it carries a
    /// `deletionTimestamp`.
    Pending(K),
    /// There was nothing to delete.
    NotFound,
}

/// A patch that is not a server-side apply.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// JSON merge patch (RFC 7386). A `metadata.resourceVersion` in the body is a precondition.
    Merge(Value),
    /// JSON patch (RFC 6902); use `test` operations for preconditions.
    Json(json_patch::Patch),
}

/// Write access to ordinary resources: create, server-side apply, patch, delete.
///
/// A `Writer` cannot write the status subresource; that is the [`StatusWriter`] capability.
#[async_trait]
pub trait Writer: Send + Sync {
    /// Create the object; [`Error::AlreadyExists`] if its name is taken.
    async fn create_dynamic(
        &self,
        resource: &ApiResource,
        object: &DynamicObject,
    ) -> Result<DynamicObject>;

    /// Server-side apply the object's fields under `field_manager` (`None`: the writer's
    /// default), forcing conflicts. Reports whether anything changed.
    async fn apply_dynamic(
        &self,
        resource: &ApiResource,
        object: &DynamicObject,
        field_manager: Option<&str>,
    ) -> Result<Applied<DynamicObject>>;

    /// Patch the object; reports whether anything changed.
    async fn patch_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<Applied<DynamicObject>>;

    /// Delete the object if it still matches `preconditions` (else [`Error::Conflict`]).
    async fn delete_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
        propagation: Option<PropagationPolicy>,
    ) -> Result<Deleted>;

    /// Hand over to `manager` the fields of the object that `predecessor` wrote and `desired`
    /// sets or it releases ([`crate::takeover`]), with the object's `resourceVersion` as
    /// precondition; reports whether its `managedFields` changed (no field value does). Writers
    /// that keep no managed fields have nothing to take over.
    async fn take_over_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        predecessor: &Predecessor,
        manager: &str,
        desired: &Value,
    ) -> Result<bool> {
        let _ = (resource, namespace, name, predecessor, manager, desired);
        Ok(false)
    }

    /// Set `spec.replicas` of the object through its `scale` subresource (a merge patch of
    /// `{"spec":{"replicas":n}}` on `<resource>/<name>/scale`); reports whether anything
    /// changed. The kind must serve the scale subresource. Writers that cannot do this report
    /// [`Error::Unsupported`].
    async fn scale_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        replicas: i32,
    ) -> Result<Applied<Scale>> {
        let _ = (namespace, replicas);
        Err(Error::Unsupported(format!(
            "scale subresource of {} {name}",
            resource.kind
        )))
    }
}

/// Write access to the status subresource. Only a controller's top level holds one.
#[async_trait]
pub trait StatusWriter: Send + Sync {
    /// Server-side apply `status` as the whole `.status` owned by this writer's field manager.
    async fn apply_status_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        status: &Value,
    ) -> Result<Applied<DynamicObject>>;
}

/// Where Kubernetes Events go. Implemented by [`crate::events::Publisher`], kube's `Recorder`
/// and the double.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Publish `event` about the object `regarding`.
    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<()>;
}

/// Bounds of a kind the typed helpers accept.
pub trait Kind:
    Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}
impl<K> Kind for K where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

/// Bounds of a kind a watch cache holds and a controller runs on: a [`Kind`] that is also
/// `Debug`.
pub trait Cached: Kind + std::fmt::Debug {}
impl<K: Kind + std::fmt::Debug> Cached for K {}

/// Typed reads over any [`Reader`]. A read the watch cache answers from memory hands out its
/// stored object (no conversion through the dynamic form).
pub trait ReaderExt: Reader {
    /// The object of kind `K`, or `None`.
    fn get<K: Kind>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>>> + Send {
        async move {
            if let Some(cached) = self.cache().and_then(|c| c.get_typed::<K>(namespace, name)) {
                return Ok(cached.map(Arc::unwrap_or_clone));
            }
            match self.get_dynamic(&resource::<K>(), namespace, name).await? {
                Some(object) => Ok(Some(from_dynamic(object)?)),
                None => Ok(None),
            }
        }
    }

    /// The objects of kind `K` in `namespace` matching `selector`.
    fn list<K: Kind>(
        &self,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> impl Future<Output = Result<Vec<K>>> + Send {
        async move {
            let shared = self.list_shared::<K>(namespace, selector).await?;
            Ok(shared.into_iter().map(Arc::unwrap_or_clone).collect())
        }
    }

    /// [`ReaderExt::list`], each object shared with the cache that holds it: for a scan that
    /// keeps few of many objects.
    fn list_shared<K: Kind>(
        &self,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> impl Future<Output = Result<Vec<Arc<K>>>> + Send {
        async move {
            if let Some(cached) = self
                .cache()
                .and_then(|c| c.list_typed::<K>(namespace, selector))
            {
                return Ok(cached);
            }
            self.list_dynamic(&resource::<K>(), namespace, selector)
                .await?
                .into_iter()
                .map(|o| from_dynamic(o).map(Arc::new))
                .collect()
        }
    }
}
impl<T: Reader + ?Sized> ReaderExt for T {}

/// Typed writes over any [`Writer`].
pub trait WriterExt: Writer {
    /// Create `object`.
    fn create<K: Kind>(&self, object: &K) -> impl Future<Output = Result<K>> + Send {
        async move {
            let created = self
                .create_dynamic(&resource::<K>(), &to_dynamic(object)?)
                .await?;
            from_dynamic(created)
        }
    }

    /// Server-side apply `object` (its set fields are the applied configuration).
    fn apply<K: Kind>(
        &self,
        object: &K,
        field_manager: Option<&str>,
    ) -> impl Future<Output = Result<Applied<K>>> + Send {
        async move {
            let applied = self
                .apply_dynamic(&resource::<K>(), &to_dynamic(object)?, field_manager)
                .await?;
            Ok(Applied {
                object: from_dynamic(applied.object)?,
                changed: applied.changed,
            })
        }
    }

    /// Patch the object of kind `K`.
    fn patch<K: Kind>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> impl Future<Output = Result<Applied<K>>> + Send {
        async move {
            let applied = self
                .patch_dynamic(&resource::<K>(), namespace, name, patch)
                .await?;
            Ok(Applied {
                object: from_dynamic(applied.object)?,
                changed: applied.changed,
            })
        }
    }

    /// Set the replicas of the object of kind `K` through its `scale` subresource.
    fn scale<K: Kind>(
        &self,
        namespace: Option<&str>,
        name: &str,
        replicas: i32,
    ) -> impl Future<Output = Result<Applied<Scale>>> + Send {
        async move {
            self.scale_dynamic(&resource::<K>(), namespace, name, replicas)
                .await
        }
    }

    /// Delete the object of kind `K` if it matches `preconditions`.
    fn delete<K: Kind>(
        &self,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
        propagation: Option<PropagationPolicy>,
    ) -> impl Future<Output = Result<Deleted<K>>> + Send {
        async move {
            let deleted = self
                .delete_dynamic(
                    &resource::<K>(),
                    namespace,
                    name,
                    preconditions,
                    propagation,
                )
                .await?;
            Ok(match deleted {
                Deleted::Gone => Deleted::Gone,
                Deleted::NotFound => Deleted::NotFound,
                Deleted::Pending(object) => Deleted::Pending(from_dynamic(object)?),
            })
        }
    }
}
impl<T: Writer + ?Sized> WriterExt for T {}

/// Typed status writes over any [`StatusWriter`].
pub trait StatusWriterExt: StatusWriter {
    /// Apply `status` as the status of `object` (only its namespace and name are used).
    fn apply_status<K, S>(
        &self,
        object: &K,
        status: &S,
    ) -> impl Future<Output = Result<Applied<K>>> + Send
    where
        K: Kind,
        S: Serialize + Sync,
    {
        async move {
            let status = serde_json::to_value(status)?;
            let applied = self
                .apply_status_dynamic(
                    &resource::<K>(),
                    object.namespace().as_deref(),
                    &object.name_any(),
                    &status,
                )
                .await?;
            Ok(Applied {
                object: from_dynamic(applied.object)?,
                changed: applied.changed,
            })
        }
    }
}
impl<T: StatusWriter + ?Sized> StatusWriterExt for T {}

/// An object reference for events about `object`.
pub fn reference<K: Resource<DynamicType = ()>>(object: &K) -> ObjectReference {
    object.object_ref(&())
}

pub(crate) fn require_name(object: &DynamicObject) -> Result<String> {
    object
        .metadata
        .name
        .clone()
        .ok_or_else(|| Error::Invalid("metadata.name is required".into()))
}
