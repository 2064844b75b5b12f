//! Helpers shared by the runtime's integration tests: the guest components,
//! built once per test binary by `scripts/build-plugins.sh`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn wasm_dir() -> PathBuf {
    repo_root().join("plugins/target/wasm32-wasip2/release")
}

/// Builds the guest components (once per test binary) and returns the
/// bytes of `name`.
pub fn wasm(name: &str) -> Vec<u8> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let script = repo_root().join("scripts/build-plugins.sh");
        let output = std::process::Command::new("bash")
            .arg(&script)
            // Settings meant for the host build must not leak into the guests'.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} failed:\n{}",
                script.display(),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    });
    if let Err(e) = built {
        panic!(
            "building the guest plugins failed; run scripts/build-plugins.sh by hand to see why.\n{e}"
        );
    }
    let path = wasm_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/build-plugins.sh to build the guest plugins",
            path.display()
        )
    })
}
