//! Children and graphs deleted by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject};

use super::{converge_and_check, inventory, operator_user};
use crate::harness::{
    self, Entry, Kind, Obj, Snapshot, apply, audit_mark, audit_since, graph, wait_all_ready,
    wait_for, writes_in,
};
use crate::{Report, Suite};

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
    let victims = victims(&snapshot);
    report.figure(
        "deleted by hand",
        victims
            .iter()
            .map(|v| format!("{} {}", v.kind, v.name))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let mark = audit_mark(&suite.env.cp);
    delete_by_hand(suite, &mut report, &kinds, &ns, &victims).await?;
    converge_and_check(suite, &mut report, &namespaces, Duration::from_secs(120)).await?;
    let entries = audit_since(&suite.env.cp, mark).await;
    recreated(suite, &mut report, &entries, &namespaces, &victims);

    deleted_mid_convergence(suite, &mut report, &ns).await?;
    inventory(suite, &mut report, &namespaces).await?;
    suite.namespaces.push(ns);
    Ok(report)
}

/// One child of every kind the graphs own (directly or through a component), none of them below
/// another (garbage collection would take it, not the user).
fn victims(snapshot: &Snapshot) -> Vec<Obj> {
    let mut victims: Vec<Obj> = Vec::new();
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
    victims
}

/// Deletes the victims in `ns` as a user would, and waits for each to come back (a new uid).
async fn delete_by_hand(
    suite: &mut Suite,
    report: &mut Report,
    kinds: &[Kind],
    ns: &str,
    victims: &[Obj],
) -> anyhow::Result<()> {
    let admin = suite.env.admin();
    for v in victims {
        let ar = kinds
            .iter()
            .find(|k| k.kind == v.kind)
            .context("kind")?
            .ar
            .clone();
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ar);
        match api.delete(&v.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let started = Instant::now();
    let mut back = Vec::new();
    for v in victims {
        let ar = kinds
            .iter()
            .find(|k| k.kind == v.kind)
            .context("kind")?
            .ar
            .clone();
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ar);
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
    Ok(())
}

/// Objects the operator created more than once: a victim (a duplicate), or a child of one (through
/// garbage collection; flagged).
fn recreated(
    suite: &mut Suite,
    report: &mut Report,
    entries: &[Entry],
    namespaces: &[String],
    victims: &[Obj],
) {
    let user = operator_user();
    let mut twice = Vec::new();
    let mut cascaded = Vec::new();
    let mut creates: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in writes_in(entries, &user, namespaces).filter(|e| e.created()) {
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
}

/// A graph deleted while it converges goes, with everything it had.
async fn deleted_mid_convergence(
    suite: &mut Suite,
    report: &mut Report,
    ns: &str,
) -> anyhow::Result<()> {
    let admin = suite.env.admin();
    let body = suite.templates.get("disagg").context("template")?;
    let name = "disagg-gone";
    let created = apply(&admin, &graph("disagg", body, ns, name)).await?;
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let dcds: Api<api::DynamoComponentDeployment> = Api::namespaced(admin.clone(), ns);
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
    harness::delete_graph(&admin, ns, name).await?;
    let dgds = harness::dgds(&admin, ns);
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
    Ok(())
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
