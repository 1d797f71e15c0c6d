//! The restore webhook's answers, as rows. Upstream's
//! `internal/webhook/mutation/pod_checkpoint_restore_handler_test.go`
//! (`TestPodCheckpointRestoreMutatorHandle`) has four cases across its revisions: "ready
//! checkpoint restore-shapes pod create", "not ready checkpoint leaves pod unchanged",
//! "arbitrary annotated pod without operator stamp is ignored" and "update leaves pod
//! unchanged"; all four are rows here, beside this operator's own.

use std::collections::BTreeMap;

use api::snapshot::{
    ARTIFACT_VERSION_ANNOTATION, CHECKPOINT_ID_LABEL, CHECKPOINT_SOURCE_LABEL,
    RESTORE_TARGET_LABEL, TARGET_CONTAINERS_ANNOTATION,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use kit::testing::Double;
use serde_json::{Value, json};

use super::*;

const CANDIDATE: &str = labels::CHECKPOINT_RESTORE_CANDIDATE;
const NAME: &str = labels::CHECKPOINT_NAME;

fn checkpoint(namespace: &str, name: &str, phase: &str) -> DynamoCheckpoint {
    serde_json::from_value(json!({
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoCheckpoint",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {ARTIFACT_VERSION_ANNOTATION: "2"},
        },
        "spec": {"identity": {"model": "Qwen/Qwen3-0.6B", "backendFramework": "vllm"}},
        "status": {"phase": phase, "checkpointID": "checkpoint-123"},
    }))
    .unwrap()
}

/// The snapshot agent of `namespace`: its `agent` container mounts the `checkpoints` claim.
fn agent(namespace: &str) -> DaemonSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "snapshot-agent",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/component": "snapshot-agent"},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "containers": [{
                        "name": "agent",
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
    .unwrap()
}

/// Upstream's candidate pod: operator-stamped, naming `checkpoint`, restoring `main`.
fn candidate_pod(checkpoint: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "worker-0",
            "namespace": "default",
            "labels": {
                labels::DYNAMO_COMPONENT: "worker",
                labels::DYNAMO_NAMESPACE: "default-worker",
                labels::SELECTOR: "worker",
            },
            "annotations": {
                CANDIDATE: "true",
                NAME: checkpoint,
                labels::CHECKPOINT_STARTUP_POLICY: "Immediate",
                TARGET_CONTAINERS_ANNOTATION: "main",
            },
        },
        "spec": {
            "containers": [{
                "name": "main",
                "image": "worker:latest",
                "command": ["python3", "-m", "dynamo.vllm"],
            }],
        },
    }))
    .unwrap()
}

fn review_of(pod: &Pod, operation: &str, namespace: &str) -> AdmissionReview<DynamicObject> {
    serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "request-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": null,
        },
    }))
    .unwrap()
}

/// The cluster of the rows: in `default`, the agent and checkpoints `worker-checkpoint`
/// (Ready) and `pending-checkpoint` (Creating); in `bare`, a Ready checkpoint and no agent.
fn cluster() -> Double {
    let double = Double::new();
    double.insert(checkpoint("default", "worker-checkpoint", "Ready"));
    double.insert(checkpoint("default", "pending-checkpoint", "Creating"));
    double.insert(agent("default"));
    double.insert(checkpoint("bare", "worker-checkpoint", "Ready"));
    double
}

/// The restore the Ready checkpoint of `default` gives.
fn ready_restore() -> Restore {
    Restore {
        checkpoint_id: "checkpoint-123".into(),
        artifact_version: "2".into(),
        storage: pod_render::restore::Storage {
            pvc_name: "snapshot-pvc".into(),
            base_path: "/checkpoints".into(),
        },
    }
}

/// Each case's answer: unchanged (and why), or restored.
#[tokio::test]
async fn pods_are_restored_only_when_a_ready_checkpoint_and_storage_are_there() {
    let double = cluster();
    let restorer = Restorer::new(double.reader(), None);
    let edit = |f: &dyn Fn(&mut Pod)| {
        let mut pod = candidate_pod("worker-checkpoint");
        f(&mut pod);
        pod
    };
    let label = |key: &'static str, value: Option<&'static str>| {
        move |pod: &mut Pod| {
            let map = pod.metadata.labels.as_mut().unwrap();
            match value {
                Some(v) => map.insert(key.into(), v.into()),
                None => map.remove(key),
            };
        }
    };
    let annotation = |key: &'static str, value: Option<&'static str>| {
        move |pod: &mut Pod| {
            let map = pod.metadata.annotations.as_mut().unwrap();
            match value {
                Some(v) => map.insert(key.into(), v.into()),
                None => map.remove(key),
            };
        }
    };
    let ready = candidate_pod("worker-checkpoint");
    let restored = Admission::Restored(patch(&ready, &["main".to_string()], &ready_restore()));
    // (case, pod, operation, namespace, answer)
    let rows: Vec<(&str, Pod, &str, &str, Admission)> = vec![
        (
            "upstream: ready checkpoint restore-shapes pod create",
            ready.clone(),
            "CREATE",
            "default",
            restored,
        ),
        (
            "upstream: not ready checkpoint leaves pod unchanged",
            candidate_pod("pending-checkpoint"),
            "CREATE",
            "default",
            unchanged("checkpoint not ready"),
        ),
        (
            "upstream: update leaves pod unchanged",
            ready.clone(),
            "UPDATE",
            "default",
            unchanged("not a pod create"),
        ),
        (
            "upstream: arbitrary annotated pod without operator stamp is ignored",
            edit(&label(labels::DYNAMO_COMPONENT, None)),
            "CREATE",
            "default",
            unchanged("restore candidate is not operator-stamped"),
        ),
        (
            "not a candidate",
            edit(&annotation(CANDIDATE, None)),
            "CREATE",
            "default",
            unchanged("pod is not a checkpoint restore candidate"),
        ),
        (
            "candidate annotation not true",
            edit(&annotation(CANDIDATE, Some("false"))),
            "CREATE",
            "default",
            unchanged("pod is not a checkpoint restore candidate"),
        ),
        (
            "no checkpoint name",
            edit(&annotation(NAME, Some(""))),
            "CREATE",
            "default",
            unchanged("restore candidate has no checkpoint name"),
        ),
        (
            "checkpoint missing",
            candidate_pod("absent"),
            "CREATE",
            "default",
            unchanged("checkpoint not found"),
        ),
        (
            "already a restore target",
            edit(&label(CHECKPOINT_ID_LABEL, Some("x"))),
            "CREATE",
            "default",
            unchanged("pod is already checkpoint-shaped"),
        ),
        (
            "a capture pod",
            edit(&label(CHECKPOINT_SOURCE_LABEL, Some("true"))),
            "CREATE",
            "default",
            unchanged("pod is already checkpoint-shaped"),
        ),
        (
            "no dynamo namespace label",
            edit(&label(labels::DYNAMO_NAMESPACE, Some(""))),
            "CREATE",
            "default",
            unchanged("restore candidate is not operator-stamped"),
        ),
        (
            "no target containers",
            edit(&annotation(TARGET_CONTAINERS_ANNOTATION, None)),
            "CREATE",
            "default",
            Admission::Unchanged(format!(
                "target containers invalid: missing required {TARGET_CONTAINERS_ANNOTATION} annotation"
            )),
        ),
        (
            "a target the pod does not have",
            edit(&annotation(
                TARGET_CONTAINERS_ANNOTATION,
                Some("engine-0,engine-1"),
            )),
            "CREATE",
            "default",
            unchanged("restore target \"engine-0\" is not a container of the pod"),
        ),
    ];
    for (name, pod, operation, namespace, want) in rows {
        let request: AdmissionRequest<DynamicObject> =
            review_of(&pod, operation, namespace).try_into().unwrap();
        assert_eq!(restorer.admit(&request).await, want, "{name}");
    }

    // Ready without storage: no snapshot agent in the pod's namespace.
    let mut bare = candidate_pod("worker-checkpoint");
    bare.metadata.namespace = Some("bare".into());
    let request: AdmissionRequest<DynamicObject> =
        review_of(&bare, "CREATE", "bare").try_into().unwrap();
    match restorer.admit(&request).await {
        Admission::Unchanged(why) => assert!(
            why.starts_with("checkpoint restore unavailable")
                && why.contains("no snapshot-agent daemonset found in namespace bare"),
            "{why}"
        ),
        other => panic!("ready without storage: {other:?}"),
    }

    // A namespace-scoped operator leaves other namespaces' pods alone.
    let scoped = Restorer::new(double.reader(), Some("other".into()));
    let request: AdmissionRequest<DynamicObject> =
        review_of(&ready, "CREATE", "default").try_into().unwrap();
    assert_eq!(
        scoped.admit(&request).await,
        unchanged("namespace not watched")
    );
}

/// The answer to a Ready candidate: allowed, the request's uid, a JSONPatch that turns the pod
/// as it came into exactly what `pod_render::restore::restore_pod` makes of it (upstream's
/// assertions on the patch: the restore labels and artifact version are added, the target
/// containers annotation is left as it was, volumes are added, the command becomes the
/// placeholder).
#[tokio::test]
async fn the_answer_patches_the_pod_into_the_restored_pod() {
    let restorer = Restorer::new(cluster().reader(), None);
    let pod = candidate_pod("worker-checkpoint");
    let answer = restorer.review(review_of(&pod, "CREATE", "default")).await;
    let response = serde_json::to_value(answer.response.unwrap()).unwrap();
    assert_eq!(response["uid"], "request-1");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes: Vec<u8> = serde_json::from_value(response["patch"].clone()).unwrap();
    let ops: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();

    let by_path: BTreeMap<String, Value> = serde_json::to_value(&ops)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|op| {
            (
                op["path"].as_str().unwrap().to_string(),
                op["value"].clone(),
            )
        })
        .collect();
    assert_eq!(
        by_path["/metadata/labels/nvidia.com~1snapshot-checkpoint-id"],
        "checkpoint-123"
    );
    assert_eq!(
        by_path["/metadata/labels/nvidia.com~1snapshot-is-restore-target"],
        "true"
    );
    assert_eq!(
        by_path["/metadata/annotations/nvidia.com~1snapshot-artifact-version"],
        "2"
    );
    assert!(!by_path.contains_key("/metadata/annotations/nvidia.com~1snapshot-target-containers"));
    assert!(by_path.contains_key("/spec/volumes"));
    assert_eq!(
        by_path["/spec/containers/0/command/0"], "sleep",
        "{by_path:#?}"
    );
    assert_eq!(by_path["/spec/containers/0/command/1"], "infinity");

    // Applied to the pod exactly as the apiserver sent it, the patch gives the restored pod.
    let mut document = serde_json::to_value(&pod).unwrap();
    json_patch::patch(&mut document, &ops).unwrap();
    let mut want = pod.clone();
    restore_pod(&mut want, &["main".to_string()], &ready_restore());
    assert_eq!(serde_json::from_value::<Pod>(document).unwrap(), want);
    let labels = want.metadata.labels.unwrap();
    assert_eq!(labels[RESTORE_TARGET_LABEL], "true");
    // The candidate annotations stay, as upstream's webhook leaves them.
    assert_eq!(want.metadata.annotations.unwrap()[CANDIDATE], "true");

    // A pod that is no candidate is allowed without a patch.
    let mut plain = pod.clone();
    plain.metadata.annotations = None;
    let answer = restorer
        .review(review_of(&plain, "CREATE", "default"))
        .await;
    let response = serde_json::to_value(answer.response.unwrap()).unwrap();
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
}

/// The configuration: upstream's webhook registration (CREATE of pods, Ignore, no side
/// effects, 10 s, AdmissionReview v1) at this operator's endpoint, the objectSelector on the
/// operator's pod labels, the namespace scope with `--namespace`.
#[test]
fn the_configuration_registers_pod_creation_at_this_operator() {
    let url = Endpoint::Url("https://127.0.0.1:9443/".into());
    let config = configuration(&url, "CA", None, FailurePolicy::default());
    assert_eq!(config.metadata.name.as_deref(), Some(CONFIGURATION));
    let webhooks = config.webhooks.unwrap();
    let [webhook] = &webhooks[..] else {
        panic!("one webhook")
    };
    assert_eq!(webhook.name, "mpodcheckpointrestore.kb.io");
    assert_eq!(
        webhook.client_config.url.as_deref(),
        Some("https://127.0.0.1:9443/mutate-core-v1-pod-checkpoint-restore")
    );
    assert_eq!(
        webhook.client_config.ca_bundle.as_ref().map(|b| &b.0[..]),
        Some(&b"CA"[..])
    );
    assert_eq!(webhook.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(webhook.side_effects, "None");
    assert_eq!(webhook.timeout_seconds, Some(10));
    assert_eq!(webhook.admission_review_versions, ["v1"]);
    let rule = &webhook.rules.as_ref().unwrap()[0];
    assert_eq!(
        rule.operations.as_deref(),
        Some(&["CREATE".to_string()][..])
    );
    assert_eq!(rule.resources.as_deref(), Some(&["pods".to_string()][..]));
    assert_eq!(rule.api_groups.as_deref(), Some(&[String::new()][..]));
    let selected: Vec<_> = webhook
        .object_selector
        .as_ref()
        .unwrap()
        .match_expressions
        .iter()
        .flatten()
        .map(|e| (e.key.as_str(), e.operator.as_str()))
        .collect();
    assert_eq!(
        selected,
        [
            ("nvidia.com/dynamo-component", "Exists"),
            ("nvidia.com/dynamo-namespace", "Exists"),
            ("nvidia.com/selector", "Exists"),
        ]
    );
    assert_eq!(
        webhook.namespace_selector,
        Some(LabelSelector::default()),
        "every namespace"
    );

    let service = Endpoint::Service {
        namespace: "dynamo-system".into(),
        name: "dynamo-operator-webhook".into(),
        port: 443,
    };
    let scoped = configuration(&service, "CA", Some("team-a"), FailurePolicy::Fail);
    let webhook = &scoped.webhooks.unwrap()[0];
    assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
    let reference = webhook.client_config.service.as_ref().unwrap();
    assert_eq!(
        (
            reference.namespace.as_str(),
            reference.name.as_str(),
            reference.port,
            reference.path.as_deref()
        ),
        (
            "dynamo-system",
            "dynamo-operator-webhook",
            Some(443),
            Some(PATH)
        )
    );
    assert_eq!(webhook.client_config.url, None);
    let scope = &webhook.namespace_selector.as_ref().unwrap();
    let expression = &scope.match_expressions.as_ref().unwrap()[0];
    assert_eq!(
        (
            expression.key.as_str(),
            expression.operator.as_str(),
            expression.values.clone()
        ),
        (
            "kubernetes.io/metadata.name",
            "In",
            Some(vec!["team-a".to_string()])
        )
    );
}
