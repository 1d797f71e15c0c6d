//! Phase 4: change children of a few graphs, irrelevantly then relevantly, and count the parent
//! reconciles.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;

use super::{IGNORED_ANNOTATION, Session, deployment_ready};
use crate::audit::{KCM_USER, Requests, Tally};
use crate::metrics::{DCD, DGD, Metrics};
use crate::process::OPERATOR_USER;
use crate::report::Stimulus;

/// The targets of a stimulus: graphs, their Deployments and components.
struct Targets {
    graphs: BTreeSet<String>,
    deployments: BTreeSet<String>,
    dcds: BTreeSet<String>,
}

/// One target: a graph, its first Deployment, and that Deployment's component.
type Target = (String, Deployment, String);

/// A Pod the relevant stimulus deleted: its Deployment, the Deployment's selector, its uid.
type Deleted = (String, String, String);

impl Session<'_> {
    /// Phase 4: change children of a few graphs, irrelevantly then relevantly, and count the
    /// parent reconciles.
    pub async fn amplification(&mut self) -> anyhow::Result<Vec<Stimulus>> {
        let targets = self.targets(self.n().min(5)).await?;
        let summary = Targets {
            graphs: targets.iter().map(|t| t.0.clone()).collect(),
            deployments: targets.iter().map(|t| t.1.name_any()).collect(),
            dcds: targets.iter().map(|t| t.2.clone()).collect(),
        };
        let irrelevant = self.irrelevant(&targets, &summary).await?;
        let relevant = self.relevant(&targets, &summary).await?;
        Ok(vec![irrelevant, relevant])
    }

    /// The first `k` graphs, each with its first Deployment (by name) and its component.
    async fn targets(&self, k: usize) -> anyhow::Result<Vec<Target>> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut targets = Vec::new();
        for g in self.graphs.iter().take(k) {
            let lp = ListParams::default().labels(&format!(
                "{}={}",
                api::labels::DYNAMO_GRAPH_DEPLOYMENT_NAME,
                g.name
            ));
            let mut list = deployments.list(&lp).await?.items;
            list.sort_by_key(|d| d.name_any());
            let Some(d) = list.into_iter().next() else {
                bail!("graph {} has no Deployment", g.name);
            };
            let dcd = d
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| o.name.clone())
                .context("a Deployment without controller")?;
            targets.push((g.name.clone(), d, dcd));
        }
        Ok(targets)
    }

    /// Irrelevant: a status field no trigger reads, a label on the Deployment, an annotation on
    /// its component (a Deployment's annotations would bump its generation).
    async fn irrelevant(
        &mut self,
        targets: &[Target],
        summary: &Targets,
    ) -> anyhow::Result<Stimulus> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let dcds: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &ApiResource::erase::<api::DynamoComponentDeployment>(&()),
        );
        self.say("amplification: irrelevant child changes");
        let m0 = self.metrics()?;
        let mark = self.audit.mark();
        for (i, (_, d, dcd)) in targets.iter().enumerate() {
            let name = d.name_any();
            deployments
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": { "collisionCount": 100 + i } })),
                )
                .await?;
            let label = json!({ "metadata": { "labels": { IGNORED_ANNOTATION: "1" } } });
            deployments
                .patch(&name, &PatchParams::default(), &Patch::Merge(&label))
                .await?;
            let touch = json!({ "metadata": { "annotations": { IGNORED_ANNOTATION: "1" } } });
            dcds.patch(dcd, &PatchParams::default(), &Patch::Merge(&touch))
                .await?;
        }
        self.settle(Duration::from_secs(120)).await?;
        let requests = self.audit.since(&mark).await?;
        let m1 = self.metrics()?;
        Ok(stimulus(
            "irrelevant",
            "Deployment `status.collisionCount` and a label, an annotation on its component",
            3 * targets.len() as u64,
            summary,
            &requests,
            &m0,
            &m1,
        ))
    }

    /// Relevant: with every node cordoned, one Pod of each target dies; its replacement stays
    /// Pending, so the Deployment loses availability (and the graph its readiness) until the
    /// nodes are uncordoned.
    async fn relevant(
        &mut self,
        targets: &[Target],
        summary: &Targets,
    ) -> anyhow::Result<Stimulus> {
        self.say("amplification: one Pod of each target deleted, nodes cordoned");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let names: Vec<String> = summary.graphs.iter().cloned().collect();
        self.cordon(true).await?;
        let m0 = self.metrics()?;
        let mark = self.audit.mark();
        let mut deleted = Vec::new();
        for (_, d, _) in targets {
            let selector = d
                .spec
                .as_ref()
                .and_then(|s| s.selector.match_labels.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            let list = pods.list(&ListParams::default().labels(&selector)).await?;
            let Some(pod) = list.items.into_iter().next() else {
                bail!("Deployment {} has no Pod", d.name_any());
            };
            pods.delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                .await?;
            deleted.push((d.name_any(), selector, pod.uid().unwrap_or_default()));
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.readiness.ready(&names) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.settle(Duration::from_secs(120)).await?;
        self.cordon(false).await?;
        self.recover(&names, &deleted).await?;
        self.settle(Duration::from_secs(120)).await?;
        let requests = self.audit.since(&mark).await?;
        let m1 = self.metrics()?;
        Ok(stimulus(
            "relevant",
            "one Pod of the Deployment deleted while every node is cordoned (availability lost), then the nodes uncordoned (regained)",
            deleted.len() as u64,
            summary,
            &requests,
            &m0,
            &m1,
        ))
    }

    /// Waits (at most 3 minutes) until the graphs `names` are Ready again, each deleted Pod is
    /// gone and its Deployment is ready.
    async fn recover(&self, names: &[String], deleted: &[Deleted]) -> anyhow::Result<()> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let mut done = self.readiness.ready(names) == names.len();
            for (name, selector, uid) in deleted {
                let d = deployments.get(name).await?;
                let gone = pods
                    .list(&ListParams::default().labels(selector))
                    .await?
                    .items
                    .iter()
                    .all(|p| p.uid().as_deref() != Some(uid.as_str()));
                done &= gone && deployment_ready(&d);
            }
            if done {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.say("amplification: the targets did not recover within 3 minutes");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Marks every node (un)schedulable.
    async fn cordon(&self, unschedulable: bool) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = json!({ "spec": { "unschedulable": unschedulable } });
        for node in nodes.list_metadata(&ListParams::default()).await?.items {
            nodes
                .patch(
                    &node.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
        }
        Ok(())
    }
}

/// The figures of one stimulus.
fn stimulus(
    kind: &str,
    description: &str,
    changes: u64,
    t: &Targets,
    requests: &Requests,
    m0: &Metrics,
    m1: &Metrics,
) -> Stimulus {
    let status_writes = |user: &str, resource: &str, names: &BTreeSet<String>| {
        requests
            .of(user)
            .filter(|r| {
                r.is_write()
                    && r.resource == resource
                    && r.subresource == "status"
                    && names.contains(&r.name)
            })
            .count() as u64
    };
    Stimulus {
        kind: kind.to_string(),
        description: description.to_string(),
        targets: t.graphs.len(),
        changes,
        deployment_status_changes: status_writes(KCM_USER, "deployments", &t.deployments),
        dcd_reconciles: m1.reconciles(DCD) - m0.reconciles(DCD),
        dcd_status_writes: status_writes(OPERATOR_USER, "dynamocomponentdeployments", &t.dcds),
        dgd_reconciles: m1.reconciles(DGD) - m0.reconciles(DGD),
        dgd_status_writes: status_writes(OPERATOR_USER, "dynamographdeployments", &t.graphs),
        operator_writes: Tally::of(requests.of(OPERATOR_USER).filter(|r| r.is_write())),
    }
}
