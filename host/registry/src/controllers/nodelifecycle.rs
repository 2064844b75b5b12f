//! kube-controller-manager's **node lifecycle** controller
//! (`node-lifecycle-controller`) and **taint eviction** controller
//! (`taint-eviction-controller`), both as the ServiceAccount
//! `node-controller` with upstream's `system:controller:node-controller`
//! role (upstream's taint eviction controller uses that role too). The
//! decisions are [`wasm_apiserver_api::node::lifecycle`]'s; this module
//! follows Nodes, node Leases and Pods and acts on them.
//!
//! * Lifecycle, one key per node, looked at on every change of the Node
//!   and every `--node-monitor-period`: a node whose `Ready` heartbeat and
//!   Lease (`kube-node-lease/<node>`) have not moved for
//!   `--node-monitor-grace-period` (`--node-startup-grace-period` before it
//!   first posts `Ready`) gets its conditions set to `Unknown`, a
//!   `NodeNotReady` Event, and its pods' `Ready` condition set to `False`;
//!   its `NoExecute` taint follows the `Ready` status the pass started
//!   from, its `NoSchedule` taints its conditions and `spec.unschedulable`.
//!   The cluster counts as one zone of upstream's disruption states: when
//!   no node is ready no `NoExecute` taint stays (nothing is evicted), and
//!   when more than two and 55% are not ready none is added.
//! * Taint eviction, one key per pod: a pod bound to a node with
//!   `NoExecute` taints it does not tolerate is deleted at once, one that
//!   tolerates them for `tolerationSeconds` after that long (timed from
//!   when the controller first saw it must go, as upstream); the pod first
//!   gets a `DisruptionTarget` condition, and an Event
//!   `TaintManagerEviction` says so (or that a deletion was cancelled).

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock};
use crate::options::Preconditions;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use wasm_apiserver_api::node::NODE_LEASE_NAMESPACE;
use wasm_apiserver_api::node::lifecycle::{self, Disruption, Eviction, Health};
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The identity both controllers run as.
pub const NAME: &str = "node-controller";
/// `--controllers` names.
pub const LIFECYCLE: &str = "node-lifecycle-controller";
pub const TAINT_EVICTION: &str = "taint-eviction-controller";

/// The node lifecycle controller's timing (kube-controller-manager's
/// flags).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// `--node-monitor-period` (5 s).
    pub monitor_period: Duration,
    /// `--node-monitor-grace-period` (50 s).
    pub grace: Duration,
    /// `--node-startup-grace-period` (1 min).
    pub startup_grace: Duration,
}

type PodKey = (String, String);

/// What the followers saw: the informers' caches.
#[derive(Default)]
struct Cache {
    nodes: HashMap<String, Value>,
    /// Node name → its Lease's `spec.renewTime`.
    leases: HashMap<String, String>,
    pods: HashMap<PodKey, Value>,
    by_node: HashMap<String, BTreeSet<PodKey>>,
}

impl Cache {
    fn set_pod(&mut self, key: PodKey, pod: Option<Value>) {
        if let Some(old) = self.pods.remove(&key)
            && let Some(n) = old["spec"]["nodeName"].as_str()
            && let Some(set) = self.by_node.get_mut(n)
        {
            set.remove(&key);
            if set.is_empty() {
                self.by_node.remove(n);
            }
        }
        if let Some(pod) = pod {
            if let Some(n) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                self.by_node
                    .entry(n.to_string())
                    .or_default()
                    .insert(key.clone());
            }
            self.pods.insert(key, pod);
        }
    }

    fn pods_on(&self, node: &str) -> Vec<Value> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k).cloned())
            .collect()
    }
}

fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn pod_key(pod: &Value) -> PodKey {
    (
        meta::namespace(pod).unwrap_or_default().to_string(),
        meta::name(pod).unwrap_or_default().to_string(),
    )
}

/// The node lifecycle controller.
struct Lifecycle {
    client: Client,
    cache: Arc<Mutex<Cache>>,
    timing: Timing,
    health: Mutex<HashMap<String, Health>>,
    /// Nodes seen (name → uid), for the Registered/Removing events.
    known: Mutex<HashMap<String, String>>,
    /// Nodes whose pods could not all be marked not ready.
    retry: Mutex<HashSet<String>>,
    /// Whether no node was ready at the last pass.
    full_disruption: Mutex<bool>,
}

impl Lifecycle {
    fn regarding(name: &str, uid: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": uid}})
    }

    /// Upstream's `MarkPodsNotReady`: the `Ready` condition of every pod
    /// bound to `node` set to `False`, with a `NodeNotReady` Event each.
    async fn mark_pods_not_ready(&self, node: &str) -> Result<()> {
        let pods = lock(&self.cache).pods_on(node);
        let info = self.client.objects.resources.builtin("", "v1", "pods");
        let now = now_rfc3339();
        let mut failed = None;
        for pod in pods {
            if lifecycle::pod_not_ready(&pod, &now).is_none() {
                continue;
            }
            let (ns, name) = pod_key(&pod);
            let out = self
                .client
                .update(&info, Some(&ns), &name, Some("status"), |cur| {
                    let mut new = cur.clone();
                    if let Some(status) = lifecycle::pod_not_ready(cur, &now) {
                        new["status"] = status;
                    }
                    Ok(new)
                })
                .await;
            match out {
                Ok(p) => {
                    self.client
                        .event(&p, "Warning", "NodeNotReady", "Node is not ready")
                        .await
                }
                Err(ApiError::NotFound(_)) => {}
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

#[async_trait::async_trait]
impl Reconcile for Lifecycle {
    type Key = String;

    async fn reconcile(&self, name: &String) -> Result<Action> {
        let (node, lease) = {
            let c = lock(&self.cache);
            (c.nodes.get(name).cloned(), c.leases.get(name).cloned())
        };
        let Some(node) = node else {
            lock(&self.health).remove(name);
            lock(&self.retry).remove(name);
            let uid = lock(&self.known).remove(name);
            if let Some(uid) = uid {
                self.client
                    .event(
                        &Self::regarding(name, &uid),
                        "Normal",
                        "RemovingNode",
                        &format!("Removing Node {name} from Controller"),
                    )
                    .await;
            }
            return Ok(Action::Done);
        };
        let uid = meta::str_field(&node, "uid")
            .unwrap_or_default()
            .to_string();
        let fresh = lock(&self.known)
            .insert(name.clone(), uid.clone())
            .is_none();
        if fresh {
            self.client
                .event(
                    &Self::regarding(name, &uid),
                    "Normal",
                    "RegisteredNode",
                    &format!("Node {name} event: Registered Node {name} in Controller"),
                )
                .await;
        }
        let now = Instant::now();
        let created_ago = meta::str_field(&node, "creationTimestamp")
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .and_then(|t| {
                (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                    .to_std()
                    .ok()
            })
            .unwrap_or_default();
        let health = {
            let mut all = lock(&self.health);
            let h = Health::observe(all.get(name), &node, lease.as_deref(), now, created_ago);
            all.insert(name.clone(), h.clone());
            h
        };
        let nodes = self.client.objects.resources.builtin("", "v1", "nodes");
        let observed = lifecycle::ready_status(&node).map(String::from);
        let stamp = now_rfc3339();
        // The cluster's state, as one zone.
        let state = {
            let c = lock(&self.cache);
            lifecycle::disruption(c.nodes.values().map(lifecycle::ready_status))
        };
        let was_full = {
            let mut full = lock(&self.full_disruption);
            std::mem::replace(&mut *full, state == Disruption::Full)
        };
        if was_full != (state == Disruption::Full) {
            if was_full {
                // Every node gets a fresh grace, as upstream.
                tracing::info!("some nodes are ready again; leaving full disruption mode");
                for h in lock(&self.health).values_mut() {
                    h.refresh(now);
                }
            } else {
                tracing::warn!(
                    "no node is ready; full disruption mode: no pod is evicted until some node is ready"
                );
            }
        }
        let health = lock(&self.health).get(name).cloned().unwrap_or(health);
        let basis = lifecycle::no_execute_basis(state, observed.as_deref()).map(String::from);
        // Taints, from the Ready status this pass started from.
        if lifecycle::node_taints(&node, basis.as_deref(), &stamp).is_some() {
            let out = self
                .client
                .update(&nodes, None, name, None, |cur| {
                    let mut new = cur.clone();
                    if let Some(t) = lifecycle::node_taints(cur, basis.as_deref(), &stamp) {
                        new["spec"]["taints"] = json!(t);
                    }
                    Ok(new)
                })
                .await;
            match out {
                Ok(_) | Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let grace = lifecycle::grace_period(&node, self.timing.grace, self.timing.startup_grace);
        let mut now_not_ready = false;
        // Only a change is written (a write would come back as an event
        // and queue the node again).
        let stale = health.stale(now, grace) && {
            let mut marked = node.clone();
            lifecycle::mark_unknown(&mut marked, &stamp);
            marked != node
        };
        if stale {
            let mut changed = false;
            let out = self
                .client
                .update(&nodes, None, name, Some("status"), |cur| {
                    let mut new = cur.clone();
                    changed = lifecycle::mark_unknown(&mut new, &stamp);
                    Ok(new)
                })
                .await;
            match out {
                Ok(_) => now_not_ready = changed && observed.as_deref() == Some("True"),
                Err(ApiError::NotFound(_)) => return Ok(Action::Done),
                Err(e) => return Err(e),
            }
            if now_not_ready {
                tracing::info!(node = %name, "node stopped posting status; Ready is Unknown");
                self.client
                    .event(
                        &Self::regarding(name, &uid),
                        "Normal",
                        "NodeNotReady",
                        &format!("Node {name} status is now: NodeNotReady"),
                    )
                    .await;
            }
        }
        let retry = lock(&self.retry).contains(name);
        if (now_not_ready || (retry && observed.as_deref() != Some("True")))
            && let Err(e) = self.mark_pods_not_ready(name).await
        {
            lock(&self.retry).insert(name.clone());
            return Err(e);
        }
        lock(&self.retry).remove(name);
        let next = if health.stale(now, grace) {
            self.timing.monitor_period
        } else {
            self.timing
                .monitor_period
                .min(health.stale_in(now, grace) + Duration::from_millis(10))
        };
        Ok(Action::RequeueAfter(next))
    }
}

/// The taint eviction controller.
struct TaintEviction {
    client: Client,
    cache: Arc<Mutex<Cache>>,
    queue: Weak<Queue<PodKey>>,
    /// Pods that must go: since when (the controller's clock), and when
    /// the timer armed for them fires.
    scheduled: Mutex<HashMap<PodKey, (Instant, Option<Instant>)>>,
    /// Uids of pods deleted whose deletion the cache has not seen yet (so
    /// that the echo of the condition written first does not evict twice).
    deleted: Mutex<HashSet<String>>,
}

impl TaintEviction {
    async fn cancel(&self, key: &PodKey, pod: Option<&Value>) {
        if lock(&self.scheduled).remove(key).is_some()
            && let Some(pod) = pod
        {
            self.client
                .event(
                    pod,
                    "Normal",
                    "TaintManagerEviction",
                    &format!("Cancelling deletion of Pod {}/{}", key.0, key.1),
                )
                .await;
        }
    }

    /// Queues `key` at `at` (a timer of its own, so that a sooner deadline
    /// is never held back by a later one already waiting).
    fn arm(&self, key: &PodKey, at: Instant) {
        let queue = self.queue.clone();
        let key = key.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            if let Some(q) = queue.upgrade() {
                q.add(key);
            }
        });
    }

    async fn evict(&self, key: &PodKey, pod: &Value) -> Result<()> {
        let info = self.client.objects.resources.builtin("", "v1", "pods");
        let (ns, name) = key;
        self.client
            .event(
                pod,
                "Normal",
                "TaintManagerEviction",
                &format!("Marking for deletion Pod {ns}/{name}"),
            )
            .await;
        let now = now_rfc3339();
        let condition = lifecycle::disruption_target(
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
            &now,
        );
        let marked = self
            .client
            .update(&info, Some(ns), name, Some("status"), |cur| {
                let mut new = cur.clone();
                let conds = new["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut conds: Vec<Value> = conds
                    .into_iter()
                    .filter(|c| c["type"] != "DisruptionTarget")
                    .collect();
                conds.push(condition.clone());
                new["status"]["conditions"] = json!(conds);
                Ok(new)
            })
            .await;
        match marked {
            Ok(_) => {}
            Err(ApiError::NotFound(_)) => return Ok(()),
            Err(e) => tracing::debug!(pod = %name, error = %e, "could not add DisruptionTarget"),
        }
        let pre = Preconditions {
            uid: meta::str_field(pod, "uid").map(String::from),
            ..Default::default()
        };
        match self.client.delete(&info, Some(ns), name, &pre).await {
            Ok(_) => {
                if let Some(uid) = pre.uid {
                    lock(&self.deleted).insert(uid);
                }
                Ok(())
            }
            Err(ApiError::NotFound(_)) | Err(ApiError::Conflict(..)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[async_trait::async_trait]
impl Reconcile for TaintEviction {
    type Key = PodKey;

    async fn reconcile(&self, key: &PodKey) -> Result<Action> {
        let (pod, node) = {
            let c = lock(&self.cache);
            let pod = c.pods.get(key).cloned();
            let node = pod
                .as_ref()
                .and_then(|p| p["spec"]["nodeName"].as_str())
                .and_then(|n| c.nodes.get(n).cloned());
            (pod, node)
        };
        let Some(pod) = pod.filter(|p| meta::str_field(p, "deletionTimestamp").is_none()) else {
            lock(&self.scheduled).remove(key);
            return Ok(Action::Done);
        };
        if lock(&self.deleted).contains(meta::str_field(&pod, "uid").unwrap_or_default()) {
            return Ok(Action::Done);
        }
        let taints = node
            .as_ref()
            .map(lifecycle::no_execute_taints)
            .unwrap_or_default();
        match lifecycle::eviction(&taints, lifecycle::tolerations(&pod)) {
            Eviction::Never => {
                self.cancel(key, Some(&pod)).await;
                Ok(Action::Done)
            }
            Eviction::Now => {
                lock(&self.scheduled).remove(key);
                self.evict(key, &pod).await?;
                Ok(Action::Done)
            }
            Eviction::After(d) => {
                let now = Instant::now();
                let due = {
                    let mut s = lock(&self.scheduled);
                    let entry = s.entry(key.clone()).or_insert((now, None));
                    let due = entry.0 + d;
                    if due > now && entry.1.is_none_or(|armed| due < armed || armed <= now) {
                        entry.1 = Some(due);
                        self.arm(key, due);
                    }
                    due
                };
                if due <= now {
                    lock(&self.scheduled).remove(key);
                    self.evict(key, &pod).await?;
                }
                Ok(Action::Done)
            }
        }
    }
}

/// Which of the two run.
#[derive(Debug, Clone, Copy)]
pub struct Enabled {
    pub lifecycle: bool,
    pub taint_eviction: bool,
}

/// Runs the enabled controllers while this replica leads. `lifecycle` and
/// `eviction` are their clients (`eviction` acting as `node-controller`).
pub fn spawn(
    lifecycle_client: Client,
    eviction_client: Client,
    timing: Timing,
    enabled: Enabled,
    leadership: Leadership,
    metrics: &Metrics,
) {
    let nodes_q: Arc<Queue<String>> = Queue::new("node_lifecycle_controller");
    let pods_q: Arc<Queue<PodKey>> = Queue::new("taint_eviction_controller");
    if enabled.lifecycle {
        metrics.register(nodes_q.clone());
    }
    if enabled.taint_eviction {
        metrics.register(pods_q.clone());
    }
    tokio::spawn(leadership.run_while_leading(move || {
        let cache: Arc<Mutex<Cache>> = Default::default();
        let lifecycle = Arc::new(Lifecycle {
            client: lifecycle_client.clone(),
            cache: cache.clone(),
            timing,
            health: Default::default(),
            known: Default::default(),
            retry: Default::default(),
            full_disruption: Default::default(),
        });
        let eviction = Arc::new(TaintEviction {
            client: eviction_client.clone(),
            cache: cache.clone(),
            queue: Arc::downgrade(&pods_q),
            scheduled: Default::default(),
            deleted: Default::default(),
        });
        let (nodes_q, pods_q) = (nodes_q.clone(), pods_q.clone());
        async move {
            let objects = lifecycle.client.objects.clone();
            let (c1, c2, c3) = (cache.clone(), cache.clone(), cache.clone());
            let (nq_list, nq, pq) = (nodes_q.clone(), nodes_q.clone(), pods_q.clone());
            let nodes = objects.resources.builtin("", "v1", "nodes");
            let follow_nodes = objects.follow(
                &nodes,
                move |listed| {
                    let mut c = lock(&c1);
                    let names: HashSet<&str> = listed.iter().filter_map(meta::name).collect();
                    let gone: Vec<String> = c
                        .nodes
                        .keys()
                        .filter(|n| !names.contains(n.as_str()))
                        .cloned()
                        .collect();
                    for n in gone {
                        c.nodes.remove(&n);
                        if enabled.lifecycle {
                            nq_list.add(n);
                        }
                    }
                },
                move |node, deleted| {
                    let name = meta::name(&node).unwrap_or_default().to_string();
                    let pods: Vec<PodKey> = {
                        let mut c = lock(&c2);
                        let before = c
                            .nodes
                            .get(&name)
                            .map(|n| !lifecycle::no_execute_taints(n).is_empty())
                            .unwrap_or(false);
                        let after = !deleted && !lifecycle::no_execute_taints(&node).is_empty();
                        if deleted {
                            c.nodes.remove(&name);
                        } else {
                            c.nodes.insert(name.clone(), node);
                        }
                        if before || after {
                            c.by_node
                                .get(&name)
                                .into_iter()
                                .flatten()
                                .cloned()
                                .collect()
                        } else {
                            Vec::new()
                        }
                    };
                    if enabled.lifecycle {
                        nq.add(name);
                    }
                    if enabled.taint_eviction {
                        for p in pods {
                            pq.add(p);
                        }
                    }
                    async {}
                },
            );
            let leases = objects
                .resources
                .builtin("coordination.k8s.io", "v1", "leases");
            let prefix = leases.collection_key(Some(NODE_LEASE_NAMESPACE));
            let c4 = cache.clone();
            let follow_leases = objects.follow_keys(
                &leases,
                move |key| key.starts_with(&prefix),
                move |listed| {
                    let mut c = lock(&c4);
                    c.leases.clear();
                    for l in listed {
                        if meta::namespace(l) == Some(NODE_LEASE_NAMESPACE)
                            && let (Some(n), Some(r)) =
                                (meta::name(l), l["spec"]["renewTime"].as_str())
                        {
                            c.leases.insert(n.to_string(), r.to_string());
                        }
                    }
                },
                move |lease, deleted| {
                    if meta::namespace(&lease) == Some(NODE_LEASE_NAMESPACE) {
                        let name = meta::name(&lease).unwrap_or_default().to_string();
                        let mut c = lock(&c3);
                        match lease["spec"]["renewTime"].as_str().filter(|_| !deleted) {
                            Some(r) => {
                                c.leases.insert(name, r.to_string());
                            }
                            None => {
                                c.leases.remove(&name);
                            }
                        }
                    }
                    async {}
                },
            );
            let pods = objects.resources.builtin("", "v1", "pods");
            let (c5, c6) = (cache.clone(), cache.clone());
            let pq2 = pods_q.clone();
            let ev = Arc::downgrade(&eviction);
            let follow_pods = objects.follow(
                &pods,
                move |_| {
                    let mut c = lock(&c5);
                    c.pods.clear();
                    c.by_node.clear();
                },
                move |pod, deleted| {
                    let key = pod_key(&pod);
                    let pod_copy = if deleted { pod.clone() } else { Value::Null };
                    let tainted = {
                        let mut c = lock(&c6);
                        let tainted = pod["spec"]["nodeName"]
                            .as_str()
                            .and_then(|n| c.nodes.get(n))
                            .is_some_and(|n| !lifecycle::no_execute_taints(n).is_empty());
                        c.set_pod(key.clone(), (!deleted).then_some(pod));
                        tainted
                    };
                    if deleted && let Some(ev) = ev.upgrade() {
                        lock(&ev.deleted)
                            .remove(meta::str_field(&pod_copy, "uid").unwrap_or_default());
                    }
                    if enabled.taint_eviction && (tainted || deleted) {
                        pq2.add(key);
                    }
                    async {}
                },
            );
            let run_lifecycle = async {
                if enabled.lifecycle {
                    super::run(nodes_q.clone(), lifecycle.clone(), 2).await;
                }
            };
            let run_eviction = async {
                if enabled.taint_eviction {
                    super::run(pods_q.clone(), eviction.clone(), 2).await;
                }
            };
            tokio::join!(
                follow_nodes,
                follow_leases,
                follow_pods,
                run_lifecycle,
                run_eviction
            );
        }
    }));
}
