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
mod report;
mod security;
mod suite;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use testkit::ControlPlane;

use self::harness::Env;
use self::report::{Report, Totals};
use self::suite::Suite;

/// The suite's inputs (graph templates, checkpoints, fuzz seeds), relative to the workspace.
const CORPUS: &str = "crates/reliability/corpus";

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

pub fn run(options: Options) -> anyhow::Result<()> {
    let root = bench::cluster::workspace_root();
    let seed = options.seed.unwrap_or_else(|| harness::now_micros() as u64);
    let selected = select(&options)?;
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
    let run = Run {
        root: &root,
        out: &out,
        selected: &selected,
        quick: options.quick,
        seed,
        started,
    };
    let rt = tokio::runtime::Runtime::new()?;
    let (reports, totals) = if needs_cluster {
        let binary = bench::cluster::build_operator(&root, profile(options.quick))?;
        rt.block_on(run.on_cluster(binary))?
    } else {
        rt.block_on(async { run.offline() })?
    };

    let text = report::render(&reports, &totals, seed, options.quick, started.elapsed());
    let path = out.join("report.md");
    std::fs::write(&path, &text)?;
    println!("\n{text}");
    println!("report: {}", path.display());
    if options.record {
        report::record(&root.join("docs/reliability.md"), &text, options.quick)?;
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

/// The scenarios to run, in run order: `--only`'s, else the quick subset or all of them.
fn select(options: &Options) -> anyhow::Result<Vec<&'static str>> {
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
    Ok(selected)
}

/// The operator's Cargo profile: release for the full run, dev for the quick one, unless
/// `RELIABILITY_PROFILE` (`debug`, `release`) says otherwise.
fn profile(quick: bool) -> &'static str {
    let release = match std::env::var("RELIABILITY_PROFILE").as_deref() {
        Ok("debug") => false,
        Ok("release") => true,
        _ => !quick,
    };
    if release { "release" } else { "dev" }
}

/// One run of the suite.
struct Run<'a> {
    root: &'a Path,
    out: &'a Path,
    selected: &'a [&'static str],
    quick: bool,
    seed: u64,
    started: Instant,
}

impl Run<'_> {
    /// Runs the selected scenarios when none needs the control plane.
    fn offline(&self) -> anyhow::Result<(Vec<Report>, Totals)> {
        let mut reports = Vec::new();
        let mut totals = Totals::default();
        for name in self.selected {
            println!("==> {name}");
            let scenario_started = Instant::now();
            let mut report = offline(name, self.root, self.quick, self.seed, &mut totals)?;
            report.took = scenario_started.elapsed();
            reports.push(report);
        }
        Ok((reports, totals))
    }

    /// Starts the control plane, installs `deploy/` and runs the selected scenarios against the
    /// operator `binary`.
    async fn on_cluster(&self, binary: PathBuf) -> anyhow::Result<(Vec<Report>, Totals)> {
        testkit::binaries::build().context("building the control-plane binaries")?;
        let cp = ControlPlane::start(testkit::Options::default()).await?;
        println!(
            "==> control plane up ({:.0?}): {}",
            self.started.elapsed(),
            cp.dir().display()
        );
        let mut env = Env::new(
            cp,
            binary,
            self.root.to_path_buf(),
            self.out.to_path_buf(),
            self.seed,
        );
        env.install().await?;
        println!("    features: {:?}", env.features);
        let mut suite = Suite::new(env, self.quick, self.root)?;
        let mut reports = Vec::new();
        for name in self.selected {
            reports.push(self.one(&mut suite, name).await?);
        }
        if let Some(mut operator) = suite.main.take() {
            operator.terminate();
        }
        let hangs = harness::SHUTDOWN_HANGS.load(std::sync::atomic::Ordering::Relaxed);
        if hangs > suite.totals.shutdown_hangs {
            suite.totals.shutdown_hangs = hangs;
            println!("    the operator did not exit within 30 s of SIGTERM at the end of the run");
        }
        suite.env.cp.stop();
        Ok((reports, suite.totals))
    }

    /// One scenario on the control plane, and the checks after it.
    async fn one(&self, suite: &mut Suite, name: &str) -> anyhow::Result<Report> {
        println!("==> {name}");
        let scenario_started = Instant::now();
        let mut report = match name {
            "deploy-static" | "fuzz" => {
                offline(name, self.root, self.quick, self.seed, &mut suite.totals)?
            }
            _ => match scenario(suite, name).await {
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
        Ok(report)
    }
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
