//! `kw-hostile`: a Kubewarden policy (published SDK, waPC, `wasm32-wasip1`)
//! that misbehaves in `validate` as its settings say, for the host's tests:
//!
//! * `{"mode": "loop"}` (the default): spins forever;
//! * `{"mode": "memory"}`: allocates until it dies;
//! * `{"mode": "count"}`: counts its calls in a global and rejects with
//!   the count as the message (`calls: 1` on a fresh instance per call);
//! * `{"mode": "trap"}`: panics;
//! * `{"mode": "error"}`: answers a waPC error (`__guest_error`);
//! * `{"mode": "garbage"}`: answers bytes that are not a ValidationResponse;
//! * `{"mode": "huge"}`: rejects with a 4 MiB message.

use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::{CallResult, register_function};
use kubewarden_policy_sdk::{protocol_version_guest, reject_request, validate_settings};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
struct Settings {
    mode: String,
}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        match self.mode.as_str() {
            "" | "loop" | "memory" | "count" | "trap" | "error" | "garbage" | "huge" => Ok(()),
            other => Err(format!("unknown mode {other:?}")),
        }
    }
}

static CALLS: AtomicU32 = AtomicU32::new(0);

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings::<Settings>);
    register_function("protocol_version", protocol_version_guest);
}

fn validate(payload: &[u8]) -> CallResult {
    let request = ValidationRequest::<Settings>::new(payload)?;
    match request.settings.mode.as_str() {
        "memory" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "count" => {
            let n = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
            reject_request(Some(format!("calls: {n}")), None, None, None)
        }
        "trap" => panic!("kw-hostile was told to trap"),
        "error" => Err("kw-hostile was told to fail".into()),
        "garbage" => Ok(b"this is not JSON".to_vec()),
        "huge" => reject_request(Some("x".repeat(4 << 20)), None, None, None),
        _ => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
    }
}
