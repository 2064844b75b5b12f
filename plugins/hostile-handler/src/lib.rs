//! `hostile-handler`: a test fixture for the resource-handler world. Its
//! configuration says how `convert` misbehaves: `"trap"` panics, `"loop"`
//! spins forever; anything else converts by changing `apiVersion` only.
//! `default` and `validate` behave. The host must contain both failures.

wit_bindgen::generate!({
    path: "../../wit",
    world: "resource-handler-plugin",
});

use exports::wasm_apiserver::plugin::resource_handler::{ConversionRequest, Guest, ObjectRequest};
use wasm_apiserver::plugin::types::FieldCause;

struct Plugin;

impl Guest for Plugin {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn convert(config: String, request: ConversionRequest) -> Result<Vec<String>, String> {
        match config.trim_matches('"') {
            "trap" => panic!("hostile-handler: trapping as configured"),
            "loop" => {
                let mut i = 0u64;
                loop {
                    i = std::hint::black_box(i.wrapping_add(1));
                }
            }
            _ => request
                .objects
                .iter()
                .map(|text| {
                    let mut v: serde_json::Value =
                        serde_json::from_str(text).map_err(|e| e.to_string())?;
                    v["apiVersion"] = request.desired_api_version.clone().into();
                    Ok(v.to_string())
                })
                .collect(),
        }
    }

    fn default(_config: String, _request: ObjectRequest) -> Result<Option<String>, String> {
        Ok(None)
    }

    fn validate(_config: String, _request: ObjectRequest) -> Vec<FieldCause> {
        Vec::new()
    }
}

export!(Plugin);
