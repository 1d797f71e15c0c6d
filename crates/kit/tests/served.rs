//! A kind watched only while served (`Cache::watch_while_served`), against a real control
//! plane: the test plays whoever keeps the served set current.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::ReaderExt;
use kit::cache::Cache;
use kit::served::Served;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use testkit::{ControlPlane, eventually};

const WAIT: Duration = Duration::from_secs(30);

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The test's ConfigMaps in `store` (not the namespace's `kube-root-ca.crt`).
fn names(store: &kube::runtime::reflector::Store<ConfigMap>) -> Vec<String> {
    let mut names: Vec<_> = store
        .state()
        .iter()
        .map(|c| c.name_any())
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    names.sort();
    names
}

/// Waits for a trigger of ConfigMap `name`.
async fn heard(
    triggers: &mut futures::stream::BoxStream<'static, std::sync::Arc<ConfigMap>>,
    name: &str,
) {
    tokio::time::timeout(WAIT, async {
        while let Some(object) = triggers.next().await {
            if object.name_any() == name {
                return;
            }
        }
        panic!("the trigger stream ended");
    })
    .await
    .unwrap_or_else(|_| panic!("no trigger of {name}"));
}

#[tokio::test]
async fn a_kind_is_watched_only_while_served() {
    let cp = ControlPlane::shared().await;
    let ns = cp.namespace().await;
    let client = cp.client();
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns.name());
    let served = Served::new();
    let cache = Cache::new(client);
    let store = cache
        .watch_while_served(api.clone(), watcher::Config::default(), &served)
        .unwrap();
    let mut triggers = cache.subscribe::<ConfigMap>().unwrap();
    tokio::spawn(cache.run());

    // Not served: the kind does not hold back readiness, its store stays empty, and reads
    // answer "not served" without asking the API server (the served set is authoritative).
    tokio::time::timeout(WAIT, cache.wait_until_ready())
        .await
        .expect("ready without the kind");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let live = cache.live_reads();
    let read = cache.get::<ConfigMap>(Some(ns.name()), "a").await;
    assert!(
        matches!(&read, Err(kit::Error::NotFound(m)) if m.contains("not served")),
        "{read:?}"
    );
    let listed = cache
        .list::<ConfigMap>(Some(ns.name()), &kit::Selector::default())
        .await;
    assert!(listed.unwrap_err().is_not_found());
    assert_eq!(cache.live_reads(), live, "no live read");
    assert!(names(&store).is_empty());

    // Served: the watch lists, subscribers hear of the objects, reads come from the store.
    served.set(&kit::object::resource::<ConfigMap>(), true);
    heard(&mut triggers, "a").await;
    eventually("the store lists", WAIT, || async { names(&store) == ["a"] }).await;
    eventually("reads served from the store", WAIT, || async {
        let before = cache.live_reads();
        let _: Option<ConfigMap> = cache.get(Some(ns.name()), "a").await.unwrap();
        cache.live_reads() == before
    })
    .await;
    assert!(cache.unready_kinds().is_empty());

    // No longer served: the watch stops, the store empties and subscribers hear the object
    // gone; reads answer "not served" again.
    served.set(&kit::object::resource::<ConfigMap>(), false);
    eventually("the store empties", WAIT, || async {
        names(&store).is_empty()
    })
    .await;
    heard(&mut triggers, "a").await;
    let before = cache.live_reads();
    assert!(cache.get::<ConfigMap>(Some(ns.name()), "a").await.is_err());
    assert_eq!(cache.live_reads(), before, "no live read");

    // What changed while not served is listed when it is served again.
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    served.set(&kit::object::resource::<ConfigMap>(), true);
    eventually("the store lists again", WAIT, || async {
        names(&store) == ["a", "b"]
    })
    .await;
}
