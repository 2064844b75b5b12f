//! kube-scheduler's **default scheduler** (`default-scheduler`), as the
//! user `system:kube-scheduler` with upstream's `system:kube-scheduler`
//! ClusterRole, on the leader. The decisions are
//! [`wasm_apiserver_api::scheduler`]'s; this module keeps what they read
//! and acts on them:
//!
//! * **its cache** of nodes and of the pods bound to them (and the pods
//!   it has assumed: chosen a node for, binding not yet seen), kept from
//!   `Objects::follow` of Nodes and Pods (no list per pod), with the
//!   Services, ReplicaSets, ReplicationControllers and StatefulSets whose
//!   selectors make upstream's default spread constraints, and the
//!   Namespaces' labels (namespace selectors of affinity terms);
//! * **the scheduling queue** (`scheduler::queue`): unbound pods whose
//!   `schedulerName` is `default-scheduler`, that are not terminating and
//!   have no `schedulingGates`;
//!   failed pods wait in backoff or as unschedulable until a cluster event
//!   that could make them fit (a node added, or changed in labels, taints,
//!   `unschedulable` or allocatable; a bound pod deleted or finished; a
//!   pod bound by someone else), or five minutes;
//! * **one scheduling loop** (upstream schedules one pod at a time): the
//!   framework picks a node, the pod is assumed on it at once (the next
//!   pod sees its requests), and the binding (`pods/binding`) runs as a
//!   task of its own; a failed binding forgets the assumption and backs
//!   the pod off. A bound pod gets a `Scheduled` Event; a pod no node fits
//!   a `PodScheduled=False` condition with reason `Unschedulable` and the
//!   framework's message (written when it changes) and a `FailedScheduling`
//!   Event, both from `default-scheduler`.
//!
//! **Wasm plugins** (`SchedulerPlugin` objects, [`scheduler_plugins`])
//! join the cycle after the built-in filters and beside the built-in
//! scores: the built-in filters run under the state's lock, the plugins'
//! calls outside it, the scores under it again.
//!
//! Preemption is not implemented: the message's `preemption:` part is the
//! one upstream's DefaultPreemption writes when it finds no victims.

use super::Client;
use super::leader::Leadership;
use super::lock;
use super::scheduler_plugins::{self, Plugins};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore};
use wasm_apiserver_api::scheduler::queue::SchedulingQueue;
use wasm_apiserver_api::scheduler::{
    self as sched, Cluster, Framework, Labels, NodeInfo, PodInfo, ScheduleError, set_pod_scheduled,
};
use wasm_apiserver_api::selector::{LabelSelector, Requirement};
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_plugins::{SchedulerNode, UserInfo};

/// The scheduler's name (`schedulerName`, Events' reporting component).
pub const NAME: &str = sched::DEFAULT_SCHEDULER;
/// Its user and ClusterRole (upstream's).
pub const USER: &str = "system:kube-scheduler";
/// Its field manager and audit user agent.
pub const MANAGER: &str = "kube-scheduler";

/// Bindings in flight at once.
const BINDINGS: usize = 64;
/// How often pods waiting too long as unschedulable are looked at
/// (upstream's 30 s).
const FLUSH_PERIOD: Duration = Duration::from_secs(30);

/// The identity it runs as.
pub fn user() -> UserInfo {
    UserInfo {
        username: USER.into(),
        groups: vec!["system:authenticated".into()],
        ..Default::default()
    }
}

/// Options (kube-scheduler's configuration).
#[derive(Debug, Clone, Copy, Default)]
pub struct Config {
    /// `percentageOfNodesToScore` (0: adaptive).
    pub percentage_of_nodes_to_score: u32,
}

type PodKey = (String, String);

fn pod_key(pod: &Value) -> PodKey {
    (
        meta::namespace(pod).unwrap_or_default().to_string(),
        meta::name(pod).unwrap_or_default().to_string(),
    )
}

/// Selectors of the objects that make the default spread constraints.
#[derive(Default)]
struct Selectors {
    /// Services: namespace → name → `spec.selector`.
    services: HashMap<String, HashMap<String, Labels>>,
    /// Controllers by (kind, namespace, name) → their selector.
    owners: HashMap<(String, String, String), LabelSelector>,
}

impl Selectors {
    /// Upstream's `helper.DefaultSelector`: the selectors of the Services
    /// selecting the pod merged, and its controller's (ReplicationController,
    /// ReplicaSet or StatefulSet) added.
    fn default_selector(&self, pod: &Value, labels: &Labels) -> Option<LabelSelector> {
        let ns = meta::namespace(pod).unwrap_or_default();
        let mut merged = Labels::new();
        for sel in self.services.get(ns).into_iter().flat_map(|m| m.values()) {
            if !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                merged.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let mut reqs: Vec<Requirement> = merged
            .into_iter()
            .map(|(k, v)| Requirement::Equals(k, v))
            .collect();
        let owner = pod["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["controller"].as_bool() == Some(true));
        if let Some(o) = owner {
            let kind = o["kind"].as_str().unwrap_or_default().to_string();
            let name = o["name"].as_str().unwrap_or_default().to_string();
            if let Some(sel) = self.owners.get(&(kind, ns.to_string(), name)) {
                reqs.extend(sel.0.iter().cloned());
            }
        }
        (!reqs.is_empty()).then_some(LabelSelector(reqs))
    }
}

/// Whether a pod changed in more than its status and bookkeeping
/// (`resourceVersion`, `generation`, `managedFields`).
fn updated(old: &Value, new: &Value) -> bool {
    let strip = |p: &Value| {
        let mut p = p.clone();
        if let Some(o) = p.as_object_mut() {
            o.remove("status");
        }
        if let Some(m) = p["metadata"].as_object_mut() {
            for f in ["resourceVersion", "generation", "managedFields"] {
                m.remove(f);
            }
        }
        p
    };
    strip(old) != strip(new)
}

/// What the followers saw and the queue.
struct State {
    cluster: Cluster,
    framework: Framework,
    queue: SchedulingQueue<PodKey>,
    /// Unbound pods of this scheduler, as last seen.
    pending: HashMap<PodKey, Value>,
    /// Pods assumed on a node, binding in flight or not yet seen: uid → key.
    assumed: HashMap<String, PodKey>,
    selectors: Selectors,
    /// Each node as wasm plugins see it, kept from the watch.
    node_records: HashMap<String, Arc<SchedulerNode>>,
}

impl State {
    /// A pod was seen (or deleted).
    fn pod_changed(&mut self, pod: Value, deleted: bool, now: Instant) -> bool {
        let key = pod_key(&pod);
        let uid = meta::str_field(&pod, "uid").unwrap_or_default().to_string();
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let terminal = wasm_apiserver_api::node::lifecycle::terminated(&pod);
        if deleted || (!node.is_empty() && terminal) {
            // Its resources are free again.
            self.pending.remove(&key);
            self.queue.delete(&key);
            self.assumed.remove(&uid);
            if self.cluster.remove_pod(&uid).is_some() {
                self.queue.move_all(now);
            }
            return true;
        }
        if !node.is_empty() {
            self.pending.remove(&key);
            self.queue.delete(&key);
            let was_assumed = self.assumed.remove(&uid).is_some();
            let was_counted = self.cluster.pod_node(&uid).is_some();
            self.cluster.add_pod(&node, Arc::new(PodInfo::new(&pod)));
            if !was_assumed && !was_counted {
                // Bound by someone else: pods with affinity to it may fit.
                self.queue.move_all(now);
                return true;
            }
            return false;
        }
        if self.assumed.contains_key(&uid) {
            // Our binding is in flight; this is an older view of the pod.
            return false;
        }
        let ours = pod["spec"]["schedulerName"]
            .as_str()
            .is_none_or(|s| s.is_empty() || s == NAME);
        // A pod with scheduling gates waits for them to go (upstream's
        // SchedulingGates PreEnqueue plugin).
        let gated = pod["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty());
        if !ours || gated || pod["metadata"]["deletionTimestamp"].is_string() || terminal {
            self.pending.remove(&key);
            self.queue.delete(&key);
            return false;
        }
        let priority = pod["spec"]["priority"].as_i64().unwrap_or(0);
        let changed = self.pending.get(&key).is_none_or(|old| updated(old, &pod));
        self.pending.insert(key.clone(), pod);
        if !changed {
            // Only its status moved (our own condition, say): no reason to
            // try again (upstream's `isPodUpdated`).
            return false;
        }
        self.queue.add_or_update(key, priority, now);
        true
    }

    /// A node was seen (or deleted): whether pods should be retried.
    fn node_changed(&mut self, node: &Value, deleted: bool, now: Instant) -> bool {
        let name = meta::name(node).unwrap_or_default();
        if deleted {
            self.cluster.remove_node(name);
            self.node_records.remove(name);
            return false;
        }
        self.node_records
            .insert(name.to_string(), Arc::new(SchedulerNode::new(node)));
        let relevant = |n: &NodeInfo| {
            (
                n.labels.clone(),
                n.taints.clone(),
                n.unschedulable,
                n.allocatable.clone(),
            )
        };
        let before = self.cluster.node(name).map(relevant);
        self.cluster.set_node(node);
        let after = self.cluster.node(name).map(relevant);
        if before != after {
            self.queue.move_all(now);
            return true;
        }
        false
    }
}

/// Where a cycle stands after its part under the lock.
enum Half {
    /// Decided (no wasm plugin, or the built-in filters failed the pod).
    Done(Result<sched::ScheduleResult, ScheduleError>),
    /// The wasm plugins' turn: the built-in filters' outcome and the
    /// feasible nodes as plugins see them.
    Plugins(sched::Filtered, HashMap<String, Arc<SchedulerNode>>),
}

/// The scheduler.
struct Scheduler {
    client: Client,
    state: Mutex<State>,
    wake: Notify,
    bindings: Arc<Semaphore>,
    /// The last `FailedScheduling` message recorded per pod, and when:
    /// the same message is recorded again only after
    /// [`REPEAT_EVENT_AFTER`] (upstream's recorder aggregates repeats and
    /// rate-limits each object's events).
    last_failure: Mutex<HashMap<PodKey, (String, Instant)>>,
    stats: Arc<Stats>,
    /// Its wasm plugins (`SchedulerPlugin` objects), and whether those of
    /// the first list are loaded.
    plugins: Arc<Plugins>,
    plugins_synced: Arc<std::sync::atomic::AtomicBool>,
    /// Whether the first lists of nodes and of pods are in.
    synced: [std::sync::atomic::AtomicBool; 2],
}

/// How long an unchanged `FailedScheduling` Event is not repeated.
const REPEAT_EVENT_AFTER: Duration = Duration::from_secs(300);

impl Scheduler {
    /// Schedules the next pod, if one is ready; whether one was.
    async fn schedule_one(self: &Arc<Self>) -> bool {
        let now = Instant::now();
        let active = self.plugins.snapshot();
        let (key, pod, mut info, first_half) = {
            let mut st = lock(&self.state);
            let Some((key, _attempts)) = st.queue.pop(now) else {
                return false;
            };
            let Some(pod) = st.pending.get(&key).cloned() else {
                st.queue.done(&key);
                return true;
            };
            let mut info = PodInfo::new(&pod);
            info.default_spread_selector = st.selectors.default_selector(&pod, &info.labels);
            let State {
                framework,
                cluster,
                node_records,
                ..
            } = &mut *st;
            let half = if active.is_empty() {
                Half::Done(framework.schedule(&info, cluster))
            } else {
                // The built-in filters now; the wasm plugins outside the lock.
                match framework.filter(&info, cluster, true) {
                    Err(e) => Half::Done(Err(e)),
                    Ok(filtered) => {
                        let records = filtered
                            .feasible
                            .iter()
                            .filter_map(|n| node_records.get(n).map(|r| (n.clone(), r.clone())))
                            .collect();
                        Half::Plugins(filtered, records)
                    }
                }
            };
            (key, pod, info, half)
        };
        let result = match first_half {
            Half::Done(r) => r,
            Half::Plugins(filtered, records) => {
                self.with_plugins(&active, &pod, &info, filtered, &records)
                    .await
            }
        };
        let outcome = match &result {
            Ok(_) => 0,
            Err(ScheduleError::Error(_)) => 2,
            Err(_) => 1,
        };
        self.stats.attempts[outcome].fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.state);
        match result {
            Ok(r) => {
                // Assume: the next cycle counts it on its node.
                info.node_name = r.node.clone();
                let uid = info.uid.clone();
                st.cluster.add_pod(&r.node, Arc::new(info));
                st.assumed.insert(uid.clone(), key.clone());
                drop(st);
                let this = self.clone();
                tokio::spawn(async move {
                    let _permit = this.bindings.clone().acquire_owned().await;
                    this.bind(key, uid, pod, r.node).await;
                });
            }
            Err(e) => {
                let unschedulable = !matches!(e, ScheduleError::Error(_));
                st.queue.failed(key, unschedulable, now);
                drop(st);
                let this = self.clone();
                tokio::spawn(async move { this.failed(pod, e).await });
            }
        }
        true
    }

    /// The rest of a cycle with wasm plugins, after the built-in filters:
    /// the plugins' filters, their scores, and the framework's scores.
    async fn with_plugins(
        &self,
        active: &[Arc<scheduler_plugins::Active>],
        pod: &Value,
        info: &PodInfo,
        mut filtered: sched::Filtered,
        records: &HashMap<String, Arc<SchedulerNode>>,
    ) -> Result<sched::ScheduleResult, ScheduleError> {
        let text = scheduler_plugins::plugin_text(pod);
        let uid = info.uid.as_str();
        let states = scheduler_plugins::filter(active, uid, &text, records, &mut filtered)
            .await
            .map_err(ScheduleError::Error)?;
        if filtered.feasible.is_empty() {
            return Err(filtered.into_error(info));
        }
        let extra = if filtered.feasible.len() > 1 {
            scheduler_plugins::score(active, uid, &text, records, &filtered.feasible, &states)
                .await
                .map_err(ScheduleError::Error)?
        } else {
            Vec::new()
        };
        let mut st = lock(&self.state);
        let State {
            framework, cluster, ..
        } = &mut *st;
        framework.score(info, cluster, filtered, &extra)
    }

    async fn bind(&self, key: PodKey, uid: String, pod: Value, node: String) {
        let pods = self.client.objects.resources.builtin("", "v1", "pods");
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": key.1, "namespace": key.0, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let outcome = self
            .client
            .create_subresource(&pods, Some(&key.0), &key.1, "binding", binding)
            .await;
        match outcome {
            Ok(_) => {
                lock(&self.state).queue.done(&key);
                lock(&self.last_failure).remove(&key);
                let message = format!("Successfully assigned {}/{} to {node}", key.0, key.1);
                record(
                    &self.client,
                    &pod,
                    "Normal",
                    "Scheduled",
                    "Binding",
                    &message,
                )
                .await;
            }
            Err(e) => {
                tracing::debug!(pod = %format!("{}/{}", key.0, key.1), error = %e, "binding failed");
                {
                    let mut st = lock(&self.state);
                    if st.assumed.remove(&uid).is_some() {
                        st.cluster.remove_pod(&uid);
                    }
                    match e {
                        // Gone, or bound by someone else: nothing to retry.
                        ApiError::NotFound(_) | ApiError::Conflict(..) => st.queue.done(&key),
                        _ => st.queue.failed(key.clone(), false, Instant::now()),
                    }
                }
                self.wake.notify_one();
                if !matches!(e, ApiError::NotFound(_)) {
                    let message = format!("Binding rejected: {e}");
                    record(
                        &self.client,
                        &pod,
                        "Warning",
                        "FailedScheduling",
                        "Scheduling",
                        &message,
                    )
                    .await;
                }
            }
        }
    }

    /// A pod no node fits: the `PodScheduled` condition (when it changes)
    /// and a `FailedScheduling` Event.
    async fn failed(&self, pod: Value, e: ScheduleError) {
        let message = e.message();
        let reason = match e {
            ScheduleError::Error(_) => "SchedulerError",
            _ => "Unschedulable",
        };
        let key = pod_key(&pod);
        tracing::debug!(pod = %format!("{}/{}", key.0, key.1), %message, "unable to schedule pod");
        let repeat = {
            let mut last = lock(&self.last_failure);
            let now = Instant::now();
            let repeat = last.get(&key).is_some_and(|(m, at)| {
                *m == message && now.duration_since(*at) < REPEAT_EVENT_AFTER
            });
            if !repeat {
                last.insert(key.clone(), (message.clone(), now));
            }
            repeat
        };
        if !repeat {
            record(
                &self.client,
                &pod,
                "Warning",
                "FailedScheduling",
                "Scheduling",
                &message,
            )
            .await;
        }
        if scheduled_condition(&pod).is_some_and(|c| {
            c["status"] == "False" && c["reason"] == reason && c["message"] == message.as_str()
        }) {
            return;
        }
        let pods = self.client.objects.resources.builtin("", "v1", "pods");
        let (ns, name) = pod_key(&pod);
        let uid = meta::str_field(&pod, "uid").unwrap_or_default().to_string();
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let written = self
            .client
            .update(&pods, Some(&ns), &name, Some("status"), |cur| {
                if meta::str_field(cur, "uid") != Some(uid.as_str()) {
                    return Err(ApiError::Conflict(
                        wasm_apiserver_api::error::Target::new("", "pods", &name),
                        "the pod was replaced".into(),
                    ));
                }
                let mut new = cur.clone();
                set_pod_scheduled(&mut new, "False", Some((reason, &message)), &now);
                Ok(new)
            })
            .await;
        if let Err(e) = written {
            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not update pod condition");
        }
    }
}

/// The pod's `PodScheduled` condition.
fn scheduled_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodScheduled")
}

/// Records a core/v1 Event about `pod` from `default-scheduler`, as
/// kube-scheduler's recorder (its `reportingController` and
/// `source.component`). Failures are logged.
async fn record(client: &Client, pod: &Value, kind: &str, reason: &str, action: &str, note: &str) {
    let Some(info) = client.objects.resources.get("", "v1", "events") else {
        return;
    };
    let (ns, name) = pod_key(pod);
    let now = chrono::Utc::now();
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{name}."), "namespace": ns},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "namespace": ns,
            "uid": meta::str_field(pod, "uid"),
            "resourceVersion": meta::str_field(pod, "resourceVersion"),
        },
        "reason": reason,
        "message": note,
        "type": kind,
        "action": action,
        "source": {"component": NAME},
        "firstTimestamp": now.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "lastTimestamp": now.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "eventTime": now.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        "count": 1,
        "reportingComponent": NAME,
        "reportingInstance": format!("{NAME}-{}", super::hostname()),
    });
    if let Err(e) = client.create(&info, Some(&ns), event).await {
        tracing::debug!(error = %e, "could not record scheduler event");
    }
}

/// Follows the objects whose selectors make default spread constraints.
async fn follow_selectors(this: Arc<Scheduler>, group: &'static str, plural: &'static str) {
    let objects = this.client.objects.clone();
    let Some(info) = objects.resources.get(group, "v1", plural) else {
        return;
    };
    let kind = info.kind.clone();
    let (reset, change) = (this.clone(), this.clone());
    let kind2 = kind.clone();
    objects
        .follow(
            &info,
            move |_| {
                let mut st = lock(&reset.state);
                if plural == "services" {
                    st.selectors.services.clear();
                } else {
                    st.selectors.owners.retain(|(k, _, _), _| *k != kind2);
                }
            },
            move |obj, deleted| {
                let ns = meta::namespace(&obj).unwrap_or_default().to_string();
                let name = meta::name(&obj).unwrap_or_default().to_string();
                let mut st = lock(&change.state);
                if plural == "services" {
                    let by_ns = st.selectors.services.entry(ns).or_default();
                    if deleted {
                        by_ns.remove(&name);
                    } else {
                        let sel: Labels = obj["spec"]["selector"]
                            .as_object()
                            .into_iter()
                            .flatten()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                            .collect();
                        by_ns.insert(name, sel);
                    }
                } else {
                    let key = (kind.clone(), ns, name);
                    let sel = if plural == "replicationcontrollers" {
                        sched::label_selector(&json!({"matchLabels": obj["spec"]["selector"]}))
                    } else {
                        sched::label_selector(&obj["spec"]["selector"])
                    };
                    match sel {
                        Some(sel) if !deleted => {
                            st.selectors.owners.insert(key, sel);
                        }
                        _ => {
                            st.selectors.owners.remove(&key);
                        }
                    }
                }
                async {}
            },
        )
        .await;
}

/// Upstream's scheduler metrics, for `/metrics`:
/// `scheduler_schedule_attempts_total{profile,result}` and
/// `scheduler_pending_pods{queue}`.
#[derive(Default)]
struct Stats {
    /// scheduled, unschedulable, error.
    attempts: [AtomicU64; 3],
    /// active, backoff, unschedulable.
    pending: [AtomicU64; 3],
}

impl Stats {
    fn set_pending(&self, (active, backoff, unschedulable): (usize, usize, usize)) {
        for (slot, n) in self.pending.iter().zip([active, backoff, unschedulable]) {
            slot.store(n as u64, Ordering::Relaxed);
        }
    }
}

impl super::RenderMetrics for Stats {
    fn name(&self) -> &str {
        NAME
    }

    fn render(&self, out: &mut String) {
        for (result, n) in ["scheduled", "unschedulable", "error"]
            .iter()
            .zip(&self.attempts)
        {
            out.push_str(&format!(
                "scheduler_schedule_attempts_total{{profile=\"{NAME}\",result=\"{result}\"}} {}\n",
                n.load(Ordering::Relaxed)
            ));
        }
        for (queue, n) in ["active", "backoff", "unschedulable"]
            .iter()
            .zip(&self.pending)
        {
            out.push_str(&format!(
                "scheduler_pending_pods{{queue=\"{queue}\"}} {}\n",
                n.load(Ordering::Relaxed)
            ));
        }
    }
}

/// Runs the scheduler while this replica leads.
pub fn spawn(client: Client, config: Config, leadership: Leadership, metrics: &super::Metrics) {
    let stats = Arc::new(Stats::default());
    metrics.register(stats.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let mut framework = Framework::default_profile();
        framework.percentage_of_nodes_to_score = config.percentage_of_nodes_to_score;
        let this = Arc::new(Scheduler {
            client: client.clone(),
            state: Mutex::new(State {
                cluster: Cluster::default(),
                framework,
                queue: SchedulingQueue::default(),
                pending: HashMap::new(),
                assumed: HashMap::new(),
                selectors: Selectors::default(),
                node_records: HashMap::new(),
            }),
            wake: Notify::new(),
            bindings: Arc::new(Semaphore::new(BINDINGS)),
            last_failure: Mutex::new(HashMap::new()),
            stats: stats.clone(),
            plugins: Arc::new(Plugins::default()),
            plugins_synced: Default::default(),
            synced: Default::default(),
        });
        run(this)
    }));
}

async fn run(this: Arc<Scheduler>) {
    let objects = this.client.objects.clone();
    let nodes = objects.resources.builtin("", "v1", "nodes");
    let pods = objects.resources.builtin("", "v1", "pods");
    let namespaces = objects.resources.builtin("", "v1", "namespaces");
    let (n1, n2) = (this.clone(), this.clone());
    let follow_nodes = objects.follow(
        &nodes,
        move |listed| {
            let names: HashSet<&str> = listed.iter().filter_map(meta::name).collect();
            let mut st = lock(&n1.state);
            let gone: Vec<String> = st
                .cluster
                .nodes()
                .iter()
                .filter(|n| !names.contains(n.name.as_str()))
                .map(|n| n.name.clone())
                .collect();
            for n in gone {
                st.cluster.remove_node(&n);
                st.node_records.remove(&n);
            }
            // The listed nodes now, so that scheduling starts with them.
            let now = Instant::now();
            for n in listed {
                st.node_changed(n, false, now);
            }
            n1.synced[0].store(true, Ordering::Relaxed);
        },
        move |node, deleted| {
            if lock(&n2.state).node_changed(&node, deleted, Instant::now()) {
                n2.wake.notify_one();
            }
            async {}
        },
    );
    let (p1, p2) = (this.clone(), this.clone());
    let follow_pods = objects.follow(
        &pods,
        move |listed| {
            // Pods gone while the watch was down.
            let uids: HashSet<&str> = listed
                .iter()
                .filter_map(|p| meta::str_field(p, "uid"))
                .collect();
            let keys: HashSet<PodKey> = listed.iter().map(pod_key).collect();
            let mut st = lock(&p1.state);
            let gone: Vec<String> = st
                .cluster
                .nodes()
                .iter()
                .flat_map(|n| n.pods.iter())
                .filter(|p| !uids.contains(p.uid.as_str()) && !st.assumed.contains_key(&p.uid))
                .map(|p| p.uid.clone())
                .collect();
            for uid in gone {
                st.cluster.remove_pod(&uid);
            }
            let stale: Vec<PodKey> = st
                .pending
                .keys()
                .filter(|k| !keys.contains(*k))
                .cloned()
                .collect();
            for k in stale {
                st.pending.remove(&k);
                st.queue.delete(&k);
            }
            let now = Instant::now();
            for p in listed {
                st.pod_changed(p.clone(), false, now);
            }
            p1.synced[1].store(true, Ordering::Relaxed);
            p1.wake.notify_one();
        },
        move |pod, deleted| {
            if lock(&p2.state).pod_changed(pod, deleted, Instant::now()) {
                p2.wake.notify_one();
            }
            async {}
        },
    );
    let ns = this.clone();
    let follow_namespaces = objects.follow(
        &namespaces,
        |_| {},
        move |obj, deleted| {
            let name = meta::name(&obj).unwrap_or_default().to_string();
            let mut st = lock(&ns.state);
            if deleted {
                st.cluster.namespace_labels.remove(&name);
            } else {
                st.cluster.namespace_labels.insert(name, meta::labels(&obj));
            }
            async {}
        },
    );
    let selectors = futures::future::join4(
        follow_selectors(this.clone(), "", "services"),
        follow_selectors(this.clone(), "", "replicationcontrollers"),
        follow_selectors(this.clone(), "apps", "replicasets"),
        follow_selectors(this.clone(), "apps", "statefulsets"),
    );
    let plugins = scheduler_plugins::manage(
        this.client.clone(),
        NAME,
        this.plugins.clone(),
        this.plugins_synced.clone(),
    );
    let flush = {
        let this = this.clone();
        async move {
            let mut tick = tokio::time::interval(FLUSH_PERIOD);
            loop {
                tick.tick().await;
                let pending: HashSet<PodKey> = {
                    let mut st = lock(&this.state);
                    st.queue.flush_unschedulable_leftover(Instant::now());
                    st.pending.keys().cloned().collect()
                };
                // Forget the Events of pods no longer waiting.
                lock(&this.last_failure).retain(|k, _| pending.contains(k));
                this.wake.notify_one();
            }
        }
    };
    let schedule = {
        let this = this.clone();
        async move {
            // Upstream waits for its informers' caches to sync; a new
            // leader also for its wasm plugins to be loaded.
            while !this.synced.iter().all(|s| s.load(Ordering::Relaxed))
                || !this.plugins_synced.load(Ordering::Relaxed)
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            loop {
                // A burst at most, then let the followers in.
                let mut n = 0;
                while n < 64 && this.schedule_one().await {
                    n += 1;
                }
                if n > 0 {
                    tokio::task::yield_now().await;
                    continue;
                }
                let next = {
                    let st = lock(&this.state);
                    this.stats.set_pending(st.queue.lengths());
                    st.queue.next_backoff_expiry()
                };
                let wait = next
                    .map(|t| t.saturating_duration_since(Instant::now()))
                    .unwrap_or(Duration::from_secs(1))
                    .min(Duration::from_secs(1));
                let _ = tokio::time::timeout(wait, this.wake.notified()).await;
            }
        }
    };
    futures::future::join5(
        follow_nodes,
        follow_pods,
        follow_namespaces,
        selectors,
        futures::future::join3(flush, schedule, plugins),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}")},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {},
        })
    }

    fn state() -> State {
        State {
            cluster: Cluster::default(),
            framework: Framework::default_profile(),
            queue: SchedulingQueue::default(),
            pending: HashMap::new(),
            assumed: HashMap::new(),
            selectors: Selectors::default(),
            node_records: HashMap::new(),
        }
    }

    #[test]
    fn only_our_unbound_live_pods_are_queued() {
        let mut st = state();
        let now = Instant::now();
        st.pod_changed(pod("a", ""), false, now);
        let mut other = pod("b", "");
        other["spec"]["schedulerName"] = json!("my-scheduler");
        st.pod_changed(other, false, now);
        let mut dying = pod("c", "");
        dying["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        st.pod_changed(dying, false, now);
        st.pod_changed(pod("d", "n1"), false, now);
        let mut gated = pod("e", "");
        gated["spec"]["schedulingGates"] = json!([{"name": "wait"}]);
        st.pod_changed(gated.clone(), false, now);
        assert_eq!(st.queue.lengths(), (1, 0, 0));
        gated["spec"]["schedulingGates"] = json!([]);
        st.pod_changed(gated, false, now);
        assert_eq!(st.queue.lengths(), (2, 0, 0));
        st.queue.delete(&("ns".to_string(), "e".to_string()));
        assert_eq!(st.cluster.pod_count(), 1);
        // Finished pods free their node.
        let mut done = pod("d", "n1");
        done["status"]["phase"] = json!("Succeeded");
        st.pod_changed(done, false, now);
        assert_eq!(st.cluster.pod_count(), 0);
    }

    #[test]
    fn status_changes_do_not_requeue() {
        let mut st = state();
        let now = Instant::now();
        st.pod_changed(pod("a", ""), false, now);
        let (k, _) = st.queue.pop(now).unwrap();
        st.queue.failed(k, true, now);
        let mut with_status = pod("a", "");
        with_status["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False"}]);
        with_status["metadata"]["resourceVersion"] = json!("9");
        assert!(!st.pod_changed(with_status.clone(), false, now));
        assert_eq!(st.queue.lengths(), (0, 0, 1));
        with_status["metadata"]["labels"] = json!({"x": "y"});
        assert!(st.pod_changed(with_status, false, now));
        // Still within its backoff.
        assert_eq!(st.queue.lengths(), (0, 1, 0));
    }

    #[test]
    fn default_selector_merges_services_and_owner() {
        let mut s = Selectors::default();
        s.services.entry("ns".into()).or_default().insert(
            "svc".into(),
            [("app".to_string(), "web".to_string())].into(),
        );
        s.owners.insert(
            ("ReplicaSet".into(), "ns".into(), "web-1".into()),
            sched::label_selector(&json!({"matchLabels": {"pod-template-hash": "1"}})).unwrap(),
        );
        let p = json!({"metadata": {"namespace": "ns", "labels": {"app": "web", "pod-template-hash": "1"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1", "controller": true}]}});
        let labels = meta::labels(&p);
        let sel = s.default_selector(&p, &labels).unwrap();
        assert_eq!(sel.0.len(), 2);
        assert!(sel.matches(&labels));
        let lone = json!({"metadata": {"namespace": "ns", "labels": {"x": "y"}}});
        assert!(s.default_selector(&lone, &meta::labels(&lone)).is_none());
    }

    #[test]
    fn scheduled_condition_keeps_its_transition_time() {
        let mut p = pod("a", "");
        set_pod_scheduled(&mut p, "False", Some(("Unschedulable", "m1")), "t1");
        set_pod_scheduled(&mut p, "False", Some(("Unschedulable", "m2")), "t2");
        let c = &p["status"]["conditions"][0];
        assert_eq!(c["message"], "m2");
        assert_eq!(c["lastTransitionTime"], "t1");
        assert_eq!(p["status"]["conditions"].as_array().unwrap().len(), 1);
        set_pod_scheduled(&mut p, "True", None, "t3");
        let c = &p["status"]["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["lastTransitionTime"].as_str()),
            (Some("True"), Some("t3"))
        );
        assert!(c.get("message").is_none());
    }
}
