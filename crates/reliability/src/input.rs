//! Bad input: hostile or broken graphs beyond the API's own validation tests. Each must be
//! rejected at admission or get a clear condition (`Ready` with a reason and a message for its
//! current generation); none may crash or restart the operator, make it loop, take over another
//! graph's children, or keep other graphs from converging.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::harness::{
    self, account_user, apply, audit_mark, audit_since, graph, ready_condition, wait_all_ready,
    writes_in,
};
use super::{Report, Suite};

/// One hostile input: what it is, and the objects that make it (applied in order).
struct Case {
    name: &'static str,
    what: &'static str,
    objects: Vec<Value>,
    /// Apply after the earlier objects are Ready (a collision needs its victim first).
    after_ready: bool,
}

fn container(image: &str) -> Value {
    json!({"name": "main", "image": image})
}

fn dgd(ns: &str, name: &str, spec: Value) -> Value {
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
fn cases(ns: &str) -> Vec<Case> {
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

/// What became of one object.
enum Outcome {
    Rejected(String),
    Decided(String, String, String),
    Undecided(String),
}

/// The bad-input scenario: every case applied beside a bystander graph, then what became of
/// each (rejected, a clear condition, or undecided), loops, takeovers and a restart.
pub async fn bad_input(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("bad-input");
    suite.main_operator().await?;
    suite.main_leading().await?;
    let ns = suite.env.namespace("bad").await?;
    let others = suite.env.namespace("bystander").await?;
    let admin = suite.env.admin();
    let agg = suite.templates.get("agg").context("template")?.clone();
    apply(&admin, &graph("agg", &agg, &others, "agg-before")).await?;
    let bystanders = vec![others.clone()];
    let (_, unready) = wait_all_ready(&admin, &bystanders, Duration::from_secs(120)).await?;
    if !unready.is_empty() {
        anyhow::bail!("bystander not Ready: {unready:?}");
    }
    let mark = audit_mark(&suite.env.cp);
    let mut outcomes = Outcomes::default();
    outcomes.apply(suite, &ns, &cases(&ns)).await?;
    outcomes.newer_version(suite, &ns).await;

    // Meanwhile the operator keeps doing its job elsewhere: a new graph converges.
    apply(&admin, &graph("agg", &agg, &others, "agg-during")).await?;
    let (took, unready) = wait_all_ready(&admin, &bystanders, Duration::from_secs(60)).await?;
    if unready.is_empty() {
        report.figure(
            "another graph applied meanwhile: Ready after",
            format!("{took:.1?}"),
        );
    } else {
        report.findings(
            "lost (a bystander graph did not converge while bad input was present)",
            &unready,
            &mut suite.totals.lost,
        );
    }
    outcomes.decide(&admin, &ns, suite.quick).await;
    outcomes.check_unreadable(suite, &mut report);
    check_collision(suite, &mut report, &ns).await?;
    let user = account_user(harness::OPERATOR_ACCOUNT);
    loops(suite, &mut report, &ns, &user).await;
    let entries = audit_since(&suite.env.cp, mark).await;
    let byst = writes_in(&entries, &user, &bystanders).count();
    report.figure("operator writes to the bystander namespace", byst);
    outcomes.table(&mut report);

    restart_check(suite, &mut report, &others).await?;

    // Clean up what a later scenario's inventory should not see.
    for name in &outcomes.unreadable {
        delete_raw(&admin, &ns, name).await;
    }
    harness::delete_namespace(&admin, &ns).await;
    suite.namespaces.push(others);
    Ok(report)
}

/// What became of the inputs.
#[derive(Default)]
struct Outcomes {
    /// (case, what, object, outcome), in the order applied.
    all: Vec<(String, String, String, Option<Outcome>)>,
    /// The objects the apiserver accepted: index in `all`, name.
    accepted: Vec<(usize, String)>,
    /// Objects stored that a typed client cannot read back (deleted raw at the end).
    unreadable: Vec<String>,
}

impl Outcomes {
    /// Applies the objects of every case in `ns` (a collision's second graph once the first is
    /// Ready), noting which the apiserver rejected.
    async fn apply(&mut self, suite: &mut Suite, ns: &str, cases: &[Case]) -> anyhow::Result<()> {
        let admin = suite.env.admin();
        for case in cases {
            for (i, object) in case.objects.iter().enumerate() {
                if case.after_ready && i > 0 {
                    let name = case.objects[i - 1]["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default();
                    let dgds = harness::dgds(&admin, ns);
                    harness::wait_for(
                        "the first graph of the case",
                        Duration::from_secs(90),
                        || async {
                            dgds.get_opt(name)
                                .await
                                .ok()
                                .flatten()
                                .is_some_and(|d| harness::is_ready(&d))
                        },
                    )
                    .await?;
                }
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let result = apply(&admin, object).await;
                let outcome = match result {
                    Ok(_) => {
                        self.accepted.push((self.all.len(), name.clone()));
                        None
                    }
                    // The apiserver may have stored what this client cannot read back.
                    Err(e) if matches!(read_deep(&admin, ns, &name).await, Ok(Some(_))) => {
                        self.unreadable.push(name.clone());
                        self.accepted.push((self.all.len(), name.clone()));
                        Some(Outcome::Undecided(format!(
                            "stored, but a typed client cannot read it: {}",
                            short(&e.to_string(), 100)
                        )))
                    }
                    Err(kube::Error::Api(s)) => Some(Outcome::Rejected(format!(
                        "{} {}",
                        s.code,
                        short(&s.message, 140)
                    ))),
                    Err(e) => Some(Outcome::Rejected(short(&e.to_string(), 140))),
                };
                self.all
                    .push((case.name.to_string(), case.what.to_string(), name, outcome));
                suite.totals.bad_inputs += 1;
            }
        }
        Ok(())
    }

    /// A newer CRD version wrote an object this one cannot read: an enum value and fields it
    /// does not know.
    async fn newer_version(&mut self, suite: &mut Suite, ns: &str) {
        let future = newer_version_object(suite, ns).await;
        self.all.push((
            "newer-version".into(),
            "written through a newer CRD (an unknown component type, unknown fields), then the CRD put back".into(),
            "from-the-future".into(),
            Some(match &future {
                Ok(()) => Outcome::Undecided(
                    "stored; this version cannot decode it (component type `router`)".into(),
                ),
                Err(e) => Outcome::Rejected(short(&format!("{e:#}"), 140)),
            }),
        ));
        suite.totals.bad_inputs += 1;
        if future.is_ok() {
            self.accepted
                .push((self.all.len() - 1, "from-the-future".into()));
            self.unreadable.push("from-the-future".into());
        }
    }

    /// Polls the accepted objects until each has a Ready condition for its generation (or the
    /// deadline passes).
    async fn decide(&mut self, admin: &kube::Client, ns: &str, quick: bool) {
        let started = Instant::now();
        let deadline = Duration::from_secs(if quick { 30 } else { 120 });
        loop {
            let mut pending = 0;
            for (index, name) in &self.accepted {
                let current = match read_deep(admin, ns, name).await {
                    Ok(current) => current,
                    Err(e) => {
                        self.all[*index].3 = Some(Outcome::Undecided(format!(
                            "a typed client cannot read it: {}",
                            short(&e.to_string(), 100)
                        )));
                        continue;
                    }
                };
                let outcome = match current.as_ref().map(|d| (d, ready_condition(d))) {
                    Some((_, Some((s, r, m)))) => Outcome::Decided(s, r, short(&m, 140)),
                    Some((d, None)) => {
                        pending += 1;
                        Outcome::Undecided(format!(
                            "no Ready condition for generation {}",
                            d.metadata.generation.unwrap_or(0)
                        ))
                    }
                    None => {
                        pending += 1;
                        Outcome::Undecided("not readable as v1beta1".into())
                    }
                };
                self.all[*index].3 = Some(outcome);
            }
            if pending == 0 || started.elapsed() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// What this version cannot read is said so on the object.
    fn check_unreadable(&self, suite: &mut Suite, report: &mut Report) {
        for (case, _, name, outcome) in &self.all {
            if case == "newer-version" {
                match outcome {
                    Some(Outcome::Decided(s, r, _)) if s == "False" && r == "UnreadableObject" => {
                        report.figure(
                            "an object this version cannot read",
                            "Ready=False UnreadableObject",
                        );
                    }
                    Some(Outcome::Rejected(_)) => {}
                    _ => report.findings(
                        "wrong",
                        &[format!("{name}: not Ready=False UnreadableObject")],
                        &mut suite.totals.wrong,
                    ),
                }
            }
        }
    }

    /// The table of outcomes, and their counts; an undecided input is flagged.
    fn table(&self, report: &mut Report) {
        let mut table =
            String::from("| input | what | object | outcome |\n| --- | --- | --- | --- |\n");
        let (mut rejected, mut decided, mut undecided) = (0, 0, 0);
        for (case, what, name, outcome) in &self.all {
            let text = match outcome {
                Some(Outcome::Rejected(m)) => {
                    rejected += 1;
                    format!("rejected at admission: {m}")
                }
                Some(Outcome::Decided(s, r, m)) => {
                    decided += 1;
                    format!("Ready={s} `{r}`: {m}")
                }
                Some(Outcome::Undecided(m)) => {
                    undecided += 1;
                    report.flag(format!("{case} ({name}): no decision: {m}"));
                    format!("**undecided**: {m}")
                }
                None => {
                    undecided += 1;
                    report.flag(format!("{case} ({name}): never looked at"));
                    "**undecided**".into()
                }
            };
            let name = short(name, 40);
            table.push_str(&format!(
                "| `{case}` | {what} | `{}` | {} |\n",
                name.replace('|', "\\|"),
                text.replace('|', "\\|").replace('\n', " ")
            ));
        }
        report.figure("bad inputs tried", self.all.len());
        report.figure("rejected at admission", rejected);
        report.figure("accepted with a clear condition", decided);
        report.figure("undecided", undecided);
        report.details.push(table);
    }
}

/// The collision: coll-a keeps its child.
async fn check_collision(suite: &mut Suite, report: &mut Report, ns: &str) -> anyhow::Result<()> {
    let admin = suite.env.admin();
    let dcds: Api<api::DynamoComponentDeployment> = Api::namespaced(admin.clone(), ns);
    let victim = read_deep(&admin, ns, "coll-a").await?;
    let child = dcds.get_opt("coll-a-b-frontend").await?;
    if let (Some(victim), Some(child)) = (&victim, &child) {
        let owner = child
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());
        if owner != victim.metadata.uid {
            report.findings(
                "wrong",
                &["coll-a-b-frontend was taken over by graph coll-a-b".to_string()],
                &mut suite.totals.wrong,
            );
        } else {
            report.figure("collision: the first graph keeps its children", "yes");
        }
    }
    Ok(())
}

/// Loops: the operator's writes per object of `ns` over a quiet window after the inputs
/// settled.
async fn loops(suite: &Suite, report: &mut Report, ns: &str, user: &str) {
    let window = Duration::from_secs(if suite.quick { 10 } else { 30 });
    let loop_mark = audit_mark(&suite.env.cp);
    tokio::time::sleep(window).await;
    let recent = audit_since(&suite.env.cp, loop_mark).await;
    let namespaces = vec![ns.to_string()];
    let mut per_object: BTreeMap<String, usize> = BTreeMap::new();
    for e in writes_in(&recent, user, &namespaces) {
        *per_object
            .entry(format!("{} {}", e.resource, e.name))
            .or_default() += 1;
    }
    let looping: Vec<String> = per_object
        .iter()
        .filter(|(_, n)| **n as u64 > 2 + window.as_secs() / 4)
        .map(|(o, n)| format!("{o}: {n} writes in {window:?}"))
        .collect();
    report.figure(
        format!("operator writes to the bad inputs in {window:?} after they settled"),
        per_object.values().sum::<usize>(),
    );
    for l in &looping {
        report.flag(format!("looping on bad input: {l}"));
    }
}

/// Restarts the operator while the bad inputs exist (the undecodable ones included): a graph
/// applied afterwards must converge (a restart lists everything again).
async fn restart_check(suite: &mut Suite, report: &mut Report, others: &str) -> anyhow::Result<()> {
    let admin = suite.env.admin();
    let agg = suite.templates.get("agg").context("template")?.clone();
    let operator = suite.main.as_mut().context("main operator")?;
    operator.kill();
    operator.restart()?;
    suite.totals.kills += 1;
    let operator = suite.main.as_ref().context("main operator")?;
    suite.env.track(operator);
    suite.main_leading().await?;
    apply(&admin, &graph("agg", &agg, others, "agg-after-restart")).await?;
    let bystanders = vec![others.to_string()];
    let (took, unready) = wait_all_ready(&admin, &bystanders, Duration::from_secs(60)).await?;
    if unready.is_empty() {
        report.figure(
            "operator restarted with the bad inputs present: a new graph Ready after",
            format!("{took:.1?}"),
        );
    } else {
        let what = format!(
            "after a restart with the bad inputs present, a new graph did not converge: {}",
            unready.join(", ")
        );
        report.findings("lost", &[what], &mut suite.totals.lost);
    }
    Ok(())
}

/// A graph read as text and decoded without serde_json's depth limit (what the operator reads,
/// the harness must read too), `None` when it does not exist.
async fn read_deep(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<DynamicObject>> {
    use serde::Deserialize;
    let path = format!("/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamographdeployments/{name}");
    let text = match client
        .request_text(http::Request::get(path).body(Vec::new()).expect("request"))
        .await
    {
        Ok(text) => text,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut de = serde_json::Deserializer::from_str(&text);
    de.disable_recursion_limit();
    let value = Value::deserialize(&mut de)?;
    Ok(Some(serde_json::from_value(value)?))
}

/// Deletes a graph without decoding the response.
async fn delete_raw(client: &kube::Client, ns: &str, name: &str) {
    let path = format!("/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamographdeployments/{name}");
    let _ = client
        .request_text(
            http::Request::delete(path)
                .body(Vec::new())
                .expect("request"),
        )
        .await;
}

fn short(s: &str, n: usize) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { '·' } else { c })
        .collect();
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s
    }
}

/// Loosens the DynamoGraphDeployment CRD's v1beta1 schema (any spec), writes an object with an
/// unknown component type and unknown fields, and puts the CRD back.
async fn newer_version_object(suite: &Suite, ns: &str) -> anyhow::Result<()> {
    let admin = suite.env.admin();
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let name = "dynamographdeployments.nvidia.com";
    let crd = crds.get(name).await?;
    let index = crd
        .spec
        .versions
        .iter()
        .position(|v| v.name == "v1beta1")
        .context("v1beta1")?;
    let patch: json_patch::Patch = serde_json::from_value(json!([{
        "op": "replace",
        "path": format!("/spec/versions/{index}/schema/openAPIV3Schema/properties/spec"),
        "value": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    }]))?;
    crds.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await?;
    let object = dgd(
        ns,
        "from-the-future",
        json!({
            "components": [{
                "name": "Router", "type": "router", "replicas": 1,
                "podTemplate": {"spec": {"containers": [container("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1")]}},
                "routingPolicy": {"kind": "least-loaded", "weights": [1, 2, 3]},
            }],
            "trafficSplit": {"canary": 10},
        }),
    );
    let written = harness::wait_for("the loosened schema", Duration::from_secs(30), || async {
        apply(&admin, &object).await.is_ok()
    })
    .await;
    // Put the CRD back whatever happened.
    suite.env.cp.install_crds(&api::crds()).await?;
    written.map(|_| ())
}
