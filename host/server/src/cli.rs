//! The command line: `wasm-apiserver serve [flags]` and `wasm-apiserver
//! plugin inspect|test`. Lives in the library; the assembly's `main` runs
//! it.

use crate::config::ServeArgs;
use clap::{Parser, Subcommand};

/// A Kubernetes-compatible API server whose extension points are wasm components.
#[derive(Parser)]
#[command(name = "wasm-apiserver", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the API server.
    Serve(Box<ServeArgs>),
    /// Inspect and test plugin components offline, in the server's runtime.
    #[command(subcommand)]
    Plugin(crate::plugin_cli::PluginCommand),
    /// Save the embedded store to a snapshot, or restore one.
    #[command(subcommand)]
    Snapshot(crate::snapshot::SnapshotCommand),
}
