//! `dynamo-operator`: see `dynamo-operator --help`.

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use operator::cli::{Cli, Command};
use operator::{Exit, config, telemetry};

fn main() -> std::process::ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let file = match cli.run.config.clone().map(|path| config::load(&path)) {
        Some(Ok(file)) => {
            config::apply(&file, &mut cli.run, &|id| given(&matches, id));
            Some(file)
        }
        Some(Err(error)) => {
            eprintln!("error: {error}");
            return std::process::ExitCode::from(2);
        }
        None => None,
    };
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
            match runtime.block_on(operator::render::render(&args, &cli.run)) {
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
            for warning in file.iter().flat_map(config::warnings) {
                tracing::warn!("{warning}");
            }
            tracing::info!(config = ?cli.run.config, settings = ?cli.run, "effective configuration");
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

/// Whether the command line or the environment gave the argument `id` (at the top level or to
/// the subcommand).
fn given(matches: &ArgMatches, id: &str) -> bool {
    let explicit = |m: &ArgMatches| {
        matches!(
            m.try_get_raw(id).ok().flatten().and(m.value_source(id)),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    explicit(matches) || matches.subcommand().is_some_and(|(_, sub)| explicit(sub))
}
