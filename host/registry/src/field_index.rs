//! Field indexes: how a plugin's cluster read with a field selector on any
//! field (`spec.rules.host=a.example.com`, a unique-host check) is answered
//! without reading every object of the resource.
//!
//! An index maps the values at one field path of one resource's stored
//! objects to their storage keys. It is started by the first read that
//! needs it (a list with [`ListParams::indexed`] whose field selector has a
//! `path=value` requirement on a field other than the name and namespace),
//! built from one list and kept by one watch of the resource, and lives as
//! long as the registry. At most [`MAX_INDEXES`] exist; reads past that scan
//! as before.
//!
//! **Read-your-writes.** The watch may lag the store by a commit or two, so
//! a read never trusts the index alone: it takes the keys the index holds
//! for the value as of revision `seen`, asks the store for every key of the
//! collection written after `seen` ([`Storage::modified_since`]: the
//! embedded store reads its log from `seen`, etcd filters by modification
//! revision), and reads the index's keys that did not change since (a
//! deleted one is gone; one whose value moved no longer matches). So an
//! object whose write returned before the read began is always seen, and
//! the answer is exactly the scan's, in key order.
//!
//! **What it holds**: each key and value once (shared), and the maps
//! between them; never the objects.

use crate::codec::decode;
use crate::error::storage_error;
use crate::options::{ListOutcome, ListParams};
use crate::resources::Resource;
use futures::StreamExt;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_api::selector::field_values;
use wasm_apiserver_storage::{ListOptions, Storage, StorageError, WatchItem};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Indexes kept at most; a read needing another one scans.
pub const MAX_INDEXES: usize = 32;

/// How long a read waits for a new index's first list before it scans
/// (a relisting index is not waited for).
const BUILD_WAIT: Duration = Duration::from_secs(5);

/// The registry's field indexes, by (collection key, field path).
#[derive(Default)]
pub struct FieldIndexes {
    indexes: Mutex<HashMap<(String, String), Arc<FieldIndex>>>,
}

impl std::fmt::Debug for FieldIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .indexes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        write!(f, "FieldIndexes({n})")
    }
}

/// One index: its state, shared with the task that keeps it.
struct FieldIndex {
    state: Arc<RwLock<State>>,
    ready: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FieldIndex {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct State {
    /// Every change up to this revision is in the maps.
    revision: u64,
    by_value: HashMap<Arc<str>, Keys>,
    by_key: HashMap<Arc<str>, Box<[Arc<str>]>>,
}

/// The keys holding one value: most values (a host, a name) have one.
enum Keys {
    One(Arc<str>),
    // Boxed so that the enum stays small: most values have one key.
    #[allow(clippy::box_collection)]
    Many(Box<HashSet<Arc<str>>>),
}

impl Keys {
    fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        let (one, many) = match self {
            Keys::One(k) => (Some(k), None),
            Keys::Many(set) => (None, Some(set.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

impl State {
    fn remove(&mut self, key: &str) {
        let Some(values) = self.by_key.remove(key) else {
            return;
        };
        for v in values.iter() {
            let empty = match self.by_value.get_mut(v) {
                Some(Keys::One(k)) => &**k == key,
                Some(Keys::Many(set)) => {
                    set.remove(key);
                    set.is_empty()
                }
                None => false,
            };
            if empty {
                self.by_value.remove(v);
            }
        }
    }

    fn set(&mut self, key: &str, values: Vec<Box<str>>) {
        self.remove(key);
        if values.is_empty() {
            return;
        }
        let key: Arc<str> = key.into();
        let mut held = Vec::with_capacity(values.len());
        for v in values {
            let v: Arc<str> = v.into();
            match self.by_value.get_mut(&v) {
                None => {
                    self.by_value.insert(v.clone(), Keys::One(key.clone()));
                }
                Some(keys) => {
                    if let Keys::One(first) = keys {
                        *keys = Keys::Many(Box::new(HashSet::from([first.clone()])));
                    }
                    if let Keys::Many(set) = keys {
                        set.insert(key.clone());
                    }
                }
            }
            held.push(v);
        }
        self.by_key.insert(key, held.into_boxed_slice());
    }
}

/// The distinct values at `path` of a stored object (none when it does not
/// parse: the read that meets it reports that).
fn values_of(stored: &[u8], path: &str) -> Vec<Box<str>> {
    let Ok(obj) = serde_json::from_slice::<Value>(stored) else {
        return Vec::new();
    };
    let mut values: Vec<Box<str>> = Vec::new();
    field_values(&obj, path, &mut |v| values.push(v.into()));
    values.sort_unstable();
    values.dedup();
    values
}

/// Builds the index of `path` over the keys under `prefix`, then follows
/// the store, again from a fresh list whenever the watch breaks.
async fn maintain(
    storage: Arc<dyn Storage>,
    prefix: String,
    path: String,
    state: Arc<RwLock<State>>,
    ready: watch::Sender<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let ended: Result<(), StorageError> = async {
            let mut fresh = State::default();
            let mut opts = ListOptions {
                limit: Some(500),
                ..Default::default()
            };
            fresh.revision = loop {
                let page = storage.list(&prefix, opts.clone()).await?;
                for kv in &page.items {
                    fresh.set(&kv.key, values_of(&kv.value, &path));
                }
                match page.next_key {
                    Some(next) => {
                        opts.revision = Some(page.revision);
                        opts.start_key = Some(next);
                    }
                    None => break page.revision,
                }
            };
            let mut stream = storage.watch(&prefix, fresh.revision).await?;
            *state.write().unwrap_or_else(PoisonError::into_inner) = fresh;
            ready.send_replace(true);
            while let Some(item) = stream.next().await {
                match item? {
                    WatchItem::Event(ev) => {
                        let values = match ev.kind {
                            wasm_apiserver_storage::EventKind::Deleted => Vec::new(),
                            _ => values_of(&ev.kv.value, &path),
                        };
                        let mut st = state.write().unwrap_or_else(PoisonError::into_inner);
                        st.set(&ev.kv.key, values);
                        st.revision = st.revision.max(ev.revision());
                    }
                    WatchItem::Progress(at) => {
                        let mut st = state.write().unwrap_or_else(PoisonError::into_inner);
                        st.revision = st.revision.max(at);
                    }
                }
            }
            Err(StorageError::Unavailable("the watch ended".into()))
        }
        .await;
        ready.send_replace(false);
        if let Err(e) = ended {
            tracing::debug!(%prefix, %path, error = %e, "field index: relisting");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

impl FieldIndexes {
    /// The index of `path` over `prefix`, started on first use; `None` when
    /// [`MAX_INDEXES`] are kept already.
    fn index(
        &self,
        storage: &Arc<dyn Storage>,
        prefix: &str,
        path: &str,
    ) -> Option<Arc<FieldIndex>> {
        let mut indexes = self.indexes.lock().unwrap_or_else(PoisonError::into_inner);
        let id = (prefix.to_string(), path.to_string());
        if let Some(index) = indexes.get(&id) {
            return Some(index.clone());
        }
        if indexes.len() >= MAX_INDEXES {
            return None;
        }
        let state = Arc::new(RwLock::new(State::default()));
        let (tx, ready) = watch::channel(false);
        let task = tokio::spawn(maintain(
            storage.clone(),
            id.0.clone(),
            id.1.clone(),
            state.clone(),
            tx,
        ));
        let index = Arc::new(FieldIndex { state, ready, task });
        indexes.insert(id, index.clone());
        Some(index)
    }

    /// How many indexes are kept (for tests and metrics).
    pub fn len(&self) -> usize {
        self.indexes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Answers an indexed list (see the module): `None` when the list is
    /// not one an index answers (no `path=value` requirement on an indexable
    /// field, a `continue` token or resourceVersion, more matches than
    /// `limit`, or no index available), and the caller scans.
    pub(crate) async fn list(
        &self,
        storage: &Arc<dyn Storage>,
        info: &Resource,
        ns: Option<&str>,
        p: &ListParams,
    ) -> Result<Option<ListOutcome>> {
        let plain = p.continue_token.as_deref().is_none_or(str::is_empty)
            && p.resource_version.as_deref().is_none_or(str::is_empty);
        let Some(req) = p.fields.indexable().filter(|_| p.indexed && plain) else {
            return Ok(None);
        };
        let Some(index) = self.index(storage, &info.collection_key(None), &req.path) else {
            return Ok(None);
        };
        let mut ready = index.ready.clone();
        if !*ready.borrow() {
            // Its first list: wait for it (a scan would cost as much).
            // Relisting after its watch broke: scan rather than wait.
            let built = index
                .state
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .revision
                > 0;
            if built
                || tokio::time::timeout(BUILD_WAIT, ready.wait_for(|r| *r))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .is_none()
            {
                return Ok(None);
            }
        }
        let (seen, candidates): (u64, Vec<Arc<str>>) = {
            let st = index.state.read().unwrap_or_else(PoisonError::into_inner);
            let keys = st.by_value.get(req.value.as_str());
            (
                st.revision,
                keys.into_iter().flat_map(Keys::iter).cloned().collect(),
            )
        };
        if p.limit.is_some_and(|l| l > 0 && candidates.len() > l) {
            // More than a page: the scan pages (and the caller's budget
            // stops it page by page).
            return Ok(None);
        }
        let prefix = info.collection_key(ns);
        let changed = storage
            .modified_since(&prefix, seen)
            .await
            .map_err(storage_error)?;
        let mut found = BTreeMap::new();
        for kv in &changed.items {
            let obj = decode(kv)?;
            if p.matches(&obj) {
                found.insert(kv.key.clone(), obj);
            }
        }
        let changed_keys: HashSet<&str> = changed.items.iter().map(|kv| kv.key.as_str()).collect();
        for key in candidates {
            if !key.starts_with(&prefix) || changed_keys.contains(&*key) {
                continue;
            }
            // Unchanged since `seen`, or deleted.
            if let Some(kv) = storage.get(&key).await.map_err(storage_error)? {
                let obj = decode(&kv)?;
                if p.matches(&obj) {
                    found.insert(kv.key, obj);
                }
            }
        }
        if p.limit.is_some_and(|l| l > 0 && found.len() > l) {
            return Ok(None);
        }
        let mut items: Vec<Value> = found.into_values().collect();
        info.strategy.present(info, &mut items).await?;
        Ok(Some(ListOutcome {
            items,
            resource_version: changed.revision,
            continue_token: None,
        }))
    }
}
