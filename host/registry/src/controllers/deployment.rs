//! kube-controller-manager's **Deployment** controller
//! (`deployment-controller`, as the ServiceAccount `deployment-controller`
//! with upstream's role). The decisions are
//! [`wasm_apiserver_api::replicas::deployment`]'s; this module follows
//! Deployments, ReplicaSets and (for `Recreate`) pods, and acts.
//!
//! A sync of one Deployment, as upstream's `syncDeployment`:
//! * claims ReplicaSets by selector and controller reference (adopting
//!   orphans, releasing sets whose labels stopped matching);
//! * a Deployment being deleted only has its status refreshed; an empty
//!   selector gets a `SelectingAll` warning and nothing else;
//! * `spec.paused` sets `Progressing` to `DeploymentPaused` (and
//!   `DeploymentResumed` after), and a paused or resized Deployment is
//!   only scaled (proportionally across active sets during a rollout);
//! * otherwise a rollout step: `RollingUpdate` grows the new set within
//!   `maxSurge` and shrinks old ones within `maxUnavailable`; `Recreate`
//!   scales old sets to 0, waits until their pods are gone, then creates
//!   the new set at full size;
//! * the new set is `<name>-<pod-template-hash>`, created on demand with
//!   the next revision; a name taken by another template bumps
//!   `status.collisionCount`; old sets beyond `revisionHistoryLimit` are
//!   deleted once empty;
//! * status and the `Available`/`Progressing`/`ReplicaFailure` conditions
//!   are written when they change, and a stalled rollout is looked at
//!   again when its progress deadline passes (`ProgressDeadlineExceeded`).
//!
//! `kubectl rollout undo` needs nothing here: kubectl copies the old
//! ReplicaSet's template into the Deployment, which then finds that set
//! as its new one and gives it the next revision. Events:
//! `ScalingReplicaSet`, `SelectingAll`, `ReplicaSetCreateError`.

use super::leader::Leadership;
use super::queue::Queue;
use super::replicaset::{Children, Key, Owners, SpamFilter, claim, recheck_owner};
use super::{Action, Client, Metrics, Reconcile};
use super::{lock, namespaced_key};
use crate::options::Preconditions;
use crate::resources::Resource;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use wasm_apiserver_api::replicas::deployment::{self as rules, replicas};
use wasm_apiserver_api::replicas::{self as shared};
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its identity and `--controllers` name.
pub const NAME: &str = "deployment-controller";

/// What the followers saw.
#[derive(Default)]
struct Cache {
    deployments: Owners,
    sets: Children,
    /// ReplicaSet uid → its pods that are not terminal (what `Recreate`
    /// waits for).
    pods_of_set: HashMap<String, HashSet<Key>>,
    /// Pod → the ReplicaSet uid it counts for.
    pod_set: HashMap<Key, String>,
}

impl Cache {
    /// The Deployment controlling the ReplicaSet with `set_uid`.
    fn deployment_of_set(&self, set_uid: &str) -> Option<Key> {
        self.sets
            .objs
            .values()
            .find(|rs| meta::str_field(rs, "uid") == Some(set_uid))
            .and_then(|rs| {
                self.deployments
                    .resolve(shared::controller_of(rs), "Deployment")
            })
    }
}

struct Deployments {
    client: Client,
    cache: Arc<Mutex<Cache>>,
    spam: SpamFilter,
}

fn uid(obj: &Value) -> &str {
    meta::str_field(obj, "uid").unwrap_or_default()
}

fn name(obj: &Value) -> &str {
    meta::name(obj).unwrap_or_default()
}

impl Deployments {
    fn info(&self) -> Arc<Resource> {
        self.client
            .objects
            .resources
            .builtin("apps", "v1", "deployments")
    }

    fn sets_info(&self) -> Arc<Resource> {
        self.client
            .objects
            .resources
            .builtin("apps", "v1", "replicasets")
    }

    async fn event(&self, d: &Value, kind: &str, reason: &str, msg: &str) {
        if self.spam.allow(uid(d)) {
            self.client.event(d, kind, reason, msg).await;
        }
    }

    /// Writes the Deployment's status (and keeps `d` in step).
    async fn write_status(&self, d: &mut Value, status: Value) -> Result<()> {
        let (ns, n) = namespaced_key(d);
        let want = uid(d).to_string();
        let out = self
            .client
            .update(&self.info(), Some(&ns), &n, Some("status"), |cur| {
                if uid(cur) != want {
                    return Err(ApiError::NotFound(wasm_apiserver_api::error::Target::new(
                        "apps",
                        "deployments",
                        &n,
                    )));
                }
                let mut new = cur.clone();
                new["status"] = status.clone();
                Ok(new)
            })
            .await;
        d["status"] = status;
        match out {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Records the new set's revision on the Deployment
    /// (`SetDeploymentRevision`).
    async fn sync_revision(&self, d: &mut Value, revision: &str) -> Result<()> {
        if d["metadata"]["annotations"][rules::REVISION].as_str() == Some(revision) {
            return Ok(());
        }
        let (ns, n) = namespaced_key(d);
        let want = uid(d).to_string();
        let out = self
            .client
            .update(&self.info(), Some(&ns), &n, None, |cur| {
                if uid(cur) != want {
                    return Err(ApiError::NotFound(wasm_apiserver_api::error::Target::new(
                        "apps",
                        "deployments",
                        &n,
                    )));
                }
                let mut new = cur.clone();
                let m = meta::metadata_mut(&mut new);
                let a = m.entry("annotations").or_insert_with(|| json!({}));
                a[rules::REVISION] = json!(revision);
                Ok(new)
            })
            .await;
        let m = meta::metadata_mut(d);
        let a = m.entry("annotations").or_insert_with(|| json!({}));
        a[rules::REVISION] = json!(revision);
        match out {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Scales a set and records the Deployment's size on it
    /// (`scaleReplicaSet`); the set as written.
    async fn scale_set(&self, d: &Value, rs: &Value, size: i64, op: &str) -> Result<Value> {
        let desired = replicas(d);
        let max = desired + rules::max_surge(d);
        let resize = replicas(rs) != size;
        if !resize && !rules::replicas_annotations_need_update(rs, desired, max) {
            return Ok(rs.clone());
        }
        let (ns, n) = namespaced_key(rs);
        let want = uid(rs).to_string();
        let updated = self
            .client
            .update(&self.sets_info(), Some(&ns), &n, None, |cur| {
                if uid(cur) != want {
                    return Err(ApiError::Conflict(
                        wasm_apiserver_api::error::Target::new("apps", "replicasets", &n),
                        "the ReplicaSet was replaced".into(),
                    ));
                }
                let mut new = cur.clone();
                new["spec"]["replicas"] = json!(size);
                rules::set_replicas_annotations(&mut new, desired, max);
                Ok(new)
            })
            .await?;
        if resize {
            self.event(
                d,
                "Normal",
                "ScalingReplicaSet",
                &format!(
                    "Scaled {op} replica set {n} from {} to {size}",
                    replicas(rs)
                ),
            )
            .await;
        }
        Ok(updated)
    }

    /// `scaleReplicaSetAndRecordEvent`: whether it scaled.
    async fn scale_to(&self, d: &Value, rs: &mut Value, size: i64) -> Result<bool> {
        if replicas(rs) == size {
            return Ok(false);
        }
        let op = if replicas(rs) < size { "up" } else { "down" };
        *rs = self.scale_set(d, rs, size, op).await?;
        Ok(true)
    }

    /// The new set (created when `create` and it is missing) and the old
    /// ones (`getAllReplicaSetsAndSyncRevision`).
    async fn new_and_old(
        &self,
        d: &mut Value,
        sets: &[Value],
        create: bool,
    ) -> Result<(Option<Value>, Vec<Value>)> {
        let new_idx = rules::find_new(d, sets);
        let old: Vec<Value> = sets
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != new_idx)
            .map(|(_, s)| s.clone())
            .collect();
        let new_revision = rules::max_revision(&old) + 1;
        let now = chrono::Utc::now();
        if let Some(i) = new_idx {
            let mut rs = sets[i].clone();
            let annotated = rules::set_new_rs_annotations(d, &mut rs, new_revision, true);
            let min_ready = d["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
            let min_ready_differs =
                rs["spec"]["minReadySeconds"].as_i64().unwrap_or(0) != min_ready;
            if annotated || min_ready_differs {
                let (ns, n) = namespaced_key(&rs);
                let annotations = rs["metadata"]["annotations"].clone();
                let want = uid(&rs).to_string();
                let updated = self
                    .client
                    .update(&self.sets_info(), Some(&ns), &n, None, |cur| {
                        if uid(cur) != want {
                            return Err(ApiError::Conflict(
                                wasm_apiserver_api::error::Target::new("apps", "replicasets", &n),
                                "the ReplicaSet was replaced".into(),
                            ));
                        }
                        let mut new = cur.clone();
                        meta::metadata_mut(&mut new)
                            .insert("annotations".into(), annotations.clone());
                        new["spec"]["minReadySeconds"] = json!(min_ready);
                        Ok(new)
                    })
                    .await?;
                return Ok((Some(updated), old));
            }
            let revision = rs["metadata"]["annotations"][rules::REVISION]
                .as_str()
                .unwrap_or_default()
                .to_string();
            self.sync_revision(d, &revision).await?;
            if rules::has_progress_deadline(d)
                && rules::condition(&d["status"], rules::PROGRESSING).is_none()
            {
                let mut status = d["status"].clone();
                if !status.is_object() {
                    status = json!({});
                }
                rules::set_condition(
                    &mut status,
                    rules::new_condition(
                        rules::PROGRESSING,
                        "True",
                        rules::FOUND_NEW_RS_REASON,
                        &format!("Found new replica set {:?}", name(&rs)),
                        now,
                    ),
                );
                self.write_status(d, status).await?;
            }
            return Ok((Some(rs), old));
        }
        if !create {
            return Ok((None, old));
        }
        let collisions = d["status"]["collisionCount"].as_i64();
        let hash = rules::template_hash(&d["spec"]["template"], collisions);
        let mut proto = rules::new_replica_set(d, &hash, 0, new_revision);
        let all: Vec<&Value> = old.iter().chain([&proto]).collect();
        let size = rules::new_rs_new_replicas(d, &all, &proto);
        proto["spec"]["replicas"] = json!(size);
        let ns = meta::namespace(d).unwrap_or_default().to_string();
        let rs_name = name(&proto).to_string();
        let (created, existed) = match self
            .client
            .create(&self.sets_info(), Some(&ns), proto)
            .await
        {
            Ok(rs) => (rs, false),
            Err(ApiError::AlreadyExists(t)) => {
                let found = self
                    .client
                    .get(&self.sets_info(), Some(&ns), &rs_name)
                    .await?;
                let ours = shared::controller_uid(&found) == Some(uid(d))
                    && rules::equal_ignore_hash(&d["spec"]["template"], &found["spec"]["template"]);
                if !ours {
                    // A hash collision: the next sync tries the next name.
                    let mut status = d["status"].clone();
                    if !status.is_object() {
                        status = json!({});
                    }
                    status["collisionCount"] = json!(collisions.unwrap_or(0) + 1);
                    self.write_status(d, status).await?;
                    return Err(ApiError::AlreadyExists(t));
                }
                (found, true)
            }
            Err(e) => {
                let msg = format!("Failed to create new replica set {rs_name:?}: {e}");
                if rules::has_progress_deadline(d) {
                    let mut status = d["status"].clone();
                    if !status.is_object() {
                        status = json!({});
                    }
                    rules::set_condition(
                        &mut status,
                        rules::new_condition(
                            rules::PROGRESSING,
                            "False",
                            rules::FAILED_RS_CREATE_REASON,
                            &msg,
                            now,
                        ),
                    );
                    let _ = self.write_status(d, status).await;
                }
                self.event(d, "Warning", rules::FAILED_RS_CREATE_REASON, &msg)
                    .await;
                return Err(e);
            }
        };
        if !existed && size > 0 {
            self.event(
                d,
                "Normal",
                "ScalingReplicaSet",
                &format!("Scaled up replica set {} from 0 to {size}", name(&created)),
            )
            .await;
        }
        self.sync_revision(d, &new_revision.to_string()).await?;
        if !existed && rules::has_progress_deadline(d) {
            let mut status = d["status"].clone();
            if !status.is_object() {
                status = json!({});
            }
            rules::set_condition(
                &mut status,
                rules::new_condition(
                    rules::PROGRESSING,
                    "True",
                    rules::NEW_RS_REASON,
                    &format!("Created new replica set {:?}", name(&created)),
                    now,
                ),
            );
            self.write_status(d, status).await?;
        }
        Ok((Some(created), old))
    }

    /// Writes the rollout's status when it changed; when it did not, when
    /// to look again for the progress deadline (`syncRolloutStatus`).
    async fn sync_rollout_status(
        &self,
        d: &mut Value,
        all: &[&Value],
        new_rs: Option<&Value>,
    ) -> Result<Action> {
        let now = chrono::Utc::now();
        let status = rules::rollout_status(d, all, new_rs, now);
        if status == d["status"] {
            return Ok(match rules::stuck_requeue(d, &status, now) {
                Some(after) => {
                    Action::RequeueAfter(after.max(std::time::Duration::from_millis(100)))
                }
                None => Action::Done,
            });
        }
        self.write_status(d, status).await?;
        Ok(Action::Done)
    }

    /// Writes the counts and `Available` when they changed
    /// (`syncDeploymentStatus`).
    async fn sync_status(
        &self,
        d: &mut Value,
        all: &[&Value],
        new_rs: Option<&Value>,
    ) -> Result<()> {
        let status = rules::calculate_status(d, all, new_rs, chrono::Utc::now());
        if status != d["status"] {
            self.write_status(d, status).await?;
        }
        Ok(())
    }

    /// Deletes old sets beyond the history limit (`cleanupDeployment`).
    async fn clean_up(&self, d: &Value, old: &[Value]) -> Result<()> {
        let refs: Vec<&Value> = old.iter().collect();
        for rs in rules::sets_to_clean_up(d, &refs) {
            let (ns, n) = namespaced_key(rs);
            let pre = Preconditions {
                uid: Some(uid(rs).to_string()),
                ..Default::default()
            };
            match self
                .client
                .delete(&self.sets_info(), Some(&ns), &n, &pre)
                .await
            {
                Ok(_) | Err(ApiError::NotFound(_)) | Err(ApiError::Conflict(..)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Scaling only: a paused or resized Deployment (`sync`).
    async fn scale_only(&self, d: &mut Value, sets: &[Value]) -> Result<Action> {
        let (mut new_rs, mut old) = self.new_and_old(d, sets, false).await?;
        let plan = {
            let old_refs: Vec<&Value> = old.iter().collect();
            rules::scale(d, new_rs.as_ref(), &old_refs)
        };
        let total_before: i64 = new_rs.iter().chain(old.iter()).map(replicas).sum();
        let total_after: i64 = new_rs
            .iter()
            .chain(old.iter())
            .map(|rs| {
                plan.iter()
                    .find(|(n, _)| n == name(rs))
                    .map(|(_, s)| *s)
                    .unwrap_or(replicas(rs))
            })
            .sum();
        let op = if total_after >= total_before {
            "up"
        } else {
            "down"
        };
        for (n, size) in plan {
            let target = new_rs
                .iter_mut()
                .chain(old.iter_mut())
                .find(|rs| name(rs) == n);
            if let Some(rs) = target {
                *rs = self.scale_set(d, rs, size, op).await?;
            }
        }
        if d["spec"]["paused"] == true {
            self.clean_up(d, &old).await?;
        }
        let all: Vec<&Value> = old.iter().chain(new_rs.iter()).collect();
        self.sync_status(d, &all, new_rs.as_ref()).await?;
        Ok(Action::Done)
    }

    async fn rolling(&self, d: &mut Value, sets: &[Value]) -> Result<Action> {
        let (new_rs, mut old) = self.new_and_old(d, sets, true).await?;
        let mut new_rs = new_rs;
        // reconcileNewReplicaSet
        if let Some(n) = new_rs.as_mut() {
            let target = if replicas(n) > replicas(d) {
                replicas(d)
            } else {
                let all: Vec<&Value> = old.iter().chain([&*n]).collect();
                rules::new_rs_new_replicas(d, &all, n)
            };
            if self.scale_to(d, n, target).await? {
                let all: Vec<&Value> = old.iter().chain(new_rs.iter()).collect();
                return self.sync_rollout_status(d, &all, new_rs.as_ref()).await;
            }
        }
        // reconcileOldReplicaSets
        let plan = {
            let active: Vec<&Value> = old.iter().filter(|rs| replicas(rs) > 0).collect();
            rules::old_scale_downs(d, &active, new_rs.as_ref())
        };
        let mut scaled = false;
        for (n, size) in plan {
            if let Some(rs) = old.iter_mut().find(|rs| name(rs) == n) {
                scaled |= self.scale_to(d, rs, size).await?;
            }
        }
        if !scaled && rules::complete(d, &d["status"]) {
            self.clean_up(d, &old).await?;
        }
        let all: Vec<&Value> = old.iter().chain(new_rs.iter()).collect();
        self.sync_rollout_status(d, &all, new_rs.as_ref()).await
    }

    /// Whether pods of old sets still run (`oldPodsRunning`).
    fn old_pods_running(&self, new_rs: Option<&Value>, old: &[Value]) -> bool {
        if old
            .iter()
            .any(|rs| rs["status"]["replicas"].as_i64().unwrap_or(0) > 0)
        {
            return true;
        }
        let c = lock(&self.cache);
        old.iter()
            .filter(|rs| new_rs.is_none_or(|n| uid(n) != uid(rs)))
            .any(|rs| c.pods_of_set.get(uid(rs)).is_some_and(|p| !p.is_empty()))
    }

    async fn recreate(&self, d: &mut Value, sets: &[Value]) -> Result<Action> {
        let (mut new_rs, mut old) = self.new_and_old(d, sets, false).await?;
        let mut scaled = false;
        for rs in old.iter_mut().filter(|rs| replicas(rs) > 0) {
            scaled |= self.scale_to(d, rs, 0).await?;
        }
        if scaled || self.old_pods_running(new_rs.as_ref(), &old) {
            let all: Vec<&Value> = old.iter().chain(new_rs.iter()).collect();
            return self.sync_rollout_status(d, &all, new_rs.as_ref()).await;
        }
        if new_rs.is_none() {
            let current = old.clone();
            (new_rs, old) = self.new_and_old(d, &current, true).await?;
        }
        if let Some(n) = new_rs.as_mut() {
            self.scale_to(d, n, replicas(d)).await?;
        }
        if rules::complete(d, &d["status"]) {
            self.clean_up(d, &old).await?;
        }
        let all: Vec<&Value> = old.iter().chain(new_rs.iter()).collect();
        self.sync_rollout_status(d, &all, new_rs.as_ref()).await
    }
}

#[async_trait::async_trait]
impl Reconcile for Deployments {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (d, selector, candidates) = {
            let c = lock(&self.cache);
            let Some(o) = c.deployments.get(key) else {
                return Ok(Action::Done);
            };
            (o.obj.clone(), o.selector.clone(), c.sets.candidates(&o.obj))
        };
        let mut d = d;
        let Some(selector) = selector else {
            return Ok(Action::Done);
        };
        let generation = d["metadata"]["generation"].as_i64().unwrap_or(0);
        if selector.is_empty() {
            self.event(
                &d,
                "Warning",
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            )
            .await;
            if d["status"]["observedGeneration"].as_i64().unwrap_or(0) < generation {
                let mut status = d["status"].clone();
                if !status.is_object() {
                    status = json!({});
                }
                status["observedGeneration"] = json!(generation);
                self.write_status(&mut d, status).await?;
            }
            return Ok(Action::Done);
        }
        let info = self.info();
        let sets = claim(
            &self.client,
            &self.sets_info(),
            &d,
            shared::controller_ref(&d, "apps/v1", "Deployment"),
            &selector,
            candidates,
            || recheck_owner(&self.client, &info, &d),
        )
        .await?;
        let sets: Vec<Value> = sets.iter().map(|s| (**s).clone()).collect();
        if !d["metadata"]["deletionTimestamp"].is_null() {
            let (new_rs, old) = self.new_and_old(&mut d, &sets, false).await?;
            let all: Vec<&Value> = old.iter().chain(new_rs.iter()).collect();
            self.sync_status(&mut d, &all, new_rs.as_ref()).await?;
            return Ok(Action::Done);
        }
        if let Some(status) = rules::paused_condition(&d, chrono::Utc::now()) {
            self.write_status(&mut d, status).await?;
        }
        if d["spec"]["paused"] == true {
            return self.scale_only(&mut d, &sets).await;
        }
        let scaling = {
            let all: Vec<&Value> = sets.iter().collect();
            rules::is_scaling_event(&d, &all)
        };
        if scaling {
            return self.scale_only(&mut d, &sets).await;
        }
        match d["spec"]["strategy"]["type"].as_str() {
            Some("Recreate") => self.recreate(&mut d, &sets).await,
            _ => self.rolling(&mut d, &sets).await,
        }
    }
}

/// The Deployments to queue for a ReplicaSet event (upstream's
/// `addReplicaSet`, `updateReplicaSet`, `deleteReplicaSet`).
fn on_set(cache: &Mutex<Cache>, rs: Value, deleted: bool) -> Vec<Key> {
    let key = namespaced_key(&rs);
    let mut c = lock(cache);
    if !deleted
        && let Some(o) = c.sets.get(&key)
        && o["metadata"]["resourceVersion"] == rs["metadata"]["resourceVersion"]
    {
        return Vec::new();
    }
    let new = (!deleted).then(|| Arc::new(rs.clone()));
    let old = c.sets.set(&key, new);
    let mut out = Vec::new();
    let cur_owner = c
        .deployments
        .resolve(shared::controller_of(&rs), "Deployment");
    if let Some(old) = &old
        && shared::controller_of(old) != shared::controller_of(&rs)
        && let Some(o) = c
            .deployments
            .resolve(shared::controller_of(old), "Deployment")
    {
        out.push(o);
    }
    match cur_owner {
        Some(o) => out.push(o),
        None if !deleted && shared::controller_of(&rs).is_none() => {
            let changed = old.as_ref().is_none_or(|o| {
                o["metadata"]["labels"] != rs["metadata"]["labels"]
                    || shared::controller_of(o).is_some()
            });
            if changed {
                out.extend(c.deployments.matching(&rs));
            }
        }
        None => {}
    }
    out
}

/// Tracks which sets still have pods that are not terminal; the
/// `Recreate` Deployment to queue when that changes.
fn on_pod(cache: &Mutex<Cache>, pod: &Value, deleted: bool) -> Option<Key> {
    let key = namespaced_key(pod);
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    let counts = !deleted && phase != "Succeeded" && phase != "Failed";
    let set = shared::controller_uid(pod)
        .filter(|_| counts)
        .filter(|_| shared::controller_of(pod).is_some_and(|r| r["kind"] == "ReplicaSet"))
        .map(String::from);
    let mut c = lock(cache);
    let before = c.pod_set.get(&key).cloned();
    if before == set {
        return None;
    }
    if let Some(b) = &before {
        if let Some(p) = c.pods_of_set.get_mut(b) {
            p.remove(&key);
            if p.is_empty() {
                c.pods_of_set.remove(b);
            }
        }
        c.pod_set.remove(&key);
    }
    if let Some(s) = &set {
        c.pods_of_set
            .entry(s.clone())
            .or_default()
            .insert(key.clone());
        c.pod_set.insert(key, s.clone());
    }
    // Only a pod going away can unblock a Recreate rollout.
    let gone = before?;
    let d = c.deployment_of_set(&gone)?;
    let recreate = c
        .deployments
        .get(&d)
        .is_some_and(|o| o.obj["spec"]["strategy"]["type"] == "Recreate");
    recreate.then_some(d)
}

/// Runs the controller while this replica leads.
pub fn spawn(client: Client, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new("deployment");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let cache: Arc<Mutex<Cache>> = Default::default();
        let controller = Arc::new(Deployments {
            client: client.clone(),
            cache: cache.clone(),
            spam: SpamFilter::default(),
        });
        let queue = queue.clone();
        async move {
            let objects = controller.client.objects.clone();
            let (synced_tx, mut synced) = tokio::sync::watch::channel(0u8);
            let synced_tx = Arc::new(synced_tx);
            // Deployments.
            let deployments = objects.resources.builtin("apps", "v1", "deployments");
            let (c1, c2, q1, q2, s1) = (
                cache.clone(),
                cache.clone(),
                queue.clone(),
                queue.clone(),
                synced_tx.clone(),
            );
            let mut first = true;
            let follow_deployments = objects.follow(
                &deployments,
                move |listed| {
                    let mut c = lock(&c1);
                    let keys: HashSet<Key> = listed.iter().map(namespaced_key).collect();
                    for k in c.deployments.keys() {
                        if !keys.contains(&k) {
                            c.deployments.set(&k, None);
                            q1.add(k);
                        }
                    }
                    for d in listed {
                        c.deployments.set(&namespaced_key(d), Some(d.clone()));
                    }
                    if std::mem::take(&mut first) {
                        s1.send_modify(|n| *n += 1);
                    }
                },
                move |d, deleted| {
                    let key = namespaced_key(&d);
                    lock(&c2).deployments.set(&key, (!deleted).then_some(d));
                    q2.add(key);
                    async {}
                },
            );
            // ReplicaSets.
            let sets = objects.resources.builtin("apps", "v1", "replicasets");
            let (c3, c4, q3, q4, s2) = (
                cache.clone(),
                cache.clone(),
                queue.clone(),
                queue.clone(),
                synced_tx.clone(),
            );
            let mut first_sets = true;
            let follow_sets = objects.follow(
                &sets,
                move |listed| {
                    let mut c = lock(&c3);
                    let keys: HashSet<Key> = listed.iter().map(namespaced_key).collect();
                    let gone: Vec<Key> = c
                        .sets
                        .objs
                        .keys()
                        .filter(|k| !keys.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        if let Some(old) = c.sets.set(&k, None)
                            && let Some(d) = c
                                .deployments
                                .resolve(shared::controller_of(&old), "Deployment")
                        {
                            q3.add(d);
                        }
                    }
                    if std::mem::take(&mut first_sets) {
                        for rs in listed {
                            c.sets.set(&namespaced_key(rs), Some(Arc::new(rs.clone())));
                        }
                        s2.send_modify(|n| *n += 1);
                    }
                },
                move |rs, deleted| {
                    for d in on_set(&c4, rs, deleted) {
                        q4.add(d);
                    }
                    async {}
                },
            );
            // Pods, for Recreate.
            let pods = objects.resources.builtin("", "v1", "pods");
            let (c5, c6, q5, q6, s3) = (
                cache.clone(),
                cache.clone(),
                queue.clone(),
                queue.clone(),
                synced_tx.clone(),
            );
            let mut first_pods = true;
            let follow_pods = objects.follow(
                &pods,
                move |listed| {
                    let keys: HashSet<Key> = listed.iter().map(namespaced_key).collect();
                    let gone: Vec<Key> = lock(&c5)
                        .pod_set
                        .keys()
                        .filter(|k| !keys.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        let stub = json!({"metadata": {"namespace": k.0, "name": k.1}});
                        if let Some(d) = on_pod(&c5, &stub, true) {
                            q5.add(d);
                        }
                    }
                    if std::mem::take(&mut first_pods) {
                        for p in listed {
                            on_pod(&c5, p, false);
                        }
                        s3.send_modify(|n| *n += 1);
                    }
                },
                move |pod, deleted| {
                    if let Some(d) = on_pod(&c6, &pod, deleted) {
                        q6.add(d);
                    }
                    async {}
                },
            );
            let q = queue.clone();
            let run = async {
                let _ = synced.wait_for(|n| *n >= 3).await;
                super::run(q.clone(), controller.clone(), 5).await;
            };
            tokio::join!(follow_deployments, follow_sets, follow_pods, run);
        }
    }));
}
