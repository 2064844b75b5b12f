//! `kw-require-labels`: a validating Kubewarden policy, written as any
//! Kubewarden policy is (the published `kubewarden-policy-sdk`, waPC,
//! `wasm32-wasip1`), that rejects an object missing one of the labels of
//! its settings: the same check as the first-party `require_labels`
//! component and the bench's ValidatingAdmissionPolicy, for the issue-15
//! comparison of policy kinds.
//!
//! Settings: `labels` (required, at least one label key).

use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::{CallResult, register_function};
use kubewarden_policy_sdk::{
    accept_request, protocol_version_guest, reject_request, validate_settings,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
struct Settings {
    labels: Vec<String>,
}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        if self.labels.is_empty() {
            return Err("labels: at least one label is required".to_owned());
        }
        Ok(())
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings::<Settings>);
    register_function("protocol_version", protocol_version_guest);
}

fn validate(payload: &[u8]) -> CallResult {
    let request = ValidationRequest::<Settings>::new(payload)?;
    let labels = request.request.object["metadata"]["labels"].as_object();
    let missing: Vec<&str> = request
        .settings
        .labels
        .iter()
        .filter(|l| labels.is_none_or(|m| !m.contains_key(l.as_str())))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return accept_request();
    }
    reject_request(
        Some(format!("missing required label(s): {}", missing.join(", "))),
        Some(403),
        None,
        None,
    )
}
