//! The `wasm-apiserver` binary.

fn main() -> anyhow::Result<()> {
    wasm_apiserver::cli::main()
}
