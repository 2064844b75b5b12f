//! End-to-end tests of the plugin runtime with the polyglot example policies
//! of `examples/`: a validating policy in Python (componentize-py) and a
//! mutating one in JavaScript (componentize-js), built once per test run by
//! `scripts/build-example-plugins.sh`.
//!
//! These components embed a whole interpreter (12–18 MB), so compiling one
//! takes seconds. Every test shares one [`Runtime`] whose disk cache is
//! wiped once per test run: each component is compiled cold exactly once
//! (inside [`fixture`]), and every other load, whatever its configuration,
//! is a cache hit. `cargo test -p wasm-apiserver-plugins --test it polyglot::
//! -- --nocapture` prints the compile, load and call times.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;
use wasm_apiserver_plugins::{
    AdmissionPlugin, AdmissionRequest, AdmissionResponse, Gvk, Gvr, Limits, Operation, PluginError,
    Runtime, RuntimeConfig, UserInfo,
};

const PYTHON: &str = "python-policy";
const JS: &str = "js-policy";

const PYTHON_CONFIG: &str = r#"{"namePattern":"^tmp-","forbiddenKeys":["password","token"]}"#;
const JS_CONFIG: &str = "";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds the example components (once per test binary) and returns the
/// bytes of `examples/target/<name>.wasm`.
fn wasm(name: &str) -> Vec<u8> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let script = repo_root().join("scripts/build-example-plugins.sh");
        let start = Instant::now();
        let output = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if output.status.success() {
            eprintln!(
                "scripts/build-example-plugins.sh ({:.1?}):\n{}",
                start.elapsed(),
                String::from_utf8_lossy(&output.stdout)
            );
            Ok(())
        } else {
            Err(format!(
                "{} failed ({}):\n{}{}",
                script.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    });
    if let Err(e) = built {
        panic!(
            "building the example plugins failed; run scripts/build-example-plugins.sh \
             by hand to see why (it needs python3 with pip, node and npm).\n{e}"
        );
    }
    let path = repo_root().join(format!("examples/target/{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/build-example-plugins.sh to build the example plugins",
            path.display()
        )
    })
}

/// The runtime and component bytes every test shares.
struct Fixture {
    runtime: Runtime,
    python_wasm: Vec<u8>,
    js_wasm: Vec<u8>,
    /// Loaded with [`PYTHON_CONFIG`].
    python: AdmissionPlugin,
    /// Loaded with [`JS_CONFIG`] (the defaults).
    js: AdmissionPlugin,
}

impl Fixture {
    /// Loads `name` with another configuration: always a cache hit.
    async fn load(&self, name: &str, config: &str) -> Result<AdmissionPlugin, PluginError> {
        let wasm = if name == PYTHON {
            &self.python_wasm
        } else {
            &self.js_wasm
        };
        self.runtime
            .load_admission(name, wasm, config, Limits::default())
            .await
    }
}

/// Builds the components, then compiles each one cold, once, into a fresh
/// cache shared by all tests of this binary.
async fn fixture() -> &'static Fixture {
    static FIXTURE: OnceCell<Fixture> = OnceCell::const_new();
    FIXTURE
        .get_or_init(|| async {
            let python_wasm = wasm("python-policy");
            let js_wasm = wasm("js-policy");

            // Under target/ rather than /tmp: a static is never dropped, so
            // a TempDir would leak; this one is wiped at the next run.
            let cache_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("polyglot-cache");
            let _ = std::fs::remove_dir_all(&cache_dir);
            let runtime = Runtime::new(RuntimeConfig {
                cache_dir: Some(cache_dir),
                max_instances: 32,
                ..RuntimeConfig::default()
            })
            .expect("runtime");

            let start = Instant::now();
            let python = runtime
                .load_admission(PYTHON, &python_wasm, PYTHON_CONFIG, Limits::default())
                .await
                .expect("load python-policy");
            let python_cold = start.elapsed();
            let start = Instant::now();
            let js = runtime
                .load_admission(JS, &js_wasm, JS_CONFIG, Limits::default())
                .await
                .expect("load js-policy");
            let js_cold = start.elapsed();
            eprintln!(
                "cold load (compile + check-config): python-policy ({} bytes) {python_cold:.2?}, \
                 js-policy ({} bytes) {js_cold:.2?}",
                python_wasm.len(),
                js_wasm.len()
            );
            Fixture {
                runtime,
                python_wasm,
                js_wasm,
                python,
                js,
            }
        })
        .await
}

fn request(kind: &str, operation: Operation, object: Option<Value>) -> AdmissionRequest {
    let name = object
        .as_ref()
        .and_then(|o| o.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let resource = format!("{}s", kind.to_lowercase());
    AdmissionRequest {
        uid: "7a1c0e6e-0000-4000-8000-000000000002".to_owned(),
        kind: Gvk {
            group: String::new(),
            version: "v1".to_owned(),
            kind: kind.to_owned(),
        },
        resource: Gvr {
            group: String::new(),
            version: "v1".to_owned(),
            resource,
        },
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name,
        namespace: Some("default".to_owned()),
        operation,
        user: UserInfo {
            username: "alice".to_owned(),
            groups: vec!["system:authenticated".to_owned()],
            ..UserInfo::default()
        },
        dry_run: false,
        object,
        old_object: None,
        options: None,
    }
}

/// A namespaced object of `kind` with the given `metadata` fields and `data`.
fn object(kind: &str, name: &str, metadata: Value, data: Value) -> Value {
    let mut meta = json!({"name": name, "namespace": "default"});
    if let (Some(meta), Some(extra)) = (meta.as_object_mut(), metadata.as_object()) {
        meta.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": kind, "metadata": meta, "data": data})
}

fn create(kind: &str, object: Value) -> AdmissionRequest {
    request(kind, Operation::Create, Some(object))
}

/// The message of a denial (panics, showing the response, if it was allowed).
fn denial(response: &AdmissionResponse) -> &str {
    assert!(!response.allowed, "expected a denial: {response:?}");
    let status = response.status.as_ref().expect("a denial has a status");
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    &status.message
}

fn apply(object: &Value, patch: &Value) -> Value {
    let mut object = object.clone();
    let patch: json_patch::Patch = serde_json::from_value(patch.clone()).expect("a JSON Patch");
    json_patch::patch(&mut object, &patch).expect("the patch applies");
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_policy_denies_and_allows_per_config() {
    let f = fixture().await;
    let py = &f.python;

    let fine = py
        .validate(&create(
            "ConfigMap",
            object("ConfigMap", "web", json!({}), json!({"k": "v"})),
        ))
        .await
        .unwrap();
    assert!(fine.allowed, "{fine:?}");
    assert_eq!((fine.status, fine.patch), (None, None));

    let tmp = py
        .validate(&create(
            "ConfigMap",
            object("ConfigMap", "tmp-web", json!({}), json!({"k": "v"})),
        ))
        .await
        .unwrap();
    assert_eq!(
        denial(&tmp),
        r#"ConfigMap "tmp-web" denied by python-policy: name "tmp-web" matches the forbidden pattern "^tmp-""#
    );
    assert_eq!(
        tmp.audit_annotations
            .get("python-policy/reason")
            .map(String::as_str),
        Some(r#"name "tmp-web" matches the forbidden pattern "^tmp-""#)
    );

    let secret = py
        .validate(&create(
            "Secret",
            object(
                "Secret",
                "db",
                json!({}),
                json!({"user": "YQ==", "password": "cA=="}),
            ),
        ))
        .await
        .unwrap();
    assert_eq!(
        denial(&secret),
        r#"Secret "db" denied by python-policy: forbidden data key(s): password"#
    );

    // stringData and binaryData count too; both problems are reported.
    let mut both = object("Secret", "tmp-db", json!({}), json!({}));
    both["stringData"] = json!({"token": "t"});
    both["binaryData"] = json!({"password": "cA=="});
    let both = py.validate(&create("Secret", both)).await.unwrap();
    assert_eq!(
        denial(&both),
        r#"Secret "tmp-db" denied by python-policy: name "tmp-db" matches the forbidden pattern "^tmp-"; forbidden data key(s): password, token"#
    );

    // Other kinds are not the policy's business.
    let pod = py
        .validate(&create(
            "Pod",
            object("Pod", "tmp-pod", json!({}), json!({"password": "x"})),
        ))
        .await
        .unwrap();
    assert!(pod.allowed, "{pod:?}");

    // A delete carries no object.
    let delete = py
        .validate(&request("Secret", Operation::Delete, None))
        .await
        .unwrap();
    assert!(delete.allowed);

    // The mutating phase of a validating policy changes nothing.
    let mutate = py
        .mutate(&create(
            "ConfigMap",
            object("ConfigMap", "tmp-web", json!({}), json!({"password": "x"})),
        ))
        .await
        .unwrap();
    assert!(mutate.allowed);
    assert_eq!(mutate.patch, None);

    // Another configuration changes the decision: only `kinds` is set.
    let secrets_only = f
        .load(PYTHON, r#"{"kinds":["Secret"],"forbiddenKeys":["k"]}"#)
        .await
        .unwrap();
    let configmap = create(
        "ConfigMap",
        object("ConfigMap", "tmp-web", json!({}), json!({"k": "v"})),
    );
    assert!(secrets_only.validate(&configmap).await.unwrap().allowed);
    let secret = create(
        "Secret",
        object("Secret", "tmp-s", json!({}), json!({"k": "v"})),
    );
    assert_eq!(
        denial(&secrets_only.validate(&secret).await.unwrap()),
        r#"Secret "tmp-s" denied by python-policy: forbidden data key(s): k"#
    );

    // An empty configuration allows everything.
    let permissive = f.load(PYTHON, "").await.unwrap();
    assert!(permissive.validate(&secret).await.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_policy_patch_adds_the_annotation() {
    let f = fixture().await;
    let js = &f.js;
    const KEY: &str = "policy.example.com/checked-by";

    // No annotations map: the whole map is added.
    let bare = object(
        "ConfigMap",
        "web",
        json!({"labels": {"app": "web"}}),
        json!({}),
    );
    let response = js.mutate(&create("ConfigMap", bare.clone())).await.unwrap();
    assert!(response.allowed, "{response:?}");
    let patch = response.patch.expect("a patch");
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/metadata/annotations", "value": {KEY: "js"}}])
    );
    let patched = apply(&bare, &patch);
    assert_eq!(patched["metadata"]["annotations"], json!({KEY: "js"}));
    assert_eq!(patched["metadata"]["labels"], json!({"app": "web"}));

    // Other annotations are kept; a stale value is replaced.
    for existing in [json!({"a": "b"}), json!({"a": "b", KEY: "someone-else"})] {
        let obj = object(
            "ConfigMap",
            "web",
            json!({"annotations": existing}),
            json!({}),
        );
        let response = js.mutate(&create("ConfigMap", obj.clone())).await.unwrap();
        let patch = response.patch.expect("a patch");
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/metadata/annotations/policy.example.com~1checked-by", "value": "js"}])
        );
        assert_eq!(
            apply(&obj, &patch)["metadata"]["annotations"],
            json!({"a": "b", KEY: "js"})
        );
    }

    // Already annotated: no patch.
    let done = object(
        "ConfigMap",
        "web",
        json!({"annotations": {KEY: "js"}}),
        json!({}),
    );
    let response = js.mutate(&create("ConfigMap", done)).await.unwrap();
    assert!(response.allowed);
    assert_eq!(response.patch, None);

    // No metadata at all.
    let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    let response = js
        .mutate(&create("ConfigMap", nameless.clone()))
        .await
        .unwrap();
    let patched = apply(&nameless, &response.patch.expect("a patch"));
    assert_eq!(patched["metadata"], json!({"annotations": {KEY: "js"}}));

    // A delete has no object to patch.
    let delete = js
        .mutate(&request("ConfigMap", Operation::Delete, None))
        .await
        .unwrap();
    assert!(delete.allowed);
    assert_eq!(delete.patch, None);

    // The configured value is used.
    let custom = f.load(JS, r#"{"checkedBy":"ci"}"#).await.unwrap();
    let response = custom
        .mutate(&create("ConfigMap", bare.clone()))
        .await
        .unwrap();
    assert_eq!(
        apply(&bare, &response.patch.unwrap())["metadata"]["annotations"][KEY],
        "ci"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_policy_validate_denies_forbidden_env() {
    let f = fixture().await;
    let js = &f.js;

    let forbidden = object(
        "ConfigMap",
        "web",
        json!({"labels": {"env": "forbidden", "app": "web"}}),
        json!({}),
    );
    let response = js.validate(&create("ConfigMap", forbidden)).await.unwrap();
    assert_eq!(
        denial(&response),
        r#"ConfigMap "web" denied by js-policy: forbidden label(s): env=forbidden"#
    );
    assert_eq!(
        response
            .audit_annotations
            .get("js-policy/reason")
            .map(String::as_str),
        Some("forbidden label(s): env=forbidden")
    );

    for labels in [json!({"env": "prod"}), json!({}), json!(null)] {
        let obj = object("ConfigMap", "web", json!({"labels": labels}), json!({}));
        let response = js.validate(&create("ConfigMap", obj)).await.unwrap();
        assert!(response.allowed, "{labels}: {response:?}");
        assert_eq!(response.patch, None);
    }
    let delete = js
        .validate(&request("ConfigMap", Operation::Delete, None))
        .await
        .unwrap();
    assert!(delete.allowed);

    // Configured labels replace the default.
    let custom = f
        .load(JS, r#"{"forbiddenLabels":{"tier":"legacy","env":"dev"}}"#)
        .await
        .unwrap();
    let obj = object(
        "Secret",
        "s",
        json!({"labels": {"env": "dev", "tier": "legacy"}}),
        json!({}),
    );
    assert_eq!(
        denial(&custom.validate(&create("Secret", obj)).await.unwrap()),
        r#"Secret "s" denied by js-policy: forbidden label(s): env=dev, tier=legacy"#
    );
    let obj = object(
        "Secret",
        "s",
        json!({"labels": {"env": "forbidden"}}),
        json!({}),
    );
    assert!(
        custom
            .validate(&create("Secret", obj))
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_is_rejected_at_load() {
    let f = fixture().await;
    let cases = [
        (
            PYTHON,
            r#"{"namePattern":"(unclosed"}"#,
            "invalid namePattern",
        ),
        (
            PYTHON,
            r#"{"forbiddenKeys":"password"}"#,
            "forbiddenKeys must be a list of strings",
        ),
        (
            PYTHON,
            r#"{"namePatern":"^x"}"#,
            "unknown field(s): namePatern",
        ),
        (PYTHON, "not json", "not JSON"),
        (PYTHON, "[]", "expected a JSON object"),
        (JS, r#"{"checkedBy":1}"#, "checkedBy must be a string"),
        (
            JS,
            r#"{"forbiddenLabels":{"env":1}}"#,
            "forbiddenLabels must map",
        ),
        (JS, r#"{"annotation":"x"}"#, "unknown field(s): annotation"),
        (JS, "not json", "not JSON"),
    ];
    for (name, config, expected) in cases {
        match f.load(name, config).await {
            Err(PluginError::Config { plugin, message }) => {
                assert_eq!(plugin, name);
                assert!(
                    message.starts_with("invalid configuration: ") && message.contains(expected),
                    "{name} {config}: {message:?} should mention {expected:?}"
                );
            }
            Err(other) => panic!("{name} {config}: expected a config error, got {other}"),
            Ok(_) => panic!("{name} {config}: accepted"),
        }
    }
}

/// Every load after the fixture's compiles nothing, and calls are fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_compile_once_and_calls_are_fast() {
    let f = fixture().await;

    for (name, plugin, wasm) in [(PYTHON, &f.python, &f.python_wasm), (JS, &f.js, &f.js_wasm)] {
        let start = Instant::now();
        f.runtime
            .load_admission(name, wasm, "", Limits::default())
            .await
            .unwrap();
        let cached = start.elapsed();

        let req = create(
            "ConfigMap",
            object(
                "ConfigMap",
                "web",
                json!({"labels": {"env": "prod"}}),
                json!({"k": "v"}),
            ),
        );
        plugin.validate(&req).await.unwrap(); // warm-up
        const CALLS: u32 = 50;
        let start = Instant::now();
        for _ in 0..CALLS {
            assert!(plugin.validate(&req).await.unwrap().allowed);
        }
        let validate = start.elapsed() / CALLS;
        let start = Instant::now();
        for _ in 0..CALLS {
            assert!(plugin.mutate(&req).await.unwrap().allowed);
        }
        let mutate = start.elapsed() / CALLS;
        eprintln!(
            "{name}: cached load {cached:.2?}; per call (instantiate + call): \
             validate {validate:.2?}, mutate {mutate:.2?}"
        );
        // Generous bounds (a loaded CI machine, a debug host): they catch a
        // per-call recompile or re-initialisation, not a small regression.
        assert!(
            cached < Duration::from_secs(2),
            "{name}: cached load took {cached:?}"
        );
        assert!(
            validate < Duration::from_millis(100),
            "{name}: validate took {validate:?}"
        );
        assert!(
            mutate < Duration::from_millis(100),
            "{name}: mutate took {mutate:?}"
        );
    }

    // Other tests load more plugins concurrently, but each component was
    // compiled exactly once (later loads share the artifact the fixture's
    // plugins hold, or read the disk cache).
    let stats = f.runtime.cache_stats();
    assert_eq!(stats.misses, 2, "{stats:?}");
}
