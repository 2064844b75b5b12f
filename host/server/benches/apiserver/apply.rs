//! The server-side apply scenario (issue 12): for a ConfigMap and a
//! Deployment, PUT with a one-field change against server-side apply with
//! a one-field change and with no change, in interleaved rounds; and the
//! bytes of `managedFields` an applied object carries.

use crate::harness::{Api, Error, MakeRequest, Row, closed_loop, merge, met, send};
use bytes::Bytes;
use hyper::{Method, StatusCode, Uri};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const NS: &str = "bench-apply";
const ROUNDS: usize = 3;
/// SSA of a Deployment keeps this share of the PUT rate.
const TARGET_RATIO: f64 = 0.6;

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Put,
    Apply,
    ApplySame,
}

fn scenario(kind: &str, op: Op) -> String {
    let what = match op {
        Op::Put => "PUT (one-field change)",
        Op::Apply => "SSA (one-field change)",
        Op::ApplySame => "SSA (unchanged)",
    };
    format!("apply: {kind} {what}")
}

fn object(kind: &str, name: &str, n: u64) -> Value {
    if kind == "ConfigMap" {
        return json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"app": "bench"}},
            "data": {"n": n.to_string(), "fixed": "value"}});
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"replicas": n % 5 + 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 8080}], "env": [{"name": "MODE", "value": "bench"}]}]}}}})
}

fn path(kind: &str) -> String {
    if kind == "ConfigMap" {
        format!("/api/v1/namespaces/{NS}/configmaps")
    } else {
        format!("/apis/apps/v1/namespaces/{NS}/deployments")
    }
}

async fn run(
    api: &Api,
    kind: &'static str,
    op: Op,
    clients: usize,
    window: Duration,
) -> Result<Row, Error> {
    let base = path(kind);
    let make: MakeRequest = Arc::new(move |api, w, i| {
        let name = format!("a-{w}");
        // The PUTs' manager takes the fields it changes; the applier, as a
        // controller does, forces them back.
        let query = match op {
            Op::Put => "fieldManager=bench-put",
            _ => "fieldManager=bench&force=true",
        };
        let uri: Uri = format!("{base}/{name}?{query}").parse().expect("uri");
        let n = if op == Op::ApplySame { 0 } else { i + 1 };
        let body = Bytes::from(object(kind, &name, n).to_string());
        match op {
            Op::Put => api.request(Method::PUT, uri, Some(("application/json", body))),
            _ => api.request(
                Method::PATCH,
                uri,
                Some(("application/apply-patch+yaml", body)),
            ),
        }
    });
    closed_loop(
        api,
        &scenario(kind, op),
        clients,
        window,
        StatusCode::OK,
        make,
    )
    .await
}

/// Bytes of `managedFields` on an applied object.
async fn managed_bytes(api: &Api, kind: &str) -> Result<usize, Error> {
    let req = api.request(Method::GET, format!("{}/a-0", path(kind)).parse()?, None);
    let (status, body) = send(&mut api.connect().await?, req).await?;
    if status != StatusCode::OK {
        return Err(format!("GET a-0: {status}").into());
    }
    let obj: Value = serde_json::from_slice(&body)?;
    Ok(obj["metadata"]["managedFields"].to_string().len())
}

pub(crate) async fn apply(api: &Api, clients: usize, window: Duration) -> Result<Vec<Row>, Error> {
    api.create_namespaces(&[NS]).await?;
    for kind in ["ConfigMap", "Deployment"] {
        for w in 0..clients {
            let name = format!("a-{w}");
            let uri: Uri = format!("{}/{name}?fieldManager=bench", path(kind)).parse()?;
            let body = Bytes::from(object(kind, &name, 0).to_string());
            let req = api.request(
                Method::PATCH,
                uri,
                Some(("application/apply-patch+yaml", body)),
            );
            let (status, body) = send(&mut api.connect().await?, req).await?;
            if !status.is_success() {
                return Err(format!(
                    "apply {kind} {name}: {status} {}",
                    String::from_utf8_lossy(&body)
                )
                .into());
            }
        }
    }
    let slice = window / (ROUNDS as u32 * 3);
    let mut merged: Vec<Row> = Vec::new();
    for _ in 0..ROUNDS {
        for kind in ["ConfigMap", "Deployment"] {
            for op in [Op::Put, Op::Apply, Op::ApplySame] {
                let row = run(api, kind, op, clients, slice).await?;
                match merged.iter_mut().find(|r| r.scenario == row.scenario) {
                    Some(into) => merge(into, row),
                    None => merged.push(row),
                }
            }
        }
    }
    for kind in ["ConfigMap", "Deployment"] {
        // The PUTs made their own Update entry; measure after one more apply.
        let bytes = managed_bytes(api, kind).await?;
        if let Some(row) = merged
            .iter_mut()
            .find(|r| r.scenario == scenario(kind, Op::Apply))
        {
            row.note = format!("managedFields {bytes} bytes per object (Apply + Update entries)");
        }
    }
    Ok(merged)
}

pub(crate) fn print_targets(rows: &[Row]) {
    let rate = |kind: &str, op| {
        rows.iter()
            .find(|r| r.scenario == scenario(kind, op))
            .map(Row::rate)
    };
    if let (Some(put), Some(ssa)) = (rate("Deployment", Op::Put), rate("Deployment", Op::Apply)) {
        let ratio = ssa / put;
        println!(
            "target SSA of a Deployment >= {TARGET_RATIO}x the PUT rate: {} ({ratio:.2}x: {ssa:.0}/s vs {put:.0}/s)",
            met(ratio >= TARGET_RATIO)
        );
    }
    if let (Some(put), Some(ssa)) = (rate("ConfigMap", Op::Put), rate("ConfigMap", Op::Apply)) {
        println!(
            "apply: ConfigMap SSA / PUT: {:.2}x ({ssa:.0}/s vs {put:.0}/s)",
            ssa / put
        );
    }
    for r in rows
        .iter()
        .filter(|r| r.scenario.starts_with("apply:") && !r.note.is_empty())
    {
        println!("{}: {}", r.scenario, r.note);
    }
}
