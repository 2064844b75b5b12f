//! `default-labels`: a mutating admission plugin.
//!
//! Configuration (JSON):
//!
//! ```json
//! {"labels": {"managed-by": "wasm-apiserver"}}
//! ```
//!
//! `mutate` returns a JSON Patch (RFC 6902) adding every configured label the
//! object does not already carry (an existing value is never overwritten).
//! When the object has no `metadata.labels` (or no `metadata`) the patch adds
//! the whole map in one operation. `validate` allows everything.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver_plugin_sdk::{allow, deny, object};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

fn parse(config: &str) -> Result<Config, String> {
    if config.trim().is_empty() {
        return Ok(Config {
            labels: BTreeMap::new(),
        });
    }
    serde_json::from_str(config).map_err(|e| format!("invalid configuration: {e}"))
}

/// Escapes a map key for use as one JSON Pointer (RFC 6901) segment.
fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The patch operations that add the missing `defaults` to `object`.
fn patch_for(object: &Value, defaults: &BTreeMap<String, String>) -> Vec<Value> {
    let as_map = |labels: &BTreeMap<String, String>| -> Value {
        Value::Object(
            labels
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect::<Map<_, _>>(),
        )
    };
    if defaults.is_empty() {
        return Vec::new();
    }
    match object.get("metadata") {
        None | Some(Value::Null) => {
            vec![json!({"op": "add", "path": "/metadata", "value": {"labels": as_map(defaults)}})]
        }
        Some(metadata) => match metadata.get("labels") {
            None | Some(Value::Null) => {
                vec![json!({"op": "add", "path": "/metadata/labels", "value": as_map(defaults)})]
            }
            Some(labels) => defaults
                .iter()
                .filter(|(k, _)| labels.get(k.as_str()).is_none())
                .map(|(k, v)| {
                    json!({"op": "add", "path": format!("/metadata/labels/{}", pointer_segment(k)), "value": v})
                })
                .collect(),
        },
    }
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(config: String) -> Result<(), String> {
        parse(&config).map(|_| ())
    }

    fn validate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        allow()
    }

    fn mutate(config: String, request: AdmissionRequest) -> AdmissionResponse {
        let config = match parse(&config) {
            Ok(c) => c,
            Err(e) => return deny(500, "InternalError", e),
        };
        let obj = match object(&request) {
            Ok(Some(obj)) => obj,
            Ok(None) => return allow(),
            Err(e) => return deny(400, "BadRequest", e),
        };
        let ops = patch_for(&obj, &config.labels);
        let mut response = allow();
        if !ops.is_empty() {
            response
                .audit_annotations
                .push(("added-labels".to_owned(), ops.len().to_string()));
            response.patch = Some(Value::Array(ops).to_string());
        }
        response
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
