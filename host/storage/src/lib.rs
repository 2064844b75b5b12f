//! Storage: the one async [`Storage`] trait every backend implements, with
//! etcd's semantics (a global revision, CAS on revisions, ranges at a fixed
//! revision, watches that replay history), the embedded backend
//! ([`embedded::EmbeddedStore`], on redb) and a backend-agnostic test suite
//! ([`suite`]) that every backend must pass.
//!
//! Values are opaque bytes: this crate knows nothing of Kubernetes objects.
//! The API server stores JSON without `metadata.resourceVersion` and sets it
//! from [`KeyValue::mod_revision`] on the way out, as kube-apiserver does
//! with etcd.

use async_trait::async_trait;
use futures::stream::BoxStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub mod embedded;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod suite;

/// A stored value and its revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    /// Revision of the write that created the key.
    pub create_revision: u64,
    /// Revision of the last write to the key (for a deleted key in a watch
    /// event: the revision of the delete).
    pub mod_revision: u64,
}

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    Modified,
    Deleted,
}

/// One change, in revision order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The new value; for `Deleted`, the last value with `mod_revision` set to
    /// the revision of the delete.
    pub kv: KeyValue,
    /// The value before this change (`None` for `Created`).
    pub prev: Option<KeyValue>,
}

impl Event {
    pub fn revision(&self) -> u64 {
        self.kv.mod_revision
    }
}

/// An item of a watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchItem {
    Event(Event),
    /// Every change up to this revision has been delivered (etcd's progress
    /// notification; the API server turns it into a BOOKMARK).
    Progress(u64),
}

/// A stream of watch items; it ends with an error only if the watch cannot go
/// on (e.g. its revision was compacted while it lagged).
pub type WatchStream = BoxStream<'static, Result<WatchItem, StorageError>>;

/// [`Storage::modified_since`] by reading the whole prefix, page by page at
/// one revision.
pub(crate) async fn modified_by_listing<S: Storage + ?Sized>(
    store: &S,
    prefix: &str,
    after: u64,
) -> Result<ListResult> {
    let mut items = Vec::new();
    let mut opts = ListOptions {
        limit: Some(1000),
        ..Default::default()
    };
    loop {
        let page = store.list(prefix, opts.clone()).await?;
        items.extend(page.items.into_iter().filter(|kv| kv.mod_revision > after));
        match page.next_key {
            Some(next) => {
                opts.revision = Some(page.revision);
                opts.start_key = Some(next);
            }
            None => {
                return Ok(ListResult {
                    items,
                    revision: page.revision,
                    next_key: None,
                });
            }
        }
    }
}

/// Storage errors. The API server maps them to `Status` codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("key not found")]
    NotFound,
    #[error("key already exists")]
    AlreadyExists,
    /// A compare-and-swap failed: the key is at `current` (0: deleted).
    #[error("revision mismatch: key is at revision {current}")]
    Conflict { current: u64 },
    /// The requested revision is older than the retained history.
    #[error("required revision {requested} has been compacted (compacted revision {compacted})")]
    Expired { requested: u64, compacted: u64 },
    /// The requested revision is newer than the store's.
    #[error("revision {requested} is newer than the current revision {current}")]
    TooLarge { requested: u64, current: u64 },
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The storage is out of space (disk full, or etcd's space quota): writes
    /// fail until space is freed; reads go on.
    #[error("storage is out of space: {0}")]
    NoSpace(String),
    #[error("storage error: {0}")]
    Internal(String),
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// What [`Storage::status`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStatus {
    /// The latest revision.
    pub revision: u64,
    /// History up to this revision is forgotten (`None`: unknown).
    pub compacted: Option<u64>,
    /// Bytes the store's data file takes (`None`: unknown).
    pub size_bytes: Option<u64>,
}

/// Options of a range read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Read at this revision; `None` or 0 reads the latest.
    pub revision: Option<u64>,
    /// Start at this key (inclusive) instead of the prefix; for paging.
    pub start_key: Option<String>,
    /// Return at most this many items.
    pub limit: Option<usize>,
}

/// One page of a range read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListResult {
    pub items: Vec<KeyValue>,
    /// The revision the range was read at; pass it back to page on.
    pub revision: u64,
    /// The first key of the next page, if the range has more.
    pub next_key: Option<String>,
}

/// A key-value store with a global revision, CAS and watch: what
/// kube-apiserver needs from etcd.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Reads one key at the latest revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;
    /// Creates `key`; `AlreadyExists` if present.
    async fn create(&self, key: &str, value: Vec<u8>) -> Result<KeyValue>;
    /// Replaces `key` if its `mod_revision` is `expected`; else `Conflict`
    /// (`NotFound` if absent).
    async fn update(&self, key: &str, value: Vec<u8>, expected: u64) -> Result<KeyValue>;
    /// Deletes `key` (if at `expected`, when given); returns the deleted value
    /// with `mod_revision` = the delete's revision.
    async fn delete(&self, key: &str, expected: Option<u64>) -> Result<KeyValue>;
    /// Reads keys starting with `prefix`, in key order, at one revision.
    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListResult>;
    /// Streams every change under `prefix` with a revision greater than
    /// `after`, in revision order with nothing skipped; `Expired` if `after`
    /// is older than the retained history.
    async fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream>;
    /// The latest revision.
    async fn current_revision(&self) -> Result<u64>;
    /// The number of keys under `prefix` at the latest revision (upstream's
    /// `Count`, for `apiserver_storage_objects`). This default lists them;
    /// stores that can count without reading values do.
    async fn count(&self, prefix: &str) -> Result<u64> {
        let items = self.list(prefix, ListOptions::default()).await?.items;
        Ok(items.len() as u64)
    }
    /// The keys under `prefix` created or updated after revision `after`,
    /// at their latest values, in key order, and the revision read at: what
    /// a cache that has seen every change up to `after` is missing (keys
    /// deleted since are not reported; the caller reads what it holds
    /// again). This default reads the whole prefix; stores that keep a log
    /// by revision read only the changes.
    async fn modified_since(&self, prefix: &str, after: u64) -> Result<ListResult> {
        modified_by_listing(self, prefix, after).await
    }
    /// Forgets history up to and including `revision`.
    async fn compact(&self, revision: u64) -> Result<()>;
    /// Announces a write on its way: the caller has work to do (admission,
    /// validation) before it calls [`Storage::create`], `update` or
    /// `delete`, and drops the returned guard just before that call (or when
    /// it gives up). A store that commits writes in groups may wait briefly
    /// for announced writes, so that concurrent writes share one commit.
    /// Stores that gain nothing from it keep this default, which counts
    /// nothing.
    /// The store's size and revisions, for `/metrics` (stores that do not
    /// know their size say `None`).
    async fn status(&self) -> Result<StoreStatus> {
        Ok(StoreStatus {
            revision: self.current_revision().await?,
            ..Default::default()
        })
    }
    /// The health of each server behind the store, in order, for
    /// `componentstatuses` (`etcd-0`, `etcd-1`, ...): what a healthy one
    /// says, or why it is not healthy. This default: one server, this
    /// store's answer to a read.
    async fn server_health(&self) -> Vec<Result<String>> {
        vec![self.current_revision().await.map(|_| "ok".to_string())]
    }
    fn announce_write(&self) -> WriteAnnouncement {
        WriteAnnouncement(None)
    }
}

/// A write on its way to the store ([`Storage::announce_write`]); dropping
/// it withdraws the announcement.
#[must_use = "the announcement lasts as long as the guard"]
pub struct WriteAnnouncement(Option<Arc<AtomicUsize>>);

impl WriteAnnouncement {
    /// An announcement counted in `pending` until dropped.
    pub fn counted(pending: &Arc<AtomicUsize>) -> Self {
        pending.fetch_add(1, Ordering::AcqRel);
        WriteAnnouncement(Some(pending.clone()))
    }
}

impl Drop for WriteAnnouncement {
    fn drop(&mut self) {
        if let Some(pending) = &self.0 {
            pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Ticks of the compactor per interval.
const COMPACTOR_TICKS: u32 = 6;

/// Compacts history like kube-apiserver's compactor, more finely: every
/// `interval / 6` it compacts up to the newest revision it saw at least
/// `interval` ago, so the history kept stays between `interval` and
/// `interval × 7/6` (upstream's, compacting every `interval` to the
/// previous tick's revision, keeps between one and two intervals, and a
/// store's size under churn swings with it). Ends when the store is
/// dropped elsewhere.
pub fn spawn_compactor(store: Arc<dyn Storage>, interval: Duration) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(&store);
    drop(store);
    tokio::spawn(async move {
        let mut seen: std::collections::VecDeque<(tokio::time::Instant, u64)> = Default::default();
        let mut tick = tokio::time::interval(interval / COMPACTOR_TICKS);
        loop {
            tick.tick().await;
            let Some(store) = weak.upgrade() else { return };
            let now = tokio::time::Instant::now();
            let mut due = None;
            while let Some((at, rev)) = seen.front().copied() {
                if now.duration_since(at) < interval {
                    break;
                }
                due = Some(rev);
                seen.pop_front();
            }
            if let Some(rev) = due.filter(|r| *r > 0)
                && let Err(e) = store.compact(rev).await
            {
                tracing::warn!(error = %e, revision = rev, "compaction failed");
            }
            match store.current_revision().await {
                Ok(rev) => seen.push_back((now, rev)),
                Err(e) => tracing::warn!(error = %e, "compactor could not read the revision"),
            }
        }
    })
}

/// The smallest string greater than every string starting with `prefix`.
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0x7f {
            bytes.push(last + 1);
            return String::from_utf8(bytes).ok();
        }
    }
    None
}
