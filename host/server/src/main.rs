//! The `wasm-apiserver` binary.

#[global_allocator]
static ALLOC: wasm_apiserver::Allocator = wasm_apiserver::Allocator;

fn main() -> anyhow::Result<()> {
    wasm_apiserver::main()
}
