#![no_main]
//! cargo-fuzz entry of the `wapc` target (its body and properties:
//! `wasm-apiserver-fuzz-targets`).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    (wasm_apiserver_fuzz_targets::target("wapc")
        .expect("target")
        .run)(data)
});
