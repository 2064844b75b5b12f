//! kube-controller-manager's **ReplicaSet** controller
//! (`replicaset-controller`, as the ServiceAccount `replicaset-controller`)
//! and, the same code over the core/v1 kind as upstream runs it, the
//! **ReplicationController** controller (`replicationcontroller-controller`,
//! as `replication-controller`). The decisions are
//! [`wasm_apiserver_api::replicas`]'; this module follows the owners and
//! their pods and acts.
//!
//! * One key per owner (`namespace`, `name`), queued when it changes and
//!   when a pod it controls (or an orphan its selector matches) does.
//! * A sync claims pods as upstream's `ControllerRefManager`: an orphan
//!   whose labels match is adopted (a controller reference with
//!   `blockOwnerDeletion`, written by a JSON patch that tests the pod's
//!   `resourceVersion`), a controlled pod whose labels no longer match is
//!   released; pods another controller owns are never touched.
//! * Then it creates or deletes the difference, at most
//!   [`BURST_REPLICAS`] per sync, creates in slow-start batches (1, 2,
//!   4, …; a failed batch ends the sync), and records what it expects to
//!   see ([`Expectations`]): until the pod watch has shown those pods,
//!   the owner is not synced again (nothing is created twice), as
//!   upstream. Expectations live in memory; a new leader starts with a
//!   fresh list of pods, so what the old one created is counted.
//! * The status (`replicas`, `fullyLabeledReplicas`, `readyReplicas`,
//!   `availableReplicas`, `observedGeneration`, `ReplicaFailure`) is
//!   written only when it changes.
//! * Events: `SuccessfulCreate`, `FailedCreate`, `SuccessfulDelete`,
//!   `FailedDelete`, through upstream's spam filter (a burst of 25 per
//!   owner, then one per 5 minutes), so 10,000 creates are not 10,000
//!   Events.
//!
//! Pods are cached slimmed (the fields the decisions read), per namespace
//! and per controller uid, so a sync reads its own pods and the
//! namespace's orphans, never a list.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key};
use crate::options::Preconditions;
use crate::resources::Resource;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasm_apiserver_api::patch::PatchType;
use wasm_apiserver_api::replicas::replicaset::{self as rules, BURST_REPLICAS, ManageError};
use wasm_apiserver_api::replicas::{self, Expectations};
use wasm_apiserver_api::selector::LabelSelector;
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// `(namespace, name)`.
pub type Key = (String, String);

/// Which owner kind one instance of the controller serves.
#[derive(Debug, Clone, Copy)]
pub struct Flavor {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    /// Its ServiceAccount (and `system:controller:` role).
    pub identity: &'static str,
    /// Its `--controllers` name.
    pub controller: &'static str,
    /// Its work queue's name (upstream's).
    pub queue: &'static str,
}

impl Flavor {
    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub const REPLICA_SET: Flavor = Flavor {
    group: "apps",
    version: "v1",
    plural: "replicasets",
    kind: "ReplicaSet",
    identity: "replicaset-controller",
    controller: "replicaset-controller",
    queue: "replicaset",
};

pub const REPLICATION_CONTROLLER: Flavor = Flavor {
    group: "",
    version: "v1",
    plural: "replicationcontrollers",
    kind: "ReplicationController",
    identity: "replication-controller",
    controller: "replicationcontroller-controller",
    queue: "replicationmanager",
};

fn uid(obj: &Value) -> &str {
    meta::str_field(obj, "uid").unwrap_or_default()
}

/// The fields of a pod the controllers read: identity, labels, owners,
/// deletion, node, phase, readiness and restarts.
pub(crate) fn slim_pod(pod: &Value) -> Value {
    let m = &pod["metadata"];
    let mut metadata = json!({"name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
        "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        "labels": m["labels"], "ownerReferences": m["ownerReferences"],
        "deletionTimestamp": m["deletionTimestamp"]});
    if let Some(cost) = m["annotations"]["controller.kubernetes.io/pod-deletion-cost"].as_str() {
        metadata["annotations"] = json!({"controller.kubernetes.io/pod-deletion-cost": cost});
    }
    let ready: Vec<&Value> = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == "Ready")
        .collect();
    let restarts: Vec<Value> = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!({"restartCount": c["restartCount"]}))
        .collect();
    json!({
        "metadata": metadata,
        "spec": {"nodeName": pod["spec"]["nodeName"]},
        "status": {"phase": pod["status"]["phase"], "conditions": ready, "containerStatuses": restarts},
    })
}

/// A spam filter as client-go's event correlator has it
/// (`EventSourceObjectSpamFilter`): per object, a burst of 25 then one
/// event per 5 minutes.
#[derive(Default)]
pub(crate) struct SpamFilter(Mutex<HashMap<String, (f64, Instant)>>);

impl SpamFilter {
    const BURST: f64 = 25.0;
    const REFILL_PER_SEC: f64 = 1.0 / 300.0;

    pub(crate) fn allow(&self, object_uid: &str) -> bool {
        let now = Instant::now();
        let mut all = lock(&self.0);
        if all.len() > 10_000 {
            all.retain(|_, (_, t)| now.duration_since(*t) < Duration::from_secs(600));
        }
        let (tokens, last) = all
            .entry(object_uid.to_string())
            .or_insert((Self::BURST, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * Self::REFILL_PER_SEC)
            .min(Self::BURST);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// An owner as cached, with its parsed selector.
pub(crate) struct Owner {
    pub(crate) obj: Value,
    pub(crate) selector: Option<LabelSelector>,
}

/// Cached owners (ReplicaSets, or Deployments), by key, namespace and uid.
#[derive(Default)]
pub(crate) struct Owners {
    pub(crate) objs: HashMap<Key, Owner>,
    by_ns: HashMap<String, BTreeSet<String>>,
    by_uid: HashMap<String, Key>,
}

impl Owners {
    pub(crate) fn set(&mut self, key: &Key, obj: Option<Value>) {
        if let Some(old) = self.objs.remove(key) {
            self.by_uid.remove(uid(&old.obj));
            if let Some(set) = self.by_ns.get_mut(&key.0) {
                set.remove(&key.1);
                if set.is_empty() {
                    self.by_ns.remove(&key.0);
                }
            }
        }
        if let Some(obj) = obj {
            let selector = replicas::selector(&obj["spec"]["selector"]).ok();
            self.by_uid.insert(uid(&obj).to_string(), key.clone());
            self.by_ns
                .entry(key.0.clone())
                .or_default()
                .insert(key.1.clone());
            self.objs.insert(key.clone(), Owner { obj, selector });
        }
    }

    pub(crate) fn get(&self, key: &Key) -> Option<&Owner> {
        self.objs.get(key)
    }

    pub(crate) fn keys(&self) -> Vec<Key> {
        self.objs.keys().cloned().collect()
    }

    /// The owner a controller reference names, if it is of `kind` and
    /// cached with that uid.
    pub(crate) fn resolve(&self, r: Option<&Value>, kind: &str) -> Option<Key> {
        let r = r?;
        if r["kind"] != kind {
            return None;
        }
        self.by_uid.get(r["uid"].as_str()?).cloned()
    }

    /// The owners in `ns`.
    pub(crate) fn in_namespace<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = &'a Owner> + 'a {
        self.by_ns
            .get(ns)
            .into_iter()
            .flatten()
            .filter_map(move |n| self.objs.get(&(ns.to_string(), n.clone())))
    }

    /// Owners in the child's namespace whose selector matches it.
    pub(crate) fn matching(&self, child: &Value) -> Vec<Key> {
        let ns = meta::namespace(child).unwrap_or_default();
        self.in_namespace(ns)
            .filter(|o| {
                o.selector
                    .as_ref()
                    .is_some_and(|s| !s.is_empty() && s.matches_object(child))
            })
            .map(|o| namespaced_key(&o.obj))
            .collect()
    }
}

/// Cached children (pods, or ReplicaSets), by key, by controller uid, and
/// the orphans of each namespace.
#[derive(Default)]
pub(crate) struct Children {
    pub(crate) objs: HashMap<Key, Arc<Value>>,
    by_controller: HashMap<String, HashSet<Key>>,
    orphans: HashMap<String, BTreeSet<String>>,
}

impl Children {
    /// Sets (or removes) a child; the version it replaces.
    pub(crate) fn set(&mut self, key: &Key, obj: Option<Arc<Value>>) -> Option<Arc<Value>> {
        let old = self.objs.remove(key);
        if let Some(old) = &old {
            match replicas::controller_uid(old) {
                Some(u) => {
                    if let Some(set) = self.by_controller.get_mut(u) {
                        set.remove(key);
                        if set.is_empty() {
                            self.by_controller.remove(u);
                        }
                    }
                }
                None => {
                    if let Some(set) = self.orphans.get_mut(&key.0) {
                        set.remove(&key.1);
                        if set.is_empty() {
                            self.orphans.remove(&key.0);
                        }
                    }
                }
            }
        }
        if let Some(obj) = obj {
            match replicas::controller_uid(&obj) {
                Some(u) => {
                    self.by_controller
                        .entry(u.to_string())
                        .or_default()
                        .insert(key.clone());
                }
                None => {
                    self.orphans
                        .entry(key.0.clone())
                        .or_default()
                        .insert(key.1.clone());
                }
            }
            self.objs.insert(key.clone(), obj);
        }
        old
    }

    pub(crate) fn get(&self, key: &Key) -> Option<&Arc<Value>> {
        self.objs.get(key)
    }

    /// The children the controller with `owner_uid` controls.
    pub(crate) fn controlled_by(&self, owner_uid: &str) -> Vec<Arc<Value>> {
        self.by_controller
            .get(owner_uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.objs.get(k).cloned())
            .collect()
    }

    /// What a sync of `owner` looks at: the children it controls and the
    /// orphans of its namespace.
    pub(crate) fn candidates(&self, owner: &Value) -> Vec<Arc<Value>> {
        let ns = meta::namespace(owner).unwrap_or_default();
        let mut out = self.controlled_by(uid(owner));
        out.extend(
            self.orphans
                .get(ns)
                .into_iter()
                .flatten()
                .filter_map(|n| self.objs.get(&(ns.to_string(), n.clone())).cloned()),
        );
        out
    }
}

/// What the followers saw.
#[derive(Default)]
struct Cache {
    owners: Owners,
    pods: Children,
}

/// Claims `candidates` for `owner` as upstream's `ClaimObject`: keeps the
/// ones it controls that match, adopts matching orphans, releases the
/// ones it controls that no longer match. `can_adopt` is asked (once)
/// before the first adoption: the owner, read afresh, must still exist
/// with its uid and not be deleting.
pub(crate) async fn claim<F, Fut>(
    client: &Client,
    info: &Resource,
    owner: &Value,
    owner_ref: Value,
    selector: &LabelSelector,
    candidates: Vec<Arc<Value>>,
    can_adopt: F,
) -> Result<Vec<Arc<Value>>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let matches = |child: &Value| !selector.is_empty() && selector.matches_object(child);
    claim_matching(
        client, info, owner, owner_ref, matches, candidates, can_adopt,
    )
    .await
}

/// [`claim`] with upstream's filters: a child belongs to the owner when
/// `matches` says so (its selector and, for a StatefulSet, its name).
pub(crate) async fn claim_matching<F, Fut>(
    client: &Client,
    info: &Resource,
    owner: &Value,
    owner_ref: Value,
    matches: impl Fn(&Value) -> bool,
    candidates: Vec<Arc<Value>>,
    can_adopt: F,
) -> Result<Vec<Arc<Value>>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let owner_uid = uid(owner).to_string();
    let deleting = !owner["metadata"]["deletionTimestamp"].is_null();
    let mut can_adopt = Some(can_adopt);
    let mut adoptable: Option<Result<()>> = None;
    let mut claimed = Vec::new();
    let mut first_error = None;
    for child in candidates {
        let matches = matches(&child);
        let (ns, name) = namespaced_key(&child);
        let refs: Vec<Value> = child["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match replicas::controller_of(&child) {
            Some(r) if r["uid"] != owner_uid.as_str() => {}
            Some(_) if matches => claimed.push(child),
            Some(_) => {
                if deleting {
                    continue;
                }
                let kept: Vec<Value> = refs
                    .iter()
                    .filter(|r| r["uid"] != owner_uid.as_str())
                    .cloned()
                    .collect();
                match patch_owners(client, info, &ns, &name, &child, kept).await {
                    Ok(_) | Err(ApiError::NotFound(_)) => {}
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            None => {
                if deleting || !matches || !child["metadata"]["deletionTimestamp"].is_null() {
                    continue;
                }
                if adoptable.is_none() {
                    let f = can_adopt.take().expect("asked once");
                    adoptable = Some(f().await);
                }
                match adoptable.as_ref().expect("set") {
                    Ok(()) => {}
                    Err(_) => continue,
                }
                let mut refs = refs;
                refs.push(owner_ref.clone());
                match patch_owners(client, info, &ns, &name, &child, refs).await {
                    Ok(adopted) => claimed.push(Arc::new(adopted)),
                    Err(ApiError::NotFound(_)) => {}
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(claimed),
    }
}

/// Sets a child's owner references, provided it is still the version
/// seen (a JSON patch that tests `resourceVersion` and `uid`).
async fn patch_owners(
    client: &Client,
    info: &Resource,
    ns: &str,
    name: &str,
    seen: &Value,
    refs: Vec<Value>,
) -> Result<Value> {
    let doc = json!([
        {"op": "test", "path": "/metadata/uid", "value": seen["metadata"]["uid"]},
        {"op": "test", "path": "/metadata/resourceVersion", "value": seen["metadata"]["resourceVersion"]},
        {"op": "add", "path": "/metadata/ownerReferences", "value": refs},
    ]);
    client
        .patch(info, Some(ns), name, None, PatchType::Json, &doc)
        .await
}

/// Upstream's `RecheckDeletionTimestamp`: the owner, read afresh (not
/// from the cache), is the one seen and is not being deleted.
pub(crate) async fn recheck_owner(client: &Client, info: &Resource, owner: &Value) -> Result<()> {
    let (ns, name) = namespaced_key(owner);
    let fresh = client.get(info, Some(&ns), &name).await?;
    if uid(&fresh) != uid(owner) {
        return Err(ApiError::Conflict(
            wasm_apiserver_api::error::Target::new(&info.group, &info.plural, &name),
            format!(
                "original {} {ns}/{name} is gone: got uid {}, wanted {}",
                info.kind,
                uid(&fresh),
                uid(owner)
            ),
        ));
    }
    if !fresh["metadata"]["deletionTimestamp"].is_null() {
        return Err(ApiError::Conflict(
            wasm_apiserver_api::error::Target::new(&info.group, &info.plural, &name),
            format!("{} {ns}/{name} has just been deleted", info.kind),
        ));
    }
    Ok(())
}

/// The controller.
struct ReplicaSets {
    client: Client,
    flavor: Flavor,
    cache: Arc<Mutex<Cache>>,
    expectations: Arc<Mutex<Expectations<Key>>>,
    spam: SpamFilter,
}

impl ReplicaSets {
    fn owner_info(&self) -> Arc<Resource> {
        self.client.objects.resources.builtin(
            self.flavor.group,
            self.flavor.version,
            self.flavor.plural,
        )
    }

    fn pods_info(&self) -> Arc<Resource> {
        self.client.objects.resources.builtin("", "v1", "pods")
    }

    async fn event(&self, owner: &Value, kind: &str, reason: &str, msg: &str) {
        if self.spam.allow(uid(owner)) {
            self.client.event(owner, kind, reason, msg).await;
        }
    }

    /// The pod `owner` creates (upstream's `GetPodFromTemplate`).
    fn pod_from_template(&self, owner: &Value) -> Value {
        let t = &owner["spec"]["template"];
        let mut metadata = json!({
            "generateName": format!("{}-", meta::name(owner).unwrap_or_default()),
            "namespace": meta::namespace(owner),
            "ownerReferences": [replicas::controller_ref(owner, &self.flavor.api_version(), self.flavor.kind)],
        });
        for f in ["labels", "annotations", "finalizers"] {
            if !t["metadata"][f].is_null() {
                metadata[f] = t["metadata"][f].clone();
            }
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": t["spec"]})
    }

    /// Creates `count` pods in slow-start batches; the number created and
    /// the first error.
    async fn create_pods(&self, owner: &Value, count: usize) -> (usize, Option<ApiError>) {
        let info = self.pods_info();
        let ns = meta::namespace(owner).unwrap_or_default().to_string();
        let pod = self.pod_from_template(owner);
        let mut created = 0;
        for batch in rules::slow_start_batches(count) {
            let results = futures::future::join_all(
                (0..batch).map(|_| self.client.create(&info, Some(&ns), pod.clone())),
            )
            .await;
            let mut failed = None;
            for r in results {
                match r {
                    Ok(p) => {
                        created += 1;
                        self.event(
                            owner,
                            "Normal",
                            "SuccessfulCreate",
                            &format!("Created pod: {}", meta::name(&p).unwrap_or_default()),
                        )
                        .await;
                    }
                    Err(e) => {
                        self.event(
                            owner,
                            "Warning",
                            "FailedCreate",
                            &format!("Error creating: {e}"),
                        )
                        .await;
                        failed.get_or_insert(e);
                    }
                }
            }
            if failed.is_some() {
                return (created, failed);
            }
        }
        (created, None)
    }

    /// Pods of every owner controlled by the same controller as `owner`
    /// (a Deployment's other ReplicaSets): the node ranking reads them.
    fn related_pods(&self, owner: &Value) -> Vec<Arc<Value>> {
        let c = lock(&self.cache);
        let Some(ctl) = replicas::controller_uid(owner) else {
            return c.pods.controlled_by(uid(owner));
        };
        let ns = meta::namespace(owner).unwrap_or_default();
        c.owners
            .in_namespace(ns)
            .filter(|o| replicas::controller_uid(&o.obj) == Some(ctl))
            .flat_map(|o| c.pods.controlled_by(uid(&o.obj)))
            .filter(|p| replicas::pod_is_active(p))
            .collect()
    }

    async fn delete_pods(
        &self,
        key: &Key,
        owner: &Value,
        pods: &[&Value],
        count: usize,
    ) -> Option<ApiError> {
        let related = self.related_pods(owner);
        let related: Vec<&Value> = related.iter().map(|p| p.as_ref()).collect();
        let chosen = rules::pods_to_delete(pods, &related, count, chrono::Utc::now());
        let victims: Vec<&Value> = chosen.into_iter().map(|i| pods[i]).collect();
        let names: Vec<String> = victims
            .iter()
            .map(|p| {
                let (ns, n) = namespaced_key(p);
                format!("{ns}/{n}")
            })
            .collect();
        lock(&self.expectations).expect_deletions(key, names.clone(), Instant::now());
        let info = self.pods_info();
        let results = futures::future::join_all(victims.iter().map(|p| {
            let (ns, n) = namespaced_key(p);
            let pre = Preconditions {
                uid: Some(uid(p).to_string()),
                ..Default::default()
            };
            let info = info.clone();
            async move {
                let r = self.client.delete(&info, Some(&ns), &n, &pre).await;
                (n, r)
            }
        }))
        .await;
        let mut first = None;
        for ((name, r), full) in results.into_iter().zip(names) {
            match r {
                Ok(_) => {
                    self.event(
                        owner,
                        "Normal",
                        "SuccessfulDelete",
                        &format!("Deleted pod: {name}"),
                    )
                    .await
                }
                Err(e) => {
                    lock(&self.expectations).deletion_observed(key, &full);
                    if !matches!(e, ApiError::NotFound(_) | ApiError::Conflict(..)) {
                        self.event(
                            owner,
                            "Warning",
                            "FailedDelete",
                            &format!("Error deleting: {e}"),
                        )
                        .await;
                        first.get_or_insert(e);
                    }
                }
            }
        }
        first
    }

    /// Creates or deletes the difference (upstream's `manageReplicas`).
    async fn manage(&self, key: &Key, owner: &Value, pods: &[&Value]) -> Option<ManageError> {
        let want = owner["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
        let have = pods.len();
        if have < want {
            let count = (want - have).min(BURST_REPLICAS);
            lock(&self.expectations).expect_creations(key, count, Instant::now());
            let (created, err) = self.create_pods(owner, count).await;
            // Pods never made will never be seen.
            let mut e = lock(&self.expectations);
            for _ in created..count {
                e.creation_observed(key);
            }
            drop(e);
            let err = err.filter(|e| !namespace_terminating(e))?;
            return Some(ManageError {
                reason: "FailedCreate",
                message: err.to_string(),
            });
        }
        if have > want {
            let count = (have - want).min(BURST_REPLICAS);
            let err = self.delete_pods(key, owner, pods, count).await?;
            return Some(ManageError {
                reason: "FailedDelete",
                message: err.to_string(),
            });
        }
        None
    }
}

/// Creates fail in a namespace being deleted; nothing to report then.
fn namespace_terminating(e: &ApiError) -> bool {
    let s = e.to_string();
    s.contains("because it is being terminated") || s.contains("NamespaceTerminating")
}

#[async_trait::async_trait]
impl Reconcile for ReplicaSets {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (owner, selector, candidates) = {
            let c = lock(&self.cache);
            match c.owners.get(key) {
                None => {
                    drop(c);
                    lock(&self.expectations).forget(key);
                    return Ok(Action::Done);
                }
                Some(o) => (o.obj.clone(), o.selector.clone(), c.pods.candidates(&o.obj)),
            }
        };
        let Some(selector) = selector else {
            tracing::debug!(
                ?key,
                kind = self.flavor.kind,
                "selector does not parse; skipping"
            );
            return Ok(Action::Done);
        };
        let needs_sync = lock(&self.expectations).satisfied(key, Instant::now());
        let active: Vec<Arc<Value>> = candidates
            .into_iter()
            .filter(|p| replicas::pod_is_active(p))
            .collect();
        let owner_info = self.owner_info();
        let owner_ref =
            replicas::controller_ref(&owner, &self.flavor.api_version(), self.flavor.kind);
        let pods = claim(
            &self.client,
            &self.pods_info(),
            &owner,
            owner_ref,
            &selector,
            active,
            || recheck_owner(&self.client, &owner_info, &owner),
        )
        .await?;
        let pods: Vec<&Value> = pods.iter().map(|p| p.as_ref()).collect();
        let failure = if needs_sync && owner["metadata"]["deletionTimestamp"].is_null() {
            self.manage(key, &owner, &pods).await
        } else {
            None
        };
        let now = chrono::Utc::now();
        let status = rules::status(&owner, &pods, failure.as_ref(), now);
        if status != owner["status"] {
            let out = self
                .client
                .update(&owner_info, Some(&key.0), &key.1, Some("status"), |cur| {
                    if uid(cur) != uid(&owner) {
                        return Err(ApiError::NotFound(wasm_apiserver_api::error::Target::new(
                            self.flavor.group,
                            self.flavor.plural,
                            &key.1,
                        )));
                    }
                    let mut new = cur.clone();
                    new["status"] = status.clone();
                    Ok(new)
                })
                .await;
            match out {
                Ok(_) | Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(f) = failure {
            return Err(ApiError::Internal(f.message));
        }
        Ok(match rules::next_available_in(&owner, &pods, now) {
            Some(d) => Action::RequeueAfter(d),
            None => Action::Done,
        })
    }
}

/// What a pod event means for the owners (upstream's `addPod`,
/// `updatePod`, `deletePod`): the owners to queue, expectations observed.
fn on_pod(
    cache: &Mutex<Cache>,
    expectations: &Mutex<Expectations<Key>>,
    kind: &str,
    pod: Value,
    deleted: bool,
) -> Vec<Key> {
    let key = namespaced_key(&pod);
    let pod_name = format!("{}/{}", key.0, key.1);
    let mut c = lock(cache);
    let new = (!deleted).then(|| Arc::new(slim_pod(&pod)));
    if let (Some(n), Some(o)) = (&new, c.pods.get(&key))
        && n["metadata"]["resourceVersion"] == o["metadata"]["resourceVersion"]
        && uid(n) == uid(o)
    {
        return Vec::new();
    }
    let old = c.pods.set(&key, new.clone());
    let mut out = Vec::new();
    let mut e = lock(expectations);
    let Some(cur) = new else {
        // Deleted.
        let last = old.unwrap_or_else(|| Arc::new(slim_pod(&pod)));
        if let Some(owner) = c.owners.resolve(replicas::controller_of(&last), kind) {
            e.deletion_observed(&owner, &pod_name);
            out.push(owner);
        }
        return out;
    };
    let cur_owner = c.owners.resolve(replicas::controller_of(&cur), kind);
    let Some(old) = old.filter(|o| uid(o) == uid(&cur)) else {
        // Added.
        if !cur["metadata"]["deletionTimestamp"].is_null() {
            if let Some(owner) = cur_owner {
                e.deletion_observed(&owner, &pod_name);
                out.push(owner);
            }
        } else if let Some(owner) = cur_owner {
            e.creation_observed(&owner);
            out.push(owner);
        } else if replicas::controller_of(&cur).is_none() {
            out.extend(c.owners.matching(&cur));
        }
        return out;
    };
    // Updated.
    let labels_changed = old["metadata"]["labels"] != cur["metadata"]["labels"];
    let old_owner = c.owners.resolve(replicas::controller_of(&old), kind);
    if !cur["metadata"]["deletionTimestamp"].is_null() {
        for owner in [cur_owner, old_owner].into_iter().flatten() {
            e.deletion_observed(&owner, &pod_name);
            out.push(owner);
        }
        return out;
    }
    let ref_changed = replicas::controller_of(&old) != replicas::controller_of(&cur);
    if ref_changed && let Some(o) = old_owner {
        out.push(o);
    }
    match cur_owner {
        Some(owner) => out.push(owner),
        None if replicas::controller_of(&cur).is_none() && (labels_changed || ref_changed) => {
            out.extend(c.owners.matching(&cur))
        }
        None => {}
    }
    out
}

/// Runs the controller of `flavor` while this replica leads.
pub fn spawn(client: Client, flavor: Flavor, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new(flavor.queue);
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let cache: Arc<Mutex<Cache>> = Default::default();
        let expectations: Arc<Mutex<Expectations<Key>>> = Default::default();
        let controller = Arc::new(ReplicaSets {
            client: client.clone(),
            flavor,
            cache: cache.clone(),
            expectations: expectations.clone(),
            spam: SpamFilter::default(),
        });
        let queue = queue.clone();
        async move {
            let objects = controller.client.objects.clone();
            let (synced_tx, mut synced) = tokio::sync::watch::channel(0u8);
            let synced_tx = Arc::new(synced_tx);
            let owners = objects
                .resources
                .builtin(flavor.group, flavor.version, flavor.plural);
            let (c1, c2, q1, q2, e1) = (
                cache.clone(),
                cache.clone(),
                queue.clone(),
                queue.clone(),
                expectations.clone(),
            );
            let s1 = synced_tx.clone();
            let mut first = true;
            let follow_owners = objects.follow(
                &owners,
                move |listed| {
                    let mut c = lock(&c1);
                    let keys: HashSet<Key> = listed.iter().map(namespaced_key).collect();
                    for k in c.owners.keys() {
                        if !keys.contains(&k) {
                            c.owners.set(&k, None);
                            q1.add(k);
                        }
                    }
                    for o in listed {
                        c.owners.set(&namespaced_key(o), Some(o.clone()));
                    }
                    if std::mem::take(&mut first) {
                        s1.send_modify(|n| *n += 1);
                    }
                },
                move |obj, deleted| {
                    let key = namespaced_key(&obj);
                    lock(&c2).owners.set(&key, (!deleted).then_some(obj));
                    if deleted {
                        lock(&e1).forget(&key);
                    }
                    q2.add(key);
                    async {}
                },
            );
            let pods = objects.resources.builtin("", "v1", "pods");
            let (c3, c4, q3, q4, e2) = (
                cache.clone(),
                cache.clone(),
                queue.clone(),
                queue.clone(),
                expectations.clone(),
            );
            let s2 = synced_tx.clone();
            let mut first_pods = true;
            let follow_pods = objects.follow(
                &pods,
                move |listed| {
                    let mut c = lock(&c3);
                    let keys: HashSet<Key> = listed.iter().map(namespaced_key).collect();
                    let gone: Vec<Key> = c
                        .pods
                        .objs
                        .keys()
                        .filter(|k| !keys.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        if let Some(old) = c.pods.set(&k, None)
                            && let Some(owner) =
                                c.owners.resolve(replicas::controller_of(&old), flavor.kind)
                        {
                            q3.add(owner);
                        }
                    }
                    if std::mem::take(&mut first_pods) {
                        for p in listed {
                            c.pods.set(&namespaced_key(p), Some(Arc::new(slim_pod(p))));
                        }
                        s2.send_modify(|n| *n += 1);
                    }
                },
                move |pod, deleted| {
                    for owner in on_pod(&c4, &e2, flavor.kind, pod, deleted) {
                        q4.add(owner);
                    }
                    async {}
                },
            );
            let run = async {
                let _ = synced.wait_for(|n| *n >= 2).await;
                super::run(queue.clone(), controller.clone(), 5).await;
            };
            tokio::join!(follow_owners, follow_pods, run);
        }
    }));
}
