//! Prometheus metrics under controller-runtime's names, so existing dashboards and alerts work:
//! `controller_runtime_reconcile_total{controller,result}`,
//! `controller_runtime_reconcile_errors_total{controller}`,
//! `controller_runtime_reconcile_time_seconds{controller}`,
//! `controller_runtime_active_workers{controller}`, `controller_runtime_max_concurrent_reconciles`,
//! `workqueue_adds_total{name}`, `workqueue_depth{name}`, plus `leader_election_master_status`.
//!
//! `workqueue_depth` counts the distinct objects a watch trigger enqueued that have not started
//! reconciling yet (requeue timers are not included: they wait by design).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabel {
    name: String,
}

/// The operator's metrics registry.
pub struct Metrics {
    registry: Registry,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabel, Counter>,
    reconcile_time: Family<ControllerLabel, Histogram>,
    active_workers: Family<ControllerLabel, Gauge>,
    max_concurrent: Family<ControllerLabel, Gauge>,
    queue_adds: Family<QueueLabel, Counter>,
    queue_depth: Family<QueueLabel, Gauge>,
    leader: Family<LeaseLabel, Gauge>,
}

/// How a reconcile ended, as controller-runtime labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; wait for the next change.
    Success,
    /// Done; look again after a delay the reconcile asked for.
    RequeueAfter,
    /// Failed; retried with backoff (or on the next change).
    Error,
}

impl ReconcileResult {
    fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::RequeueAfter => "requeue_after",
            Self::Error => "error",
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconcile_total = Family::<ResultLabels, Counter>::default();
        let reconcile_errors = Family::<ControllerLabel, Counter>::default();
        let reconcile_time = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        let active_workers = Family::<ControllerLabel, Gauge>::default();
        let max_concurrent = Family::<ControllerLabel, Gauge>::default();
        let queue_adds = Family::<QueueLabel, Counter>::default();
        let queue_depth = Family::<QueueLabel, Gauge>::default();
        let leader = Family::<LeaseLabel, Gauge>::default();
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            reconcile_total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            active_workers.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            max_concurrent.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            queue_adds.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            queue_depth.clone(),
        );
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            leader.clone(),
        );
        Metrics {
            registry,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            active_workers,
            max_concurrent,
            queue_adds,
            queue_depth,
            leader,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding into a String cannot fail");
        out
    }

    /// The instruments of one controller.
    pub fn controller(self: &Arc<Self>, name: &str, concurrency: u16) -> ControllerMetrics {
        self.max_concurrent
            .get_or_create(&ControllerLabel {
                controller: name.to_string(),
            })
            .set(i64::from(concurrency));
        ControllerMetrics {
            metrics: self.clone(),
            name: name.to_string(),
            pending: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Record whether this replica holds `lease`.
    pub fn set_leader(&self, lease: &str, leader: bool) {
        self.leader
            .get_or_create(&LeaseLabel {
                name: lease.to_string(),
            })
            .set(i64::from(leader));
    }
}

/// One controller's instruments.
#[derive(Clone)]
pub struct ControllerMetrics {
    metrics: Arc<Metrics>,
    name: String,
    pending: Arc<Mutex<HashSet<String>>>,
}

impl ControllerMetrics {
    fn label(&self) -> ControllerLabel {
        ControllerLabel {
            controller: self.name.clone(),
        }
    }

    /// A watch trigger enqueued `key` (namespace/name of the primary object).
    pub fn enqueued(&self, key: String) {
        self.metrics
            .queue_adds
            .get_or_create(&QueueLabel {
                name: self.name.clone(),
            })
            .inc();
        let mut pending = self.pending.lock().expect("metrics lock");
        pending.insert(key);
        self.set_depth(pending.len());
    }

    fn set_depth(&self, depth: usize) {
        self.metrics
            .queue_depth
            .get_or_create(&QueueLabel {
                name: self.name.clone(),
            })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// `key` left the queue without a reconcile (its object is gone, or belongs to another
    /// instance).
    pub fn dequeued(&self, key: &str) {
        let mut pending = self.pending.lock().expect("metrics lock");
        if pending.remove(key) {
            self.set_depth(pending.len());
        }
    }

    /// A reconcile of `key` starts; the returned guard records its duration and result.
    pub fn start(&self, key: &str) -> ReconcileTimer {
        self.dequeued(key);
        self.metrics
            .active_workers
            .get_or_create(&self.label())
            .inc();
        ReconcileTimer {
            metrics: self.clone(),
            started: Instant::now(),
            finished: false,
        }
    }
}

/// Measures one reconcile; call [`ReconcileTimer::finish`] with its result.
pub struct ReconcileTimer {
    metrics: ControllerMetrics,
    started: Instant,
    finished: bool,
}

impl ReconcileTimer {
    pub fn finish(mut self, result: ReconcileResult) {
        self.record(result);
    }

    fn record(&mut self, result: ReconcileResult) {
        if self.finished {
            return;
        }
        self.finished = true;
        let m = &self.metrics;
        m.metrics.active_workers.get_or_create(&m.label()).dec();
        m.metrics
            .reconcile_time
            .get_or_create(&m.label())
            .observe(self.started.elapsed().as_secs_f64());
        m.metrics
            .reconcile_total
            .get_or_create(&ResultLabels {
                controller: m.name.clone(),
                result: result.as_str().to_string(),
            })
            .inc();
        if result == ReconcileResult::Error {
            m.metrics.reconcile_errors.get_or_create(&m.label()).inc();
        }
    }
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        // A reconcile future dropped mid-way (shutdown) counts as an error.
        self.record(ReconcileResult::Error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_controller_runtime_names() {
        let metrics = Arc::new(Metrics::new());
        let dgd = metrics.controller("dynamographdeployment", 4);
        dgd.enqueued("ns/a".into());
        dgd.enqueued("ns/a".into());
        dgd.enqueued("ns/b".into());
        dgd.start("ns/a").finish(ReconcileResult::Success);
        dgd.start("ns/b").finish(ReconcileResult::Error);
        metrics.set_leader("lease", true);
        let text = metrics.encode();
        for line in [
            "controller_runtime_reconcile_total{controller=\"dynamographdeployment\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"dynamographdeployment\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"dynamographdeployment\"} 1",
            "controller_runtime_max_concurrent_reconciles{controller=\"dynamographdeployment\"} 4",
            "controller_runtime_active_workers{controller=\"dynamographdeployment\"} 0",
            "workqueue_adds_total{name=\"dynamographdeployment\"} 3",
            "workqueue_depth{name=\"dynamographdeployment\"} 0",
            "leader_election_master_status{name=\"lease\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(text.contains("controller_runtime_reconcile_time_seconds_count{controller=\"dynamographdeployment\"} 2"));
    }

    #[test]
    fn a_key_that_leaves_without_a_reconcile_leaves_the_depth() {
        let metrics = Arc::new(Metrics::new());
        let dgd = metrics.controller("dynamographdeployment", 4);
        dgd.enqueued("ns/gone".into());
        dgd.enqueued("ns/kept".into());
        assert!(
            metrics
                .encode()
                .contains("workqueue_depth{name=\"dynamographdeployment\"} 2")
        );
        dgd.dequeued("ns/gone");
        dgd.dequeued("ns/never-queued");
        assert!(
            metrics
                .encode()
                .contains("workqueue_depth{name=\"dynamographdeployment\"} 1")
        );
    }
}
