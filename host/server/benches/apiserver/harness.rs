//! The harness every scenario shares: the servers under test, the HTTP client, closed-loop load,
//! CPU accounting and the result table. Only this module names the server crate (`wasm_apiserver`),
//! beside the crate roots' global allocators.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use wasm_apiserver::server::{AppState, router};
use wasm_apiserver_plugins::{Runtime, RuntimeConfig};
use wasm_apiserver_registry::admission::Admission;
use wasm_apiserver_storage::Storage;
use wasm_apiserver_storage::embedded::{EmbeddedOptions, EmbeddedStore};

/// Untimed warm-up before each closed-loop window.
pub(crate) const WARMUP: Duration = Duration::from_millis(500);
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Pid of the `etcd` the `etcd` scenario runs (0: none), for its CPU column.
pub(crate) static ETCD_PID: AtomicU32 = AtomicU32::new(0);
/// Pid of the admission scenario's webhook when it runs in its own process
/// (0: none); its CPU counts as the server's.
pub(crate) static WEBHOOK_PID: AtomicU32 = AtomicU32::new(0);

pub(crate) type Body = Full<Bytes>;
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// With `BENCH_MARKS` set, prints when a window starts and ends on the
/// monotonic clock (`perf record -k CLOCK_MONOTONIC` stamps samples on the
/// same one), so a profile can be cut by window.
pub(crate) fn mark(what: &str, scenario: &str, round: usize) {
    if std::env::var_os("BENCH_MARKS").is_some() {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        eprintln!(
            "mark {what} {}.{:09} round {round} {scenario}",
            t.tv_sec, t.tv_nsec
        );
    }
}

/// A multi-threaded tokio runtime with a worker per core, its threads
/// named `name` (the CPU accounting tells them apart by name).
pub(crate) fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .thread_name(name)
        .enable_all()
        .build()
}

// --- servers under test ------------------------------------------------------------

/// Opens the store, serves the router on a free loopback port and creates the
/// initial namespaces.
pub(crate) async fn start_server(path: &Path) -> Result<SocketAddr, Error> {
    let storage: Arc<dyn Storage> =
        Arc::new(EmbeddedStore::open(path, EmbeddedOptions::default())?);
    let served = serve(storage, None).await?;
    let addr = served.addr;
    // Serves until the process ends.
    std::mem::forget(served);
    Ok(addr)
}

/// A router served on a loopback port; stops accepting when dropped.
pub(crate) struct Served {
    pub(crate) addr: SocketAddr,
    /// The server's state (its registry, for scenarios that start
    /// controllers on it).
    pub(crate) state: Arc<AppState>,
    task: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the router over `storage` (with `admission`, if any) on a free
/// loopback port, with the initial namespaces. Call it on the server runtime.
pub(crate) async fn serve(
    storage: Arc<dyn Storage>,
    admission: Option<Arc<Admission>>,
) -> Result<Served, Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(AppState::new(storage, addr, 3 * 1024 * 1024, admission));
    wasm_apiserver_registry::namespaces::ensure_initial(&state.objects).await?;
    let served_state = state.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(state)).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok(Served {
        addr,
        state: served_state,
        task,
    })
}

/// A fresh server (embedded store at `store`) with the admission chain on:
/// AdmissionPlugin modules are read from `plugins` and run on a plugin
/// runtime set up as `runtime`; returned with that runtime (for the
/// prepared-instance counters). Call it on the server runtime.
pub(crate) async fn serve_admission(
    store: PathBuf,
    plugins: PathBuf,
    runtime: RuntimeConfig,
    options: EmbeddedOptions,
) -> Result<(Served, Runtime), Error> {
    let storage: Arc<dyn Storage> = Arc::new(EmbeddedStore::open(&store, options)?);
    let runtime = Runtime::new(runtime)?;
    let admission = Admission::new(runtime.clone(), Some(plugins), storage.clone());
    Ok((serve(storage, Some(Arc::new(admission))).await?, runtime))
}

/// A fresh server (embedded store) authenticating the token-file lines
/// `token_file` and authorizing with `mode`, holding the ConfigMap `object`
/// in `default`; given a `viewer` (for RBAC), also the bootstrap policy and
/// a RoleBinding of `view` to that user in `default`. Call it on the server
/// runtime.
pub(crate) async fn serve_authz(
    store: PathBuf,
    mode: &'static str,
    token_file: &'static str,
    viewer: Option<&'static str>,
    object: &'static str,
) -> Result<Served, Error> {
    use wasm_apiserver_registry::WriteOptions;
    let storage: Arc<dyn Storage> =
        Arc::new(EmbeddedStore::open(&store, EmbeddedOptions::default())?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut state = AppState::new(storage, addr, 3 * 1024 * 1024, None);
    state.authn.token_file = Some(Arc::new(wasm_apiserver_api::authn::TokenFile::parse(
        token_file,
    )?));
    state
        .authz
        .set_modes(wasm_apiserver::authz::Authorizer::parse(mode)?);
    let state = Arc::new(state);
    wasm_apiserver_registry::namespaces::ensure_initial(&state.objects).await?;
    let opts = WriteOptions::system("bench");
    let info = |group: &str, plural: &str| {
        state
            .resources
            .get(group, "v1", plural)
            .ok_or_else(|| format!("no resource {group}/v1 {plural}"))
    };
    if let Some(viewer) = viewer {
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
                "name": viewer
            }]
        });
        state
            .objects
            .create(
                &*info("rbac.authorization.k8s.io", "rolebindings")?,
                Some("default"),
                binding,
                &opts,
            )
            .await?;
        wasm_apiserver::authz::reload(&state.objects, &state.authz).await?;
    }
    let configmap: serde_json::Value = serde_json::from_slice(&configmap(object, 0))?;
    state
        .objects
        .create(&*info("", "configmaps")?, Some("default"), configmap, &opts)
        .await?;
    let served_state = state.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(state)).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok(Served {
        addr,
        state: served_state,
        task,
    })
}

// --- results -------------------------------------------------------------------

/// One line of the result table.
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) clients: usize,
    pub(crate) ops: u64,
    pub(crate) errors: u64,
    pub(crate) seconds: f64,
    /// Per-operation latencies in microseconds, sorted.
    pub(crate) latencies: Vec<u32>,
    /// CPU use during the window.
    pub(crate) cpu: Option<Cpu>,
    pub(crate) note: String,
}

impl Row {
    pub(crate) fn percentile(&self, q: f64) -> Option<Duration> {
        let n = self.latencies.len();
        if n == 0 {
            return None;
        }
        let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
        Some(Duration::from_micros(u64::from(self.latencies[i])))
    }
    pub(crate) fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// The `q` quantile of sorted nanosecond samples, in µs (0 for none).
pub(crate) fn percentile_us(sorted_nanos: &[u64], q: f64) -> f64 {
    let n = sorted_nanos.len();
    let i = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
    sorted_nanos.get(i).map_or(0.0, |n| *n as f64 / 1e3)
}

/// A latency: in µs below a millisecond, else in ms.
pub(crate) fn ms(d: Option<Duration>) -> String {
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

/// The result table, in Markdown.
pub(crate) fn print_table(rows: &[Row]) {
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

/// The row of `scenario` with `clients` clients.
pub(crate) fn find<'a>(rows: &'a [Row], scenario: &str, clients: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.clients == clients)
}

/// "met" or "MISSED".
pub(crate) fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// Adds the operations, time and CPU of `more` (same scenario) to `into`;
/// CPU averages weighted by time. Leaves the latencies unsorted.
pub(crate) fn merge(into: &mut Row, more: Row) {
    let (a, b) = (into.seconds, more.seconds);
    let avg = |x: f64, y: f64| (x * a + y * b) / (a + b).max(f64::MIN_POSITIVE);
    into.cpu = match (into.cpu, more.cpu) {
        (Some(x), Some(y)) => Some(Cpu {
            server: avg(x.server, y.server),
            store: avg(x.store, y.store),
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

// --- CPU accounting --------------------------------------------------------------

/// Process CPU time split into server threads and everything else, and the
/// busy time of the whole machine (to see other processes competing).
pub(crate) struct CpuSample {
    at: Instant,
    server: u64,
    /// The embedded store's writer thread (part of `server`).
    store: u64,
    total: u64,
    /// The `etcd` process, when one runs.
    etcd: Option<u64>,
    /// The webhook's own process, when one runs.
    webhook: Option<u64>,
    machine: u64,
}

/// Clock ticks per second of `/proc` times (USER_HZ, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// A sample of the CPU times, for [`cpu_since`].
pub(crate) fn cpu_sample() -> Option<CpuSample> {
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
    let (mut server, mut store) = (0, 0);
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if let Some((comm, ticks)) = parse(&stat)
            && (comm.starts_with("srv-")
                || comm.starts_with("hook-")
                // The plugin runtime's threads (the preparer, the epoch
                // ticker) work for the server too.
                || comm.starts_with("wasm-")
                // Where the server builds LIST responses.
                || comm.starts_with("bulk")
                // Where the controllers' background work (the audit) runs.
                || comm.starts_with("background")
                || comm.starts_with("embedded-store"))
        {
            server += ticks;
            if comm.starts_with("embedded-store") {
                store += ticks;
            }
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
    let process = |pid: &AtomicU32| match pid.load(Ordering::Relaxed) {
        0 => None,
        pid => std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse(&s).map(|(_, ticks)| ticks)),
    };
    Some(CpuSample {
        at,
        server,
        store,
        total,
        etcd: process(&ETCD_PID),
        webhook: process(&WEBHOOK_PID),
        machine,
    })
}

/// Cores used by this process's server and client, and by other processes.
#[derive(Clone, Copy)]
pub(crate) struct Cpu {
    /// The server's threads, and the webhook's (its runtime's threads here,
    /// or its own process).
    pub(crate) server: f64,
    /// The embedded store's writer thread, of `server`.
    pub(crate) store: f64,
    pub(crate) client: f64,
    /// The `etcd` process, when one ran.
    pub(crate) etcd: Option<f64>,
    pub(crate) others: f64,
}

/// CPU use since `before`.
pub(crate) fn cpu_since(before: &Option<CpuSample>) -> Option<Cpu> {
    let (before, now) = (before.as_ref()?, cpu_sample()?);
    let secs = now.at.duration_since(before.at).as_secs_f64();
    let cores = |a: u64, b: u64| a.saturating_sub(b) as f64 / TICKS_PER_SEC / secs;
    let server = cores(now.server, before.server);
    let total = cores(now.total, before.total);
    let machine = cores(now.machine, before.machine);
    let child = |b: Option<u64>, n: Option<u64>| match (b, n) {
        (Some(b), Some(n)) => Some(cores(n, b)),
        _ => None,
    };
    let etcd = child(before.etcd, now.etcd);
    let webhook = child(before.webhook, now.webhook).unwrap_or(0.0);
    Some(Cpu {
        server: server + webhook,
        store: cores(now.store, before.store),
        client: (total - server).max(0.0),
        etcd,
        others: (machine - total - webhook - etcd.unwrap_or(0.0)).max(0.0),
    })
}

// --- HTTP plumbing -----------------------------------------------------------------

/// Where the server is, and how to talk to it.
pub(crate) struct Api {
    pub(crate) addr: SocketAddr,
    host: HeaderValue,
}

impl Api {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        Api {
            addr,
            host: HeaderValue::from_str(&addr.to_string()).expect("an address is a valid header"),
        }
    }

    /// One HTTP/1.1 keep-alive connection.
    pub(crate) async fn connect(&self) -> Result<SendRequest<Body>, Error> {
        let stream = timeout(CONNECT_TIMEOUT, TcpStream::connect(self.addr)).await??;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    pub(crate) fn request(
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

    /// Creates the namespaces `names`.
    pub(crate) async fn create_namespaces(&self, names: &[&str]) -> Result<(), Error> {
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
    pub(crate) async fn create(
        &self,
        path: &str,
        body: String,
    ) -> Result<serde_json::Value, Error> {
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

    /// DELETEs the object at `path` and expects a success.
    pub(crate) async fn delete(&self, path: &str) -> Result<(), Error> {
        let req = self.request(Method::DELETE, path.parse()?, None);
        let (status, body) = send(&mut self.connect().await?, req).await?;
        if !status.is_success() {
            return Err(
                format!("DELETE {path}: {status} {}", String::from_utf8_lossy(&body)).into(),
            );
        }
        Ok(())
    }

    /// Waits (at most 60 s) until the object at `path` reports
    /// `status.phase: Active`; `Failed` is an error at once.
    pub(crate) async fn wait_active(&self, path: &str) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let req = self.request(Method::GET, path.parse()?, None);
            let (_, body) = send(&mut self.connect().await?, req).await?;
            let obj: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            match obj["status"]["phase"].as_str() {
                Some("Active") => return Ok(()),
                Some("Failed") => return Err(format!("{path}: {}", obj["status"]).into()),
                _ if Instant::now() > deadline => {
                    return Err(format!("{path} is not Active: {}", obj["status"]).into());
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

/// Sends a request and reads the whole answer.
pub(crate) async fn send(
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
pub(crate) fn configmap(name: &str, seq: u64) -> Bytes {
    configmap_labelled(name, seq, "tier")
}

/// A ConfigMap of about 200 bytes with the labels `app` and `label`
/// (`tier`, or [`REQUIRED_LABEL`](crate::admission::REQUIRED_LABEL): the
/// same size either way).
pub(crate) fn configmap_labelled(name: &str, seq: u64, label: &str) -> Bytes {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"app":"bench","{label}":"load"}}}},"data":{{"seq":"{seq}","payload":"0123456789abcdef0123456789abcdef0123456789abcdef"}}}}"#
    )
    .into()
}

// --- closed-loop load ----------------------------------------------------------------

/// Builds the `i`-th request of client `w`.
pub(crate) type MakeRequest = Arc<dyn Fn(&Api, usize, u64) -> Request<Body> + Send + Sync>;

/// What one closed-loop client counted inside the window.
pub(crate) struct WorkerStats {
    pub(crate) ops: u64,
    pub(crate) errors: u64,
    pub(crate) latencies: Vec<u32>,
}

/// Runs `clients` closed loops (send, read the whole answer, repeat) for a
/// warm-up and then `window`; only requests started inside the window count.
pub(crate) async fn closed_loop(
    api: &Api,
    scenario: &str,
    clients: usize,
    window: Duration,
    expect: StatusCode,
    make: MakeRequest,
) -> Result<Row, Error> {
    paced_loop(api, scenario, clients, window, expect, make, None).await
}

/// [`closed_loop`], except that each client, when `interval` is given,
/// starts a request at most once per `interval` (on a fixed schedule; one
/// that falls behind it starts its next request at once, without catching
/// up the ones it missed): load at a set rate, so that variants can be
/// compared at equal throughput.
pub(crate) async fn paced_loop(
    api: &Api,
    scenario: &str,
    clients: usize,
    window: Duration,
    expect: StatusCode,
    make: MakeRequest,
    interval: Option<Duration>,
) -> Result<Row, Error> {
    let begin = Instant::now() + WARMUP;
    let end = begin + window;
    let tasks: Vec<_> = (0..clients)
        .map(|w| {
            let (api, make) = (Api::new(api.addr), make.clone());
            tokio::spawn(async move { worker(&api, w, begin, end, expect, &*make, interval).await })
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

/// One client of [`closed_loop`], on its own keep-alive connection.
async fn worker(
    api: &Api,
    w: usize,
    begin: Instant,
    end: Instant,
    expect: StatusCode,
    make: &(dyn Fn(&Api, usize, u64) -> Request<Body> + Send + Sync),
    interval: Option<Duration>,
) -> Result<WorkerStats, Error> {
    let mut conn = api.connect().await?;
    let mut stats = WorkerStats {
        ops: 0,
        errors: 0,
        latencies: Vec::with_capacity(1 << 16),
    };
    let mut first_error = None;
    // When paced: the interval and the next start, the clients' first
    // starts spread over one interval rather than all at once.
    let mut pace = interval.map(|i| (i, Instant::now() + i.mul_f64(((w * 37) % 64) as f64 / 64.0)));
    for i in 0.. {
        if let Some((interval, at)) = &mut pace {
            tokio::time::sleep_until((*at).into()).await;
            *at = (*at + *interval).max(Instant::now());
        }
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
