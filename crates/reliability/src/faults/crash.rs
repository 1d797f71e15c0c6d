//! SIGKILL of the operator at random points of convergence, graphs deleted while it is down.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::{apply_graphs, converge_and_check, operator_user, progress};
use crate::harness::{self, Entry, Snapshot, apply, audit_mark, audit_since, writes_in};
use crate::{Report, Suite};

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

    let checkpoints = apply_checkpoints(suite, &mut report, &namespaces, count).await?;
    let (kill_log, deleted) =
        kill_and_delete(suite, &namespaces, &mut applied, count, kills).await?;
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
        if harness::dgds(&admin, ns).get_opt(name).await?.is_some() {
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

/// Checkpoints (when the operator runs a checkpoint controller): one capture Job per attempt,
/// whatever the kills. Their namespaces and names.
async fn apply_checkpoints(
    suite: &mut Suite,
    report: &mut Report,
    namespaces: &[String],
    count: usize,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut checkpoints = Vec::new();
    if !suite.env.features.checkpoints {
        return Ok(checkpoints);
    }
    let admin = suite.env.admin();
    let template = harness::yaml_value(
        &suite
            .env
            .root
            .join(crate::CORPUS)
            .join("checkpoints/qwen.yaml"),
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
    Ok(checkpoints)
}

/// Kills the main operator `kills` times at random fractions of convergence (in order),
/// deletes a few of the `applied` graphs while it is down, and restarts it. The kills as
/// they happened, and the deleted graphs.
async fn kill_and_delete(
    suite: &mut Suite,
    namespaces: &[String],
    applied: &mut Vec<(String, String)>,
    count: usize,
    kills: usize,
) -> anyhow::Result<(Vec<String>, Vec<(String, String)>)> {
    let admin = suite.env.admin();
    let mut points: Vec<f64> = (0..kills)
        .map(|_| suite.env.rng.range(5, 90) as f64 / 100.0)
        .collect();
    points.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let mut deleted = Vec::new();
    let mut kill_log = Vec::new();
    for (k, point) in points.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(if suite.quick { 60 } else { 300 });
        loop {
            let (ready, all) = progress(&admin, namespaces).await;
            if ready as f64 >= point * all as f64 || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A random extra delay, so kills do not always land right after a poll.
        tokio::time::sleep(Duration::from_millis(suite.env.rng.range(0, 700))).await;
        let (ready, all) = progress(&admin, namespaces).await;
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
    Ok((kill_log, deleted))
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
