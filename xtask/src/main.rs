//! Project tasks, run as `cargo xtask <task>`.

use clap::{Parser, Subcommand};

mod crds;
mod dev;
mod testenv;

#[derive(Parser)]
#[command(about = "Project tasks for dynamo-operator-rs")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Write deploy/crds/*.yaml from the API types (`--check` fails on drift instead).
    Crds {
        #[arg(long)]
        check: bool,
    },
    /// Start the real control plane (etcd, kube-apiserver, controller-manager, scheduler,
    /// simulated nodes) and print how to reach it; Ctrl-C stops it.
    TestEnv,
    /// First run: start the control plane, install deploy/ (namespace, CRDs, RBAC), run the
    /// operator as its ServiceAccount with the conversion webhook, apply a sample graph and show
    /// it becoming Ready.
    Dev {
        /// The DynamoGraphDeployment to apply (default: examples/vllm-agg.yaml).
        #[arg(long)]
        sample: Option<std::path::PathBuf>,
        /// Optional APIs to install: lws, grove, inferencepool, dra (comma-separated).
        #[arg(long, value_delimiter = ',')]
        with: Vec<String>,
    },
    /// Measure convergence time, API requests, no-op cost, amplification, churn and footprint
    /// of the operator at N = 10, 100, 1000 graphs (report in target/bench/).
    Bench(bench::Args),
    /// Build or reuse the control-plane binaries, start one control plane, run all tests.
    Test {
        /// Arguments passed on to `cargo test`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Reliability suite: the operator binary on the real control plane under faults, bad input
    /// and least privilege; reports figures, fails on a lost, duplicated or wrong object.
    Reliability {
        /// The CI subset (a few minutes).
        #[arg(long)]
        quick: bool,
        /// Run only these scenarios (comma-separated names, as listed in the report).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Seed of every random choice (kill points, deletions, fuzz cases); printed each run.
        #[arg(long)]
        seed: Option<u64>,
        /// Write the figures into docs/reliability.md.
        #[arg(long)]
        record: bool,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().task {
        Task::Crds { check } => crds::run(check),
        Task::TestEnv => testenv::run_env(),
        Task::Dev { sample, with } => dev::run(dev::Args { sample, with }),
        Task::Test { args } => testenv::run_tests(&args),
        Task::Bench(args) => bench::run(args),
        Task::Reliability {
            quick,
            only,
            seed,
            record,
        } => reliability::run(reliability::Options {
            quick,
            only,
            seed,
            record,
        }),
    }
}
