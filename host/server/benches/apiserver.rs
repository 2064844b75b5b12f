//! The benchmark of issue 2: throughput and watch latency of the API server on
//! the embedded store, over real HTTP/1.1 on loopback.
//!
//! ```text
//! cargo bench -p wasm-apiserver --bench apiserver [-- SCENARIO...]
//! ```
//!
//! Scenarios (a name given on the command line runs only the scenarios whose
//! name contains it): `create`, `get`, `list-1k`, `watch`. Each is a function
//! that returns one or more [`Row`]s; the table at the end is Markdown, so runs
//! can be pasted side by side. `BENCH_SECONDS` (default 5) sets the measured
//! window of the closed-loop scenarios and `BENCH_CLIENTS` (default 64) their
//! concurrency.
//!
//! The server and the load generator live in one process but in two tokio
//! runtimes (threads `srv-*` and `cli-*`), so they compete for the same cores
//! as two processes would; per-thread CPU time from `/proc/self/task` splits
//! the cores used between server (including the store's writer thread) and
//! client. Each closed-loop client owns one keep-alive connection.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::time::timeout;
use wasm_apiserver::server::{AppState, router};
use wasm_apiserver_storage::Storage;
use wasm_apiserver_storage::embedded::{EmbeddedOptions, EmbeddedStore};

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

type Body = Full<Bytes>;
type Error = Box<dyn std::error::Error + Send + Sync>;

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

    let dir = tempfile::tempdir()?;
    let addr = server_rt.block_on(start_server(&dir.path().join("store.redb")))?;
    let api = Api::new(addr);

    println!("wasm-apiserver benchmark: embedded store, HTTP/1.1 on {addr}");
    println!(
        "{cores} cores, shared by client and server (one process, a {cores}-worker tokio runtime each, \
         plus the store's writer thread); window {}s after {}ms warm-up",
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
        api.setup().await?;
        let mut rows = Vec::new();
        if wanted("create") {
            rows.push(create(&api, clients, window).await?);
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
        Ok::<_, Error>(rows)
    })?;

    println!();
    print_table(&rows);
    println!();
    print_targets(&rows);
    println!("\ntotal run time {:.1}s", started.elapsed().as_secs_f64());

    client_rt.shutdown_timeout(Duration::from_secs(1));
    server_rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// Opens the store, serves the router on a free loopback port and creates the
/// initial namespaces.
async fn start_server(path: &std::path::Path) -> Result<SocketAddr, Error> {
    let storage: Arc<dyn Storage> =
        Arc::new(EmbeddedStore::open(path, EmbeddedOptions::default())?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(AppState::new(storage, addr, 3 * 1024 * 1024, None));
    wasm_apiserver::namespaces::ensure_initial(&state.objects).await?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(state)).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok(addr)
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

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".into(),
        |d| format!("{:.2} ms", d.as_secs_f64() * 1e3),
    )
}

fn print_table(rows: &[Row]) {
    println!(
        "| scenario | clients | ops | errors | seconds | ops/s | p50 | p99 | max | server cores | client cores | other procs | note |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
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
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.0} | {} | {} | {} | {srv} | {cli} | {others} | {} |",
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
}

/// Process CPU time split into server threads and everything else, and the
/// busy time of the whole machine (to see other processes competing).
struct CpuSample {
    at: Instant,
    server: u64,
    total: u64,
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
            && (comm.starts_with("srv-") || comm.starts_with("embedded-store"))
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
    Some(CpuSample {
        at,
        server,
        total,
        machine,
    })
}

/// Cores used by this process's server and client, and by other processes.
#[derive(Clone, Copy)]
struct Cpu {
    server: f64,
    client: f64,
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
    Some(Cpu {
        server,
        client: (total - server).max(0.0),
        others: (machine - total).max(0.0),
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
        let mut conn = self.connect().await?;
        for ns in [NS_CREATE, NS_LIST, NS_WATCH] {
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
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"app":"bench","tier":"load"}}}},"data":{{"seq":"{seq}","payload":"0123456789abcdef0123456789abcdef0123456789abcdef"}}}}"#
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
async fn create(api: &Api, clients: usize, window: Duration) -> Result<Row, Error> {
    let uri: Uri = format!("/api/v1/namespaces/{NS_CREATE}/configmaps").parse()?;
    let make: MakeRequest = Arc::new(move |api, w, i| {
        api.request(
            Method::POST,
            uri.clone(),
            Some(("application/json", configmap(&format!("c-{w}-{i}"), i))),
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
    let warm_deadline = Instant::now() + REQUEST_TIMEOUT;
    while warm.load(Ordering::Acquire) < watchers && Instant::now() < warm_deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let warmed = warm.load(Ordering::Acquire);
    if warmed < watchers {
        eprintln!("watch: only {warmed} of {watchers} watchers saw the warm-up event");
    }

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

    // Wait for the watchers to see everything (bounded), then stop them.
    let drain_deadline = tokio::time::Instant::now() + WATCH_DRAIN;
    let mut received = Vec::with_capacity(watchers);
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
    let finished = Instant::now();
    let cpu = cpu_since(&cpu);

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
    Ok(vec![
        Row {
            scenario: "watch writes (paced PATCH)".into(),
            clients: 1,
            ops: write_latencies.len() as u64,
            errors: write_errors,
            seconds: writes_done.duration_since(started).as_secs_f64(),
            latencies: write_latencies,
            cpu: None,
            note: format!("during watch delivery to {watchers} watchers"),
        },
        Row {
            scenario: format!("watch delivery ({watchers} watchers)"),
            clients: watchers,
            ops: delivered,
            errors: expected - delivered,
            seconds: finished.duration_since(started).as_secs_f64(),
            latencies,
            cpu,
            note,
        },
    ])
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
