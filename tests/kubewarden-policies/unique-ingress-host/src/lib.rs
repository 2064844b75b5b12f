//! `kw-unique-ingress-host`: the context-aware check users ask policy
//! engines for most ("an Ingress host must be unique across the cluster"),
//! written as Kubewarden's context-aware policies are: it lists every
//! Ingress through `kubewarden/kubernetes/list_resources_all` (with field
//! masks: only names and rules) and rejects an Ingress naming a host that
//! another Ingress already serves. The issue-33 benchmark's policy.
//!
//! Settings: `selectHosts` (default false): instead of every Ingress, list
//! only those naming one of the request's hosts, with a field selector
//! (`spec.rules.host=...`) that this server answers from a field index
//! (upstream's API server refuses a field selector on that field).

use k8s_openapi::api::networking::v1::Ingress;
use kubewarden_policy_sdk::host_capabilities::kubernetes::{
    ListAllResourcesRequest, list_all_resources,
};
use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::{CallResult, register_function};
use kubewarden_policy_sdk::{
    accept_request, protocol_version_guest, reject_request, validate_settings,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
struct Settings {
    select_hosts: bool,
}

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

fn hosts(ingress: &serde_json::Value) -> BTreeSet<String> {
    ingress["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["host"].as_str().map(String::from))
        .collect()
}

fn validate(payload: &[u8]) -> CallResult {
    let request = ValidationRequest::<Settings>::new(payload)?;
    let wanted = hosts(&request.request.object);
    if wanted.is_empty() {
        return accept_request();
    }
    let masks: BTreeSet<String> = ["metadata.name", "metadata.namespace", "spec.rules"]
        .map(String::from)
        .into();
    let selectors: Vec<Option<String>> = if request.settings.select_hosts {
        wanted
            .iter()
            .map(|h| Some(format!("spec.rules.host={h}")))
            .collect()
    } else {
        vec![None]
    };
    let mut ingresses = Vec::new();
    for field_selector in selectors {
        let listed = list_all_resources::<Ingress>(&ListAllResourcesRequest {
            api_version: "networking.k8s.io/v1".to_owned(),
            kind: "Ingress".to_owned(),
            label_selector: None,
            field_selector,
            field_masks: Some(masks.clone()),
        });
        match listed {
            Ok(list) => ingresses.extend(list.items),
            Err(e) => {
                return reject_request(
                    Some(format!("cannot list ingresses: {e}")),
                    None,
                    None,
                    None,
                );
            }
        }
    }
    let me = (&request.request.namespace, &request.request.name);
    for other in &ingresses {
        let name = other.metadata.name.clone().unwrap_or_default();
        let namespace = other.metadata.namespace.clone().unwrap_or_default();
        if (&namespace, &name) == me {
            continue;
        }
        let taken = other
            .spec
            .as_ref()
            .and_then(|s| s.rules.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|r| r.host.clone())
            .find(|h| wanted.contains(h));
        if let Some(host) = taken {
            return reject_request(
                Some(format!(
                    "host {host:?} is already served by ingress {namespace}/{name}"
                )),
                Some(409),
                None,
                None,
            );
        }
    }
    accept_request()
}
