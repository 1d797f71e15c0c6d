//! The Markdown summary of a report (`summary.md`, and the generated part of
//! `docs/benchmarks.md`).

use std::fmt::Write as _;

use crate::floor::FLOOR_USER;
use crate::report::{Churn, Floor, MACHINE, Report, Run};
use crate::soak::{MAX_GROWTH, Soak};

fn fmt_s(v: Option<f64>) -> String {
    v.map_or("—".to_string(), |s| format!("{s:.1} s"))
}

/// The Markdown summary of a report (also the generated part of `docs/benchmarks.md`).
pub fn markdown(report: &Report, plot: Option<&str>) -> String {
    let mut o = String::new();
    let m = &report.machine;
    let _ = writeln!(
        o,
        "Measured {} on {} ({} cores, {:.0} GiB RAM, Linux {}, {}); control plane {} \
         (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok simulated nodes), \
         the operator's `{}` build at `{}` as a separate process ({}).{}\n",
        unix_date(report.started_unix),
        m.cpu,
        m.cores,
        m.memory_gib,
        m.kernel,
        m.rustc,
        m.control_plane,
        report.operator.profile,
        report.operator.commit,
        report
            .operator
            .args
            .iter()
            .map(|a| match a.split_once('=') {
                Some(("--metrics-address", _)) => "--metrics-address=<free port>".to_string(),
                _ => a.clone(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        if report.quick {
            " **Quick mode** (smoke test)."
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "Graphs: {} (rotation), 3 components each on average. apiserver flags: `{}`.\n",
        report.mix.join(", "),
        m.apiserver_args.join(" ")
    );
    if let Some(plot) = plot {
        let _ = writeln!(o, "![convergence time and writes against N]({plot})\n");
    }

    let _ = writeln!(o, "### Headline\n");
    let _ = writeln!(
        o,
        "| N | converge (all Ready) | floor (bare client) | operator / floor | writes / DGD | floor / DGD | ratio to floor | + Events | no-op writes | operator RSS (peak) |"
    );
    let _ = writeln!(
        o,
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for r in &report.runs {
        let c = &r.convergence;
        let n = r.n.max(1) as f64;
        let noop_writes: u64 = r.noop.iter().map(|x| x.writes + x.events).sum();
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.2}× | {:.2}× | {} | {:.0} MiB ({:.0} MiB) |",
            r.n,
            fmt_s(c.seconds),
            fmt_s(r.floor.as_ref().and_then(|f| f.seconds)),
            r.floor_ratio()
                .map_or("—".to_string(), |x| format!("{x:.2}×")),
            c.writes as f64 / n,
            c.floor as f64 / n,
            c.ratio(),
            c.ratio_with_events(),
            noop_writes,
            r.footprint.converged.rss_mib,
            r.footprint
                .after_churn
                .peak_rss_mib
                .max(r.footprint.converged.peak_rss_mib),
        );
    }
    let _ = writeln!(o);
    crate::targets::markdown(&mut o, report);

    for r in &report.runs {
        run_markdown(&mut o, r);
    }
    o
}

fn run_markdown(o: &mut String, r: &Run) {
    let _ = writeln!(
        o,
        "\n### N = {} ({} components, {} pods, {} simulated nodes; run took {:.0} s)\n",
        r.n, r.components, r.pods, r.nodes, r.wall_seconds
    );
    if !r.failures.is_empty() {
        let _ = writeln!(o, "**Failures:**\n");
        for f in &r.failures {
            let _ = writeln!(o, "- {f}");
        }
        let _ = writeln!(o);
    }
    convergence_markdown(o, r);
    if let Some(f) = &r.floor {
        floor_markdown(o, r, f);
    }
    writes_markdown(o, r);
    if !r.convergence.cpu_seconds.is_empty() {
        cpu_markdown(o, r);
    }
    noop_markdown(o, r);
    amplification_markdown(o, r);
    footprint_markdown(o, r);
    if let Some(s) = &r.soak {
        soak_markdown(o, s);
    }
    if let Some(ch) = &r.churn {
        churn_markdown(o, ch);
    }
}

/// The convergence line and its timeline.
fn convergence_markdown(o: &mut String, r: &Run) {
    let c = &r.convergence;
    let _ = writeln!(
        o,
        "**Convergence**: all {} Ready after {} (submitting took {:.1} s; per graph p50 {:.1} s, p90 {:.1} s, max {:.1} s). \
         Reconciles: {} graph, {} component, {} errors.\n",
        c.ready,
        fmt_s(c.seconds),
        c.apply_seconds,
        c.per_graph_seconds[0],
        c.per_graph_seconds[1],
        c.per_graph_seconds[2],
        c.reconciles.dgd,
        c.reconciles.dcd,
        c.reconciles.errors,
    );
    if !c.timeline.is_empty() {
        let _ = writeln!(o, "| milestone (after the first apply) | s |");
        let _ = writeln!(o, "| --- | ---: |");
        let mut t: Vec<_> = c.timeline.iter().collect();
        t.sort_by(|a, b| a.1.total_cmp(b.1));
        for (k, v) in t {
            let _ = writeln!(o, "| {k} | {v:.1} |");
        }
        let _ = writeln!(o);
    }
}

/// The floor phase: the same objects created by a bare client, against the operator.
fn floor_markdown(o: &mut String, r: &Run, f: &Floor) {
    let _ = writeln!(
        o,
        "**Floor** (a bare client, before the operator started, created the {} objects the operator creates for the {} graphs, \
         {} at a time, in a namespace of its own): created in {:.1} s, every one of the {} Deployments available after {}; \
         the operator took {}: **{}** the floor. Objects: {}. Requests of `{}`: {}; by user: {}. The namespace was gone {:.0} s \
         after its deletion (before the operator started; not part of the floor).\n",
        f.objects,
        r.n,
        f.concurrency,
        f.create_seconds,
        f.deployments,
        fmt_s(f.seconds),
        fmt_s(r.convergence.seconds),
        r.floor_ratio()
            .map_or("—".to_string(), |x| format!("{x:.2}×")),
        f.by_kind
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        FLOOR_USER,
        f.requests
            .by_request
            .iter()
            .map(|(k, v)| format!("`{k}` {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        f.requests_by_user
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        f.cleanup_seconds,
    );
}

/// The operator's writes against the floor, its children and its requests.
fn writes_markdown(o: &mut String, r: &Run) {
    let c = &r.convergence;
    let _ = writeln!(
        o,
        "| writes | count | per DGD |\n| --- | ---: | ---: |\n\
         | operator writes (no Events) | {} | {:.2} |\n\
         | of which status writes | {} | {:.2} |\n\
         | Events | {} | {:.2} |\n\
         | objects created (audit) | {} | {:.2} |\n\
         | children after convergence | {} | {:.2} |\n\
         | floor: children + 1 graph status | {} | {:.2} |\n\
         | floor: + 1 status per component | {} | {:.2} |\n\
         | **ratio to floor** | **{:.2}×** (with Events {:.2}×; to the component floor {:.2}×) | |\n\
         | uncached reads (get/list) | {} | {:.2} |\n\
         | watches opened | {} | |\n",
        c.writes,
        per(c.writes, r.n),
        c.status_writes.values().sum::<u64>(),
        per(c.status_writes.values().sum(), r.n),
        c.events,
        per(c.events, r.n),
        c.created,
        per(c.created, r.n),
        c.children_total,
        per(c.children_total, r.n),
        c.floor,
        per(c.floor, r.n),
        c.floor_with_component_status,
        per(c.floor_with_component_status, r.n),
        c.ratio(),
        c.ratio_with_events(),
        c.ratio_component_floor(),
        c.reads,
        per(c.reads, r.n),
        c.watches,
    );
    let _ = writeln!(
        o,
        "Children: {}. Events by reason (occurrences): {}.\n",
        c.children
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        c.event_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        o,
        "<details><summary>Operator requests by verb and resource</summary>\n"
    );
    let _ = writeln!(o, "| request | count | per DGD |\n| --- | ---: | ---: |");
    for (k, v) in &c.operator_requests.by_request {
        let _ = writeln!(o, "| `{k}` | {v} | {:.2} |", per(*v, r.n));
    }
    let _ = writeln!(o, "\n</details>\n");
}

/// CPU time per process during convergence, and requests by user.
fn cpu_markdown(o: &mut String, r: &Run) {
    let c = &r.convergence;
    let machine = c.cpu_seconds.get(MACHINE).copied();
    let ours: f64 = c
        .cpu_seconds
        .iter()
        .filter(|(k, _)| k.as_str() != MACHINE)
        .map(|(_, v)| v)
        .sum();
    let _ = writeln!(
        o,
        "CPU seconds during convergence: {}{}. Requests by user: {}.\n",
        c.cpu_seconds
            .iter()
            .filter(|(k, _)| k.as_str() != MACHINE)
            .map(|(k, v)| format!("{k} {v:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        machine.map_or(String::new(), |m| format!(
            "; the machine was busy {m:.1} CPU s in all ({:.1} CPU s outside the bench's processes)",
            (m - ours).max(0.0)
        )),
        c.requests_by_user
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The no-op cost table.
fn noop_markdown(o: &mut String, r: &Run) {
    if r.noop.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "**No-op cost** (one change on every graph, after convergence):\n\n\
         | change | graph reconciles (expected) | component reconciles | writes | Events | uncached reads |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    for n in &r.noop {
        let _ = writeln!(
            o,
            "| {} annotation `{}` | {} ({}) | {} | {} | {} | {} |",
            n.kind,
            n.annotation,
            n.reconciles.dgd,
            n.expected_dgd_reconciles,
            n.reconciles.dcd,
            n.writes,
            n.events,
            n.reads
        );
    }
    let _ = writeln!(o);
    for n in r.noop.iter().filter(|n| n.requests.total > 0) {
        let _ = writeln!(
            o,
            "Requests after the {} annotation: {}.\n",
            n.kind,
            n.requests
                .by_request
                .iter()
                .map(|(k, v)| format!("`{k}` {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// The amplification table.
fn amplification_markdown(o: &mut String, r: &Run) {
    if r.amplification.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "**Amplification** (child changes against parent reconciles; target ≤ 1 per relevant change, 0 for irrelevant):\n\n\
         | stimulus | targets | changes made | Deployment status changes (controller-manager) | component reconciles | component status writes | graph reconciles | graph status writes | operator writes |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in &r.amplification {
        let _ = writeln!(
            o,
            "| {}: {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.kind,
            s.description,
            s.targets,
            s.changes,
            s.deployment_status_changes,
            s.dcd_reconciles,
            s.dcd_status_writes,
            s.dgd_reconciles,
            s.dgd_status_writes,
            s.operator_writes.total
        );
    }
    let _ = writeln!(o);
}

/// The operator's memory and CPU, and after deleting the run's graphs.
fn footprint_markdown(o: &mut String, r: &Run) {
    let f = &r.footprint;
    let _ = writeln!(
        o,
        "**Footprint** (operator process): idle {:.1} MiB RSS; converged {:.1} MiB (peak {:.1} MiB), \
         {:.1} CPU s; after churn {:.1} MiB (peak {:.1} MiB), {:.1} CPU s in total.\n",
        f.idle.rss_mib,
        f.converged.rss_mib,
        f.converged.peak_rss_mib,
        f.converged.cpu_seconds,
        f.after_churn.rss_mib,
        f.after_churn.peak_rss_mib,
        f.after_churn.cpu_seconds,
    );
    if let (Some(after), Some(seconds)) = (&f.after_delete, f.delete_seconds) {
        let _ = writeln!(
            o,
            "**After deleting the run's {} graphs** (gone in {seconds:.0} s, before the soak): {:.1} MiB RSS \
             ({:+.1} MiB against idle).\n",
            r.n,
            after.rss_mib,
            after.rss_mib - f.idle.rss_mib,
        );
    }
}

/// The soak cycles.
fn soak_markdown(o: &mut String, s: &Soak) {
    let _ = writeln!(
        o,
        "**Soak** ({} cycles of {} graphs with new names: create, Ready, delete, gone): operator RSS {}; \
         the last cycle is {:+.1} % of the first (at most {:+.0} %).\n",
        s.cycles.len(),
        s.graphs_per_cycle,
        s.rss_line(),
        s.growth() * 100.0,
        MAX_GROWTH * 100.0,
    );
    let _ = writeln!(
        o,
        "| cycle | Ready after | gone after | RSS converged | RSS after delete |\n| ---: | ---: | ---: | ---: | ---: |"
    );
    for (i, c) in s.cycles.iter().enumerate() {
        let _ = writeln!(
            o,
            "| {} | {:.0} s | {:.0} s | {:.1} MiB | {:.1} MiB |",
            i + 1,
            c.ready_seconds,
            c.gone_seconds,
            c.rss_converged_mib,
            c.rss_after_mib
        );
    }
    let _ = writeln!(o);
}

/// The churn phase.
fn churn_markdown(o: &mut String, ch: &Churn) {
    let _ = writeln!(
        o,
        "**Churn** ({:.0} s, 10% of components scaled every second): {} scale operations ({:.0}/s) in {} graph patches \
         ({} of {} ticks late); every graph Ready again {} after the last tick. Reconciles: {} graph, {} component, \
         {} errors. Operator writes {} ({:.2} per scale operation) + {} Events, {} uncached reads. \
         Queue depth max/mean: graph {}/{:.1}, component {}/{:.1}. Events by reason: {}.\n",
        ch.seconds,
        ch.scale_ops,
        ch.scale_ops as f64 / ch.seconds.max(1.0),
        ch.patches,
        ch.late_ticks,
        ch.ticks,
        fmt_s(ch.reconverge_seconds),
        ch.reconciles.dgd,
        ch.reconciles.dcd,
        ch.reconciles.errors,
        ch.writes,
        ch.writes_per_scale_op(),
        ch.events,
        ch.reads,
        ch.dgd_queue_max,
        ch.dgd_queue_mean,
        ch.dcd_queue_max,
        ch.dcd_queue_mean,
        ch.event_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let _ = writeln!(
        o,
        "<details><summary>Operator requests during churn</summary>\n"
    );
    let _ = writeln!(o, "| request | count |\n| --- | ---: |");
    for (k, v) in &ch.requests.by_request {
        let _ = writeln!(o, "| `{k}` | {v} |");
    }
    let _ = writeln!(o, "\n</details>\n");
}

fn per(v: u64, n: usize) -> f64 {
    v as f64 / n.max(1) as f64
}

/// `YYYY-MM-DD` of a Unix time.
pub fn unix_date(secs: u64) -> String {
    // Civil from days (Howard Hinnant's algorithm).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Convergence, Machine, OperatorInfo, SCHEMA};

    #[test]
    fn dates() {
        assert_eq!(unix_date(0), "1970-01-01");
        assert_eq!(unix_date(1_709_208_001), "2024-02-29");
        assert_eq!(unix_date(1_796_239_622), "2026-12-02");
    }

    #[test]
    fn renders_a_report() {
        let report = Report {
            schema: SCHEMA,
            started_unix: 0,
            quick: true,
            machine: Machine::default(),
            operator: OperatorInfo::default(),
            mix: vec!["vllm-agg".into()],
            runs: vec![Run {
                n: 10,
                floor: Some(Floor {
                    seconds: Some(10.0),
                    objects: 117,
                    ..Default::default()
                }),
                convergence: Convergence {
                    seconds: Some(12.0),
                    writes: 80,
                    floor: 70,
                    ..Default::default()
                },
                ..Default::default()
            }],
        };
        let md = markdown(&report, Some("plot.svg"));
        assert!(
            md.contains("| 10 | 12.0 s | 10.0 s | 1.20× | 8.0 | 7.0 | 1.14× |"),
            "{md}"
        );
        assert!(md.contains("### Targets"), "{md}");
        assert!(md.contains("**Floor** (a bare client"), "{md}");
        assert!(md.contains("![convergence time and writes against N](plot.svg)"));
    }
}
