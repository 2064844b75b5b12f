//! The command line: `wasm-apiserver serve [flags]`. Lives in the library so
//! that the end-to-end tests can build the same entry point in their own
//! package (and with their own feature set) as `wasm-apiserver-e2e`.

use crate::ServeArgs;
use clap::{Parser, Subcommand};

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
    Serve(Box<ServeArgs>),
}

/// Parses the arguments, sets up logging and runs the command.
pub fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(crate::run(*args)),
    }
}
