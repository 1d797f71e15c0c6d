//! A [`Writer`] limited to some kinds: a program gives each nested step a writer for the kinds it
//! owns, so a step cannot write anything else (the graph itself included).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v1::Scale;
use kube::Resource;
use kube::api::{ApiResource, DynamicObject, Preconditions, PropagationPolicy};

use crate::capability::{Applied, Deleted, Patch, Writer};
use crate::error::{Error, Result};
use crate::object::resource;
use crate::takeover::Predecessor;
use serde_json::Value;

/// A writer for the kinds it was given ([`Scoped::allow`]); a write of any other kind is refused
/// with [`Error::Forbidden`] before any request is made.
#[derive(Clone)]
pub struct Scoped {
    inner: Arc<dyn Writer>,
    kinds: Vec<(String, String)>,
}

impl Scoped {
    /// A writer over `inner` that allows no kind yet.
    pub fn new(inner: Arc<dyn Writer>) -> Self {
        Scoped {
            inner,
            kinds: Vec::new(),
        }
    }

    /// Also allow writes of `K`.
    pub fn allow<K: Resource<DynamicType = ()>>(self) -> Self {
        self.allow_resource(&resource::<K>())
    }

    /// Also allow writes of the kind `resource`.
    pub fn allow_resource(mut self, resource: &ApiResource) -> Self {
        self.kinds
            .push((resource.group.clone(), resource.kind.clone()));
        self
    }

    /// The writer, shareable.
    pub fn build(self) -> Arc<dyn Writer> {
        Arc::new(self)
    }

    fn check(&self, resource: &ApiResource) -> Result<()> {
        let allowed = self
            .kinds
            .iter()
            .any(|(group, kind)| *group == resource.group && *kind == resource.kind);
        if allowed {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "this step may not write {} ({}): its writer is scoped to {}",
            resource.kind,
            resource.api_version,
            self.kinds
                .iter()
                .map(|(_, kind)| kind.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

#[async_trait]
impl Writer for Scoped {
    async fn create_dynamic(
        &self,
        resource: &ApiResource,
        object: &DynamicObject,
    ) -> Result<DynamicObject> {
        self.check(resource)?;
        self.inner.create_dynamic(resource, object).await
    }

    async fn apply_dynamic(
        &self,
        resource: &ApiResource,
        object: &DynamicObject,
        field_manager: Option<&str>,
    ) -> Result<Applied<DynamicObject>> {
        self.check(resource)?;
        self.inner
            .apply_dynamic(resource, object, field_manager)
            .await
    }

    async fn patch_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<Applied<DynamicObject>> {
        self.check(resource)?;
        self.inner
            .patch_dynamic(resource, namespace, name, patch)
            .await
    }

    async fn delete_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
        propagation: Option<PropagationPolicy>,
    ) -> Result<Deleted> {
        self.check(resource)?;
        self.inner
            .delete_dynamic(resource, namespace, name, preconditions, propagation)
            .await
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
        self.check(resource)?;
        self.inner
            .take_over_dynamic(resource, namespace, name, predecessor, manager, desired)
            .await
    }

    async fn scale_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        replicas: i32,
    ) -> Result<Applied<Scale>> {
        self.check(resource)?;
        self.inner
            .scale_dynamic(resource, namespace, name, replicas)
            .await
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::capability::WriterExt;
    use crate::testing::Double;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn named<K: Default + Resource<Scope = k8s_openapi::NamespaceResourceScope>>(name: &str) -> K {
        let mut object = K::default();
        *object.meta_mut() = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        object
    }

    #[tokio::test]
    async fn writes_only_the_kinds_it_was_given() {
        let d = Double::new();
        let writer = Scoped::new(d.writer()).allow::<ConfigMap>().build();
        writer.create(&named::<ConfigMap>("a")).await.unwrap();
        let refused = writer.create(&named::<Secret>("s")).await.unwrap_err();
        assert!(refused.is_forbidden(), "{refused}");
        assert!(refused.to_string().contains("Secret"), "{refused}");
        assert!(
            refused.to_string().contains("scoped to ConfigMap"),
            "{refused}"
        );
        let refused = writer
            .delete::<Secret>(Some("ns"), "s", &Preconditions::default(), None)
            .await
            .unwrap_err();
        assert!(refused.is_forbidden());
        assert_eq!(d.writes().len(), 1, "a refused write makes no request");
    }
}
