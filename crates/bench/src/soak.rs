//! The soak phase of `cargo xtask bench` and `cargo xtask reliability`: cycles of create → Ready →
//! delete → gone, with new graph names every cycle, and the operator's resident memory after
//! each. Memory the operator keeps per graph it has ever seen grows from cycle to cycle; memory it
//! needs for what exists does not. The phase fails when the resident set after the last cycle is
//! more than [`MAX_GROWTH`] above the one after the first.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::process::{cpu_seconds, usage};

/// How much the resident set may grow from the first cycle to the last (allocator noise).
pub const MAX_GROWTH: f64 = 0.10;
/// Requests kept in flight while applying or deleting graphs.
const CONCURRENCY: usize = 16;

/// How many cycles of how many graphs, and how long one may take to be Ready or gone.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub cycles: usize,
    pub graphs: usize,
    pub timeout: Duration,
}

/// One cycle's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Cycle {
    /// Apply to every graph Ready.
    pub ready_seconds: f64,
    /// Delete to every graph and child gone.
    pub gone_seconds: f64,
    /// The operator's resident set with every graph of the cycle Ready (MiB).
    pub rss_converged_mib: f64,
    /// Its resident set once everything is gone and the operator is quiet (MiB).
    pub rss_after_mib: f64,
}

/// The phase's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Soak {
    pub graphs_per_cycle: usize,
    /// The operator's resident set before the first cycle (MiB).
    pub rss_before_mib: f64,
    pub cycles: Vec<Cycle>,
}

impl Soak {
    /// The resident set after the last cycle relative to after the first (0.05: 5 % more).
    pub fn growth(&self) -> f64 {
        match (self.cycles.first(), self.cycles.last()) {
            (Some(first), Some(last)) if first.rss_after_mib > 0.0 => {
                last.rss_after_mib / first.rss_after_mib - 1.0
            }
            _ => 0.0,
        }
    }

    /// Why the phase fails, if it does.
    pub fn failure(&self) -> Option<String> {
        (self.growth() > MAX_GROWTH).then(|| {
            format!(
                "the operator's memory grew {:.1} % from the first soak cycle to the last (at most {:.0} %): {}",
                self.growth() * 100.0,
                MAX_GROWTH * 100.0,
                self.rss_line()
            )
        })
    }

    /// `before → after cycle 1 → ... MiB`.
    pub fn rss_line(&self) -> String {
        let after: Vec<String> = self
            .cycles
            .iter()
            .map(|c| format!("{:.1}", c.rss_after_mib))
            .collect();
        format!(
            "{:.1} MiB before, after each cycle {} MiB",
            self.rss_before_mib,
            after.join(" → ")
        )
    }
}

/// Runs the cycles in `namespace` (which must hold nothing else) against the operator `pid`;
/// `graph(cycle, i)` is the manifest of graph `i` of `cycle` (a v1beta1 DynamoGraphDeployment
/// whose name is new each cycle).
pub async fn run(
    client: &Client,
    namespace: &str,
    pid: u32,
    plan: Plan,
    graph: impl Fn(usize, usize) -> Value,
) -> anyhow::Result<Soak> {
    let graphs = crate::cluster::dgds(client, namespace);
    quiet(pid).await;
    let mut soak = Soak {
        graphs_per_cycle: plan.graphs,
        rss_before_mib: usage(pid).rss_mib,
        cycles: Vec::new(),
    };
    for cycle in 0..plan.cycles {
        let manifests: Vec<Value> = (0..plan.graphs).map(|i| graph(cycle, i)).collect();
        let started = Instant::now();
        futures::stream::iter(manifests.iter().cloned())
            .map(|m| apply(&graphs, m))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        wait(plan.timeout, "every soak graph Ready", || {
            all_ready(&graphs, plan.graphs)
        })
        .await?;
        let ready_seconds = started.elapsed().as_secs_f64();
        quiet(pid).await;
        let rss_converged_mib = usage(pid).rss_mib;

        let gone_seconds = clear(client, namespace, plan.timeout).await?;
        quiet(pid).await;
        let figures = Cycle {
            ready_seconds,
            gone_seconds,
            rss_converged_mib,
            rss_after_mib: usage(pid).rss_mib,
        };
        eprintln!(
            "[soak] cycle {}/{}: {} graphs Ready in {:.0} s, gone in {:.0} s; RSS {:.1} MiB converged, {:.1} MiB after",
            cycle + 1,
            plan.cycles,
            plan.graphs,
            figures.ready_seconds,
            figures.gone_seconds,
            figures.rss_converged_mib,
            figures.rss_after_mib
        );
        soak.cycles.push(figures);
    }
    Ok(soak)
}

/// Deletes every graph of `namespace` and waits until no graph, component, Deployment, Service
/// or Pod is left there; returns how long that took (seconds).
pub async fn clear(client: &Client, namespace: &str, timeout: Duration) -> anyhow::Result<f64> {
    let deleting = Instant::now();
    crate::cluster::dgds(client, namespace)
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await
        .with_context(|| format!("deleting the graphs of {namespace}"))?;
    wait(timeout, "every graph and child gone", || {
        nothing_left(client, namespace)
    })
    .await?;
    Ok(deleting.elapsed().as_secs_f64())
}

async fn apply(graphs: &Api<DynamicObject>, manifest: Value) -> anyhow::Result<()> {
    let name = manifest["metadata"]["name"]
        .as_str()
        .context("a soak graph without a name")?
        .to_string();
    graphs
        .patch(
            &name,
            &PatchParams::apply("soak").force(),
            &Patch::Apply(&manifest),
        )
        .await
        .with_context(|| format!("applying {name}"))?;
    Ok(())
}

/// Whether `expected` graphs exist and each is Ready at its latest generation.
async fn all_ready(graphs: &Api<DynamicObject>, expected: usize) -> anyhow::Result<bool> {
    let list = graphs.list(&ListParams::default()).await?;
    let ready = list
        .items
        .iter()
        .filter(|g| {
            let status = &g.data["status"];
            let observed = status["observedGeneration"].as_i64();
            let ready = status["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            ready && observed == g.metadata.generation
        })
        .count();
    Ok(list.items.len() == expected && ready == expected)
}

/// Whether the namespace holds no graph, component, Deployment, Service or Pod any more.
async fn nothing_left(client: &Client, namespace: &str) -> anyhow::Result<bool> {
    async fn none<K>(client: &Client, namespace: &str) -> anyhow::Result<bool>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        Ok(api
            .list_metadata(&ListParams::default().limit(1))
            .await?
            .items
            .is_empty())
    }
    Ok(crate::cluster::dgds(client, namespace)
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .items
        .is_empty()
        && none::<api::DynamoComponentDeployment>(client, namespace).await?
        && none::<Deployment>(client, namespace).await?
        && none::<Service>(client, namespace).await?
        && none::<Pod>(client, namespace).await?)
}

async fn wait<F, Fut>(timeout: Duration, what: &str, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    while !done().await? {
        if Instant::now() > deadline {
            bail!("soak: {what} did not happen within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Waits until the operator used no CPU for two seconds (at most a minute).
pub async fn quiet(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = cpu_seconds(pid);
    let mut still = 0;
    while still < 4 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = cpu_seconds(pid);
        still = if now - last < 0.02 { still + 1 } else { 0 };
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soak(after: &[f64]) -> Soak {
        Soak {
            graphs_per_cycle: 10,
            rss_before_mib: 30.0,
            cycles: after
                .iter()
                .map(|a| Cycle {
                    rss_after_mib: *a,
                    ..Cycle::default()
                })
                .collect(),
        }
    }

    #[test]
    fn growth_compares_the_last_cycle_with_the_first() {
        assert!(soak(&[100.0, 104.0, 109.0]).failure().is_none());
        let leak = soak(&[100.0, 140.0, 180.0]);
        assert!((leak.growth() - 0.8).abs() < 1e-9);
        assert!(leak.failure().unwrap().contains("80.0 %"));
        assert!(soak(&[]).failure().is_none());
    }
}
