//! `kw-unique-selector`: a context-aware Kubewarden policy ("no two
//! Services with the same selector"), written as Kubewarden's context-aware
//! policies are: it lists the Services of the request's namespace through
//! the `kubewarden/kubernetes/list_resources_by_namespace` host capability
//! and rejects a Service whose selector another Service already has. A
//! failed host call (no grant) rejects with the host's error, as
//! policy-server answers such policies.
//!
//! No settings.

use k8s_openapi::api::core::v1::Service;
use kubewarden_policy_sdk::host_capabilities::kubernetes::{
    ListResourcesByNamespaceRequest, list_resources_by_namespace,
};
use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::{CallResult, register_function};
use kubewarden_policy_sdk::{
    accept_request, protocol_version_guest, reject_request, validate_settings,
};
use serde::{Deserialize, Serialize};

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
    let selector = &request.request.object["spec"]["selector"];
    if selector.is_null() {
        return accept_request();
    }
    let listed = list_resources_by_namespace::<Service>(&ListResourcesByNamespaceRequest {
        api_version: "v1".to_owned(),
        kind: "Service".to_owned(),
        namespace: request.request.namespace.clone(),
        label_selector: None,
        field_selector: None,
        field_masks: None,
    });
    let services = match listed {
        Ok(list) => list.items,
        Err(e) => {
            return reject_request(Some(format!("cannot list services: {e}")), None, None, None);
        }
    };
    let name = &request.request.name;
    let clash = services.iter().find(|s| {
        s.metadata.name.as_deref() != Some(name.as_str())
            && s.spec
                .as_ref()
                .and_then(|spec| spec.selector.as_ref())
                .is_some_and(|sel| serde_json::to_value(sel).ok().as_ref() == Some(selector))
    });
    match clash {
        Some(other) => reject_request(
            Some(format!(
                "service {:?} already selects these pods",
                other.metadata.name.as_deref().unwrap_or_default()
            )),
            Some(409),
            None,
            None,
        ),
        None => accept_request(),
    }
}
