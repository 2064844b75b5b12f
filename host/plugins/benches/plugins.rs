//! A small benchmark of the plugin runtime with the real `require-labels`
//! component: cold compile, load from the disk cache, and the cost of one
//! call (fresh instance + `validate`), printed as a table.
//!
//! Run with `cargo bench -p wasm-apiserver-plugins` (build the guests first
//! with `scripts/build-plugins.sh`). `BENCH_CALLS` sets the number of calls.

use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use wasm_apiserver_plugins::{
    AdmissionRequest, Gvk, Gvr, Limits, Operation, Runtime, RuntimeConfig, UserInfo,
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

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins/target/wasm32-wasip2/release/require_labels.wasm");
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
    let config = RuntimeConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..RuntimeConfig::default()
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

    println!("require-labels ({} bytes), {calls} calls", wasm.len());
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
}
