//! The official Kubernetes Python client (`pip install kubernetes`, which
//! `scripts/test` installs) against the real binary: `tests/python/client_test.py`
//! drives discovery, typed CRUD in two API groups, errors as `ApiException`s
//! with upstream's status and reason, selectors, paging, optimistic
//! concurrency, a watch and namespace deletion.

use std::process::Command;
use wasm_apiserver_e2e::Server;

#[test]
fn official_python_client_works_unchanged() {
    let server = Server::start();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/client_test.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(server.kubeconfig_path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3 (scripts/test installs the kubernetes package)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}\nstdout:\n{stdout}\nstderr:\n{stderr}\n{}",
        script.display(),
        server.diagnostics()
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}
