//! `hostile-loop`: a test fixture whose `validate` and `mutate` spin forever.
//! The host must interrupt it at the wall-time limit.

use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};

fn spin() -> ! {
    let mut i = 0u64;
    loop {
        i = std::hint::black_box(i.wrapping_add(1));
    }
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn validate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        spin()
    }
    fn mutate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        spin()
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
