//! Fuzzing of the pure parts, with proptest: the renderers (component workloads, the DCD's
//! Deployment and Service, the Grove PodCliqueSet, the shared resources), validation, the
//! conversion webhook's handler (it reads whatever the apiserver sends) and the checkpoint
//! create-or-reuse decision.
//!
//! Inputs are mutations of the seed corpus (`crates/reliability/corpus/graphs/*.yaml` and
//! `fuzz/*.json`): a few random edits each — a field removed, a value replaced by an odd one
//! (extreme numbers, unicode, control characters, long strings, deep nesting), an array
//! element duplicated, a known field name put where it does not belong. A case fails when a
//! function panics, or when an invariant does not hold: rendering is deterministic, a valid
//! graph converts to v1alpha1 and back, the checkpoint decision never starts a Job twice for
//! one attempt and never overlaps a Job still going away. Failing cases are shrunk by proptest
//! and written to the run's output folder, to be added to `fuzz/` once fixed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::{DynamoComponentDeployment, DynamoGraphDeployment};
use checkpoint_controller::decide::{Action, Artifact, Attempt, JobState, Observed, Recorded};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Value, json};

use super::{Report, Totals};

/// Field names that exist somewhere in the API: put in the wrong place, they test that a
/// renderer reads only what it should.
const FIELDS: &[&str] = &[
    "name",
    "type",
    "replicas",
    "podTemplate",
    "spec",
    "containers",
    "image",
    "env",
    "multinode",
    "nodeCount",
    "experimental",
    "gpuMemoryService",
    "checkpoint",
    "enabled",
    "checkpointRef",
    "eppConfig",
    "providerOverride",
    "apiVersion",
    "value",
    "labels",
    "annotations",
    "services",
    "extraPodSpec",
    "mainContainer",
    "resources",
    "limits",
    "nvidia.com/gpu",
    "scalingAdapter",
    "globalDynamoNamespace",
    "roles",
    "topologyConstraint",
    "packDomain",
    "backendFramework",
    "restart",
    "id",
    "strategy",
    "order",
    "envFromSecret",
    "pvcs",
    "volumeMounts",
    "uid",
];

/// One edit of a JSON document.
#[derive(Clone, Debug)]
enum Edit {
    /// Remove the `n`-th key of some object.
    Remove(usize),
    /// Replace the `n`-th node with `value`.
    Replace(usize, Value),
    /// Set `key` in the `n`-th object.
    Insert(usize, String, Value),
    /// Duplicate an element of the `n`-th array.
    Duplicate(usize),
}

fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z0-9-]{1,12}",
        "\\PC{0,24}",
        "[\u{0}-\u{1f}\u{7f}\u{200b}\u{202e}\u{feff}]{1,8}",
        (1usize..5000).prop_map(|n| "x".repeat(n)),
        Just("-".into()),
        Just("..".into()),
        Just("100%".into()),
        Just("1e400".into()),
        Just("grove.io/v1alpha1".into()),
        Just("nvidia.com/v1beta1".into()),
        Just("main".into()),
        Just("frontend".into()),
        Just("worker".into()),
        Just("prefill".into()),
        Just("decode".into()),
        Just("planner".into()),
        Just("epp".into()),
    ]
}

fn odd_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            Just(0i64),
            Just(-1),
            Just(i64::from(i32::MAX)),
            Just(i64::from(i32::MIN)),
            Just(i64::MAX),
            Just(i64::MIN),
            any::<i64>()
        ]
        .prop_map(Value::from),
        prop_oneof![Just(0.5f64), Just(-0.0), Just(1e300), any::<f64>()]
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        odd_string().prop_map(Value::from),
        Just(json!({})),
        Just(json!([])),
    ];
    let nested = (1usize..100).prop_map(|depth| {
        let mut v = json!("deep");
        for _ in 0..depth {
            v = json!({ "a": v });
        }
        v
    });
    prop_oneof![
        8 => leaf.clone(),
        1 => nested,
        1 => prop::collection::vec(leaf.clone(), 0..4).prop_map(Value::from),
        1 => prop::collection::btree_map(
            prop::sample::select(FIELDS).prop_map(str::to_string),
            leaf,
            0..4
        )
        .prop_map(|m| Value::Object(m.into_iter().collect())),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        2 => any::<usize>().prop_map(Edit::Remove),
        4 => (any::<usize>(), odd_value()).prop_map(|(n, v)| Edit::Replace(n, v)),
        2 => (any::<usize>(), prop::sample::select(FIELDS).prop_map(str::to_string), odd_value())
            .prop_map(|(n, k, v)| Edit::Insert(n, k, v)),
        1 => any::<usize>().prop_map(Edit::Duplicate),
    ]
}

/// Every node of `v`, depth first, as JSON pointers.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                pointers(
                    child,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                pointers(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn apply_edit(doc: &mut Value, edit: &Edit) {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    let pick = |n: usize, pred: &dyn Fn(&Value) -> bool| -> Option<String> {
        let candidates: Vec<&String> = all
            .iter()
            .filter(|p| doc.pointer(p).is_some_and(pred))
            .collect();
        (!candidates.is_empty()).then(|| candidates[n % candidates.len()].clone())
    };
    match edit {
        Edit::Remove(n) => {
            if let Some(p) = pick(*n, &|v| v.as_object().is_some_and(|m| !m.is_empty()))
                && let Some(m) = doc.pointer_mut(&p).and_then(Value::as_object_mut)
            {
                let key = m.keys().nth(n % m.len()).cloned().unwrap_or_default();
                m.remove(&key);
            }
        }
        Edit::Replace(n, value) => {
            // Never the whole document, nor its identity (kind, name): the renderers are
            // given graphs.
            if let Some(p) = pick(*n, &|_| true)
                && !p.is_empty()
                && p != "/apiVersion"
                && p != "/kind"
                && let Some(slot) = doc.pointer_mut(&p)
            {
                *slot = value.clone();
            }
        }
        Edit::Insert(n, key, value) => {
            if let Some(p) = pick(*n, &|v| v.is_object())
                && let Some(m) = doc.pointer_mut(&p).and_then(Value::as_object_mut)
            {
                m.insert(key.clone(), value.clone());
            }
        }
        Edit::Duplicate(n) => {
            if let Some(p) = pick(*n, &|v| v.as_array().is_some_and(|a| !a.is_empty()))
                && let Some(a) = doc.pointer_mut(&p).and_then(Value::as_array_mut)
            {
                let item = a[n % a.len()].clone();
                a.push(item);
            }
        }
    }
}

/// The seeds of one target.
struct Seeds {
    graphs: Vec<Value>,
    components: Vec<Value>,
    reviews: Vec<Value>,
}

fn load_seeds(root: &Path) -> anyhow::Result<Seeds> {
    let corpus = root.join(crate::CORPUS);
    let mut seeds = Seeds {
        graphs: Vec::new(),
        components: Vec::new(),
        reviews: Vec::new(),
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["graphs", "fuzz"] {
        for entry in std::fs::read_dir(corpus.join(dir))? {
            files.push(entry?.path());
        }
    }
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path)?;
        let mut value: Value = match path.extension().and_then(|e| e.to_str()) {
            Some("yaml") => serde_yaml::from_str(&text)?,
            Some("json") => serde_json::from_str(&text)?,
            _ => continue,
        };
        match value["kind"].as_str() {
            Some("DynamoGraphDeployment") => {
                // The identity renderers need (an owner reference).
                value["metadata"]["namespace"] = json!("fuzz");
                value["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000001");
                value["metadata"]["generation"] = json!(1);
                seeds.graphs.push(value);
            }
            Some("DynamoComponentDeployment") => seeds.components.push(value),
            Some("ConversionReview") => seeds.reviews.push(value),
            _ => {}
        }
    }
    // More seeds from the graphs: the DCDs they render, and conversion reviews of each.
    for graph in seeds.graphs.clone() {
        if let Ok(dgd) = serde_json::from_value::<DynamoGraphDeployment>(graph.clone()) {
            let generation = reconcilers::rollout::WorkerGeneration::settled(
                reconcilers::rollout::worker_hash(&dgd),
            );
            if let Ok(dcds) = component_program::workloads::render(
                &dgd,
                &generation,
                None,
                &Default::default(),
                &BTreeMap::new(),
            ) {
                for dcd in dcds {
                    seeds.components.push(serde_json::to_value(&dcd)?);
                }
            }
        }
        seeds.reviews.push(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "00000000-0000-0000-0000-00000000000c",
                        "desiredAPIVersion": "nvidia.com/v1alpha1", "objects": [graph]},
        }));
    }
    Ok(seeds)
}

/// A mutated seed.
fn mutated(seeds: Vec<Value>) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(seeds),
        prop::collection::vec(edit(), 1..5),
    )
        .prop_map(|(mut doc, edits)| {
            for e in &edits {
                apply_edit(&mut doc, e);
            }
            doc
        })
}

/// Graph cases that parsed, and that were valid (how much of the fuzzing reaches the renderers).
static PARSED: AtomicU64 = AtomicU64::new(0);
static VALID: AtomicU64 = AtomicU64::new(0);

/// Everything the graph pathway computes from a graph alone.
fn graph_case(doc: &Value) -> Result<(), String> {
    let Ok(dgd) = serde_json::from_value::<DynamoGraphDeployment>(doc.clone()) else {
        return Ok(()); // the apiserver's schema and the typed client stop it earlier
    };
    PARSED.fetch_add(1, Ordering::Relaxed);
    let valid = api::validate(&dgd).is_ok();
    if valid {
        VALID.fetch_add(1, Ordering::Relaxed);
    }
    let once = render_graph(&dgd);
    let twice = render_graph(&dgd);
    if once != twice {
        return Err(format!(
            "rendering is not deterministic:\n{once}\n---\n{twice}"
        ));
    }
    // Conversion (the webhook's path) both ways.
    let alpha = api::conversion::to_v1alpha1(&dgd);
    let back = api::conversion::to_v1beta1(&alpha);
    if valid && back.spec.components.len() != dgd.spec.components.len() {
        return Err(format!(
            "a valid graph loses components through v1alpha1: {} → {}",
            dgd.spec.components.len(),
            back.spec.components.len()
        ));
    }
    let raw = serde_json::to_value(&dgd).map_err(|e| e.to_string())?;
    let _ = api::conversion::convert(&raw, "nvidia.com/v1alpha1");
    let _ = api::conversion::convert(doc, "nvidia.com/v1alpha1");
    let _ = api::conversion::convert(doc, "nvidia.com/v1beta1");
    Ok(())
}

/// The renderers' outputs, as text (errors included: an error must be deterministic too).
fn render_graph(dgd: &DynamoGraphDeployment) -> String {
    let mut out = String::new();
    let mut put = |what: &str, r: String| {
        out.push_str(what);
        out.push_str(": ");
        out.push_str(&r);
        out.push('\n');
    };
    let hash = reconcilers::rollout::worker_hash(dgd);
    put("worker hash", hash.clone());
    put(
        "restart order",
        format!("{:?}", reconcilers::restart::restart_order(dgd)),
    );
    put(
        "discovery",
        format!(
            "{:?}",
            reconcilers::discovery::render(dgd).map(|r| serde_json::to_string(&r).ok())
        ),
    );
    put(
        "wait for leader",
        format!(
            "{:?}",
            reconcilers::wait_for_leader::render(dgd).map(|r| serde_json::to_string(&r).ok())
        ),
    );
    match reconcilers::gms::resolve(dgd) {
        Ok(claims) => {
            for claim in &claims {
                put(
                    "gms",
                    format!(
                        "{:?}",
                        reconcilers::gms::render(dgd, claim)
                            .map(|r| serde_json::to_string(&r).ok())
                    ),
                );
            }
        }
        Err(e) => put("gms", format!("error {e}")),
    }
    for component in &dgd.spec.components {
        put(
            "epp config",
            format!(
                "{:?}",
                reconcilers::epp::render_config_map(dgd, component)
                    .map(|r| serde_json::to_string(&r).ok())
            ),
        );
        put(
            "inference pool",
            format!(
                "{:?}",
                reconcilers::epp::render_inference_pool(dgd, component)
                    .map(|r| serde_json::to_string(&r).ok())
            ),
        );
    }
    let generation = reconcilers::rollout::WorkerGeneration::settled(hash.clone());
    let checkpoints = reconcilers::checkpoints::CheckpointInfos::new();
    let live = BTreeMap::new();
    match component_program::workloads::render(dgd, &generation, None, &checkpoints, &live) {
        Ok(dcds) => {
            for dcd in &dcds {
                put("dcd", serde_json::to_string(dcd).unwrap_or_default());
                let _ = api::validate::validate_dcd(dcd);
                let rendered = dcd_controller::render(dcd);
                put("dcd render", format!("{rendered:?}"));
            }
        }
        Err(e) => put("dcds", format!("error {e}")),
    }
    let settings = grove_render::Settings::default();
    let workers = grove_render::Workers {
        hash,
        changed: false,
    };
    let waiting = BTreeSet::new();
    let pull = grove_render::pod::PullSecrets::default();
    let pcs = grove_render::render(&grove_render::Inputs {
        dgd,
        existing: None,
        workers: &workers,
        restart: None,
        waiting_for_checkpoint: &waiting,
        checkpoints: &BTreeMap::new(),
        topology_domains: &[],
        pull_secrets: &pull,
        settings: &settings,
    });
    put(
        "podcliqueset",
        format!("{:?}", pcs.map(|p| serde_json::to_string(&p).ok())),
    );
    out
}

fn component_case(doc: &Value) -> Result<(), String> {
    let Ok(dcd) = serde_json::from_value::<DynamoComponentDeployment>(doc.clone()) else {
        return Ok(());
    };
    let _ = api::validate::validate_dcd(&dcd);
    let a = format!("{:?}", dcd_controller::render(&dcd));
    let b = format!("{:?}", dcd_controller::render(&dcd));
    if a != b {
        return Err("the DCD render is not deterministic".into());
    }
    let _ = dcd_controller::applied_replicas(&dcd);
    let _ = dcd_controller::render::service_name(&dcd);
    Ok(())
}

fn review_case(doc: &Value) -> Result<(), String> {
    if let Ok(review) = serde_json::from_value(doc.clone()) {
        let _ = api::conversion::review(review);
    }
    if let Some(objects) = doc.pointer("/request/objects").and_then(Value::as_array) {
        for object in objects {
            for version in [
                "nvidia.com/v1alpha1",
                "nvidia.com/v1beta1",
                "nvidia.com/v2",
                "",
            ] {
                let _ = api::conversion::convert(object, version);
            }
        }
    }
    Ok(())
}

fn observed() -> impl Strategy<Value = Observed> {
    let token = prop::option::of(prop_oneof![Just("t1".to_string()), Just("t2".to_string())]);
    let attempt = prop::option::of((1i64..4, 1i64..4, token.clone()).prop_map(
        |(number, generation, rebuild)| Attempt {
            number,
            generation,
            rebuild,
        },
    ));
    let job = prop_oneof![
        Just(JobState::Absent),
        Just(JobState::Running),
        Just(JobState::Terminating),
        Just(JobState::Complete),
        Just(JobState::Failed {
            reason: "BackoffLimitExceeded".into(),
            message: "failed".into()
        }),
        Just(JobState::Foreign),
    ];
    let recorded = prop_oneof![
        Just(Recorded::None),
        Just(Recorded::Succeeded),
        Just(Recorded::Failed)
    ];
    let artifact = prop_oneof![
        Just(Artifact::Present),
        Just(Artifact::Drifted),
        Just(Artifact::Missing),
        Just(Artifact::Foreign)
    ];
    (
        1i64..5,
        token,
        prop::option::of(Just("old".to_string())),
        attempt,
        recorded,
        job,
        artifact,
    )
        .prop_map(
            |(generation, rebuild, previous_identity, attempt, recorded, job, artifact)| Observed {
                identity: "abc".into(),
                generation,
                rebuild,
                previous_identity,
                attempt,
                recorded,
                job,
                artifact,
            },
        )
}

/// The create-or-reuse invariants.
fn decision_case(o: &Observed) -> Result<(), String> {
    let action = checkpoint_controller::decide(o);
    if action != checkpoint_controller::decide(o) {
        return Err("decide is not deterministic".into());
    }
    let foreign = o.job == JobState::Foreign || o.artifact == Artifact::Foreign;
    if foreign != (action == Action::Blocked) {
        return Err(format!(
            "a foreign object must block, nothing else: {o:?} → {action:?}"
        ));
    }
    match (&action, &o.attempt) {
        (Action::Create { .. } | Action::Recreate { .. }, _) if o.job == JobState::Terminating => {
            Err(format!(
                "a new Job while the old one is going away: {o:?} → {action:?}"
            ))
        }
        (Action::Create { attempt, .. }, Some(a))
            if *attempt == a.number && o.job != JobState::Absent =>
        {
            Err(format!(
                "attempt {attempt} started again while its Job exists: {o:?} → {action:?}"
            ))
        }
        (Action::Create { attempt, .. }, Some(a)) if *attempt != a.number => Err(format!(
            "a create skips or repeats attempts: {o:?} → {action:?}"
        )),
        (Action::Create { attempt, .. }, None) if *attempt != 1 => {
            Err(format!("the first attempt is not 1: {o:?} → {action:?}"))
        }
        (Action::Recreate { attempt, .. }, Some(a)) if *attempt != a.number + 1 => Err(format!(
            "a recreate does not start the next attempt: {o:?} → {action:?}"
        )),
        (Action::Recreate { .. }, None) => Err(format!("recreate without an attempt: {o:?}")),
        _ => Ok(()),
    }
}

/// Runs `case` on inputs of `strategy` until `budget` is spent; (cases, failure).
fn fuzz<S, F>(strategy: S, budget: Duration, seed: u64, case: F) -> (u64, Option<String>)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
    F: Fn(&S::Value) -> Result<(), String>,
{
    let started = Instant::now();
    let mut cases = 0u64;
    let mut chunk = 0u64;
    while started.elapsed() < budget {
        chunk += 1;
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        bytes[8..16].copy_from_slice(&chunk.to_le_bytes());
        let config = Config {
            cases: 256,
            failure_persistence: None,
            max_shrink_iters: 2000,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
        let result = runner.run(&strategy, |input| case(&input).map_err(TestCaseError::fail));
        cases += 256;
        if let Err(e) = result {
            return (cases, Some(e.to_string()));
        }
    }
    (cases, None)
}

pub fn run(root: &Path, quick: bool, seed: u64, totals: &mut Totals) -> anyhow::Result<Report> {
    let mut report = Report::new("fuzz");
    let seeds = load_seeds(root)?;
    report.figure(
        "seeds (graphs, components, conversion reviews)",
        format!(
            "{}, {}, {}",
            seeds.graphs.len(),
            seeds.components.len(),
            seeds.reviews.len()
        ),
    );
    // Full run: about four minutes over the targets; quick: a smoke test.
    let per_target = Duration::from_secs(if quick { 5 } else { 60 });
    // Panics are the findings: keep their messages, not the default hook's noise.
    let panics: Arc<Mutex<Vec<String>>> = Arc::default();
    let hook = std::panic::take_hook();
    {
        let panics = panics.clone();
        std::panic::set_hook(Box::new(move |info| {
            panics.lock().map(|mut p| p.push(info.to_string())).ok();
        }));
    }
    let out = root.join("target/reliability");
    let graphs = seeds.graphs.clone();
    let components = seeds.components.clone();
    let reviews = seeds.reviews.clone();
    // A large stack: deep inputs are the point, a stack overflow would end the run.
    let results = std::thread::Builder::new()
        .stack_size(512 * 1024 * 1024)
        .spawn(move || {
            vec![
                (
                    "graphs: validate, render, convert",
                    fuzz(mutated(graphs), per_target, seed, graph_case),
                ),
                (
                    "components: DCD render",
                    if components.is_empty() {
                        (0, None)
                    } else {
                        fuzz(mutated(components), per_target, seed, component_case)
                    },
                ),
                (
                    "conversion webhook",
                    if reviews.is_empty() {
                        (0, None)
                    } else {
                        fuzz(mutated(reviews), per_target, seed, review_case)
                    },
                ),
                (
                    "checkpoint decision",
                    fuzz(observed(), per_target, seed, decision_case),
                ),
            ]
        })?
        .join()
        .map_err(|_| anyhow::anyhow!("the fuzz thread died"))?;
    std::panic::set_hook(hook);
    for (target, (cases, failure)) in results {
        totals.fuzz_cases += cases;
        report.figure(format!("{target}: cases"), cases);
        if let Some(failure) = failure {
            let file = out.join(format!(
                "fuzz-failure-{}.txt",
                target.split(':').next().unwrap_or("case").replace(' ', "-")
            ));
            std::fs::create_dir_all(&out)?;
            std::fs::write(&file, &failure)?;
            report.fail(format!(
                "{target}: {} (minimal case in {})",
                failure
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .chars()
                    .take(300)
                    .collect::<String>(),
                file.display()
            ));
        }
    }
    report.figure(
        "graph cases that parsed / were valid",
        format!(
            "{} / {}",
            PARSED.load(Ordering::Relaxed),
            VALID.load(Ordering::Relaxed)
        ),
    );
    let panics = panics.lock().map(|p| p.len()).unwrap_or(0);
    report.figure("panics caught (before shrinking)", panics);
    report.figure("seed", seed);
    Ok(report)
}
