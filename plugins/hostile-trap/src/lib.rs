//! `hostile-trap`: a test fixture that panics (a wasm trap) on every call.

use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};

struct Plugin;

impl Guest for Plugin {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn validate(_config: String, request: AdmissionRequest) -> AdmissionResponse {
        panic!(
            "hostile-trap: deliberate panic in validate (uid {})",
            request.uid
        )
    }
    fn mutate(_config: String, request: AdmissionRequest) -> AdmissionResponse {
        panic!(
            "hostile-trap: deliberate panic in mutate (uid {})",
            request.uid
        )
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
