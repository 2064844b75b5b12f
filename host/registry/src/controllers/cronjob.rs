//! kube-controller-manager's **CronJob controller** (`cronjob-controller`,
//! upstream's `cronjob_controllerv2.go`, as the ServiceAccount
//! `cronjob-controller` with upstream's role): creates a Job for each
//! schedule time of a CronJob, as [`wasm_apiserver_api::batch::cronjob`]
//! computes them, one key per CronJob, queued when it or one of its Jobs
//! changes and again at its next schedule time.
//!
//! The Job for a time is named `<cronjob>-<minutes since the epoch>`, so
//! a restart or a leader change never creates it twice (the name is the
//! lock; an existing Job of the CronJob is taken into `status.active`).
//! `concurrencyPolicy` (`Allow`, `Forbid`: `JobAlreadyActive`, `Replace`:
//! the running Jobs deleted), `startingDeadlineSeconds` (`MissSchedule`),
//! more than 100 missed times (`TooManyMissedTimes`, one Job for the most
//! recent), `suspend`, `timeZone`, `successfulJobsHistoryLimit` and
//! `failedJobsHistoryLimit` (the oldest finished Jobs deleted), and
//! upstream's events and status (`active`, `lastScheduleTime`,
//! `lastSuccessfulTime`).
//!
//! Its notion of now is a [`Clock`]: the wall clock, or for tests one that
//! runs faster (`--cronjob-controller-clock-speed`, hidden), so a
//! minute-by-minute schedule can be watched in seconds.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key};
use crate::options::{Preconditions, Propagation};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use wasm_apiserver_api::batch::cronjob::{self as cj_logic, Missed};
use wasm_apiserver_api::batch::{self, stamp};
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its identity and `--controllers` name.
pub const NAME: &str = "cronjob-controller";

/// The controller's clock: the wall clock, or one running `speed` times as
/// fast from when it was made (tests).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    speed: f64,
    start: Instant,
    wall: DateTime<Utc>,
}

impl Clock {
    pub fn new(speed: f64) -> Clock {
        Clock {
            speed: if speed.is_finite() && speed > 0.0 {
                speed
            } else {
                1.0
            },
            start: Instant::now(),
            wall: Utc::now(),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        if self.speed == 1.0 {
            return Utc::now();
        }
        let elapsed = self.start.elapsed().mul_f64(self.speed);
        self.wall + chrono::Duration::from_std(elapsed).unwrap_or_default()
    }

    /// How long `d` of this clock's time takes in real time.
    pub fn real(&self, d: Duration) -> Duration {
        d.div_f64(self.speed)
    }
}

type Key = (String, String);

fn uid(obj: &Value) -> &str {
    meta::str_field(obj, "uid").unwrap_or_default()
}

/// The uid of the CronJob controlling a Job.
fn parent(job: &Value) -> Option<String> {
    job["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == "CronJob")
        .and_then(|r| r["uid"].as_str().map(String::from))
}

#[derive(Default)]
struct Cache {
    cronjobs: HashMap<Key, Value>,
    by_uid: HashMap<String, Key>,
    jobs: HashMap<Key, Value>,
    /// CronJob uid → its Jobs.
    children: HashMap<String, BTreeSet<Key>>,
}

impl Cache {
    fn set_cronjob(&mut self, key: Key, cj: Option<Value>) {
        if let Some(old) = self.cronjobs.remove(&key) {
            self.by_uid.remove(uid(&old));
        }
        if let Some(cj) = cj {
            self.by_uid.insert(uid(&cj).to_string(), key.clone());
            self.cronjobs.insert(key, cj);
        }
    }

    fn set_job(&mut self, key: Key, job: Option<Value>) -> Option<String> {
        if let Some(old) = self.jobs.remove(&key)
            && let Some(p) = parent(&old)
            && let Some(set) = self.children.get_mut(&p)
        {
            set.remove(&key);
            if set.is_empty() {
                self.children.remove(&p);
            }
        }
        let p = job.as_ref().and_then(parent);
        if let Some(job) = job {
            if let Some(p) = &p {
                self.children
                    .entry(p.clone())
                    .or_default()
                    .insert(key.clone());
            }
            self.jobs.insert(key, job);
        }
        p
    }
}

struct CronJobController {
    client: Client,
    clock: Clock,
    cache: Arc<Mutex<Cache>>,
    queue: Weak<Queue<Key>>,
    timers: Mutex<HashMap<Key, Instant>>,
}

fn active(cj: &Value) -> Vec<Value> {
    cj["status"]["active"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn set_active(cj: &mut Value, refs: Vec<Value>) {
    if refs.is_empty() {
        if let Some(s) = cj["status"].as_object_mut() {
            s.remove("active");
        }
    } else {
        cj["status"]["active"] = json!(refs);
    }
}

fn remove_active(cj: &mut Value, job_uid: &str) {
    let refs: Vec<Value> = active(cj)
        .into_iter()
        .filter(|r| r["uid"] != job_uid)
        .collect();
    set_active(cj, refs);
}

fn in_active(cj: &Value, job_uid: &str) -> bool {
    active(cj).iter().any(|r| r["uid"] == job_uid)
}

fn job_ref(job: &Value) -> Value {
    json!({
        "kind": "Job",
        "namespace": meta::namespace(job),
        "name": meta::name(job),
        "uid": uid(job),
        "apiVersion": "batch/v1",
        "resourceVersion": meta::str_field(job, "resourceVersion"),
    })
}

impl CronJobController {
    fn jobs_info(&self) -> Arc<crate::resources::Resource> {
        self.client.objects.resources.builtin("batch", "v1", "jobs")
    }

    /// Queues the CronJob after `delay` of the controller's clock, unless
    /// a sooner timer is armed.
    fn arm(&self, key: &Key, delay: Duration) {
        let at = Instant::now() + self.clock.real(delay);
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
        let key = key.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            if let Some(q) = queue.upgrade() {
                q.add(key);
            }
        });
    }

    /// Deletes a Job in the background and drops it from `active`
    /// (upstream's `deleteJob`). Whether it went.
    async fn delete_job(&self, cj: &mut Value, job: &Value) -> bool {
        let (ns, name) = namespaced_key(job);
        let pre = Preconditions {
            propagation: Some(Propagation::Background),
            ..Default::default()
        };
        match self
            .client
            .delete(&self.jobs_info(), Some(&ns), &name, &pre)
            .await
        {
            Ok(_) | Err(ApiError::NotFound(_)) => {}
            Err(e) => {
                self.client
                    .event(cj, "Warning", "FailedDelete", &format!("Deleted job: {e}"))
                    .await;
                return false;
            }
        }
        remove_active(cj, uid(job));
        self.client
            .event(
                cj,
                "Normal",
                "SuccessfulDelete",
                &format!("Deleted job {name}"),
            )
            .await;
        true
    }

    /// The history limits (`cleanupFinishedJobs`). Whether the status
    /// changed.
    async fn cleanup(&self, cj: &mut Value, jobs: &[Value]) -> bool {
        let limits = (
            cj["spec"]["successfulJobsHistoryLimit"].as_u64(),
            cj["spec"]["failedJobsHistoryLimit"].as_u64(),
        );
        let mut changed = false;
        for (ty, limit) in [("Complete", limits.0), ("Failed", limits.1)] {
            let Some(limit) = limit else { continue };
            let done: Vec<&Value> = jobs
                .iter()
                .filter(|j| batch::finished(j) == Some(ty))
                .collect();
            for i in cj_logic::beyond_history(&done, limit as usize) {
                if self.delete_job(cj, done[i]).await {
                    changed = true;
                }
            }
        }
        changed
    }

    /// Upstream's `syncCronJob`: when to look again, whether the status
    /// changed.
    async fn sync_cronjob(
        &self,
        cj: &mut Value,
        jobs: &[Value],
    ) -> Result<(Option<Duration>, bool)> {
        let now = self.clock.now();
        let mut update = false;
        let (ns, name) = namespaced_key(cj);
        let cronjobs = self
            .client
            .objects
            .resources
            .builtin("batch", "v1", "cronjobs");
        for j in jobs {
            let found = in_active(cj, uid(j));
            let finished = batch::finished(j);
            if !found && finished.is_none() {
                let fresh = self.client.get(&cronjobs, Some(&ns), &name).await?;
                if in_active(&fresh, uid(j)) {
                    *cj = fresh;
                    continue;
                }
                self.client
                    .event(
                        cj,
                        "Warning",
                        "UnexpectedJob",
                        &format!(
                            "Saw a job that the controller did not create or forgot: {}",
                            meta::name(j).unwrap_or_default()
                        ),
                    )
                    .await;
            } else if found && let Some(status) = finished {
                remove_active(cj, uid(j));
                self.client
                    .event(
                        cj,
                        "Normal",
                        "SawCompletedJob",
                        &format!(
                            "Saw completed job: {}, status: {status}",
                            meta::name(j).unwrap_or_default()
                        ),
                    )
                    .await;
                update = true;
            } else if finished == Some("Complete")
                && let Some(done) = j["status"]["completionTime"].as_str()
            {
                let last = cj["status"]["lastSuccessfulTime"]
                    .as_str()
                    .and_then(batch::time);
                if last.is_none_or(|l| batch::time(done).is_some_and(|d| d > l)) {
                    cj["status"]["lastSuccessfulTime"] = json!(done);
                    update = true;
                }
            }
        }
        // Active Jobs that are gone.
        let children: std::collections::HashSet<&str> = jobs.iter().map(uid).collect();
        for r in active(cj) {
            if children.contains(r["uid"].as_str().unwrap_or_default()) {
                continue;
            }
            let jname = r["name"].as_str().unwrap_or_default().to_string();
            match self.client.get(&self.jobs_info(), Some(&ns), &jname).await {
                Err(ApiError::NotFound(_)) => {
                    self.client
                        .event(
                            cj,
                            "Normal",
                            "MissingJob",
                            &format!("Active job went missing: {jname}"),
                        )
                        .await;
                    remove_active(cj, r["uid"].as_str().unwrap_or_default());
                    update = true;
                }
                Err(e) => return Err(e),
                Ok(_) => {}
            }
        }
        if cj["metadata"]["deletionTimestamp"].is_string() {
            return Ok((None, update));
        }
        if let Some(tz) = cj["spec"]["timeZone"].as_str()
            && let Err(e) = cj_logic::zone(cj)
        {
            self.client
                .event(
                    cj,
                    "Warning",
                    "UnknownTimeZone",
                    &format!("invalid timeZone: {tz:?}: {e}"),
                )
                .await;
            return Ok((None, update));
        }
        if cj["spec"]["suspend"] == true {
            return Ok((None, update));
        }
        let (text, unsupported) = cj_logic::format_schedule(cj);
        if unsupported {
            self.client
                .event(
                    cj,
                    "Warning",
                    "UnsupportedSchedule",
                    &format!("CRON_TZ or TZ used in schedule {text:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"),
                )
                .await;
        }
        let sched = match cj_logic::schedule(cj) {
            Ok(s) => s,
            Err(e) => {
                self.client
                    .event(
                        cj,
                        "Warning",
                        "UnparseableSchedule",
                        &format!(
                            "unparseable schedule: {:?} : {e}",
                            cj["spec"]["schedule"].as_str().unwrap_or_default()
                        ),
                    )
                    .await;
                return Ok((None, update));
            }
        };
        let (scheduled, missed, err) = cj_logic::next_time(cj, now, &sched);
        if let Some(e) = err {
            self.client
                .event(
                    cj,
                    "Warning",
                    "InvalidSchedule",
                    &format!(
                        "invalid schedule: {} : {e}",
                        cj["spec"]["schedule"].as_str().unwrap_or_default()
                    ),
                )
                .await;
            return Ok((None, update));
        }
        if missed == Missed::Many && scheduled.is_some() {
            self.client
                .event(
                    cj,
                    "Warning",
                    "TooManyMissedTimes",
                    "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                )
                .await;
        }
        let next = |cj: &Value| Some(cj_logic::next_delay(cj, now, &sched));
        let Some(scheduled) = scheduled else {
            return Ok((next(cj), update));
        };
        if cj_logic::too_late(cj, scheduled, now) {
            self.client
                .event(
                    cj,
                    "Warning",
                    "MissSchedule",
                    &format!(
                        "Missed scheduled time to start a job: {}",
                        scheduled.format("%a, %d %b %Y %H:%M:%S %z")
                    ),
                )
                .await;
            return Ok((next(cj), update));
        }
        let job_name = cj_logic::job_name(cj, scheduled);
        let last = cj["status"]["lastScheduleTime"]
            .as_str()
            .and_then(batch::time);
        if active(cj).iter().any(|r| r["name"] == job_name.as_str()) || last == Some(scheduled) {
            return Ok((next(cj), update));
        }
        let policy = cj["spec"]["concurrencyPolicy"].as_str().unwrap_or("Allow");
        if policy == "Forbid" && !active(cj).is_empty() {
            self.client
                .event(
                    cj,
                    "Normal",
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid",
                )
                .await;
            return Ok((next(cj), update));
        }
        if policy == "Replace" {
            for r in active(cj) {
                let jname = r["name"].as_str().unwrap_or_default();
                let job = match self.client.get(&self.jobs_info(), Some(&ns), jname).await {
                    Ok(j) => j,
                    Err(e) => {
                        self.client
                            .event(cj, "Warning", "FailedGet", &format!("Get job: {e}"))
                            .await;
                        return Err(e);
                    }
                };
                if !self.delete_job(cj, &job).await {
                    return Err(ApiError::ServiceUnavailable(format!(
                        "could not replace job {ns}/{jname}"
                    )));
                }
                update = true;
            }
        }
        let request = cj_logic::job_from_template(cj, scheduled);
        let created = match self
            .client
            .create(&self.jobs_info(), Some(&ns), request)
            .await
        {
            Ok(job) => {
                self.client
                    .event(
                        cj,
                        "Normal",
                        "SuccessfulCreate",
                        &format!("Created job {}", meta::name(&job).unwrap_or_default()),
                    )
                    .await;
                job
            }
            Err(ApiError::AlreadyExists(_)) => {
                let job = self
                    .client
                    .get(&self.jobs_info(), Some(&ns), &job_name)
                    .await?;
                if parent(&job).as_deref() != Some(uid(cj)) || in_active(cj, uid(&job)) {
                    return Ok((None, update));
                }
                tracing::info!(cronjob = %format!("{ns}/{name}"), job = %job_name, "job already exists");
                job
            }
            Err(e) => {
                self.client
                    .event(
                        cj,
                        "Warning",
                        "FailedCreate",
                        &format!("Error creating job: {e}"),
                    )
                    .await;
                return Err(e);
            }
        };
        let mut refs = active(cj);
        refs.push(job_ref(&created));
        set_active(cj, refs);
        cj["status"]["lastScheduleTime"] = json!(stamp(scheduled));
        Ok((next(cj), true))
    }
}

#[async_trait::async_trait]
impl Reconcile for CronJobController {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (cj, jobs) = {
            let c = lock(&self.cache);
            let Some(cj) = c.cronjobs.get(key).cloned() else {
                lock(&self.timers).remove(key);
                return Ok(Action::Done);
            };
            let jobs: Vec<Value> = c
                .children
                .get(uid(&cj))
                .into_iter()
                .flatten()
                .filter_map(|k| c.jobs.get(k).cloned())
                .collect();
            (cj, jobs)
        };
        let mut copy = cj.clone();
        if !copy["status"].is_object() {
            copy["status"] = json!({});
        }
        let cleaned = self.cleanup(&mut copy, &jobs).await;
        let (requeue, synced, err) = match self.sync_cronjob(&mut copy, &jobs).await {
            Ok((r, u)) => (r, u, None),
            Err(e) => (None, false, Some(e)),
        };
        if cleaned || synced {
            let (ns, name) = key.clone();
            let cronjobs = self
                .client
                .objects
                .resources
                .builtin("batch", "v1", "cronjobs");
            // The status as computed, on the object it was computed from.
            let mut obj = cj.clone();
            obj["status"] = copy["status"].clone();
            if meta::str_field(&copy, "resourceVersion") != meta::str_field(&cj, "resourceVersion")
            {
                obj["metadata"]["resourceVersion"] = copy["metadata"]["resourceVersion"].clone();
            }
            let out = self
                .client
                .replace(&cronjobs, Some(&ns), &name, Some("status"), obj)
                .await?;
            let mut c = lock(&self.cache);
            let newer = c.cronjobs.get(key).is_none_or(|cur| {
                meta::str_field(cur, "resourceVersion").and_then(|v| v.parse::<u64>().ok())
                    < meta::str_field(&out, "resourceVersion").and_then(|v| v.parse::<u64>().ok())
            });
            if newer {
                c.set_cronjob(key.clone(), Some(out));
            }
        }
        if let Some(d) = requeue {
            self.arm(key, d);
        }
        match err {
            Some(e) => Err(e),
            None => Ok(Action::Done),
        }
    }
}

/// Runs the CronJob controller while this replica leads.
pub fn spawn(client: Client, clock: Clock, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new("cronjob");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let cache: Arc<Mutex<Cache>> = Default::default();
        let ctrl = Arc::new(CronJobController {
            client: client.clone(),
            clock,
            cache: cache.clone(),
            queue: Arc::downgrade(&queue),
            timers: Default::default(),
        });
        let queue = queue.clone();
        async move {
            let objects = ctrl.client.objects.clone();
            let cronjobs = objects.resources.builtin("batch", "v1", "cronjobs");
            let jobs = objects.resources.builtin("batch", "v1", "jobs");
            let (c1, c2, c3, c4) = (cache.clone(), cache.clone(), cache.clone(), cache.clone());
            let (q1, q2) = (queue.clone(), queue.clone());
            // Jobs first, so a CronJob's first sync sees its Jobs.
            let (jobs_listed, listed) = tokio::sync::watch::channel(false);
            let follow_jobs = objects.follow(
                &jobs,
                move |all| {
                    let mut c = lock(&c1);
                    let keys: Vec<Key> = c.jobs.keys().cloned().collect();
                    for k in keys {
                        c.set_job(k, None);
                    }
                    for j in all {
                        c.set_job(namespaced_key(j), Some(j.clone()));
                    }
                    jobs_listed.send_replace(true);
                },
                move |job, deleted| {
                    let key = namespaced_key(&job);
                    let parent_key = {
                        let mut c = lock(&c2);
                        let p = c.set_job(key.clone(), (!deleted).then(|| job.clone()));
                        p.or_else(|| parent(&job))
                            .and_then(|u| c.by_uid.get(&u).cloned())
                    };
                    if let Some(k) = parent_key {
                        q1.add(k);
                    }
                    async {}
                },
            );
            let objects2 = objects.clone();
            let follow_cronjobs = async move {
                let mut listed = listed;
                let _ = listed.wait_for(|l| *l).await;
                objects2
                    .follow(
                        &cronjobs,
                        move |all| {
                            let mut c = lock(&c3);
                            let keys: Vec<Key> = c.cronjobs.keys().cloned().collect();
                            for k in keys {
                                c.set_cronjob(k, None);
                            }
                            for cj in all {
                                c.set_cronjob(namespaced_key(cj), Some(cj.clone()));
                            }
                        },
                        move |cj, deleted| {
                            let key = namespaced_key(&cj);
                            {
                                let mut c = lock(&c4);
                                let newer = c.cronjobs.get(&key).is_none_or(|cur| {
                                    meta::str_field(cur, "resourceVersion")
                                        .and_then(|v| v.parse::<u64>().ok())
                                        <= meta::str_field(&cj, "resourceVersion")
                                            .and_then(|v| v.parse::<u64>().ok())
                                });
                                if deleted {
                                    c.set_cronjob(key.clone(), None);
                                } else if newer {
                                    c.set_cronjob(key.clone(), Some(cj));
                                }
                            }
                            q2.add(key);
                            async {}
                        },
                    )
                    .await
            };
            tokio::join!(
                follow_jobs,
                follow_cronjobs,
                super::run(queue.clone(), ctrl.clone(), 2)
            );
        }
    }));
}
