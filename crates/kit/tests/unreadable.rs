//! Stored objects the cache cannot decode, against a real API server: an enum value this version
//! does not know (as written through a newer CRD version) and nesting deeper than
//! `kit::object::MAX_DEPTH`. They do not fail the list or the watch, stay out of the store, leave
//! it when an object turns unreadable, and get `Ready=False UnreadableObject` and one Warning
//! event each (no write for the condition's own watch event).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kit::cache::Cache;
use kit::testing::Double;
use kit::unreadable::{REASON, Reporter};
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, CustomResource};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize)]
#[kube(
    group = "kit.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    schema = "disabled"
)]
pub struct WidgetSpec {
    mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    config: Option<Value>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
enum Mode {
    A,
    B,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct WidgetStatus {
    #[serde(default)]
    conditions: Vec<Condition>,
}

fn crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": "widgets.kit.example.com"},
        "spec": {
            "group": "kit.example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "properties": {
                            "conditions": {
                                "type": "array",
                                "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["type"],
                                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                          "required": ["type"],
                                          "properties": {"type": {"type": "string"}}}
                            }
                        }}
                    }
                }}
            }]
        }
    }))
    .unwrap()
}

/// `{"a": {"a": ... {"leaf": 1}}}`, `levels` objects deep.
fn nested(levels: usize) -> Value {
    let mut value = json!({"leaf": 1});
    for _ in 1..levels {
        value = json!({ "a": value });
    }
    value
}

async fn put(api: &Api<Widget>, name: &str, spec: Value) {
    let body = json!({
        "apiVersion": "kit.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    });
    api.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&body),
    )
    .await
    .map(|_| ())
    .or_else(|e| match e {
        // The answer of a write of an unreadable object does not decode: it was stored.
        kube::Error::SerdeError(_) => Ok(()),
        e => Err(e),
    })
    .unwrap();
}

/// The stored `Ready` condition of `name`, read as text and decoded without a depth limit (the
/// test's objects are deeper than any decoder of the framework accepts).
async fn ready(client: &kube::Client, ns: &str, name: &str) -> Option<Condition> {
    let path = format!("/apis/kit.example.com/v1/namespaces/{ns}/widgets/{name}");
    let text = client
        .request_text(http::Request::get(path).body(Vec::new()).unwrap())
        .await
        .ok()?;
    #[derive(Deserialize)]
    struct Stored {
        #[serde(default)]
        status: Option<WidgetStatus>,
    }
    let mut de = serde_json::Deserializer::from_str(&text);
    de.disable_recursion_limit();
    let stored = Stored::deserialize(&mut de).ok()?;
    stored
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
}

/// The names in `store`, sorted.
fn names(store: &kube::runtime::reflector::Store<Widget>) -> Vec<String> {
    let mut names: Vec<_> = store
        .state()
        .iter()
        .map(|w| w.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

/// Waits up to 30 s for `check`.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    testkit::eventually(what, Duration::from_secs(30), check).await
}

#[tokio::test]
async fn unreadable_objects_are_skipped_and_reported_once() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&[crd()]).await.unwrap();
    let ns = cp.namespace().await;
    let client = cp.client();
    let api: Api<Widget> = Api::namespaced(client.clone(), ns.name());

    put(&api, "good", json!({"mode": "A"})).await;
    put(&api, "newer", json!({"mode": "C"})).await;
    put(&api, "deep-ok", json!({"mode": "B", "config": nested(200)})).await;
    put(
        &api,
        "too-deep",
        json!({"mode": "B", "config": nested(300)}),
    )
    .await;

    let cache = Cache::new(client.clone());
    let store = cache
        .watch(api.clone(), watcher::Config::default())
        .unwrap();
    let events = Double::new();
    let reporter = Reporter::new(
        client.clone(),
        "kit-unreadable-test",
        Arc::new(events.clone()),
    )
    .run::<Widget>(&cache)
    .unwrap();
    tokio::spawn(reporter);
    tokio::spawn(cache.run());
    cache.wait_until_ready().await;

    assert_eq!(
        names(&store),
        ["deep-ok", "good"],
        "the readable objects, and only those"
    );

    for name in ["newer", "too-deep"] {
        eventually(&format!("{name}: Ready=False {REASON}"), || async {
            ready(&client, ns.name(), name)
                .await
                .is_some_and(|c| c.status == "False" && c.reason == REASON)
        })
        .await;
    }
    let newer = ready(&client, ns.name(), "newer").await.unwrap();
    assert!(
        newer.message.contains("unknown variant `C`"),
        "{}",
        newer.message
    );
    assert_eq!(newer.observed_generation, Some(1));
    let deep = ready(&client, ns.name(), "too-deep").await.unwrap();
    assert!(deep.message.contains("nested"), "{}", deep.message);

    // The condition's own watch events write nothing more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let published = events.events();
    let mut about: Vec<_> = published
        .iter()
        .map(|e| {
            assert_eq!(e.event.reason, REASON);
            e.regarding.name.clone().unwrap()
        })
        .collect();
    about.sort();
    assert_eq!(
        about,
        ["newer", "too-deep"],
        "one event per unreadable object"
    );

    // Fixed by its owner: it is read again.
    put(&api, "newer", json!({"mode": "B"})).await;
    // Turned unreadable: it leaves the store and is reported.
    put(&api, "good", json!({"mode": "Z"})).await;
    eventually("the store to follow", || async {
        names(&store) == ["deep-ok", "newer"]
    })
    .await;
    eventually("good: Ready=False", || async {
        ready(&client, ns.name(), "good").await.is_some_and(|c| {
            c.status == "False" && c.reason == REASON && c.observed_generation == Some(2)
        })
    })
    .await;
}
