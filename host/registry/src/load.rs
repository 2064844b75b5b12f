//! How busy the request path is, for work that must stay below it.
//!
//! The server counts the requests it is serving ([`Load::enter`]); the
//! background work of the controllers (the policy audit) asks
//! [`Load::busy`] and shrinks its CPU share while requests are in flight or
//! were a moment ago.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long after the last request the server still counts as busy.
pub const QUIET_AFTER: Duration = Duration::from_millis(100);

/// Requests in flight, and when the last one ended.
pub struct Load {
    in_flight: AtomicUsize,
    /// Microseconds since `start` when the last request ended.
    last_end: AtomicU64,
    start: Instant,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            in_flight: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            start: Instant::now(),
        }
    }
}

impl Load {
    /// Counts a request until the guard drops.
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Requests being served now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Whether requests are in flight or one ended less than
    /// [`QUIET_AFTER`] ago.
    pub fn busy(&self) -> bool {
        if self.in_flight() > 0 {
            return true;
        }
        let last = self.last_end.load(Ordering::Relaxed);
        last != 0 && self.start.elapsed().as_micros() as u64 - last < QUIET_AFTER.as_micros() as u64
    }
}

/// A request being served.
pub struct InFlight(Arc<Load>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let l = &self.0;
        l.last_end.store(
            l.start.elapsed().as_micros().max(1) as u64,
            Ordering::Relaxed,
        );
        l.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_while_in_flight_and_shortly_after() {
        let l = Arc::new(Load::default());
        assert!(!l.busy());
        let g = l.enter();
        assert!(l.busy());
        drop(g);
        assert_eq!(l.in_flight(), 0);
        assert!(l.busy());
        std::thread::sleep(QUIET_AFTER + Duration::from_millis(20));
        assert!(!l.busy());
    }
}
