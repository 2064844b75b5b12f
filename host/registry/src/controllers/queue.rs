//! The work queue every controller runs on, with client-go's semantics
//! (`util/workqueue`): a key is queued at most once however often it is
//! added (de-duplication), a key is never handed to two workers at once
//! (one added while processed is queued again when its worker is done),
//! failures are retried with per-key exponential backoff (5 ms doubling to
//! 1000 s, client-go's `DefaultControllerRateLimiter`), and the queue
//! reports upstream's `workqueue_*` metrics.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// First retry delay of a failing key.
const BASE_DELAY: Duration = Duration::from_millis(5);
/// Longest retry delay.
const MAX_DELAY: Duration = Duration::from_secs(1000);
/// Upstream's histogram buckets: 10 ns to 10 s, exponential by 10.
const BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// A de-duplicating, rate-limited work queue of keys `K`.
pub struct Queue<K> {
    name: String,
    state: Mutex<State<K>>,
    ready: Notify,
    metrics: Metrics,
}

struct State<K> {
    queue: VecDeque<K>,
    /// Keys waiting to be processed (queued, or re-added while processing).
    dirty: HashMap<K, Instant>,
    /// Keys a worker holds, since when.
    processing: HashMap<K, Instant>,
    /// Consecutive failures per key.
    failures: HashMap<K, u32>,
    /// Keys with a delayed add pending (added once per delay).
    waiting: HashSet<K>,
}

#[derive(Default)]
struct Metrics {
    adds: AtomicU64,
    retries: AtomicU64,
    queue_duration: Histogram,
    work_duration: Histogram,
    /// controller-runtime's reconcile metrics, by [`Reconciled`].
    reconciles: [AtomicU64; 4],
    reconcile_time: Histogram,
    active_workers: AtomicU64,
    max_workers: AtomicU64,
}

/// How a reconcile ended (`result` label of
/// `controller_runtime_reconcile_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    Success,
    Error,
    Requeue,
    RequeueAfter,
}

impl Reconciled {
    const ALL: [Reconciled; 4] = [
        Reconciled::Success,
        Reconciled::Error,
        Reconciled::Requeue,
        Reconciled::RequeueAfter,
    ];

    fn label(self) -> &'static str {
        match self {
            Reconciled::Success => "success",
            Reconciled::Error => "error",
            Reconciled::Requeue => "requeue",
            Reconciled::RequeueAfter => "requeue_after",
        }
    }
}

#[derive(Default)]
struct Histogram {
    counts: [AtomicU64; 10],
    count: AtomicU64,
    /// Sum in nanoseconds.
    sum_ns: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Renders the histogram with one label, `label="value"`.
    fn render(&self, out: &mut String, metric: &str, label: &str, value: &str) {
        for (i, b) in BUCKETS.iter().enumerate() {
            let n = self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{metric}_bucket{{{label}=\"{value}\",le=\"{b:e}\"}} {n}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{metric}_bucket{{{label}=\"{value}\",le=\"+Inf\"}} {count}"
        );
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{metric}_sum{{{label}=\"{value}\"}} {sum}");
        let _ = writeln!(out, "{metric}_count{{{label}=\"{value}\"}} {count}");
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Queue<K> {
    pub fn new(name: &str) -> Arc<Self> {
        Arc::new(Queue {
            name: name.to_string(),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashMap::new(),
                processing: HashMap::new(),
                failures: HashMap::new(),
                waiting: HashSet::new(),
            }),
            ready: Notify::new(),
            metrics: Metrics::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: K) {
        let mut s = self.state.lock().expect("queue lock");
        if s.dirty.contains_key(&key) {
            return;
        }
        self.metrics.adds.fetch_add(1, Ordering::Relaxed);
        s.dirty.insert(key.clone(), Instant::now());
        if s.processing.contains_key(&key) {
            return;
        }
        s.queue.push_back(key);
        drop(s);
        self.ready.notify_one();
    }

    /// Queues `key` after `delay` (once, however often this is called
    /// before then).
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        {
            let mut s = self.state.lock().expect("queue lock");
            if !s.waiting.insert(key.clone()) {
                return;
            }
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(q) = weak.upgrade() {
                q.state.lock().expect("queue lock").waiting.remove(&key);
                q.add(key);
            }
        });
    }

    /// Queues `key` again after its backoff: 5 ms, doubling per
    /// consecutive failure, at most 1000 s.
    pub fn add_rate_limited(self: &Arc<Self>, key: K) {
        let n = {
            let mut s = self.state.lock().expect("queue lock");
            let n = s.failures.entry(key.clone()).or_insert(0);
            *n += 1;
            *n
        };
        self.metrics.retries.fetch_add(1, Ordering::Relaxed);
        let delay = BASE_DELAY
            .checked_mul(1u32 << (n - 1).min(30))
            .unwrap_or(MAX_DELAY)
            .min(MAX_DELAY);
        self.add_after(key, delay);
    }

    /// Forgets `key`'s failures (it succeeded).
    pub fn forget(&self, key: &K) {
        self.state.lock().expect("queue lock").failures.remove(key);
    }

    /// How many times `key` failed in a row.
    pub fn failures(&self, key: &K) -> u32 {
        let s = self.state.lock().expect("queue lock");
        s.failures.get(key).copied().unwrap_or(0)
    }

    /// Waits for the next key; the caller owns it until [`Queue::done`].
    pub async fn get(&self) -> K {
        loop {
            let notified = self.ready.notified();
            {
                let mut s = self.state.lock().expect("queue lock");
                if let Some(key) = s.queue.pop_front() {
                    if let Some(since) = s.dirty.remove(&key) {
                        self.metrics.queue_duration.observe(since.elapsed());
                    }
                    s.processing.insert(key.clone(), Instant::now());
                    if !s.queue.is_empty() {
                        self.ready.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    /// Marks `key` processed; queues it again if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let mut s = self.state.lock().expect("queue lock");
        if let Some(since) = s.processing.remove(key) {
            self.metrics.work_duration.observe(since.elapsed());
        }
        if s.dirty.contains_key(key) {
            s.queue.push_back(key.clone());
            drop(s);
            self.ready.notify_one();
        }
    }

    /// Keys waiting to be processed.
    pub fn len(&self) -> usize {
        self.state.lock().expect("queue lock").queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Upstream's `workqueue_*` metrics of this queue, Prometheus text.
    pub fn render_metrics(&self, out: &mut String) {
        let name = &self.name;
        let (depth, unfinished, longest) = {
            let s = self.state.lock().expect("queue lock");
            let now = Instant::now();
            let ages = s.processing.values().map(|t| now - *t);
            let unfinished: f64 = ages.clone().map(|d| d.as_secs_f64()).sum();
            let longest = ages.map(|d| d.as_secs_f64()).fold(0.0, f64::max);
            (s.queue.len(), unfinished, longest)
        };
        let adds = self.metrics.adds.load(Ordering::Relaxed);
        let retries = self.metrics.retries.load(Ordering::Relaxed);
        let _ = writeln!(out, "workqueue_depth{{name=\"{name}\"}} {depth}");
        let _ = writeln!(out, "workqueue_adds_total{{name=\"{name}\"}} {adds}");
        let _ = writeln!(out, "workqueue_retries_total{{name=\"{name}\"}} {retries}");
        let _ = writeln!(
            out,
            "workqueue_unfinished_work_seconds{{name=\"{name}\"}} {unfinished}"
        );
        let _ = writeln!(
            out,
            "workqueue_longest_running_processor_seconds{{name=\"{name}\"}} {longest}"
        );
        self.metrics
            .queue_duration
            .render(out, "workqueue_queue_duration_seconds", "name", name);
        self.metrics
            .work_duration
            .render(out, "workqueue_work_duration_seconds", "name", name);
        // controller-runtime's, for the controller this queue feeds.
        for r in Reconciled::ALL {
            let n = self.metrics.reconciles[r as usize].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "controller_runtime_reconcile_total{{controller=\"{name}\",result=\"{}\"}} {n}",
                r.label()
            );
        }
        let errors = self.metrics.reconciles[Reconciled::Error as usize].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "controller_runtime_reconcile_errors_total{{controller=\"{name}\"}} {errors}"
        );
        self.metrics.reconcile_time.render(
            out,
            "controller_runtime_reconcile_time_seconds",
            "controller",
            name,
        );
        let _ = writeln!(
            out,
            "controller_runtime_active_workers{{controller=\"{name}\"}} {}",
            self.metrics.active_workers.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "controller_runtime_max_concurrent_reconciles{{controller=\"{name}\"}} {}",
            self.metrics.max_workers.load(Ordering::Relaxed)
        );
    }

    /// Records one reconcile of this queue's controller.
    pub fn observe_reconcile(&self, result: Reconciled, took: Duration) {
        self.metrics.reconciles[result as usize].fetch_add(1, Ordering::Relaxed);
        self.metrics.reconcile_time.observe(took);
    }

    /// How many workers the controller runs, and how many are busy.
    pub fn set_workers(&self, max: usize) {
        self.metrics
            .max_workers
            .store(max as u64, Ordering::Relaxed);
    }

    fn worker_busy(&self, busy: bool) {
        if busy {
            self.metrics.active_workers.fetch_add(1, Ordering::Relaxed);
        } else {
            self.metrics.active_workers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Marks a worker busy until the guard drops.
    pub fn busy(self: &Arc<Self>) -> Busy<K> {
        self.worker_busy(true);
        Busy(self.clone())
    }
}

/// A busy worker (`controller_runtime_active_workers`).
pub struct Busy<K: Clone + Eq + Hash + Send + 'static>(Arc<Queue<K>>);

impl<K: Clone + Eq + Hash + Send + 'static> Drop for Busy<K> {
    fn drop(&mut self) {
        self.0.worker_busy(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_queued_once_and_never_held_by_two_workers() {
        let q = Queue::new("t");
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        let first = q.get().await;
        assert_eq!(first, "a");
        // Added while processed: not handed out again until done.
        q.add("a");
        assert_eq!(q.get().await, "b");
        assert!(q.is_empty());
        q.done(&"b");
        assert!(q.is_empty());
        q.done(&"a");
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, "a");
        q.done(&"a");
        let mut text = String::new();
        q.render_metrics(&mut text);
        assert!(
            text.contains("workqueue_adds_total{name=\"t\"} 3"),
            "{text}"
        );
        assert!(text.contains("workqueue_depth{name=\"t\"} 0"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_until_forgotten() {
        let q = Queue::new("t");
        for expected in [5u64, 10, 20, 40] {
            let start = tokio::time::Instant::now();
            q.add_rate_limited("k");
            let k = q.get().await;
            assert_eq!(start.elapsed(), Duration::from_millis(expected));
            q.done(&k);
        }
        assert_eq!(q.failures(&"k"), 4);
        q.forget(&"k");
        let start = tokio::time::Instant::now();
        q.add_rate_limited("k");
        q.get().await;
        assert_eq!(start.elapsed(), Duration::from_millis(5));
    }
}
