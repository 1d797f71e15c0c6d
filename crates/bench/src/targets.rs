//! The performance targets, against what a report measured: one row per target, one column per N,
//! each cell the measured value and whether it meets the target (where the target applies).

use std::fmt::Write as _;

use crate::report::{Report, Run};

/// One performance target.
struct Target {
    what: &'static str,
    /// The target as the table states it.
    goal: &'static str,
    /// The measured value must be at most this.
    limit: f64,
    /// Whether the target applies at this N (where not, the value is shown, marked n/a).
    applies: fn(usize) -> bool,
    /// The measured value (`None`: not measured, e.g. a phase that did not run).
    measured: fn(&Run) -> Option<f64>,
    /// How the value reads.
    show: fn(f64) -> String,
}

/// Whether a measured value meets a target at a given N.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    Met,
    NotMet,
    /// The target does not apply at this N.
    NotApplicable,
    /// Nothing measured.
    Missing,
}

fn always(_: usize) -> bool {
    true
}

fn at_1000(n: usize) -> bool {
    n == 1000
}

fn per_graph(v: u64, r: &Run) -> f64 {
    v as f64 / r.n.max(1) as f64
}

/// The performance targets.
const TARGETS: &[Target] = &[
    Target {
        what: "time to Ready, operator / floor",
        goal: "≤ 1.3 (stated at N = 100 and 1000)",
        limit: 1.3,
        applies: always,
        measured: Run::floor_ratio,
        show: |v| format!("{v:.2}×"),
    },
    Target {
        what: "uncached reads per graph while converging",
        goal: "≤ 0.2",
        limit: 0.2,
        applies: always,
        measured: |r| Some(per_graph(r.convergence.reads, r)),
        show: |v| format!("{v:.2}"),
    },
    Target {
        what: "uncached reads after a no-op change (ignored + honoured)",
        goal: "0",
        limit: 0.0,
        applies: always,
        measured: |r| {
            (!r.noop.is_empty()).then(|| r.noop.iter().map(|x| x.reads).sum::<u64>() as f64)
        },
        show: |v| format!("{v:.0}"),
    },
    Target {
        what: "uncached reads during churn",
        goal: "0",
        limit: 0.0,
        applies: always,
        measured: |r| r.churn.as_ref().map(|c| c.reads as f64),
        show: |v| format!("{v:.0}"),
    },
    Target {
        what: "writes (no Events) / floor with one status write per component",
        goal: "≤ 1.15×",
        limit: 1.15,
        applies: always,
        measured: |r| {
            (r.convergence.floor_with_component_status > 0)
                .then(|| r.convergence.ratio_component_floor())
        },
        show: |v| format!("{v:.2}×"),
    },
    Target {
        what: "Events per graph while converging",
        goal: "≤ 5",
        limit: 5.0,
        applies: always,
        measured: |r| Some(per_graph(r.convergence.events, r)),
        show: |v| format!("{v:.1}"),
    },
    Target {
        what: "operator RSS, converged",
        goal: "≤ 150 MiB at N = 1000",
        limit: 150.0,
        applies: at_1000,
        measured: |r| {
            (r.footprint.converged.rss_mib > 0.0).then_some(r.footprint.converged.rss_mib)
        },
        show: |v| format!("{v:.0} MiB"),
    },
];

impl Target {
    fn verdict(&self, run: &Run) -> (Option<f64>, Verdict) {
        let Some(v) = (self.measured)(run) else {
            return (None, Verdict::Missing);
        };
        let verdict = if !(self.applies)(run.n) {
            Verdict::NotApplicable
        } else if v <= self.limit + 1e-9 {
            Verdict::Met
        } else {
            Verdict::NotMet
        };
        (Some(v), verdict)
    }

    fn cell(&self, run: &Run) -> String {
        match self.verdict(run) {
            (Some(v), Verdict::Met) => format!("{} met", (self.show)(v)),
            (Some(v), Verdict::NotMet) => format!("{} **not met**", (self.show)(v)),
            (Some(v), _) => format!("{} (n/a)", (self.show)(v)),
            (None, _) => "—".to_string(),
        }
    }
}

/// The targets table of a report: a row per target, a column per N.
pub fn markdown(o: &mut String, report: &Report) {
    if report.runs.is_empty() {
        return;
    }
    let _ = writeln!(o, "### Targets\n");
    let _ = write!(o, "| target | goal |");
    for r in &report.runs {
        let _ = write!(o, " N = {} |", r.n);
    }
    let _ = write!(o, "\n| --- | --- |");
    for _ in &report.runs {
        let _ = write!(o, " ---: |");
    }
    let _ = writeln!(o);
    for t in TARGETS {
        let _ = write!(o, "| {} | {} |", t.what, t.goal);
        for r in &report.runs {
            let _ = write!(o, " {} |", t.cell(r));
        }
        let _ = writeln!(o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Usage;
    use crate::report::{Churn, Convergence, Floor, Footprint, Noop};

    /// The verdict of every target at `run`, in the table's order.
    fn verdicts(run: &Run) -> Vec<(&'static str, Verdict)> {
        TARGETS.iter().map(|t| (t.what, t.verdict(run).1)).collect()
    }

    fn run(n: usize, operator: f64, floor: f64, rss: f64) -> Run {
        Run {
            n,
            floor: Some(Floor {
                seconds: Some(floor),
                ..Floor::default()
            }),
            convergence: Convergence {
                seconds: Some(operator),
                reads: n as u64 / 10,
                events: 17 * n as u64,
                writes: 110,
                floor_with_component_status: 100,
                ..Convergence::default()
            },
            noop: vec![Noop::default(), Noop::default()],
            churn: Some(Churn {
                reads: 3,
                ..Churn::default()
            }),
            footprint: Footprint {
                converged: Usage {
                    rss_mib: rss,
                    ..Usage::default()
                },
                ..Footprint::default()
            },
            ..Run::default()
        }
    }

    #[test]
    fn verdicts_follow_the_limits() {
        use Verdict::*;
        let v = verdicts(&run(1000, 12.0, 10.0, 210.0));
        assert_eq!(
            v.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
            [Met, Met, Met, NotMet, Met, NotMet, NotMet]
        );
        let v = verdicts(&run(100, 14.0, 10.0, 54.0));
        assert_eq!(v[0].1, NotMet);
        assert_eq!(v[6].1, NotApplicable);
        let mut missing = run(10, 1.0, 1.0, 38.0);
        missing.floor = None;
        missing.churn = None;
        let v = verdicts(&missing);
        assert_eq!((v[0].1, v[3].1), (Missing, Missing));
    }

    #[test]
    fn renders_a_row_per_target_and_a_column_per_n() {
        let report = Report {
            schema: crate::report::SCHEMA,
            started_unix: 0,
            quick: false,
            machine: Default::default(),
            operator: Default::default(),
            mix: Vec::new(),
            runs: vec![run(100, 13.0, 10.0, 54.0), run(1000, 12.0, 10.0, 140.0)],
        };
        let mut md = String::new();
        markdown(&mut md, &report);
        assert!(
            md.contains("| target | goal | N = 100 | N = 1000 |"),
            "{md}"
        );
        assert!(
            md.contains("| time to Ready, operator / floor | ≤ 1.3 (stated at N = 100 and 1000) | 1.30× met | 1.20× met |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| operator RSS, converged | ≤ 150 MiB at N = 1000 | 54 MiB (n/a) | 140 MiB met |"
            ),
            "{md}"
        );
        assert!(md.contains("| uncached reads during churn | 0 | 3 **not met** | 3 **not met** |"));
    }
}
