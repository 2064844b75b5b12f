//! kube-controller-manager's **disruption controller**
//! (`disruption-controller`, upstream's ServiceAccount and role): every
//! PodDisruptionBudget's status (`currentHealthy`, `desiredHealthy`,
//! `expectedPods`, `disruptionsAllowed`, the `DisruptionAllowed`
//! condition, `disruptedPods` pruned), as `wasm_apiserver_api::disruption`
//! computes it. The eviction subresource spends what it allows.
//!
//! Keys are budgets (`namespace`, `name`), queued when the budget changes
//! and when a pod of its namespace that its selector matches (before or
//! after) changes in what counts (readiness, deletion, labels, owner); a
//! budget with pods in `disruptedPods` is looked at again when the first
//! entry expires. Pods come from a cache kept by a follower; the scale of
//! their controllers (for percentages and `maxUnavailable`) is read through
//! the client: a ReplicaSet's Deployment, or the ReplicaSet, StatefulSet or
//! ReplicationController itself.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key};
use crate::resources::Resource;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasm_apiserver_api::disruption::{self, Expected};
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its `--controllers` name and identity.
pub const NAME: &str = "disruption-controller";

type Key = (String, String);

/// Whether a budget selects a pod (a null or empty selector: none, as the
/// eviction subresource decides).
fn selects(pdb: &Value, pod: &Value) -> bool {
    let selector = &pdb["spec"]["selector"];
    !crate::workloads::selector_is_empty(selector)
        && crate::workloads::selects(selector, &pod["metadata"]["labels"])
}

/// What about a pod a budget counts.
fn pod_view(pod: &Value) -> Value {
    json!([
        pod["metadata"]["labels"],
        pod["metadata"]["deletionTimestamp"],
        pod["metadata"]["ownerReferences"],
        pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .map(|c| c["status"].clone()),
    ])
}

#[derive(Default)]
struct Cache {
    budgets: HashMap<Key, Value>,
    /// Namespace → pod name → pod.
    pods: HashMap<String, BTreeMap<String, Value>>,
}

struct Disruption {
    client: Client,
    cache: Arc<Mutex<Cache>>,
    info: Arc<Resource>,
}

impl Disruption {
    /// The scale of `owner` (a pod's controller reference), keyed by the
    /// uid of what holds the scale, or why there is none.
    async fn scale(&self, ns: &str, owner: &Value) -> Result<Option<(String, i64)>> {
        let objects = &self.client.objects.resources;
        let name = owner["name"].as_str().unwrap_or_default();
        let get = |group: &str, resource: &str| objects.builtin(group, "v1", resource);
        let replicas = |o: &Value| o["spec"]["replicas"].as_i64().unwrap_or(1);
        let uid = |o: &Value| meta::str_field(o, "uid").unwrap_or_default().to_string();
        let found = match owner["kind"].as_str().unwrap_or_default() {
            "ReplicaSet" => {
                let rs = self
                    .client
                    .get(&get("apps", "replicasets"), Some(ns), name)
                    .await?;
                let deployment = rs["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|r| r["controller"] == true && r["kind"] == "Deployment")
                    .and_then(|r| r["name"].as_str())
                    .map(String::from);
                match deployment {
                    Some(d) => {
                        let d = self
                            .client
                            .get(&get("apps", "deployments"), Some(ns), &d)
                            .await?;
                        Some((uid(&d), replicas(&d)))
                    }
                    None => Some((uid(&rs), replicas(&rs))),
                }
            }
            "StatefulSet" => {
                let s = self
                    .client
                    .get(&get("apps", "statefulsets"), Some(ns), name)
                    .await?;
                Some((uid(&s), replicas(&s)))
            }
            "ReplicationController" => {
                let rc = self
                    .client
                    .get(&get("", "replicationcontrollers"), Some(ns), name)
                    .await?;
                Some((uid(&rc), replicas(&rc)))
            }
            _ => None,
        };
        Ok(found)
    }

    /// The expected pods from the pods' controllers, or the message of
    /// upstream's failure when a pod has none this controller can scale.
    async fn expected_from_scale(
        &self,
        ns: &str,
        pods: &[&Value],
    ) -> Result<std::result::Result<i64, String>> {
        let mut scales: BTreeMap<String, i64> = BTreeMap::new();
        for pod in pods {
            let name = meta::name(pod).unwrap_or_default();
            let owner = pod["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["controller"] == true);
            let Some(owner) = owner else {
                return Ok(Err(format!("found no controller ref for pod {name:?}")));
            };
            match self.scale(ns, owner).await {
                Ok(Some((uid, n))) => {
                    scales.insert(uid, n);
                }
                Ok(None) | Err(ApiError::NotFound(_)) => {
                    return Ok(Err(format!("found no controllers for pod {name:?}")));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Ok(scales.values().sum()))
    }
}

#[async_trait::async_trait]
impl Reconcile for Disruption {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        let pdb = match self.client.get(&self.info, Some(ns), name).await {
            Ok(p) => p,
            Err(ApiError::NotFound(_)) => return Ok(Action::Done),
            Err(e) => return Err(e),
        };
        if meta::str_field(&pdb, "deletionTimestamp").is_some() {
            return Ok(Action::Done);
        }
        let pods: Vec<Value> = lock(&self.cache)
            .pods
            .get(ns)
            .into_iter()
            .flat_map(|m| m.values())
            .filter(|p| selects(&pdb, p))
            .cloned()
            .collect();
        let refs: Vec<&Value> = pods.iter().collect();
        let now = chrono::Utc::now();
        let stamp = now.format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let expected = match disruption::needs(&pdb) {
            Expected::Pods => Ok(refs.len() as i64),
            Expected::Scale => self.expected_from_scale(ns, &refs).await?,
        };
        let (status, requeue) = match expected {
            Ok(expected) => {
                let (expected, desired) = disruption::desired_healthy(&pdb, expected);
                let disrupted =
                    disruption::prune_disrupted(&pdb["status"]["disruptedPods"], &refs, now);
                let healthy = disruption::current_healthy(&refs, &disrupted, now);
                let requeue = !disrupted.as_object().is_none_or(|m| m.is_empty());
                (
                    disruption::status(&pdb, expected, desired, healthy, disrupted, &stamp),
                    requeue,
                )
            }
            Err(message) => {
                self.client
                    .event(&pdb, "Warning", "NoControllers", &message)
                    .await;
                (disruption::failed_status(&pdb, &message, &stamp), false)
            }
        };
        if disruption::status_changed(&pdb, &status) {
            match self
                .client
                .update(&self.info, Some(ns), name, Some("status"), |cur| {
                    let mut new = cur.clone();
                    new["status"] = status.clone();
                    Ok(new)
                })
                .await
            {
                Ok(_) | Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(if requeue {
            // An eviction's entry expires after `DELETION_TIMEOUT` at most.
            Action::RequeueAfter(Duration::from_secs(15))
        } else {
            Action::Done
        })
    }
}

/// Runs the controller while this replica leads.
pub fn spawn(client: Client, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new("disruption");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let cache: Arc<Mutex<Cache>> = Default::default();
        let objects = client.objects.clone();
        let controller = Arc::new(Disruption {
            info: objects
                .resources
                .builtin("policy", "v1", "poddisruptionbudgets"),
            client: client.clone(),
            cache: cache.clone(),
        });
        let queue = queue.clone();
        async move {
            let budgets = objects
                .resources
                .builtin("policy", "v1", "poddisruptionbudgets");
            let (c1, c2, q1) = (cache.clone(), cache.clone(), queue.clone());
            let follow_budgets = objects.follow(
                &budgets,
                move |_| lock(&c1).budgets.clear(),
                move |pdb, deleted| {
                    let key = namespaced_key(&pdb);
                    {
                        let mut c = lock(&c2);
                        if deleted {
                            c.budgets.remove(&key);
                        } else {
                            c.budgets.insert(key.clone(), pdb);
                        }
                    }
                    if !deleted {
                        q1.add(key);
                    }
                    async {}
                },
            );
            let pods = objects.resources.builtin("", "v1", "pods");
            let (c3, c4, q2) = (cache.clone(), cache.clone(), queue.clone());
            let follow_pods = objects.follow(
                &pods,
                move |_| lock(&c3).pods.clear(),
                move |pod, deleted| {
                    let (ns, name) = namespaced_key(&pod);
                    let keys: BTreeSet<Key> = {
                        let mut c = lock(&c4);
                        let old = c.pods.get(&ns).and_then(|m| m.get(&name)).cloned();
                        let changed =
                            deleted || old.as_ref().is_none_or(|o| pod_view(o) != pod_view(&pod));
                        let keys = if changed {
                            c.budgets
                                .iter()
                                .filter(|((n, _), b)| {
                                    n == &ns
                                        && (selects(b, &pod)
                                            || old.as_ref().is_some_and(|o| selects(b, o)))
                                })
                                .map(|(k, _)| k.clone())
                                .collect()
                        } else {
                            BTreeSet::new()
                        };
                        let m = c.pods.entry(ns.clone()).or_default();
                        if deleted {
                            m.remove(&name);
                        } else {
                            m.insert(name, pod);
                        }
                        keys
                    };
                    for k in keys {
                        q2.add(k);
                    }
                    async {}
                },
            );
            tokio::join!(
                follow_budgets,
                follow_pods,
                super::run(queue.clone(), controller, 2)
            );
        }
    }));
}
