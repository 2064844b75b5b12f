//! The etcd scenario (issue 5): raw etcd-client writes and watches vs the API server on etcd.

use crate::harness::{Error, Row};
use std::path::Path;
use std::time::Duration;
use tokio::runtime::Handle;
#[cfg(feature = "etcd")]
use {
    crate::crud::{NS_CREATE, create},
    crate::harness::{
        Api, CONNECT_TIMEOUT, ETCD_PID, REQUEST_TIMEOUT, WARMUP, WorkerStats, configmap,
        cpu_sample, cpu_since, merge, met, ms, send, serve,
    },
    crate::watch::{
        NS_WATCH, Received, WATCH_PACE, WATCH_WRITES, WATCHERS, WatchRun, drain, wait_warm, watch,
        watch_rows,
    },
    hyper::{Method, StatusCode, Uri},
    std::net::SocketAddr,
    std::sync::Arc,
    std::sync::atomic::{AtomicUsize, Ordering},
    std::time::Instant,
    tokio::time::timeout,
};

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
pub(crate) const ETCD_ARGS: &str = "--backend-batch-interval=10ms";
/// Rounds raw puts, raw create transactions and API server creates take
/// turns in, each `BENCH_SECONDS / ETCD_ROUNDS` long.
#[cfg(feature = "etcd")]
const ETCD_ROUNDS: usize = 3;
#[cfg(feature = "etcd")]
const TARGET_ETCD_CREATE_RATIO: f64 = 0.5;
/// Issue 14: API server creates on etcd reach this share of the raw create
/// transaction's rate (the one etcd call a create makes), at equal clients.
#[cfg(feature = "etcd")]
const TARGET_ETCD_CREATE_TXN_RATIO: f64 = 0.8;

/// Without the `etcd` feature the scenario only says how to get it.
#[cfg(not(feature = "etcd"))]
pub(crate) async fn etcd(
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
pub(crate) async fn etcd(
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
    let burn = std::env::var("BENCH_ETCD_BURN_US")
        .ok()
        .and_then(|us| us.parse::<u64>().ok())
        .filter(|us| *us > 0);
    let mut modes = vec![Some(RawWrite::Put), Some(RawWrite::CreateTxn)];
    modes.extend(burn.map(|us| Some(RawWrite::CreateTxnBurning(us))));
    modes.push(None);
    let mut writes: Vec<Option<Row>> = modes.iter().map(|_| None).collect();
    let mut put_revisions = (0, 0);
    for round in 0..ETCD_ROUNDS {
        for (i, &mode) in modes.iter().enumerate() {
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
    let mut rows = Vec::new();
    for (row, mode) in writes.into_iter().zip(&modes) {
        let Some(mut row) = row else { continue };
        let name = match mode {
            Some(RawWrite::Put) => "raw put (etcd-client)".to_owned(),
            Some(RawWrite::CreateTxn) => "raw create txn (etcd-client)".to_owned(),
            Some(RawWrite::CreateTxnBurning(us)) => {
                format!("raw create txn (etcd-client) + {us} µs client CPU")
            }
            None => "apiserver create ConfigMap (POST)".to_owned(),
        };
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
                    let key = format!("/bench-raw/{}/{round}/{w}/{i}", mode.label());
                    if let RawWrite::CreateTxnBurning(us) = mode {
                        let spin = Instant::now();
                        while spin.elapsed() < Duration::from_micros(us) {
                            std::hint::spin_loop();
                        }
                    }
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
    /// The same, each after spinning this many µs on the client's thread:
    /// how the raw rate falls as the client side of a create costs more
    /// CPU on the cores etcd runs on (`BENCH_ETCD_BURN_US`).
    CreateTxnBurning(u64),
}

#[cfg(feature = "etcd")]
impl RawWrite {
    /// The key segment of this mode's writes.
    fn label(self) -> String {
        match self {
            RawWrite::Put => "Put".into(),
            RawWrite::CreateTxn => "CreateTxn".into(),
            RawWrite::CreateTxnBurning(us) => format!("CreateTxnBurning{us}"),
        }
    }
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
        .watch(
            format!("/bench-raw/{}/", RawWrite::Put.label()),
            Some(options),
        )
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
pub(crate) fn print_targets(rows: &[Row]) {
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
        // CPU per write from the CPU columns: what the rate ratio is made of
        // when both cores are shared by etcd and its clients.
        let per_op = |r: &Row| {
            r.cpu.map_or_else(
                || "-".into(),
                |c| {
                    let us = |cores: f64| cores * 1e6 / r.rate().max(1.0);
                    format!(
                        "server {:.0} µs, client {:.0} µs, etcd {:.0} µs",
                        us(c.server),
                        us(c.client),
                        us(c.etcd.unwrap_or(0.0))
                    )
                },
            )
        };
        println!(
            "CPU per write: raw create txn: {}; apiserver create: {}",
            per_op(pattern),
            per_op(api)
        );
        let share = api.rate() / pattern.rate();
        println!(
            "target apiserver creates on etcd >= {TARGET_ETCD_CREATE_TXN_RATIO:.1}x the raw create \
             txn: {} ({share:.2}x: {:.0} vs {:.0}/s, {} vs {} clients)",
            met(share >= TARGET_ETCD_CREATE_TXN_RATIO),
            api.rate(),
            pattern.rate(),
            api.clients,
            pattern.clients
        );
        if let Some(burning) = by("µs client CPU") {
            let client_us = |r: &Row| r.cpu.map_or(0.0, |c| c.client * 1e6 / r.rate().max(1.0));
            println!(
                "{}: {:.0}/s = {:.2}x the raw create txn, client CPU per txn {:.0} vs {:.0} µs \
                 (what the API server would keep if a create cost it only that much more CPU \
                 than the raw client, HTTP client included)",
                burning.scenario,
                burning.rate(),
                burning.rate() / pattern.rate(),
                client_us(burning),
                client_us(pattern)
            );
        }
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
