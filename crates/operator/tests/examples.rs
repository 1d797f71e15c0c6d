//! Every upstream example graph of the test data reaches Ready through the operator binary on the
//! test control plane, given what a real cluster provides for it: the InferencePool CRD, DRA
//! device classes with devices published for every simulated node (the test plays the DRA
//! drivers' part), the `nvidia` RuntimeClass, GPU nodes labelled as GPU feature discovery labels
//! them, the snapshot agent's DaemonSet in every namespace (checkpoint restores find their
//! storage from it), and a bound volume for every PersistentVolumeClaim a manifest mounts. Manifests written
//! as templates get their placeholders filled, as their users would.
//!
//! The graphs run on the component pathway (Deployments): Grove, which other tests of the same
//! control plane may install, has no controller here. Multinode examples need a LeaderWorkerSet or
//! Grove controller, which the test does not play: they are listed in [`MULTINODE`] and left out.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use api::DynamoGraphDeployment;
use api::labels;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testkit::ControlPlane;

use common::{Operator, Spawn, deploy, install};

/// Placeholders of template manifests and what a user fills in.
const TEMPLATE_VALUES: &[(&str, &str)] = &[
    (
        "DYNAMO_VLLM_IMAGE",
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.0.0-test",
    ),
    ("DYNAMO_RDMA_RESOURCE", "rdma/ib"),
    ("DYNAMO_UCX_NET_DEVICES", "mlx5_0:1"),
];

/// DRA drivers the examples' claims ask for, each with a DeviceClass of the same name.
const DRA_DRIVERS: &[&str] = &["gpu.nvidia.com", "gpu.intel.com"];

/// Devices each driver publishes per simulated node.
const DEVICES_PER_NODE: usize = 16;

/// The RuntimeClass GPU pods of the examples name.
const RUNTIME_CLASS: &str = "nvidia";

/// Examples with a multinode component (need a LeaderWorkerSet or Grove controller).
const MULTINODE: &[&str] = &[
    "examples__backends__sglang__deploy__v1beta1__disagg-multinode.yaml",
    "examples__backends__trtllm__deploy__v1beta1__disagg-multinode.yaml",
    "examples__backends__vllm__deploy__v1beta1__disagg-multinode.yaml",
];

const READY_WITHIN: Duration = Duration::from_secs(180);

#[tokio::test]
async fn every_upstream_example_reaches_ready() {
    let cp = ControlPlane::shared().await;
    assert!(cp.simulates_nodes(), "this test needs simulated nodes");
    cp.install_crds(&api::crds()).await.unwrap();
    cp.install_crd_files(&testkit::testdata::yaml_files("gaie-crds"))
        .await
        .unwrap();
    install(&cp.client(), &deploy("rbac/planner-epp-clusterroles.yaml")).await;
    cluster_fixtures(&cp.client()).await;
    let operator = Operator::spawn(cp, Spawn::default());

    let mut multinode = BTreeSet::new();
    let mut runs = Vec::new();
    for file in testkit::testdata::yaml_files("upstream-examples") {
        let name = file_name(&file);
        let objects = documents(&file);
        if graph(&objects).spec.has_multinode_component() {
            multinode.insert(name);
            continue;
        }
        let ns = cp.namespace().await;
        let mut objects = objects;
        objects.push(snapshot_agent());
        volumes(&cp.client(), ns.name(), &objects).await;
        let objects: Vec<DynamicObject> =
            objects.into_iter().map(|o| o.within(ns.name())).collect();
        install(&cp.client(), &objects).await;
        runs.push((name, graph(&objects).name_any(), ns));
    }
    let expected: BTreeSet<String> = MULTINODE.iter().map(|s| s.to_string()).collect();
    assert_eq!(multinode, expected, "the multinode examples left out");

    let waits = runs.iter().map(|(file, graph, ns)| async move {
        let dgds: Api<DynamoGraphDeployment> = ns.api();
        wait_ready(&dgds, graph)
            .await
            .map_err(|e| format!("{file}: {e}"))
    });
    let failed: Vec<String> = futures::future::join_all(waits)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    assert!(
        failed.is_empty(),
        "not Ready within {READY_WITHIN:?}:\n{}\n--- operator log (tail) ---\n{}",
        failed.join("\n"),
        tail(&operator.log_text(), 40)
    );
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// The documents of a manifest, placeholders filled; the graph on the component pathway.
fn documents(path: &PathBuf) -> Vec<DynamicObject> {
    let mut text = std::fs::read_to_string(path).unwrap();
    for (name, value) in TEMPLATE_VALUES {
        text = text.replace(&format!("${{{name}}}"), value);
    }
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let mut value: Value = serde::Deserialize::deserialize(doc).unwrap();
            if value["kind"] == "DynamoGraphDeployment"
                && value["metadata"]["annotations"][labels::ENABLE_GROVE].is_null()
            {
                value["metadata"]["annotations"][labels::ENABLE_GROVE] = json!("false");
            }
            serde_json::from_value(value).unwrap()
        })
        .collect()
}

fn graph(objects: &[DynamicObject]) -> DynamoGraphDeployment {
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
fn snapshot_agent() -> DynamicObject {
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
async fn cluster_fixtures(client: &Client) {
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
async fn volumes(client: &Client, ns: &str, objects: &[DynamicObject]) {
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
fn claim_names(value: &Value, out: &mut BTreeSet<String>) {
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

/// Waits until the graph is Ready; else its conditions.
async fn wait_ready(dgds: &Api<DynamoGraphDeployment>, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        let dgd = dgds.get_opt(name).await.map_err(|e| e.to_string())?;
        let conditions = dgd
            .as_ref()
            .and_then(|d| d.status.as_ref())
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if kit::conditions::is_true(&conditions, kit::conditions::READY) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let said: Vec<String> = conditions
                .iter()
                .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                .collect();
            return Err(said.join("; "));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
