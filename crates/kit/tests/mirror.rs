//! The example mirror controller, running against a real control plane.

#[path = "../examples/mirror/controller.rs"]
mod controller;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use controller::{MANAGER, Mirror, MirrorSpec, RECONCILES};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::conditions::{self, READY};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt};
use serde_json::json;
use testkit::ControlPlane;

/// Poll `probe` until it yields, failing the test after 30 s.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait until no reconcile has run for `quiet`.
async fn settle(quiet: Duration) {
    let mut last = RECONCILES.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(quiet).await;
        let now = RECONCILES.load(Ordering::Relaxed);
        if now == last {
            return;
        }
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_converges_and_an_idle_reconcile_writes_nothing() {
    let cp = ControlPlane::shared().await;
    cp.install_crds(&[Mirror::crd()]).await.unwrap();
    let ns = cp.namespace().await;
    let configmaps: Api<ConfigMap> = ns.api();
    let mirrors: Api<Mirror> = ns.api();
    configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("src".into()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([("a".to_string(), "1".to_string())])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    mirrors
        .create(
            &PostParams::default(),
            &Mirror::new(
                "m",
                MirrorSpec {
                    source: "src".into(),
                },
            ),
        )
        .await
        .unwrap();

    let user = "mirror-controller";
    let operator = cp.client_as(user, &["system:masters"]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let namespace = ns.name().to_string();
    let running = tokio::spawn(async move {
        controller::run(operator, Some(&namespace), async {
            let _ = stopped.await;
        })
        .await
    });

    // Converges: the copy exists, the status says Ready, the transition event is published.
    let copy = eventually("the copy", || async {
        configmaps.get_opt("m-mirror").await.unwrap()
    })
    .await;
    assert_eq!(copy.data.unwrap()["a"], "1");
    let status = eventually("Ready", || async {
        let m = mirrors.get("m").await.unwrap();
        m.status
            .filter(|s| conditions::is_true(&s.conditions, READY))
    })
    .await;
    assert_eq!((status.state.as_str(), status.keys), ("mirrored", 1));
    let events: Api<Event> = ns.api();
    eventually("the Mirrored event", || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Mirrored"))
            .then_some(())
    })
    .await;

    // A change of the source propagates.
    configmaps
        .patch(
            "src",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"b": "2"}})),
        )
        .await
        .unwrap();
    eventually("the copy update", || async {
        let copy = configmaps.get("m-mirror").await.unwrap();
        (copy.data.unwrap_or_default().len() == 2).then_some(())
    })
    .await;
    eventually("keys: 2", || async {
        let m = mirrors.get("m").await.unwrap();
        (m.status.unwrap_or_default().keys == 2).then_some(())
    })
    .await;

    // Idle reconciles write nothing: trigger some with metadata-only changes the controller does
    // not care about, and count the controller's requests in the apiserver's audit log.
    settle(Duration::from_millis(500)).await;
    let mark = cp.audit().mark();
    // One trigger at a time: requests for the same object that are queued together are merged.
    let touch = json!({"metadata": {"annotations": {"touched": "1"}}});
    let before = RECONCILES.load(Ordering::Relaxed);
    configmaps
        .patch("src", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    eventually("a reconcile after touching the source", || async {
        (RECONCILES.load(Ordering::Relaxed) > before).then_some(())
    })
    .await;
    settle(Duration::from_millis(300)).await;
    let before = RECONCILES.load(Ordering::Relaxed);
    mirrors
        .patch("m", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    eventually("a reconcile after touching the mirror", || async {
        (RECONCILES.load(Ordering::Relaxed) > before).then_some(())
    })
    .await;
    settle(Duration::from_millis(500)).await;
    let requests: Vec<_> = cp
        .audit()
        .since(&mark)
        .await
        .into_iter()
        .filter(|e| e.user == user && e.verb != "watch")
        .collect();
    assert!(
        requests.is_empty(),
        "idle reconciles sent requests: {requests:?}"
    );

    // The field manager owns the copy.
    let copy = configmaps.get("m-mirror").await.unwrap();
    assert!(
        copy.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|f| f.manager.as_deref() == Some(MANAGER))
    );

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("controller stops")
        .unwrap()
        .unwrap();
}
