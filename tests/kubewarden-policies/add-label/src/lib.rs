//! `kw-add-label`: a mutating Kubewarden policy, written as any Kubewarden
//! policy is (the published `kubewarden-policy-sdk`, waPC, `wasm32-wasip1`),
//! that sets the label `key: value` of its settings on every object it
//! sees, answering the whole mutated object (`mutate_request`) as
//! Kubewarden policies do; the host turns it into a JSON patch.
//!
//! Settings: `key` (required, a label key) and `value` (default `""`).

use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::{CallResult, register_function};
use kubewarden_policy_sdk::{
    accept_request, mutate_request, protocol_version_guest, validate_settings,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
struct Settings {
    key: String,
    value: String,
}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        if self.key.is_empty() {
            return Err("key is required".to_owned());
        }
        if self.key.len() > 63 || self.key.contains(char::is_whitespace) {
            return Err(format!("key {:?} is not a valid label key", self.key));
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
    let Settings { key, value } = request.settings;
    let mut object = request.request.object;
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return accept_request();
    };
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Default::default()));
    match labels.as_object_mut() {
        Some(labels) if labels.get(&key) != Some(&Value::String(value.clone())) => {
            labels.insert(key, Value::String(value));
            mutate_request(object)
        }
        _ => accept_request(),
    }
}
