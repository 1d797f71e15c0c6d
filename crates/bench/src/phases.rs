//! The measured phases of one run, against one control plane and one operator process:
//! convergence, no-op cost, amplification, churn (footprint is sampled between them).
//!
//! The bench acts as its own user (`bench`), so the audit log separates its requests from the
//! operator's. Between phases it waits for quiescence: the operator's queues empty, no reconcile
//! running, and no counter moving for a quiet window.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::audit::{AuditLog, KCM_USER, Request, Requests, SCHEDULER_USER, Tally};
use super::graphs::Graph;
use super::process::{DCD, DGD, Metrics, OPERATOR_USER, Operator};
use super::report::{Churn, Convergence, MACHINE, Noop, Reconciles, Stimulus};

/// Requests the bench keeps in flight while applying or patching graphs.
const CONCURRENCY: usize = 16;
/// How long nothing may move before a phase counts as settled.
const QUIET: Duration = Duration::from_secs(3);
/// An annotation no trigger looks at.
pub const IGNORED_ANNOTATION: &str = "bench.dynamo.example/touch";
/// An annotation the graph trigger honours whose value changes nothing for a graph on the
/// component pathway (the recorded provider wins).
pub const HONOURED_ANNOTATION: &str = api::labels::ENABLE_GROVE;

/// One run's shared state.
pub struct Session<'a> {
    pub client: Client,
    pub namespace: String,
    pub operator: &'a mut Operator,
    pub audit: AuditLog,
    pub graphs: Vec<Graph>,
    /// Processes whose CPU time is reported (control-plane components and the operator).
    pub processes: Vec<(String, u32)>,
    readiness: Readiness,
    label: String,
}

impl<'a> Session<'a> {
    pub fn new(
        client: Client,
        namespace: String,
        operator: &'a mut Operator,
        audit: AuditLog,
        graphs: Vec<Graph>,
        processes: Vec<(String, u32)>,
    ) -> Self {
        let readiness = Readiness::start(client.clone(), &namespace);
        let label = format!("N={}", graphs.len());
        Self {
            client,
            namespace,
            operator,
            audit,
            graphs,
            processes,
            readiness,
            label,
        }
    }

    fn n(&self) -> usize {
        self.graphs.len()
    }

    fn say(&self, message: &str) {
        eprintln!("[bench {}] {message}", self.label);
    }

    fn metrics(&self) -> anyhow::Result<Metrics> {
        self.operator.metrics()
    }

    fn dgds(&self) -> Api<DynamicObject> {
        crate::cluster::dgds(&self.client, &self.namespace)
    }

    /// CPU seconds of every watched process now.
    /// The whole machine's busy time is included as [`MACHINE`].
    pub fn cpu(&self) -> BTreeMap<String, f64> {
        let mut cpu: BTreeMap<String, f64> = self
            .processes
            .iter()
            .map(|(name, pid)| (name.clone(), super::process::cpu_seconds(*pid)))
            .collect();
        cpu.insert(MACHINE.to_string(), super::process::machine_busy_seconds());
        cpu
    }

    /// Waits until the operator is quiet for [`QUIET`]; false at the deadline.
    pub async fn settle(&mut self, timeout: Duration) -> anyhow::Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        let mut since = Instant::now();
        loop {
            self.operator.check_alive()?;
            let m = self.metrics()?;
            let activity = m.activity();
            if m.idle() && last == Some(activity) {
                if since.elapsed() >= QUIET {
                    return Ok(true);
                }
            } else {
                last = Some(activity);
                since = Instant::now();
            }
            if Instant::now() > deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Phase 1: apply every graph, wait until each is Ready, count what it took.
    pub async fn converge(&mut self, timeout: Duration) -> anyhow::Result<Convergence> {
        let n = self.n();
        let m0 = self.metrics()?;
        let cpu0 = self.cpu();
        let mark = self.audit.mark();
        let t0 = Instant::now();
        let t0_unix = unix_now();
        self.say(&format!("applying {n} graphs"));

        let api = self.dgds();
        let applied: HashMap<String, Instant> = futures::stream::iter(self.graphs.clone())
            .map(|g| {
                let api = api.clone();
                async move {
                    let object = api
                        .patch(
                            &g.name,
                            &PatchParams::apply("bench").force(),
                            &Patch::Apply(&g.manifest),
                        )
                        .await
                        .with_context(|| format!("applying {}", g.name))?;
                    Ok::<_, anyhow::Error>((g.name, object.metadata.generation, Instant::now()))
                }
            })
            .buffer_unordered(CONCURRENCY)
            .map_ok(|(name, generation, at)| {
                self.readiness.expect(&name, generation.unwrap_or(1));
                (name, at)
            })
            .try_collect()
            .await?;
        let apply_seconds = t0.elapsed().as_secs_f64();
        self.say(&format!(
            "submitted in {apply_seconds:.1} s; waiting for Ready"
        ));

        let deadline = t0 + timeout;
        let mut reported = Instant::now();
        let names: Vec<String> = self.graphs.iter().map(|g| g.name.clone()).collect();
        let all_ready = loop {
            self.operator.check_alive()?;
            let ready = self.readiness.ready(&names);
            if ready == n {
                break Some(
                    self.readiness
                        .last_ready(&names)
                        .unwrap_or_else(Instant::now),
                );
            }
            if Instant::now() > deadline {
                break None;
            }
            if reported.elapsed() > Duration::from_secs(15) {
                self.say(&format!(
                    "{ready}/{n} Ready after {:.0} s",
                    t0.elapsed().as_secs_f64()
                ));
                reported = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let seconds = all_ready.map(|at| at.duration_since(t0).as_secs_f64());
        match seconds {
            Some(s) => self.say(&format!("all {n} Ready after {s:.1} s; settling")),
            None => self.say(&format!(
                "{} of {n} Ready at the deadline ({timeout:?})",
                self.readiness.ready(&names)
            )),
        }
        if !self.settle(Duration::from_secs(600)).await? {
            self.say("the operator did not settle within 10 minutes");
        }
        let requests = self.audit.since(&mark).await?;
        let cpu1 = self.cpu();
        let m1 = self.metrics()?;

        let mut per_graph: Vec<f64> = names
            .iter()
            .filter_map(|name| {
                let ready = self.readiness.first_ready(name)?;
                let applied = applied.get(name)?;
                Some(ready.saturating_duration_since(*applied).as_secs_f64())
            })
            .collect();
        per_graph.sort_by(f64::total_cmp);
        let children = self.children().await?;
        let event_reasons = self.event_reasons().await?;
        let children_total = children.values().sum::<u64>();
        let components = children
            .get("DynamoComponentDeployment")
            .copied()
            .unwrap_or(0);

        let ops: Vec<&Request> = requests.of(OPERATOR_USER).collect();
        let mut status_writes = BTreeMap::new();
        for r in ops
            .iter()
            .filter(|r| r.is_write() && r.subresource == "status")
        {
            *status_writes.entry(r.resource.clone()).or_default() += 1;
        }
        let timeline = timeline(&requests, t0_unix, seconds, apply_seconds);
        Ok(Convergence {
            seconds,
            apply_seconds,
            ready: self.readiness.ready(&names),
            not_ready: self
                .readiness
                .not_ready(&names)
                .into_iter()
                .take(20)
                .collect(),
            per_graph_seconds: [
                percentile(&per_graph, 0.5),
                percentile(&per_graph, 0.9),
                percentile(&per_graph, 1.0),
            ],
            timeline,
            operator_requests: Tally::of(ops.iter().copied()),
            writes: ops.iter().filter(|r| r.is_write() && !r.is_event()).count() as u64,
            events: ops.iter().filter(|r| r.is_write() && r.is_event()).count() as u64,
            event_reasons,
            reads: ops.iter().filter(|r| r.is_read()).count() as u64,
            watches: ops.iter().filter(|r| r.verb == "watch").count() as u64,
            created: ops.iter().filter(|r| r.created() && !r.is_event()).count() as u64,
            children,
            children_total,
            status_writes,
            floor: children_total + n as u64,
            floor_with_component_status: children_total + n as u64 + components,
            requests_by_user: requests.by_user.clone(),
            cpu_seconds: cpu1
                .iter()
                .map(|(k, v)| (k.clone(), v - cpu0.get(k).copied().unwrap_or(0.0)))
                .collect(),
            reconciles: reconciles(&m0, &m1),
        })
    }

    /// Occurrences of the operator's Events in the namespace, by reason.
    async fn event_reasons(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut out = BTreeMap::new();
        for e in api.list(&ListParams::default()).await?.items {
            if e.reporting_controller.as_deref() != Some("dynamo-operator") {
                continue;
            }
            let count = e
                .series
                .as_ref()
                .map_or(1, |s| u64::try_from(s.count).unwrap_or(1));
            *out.entry(e.reason.unwrap_or_default()).or_default() += count;
        }
        Ok(out)
    }

    /// Objects in the namespace controlled by a graph or a component, by kind.
    async fn children(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        let ns = &self.namespace;
        let c = &self.client;
        for (kind, count) in [
            owned::<api::DynamoComponentDeployment>(c, ns).await?,
            owned::<api::DynamoGraphDeploymentScalingAdapter>(c, ns).await?,
            owned::<Deployment>(c, ns).await?,
            owned::<Service>(c, ns).await?,
            owned::<ServiceAccount>(c, ns).await?,
            owned::<Role>(c, ns).await?,
            owned::<RoleBinding>(c, ns).await?,
            owned::<ConfigMap>(c, ns).await?,
            owned::<Secret>(c, ns).await?,
            owned::<PersistentVolumeClaim>(c, ns).await?,
            owned::<Job>(c, ns).await?,
        ] {
            if count > 0 {
                out.insert(kind, count);
            }
        }
        Ok(out)
    }

    /// Phase 2: set `annotation` on every graph; `expected` graph reconciles should follow, and
    /// no write.
    pub async fn noop(
        &mut self,
        kind: &str,
        annotation: &str,
        value: &str,
        expected: u64,
    ) -> anyhow::Result<Noop> {
        self.say(&format!(
            "no-op: {kind} annotation {annotation} on every graph"
        ));
        let m0 = self.metrics()?;
        let mark = self.audit.mark();
        let patch = json!({ "metadata": { "annotations": { annotation: value } } });
        self.patch_all(&patch).await?;
        // Honoured: wait for the reconciles to happen, then for quiet.
        let deadline = Instant::now() + Duration::from_secs(120 + self.n() as u64 / 2);
        while self.metrics()?.reconciles(DGD) < m0.reconciles(DGD) + expected
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.settle(Duration::from_secs(300)).await?;
        let requests = self.audit.since(&mark).await?;
        let m1 = self.metrics()?;
        let ops: Vec<&Request> = requests
            .of(OPERATOR_USER)
            .filter(|r| r.verb != "watch")
            .collect();
        Ok(Noop {
            kind: kind.to_string(),
            annotation: annotation.to_string(),
            expected_dgd_reconciles: expected,
            reconciles: reconciles(&m0, &m1),
            writes: ops.iter().filter(|r| r.is_write() && !r.is_event()).count() as u64,
            events: ops.iter().filter(|r| r.is_write() && r.is_event()).count() as u64,
            reads: ops.iter().filter(|r| r.is_read()).count() as u64,
            requests: Tally::of(ops.iter().copied()),
        })
    }

    async fn patch_all(&self, patch: &serde_json::Value) -> anyhow::Result<()> {
        let api = self.dgds();
        futures::stream::iter(self.graphs.iter().map(|g| g.name.clone()))
            .map(|name| {
                let api = api.clone();
                async move {
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .with_context(|| format!("patching {name}"))
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_for_each(|_| async { Ok(()) })
            .await
    }

    /// Phase 3: change children of a few graphs, irrelevantly then relevantly, and count the
    /// parent reconciles.
    pub async fn amplification(&mut self) -> anyhow::Result<Vec<Stimulus>> {
        let k = self.n().min(5);
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
        let summary = Targets {
            graphs: targets.iter().map(|t| t.0.clone()).collect(),
            deployments: targets.iter().map(|t| t.1.name_any()).collect(),
            dcds: targets.iter().map(|t| t.2.clone()).collect(),
        };
        let dcds: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &ApiResource::erase::<api::DynamoComponentDeployment>(&()),
        );
        let mut out = Vec::new();

        // Irrelevant: a status field no trigger reads, a label on the Deployment, an annotation
        // on its component (a Deployment's annotations would bump its generation).
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
        out.push(stimulus(
            "irrelevant",
            "Deployment `status.collisionCount` and a label, an annotation on its component",
            3 * targets.len() as u64,
            &summary,
            &requests,
            &m0,
            &m1,
        ));

        // Relevant: with every node cordoned, one Pod of each target dies; its replacement
        // stays Pending, so the Deployment loses availability (and the graph its readiness)
        // until the nodes are uncordoned.
        self.say("amplification: one Pod of each target deleted, nodes cordoned");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let names: Vec<String> = summary.graphs.iter().cloned().collect();
        self.cordon(true).await?;
        let m0 = self.metrics()?;
        let mark = self.audit.mark();
        let mut deleted = Vec::new();
        for (_, d, _) in &targets {
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
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let mut done = self.readiness.ready(&names) == names.len();
            for (name, selector, uid) in &deleted {
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
                break;
            }
            if Instant::now() > deadline {
                self.say("amplification: the targets did not recover within 3 minutes");
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.settle(Duration::from_secs(120)).await?;
        let requests = self.audit.since(&mark).await?;
        let m1 = self.metrics()?;
        out.push(stimulus(
            "relevant",
            "one Pod of the Deployment deleted while every node is cordoned (availability lost), then the nodes uncordoned (regained)",
            deleted.len() as u64,
            &summary,
            &requests,
            &m0,
            &m1,
        ));
        Ok(out)
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

    /// Phase 5: for `duration`, every second toggle the replicas (r ⇄ r+1) of the next tenth of
    /// all components; then wait until everything is Ready again.
    pub async fn churn(&mut self, duration: Duration) -> anyhow::Result<Churn> {
        let components: Vec<(usize, usize)> = self
            .graphs
            .iter()
            .enumerate()
            .flat_map(|(g, graph)| (0..graph.replicas.len()).map(move |c| (g, c)))
            .collect();
        let slice = components.len().div_ceil(10).max(1);
        let mut scaled = vec![false; components.len()];
        self.say(&format!(
            "churn: {slice} of {} components every second for {duration:?}",
            components.len()
        ));
        let events0 = self.event_reasons().await?;
        let m0 = self.metrics()?;
        let mark = self.audit.mark();
        let t0 = Instant::now();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sampler = {
            let scraper = self.operator.scraper();
            let samples = samples.clone();
            tokio::spawn(async move {
                loop {
                    if let Ok(m) = scraper.scrape() {
                        samples.lock().expect("samples").push((
                            t0.elapsed().as_secs_f64(),
                            m.depth(DGD),
                            m.depth(DCD),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let api = self.dgds();
        let mut ticks = 0u64;
        let mut late = 0u64;
        let mut scale_ops = 0u64;
        let mut patches = 0u64;
        let mut interval = tokio::time::interval(Duration::from_secs(1));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while t0.elapsed() < duration {
            interval.tick().await;
            let tick_start = Instant::now();
            let window = (ticks as usize % components.len().div_ceil(slice)) * slice;
            let mut per_graph: BTreeMap<usize, Vec<serde_json::Value>> = BTreeMap::new();
            for i in window..(window + slice).min(components.len()) {
                let (g, c) = components[i];
                scaled[i] = !scaled[i];
                let replicas = self.graphs[g].replicas[c] + i64::from(scaled[i]);
                per_graph.entry(g).or_default().push(json!({
                    "op": "replace",
                    "path": format!("/spec/components/{c}/replicas"),
                    "value": replicas,
                }));
                scale_ops += 1;
            }
            patches += per_graph.len() as u64;
            let results: Vec<(String, Option<i64>)> =
                futures::stream::iter(per_graph.into_iter().map(|(g, ops)| {
                    let api = api.clone();
                    let name = self.graphs[g].name.clone();
                    async move {
                        let patch: json_patch::Patch = serde_json::from_value(json!(ops))?;
                        let object = api
                            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                            .await
                            .with_context(|| format!("scaling {name}"))?;
                        Ok::<_, anyhow::Error>((name, object.metadata.generation))
                    }
                }))
                .buffer_unordered(CONCURRENCY * 4)
                .try_collect()
                .await?;
            for (name, generation) in results {
                self.readiness.expect(&name, generation.unwrap_or(0));
            }
            if tick_start.elapsed() > Duration::from_secs(1) {
                late += 1;
            }
            ticks += 1;
        }
        let churn_end = Instant::now();
        let seconds = t0.elapsed().as_secs_f64();
        self.say(&format!(
            "churn: {scale_ops} scale operations sent; waiting until everything is Ready"
        ));
        let names: Vec<String> = self.graphs.iter().map(|g| g.name.clone()).collect();
        let deadline = Instant::now() + Duration::from_secs(300 + self.n() as u64);
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let reconverged = loop {
            self.operator.check_alive()?;
            if self.readiness.ready(&names) == names.len() {
                let list = deployments.list(&ListParams::default()).await?;
                if list.items.iter().all(deployment_ready) {
                    break Some(churn_end.elapsed().as_secs_f64());
                }
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        self.settle(Duration::from_secs(600)).await?;
        sampler.abort();
        let requests = self.audit.since(&mark).await?;
        let m1 = self.metrics()?;
        let mut event_reasons = self.event_reasons().await?;
        for (reason, count) in event_reasons.iter_mut() {
            *count -= events0.get(reason).copied().unwrap_or(0).min(*count);
        }
        event_reasons.retain(|_, c| *c > 0);
        let ops: Vec<&Request> = requests
            .of(OPERATOR_USER)
            .filter(|r| r.verb != "watch")
            .collect();
        let samples = samples.lock().expect("samples").clone();
        let stats = |f: fn(&(f64, u64, u64)) -> u64| {
            let max = samples.iter().map(f).max().unwrap_or(0);
            let mean = if samples.is_empty() {
                0.0
            } else {
                samples.iter().map(f).sum::<u64>() as f64 / samples.len() as f64
            };
            (max, mean)
        };
        let (dgd_queue_max, dgd_queue_mean) = stats(|s| s.1);
        let (dcd_queue_max, dcd_queue_mean) = stats(|s| s.2);
        Ok(Churn {
            seconds,
            ticks,
            late_ticks: late,
            scale_ops,
            patches,
            reconverge_seconds: reconverged,
            reconciles: reconciles(&m0, &m1),
            requests: Tally::of(ops.iter().copied()),
            writes: ops.iter().filter(|r| r.is_write() && !r.is_event()).count() as u64,
            events: ops.iter().filter(|r| r.is_write() && r.is_event()).count() as u64,
            reads: ops.iter().filter(|r| r.is_read()).count() as u64,
            event_reasons,
            dgd_queue_max,
            dgd_queue_mean,
            dcd_queue_max,
            dcd_queue_mean,
            samples,
        })
    }

    /// Graphs not Ready at their latest generation.
    pub fn not_ready(&self) -> Vec<String> {
        let names: Vec<String> = self.graphs.iter().map(|g| g.name.clone()).collect();
        self.readiness.not_ready(&names)
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.readiness.task.abort();
    }
}

/// The targets of a stimulus: graphs, their Deployments and components.
struct Targets {
    graphs: BTreeSet<String>,
    deployments: BTreeSet<String>,
    dcds: BTreeSet<String>,
}

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

/// Every replica there, updated, ready and available, at the latest generation.
fn deployment_ready(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(s) = &d.status else {
        return false;
    };
    s.observed_generation >= d.metadata.generation
        && s.replicas.unwrap_or(0) == want
        && s.updated_replicas.unwrap_or(0) == want
        && s.ready_replicas.unwrap_or(0) == want
        && s.available_replicas.unwrap_or(0) == want
}

fn reconciles(m0: &Metrics, m1: &Metrics) -> Reconciles {
    Reconciles {
        dgd: m1.reconciles(DGD).saturating_sub(m0.reconciles(DGD)),
        dcd: m1.reconciles(DCD).saturating_sub(m0.reconciles(DCD)),
        errors: (m1.errors(DGD) + m1.errors(DCD)).saturating_sub(m0.errors(DGD) + m0.errors(DCD)),
    }
}

/// Milestones of a convergence, in seconds after its first apply.
fn timeline(
    requests: &Requests,
    t0_unix: f64,
    all_ready: Option<f64>,
    apply_seconds: f64,
) -> BTreeMap<String, f64> {
    let last = |user: &str, pred: &dyn Fn(&Request) -> bool| {
        requests
            .of(user)
            .filter(|r| pred(r))
            .map(|r| r.received - t0_unix)
            .fold(None, |acc: Option<f64>, v| {
                Some(acc.map_or(v, |a| a.max(v)))
            })
    };
    let first = |user: &str, pred: &dyn Fn(&Request) -> bool| {
        requests
            .of(user)
            .filter(|r| pred(r))
            .map(|r| r.received - t0_unix)
            .fold(None, |acc: Option<f64>, v| {
                Some(acc.map_or(v, |a| a.min(v)))
            })
    };
    let mut t = BTreeMap::new();
    t.insert("bench: last graph submitted".to_string(), apply_seconds);
    let mut put = |k: &str, v: Option<f64>| {
        if let Some(v) = v {
            t.insert(k.to_string(), v);
        }
    };
    put(
        "operator: first write",
        first(OPERATOR_USER, &|r| r.is_write() && !r.is_event()),
    );
    put(
        "operator: last child created",
        last(OPERATOR_USER, &|r| r.created() && !r.is_event()),
    );
    put(
        "operator: last write",
        last(OPERATOR_USER, &|r| r.is_write() && !r.is_event()),
    );
    put(
        "controller-manager: last Pod created",
        last(KCM_USER, &|r| {
            r.verb == "create" && r.resource == "pods" && r.subresource.is_empty()
        }),
    );
    put(
        "scheduler: last Pod bound",
        last(SCHEDULER_USER, &|r| {
            r.verb == "create" && r.resource == "pods" && r.subresource == "binding"
        }),
    );
    put(
        "controller-manager: last Deployment status",
        last(KCM_USER, &|r| {
            r.is_write() && r.resource == "deployments" && r.subresource == "status"
        }),
    );
    put("bench: last graph seen Ready", all_ready);
    t
}

/// The `q` quantile of sorted values (nearest rank).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The kind and count of `K` objects in `ns` controlled by a Dynamo object.
async fn owned<K>(client: &Client, ns: &str) -> anyhow::Result<(String, u64)>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let list = api.list_metadata(&ListParams::default()).await?;
    let count = list
        .items
        .iter()
        .filter(|o| {
            o.metadata.owner_references.iter().flatten().any(|r| {
                r.controller == Some(true) && r.api_version.starts_with(&format!("{}/", api::GROUP))
            })
        })
        .count() as u64;
    Ok((K::kind(&()).to_string(), count))
}

/// What the bench's watch has seen of each graph.
#[derive(Default)]
struct Seen {
    generation: i64,
    observed: i64,
    ready: bool,
    /// At least this generation must be observed (the bench's own last write).
    expected: i64,
    first_ready: Option<Instant>,
}

impl Seen {
    fn ready_now(&self) -> bool {
        self.ready && self.observed >= self.generation && self.observed >= self.expected
    }
}

/// A watch on the graphs of a namespace: which are Ready at their latest generation, and when
/// each first was.
struct Readiness {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Readiness {
    fn start(client: Client, namespace: &str) -> Self {
        let seen: Arc<Mutex<HashMap<String, Seen>>> = Arc::default();
        let api: Api<api::DynamoGraphDeployment> = Api::namespaced(client, namespace);
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut stream = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
                    .boxed();
                while let Some(item) = stream.next().await {
                    let Ok(dgd) = item else { continue };
                    let status = dgd.status.clone().unwrap_or_default();
                    let ready =
                        kit::conditions::is_true(&status.conditions, kit::conditions::READY);
                    let mut seen = seen.lock().expect("readiness");
                    let s = seen.entry(dgd.name_any()).or_default();
                    s.generation = dgd.metadata.generation.unwrap_or(0);
                    s.observed = status.observed_generation.unwrap_or(0);
                    s.ready = ready;
                    if s.ready_now() {
                        s.first_ready.get_or_insert_with(Instant::now);
                    }
                }
            })
        };
        Self { seen, task }
    }

    fn expect(&self, name: &str, generation: i64) {
        let mut seen = self.seen.lock().expect("readiness");
        let s = seen.entry(name.to_string()).or_default();
        s.expected = s.expected.max(generation);
    }

    fn ready(&self, names: &[String]) -> usize {
        let seen = self.seen.lock().expect("readiness");
        names
            .iter()
            .filter(|n| seen.get(*n).is_some_and(Seen::ready_now))
            .count()
    }

    fn not_ready(&self, names: &[String]) -> Vec<String> {
        let seen = self.seen.lock().expect("readiness");
        names
            .iter()
            .filter(|n| !seen.get(*n).is_some_and(Seen::ready_now))
            .cloned()
            .collect()
    }

    fn first_ready(&self, name: &str) -> Option<Instant> {
        self.seen.lock().expect("readiness").get(name)?.first_ready
    }

    /// The latest first-Ready time among `names`.
    fn last_ready(&self, names: &[String]) -> Option<Instant> {
        let seen = self.seen.lock().expect("readiness");
        names.iter().filter_map(|n| seen.get(n)?.first_ready).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(percentile(&v, 0.5), 5.0);
        assert_eq!(percentile(&v, 0.9), 9.0);
        assert_eq!(percentile(&v, 1.0), 10.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn readiness_needs_the_expected_generation() {
        let mut s = Seen {
            generation: 2,
            observed: 2,
            ready: true,
            expected: 3,
            ..Default::default()
        };
        assert!(!s.ready_now());
        s.generation = 3;
        s.observed = 3;
        assert!(s.ready_now());
        s.ready = false;
        assert!(!s.ready_now());
    }
}
