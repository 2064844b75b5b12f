//! The API server: HTTP routing, the request pipeline and the object store
//! logic on top of [`wasm_apiserver_storage::Storage`].
//!
//! Architecture invariant: this is the only crate that names axum. The API
//! machinery (`wasm-apiserver-api`) and storage know nothing of HTTP.
//!
//! Request pipeline, in order (see [`router`]):
//! request info → authentication → authorization → handler, where the handler
//! runs admission before anything reaches storage (see [`objects`]).

pub mod access_plugins;
pub mod admission;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod cli;
pub mod config;
pub mod discovery;
pub mod error;
pub mod filters;
pub mod handlers;
pub mod namespaces;
pub mod objects;
pub mod request;
pub mod satoken;
pub mod server;
pub mod tls;
pub mod watch;
pub mod webhook;

pub use config::ServeArgs;
pub use server::{AppState, router, run};

/// The memory allocator of the server binaries (and the benchmark):
/// mimalloc, because glibc's malloc and free were a third of the request
/// path's CPU (`perf` on the create benchmark). A binary installs it with
/// `#[global_allocator] static ALLOC: Allocator = Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// The Kubernetes version this server reports and implements.
pub const KUBERNETES_VERSION: &str = "v1.33.0";
