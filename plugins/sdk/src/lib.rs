//! Guest-side SDK for wasm-apiserver plugins written in Rust.
//!
//! It generates the bindings of the `wasm-apiserver:plugin@0.2.0` package
//! (`wit/` at the repository root) once, so that each plugin crate only
//! implements [`admission::Guest`] and calls [`export_admission!`]:
//!
//! ```ignore
//! use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
//! struct Plugin;
//! impl Guest for Plugin { /* check_config, validate, mutate */ }
//! wasm_apiserver_plugin_sdk::export_admission!(Plugin);
//! ```
//!
//! Besides the bindings it offers small helpers for building responses
//! ([`allow`], [`deny`]), reading the request object ([`object`]) and
//! logging ([`log`]).

wit_bindgen::generate!({
    path: "../../wit",
    world: "admission-plugin",
    pub_export_macro: true,
    export_macro_name: "export_admission",
    default_bindings_module: "wasm_apiserver_plugin_sdk",
});

/// The admission interface a plugin exports: its `Guest` trait and request
/// and response records.
pub mod admission {
    pub use crate::exports::wasm_apiserver::plugin::admission::*;
}

pub use wasm_apiserver::plugin::types::{
    FieldCause, GroupVersionKind, GroupVersionResource, Operation, Status, UserInfo,
};

use admission::{AdmissionRequest, AdmissionResponse};
use wasm_apiserver::plugin::log::Level;

/// An allowing response with no patch, warnings or annotations.
pub fn allow() -> AdmissionResponse {
    AdmissionResponse {
        allowed: true,
        status: None,
        patch: None,
        warnings: Vec::new(),
        audit_annotations: Vec::new(),
    }
}

/// A denying response with the given HTTP code, reason and message.
pub fn deny(code: u16, reason: &str, message: impl Into<String>) -> AdmissionResponse {
    AdmissionResponse {
        allowed: false,
        status: Some(Status {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            causes: Vec::new(),
        }),
        patch: None,
        warnings: Vec::new(),
        audit_annotations: Vec::new(),
    }
}

/// Parses the request's `object` (or `None` when there is none).
pub fn object(req: &AdmissionRequest) -> Result<Option<serde_json::Value>, String> {
    req.object
        .as_deref()
        .map(|s| serde_json::from_str(s).map_err(|e| format!("object is not valid JSON: {e}")))
        .transpose()
}

/// Logging through the host's `log` import.
pub mod log {
    use super::Level;

    /// Emits a record at `level` with structured `fields`.
    pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        crate::wasm_apiserver::plugin::log::log(level, message, &fields);
    }

    /// Emits an info record.
    pub fn info(message: &str, fields: &[(&str, &str)]) {
        log(Level::Info, message, fields);
    }

    /// Emits a debug record.
    pub fn debug(message: &str, fields: &[(&str, &str)]) {
        log(Level::Debug, message, fields);
    }
}
