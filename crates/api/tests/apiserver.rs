//! The CRDs against the real apiserver (testkit): every conformance manifest is accepted
//! unchanged and a round trip (apply, get) loses no field; v1alpha1 objects go through the
//! conversion webhook (served by this test binary); `kubectl explain` shows our descriptions.
//!
//! The DynamoGraphDeployment CRD is installed pointing its conversion webhook at this test
//! binary; other test binaries re-install `api::crds()` as they need.

mod common;
#[path = "common/webhook.rs"]
mod webhook;

use common::{conformance_manifests, grove_crd_files, missing_fields};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::sync::OnceLock;
use tokio::sync::OnceCell;

static WEBHOOK: OnceLock<webhook::Webhook> = OnceLock::new();
static INSTALLED: OnceCell<()> = OnceCell::const_new();

async fn control_plane() -> &'static testkit::ControlPlane {
    let cp = testkit::ControlPlane::shared().await;
    INSTALLED
        .get_or_init(|| async {
            let hook = WEBHOOK.get_or_init(webhook::start);
            cp.install_crds(&api::crds::crds_with(&hook.config()))
                .await
                .expect("install our CRDs");
            cp.install_crd_files(&grove_crd_files())
                .await
                .expect("install Grove's CRDs");
        })
        .await;
    cp
}

fn dynamic_api(
    client: kube::Client,
    ns: &str,
    api_version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let plural = format!("{}s", kind.to_lowercase());
    let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
    Api::namespaced_with(client, ns, &ar)
}

/// Applies `m` unchanged (server-side apply), reads it back in the same version, and reports
/// what was rejected or lost.
async fn apply_and_read(
    ns: &testkit::TestNamespace,
    m: &common::Manifest,
) -> Result<serde_json::Value, String> {
    let api = dynamic_api(ns.client(), ns.name(), m.api_version(), m.kind());
    let pp = PatchParams::apply("conformance").force();
    api.patch(m.name(), &pp, &Patch::Apply(&m.value))
        .await
        .map_err(|e| format!("{}: rejected: {e}", m.label()))?;
    let got = serde_json::to_value(
        api.get(m.name())
            .await
            .map_err(|e| format!("{}: get: {e}", m.label()))?,
    )
    .unwrap();
    let lost = missing_fields(&m.value, &got);
    if lost.is_empty() {
        Ok(got)
    } else {
        Err(format!("{}: lost {lost:?}", m.label()))
    }
}

#[tokio::test]
async fn every_conformance_manifest_applies_unchanged_and_round_trips() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let mut failures = Vec::new();
    for m in conformance_manifests() {
        match apply_and_read(&ns, &m).await {
            Err(e) => failures.push(e),
            Ok(got) => {
                // Our types read what the apiserver stored.
                let typed = match (m.api_version(), m.kind()) {
                    ("nvidia.com/v1beta1", "DynamoGraphDeployment") => {
                        serde_json::from_value::<api::DynamoGraphDeployment>(got)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    }
                    ("nvidia.com/v1alpha1", "DynamoGraphDeployment") => {
                        serde_json::from_value::<api::v1alpha1::DynamoGraphDeployment>(got)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    }
                    ("nvidia.com/v1alpha1", "DynamoCheckpoint") => {
                        serde_json::from_value::<api::DynamoCheckpoint>(got)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    }
                    _ => Ok(()),
                };
                if let Err(e) = typed {
                    failures.push(format!("{}: stored object does not decode: {e}", m.label()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn v1alpha1_objects_are_stored_as_valid_v1beta1() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    for m in conformance_manifests()
        .iter()
        .filter(|m| m.api_version() == "nvidia.com/v1alpha1" && m.kind() == "DynamoGraphDeployment")
    {
        apply_and_read(&ns, m).await.unwrap();
        let beta: Api<api::DynamoGraphDeployment> = ns.api();
        let hub = beta.get(m.name()).await.unwrap();
        assert!(!hub.spec.components.is_empty(), "{}", m.label());
        api::validate(&hub).unwrap_or_else(|e| panic!("{}: {e}", m.label()));
    }
}

/// The graph's children are served in v1alpha1 too, as upstream serves them: written as
/// v1alpha1, stored as v1beta1 through the webhook, read back in either version; an autoscaler
/// scaling the v1alpha1 adapter scales the v1beta1 one.
#[tokio::test]
async fn v1alpha1_children_are_served_and_converted() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let client = ns.client();
    let alpha = |kind: &str| dynamic_api(client.clone(), ns.name(), "nvidia.com/v1alpha1", kind);
    let pp = PatchParams::apply("v1alpha1-client").force();
    let dcd = serde_json::json!({
        "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoComponentDeployment",
        "metadata": {"name": "g-worker"},
        "spec": {"serviceName": "worker", "componentType": "worker", "backendFramework": "vllm",
                 "replicas": 2, "dynamoNamespace": "legacy",
                 "extraPodSpec": {"mainContainer": {"image": "vllm-runtime:1"}}},
    });
    alpha("DynamoComponentDeployment")
        .patch("g-worker", &pp, &Patch::Apply(&dcd))
        .await
        .unwrap();
    let hub = ns
        .api::<api::DynamoComponentDeployment>()
        .get("g-worker")
        .await
        .unwrap();
    assert_eq!(hub.spec.component.name, "worker");
    assert_eq!(hub.spec.component.replicas, Some(2));
    let back = alpha("DynamoComponentDeployment")
        .get("g-worker")
        .await
        .unwrap();
    assert_eq!(back.data["spec"], dcd["spec"], "nothing lost");

    let adapter = serde_json::json!({
        "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeploymentScalingAdapter",
        "metadata": {"name": "g-worker"},
        "spec": {"replicas": 1, "dgdRef": {"name": "g", "serviceName": "worker"}},
    });
    let adapters = alpha("DynamoGraphDeploymentScalingAdapter");
    adapters
        .patch("g-worker", &pp, &Patch::Apply(&adapter))
        .await
        .unwrap();
    let hub: Api<api::DynamoGraphDeploymentScalingAdapter> = ns.api();
    assert_eq!(
        hub.get("g-worker")
            .await
            .unwrap()
            .spec
            .dgd_ref
            .component_name,
        "worker"
    );
    let scale = serde_json::json!({"spec": {"replicas": 4}});
    adapters
        .patch_scale("g-worker", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    assert_eq!(hub.get("g-worker").await.unwrap().spec.replicas, 4);
}

#[tokio::test]
async fn scaling_adapter_serves_the_scale_subresource() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let adapters: Api<api::DynamoGraphDeploymentScalingAdapter> = ns.api();
    let adapter = api::DynamoGraphDeploymentScalingAdapter::new(
        "g-worker",
        api::DynamoGraphDeploymentScalingAdapterSpec {
            replicas: 2,
            dgd_ref: api::scaling_adapter::DynamoGraphDeploymentComponentRef {
                name: "g".into(),
                component_name: "worker".into(),
            },
        },
    );
    adapters
        .create(&Default::default(), &adapter)
        .await
        .unwrap();
    let scale = adapters.get_scale("g-worker").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    let patch = serde_json::json!({"spec": {"replicas": 5}});
    adapters
        .patch_scale("g-worker", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(adapters.get("g-worker").await.unwrap().spec.replicas, 5);
}

#[tokio::test]
async fn kubectl_explain_shows_our_descriptions() {
    let cp = control_plane().await;
    let kubeconfig = cp.write_kubeconfig("admin", &["system:masters"]);
    let kubectl = testkit::Binaries::locate().unwrap().dir.join("kubectl");
    let explain = |path: &str| {
        // kubectl reads discovery through its own cache; a resource it missed in a refresh
        // during an update of the CRD is asked for again rather than failing the test.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let out = loop {
            let out = std::process::Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["explain", path])
                .output()
                .expect("run kubectl");
            let missing =
                String::from_utf8_lossy(&out.stderr).contains("doesn't have a resource type");
            if out.status.success() || !missing || std::time::Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        assert!(
            out.status.success(),
            "kubectl explain {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let spec = explain("dgd.spec");
    assert!(spec.contains("components"), "{spec}");
    assert!(spec.contains("The components of the graph"), "{spec}");
    let replicas = explain("dgd.spec.components.replicas");
    assert!(
        replicas.contains("Desired number of replicas"),
        "{replicas}"
    );
    let dgdsa = explain("dgdsa.spec.dgdRef");
    assert!(dgdsa.contains("componentName"), "{dgdsa}");
}

/// The bad-input corpus against the apiserver: schema and CEL cases are rejected with the
/// expected field and message; garde cases are accepted by the apiserver (server-side dry-run)
/// and stopped by `api::validate` on the object the apiserver returns.
#[tokio::test]
async fn bad_input_corpus_is_stopped_at_the_declared_layer() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let mut failures = Vec::new();
    for c in common::bad_input_cases() {
        let (before, input) = c.docs.split_at(c.docs.len() - 1);
        let input = &input[0];
        let api = |v: &serde_json::Value| {
            dynamic_api(
                ns.client(),
                ns.name(),
                v["apiVersion"].as_str().unwrap(),
                v["kind"].as_str().unwrap(),
            )
        };
        let name = |v: &serde_json::Value| v["metadata"]["name"].as_str().unwrap().to_string();
        for doc in before {
            if let Err(e) = api(doc)
                .patch(
                    &name(doc),
                    &PatchParams::apply("corpus").force(),
                    &Patch::Apply(doc),
                )
                .await
            {
                failures.push(format!("{}: first document rejected: {e}", c.file));
            }
        }
        // A new object is created (dry-run), an existing one updated by server-side apply
        // (dry-run): both report in the apiserver's usual `field: reason` form.
        let result = if before.is_empty() {
            let object: DynamicObject = serde_json::from_value(input.clone()).unwrap();
            let pp = kube::api::PostParams {
                dry_run: true,
                field_manager: Some("corpus".into()),
            };
            api(input).create(&pp, &object).await
        } else {
            let pp = PatchParams::apply("corpus").force().dry_run();
            api(input)
                .patch(&name(input), &pp, &Patch::Apply(input))
                .await
        };
        match (c.layer.as_str(), result) {
            ("garde", Ok(accepted)) => {
                let accepted = serde_json::to_value(accepted).unwrap();
                match common::garde_layer(&accepted) {
                    Ok(Err(e))
                        if e.violations
                            .iter()
                            .any(|v| v.field == c.field && v.message == c.expect) => {}
                    other => {
                        failures.push(format!("{}: accepted, but garde says {other:?}", c.file))
                    }
                }
            }
            ("garde", Err(e)) => failures.push(format!(
                "{}: garde case rejected by the apiserver: {e}",
                c.file
            )),
            (_, Ok(_)) => failures.push(format!(
                "{}: {} case accepted by the apiserver",
                c.file, c.layer
            )),
            (_, Err(kube::Error::Api(status))) => {
                let message = status.message.clone();
                if !(message.contains(&c.field) && message.contains(&c.expect)) {
                    failures.push(format!("{}: rejected, but with: {message}", c.file));
                }
            }
            (_, Err(e)) => failures.push(format!("{}: {e}", c.file)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
