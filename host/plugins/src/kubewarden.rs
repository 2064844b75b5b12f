//! Kubewarden policies as admission plugins, unchanged: core wasm modules
//! built with Kubewarden's SDKs (`wasm32-wasip1`, waPC, see [`crate::wapc`]).
//!
//! * **Loading** reads the `io.kubewarden.metadata` custom section when
//!   there is one (`kwctl annotate` adds it; plain `cargo build` output has
//!   none, and needs none): an `executionMode` other than `kubewarden-wapc`
//!   (OPA, Gatekeeper, WASI command policies) or a `protocolVersion` other
//!   than `v1` is refused. Without the section the guest's own
//!   `protocol_version` operation is asked. Then `validate_settings` runs
//!   on the settings (the plugin's `config`, a JSON object; empty means
//!   `{}`) as our components' `check-config` does: invalid settings fail
//!   the load, so the previous version keeps serving.
//! * **Calls** send `validate` the `ValidationRequest` Kubewarden's
//!   policy-server sends, `{"request": <admission.k8s.io/v1
//!   AdmissionRequest>, "settings": <settings>}`, and read its
//!   `ValidationResponse`. A rejection becomes a denial with the policy's
//!   message and code (400 when it gives none or one below 400, as the
//!   Kubernetes API server does for a webhook's denial); a `mutated_object`
//!   becomes the JSON patch from the request's object to it
//!   (`json_patch::diff`, as policy-server computes it). A mutation in the
//!   validating phase, or of a DELETE's absent object, is rejected as
//!   policy-server rejects it. A guest error (`__guest_error`), a trap, a
//!   timeout or an answer that is not a `ValidationResponse` is a
//!   [`PluginError`], which the chain handles by its `failurePolicy`.

use crate::PluginError;
use crate::runtime::{Limits, Runtime};
use crate::types::AdmissionRequest;
use crate::wapc::{Answer, Wapc};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The custom section `kwctl annotate` adds.
const METADATA_SECTION: &str = "io.kubewarden.metadata";

/// What a policy's `io.kubewarden.metadata` says (the fields the host uses).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Metadata {
    #[serde(default)]
    pub(crate) protocol_version: Option<String>,
    #[serde(default)]
    pub(crate) mutating: bool,
    #[serde(default)]
    pub(crate) execution_mode: Option<String>,
    /// Whether the policy may be run on stored objects (Kubewarden's
    /// audit-scanner honours it; default true).
    #[serde(default)]
    pub(crate) background_audit: Option<bool>,
    /// `io.kubewarden.policy.*` annotations (title, severity, category...).
    #[serde(default)]
    pub(crate) annotations: BTreeMap<String, String>,
}

/// Kubewarden's `ValidationResponse`.
#[derive(Deserialize)]
struct ValidationResponse {
    accepted: bool,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    mutated_object: Option<serde_json::Value>,
    #[serde(default)]
    audit_annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
}

/// Kubewarden's `SettingsValidationResponse`.
#[derive(Deserialize)]
struct SettingsValidationResponse {
    valid: bool,
    #[serde(default)]
    message: Option<String>,
}

/// A policy's answer to one admission request, before the checks every
/// admission answer goes through.
pub(crate) struct Verdict {
    pub(crate) accepted: bool,
    /// The denial's code and message (when not accepted).
    pub(crate) code: u16,
    pub(crate) message: String,
    /// A JSON patch (text), when the policy mutated the object.
    pub(crate) patch: Option<String>,
    pub(crate) warnings: Vec<String>,
    pub(crate) audit_annotations: Vec<(String, String)>,
}

impl Verdict {
    fn reject(message: String) -> Verdict {
        Verdict {
            accepted: false,
            code: 400,
            message,
            patch: None,
            warnings: Vec::new(),
            audit_annotations: Vec::new(),
        }
    }
}

/// A loaded Kubewarden policy.
pub(crate) struct Policy {
    pub(crate) wapc: Wapc,
    /// The settings, as a JSON object's text.
    settings: Arc<str>,
    pub(crate) metadata: Option<Metadata>,
    calls: AtomicU64,
}

impl Runtime {
    /// Loads a Kubewarden policy (see the module docs) with `settings`, a
    /// JSON object's text (empty for none).
    pub(crate) async fn load_kubewarden_policy(
        &self,
        name: &str,
        wasm: &[u8],
        settings: &str,
        limits: Limits,
        cluster: Option<crate::ClusterAccess>,
    ) -> Result<Policy, PluginError> {
        let metadata = read_metadata(name, wasm)?;
        let settings = settings_object(name, settings)?;
        let compiled = self.compile_module(name, wasm).await?;
        let mut wapc = self.link_wapc(name, compiled, limits)?;
        wapc.cluster = cluster.map(Arc::new);
        let policy = Policy {
            wapc,
            settings: settings.into(),
            metadata,
            calls: AtomicU64::new(0),
        };
        policy.check_protocol_version().await?;
        policy.validate_settings().await?;
        Ok(policy)
    }
}

/// `settings` as a JSON object's text: empty or `null` is `{}`.
fn settings_object(name: &str, settings: &str) -> Result<String, PluginError> {
    let invalid = |message: String| PluginError::Config {
        plugin: name.to_owned(),
        message,
    };
    if settings.trim().is_empty() {
        return Ok("{}".to_owned());
    }
    let value: serde_json::Value = serde_json::from_str(settings)
        .map_err(|e| invalid(format!("Kubewarden settings are not JSON: {e}")))?;
    match value {
        serde_json::Value::Null => Ok("{}".to_owned()),
        serde_json::Value::Object(_) => Ok(value.to_string()),
        other => Err(invalid(format!(
            "Kubewarden settings must be a JSON object, not {other}"
        ))),
    }
}

/// Checks that `wasm` is a core module (not a component) and returns its
/// `io.kubewarden.metadata`, if any.
fn read_metadata(name: &str, wasm: &[u8]) -> Result<Option<Metadata>, PluginError> {
    let compile_error = |message: String| PluginError::Compile {
        plugin: name.to_owned(),
        message,
    };
    if wasm.get(4..8) == Some(&[0x0d, 0x00, 0x01, 0x00][..]) {
        return Err(compile_error(
            "this is a wasm component, not a Kubewarden policy (a core module); \
             use spec.module.format: component"
                .to_owned(),
        ));
    }
    let metadata = match custom_section(wasm, METADATA_SECTION) {
        Some(data) => Some(
            serde_json::from_slice::<Metadata>(data)
                .map_err(|e| compile_error(format!("invalid {METADATA_SECTION} section: {e}")))?,
        ),
        None => None,
    };
    if let Some(m) = &metadata {
        if let Some(mode) = m
            .execution_mode
            .as_deref()
            .filter(|m| *m != "kubewarden-wapc")
        {
            return Err(compile_error(format!(
                "executionMode {mode:?} is not supported: only kubewarden-wapc policies run here"
            )));
        }
        if let Some(v) = m.protocol_version.as_deref().filter(|v| *v != "v1") {
            return Err(compile_error(format!(
                "protocolVersion {v:?} is not supported (only v1)"
            )));
        }
    }
    Ok(metadata)
}

/// The contents of the first custom section called `name` of a core
/// module, if any. A malformed module has none here (compiling it reports
/// what is wrong).
fn custom_section<'a>(wasm: &'a [u8], name: &str) -> Option<&'a [u8]> {
    /// An unsigned LEB128 `u32` at the start of `bytes`, and the rest.
    fn leb128(bytes: &[u8]) -> Option<(usize, &[u8])> {
        let mut value: u64 = 0;
        for (i, b) in bytes.iter().take(5).enumerate() {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some((usize::try_from(value).ok()?, &bytes[i + 1..]));
            }
        }
        None
    }
    let mut rest = wasm.strip_prefix(b"\0asm\x01\0\0\0")?;
    while let Some((&id, after_id)) = rest.split_first() {
        let (size, body) = leb128(after_id)?;
        let section = body.get(..size)?;
        rest = &body[size..];
        if id == 0 {
            let (len, after_len) = leb128(section)?;
            if after_len.get(..len)? == name.as_bytes() {
                return Some(&after_len[len..]);
            }
        }
    }
    None
}

impl Policy {
    /// The plugin's name.
    fn name(&self) -> String {
        self.wapc.core.name.to_string()
    }

    /// Calls that instantiated the policy so far (every call does).
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    async fn call(
        &self,
        uid: &str,
        operation: &str,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, PluginError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match self.wapc.call(uid, operation, payload).await? {
            Answer::Response(bytes) => Ok(bytes),
            Answer::Error(message) => Err(PluginError::GuestError {
                plugin: self.name(),
                message: if message.is_empty() {
                    format!("{operation} failed without a message")
                } else {
                    message
                },
            }),
        }
    }

    /// Without metadata, asks the guest's `protocol_version` (which
    /// Kubewarden's SDKs register); only an explicit other version is
    /// refused, since the operation is optional in waPC.
    async fn check_protocol_version(&self) -> Result<(), PluginError> {
        if self.metadata.is_some() {
            return Ok(());
        }
        match self.call("load", "protocol_version", Vec::new()).await {
            Ok(bytes) => match serde_json::from_slice::<String>(&bytes) {
                Ok(v) if v == "v1" => Ok(()),
                Ok(v) => Err(PluginError::Compile {
                    plugin: self.name(),
                    message: format!("protocol version {v:?} is not supported (only v1)"),
                }),
                Err(_) => Ok(()),
            },
            Err(PluginError::GuestError { message, .. }) => {
                tracing::debug!(plugin = %self.name(), %message, "no protocol_version operation");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Runs `validate_settings` on the settings.
    async fn validate_settings(&self) -> Result<(), PluginError> {
        let invalid = |message: String| PluginError::Config {
            plugin: self.name(),
            message,
        };
        let bytes = match self
            .call(
                "load",
                "validate_settings",
                self.settings.as_bytes().to_vec(),
            )
            .await
        {
            Ok(bytes) => bytes,
            // The SDKs answer an error for settings they cannot decode.
            Err(PluginError::GuestError { message, .. }) => return Err(invalid(message)),
            Err(e) => return Err(e),
        };
        let response: SettingsValidationResponse =
            serde_json::from_slice(&bytes).map_err(|e| PluginError::InvalidOutput {
                plugin: self.name(),
                message: format!(
                    "validate_settings did not answer a SettingsValidationResponse: {e}"
                ),
            })?;
        if response.valid {
            Ok(())
        } else {
            Err(invalid(response.message.unwrap_or_else(|| {
                "the policy rejected its settings".to_owned()
            })))
        }
    }

    /// Runs `validate` on `request`; `mutating` says whether the answer
    /// may mutate the object (the mutating phase).
    pub(crate) async fn validate(
        &self,
        request: &AdmissionRequest,
        mutating: bool,
    ) -> Result<Verdict, PluginError> {
        let request_json = serde_json::to_string(request)
            .map_err(|e| PluginError::Engine(format!("encoding the request: {e}")))?;
        let payload = format!(
            "{{\"request\":{request_json},\"settings\":{}}}",
            self.settings
        );
        let bytes = self
            .call(&request.uid, "validate", payload.into_bytes())
            .await?;
        let r: ValidationResponse =
            serde_json::from_slice(&bytes).map_err(|e| PluginError::InvalidOutput {
                plugin: self.name(),
                message: format!("validate did not answer a ValidationResponse: {e}"),
            })?;
        let patch = match (&r.mutated_object, &request.object) {
            (Some(_), _) if !r.accepted => None,
            (None, _) => None,
            (Some(_), None) => {
                return Ok(Verdict::reject(
                    "Incoming object is null, which happens only with DELETE operations, \
                     but the policy is attempting a mutation. This is not allowed"
                        .to_owned(),
                ));
            }
            (Some(mutated), Some(object)) => {
                let diff = json_patch::diff(object, mutated);
                if diff.0.is_empty() {
                    None
                } else if !mutating {
                    return Ok(Verdict::reject(format!(
                        "Request rejected by policy {}. The policy attempted to mutate the \
                         request, but it is currently configured to not allow mutations.",
                        self.name()
                    )));
                } else {
                    Some(
                        serde_json::to_string(&diff)
                            .map_err(|e| PluginError::Engine(format!("encoding the patch: {e}")))?,
                    )
                }
            }
        };
        Ok(Verdict {
            accepted: r.accepted,
            code: r.code.filter(|c| *c >= 400).unwrap_or(400),
            message: r.message.unwrap_or_default(),
            patch,
            warnings: r.warnings.unwrap_or_default(),
            audit_annotations: r
                .audit_annotations
                .unwrap_or_default()
                .into_iter()
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_a_json_object() {
        assert_eq!(settings_object("p", "").unwrap(), "{}");
        assert_eq!(settings_object("p", "null").unwrap(), "{}");
        assert_eq!(settings_object("p", r#"{"a": 1}"#).unwrap(), r#"{"a":1}"#);
        for bad in ["[1]", "\"x\"", "{"] {
            assert!(
                matches!(settings_object("p", bad), Err(PluginError::Config { .. })),
                "{bad}"
            );
        }
    }

    /// A core module with one custom section.
    fn module_with_section(name: &str, data: &[u8]) -> Vec<u8> {
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        let mut body = vec![u8::try_from(name.len()).unwrap()];
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(data);
        m.push(0);
        m.push(u8::try_from(body.len()).unwrap());
        m.extend(body);
        m
    }

    #[test]
    fn custom_sections_are_found_and_bounded() {
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        // A type section with no types, then two custom sections.
        wasm.extend_from_slice(&[1, 1, 0]);
        wasm.extend(module_with_section("other", b"x").split_off(8));
        wasm.extend(module_with_section(METADATA_SECTION, b"{}").split_off(8));
        assert_eq!(custom_section(&wasm, METADATA_SECTION), Some(&b"{}"[..]));
        assert_eq!(custom_section(&wasm, "other"), Some(&b"x"[..]));
        assert_eq!(custom_section(&wasm, "missing"), None);
        // A section claiming more bytes than there are.
        let mut truncated = b"\0asm\x01\0\0\0".to_vec();
        truncated.extend_from_slice(&[0, 0x7f, 3, b'a']);
        assert_eq!(custom_section(&truncated, "abc"), None);
        assert_eq!(custom_section(b"\0asm", "x"), None);
        assert_eq!(custom_section(&[0xff; 4], "x"), None);
    }

    #[test]
    fn metadata_is_read_when_present_and_checked() {
        assert!(read_metadata("p", b"\0asm\x01\0\0\0").unwrap().is_none());
        let m = read_metadata(
            "p",
            &module_with_section(
                METADATA_SECTION,
                br#"{"protocolVersion":"v1","mutating":true,"executionMode":"kubewarden-wapc"}"#,
            ),
        )
        .unwrap()
        .unwrap();
        assert!(m.mutating);
        assert_eq!(m.background_audit, None);
        let m = read_metadata(
            "p",
            &module_with_section(
                METADATA_SECTION,
                br#"{"backgroundAudit":false,"annotations":{"io.kubewarden.policy.severity":"low"}}"#,
            ),
        )
        .unwrap()
        .unwrap();
        assert_eq!(m.background_audit, Some(false));
        assert_eq!(m.annotations["io.kubewarden.policy.severity"], "low");
        for bad in [
            &br#"{"executionMode":"opa"}"#[..],
            br#"{"protocolVersion":"v2"}"#,
            b"not json",
        ] {
            let wasm = module_with_section(METADATA_SECTION, bad);
            assert!(
                matches!(read_metadata("p", &wasm), Err(PluginError::Compile { .. })),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let component = b"\0asm\x0d\0\x01\0";
        let e = read_metadata("p", component).unwrap_err().to_string();
        assert!(e.contains("format: component"), "{e}");
    }
}
