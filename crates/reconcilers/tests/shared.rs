//! The shared resources against a real control plane: every child is accepted by the API
//! server, an unserved InferencePool API is a clear failure that keeps the checkpoint statuses,
//! an idle reconcile writes nothing (per the audit log), and garbage collection removes the
//! graph's own children with it while namespace-wide ones stay.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::common::MultinodeSpec;
use api::v1beta1::{
    ComponentCheckpointConfig, ExperimentalSpec, GpuMemoryServiceSpec, MAIN_CONTAINER_NAME,
};
use api::{
    BackendFramework, ComponentType, DynamoCheckpoint, DynamoComponentDeploymentSharedSpec,
    DynamoGraphDeployment, DynamoGraphDeploymentSpec, DynamoGraphDeploymentStatus,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PodSpec, PodTemplateSpec, ResourceRequirements, Secret, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceClassSpec, ResourceClaimTemplate};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::Outcome;
use kit::cache::Cache;
use kit::client::KubeWriter;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::{Client, Resource};
use reconcilers::child::FIELD_MANAGER;
use reconcilers::epp::inference_pool_resource;
use reconcilers::shared::{SharedConfig, SharedResources};
use reconcilers::ssh_keys::{DEFAULT_SECRET_NAME, PRIVATE_KEY};
use reconcilers::{Step, naming};
use testkit::ControlPlane;

const OPERATOR: &str = "dgd-operator";

fn component(name: &str, t: ComponentType) -> DynamoComponentDeploymentSharedSpec {
    DynamoComponentDeploymentSharedSpec {
        name: name.into(),
        r#type: Some(t),
        pod_template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: MAIN_CONTAINER_NAME.into(),
                    image: Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// A graph that needs every shared step.
fn graph(ns: &str) -> DynamoGraphDeployment {
    let mut decode = component("VllmDecodeWorker", ComponentType::Decode);
    decode.multinode = Some(MultinodeSpec { node_count: 2 });
    decode.experimental = Some(ExperimentalSpec {
        gpu_memory_service: Some(GpuMemoryServiceSpec::default()),
        checkpoint: Some(ComponentCheckpointConfig {
            enabled: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let main = &mut decode
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    main.resources = Some(ResourceRequirements {
        limits: Some(BTreeMap::from([(
            "nvidia.com/gpu".into(),
            Quantity("1".into()),
        )])),
        ..Default::default()
    });
    DynamoGraphDeployment {
        metadata: ObjectMeta {
            name: Some("vllm".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: DynamoGraphDeploymentSpec {
            backend_framework: Some(BackendFramework::Vllm),
            components: vec![
                component("Frontend", ComponentType::Frontend),
                component("Planner", ComponentType::Planner),
                component("Epp", ComponentType::Epp),
                decode,
            ],
            ..Default::default()
        },
        status: None,
    }
}

/// A minimal InferencePool CRD (the real one's schema is not needed to store the object).
fn inference_pool_crd() -> CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "inferencepools.inference.networking.k8s.io",
                     "annotations": {"api-approved.kubernetes.io": "unapproved, test fixture"}},
        "spec": {
            "group": "inference.networking.k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "inferencepools", "singular": "inferencepool",
                      "kind": "InferencePool", "listKind": "InferencePoolList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap()
}

async fn create_if_absent<K>(api: Api<K>, object: &K)
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create: {e}"),
    }
}

fn named<T: Default>(name: &str, f: impl FnOnce(ObjectMeta) -> T) -> T {
    f(ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    })
}

async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_none()
}

#[tokio::test]
async fn shared_resources_on_a_real_api_server() {
    let cp = ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let ns = cp.namespace().await;
    let ns = ns.name().to_string();
    let admin = cp.client();

    // Cluster fixtures: ClusterRoles named for this test, the default GPU DeviceClass.
    let planner_role = format!("{ns}-planner");
    let epp_role = format!("{ns}-epp");
    for role in [&planner_role, &epp_role] {
        let cr = named(role, |metadata| ClusterRole {
            metadata,
            ..Default::default()
        });
        create_if_absent(Api::<ClusterRole>::all(admin.clone()), &cr).await;
    }
    let class = named("gpu.nvidia.com", |metadata| DeviceClass {
        metadata,
        spec: DeviceClassSpec::default(),
    });
    create_if_absent(Api::<DeviceClass>::all(admin.clone()), &class).await;

    let dgds = Api::<DynamoGraphDeployment>::namespaced(admin.clone(), &ns);
    let dgd = dgds
        .create(&PostParams::default(), &graph(&ns))
        .await
        .unwrap();

    let operator: Client = cp.client_as(OPERATOR, &["system:masters"]);
    let shared = SharedResources::new(
        Arc::new(Cache::new(operator.clone())),
        Arc::new(KubeWriter::new(operator.clone(), FIELD_MANAGER)),
        SharedConfig {
            planner_cluster_role: Some(planner_role.clone()),
            epp_cluster_role: Some(epp_role.clone()),
            ..Default::default()
        },
    );
    let outcome = || Outcome::new(DynamoGraphDeploymentStatus::default());

    // Without the InferencePool API the EPP step fails; what came before is in place and the
    // checkpoint statuses are kept.
    let crds = Api::<CustomResourceDefinition>::all(admin.clone());
    if crds
        .get_opt("inferencepools.inference.networking.k8s.io")
        .await
        .unwrap()
        .is_none()
    {
        let failed = shared.reconcile(&dgd).await.result.unwrap_err();
        assert_eq!(failed.error.step(), Some(Step::Epp), "{}", failed.error);
        assert!(
            failed
                .error
                .to_string()
                .contains("Gateway API Inference Extension"),
            "{}",
            failed.error
        );
        assert!(
            failed
                .checkpoints
                .is_some_and(|c| c.contains_key("VllmDecodeWorker"))
        );
        let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
        assert!(gone(&cms, &naming::wait_leader_config_map_name("vllm")).await);
        cp.install_crds(&[inference_pool_crd()]).await.unwrap();
    }

    let mut out = outcome();
    let infos = out.take(shared.reconcile(&dgd).await).unwrap().infos;
    assert!(infos["VllmDecodeWorker"].exists);
    let checkpoint = infos["VllmDecodeWorker"].checkpoint_name.clone().unwrap();

    let sas = Api::<ServiceAccount>::namespaced(admin.clone(), &ns);
    let rbs = Api::<RoleBinding>::namespaced(admin.clone(), &ns);
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(admin.clone(), &ns);
    let rcts = Api::<ResourceClaimTemplate>::namespaced(admin.clone(), &ns);
    let ckpts = Api::<DynamoCheckpoint>::namespaced(admin.clone(), &ns);
    let pools =
        Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &inference_pool_resource());
    let rb = rbs.get("planner-serviceaccount-binding").await.unwrap();
    assert_eq!(rb.role_ref.name, planner_role);
    assert!(!gone(&sas, "epp-serviceaccount").await);
    assert!(!gone(&sas, &naming::discovery_service_account("vllm")).await);
    assert!(
        !gone(
            &rcts,
            &naming::resource_claim_template_name("vllm", "VllmDecodeWorker")
        )
        .await
    );
    assert!(!gone(&ckpts, &checkpoint).await);
    let pool = pools.get("vllm-pool").await.unwrap();
    assert_eq!(pool.data["spec"]["endpointPickerRef"]["name"], "vllm-epp");
    assert!(!gone(&cms, "vllm-wait-leader-script").await);
    let key = secrets.get(DEFAULT_SECRET_NAME).await.unwrap();
    let private = key.data.unwrap()[PRIVATE_KEY].clone();

    // Idle: the operator writes nothing, and the key is not rotated.
    let mark = cp.audit().mark();
    let mut idle = outcome();
    idle.take(shared.reconcile(&dgd).await).unwrap();
    let writes: Vec<_> = cp
        .audit()
        .since(&mark)
        .await
        .into_iter()
        .filter(|e| e.user == OPERATOR && e.is_write())
        .collect();
    assert!(writes.is_empty(), "{writes:#?}");
    assert!(idle.events.is_empty(), "{:?}", idle.events);
    let again = secrets.get(DEFAULT_SECRET_NAME).await.unwrap();
    assert_eq!(again.data.unwrap()[PRIVATE_KEY], private);

    // The graph drops its `epp` component and turns Kubernetes discovery off: its InferencePool,
    // then (released) its discovery account, Role and RoleBinding are deleted (uid precondition).
    let mut trimmed = dgd.clone();
    trimmed
        .spec
        .components
        .retain(|c| c.r#type != Some(ComponentType::Epp));
    trimmed.metadata.annotations.get_or_insert_default().insert(
        api::labels::DYNAMO_DISCOVERY_BACKEND.to_string(),
        "etcd".to_string(),
    );
    let mut out = outcome();
    out.take(shared.reconcile(&trimmed).await).unwrap();
    assert!(pools.get_opt("vllm-pool").await.unwrap().is_none());
    // The discovery objects go when the program's last step releases them (the graph is Ready
    // again).
    assert!(!gone(&sas, &naming::discovery_service_account("vllm")).await);
    let finish = reconcilers::finish::Finish::new(
        Arc::new(Cache::new(operator.clone())),
        Arc::new(KubeWriter::new(operator.clone(), FIELD_MANAGER)),
        reconcilers::discovery::DiscoveryBackend::Kubernetes,
    );
    out.take(finish.reconcile(&trimmed, true, true).await)
        .unwrap();
    assert!(gone(&sas, &naming::discovery_service_account("vllm")).await);
    let reasons: Vec<_> = out.events.iter().map(|e| e.reason.as_str()).collect();
    for deleted in [
        "InferencePoolDeleted",
        "RoleBindingDeleted",
        "RoleDeleted",
        "ServiceAccountDeleted",
    ] {
        assert!(reasons.contains(&deleted), "{reasons:?}");
    }

    // Deleting the graph removes its own children; namespace-wide accounts and the key stay.
    dgds.delete("vllm", &DeleteParams::background())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let owned_gone = gone(&cms, "vllm-wait-leader-script").await
            && gone(
                &rcts,
                &naming::resource_claim_template_name("vllm", "VllmDecodeWorker"),
            )
            .await
            && gone(&ckpts, &checkpoint).await
            && pools.get_opt("vllm-pool").await.unwrap().is_none();
        if owned_gone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "garbage collection did not remove the children"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!gone(&sas, "planner-serviceaccount").await);
    assert!(!gone(&secrets, DEFAULT_SECRET_NAME).await);
}
