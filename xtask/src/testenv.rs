//! `cargo xtask test-env` and `cargo xtask test`: the real control plane for humans and for the
//! test suite.

use std::time::Instant;

use anyhow::Context;
use testkit::{ControlPlane, Options};

/// Starts a control plane and prints how to reach it; runs until Ctrl-C.
pub fn run_env() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let started = Instant::now();
        let cp = ControlPlane::start(Options::default()).await?;
        let kubeconfig = cp.write_kubeconfig("admin", &["system:masters"]);
        let bin = testkit::Binaries::locate()?.dir;
        println!(
            "control plane up in {:.1?}: {}",
            started.elapsed(),
            cp.server()
        );
        println!("  run directory (logs, audit.log): {}", cp.dir().display());
        println!();
        println!("  export KUBECONFIG={}", kubeconfig.display());
        println!(
            "  export TESTKIT_DIR={}   # tests attach instead of starting their own",
            cp.dir().display()
        );
        println!("  export PATH={}:$PATH    # kubectl", bin.display());
        println!();
        println!("Ctrl-C stops it and removes the run directory.");
        tokio::signal::ctrl_c().await?;
        cp.stop();
        Ok(())
    })
}

/// Builds (or reuses) the control-plane binaries, starts one control plane for the whole run,
/// and runs the workspace's tests against it. Arguments, if any, replace `--workspace` in the
/// `cargo test` call (e.g. `-p kit`).
pub fn run_tests(args: &[String]) -> anyhow::Result<()> {
    let started = Instant::now();
    let bin = testkit::binaries::build().context("building the control-plane binaries")?;
    eprintln!(
        "[xtask] control-plane binaries ready in {:.1?}: {}",
        started.elapsed(),
        bin.display()
    );
    let rt = tokio::runtime::Runtime::new()?;
    let cp = rt.block_on(ControlPlane::start(Options::default()))?;
    eprintln!(
        "[xtask] control plane up in {:.1?} total: {}",
        started.elapsed(),
        cp.server()
    );
    let status = bench::cluster::cargo()
        .arg("test")
        .args(if args.is_empty() {
            &["--workspace"][..]
        } else {
            &[][..]
        })
        .args(args)
        .env("TESTKIT_DIR", cp.dir())
        .env("TESTKIT_BIN_DIR", &bin)
        .status()
        .context("running cargo test")?;
    cp.stop();
    if !status.success() {
        anyhow::bail!("tests failed ({status})");
    }
    Ok(())
}
