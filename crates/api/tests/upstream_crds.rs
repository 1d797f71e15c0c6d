//! Installing over upstream's CRDs, as a cluster that ran the upstream operator has them: made
//! by another field manager, each kind served in the versions upstream serves, the conversion
//! webhook pointing at upstream's Service. The documented upgrade, `kubectl apply
//! --server-side --force-conflicts -f deploy/crds/` (docs/migration.md), must take them over
//! with nothing of upstream's left in what we own: every version upstream serves for our kinds
//! stays served, with our schema, converted by our webhook.
//!
//! This binary deletes and recreates the `nvidia.com` CRDs of the shared control plane (test
//! binaries run one at a time); it leaves ours installed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::api::{Api, DeleteParams, PostParams};
use serde::Deserialize;

fn upstream_crds() -> Vec<CustomResourceDefinition> {
    testkit::testdata::yaml_files("upstream-crds")
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            serde_yaml::Deserializer::from_str(&text)
                .map(|doc| CustomResourceDefinition::deserialize(doc).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn deploy_crds() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

async fn wait_gone(api: &Api<CustomResourceDefinition>, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get_opt(name).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "CRD {name} was not deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The schema, printer columns and flags of each version, by name.
fn versions(crd: &CustomResourceDefinition) -> Vec<serde_json::Value> {
    crd.spec
        .versions
        .iter()
        .map(|v| {
            serde_json::json!({
                "name": v.name, "served": v.served, "storage": v.storage,
                "deprecated": v.deprecated.unwrap_or(false),
                "schema": v.schema, "columns": v.additional_printer_columns,
                "subresources": v.subresources,
            })
        })
        .collect()
}

#[tokio::test]
async fn our_crds_apply_server_side_over_upstreams() {
    let cp = testkit::ControlPlane::shared().await;
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    let upstream = upstream_crds();
    let ours = api::crds::crds();

    // Upstream's CRDs, created by upstream's installer (its own field manager).
    for crd in ours.iter().chain(&upstream) {
        let name = crd.metadata.name.clone().unwrap();
        if crds.get_opt(&name).await.unwrap().is_some() {
            crds.delete(&name, &DeleteParams::default()).await.unwrap();
            wait_gone(&crds, &name).await;
        }
    }
    let create = PostParams {
        field_manager: Some("helm".into()),
        ..Default::default()
    };
    for crd in &upstream {
        crds.create(&create, crd).await.unwrap();
    }

    // The documented upgrade, with the real client.
    let kubeconfig = cp.write_kubeconfig("admin", &["system:masters"]);
    let kubectl = testkit::Binaries::locate().unwrap().dir.join("kubectl");
    let out = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(deploy_crds())
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl apply --server-side over upstream's CRDs: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    for crd in &ours {
        let name = crd.metadata.name.clone().unwrap();
        let live = crds.get(&name).await.unwrap();
        let before = upstream
            .iter()
            .find(|u| u.metadata.name == crd.metadata.name)
            .unwrap();
        for version in &before.spec.versions {
            assert!(
                live.spec
                    .versions
                    .iter()
                    .any(|v| v.name == version.name && v.served),
                "{name}: upstream serves {}, so must we",
                version.name
            );
        }
        assert_eq!(
            versions(&live),
            versions(crd),
            "{name}: the versions are ours, nothing of upstream's is left"
        );
        // No conversion is the apiserver's strategy `None`.
        let webhook =
            |c: &Option<CustomResourceConversion>| c.clone().filter(|c| c.strategy != "None");
        assert_eq!(
            webhook(&live.spec.conversion),
            webhook(&crd.spec.conversion),
            "{name}"
        );
        assert_eq!(
            live.spec.names.short_names, crd.spec.names.short_names,
            "{name}"
        );
    }

    // Leave ours as every other test binary expects them.
    for crd in &upstream {
        if !ours.iter().any(|o| o.metadata.name == crd.metadata.name) {
            let name = crd.metadata.name.clone().unwrap();
            crds.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    }
    cp.install_crds(&ours).await.unwrap();
}
