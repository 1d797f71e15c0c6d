//! The adapter reconciler against the real control plane: the scale subresources of Grove's
//! real CRDs (`testdata/grove-crds/`), with the test playing Grove; and the partial
//! apply of a DCD's replicas, which the API server refuses to turn into a new DCD.

use std::sync::Arc;

use api::grove::{
    PodClique, PodCliqueResourceSpec, PodCliqueScalingGroup, PodCliqueScalingGroupSpec,
    PodCliqueSpec,
};
use api::{
    DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentScalingAdapter, labels,
};
use kit::cache::Cache;
use kit::client::KubeWriter;
use kit::conditions::{self, READY};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use scaling_controller::component::ComponentWorkloads;
use scaling_controller::{
    FIELD_MANAGER, REASON_SCALED, REASON_SCALING, REASON_WORKLOAD_NOT_FOUND, Scaled,
    ScalingAdapterReconciler, Workload,
};
use serde_json::json;
use testkit::{ControlPlane, TestNamespace};

/// The identity of the reconciler's requests.
const USER: &str = "scaling-controller";

async fn start() -> (&'static ControlPlane, TestNamespace) {
    let cp = ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let files = testkit::testdata::yaml_files("grove-crds");
    cp.install_crd_files(&files).await.unwrap();
    let ns = cp.namespace().await;
    (cp, ns)
}

/// The reconciler with production capabilities; reads are live (a cache without watches).
fn reconciler(cp: &ControlPlane) -> ScalingAdapterReconciler {
    let client = cp.client_as(USER, &["system:masters"]);
    let reader: Arc<dyn kit::Reader> = Arc::new(Cache::new(client.clone()));
    let writer: Arc<dyn kit::Writer> = Arc::new(KubeWriter::new(client, FIELD_MANAGER));
    ScalingAdapterReconciler::new(reader, writer).with_served(kit::served::Served::of([
        &kit::object::resource::<api::grove::PodCliqueSet>(),
    ]))
}

/// A grove graph `g` with a single-node worker `Worker` and a multinode `Decode`, both with a
/// scaling adapter.
async fn grove_graph(ns: &TestNamespace) -> DynamoGraphDeployment {
    let container = json!([{"name": "main", "image": "runtime:1"}]);
    let dgd: DynamoGraphDeployment = serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g", "annotations": {labels::WORKLOAD_PROVIDER: labels::PROVIDER_GROVE}},
        "spec": {"components": [
            {"name": "Worker", "type": "worker", "replicas": 1, "scalingAdapter": {},
             "podTemplate": {"spec": {"containers": container}}},
            {"name": "Decode", "type": "decode", "replicas": 1, "scalingAdapter": {},
             "multinode": {"nodeCount": 2},
             "podTemplate": {"spec": {"containers": container}}},
        ]},
    }))
    .unwrap();
    ns.api().create(&PostParams::default(), &dgd).await.unwrap()
}

async fn adapter(ns: &TestNamespace, component: &str, replicas: i32) -> String {
    let name = format!("g-{}", component.to_lowercase());
    let a: DynamoGraphDeploymentScalingAdapter = serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeploymentScalingAdapter",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "dgdRef": {"name": "g", "componentName": component}},
    }))
    .unwrap();
    ns.api().create(&PostParams::default(), &a).await.unwrap();
    name
}

/// One reconcile of adapter `name`; returns the Ready reason.
async fn reconcile(ns: &TestNamespace, r: &ScalingAdapterReconciler, name: &str) -> String {
    let api: Api<DynamoGraphDeploymentScalingAdapter> = ns.api();
    let a = api.get(name).await.unwrap();
    let outcome = match r.reconcile(&a).await {
        Ok(outcome) => outcome,
        Err(failed) => panic!("reconcile failed: {}", failed.error),
    };
    conditions::find(&outcome.status.conditions, READY)
        .unwrap()
        .reason
        .clone()
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn grove_children_are_scaled_through_their_scale_subresource() {
    let (cp, ns) = start().await;
    grove_graph(&ns).await;
    let worker = adapter(&ns, "Worker", 3).await;
    let decode = adapter(&ns, "Decode", 2).await;
    let r = reconciler(cp);

    // Grove has not created its children yet: a wait, not an error.
    assert_eq!(reconcile(&ns, &r, &worker).await, REASON_WORKLOAD_NOT_FOUND);
    assert_eq!(reconcile(&ns, &r, &decode).await, REASON_WORKLOAD_NOT_FOUND);

    // Play Grove: the PodClique and the PodCliqueScalingGroup of replica 0.
    let cliques: Api<PodClique> = ns.api();
    cliques
        .create(
            &PostParams::default(),
            &PodClique {
                metadata: meta("g-0-worker"),
                spec: PodCliqueResourceSpec {
                    clique: PodCliqueSpec {
                        role_name: "worker".into(),
                        replicas: 1,
                        pod_spec: serde_json::from_value(
                            json!({"containers": [{"name": "main", "image": "runtime:1"}]}),
                        )
                        .unwrap(),
                        ..Default::default()
                    },
                },
                status: None,
            },
        )
        .await
        .unwrap();
    let groups: Api<PodCliqueScalingGroup> = ns.api();
    groups
        .create(
            &PostParams::default(),
            &PodCliqueScalingGroup {
                metadata: meta("g-0-decode"),
                spec: PodCliqueScalingGroupSpec {
                    replicas: Some(1),
                    min_available: None,
                    clique_names: vec!["decode-ldr".into(), "decode-wkr".into()],
                },
                status: None,
            },
        )
        .await
        .unwrap();

    let mark = cp.audit().mark();
    assert_eq!(reconcile(&ns, &r, &worker).await, REASON_SCALING);
    assert_eq!(reconcile(&ns, &r, &decode).await, REASON_SCALING);
    assert_eq!(
        cliques
            .get("g-0-worker")
            .await
            .unwrap()
            .spec
            .clique
            .replicas,
        3
    );
    assert_eq!(
        groups.get("g-0-decode").await.unwrap().spec.replicas,
        Some(2)
    );
    let writes: Vec<_> = cp
        .audit()
        .since(&mark)
        .await
        .into_iter()
        .filter(|e| e.user == USER && e.namespace == ns.name() && e.is_write())
        .map(|e| (e.verb, e.resource, e.subresource, e.code))
        .collect();
    assert_eq!(
        writes,
        [
            ("patch".into(), "podcliques".into(), "scale".into(), 200),
            (
                "patch".into(),
                "podcliquescalinggroups".into(),
                "scale".into(),
                200
            ),
        ],
        "only the scale subresources"
    );

    // Grove reports the new counts: settled, and another pass writes nothing.
    let pp = PatchParams::default();
    let generation = cliques.get("g-0-worker").await.unwrap().metadata.generation;
    cliques
        .patch_status(
            "g-0-worker",
            &pp,
            &Patch::Merge(json!({"status": {"observedGeneration": generation, "replicas": 3}})),
        )
        .await
        .unwrap();
    let mark = cp.audit().mark();
    assert_eq!(reconcile(&ns, &r, &worker).await, REASON_SCALED);
    let writes = cp
        .audit()
        .since(&mark)
        .await
        .into_iter()
        .filter(|e| e.user == USER && e.namespace == ns.name() && e.is_write())
        .count();
    assert_eq!(writes, 0);
}

#[tokio::test]
async fn applying_the_count_of_a_missing_dcd_creates_nothing() {
    let (cp, ns) = start().await;
    let client = cp.client_as(USER, &["system:masters"]);
    let workloads = ComponentWorkloads::new(
        Arc::new(Cache::new(client.clone())),
        Arc::new(KubeWriter::new(client, FIELD_MANAGER)),
    );
    let gone = Workload {
        kind: "DynamoComponentDeployment",
        name: "g-worker-deleted".into(),
        replicas: Some(1),
        current: 1,
        observed: true,
    };
    let scaled = workloads.ensure(Some(ns.name()), &gone, 3).await.unwrap();
    assert_eq!(scaled, Scaled::Gone);
    let dcds: Api<DynamoComponentDeployment> = ns.api();
    assert!(dcds.get_opt("g-worker-deleted").await.unwrap().is_none());
}

/// Who owns `spec.replicas` of the DCD `name`, per its managedFields.
async fn replica_owners(dcds: &Api<DynamoComponentDeployment>, name: &str) -> Vec<String> {
    let dcd = dcds.get(name).await.unwrap();
    dcd.metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.pointer("/f:spec/f:replicas"))
                .is_some()
        })
        .filter_map(|m| m.manager)
        .collect()
}

#[tokio::test]
async fn the_adapter_owns_the_dcd_count_and_the_graphs_apply_keeps_it() {
    let (cp, ns) = start().await;
    let dcds: Api<DynamoComponentDeployment> = ns.api();
    let graph_apply = |replicas: Option<i32>, note: &str| {
        let mut spec = json!({"name": "Worker", "type": "worker"});
        if let Some(r) = replicas {
            spec["replicas"] = json!(r);
        }
        json!({
            "apiVersion": "nvidia.com/v1beta1",
            "kind": "DynamoComponentDeployment",
            "metadata": {"name": "g-worker", "annotations": {"note": note}},
            "spec": spec,
        })
    };
    let dgd = PatchParams::apply("dynamo-operator/dgd").force();
    dcds.patch("g-worker", &dgd, &Patch::Apply(graph_apply(Some(2), "1")))
        .await
        .unwrap();
    assert_eq!(
        replica_owners(&dcds, "g-worker").await,
        ["dynamo-operator/dgd"]
    );

    let client = cp.client_as(USER, &["system:masters"]);
    let workloads = ComponentWorkloads::new(
        Arc::new(Cache::new(client.clone())),
        Arc::new(KubeWriter::new(client, FIELD_MANAGER)),
    );
    let live = |replicas| Workload {
        kind: "DynamoComponentDeployment",
        name: "g-worker".into(),
        replicas: Some(replicas),
        current: 0,
        observed: false,
    };
    assert_eq!(
        workloads
            .ensure(Some(ns.name()), &live(2), 5)
            .await
            .unwrap(),
        Scaled::Changed
    );
    assert_eq!(
        dcds.get("g-worker").await.unwrap().spec.component.replicas,
        Some(5)
    );
    assert_eq!(replica_owners(&dcds, "g-worker").await, [FIELD_MANAGER]);

    // The graph applies its DCD without replicas (the component has an adapter): the count stays.
    dcds.patch("g-worker", &dgd, &Patch::Apply(graph_apply(None, "2")))
        .await
        .unwrap();
    let dcd = dcds.get("g-worker").await.unwrap();
    assert_eq!(dcd.spec.component.replicas, Some(5));
    assert_eq!(dcd.annotations()["note"], "2");
    // The same count again is a no-op. (A fresh writer: without a cache, a writer takes its own
    // last result as the current revision and would count the graph's write in between.)
    let client = cp.client_as(USER, &["system:masters"]);
    let fresh = ComponentWorkloads::new(
        Arc::new(Cache::new(client.clone())),
        Arc::new(KubeWriter::new(client, FIELD_MANAGER)),
    );
    assert_eq!(
        fresh.ensure(Some(ns.name()), &live(5), 5).await.unwrap(),
        Scaled::Unchanged
    );
    // Hand-back: the graph applies its count, forced; it owns the field again.
    dcds.patch("g-worker", &dgd, &Patch::Apply(graph_apply(Some(5), "3")))
        .await
        .unwrap();
    assert_eq!(
        replica_owners(&dcds, "g-worker").await.len(),
        2,
        "shared at the same value"
    );
    dcds.patch("g-worker", &dgd, &Patch::Apply(graph_apply(Some(4), "4")))
        .await
        .unwrap();
    assert_eq!(
        replica_owners(&dcds, "g-worker").await,
        ["dynamo-operator/dgd"]
    );
}
