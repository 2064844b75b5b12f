#![no_main]
//! cargo-fuzz entry of the `fields_v1` target (its body and properties:
//! `wasm-apiserver-fuzz-targets`).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    (wasm_apiserver_fuzz_targets::target("fields_v1")
        .expect("target")
        .run)(data)
});
