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

    worker_registers_its_discovery_metadata(cp, ns.name(), "vllm-agg").await;
}

/// A worker of `graph` does what the Dynamo runtime does for Kubernetes discovery, with a token
/// of the graph's discovery ServiceAccount (which its pods run as): it applies its
/// DynamoWorkerMetadata (`<pod>-<container>`, owned by its Pod, field manager `dynamo-worker`),
/// updates it, lists and watches the others and reads EndpointSlices. Other namespaces stay out
/// of reach, and the object goes with its Pod.
async fn worker_registers_its_discovery_metadata(
    cp: &testkit::ControlPlane,
    ns: &str,
    graph: &str,
) {
    use api::worker_metadata::{DynamoWorkerMetadata, DynamoWorkerMetadataSpec};
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    let admin = cp.client();
    let account = format!("{graph}-k8s-service-discovery");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let lp = kube::api::ListParams::default().labels(&format!(
        "nvidia.com/dynamo-graph-deployment-name={graph},nvidia.com/dynamo-component=VllmDecodeWorker"
    ));
    let pod = pods
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .expect("a worker pod");
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some(account.as_str()),
        "worker pods run as the discovery account"
    );

    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(
            &account,
            &kube::api::PostParams::default(),
            &TokenRequest::default(),
        )
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    let worker = cp.token_client(&account, &token);
    let metadata: Api<DynamoWorkerMetadata> = Api::namespaced(worker.clone(), ns);
    let pod_name = pod.metadata.name.clone().unwrap();
    let name = format!("{pod_name}-main");
    let object = |instance: u64| {
        let mut object = DynamoWorkerMetadata::new(
            &name,
            DynamoWorkerMetadataSpec {
                data: serde_json::json!({
                    "endpoints": {format!("{ns}/backend/generate"): {
                        "type": "Endpoint", "namespace": ns, "component": "backend",
                        "endpoint": "generate", "instance_id": instance,
                    }},
                    "model_cards": {},
                }),
            },
        );
        object.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod_name.clone(),
            uid: pod.metadata.uid.clone().unwrap(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        }]);
        object
    };
    let apply = PatchParams::apply("dynamo-worker").force();
    for instance in [1, 2] {
        metadata
            .patch(&name, &apply, &Patch::Apply(&object(instance)))
            .await
            .unwrap_or_else(|e| panic!("the worker cannot apply its metadata: {e}"));
    }
    let listed = metadata.list(&Default::default()).await.unwrap();
    let mine = listed
        .items
        .iter()
        .find(|m| m.metadata.name.as_deref() == Some(name.as_str()))
        .unwrap();
    assert_eq!(
        mine.spec.data["endpoints"][format!("{ns}/backend/generate")]["instance_id"],
        2
    );
    let _events = metadata
        .watch(&kube::api::WatchParams::default().timeout(1), "0")
        .await
        .expect("the worker can watch metadata");
    Api::<EndpointSlice>::namespaced(worker.clone(), ns)
        .list(&Default::default())
        .await
        .expect("the worker can read EndpointSlices");

    let elsewhere = cp.namespace().await;
    let foreign: Api<DynamoWorkerMetadata> = Api::namespaced(worker, elsewhere.name());
    match foreign
        .patch(&name, &apply, &Patch::Apply(&object(3)))
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("another namespace must be forbidden, got {other:?}"),
    }

    // Garbage collection removes the metadata with its Pod (the runtime relies on it).
    pods.delete(&pod_name, &Default::default()).await.unwrap();
    let as_admin: Api<DynamoWorkerMetadata> = Api::namespaced(admin, ns);
    eventually(
        "the metadata goes with its Pod",
        Duration::from_secs(120),
        || async { as_admin.get_opt(&name).await.unwrap().is_none() },
    )
    .await;
}
