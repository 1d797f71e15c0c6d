//! Optional APIs with the operator binary on the real control plane: multinode components on
//! the component pathway run as LeaderWorkerSets (the real CRD of `testdata/lws-crds/`, the test
//! playing the LeaderWorkerSet controller), and APIs installed or removed while the operator
//! runs are followed without a restart.

mod common;

use std::time::Duration;

use api::{DynamoComponentDeployment, DynamoGraphDeployment, labels};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;
use testkit::ControlPlane;

use common::{Operator, Spawn, apply, eventually, manifest};

const MULTINODE: &str = "v1beta1/sglang-disagg-multinode.yaml";
const DEADLINE: Duration = Duration::from_secs(120);

fn lws_resource() -> ApiResource {
    ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "leaderworkerset.x-k8s.io",
        "v1",
        "LeaderWorkerSet",
    ))
}

fn lws_crd_file() -> std::path::PathBuf {
    testkit::testdata::path("lws-crds").join("leaderworkerset.x-k8s.io_leaderworkersets.yaml")
}

fn ready_condition(dgd: &DynamoGraphDeployment) -> Option<(String, String)> {
    let status = dgd.status.as_ref()?;
    let c = kit::conditions::find(&status.conditions, kit::conditions::READY)?;
    Some((c.status.clone(), c.reason.clone()))
}

/// Waits until graph `name` reports `Ready` with `status` and `reason` (any reason if `None`).
async fn wait_ready(
    dgds: &Api<DynamoGraphDeployment>,
    name: &str,
    status: &str,
    reason: Option<&str>,
    operator: &Operator,
) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let current = dgds.get_opt(name).await.unwrap();
        let seen = current.as_ref().and_then(ready_condition);
        if let Some((s, r)) = &seen
            && s == status
            && reason.is_none_or(|want| want == r)
        {
            return;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "{name}: Ready {status} {reason:?} not reached; last {seen:?}: {:#?}\n--- operator log (tail) ---\n{}",
                current.and_then(|d| d.status),
                tail(operator)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn tail(operator: &Operator) -> String {
    let log = operator.log_text();
    let lines: Vec<_> = log.lines().rev().take(60).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The LeaderWorkerSets of the namespace.
async fn leader_worker_sets(lws: &Api<DynamicObject>) -> Vec<DynamicObject> {
    lws.list(&ListParams::default()).await.unwrap().items
}

/// Plays the LeaderWorkerSet controller: every group of `name` is ready and the set Available.
async fn report_ready(lws: &Api<DynamicObject>, name: &str) {
    let current = lws.get(name).await.unwrap();
    let replicas = current.data["spec"]["replicas"].as_i64().unwrap_or(1);
    let status = json!({"status": {
        "replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas,
        "conditions": [{"type": "Available", "status": "True", "reason": "AllGroupsReady",
                        "message": "All replicas are ready",
                        "lastTransitionTime": "2025-01-01T00:00:00Z"}],
    }});
    let params = PatchParams {
        field_manager: Some("leaderworkerset-controller".into()),
        ..Default::default()
    };
    lws.patch_status(name, &params, &Patch::Merge(&status))
        .await
        .unwrap();
}

/// A multinode graph on the component pathway: its multinode components get LeaderWorkerSets
/// (`<dcd>-0`, owned by the DCD); once the LeaderWorkerSet controller reports them ready, the
/// DCDs are Available and the graph Ready. A user's edit of a field the operator owns on a
/// LeaderWorkerSet is reverted.
#[tokio::test]
async fn a_multinode_graph_runs_on_leader_worker_sets_and_their_drift_is_restored() {
    let cp = ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    cp.install_crd_files(&[lws_crd_file()]).await.unwrap();
    let ns = cp.namespace().await;
    let operator = Operator::spawn(
        cp,
        Spawn {
            identity: "dynamo-operator-lws",
            extra_args: vec![format!("--namespace={}", ns.name())],
            ..Spawn::default()
        },
    );
    let object = manifest(MULTINODE);
    let name = object.metadata.name.clone().unwrap();
    apply(cp.client(), ns.name(), &object).await;
    let dgds: Api<DynamoGraphDeployment> = ns.api();
    let lws: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns.name(), &lws_resource());

    // One LeaderWorkerSet per multinode component (decode, prefill), controlled by its DCD.
    eventually("two LeaderWorkerSets", DEADLINE, || async {
        leader_worker_sets(&lws).await.len() == 2
    })
    .await;
    let dcds: Api<DynamoComponentDeployment> = ns.api();
    for set in leader_worker_sets(&lws).await {
        let set_name = set.metadata.name.clone().unwrap();
        let owner = set
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .expect("a controller owner");
        assert_eq!(owner.kind, "DynamoComponentDeployment", "{set_name}");
        assert_eq!(set_name, format!("{}-0", owner.name));
        assert_eq!(set.data["spec"]["leaderWorkerTemplate"]["size"], 2);
        assert_eq!(set.data["spec"]["startupPolicy"], "LeaderCreated");
        let dcd = dcds.get(&owner.name).await.unwrap();
        assert!(dcd.spec.component.is_multinode(), "{}", owner.name);
    }
    wait_ready(&dgds, &name, "False", None, &operator).await;

    // The test plays the LeaderWorkerSet controller.
    for set in leader_worker_sets(&lws).await {
        report_ready(&lws, set.metadata.name.as_deref().unwrap()).await;
    }
    wait_ready(
        &dgds,
        &name,
        "True",
        Some("all_resources_are_ready"),
        &operator,
    )
    .await;
    for dcd in dcds.list(&ListParams::default()).await.unwrap() {
        if !dcd.spec.component.is_multinode() {
            continue;
        }
        let status = dcd.status.unwrap();
        let available =
            kit::conditions::find(&status.conditions, api::dcd::CONDITION_AVAILABLE).unwrap();
        assert_eq!(
            (available.status.as_str(), available.reason.as_str()),
            ("True", "LeaderWorkerSetReady")
        );
        let component = status.component.unwrap();
        assert_eq!(
            component.component_kind,
            api::ComponentKind::LeaderWorkerSet
        );
        assert_eq!(component.ready_replicas, Some(1));
    }

    // A user edits a field the DCD owns: the operator restores it.
    let edited = leader_worker_sets(&lws).await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    lws.patch(
        &edited,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"startupPolicy": "LeaderReady"}})),
    )
    .await
    .unwrap();
    eventually("the edit is reverted", DEADLINE, || async {
        lws.get(&edited).await.unwrap().data["spec"]["startupPolicy"] == "LeaderCreated"
    })
    .await;
    assert!(
        operator.logged("LeaderWorkerSet") && operator.logged(&edited),
        "{}",
        tail(&operator)
    );
}

/// The operator starts on a cluster without LeaderWorkerSet or Grove: a multinode graph waits
/// at `no_multinode_orchestrator_available`, a graph asking for Grove at
/// `selected_workload_provider_unavailable`. Installing each CRD while the operator runs lets
/// the waiting graph proceed; removing the LeaderWorkerSet CRD puts the multinode graph back to
/// waiting. The operator is never restarted. (A control plane of its own: tests sharing one
/// install these CRDs.)
#[tokio::test]
async fn apis_installed_and_removed_while_running_are_followed() {
    let cp = ControlPlane::start(testkit::Options {
        simulate_nodes: false,
        ..Default::default()
    })
    .await
    .unwrap();
    cp.install_crds(&api::crds()).await.unwrap();
    let ns = cp.namespace().await;
    // Cluster-wide: a namespace-restricted operator does not follow the CRDs.
    let operator = Operator::spawn(&cp, Spawn::default());
    eventually("/readyz without the optional APIs", DEADLINE, || async {
        operator.ready()
    })
    .await;
    let dgds: Api<DynamoGraphDeployment> = ns.api();
    let multinode = manifest(MULTINODE);
    let multinode_name = multinode.metadata.name.clone().unwrap();
    apply(cp.client(), ns.name(), &multinode).await;
    let mut grove = manifest("v1beta1/vllm-agg.yaml");
    grove.metadata.name = Some("asks-for-grove".into());
    grove
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(labels::ENABLE_GROVE.into(), "true".into());
    apply(cp.client(), ns.name(), &grove).await;
    wait_ready(
        &dgds,
        &multinode_name,
        "False",
        Some(component_program::REASON_NO_MULTINODE_ORCHESTRATOR),
        &operator,
    )
    .await;
    wait_ready(
        &dgds,
        "asks-for-grove",
        "False",
        Some(root::REASON_PROVIDER_UNAVAILABLE),
        &operator,
    )
    .await;

    // LeaderWorkerSet installed: the multinode graph deploys its components.
    cp.install_crd_files(&[lws_crd_file()]).await.unwrap();
    let lws: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns.name(), &lws_resource());
    eventually("the LeaderWorkerSets", DEADLINE, || async {
        leader_worker_sets(&lws).await.len() == 2
    })
    .await;
    wait_ready(
        &dgds,
        &multinode_name,
        "False",
        Some("some_resources_are_not_ready"),
        &operator,
    )
    .await;

    // Grove installed: the graph that asked for it selects it.
    cp.install_crd_files(&testkit::testdata::yaml_files("grove-crds"))
        .await
        .unwrap();
    eventually("the provider record grove", DEADLINE, || async {
        dgds.get("asks-for-grove")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
            .get(labels::WORKLOAD_PROVIDER)
            .map(String::as_str)
            == Some(labels::PROVIDER_GROVE)
    })
    .await;
    let pod_clique_sets: Api<api::grove::PodCliqueSet> = ns.api();
    eventually("the PodCliqueSet", DEADLINE, || async {
        pod_clique_sets
            .get_opt("asks-for-grove")
            .await
            .unwrap()
            .is_some()
    })
    .await;
    // The multinode graph recorded `component` before Grove came: it stays there.
    assert_eq!(
        dgds.get(&multinode_name)
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap()[labels::WORKLOAD_PROVIDER],
        labels::PROVIDER_COMPONENT
    );

    // LeaderWorkerSet removed: the multinode graph waits again.
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    crds.delete(
        "leaderworkersets.leaderworkerset.x-k8s.io",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    wait_ready(
        &dgds,
        &multinode_name,
        "False",
        Some(component_program::REASON_NO_MULTINODE_ORCHESTRATOR),
        &operator,
    )
    .await;
    assert!(operator.logged("now served"), "{}", tail(&operator));
    // The cache started the kinds' watches when their APIs came, and stopped LeaderWorkerSet's.
    assert!(
        operator.logged("API served: watching"),
        "{}",
        tail(&operator)
    );
    assert!(
        operator.logged("API no longer served: watch stopped"),
        "{}",
        tail(&operator)
    );
    assert!(operator.logged("no longer served"), "{}", tail(&operator));
    assert!(operator.ready(), "still ready: {}", tail(&operator));
}
