//! `kw-privileged-pods`: a Kubewarden policy, written as any Kubewarden
//! policy is (the published `kubewarden-policy-sdk`, waPC, `wasm32-wasip1`),
//! that rejects a Pod any of whose containers (init and ephemeral ones
//! included) sets `securityContext.privileged: true`.
//!
//! Settings:
//! * `exempt_namespaces`: namespaces whose Pods are accepted anyway; each
//!   must be a valid namespace name (`validate_settings` says which is not).
//! * `probe_cluster`: list the Pods of the request's namespace through the
//!   SDK's `kubernetes` host capability first, and reject with the host's
//!   error when that fails (a test of the host's "not available" answer).

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use kubewarden_policy_sdk::host_capabilities::kubernetes::{
    ListResourcesByNamespaceRequest, list_resources_by_namespace,
};
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

/// The names of the privileged containers of `pod`.
fn privileged(pod: &Pod) -> Vec<String> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let is_privileged = |c: &Container| {
        c.security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false)
    };
    let ephemeral = |c: &EphemeralContainer| {
        c.security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false)
    };
    let mut names: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter(|c| is_privileged(c))
        .map(|c| c.name.clone())
        .collect();
    names.extend(
        spec.ephemeral_containers
            .iter()
            .flatten()
            .filter(|c| ephemeral(c))
            .map(|c| c.name.clone()),
    );
    names
}

fn validate(payload: &[u8]) -> CallResult {
    let request = ValidationRequest::<Settings>::new(payload)?;
    let namespace = &request.request.namespace;
    if request.settings.probe_cluster {
        let pods = list_resources_by_namespace::<Pod>(&ListResourcesByNamespaceRequest {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            namespace: namespace.clone(),
            label_selector: None,
            field_selector: None,
            field_masks: None,
        });
        if let Err(e) = pods {
            return reject_request(Some(format!("cannot list pods: {e}")), None, None, None);
        }
    }
    if request.settings.exempt_namespaces.contains(namespace) {
        return accept_request();
    }
    if request.request.kind.kind != "Pod" {
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
