//! The waPC host with real Kubewarden policies, built from Kubewarden's
//! published Rust SDK (`tests/kubewarden-policies/`, once per test run by
//! `scripts/build-kubewarden-policies.sh`), unchanged and unannotated.
//!
//! Covered: validation and rejection (message, default code), settings
//! validated at load, host capabilities refused with a clear error,
//! context-aware policies reading granted kinds from a fixture cluster (and
//! refused ungranted ones and over-budget reads), logging policies,
//! mutation as a JSON patch (and refused outside the mutating phase), a
//! fresh instance per call, containment of loops, memory hogs, traps,
//! guest errors, garbage and oversized answers (the runtime keeps serving), the
//! `io.kubewarden.metadata` section, the disk cache, and modules given in
//! the wrong format.

use crate::common;
use serde_json::{Value, json};

use common::{access, kubewarden_wasm, wasm};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use wasm_apiserver_plugins::{
    AdmissionPlugin, AdmissionRequest, Gvk, Gvr, Limits, Operation, PluginError, Runtime,
    RuntimeConfig, UserInfo,
};

/// A runtime with a compilation cache shared by this test binary, so each
/// policy is compiled once.
fn runtime() -> Runtime {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    let cache = CACHE.get_or_init(|| tempfile::tempdir().expect("cache dir"));
    Runtime::new(RuntimeConfig {
        max_instances: 32,
        cache_dir: Some(cache.path().to_owned()),
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_millis(300),
        max_memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

fn pod(name: &str, privileged: bool) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [
            {"name": "app", "image": "nginx"},
            {"name": "debug", "image": "busybox", "securityContext": {"privileged": privileged}},
        ]},
    })
}

fn request(operation: Operation, namespace: &str, object: Option<Value>) -> AdmissionRequest {
    AdmissionRequest {
        uid: "7a1c0e6e-0000-4000-8000-00000000000b".to_owned(),
        kind: Gvk {
            group: String::new(),
            version: "v1".to_owned(),
            kind: "Pod".to_owned(),
        },
        resource: Gvr {
            group: String::new(),
            version: "v1".to_owned(),
            resource: "pods".to_owned(),
        },
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: Some("p".to_owned()),
        namespace: Some(namespace.to_owned()),
        operation,
        user: UserInfo {
            username: "alice".to_owned(),
            groups: vec!["system:authenticated".to_owned()],
            ..UserInfo::default()
        },
        dry_run: false,
        object,
        old_object: None,
        options: Some(json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"})),
    }
}

fn create(object: Value) -> AdmissionRequest {
    request(Operation::Create, "default", Some(object))
}

async fn load(runtime: &Runtime, name: &str, settings: Value) -> AdmissionPlugin {
    runtime
        .load_kubewarden(
            name,
            &kubewarden_wasm(name),
            &settings.to_string(),
            limits(),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

async fn load_err(runtime: &Runtime, name: &str, settings: Value) -> PluginError {
    match runtime
        .load_kubewarden(
            name,
            &kubewarden_wasm(name),
            &settings.to_string(),
            limits(),
            None,
        )
        .await
    {
        Ok(_) => panic!("{name} loaded with settings {settings}"),
        Err(e) => e,
    }
}

/// After a hostile call: the same runtime still loads and runs policies.
async fn assert_still_serving(runtime: &Runtime) {
    let p = load(runtime, "kw_privileged_pods", json!({})).await;
    let r = p.validate(&create(pod("ok", false))).await.unwrap();
    assert!(r.allowed, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_pods_are_rejected_with_the_policys_message() {
    let rt = runtime();
    let p = load(
        &rt,
        "kw_privileged_pods",
        json!({"exempt_namespaces": ["kube-system"]}),
    )
    .await;
    assert_eq!(p.format(), "kubewarden");
    assert_eq!(
        p.kubewarden_mutating(),
        None,
        "cargo output carries no metadata"
    );

    let r = p.validate(&create(pod("ok", false))).await.unwrap();
    assert!(
        r.allowed && r.status.is_none() && r.patch.is_none(),
        "{r:?}"
    );

    let r = p.validate(&create(pod("bad", true))).await.unwrap();
    assert!(!r.allowed);
    let status = r.status.expect("a denial has a status");
    assert_eq!(
        status.message,
        "privileged containers are not allowed: debug"
    );
    // No code from the policy: 400, as the API server makes of a webhook's.
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));

    // Settings reach every call.
    let exempt = request(Operation::Create, "kube-system", Some(pod("bad", true)));
    assert!(p.validate(&exempt).await.unwrap().allowed);
    // A DELETE has no object: nothing to judge.
    let delete = request(Operation::Delete, "default", None);
    assert!(p.validate(&delete).await.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_validated_at_load() {
    let rt = runtime();
    // The policy's own validate_settings says what is wrong.
    match load_err(
        &rt,
        "kw_privileged_pods",
        json!({"exempt_namespaces": ["Bad_NS"]}),
    )
    .await
    {
        PluginError::Config { message, .. } => assert_eq!(
            message,
            r#"exempt_namespaces: "Bad_NS" is not a valid namespace name"#
        ),
        e => panic!("{e}"),
    }
    // Settings the SDK cannot decode: its error, as a configuration error.
    match load_err(&rt, "kw_privileged_pods", json!({"exempt": true})).await {
        PluginError::Config { message, .. } => assert!(message.contains("exempt"), "{message}"),
        e => panic!("{e}"),
    }
    // Settings are a JSON object.
    let wasm = kubewarden_wasm("kw_privileged_pods");
    let e = rt
        .load_kubewarden("p", &wasm, "[1]", limits(), None)
        .await
        .unwrap_err();
    assert!(matches!(e, PluginError::Config { .. }), "{e}");
    // No settings at all is `{}`.
    rt.load_kubewarden("p", &wasm, "", limits(), None)
        .await
        .unwrap();
    match load_err(&rt, "kw_add_label", json!({})).await {
        PluginError::Config { message, .. } => assert_eq!(message, "key is required"),
        e => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_capabilities_answer_a_clear_error() {
    let rt = runtime();
    let p = load(&rt, "kw_privileged_pods", json!({"probe_cluster": true})).await;
    let r = p.validate(&create(pod("ok", false))).await.unwrap();
    assert!(!r.allowed);
    let message = r.status.unwrap().message;
    assert!(
        message.contains(
            "host capability kubewarden/kubernetes/get_resource \
             is not available in wasm-apiserver"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutated_object_becomes_a_json_patch() {
    let rt = runtime();
    let p = load(
        &rt,
        "kw_add_label",
        json!({"key": "owner", "value": "team-a"}),
    )
    .await;
    let object = pod("p", false);
    let r = p.mutate(&create(object.clone())).await.unwrap();
    assert!(r.allowed, "{r:?}");
    let patch = r.patch.expect("a patch");
    let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["metadata"]["labels"], json!({"owner": "team-a"}));
    // Only the label changed.
    patched["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    assert_eq!(patched, object);

    // Nothing to change: no patch.
    let r = p
        .mutate(&create(
            json!({"metadata": {"name": "p", "labels": {"owner": "team-a"}}}),
        ))
        .await
        .unwrap();
    assert!(r.allowed && r.patch.is_none(), "{r:?}");

    // A mutation in the validating phase is refused, as policy-server
    // refuses a mutation by a policy not configured as mutating.
    let r = p.validate(&create(object)).await.unwrap();
    assert!(!r.allowed);
    let message = r.status.unwrap().message;
    assert!(message.contains("not allow mutations"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_gets_a_fresh_instance() {
    let rt = runtime();
    let p = load(&rt, "kw_hostile", json!({"mode": "count"})).await;
    let calls = (0..8).map(|_| {
        let p = p.clone();
        tokio::spawn(async move { p.validate(&create(pod("p", false))).await })
    });
    for call in futures_join(calls).await {
        let r = call.unwrap();
        assert_eq!(r.status.unwrap().message, "calls: 1");
    }
    for _ in 0..3 {
        let r = p.validate(&create(pod("p", false))).await.unwrap();
        assert_eq!(r.status.unwrap().message, "calls: 1");
    }
    // Load (protocol_version, validate_settings) and 11 calls, each its own instance.
    assert_eq!(p.prepared_calls(), (0, 13));
}

/// Awaits every task.
async fn futures_join<T>(tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_policy_times_out_within_the_limit() {
    let rt = runtime();
    let p = load(&rt, "kw_hostile", json!({"mode": "loop"})).await;
    let start = Instant::now();
    let e = p.validate(&create(pod("p", false))).await.unwrap_err();
    let elapsed = start.elapsed();
    assert!(matches!(e, PluginError::Timeout { .. }), "{e}");
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
        "{elapsed:?}"
    );
    assert_still_serving(&rt).await;
    assert!(
        rt.metrics_text().contains(r#"error="timeout""#),
        "{}",
        rt.metrics_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_policies_are_contained() {
    let rt = runtime();
    let hostile = |mode: &str| {
        let rt = rt.clone();
        let mode = mode.to_owned();
        async move {
            let p = load(&rt, "kw_hostile", json!({ "mode": mode })).await;
            p.validate(&create(pod("p", false))).await.unwrap_err()
        }
    };
    let e = hostile("memory").await;
    assert!(
        matches!(e, PluginError::MemoryExceeded { limit, .. } if limit == 32 << 20),
        "{e}"
    );
    let e = hostile("trap").await;
    match &e {
        PluginError::Trap { message, .. } => {
            assert!(message.contains("kw-hostile was told to trap"), "{message}")
        }
        e => panic!("{e}"),
    }
    let e = hostile("garbage").await;
    assert!(matches!(e, PluginError::InvalidOutput { .. }), "{e}");
    let e = hostile("huge").await;
    assert!(
        matches!(e, PluginError::OutputTooLarge { size, limit, .. } if size > 4 << 20 && limit == 1 << 20),
        "{e}"
    );
    assert_still_serving(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policys_error_is_a_plugin_error_not_a_denial() {
    let rt = runtime();
    // An object the policy cannot read as a Pod is its own rejection…
    let p = load(&rt, "kw_privileged_pods", json!({})).await;
    let r = p
        .validate(&create(json!({"spec": {"containers": "nope"}})))
        .await
        .unwrap();
    let status = r.status.expect("a rejection");
    assert!(
        status.message.starts_with("not a valid Pod"),
        "{}",
        status.message
    );
    assert_eq!(status.code, 400);
    // …while an error answered through `__guest_error` fails the call,
    // for the chain's failurePolicy to handle.
    let p = load(&rt, "kw_hostile", json!({"mode": "error"})).await;
    match p.validate(&create(pod("p", false))).await.unwrap_err() {
        PluginError::GuestError { message, .. } => {
            assert_eq!(message, "kw-hostile was told to fail")
        }
        e => panic!("{e}"),
    }
}

/// `wasm` with a custom section appended (valid anywhere after the header).
fn with_custom_section(mut wasm: Vec<u8>, name: &str, data: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(data);
    wasm.push(0);
    leb128(body.len(), &mut wasm);
    wasm.extend(body);
    wasm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubewarden_metadata_is_read_but_not_required() {
    let rt = runtime();
    let wasm = kubewarden_wasm("kw_add_label");
    let annotated = with_custom_section(
        wasm.clone(),
        "io.kubewarden.metadata",
        br#"{"protocolVersion":"v1","rules":[],"mutating":true,"executionMode":"kubewarden-wapc"}"#,
    );
    let p = rt
        .load_kubewarden("annotated", &annotated, r#"{"key":"k"}"#, limits(), None)
        .await
        .unwrap();
    assert_eq!(p.kubewarden_mutating(), Some(true));
    assert!(
        p.mutate(&create(pod("p", false)))
            .await
            .unwrap()
            .patch
            .is_some()
    );

    let opa = with_custom_section(
        wasm,
        "io.kubewarden.metadata",
        br#"{"protocolVersion":"v1","executionMode":"opa"}"#,
    );
    let e = rt
        .load_kubewarden("opa", &opa, r#"{"key":"k"}"#, limits(), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, PluginError::Compile { message, .. } if message.contains("executionMode \"opa\"")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modules_in_the_wrong_format_are_refused_clearly() {
    let rt = runtime();
    let policy = kubewarden_wasm("kw_privileged_pods");
    let e = rt
        .load_admission("p", &policy, "", limits())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("format: kubewarden"), "{e}");

    let component = wasm("deny_privileged");
    let e = rt
        .load_kubewarden("c", &component, "", limits(), None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("format: component"), "{e}");

    let e = rt
        .load_kubewarden("g", b"\0asm\x01\0\0\0garbage", "", limits(), None)
        .await
        .unwrap_err();
    assert!(matches!(e, PluginError::Compile { .. }), "{e}");

    // A core module that is not a waPC guest.
    let empty = b"\0asm\x01\0\0\0";
    let e = rt
        .load_kubewarden("e", empty, "", limits(), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, PluginError::WrongWorld { message, .. } if message.contains("__guest_call")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_runtime_loads_policies_from_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = || RuntimeConfig {
        cache_dir: Some(dir.path().to_owned()),
        max_instances: 8,
        ..RuntimeConfig::default()
    };
    let wasm = kubewarden_wasm("kw_privileged_pods");
    let first = Runtime::new(config()).unwrap();
    first
        .load_kubewarden("p", &wasm, "", limits(), None)
        .await
        .unwrap();
    assert_eq!(first.cache_stats().hits, 0);
    let second = Runtime::new(config()).unwrap();
    let p = second
        .load_kubewarden("p", &wasm, "", limits(), None)
        .await
        .unwrap();
    assert_eq!(second.cache_stats().hits, 1, "{:?}", second.cache_stats());
    assert!(!p.validate(&create(pod("bad", true))).await.unwrap().allowed);
}

fn service(name: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"app": app}, "ports": [{"port": 80}]}})
}

fn service_request(svc: Value) -> AdmissionRequest {
    let mut r = create(svc);
    r.kind.kind = "Service".to_owned();
    r.resource.resource = "services".to_owned();
    r.name = r
        .object
        .as_ref()
        .and_then(|o| o["metadata"]["name"].as_str().map(String::from));
    r
}

async fn load_with(
    rt: &Runtime,
    name: &str,
    cluster: wasm_apiserver_plugins::ClusterAccess,
) -> AdmissionPlugin {
    rt.load_kubewarden(name, &kubewarden_wasm(name), "{}", limits(), Some(cluster))
        .await
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_aware_policies_read_only_what_they_are_granted() {
    let rt = runtime();
    let stored = vec![service("web", "web"), service("db", "db")];
    // Granted: a second Service selecting `app=web` is refused, another
    // selector passes.
    let p = load_with(
        &rt,
        "kw_unique_selector",
        access(stored.clone(), &[("v1", "Service")], 64, 1 << 20),
    )
    .await;
    let r = p
        .validate(&service_request(service("web-2", "web")))
        .await
        .unwrap();
    assert!(!r.allowed);
    assert_eq!(
        r.status.unwrap().message,
        "service \"web\" already selects these pods"
    );
    let r = p
        .validate(&service_request(service("cache", "cache")))
        .await
        .unwrap();
    assert!(r.allowed, "{r:?}");
    // Not granted: the read fails with an error naming the resource, and
    // the policy answers as it would under policy-server.
    let p = load_with(
        &rt,
        "kw_unique_selector",
        access(stored.clone(), &[("v1", "Secret")], 64, 1 << 20),
    )
    .await;
    let r = p
        .validate(&service_request(service("web-2", "web")))
        .await
        .unwrap();
    let message = r.status.unwrap().message;
    assert!(
        message.contains("reading v1 Service is not granted: it is not in the plugin's spec.contextAwareResources"),
        "{message}"
    );
    // Budgets: no reads left, or too many bytes.
    let p = load_with(
        &rt,
        "kw_unique_selector",
        access(stored.clone(), &[("v1", "Service")], 0, 1 << 20),
    )
    .await;
    let message = p
        .validate(&service_request(service("x", "web")))
        .await
        .unwrap()
        .status
        .unwrap()
        .message;
    assert!(
        message.contains("more than 0 cluster reads in one evaluation"),
        "{message}"
    );
    let p = load_with(
        &rt,
        "kw_unique_selector",
        access(stored, &[("v1", "Service")], 64, 100),
    )
    .await;
    let message = p
        .validate(&service_request(service("x", "web")))
        .await
        .unwrap()
        .status
        .unwrap()
        .message;
    assert!(message.contains("more than 100 bytes"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_reads_the_namespace_and_mutates_the_pod() {
    let rt = runtime();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "default", "labels": {"team": "blue"}}});
    let p = load_with(
        &rt,
        "kw_namespace_team",
        access(vec![ns], &[("v1", "Namespace")], 64, 1 << 20),
    )
    .await;
    let r = p.mutate(&create(pod("p", false))).await.unwrap();
    assert!(r.allowed, "{r:?}");
    let patch: json_patch::Patch = serde_json::from_value(r.patch.expect("a patch")).unwrap();
    let mut object = pod("p", false);
    json_patch::patch(&mut object, &patch).unwrap();
    assert_eq!(object["metadata"]["labels"]["team"], "blue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_that_log_run_instead_of_trapping() {
    let rt = runtime();
    // Logging needs no grant and no cluster access at all.
    let p = load(&rt, "kw_logging", json!({})).await;
    for _ in 0..3 {
        let r = p.validate(&create(pod("p", false))).await.unwrap();
        assert!(r.allowed, "{r:?}");
    }
}
