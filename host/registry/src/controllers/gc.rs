//! The garbage collector, as upstream's (`pkg/controller/garbagecollector`):
//! an owner graph built from the metadata informer of every resource
//! (custom resources included, as their CRDs come and go), and one queue of
//! work items:
//! * `Dependent`: an object whose owners may all be gone: each owner
//!   reference is checked against the live owner (absent, or present with
//!   another uid, is *dangling*; present and deleting in the foreground is
//!   *waiting*). With no solid owner left the object is deleted (in the
//!   foreground when a waiting owner needs its own dependents gone first);
//!   with one, dangling references are removed and references to waiting
//!   owners stop blocking;
//! * `Orphan`: an owner deleted with `propagationPolicy: Orphan`: its
//!   dependents lose their reference to it, then its `orphan` finalizer goes;
//! * `Foreground`: an owner deleted in the foreground: its dependents are
//!   deleted, and its `foregroundDeletion` finalizer goes once no dependent
//!   whose reference sets `blockOwnerDeletion` remains.
//!
//! The graph holds only objects that have owner references (and, for
//! owners being deleted with a GC finalizer, their keys): an object nobody
//! owns and that owns nothing costs the collector nothing but the decode
//! of its metadata on each write. Every decision is made on live objects
//! read through the registry, never on the graph alone.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile};
use crate::informer::{self, Change, Located, ObjectMeta, OwnerReference, Resolver};
use crate::options::{FINALIZER_FOREGROUND, FINALIZER_ORPHAN, Preconditions, Propagation};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The controller's name: its ServiceAccount and queue.
pub const NAME: &str = "generic-garbage-collector";

/// An object's uid, as 128 bits (a uid that is not a UUID hashes to one
/// that no object has).
pub type Uid = u128;

pub fn uid_of(s: &str) -> Uid {
    match uuid::Uuid::parse_str(s) {
        Ok(u) => u.as_u128(),
        Err(_) => {
            use sha2::Digest;
            let d = sha2::Sha256::digest(s.as_bytes());
            u128::from_be_bytes(d[..16].try_into().expect("16 bytes"))
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    uid: Uid,
    block: bool,
}

/// An object with owner references.
struct Node {
    key: Box<str>,
    owners: Box<[Owner]>,
}

#[derive(Default)]
struct Graph {
    nodes: HashMap<Uid, Node>,
    /// Owner uid → the uids of objects that reference it.
    dependents: HashMap<Uid, Vec<Uid>>,
    /// Owners marked for deletion with a GC finalizer → their keys.
    deleting: HashMap<Uid, Box<str>>,
}

/// A unit of the collector's work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Item {
    Dependent(Uid),
    Orphan(Uid),
    Foreground(Uid),
}

impl Graph {
    fn unlink(&mut self, uid: Uid, owners: &[Owner]) {
        for o in owners {
            if let Some(list) = self.dependents.get_mut(&o.uid) {
                list.retain(|d| *d != uid);
                if list.is_empty() {
                    self.dependents.remove(&o.uid);
                }
            }
        }
    }

    fn upsert(&mut self, key: &str, m: &ObjectMeta, out: &mut Vec<Item>) {
        let uid = uid_of(&m.uid);
        let owners: Vec<Owner> = m
            .owner_references
            .iter()
            .map(|r| Owner {
                uid: uid_of(&r.uid),
                block: r.block_owner_deletion == Some(true),
            })
            .collect();
        let unchanged = self
            .nodes
            .get(&uid)
            .is_some_and(|n| *n.owners == owners[..]);
        if !unchanged {
            let old = self.nodes.remove(&uid);
            if let Some(old) = &old {
                self.unlink(uid, &old.owners);
                self.wake_foreground(&old.owners, out);
            }
            if !owners.is_empty() {
                for o in &owners {
                    self.dependents.entry(o.uid).or_default().push(uid);
                }
                self.wake_foreground(&owners, out);
                self.nodes.insert(
                    uid,
                    Node {
                        key: key.into(),
                        owners: owners.into_boxed_slice(),
                    },
                );
                out.push(Item::Dependent(uid));
            }
        }
        let orphan = m.has_finalizer(FINALIZER_ORPHAN);
        let foreground = m.has_finalizer(FINALIZER_FOREGROUND);
        if m.deletion_timestamp.is_some() && (orphan || foreground) {
            self.deleting.insert(uid, key.into());
            if orphan {
                out.push(Item::Orphan(uid));
            }
            if foreground {
                out.push(Item::Foreground(uid));
                for d in self.dependents.get(&uid).into_iter().flatten() {
                    out.push(Item::Dependent(*d));
                }
            }
        } else {
            self.deleting.remove(&uid);
        }
    }

    fn delete(&mut self, m: &ObjectMeta, out: &mut Vec<Item>) {
        let uid = uid_of(&m.uid);
        if let Some(old) = self.nodes.remove(&uid) {
            self.unlink(uid, &old.owners);
            self.wake_foreground(&old.owners, out);
        }
        self.deleting.remove(&uid);
        for d in self.dependents.get(&uid).into_iter().flatten() {
            out.push(Item::Dependent(*d));
        }
    }

    /// Owners waiting for their dependents look again.
    fn wake_foreground(&self, owners: &[Owner], out: &mut Vec<Item>) {
        for o in owners {
            if self.deleting.contains_key(&o.uid) {
                out.push(Item::Foreground(o.uid));
            }
        }
    }

    /// How much memory the graph holds, roughly (for the benchmark).
    fn heap_bytes(&self) -> usize {
        let node = std::mem::size_of::<(Uid, Node)>() + 1;
        let nodes: usize = self
            .nodes
            .values()
            .map(|n| n.key.len() + n.owners.len() * std::mem::size_of::<Owner>())
            .sum();
        let deps: usize = self
            .dependents
            .values()
            .map(|v| v.capacity() * std::mem::size_of::<Uid>())
            .sum();
        self.nodes.capacity() * node
            + nodes
            + self.dependents.capacity() * (std::mem::size_of::<(Uid, Vec<Uid>)>() + 1)
            + deps
    }
}

/// The collector.
pub struct Collector {
    client: Client,
    graph: Mutex<Graph>,
    queue: Arc<Queue<Item>>,
    resolver: Mutex<Resolver>,
}

impl Collector {
    pub fn new(client: Client, queue: Arc<Queue<Item>>) -> Self {
        Collector {
            client,
            graph: Mutex::new(Graph::default()),
            queue,
            resolver: Mutex::new(Resolver::default()),
        }
    }

    /// Approximate bytes the owner graph holds.
    pub fn graph_bytes(&self) -> usize {
        self.graph.lock().expect("graph lock").heap_bytes()
    }

    /// Feeds the graph from the metadata informer; never returns.
    pub async fn follow(self: Arc<Self>) {
        let objects = self.client.objects.clone();
        informer::follow_metadata(&objects, |change| {
            let mut items = Vec::new();
            {
                let mut g = self.graph.lock().expect("graph lock");
                match change {
                    Change::Reset => *g = Graph::default(),
                    Change::Synced => {}
                    Change::Upsert(key, m) => g.upsert(key, &m, &mut items),
                    Change::Delete(_, m) => g.delete(&m, &mut items),
                }
            }
            for i in items {
                self.queue.add(i);
            }
        })
        .await;
    }

    fn resolver(&self) -> std::sync::MutexGuard<'_, Resolver> {
        let mut r = self.resolver.lock().expect("resolver lock");
        r.refresh(self.client.objects.resources.snapshot());
        r
    }

    fn locate(&self, key: &str) -> Option<Located> {
        self.resolver().locate(key)
    }

    fn key_of(&self, item: &Item) -> Option<Box<str>> {
        let g = self.graph.lock().expect("graph lock");
        match item {
            Item::Dependent(uid) => g.nodes.get(uid).map(|n| n.key.clone()),
            Item::Orphan(uid) | Item::Foreground(uid) => g.deleting.get(uid).cloned(),
        }
    }

    /// The live object at `at`, if it is still the one with `uid`.
    async fn live(&self, at: &Located, uid: Uid) -> Result<Option<Value>> {
        match self.client.get(&at.res, at.ns.as_deref(), &at.name).await {
            Ok(v) if uid_of(meta::str_field(&v, "uid").unwrap_or_default()) == uid => Ok(Some(v)),
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn attempt_to_delete(&self, uid: Uid, at: Located) -> Result<Action> {
        let Some(obj) = self.live(&at, uid).await? else {
            return Ok(Action::Done);
        };
        if meta::str_field(&obj, "deletionTimestamp").is_some() {
            // Being deleted; a foreground deletion is its own work item.
            return Ok(Action::Done);
        }
        let refs: Vec<OwnerReference> =
            serde_json::from_value(obj["metadata"]["ownerReferences"].clone()).unwrap_or_default();
        let (mut solid, mut dangling, mut waiting) = (Vec::new(), Vec::new(), Vec::new());
        for r in &refs {
            let owner_res = self
                .resolver()
                .by_kind
                .get(&(r.api_version.clone(), r.kind.clone()))
                .cloned();
            let Some(owner_res) = owner_res else {
                return Err(ApiError::ServiceUnavailable(format!(
                    "cannot resolve owner {} {} of {}: no such kind is served",
                    r.api_version, r.kind, at.name
                )));
            };
            if !at.res.namespaced && owner_res.namespaced {
                // Upstream: a cluster-scoped object cannot be owned by a
                // namespaced one; the reference is reported, never
                // resolved, and the object is kept.
                self.client
                    .event(
                        &obj,
                        "Warning",
                        "OwnerRefInvalidNamespace",
                        &format!(
                            "ownerRef [{}, Kind={}, Name={}, UID={}] does not exist in namespace \"\"",
                            r.api_version, r.kind, r.name, r.uid
                        ),
                    )
                    .await;
                solid.push(r);
                continue;
            }
            let owner_ns = if owner_res.namespaced {
                at.ns.as_deref()
            } else {
                None
            };
            match self.client.get(&owner_res, owner_ns, &r.name).await {
                Ok(o) if meta::str_field(&o, "uid") != Some(r.uid.as_str()) => dangling.push(r),
                Ok(o) => {
                    let deleting = meta::str_field(&o, "deletionTimestamp").is_some();
                    if deleting
                        && meta::finalizers(&o)
                            .iter()
                            .any(|f| f == FINALIZER_FOREGROUND)
                    {
                        waiting.push(r);
                    } else {
                        solid.push(r);
                    }
                }
                Err(ApiError::NotFound(_)) => dangling.push(r),
                Err(e) => return Err(e),
            }
        }
        if !solid.is_empty() {
            if dangling.is_empty() && waiting.is_empty() {
                return Ok(Action::Done);
            }
            // Keep the object: drop its dangling references, and stop
            // blocking owners that wait for their dependents.
            let gone: Vec<String> = dangling.iter().map(|r| r.uid.clone()).collect();
            let unblock: Vec<String> = waiting.iter().map(|r| r.uid.clone()).collect();
            let result = self
                .client
                .update(&at.res, at.ns.as_deref(), &at.name, None, |cur| {
                    let mut new = cur.clone();
                    if let Some(list) = new["metadata"]["ownerReferences"].as_array_mut() {
                        list.retain(|r| !gone.iter().any(|g| r["uid"] == json!(g)));
                        for r in list.iter_mut() {
                            if unblock.iter().any(|u| r["uid"] == json!(u)) {
                                r["blockOwnerDeletion"] = json!(false);
                            }
                        }
                    }
                    Ok(new)
                })
                .await;
            return match result {
                Ok(_) | Err(ApiError::NotFound(_)) => Ok(Action::Done),
                Err(e) => Err(e),
            };
        }
        let has_dependents = self
            .graph
            .lock()
            .expect("graph lock")
            .dependents
            .get(&uid)
            .is_some_and(|d| !d.is_empty());
        let finalizers = meta::finalizers(&obj);
        let propagation = if !waiting.is_empty() && has_dependents {
            Propagation::Foreground
        } else if finalizers.iter().any(|f| f == FINALIZER_ORPHAN) {
            Propagation::Orphan
        } else if finalizers.iter().any(|f| f == FINALIZER_FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        tracing::debug!(object = %at.name, resource = %at.res.plural, ?propagation, "deleting an object whose owners are gone");
        let pre = Preconditions {
            uid: meta::str_field(&obj, "uid").map(String::from),
            propagation: Some(propagation),
            ..Default::default()
        };
        match self
            .client
            .delete(&at.res, at.ns.as_deref(), &at.name, &pre)
            .await
        {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(Action::Done),
            Err(ApiError::Conflict(..)) => Err(ApiError::ServiceUnavailable(
                "object changed; retrying".into(),
            )),
            Err(e) => Err(e),
        }
    }

    async fn remove_finalizer(&self, at: &Located, uid: Uid, finalizer: &str) -> Result<()> {
        let result = self
            .client
            .update(&at.res, at.ns.as_deref(), &at.name, None, |cur| {
                if uid_of(meta::str_field(cur, "uid").unwrap_or_default()) != uid {
                    return Err(ApiError::NotFound(crate::store::target(&at.res, &at.name)));
                }
                let mut new = cur.clone();
                if let Some(list) = new["metadata"]["finalizers"].as_array_mut() {
                    list.retain(|f| f != finalizer);
                }
                Ok(new)
            })
            .await;
        match result {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn orphan(&self, uid: Uid, at: Located) -> Result<Action> {
        let Some(owner) = self.live(&at, uid).await? else {
            return Ok(Action::Done);
        };
        if !meta::finalizers(&owner)
            .iter()
            .any(|f| f == FINALIZER_ORPHAN)
        {
            return Ok(Action::Done);
        }
        let owner_uid = meta::str_field(&owner, "uid")
            .unwrap_or_default()
            .to_string();
        let dependents: Vec<Box<str>> = {
            let g = self.graph.lock().expect("graph lock");
            g.dependents
                .get(&uid)
                .into_iter()
                .flatten()
                .filter_map(|d| g.nodes.get(d).map(|n| n.key.clone()))
                .collect()
        };
        for key in dependents {
            let Some(dep) = self.locate(&key) else {
                continue;
            };
            let result = self
                .client
                .update(&dep.res, dep.ns.as_deref(), &dep.name, None, |cur| {
                    let mut new = cur.clone();
                    if let Some(list) = new["metadata"]["ownerReferences"].as_array_mut() {
                        list.retain(|r| r["uid"] != json!(owner_uid));
                        if list.is_empty() {
                            meta::metadata_mut(&mut new).remove("ownerReferences");
                        }
                    }
                    Ok(new)
                })
                .await;
            match result {
                Ok(_) | Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.remove_finalizer(&at, uid, FINALIZER_ORPHAN).await?;
        Ok(Action::Done)
    }

    async fn foreground(&self, uid: Uid, at: Located) -> Result<Action> {
        let Some(owner) = self.live(&at, uid).await? else {
            return Ok(Action::Done);
        };
        if !meta::finalizers(&owner)
            .iter()
            .any(|f| f == FINALIZER_FOREGROUND)
        {
            return Ok(Action::Done);
        }
        let (blocking, all): (bool, Vec<Uid>) = {
            let g = self.graph.lock().expect("graph lock");
            let deps: Vec<Uid> = g.dependents.get(&uid).cloned().unwrap_or_default();
            let blocking = deps.iter().any(|d| {
                g.nodes
                    .get(d)
                    .is_some_and(|n| n.owners.iter().any(|o| o.uid == uid && o.block))
            });
            (blocking, deps)
        };
        if !blocking {
            self.remove_finalizer(&at, uid, FINALIZER_FOREGROUND)
                .await?;
            return Ok(Action::Done);
        }
        for d in all {
            self.queue.add(Item::Dependent(d));
        }
        Ok(Action::Done)
    }
}

#[async_trait::async_trait]
impl Reconcile for Collector {
    type Key = Item;

    async fn reconcile(&self, item: &Item) -> Result<Action> {
        let Some(key) = self.key_of(item) else {
            return Ok(Action::Done);
        };
        let Some(at) = self.locate(&key) else {
            return Ok(Action::Done);
        };
        match *item {
            Item::Dependent(uid) => self.attempt_to_delete(uid, at).await,
            Item::Orphan(uid) => self.orphan(uid, at).await,
            Item::Foreground(uid) => self.foreground(uid, at).await,
        }
    }
}

/// Workers of the collector (upstream's `--concurrent-gc-syncs` default).
pub const WORKERS: usize = 20;

/// Runs the collector on this replica while it leads; its queue's metrics
/// go to `metrics`. The returned handle reads the live collector's graph
/// size (for the benchmark).
pub fn spawn(client: Client, leadership: Leadership, metrics: &Metrics) -> GraphSize {
    let queue: Arc<Queue<Item>> = Queue::new("garbage_collector_attempt_to_delete");
    metrics.register(queue.clone());
    let current: Arc<Mutex<Option<Arc<Collector>>>> = Default::default();
    let size = GraphSize(current.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let gc = Arc::new(Collector::new(client.clone(), queue.clone()));
        *current.lock().expect("gc lock") = Some(gc.clone());
        let queue = queue.clone();
        async move {
            let follow = gc.clone().follow();
            let work = super::run(queue, gc, WORKERS);
            tokio::join!(follow, work);
        }
    }));
    size
}

/// Reads the size of the running collector's graph.
#[derive(Clone)]
pub struct GraphSize(Arc<Mutex<Option<Arc<Collector>>>>);

impl GraphSize {
    pub fn bytes(&self) -> usize {
        self.0
            .lock()
            .expect("gc lock")
            .as_ref()
            .map_or(0, |c| c.graph_bytes())
    }
}
