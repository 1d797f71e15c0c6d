//! The measured phases of one run, against one control plane and one operator process:
//! convergence, no-op cost, amplification, churn (footprint is sampled between them).
//!
//! The bench acts as its own user (`bench`), so the audit log separates its requests from the
//! operator's. Between phases it waits for quiescence: the operator's queues empty, no reconcile
//! running, and no counter moving for a quiet window.

mod amplification;
mod churn;
mod converge;
mod readiness;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::audit::{AuditLog, Request, Tally};
use crate::graphs::Graph;
use crate::metrics::{DCD, DGD, Metrics};
use crate::process::{OPERATOR_USER, Operator};
use crate::report::{MACHINE, Noop, Reconciles};

use self::readiness::Readiness;

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
            .map(|(name, pid)| (name.clone(), crate::process::cpu_seconds(*pid)))
            .collect();
        cpu.insert(MACHINE.to_string(), crate::process::machine_busy_seconds());
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

    /// Phase 3: set `annotation` on every graph; `expected` graph reconciles should follow, and
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

/// Every replica there, updated, ready and available, at the latest generation.
pub(crate) fn deployment_ready(d: &Deployment) -> bool {
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

/// Reconciles between two scrapes.
fn reconciles(m0: &Metrics, m1: &Metrics) -> Reconciles {
    Reconciles {
        dgd: m1.reconciles(DGD).saturating_sub(m0.reconciles(DGD)),
        dcd: m1.reconciles(DCD).saturating_sub(m0.reconciles(DCD)),
        errors: (m1.errors(DGD) + m1.errors(DCD)).saturating_sub(m0.errors(DGD) + m0.errors(DCD)),
    }
}
