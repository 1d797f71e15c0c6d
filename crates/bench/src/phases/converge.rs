//! Phase 1: apply every graph, wait until each is Ready, count what it took.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::{CONCURRENCY, Session, reconciles};
use crate::audit::{KCM_USER, Request, Requests, SCHEDULER_USER, Tally};
use crate::process::OPERATOR_USER;
use crate::report::Convergence;

impl Session<'_> {
    /// Phase 1: apply every graph, wait until each is Ready, count what it took.
    pub async fn converge(&mut self, timeout: Duration) -> anyhow::Result<Convergence> {
        let n = self.n();
        let m0 = self.metrics()?;
        let cpu0 = self.cpu();
        let mark = self.audit.mark();
        let t0 = Instant::now();
        let t0_unix = unix_now();
        self.say(&format!("applying {n} graphs"));
        let applied = self.apply_all().await?;
        let apply_seconds = t0.elapsed().as_secs_f64();
        self.say(&format!(
            "submitted in {apply_seconds:.1} s; waiting for Ready"
        ));

        let names: Vec<String> = self.graphs.iter().map(|g| g.name.clone()).collect();
        let all_ready = self.wait_ready(&names, t0, timeout).await?;
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
        let counted = self.counted(&requests).await?;
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
            cpu_seconds: cpu1
                .iter()
                .map(|(k, v)| (k.clone(), v - cpu0.get(k).copied().unwrap_or(0.0)))
                .collect(),
            reconciles: reconciles(&m0, &m1),
            ..counted
        })
    }

    /// Applies every graph; when each was accepted.
    async fn apply_all(&mut self) -> anyhow::Result<HashMap<String, Instant>> {
        let api = self.dgds();
        futures::stream::iter(self.graphs.clone())
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
            .await
    }

    /// Waits until every graph of `names` is Ready: when the last one first was, or `None` at
    /// the deadline (`t0 + timeout`).
    async fn wait_ready(
        &mut self,
        names: &[String],
        t0: Instant,
        timeout: Duration,
    ) -> anyhow::Result<Option<Instant>> {
        let n = names.len();
        let deadline = t0 + timeout;
        let mut reported = Instant::now();
        loop {
            self.operator.check_alive()?;
            let ready = self.readiness.ready(names);
            if ready == n {
                return Ok(Some(
                    self.readiness
                        .last_ready(names)
                        .unwrap_or_else(Instant::now),
                ));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            if reported.elapsed() > Duration::from_secs(15) {
                self.say(&format!(
                    "{ready}/{n} Ready after {:.0} s",
                    t0.elapsed().as_secs_f64()
                ));
                reported = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The operator's requests of the phase against the children it produced (the figures of
    /// a [`Convergence`] that come from the audit log and the namespace).
    async fn counted(&self, requests: &Requests) -> anyhow::Result<Convergence> {
        let n = self.n() as u64;
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
        Ok(Convergence {
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
            floor: children_total + n,
            floor_with_component_status: children_total + n + components,
            requests_by_user: requests.by_user.clone(),
            ..Convergence::default()
        })
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
}
