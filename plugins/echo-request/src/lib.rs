//! `echo-request`: a test fixture that denies every request, with what the
//! host told it about the request as the message (a JSON object): who asked
//! (`user`, `uid`, `groups`), what (`operation`, `resource`, `namespace`,
//! `name`), and whether it is a dry run. Tests read it back from the
//! client's error to check that the host passes the right attributes.

use serde_json::json;
use wasm_apiserver_plugin_sdk::Operation;
use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver_plugin_sdk::deny;

struct Plugin;

fn echo(phase: &str, request: AdmissionRequest) -> AdmissionResponse {
    let operation = match request.operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    };
    let message = json!({
        "phase": phase,
        "user": request.user_info.username,
        "uid": request.user_info.uid,
        "groups": request.user_info.groups,
        "operation": operation,
        "resource": request.resource.resource,
        "namespace": request.namespace,
        "name": request.name,
        "dryRun": request.dry_run,
    });
    deny(403, "Forbidden", format!("echo {message}"))
}

impl Guest for Plugin {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn validate(_config: String, request: AdmissionRequest) -> AdmissionResponse {
        echo("validate", request)
    }
    fn mutate(_config: String, request: AdmissionRequest) -> AdmissionResponse {
        echo("mutate", request)
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
