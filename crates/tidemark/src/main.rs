//! `tidemark`: the one binary. Today it inspects RocketMQ wire captures; the name server, the
//! broker (`dev`, `namesrv`, `broker`), `admin` and `bench` subcommands arrive with their crates.

mod inspect;

use clap::{Parser, Subcommand};

/// A RocketMQ-compatible message broker, name server and tools.
#[derive(Debug, Parser)]
#[command(name = "tidemark", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode RocketMQ bytes (a captured frame, a stored message record) and print every field.
    #[command(subcommand)]
    Inspect(inspect::Inspect),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Inspect(what) => inspect::run(what, &mut std::io::stdout().lock()),
    }
}
