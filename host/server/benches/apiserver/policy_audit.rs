//! The policy-audit scenario (issue 35), on the embedded store:
//! * a full background audit of 10,000 ConfigMaps against 5 admission
//!   plugins (time, server CPU, objects/s), then an unchanged full pass
//!   (report bytes written: target 0);
//! * the p50/p99 of creates at 16 clients on a server whose audit is in a
//!   full pass against a twin server without the audit (target ≤ 1.1×),
//!   rounds interleaved (the order swapped every round); both servers'
//!   plugins are replaced before their round (the audited one's change
//!   starts its pass);
//! * a shadow version's cost on create p50 (target ≤ +5%): the same
//!   server with and without `spec.shadow` on one plugin, interleaved
//!   (the order swapped every round).
//!
//! Each comparison is judged by the median over rounds of the ratio of the
//! two rows of one round (run back to back): the store's growth and the
//! machine's drift between rounds cancel, and one noisy round of 3 s does
//! not decide. The ratio of the pooled rows is printed beside it.

use crate::harness::{
    Api, Error, MakeRequest, Row, Served, closed_loop, configmap, cpu_sample, cpu_since, find,
    mark, met, send,
};
use hyper::{Method, StatusCode, Uri};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use wasm_apiserver_plugins::RuntimeConfig;
use wasm_apiserver_registry::controllers::leader::Leadership;
use wasm_apiserver_registry::controllers::{Client, policy_audit};
use wasm_apiserver_storage::embedded::EmbeddedOptions;

const OBJECTS: usize = 10_000;
const CLIENTS: usize = 16;
/// Rounds of each comparison: even, as each swaps the order of the last.
const ROUNDS: usize = 6;
const NS: &str = "audit-bench";
const NS_CREATE: &str = "audit-create";
const PLUGINS: &str = "/apis/admission.wasm-apiserver.io/v1alpha1/admissionplugins";
pub(crate) const FULL: &str = "policy-audit: full pass, 10,000 objects x 5 plugins";
pub(crate) const UNCHANGED: &str = "policy-audit: unchanged full pass";
pub(crate) const QUIET: &str = "policy-audit: create, no audit";
pub(crate) const AUDITING: &str = "policy-audit: create, during a full audit";
pub(crate) const NO_SHADOW: &str = "policy-audit: create, no shadow";
pub(crate) const SHADOW: &str = "policy-audit: create, one plugin with a shadow";

fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/wasm32-wasip2/release")
}

/// The five plugins: three `require-labels` (one in Audit mode, which
/// every object fails) and two `allow-all`; `order` changes the spec
/// without changing any result; `shadow` adds a shadow version.
fn plugins(order: i32, shadow: bool) -> Vec<(String, Value)> {
    let spec = |file: &str, config: Value, mode: &str| {
        json!({
            "module": {"file": file},
            "phases": ["Validating"],
            "mode": mode,
            "order": order,
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "config": config,
        })
    };
    let mut out = vec![
        (
            "app".to_string(),
            spec("require_labels.wasm", json!({"labels": ["app"]}), "Deny"),
        ),
        (
            "tier".to_string(),
            spec("require_labels.wasm", json!({"labels": ["tier"]}), "Deny"),
        ),
        (
            "team".to_string(),
            spec("require_labels.wasm", json!({"labels": ["team"]}), "Audit"),
        ),
        (
            "allow-1".to_string(),
            spec("allow_all.wasm", json!({}), "Deny"),
        ),
        (
            "allow-2".to_string(),
            spec("allow_all.wasm", json!({}), "Deny"),
        ),
    ];
    if shadow {
        out[0].1["shadow"] = json!({"module": {"file": "require_labels.wasm"}});
    }
    out
}

async fn put_plugins(api: &Api, order: i32, shadow: bool, create: bool) -> Result<(), Error> {
    for (name, spec) in plugins(order, shadow) {
        let mut obj = json!({
            "apiVersion": "admission.wasm-apiserver.io/v1alpha1", "kind": "AdmissionPlugin",
            "metadata": {"name": name}, "spec": spec,
        });
        if create {
            api.create(PLUGINS, obj.to_string()).await?;
            continue;
        }
        let path = format!("{PLUGINS}/{name}");
        let (_, body) = send(
            &mut api.connect().await?,
            api.request(Method::GET, path.parse()?, None),
        )
        .await?;
        let cur: Value = serde_json::from_slice(&body)?;
        obj["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"].clone();
        let req = api.request(
            Method::PUT,
            path.parse()?,
            Some(("application/json", obj.to_string().into())),
        );
        let (status, body) = send(&mut api.connect().await?, req).await?;
        if status != StatusCode::OK {
            return Err(format!("PUT {name}: {status} {}", String::from_utf8_lossy(&body)).into());
        }
    }
    Ok(())
}

/// Waits until every plugin's status reports its current generation
/// loaded and Active.
async fn loaded(api: &Api) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (name, _) in plugins(0, false) {
        let path = format!("{PLUGINS}/{name}");
        loop {
            let (_, body) = send(
                &mut api.connect().await?,
                api.request(Method::GET, path.parse()?, None),
            )
            .await?;
            let p: Value = serde_json::from_slice(&body)?;
            if p["status"]["phase"] == "Active"
                && p["status"]["observedGeneration"] == p["metadata"]["generation"]
            {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{name} not loaded: {}", p["status"]).into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(())
}

/// A server with the five plugins and `OBJECTS` ConfigMaps stored.
async fn server(srv: &Handle, dir: &Path, name: &str) -> Result<(Served, Api), Error> {
    let config = RuntimeConfig {
        cache_dir: Some(dir.join("audit-cache")),
        ..RuntimeConfig::default()
    };
    let (served, _rt) = srv
        .spawn(crate::harness::serve_admission(
            dir.join(format!("{name}.redb")),
            plugin_dir(),
            config,
            EmbeddedOptions::default(),
        ))
        .await??;
    let api = Api::new(served.addr);
    api.create_namespaces(&[NS, NS_CREATE]).await?;
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let tasks: Vec<_> = (0..32)
        .map(|w| {
            let (api, path) = (Api::new(api.addr), path.clone());
            tokio::spawn(async move {
                for i in (w..OBJECTS).step_by(32) {
                    let body = String::from_utf8_lossy(&configmap(&format!("o-{i}"), i as u64))
                        .into_owned();
                    api.create(&path, body).await?;
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    put_plugins(&api, 0, false, true).await?;
    Ok((served, api))
}

fn start_audit(srv: &Handle, served: &Served) -> Arc<policy_audit::Stats> {
    let state = served.state.clone();
    let _guard = srv.enter();
    policy_audit::spawn(
        Client::new(state.objects.clone(), policy_audit::NAME, None),
        policy_audit::Config::default(),
        state.load.clone(),
        Leadership::always(),
        &state.controllers,
    )
}

/// Waits until `checks` reaches `at_least` and the audit queue is empty.
/// The queue depth is read from `/metrics` only once the checks have
/// stopped moving: a request would make the server busy, and the audit
/// slows to its busy budget.
async fn drained(api: &Api, stats: &policy_audit::Stats, at_least: u64) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last = u64::MAX;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let checks = stats.checks.load(Ordering::Relaxed);
        if checks < at_least || std::mem::replace(&mut last, checks) != checks {
            continue;
        }
        let (_, body) = send(
            &mut api.connect().await?,
            api.request(Method::GET, "/metrics".parse()?, None),
        )
        .await?;
        let text = String::from_utf8_lossy(&body);
        if text
            .lines()
            .any(|l| l == "workqueue_depth{name=\"policy_audit\"} 0")
        {
            return Ok(());
        }
    }
    Err(format!(
        "audit never drained ({} checks)",
        stats.checks.load(Ordering::Relaxed)
    )
    .into())
}

/// Rounds of each comparison: [`ROUNDS`], or `BENCH_AUDIT_ROUNDS` (for a
/// quicker look, as under a profiler).
fn rounds() -> usize {
    std::env::var("BENCH_AUDIT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS)
}

async fn creates(api: &Api, scenario: &str, window: Duration, round: usize) -> Result<Row, Error> {
    let uri: Uri = format!("/api/v1/namespaces/{NS_CREATE}/configmaps").parse()?;
    let tag = scenario.len();
    let make: MakeRequest = Arc::new(move |api, w, i| {
        api.request(
            Method::POST,
            uri.clone(),
            Some((
                "application/json",
                configmap(&format!("c-{tag}-{round}-{w}-{i}"), i),
            )),
        )
    });
    mark("start", scenario, round);
    let row = closed_loop(api, scenario, CLIENTS, window, StatusCode::CREATED, make).await;
    mark("end", scenario, round);
    row
}

pub(crate) async fn policy_audit(
    srv: &Handle,
    dir: &Path,
    window: Duration,
) -> Result<Vec<Row>, Error> {
    let mut rows = Vec::new();
    // The audited server, and its twin without the audit.
    let (audited, api) = server(srv, dir, "audited").await?;
    let (quiet, qapi) = server(srv, dir, "quiet").await?;

    // A full pass from a cold start: every object, five plugins each.
    let cpu = cpu_sample();
    let t = Instant::now();
    let stats = start_audit(srv, &audited);
    drained(&api, &stats, OBJECTS as u64).await?;
    let took = t.elapsed();
    let writes = stats.report_writes.load(Ordering::Relaxed);
    rows.push(Row {
        scenario: FULL.into(),
        clients: 0,
        ops: stats.checks.load(Ordering::Relaxed),
        errors: 0,
        seconds: took.as_secs_f64(),
        latencies: Vec::new(),
        cpu: cpu_since(&cpu),
        note: format!("{writes} reports written (default budget: half a core when idle)"),
    });

    // An unchanged full pass: a changed spec, the same results.
    let (checks, bytes) = (
        stats.checks.load(Ordering::Relaxed),
        stats.report_bytes.load(Ordering::Relaxed),
    );
    let passes = stats.full_passes.load(Ordering::Relaxed);
    let t = Instant::now();
    put_plugins(&api, 1, false, false).await?;
    while stats.full_passes.load(Ordering::Relaxed) == passes {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drained(&api, &stats, checks + OBJECTS as u64).await?;
    rows.push(Row {
        scenario: UNCHANGED.into(),
        clients: 0,
        ops: stats.checks.load(Ordering::Relaxed) - checks,
        errors: 0,
        seconds: t.elapsed().as_secs_f64(),
        latencies: Vec::new(),
        cpu: None,
        note: format!(
            "{} report bytes written",
            stats.report_bytes.load(Ordering::Relaxed) - bytes
        ),
    });

    // Creates while a full pass runs, against the twin without the audit;
    // each round swaps which goes first, so that neither always runs on
    // the later (and larger) store.
    let (mut audit_p50, mut audit_p99, mut shadow_p50) = (Vec::new(), Vec::new(), Vec::new());
    // Each round's p50s, audited/twin in ms, in the order they ran.
    let mut audit_rounds = Vec::new();
    for (order, round) in (2..).zip(0..rounds()) {
        // The twin's plugins are replaced too, as the audited server's are
        // to start its pass: both rounds run on freshly loaded plugins.
        let twin_round = || async {
            put_plugins(&qapi, order, false, false).await?;
            loaded(&qapi).await?;
            creates(&qapi, QUIET, window, round).await
        };
        let mut twin = None;
        if round % 2 == 0 {
            twin = Some(twin_round().await?);
        }
        put_plugins(&api, order, false, false).await?;
        let passes = stats.full_passes.load(Ordering::Relaxed);
        while stats.full_passes.load(Ordering::Relaxed) == passes {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let row = creates(&api, AUDITING, window, round).await?;
        // The audited server is idle from here on, and its audit would take
        // half a core (its idle budget) from the twin's next round and the
        // shadow rounds: let it finish first.
        drained(&api, &stats, 0).await?;
        if round % 2 == 1 {
            twin = Some(twin_round().await?);
        }
        let twin = twin.ok_or("no twin round")?;
        audit_p50.push(quantile(&row, 0.5) / quantile(&twin, 0.5));
        audit_rounds.push(format!(
            "{}{:.2}/{:.2}",
            if round % 2 == 0 {
                "twin first "
            } else {
                "audited first "
            },
            quantile(&row, 0.5) / 1e3,
            quantile(&twin, 0.5) / 1e3
        ));
        audit_p99.push(quantile(&row, 0.99) / quantile(&twin, 0.99));
        rows.extend([twin, row]);
    }

    // A shadow version's cost, on the twin: with and without, the order
    // swapped every round (the store grows with every create).
    for round in 0..rounds() {
        let mut pair = [None, None];
        for shadow in [round % 2 == 1, round % 2 == 0] {
            put_plugins(
                &qapi,
                10 * (round as i32 + 1) + shadow as i32,
                shadow,
                false,
            )
            .await?;
            let scenario = if shadow { SHADOW } else { NO_SHADOW };
            let row = creates(&qapi, scenario, window, round).await?;
            pair[shadow as usize] = Some(quantile(&row, 0.5));
            rows.push(row);
        }
        if let [Some(without), Some(with)] = pair {
            shadow_p50.push(with / without);
        }
    }
    let mut rows = merge_rounds(rows);
    if let Some(row) = rows.iter_mut().find(|r| r.scenario == AUDITING) {
        row.note = paired(&[("p50", &audit_p50), ("p99", &audit_p99)]);
        row.note.push_str(&format!(
            "; p50 ms audited/twin: {}",
            audit_rounds.join(", ")
        ));
    }
    // How many of the shadowed plugin's requests its shadow saw.
    if let Some(admission) = &quiet.state.objects.admission
        && let Some(row) = rows.iter_mut().find(|r| r.scenario == SHADOW)
    {
        let stats = admission.shadow_stats("app");
        row.note = stats
            .totals()
            .iter()
            .map(|(outcome, n)| format!("{outcome} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        row.note.push_str(" (shadow calls over all rounds); ");
        row.note.push_str(&paired(&[("p50", &shadow_p50)]));
    }
    Ok(rows)
}

/// A row's `q` quantile, in microseconds.
fn quantile(row: &Row, q: f64) -> f64 {
    let mut l = row.latencies.clone();
    l.sort_unstable();
    if l.is_empty() {
        return f64::NAN;
    }
    let i = ((q * l.len() as f64).ceil() as usize).clamp(1, l.len()) - 1;
    f64::from(l[i])
}

fn median(ratios: &[f64]) -> f64 {
    let mut v = ratios.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A note with the median of each quantile's per-round ratios (read back
/// by [`print_targets`]) and the rounds' own.
fn paired(ratios: &[(&str, &[f64])]) -> String {
    ratios
        .iter()
        .map(|(name, r)| {
            let rounds = r.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>();
            format!(
                "paired {name} x{:.3} (rounds {})",
                median(r),
                rounds.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The median paired ratio of quantile `name` in `note`.
fn paired_ratio(note: &str, name: &str) -> f64 {
    note.split(&format!("paired {name} x"))
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

/// One row per scenario (rounds merged).
fn merge_rounds(rows: Vec<Row>) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for r in rows {
        match out.iter_mut().find(|o| o.scenario == r.scenario) {
            Some(o) => {
                crate::harness::merge(o, r);
                o.latencies.sort_unstable();
            }
            None => out.push(r),
        }
    }
    out
}

pub(crate) fn print_targets(rows: &[Row]) {
    let Some(full) = find(rows, FULL, 0) else {
        return;
    };
    println!("issue 35 (background audit, reports, shadows):");
    let cpu = full.cpu.map_or(f64::NAN, |c| c.server);
    println!(
        "  full audit of {} objects x 5 plugins: {:.1} s, {:.0} objects/s, server {:.2} cores ({:.2} ms CPU per object) (no target)",
        full.ops,
        full.seconds,
        full.rate(),
        cpu,
        cpu * full.seconds * 1e3 / full.ops.max(1) as f64
    );
    if let Some(u) = find(rows, UNCHANGED, 0) {
        let bytes: u64 = u
            .note
            .split_whitespace()
            .next()
            .and_then(|b| b.parse().ok())
            .unwrap_or(u64::MAX);
        println!(
            "  report bytes written by an unchanged full pass = 0: {bytes} {}",
            met(bytes == 0)
        );
    }
    let p = |s: &str, q: f64| {
        find(rows, s, CLIENTS)
            .and_then(|r| r.percentile(q))
            .map_or(f64::NAN, |d| d.as_secs_f64())
    };
    let note = |s: &str| find(rows, s, CLIENTS).map_or("", |r| r.note.as_str());
    for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
        let pooled = p(AUDITING, q) / p(QUIET, q);
        let ratio = paired_ratio(note(AUDITING), name);
        println!(
            "  create {name} during a full audit / without <= 1.1x: median of {} paired rounds {ratio:.2}x {} (all rounds pooled: {:.2} / {:.2} ms = {pooled:.2}x)",
            rounds(),
            met(ratio <= 1.1),
            p(AUDITING, q) * 1e3,
            p(QUIET, q) * 1e3,
        );
    }
    let pooled = p(SHADOW, 0.5) / p(NO_SHADOW, 0.5);
    let ratio = paired_ratio(note(SHADOW), "p50");
    println!(
        "  create p50 with a shadow / without <= 1.05x: median of {} paired rounds {ratio:.2}x {} (all rounds pooled: {:.2} / {:.2} ms = {pooled:.2}x)",
        rounds(),
        met(ratio <= 1.05),
        p(SHADOW, 0.5) * 1e3,
        p(NO_SHADOW, 0.5) * 1e3,
    );
}
