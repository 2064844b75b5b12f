//! A small benchmark of the plugin runtime with the real `require-labels`
//! component: cold compile, load from the disk cache, and the cost of one
//! call (fresh instance + `validate`), printed as a table; then the same
//! check (no privileged containers in a Pod) as our `deny-privileged`
//! component and as the Kubewarden policy `kw_privileged_pods` (waPC),
//! both instantiated for every call (no prepared instances).
//!
//! Run with `cargo bench -p wasm-apiserver-plugins` (build the guests first
//! with `scripts/build-plugins.sh` and `scripts/build-kubewarden-policies.sh`).
//! `BENCH_CALLS` sets the number of calls; `BENCH_PREPARED=N` the runtime's
//! prepared instances per plugin (0: every call instantiates, for profiling
//! instantiation); `BENCH_PLUGIN=allow_all` runs the first part with the
//! no-op fixture instead of `require_labels` (the host's share of a call).

use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use wasm_apiserver_plugins::{
    AdmissionPlugin, AdmissionRequest, Gvk, Gvr, Limits, Operation, Runtime, RuntimeConfig,
    UserInfo,
};

const CONFIG: &str = r#"{"labels":["team"],"denyNamePattern":"^forbidden-"}"#;

fn request() -> AdmissionRequest {
    AdmissionRequest {
        uid: "bench".to_owned(),
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
        name: Some("web".to_owned()),
        namespace: Some("default".to_owned()),
        operation: Operation::Create,
        user: UserInfo {
            username: "alice".to_owned(),
            ..UserInfo::default()
        },
        dry_run: false,
        object: Some(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "default", "labels": {"team": "a"}},
            "data": {"k": "v"}
        })),
        old_object: None,
        options: None,
    }
}

/// The same request for a Pod without privileged containers.
fn pod_request() -> AdmissionRequest {
    AdmissionRequest {
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
        object: Some(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "labels": {"team": "a"}},
            "spec": {"containers": [
                {"name": "app", "image": "nginx", "securityContext": {"privileged": false}},
                {"name": "sidecar", "image": "envoy"}
            ]}
        })),
        ..request()
    }
}

fn read_guest(relative: &str, script: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/{script} first", path.display()))
}

/// Calls `validate` `calls` times after a warm-up: mean, p50 and p99.
async fn time_calls(
    plugin: &AdmissionPlugin,
    req: &AdmissionRequest,
    calls: usize,
) -> (Duration, Duration, Duration) {
    for _ in 0..100 {
        plugin.validate(req).await.expect("warm-up");
    }
    let mut samples = Vec::with_capacity(calls);
    let total = Instant::now();
    for _ in 0..calls {
        let start = Instant::now();
        let response = plugin.validate(req).await.expect("validate");
        samples.push(start.elapsed());
        assert!(response.allowed, "{response:?}");
    }
    let mean = total.elapsed() / calls as u32;
    samples.sort();
    let pct = |p: f64| samples[((samples.len() - 1) as f64 * p) as usize];
    (mean, pct(0.5), pct(0.99))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `BENCH_PLUGIN=allow_all` times the no-op fixture instead: the host's
    // own share of a call.
    let name = std::env::var("BENCH_PLUGIN").unwrap_or_else(|_| "require_labels".to_owned());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../plugins/target/wasm32-wasip2/release/{name}.wasm"
    ));
    let wasm = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/build-plugins.sh first",
            path.display()
        )
    });
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5000);
    let cache = tempfile::tempdir().expect("tempdir");
    let defaults = RuntimeConfig::default();
    let config = RuntimeConfig {
        cache_dir: Some(cache.path().to_owned()),
        prepared_instances: std::env::var("BENCH_PREPARED")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(defaults.prepared_instances),
        ..defaults
    };

    let cold_runtime = Runtime::new(config.clone()).expect("runtime");
    let start = Instant::now();
    cold_runtime
        .load_admission("require-labels", &wasm, CONFIG, Limits::default())
        .await
        .expect("cold load");
    let cold = start.elapsed();

    let mut cached = Vec::new();
    let mut plugin = None;
    for _ in 0..5 {
        let runtime = Runtime::new(config.clone()).expect("runtime");
        let start = Instant::now();
        let loaded = runtime
            .load_admission("require-labels", &wasm, CONFIG, Limits::default())
            .await
            .expect("cached load");
        cached.push(start.elapsed());
        assert!(runtime.cache_stats().hits >= 1);
        plugin = Some((runtime, loaded));
    }
    cached.sort();
    let (_runtime, plugin) = plugin.expect("a plugin");

    let req = request();
    for _ in 0..100 {
        plugin.validate(&req).await.expect("warm-up");
    }
    let mut samples = Vec::with_capacity(calls);
    let total = Instant::now();
    for _ in 0..calls {
        let start = Instant::now();
        let response = plugin.validate(&req).await.expect("validate");
        samples.push(start.elapsed());
        assert!(response.allowed);
    }
    let total = total.elapsed();
    samples.sort();
    let pct = |p: f64| samples[((samples.len() - 1) as f64 * p) as usize];

    println!("{name} ({} bytes), {calls} calls", wasm.len());
    println!("{:<44} {:>12}", "measure", "value");
    println!(
        "{:<44} {:>12}",
        "cold compile + load (incl. check-config)",
        ms(cold)
    );
    println!(
        "{:<44} {:>12}",
        "cached load, median of 5 (new Runtime)",
        ms(cached[2])
    );
    println!(
        "{:<44} {:>12}",
        "call (instantiate + validate), mean",
        us(total / calls as u32)
    );
    println!("{:<44} {:>12}", "call, p50", us(pct(0.5)));
    println!("{:<44} {:>12}", "call, p99", us(pct(0.99)));

    same_check_two_formats(calls).await;
}

/// `deny-privileged` (component) vs `kw_privileged_pods` (Kubewarden),
/// each instantiated for every call.
async fn same_check_two_formats(calls: usize) {
    let component = read_guest(
        "plugins/target/wasm32-wasip2/release/deny_privileged.wasm",
        "build-plugins.sh",
    );
    let policy = read_guest(
        "tests/kubewarden-policies/target/wasm32-wasip1/release/kw_privileged_pods.wasm",
        "build-kubewarden-policies.sh",
    );
    let runtime = Runtime::new(RuntimeConfig {
        prepared_instances: 0,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let start = Instant::now();
    let c = runtime
        .load_admission("deny-privileged", &component, "", Limits::default())
        .await
        .expect("component");
    let c_compile = start.elapsed();
    let start = Instant::now();
    let k = runtime
        .load_kubewarden("kw-privileged-pods", &policy, "{}", Limits::default(), None)
        .await
        .expect("kubewarden policy");
    let k_compile = start.elapsed();
    let req = pod_request();
    let (c_mean, c_p50, c_p99) = time_calls(&c, &req, calls).await;
    let (k_mean, k_p50, k_p99) = time_calls(&k, &req, calls).await;

    println!();
    println!("no privileged containers in a Pod, {calls} calls, a fresh instance each");
    println!(
        "{:<30} {:>12} {:>12} {:>12} {:>12}",
        "format", "cold load", "mean", "p50", "p99"
    );
    for (name, size, compile, mean, p50, p99) in [
        (
            "component (deny-privileged)",
            component.len(),
            c_compile,
            c_mean,
            c_p50,
            c_p99,
        ),
        (
            "kubewarden (waPC)",
            policy.len(),
            k_compile,
            k_mean,
            k_p50,
            k_p99,
        ),
    ] {
        println!(
            "{:<30} {:>12} {:>12} {:>12} {:>12}   ({size} bytes)",
            name,
            ms(compile),
            us(mean),
            us(p50),
            us(p99)
        );
    }
}
