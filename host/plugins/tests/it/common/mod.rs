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

/// A field selector of `path=value` terms over any path, a list on the way
/// matching when one of its items does (as the server answers plugins).
fn fields_match(selector: &str, obj: &serde_json::Value) -> bool {
    fn any(v: &serde_json::Value, path: &[&str], want: &str) -> bool {
        match (v, path.split_first()) {
            (serde_json::Value::Array(items), _) => items.iter().any(|i| any(i, path, want)),
            (serde_json::Value::Object(m), Some((seg, rest))) => {
                m.get(*seg).is_some_and(|next| any(next, rest, want))
            }
            (serde_json::Value::String(s), None) => s == want,
            _ => false,
        }
    }
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (path, want) = term.split_once('=').unwrap_or((term, ""));
        let path: Vec<&str> = path.split('.').collect();
        any(obj, &path, want)
    })
}

/// A cluster of fixture objects, for context-aware policies.
pub struct Fixtures(Vec<serde_json::Value>);

#[async_trait::async_trait]
impl wasm_apiserver_plugins::Cluster for Fixtures {
    fn kind_of(&self, _group: &str, _version: &str, resource: &str) -> Option<String> {
        // The resources the tests' controllers read by resource.
        match resource {
            "namespaces" => Some("Namespace".into()),
            "configmaps" => Some("ConfigMap".into()),
            _ => None,
        }
    }

    async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<serde_json::Value>, String> {
        Ok(self
            .0
            .iter()
            .find(|o| {
                o["apiVersion"] == api_version
                    && o["kind"] == kind
                    && o["metadata"]["name"] == name
                    && o["metadata"]["namespace"].as_str() == namespace
            })
            .cloned())
    }

    async fn list(
        &self,
        q: &wasm_apiserver_plugins::ListQuery<'_>,
        max_bytes: usize,
    ) -> Result<wasm_apiserver_plugins::Listed, String> {
        let items: Vec<&serde_json::Value> = self
            .0
            .iter()
            .filter(|o| {
                o["apiVersion"] == q.api_version
                    && o["kind"] == q.kind
                    && q.namespace
                        .is_none_or(|ns| o["metadata"]["namespace"] == ns)
                    && fields_match(q.field_selector.unwrap_or_default(), o)
            })
            .collect();
        let list = serde_json::json!({"apiVersion": q.api_version, "kind": format!("{}List", q.kind),
            "metadata": {"resourceVersion": "1"}, "items": items});
        let bytes = list["items"].to_string().len();
        if bytes > max_bytes {
            return Err(format!("more than {max_bytes} bytes"));
        }
        Ok(wasm_apiserver_plugins::Listed { list, bytes })
    }

    async fn can_i(&self, _spec: &serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(serde_json::json!({"allowed": false}))
    }
}

#[allow(dead_code)]
pub fn access(
    fixtures: Vec<serde_json::Value>,
    grants: &[(&str, &str)],
    max_calls: u32,
    max_bytes: usize,
) -> wasm_apiserver_plugins::ClusterAccess {
    wasm_apiserver_plugins::ClusterAccess {
        reads: std::sync::Arc::new(Fixtures(fixtures)),
        grants: grants
            .iter()
            .map(|(v, k)| wasm_apiserver_plugins::Grant {
                api_version: v.to_string(),
                kind: k.to_string(),
            })
            .collect(),
        all_kinds: false,
        max_calls,
        max_bytes,
    }
}
