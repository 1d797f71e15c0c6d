//! A leader killed under load, the apiserver and etcd restarted mid-convergence.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Client;

use super::{apply_graphs, converge_and_check, inventory, operator_user, progress};
use crate::harness::{
    Entry, Operator, OperatorSpec, audit_mark, audit_since, now_micros, wait_all_ready, wait_for,
    writes_in,
};
use crate::{Report, Suite};

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
    let (ready, all) = a_third_ready(&admin, &namespaces).await;
    report.figure("leader killed at", format!("{ready}/{all} Ready"));
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

    let entries = audit_since(&suite.env.cp, mark).await;
    writers(&mut report, &entries, &namespaces, killed_at);
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
    let (ready, all) = a_third_ready(&admin, &namespaces).await;
    report.figure(
        format!("{component} restarted at"),
        format!("{ready}/{all} Ready"),
    );
    let stop = if component == "etcd" {
        testkit::Stop::Kill
    } else {
        testkit::Stop::Graceful
    };
    let down = suite.env.cp.restart(component, stop).await?;
    suite.totals.restarts_of_control_plane += 1;
    let mark = audit_mark(&suite.env.cp);
    report.figure(format!("{component} down for"), format!("{down:.1?}"));
    let (lease_losses, unready) =
        recover(suite, &mut report, &mut operator, &namespaces, component).await?;
    report.figure("leadership lost (exit 3, restarted)", lease_losses);
    if !unready.is_empty() {
        report.findings("lost", &unready, &mut suite.totals.lost);
    }
    let entries = audit_since(&suite.env.cp, mark).await;
    relists(&mut report, &entries, lease_losses);
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

/// Waits (at most 5 minutes) until a third of the graphs of `namespaces` is Ready: how many
/// are, of how many.
async fn a_third_ready(admin: &Client, namespaces: &[String]) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (ready, all) = progress(admin, namespaces).await;
        if ready * 3 >= all || Instant::now() > deadline {
            return (ready, all);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writers: one credential per process; their write windows must not overlap.
fn writers(report: &mut Report, entries: &[Entry], namespaces: &[String], killed_at: i64) {
    let user = operator_user();
    let mut windows: BTreeMap<String, (i64, i64, i64, usize)> = BTreeMap::new();
    for e in writes_in(entries, &user, namespaces) {
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
}

/// Waits (at most 10 minutes) until every graph of `namespaces` is Ready again after the
/// `component` restart, restarting the operator as the kubelet would when it exits: lost
/// leadership (exit 3) is by design for long outages, any other exit is a failure. How often
/// leadership was lost, and the graphs still not Ready.
async fn recover(
    suite: &mut Suite,
    report: &mut Report,
    operator: &mut Operator,
    namespaces: &[String],
    component: &str,
) -> anyhow::Result<(usize, Vec<String>)> {
    let admin = suite.env.admin();
    let mut lease_losses = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut unready = vec![String::from("(not checked yet)")];
    while Instant::now() < deadline {
        if let Some(status) = operator.unexpected_exit() {
            if status.code() == Some(3) {
                lease_losses += 1;
                operator.restart()?;
                suite.env.track(operator);
            } else {
                suite.totals.unexpected_exits += 1;
                report.fail(format!(
                    "the operator exited ({status}) after the {component} restart:\n{}",
                    operator.log_tail(30)
                ));
                operator.restart()?;
                suite.env.track(operator);
            }
        }
        let (_, u) = wait_all_ready(&admin, namespaces, Duration::from_secs(5)).await?;
        unready = u;
        if unready.is_empty() {
            break;
        }
    }
    Ok((lease_losses, unready))
}

/// The operator's LISTs and watches after the restart: its watches resume, without a relist
/// storm.
fn relists(report: &mut Report, entries: &[Entry], lease_losses: usize) {
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
}
