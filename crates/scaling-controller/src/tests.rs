//! Unit tests on the in-memory double: one pass is reconcile + persist status + publish events,
//! as the run loop does.

use api::common::{ComponentCheckpointStatus, ComponentKind, MultinodeSpec};
use api::grove::{
    PodClique, PodCliqueResourceSpec, PodCliqueScalingGroup, PodCliqueScalingGroupSpec,
    PodCliqueSpec,
};
use api::labels;
use api::scaling_adapter::DynamoGraphDeploymentComponentRef;
use api::v1beta1::{
    CheckpointStartupPolicy, ComponentCheckpointConfig, ComponentReplicaStatus, ExperimentalSpec,
    MAIN_CONTAINER_NAME, ScalingAdapter,
};
use api::{
    ComponentType, DynamoComponentDeployment, DynamoComponentDeploymentSharedSpec,
    DynamoComponentDeploymentSpec, DynamoComponentDeploymentStatus, DynamoGraphDeployment,
    DynamoGraphDeploymentScalingAdapter, DynamoGraphDeploymentScalingAdapterSpec,
    DynamoGraphDeploymentScalingAdapterStatus, DynamoGraphDeploymentStatus,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kit::conditions::{self, READY};
use kit::run::{RunError, finish};
use kit::testing::{Double, Verb};
use kit::{EventType, Retry};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::resolve::{Pathway, Resolution, resolve, waits_for_checkpoint};
use crate::*;

const NS: &str = "ns";
const ADAPTER: &str = "g-worker";

fn component(
    name: &str,
    t: ComponentType,
    replicas: Option<i32>,
) -> DynamoComponentDeploymentSharedSpec {
    DynamoComponentDeploymentSharedSpec {
        name: name.into(),
        r#type: Some(t),
        replicas,
        pod_template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: MAIN_CONTAINER_NAME.into(),
                    image: Some("runtime:1".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// Graph `g`: a frontend and a worker with 2 replicas, optionally with a scaling adapter, its
/// worker generation recorded as active (no rolling update).
fn graph(adapter: bool) -> DynamoGraphDeployment {
    recorded(unrecorded_graph(adapter))
}

/// `g` with its worker generation recorded as active, as the graph's rollout leaves it.
fn recorded(mut g: DynamoGraphDeployment) -> DynamoGraphDeployment {
    let hash = reconcilers::rollout::worker_hash(&g);
    g.annotations_mut()
        .insert(labels::CURRENT_WORKER_HASH_V2.into(), hash);
    g
}

fn unrecorded_graph(adapter: bool) -> DynamoGraphDeployment {
    let mut worker = component("Worker", ComponentType::Worker, Some(2));
    worker.scaling_adapter = adapter.then_some(ScalingAdapter {});
    DynamoGraphDeployment {
        metadata: ObjectMeta {
            name: Some("g".into()),
            namespace: Some(NS.into()),
            annotations: Some(
                [(
                    labels::WORKLOAD_PROVIDER.to_string(),
                    labels::PROVIDER_COMPONENT.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: api::DynamoGraphDeploymentSpec {
            components: vec![
                component("Frontend", ComponentType::Frontend, Some(1)),
                worker,
            ],
            ..Default::default()
        },
        status: None,
    }
}

fn adapter(replicas: i32) -> DynamoGraphDeploymentScalingAdapter {
    DynamoGraphDeploymentScalingAdapter {
        metadata: ObjectMeta {
            name: Some(ADAPTER.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: DynamoGraphDeploymentScalingAdapterSpec {
            replicas,
            dgd_ref: DynamoGraphDeploymentComponentRef {
                name: "g".into(),
                component_name: "Worker".into(),
            },
        },
        status: None,
    }
}

/// A DCD of `component` controlled by `g`, as the graph renders it.
fn dcd(
    g: &DynamoGraphDeployment,
    name: &str,
    component: &str,
    replicas: Option<i32>,
) -> DynamoComponentDeployment {
    DynamoComponentDeployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(
                [
                    (
                        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                        g.name_any(),
                    ),
                    (labels::DYNAMO_COMPONENT.to_string(), component.to_string()),
                ]
                .into(),
            ),
            owner_references: Some(vec![g.controller_owner_ref(&()).unwrap()]),
            ..Default::default()
        },
        spec: DynamoComponentDeploymentSpec {
            backend_framework: None,
            component: DynamoComponentDeploymentSharedSpec {
                name: component.into(),
                replicas,
                ..Default::default()
            },
        },
        status: None,
    }
}

/// What the DCD controller reports: its generation observed, `current` replicas running.
fn report(d: &Double, name: &str, current: i32) {
    let mut dcd: DynamoComponentDeployment = d.object(Some(NS), name).unwrap();
    dcd.status = Some(DynamoComponentDeploymentStatus {
        observed_generation: dcd.metadata.generation,
        conditions: vec![],
        component: Some(ComponentReplicaStatus {
            component_kind: ComponentKind::Deployment,
            component_name: None,
            component_names: vec![name.into()],
            runtime_namespace: None,
            gpus_per_engine: None,
            gpus_per_replica: None,
            replicas: current,
            updated_replicas: current,
            ready_replicas: Some(current),
            available_replicas: Some(current),
            scheduled_replicas: None,
        }),
    });
    d.insert(dcd);
}

fn dcd_replicas(d: &Double, name: &str) -> Option<i32> {
    let dcd: DynamoComponentDeployment = d.object(Some(NS), name).unwrap();
    dcd.spec.component.replicas
}

/// The double with graph `g` (adapter on) and one worker DCD `g-worker-aaaa` without replicas.
fn setup(replicas: i32) -> (Double, ScalingAdapterReconciler, DynamoGraphDeployment) {
    let d = Double::new();
    let g = d.insert(graph(true));
    d.insert(dcd(&g, "g-worker-aaaa", "Worker", None));
    d.insert(adapter(replicas));
    let r = ScalingAdapterReconciler::new(d.reader(), d.writer());
    (d, r, g)
}

fn stored(d: &Double) -> DynamoGraphDeploymentScalingAdapter {
    d.object(Some(NS), ADAPTER).expect("the adapter")
}

/// Scale the adapter as `kubectl scale` would (its generation moves).
fn scale(d: &Double, replicas: i32) {
    let mut a = stored(d);
    a.spec.replicas = replicas;
    a.metadata.generation = Some(a.metadata.generation.unwrap_or(1) + 1);
    d.insert(a);
}

async fn pass(d: &Double, r: &ScalingAdapterReconciler) -> Result<Action, RunError<Error>> {
    let a = stored(d);
    let result = r.reconcile(&a).await;
    finish(
        &a,
        result,
        d.status_writer().as_ref(),
        d.event_sink().as_ref(),
    )
    .await
}

fn status(d: &Double) -> DynamoGraphDeploymentScalingAdapterStatus {
    stored(d).status.unwrap_or_default()
}

fn ready(d: &Double) -> (String, String, String) {
    let s = status(d);
    let c = conditions::find(&s.conditions, READY)
        .expect("Ready")
        .clone();
    (c.status, c.reason, c.message)
}

fn clear(d: &Double) {
    d.clear_writes();
    d.clear_events();
}

fn dcd_writes(d: &Double) -> Vec<(Verb, String)> {
    d.writes()
        .into_iter()
        .filter(|w| w.kind == "DynamoComponentDeployment")
        .map(|w| (w.verb, w.name))
        .collect()
}

// --- resolve ---------------------------------------------------------------------------------

#[test]
fn resolve_follows_the_table() {
    let a = adapter(3);
    let reason = |r: Resolution<'_>| match r {
        Resolution::Wait { reason, .. } | Resolution::Observe { reason, .. } => reason,
        Resolution::Scale { .. } => "scale",
    };
    assert_eq!(reason(resolve(&a, None, false)), REASON_GRAPH_NOT_FOUND);
    let mut g = graph(true);
    g.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    assert_eq!(reason(resolve(&a, Some(&g), false)), REASON_GRAPH_NOT_FOUND);
    let mut g = graph(true);
    g.spec.components.truncate(1);
    assert_eq!(
        reason(resolve(&a, Some(&g), false)),
        REASON_COMPONENT_NOT_FOUND
    );
    let g = graph(false);
    assert!(matches!(
        resolve(&a, Some(&g), false),
        Resolution::Observe {
            pathway: Pathway::Component,
            reason: REASON_SCALING_ADAPTER_DISABLED,
            ..
        }
    ));
    let g = graph(true);
    assert!(matches!(
        resolve(&a, Some(&g), false),
        Resolution::Scale {
            pathway: Pathway::Component,
            ..
        }
    ));
    // No provider record yet: the component pathway (its DCDs do not exist yet either).
    let mut g = graph(true);
    g.annotations_mut().remove(labels::WORKLOAD_PROVIDER);
    assert_eq!(reason(resolve(&a, Some(&g), false)), "scale");
    let mut grove = graph(true);
    grove.annotations_mut().insert(
        labels::WORKLOAD_PROVIDER.into(),
        labels::PROVIDER_GROVE.into(),
    );
    assert_eq!(
        reason(resolve(&a, Some(&grove), false)),
        REASON_WORKLOAD_PROVIDER_UNAVAILABLE
    );
    assert!(matches!(
        resolve(&a, Some(&grove), true),
        Resolution::Scale {
            pathway: Pathway::Grove,
            ..
        }
    ));
    let mut other = graph(true);
    other
        .annotations_mut()
        .insert(labels::WORKLOAD_PROVIDER.into(), "lws".into());
    assert_eq!(
        reason(resolve(&a, Some(&other), true)),
        REASON_WORKLOAD_PROVIDER_UNAVAILABLE
    );
    // A rolling update (no generation recorded, another one recorded, or one recorded as
    // running): a worker's count is the graph's; other components and grove graphs scale.
    let unrecorded = unrecorded_graph(true);
    assert_eq!(
        reason(resolve(&a, Some(&unrecorded), false)),
        REASON_ROLLING_UPDATE
    );
    let mut moved_on = graph(true);
    moved_on
        .annotations_mut()
        .insert(labels::CURRENT_WORKER_HASH_V2.into(), "0ld0ld00".into());
    assert_eq!(
        reason(resolve(&a, Some(&moved_on), false)),
        REASON_ROLLING_UPDATE
    );
    let mut running = graph(true);
    running.status = Some(DynamoGraphDeploymentStatus {
        rolling_update: Some(api::v1beta1::RollingUpdateStatus {
            phase: Some(api::common::RollingUpdatePhase::Pending),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_eq!(
        reason(resolve(&a, Some(&running), false)),
        REASON_ROLLING_UPDATE
    );
    let mut frontend = adapter(1);
    frontend.spec.dgd_ref.component_name = "Frontend".into();
    let mut both = moved_on.clone();
    both.spec.components[0].scaling_adapter = Some(ScalingAdapter {});
    assert_eq!(reason(resolve(&frontend, Some(&both), false)), "scale");
    let mut multinode = moved_on.clone();
    multinode.spec.components[1].multinode = Some(api::common::MultinodeSpec { node_count: 2 });
    assert_eq!(reason(resolve(&a, Some(&multinode), false)), "scale");
    let mut grove_rolling = moved_on;
    grove_rolling.annotations_mut().insert(
        labels::WORKLOAD_PROVIDER.into(),
        labels::PROVIDER_GROVE.into(),
    );
    assert_eq!(reason(resolve(&a, Some(&grove_rolling), true)), "scale");
}

fn waiting_for_checkpoint(ready: Option<bool>) -> DynamoGraphDeployment {
    let mut g = graph(true);
    g.spec.components[1].experimental = Some(ExperimentalSpec {
        checkpoint: Some(ComponentCheckpointConfig {
            enabled: true,
            startup_policy: Some(CheckpointStartupPolicy::WaitForCheckpoint),
            ..Default::default()
        }),
        ..Default::default()
    });
    if let Some(ready) = ready {
        let mut status = DynamoGraphDeploymentStatus::default();
        status.checkpoints.insert(
            "Worker".into(),
            ComponentCheckpointStatus {
                ready,
                ..Default::default()
            },
        );
        g.status = Some(status);
    }
    recorded(g)
}

#[test]
fn a_component_waiting_for_its_checkpoint_is_held_by_the_graph() {
    for (ready, waits) in [(None, true), (Some(false), true), (Some(true), false)] {
        let g = waiting_for_checkpoint(ready);
        assert_eq!(waits_for_checkpoint(&g, &g.spec.components[1]), waits);
    }
    // Immediate startup never waits.
    let mut g = waiting_for_checkpoint(None);
    g.spec.components[1]
        .experimental
        .as_mut()
        .unwrap()
        .checkpoint
        .as_mut()
        .unwrap()
        .startup_policy = Some(CheckpointStartupPolicy::Immediate);
    assert!(!waits_for_checkpoint(&g, &g.spec.components[1]));
}

// --- the component pathway -------------------------------------------------------------------

#[tokio::test]
async fn the_first_run_fills_the_dcds_count_without_a_scale_event() {
    let (d, r, _) = setup(3);
    assert_eq!(pass(&d, &r).await.unwrap(), Action::await_change());
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(3));
    assert_eq!(dcd_writes(&d), [(Verb::Apply, "g-worker-aaaa".to_string())]);
    // Filling an unset count is the hand-over, not a scale change.
    assert!(d.event_reasons().is_empty(), "{:?}", d.event_reasons());
    let s = status(&d);
    assert_eq!(s.replicas, Some(0));
    assert_eq!(
        s.selector.as_deref(),
        Some("nvidia.com/dynamo-graph-deployment-name=g,nvidia.com/dynamo-component=Worker")
    );
    assert_eq!(s.observed_generation, Some(1));
    assert!(s.last_scale_time.is_none());
    assert_eq!(ready(&d).1, REASON_SCALING);
}

#[tokio::test]
async fn a_settled_component_is_ready_and_a_second_run_writes_nothing() {
    let (d, r, _) = setup(3);
    pass(&d, &r).await.unwrap();
    report(&d, "g-worker-aaaa", 3);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert!(dcd_writes(&d).is_empty(), "{:?}", d.writes());
    assert_eq!(
        ready(&d),
        (
            "True".into(),
            REASON_SCALED.into(),
            "component Worker runs 3 replicas".into()
        )
    );
    assert_eq!(status(&d).replicas, Some(3));
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());
    assert!(d.event_reasons().is_empty());
}

#[tokio::test]
async fn scaling_the_adapter_scales_the_dcd_with_one_event() {
    let (d, r, _) = setup(3);
    pass(&d, &r).await.unwrap();
    report(&d, "g-worker-aaaa", 3);
    pass(&d, &r).await.unwrap();
    scale(&d, 5);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(5));
    assert_eq!(d.event_reasons(), [EVENT_SCALED]);
    assert_eq!(
        d.events()[0].event.note.as_deref(),
        Some("Scaled component Worker from 3 to 5 replicas")
    );
    let s = status(&d);
    assert!(s.last_scale_time.is_some());
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(
        ready(&d),
        (
            "False".into(),
            REASON_SCALING.into(),
            "scaling component Worker to 5 replicas (3 current)".into()
        )
    );
    report(&d, "g-worker-aaaa", 5);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert!(dcd_writes(&d).is_empty());
    assert!(d.event_reasons().is_empty());
    assert_eq!(ready(&d).1, REASON_SCALED);
}

#[tokio::test]
async fn a_foreign_edit_of_the_dcds_count_is_restored_once() {
    let (d, r, _) = setup(3);
    pass(&d, &r).await.unwrap();
    report(&d, "g-worker-aaaa", 3);
    pass(&d, &r).await.unwrap();
    // `kubectl edit dcd`: someone else's count.
    let mut w: DynamoComponentDeployment = d.object(Some(NS), "g-worker-aaaa").unwrap();
    w.spec.component.replicas = Some(7);
    w.metadata.generation = Some(w.metadata.generation.unwrap() + 1);
    d.insert(w);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(3));
    assert_eq!(dcd_writes(&d).len(), 1);
    assert_eq!(d.event_reasons(), [EVENT_SCALED]);
    report(&d, "g-worker-aaaa", 3);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert!(dcd_writes(&d).is_empty(), "no fight: {:?}", d.writes());
}

/// While the graph rolls a new worker generation it steps both generations' counts: the
/// adapter writes none, reports the larger generation, and takes the count back afterwards.
#[tokio::test]
async fn during_a_rolling_update_the_graph_steps_the_counts_and_the_larger_is_reported() {
    let (d, r, g) = setup(4);
    pass(&d, &r).await.unwrap();
    report(&d, "g-worker-aaaa", 4);
    // The worker spec changes: the recorded generation is no longer the spec's.
    let mut changed = g.clone();
    changed.spec.components[1]
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("runtime:2".into());
    let changed = d.insert(changed);
    d.insert(dcd(&changed, "g-worker-bbbb", "Worker", Some(1)));
    report(&d, "g-worker-bbbb", 1);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert!(dcd_writes(&d).is_empty(), "{:?}", dcd_writes(&d));
    assert_eq!(dcd_replicas(&d, "g-worker-bbbb"), Some(1));
    assert_eq!(status(&d).replicas, Some(4));
    let (status_, reason, message) = ready(&d);
    assert_eq!(
        (status_.as_str(), reason.as_str()),
        ("False", REASON_ROLLING_UPDATE)
    );
    assert!(message.contains("rolling update"), "{message}");

    // Recorded, but the status still says in progress: still the graph's.
    let mut recorded = d.object::<DynamoGraphDeployment>(Some(NS), "g").unwrap();
    recorded.annotations_mut().insert(
        labels::CURRENT_WORKER_HASH_V2.into(),
        reconcilers::rollout::worker_hash(&changed),
    );
    recorded.status = Some(DynamoGraphDeploymentStatus {
        rolling_update: Some(api::v1beta1::RollingUpdateStatus {
            phase: Some(api::common::RollingUpdatePhase::InProgress),
            ..Default::default()
        }),
        ..Default::default()
    });
    let recorded = d.insert(recorded);
    pass(&d, &r).await.unwrap();
    assert!(dcd_writes(&d).is_empty());

    // Completed (the old generation deleted by then): the adapter's count again.
    let mut done = recorded;
    done.status
        .as_mut()
        .unwrap()
        .rolling_update
        .as_mut()
        .unwrap()
        .phase = Some(api::common::RollingUpdatePhase::Completed);
    d.insert(done);
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_replicas(&d, "g-worker-bbbb"), Some(4));
}

#[tokio::test]
async fn dcds_of_other_components_owners_or_being_deleted_are_not_touched() {
    let (d, r, g) = setup(3);
    d.insert(dcd(&g, "g-frontend", "Frontend", Some(1)));
    let mut foreign = dcd(&g, "g-worker-foreign", "Worker", Some(9));
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    d.insert(foreign);
    let mut old = dcd(&g, "g-worker-old", "Worker", Some(9));
    old.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    old.metadata.finalizers = Some(vec!["x".into()]);
    d.insert(old);
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_writes(&d), [(Verb::Apply, "g-worker-aaaa".to_string())]);
    assert_eq!(dcd_replicas(&d, "g-frontend"), Some(1));
    assert_eq!(dcd_replicas(&d, "g-worker-foreign"), Some(9));
    assert_eq!(dcd_replicas(&d, "g-worker-old"), Some(9));
}

#[tokio::test]
async fn a_missing_workload_is_waited_for_then_scaled() {
    let d = Double::new();
    let g = d.insert(graph(true));
    d.insert(adapter(2));
    let r = ScalingAdapterReconciler::new(d.reader(), d.writer());
    assert_eq!(pass(&d, &r).await.unwrap(), Action::await_change());
    assert!(dcd_writes(&d).is_empty());
    let (status_, reason, message) = ready(&d);
    assert_eq!(
        (status_.as_str(), reason.as_str()),
        ("False", REASON_WORKLOAD_NOT_FOUND)
    );
    assert!(message.contains("component Worker"), "{message}");
    assert_eq!(status(&d).replicas, Some(0));
    assert!(d.event_reasons().is_empty());
    // A waiting adapter asks for no retry; a second look writes nothing.
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert!(d.writes().is_empty());
    // The graph creates the DCD: the next pass (the DCD watch) scales it.
    d.insert(dcd(&g, "g-worker-aaaa", "Worker", None));
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(2));
}

#[tokio::test]
async fn to_zero_and_back_from_zero() {
    let (d, r, _) = setup(2);
    pass(&d, &r).await.unwrap();
    report(&d, "g-worker-aaaa", 2);
    scale(&d, 0);
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(0));
    report(&d, "g-worker-aaaa", 0);
    pass(&d, &r).await.unwrap();
    assert_eq!(
        ready(&d),
        (
            "True".into(),
            REASON_SCALED.into(),
            "component Worker runs 0 replicas".into()
        )
    );
    assert_eq!(status(&d).replicas, Some(0));
    // From zero: nothing waits for pods that do not exist.
    scale(&d, 3);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(3));
    assert_eq!(
        d.events()[0].event.note.as_deref(),
        Some("Scaled component Worker from 0 to 3 replicas")
    );
    report(&d, "g-worker-aaaa", 3);
    pass(&d, &r).await.unwrap();
    assert_eq!(ready(&d).1, REASON_SCALED);
}

#[tokio::test]
async fn an_adapter_whose_component_dropped_scaling_adapter_writes_nothing() {
    let (d, r, _) = setup(3);
    pass(&d, &r).await.unwrap();
    report(&d, "g-worker-aaaa", 3);
    // Hand-back: the graph owns the count again (its workloads step applies it).
    let mut g: DynamoGraphDeployment = d.object(Some(NS), "g").unwrap();
    g.spec.components[1].scaling_adapter = None;
    d.insert(g);
    let mut w: DynamoComponentDeployment = d.object(Some(NS), "g-worker-aaaa").unwrap();
    w.spec.component.replicas = Some(2);
    d.insert(w);
    scale(&d, 6);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert!(dcd_writes(&d).is_empty(), "{:?}", d.writes());
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(2));
    assert_eq!(ready(&d).1, REASON_SCALING_ADAPTER_DISABLED);
    assert_eq!(status(&d).replicas, Some(3), "still observed");
    assert!(d.event_reasons().is_empty());
}

#[tokio::test]
async fn a_component_waiting_for_its_checkpoint_is_not_scaled_until_it_is_ready() {
    let d = Double::new();
    let g = d.insert(waiting_for_checkpoint(Some(false)));
    d.insert(dcd(&g, "g-worker-aaaa", "Worker", Some(0)));
    d.insert(adapter(3));
    let r = ScalingAdapterReconciler::new(d.reader(), d.writer());
    pass(&d, &r).await.unwrap();
    assert!(dcd_writes(&d).is_empty());
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(0));
    assert_eq!(ready(&d).1, REASON_WAITING_FOR_CHECKPOINT);
    let mut g: DynamoGraphDeployment = d.object(Some(NS), "g").unwrap();
    g.status
        .as_mut()
        .unwrap()
        .checkpoints
        .get_mut("Worker")
        .unwrap()
        .ready = true;
    d.insert(g);
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(3));
}

#[tokio::test]
async fn a_missing_graph_or_component_is_waited_for_without_retry() {
    let d = Double::new();
    d.insert(adapter(3));
    let r = ScalingAdapterReconciler::new(d.reader(), d.writer());
    assert_eq!(pass(&d, &r).await.unwrap(), Action::await_change());
    assert_eq!(ready(&d).1, REASON_GRAPH_NOT_FOUND);
    assert_eq!(status(&d).replicas, Some(0));
    let mut g = graph(true);
    g.spec.components.truncate(1);
    d.insert(g);
    assert_eq!(pass(&d, &r).await.unwrap(), Action::await_change());
    assert_eq!(ready(&d).1, REASON_COMPONENT_NOT_FOUND);
    assert!(d.event_reasons().is_empty());
}

#[tokio::test]
async fn an_adapter_being_deleted_is_left_alone() {
    let (d, r, _) = setup(3);
    let mut a = stored(&d);
    a.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    a.metadata.finalizers = Some(vec!["x".into()]);
    d.insert(a);
    pass(&d, &r).await.unwrap();
    assert!(dcd_writes(&d).is_empty(), "{:?}", d.writes());
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), None);
}

#[tokio::test]
async fn errors_map_to_the_steps_reason_and_retry_with_backoff() {
    let retry = |e: RunError<Error>| match e {
        RunError::Reconcile { retry, error } => (retry, error.reason()),
        RunError::Status(e) => panic!("status write failed: {e}"),
    };
    let (d, r, _) = setup(3);
    d.fail_next(
        Verb::Get,
        "DynamoGraphDeployment",
        kit::Error::Forbidden("no".into()),
    );
    let err = pass(&d, &r).await.unwrap_err();
    assert_eq!(retry(err), (Retry::Backoff, REASON_READ_FAILED));
    assert_eq!(ready(&d).1, REASON_READ_FAILED);
    d.fail_next(
        Verb::List,
        "DynamoComponentDeployment",
        kit::Error::Forbidden("no".into()),
    );
    let err = pass(&d, &r).await.unwrap_err();
    assert_eq!(retry(err), (Retry::Backoff, REASON_READ_FAILED));
    clear(&d);
    d.fail_next(
        Verb::Apply,
        "DynamoComponentDeployment",
        kit::Error::Forbidden("no".into()),
    );
    let err = pass(&d, &r).await.unwrap_err();
    assert_eq!(retry(err), (Retry::Backoff, REASON_SCALE_FAILED));
    let (s, reason, message) = ready(&d);
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", REASON_SCALE_FAILED)
    );
    assert!(
        message.contains("scale DynamoComponentDeployment g-worker-aaaa to 3"),
        "{message}"
    );
    assert_eq!(d.events()[0].event.type_, EventType::Warning);
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), None);
    // The next attempt succeeds.
    pass(&d, &r).await.unwrap();
    assert_eq!(dcd_replicas(&d, "g-worker-aaaa"), Some(3));
}

#[tokio::test]
async fn a_dcd_gone_before_it_was_scaled_is_waited_for() {
    let (d, r, _) = setup(3);
    d.fail_next(
        Verb::Apply,
        "DynamoComponentDeployment",
        kit::Error::NotFound("gone".into()),
    );
    pass(&d, &r).await.unwrap();
    assert_eq!(ready(&d).1, REASON_WORKLOAD_NOT_FOUND);
    d.fail_next(
        Verb::Apply,
        "DynamoComponentDeployment",
        kit::Error::Invalid("spec.name: Required value".into()),
    );
    pass(&d, &r).await.unwrap();
    assert_eq!(ready(&d).1, REASON_WORKLOAD_NOT_FOUND);
}

// --- the ownership chain: graph, adapter, DCD controller on one double ------------------------

struct Chain {
    d: Double,
    program: component_program::ComponentProgram,
    adapters: ScalingAdapterReconciler,
    dcds: dcd_controller::DcdReconciler,
}

impl Chain {
    fn new(g: DynamoGraphDeployment) -> Self {
        let d = Double::new();
        d.insert(g);
        Chain {
            program: component_program::ComponentProgram::new(
                d.reader(),
                d.writer(),
                component_program::ComponentConfig::default(),
            ),
            adapters: ScalingAdapterReconciler::new(d.reader(), d.writer()),
            dcds: dcd_controller::DcdReconciler::new(d.reader(), d.writer()),
            d,
        }
    }

    fn graph(&self) -> DynamoGraphDeployment {
        self.d.object(Some(NS), "g").unwrap()
    }

    /// Edit the graph's spec as a user would.
    fn edit(&self, f: impl FnOnce(&mut DynamoGraphDeployment)) {
        let mut g = self.graph();
        f(&mut g);
        g.metadata.generation = Some(g.metadata.generation.unwrap_or(1) + 1);
        self.d.insert(g);
    }

    async fn graph_pass(&self) {
        let g = self.graph();
        let result = self.program.reconcile(&g).await;
        finish(
            &g,
            result,
            self.d.status_writer().as_ref(),
            self.d.event_sink().as_ref(),
        )
        .await
        .unwrap();
    }

    async fn adapter_pass(&self) {
        if self
            .d
            .object::<DynamoGraphDeploymentScalingAdapter>(Some(NS), ADAPTER)
            .is_some()
        {
            pass(&self.d, &self.adapters).await.unwrap();
        }
    }

    async fn dcd_pass(&self) {
        for dcd in self.d.objects::<DynamoComponentDeployment>() {
            let result = self.dcds.reconcile(&dcd).await;
            finish(
                &dcd,
                result,
                self.d.status_writer().as_ref(),
                self.d.event_sink().as_ref(),
            )
            .await
            .unwrap();
        }
    }

    /// Every controller once, in the order the watches would wake them.
    async fn round(&self) {
        self.graph_pass().await;
        self.dcd_pass().await;
        self.adapter_pass().await;
        self.dcd_pass().await;
    }

    fn worker_dcd(&self) -> DynamoComponentDeployment {
        self.d
            .objects::<DynamoComponentDeployment>()
            .into_iter()
            .find(|d| d.spec.component.name == "Worker")
            .expect("the worker DCD")
    }

    fn worker_deployment(&self) -> Option<i32> {
        let name = self.worker_dcd().name_any();
        let dep: Deployment = self.d.object(Some(NS), &name).expect("the Deployment");
        dep.spec.unwrap().replicas
    }
}

fn chain_graph(adapter: bool, replicas: i32) -> DynamoGraphDeployment {
    let mut g = graph(adapter);
    g.metadata.annotations = None;
    g.spec.components[1].replicas = Some(replicas);
    g
}

#[tokio::test]
async fn the_adapter_is_seeded_once_and_the_graph_never_resets_its_count() {
    let chain = Chain::new(chain_graph(true, 2));
    chain.round().await;
    let a = stored(&chain.d);
    assert_eq!(a.spec.replicas, 2, "seeded from the graph");
    assert_eq!(chain.worker_dcd().spec.component.replicas, Some(2));
    assert_eq!(chain.worker_deployment(), Some(2));
    // The autoscaler scales the adapter; a graph edit elsewhere does not bring 2 back.
    scale(&chain.d, 5);
    chain.round().await;
    chain.edit(|g| g.spec.components[0].replicas = Some(2));
    chain.round().await;
    assert_eq!(stored(&chain.d).spec.replicas, 5);
    assert_eq!(chain.worker_dcd().spec.component.replicas, Some(5));
    assert_eq!(chain.worker_deployment(), Some(5));
    // Converged: another round writes no DCD and no Deployment.
    chain.d.clear_writes();
    chain.round().await;
    let writes: Vec<_> = chain
        .d
        .changes()
        .into_iter()
        .filter(|w| w.kind == "DynamoComponentDeployment" || w.kind == "Deployment")
        .filter(|w| w.verb != Verb::ApplyStatus)
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
}

#[tokio::test]
async fn enabling_the_adapter_on_a_running_component_keeps_its_count() {
    let chain = Chain::new(chain_graph(false, 4));
    chain.round().await;
    assert_eq!(chain.worker_deployment(), Some(4));
    chain.edit(|g| g.spec.components[1].scaling_adapter = Some(ScalingAdapter {}));
    // The graph stops applying the DCD's count before the adapter's controller writes it.
    chain.graph_pass().await;
    assert_eq!(chain.worker_dcd().spec.component.replicas, None);
    chain.dcd_pass().await;
    assert_eq!(chain.worker_deployment(), Some(4), "held, never 1");
    chain.adapter_pass().await;
    chain.dcd_pass().await;
    assert_eq!(chain.worker_dcd().spec.component.replicas, Some(4));
    assert_eq!(chain.worker_deployment(), Some(4));
    assert!(!chain.d.event_reasons().contains(&EVENT_SCALED.to_string()));
}

#[tokio::test]
async fn turning_the_adapter_off_hands_the_count_back_to_the_graph() {
    let chain = Chain::new(chain_graph(true, 2));
    chain.round().await;
    scale(&chain.d, 6);
    chain.round().await;
    assert_eq!(chain.worker_deployment(), Some(6));
    // The user removes scalingAdapter and carries the count over: no jump, no warning.
    chain.d.clear_events();
    chain.edit(|g| {
        g.spec.components[1].scaling_adapter = None;
        g.spec.components[1].replicas = Some(6);
    });
    // The adapter's controller may still run before the adapter is gone: it writes nothing.
    chain.adapter_pass().await;
    chain.round().await;
    assert!(
        chain
            .d
            .object::<DynamoGraphDeploymentScalingAdapter>(Some(NS), ADAPTER)
            .is_none()
    );
    assert_eq!(chain.worker_dcd().spec.component.replicas, Some(6));
    assert_eq!(chain.worker_deployment(), Some(6));
    let reasons = chain.d.event_reasons();
    assert!(
        reasons.contains(&"AdapterDeleted".to_string()),
        "{reasons:?}"
    );
    assert!(
        !reasons.contains(&"ReplicasHandedBack".to_string()),
        "{reasons:?}"
    );

    // With a stale graph count the graph's value applies, with a warning.
    let chain = Chain::new(chain_graph(true, 2));
    chain.round().await;
    scale(&chain.d, 6);
    chain.round().await;
    chain.d.clear_events();
    chain.edit(|g| g.spec.components[1].scaling_adapter = None);
    chain.round().await;
    assert_eq!(chain.worker_deployment(), Some(2));
    let warnings: Vec<_> = chain
        .d
        .events()
        .into_iter()
        .filter(|e| e.event.type_ == EventType::Warning)
        .map(|e| e.event.reason)
        .collect();
    assert_eq!(warnings, ["ReplicasHandedBack"]);
}

// --- the grove pathway -----------------------------------------------------------------------

fn grove_graph(multinode: bool) -> DynamoGraphDeployment {
    let mut g = graph(true);
    g.annotations_mut().insert(
        labels::WORKLOAD_PROVIDER.into(),
        labels::PROVIDER_GROVE.into(),
    );
    if multinode {
        g.spec.components[1].multinode = Some(MultinodeSpec { node_count: 2 });
    }
    g
}

fn clique(name: &str, replicas: i32) -> PodClique {
    PodClique {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: PodCliqueResourceSpec {
            clique: PodCliqueSpec {
                role_name: "worker".into(),
                replicas,
                ..Default::default()
            },
        },
        status: None,
    }
}

fn grove_setup(multinode: bool) -> (Double, ScalingAdapterReconciler) {
    let d = Double::new();
    d.insert(grove_graph(multinode));
    d.insert(adapter(3));
    let r = ScalingAdapterReconciler::new(d.reader(), d.writer()).with_served(
        kit::served::Served::of([&kit::object::resource::<api::grove::PodCliqueSet>()]),
    );
    (d, r)
}

#[test]
fn grove_targets_follow_grove_names() {
    let g = grove_graph(false);
    assert_eq!(
        grove::target(&g, &g.spec.components[1]),
        (grove::POD_CLIQUE, "g-0-worker".to_string())
    );
    let g = grove_graph(true);
    assert_eq!(
        grove::target(&g, &g.spec.components[1]),
        (grove::POD_CLIQUE_SCALING_GROUP, "g-0-worker".to_string())
    );
    // A member of a component group is carried by the group's scaling group.
    let mut g = grove_graph(false);
    g.spec.experimental = Some(api::v1beta1::DynamoGraphDeploymentExperimentalSpec {
        kv_transfer_policy: None,
        component_groups: vec![api::v1beta1::ComponentGroupSpec {
            name: "Runtime".into(),
            replicas: 2,
            scaling_adapter: None,
            components: vec![api::common::ComponentGroupComponentSpec {
                name: g.spec.components[1].name.clone(),
            }],
        }],
    });
    assert_eq!(
        grove::target(&g, &g.spec.components[1]),
        (grove::POD_CLIQUE_SCALING_GROUP, "g-0-runtime".to_string())
    );
}

#[tokio::test]
async fn a_pod_clique_is_scaled_through_its_scale_subresource() {
    let (d, r) = grove_setup(false);
    pass(&d, &r).await.unwrap();
    assert_eq!(
        ready(&d).1,
        REASON_WORKLOAD_NOT_FOUND,
        "Grove has not created it yet"
    );
    assert!(d.writes().iter().all(|w| w.verb == Verb::ApplyStatus));
    d.insert(clique("g-0-worker", 2));
    clear(&d);
    pass(&d, &r).await.unwrap();
    let verbs: Vec<_> = d
        .writes()
        .into_iter()
        .filter(|w| w.kind == "PodClique")
        .map(|w| w.verb)
        .collect();
    assert_eq!(verbs, [Verb::Scale]);
    let c: PodClique = d.object(Some(NS), "g-0-worker").unwrap();
    assert_eq!(c.spec.clique.replicas, 3);
    assert_eq!(d.event_reasons(), [EVENT_SCALED]);
    // Grove reports the new count: settled, nothing more to write.
    let mut c = c;
    c.status = Some(api::grove::PodCliqueStatus {
        observed_generation: c.metadata.generation,
        replicas: Some(3),
        ..Default::default()
    });
    d.insert(c);
    clear(&d);
    pass(&d, &r).await.unwrap();
    assert!(d.writes().iter().all(|w| w.verb == Verb::ApplyStatus));
    assert_eq!(ready(&d).1, REASON_SCALED);
    assert_eq!(status(&d).replicas, Some(3));
}

#[tokio::test]
async fn a_scaling_group_component_scales_its_pod_clique_scaling_group() {
    let (d, r) = grove_setup(true);
    d.insert(PodCliqueScalingGroup {
        metadata: ObjectMeta {
            name: Some("g-0-worker".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: PodCliqueScalingGroupSpec {
            replicas: Some(1),
            min_available: None,
            clique_names: vec!["worker-ldr".into(), "worker-wkr".into()],
        },
        status: None,
    });
    pass(&d, &r).await.unwrap();
    let g: PodCliqueScalingGroup = d.object(Some(NS), "g-0-worker").unwrap();
    assert_eq!(g.spec.replicas, Some(3));
    // A scale of a child deleted meanwhile waits for Grove to recreate it.
    scale(&d, 4);
    d.fail_next(
        Verb::Scale,
        "PodCliqueScalingGroup",
        kit::Error::NotFound("gone".into()),
    );
    pass(&d, &r).await.unwrap();
    assert_eq!(ready(&d).1, REASON_WORKLOAD_NOT_FOUND);
    d.fail_next(
        Verb::Scale,
        "PodCliqueScalingGroup",
        kit::Error::Forbidden("no".into()),
    );
    assert!(pass(&d, &r).await.is_err());
    assert_eq!(ready(&d).1, REASON_SCALE_FAILED);
}

#[tokio::test]
async fn without_grove_a_grove_graph_waits() {
    let d = Double::new();
    d.insert(grove_graph(false));
    d.insert(adapter(3));
    d.insert(clique("g-0-worker", 2));
    let r = ScalingAdapterReconciler::new(d.reader(), d.writer());
    pass(&d, &r).await.unwrap();
    assert_eq!(ready(&d).1, REASON_WORKLOAD_PROVIDER_UNAVAILABLE);
    let c: PodClique = d.object(Some(NS), "g-0-worker").unwrap();
    assert_eq!(c.spec.clique.replicas, 2);
}

#[test]
fn v1alpha1_enabled_true_is_the_v1beta1_opt_in() {
    let alpha = |enabled: bool| -> api::v1alpha1::DynamoGraphDeployment {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "DynamoGraphDeployment",
            "metadata": {"name": "g", "namespace": NS},
            "spec": {"services": {"Worker": {
                "componentType": "worker", "replicas": 2,
                "scalingAdapter": {"enabled": enabled},
            }}},
        }))
        .unwrap()
    };
    let a = adapter(3);
    let on = recorded(api::conversion::to_v1beta1(&alpha(true)));
    assert!(matches!(
        resolve(&a, Some(&on), false),
        Resolution::Scale { .. }
    ));
    let off = api::conversion::to_v1beta1(&alpha(false));
    assert!(matches!(
        resolve(&a, Some(&off), false),
        Resolution::Observe {
            reason: REASON_SCALING_ADAPTER_DISABLED,
            ..
        }
    ));
}
