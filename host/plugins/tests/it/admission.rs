//! End-to-end tests of the plugin runtime with the real guest components of
//! `plugins/` (built once per test run by `scripts/build-plugins.sh`).
//!
//! Covered: the first-party policies (`require-labels`, `default-labels`),
//! containment of every hostile fixture (the runtime keeps serving
//! afterwards), the compilation cache, the concurrency cap, metrics, and
//! rejection of components that do not target the admission world, and a
//! package-0.3.0 component reading the cluster (granted, ungranted, out
//! of budget, without access).

use crate::common;
use serde_json::{Value, json};

use common::{access, wasm, wasm_dir};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wasm_apiserver_plugins::{
    AdmissionPlugin, AdmissionRequest, Gvk, Gvr, Limits, Operation, PluginError, Runtime,
    RuntimeConfig, UserInfo,
};

/// Every component `plugins/` builds; each must be used by a test below.
const FIXTURES: &[&str] = &[
    "require_labels",
    "deny_privileged",
    "default_labels",
    "hostile_loop",
    "hostile_memory",
    "hostile_trap",
    "hostile_output",
    "hostile_io",
    "echo_request",
    "global_counter",
    // The no-op floor of the admission bench.
    "allow_all",
    // Other plugin kinds, exercised by access.rs.
    "token_authenticator",
    "namespace_authorizer",
    // A context-aware policy of package 0.3.0 (the `cluster` import).
    "unique_ingress_host",
    // Resource handlers and the frozen 0.1.0, 0.2.0 and 0.3.0 packages, by handlers.rs.
    "widget_converter",
    "hostile_handler",
    "frozen_deny_names",
    "frozen_v2_deny_names",
    "frozen_v3_deny_names",
    // A context-aware handler of package 0.3.0, by handlers.rs.
    "namespace_team_handler",
    // Controllers (package 0.3.0), by controllers.rs.
    "namespace_defaults",
    "hostile_controller",
    "widget_status",
    "noop_controller",
    // Scheduler plugins (package 0.4.0), by scheduler.rs.
    "hostile_scheduler",
];

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        max_instances: 32,
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn request(operation: Operation, object: Option<Value>) -> AdmissionRequest {
    let name = object
        .as_ref()
        .and_then(|o| o.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    AdmissionRequest {
        uid: "7a1c0e6e-0000-4000-8000-000000000001".to_owned(),
        kind: Gvk {
            group: String::new(),
            version: "v1".to_owned(),
            kind: "ConfigMap".to_owned(),
        },
        resource: Gvr {
            group: String::new(),
            version: "v1".to_owned(),
            resource: "configmaps".to_owned(),
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

fn configmap(name: &str, labels: Option<Value>) -> Value {
    let mut metadata = json!({"name": name, "namespace": "default"});
    if let Some(labels) = labels {
        metadata["labels"] = labels;
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}})
}

const REQUIRE_LABELS: &str = r#"{"labels":["team"],"denyNamePattern":"^forbidden-"}"#;

async fn require_labels(runtime: &Runtime) -> AdmissionPlugin {
    runtime
        .load_admission(
            "require-labels",
            &wasm("require_labels"),
            REQUIRE_LABELS,
            Limits::default(),
        )
        .await
        .expect("load require-labels")
}

/// The runtime still loads and serves a well-behaved plugin.
async fn assert_still_serving(runtime: &Runtime) {
    let plugin = require_labels(runtime).await;
    let ok = plugin
        .validate(&request(
            Operation::Create,
            Some(configmap("fine", Some(json!({"team": "a"})))),
        ))
        .await
        .expect("validate after a hostile plugin");
    assert!(ok.allowed, "{ok:?}");
    let denied = plugin
        .validate(&request(Operation::Create, Some(configmap("fine", None))))
        .await
        .expect("validate after a hostile plugin");
    assert!(!denied.allowed);
}

fn limits(f: impl FnOnce(&mut Limits)) -> Limits {
    let mut limits = Limits::default();
    f(&mut limits);
    limits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_privileged_names_each_privileged_container() {
    let runtime = runtime();
    let plugin = runtime
        .load_admission(
            "deny-privileged",
            &wasm("deny_privileged"),
            "",
            Limits::default(),
        )
        .await
        .expect("load");
    let container = |name: &str, privileged: bool| json!({"name": name, "image": "busybox", "securityContext": {"privileged": privileged}});
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [container("a", false), container("b", true)]}}}});
    let mut req = request(Operation::Create, Some(deployment));
    req.kind = Gvk {
        group: "apps".into(),
        version: "v1".into(),
        kind: "Deployment".into(),
    };
    let denied = plugin.validate(&req).await.unwrap();
    assert!(!denied.allowed);
    let status = denied.status.unwrap();
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(status.causes.len(), 1, "{status:?}");
    assert_eq!(
        status.causes[0].field,
        "spec.template.spec.containers[1].securityContext.privileged"
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [container("a", false)]}});
    let mut req = request(Operation::Create, Some(pod));
    req.kind.kind = "Pod".into();
    assert!(plugin.validate(&req).await.unwrap().allowed);
    let err = runtime
        .load_admission(
            "deny-privileged",
            &wasm("deny_privileged"),
            "{\"x\": 1}",
            Limits::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Config { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_labels_allows_and_denies_per_config() {
    let runtime = runtime();
    let plugin = require_labels(&runtime).await;

    let allowed = plugin
        .validate(&request(
            Operation::Create,
            Some(configmap(
                "web",
                Some(json!({"team": "payments", "x": "y"})),
            )),
        ))
        .await
        .unwrap();
    assert!(allowed.allowed);
    assert_eq!(allowed.status, None);
    assert_eq!(allowed.patch, None);

    let missing = plugin
        .validate(&request(
            Operation::Create,
            Some(configmap("web", Some(json!({"app": "web"})))),
        ))
        .await
        .unwrap();
    assert!(!missing.allowed);
    let status = missing.status.as_ref().unwrap();
    assert_eq!(status.code, 403);
    assert_eq!(status.reason, "Forbidden");
    assert_eq!(
        status.message,
        "ConfigMap \"web\" denied by require-labels: missing required label(s): team"
    );
    assert_eq!(
        missing
            .audit_annotations
            .get("require-labels/reason")
            .map(String::as_str),
        Some("missing required label(s): team")
    );

    let no_labels = plugin
        .validate(&request(Operation::Update, Some(configmap("web", None))))
        .await
        .unwrap();
    assert!(!no_labels.allowed);

    let forbidden = plugin
        .validate(&request(
            Operation::Create,
            Some(configmap("forbidden-web", Some(json!({"team": "a"})))),
        ))
        .await
        .unwrap();
    assert!(!forbidden.allowed);
    let message = &forbidden.status.unwrap().message;
    assert!(
        message.contains("name \"forbidden-web\" matches the forbidden pattern \"^forbidden-\""),
        "{message}"
    );

    let both = plugin
        .validate(&request(
            Operation::Create,
            Some(configmap("forbidden-x", None)),
        ))
        .await
        .unwrap();
    let message = both.status.unwrap().message;
    assert!(
        message.contains("forbidden pattern")
            && message.contains("missing required label(s): team")
    );

    // A delete carries no object: nothing to check.
    let delete = plugin
        .validate(&request(Operation::Delete, None))
        .await
        .unwrap();
    assert!(delete.allowed);

    // The mutating phase of a validating policy changes nothing.
    let mutate = plugin
        .mutate(&request(Operation::Create, Some(configmap("web", None))))
        .await
        .unwrap();
    assert!(mutate.allowed);
    assert_eq!(mutate.patch, None);
}

/// The guest sees the request's attributes as the host was given them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_request_sees_the_request_attributes() {
    let runtime = runtime();
    let plugin = runtime
        .load_admission("echo", &wasm("echo_request"), "", Limits::default())
        .await
        .expect("load echo-request");
    let mut req = request(Operation::Update, Some(configmap("cm", None)));
    req.dry_run = true;
    req.user.uid = "u-1".to_owned();
    for (phase, response) in [
        ("validate", plugin.validate(&req).await.unwrap()),
        ("mutate", plugin.mutate(&req).await.unwrap()),
    ] {
        let message = response.status.expect("a denial").message;
        let echoed: Value = serde_json::from_str(message.strip_prefix("echo ").unwrap()).unwrap();
        assert_eq!(
            echoed,
            json!({
                "phase": phase, "user": "alice", "uid": "u-1",
                "groups": ["system:authenticated"], "operation": "UPDATE",
                "resource": "configmaps", "namespace": "default", "name": "cm",
                "dryRun": true,
            })
        );
    }
}

/// The guests link a 64 KiB stack (`plugins/.cargo/config.toml`): parsing
/// an object nested as deep as serde_json allows (128 levels) still fits, and
/// deeper nesting is a parse error the plugin reports, not a stack overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_objects_fit_the_guest_stack() {
    let runtime = runtime();
    let plugin = require_labels(&runtime).await;
    for depth in [120, 200] {
        let mut nested = json!("leaf");
        for _ in 0..depth {
            nested = json!({ "n": nested });
        }
        let mut object = configmap("deep", Some(json!({"team": "a"})));
        object["spec"] = nested;
        let response = plugin
            .validate(&request(Operation::Create, Some(object)))
            .await
            .unwrap_or_else(|e| panic!("depth {depth}: {e}"));
        if depth < 128 {
            assert!(response.allowed, "depth {depth}: {response:?}");
        } else {
            let message = response.status.map(|s| s.message).unwrap_or_default();
            assert!(
                !response.allowed && message.contains("recursion limit"),
                "depth {depth}: {message}"
            );
        }
    }
}

/// The policies `scripts/build-plugins.sh` builds without WASI import only
/// the plugin package (the cheaper call, see ARCHITECTURE.md), and the
/// fixtures that use WASI still import it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasi_free_policies_import_no_wasi() {
    let runtime = runtime();
    for (name, wasi) in [
        ("require_labels", false),
        ("default_labels", false),
        ("deny_privileged", false),
        ("allow_all", false),
        ("hostile_io", true),
    ] {
        let inspection = runtime.inspect(&wasm(name)).await.unwrap();
        assert!(inspection.loads(), "{name}: {inspection:?}");
        let imports_wasi = inspection.imports.iter().any(|i| i.starts_with("wasi:"));
        assert_eq!(imports_wasi, wasi, "{name}: {:?}", inspection.imports);
    }
}

/// The bench's no-op fixture allows what `require-labels` denies, in both
/// phases, without a patch, and the calls are counted like any plugin's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_all_allows_everything_unchanged() {
    let runtime = runtime();
    let plugin = runtime
        .load_admission("allow-all", &wasm("allow_all"), "", Limits::default())
        .await
        .unwrap();
    let strict = require_labels(&runtime).await;
    let unlabelled = request(Operation::Create, Some(configmap("web", None)));
    assert!(!strict.validate(&unlabelled).await.unwrap().allowed);
    for req in [unlabelled, request(Operation::Delete, None)] {
        let validated = plugin.validate(&req).await.unwrap();
        assert!(validated.allowed, "{validated:?}");
        let mutated = plugin.mutate(&req).await.unwrap();
        assert!(mutated.allowed && mutated.patch.is_none(), "{mutated:?}");
    }
    let metrics = runtime.metrics_text();
    for (name, op, n) in [
        ("calls_total", "validate", 2),
        ("calls_total", "mutate", 2),
        ("denials_total", "validate", 0),
    ] {
        let line = format!(
            "wasm_apiserver_plugin_{name}{{plugin=\"allow-all\",kind=\"admission\",op=\"{op}\"}} {n}"
        );
        assert!(metrics.contains(&line), "no {line:?} in {metrics}");
    }
}

/// A WASI-free policy's allocator never frees across a call (the instance
/// is dropped after it): an object near the API server's 3 MiB body limit,
/// parsed and checked, still fits the default memory limit, call after call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_objects_fit_a_wasi_free_policys_memory() {
    let runtime = runtime();
    let plugin = require_labels(&runtime).await;
    let mut object = configmap("large", Some(json!({"team": "a"})));
    let data: serde_json::Map<String, Value> = (0..3000)
        .map(|i| (format!("key-{i}"), json!("x".repeat(1000))))
        .collect();
    object["data"] = Value::Object(data);
    for _ in 0..3 {
        let response = plugin
            .validate(&request(Operation::Create, Some(object.clone())))
            .await
            .unwrap();
        assert!(response.allowed, "{response:?}");
    }
    let mut unlabelled = object;
    unlabelled["metadata"]["labels"] = json!({});
    let response = plugin
        .validate(&request(Operation::Create, Some(unlabelled)))
        .await
        .unwrap();
    assert!(!response.allowed, "{response:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_is_rejected_at_load() {
    let runtime = runtime();
    let require = wasm("require_labels");
    for config in [
        r#"{"denyNamePattern":"(unclosed"}"#,
        r#"{"labels":"team"}"#,
        "not json",
    ] {
        let err = runtime
            .load_admission("require-labels", &require, config, Limits::default())
            .await
            .unwrap_err();
        assert!(matches!(err, PluginError::Config { .. }), "{config}: {err}");
    }
    let err = runtime
        .load_admission(
            "default-labels",
            &wasm("default_labels"),
            r#"{"labels":["x"]}"#,
            Limits::default(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("invalid configuration"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_labels_returns_the_expected_patch() {
    let runtime = runtime();
    let plugin = runtime
        .load_admission(
            "default-labels",
            &wasm("default_labels"),
            r#"{"labels":{"managed-by":"wasm-apiserver","app.kubernetes.io/part-of":"demo"}}"#,
            Limits::default(),
        )
        .await
        .unwrap();

    let apply = |object: &Value, patch: &Value| {
        let mut object = object.clone();
        let patch: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
        object
    };

    // No metadata.labels at all: the whole map is added in one operation.
    let bare = configmap("web", None);
    let response = plugin
        .mutate(&request(Operation::Create, Some(bare.clone())))
        .await
        .unwrap();
    assert!(response.allowed);
    let patch = response.patch.unwrap();
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/metadata/labels", "value": {
            "app.kubernetes.io/part-of": "demo", "managed-by": "wasm-apiserver"}}])
    );
    assert_eq!(
        apply(&bare, &patch)["metadata"]["labels"],
        json!({"app.kubernetes.io/part-of": "demo", "managed-by": "wasm-apiserver"})
    );
    assert_eq!(
        response
            .audit_annotations
            .get("default-labels/added-labels")
            .map(String::as_str),
        Some("1")
    );

    // Some labels present: only the missing ones, an existing value is kept.
    let partial = configmap(
        "web",
        Some(json!({"managed-by": "someone-else", "team": "a"})),
    );
    let response = plugin
        .mutate(&request(Operation::Update, Some(partial.clone())))
        .await
        .unwrap();
    let patch = response.patch.unwrap();
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/metadata/labels/app.kubernetes.io~1part-of", "value": "demo"}])
    );
    assert_eq!(
        apply(&partial, &patch)["metadata"]["labels"],
        json!({"managed-by": "someone-else", "team": "a", "app.kubernetes.io/part-of": "demo"})
    );

    // No metadata at all.
    let response = plugin
        .mutate(&request(
            Operation::Create,
            Some(json!({"kind": "ConfigMap"})),
        ))
        .await
        .unwrap();
    assert_eq!(response.patch.unwrap()[0]["path"], "/metadata");

    // Everything present: no patch.
    let full = configmap(
        "web",
        Some(json!({"managed-by": "x", "app.kubernetes.io/part-of": "y"})),
    );
    let response = plugin
        .mutate(&request(Operation::Create, Some(full)))
        .await
        .unwrap();
    assert!(response.allowed);
    assert_eq!(response.patch, None);

    // The validating phase of a mutating policy allows, without a patch.
    let response = plugin
        .validate(&request(Operation::Create, Some(bare)))
        .await
        .unwrap();
    assert!(response.allowed);
    assert_eq!(response.patch, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_loop_times_out_within_the_limit() {
    let runtime = runtime();
    let timeout = Duration::from_millis(200);
    let plugin = runtime
        .load_admission(
            "hostile-loop",
            &wasm("hostile_loop"),
            "",
            limits(|l| l.timeout = timeout),
        )
        .await
        .unwrap();
    for _ in 0..2 {
        let start = Instant::now();
        let err = plugin
            .validate(&request(Operation::Create, Some(configmap("x", None))))
            .await
            .unwrap_err();
        let elapsed = start.elapsed();
        assert!(matches!(err, PluginError::Timeout { .. }), "{err}");
        assert!(elapsed >= timeout, "{elapsed:?}");
        assert!(
            elapsed < timeout + Duration::from_millis(500),
            "took {elapsed:?}"
        );
    }
    let err = plugin
        .mutate(&request(Operation::Create, None))
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Timeout { .. }), "{err}");
    assert_still_serving(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_memory_dies_at_the_memory_limit() {
    let runtime = runtime();
    let limit = 16 << 20;
    let plugin = runtime
        .load_admission(
            "hostile-memory",
            &wasm("hostile_memory"),
            "",
            limits(|l| l.max_memory_bytes = limit),
        )
        .await
        .unwrap();
    let err = plugin
        .validate(&request(Operation::Create, None))
        .await
        .unwrap_err();
    match err {
        PluginError::MemoryExceeded { limit: l, .. } => assert_eq!(l, limit),
        other => panic!("expected MemoryExceeded, got {other}"),
    }
    assert_still_serving(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_trap_is_reported_as_a_trap() {
    let runtime = runtime();
    let plugin = runtime
        .load_admission("hostile-trap", &wasm("hostile_trap"), "", Limits::default())
        .await
        .unwrap();
    let err = plugin
        .validate(&request(Operation::Create, None))
        .await
        .unwrap_err();
    match &err {
        PluginError::Trap { plugin, message } => {
            eprintln!("{err}");
            assert_eq!(plugin, "hostile-trap");
            // The guest's panic message (captured stderr) explains the trap.
            assert!(
                message.contains("deliberate panic in validate"),
                "{message}"
            );
        }
        other => panic!("expected Trap, got {other}"),
    }
    assert!(matches!(
        plugin.mutate(&request(Operation::Create, None)).await,
        Err(PluginError::Trap { .. })
    ));
    assert_still_serving(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_output_is_rejected_as_too_large() {
    let runtime = runtime();
    let plugin = runtime
        .load_admission(
            "hostile-output",
            &wasm("hostile_output"),
            "",
            limits(|l| l.max_output_bytes = 64 * 1024),
        )
        .await
        .unwrap();
    for phase in ["validate", "mutate"] {
        let req = request(Operation::Create, None);
        let result = match phase {
            "validate" => plugin.validate(&req).await,
            _ => plugin.mutate(&req).await,
        };
        match result {
            Err(PluginError::OutputTooLarge { size, limit, .. }) => {
                assert!(size >= 4 << 20, "{phase}: {size}");
                assert_eq!(limit, 64 * 1024);
            }
            other => panic!("{phase}: expected OutputTooLarge, got {other:?}"),
        }
    }
    assert_still_serving(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_io_reaches_neither_files_nor_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();

    let runtime = runtime();
    let plugin = runtime
        .load_admission(
            "hostile-io",
            &wasm("hostile_io"),
            &format!(r#"{{"port":{port}}}"#),
            Limits::default(),
        )
        .await
        .unwrap();
    let response = plugin
        .validate(&request(Operation::Create, None))
        .await
        .unwrap();
    assert!(response.allowed);
    eprintln!("{:#?}", response.audit_annotations);
    let attempts = ["file-read", "dir-list", "env", "tcp-std", "tcp-wasi", "dns"];
    for attempt in attempts {
        let key = format!("hostile-io/{attempt}");
        let outcome = response
            .audit_annotations
            .get(&key)
            .unwrap_or_else(|| panic!("no {key} in {:?}", response.audit_annotations));
        assert!(outcome.starts_with("failed:"), "{attempt} {outcome}");
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the plugin reached the listener: {other:?}"),
    }
    assert_still_serving(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_runtime_loads_from_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_owned()),
        max_instances: 8,
        ..RuntimeConfig::default()
    };
    let wasm = wasm("require_labels");

    let first = Runtime::new(config.clone()).unwrap();
    let start = Instant::now();
    let plugin = first
        .load_admission("require-labels", &wasm, REQUIRE_LABELS, Limits::default())
        .await
        .unwrap();
    let cold = start.elapsed();
    let stats = first.cache_stats();
    assert_eq!((stats.hits, stats.misses), (0, 1), "{stats:?}");
    let files = walk(dir.path());
    assert!(
        !files.is_empty(),
        "no cache file in {}",
        dir.path().display()
    );
    assert_eq!(plugin.digest().len(), 64);

    let second = Runtime::new(config).unwrap();
    let start = Instant::now();
    let plugin = second
        .load_admission("require-labels", &wasm, REQUIRE_LABELS, Limits::default())
        .await
        .unwrap();
    let cached = start.elapsed();
    let stats = second.cache_stats();
    assert_eq!((stats.hits, stats.misses), (1, 0), "{stats:?}");
    assert!(
        second
            .metrics_text()
            .contains("wasm_apiserver_plugin_cache_hits_total 1")
    );
    eprintln!("cold load {cold:?}, cached load {cached:?}");
    let ok = plugin
        .validate(&request(
            Operation::Create,
            Some(configmap("a", Some(json!({"team": "t"})))),
        ))
        .await
        .unwrap();
    assert!(ok.allowed);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_cap_queues_then_reports_busy() {
    let runtime = runtime();

    // Within the cap calls queue: 16 concurrent calls through 2 slots all succeed.
    let plugin = runtime
        .load_admission(
            "require-labels",
            &wasm("require_labels"),
            REQUIRE_LABELS,
            limits(|l| l.max_concurrency = 2),
        )
        .await
        .unwrap();
    let calls = (0..16).map(|i| {
        let plugin = plugin.clone();
        tokio::spawn(async move {
            let object = configmap(&format!("cm-{i}"), Some(json!({"team": "t"})));
            plugin
                .validate(&request(Operation::Create, Some(object)))
                .await
        })
    });
    for call in calls.collect::<Vec<_>>() {
        assert!(call.await.unwrap().unwrap().allowed);
    }

    // One slot held by a spinning call: the other call waits queue_timeout, then Busy.
    let looping = runtime
        .load_admission(
            "hostile-loop",
            &wasm("hostile_loop"),
            "",
            limits(|l| {
                l.max_concurrency = 1;
                l.timeout = Duration::from_millis(600);
                l.queue_timeout = Duration::from_millis(50);
            }),
        )
        .await
        .unwrap();
    let req = request(Operation::Create, None);
    let (a, b) = tokio::join!(looping.validate(&req), looping.validate(&req));
    let mut kinds = [a.unwrap_err().kind(), b.unwrap_err().kind()];
    kinds.sort();
    assert_eq!(kinds, ["busy", "timeout"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_calls_denials_errors_and_latency() {
    let runtime = runtime();
    let plugin = require_labels(&runtime).await;
    let good = request(
        Operation::Create,
        Some(configmap("a", Some(json!({"team": "t"})))),
    );
    let bad = request(Operation::Create, Some(configmap("a", None)));
    plugin.validate(&good).await.unwrap();
    plugin.validate(&bad).await.unwrap();
    plugin.validate(&bad).await.unwrap();
    plugin.mutate(&good).await.unwrap();
    let trap = runtime
        .load_admission("hostile-trap", &wasm("hostile_trap"), "", Limits::default())
        .await
        .unwrap();
    trap.validate(&good).await.unwrap_err();

    let text = runtime.metrics_text();
    let labels =
        |plugin: &str, op: &str| format!("{{plugin=\"{plugin}\",kind=\"admission\",op=\"{op}\"}}");
    for line in [
        format!("wasm_apiserver_plugin_calls_total{} 3", labels("require-labels", "validate")),
        format!("wasm_apiserver_plugin_calls_total{} 1", labels("require-labels", "mutate")),
        format!("wasm_apiserver_plugin_denials_total{} 2", labels("require-labels", "validate")),
        format!("wasm_apiserver_plugin_timeouts_total{} 0", labels("require-labels", "validate")),
        format!("wasm_apiserver_plugin_calls_total{} 1", labels("hostile-trap", "validate")),
        "wasm_apiserver_plugin_errors_total{plugin=\"hostile-trap\",kind=\"admission\",op=\"validate\",error=\"trap\"} 1".to_owned(),
        format!("wasm_apiserver_plugin_call_duration_seconds_count{} 3", labels("require-labels", "validate")),
        "# TYPE wasm_apiserver_plugin_call_duration_seconds histogram".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_of_another_world_and_garbage_are_rejected() {
    let runtime = runtime();
    let err = runtime
        .load_admission("garbage", b"\0asm not really", "", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Compile { .. }), "{err}");

    let err = runtime
        .load_admission("empty", b"(component)", "", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");

    let err = runtime
        .load_admission(
            "needs-http",
            br#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#,
            "",
            Limits::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");

    let err = runtime
        .load_admission(
            "greedy",
            &wasm("require_labels"),
            "",
            limits(|l| l.max_memory_bytes = u64::MAX),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Engine(_)), "{err}");
}

/// Every component `plugins/` builds is listed in [`FIXTURES`] (and so used
/// above), and every listed fixture is built.
#[test]
fn every_fixture_is_known_and_built() {
    wasm("require_labels");
    let mut built: Vec<String> = std::fs::read_dir(wasm_dir())
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".wasm").map(str::to_owned)
        })
        .collect();
    built.sort();
    let mut known: Vec<String> = FIXTURES.iter().map(|s| (*s).to_owned()).collect();
    known.sort();
    assert_eq!(built, known, "plugins/ and FIXTURES disagree");
}

/// Every call gets an instance of its own, prepared ahead or not: a plugin
/// counting its calls in a global sees 1 on every call, from 16 tasks at
/// once, and most of those calls did run on prepared instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_instances_are_single_use_under_concurrency() {
    let runtime = runtime();
    let plugin = runtime
        .load_admission("counter", &wasm("global_counter"), "", Limits::default())
        .await
        .expect("load");
    let req = std::sync::Arc::new(request(Operation::Create, Some(configmap("c", None))));
    // (Loading ran check-config on an instance of its own.)
    let (hits_before, misses_before) = plugin.prepared_calls();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (plugin, req) = (plugin.clone(), req.clone());
            tokio::spawn(async move {
                let mut counts = Vec::new();
                for i in 0..40 {
                    let phase = if i % 2 == 0 {
                        plugin.validate(&req).await
                    } else {
                        plugin.mutate(&req).await
                    };
                    let r = phase.expect("call");
                    counts.push(r.warnings.join(","));
                    // Sometimes leave time for the refill, sometimes not.
                    if i % 3 == 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                }
                counts
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    assert_eq!(all.len(), 16 * 40);
    assert!(
        all.iter().all(|c| c == "calls=1"),
        "a call saw another call's state: {all:?}"
    );
    let (hits, misses) = plugin.prepared_calls();
    let (hits, misses) = (hits - hits_before, misses - misses_before);
    assert_eq!(hits + misses, 16 * 40);
    assert!(
        hits > 0,
        "no call ran on a prepared instance ({misses} instantiated)"
    );
}

/// Prepared instances belong to the plugin they were made for: once a
/// plugin is replaced (its handle dropped) they are dropped too, never
/// handed to its successor, which prepares its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_plugins_prepared_instances_are_dropped_not_reused() {
    let runtime = runtime();
    let wait_for = |want: usize| {
        let runtime = runtime.clone();
        async move {
            for _ in 0..500 {
                if runtime.prepared_instances() == want {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            panic!("{} prepared, not {want}", runtime.prepared_instances());
        }
    };
    let old = runtime
        .load_admission("swapped", &wasm("global_counter"), "", Limits::default())
        .await
        .expect("load");
    let target = RuntimeConfig::default().prepared_instances;
    wait_for(target).await;
    drop(old);
    wait_for(0).await;

    // The successor (another module under the same name) answers as
    // itself from its first call, on its own instances.
    let new = require_labels(&runtime).await;
    let unlabelled = request(Operation::Create, Some(configmap("c", None)));
    let r = new.validate(&unlabelled).await.expect("call");
    assert!(!r.allowed, "the new version must answer");
    assert!(r.warnings.is_empty(), "an old instance answered: {r:?}");
    wait_for(target).await;
}

/// Instances are prepared on the runtime's lowest-priority thread (nice
/// 19), so that preparing only uses CPU time no request wants.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_prepared_at_the_lowest_priority() {
    let runtime = runtime();
    let _plugin = require_labels(&runtime).await;
    let target = RuntimeConfig::default().prepared_instances;
    for _ in 0..500 {
        if runtime.prepared_instances() == target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(runtime.prepared_instances(), target);
    let mut preparers = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == "wasm-preparer" {
            // Field 19 of stat is the nice value; fields after the
            // parenthesised command name are space-separated.
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
            let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
            let nice: i32 = after_comm.split(' ').nth(16).unwrap().parse().unwrap();
            preparers.push(nice);
        }
    }
    // Other tests of this binary run their own runtimes, each with its own.
    assert!(!preparers.is_empty(), "no preparer thread");
    assert!(preparers.iter().all(|&n| n == 19), "{preparers:?}");
}

/// Plugins loaded from the same bytes share one compiled artifact while
/// any of them is loaded (no second lookup in the disk cache, no second
/// copy of the code mapped); once the last is dropped, the next load reads
/// the disk cache again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_from_the_same_bytes_share_their_compiled_code() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().to_owned()),
        max_instances: 8,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let wasm = wasm("require_labels");
    let load = |name: &'static str| {
        let (runtime, wasm) = (runtime.clone(), wasm.clone());
        async move {
            runtime
                .load_admission(name, &wasm, REQUIRE_LABELS, Limits::default())
                .await
                .unwrap()
        }
    };
    let lookups = || {
        let s = runtime.cache_stats();
        (s.hits, s.misses)
    };
    let a = load("a").await;
    assert_eq!(lookups(), (0, 1));
    let b = load("b").await;
    assert_eq!(
        lookups(),
        (0, 1),
        "the second load looked in the disk cache"
    );
    assert_eq!(a.digest(), b.digest());
    drop(a);
    let c = load("c").await;
    assert_eq!(lookups(), (0, 1), "b still holds the artifact");
    drop((b, c));
    let d = load("d").await;
    assert_eq!(lookups(), (1, 1), "the artifact outlived its plugins");
    let labelled = request(
        Operation::Create,
        Some(configmap("c", Some(json!({"team": "a"})))),
    );
    assert!(d.validate(&labelled).await.unwrap().allowed);
}

/// A plugin may outlive the `Runtime` handle it was loaded with (the
/// server keeps plugins, not runtimes): its calls still find instances
/// prepared for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_outliving_its_runtime_still_prepares_instances() {
    let runtime = runtime();
    let plugin = require_labels(&runtime).await;
    drop(runtime);
    let labelled = request(
        Operation::Create,
        Some(configmap("c", Some(json!({"team": "a"})))),
    );
    let (hits_before, _) = plugin.prepared_calls();
    for _ in 0..20 {
        assert!(plugin.validate(&labelled).await.unwrap().allowed);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (hits, misses) = plugin.prepared_calls();
    // With the bug this guards against, none did; the preparer runs at
    // nice 19, so on a busy machine (a parallel test run) it may fall
    // behind for a few calls.
    assert!(
        hits - hits_before >= 10,
        "{} of 20 calls found a prepared instance ({misses} misses in all)",
        hits - hits_before
    );
}

/// An unprepared plugin (what a shadow version is) instantiates inside
/// every call, so a call's whole cost is where the call runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprepared_plugin_instantiates_in_every_call() {
    let runtime = runtime();
    let plugin = require_labels(&runtime).await.unprepared();
    let labelled = request(
        Operation::Create,
        Some(configmap("c", Some(json!({"team": "a"})))),
    );
    for _ in 0..10 {
        assert!(plugin.validate(&labelled).await.unwrap().allowed);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (hits, misses) = plugin.prepared_calls();
    assert_eq!((hits, misses), (0, 10));
}

fn ingress(ns: &str, name: &str, host: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"rules": [{"host": host}]}})
}

fn ingress_request(obj: Value) -> AdmissionRequest {
    let mut r = request(Operation::Create, Some(obj.clone()));
    r.kind = Gvk {
        group: "networking.k8s.io".to_owned(),
        version: "v1".to_owned(),
        kind: "Ingress".to_owned(),
    };
    r.namespace = obj["metadata"]["namespace"].as_str().map(String::from);
    r
}

/// The message of `plugin`'s denial of a second `web.example.com` Ingress.
async fn denial(plugin: &AdmissionPlugin) -> String {
    let r = plugin
        .validate(&ingress_request(ingress(
            "team-b",
            "web",
            "web.example.com",
        )))
        .await
        .unwrap();
    assert!(!r.allowed, "{r:?}");
    r.status.unwrap().message
}

/// A component of package 0.3.0 reads the cluster through its `cluster`
/// import: only the kinds it is granted, within its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_reads_the_cluster_it_is_granted() {
    let rt = runtime();
    let stored = vec![ingress("team-a", "web", "web.example.com")];
    let load = |grants: &'static [(&'static str, &'static str)], calls: u32| {
        let rt = rt.clone();
        let stored = stored.clone();
        async move {
            rt.load_admission_with_cluster(
                "unique-ingress-host",
                &wasm("unique_ingress_host"),
                "",
                Limits::default(),
                Some(access(stored, grants, calls, 1 << 20)),
            )
            .await
            .expect("load")
        }
    };
    let granted = load(&[("networking.k8s.io/v1", "Ingress")], 64).await;
    // A host another namespace serves is refused; a new one passes.
    let r = granted
        .validate(&ingress_request(ingress(
            "team-b",
            "web",
            "web.example.com",
        )))
        .await
        .unwrap();
    assert!(!r.allowed);
    let status = r.status.unwrap();
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        "host \"web.example.com\" is already served by ingress team-a/web"
    );
    let r = granted
        .validate(&ingress_request(ingress(
            "team-b",
            "api",
            "api.example.com",
        )))
        .await
        .unwrap();
    assert!(r.allowed, "{r:?}");
    // Not granted: the read answers an error naming the kind.
    let ungranted = load(&[("v1", "Service")], 64).await;
    let message = denial(&ungranted).await;
    assert!(
        message.contains("reading networking.k8s.io/v1 Ingress is not granted"),
        "{message}"
    );
    // Out of reads.
    let starved = load(&[("networking.k8s.io/v1", "Ingress")], 0).await;
    let message = denial(&starved).await;
    assert!(message.contains("more than 0 cluster reads"), "{message}");
    // Loaded without cluster access at all (`load_admission`).
    let bare = rt
        .load_admission("bare", &wasm("unique_ingress_host"), "", Limits::default())
        .await
        .unwrap();
    let message = denial(&bare).await;
    assert!(message.contains("no access to the cluster"), "{message}");
}
