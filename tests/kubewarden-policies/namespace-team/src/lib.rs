//! `kw-namespace-team`: a context-aware mutating Kubewarden policy ("copy
//! the Namespace's `team` label onto the Pod"): it reads the request's
//! Namespace through the `kubewarden/kubernetes/get_resource` host
//! capability and answers the Pod with the label set. A failed host call
//! rejects with the host's error.
//!
//! No settings.

use k8s_openapi::api::core::v1::Namespace;
use kubewarden_policy_sdk::host_capabilities::kubernetes::{GetResourceRequest, get_resource};
use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::{CallResult, register_function};
use kubewarden_policy_sdk::{
    accept_request, mutate_request, protocol_version_guest, reject_request, validate_settings,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
struct Settings {}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
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
    let namespace = get_resource::<Namespace>(&GetResourceRequest {
        api_version: "v1".to_owned(),
        kind: "Namespace".to_owned(),
        name: request.request.namespace.clone(),
        namespace: None,
        disable_cache: false,
        field_masks: None,
    });
    let namespace = match namespace {
        Ok(n) => n,
        Err(e) => {
            return reject_request(
                Some(format!("cannot read namespace: {e}")),
                None,
                None,
                None,
            );
        }
    };
    let Some(team) = namespace
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("team"))
        .cloned()
    else {
        return accept_request();
    };
    let mut pod = request.request.object;
    if pod["metadata"]["labels"]["team"] == json!(team) {
        return accept_request();
    }
    if !pod["metadata"]["labels"].is_object() {
        pod["metadata"]["labels"] = Value::Object(Default::default());
    }
    pod["metadata"]["labels"]["team"] = json!(team);
    mutate_request(pod)
}
