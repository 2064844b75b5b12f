//! kube-controller-manager's **TTL-after-finished controller**
//! (`ttl-after-finished-controller`, as the ServiceAccount of that name
//! with upstream's role): deletes a finished Job
//! `ttlSecondsAfterFinished` seconds after its `Complete` or `Failed`
//! condition, in the foreground (its pods first), as upstream's
//! `pkg/controller/ttlafterfinished` does. Each Job with a TTL is looked
//! at when it changes and again when its TTL expires; before deleting, a
//! read of the store checks the TTL still holds, and the delete carries
//! that read's `resourceVersion` as a precondition, so a Job whose TTL was
//! just changed is not deleted on stale data.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key};
use crate::options::{Preconditions, Propagation};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use wasm_apiserver_api::batch;
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its identity and `--controllers` name.
pub const NAME: &str = "ttl-after-finished-controller";

type Key = (String, String);

/// Whether the Job waits for its TTL (`needsCleanup`).
fn needs_cleanup(job: &Value) -> bool {
    job["spec"]["ttlSecondsAfterFinished"].is_i64()
        && batch::finished(job).is_some()
        && !job["metadata"]["deletionTimestamp"].is_string()
}

struct Ttl {
    client: Client,
    jobs: Arc<Mutex<HashMap<Key, Value>>>,
    queue: Weak<Queue<Key>>,
    timers: Mutex<HashMap<Key, Instant>>,
}

impl Ttl {
    /// How long the Job still lives; zero when it may go.
    fn left(job: &Value) -> Option<Duration> {
        let at = batch::ttl_expires_at(job)?;
        let now = chrono::Utc::now();
        if let Some(done) = batch::finish_time(job)
            && done > now
        {
            tracing::warn!(job = %meta::name(job).unwrap_or_default(), "job finished in the future (clock skew?)");
        }
        Some((at - now).to_std().unwrap_or_default())
    }

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
        let key = key.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            if let Some(q) = queue.upgrade() {
                q.add(key);
            }
        });
    }
}

#[async_trait::async_trait]
impl Reconcile for Ttl {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let job = lock(&self.jobs).get(key).cloned();
        let Some(job) = job.filter(needs_cleanup) else {
            lock(&self.timers).remove(key);
            return Ok(Action::Done);
        };
        match Self::left(&job) {
            Some(d) if !d.is_zero() => {
                self.arm(key, d);
                return Ok(Action::Done);
            }
            None => return Ok(Action::Done),
            Some(_) => {}
        }
        // The TTL may have changed: check a fresh read before deleting.
        let info = self.client.objects.resources.builtin("batch", "v1", "jobs");
        let (ns, name) = key;
        let fresh = match self.client.get(&info, Some(ns), name).await {
            Ok(j) => j,
            Err(ApiError::NotFound(_)) => return Ok(Action::Done),
            Err(e) => return Err(e),
        };
        if !needs_cleanup(&fresh) {
            return Ok(Action::Done);
        }
        match Self::left(&fresh) {
            Some(d) if !d.is_zero() => {
                self.arm(key, d);
                return Ok(Action::Done);
            }
            None => return Ok(Action::Done),
            Some(_) => {}
        }
        tracing::info!(job = %format!("{ns}/{name}"), "cleaning up job after its TTL");
        let pre = Preconditions {
            uid: meta::str_field(&fresh, "uid").map(String::from),
            resource_version: meta::str_field(&fresh, "resourceVersion")
                .and_then(|v| v.parse().ok()),
            propagation: Some(Propagation::Foreground),
            grace_period_seconds: None,
        };
        match self.client.delete(&info, Some(ns), name, &pre).await {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(Action::Done),
            Err(e) => Err(e),
        }
    }
}

/// Runs the controller while this replica leads.
pub fn spawn(client: Client, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new("ttl_jobs_to_delete");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let jobs: Arc<Mutex<HashMap<Key, Value>>> = Default::default();
        let ctrl = Arc::new(Ttl {
            client: client.clone(),
            jobs: jobs.clone(),
            queue: Arc::downgrade(&queue),
            timers: Default::default(),
        });
        let queue = queue.clone();
        async move {
            let objects = ctrl.client.objects.clone();
            let info = objects.resources.builtin("batch", "v1", "jobs");
            let (j1, j2) = (jobs.clone(), jobs.clone());
            let q = queue.clone();
            let follow = objects.follow(
                &info,
                move |_| lock(&j1).clear(),
                move |job, deleted| {
                    let key = namespaced_key(&job);
                    let wanted = !deleted && needs_cleanup(&job);
                    {
                        let mut all = lock(&j2);
                        if wanted {
                            all.insert(key.clone(), job);
                        } else {
                            all.remove(&key);
                        }
                    }
                    if wanted {
                        q.add(key);
                    }
                    async {}
                },
            );
            tokio::join!(follow, super::run(queue.clone(), ctrl.clone(), 2));
        }
    }));
}
