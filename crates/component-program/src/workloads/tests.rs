use super::render::template_annotation;
use super::*;
use std::collections::{BTreeMap, BTreeSet};

use crate::testutil::{all_ready, env, graph, stored};
use api::labels;
use api::v1beta1::{CheckpointStartupPolicy, MAIN_CONTAINER_NAME};
use api::{ComponentType, DynamoComponentDeployment, DynamoGraphDeploymentStatus};
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kit::Outcome;
use kit::testing::{Double, Verb};
use kube::ResourceExt;
use reconcilers::checkpoints::CheckpointInfos;
use reconcilers::restart::RestartStamps;
use reconcilers::rollout::WorkerGeneration;
use reconcilers::rollout::worker_hash;

fn outcome() -> Outcome<DynamoGraphDeploymentStatus> {
    Outcome::new(DynamoGraphDeploymentStatus::default())
}

fn reasons(out: &Outcome<DynamoGraphDeploymentStatus>) -> Vec<String> {
    out.events.iter().map(|e| e.reason.clone()).collect()
}

async fn pass(
    d: &Double,
    generation: &WorkerGeneration,
    restart: Option<&RestartStamps>,
) -> (Result<Report, Error>, Outcome<DynamoGraphDeploymentStatus>) {
    let mut out = outcome();
    let step = Workloads::new(d.reader(), d.writer())
        .reconcile(&stored(d), generation, restart, &CheckpointInfos::new())
        .await;
    let report = out.take(step);
    (report, out)
}

fn settled(d: &Double) -> WorkerGeneration {
    WorkerGeneration::settled(worker_hash(&stored(d)))
}

fn dcd(d: &Double, name: &str) -> DynamoComponentDeployment {
    d.object(Some("ns"), name)
        .unwrap_or_else(|| panic!("DCD {name}"))
}

fn main_env(dcd: &DynamoComponentDeployment) -> Vec<(String, String)> {
    dcd.spec
        .component
        .pod_template
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn creates_one_dcd_per_component_on_the_first_run() {
    let d = Double::new();
    d.insert(graph());
    let generation = settled(&d);
    let (report, out) = pass(&d, &generation, None).await;
    let report = report.unwrap();
    assert_eq!(reasons(&out), [EVENT_DCD_CREATED, EVENT_DCD_CREATED]);
    let worker_name = format!("g-vllmdecodeworker-{}", generation.target);
    let frontend = dcd(&d, "g-frontend");
    let worker = dcd(&d, &worker_name);
    assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 2);

    // Labels, owner, worker hash.
    assert_eq!(frontend.labels()[labels::DYNAMO_GRAPH_DEPLOYMENT_NAME], "g");
    assert_eq!(frontend.labels()[labels::DYNAMO_COMPONENT], "Frontend");
    assert_eq!(frontend.labels()[labels::DYNAMO_COMPONENT_TYPE], "frontend");
    assert_eq!(frontend.labels()[labels::DYNAMO_NAMESPACE], "ns-g");
    assert!(!frontend.labels().contains_key(labels::DYNAMO_WORKER_HASH));
    assert_eq!(
        worker.labels()[labels::DYNAMO_WORKER_HASH],
        generation.target
    );
    let template_labels = worker
        .spec
        .component
        .pod_template
        .as_ref()
        .unwrap()
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert_eq!(
        template_labels[labels::DYNAMO_WORKER_HASH],
        generation.target
    );
    let owner = &worker.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.controller, Some(true));
    assert_eq!(Some(owner.uid.as_str()), stored(&d).metadata.uid.as_deref());
    assert_eq!(worker.spec.component.replicas, Some(1));

    // Graph env first, component entries win and follow.
    assert_eq!(
        main_env(&worker),
        [
            ("GRAPH".to_string(), "1".to_string()),
            ("SHARED".to_string(), "component".to_string()),
            ("COMPONENT".to_string(), "1".to_string()),
        ]
    );

    // Nothing is ready yet, in name order.
    assert_eq!(report.readiness.len(), 2);
    assert_eq!(report.readiness[0].resource, "g-frontend");
    assert_eq!(
        report.readiness[0].not_ready.as_deref(),
        Some("spec not yet processed: generation=1, observedGeneration=0")
    );
    assert!(report.components.is_empty());
}

#[tokio::test]
async fn a_second_run_writes_nothing_and_reports_status() {
    let d = Double::new();
    d.insert(graph());
    let generation = settled(&d);
    pass(&d, &generation, None).await.0.unwrap();
    all_ready(&d);
    d.clear_writes();
    let (report, out) = pass(&d, &generation, None).await;
    let report = report.unwrap();
    assert!(d.writes().is_empty(), "{:?}", d.writes());
    assert!(out.events.is_empty());
    assert!(report.readiness.iter().all(|r| r.not_ready.is_none()));
    assert_eq!(report.components["Frontend"].ready_replicas, Some(1));
    assert_eq!(report.components.len(), 2);
}

#[tokio::test]
async fn user_drift_on_an_owned_field_is_restored() {
    let d = Double::new();
    d.insert(graph());
    let generation = settled(&d);
    pass(&d, &generation, None).await.0.unwrap();
    let mut frontend = dcd(&d, "g-frontend");
    frontend
        .spec
        .component
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("hacked".into());
    frontend
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("user".into(), "kept".into());
    d.insert(frontend);
    d.clear_writes();
    let (_, out) = pass(&d, &generation, None).await;
    assert_eq!(reasons(&out), [EVENT_DCD_UPDATED]);
    let frontend = dcd(&d, "g-frontend");
    let image = frontend
        .spec
        .component
        .pod_template
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("runtime:1"));
    assert_eq!(d.changes().len(), 1);
}

#[tokio::test]
async fn replicas_of_a_scaling_adapter_component_belong_to_others() {
    let d = Double::new();
    let mut g = graph();
    g.spec.components[1].scaling_adapter = Some(Default::default());
    g.spec.components[1].replicas = Some(2);
    d.insert(g);
    let generation = settled(&d);
    pass(&d, &generation, None).await.0.unwrap();
    let name = format!("g-vllmdecodeworker-{}", generation.target);
    assert_eq!(dcd(&d, &name).spec.component.replicas, None);
    // The adapter's controller scales the DCD; the graph's value does not come back.
    let mut worker = dcd(&d, &name);
    worker.spec.component.replicas = Some(5);
    d.insert(worker);
    d.clear_writes();
    let (_, out) = pass(&d, &generation, None).await;
    assert!(d.writes().is_empty(), "{:?}", d.writes());
    assert!(out.events.is_empty());
    assert_eq!(dcd(&d, &name).spec.component.replicas, Some(5));
}

#[tokio::test]
async fn a_removed_field_is_removed_from_the_dcd() {
    let d = Double::new();
    d.insert(graph());
    let generation = settled(&d);
    pass(&d, &generation, None).await.0.unwrap();
    let mut g = stored(&d);
    g.spec.env.clear();
    d.insert(g);
    let (_, out) = pass(&d, &generation, None).await;
    assert_eq!(reasons(&out), [EVENT_DCD_UPDATED, EVENT_DCD_UPDATED]);
    let names: Vec<String> = main_env(&dcd(&d, "g-frontend"))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["COMPONENT", "SHARED"]);
}

#[tokio::test]
async fn dcds_of_removed_components_are_deleted() {
    let d = Double::new();
    d.insert(graph());
    let generation = settled(&d);
    pass(&d, &generation, None).await.0.unwrap();
    let mut g = stored(&d);
    g.spec.components.truncate(1);
    d.insert(g);
    let generation = settled(&d);
    let (_, out) = pass(&d, &generation, None).await;
    assert_eq!(reasons(&out), [EVENT_DCD_DELETED]);
    let names: Vec<String> = d
        .objects::<DynamoComponentDeployment>()
        .iter()
        .map(|d| d.name_any())
        .collect();
    assert_eq!(names, ["g-frontend"]);
}

#[tokio::test]
async fn a_rolling_update_keeps_the_old_generation_until_it_settles() {
    let d = Double::new();
    let mut g = graph();
    g.spec.components[1].scaling_adapter = Some(Default::default());
    d.insert(g);
    let old = settled(&d);
    pass(&d, &old, None).await.0.unwrap();
    assert_eq!(
        dcd(&d, &format!("g-vllmdecodeworker-{}", old.target))
            .spec
            .component
            .replicas,
        None,
        "the adapter's count"
    );
    let rolling = WorkerGeneration {
        target: "11112222".into(),
        retained: BTreeSet::from([old.target.clone()]),
        rolling: true,
        replicas: BTreeMap::from([("VllmDecodeWorker".to_string(), 0)]),
        stuck: None,
    };
    let (_, out) = pass(&d, &rolling, None).await;
    assert_eq!(reasons(&out), [EVENT_DCD_CREATED]);
    assert_eq!(d.objects::<DynamoComponentDeployment>().len(), 3);
    // The new generation at the count the rollout steps it to, adapter or not.
    assert_eq!(
        dcd(&d, "g-vllmdecodeworker-11112222")
            .spec
            .component
            .replicas,
        Some(0)
    );
    // Settled on the new generation: the count is the adapter's again (left out).
    let (_, out) = pass(&d, &WorkerGeneration::settled("11112222"), None).await;
    assert_eq!(reasons(&out), [EVENT_DCD_UPDATED, EVENT_DCD_DELETED]);
    assert_eq!(
        dcd(&d, "g-vllmdecodeworker-11112222")
            .spec
            .component
            .replicas,
        None
    );
    let mut names: Vec<String> = d
        .objects::<DynamoComponentDeployment>()
        .iter()
        .map(|d| d.name_any())
        .collect();
    names.sort();
    assert_eq!(names, ["g-frontend", "g-vllmdecodeworker-11112222"]);
}

#[tokio::test]
async fn restart_stamps_are_applied_and_kept() {
    let d = Double::new();
    d.insert(graph());
    let generation = settled(&d);
    let stamps = RestartStamps {
        value: "r1".into(),
        components: BTreeSet::from(["Frontend".to_string()]),
    };
    pass(&d, &generation, Some(&stamps)).await.0.unwrap();
    let at =
        |d: &Double| template_annotation(&dcd(d, "g-frontend").spec.component, labels::RESTART_AT);
    assert_eq!(at(&d).as_deref(), Some("r1"));
    // Without stamps the live value stays: no write.
    d.clear_writes();
    pass(&d, &generation, None).await.0.unwrap();
    assert!(d.writes().is_empty());
    assert_eq!(at(&d).as_deref(), Some("r1"));
}

#[tokio::test]
async fn graph_metadata_is_propagated_where_the_template_does_not_set_it() {
    let d = Double::new();
    let mut g = graph();
    g.spec.annotations = BTreeMap::from([("a".to_string(), "graph".to_string())]);
    g.spec.labels = BTreeMap::from([("l".to_string(), "graph".to_string())]);
    g.metadata.annotations = Some(BTreeMap::from([(
        labels::ENABLE_METRICS.to_string(),
        "false".to_string(),
    )]));
    g.spec.components[0].pod_template.as_mut().unwrap().metadata = Some(ObjectMeta {
        annotations: Some(BTreeMap::from([("a".to_string(), "component".to_string())])),
        ..Default::default()
    });
    d.insert(g);
    pass(&d, &settled(&d), None).await.0.unwrap();
    let meta = dcd(&d, "g-frontend")
        .spec
        .component
        .pod_template
        .unwrap()
        .metadata
        .unwrap();
    let annotations = meta.annotations.unwrap();
    assert_eq!(annotations["a"], "component");
    assert_eq!(annotations[labels::ENABLE_METRICS], "false");
    assert_eq!(meta.labels.unwrap()["l"], "graph");
}

#[tokio::test]
async fn a_dcd_controlled_by_another_object_is_a_conflict() {
    let d = Double::new();
    d.insert(graph());
    let generation = settled(&d);
    d.insert(DynamoComponentDeployment {
        metadata: ObjectMeta {
            name: Some("g-frontend".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: Default::default(),
        status: None,
    });
    let (report, _) = pass(&d, &generation, None).await;
    let err = report.unwrap_err();
    assert!(matches!(err, Error::OwnershipConflict { .. }), "{err}");
    assert!(err.to_string().contains("has no controller owner"));
}

#[tokio::test]
async fn write_failures_are_the_steps_error() {
    let d = Double::new();
    d.insert(graph());
    let generation = settled(&d);
    d.fail_next(
        Verb::Apply,
        "DynamoComponentDeployment",
        kit::Error::Forbidden("no".into()),
    );
    assert!(matches!(
        pass(&d, &generation, None).await.0.unwrap_err(),
        Error::Apply { .. }
    ));
    d.fail_next(
        Verb::List,
        "DynamoComponentDeployment",
        kit::Error::Forbidden("no".into()),
    );
    assert!(matches!(
        pass(&d, &generation, None).await.0.unwrap_err(),
        Error::List(_)
    ));
}

/// The resolved checkpoint on the DCD (upstream's `applyCheckpointStartupPolicy`; rows 1-2
/// are upstream's `TestComponentWorkloadsReconciler_ApplyCheckpointStartupPolicy`).
#[test]
fn the_dcd_names_its_checkpoint_and_waits_for_it() {
    use api::snapshot::{
        ARTIFACT_VERSION_ANNOTATION, CHECKPOINT_ID_LABEL, TARGET_CONTAINERS_ANNOTATION,
    };
    let info = |policy, exists: bool, ready: bool| reconcilers::checkpoints::CheckpointInfo {
        enabled: true,
        exists,
        ready,
        checkpoint_name: exists.then(|| "checkpoint-name".into()),
        identity_hash: Some("checkpoint-id".into()),
        checkpoint_id: None,
        startup_policy: policy,
        automatic: false,
        target_container: MAIN_CONTAINER_NAME.into(),
        artifact_version: "1".into(),
        restore: None,
    };
    use CheckpointStartupPolicy::{Immediate, WaitForCheckpoint};
    // (case, info, replicas, names the checkpoint, restore-candidate annotations)
    let rows = [
        (
            "immediate stamps stable restore candidate metadata",
            info(Immediate, true, true),
            1,
            true,
            true,
        ),
        (
            "wait for checkpoint gates replicas until ready",
            info(WaitForCheckpoint, true, false),
            0,
            true,
            false,
        ),
        (
            "wait for checkpoint starts once ready",
            info(WaitForCheckpoint, true, true),
            1,
            true,
            false,
        ),
        (
            "no checkpoint yet: the component's own config",
            info(WaitForCheckpoint, false, false),
            0,
            false,
            false,
        ),
        (
            "immediate without a checkpoint: nothing to name",
            info(Immediate, false, false),
            1,
            false,
            false,
        ),
    ];
    for (name, info, replicas, named, candidate) in rows {
        let mut g = graph();
        g.metadata.uid = Some("uid-1".into());
        let worker = &mut g.spec.components[1];
        let meta = worker
            .pod_template
            .get_or_insert_with(Default::default)
            .metadata
            .get_or_insert_with(Default::default);
        meta.labels = Some(BTreeMap::from([(
            CHECKPOINT_ID_LABEL.into(),
            "stale".into(),
        )]));
        meta.annotations = Some(BTreeMap::from([(
            ARTIFACT_VERSION_ANNOTATION.into(),
            "stale".into(),
        )]));
        worker.experimental = Some(api::v1beta1::ExperimentalSpec {
            checkpoint: Some(api::v1beta1::ComponentCheckpointConfig {
                enabled: true,
                startup_policy: Some(info.startup_policy),
                job: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let infos = CheckpointInfos::from([("VllmDecodeWorker".to_string(), info)]);
        let generation = WorkerGeneration::settled("h");
        let dcds = render(&g, &generation, None, &infos, &BTreeMap::new()).unwrap();
        assert_eq!(dcds[0].spec.component.replicas, Some(1), "{name}");
        let dcd = &dcds[1].spec.component;
        assert_eq!(dcd.replicas, Some(replicas), "{name}");
        let ckpt = dcd
            .experimental
            .as_ref()
            .unwrap()
            .checkpoint
            .as_ref()
            .unwrap();
        assert_eq!(ckpt.checkpoint_ref.is_some(), named, "{name}");
        if named {
            assert_eq!(
                ckpt.checkpoint_ref.as_deref(),
                Some("checkpoint-name"),
                "{name}"
            );
            assert!(ckpt.identity.is_none() && ckpt.job.is_none(), "{name}");
        } else {
            assert!(ckpt.job.is_some(), "{name}: the component's config is kept");
        }
        let meta = dcd
            .pod_template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap();
        let annotations = meta.annotations.clone().unwrap_or_default();
        let labels = meta.labels.clone().unwrap_or_default();
        if candidate {
            assert!(!labels.contains_key(CHECKPOINT_ID_LABEL), "{name}");
            assert_eq!(
                annotations[labels::CHECKPOINT_RESTORE_CANDIDATE],
                "true",
                "{name}"
            );
            assert_eq!(
                annotations[labels::CHECKPOINT_NAME],
                "checkpoint-name",
                "{name}"
            );
            assert_eq!(
                annotations[labels::CHECKPOINT_STARTUP_POLICY],
                "Immediate",
                "{name}"
            );
            assert_eq!(annotations[TARGET_CONTAINERS_ANNOTATION], "main", "{name}");
        } else {
            assert!(
                !annotations.contains_key(labels::CHECKPOINT_RESTORE_CANDIDATE),
                "{name}"
            );
        }
    }
}

/// Upstream's `TestNativeSidecarRendering` (DCD materialization): a DCD keeps
/// `dynamoSidecar`, and its runtime init container carries the graph's env under its own.
#[test]
fn the_runtime_sidecar_of_a_dcd_carries_the_graph_env() {
    let mut g = graph();
    g.metadata.uid = Some("uid-1".into());
    let worker = &mut g.spec.components[1];
    worker.dynamo_sidecar = Some("runtime".into());
    let spec = worker.pod_template.as_mut().unwrap().spec.as_mut().unwrap();
    spec.init_containers = Some(vec![
        Container {
            name: "setup".into(),
            ..Default::default()
        },
        Container {
            name: "runtime".into(),
            restart_policy: Some("Always".into()),
            env: Some(vec![env("SHARED", "runtime")]),
            ..Default::default()
        },
    ]);
    let dcds = render(
        &g,
        &WorkerGeneration::settled("h"),
        None,
        &CheckpointInfos::new(),
        &BTreeMap::new(),
    )
    .unwrap();
    let component = &dcds[1].spec.component;
    assert_eq!(component.dynamo_sidecar.as_deref(), Some("runtime"));
    let inits = component
        .pod_template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.init_containers.as_ref())
        .unwrap();
    let pairs = |c: &Container| -> Vec<(String, String)> {
        c.env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    };
    assert!(
        inits[0].env.is_none(),
        "other init containers are left alone"
    );
    assert_eq!(
        pairs(&inits[1]),
        [
            ("GRAPH".to_string(), "1".to_string()),
            ("SHARED".to_string(), "runtime".to_string()),
        ]
    );
}

/// Upstream stamps `sidecar.istio.io/inject: "false"` on EPP pod templates before the
/// graph's annotations; the component's own value is kept.
#[test]
fn epp_pods_opt_out_of_istio_injection() {
    use crate::testutil::component;
    let annotation = |own: Option<&str>, on_graph: Option<&str>| {
        let mut g = graph();
        g.metadata.uid = Some("uid-1".into());
        let mut epp = component("Epp", ComponentType::Epp, "epp:1");
        if let Some(v) = own {
            let meta = epp
                .pod_template
                .get_or_insert_with(Default::default)
                .metadata
                .get_or_insert_with(Default::default);
            meta.annotations = Some(BTreeMap::from([(
                labels::ISTIO_SIDECAR_INJECT.to_string(),
                v.to_string(),
            )]));
        }
        if let Some(v) = on_graph {
            g.spec
                .annotations
                .insert(labels::ISTIO_SIDECAR_INJECT.to_string(), v.to_string());
        }
        g.spec.components = vec![epp, component("F", ComponentType::Frontend, "rt:1")];
        let dcds = render(
            &g,
            &WorkerGeneration::settled("h"),
            None,
            &CheckpointInfos::new(),
            &BTreeMap::new(),
        )
        .unwrap();
        dcds.iter()
            .map(|d| {
                d.spec
                    .component
                    .pod_template
                    .as_ref()
                    .and_then(|t| t.metadata.as_ref())
                    .and_then(|m| m.annotations.as_ref())
                    .and_then(|a| a.get(labels::ISTIO_SIDECAR_INJECT).cloned())
            })
            .collect::<Vec<_>>()
    };
    let s = |v: &str| Some(v.to_string());
    assert_eq!(annotation(None, None), [s("false"), None]);
    assert_eq!(annotation(None, Some("true")), [s("false"), s("true")]);
    assert_eq!(annotation(Some("true"), None), [s("true"), None]);
}

/// Upstream's DCD generation: worker-class components of a graph with an EPP component
/// carry `nvidia.com/dynamo-component-class: worker` on the DCD and its pod template (so the
/// DCD controller renders it onto the Deployment, its pods and the Service); nothing else
/// does.
#[test]
fn worker_component_class_in_graphs_with_an_epp_component() {
    use crate::testutil::component;
    // (component type, graph has an EPP component, class expected)
    let rows = [
        (ComponentType::Worker, true, true),
        (ComponentType::Prefill, true, true),
        (ComponentType::Decode, true, true),
        (ComponentType::Frontend, true, false),
        (ComponentType::Planner, true, false),
        (ComponentType::Epp, true, false),
        (ComponentType::Worker, false, false),
        (ComponentType::Prefill, false, false),
        (ComponentType::Decode, false, false),
    ];
    for (type_, with_epp, expected) in rows {
        let mut g = graph();
        g.metadata.uid = Some("uid-1".into());
        g.spec.components = vec![component("C", type_, "runtime:1")];
        if with_epp && type_ != ComponentType::Epp {
            g.spec
                .components
                .push(component("Epp", ComponentType::Epp, "epp:1"));
        }
        let generation = WorkerGeneration::settled("h");
        let dcds = render(
            &g,
            &generation,
            None,
            &CheckpointInfos::new(),
            &BTreeMap::new(),
        )
        .unwrap();
        let dcd = &dcds[0];
        let template_labels = dcd
            .spec
            .component
            .pod_template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let want = expected.then_some(labels::COMPONENT_CLASS_WORKER);
        for (place, got) in [
            ("DCD", dcd.labels().get(labels::DYNAMO_COMPONENT_CLASS)),
            (
                "pod template",
                template_labels.get(labels::DYNAMO_COMPONENT_CLASS),
            ),
        ] {
            assert_eq!(
                got.map(String::as_str),
                want,
                "{type_:?} (EPP in graph: {with_epp}): {place}"
            );
        }
    }
}

#[test]
fn merge_env_keeps_the_graph_order_and_lets_components_win() {
    let merged = merge_env(
        &[env("A", "g"), env("B", "g")],
        &[env("C", "c"), env("A", "c")],
    );
    let pairs: Vec<(String, String)> = merged
        .into_iter()
        .map(|e| (e.name, e.value.unwrap()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("A".into(), "c".into()),
            ("B".into(), "g".into()),
            ("C".into(), "c".into())
        ]
    );
}
