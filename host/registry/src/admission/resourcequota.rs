//! The `ResourceQuota` admission plugin (upstream's
//! `k8s.io/apiserver/pkg/admission/plugin/resourcequota`): a create (or an
//! update that can change usage: a service's type, a claim's size) in a
//! namespace with quotas is checked against each quota that matches it
//! (`wasm_apiserver_api::quota::check_request`), and its usage is
//! **charged to the quotas' `status.used` before the object is stored**,
//! each with a compare-and-swap on the quota's revision; a lost swap
//! re-reads the quotas that failed and checks again (upstream's
//! `checkQuotas`). So two creates racing for the last slot cannot both
//! pass, on one replica or several. On this replica, requests of one
//! namespace charge one at a time (upstream's per-namespace work queue),
//! so they do not lose swaps to each other. Dry runs are checked but not
//! charged. The controller (`resourcequota-controller`) recounts usage
//! from the objects themselves, giving back what a request charged and
//! then failed to store.
//!
//! Runs after the other validating plugins and the webhooks (upstream's
//! order), so a request refused by them charges nothing.
//!
//! Which namespaces have quotas is kept in memory ([`QuotaNamespaces`]:
//! a watch on every replica, `Objects::spawn_quota_cache`, and this
//! replica's own quota writes at once),
//! so a create in a namespace without quotas costs no storage read; where
//! there are quotas, they are read from storage, as they are now.

use crate::admission::chain::Attributes;
use crate::codec::{decode, encode};
use crate::error::storage_error;
use crate::options::WriteOptions;
use crate::resources::Resources;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{LazyLock, PoisonError};
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::quota::{self, Quota};
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_plugins::Operation;
use wasm_apiserver_storage::{KeyValue, ListOptions, Storage, StorageError};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Tries at charging: the first and upstream's three retries.
const ATTEMPTS: usize = 4;

/// Charging is serialized per namespace on this replica; namespaces share
/// these locks by hash (a fixed set, however many namespaces come and go).
static LOCKS: LazyLock<Vec<tokio::sync::Mutex<()>>> =
    LazyLock::new(|| (0..64).map(|_| tokio::sync::Mutex::new(())).collect());

fn lock_of(ns: &str) -> &'static tokio::sync::Mutex<()> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ns.hash(&mut h);
    &LOCKS[(h.finish() % LOCKS.len() as u64) as usize]
}

/// The quotas of each namespace, by name: where admission must look.
#[derive(Debug, Default)]
pub struct QuotaNamespaces {
    /// Set once the first list is in; until then every namespace may
    /// have quotas.
    synced: std::sync::atomic::AtomicBool,
    quotas: std::sync::RwLock<HashMap<String, HashSet<String>>>,
}

impl QuotaNamespaces {
    /// Records that quota `name` of `ns` exists (or, `false`, no more).
    pub fn set(&self, ns: &str, name: &str, exists: bool) {
        let mut all = self.quotas.write().unwrap_or_else(PoisonError::into_inner);
        if exists {
            all.entry(ns.to_string())
                .or_default()
                .insert(name.to_string());
        } else if let Some(names) = all.get_mut(ns) {
            names.remove(name);
            if names.is_empty() {
                all.remove(ns);
            }
        }
    }

    /// Whether `ns` may have quotas.
    pub fn may_have(&self, ns: &str) -> bool {
        !self.synced.load(Ordering::Acquire)
            || self
                .quotas
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(ns)
    }

    /// Starts again from a full list of the quotas.
    pub fn reset(&self, listed: &[Value]) {
        let mut all = self.quotas.write().unwrap_or_else(PoisonError::into_inner);
        all.clear();
        for q in listed {
            all.entry(meta::namespace(q).unwrap_or_default().to_string())
                .or_default()
                .insert(meta::name(q).unwrap_or_default().to_string());
        }
        self.synced.store(true, Ordering::Release);
    }
}

/// The namespace's quotas as stored, with their revisions.
async fn quotas(storage: &dyn Storage, resources: &Resources, ns: &str) -> Result<Vec<KeyValue>> {
    let rq = resources.builtin("", "v1", "resourcequotas");
    let prefix = rq.collection_key(Some(ns));
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = storage
            .list(
                &prefix,
                ListOptions {
                    start_key: start.take(),
                    ..Default::default()
                },
            )
            .await
            .map_err(storage_error)?;
        out.extend(page.items);
        match page.next_key {
            Some(k) => start = Some(k),
            None => return Ok(out),
        }
    }
}

/// Checks the request against the namespace's quotas and charges them.
pub async fn validate(
    storage: &dyn Storage,
    resources: &Resources,
    cache: &QuotaNamespaces,
    a: &Attributes<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    opts: &WriteOptions,
) -> Result<()> {
    let op = match a.operation {
        Operation::Create => quota::Operation::Create,
        Operation::Update => quota::Operation::Update,
        _ => return Ok(()),
    };
    // Subresources and cluster-scoped objects (namespaces among them)
    // are not charged.
    let (None, Some(ns), Some(obj)) = (a.subresource, a.namespace, obj) else {
        return Ok(());
    };
    if !a.info.namespaced || ns.is_empty() {
        return Ok(());
    }
    let Some(evaluator) = quota::evaluator(&a.info.group, &a.info.plural) else {
        return Ok(());
    };
    if !evaluator.handles(op) || !cache.may_have(ns) {
        return Ok(());
    }
    let _serialized = lock_of(ns).lock().await;
    let mut kvs = quotas(storage, resources, ns).await?;
    if kvs.is_empty() {
        return Ok(());
    }
    let now = chrono::Utc::now();
    let forbidden = |message: String| {
        ApiError::Forbidden(Target::new(&a.info.group, &a.info.plural, a.name), message)
    };
    let mut conflict = None;
    for _ in 0..ATTEMPTS {
        let mut stored = Vec::with_capacity(kvs.len());
        for kv in &kvs {
            stored.push(decode(kv)?);
        }
        let parsed: Vec<Quota> = stored.iter().map(Quota::from_object).collect();
        let changes =
            quota::check_request(&parsed, &evaluator, op, obj, old, now).map_err(forbidden)?;
        if opts.dry_run {
            return Ok(());
        }
        let mut failed = Vec::new();
        for ((kv, mut q), used) in kvs.iter().zip(stored).zip(changes) {
            let Some(used) = used else {
                continue;
            };
            q["status"]["used"] = quota::list_to_json(&used);
            match storage
                .update(&kv.key, encode(&mut q), kv.mod_revision)
                .await
            {
                Ok(_) => {}
                Err(StorageError::Conflict { .. }) => {
                    let name = meta::name(&q).unwrap_or_default();
                    conflict = Some(ApiError::stale(Target::new("", "resourcequotas", name)));
                    failed.push(kv.key.clone());
                }
                // Deleted meanwhile: it limits nothing any more.
                Err(StorageError::NotFound) => {}
                Err(e) => return Err(storage_error(e)),
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        // The others are charged; check the ones that moved again, as
        // they are now.
        kvs = quotas(storage, resources, ns).await?;
        kvs.retain(|kv| failed.contains(&kv.key));
        if kvs.is_empty() {
            return Ok(());
        }
    }
    Err(conflict.unwrap_or_else(|| ApiError::stale(Target::new("", "resourcequotas", ""))))
}
