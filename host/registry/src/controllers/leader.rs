//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `tools/leaderelection`: a candidate takes the Lease when it is free or
//! its holder has not renewed it for `lease_duration` (measured on the
//! candidate's own clock, from when it last saw the Lease change, so
//! clocks need not agree), renews it every `retry_period`, and steps down
//! when it could not renew for `renew_deadline`. Upstream's durations:
//! 15 s, 10 s, 2 s.
//!
//! The embedded store serves one process, so a server on it leads at once
//! and holds no Lease ([`Election::Alone`]).

use crate::options::WriteOptions;
use crate::store::Objects;
use serde_json::{Value, json};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use wasm_apiserver_api::{ApiError, meta};

const NAMESPACE: &str = "kube-system";

/// Upstream's timing (kube-controller-manager's `--leader-elect-*` flags).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// How singletons decide who runs them.
#[derive(Debug, Clone)]
pub enum Election {
    /// The only replica (embedded store): always the leader.
    Alone,
    /// Replicas share storage: hold Lease `kube-system/<lease>`.
    Lease {
        lease: String,
        identity: String,
        timing: Timing,
    },
}

/// Whether this replica leads, as it changes.
#[derive(Clone)]
pub struct Leadership(
    watch::Receiver<bool>,
    /// Keeps an always-leading replica's sender alive.
    #[allow(dead_code, reason = "held, never read")]
    Option<std::sync::Arc<watch::Sender<bool>>>,
);

impl Leadership {
    /// A replica that always leads.
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        Leadership(rx, Some(std::sync::Arc::new(tx)))
    }

    pub fn is_leader(&self) -> bool {
        *self.0.borrow()
    }

    /// Runs `task()` while this replica leads: started when it becomes the
    /// leader, aborted when it stops leading, started afresh when it leads
    /// again. Never returns.
    pub async fn run_while_leading<F, Fut>(mut self, mut task: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            while !*self.0.borrow_and_update() {
                if self.0.changed().await.is_err() {
                    return;
                }
            }
            let handle = tokio::spawn(task());
            while *self.0.borrow_and_update() {
                if self.0.changed().await.is_err() {
                    break;
                }
            }
            handle.abort();
        }
    }
}

/// Starts the election; the answer follows it.
pub fn start(objects: Objects, election: Election) -> Leadership {
    match election {
        Election::Alone => Leadership::always(),
        Election::Lease {
            lease,
            identity,
            timing,
        } => {
            let (tx, rx) = watch::channel(false);
            tokio::spawn(campaign(objects, lease, identity, timing, tx));
            Leadership(rx, None)
        }
    }
}

/// The Lease as last seen: its holder and renew time, and when (on our
/// clock) it last changed.
struct Observed {
    holder: String,
    renew: String,
    at: Instant,
}

async fn campaign(
    objects: Objects,
    lease: String,
    identity: String,
    timing: Timing,
    tx: watch::Sender<bool>,
) {
    let mut observed: Option<Observed> = None;
    let mut last_renew: Option<Instant> = None;
    loop {
        let leading = *tx.borrow();
        match try_acquire_or_renew(&objects, &lease, &identity, &timing, &mut observed).await {
            Ok(true) => {
                last_renew = Some(Instant::now());
                if !leading {
                    tracing::info!(%lease, %identity, "became leader");
                    let _ = tx.send(true);
                }
            }
            Ok(false) => {
                if leading {
                    tracing::warn!(%lease, %identity, "lost the lease");
                    let _ = tx.send(false);
                }
            }
            Err(e) => {
                tracing::debug!(%lease, error = %e, "leader election attempt failed");
                if leading && last_renew.is_none_or(|t| t.elapsed() > timing.renew_deadline) {
                    tracing::warn!(%lease, %identity, "could not renew the lease in time; stepping down");
                    let _ = tx.send(false);
                }
            }
        }
        // Non-leaders retry with jitter, as upstream (JitterFactor 1.2).
        let wait = if *tx.borrow() {
            timing.retry_period
        } else {
            let jitter = (uuid::Uuid::new_v4().as_u128() % 1000) as f64 / 1000.0 * 1.2;
            timing.retry_period.mul_f64(1.0 + jitter)
        };
        tokio::time::sleep(wait).await;
    }
}

async fn try_acquire_or_renew(
    objects: &Objects,
    lease: &str,
    identity: &str,
    timing: &Timing,
    observed: &mut Option<Observed>,
) -> Result<bool, ApiError> {
    let info = objects
        .resources
        .builtin("coordination.k8s.io", "v1", "leases");
    let opts = WriteOptions::system("leader-election");
    let seconds = timing.lease_duration.as_secs();
    let now = super::micro_time();
    let cur = match objects.get(&info, Some(NAMESPACE), lease).await {
        Err(ApiError::NotFound(_)) => {
            let obj = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": lease, "namespace": NAMESPACE},
                "spec": {"holderIdentity": identity, "leaseDurationSeconds": seconds,
                    "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
            });
            return match objects.create(&info, Some(NAMESPACE), obj, &opts).await {
                Ok(_) => Ok(true),
                Err(ApiError::AlreadyExists(_)) => Ok(false),
                Err(e) => Err(e),
            };
        }
        other => other?,
    };
    let spec = &cur["spec"];
    let holder = spec["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let renew = spec["renewTime"].as_str().unwrap_or_default().to_string();
    if observed
        .as_ref()
        .is_none_or(|o| o.holder != holder || o.renew != renew)
    {
        *observed = Some(Observed {
            holder: holder.clone(),
            renew,
            at: Instant::now(),
        });
    }
    let duration = spec["leaseDurationSeconds"]
        .as_u64()
        .map_or(timing.lease_duration, Duration::from_secs);
    let expired = observed.as_ref().is_none_or(|o| o.at.elapsed() > duration);
    if !holder.is_empty() && holder != identity && !expired {
        return Ok(false);
    }
    let rv = meta::str_field(&cur, "resourceVersion")
        .unwrap_or_default()
        .to_string();
    let result = objects
        .guaranteed_update(&info, Some(NAMESPACE), lease, None, &opts, |live| {
            if meta::str_field(live, "resourceVersion") != Some(rv.as_str()) {
                // Someone else wrote it since we looked: try again later.
                return Err(ApiError::stale(crate::store::target(&info, lease)));
            }
            let mut new: Value = live.clone();
            let s = &mut new["spec"];
            if holder != identity {
                s["acquireTime"] = json!(now);
                s["leaseTransitions"] = json!(s["leaseTransitions"].as_u64().unwrap_or(0) + 1);
            }
            s["holderIdentity"] = json!(identity);
            s["renewTime"] = json!(now);
            s["leaseDurationSeconds"] = json!(seconds);
            Ok(new)
        })
        .await;
    match result {
        Ok(_) => Ok(true),
        Err(ApiError::Conflict(..)) => Ok(false),
        Err(e) => Err(e),
    }
}
