//! `hostile-output`: a test fixture that answers with an oversized response:
//! a 4 MiB denial message from `validate` and a 4 MiB JSON patch from
//! `mutate`. The host must refuse it as too large.

use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver_plugin_sdk::{allow, deny};

const SIZE: usize = 4 << 20;

struct Plugin;

impl Guest for Plugin {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn validate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        deny(403, "Forbidden", "x".repeat(SIZE))
    }
    fn mutate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        let value = "y".repeat(SIZE);
        let mut response = allow();
        response.patch = Some(format!(
            r#"[{{"op":"add","path":"/metadata/annotations/big","value":"{value}"}}]"#
        ));
        response
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
