//! The `wasm-apiserver` binary.

use clap::{Parser, Subcommand};
use wasm_apiserver::ServeArgs;

/// A Kubernetes-compatible API server whose extension points are wasm components.
#[derive(Parser)]
#[command(name = "wasm-apiserver", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API server.
    Serve(ServeArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve(args) => wasm_apiserver::run(args).await,
    }
}
