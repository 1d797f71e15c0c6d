//! The hostile inputs of the bad-input scenario (most are too large or too odd to keep as
//! files).

use serde_json::{Value, json};

/// One hostile input: what it is, and the objects that make it (applied in order).
pub(super) struct Case {
    pub name: &'static str,
    pub what: &'static str,
    pub objects: Vec<Value>,
    /// Apply after the earlier objects are Ready (a collision needs its victim first).
    pub after_ready: bool,
}

pub(super) fn container(image: &str) -> Value {
    json!({"name": "main", "image": image})
}

pub(super) fn dgd(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

fn component(name: &str, t: &str) -> Value {
    json!({
        "name": name, "type": t, "replicas": 1,
        "podTemplate": {"spec": {"containers": [container("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")]}}
    })
}

/// A JSON object nested `depth` levels deep.
fn nested(depth: usize) -> Value {
    let mut v = json!("bottom");
    for i in 0..depth {
        v = json!({ format!("l{i}"): v });
    }
    v
}

/// A component whose container has environment variables totalling about `bytes`.
fn huge(bytes: usize) -> Value {
    let mut c = component("Frontend", "frontend");
    let value = "x".repeat(1000);
    let env: Vec<Value> = (0..bytes / 1024)
        .map(|i| json!({"name": format!("HUGE_{i:06}"), "value": value}))
        .collect();
    c["podTemplate"]["spec"]["containers"][0]["env"] = json!(env);
    c
}

/// Every hostile input, in the order applied.
pub(super) fn cases(ns: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(sizes(ns));
    cases.extend(odd_text(ns));
    cases.extend(odd_shapes(ns));
    cases.extend(odd_annotations(ns));
    cases.extend(missing_references(ns));
    cases.extend(old_versions(ns));
    cases.push(Case {
        name: "name-collision",
        what: "graph coll-a-b's component frontend renders the children of graph coll-a's component b-frontend (coll-a-b-frontend)",
        objects: vec![
            dgd(ns, "coll-a", json!({"components": [component("b-frontend", "frontend")]})),
            dgd(ns, "coll-a-b", json!({"components": [component("frontend", "frontend")]})),
        ],
        after_ready: true,
    });
    cases
}

/// A case of one object.
fn one(name: &'static str, what: &'static str, object: Value) -> Case {
    Case {
        name,
        what,
        objects: vec![object],
        after_ready: false,
    }
}

/// One frontend component.
fn frontend() -> Value {
    json!([component("Frontend", "frontend")])
}

/// Sizes and depths: near and over etcd's limit, values nested hundreds of levels deep.
fn sizes(ns: &str) -> Vec<Case> {
    vec![
        one(
            "near-size-limit",
            "a 1.4 MB spec (environment), under etcd's 1.5 MiB limit; its children are as large",
            dgd(ns, "huge-near", json!({"components": [huge(1_400_000)]})),
        ),
        one(
            "over-size-limit",
            "a 1.7 MB spec, over etcd's limit",
            dgd(ns, "huge-over", json!({"components": [huge(1_700_000)]})),
        ),
        one(
            "deep-provider-override",
            "a provider override value nested 200 levels deep (kept: the field preserves unknown fields)",
            dgd(
                ns,
                "deep-override",
                json!({"components": [{
                    "name": "Frontend", "type": "frontend", "replicas": 1,
                    "podTemplate": {"spec": {"containers": [container("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")]}},
                    "providerOverride": {"apiVersion": "example.com/v1", "value": nested(200)},
                }]}),
            ),
        ),
        one(
            "deep-unknown-fields",
            "an unknown field nested 500 levels deep in the pod template (pruned)",
            dgd(
                ns,
                "deep-pruned",
                json!({"components": [{
                    "name": "Frontend", "type": "frontend", "replicas": 1,
                    "podTemplate": {"spec": {"containers": [container("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")],
                                             "futureField": nested(500)}},
                }]}),
            ),
        ),
    ]
}

/// Odd text: non-ASCII names, control characters, invalid label values.
fn odd_text(ns: &str) -> Vec<Case> {
    vec![
        one(
            "unicode-name",
            "a graph named with non-ASCII letters",
            dgd(ns, "ünïcødé-graph", json!({"components": frontend()})),
        ),
        one(
            "control-character-label",
            "a label value with a control character",
            json!({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                   "metadata": {"name": "bell-label", "namespace": ns, "labels": {"example.com/x": "a\u{7}b"}},
                   "spec": {"components": frontend()}}),
        ),
        one(
            "unicode-annotations",
            "annotations with emoji, right-to-left override, zero-width and control characters, NUL",
            json!({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                   "metadata": {"name": "odd-annotations", "namespace": ns, "annotations": {
                       "example.com/emoji": "🚀🔥✨ ünïcødé",
                       "example.com/rtl": "\u{202e}evil\u{202c}",
                       "example.com/zero-width": "a\u{200b}b\u{feff}c",
                       "example.com/control": "\u{1}\u{2}\t\r\n\u{1b}[31m",
                       "example.com/nul": "a\u{0}b",
                   }},
                   "spec": {"components": frontend()}}),
        ),
        one(
            "unicode-child-labels",
            "graph labels and annotations for the children with invalid label values",
            dgd(
                ns,
                "bad-child-labels",
                json!({
                    "labels": {"example.com/team": "ünï cødé!"},
                    "annotations": {"example.com/note": "\u{0}\u{7}🚀"},
                    "components": frontend(),
                }),
            ),
        ),
        one(
            "unicode-component-name",
            "a component named with non-ASCII letters and a space",
            dgd(
                ns,
                "odd-component",
                json!({"components": [component("wörker one", "worker")]}),
            ),
        ),
    ]
}

/// Odd shapes: duplicate, missing, negative, mistyped, many components; names too long or dotted.
fn odd_shapes(ns: &str) -> Vec<Case> {
    vec![
        one(
            "duplicate-components",
            "two components whose names differ only in case (same child names)",
            dgd(
                ns,
                "dup-components",
                json!({"components": [component("Worker", "worker"), component("worker", "worker")]}),
            ),
        ),
        one(
            "empty-spec",
            "no components at all",
            dgd(ns, "empty", json!({})),
        ),
        one(
            "null-pod-template",
            "a component without a pod template, another with no containers",
            dgd(
                ns,
                "no-template",
                json!({"components": [
                    {"name": "Frontend", "type": "frontend", "replicas": 1},
                    {"name": "Worker", "type": "worker", "replicas": 1, "podTemplate": {"spec": {"containers": []}}},
                ]}),
            ),
        ),
        one(
            "negative-replicas",
            "replicas -3",
            dgd(
                ns,
                "negative",
                json!({"components": [{
                "name": "Frontend", "type": "frontend", "replicas": -3,
                "podTemplate": {"spec": {"containers": [container("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")]}}}]}),
            ),
        ),
        one(
            "wrong-types",
            "replicas as a string, components as an object",
            dgd(
                ns,
                "wrong-types",
                json!({"components": {"Frontend": {"replicas": "two"}}}),
            ),
        ),
        one(
            "many-components",
            "100 components (scaled to zero)",
            dgd(
                ns,
                "many",
                json!({"components": (0..100).map(|i| {
                let mut c = component(&format!("c{i:03}"), "worker");
                c["replicas"] = json!(0);
                c
            }).collect::<Vec<_>>()}),
            ),
        ),
        one(
            "long-name",
            "a 200-character graph name (valid for the graph, too long for Services and label values)",
            dgd(
                ns,
                &format!("l{}", "o".repeat(198) + "ng"),
                json!({"components": frontend()}),
            ),
        ),
        one(
            "dotted-name",
            "a graph name with dots (invalid in Service names)",
            dgd(ns, "a.b.c", json!({"components": frontend()})),
        ),
    ]
}

/// Annotations that contradict each other or mean nothing.
fn odd_annotations(ns: &str) -> Vec<Case> {
    vec![
        one(
            "conflicting-grove",
            "enable-grove \"true\" together with a recorded provider \"component\"",
            json!({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                   "metadata": {"name": "grove-vs-component", "namespace": ns, "annotations": {
                       "nvidia.com/enable-grove": "true", "nvidia.com/workload-provider": "component"}},
                   "spec": {"components": frontend()}}),
        ),
        one(
            "unknown-provider",
            "a recorded provider nobody knows",
            json!({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                   "metadata": {"name": "bogus-provider", "namespace": ns, "annotations": {
                       "nvidia.com/workload-provider": "bogus"}},
                   "spec": {"components": frontend()}}),
        ),
        one(
            "nonsense-annotations",
            "enable-grove \"maybe\", rollout strategy and surge values that are not values",
            json!({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                   "metadata": {"name": "nonsense", "namespace": ns, "annotations": {
                       "nvidia.com/enable-grove": "maybe",
                       "nvidia.com/deployment-strategy": "Sideways",
                       "nvidia.com/deployment-rolling-update-max-surge": "abc%",
                       "nvidia.com/deployment-rolling-update-max-unavailable": "-7",
                       "nvidia.com/dynamo-discovery-backend": "🚀",
                       "nvidia.com/restartAt": "not a time"}},
                   "spec": {"components": frontend()}}),
        ),
    ]
}

/// References to what does not exist: a Secret, a claim, a checkpoint.
fn missing_references(ns: &str) -> Vec<Case> {
    vec![
        one(
            "missing-secret",
            "environment from a Secret that does not exist, a missing image pull Secret",
            dgd(
                ns,
                "missing-secret",
                json!({"components": [{
                "name": "Frontend", "type": "frontend", "replicas": 1,
                "podTemplate": {"spec": {
                    "imagePullSecrets": [{"name": "no-such-pull-secret"}],
                    "containers": [{"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
                        "envFrom": [{"secretRef": {"name": "no-such-secret"}}],
                        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "no-such-secret", "key": "t"}}}]}]}}}]}),
            ),
        ),
        one(
            "missing-pvc",
            "a volume from a PersistentVolumeClaim that does not exist",
            dgd(
                ns,
                "missing-pvc",
                json!({"components": [{
                "name": "Frontend", "type": "frontend", "replicas": 1,
                "podTemplate": {"spec": {
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "no-such-claim"}}],
                    "containers": [{"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1",
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}]}),
            ),
        ),
        one(
            "missing-checkpoint",
            "a checkpoint reference to a checkpoint that does not exist",
            dgd(
                ns,
                "missing-checkpoint",
                json!({"components": [{
                "name": "Worker", "type": "worker", "replicas": 1,
                "podTemplate": {"spec": {"containers": [container("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")]}},
                "experimental": {"checkpoint": {"enabled": true, "checkpointRef": "no-such-checkpoint"}}}]}),
            ),
        ),
    ]
}

/// Older-version (v1alpha1) graphs, served through conversion.
fn old_versions(ns: &str) -> Vec<Case> {
    vec![
        one(
            "v1alpha1",
            "an older-version (v1alpha1) graph with fields v1beta1 moved, served through conversion",
            json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                   "metadata": {"name": "old-version", "namespace": ns},
                   "spec": {"envs": [{"name": "DYN_LOG", "value": "debug"}],
                            "services": {"Frontend": {"componentType": "frontend", "replicas": 1,
                                "envFromSecret": "no-such-secret",
                                "extraPodSpec": {"mainContainer": {"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1"}}},
                                "Worker": {"componentType": "worker", "subComponentType": "decode", "replicas": 1,
                                "resources": {"limits": {"gpu": "1"}},
                                "extraPodSpec": {"mainContainer": {"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1"}}}}}}),
        ),
        one(
            "v1alpha1-odd",
            "a v1alpha1 graph with an empty service name, a service without a pod spec, unknown fields",
            json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                   "metadata": {"name": "old-odd", "namespace": ns},
                   "spec": {"services": {"": {"replicas": 1}, "Bare": {}, "Frontend": {"componentType": "frontend",
                       "futureField": {"x": 1}, "extraPodSpec": {"mainContainer": null}}},
                            "unknownTopLevel": true}}),
        ),
    ]
}
