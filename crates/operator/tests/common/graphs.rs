//! Conformance graphs on the test control plane, given what a real cluster provides for them:
//! the InferencePool, LeaderWorkerSet and Grove CRDs, DRA device classes with devices published
//! for every simulated node (the test plays the DRA drivers' part), the `nvidia` RuntimeClass,
//! the snapshot agent's DaemonSet in every namespace (checkpoint restores find their storage from
//! it), and a bound volume for every PersistentVolumeClaim a manifest mounts. Manifests written
//! as templates get their placeholders filled, as their users would. Each graph is pinned to its
//! pathway with `nvidia.com/enable-grove`, since the LeaderWorkerSet and Grove CRDs are both
//! installed; the test plays the LeaderWorkerSet controller and Grove ([`wait_ready`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use api::DynamoGraphDeployment;
use api::grove::PodCliqueSet;
use api::labels;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DynamicObject, Patch, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testkit::ControlPlane;

use super::{deploy, install};

/// Placeholders of template manifests and what a user fills in.
pub const TEMPLATE_VALUES: &[(&str, &str)] = &[
    (
        "DYNAMO_VLLM_IMAGE",
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.0.0-test",
    ),
    ("DYNAMO_RDMA_RESOURCE", "rdma/ib"),
    ("DYNAMO_UCX_NET_DEVICES", "mlx5_0:1"),
];

/// DRA drivers the examples' claims ask for, each with a DeviceClass of the same name.
pub const DRA_DRIVERS: &[&str] = &["gpu.nvidia.com", "gpu.intel.com"];

/// Devices each driver publishes per simulated node.
pub const DEVICES_PER_NODE: usize = 16;

/// The RuntimeClass GPU pods of the examples name.
pub const RUNTIME_CLASS: &str = "nvidia";

/// Which pathway an example graph is pinned to (`nvidia.com/enable-grove`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pathway {
    /// DynamoComponentDeployments: Deployments, LeaderWorkerSets for multinode components.
    Component,
    /// One Grove PodCliqueSet.
    Grove,
}

/// One example graph in a namespace of its own.
pub struct Run {
    pub file: String,
    pub pathway: Pathway,
    pub graph: DynamoGraphDeployment,
    pub ns: testkit::TestNamespace,
}

/// Installs what every conformance graph needs on `cp` (see the module docs).
pub async fn prepare(cp: &ControlPlane) {
    assert!(cp.simulates_nodes(), "this test needs simulated nodes");
    cp.install_crds(&api::crds()).await.unwrap();
    for folder in ["gaie-crds", "lws-crds", "grove-crds"] {
        cp.install_crd_files(&testkit::testdata::yaml_files(folder))
            .await
            .unwrap();
    }
    install(&cp.client(), &deploy("rbac/planner-epp-clusterroles.yaml")).await;
    cluster_fixtures(&cp.client()).await;
}

/// The graph of `file` (and what its manifest defines beside it) created on `pathway` in a
/// namespace of its own.
pub async fn start(cp: &ControlPlane, file: &PathBuf, pathway: Pathway) -> Run {
    let ns = cp.namespace().await;
    let mut objects = documents(file, pathway);
    objects.push(snapshot_agent());
    volumes(&cp.client(), ns.name(), &objects).await;
    let objects: Vec<DynamicObject> = objects.into_iter().map(|o| o.within(ns.name())).collect();
    install(&cp.client(), &objects).await;
    // As the server serves it (v1beta1), whatever version the manifest is written in.
    let graphs: Api<DynamoGraphDeployment> = ns.api();
    let graph = graphs.get(&graph(&objects).name_any()).await.unwrap();
    Run {
        file: file_name(file),
        pathway,
        graph,
        ns,
    }
}

/// Plays the LeaderWorkerSet controller and Grove for `runs` until every graph is Ready or
/// `within` passed; what is not Ready then, with its conditions.
pub async fn wait_ready(cp: &ControlPlane, runs: &[Run], within: Duration) -> Vec<String> {
    let lws_controller = cp.client_as("lws-controller", &["system:masters"]);
    let grove = cp.client_as("grove-operator", &["system:masters"]);
    let deadline = Instant::now() + within;
    loop {
        let mut waiting = Vec::new();
        for run in runs {
            match run.pathway {
                Pathway::Component => play_leader_worker_sets(&lws_controller, run.ns.name()).await,
                Pathway::Grove => {
                    let sets: Api<PodCliqueSet> = run.ns.api();
                    for pcs in sets.list(&Default::default()).await.unwrap() {
                        grove_program::simulate::play_grove(
                            &grove,
                            run.ns.name(),
                            &run.graph,
                            &pcs,
                        )
                        .await
                        .unwrap();
                    }
                }
            }
            let dgds: Api<DynamoGraphDeployment> = run.ns.api();
            let conditions = dgds
                .get_opt(&run.graph.name_any())
                .await
                .unwrap()
                .and_then(|d| d.status)
                .map(|s| s.conditions)
                .unwrap_or_default();
            if !kit::conditions::is_true(&conditions, kit::conditions::READY) {
                let said: Vec<String> = conditions
                    .iter()
                    .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                    .collect();
                waiting.push(format!(
                    "{} ({:?}): {}",
                    run.file,
                    run.pathway,
                    said.join("; ")
                ));
            }
        }
        if waiting.is_empty() || Instant::now() > deadline {
            return waiting;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Plays the LeaderWorkerSet controller in `namespace`: every LeaderWorkerSet has all its groups
/// ready and is Available.
pub async fn play_leader_worker_sets(client: &Client, namespace: &str) {
    let gvk = kube::api::GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &kube::discovery::ApiResource::from_gvk(&gvk),
    );
    for lws in api.list(&Default::default()).await.unwrap() {
        let replicas = lws.data["spec"]["replicas"].as_i64().unwrap_or(1);
        if lws.data["status"]["readyReplicas"].as_i64() == Some(replicas) {
            continue;
        }
        let status = json!({"status": {
            "replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas,
            "conditions": [{"type": "Available", "status": "True", "reason": "AllGroupsReady",
                            "message": "All replicas are ready",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }});
        api.patch_status(&lws.name_any(), &Default::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
}

pub fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// The documents of a manifest, placeholders filled; the graph pinned to `pathway`.
pub fn documents(path: &PathBuf, pathway: Pathway) -> Vec<DynamicObject> {
    let mut text = std::fs::read_to_string(path).unwrap();
    for (name, value) in TEMPLATE_VALUES {
        text = text.replace(&format!("${{{name}}}"), value);
    }
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let mut value: Value = serde::Deserialize::deserialize(doc).unwrap();
            if value["kind"] == "DynamoGraphDeployment" {
                let grove = pathway == Pathway::Grove;
                value["metadata"]["annotations"][labels::ENABLE_GROVE] = json!(grove.to_string());
            }
            serde_json::from_value(value).unwrap()
        })
        .collect()
}

pub fn graph(objects: &[DynamicObject]) -> DynamoGraphDeployment {
    let object = objects
        .iter()
        .find(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind == "DynamoGraphDeployment")
        })
        .expect("a DynamoGraphDeployment");
    serde_json::from_value(serde_json::to_value(object).unwrap()).unwrap()
}

/// The snapshot agent's DaemonSet, as its installation leaves it in a namespace: checkpoint
/// restores find their storage from its `checkpoints` volume (nothing runs its pods here).
pub fn snapshot_agent() -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "snapshot-agent", "labels": {"app.kubernetes.io/component": "snapshot-agent"}},
        "spec": {
            "selector": {"matchLabels": {"app": "snapshot-agent"}},
            "template": {
                "metadata": {"labels": {"app": "snapshot-agent"}},
                "spec": {
                    "containers": [{"name": "agent", "image": "snapshot-agent:test",
                        "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}]}],
                    "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "snapshot-checkpoints"}}],
                },
            },
        },
    }))
    .unwrap()
}

/// What the cluster provides for every example: DRA device classes and devices on every
/// simulated node, the GPU RuntimeClass. Applied, not created: another test binary of the same
/// control plane may have made a DeviceClass of the same name.
pub async fn cluster_fixtures(client: &Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes: Vec<String> = nodes
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|n| n.annotations().contains_key(testkit::KWOK_NODE_ANNOTATION))
        .map(|n| n.name_any())
        .collect();
    let mut fixtures = vec![json!({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS}, "handler": RUNTIME_CLASS,
    })];
    for driver in DRA_DRIVERS {
        fixtures.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{driver}'")}}]},
        }));
        for node in &nodes {
            let devices: Vec<Value> = (0..DEVICES_PER_NODE)
                .map(|i| json!({"name": format!("gpu-{i}")}))
                .collect();
            fixtures.push(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{node}-{}", driver.replace('.', "-"))},
                "spec": {
                    "driver": driver, "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }));
        }
    }
    let fixtures: Vec<DynamicObject> = fixtures
        .into_iter()
        .map(|f| serde_json::from_value(f).unwrap())
        .collect();
    install(client, &fixtures).await;
}

/// A PersistentVolume bound to every claim the manifest mounts, and the claim where the manifest
/// does not define it, as a storage provisioner would provide them.
pub async fn volumes(client: &Client, ns: &str, objects: &[DynamicObject]) {
    let defined: Vec<PersistentVolumeClaim> = objects
        .iter()
        .filter(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind == "PersistentVolumeClaim")
        })
        .map(|o| serde_json::from_value(serde_json::to_value(o).unwrap()).unwrap())
        .collect();
    let mut claims = BTreeSet::new();
    claim_names(&serde_json::to_value(objects).unwrap(), &mut claims);
    claims.extend(defined.iter().map(|c| c.name_any()));
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for claim in claims {
        let class = defined
            .iter()
            .find(|c| c.name_any() == claim)
            .and_then(|c| c.spec.as_ref()?.storage_class_name.clone())
            .unwrap_or_default();
        let pv_name = format!("{ns}-{claim}");
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "10Ti"},
                "accessModes": ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"],
                "storageClassName": class,
                "hostPath": {"path": format!("/volumes/{pv_name}")},
                "claimRef": {"namespace": ns, "name": claim},
            },
        }))
        .unwrap();
        pvs.create(&PostParams::default(), &pv).await.unwrap();
        if defined.iter().all(|c| c.name_any() != claim) {
            let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": claim},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": class,
                    "volumeName": pv_name,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }))
            .unwrap();
            pvcs.create(&PostParams::default(), &pvc).await.unwrap();
        }
    }
}

/// Every `persistentVolumeClaim.claimName` in `value`.
pub fn claim_names(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map
                .get("persistentVolumeClaim")
                .and_then(|c| c["claimName"].as_str())
            {
                out.insert(name.to_string());
            }
            map.values().for_each(|v| claim_names(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| claim_names(v, out)),
        _ => {}
    }
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
