//! Scaling adapters end to end: the operator binary, a conformance graph whose worker opts into
//! `scalingAdapter`, simulated nodes. Each test runs its own operator restricted to its own
//! namespace (`--namespace`), under its own identity, so the audit log attributes every request.

mod common;

use std::time::{Duration, Instant};

use api::{DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentScalingAdapter};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;
use testkit::{ControlPlane, TestNamespace};

use common::{Operator, Spawn, manifest};

const GRAPH: &str = "vllm-agg";
const WORKER: &str = "VllmDecodeWorker";
const ADAPTER: &str = "vllm-agg-vllmdecodeworker";
const DEADLINE: Duration = Duration::from_secs(120);

/// vllm-agg with the worker opted into a scaling adapter, seeded with `replicas`.
fn scalable_graph(replicas: i64) -> DynamicObject {
    let mut object = manifest("v1beta1/vllm-agg.yaml");
    for component in object.data["spec"]["components"].as_array_mut().unwrap() {
        if component["name"] == WORKER {
            component["scalingAdapter"] = json!({});
            component["replicas"] = json!(replicas);
        }
    }
    object
}

struct Env {
    cp: &'static ControlPlane,
    ns: TestNamespace,
    operator: Operator,
    identity: String,
}

impl Env {
    async fn start(identity: &str) -> Env {
        let cp = ControlPlane::shared().await;
        cp.install_crds(&api::crds()).await.unwrap();
        let ns = cp.namespace().await;
        let operator = Operator::spawn(
            cp,
            Spawn {
                identity,
                extra_args: vec![format!("--namespace={}", ns.name())],
                ..Spawn::default()
            },
        );
        Env {
            cp,
            ns,
            operator,
            identity: identity.to_string(),
        }
    }

    async fn apply_graph(&self, object: &DynamicObject) {
        let ar = ApiResource::erase::<DynamoGraphDeployment>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(self.cp.client(), self.ns.name(), &ar);
        api.patch(
            object.metadata.name.as_deref().unwrap(),
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap();
    }

    fn adapters(&self) -> Api<DynamoGraphDeploymentScalingAdapter> {
        self.ns.api()
    }

    /// `kubectl scale dgdsa/<adapter> --replicas=n`: a patch of the scale subresource.
    async fn scale(&self, replicas: i32) {
        self.adapters()
            .patch_scale(
                ADAPTER,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
    }

    async fn graph(&self) -> Option<DynamoGraphDeployment> {
        self.ns.api().get_opt(GRAPH).await.unwrap()
    }

    async fn adapter(&self) -> Option<DynamoGraphDeploymentScalingAdapter> {
        self.adapters().get_opt(ADAPTER).await.unwrap()
    }

    async fn worker_dcds(&self) -> Vec<DynamoComponentDeployment> {
        let lp = ListParams::default().labels(&format!("nvidia.com/dynamo-component={WORKER}"));
        self.ns.api().list(&lp).await.unwrap().items
    }

    /// The worker's Deployment (one worker generation in these tests).
    async fn worker_deployment(&self) -> Option<Deployment> {
        let name = self.worker_dcds().await.first()?.metadata.name.clone()?;
        self.ns.api().get_opt(&name).await.unwrap()
    }

    async fn worker_pods(&self) -> usize {
        let lp = ListParams::default().labels(&format!(
            "nvidia.com/dynamo-graph-deployment-name={GRAPH},nvidia.com/dynamo-component={WORKER}"
        ));
        let pods: Api<Pod> = self.ns.api();
        pods.list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count()
    }

    /// Poll `check` until it holds; on the deadline, panic with `what`, the graph's and the
    /// adapter's status, and the operator's log tail.
    async fn until<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + DEADLINE;
        while !check().await {
            if Instant::now() > deadline {
                let log = self.operator.log_text();
                let tail: Vec<_> = log.lines().rev().take(60).collect();
                panic!(
                    "timed out waiting for {what}\ngraph: {:#?}\nadapter: {:#?}\n--- operator log (tail) ---\n{}",
                    self.graph().await.and_then(|g| g.status),
                    self.adapter().await.and_then(|a| a.status),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn graph_ready(&self) -> bool {
        self.graph()
            .await
            .and_then(|g| g.status)
            .is_some_and(|s| kit::conditions::is_true(&s.conditions, kit::conditions::READY))
    }

    /// The graph's status of the worker: (replicas, ready replicas).
    async fn worker_status(&self) -> Option<(i32, i32)> {
        let status = self.graph().await?.status?;
        let c = status.components.get(WORKER)?;
        Some((c.replicas, c.ready_replicas.unwrap_or(0)))
    }

    async fn adapter_settled(&self, replicas: i32) -> bool {
        self.adapter()
            .await
            .and_then(|a| a.status)
            .is_some_and(|s| {
                s.replicas == Some(replicas)
                    && kit::conditions::find(&s.conditions, kit::conditions::READY)
                        .is_some_and(|c| c.status == "True" && c.reason == "Scaled")
            })
    }

    /// Converged at `replicas`: Deployment, pods, graph status, adapter status, graph Ready.
    async fn settle(&self, replicas: i32) {
        self.until(&format!("the worker settled at {replicas}"), || async {
            self.worker_deployment()
                .await
                .and_then(|d| d.spec)
                .and_then(|s| s.replicas)
                == Some(replicas)
                && self.worker_pods().await == usize::try_from(replicas).unwrap()
                && self.worker_status().await == Some((replicas, replicas))
                && self.adapter_settled(replicas).await
                && self.graph_ready().await
        })
        .await;
    }

    /// The operator's writes in this namespace since `mark`, as (verb, resource, subresource,
    /// name).
    async fn writes_since(
        &self,
        mark: &testkit::AuditMark,
    ) -> Vec<(String, String, String, String)> {
        self.cp
            .audit()
            .since(mark)
            .await
            .into_iter()
            .filter(|e| e.user == self.identity && e.is_write() && e.namespace == self.ns.name())
            .map(|e| (e.verb, e.resource, e.subresource, e.name))
            .collect()
    }

    /// Events about the adapter with `reason`.
    async fn adapter_events(&self, reason: &str) -> usize {
        let events: Api<Event> = self.ns.api();
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(ADAPTER)
                    && e.reason.as_deref() == Some(reason)
            })
            .map(|e| {
                e.series
                    .as_ref()
                    .map_or(1, |s| usize::try_from(s.count).unwrap_or(1))
            })
            .sum()
    }
}

#[tokio::test]
async fn scaling_the_adapter_scales_the_deployment_and_the_graph_status() {
    let env = Env::start("scaling-e2e-scale").await;
    env.apply_graph(&scalable_graph(1)).await;
    env.settle(1).await;
    let adapter = env.adapter().await.unwrap();
    assert_eq!(adapter.spec.replicas, 1, "seeded from the graph");
    assert_eq!(
        adapter.status.as_ref().unwrap().selector.as_deref(),
        Some(
            "nvidia.com/dynamo-graph-deployment-name=vllm-agg,nvidia.com/dynamo-component=VllmDecodeWorker"
        )
    );

    env.scale(3).await;
    env.settle(3).await;
    assert_eq!(env.adapter_events("Scaled").await, 1);
    let dcds = env.worker_dcds().await;
    assert_eq!(dcds.len(), 1);
    assert_eq!(dcds[0].spec.component.replicas, Some(3));
    // The graph's spec is the user's: it still says 1, and reconciles of the graph keep 3.
    let graph = env.graph().await.unwrap();
    let worker = graph
        .spec
        .components
        .iter()
        .find(|c| c.name == WORKER)
        .unwrap();
    assert_eq!(worker.replicas, Some(1));
    // A graph edit that rolls the workers: the rollout steps the generations to the adapter's
    // count, not the graph's 1, and hands the count back to the adapter when it completes.
    let before = dcds[0].metadata.name.clone().unwrap();
    let mut edited = scalable_graph(1);
    edited.data["spec"]["env"] = json!([{"name": "EXAMPLE", "value": "1"}]);
    env.apply_graph(&edited).await;
    env.until("the new worker generation replaced the old one", || async {
        let dcds = env.worker_dcds().await;
        dcds.len() == 1
            && dcds[0].metadata.name.as_deref() != Some(before.as_str())
            && dcds[0].spec.component.replicas == Some(3)
    })
    .await;
    env.settle(3).await;
}

#[tokio::test]
async fn an_hpa_targeting_the_adapter_resolves_its_scale_target() {
    let env = Env::start("scaling-e2e-hpa").await;
    env.apply_graph(&scalable_graph(2)).await;
    env.settle(2).await;
    let hpas: Api<HorizontalPodAutoscaler> = env.ns.api();
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "worker"},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "nvidia.com/v1beta1",
                "kind": "DynamoGraphDeploymentScalingAdapter",
                "name": ADAPTER,
            },
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}],
        },
    }))
    .unwrap();
    hpas.create(&PostParams::default(), &hpa).await.unwrap();
    // What the HPA controller reads: the target's scale subresource, with the pod selector.
    let scale = env.adapters().get_scale(ADAPTER).await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    let status = scale.status.unwrap();
    assert_eq!(status.replicas, 2);
    let selector = status.selector.unwrap();
    assert_eq!(
        selector,
        "nvidia.com/dynamo-graph-deployment-name=vllm-agg,nvidia.com/dynamo-component=VllmDecodeWorker"
    );
    let pods: Api<Pod> = env.ns.api();
    let selected = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(selected, 2, "the selector selects the component's pods");
    // An autoscaler's write, as the HPA controller makes it: an update of the scale.
    let mut scale = env.adapters().get_scale(ADAPTER).await.unwrap();
    scale.spec.as_mut().unwrap().replicas = Some(4);
    env.adapters()
        .replace_scale(ADAPTER, &PostParams::default(), &scale)
        .await
        .unwrap();
    env.settle(4).await;
}

#[tokio::test]
async fn a_conflicting_edit_is_restored_to_the_owners_value_once() {
    let env = Env::start("scaling-e2e-conflict").await;
    env.apply_graph(&scalable_graph(2)).await;
    env.settle(2).await;
    let deployment = env.worker_deployment().await.unwrap();
    let name = deployment.metadata.name.clone().unwrap();
    let deployments: Api<Deployment> = env.ns.api();

    // `kubectl edit deployment`: the DCD controller restores the DCD's (the adapter's) count.
    let mark = env.cp.audit().mark();
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    deployments
        .patch(
            &name,
            &edit,
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    env.settle(2).await;
    let writes = env.writes_since(&mark).await;
    let restores: Vec<_> = writes
        .iter()
        .filter(|(verb, resource, sub, n)| {
            verb == "patch" && resource == "deployments" && sub.is_empty() && *n == name
        })
        .collect();
    assert_eq!(restores.len(), 1, "restored exactly once: {writes:#?}");
    assert!(
        !writes.iter().any(
            |(_, resource, sub, _)| resource == "dynamocomponentdeployments" && sub.is_empty()
        ),
        "the DCD was not touched: {writes:#?}"
    );

    // `kubectl edit dcd`: the adapter's controller restores its count.
    let mark = env.cp.audit().mark();
    let dcds: Api<DynamoComponentDeployment> = env.ns.api();
    dcds.patch(
        &name,
        &edit,
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    env.until("the DCD's count restored", || async {
        dcds.get(&name).await.unwrap().spec.component.replicas == Some(2)
    })
    .await;
    env.settle(2).await;
    let writes = env.writes_since(&mark).await;
    let dcd_restores = writes
        .iter()
        .filter(|(verb, resource, sub, n)| {
            verb == "patch"
                && resource == "dynamocomponentdeployments"
                && sub.is_empty()
                && *n == name
        })
        .count();
    assert_eq!(dcd_restores, 1, "restored exactly once: {writes:#?}");
    let adapter = env.adapter().await.unwrap();
    assert_eq!(adapter.spec.replicas, 2, "the owner's value");
}

#[tokio::test]
async fn to_zero_and_back_from_zero() {
    let env = Env::start("scaling-e2e-zero").await;
    env.apply_graph(&scalable_graph(1)).await;
    env.settle(1).await;
    env.scale(0).await;
    env.settle(0).await;
    env.scale(2).await;
    env.settle(2).await;
    assert_eq!(env.adapter_events("Scaled").await, 2);
}

#[tokio::test]
async fn an_adapter_whose_graph_is_missing_waits_with_a_reason() {
    let env = Env::start("scaling-e2e-missing").await;
    let adapter: DynamoGraphDeploymentScalingAdapter = serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeploymentScalingAdapter",
        "metadata": {"name": ADAPTER},
        "spec": {"replicas": 2, "dgdRef": {"name": GRAPH, "componentName": WORKER}},
    }))
    .unwrap();
    env.adapters()
        .create(&PostParams::default(), &adapter)
        .await
        .unwrap();
    let reason = || async {
        env.adapter()
            .await
            .and_then(|a| a.status)
            .and_then(|s| kit::conditions::find(&s.conditions, kit::conditions::READY).cloned())
            .map(|c| c.reason)
    };
    env.until("GraphNotFound", || async {
        reason().await.as_deref() == Some("GraphNotFound")
    })
    .await;
    // Waiting is not an error: nothing is retried, nothing written but the status once.
    let log = env.operator.log_text();
    assert!(
        !log.lines()
            .any(|l| l.contains("reconcile failed") && l.contains(ADAPTER)),
        "{log}"
    );
}
