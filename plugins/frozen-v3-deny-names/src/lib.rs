//! `frozen-v3-deny-names`: a validating admission plugin built against the
//! frozen `wasm-apiserver:plugin@0.3.0` package (`wit/frozen/0.3.0`), so the
//! tests prove that components of an old package version keep loading.
//!
//! Configuration (JSON): `{"prefix": "legacy-"}`: creates and updates of
//! objects whose name starts with the prefix are denied (403).

use serde::Deserialize;

wit_bindgen::generate!({
    path: "../../wit/frozen/0.3.0",
    world: "admission-plugin",
});

use exports::wasm_apiserver::plugin::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver::plugin::types::Status;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    prefix: String,
}

fn config(text: &str) -> Result<Config, String> {
    serde_json::from_str(text).map_err(|e| format!("configuration: {e}"))
}

fn allow() -> AdmissionResponse {
    AdmissionResponse {
        allowed: true,
        status: None,
        patch: None,
        warnings: Vec::new(),
        audit_annotations: Vec::new(),
    }
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(text: String) -> Result<(), String> {
        config(&text).map(|_| ())
    }

    fn validate(text: String, request: AdmissionRequest) -> AdmissionResponse {
        let Ok(config) = config(&text) else {
            return allow();
        };
        match request.name {
            Some(name) if name.starts_with(&config.prefix) => AdmissionResponse {
                allowed: false,
                status: Some(Status {
                    code: 403,
                    reason: "Forbidden".to_owned(),
                    message: format!("names starting with {:?} are reserved", config.prefix),
                    causes: Vec::new(),
                }),
                ..allow()
            },
            _ => allow(),
        }
    }

    fn mutate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        allow()
    }
}

export!(Plugin);
