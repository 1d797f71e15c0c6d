//! The production Reader and Writers against a real control plane.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::cache::Cache;
use kit::client::KubeWriter;
use kit::{Deleted, Patch, Preconditions, Reader, ReaderExt, Selector, WriterExt};
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use testkit::{AuditEvent, ControlPlane};

fn cm(ns: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([("app".to_string(), "kit".to_string())])),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// A cache of ConfigMaps in `ns`, running in the background and synced.
async fn configmap_cache(client: Client, ns: &str) -> Cache {
    let cache = Cache::new(client.clone());
    cache
        .watch(
            Api::<ConfigMap>::namespaced(client, ns),
            watcher::Config::default(),
        )
        .unwrap();
    tokio::spawn(cache.run());
    tokio::time::timeout(Duration::from_secs(30), cache.wait_until_ready())
        .await
        .expect("cache synced");
    cache
}

/// Wait until the cache holds `name` at `resource_version`.
async fn cached_at(cache: &Cache, ns: &str, name: &str, resource_version: Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let current: Option<ConfigMap> = cache.get(Some(ns), name).await.unwrap();
        if current.and_then(|c| c.resource_version()) == resource_version {
            return;
        }
        assert!(Instant::now() < deadline, "cache never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The requests of `user`, without its long-running watches (which may restart at any time).
fn by(events: &[AuditEvent], user: &str) -> Vec<AuditEvent> {
    events
        .iter()
        .filter(|e| e.user == user && e.verb != "watch")
        .cloned()
        .collect()
}

#[tokio::test]
async fn apply_twice_reports_unchanged_and_sends_no_write() {
    let cp = ControlPlane::shared().await;
    let ns = cp.namespace().await;
    let user = "kit-writer-cached";
    let client = cp.client_as(user, &["system:masters"]);
    let cache = configmap_cache(client.clone(), ns.name()).await;
    let writer = KubeWriter::new(client, "kit-test").with_cache(cache.clone());

    let first = writer
        .apply(&cm(ns.name(), "a", &[("k", "1")]), None)
        .await
        .unwrap();
    assert!(first.changed);
    cached_at(&cache, ns.name(), "a", first.object.resource_version()).await;

    let mark = cp.audit().mark();
    let second = writer
        .apply(&cm(ns.name(), "a", &[("k", "1")]), None)
        .await
        .unwrap();
    assert!(!second.changed);
    assert_eq!(
        second.object.resource_version(),
        first.object.resource_version()
    );
    let requests = by(&cp.audit().since(&mark).await, user);
    assert!(requests.is_empty(), "no request expected, got {requests:?}");

    // A different body is sent and changes the object.
    let third = writer
        .apply(&cm(ns.name(), "a", &[("k", "2")]), None)
        .await
        .unwrap();
    assert!(third.changed);
    assert_ne!(
        third.object.resource_version(),
        first.object.resource_version()
    );
}

#[tokio::test]
async fn a_no_op_apply_without_a_cache_reports_unchanged() {
    let cp = ControlPlane::shared().await;
    let ns = cp.namespace().await;
    let user = "kit-writer-uncached";
    let writer = KubeWriter::new(cp.client_as(user, &["system:masters"]), "kit-test");
    let first = writer
        .apply(&cm(ns.name(), "a", &[("k", "1")]), None)
        .await
        .unwrap();
    assert!(first.changed);
    // A fresh writer knows nothing about the object: it reads it, then applies.
    let fresh = KubeWriter::new(cp.client_as(user, &["system:masters"]), "kit-test");
    let mark = cp.audit().mark();
    let second = fresh
        .apply(&cm(ns.name(), "a", &[("k", "1")]), None)
        .await
        .unwrap();
    assert!(!second.changed, "a server-side no-op is not a change");
    assert_eq!(
        second.object.resource_version(),
        first.object.resource_version()
    );
    let requests = by(&cp.audit().since(&mark).await, user);
    let verbs: Vec<_> = requests.iter().map(|e| e.verb.as_str()).collect();
    assert_eq!(verbs, ["get", "patch"], "{requests:?}");
}

#[tokio::test]
async fn conflicts_and_preconditions() {
    let cp = ControlPlane::shared().await;
    let ns = cp.namespace().await;
    let client = cp.client_as("kit-conflicts", &["system:masters"]);
    let writer = KubeWriter::new(client.clone(), "kit-test");

    let created = writer
        .create(&cm(ns.name(), "a", &[("k", "1")]))
        .await
        .unwrap();
    let again = writer.create(&cm(ns.name(), "a", &[])).await.unwrap_err();
    assert!(again.is_already_exists(), "{again}");

    // Someone else changes the object; an apply pinned to the old revision conflicts.
    Api::<ConfigMap>::namespaced(cp.client(), ns.name())
        .replace(
            "a",
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    resource_version: created.resource_version(),
                    ..created.metadata.clone()
                },
                data: Some(BTreeMap::from([("k".to_string(), "other".to_string())])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut stale = cm(ns.name(), "a", &[("k", "mine")]);
    stale.metadata.resource_version = created.resource_version();
    let err = writer.apply(&stale, None).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let err = writer
        .patch::<ConfigMap>(
            Some(ns.name()),
            "a",
            &Patch::Merge(json!({
                "metadata": {"resourceVersion": created.resource_version()},
                "data": {"k": "mine"},
            })),
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");

    // Another field manager takes a field; our forced apply takes it back and reports it.
    let mine = cm(ns.name(), "b", &[("k", "1")]);
    assert!(writer.apply(&mine, None).await.unwrap().changed);
    let theirs = cm(ns.name(), "b", &[("k", "2")]);
    assert!(
        writer
            .apply(&theirs, Some("someone-else"))
            .await
            .unwrap()
            .changed
    );
    let back = writer.apply(&mine, None).await.unwrap();
    assert!(back.changed);
    assert_eq!(back.object.data.unwrap()["k"], "1");

    // Delete preconditions.
    let wrong = Preconditions {
        uid: Some("00000000-0000-0000-0000-000000000000".into()),
        resource_version: None,
    };
    let err = writer
        .delete::<ConfigMap>(Some(ns.name()), "a", &wrong, None)
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let right = Preconditions {
        uid: created.uid(),
        resource_version: None,
    };
    let deleted = writer
        .delete::<ConfigMap>(Some(ns.name()), "a", &right, None)
        .await
        .unwrap();
    assert_eq!(deleted, Deleted::Gone);
    let deleted = writer
        .delete::<ConfigMap>(Some(ns.name()), "a", &right, None)
        .await
        .unwrap();
    assert_eq!(deleted, Deleted::NotFound);
}

#[tokio::test]
async fn delete_with_a_finalizer_is_pending_until_it_is_removed() {
    let cp = ControlPlane::shared().await;
    let ns = cp.namespace().await;
    let writer = KubeWriter::new(cp.client(), "kit-test");
    let mut obj = cm(ns.name(), "f", &[]);
    obj.finalizers_mut().push("kit.example.com/hold".into());
    writer.create(&obj).await.unwrap();
    let deleted = writer
        .delete::<ConfigMap>(Some(ns.name()), "f", &Preconditions::default(), None)
        .await
        .unwrap();
    let Deleted::Pending(pending) = deleted else {
        panic!("expected a pending deletion, got {deleted:?}")
    };
    assert!(pending.metadata.deletion_timestamp.is_some());
    let released = writer
        .patch::<ConfigMap>(
            Some(ns.name()),
            "f",
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(released.changed);
    let api = Api::<ConfigMap>::namespaced(cp.client(), ns.name());
    assert!(api.get_opt("f").await.unwrap().is_none());
}

#[tokio::test]
async fn reads_are_served_from_the_cache() {
    let cp = ControlPlane::shared().await;
    let ns = cp.namespace().await;
    let admin = Api::<ConfigMap>::namespaced(cp.client(), ns.name());
    for name in ["a", "b"] {
        admin
            .create(&PostParams::default(), &cm(ns.name(), name, &[("k", name)]))
            .await
            .unwrap();
    }
    let user = "kit-reader";
    let cache = configmap_cache(cp.client_as(user, &["system:masters"]), ns.name()).await;

    let mark = cp.audit().mark();
    let a: ConfigMap = cache.get(Some(ns.name()), "a").await.unwrap().unwrap();
    assert_eq!(a.data.unwrap()["k"], "a");
    assert!(
        a.metadata.managed_fields.is_none(),
        "managedFields are stripped"
    );
    assert!(
        cache
            .get::<ConfigMap>(Some(ns.name()), "missing")
            .await
            .unwrap()
            .is_none()
    );
    let selector: Selector = [("app", "kit")].into_iter().collect();
    let listed: Vec<ConfigMap> = cache.list(Some(ns.name()), &selector).await.unwrap();
    assert_eq!(
        listed.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    // The typed reads hand out the stored objects; the dynamic form carries the same object.
    let dynamic = cache
        .get_dynamic(&kit::object::resource::<ConfigMap>(), Some(ns.name()), "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        kit::object::from_dynamic::<ConfigMap>(dynamic).unwrap(),
        listed[0]
    );
    let shared = cache
        .list_shared::<ConfigMap>(Some(ns.name()), &selector)
        .await
        .unwrap();
    assert_eq!(
        shared
            .iter()
            .map(|c| c.as_ref().clone())
            .collect::<Vec<_>>(),
        listed
    );
    assert_eq!(cache.live_reads(), 0);
    let reads: Vec<_> = by(&cp.audit().since(&mark).await, user)
        .into_iter()
        .filter(|e| e.verb == "get" || e.verb == "list")
        .collect();
    assert!(reads.is_empty(), "reads reached the apiserver: {reads:?}");

    // An unwatched kind, and another namespace, fall back to live reads.
    assert!(
        cache
            .get::<Secret>(Some(ns.name()), "nope")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        cache
            .get::<ConfigMap>(Some("default"), "nope")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(cache.live_reads(), 2);
}

/// What the writer and the event publisher keep of an object goes when somebody else deletes it
/// (here an administrator; garbage collection is the same watch event).
#[tokio::test]
async fn per_object_state_goes_with_a_foreign_delete() {
    use kit::EventSink;
    use kube::Resource;
    let cp = ControlPlane::shared().await;
    let ns = cp.namespace().await;
    let client = cp.client_as("kit-forget", &["system:masters"]);
    let cache = configmap_cache(client.clone(), ns.name()).await;
    let writer = KubeWriter::new(client.clone(), "kit-test").with_cache(cache.clone());
    let reporter = kit::events::Reporter {
        controller: "kit-test".into(),
        instance: None,
    };
    let events = kit::events::Publisher::new(client, reporter).with_cache(&cache);

    for name in ["a", "b"] {
        let applied = writer
            .apply(&cm(ns.name(), name, &[("k", "1")]), None)
            .await
            .unwrap();
        let note = kit::Event::normal("Tested", "a test event");
        let regarding = applied.object.object_ref(&());
        events.publish(&note, &regarding).await.unwrap();
        // A repeat joins the series: still one remembered.
        events.publish(&note, &regarding).await.unwrap();
    }
    assert_eq!(writer.remembered(), 2);
    assert_eq!(events.remembered(), 2);

    Api::<ConfigMap>::namespaced(cp.client(), ns.name())
        .delete("a", &Default::default())
        .await
        .unwrap();
    testkit::eventually(
        "the deleted object forgotten",
        Duration::from_secs(10),
        || async { writer.remembered() == 1 && events.remembered() == 1 },
    )
    .await;
}
