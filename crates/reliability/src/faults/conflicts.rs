//! A second writer fighting over owned fields.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{inventory, operator_user, quiet};
use crate::harness::{
    FOREIGN_PREFIX, apply, audit_mark, audit_since, graph, wait_all_ready, wait_for, writes_in,
};
use crate::{Report, Suite};

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
    let children = Children::get(&admin, &ns).await?;
    let probe = suite.main.as_ref().context("main operator")?.probe();
    let reconciles_before = probe.reconciles();
    let mark = audit_mark(&suite.env.cp);
    let started = Instant::now();
    let (edits, refused) = fight(suite, &ns, &children, seconds).await;
    let conflict_time = started.elapsed();
    report.figure(
        "second writer",
        format!("{edits} edits in {seconds} s ({refused} refused)"),
    );
    children.check(suite, &mut report, &admin, &ns).await?;

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

/// The children the second writer edits, as the operator wrote them.
struct Children {
    deployment: Deployment,
    service: Service,
    dcd: api::DynamoComponentDeployment,
    /// The worker Deployment's image.
    image: Option<String>,
    selector_key: String,
    selector: Option<BTreeMap<String, String>>,
    dcd_spec: Value,
}

impl Children {
    /// The worker's Deployment, an owned Service and a component of `ns`.
    async fn get(admin: &Client, ns: &str) -> anyhow::Result<Self> {
        let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
        let services: Api<Service> = Api::namespaced(admin.clone(), ns);
        let dcds: Api<api::DynamoComponentDeployment> = Api::namespaced(admin.clone(), ns);
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
        let selector_key = service
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .and_then(|s| s.keys().next().cloned())
            .context("Service selector")?;
        Ok(Children {
            image: image(&deployment),
            selector: service.spec.as_ref().and_then(|s| s.selector.clone()),
            dcd_spec: serde_json::to_value(&dcd.spec)?,
            deployment,
            service,
            dcd,
            selector_key,
        })
    }

    /// Restored: the operator's fields back, the second writer's kept.
    async fn check(
        &self,
        suite: &mut Suite,
        report: &mut Report,
        admin: &Client,
        ns: &str,
    ) -> anyhow::Result<()> {
        let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
        let services: Api<Service> = Api::namespaced(admin.clone(), ns);
        let dcds: Api<api::DynamoComponentDeployment> = Api::namespaced(admin.clone(), ns);
        let (deployment, service, dcd) = (
            self.deployment.name_any(),
            self.service.name_any(),
            self.dcd.name_any(),
        );
        let restored = wait_for("owned fields restored", Duration::from_secs(60), || async {
            let d = deployments.get(&deployment).await.ok();
            let s = services.get(&service).await.ok();
            let c = dcds.get(&dcd).await.ok();
            d.as_ref().is_some_and(|d| image(d) == self.image)
                && s.is_some_and(|s| s.spec.and_then(|s| s.selector) == self.selector)
                && c.is_some_and(|c| {
                    serde_json::to_value(&c.spec).ok().as_ref() == Some(&self.dcd_spec)
                })
        })
        .await;
        match restored {
            Ok(t) => report.figure(
                "owned fields restored after the writer stopped",
                format!("{t:.1?}"),
            ),
            Err(_) => {
                let d = deployments.get(&deployment).await?;
                let s = services.get(&service).await?;
                let c = dcds.get(&dcd).await?;
                let wrong = vec![format!(
                    "not restored: Deployment image {:?} (was {:?}); Service selector {:?} (was {:?}); DCD spec {} (was {})",
                    image(&d),
                    self.image,
                    s.spec.and_then(|s| s.selector),
                    self.selector,
                    serde_json::to_string(&c.spec)?,
                    self.dcd_spec
                )];
                report.findings("wrong", &wrong, &mut suite.totals.wrong);
            }
        }
        let d = deployments.get(&deployment).await?;
        let s = services.get(&service).await?;
        let c = dcds.get(&dcd).await?;
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
        Ok(())
    }
}

/// The worker container's image of a Deployment.
fn image(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == "main")
                .and_then(|c| c.image.clone())
        })
}

/// The second writer (its own identity and field manager) edits the children every 250 ms for
/// `seconds`: the image, the Service's selector, the component's backend, and labels and
/// annotations of its own. Edits made and refused.
async fn fight(suite: &Suite, ns: &str, c: &Children, seconds: u64) -> (u64, u64) {
    let intruder = suite.env.cp.client_as("intruder", &["system:masters"]);
    let pp = PatchParams {
        field_manager: Some("intruder".into()),
        ..Default::default()
    };
    let d_api: Api<Deployment> = Api::namespaced(intruder.clone(), ns);
    let s_api: Api<Service> = Api::namespaced(intruder.clone(), ns);
    let c_api: Api<api::DynamoComponentDeployment> = Api::namespaced(intruder.clone(), ns);
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
                    &c.deployment.name_any(),
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
                    &c.service.name_any(),
                    &pp,
                    &Patch::Strategic(json!({
                        "metadata": foreign(i),
                        "spec": {"selector": {c.selector_key.clone(): format!("hijacked-{i}")}}
                    })),
                )
                .await
                .map(|_| ()),
            c_api
                .patch(
                    &c.dcd.name_any(),
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
    (edits, refused)
}
