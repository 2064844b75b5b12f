//! The workload scenario (issue 11): Pod creates (upstream's defaulting and
//! validation on) against ConfigMap creates on the same server, in
//! interleaved rounds; the cost of defaulting + validation per Pod,
//! in-process; and the size and serve time of `/openapi/v3/api/v1`.

use crate::harness::{Api, Error, MakeRequest, Row, closed_loop, configmap, merge, met, send};
use bytes::Bytes;
use hyper::{Method, StatusCode, Uri};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasm_apiserver_api::builtin;
use wasm_apiserver_registry::Strategy;
use wasm_apiserver_registry::workloads::{Kind, Workloads};

const NS: &str = "bench-workloads";
const ROUNDS: usize = 3;
const ITERATIONS: usize = 20_000;
/// Pod creates keep this share of ConfigMap creates/s.
const TARGET_RATIO: f64 = 0.7;

const CONFIGMAP: &str = "workloads: create ConfigMap";
const POD: &str = "workloads: create Pod (defaults + validation)";
const POD_COST: &str = "workloads: Pod defaulting + validation (in-process)";
const OPENAPI: &str = "workloads: GET /openapi/v3/api/v1";

/// A Pod as `kubectl run` makes it, with one port and an env var.
fn pod(name: &str, seq: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"run": "bench"}},
           "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                    "ports": [{"containerPort": 8080}],
                                    "env": [{"name": "SEQ", "value": seq.to_string()}]}]}})
}

async fn creates(
    api: &Api,
    scenario: &'static str,
    clients: usize,
    window: Duration,
    round: usize,
) -> Result<Row, Error> {
    let resource = if scenario == POD {
        "pods"
    } else {
        "configmaps"
    };
    let uri: Uri = format!("/api/v1/namespaces/{NS}/{resource}").parse()?;
    let make: MakeRequest = Arc::new(move |api, w, i| {
        let name = format!("w-{round}-{w}-{i}");
        let body = if scenario == POD {
            Bytes::from(pod(&name, i).to_string())
        } else {
            configmap(&name, i)
        };
        api.request(Method::POST, uri.clone(), Some(("application/json", body)))
    });
    closed_loop(api, scenario, clients, window, StatusCode::CREATED, make).await
}

/// µs per Pod of the strategy's defaulting and validation.
fn pod_cost() -> Row {
    let info = builtin::resources()
        .into_iter()
        .find(|r| r.group.is_empty() && r.plural == "pods")
        .expect("pods are built in");
    let strategy = Workloads(Kind::Pod);
    let user = Default::default();
    let start = Instant::now();
    for i in 0..ITERATIONS {
        let mut p = pod("p", i as u64);
        strategy.prepare_for_create(&mut p, &Default::default());
        strategy.canonicalize(&mut p);
        strategy
            .validate(&info, Some(NS), &p, None, &user)
            .expect("a valid pod");
    }
    let took = start.elapsed();
    Row {
        scenario: POD_COST.into(),
        clients: 1,
        ops: ITERATIONS as u64,
        errors: 0,
        seconds: took.as_secs_f64(),
        latencies: Vec::new(),
        cpu: None,
        note: format!(
            "{:.2} µs per Pod (object construction included)",
            took.as_secs_f64() * 1e6 / ITERATIONS as f64
        ),
    }
}

async fn openapi(api: &Api) -> Result<Row, Error> {
    let mut samples = Vec::new();
    let mut size = 0;
    for _ in 0..20 {
        let mut conn = api.connect().await?;
        let start = Instant::now();
        let (status, body) = send(
            &mut conn,
            api.request(Method::GET, "/openapi/v3/api/v1".parse()?, None),
        )
        .await?;
        samples.push(start.elapsed());
        if status != StatusCode::OK {
            return Err(format!("GET /openapi/v3/api/v1: {status}").into());
        }
        size = body.len();
    }
    // The first request builds the document (then it is cached per registry
    // snapshot); the whole v2 document for comparison.
    let first = samples[0];
    let mut conn = api.connect().await?;
    let start = Instant::now();
    let (_, v2) = send(
        &mut conn,
        api.request(Method::GET, "/openapi/v2".parse()?, None),
    )
    .await?;
    let v2_took = start.elapsed();
    samples.sort();
    Ok(Row {
        scenario: OPENAPI.into(),
        clients: 1,
        ops: samples.len() as u64,
        errors: 0,
        seconds: samples.iter().map(Duration::as_secs_f64).sum(),
        latencies: samples.iter().map(|d| d.as_micros() as u32).collect(),
        cpu: None,
        note: format!(
            "{size} bytes, first (building) {:.1} ms; /openapi/v2 {} bytes in {:.1} ms",
            first.as_secs_f64() * 1e3,
            v2.len(),
            v2_took.as_secs_f64() * 1e3
        ),
    })
}

pub(crate) async fn workloads(
    api: &Api,
    clients: usize,
    window: Duration,
) -> Result<Vec<Row>, Error> {
    api.create_namespaces(&[NS]).await?;
    let mut merged: Vec<Row> = Vec::new();
    for round in 0..ROUNDS {
        for scenario in [CONFIGMAP, POD] {
            let row = creates(api, scenario, clients, window / ROUNDS as u32, round).await?;
            match merged.iter_mut().find(|r| r.scenario == scenario) {
                Some(into) => merge(into, row),
                None => merged.push(row),
            }
        }
    }
    merged.push(pod_cost());
    merged.push(openapi(api).await?);
    Ok(merged)
}

pub(crate) fn print_targets(rows: &[Row]) {
    let rate = |s: &str| rows.iter().find(|r| r.scenario == s).map(Row::rate);
    if let (Some(cm), Some(pod)) = (rate(CONFIGMAP), rate(POD)) {
        let ratio = pod / cm;
        println!(
            "target Pod creates >= {TARGET_RATIO}x ConfigMap creates/s: {} ({ratio:.2}x: {pod:.0}/s vs {cm:.0}/s)",
            met(ratio >= TARGET_RATIO)
        );
    }
    for s in [POD_COST, OPENAPI] {
        if let Some(r) = rows.iter().find(|r| r.scenario == s) {
            println!("{s}: {}", r.note);
        }
    }
}
