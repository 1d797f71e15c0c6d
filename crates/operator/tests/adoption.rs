//! Switching from upstream's operator in place: every conformance graph, on both pathways, left as
//! upstream's operator leaves it, is adopted by this operator with no child created, none
//! deleted, no pod template changed and no pod restarted.
//!
//! **The state upstream leaves behind.** Children's bodies are what this operator renders,
//! which the render tests hold to upstream's (worker hash, names, labels, pod templates); what
//! differs is how upstream writes them, which this test rebuilds from upstream's controller code
//! (`deploy/operator/internal/controller_common/resource.go`, `finalizer.go`,
//! `dgd_*_reconciler.go`):
//! - **Field ownership.** Upstream writes with create and update requests under the field
//!   manager `manager` (its binary): `managedFields` entries with `operation: Update`, the
//!   status ones with `subresource: status`. No entry of this operator's managers remains.
//! - **Bookkeeping.** Every child upstream syncs carries `nvidia.com/last-applied-hash` as
//!   upstream computes it (SHA-256 of the sorted JSON of its spec, 64 hex digits) and
//!   `nvidia.com/last-applied-generation`. Children upstream writes otherwise (scaling adapters,
//!   the planner's shared account and binding, PVCs, the SSH key Secret) carry neither.
//! - **Finalizers.** Graphs and DCDs carry `nvidia.com/finalizer`.
//! - **The graph's annotations.** `nvidia.com/current-worker-hash-v2` and
//!   `nvidia.com/workload-provider` as upstream records them, no v1 worker hash.
//!
//! To build that state the test lets a stand-in (this operator under another identity) converge
//! the graphs, stops it, and rewrites every object it wrote as above (one update each, as
//! `manager`). Then this operator starts and the test counts, from the objects and the audit
//! log, what it created, deleted and changed; at the end every graph is deleted and must go
//! (no finalizer left behind).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use testkit::ControlPlane;
use testkit::audit::AuditEvent;

use common::graphs::{self, Pathway, Run};
use common::{Operator, Spawn};

/// Test-data folders of conformance graphs.
const FOLDERS: &[&str] = &["v1beta1", "v1alpha1", "upstream-examples"];

const READY_WITHIN: Duration = Duration::from_secs(420);

/// Upstream's field manager, finalizer and bookkeeping annotations.
const UPSTREAM_MANAGER: &str = api::labels::UPSTREAM_FIELD_MANAGER;
const FINALIZER: &str = api::labels::UPSTREAM_FINALIZER;
const HASH: &str = api::labels::LAST_APPLIED_HASH;
const GENERATION: &str = api::labels::LAST_APPLIED_GENERATION;

/// The kinds a graph's state is made of: (group, version, kind, whether upstream writes it
/// through its hash-stamping sync).
const KINDS: &[(&str, &str, &str, bool)] = &[
    ("nvidia.com", "v1beta1", "DynamoGraphDeployment", false),
    ("nvidia.com", "v1beta1", "DynamoComponentDeployment", true),
    (
        "nvidia.com",
        "v1beta1",
        "DynamoGraphDeploymentScalingAdapter",
        false,
    ),
    ("nvidia.com", "v1alpha1", "DynamoCheckpoint", false),
    ("apps", "v1", "Deployment", true),
    ("", "v1", "Service", true),
    ("", "v1", "ServiceAccount", true),
    ("", "v1", "ConfigMap", true),
    ("", "v1", "PersistentVolumeClaim", false),
    ("", "v1", "Secret", false),
    ("rbac.authorization.k8s.io", "v1", "Role", true),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", true),
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", true),
    ("grove.io", "v1alpha1", "PodCliqueSet", true),
    ("grove.io", "v1alpha1", "PodClique", false),
    ("grove.io", "v1alpha1", "PodCliqueScalingGroup", false),
    ("inference.networking.k8s.io", "v1", "InferencePool", true),
    ("resource.k8s.io", "v1", "ResourceClaimTemplate", true),
    ("batch", "v1", "Job", true),
    ("", "v1", "Pod", false),
];

/// Objects upstream writes without its hash-stamping sync although their kind has it: the
/// planner's and EPP's shared accounts and bindings (no owner).
const UNSTAMPED_NAMES: &[&str] = &[
    "planner-serviceaccount",
    "planner-serviceaccount-binding",
    "epp-serviceaccount",
    "epp-serviceaccount-binding",
];

#[tokio::test]
async fn upstream_children_are_adopted_in_place() {
    let cp = ControlPlane::shared().await;
    graphs::prepare(cp).await;
    let kinds = kinds(cp).await;

    // 1. The state upstream leaves behind (see the module docs).
    let mut stand_in = Operator::spawn(
        cp,
        Spawn {
            identity: "upstream-stand-in",
            webhook: true,
            ..Spawn::default()
        },
    );
    // Ready comes before the CRDs' conversion points at the stand-in (v1alpha1 graphs need it).
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    testkit::eventually(
        "the graphs' conversion webhook points at the stand-in",
        Duration::from_secs(60),
        || async {
            let crd = crds.get("dynamographdeployments.nvidia.com").await.unwrap();
            let url = crd
                .spec
                .conversion
                .and_then(|c| c.webhook)
                .and_then(|w| w.client_config)
                .and_then(|c| c.url)
                .unwrap_or_default();
            stand_in.ready() && url.starts_with(&stand_in.webhook)
        },
    )
    .await;
    let mut runs = Vec::new();
    for folder in FOLDERS {
        for file in testkit::testdata::yaml_files(folder) {
            for pathway in [Pathway::Component, Pathway::Grove] {
                let mut run = graphs::start(cp, &file, pathway).await;
                run.file = format!("{folder}/{}", run.file);
                runs.push(run);
            }
        }
    }

    let failed = graphs::wait_ready(cp, &runs, READY_WITHIN).await;
    assert!(
        failed.is_empty(),
        "the stand-in did not converge within {READY_WITHIN:?}:\n{}\n--- log (tail) ---\n{}",
        failed.join("\n"),
        graphs::tail(&stand_in.log_text(), 40)
    );
    stand_in.terminate();
    let mut rewritten = 0;
    for run in &runs {
        rewritten += as_upstream_left_it(&cp.client(), &kinds, run).await;
    }
    let before = snapshot(&cp.client(), &kinds, &runs).await;

    // 2. This operator starts on it.
    let mark = cp.audit().mark();
    let operator = Operator::spawn(
        cp,
        Spawn {
            webhook: true,
            ..Spawn::default()
        },
    );
    let failed = graphs::wait_ready(cp, &runs, READY_WITHIN).await;
    assert!(
        failed.is_empty(),
        "not Ready after the switch:\n{}\n--- log (tail) ---\n{}",
        failed.join("\n"),
        graphs::tail(&operator.log_text(), 40)
    );
    let requests = settle(cp, &mark, "dynamo-operator").await;
    let after = snapshot(&cp.client(), &kinds, &runs).await;

    let report = compare(&before, &after);
    let namespaces: BTreeSet<&str> = runs.iter().map(|r| r.ns.name()).collect();
    let writes = Writes::count(&requests, &namespaces);
    eprintln!(
        "adoption: {} graphs ({} files x 2 pathways), {} objects before ({} rewritten as upstream's), {} after; created {}, deleted {}, replaced {}, template changes {}, spec changes {}; operator requests: {writes:?}",
        runs.len(),
        runs.len() / 2,
        before.len(),
        rewritten,
        after.len(),
        report.created.len(),
        report.deleted.len(),
        report.replaced.len(),
        report.templates.len(),
        report.specs.len(),
    );
    assert!(report.created.is_empty(), "created: {:#?}", report.created);
    assert!(report.deleted.is_empty(), "deleted: {:#?}", report.deleted);
    assert!(
        report.replaced.is_empty(),
        "replaced: {:#?}",
        report.replaced
    );
    assert!(
        report.templates.is_empty(),
        "pod templates changed: {:#?}",
        report.templates
    );
    assert_eq!(writes.created, 0, "the operator created objects");
    assert_eq!(writes.deleted, 0, "the operator deleted objects");
    let left = leftovers(&cp.client(), &kinds, &runs).await;
    assert!(
        left.is_empty(),
        "upstream's bookkeeping left behind: {left:#?}"
    );

    // 3. No finalizer of upstream's keeps a graph.
    for run in &runs {
        let dgds: Api<api::DynamoGraphDeployment> = run.ns.api();
        dgds.delete(&run.graph.name_any(), &DeleteParams::foreground())
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut remaining = Vec::new();
        for run in &runs {
            for (ar, _) in &kinds[..2] {
                let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), run.ns.name(), ar);
                for o in api.list(&Default::default()).await.unwrap() {
                    remaining.push(format!(
                        "{} {}/{} {:?}",
                        ar.kind,
                        run.ns.name(),
                        o.name_any(),
                        o.finalizers()
                    ));
                }
            }
        }
        if remaining.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "not deleted: {remaining:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The served kinds of [`KINDS`], each with whether upstream stamps it.
async fn kinds(cp: &ControlPlane) -> Vec<(ApiResource, bool)> {
    let discovery = kube::Discovery::new(cp.client()).run().await.unwrap();
    KINDS
        .iter()
        .filter_map(|(group, version, kind, stamped)| {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            discovery.resolve_gvk(&gvk).map(|(ar, _)| (ar, *stamped))
        })
        .collect()
}

/// Whether `object` was written by one of this operator's field managers.
fn written_by_operator(object: &DynamicObject) -> bool {
    object.metadata.managed_fields.iter().flatten().any(|e| {
        e.manager
            .as_deref()
            .is_some_and(|m| m.starts_with("dynamo-operator"))
    })
}

/// Rewrites what the operator wrote in `run`'s namespace as upstream leaves it (module docs);
/// how many objects it rewrote.
async fn as_upstream_left_it(client: &Client, kinds: &[(ApiResource, bool)], run: &Run) -> usize {
    let mut rewritten = 0;
    for (ar, stamped) in kinds {
        if ar.kind == "Pod" {
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), run.ns.name(), ar);
        for object in api.list(&Default::default()).await.unwrap() {
            if !written_by_operator(&object) {
                continue;
            }
            // Upstream stamps what it syncs where this operator stamps what it applies.
            let stamped = *stamped
                && object.annotations().contains_key(HASH)
                && !UNSTAMPED_NAMES.contains(&object.name_any().as_str());
            let mut value = serde_json::to_value(&object).unwrap();
            upstream_metadata(&ar.kind, stamped, &mut value);
            upstream_ownership(&mut value);
            let next: DynamicObject = serde_json::from_value(value).unwrap();
            let params = PostParams {
                field_manager: Some(UPSTREAM_MANAGER.into()),
                ..PostParams::default()
            };
            api.replace(&object.name_any(), &params, &next)
                .await
                .unwrap_or_else(|e| panic!("rewrite {} {}: {e}", ar.kind, object.name_any()));
            rewritten += 1;
        }
    }
    rewritten
}

/// Labels, annotations and finalizers as upstream writes them on an object of `kind`.
fn upstream_metadata(kind: &str, stamped: bool, value: &mut Value) {
    let digest = upstream_hash(value);
    let meta = value["metadata"].as_object_mut().unwrap();
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .unwrap();
    annotations.remove(HASH);
    if stamped {
        annotations.insert(HASH.into(), json!(digest));
        annotations.insert(GENERATION.into(), json!("1"));
    }
    if kind == "DynamoGraphDeployment" {
        annotations.remove(api::labels::CURRENT_WORKER_HASH);
    }
    if matches!(kind, "DynamoGraphDeployment" | "DynamoComponentDeployment") {
        let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
        finalizers.as_array_mut().unwrap().push(json!(FINALIZER));
    }
}

/// Upstream's `nvidia.com/last-applied-hash` of an object: SHA-256 of the sorted JSON of its
/// spec (of its content fields for kinds without one).
fn upstream_hash(value: &Value) -> String {
    let content = match value.get("spec") {
        Some(spec) => spec.clone(),
        None => {
            let mut rest = value.as_object().cloned().unwrap_or_default();
            for envelope in ["apiVersion", "kind", "metadata", "status"] {
                rest.remove(envelope);
            }
            Value::Object(rest)
        }
    };
    // serde_json's map is ordered by key: this is the sorted form.
    let text = serde_json::to_string(&content).unwrap();
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `managedFields` with every entry of this operator's managers as upstream's: manager
/// `manager`, operation `Update` (entries that then coincide merged).
fn upstream_ownership(value: &mut Value) {
    let entries = value["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut merged: Vec<Value> = Vec::new();
    for mut entry in entries {
        if entry["manager"]
            .as_str()
            .is_some_and(|m| m.starts_with("dynamo-operator"))
        {
            entry["manager"] = json!(UPSTREAM_MANAGER);
            entry["operation"] = json!("Update");
        }
        let same = |e: &Value| {
            ["manager", "operation", "apiVersion", "subresource"]
                .iter()
                .all(|k| e.get(*k) == entry.get(*k))
        };
        match merged.iter_mut().find(|e| same(e)) {
            Some(existing) => union(&mut existing["fieldsV1"], &entry["fieldsV1"]),
            None => merged.push(entry),
        }
    }
    value["metadata"]["managedFields"] = Value::Array(merged);
}

fn union(into: &mut Value, other: &Value) {
    let (Some(into), Some(other)) = (into.as_object_mut(), other.as_object()) else {
        return;
    };
    for (k, v) in other {
        match into.get_mut(k) {
            Some(existing) => union(existing, v),
            None => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

/// One object of a graph's state: its uid, generation and pod template (workloads).
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    uid: String,
    generation: Option<i64>,
    template: Option<Value>,
    spec: Option<Value>,
}

/// Every object of [`KINDS`] in the runs' namespaces, by `Kind namespace/name`.
async fn snapshot(
    client: &Client,
    kinds: &[(ApiResource, bool)],
    runs: &[Run],
) -> BTreeMap<String, Seen> {
    let mut seen = BTreeMap::new();
    for run in runs {
        for (ar, _) in kinds {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), run.ns.name(), ar);
            for o in api.list(&Default::default()).await.unwrap() {
                let template = ["template", "leaderWorkerTemplate"]
                    .iter()
                    .find_map(|k| o.data["spec"].get(*k).cloned());
                seen.insert(
                    format!("{} {}/{}", ar.kind, run.ns.name(), o.name_any()),
                    Seen {
                        uid: o.uid().unwrap_or_default(),
                        generation: o.metadata.generation,
                        template,
                        spec: (ar.kind == "DynamoComponentDeployment")
                            .then(|| o.data["spec"].clone()),
                    },
                );
            }
        }
    }
    seen
}

#[derive(Debug, Default)]
struct Report {
    created: Vec<String>,
    deleted: Vec<String>,
    replaced: Vec<String>,
    templates: Vec<String>,
    specs: Vec<String>,
}

fn compare(before: &BTreeMap<String, Seen>, after: &BTreeMap<String, Seen>) -> Report {
    let mut report = Report::default();
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for key in keys {
        match (before.get(key), after.get(key)) {
            (None, Some(_)) => report.created.push(key.clone()),
            (Some(_), None) => report.deleted.push(key.clone()),
            (Some(b), Some(a)) => {
                if b.uid != a.uid {
                    report.replaced.push(key.clone());
                }
                if b.template != a.template {
                    report.templates.push(key.clone());
                }
                if b.spec != a.spec {
                    report.specs.push(key.clone());
                }
            }
            (None, None) => {}
        }
    }
    report
}

/// What is left of upstream's bookkeeping on objects this operator now owns: its marker
/// annotation, its finalizer, or its field manager owning fields this operator sets.
async fn leftovers(client: &Client, kinds: &[(ApiResource, bool)], runs: &[Run]) -> Vec<String> {
    let mut left = Vec::new();
    for run in runs {
        for (ar, _) in kinds {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), run.ns.name(), ar);
            for o in api.list(&Default::default()).await.unwrap() {
                let what = format!("{} {}/{}", ar.kind, run.ns.name(), o.name_any());
                if o.annotations().contains_key(GENERATION) {
                    left.push(format!("{what}: {GENERATION}"));
                }
                if o.finalizers().iter().any(|f| f == FINALIZER) {
                    left.push(format!("{what}: finalizer {FINALIZER}"));
                }
            }
        }
    }
    left
}

/// The operator's requests since `mark`, once it has written nothing for five seconds (at most
/// two minutes).
async fn settle(
    cp: &ControlPlane,
    mark: &testkit::audit::AuditMark,
    user: &str,
) -> Vec<AuditEvent> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = usize::MAX;
    let mut quiet_since = Instant::now();
    loop {
        let events: Vec<AuditEvent> = cp
            .audit()
            .since(mark)
            .await
            .into_iter()
            .filter(|e| e.user == user)
            .collect();
        let writes = events.iter().filter(|e| e.is_write()).count();
        if writes != last {
            last = writes;
            quiet_since = Instant::now();
        }
        if quiet_since.elapsed() > Duration::from_secs(5) || Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The operator's writes, by what they did.
#[derive(Debug, Default)]
struct Writes {
    created: usize,
    deleted: usize,
    patched: BTreeMap<String, usize>,
    status: usize,
    events: usize,
}

impl Writes {
    /// The writes among `events` to the graphs' `namespaces` (not the operator's own lease or
    /// webhook certificate).
    fn count(events: &[AuditEvent], namespaces: &BTreeSet<&str>) -> Self {
        let mut writes = Writes::default();
        let graphs = |e: &&AuditEvent| namespaces.contains(e.namespace.as_str());
        for e in events.iter().filter(|e| e.is_write()).filter(graphs) {
            if e.resource == "events" {
                writes.events += 1;
            } else if testkit::audit::created(&e.verb, e.code) {
                writes.created += 1;
            } else if e.verb.starts_with("delete") {
                writes.deleted += 1;
            } else if e.subresource == "status" {
                writes.status += 1;
            } else {
                *writes.patched.entry(e.resource.clone()).or_default() += 1;
            }
        }
        writes
    }
}
