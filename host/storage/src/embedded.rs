//! The embedded backend: one redb file, no other process.
//!
//! * `kv` holds the live keys; `log` holds every change by revision (the
//!   watch history, and the undo log that makes reads at an older revision
//!   possible); `meta` holds the current and the compacted revision.
//! * One writer thread applies writes in batches: it drains whatever is
//!   queued, applies each operation in order inside one write transaction,
//!   commits once (fsync), and only then answers the callers and broadcasts
//!   the events. Concurrency becomes throughput (group commit) without giving
//!   up durability: an acknowledged write has reached the disk. When more
//!   writes are announced than queued (callers still running admission),
//!   the writer waits [`EmbeddedOptions::commit_delay`] once for them.
//! * Readers use redb's MVCC read transactions and never block the writer.
//! * A watch subscribes to the broadcast first, then replays the log, and
//!   drops duplicates by revision, so nothing is skipped or repeated; a
//!   watcher that lags behind the broadcast re-reads the log.
//! * A full disk fails writes with [`StorageError::NoSpace`] and nothing
//!   else: redb refuses every operation after a failed write (`PreviousIo`)
//!   until the file is closed and opened again, so the writer then reopens
//!   it (redb recovers the last commit), and reads go on. Until a probe
//!   file of [`SPACE_PROBE_BYTES`] fits beside the data file again, writes
//!   are refused without touching the database.

use crate::{
    Event, EventKind, KeyValue, ListOptions, ListResult, Result, Storage, StorageError, WatchItem,
    WatchStream, WriteAnnouncement, prefix_end,
};
use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};

const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const REVISION: &str = "revision";
const COMPACTED: &str = "compacted";
const FORMAT: &str = "format";

/// The data file's format version, kept in `meta` under `format`. Files
/// written before the key existed (format 0: the same tables) are migrated
/// by recording it; a file of a newer format is refused, never read.
pub const FORMAT_VERSION: u64 = 1;

/// Revisions a restored store skips ([`restore`]), as `etcdutl snapshot
/// restore --bump-revision` (etcd's advice is a billion): every
/// resourceVersion a client saw before the restore stays below the
/// restored store's, and its history starts there, so watches and caches
/// from before get `410 Gone` and relist instead of trusting stale state.
pub const DEFAULT_RESTORE_BUMP: u64 = 1_000_000_000;
/// Most operations committed in one transaction.
const MAX_BATCH: usize = 1024;

/// After writes failed for lack of space, the size of the file the writer
/// writes (and removes) beside the data file before it tries a write
/// again: while it does not fit, writes are refused at once.
pub const SPACE_PROBE_BYTES: u64 = 1 << 20;

/// Most history entries one compaction step removes: a compaction is a
/// series of steps, each in the transaction of one write batch, so writers
/// queued behind it wait for at most one step (a few milliseconds), never
/// for the whole history.
pub const COMPACTION_STEP: u64 = 2_000;

/// Tuning of the embedded store.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// How often an idle watch reports progress (becomes a BOOKMARK).
    pub progress_interval: Duration,
    /// Capacity of the in-memory event broadcast; a watcher further behind
    /// re-reads the log.
    pub broadcast_capacity: usize,
    /// The most memory redb keeps of the file's pages (its read cache and
    /// write buffer together). redb's own default is 1 GiB, which a burst
    /// of large writes (a thousand CRDs and their history) fills and never
    /// gives back; pages beyond it are read from the OS page cache. 8 MiB
    /// measured no slower than 64 MiB on the create, get and list benches.
    pub cache_bytes: usize,
    /// Group commit under load, as PostgreSQL's `commit_delay`: when the
    /// writer has drained its queue and at least [`COMMIT_SIBLINGS`] more
    /// writes are announced ([`Storage::announce_write`]) but not yet
    /// queued, it waits this long once before committing, so that they
    /// share the commit (and its `fsync`) instead of each paying for one.
    /// A lone writer never waits. Zero turns it off.
    pub commit_delay: Duration,
}

/// Announced writes beyond the drained batch that make the writer wait
/// [`EmbeddedOptions::commit_delay`]: more than one, so that a single
/// client (whose next write cannot be on its way) never waits.
pub const COMMIT_SIBLINGS: usize = 2;

/// [`EmbeddedOptions::commit_delay`] by default.
pub const DEFAULT_COMMIT_DELAY: Duration = Duration::from_micros(100);

/// [`EmbeddedOptions::cache_bytes`] by default.
pub const DEFAULT_CACHE_BYTES: usize = 8 * 1024 * 1024;

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            progress_interval: Duration::from_secs(5),
            broadcast_capacity: 8192,
            cache_bytes: DEFAULT_CACHE_BYTES,
            commit_delay: DEFAULT_COMMIT_DELAY,
        }
    }
}

enum Op {
    Create {
        key: String,
        value: Vec<u8>,
    },
    Update {
        key: String,
        value: Vec<u8>,
        expected: u64,
    },
    Delete {
        key: String,
        expected: Option<u64>,
    },
    Compact {
        revision: u64,
    },
}

struct Request {
    op: Op,
    reply: oneshot::Sender<Result<Option<KeyValue>>>,
}

/// Opens the database (again): redb's file open, or in tests a backend.
type Opener = Box<dyn Fn() -> std::result::Result<Database, redb::DatabaseError> + Send + Sync>;

/// The open database, which the writer replaces after an I/O error (redb
/// answers every operation after one with `PreviousIo` until the file is
/// closed and opened again). Readers take the `Arc` only to begin a read
/// transaction, so the writer can take the database back to close it.
struct Db {
    /// `None` while closed: between closing and reopening, or when
    /// reopening failed (the writer tries again on its next batch).
    current: RwLock<Option<Arc<Database>>>,
    open: Opener,
}

impl Db {
    fn get(&self) -> Result<Arc<Database>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                StorageError::Unavailable(
                    "the data file is being reopened after an I/O error".into(),
                )
            })
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction> {
        self.get()?.begin_read().map_err(internal)
    }

    /// Closes the database: waits for readers to let go of the handle
    /// (their open read transactions fail from then on), then closes it.
    fn close(&self) {
        let taken = self
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(mut db) = taken else { return };
        let db = loop {
            match Arc::try_unwrap(db) {
                Ok(db) => break db,
                Err(shared) => {
                    db = shared;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        if let Err(e) = db.close() {
            tracing::warn!(error = %e, "embedded store: closing the data file after an I/O error");
        }
    }

    /// Opens the database if it is closed.
    fn reopen(&self) -> Result<Arc<Database>> {
        if let Ok(db) = self.get() {
            return Ok(db);
        }
        let db = Arc::new(
            (self.open)()
                .map_err(|e| StorageError::Unavailable(format!("reopening the data file: {e}")))?,
        );
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(db.clone());
        tracing::info!("embedded store: data file reopened after an I/O error");
        Ok(db)
    }
}

struct Inner {
    path: PathBuf,
    db: Arc<Db>,
    writer: mpsc::UnboundedSender<Request>,
    events: broadcast::Sender<Arc<Vec<Event>>>,
    options: EmbeddedOptions,
    /// Writes announced and not yet queued.
    announced: Arc<AtomicUsize>,
    /// Write transactions committed so far.
    commits: Arc<AtomicU64>,
}

/// The embedded, persistent, crash-safe store (see the module docs).
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

fn internal(e: impl std::fmt::Display) -> StorageError {
    StorageError::Internal(e.to_string())
}

/// A redb error in a write: out of space (disk full, quota, file size
/// limit) is [`StorageError::NoSpace`], anything else internal.
fn write_error(e: impl Into<redb::Error>) -> StorageError {
    let e: redb::Error = e.into();
    match &e {
        redb::Error::Io(io) if out_of_space(io) => StorageError::NoSpace(e.to_string()),
        _ => StorageError::Internal(e.to_string()),
    }
}

fn out_of_space(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge
    )
}

/// Whether [`SPACE_PROBE_BYTES`] can be written beside `data_file` (the
/// probe is removed again).
fn space_available(data_file: &Path) -> bool {
    use std::io::Write;
    let probe = data_file.with_extension("space-probe");
    let fits = std::fs::File::create(&probe).is_ok_and(|mut f| {
        let chunk = vec![0u8; 64 << 10];
        (0..SPACE_PROBE_BYTES / chunk.len() as u64).all(|_| f.write_all(&chunk).is_ok())
            && f.sync_data().is_ok()
    });
    let _ = std::fs::remove_file(&probe);
    fits
}

// --- value encoding -------------------------------------------------------

fn encode_kv(create: u64, modr: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value.len());
    out.extend_from_slice(&create.to_be_bytes());
    out.extend_from_slice(&modr.to_be_bytes());
    out.extend_from_slice(value);
    out
}

fn decode_kv(key: &str, bytes: &[u8]) -> Result<KeyValue> {
    if bytes.len() < 16 {
        return Err(internal(format!("corrupt value at {key}")));
    }
    Ok(KeyValue {
        key: key.to_string(),
        create_revision: u64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes")),
        mod_revision: u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes")),
        value: bytes[16..].to_vec(),
    })
}

/// Log record: kind(1) key_len(4) key create(8) value_len(4) value
/// has_prev(1) [prev_mod(8) prev_value...].
fn encode_event(e: &Event) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(match e.kind {
        EventKind::Created => 0,
        EventKind::Modified => 1,
        EventKind::Deleted => 2,
    });
    out.extend_from_slice(&(e.kv.key.len() as u32).to_be_bytes());
    out.extend_from_slice(e.kv.key.as_bytes());
    out.extend_from_slice(&e.kv.create_revision.to_be_bytes());
    let value: &[u8] = if e.kind == EventKind::Deleted {
        &[]
    } else {
        &e.kv.value
    };
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(value);
    match &e.prev {
        None => out.push(0),
        Some(p) => {
            out.push(1);
            out.extend_from_slice(&p.mod_revision.to_be_bytes());
            out.extend_from_slice(&p.value);
        }
    }
    out
}

fn decode_event(revision: u64, b: &[u8]) -> Result<Event> {
    let corrupt = || internal(format!("corrupt log record at revision {revision}"));
    let take = |at: usize, n: usize| b.get(at..at + n).ok_or_else(corrupt);
    let kind = match take(0, 1)?[0] {
        0 => EventKind::Created,
        1 => EventKind::Modified,
        2 => EventKind::Deleted,
        _ => return Err(corrupt()),
    };
    let key_len = u32::from_be_bytes(take(1, 4)?.try_into().expect("4")) as usize;
    let key = String::from_utf8(take(5, key_len)?.to_vec()).map_err(|_| corrupt())?;
    let mut at = 5 + key_len;
    let create = u64::from_be_bytes(take(at, 8)?.try_into().expect("8"));
    at += 8;
    let vlen = u32::from_be_bytes(take(at, 4)?.try_into().expect("4")) as usize;
    at += 4;
    let value = take(at, vlen)?.to_vec();
    at += vlen;
    let prev = match take(at, 1)?[0] {
        0 => None,
        _ => Some(KeyValue {
            key: key.clone(),
            create_revision: create,
            mod_revision: u64::from_be_bytes(take(at + 1, 8)?.try_into().expect("8")),
            value: b[at + 9..].to_vec(),
        }),
    };
    let value = if kind == EventKind::Deleted {
        prev.as_ref().map(|p| p.value.clone()).unwrap_or_default()
    } else {
        value
    };
    Ok(Event {
        kind,
        kv: KeyValue {
            key,
            value,
            create_revision: create,
            mod_revision: revision,
        },
        prev,
    })
}

// --- the writer --------------------------------------------------------------

fn apply(
    op: &Op,
    rev: &mut u64,
    kv: &mut redb::Table<&str, &[u8]>,
    log: &mut redb::Table<u64, &[u8]>,
    meta: &mut redb::Table<&str, u64>,
    events: &mut Vec<Event>,
) -> Result<Option<KeyValue>> {
    let current = |kv: &redb::Table<&str, &[u8]>, key: &str| -> Result<Option<KeyValue>> {
        kv.get(key)
            .map_err(internal)?
            .map(|v| decode_kv(key, v.value()))
            .transpose()
    };
    let event = match op {
        Op::Create { key, value } => {
            if current(kv, key)?.is_some() {
                return Err(StorageError::AlreadyExists);
            }
            let r = *rev + 1;
            Event {
                kind: EventKind::Created,
                kv: KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: r,
                    mod_revision: r,
                },
                prev: None,
            }
        }
        Op::Update {
            key,
            value,
            expected,
        } => {
            let prev = current(kv, key)?.ok_or(StorageError::NotFound)?;
            if prev.mod_revision != *expected {
                return Err(StorageError::Conflict {
                    current: prev.mod_revision,
                });
            }
            Event {
                kind: EventKind::Modified,
                kv: KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: prev.create_revision,
                    mod_revision: *rev + 1,
                },
                prev: Some(prev),
            }
        }
        Op::Delete { key, expected } => {
            let prev = current(kv, key)?.ok_or(StorageError::NotFound)?;
            if expected.is_some_and(|e| e != prev.mod_revision) {
                return Err(StorageError::Conflict {
                    current: prev.mod_revision,
                });
            }
            Event {
                kind: EventKind::Deleted,
                kv: KeyValue {
                    mod_revision: *rev + 1,
                    ..prev.clone()
                },
                prev: Some(prev),
            }
        }
        Op::Compact { revision } => {
            let compacted = meta
                .get(COMPACTED)
                .map_err(internal)?
                .map(|v| v.value())
                .unwrap_or(0);
            if *revision > *rev {
                return Err(StorageError::TooLarge {
                    requested: *revision,
                    current: *rev,
                });
            }
            if *revision > compacted {
                let upto = (*revision).min(compacted + COMPACTION_STEP);
                log.retain_in(..=upto, |_, _| false).map_err(write_error)?;
                meta.insert(COMPACTED, upto).map_err(write_error)?;
            }
            return Ok(None);
        }
    };
    *rev += 1;
    match event.kind {
        EventKind::Deleted => {
            kv.remove(event.kv.key.as_str()).map_err(write_error)?;
        }
        _ => {
            let enc = encode_kv(
                event.kv.create_revision,
                event.kv.mod_revision,
                &event.kv.value,
            );
            kv.insert(event.kv.key.as_str(), enc.as_slice())
                .map_err(write_error)?;
        }
    }
    log.insert(*rev, encode_event(&event).as_slice())
        .map_err(write_error)?;
    let out = event.kv.clone();
    events.push(event);
    Ok(Some(out))
}

/// Each operation's own outcome, and the events of the committed batch.
type BatchOutcome = (Vec<Result<Option<KeyValue>>>, Vec<Event>);

/// Applies a batch in one transaction. An operation refused for what it
/// found (exists, not found, conflict) changed nothing and fails alone;
/// any other failure may have left it half applied, so it fails the whole
/// batch and nothing is committed.
fn write_batch(db: &Database, batch: &[Request]) -> Result<BatchOutcome> {
    let txn = db.begin_write().map_err(write_error)?;
    let mut results = Vec::with_capacity(batch.len());
    let mut events = Vec::new();
    {
        let mut kv = txn.open_table(KV).map_err(write_error)?;
        let mut log = txn.open_table(LOG).map_err(write_error)?;
        let mut meta = txn.open_table(META).map_err(write_error)?;
        let mut rev = meta
            .get(REVISION)
            .map_err(write_error)?
            .map(|v| v.value())
            .unwrap_or(0);
        for req in batch {
            let result = apply(&req.op, &mut rev, &mut kv, &mut log, &mut meta, &mut events);
            if let Err(
                e @ (StorageError::Internal(_)
                | StorageError::NoSpace(_)
                | StorageError::Unavailable(_)),
            ) = result
            {
                return Err(e);
            }
            results.push(result);
        }
        meta.insert(REVISION, rev).map_err(write_error)?;
    }
    txn.commit().map_err(write_error)?;
    Ok((results, events))
}

/// Moves what is queued into `batch`, up to [`MAX_BATCH`].
fn drain(rx: &mut mpsc::UnboundedReceiver<Request>, batch: &mut Vec<Request>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(r) => batch.push(r),
            Err(_) => break,
        }
    }
}

/// What the writer thread works with.
struct Writer {
    db: Arc<Db>,
    path: PathBuf,
    events: broadcast::Sender<Arc<Vec<Event>>>,
    announced: Arc<AtomicUsize>,
    commit_delay: Duration,
    commits: Arc<AtomicU64>,
    /// The newest revision broadcast.
    broadcast: u64,
}

impl Writer {
    /// After a failed batch: if redb refuses to go on (`PreviousIo`),
    /// closes the database and opens it again, then broadcasts what the
    /// failed commit may have made durable after all (an error after the
    /// commit record was written), so no watch misses it.
    fn recover(&mut self, db: Arc<Database>) {
        match db.begin_write() {
            Ok(txn) => {
                let _ = txn.abort();
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "embedded store: closing and reopening the data file")
            }
        }
        drop(db);
        self.db.close();
        if let Err(e) = self.db.reopen() {
            tracing::error!(error = %e, "embedded store: cannot reopen the data file; retrying on the next write");
            return;
        }
        self.catch_up();
    }

    /// Broadcasts committed events newer than the last broadcast.
    fn catch_up(&mut self) {
        let Ok(db) = self.db.get() else { return };
        match EmbeddedStore::read_log(&db, "", self.broadcast) {
            Ok((evs, at)) => {
                self.broadcast = self.broadcast.max(at);
                if !evs.is_empty() {
                    tracing::warn!(
                        events = evs.len(),
                        "embedded store: a write reported failed was committed"
                    );
                    let _ = self.events.send(Arc::new(evs));
                }
            }
            Err(e) => tracing::warn!(error = %e, "embedded store: reading the log after reopening"),
        }
    }
}

fn writer_loop(mut w: Writer, mut rx: mpsc::UnboundedReceiver<Request>) {
    // Set when writes failed for lack of space, until the probe fits.
    let mut out_of_space: Option<StorageError> = None;
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        drain(&mut rx, &mut batch);
        if !w.commit_delay.is_zero()
            && batch.len() < MAX_BATCH
            && w.announced.load(Ordering::Acquire) >= COMMIT_SIBLINGS
        {
            std::thread::sleep(w.commit_delay);
            drain(&mut rx, &mut batch);
        }
        let fail = |batch: Vec<Request>, e: &StorageError| {
            for req in batch {
                let _ = req.reply.send(Err(e.clone()));
            }
        };
        if let Some(e) = &out_of_space {
            if !space_available(&w.path) {
                fail(batch, e);
                continue;
            }
            out_of_space = None;
        }
        let db = match w.db.reopen() {
            Ok(db) => db,
            Err(e) => {
                fail(batch, &e);
                continue;
            }
        };
        match write_batch(&db, &batch) {
            Ok((results, evs)) => {
                w.commits.fetch_add(1, Ordering::Relaxed);
                for (req, res) in batch.into_iter().zip(results) {
                    let _ = req.reply.send(res);
                }
                if let Some(last) = evs.last() {
                    w.broadcast = last.revision();
                    // No receivers is fine: nobody is watching.
                    let _ = w.events.send(Arc::new(evs));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "embedded store: write transaction failed");
                // Reads work again before the writers hear of the failure.
                w.recover(db);
                fail(batch, &e);
                if matches!(e, StorageError::NoSpace(_)) {
                    out_of_space = Some(e);
                }
            }
        }
    }
}

// --- the store ---------------------------------------------------------------

impl EmbeddedStore {
    /// Opens (or creates) the store in `path` (a file).
    pub fn open(path: &Path, options: EmbeddedOptions) -> Result<Self> {
        let (file, cache) = (path.to_path_buf(), options.cache_bytes);
        let opener: Opener =
            Box::new(move || redb::Builder::new().set_cache_size(cache).create(&file));
        Self::open_with(path, options, opener)
    }

    /// Opens the store with `open` (called again to reopen the database
    /// after an I/O error); `path` is where the data file is (for its size
    /// and the space probe).
    fn open_with(path: &Path, options: EmbeddedOptions, open: Opener) -> Result<Self> {
        let db =
            open().map_err(|e| StorageError::Unavailable(format!("{}: {e}", path.display())))?;
        {
            let txn = db.begin_write().map_err(internal)?;
            txn.open_table(KV).map_err(internal)?;
            txn.open_table(LOG).map_err(internal)?;
            {
                let mut meta = txn.open_table(META).map_err(internal)?;
                let get = |m: &redb::Table<&str, u64>, k| -> Result<Option<u64>> {
                    Ok(m.get(k).map_err(internal)?.map(|v| v.value()))
                };
                match get(&meta, FORMAT)? {
                    Some(f) if f > FORMAT_VERSION => {
                        return Err(StorageError::Unavailable(format!(
                            "{}: the data file's format is {f}, newer than this binary reads ({FORMAT_VERSION}): run the release that wrote it, or restore a snapshot taken with it (`wasm-apiserver snapshot save`)",
                            path.display()
                        )));
                    }
                    Some(_) => {}
                    None => {
                        if get(&meta, REVISION)?.unwrap_or(0) > 0 {
                            tracing::info!(file = %path.display(), from = 0, to = FORMAT_VERSION, "embedded store: data file format migrated");
                        }
                        meta.insert(FORMAT, FORMAT_VERSION).map_err(internal)?;
                    }
                }
            }
            txn.commit().map_err(internal)?;
        }
        let revision = Self::revisions(&db.begin_read().map_err(internal)?)?.0;
        let db = Arc::new(Db {
            current: RwLock::new(Some(Arc::new(db))),
            open,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let (events, _) = broadcast::channel(options.broadcast_capacity);
        let announced = Arc::new(AtomicUsize::new(0));
        let commits = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            db: db.clone(),
            path: path.to_path_buf(),
            events: events.clone(),
            announced: announced.clone(),
            commit_delay: options.commit_delay,
            commits: commits.clone(),
            broadcast: revision,
        };
        std::thread::Builder::new()
            .name("embedded-store-writer".into())
            .spawn(move || writer_loop(writer, rx))
            .map_err(internal)?;
        Ok(EmbeddedStore {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                db,
                writer: tx,
                events,
                options,
                announced,
                commits,
            }),
        })
    }

    /// Writes a consistent copy of the live keys, as of one revision, to
    /// `dest` (a new redb file, written beside it and renamed into place),
    /// while writes go on: it reads one redb read transaction (MVCC), so
    /// writers never wait for it. The history is not copied: the copy's
    /// compacted revision is its revision. Blocking; run it on a blocking
    /// thread.
    pub fn snapshot(&self, dest: &Path) -> Result<SnapshotInfo> {
        let txn = self.inner.db.begin_read()?;
        let (revision, _) = Self::revisions(&txn)?;
        let tmp = dest.with_extension("partial");
        let _ = std::fs::remove_file(&tmp);
        let out = Database::create(&tmp)
            .map_err(|e| StorageError::Unavailable(format!("{}: {e}", tmp.display())))?;
        let mut keys = 0;
        {
            let w = out.begin_write().map_err(internal)?;
            {
                let src = txn.open_table(KV).map_err(internal)?;
                let mut kv = w.open_table(KV).map_err(internal)?;
                for entry in src.iter().map_err(internal)? {
                    let (k, v) = entry.map_err(internal)?;
                    kv.insert(k.value(), v.value()).map_err(internal)?;
                    keys += 1;
                }
                w.open_table(LOG).map_err(internal)?;
                let mut meta = w.open_table(META).map_err(internal)?;
                meta.insert(REVISION, revision).map_err(internal)?;
                meta.insert(COMPACTED, revision).map_err(internal)?;
                meta.insert(FORMAT, FORMAT_VERSION).map_err(internal)?;
            }
            w.commit().map_err(internal)?;
        }
        drop(out);
        std::fs::rename(&tmp, dest)
            .map_err(|e| StorageError::Unavailable(format!("{}: {e}", dest.display())))?;
        let bytes = std::fs::metadata(dest).map_or(0, |m| m.len());
        Ok(SnapshotInfo {
            revision,
            keys,
            bytes,
        })
    }

    /// How many write transactions (each a batch of writes, one `fsync`)
    /// the store has committed since it was opened.
    pub fn commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    async fn write(&self, op: Op) -> Result<Option<KeyValue>> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .writer
            .send(Request { op, reply })
            .map_err(|_| StorageError::Unavailable("store is closed".into()))?;
        rx.await
            .map_err(|_| StorageError::Unavailable("store writer stopped".into()))?
    }

    fn revisions(txn: &redb::ReadTransaction) -> Result<(u64, u64)> {
        let meta = txn.open_table(META).map_err(internal)?;
        let get = |k| -> Result<u64> {
            Ok(meta
                .get(k)
                .map_err(internal)?
                .map(|v| v.value())
                .unwrap_or(0))
        };
        Ok((get(REVISION)?, get(COMPACTED)?))
    }

    /// Events under `prefix` with revision in `(after, ..]`, and the revision
    /// read at.
    fn read_log(db: &Database, prefix: &str, after: u64) -> Result<(Vec<Event>, u64)> {
        let txn = db.begin_read().map_err(internal)?;
        let (current, compacted) = Self::revisions(&txn)?;
        if after < compacted {
            return Err(StorageError::Expired {
                requested: after,
                compacted,
            });
        }
        let log = txn.open_table(LOG).map_err(internal)?;
        let mut out = Vec::new();
        for entry in log.range(after + 1..).map_err(internal)? {
            let (rev, rec) = entry.map_err(internal)?;
            let ev = decode_event(rev.value(), rec.value())?;
            if ev.kv.key.starts_with(prefix) {
                out.push(ev);
            }
        }
        Ok((out, current))
    }
}

#[async_trait]
impl Storage for EmbeddedStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let txn = self.inner.db.begin_read()?;
        let kv = txn.open_table(KV).map_err(internal)?;
        kv.get(key)
            .map_err(internal)?
            .map(|v| decode_kv(key, v.value()))
            .transpose()
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<KeyValue> {
        let kv = self
            .write(Op::Create {
                key: key.into(),
                value,
            })
            .await?;
        kv.ok_or_else(|| internal("create returned nothing"))
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected: u64) -> Result<KeyValue> {
        let kv = self
            .write(Op::Update {
                key: key.into(),
                value,
                expected,
            })
            .await?;
        kv.ok_or_else(|| internal("update returned nothing"))
    }

    async fn delete(&self, key: &str, expected: Option<u64>) -> Result<KeyValue> {
        let kv = self
            .write(Op::Delete {
                key: key.into(),
                expected,
            })
            .await?;
        kv.ok_or_else(|| internal("delete returned nothing"))
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult> {
        let txn = self.inner.db.begin_read()?;
        let (current, compacted) = Self::revisions(&txn)?;
        let at = opts.revision.filter(|r| *r > 0).unwrap_or(current);
        if at > current {
            return Err(StorageError::TooLarge {
                requested: at,
                current,
            });
        }
        if at < compacted {
            return Err(StorageError::Expired {
                requested: at,
                compacted,
            });
        }
        let start = opts
            .start_key
            .clone()
            .filter(|s| s.as_str() >= prefix)
            .unwrap_or_else(|| prefix.to_string());
        let end = prefix_end(prefix);
        let in_range = |k: &str| k >= start.as_str() && k.starts_with(prefix);
        // Undo every change after `at`: the state of a key at `at` is the
        // `prev` of its first change after `at`.
        let mut undo: BTreeMap<String, Option<KeyValue>> = BTreeMap::new();
        if at < current {
            let log = txn.open_table(LOG).map_err(internal)?;
            for entry in log.range(at + 1..=current).map_err(internal)?.rev() {
                let (rev, rec) = entry.map_err(internal)?;
                let ev = decode_event(rev.value(), rec.value())?;
                if in_range(&ev.kv.key) {
                    undo.insert(ev.kv.key.clone(), ev.prev);
                }
            }
        }
        let limit = opts.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let kv = txn.open_table(KV).map_err(internal)?;
        let range = match &end {
            Some(end) => kv.range::<&str>(start.as_str()..end.as_str()),
            None => kv.range::<&str>(start.as_str()..),
        }
        .map_err(internal)?;
        let mut live = range.map(|e| {
            let (k, v) = e.map_err(internal)?;
            decode_kv(k.value(), v.value())
        });
        let mut undone = undo.into_iter().peekable();
        let mut items = Vec::new();
        let mut next_live = live.next().transpose()?;
        loop {
            // Merge the live range and the undo map in key order.
            let take_undo = match (&next_live, undone.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(l), Some((k, _))) => k.as_str() <= l.key.as_str(),
            };
            let item = if take_undo {
                let (k, v) = undone.next().expect("peeked");
                if next_live.as_ref().is_some_and(|l| l.key == k) {
                    next_live = live.next().transpose()?;
                }
                v
            } else {
                let l = next_live.take();
                next_live = live.next().transpose()?;
                l
            };
            if let Some(item) = item {
                if items.len() == limit {
                    return Ok(ListResult {
                        items,
                        revision: at,
                        next_key: Some(item.key),
                    });
                }
                items.push(item);
            }
        }
        Ok(ListResult {
            items,
            revision: at,
            next_key: None,
        })
    }

    async fn count(&self, prefix: &str) -> Result<u64> {
        let txn = self.inner.db.begin_read()?;
        let kv = txn.open_table(KV).map_err(internal)?;
        let range = match prefix_end(prefix) {
            Some(end) => kv.range::<&str>(prefix..end.as_str()),
            None => kv.range::<&str>(prefix..),
        }
        .map_err(internal)?;
        let mut n = 0;
        for entry in range {
            entry.map_err(internal)?;
            n += 1;
        }
        Ok(n)
    }

    async fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream> {
        // Subscribe before reading the log so no commit falls in between.
        let mut rx = self.inner.events.subscribe();
        let (replay, read_at) = Self::read_log(&*self.inner.db.get()?, prefix, after)?;
        let (tx, out) = mpsc::channel::<Result<WatchItem>>(256);
        let db = self.inner.db.clone();
        let prefix = prefix.to_string();
        let progress = self.inner.options.progress_interval;
        tokio::spawn(async move {
            let mut last = read_at;
            for ev in replay {
                if tx.send(Ok(WatchItem::Event(ev))).await.is_err() {
                    return;
                }
            }
            let mut tick = tokio::time::interval(progress);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tick.tick() => {
                        if tx.send(Ok(WatchItem::Progress(last))).await.is_err() { return; }
                    }
                    batch = rx.recv() => match batch {
                        Ok(batch) => {
                            for ev in batch.iter() {
                                if ev.revision() <= last {
                                    continue;
                                }
                                last = ev.revision();
                                if ev.kv.key.starts_with(&prefix)
                                    && tx.send(Ok(WatchItem::Event(ev.clone()))).await.is_err()
                                {
                                    return;
                                }
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            // Fell behind the broadcast: catch up from the log.
                            match db.get().and_then(|db| Self::read_log(&db, &prefix, last)) {
                                Ok((evs, at)) => {
                                    for ev in evs {
                                        if tx.send(Ok(WatchItem::Event(ev))).await.is_err() { return; }
                                    }
                                    last = last.max(at);
                                }
                                Err(e) => {
                                    let _ = tx.send(Err(e)).await;
                                    return;
                                }
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            }
        });
        Ok(Box::pin(tokio_stream_from(out)))
    }

    async fn current_revision(&self) -> Result<u64> {
        let txn = self.inner.db.begin_read()?;
        Ok(Self::revisions(&txn)?.0)
    }

    async fn modified_since(&self, prefix: &str, after: u64) -> Result<ListResult> {
        // The log since `after`, one read transaction: the last change of
        // each key is its latest state.
        let (events, revision) = match Self::read_log(&*self.inner.db.get()?, prefix, after) {
            Ok(read) => read,
            // Compacted away: read the whole prefix.
            Err(StorageError::Expired { .. }) => {
                return crate::modified_by_listing(self, prefix, after).await;
            }
            Err(e) => return Err(e),
        };
        let mut last = std::collections::BTreeMap::new();
        for ev in events {
            last.insert(ev.kv.key.clone(), ev);
        }
        let items = last
            .into_values()
            .filter(|ev| ev.kind != EventKind::Deleted)
            .map(|ev| ev.kv)
            .collect();
        Ok(ListResult {
            items,
            revision,
            next_key: None,
        })
    }

    fn announce_write(&self) -> WriteAnnouncement {
        WriteAnnouncement::counted(&self.inner.announced)
    }

    async fn status(&self) -> Result<crate::StoreStatus> {
        let txn = self.inner.db.begin_read()?;
        let (revision, compacted) = Self::revisions(&txn)?;
        Ok(crate::StoreStatus {
            revision,
            compacted: Some(compacted),
            size_bytes: std::fs::metadata(&self.inner.path).ok().map(|m| m.len()),
        })
    }

    /// Compacts in steps of [`COMPACTION_STEP`] revisions (see there).
    async fn compact(&self, revision: u64) -> Result<()> {
        loop {
            self.write(Op::Compact { revision }).await?;
            let txn = self.inner.db.begin_read()?;
            if Self::revisions(&txn)?.1 >= revision {
                return Ok(());
            }
        }
    }
}

/// What a snapshot holds: its revision, its keys and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub revision: u64,
    pub keys: u64,
    pub bytes: u64,
}

/// Makes `data_file` (which must not exist: a restore never overwrites a
/// store) a copy of `snapshot` whose revision is the snapshot's plus `bump`
/// and whose history starts there (see [`DEFAULT_RESTORE_BUMP`]). Objects
/// keep their resourceVersions. Blocking.
pub fn restore(snapshot: &Path, data_file: &Path, bump: u64) -> Result<SnapshotInfo> {
    if data_file.exists() {
        return Err(StorageError::Unavailable(format!(
            "{}: a store exists already; restore into a new data directory",
            data_file.display()
        )));
    }
    let tmp = data_file.with_extension("restoring");
    std::fs::copy(snapshot, &tmp)
        .map_err(|e| StorageError::Unavailable(format!("{}: {e}", snapshot.display())))?;
    let revision = {
        let db = Database::open(&tmp).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            StorageError::Unavailable(format!("{}: not a snapshot: {e}", snapshot.display()))
        })?;
        let w = db.begin_write().map_err(internal)?;
        let revision = {
            let mut meta = w.open_table(META).map_err(internal)?;
            let get = |m: &redb::Table<&str, u64>, k| -> Result<u64> {
                Ok(m.get(k).map_err(internal)?.map_or(0, |v| v.value()))
            };
            let format = get(&meta, FORMAT)?;
            if format > FORMAT_VERSION {
                return Err(StorageError::Unavailable(format!(
                    "{}: the snapshot's format is {format}, newer than this binary reads ({FORMAT_VERSION})",
                    snapshot.display()
                )));
            }
            let revision = get(&meta, REVISION)? + bump;
            meta.insert(REVISION, revision).map_err(internal)?;
            meta.insert(COMPACTED, revision).map_err(internal)?;
            meta.insert(FORMAT, FORMAT_VERSION).map_err(internal)?;
            // History older than the new revision cannot be served.
            w.open_table(LOG)
                .map_err(internal)?
                .retain(|_, _| false)
                .map_err(internal)?;
            revision
        };
        w.commit().map_err(internal)?;
        revision
    };
    let keys = {
        let db = Database::open(&tmp).map_err(internal)?;
        let r = db.begin_read().map_err(internal)?;
        r.open_table(KV)
            .map_err(internal)?
            .len()
            .map_err(internal)?
    };
    std::fs::rename(&tmp, data_file)
        .map_err(|e| StorageError::Unavailable(format!("{}: {e}", data_file.display())))?;
    Ok(SnapshotInfo {
        revision,
        keys,
        bytes: std::fs::metadata(data_file).map_or(0, |m| m.len()),
    })
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Storage;
    use futures::StreamExt;
    use redb::StorageBackend;
    use redb::backends::InMemoryBackend;
    use std::sync::Mutex;

    /// A data file in memory that fills up like a disk: while full, a
    /// write reaching past the size the file had when it filled fails with
    /// ENOSPC (growing the file is free, as a sparse file's; its blocks are
    /// not), and rewriting what is already there still works.
    #[derive(Debug)]
    struct FillingDisk {
        file: Arc<InMemoryBackend>,
        /// `Some(size)`: full beyond `size` bytes.
        full: Arc<Mutex<Option<u64>>>,
    }

    impl StorageBackend for FillingDisk {
        fn len(&self) -> std::io::Result<u64> {
            self.file.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
            self.file.read(offset, out)
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.file.set_len(len)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            self.file.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
            if let Some(size) = *self.full.lock().unwrap()
                && offset + data.len() as u64 > size
            {
                return Err(std::io::ErrorKind::StorageFull.into());
            }
            self.file.write(offset, data)
        }
    }

    /// Writes on a full disk fail with `NoSpace` (redb then refuses the
    /// database until it is reopened: the store reopens it); reads go on
    /// and see every acknowledged write; once there is space writes go on
    /// with the next revision, and a watch sees each acknowledged write
    /// once, in order, and nothing of the refused ones.
    #[tokio::test]
    async fn a_full_disk_refuses_writes_keeps_reads_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(InMemoryBackend::new());
        let full = Arc::new(Mutex::new(None));
        let opens = Arc::new(AtomicUsize::new(0));
        let opener: Opener = {
            let (file, full, opens) = (file.clone(), full.clone(), opens.clone());
            Box::new(move || {
                opens.fetch_add(1, Ordering::SeqCst);
                redb::Builder::new()
                    .set_cache_size(64 << 10)
                    .create_with_backend(FillingDisk {
                        file: file.clone(),
                        full: full.clone(),
                    })
            })
        };
        let options = EmbeddedOptions {
            cache_bytes: 64 << 10,
            ..EmbeddedOptions::default()
        };
        let store = EmbeddedStore::open_with(&dir.path().join("store.redb"), options, opener)
            .expect("open");
        let mut watch = store.watch("/k/", 0).await.expect("watch");
        let mut acked: Vec<KeyValue> = Vec::new();
        for i in 0..40 {
            acked.push(
                store
                    .create(&format!("/k/{i:03}"), vec![i; 4000])
                    .await
                    .unwrap(),
            );
        }

        *full.lock().unwrap() = Some(file.len().unwrap());
        let mut refused = None;
        for i in 40..100 {
            match store.create(&format!("/k/{i:03}"), vec![i; 64 << 10]).await {
                Ok(kv) => acked.push(kv),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let refused = refused.expect("60 writes of 64 KiB fit on a full disk");
        assert!(matches!(refused, StorageError::NoSpace(_)), "{refused:?}");
        assert!(
            opens.load(Ordering::SeqCst) >= 2,
            "the database was not reopened"
        );
        // Still full: refused again, the same way.
        let again = store.create("/k/again", vec![1; 64 << 10]).await;
        assert!(matches!(again, Err(StorageError::NoSpace(_))), "{again:?}");
        let check = |acked: Vec<KeyValue>| {
            let store = store.clone();
            async move {
                for kv in &acked {
                    assert_eq!(store.get(&kv.key).await.unwrap().as_ref(), Some(kv));
                }
                let listed = store.list("/k/", ListOptions::default()).await.unwrap();
                assert_eq!(listed.items, acked);
            }
        };
        check(acked.clone()).await;

        *full.lock().unwrap() = None;
        let before = store.current_revision().await.unwrap();
        assert_eq!(before, acked.last().unwrap().mod_revision);
        let after = store
            .create("/k/zzz", vec![7; 64 << 10])
            .await
            .expect("write after space was freed");
        assert_eq!(after.mod_revision, before + 1);
        acked.push(after);
        check(acked.clone()).await;

        let mut seen = Vec::new();
        while seen.len() < acked.len() {
            let item = tokio::time::timeout(Duration::from_secs(5), watch.next())
                .await
                .expect("watch event")
                .expect("watch open")
                .expect("watch item");
            if let WatchItem::Event(ev) = item {
                seen.push(ev.kv);
            }
        }
        assert_eq!(seen, acked);
    }

    #[test]
    fn log_records_round_trip() {
        let kv = KeyValue {
            key: "/a/b".into(),
            value: b"new".to_vec(),
            create_revision: 3,
            mod_revision: 7,
        };
        let prev = KeyValue {
            mod_revision: 5,
            value: b"old".to_vec(),
            ..kv.clone()
        };
        for ev in [
            Event {
                kind: EventKind::Created,
                kv: KeyValue {
                    create_revision: 7,
                    ..kv.clone()
                },
                prev: None,
            },
            Event {
                kind: EventKind::Modified,
                kv: kv.clone(),
                prev: Some(prev.clone()),
            },
            Event {
                kind: EventKind::Deleted,
                kv: KeyValue {
                    value: b"old".to_vec(),
                    ..kv.clone()
                },
                prev: Some(prev),
            },
        ] {
            assert_eq!(decode_event(7, &encode_event(&ev)).unwrap(), ev);
        }
        assert!(decode_event(1, &[9]).is_err());
    }
}
