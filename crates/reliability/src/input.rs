//! Bad input: hostile or broken graphs beyond the API's own validation tests. Each must be
//! rejected at admission or get a clear condition (`Ready` with a reason and a message for its
//! current generation); none may crash or restart the operator, make it loop, take over another
//! graph's children, or keep other graphs from converging.

mod cases;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use self::cases::{Case, cases, container, dgd};
use super::harness::{
    self, account_user, apply, audit_mark, audit_since, graph, ready_condition, wait_all_ready,
    writes_in,
};
use super::{Report, Suite};

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
