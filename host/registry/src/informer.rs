//! A metadata-only view of every object of every resource, built-in and
//! custom (a CRD added at runtime included), from one list and one watch of
//! the whole registry: what upstream's garbage collector builds from its
//! metadata informers. Controllers follow it through
//! [`follow_metadata`]; they never touch storage themselves.
//!
//! Only the metadata is decoded (the rest of each object is skipped by the
//! parser), so a write costs a follower a few microseconds whatever the
//! object's size.

use crate::error::storage_error;
use crate::resources::{Resource, Snapshot};
use crate::store::Objects;
use futures::StreamExt;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_storage::{EventKind, KeyValue, ListOptions, WatchItem};

/// Where every object lives in storage.
const ROOT: &str = "/registry/";
/// Objects per page of the initial list.
const PAGE: usize = 500;

/// An object's metadata, as the informer sees it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub owner_references: Vec<OwnerReference>,
    #[serde(default)]
    pub deletion_timestamp: Option<String>,
    #[serde(default)]
    pub finalizers: Vec<String>,
}

impl ObjectMeta {
    pub fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }
}

/// One `metadata.ownerReferences` entry.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub controller: Option<bool>,
    #[serde(default)]
    pub block_owner_deletion: Option<bool>,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// Decodes the metadata of a stored object (`None`: not an object).
pub fn decode_meta(value: &[u8]) -> Option<ObjectMeta> {
    serde_json::from_slice::<Envelope>(value)
        .ok()
        .map(|e| e.metadata)
}

/// What the follower is told.
pub enum Change<'a> {
    /// A (re)list begins: forget everything; the objects follow as
    /// `Upsert`s, then `Synced`.
    Reset,
    /// The initial list is complete.
    Synced,
    /// The object at `key` exists with this metadata (added or changed).
    Upsert(&'a str, ObjectMeta),
    /// The object at `key` was deleted; its last metadata.
    Delete(&'a str, ObjectMeta),
}

/// Lists every object, then follows every change, handing each to
/// `on_change`; relists after a watch error. Never returns.
pub async fn follow_metadata(objects: &Objects, on_change: impl FnMut(Change<'_>) + Send) {
    follow_metadata_keys(objects, |_, _| true, on_change).await
}

/// As [`follow_metadata`], for the objects whose storage key `keep`
/// accepts (with whether the change is a deletion): the others are skipped
/// before their metadata is decoded, so a follower that cares about a few
/// resources does not decode every write of the cluster.
pub async fn follow_metadata_keys(
    objects: &Objects,
    keep: impl Fn(&str, bool) -> bool + Send,
    mut on_change: impl FnMut(Change<'_>) + Send,
) {
    loop {
        let result: Result<(), ApiError> = async {
            on_change(Change::Reset);
            let mut start = None;
            let mut at = None;
            let revision = loop {
                let page = objects
                    .storage
                    .list(
                        ROOT,
                        ListOptions {
                            revision: at,
                            start_key: start.take(),
                            limit: Some(PAGE),
                        },
                    )
                    .await
                    .map_err(storage_error)?;
                for kv in page.items.iter().filter(|kv| keep(&kv.key, false)) {
                    if let Some(meta) = decode_meta(&kv.value) {
                        on_change(Change::Upsert(&kv.key, meta));
                    }
                }
                at = Some(page.revision);
                match page.next_key {
                    Some(next) => start = Some(next),
                    None => break page.revision,
                }
            };
            on_change(Change::Synced);
            let mut stream = objects
                .storage
                .watch(ROOT, revision)
                .await
                .map_err(storage_error)?;
            while let Some(item) = stream.next().await {
                let WatchItem::Event(ev) = item.map_err(storage_error)? else {
                    continue;
                };
                let KeyValue { key, value, .. } = &ev.kv;
                if !keep(key, ev.kind == EventKind::Deleted) {
                    continue;
                }
                let Some(meta) = decode_meta(value) else {
                    continue;
                };
                match ev.kind {
                    EventKind::Deleted => on_change(Change::Delete(key, meta)),
                    _ => on_change(Change::Upsert(key, meta)),
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "metadata informer: watch ended; relisting");
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// Resources by storage prefix and by (apiVersion, kind), per registry
/// snapshot.
#[derive(Default)]
pub struct Resolver {
    snapshot: Option<Arc<Snapshot>>,
    pub by_prefix: HashMap<String, Arc<Resource>>,
    pub by_kind: HashMap<(String, String), Arc<Resource>>,
}

impl Resolver {
    pub fn refresh(&mut self, snap: Arc<Snapshot>) {
        if self
            .snapshot
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &snap))
        {
            return;
        }
        self.by_prefix.clear();
        self.by_kind.clear();
        for r in snap.all().filter(|r| !r.stores_nothing()) {
            self.by_prefix
                .entry(r.key_prefix())
                .or_insert_with(|| r.clone());
            let api_version = if r.group.is_empty() {
                r.version.clone()
            } else {
                format!("{}/{}", r.group, r.version)
            };
            self.by_kind
                .insert((api_version, r.kind.clone()), r.clone());
        }
        self.snapshot = Some(snap);
    }
}

/// Where an object lives.
pub struct Located {
    pub res: Arc<Resource>,
    pub ns: Option<String>,
    pub name: String,
}

impl Resolver {
    /// The resource, namespace and name of the object stored at `key`.
    pub fn locate(&self, key: &str) -> Option<Located> {
        let rest = key.strip_prefix(ROOT)?;
        let mut parts = rest.splitn(3, '/');
        let (group, plural, tail) = (parts.next()?, parts.next()?, parts.next()?);
        let prefix = format!("{ROOT}{group}/{plural}/");
        let res = self.by_prefix.get(&prefix)?.clone();
        let (ns, name) = if res.namespaced {
            let (ns, name) = tail.split_once('/')?;
            (Some(ns.to_string()), name.to_string())
        } else {
            (None, tail.to_string())
        };
        Some(Located { res, ns, name })
    }
}
