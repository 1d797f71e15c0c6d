//! The operator converges graphs with nothing but the RBAC in `deploy/`: it runs as the
//! `dynamo-system/dynamo-operator` ServiceAccount, with a token from the TokenRequest API, and
//! the apiserver enforces the ClusterRole. A rule missing from `deploy/rbac/` fails this test.

mod common;

use std::time::Duration;

use api::DynamoGraphDeployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;

use common::{Operator, Spawn, eventually, manifest};

#[tokio::test]
async fn converges_with_only_the_deployed_rbac() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let admin = cp.client();
    let kubeconfig = common::deployed_rbac_kubeconfig(cp, "rbac-operator.kubeconfig").await;
    let operator = Operator::spawn(
        cp,
        Spawn {
            kubeconfig: Some(kubeconfig),
            // As deploy/operator/deployment.yaml: the base RBAC grants no Secret list/watch.
            extra_args: vec!["--discover-image-pull-secrets=false".into()],
            ..Spawn::default()
        },
    );

    let ns = cp.namespace().await;
    let dgds: Api<DynamoGraphDeployment> = ns.api();
    let ar = ApiResource::erase::<DynamoGraphDeployment>(&());
    let raw: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns.name(), &ar);
    let mut names = Vec::new();
    for relative in [
        "v1beta1/vllm-agg.yaml",
        "v1beta1/sglang-disagg-planner.yaml",
    ] {
        let object = manifest(relative);
        let name = object.metadata.name.clone().unwrap();
        raw.patch(
            &name,
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap();
        names.push(name);
    }
    for name in &names {
        let check = || async {
            dgds.get_opt(name).await.unwrap().is_some_and(|d| {
                d.status.is_some_and(|s| {
                    kit::conditions::is_true(&s.conditions, kit::conditions::READY)
                })
            })
        };
        let ok = tokio::time::timeout(Duration::from_secs(120), async {
            while !check().await {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        assert!(
            ok.is_ok(),
            "{name} not Ready with the deployed RBAC: {:#?}\n--- operator log ---\n{}",
            dgds.get_opt(name).await.unwrap().and_then(|d| d.status),
            operator.log_text()
        );
    }
    // The scaling adapter controller: the worker opts in, the adapter is scaled through its
    // scale subresource, the count reaches the Deployment.
    let mut scalable = manifest("v1beta1/vllm-agg.yaml");
    for component in scalable.data["spec"]["components"].as_array_mut().unwrap() {
        if component["name"] == "VllmDecodeWorker" {
            component["scalingAdapter"] = serde_json::json!({});
        }
    }
    raw.patch(
        "vllm-agg",
        &PatchParams::apply("kubectl").force(),
        &Patch::Apply(&scalable),
    )
    .await
    .unwrap();
    let adapters: Api<api::DynamoGraphDeploymentScalingAdapter> = ns.api();
    eventually("the scaling adapter", Duration::from_secs(60), || async {
        adapters
            .get_opt("vllm-agg-vllmdecodeworker")
            .await
            .unwrap()
            .is_some()
    })
    .await;
    adapters
        .patch_scale(
            "vllm-agg-vllmdecodeworker",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    let scaled = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let lp = kube::api::ListParams::default()
                .labels("nvidia.com/dynamo-component=VllmDecodeWorker");
            let at_two = deployments
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .any(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(2));
            let adapter_ready = adapters
                .get("vllm-agg-vllmdecodeworker")
                .await
                .unwrap()
                .status
                .is_some_and(|s| kit::conditions::is_true(&s.conditions, kit::conditions::READY));
            if at_two && adapter_ready {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(
        scaled.is_ok(),
        "the adapter's count did not reach the Deployment with the deployed RBAC: {:#?}\n--- operator log ---\n{}",
        adapters
            .get("vllm-agg-vllmdecodeworker")
            .await
            .unwrap()
            .status,
        operator.log_text()
    );

    let log = operator.log_text();
    let forbidden: Vec<_> = log
        .lines()
        .filter(|l| l.contains("forbidden") || l.contains("Forbidden"))
        .collect();
    assert!(
        forbidden.is_empty(),
        "requests refused by RBAC:\n{}",
        forbidden.join("\n")
    );
    eventually("the operator is ready", Duration::from_secs(10), || async {
        operator.ready()
    })
    .await;
}
