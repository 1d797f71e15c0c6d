//! Objects an earlier operator stored as v1alpha1 are stored again as v1beta1 when the operator
//! starts (`operator::storage_migration`), and the CRD then records v1beta1 alone in
//! `status.storedVersions`, as upstream's CRD migration does.
//!
//! This binary deletes and recreates the DynamoGraphDeploymentScalingAdapter CRD of the shared
//! control plane (test binaries run one at a time); it leaves ours installed.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::ApiResource;

use common::{Operator, Spawn, eventually};

const CRD: &str = "dynamographdeploymentscalingadapters.nvidia.com";

fn stored_versions(crd: &CustomResourceDefinition) -> Vec<String> {
    crd.status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn objects_stored_as_v1alpha1_are_stored_again_as_v1beta1() {
    let cp = testkit::ControlPlane::shared().await;
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    // A CRD that stored v1alpha1 (as an older release did), and objects stored so.
    if crds.get_opt(CRD).await.unwrap().is_some() {
        crds.delete(CRD, &DeleteParams::default()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while crds.get_opt(CRD).await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "the CRD was not deleted");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut alpha_only = api::v1alpha1::scaling_adapter::DynamoGraphDeploymentScalingAdapter::crd();
    for v in &mut alpha_only.spec.versions {
        v.storage = true;
    }
    cp.install_crds(&[alpha_only]).await.unwrap();
    let ns = cp.namespace().await;
    let alpha = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "nvidia.com",
            "v1alpha1",
            "DynamoGraphDeploymentScalingAdapter",
        ),
        "dynamographdeploymentscalingadapters",
    );
    let alpha_api: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns.name(), &alpha);
    for i in 0..3 {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeploymentScalingAdapter",
            "metadata": {"name": format!("g-worker-{i}")},
            "spec": {"replicas": i, "dgdRef": {"name": "g", "serviceName": format!("worker-{i}")}},
        }))
        .unwrap();
        alpha_api
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }

    // Ours: v1beta1 stored from now on; the v1alpha1 objects are still stored as they were.
    cp.install_crds(&api::crds()).await.unwrap();
    let crd = crds.get(CRD).await.unwrap();
    assert_eq!(stored_versions(&crd), ["v1alpha1", "v1beta1"]);

    let _operator = Operator::spawn(
        cp,
        Spawn {
            webhook: true,
            ..Spawn::default()
        },
    );
    eventually(
        "storedVersions is v1beta1 alone",
        Duration::from_secs(90),
        || async { stored_versions(&crds.get(CRD).await.unwrap()) == ["v1beta1"] },
    )
    .await;
    let adapters: Api<api::DynamoGraphDeploymentScalingAdapter> = ns.api();
    for i in 0..3 {
        let adapter = adapters.get(&format!("g-worker-{i}")).await.unwrap();
        assert_eq!(adapter.spec.dgd_ref.component_name, format!("worker-{i}"));
        assert_eq!(adapter.spec.replicas, i);
        assert_eq!(
            adapter.metadata.generation,
            Some(1),
            "migrating changes no field"
        );
    }
}
