//! The bench's results (`report.json`): what the phases measure and the summary renders.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::audit::Tally;
use crate::process::Usage;
use crate::soak::Soak;

/// Version of the report's layout.
pub const SCHEMA: u32 = 1;
/// The key of the whole machine's busy CPU time among per-process CPU times.
pub const MACHINE: &str = "(machine)";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub schema: u32,
    /// Unix time the bench started.
    pub started_unix: u64,
    pub quick: bool,
    pub machine: Machine,
    pub operator: OperatorInfo,
    /// The graph rotation (manifest per position).
    pub mix: Vec<String>,
    pub runs: Vec<Run>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    /// The control-plane build (Kubernetes, etcd, kwok versions).
    pub control_plane: String,
    pub apiserver_args: Vec<String>,
    pub rustc: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OperatorInfo {
    /// Cargo profile of the binary (`release` or `dev`).
    pub profile: String,
    /// `git describe` of the measured tree.
    pub commit: String,
    pub args: Vec<String>,
}

/// One graph count of the matrix.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Run {
    pub n: usize,
    pub nodes: usize,
    pub components: usize,
    pub pods: i64,
    /// Wall time of this run, control-plane start to stop.
    pub wall_seconds: f64,
    /// Phase 2: the same objects created by a bare client, before the operator started
    /// (absent in older reports and with `--floor=false`).
    #[serde(default)]
    pub floor: Option<Floor>,
    pub convergence: Convergence,
    pub noop: Vec<Noop>,
    pub amplification: Vec<Stimulus>,
    pub churn: Option<Churn>,
    pub footprint: Footprint,
    /// Phase 7: create → Ready → delete → gone cycles with new names (absent in older reports).
    #[serde(default)]
    pub soak: Option<Soak>,
    /// Why this run fails the bench (never Ready, no-op writes, errors).
    pub failures: Vec<String>,
}

impl Run {
    /// Time to Ready: the operator's convergence over the floor's (`None` without both).
    pub fn floor_ratio(&self) -> Option<f64> {
        let floor = self.floor.as_ref()?.seconds?;
        let operator = self.convergence.seconds?;
        (floor > 0.0).then(|| operator / floor)
    }
}

/// Phase 2: a bare client creates the objects the operator creates for the N graphs and waits
/// until every Deployment among them is available.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Floor {
    /// First create until every Deployment was available; `None` when some never were.
    pub seconds: Option<f64>,
    /// First create until the last was accepted.
    pub create_seconds: f64,
    /// Objects created (an object several graphs share once).
    pub objects: u64,
    pub by_kind: BTreeMap<String, u64>,
    pub deployments: u64,
    /// Creates kept in flight (the operator's graph + component workers).
    pub concurrency: usize,
    /// The floor client's requests.
    pub requests: Tally,
    /// Every request of the phase, by user.
    pub requests_by_user: BTreeMap<String, u64>,
    /// Deleting the floor's namespace until it and its Pods were gone (not part of the floor).
    pub cleanup_seconds: f64,
}

/// Phase 1: apply N graphs, wait until every one is Ready.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Convergence {
    /// First apply to the last graph observed Ready; `None` when some never were.
    pub seconds: Option<f64>,
    /// Submitting every graph took this long.
    pub apply_seconds: f64,
    pub ready: usize,
    /// Graphs not Ready at the deadline (at most 20 named).
    pub not_ready: Vec<String>,
    /// Per graph, its apply to its first Ready: p50, p90, max.
    pub per_graph_seconds: [f64; 3],
    /// Seconds after the first apply (from the audit log and the bench's watch).
    pub timeline: BTreeMap<String, f64>,
    /// The operator's requests (watches included), by `verb resource`.
    pub operator_requests: Tally,
    /// Writes without Events.
    pub writes: u64,
    pub events: u64,
    /// Occurrences of the operator's Events in the namespace after convergence, by reason.
    pub event_reasons: BTreeMap<String, u64>,
    /// get/list (uncached reads).
    pub reads: u64,
    pub watches: u64,
    /// Objects the operator created (audit: 201 from create or apply), Events excluded.
    pub created: u64,
    /// Objects controlled by a graph or component after convergence, by kind.
    pub children: BTreeMap<String, u64>,
    pub children_total: u64,
    /// Status writes, by resource.
    pub status_writes: BTreeMap<String, u64>,
    /// children + one status write per graph (the floor).
    pub floor: u64,
    /// children + one status write per graph and per DynamoComponentDeployment.
    pub floor_with_component_status: u64,
    /// Every request of the phase, by user.
    pub requests_by_user: BTreeMap<String, u64>,
    /// CPU seconds each process spent in the phase.
    pub cpu_seconds: BTreeMap<String, f64>,
    pub reconciles: Reconciles,
}

impl Convergence {
    /// Writes (no Events) over the floor.
    pub fn ratio(&self) -> f64 {
        ratio(self.writes, self.floor)
    }
    /// Writes with Events over the floor.
    pub fn ratio_with_events(&self) -> f64 {
        ratio(self.writes + self.events, self.floor)
    }
    /// Writes (no Events) over the floor that counts component status writes.
    pub fn ratio_component_floor(&self) -> f64 {
        ratio(self.writes, self.floor_with_component_status)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Reconciles {
    pub dgd: u64,
    pub dcd: u64,
    pub errors: u64,
}

/// Phase 3: one change on every graph that must not cause writes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Noop {
    /// `ignored` or `honoured`.
    pub kind: String,
    pub annotation: String,
    /// Graph reconciles the change should cause (0 ignored, N honoured).
    pub expected_dgd_reconciles: u64,
    pub reconciles: Reconciles,
    pub writes: u64,
    pub events: u64,
    pub reads: u64,
    /// Every operator request but watches.
    pub requests: Tally,
}

/// Phase 4: a change of child status, and the parent reconciles it causes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Stimulus {
    /// `irrelevant` or `relevant`.
    pub kind: String,
    pub description: String,
    /// Graphs whose children were changed (one child each).
    pub targets: usize,
    /// Changes the bench made (patches, Pod deletions).
    pub changes: u64,
    /// Deployment status writes of the controller-manager on the targets (each a child change).
    pub deployment_status_changes: u64,
    pub dcd_reconciles: u64,
    /// Status writes of the targets' DynamoComponentDeployments (each a change the graph sees).
    pub dcd_status_writes: u64,
    pub dgd_reconciles: u64,
    pub dgd_status_writes: u64,
    /// The operator's writes in the phase (Events included).
    pub operator_writes: Tally,
}

/// Phase 6: scale 10% of the components every second.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Churn {
    pub seconds: f64,
    pub ticks: u64,
    /// Ticks whose patches took longer than the tick.
    pub late_ticks: u64,
    /// Component replica changes requested.
    pub scale_ops: u64,
    /// Graph patches sent (several components of one graph share one patch).
    pub patches: u64,
    /// End of churn until every graph and Deployment is Ready again.
    pub reconverge_seconds: Option<f64>,
    pub reconciles: Reconciles,
    /// The operator's requests but watches (writes, reads).
    pub requests: Tally,
    pub writes: u64,
    pub events: u64,
    pub reads: u64,
    /// Event occurrences the churn added, by reason.
    pub event_reasons: BTreeMap<String, u64>,
    /// Queue depth, max and mean over the samples, per controller.
    pub dgd_queue_max: u64,
    pub dgd_queue_mean: f64,
    pub dcd_queue_max: u64,
    pub dcd_queue_mean: f64,
    /// (seconds since start, DGD depth, DCD depth) every 250 ms.
    pub samples: Vec<(f64, u64, u64)>,
}

impl Churn {
    pub fn writes_per_scale_op(&self) -> f64 {
        ratio(self.writes, self.scale_ops)
    }
}

/// Phase 5: the operator's memory and CPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Footprint {
    /// Started, caches synced, no graphs.
    pub idle: Usage,
    pub converged: Usage,
    pub after_churn: Usage,
    /// After the run's graphs were deleted (before the soak), and how long the deletion took.
    pub after_delete: Option<Usage>,
    pub delete_seconds: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_without_a_floor_parse() {
        let mut run = serde_json::to_value(Run::default()).unwrap();
        run.as_object_mut().unwrap().remove("floor");
        let run: Run = serde_json::from_value(run).unwrap();
        assert!(run.floor.is_none() && run.floor_ratio().is_none());
    }
}
