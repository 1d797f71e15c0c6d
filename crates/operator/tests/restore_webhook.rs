//! The operator binary restores `Immediate` checkpoint components' pods at creation (the
//! checkpoint restore webhook), with nothing but the RBAC in `deploy/`: a worker pod created
//! while its checkpoint is not Ready starts cold; once the operator's capture Job completed on
//! a simulated node and the checkpoint is Ready, the pod that replaces it is created
//! restore-shaped from the snapshot agent's storage, while the Deployment's pod template (and
//! generation) stays as it was.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use api::snapshot::{
    CHECKPOINT_ID_LABEL, CHECKPOINT_VOLUME, CONTROL_DIR_ENV, RESTORE_TARGET_LABEL,
    TARGET_CONTAINERS_ANNOTATION,
};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use operator::restore_webhook::CONFIGURATION;
use serde_json::json;

use common::{Operator, Spawn, eventually, manifest};

const WORKER: &str = "nvidia.com/dynamo-component=VllmDecodeWorker";
/// The node label the capture pod waits for (so the first worker pod is created before the
/// checkpoint is Ready).
const CAPTURE_NODE_LABEL: &str = "dynamo-test/restore-webhook-capture";

fn is_restore_target(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(RESTORE_TARGET_LABEL))
}

#[tokio::test]
async fn immediate_pods_created_while_the_checkpoint_is_ready_are_restored() {
    let cp = testkit::ControlPlane::shared().await;
    cp.install_crds(&api::crds()).await.unwrap();
    let admin = cp.client();
    let kubeconfig =
        common::deployed_rbac_kubeconfig(cp, "restore-webhook-operator.kubeconfig").await;
    let operator = Operator::spawn(
        cp,
        Spawn {
            kubeconfig: Some(kubeconfig),
            webhook: true,
            restore_webhook: true,
            extra_args: vec!["--discover-image-pull-secrets=false".into()],
            ..Spawn::default()
        },
    );
    let log = |operator: &Operator| {
        let text = operator.log_text();
        let tail: Vec<_> = text.lines().rev().take(60).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    };
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let url = format!("{}{}", operator.webhook, operator::restore_webhook::PATH);
    eventually(
        "the operator's MutatingWebhookConfiguration",
        Duration::from_secs(60),
        || async {
            configurations
                .get_opt(CONFIGURATION)
                .await
                .unwrap()
                .and_then(|c| c.webhooks)
                .is_some_and(|w| w[0].client_config.url.as_deref() == Some(url.as_str()))
        },
    )
    .await;

    let ns = cp.namespace().await;
    // The snapshot agent: its `agent` container mounts the checkpoint claim as `checkpoints`.
    let agent: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "snapshot-agent",
            "labels": {"app.kubernetes.io/component": "snapshot-agent"},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "snapshot-agent"}},
            "template": {
                "metadata": {"labels": {"app": "snapshot-agent"}},
                "spec": {
                    "containers": [{
                        "name": "agent",
                        "image": "registry.example.com/snapshot-agent:1",
                        "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
                    }],
                    "volumes": [{
                        "name": "checkpoints",
                        "persistentVolumeClaim": {"claimName": "snapshot-pvc"},
                    }],
                },
            },
        },
    }))
    .unwrap();
    ns.api::<DaemonSet>()
        .create(&PostParams::default(), &agent)
        .await
        .unwrap();

    // The checkpoint, whose capture pod is held until a node carries the label.
    let mut checkpoint = manifest("checkpoint/qwen3-vllm.yaml");
    let checkpoint_name = checkpoint.metadata.name.clone().unwrap();
    checkpoint.data["spec"]["capture"]["podTemplateSpec"]["spec"]["nodeSelector"] =
        json!({ CAPTURE_NODE_LABEL: ns.name() });
    let ar = ApiResource::erase::<api::DynamoCheckpoint>(&());
    Api::<DynamicObject>::namespaced_with(admin.clone(), ns.name(), &ar)
        .patch(
            &checkpoint_name,
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(&checkpoint),
        )
        .await
        .unwrap();

    // The graph: the worker restores from that checkpoint, Immediate.
    let mut graph = manifest("v1beta1/vllm-agg.yaml");
    for component in graph.data["spec"]["components"].as_array_mut().unwrap() {
        if component["name"] == "VllmDecodeWorker" {
            component["experimental"] = json!({"checkpoint": {
                "enabled": true,
                "checkpointRef": checkpoint_name,
                "startupPolicy": "Immediate",
            }});
        }
    }
    common::apply(admin.clone(), ns.name(), &graph).await;

    let pods: Api<Pod> = ns.api();
    let worker_pods = || async {
        pods.list(&ListParams::default().labels(WORKER))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect::<Vec<_>>()
    };
    eventually("a worker pod", Duration::from_secs(120), || async {
        !worker_pods().await.is_empty()
    })
    .await;
    let cold = worker_pods().await.remove(0);
    let annotations = cold.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("nvidia.com/dynamo-checkpoint-restore-candidate")
            .map(String::as_str),
        Some("true"),
        "the worker pod is a restore candidate: {annotations:#?}"
    );
    assert!(
        !is_restore_target(&cold),
        "created before the checkpoint is Ready: cold"
    );

    let deployments: Api<Deployment> = ns.api();
    let worker_deployment = || async {
        deployments
            .list(&ListParams::default().labels(WORKER))
            .await
            .unwrap()
            .items
            .remove(0)
    };
    let before = worker_deployment().await;

    // Release the capture: the checkpoint becomes Ready.
    let nodes: Api<Node> = Api::all(admin.clone());
    let node = nodes.list(&ListParams::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {CAPTURE_NODE_LABEL: ns.name()}}})),
        )
        .await
        .unwrap();
    let checkpoints: Api<api::DynamoCheckpoint> = ns.api();
    let ready = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let phase = checkpoints
                .get(&checkpoint_name)
                .await
                .unwrap()
                .status
                .and_then(|s| s.phase);
            if phase == Some(api::checkpoint::DynamoCheckpointPhase::Ready) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(
        ready.is_ok(),
        "checkpoint not Ready\n--- operator log ---\n{}",
        log(&operator)
    );
    let checkpoint_id = checkpoints
        .get(&checkpoint_name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.checkpoint_id.or(s.identity_hash))
        .unwrap();

    // A new pod of the component: restore-shaped at creation.
    pods.delete(
        &cold.metadata.name.clone().unwrap(),
        &DeleteParams::default().grace_period(0),
    )
    .await
    .unwrap();
    let cold_uid = cold.metadata.uid.clone();
    let replaced = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(pod) = worker_pods()
                .await
                .into_iter()
                .find(|p| p.metadata.uid != cold_uid)
            {
                return pod;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let restored = replaced.unwrap_or_else(|_| {
        panic!(
            "no new worker pod\n--- operator log ---\n{}",
            log(&operator)
        )
    });
    let labels: BTreeMap<String, String> = restored.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(RESTORE_TARGET_LABEL).map(String::as_str),
        Some("true"),
        "the new pod is restore-shaped: {labels:#?}\n--- operator log ---\n{}",
        log(&operator)
    );
    assert_eq!(labels.get(CHECKPOINT_ID_LABEL), Some(&checkpoint_id));
    let annotations = restored.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get(TARGET_CONTAINERS_ANNOTATION)
            .map(String::as_str),
        Some("main")
    );
    let spec = restored.spec.clone().unwrap();
    let storage = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == CHECKPOINT_VOLUME)
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone());
    assert_eq!(storage.as_deref(), Some("snapshot-pvc"));
    let main = spec.containers.iter().find(|c| c.name == "main").unwrap();
    assert_eq!(
        main.command.as_deref(),
        Some(&["sleep".to_string(), "infinity".to_string()][..])
    );
    assert!(main.env.iter().flatten().any(|e| e.name == CONTROL_DIR_ENV));
    assert!(
        main.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == CHECKPOINT_VOLUME && m.mount_path == "/checkpoints")
    );

    // The Deployment did not change: no roll, its template is still the cold candidate.
    let after = worker_deployment().await;
    assert_eq!(after.metadata.generation, before.metadata.generation);
    let template = after.spec.unwrap().template;
    assert_eq!(
        template,
        before.spec.unwrap().template,
        "the pod template never changes with readiness"
    );
    assert!(
        !template
            .metadata
            .and_then(|m| m.labels)
            .unwrap_or_default()
            .contains_key(RESTORE_TARGET_LABEL)
    );

    // Leave the shared control plane as it was.
    configurations
        .delete(CONFIGURATION, &DeleteParams::default())
        .await
        .unwrap();
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {CAPTURE_NODE_LABEL: null}}})),
        )
        .await
        .unwrap();
    let refused: Vec<_> = operator
        .log_text()
        .lines()
        .filter(|l| l.contains("forbidden") || l.contains("Forbidden"))
        .map(String::from)
        .collect();
    assert!(
        refused.is_empty(),
        "requests refused by RBAC:\n{}",
        refused.join("\n")
    );
}
