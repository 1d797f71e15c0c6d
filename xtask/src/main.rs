//! Project tasks, run as `cargo xtask <task>`.

use clap::{Parser, Subcommand};

mod crds;

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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Crds { check } => crds::run(check),
    }
}
