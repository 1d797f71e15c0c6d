//! Unit tests of the program on the double: order, idempotence, drift, errors per step, the
//! unsupported rollout, scaling through the scale subresource, topology condition, restart.

use std::collections::BTreeMap;

use api::common::{Restart as RestartSpec, RestartPhase};
use api::grove::{
    CONDITION_TOPOLOGY_LEVELS_UNAVAILABLE, PodClique, PodCliqueSet,
    REASON_CLUSTER_TOPOLOGY_NOT_FOUND,
};
use api::v1beta1::{
    ComponentGroupSpec, DynamoGraphDeploymentExperimentalSpec, SpecTopologyConstraint,
};
use api::{DgdState, DynamoGraphDeploymentScalingAdapter, DynamoGraphDeploymentStatus, labels};
use kit::Retry;
use kit::conditions::{self, READY, Status, find};
use kit::run::{RunError, finish};
use kit::testing::{Double, Verb};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use reconcilers::rollout::EVENT_ROLLING_UPDATE_NOT_SUPPORTED;
use reconcilers::scaling_adapters;
use reconcilers::shared::SharedConfig;

use super::*;
use crate::testutil::{NS, graph, grove, pcs, stored};
use crate::topology::{
    CONDITION_TOPOLOGY_LEVELS_AVAILABLE, REASON_TOPOLOGY_CONDITION_PENDING,
    REASON_TOPOLOGY_DEFINITION_NOT_FOUND,
};
use crate::workload::{
    EVENT_PCS_UPDATED, EVENT_SCALED, EVENT_SERVICE_DELETED, REASON_WORKLOADS_FAILED,
};

fn program(d: &Double) -> GroveProgram {
    GroveProgram::new(
        d.reader(),
        d.writer(),
        GroveConfig {
            shared: SharedConfig::default(),
            render: Default::default(),
            discover_pull_secrets: true,
        },
    )
}

/// One pass of the run loop: reconcile, persist the status, publish the events.
async fn pass(d: &Double, p: &GroveProgram) -> Result<Action, RunError<Error>> {
    let g = stored(d);
    let result = p.reconcile(&g).await;
    finish(
        &g,
        result,
        d.status_writer().as_ref(),
        d.event_sink().as_ref(),
    )
    .await
}

fn status(d: &Double) -> DynamoGraphDeploymentStatus {
    stored(d).status.unwrap()
}

fn ready(d: &Double) -> (String, String, String) {
    let s = status(d);
    let c = find(&s.conditions, READY).unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn retry_of(err: RunError<Error>) -> Retry {
    match err {
        RunError::Reconcile { retry, .. } => retry,
        RunError::Status(e) => panic!("status write failed: {e}"),
    }
}

fn kinds(d: &Double) -> Vec<(Verb, String)> {
    d.writes().into_iter().map(|w| (w.verb, w.kind)).collect()
}

fn edit(d: &Double, f: impl FnOnce(&mut api::DynamoGraphDeployment)) {
    let mut g = stored(d);
    f(&mut g);
    g.metadata.generation = Some(g.metadata.generation.unwrap_or(1) + 1);
    d.insert(g);
}

#[tokio::test]
async fn steps_run_in_order_and_a_converged_pass_writes_nothing() {
    let d = Double::new();
    let mut g = graph();
    g.spec.components[1].scaling_adapter = Some(Default::default());
    d.insert(g);
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    let dgd = "DynamoGraphDeployment".to_string();
    assert_eq!(
        kinds(&d),
        [
            (Verb::Patch, dgd.clone()),
            (Verb::Apply, "ServiceAccount".to_string()),
            (Verb::Apply, "Role".to_string()),
            (Verb::Apply, "RoleBinding".to_string()),
            (Verb::Apply, "PodCliqueSet".to_string()),
            (Verb::Apply, "Service".to_string()),
            (Verb::Apply, "Service".to_string()),
            (
                Verb::Create,
                "DynamoGraphDeploymentScalingAdapter".to_string()
            ),
            (Verb::ApplyStatus, dgd.clone()),
        ]
    );
    let s = status(&d);
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(s.state, DgdState::Pending);
    let (st, reason, message) = ready(&d);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "some_resources_are_not_ready")
    );
    assert_eq!(
        message,
        "Resources not ready: g: Frontend: resource not found; VllmDecodeWorker: resource not found"
    );
    assert!(
        stored(&d)
            .annotations()
            .contains_key(labels::CURRENT_WORKER_HASH_V2)
    );
    let set = pcs(&d);
    let owner = &set.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.controller, owner.uid.as_str()),
        (Some(true), stored(&d).metadata.uid.as_deref().unwrap())
    );
    assert_eq!(d.event_reasons(), ["ResourcesCreated"]);
    assert_eq!(
        s.components["Frontend"].component_names,
        ["g-0-frontend"],
        "status names the PodClique before it exists"
    );

    grove(&d, None);
    pass(&d, &p).await.unwrap();
    let s = status(&d);
    assert_eq!(s.state, DgdState::Successful);
    assert_eq!(
        ready(&d),
        (
            "True".into(),
            "all_resources_are_ready".into(),
            "All resources are ready".into()
        )
    );
    let worker = &s.components["VllmDecodeWorker"];
    assert_eq!(worker.component_kind, api::ComponentKind::PodClique);
    assert_eq!(worker.ready_replicas, Some(1));
    let hash = stored(&d).annotations()[labels::CURRENT_WORKER_HASH_V2].clone();
    assert_eq!(
        worker.runtime_namespace.as_deref(),
        Some(format!("ns-g-{hash}").as_str())
    );
    assert_eq!(
        s.components["Frontend"].runtime_namespace.as_deref(),
        Some("ns-g")
    );

    d.clear_writes();
    d.clear_events();
    pass(&d, &p).await.unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());
    assert!(d.events().is_empty());
}

#[tokio::test]
async fn user_drift_of_an_owned_field_is_restored() {
    let d = Double::new();
    d.insert(graph());
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    let mut set = pcs(&d);
    let image = set.spec.template.cliques[1].spec.pod_spec.containers[0]
        .image
        .clone();
    set.spec.template.cliques[1].spec.pod_spec.containers[0].image = Some("drifted".into());
    d.insert(set);
    d.clear_writes();
    d.clear_events();
    pass(&d, &p).await.unwrap();
    assert_eq!(
        pcs(&d).spec.template.cliques[1].spec.pod_spec.containers[0].image,
        image
    );
    assert!(d.event_reasons().contains(&EVENT_PCS_UPDATED.to_string()));
}

#[tokio::test]
async fn a_rollout_failure_stops_before_any_child() {
    let d = Double::new();
    d.insert(graph());
    d.fail_next(
        Verb::Patch,
        "DynamoGraphDeployment",
        kit::Error::Forbidden("denied".into()),
    );
    let err = pass(&d, &program(&d)).await.unwrap_err();
    assert_eq!(retry_of(err), Retry::Backoff);
    let (s, reason, message) = ready(&d);
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", REASON_ROLLING_UPDATE_FAILED)
    );
    assert!(message.contains("denied"), "{message}");
    assert_eq!(status(&d).state, DgdState::Failed);
    assert!(d.objects::<PodCliqueSet>().is_empty());
}

#[tokio::test]
async fn a_shared_resource_failure_stops_before_the_workload() {
    let d = Double::new();
    d.insert(graph());
    d.fail_next(
        Verb::Apply,
        "ServiceAccount",
        kit::Error::Forbidden("denied".into()),
    );
    let err = pass(&d, &program(&d)).await.unwrap_err();
    assert_eq!(retry_of(err), Retry::Backoff);
    assert_eq!(
        ready(&d).1,
        reconcilers::error::REASON_FAILED_TO_RECONCILE_RESOURCES
    );
    assert!(d.objects::<PodCliqueSet>().is_empty());
}

#[tokio::test]
async fn an_apply_failure_is_the_workload_reason_and_retries() {
    let d = Double::new();
    d.insert(graph());
    d.fail_next(
        Verb::Apply,
        "PodCliqueSet",
        kit::Error::Forbidden("no".into()),
    );
    let err = pass(&d, &program(&d)).await.unwrap_err();
    assert_eq!(retry_of(err), Retry::Backoff);
    let (_, reason, message) = ready(&d);
    assert_eq!(reason, REASON_WORKLOADS_FAILED);
    assert!(
        message.starts_with("failed to reconcile the Grove PodCliqueSet: apply PodCliqueSet g"),
        "{message}"
    );
    assert_eq!(status(&d).state, DgdState::Failed);
}

#[tokio::test]
async fn an_unrenderable_graph_touches_no_workload_and_waits_for_a_change() {
    let d = Double::new();
    let mut g = graph();
    g.spec.components[1].experimental = Some(api::v1beta1::ExperimentalSpec {
        gpu_memory_service: Some(api::v1beta1::GpuMemoryServiceSpec {
            mode: Some(api::v1beta1::GpuMemoryServiceMode::InterPod),
            ..Default::default()
        }),
        ..Default::default()
    });
    d.insert(g);
    let err = pass(&d, &program(&d)).await.unwrap_err();
    assert_eq!(retry_of(err), Retry::AwaitChange);
    let (_, reason, message) = ready(&d);
    assert_eq!(reason, REASON_WORKLOADS_FAILED);
    assert!(
        message.contains("mode InterPod is not supported on the grove pathway"),
        "{message}"
    );
    assert_eq!(
        kinds(&d),
        [(Verb::ApplyStatus, "DynamoGraphDeployment".to_string())],
        "nothing but the status is written"
    );
}

#[tokio::test]
async fn a_foreign_pod_clique_set_is_never_taken_over() {
    let d = Double::new();
    d.insert(graph());
    d.insert(PodCliqueSet {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("g".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Default::default(),
        status: None,
    });
    pass(&d, &program(&d)).await.unwrap_err();
    let (_, reason, message) = ready(&d);
    assert_eq!(reason, REASON_WORKLOADS_FAILED);
    assert!(message.contains("has no controller owner"), "{message}");
    assert!(d.writes().iter().all(|w| w.kind != "PodCliqueSet"));
}

#[tokio::test]
async fn a_restart_read_failure_keeps_the_previous_restart_status() {
    let d = Double::new();
    d.insert(graph());
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    edit(&d, |g| {
        g.spec.restart = Some(RestartSpec {
            id: "r1".into(),
            strategy: None,
        })
    });
    pass(&d, &p).await.unwrap();
    let before = status(&d).restart;
    assert_eq!(
        before.as_ref().unwrap().phase,
        Some(RestartPhase::Restarting)
    );
    d.fail_next(
        Verb::Get,
        "PodCliqueSet",
        kit::Error::Forbidden("no".into()),
    );
    pass(&d, &p).await.unwrap_err();
    assert_eq!(ready(&d).1, REASON_RESTART_FAILED);
    assert_eq!(status(&d).restart, before);
}

#[tokio::test]
async fn a_scaling_adapter_failure_keeps_component_status() {
    let d = Double::new();
    let mut g = graph();
    g.spec.components[1].scaling_adapter = Some(Default::default());
    d.insert(g);
    d.fail_next(
        Verb::Create,
        "DynamoGraphDeploymentScalingAdapter",
        kit::Error::Forbidden("no".into()),
    );
    pass(&d, &program(&d)).await.unwrap_err();
    assert_eq!(
        ready(&d).1,
        scaling_adapters::REASON_SCALING_ADAPTERS_FAILED
    );
    assert_eq!(status(&d).components.len(), 2);
    assert!(
        d.objects::<DynamoGraphDeploymentScalingAdapter>()
            .is_empty()
    );
}

#[tokio::test]
async fn a_worker_change_is_refused_with_a_warning_after_the_record_write() {
    let d = Double::new();
    d.insert(graph());
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    let old = stored(&d).annotations()[labels::CURRENT_WORKER_HASH_V2].clone();
    edit(&d, |g| {
        g.spec.components[1]
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("runtime:2".into());
    });
    // The record write fails: no warning.
    d.fail_next(
        Verb::Patch,
        "DynamoGraphDeployment",
        kit::Error::Conflict("x".into()),
    );
    d.clear_events();
    pass(&d, &p).await.unwrap_err();
    assert!(
        !d.event_reasons()
            .contains(&EVENT_ROLLING_UPDATE_NOT_SUPPORTED.to_string())
    );
    // It succeeds: the warning, once; the new hash is recorded and labels the worker clique.
    d.clear_events();
    pass(&d, &p).await.unwrap();
    let new = stored(&d).annotations()[labels::CURRENT_WORKER_HASH_V2].clone();
    assert_ne!(old, new);
    let warnings: Vec<_> = d
        .events()
        .into_iter()
        .filter(|e| e.event.reason == EVENT_ROLLING_UPDATE_NOT_SUPPORTED)
        .collect();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].event.type_, kit::EventType::Warning);
    let set = pcs(&d);
    let worker = set
        .spec
        .template
        .cliques
        .iter()
        .find(|c| c.name == "vllmdecodeworker")
        .unwrap();
    assert_eq!(worker.labels[labels::DYNAMO_WORKER_HASH], new);
    assert!(
        status(&d).rolling_update.is_none(),
        "no managed rollout on the grove pathway"
    );
    d.clear_events();
    pass(&d, &p).await.unwrap();
    assert!(
        !d.event_reasons()
            .contains(&EVENT_ROLLING_UPDATE_NOT_SUPPORTED.to_string())
    );
}

#[tokio::test]
async fn replicas_owned_by_a_scaling_adapter_are_not_scaled_by_the_graph() {
    let d = Double::new();
    let mut g = graph();
    g.spec.components[0].scaling_adapter = Some(Default::default());
    d.insert(g);
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    grove(&d, None);
    // The adapter's controller scaled the child; the graph's value does not come back.
    let mut clique: PodClique = d.object(Some(NS), "g-0-frontend").unwrap();
    clique.spec.clique.replicas = 4;
    d.insert(clique);
    edit(&d, |g| g.spec.components[0].replicas = Some(3));
    d.clear_writes();
    pass(&d, &p).await.unwrap();
    assert!(
        d.writes().iter().all(|w| w.verb != Verb::Scale),
        "{:?}",
        d.writes()
    );
    let clique: PodClique = d.object(Some(NS), "g-0-frontend").unwrap();
    assert_eq!(clique.spec.clique.replicas, 4);
}

#[tokio::test]
async fn replicas_change_through_the_scale_subresource_once_the_child_exists() {
    let d = Double::new();
    d.insert(graph());
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    // Before Grove created the PodClique: no error, a requeue, no scale write.
    edit(&d, |g| g.spec.components[0].replicas = Some(3));
    d.clear_writes();
    let action = pass(&d, &p).await.unwrap();
    assert_eq!(action, Action::requeue(workload::WAIT_FOR_CHILDREN));
    assert!(d.writes().iter().all(|w| w.verb != Verb::Scale));
    assert_eq!(
        pcs(&d).spec.template.cliques[0].spec.replicas,
        1,
        "the template keeps its count"
    );

    grove(&d, None);
    d.clear_writes();
    d.clear_events();
    pass(&d, &p).await.unwrap();
    assert_eq!(
        kinds(&d)
            .iter()
            .filter(|(v, _)| *v == Verb::Scale)
            .collect::<Vec<_>>(),
        [&(Verb::Scale, "PodClique".to_string())]
    );
    let clique: PodClique = d.object(Some(NS), "g-0-frontend").unwrap();
    assert_eq!(clique.spec.clique.replicas, 3);
    assert!(d.event_reasons().contains(&EVENT_SCALED.to_string()));
    assert_eq!(
        ready(&d).2,
        "Resources not ready: g: Frontend: spec not yet processed: generation=2, observedGeneration=1",
        "the old pods do not count for the new replicas"
    );
    assert_eq!(pcs(&d).spec.template.cliques[0].spec.replicas, 1);
    // Grove catches up: ready at 3, nothing more to write.
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    assert_eq!(ready(&d).0, "True");
    d.clear_writes();
    pass(&d, &p).await.unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());
}

/// The graph's frontend and worker in component group `Runtime`, 2 replicas.
fn grouped(g: &mut api::DynamoGraphDeployment, replicas: i32) {
    g.spec.experimental = Some(DynamoGraphDeploymentExperimentalSpec {
        kv_transfer_policy: None,
        component_groups: vec![ComponentGroupSpec {
            name: "Runtime".into(),
            replicas,
            scaling_adapter: None,
            components: ["Frontend", "VllmDecodeWorker"]
                .map(|name| api::common::ComponentGroupComponentSpec { name: name.into() })
                .to_vec(),
        }],
    });
}

/// A component group (upstream's Grove scaler, `TestGroveScalerReconcileTargetsSharedComponent
/// Group`, and `EvaluateGroveReadiness`): its PodCliqueScalingGroup `<pcs>-0-<group>` is scaled
/// to the group's `replicas` through `/scale`, a member's own count and a PodClique of the
/// member's name are left alone, and every member reports the group's readiness.
#[tokio::test]
async fn a_component_group_scales_and_reports_through_its_scaling_group() {
    let d = Double::new();
    let mut g = graph();
    grouped(&mut g, 2);
    d.insert(g);
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    let set = pcs(&d);
    let group = &set.spec.template.pod_clique_scaling_groups[0];
    assert_eq!(
        (
            group.name.as_str(),
            group.replicas,
            group.clique_names.clone()
        ),
        (
            "runtime",
            Some(2),
            vec!["frontend".to_string(), "vllmdecodeworker".to_string()]
        )
    );

    grove(&d, Some(1));
    pass(&d, &p).await.unwrap();
    let (s, reason, message) = ready(&d);
    assert_eq!((s.as_str(), reason.as_str()), ("False", "pods_not_ready"));
    assert_eq!(
        message,
        "Resources not ready: g: Frontend: scheduled but available=1/2; VllmDecodeWorker: scheduled but available=1/2"
    );
    for c in ["Frontend", "VllmDecodeWorker"] {
        let st = &status(&d).components[c];
        assert_eq!(st.component_kind, api::ComponentKind::PodCliqueScalingGroup);
        assert_eq!(st.component_names, ["g-0-runtime"]);
        assert_eq!(st.available_replicas, Some(1));
    }
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    assert_eq!(ready(&d).1, "all_resources_are_ready");

    // A PodClique of a member's name (as an ungrouped graph would have) stays as it is.
    let legacy = PodClique {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("g-0-vllmdecodeworker".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    d.insert(legacy);
    let scales = |d: &Double| -> Vec<(String, String)> {
        d.writes()
            .into_iter()
            .filter(|w| w.verb == Verb::Scale)
            .map(|w| (w.kind, w.name))
            .collect()
    };
    edit(&d, |g| grouped(g, 3));
    d.clear_writes();
    d.clear_events();
    pass(&d, &p).await.unwrap();
    assert_eq!(
        scales(&d),
        [(
            "PodCliqueScalingGroup".to_string(),
            "g-0-runtime".to_string()
        )]
    );
    let runtime: api::grove::PodCliqueScalingGroup = d.object(Some(NS), "g-0-runtime").unwrap();
    assert_eq!(runtime.spec.replicas, Some(3));
    assert!(d.event_reasons().contains(&EVENT_SCALED.to_string()));
    assert_eq!(
        pcs(&d).spec.template.pod_clique_scaling_groups[0].replicas,
        Some(2),
        "the template keeps its count"
    );
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    assert_eq!(ready(&d).0, "True");

    // A member's replicas are its clique's pods per group replica: rendered into the template,
    // never scaled, and the PodClique of its name is left alone.
    edit(&d, |g| g.spec.components[1].replicas = Some(5));
    d.clear_writes();
    pass(&d, &p).await.unwrap();
    pass(&d, &p).await.unwrap();
    assert_eq!(scales(&d), []);
    let set = pcs(&d);
    let worker = set
        .spec
        .template
        .cliques
        .iter()
        .find(|c| c.name == "vllmdecodeworker")
        .unwrap();
    assert_eq!(worker.spec.replicas, 5);
    assert_eq!(worker.labels[labels::DYNAMO_COMPONENT_GROUP], "Runtime");
    let legacy: PodClique = d.object(Some(NS), "g-0-vllmdecodeworker").unwrap();
    assert_eq!(legacy.spec.clique.replicas, 0);
}

#[tokio::test]
async fn readiness_follows_grove_with_upstreams_reasons() {
    let d = Double::new();
    d.insert(graph());
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    assert_eq!(
        status(&d).components["VllmDecodeWorker"].runtime_namespace,
        None,
        "no worker serves the new revision yet"
    );
    grove(&d, Some(0));
    pass(&d, &p).await.unwrap();
    let (s, reason, message) = ready(&d);
    assert_eq!((s.as_str(), reason.as_str()), ("False", "pods_not_ready"));
    assert_eq!(
        message,
        "Resources not ready: g: Frontend: scheduled but ready=0/1; VllmDecodeWorker: scheduled but ready=0/1"
    );
    // Rolled out (not yet ready): the revision is complete, the namespace cut over.
    assert!(
        status(&d).components["VllmDecodeWorker"]
            .runtime_namespace
            .is_some()
    );
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    assert_eq!(ready(&d).1, "all_resources_are_ready");
}

fn with_topology(g: &mut api::DynamoGraphDeployment) {
    g.spec.topology_constraint = Some(SpecTopologyConstraint {
        cluster_topology_name: "ct".into(),
        pack_domain: Some("zone".into()),
    });
}

fn grove_topology(d: &Double, status: Option<(&str, &str, &str)>) {
    let mut set = pcs(d);
    let st = set.status.get_or_insert_with(Default::default);
    st.conditions
        .retain(|c| c.type_ != CONDITION_TOPOLOGY_LEVELS_UNAVAILABLE);
    if let Some((s, reason, message)) = status {
        st.conditions.push(conditions::new(
            CONDITION_TOPOLOGY_LEVELS_UNAVAILABLE,
            if s == "True" {
                Status::True
            } else {
                Status::False
            },
            reason,
            message,
            1,
        ));
    }
    d.insert(set);
}

#[tokio::test]
async fn the_topology_condition_follows_grove_and_warns_once_per_transition() {
    let d = Double::new();
    let mut g = graph();
    with_topology(&mut g);
    d.insert(g);
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    let topo = |d: &Double| {
        let c = find(&status(d).conditions, CONDITION_TOPOLOGY_LEVELS_AVAILABLE)
            .cloned()
            .unwrap();
        (c.status, c.reason)
    };
    assert_eq!(
        topo(&d),
        ("Unknown".into(), REASON_TOPOLOGY_CONDITION_PENDING.into())
    );
    let t = pcs(&d).spec.template.topology_constraint.unwrap();
    assert_eq!(t.topology_name.as_deref(), Some("ct"));

    grove_topology(
        &d,
        Some((
            "True",
            REASON_CLUSTER_TOPOLOGY_NOT_FOUND,
            "ClusterTopology ct not found",
        )),
    );
    d.clear_events();
    pass(&d, &p).await.unwrap();
    assert_eq!(
        topo(&d),
        ("False".into(), REASON_TOPOLOGY_DEFINITION_NOT_FOUND.into())
    );
    let warned: Vec<_> = d
        .events()
        .into_iter()
        .filter(|e| e.event.reason == REASON_TOPOLOGY_DEFINITION_NOT_FOUND)
        .collect();
    assert_eq!(warned.len(), 1);
    assert_eq!(
        warned[0].event.note.as_deref(),
        Some("Topology constraints no longer enforced: ClusterTopology ct not found")
    );
    d.clear_events();
    pass(&d, &p).await.unwrap();
    assert!(
        d.events().is_empty(),
        "no change, no event: {:?}",
        d.event_reasons()
    );

    grove_topology(&d, Some(("False", "AllLevelsFound", "")));
    pass(&d, &p).await.unwrap();
    assert_eq!(
        topo(&d),
        ("True".into(), "AllTopologyLevelsAvailable".into())
    );
}

#[tokio::test]
async fn the_topology_condition_is_kept_on_a_failed_step_and_absent_without_constraints() {
    let d = Double::new();
    d.insert(graph());
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    assert!(find(&status(&d).conditions, CONDITION_TOPOLOGY_LEVELS_AVAILABLE).is_none());
    edit(&d, with_topology);
    d.fail_next(
        Verb::Apply,
        "PodCliqueSet",
        kit::Error::Forbidden("no".into()),
    );
    pass(&d, &p).await.unwrap_err();
    // Reported even though the workload step failed (read from the existing PodCliqueSet).
    assert!(find(&status(&d).conditions, CONDITION_TOPOLOGY_LEVELS_AVAILABLE).is_some());
}

#[tokio::test]
async fn a_restart_is_stamped_and_completes_when_grove_rolled_the_component() {
    let d = Double::new();
    d.insert(graph());
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    edit(&d, |g| {
        g.spec.restart = Some(RestartSpec {
            id: "r1".into(),
            strategy: None,
        })
    });
    pass(&d, &p).await.unwrap();
    let restart = status(&d).restart.unwrap();
    assert_eq!(restart.phase, Some(RestartPhase::Restarting));
    assert_eq!(
        restart.in_progress,
        ["Frontend"],
        "sequential, alphabetical"
    );
    let stamped: BTreeMap<String, Option<String>> = pcs(&d)
        .spec
        .template
        .cliques
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.annotations.get(labels::RESTART_AT).cloned(),
            )
        })
        .collect();
    assert_eq!(stamped["frontend"].as_deref(), Some("r1"));
    assert_eq!(stamped["vllmdecodeworker"], None);
    // Grove has not observed the stamped PodCliqueSet: still restarting.
    pass(&d, &p).await.unwrap();
    assert_eq!(status(&d).restart.unwrap().in_progress, ["Frontend"]);
    // It rolled the frontend: the next component.
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    assert_eq!(
        status(&d).restart.unwrap().in_progress,
        ["VllmDecodeWorker"]
    );
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    let restart = status(&d).restart.unwrap();
    assert_eq!(restart.phase, Some(RestartPhase::Completed));
    assert!(
        pcs(&d).spec.template.cliques.iter().all(|c| c
            .annotations
            .get(labels::RESTART_AT)
            .map(String::as_str)
            == Some("r1"))
    );
}

#[tokio::test]
async fn component_services_follow_discovery_and_the_rendered_selectors() {
    use k8s_openapi::api::core::v1::Service;
    let d = Double::new();
    d.insert(graph());
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    let services: Vec<Service> = d.objects();
    let names: Vec<String> = services.iter().map(|s| s.name_any()).collect();
    assert_eq!(names, ["g-frontend", "g-vllmdecodeworker"]);
    let frontend = &services[0];
    let spec = frontend.spec.as_ref().unwrap();
    assert_eq!(spec.ports.as_ref().unwrap()[0].port, 8000);
    let selector = spec.selector.as_ref().unwrap();
    assert_eq!(selector[labels::DYNAMO_COMPONENT], "Frontend");
    assert_eq!(selector[labels::DYNAMO_NAMESPACE], "ns-g");
    assert_eq!(selector[labels::DYNAMO_COMPONENT_TYPE], "frontend");
    assert_eq!(
        frontend.metadata.owner_references.as_ref().unwrap()[0].controller,
        Some(true)
    );
    // Drift restored, idle writes nothing.
    let mut drifted = frontend.clone();
    drifted.spec.as_mut().unwrap().selector = Some(BTreeMap::new());
    d.insert(drifted);
    d.clear_writes();
    pass(&d, &p).await.unwrap();
    assert!(d.writes().iter().any(|w| w.kind == "Service" && w.changed));
    d.clear_writes();
    pass(&d, &p).await.unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());
    // etcd discovery: only the frontend keeps a Service; the worker's is deleted.
    edit(&d, |g| {
        g.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(labels::DYNAMO_DISCOVERY_BACKEND.into(), "etcd".into());
    });
    d.clear_events();
    pass(&d, &p).await.unwrap();
    let names: Vec<String> = d
        .objects::<Service>()
        .iter()
        .map(|s| s.name_any())
        .collect();
    assert_eq!(names, ["g-frontend"]);
    assert!(
        d.event_reasons()
            .contains(&EVENT_SERVICE_DELETED.to_string())
    );
}

fn model_service(d: &Double, model: &str) -> Option<k8s_openapi::api::core::v1::Service> {
    d.object(Some(NS), &labels::model_service_name(model))
}

fn serve(g: &mut api::DynamoGraphDeployment, model: Option<&str>) {
    g.spec.components[1].model_ref = model.map(|name| api::common::ModelReference {
        name: name.into(),
        revision: None,
    });
}

/// The model Service step (upstream's `ReconcileModelServicesForComponents` on the Grove
/// pathway, after the PodCliqueSet): the graph's share of `dynamo-model-<hash>` with its
/// `spec.annotations`, a non-controller owner reference; idle passes send nothing; a model the
/// graph no longer serves is given up (deleted, the graph being its only owner); a failure is
/// `failed_to_reconcile_the_resources` with upstream's message.
#[tokio::test]
async fn model_services_follow_model_ref() {
    let d = Double::new();
    let mut g = graph();
    serve(&mut g, Some("llama"));
    g.spec
        .annotations
        .insert("example.com/graph".into(), "true".into());
    d.insert(g);
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    let s = model_service(&d, "llama").expect("the model Service");
    assert_eq!(s.annotations()["example.com/graph"], "true");
    assert_eq!(s.annotations()[labels::DYNAMO_BASE_MODEL], "llama");
    let owner = &s.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller, owner.uid.as_str()),
        (
            "DynamoGraphDeployment",
            Some(false),
            stored(&d).metadata.uid.as_deref().unwrap()
        )
    );
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    d.clear_writes();
    pass(&d, &p).await.unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());

    // Another model: its apply fails, the old one is kept until the step succeeds.
    edit(&d, |g| serve(g, Some("other")));
    d.fail_next(Verb::Apply, "Service", kit::Error::Invalid("boom".into()));
    assert!(pass(&d, &p).await.is_err());
    let (st, reason, message) = ready(&d);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", REASON_WORKLOADS_FAILED)
    );
    assert!(
        message.starts_with("failed to reconcile model services: apply Service ns/dynamo-model-"),
        "{message}"
    );
    assert!(model_service(&d, "llama").is_some());
    pass(&d, &p).await.unwrap();
    assert!(
        model_service(&d, "llama").is_none(),
        "the only owner gave it up"
    );
    assert!(model_service(&d, "other").is_some());

    edit(&d, |g| serve(g, None));
    pass(&d, &p).await.unwrap();
    assert!(
        d.objects::<k8s_openapi::api::core::v1::Service>()
            .iter()
            .all(|s| !s.name_any().starts_with("dynamo-model-"))
    );
}

/// A `WaitForCheckpoint` worker on the Grove pathway: its clique waits at zero and `Ready`
/// names the checkpoint awaited; once the checkpoint is Ready the clique starts restore-shaped
/// from the snapshot agent's storage, which the program must find first.
#[tokio::test]
async fn a_waiting_component_starts_restored_once_its_checkpoint_is_ready() {
    use api::checkpoint::{DynamoCheckpointPhase, DynamoCheckpointStatus};
    use api::v1beta1::{CheckpointStartupPolicy, ComponentCheckpointConfig, ExperimentalSpec};
    let d = Double::new();
    let mut g = graph();
    g.spec.backend_framework = Some(api::BackendFramework::Vllm);
    let worker = g
        .spec
        .components
        .iter_mut()
        .find(|c| c.name == "VllmDecodeWorker")
        .unwrap();
    worker.experimental = Some(ExperimentalSpec {
        checkpoint: Some(ComponentCheckpointConfig {
            enabled: true,
            startup_policy: Some(CheckpointStartupPolicy::WaitForCheckpoint),
            ..Default::default()
        }),
        ..Default::default()
    });
    d.insert(g);
    let p = program(&d);
    pass(&d, &p).await.unwrap();
    let clique = |d: &Double| {
        pcs(d)
            .spec
            .template
            .cliques
            .into_iter()
            .find(|c| c.name == "vllmdecodeworker")
            .unwrap()
    };
    assert_eq!(clique(&d).spec.replicas, 0);
    let (_, reason, message) = ready(&d);
    assert_eq!(reason, "waiting_for_checkpoint");
    let name = status(&d).checkpoints["VllmDecodeWorker"]
        .checkpoint_name
        .clone()
        .unwrap();
    assert_eq!(
        message,
        format!("Waiting for checkpoints: VllmDecodeWorker ({name})")
    );

    let mut ckpt: api::DynamoCheckpoint = d.object(Some(NS), &name).unwrap();
    ckpt.status = Some(DynamoCheckpointStatus {
        phase: Some(DynamoCheckpointPhase::Ready),
        ..Default::default()
    });
    d.insert(ckpt);
    let err = pass(&d, &p).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("no snapshot-agent daemonset found"),
        "{err}"
    );
    assert_eq!(
        clique(&d).spec.replicas,
        0,
        "nothing restores without storage"
    );

    d.insert::<k8s_openapi::api::apps::v1::DaemonSet>(
        serde_json::from_value(serde_json::json!({
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
        .unwrap(),
    );
    // The restore-shaped template is written first; once Grove observed it, the worker is
    // scaled to its count through the scale subresource (the template keeps the count it was
    // created with, as upstream's scaler).
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    grove(&d, None);
    pass(&d, &p).await.unwrap();
    let scaled: PodClique = d.object(Some(NS), "g-0-vllmdecodeworker").unwrap();
    assert_eq!(scaled.spec.clique.replicas, 1);
    let started = clique(&d);
    assert_eq!(
        started.labels["nvidia.com/snapshot-is-restore-target"],
        "true"
    );
    assert_eq!(
        started.spec.pod_spec.containers[0].command,
        Some(vec!["sleep".to_string(), "infinity".to_string()])
    );
    assert_ne!(ready(&d).1, "waiting_for_checkpoint");
}

/// A Docker config Secret of the graph's namespace for the images' registry reaches every
/// clique's pods; one of another namespace does not.
#[tokio::test]
async fn discovered_image_pull_secrets_reach_every_clique() {
    let secret = |ns: &str, name: &str| -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": ns },
            "type": "kubernetes.io/dockerconfigjson",
            // {"auths":{"nvcr.io":{}}}
            "data": { ".dockerconfigjson": "eyJhdXRocyI6eyJudmNyLmlvIjp7fX19" },
        }))
        .unwrap()
    };
    let d = Double::new();
    d.insert(graph());
    d.insert(secret(NS, "ngc"));
    d.insert(secret("elsewhere", "theirs"));
    pass(&d, &program(&d)).await.unwrap();
    for clique in pcs(&d).spec.template.cliques {
        let names: Vec<String> = clique
            .spec
            .pod_spec
            .image_pull_secrets
            .into_iter()
            .flatten()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["ngc"], "{}", clique.name);
    }
}

/// A failed list of the Secrets fails the workload step: nothing is rendered without them.
#[tokio::test]
async fn a_failed_secret_list_writes_no_podcliqueset() {
    let d = Double::new();
    d.insert(graph());
    d.fail_next(
        Verb::List,
        "Secret",
        kit::Error::Forbidden("secrets denied".into()),
    );
    let err = pass(&d, &program(&d)).await.unwrap_err();
    assert_eq!(retry_of(err), Retry::Backoff);
    assert!(
        !kinds(&d).iter().any(|(_, k)| k == "PodCliqueSet"),
        "{:?}",
        kinds(&d)
    );
}
