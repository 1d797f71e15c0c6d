//! The outcome of each scenario, the run's totals, and the report (`report.md`, and with
//! `--record` the figures block of `docs/reliability.md`).

use std::path::Path;
use std::time::Duration;

/// The outcome of one scenario.
#[derive(Default)]
pub struct Report {
    pub name: String,
    pub took: Duration,
    /// (what, value), in the order measured.
    pub figures: Vec<(String, String)>,
    /// Lost, duplicated, wrong or orphaned objects, panics, leaks: the run fails.
    pub failures: Vec<String>,
    /// A figure outside its expected bound: reported, the run does not fail.
    pub flags: Vec<String>,
    /// Failures of a known, reported bug ([`KNOWN_ISSUES`]): reported as such, the run does not
    /// fail on them (it does on anything else).
    pub known: Vec<String>,
    /// Tables or lists worth keeping (bad-input outcomes, RBAC rules).
    pub details: Vec<String>,
}

impl Report {
    pub fn new(name: &str) -> Self {
        Report {
            name: name.into(),
            ..Default::default()
        }
    }
    pub fn figure(&mut self, what: impl Into<String>, value: impl ToString) {
        let (what, value) = (what.into(), value.to_string());
        println!("    {what}: {value}");
        self.figures.push((what, value));
    }
    pub fn fail(&mut self, what: impl Into<String>) {
        let what = what.into();
        println!("    FAILURE: {what}");
        self.failures.push(what);
    }
    /// A failure caused by the known issue `id` (one of [`KNOWN_ISSUES`]; none is open now).
    #[allow(dead_code)]
    pub fn known(&mut self, id: &str, what: impl Into<String>) {
        let what = what.into();
        let title = KNOWN_ISSUES
            .iter()
            .find(|(i, _)| *i == id)
            .map_or("unlisted", |(_, t)| *t);
        println!("    KNOWN FAILURE [{id}: {title}]: {what}");
        self.known.push(format!("[{id}] {what}"));
    }
    pub fn flag(&mut self, what: impl Into<String>) {
        let what = what.into();
        println!("    flag: {what}");
        self.flags.push(what);
    }
    /// Records lost/duplicated/wrong/orphaned findings as failures (at most 20 lines each).
    pub fn findings(&mut self, label: &str, items: &[String], totals: &mut u64) {
        *totals += items.len() as u64;
        for item in items.iter().take(20) {
            self.fail(format!("{label}: {item}"));
        }
        if items.len() > 20 {
            self.fail(format!("{label}: … and {} more", items.len() - 20));
        }
    }
}

/// Bugs the suite found that are reported and not fixed yet: (id, summary). A check that hits
/// one reports a known failure instead of failing the run; when the bug is fixed the check
/// passes and the entry should go (docs/reliability.md describes each).
pub const KNOWN_ISSUES: &[(&str, &str)] = &[];

/// Totals over the run (the summary of `docs/reliability.md`).
#[derive(Default, Debug)]
pub struct Totals {
    pub kills: u64,
    pub restarts_of_control_plane: u64,
    pub failovers: u64,
    pub graphs_applied: u64,
    pub objects_checked: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub wrong: u64,
    pub orphans: u64,
    pub bad_inputs: u64,
    pub panics: u64,
    pub unexpected_exits: u64,
    pub secret_leaks: u64,
    pub fuzz_cases: u64,
    pub rbac_rules_checked: u64,
    pub known_failures: u64,
    pub shutdown_hangs: u64,
}

pub fn render(
    reports: &[Report],
    totals: &Totals,
    seed: u64,
    quick: bool,
    took: Duration,
) -> String {
    let mut s = String::new();
    let failed = reports.iter().filter(|r| !r.failures.is_empty()).count();
    s.push_str(&format!(
        "### {} run, seed {seed}: {} ({} scenarios, {:.0?})\n\n",
        if quick { "Quick" } else { "Full" },
        if failed == 0 {
            "passed".to_string()
        } else {
            format!("{failed} FAILED")
        },
        reports.len(),
        took
    ));
    s.push_str("| total | value |\n| --- | --- |\n");
    for (what, value) in [
        ("operator kills survived (SIGKILL)", totals.kills),
        ("leader failovers", totals.failovers),
        (
            "control-plane component restarts",
            totals.restarts_of_control_plane,
        ),
        ("graphs applied", totals.graphs_applied),
        ("objects checked", totals.objects_checked),
        ("lost objects", totals.lost),
        ("duplicate objects", totals.duplicates),
        ("wrong objects", totals.wrong),
        ("orphans", totals.orphans),
        ("bad inputs tried", totals.bad_inputs),
        ("panics", totals.panics),
        ("operator exits nobody caused", totals.unexpected_exits),
        (
            "secret values found in logs, events or status",
            totals.secret_leaks,
        ),
        ("fuzz cases", totals.fuzz_cases),
        ("RBAC rules checked", totals.rbac_rules_checked),
        ("known failures (reported bugs)", totals.known_failures),
        (
            "operators still running 30 s after SIGTERM",
            totals.shutdown_hangs,
        ),
    ] {
        s.push_str(&format!("| {what} | {value} |\n"));
    }
    s.push('\n');
    for r in reports {
        s.push_str(&format!(
            "#### `{}` — {} ({:.0?})\n\n",
            r.name,
            if r.failures.is_empty() {
                "passed"
            } else {
                "FAILED"
            },
            r.took
        ));
        if !r.figures.is_empty() {
            s.push_str("| figure | value |\n| --- | --- |\n");
            for (what, value) in &r.figures {
                s.push_str(&format!("| {what} | {} |\n", value.replace('|', "\\|")));
            }
            s.push('\n');
        }
        for f in &r.failures {
            s.push_str(&format!("- **failure**: {f}\n"));
        }
        for f in &r.known {
            s.push_str(&format!("- **known failure**: {f}\n"));
        }
        for f in &r.flags {
            s.push_str(&format!("- flag: {f}\n"));
        }
        if !r.failures.is_empty() || !r.flags.is_empty() || !r.known.is_empty() {
            s.push('\n');
        }
        for d in &r.details {
            s.push_str(d);
            s.push_str("\n\n");
        }
    }
    s
}

/// Replaces the figures block of the quick or full run in `docs/reliability.md`.
pub fn record(doc: &Path, report: &str, quick: bool) -> anyhow::Result<()> {
    let which = if quick { "quick" } else { "full" };
    let begin = format!("<!-- figures:{which}:begin -->");
    let end = format!("<!-- figures:{which}:end -->");
    let text = std::fs::read_to_string(doc).unwrap_or_default();
    let block = format!("{begin}\n{report}\n{end}");
    let new = match (text.find(&begin), text.find(&end)) {
        (Some(b), Some(e)) if e > b => format!("{}{block}{}", &text[..b], &text[e + end.len()..]),
        _ => format!("{text}\n{block}\n"),
    };
    std::fs::write(doc, new)?;
    Ok(())
}
