#![no_main]
//! cargo-fuzz entry of the `continue_token` target (its body and properties:
//! `wasm-apiserver-fuzz-targets`).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    (wasm_apiserver_fuzz_targets::target("continue_token")
        .expect("target")
        .run)(data)
});
