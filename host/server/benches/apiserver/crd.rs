//! The custom resource scenario (issue 10): creates of a custom resource
//! with a structural schema, with and without 10 CEL rules, against
//! ConfigMap creates on the same server, in interleaved rounds; and the
//! cost of one CEL rule evaluation, in-process.

use crate::harness::{
    Api, Error, MakeRequest, Row, closed_loop, configmap, find, merge, met, send,
};
use bytes::Bytes;
use hyper::{Method, StatusCode, Uri};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasm_apiserver_api::schema::Schema;

const NS: &str = "bench-crd";
const ROUNDS: usize = 3;
const RULES: usize = 10;
const CEL_ITERATIONS: usize = 20_000;
/// A custom resource with a schema keeps this share of ConfigMap creates/s.
const TARGET_SCHEMA_RATIO: f64 = 0.8;

const CONFIGMAP: &str = "crd: create ConfigMap";
const PLAIN: &str = "crd: create custom resource (schema)";
const CEL: &str = "crd: create custom resource (schema + 10 CEL rules)";
const CEL_EVAL: &str = "crd: one CEL rule evaluation (in-process)";

fn schema(rules: bool) -> Value {
    let mut spec = json!({
        "type": "object",
        "required": ["replicas", "image"],
        "properties": {
            "replicas": {"type": "integer", "minimum": 0, "maximum": 100},
            "image": {"type": "string", "maxLength": 200},
            "tier": {"type": "string", "enum": ["web", "db", "cache"]},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                      "items": {"type": "object", "properties": {"port": {"type": "integer"}, "name": {"type": "string"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    });
    if rules {
        let list: Vec<Value> = [
            "self.replicas <= 50",
            "self.image.size() > 0",
            "!self.image.startsWith('bad/')",
            "self.tier in ['web', 'db', 'cache']",
            "self.ports.all(p, p.port > 0 && p.port < 65536)",
            "self.ports.size() <= 8",
            "self.image.contains(':')",
            "self.replicas >= 0",
            "!has(self.labels) || self.labels.size() <= 16",
            "self.image.lowerAscii() == self.image",
        ]
        .iter()
        .take(RULES)
        .map(|r| json!({"rule": r}))
        .collect();
        spec["x-kubernetes-validations"] = json!(list);
    }
    json!({"type": "object", "properties": {"spec": spec}})
}

fn definition(plural: &str, kind: &str, rules: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.bench.example")},
        "spec": {"group": "bench.example", "scope": "Namespaced",
                 "names": {"plural": plural, "kind": kind},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": schema(rules)}}]},
    })
}

fn object(kind: &str, name: &str, seq: u64) -> Value {
    json!({"apiVersion": "bench.example/v1", "kind": kind, "metadata": {"name": name},
           "spec": {"replicas": seq % 50, "image": "registry.example/app:v1", "tier": "web",
                    "ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}],
                    "labels": {"team": "bench"}}})
}

async fn post(api: &Api, path: &str, body: &Value) -> Result<(StatusCode, Bytes), Error> {
    let mut conn = api.connect().await?;
    let req = api.request(
        Method::POST,
        path.parse()?,
        Some(("application/json", Bytes::from(body.to_string()))),
    );
    send(&mut conn, req).await
}

async fn setup(api: &Api) -> Result<(), Error> {
    api.create_namespaces(&[NS]).await?;
    for (plural, kind, rules) in [("plains", "Plain", false), ("celled", "Celled", true)] {
        let (status, body) = post(
            api,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &definition(plural, kind, rules),
        )
        .await?;
        if status != StatusCode::CREATED {
            return Err(
                format!("CRD {plural}: {status} {}", String::from_utf8_lossy(&body)).into(),
            );
        }
        let probe = format!("/apis/bench.example/v1/namespaces/{NS}/{plural}");
        let (status, body) = post(api, &probe, &object(kind, "probe", 1)).await?;
        if status != StatusCode::CREATED {
            return Err(format!(
                "custom resource {plural}: {status} {}",
                String::from_utf8_lossy(&body)
            )
            .into());
        }
    }
    Ok(())
}

async fn creates(
    api: &Api,
    scenario: &'static str,
    clients: usize,
    window: Duration,
    round: usize,
) -> Result<Row, Error> {
    let (path, kind) = match scenario {
        CONFIGMAP => (format!("/api/v1/namespaces/{NS}/configmaps"), ""),
        PLAIN => (
            format!("/apis/bench.example/v1/namespaces/{NS}/plains"),
            "Plain",
        ),
        _ => (
            format!("/apis/bench.example/v1/namespaces/{NS}/celled"),
            "Celled",
        ),
    };
    let uri: Uri = path.parse()?;
    let make: MakeRequest = Arc::new(move |api, w, i| {
        let name = format!("c-{round}-{w}-{i}");
        let body = if kind.is_empty() {
            configmap(&name, i)
        } else {
            Bytes::from(object(kind, &name, i).to_string())
        };
        api.request(Method::POST, uri.clone(), Some(("application/json", body)))
    });
    closed_loop(api, scenario, clients, window, StatusCode::CREATED, make).await
}

/// µs per rule: validation with the rules minus without, per rule.
fn cel_eval() -> Row {
    let obj = object("Celled", "x", 7);
    let (plain, celled) = (Schema::new(schema(false)), Schema::new(schema(true)));
    let time = |s: &Schema| {
        let start = Instant::now();
        for _ in 0..CEL_ITERATIONS {
            assert!(s.validate(&obj, None).is_empty());
        }
        start.elapsed()
    };
    let (_, _) = (time(&plain), time(&celled));
    let (a, b) = (time(&plain), time(&celled));
    let per_rule_us = b.saturating_sub(a).as_secs_f64() * 1e6 / (CEL_ITERATIONS * RULES) as f64;
    Row {
        scenario: CEL_EVAL.into(),
        clients: 1,
        ops: (CEL_ITERATIONS * RULES) as u64,
        errors: 0,
        seconds: b.saturating_sub(a).as_secs_f64(),
        latencies: Vec::new(),
        cpu: None,
        note: format!(
            "{per_rule_us:.2} µs per rule; schema validation alone {:.1} µs per object",
            a.as_secs_f64() * 1e6 / CEL_ITERATIONS as f64
        ),
    }
}

/// The scenario's rows: the three create rates (rounds interleaved and
/// merged) and the CEL evaluation cost.
pub(crate) async fn crd(api: &Api, clients: usize, window: Duration) -> Result<Vec<Row>, Error> {
    setup(api).await?;
    let mut merged: Vec<Row> = Vec::new();
    for round in 0..ROUNDS {
        for scenario in [CONFIGMAP, PLAIN, CEL] {
            let row = creates(api, scenario, clients, window / ROUNDS as u32, round).await?;
            match merged.iter_mut().find(|r| r.scenario == scenario) {
                Some(into) => merge(into, row),
                None => merged.push(row),
            }
        }
    }
    merged.push(cel_eval());
    Ok(merged)
}

pub(crate) fn print_targets(rows: &[Row]) {
    let rate = |s: &str| rows.iter().find(|r| r.scenario == s).map(Row::rate);
    if let (Some(cm), Some(plain), Some(cel)) = (rate(CONFIGMAP), rate(PLAIN), rate(CEL)) {
        let ratio = plain / cm;
        println!(
            "target custom resource with a schema >= {TARGET_SCHEMA_RATIO}x ConfigMap creates/s: {} ({ratio:.2}x: {plain:.0}/s vs {cm:.0}/s); with 10 CEL rules {:.2}x ({cel:.0}/s)",
            met(ratio >= TARGET_SCHEMA_RATIO),
            cel / cm
        );
    }
    if let Some(r) = find(rows, CEL_EVAL, 1) {
        println!("CEL: {}", r.note);
    }
}
