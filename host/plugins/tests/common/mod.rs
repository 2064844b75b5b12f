//! Helpers shared by the runtime's integration tests: the guest components,
//! built once per test binary by `scripts/build-plugins.sh`, and the
//! Kubewarden test policies, by `scripts/build-kubewarden-policies.sh`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn wasm_dir() -> PathBuf {
    repo_root().join("plugins/target/wasm32-wasip2/release")
}

/// Runs a build script of `scripts/`, panicking with its stderr when it fails.
fn run_script(name: &str) -> Result<(), String> {
    let script = repo_root().join("scripts").join(name);
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
}

fn read(dir: PathBuf, name: &str, script: &str) -> Vec<u8> {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/{script} to build it", path.display()))
}

/// Builds the guest components (once per test binary) and returns the
/// bytes of `name`.
#[allow(dead_code)]
pub fn wasm(name: &str) -> Vec<u8> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(e) = BUILT.get_or_init(|| run_script("build-plugins.sh")) {
        panic!(
            "building the guest plugins failed; run scripts/build-plugins.sh by hand to see why.\n{e}"
        );
    }
    read(wasm_dir(), name, "build-plugins.sh")
}

/// Builds the Kubewarden test policies (once per test binary) and returns
/// the bytes of `name` (`kw_privileged_pods`, `kw_add_label`, `kw_hostile`).
#[allow(dead_code)]
pub fn kubewarden_wasm(name: &str) -> Vec<u8> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(e) = BUILT.get_or_init(|| run_script("build-kubewarden-policies.sh")) {
        panic!(
            "building the Kubewarden test policies failed; run \
             scripts/build-kubewarden-policies.sh by hand to see why.\n{e}"
        );
    }
    read(
        repo_root().join("tests/kubewarden-policies/target/wasm32-wasip1/release"),
        name,
        "build-kubewarden-policies.sh",
    )
}
