//! Which optional kinds the cluster serves, shared by everything that depends on them.
//!
//! [`Served`] is a set of kinds (`apiVersion/Kind`, as [`crate::cache::resource_key`] spells
//! them) that one party keeps current (in an operator: from a watch of the CRDs and API services
//! that provide them) and every other party reads: reconcilers ask [`Served::serves`] instead of
//! calling the API server, [`crate::cache::Cache::watch_while_served`] runs a kind's watch only
//! while the kind is in the set, and [`Served::subscribe`] tells anyone else of each change.
//! Clones share the set; the default set is empty (nothing optional is served).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use kube::Resource;
use kube::api::ApiResource;
use tokio::sync::watch;

use crate::cache::resource_key;

/// The set of served optional kinds. Cheap to clone; clones share the set.
#[derive(Clone)]
pub struct Served {
    kinds: Arc<watch::Sender<BTreeSet<String>>>,
}

impl Default for Served {
    fn default() -> Self {
        Served {
            kinds: Arc::new(watch::Sender::new(BTreeSet::new())),
        }
    }
}

impl fmt::Debug for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.kinds.borrow().iter()).finish()
    }
}

impl Served {
    /// Nothing served.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set serving exactly `resources`.
    pub fn of<'a>(resources: impl IntoIterator<Item = &'a ApiResource>) -> Self {
        let served = Self::new();
        for resource in resources {
            served.set(resource, true);
        }
        served
    }

    /// Whether the kind of `resource` is served.
    pub fn serves(&self, resource: &ApiResource) -> bool {
        self.kinds.borrow().contains(&resource_key(resource))
    }

    /// Whether kind `K` is served.
    pub fn serves_kind<K: Resource<DynamicType = ()>>(&self) -> bool {
        self.serves(&crate::object::resource::<K>())
    }

    /// Records whether the kind of `resource` is served; `true` when that changed the set (and
    /// subscribers were told).
    pub fn set(&self, resource: &ApiResource, served: bool) -> bool {
        let key = resource_key(resource);
        self.kinds.send_if_modified(|kinds| {
            if served {
                kinds.insert(key)
            } else {
                kinds.remove(&key)
            }
        })
    }

    /// The served kinds (`apiVersion/Kind`), sorted.
    pub fn kinds(&self) -> Vec<String> {
        self.kinds.borrow().iter().cloned().collect()
    }

    /// A receiver that sees every change of the set (it starts with the current set marked
    /// seen).
    pub fn subscribe(&self) -> watch::Receiver<BTreeSet<String>> {
        self.kinds.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn set_reports_changes_and_clones_share_the_set() {
        let served = Served::new();
        let other = served.clone();
        let deployments = crate::object::resource::<Deployment>();
        assert!(!served.serves(&deployments));
        let mut changes = served.subscribe();
        assert!(served.set(&deployments, true));
        assert!(!served.set(&deployments, true), "already served");
        assert!(other.serves_kind::<Deployment>());
        assert!(!other.serves_kind::<ConfigMap>());
        assert!(changes.has_changed().unwrap());
        assert_eq!(
            changes.borrow_and_update().iter().collect::<Vec<_>>(),
            ["apps/v1/Deployment"]
        );
        assert!(other.set(&deployments, false));
        assert!(!served.serves(&deployments));
        assert!(changes.has_changed().unwrap());
        assert!(!served.set(&deployments, false), "already not served");
        assert_eq!(
            Served::of([&deployments]).kinds(),
            ["apps/v1/Deployment".to_string()]
        );
    }
}
