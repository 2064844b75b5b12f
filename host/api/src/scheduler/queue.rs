//! The scheduling queue's bookkeeping (`internal/queue/scheduling_queue.go`),
//! on a clock the caller passes in:
//!
//! * **active**: pods to try, highest `priority` first, then the earliest
//!   queued (upstream's `PrioritySort`);
//! * **backoff**: pods that failed, until their backoff (1 s doubling per
//!   attempt, at most 10 s) has passed;
//! * **unschedulable**: pods no node fitted, until a cluster event that
//!   could make them fit moves them (to backoff while it lasts, else to
//!   active), or they have waited 5 minutes (upstream's
//!   `podMaxInUnschedulablePodsDuration`).
//!
//! A pod that fails in a cycle during which a move was requested goes to
//! backoff rather than unschedulable (upstream's `moveRequestCycle`): the
//! event may have come too late for its cycle.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Upstream's defaults.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    Active,
    Backoff,
    Unschedulable,
    /// Popped, being scheduled.
    InFlight,
}

#[derive(Debug, Clone)]
struct Entry {
    priority: i64,
    /// When it was queued (active order) or last failed (backoff).
    timestamp: Instant,
    attempts: u32,
    at: Where,
    /// The scheduling cycle that popped it.
    cycle: u64,
    seq: u64,
}

/// The queue of pods waiting for a node, keyed by `K`.
#[derive(Debug)]
pub struct SchedulingQueue<K: Clone + Eq + Hash + Ord> {
    entries: HashMap<K, Entry>,
    /// (−priority, timestamp, seq, key): the first is the next.
    active: BTreeSet<(i64, Instant, u64, K)>,
    /// (expiry, seq, key).
    backoff: BTreeSet<(Instant, u64, K)>,
    unschedulable: HashMap<K, Instant>,
    scheduling_cycle: u64,
    move_request_cycle: Option<u64>,
    seq: u64,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl<K: Clone + Eq + Hash + Ord> Default for SchedulingQueue<K> {
    fn default() -> Self {
        SchedulingQueue {
            entries: HashMap::new(),
            active: BTreeSet::new(),
            backoff: BTreeSet::new(),
            unschedulable: HashMap::new(),
            scheduling_cycle: 0,
            move_request_cycle: None,
            seq: 0,
            initial_backoff: INITIAL_BACKOFF,
            max_backoff: MAX_BACKOFF,
        }
    }
}

impl<K: Clone + Eq + Hash + Ord> SchedulingQueue<K> {
    /// Upstream's `calculateBackoffDuration`: the initial backoff doubled
    /// per attempt after the first, capped.
    pub fn backoff_for(&self, attempts: u32) -> Duration {
        let mut d = self.initial_backoff;
        for _ in 1..attempts {
            if d > self.max_backoff.saturating_sub(d) {
                return self.max_backoff;
            }
            d += d;
        }
        d.min(self.max_backoff)
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn unlink(&mut self, key: &K) -> Option<Entry> {
        let e = self.entries.remove(key)?;
        match e.at {
            Where::Active => {
                self.active
                    .remove(&(-e.priority, e.timestamp, e.seq, key.clone()));
            }
            Where::Backoff => {
                let expiry = e.timestamp + self.backoff_for(e.attempts);
                self.backoff.remove(&(expiry, e.seq, key.clone()));
            }
            Where::Unschedulable => {
                self.unschedulable.remove(key);
            }
            Where::InFlight => {}
        }
        Some(e)
    }

    fn put(&mut self, key: K, mut e: Entry, at: Where, now: Instant) {
        e.seq = self.next_seq();
        e.at = at;
        match at {
            Where::Active => {
                self.active
                    .insert((-e.priority, e.timestamp, e.seq, key.clone()));
            }
            Where::Backoff => {
                let expiry = e.timestamp + self.backoff_for(e.attempts);
                self.backoff.insert((expiry, e.seq, key.clone()));
            }
            Where::Unschedulable => {
                self.unschedulable.insert(key.clone(), now);
            }
            Where::InFlight => {}
        }
        self.entries.insert(key, e);
    }

    /// A pod to schedule was seen (added or changed). A new one goes to
    /// active; a known one waiting as unschedulable is moved (a change of
    /// the pod may make it fit), one in backoff stays there; its priority
    /// is updated.
    pub fn add_or_update(&mut self, key: K, priority: i64, now: Instant) {
        let Some(e) = self.entries.get(&key).cloned() else {
            let e = Entry {
                priority,
                timestamp: now,
                attempts: 0,
                at: Where::Active,
                cycle: 0,
                seq: 0,
            };
            self.put(key, e, Where::Active, now);
            return;
        };
        match e.at {
            Where::InFlight => {
                if let Some(e) = self.entries.get_mut(&key) {
                    e.priority = priority;
                }
            }
            Where::Unschedulable => {
                let mut e = self.unlink(&key).expect("queued");
                e.priority = priority;
                let to = self.after_wait(&e, now);
                self.put(key, e, to, now);
            }
            Where::Active | Where::Backoff if e.priority != priority => {
                let at = e.at;
                let mut e = self.unlink(&key).expect("queued");
                e.priority = priority;
                self.put(key, e, at, now);
            }
            _ => {}
        }
    }

    /// Where a waiting pod moves: backoff while its backoff lasts.
    fn after_wait(&self, e: &Entry, now: Instant) -> Where {
        if e.attempts > 0 && e.timestamp + self.backoff_for(e.attempts) > now {
            Where::Backoff
        } else {
            Where::Active
        }
    }

    /// The pod is gone (deleted, bound elsewhere, or not ours anymore).
    pub fn delete(&mut self, key: &K) {
        self.unlink(key);
    }

    /// Moves pods whose backoff is over to active.
    pub fn flush_backoff(&mut self, now: Instant) {
        while let Some(first) = self.backoff.first().cloned() {
            if first.0 > now {
                break;
            }
            let key = first.2;
            if let Some(mut e) = self.unlink(&key) {
                e.timestamp = now;
                self.put(key, e, Where::Active, now);
            }
        }
    }

    /// Moves pods unschedulable for longer than [`MAX_IN_UNSCHEDULABLE`]
    /// (upstream's `flushUnschedulablePodsLeftover`).
    pub fn flush_unschedulable_leftover(&mut self, now: Instant) {
        let old: Vec<K> = self
            .unschedulable
            .iter()
            .filter(|(_, since)| now.duration_since(**since) > MAX_IN_UNSCHEDULABLE)
            .map(|(k, _)| k.clone())
            .collect();
        for k in old {
            self.move_one(k, now);
        }
    }

    fn move_one(&mut self, key: K, now: Instant) {
        if let Some(e) = self.unlink(&key) {
            let to = self.after_wait(&e, now);
            self.put(key, e, to, now);
        }
    }

    /// A cluster event that may make unschedulable pods fit: every one of
    /// them moves (upstream's `MoveAllToActiveOrBackoffQueue`).
    pub fn move_all(&mut self, now: Instant) {
        self.move_request_cycle = Some(self.scheduling_cycle);
        let keys: Vec<K> = self.unschedulable.keys().cloned().collect();
        for k in keys {
            self.move_one(k, now);
        }
    }

    /// The next pod to schedule, with its attempt number (1 for the first),
    /// after moving pods whose backoff is over.
    pub fn pop(&mut self, now: Instant) -> Option<(K, u32)> {
        self.flush_backoff(now);
        let first = self.active.pop_first()?;
        let key = first.3;
        self.scheduling_cycle += 1;
        let e = self.entries.get_mut(&key).expect("queued");
        e.at = Where::InFlight;
        e.attempts += 1;
        e.cycle = self.scheduling_cycle;
        Some((key, e.attempts))
    }

    /// The popped pod was bound (or given up): forget it.
    pub fn done(&mut self, key: &K) {
        self.entries.remove(key);
    }

    /// The popped pod fit no node (`unschedulable`) or failed otherwise:
    /// it waits in unschedulable, or in backoff when a move was requested
    /// during its cycle or it failed for another reason.
    pub fn failed(&mut self, key: K, unschedulable: bool, now: Instant) {
        let Some(mut e) = self.entries.remove(&key) else {
            return;
        };
        e.timestamp = now;
        let moved = self.move_request_cycle.is_some_and(|m| m >= e.cycle);
        let to = if unschedulable && !moved {
            Where::Unschedulable
        } else {
            Where::Backoff
        };
        self.put(key, e, to, now);
    }

    /// When the next backoff ends.
    pub fn next_backoff_expiry(&self) -> Option<Instant> {
        self.backoff.first().map(|b| b.0)
    }

    /// Where a pod is.
    pub fn position(&self, key: &K) -> Option<Where> {
        self.entries.get(key).map(|e| e.at)
    }

    /// Pods in active, backoff and unschedulable (upstream's
    /// `scheduler_pending_pods{queue}`).
    pub fn lengths(&self) -> (usize, usize, usize) {
        (
            self.active.len(),
            self.backoff.len(),
            self.unschedulable.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_then_age() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update("low", 0, t);
        q.add_or_update("high", 10, t + Duration::from_millis(1));
        q.add_or_update("low2", 0, t + Duration::from_millis(2));
        let order: Vec<&str> =
            std::iter::from_fn(|| q.pop(t + Duration::from_secs(1)).map(|p| p.0)).collect();
        assert_eq!(order, vec!["high", "low", "low2"]);
    }

    #[test]
    fn backoff_doubles_to_ten_seconds() {
        let q: SchedulingQueue<u8> = SchedulingQueue::default();
        let secs: Vec<u64> = (1..=6).map(|a| q.backoff_for(a).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn unschedulable_waits_for_an_event_then_backs_off() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update("p", 0, t);
        let (k, attempts) = q.pop(t).unwrap();
        assert_eq!(attempts, 1);
        q.failed(k, true, t);
        assert_eq!(q.position(&"p"), Some(Where::Unschedulable));
        // Nothing comes out without an event, however long.
        assert_eq!(q.pop(t + Duration::from_secs(60)), None);
        // An event within its backoff puts it in backoff, then active.
        q.move_all(t + Duration::from_millis(500));
        assert_eq!(q.position(&"p"), Some(Where::Backoff));
        assert_eq!(q.pop(t + Duration::from_millis(900)), None);
        assert_eq!(q.next_backoff_expiry(), Some(t + Duration::from_secs(1)));
        assert_eq!(q.pop(t + Duration::from_secs(1)), Some(("p", 2)));
        // Second failure: 2 s backoff; the 5-minute flush moves it too.
        q.failed("p", true, t + Duration::from_secs(2));
        q.flush_unschedulable_leftover(t + Duration::from_secs(100));
        assert_eq!(q.position(&"p"), Some(Where::Unschedulable));
        q.flush_unschedulable_leftover(t + Duration::from_secs(303));
        assert_eq!(q.position(&"p"), Some(Where::Active));
    }

    #[test]
    fn event_during_the_cycle_sends_the_pod_to_backoff() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update("p", 0, t);
        let (k, _) = q.pop(t).unwrap();
        q.move_all(t);
        q.failed(k, true, t);
        assert_eq!(q.position(&"p"), Some(Where::Backoff));
        // A pod update moves an unschedulable pod.
        q.add_or_update("u", 0, t);
        let (k, _) = q.pop(t).unwrap();
        q.failed(k, true, t);
        assert_eq!(q.position(&"u"), Some(Where::Unschedulable));
        q.add_or_update("u", 0, t + Duration::from_secs(5));
        assert_eq!(q.position(&"u"), Some(Where::Active));
        q.delete(&"u");
        assert_eq!(q.position(&"u"), None);
        assert_eq!(q.lengths(), (0, 1, 0));
    }
}
