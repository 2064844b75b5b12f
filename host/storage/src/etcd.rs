//! The etcd backend: [`EtcdStore`] implements [`Storage`] on an etcd v3
//! cluster through `etcd-client` (cargo feature `etcd`; building it needs
//! `protoc`, which `scripts/install-etcd-deps.sh` installs).
//!
//! * **Keys.** A key `k` is stored as `prefix + k`. Our API keys already
//!   start with `/registry/...`, so the default prefix `""` gives the same
//!   key layout as kube-apiserver's default `--etcd-prefix=/registry`; a
//!   non-empty prefix is an extra namespace (several clusters in one etcd).
//! * **Revisions** are etcd's: `create_revision` / `mod_revision` of the key,
//!   and the header revision for the revision of a write or of a delete.
//! * **Writes** are single transactions: create compares
//!   `create_revision == 0`; update and a delete with `expected` compare
//!   `mod_revision == expected` and read the key in the `else` branch to
//!   tell `NotFound` from `Conflict { current }`. A failed compare writes
//!   nothing, so it consumes no revision.
//! * **Lists** are etcd ranges at one revision, asking for `limit + 1` keys
//!   so the next page's first key is known exactly.
//! * **Watches** go through *watch caches*, one per key partition: the
//!   first [`CACHE_DEPTH`] segments of the watched prefix, which for API keys
//!   (`/registry/<group>/<resource>/...`) is one resource. A partition's
//!   etcd watch (started lazily, at its first `watch`) feeds a ring of the
//!   last [`EtcdOptions::watch_cache_size`] events and a broadcast, so N
//!   client watches of a resource cost one etcd watch, and writes to a
//!   resource nobody has watched cost etcd no watch work (each event of a
//!   watch with previous values is a read in etcd). A cache, once started,
//!   runs until the store is dropped. A watch from a revision older than
//!   the ring gets a dedicated etcd watch instead, so nothing is skipped.
//!   Both kinds reopen their etcd watch from the last revision seen when
//!   the stream breaks (e.g. when an etcd member goes away).
//! * **Progress** (the API server's BOOKMARKs) comes from etcd progress
//!   notifications, requested every [`EtcdOptions::progress_interval`]. etcd
//!   before 3.4.25 / 3.5.8 (Debian's is 3.4.23) may send one ahead of queued
//!   events (etcd-io/etcd#15220), so there the cache holds each for one
//!   interval and dedicated watches report none: a progress item never
//!   claims a revision whose events are still to come.
//! * **Compaction** maps to `Expired` exactly as in the embedded store: any
//!   revision older than etcd's compacted revision (checked against etcd on
//!   every `list` and `watch`, so a compaction by another replica counts
//!   too).
//! * **Unreachable etcd** gives `Unavailable` after at most
//!   [`EtcdOptions::connect_timeout`] / [`EtcdOptions::request_timeout`],
//!   never a hang.

use crate::{
    Event, EventKind, KeyValue, ListOptions, ListResult, Result, Storage, StorageError, WatchItem,
    WatchStream,
};
use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, PutOptions,
    TxnOp, TxnOpResponse, WatchOptions,
};
use futures::StreamExt;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};

/// Largest gRPC message we accept from etcd (big lists, big watch batches).
const MAX_MESSAGE: usize = 1 << 30;
/// Path segments of a watched prefix that name its watch cache partition:
/// `/registry/<group>/<resource>/` for API keys.
const CACHE_DEPTH: usize = 3;
/// How long to learn the compacted revision when etcd reports a compaction.
const COMPACTION_PROBE: Duration = Duration::from_secs(1);

/// Client TLS for etcd, as kube-apiserver's `--etcd-cafile`,
/// `--etcd-certfile` and `--etcd-keyfile` (PEM files). Use `https://`
/// endpoints with it.
#[derive(Debug, Clone, Default)]
pub struct EtcdTls {
    /// CA bundle that signed etcd's serving certificate.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key, for etcd's `--client-cert-auth`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// Tuning of the etcd store.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Bound on connecting to an endpoint (and on `connect`'s first request).
    pub connect_timeout: Duration,
    /// Bound on every request; past it the call fails with `Unavailable`.
    pub request_timeout: Duration,
    /// How often watches ask etcd for a progress notification (BOOKMARKs).
    pub progress_interval: Duration,
    /// Events kept in memory by each resource's watch cache (default 2000;
    /// kube-apiserver's `--default-watch-cache-size` is 100); a watch from an
    /// older revision gets its own etcd watch.
    pub watch_cache_size: usize,
    /// Batches the watch cache's broadcast holds; a watcher further behind
    /// catches up from the ring.
    pub broadcast_capacity: usize,
    pub tls: Option<EtcdTls>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            progress_interval: Duration::from_secs(5),
            watch_cache_size: 2_000,
            broadcast_capacity: 1024,
            tls: None,
        }
    }
}

/// The etcd-backed store (see the module docs). Cheap to clone; the watch
/// caches stop when the last clone is dropped.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The key prefix, as bytes.
    prefix: Vec<u8>,
    options: EtcdOptions,
    /// `--etcd-servers`, for per-server health.
    endpoints: Vec<String>,
    /// The etcd server's version, which decides how far progress
    /// notifications can be trusted.
    version: String,
    /// The watch caches by partition (see [`partition`]), created on first use.
    caches: Mutex<HashMap<String, Arc<Cache>>>,
    /// Open etcd watch streams (shared and dedicated), for tests and metrics.
    etcd_watches: Arc<AtomicUsize>,
    /// Dropped with the store: stops the watch cache's task.
    _stop: watch::Sender<()>,
    stop: watch::Receiver<()>,
}

// --- errors ------------------------------------------------------------------

fn status(e: &etcd_client::Error) -> Option<&tonic::Status> {
    match e {
        etcd_client::Error::GRpcStatus(s) => Some(s),
        _ => None,
    }
}

/// etcd's `ErrCompacted` ("mvcc: required revision has been compacted").
fn is_compacted(e: &etcd_client::Error) -> bool {
    status(e)
        .is_some_and(|s| s.code() == tonic::Code::OutOfRange && s.message().contains("compacted"))
}

/// etcd's `ErrFutureRev` ("mvcc: required revision is a future revision").
fn is_future(e: &etcd_client::Error) -> bool {
    status(e).is_some_and(|s| {
        s.code() == tonic::Code::OutOfRange && s.message().contains("future revision")
    })
}

/// Maps an etcd-client error: its space quota exhausted is `NoSpace`;
/// anything that may pass when retried (no connection, no leader,
/// timeouts, overload) is `Unavailable`; the rest is `Internal`.
fn map_err(e: etcd_client::Error) -> StorageError {
    use etcd_client::Error as E;
    use tonic::Code;
    match &e {
        // etcd's space quota (`--quota-backend-bytes`) is exhausted.
        E::GRpcStatus(s)
            if s.code() == Code::ResourceExhausted
                && s.message().contains("database space exceeded") =>
        {
            StorageError::NoSpace(format!("etcd: {}", s.message()))
        }
        E::GRpcStatus(s) => match s.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Aborted
            | Code::ResourceExhausted => {
                StorageError::Unavailable(format!("etcd: {}", s.message()))
            }
            // A status made on our side from a connection failure (etcd's
            // own statuses have no source): etcd is not reachable.
            Code::Unknown if std::error::Error::source(s).is_some() => {
                StorageError::Unavailable(format!("etcd: {}", s.message()))
            }
            _ => StorageError::Internal(format!("etcd: {} ({:?})", s.message(), s.code())),
        },
        E::TransportError(_) | E::IoError(_) | E::WatchError(_) => {
            StorageError::Unavailable(format!("etcd: {e}"))
        }
        _ => StorageError::Internal(format!("etcd: {e}")),
    }
}

/// True when the request never reached etcd (connection refused or reset
/// before sending), so it can be retried on another endpoint.
fn not_sent(e: &etcd_client::Error) -> bool {
    // Only connection set-up failures: an error after the request went out
    // (reset, timeout) may hide a committed write, so it is not retried.
    let text = e.to_string();
    text.contains("tcp connect error") || text.contains("Connection refused")
}

/// Runs one etcd request under `limit`.
async fn bounded<T>(
    limit: Duration,
    f: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<Result<T, etcd_client::Error>> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| StorageError::Unavailable(format!("etcd did not answer within {limit:?}")))
}

fn rev(r: i64) -> u64 {
    r.max(0) as u64
}

fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Result<u64> {
    h.map(|h| rev(h.revision()))
        .ok_or_else(|| StorageError::Internal("etcd response without a header".into()))
}

// --- keys ----------------------------------------------------------------------

/// The first key after every key starting with `key`; `[0]` (etcd: "to the
/// end of the keyspace") when there is none.
fn range_end(key: &[u8]) -> Vec<u8> {
    let mut end = key.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// etcd rejects an empty key; `[0]` is the smallest key there is.
fn non_empty(key: Vec<u8>) -> Vec<u8> {
    if key.is_empty() { vec![0] } else { key }
}

/// Strips the store prefix from an etcd key; `None` for keys that are not
/// ours or not UTF-8 (written by someone else: skipped with a warning).
fn user_key(prefix: &[u8], key: &[u8]) -> Option<String> {
    let rest = key.strip_prefix(prefix)?;
    match std::str::from_utf8(rest) {
        Ok(k) => Some(k.to_string()),
        Err(_) => {
            tracing::warn!(key = ?String::from_utf8_lossy(key), "etcd store: skipping a key that is not UTF-8");
            None
        }
    }
}

fn to_kv(prefix: &[u8], kv: &etcd_client::KeyValue) -> Option<KeyValue> {
    Some(KeyValue {
        key: user_key(prefix, kv.key())?,
        value: kv.value().to_vec(),
        create_revision: rev(kv.create_revision()),
        mod_revision: rev(kv.mod_revision()),
    })
}

/// Maps an etcd watch event: a PUT that created the key is `Created`; a
/// DELETE carries the last value (from `prev_kv`) at the delete's revision.
fn to_event(prefix: &[u8], e: &etcd_client::Event) -> Option<Event> {
    let kv = e.kv()?;
    let prev = e.prev_kv().and_then(|p| to_kv(prefix, p));
    match e.event_type() {
        EventType::Put => {
            let kv = to_kv(prefix, kv)?;
            let kind = if kv.create_revision == kv.mod_revision {
                EventKind::Created
            } else {
                EventKind::Modified
            };
            Some(Event { kind, kv, prev })
        }
        EventType::Delete => {
            let key = user_key(prefix, kv.key())?;
            let at = rev(kv.mod_revision());
            let last = match &prev {
                Some(p) => KeyValue {
                    mod_revision: at,
                    ..p.clone()
                },
                // The previous value is gone (compacted): report the key only.
                None => KeyValue {
                    key,
                    value: Vec::new(),
                    create_revision: 0,
                    mod_revision: at,
                },
            };
            Some(Event {
                kind: EventKind::Deleted,
                kv: last,
                prev,
            })
        }
    }
}

// --- etcd watches ------------------------------------------------------------------

/// Counts an open etcd watch while alive.
struct WatchGuard(Arc<AtomicUsize>);

impl WatchGuard {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        WatchGuard(count.clone())
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An etcd watch stream that is open.
struct OpenWatch {
    stream: etcd_client::WatchStream,
    id: i64,
    _guard: WatchGuard,
}

/// What a watch channel carries: the items of one etcd response (whole
/// revisions, never split), or the error that ends the watch.
type Batch = Result<Vec<WatchItem>>;

/// How far a watch has delivered: the last event's revision (events at or
/// below it are repeats) and the last progress revision. They are kept
/// apart so that a progress notification can never hide an event.
#[derive(Debug, Clone, Copy)]
struct Position {
    event: u64,
    progress: u64,
}

impl Position {
    /// Where to resume: after everything delivered.
    fn resume(&self) -> u64 {
        self.event.max(self.progress)
    }

    /// The events not delivered yet, as watch items. The events of one etcd
    /// response or cache batch are whole revisions, so the bound moves once
    /// per batch.
    fn events(&mut self, evs: impl IntoIterator<Item = Event>) -> Vec<WatchItem> {
        let from = self.event;
        let items: Vec<WatchItem> = evs
            .into_iter()
            .filter(|e| e.revision() > from)
            .map(WatchItem::Event)
            .collect();
        if let Some(WatchItem::Event(last)) = items.last() {
            self.event = last.revision();
        }
        items
    }

    /// Like [`Position::events`] for borrowed events, keeping (cloning) only
    /// those under `prefix`.
    fn events_under<'a>(
        &mut self,
        evs: impl IntoIterator<Item = &'a Event>,
        prefix: &str,
    ) -> Vec<WatchItem> {
        let from = self.event;
        let mut out = Vec::new();
        for e in evs.into_iter().filter(|e| e.revision() > from) {
            self.event = self.event.max(e.revision());
            if e.kv.key.starts_with(prefix) {
                out.push(WatchItem::Event(e.clone()));
            }
        }
        out
    }

    /// A progress item, if `at` is news: past the last progress, and not
    /// behind an event already delivered (etcd 3.4 can send a progress
    /// notification ahead of events, so it never moves the event bound).
    fn progress(&mut self, at: u64) -> Option<WatchItem> {
        if at <= self.progress || at < self.event {
            return None;
        }
        self.progress = at;
        Some(WatchItem::Progress(at))
    }
}

/// How a watch treats the progress notifications it asks etcd for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProgressMode {
    /// etcd >= 3.4.25 / 3.5.8 orders them with the events: forward them.
    Trusted,
    /// Older etcd sends them ahead of the events still queued for the
    /// stream (etcd-io/etcd#15220). A watch in sync with etcd (the cache's)
    /// holds each one for a progress interval, by when those have been sent.
    Delayed,
    /// On older etcd, a watch replaying history may be far behind what a
    /// notification claims: it reports no progress.
    Off,
}

impl ProgressMode {
    /// The mode for an etcd server `version` ("3.4.23"), for a watch that is
    /// in sync with etcd (`synced`) or replays history.
    fn for_server(version: &str, synced: bool) -> Self {
        let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
        let v = (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        let fixed = v >= (3, 6, 0) || (v.1 == 5 && v >= (3, 5, 8)) || (v.1 == 4 && v >= (3, 4, 25));
        match (fixed, synced) {
            (true, _) => ProgressMode::Trusted,
            (false, true) => ProgressMode::Delayed,
            (false, false) => ProgressMode::Off,
        }
    }
}

/// How a followed etcd watch stream ended.
enum End {
    /// The receiver is gone.
    Closed,
    /// History after the last revision seen was compacted.
    Compacted(u64),
    /// The stream broke; reopen it.
    Broken(StorageError),
}

/// Follows the etcd range `[key, end)`: opens etcd watches, maps their
/// responses, and reopens them from the last revision seen when they break.
#[derive(Clone)]
struct Follower {
    client: Client,
    prefix: Vec<u8>,
    key: Vec<u8>,
    end: Vec<u8>,
    options: EtcdOptions,
    progress: ProgressMode,
    count: Arc<AtomicUsize>,
}

impl Follower {
    /// Opens an etcd watch for every change after `after`.
    async fn open(&self, after: u64) -> Result<OpenWatch> {
        let opts = WatchOptions::new()
            .with_range(self.end.clone())
            .with_start_revision(after as i64 + 1)
            .with_prev_key()
            .with_progress_notify();
        let mut client = self
            .client
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE);
        let limit = self.options.request_timeout;
        let open = async {
            let mut stream = client.watch(self.key.clone(), Some(opts)).await?;
            // etcd answers a create request with a `created` response.
            let created = stream.message().await?;
            Ok((stream, created))
        };
        let (stream, created) = bounded(limit, open).await?.map_err(map_err)?;
        let created = created
            .ok_or_else(|| StorageError::Unavailable("etcd closed the watch stream".into()))?;
        if created.canceled() {
            return Err(StorageError::Internal(format!(
                "etcd refused the watch: {}",
                created.cancel_reason()
            )));
        }
        Ok(OpenWatch {
            stream,
            id: created.watch_id(),
            _guard: WatchGuard::new(&self.count),
        })
    }

    /// Forwards every change after `after` to `tx` until `tx` closes or the
    /// history is compacted (then the last batch is `Err(Expired)`). Starts
    /// with `first` if given, and reopens broken etcd watches forever (with
    /// a backoff), as etcd's own client does.
    async fn run(self, first: Option<OpenWatch>, after: u64, tx: mpsc::Sender<Batch>) {
        let mut pos = Position {
            event: after,
            progress: after,
        };
        let mut next = first;
        let mut backoff = Duration::from_millis(50);
        loop {
            let open = match next.take() {
                Some(w) => w,
                None => match self.open(pos.resume()).await {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::warn!(error = %e, after = pos.resume(), "etcd store: cannot reopen a watch; retrying");
                        tokio::select! {
                            _ = tx.closed() => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                        continue;
                    }
                },
            };
            match self.forward(open, &mut pos, &tx).await {
                End::Closed => return,
                End::Compacted(compacted) => {
                    let _ = tx
                        .send(Err(StorageError::Expired {
                            requested: pos.resume(),
                            compacted,
                        }))
                        .await;
                    return;
                }
                End::Broken(e) => {
                    tracing::warn!(error = %e, after = pos.resume(), "etcd store: watch stream broke; reopening");
                    backoff = Duration::from_millis(50);
                }
            }
        }
    }

    /// Forwards one open etcd watch; `pos` follows what was delivered.
    async fn forward(&self, open: OpenWatch, pos: &mut Position, tx: &mpsc::Sender<Batch>) -> End {
        let OpenWatch { stream, id, _guard } = open;
        let (mut requests, mut responses) = stream.split();
        let period = match self.progress {
            ProgressMode::Off => Duration::MAX,
            _ => self.options.progress_interval,
        };
        let start = tokio::time::Instant::now();
        let mut tick = tokio::time::interval_at(start.checked_add(period).unwrap_or(start), period);
        // A progress notification held back for one interval (`Delayed`).
        let mut held: Option<u64> = None;
        loop {
            let response = tokio::select! {
                _ = tx.closed() => {
                    // Dropping the stream ends it too; cancelling is polite.
                    let _ = requests.cancel(id).await;
                    return End::Closed;
                }
                _ = tick.tick(), if self.progress != ProgressMode::Off => {
                    if let Some(item) = held.take().and_then(|at| pos.progress(at))
                        && tx.send(Ok(vec![item])).await.is_err()
                    {
                        return End::Closed;
                    }
                    if let Err(e) = requests.request_progress().await {
                        return End::Broken(map_err(e));
                    }
                    continue;
                }
                r = responses.message() => r,
            };
            let response = match response {
                Ok(Some(r)) => r,
                Ok(None) => {
                    return End::Broken(StorageError::Unavailable(
                        "etcd ended the watch stream".into(),
                    ));
                }
                Err(e) => return End::Broken(map_err(e)),
            };
            if response.compact_revision() > 0 {
                return End::Compacted(rev(response.compact_revision()));
            }
            if response.canceled() {
                return End::Broken(StorageError::Internal(format!(
                    "etcd cancelled the watch: {}",
                    response.cancel_reason()
                )));
            }
            let items = if response.events().is_empty() {
                // A progress notification: everything up to the header's
                // revision has been sent on this stream (see ProgressMode).
                let at = response.header().map_or(0, |h| rev(h.revision()));
                match self.progress {
                    ProgressMode::Trusted => pos.progress(at).into_iter().collect(),
                    ProgressMode::Delayed => {
                        held = held.max(Some(at));
                        continue;
                    }
                    ProgressMode::Off => continue,
                }
            } else {
                let evs = response
                    .events()
                    .iter()
                    .filter_map(|e| to_event(&self.prefix, e));
                pos.events(evs)
            };
            if !items.is_empty() && tx.send(Ok(items)).await.is_err() {
                let _ = requests.cancel(id).await;
                return End::Closed;
            }
        }
    }
}

/// Turns a channel of batches into a [`WatchStream`].
fn into_stream(rx: mpsc::Receiver<Batch>) -> WatchStream {
    let batches =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    Box::pin(batches.flat_map(|batch| {
        let items: Vec<Result<WatchItem>> = match batch {
            Ok(items) => items.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(items)
    }))
}

// --- the watch cache -----------------------------------------------------------------

/// What the watch cache broadcasts.
enum CacheMsg {
    Items(Vec<WatchItem>),
    /// The shared watch lost history up to this compacted revision: cache
    /// watchers behind it end with `Expired`.
    Reset(u64),
}

/// The per-store watch cache: the shared etcd watch's events in a ring,
/// and a broadcast of what comes next.
struct Cache {
    state: Mutex<CacheState>,
    size: usize,
    capacity: usize,
}

#[derive(Default)]
struct CacheState {
    /// `None` until the shared watch starts, and after it stops.
    tx: Option<broadcast::Sender<Arc<CacheMsg>>>,
    started: bool,
    /// Every event with a revision above `floor` is in `ring` (or yet to
    /// come), so a watch from `after >= floor` can be served here.
    floor: u64,
    ring: VecDeque<Event>,
}

/// What a cache watcher starts from: the ring's events after its revision
/// and a subscription to everything later.
type Attached = (broadcast::Receiver<Arc<CacheMsg>>, Vec<Event>);

impl Cache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes a watcher at `after`, if the ring still covers it. The
    /// lock makes the snapshot and the subscription one atomic step.
    fn attach(&self, after: u64) -> Option<Attached> {
        let st = self.lock();
        let tx = st.tx.as_ref()?;
        if after < st.floor {
            return None;
        }
        let backlog = st
            .ring
            .iter()
            .filter(|e| e.revision() > after)
            .cloned()
            .collect();
        Some((tx.subscribe(), backlog))
    }

    fn publish(&self, items: Vec<WatchItem>) {
        let mut st = self.lock();
        for item in &items {
            if let WatchItem::Event(e) = item {
                st.ring.push_back(e.clone());
            }
        }
        while st.ring.len() > self.size {
            let old = st.ring.pop_front().expect("ring is not empty");
            st.floor = old.revision();
        }
        if let Some(tx) = &st.tx {
            // No receivers is fine: nobody is watching right now.
            let _ = tx.send(Arc::new(CacheMsg::Items(items)));
        }
    }

    fn reset(&self, compacted: u64) {
        let mut st = self.lock();
        st.ring.clear();
        st.floor = compacted;
        if let Some(tx) = &st.tx {
            let _ = tx.send(Arc::new(CacheMsg::Reset(compacted)));
        }
    }

    /// Runs the shared watch from `after` until the store is dropped.
    async fn run(
        self: Arc<Self>,
        follower: Follower,
        mut after: u64,
        mut stop: watch::Receiver<()>,
    ) {
        loop {
            let (tx, mut rx) = mpsc::channel::<Batch>(1024);
            let task = tokio::spawn(follower.clone().run(None, after, tx));
            loop {
                let batch = tokio::select! {
                    _ = stop.changed() => {
                        task.abort();
                        // Closing the broadcast ends the cache watchers.
                        self.lock().tx = None;
                        return;
                    }
                    b = rx.recv() => b,
                };
                match batch {
                    // One broadcast per etcd response (etcd batches events).
                    Some(Ok(items)) => {
                        // Where to restart if the follower ever stops.
                        for item in &items {
                            if let WatchItem::Event(e) = item {
                                after = after.max(e.revision());
                            }
                        }
                        self.publish(items);
                    }
                    Some(Err(StorageError::Expired { compacted, .. })) => {
                        tracing::warn!(
                            compacted,
                            "etcd store: watch cache fell behind a compaction; resetting"
                        );
                        self.reset(compacted);
                        after = compacted;
                        break;
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "etcd store: watch cache error; restarting");
                        break;
                    }
                    None => break,
                }
            }
            task.abort();
        }
    }
}

/// Serves one client watch from the cache; falls back to a dedicated etcd
/// watch if it falls out of the ring.
async fn serve_from_cache(
    cache: Arc<Cache>,
    follower: Follower,
    prefix: String,
    after: u64,
    (mut rx, mut backlog): Attached,
    tx: mpsc::Sender<Batch>,
) {
    let mut pos = Position {
        event: after,
        progress: after,
    };
    loop {
        let items = pos.events_under(&backlog, &prefix);
        if !items.is_empty() && tx.send(Ok(items)).await.is_err() {
            return;
        }
        loop {
            let msg = tokio::select! {
                _ = tx.closed() => return,
                m = rx.recv() => m,
            };
            let msg = match msg {
                Ok(m) => m,
                Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let mut out = Vec::new();
            match &*msg {
                CacheMsg::Reset(compacted) if pos.resume() < *compacted => {
                    let requested = pos.resume();
                    let _ = tx
                        .send(Err(StorageError::Expired {
                            requested,
                            compacted: *compacted,
                        }))
                        .await;
                    return;
                }
                CacheMsg::Reset(_) => {}
                CacheMsg::Items(items) => {
                    let events = items.iter().filter_map(|i| {
                        if let WatchItem::Event(e) = i {
                            Some(e)
                        } else {
                            None
                        }
                    });
                    out = pos.events_under(events, &prefix);
                    let at = items.iter().filter_map(|i| {
                        if let WatchItem::Progress(at) = i {
                            Some(*at)
                        } else {
                            None
                        }
                    });
                    out.extend(at.max().and_then(|at| pos.progress(at)));
                }
            }
            if !out.is_empty() && tx.send(Ok(out)).await.is_err() {
                return;
            }
        }
        // Lagged behind the broadcast: catch up from the ring, or from etcd.
        match cache.attach(pos.event) {
            Some(attached) => (rx, backlog) = attached,
            None => return follower.run(None, pos.event, tx).await,
        }
    }
}

// --- the store -----------------------------------------------------------------------

/// How the client connects to etcd (to every endpoint, or to one for its
/// health).
fn connect_options(options: &EtcdOptions) -> Result<ConnectOptions> {
    let mut connect = ConnectOptions::new()
        .with_connect_timeout(options.connect_timeout)
        // Detect a dead connection under an idle watch.
        .with_keep_alive(Duration::from_secs(10), options.request_timeout)
        .with_keep_alive_while_idle(true)
        // As kube-apiserver: a member that lost its leader fails requests
        // and cancels watches (which we reopen, maybe on another member)
        // instead of serving stale data or going silent.
        .with_require_leader(true);
    if let Some(tls) = &options.tls {
        connect = connect.with_tls(tls_options(tls)?);
    }
    Ok(connect)
}

/// One etcd server's health: its status through a connection of its own,
/// answered as etcd's `/health` answers (what kube-apiserver's
/// `componentstatuses` show).
async fn endpoint_health(endpoint: &str, options: &EtcdOptions) -> Result<String> {
    let client = bounded(
        options.connect_timeout,
        Client::connect([endpoint], Some(connect_options(options)?)),
    )
    .await?
    .map_err(map_err)?;
    let mut maintenance = client.maintenance_client();
    bounded(options.request_timeout, maintenance.status())
        .await?
        .map_err(map_err)?;
    Ok(r#"{"health":"true","reason":""}"#.to_string())
}

impl EtcdStore {
    /// Connects to etcd at `endpoints` (`http://host:port`, or `https://`
    /// with [`EtcdOptions::tls`]) and stores keys under `prefix` (usually
    /// `""`; see the module docs). Fails with `Unavailable` if etcd does not
    /// answer within [`EtcdOptions::connect_timeout`].
    pub async fn connect(endpoints: &[String], prefix: &str, options: EtcdOptions) -> Result<Self> {
        let client = bounded(
            options.connect_timeout,
            Client::connect(endpoints, Some(connect_options(&options)?)),
        )
        .await?
        .map_err(map_err)?;
        // Fail now, not at the first request, if etcd is not there.
        let mut maintenance = client.maintenance_client();
        let status = bounded(options.connect_timeout, maintenance.status())
            .await?
            .map_err(map_err)?;
        let (stop_tx, stop) = watch::channel(());
        Ok(EtcdStore {
            inner: Arc::new(Inner {
                client,
                prefix: prefix.as_bytes().to_vec(),
                options,
                endpoints: endpoints.to_vec(),
                version: status.version().to_string(),
                caches: Mutex::new(HashMap::new()),
                etcd_watches: Arc::new(AtomicUsize::new(0)),
                _stop: stop_tx,
                stop,
            }),
        })
    }

    /// How many etcd watch streams this store has open: one per watch cache
    /// partition in use, plus one per watch too old for its cache.
    pub fn etcd_watch_count(&self) -> usize {
        self.inner.etcd_watches.load(Ordering::SeqCst)
    }

    fn kv(&self) -> etcd_client::KvClient {
        self.inner
            .client
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE)
    }

    /// The etcd key of `key`, possibly empty (for range ends).
    fn raw(&self, key: &str) -> Vec<u8> {
        let mut k = self.inner.prefix.clone();
        k.extend_from_slice(key.as_bytes());
        k
    }

    /// The etcd key of `key`, never empty (to send as a key).
    fn full(&self, key: &str) -> Vec<u8> {
        non_empty(self.raw(key))
    }

    /// Runs one request under the request timeout. A request that could not
    /// even be sent (a dead member's endpoint refused the connection) is
    /// retried a few times, which lands on another member: safe for writes
    /// too, since etcd never saw it.
    async fn call_raw<T, Fut>(
        &self,
        make: impl Fn(etcd_client::KvClient) -> Fut,
    ) -> Result<Result<T, etcd_client::Error>>
    where
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.inner.options.request_timeout;
        let mut retries = 0;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match bounded(left, make(self.kv())).await? {
                Err(e) if not_sent(&e) && retries < 4 && left > Duration::from_millis(100) => {
                    retries += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                other => return Ok(other),
            }
        }
    }

    async fn call<T, Fut>(&self, make: impl Fn(etcd_client::KvClient) -> Fut) -> Result<T>
    where
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_raw(make).await?.map_err(map_err)
    }

    /// A follower of the keys under `prefix`; `synced` if it starts at the
    /// current revision (the cache's), not in the past.
    fn follower(&self, prefix: &str, synced: bool) -> Follower {
        Follower {
            client: self.inner.client.clone(),
            prefix: self.inner.prefix.clone(),
            key: self.full(prefix),
            end: range_end(&self.raw(prefix)),
            options: self.inner.options.clone(),
            progress: ProgressMode::for_server(&self.inner.version, synced),
            count: self.inner.etcd_watches.clone(),
        }
    }

    /// etcd's compacted revision, which it only reveals to a watch from
    /// before it; `0` if it does not say within [`COMPACTION_PROBE`].
    async fn compacted_revision(&self) -> u64 {
        let mut client = self.inner.client.watch_client();
        let key = self.full("");
        let probe = async {
            let opts = WatchOptions::new().with_start_revision(1);
            let mut stream = client.watch(key, Some(opts)).await?;
            while let Some(r) = stream.message().await? {
                if r.compact_revision() > 0 {
                    return Ok(rev(r.compact_revision()));
                }
            }
            Ok::<_, etcd_client::Error>(0)
        };
        match tokio::time::timeout(COMPACTION_PROBE, probe).await {
            Ok(Ok(c)) => c,
            _ => 0,
        }
    }

    /// `Expired` if `revision` is older than etcd's compacted revision;
    /// returns the current revision.
    async fn check_retained(&self, key: &[u8], revision: u64) -> Result<u64> {
        let opts = GetOptions::new()
            .with_count_only()
            .with_revision(revision.max(1) as i64);
        match self
            .call_raw(|mut kv| {
                let (k, o) = (key.to_vec(), opts.clone());
                async move { kv.get(k, Some(o)).await }
            })
            .await?
        {
            Ok(r) => header_revision(r.header()),
            Err(e) if is_compacted(&e) => Err(StorageError::Expired {
                requested: revision,
                compacted: self.compacted_revision().await,
            }),
            // Watching from a future revision is allowed.
            Err(e) if is_future(&e) => self.current_revision().await,
            Err(e) => Err(map_err(e)),
        }
    }

    /// The watch cache of `prefix`'s partition, its etcd watch started at
    /// `current` if it is not running yet.
    fn cache(&self, prefix: &str, current: u64) -> Arc<Cache> {
        let part = partition(prefix);
        let cache = {
            let mut caches = self.inner.caches.lock().unwrap_or_else(|e| e.into_inner());
            caches
                .entry(part.to_owned())
                .or_insert_with(|| {
                    Arc::new(Cache {
                        state: Mutex::new(CacheState::default()),
                        size: self.inner.options.watch_cache_size.max(1),
                        capacity: self.inner.options.broadcast_capacity.max(1),
                    })
                })
                .clone()
        };
        let start = {
            let mut st = cache.lock();
            let start = !st.started;
            if start {
                st.started = true;
                st.floor = current;
                st.tx = Some(broadcast::channel(cache.capacity).0);
            }
            start
        };
        if start {
            let follower = self.follower(part, true);
            tokio::spawn(
                cache
                    .clone()
                    .run(follower, current, self.inner.stop.clone()),
            );
        }
        cache
    }
}

/// The watch cache partition of a watched `prefix`: its first
/// [`CACHE_DEPTH`] segments (`/a/b/c/` of `/a/b/c/d/`), or all of it if it
/// is shorter. Always a prefix of `prefix`, so a partition's etcd watch sees
/// every key the watch does.
fn partition(prefix: &str) -> &str {
    match prefix.match_indices('/').nth(CACHE_DEPTH) {
        Some((at, _)) => &prefix[..=at],
        None => prefix,
    }
}

fn tls_options(tls: &EtcdTls) -> Result<etcd_client::TlsOptions> {
    let read = |p: &PathBuf| {
        std::fs::read(p)
            .map_err(|e| StorageError::Internal(format!("reading {}: {e}", p.display())))
    };
    let mut opts = etcd_client::TlsOptions::new();
    if let Some(ca) = &tls.ca_file {
        opts = opts.ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            opts = opts.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?))
        }
        (None, None) => {}
        _ => {
            return Err(StorageError::Internal(
                "etcd TLS needs both a client certificate and its key".into(),
            ));
        }
    }
    Ok(opts)
}

#[async_trait]
impl Storage for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let r = self
            .call(|mut kv| {
                let k = self.full(key);
                async move { kv.get(k, None).await }
            })
            .await?;
        Ok(r.kvs().first().and_then(|kv| to_kv(&self.inner.prefix, kv)))
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<KeyValue> {
        let k = self.full(key);
        let txn = etcd_client::Txn::new()
            .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(k, value.clone(), None)]);
        let r = self
            .call(|mut kv| {
                let t = txn.clone();
                async move { kv.txn(t).await }
            })
            .await?;
        if !r.succeeded() {
            return Err(StorageError::AlreadyExists);
        }
        let at = header_revision(r.header())?;
        Ok(KeyValue {
            key: key.to_string(),
            value,
            create_revision: at,
            mod_revision: at,
        })
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected: u64) -> Result<KeyValue> {
        let k = self.full(key);
        let txn = etcd_client::Txn::new()
            .when([
                Compare::mod_revision(k.clone(), CompareOp::Equal, expected as i64),
                // An absent key has mod_revision 0: never create here.
                Compare::version(k.clone(), CompareOp::Greater, 0),
            ])
            .and_then([TxnOp::put(
                k.clone(),
                value.clone(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(k, None)]);
        let r = self
            .call(|mut kv| {
                let t = txn.clone();
                async move { kv.txn(t).await }
            })
            .await?;
        let at = header_revision(r.header())?;
        match (r.succeeded(), r.op_responses().first()) {
            (true, Some(TxnOpResponse::Put(p))) => {
                let create_revision = p.prev_key().map_or(at, |p| rev(p.create_revision()));
                Ok(KeyValue {
                    key: key.to_string(),
                    value,
                    create_revision,
                    mod_revision: at,
                })
            }
            (false, Some(TxnOpResponse::Get(g))) => match g.kvs().first() {
                None => Err(StorageError::NotFound),
                Some(cur) => Err(StorageError::Conflict {
                    current: rev(cur.mod_revision()),
                }),
            },
            _ => Err(StorageError::Internal(
                "unexpected etcd transaction response".into(),
            )),
        }
    }

    async fn delete(&self, key: &str, expected: Option<u64>) -> Result<KeyValue> {
        let k = self.full(key);
        let del = Some(DeleteOptions::new().with_prev_key());
        let prev = match expected {
            None => {
                let r = self
                    .call(|mut kv| {
                        let (k, d) = (k.clone(), del.clone());
                        async move { kv.delete(k, d).await }
                    })
                    .await?;
                let at = header_revision(r.header())?;
                r.prev_kvs().first().map(|p| (p.clone(), at))
            }
            Some(expected) => {
                let txn = etcd_client::Txn::new()
                    .when([Compare::mod_revision(
                        k.clone(),
                        CompareOp::Equal,
                        expected as i64,
                    )])
                    .and_then([TxnOp::delete(k.clone(), del)])
                    .or_else([TxnOp::get(k, None)]);
                let r = self
                    .call(|mut kv| {
                        let t = txn.clone();
                        async move { kv.txn(t).await }
                    })
                    .await?;
                let at = header_revision(r.header())?;
                match (r.succeeded(), r.op_responses().first()) {
                    (true, Some(TxnOpResponse::Delete(d))) => {
                        d.prev_kvs().first().map(|p| (p.clone(), at))
                    }
                    (false, Some(TxnOpResponse::Get(g))) => {
                        return match g.kvs().first() {
                            None => Err(StorageError::NotFound),
                            Some(cur) => Err(StorageError::Conflict {
                                current: rev(cur.mod_revision()),
                            }),
                        };
                    }
                    _ => {
                        return Err(StorageError::Internal(
                            "unexpected etcd transaction response".into(),
                        ));
                    }
                }
            }
        };
        let (prev, at) = prev.ok_or(StorageError::NotFound)?;
        let last = to_kv(&self.inner.prefix, &prev)
            .ok_or_else(|| StorageError::Internal("deleted key is not ours".into()))?;
        Ok(KeyValue {
            mod_revision: at,
            ..last
        })
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        let at = opts.revision.filter(|r| *r > 0);
        let start = opts
            .start_key
            .as_deref()
            .filter(|s| *s >= prefix)
            .unwrap_or(prefix);
        let limit = opts.limit.filter(|l| *l > 0);
        let mut get = GetOptions::new().with_range(range_end(&self.raw(prefix)));
        if let Some(at) = at {
            get = get.with_revision(at as i64);
        }
        // One more than asked: its key starts the next page.
        if let Some(l) = limit
            .and_then(|l| i64::try_from(l).ok())
            .and_then(|l| l.checked_add(1))
        {
            get = get.with_limit(l);
        }
        let r = match self
            .call_raw(|mut kv| {
                let (k, g) = (self.full(start), get.clone());
                async move { kv.get(k, Some(g)).await }
            })
            .await?
        {
            Ok(r) => r,
            Err(e) if is_compacted(&e) => {
                let requested = at.unwrap_or(0);
                return Err(StorageError::Expired {
                    requested,
                    compacted: self.compacted_revision().await,
                });
            }
            Err(e) if is_future(&e) => {
                let current = self.current_revision().await?;
                return Err(StorageError::TooLarge {
                    requested: at.unwrap_or(0),
                    current,
                });
            }
            Err(e) => return Err(map_err(e)),
        };
        let revision = match at {
            Some(at) => at,
            None => header_revision(r.header())?,
        };
        let mut items: Vec<KeyValue> = r
            .kvs()
            .iter()
            .filter_map(|kv| to_kv(&self.inner.prefix, kv))
            .collect();
        let next_key = match limit {
            Some(l) if items.len() > l => {
                let next = items.swap_remove(l).key;
                items.truncate(l);
                Some(next)
            }
            _ => None,
        };
        Ok(ListResult {
            items,
            revision,
            next_key,
        })
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        let get = GetOptions::new()
            .with_range(range_end(&self.raw(prefix)))
            .with_count_only();
        let r = self
            .call_raw(|mut kv| {
                let (k, g) = (self.full(prefix), get.clone());
                async move { kv.get(k, Some(g)).await }
            })
            .await?
            .map_err(map_err)?;
        Ok(u64::try_from(r.count()).unwrap_or(0))
    }

    async fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream> {
        let current = self.check_retained(&self.full(prefix), after).await?;
        let cache = self.cache(prefix, current);
        let follower = self.follower(prefix, false);
        let (tx, rx) = mpsc::channel(256);
        match cache.attach(after) {
            Some(attached) => {
                tokio::spawn(serve_from_cache(
                    cache,
                    follower,
                    prefix.to_string(),
                    after,
                    attached,
                    tx,
                ));
            }
            None => {
                // Older than the cache: a watch of its own, opened here so
                // that errors reach the caller.
                let open = follower.open(after).await?;
                tokio::spawn(follower.run(Some(open), after, tx));
            }
        }
        Ok(into_stream(rx))
    }

    async fn modified_since(&self, prefix: &str, after: u64) -> Result<ListResult> {
        // One range with etcd's own filter on the modification revision.
        let get = GetOptions::new()
            .with_range(range_end(&self.raw(prefix)))
            .with_min_mod_revision(after as i64 + 1);
        let r = self
            .call(|mut kv| {
                let (k, g) = (self.full(prefix), get.clone());
                async move { kv.get(k, Some(g)).await }
            })
            .await?;
        Ok(ListResult {
            items: r
                .kvs()
                .iter()
                .filter_map(|kv| to_kv(&self.inner.prefix, kv))
                .collect(),
            revision: header_revision(r.header())?,
            next_key: None,
        })
    }

    async fn server_health(&self) -> Vec<Result<String>> {
        let options = &self.inner.options;
        futures::future::join_all(
            self.inner
                .endpoints
                .iter()
                .map(|e| endpoint_health(e, options)),
        )
        .await
    }

    async fn current_revision(&self) -> Result<u64> {
        let r = self
            .call(|mut kv| {
                let k = self.full("");
                async move { kv.get(k, Some(GetOptions::new().with_count_only())).await }
            })
            .await?;
        header_revision(r.header())
    }

    async fn compact(&self, revision: u64) -> Result<()> {
        if revision == 0 {
            return Ok(());
        }
        let mut kv = self.kv();
        match bounded(
            self.inner.options.request_timeout,
            kv.compact(revision as i64, None),
        )
        .await?
        {
            Ok(_) => Ok(()),
            // Already compacted at or past `revision`: nothing to do.
            Err(e) if is_compacted(&e) => Ok(()),
            Err(e) if is_future(&e) => Err(StorageError::TooLarge {
                requested: revision,
                current: self.current_revision().await?,
            }),
            Err(e) => Err(map_err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_resources() {
        assert_eq!(
            partition("/registry/core/configmaps/default/"),
            "/registry/core/configmaps/"
        );
        assert_eq!(
            partition("/registry/core/configmaps/"),
            "/registry/core/configmaps/"
        );
        assert_eq!(
            partition("/registry/rbac.authorization.k8s.io/"),
            "/registry/rbac.authorization.k8s.io/"
        );
        assert_eq!(partition("/registry/core/con"), "/registry/core/con");
        assert_eq!(partition(""), "");
    }

    #[test]
    fn range_ends() {
        assert_eq!(range_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(range_end(b"\xff\xff"), vec![0]);
        assert_eq!(range_end(b""), vec![0]);
        assert_eq!(non_empty(Vec::new()), vec![0]);
    }

    #[test]
    fn progress_is_trusted_only_where_etcd_orders_it() {
        use ProgressMode::*;
        for (version, synced, want) in [
            ("3.4.23", true, Delayed),
            ("3.4.23", false, Off),
            ("3.4.25", false, Trusted),
            ("3.5.7", true, Delayed),
            ("3.5.8", false, Trusted),
            ("3.6.0", false, Trusted),
            ("garbage", true, Delayed),
        ] {
            assert_eq!(ProgressMode::for_server(version, synced), want, "{version}");
        }
    }

    #[test]
    fn keys_outside_the_prefix_or_not_utf8_are_skipped() {
        assert_eq!(
            user_key(b"/x", b"/x/registry/a").as_deref(),
            Some("/registry/a")
        );
        assert_eq!(user_key(b"/x", b"/y/registry/a"), None);
        assert_eq!(user_key(b"", b"/a\xff"), None);
    }
}
