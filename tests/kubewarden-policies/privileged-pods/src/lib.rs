//! `kw-privileged-pods`: a Kubewarden policy, written as any Kubewarden
//! policy is (the published `kubewarden-policy-sdk`, waPC, `wasm32-wasip1`),
//! that rejects a Pod any of whose containers (init and ephemeral ones
//! included) sets `securityContext.privileged: true`.
//!
//! Settings:
//! * `exempt_namespaces`: namespaces whose Pods are accepted anyway; each
//!   must be a valid namespace name (`validate_settings` says which is not).
//! * `probe_cluster`: read the request's Namespace through the SDK's
//!   `kubernetes` host capability first, and reject with the host's error
//!   when that fails (a test of the host's "not available" answer).

use k8s_openapi::api::core::v1::{Namespace, SecurityContext};
use kubewarden_policy_sdk::host_capabilities::kubernetes::{GetResourceRequest, get_resource};
use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::{self as guest, CallResult, register_function};
use kubewarden_policy_sdk::{
    accept_request, protocol_version_guest, reject_request, validate_settings,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
struct Settings {
    exempt_namespaces: Vec<String>,
    probe_cluster: bool,
}

/// A DNS-1123 label, as namespace names are.
fn valid_namespace(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        match self.exempt_namespaces.iter().find(|n| !valid_namespace(n)) {
            Some(bad) => Err(format!(
                "exempt_namespaces: {bad:?} is not a valid namespace name"
            )),
            None => Ok(()),
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings::<Settings>);
    register_function("protocol_version", protocol_version_guest);
}

/// The part of a Pod this policy reads. (Decoding only this, not
/// k8s-openapi's whole `Pod`, keeps the module at 400 KB instead of 1 MB,
/// which the host compiles several times faster.)
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PodSpec {
    init_containers: Vec<Container>,
    containers: Vec<Container>,
    ephemeral_containers: Vec<Container>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Container {
    name: String,
    security_context: Option<SecurityContext>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Pod {
    spec: PodSpec,
}

/// The names of the privileged containers of `pod`.
fn privileged(pod: &Pod) -> Vec<String> {
    let spec = &pod.spec;
    spec.init_containers
        .iter()
        .chain(&spec.containers)
        .chain(&spec.ephemeral_containers)
        .filter(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        })
        .map(|c| c.name.clone())
        .collect()
}

fn validate(payload: &[u8]) -> CallResult {
    let request = ValidationRequest::<Settings>::new(payload)?;
    let namespace = &request.request.namespace;
    if request.settings.probe_cluster {
        let found = get_resource::<Namespace>(&GetResourceRequest {
            api_version: "v1".to_owned(),
            kind: "Namespace".to_owned(),
            name: namespace.clone(),
            namespace: None,
            disable_cache: false,
            field_masks: None,
        });
        if let Err(e) = found {
            return reject_request(
                Some(format!("cannot read namespace {namespace}: {e}")),
                None,
                None,
                None,
            );
        }
    }
    if request.settings.exempt_namespaces.contains(namespace) {
        return accept_request();
    }
    // A DELETE has no object; only Pods are judged.
    if request.request.kind.kind != "Pod" || request.request.object.is_null() {
        return accept_request();
    }
    let pod: Pod = match serde_json::from_value(request.request.object.clone()) {
        Ok(pod) => pod,
        Err(e) => {
            return reject_request(Some(format!("not a valid Pod: {e}")), Some(400), None, None);
        }
    };
    let names = privileged(&pod);
    if names.is_empty() {
        return accept_request();
    }
    guest::console_log(&format!("rejecting privileged containers {names:?}"));
    reject_request(
        Some(format!(
            "privileged containers are not allowed: {}",
            names.join(", ")
        )),
        None,
        None,
        None,
    )
}
