//! Writes refused by a ResourceQuota.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use super::{inventory, operator_user};
use crate::harness::{
    self, Entry, apply, audit_mark, audit_since, graph, ready_condition, wait_all_ready, wait_for,
    writes_in,
};
use crate::{Report, Suite};

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
    let quotas = no_components(&admin, &blocked).await?;
    let body = suite.templates.get("agg").context("template")?.clone();
    let mark = audit_mark(&suite.env.cp);
    apply(&admin, &graph("agg", &body, &blocked, "agg-quota")).await?;
    apply(&admin, &graph("agg", &body, &free, "agg-free")).await?;
    suite.totals.graphs_applied += 2;
    condition(&mut report, &admin, &blocked).await?;
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
    let intervals = retries(&mut report, &entries, &user, &blocked_ns);
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

/// A ResourceQuota in `ns` that allows no component, once the apiserver observes it.
async fn no_components(admin: &Client, ns: &str) -> anyhow::Result<Api<ResourceQuota>> {
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-components"},
        "spec": {"hard": {"count/dynamocomponentdeployments.nvidia.com": "0"}}
    }))?;
    let quotas: Api<ResourceQuota> = Api::namespaced(admin.clone(), ns);
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
    Ok(quotas)
}

/// The blocked graph reports a clear condition (Ready=False with a message naming the quota).
async fn condition(report: &mut Report, admin: &Client, ns: &str) -> anyhow::Result<()> {
    let dgds = harness::dgds(admin, ns);
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
    Ok(())
}

/// The operator's refused writes of components in `namespaces`, grouped into attempts (writes
/// within half a second); the intervals between attempts, in seconds.
fn retries(report: &mut Report, entries: &[Entry], user: &str, namespaces: &[String]) -> Vec<f64> {
    let refused: Vec<&Entry> = writes_in(entries, user, namespaces)
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
    intervals
}
