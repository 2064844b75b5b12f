//! The Rust SDK for wasm-apiserver admission policies.
//!
//! It binds the `wasm-apiserver:plugin@0.4.0` package (`wit/` at the
//! repository root) once and hides the boilerplate around it: a policy is a
//! type implementing [`Policy`], exported with [`export_policy!`].
//!
//! ```ignore
//! use wasm_apiserver_plugin_sdk::{export_policy, Policy, Request, Response};
//!
//! #[derive(serde::Deserialize, Default)]
//! struct Config { labels: Vec<String> }
//!
//! struct RequireLabels;
//! impl Policy for RequireLabels {
//!     type Config = Config;
//!     fn validate(config: &Config, req: &Request) -> Response {
//!         let missing: Vec<_> = config.labels.iter().filter(|k| req.label(k).is_none()).collect();
//!         if missing.is_empty() { Response::allow() } else { Response::deny(format!("missing {missing:?}")) }
//!     }
//! }
//! export_policy!(RequireLabels);
//! ```
//!
//! What the SDK gives a policy:
//! - [`Request`]: the admission request with its object parsed once, the
//!   object's name, labels and annotations, and [`Request::object_as`] to
//!   read it as a typed value (e.g. a `k8s_openapi` `Pod`);
//! - [`Response`]: builders for allow, deny (code, reason, field causes),
//!   warnings, audit annotations and a patch;
//! - [`Patch`]: a JSON Patch (RFC 6902) builder with label and annotation
//!   helpers that create missing parents;
//! - configuration parsed into the author's `Deserialize` type, with a
//!   clear `check-config` error ([`parse_config`], [`Pattern`]);
//! - [`cluster`]: `get` and `list` of the objects the plugin is granted
//!   (`spec.contextAwareResources`) and `can_i` (a SubjectAccessReview
//!   through the server's authorizers), served from fixtures natively
//!   ([`testing::set_cluster`], [`testing::set_can_i`],
//!   [`testing::set_grants`]);
//! - [`testing`] (native targets only): run the policy without wasm on an
//!   AdmissionReview, or on a YAML case table of `wasm-apiserver plugin
//!   test --cases`.
//!
//! Scheduler plugins (the `scheduler-plugin` world: filter and score of the
//! scheduling framework) are written the same way, one pod and one node at
//! a time: a type implementing [`scheduler::SchedulerPlugin`], exported
//! with [`export_scheduler_plugin!`]; see [`scheduler`]. Natively,
//! [`testing::run_scheduler_cases`] runs one on a case table.
//!
//! The raw bindings stay available ([`admission::Guest`],
//! [`export_admission!`]; [`scheduler::raw::Guest`],
//! [`scheduler::export_scheduler!`])
//! for plugins that want them.
//!
//! Versioning: the SDK's version follows the WIT package it binds
//! (`0.4.x` binds `wasm-apiserver:plugin@0.4.0`). A server keeps loading
//! every frozen package version, so a policy built with this SDK keeps
//! loading in later servers without a rebuild.

wit_bindgen::generate!({
    path: "../../wit",
    world: "admission-plugin",
    pub_export_macro: true,
    export_macro_name: "export_admission",
    default_bindings_module: "wasm_apiserver_plugin_sdk",
});

pub mod cluster;
mod config;
// Built without WASI (wasm32-unknown-unknown): the allocator of a
// single-use instance.
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod heap;
mod patch;
pub mod policy;
mod request;
mod response;
pub mod scheduler;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

/// The admission interface a plugin exports: its `Guest` trait and request
/// and response records.
pub mod admission {
    pub use crate::exports::wasm_apiserver::plugin::admission::*;
}

pub use config::{Pattern, parse_config};
pub use patch::{Patch, pointer};
pub use policy::Policy;
pub use request::Request;
pub use response::{Response, Violations};
pub use serde_json::{self, Value, json};
pub use wasm_apiserver::plugin::types::{
    FieldCause, GroupVersionKind, GroupVersionResource, Operation, Status, UserInfo,
};

use admission::{AdmissionRequest, AdmissionResponse};

/// An allowing response with no patch, warnings or annotations.
pub fn allow() -> AdmissionResponse {
    Response::allow().into_wit()
}

/// A denying response with the given HTTP code, reason and message.
pub fn deny(code: u16, reason: &str, message: impl Into<String>) -> AdmissionResponse {
    Response::deny(message).code(code).reason(reason).into_wit()
}

/// Parses the request's `object` (or `None` when there is none).
pub fn object(req: &AdmissionRequest) -> Result<Option<serde_json::Value>, String> {
    req.object
        .as_deref()
        .map(|s| serde_json::from_str(s).map_err(|e| format!("object is not valid JSON: {e}")))
        .transpose()
}

/// Logging through the host's `log` import (natively, into
/// [`testing::logs`]).
pub mod log {
    pub use crate::wasm_apiserver::plugin::log::Level;

    /// Emits a record at `level` with structured `fields`.
    pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        #[cfg(target_arch = "wasm32")]
        crate::wasm_apiserver::plugin::log::log(level, message, &fields);
        #[cfg(not(target_arch = "wasm32"))]
        crate::testing::record_log(level, message, fields);
    }

    /// Emits an info record.
    pub fn info(message: &str, fields: &[(&str, &str)]) {
        log(Level::Info, message, fields);
    }

    /// Emits a debug record.
    pub fn debug(message: &str, fields: &[(&str, &str)]) {
        log(Level::Debug, message, fields);
    }

    /// Emits a warning record.
    pub fn warn(message: &str, fields: &[(&str, &str)]) {
        log(Level::Warn, message, fields);
    }
}
