//! The DCD reconciler against the real control plane: conformance components become Available
//! with Pods Ready on simulated nodes, an idle reconcile writes nothing (per the audit log), and
//! drift of an owned field is restored.

#[allow(dead_code)]
#[path = "../src/fixtures.rs"]
mod fixtures;

use std::sync::Arc;
use std::time::{Duration, Instant};

use api::dcd::CONDITION_AVAILABLE;
use api::{DynamoComponentDeployment, labels};
use dcd_controller::{DcdReconciler, Error, FIELD_MANAGER, LAST_APPLIED_HASH, deployment_ready};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::cache::Cache;
use kit::client::{KubeStatusWriter, KubeWriter};
use kit::conditions;
use kit::events::Reporter;
use kit::run::{RunError, finish};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::{Api, ResourceExt};
use serde_json::json;
use testkit::{ControlPlane, TestNamespace};

/// The identity the reconciler's requests are made as.
const USER: &str = "dcd-controller";

/// The reconciler with production capabilities, run one pass at a time (reconcile, persist the
/// status, publish the events), as the run loop does.
struct Harness {
    dcds: Api<DynamoComponentDeployment>,
    reconciler: DcdReconciler,
    status: KubeStatusWriter,
    recorder: Recorder,
}

impl Harness {
    fn new(cp: &ControlPlane, ns: &TestNamespace) -> Self {
        let client = cp.client_as(USER, &["system:masters"]);
        // No watches registered: every read is a live read, as this identity.
        let reader = Arc::new(Cache::new(client.clone()));
        let writer = Arc::new(KubeWriter::new(client.clone(), FIELD_MANAGER));
        Harness {
            dcds: ns.api(),
            reconciler: DcdReconciler::new(reader, writer),
            status: KubeStatusWriter::new(client.clone(), FIELD_MANAGER),
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: USER.into(),
                    instance: None,
                },
            ),
        }
    }

    async fn pass(&self, name: &str) -> Result<Action, RunError<Error>> {
        let dcd = self.dcds.get(name).await.expect("the DCD");
        let result = self.reconciler.reconcile(&dcd).await;
        finish(&dcd, result, &self.status, &self.recorder).await
    }

    /// Reconcile until `name` is Available with its Pods Ready, failing after `within`.
    async fn until_available(&self, ns: &TestNamespace, name: &str, within: Duration) {
        let deployments: Api<Deployment> = ns.api();
        let pods: Api<Pod> = ns.api();
        let deadline = Instant::now() + within;
        loop {
            self.pass(name).await.expect("reconcile");
            let dcd = self.dcds.get(name).await.unwrap();
            let available = dcd
                .status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, CONDITION_AVAILABLE));
            let deployment = deployments.get_opt(name).await.unwrap();
            let ready_pods = pods
                .list(&ListParams::default().labels(&format!("{}={name}", labels::SELECTOR)))
                .await
                .unwrap()
                .items
                .iter()
                .filter(|p| pod_ready(p))
                .count();
            let desired = deployment
                .as_ref()
                .and_then(|d| d.spec.as_ref()?.replicas)
                .unwrap_or(1);
            if available
                && dcd.is_ready().is_ok()
                && deployment.as_ref().is_some_and(deployment_ready)
                && ready_pods == usize::try_from(desired).unwrap()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not Available after {within:?}: status {:?}, deployment status {:?}, {ready_pods} ready pods",
                dcd.status,
                deployment.and_then(|d| d.status)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What the graph's shared reconcilers provide before its DCDs exist: the discovery
/// ServiceAccount the pods run as.
async fn discovery_service_account(ns: &TestNamespace, graph: &str) {
    ns.api::<ServiceAccount>()
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(pod_render::discovery_service_account(graph)),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

/// The DCD of a conformance component, in the test namespace. No owner reference to the graph:
/// it does not exist here, and garbage collection would delete the DCD.
async fn create_dcd(
    ns: &TestNamespace,
    folder: &str,
    file: &str,
    component: &str,
) -> DynamoComponentDeployment {
    let mut dcd = fixtures::dcd_of(&fixtures::graph(folder, file), component);
    dcd.metadata.namespace = Some(ns.name().into());
    dcd.metadata.owner_references = None;
    ns.api::<DynamoComponentDeployment>()
        .create(&PostParams::default(), &dcd)
        .await
        .unwrap()
}

async fn start() -> Option<(&'static ControlPlane, TestNamespace)> {
    let cp = ControlPlane::shared().await;
    if !cp.simulates_nodes() {
        eprintln!("skipped: the control plane simulates no nodes, so no Pod becomes Ready");
        return None;
    }
    cp.install_crds(&api::crds()).await.unwrap();
    let ns = cp.namespace().await;
    Some((cp, ns))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conformance_worker_becomes_available_then_idle_reconciles_write_nothing() {
    let Some((cp, ns)) = start().await else {
        return;
    };
    discovery_service_account(&ns, "vllm-agg").await;
    let dcd = create_dcd(&ns, "v1beta1", "vllm-agg.yaml", "VllmDecodeWorker").await;
    let name = dcd.name_any();
    let h = Harness::new(cp, &ns);
    h.until_available(&ns, &name, Duration::from_secs(120))
        .await;

    // What was rendered, as the server holds it.
    let deployment: Deployment = ns.api().get(&name).await.unwrap();
    assert!(deployment.annotations().contains_key(LAST_APPLIED_HASH));
    assert!(
        deployment
            .managed_fields()
            .iter()
            .any(|f| f.manager.as_deref() == Some(FIELD_MANAGER)
                && f.operation.as_deref() == Some("Apply"))
    );
    let owner = &deployment.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (dcd.uid().unwrap().as_str(), Some(true))
    );
    let template = deployment.spec.as_ref().unwrap().template.clone();
    let main = &template.spec.as_ref().unwrap().containers[0];
    assert_eq!(main.name, "main");
    assert_eq!(
        main.command,
        Some(vec!["python3".into(), "-m".into(), "dynamo.vllm".into()])
    );
    let service: Service = ns.api().get(&name).await.unwrap();
    assert_eq!(
        service.spec.unwrap().selector.unwrap()[labels::DYNAMO_COMPONENT],
        "VllmDecodeWorker"
    );
    let status = h.dcds.get(&name).await.unwrap().status.unwrap();
    let component = status.component.unwrap();
    assert_eq!(
        (
            component.replicas,
            component.ready_replicas,
            component.available_replicas
        ),
        (1, Some(1), Some(1))
    );
    let available = conditions::find(&status.conditions, CONDITION_AVAILABLE).unwrap();
    assert_eq!(available.reason, "DeploymentReady");
    let events: Vec<String> = ns
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    // The Deployment and the Service of the first reconcile are announced together.
    for reason in ["ResourcesCreated", "DeploymentReady"] {
        assert!(events.iter().any(|e| e == reason), "{reason} in {events:?}");
    }

    // An idle reconcile reads but writes nothing: not the children, not the status.
    let mark = cp.audit().mark();
    assert_eq!(h.pass(&name).await.unwrap(), Action::await_change());
    let requests: Vec<_> = cp
        .audit()
        .since(&mark)
        .await
        .into_iter()
        .filter(|e| e.user == USER && e.namespace == ns.name())
        .collect();
    assert!(!requests.is_empty(), "the reconcile read its children");
    let writes: Vec<_> = requests.iter().filter(|e| e.is_write()).collect();
    assert!(writes.is_empty(), "an idle reconcile wrote: {writes:?}");

    // Drift of an owned field is restored by one apply.
    ns.api::<Deployment>()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "someone/else:latest"}
            ]}}}})),
        )
        .await
        .unwrap();
    let mark = cp.audit().mark();
    h.pass(&name).await.unwrap();
    let writes: Vec<_> = cp
        .audit()
        .since(&mark)
        .await
        .into_iter()
        .filter(|e| e.user == USER && e.namespace == ns.name() && e.is_write())
        .map(|e| (e.verb, e.resource, e.subresource))
        .collect();
    assert!(
        writes.contains(&("patch".into(), "deployments".into(), String::new())),
        "{writes:?}"
    );
    let restored: Deployment = ns.api().get(&name).await.unwrap();
    assert_eq!(
        restored.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v1alpha1_conformance_graph_components_become_available() {
    let Some((cp, ns)) = start().await else {
        return;
    };
    discovery_service_account(&ns, "vllm-agg").await;
    let h = Harness::new(cp, &ns);
    let mut names = Vec::new();
    for component in ["Frontend", "worker"] {
        names.push(
            create_dcd(&ns, "v1alpha1", "vllm-agg.yaml", component)
                .await
                .name_any(),
        );
    }
    for name in &names {
        h.until_available(&ns, name, Duration::from_secs(120)).await;
    }
    let frontend: Service = ns.api().get("vllm-agg-frontend").await.unwrap();
    let port = &frontend.spec.unwrap().ports.unwrap()[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("http"), 8000));
    // The alpha worker's `resources.limits.gpu` arrives as nvidia.com/gpu.
    let worker: Deployment = ns.api().get("vllm-agg-worker").await.unwrap();
    let main = &worker.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(
        main.resources.as_ref().unwrap().limits.as_ref().unwrap()["nvidia.com/gpu"].0,
        "1"
    );
    for name in &names {
        let mark = cp.audit().mark();
        h.pass(name).await.unwrap();
        let writes: Vec<_> = cp
            .audit()
            .since(&mark)
            .await
            .into_iter()
            .filter(|e| e.user == USER && e.namespace == ns.name() && e.is_write())
            .collect();
        assert!(
            writes.is_empty(),
            "{name}: an idle reconcile wrote: {writes:?}"
        );
    }
}
