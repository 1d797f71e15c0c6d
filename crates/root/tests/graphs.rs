//! The DGD root and the component program against the real control plane, with the DCD
//! controller running next to them and simulated nodes making Pods Ready.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::common::RollingUpdatePhase;
use api::labels;
use api::{DynamoComponentDeployment, DynamoGraphDeployment, DynamoGraphDeploymentScalingAdapter};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::*;
use testkit::ControlPlane;

/// A status observed by the watch: Ready reason and rolling update phase.
type Seen = (String, Option<RollingUpdatePhase>);

async fn control_plane() -> &'static ControlPlane {
    let cp = ControlPlane::shared().await;
    assert!(
        cp.simulates_nodes(),
        "these tests need simulated nodes (kube-controller-manager, scheduler, kwok)"
    );
    install_operator(cp).await;
    cp
}

fn worker_image(dgd: &DynamoGraphDeployment, component: &str) -> Option<String> {
    dgd.spec
        .component(component)?
        .pod_template
        .as_ref()?
        .spec
        .as_ref()?
        .containers[0]
        .image
        .clone()
}

fn set_worker(
    dgd: &mut DynamoGraphDeployment,
    change: impl Fn(&mut api::DynamoComponentDeploymentSharedSpec),
) {
    let worker = dgd
        .spec
        .components
        .iter_mut()
        .find(|c| c.name == "VllmDecodeWorker")
        .expect("worker component");
    change(worker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_conformance_manifest_reaches_ready_or_says_why_not() {
    let cp = control_plane().await;
    let mut runs = Vec::new();
    for (path, dgd) in conformance() {
        let ns = cp.namespace().await;
        let operator = Operator::start(cp, ns.name());
        create(cp, ns.name(), &dgd).await;
        runs.push((path, dgd, ns, operator));
    }
    for (path, dgd, ns, _operator) in &runs {
        let api: Api<DynamoGraphDeployment> = ns.api();
        let name = dgd.name_any();
        let what = path.display().to_string();
        if dgd.spec.has_multinode_component() {
            // No LeaderWorkerSet API here: a clear reason, no DCD.
            let (status, reason, message) = eventually(&what, 120, || async {
                match ready(&api, &name).await {
                    Some(r) if r.1 == component_program::REASON_NO_MULTINODE_ORCHESTRATOR => Ok(r),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
            assert_eq!(status, "False", "{what}");
            assert!(
                message.contains("LeaderWorkerSet"),
                "{what}: {message} ({reason})"
            );
            let dcds: Api<DynamoComponentDeployment> = ns.api();
            assert!(
                dcds.list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty(),
                "{what}"
            );
        } else {
            let ready = wait_ready(&api, &name, 180).await;
            let status = ready.status.clone().unwrap();
            assert_eq!(status.state, api::DgdState::Successful, "{what}");
            assert_eq!(status.components.len(), dgd.spec.components.len(), "{what}");
            for c in &dgd.spec.components {
                let s = &status.components[&c.name];
                assert_eq!(
                    s.ready_replicas,
                    Some(c.replicas.unwrap_or(1)),
                    "{what}: {} ready replicas",
                    c.name
                );
            }
            assert_eq!(
                ready.annotations()[labels::WORKLOAD_PROVIDER],
                labels::PROVIDER_COMPONENT
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_a_component_converges() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let _operator = Operator::start(cp, ns.name());
    create(cp, ns.name(), &vllm_agg()).await;
    let api: Api<DynamoGraphDeployment> = ns.api();
    wait_ready(&api, "vllm-agg", 180).await;

    edit(&api, "vllm-agg", |dgd| {
        set_worker(dgd, |w| w.replicas = Some(3))
    })
    .await;
    let dgd = eventually("3 ready workers", 180, || async {
        let dgd = wait_ready(&api, "vllm-agg", 180).await;
        let ready = dgd.status.as_ref().unwrap().components["VllmDecodeWorker"].ready_replicas;
        if ready == Some(3) {
            Ok(dgd)
        } else {
            Err(format!("{ready:?}"))
        }
    })
    .await;
    // Replicas are not a worker generation: scaled in place, no rolling update.
    assert!(dgd.status.unwrap().rolling_update.is_none());
    let deployments: Api<Deployment> = ns.api();
    let list = deployments
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let worker = list
        .iter()
        .find(|d| d.name_any().starts_with("vllm-agg-vllmdecodeworker-"))
        .expect("worker Deployment");
    assert_eq!(worker.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(list.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_change_is_a_reported_rolling_update_then_ready() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let _operator = Operator::start(cp, ns.name());
    create(cp, ns.name(), &vllm_agg()).await;
    let api: Api<DynamoGraphDeployment> = ns.api();
    let before = wait_ready(&api, "vllm-agg", 180).await;
    let old_hash = before.annotations()[labels::CURRENT_WORKER_HASH_V2].clone();

    // Record every status the graph goes through.
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let recorder = {
        let seen = seen.clone();
        let stream = watcher(
            api.clone(),
            watcher::Config::default().fields("metadata.name=vllm-agg"),
        )
        .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(dgd)) = stream.next().await {
                let status = dgd.status.unwrap_or_default();
                let reason = kit::conditions::find(&status.conditions, kit::conditions::READY)
                    .map(|c| c.reason.clone())
                    .unwrap_or_default();
                let phase = status.rolling_update.and_then(|r| r.phase);
                seen.lock().unwrap().push((reason, phase));
            }
        })
    };

    edit(&api, "vllm-agg", |dgd| {
        set_worker(dgd, |w| {
            w.pod_template
                .as_mut()
                .unwrap()
                .spec
                .as_mut()
                .unwrap()
                .containers[0]
                .image = Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0".into());
        })
    })
    .await;
    let after = eventually("rolling update completed and Ready", 240, || async {
        let dgd = api.get("vllm-agg").await.map_err(|e| e.to_string())?;
        let status = dgd.status.clone().unwrap_or_default();
        let completed = status.rolling_update.as_ref().and_then(|r| r.phase)
            == Some(RollingUpdatePhase::Completed);
        let ready =
            kit::conditions::find(&status.conditions, kit::conditions::READY).is_some_and(|c| {
                c.status == "True" && c.observed_generation == dgd.metadata.generation
            });
        if completed && ready {
            Ok(dgd)
        } else {
            Err(serde_json::to_string(&status).unwrap())
        }
    })
    .await;
    recorder.abort();

    let status = after.status.clone().unwrap();
    let rolling = status.rolling_update.unwrap();
    assert!(rolling.start_time.is_some() && rolling.end_time.is_some());
    assert_eq!(rolling.updated_components, ["VllmDecodeWorker"]);
    let new_hash = after.annotations()[labels::CURRENT_WORKER_HASH_V2].clone();
    assert_ne!(new_hash, old_hash);
    assert_eq!(
        worker_image(&after, "VllmDecodeWorker").as_deref(),
        Some("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0")
    );

    // The rollout was reported while it ran.
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|(reason, _)| reason == "rolling_update_in_progress"),
        "statuses seen: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(_, p)| *p == Some(RollingUpdatePhase::InProgress)),
        "{seen:?}"
    );

    // Only the new worker generation is left.
    let dcds: Api<DynamoComponentDeployment> = ns.api();
    let names: Vec<String> = dcds
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|d| d.name_any())
        .collect();
    assert!(
        names.contains(&format!("vllm-agg-vllmdecodeworker-{new_hash}")),
        "{names:?}"
    );
    assert_eq!(names.len(), 2, "{names:?}");

    let events: Api<Event> = ns.api();
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in ["RollingUpdateStarted", "RollingUpdateCompleted"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "{reason} not in {reasons:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_graph_garbage_collects_every_child() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let _operator = Operator::start(cp, ns.name());
    let mut dgd = vllm_agg();
    set_worker(&mut dgd, |w| w.scaling_adapter = Some(Default::default()));
    create(cp, ns.name(), &dgd).await;
    let api: Api<DynamoGraphDeployment> = ns.api();
    wait_ready(&api, "vllm-agg", 180).await;
    let adapters: Api<DynamoGraphDeploymentScalingAdapter> = ns.api();
    assert_eq!(
        adapters
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let pods: Api<Pod> = ns.api();
    assert!(
        !pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    api.delete("vllm-agg", &DeleteParams::background())
        .await
        .unwrap();
    eventually("every child gone", 180, || async {
        let lp = ListParams::default();
        let counts = BTreeMap::from([
            ("dgd", api.list(&lp).await.unwrap().items.len()),
            (
                "dcd",
                Api::<DynamoComponentDeployment>::namespaced(ns.client(), ns.name())
                    .list(&lp)
                    .await
                    .unwrap()
                    .items
                    .len(),
            ),
            ("dgdsa", adapters.list(&lp).await.unwrap().items.len()),
            (
                "deployment",
                Api::<Deployment>::namespaced(ns.client(), ns.name())
                    .list(&lp)
                    .await
                    .unwrap()
                    .items
                    .len(),
            ),
            (
                "service",
                Api::<Service>::namespaced(ns.client(), ns.name())
                    .list(&lp)
                    .await
                    .unwrap()
                    .items
                    .len(),
            ),
            ("pod", pods.list(&lp).await.unwrap().items.len()),
        ]);
        if counts.values().all(|n| *n == 0) {
            Ok(())
        } else {
            Err(format!("{counts:?}"))
        }
    })
    .await;
}

/// `verb resource[/subresource]` counts of requests by the operator in `ns`.
fn summarize(events: &[testkit::AuditEvent], ns: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e.user == USER && e.namespace == ns && e.verb != "watch")
    {
        let resource = if e.subresource.is_empty() {
            e.resource.clone()
        } else {
            format!("{}/{}", e.resource, e.subresource)
        };
        *counts.entry(format!("{} {resource}", e.verb)).or_insert(0) += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_reconcile_and_an_idle_reconcile_by_the_audit_log() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let api: Api<DynamoGraphDeployment> = ns.api();
    create(cp, ns.name(), &vllm_agg()).await;

    // The first reconcile, driven by hand on the warmed cache.
    let parts = Parts::new(cp, ns.name());
    let watches = tokio::spawn(parts.cache.run());
    parts.cache.wait_until_ready().await;
    let store = parts.cache.store::<DynamoGraphDeployment>().unwrap();
    let observed = eventually("the cache sees the graph", 30, || async {
        store
            .state()
            .into_iter()
            .find(|d| d.name_any() == "vllm-agg")
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    let mark = cp.audit().mark();
    let result = parts.root.reconcile(observed.clone()).await;
    kit::run::finish(
        observed.as_ref(),
        result,
        parts.status.as_ref(),
        &parts.recorder,
    )
    .await
    .expect("first reconcile");
    let first = summarize(&cp.audit().since(&mark).await, ns.name());
    let dcds: Api<DynamoComponentDeployment> = ns.api();
    let lp = ListParams::default();
    let mut created: Vec<String> = dcds
        .list(&lp)
        .await
        .unwrap()
        .items
        .iter()
        .map(|d| format!("DynamoComponentDeployment/{}", d.name_any()))
        .collect();
    let dcd_count = created.len();
    let sas: Api<ServiceAccount> = ns.api();
    let roles: Api<Role> = ns.api();
    let bindings: Api<RoleBinding> = ns.api();
    created.extend(
        sas.list(&lp)
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| o.name_any())
            .filter(|n| n != "default")
            .map(|n| format!("ServiceAccount/{n}")),
    );
    created.extend(
        roles
            .list(&lp)
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| format!("Role/{}", o.name_any())),
    );
    created.extend(
        bindings
            .list(&lp)
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| format!("RoleBinding/{}", o.name_any())),
    );
    eprintln!("first reconcile of vllm-agg: requests {first:#?}; objects created {created:#?}");
    // The provider and the first worker generation, recorded in one patch.
    assert_eq!(
        first.get("patch dynamographdeployments"),
        Some(&1),
        "{first:?}"
    );
    // Every child of the reconcile in one Event (the graph starting is not announced).
    assert_eq!(first.get("create events"), Some(&1), "{first:?}");
    assert_eq!(
        first.get("patch dynamocomponentdeployments"),
        Some(&2),
        "{first:?}"
    );
    assert_eq!(
        first.get("patch dynamographdeployments/status"),
        Some(&1),
        "{first:?}"
    );
    assert!(
        first
            .keys()
            .all(|k| !k.starts_with("get ") && !k.starts_with("list ")),
        "{first:?}"
    );
    assert_eq!(dcd_count, 2);
    watches.abort();

    // Converge with the controllers running.
    let operator = Operator::start(cp, ns.name());
    wait_ready(&api, "vllm-agg", 180).await;
    operator.settle(Duration::from_secs(2)).await;

    // An idle reconcile: a metadata change the program does not care about.
    let mark = cp.audit().mark();
    let before = operator.dgd_reconciles.load(Ordering::SeqCst);
    api.patch(
        "vllm-agg",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})),
    )
    .await
    .unwrap();
    eventually("a reconcile after the touch", 30, || async {
        let now = operator.dgd_reconciles.load(Ordering::SeqCst);
        if now > before {
            Ok(())
        } else {
            Err(format!("{now}"))
        }
    })
    .await;
    operator.settle(Duration::from_secs(2)).await;
    let idle = summarize(&cp.audit().since(&mark).await, ns.name());
    eprintln!("idle reconcile of vllm-agg: requests {idle:#?}");
    assert!(idle.is_empty(), "an idle reconcile sent requests: {idle:?}");
}
