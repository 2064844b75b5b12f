//! In-process tests of the router on the embedded store (`oneshot`, no
//! sockets): upstream-shaped `Status` errors, metadata semantics, and the
//! admission chain with real compiled plugin components, hostile ones
//! included.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use base64::Engine;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;
use wasm_apiserver::server::{AppState, router};
use wasm_apiserver_api::resource::ColumnPath;
use wasm_apiserver_api::{Column, ResourceInfo};
use wasm_apiserver_plugins::{Runtime, RuntimeConfig};
use wasm_apiserver_registry::Resource;
use wasm_apiserver_registry::admission::Admission;
use wasm_apiserver_storage::Storage;
use wasm_apiserver_storage::embedded::{EmbeddedOptions, EmbeddedStore};

fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/wasm32-wasip2/release")
}

/// Builds the guest components once per test binary.
fn ensure_plugins() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-plugins.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .output()
            .expect("run scripts/build-plugins.sh");
        assert!(
            out.status.success(),
            "build-plugins.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

struct App {
    router: Router,
    state: Arc<AppState>,
    storage: Arc<dyn Storage>,
    _dir: tempfile::TempDir,
}

async fn app() -> App {
    ensure_plugins();
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> =
        Arc::new(EmbeddedStore::open(&dir.path().join("db"), EmbeddedOptions::default()).unwrap());
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("cache")),
        max_instances: 32,
        ..Default::default()
    })
    .unwrap();
    let admission = Arc::new(Admission::new(runtime, Some(plugin_dir()), storage.clone()));
    let state = Arc::new(AppState::new(
        storage.clone(),
        "127.0.0.1:6443".parse().unwrap(),
        1 << 20,
        Some(admission),
    ));
    wasm_apiserver_registry::namespaces::ensure_initial(&state.objects)
        .await
        .unwrap();
    App {
        router: router(state.clone()),
        state,
        storage,
        _dir: dir,
    }
}

struct Resp {
    status: StatusCode,
    body: Value,
    warnings: Vec<String>,
}

impl App {
    async fn call(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<Value>,
    ) -> Resp {
        let mut req = Request::builder().method(method).uri(path);
        if !content_type.is_empty() {
            req = req.header(header::CONTENT_TYPE, content_type);
        }
        let req = req
            .body(body.map(|b| Body::from(b.to_string())).unwrap_or_default())
            .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let warnings = resp
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        Resp {
            status,
            body,
            warnings,
        }
    }
    async fn get(&self, path: &str) -> Resp {
        self.call("GET", path, "", None).await
    }
    async fn post(&self, path: &str, body: Value) -> Resp {
        self.call("POST", path, "application/json", Some(body))
            .await
    }
}

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn assert_status(r: &Resp, code: u16, reason: &str) {
    assert_eq!(r.status.as_u16(), code, "{}", r.body);
    assert_eq!(r.body["kind"], "Status", "{}", r.body);
    assert_eq!(r.body["code"], code, "{}", r.body);
    assert_eq!(r.body["reason"], reason, "{}", r.body);
}

#[tokio::test]
async fn errors_are_upstream_status_objects() {
    let a = app().await;
    assert_status(&a.get(&format!("{CMS}/missing")).await, 404, "NotFound");
    assert_eq!(
        a.get(&format!("{CMS}/missing")).await.body["message"],
        "configmaps \"missing\" not found"
    );
    assert_eq!(
        a.post(CMS, cm("a", json!({}))).await.status,
        StatusCode::CREATED
    );
    assert_status(&a.post(CMS, cm("a", json!({}))).await, 409, "AlreadyExists");
    let bad = a.post(CMS, cm("Bad_Name", json!({}))).await;
    assert_status(&bad, 422, "Invalid");
    assert_eq!(bad.body["details"]["causes"][0]["field"], "metadata.name");
    assert_status(
        &a.post("/api/v1/namespaces/nope/configmaps", cm("a", json!({})))
            .await,
        404,
        "NotFound",
    );
    assert_status(
        &a.post(&format!("{CMS}/a"), cm("a", json!({}))).await,
        405,
        "MethodNotAllowed",
    );
    assert_status(
        &a.call(
            "PATCH",
            &format!("{CMS}/a"),
            "application/apply-patch+yaml",
            Some(json!({})),
        )
        .await,
        422,
        "Invalid",
    );
    assert_status(
        &a.call(
            "PATCH",
            &format!("{CMS}/a?force=true"),
            "application/merge-patch+json",
            Some(json!({})),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        &a.get(&format!("{CMS}?labelSelector=a%20b")).await,
        400,
        "BadRequest",
    );
    assert_status(
        &a.get(&format!("{CMS}?fieldSelector=spec.x%3D1")).await,
        400,
        "BadRequest",
    );
    assert_status(
        &a.get("/api/v1/namespaces/default/widgets").await,
        404,
        "NotFound",
    );
    assert_status(
        &a.call("POST", CMS, "application/xml", Some(json!({})))
            .await,
        415,
        "UnsupportedMediaType",
    );
    assert_status(
        &a.call("POST", CMS, "application/json", None).await,
        400,
        "BadRequest",
    );

    // Optimistic concurrency: a stale resourceVersion is a 409 Conflict.
    let cur = a.get(&format!("{CMS}/a")).await.body;
    let mut stale = cur.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    assert_status(
        &a.call("PUT", &format!("{CMS}/a"), "application/json", Some(stale))
            .await,
        409,
        "Conflict",
    );
    let ok = a
        .call(
            "PUT",
            &format!("{CMS}/a"),
            "application/json",
            Some(cur.clone()),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(
        ok.body["metadata"]["resourceVersion"], cur["metadata"]["resourceVersion"],
        "a no-op update writes nothing"
    );
}

/// fieldValidation: Strict rejects the request's unknown fields (400,
/// nothing stored), Warn drops them with a warning each; unknown fields an
/// older version stored are dropped silently on the next write, never blamed
/// on a request that does not send them.
#[tokio::test]
async fn unknown_fields_follow_field_validation() {
    let app = app().await;
    let mut body = cm("u", json!({}));
    body["spc"] = json!(1);
    let r = app
        .call(
            "POST",
            &format!("{CMS}?fieldValidation=Strict"),
            "application/json",
            Some(body.clone()),
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("strict decoding error: unknown field \"spc\""),
        "{}",
        r.body
    );
    assert_eq!(
        app.get(&format!("{CMS}/u")).await.status,
        StatusCode::NOT_FOUND
    );
    let r = app.post(CMS, body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert!(r.body.get("spc").is_none(), "{}", r.body);
    assert_eq!(r.warnings, ["299 - \"unknown field \\\"spc\\\"\""]);

    let old = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "old", "namespace": "default", "uid": "u-old",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "data": {"k": "v"}, "spc": 1});
    app.storage
        .create(
            "/registry/core/configmaps/default/old",
            serde_json::to_vec(&old).unwrap(),
        )
        .await
        .unwrap();
    let r = app
        .call(
            "PATCH",
            &format!("{CMS}/old?fieldValidation=Strict"),
            "application/merge-patch+json",
            Some(json!({"data": {"k": "v2"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.body["data"]["k"], "v2");
    assert!(r.body.get("spc").is_none(), "{}", r.body);
}

#[tokio::test]
async fn watch_from_a_compacted_revision_gets_410() {
    let a = app().await;
    let first = a.post(CMS, cm("w1", json!({}))).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    a.post(CMS, cm("w2", json!({}))).await;
    let rev = a.storage.current_revision().await.unwrap();
    a.storage.compact(rev).await.unwrap();
    let r = a
        .get(&format!("{CMS}?watch=1&resourceVersion={first}"))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let line: Value = match &r.body {
        Value::String(s) => serde_json::from_str(s.lines().next().unwrap()).unwrap(),
        v => v.clone(),
    };
    assert_eq!(line["type"], "ERROR");
    assert_eq!(line["object"]["code"], 410);
    assert_eq!(line["object"]["reason"], "Expired");
    // A list at the compacted revision expires too.
    let l = a
        .get(&format!(
            "{CMS}?resourceVersion={first}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_status(&l, 410, "Expired");
}

#[tokio::test]
async fn finalizers_hold_deletion_and_terminating_namespaces_refuse_writes() {
    let a = app().await;
    assert_eq!(
        a.post("/api/v1/namespaces", json!({"metadata": {"name": "t"}}))
            .await
            .status,
        StatusCode::CREATED
    );
    let path = "/api/v1/namespaces/t/configmaps";
    let mut obj = cm("held", json!({}));
    obj["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(a.post(path, obj).await.status, StatusCode::CREATED);
    let del = a.call("DELETE", &format!("{path}/held"), "", None).await;
    assert_eq!(del.status, StatusCode::OK);
    assert!(
        del.body["metadata"]["deletionTimestamp"].is_string(),
        "{}",
        del.body
    );
    assert!(a.get(&format!("{path}/held")).await.body["metadata"]["deletionTimestamp"].is_string());

    // The namespace terminates but waits for the held object.
    let ns = a.call("DELETE", "/api/v1/namespaces/t", "", None).await;
    assert_eq!(ns.body["status"]["phase"], "Terminating");
    let refused = a.post(path, cm("new", json!({}))).await;
    assert_status(&refused, 403, "Forbidden");
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap()
            .contains("being terminated")
    );

    // Dropping the finalizer deletes the object.
    let patch = json!({"metadata": {"finalizers": null}});
    let p = a
        .call(
            "PATCH",
            &format!("{path}/held"),
            "application/merge-patch+json",
            Some(patch),
        )
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert_status(&a.get(&format!("{path}/held")).await, 404, "NotFound");
}

fn plugin(name: &str, file: &str, phases: &[&str], extra: Value) -> Value {
    let mut spec = json!({
        "module": {"file": file},
        "phases": phases,
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "limits": {"timeoutMillis": 300, "memoryBytes": 16 << 20},
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "admission.wasm-apiserver.io/v1alpha1", "kind": "AdmissionPlugin", "metadata": {"name": name}, "spec": spec})
}

const PLUGINS: &str = "/apis/admission.wasm-apiserver.io/v1alpha1/admissionplugins";

/// The races a lagging watch makes: a write's own reconcile has installed
/// generation 2 (or removed the deleted plugin) when the watch delivers an
/// older event. Reconciling that stale object must neither reinstall the
/// older generation (nor the deleted plugin) nor record its status over
/// the newer one's.
#[tokio::test]
async fn a_stale_event_never_reinstalls_an_older_generation_or_a_deleted_plugin() {
    let a = app().await;
    let labels = |l: &str| json!({"config": {"labels": [l]}});
    let first = plugin(
        "team",
        "require_labels.wasm",
        &["Validating"],
        labels("team"),
    );
    assert_eq!(a.post(PLUGINS, first).await.status, StatusCode::CREATED);
    let stale = a.get(&format!("{PLUGINS}/team")).await.body;
    assert_eq!(stale["status"]["observedGeneration"], 1, "{stale}");
    let mut second = stale.clone();
    second["spec"]["config"] = json!({"labels": ["owner"]});
    let put = a
        .call(
            "PUT",
            &format!("{PLUGINS}/team"),
            "application/json",
            Some(second),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    let admission = a.state.objects.admission.clone().unwrap();
    assert_eq!(admission.loaded("team").map(|(g, _)| g), Some(2));

    wasm_apiserver_registry::admission::controller::reconcile(&a.state.objects, &stale).await;

    assert_eq!(admission.loaded("team").map(|(g, _)| g), Some(2));
    let now = a.get(&format!("{PLUGINS}/team")).await.body;
    assert_eq!(now["status"]["observedGeneration"], 2, "{now}");
    assert_eq!(now["status"]["phase"], "Active", "{now}");
    // Generation 2 judges: "team" alone no longer passes.
    let denied = a.post(CMS, cm("x", json!({"team": "a"}))).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.body);
    assert!(
        denied.body["message"].as_str().unwrap().contains("owner"),
        "{}",
        denied.body
    );

    // Deleted: neither generation's late events bring it back.
    let deleted = a.call("DELETE", &format!("{PLUGINS}/team"), "", None).await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    for late in [&stale, &now] {
        wasm_apiserver_registry::admission::controller::reconcile(&a.state.objects, late).await;
        assert_eq!(admission.loaded("team"), None);
    }
    assert_eq!(
        a.post(CMS, cm("y", json!({}))).await.status,
        StatusCode::CREATED
    );
    // Created again (another uid): it loads.
    let again = plugin(
        "team",
        "require_labels.wasm",
        &["Validating"],
        labels("team"),
    );
    assert_eq!(a.post(PLUGINS, again).await.status, StatusCode::CREATED);
    assert_eq!(admission.loaded("team").map(|(g, _)| g), Some(1));
}

#[tokio::test]
async fn admission_plugins_deny_mutate_warn_and_swap_at_runtime() {
    let a = app().await;
    let deny = plugin(
        "team",
        "require_labels.wasm",
        &["Validating"],
        json!({"config": {"labels": ["team"]}}),
    );
    assert_eq!(a.post(PLUGINS, deny).await.status, StatusCode::CREATED);
    assert_eq!(
        a.get(&format!("{PLUGINS}/team")).await.body["status"]["phase"],
        "Active"
    );
    let denied = a.post(CMS, cm("x", json!({}))).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.body);
    assert!(
        denied.body["message"]
            .as_str()
            .unwrap()
            .contains("missing required label(s): team"),
        "{}",
        denied.body
    );
    assert_eq!(
        a.post(CMS, cm("y", json!({"team": "a"}))).await.status,
        StatusCode::CREATED
    );

    // Dry run runs admission but stores nothing.
    let dry = a
        .post(
            &format!("{CMS}?dryRun=All"),
            cm("dry", json!({"team": "a"})),
        )
        .await;
    assert_eq!(dry.status, StatusCode::CREATED);
    assert_status(&a.get(&format!("{CMS}/dry")).await, 404, "NotFound");

    // Switch to Warn: stored, with a warning.
    let mut warn = a.get(&format!("{PLUGINS}/team")).await.body;
    warn["spec"]["mode"] = json!("Warn");
    assert_eq!(
        a.call(
            "PUT",
            &format!("{PLUGINS}/team"),
            "application/json",
            Some(warn)
        )
        .await
        .status,
        StatusCode::OK
    );
    let warned = a.post(CMS, cm("w", json!({}))).await;
    assert_eq!(warned.status, StatusCode::CREATED);
    assert!(
        warned
            .warnings
            .iter()
            .any(|w| w.starts_with("299 - ") && w.contains("missing required label")),
        "{:?}",
        warned.warnings
    );

    // A module that does not compile is reported; the previous version keeps serving.
    let mut broken = a.get(&format!("{PLUGINS}/team")).await.body;
    broken["spec"]["mode"] = json!("Deny");
    broken["spec"]["module"] =
        json!({"wasm": base64::engine::general_purpose::STANDARD.encode(b"\0asm garbage")});
    assert_eq!(
        a.call(
            "PUT",
            &format!("{PLUGINS}/team"),
            "application/json",
            Some(broken)
        )
        .await
        .status,
        StatusCode::OK
    );
    let st = a.get(&format!("{PLUGINS}/team")).await.body["status"].clone();
    assert_eq!(st["phase"], "Failed", "{st}");
    assert!(st["activeGeneration"].is_i64(), "{st}");
    assert_eq!(
        a.post(CMS, cm("still-warn", json!({}))).await.status,
        StatusCode::CREATED
    );

    // A mutating plugin's patch is in the stored object.
    let mutate = plugin(
        "defaults",
        "default_labels.wasm",
        &["Mutating"],
        json!({"config": {"labels": {"managed-by": "wasm"}}}),
    );
    assert_eq!(a.post(PLUGINS, mutate).await.status, StatusCode::CREATED);
    assert_eq!(
        a.post(CMS, cm("m", json!({"team": "a"}))).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        a.get(&format!("{CMS}/m")).await.body["metadata"]["labels"]["managed-by"],
        "wasm"
    );

    // Deleting the plugins lets everything through unchanged.
    assert_eq!(
        a.call("DELETE", &format!("{PLUGINS}/team"), "", None)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        a.call("DELETE", &format!("{PLUGINS}/defaults"), "", None)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        a.post(CMS, cm("free", json!({}))).await.status,
        StatusCode::CREATED
    );
    assert!(
        a.get(&format!("{CMS}/free")).await.body["metadata"]["labels"]
            .get("managed-by")
            .is_none()
    );
}

#[tokio::test]
async fn hostile_plugins_are_contained_per_failure_policy() {
    let a = app().await;
    for fixture in [
        "hostile_loop",
        "hostile_memory",
        "hostile_trap",
        "hostile_output",
    ] {
        let name = fixture.replace('_', "-");
        let p = plugin(
            &name,
            &format!("{fixture}.wasm"),
            &["Validating"],
            json!({"failurePolicy": "Fail"}),
        );
        let created = a.post(PLUGINS, p).await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
        let r = a.post(CMS, cm(&format!("{name}-fail"), json!({}))).await;
        assert_status(&r, 500, "InternalError");
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .contains(&format!("failed calling admission plugin \"{name}\"")),
            "{}",
            r.body
        );
        assert_eq!(
            a.get("/readyz").await.status,
            StatusCode::OK,
            "{fixture} must not take the server down"
        );

        let mut ignore = a.get(&format!("{PLUGINS}/{name}")).await.body;
        ignore["spec"]["failurePolicy"] = json!("Ignore");
        assert_eq!(
            a.call(
                "PUT",
                &format!("{PLUGINS}/{name}"),
                "application/json",
                Some(ignore)
            )
            .await
            .status,
            StatusCode::OK
        );
        let r = a.post(CMS, cm(&format!("{name}-ignore"), json!({}))).await;
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "{fixture} with Ignore: {}",
            r.body
        );
        assert_eq!(
            a.call("DELETE", &format!("{PLUGINS}/{name}"), "", None)
                .await
                .status,
            StatusCode::OK
        );
    }
    // The I/O fixture probes files, env and sockets and allows the request
    // (host/plugins/tests checks that every probe failed); here it must
    // simply not disturb the server.
    let io = plugin("hostile-io", "hostile_io.wasm", &["Validating"], json!({}));
    assert_eq!(a.post(PLUGINS, io).await.status, StatusCode::CREATED);
    let r = a.post(CMS, cm("io", json!({}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let metrics = a.get("/metrics").await.body;
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.contains("wasm_apiserver_plugin_timeouts_total{plugin=\"hostile-loop\""),
        "{text}"
    );
}

#[path = "support/webhook.rs"]
mod webhook_support;

/// A ValidatingWebhookConfiguration `name` sending ConfigMap creates to
/// `hook`, failing closed.
fn webhook_configuration(name: &str, hook: &webhook_support::TestWebhook) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": format!("{name}.example.com"),
            "clientConfig": {"url": hook.url, "caBundle": hook.ca_bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }]
    })
}

#[tokio::test]
async fn validating_webhook_runs_in_the_same_chain() {
    let a = app().await;
    let hook = webhook_support::start("team").await;
    let config = webhook_configuration("team-check", &hook);
    let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    assert_eq!(a.post(path, config).await.status, StatusCode::CREATED);
    let denied = a.post(CMS, cm("no-team", json!({}))).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.body);
    assert!(
        denied.body["message"]
            .as_str()
            .unwrap()
            .contains("missing required label(s): team")
    );
    assert_eq!(
        a.post(CMS, cm("team", json!({"team": "x"}))).await.status,
        StatusCode::CREATED
    );
    assert_eq!(hook.calls.load(std::sync::atomic::Ordering::Relaxed), 2);

    // An unreachable webhook fails closed under failurePolicy Fail...
    drop(hook);
    let r = a.post(CMS, cm("down", json!({"team": "x"}))).await;
    assert_status(&r, 500, "InternalError");
    // ...and deleting the configuration removes it from the chain.
    assert_eq!(
        a.call("DELETE", &format!("{path}/team-check"), "", None)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        a.post(CMS, cm("free", json!({}))).await.status,
        StatusCode::CREATED
    );
}

/// kopf's webhook serves a self-signed `CA:TRUE` certificate and gives it as
/// its own `caBundle`: Go's verifier (kube-apiserver) accepts that, so this
/// server's must too.
#[tokio::test]
async fn a_webhook_serving_its_own_ca_certificate_is_called() {
    let a = app().await;
    let hook = webhook_support::start_self_signed_ca("team").await;
    let config = webhook_configuration("kopf-like", &hook);
    let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    assert_eq!(a.post(path, config).await.status, StatusCode::CREATED);
    let denied = a.post(CMS, cm("no-team", json!({}))).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.body);
    assert_eq!(
        a.post(CMS, cm("team", json!({"team": "x"}))).await.status,
        StatusCode::CREATED
    );
    assert_eq!(hook.calls.load(std::sync::atomic::Ordering::Relaxed), 2);
}

/// A resource added to the live registry is routed, stored, listed,
/// watched, rendered as a Table, and listed by discovery and OpenAPI at
/// once, without a restart, and served to kubectl; removing it stops all of
/// that.
#[tokio::test]
async fn a_resource_registered_at_runtime_is_served_everywhere() {
    let app = app().await;
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    assert_eq!(app.get(path).await.status, StatusCode::NOT_FOUND);
    let widgets = ResourceInfo::new("example.com", "v1", "widgets", "Widget", true)
        .short_names(&["wd"])
        .columns(vec![
            Column::name(),
            Column::with_path(
                "Size",
                "integer",
                "The size",
                ColumnPath::parse(".spec.size").unwrap(),
            ),
            Column::age(),
        ]);
    app.state.resources.insert(Resource::new(widgets));

    let groups = app.get("/apis").await.body;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com"),
        "{groups}"
    );
    let list = app.get("/apis/example.com/v1").await.body;
    assert_eq!(list["resources"][0]["name"], "widgets");
    assert_eq!(list["resources"][0]["shortNames"], json!(["wd"]));
    let aggregated_req = Request::builder()
        .uri("/apis")
        .header(
            header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .body(Body::empty())
        .unwrap();
    let aggregated = app.router.clone().oneshot(aggregated_req).await.unwrap();
    let aggregated: Value =
        serde_json::from_slice(&aggregated.into_body().collect().await.unwrap().to_bytes())
            .unwrap();
    let widget_group = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "example.com")
        .cloned()
        .unwrap_or_else(|| panic!("example.com not in aggregated discovery: {aggregated}"));
    assert_eq!(
        widget_group["versions"][0]["resources"][0]["responseKind"]["kind"],
        "Widget"
    );
    let openapi = app.get("/openapi/v3").await.body;
    assert!(
        openapi["paths"].get("apis/example.com/v1").is_some(),
        "{openapi}"
    );

    // A watch started before the create sees it.
    let watch_req = Request::builder()
        .uri(format!("{path}?watch=1"))
        .body(Body::empty())
        .unwrap();
    let watch = app.router.clone().oneshot(watch_req).await.unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    let mut events = watch.into_body();

    let created = app
        .post(
            path,
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w1"}, "spec": {"size": 3}}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert!(created.body["metadata"]["uid"].is_string());
    // No protobuf schema for a kind registered at runtime: 415, as upstream.
    let proto = app
        .call(
            "POST",
            path,
            "application/vnd.kubernetes.protobuf",
            Some(json!({})),
        )
        .await;
    assert_eq!(
        proto.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        proto.body
    );
    let listed = app.get(path).await.body;
    assert_eq!(listed["kind"], "WidgetList");
    assert_eq!(listed["items"][0]["spec"]["size"], 3);

    let table_req = Request::builder()
        .uri(path)
        .header(
            header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .body(Body::empty())
        .unwrap();
    let table = app.router.clone().oneshot(table_req).await.unwrap();
    let table: Value =
        serde_json::from_slice(&table.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(table["rows"][0]["cells"][0], "w1");
    assert_eq!(table["rows"][0]["cells"][1], 3);
    assert_eq!(table["columnDefinitions"][1]["name"], "Size");

    let mut seen = String::new();
    while !seen.contains('\n') {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), events.frame())
            .await
            .expect("a watch event")
            .expect("an open stream")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
    let event: Value = serde_json::from_str(seen.lines().next().unwrap()).unwrap();
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "w1");

    // kubectl sees it in discovery, over real HTTP, with no restart.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = app.router.clone();
    let server = tokio::spawn(async move { axum::serve(listener, served).await });
    let kubectl = tokio::process::Command::new("kubectl")
        .args([
            "--server",
            &format!("http://{addr}"),
            "--cache-dir",
            app._dir.path().join("kubectl-cache").to_str().unwrap(),
            "api-resources",
            "--api-group=example.com",
        ])
        .output()
        .await
        .expect("kubectl runs");
    let out = String::from_utf8_lossy(&kubectl.stdout);
    assert!(
        kubectl.status.success(),
        "{}",
        String::from_utf8_lossy(&kubectl.stderr)
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("widgets"))
        .unwrap_or_default();
    assert!(
        row.contains("wd") && row.contains("example.com/v1") && row.contains("Widget"),
        "{out}"
    );
    let got = tokio::process::Command::new("kubectl")
        .args([
            "--server",
            &format!("http://{addr}"),
            "--cache-dir",
            app._dir.path().join("kubectl-cache").to_str().unwrap(),
            "get",
            "wd",
            "-n",
            "default",
        ])
        .output()
        .await
        .expect("kubectl runs");
    let out = String::from_utf8_lossy(&got.stdout);
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(
        out.contains("SIZE") && out.contains("w1") && out.contains('3'),
        "{out}"
    );
    server.abort();

    // Removed: not routed, not discovered.
    assert!(
        app.state
            .resources
            .remove("example.com", "v1", "widgets")
            .is_some()
    );
    assert_eq!(app.get(path).await.status, StatusCode::NOT_FOUND);
    let groups = app.get("/apis").await.body;
    assert!(
        !groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com")
    );
}
