#![no_main]
//! cargo-fuzz entry of the `request_body` target (its body and properties:
//! `wasm-apiserver-fuzz-targets`).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    (wasm_apiserver_fuzz_targets::target("request_body")
        .expect("target")
        .run)(data)
});
