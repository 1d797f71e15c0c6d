//! Phase 6: for a while, every second toggle the replicas (r ⇄ r+1) of the next tenth of all
//! components; then wait until everything is Ready again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::{CONCURRENCY, Session, deployment_ready, reconciles};
use crate::audit::{Request, Tally};
use crate::metrics::{DCD, DGD};
use crate::process::OPERATOR_USER;
use crate::report::Churn;

/// (seconds since the start, DGD queue depth, DCD queue depth).
type Sample = (f64, u64, u64);

/// What the ticks sent.
#[derive(Default)]
struct Sent {
    ticks: u64,
    /// Ticks whose patches took longer than the tick.
    late: u64,
    scale_ops: u64,
    patches: u64,
}

/// The components toggled, (graph, component) in order, and which are scaled up now.
struct Toggles {
    components: Vec<(usize, usize)>,
    scaled: Vec<bool>,
    /// Components toggled per tick.
    slice: usize,
}

impl Session<'_> {
    /// Phase 6: for `duration`, every second toggle the replicas (r ⇄ r+1) of the next tenth of
    /// all components; then wait until everything is Ready again.
    pub async fn churn(&mut self, duration: Duration) -> anyhow::Result<Churn> {
        let components: Vec<(usize, usize)> = self
            .graphs
            .iter()
            .enumerate()
            .flat_map(|(g, graph)| (0..graph.replicas.len()).map(move |c| (g, c)))
            .collect();
        let slice = components.len().div_ceil(10).max(1);
        let mut toggles = Toggles {
            scaled: vec![false; components.len()],
            components,
            slice,
        };
        self.say(&format!(
            "churn: {slice} of {} components every second for {duration:?}",
            toggles.components.len()
        ));
        let events0 = self.event_reasons().await?;
        let m0 = self.metrics()?;
        let mark = self.audit.mark();
        let t0 = Instant::now();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sampler = self.sample(t0, samples.clone());
        let mut sent = Sent::default();
        let mut interval = tokio::time::interval(Duration::from_secs(1));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while t0.elapsed() < duration {
            interval.tick().await;
            self.tick(&mut toggles, &mut sent).await?;
        }
        let churn_end = Instant::now();
        let seconds = t0.elapsed().as_secs_f64();
        self.say(&format!(
            "churn: {} scale operations sent; waiting until everything is Ready",
            sent.scale_ops
        ));
        let reconverged = self.reconverge(churn_end).await?;
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
        let (dgd_queue_max, dgd_queue_mean) = stats(&samples, |s| s.1);
        let (dcd_queue_max, dcd_queue_mean) = stats(&samples, |s| s.2);
        Ok(Churn {
            seconds,
            ticks: sent.ticks,
            late_ticks: sent.late,
            scale_ops: sent.scale_ops,
            patches: sent.patches,
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

    /// Samples the operator's queue depths every 250 ms into `samples` until aborted.
    fn sample(&self, t0: Instant, samples: Arc<Mutex<Vec<Sample>>>) -> tokio::task::JoinHandle<()> {
        let scraper = self.operator.scraper();
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
    }

    /// One tick: toggles the next slice of components, one JSON patch per graph.
    async fn tick(&mut self, toggles: &mut Toggles, sent: &mut Sent) -> anyhow::Result<()> {
        let tick_start = Instant::now();
        let (components, slice) = (&toggles.components, toggles.slice);
        let window = (sent.ticks as usize % components.len().div_ceil(slice)) * slice;
        let mut per_graph: BTreeMap<usize, Vec<serde_json::Value>> = BTreeMap::new();
        let end = (window + slice).min(components.len());
        let toggled = components[window..end]
            .iter()
            .zip(&mut toggles.scaled[window..end]);
        for (&(g, c), scaled) in toggled {
            *scaled = !*scaled;
            let replicas = self.graphs[g].replicas[c] + i64::from(*scaled);
            per_graph.entry(g).or_default().push(json!({
                "op": "replace",
                "path": format!("/spec/components/{c}/replicas"),
                "value": replicas,
            }));
            sent.scale_ops += 1;
        }
        sent.patches += per_graph.len() as u64;
        let api = self.dgds();
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
            sent.late += 1;
        }
        sent.ticks += 1;
        Ok(())
    }

    /// Waits until every graph and Deployment is Ready again: seconds after `churn_end`, or
    /// `None` at the deadline.
    async fn reconverge(&mut self, churn_end: Instant) -> anyhow::Result<Option<f64>> {
        let names: Vec<String> = self.graphs.iter().map(|g| g.name.clone()).collect();
        let deadline = Instant::now() + Duration::from_secs(300 + self.n() as u64);
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        loop {
            self.operator.check_alive()?;
            if self.readiness.ready(&names) == names.len() {
                let list = deployments.list(&ListParams::default()).await?;
                if list.items.iter().all(deployment_ready) {
                    return Ok(Some(churn_end.elapsed().as_secs_f64()));
                }
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The maximum and mean of one field of the samples.
fn stats(samples: &[Sample], f: fn(&Sample) -> u64) -> (u64, f64) {
    let max = samples.iter().map(f).max().unwrap_or(0);
    let mean = if samples.is_empty() {
        0.0
    } else {
        samples.iter().map(f).sum::<u64>() as f64 / samples.len() as f64
    };
    (max, mean)
}
