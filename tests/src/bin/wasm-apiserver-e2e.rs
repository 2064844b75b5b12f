//! The server binary the end-to-end tests start: the same entry point as
//! `wasm-apiserver`, built by `cargo test` inside this package so it always
//! matches the code under test (no separate `cargo build`, no stale binary).

#[global_allocator]
static ALLOC: wasm_apiserver::Allocator = wasm_apiserver::Allocator;

fn main() -> anyhow::Result<()> {
    wasm_apiserver::main()
}
