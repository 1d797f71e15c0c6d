//! Worker rollouts on a cluster without spare GPUs, against the real control plane: the graph's
//! workers run on a simulated node of their own whose GPUs they use up exactly (tainted and
//! selected, so no other test's pods land on it and these land nowhere else).
//!
//! - `maxSurge: 0`, `maxUnavailable: 1`: the old generation steps down first, the image change
//!   completes, and no component ever asks for more replicas than it has GPUs for.
//! - `Recreate`: the old generation goes (pods included) before the new one starts; completes.
//! - surge-first (`maxSurge: 100%`, `maxUnavailable: 0`): the new pods cannot be scheduled; the
//!   graph reports `rolling_update_stuck` with the scheduler's message within the progress
//!   deadline while the old generation keeps serving, and a revert rolls back to it.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::common::RollingUpdatePhase;
use api::labels;
use api::{DynamoComponentDeployment, DynamoGraphDeployment};
use component_program::ComponentConfig;
use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use reconcilers::rollout;
use support::*;
use testkit::ControlPlane;

/// Replicas of the decode and prefill workers; the node has exactly this many GPUs (one each).
const DECODE: i32 = 2;
const PREFILL: i32 = 1;
const GPUS: i32 = DECODE + PREFILL;
const NEW_IMAGE: &str = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0";
/// The label and taint key of a test's dedicated node.
const NODE_KEY: &str = "dynamo.test/rollout";

async fn control_plane() -> &'static ControlPlane {
    let cp = ControlPlane::shared().await;
    assert!(
        cp.simulates_nodes(),
        "these tests need simulated nodes (kube-controller-manager, scheduler, kwok)"
    );
    install_operator(cp).await;
    cp
}

/// A simulated node with exactly [`GPUS`] GPUs, labelled and tainted for namespace `ns` only.
/// Deleted when dropped.
struct DedicatedNode {
    name: String,
    api: Api<Node>,
}

impl DedicatedNode {
    async fn register(cp: &ControlPlane, ns: &str) -> DedicatedNode {
        let api: Api<Node> = Api::all(cp.client());
        let name = format!("kwok-rollout-{ns}");
        let resources = serde_json::json!({
            "cpu": "64", "memory": "256Gi", "pods": "110",
            "nvidia.com/gpu": GPUS.to_string(), "ephemeral-storage": "1Ti",
        });
        let node: Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": { testkit::KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0" },
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": name,
                    NODE_KEY: ns,
                },
            },
            "spec": { "taints": [{ "key": NODE_KEY, "value": ns, "effect": "NoSchedule" }] },
            "status": { "allocatable": resources, "capacity": resources },
        }))
        .unwrap();
        api.create(&PostParams::default(), &node).await.unwrap();
        let status = serde_json::json!({ "status": serde_json::to_value(&node.status).unwrap() });
        api.patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .unwrap();
        eventually("the dedicated node Ready", 60, || async {
            let node = api.get(&name).await.map_err(|e| e.to_string())?;
            let ready = node
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready { Ok(()) } else { Err("not yet".into()) }
        })
        .await;
        DedicatedNode { name, api }
    }
}

impl Drop for DedicatedNode {
    fn drop(&mut self) {
        let (api, name) = (self.api.clone(), self.name.clone());
        // Best effort, off the test's runtime (which may be shutting down).
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _ = rt.block_on(api.delete(&name, &DeleteParams::default()));
        })
        .join()
        .ok();
    }
}

/// `vllm-disagg` with its workers pinned to the dedicated node of `ns`, at [`DECODE`] and
/// [`PREFILL`] replicas, with `strategy` on the workers' pod templates.
fn graph(ns: &str, strategy: &[(&str, &str)]) -> DynamoGraphDeployment {
    let mut dgd = conformance()
        .into_iter()
        .find(|(p, _)| p.ends_with("v1beta1/vllm-disagg.yaml"))
        .expect("vllm-disagg.yaml")
        .1;
    for c in &mut dgd.spec.components {
        let replicas = match c.name.as_str() {
            "VllmDecodeWorker" => DECODE,
            "VllmPrefillWorker" => PREFILL,
            _ => continue,
        };
        c.replicas = Some(replicas);
        let template = c.pod_template.as_mut().unwrap();
        let meta = template.metadata.get_or_insert_with(Default::default);
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        for (k, v) in strategy {
            annotations.insert(k.to_string(), v.to_string());
        }
        let spec = template.spec.as_mut().unwrap();
        spec.node_selector = Some(BTreeMap::from([(NODE_KEY.to_string(), ns.to_string())]));
        spec.tolerations = Some(vec![Toleration {
            key: Some(NODE_KEY.into()),
            operator: Some("Equal".into()),
            value: Some(ns.into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }]);
    }
    dgd
}

fn set_worker_images(dgd: &mut DynamoGraphDeployment, image: &str) {
    for c in &mut dgd.spec.components {
        if c.name != "Frontend" {
            c.pod_template
                .as_mut()
                .unwrap()
                .spec
                .as_mut()
                .unwrap()
                .containers[0]
                .image = Some(image.into());
        }
    }
}

/// The test operator with worker pods watched and the given progress deadline.
fn operator(cp: &ControlPlane, ns: &str, deadline: Duration) -> Operator {
    let config = ComponentConfig {
        rollout: rollout::Config {
            progress_deadline: deadline,
            pods: true,
        },
        ..Default::default()
    };
    Parts::with_config(cp, ns, config).run()
}

/// Per worker component: `spec.replicas` of each of its DCDs.
async fn worker_replicas(api: &Api<DynamoComponentDeployment>) -> BTreeMap<String, Vec<i32>> {
    let mut out: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for d in api.list(&ListParams::default()).await.unwrap().items {
        if d.labels().contains_key(labels::DYNAMO_WORKER_HASH) {
            out.entry(d.spec.component.name.clone())
                .or_default()
                .push(d.spec.component.replicas.unwrap_or(1));
        }
    }
    out
}

/// Change the worker images and wait for the rollout to complete and the graph to be Ready,
/// checking `during` at every look; returns the graph.
async fn roll(
    ns: &testkit::TestNamespace,
    mut during: impl FnMut(&BTreeMap<String, Vec<i32>>, &[Pod]),
) -> DynamoGraphDeployment {
    let api: Api<DynamoGraphDeployment> = ns.api();
    let dcds: Api<DynamoComponentDeployment> = ns.api();
    let pods: Api<Pod> = ns.api();
    edit(&api, "vllm-disagg", |dgd| set_worker_images(dgd, NEW_IMAGE)).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let dgd = api.get("vllm-disagg").await.unwrap();
        let status = dgd.status.clone().unwrap_or_default();
        let completed = status.rolling_update.as_ref().and_then(|r| r.phase)
            == Some(RollingUpdatePhase::Completed);
        let ready =
            kit::conditions::find(&status.conditions, kit::conditions::READY).is_some_and(|c| {
                c.status == "True" && c.observed_generation == dgd.metadata.generation
            });
        if completed && ready {
            return dgd;
        }
        let replicas = worker_replicas(&dcds).await;
        let listed = pods.list(&ListParams::default()).await.unwrap().items;
        during(&replicas, &listed);
        assert!(
            Instant::now() < deadline,
            "the rollout did not complete: {}",
            serde_json::to_string(&status).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// After a completed rollout: the new generation alone, at full size, recorded.
async fn assert_only_the_new_generation(ns: &testkit::TestNamespace, dgd: &DynamoGraphDeployment) {
    let hash = dgd.annotations()[labels::CURRENT_WORKER_HASH_V2].clone();
    let dcds: Api<DynamoComponentDeployment> = ns.api();
    let workers: Vec<DynamoComponentDeployment> = dcds
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|d| d.labels().contains_key(labels::DYNAMO_WORKER_HASH))
        .collect();
    assert_eq!(workers.len(), 2, "one DCD per worker component");
    for d in &workers {
        assert_eq!(d.labels()[labels::DYNAMO_WORKER_HASH], hash);
    }
    let status = dgd.status.clone().unwrap();
    assert_eq!(
        status.rolling_update.unwrap().updated_components,
        ["VllmDecodeWorker", "VllmPrefillWorker"]
    );
    assert_eq!(
        status.components["VllmDecodeWorker"].ready_replicas,
        Some(DECODE)
    );
    assert_eq!(
        status.components["VllmPrefillWorker"].ready_replicas,
        Some(PREFILL)
    );
}

fn desired(component: &str) -> i32 {
    if component == "VllmDecodeWorker" {
        DECODE
    } else {
        PREFILL
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_surge_zero_completes_on_a_full_cluster() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let _node = DedicatedNode::register(cp, ns.name()).await;
    let _operator = operator(cp, ns.name(), Duration::from_secs(600));
    let strategy = [
        (labels::DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE, "0"),
        (labels::DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE, "1"),
    ];
    create(cp, ns.name(), &graph(ns.name(), &strategy)).await;
    let api: Api<DynamoGraphDeployment> = ns.api();
    wait_ready(&api, "vllm-disagg", 180).await;

    let dgd = roll(&ns, |replicas, _| {
        for (component, counts) in replicas {
            let total: i32 = counts.iter().sum();
            assert!(
                total <= desired(component),
                "maxSurge 0: {component} asks for {counts:?}"
            );
        }
    })
    .await;
    assert_only_the_new_generation(&ns, &dgd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_completes_on_a_full_cluster() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let _node = DedicatedNode::register(cp, ns.name()).await;
    let _operator = operator(cp, ns.name(), Duration::from_secs(600));
    let strategy = [(labels::DEPLOYMENT_STRATEGY, "Recreate")];
    create(cp, ns.name(), &graph(ns.name(), &strategy)).await;
    let api: Api<DynamoGraphDeployment> = ns.api();
    let before = wait_ready(&api, "vllm-disagg", 180).await;
    let old = before.annotations()[labels::CURRENT_WORKER_HASH_V2].clone();

    let dgd = roll(&ns, |_, pods| {
        // Never an old worker pod next to a new one of the same component.
        for component in ["VllmDecodeWorker", "VllmPrefillWorker"] {
            let of = |new: bool| {
                pods.iter().any(|p| {
                    p.labels().get(labels::DYNAMO_COMPONENT).map(String::as_str) == Some(component)
                        && p.labels()
                            .get(labels::DYNAMO_WORKER_HASH)
                            .is_some_and(|h| (h != &old) == new)
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded")
                })
            };
            assert!(
                !(of(true) && of(false)),
                "{component}: old and new pods together"
            );
        }
    })
    .await;
    assert_only_the_new_generation(&ns, &dgd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surge_first_reports_it_cannot_progress_and_a_revert_rolls_back() {
    let cp = control_plane().await;
    let ns = cp.namespace().await;
    let _node = DedicatedNode::register(cp, ns.name()).await;
    let deadline = Duration::from_secs(5);
    let _operator = operator(cp, ns.name(), deadline);
    let strategy = [
        (labels::DEPLOYMENT_ROLLING_UPDATE_MAX_SURGE, "100%"),
        (labels::DEPLOYMENT_ROLLING_UPDATE_MAX_UNAVAILABLE, "0"),
    ];
    create(cp, ns.name(), &graph(ns.name(), &strategy)).await;
    let api: Api<DynamoGraphDeployment> = ns.api();
    let before = wait_ready(&api, "vllm-disagg", 180).await;
    let old = before.annotations()[labels::CURRENT_WORKER_HASH_V2].clone();

    edit(&api, "vllm-disagg", |dgd| set_worker_images(dgd, NEW_IMAGE)).await;
    let started = Instant::now();
    let (reason, message) = eventually("the rollout reported stuck", 120, || async {
        match ready(&api, "vllm-disagg").await {
            Some((status, reason, message)) if reason == rollout::REASON_ROLLING_UPDATE_STUCK => {
                assert_eq!(status, "False");
                Ok((reason, message))
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let took = started.elapsed();
    eprintln!("stuck after {took:?}: {reason}: {message}");
    assert!(
        message.starts_with("Rolling update cannot progress: ")
            && message.contains("nvidia.com/gpu"),
        "the scheduler's message: {message}"
    );
    // Within the deadline, plus the scheduler's first attempt and a reconcile.
    assert!(took < deadline + Duration::from_secs(60), "{took:?}");
    // The old generation still serves, whole.
    let dgd = api.get("vllm-disagg").await.unwrap();
    assert_eq!(dgd.annotations()[labels::CURRENT_WORKER_HASH_V2], old);
    let status = dgd.status.unwrap();
    assert_eq!(
        status.rolling_update.unwrap().phase,
        Some(RollingUpdatePhase::InProgress)
    );
    let dcds: Api<DynamoComponentDeployment> = ns.api();
    for d in dcds.list(&ListParams::default()).await.unwrap().items {
        if d.labels().get(labels::DYNAMO_WORKER_HASH) == Some(&old) {
            let ready = d
                .status
                .as_ref()
                .and_then(|s| s.component.as_ref())
                .and_then(|c| c.ready_replicas);
            assert_eq!(
                ready,
                Some(desired(&d.spec.component.name)),
                "{}",
                d.name_any()
            );
        }
    }

    // Revert: a rollout back to the serving generation, which completes.
    let original = before.spec.components[1]
        .pod_template
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap();
    edit(&api, "vllm-disagg", |dgd| set_worker_images(dgd, &original)).await;
    let after = eventually("the revert completed", 180, || async {
        let dgd = api.get("vllm-disagg").await.map_err(|e| e.to_string())?;
        let status = dgd.status.clone().unwrap_or_default();
        let done = status.rolling_update.as_ref().and_then(|r| r.phase)
            == Some(RollingUpdatePhase::Completed)
            && kit::conditions::find(&status.conditions, kit::conditions::READY).is_some_and(|c| {
                c.status == "True" && c.observed_generation == dgd.metadata.generation
            });
        let workers = worker_replicas(&dcds).await;
        if done && workers.values().all(|v| v.len() == 1) {
            Ok(dgd)
        } else {
            Err(format!(
                "{workers:?} {}",
                serde_json::to_string(&status).unwrap()
            ))
        }
    })
    .await;
    assert_eq!(after.annotations()[labels::CURRENT_WORKER_HASH_V2], old);
}
