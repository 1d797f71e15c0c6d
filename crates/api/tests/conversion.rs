//! v1alpha1 ⇄ v1beta1 conversion of DynamoGraphDeployment.

mod common;

use api::conversion::{convert, review, to_v1alpha1, to_v1beta1};
use api::{v1alpha1, v1beta1};
use common::conformance_manifests;
use serde_json::json;

fn alpha_manifests() -> Vec<(String, v1alpha1::DynamoGraphDeployment)> {
    conformance_manifests()
        .into_iter()
        .filter(|m| m.api_version() == "nvidia.com/v1alpha1" && m.kind() == "DynamoGraphDeployment")
        .map(|m| (m.label(), serde_json::from_value(m.value.clone()).unwrap()))
        .collect()
}

fn beta_manifests() -> Vec<(String, v1beta1::DynamoGraphDeployment)> {
    conformance_manifests()
        .into_iter()
        .filter(|m| m.api_version() == "nvidia.com/v1beta1" && m.kind() == "DynamoGraphDeployment")
        .map(|m| (m.label(), serde_json::from_value(m.value.clone()).unwrap()))
        .collect()
}

#[test]
fn spoke_hub_spoke_is_lossless_for_conformance_manifests() {
    for (label, alpha) in alpha_manifests() {
        let hub = to_v1beta1(&alpha);
        let back = to_v1alpha1(&hub);
        assert_eq!(back, alpha, "{label}");
    }
}

#[test]
fn hub_spoke_hub_is_lossless_for_conformance_manifests() {
    for (label, beta) in beta_manifests() {
        let spoke = to_v1alpha1(&beta);
        let back = to_v1beta1(&spoke);
        assert_eq!(back, beta, "{label}");
    }
}

#[test]
fn alpha_agg_example_converts_to_the_published_v1beta1_shape() {
    let (_, alpha) = alpha_manifests()
        .into_iter()
        .find(|(l, _)| l.contains("vllm-agg"))
        .unwrap();
    let hub = to_v1beta1(&alpha);
    let worker = hub.spec.component("worker").unwrap();
    assert_eq!(worker.r#type, Some(v1beta1::ComponentType::Worker));
    assert_eq!(worker.replicas, Some(1));
    let main = worker.main_container().unwrap();
    assert_eq!(
        main.image.as_deref(),
        Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:my-tag")
    );
    assert_eq!(
        main.working_dir.as_deref(),
        Some("/workspace/examples/backends/vllm")
    );
    let env_from = main.env_from.as_ref().unwrap();
    assert_eq!(
        env_from[0].secret_ref.as_ref().unwrap().name,
        "hf-token-secret"
    );
    let resources = main.resources.as_ref().unwrap();
    assert_eq!(resources.limits.as_ref().unwrap()["nvidia.com/gpu"].0, "1");
    assert_eq!(
        resources.requests.as_ref().unwrap()["ephemeral-storage"].0,
        "2Gi"
    );
    let frontend = hub.spec.component("Frontend").unwrap();
    assert_eq!(frontend.r#type, Some(v1beta1::ComponentType::Frontend));
    assert!(api::validate(&hub).is_ok(), "{:?}", api::validate(&hub));
}

#[test]
fn prefill_and_decode_map_to_sub_component_types() {
    let (_, beta) = beta_manifests()
        .into_iter()
        .find(|(l, _)| l.contains("vllm-disagg.yaml"))
        .unwrap();
    let alpha = to_v1alpha1(&beta);
    let prefill = &alpha.spec.services["VllmPrefillWorker"];
    assert_eq!(prefill.component_type.as_deref(), Some("worker"));
    assert_eq!(prefill.sub_component_type.as_deref(), Some("prefill"));
    let main = prefill
        .extra_pod_spec
        .as_ref()
        .unwrap()
        .main_container
        .as_ref()
        .unwrap();
    assert_eq!(
        main.image.as_deref(),
        Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0")
    );
}

#[test]
fn alpha_edits_win_over_the_preserved_payload() {
    let (_, beta) = beta_manifests()
        .into_iter()
        .find(|(l, _)| l.contains("vllm-agg"))
        .unwrap();
    let mut alpha = to_v1alpha1(&beta);
    alpha
        .spec
        .services
        .get_mut("VllmDecodeWorker")
        .unwrap()
        .replicas = Some(3);
    let hub = to_v1beta1(&alpha);
    assert_eq!(
        hub.spec.component("VllmDecodeWorker").unwrap().replicas,
        Some(3)
    );
    assert_eq!(
        hub.spec.component("Frontend").unwrap(),
        beta.spec.component("Frontend").unwrap()
    );
    // Order of the list comes back as it was.
    let names: Vec<_> = hub.spec.components.iter().map(|c| c.name.clone()).collect();
    let before: Vec<_> = beta
        .spec
        .components
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names, before);
}

#[test]
fn beta_only_fields_survive_a_spoke_edit() {
    let (_, mut beta) = beta_manifests()
        .into_iter()
        .find(|(l, _)| l.contains("vllm-agg"))
        .unwrap();
    {
        let w = beta
            .spec
            .components
            .iter_mut()
            .find(|c| c.name == "VllmDecodeWorker")
            .unwrap();
        w.runtime_version_override = Some("1.3.1".into());
        w.min_available = Some(1);
    }
    let mut alpha = to_v1alpha1(&beta);
    alpha
        .spec
        .services
        .get_mut("VllmDecodeWorker")
        .unwrap()
        .replicas = Some(2);
    let hub = to_v1beta1(&alpha);
    let w = hub.spec.component("VllmDecodeWorker").unwrap();
    assert_eq!(w.replicas, Some(2));
    assert_eq!(w.runtime_version_override.as_deref(), Some("1.3.1"));
    assert_eq!(w.min_available, Some(1));
}

#[test]
fn pvcs_are_preserved_on_the_hub() {
    let (_, mut alpha) = alpha_manifests().into_iter().next().unwrap();
    alpha.spec.pvcs = vec![v1alpha1::Pvc {
        name: "models".into(),
        create: Some(false),
        ..Default::default()
    }];
    let hub = to_v1beta1(&alpha);
    let pvcs = api::conversion::preserved_alpha_pvcs(&hub);
    assert_eq!(pvcs.len(), 1);
    assert_eq!(pvcs[0].name, "models");
    assert_eq!(to_v1alpha1(&hub).spec.pvcs, alpha.spec.pvcs);
}

#[test]
fn review_converts_every_object_and_echoes_the_uid() {
    let (_, alpha) = alpha_manifests().into_iter().next().unwrap();
    let mut object = serde_json::to_value(&alpha).unwrap();
    object["apiVersion"] = "nvidia.com/v1alpha1".into();
    object["kind"] = "DynamoGraphDeployment".into();
    let request = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "42", "desiredAPIVersion": "nvidia.com/v1beta1", "objects": [object]}
    });
    let out = review(serde_json::from_value(request).unwrap());
    let out = serde_json::to_value(out).unwrap();
    assert_eq!(out["response"]["uid"], "42");
    assert_eq!(out["response"]["result"]["status"], "Success");
    let converted = &out["response"]["convertedObjects"][0];
    assert_eq!(converted["apiVersion"], "nvidia.com/v1beta1");
    assert!(converted["spec"]["components"].is_array());
    // And back.
    let again = convert(converted, "nvidia.com/v1alpha1").unwrap();
    let again: v1alpha1::DynamoGraphDeployment = serde_json::from_value(again).unwrap();
    assert_eq!(again, alpha);
}

#[test]
fn review_fails_cleanly_on_unknown_versions() {
    let request = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "7", "desiredAPIVersion": "nvidia.com/v9", "objects": [
            {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment", "metadata": {"name": "x"}, "spec": {}}
        ]}
    });
    let out = serde_json::to_value(review(serde_json::from_value(request).unwrap())).unwrap();
    assert_eq!(out["response"]["uid"], "7");
    assert_eq!(out["response"]["result"]["status"], "Failure");
}

#[test]
fn partial_objects_convert_without_inventing_a_spec() {
    // The apiserver converts the fields one manager owns, e.g. only the status.
    let object = json!({
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g"},
        "status": {"state": "pending", "components": {"worker": {"componentKind": "Deployment", "replicas": 1, "updatedReplicas": 1}}}
    });
    let alpha = convert(&object, "nvidia.com/v1alpha1").unwrap();
    assert!(alpha.get("spec").is_none(), "{alpha}");
    assert_eq!(alpha["status"]["services"]["worker"]["replicas"], 1);
    let back = convert(&alpha, "nvidia.com/v1beta1").unwrap();
    assert!(back.get("spec").is_none(), "{back}");
    assert_eq!(back["status"], object["status"]);
}
