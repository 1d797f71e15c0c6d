//! Reconciler tests on the in-memory double: one pass is reconcile + persist status + publish
//! events, as the run loop does.

use api::dcd::{CONDITION_AVAILABLE, CONDITION_DYNAMO_COMPONENT_READY};
use api::v1beta1::ScalingAdapter;
use api::{ComponentKind, DynamoComponentDeployment, labels};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kit::conditions;
use kit::object::resource;
use kit::run::{RunError, finish};
use kit::testing::{Double, Verb, Write};
use kit::{EventType, Patch, Retry};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::*;
use crate::LAST_APPLIED_HASH;
use crate::fixtures::{NS, conformance_dcd};
use crate::render::leader_worker_set_resource;

fn worker() -> DynamoComponentDeployment {
    conformance_dcd("v1beta1", "vllm-agg.yaml", "VllmDecodeWorker")
}

const WORKER: &str = "vllm-agg-vllmdecodeworker";

fn multinode() -> DynamoComponentDeployment {
    conformance_dcd("v1beta1", "sglang-disagg-multinode.yaml", "decode")
}

const MULTINODE: &str = "sglang-disagg-multinode-decode";

/// A served set holding the LeaderWorkerSet API.
fn lws_served() -> Served {
    Served::of([&leader_worker_set_resource()])
}

fn setup(dcd: DynamoComponentDeployment) -> (Double, DcdReconciler) {
    let d = Double::new();
    d.insert(dcd);
    let r = DcdReconciler::new(d.reader(), d.writer());
    (d, r)
}

fn dcd(d: &Double, name: &str) -> DynamoComponentDeployment {
    d.object(Some(NS), name).expect("the DCD")
}

/// One pass of the run loop: reconcile, persist the status, publish the events.
async fn pass(d: &Double, r: &DcdReconciler, name: &str) -> Result<Action, RunError<Error>> {
    let dcd = dcd(d, name);
    let result = r.reconcile(&dcd).await;
    finish(
        &dcd,
        result,
        d.status_writer().as_ref(),
        d.event_sink().as_ref(),
    )
    .await
}

/// The published events' reasons and notes.
fn notes(d: &Double) -> Vec<(String, String)> {
    d.events()
        .into_iter()
        .map(|e| (e.event.reason, e.event.note.unwrap_or_default()))
        .collect()
}

fn status(d: &Double, name: &str) -> DynamoComponentDeploymentStatus {
    dcd(d, name).status.expect("a status")
}

fn condition(d: &Double, name: &str, type_: &str) -> (String, String, String) {
    let s = status(d, name);
    let c = conditions::find(&s.conditions, type_).expect("the condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn deployment(d: &Double, name: &str) -> Deployment {
    d.object(Some(NS), name).expect("the Deployment")
}

fn main_image(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
}

fn writes_of(d: &Double, verb: Verb) -> Vec<Write> {
    d.writes().into_iter().filter(|w| w.verb == verb).collect()
}

fn clear(d: &Double) {
    d.clear_writes();
    d.clear_events();
}

/// Report the Deployment as the Deployment controller would once its pods are available.
async fn make_available(d: &Double, name: &str) {
    report_deployment(d, name, true).await;
}

/// Report the Deployment as the Deployment controller would with every desired pod available,
/// or with none.
async fn report_deployment(d: &Double, name: &str, available: bool) {
    let dep = deployment(d, name);
    let desired = dep.spec.as_ref().unwrap().replicas.unwrap_or(1);
    let ready = if available { desired } else { 0 };
    d.status_writer()
        .apply_status_dynamic(
            &resource::<Deployment>(),
            Some(NS),
            name,
            &json!({
                "observedGeneration": dep.metadata.generation,
                "replicas": desired,
                "updatedReplicas": desired,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "conditions": [{"type": "Available", "status": if available { "True" } else { "False" }}],
            }),
        )
        .await
        .unwrap();
}

async fn merge_patch(d: &Double, resource: &ApiResource, name: &str, body: Value) {
    d.writer()
        .patch_dynamic(resource, Some(NS), name, &Patch::Merge(body))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_first_run_creates_the_deployment_and_the_service() {
    let (d, r) = setup(worker());
    assert_eq!(pass(&d, &r, WORKER).await.unwrap(), Action::await_change());
    let dep = deployment(&d, WORKER);
    assert_eq!(
        main_image(&dep).as_deref(),
        Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")
    );
    assert!(dep.annotations().contains_key(LAST_APPLIED_HASH));
    let owner = &dep.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        ("dcd-uid", Some(true))
    );
    let svc: Service = d.object(Some(NS), WORKER).expect("the Service");
    assert_eq!(svc.metadata.owner_references.unwrap()[0].uid, "dcd-uid");
    // One reconcile's writes, announced together.
    assert_eq!(
        notes(&d),
        [(
            "ResourcesCreated".to_string(),
            format!("Created Deployment {WORKER}; Service {WORKER}")
        )]
    );
    assert!(
        d.events()
            .iter()
            .all(|e| e.event.type_ == EventType::Normal)
    );
    let s = status(&d, WORKER);
    assert_eq!(s.observed_generation, Some(1));
    let component = s.component.unwrap();
    assert_eq!(component.component_kind, ComponentKind::Deployment);
    assert_eq!(component.component_names, [WORKER]);
    assert_eq!(component.runtime_namespace.as_deref(), Some("ns-vllm-agg"));
    assert_eq!((component.replicas, component.ready_replicas), (0, Some(0)));
    assert_eq!(
        (component.gpus_per_engine, component.gpus_per_replica),
        (Some(1), Some(1))
    );
    assert_eq!(
        condition(&d, WORKER, CONDITION_AVAILABLE),
        (
            "False".into(),
            "DeploymentNotReady".into(),
            "Deployment is not ready".into()
        )
    );
    assert_eq!(
        condition(&d, WORKER, CONDITION_DYNAMO_COMPONENT_READY),
        (
            "False".into(),
            "ComponentNotReady".into(),
            "DynamoComponent is not ready".into()
        )
    );
    assert!(conditions::find(&status(&d, WORKER).conditions, "Ready").is_none());
    assert!(dcd(&d, WORKER).is_ready().is_err());
}

#[tokio::test]
async fn a_second_run_writes_nothing() {
    let (d, r) = setup(worker());
    pass(&d, &r, WORKER).await.unwrap();
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());
    assert!(d.events().is_empty());
}

#[tokio::test]
async fn an_available_deployment_makes_the_dcd_ready_once() {
    let (d, r) = setup(worker());
    pass(&d, &r, WORKER).await.unwrap();
    make_available(&d, WORKER).await;
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(
        condition(&d, WORKER, CONDITION_AVAILABLE),
        (
            "True".into(),
            "DeploymentReady".into(),
            "Deployment is ready".into()
        )
    );
    assert_eq!(
        condition(&d, WORKER, CONDITION_DYNAMO_COMPONENT_READY),
        (
            "True".into(),
            "ComponentReady".into(),
            "DynamoComponent is ready".into()
        )
    );
    let component = status(&d, WORKER).component.unwrap();
    assert_eq!(
        (
            component.replicas,
            component.updated_replicas,
            component.ready_replicas,
            component.available_replicas
        ),
        (1, 1, Some(1), Some(1))
    );
    assert!(dcd(&d, WORKER).is_ready().is_ok());
    // Only the status changed; a graph's component becoming available for the first time is
    // announced by the graph's Ready, not by an event of its own.
    assert_eq!(writes_of(&d, Verb::ApplyStatus).len(), 1);
    assert_eq!(d.writes().len(), 1);
    assert!(d.events().is_empty(), "{:?}", d.event_reasons());
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert!(d.writes().is_empty());
    assert!(d.events().is_empty());
}

fn available_since(d: &Double, name: &str) -> Time {
    let s = status(d, name);
    let c = conditions::find(&s.conditions, CONDITION_AVAILABLE).expect("Available");
    c.last_transition_time.clone()
}

#[tokio::test]
async fn availability_events_first_availability_loss_and_recovery() {
    // (owned by a graph, events after: first status, available, lost, available again)
    // Created an hour ago: a loss is never within the second of the creation.
    let created = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let old = || {
        let mut dcd = worker();
        dcd.metadata.creation_timestamp = Some(Time(created.try_into().unwrap()));
        dcd
    };
    let standalone = {
        let mut dcd = old();
        dcd.metadata.owner_references = None;
        dcd
    };
    let rows: [(DynamoComponentDeployment, [&[&str]; 4]); 2] = [
        (
            old(),
            [
                &["ResourcesCreated"],
                &[],
                &["DeploymentNotReady"],
                &["DeploymentReady"],
            ],
        ),
        (
            standalone,
            [
                &["ResourcesCreated"],
                &["DeploymentReady"],
                &["DeploymentNotReady"],
                &["DeploymentReady"],
            ],
        ),
    ];
    for (component, expected) in rows {
        let (d, r) = setup(component);
        let steps: [Option<bool>; 4] = [None, Some(true), Some(false), Some(true)];
        for (step, (available, events)) in steps.into_iter().zip(expected).enumerate() {
            match available {
                Some(true) => make_available(&d, WORKER).await,
                Some(false) => report_deployment(&d, WORKER, false).await,
                None => {}
            }
            clear(&d);
            pass(&d, &r, WORKER).await.unwrap();
            assert_eq!(d.event_reasons(), events, "step {step}");
            if step == 0 {
                // Unavailable since its creation, as its conditions say.
                let created = dcd(&d, WORKER).metadata.creation_timestamp.unwrap();
                assert_eq!(available_since(&d, WORKER), created);
                let s = status(&d, WORKER);
                let ready = conditions::find(&s.conditions, CONDITION_DYNAMO_COMPONENT_READY);
                assert_eq!(ready.unwrap().last_transition_time, created);
            }
        }
    }
}

#[tokio::test]
async fn drift_of_an_owned_field_is_restored() {
    let (d, r) = setup(worker());
    pass(&d, &r, WORKER).await.unwrap();
    let mut containers = deployment(&d, WORKER)
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers;
    containers[0].image = Some("someone/else:latest".into());
    merge_patch(
        &d,
        &resource::<Deployment>(),
        WORKER,
        json!({"spec": {"template": {"spec": {"containers": containers}}}}),
    )
    .await;
    assert_eq!(
        main_image(&deployment(&d, WORKER)).as_deref(),
        Some("someone/else:latest")
    );
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(
        main_image(&deployment(&d, WORKER)).as_deref(),
        Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")
    );
    assert_eq!(d.event_reasons(), ["DeploymentUpdated"]);
    let applies = writes_of(&d, Verb::Apply);
    assert_eq!(applies.len(), 1);
    assert_eq!(
        (applies[0].kind.as_str(), applies[0].changed),
        ("Deployment", true)
    );
}

#[tokio::test]
async fn drift_of_an_owned_service_field_is_restored() {
    let (d, r) = setup(worker());
    pass(&d, &r, WORKER).await.unwrap();
    merge_patch(
        &d,
        &resource::<Service>(),
        WORKER,
        json!({"spec": {"selector": {"nvidia.com/dynamo-component": "other"}}}),
    )
    .await;
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    let svc: Service = d.object(Some(NS), WORKER).unwrap();
    assert_eq!(
        svc.spec.unwrap().selector.unwrap()[labels::DYNAMO_COMPONENT],
        "VllmDecodeWorker"
    );
    assert_eq!(d.event_reasons(), ["ServiceUpdated"]);
}

#[tokio::test]
async fn a_changed_spec_updates_the_deployment_and_removed_fields_go() {
    let mut w = worker();
    w.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_with(Default::default)
        .annotations = Some([("note".to_string(), "x".to_string())].into());
    let (d, r) = setup(w);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).annotations()["note"], "x");
    // The annotation is removed from the spec: the applied body shrinks, the hash changes.
    let mut changed = dcd(&d, WORKER);
    changed
        .spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .metadata = None;
    changed.metadata.generation = Some(2);
    d.insert(changed);
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    let dep = deployment(&d, WORKER);
    assert!(!dep.annotations().contains_key("note"));
    assert!(d.event_reasons().contains(&"ResourcesUpdated".to_string()));
    assert_eq!(status(&d, WORKER).observed_generation, Some(2));
}

#[tokio::test]
async fn replicas_a_scaling_adapter_wrote_are_applied_and_restored() {
    let mut w = worker();
    w.spec.component.replicas = Some(2);
    w.spec.component.scaling_adapter = Some(ScalingAdapter {});
    let (d, r) = setup(w);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, Some(2));
    // `kubectl edit deployment`: the DCD's count (the adapter's) comes back, once.
    merge_patch(
        &d,
        &resource::<Deployment>(),
        WORKER,
        json!({"spec": {"replicas": 5}}),
    )
    .await;
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, Some(2));
    assert_eq!(d.event_reasons(), ["DeploymentUpdated"]);
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert!(writes_of(&d, Verb::Apply).is_empty(), "{:?}", d.writes());
    // Scaled to zero and back from zero through the DCD.
    for replicas in [0, 3] {
        let mut w = dcd(&d, WORKER);
        w.spec.component.replicas = Some(replicas);
        w.metadata.generation = Some(w.metadata.generation.unwrap() + 1);
        d.insert(w);
        pass(&d, &r, WORKER).await.unwrap();
        assert_eq!(
            deployment(&d, WORKER).spec.unwrap().replicas,
            Some(replicas)
        );
    }
}

#[tokio::test]
async fn enabling_a_scaling_adapter_holds_the_running_count() {
    let mut w = worker();
    w.spec.component.replicas = Some(4);
    let (d, r) = setup(w);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, Some(4));
    // The graph enabled the adapter and stopped applying the DCD's replicas; the adapter's
    // controller has not written them yet.
    let mut w = dcd(&d, WORKER);
    w.spec.component.replicas = None;
    w.spec.component.scaling_adapter = Some(ScalingAdapter {});
    w.metadata.generation = Some(2);
    d.insert(w);
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    // Not dropped (server-side apply would remove a field its manager stops applying).
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, Some(4));
    assert!(writes_of(&d, Verb::Apply).is_empty(), "{:?}", d.writes());
    // Without an adapter an unset count is left out: the field goes back to the API default.
    let mut w = dcd(&d, WORKER);
    w.spec.component.scaling_adapter = None;
    w.metadata.generation = Some(3);
    d.insert(w);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, None);
}

#[tokio::test]
async fn a_new_adapter_component_without_replicas_starts_at_the_api_default() {
    let mut w = worker();
    w.spec.component.replicas = None;
    w.spec.component.scaling_adapter = Some(ScalingAdapter {});
    let (d, r) = setup(w);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, None);
}

#[tokio::test]
async fn a_failed_read_of_the_held_count_is_the_deployments_failure() {
    let mut w = worker();
    w.spec.component.replicas = None;
    w.spec.component.scaling_adapter = Some(ScalingAdapter {});
    let (d, r) = setup(w);
    d.fail_next(Verb::Get, "Deployment", kit::Error::Forbidden("no".into()));
    assert!(pass(&d, &r, WORKER).await.is_err());
    let available = conditions::find(&status(&d, WORKER).conditions, CONDITION_AVAILABLE)
        .unwrap()
        .clone();
    assert_eq!(available.reason, REASON_DEPLOYMENT_SYNC_FAILED);
    assert!(d.objects::<Deployment>().is_empty());
}

#[tokio::test]
async fn unset_replicas_are_left_to_others() {
    let mut w = worker();
    w.spec.component.replicas = None;
    let (d, r) = setup(w);
    pass(&d, &r, WORKER).await.unwrap();
    merge_patch(
        &d,
        &resource::<Deployment>(),
        WORKER,
        json!({"spec": {"replicas": 3}}),
    )
    .await;
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, Some(3));
    assert!(writes_of(&d, Verb::Apply).is_empty());
}

#[tokio::test]
async fn replicas_owned_by_the_dcd_are_restored() {
    let mut w = worker();
    w.spec.component.replicas = Some(2);
    let (d, r) = setup(w);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, Some(2));
    merge_patch(
        &d,
        &resource::<Deployment>(),
        WORKER,
        json!({"spec": {"replicas": 5}}),
    )
    .await;
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(deployment(&d, WORKER).spec.unwrap().replicas, Some(2));
    assert_eq!(d.event_reasons(), ["DeploymentUpdated"]);
}

#[tokio::test]
async fn without_leader_worker_sets_a_multinode_component_touches_nothing() {
    let (d, r) = setup(multinode());
    assert_eq!(
        pass(&d, &r, MULTINODE).await.unwrap(),
        Action::await_change()
    );
    assert!(d.objects::<Deployment>().is_empty());
    assert!(d.objects::<Service>().is_empty());
    let verbs: Vec<_> = d.writes().iter().map(|w| w.verb).collect();
    assert_eq!(verbs, [Verb::ApplyStatus]);
    let (status_, reason, message) = condition(&d, MULTINODE, CONDITION_AVAILABLE);
    assert_eq!(
        (status_.as_str(), reason.as_str()),
        ("False", "LeaderWorkerSetUnavailable")
    );
    assert!(message.contains("leaderworkerset.x-k8s.io/v1"), "{message}");
    assert_eq!(
        condition(&d, MULTINODE, CONDITION_DYNAMO_COMPONENT_READY).1,
        "ComponentNotReady"
    );
    assert_eq!(status(&d, MULTINODE).observed_generation, Some(1));
    assert_eq!(d.event_reasons(), ["LeaderWorkerSetUnavailable"]);
    assert_eq!(d.events()[0].event.type_, EventType::Warning);
    clear(&d);
    pass(&d, &r, MULTINODE).await.unwrap();
    assert!(d.writes().is_empty());
    assert!(d.events().is_empty(), "announced once");
}

#[tokio::test]
async fn with_leader_worker_sets_a_multinode_component_gets_one() {
    let (d, r) = setup(multinode());
    let r = r.with_served(lws_served());
    pass(&d, &r, MULTINODE).await.unwrap();
    let name = format!("{MULTINODE}-0");
    let lws = d
        .reader()
        .get_dynamic(&leader_worker_set_resource(), Some(NS), &name)
        .await
        .unwrap()
        .expect("the LeaderWorkerSet");
    assert_eq!(lws.data["spec"]["leaderWorkerTemplate"]["size"], 2);
    assert!(d.objects::<Deployment>().is_empty());
    assert_eq!(d.event_reasons(), ["ResourcesCreated"]);
    assert_eq!(
        condition(&d, MULTINODE, CONDITION_AVAILABLE).1,
        "LeaderWorkerSetNotReady"
    );
    let component = status(&d, MULTINODE).component.unwrap();
    assert_eq!(component.component_kind, ComponentKind::LeaderWorkerSet);
    assert_eq!(component.component_names, vec![name.clone()]);
    assert_eq!(
        (component.gpus_per_engine, component.gpus_per_replica),
        (Some(8), Some(8))
    );
    d.status_writer()
        .apply_status_dynamic(
            &leader_worker_set_resource(),
            Some(NS),
            &name,
            &json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                    "conditions": [{"type": "Available", "status": "True"}]}),
        )
        .await
        .unwrap();
    clear(&d);
    pass(&d, &r, MULTINODE).await.unwrap();
    assert_eq!(
        condition(&d, MULTINODE, CONDITION_AVAILABLE).1,
        "LeaderWorkerSetReady"
    );
    // Its graph announces its first availability.
    assert!(d.events().is_empty(), "{:?}", d.event_reasons());
    clear(&d);
    pass(&d, &r, MULTINODE).await.unwrap();
    assert!(d.writes().is_empty());
}

/// The stored LeaderWorkerSet `name`.
fn lws(d: &Double, name: &str) -> DynamicObject {
    let value = d
        .all()
        .into_iter()
        .find(|o| o["kind"] == "LeaderWorkerSet" && o["metadata"]["name"] == name)
        .expect("the LeaderWorkerSet");
    serde_json::from_value(value).unwrap()
}

/// Report the LeaderWorkerSet's status as its controller would.
async fn lws_status(d: &Double, name: &str, status: Value) {
    d.status_writer()
        .apply_status_dynamic(&leader_worker_set_resource(), Some(NS), name, &status)
        .await
        .unwrap();
}

/// Upstream's `Test_reconcileLeaderWorkerSetResources`: the LeaderWorkerSet's ready replicas
/// and `Available` condition make the DCD `Available` (reason `LeaderWorkerSetReady` or
/// `LeaderWorkerSetNotReady`), and its counts become `status.component`.
#[tokio::test]
async fn leader_worker_set_status_maps_to_the_dcd_status() {
    let available = |s: &str| json!([{"type": "Available", "status": s}]);
    // (what, DCD replicas, LWS status, Available, reason)
    let cases = [
        (
            "upstream: singular LWS replica ready",
            1,
            json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "conditions": available("True")}),
            "True",
            "LeaderWorkerSetReady",
        ),
        (
            "upstream: multiple LWS replicas, one unready",
            3,
            json!({"replicas": 3, "updatedReplicas": 2, "readyReplicas": 2, "conditions": available("False")}),
            "False",
            "LeaderWorkerSetNotReady",
        ),
        (
            "upstream: multiple LWS replicas, all ready",
            3,
            json!({"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "conditions": available("True")}),
            "True",
            "LeaderWorkerSetReady",
        ),
        (
            "enough ready replicas, but not Available",
            2,
            json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "conditions": available("False")}),
            "False",
            "LeaderWorkerSetNotReady",
        ),
        (
            "Available, too few ready replicas",
            2,
            json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "conditions": available("True")}),
            "False",
            "LeaderWorkerSetNotReady",
        ),
        (
            "no status yet",
            1,
            json!({}),
            "False",
            "LeaderWorkerSetNotReady",
        ),
    ];
    for (what, replicas, lws_status_body, want_status, want_reason) in cases {
        let mut dcd = multinode();
        dcd.spec.component.replicas = Some(replicas);
        let (d, r) = setup(dcd);
        let r = r.with_served(lws_served());
        pass(&d, &r, MULTINODE).await.unwrap();
        let name = format!("{MULTINODE}-0");
        assert_eq!(
            lws(&d, &name).data["spec"]["replicas"],
            json!(replicas),
            "{what}"
        );
        lws_status(&d, &name, lws_status_body.clone()).await;
        pass(&d, &r, MULTINODE).await.unwrap();
        let (status_, reason, message) = condition(&d, MULTINODE, CONDITION_AVAILABLE);
        assert_eq!(
            (status_.as_str(), reason.as_str()),
            (want_status, want_reason),
            "{what}"
        );
        let ready = want_status == "True";
        assert_eq!(
            message,
            if ready {
                "LeaderWorkerSet is ready"
            } else {
                "LeaderWorkerSet is not ready"
            },
            "{what}"
        );
        assert_eq!(
            condition(&d, MULTINODE, CONDITION_DYNAMO_COMPONENT_READY).0,
            want_status,
            "{what}"
        );
        let component = status(&d, MULTINODE).component.unwrap();
        let count = |field: &str| {
            lws_status_body[field]
                .as_i64()
                .map_or(0, |n| i32::try_from(n).unwrap())
        };
        assert_eq!(
            (
                component.component_kind,
                component.component_names.clone(),
                component.replicas,
                component.updated_replicas,
                component.ready_replicas,
                component.available_replicas,
            ),
            (
                ComponentKind::LeaderWorkerSet,
                vec![name.clone()],
                count("replicas"),
                count("updatedReplicas"),
                Some(count("readyReplicas")),
                None,
            ),
            "{what}"
        );
        assert_eq!(
            dcd_is_ready(&d),
            ready,
            "{what}: the DCD's readiness follows the LeaderWorkerSet"
        );
    }
}

fn dcd_is_ready(d: &Double) -> bool {
    dcd(d, MULTINODE).is_ready().is_ok()
}

/// A user's edit of a field the DCD owns on its LeaderWorkerSet is reverted by the next
/// reconcile (which the LeaderWorkerSet's generation change triggers), as for Deployments.
#[tokio::test]
async fn drift_of_an_owned_leader_worker_set_field_is_restored() {
    let (d, r) = setup(multinode());
    let r = r.with_served(lws_served());
    pass(&d, &r, MULTINODE).await.unwrap();
    let name = format!("{MULTINODE}-0");
    let before = lws(&d, &name);
    merge_patch(
        &d,
        &leader_worker_set_resource(),
        &name,
        json!({"spec": {"startupPolicy": "LeaderReady", "leaderWorkerTemplate": {"size": 5}}}),
    )
    .await;
    assert_eq!(
        lws(&d, &name).data["spec"]["leaderWorkerTemplate"]["size"],
        5
    );
    clear(&d);
    pass(&d, &r, MULTINODE).await.unwrap();
    let after = lws(&d, &name);
    assert_eq!(after.data["spec"], before.data["spec"]);
    assert_eq!(d.event_reasons(), ["LeaderWorkerSetUpdated"]);
    let applies = writes_of(&d, Verb::Apply);
    assert_eq!(
        applies
            .iter()
            .map(|w| (w.kind.as_str(), w.changed))
            .collect::<Vec<_>>(),
        [("LeaderWorkerSet", true)]
    );
    clear(&d);
    pass(&d, &r, MULTINODE).await.unwrap();
    assert!(d.writes().is_empty(), "converged: {:?}", d.writes());
}

/// The served set is read at every reconcile: a DCD waiting for the LeaderWorkerSet API gets
/// its LeaderWorkerSet once the API is served, with no other change.
#[tokio::test]
async fn a_multinode_component_proceeds_once_the_api_is_served() {
    let (d, r) = setup(multinode());
    let served = Served::new();
    let r = r.with_served(served.clone());
    pass(&d, &r, MULTINODE).await.unwrap();
    assert_eq!(
        condition(&d, MULTINODE, CONDITION_AVAILABLE).1,
        "LeaderWorkerSetUnavailable"
    );
    served.set(&leader_worker_set_resource(), true);
    clear(&d);
    pass(&d, &r, MULTINODE).await.unwrap();
    assert_eq!(
        d.event_reasons(),
        ["ResourcesCreated", "LeaderWorkerSetNotReady"]
    );
    assert_eq!(
        condition(&d, MULTINODE, CONDITION_AVAILABLE).1,
        "LeaderWorkerSetNotReady"
    );
}

#[tokio::test]
async fn an_invalid_spec_touches_no_child_and_waits_for_a_change() {
    let mut w = worker();
    w.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = None;
    let (d, r) = setup(w);
    let err = pass(&d, &r, WORKER).await.unwrap_err();
    assert!(matches!(
        err,
        RunError::Reconcile {
            retry: Retry::AwaitChange,
            error: Error::InvalidSpec(_)
        }
    ));
    let verbs: Vec<_> = d.writes().iter().map(|w| w.verb).collect();
    assert_eq!(verbs, [Verb::ApplyStatus]);
    let (s, reason, message) = condition(&d, WORKER, CONDITION_AVAILABLE);
    assert_eq!((s.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(message.contains("image"), "{message}");
    assert_eq!(d.event_reasons(), ["InvalidSpec"]);
    assert_eq!(d.events()[0].event.type_, EventType::Warning);
    assert!(conditions::find(&status(&d, WORKER).conditions, "Ready").is_none());
}

#[tokio::test]
async fn a_failed_deployment_apply_maps_to_its_reason_and_retries() {
    let (d, r) = setup(worker());
    d.fail_next(
        Verb::Apply,
        "Deployment",
        kit::Error::Forbidden("no".into()),
    );
    let err = pass(&d, &r, WORKER).await.unwrap_err();
    assert!(matches!(
        err,
        RunError::Reconcile {
            retry: Retry::Backoff,
            error: Error::Sync {
                child: Child::Deployment,
                ..
            }
        }
    ));
    let (s, reason, message) = condition(&d, WORKER, CONDITION_AVAILABLE);
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", "DeploymentSyncFailed")
    );
    assert!(message.contains("forbidden"), "{message}");
    assert!(
        d.objects::<Service>().is_empty(),
        "the Service step did not run"
    );
    assert_eq!(d.event_reasons(), ["DeploymentSyncFailed"]);
    // The next attempt succeeds and clears the failure.
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(
        condition(&d, WORKER, CONDITION_AVAILABLE).1,
        "DeploymentNotReady"
    );
}

#[tokio::test]
async fn a_failed_read_and_a_failed_service_apply_map_to_their_reasons() {
    let (d, r) = setup(worker());
    d.fail_next(
        Verb::Get,
        "Deployment",
        kit::Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded),
    );
    pass(&d, &r, WORKER).await.unwrap_err();
    assert_eq!(
        condition(&d, WORKER, CONDITION_AVAILABLE).1,
        "DeploymentSyncFailed"
    );
    d.fail_next(
        Verb::Apply,
        "Service",
        kit::Error::Invalid("bad port".into()),
    );
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap_err();
    assert_eq!(
        condition(&d, WORKER, CONDITION_AVAILABLE).1,
        "ServiceSyncFailed"
    );
    assert_eq!(
        d.event_reasons(),
        ["DeploymentCreated", "ServiceSyncFailed"]
    );
    // The status keeps what the Deployment step found.
    assert_eq!(
        status(&d, WORKER).component.unwrap().component_kind,
        ComponentKind::Deployment
    );
}

#[tokio::test]
async fn a_service_no_longer_wanted_is_deleted_when_owned() {
    let (d, r) = setup(worker());
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(d.objects::<Service>().len(), 1);
    // Switch the component to etcd discovery: a worker then wants no Service.
    let mut changed = dcd(&d, WORKER);
    changed
        .spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_with(Default::default)
        .annotations = Some(
        [(
            labels::DYNAMO_DISCOVERY_BACKEND.to_string(),
            "etcd".to_string(),
        )]
        .into(),
    );
    changed.metadata.generation = Some(2);
    d.insert(changed);
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert!(d.objects::<Service>().is_empty());
    assert_eq!(d.event_reasons(), ["DeploymentUpdated", "ServiceDeleted"]);
    clear(&d);
    pass(&d, &r, WORKER).await.unwrap();
    assert!(d.writes().is_empty());
}

#[tokio::test]
async fn a_service_not_owned_is_left_alone() {
    let mut w = worker();
    w.spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .metadata
        .get_or_insert_with(Default::default)
        .annotations = Some(
        [(
            labels::DYNAMO_DISCOVERY_BACKEND.to_string(),
            "etcd".to_string(),
        )]
        .into(),
    );
    let (d, r) = setup(w);
    d.insert(Service {
        metadata: ObjectMeta {
            name: Some(WORKER.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        ..Default::default()
    });
    pass(&d, &r, WORKER).await.unwrap();
    assert_eq!(d.objects::<Service>().len(), 1);
    assert!(writes_of(&d, Verb::Delete).is_empty());
}

#[tokio::test]
async fn a_child_controlled_by_another_owner_is_not_taken_over() {
    let (d, r) = setup(worker());
    d.insert(Deployment {
        metadata: ObjectMeta {
            name: Some(WORKER.into()),
            namespace: Some(NS.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "someone".into(),
                uid: "other-uid".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        ..Default::default()
    });
    let err = pass(&d, &r, WORKER).await.unwrap_err();
    assert!(matches!(
        err,
        RunError::Reconcile {
            retry: Retry::Backoff,
            error: Error::OwnershipConflict { .. }
        }
    ));
    assert!(writes_of(&d, Verb::Apply).is_empty());
    let (_, reason, message) = condition(&d, WORKER, CONDITION_AVAILABLE);
    assert_eq!(reason, "OwnershipConflict");
    assert!(message.contains("ReplicaSet someone"), "{message}");
}

#[tokio::test]
async fn a_dcd_being_deleted_is_left_to_garbage_collection() {
    let mut w = worker();
    w.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    w.metadata.finalizers = Some(vec!["x".into()]);
    w.status = Some(DynamoComponentDeploymentStatus {
        observed_generation: Some(1),
        ..Default::default()
    });
    let (d, r) = setup(w);
    pass(&d, &r, WORKER).await.unwrap();
    assert!(d.writes().is_empty());
    assert!(d.objects::<Deployment>().is_empty());
}

fn with_model(
    mut dcd: DynamoComponentDeployment,
    model: Option<&str>,
) -> DynamoComponentDeployment {
    dcd.spec.component.model_ref = model.map(|name| api::common::ModelReference {
        name: name.into(),
        revision: None,
    });
    dcd
}

fn model_service_owners(d: &Double, model: &str) -> Option<Vec<String>> {
    let s: Service = d.object(Some(NS), &labels::model_service_name(model))?;
    Some(
        s.owner_references()
            .iter()
            .map(|o| o.name.clone())
            .collect(),
    )
}

/// The component pathway's model Service: the DCDs serving one model share it (each its own
/// non-controller owner reference), an idle pass sends nothing, a DCD dropping `modelRef` gives
/// up its part, and the last one deletes it.
#[tokio::test]
async fn dcds_share_the_model_service_and_the_last_one_deletes_it() {
    let prefill = with_model(
        conformance_dcd("v1beta1", "vllm-disagg.yaml", "VllmPrefillWorker"),
        Some("llama"),
    );
    let mut decode = with_model(
        conformance_dcd("v1beta1", "vllm-disagg.yaml", "VllmDecodeWorker"),
        Some("llama"),
    );
    decode.metadata.uid = Some("decode-uid".into());
    let (p, q) = (prefill.name_any(), decode.name_any());
    let (d, r) = setup(prefill);
    d.insert(decode);
    pass(&d, &r, &p).await.unwrap();
    pass(&d, &r, &q).await.unwrap();
    assert_eq!(
        model_service_owners(&d, "llama").unwrap(),
        [p.clone(), q.clone()]
    );
    let s: Service = d
        .object(Some(NS), &labels::model_service_name("llama"))
        .unwrap();
    assert!(
        s.owner_references()
            .iter()
            .all(|o| o.controller == Some(false))
    );
    assert_eq!(s.annotations()[labels::DYNAMO_BASE_MODEL], "llama");

    clear(&d);
    pass(&d, &r, &p).await.unwrap();
    pass(&d, &r, &q).await.unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());

    for (name, left) in [(&p, Some(vec![q.clone()])), (&q, None)] {
        let mut changed = dcd(&d, name);
        changed.spec.component.model_ref = None;
        changed.metadata.resource_version = None;
        d.insert(changed);
        pass(&d, &r, name).await.unwrap();
        assert_eq!(model_service_owners(&d, "llama"), left, "after {name}");
    }
    assert!(d.event_reasons().contains(&"ServiceDeleted".to_string()));
}

#[tokio::test]
async fn a_failed_model_service_apply_is_a_service_sync_failure() {
    // etcd discovery: a worker gets no component Service, so the only Service is the model's.
    let mut etcd = with_model(worker(), Some("llama"));
    let template = etcd.spec.component.pod_template.as_mut().unwrap();
    template
        .metadata
        .get_or_insert_with(Default::default)
        .annotations
        .get_or_insert_with(Default::default)
        .insert(labels::DYNAMO_DISCOVERY_BACKEND.into(), "etcd".into());
    let (d, r) = setup(etcd);
    d.fail_next(Verb::Apply, "Service", kit::Error::Invalid("boom".into()));
    assert!(pass(&d, &r, WORKER).await.is_err());
    assert!(d.objects::<Service>().is_empty());
    let (status, reason, message) = condition(&d, WORKER, CONDITION_AVAILABLE);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ServiceSyncFailed")
    );
    assert!(
        message
            .starts_with("failed to reconcile the model Service: apply Service ns/dynamo-model-"),
        "{message}"
    );
}

/// The labelled ServiceAccount comes from the reader (the watch cache): the first by name of
/// the DCD's namespace.
#[tokio::test]
async fn pods_run_as_the_namespaces_labelled_service_account() {
    let mut alone = worker();
    alone.metadata.labels = None;
    alone.metadata.owner_references = None;
    let (d, r) = setup(alone);
    let account = |ns: &str, name: &str| k8s_openapi::api::core::v1::ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(std::collections::BTreeMap::from([(
                labels::DYNAMO_COMPONENT_POD.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    d.insert(account(NS, "zeta"));
    d.insert(account(NS, "beta"));
    d.insert(account("elsewhere", "alpha"));
    pass(&d, &r, WORKER).await.unwrap();
    let sa = deployment(&d, WORKER)
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .service_account_name;
    assert_eq!(sa.as_deref(), Some("beta"));
}

/// A DCD naming its checkpoint: the checkpoint is read, a Ready `WaitForCheckpoint` one
/// restore-shapes the pod template from the snapshot agent's storage, an `Immediate` one names
/// itself on the template, and a missing one touches nothing (`CheckpointUnresolved`).
#[tokio::test]
async fn the_deployment_restores_from_the_checkpoint_the_dcd_names() {
    use api::checkpoint::{DynamoCheckpointPhase, DynamoCheckpointStatus};
    use api::snapshot::{CHECKPOINT_ID_LABEL, RESTORE_TARGET_LABEL};
    use api::v1beta1::{CheckpointStartupPolicy, ComponentCheckpointConfig, ExperimentalSpec};
    use api::{DynamoCheckpoint, DynamoCheckpointSpec};

    let with_ref = |policy| {
        let mut w = worker();
        w.spec.component.experimental = Some(ExperimentalSpec {
            checkpoint: Some(ComponentCheckpointConfig {
                enabled: true,
                checkpoint_ref: Some("ckpt".into()),
                startup_policy: Some(policy),
                ..Default::default()
            }),
            ..Default::default()
        });
        w
    };
    let checkpoint = DynamoCheckpoint {
        metadata: ObjectMeta {
            name: Some("ckpt".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: DynamoCheckpointSpec::default(),
        status: Some(DynamoCheckpointStatus {
            phase: Some(DynamoCheckpointPhase::Ready),
            identity_hash: Some("abc123def4567890".into()),
            ..Default::default()
        }),
    };
    let agent: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "snapshot-agent",
            "namespace": NS,
            "labels": {"app.kubernetes.io/component": "snapshot-agent"},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"spec": {
                "containers": [{"name": "agent", "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}]}],
                "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "snapshot-pvc"}}],
            }},
        },
    }))
    .unwrap();

    // Missing: nothing is touched, the reason says why.
    let (d, r) = setup(with_ref(CheckpointStartupPolicy::WaitForCheckpoint));
    assert!(pass(&d, &r, WORKER).await.is_err());
    assert!(d.object::<Deployment>(Some(NS), WORKER).is_none());
    let (s, reason, message) = condition(&d, WORKER, CONDITION_AVAILABLE);
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", REASON_CHECKPOINT_UNRESOLVED)
    );
    assert!(message.contains("\"ckpt\" not found"), "{message}");

    // Ready, WaitForCheckpoint: restore-shaped.
    d.insert(checkpoint.clone());
    d.insert(agent);
    pass(&d, &r, WORKER).await.unwrap();
    let template = deployment(&d, WORKER).spec.unwrap().template;
    let labels = template.metadata.unwrap().labels.unwrap();
    assert_eq!(labels[RESTORE_TARGET_LABEL], "true");
    assert_eq!(labels[CHECKPOINT_ID_LABEL], "abc123def4567890");
    let spec = template.spec.unwrap();
    assert_eq!(
        spec.containers[0].command,
        Some(vec!["sleep".to_string(), "infinity".to_string()])
    );
    assert!(spec.volumes.iter().flatten().any(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|p| p.claim_name == "snapshot-pvc")
    }));
    let (s, _, _) = condition(&d, WORKER, CONDITION_AVAILABLE);
    assert_eq!(s, "False", "the new Deployment is not ready yet");

    // Immediate: the template only names its checkpoint.
    let (d, r) = setup(with_ref(CheckpointStartupPolicy::Immediate));
    d.insert(checkpoint);
    pass(&d, &r, WORKER).await.unwrap();
    let template = deployment(&d, WORKER).spec.unwrap().template;
    let annotations = template.metadata.unwrap().annotations.unwrap();
    assert_eq!(annotations[labels::CHECKPOINT_RESTORE_CANDIDATE], "true");
    assert_eq!(annotations[labels::CHECKPOINT_NAME], "ckpt");
    assert_ne!(
        template.spec.unwrap().containers[0].command,
        Some(vec!["sleep".to_string(), "infinity".to_string()])
    );
}
