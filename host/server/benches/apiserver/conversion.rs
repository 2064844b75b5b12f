//! The conversion scenario (issue 10): a list of 1,000 custom resources
//! read in their storage version (no conversion), in the other served
//! version without a handler (`conversion: None`, only `apiVersion`
//! changes), and in the other version through the first-party wasm
//! converter (`widget-converter`, one sandboxed call for the whole list),
//! the three variants taking turns; one fresh server with the plugin
//! runtime.

use crate::harness::{Api, Error, Row, met, send, serve_admission};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use wasm_apiserver_plugins::RuntimeConfig;
use wasm_apiserver_storage::embedded::EmbeddedOptions;

const NS: &str = "bench-conversion";
const OBJECTS: usize = 1000;
const ROUNDS: usize = 15;
/// A list of 1,000 objects converted through the wasm handler, at most.
const TARGET_MS: f64 = 30.0;

const STORAGE: &str = "conversion: list 1,000 in the storage version";
const NONE: &str = "conversion: list 1,000 in the other version, conversion None";
const WASM: &str = "conversion: list 1,000 in the other version, wasm converter";

fn definition(plural: &str, kind: &str) -> Value {
    let int = json!({"type": "integer"});
    let string = json!({"type": "string"});
    let spec = |properties: Value| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": properties}}}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.bench.example")},
        "spec": {"group": "bench.example", "scope": "Namespaced",
                 "names": {"plural": plural, "kind": kind},
                 "versions": [
                     {"name": "v1alpha1", "served": true, "storage": false,
                      "schema": spec(json!({"size": int, "color": string, "legacyId": string}))},
                     {"name": "v1", "served": true, "storage": true,
                      "schema": spec(json!({
                          "dimensions": {"type": "object", "properties": {"size": int}},
                          "appearance": {"type": "object", "properties": {"color": string, "finish": string}}}))},
                 ]},
    })
}

fn object(kind: &str, i: usize) -> String {
    json!({"apiVersion": "bench.example/v1", "kind": kind,
           "metadata": {"name": format!("w-{i:04}"), "labels": {"app": "bench"}},
           "spec": {"dimensions": {"size": i % 50}, "appearance": {"color": "red", "finish": "matte"}}})
    .to_string()
}

async fn list(api: &Api, path: &str, version: &str) -> Result<Duration, Error> {
    let mut conn = api.connect().await?;
    let start = Instant::now();
    let (status, body) = send(&mut conn, api.request(Method::GET, path.parse()?, None)).await?;
    let took = start.elapsed();
    if status != StatusCode::OK {
        return Err(format!("GET {path}: {status} {}", String::from_utf8_lossy(&body)).into());
    }
    let v: Value = serde_json::from_slice(&body)?;
    let items = v["items"].as_array().map_or(0, Vec::len);
    let converted = v["items"][0]["apiVersion"] == format!("bench.example/{version}");
    if items != OBJECTS || !converted {
        return Err(format!("GET {path}: {items} items, first {}", v["items"][0]).into());
    }
    Ok(took)
}

fn row(scenario: &str, mut samples: Vec<Duration>, note: String) -> Row {
    samples.sort();
    let seconds = samples.iter().map(Duration::as_secs_f64).sum();
    Row {
        scenario: scenario.into(),
        clients: 1,
        ops: samples.len() as u64,
        errors: 0,
        seconds,
        latencies: samples.iter().map(|d| d.as_micros() as u32).collect(),
        cpu: None,
        note,
    }
}

/// Where `scripts/build-plugins.sh` puts the first-party components.
fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/wasm32-wasip2/release")
}

pub(crate) async fn conversion(srv: &Handle, dir: &Path) -> Result<Vec<Row>, Error> {
    let server = srv
        .spawn(serve_admission(
            dir.join("conversion.redb"),
            plugin_dir(),
            RuntimeConfig {
                cache_dir: Some(dir.join("conversion-cache")),
                ..RuntimeConfig::default()
            },
            EmbeddedOptions::default(),
        ))
        .await??
        .0;
    let api = Api::new(server.addr);
    api.create_namespaces(&[NS]).await?;
    for (plural, kind) in [("converted", "Converted"), ("plain", "Plain")] {
        api.create(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            definition(plural, kind).to_string(),
        )
        .await?;
    }
    api.create(
        "/apis/apiextensions.wasm-apiserver.io/v1alpha1/resourcehandlers",
        json!({"apiVersion": "apiextensions.wasm-apiserver.io/v1alpha1", "kind": "ResourceHandler",
               "metadata": {"name": "converted"},
               "spec": {"module": {"file": "widget_converter.wasm"}, "operations": ["Convert"],
                        "resources": [{"group": "bench.example", "resource": "converted"}]}})
        .to_string(),
    )
    .await?;
    for (plural, kind) in [("converted", "Converted"), ("plain", "Plain")] {
        let path = format!("/apis/bench.example/v1/namespaces/{NS}/{plural}");
        for i in 0..OBJECTS {
            api.create(&path, object(kind, i)).await?;
        }
    }
    let path = |plural: &str, version: &str| {
        format!("/apis/bench.example/{version}/namespaces/{NS}/{plural}")
    };
    let (mut storage, mut none, mut wasm) = (Vec::new(), Vec::new(), Vec::new());
    // One warm-up round, then the variants take turns.
    for round in 0..=ROUNDS {
        let s = list(&api, &path("converted", "v1"), "v1").await?;
        let n = list(&api, &path("plain", "v1alpha1"), "v1alpha1").await?;
        let w = list(&api, &path("converted", "v1alpha1"), "v1alpha1").await?;
        if round > 0 {
            storage.push(s);
            none.push(n);
            wasm.push(w);
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    let (s, n, w) = (median(&mut storage), median(&mut none), median(&mut wasm));
    let per_object_us = (w - s).max(0.0) * 1e3 / OBJECTS as f64;
    Ok(vec![
        row(STORAGE, storage, format!("median {s:.1} ms")),
        row(NONE, none, format!("median {n:.1} ms")),
        row(
            WASM,
            wasm,
            format!(
                "median {w:.1} ms; conversion through the handler {per_object_us:.1} µs per object"
            ),
        ),
    ])
}

pub(crate) fn print_targets(rows: &[Row]) {
    let p50 = |s: &str| {
        rows.iter()
            .find(|r| r.scenario == s)
            .and_then(|r| r.percentile(0.5))
            .map(|d| d.as_secs_f64() * 1e3)
    };
    if let (Some(s), Some(n), Some(w)) = (p50(STORAGE), p50(NONE), p50(WASM)) {
        println!(
            "target a list of 1,000 objects converted by the wasm handler <= {TARGET_MS} ms: {} ({w:.1} ms; {:.2}x the storage-version list's {s:.1} ms, {:.2}x conversion None's {n:.1} ms)",
            met(w <= TARGET_MS),
            w / s,
            w / n
        );
    }
}
