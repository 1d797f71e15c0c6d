//! `kit::child` against a real API server: what the server returns (defaults, normalized lists,
//! dropped empty maps) still covers the applied body, so an idle ensure sends no request.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, EnvVar, PodSpec, PodTemplateSpec, ResourceRequirements,
    Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kit::cache::Cache;
use kit::child::{Applier, Change, Ownership};
use kit::client::KubeWriter;
use kit::{Kind, Patch, ReaderExt, WriterExt};
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use testkit::{AuditEvent, ControlPlane};

const CHILDREN: Applier = Applier::new("kit-child-test", "example.com/last-applied-hash");

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), "child".to_string())])
}

fn owner(parent: &ConfigMap) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: parent.name_any(),
        uid: parent.uid().expect("stored parent"),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn deployment(ns: &str, parent: &ConfigMap, image: &str) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("d".into()),
            namespace: Some(ns.into()),
            labels: Some(labels()),
            annotations: Some(BTreeMap::new()),
            owner_references: Some(vec![owner(parent)]),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(labels()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels()),
                    annotations: Some(BTreeMap::new()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "main".into(),
                        image: Some(image.into()),
                        env: Some(vec![EnvVar {
                            name: "A".into(),
                            value: Some("1".into()),
                            ..Default::default()
                        }]),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: 8000,
                            ..Default::default()
                        }]),
                        resources: Some(ResourceRequirements::default()),
                        volume_mounts: Some(vec![]),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

fn service(ns: &str, parent: &ConfigMap) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("s".into()),
            namespace: Some(ns.into()),
            labels: Some(labels()),
            owner_references: Some(vec![owner(parent)]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(labels()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 8000,
                target_port: Some(IntOrString::String("http".into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

async fn cache(client: Client, ns: &str) -> Cache {
    let cache = Cache::new(client.clone());
    cache
        .watch(
            Api::<Deployment>::namespaced(client.clone(), ns),
            watcher::Config::default(),
        )
        .unwrap();
    cache
        .watch(
            Api::<Service>::namespaced(client, ns),
            watcher::Config::default(),
        )
        .unwrap();
    tokio::spawn(cache.run());
    tokio::time::timeout(Duration::from_secs(30), cache.wait_until_ready())
        .await
        .expect("cache synced");
    cache
}

/// Wait until the cache holds `object` at its resourceVersion or later (controllers of the
/// control plane write Deployment status meanwhile).
async fn cached<K: Kind>(cache: &Cache, object: &K) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (ns, name) = (object.namespace(), object.name_any());
    let revision = |rv: Option<String>| rv.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let wanted = revision(object.resource_version());
    loop {
        let current: Option<K> = cache.get(ns.as_deref(), &name).await.unwrap();
        if current.is_some_and(|c| revision(c.resource_version()) >= wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "cache never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The requests of `user`, without long-running watches.
fn by(events: &[AuditEvent], user: &str) -> Vec<AuditEvent> {
    events
        .iter()
        .filter(|e| e.user == user && e.verb != "watch")
        .cloned()
        .collect()
}

#[tokio::test]
async fn an_idle_ensure_sends_no_request_and_drift_is_restored() {
    let cp = ControlPlane::shared().await;
    let ns = cp.namespace().await;
    let user = "kit-child-writer";
    let cache = cache(
        cp.client_as("kit-child-cache", &["system:masters"]),
        ns.name(),
    )
    .await;
    // No cache on the writer: its own skip rule cannot hide requests from this test.
    let writer = KubeWriter::new(cp.client_as(user, &["system:masters"]), "unused");
    let parent = Api::<ConfigMap>::namespaced(cp.client(), ns.name())
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("parent".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let uid = parent.uid().unwrap();

    let desired = deployment(ns.name(), &parent, "runtime:1");
    let created = CHILDREN
        .ensure(&cache, &writer, &desired, Ownership::Controlled(&uid))
        .await
        .unwrap();
    assert_eq!(created.change, Change::Created);
    let svc = service(ns.name(), &parent);
    let svc_created = CHILDREN
        .ensure(&cache, &writer, &svc, Ownership::Controlled(&uid))
        .await
        .unwrap();
    assert_eq!(svc_created.change, Change::Created);
    cached(&cache, &created.object).await;
    cached(&cache, &svc_created.object).await;

    // Idle: the server's defaults (strategy, protocol, clusterIP, ...) do not break the cover.
    let mark = cp.audit().mark();
    for _ in 0..2 {
        let d = CHILDREN
            .ensure(&cache, &writer, &desired, Ownership::Controlled(&uid))
            .await
            .unwrap();
        assert_eq!(d.change, Change::Unchanged);
        let s = CHILDREN
            .ensure(&cache, &writer, &svc, Ownership::Controlled(&uid))
            .await
            .unwrap();
        assert_eq!(s.change, Change::Unchanged);
    }
    let requests = by(&cp.audit().since(&mark).await, user);
    assert!(requests.is_empty(), "no request expected, got {requests:?}");

    // Others' labels and owner references are not drift.
    let other = cp.client_as("kit-child-user", &["system:masters"]);
    let touched = Api::<Deployment>::namespaced(other.clone(), ns.name())
        .patch(
            "d",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"user": "kept"}}})),
        )
        .await
        .unwrap();
    cached(&cache, &touched).await;
    let mark = cp.audit().mark();
    let d = CHILDREN
        .ensure(&cache, &writer, &desired, Ownership::Controlled(&uid))
        .await
        .unwrap();
    assert_eq!(d.change, Change::Unchanged);
    assert!(by(&cp.audit().since(&mark).await, user).is_empty());

    // Drift of an owned field is restored, and the user's label stays.
    let drifted = KubeWriter::new(other, "kit-child-user")
        .patch::<Deployment>(
            Some(ns.name()),
            "d",
            &Patch::Json(
                serde_json::from_value(json!([{"op": "replace",
                    "path": "/spec/template/spec/containers/0/image", "value": "hacked"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    cached(&cache, &drifted.object).await;
    let restored = CHILDREN
        .ensure(&cache, &writer, &desired, Ownership::Controlled(&uid))
        .await
        .unwrap();
    assert_eq!(restored.change, Change::Updated);
    let spec = restored.object.spec.as_ref().unwrap();
    let image = spec.template.spec.as_ref().unwrap().containers[0]
        .image
        .as_deref();
    assert_eq!(image, Some("runtime:1"));
    assert_eq!(restored.object.labels()["user"], "kept");

    // A changed body is applied; a removed field goes.
    cached(&cache, &restored.object).await;
    let mut smaller = deployment(ns.name(), &parent, "runtime:1");
    smaller
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .env = None;
    let updated = CHILDREN
        .ensure(&cache, &writer, &smaller, Ownership::Controlled(&uid))
        .await
        .unwrap();
    assert_eq!(updated.change, Change::Updated);
    let spec = updated.object.spec.as_ref().unwrap();
    assert!(
        spec.template.spec.as_ref().unwrap().containers[0]
            .env
            .is_none()
    );
    assert_eq!(
        updated.object.annotations()[CHILDREN.hash_annotation()],
        CHILDREN.hash(&smaller).unwrap()
    );
}
