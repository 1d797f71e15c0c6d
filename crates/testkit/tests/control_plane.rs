//! The control plane is real: CRDs are served, Deployments become Available on simulated nodes,
//! the garbage collector removes dependents, RBAC is enforced and requests are audited.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::ApiResource;

use testkit::eventually;

#[tokio::test]
async fn crd_is_served() {
    let cp = testkit::ControlPlane::shared().await;
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.testkit.example.com" },
        "spec": {
            "group": "testkit.example.com",
            "names": { "kind": "Widget", "plural": "widgets", "singular": "widget" },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "properties": { "size": { "type": "integer" } } }
                } } }
            }]
        }
    }))
    .unwrap();
    cp.install_crds(&[crd]).await.expect("install CRD");

    let ns = cp.namespace().await;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "testkit.example.com",
        "v1",
        "Widget",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns.name(), &ar);
    let widget: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "testkit.example.com/v1", "kind": "Widget",
        "metadata": { "name": "w" }, "spec": { "size": 3 }
    }))
    .unwrap();
    api.create(&PostParams::default(), &widget)
        .await
        .expect("create widget");
    let got = api.get("w").await.expect("get widget");
    assert_eq!(got.data["spec"]["size"], 3);
}

#[tokio::test]
async fn deployment_becomes_available_and_is_garbage_collected() {
    let cp = testkit::ControlPlane::shared().await;
    assert!(
        cp.simulates_nodes(),
        "the control plane must simulate nodes"
    );
    let ns = cp.namespace().await;
    let cms: Api<ConfigMap> = ns.api();
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({ "metadata": { "name": "owner" } }))
                .unwrap(),
        )
        .await
        .unwrap();
    let owner_ref = owner.controller_owner_ref(&()).unwrap();

    let deployments: Api<Deployment> = ns.api();
    let mut deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{
                    "name": "main", "image": "registry.invalid/web:1",
                    "resources": { "limits": { "nvidia.com/gpu": "1" } }
                }] }
            }
        }
    }))
    .unwrap();
    deployment.metadata.owner_references = Some(vec![owner_ref]);
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    eventually(
        "Deployment web Available with 2 ready replicas",
        Duration::from_secs(60),
        || async {
            let d = deployments.get("web").await.unwrap();
            let status = d.status.unwrap_or_default();
            let available = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "True");
            available && status.ready_replicas == Some(2)
        },
    )
    .await;
    let pods: Api<Pod> = ns.api();
    let running = pods.list(&Default::default()).await.unwrap();
    assert_eq!(running.items.len(), 2);
    for pod in &running.items {
        let status = pod.status.clone().unwrap_or_default();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(
            pod.spec
                .as_ref()
                .unwrap()
                .node_name
                .as_deref()
                .unwrap_or("")
                .starts_with("kwok-node-")
        );
    }

    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    eventually(
        "garbage collection of the Deployment and its Pods",
        Duration::from_secs(60),
        || async {
            deployments.get_opt("web").await.unwrap().is_none()
                && pods
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty()
        },
    )
    .await;
}

#[tokio::test]
async fn rbac_is_enforced_and_requests_are_audited() {
    let cp = testkit::ControlPlane::shared().await;
    let ns = cp.namespace().await;

    let nobody: Api<ConfigMap> = Api::namespaced(cp.client_as("nobody", &[]), ns.name());
    match nobody.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }

    let audit = cp.audit();
    let mark = audit.mark();
    let writer: Api<ConfigMap> =
        Api::namespaced(cp.client_as("writer", &["system:masters"]), ns.name());
    writer
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({ "metadata": { "name": "audited" } }))
                .unwrap(),
        )
        .await
        .unwrap();
    let events = audit.since(&mark).await;
    let mine: Vec<_> = events.iter().filter(|e| e.user == "writer").collect();
    assert_eq!(mine.len(), 1, "{mine:#?}");
    assert_eq!(mine[0].verb, "create");
    assert_eq!(mine[0].resource, "configmaps");
    assert_eq!(mine[0].namespace, ns.name());
    assert_eq!(mine[0].code, 201);
    assert!(mine[0].is_write());
}
