//! kube-controller-manager's **Job controller** (`job-controller`, as the
//! ServiceAccount `job-controller` with upstream's role): runs a Job's pods
//! until enough succeed or the Job fails, as upstream's
//! `pkg/controller/job` does; the decisions are
//! [`wasm_apiserver_api::batch`]'s.
//!
//! * Pods are counted through the `batch.kubernetes.io/job-tracking`
//!   finalizer each pod is created with: a finished pod's uid goes first to
//!   `status.uncountedTerminatedPods`, then its finalizer is removed, then
//!   it moves to `succeeded`/`failed` (at most 500 per status write), so no
//!   pod is counted twice or lost across restarts.
//! * Expectations (creations and deletions not yet seen, finalizer
//!   removals not yet seen) hold a Job's next sync until its pods are in
//!   the cache, so nothing is created twice; at most 500 pods are created
//!   or deleted per sync, creations in slow-start batches (1, 2, 4, …),
//!   stopping at the first failed batch.
//! * Ownership as upstream: pods matching the selector without a
//!   controller are adopted (owner reference and finalizer), owned pods
//!   that stopped matching are released, pods of other controllers are
//!   never touched; the finalizer of a pod whose Job is gone is removed.
//! * `parallelism`/`completions`, `Indexed` completion (index annotation
//!   and label, hostname, `JOB_COMPLETION_INDEX`, `completedIndexes`),
//!   `backoffLimit` with the pod-failure backoff (10 s doubling to 10 min),
//!   `restartPolicy: OnFailure` restarts, `activeDeadlineSeconds`,
//!   `podFailurePolicy` (`FailJob`, `Ignore`, `Count`), `podReplacementPolicy`,
//!   `suspend` (pods deleted, `Suspended` condition, start time reset on
//!   resume), and 1.33's interim `SuccessCriteriaMet`/`FailureTarget`
//!   conditions before `Complete`/`Failed` once no pod is terminating.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key};
use crate::options::Preconditions;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use wasm_apiserver_api::batch::indexed::{self, Intervals};
use wasm_apiserver_api::batch::{self, Backoff, failure_policy};
use wasm_apiserver_api::patch::PatchType;
use wasm_apiserver_api::selector::LabelSelector;
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its identity and `--controllers` name.
pub const NAME: &str = "job-controller";

/// How long expectations hold a Job before it syncs anyway (upstream's
/// `ExpectationsTimeout`).
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);

/// The pod-failure backoff (`DefaultJobPodFailureBackOff`,
/// `MaxJobPodFailureBackOff`).
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backoff_base: Duration::from_secs(10),
            backoff_max: Duration::from_secs(600),
        }
    }
}

type Key = (String, String);

/// A Job to sync, or a pod whose tracking finalizer may have to go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Item {
    Job(String, String),
    Orphan(String, String),
}

fn uid(obj: &Value) -> &str {
    meta::str_field(obj, "uid").unwrap_or_default()
}

fn rv(obj: &Value) -> u64 {
    meta::str_field(obj, "resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The controlling owner reference, if any.
fn controller_of(obj: &Value) -> Option<&Value> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
}

fn is_job_ref(r: &Value) -> bool {
    r["kind"] == "Job"
        && r["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("batch/"))
}

/// The Job's label selector.
fn selector(job: &Value) -> Option<LabelSelector> {
    let sel: wasm_apiserver_api::admission::Selector =
        serde_json::from_value(job["spec"]["selector"].clone()).ok()?;
    sel.to_label_selector().ok()
}

/// What the informers saw.
#[derive(Default)]
struct Cache {
    jobs: HashMap<Key, Value>,
    job_by_uid: HashMap<String, Key>,
    jobs_by_ns: HashMap<String, BTreeSet<String>>,
    pods: HashMap<Key, Value>,
    /// Job uid → pods whose controller reference names it.
    owned: HashMap<String, BTreeSet<Key>>,
    /// Namespace → pods without a controller.
    orphans: HashMap<String, BTreeSet<Key>>,
}

impl Cache {
    fn set_job(&mut self, key: Key, job: Option<Value>) -> Option<Value> {
        let old = self.jobs.remove(&key);
        if let Some(o) = &old {
            self.job_by_uid.remove(uid(o));
            if let Some(s) = self.jobs_by_ns.get_mut(&key.0) {
                s.remove(&key.1);
            }
        }
        if let Some(j) = job {
            self.job_by_uid.insert(uid(&j).to_string(), key.clone());
            self.jobs_by_ns
                .entry(key.0.clone())
                .or_default()
                .insert(key.1.clone());
            self.jobs.insert(key, j);
        }
        old
    }

    /// Keeps the newer of the cached Job and `job` (a write's answer may
    /// come before its watch event).
    fn newer_job(&mut self, job: &Value) {
        let key = namespaced_key(job);
        if self.jobs.get(&key).is_none_or(|cur| rv(cur) < rv(job)) {
            self.set_job(key, Some(job.clone()));
        }
    }

    fn index(&mut self, key: &Key, pod: &Value, add: bool) {
        let set = match controller_of(pod) {
            Some(r) => {
                if !is_job_ref(r) {
                    return;
                }
                self.owned
                    .entry(r["uid"].as_str().unwrap_or_default().to_string())
                    .or_default()
            }
            None => self.orphans.entry(key.0.clone()).or_default(),
        };
        if add {
            set.insert(key.clone());
        } else {
            set.remove(key);
        }
    }

    fn set_pod(&mut self, key: Key, pod: Option<Value>) -> Option<Value> {
        let old = self.pods.remove(&key);
        if let Some(o) = &old {
            self.index(&key, o, false);
        }
        if let Some(p) = pod {
            self.index(&key, &p, true);
            self.pods.insert(key, p);
        }
        old
    }

    /// The Job a controller reference names, if it is in the cache.
    fn job_of(&self, pod: &Value) -> Option<Key> {
        let r = controller_of(pod).filter(|r| is_job_ref(r))?;
        let key = self.job_by_uid.get(r["uid"].as_str()?)?;
        (self.jobs.get(key)?["metadata"]["name"] == r["name"]).then(|| key.clone())
    }

    /// Jobs of the pod's namespace whose selector matches it (for
    /// adoption).
    fn matching_jobs(&self, pod: &Value) -> Vec<Key> {
        let ns = meta::namespace(pod).unwrap_or_default();
        self.jobs_by_ns
            .get(ns)
            .into_iter()
            .flatten()
            .filter_map(|n| {
                let key = (ns.to_string(), n.clone());
                let job = self.jobs.get(&key)?;
                selector(job)
                    .filter(|s| !s.is_empty() && s.matches_object(pod))
                    .map(|_| key)
            })
            .collect()
    }
}

/// Pods a Job expects to see created or deleted (upstream's
/// `ControllerExpectations`).
#[derive(Default)]
struct Expectations(Mutex<HashMap<Key, (i64, i64, Instant)>>);

impl Expectations {
    fn satisfied(&self, key: &Key) -> bool {
        match lock(&self.0).get(key) {
            None => true,
            Some((add, del, at)) => (*add <= 0 && *del <= 0) || at.elapsed() > EXPECTATIONS_TIMEOUT,
        }
    }
    fn expect(&self, key: &Key, add: i64, del: i64) {
        lock(&self.0).insert(key.clone(), (add, del, Instant::now()));
    }
    fn created(&self, key: &Key) {
        if let Some(e) = lock(&self.0).get_mut(key) {
            e.0 -= 1;
        }
    }
    fn deleted(&self, key: &Key) {
        if let Some(e) = lock(&self.0).get_mut(key) {
            e.1 -= 1;
        }
    }
    fn forget(&self, key: &Key) {
        lock(&self.0).remove(key);
    }
}

struct JobController {
    client: Client,
    config: Config,
    cache: Arc<Mutex<Cache>>,
    queue: Weak<Queue<Item>>,
    expectations: Expectations,
    /// Pod uids whose finalizer removal is not seen yet, per Job.
    finalizers: Mutex<HashMap<Key, HashSet<String>>>,
    backoff: Mutex<HashMap<Key, Backoff>>,
    /// When each Job's timer (deadline, backoff) fires.
    timers: Mutex<HashMap<Key, Instant>>,
    /// Whether the first list of Jobs and of pods is in the cache (no Job
    /// syncs before: it would not see its pods and create them again).
    synced: [std::sync::atomic::AtomicBool; 2],
}

/// What one sync computed and writes.
struct SyncCtx {
    key: Key,
    job: Value,
    pods: Vec<Value>,
    finished: Option<Value>,
    succeeded_ix: Intervals,
    prev_succeeded_ix: Intervals,
    expected_rm: HashSet<String>,
    uncounted_failed: HashSet<String>,
    terminating: i64,
    backoff: Backoff,
}

fn uncounted(job: &Value, which: &str) -> Vec<String> {
    job["status"]["uncountedTerminatedPods"][which]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

fn set_uncounted(job: &mut Value, which: &str, uids: &[String]) {
    let u = &mut job["status"]["uncountedTerminatedPods"];
    if !u.is_object() {
        *u = json!({});
    }
    if uids.is_empty() {
        u.as_object_mut().map(|m| m.remove(which));
    } else {
        u[which] = json!(uids);
    }
}

fn counter(job: &Value, field: &str) -> i64 {
    job["status"][field].as_i64().unwrap_or(0)
}

/// Sets a counter as the API writes it (zero `active`/`succeeded`/`failed`
/// omitted, `ready`/`terminating` always written).
fn set_counter(job: &mut Value, field: &str, n: i64) {
    let omit_zero = matches!(field, "active" | "succeeded" | "failed");
    if n == 0 && omit_zero {
        job["status"].as_object_mut().map(|m| m.remove(field));
    } else {
        job["status"][field] = json!(n);
    }
}

/// Moves uncounted pods whose finalizer is gone to the counters
/// (`cleanUncountedPodsWithoutFinalizers`). Whether the status changed.
fn clean_uncounted(job: &mut Value, with_finalizer: &HashSet<String>) -> bool {
    let mut changed = false;
    for (which, field) in [("succeeded", "succeeded"), ("failed", "failed")] {
        let all = uncounted(job, which);
        let keep: Vec<String> = all
            .iter()
            .filter(|u| with_finalizer.contains(*u))
            .cloned()
            .collect();
        if keep.len() != all.len() {
            changed = true;
            let n = counter(job, field) + (all.len() - keep.len()) as i64;
            set_counter(job, field, n);
            set_uncounted(job, which, &keep);
        }
    }
    changed
}

fn condition_type(c: &Option<Value>) -> Option<&str> {
    c.as_ref().and_then(|c| c["type"].as_str())
}

impl JobController {
    fn resources(&self, plural: &str) -> Arc<crate::resources::Resource> {
        let group = if plural == "pods" { "" } else { "batch" };
        self.client.objects.resources.builtin(group, "v1", plural)
    }

    /// Queues the Job again after `delay`, unless a sooner timer is armed.
    fn arm(&self, key: &Key, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut timers = lock(&self.timers);
            if let Some(prev) = timers.get(key)
                && *prev > Instant::now()
                && *prev <= at
            {
                return;
            }
            timers.insert(key.clone(), at);
        }
        let queue = self.queue.clone();
        let item = Item::Job(key.0.clone(), key.1.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            if let Some(q) = queue.upgrade() {
                q.add(item);
            }
        });
    }

    /// The Job's pods: owned ones that still match, orphans that match
    /// (adopted), with owned ones that stopped matching released
    /// (upstream's `ClaimPods`).
    async fn claim_pods(&self, job: &Value) -> Result<Vec<Value>> {
        let (ns, _) = namespaced_key(job);
        let sel = selector(job);
        let (owned, orphans): (Vec<Value>, Vec<Value>) = {
            let c = lock(&self.cache);
            let get = |k: &Key| c.pods.get(k).cloned();
            (
                c.owned
                    .get(uid(job))
                    .into_iter()
                    .flatten()
                    .filter_map(get)
                    .collect(),
                c.orphans
                    .get(&ns)
                    .into_iter()
                    .flatten()
                    .filter_map(get)
                    .collect(),
            )
        };
        let matches = |p: &Value| sel.as_ref().is_some_and(|s| s.matches_object(p));
        let deleting = job["metadata"]["deletionTimestamp"].is_string();
        let pods_info = self.resources("pods");
        let mut out = Vec::with_capacity(owned.len());
        for pod in owned {
            if matches(&pod) || deleting {
                out.push(pod);
                continue;
            }
            // Release: drop our owner reference.
            let refs = pod["metadata"]["ownerReferences"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if let Some(i) = refs.iter().position(|r| r["uid"] == uid(job)) {
                let patch = json!([
                    {"op": "test", "path": format!("/metadata/ownerReferences/{i}/uid"), "value": uid(job)},
                    {"op": "remove", "path": format!("/metadata/ownerReferences/{i}")},
                ]);
                let (pns, pname) = namespaced_key(&pod);
                match self
                    .client
                    .patch(
                        &pods_info,
                        Some(&pns),
                        &pname,
                        None,
                        PatchType::Json,
                        &patch,
                    )
                    .await
                {
                    Ok(_) | Err(ApiError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let adoptable: Vec<Value> = orphans
            .into_iter()
            .filter(|p| matches(p) && !p["metadata"]["deletionTimestamp"].is_string())
            .collect();
        if adoptable.is_empty() || deleting {
            return Ok(out);
        }
        // Recheck the Job with a read of the store before adopting.
        let fresh = self
            .client
            .get(
                &self.resources("jobs"),
                Some(&ns),
                meta::name(job).unwrap_or_default(),
            )
            .await?;
        if uid(&fresh) != uid(job) || fresh["metadata"]["deletionTimestamp"].is_string() {
            return Ok(out);
        }
        for pod in adoptable {
            let mut refs = pod["metadata"]["ownerReferences"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            refs.push(json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "name": meta::name(job), "uid": uid(job),
                "controller": true, "blockOwnerDeletion": true,
            }));
            let mut finalizers = meta::finalizers(&pod);
            if !finalizers.iter().any(|f| f == batch::TRACKING_FINALIZER) {
                finalizers.push(batch::TRACKING_FINALIZER.into());
            }
            let patch = json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": meta::str_field(&pod, "resourceVersion")},
                {"op": "add", "path": "/metadata/ownerReferences", "value": refs},
                {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
            ]);
            let (pns, pname) = namespaced_key(&pod);
            match self
                .client
                .patch(
                    &pods_info,
                    Some(&pns),
                    &pname,
                    None,
                    PatchType::Json,
                    &patch,
                )
                .await
            {
                Ok(adopted) => out.push(adopted),
                Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    async fn remove_finalizer(&self, pod: &Value) -> Result<()> {
        if !batch::has_tracking_finalizer(pod) {
            return Ok(());
        }
        let (ns, name) = namespaced_key(pod);
        let patch = json!({"metadata": {
            "$deleteFromPrimitiveList/finalizers": [batch::TRACKING_FINALIZER],
        }});
        match self
            .client
            .patch(
                &self.resources("pods"),
                Some(&ns),
                &name,
                None,
                PatchType::StrategicMerge,
                &patch,
            )
            .await
        {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_pod(&self, pod: &Value) -> Result<()> {
        let (ns, name) = namespaced_key(pod);
        let pre = Preconditions {
            uid: Some(uid(pod).to_string()),
            ..Default::default()
        };
        self.client
            .delete(&self.resources("pods"), Some(&ns), &name, &pre)
            .await
            .map(|_| ())
    }

    /// Deletes active pods of a finished Job, keeping their finalizers
    /// (`deleteActivePods`). Ready pods deleted, pods deleted, first error.
    async fn delete_active(&self, pods: &[&Value]) -> (i64, i64, Option<ApiError>) {
        let results = futures::future::join_all(pods.iter().map(|p| self.delete_pod(p))).await;
        let (mut ready, mut deleted, mut err) = (0, 0, None);
        for (p, r) in pods.iter().zip(results) {
            match r {
                Ok(()) | Err(ApiError::NotFound(_)) => {
                    deleted += 1;
                    if batch::pod_ready(p) {
                        ready += 1;
                    }
                }
                Err(e) => err = Some(e),
            }
        }
        (ready, deleted, err)
    }

    /// Removes the finalizers of pods and deletes them, expecting their
    /// deletions (`deleteJobPods`).
    async fn delete_job_pods(
        &self,
        key: &Key,
        job: &Value,
        pods: &[&Value],
    ) -> (i64, i64, Option<ApiError>) {
        let results = futures::future::join_all(pods.iter().map(|p| async move {
            self.remove_finalizer(p).await?;
            self.delete_pod(p).await
        }))
        .await;
        let (mut ready, mut deleted, mut err) = (0, 0, None);
        for (p, r) in pods.iter().zip(results) {
            match r {
                Ok(()) => {
                    deleted += 1;
                    if batch::pod_ready(p) {
                        ready += 1;
                    }
                    self.client
                        .event(
                            job,
                            "Normal",
                            "SuccessfulDelete",
                            &format!("Deleted pod: {}", meta::name(p).unwrap_or_default()),
                        )
                        .await;
                }
                Err(e) => {
                    // The informer will not see this deletion.
                    self.expectations.deleted(key);
                    if !matches!(e, ApiError::NotFound(_)) {
                        self.client
                            .event(
                                job,
                                "Warning",
                                "FailedDelete",
                                &format!("Error deleting: {e}"),
                            )
                            .await;
                        err = Some(e);
                    } else {
                        deleted += 1;
                    }
                }
            }
        }
        (ready, deleted, err)
    }

    /// Creates `count` pods (with `indexes` for an Indexed Job) in slow-start
    /// batches. How many were created, and the first error.
    async fn create_pods(
        &self,
        key: &Key,
        job: &Value,
        count: usize,
        mut indexes: Vec<u32>,
    ) -> (i64, Option<ApiError>) {
        self.expectations.expect(key, count as i64, 0);
        let pods_info = self.resources("pods");
        let (ns, _) = key.clone();
        let mut left = count;
        let mut batch_size = left.min(1);
        let mut created = 0;
        let mut first_err = None;
        while left > 0 {
            let batch: Vec<Option<u32>> = (0..batch_size)
                .map(|_| {
                    if indexes.is_empty() {
                        None
                    } else {
                        Some(indexes.remove(0))
                    }
                })
                .collect();
            let results = futures::future::join_all(batch.iter().map(|ix| {
                let pod = batch::pod_from_template(job, *ix);
                self.client.create(&pods_info, Some(&ns), pod)
            }))
            .await;
            let mut failed = false;
            for r in results {
                match r {
                    Ok(pod) => {
                        created += 1;
                        self.client
                            .event(
                                job,
                                "Normal",
                                "SuccessfulCreate",
                                &format!("Created pod: {}", meta::name(&pod).unwrap_or_default()),
                            )
                            .await;
                    }
                    Err(e) => {
                        failed = true;
                        self.expectations.created(key);
                        self.client
                            .event(
                                job,
                                "Warning",
                                "FailedCreate",
                                &format!("Error creating: {e}"),
                            )
                            .await;
                        first_err.get_or_insert(e);
                    }
                }
            }
            left -= batch_size;
            if failed {
                // The rest are not tried; they will not be seen.
                for _ in 0..left {
                    self.expectations.created(key);
                }
                break;
            }
            batch_size = (batch_size * 2).min(left);
        }
        (created, first_err)
    }

    /// Upstream's `manageJob`: the number of active pods after creating or
    /// deleting what `parallelism`, `completions` and `suspend` call for.
    async fn manage(
        &self,
        s: &mut SyncCtx,
        active_pods: &[&Value],
        succeeded: i64,
        ready: &mut i64,
    ) -> (i64, Option<ApiError>) {
        let job = s.job.clone();
        let key = s.key.clone();
        let active = active_pods.len() as i64;
        if batch::suspended(&job) {
            let mut order = active_pods.to_vec();
            order.sort_by(|a, b| batch::remove_order(a, b));
            self.expectations.expect(&key, 0, order.len() as i64);
            let (r, removed, err) = self.delete_job_pods(&key, &job, &order).await;
            *ready -= r;
            s.terminating += removed;
            return (active - removed, err);
        }
        let want = i64::from(batch::want_active(
            &job,
            active as u32,
            succeeded.max(0) as u32,
        ));
        let rm_at_least = (active - want).max(0) as usize;
        let mut to_delete: Vec<&Value> = Vec::new();
        let mut left: Vec<&Value> = active_pods.to_vec();
        if batch::indexed(&job) {
            let (rm, keep) =
                indexed::duplicates_for_removal(active_pods, batch::completions(&job).unwrap_or(0));
            to_delete = rm.iter().map(|i| active_pods[*i]).collect();
            left = keep.iter().map(|i| active_pods[*i]).collect();
        }
        if to_delete.len() < rm_at_least {
            left.sort_by(|a, b| batch::remove_order(a, b));
            let more = rm_at_least - to_delete.len();
            to_delete.extend(left.into_iter().take(more));
        }
        to_delete.truncate(batch::MAX_PER_SYNC);
        if !to_delete.is_empty() {
            self.expectations.expect(&key, 0, to_delete.len() as i64);
            let (r, removed, err) = self.delete_job_pods(&key, &job, &to_delete).await;
            *ready -= r;
            s.terminating += removed;
            return (active - removed, err);
        }
        let terminating = if batch::only_replace_failed(&job) {
            s.terminating
        } else {
            0
        };
        let diff = want - terminating - active;
        if diff <= 0 {
            return (active, None);
        }
        let wait = s.backoff.remaining(
            chrono::Utc::now(),
            self.config.backoff_base,
            self.config.backoff_max,
        );
        if !wait.is_zero() {
            self.arm(&key, wait);
            return (active, None);
        }
        let mut diff = (diff as usize).min(batch::MAX_PER_SYNC);
        let mut indexes = Vec::new();
        if batch::indexed(&job) {
            indexes = indexed::first_pending(
                &s.succeeded_ix,
                active_pods,
                diff,
                batch::completions(&job).unwrap_or(0),
            );
            diff = indexes.len();
        }
        if diff == 0 {
            return (active, None);
        }
        let (created, err) = self.create_pods(&key, &job, diff, indexes).await;
        (active + created, err)
    }

    /// Writes the Job's status (a precondition on its resourceVersion, as
    /// upstream's `UpdateStatus`), keeping the answer as the Job.
    async fn write_status(&self, job: &mut Value) -> Result<()> {
        let (ns, name) = namespaced_key(job);
        let out = self
            .client
            .replace(
                &self.resources("jobs"),
                Some(&ns),
                &name,
                Some("status"),
                job.clone(),
            )
            .await?;
        lock(&self.cache).newer_job(&out);
        *job = out;
        Ok(())
    }

    /// Upstream's `trackJobStatusAndRemoveFinalizers`.
    async fn track(&self, s: &mut SyncCtx, mut needs_flush: bool) -> Result<()> {
        let is_indexed = batch::indexed(&s.job);
        let completions = batch::completions(&s.job).unwrap_or(0);
        if is_indexed {
            s.pods
                .sort_by_key(|p| indexed::completion_index(p).map_or(-1, i64::from));
        }
        let mut with_finalizer: HashSet<String> = s
            .pods
            .iter()
            .filter(|p| batch::has_tracking_finalizer(p) && !s.expected_rm.contains(uid(p)))
            .map(|p| uid(p).to_string())
            .collect();
        if clean_uncounted(&mut s.job, &with_finalizer) {
            needs_flush = true;
        }
        let mut to_remove: Vec<Value> = Vec::new();
        let mut new_ix: Vec<u32> = Vec::new();
        let mut un_s = uncounted(&s.job, "succeeded");
        let mut un_f = uncounted(&s.job, "failed");
        let mut reached_max = false;
        let job_deleting = s.job["metadata"]["deletionTimestamp"].is_string();
        let failing =
            s.finished.is_some() && condition_type(&s.finished) != Some("SuccessCriteriaMet");
        let policy = s.job["spec"]["podFailurePolicy"].clone();
        for pod in &s.pods {
            let pu = uid(pod).to_string();
            if !batch::has_tracking_finalizer(pod) || s.expected_rm.contains(&pu) {
                continue;
            }
            let failed = batch::pod_failed(pod, &s.job);
            let can_remove =
                job_deleting || s.finished.is_some() || batch::pod_succeeded(pod) || failed;
            if !can_remove {
                continue;
            }
            to_remove.push(pod.clone());
            if batch::pod_succeeded(pod) && !s.uncounted_failed.contains(&pu) {
                if is_indexed {
                    if let Some(ix) = indexed::completion_index(pod)
                        && ix < completions
                        && !s.prev_succeeded_ix.has(ix)
                    {
                        new_ix.push(ix);
                        needs_flush = true;
                    }
                } else if !un_s.contains(&pu) {
                    un_s.push(pu.clone());
                    needs_flush = true;
                }
            } else if failed || failing {
                let ix = indexed::completion_index(pod);
                let valid = !is_indexed || ix.is_some_and(|ix| ix < completions);
                if !s.uncounted_failed.contains(&pu) && !un_f.contains(&pu) && valid {
                    let counts =
                        !policy.is_object() || failure_policy::matches(&policy, pod).count_failed;
                    if counts {
                        un_f.push(pu.clone());
                        needs_flush = true;
                    }
                }
            }
            if new_ix.len() + un_s.len() + un_f.len() >= batch::MAX_PER_SYNC {
                reached_max = true;
                break;
            }
        }
        set_uncounted(&mut s.job, "succeeded", &un_s);
        set_uncounted(&mut s.job, "failed", &un_f);
        if is_indexed {
            new_ix.sort_unstable();
            s.succeeded_ix = s.succeeded_ix.with(&new_ix);
            let text = s.succeeded_ix.to_string();
            if s.job["status"]["completedIndexes"]
                .as_str()
                .unwrap_or_default()
                != text
            {
                needs_flush = true;
            }
            set_counter(&mut s.job, "succeeded", i64::from(s.succeeded_ix.total()));
            if text.is_empty() {
                s.job["status"]
                    .as_object_mut()
                    .map(|m| m.remove("completedIndexes"));
            } else {
                s.job["status"]["completedIndexes"] = json!(text);
            }
        }
        let now = batch::stamp(chrono::Utc::now());
        let mut conditions: Vec<Value> = s.job["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(c) = s.finished.clone() {
            let (reason, message) = (
                c["reason"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            );
            match c["type"].as_str() {
                Some("FailureTarget") => {
                    conditions.push(c);
                    needs_flush = true;
                    s.finished = Some(batch::new_condition(
                        "Failed", "True", &reason, &message, &now,
                    ));
                }
                Some("SuccessCriteriaMet") => {
                    if !batch::success_criteria_met(&s.job) {
                        conditions.push(c);
                        needs_flush = true;
                    }
                    s.finished = Some(batch::new_condition(
                        "Complete", "True", &reason, &message, &now,
                    ));
                }
                _ => {}
            }
        }
        if !conditions.is_empty() {
            s.job["status"]["conditions"] = json!(conditions);
        }
        // Flush what was counted before removing finalizers.
        if needs_flush {
            self.write_status(&mut s.job).await?;
            lock(&self.backoff).insert(s.key.clone(), s.backoff);
            needs_flush = false;
        }
        let mut rm_err = None;
        if !to_remove.is_empty() {
            lock(&self.finalizers)
                .entry(s.key.clone())
                .or_default()
                .extend(to_remove.iter().map(|p| uid(p).to_string()));
            let results =
                futures::future::join_all(to_remove.iter().map(|p| self.remove_finalizer(p))).await;
            for (p, r) in to_remove.iter().zip(results) {
                match r {
                    Ok(()) => {
                        with_finalizer.remove(uid(p));
                    }
                    Err(e) => {
                        if let Some(set) = lock(&self.finalizers).get_mut(&s.key) {
                            set.remove(uid(p));
                        }
                        rm_err = Some(e);
                    }
                }
            }
        }
        if clean_uncounted(&mut s.job, &with_finalizer) {
            needs_flush = true;
        }
        if let Some(e) = rm_err {
            if needs_flush {
                self.write_status(&mut s.job).await?;
            }
            return Err(e);
        }
        let finished = !reached_max && self.enact_finished(s, &now);
        if finished {
            needs_flush = true;
        }
        if needs_flush {
            self.write_status(&mut s.job).await?;
            if finished {
                self.record_finished(s).await;
            }
        }
        if reached_max {
            // More pods to count: come back.
            if let Some(q) = self.queue.upgrade() {
                q.add(Item::Job(s.key.0.clone(), s.key.1.clone()));
            }
        }
        Ok(())
    }

    /// Adds `Complete` or `Failed` once nothing is uncounted or
    /// terminating (`enactJobFinished`).
    fn enact_finished(&self, s: &mut SyncCtx, now: &str) -> bool {
        let Some(c) = s.finished.clone() else {
            return false;
        };
        let job = &mut s.job;
        if !uncounted(job, "succeeded").is_empty() || !uncounted(job, "failed").is_empty() {
            return false;
        }
        if s.terminating > 0 {
            return false;
        }
        let ty = c["type"].as_str().unwrap_or_default();
        let mut conditions: Vec<Value> = job["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        batch::ensure_condition(
            &mut conditions,
            ty,
            "True",
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default(),
            now,
        );
        job["status"]["conditions"] = json!(conditions);
        if ty == "Complete" {
            job["status"]["completionTime"] = json!(now);
        }
        true
    }

    async fn record_finished(&self, s: &SyncCtx) {
        let Some(c) = &s.finished else { return };
        if c["type"] == "Complete" {
            if let Some(n) = batch::completions(&s.job)
                && counter(&s.job, "succeeded") > i64::from(n)
            {
                self.client
                    .event(
                        &s.job,
                        "Warning",
                        "TooManySucceededPods",
                        "Too many succeeded pods running after completion count reached",
                    )
                    .await;
            }
            self.client
                .event(&s.job, "Normal", "Completed", "Job completed")
                .await;
        } else {
            self.client
                .event(
                    &s.job,
                    "Warning",
                    c["reason"].as_str().unwrap_or_default(),
                    c["message"].as_str().unwrap_or_default(),
                )
                .await;
        }
    }

    /// Upstream's `syncJob`.
    async fn sync_job(&self, key: &Key) -> Result<Action> {
        use std::sync::atomic::Ordering::Acquire;
        if !self.synced.iter().all(|s| s.load(Acquire)) {
            return Ok(Action::RequeueAfter(Duration::from_millis(200)));
        }
        let job = lock(&self.cache).jobs.get(key).cloned();
        let Some(mut job) = job else {
            self.expectations.forget(key);
            lock(&self.finalizers).remove(key);
            lock(&self.backoff).remove(key);
            lock(&self.timers).remove(key);
            return Ok(Action::Done);
        };
        if job["spec"]["managedBy"]
            .as_str()
            .is_some_and(|m| m != batch::JOB_CONTROLLER_NAME)
        {
            return Ok(Action::Done);
        }
        if batch::finished(&job).is_some() {
            lock(&self.backoff).remove(key);
            return Ok(Action::Done);
        }
        if !matches!(
            job["spec"]["completionMode"].as_str(),
            None | Some("NonIndexed") | Some("Indexed")
        ) {
            self.client
                .event(
                    &job,
                    "Warning",
                    "UnknownCompletionMode",
                    "Skipped Job sync because completion mode is unknown",
                )
                .await;
            return Ok(Action::Done);
        }
        if !job["status"].is_object() {
            job["status"] = json!({});
        }
        if !job["status"]["uncountedTerminatedPods"].is_object() {
            job["status"]["uncountedTerminatedPods"] = json!({});
        }
        let now = chrono::Utc::now();
        let now_s = batch::stamp(now);
        let satisfied = self.expectations.satisfied(key);
        let pods = self.claim_pods(&job).await?;
        let expected_rm = lock(&self.finalizers).get(key).cloned().unwrap_or_default();
        let is_indexed = batch::indexed(&job);
        let completions = batch::completions(&job);
        let un_s: HashSet<String> = uncounted(&job, "succeeded").into_iter().collect();
        let un_f: HashSet<String> = uncounted(&job, "failed").into_iter().collect();
        let (new_succeeded, new_failed, terminating, ready) = {
            let valid = |p: &Value| {
                batch::has_tracking_finalizer(p)
                    && !expected_rm.contains(uid(p))
                    && (!is_indexed
                        || indexed::completion_index(p)
                            .is_some_and(|ix| ix < completions.unwrap_or(0)))
            };
            let new_s: Vec<&Value> = pods
                .iter()
                .filter(|p| valid(p) && !un_s.contains(uid(p)) && batch::pod_succeeded(p))
                .collect();
            let new_f: Vec<&Value> = pods
                .iter()
                .filter(|p| valid(p) && !un_f.contains(uid(p)) && batch::pod_failed(p, &job))
                .collect();
            let active: Vec<&Value> = pods.iter().filter(|p| batch::pod_active(p)).collect();
            (
                new_s
                    .iter()
                    .filter_map(|p| batch::pod_finish_time(p))
                    .collect::<Vec<_>>(),
                new_f
                    .iter()
                    .filter(|p| {
                        !job["spec"]["podFailurePolicy"].is_object()
                            || failure_policy::matches(&job["spec"]["podFailurePolicy"], p)
                                .count_failed
                    })
                    .map(|p| batch::pod_finish_time(p).unwrap_or(now))
                    .collect::<Vec<_>>(),
                pods.iter().filter(|p| batch::pod_terminating(p)).count() as i64,
                active.iter().filter(|p| batch::pod_ready(p)).count() as i64,
            )
        };
        let mut succeeded =
            counter(&job, "succeeded") + new_succeeded.len() as i64 + un_s.len() as i64;
        let failed = counter(&job, "failed") + new_failed.len() as i64 + un_f.len() as i64;
        if job["status"]["startTime"].is_null() && !batch::suspended(&job) {
            job["status"]["startTime"] = json!(now_s);
        }
        let backoff = lock(&self.backoff)
            .get(key)
            .copied()
            .unwrap_or_default()
            .observe(&new_succeeded, &new_failed);
        let mut finished: Option<Value> = None;
        let mut requeue = None;
        if batch::success_criteria_met(&job) {
            finished = batch::condition(&job, "SuccessCriteriaMet").cloned();
        }
        if finished.is_none() {
            if let Some(ft) = batch::failure_target(&job) {
                finished = Some(batch::new_condition(
                    "Failed",
                    "True",
                    ft["reason"].as_str().unwrap_or_default(),
                    ft["message"].as_str().unwrap_or_default(),
                    &now_s,
                ));
            } else if job["spec"]["podFailurePolicy"].is_object()
                && let Some(msg) =
                    pods.iter()
                        .filter(|p| batch::pod_failed(p, &job))
                        .find_map(|p| {
                            failure_policy::matches(&job["spec"]["podFailurePolicy"], p).fail_job
                        })
            {
                finished = Some(batch::new_condition(
                    "FailureTarget",
                    "True",
                    "PodFailurePolicy",
                    &msg,
                    &now_s,
                ));
            }
        }
        if finished.is_none() {
            let refs: Vec<&Value> = pods.iter().collect();
            let deadline = batch::deadline_left(&job, now);
            if failed > i64::from(batch::backoff_limit(&job))
                || batch::past_backoff_limit_on_failure(&job, &refs)
            {
                finished = Some(batch::new_condition(
                    "FailureTarget",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    &now_s,
                ));
            } else if deadline.is_some_and(|d| d.is_zero()) {
                finished = Some(batch::new_condition(
                    "FailureTarget",
                    "True",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                    &now_s,
                ));
            } else if let Some(d) = deadline {
                requeue = Some(d);
            }
        }
        let (mut prev_ix, mut cur_ix) = (Intervals::default(), Intervals::default());
        if is_indexed {
            let c = completions.unwrap_or(0);
            prev_ix = Intervals::parse(
                job["status"]["completedIndexes"]
                    .as_str()
                    .unwrap_or_default(),
                c,
            );
            let mut fresh: Vec<u32> = pods
                .iter()
                .filter(|p| batch::pod_succeeded(p) && batch::has_tracking_finalizer(p))
                .filter_map(indexed::completion_index)
                .filter(|ix| *ix < c)
                .collect();
            fresh.sort_unstable();
            fresh.dedup();
            cur_ix = prev_ix.with(&fresh);
            succeeded = i64::from(cur_ix.total());
        }
        let mut s = SyncCtx {
            key: key.clone(),
            job,
            pods,
            finished,
            succeeded_ix: cur_ix,
            prev_succeeded_ix: prev_ix,
            expected_rm,
            uncounted_failed: un_f,
            terminating,
            backoff,
        };
        let active_pods: Vec<Value> = s
            .pods
            .iter()
            .filter(|p| batch::pod_active(p))
            .cloned()
            .collect();
        let active_refs: Vec<&Value> = active_pods.iter().collect();
        let mut active = active_refs.len() as i64;
        let mut ready = ready;
        let mut manage_err = None;
        let mut suspend_changed = false;
        if s.finished.is_some() {
            let (r, deleted, err) = self.delete_active(&active_refs).await;
            if deleted != active || !satisfied {
                s.finished = None;
            }
            active -= deleted;
            s.terminating += deleted;
            ready -= r;
            manage_err = err;
        } else {
            let mut managed = false;
            if satisfied && !s.job["metadata"]["deletionTimestamp"].is_string() {
                let (a, err) = self
                    .manage(&mut s, &active_refs, succeeded, &mut ready)
                    .await;
                active = a;
                manage_err = err;
                managed = true;
            }
            let complete = match completions {
                None => succeeded > 0 && active == 0,
                Some(c) => succeeded >= i64::from(c) && active == 0,
            };
            if complete {
                s.finished = Some(batch::new_condition(
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    &now_s,
                ));
            } else if managed {
                let mut conditions: Vec<Value> = s.job["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if batch::suspended(&s.job) {
                    if batch::ensure_condition(
                        &mut conditions,
                        "Suspended",
                        "True",
                        "JobSuspended",
                        "Job suspended",
                        &now_s,
                    ) {
                        suspend_changed = true;
                        self.client
                            .event(&s.job, "Normal", "Suspended", "Job suspended")
                            .await;
                    }
                } else if batch::ensure_condition(
                    &mut conditions,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                    &now_s,
                ) {
                    suspend_changed = true;
                    self.client
                        .event(&s.job, "Normal", "Resumed", "Job resumed")
                        .await;
                    // The deadline counts from the resume.
                    s.job["status"]["startTime"] = json!(now_s);
                }
                if suspend_changed {
                    s.job["status"]["conditions"] = json!(conditions);
                }
            }
        }
        let needs_update = suspend_changed
            || active != counter(&s.job, "active")
            || s.job["status"]["ready"].as_i64() != Some(ready)
            || s.job["status"]["terminating"].as_i64() != Some(s.terminating)
            || s.job["status"]["startTime"]
                != lock(&self.cache)
                    .jobs
                    .get(key)
                    .map_or(Value::Null, |j| j["status"]["startTime"].clone());
        set_counter(&mut s.job, "active", active);
        set_counter(&mut s.job, "ready", ready);
        set_counter(&mut s.job, "terminating", s.terminating);
        self.track(&mut s, needs_update).await?;
        if let Some(e) = manage_err {
            return Err(e);
        }
        if let Some(d) = requeue {
            self.arm(key, d);
        }
        Ok(Action::Done)
    }

    /// Removes the tracking finalizer of a pod whose Job is gone or
    /// finished (`handleOrphanPod`).
    async fn sync_orphan(&self, key: &Key) -> Result<Action> {
        let (pod, job) = {
            let c = lock(&self.cache);
            let Some(pod) = c.pods.get(key).cloned() else {
                return Ok(Action::Done);
            };
            let job = c.job_of(&pod).and_then(|k| c.jobs.get(&k).cloned());
            (pod, job)
        };
        if !batch::has_tracking_finalizer(&pod) {
            return Ok(Action::Done);
        }
        if let Some(job) = job {
            let external = job["spec"]["managedBy"]
                .as_str()
                .is_some_and(|m| m != batch::JOB_CONTROLLER_NAME);
            if external || batch::finished(&job).is_none() {
                return Ok(Action::Done);
            }
        }
        self.remove_finalizer(&pod).await?;
        Ok(Action::Done)
    }
}

#[async_trait::async_trait]
impl Reconcile for JobController {
    type Key = Item;

    async fn reconcile(&self, item: &Item) -> Result<Action> {
        match item {
            Item::Job(ns, name) => self.sync_job(&(ns.clone(), name.clone())).await,
            Item::Orphan(ns, name) => self.sync_orphan(&(ns.clone(), name.clone())).await,
        }
    }
}

/// What a pod event means for the Jobs (upstream's `addPod`, `updatePod`,
/// `deletePod`): the items to queue.
fn on_pod(ctrl: &JobController, cache: &mut Cache, pod: Value, deleted: bool) -> Vec<Item> {
    let key = namespaced_key(&pod);
    let old = cache.set_pod(key.clone(), (!deleted).then(|| pod.clone()));
    let mut out = Vec::new();
    let job_item = |k: &Key| Item::Job(k.0.clone(), k.1.clone());
    let orphan = Item::Orphan(key.0.clone(), key.1.clone());
    let job = cache.job_of(&pod);
    let has_fin = batch::has_tracking_finalizer(&pod);
    let terminating = pod["metadata"]["deletionTimestamp"].is_string();
    if deleted || terminating {
        match &job {
            Some(j) => {
                ctrl.expectations.deleted(j);
                if deleted && let Some(set) = lock(&ctrl.finalizers).get_mut(j) {
                    set.remove(uid(&pod));
                }
                out.push(job_item(j));
            }
            None if has_fin => out.push(orphan),
            None => {}
        }
        if !deleted && controller_of(&pod).is_none() {
            out.extend(cache.matching_jobs(&pod).iter().map(job_item));
        }
        return out;
    }
    let Some(old) = old else {
        // Added.
        match &job {
            Some(j) => {
                ctrl.expectations.created(j);
                out.push(job_item(j));
            }
            None if controller_of(&pod).is_none() => {
                if has_fin {
                    out.push(orphan);
                }
                out.extend(cache.matching_jobs(&pod).iter().map(job_item));
            }
            None => {
                if has_fin {
                    out.push(orphan);
                }
            }
        }
        return out;
    };
    if rv(&old) == rv(&pod) {
        return out;
    }
    let old_ctrl = controller_of(&old).cloned();
    let new_ctrl = controller_of(&pod).cloned();
    if old_ctrl != new_ctrl
        && old_ctrl.is_some()
        && let Some(j) = cache.job_of(&old)
    {
        if !has_fin && let Some(set) = lock(&ctrl.finalizers).get_mut(&j) {
            set.remove(uid(&pod));
        }
        out.push(job_item(&j));
    }
    if new_ctrl.is_some() {
        if let Some(j) = job {
            if !has_fin && let Some(set) = lock(&ctrl.finalizers).get_mut(&j) {
                set.remove(uid(&pod));
            }
            out.push(job_item(&j));
        } else if has_fin {
            out.push(orphan);
        }
        return out;
    }
    if has_fin {
        out.push(orphan);
    }
    if old["metadata"]["labels"] != pod["metadata"]["labels"] || old_ctrl != new_ctrl {
        out.extend(cache.matching_jobs(&pod).iter().map(job_item));
    }
    out
}

/// Runs the Job controller while this replica leads.
pub fn spawn(client: Client, config: Config, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Item>> = Queue::new("job");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let cache: Arc<Mutex<Cache>> = Default::default();
        let ctrl = Arc::new(JobController {
            client: client.clone(),
            config,
            cache: cache.clone(),
            queue: Arc::downgrade(&queue),
            expectations: Default::default(),
            finalizers: Default::default(),
            backoff: Default::default(),
            timers: Default::default(),
            synced: Default::default(),
        });
        let queue = queue.clone();
        async move {
            let objects = ctrl.client.objects.clone();
            let jobs = objects.resources.builtin("batch", "v1", "jobs");
            let pods = objects.resources.builtin("", "v1", "pods");
            let (c1, c2, c3, c4) = (cache.clone(), cache.clone(), cache.clone(), cache.clone());
            let (q1, q2) = (queue.clone(), queue.clone());
            let (w1, w2) = (Arc::downgrade(&ctrl), Arc::downgrade(&ctrl));
            let follow_jobs = objects.follow(
                &jobs,
                move |listed| {
                    let mut c = lock(&c1);
                    let keys: Vec<Key> = c.jobs.keys().cloned().collect();
                    for k in keys {
                        c.set_job(k, None);
                    }
                    for j in listed {
                        c.set_job(namespaced_key(j), Some(j.clone()));
                    }
                    if let Some(ctrl) = w1.upgrade() {
                        ctrl.synced[0].store(true, std::sync::atomic::Ordering::Release);
                    }
                },
                move |job, deleted| {
                    let key = namespaced_key(&job);
                    let mut orphans = Vec::new();
                    {
                        let mut c = lock(&c2);
                        if deleted {
                            c.set_job(key.clone(), None);
                            // Its pods' finalizers go (`cleanupPodFinalizers`).
                            for k in c.owned.get(uid(&job)).into_iter().flatten() {
                                if c.pods.get(k).is_some_and(batch::has_tracking_finalizer) {
                                    orphans.push(Item::Orphan(k.0.clone(), k.1.clone()));
                                }
                            }
                        } else if c.jobs.get(&key).is_none_or(|cur| rv(cur) < rv(&job)) {
                            c.set_job(key.clone(), Some(job));
                        }
                    }
                    q1.add(Item::Job(key.0, key.1));
                    for o in orphans {
                        q1.add(o);
                    }
                    async {}
                },
            );
            let weak = Arc::downgrade(&ctrl);
            let q3 = queue.clone();
            let follow_pods = objects.follow(
                &pods,
                move |listed| {
                    // The whole list at once (a relist: every Job looks again).
                    let jobs: Vec<Key> = {
                        let mut c = lock(&c3);
                        let keys: Vec<Key> = c.pods.keys().cloned().collect();
                        for k in keys {
                            c.set_pod(k, None);
                        }
                        for p in listed {
                            c.set_pod(namespaced_key(p), Some(p.clone()));
                        }
                        c.jobs.keys().cloned().collect()
                    };
                    if let Some(ctrl) = w2.upgrade() {
                        ctrl.synced[1].store(true, std::sync::atomic::Ordering::Release);
                    }
                    for (ns, name) in jobs {
                        q3.add(Item::Job(ns, name));
                    }
                },
                move |pod, deleted| {
                    if let Some(ctrl) = weak.upgrade() {
                        let items = {
                            let mut c = lock(&c4);
                            on_pod(&ctrl, &mut c, pod, deleted)
                        };
                        for i in items {
                            q2.add(i);
                        }
                    }
                    async {}
                },
            );
            tokio::join!(
                follow_jobs,
                follow_pods,
                super::run(queue.clone(), ctrl.clone(), 4)
            );
        }
    }));
}
