//! The operator binary serves the conversion webhook: v1alpha1 manifests apply unchanged and are
//! stored as v1beta1.

mod common;

use std::time::Duration;

use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::ApiResource;

use common::{Operator, Spawn, eventually};

#[tokio::test]
async fn v1alpha1_manifests_convert_through_the_operator() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let _operator = Operator::spawn(
        cp,
        Spawn {
            webhook: true,
            ..Spawn::default()
        },
    );
    let ns = cp.namespace().await;

    let alpha = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "nvidia.com",
        "v1alpha1",
        "DynamoGraphDeployment",
    ));
    let alpha_api: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns.name(), &alpha);
    let manifest = common::manifest("v1alpha1/vllm-agg.yaml");
    let name = manifest.metadata.name.clone().unwrap();
    // The operator points the CRD's webhook at itself at start-up; until then v1alpha1 fails.
    eventually(
        "the operator's conversion webhook",
        Duration::from_secs(60),
        || async {
            alpha_api
                .patch(
                    &name,
                    &PatchParams::apply("test").force(),
                    &Patch::Apply(&manifest),
                )
                .await
                .is_ok()
        },
    )
    .await;

    let dgds: Api<api::DynamoGraphDeployment> = Api::namespaced(cp.client(), ns.name());
    let stored = dgds.get(&name).await.unwrap();
    let names: Vec<_> = stored
        .spec
        .components
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert!(names.contains(&"Frontend".to_string()), "{names:?}");
    assert!(names.contains(&"worker".to_string()), "{names:?}");
    let back = alpha_api.get(&name).await.unwrap();
    assert_eq!(
        back.data["spec"]["services"]["worker"]["componentType"],
        "worker"
    );
}
