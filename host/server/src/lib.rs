//! The API server: the HTTP layer (axum routes, request decoding and
//! encoding, watch streaming, discovery), access control (authentication,
//! impersonation, authorization, audit), and the assembly that wires them
//! to the registry (`wasm-apiserver-registry`), storage and the plugin
//! runtime.
//!
//! Architecture invariant: this is the only crate that names axum; nothing
//! imports the assembly ([`server`]).
//!
//! Request pipeline, in order (see [`router`]): request info →
//! authentication → audit → impersonation → authorization → handler, which
//! calls the registry (admission runs there, where the decoded object is
//! known).
//!
//! Modules by layer, each importing only those below it:
//! * HTTP: [`handlers`], [`watch`], [`discovery`], [`filters`] (the
//!   middleware), [`state`], [`error`], and [`bulk`] (where LIST responses
//!   are built, at a lower OS priority);
//! * access control: [`authn`], [`authz`], [`audit`], [`access_plugins`],
//!   [`satoken`];
//! * the assembly: [`server`], with [`cli`], [`config`] and [`tls`].

pub mod access_plugins;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod bulk;
pub mod cli;
pub mod config;
pub mod connect;
pub mod controller_cli;
pub mod discovery;
pub mod error;
pub mod filters;
pub mod flowcontrol;
pub mod handlers;
pub mod health;
pub mod logging;
pub mod metrics;
mod parse_errors;
pub mod plugin_cli;
pub mod proxy;
pub mod satoken;
pub mod scheduler_cli;
pub mod server;
pub mod snapshot;
pub mod state;
pub mod tls;
pub mod watch;

pub use config::ServeArgs;
pub use server::{main, router, run};
pub use state::AppState;
pub use wasm_apiserver_api::KUBERNETES_VERSION;

/// The memory allocator of the server binaries (and the benchmark):
/// mimalloc, because glibc's malloc and free were a third of the request
/// path's CPU (`perf` on the create benchmark). Built without transparent
/// huge pages (`no_thp`): with them mimalloc backs its arenas with 2 MiB
/// pages, so the process grows in 2 MiB steps (a loaded plugin measured
/// 4.4 MB of RSS with them, 1.8 MB without), for no measured gain in the
/// create, get and list benchmarks. A binary installs it with
/// `#[global_allocator] static ALLOC: Allocator = Allocator;`.
pub use mimalloc::MiMalloc as Allocator;
