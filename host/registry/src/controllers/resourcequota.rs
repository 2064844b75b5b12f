//! kube-controller-manager's **resource quota controller**
//! (`resourcequota-controller`, upstream's ServiceAccount and role): each
//! ResourceQuota's `status.hard` (its `spec.hard`) and `status.used`,
//! counted from the objects of its namespace as
//! `wasm_apiserver_api::quota` measures them, written to
//! `resourcequotas/status` only when they change.
//!
//! Keys are quotas (`namespace`, `name`), queued when a quota is added or
//! its `spec.hard` changes, every `--resource-quota-sync-period` (a full
//! recount), and when something gives usage back (upstream's quota
//! monitor's replenishment): any namespaced object deleted (one metadata
//! watch of the whole registry, deletions only), a pod that stops
//! counting (it finished, or its deletion grace runs out: the quota is
//! looked at again at that moment), a service whose type changes, a claim
//! whose allocated storage changes. Creates need no recount: the
//! `ResourceQuota` admission plugin charged them. A status write is a
//! compare-and-swap on the quota the count started from, so a charge that
//! lands meanwhile makes it count again rather than be lost.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key as key_of};
use crate::informer::{self, Change, Resolver};
use crate::options::ListParams;
use crate::resources::Resource;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasm_apiserver_api::quota::{self, Evaluator, ResourceList};
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its `--controllers` name and identity.
pub const NAME: &str = "resourcequota-controller";

type Key = (String, String);

/// The controller's options.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Every quota is recounted this often (`--resource-quota-sync-period`).
    pub sync_period: Duration,
}

/// The quotas, as the watch last showed them.
type Quotas = Arc<Mutex<HashMap<Key, Value>>>;

struct Controller {
    client: Client,
    info: Arc<Resource>,
    quotas: Quotas,
}

impl Controller {
    /// A served, namespaced resource quota can count (`create`, `list`,
    /// `watch` and `delete`, as upstream's `GetQuotableResources`).
    fn resource(&self, group: &str, plural: &str) -> Option<Arc<Resource>> {
        let snap = self.client.objects.resources.snapshot();
        snap.all()
            .find(|r| {
                r.group == group
                    && r.plural == plural
                    && r.namespaced
                    && r.create_only.is_none()
                    && ["create", "list", "watch", "delete"]
                        .iter()
                        .all(|v| r.verbs.iter().any(|have| have.as_str() == *v))
            })
            .cloned()
    }
}

#[async_trait::async_trait]
impl Reconcile for Controller {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        let Some(q) = lock(&self.quotas).get(key).cloned() else {
            return Ok(Action::Done);
        };
        let hard = quota::list_from(&q["spec"]["hard"]);
        let scopes = quota::scopes(&q);
        let now = Utc::now();
        let mut counted = ResourceList::new();
        let mut failure = None;
        let mut recheck: Option<DateTime<Utc>> = None;
        for (group, plural, evaluator, names) in quota::usage_plan(&hard) {
            let Some(res) = self.resource(&group, &plural) else {
                continue;
            };
            match self
                .client
                .list(&res, Some(ns), &ListParams::default())
                .await
            {
                Ok(listed) => {
                    let used = quota::usage_stats(&evaluator, &listed.items, &scopes, &names, now);
                    counted = quota::add(&counted, &quota::mask(&used, &names));
                    if evaluator == Evaluator::Pods {
                        // A pod that stops counting when its grace runs out.
                        for end in listed
                            .items
                            .iter()
                            .filter(|p| quota::pod_counts(p, now))
                            .filter_map(quota::pod_grace_end)
                        {
                            recheck = Some(recheck.map_or(end, |r| r.min(end)));
                        }
                    }
                }
                // What could not be counted keeps its last usage.
                Err(e) => failure = Some(e),
            }
        }
        if let Some(status) = quota::quota_status(&q, &counted) {
            let rv = meta::str_field(&q, "resourceVersion").map(String::from);
            let written = self
                .client
                .update(&self.info, Some(ns), name, Some("status"), |cur| {
                    if meta::str_field(cur, "resourceVersion").map(String::from) != rv {
                        return Err(ApiError::stale(crate::store::target(&self.info, name)));
                    }
                    let mut new = cur.clone();
                    new["status"] = status.clone();
                    Ok(new)
                })
                .await;
            match written {
                Ok(new) => {
                    // The watch brings it too; this spares a retry on a
                    // stale copy meanwhile.
                    let mut quotas = lock(&self.quotas);
                    if let Some(cur) = quotas.get_mut(key)
                        && meta::str_field(cur, "resourceVersion") == rv.as_deref()
                    {
                        *cur = new;
                    }
                }
                Err(ApiError::NotFound(_)) => return Ok(Action::Done),
                Err(e) => return Err(e),
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(match recheck {
            Some(at) => Action::RequeueAfter(
                (at - now)
                    .to_std()
                    .unwrap_or_default()
                    .saturating_add(Duration::from_millis(100)),
            ),
            None => Action::Done,
        })
    }
}

/// Queues the quotas of `ns` that count what `evaluator` measures.
fn replenish(quotas: &Quotas, queue: &Queue<Key>, ns: &str, evaluator: &Evaluator) {
    let keys: Vec<Key> = lock(quotas)
        .iter()
        .filter(|((n, _), q)| n == ns && quota::tracks(q, evaluator))
        .map(|(k, _)| k.clone())
        .collect();
    for k in keys {
        queue.add(k);
    }
}

/// What about an object of a replenishing kind is a reason to recount
/// when it changes.
fn view(evaluator: &Evaluator, obj: &Value, now: DateTime<Utc>) -> Value {
    match evaluator {
        Evaluator::Pods => Value::Bool(quota::pod_counts(obj, now)),
        Evaluator::Services => Value::String(quota::service_quota_type(obj).to_string()),
        _ => Value::String(
            quota::claim_allocated(obj)
                .map(|q| q.to_string())
                .unwrap_or_default(),
        ),
    }
}

/// Follows one replenishing kind's updates: pods that stop counting,
/// services changing type, claims changing allocated storage.
async fn follow_updates(
    client: Client,
    plural: &'static str,
    quotas: Quotas,
    queue: Arc<Queue<Key>>,
) {
    let objects = client.objects.clone();
    let info = objects.resources.builtin("", "v1", plural);
    let Some(evaluator) = quota::evaluator("", plural) else {
        return;
    };
    let views: Arc<Mutex<HashMap<Key, Value>>> = Default::default();
    let cleared = views.clone();
    objects
        .follow(
            &info,
            move |_| lock(&cleared).clear(),
            move |obj, deleted| {
                let key = key_of(&obj);
                let now = Utc::now();
                let new = view(&evaluator, &obj, now);
                let old = {
                    let mut v = lock(&views);
                    if deleted {
                        v.remove(&key)
                    } else {
                        v.insert(key.clone(), new.clone())
                    }
                };
                // Deletions come through the metadata watch.
                let release = !deleted
                    && old.is_some_and(|old| match evaluator {
                        Evaluator::Pods => old == Value::Bool(true) && new == Value::Bool(false),
                        _ => old != new,
                    });
                if release {
                    replenish(&quotas, &queue, &key.0, &evaluator);
                }
                // A deleted pod stops counting when its grace runs out.
                if !deleted
                    && evaluator == Evaluator::Pods
                    && let Some(end) = quota::pod_grace_end(&obj).filter(|e| *e > now)
                {
                    let delay =
                        (end - now).to_std().unwrap_or_default() + Duration::from_millis(100);
                    let keys: Vec<Key> = lock(&quotas)
                        .iter()
                        .filter(|((n, _), q)| *n == key.0 && quota::tracks(q, &evaluator))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in keys {
                        queue.add_after(k, delay);
                    }
                }
                async {}
            },
        )
        .await
}

/// Runs the controller while this replica leads.
pub fn spawn(client: Client, config: Config, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new("resourcequota_primary");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let quotas: Quotas = Default::default();
        let objects = client.objects.clone();
        let info = objects.resources.builtin("", "v1", "resourcequotas");
        let controller = Arc::new(Controller {
            client: client.clone(),
            info: info.clone(),
            quotas: quotas.clone(),
        });
        let queue = queue.clone();
        let client = client.clone();
        async move {
            let (q1, q2, queue1) = (quotas.clone(), quotas.clone(), queue.clone());
            let follow_quotas = objects.follow(
                &info,
                move |_| lock(&q1).clear(),
                move |q, deleted| {
                    let key = key_of(&q);
                    let enqueue = {
                        let mut all = lock(&q2);
                        if deleted {
                            all.remove(&key);
                            false
                        } else {
                            let hard = quota::list_from(&q["spec"]["hard"]);
                            let changed = all.get(&key).is_none_or(|old| {
                                !quota::equals(&quota::list_from(&old["spec"]["hard"]), &hard)
                            });
                            all.insert(key.clone(), q);
                            changed
                        }
                    };
                    if enqueue {
                        queue1.add(key);
                    }
                    async {}
                },
            );
            // Deletions of anything namespaced: usage given back.
            let (q3, queue2, objects2) = (quotas.clone(), queue.clone(), objects.clone());
            let resolver = Mutex::new(Resolver::default());
            let follow_deletions = informer::follow_metadata_keys(
                &objects,
                |_, deleted| deleted,
                move |change| {
                    let Change::Delete(key, meta) = change else {
                        return;
                    };
                    let Some(ns) = meta.namespace.as_deref().filter(|n| !n.is_empty()) else {
                        return;
                    };
                    if !lock(&q3).keys().any(|(n, _)| n == ns) {
                        return;
                    }
                    let located = {
                        let mut r = lock(&resolver);
                        r.refresh(objects2.resources.snapshot());
                        r.locate(key)
                    };
                    if let Some(evaluator) =
                        located.and_then(|l| quota::evaluator(&l.res.group, &l.res.plural))
                    {
                        replenish(&q3, &queue2, ns, &evaluator);
                    }
                },
            );
            let (q4, queue3) = (quotas.clone(), queue.clone());
            let resync = async move {
                loop {
                    tokio::time::sleep(config.sync_period).await;
                    let keys: Vec<Key> = lock(&q4).keys().cloned().collect();
                    for k in keys {
                        queue3.add(k);
                    }
                }
            };
            tokio::join!(
                follow_quotas,
                follow_deletions,
                follow_updates(client.clone(), "pods", quotas.clone(), queue.clone()),
                follow_updates(client.clone(), "services", quotas.clone(), queue.clone()),
                follow_updates(
                    client.clone(),
                    "persistentvolumeclaims",
                    quotas.clone(),
                    queue.clone()
                ),
                resync,
                super::run(queue.clone(), controller, 5)
            );
        }
    }));
}
