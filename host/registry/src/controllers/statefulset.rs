//! kube-controller-manager's **StatefulSet controller**
//! (`statefulset-controller`, as the ServiceAccount of that name with
//! upstream's role): pods with stable names and claims, made, replaced and
//! removed in order, with what `wasm_apiserver_api::statefulset` decides.
//!
//! Keys are StatefulSets (`namespace`, `name`), queued when the set
//! changes, when a pod it controls changes (an orphan: every set of its
//! namespace whose selector matches it) and when a claim a pod of it owned
//! goes (a claim left by a scaled-away pod blocks its successor until the
//! garbage collector takes it). A sync reads the set and lists its
//! namespace's pods through the client (fresh, so nothing is made twice
//! after a restart or a leader change), adopts and releases pods as
//! upstream's `ClaimPods` (the selector and the pod's name both), adopts
//! orphaned ControllerRevisions, keeps the template as a revision
//! (`currentRevision`/`updateRevision`, `collisionCount`,
//! `revisionHistoryLimit`), runs the plan's steps in order and stops at
//! the first that fails (claims before their pod, a claim that exists is
//! reused), and writes the status when it changed. Claims are read from a
//! cache of the cluster's PersistentVolumeClaims (as upstream's informer)
//! for the retention checks, and afresh before they are made or changed.

use super::history::{History, hash_label};
use super::leader::Leadership;
use super::queue::Queue;
use super::replicaset::{SpamFilter, claim_matching, recheck_owner};
use super::{Action, Client, Metrics, Reconcile};
use super::{lock, namespaced_key};
use crate::options::{ListParams, Preconditions};
use crate::resources::Resource;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasm_apiserver_api::selector::LabelSelector;
use wasm_apiserver_api::statefulset::{self as logic, Step, UpdateRevision, Why};
use wasm_apiserver_api::{ApiError, history, meta, replicas};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its `--controllers` name.
pub const CONTROLLER: &str = "statefulset-controller";
/// Its identity (upstream's ServiceAccount and role name).
pub const NAME: &str = "statefulset-controller";

type Key = (String, String);

/// The StatefulSet that controls `obj`, if one does.
fn set_of(obj: &Value) -> Option<&str> {
    replicas::controller_of(obj)
        .filter(|r| r["kind"] == "StatefulSet" && r["apiVersion"] == "apps/v1")
        .and_then(|r| r["name"].as_str())
}

/// What the claim cache keeps of a claim.
fn slim_claim(claim: &Value) -> Value {
    let m = &claim["metadata"];
    json!({"metadata": {
        "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
        "ownerReferences": m["ownerReferences"], "deletionTimestamp": m["deletionTimestamp"],
    }})
}

type Claims = Arc<Mutex<HashMap<Key, Value>>>;

struct StatefulSets {
    client: Client,
    info: Arc<Resource>,
    pods: Arc<Resource>,
    revisions: Arc<Resource>,
    pvcs: Arc<Resource>,
    claims: Claims,
    /// The claims have been listed once.
    ready: Arc<AtomicBool>,
    spam: SpamFilter,
}

/// What a failed write says in an event.
fn error_text(e: &ApiError) -> String {
    e.to_string()
}

impl StatefulSets {
    async fn event(&self, set: &Value, kind: &str, reason: &str, msg: &str) {
        if self
            .spam
            .allow(meta::str_field(set, "uid").unwrap_or_default())
        {
            self.client.event(set, kind, reason, msg).await;
        }
    }

    /// `recordPodEvent`.
    async fn pod_event(&self, set: &Value, verb: &str, pod: &str, err: Option<&ApiError>) {
        let title = |v: &str| {
            let mut c = v.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        };
        let set_name = meta::name(set).unwrap_or_default();
        match err {
            None => {
                let msg = format!("{verb} Pod {pod} in StatefulSet {set_name} successful");
                self.event(set, "Normal", &format!("Successful{}", title(verb)), &msg)
                    .await
            }
            Some(e) => {
                let msg = format!(
                    "{verb} Pod {pod} in StatefulSet {set_name} failed error: {}",
                    error_text(e)
                );
                self.event(set, "Warning", &format!("Failed{}", title(verb)), &msg)
                    .await
            }
        }
    }

    /// `createPersistentVolumeClaims`: each claim of `pod` that is absent
    /// is made; one that exists is reused unless it is being deleted.
    async fn create_claims(&self, set: &Value, pod: &Value) -> Result<()> {
        let ns = meta::namespace(set).unwrap_or_default();
        let (set_name, pod_name) = (
            meta::name(set).unwrap_or_default(),
            meta::name(pod).unwrap_or_default(),
        );
        let Some(ordinal) = logic::ordinal(pod) else {
            return Ok(());
        };
        let mut first_error = None;
        for (_, claim) in logic::claims(set, ordinal) {
            let name = meta::name(&claim).unwrap_or_default().to_string();
            match self.client.get(&self.pvcs, Some(ns), &name).await {
                Ok(found) => {
                    if !found["metadata"]["deletionTimestamp"].is_null() {
                        first_error.get_or_insert(ApiError::Conflict(
                            wasm_apiserver_api::error::Target::new(
                                "",
                                "persistentvolumeclaims",
                                &name,
                            ),
                            format!("pvc {name} is being deleted"),
                        ));
                    }
                }
                Err(ApiError::NotFound(_)) => {
                    match self.client.create(&self.pvcs, Some(ns), claim).await {
                        Ok(made) => {
                            lock(&self.claims)
                                .insert((ns.to_string(), name.clone()), slim_claim(&made));
                            let msg = format!(
                                "create Claim {name} Pod {pod_name} in StatefulSet {set_name} success"
                            );
                            self.event(set, "Normal", "SuccessfulCreate", &msg).await;
                        }
                        Err(e @ ApiError::AlreadyExists(..)) => {
                            first_error.get_or_insert(e);
                        }
                        Err(e) => {
                            let msg = format!(
                                "create Claim {name} for Pod {pod_name} in StatefulSet {set_name} failed error: failed to create PVC {name}: {}",
                                error_text(&e)
                            );
                            self.event(set, "Warning", "FailedCreate", &msg).await;
                            first_error.get_or_insert(e);
                        }
                    }
                }
                Err(e) => {
                    let msg = format!(
                        "create Claim {name} for Pod {pod_name} in StatefulSet {set_name} failed error: failed to retrieve PVC {name}: {}",
                        error_text(&e)
                    );
                    self.event(set, "Warning", "FailedCreate", &msg).await;
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `UpdatePodClaimForRetentionPolicy`: each claim of `pod` (read
    /// afresh) gets the owners the retention policy wants.
    async fn fix_claims(&self, set: &Value, pod: &Value) -> Result<()> {
        let ns = meta::namespace(set).unwrap_or_default();
        let Some(ordinal) = logic::ordinal(pod) else {
            return Ok(());
        };
        for (_, claim) in logic::claims(set, ordinal) {
            let name = meta::name(&claim).unwrap_or_default().to_string();
            let found = match self.client.get(&self.pvcs, Some(ns), &name).await {
                Ok(c) => c,
                Err(ApiError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            if logic::unexpected_controller(&found, set, pod) {
                let msg = format!(
                    "PersistentVolumeClaim {name} has a conflicting OwnerReference that acts as a manging controller, the retention policy is ignored for this claim"
                );
                self.event(set, "Warning", "ConflictingController", &msg)
                    .await;
            }
            if logic::claim_owner_up_to_date(&found, set, pod) {
                continue;
            }
            let updated = self
                .client
                .update(&self.pvcs, Some(ns), &name, None, |cur| {
                    let mut new = cur.clone();
                    new["metadata"]["ownerReferences"] =
                        json!(logic::claim_owner_refs(cur, set, pod));
                    Ok(new)
                })
                .await?;
            lock(&self.claims).insert((ns.to_string(), name), slim_claim(&updated));
        }
        Ok(())
    }

    /// `CreateStatefulPod`: claims, the pod, then the claims' owners.
    async fn create_pod(&self, set: &Value, pod: Value) -> Result<()> {
        let ns = meta::namespace(set).unwrap_or_default();
        let name = meta::name(&pod).unwrap_or_default().to_string();
        if let Err(e) = self.create_claims(set, &pod).await {
            self.pod_event(set, "create", &name, Some(&e)).await;
            return Err(e);
        }
        let made = match self.client.create(&self.pods, Some(ns), pod).await {
            Ok(made) => made,
            Err(e @ ApiError::AlreadyExists(..)) => return Err(e),
            Err(e) => {
                self.pod_event(set, "create", &name, Some(&e)).await;
                return Err(e);
            }
        };
        if let Err(e) = self.fix_claims(set, &made).await {
            self.pod_event(set, "update", &name, Some(&e)).await;
            return Err(e);
        }
        self.pod_event(set, "create", &name, None).await;
        Ok(())
    }

    async fn delete_pod(&self, set: &Value, name: &str, uid: &str, why: Why) -> Result<()> {
        let ns = meta::namespace(set).unwrap_or_default();
        let pre = Preconditions {
            uid: Some(uid.to_string()).filter(|u| !u.is_empty()),
            ..Default::default()
        };
        match self.client.delete(&self.pods, Some(ns), name, &pre).await {
            Ok(_) => {
                self.pod_event(set, "delete", name, None).await;
                Ok(())
            }
            // Gone already (an update's replacement is made next sync).
            Err(ApiError::NotFound(_)) => Ok(()),
            Err(e) => {
                self.pod_event(set, "delete", name, Some(&e)).await;
                if why == Why::Update && matches!(e, ApiError::Conflict(..)) {
                    return Ok(());
                }
                Err(e)
            }
        }
    }

    async fn run_step(&self, set: &Value, update_set: &Value, step: Step) -> Result<()> {
        let ns = meta::namespace(set).unwrap_or_default();
        match step {
            Step::Create(pod) => self.create_pod(set, pod).await,
            Step::Claims(pod) => {
                self.create_claims(set, &pod).await?;
                if let Err(e) = self.fix_claims(set, &pod).await {
                    let name = meta::name(&pod).unwrap_or_default();
                    self.pod_event(set, "update", name, Some(&e)).await;
                    return Err(e);
                }
                Ok(())
            }
            Step::Retention(pod) => {
                let name = meta::name(&pod).unwrap_or_default();
                match self.fix_claims(update_set, &pod).await {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        self.pod_event(set, "update", name, Some(&e)).await;
                        Err(e)
                    }
                }
            }
            Step::Update(pod) => {
                let name = meta::name(&pod).unwrap_or_default().to_string();
                let outcome = match self.create_claims(update_set, &pod).await {
                    Ok(()) => self
                        .client
                        .replace(&self.pods, Some(ns), &name, None, pod)
                        .await
                        .map(|_| ()),
                    Err(e) => Err(e),
                };
                self.pod_event(set, "update", &name, outcome.as_ref().err())
                    .await;
                outcome
            }
            Step::Delete(name, uid, why) => self.delete_pod(set, &name, &uid, why).await,
        }
    }

    /// The set's ControllerRevisions (its own and orphans its selector
    /// matches, adopted), oldest first.
    async fn revisions(&self, set: &Value, selector: &LabelSelector) -> Result<Vec<Value>> {
        let ns = meta::namespace(set).unwrap_or_default();
        let uid = meta::str_field(set, "uid").unwrap_or_default();
        let store = History {
            client: &self.client,
            info: &self.revisions,
        };
        let mine = store
            .list(ns, |r| {
                selector.matches_object(r)
                    && replicas::controller_uid(r).is_none_or(|owner| owner == uid)
            })
            .await?;
        if mine.iter().all(|r| replicas::controller_uid(r).is_some()) {
            return Ok(mine);
        }
        let mut claimed: Vec<Value> = claim_matching(
            &self.client,
            &self.revisions,
            set,
            replicas::controller_ref(set, "apps/v1", "StatefulSet"),
            |_| true,
            mine.into_iter().map(Arc::new).collect(),
            || recheck_owner(&self.client, &self.info, set),
        )
        .await?
        .into_iter()
        .map(|r| (*r).clone())
        .collect();
        claimed.sort_by(history::by_number);
        Ok(claimed)
    }
}

#[async_trait::async_trait]
impl Reconcile for StatefulSets {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        if !self.ready.load(Ordering::Acquire) {
            return Ok(Action::RequeueAfter(Duration::from_millis(200)));
        }
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        let set = match self.client.get(&self.info, Some(ns), name).await {
            Ok(s) => s,
            Err(ApiError::NotFound(_)) => return Ok(Action::Done),
            Err(e) => return Err(e),
        };
        let Ok(selector) = replicas::selector(&set["spec"]["selector"]) else {
            // Not transient: nothing to retry until the set changes.
            return Ok(Action::Done);
        };
        let mut revisions = self.revisions(&set, &selector).await?;

        // The pods it owns (`getPodsForStatefulSet`).
        let all = self
            .client
            .list(&self.pods, Some(ns), &ListParams::default())
            .await?
            .items;
        let pods: Vec<Value> = claim_matching(
            &self.client,
            &self.pods,
            &set,
            replicas::controller_ref(&set, "apps/v1", "StatefulSet"),
            |p| !selector.is_empty() && selector.matches_object(p) && logic::is_member(&set, p),
            all.into_iter().map(Arc::new).collect(),
            || recheck_owner(&self.client, &self.info, &set),
        )
        .await?
        .into_iter()
        .map(|p| (*p).clone())
        .collect();

        // The current and update revisions (`getStatefulSetRevisions`).
        let store = History {
            client: &self.client,
            info: &self.revisions,
        };
        let mut collisions = set["status"]["collisionCount"].as_i64().unwrap_or(0);
        let update = match logic::update_revision(&set, &revisions) {
            UpdateRevision::Newest => revisions.last().cloned().expect("a newest revision"),
            UpdateRevision::Renumber(i, n) => {
                let r = store
                    .renumber(ns, meta::name(&revisions[i]).unwrap_or_default(), n)
                    .await?;
                revisions[i] = r.clone();
                revisions.sort_by(history::by_number);
                r
            }
            UpdateRevision::Create => {
                let next = history::next_number(&revisions);
                let (r, c) = store
                    .create_unique(ns, |c| logic::new_revision(&set, next, c), collisions)
                    .await?;
                collisions = c;
                revisions.push(r.clone());
                r
            }
        };
        let update_name = meta::name(&update).unwrap_or_default().to_string();
        let current = revisions
            .iter()
            .find(|r| meta::name(r) == set["status"]["currentRevision"].as_str())
            .unwrap_or(&update)
            .clone();
        let current_name = meta::name(&current).unwrap_or_default().to_string();
        let invalid = |e: String| ApiError::BadRequest(format!("StatefulSet {ns}/{name}: {e}"));
        let current_set = logic::apply_revision(&set, &current).map_err(invalid)?;
        let update_set = logic::apply_revision(&set, &update).map_err(invalid)?;

        let claims: HashMap<String, Value> = lock(&self.claims)
            .iter()
            .filter(|((n, _), _)| n == ns)
            .map(|((_, c), v)| (c.clone(), v.clone()))
            .collect();
        let plan = logic::plan(&logic::Input {
            set: &set,
            current: (&current_name, &current_set),
            update: (&update_name, &update_set),
            collisions,
            pods: &pods,
            claims: &claims,
            now: chrono::Utc::now(),
        });

        // The steps, in order; the first failure ends them.
        let mut failed = None;
        for step in plan.steps {
            if let Err(e) = self.run_step(&set, &update_set, step).await {
                failed = Some(e);
                break;
            }
        }
        // The status, even after a failure (as upstream).
        if logic::status_changed(&set, &plan.status) {
            let status = plan.status.clone();
            match self
                .client
                .update(&self.info, Some(ns), name, Some("status"), move |cur| {
                    let mut new = cur.clone();
                    new["status"] = status.clone();
                    Ok(new)
                })
                .await
            {
                Ok(_) | Err(ApiError::NotFound(_)) => {}
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        // History: the current and update revisions and those of live
        // pods stay, then `revisionHistoryLimit` more.
        let limit = set["spec"]["revisionHistoryLimit"].as_i64().unwrap_or(10);
        let live = |r: &Value| {
            let n = meta::name(r).unwrap_or_default();
            n == current_name || n == update_name || pods.iter().any(|p| hash_label(p) == n)
        };
        if let Err(e) = store.truncate(ns, &revisions, live, limit).await {
            failed.get_or_insert(e);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if plan.more {
            return Ok(Action::RequeueAfter(Duration::ZERO));
        }
        Ok(match logic::requeue_for_availability(&set, &plan.status) {
            Some(s) => Action::RequeueAfter(Duration::from_secs(s.max(1) as u64)),
            None => Action::Done,
        })
    }
}

/// Runs the controller while this replica leads.
pub fn spawn(client: Client, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new("statefulset");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let objects = client.objects.clone();
        let claims: Claims = Default::default();
        let ready = Arc::new(AtomicBool::new(false));
        let controller = Arc::new(StatefulSets {
            info: objects.resources.builtin("apps", "v1", "statefulsets"),
            pods: objects.resources.builtin("", "v1", "pods"),
            revisions: objects
                .resources
                .builtin("apps", "v1", "controllerrevisions"),
            pvcs: objects
                .resources
                .builtin("", "v1", "persistentvolumeclaims"),
            client: client.clone(),
            claims: claims.clone(),
            ready: ready.clone(),
            spam: SpamFilter::default(),
        });
        let queue = queue.clone();
        async move {
            // Every set's selector, for orphans.
            let selectors: Arc<Mutex<HashMap<Key, Option<LabelSelector>>>> = Default::default();
            let sets = objects.resources.builtin("apps", "v1", "statefulsets");
            let (s1, s2, q1) = (selectors.clone(), selectors.clone(), queue.clone());
            let follow_sets = objects.follow(
                &sets,
                move |listed| {
                    let mut s = lock(&s1);
                    s.clear();
                    for set in listed {
                        s.insert(
                            namespaced_key(set),
                            replicas::selector(&set["spec"]["selector"]).ok(),
                        );
                    }
                },
                move |set, deleted| {
                    let key = namespaced_key(&set);
                    {
                        let mut s = lock(&s2);
                        if deleted {
                            s.remove(&key);
                        } else {
                            s.insert(
                                key.clone(),
                                replicas::selector(&set["spec"]["selector"]).ok(),
                            );
                        }
                    }
                    q1.add(key);
                    async {}
                },
            );
            let pods = objects.resources.builtin("", "v1", "pods");
            let (s3, q2) = (selectors.clone(), queue.clone());
            let follow_pods = objects.follow(
                &pods,
                |_| {},
                move |pod, _deleted| {
                    let ns = meta::namespace(&pod).unwrap_or_default().to_string();
                    if let Some(owner) = set_of(&pod) {
                        q2.add((ns, owner.to_string()));
                    } else if replicas::controller_of(&pod).is_none() {
                        for ((set_ns, set_name), sel) in lock(&s3).iter() {
                            if set_ns == &ns
                                && sel
                                    .as_ref()
                                    .is_some_and(|s| !s.is_empty() && s.matches_object(&pod))
                            {
                                q2.add((set_ns.clone(), set_name.clone()));
                            }
                        }
                    }
                    async {}
                },
            );
            let pvcs = objects
                .resources
                .builtin("", "v1", "persistentvolumeclaims");
            let (c1, c2, q3) = (claims.clone(), claims.clone(), queue.clone());
            let follow_claims = objects.follow(
                &pvcs,
                move |listed| {
                    let mut c = lock(&c1);
                    c.clear();
                    for claim in listed {
                        c.insert(namespaced_key(claim), slim_claim(claim));
                    }
                    ready.store(true, Ordering::Release);
                },
                move |claim, deleted| {
                    let key = namespaced_key(&claim);
                    if deleted {
                        lock(&c2).remove(&key);
                        // A claim a scaled-away pod owned: its set may be
                        // waiting for it to go.
                        for r in claim["metadata"]["ownerReferences"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|r| r["kind"] == "Pod")
                        {
                            let pod = r["name"].as_str().unwrap_or_default();
                            if let Some((parent, _)) = logic::parent_and_ordinal(pod) {
                                q3.add((key.0.clone(), parent.to_string()));
                            }
                        }
                    } else {
                        lock(&c2).insert(key, slim_claim(&claim));
                    }
                    async {}
                },
            );
            tokio::join!(
                follow_sets,
                follow_pods,
                follow_claims,
                super::run(queue.clone(), controller, 2)
            );
        }
    }));
}
