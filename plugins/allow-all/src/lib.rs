//! `allow-all`: a bench fixture that allows every request without reading
//! it. Built without WASI, like `require-labels`, it is the cheapest
//! plugin there is: what it adds to a request is the host's own cost of a
//! call (a fresh instance, the request passed in, the answer read back),
//! the floor under any policy's.

use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver_plugin_sdk::allow;

struct Plugin;

impl Guest for Plugin {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn validate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        allow()
    }

    fn mutate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        allow()
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
