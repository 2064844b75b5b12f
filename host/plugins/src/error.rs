//! [`PluginError`]: everything that can go wrong loading or calling a plugin.
//!
//! Messages name the plugin and are meant for the server's log. They may
//! contain guest output (a panic message), so the API server should map them
//! to a generic Kubernetes `Status` for clients rather than echo them.

use std::time::Duration;

/// An error from loading or calling a plugin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The wasm engine could not be set up (bad [`RuntimeConfig`](crate::RuntimeConfig),
    /// unusable cache directory, no virtual memory for the instance pool).
    #[error("plugin runtime: {0}")]
    Engine(String),
    /// The bytes are not a valid WebAssembly component.
    #[error("plugin {plugin}: compilation failed: {message}")]
    Compile { plugin: String, message: String },
    /// The component does not fit the expected world: it imports something
    /// the host does not provide, or lacks the world's exports.
    #[error("plugin {plugin}: not a valid {world} component: {message}")]
    WrongWorld {
        plugin: String,
        world: &'static str,
        message: String,
    },
    /// The plugin rejected its configuration (`check-config`).
    #[error("plugin {plugin}: invalid configuration: {message}")]
    Config { plugin: String, message: String },
    /// The call did not finish within [`Limits::timeout`](crate::Limits::timeout).
    #[error("plugin {plugin}: timed out after {limit:?}")]
    Timeout { plugin: String, limit: Duration },
    /// The guest tried to grow its memory past [`Limits::max_memory_bytes`](crate::Limits::max_memory_bytes)
    /// and died of it.
    #[error("plugin {plugin}: exceeded its memory limit of {limit} bytes")]
    MemoryExceeded { plugin: String, limit: u64 },
    /// The guest trapped (a panic, `unreachable`, a stack overflow, ...).
    #[error("plugin {plugin}: trapped: {message}")]
    Trap { plugin: String, message: String },
    /// The response exceeded [`Limits::max_output_bytes`](crate::Limits::max_output_bytes).
    #[error("plugin {plugin}: response of {size} bytes exceeds the limit of {limit} bytes")]
    OutputTooLarge {
        plugin: String,
        size: usize,
        limit: usize,
    },
    /// The response is malformed (a patch that is not a JSON array, a patch
    /// from `validate`, ...).
    #[error("plugin {plugin}: invalid response: {message}")]
    InvalidOutput { plugin: String, message: String },
    /// [`Limits::max_concurrency`](crate::Limits::max_concurrency) calls were
    /// already running and none finished within [`Limits::queue_timeout`](crate::Limits::queue_timeout).
    #[error("plugin {plugin}: too many concurrent calls")]
    Busy { plugin: String },
    /// A Kubewarden policy answered a waPC error instead of a response
    /// (it could not decode its input, or failed otherwise).
    #[error("plugin {plugin}: the policy failed: {message}")]
    GuestError { plugin: String, message: String },
    /// A resource handler answered an error to `convert` or `default`.
    #[error("plugin {plugin}: {message}")]
    Refused { plugin: String, message: String },
}

impl PluginError {
    /// A short, stable label for this error's kind, used as the `error`
    /// label of the `wasm_apiserver_plugin_errors_total` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            PluginError::Engine(_) => "engine",
            PluginError::Compile { .. } => "compile",
            PluginError::WrongWorld { .. } => "wrong_world",
            PluginError::Config { .. } => "config",
            PluginError::Timeout { .. } => "timeout",
            PluginError::MemoryExceeded { .. } => "memory",
            PluginError::Trap { .. } => "trap",
            PluginError::OutputTooLarge { .. } => "output_too_large",
            PluginError::InvalidOutput { .. } => "invalid_output",
            PluginError::Busy { .. } => "busy",
            PluginError::GuestError { .. } => "guest_error",
            PluginError::Refused { .. } => "refused",
        }
    }
}
