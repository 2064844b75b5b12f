//! `hostile-memory`: a test fixture that allocates (and touches) memory in
//! 1 MiB chunks until the allocator fails. The host's memory limit must stop
//! it without affecting the server.

use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};

fn hog() -> AdmissionResponse {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let chunk = vec![0xA5u8; 1 << 20];
        chunks.push(std::hint::black_box(chunk));
    }
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn validate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        hog()
    }
    fn mutate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        hog()
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
