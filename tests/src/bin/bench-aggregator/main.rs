//! `bench-aggregator`: what the aggregation layer's proxy costs (issue 51).
//!
//! Starts the real `wasm-apiserver` (the harness's [`Server`]) and the real
//! `sample-apiserver` behind an APIService, then measures the same client
//! calling the extension two ways, interleaved round by round (the order
//! alternates each round):
//!
//! - **aggregated**: HTTPS to this server as the admin (client
//!   certificate), proxied to the extension;
//! - **direct**: HTTPS to the extension itself with the front-proxy client
//!   certificate and the admin in `X-Remote-User`/`X-Remote-Group`, which is
//!   what the proxy sends.
//!
//! Scenarios (`--only`, comma-separated or repeated): `get-seq` and
//! `list-seq` (one client, sequential: p50 per request, the added p50 is
//! the target), `get-16` and `list-16` (16 clients for `--seconds` each
//! round: throughput and its ratio), `watch` (one watch each way over the
//! same `--events` creates, written directly one at a time: per event the
//! time from the create's response to the event on each watch; the target
//! is the p99 of the aggregated watch's arrival minus the direct one's).
//! It prints a table and one `target NAME: VALUE (TARGET) met|missed` line
//! per target.
//!
//! Modules: [`client`] (one TLS HTTP/1.1 connection per client), [`setup`]
//! (the processes, the APIService, the endpoints), [`cpu`] (the processes'
//! CPU time, to show where a request's time goes).

mod client;
mod cpu;
mod setup;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use wasm_apiserver_e2e::Server;

use crate::client::{Conn, Endpoint};
use crate::cpu::{Pids, USER_HZ};

/// Where the GET's flunder and the LIST's 100 live.
const NAMESPACE: &str = "bench";
/// Where the watch's flunders are created.
const WATCH_NAMESPACE: &str = "bench-watch";
const LISTED: usize = 100;
const CLIENTS: usize = 16;
const RESOURCE: &str = "/apis/wardle.example.com/v1alpha1/namespaces";

const USAGE: &str = "\
usage: bench-aggregator [--seconds S] [--rounds N] [--requests N] [--events N] [--only SCENARIO,...]
  --seconds S    each throughput measurement, per variant and round (default 2)
  --rounds N     rounds; each runs every scenario aggregated and direct (default 4)
  --requests N   sequential requests per variant and round (default 300)
  --events N     watch events (default 10000)
  --only LIST    get-seq, list-seq, get-16, list-16, watch (default: all)";

const SCENARIOS: [&str; 5] = ["get-seq", "list-seq", "get-16", "list-16", "watch"];

struct Options {
    seconds: f64,
    rounds: usize,
    requests: usize,
    events: usize,
    only: Vec<String>,
}

impl Options {
    fn parse() -> anyhow::Result<Options> {
        let mut o = Options {
            seconds: 2.0,
            rounds: 4,
            requests: 300,
            events: 10_000,
            only: Vec::new(),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if arg == "--help" || arg == "-h" {
                println!("{USAGE}");
                std::process::exit(0);
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let value = match inline.or_else(|| args.next()) {
                Some(v) => v,
                None => bail!("{name} needs a value\n{USAGE}"),
            };
            let bad = |e: &dyn std::fmt::Display| anyhow::anyhow!("{name} {value}: {e}");
            match name.as_str() {
                "--seconds" => o.seconds = value.parse().map_err(|e| bad(&e))?,
                "--rounds" => o.rounds = value.parse().map_err(|e| bad(&e))?,
                "--requests" => o.requests = value.parse().map_err(|e| bad(&e))?,
                "--events" => o.events = value.parse().map_err(|e| bad(&e))?,
                "--only" => {
                    for s in value.split(',').filter(|s| !s.is_empty()) {
                        if !SCENARIOS.contains(&s) {
                            bail!("--only: unknown scenario {s:?}\n{USAGE}");
                        }
                        o.only.push(s.to_string());
                    }
                }
                _ => bail!("unknown flag {name}\n{USAGE}"),
            }
        }
        if o.rounds == 0 || o.requests == 0 || o.seconds <= 0.0 {
            bail!("--rounds, --requests and --seconds must be positive");
        }
        Ok(o)
    }

    fn runs(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == scenario)
    }
}

/// The two ways to the extension; index into per-variant arrays.
const VARIANTS: [&str; 2] = ["aggregated", "direct"];

fn main() -> anyhow::Result<()> {
    let options = Options::parse()?;
    let (server_bin, sample_bin) = setup::binaries()?;
    let dir = tempfile::Builder::new()
        .prefix("bench-aggregator-")
        .tempdir()?;
    let server = Server::start_binary(server_bin.clone(), &[]);
    let ext = setup::start_extension(&sample_bin, &server, dir.path())?;
    setup::register(&server, &ext)?;
    let (aggregated, direct) = setup::endpoints(&server, &ext)?;
    println!(
        "server {} ({}), extension {} on :{}, {} cores",
        server_bin.display(),
        profile(&server_bin),
        sample_bin.display(),
        ext.port,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let runtime = tokio::runtime::Runtime::new()?;
    let pids = Pids::find(ext.pid());
    let result = runtime.block_on(run(&options, &pids, [aggregated, direct]));
    if result.is_err() {
        eprintln!("{}", server.diagnostics());
    }
    result
}

/// `release` or `debug`: the binary's profile dir.
fn profile(binary: &std::path::Path) -> String {
    binary
        .parent()
        .and_then(|p| p.file_name())
        .map_or("?".into(), |p| p.to_string_lossy().into_owned())
}

fn flunder(namespace: &str, name: &str) -> Vec<u8> {
    json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "aggregator"}},
        "spec": {"reference": format!("{namespace}/{name}")}})
    .to_string()
    .into_bytes()
}

/// What one scenario measured, per variant.
#[derive(Default)]
struct Measured {
    /// Sequential: every request's latency.
    latencies: [Vec<Duration>; 2],
    /// Throughput: requests done and the time they took.
    done: [(u64, Duration); 2],
    /// Throughput: CPU ticks of this server, the extension and the
    /// benchmark while it ran.
    cpu: [[u64; 3]; 2],
}

async fn run(options: &Options, pids: &Pids, endpoints: [Arc<Endpoint>; 2]) -> anyhow::Result<()> {
    let get_path = format!("{RESOURCE}/{NAMESPACE}/flunders/f-000");
    let list_path = format!("{RESOURCE}/{NAMESPACE}/flunders");
    let mut seq: [Conn; 2] = [endpoints[0].connect().await?, endpoints[1].connect().await?];
    let collection = format!("{RESOURCE}/{NAMESPACE}/flunders");
    for i in 0..LISTED {
        let body = flunder(NAMESPACE, &format!("f-{i:03}"));
        seq[1]
            .call(Method::POST, &collection, Some(body), StatusCode::CREATED)
            .await?;
    }
    let listed: Value = serde_json::from_slice(
        &seq[0]
            .call(Method::GET, &list_path, None, StatusCode::OK)
            .await?,
    )?;
    let items = listed["items"].as_array().map_or(0, Vec::len);
    if items != LISTED {
        bail!("the LIST through the aggregator has {items} items, not {LISTED}");
    }

    // Warm both paths (connection pools, the extension's authorization
    // cache) before anything counts.
    for conn in &mut seq {
        for _ in 0..50 {
            conn.timed_get(&get_path).await?;
        }
    }
    let mut pools: Vec<Vec<Conn>> = Vec::new();
    for endpoint in &endpoints {
        let mut pool = Vec::new();
        for _ in 0..CLIENTS {
            let mut conn = endpoint.connect().await?;
            conn.timed_get(&get_path).await?;
            pool.push(conn);
        }
        pools.push(pool);
    }

    let mut get_seq = Measured::default();
    let mut list_seq = Measured::default();
    let mut get_16 = Measured::default();
    let mut list_16 = Measured::default();
    let seconds = Duration::from_secs_f64(options.seconds);
    for round in 0..options.rounds {
        // Alternate which variant goes first.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let started = Instant::now();
        for v in order {
            if options.runs("get-seq") {
                for _ in 0..options.requests {
                    get_seq.latencies[v].push(seq[v].timed_get(&get_path).await?);
                }
            }
        }
        for v in order {
            if options.runs("list-seq") {
                for _ in 0..options.requests {
                    list_seq.latencies[v].push(seq[v].timed_get(&list_path).await?);
                }
            }
        }
        for (scenario, path, measured) in [
            ("get-16", &get_path, &mut get_16),
            ("list-16", &list_path, &mut list_16),
        ] {
            if !options.runs(scenario) {
                continue;
            }
            for v in order {
                let before = pids.ticks();
                let (pool, done, took) =
                    throughput(std::mem::take(&mut pools[v]), path, seconds).await?;
                let after = pids.ticks();
                pools[v] = pool;
                measured.done[v].0 += done;
                measured.done[v].1 += took;
                for p in 0..3 {
                    measured.cpu[v][p] += after[p].saturating_sub(before[p]);
                }
            }
        }
        eprintln!(
            "round {}/{} ({} first): {:.1}s",
            round + 1,
            options.rounds,
            VARIANTS[order[0]],
            started.elapsed().as_secs_f64()
        );
    }

    let watch = if options.runs("watch") {
        Some(watch(&endpoints, &mut seq[1], options.events).await?)
    } else {
        None
    };
    report(
        options,
        [&get_seq, &list_seq],
        [&get_16, &list_16],
        watch.as_ref(),
    );
    Ok(())
}

/// `CLIENTS` connections each sending `GET path` back to back for
/// `seconds`; returns them, the requests done and the time taken.
async fn throughput(
    pool: Vec<Conn>,
    path: &str,
    seconds: Duration,
) -> anyhow::Result<(Vec<Conn>, u64, Duration)> {
    let start = Instant::now();
    let end = start + seconds;
    let tasks: Vec<_> = pool
        .into_iter()
        .map(|mut conn| {
            let path = path.to_string();
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < end {
                    conn.timed_get(&path).await?;
                    done += 1;
                }
                anyhow::Ok((conn, done))
            })
        })
        .collect();
    let mut pool = Vec::new();
    let mut total = 0;
    for task in tasks {
        let (conn, done) = task.await??;
        pool.push(conn);
        total += done;
    }
    Ok((pool, total, start.elapsed()))
}

/// Per event, microseconds from the create's response to its arrival on
/// the aggregated and on the direct watch (negative: before the response).
struct Watched {
    aggregated: Vec<f64>,
    direct: Vec<f64>,
    added: Vec<f64>,
    took: Duration,
}

/// Opens a watch each way, then creates `events` flunders one at a time
/// directly, waiting for each on both watches before the next.
async fn watch(
    endpoints: &[Arc<Endpoint>; 2],
    writer: &mut Conn,
    events: usize,
) -> anyhow::Result<Watched> {
    let collection = format!("{RESOURCE}/{WATCH_NAMESPACE}/flunders");
    let listed: Value = serde_json::from_slice(
        &writer
            .call(Method::GET, &collection, None, StatusCode::OK)
            .await?,
    )?;
    let rv = listed["metadata"]["resourceVersion"]
        .as_str()
        .context("list without resourceVersion")?;
    let path = format!("{collection}?watch=true&resourceVersion={rv}&timeoutSeconds=3600");
    let mut arrivals = Vec::new();
    // Each watch has a connection of its own, kept while it streams.
    let mut conns = Vec::new();
    for endpoint in endpoints {
        let mut conn = endpoint.connect().await?;
        let response = conn.send(Method::GET, &path, None).await?;
        if response.status() != StatusCode::OK {
            bail!("watch: {}", response.status());
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(read_watch(response.into_body(), tx));
        arrivals.push(rx);
        conns.push(conn);
    }
    let mut w = Watched {
        aggregated: Vec::with_capacity(events),
        direct: Vec::with_capacity(events),
        added: Vec::with_capacity(events),
        took: Duration::ZERO,
    };
    let start = Instant::now();
    for i in 0..events {
        let body = flunder(WATCH_NAMESPACE, &format!("w-{i}"));
        writer
            .call(Method::POST, &collection, Some(body), StatusCode::CREATED)
            .await?;
        let responded = Instant::now();
        let mut at = [responded; 2];
        for (v, rx) in arrivals.iter_mut().enumerate() {
            let (index, when) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .with_context(|| format!("event {i} on the {} watch", VARIANTS[v]))?
                .with_context(|| format!("the {} watch ended", VARIANTS[v]))?;
            if index != i {
                bail!("the {} watch delivered w-{index}, not w-{i}", VARIANTS[v]);
            }
            at[v] = when;
        }
        w.aggregated.push(signed_us(at[0], responded));
        w.direct.push(signed_us(at[1], responded));
        w.added.push(signed_us(at[0], at[1]));
    }
    w.took = start.elapsed();
    Ok(w)
}

/// `a - b` in microseconds.
fn signed_us(a: Instant, b: Instant) -> f64 {
    if a >= b {
        (a - b).as_secs_f64() * 1e6
    } else {
        -(b - a).as_secs_f64() * 1e6
    }
}

/// Reads a watch stream line by line and sends `(i, arrival)` for each
/// `ADDED` of `w-<i>`, the arrival taken when its bytes came in.
async fn read_watch(mut body: Incoming, tx: mpsc::UnboundedSender<(usize, Instant)>) {
    let mut buf = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let now = Instant::now();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            let index = event["object"]["metadata"]["name"]
                .as_str()
                .and_then(|n| n.strip_prefix("w-"))
                .and_then(|n| n.parse().ok());
            if let (Some(index), "ADDED") = (index, event["type"].as_str().unwrap_or(""))
                && tx.send((index, now)).is_err()
            {
                return;
            }
        }
    }
}

/// The `p`-quantile (0..=1) of sorted values, nearest rank.
fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn sorted_ms(values: &[Duration]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    v.sort_by(f64::total_cmp);
    v
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// One `target` line.
fn target(name: &str, value: f64, unit: &str, at_most: bool, bound: f64) {
    let met = if at_most {
        value <= bound
    } else {
        value >= bound
    };
    let op = if at_most { "≤" } else { "≥" };
    println!(
        "target {name}: {value:.3}{unit} ({op} {bound}{unit}) {}",
        if met { "met" } else { "missed" }
    );
}

fn report(
    options: &Options,
    seq: [&Measured; 2],
    concurrent: [&Measured; 2],
    watch: Option<&Watched>,
) {
    println!();
    println!(
        "{:<40} {:>14} {:>14} {:>16}",
        "scenario", "aggregated", "direct", "added / ratio"
    );
    let mut targets = Vec::new();
    for (name, m) in ["get", "list"].iter().zip(seq) {
        if m.latencies[0].is_empty() {
            continue;
        }
        let [a, d] = [sorted_ms(&m.latencies[0]), sorted_ms(&m.latencies[1])];
        let what = if *name == "get" {
            "GET 1 flunder".to_string()
        } else {
            format!("LIST {LISTED} flunders")
        };
        for (label, p) in [("p50", 0.5), ("p99", 0.99)] {
            let (qa, qd) = (quantile(&a, p), quantile(&d, p));
            println!(
                "{:<40} {:>11.3} ms {:>11.3} ms {:>+13.3} ms",
                format!("{what}, 1 client, {label} (n={})", a.len()),
                qa,
                qd,
                qa - qd
            );
            if p == 0.5 {
                targets.push((format!("{name}-added-p50"), qa - qd, " ms", true, 0.3));
            }
        }
    }
    for (name, m) in ["get", "list"].iter().zip(concurrent) {
        if m.done[0].0 == 0 {
            continue;
        }
        let rate = |(n, t): (u64, Duration)| n as f64 / t.as_secs_f64();
        let (ra, rd) = (rate(m.done[0]), rate(m.done[1]));
        println!(
            "{:<40} {:>11.0} /s {:>11.0} /s {:>15.2}×",
            format!(
                "{} {CLIENTS} clients, {}s×{}",
                name.to_uppercase(),
                options.seconds,
                options.rounds
            ),
            ra,
            rd,
            ra / rd
        );
        targets.push((format!("{name}-throughput-ratio"), ra / rd, "×", false, 0.8));
        // CPU per request: where the time goes.
        let per = |v: usize, p: usize| m.cpu[v][p] as f64 / USER_HZ / m.done[v].0 as f64 * 1e6;
        for (p, who) in ["server", "extension", "client"].iter().enumerate() {
            println!(
                "{:<40} {:>11.0} µs {:>11.0} µs {:>+13.0} µs",
                format!("  CPU per request: {who}"),
                per(0, p),
                per(1, p),
                per(0, p) - per(1, p)
            );
        }
    }
    if let Some(w) = watch {
        let (a, d, added) = (sorted(&w.aggregated), sorted(&w.direct), sorted(&w.added));
        for (label, p) in [("p50", 0.5), ("p99", 0.99), ("max", 1.0)] {
            println!(
                "{:<40} {:>11.3} ms {:>11.3} ms {:>+13.3} ms",
                format!("watch event {label} (n={})", a.len()),
                quantile(&a, p) / 1e3,
                quantile(&d, p) / 1e3,
                quantile(&added, p) / 1e3
            );
        }
        println!(
            "  (watch: from each create's response to the event's arrival; added = the aggregated \
             arrival − the direct one, per event; {} events in {:.1}s)",
            a.len(),
            w.took.as_secs_f64()
        );
        targets.push((
            "watch-added-p99".into(),
            quantile(&added, 0.99) / 1e3,
            " ms",
            true,
            1.0,
        ));
    }
    println!();
    for (name, value, unit, at_most, bound) in targets {
        target(&name, value, unit, at_most, bound);
    }
}
