//! Shadow versions of admission plugins (`spec.shadow`): a second module
//! that sees every request its plugin sees, whose decision is never
//! enforced.
//!
//! * **Off the request path**: the chain hands the shadow the request the
//!   plugin saw and the plugin's decision *after* that decision is made;
//!   the shadow runs on a task of the plugin runtime's lowest-priority
//!   thread ([`Runtime::idle_time`](wasm_apiserver_plugins::Runtime::idle_time)),
//!   so it takes only CPU time the requests leave. A request waits for
//!   nothing but a clone of its admission request, and only when a permit
//!   is free.
//! * **Bounded**: at most [`PERMITS`] shadow calls of a plugin run at once,
//!   and its calls may use at most [`CPU_SHARE`] of a core (2%) (a token bucket
//!   of the calls' CPU time, [`BURST`] deep): a request arriving while the shadow is
//!   busy or over its share is `skipped`, and counted, so under a light
//!   load the shadow sees every request and under saturation a sample, at
//!   a cost the requests hardly feel; each call runs under the plugin's
//!   limits; after [`TRIP_AFTER`]
//!   failures in a row (traps, timeouts, memory) the shadow is paused, for
//!   one second and then twice as long after each new failure (up to a
//!   minute): a hostile shadow costs at most a bounded share of CPU and is
//!   never felt by a request.
//! * **Compared**: allowed against denied, and between two allowed
//!   answers the JSON patch. Every outcome (`agree`, `disagree`, `error`,
//!   `skipped`) is counted on `/metrics`
//!   (`wasm_apiserver_admission_shadow_decisions_total`); the last
//!   [`KEEP`] disagreements (request uid, the object, both decisions) are
//!   kept for the plugin's `status.shadow`, which every replica adds its
//!   counts to ([`Stats::take`]).
//!
//! The counts live per plugin name, so replacing the module (or promoting
//! the shadow to `spec.module`) keeps them.

use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasm_apiserver_api::admission::Phase;
use wasm_apiserver_plugins::{AdmissionPlugin, AdmissionRequest, AdmissionResponse};

/// Shadow calls of one plugin that may run at once.
pub const PERMITS: usize = 1;
/// Share of one core a plugin's shadow calls may use.
pub const CPU_SHARE: f64 = 0.02;
/// Call time a shadow may spend at once after an idle spell.
pub const BURST: Duration = Duration::from_millis(50);
/// Disagreements kept for the status.
pub const KEEP: usize = 10;
/// Failures in a row that pause a shadow.
pub const TRIP_AFTER: u32 = 3;
/// Largest object (JSON bytes) kept whole in a disagreement.
const MAX_OBJECT_BYTES: usize = 16 << 10;

/// What a plugin (or its shadow) decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Allowed { patch: Option<Value> },
    Denied { code: u16, message: String },
    Failed(String),
}

impl Decision {
    pub fn of(result: &Result<AdmissionResponse, (&'static str, String)>) -> Decision {
        match result {
            Ok(r) if r.allowed => Decision::Allowed {
                patch: r
                    .patch
                    .clone()
                    .filter(|p| p.as_array().is_none_or(|a| !a.is_empty())),
            },
            Ok(r) => Decision::Denied {
                code: r.status.as_ref().map_or(403, |s| s.code),
                message: r
                    .status
                    .as_ref()
                    .map(|s| s.message.clone())
                    .unwrap_or_default(),
            },
            Err((kind, e)) => Decision::Failed(format!("{kind}: {e}")),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Decision::Allowed { patch } => json!({"allowed": true, "patch": patch}),
            Decision::Denied { code, message } => {
                json!({"allowed": false, "code": code, "message": message})
            }
            Decision::Failed(e) => json!({"error": e}),
        }
    }
}

/// Counts of a plugin's shadow since the last [`Stats::take`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Pending {
    pub agree: u64,
    pub disagree: u64,
    pub error: u64,
    pub skipped: u64,
    /// Disagreements, oldest first.
    pub last: Vec<Value>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        *self == Pending::default()
    }
}

/// Call time a shadow may still spend (seconds; negative: in debt).
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new() -> Self {
        Bucket {
            tokens: BURST.as_secs_f64(),
            at: Instant::now(),
        }
    }

    /// Refills at [`CPU_SHARE`]; whether a call may start.
    fn may_start(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * CPU_SHARE;
        self.tokens = (self.tokens + refill).min(BURST.as_secs_f64());
        self.at = now;
        self.tokens > 0.0
    }

    fn spend(&mut self, took: Duration) {
        self.tokens -= took.as_secs_f64();
    }
}

#[derive(Default)]
struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
    pause: Duration,
}

/// The shadow counts and state of one plugin name.
pub struct Stats {
    agree: AtomicU64,
    disagree: AtomicU64,
    error: AtomicU64,
    skipped: AtomicU64,
    pending: Mutex<Pending>,
    breaker: Mutex<Breaker>,
    bucket: Mutex<Bucket>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            agree: AtomicU64::new(0),
            disagree: AtomicU64::new(0),
            error: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            pending: Mutex::default(),
            breaker: Mutex::default(),
            bucket: Mutex::new(Bucket::new()),
            permits: Arc::new(tokio::sync::Semaphore::new(PERMITS)),
        }
    }
}

impl Stats {
    /// The counts gathered since the last call (for `status.shadow`).
    pub fn take(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock().expect("shadow lock"))
    }

    /// Adds back counts a status write could not record.
    pub fn give_back(&self, p: Pending) {
        let mut cur = self.pending.lock().expect("shadow lock");
        cur.agree += p.agree;
        cur.disagree += p.disagree;
        cur.error += p.error;
        cur.skipped += p.skipped;
        let mut last = p.last;
        last.append(&mut cur.last);
        let drop = last.len().saturating_sub(KEEP);
        cur.last = last.split_off(drop);
    }

    /// `(outcome, total)` per outcome, for `/metrics`.
    pub fn totals(&self) -> [(&'static str, u64); 4] {
        [
            ("agree", self.agree.load(Ordering::Relaxed)),
            ("disagree", self.disagree.load(Ordering::Relaxed)),
            ("error", self.error.load(Ordering::Relaxed)),
            ("skipped", self.skipped.load(Ordering::Relaxed)),
        ]
    }

    fn count(&self, outcome: &'static str) {
        let (counter, update): (&AtomicU64, fn(&mut Pending)) = match outcome {
            "agree" => (&self.agree, |p| p.agree += 1),
            "disagree" => (&self.disagree, |p| p.disagree += 1),
            "error" => (&self.error, |p| p.error += 1),
            _ => (&self.skipped, |p| p.skipped += 1),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        update(&mut self.pending.lock().expect("shadow lock"));
    }

    fn paused(&self) -> bool {
        let b = self.breaker.lock().expect("breaker lock");
        b.open_until.is_some_and(|t| Instant::now() < t)
    }

    fn record_call(&self, failed: bool) {
        let mut b = self.breaker.lock().expect("breaker lock");
        if !failed {
            *b = Breaker::default();
            return;
        }
        b.failures += 1;
        if b.failures >= TRIP_AFTER {
            b.pause = (b.pause * 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
            b.open_until = Some(Instant::now() + b.pause);
        }
    }
}

/// A loaded shadow module.
pub struct Shadow {
    pub plugin: AdmissionPlugin,
    /// Where the shadow's calls run: the plugin runtime's lowest-priority
    /// thread when it has one, else the caller's tokio runtime.
    pub idle_time: Option<tokio::runtime::Handle>,
    pub stats: Arc<Stats>,
}

impl Shadow {
    /// Hands the shadow the request its plugin saw in `phase` and the
    /// plugin's result; returns at once.
    pub fn observe(
        &self,
        phase: Phase,
        request: &AdmissionRequest,
        enforced: &Result<AdmissionResponse, (&'static str, String)>,
    ) {
        let stats = self.stats.clone();
        if stats.paused() || !stats.bucket.lock().expect("bucket lock").may_start() {
            stats.count("skipped");
            return;
        }
        let Ok(permit) = stats.permits.clone().try_acquire_owned() else {
            stats.count("skipped");
            return;
        };
        let enforced = Decision::of(enforced);
        let request = request.clone();
        let plugin = self.plugin.clone();
        let call = async move {
            let (result, cpu) = OnCpu::new(async {
                match phase {
                    Phase::Mutating => plugin.mutate(&request).await,
                    Phase::Validating => plugin.validate(&request).await,
                }
            })
            .await;
            let result = result.map_err(|e| (e.kind(), e.to_string()));
            drop(permit);
            stats.bucket.lock().expect("bucket lock").spend(cpu);
            stats.record_call(result.is_err());
            let shadow = Decision::of(&result);
            let outcome = match (&enforced, &shadow) {
                (_, Decision::Failed(_)) => "error",
                (a, b) if a == b => "agree",
                (Decision::Denied { .. }, Decision::Denied { .. }) => "agree",
                _ => "disagree",
            };
            stats.count(outcome);
            if outcome == "disagree" {
                tracing::info!(plugin = %plugin.name(), uid = %request.uid, "shadow version disagrees");
                let entry = disagreement(&request, &enforced, &shadow);
                let mut p = stats.pending.lock().expect("shadow lock");
                p.last.push(entry);
                if p.last.len() > KEEP {
                    p.last.remove(0);
                }
            }
        };
        // Below requests: on the preparer's nice-19 thread, the shadow's
        // call takes only CPU time the requests leave (measured: create p50
        // +3% with it there, +7–14% on the request runtime).
        match &self.idle_time {
            Some(rt) => drop(rt.spawn(call)),
            None => drop(tokio::spawn(call)),
        }
    }
}

/// A future that also counts the CPU time its polls take (the polling
/// thread's own clock, so neither the waits between polls nor the time the
/// thread is descheduled in one count): what a shadow call costs on the
/// low-priority thread, where its wall time is mostly waiting for a core.
struct OnCpu<F> {
    fut: std::pin::Pin<Box<F>>,
    cpu: Duration,
}

impl<F: Future> OnCpu<F> {
    fn new(fut: F) -> Self {
        OnCpu {
            fut: Box::pin(fut),
            cpu: Duration::ZERO,
        }
    }
}

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

impl<F: Future> Future for OnCpu<F> {
    type Output = (F::Output, Duration);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let start = thread_cpu();
        let polled = self.fut.as_mut().poll(cx);
        self.cpu += thread_cpu().saturating_sub(start);
        polled.map(|out| (out, self.cpu))
    }
}

/// The object of a disagreement as `status.shadow` keeps it: a Secret's
/// values are redacted, and an object over 16 KiB is cut to its identity.
fn kept_object(request: &AdmissionRequest) -> Value {
    let Some(obj) = request.object.as_ref().or(request.old_object.as_ref()) else {
        return Value::Null;
    };
    let mut obj = obj.clone();
    if request.resource.group.is_empty() && request.resource.resource == "secrets" {
        for field in ["data", "stringData"] {
            if let Some(m) = obj.get_mut(field).and_then(Value::as_object_mut) {
                for v in m.values_mut() {
                    *v = json!("<redacted>");
                }
            }
        }
    }
    if serde_json::to_vec(&obj).map_or(0, |b| b.len()) > MAX_OBJECT_BYTES {
        let m = &obj["metadata"];
        return json!({
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"]},
            "truncated": true,
        });
    }
    obj
}

fn disagreement(request: &AdmissionRequest, enforced: &Decision, shadow: &Decision) -> Value {
    let r = &request.resource;
    json!({
        "time": wasm_apiserver_api::meta::timestamp(chrono::Utc::now()),
        "uid": request.uid,
        "operation": format!("{:?}", request.operation).to_ascii_uppercase(),
        "resource": if r.group.is_empty() {
            format!("{}/{}", r.version, r.resource)
        } else {
            format!("{}/{}/{}", r.group, r.version, r.resource)
        },
        "namespace": request.namespace,
        "name": request.name,
        "object": kept_object(request),
        "enforced": enforced.to_json(),
        "shadow": shadow.to_json(),
    })
}

/// `status.shadow` after adding `p` (this replica's counts since its last
/// write) to `current`; `digest` is the shadow module's.
pub fn merged_status(current: &Value, p: &Pending, digest: &str) -> Value {
    let n = |k: &str| current[k].as_u64().unwrap_or(0);
    let mut last: Vec<Value> = current["last"].as_array().cloned().unwrap_or_default();
    last.extend(p.last.iter().cloned());
    let drop = last.len().saturating_sub(KEEP);
    last.drain(..drop);
    json!({
        "digest": format!("sha256:{digest}"),
        "agreements": n("agreements") + p.agree,
        "disagreements": n("disagreements") + p.disagree,
        "errors": n("errors") + p.error,
        "skipped": n("skipped") + p.skipped,
        "last": last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_compare_by_outcome_and_patch() {
        let allow = |patch: Option<Value>| {
            Ok(AdmissionResponse {
                allowed: true,
                status: None,
                patch,
                warnings: Vec::new(),
                audit_annotations: Default::default(),
            })
        };
        assert_eq!(
            Decision::of(&allow(None)),
            Decision::of(&allow(Some(json!([]))))
        );
        assert_ne!(
            Decision::of(&allow(None)),
            Decision::of(&allow(Some(
                json!([{"op": "add", "path": "/a", "value": 1}])
            )))
        );
        let failed: Result<AdmissionResponse, _> = Err(("timeout", "slow".to_string()));
        assert_eq!(
            Decision::of(&failed),
            Decision::Failed("timeout: slow".into())
        );
    }

    #[test]
    fn status_adds_counts_and_keeps_the_newest() {
        let p = Pending {
            agree: 3,
            disagree: 1,
            last: (0..KEEP as u64).map(|i| json!({"uid": i})).collect(),
            ..Default::default()
        };
        let first = merged_status(&Value::Null, &p, "ab");
        let second = merged_status(
            &first,
            &Pending {
                disagree: 1,
                last: vec![json!({"uid": "new"})],
                ..Default::default()
            },
            "ab",
        );
        assert_eq!(second["agreements"], 3);
        assert_eq!(second["disagreements"], 2);
        let last = second["last"].as_array().unwrap();
        assert_eq!(last.len(), KEEP);
        assert_eq!(last[KEEP - 1]["uid"], "new");
        assert_eq!(last[0]["uid"], 1);
    }

    #[test]
    fn the_bucket_holds_a_shadow_to_its_share() {
        let mut b = Bucket::new();
        assert!(b.may_start());
        b.spend(Duration::from_millis(100));
        assert!(!b.may_start());
        // 50 ms of debt takes 50 ms / CPU_SHARE to repay.
        let repay = Duration::from_millis(50).div_f64(CPU_SHARE);
        b.at -= repay.mul_f64(0.5);
        assert!(!b.may_start());
        b.at -= repay.mul_f64(0.6);
        assert!(b.may_start());
        // Idle time refills only up to the burst.
        b.at -= Duration::from_secs(3600);
        assert!(b.may_start());
        assert!(b.tokens <= BURST.as_secs_f64());
    }

    #[test]
    fn the_breaker_pauses_a_failing_shadow() {
        let s = Stats::default();
        for _ in 0..TRIP_AFTER {
            assert!(!s.paused());
            s.record_call(true);
        }
        assert!(s.paused());
        s.record_call(false);
        assert!(!s.paused());
    }
}
