//! `cargo xtask reliability [--quick]`: black-box scenarios of the operator binary on the real
//! control plane — faults survived, bad input refused, nothing lost, no one let in — each with a
//! bounded duration, reporting figures. A run fails only on a lost, duplicated, wrong or
//! orphaned object, a panic, an operator exit nobody caused, a secret in a log or event, two
//! writers at once, or a fuzz case that panics; everything else is a figure, and a figure out of
//! its expected bound is flagged in the report.
//!
//! The operator always runs as the `dynamo-system/dynamo-operator` ServiceAccount with exactly
//! `deploy/`'s RBAC (a token from the TokenRequest API), except in `rbac-ablation`, which runs
//! it with one rule removed at a time. The scenarios and what they check are described in
//! `docs/reliability.md`; the report of a run is written to `target/reliability/<run>/report.md`
//! (`--record` also writes the figures into `docs/reliability.md`).

mod faults;
mod fuzz;
mod harness;
mod input;
mod security;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use testkit::ControlPlane;

use harness::{Env, Fingerprint, Operator, OperatorSpec};

/// What to run.
pub struct Options {
    pub quick: bool,
    pub only: Vec<String>,
    pub seed: Option<u64>,
    pub record: bool,
}

/// The scenarios, in run order: (name, part of the quick subset).
pub const SCENARIOS: &[(&str, bool)] = &[
    ("deploy-static", true),
    ("reference", true),
    ("crash", true),
    ("deletions", true),
    ("conflicts", true),
    ("sigterm", true),
    ("bad-input", true),
    ("soak", true),
    ("quota", false),
    ("failover", false),
    ("apiserver-restart", false),
    ("etcd-restart", false),
    ("rbac-ablation", false),
    ("fuzz", true),
    ("final", true),
    ("secrets", true),
];

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

/// The state the scenarios share.
pub struct Suite {
    pub env: Env,
    pub quick: bool,
    /// The operator most scenarios use (one replica, leader election on).
    pub main: Option<Operator>,
    /// The graph templates by name (from `crates/reliability/corpus/graphs`).
    pub templates: BTreeMap<String, Value>,
    /// Each template's subtree as the operator produced it undisturbed (`reference`).
    pub references: BTreeMap<String, Fingerprint>,
    /// Namespaces whose graphs must all be Ready and correct at the end.
    pub namespaces: Vec<String>,
    pub totals: Totals,
    panics_seen: usize,
    log_bytes: u64,
    /// Bytes of Events and statuses scanned for secrets so far.
    pub scanned_bytes: u64,
}

impl Suite {
    /// The main operator, started if it is not running.
    pub async fn main_operator(&mut self) -> anyhow::Result<&mut Operator> {
        if self.main.is_none() {
            let operator = self
                .env
                .operator(OperatorSpec::new("dynamo-operator-0"))
                .await?;
            self.main = Some(operator);
        }
        Ok(self.main.as_mut().expect("started"))
    }

    /// Waits until the main operator leads (and so reconciles).
    pub async fn main_leading(&mut self) -> anyhow::Result<Duration> {
        let probe = self.main_operator().await?.probe();
        harness::wait_for("the operator to lead", Duration::from_secs(60), || async {
            probe.leading()
        })
        .await
    }

    /// Looks for every Secret value known so far in the Events and statuses of the cluster.
    async fn scan_for_secrets(&mut self, report: &mut Report) -> anyhow::Result<()> {
        self.env.remember_operator_secrets().await?;
        let admin = self.env.admin();
        let text = harness::events_text(&admin).await? + &harness::statuses_text(&admin).await?;
        let (_, found) = harness::scan_text(&text, &self.env.secrets);
        for f in &found {
            report.fail(format!("secret value {f} found in an Event or a status"));
        }
        self.totals.secret_leaks += found.len() as u64;
        self.scanned_bytes += text.len() as u64;
        Ok(())
    }

    pub fn templates(&self) -> Vec<(String, Value)> {
        self.templates
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Checks after every scenario: the main operator did not exit on its own, no log shows a
    /// panic, and no Event or status holds a Secret's value (Events go with their namespace, so
    /// they are looked at before the next scenario).
    async fn after(&mut self, report: &mut Report) {
        if let Err(e) = self.scan_for_secrets(report).await {
            report.flag(format!("the secret scan could not run: {e:#}"));
        }
        if let Some(operator) = self.main.as_mut()
            && let Some(status) = operator.unexpected_exit()
        {
            self.totals.unexpected_exits += 1;
            report.fail(format!(
                "the operator exited on its own ({status}); last log lines:\n{}",
                operator.log_tail(30)
            ));
            let _ = operator.restart();
            self.env.track(operator);
        }
        // Graceful shutdown: SIGTERM must end the process (the kubelet kills it after 30 s).
        let hangs = harness::SHUTDOWN_HANG_LOGS
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        for hang in hangs {
            self.totals.shutdown_hangs += 1;
            report.flag(format!(
                "an operator did not exit within 30 s of SIGTERM (killed); its last log lines: {hang}"
            ));
        }
        // Log volume: a flood is a figure worth a flag.
        let bytes: u64 = self
            .env
            .logs
            .iter()
            .filter_map(|l| std::fs::metadata(l).ok())
            .map(|m| m.len())
            .sum();
        let written = bytes.saturating_sub(self.log_bytes);
        self.log_bytes = bytes;
        report.figure(
            "operator log written",
            format!("{:.1} MB", written as f64 / 1e6),
        );
        if written > 20_000_000 {
            report.flag(format!(
                "the operator wrote {:.0} MB of log in this scenario",
                written as f64 / 1e6
            ));
        }
        let mut panics = Vec::new();
        for log in &self.env.logs {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let (found, _) = harness::scan_text(&text, &Default::default());
            panics.extend(found.into_iter().map(|l| format!("{}: {l}", log.display())));
        }
        if panics.len() > self.panics_seen {
            for p in &panics[self.panics_seen..] {
                report.fail(format!("panic: {p}"));
            }
            self.totals.panics += (panics.len() - self.panics_seen) as u64;
            self.panics_seen = panics.len();
        }
    }
}

pub fn run(options: Options) -> anyhow::Result<()> {
    let root = bench::cluster::workspace_root();
    let seed = options.seed.unwrap_or_else(|| harness::now_micros() as u64);
    let selected: Vec<&str> = SCENARIOS
        .iter()
        .filter(|(name, quick)| {
            if options.only.is_empty() {
                !options.quick || *quick
            } else {
                options.only.iter().any(|o| o == name)
            }
        })
        .map(|(name, _)| *name)
        .collect();
    for only in &options.only {
        if !SCENARIOS.iter().any(|(name, _)| name == only) {
            bail!(
                "no scenario {only}; scenarios: {}",
                SCENARIOS.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
            );
        }
    }
    let run_name = format!("{}-{seed:x}", if options.quick { "quick" } else { "full" });
    let out = root.join("target/reliability").join(&run_name);
    std::fs::create_dir_all(&out)?;
    println!(
        "==> reliability suite ({}), seed {seed} (--seed {seed} repeats it); output in {}",
        if options.quick { "quick" } else { "full" },
        out.display()
    );
    println!("    scenarios: {}", selected.join(", "));

    let started = Instant::now();
    let needs_cluster = selected
        .iter()
        .any(|s| !matches!(*s, "deploy-static" | "fuzz"));
    // The release build for the full run, unless RELIABILITY_PROFILE says otherwise.
    let release = match std::env::var("RELIABILITY_PROFILE").as_deref() {
        Ok("debug") => false,
        Ok("release") => true,
        _ => !options.quick,
    };
    let binary = if needs_cluster {
        bench::cluster::build_operator(&root, if release { "release" } else { "dev" })?
    } else {
        PathBuf::new()
    };
    let rt = tokio::runtime::Runtime::new()?;
    let (reports, totals) = rt.block_on(async {
        let mut reports = Vec::new();
        let cp = if needs_cluster {
            testkit::binaries::build().context("building the control-plane binaries")?;
            let cp = ControlPlane::start(testkit::Options::default()).await?;
            println!(
                "==> control plane up ({:.0?}): {}",
                started.elapsed(),
                cp.dir().display()
            );
            Some(cp)
        } else {
            None
        };
        let Some(cp) = cp else {
            let mut totals = Totals::default();
            for name in &selected {
                println!("==> {name}");
                let scenario_started = Instant::now();
                let mut report = offline(name, &root, options.quick, seed, &mut totals)?;
                report.took = scenario_started.elapsed();
                reports.push(report);
            }
            return Ok::<_, anyhow::Error>((reports, totals));
        };
        let mut env = Env::new(cp, binary, root.clone(), out.clone(), seed);
        env.install().await?;
        println!("    features: {:?}", env.features);
        let mut suite = Suite {
            env,
            quick: options.quick,
            main: None,
            templates: load_templates(&root)?,
            references: BTreeMap::new(),
            namespaces: Vec::new(),
            totals: Totals::default(),
            panics_seen: 0,
            log_bytes: 0,
            scanned_bytes: 0,
        };
        for name in &selected {
            println!("==> {name}");
            let scenario_started = Instant::now();
            let mut report = match *name {
                "deploy-static" | "fuzz" => {
                    offline(name, &root, options.quick, seed, &mut suite.totals)?
                }
                _ => match scenario(&mut suite, name).await {
                    Ok(report) => report,
                    Err(error) => {
                        let mut report = Report::new(name);
                        report.fail(format!("the scenario could not run to its end: {error:#}"));
                        report
                    }
                },
            };
            suite.after(&mut report).await;
            suite.totals.known_failures += report.known.len() as u64;
            report.took = scenario_started.elapsed();
            println!(
                "    {} in {:.0?}",
                if report.failures.is_empty() {
                    "passed"
                } else {
                    "FAILED"
                },
                report.took
            );
            reports.push(report);
        }
        if let Some(mut operator) = suite.main.take() {
            operator.terminate();
        }
        if harness::SHUTDOWN_HANGS.load(std::sync::atomic::Ordering::Relaxed)
            > suite.totals.shutdown_hangs
        {
            suite.totals.shutdown_hangs =
                harness::SHUTDOWN_HANGS.load(std::sync::atomic::Ordering::Relaxed);
            println!("    the operator did not exit within 30 s of SIGTERM at the end of the run");
        }
        suite.env.cp.stop();
        Ok((reports, suite.totals))
    })?;

    let text = render_report(&reports, &totals, seed, options.quick, started.elapsed());
    let path = out.join("report.md");
    std::fs::write(&path, &text)?;
    println!("\n{text}");
    println!("report: {}", path.display());
    if options.record {
        record(&root.join("docs/reliability.md"), &text, options.quick)?;
        println!("figures written to docs/reliability.md");
    }
    let failed: Vec<_> = reports.iter().filter(|r| !r.failures.is_empty()).collect();
    if !failed.is_empty() {
        bail!(
            "{} scenario(s) failed: {}",
            failed.len(),
            failed
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

async fn scenario(suite: &mut Suite, name: &str) -> anyhow::Result<Report> {
    match name {
        "reference" => faults::reference(suite).await,
        "crash" => faults::crash(suite).await,
        "deletions" => faults::deletions(suite).await,
        "conflicts" => faults::conflicts(suite).await,
        "sigterm" => faults::sigterm(suite).await,
        "final" => faults::last_look(suite).await,
        "quota" => faults::quota(suite).await,
        "failover" => faults::failover(suite).await,
        "apiserver-restart" => faults::control_plane_restart(suite, "kube-apiserver").await,
        "etcd-restart" => faults::control_plane_restart(suite, "etcd").await,
        "bad-input" => input::bad_input(suite).await,
        "soak" => faults::soak(suite).await,
        "rbac-ablation" => security::rbac_ablation(suite).await,
        "secrets" => security::secrets(suite).await,
        other => bail!("unknown scenario {other}"),
    }
}

/// The scenarios that need no control plane.
fn offline(
    name: &str,
    root: &Path,
    quick: bool,
    seed: u64,
    totals: &mut Totals,
) -> anyhow::Result<Report> {
    match name {
        "deploy-static" => security::deploy_static(root),
        "fuzz" => fuzz::run(root, quick, seed, totals),
        other => bail!("{other} needs the control plane"),
    }
}

fn load_templates(root: &Path) -> anyhow::Result<BTreeMap<String, Value>> {
    let dir = root.join("crates/reliability/corpus/graphs");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            out.insert(name, harness::yaml_value(&path)?);
        }
    }
    Ok(out)
}

fn render_report(
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
fn record(doc: &Path, report: &str, quick: bool) -> anyhow::Result<()> {
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
