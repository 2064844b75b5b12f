//! Admission plugins: the `wasm-apiserver:plugin/admission-plugin` world.
//!
//! Only what is specific to admission lives here: the world's binding, the
//! conversion of [`AdmissionRequest`]/[`AdmissionResponse`] to and from
//! their WIT records, and the checks on a response (size, patch shape).
//! Loading, limits, concurrency and metrics come from [`crate::runtime`].

use crate::kind::{Loaded, world_pre};
use crate::runtime::{Limits, PluginCore, Runtime};
use crate::sandbox::{LogLevel, StoreState};
use crate::types::{AdmissionRequest, AdmissionResponse, DenyStatus, Gvk, Gvr, Operation};
use crate::{PluginError, metrics::OpMetrics};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The bindings of the admission world (its own module, as wasmtime's WASI
/// bindings do, so generated names stay out of the crate's namespace).
mod bindings {
    wasmtime::component::bindgen!({
        world: "admission-plugin",
        path: "../../wit",
        exports: { default: async },
    });
}

use bindings::exports::wasm_apiserver::plugin::admission as wit;
use bindings::wasm_apiserver::plugin::{log, types as wit_types};

/// `kind` label of admission metrics.
const KIND: &str = "admission";

impl wit_types::Host for StoreState {}

impl log::Host for StoreState {
    fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        let level = match level {
            log::Level::Trace => LogLevel::Trace,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Info => LogLevel::Info,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Error => LogLevel::Error,
        };
        StoreState::log(self, level, message, fields);
    }
}

/// Which export a call goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Validate,
    Mutate,
}

/// A loaded admission plugin, ready to be called concurrently. Cheap to clone.
#[derive(Clone)]
pub struct AdmissionPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    plugin: Loaded<bindings::AdmissionPluginPre<StoreState>>,
    validate_metrics: Arc<OpMetrics>,
    mutate_metrics: Arc<OpMetrics>,
}

world_pre!(
    bindings::AdmissionPlugin,
    AdmissionPluginPre,
    wasm_apiserver_plugin_admission,
    "wasm-apiserver:plugin/admission-plugin@0.1.0",
    "admission"
);

impl std::fmt::Debug for AdmissionPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionPlugin")
            .field("name", &self.name())
            .field("sha256", &self.digest())
            .finish()
    }
}

impl Runtime {
    /// Loads an admission plugin: compiles `wasm` (or takes it from the
    /// cache), checks that it targets the admission world and imports
    /// nothing the host lacks, and has it check `config` once.
    ///
    /// `name` labels logs, metrics and audit annotations; `config` is handed
    /// verbatim to every call.
    pub async fn load_admission(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
    ) -> Result<AdmissionPlugin, PluginError> {
        let plugin = self.load(name, wasm, config, limits).await?;
        let inner = Inner {
            validate_metrics: self.metrics().op(name, KIND, "validate"),
            mutate_metrics: self.metrics().op(name, KIND, "mutate"),
            plugin,
        };
        inner.plugin.check_config().await?;
        Ok(AdmissionPlugin {
            inner: Arc::new(inner),
        })
    }
}

impl AdmissionPlugin {
    /// The name the plugin was loaded under.
    pub fn name(&self) -> &str {
        &self.inner.plugin.core.name
    }

    /// The SHA-256 of the plugin's wasm bytes, in hex.
    pub fn digest(&self) -> &str {
        &self.inner.plugin.core.digest
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.plugin.core.limits
    }

    /// Runs the validating phase. The response never carries a patch.
    pub async fn validate(
        &self,
        request: &AdmissionRequest,
    ) -> Result<AdmissionResponse, PluginError> {
        self.call(Phase::Validate, request).await
    }

    /// Runs the mutating phase; the response may carry a JSON Patch.
    pub async fn mutate(
        &self,
        request: &AdmissionRequest,
    ) -> Result<AdmissionResponse, PluginError> {
        self.call(Phase::Mutate, request).await
    }

    async fn call(
        &self,
        phase: Phase,
        request: &AdmissionRequest,
    ) -> Result<AdmissionResponse, PluginError> {
        let inner = &self.inner;
        let metrics = match phase {
            Phase::Validate => &inner.validate_metrics,
            Phase::Mutate => &inner.mutate_metrics,
        };
        metrics.call();
        let start = Instant::now();
        let result = self.call_inner(phase, request).await;
        inner
            .plugin
            .core
            .record(metrics, start, &result, |r| !r.allowed);
        result
    }

    async fn call_inner(
        &self,
        phase: Phase,
        request: &AdmissionRequest,
    ) -> Result<AdmissionResponse, PluginError> {
        let plugin = &self.inner.plugin;
        let wit_request = to_wit(request);
        let response = plugin
            .call(&request.uid, async move |instance, store, config| {
                let admission = instance.wasm_apiserver_plugin_admission();
                match phase {
                    Phase::Validate => admission.call_validate(store, config, &wit_request).await,
                    Phase::Mutate => admission.call_mutate(store, config, &wit_request).await,
                }
            })
            .await?;
        from_wit(&plugin.core, phase, response)
    }
}

fn gvk(g: &Gvk) -> wit_types::GroupVersionKind {
    wit_types::GroupVersionKind {
        group: g.group.clone(),
        version: g.version.clone(),
        kind: g.kind.clone(),
    }
}

fn gvr(g: &Gvr) -> wit_types::GroupVersionResource {
    wit_types::GroupVersionResource {
        group: g.group.clone(),
        version: g.version.clone(),
        resource: g.resource.clone(),
    }
}

fn to_wit(r: &AdmissionRequest) -> wit::AdmissionRequest {
    let json = |v: &Option<serde_json::Value>| v.as_ref().map(|v| v.to_string());
    wit::AdmissionRequest {
        uid: r.uid.clone(),
        kind: gvk(&r.kind),
        resource: gvr(&r.resource),
        sub_resource: r.sub_resource.clone(),
        request_kind: r.request_kind.as_ref().map(gvk),
        request_resource: r.request_resource.as_ref().map(gvr),
        request_sub_resource: r.request_sub_resource.clone(),
        name: r.name.clone(),
        namespace: r.namespace.clone(),
        operation: match r.operation {
            Operation::Create => wit_types::Operation::Create,
            Operation::Update => wit_types::Operation::Update,
            Operation::Delete => wit_types::Operation::Delete,
            Operation::Connect => wit_types::Operation::Connect,
        },
        user_info: wit_types::UserInfo {
            username: r.user.username.clone(),
            uid: r.user.uid.clone(),
            groups: r.user.groups.clone(),
            extra: r
                .user
                .extra
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        },
        dry_run: r.dry_run,
        object: json(&r.object),
        old_object: json(&r.old_object),
        options: json(&r.options),
    }
}

/// The size the output limit applies to.
fn output_size(r: &wit::AdmissionResponse) -> usize {
    let status = r
        .status
        .as_ref()
        .map_or(0, |s| s.reason.len() + s.message.len());
    let patch = r.patch.as_ref().map_or(0, String::len);
    let warnings: usize = r.warnings.iter().map(String::len).sum();
    let annotations: usize = r
        .audit_annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    status + patch + warnings + annotations
}

/// The reason Kubernetes uses for an HTTP code.
fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Forbidden",
    }
}

/// Checks and converts a plugin's response.
fn from_wit(
    core: &PluginCore,
    phase: Phase,
    r: wit::AdmissionResponse,
) -> Result<AdmissionResponse, PluginError> {
    let plugin = || core.name.to_string();
    let size = output_size(&r);
    if size > core.limits.max_output_bytes {
        return Err(PluginError::OutputTooLarge {
            plugin: plugin(),
            size,
            limit: core.limits.max_output_bytes,
        });
    }
    let invalid = |message: String| PluginError::InvalidOutput {
        plugin: plugin(),
        message,
    };

    let patch = match (&r.patch, phase) {
        (None, _) => None,
        (Some(_), Phase::Validate) => {
            return Err(invalid("validate returned a patch".to_owned()));
        }
        // A denial's patch is never applied.
        (Some(_), Phase::Mutate) if !r.allowed => None,
        (Some(text), Phase::Mutate) => Some(check_patch(text).map_err(invalid)?),
    };

    let status = if r.allowed {
        None
    } else {
        let status = r.status.unwrap_or(wit_types::Status {
            code: 403,
            reason: String::new(),
            message: String::new(),
        });
        let code = if (400..=599).contains(&status.code) {
            status.code
        } else {
            403
        };
        let reason = if status.reason.is_empty() {
            reason_for(code).to_owned()
        } else {
            status.reason
        };
        let message = if status.message.is_empty() {
            format!("denied by admission plugin {}", core.name)
        } else {
            status.message
        };
        Some(DenyStatus {
            code,
            reason,
            message,
        })
    };

    let audit_annotations: BTreeMap<String, String> = r
        .audit_annotations
        .into_iter()
        .map(|(k, v)| (format!("{}/{k}", core.name), v))
        .collect();

    Ok(AdmissionResponse {
        allowed: r.allowed,
        status,
        patch,
        warnings: r.warnings,
        audit_annotations,
    })
}

/// Parses a JSON Patch and checks its shape: an array of objects, each with
/// a known `op` and a string `path`.
fn check_patch(text: &str) -> Result<serde_json::Value, String> {
    let patch: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("patch is not JSON: {e}"))?;
    let ops = patch
        .as_array()
        .ok_or_else(|| "patch is not a JSON array".to_owned())?;
    for (i, op) in ops.iter().enumerate() {
        let name = op.get("op").and_then(|o| o.as_str());
        if !matches!(
            name,
            Some("add" | "remove" | "replace" | "move" | "copy" | "test")
        ) {
            return Err(format!("patch operation {i} has no valid \"op\""));
        }
        if op.get("path").and_then(|p| p.as_str()).is_none() {
            return Err(format!("patch operation {i} has no \"path\""));
        }
    }
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::check_patch;

    #[test]
    fn patch_shape_is_checked() {
        assert!(check_patch(r#"[{"op":"add","path":"/a","value":1}]"#).is_ok());
        assert!(check_patch("[]").is_ok());
        assert!(check_patch("{}").unwrap_err().contains("not a JSON array"));
        assert!(check_patch("[{\"op\":\"frob\",\"path\":\"/\"}]").is_err());
        assert!(check_patch("[{\"op\":\"add\"}]").is_err());
        assert!(check_patch("nope").is_err());
    }
}
