//! Fault scenarios: the operator killed mid-convergence, a second writer fighting over owned
//! fields, children and graphs deleted by hand, writes refused by a quota, a leader killed
//! under load, the apiserver and etcd restarted mid-convergence.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ResourceQuota, Service};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::harness::{
    self, Entry, FOREIGN_PREFIX, OperatorSpec, Snapshot, account_user, apply, audit_mark,
    audit_since, graph, graphs, is_ready, now_micros, ready_condition, wait_all_ready, wait_for,
    writes_in,
};
use super::{Report, Suite};

fn operator_user() -> String {
    account_user(harness::OPERATOR_ACCOUNT)
}

/// Applies `count` graphs spread over `namespaces`, templates in turn; their names.
async fn apply_graphs(
    suite: &mut Suite,
    namespaces: &[String],
    count: usize,
    prefix: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let admin = suite.env.admin();
    let templates = suite.templates();
    let mut applied = Vec::new();
    for i in 0..count {
        let (template, body) = &templates[i % templates.len()];
        let ns = &namespaces[i % namespaces.len()];
        let name = format!("{template}-{prefix}{i:04}");
        apply(&admin, &graph(template, body, ns, &name))
            .await
            .with_context(|| format!("applying {ns}/{name}"))?;
        applied.push((ns.clone(), name));
    }
    suite.totals.graphs_applied += count as u64;
    Ok(applied)
}

/// Ready graphs of `namespaces` (and how many there are).
async fn progress(client: &Client, namespaces: &[String]) -> (usize, usize) {
    let mut ready = 0;
    let mut all = 0;
    for ns in namespaces {
        if let Ok(list) = graphs(client, ns).await {
            all += list.len();
            ready += list.iter().filter(|d| is_ready(d)).count();
        }
    }
    (ready, all)
}

/// Waits for graph readiness, records the figures, then checks the subtree of every graph
/// against its template's reference: lost, duplicated, wrong and orphaned objects fail.
async fn converge_and_check(
    suite: &mut Suite,
    report: &mut Report,
    namespaces: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let admin = suite.env.admin();
    let (took, unready) = wait_all_ready(&admin, namespaces, timeout).await?;
    report.figure("converged after", format!("{:.1?}", took));
    if !unready.is_empty() {
        let lost: Vec<String> = unready.iter().map(|u| format!("not Ready: {u}")).collect();
        report.findings("lost", &lost, &mut suite.totals.lost);
    }
    inventory(suite, report, namespaces).await
}

/// The inventory check of `namespaces` (after garbage collection settled).
pub async fn inventory(
    suite: &mut Suite,
    report: &mut Report,
    namespaces: &[String],
) -> anyhow::Result<()> {
    let admin = suite.env.admin();
    let kinds = harness::inventory_kinds(suite.env.features);
    let (snapshot, orphans) =
        harness::settle_orphans(&admin, &kinds, namespaces, Duration::from_secs(90)).await?;
    let (checked, differences) = harness::check_graphs(&snapshot, &suite.references);
    suite.totals.objects_checked += checked as u64;
    report.figure("objects checked", checked);
    report.figure("duplicates", differences.duplicated.len());
    report.figure("orphans", orphans.len());
    report.findings("lost", &differences.lost, &mut suite.totals.lost);
    report.findings(
        "duplicate",
        &differences.duplicated,
        &mut suite.totals.duplicates,
    );
    report.findings("wrong", &differences.wrong, &mut suite.totals.wrong);
    report.findings("orphan", &orphans, &mut suite.totals.orphans);
    Ok(())
}

/// The reference: two copies of each template in one namespace, undisturbed. Their subtrees
/// (names and namespace as placeholders) are what every later copy must equal; the two copies
/// must equal each other (else the comparison itself would be unsound).
pub async fn reference(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("reference");
    suite.main_operator().await?;
    let lead = suite.main_leading().await?;
    report.figure("operator leading after", format!("{lead:.1?}"));
    let ns = suite.env.namespace("ref").await?;
    let admin = suite.env.admin();
    let mark = audit_mark(&suite.env.cp);
    let templates = suite.templates();
    for (template, body) in &templates {
        for copy in ["r1", "r2"] {
            apply(
                &admin,
                &graph(template, body, &ns, &format!("{template}-{copy}")),
            )
            .await?;
        }
    }
    suite.totals.graphs_applied += 2 * templates.len() as u64;
    let namespaces = vec![ns.clone()];
    let (took, unready) = wait_all_ready(&admin, &namespaces, Duration::from_secs(240)).await?;
    report.figure("graphs", 2 * templates.len());
    report.figure("all Ready after", format!("{took:.1?}"));
    if !unready.is_empty() {
        anyhow::bail!("reference graphs not Ready: {unready:?}");
    }
    // Quiet: the converged operator stops writing.
    let idle = quiet(
        suite,
        &namespaces,
        Duration::from_secs(3),
        Duration::from_secs(60),
    )
    .await;
    report.figure("quiet (3 s without writes) after", format!("{idle:.1?}"));
    let entries = audit_since(&suite.env.cp, mark).await;
    let user = operator_user();
    let writes = writes_in(&entries, &user, &namespaces).count();
    report.figure(
        "operator writes to converge (per graph)",
        format!(
            "{writes} ({:.1})",
            writes as f64 / (2 * templates.len()) as f64
        ),
    );
    let kinds = harness::inventory_kinds(suite.env.features);
    let snapshot = Snapshot::take(&admin, &kinds, &namespaces).await?;
    for (template, _) in &templates {
        let find = |copy: &str| {
            snapshot
                .of_kind("DynamoGraphDeployment")
                .find(|d| d.name == format!("{template}-{copy}"))
                .cloned()
        };
        let (Some(a), Some(b)) = (find("r1"), find("r2")) else {
            anyhow::bail!("reference graphs of {template} missing");
        };
        let fa = harness::fingerprint(&snapshot, &a);
        let fb = harness::fingerprint(&snapshot, &b);
        let d = harness::compare(&fa, &fb, &format!("{template} (second reference copy)"));
        for item in d.lost.iter().chain(&d.duplicated).chain(&d.wrong) {
            // Two identical graphs differ: the operator's output depends on something other
            // than the spec (or the comparison must ignore a field).
            report.fail(format!("reference copies differ: {item}"));
        }
        report.figure(
            format!("children of one `{template}` graph"),
            fa.values().map(Vec::len).sum::<usize>(),
        );
        suite.references.insert(template.clone(), fa);
    }
    let orphans = snapshot.orphans();
    report.findings("orphan", &orphans, &mut suite.totals.orphans);
    suite.namespaces.push(ns);
    Ok(report)
}

/// Waits until the operator wrote nothing to `namespaces` for `window`; how long that took.
async fn quiet(
    suite: &Suite,
    namespaces: &[String],
    window: Duration,
    timeout: Duration,
) -> Duration {
    let started = Instant::now();
    let user = operator_user();
    loop {
        let mark = audit_mark(&suite.env.cp);
        tokio::time::sleep(window).await;
        let entries = audit_since(&suite.env.cp, mark).await;
        if writes_in(&entries, &user, namespaces).next().is_none() || started.elapsed() > timeout {
            return started.elapsed();
        }
    }
}

/// SIGKILL of the operator at random points of convergence, restarted each time (same
/// identity, as a pod restarting in place); graphs deleted while it is down or busy. Then:
/// every graph Ready, every subtree equal to its reference, no orphans, nothing left of the
/// deleted graphs, no checkpoint Job created twice.
pub async fn crash(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("crash");
    let (count, kills, spread) = if suite.quick { (20, 2, 2) } else { (200, 5, 4) };
    suite.main_operator().await?;
    suite.main_leading().await?;
    let mut namespaces = Vec::new();
    for _ in 0..spread {
        namespaces.push(suite.env.namespace("crash").await?);
    }
    let admin = suite.env.admin();
    let mark = audit_mark(&suite.env.cp);
    let mut applied = apply_graphs(suite, &namespaces, count, "c").await?;
    report.figure("graphs", format!("{count} in {spread} namespaces"));

    // Checkpoints: one capture Job per attempt, whatever the kills.
    let mut checkpoints = Vec::new();
    if suite.env.features.checkpoints {
        let template = harness::yaml_value(
            &suite
                .env
                .root
                .join("crates/reliability/corpus/checkpoints/qwen.yaml"),
        )?;
        for i in 0..(count / 10).max(2) {
            let mut c = template.clone();
            let ns = &namespaces[i % namespaces.len()];
            let name = format!("qwen-{i:03}");
            c["metadata"] = json!({"name": name, "namespace": ns});
            c["spec"]["identity"]["maxModelLen"] = json!(4096 + i);
            apply(&admin, &c).await?;
            checkpoints.push((ns.clone(), name));
        }
        report.figure("checkpoints", checkpoints.len());
    }

    // Kill points: random fractions of convergence, in order.
    let mut points: Vec<f64> = (0..kills)
        .map(|_| suite.env.rng.range(5, 90) as f64 / 100.0)
        .collect();
    points.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let mut deleted = Vec::new();
    let mut kill_log = Vec::new();
    for (k, point) in points.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(if suite.quick { 60 } else { 300 });
        loop {
            let (ready, all) = progress(&admin, &namespaces).await;
            if ready as f64 >= point * all as f64 || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A random extra delay, so kills do not always land right after a poll.
        tokio::time::sleep(Duration::from_millis(suite.env.rng.range(0, 700))).await;
        let (ready, all) = progress(&admin, &namespaces).await;
        let operator = suite.main.as_mut().context("main operator")?;
        operator.kill();
        suite.totals.kills += 1;
        kill_log.push(format!("kill {}: {ready}/{all} Ready", k + 1));
        // While it is down: delete a few graphs (their children must all go).
        for _ in 0..(count / 40).max(1) {
            if applied.len() <= 1 {
                break;
            }
            let index = suite.env.rng.range(0, applied.len() as u64) as usize;
            let (ns, name) = applied.swap_remove(index);
            harness::delete_graph(&admin, &ns, &name).await?;
            deleted.push((ns, name));
        }
        tokio::time::sleep(Duration::from_millis(suite.env.rng.range(0, 1500))).await;
        let operator = suite.main.as_mut().context("main operator")?;
        operator.restart()?;
        let operator = suite.main.as_ref().context("main operator")?;
        suite.env.track(operator);
    }
    report.figure("kills (SIGKILL), each restarted", kill_log.join("; "));
    report.figure("graphs deleted during the kills", deleted.len());
    converge_and_check(
        suite,
        &mut report,
        &namespaces,
        Duration::from_secs(if suite.quick { 240 } else { 1200 }),
    )
    .await?;

    // Deleted graphs are gone (no finalizer holds them) and nothing of theirs is left (the
    // orphan check above covers their children).
    let mut left = Vec::new();
    for (ns, name) in &deleted {
        let api: Api<DynamicObject> =
            Api::namespaced_with(admin.clone(), ns, &harness::dgd_resource("v1beta1"));
        if api.get_opt(name).await?.is_some() {
            left.push(format!("{ns}/{name} still exists"));
        }
    }
    report.findings(
        "lost (deleted graph still present)",
        &left,
        &mut suite.totals.orphans,
    );

    let entries = audit_since(&suite.env.cp, mark).await;
    let user = operator_user();
    let writes = writes_in(&entries, &user, &namespaces).count();
    report.figure("operator writes (all restarts)", writes);
    let conflicts = writes_in(&entries, &user, &namespaces)
        .filter(|e| e.code == 409)
        .count();
    report.figure("write conflicts (409) seen", conflicts);
    if !checkpoints.is_empty() {
        check_jobs(suite, &mut report, &entries, &namespaces).await?;
    }
    suite.namespaces.extend(namespaces);
    Ok(report)
}

/// No checkpoint Job was created twice (a Job name is one attempt), and each checkpoint owns
/// exactly one.
async fn check_jobs(
    suite: &mut Suite,
    report: &mut Report,
    entries: &[Entry],
    namespaces: &[String],
) -> anyhow::Result<()> {
    let user = operator_user();
    let mut creates: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in writes_in(entries, &user, namespaces).filter(|e| e.resource == "jobs" && e.created()) {
        *creates
            .entry((e.namespace.clone(), e.name.clone()))
            .or_default() += 1;
    }
    report.figure("checkpoint Jobs created", creates.len());
    let twice: Vec<String> = creates
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|((ns, name), n)| format!("Job {ns}/{name} created {n} times"))
        .collect();
    report.findings("duplicate", &twice, &mut suite.totals.duplicates);
    let kinds = harness::inventory_kinds(suite.env.features);
    let snapshot = Snapshot::take(&suite.env.admin(), &kinds, namespaces).await?;
    let mut wrong = Vec::new();
    for c in snapshot.of_kind("DynamoCheckpoint") {
        let jobs = snapshot
            .descendants(&c.uid)
            .iter()
            .filter(|o| o.kind == "Job")
            .count();
        if jobs != 1 {
            wrong.push(format!(
                "DynamoCheckpoint {}/{} owns {jobs} Jobs",
                c.namespace, c.name
            ));
        }
    }
    report.findings("duplicate", &wrong, &mut suite.totals.duplicates);
    Ok(())
}

/// Children deleted by hand come back, once; a graph deleted while it converges goes with
/// everything it had.
pub async fn deletions(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("deletions");
    suite.main_operator().await?;
    suite.main_leading().await?;
    let ns = suite.env.namespace("del").await?;
    let namespaces = vec![ns.clone()];
    let admin = suite.env.admin();
    let templates = suite.templates.clone();
    for template in ["planner", "agg"] {
        let body = templates.get(template).context("template")?;
        apply(
            &admin,
            &graph(template, body, &ns, &format!("{template}-del")),
        )
        .await?;
    }
    suite.totals.graphs_applied += 2;
    let (_, unready) = wait_all_ready(&admin, &namespaces, Duration::from_secs(180)).await?;
    if !unready.is_empty() {
        anyhow::bail!("not Ready before the deletions: {unready:?}");
    }
    let kinds = harness::inventory_kinds(suite.env.features);
    let snapshot = Snapshot::take(&admin, &kinds, &namespaces).await?;
    // One child of every kind the graphs own (directly or through a component), none of them
    // below another (garbage collection would take it, not the user).
    let mut victims: Vec<harness::Obj> = Vec::new();
    let mut seen = BTreeSet::new();
    for o in &snapshot.objects {
        if o.kind == "DynamoGraphDeployment" || o.owner.is_none() || seen.contains(o.kind) {
            continue;
        }
        let ancestors = snapshot.ancestors(&o.uid);
        let related = victims
            .iter()
            .any(|v| ancestors.contains(&v.uid) || snapshot.ancestors(&v.uid).contains(&o.uid));
        if !related {
            seen.insert(o.kind);
            victims.push(o.clone());
        }
    }
    report.figure(
        "deleted by hand",
        victims
            .iter()
            .map(|v| format!("{} {}", v.kind, v.name))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let mark = audit_mark(&suite.env.cp);
    for v in &victims {
        let ar = kinds
            .iter()
            .find(|k| k.kind == v.kind)
            .context("kind")?
            .ar
            .clone();
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &ar);
        match api.delete(&v.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let started = Instant::now();
    let mut back = Vec::new();
    for v in &victims {
        let ar = kinds
            .iter()
            .find(|k| k.kind == v.kind)
            .context("kind")?
            .ar
            .clone();
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &ar);
        let returned = wait_for(
            &format!("{} {} to come back", v.kind, v.name),
            Duration::from_secs(60),
            || async {
                api.get_opt(&v.name).await.ok().flatten().is_some_and(|o| {
                    o.metadata.uid.as_deref() != Some(v.uid.as_str())
                        && o.metadata.deletion_timestamp.is_none()
                })
            },
        )
        .await;
        match returned {
            Ok(_) => back.push(format!("{} {:.1?}", v.kind, started.elapsed())),
            Err(_) => {
                let lost = vec![format!("{} {}/{} never came back", v.kind, ns, v.name)];
                report.findings("lost", &lost, &mut suite.totals.lost);
            }
        }
    }
    report.figure("back after", back.join(", "));
    converge_and_check(suite, &mut report, &namespaces, Duration::from_secs(120)).await?;
    let entries = audit_since(&suite.env.cp, mark).await;
    let user = operator_user();
    let mut twice = Vec::new();
    let mut cascaded = Vec::new();
    let mut creates: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in writes_in(&entries, &user, &namespaces).filter(|e| e.created()) {
        *creates
            .entry((e.resource.clone(), e.name.clone()))
            .or_default() += 1;
    }
    for ((resource, name), n) in &creates {
        let direct = victims
            .iter()
            .any(|v| &v.name == name && plural_of(v.kind) == *resource);
        if *n > 1 && direct {
            twice.push(format!("{resource} {name} created {n} times"));
        } else if *n > 1 {
            cascaded.push(format!("{resource} {name} ×{n}"));
        }
    }
    report.figure(
        "objects recreated (direct and through garbage collection)",
        creates.len(),
    );
    if !cascaded.is_empty() {
        report.flag(format!(
            "children of a deleted child created more than once: {}",
            cascaded.join(", ")
        ));
    }
    report.findings("duplicate", &twice, &mut suite.totals.duplicates);

    // A graph deleted while it converges.
    let body = templates.get("disagg").context("template")?;
    let name = "disagg-gone";
    let created = apply(&admin, &graph("disagg", body, &ns, name)).await?;
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let dcds: Api<api::DynamoComponentDeployment> = Api::namespaced(admin.clone(), &ns);
    wait_for(
        "a first component of the graph",
        Duration::from_secs(60),
        || async {
            dcds.list(&Default::default()).await.is_ok_and(|l| {
                l.items
                    .iter()
                    .any(|d| d.owner_references().iter().any(|o| o.uid == uid))
            })
        },
    )
    .await?;
    harness::delete_graph(&admin, &ns, name).await?;
    let dgds: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &harness::dgd_resource("v1beta1"));
    let gone = wait_for(
        "the deleted graph to go",
        Duration::from_secs(60),
        || async { dgds.get_opt(name).await.ok().flatten().is_none() },
    )
    .await;
    match gone {
        Ok(t) => report.figure(
            "graph deleted mid-convergence gone after",
            format!("{t:.1?}"),
        ),
        Err(_) => report.fail("a graph deleted mid-convergence is still there (a finalizer?)"),
    }
    inventory(suite, &mut report, &namespaces).await?;
    suite.namespaces.push(ns);
    Ok(report)
}

fn plural_of(kind: &str) -> String {
    match kind {
        "DynamoComponentDeployment" => "dynamocomponentdeployments".into(),
        "DynamoGraphDeploymentScalingAdapter" => "dynamographdeploymentscalingadapters".into(),
        "PersistentVolumeClaim" => "persistentvolumeclaims".into(),
        "ResourceClaimTemplate" => "resourceclaimtemplates".into(),
        other => format!("{}s", other.to_lowercase()),
    }
}

/// A second writer edits owned fields of the children continuously; afterwards the operator's
/// fields are restored, the second writer's own fields are kept, and the operator goes quiet
/// (no hot loop).
pub async fn conflicts(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("conflicts");
    let seconds = if suite.quick { 10 } else { 30 };
    suite.main_operator().await?;
    suite.main_leading().await?;
    let ns = suite.env.namespace("conf").await?;
    let namespaces = vec![ns.clone()];
    let admin = suite.env.admin();
    let body = suite.templates.get("agg").context("template")?.clone();
    let name = "agg-conf";
    apply(&admin, &graph("agg", &body, &ns, name)).await?;
    suite.totals.graphs_applied += 1;
    let (_, unready) = wait_all_ready(&admin, &namespaces, Duration::from_secs(120)).await?;
    if !unready.is_empty() {
        anyhow::bail!("not Ready before the conflict: {unready:?}");
    }
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let dcds: Api<api::DynamoComponentDeployment> = Api::namespaced(admin.clone(), &ns);
    let deployment = deployments
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(|d| d.name_any().contains("worker"))
        .context("the worker's Deployment")?;
    let service = services
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(|s| s.metadata.owner_references.is_some())
        .context("an owned Service")?;
    let dcd = dcds
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .next()
        .context("a component")?;
    let image = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| {
                s.containers
                    .iter()
                    .find(|c| c.name == "main")
                    .and_then(|c| c.image.clone())
            })
    };
    let original_image = image(&deployment);
    let selector_key = service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.keys().next().cloned())
        .context("Service selector")?;
    let original_selector = service.spec.as_ref().and_then(|s| s.selector.clone());
    let original_dcd = serde_json::to_value(&dcd.spec)?;

    let intruder = suite.env.cp.client_as("intruder", &["system:masters"]);
    let pp = PatchParams {
        field_manager: Some("intruder".into()),
        ..Default::default()
    };
    let d_api: Api<Deployment> = Api::namespaced(intruder.clone(), &ns);
    let s_api: Api<Service> = Api::namespaced(intruder.clone(), &ns);
    let c_api: Api<api::DynamoComponentDeployment> = Api::namespaced(intruder.clone(), &ns);
    let probe = suite.main.as_ref().context("main operator")?.probe();
    let reconciles_before = probe.reconciles();
    let mark = audit_mark(&suite.env.cp);
    let started = Instant::now();
    let mut edits = 0u64;
    let mut refused = 0u64;
    let foreign = |i: u64| {
        json!({
            "annotations": { format!("{FOREIGN_PREFIX}note"): format!("kept-{i}") },
            "labels": { format!("{FOREIGN_PREFIX}edited"): "true" },
        })
    };
    while started.elapsed() < Duration::from_secs(seconds) {
        let i = edits;
        let results = [
            d_api
                .patch(
                    &deployment.name_any(),
                    &pp,
                    &Patch::Strategic(json!({
                        "metadata": foreign(i),
                        "spec": {"template": {"spec": {"containers": [
                            {"name": "main", "image": format!("intruder.example.com/evil:{i}")}
                        ]}}}
                    })),
                )
                .await
                .map(|_| ()),
            s_api
                .patch(
                    &service.name_any(),
                    &pp,
                    &Patch::Strategic(json!({
                        "metadata": foreign(i),
                        "spec": {"selector": {selector_key.clone(): format!("hijacked-{i}")}}
                    })),
                )
                .await
                .map(|_| ()),
            c_api
                .patch(
                    &dcd.name_any(),
                    &pp,
                    &Patch::Merge(json!({
                        "metadata": foreign(i),
                        "spec": {"backendFramework": "sglang"}
                    })),
                )
                .await
                .map(|_| ()),
        ];
        for r in results {
            match r {
                Ok(()) => edits += 1,
                Err(_) => refused += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let conflict_time = started.elapsed();
    report.figure(
        "second writer",
        format!("{edits} edits in {seconds} s ({refused} refused)"),
    );
    // Restored: our fields back, theirs kept.
    let restored = wait_for("owned fields restored", Duration::from_secs(60), || async {
        let d = deployments.get(&deployment.name_any()).await.ok();
        let s = services.get(&service.name_any()).await.ok();
        let c = dcds.get(&dcd.name_any()).await.ok();
        d.as_ref().is_some_and(|d| image(d) == original_image)
            && s.is_some_and(|s| s.spec.and_then(|s| s.selector) == original_selector)
            && c.is_some_and(|c| serde_json::to_value(&c.spec).ok().as_ref() == Some(&original_dcd))
    })
    .await;
    match restored {
        Ok(t) => report.figure(
            "owned fields restored after the writer stopped",
            format!("{t:.1?}"),
        ),
        Err(_) => {
            let d = deployments.get(&deployment.name_any()).await?;
            let s = services.get(&service.name_any()).await?;
            let c = dcds.get(&dcd.name_any()).await?;
            let wrong = vec![format!(
                "not restored: Deployment image {:?} (was {:?}); Service selector {:?} (was {:?}); DCD spec {} (was {})",
                image(&d),
                original_image,
                s.spec.and_then(|s| s.selector),
                original_selector,
                serde_json::to_string(&c.spec)?,
                original_dcd
            )];
            report.findings("wrong", &wrong, &mut suite.totals.wrong);
        }
    }
    let d = deployments.get(&deployment.name_any()).await?;
    let s = services.get(&service.name_any()).await?;
    let c = dcds.get(&dcd.name_any()).await?;
    let mut dropped = Vec::new();
    for (kind, labels, annotations) in [
        ("Deployment", d.labels().clone(), d.annotations().clone()),
        ("Service", s.labels().clone(), s.annotations().clone()),
        (
            "DynamoComponentDeployment",
            c.labels().clone(),
            c.annotations().clone(),
        ),
    ] {
        if !labels.contains_key(&format!("{FOREIGN_PREFIX}edited"))
            || !annotations.contains_key(&format!("{FOREIGN_PREFIX}note"))
        {
            dropped.push(format!(
                "{kind}: the second writer's label or annotation was removed"
            ));
        }
    }
    report.findings("wrong", &dropped, &mut suite.totals.wrong);

    // No hot loop: quiet within a few seconds of the writer stopping.
    let quiet_after = quiet(
        suite,
        &namespaces,
        Duration::from_secs(5),
        Duration::from_secs(60),
    )
    .await;
    report.figure(
        "quiet (5 s without writes) after",
        format!("{quiet_after:.1?}"),
    );
    let entries = audit_since(&suite.env.cp, mark).await;
    let user = operator_user();
    let ours = writes_in(&entries, &user, &namespaces).count();
    let reconciles = probe.reconciles() - reconciles_before;
    let minutes = (conflict_time.as_secs_f64() + quiet_after.as_secs_f64()) / 60.0;
    report.figure(
        "operator writes while fighting (per edit)",
        format!("{ours} ({:.2})", ours as f64 / edits.max(1) as f64),
    );
    report.figure(
        "reconciles per minute while fighting",
        format!("{:.0}", reconciles / minutes),
    );
    // Bound: a few reconciles per edit (each edit triggers the owner and maybe its parent).
    if reconciles > 4.0 * edits as f64 + 60.0 {
        report.flag(format!(
            "{reconciles} reconciles for {edits} edits: more than 4 per edit"
        ));
    }
    if quiet_after > Duration::from_secs(30) {
        report.flag("the operator kept writing 30 s after the second writer stopped (hot loop)");
    }
    inventory(suite, &mut report, &namespaces).await?;
    suite.namespaces.push(ns);
    Ok(report)
}

/// Writes refused by a ResourceQuota: the graph reports a clear condition, the operator backs
/// off exponentially (the intervals between its refused writes), other namespaces converge, and
/// the graph converges once the quota is gone.
pub async fn quota(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("quota");
    suite.main_operator().await?;
    suite.main_leading().await?;
    let blocked = suite.env.namespace("quota").await?;
    let free = suite.env.namespace("free").await?;
    let admin = suite.env.admin();
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-components"},
        "spec": {"hard": {"count/dynamocomponentdeployments.nvidia.com": "0"}}
    }))?;
    let quotas: Api<ResourceQuota> = Api::namespaced(admin.clone(), &blocked);
    quotas.create(&PostParams::default(), &quota).await?;
    wait_for(
        "the quota to be observed",
        Duration::from_secs(30),
        || async {
            quotas
                .get("no-components")
                .await
                .is_ok_and(|q| q.status.is_some_and(|s| s.hard.is_some()))
        },
    )
    .await?;
    let body = suite.templates.get("agg").context("template")?.clone();
    let mark = audit_mark(&suite.env.cp);
    apply(&admin, &graph("agg", &body, &blocked, "agg-quota")).await?;
    apply(&admin, &graph("agg", &body, &free, "agg-free")).await?;
    suite.totals.graphs_applied += 2;
    let dgds: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &blocked, &harness::dgd_resource("v1beta1"));
    let condition = wait_for(
        "a Ready=False condition",
        Duration::from_secs(60),
        || async {
            dgds.get("agg-quota")
                .await
                .ok()
                .and_then(|d| ready_condition(&d))
                .is_some_and(|(s, _, m)| s == "False" && !m.is_empty())
        },
    )
    .await;
    let dgd = dgds.get("agg-quota").await?;
    match (condition, ready_condition(&dgd)) {
        (Ok(_), Some((s, r, m))) => {
            report.figure("condition", format!("Ready={s} {r}: {m}"));
            if !m.contains("quota") && !m.contains("exceeded") && !m.contains("forbidden") {
                report.flag("the condition does not name the quota");
            }
        }
        _ => report.flag(format!(
            "no clear condition within 60 s: {:?}",
            dgd.data.get("status")
        )),
    }
    let (took, unready) = wait_all_ready(
        &admin,
        std::slice::from_ref(&free),
        Duration::from_secs(120),
    )
    .await?;
    if unready.is_empty() {
        report.figure("other namespace Ready after", format!("{took:.1?}"));
    } else {
        report.findings("lost", &unready, &mut suite.totals.lost);
    }
    // Watch the retries for a while.
    let observe = Duration::from_secs(if suite.quick { 20 } else { 70 });
    tokio::time::sleep(observe.saturating_sub(took)).await;
    let entries = audit_since(&suite.env.cp, mark).await;
    let user = operator_user();
    let blocked_ns = vec![blocked.clone()];
    let refused: Vec<&Entry> = writes_in(&entries, &user, &blocked_ns)
        .filter(|e| e.resource == "dynamocomponentdeployments" && e.code == 403)
        .collect();
    if let Some(first) = refused.first() {
        report.figure("the apiserver's refusal", &first.message);
    }
    let attempts: Vec<i64> = refused.iter().map(|e| e.at).collect();
    let mut groups: Vec<i64> = Vec::new();
    for at in attempts {
        // Writes of one attempt come within a second of each other.
        if groups.last().is_none_or(|last| at - last > 500_000) {
            groups.push(at);
        }
    }
    let intervals: Vec<f64> = groups
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e6)
        .collect();
    report.figure("refused attempts", groups.len());
    report.figure(
        "intervals between attempts (s)",
        intervals
            .iter()
            .map(|i| format!("{i:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let exponential = intervals
        .windows(2)
        .all(|w| w[1] >= w[0] * 1.5 || w[1] >= 250.0);
    if intervals.len() < 3 || !exponential {
        report.flag("the retries do not back off exponentially");
    }
    // Lift the quota: the graph converges (at its next retry).
    quotas
        .delete("no-components", &DeleteParams::default())
        .await?;
    let next = intervals.last().copied().unwrap_or(1.0) * 2.0;
    let (took, unready) = wait_all_ready(
        &admin,
        std::slice::from_ref(&blocked),
        Duration::from_secs_f64(next + 120.0),
    )
    .await?;
    if unready.is_empty() {
        report.figure(
            "converged after the quota was lifted",
            format!("{took:.1?}"),
        );
    } else {
        report.findings("lost", &unready, &mut suite.totals.lost);
    }
    let namespaces = vec![blocked, free];
    inventory(suite, &mut report, &namespaces).await?;
    suite.namespaces.extend(namespaces);
    Ok(report)
}

/// Two replicas under load; the leader is killed; the follower takes over within the lease
/// duration, and the audit log never shows writes of both at once.
pub async fn failover(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("failover");
    if let Some(mut main) = suite.main.take() {
        main.terminate();
    }
    let lease_duration = 8;
    let spec = |identity: &str| OperatorSpec {
        lease: "dynamo-operator-failover".into(),
        lease_duration,
        ..OperatorSpec::new(identity)
    };
    let a = suite.env.operator(spec("dynamo-operator-a")).await?;
    let b = suite.env.operator(spec("dynamo-operator-b")).await?;
    let probes = [a.probe(), b.probe()];
    wait_for("a leader", Duration::from_secs(60), || async {
        probes.iter().any(|p| p.leading())
    })
    .await?;
    let (mut leader, mut follower) = if a.leading() { (a, b) } else { (b, a) };
    let mut namespaces = Vec::new();
    for _ in 0..2 {
        namespaces.push(suite.env.namespace("fail").await?);
    }
    let admin = suite.env.admin();
    let mark = audit_mark(&suite.env.cp);
    let count = 60;
    apply_graphs(suite, &namespaces, count, "f").await?;
    report.figure("graphs", count);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (ready, all) = progress(&admin, &namespaces).await;
        if ready * 3 >= all || Instant::now() > deadline {
            report.figure("leader killed at", format!("{ready}/{all} Ready"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let killed_at = now_micros();
    leader.kill();
    suite.totals.kills += 1;
    let probe = follower.probe();
    let took = wait_for("the follower to lead", Duration::from_secs(60), || async {
        probe.leading()
    })
    .await?;
    suite.totals.failovers += 1;
    report.figure(
        "follower leading after (lease duration)",
        format!("{took:.1?} ({lease_duration} s)"),
    );
    if took > Duration::from_secs(lease_duration + 3) {
        report.flag("takeover took longer than the lease duration");
    }
    converge_and_check(suite, &mut report, &namespaces, Duration::from_secs(600)).await?;

    // Writers: one credential per process; their write windows must not overlap.
    let entries = audit_since(&suite.env.cp, mark).await;
    let user = operator_user();
    let mut windows: BTreeMap<String, (i64, i64, i64, usize)> = BTreeMap::new();
    for e in writes_in(&entries, &user, &namespaces) {
        let w = windows
            .entry(e.credential.clone())
            .or_insert((e.received, e.at, e.at, 0));
        w.0 = w.0.min(e.received);
        w.2 = w.2.max(e.at);
        w.3 += 1;
    }
    let mut ordered: Vec<_> = windows.iter().collect();
    ordered.sort_by_key(|(_, w)| w.0);
    report.figure(
        "writers (credential: writes)",
        ordered
            .iter()
            .map(|(c, w)| format!("{}…: {}", &c[..c.len().min(12)], w.3))
            .collect::<Vec<_>>()
            .join(", "),
    );
    if windows.contains_key("") {
        report.flag("the audit log has no credential id: writers told apart by time only");
    }
    for pair in ordered.windows(2) {
        let (first, second) = (pair[0].1, pair[1].1);
        if second.0 < first.2 {
            report.fail(format!(
                "two writers at once: the second started writing {:.3} s before the first stopped",
                (first.2 - second.0) as f64 / 1e6
            ));
        }
    }
    if let Some((_, first)) = ordered.first() {
        report.figure(
            "last write of the killed leader before the kill",
            format!("{:.2} s", (killed_at - first.2) as f64 / 1e6),
        );
    }
    follower.terminate();
    leader.kill();
    suite.namespaces.extend(namespaces);
    // The main operator again, for what follows.
    suite.main_operator().await?;
    suite.main_leading().await?;
    Ok(report)
}

/// The apiserver (gracefully) or etcd (SIGKILL) restarted mid-convergence: the operator's
/// watches resume (counted: LISTs after the restart), everything converges, and no reconcile
/// keeps failing afterwards.
pub async fn control_plane_restart(suite: &mut Suite, component: &str) -> anyhow::Result<Report> {
    let name = if component == "etcd" {
        "etcd-restart"
    } else {
        "apiserver-restart"
    };
    let mut report = Report::new(name);
    // Default lease duration (15 s), as deployed: an outage longer than that ends leadership by
    // design (exit 3, restarted as a pod would be).
    if let Some(mut main) = suite.main.take() {
        main.terminate();
    }
    let mut operator = suite
        .env
        .operator(OperatorSpec {
            lease_duration: 15,
            ..OperatorSpec::new("dynamo-operator-0")
        })
        .await?;
    let probe = operator.probe();
    wait_for("the operator to lead", Duration::from_secs(60), || async {
        probe.leading()
    })
    .await?;
    let mut namespaces = Vec::new();
    for _ in 0..2 {
        namespaces.push(suite.env.namespace("cp").await?);
    }
    let admin = suite.env.admin();
    let count = 40;
    apply_graphs(suite, &namespaces, count, "r").await?;
    report.figure("graphs", count);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (ready, all) = progress(&admin, &namespaces).await;
        if ready * 3 >= all || Instant::now() > deadline {
            report.figure(
                format!("{component} restarted at"),
                format!("{ready}/{all} Ready"),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stop = if component == "etcd" {
        testkit::Stop::Kill
    } else {
        testkit::Stop::Graceful
    };
    let down = suite.env.cp.restart(component, stop).await?;
    suite.totals.restarts_of_control_plane += 1;
    let mark = audit_mark(&suite.env.cp);
    report.figure(format!("{component} down for"), format!("{down:.1?}"));
    // Lost leadership is by design for long outages: restart as the kubelet would.
    let mut lease_losses = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut unready = vec![String::from("(not checked yet)")];
    while Instant::now() < deadline {
        if let Some(status) = operator.unexpected_exit() {
            if status.code() == Some(3) {
                lease_losses += 1;
                operator.restart()?;
                suite.env.track(&operator);
            } else {
                suite.totals.unexpected_exits += 1;
                report.fail(format!(
                    "the operator exited ({status}) after the {component} restart:\n{}",
                    operator.log_tail(30)
                ));
                operator.restart()?;
                suite.env.track(&operator);
            }
        }
        let (_, u) = wait_all_ready(&admin, &namespaces, Duration::from_secs(5)).await?;
        unready = u;
        if unready.is_empty() {
            break;
        }
    }
    report.figure("leadership lost (exit 3, restarted)", lease_losses);
    if !unready.is_empty() {
        report.findings("lost", &unready, &mut suite.totals.lost);
    }
    let entries = audit_since(&suite.env.cp, mark).await;
    let user = operator_user();
    let mut lists: BTreeMap<String, usize> = BTreeMap::new();
    for e in entries
        .iter()
        .filter(|e| e.user == user && e.verb == "list")
    {
        *lists.entry(e.resource.clone()).or_default() += 1;
    }
    let watches = entries
        .iter()
        .filter(|e| e.user == user && e.verb == "watch")
        .count();
    report.figure(
        "LISTs after the restart (per resource)",
        lists
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    report.figure("watches opened after the restart", watches);
    if lists.values().any(|n| *n > 3 * (lease_losses + 1)) {
        report.flag("a resource was listed more than 3 times after the restart (relist storm)");
    }
    // No error loop afterwards.
    let errors_before = operator.reconcile_errors();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let errors = operator.reconcile_errors() - errors_before;
    report.figure("failed reconciles in the 20 s after convergence", errors);
    if errors > 0.0 {
        report.flag("reconciles keep failing after the restart");
    }
    inventory(suite, &mut report, &namespaces).await?;
    operator.terminate();
    suite.namespaces.extend(namespaces);
    suite.main_operator().await?;
    suite.main_leading().await?;
    Ok(report)
}

/// SIGTERM ends the operator promptly whenever it comes: while it starts, right after it takes
/// the Lease, while it converges, when idle. (The kubelet kills it after the grace period; a
/// replica that hangs holds the Lease, and so the work, that long.)
pub async fn sigterm(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("sigterm");
    if let Some(mut main) = suite.main.take() {
        main.terminate();
    }
    let ns = suite.env.namespace("term").await?;
    let namespaces = vec![ns.clone()];
    let admin = suite.env.admin();
    let mut results = Vec::new();
    for (i, moment) in ["starting", "leading", "converging", "idle"]
        .iter()
        .enumerate()
    {
        let mut operator = suite
            .env
            .operator(OperatorSpec::new("dynamo-operator-0"))
            .await?;
        let probe = operator.probe();
        match *moment {
            "starting" => tokio::time::sleep(Duration::from_millis(100)).await,
            "leading" => {
                wait_for("the operator to lead", Duration::from_secs(60), || async {
                    probe.leading()
                })
                .await?;
            }
            "converging" => {
                wait_for("the operator to lead", Duration::from_secs(60), || async {
                    probe.leading()
                })
                .await?;
                apply_graphs(suite, &namespaces, 10, &format!("t{i}")).await?;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            _ => {
                let (_, unready) =
                    wait_all_ready(&admin, &namespaces, Duration::from_secs(120)).await?;
                if !unready.is_empty() {
                    report.findings("lost", &unready, &mut suite.totals.lost);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        let started = Instant::now();
        let status = operator.terminate();
        let took = started.elapsed();
        let code = status
            .and_then(|s| s.code())
            .map_or("killed".to_string(), |c| c.to_string());
        results.push(format!("{moment}: exit {code} after {took:.1?}"));
        if took > Duration::from_secs(10) {
            report.flag(format!(
                "SIGTERM while {moment}: the operator took {took:.1?} to exit ({code})"
            ));
        }
    }
    report.figure("SIGTERM → exit", results.join("; "));
    suite.main_operator().await?;
    suite.main_leading().await?;
    converge_and_check(suite, &mut report, &namespaces, Duration::from_secs(120)).await?;
    suite.namespaces.push(ns);
    Ok(report)
}

/// At the end: every graph of every scenario still Ready and equal to its reference (late
/// drift, a late duplicate, a late orphan).
pub async fn last_look(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("final");
    suite.main_operator().await?;
    suite.main_leading().await?;
    let namespaces = suite.namespaces.clone();
    report.figure("namespaces", namespaces.len());
    converge_and_check(suite, &mut report, &namespaces, Duration::from_secs(180)).await?;
    Ok(report)
}

/// Memory: cycles of graphs with new names each (created, Ready, deleted, every child gone) on
/// the main operator; its resident set after the last cycle must stay within
/// [`bench::soak::MAX_GROWTH`] of the one after the first.
pub async fn soak(suite: &mut Suite) -> anyhow::Result<Report> {
    let mut report = Report::new("soak");
    suite.main_operator().await?;
    suite.main_leading().await?;
    let pid = suite
        .main
        .as_ref()
        .and_then(|o| o.pid())
        .context("the operator is not running")?;
    let ns = suite.env.namespace("soak").await?;
    let templates = suite.templates();
    let plan = bench::soak::Plan {
        cycles: if suite.quick { 3 } else { 5 },
        graphs: if suite.quick { 24 } else { 60 },
        timeout: Duration::from_secs(300),
    };
    let soaked = bench::soak::run(&suite.env.admin(), &ns, pid, plan, |cycle, i| {
        let (template, body) = &templates[i % templates.len()];
        // Grove's CRDs are installed and nothing plays Grove: the component pathway.
        super::harness::pinned(graph(
            template,
            body,
            &ns,
            &format!("c{cycle}-{template}-{i}"),
        ))
    })
    .await?;
    suite.totals.graphs_applied += (plan.cycles * plan.graphs) as u64;
    report.figure(
        "cycles × graphs",
        format!("{} × {}", plan.cycles, plan.graphs),
    );
    report.figure("operator RSS", soaked.rss_line());
    report.figure(
        "RSS after the last cycle against the first",
        format!("{:+.1} %", soaked.growth() * 100.0),
    );
    if let Some(failure) = soaked.failure() {
        report.fail(failure);
    }
    Ok(report)
}
