//! The CRDs against the real apiserver: every conformance manifest is accepted unchanged and a
//! round trip (apply, get) loses no field.

mod common;

use common::{conformance_manifests, grove_crd_files, missing_fields};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

async fn control_plane() -> &'static testkit::ControlPlane {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds())
        .await
        .expect("install our CRDs");
    cp.install_crd_files(&grove_crd_files())
        .await
        .expect("install Grove's CRDs");
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

#[tokio::test]
async fn v1beta1_and_checkpoint_manifests_apply_and_round_trip() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let mut failures = Vec::new();
    for m in conformance_manifests()
        .into_iter()
        .filter(|m| m.api_version() != "nvidia.com/v1alpha1" || m.kind() != "DynamoGraphDeployment")
    {
        let api = dynamic_api(ns.client(), ns.name(), m.api_version(), m.kind());
        let pp = PatchParams::apply("conformance").force();
        match api.patch(m.name(), &pp, &Patch::Apply(&m.value)).await {
            Err(e) => failures.push(format!("{}: rejected: {e}", m.label())),
            Ok(_) => {
                let got = api.get(m.name()).await.unwrap();
                let got = serde_json::to_value(&got).unwrap();
                let lost = missing_fields(&m.value, &got);
                if !lost.is_empty() {
                    failures.push(format!("{}: lost {lost:?}", m.label()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
