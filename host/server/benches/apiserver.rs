//! The benchmarks of issues 2, 3, 4 and 5: throughput and watch latency of
//! the API server on the embedded store and on etcd, the cost of admission
//! (wasm plugins vs an HTTPS webhook) and of RBAC authorization, over real
//! HTTP/1.1 on loopback.
//!
//! ```text
//! cargo bench -p wasm-apiserver [--features etcd] --bench apiserver [-- SCENARIO...]
//! ```
//!
//! Scenarios (a name given on the command line runs only the scenarios whose
//! name contains it): `create`, `get`, `list-1k`, `watch` (issue 2, embedded
//! store), `admission` (issue 3), `rbac` (issue 4) and `etcd` (issue 5;
//! needs the `etcd` feature and `etcd` on PATH). Each is a function that returns one or more
//! [`Row`]s; the table at the end is Markdown, so runs can be pasted side by
//! side, and the targets and ratios of each issue follow it. `BENCH_SECONDS`
//! (default 5) sets the measured window of the closed-loop scenarios and
//! `BENCH_CLIENTS` (default 64) their concurrency.
//!
//! * `admission`: creates with no admission plugin, one and five wasm
//!   validating plugins (`require_labels.wasm`, built by
//!   `scripts/build-plugins.sh`), and one HTTPS webhook on loopback doing the
//!   same check; each on a fresh server, with 1 and [`ADMISSION_CLIENTS`]
//!   clients. Plus the plugin runtime alone: cold compile, cached load, and
//!   instantiate + `validate` per call.
//! * `rbac`: GETs of one ConfigMap with a bearer token (token file) on two
//!   fresh servers, one authorizing with RBAC (bootstrap policy plus a
//!   RoleBinding of `view` to the token's user), one with AlwaysAllow; in
//!   [`RBAC_ROUNDS`] interleaved rounds.
//! * `etcd`: starts its own `etcd` on free loopback ports; raw etcd-client
//!   puts, create transactions and watches, then the API server on etcd
//!   (creates and watch delivery). etcd runs with [`ETCD_ARGS`] unless
//!   `BENCH_ETCD_ARGS` gives other flags (`BENCH_ETCD_ARGS=` for etcd's
//!   defaults). Run it with `create watch` for the embedded-store rows to
//!   compare with.
//!
//! The server and the load generator live in one process but in two tokio
//! runtimes (threads `srv-*` and `cli-*`), so they compete for the same cores
//! as two processes would; per-thread CPU time from `/proc/self/task` splits
//! the cores used between server (including the store's writer thread and the
//! webhook's runtime, `hook-*`) and client; etcd's CPU is read from its
//! process. Each closed-loop client owns one keep-alive connection. The
//! server binary serves HTTPS; here the router is served over plain HTTP, so
//! client-side TLS is not part of any number (the webhook's TLS is).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use wasm_apiserver::admission::Admission;
use wasm_apiserver::server::{AppState, router};
use wasm_apiserver_plugins::{
    AdmissionRequest, Gvk, Gvr, Limits, Operation, Runtime, RuntimeConfig, UserInfo,
};
use wasm_apiserver_storage::Storage;
use wasm_apiserver_storage::embedded::{EmbeddedOptions, EmbeddedStore};

#[path = "../tests/support/webhook.rs"]
mod webhook_support;

/// Namespace of the create scenario.
const NS_CREATE: &str = "bench-create";
/// Namespace holding exactly [`LIST_SIZE`] ConfigMaps (get and list scenarios).
const NS_LIST: &str = "bench-list";
/// Namespace of the watch scenario.
const NS_WATCH: &str = "bench-watch";
const LIST_SIZE: usize = 1000;

/// Untimed warm-up before each closed-loop window.
const WARMUP: Duration = Duration::from_millis(500);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const LIST_CLIENTS: usize = 8;
const WATCHERS: usize = 100;
const WATCH_WRITES: usize = 200;
const WATCH_PACE: Duration = Duration::from_millis(5);
/// How long watchers may lag behind the last write before the run gives up.
const WATCH_DRAIN: Duration = Duration::from_secs(10);

const TARGET_CREATES_PER_SEC: f64 = 10_000.0;
const TARGET_WATCH_P99: Duration = Duration::from_millis(50);

/// Concurrency of the loaded admission rows (each variant also runs with 1
/// client, for latency without queueing).
const ADMISSION_CLIENTS: usize = 16;
/// Rounds the admission variants take turns in, each `BENCH_SECONDS / ROUNDS` long.
const ADMISSION_ROUNDS: usize = 3;
/// How many AdmissionPlugin objects the "five plugins" variant creates.
const MANY_PLUGINS: usize = 5;
/// The label the plugins and the webhook require.
const REQUIRED_LABEL: &str = "team";
/// Cold compiles (each with an empty cache dir) and cached loads measured.
const COLD_LOADS: usize = 3;
const CACHED_LOADS: usize = 5;
/// Sequential `validate` calls timed (after [`PLUGIN_WARMUP_CALLS`]).
const PLUGIN_CALLS: usize = 5000;
const PLUGIN_WARMUP_CALLS: usize = 200;
const TARGET_ADDED_P50: Duration = Duration::from_micros(50);
const TARGET_WEBHOOK_COST_RATIO: f64 = 20.0;

/// Rounds the two authorization modes take turns in, each `BENCH_SECONDS / RBAC_ROUNDS` long.
const RBAC_ROUNDS: usize = 4;
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

/// How long etcd may take to answer after it is started.
#[cfg(feature = "etcd")]
const ETCD_START: Duration = Duration::from_secs(30);
/// How many of the raw puts' events the replay reads back.
#[cfg(feature = "etcd")]
const REPLAY_EVENTS: i64 = 20_000;
/// How long replaying the raw puts through one watch may take.
#[cfg(feature = "etcd")]
const ETCD_REPLAY: Duration = Duration::from_secs(30);
/// The flags `etcd` runs with (raw and API server rows alike): etcd 3.4
/// copies its uncommitted write buffer on every write transaction
/// (etcd-io/etcd#12896, fixed in 3.5), and every create is one, so a
/// shorter backend batch interval than the default 100 ms keeps that
/// buffer small. Doubles create transactions/s here; plain puts barely move.
#[cfg(feature = "etcd")]
const ETCD_ARGS: &str = "--backend-batch-interval=10ms";
/// Rounds raw puts, raw create transactions and API server creates take
/// turns in, each `BENCH_SECONDS / ETCD_ROUNDS` long.
#[cfg(feature = "etcd")]
const ETCD_ROUNDS: usize = 3;
#[cfg(feature = "etcd")]
const TARGET_ETCD_CREATE_RATIO: f64 = 0.5;

/// Pid of the `etcd` the `etcd` scenario runs (0: none), for its CPU column.
static ETCD_PID: AtomicU32 = AtomicU32::new(0);

type Body = Full<Bytes>;
type Error = Box<dyn std::error::Error + Send + Sync>;

#[global_allocator]
static ALLOC: wasm_apiserver::Allocator = wasm_apiserver::Allocator;

fn main() -> Result<(), Error> {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let env = |k: &str, default: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let window = Duration::from_secs(env("BENCH_SECONDS", 5));
    let clients = env("BENCH_CLIENTS", 64) as usize;
    let cores = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1);

    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .thread_name("srv-worker")
        .enable_all()
        .build()?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .thread_name("cli-worker")
        .enable_all()
        .build()?;
    // The webhook of the `admission` scenario: another process in real life.
    let hook_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .thread_name("hook-worker")
        .enable_all()
        .build()?;
    let (srv, hook) = (server_rt.handle().clone(), hook_rt.handle().clone());

    let dir = tempfile::tempdir()?;
    let addr = server_rt.block_on(start_server(&dir.path().join("store.redb")))?;
    let api = Api::new(addr);

    println!(
        "wasm-apiserver benchmark: embedded store (unless a row says etcd), plain HTTP/1.1 on {addr} \
         (the router in-process; the binary serves HTTPS, TLS to the API server is not measured)"
    );
    println!(
        "{cores} cores, shared by client and server (one process, a {cores}-worker tokio runtime each, \
         plus the store's writer thread; etcd and the webhook on the same cores); \
         window {}s after {}ms warm-up",
        window.as_secs(),
        WARMUP.as_millis()
    );

    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!(
            "load average before the run: {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }

    let started = Instant::now();
    let rows = client_rt.block_on(async {
        if ["create", "get", "list-1k", "watch"]
            .iter()
            .any(|s| wanted(s))
        {
            api.setup().await?;
        }
        let mut rows = Vec::new();
        if wanted("create") {
            rows.push(create(&api, clients, window, 0).await?);
        }
        if wanted("get") {
            rows.push(get(&api, clients, window).await?);
        }
        if wanted("list-1k") {
            rows.push(list_1k(&api, LIST_CLIENTS, window).await?);
        }
        if wanted("watch") {
            rows.extend(watch(&api, WATCHERS, WATCH_WRITES, WATCH_PACE).await?);
        }
        if wanted("admission") {
            rows.extend(admission(&srv, &hook, dir.path(), window).await?);
        }
        if wanted("rbac") {
            rows.extend(rbac(&srv, dir.path(), clients, window).await?);
        }
        if wanted("etcd") {
            rows.extend(etcd(&srv, dir.path(), clients, window).await?);
        }
        Ok::<_, Error>(rows)
    })?;

    println!();
    print_table(&rows);
    println!();
    print_targets(&rows);
    println!("\ntotal run time {:.1}s", started.elapsed().as_secs_f64());

    client_rt.shutdown_timeout(Duration::from_secs(1));
    hook_rt.shutdown_timeout(Duration::from_secs(1));
    server_rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// Opens the store, serves the router on a free loopback port and creates the
/// initial namespaces.
async fn start_server(path: &Path) -> Result<SocketAddr, Error> {
    let storage: Arc<dyn Storage> =
        Arc::new(EmbeddedStore::open(path, EmbeddedOptions::default())?);
    let served = serve(storage, None).await?;
    let addr = served.addr;
    // Serves until the process ends.
    std::mem::forget(served);
    Ok(addr)
}

/// A router served on a loopback port; stops accepting when dropped.
struct Served {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the router over `storage` (with `admission`, if any) on a free
/// loopback port, with the initial namespaces. Call it on the server runtime.
async fn serve(
    storage: Arc<dyn Storage>,
    admission: Option<Arc<Admission>>,
) -> Result<Served, Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(AppState::new(storage, addr, 3 * 1024 * 1024, admission));
    wasm_apiserver::namespaces::ensure_initial(&state.objects).await?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(state)).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok(Served { addr, task })
}

// --- results -------------------------------------------------------------------

/// One line of the result table.
struct Row {
    scenario: String,
    clients: usize,
    ops: u64,
    errors: u64,
    seconds: f64,
    /// Per-operation latencies in microseconds, sorted.
    latencies: Vec<u32>,
    /// CPU use during the window.
    cpu: Option<Cpu>,
    note: String,
}

impl Row {
    fn percentile(&self, q: f64) -> Option<Duration> {
        let n = self.latencies.len();
        if n == 0 {
            return None;
        }
        let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
        Some(Duration::from_micros(u64::from(self.latencies[i])))
    }
    fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// A latency: in µs below a millisecond, else in ms.
/// The `q` quantile of sorted nanosecond samples, in µs (0 for none).
fn percentile_us(sorted_nanos: &[u64], q: f64) -> f64 {
    let n = sorted_nanos.len();
    let i = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
    sorted_nanos.get(i).map_or(0.0, |n| *n as f64 / 1e3)
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".into(),
        |d| {
            if d < Duration::from_millis(1) {
                format!("{} µs", d.as_micros())
            } else {
                format!("{:.2} ms", d.as_secs_f64() * 1e3)
            }
        },
    )
}

fn print_table(rows: &[Row]) {
    println!(
        "| scenario | clients | ops | errors | seconds | ops/s | p50 | p99 | max | server cores | client cores | etcd cores | other procs | note |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in rows {
        let cores = |f: fn(&Cpu) -> f64| {
            r.cpu
                .as_ref()
                .map_or_else(|| "-".into(), |c| format!("{:.2}", f(c)))
        };
        let (srv, cli, others) = (
            cores(|c| c.server),
            cores(|c| c.client),
            cores(|c| c.others),
        );
        let etcd = r
            .cpu
            .and_then(|c| c.etcd)
            .map_or_else(|| "-".into(), |e| format!("{e:.2}"));
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.0} | {} | {} | {} | {srv} | {cli} | {etcd} | {others} | {} |",
            r.scenario,
            r.clients,
            r.ops,
            r.errors,
            r.seconds,
            r.rate(),
            ms(r.percentile(0.50)),
            ms(r.percentile(0.99)),
            ms(r.percentile(1.0)),
            r.note
        );
    }
}

fn print_targets(rows: &[Row]) {
    if let Some(r) = rows.iter().find(|r| r.scenario.starts_with("create")) {
        let rate = r.rate();
        let verdict = if rate >= TARGET_CREATES_PER_SEC {
            "met"
        } else {
            "MISSED"
        };
        println!(
            "target creates/s >= {:.0}: {verdict} ({rate:.0}/s, {:+.0}%)",
            TARGET_CREATES_PER_SEC,
            (rate / TARGET_CREATES_PER_SEC - 1.0) * 100.0
        );
    }
    if let Some(r) = rows
        .iter()
        .find(|r| r.scenario.starts_with("watch delivery"))
    {
        let p99 = r.percentile(0.99).unwrap_or(Duration::MAX);
        let verdict = if p99 <= TARGET_WATCH_P99 {
            "met"
        } else {
            "MISSED"
        };
        println!(
            "target watch p99 <= {} ms with {} watchers: {verdict} ({})",
            TARGET_WATCH_P99.as_millis(),
            r.clients,
            ms(Some(p99))
        );
        let verdict = if r.errors == 0 { "met" } else { "MISSED" };
        println!("target watch delivery 100%: {verdict} ({})", r.note);
    }
    print_admission_targets(rows);
    print_rbac_targets(rows);
    #[cfg(feature = "etcd")]
    print_etcd_targets(rows);
}

/// The row of `scenario` with `clients` clients.
fn find<'a>(rows: &'a [Row], scenario: &str, clients: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.clients == clients)
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// Issue 3: what one wasm plugin adds to a create, and how much cheaper it is
/// than a webhook doing the same check.
fn print_admission_targets(rows: &[Row]) {
    let p50 = |v: &str, clients| {
        find(rows, &admission_scenario(v), clients)
            .and_then(|r| r.percentile(0.5))
            .map(|d| d.as_micros() as f64)
    };
    let (Some(none), Some(one), Some(five), Some(hook)) = (
        p50(NO_ADMISSION, 1),
        p50(ONE_PLUGIN, 1),
        p50(MANY_PLUGINS_LABEL, 1),
        p50(WEBHOOK, 1),
    ) else {
        return;
    };
    let (added_one, added_five, added_hook) = (one - none, five - none, hook - none);
    println!(
        "\nadmission, 1 client, p50 of a create: none {none:.0} µs; 1 wasm plugin {one:.0} µs \
         ({added_one:+.0} µs); {MANY_PLUGINS} wasm plugins {five:.0} µs ({added_five:+.0} µs, \
         {:+.1} µs per plugin); HTTPS webhook {hook:.0} µs ({added_hook:+.0} µs)",
        added_five / MANY_PLUGINS as f64
    );
    let target = TARGET_ADDED_P50.as_micros() as f64;
    println!(
        "target one wasm plugin adds <= {target:.0} µs p50: {} ({added_one:+.0} µs)",
        met(added_one <= target)
    );
    // The p50s have 1 µs resolution: an addition below it counts as 1 µs.
    let ratio = added_hook / added_one.max(1.0);
    println!(
        "target wasm >= {TARGET_WEBHOOK_COST_RATIO:.0}x cheaper than the webhook (added p50, \
         1 client): {} ({ratio:.1}x: {added_hook:+.0} µs vs {added_one:+.0} µs{})",
        met(ratio >= TARGET_WEBHOOK_COST_RATIO),
        if added_one < 1.0 {
            ", the wasm addition below resolution, counted as 1 µs"
        } else {
            ""
        }
    );
    let loaded = |v: &str| find(rows, &admission_scenario(v), ADMISSION_CLIENTS);
    if let (Some(none), Some(one), Some(five), Some(hook)) = (
        loaded(NO_ADMISSION),
        loaded(ONE_PLUGIN),
        loaded(MANY_PLUGINS_LABEL),
        loaded(WEBHOOK),
    ) {
        let pct = |r: &Row| (r.rate() / none.rate() - 1.0) * 100.0;
        println!(
            "admission, {ADMISSION_CLIENTS} clients, creates/s: none {:.0}; 1 wasm plugin {:.0} \
             ({:+.1}%); {MANY_PLUGINS} wasm plugins {:.0} ({:+.1}%); HTTPS webhook {:.0} ({:+.1}%); \
             throughput 1 wasm plugin / webhook = {:.2}x",
            none.rate(),
            one.rate(),
            pct(one),
            five.rate(),
            pct(five),
            hook.rate(),
            pct(hook),
            one.rate() / hook.rate()
        );
        // Server CPU per create (webhook threads included), from the CPU columns.
        let cpu_us = |r: &Row| r.cpu.map(|c| c.server * 1e6 / r.rate().max(1.0));
        if let (Some(n), Some(o), Some(h)) = (cpu_us(none), cpu_us(one), cpu_us(hook)) {
            println!(
                "server CPU per create ({ADMISSION_CLIENTS} clients): none {n:.0} µs; 1 wasm \
                 plugin {o:.0} µs ({:+.0}); HTTPS webhook incl. the webhook's own {h:.0} µs \
                 ({:+.0}); added-CPU ratio webhook / wasm = {:.1}x",
                o - n,
                h - n,
                (h - n) / (o - n).max(1.0)
            );
        }
    }
    if let Some(r) = rows.iter().find(|r| r.scenario == PLUGIN_CALL_SCENARIO) {
        println!(
            "per call, instantiate + validate in-process: p50 {}, p99 {} ({})",
            ms(r.percentile(0.5)),
            ms(r.percentile(0.99)),
            r.note
        );
    }
}

/// Process CPU time split into server threads and everything else, and the
/// busy time of the whole machine (to see other processes competing).
struct CpuSample {
    at: Instant,
    server: u64,
    total: u64,
    /// The `etcd` process, when one runs.
    etcd: Option<u64>,
    machine: u64,
}

/// Clock ticks per second of `/proc` times (USER_HZ, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

fn cpu_sample() -> Option<CpuSample> {
    // utime and stime are fields 14 and 15; `comm` (field 2) may hold spaces,
    // so count from the closing parenthesis.
    fn parse(stat: &str) -> Option<(&str, u64)> {
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let mut rest = stat[close + 1..].split_whitespace().skip(11);
        let utime: u64 = rest.next()?.parse().ok()?;
        let stime: u64 = rest.next()?.parse().ok()?;
        Some((&stat[open + 1..close], utime + stime))
    }
    let at = Instant::now();
    let total = parse(&std::fs::read_to_string("/proc/self/stat").ok()?)?.1;
    let mut server = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if let Some((comm, ticks)) = parse(&stat)
            && (comm.starts_with("srv-")
                || comm.starts_with("hook-")
                || comm.starts_with("embedded-store"))
        {
            server += ticks;
        }
    }
    // The `cpu` line of /proc/stat: user nice system idle iowait irq softirq steal ...
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map_while(|t| t.parse().ok())
        .collect();
    let machine = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| !matches!(i, 3 | 4))
        .map(|(_, t)| t)
        .sum();
    let etcd = match ETCD_PID.load(Ordering::Relaxed) {
        0 => None,
        pid => std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse(&s).map(|(_, ticks)| ticks)),
    };
    Some(CpuSample {
        at,
        server,
        total,
        etcd,
        machine,
    })
}

/// Cores used by this process's server and client, and by other processes.
#[derive(Clone, Copy)]
struct Cpu {
    server: f64,
    client: f64,
    /// The `etcd` process, when one ran.
    etcd: Option<f64>,
    others: f64,
}

/// CPU use since `before`.
fn cpu_since(before: &Option<CpuSample>) -> Option<Cpu> {
    let (before, now) = (before.as_ref()?, cpu_sample()?);
    let secs = now.at.duration_since(before.at).as_secs_f64();
    let cores = |a: u64, b: u64| a.saturating_sub(b) as f64 / TICKS_PER_SEC / secs;
    let server = cores(now.server, before.server);
    let total = cores(now.total, before.total);
    let machine = cores(now.machine, before.machine);
    let etcd = match (before.etcd, now.etcd) {
        (Some(b), Some(n)) => Some(cores(n, b)),
        _ => None,
    };
    Some(Cpu {
        server,
        client: (total - server).max(0.0),
        etcd,
        others: (machine - total - etcd.unwrap_or(0.0)).max(0.0),
    })
}

// --- HTTP plumbing -----------------------------------------------------------------

/// Where the server is, and how to talk to it.
struct Api {
    addr: SocketAddr,
    host: HeaderValue,
}

impl Api {
    fn new(addr: SocketAddr) -> Self {
        Api {
            addr,
            host: HeaderValue::from_str(&addr.to_string()).expect("an address is a valid header"),
        }
    }

    /// One HTTP/1.1 keep-alive connection.
    async fn connect(&self) -> Result<SendRequest<Body>, Error> {
        let stream = timeout(CONNECT_TIMEOUT, TcpStream::connect(self.addr)).await??;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    fn request(
        &self,
        method: Method,
        uri: Uri,
        body: Option<(&'static str, Bytes)>,
    ) -> Request<Body> {
        let builder = Request::builder()
            .method(method)
            .uri(uri)
            .header(HOST, self.host.clone());
        let req = match body {
            Some((content_type, bytes)) => builder
                .header(CONTENT_TYPE, content_type)
                .body(Full::new(bytes)),
            None => builder.body(Full::default()),
        };
        req.expect("a well-formed request")
    }

    /// Sets up the namespaces and the [`LIST_SIZE`] ConfigMaps of [`NS_LIST`].
    async fn setup(&self) -> Result<(), Error> {
        self.create_namespaces(&[NS_CREATE, NS_LIST, NS_WATCH])
            .await?;
        let uri: Uri = format!("/api/v1/namespaces/{NS_LIST}/configmaps").parse()?;
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let (api, uri) = (Api::new(self.addr), uri.clone());
                tokio::spawn(async move {
                    let mut conn = api.connect().await?;
                    for i in (t..LIST_SIZE).step_by(16) {
                        let body = configmap(&format!("l-{i}"), i as u64);
                        let req = api.request(
                            Method::POST,
                            uri.clone(),
                            Some(("application/json", body)),
                        );
                        let (status, body) = send(&mut conn, req).await?;
                        if status != StatusCode::CREATED {
                            return Err::<(), Error>(
                                format!(
                                    "setup create: {status} {}",
                                    String::from_utf8_lossy(&body)
                                )
                                .into(),
                            );
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for t in tasks {
            timeout(Duration::from_secs(60), t).await???;
        }
        Ok(())
    }

    /// Creates the namespaces `names`.
    async fn create_namespaces(&self, names: &[&str]) -> Result<(), Error> {
        let mut conn = self.connect().await?;
        for ns in names {
            let body =
                format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{ns}"}}}}"#);
            let req = self.request(
                Method::POST,
                Uri::from_static("/api/v1/namespaces"),
                Some(("application/json", body.into())),
            );
            let (status, body) = send(&mut conn, req).await?;
            if status != StatusCode::CREATED {
                return Err(format!(
                    "creating namespace {ns}: {status} {}",
                    String::from_utf8_lossy(&body)
                )
                .into());
            }
        }
        Ok(())
    }

    /// POSTs `body` (JSON) to `path` and expects 201 Created; returns the
    /// created object.
    async fn create(&self, path: &str, body: String) -> Result<serde_json::Value, Error> {
        let req = self.request(
            Method::POST,
            path.parse()?,
            Some(("application/json", body.into())),
        );
        let (status, body) = send(&mut self.connect().await?, req).await?;
        if status != StatusCode::CREATED {
            return Err(format!("POST {path}: {status} {}", String::from_utf8_lossy(&body)).into());
        }
        Ok(serde_json::from_slice(&body)?)
    }
}

/// Sends a request and reads the whole answer.
async fn send(
    conn: &mut SendRequest<Body>,
    req: Request<Body>,
) -> Result<(StatusCode, Bytes), Error> {
    timeout(REQUEST_TIMEOUT, async {
        conn.ready().await?;
        let resp = conn.send_request(req).await?;
        let status = resp.status();
        Ok((status, resp.into_body().collect().await?.to_bytes()))
    })
    .await?
}

/// A ConfigMap of about 200 bytes.
fn configmap(name: &str, seq: u64) -> Bytes {
    configmap_labelled(name, seq, "tier")
}

/// A ConfigMap of about 200 bytes with the labels `app` and `label`
/// (`tier`, or [`REQUIRED_LABEL`]: the same size either way).
fn configmap_labelled(name: &str, seq: u64, label: &str) -> Bytes {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"app":"bench","{label}":"load"}}}},"data":{{"seq":"{seq}","payload":"0123456789abcdef0123456789abcdef0123456789abcdef"}}}}"#
    )
    .into()
}

// --- closed-loop load ----------------------------------------------------------------

/// Builds the `i`-th request of client `w`.
type MakeRequest = Arc<dyn Fn(&Api, usize, u64) -> Request<Body> + Send + Sync>;

struct WorkerStats {
    ops: u64,
    errors: u64,
    latencies: Vec<u32>,
}

/// Runs `clients` closed loops (send, read the whole answer, repeat) for a
/// warm-up and then `window`; only requests started inside the window count.
async fn closed_loop(
    api: &Api,
    scenario: &str,
    clients: usize,
    window: Duration,
    expect: StatusCode,
    make: MakeRequest,
) -> Result<Row, Error> {
    let begin = Instant::now() + WARMUP;
    let end = begin + window;
    let tasks: Vec<_> = (0..clients)
        .map(|w| {
            let (api, make) = (Api::new(api.addr), make.clone());
            tokio::spawn(async move { worker(&api, w, begin, end, expect, &*make).await })
        })
        .collect();
    tokio::time::sleep_until(begin.into()).await;
    let cpu = cpu_sample();
    tokio::time::sleep_until(end.into()).await;
    let cpu = cpu_since(&cpu);
    let mut row = Row {
        scenario: scenario.into(),
        clients,
        ops: 0,
        errors: 0,
        seconds: window.as_secs_f64(),
        latencies: Vec::new(),
        cpu,
        note: String::new(),
    };
    for t in tasks {
        let stats = timeout(REQUEST_TIMEOUT + CONNECT_TIMEOUT, t).await???;
        row.ops += stats.ops;
        row.errors += stats.errors;
        row.latencies.extend(stats.latencies);
    }
    row.latencies.sort_unstable();
    Ok(row)
}

async fn worker(
    api: &Api,
    w: usize,
    begin: Instant,
    end: Instant,
    expect: StatusCode,
    make: &(dyn Fn(&Api, usize, u64) -> Request<Body> + Send + Sync),
) -> Result<WorkerStats, Error> {
    let mut conn = api.connect().await?;
    let mut stats = WorkerStats {
        ops: 0,
        errors: 0,
        latencies: Vec::with_capacity(1 << 16),
    };
    let mut first_error = None;
    for i in 0.. {
        let start = Instant::now();
        if start >= end {
            break;
        }
        let req = make(api, w, i);
        let result = timeout(REQUEST_TIMEOUT, async {
            conn.ready().await?;
            let resp = conn.send_request(req).await?;
            let status = resp.status();
            let mut body = resp.into_body();
            // Drain without collecting: only the status matters here.
            while let Some(frame) = body.frame().await {
                frame?;
            }
            Ok::<_, hyper::Error>(status)
        })
        .await;
        let counted = start >= begin;
        match result {
            Ok(Ok(status)) if status == expect => {
                if counted {
                    stats.ops += 1;
                    stats
                        .latencies
                        .push(start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
                }
            }
            Ok(Ok(status)) => {
                stats.errors += u64::from(counted);
                first_error.get_or_insert_with(|| format!("status {status}"));
            }
            Ok(Err(e)) => {
                stats.errors += u64::from(counted);
                first_error.get_or_insert_with(|| e.to_string());
                conn = api.connect().await?;
            }
            Err(_) => {
                stats.errors += u64::from(counted);
                first_error.get_or_insert_with(|| "timeout".into());
                conn = api.connect().await?;
            }
        }
    }
    if let Some(e) = first_error {
        eprintln!("client {w}: first error: {e}");
    }
    Ok(stats)
}

// --- scenarios -----------------------------------------------------------------------

/// POST of new ConfigMaps (about 200 bytes each).
/// `round` keeps the names of repeated runs apart.
async fn create(api: &Api, clients: usize, window: Duration, round: usize) -> Result<Row, Error> {
    let uri: Uri = format!("/api/v1/namespaces/{NS_CREATE}/configmaps").parse()?;
    let make: MakeRequest = Arc::new(move |api, w, i| {
        api.request(
            Method::POST,
            uri.clone(),
            Some((
                "application/json",
                configmap(&format!("c-{round}-{w}-{i}"), i),
            )),
        )
    });
    let mut row = closed_loop(
        api,
        "create ConfigMap (POST)",
        clients,
        window,
        StatusCode::CREATED,
        make,
    )
    .await?;
    row.note = "~200 B objects".into();
    Ok(row)
}

/// GET of single ConfigMaps, spread over the 1000 of the list namespace.
async fn get(api: &Api, clients: usize, window: Duration) -> Result<Row, Error> {
    let uris: Arc<Vec<Uri>> = Arc::new(
        (0..LIST_SIZE)
            .map(|i| format!("/api/v1/namespaces/{NS_LIST}/configmaps/l-{i}").parse())
            .collect::<Result<_, _>>()?,
    );
    let make: MakeRequest = Arc::new(move |api, w, i| {
        let uri = uris[(w * 7919 + i as usize * 31) % uris.len()].clone();
        api.request(Method::GET, uri, None)
    });
    closed_loop(api, "get ConfigMap", clients, window, StatusCode::OK, make).await
}

/// Unpaginated list of a namespace holding 1000 ConfigMaps.
async fn list_1k(api: &Api, clients: usize, window: Duration) -> Result<Row, Error> {
    let uri: Uri = format!("/api/v1/namespaces/{NS_LIST}/configmaps").parse()?;
    // Check once that a list holds all the objects.
    let (status, body) = send(
        &mut api.connect().await?,
        api.request(Method::GET, uri.clone(), None),
    )
    .await?;
    #[derive(Deserialize)]
    struct List {
        items: Vec<serde::de::IgnoredAny>,
    }
    let items = serde_json::from_slice::<List>(&body)
        .map(|l| l.items.len())
        .unwrap_or(0);
    if status != StatusCode::OK || items != LIST_SIZE {
        return Err(
            format!("list returned {status} with {items} items, expected {LIST_SIZE}").into(),
        );
    }
    let make: MakeRequest = Arc::new(move |api, _, _| api.request(Method::GET, uri.clone(), None));
    let mut row = closed_loop(
        api,
        "list 1k ConfigMaps",
        clients,
        window,
        StatusCode::OK,
        make,
    )
    .await?;
    row.note = format!("{} KiB per list", body.len() / 1024);
    Ok(row)
}

/// Watch delivery latency: `watchers` watches on one namespace, then `writes`
/// paced updates of one ConfigMap whose `data.seq` numbers them. Latency is
/// per (watcher, event), from just before the update is sent to when that
/// watcher has parsed the event.
async fn watch(
    api: &Api,
    watchers: usize,
    writes: usize,
    pace: Duration,
) -> Result<Vec<Row>, Error> {
    let collection = format!("/api/v1/namespaces/{NS_WATCH}/configmaps");
    let mut conn = api.connect().await?;
    let (status, body) = send(
        &mut conn,
        api.request(
            Method::POST,
            collection.parse()?,
            Some(("application/json", configmap("target", 1_000_000))),
        ),
    )
    .await?;
    if status != StatusCode::CREATED {
        return Err(format!("creating the watch target: {status}").into());
    }
    let created: serde_json::Value = serde_json::from_slice(&body)?;
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .ok_or("no resourceVersion")?
        .to_string();

    // Open the watches and wait until each has its response headers.
    let watch_uri: Uri =
        format!("{collection}?watch=true&resourceVersion={rv}&timeoutSeconds=300").parse()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let warm = Arc::new(AtomicUsize::new(0));
    let mut opened = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let mut c = api.connect().await?;
        let req = api.request(Method::GET, watch_uri.clone(), None);
        opened.push(tokio::spawn(async move {
            c.ready().await?;
            let resp = c.send_request(req).await?;
            Ok::<_, Error>((c, resp))
        }));
    }
    let mut tasks = Vec::with_capacity(watchers);
    for o in opened {
        let (conn, resp) = timeout(REQUEST_TIMEOUT, o).await???;
        if resp.status() != StatusCode::OK {
            return Err(format!("watch returned {}", resp.status()).into());
        }
        let (warm, stop) = (warm.clone(), stop_rx.clone());
        tasks.push(tokio::spawn(async move {
            let got = watcher(resp, writes, &warm, stop).await;
            drop(conn);
            got
        }));
    }

    // One untimed update, so that every stream is known to flow.
    let patch_uri: Uri = format!("{collection}/target").parse()?;
    let patch = |seq: usize| {
        let body = format!(r#"{{"data":{{"seq":"{seq}"}}}}"#);
        api.request(
            Method::PATCH,
            patch_uri.clone(),
            Some(("application/merge-patch+json", body.into())),
        )
    };
    send(&mut conn, patch(0)).await?;
    wait_warm(&warm, watchers).await;

    // The paced writes.
    let cpu = cpu_sample();
    let started = Instant::now();
    let mut sent = Vec::with_capacity(writes + 1);
    sent.push(started);
    let mut write_latencies = Vec::with_capacity(writes);
    let mut write_errors = 0;
    let mut ticker = tokio::time::interval(pace);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for seq in 1..=writes {
        ticker.tick().await;
        let req = patch(seq);
        let t = Instant::now();
        sent.push(t);
        match send(&mut conn, req).await {
            Ok((StatusCode::OK, _)) => write_latencies.push(t.elapsed().as_micros() as u32),
            _ => write_errors += 1,
        }
    }
    let writes_done = Instant::now();
    let received = drain(tasks, &stop_tx).await?;
    let finished = Instant::now();
    let cpu = cpu_since(&cpu);
    Ok(watch_rows(
        "",
        "paced PATCH",
        WatchRun {
            watchers,
            writes,
            pace,
            started,
            sent,
            write_latencies,
            write_errors,
            writes_done,
            received,
            finished,
            cpu,
        },
    ))
}

/// Waits (bounded) until `watchers` watchers have seen the warm-up event.
async fn wait_warm(warm: &AtomicUsize, watchers: usize) {
    let warm_deadline = Instant::now() + REQUEST_TIMEOUT;
    while warm.load(Ordering::Acquire) < watchers && Instant::now() < warm_deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let warmed = warm.load(Ordering::Acquire);
    if warmed < watchers {
        eprintln!("watch: only {warmed} of {watchers} watchers saw the warm-up event");
    }
}

/// Waits for the watchers to see everything (bounded), then stops them.
async fn drain(
    mut tasks: Vec<JoinHandle<Received>>,
    stop_tx: &tokio::sync::watch::Sender<bool>,
) -> Result<Vec<Received>, Error> {
    let drain_deadline = tokio::time::Instant::now() + WATCH_DRAIN;
    let mut received = Vec::with_capacity(tasks.len());
    for t in &mut tasks {
        match tokio::time::timeout_at(drain_deadline, &mut *t).await {
            Ok(r) => received.push(r?),
            Err(_) => break,
        }
    }
    let _ = stop_tx.send(true);
    for t in tasks.into_iter().skip(received.len()) {
        received.push(timeout(Duration::from_secs(2), t).await??);
    }
    Ok(received)
}

/// What a paced-write watch run measured.
struct WatchRun {
    watchers: usize,
    writes: usize,
    pace: Duration,
    started: Instant,
    /// When write `seq` was sent (index 0: `started`).
    sent: Vec<Instant>,
    write_latencies: Vec<u32>,
    write_errors: u64,
    writes_done: Instant,
    received: Vec<Received>,
    finished: Instant,
    cpu: Option<Cpu>,
}

/// The two rows of a watch run, their scenarios prefixed with `prefix`:
/// the paced writes (`what`) and the delivery to the watchers.
fn watch_rows(prefix: &str, what: &str, run: WatchRun) -> Vec<Row> {
    let WatchRun {
        watchers,
        writes,
        pace,
        started,
        sent,
        mut write_latencies,
        write_errors,
        writes_done,
        received,
        finished,
        cpu,
    } = run;
    let expected = (watchers * writes) as u64;
    let mut latencies = Vec::with_capacity(expected as usize);
    let (mut duplicates, mut out_of_order, mut errors) = (0u64, 0u64, 0u64);
    for got in &received {
        let mut seen = vec![false; writes + 1];
        let mut last = 0;
        for &(seq, at) in &got.events {
            if seq == 0 || seq > writes {
                continue;
            }
            if seen[seq] {
                duplicates += 1;
                continue;
            }
            seen[seq] = true;
            out_of_order += u64::from(seq < last);
            last = seq;
            latencies.push(at.saturating_duration_since(sent[seq]).as_micros() as u32);
        }
        errors += got.errors;
    }
    latencies.sort_unstable();
    let delivered = latencies.len() as u64;
    let mut note = format!(
        "{delivered}/{expected} events delivered ({:.1}%), {writes} writes every {} ms, last delivery {:.0} ms after the last write",
        delivered as f64 * 100.0 / expected as f64,
        pace.as_millis(),
        received
            .iter()
            .filter_map(|g| g.events.last())
            .map(|(_, at)| at.saturating_duration_since(writes_done))
            .max()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    );
    if duplicates + out_of_order + errors > 0 {
        note.push_str(&format!(
            ", {duplicates} duplicates, {out_of_order} out of order, {errors} bad lines"
        ));
    }
    write_latencies.sort_unstable();
    vec![
        Row {
            scenario: format!("{prefix}watch writes ({what})"),
            clients: 1,
            ops: write_latencies.len() as u64,
            errors: write_errors,
            seconds: writes_done.duration_since(started).as_secs_f64(),
            latencies: write_latencies,
            cpu: None,
            note: format!("during watch delivery to {watchers} watchers"),
        },
        Row {
            scenario: format!("{prefix}watch delivery ({watchers} watchers)"),
            clients: watchers,
            ops: delivered,
            errors: expected - delivered,
            seconds: finished.duration_since(started).as_secs_f64(),
            latencies,
            cpu,
            note,
        },
    ]
}

/// What one watcher saw: `(data.seq, when parsed)` per event.
struct Received {
    events: Vec<(usize, Instant)>,
    errors: u64,
}

/// Reads a watch stream line by line until it has `writes` numbered events
/// after the warm-up one, the stream ends, or `stop` is raised.
async fn watcher(
    resp: Response<Incoming>,
    writes: usize,
    warm: &AtomicUsize,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Received {
    #[derive(Deserialize)]
    struct Event<'a> {
        #[serde(rename = "type", borrow)]
        kind: &'a str,
        object: Object,
    }
    #[derive(Deserialize)]
    struct Object {
        #[serde(default)]
        data: HashMap<String, String>,
    }
    let mut out = Received {
        events: Vec::with_capacity(writes + 1),
        errors: 0,
    };
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = stop.wait_for(|s| *s) => return out,
        };
        let Some(Ok(frame)) = frame else { return out };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        let mut consumed = 0;
        while let Some(n) = buf[consumed..].iter().position(|b| *b == b'\n') {
            let line = &buf[consumed..consumed + n];
            consumed += n + 1;
            let seq = match serde_json::from_slice::<Event>(line) {
                Ok(ev) if ev.kind == "MODIFIED" => ev
                    .object
                    .data
                    .get("seq")
                    .and_then(|s| s.parse::<usize>().ok()),
                _ => None,
            };
            let at = Instant::now();
            match seq {
                Some(0) => {
                    warm.fetch_add(1, Ordering::AcqRel);
                }
                Some(seq) => {
                    out.events.push((seq, at));
                    if out.events.len() >= writes {
                        return out;
                    }
                }
                None => out.errors += 1,
            }
        }
        buf.drain(..consumed);
    }
}

// --- admission (issue 3) ---------------------------------------------------------------

/// The admission variants, as named in the scenarios.
const NO_ADMISSION: &str = "none";
const ONE_PLUGIN: &str = "1 wasm plugin";
const MANY_PLUGINS_LABEL: &str = "5 wasm plugins";
const WEBHOOK: &str = "HTTPS webhook";
const PLUGIN_CALL_SCENARIO: &str = "plugin: instantiate + validate, per call";
const PLUGIN_COLD_SCENARIO: &str = "plugin: instantiate + validate, cold caches";
/// Memory written between the cold-cache calls: more than this machine's L2.
const COLD_BYTES: usize = 4 << 20;

fn admission_scenario(variant: &str) -> String {
    format!("admission {variant}: create ConfigMap")
}

/// Where `scripts/build-plugins.sh` puts the first-party components.
fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/wasm32-wasip2/release")
}

/// The cost of admission on `create`: the plugin runtime alone, then one
/// fresh server (embedded store, admission chain on) per variant, loaded
/// with 1 and then [`ADMISSION_CLIENTS`] clients, the variants taking turns
/// in [`ADMISSION_ROUNDS`] rounds. Every create carries the
/// required label, so every one is allowed; a create without it is checked
/// to be denied first, so the check is known to be in the path.
async fn admission(
    srv: &Handle,
    hook_rt: &Handle,
    dir: &Path,
    window: Duration,
) -> Result<Vec<Row>, Error> {
    let path = plugin_dir().join("require_labels.wasm");
    let wasm = std::fs::read(&path).map_err(|e| {
        format!(
            "{}: {e} (run scripts/build-plugins.sh first)",
            path.display()
        )
    })?;
    let mut rows = srv
        .spawn(plugin_costs(wasm, dir.join("plugin-costs")))
        .await??;

    let cache = dir.join("plugin-cache");
    let variants = [NO_ADMISSION, ONE_PLUGIN, MANY_PLUGINS_LABEL, WEBHOOK];
    // (server, its address, unlabelled-create status, webhook)
    let mut servers = Vec::with_capacity(variants.len());
    for (n, variant) in variants.into_iter().enumerate() {
        let store = dir.join(format!("admission-{n}.redb"));
        let cache = cache.clone();
        let server = srv
            .spawn(async move {
                let storage: Arc<dyn Storage> =
                    Arc::new(EmbeddedStore::open(&store, EmbeddedOptions::default())?);
                let runtime = Runtime::new(RuntimeConfig {
                    cache_dir: Some(cache),
                    ..Default::default()
                })?;
                let admission = Admission::new(runtime, Some(plugin_dir()), storage.clone());
                serve(storage, Some(Arc::new(admission))).await
            })
            .await??;
        let api = Api::new(server.addr);
        api.create_namespaces(&[NS_CREATE]).await?;
        let mut hook = None;
        match variant {
            NO_ADMISSION => {}
            WEBHOOK => {
                let h = hook_rt
                    .spawn(webhook_support::start(REQUIRED_LABEL))
                    .await?;
                api.create(
                    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                    webhook_configuration(&h.url, &h.ca_bundle),
                )
                .await?;
                hook = Some(h);
            }
            _ => {
                let n = if variant == ONE_PLUGIN {
                    1
                } else {
                    MANY_PLUGINS
                };
                let plugins = "/apis/admission.wasm-apiserver.io/v1alpha1/admissionplugins";
                for i in 0..n {
                    let name = format!("require-team-{i}");
                    api.create(plugins, admission_plugin(&name)).await?;
                    // Active once the POST has returned.
                    let req = api.request(Method::GET, format!("{plugins}/{name}").parse()?, None);
                    let (_, body) = send(&mut api.connect().await?, req).await?;
                    let got: serde_json::Value = serde_json::from_slice(&body)?;
                    let phase = &got["status"]["phase"];
                    if phase != "Active" {
                        return Err(format!("plugin {name} is {phase}: {got}").into());
                    }
                }
            }
        }

        // The check is in the path: a create without the label is denied.
        let (status, _) = send(
            &mut api.connect().await?,
            api.request(
                Method::POST,
                format!("/api/v1/namespaces/{NS_CREATE}/configmaps").parse()?,
                Some(("application/json", configmap("unlabelled", 0))),
            ),
        )
        .await?;
        let expect = if variant == NO_ADMISSION {
            StatusCode::CREATED
        } else {
            StatusCode::FORBIDDEN
        };
        if status != expect {
            return Err(format!(
                "admission {variant}: unlabelled create got {status}, not {expect}"
            )
            .into());
        }

        if let Some(h) = &hook {
            h.calls.store(0, Ordering::Relaxed);
        }
        servers.push((server, api, status, hook));
    }

    // Interleaved rounds (A B C D A B C D ...), so that a change in the
    // machine's background load hits every variant alike.
    let slice = window / ADMISSION_ROUNDS as u32;
    for clients in [1, ADMISSION_CLIENTS] {
        let mut calls_before = Vec::new();
        for (_, api, _, _) in &servers {
            calls_before.push(plugin_calls(api).await?);
        }
        let mut merged: Vec<Option<Row>> = variants.iter().map(|_| None).collect();
        for round in 0..ADMISSION_ROUNDS {
            for ((_, api, _, _), (variant, slot)) in
                servers.iter().zip(variants.iter().zip(&mut merged))
            {
                let row = admission_create(api, variant, clients, round, slice).await?;
                match slot {
                    Some(into) => merge(into, row),
                    None => *slot = Some(row),
                }
            }
        }
        for (((_, api, status, hook), row), before) in servers.iter().zip(merged).zip(calls_before)
        {
            let mut row = row.ok_or("no admission row")?;
            row.latencies.sort_unstable();
            row.note = format!(
                "~200 B objects, all allowed; unlabelled create: {status}; \
                 {ADMISSION_ROUNDS} interleaved rounds"
            );
            let (sum, count) = plugin_calls(api).await?;
            if count > before.1 {
                row.note.push_str(&format!(
                    "; wasm calls as the server timed them: mean {:.1} µs",
                    (sum - before.0) / (count - before.1) as f64 * 1e6
                ));
            }
            if let Some(h) = hook {
                let calls = h.calls.swap(0, Ordering::Relaxed);
                row.note
                    .push_str(&format!("; webhook answered {calls} reviews"));
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Total seconds and number of wasm plugin calls so far, from `/metrics`.
async fn plugin_calls(api: &Api) -> Result<(f64, u64), Error> {
    let req = api.request(Method::GET, "/metrics".parse()?, None);
    let (_, body) = send(&mut api.connect().await?, req).await?;
    let text = String::from_utf8(body.to_vec())?;
    let (mut sum, mut count) = (0.0, 0);
    for line in text.lines() {
        let value = line.rsplit(' ').next().unwrap_or_default();
        if line.starts_with("wasm_apiserver_plugin_call_duration_seconds_sum{") {
            sum += value.parse::<f64>().unwrap_or(0.0);
        } else if line.starts_with("wasm_apiserver_plugin_call_duration_seconds_count{") {
            count += value.parse::<u64>().unwrap_or(0);
        }
    }
    Ok((sum, count))
}

fn rbac_scenario(mode: &str) -> String {
    format!("rbac: get ConfigMap, bearer token, {mode}")
}

/// A fresh server (embedded store) authenticating [`RBAC_TOKEN_FILE`] and
/// authorizing with `mode`, holding the ConfigMap [`RBAC_OBJECT`]; with RBAC,
/// the bootstrap policy and a RoleBinding of `view` to [`RBAC_USER`] in
/// `default`. Call it on the server runtime.
async fn serve_authz(store: PathBuf, mode: &'static str) -> Result<Served, Error> {
    use wasm_apiserver::objects::WriteOptions;
    let storage: Arc<dyn Storage> =
        Arc::new(EmbeddedStore::open(&store, EmbeddedOptions::default())?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut state = AppState::new(storage, addr, 3 * 1024 * 1024, None);
    state.authn.token_file = Some(Arc::new(wasm_apiserver_api::authn::TokenFile::parse(
        RBAC_TOKEN_FILE,
    )?));
    state
        .authz
        .set_modes(wasm_apiserver::authz::Authorizer::parse(mode)?);
    let state = Arc::new(state);
    wasm_apiserver::namespaces::ensure_initial(&state.objects).await?;
    let opts = WriteOptions::system("bench");
    let info = |group: &str, plural: &str| {
        state
            .registry
            .get(group, "v1", plural)
            .cloned()
            .ok_or_else(|| format!("no resource {group}/v1 {plural}"))
    };
    if mode == RBAC {
        wasm_apiserver::authz::ensure_bootstrap_policy(&state.objects).await?;
        let binding = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "bench-view", "namespace": "default"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view"
            },
            "subjects": [{
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": RBAC_USER
            }]
        });
        state
            .objects
            .create(
                &info("rbac.authorization.k8s.io", "rolebindings")?,
                Some("default"),
                binding,
                &opts,
            )
            .await?;
        wasm_apiserver::authz::reload(&state.objects, &state.authz).await?;
    }
    let configmap: serde_json::Value = serde_json::from_slice(&configmap(RBAC_OBJECT, 0))?;
    state
        .objects
        .create(&info("", "configmaps")?, Some("default"), configmap, &opts)
        .await?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(state)).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok(Served { addr, task })
}

/// Issue 4: GETs with a bearer token through RBAC vs AlwaysAllow, each on a
/// fresh server, `clients` keep-alive clients, the two modes taking turns in
/// [`RBAC_ROUNDS`] rounds. A GET with the token is checked to answer 200 on
/// both first, and one without it 403 under RBAC (anonymous has no binding).
async fn rbac(
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
        let server = srv.spawn(serve_authz(store, mode)).await??;
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
fn print_rbac_targets(rows: &[Row]) {
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

/// Adds the operations, time and CPU of `more` (same scenario) to `into`;
/// CPU averages weighted by time. Leaves the latencies unsorted.
fn merge(into: &mut Row, more: Row) {
    let (a, b) = (into.seconds, more.seconds);
    let avg = |x: f64, y: f64| (x * a + y * b) / (a + b).max(f64::MIN_POSITIVE);
    into.cpu = match (into.cpu, more.cpu) {
        (Some(x), Some(y)) => Some(Cpu {
            server: avg(x.server, y.server),
            client: avg(x.client, y.client),
            etcd: x.etcd.zip(y.etcd).map(|(x, y)| avg(x, y)),
            others: avg(x.others, y.others),
        }),
        _ => None,
    };
    into.ops += more.ops;
    into.errors += more.errors;
    into.seconds += more.seconds;
    into.latencies.extend(more.latencies);
}

/// Closed-loop creates of ConfigMaps carrying [`REQUIRED_LABEL`].
async fn admission_create(
    api: &Api,
    variant: &str,
    clients: usize,
    round: usize,
    window: Duration,
) -> Result<Row, Error> {
    let uri: Uri = format!("/api/v1/namespaces/{NS_CREATE}/configmaps").parse()?;
    let make: MakeRequest = Arc::new(move |api, w, i| {
        api.request(
            Method::POST,
            uri.clone(),
            Some((
                "application/json",
                configmap_labelled(&format!("c{clients}-{round}-{w}-{i}"), i, REQUIRED_LABEL),
            )),
        )
    });
    closed_loop(
        api,
        &admission_scenario(variant),
        clients,
        window,
        StatusCode::CREATED,
        make,
    )
    .await
}

/// An AdmissionPlugin running `require_labels.wasm` on ConfigMap creates.
fn admission_plugin(name: &str) -> String {
    serde_json::json!({
        "apiVersion": "admission.wasm-apiserver.io/v1alpha1",
        "kind": "AdmissionPlugin",
        "metadata": {"name": name},
        "spec": {
            "module": {"file": "require_labels.wasm"},
            "phases": ["Validating"],
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "config": {"labels": [REQUIRED_LABEL]},
        }
    })
    .to_string()
}

/// A ValidatingWebhookConfiguration sending ConfigMap creates to `url`.
fn webhook_configuration(url: &str, ca_bundle: &str) -> String {
    serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "require-team"},
        "webhooks": [{
            "name": "team.bench.example.com",
            "clientConfig": {"url": url, "caBundle": ca_bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }]
    })
    .to_string()
}

/// The plugin runtime alone, in-process: cold compile (a new runtime on an
/// empty cache dir), cached load (a new runtime on a filled one), and
/// instantiate + `validate` per call. Loads include instantiating the
/// plugin once to check its configuration. Run it on the server runtime.
async fn plugin_costs(wasm: Vec<u8>, dir: PathBuf) -> Result<Vec<Row>, Error> {
    let config = format!(r#"{{"labels":["{REQUIRED_LABEL}"]}}"#);
    let runtime = |cache: PathBuf| {
        Runtime::new(RuntimeConfig {
            cache_dir: Some(cache),
            ..Default::default()
        })
    };
    let loads = |name: &str, n: usize, fresh_cache: bool| {
        let (dir, wasm, config, name) = (dir.clone(), &wasm, &config, name.to_owned());
        async move {
            let cpu = cpu_sample();
            let mut times = Vec::with_capacity(n);
            let (mut hits, mut misses) = (0, 0);
            let mut plugin = None;
            for i in 0..n {
                let cache = if fresh_cache {
                    dir.join(format!("cold-{i}"))
                } else {
                    dir.join("cold-0")
                };
                let rt = runtime(cache)?;
                let t = Instant::now();
                let p = rt
                    .load_admission(&name, wasm, config, Limits::default())
                    .await?;
                times.push(t.elapsed());
                let stats = rt.cache_stats();
                (hits, misses) = (hits + stats.hits, misses + stats.misses);
                plugin = Some(p);
            }
            let cpu = cpu_since(&cpu);
            let seconds = times.iter().sum::<Duration>().as_secs_f64();
            let mut latencies: Vec<u32> = times.iter().map(|t| t.as_micros() as u32).collect();
            latencies.sort_unstable();
            let row = Row {
                scenario: String::new(),
                clients: 1,
                ops: n as u64,
                errors: 0,
                seconds,
                latencies,
                cpu,
                note: format!(
                    "{} KiB component, new Runtime each; cache hits {hits}, misses {misses}",
                    wasm.len() / 1024
                ),
            };
            Ok::<_, Error>((row, plugin))
        }
    };
    let (mut cold, _) = loads("bench-cold", COLD_LOADS, true).await?;
    cold.scenario = "plugin: cold compile + load (require_labels.wasm)".into();
    let (mut cached, plugin) = loads("bench-cached", CACHED_LOADS, false).await?;
    cached.scenario = "plugin: cached load (same cache dir)".into();
    let plugin = plugin.ok_or("no plugin loaded")?;

    let request = AdmissionRequest {
        uid: "bench".into(),
        kind: Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        },
        resource: Gvr {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
        },
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: Some("c-0".into()),
        namespace: Some(NS_CREATE.into()),
        operation: Operation::Create,
        user: UserInfo {
            username: "system:admin".into(),
            ..Default::default()
        },
        dry_run: false,
        object: Some(serde_json::from_slice(&configmap_labelled(
            "c-0",
            0,
            REQUIRED_LABEL,
        ))?),
        old_object: None,
        options: None,
    };
    for _ in 0..PLUGIN_WARMUP_CALLS {
        plugin.validate(&request).await?;
    }
    let mut nanos = Vec::with_capacity(PLUGIN_CALLS);
    let mut errors = 0;
    let cpu = cpu_sample();
    let started = Instant::now();
    for _ in 0..PLUGIN_CALLS {
        let t = Instant::now();
        match plugin.validate(&request).await {
            Ok(r) if r.allowed => nanos.push(t.elapsed().as_nanos() as u64),
            _ => errors += 1,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_since(&cpu);
    nanos.sort_unstable();
    let at = |q: f64| percentile_us(&nanos, q);
    let mean = nanos.iter().sum::<u64>() as f64 / nanos.len().max(1) as f64 / 1e3;
    let per_call = Row {
        scenario: PLUGIN_CALL_SCENARIO.into(),
        clients: 1,
        ops: nanos.len() as u64,
        errors,
        seconds,
        latencies: nanos.iter().map(|n| (n / 1000) as u32).collect(),
        cpu,
        note: format!(
            "sequential, fresh Store each; mean {mean:.1} µs, p50 {:.1} µs, p99 {:.1} µs",
            at(0.5),
            at(0.99)
        ),
    };

    // The same sequential calls, each after touching COLD_BYTES of other
    // memory (as the rest of a request does): the call with cold caches,
    // which is what one client's create pays.
    let mut other = vec![0u8; COLD_BYTES];
    let mut cold_nanos = Vec::with_capacity(PLUGIN_CALLS / 4);
    for i in 0..PLUGIN_CALLS / 4 {
        for b in other.iter_mut().step_by(64) {
            *b = b.wrapping_add(i as u8);
        }
        std::hint::black_box(&other);
        let t = Instant::now();
        if plugin.validate(&request).await.is_ok_and(|r| r.allowed) {
            cold_nanos.push(t.elapsed().as_nanos() as u64);
        }
    }
    cold_nanos.sort_unstable();
    let cold_at = |q: f64| percentile_us(&cold_nanos, q);
    let cold_calls = Row {
        scenario: PLUGIN_COLD_SCENARIO.into(),
        clients: 1,
        ops: cold_nanos.len() as u64,
        errors: (PLUGIN_CALLS / 4 - cold_nanos.len()) as u64,
        seconds: 0.0,
        latencies: cold_nanos.iter().map(|n| (n / 1000) as u32).collect(),
        cpu: None,
        note: format!(
            "{} MiB of other memory written before each call; p50 {:.1} µs, p99 {:.1} µs",
            COLD_BYTES >> 20,
            cold_at(0.5),
            cold_at(0.99)
        ),
    };

    // The same calls from ADMISSION_CLIENTS tasks at once: throughput and
    // CPU per call when instances run side by side (as under load).
    let per_task = PLUGIN_CALLS / ADMISSION_CLIENTS;
    let request = Arc::new(request);
    let cpu = cpu_sample();
    let started = Instant::now();
    let tasks: Vec<_> = (0..ADMISSION_CLIENTS)
        .map(|_| {
            let (plugin, request) = (plugin.clone(), request.clone());
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_task);
                let mut errors = 0u64;
                for _ in 0..per_task {
                    let t = Instant::now();
                    match plugin.validate(&request).await {
                        Ok(r) if r.allowed => lat.push(t.elapsed().as_micros() as u32),
                        _ => errors += 1,
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let mut concurrent = Row {
        scenario: format!("plugin: instantiate + validate, {ADMISSION_CLIENTS} concurrent"),
        clients: ADMISSION_CLIENTS,
        ops: 0,
        errors: 0,
        seconds: 0.0,
        latencies: Vec::with_capacity(per_task * ADMISSION_CLIENTS),
        cpu: None,
        note: String::new(),
    };
    for t in tasks {
        let (lat, errors) = timeout(REQUEST_TIMEOUT, t).await??;
        concurrent.ops += lat.len() as u64;
        concurrent.errors += errors;
        concurrent.latencies.extend(lat);
    }
    concurrent.seconds = started.elapsed().as_secs_f64();
    concurrent.cpu = cpu_since(&cpu);
    concurrent.latencies.sort_unstable();
    if let Some(c) = concurrent.cpu {
        concurrent.note = format!(
            "server CPU per call {:.1} µs",
            c.server * 1e6 / concurrent.rate().max(1.0)
        );
    }
    Ok(vec![cold, cached, per_call, cold_calls, concurrent])
}

// --- etcd (issue 5) ----------------------------------------------------------------------

/// Without the `etcd` feature the scenario only says how to get it.
#[cfg(not(feature = "etcd"))]
async fn etcd(
    _srv: &Handle,
    _dir: &Path,
    _clients: usize,
    _window: Duration,
) -> Result<Vec<Row>, Error> {
    eprintln!("etcd: skipped, build with `--features etcd` (and etcd on PATH)");
    Ok(Vec::new())
}

/// Raw etcd-client puts and watches against the API server on the etcd
/// backend, on one `etcd` started for the run: raw puts, a replay of them
/// through one watch, [`WATCHERS`] raw watches of one key under paced
/// puts; then the API server's creates and watch delivery (its watch cache
/// makes one etcd watch of all its client watches).
#[cfg(feature = "etcd")]
async fn etcd(
    srv: &Handle,
    dir: &Path,
    clients: usize,
    window: Duration,
) -> Result<Vec<Row>, Error> {
    use wasm_apiserver_storage::etcd::{EtcdOptions, EtcdStore};

    let etcd = Etcd::start(&dir.join("etcd")).await?;
    let mut raw = etcd.client().await?;
    let version = raw.status().await?.version().to_string();

    // The API server on etcd first, to learn the size of a stored ConfigMap;
    // its watch cache starts at its first watch, after the raw scenarios.
    let endpoints = vec![etcd.endpoint.clone()];
    let store = srv
        .spawn(async move { EtcdStore::connect(&endpoints, "", EtcdOptions::default()).await })
        .await??;
    let server = srv.spawn(serve(Arc::new(store.clone()), None)).await??;
    let api = Api::new(server.addr);
    api.create_namespaces(&[NS_CREATE, NS_WATCH]).await?;
    api.create(
        &format!("/api/v1/namespaces/{NS_CREATE}/configmaps"),
        String::from_utf8(configmap("probe", 0).to_vec())?,
    )
    .await?;
    let stored = raw
        .get(
            format!("/registry/core/configmaps/{NS_CREATE}/"),
            Some(etcd_client::GetOptions::new().with_prefix().with_limit(1)),
        )
        .await?;
    let value_size = stored.kvs().first().map_or(400, |kv| kv.value().len());
    let prefix = format!("etcd {version}: ");

    // Raw puts, raw create transactions and the API server's creates take
    // turns, so that a slow patch of the shared machine hits all three.
    let slice = window / ETCD_ROUNDS as u32;
    let mut writes: [Option<Row>; 3] = [None, None, None];
    let mut put_revisions = (0, 0);
    for round in 0..ETCD_ROUNDS {
        for (i, mode) in [Some(RawWrite::Put), Some(RawWrite::CreateTxn), None]
            .into_iter()
            .enumerate()
        {
            let before = etcd.counters(&mut raw).await?;
            let mut row = match mode {
                Some(mode) => etcd_raw_put(&raw, clients, slice, value_size, mode, round).await?,
                None => create(&api, clients, slice, round).await?,
            };
            let after = etcd.counters(&mut raw).await?;
            if round == 0 {
                row.note = match mode {
                    Some(_) => row.note,
                    None => format!("~200 B objects, {value_size} B as stored"),
                };
                row.note.push_str(&format!(
                    "{} (first round); {ETCD_ROUNDS} interleaved rounds",
                    after.per_write(&before)
                ));
                if mode == Some(RawWrite::Put) {
                    put_revisions = (before.revision, after.revision);
                }
            }
            match &mut writes[i] {
                Some(into) => merge(into, row),
                slot => *slot = Some(row),
            }
        }
    }
    let [put, txn, api_create] = writes;
    let names = [
        "raw put (etcd-client)",
        "raw create txn (etcd-client)",
        "apiserver create ConfigMap (POST)",
    ];
    let mut rows = Vec::new();
    for (mut row, name) in [put, txn, api_create].into_iter().flatten().zip(names) {
        row.scenario = format!("{prefix}{name}");
        row.latencies.sort_unstable();
        rows.push(row);
    }
    let (from, to) = put_revisions;
    let mut replay = etcd_raw_replay(&raw, from + 1, to.min(from + REPLAY_EVENTS)).await?;
    replay.scenario = format!("{prefix}raw watch replay (1 watch)");
    rows.push(replay);
    rows.extend(etcd_raw_watch(&raw, &prefix, WATCHERS, WATCH_WRITES, WATCH_PACE).await?);
    let mut watched = watch(&api, WATCHERS, WATCH_WRITES, WATCH_PACE).await?;
    for r in &mut watched {
        r.scenario = format!("{prefix}apiserver {}", r.scenario);
    }
    if let Some(r) = watched.last_mut() {
        r.note.push_str(&format!(
            ", {} etcd watch(es) for {WATCHERS} client watches",
            store.etcd_watch_count()
        ));
    }
    rows.extend(watched);
    drop(server);
    drop(etcd);
    Ok(rows)
}

/// One `etcd` on free loopback ports, its data in a directory of the run;
/// killed on drop.
#[cfg(feature = "etcd")]
struct Etcd {
    child: std::process::Child,
    endpoint: String,
}

#[cfg(feature = "etcd")]
impl Drop for Etcd {
    fn drop(&mut self) {
        ETCD_PID.store(0, Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(feature = "etcd")]
impl Etcd {
    /// Starts etcd in `dir` and waits (bounded) until it answers; tries
    /// again on fresh ports if one was taken meanwhile.
    async fn start(dir: &Path) -> Result<Etcd, Error> {
        let free_port = || -> Result<u16, Error> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port())
        };
        for attempt in 0..3 {
            let data = dir.join(format!("attempt-{attempt}"));
            std::fs::create_dir_all(&data)?;
            let (client, peer) = (free_port()?, free_port()?);
            let endpoint = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(data.join("etcd.log"))?;
            let child = std::process::Command::new("etcd")
                .args(["--name", "n1", "--data-dir"])
                .arg(data.join("data"))
                .args(["--listen-client-urls", &endpoint])
                .args(["--advertise-client-urls", &endpoint])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("n1={peer_url}")])
                .args(["--logger", "zap", "--log-level", "warn"])
                .args(etcd_args().split_whitespace())
                .stdin(std::process::Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .map_err(|e| format!("starting etcd: {e} (scripts/install-etcd-deps.sh)"))?;
            ETCD_PID.store(child.id(), Ordering::Relaxed);
            let mut etcd = Etcd { child, endpoint };
            let deadline = Instant::now() + ETCD_START;
            while Instant::now() < deadline && etcd.child.try_wait()?.is_none() {
                if let Ok(mut c) = etcd.client().await
                    && timeout(Duration::from_secs(1), c.status())
                        .await
                        .is_ok_and(|r| r.is_ok())
                {
                    return Ok(etcd);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            eprintln!(
                "etcd did not start; its log:\n{}",
                std::fs::read_to_string(data.join("etcd.log")).unwrap_or_default()
            );
        }
        Err("could not start etcd".into())
    }

    /// etcd's revision and its counters of gRPC calls (by method) and WAL
    /// fsyncs, from its `/metrics`.
    async fn counters(&self, client: &mut etcd_client::Client) -> Result<EtcdCounters, Error> {
        let revision = client
            .get("/bench-raw/", None)
            .await?
            .header()
            .map_or(0, |h| h.revision());
        let addr: SocketAddr = self.endpoint.trim_start_matches("http://").parse()?;
        let api = Api::new(addr);
        let req = api.request(Method::GET, Uri::from_static("/metrics"), None);
        let (status, body) = send(&mut api.connect().await?, req).await?;
        if status != StatusCode::OK {
            return Err(format!("etcd /metrics: {status}").into());
        }
        let mut calls = std::collections::BTreeMap::new();
        for line in String::from_utf8_lossy(&body).lines() {
            let value = || {
                line.rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            if line.starts_with("grpc_server_handled_total{") {
                if let Some(method) = line
                    .split("grpc_method=\"")
                    .nth(1)
                    .and_then(|m| m.split('"').next())
                {
                    *calls.entry(method.to_owned()).or_insert(0.0) += value();
                }
            } else if line.starts_with("etcd_disk_wal_fsync_duration_seconds_count") {
                *calls.entry("WAL fsync".to_owned()).or_insert(0.0) += value();
            }
        }
        Ok(EtcdCounters { revision, calls })
    }

    /// A raw etcd client (one HTTP/2 connection, shared by its clones).
    async fn client(&self) -> Result<etcd_client::Client, Error> {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(REQUEST_TIMEOUT);
        Ok(timeout(
            CONNECT_TIMEOUT,
            etcd_client::Client::connect([self.endpoint.as_str()], Some(options)),
        )
        .await??)
    }
}

/// A snapshot of etcd's revision and counters.
#[cfg(feature = "etcd")]
struct EtcdCounters {
    revision: i64,
    calls: std::collections::BTreeMap<String, f64>,
}

#[cfg(feature = "etcd")]
impl EtcdCounters {
    /// The gRPC calls and fsyncs since `before` per revision (per write),
    /// warm-up included, as a note suffix.
    fn per_write(&self, before: &EtcdCounters) -> String {
        let writes = (self.revision - before.revision).max(1) as f64;
        let per: Vec<String> = self
            .calls
            .iter()
            .filter_map(|(k, v)| {
                let d = v - before.calls.get(k).copied().unwrap_or(0.0);
                (d > 0.0).then(|| format!("{k} {:.2}", d / writes))
            })
            .collect();
        format!("; per write in etcd: {}", per.join(", "))
    }
}

/// `clients` closed loops of writes of new keys (`value_size` bytes each)
/// through clones of one client, each write as `mode` says.
#[cfg(feature = "etcd")]
async fn etcd_raw_put(
    client: &etcd_client::Client,
    clients: usize,
    window: Duration,
    value_size: usize,
    mode: RawWrite,
    round: usize,
) -> Result<Row, Error> {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let value = vec![b'x'; value_size];
    let begin = Instant::now() + WARMUP;
    let end = begin + window;
    let tasks: Vec<_> = (0..clients)
        .map(|w| {
            let (mut client, value) = (client.clone(), value.clone());
            tokio::spawn(async move {
                let mut stats = WorkerStats {
                    ops: 0,
                    errors: 0,
                    latencies: Vec::with_capacity(1 << 16),
                };
                let mut first_error = None;
                for i in 0u64.. {
                    let start = Instant::now();
                    if start >= end {
                        break;
                    }
                    let key = format!("/bench-raw/{mode:?}/{round}/{w}/{i}");
                    let write = async {
                        if mode == RawWrite::Put {
                            client.put(key, value.clone(), None).await.map(|_| ())
                        } else {
                            let txn = Txn::new()
                                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                                .and_then([TxnOp::put(key, value.clone(), None)]);
                            client.txn(txn).await.map(|_| ())
                        }
                    };
                    let result = timeout(REQUEST_TIMEOUT, write).await;
                    let counted = start >= begin;
                    match result {
                        Ok(Ok(_)) => {
                            if counted {
                                stats.ops += 1;
                                stats
                                    .latencies
                                    .push(start.elapsed().as_micros().min(u128::from(u32::MAX))
                                        as u32);
                            }
                        }
                        Ok(Err(e)) => {
                            stats.errors += u64::from(counted);
                            first_error.get_or_insert_with(|| e.to_string());
                        }
                        Err(_) => {
                            stats.errors += u64::from(counted);
                            first_error.get_or_insert_with(|| "timeout".into());
                        }
                    }
                }
                if let Some(e) = first_error {
                    eprintln!("raw put client {w}: first error: {e}");
                }
                stats
            })
        })
        .collect();
    tokio::time::sleep_until(begin.into()).await;
    let cpu = cpu_sample();
    tokio::time::sleep_until(end.into()).await;
    let cpu = cpu_since(&cpu);
    let mut row = Row {
        scenario: String::new(),
        clients,
        ops: 0,
        errors: 0,
        seconds: window.as_secs_f64(),
        latencies: Vec::new(),
        cpu,
        note: format!(
            "{value_size} B values (a stored ConfigMap's size), new keys, one connection"
        ),
    };
    for t in tasks {
        let stats = timeout(REQUEST_TIMEOUT + CONNECT_TIMEOUT, t).await??;
        row.ops += stats.ops;
        row.errors += stats.errors;
        row.latencies.extend(stats.latencies);
    }
    row.latencies.sort_unstable();
    Ok(row)
}

/// Extra `etcd` flags: `BENCH_ETCD_ARGS`, else [`ETCD_ARGS`].
#[cfg(feature = "etcd")]
fn etcd_args() -> String {
    std::env::var("BENCH_ETCD_ARGS").unwrap_or_else(|_| ETCD_ARGS.to_owned())
}

/// The etcd calls one raw write makes.
#[cfg(feature = "etcd")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RawWrite {
    /// A plain put.
    Put,
    /// A create-if-absent transaction: what the API server sends per create.
    CreateTxn,
}

/// Replays revisions `from..=to` (the raw puts) through one prefix watch
/// from an old revision: how fast one etcd watch catches up.
#[cfg(feature = "etcd")]
async fn etcd_raw_replay(client: &etcd_client::Client, from: i64, to: i64) -> Result<Row, Error> {
    let expected = (to - from + 1).max(0) as u64;
    let mut client = client.clone();
    let cpu = cpu_sample();
    let started = Instant::now();
    let options = etcd_client::WatchOptions::new()
        .with_prefix()
        .with_start_revision(from);
    let mut stream = client
        .watch(format!("/bench-raw/{:?}/", RawWrite::Put), Some(options))
        .await?;
    let deadline = tokio::time::Instant::now() + ETCD_REPLAY;
    let mut events = 0u64;
    let mut last = 0;
    while last < to {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Ok(Ok(Some(resp))) => {
                if resp.canceled() {
                    return Err(format!("replay watch canceled: {}", resp.cancel_reason()).into());
                }
                events += resp.events().len() as u64;
                if let Some(kv) = resp.events().last().and_then(|e| e.kv()) {
                    last = kv.mod_revision();
                }
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => break,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_since(&cpu);
    Ok(Row {
        scenario: String::new(),
        clients: 1,
        ops: events,
        errors: expected.saturating_sub(events),
        seconds,
        latencies: Vec::new(),
        cpu,
        note: format!("{expected} of the raw puts' events, from revision {from} (catch-up)"),
    })
}

/// `watchers` raw etcd watches (one stream each, on one connection) of one
/// key, then `writes` paced puts of it: as [`watch`], without the API server.
#[cfg(feature = "etcd")]
async fn etcd_raw_watch(
    client: &etcd_client::Client,
    prefix: &str,
    watchers: usize,
    writes: usize,
    pace: Duration,
) -> Result<Vec<Row>, Error> {
    const KEY: &str = "/bench-raw/watch/target";
    let mut client = client.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let warm = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let mut stream = timeout(REQUEST_TIMEOUT, client.watch(KEY, None)).await??;
        // The first response confirms the watch exists.
        let created = timeout(REQUEST_TIMEOUT, stream.message()).await??;
        if !created.is_some_and(|r| r.created()) {
            return Err("raw watch not created".into());
        }
        let (warm, stop) = (warm.clone(), stop_rx.clone());
        tasks.push(tokio::spawn(async move {
            raw_watcher(stream, writes, &warm, stop).await
        }));
    }
    client.put(KEY, "0", None).await?;
    wait_warm(&warm, watchers).await;

    let cpu = cpu_sample();
    let started = Instant::now();
    let mut sent = Vec::with_capacity(writes + 1);
    sent.push(started);
    let mut write_latencies = Vec::with_capacity(writes);
    let mut write_errors = 0;
    let mut ticker = tokio::time::interval(pace);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for seq in 1..=writes {
        ticker.tick().await;
        let t = Instant::now();
        sent.push(t);
        match timeout(REQUEST_TIMEOUT, client.put(KEY, seq.to_string(), None)).await {
            Ok(Ok(_)) => write_latencies.push(t.elapsed().as_micros() as u32),
            _ => write_errors += 1,
        }
    }
    let writes_done = Instant::now();
    let received = drain(tasks, &stop_tx).await?;
    let finished = Instant::now();
    let cpu = cpu_since(&cpu);
    Ok(watch_rows(
        &format!("{prefix}raw "),
        "paced put",
        WatchRun {
            watchers,
            writes,
            pace,
            started,
            sent,
            write_latencies,
            write_errors,
            writes_done,
            received,
            finished,
            cpu,
        },
    ))
}

/// Reads a raw watch until it has `writes` numbered events after the
/// warm-up one (value `0`), the stream ends, or `stop` is raised.
#[cfg(feature = "etcd")]
async fn raw_watcher(
    mut stream: etcd_client::WatchStream,
    writes: usize,
    warm: &AtomicUsize,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Received {
    let mut out = Received {
        events: Vec::with_capacity(writes + 1),
        errors: 0,
    };
    loop {
        let message = tokio::select! {
            m = stream.message() => m,
            _ = stop.wait_for(|s| *s) => return out,
        };
        let Ok(Some(resp)) = message else { return out };
        let at = Instant::now();
        for event in resp.events() {
            let seq = event
                .kv()
                .and_then(|kv| std::str::from_utf8(kv.value()).ok())
                .and_then(|v| v.parse::<usize>().ok());
            match seq {
                Some(0) => {
                    warm.fetch_add(1, Ordering::AcqRel);
                }
                Some(seq) => {
                    out.events.push((seq, at));
                    if out.events.len() >= writes {
                        return out;
                    }
                }
                None => out.errors += 1,
            }
        }
    }
}

/// Issue 5: the API server's creates on etcd against raw puts, and watch
/// delivery raw, through the API server on etcd, and on the embedded store.
#[cfg(feature = "etcd")]
fn print_etcd_targets(rows: &[Row]) {
    let by = |part: &str| rows.iter().find(|r| r.scenario.contains(part));
    let (Some(raw), Some(api)) = (by("raw put"), by("apiserver create")) else {
        return;
    };
    let ratio = api.rate() / raw.rate();
    println!("\netcd flags for every etcd row: {}", etcd_args());
    println!(
        "target apiserver creates on etcd >= {:.0}% of raw etcd puts: {} ({:.0}/s vs {:.0}/s = {:.0}%, \
         {} vs {} clients)",
        TARGET_ETCD_CREATE_RATIO * 100.0,
        met(ratio >= TARGET_ETCD_CREATE_RATIO),
        api.rate(),
        raw.rate(),
        ratio * 100.0,
        api.clients,
        raw.clients
    );
    if let Some(embedded) = rows.iter().find(|r| r.scenario.starts_with("create")) {
        println!(
            "embedded store creates/s {:.0} = {:.1}x the etcd backend's",
            embedded.rate(),
            embedded.rate() / api.rate()
        );
    }
    if let Some(pattern) = by("raw create txn") {
        println!(
            "raw etcd create txn (the apiserver's one call per create): {:.0}/s = {:.0}% of raw puts; \
             apiserver creates on etcd = {:.0}% of it",
            pattern.rate(),
            pattern.rate() / raw.rate() * 100.0,
            api.rate() / pattern.rate() * 100.0
        );
    }
    if let Some(replay) = by("raw watch replay") {
        println!(
            "raw etcd watch events/s (one watch replaying the puts): {:.0}",
            replay.rate()
        );
    }
    let delivery = |r: Option<&Row>| {
        r.map_or_else(
            || "-".into(),
            |r| {
                format!(
                    "p50 {} p99 {} ({}/{} events)",
                    ms(r.percentile(0.5)),
                    ms(r.percentile(0.99)),
                    r.ops,
                    r.ops + r.errors
                )
            },
        )
    };
    println!(
        "watch delivery to {WATCHERS} watchers: raw etcd {}; apiserver on etcd {}; apiserver on the embedded store {}",
        delivery(by("raw watch delivery")),
        delivery(by("apiserver watch delivery")),
        delivery(
            rows.iter()
                .find(|r| r.scenario.starts_with("watch delivery"))
        ),
    );
}
