//! Fault scenarios: the operator killed mid-convergence, a second writer fighting over owned
//! fields, children and graphs deleted by hand, writes refused by a quota, a leader killed
//! under load, the apiserver and etcd restarted mid-convergence.

mod conflicts;
mod crash;
mod deletions;
mod quota;
mod restarts;

use std::time::{Duration, Instant};

use anyhow::Context;
use kube::Client;

use super::harness::{
    self, OperatorSpec, Snapshot, account_user, apply, audit_mark, audit_since, graph, graphs,
    is_ready, wait_all_ready, wait_for, writes_in,
};
use super::{Report, Suite};

pub use self::conflicts::conflicts;
pub use self::crash::crash;
pub use self::deletions::deletions;
pub use self::quota::quota;
pub use self::restarts::{control_plane_restart, failover};

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
