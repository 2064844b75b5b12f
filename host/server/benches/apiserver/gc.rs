//! The controllers scenario (issue 32), on the embedded store: with the
//! controllers running (as the server runs them, on the registry),
//! 1,000 owner ConfigMaps with 10 dependents each; the collector's graph
//! size per object (an estimate from its maps' sizes and capacities); the
//! server's CPU while the 11,000 objects sit idle; the time from deleting
//! an owner to its last dependent gone (owners deleted one at a time);
//! and ConfigMap creates/s on a server with the controllers on against one
//! with them off, in interleaved rounds.

use crate::harness::{
    Api, Error, MakeRequest, Row, Served, closed_loop, configmap, cpu_sample, cpu_since, merge,
    met, send, serve_admission,
};
use futures::StreamExt;
use hyper::{Method, StatusCode, Uri};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use wasm_apiserver_plugins::RuntimeConfig;
use wasm_apiserver_registry::controllers::{
    Client, bootstrap, certificates, gc, leader::Leadership, policy_audit, serviceaccounts,
};
use wasm_apiserver_storage::embedded::EmbeddedOptions;
use wasm_apiserver_storage::{EventKind, WatchItem};

const OWNERS: usize = 1000;
const DEPENDENTS: usize = 10;
/// Owners deleted (one at a time) for the latency percentiles.
const DELETED: usize = 200;
const IDLE: Duration = Duration::from_secs(10);
const ROUNDS: usize = 3;
const NS: &str = "default";

/// A server on a fresh store with the admission chain (no plugins), as the
/// server runs, with every native singleton controller (the garbage
/// collector, service accounts, root CA, certificates, bootstrap signer,
/// the background policy audit) when `controllers`.
async fn start(
    srv: &Handle,
    path: &Path,
    controllers: bool,
) -> Result<(Served, Option<gc::GraphSize>), Error> {
    let path = path.to_path_buf();
    srv.spawn(async move {
        let plugins = path.with_extension("plugins");
        std::fs::create_dir_all(&plugins)?;
        let (served, _runtime) = serve_admission(
            path.clone(),
            plugins,
            RuntimeConfig::default(),
            EmbeddedOptions::default(),
        )
        .await?;
        let size = match controllers {
            false => None,
            true => {
                // Every native singleton controller, as the server runs them.
                let state = &served.state;
                let client = |name: &str| Client::new(state.objects.clone(), name, None);
                let pki = wasm_apiserver::tls::ensure(
                    path.parent().expect("the store's directory"),
                    &["127.0.0.1".to_string()],
                )?;
                serviceaccounts::spawn(
                    client(serviceaccounts::SA_CONTROLLER),
                    client(serviceaccounts::ROOT_CA_PUBLISHER),
                    pki.ca_pem.clone(),
                    Leadership::always(),
                    &state.controllers,
                );
                certificates::spawn(
                    client(certificates::NAME),
                    Some(Arc::new(certificates::Authority {
                        cert_pem: pki.ca_pem,
                        key_pem: pki.ca_key_pem,
                        duration: Duration::from_secs(3600),
                    })),
                    true,
                    Leadership::always(),
                    &state.controllers,
                );
                bootstrap::spawn(
                    client(bootstrap::NAME),
                    Leadership::always(),
                    &state.controllers,
                );
                policy_audit::spawn(
                    client(policy_audit::NAME),
                    policy_audit::Config::default(),
                    state.load.clone(),
                    Leadership::always(),
                    &state.controllers,
                );
                Some(gc::spawn(
                    client(gc::NAME),
                    Leadership::always(),
                    &state.controllers,
                ))
            }
        };
        Ok::<_, Error>((served, size))
    })
    .await?
}

async fn create_all(api: &Api, bodies: Vec<String>) -> Result<Vec<serde_json::Value>, Error> {
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let chunks: Vec<Vec<(usize, String)>> = {
        let mut c: Vec<Vec<(usize, String)>> = (0..32).map(|_| Vec::new()).collect();
        for (i, b) in bodies.into_iter().enumerate() {
            c[i % 32].push((i, b));
        }
        c
    };
    let mut tasks = Vec::new();
    for chunk in chunks {
        let (api, path) = (Api::new(api.addr), path.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for (i, b) in chunk {
                out.push((i, api.create(&path, b).await?));
            }
            Ok::<_, Error>(out)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, v)| v).collect())
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

pub(crate) async fn gc(
    srv: &Handle,
    dir: &Path,
    clients: usize,
    window: Duration,
) -> Result<Vec<Row>, Error> {
    let (served, size) = start(srv, &dir.join("gc.redb"), true).await?;
    let size = size.expect("the collector runs");
    let api = Api::new(served.addr);

    // Owners, then their dependents.
    let owners = create_all(
        &api,
        (0..OWNERS)
            .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("o-{i}")}}).to_string())
            .collect(),
    )
    .await?;
    let mut deps = Vec::new();
    for (i, o) in owners.iter().enumerate() {
        for j in 0..DEPENDENTS {
            deps.push(
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("d-{i}-{j}"), "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"],
                    "uid": o["metadata"]["uid"]}]},
                "data": {"payload": "0123456789abcdef0123456789abcdef"}})
                .to_string(),
            );
        }
    }
    create_all(&api, deps).await?;
    // Let the collector check every new dependent's owner once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let objects = OWNERS * (DEPENDENTS + 1);
    let graph = size.bytes();
    println!(
        "gc: graph ~{graph} bytes for {objects} objects ({} with owners): {:.0} B per object, {:.0} B per dependent",
        OWNERS * DEPENDENTS,
        graph as f64 / objects as f64,
        graph as f64 / (OWNERS * DEPENDENTS) as f64
    );

    // Idle.
    let before = cpu_sample();
    tokio::time::sleep(IDLE).await;
    let idle = cpu_since(&before).map_or(f64::NAN, |c| c.server);
    println!(
        "gc: server CPU idle with {objects} objects and the collector on: {:.4} cores",
        idle
    );

    // Deletion latency: watch the namespace's deletions, delete owners one
    // at a time, and time each owner's last dependent.
    let gone: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
    let storage = served.state.objects.storage.clone();
    let rev = storage.current_revision().await?;
    let mut stream = storage
        .watch(&format!("/registry/core/configmaps/{NS}/"), rev)
        .await?;
    let seen = gone.clone();
    let watcher = srv.spawn(async move {
        while let Some(Ok(item)) = stream.next().await {
            if let WatchItem::Event(ev) = item
                && ev.kind == EventKind::Deleted
            {
                let name = ev.kv.key.rsplit('/').next().unwrap_or_default().to_string();
                seen.lock().unwrap().insert(name, Instant::now());
            }
        }
    });
    let mut latencies = Vec::new();
    for i in 0..DELETED {
        let uri: Uri = format!("/api/v1/namespaces/{NS}/configmaps/o-{i}").parse()?;
        let start = Instant::now();
        let (status, body) = send(
            &mut api.connect().await?,
            api.request(Method::DELETE, uri, None),
        )
        .await?;
        if status != StatusCode::OK {
            return Err(
                format!("DELETE o-{i}: {status} {}", String::from_utf8_lossy(&body)).into(),
            );
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let last = loop {
            let done = {
                let g = gone.lock().unwrap();
                (0..DEPENDENTS)
                    .map(|j| g.get(&format!("d-{i}-{j}")).copied())
                    .collect::<Option<Vec<Instant>>>()
            };
            if let Some(times) = done {
                break times.into_iter().max().expect("ten");
            }
            if Instant::now() > deadline {
                return Err(format!("dependents of o-{i} not collected in 30 s").into());
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        latencies.push(last.saturating_duration_since(start));
    }
    watcher.abort();
    latencies.sort();
    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    println!(
        "gc: owner deleted -> last of its {DEPENDENTS} dependents gone ({DELETED} owners, one at a time): p50 {:.1} ms, p99 {:.1} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    drop(served);

    // Creates with the controllers on and off, interleaved.
    let mut rows: Vec<Row> = Vec::new();
    for round in 0..ROUNDS {
        for on in [true, false] {
            let (served, _size) =
                start(srv, &dir.join(format!("gc-create-{round}-{on}.redb")), on).await?;
            let api = Api::new(served.addr);
            let uri: Uri = format!("/api/v1/namespaces/{NS}/configmaps").parse()?;
            let make: MakeRequest = Arc::new(move |api, w, i| {
                api.request(
                    Method::POST,
                    uri.clone(),
                    Some(("application/json", configmap(&format!("c-{w}-{i}"), i))),
                )
            });
            let name = if on {
                "gc: create ConfigMap, controllers on"
            } else {
                "gc: create ConfigMap, controllers off"
            };
            let row = closed_loop(&api, name, clients, window, StatusCode::CREATED, make).await?;
            match rows.iter_mut().find(|r| r.scenario == name) {
                Some(r) => merge(r, row),
                None => rows.push(row),
            }
        }
    }
    for r in &mut rows {
        r.latencies.sort_unstable();
    }
    let mut notes = Row {
        scenario: "gc: owner deleted -> dependents gone".into(),
        clients: 1,
        ops: latencies.len() as u64,
        errors: 0,
        seconds: 0.0,
        latencies: latencies
            .iter()
            .map(|d| d.as_micros().min(u32::MAX as u128) as u32)
            .collect(),
        cpu: None,
        note: format!("graph {graph} B; idle server CPU {idle:.4} cores"),
    };
    notes.latencies.sort();
    rows.push(notes);
    Ok(rows)
}

/// Issue 32's targets.
pub(crate) fn print_targets(rows: &[Row]) {
    let Some(del) = rows
        .iter()
        .find(|r| r.scenario == "gc: owner deleted -> dependents gone")
    else {
        return;
    };
    println!("issue 32 (controllers):");
    let objects = (OWNERS * (DEPENDENTS + 1)) as f64;
    let graph: f64 = del
        .note
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN);
    let idle: f64 = del
        .note
        .split_whitespace()
        .rev()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN);
    println!(
        "  owner deleted -> last dependent gone: p50 {:.1} ms, p99 {:.1} ms (no target; 1,000 x 10)",
        del.percentile(0.5).unwrap_or_default().as_secs_f64() * 1e3,
        del.percentile(0.99).unwrap_or_default().as_secs_f64() * 1e3
    );
    println!(
        "  idle server CPU with {objects} objects <= 1% of a core: {:.2}% {}",
        idle * 100.0,
        met(idle <= 0.01)
    );
    let per = graph / objects;
    println!(
        "  graph bytes per object <= 200: {per:.0} {}",
        met(per <= 200.0)
    );
    if let (Some(on), Some(off)) = (
        rows.iter()
            .find(|r| r.scenario == "gc: create ConfigMap, controllers on"),
        rows.iter()
            .find(|r| r.scenario == "gc: create ConfigMap, controllers off"),
    ) {
        let ratio = on.rate() / off.rate();
        println!(
            "  creates/s controllers on / off >= 0.95: {:.0} / {:.0} = {ratio:.2} {}",
            on.rate(),
            off.rate(),
            met(ratio >= 0.95)
        );
    }
}
