//! kube-controller-manager's **DaemonSet controller**
//! (`daemonset-controller`, as the ServiceAccount `daemon-set-controller`
//! with upstream's role): one pod per eligible node, placed by the
//! scheduler through a required affinity on the node's name, with what
//! `wasm_apiserver_api::daemonset` decides.
//!
//! Keys are DaemonSets (`namespace`, `name`), queued when the DaemonSet
//! changes, when a pod it controls changes, and (every DaemonSet) when a
//! node is added or its labels, taints or `unschedulable` change. A sync
//! reads the DaemonSet and its pods through the client (a fresh list: so
//! nothing is made twice after a restart or a leader change), adopts
//! orphans its selector matches and releases pods it no longer selects
//! (upstream's `ClaimPods`), records the template as a ControllerRevision
//! (`<name>-<hash>`, `revision` numbers as upstream, so `kubectl rollout
//! history` and `undo` work; `revisionHistoryLimit` old ones kept), creates
//! missing pods in slow-start batches (1, 2, 4, ... up to 250 a sync),
//! deletes what the plan says (a failed pod with a per-node back-off of
//! 1 s doubling to 15 min, so a node that keeps failing it is not a hot
//! loop), and writes the status when it changed.

use super::history::{History, hash_label};
use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key};
use crate::options::{ListParams, Preconditions};
use crate::resources::Resource;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasm_apiserver_api::daemonset as ds_logic;
use wasm_apiserver_api::scheduler::{NodeInfo, label_selector};
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_api::{history, replicas};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its `--controllers` name.
pub const CONTROLLER: &str = "daemonset-controller";
/// Its identity (upstream's ServiceAccount and role name).
pub const NAME: &str = "daemon-set-controller";

type Key = (String, String);

/// The DaemonSet that controls `pod`, if one does.
fn controller_of(pod: &Value) -> Option<(&str, &str)> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .filter(|r| r["kind"] == "DaemonSet")
        .and_then(|r| Some((r["name"].as_str()?, r["uid"].as_str()?)))
}

/// What about a node the controller cares for: a change elsewhere (its
/// status heartbeats) queues nothing.
fn node_view(node: &Value) -> Value {
    json!([
        node["metadata"]["labels"],
        node["spec"]["taints"],
        node["spec"]["unschedulable"]
    ])
}

struct DaemonSets {
    client: Client,
    nodes: Arc<Mutex<HashMap<String, Value>>>,
    info: Arc<Resource>,
    pods: Arc<Resource>,
    revisions: Arc<Resource>,
    /// Per (DaemonSet, node): when a failed pod may next be deleted, and
    /// the back-off after that.
    backoff: Mutex<HashMap<(Key, String), (Instant, Duration)>>,
}

const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

impl DaemonSets {
    /// Upstream's `ClaimPods`: pods it controls that its selector still
    /// matches, orphans it matches (adopted), and released ones.
    async fn claim(&self, ds: &Value) -> Result<Vec<Value>> {
        let ns = meta::namespace(ds).unwrap_or_default();
        let uid = meta::str_field(ds, "uid").unwrap_or_default();
        let Some(selector) = label_selector(&ds["spec"]["selector"]).filter(|s| !s.is_empty())
        else {
            return Ok(Vec::new());
        };
        let all = self
            .client
            .list(&self.pods, Some(ns), &ListParams::default())
            .await?
            .items;
        let mut owned = Vec::new();
        for pod in all {
            let matches = selector.matches_object(&pod);
            let name = meta::name(&pod).unwrap_or_default().to_string();
            match controller_of(&pod) {
                Some((_, owner)) if owner == uid => {
                    if matches {
                        owned.push(pod);
                    } else if meta::str_field(&pod, "deletionTimestamp").is_none() {
                        self.set_owner(ns, &name, &pod, None).await?;
                    }
                }
                None if matches
                    && meta::str_field(&pod, "deletionTimestamp").is_none()
                    && meta::str_field(ds, "deletionTimestamp").is_none() =>
                {
                    if let Some(p) = self.set_owner(ns, &name, &pod, Some(ds)).await? {
                        owned.push(p);
                    }
                }
                _ => {}
            }
        }
        Ok(owned)
    }

    /// Adopts `pod` for `ds` (a controller reference), or releases it
    /// (`None`: the reference to this DaemonSet removed).
    async fn set_owner(
        &self,
        ns: &str,
        name: &str,
        pod: &Value,
        ds: Option<&Value>,
    ) -> Result<Option<Value>> {
        let mut refs: Vec<Value> = pod["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match ds {
            Some(ds) => refs.push(json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": ds["metadata"]["name"], "uid": ds["metadata"]["uid"],
                "controller": true, "blockOwnerDeletion": true,
            })),
            None => refs.retain(|r| !(r["controller"] == true && r["kind"] == "DaemonSet")),
        }
        let doc = json!({"metadata": {
            "ownerReferences": refs,
            "uid": pod["metadata"]["uid"],
            "resourceVersion": pod["metadata"]["resourceVersion"],
        }});
        match self
            .client
            .patch(
                &self.pods,
                Some(ns),
                name,
                None,
                wasm_apiserver_api::patch::PatchType::Merge,
                &doc,
            )
            .await
        {
            Ok(p) => Ok(Some(p)),
            // Changed or gone meanwhile: the next sync sees it again.
            Err(ApiError::NotFound(_) | ApiError::Conflict(..)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The ControllerRevision of the current template, made (or moved to
    /// the newest revision number) as needed; old ones beyond the history
    /// limit that no pod uses are deleted.
    async fn revision(&self, ds: &Value, pods: &[Value]) -> Result<String> {
        let ns = meta::namespace(ds).unwrap_or_default();
        let uid = meta::str_field(ds, "uid").unwrap_or_default();
        let template = &ds["spec"]["template"];
        let hash = history::hash(template, ds["status"]["collisionCount"].as_i64());
        let store = History {
            client: &self.client,
            info: &self.revisions,
        };
        let revisions = store
            .list(ns, |r| {
                r["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|o| o.iter().any(|o| o["uid"] == uid))
            })
            .await?;
        let next = history::next_number(&revisions);
        match revisions.iter().find(|r| hash_label(r) == hash) {
            Some(r) if history::number(r) == next - 1 => {}
            Some(r) => {
                store
                    .renumber(ns, meta::name(r).unwrap_or_default(), next)
                    .await?;
            }
            None => {
                let revision = history::new_revision(
                    ds,
                    replicas::controller_ref(ds, "apps/v1", "DaemonSet"),
                    &template["metadata"]["labels"],
                    history::template_patch(template),
                    next,
                    &hash,
                );
                store.create(ns, revision).await?;
            }
        }
        // History: keep `revisionHistoryLimit` old revisions besides the
        // current one and those live pods were made from.
        let limit = ds["spec"]["revisionHistoryLimit"].as_i64().unwrap_or(10);
        let in_use: Vec<&str> = pods.iter().map(hash_label).collect();
        store
            .truncate(
                ns,
                &revisions,
                |r| hash_label(r) == hash || in_use.contains(&hash_label(r)),
                limit.max(0),
            )
            .await?;
        Ok(hash)
    }

    /// Whether the failed pod on `node` may be deleted now; if not, how
    /// long until it may.
    fn failed_pod_wait(&self, key: &Key, node: &str) -> Option<Duration> {
        let mut b = lock(&self.backoff);
        let now = Instant::now();
        match b.get_mut(&(key.clone(), node.to_string())) {
            Some((next, _)) if *next > now => Some(*next - now),
            Some((next, step)) => {
                *step = (*step * 2).min(BACKOFF_MAX);
                *next = now + *step;
                None
            }
            None => {
                b.insert(
                    (key.clone(), node.to_string()),
                    (now + BACKOFF_START, BACKOFF_START),
                );
                None
            }
        }
    }
}

#[async_trait::async_trait]
impl Reconcile for DaemonSets {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        let ds = match self.client.get(&self.info, Some(ns), name).await {
            Ok(ds) => ds,
            Err(ApiError::NotFound(_)) => {
                lock(&self.backoff).retain(|(k, _), _| k != key);
                return Ok(Action::Done);
            }
            Err(e) => return Err(e),
        };
        if meta::str_field(&ds, "deletionTimestamp").is_some() {
            return Ok(Action::Done);
        }
        let pods = self.claim(&ds).await?;
        let hash = self.revision(&ds, &pods).await?;
        let nodes: Vec<NodeInfo> = lock(&self.nodes).values().map(NodeInfo::new).collect();
        let now = chrono::Utc::now();
        let plan = ds_logic::plan(&ds, &hash, &nodes, &pods, now);
        let mut requeue: Option<Duration> = None;
        let mut soon = |d: Duration| requeue = Some(requeue.map_or(d, |r| r.min(d)));

        // Deletes first (a node's old pod makes room for its new one).
        for pod_name in &plan.delete {
            let pod = pods
                .iter()
                .find(|p| meta::name(p) == Some(pod_name.as_str()));
            if plan.failed.contains(pod_name) {
                let node = pod
                    .and_then(ds_logic::target_node)
                    .unwrap_or_default()
                    .to_string();
                if let Some(wait) = self.failed_pod_wait(key, &node) {
                    soon(wait);
                    continue;
                }
                let msg = format!(
                    "Found failed daemon pod {ns}/{pod_name} on node {node}, will try to kill it"
                );
                self.client
                    .event(&ds, "Warning", "FailedDaemonPod", &msg)
                    .await;
            }
            let pre = Preconditions {
                uid: pod
                    .and_then(|p| meta::str_field(p, "uid"))
                    .map(String::from),
                ..Default::default()
            };
            match self
                .client
                .delete(&self.pods, Some(ns), pod_name, &pre)
                .await
            {
                Ok(_) => {
                    self.client
                        .event(
                            &ds,
                            "Normal",
                            "SuccessfulDelete",
                            &format!("Deleted pod: {pod_name}"),
                        )
                        .await;
                }
                Err(ApiError::NotFound(_) | ApiError::Conflict(..)) => {}
                Err(e) => return Err(e),
            }
        }
        // Creates in slow-start batches: a failure stops the rest.
        let mut batch = 1;
        let mut todo = plan.create.iter();
        'create: loop {
            for _ in 0..batch {
                let Some(node) = todo.next() else {
                    break 'create;
                };
                let pod = ds_logic::new_pod(&ds, node, &hash);
                match self.client.create(&self.pods, Some(ns), pod).await {
                    Ok(created) => {
                        let msg =
                            format!("Created pod: {}", meta::name(&created).unwrap_or_default());
                        self.client
                            .event(&ds, "Normal", "SuccessfulCreate", &msg)
                            .await;
                    }
                    Err(e) => {
                        let msg = format!("Error creating: {e}");
                        self.client
                            .event(&ds, "Warning", "FailedCreate", &msg)
                            .await;
                        return Err(e);
                    }
                }
            }
            batch *= 2;
        }
        if plan.create.len() == ds_logic::BURST {
            soon(Duration::ZERO);
        }
        // Status, when it says something new.
        let status = &plan.status;
        let changed = status
            .as_object()
            .is_some_and(|s| s.iter().any(|(k, v)| &ds["status"][k] != v));
        if changed {
            let status = status.clone();
            match self
                .client
                .update(&self.info, Some(ns), name, Some("status"), move |cur| {
                    let mut new = cur.clone();
                    for (k, v) in status.as_object().into_iter().flatten() {
                        new["status"][k] = v.clone();
                    }
                    Ok(new)
                })
                .await
            {
                Ok(_) | Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // Pods ready but not yet available for `minReadySeconds`.
        let min_ready = ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        if min_ready > 0 && plan.status["numberReady"] != plan.status["numberAvailable"] {
            soon(Duration::from_secs(1));
        }
        Ok(match requeue {
            Some(d) => Action::RequeueAfter(d),
            None => Action::Done,
        })
    }
}

/// Runs the controller while this replica leads.
pub fn spawn(client: Client, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new("daemonset");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let objects = client.objects.clone();
        let nodes: Arc<Mutex<HashMap<String, Value>>> = Default::default();
        let controller = Arc::new(DaemonSets {
            info: objects.resources.builtin("apps", "v1", "daemonsets"),
            pods: objects.resources.builtin("", "v1", "pods"),
            revisions: objects
                .resources
                .builtin("apps", "v1", "controllerrevisions"),
            client: client.clone(),
            nodes: nodes.clone(),
            backoff: Default::default(),
        });
        let queue = queue.clone();
        async move {
            let sets = objects.resources.builtin("apps", "v1", "daemonsets");
            // Every DaemonSet, for a node change.
            let known: Arc<Mutex<Vec<Key>>> = Default::default();
            let (k1, k2, q1) = (known.clone(), known.clone(), queue.clone());
            let follow_sets = objects.follow(
                &sets,
                move |listed| *lock(&k1) = listed.iter().map(namespaced_key).collect(),
                move |ds, deleted| {
                    let key = namespaced_key(&ds);
                    {
                        let mut k = lock(&k2);
                        k.retain(|x| x != &key);
                        if !deleted {
                            k.push(key.clone());
                        }
                    }
                    q1.add(key);
                    async {}
                },
            );
            let pods = objects.resources.builtin("", "v1", "pods");
            let q2 = queue.clone();
            let follow_pods = objects.follow(
                &pods,
                |_| {},
                move |pod, _deleted| {
                    if let Some((owner, _)) = controller_of(&pod) {
                        q2.add((
                            meta::namespace(&pod).unwrap_or_default().to_string(),
                            owner.to_string(),
                        ));
                    }
                    async {}
                },
            );
            let node_info = objects.resources.builtin("", "v1", "nodes");
            let (n1, n2, k3, q3) = (nodes.clone(), nodes.clone(), known.clone(), queue.clone());
            let follow_nodes = objects.follow(
                &node_info,
                move |_| lock(&n1).clear(),
                move |node, deleted| {
                    let name = meta::name(&node).unwrap_or_default().to_string();
                    let changed = {
                        let mut n = lock(&n2);
                        let before = n.get(&name).map(node_view);
                        let after = (!deleted).then(|| node_view(&node));
                        if deleted {
                            n.remove(&name);
                        } else {
                            n.insert(name, node);
                        }
                        before != after
                    };
                    if changed {
                        for key in lock(&k3).iter() {
                            q3.add(key.clone());
                        }
                    }
                    async {}
                },
            );
            tokio::join!(
                follow_sets,
                follow_pods,
                follow_nodes,
                super::run(queue.clone(), controller, 2)
            );
        }
    }));
}
