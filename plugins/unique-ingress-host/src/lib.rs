//! `unique-ingress-host`: a context-aware validating admission plugin
//! (since package 0.3.0): an Ingress may not name a host another Ingress, in any
//! namespace, already serves. It reads the Ingresses through the `cluster`
//! import (only those naming one of the request's hosts: a field selector
//! the server answers from a field index), so its `AdmissionPlugin` grants
//! `contextAwareResources: [{apiVersion: networking.k8s.io/v1, kind: Ingress}]`;
//! without the grant the read fails and the plugin denies with the host's
//! error (under `failurePolicy: Ignore` a platform team may prefer to allow).
//!
//! No configuration.

use std::collections::BTreeSet;
use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver_plugin_sdk::{Value, allow, cluster, deny, object};

fn hosts(ingress: &Value) -> BTreeSet<String> {
    ingress["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["host"].as_str().map(String::from))
        .collect()
}

struct UniqueIngressHost;

impl Guest for UniqueIngressHost {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn validate(_config: String, req: AdmissionRequest) -> AdmissionResponse {
        let obj = match object(&req) {
            Ok(Some(o)) => o,
            Ok(None) => return allow(),
            Err(e) => return deny(400, "BadRequest", e),
        };
        let wanted = hosts(&obj);
        if wanted.is_empty() {
            return allow();
        }
        // Only the Ingresses naming a wanted host: the server answers this
        // field selector from its field index, not by reading every one.
        let mut others = Vec::new();
        for host in &wanted {
            let selector = format!("spec.rules.host={host}");
            match cluster::list_selected(
                "networking.k8s.io/v1",
                "Ingress",
                None,
                None,
                Some(&selector),
            ) {
                Ok(list) => others.extend(list),
                Err(e) => return deny(403, "Forbidden", format!("cannot list ingresses: {e}")),
            }
        }
        let me = (req.namespace.as_deref(), req.name.as_deref());
        for other in &others {
            let id = (
                other["metadata"]["namespace"].as_str(),
                other["metadata"]["name"].as_str(),
            );
            if id == me {
                continue;
            }
            if let Some(host) = hosts(other).intersection(&wanted).next() {
                return deny(
                    409,
                    "Conflict",
                    format!(
                        "host {host:?} is already served by ingress {}/{}",
                        id.0.unwrap_or_default(),
                        id.1.unwrap_or_default()
                    ),
                );
            }
        }
        allow()
    }

    fn mutate(_config: String, _req: AdmissionRequest) -> AdmissionResponse {
        allow()
    }
}

wasm_apiserver_plugin_sdk::export_admission!(UniqueIngressHost);
