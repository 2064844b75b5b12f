//! The shared storage suite against a real etcd, plus what only the etcd
//! backend has: unreachable etcd, the watch cache, several stores on one
//! etcd, key prefixes.
//!
//! Every test starts its own `etcd` (Debian's `etcd-server`) on free loopback
//! ports in a temp dir and kills it when done. Without `etcd` on PATH the
//! tests fail and say to run `scripts/install-etcd-deps.sh`.
#![cfg(feature = "etcd")]

use futures::StreamExt;
use futures::future::join_all;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasm_apiserver_storage::etcd::{EtcdOptions, EtcdStore, EtcdTls};
use wasm_apiserver_storage::suite::Harness;
use wasm_apiserver_storage::{
    EventKind, ListOptions, Storage, StorageError, WatchItem, WatchStream, storage_suite,
};

/// A free loopback port (bound, then released for etcd to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn options() -> EtcdOptions {
    EtcdOptions {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        progress_interval: Duration::from_millis(200),
        ..EtcdOptions::default()
    }
}

/// One `etcd` process, killed on drop.
struct Etcd {
    child: Child,
    dir: tempfile::TempDir,
    endpoint: String,
    /// Client TLS, when etcd serves https and requires client certificates.
    tls: Option<EtcdTls>,
}

impl Etcd {
    /// Starts etcd on http and waits (bounded) until it answers.
    async fn start() -> Etcd {
        Etcd::start_with(false).await
    }

    /// Starts etcd (on https with client certificates if `tls`) and waits
    /// (bounded) until it answers.
    async fn start_with(tls: bool) -> Etcd {
        // A port taken between our probe and etcd's bind makes etcd exit:
        // try again on fresh ports.
        for _ in 0..3 {
            let mut etcd = Etcd::spawn(tls);
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if etcd.child.try_wait().unwrap().is_some() {
                    break;
                }
                let quick = EtcdOptions {
                    connect_timeout: Duration::from_millis(500),
                    ..etcd.options()
                };
                if EtcdStore::connect(std::slice::from_ref(&etcd.endpoint), "", quick)
                    .await
                    .is_ok()
                {
                    return etcd;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            eprintln!("etcd did not start; its log:\n{}", etcd.log());
        }
        panic!("could not start etcd");
    }

    fn spawn(tls: bool) -> Etcd {
        let dir = tempfile::tempdir().unwrap();
        let (client, peer) = (free_port(), free_port());
        let scheme = if tls { "https" } else { "http" };
        let endpoint = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "n1", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &endpoint,
                "--advertise-client-urls",
                &endpoint,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("n1={peer_url}")])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let tls = tls.then(|| {
            let d = dir.path();
            make_certificates(d);
            cmd.arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(d.join("ca.crt"))
                .arg("--cert-file")
                .arg(d.join("server.crt"))
                .arg("--key-file")
                .arg(d.join("server.key"));
            EtcdTls {
                ca_file: Some(d.join("ca.crt")),
                cert_file: Some(d.join("client.crt")),
                key_file: Some(d.join("client.key")),
            }
        });
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("`etcd` is not installed: run scripts/install-etcd-deps.sh (as root) first")
            }
            Err(e) => panic!("cannot start etcd: {e}"),
        };
        Etcd {
            child,
            dir,
            endpoint,
            tls,
        }
    }

    /// The test options, with this etcd's client TLS.
    fn options(&self) -> EtcdOptions {
        EtcdOptions {
            tls: self.tls.clone(),
            ..options()
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    async fn connect(&self, prefix: &str, options: EtcdOptions) -> EtcdStore {
        let options = EtcdOptions {
            tls: self.tls.clone(),
            ..options
        };
        EtcdStore::connect(std::slice::from_ref(&self.endpoint), prefix, options)
            .await
            .unwrap()
    }
}

/// Writes a CA, an etcd serving certificate for 127.0.0.1 and a client
/// certificate into `dir`, with the `openssl` command.
fn make_certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run openssl ({e}): run scripts/install-etcd-deps.sh (as root) first")
            });
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &key,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "1",
                "-subj",
                "/CN=test-ca",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for name in ["server", "client"] {
        let (k, csr, crt, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        openssl(
            &[
                &["req"][..],
                &key,
                &["-keyout", &k, "-out", &csr, "-subj", &format!("/CN={name}")],
            ]
            .concat(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "1",
            "-extfile",
            &ext,
        ]);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The suite's harness: a private etcd, started at the first `open`.
struct EtcdHarness {
    etcd: Option<Etcd>,
}

impl EtcdHarness {
    fn new() -> Self {
        EtcdHarness { etcd: None }
    }
}

#[async_trait::async_trait]
impl Harness for EtcdHarness {
    async fn open(&mut self) -> Arc<dyn Storage> {
        if self.etcd.is_none() {
            self.etcd = Some(Etcd::start().await);
        }
        Arc::new(self.etcd.as_ref().unwrap().connect("", options()).await)
    }

    async fn reopen(&mut self, old: Arc<dyn Storage>) -> Arc<dyn Storage> {
        drop(old);
        Arc::new(self.etcd.as_ref().unwrap().connect("", options()).await)
    }
}

storage_suite!(EtcdHarness::new());

fn v(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Next item of a watch, failing the test after 10 s.
async fn next_item(w: &mut WatchStream) -> WatchItem {
    tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("watch item within 10s")
        .expect("watch stream ended")
        .expect("watch error")
}

/// Next event of a watch, skipping progress.
async fn next_event(w: &mut WatchStream) -> wasm_apiserver_storage::Event {
    loop {
        if let WatchItem::Event(e) = next_item(w).await {
            return e;
        }
    }
}

/// Waits (bounded) until `f` holds.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn unreachable_etcd_is_unavailable_quickly() {
    let closed = format!("http://127.0.0.1:{}", free_port());
    let opts = EtcdOptions {
        connect_timeout: Duration::from_secs(1),
        ..options()
    };
    let started = Instant::now();
    let got = EtcdStore::connect(&[closed], "", opts).await.err();
    assert!(matches!(got, Some(StorageError::Unavailable(_))), "{got:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_going_away_gives_unavailable_then_recovers_nothing_hangs() {
    let mut etcd = Etcd::start().await;
    let opts = EtcdOptions {
        request_timeout: Duration::from_secs(1),
        ..options()
    };
    let s = etcd.connect("", opts).await;
    let a = s.create("/g/a", v("1")).await.unwrap();
    let mut w = s.watch("/g/", a.mod_revision).await.unwrap();

    etcd.child.kill().unwrap();
    etcd.child.wait().unwrap();
    let started = Instant::now();
    for result in [
        s.get("/g/a").await.map(drop),
        s.create("/g/b", v("1")).await.map(drop),
        s.watch("/g/", 0).await.map(drop),
    ] {
        assert!(
            matches!(result, Err(StorageError::Unavailable(_))),
            "{result:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    // The open watch neither ends nor errors: it waits for etcd to return.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), w.next())
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watchers_share_one_etcd_watch() {
    let etcd = Etcd::start().await;
    let s = etcd.connect("", options()).await;
    let seed = s.create("/s/seed", v("0")).await.unwrap();
    let from = s.current_revision().await.unwrap();

    let watchers = join_all((0..100).map(|_| s.watch("/s/", from))).await;
    let mut watchers: Vec<WatchStream> = watchers.into_iter().map(Result::unwrap).collect();
    // The shared etcd watch opens in the background.
    eventually("the shared etcd watch is open", || {
        s.etcd_watch_count() == 1
    })
    .await;

    let mut want = Vec::new();
    for i in 0..10 {
        let kv = s.create(&format!("/s/k{i}"), v("1")).await.unwrap();
        want.push((EventKind::Created, kv.mod_revision));
        s.create(&format!("/other/k{i}"), v("1")).await.unwrap();
    }
    let k0 = s.get("/s/k0").await.unwrap().unwrap();
    want.push((
        EventKind::Modified,
        s.update("/s/k0", v("2"), k0.mod_revision)
            .await
            .unwrap()
            .mod_revision,
    ));
    want.push((
        EventKind::Deleted,
        s.delete("/s/k1", None).await.unwrap().mod_revision,
    ));

    let seen = join_all(watchers.iter_mut().map(|w| async {
        let mut got = Vec::new();
        for _ in 0..want.len() {
            let e = next_event(w).await;
            assert!(e.kv.key.starts_with("/s/"));
            got.push((e.kind, e.revision()));
        }
        got
    }))
    .await;
    for got in seen {
        assert_eq!(got, want);
    }
    assert_eq!(s.etcd_watch_count(), 1);

    // A watch from before the cache started gets an etcd watch of its own,
    // closed when it is dropped.
    let mut old = s.watch("/s/", seed.mod_revision - 1).await.unwrap();
    assert_eq!(s.etcd_watch_count(), 2);
    let e = next_event(&mut old).await;
    assert_eq!((e.kind, e.kv.key.as_str()), (EventKind::Created, "/s/seed"));
    drop(old);
    eventually("the dedicated etcd watch is closed", || {
        s.etcd_watch_count() == 1
    })
    .await;
    drop(watchers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_see_progress_never_ahead_of_events() {
    let etcd = Etcd::start().await;
    let s = etcd.connect("", options()).await;
    let a = s.create("/p/a/b/1", v("1")).await.unwrap();
    // Starts the cache of the partition /p/a/b/ (three segments).
    let _start_the_cache = s.watch("/p/a/b/x/", a.mod_revision).await.unwrap();
    let b = s.create("/q/b", v("1")).await.unwrap();

    // From the cache: nothing under /p/a/b/1 after `a`, but progress covers `b`.
    let mut w = s.watch("/p/a/b/1", a.mod_revision).await.unwrap();
    eventually("the shared etcd watch is open", || {
        s.etcd_watch_count() == 1
    })
    .await;
    assert_eq!(next_item(&mut w).await, WatchItem::Progress(b.mod_revision));

    // From before the cache: `a` first, never a progress ahead of it. Then
    // progress where etcd orders it with events (>= 3.4.25 / 3.5.8); older
    // etcd gives a watch replaying history none (see `ProgressMode`).
    let mut d = s.watch("/p/a/b/1", a.mod_revision - 1).await.unwrap();
    assert_eq!(s.etcd_watch_count(), 2);
    assert!(
        matches!(next_item(&mut d).await, WatchItem::Event(e) if e.revision() == a.mod_revision)
    );
    if let Ok(item) = tokio::time::timeout(Duration::from_secs(1), d.next()).await {
        assert_eq!(item.unwrap().unwrap(), WatchItem::Progress(b.mod_revision));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_etcd_watch_per_watched_resource() {
    let etcd = Etcd::start().await;
    let s = etcd.connect("", options()).await;
    let from = s.current_revision().await.unwrap();
    // Two namespaces and all namespaces of one resource share its watch.
    let mut ns1 = s.watch("/registry/g/r1/ns1/", from).await.unwrap();
    let mut all = s.watch("/registry/g/r1/", from).await.unwrap();
    let _ns2 = s.watch("/registry/g/r1/ns2/", from).await.unwrap();
    eventually("one etcd watch", || s.etcd_watch_count() == 1).await;
    // Another resource has its own.
    let mut r2 = s.watch("/registry/g/r2/", from).await.unwrap();
    eventually("two etcd watches", || s.etcd_watch_count() == 2).await;

    let a = s.create("/registry/g/r1/ns1/a", v("1")).await.unwrap();
    let b = s.create("/registry/g/r2/b", v("1")).await.unwrap();
    let e = next_event(&mut ns1).await;
    assert_eq!(
        (e.kv.key.as_str(), e.revision()),
        ("/registry/g/r1/ns1/a", a.mod_revision)
    );
    let e = next_event(&mut all).await;
    assert_eq!(e.kv.key, "/registry/g/r1/ns1/a");
    let e = next_event(&mut r2).await;
    assert_eq!(
        (e.kv.key.as_str(), e.revision()),
        ("/registry/g/r2/b", b.mod_revision)
    );
    // The r2 write reached neither r1 watch: their next event is r1's next.
    let c = s.create("/registry/g/r1/ns1/c", v("1")).await.unwrap();
    for w in [&mut ns1, &mut all] {
        let e = next_event(w).await;
        assert_eq!(
            (e.kv.key.as_str(), e.revision()),
            ("/registry/g/r1/ns1/c", c.mod_revision)
        );
    }
    assert_eq!(s.etcd_watch_count(), 2);
}

/// A watcher that stops reading while 400 writes happen (more than its
/// channel holds), then reads them all.
async fn lagging_watcher_sees_every_event(options: EtcdOptions) -> usize {
    const N: usize = 400;
    let etcd = Etcd::start().await;
    let s = etcd.connect("", options).await;
    let from = s.current_revision().await.unwrap();
    let mut w = s.watch("/l/", from).await.unwrap();
    for i in 0..N {
        s.create(&format!("/l/{i:03}"), v("x")).await.unwrap();
    }
    // Give the cache time to push every event past the watcher.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut revs = Vec::new();
    for i in 0..N {
        let e = next_event(&mut w).await;
        assert_eq!(e.kv.key, format!("/l/{i:03}"));
        revs.push(e.revision());
    }
    assert_eq!(revs[0], from + 1);
    assert!(
        revs.windows(2).all(|p| p[1] == p[0] + 1),
        "contiguous revisions: {revs:?}"
    );
    s.etcd_watch_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_behind_the_broadcast_catches_up_from_the_ring() {
    let opts = EtcdOptions {
        broadcast_capacity: 2,
        ..options()
    };
    assert_eq!(lagging_watcher_sees_every_event(opts).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_behind_the_ring_catches_up_from_etcd() {
    let opts = EtcdOptions {
        broadcast_capacity: 2,
        watch_cache_size: 4,
        ..options()
    };
    assert_eq!(
        lagging_watcher_sees_every_event(opts).await,
        2,
        "fell back to a dedicated etcd watch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_etcd_behave_as_one() {
    let etcd = Etcd::start().await;
    let (a, b) = (
        etcd.connect("", options()).await,
        etcd.connect("", options()).await,
    );
    let mut w = b
        .watch("/r/", b.current_revision().await.unwrap())
        .await
        .unwrap();
    let x = a.create("/r/x", v("1")).await.unwrap();
    let e = next_event(&mut w).await;
    assert_eq!((e.kind, e.kv), (EventKind::Created, x.clone()));
    assert_eq!(
        b.create("/r/x", v("2")).await,
        Err(StorageError::AlreadyExists)
    );

    let x2 = a.update("/r/x", v("2"), x.mod_revision).await.unwrap();
    assert_eq!(
        b.update("/r/x", v("3"), x.mod_revision).await,
        Err(StorageError::Conflict {
            current: x2.mod_revision
        })
    );
    assert_eq!(next_event(&mut w).await.kv, x2);

    // A compaction through one store expires old revisions on the other.
    a.compact(x2.mod_revision).await.unwrap();
    let old = b.watch("/r/", x.mod_revision).await.err();
    assert_eq!(
        old,
        Some(StorageError::Expired {
            requested: x.mod_revision,
            compacted: x2.mod_revision
        })
    );
    let old = b
        .list(
            "/r/",
            ListOptions {
                revision: Some(x.mod_revision),
                ..Default::default()
            },
        )
        .await
        .err();
    assert_eq!(
        old,
        Some(StorageError::Expired {
            requested: x.mod_revision,
            compacted: x2.mod_revision
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_is_a_private_namespace() {
    let etcd = Etcd::start().await;
    let (tenant, root) = (
        etcd.connect("/tenant-a", options()).await,
        etcd.connect("", options()).await,
    );
    let from = root.current_revision().await.unwrap();
    let mut w = tenant.watch("/registry/", from).await.unwrap();
    root.create("/registry/x", v("root")).await.unwrap();
    let kv = tenant.create("/registry/x", v("tenant")).await.unwrap();
    assert_eq!(kv.key, "/registry/x");
    assert_eq!(
        root.get("/registry/x").await.unwrap().unwrap().value,
        v("root")
    );
    assert_eq!(
        root.get("/tenant-a/registry/x")
            .await
            .unwrap()
            .unwrap()
            .value,
        v("tenant")
    );
    let listed = tenant.list("/", ListOptions::default()).await.unwrap();
    assert_eq!(listed.items, vec![kv.clone()]);
    assert_eq!(
        next_event(&mut w).await.kv,
        kv,
        "the root's write is not in the tenant's watch"
    );
}

/// Creates/s with 64 concurrent tasks: raw etcd-client puts vs. the store
/// (a transaction per create), and raw transactions like the store's.
/// Prints the numbers; asserts only a loose floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_throughput_raw_vs_store() {
    const TASKS: usize = 64;
    const PER_TASK: usize = 40;
    let etcd = Etcd::start().await;
    let client = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
        .await
        .unwrap();
    let started = Instant::now();
    join_all((0..TASKS).map(|t| {
        let mut kv = client.kv_client();
        async move {
            for i in 0..PER_TASK {
                kv.put(format!("/raw/{t}-{i}"), "x", None).await.unwrap();
            }
        }
    }))
    .await;
    let raw = (TASKS * PER_TASK) as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    join_all((0..TASKS).map(|t| {
        let mut kv = client.kv_client();
        async move {
            for i in 0..PER_TASK {
                let k = format!("/txn/{t}-{i}");
                let txn = etcd_client::Txn::new()
                    .when([etcd_client::Compare::create_revision(
                        k.clone(),
                        etcd_client::CompareOp::Equal,
                        0,
                    )])
                    .and_then([etcd_client::TxnOp::put(k, "x", None)]);
                kv.txn(txn).await.unwrap();
            }
        }
    }))
    .await;
    let raw_txn = (TASKS * PER_TASK) as f64 / started.elapsed().as_secs_f64();

    let s = etcd.connect("", options()).await;
    let started = Instant::now();
    join_all((0..TASKS).map(|t| {
        let s = s.clone();
        async move {
            for i in 0..PER_TASK {
                s.create(&format!("/store/{t}-{i}"), v("x")).await.unwrap();
            }
        }
    }))
    .await;
    let store = (TASKS * PER_TASK) as f64 / started.elapsed().as_secs_f64();
    eprintln!(
        "etcd creates/s with {TASKS} tasks: raw put {raw:.0}, raw txn {raw_txn:.0}, store create {store:.0} ({:.0} % of put)",
        100.0 * store / raw
    );
    // Our overhead over the same etcd transaction; loose, as other tests share the CPU.
    assert!(
        store > raw_txn * 0.25,
        "store {store:.0}/s vs raw txn {raw_txn:.0}/s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificates() {
    let etcd = Etcd::start_with(true).await;
    let s = etcd.connect("", options()).await;
    let a = s.create("/tls/a", v("1")).await.unwrap();
    let mut w = s.watch("/tls/", a.mod_revision - 1).await.unwrap();
    assert_eq!(next_event(&mut w).await.kv, a);

    // Without a client certificate etcd refuses us.
    let anonymous = EtcdOptions {
        tls: Some(EtcdTls {
            cert_file: None,
            key_file: None,
            ..etcd.tls.clone().unwrap()
        }),
        ..options()
    };
    let refused = EtcdStore::connect(std::slice::from_ref(&etcd.endpoint), "", anonymous).await;
    assert!(
        matches!(refused, Err(StorageError::Unavailable(_))),
        "{:?}",
        refused.err()
    );
}
