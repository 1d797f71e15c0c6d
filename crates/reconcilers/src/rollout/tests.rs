//! The rollout reconciler on the in-memory double: observation, the applier's writes, and whole
//! rollouts (surge-first, `maxSurge: 0`, `Recreate`) with reverts mid-way.

use std::collections::BTreeMap;
use std::time::Duration;

use super::pods::{WorkerPod, WorkerPodStatus};
use super::*;
use crate::testutil::{component, dgd, reasons};
use api::ComponentKind;
use api::ComponentType;
use api::DynamoComponentDeploymentSpec;
use api::DynamoComponentDeploymentStatus;
use api::DynamoGraphDeploymentStatus;
use api::dcd::CONDITION_AVAILABLE;
use api::v1beta1::ComponentReplicaStatus;
use k8s_openapi::api::core::v1::PodCondition;
use kit::conditions::{self, Status};
use kit::testing::{Double, Verb};
use kit::{Outcome, WriterExt};
use kube::Resource;

const IMAGE_1: &str = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1";
const IMAGE_2: &str = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0";

fn graph(d: &Double) -> DynamoGraphDeployment {
    d.insert(dgd(
        "g",
        vec![
            component("Frontend", ComponentType::Frontend),
            component("Worker", ComponentType::Worker),
        ],
    ))
}

fn stored(d: &Double) -> DynamoGraphDeployment {
    d.object(Some("ns"), "g").unwrap()
}

fn edit(d: &Double, change: impl FnOnce(&mut DynamoGraphDeployment)) {
    let mut g = stored(d);
    change(&mut g);
    d.insert(g);
}

fn set_image(d: &Double, image: &str) {
    edit(d, |g| {
        let worker = g.spec.components.iter_mut().find(|c| c.name == "Worker");
        worker
            .unwrap()
            .pod_template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some(image.into());
    });
}

/// Put `pairs` on the worker's pod template annotations (part of the worker hash, as upstream).
fn annotate_worker(d: &Double, pairs: &[(&str, &str)]) {
    edit(d, |g| {
        let worker = g.spec.components.iter_mut().find(|c| c.name == "Worker");
        let template = worker.unwrap().pod_template.as_mut().unwrap();
        let meta = template.metadata.get_or_insert_with(Default::default);
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        for (k, v) in pairs {
            annotations.insert(k.to_string(), v.to_string());
        }
    });
}

fn set_replicas(d: &Double, replicas: i32) {
    edit(d, |g| {
        let worker = g.spec.components.iter_mut().find(|c| c.name == "Worker");
        worker.unwrap().replicas = Some(replicas);
    });
}

fn dcd_name(d: &Double, hash: &str) -> String {
    let g = stored(d);
    naming::dcd_name(&g, g.spec.component("Worker").unwrap(), Some(hash))
}

/// A worker DCD of `g` at `hash` asking for `spec` replicas with `ready` of them ready (and
/// available), observed by its controller.
fn worker_dcd(d: &Double, hash: &str, spec: Option<i32>, ready: i32, created: i64) {
    let g = stored(d);
    let mut component = g.spec.component("Worker").unwrap().clone();
    component.replicas = spec;
    d.insert(DynamoComponentDeployment {
        metadata: ObjectMeta {
            name: Some(dcd_name(d, hash)),
            namespace: Some("ns".into()),
            labels: Some(
                [
                    (
                        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                        "g".to_string(),
                    ),
                    (labels::DYNAMO_WORKER_HASH.to_string(), hash.to_string()),
                ]
                .into(),
            ),
            owner_references: Some(vec![g.controller_owner_ref(&()).unwrap()]),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
            )),
            generation: Some(1),
            ..Default::default()
        },
        spec: DynamoComponentDeploymentSpec {
            backend_framework: None,
            component,
        },
        status: None,
    });
    settle(d, hash, ready);
}

/// What the DCD controller and the kubelet report for the DCD at `hash`: its latest generation
/// observed, `ready` replicas ready and available, as many running.
fn settle(d: &Double, hash: &str, ready: i32) {
    let name = dcd_name(d, hash);
    let mut dcd: DynamoComponentDeployment = d.object(Some("ns"), &name).unwrap();
    let spec = dcd.spec.component.replicas.unwrap_or(1);
    dcd.status = Some(DynamoComponentDeploymentStatus {
        observed_generation: dcd.metadata.generation,
        conditions: vec![conditions::new(
            CONDITION_AVAILABLE,
            Status::from(ready >= spec),
            "DeploymentReady",
            "",
            1,
        )],
        component: Some(ComponentReplicaStatus {
            component_kind: ComponentKind::Deployment,
            component_name: None,
            component_names: vec![name.clone()],
            runtime_namespace: None,
            gpus_per_engine: None,
            gpus_per_replica: None,
            replicas: spec.max(ready),
            updated_replicas: ready,
            ready_replicas: Some(ready),
            available_replicas: Some(ready),
            scheduled_replicas: None,
        }),
    });
    d.insert(dcd);
}

/// The workloads step's part, as the component program runs it: the target generation's DCD
/// at the plan's replicas (created when missing), old generations not retained deleted.
async fn workloads(d: &Double, plan: &WorkerGeneration) {
    let name = dcd_name(d, &plan.target);
    let desired = stored(d).spec.component("Worker").unwrap().replicas;
    let replicas = plan.replicas.get("Worker").copied().or(desired).or(Some(1));
    match d.object::<DynamoComponentDeployment>(Some("ns"), &name) {
        Some(mut dcd) => {
            if dcd.spec.component.replicas != replicas {
                dcd.spec.component.replicas = replicas;
                dcd.metadata.generation = dcd.metadata.generation.map(|g| g + 1);
                d.insert(dcd);
            }
        }
        None => worker_dcd(d, &plan.target, replicas, 0, 300),
    }
    for dcd in d.objects::<DynamoComponentDeployment>() {
        let hash = dcd.labels()[labels::DYNAMO_WORKER_HASH].clone();
        if !plan.keeps(&hash) {
            remove::<DynamoComponentDeployment>(d, &dcd.name_any()).await;
        }
    }
}

/// Delete a fixture (as its controller or the kubelet would).
async fn remove<K: kit::capability::Kind>(d: &Double, name: &str) {
    d.writer()
        .delete::<K>(Some("ns"), name, &kit::Preconditions::default(), None)
        .await
        .unwrap();
}

fn config() -> Config {
    Config {
        progress_deadline: Duration::from_secs(600),
        pods: true,
    }
}

/// The rollout step folded into `out` as the component program does: its events and requeue,
/// the record written, `status.rollingUpdate`.
async fn run(
    d: &Double,
    rollout: &Rollout,
    g: &DynamoGraphDeployment,
    out: &mut Outcome<DynamoGraphDeploymentStatus>,
) -> Result<WorkerGeneration, Error> {
    let rolled = out.take(rollout.reconcile(g).await)?;
    if let Some(record) = &rolled.record {
        let written = WorkerHashRecord::new(d.writer()).reconcile(g, record).await;
        out.take(written).map_err(Error::Record)?;
    }
    out.status.rolling_update = rolled.status;
    Ok(rolled.workers)
}

/// One pass: the rollout step on the stored graph, its status persisted as the root would.
async fn pass(d: &Double) -> (WorkerGeneration, Outcome<DynamoGraphDeploymentStatus>) {
    let g = stored(d);
    let mut out = Outcome::new(g.status.clone().unwrap_or_default());
    let plan = run(
        d,
        &Rollout::with_config(d.reader(), d.writer(), config()),
        &g,
        &mut out,
    )
    .await
    .unwrap();
    let mut g = stored(d);
    g.status = Some(out.status.clone());
    d.insert(g);
    (plan, out)
}

fn recorded(d: &Double) -> Option<String> {
    recorded_hash(&stored(d))
}

fn phase(out: &Outcome<DynamoGraphDeploymentStatus>) -> Option<RollingUpdatePhase> {
    out.status.rolling_update.as_ref().and_then(|s| s.phase)
}

fn replicas(d: &Double, hash: &str) -> Option<i32> {
    d.object::<DynamoComponentDeployment>(Some("ns"), &dcd_name(d, hash))
        .and_then(|dcd| dcd.spec.component.replicas)
}

fn exists(d: &Double, hash: &str) -> bool {
    d.object::<DynamoComponentDeployment>(Some("ns"), &dcd_name(d, hash))
        .is_some()
}

#[tokio::test]
async fn first_deploy_records_the_hash_and_a_second_run_writes_nothing() {
    let d = Double::new();
    let g = graph(&d);
    let (plan, out) = pass(&d).await;
    assert_eq!(plan, WorkerGeneration::settled(worker_hash(&g)));
    assert_eq!(recorded(&d), Some(worker_hash(&g)));
    assert!(out.events.is_empty());
    assert!(out.status.rolling_update.is_none());
    d.clear_writes();
    let (again, out) = pass(&d).await;
    assert_eq!(again, plan);
    assert!(
        d.writes()
            .iter()
            .all(|w| w.kind != "DynamoGraphDeployment" || w.verb != Verb::Patch)
    );
    assert!(out.events.is_empty());
}

#[tokio::test]
async fn a_lost_record_is_recovered_from_the_worker_dcds() {
    let d = Double::new();
    let g = graph(&d);
    let hash = worker_hash(&g);
    worker_dcd(&d, &hash, Some(1), 1, 100);
    // No annotation (as after `kubectl replace`): not a first deploy, the DCD says which
    // generation serves; the record is restored.
    let (plan, out) = pass(&d).await;
    assert_eq!(plan, WorkerGeneration::settled(hash.clone()));
    assert_eq!(recorded(&d), Some(hash));
    assert!(out.events.is_empty());
}

#[tokio::test]
async fn a_lost_record_with_an_old_generation_rolls_instead_of_leaking_it() {
    let d = Double::new();
    graph(&d);
    worker_dcd(&d, "0ld0ld00", Some(1), 1, 100);
    let (plan, out) = pass(&d).await;
    assert!(plan.rolling);
    assert!(plan.retained.contains("0ld0ld00"));
    assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_STARTED]);
    // The record is only written when the new generation takes over.
    assert_eq!(recorded(&d), None);
}

#[tokio::test]
async fn the_oldest_generation_is_the_active_one() {
    let d = Double::new();
    graph(&d);
    worker_dcd(&d, "bbbbbbbb", Some(1), 1, 200);
    worker_dcd(&d, "aaaaaaaa", Some(1), 1, 100);
    let dcds: Vec<DynamoComponentDeployment> = d.objects();
    assert_eq!(recover_active(&dcds).as_deref(), Some("aaaaaaaa"));
}

/// A graph at `replicas` workers, deployed and ready at generation `old`, then changed to a new
/// image: returns `(old, new)`.
async fn deployed_then_changed(
    d: &Double,
    replicas: i32,
    strategy: &[(&str, &str)],
) -> (String, String) {
    graph(d);
    set_replicas(d, replicas);
    annotate_worker(d, strategy);
    pass(d).await;
    let old = worker_hash(&stored(d));
    worker_dcd(d, &old, Some(replicas), replicas, 100);
    set_image(d, IMAGE_2);
    let new = worker_hash(&stored(d));
    assert_ne!(old, new);
    (old, new)
}

#[tokio::test]
async fn surge_first_rolls_the_whole_new_generation_next_to_the_old_one() {
    let d = Double::new();
    // The default on a single replica: 25% rounds up to one extra, down to none unavailable.
    let (old, new) = deployed_then_changed(&d, 1, &[]).await;

    // Start: the new generation at full size next to the old one, the old one untouched.
    let (plan, out) = pass(&d).await;
    assert_eq!(phase(&out), Some(RollingUpdatePhase::Pending));
    assert!(
        out.status
            .rolling_update
            .as_ref()
            .unwrap()
            .start_time
            .is_some()
    );
    assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_STARTED]);
    assert_eq!(
        (plan.target.as_str(), plan.replicas["Worker"]),
        (new.as_str(), 1)
    );
    assert!(plan.rolling && plan.retained.contains(&old));
    workloads(&d, &plan).await;
    assert_eq!(replicas(&d, &old), Some(1));

    // InProgress; the new pods are not ready: nothing moves, nothing is recorded.
    let (plan, out) = pass(&d).await;
    assert_eq!(phase(&out), Some(RollingUpdatePhase::InProgress));
    assert!(out.events.is_empty());
    workloads(&d, &plan).await;
    assert_eq!((replicas(&d, &old), replicas(&d, &new)), (Some(1), Some(1)));
    assert_eq!(recorded(&d), Some(old.clone()));

    // Ready: the old generation is stepped down (only its count, under the rollout's manager).
    settle(&d, &new, 1);
    d.clear_writes();
    let (plan, out) = pass(&d).await;
    assert_eq!(phase(&out), Some(RollingUpdatePhase::InProgress));
    assert_eq!(replicas(&d, &old), Some(0));
    let applies: Vec<_> = d
        .writes()
        .into_iter()
        .filter(|w| w.verb == Verb::Apply)
        .map(|w| w.name)
        .collect();
    assert_eq!(applies, [dcd_name(&d, &old)]);
    workloads(&d, &plan).await;

    // Drained: completed, the new hash recorded, the old generation no longer kept.
    settle(&d, &old, 0);
    let (plan, out) = pass(&d).await;
    assert_eq!(plan, WorkerGeneration::settled(new.clone()));
    let status = out.status.rolling_update.clone().unwrap();
    assert_eq!(status.phase, Some(RollingUpdatePhase::Completed));
    assert!(status.end_time.is_some());
    assert_eq!(status.updated_components, ["Worker"]);
    assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_COMPLETED]);
    assert_eq!(recorded(&d), Some(new.clone()));
    workloads(&d, &plan).await;
    assert!(!exists(&d, &old));

    // Settled: nothing more to do.
    d.clear_writes();
    let (_, out) = pass(&d).await;
    assert!(out.events.is_empty());
    assert!(d.writes().is_empty(), "{:?}", d.writes());
}

const NO_SURGE: &[(&str, &str)] = &[
    (labels::DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE, "0"),
    (labels::DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE, "1"),
];
const RECREATE: &[(&str, &str)] = &[(labels::DEPLOYMENT_STRATEGY, "Recreate")];

#[tokio::test]
async fn max_surge_zero_steps_the_old_generation_down_first() {
    let d = Double::new();
    let (old, new) = deployed_then_changed(&d, 2, NO_SURGE).await;

    // Start: one old replica goes, the new generation starts at 0 (no room for a surge).
    let (plan, _) = pass(&d).await;
    assert_eq!(plan.replicas["Worker"], 0);
    workloads(&d, &plan).await;
    assert_eq!((replicas(&d, &old), replicas(&d, &new)), (Some(1), Some(0)));

    // The old pod went: one new replica may come.
    settle(&d, &old, 1);
    settle(&d, &new, 0);
    let (plan, _) = pass(&d).await;
    workloads(&d, &plan).await;
    assert_eq!((replicas(&d, &old), replicas(&d, &new)), (Some(1), Some(1)));

    // It is ready: the second old one goes, then the second new one comes.
    settle(&d, &new, 1);
    let (plan, _) = pass(&d).await;
    workloads(&d, &plan).await;
    assert_eq!((replicas(&d, &old), replicas(&d, &new)), (Some(0), Some(1)));
    settle(&d, &old, 0);
    let (plan, out) = pass(&d).await;
    workloads(&d, &plan).await;
    assert_eq!(replicas(&d, &new), Some(2));
    assert_eq!(phase(&out), Some(RollingUpdatePhase::InProgress));

    settle(&d, &new, 2);
    let (plan, out) = pass(&d).await;
    assert_eq!(phase(&out), Some(RollingUpdatePhase::Completed));
    assert_eq!(recorded(&d), Some(new.clone()));
    workloads(&d, &plan).await;
    assert!(!exists(&d, &old));
    assert_eq!(replicas(&d, &new), Some(2));
}

fn pod(
    d: &Double,
    name: &str,
    workload: &str,
    phase: &str,
    created: i64,
    unschedulable: Option<&str>,
) {
    d.insert(WorkerPod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: Some(
                [
                    (
                        labels::DYNAMO_GRAPH_DEPLOYMENT_NAME.to_string(),
                        "g".to_string(),
                    ),
                    (labels::SELECTOR.to_string(), workload.to_string()),
                ]
                .into(),
            ),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
            )),
            ..Default::default()
        },
        status: Some(WorkerPodStatus {
            phase: Some(phase.into()),
            conditions: unschedulable
                .map(|message| PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    message: Some(message.into()),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
        }),
    });
}

/// Upstream's `TestOldWorkerPodsTerminated`, the selection half (4 cases: no pods, a pod of the
/// new generation, a pod without a workload label, one running pod among terminal ones): only a
/// non-terminal pod of the DCD itself keeps it from being drained.
#[tokio::test]
async fn only_a_running_pod_of_the_dcd_itself_blocks_its_drain() {
    let d = Double::new();
    graph(&d);
    worker_dcd(&d, "0ld0ld00", Some(0), 0, 100);
    let old: DynamoComponentDeployment = d.object(Some("ns"), &dcd_name(&d, "0ld0ld00")).unwrap();
    let pods = |d: &Double| d.objects::<WorkerPod>();
    assert!(workload(&old, &pods(&d)).drained(), "no pods");
    pod(&d, "new", "g-worker-n3wn3wn3", "Running", 100, None);
    pod(&d, "unlabelled", "", "Running", 100, None);
    pod(&d, "failed", &old.name_any(), "Failed", 100, None);
    assert!(
        workload(&old, &pods(&d)).drained(),
        "others' and terminal pods"
    );
    pod(&d, "running", &old.name_any(), "Running", 100, None);
    assert!(!workload(&old, &pods(&d)).drained(), "its running pod");
}

#[tokio::test]
async fn recreate_removes_the_old_generation_and_its_pods_before_the_new_one_starts() {
    let d = Double::new();
    let (old, new) = deployed_then_changed(&d, 2, RECREATE).await;
    let (plan, _) = pass(&d).await;
    workloads(&d, &plan).await;
    assert_eq!((replicas(&d, &old), replicas(&d, &new)), (Some(0), Some(0)));

    // The old DCD reports 0 replicas, but a pod of it still runs (terminating): wait.
    settle(&d, &old, 0);
    settle(&d, &new, 0);
    pod(&d, "old-0", &dcd_name(&d, &old), "Running", 100, None);
    let (plan, out) = pass(&d).await;
    workloads(&d, &plan).await;
    assert_eq!(replicas(&d, &new), Some(0));
    assert_eq!(phase(&out), Some(RollingUpdatePhase::InProgress));

    // The pod is gone: the new generation starts at full size.
    remove::<WorkerPod>(&d, "old-0").await;
    let (plan, _) = pass(&d).await;
    workloads(&d, &plan).await;
    assert_eq!(replicas(&d, &new), Some(2));
    settle(&d, &new, 2);
    let (plan, out) = pass(&d).await;
    assert_eq!(phase(&out), Some(RollingUpdatePhase::Completed));
    workloads(&d, &plan).await;
    assert!(!exists(&d, &old));
}

/// Reverting mid-rollout under each strategy: the spec goes back to the active generation,
/// the aborted one is stepped down by the same strategy, the record never moves, and the
/// rollout ends on the active generation.
#[tokio::test]
async fn a_revert_mid_rollout_rolls_back_under_each_strategy() {
    for strategy in [&[][..], NO_SURGE, RECREATE] {
        let d = Double::new();
        let (old, new) = deployed_then_changed(&d, 2, strategy).await;
        // Two passes into the rollout, the new generation partly up.
        let (plan, _) = pass(&d).await;
        workloads(&d, &plan).await;
        settle(&d, &old, replicas(&d, &old).unwrap());
        settle(&d, &new, 0);
        let (plan, _) = pass(&d).await;
        workloads(&d, &plan).await;
        let new_spec = replicas(&d, &new).unwrap();
        settle(&d, &new, new_spec);
        settle(&d, &old, replicas(&d, &old).unwrap());

        // Back to the original image (and strategy): the active generation is the target.
        set_image(&d, IMAGE_1);
        assert_eq!(worker_hash(&stored(&d)), old, "{strategy:?}");
        let mut passes = 0;
        loop {
            let before: i32 = [&old, &new]
                .iter()
                .filter_map(|h| d.object::<DynamoComponentDeployment>(Some("ns"), &dcd_name(&d, h)))
                .filter_map(|dcd| dcd.status?.component?.ready_replicas)
                .sum();
            if strategy != RECREATE {
                let budget = api::deployment_strategy::DeploymentStrategy::of_component(
                    &BTreeMap::new(),
                    stored(&d).spec.component("Worker").unwrap(),
                )
                .budget(2);
                assert!(
                    before >= 2 - budget.max_unavailable,
                    "{strategy:?}: {before} ready"
                );
            }
            let (plan, out) = pass(&d).await;
            assert_eq!(
                recorded(&d),
                Some(old.clone()),
                "{strategy:?}: the record never moves"
            );
            workloads(&d, &plan).await;
            for hash in [&old, &new] {
                if let Some(spec) = replicas(&d, hash) {
                    settle(&d, hash, spec);
                }
            }
            if phase(&out) == Some(RollingUpdatePhase::Completed) {
                assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_COMPLETED]);
                break;
            }
            passes += 1;
            assert!(passes < 10, "{strategy:?}: the revert did not finish");
        }
        assert!(!exists(&d, &new), "{strategy:?}");
        assert_eq!(replicas(&d, &old), Some(2), "{strategy:?}");
    }
}

#[tokio::test]
async fn a_scaling_adapter_sets_the_desired_count_while_rolling() {
    let d = Double::new();
    graph(&d);
    edit(&d, |g| {
        g.spec.components[1].scaling_adapter = Some(Default::default());
    });
    pass(&d).await;
    let old = worker_hash(&stored(&d));
    worker_dcd(&d, &old, Some(3), 3, 100);
    let g = stored(&d);
    let mut adapter = crate::scaling_adapters::render(
        &g,
        g.spec.component("Worker").unwrap(),
        &g.controller_owner_ref(&()).unwrap(),
    );
    adapter.spec.replicas = 3;
    d.insert(adapter);
    assert!(!owns_worker_replicas(&stored(&d)));

    set_image(&d, IMAGE_2);
    assert!(owns_worker_replicas(&stored(&d)), "the spec moved on");
    let (plan, _) = pass(&d).await;
    // 3 replicas by default: one surge, none unavailable.
    assert_eq!(plan.replicas["Worker"], 1);
    assert!(owns_worker_replicas(&stored(&d)));
}

#[tokio::test]
async fn a_rollout_that_cannot_schedule_says_so_after_the_deadline() {
    let d = Double::new();
    let (_, new) = deployed_then_changed(&d, 1, &[]).await;
    let (plan, _) = pass(&d).await;
    workloads(&d, &plan).await;
    let (plan, out) = pass(&d).await;
    assert_eq!(phase(&out), Some(RollingUpdatePhase::InProgress));
    assert!(plan.stuck.is_none());

    let message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.";
    let now = kit::conditions::now().0.as_second();
    pod(
        &d,
        "new-0",
        &dcd_name(&d, &new),
        "Pending",
        now - 60,
        Some(message),
    );
    let (plan, out) = pass(&d).await;
    assert!(plan.stuck.is_none());
    let requeue = out.requeue.expect("a look at the deadline");
    assert!(requeue <= Duration::from_secs(540) && requeue >= Duration::from_secs(530));

    remove::<WorkerPod>(&d, "new-0").await;
    pod(
        &d,
        "new-0",
        &dcd_name(&d, &new),
        "Pending",
        now - 700,
        Some(message),
    );
    let (plan, out) = pass(&d).await;
    let stuck = plan.stuck.expect("stuck");
    assert!(
        stuck.contains(message) && stuck.contains("Worker: pod new-0"),
        "{stuck}"
    );
    assert!(plan.rolling);
    assert_eq!(phase(&out), Some(RollingUpdatePhase::InProgress));
}

#[tokio::test]
async fn without_a_pod_watch_no_pod_is_read() {
    let d = Double::new();
    deployed_then_changed(&d, 1, &[]).await;
    d.fail_next(Verb::List, "Pod", kit::Error::Forbidden("no".into()));
    let g = stored(&d);
    let mut out = Outcome::new(g.status.clone().unwrap_or_default());
    run(&d, &Rollout::new(d.reader(), d.writer()), &g, &mut out)
        .await
        .expect("no pod read");
    let mut out = Outcome::new(g.status.clone().unwrap_or_default());
    let err = run(
        &d,
        &Rollout::with_config(d.reader(), d.writer(), config()),
        &g,
        &mut out,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Read { kind: "Pods", .. }), "{err}");
}

#[tokio::test]
async fn multinode_graphs_record_the_hash_and_warn_after_the_write() {
    let d = Double::new();
    let mut g = dgd("g", vec![component("Worker", ComponentType::Worker)]);
    g.spec.components[0].multinode = Some(api::common::MultinodeSpec { node_count: 2 });
    d.insert(g);
    let (_, out) = pass(&d).await;
    assert!(out.events.is_empty(), "first generation: no warning");
    set_image(&d, "other");
    // A failed write queues no warning.
    d.fail_next(
        Verb::Patch,
        "DynamoGraphDeployment",
        kit::Error::Conflict("x".into()),
    );
    let g = stored(&d);
    let mut out = Outcome::new(g.status.clone().unwrap_or_default());
    let err = run(&d, &Rollout::new(d.reader(), d.writer()), &g, &mut out)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Record(_)));
    assert!(out.events.is_empty());
    let (plan, out) = pass(&d).await;
    assert!(!plan.rolling);
    assert_eq!(reasons(&out.events), [EVENT_ROLLING_UPDATE_NOT_SUPPORTED]);
    assert_eq!(out.events[0].type_, kit::EventType::Warning);
    assert_eq!(recorded(&d), Some(worker_hash(&stored(&d))));
    assert!(!owns_worker_replicas(&stored(&d)));
}

#[tokio::test]
async fn a_list_failure_is_the_steps_error() {
    let d = Double::new();
    let g = graph(&d);
    d.fail_next(
        Verb::List,
        "DynamoComponentDeployment",
        kit::Error::Forbidden("no".into()),
    );
    let mut out = Outcome::new(DynamoGraphDeploymentStatus::default());
    let err = run(&d, &Rollout::new(d.reader(), d.writer()), &g, &mut out)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::List(_)));
    assert!(d.writes().is_empty());
}

/// Upstream's "recreate preserved from v1alpha1 component annotations": a v1alpha1 service's
/// `annotations` become its pod template's, where the strategy is read.
#[test]
fn a_v1alpha1_strategy_annotation_selects_recreate() {
    let alpha: api::v1alpha1::DynamoGraphDeployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"services": {"worker": {
            "componentType": "worker",
            "replicas": 3,
            "annotations": {"nvidia.com/deployment-strategy": "Recreate"}
        }}}
    }))
    .unwrap();
    let beta = api::conversion::to_v1beta1(&alpha);
    let worker = beta.spec.component("worker").unwrap();
    assert_eq!(
        api::deployment_strategy::DeploymentStrategy::of_component(&beta.spec.annotations, worker),
        api::deployment_strategy::DeploymentStrategy::Recreate
    );
}

#[test]
fn the_hash_covers_worker_pods_only() {
    let mut g = dgd(
        "g",
        vec![
            component("Frontend", ComponentType::Frontend),
            component("Worker", ComponentType::Worker),
        ],
    );
    let base = worker_hash(&g);
    assert_eq!(base.len(), 8);
    assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
    // Replicas, scaling adapter and the frontend do not count.
    g.spec.components[1].replicas = Some(5);
    g.spec.components[1].scaling_adapter = Some(Default::default());
    g.spec.components[0].replicas = Some(3);
    g.spec.components[0].pod_template = None;
    assert_eq!(worker_hash(&g), base);
    // The worker pod template, graph env and backend do.
    let mut image = g.clone();
    image.spec.components[1]
        .pod_template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("x".into());
    assert_ne!(worker_hash(&image), base);
    let mut env = g.clone();
    env.spec.env = vec![k8s_openapi::api::core::v1::EnvVar {
        name: "A".into(),
        value: Some("1".into()),
        ..Default::default()
    }];
    assert_ne!(worker_hash(&env), base);
    let mut backend = g.clone();
    backend.spec.backend_framework = Some(api::BackendFramework::Vllm);
    assert_ne!(worker_hash(&backend), base);
}
