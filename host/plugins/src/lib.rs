//! The wasm plugin runtime of wasm-apiserver: the only crate that names
//! wasmtime.
//!
//! Extension points of the API server (admission, authentication and
//! authorization today; later
//! authentication, authorization and custom-resource handlers) are
//! WebAssembly components targeting the worlds of the
//! `wasm-apiserver:plugin@0.1.0` WIT package (`wit/` at the repository
//! root). This crate compiles them, caches the compiled code on disk, and
//! runs every call in a fresh sandbox with a wall-time limit, a memory
//! limit, an output-size limit and a per-plugin concurrency cap, with no
//! access to files, network, environment or the host's stdio.
//!
//! # API
//!
//! ```no_run
//! # async fn demo(wasm: &[u8], request: &wasm_apiserver_plugins::AdmissionRequest)
//! # -> Result<(), wasm_apiserver_plugins::PluginError> {
//! use wasm_apiserver_plugins::{Limits, Runtime, RuntimeConfig};
//! let runtime = Runtime::new(RuntimeConfig {
//!     cache_dir: Some("/var/cache/wasm-apiserver".into()),
//!     ..RuntimeConfig::default()
//! })?;
//! let plugin = runtime
//!     .load_admission("require-labels", wasm, r#"{"labels":["team"]}"#, Limits::default())
//!     .await?;
//! let response = plugin.validate(request).await?; // or plugin.mutate(request)
//! if !response.allowed {
//!     let status = response.status.expect("a denial has a status");
//!     println!("{} {}: {}", status.code, status.reason, status.message);
//! }
//! println!("{}", runtime.metrics_text());
//! # Ok(()) }
//! ```
//!
//! * [`Runtime`]: `new(RuntimeConfig)`, `load_admission` / `load_authenticator` /
//!   `load_authorizer(name, wasm, config, Limits)`, `load_kubewarden(name,
//!   wasm, settings, Limits, Option<ClusterAccess>)` (a Kubewarden policy,
//!   unchanged, as an [`AdmissionPlugin`], with the cluster reads it is
//!   granted),
//!   `metrics_text()`, `cache_stats()`. Cheap to clone.
//! * [`AdmissionPlugin`]: `validate(&AdmissionRequest)`, `mutate(&AdmissionRequest)`,
//!   `name()`, `digest()`, `limits()`. Cheap to clone; call it concurrently.
//! * Plain data: [`AdmissionRequest`], [`AdmissionResponse`], [`DenyStatus`],
//!   [`Gvk`], [`Gvr`], [`UserInfo`], [`Operation`], [`Limits`], [`RuntimeConfig`],
//!   [`CacheStats`]; errors: [`PluginError`]. No wasmtime type is public.
//!
//! The calls are `async` and must run inside a tokio runtime with the time
//! driver enabled (timeouts use `tokio::time`).
//!
//! # Modules
//!
//! * `runtime`: engine, cache, epoch ticker, and the call path every
//!   plugin kind shares (limits, concurrency, error classification, metrics).
//! * `kind`: the load and call path generic over a world binding
//!   (`WorldPre`: compile, link, pre-instantiate, check-config, call).
//! * `sandbox`: the per-call store state and the WASI context that grants nothing.
//! * `admission`, `authn`, `authz`: one module per plugin kind — its world
//!   binding (`admission-plugin`, `authenticator-plugin`, `authorizer-plugin`)
//!   and its request/response conversion.
//! * `kubewarden`, `wapc`: Kubewarden policies (waPC core modules for
//!   `wasm32-wasip1`) as a second backend of [`AdmissionPlugin`]: the
//!   policy protocol (`validate`, `validate_settings`, metadata) and the
//!   host side of waPC, with Kubewarden's logging and `kubernetes` host
//!   capabilities.
//! * `cluster`: what a plugin may read of the cluster ([`Cluster`], the
//!   host's reads; [`ClusterAccess`], its grants and per-evaluation budget).
//! * `scheduler`: the `scheduler-plugin` world (filter and score plugins
//!   of the scheduling framework, every candidate node in one call).
//! * `controller`: the `controller-plugin` world (reconcile one key, with
//!   reads, writes and events); `writes`: what a controller may write
//!   ([`writes::Writes`], the host's requests as the controller's
//!   identity; [`writes::WriteAccess`], its per-reconcile budget).
//! * `metrics`: counters and histograms in the Prometheus text format.
//! * `types`, `error`: the public data types and [`PluginError`].
//!
//! Architecture invariant: a new plugin kind adds one module like
//! `admission` (a `bindgen!` of its world, a `WorldPre` impl for its `*Pre`
//! type, a `load_*` method and its calls) and reuses `Runtime::load`,
//! `Loaded::call` and `PluginCore::run` unchanged.

mod admission;
mod authn;
mod authz;
pub mod cluster;
mod controller;
mod error;
mod handler;
mod inspect;
mod kind;
mod kubewarden;
mod metrics;
mod runtime;
mod sandbox;
mod scheduler;
mod types;
mod wapc;
pub mod writes;

pub use admission::{AdmissionPlugin, Encoded};
pub use authn::{AuthenticatorPlugin, AuthnOutcome, AuthnRequest, ClientCertificate};
pub use authz::{AuthorizerPlugin, AuthzAttributes, AuthzDecision, AuthzRequest};
pub use cluster::{Cluster, ClusterAccess, Grant, ListQuery, Listed, Target};
pub use controller::{ControllerPlugin, Outcome, ReconcileReason, ReconcileRequest};
pub use error::PluginError;
pub use handler::{ObjectRequest, ResourceHandlerPlugin};
pub use inspect::Inspection;
pub use runtime::{Limits, Runtime, RuntimeConfig};
pub use scheduler::{
    ExtensionPoints, Filtered, MAX_SCORE, Refusal, RefusalCode, SchedulerNode, SchedulerPlugin,
    Scored,
};
pub use types::{
    AdmissionRequest, AdmissionResponse, CacheStats, DenyStatus, FieldCause, Gvk, Gvr, Operation,
    UserInfo,
};
#[doc(hidden)]
pub use wapc::{Answer as WapcAnswer, WapcModule};
