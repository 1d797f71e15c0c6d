//! `dynamo-operator`: see `dynamo-operator --help`.

use clap::Parser;
use operator::cli::{Cli, Command};
use operator::{Exit, telemetry};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command.clone().unwrap_or(Command::Run) {
        Command::Crds => {
            for crd in api::crds() {
                println!("---");
                print!("{}", serde_yaml_string(&crd));
            }
            std::process::ExitCode::SUCCESS
        }
        Command::Triggers => {
            print!("{}", operator::triggers::markdown());
            std::process::ExitCode::SUCCESS
        }
        Command::Render(args) => {
            let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
            match runtime.block_on(operator::render::render(
                &args,
                cli.run.namespace.as_deref(),
            )) {
                Ok(text) => {
                    print!("{text}");
                    std::process::ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {error:#}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::Run => {
            telemetry::init(cli.run.log_format, &cli.run.log);
            let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
            match runtime.block_on(async {
                let shutdown = operator::shutdown_on_signals();
                operator::run(cli.run, shutdown).await
            }) {
                Ok(Exit::Shutdown) => std::process::ExitCode::SUCCESS,
                Ok(Exit::LostLease) => std::process::ExitCode::from(3),
                Err(error) => {
                    tracing::error!(error = format!("{error:#}"), "operator failed");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}

fn serde_yaml_string<T: serde::Serialize>(value: &T) -> String {
    serde_yaml::to_string(value).expect("CRDs serialize")
}
