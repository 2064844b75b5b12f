//! The rbac scenario (issue 4): GETs with a bearer token through RBAC vs AlwaysAllow.

use crate::harness::{Api, Error, MakeRequest, Row, closed_loop, merge, met, send, serve_authz};
use hyper::header::{AUTHORIZATION, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;

/// Rounds the two authorization modes take turns in, each `BENCH_SECONDS / RBAC_ROUNDS` long.
pub(crate) const RBAC_ROUNDS: usize = 4;
/// The token-file line of the `rbac` scenario's user.
const RBAC_TOKEN_FILE: &str = "benchtoken,bench-user,u1,\"bench\"";
const RBAC_AUTHORIZATION: &str = "Bearer benchtoken";
const RBAC_USER: &str = "bench-user";
/// The ConfigMap (in `default`) the `rbac` scenario GETs.
const RBAC_OBJECT: &str = "rbac-target";
/// The most throughput RBAC may cost against AlwaysAllow.
const TARGET_RBAC_COST: f64 = 0.10;
const RBAC: &str = "RBAC";
const ALWAYS_ALLOW: &str = "AlwaysAllow";

fn rbac_scenario(mode: &str) -> String {
    format!("rbac: get ConfigMap, bearer token, {mode}")
}

/// Issue 4: GETs with a bearer token through RBAC vs AlwaysAllow, each on a
/// fresh server, `clients` keep-alive clients, the two modes taking turns in
/// [`RBAC_ROUNDS`] rounds. A GET with the token is checked to answer 200 on
/// both first, and one without it 403 under RBAC (anonymous has no binding).
pub(crate) async fn rbac(
    srv: &Handle,
    dir: &Path,
    clients: usize,
    window: Duration,
) -> Result<Vec<Row>, Error> {
    let uri: Uri = format!("/api/v1/namespaces/default/configmaps/{RBAC_OBJECT}").parse()?;
    let modes = [RBAC, ALWAYS_ALLOW];
    // (server, its address, status without the token)
    let mut servers = Vec::with_capacity(modes.len());
    for mode in modes {
        let store = dir.join(format!("rbac-{mode}.redb"));
        let viewer = (mode == RBAC).then_some(RBAC_USER);
        let server = srv
            .spawn(serve_authz(
                store,
                mode,
                RBAC_TOKEN_FILE,
                viewer,
                RBAC_OBJECT,
            ))
            .await??;
        let api = Api::new(server.addr);
        let mut conn = api.connect().await?;
        let mut req = api.request(Method::GET, uri.clone(), None);
        req.headers_mut()
            .insert(AUTHORIZATION, HeaderValue::from_static(RBAC_AUTHORIZATION));
        let (status, body) = send(&mut conn, req).await?;
        if status != StatusCode::OK {
            return Err(format!(
                "rbac {mode}: GET with the token: {status} {}",
                String::from_utf8_lossy(&body)
            )
            .into());
        }
        let (anonymous, _) = send(&mut conn, api.request(Method::GET, uri.clone(), None)).await?;
        if mode == RBAC && anonymous != StatusCode::FORBIDDEN {
            return Err(format!("rbac: GET without the token got {anonymous}, not 403").into());
        }
        servers.push((server, api, anonymous));
    }

    let slice = window / RBAC_ROUNDS as u32;
    let mut merged: Vec<Option<Row>> = modes.iter().map(|_| None).collect();
    for _ in 0..RBAC_ROUNDS {
        for ((_, api, _), (mode, slot)) in servers.iter().zip(modes.iter().zip(&mut merged)) {
            let uri = uri.clone();
            let make: MakeRequest = Arc::new(move |api, _, _| {
                let mut req = api.request(Method::GET, uri.clone(), None);
                req.headers_mut()
                    .insert(AUTHORIZATION, HeaderValue::from_static(RBAC_AUTHORIZATION));
                req
            });
            let row = closed_loop(
                api,
                &rbac_scenario(mode),
                clients,
                slice,
                StatusCode::OK,
                make,
            )
            .await?;
            match slot {
                Some(into) => merge(into, row),
                None => *slot = Some(row),
            }
        }
    }
    let mut rows = Vec::with_capacity(modes.len());
    for ((_, _, anonymous), row) in servers.iter().zip(merged) {
        let mut row = row.ok_or("no rbac row")?;
        row.latencies.sort_unstable();
        row.note = format!(
            "one ~200 B object; GET with the token: 200 OK, without: {anonymous}; \
             {RBAC_ROUNDS} interleaved rounds"
        );
        rows.push(row);
    }
    Ok(rows)
}

/// Issue 4: the throughput RBAC costs against AlwaysAllow.
pub(crate) fn print_targets(rows: &[Row]) {
    let by = |mode: &str| rows.iter().find(|r| r.scenario == rbac_scenario(mode));
    let (Some(rbac), Some(allow)) = (by(RBAC), by(ALWAYS_ALLOW)) else {
        return;
    };
    let cost = 1.0 - rbac.rate() / allow.rate().max(f64::MIN_POSITIVE);
    println!(
        "\nRBAC cost vs AlwaysAllow: {:.1}% fewer GETs/s (target ≤ {:.0}%): {} \
         ({:.0}/s vs {:.0}/s, {} clients)",
        cost * 100.0,
        TARGET_RBAC_COST * 100.0,
        met(cost <= TARGET_RBAC_COST),
        rbac.rate(),
        allow.rate(),
        rbac.clients
    );
    let cpu_us = |r: &Row| r.cpu.map(|c| c.server * 1e6 / r.rate().max(1.0));
    if let (Some(r), Some(a)) = (cpu_us(rbac), cpu_us(allow)) {
        println!(
            "server CPU per GET: RBAC {r:.1} µs, AlwaysAllow {a:.1} µs ({:+.1} µs)",
            r - a
        );
    }
}
