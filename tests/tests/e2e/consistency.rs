//! Fault campaigns: concurrent clients create, update (with resourceVersion
//! preconditions), delete, get, list and watch ConfigMaps of one namespace
//! through the real binary while the harness SIGKILLs (and restarts on the
//! same data dir) and SIGSTOPs (then SIGCONTs) the server, or on etcd a
//! replica, or etcd itself, or cuts the path between a replica and etcd
//! (each replica reaches etcd through a TCP proxy of the harness, which
//! drops every connection and then refuses or blackholes new ones for a
//! while). Every operation is recorded with its invocation
//! and completion; once the faults stop, a final list, a get of every key
//! and watches that must catch up with the last change close the history,
//! and `wasm-apiserver-history` checks it: per-key linearizability, watches
//! (each change once, in order, from the start + 1, or a clean 410), no
//! revision going backwards, no acknowledged write lost. A violation fails
//! the test with the shortest history that shows it; the whole history is
//! kept as JSON under the target dir.
//!
//! `CONSISTENCY_SECS` sets how long faults are injected (default 30 s per
//! store; `scripts/chaos` runs longer), `CONSISTENCY_SEED` the random seed
//! (printed by each run). The etcd campaign needs the server built with
//! etcd support (`--features wasm-apiserver/etcd`) and Debian's
//! `etcd-server` (`scripts/install-etcd-deps.sh`).

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use wasm_apiserver_e2e::Server;
use wasm_apiserver_e2e::etcd::EtcdCluster;
use wasm_apiserver_history::{
    Call, Event, EventKind, History, Item, Outcome, Recorder, Rv, WatchEnd, check,
};

/// Object names the clients use (a name is a key of the history); other
/// ConfigMaps of the namespace are ignored.
const PREFIX: &str = "h-";
const KEYS: usize = 8;
const CLIENTS: u32 = 6;
/// Bound on one request: past it the outcome is unknown.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the closing watches may take to catch up once faults stop.
const CATCH_UP: Duration = Duration::from_secs(20);
/// The client id of the closing operations.
const CLOSING_CLIENT: u32 = 1000;

// ---------------------------------------------------------------- campaigns

#[test]
fn embedded_store_under_sigkill_and_sigstop() {
    let seed = seed();
    let secs = campaign_secs();
    eprintln!("embedded campaign: {secs} s of faults, CONSISTENCY_SEED={seed}");
    let mut server = Server::start_with_args(&["--etcd-compaction-interval", "5s"]);
    let targets = vec![server.kubeconfig_path()];
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let faults = Faults::default();
    let history = run_campaign(seed, secs, &targets, &faults, |stop| {
        // Kinds in turn from a random one, so a short run has each.
        let mut turn: u64 = rng.random_range(0..2);
        while !sleep_unless(stop, rng.random_range(1_500..=4_000)) {
            turn += 1;
            if turn.is_multiple_of(2) {
                server.kill9();
                std::thread::sleep(Duration::from_millis(rng.random_range(0..=300)));
                server.restart();
                faults.note("server SIGKILL + restart");
            } else {
                let pid = pid_with_args(&["--data-dir", &server.data_dir().to_string_lossy()])
                    .unwrap_or_else(|| panic!("no pid for the server\n{}", server.diagnostics()));
                signal("STOP", pid);
                std::thread::sleep(Duration::from_millis(rng.random_range(300..=2_500)));
                signal("CONT", pid);
                faults.note("server SIGSTOP");
            }
        }
    });
    verdict("embedded", &history, &faults, |_| server.diagnostics());
}

#[test]
fn etcd_two_replicas_under_replica_and_etcd_faults() {
    let seed = seed();
    let secs = campaign_secs();
    eprintln!("etcd campaign: {secs} s of faults, CONSISTENCY_SEED={seed}");
    let mut etcd = EtcdCluster::start(1);
    let endpoint = etcd.endpoints()[0].clone();
    // Each replica reaches etcd through its own proxy, which a fault cuts.
    let etcd_addr: SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("etcd endpoint address");
    let proxies = [Proxy::start(etcd_addr), Proxy::start(etcd_addr)];
    let mut replicas = proxies.each_ref().map(|proxy| {
        let servers = format!("http://{}", proxy.addr());
        Server::start_with_args(&[
            "--etcd-servers",
            servers.as_str(),
            "--etcd-compaction-interval",
            "5s",
        ])
    });
    let targets: Vec<_> = replicas.iter().map(Server::kubeconfig_path).collect();
    let mut rng = StdRng::seed_from_u64(seed ^ 0xe7cd);
    let faults = Faults::default();
    let history = run_campaign(seed, secs, &targets, &faults, |stop| {
        let mut turn: u64 = rng.random_range(0..5);
        while !sleep_unless(stop, rng.random_range(1_500..=4_000)) {
            let r = rng.random_range(0..2) as usize;
            turn += 1;
            match turn % 5 {
                0 => {
                    replicas[r].kill9();
                    std::thread::sleep(Duration::from_millis(rng.random_range(0..=300)));
                    replicas[r].restart();
                    faults.note("replica SIGKILL + restart");
                }
                1 => {
                    let dir = replicas[r].data_dir();
                    let pid = pid_with_args(&["--data-dir", &dir.to_string_lossy()])
                        .expect("replica pid");
                    signal("STOP", pid);
                    std::thread::sleep(Duration::from_millis(rng.random_range(300..=2_500)));
                    signal("CONT", pid);
                    faults.note("replica SIGSTOP");
                }
                2 => {
                    etcd.kill_member(0);
                    std::thread::sleep(Duration::from_millis(rng.random_range(0..=1_000)));
                    etcd.restart_member(0);
                    faults.note("etcd SIGKILL + restart");
                }
                3 => {
                    // Half the cuts refuse new connections, half leave
                    // them hanging (a partition that drops packets).
                    let blackhole = rng.random_range(0..2) == 0;
                    proxies[r].cut(blackhole);
                    std::thread::sleep(Duration::from_millis(rng.random_range(1_000..=4_000)));
                    proxies[r].restore();
                    faults.note(if blackhole {
                        "replica-etcd path cut (blackholed) + restored"
                    } else {
                        "replica-etcd path cut (refused) + restored"
                    });
                }
                _ => {
                    let pid =
                        pid_with_args(&["--listen-client-urls", &endpoint]).expect("etcd pid");
                    signal("STOP", pid);
                    std::thread::sleep(Duration::from_millis(rng.random_range(300..=2_500)));
                    signal("CONT", pid);
                    faults.note("etcd SIGSTOP");
                }
            }
        }
    });
    verdict("etcd", &history, &faults, |_| {
        format!(
            "{}\n{}\n{}",
            replicas[0].diagnostics(),
            replicas[1].diagnostics(),
            etcd.logs()
        )
    });
}

// ------------------------------------------------------------------ harness

/// A TCP proxy on a free loopback port in front of `target` (etcd's client
/// port): one thread accepts, two per connection copy bytes. [`Proxy::cut`]
/// shuts down every connection it carries and, until [`Proxy::restore`],
/// closes each new one at once (the peer sees it refused) or holds it
/// without reading (a blackhole: the peer's requests hang). Stops on drop.
struct Proxy {
    addr: SocketAddr,
    state: Arc<ProxyState>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone, Copy, PartialEq)]
enum ProxyMode {
    Pass,
    Refuse,
    Blackhole,
}

struct ProxyState {
    target: SocketAddr,
    mode: Mutex<ProxyMode>,
    /// Every socket of every open connection (both sides), by connection,
    /// so that a cut can shut them down; `true` marks a blackholed one.
    open: Mutex<HashMap<u64, (bool, Vec<TcpStream>)>>,
    next_id: AtomicU64,
    stopped: AtomicBool,
}

impl ProxyState {
    fn track(&self, held: bool, sockets: &[&TcpStream]) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let clones = sockets.iter().filter_map(|s| s.try_clone().ok()).collect();
        self.open.lock().expect("proxy").insert(id, (held, clones));
        id
    }

    /// Shuts down every connection; returns how many there were.
    fn shut_down_all(&self) -> usize {
        let mut open = self.open.lock().expect("proxy");
        let n = open.len();
        for (_, (_, sockets)) in open.drain() {
            for s in sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        n
    }

    fn serve(self: &Arc<Self>, client: TcpStream) {
        let mode = *self.mode.lock().expect("proxy");
        match mode {
            ProxyMode::Refuse => {
                let _ = client.shutdown(Shutdown::Both);
            }
            ProxyMode::Blackhole => {
                // Never read: the peer's writes fill the buffers and hang.
                self.track(true, &[&client]);
            }
            ProxyMode::Pass => {
                let Ok(upstream) = TcpStream::connect_timeout(&self.target, Duration::from_secs(1))
                else {
                    let _ = client.shutdown(Shutdown::Both);
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                let id = self.track(false, &[&client, &upstream]);
                // A cut between the mode check and `track` would miss this
                // connection: check again.
                if *self.mode.lock().expect("proxy") != ProxyMode::Pass {
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = upstream.shutdown(Shutdown::Both);
                }
                for (from, to) in [(&client, &upstream), (&upstream, &client)] {
                    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let state = self.clone();
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = from.shutdown(Shutdown::Both);
                        let _ = to.shutdown(Shutdown::Both);
                        state.open.lock().expect("proxy").remove(&id);
                    });
                }
            }
        }
    }
}

impl Proxy {
    fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(ProxyState {
            target,
            mode: Mutex::new(ProxyMode::Pass),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        let acceptor = {
            let state = state.clone();
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if state.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(client) = client {
                        state.serve(client);
                    }
                }
            })
        };
        Proxy {
            addr,
            state,
            acceptor: Some(acceptor),
        }
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every connection; new ones are refused, or with `blackhole`
    /// accepted and never answered, until [`Proxy::restore`].
    fn cut(&self, blackhole: bool) {
        *self.state.mode.lock().expect("proxy") = if blackhole {
            ProxyMode::Blackhole
        } else {
            ProxyMode::Refuse
        };
        let dropped = self.state.shut_down_all();
        eprintln!("proxy {}: cut, {dropped} connections dropped", self.addr);
    }

    /// Lets connections through again (held blackholed ones are dropped:
    /// their peer reconnects).
    fn restore(&self) {
        *self.state.mode.lock().expect("proxy") = ProxyMode::Pass;
        self.state
            .open
            .lock()
            .expect("proxy")
            .retain(|_, (held, sockets)| {
                if *held {
                    for s in sockets.iter() {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
                !*held
            });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which then sees `stopped`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        self.state.shut_down_all();
    }
}

/// Faults injected, by kind.
#[derive(Default)]
struct Faults(Mutex<Vec<&'static str>>);

impl Faults {
    fn note(&self, what: &'static str) {
        eprintln!("fault: {what}");
        self.0.lock().expect("faults").push(what);
    }

    fn summary(&self) -> (usize, String) {
        let all = self.0.lock().expect("faults");
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for f in all.iter() {
            match counts.iter_mut().find(|(k, _)| k == f) {
                Some((_, n)) => *n += 1,
                None => counts.push((f, 1)),
            }
        }
        let text = counts
            .iter()
            .map(|(k, n)| format!("{n}× {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        (all.len(), text)
    }
}

/// Checks the history, prints the report and fails on any violation (with
/// the history kept as JSON), or when the campaign was too thin to mean
/// anything.
fn verdict(name: &str, history: &History, faults: &Faults, diagnostics: impl FnOnce(()) -> String) {
    let started = Instant::now();
    let report = check(history);
    let (injected, kinds) = faults.summary();
    eprintln!(
        "{name} campaign: {injected} faults ({kinds}); checked in {:.1} s\n{report}",
        started.elapsed().as_secs_f64()
    );
    if !report.is_ok() {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("consistency-{name}-{}.json", std::process::id()));
        let _ = std::fs::write(&path, history.to_json());
        panic!(
            "{name} campaign: the history violates the server's guarantees (whole history in \
             {}):\n{report}\n{}",
            path.display(),
            diagnostics(())
        );
    }
    let s = &report.stats;
    assert!(injected >= 2, "{name}: only {injected} faults injected");
    assert!(
        s.acknowledged_writes >= 50 && s.watch_events >= 20 && s.lists >= 10,
        "{name}: too little happened to check anything: {report}"
    );
    tampered_histories_fail(name, history);
}

/// The recorded history, tampered with as a faulty server would have
/// answered, must fail the check: a watch event dropped, and the closing
/// list showing a key's older state (a stale read: the closing gets after
/// it still see the write). So a campaign that passes did check something.
fn tampered_histories_fail(name: &str, history: &History) {
    let mut gap = history.clone();
    let dropped = gap.ops.iter_mut().find_map(|op| match &mut op.outcome {
        Outcome::Watched { events, .. } if events.len() >= 3 => Some(events.remove(1)),
        _ => None,
    });
    assert!(dropped.is_some(), "{name}: no watch delivered 3 events");
    let report = check(&gap);
    assert!(
        report.has(wasm_apiserver_history::Kind::WatchGap),
        "{name}: a dropped watch event went unnoticed:\n{report}"
    );

    let mut lost = history.clone();
    // The last list of the closing client, with one key rolled back to a
    // state an earlier list showed.
    let earlier: HashMap<String, Item> = lost
        .ops
        .iter()
        .filter(|op| op.client != CLOSING_CLIENT)
        .filter_map(|op| match &op.outcome {
            Outcome::Listed { items, .. } => Some(items.clone()),
            _ => None,
        })
        .flatten()
        .map(|item| (item.key.clone(), item))
        .collect::<Vec<_>>()
        .into_iter()
        .fold(HashMap::new(), |mut first, (k, item)| {
            first.entry(k).or_insert(item);
            first
        });
    let closing = lost
        .ops
        .iter_mut()
        .rev()
        .find_map(|op| match &mut op.outcome {
            Outcome::Listed { items, .. } if op.client == CLOSING_CLIENT => Some(items),
            _ => None,
        })
        .expect("a closing list");
    let rolled_back = closing.iter_mut().find_map(|item| {
        let old = earlier.get(&item.key).filter(|old| old.rv < item.rv)?;
        *item = old.clone();
        Some(item.key.clone())
    });
    let Some(key) = rolled_back else {
        eprintln!("{name}: no key to roll back in the closing list; skipping that self-check");
        return;
    };
    let report = check(&lost);
    // The stale read is what must be caught; the linearizability search
    // must either refute the key or, on a long concurrent history whose
    // refutation exhausts its step budget, say it could not decide (never
    // call it linearizable).
    assert!(
        (report.has(wasm_apiserver_history::Kind::StaleRead)
            || report.has(wasm_apiserver_history::Kind::LostWrite))
            && (report.has(wasm_apiserver_history::Kind::NotLinearizable)
                || report.undecided.contains(&key)),
        "{name}: rolling {key} back in the closing list went unnoticed:\n{report}"
    );
}

/// What the clients share: the recorder and the revisions seen so far (to
/// start watches and preconditions from).
struct Shared {
    recorder: Recorder,
    /// Per key, the newest revision seen (for update preconditions).
    latest: Mutex<HashMap<String, Rv>>,
    /// Every revision seen, in the order seen (for watch starts).
    seen: Mutex<Vec<Rv>>,
    stop: AtomicBool,
    watches: AtomicUsize,
    unexpected: Mutex<Vec<String>>,
}

impl Shared {
    fn saw(&self, key: &str, rv: Rv) {
        let mut latest = self.latest.lock().expect("latest");
        let e = latest.entry(key.to_string()).or_insert(0);
        *e = (*e).max(rv);
        self.seen.lock().expect("seen").push(rv);
    }

    fn forget(&self, key: &str) {
        self.latest.lock().expect("latest").remove(key);
    }
}

/// Runs `CLIENTS` clients (spread over `targets`, one kubeconfig per
/// server) for `secs` while `inject` injects faults on this thread until
/// told to stop (then every process must be running), and closes the
/// history with a list, a get per key and catching-up watches.
fn run_campaign(
    seed: u64,
    secs: u64,
    targets: &[std::path::PathBuf],
    faults: &Faults,
    inject: impl FnOnce(&AtomicBool) + Send,
) -> History {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let shared = Arc::new(Shared {
        recorder: Recorder::new(),
        latest: Mutex::new(HashMap::new()),
        seen: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        watches: AtomicUsize::new(0),
        unexpected: Mutex::new(Vec::new()),
    });
    let apis: Vec<Api<ConfigMap>> = {
        let _guard = rt.enter();
        targets
            .iter()
            .map(|kubeconfig| Api::namespaced(client_for(kubeconfig), "default"))
            .collect()
    };
    let fault_stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let injector = scope.spawn(|| inject(&fault_stop));
        // Stops the injector even if the clients panic (else the scope
        // would wait for it forever).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let _stop_injector = StopOnDrop(&fault_stop);
        rt.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(secs);
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|c| {
                    let api = apis[c as usize % apis.len()].clone();
                    let shared = shared.clone();
                    let rng = StdRng::seed_from_u64(
                        seed.wrapping_add(u64::from(c).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                    );
                    tokio::spawn(client(c, api, shared, deadline, rng))
                })
                .collect();
            for t in tasks {
                t.await.expect("client task");
            }
        });
        fault_stop.store(true, Ordering::SeqCst);
        if let Err(panic) = injector.join() {
            std::panic::resume_unwind(panic);
        }
    });
    shared.stop.store(true, Ordering::SeqCst);
    // Watches still running end at their own deadline (at most seconds).
    rt.block_on(async {
        let end = Instant::now() + Duration::from_secs(10);
        while shared.watches.load(Ordering::SeqCst) > 0 && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let (injected, _) = faults.summary();
    let unexpected = shared.unexpected.lock().expect("unexpected").clone();
    if !unexpected.is_empty() {
        eprintln!(
            "{} unexpected answers (recorded as unknown outcomes), e.g. {:?}",
            unexpected.len(),
            &unexpected[..unexpected.len().min(5)]
        );
    }
    eprintln!(
        "{injected} faults injected; closing the history ({} operations so far)",
        shared.recorder.history().ops.len()
    );
    rt.block_on(close(&apis, &shared, seed));
    shared.recorder.history()
}

/// The closing operations, with no fault running: a list and a get of
/// every key through each server, then watches from old and recent
/// revisions that must deliver every change up to the newest one known.
async fn close(apis: &[Api<ConfigMap>], shared: &Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc105e);
    for api in apis {
        // The first requests after the last fault may still find a server
        // restarting: retry the list until it answers.
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let rv = list(CLOSING_CLIENT, api, shared).await;
            if rv.is_some() || Instant::now() > end {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for k in 0..KEYS {
            get(CLOSING_CLIENT, api, shared, &key(k)).await;
        }
    }
    let history = shared.recorder.history();
    let newest = history
        .ops
        .iter()
        .flat_map(|op| changes_rvs(&op.outcome))
        .max()
        .unwrap_or(0);
    let seen = shared.seen.lock().expect("seen").clone();
    let mut starts: Vec<Rv> = vec![seen.iter().copied().min().unwrap_or(0)];
    for _ in 0..3 {
        if !seen.is_empty() {
            starts.push(seen[rng.random_range(0..seen.len() as u64) as usize]);
        }
    }
    starts.push(newest.saturating_sub(1));
    for (i, from) in starts.into_iter().enumerate() {
        let api = &apis[i % apis.len()];
        watch(CLOSING_CLIENT, api, shared, from, CATCH_UP, Some(newest)).await;
    }
}

fn changes_rvs(outcome: &Outcome) -> Vec<Rv> {
    match outcome {
        Outcome::Written { rv } | Outcome::Found { rv, .. } => vec![*rv],
        Outcome::Deleted { rv: Some(rv) } => vec![*rv],
        Outcome::Listed { items, .. } => items.iter().map(|i| i.rv).collect(),
        Outcome::Watched { events, .. } => events.iter().map(|e| e.rv).collect(),
        _ => Vec::new(),
    }
}

fn key(k: usize) -> String {
    format!("{PREFIX}{k}")
}

/// One client: random operations on random keys until `deadline`.
async fn client(
    id: u32,
    api: Api<ConfigMap>,
    shared: Arc<Shared>,
    deadline: Instant,
    mut rng: StdRng,
) {
    let mut seq = 0u64;
    let mut watch_task: Option<tokio::task::JoinHandle<()>> = None;
    while Instant::now() < deadline {
        let k = key(rng.random_range(0..KEYS as u64) as usize);
        let latest = shared.latest.lock().expect("latest").get(&k).copied();
        // Now and then a precondition from an older revision (a stale CAS).
        let expected = latest.map(|rv| {
            if rng.random_range(0..4) == 0 {
                rv.saturating_sub(rng.random_range(0..20))
            } else {
                rv
            }
        });
        let value = || format!("c{id}-{seq}");
        let roll = rng.random_range(0..100);
        let answered = match (roll, expected) {
            (0..20, _) => create(id, &api, &shared, &k, &value()).await,
            (20..50, Some(expected)) => update(id, &api, &shared, &k, expected, &value()).await,
            (50..60, _) => {
                let pre = if rng.random_range(0..4) == 0 {
                    None
                } else {
                    expected
                };
                delete(id, &api, &shared, &k, pre).await
            }
            (60..80, _) | (20..50, None) => get(id, &api, &shared, &k).await,
            (80..90, _) => list(id, &api, &shared).await.is_some(),
            _ => {
                if watch_task.as_ref().is_none_or(|t| t.is_finished()) {
                    let from = watch_start(&shared, &mut rng);
                    let duration = Duration::from_millis(rng.random_range(500..=4_000));
                    let (api, shared) = (api.clone(), shared.clone());
                    shared.watches.fetch_add(1, Ordering::SeqCst);
                    watch_task = Some(tokio::spawn(async move {
                        watch(id, &api, &shared, from, duration, None).await;
                        shared.watches.fetch_sub(1, Ordering::SeqCst);
                    }));
                }
                true
            }
        };
        seq += 1;
        if !answered {
            // The server is down or stopped: do not hammer it.
            tokio::time::sleep(Duration::from_millis(rng.random_range(50..=200))).await;
        }
    }
    if let Some(t) = watch_task {
        let _ = t.await;
    }
}

/// A watch start: mostly a recent revision, sometimes an old one (which
/// compaction may have removed: a clean 410 then).
fn watch_start(shared: &Shared, rng: &mut StdRng) -> Rv {
    let seen = shared.seen.lock().expect("seen");
    if seen.is_empty() {
        return 1;
    }
    let n = seen.len() as u64;
    let i = if rng.random_range(0..3) == 0 {
        rng.random_range(0..n)
    } else {
        n - 1 - rng.random_range(0..n.min(30))
    };
    seen[i as usize]
}

/// How a request ended, when it did not succeed.
enum Failure {
    /// A Kubernetes `Status` with a 4xx code the operation knows.
    Status(u16, String),
    /// Certainly never reached a server (connection refused).
    NotSent,
    /// No telling whether it took effect.
    Unknown(String),
}

/// Runs `fut` within [`REQUEST_TIMEOUT`] and sorts its errors.
async fn bounded<T>(fut: impl Future<Output = kube::Result<T>>) -> Result<T, Failure> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Err(_) => Err(Failure::Unknown("timed out".into())),
        Ok(Ok(v)) => Ok(v),
        Ok(Err(kube::Error::Api(status))) if status.code < 500 && status.code != 429 => {
            Err(Failure::Status(status.code, status.reason.clone()))
        }
        Ok(Err(kube::Error::Api(status))) => Err(Failure::Unknown(format!(
            "{} {}: {}",
            status.code, status.reason, status.message
        ))),
        Ok(Err(e)) => {
            let mut source: Option<&dyn std::error::Error> = Some(&e);
            while let Some(s) = source {
                if let Some(io) = s.downcast_ref::<std::io::Error>()
                    && io.kind() == std::io::ErrorKind::ConnectionRefused
                {
                    return Err(Failure::NotSent);
                }
                source = s.source();
            }
            Err(Failure::Unknown(e.to_string()))
        }
    }
}

fn rv_of(cm: &ConfigMap) -> Rv {
    cm.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no numeric resourceVersion in {cm:?}"))
}

fn value_of(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get("v"))
        .cloned()
        .unwrap_or_default()
}

fn config_map(key: &str, value: &str, rv: Option<Rv>) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(key.to_string());
    cm.metadata.resource_version = rv.map(|rv| rv.to_string());
    cm.data = Some([("v".to_string(), value.to_string())].into());
    cm
}

/// Records a failed write or read. Returns whether the server answered.
fn record_failure(
    shared: &Shared,
    pending: wasm_apiserver_history::Pending,
    failure: Failure,
    known: &[(u16, Outcome)],
) -> bool {
    match failure {
        Failure::NotSent => false,
        Failure::Status(code, reason) => {
            match known.iter().find(|(c, _)| *c == code) {
                Some((_, outcome)) => pending.complete(outcome.clone()),
                None => {
                    shared
                        .unexpected
                        .lock()
                        .expect("unexpected")
                        .push(format!("{code} {reason}"));
                    pending.never_answered(format!("{code} {reason}"));
                }
            }
            true
        }
        Failure::Unknown(reason) => {
            pending.never_answered(reason);
            false
        }
    }
}

async fn create(id: u32, api: &Api<ConfigMap>, shared: &Shared, key: &str, value: &str) -> bool {
    let call = Call::Create {
        key: key.into(),
        value: value.into(),
    };
    let pending = shared.recorder.invoke(id, call);
    match bounded(api.create(&PostParams::default(), &config_map(key, value, None))).await {
        Ok(cm) => {
            let rv = rv_of(&cm);
            pending.complete(Outcome::Written { rv });
            shared.saw(key, rv);
            true
        }
        Err(f) => record_failure(shared, pending, f, &[(409, Outcome::AlreadyExists)]),
    }
}

async fn update(
    id: u32,
    api: &Api<ConfigMap>,
    shared: &Shared,
    key: &str,
    expected: Rv,
    value: &str,
) -> bool {
    let call = Call::Update {
        key: key.into(),
        expected,
        value: value.into(),
    };
    let pending = shared.recorder.invoke(id, call);
    let body = config_map(key, value, Some(expected));
    match bounded(api.replace(key, &PostParams::default(), &body)).await {
        Ok(cm) => {
            let rv = rv_of(&cm);
            pending.complete(Outcome::Written { rv });
            shared.saw(key, rv);
            true
        }
        Err(f) => record_failure(
            shared,
            pending,
            f,
            &[(409, Outcome::Conflict), (404, Outcome::NotFound)],
        ),
    }
}

async fn delete(
    id: u32,
    api: &Api<ConfigMap>,
    shared: &Shared,
    key: &str,
    expected: Option<Rv>,
) -> bool {
    let call = Call::Delete {
        key: key.into(),
        expected,
    };
    let pending = shared.recorder.invoke(id, call);
    let params = DeleteParams {
        preconditions: expected.map(|rv| Preconditions {
            resource_version: Some(rv.to_string()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    match bounded(api.delete(key, &params)).await {
        Ok(either) => {
            let rv = either.left().map(|cm| rv_of(&cm));
            pending.complete(Outcome::Deleted { rv });
            if let Some(rv) = rv {
                shared.saw(key, rv);
            }
            shared.forget(key);
            true
        }
        Err(f) => record_failure(
            shared,
            pending,
            f,
            &[(409, Outcome::Conflict), (404, Outcome::NotFound)],
        ),
    }
}

async fn get(id: u32, api: &Api<ConfigMap>, shared: &Shared, key: &str) -> bool {
    let pending = shared.recorder.invoke(id, Call::Get { key: key.into() });
    match bounded(api.get(key)).await {
        Ok(cm) => {
            let rv = rv_of(&cm);
            pending.complete(Outcome::Found {
                rv,
                value: value_of(&cm),
            });
            shared.saw(key, rv);
            true
        }
        Err(Failure::Status(404, _)) => {
            pending.complete(Outcome::NotFound);
            shared.forget(key);
            true
        }
        Err(f) => record_failure(shared, pending, f, &[]),
    }
}

/// A list; returns its revision when answered.
async fn list(id: u32, api: &Api<ConfigMap>, shared: &Shared) -> Option<Rv> {
    let pending = shared.recorder.invoke(id, Call::List);
    match bounded(api.list(&ListParams::default())).await {
        Ok(list) => {
            let rv: Rv = list
                .metadata
                .resource_version
                .as_deref()
                .and_then(|rv| rv.parse().ok())
                .expect("list resourceVersion");
            let items: Vec<Item> = list
                .items
                .iter()
                .filter(|cm| {
                    cm.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(PREFIX))
                })
                .map(|cm| Item {
                    key: cm.metadata.name.clone().unwrap_or_default(),
                    rv: rv_of(cm),
                    value: value_of(cm),
                })
                .collect();
            for item in &items {
                shared.saw(&item.key, item.rv);
            }
            shared.seen.lock().expect("seen").push(rv);
            pending.complete(Outcome::Listed { rv, items });
            Some(rv)
        }
        Err(f) => {
            record_failure(shared, pending, f, &[]);
            None
        }
    }
}

/// A watch from `from` for at most `duration`; with `until`, it stops as
/// soon as it delivered that revision and records that it caught up with
/// it (so whatever it skipped up to there is a gap).
async fn watch(
    id: u32,
    api: &Api<ConfigMap>,
    shared: &Shared,
    from: Rv,
    duration: Duration,
    until: Option<Rv>,
) {
    let pending = shared.recorder.invoke(id, Call::Watch { from });
    let deadline = tokio::time::Instant::now() + duration;
    let params = WatchParams::default().timeout(60);
    let stream = match bounded(api.watch(&params, &from.to_string())).await {
        Ok(stream) => stream,
        Err(Failure::Status(410, _)) => {
            pending.complete(Outcome::Watched {
                events: Vec::new(),
                end: WatchEnd::Gone,
            });
            return;
        }
        Err(Failure::NotSent) => return,
        Err(Failure::Status(code, reason)) => {
            pending.complete(Outcome::Watched {
                events: Vec::new(),
                end: WatchEnd::Broken {
                    reason: format!("{code} {reason}"),
                },
            });
            return;
        }
        Err(Failure::Unknown(reason)) => {
            pending.complete(Outcome::Watched {
                events: Vec::new(),
                end: WatchEnd::Broken { reason },
            });
            return;
        }
    };
    let mut stream = std::pin::pin!(stream);
    let mut events = Vec::new();
    let end = loop {
        let next = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => {
                break match until {
                    Some(through) => WatchEnd::CaughtUp { through },
                    None => WatchEnd::Stopped,
                };
            }
            Ok(None) => {
                break WatchEnd::Broken {
                    reason: "stream closed".into(),
                };
            }
            Ok(Some(Err(e))) => {
                break WatchEnd::Broken {
                    reason: e.to_string(),
                };
            }
            Ok(Some(Ok(event))) => event,
        };
        let (kind, cm) = match next {
            WatchEvent::Added(cm) => (EventKind::Added, cm),
            WatchEvent::Modified(cm) => (EventKind::Modified, cm),
            WatchEvent::Deleted(cm) => (EventKind::Deleted, cm),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(status) if status.code == 410 => break WatchEnd::Gone,
            WatchEvent::Error(status) => {
                break WatchEnd::Broken {
                    reason: format!("{} {}", status.code, status.message),
                };
            }
        };
        let name = cm.metadata.name.clone().unwrap_or_default();
        if !name.starts_with(PREFIX) {
            continue;
        }
        let rv = rv_of(&cm);
        events.push(Event {
            kind,
            key: name,
            rv,
            value: value_of(&cm),
            at: shared.recorder.now(),
        });
        if until.is_some_and(|u| rv >= u) {
            break WatchEnd::CaughtUp {
                through: until.unwrap_or(rv),
            };
        }
    };
    if let Some(last) = events.last() {
        shared.seen.lock().expect("seen").push(last.rv);
    }
    pending.complete(Outcome::Watched { events, end });
}

// ---------------------------------------------------------------- utilities

/// A kube client for a kubeconfig, without kube-rs's default retries: it
/// resends a request answered 503/504, which for a write whose first
/// attempt committed turns its answer into a 409 or 404 (the history would
/// then blame the server for the client's retry).
fn client_for(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let mut config =
        futures::executor::block_on(kube::Config::from_custom_kubeconfig(kubeconfig, &options))
            .expect("kube config");
    config.default_retry = false;
    kube::Client::try_from(config).expect("kube client")
}

/// Sleeps `ms` milliseconds unless `stop` is set first; returns whether it
/// was.
fn sleep_unless(stop: &AtomicBool, ms: u64) -> bool {
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        if stop.load(Ordering::SeqCst) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.load(Ordering::SeqCst)
}

/// The pid of the process whose command line holds `args` in a row.
fn pid_with_args(args: &[&str]) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if words
            .windows(args.len())
            .any(|w| w.iter().zip(args).all(|(a, b)| *a == b.as_bytes()))
        {
            return Some(pid);
        }
    }
    None
}

/// Sends `SIG<name>` to `pid` with kill(1).
fn signal(name: &str, pid: u32) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}: {status}");
}

fn campaign_secs() -> u64 {
    std::env::var("CONSISTENCY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

fn seed() -> u64 {
    std::env::var("CONSISTENCY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}
