//! Delta debugging (Zeller's ddmin, simplified): remove chunks of a failing
//! history, halving the chunk size, then single operations until none can
//! go, keeping every removal after which it still fails.

use crate::history::Operation;

/// Most failure checks one minimization may run.
const MAX_TRIES: usize = 5_000;

/// A sub-list of `ops` (same order) for which `fails` still holds and from
/// which no single operation can be removed (within the try budget).
/// `fails(&ops)` should hold; otherwise `ops` comes back unchanged. Only
/// sound where removing an operation cannot make a good history bad (the
/// linearizability checks use `register::minimize_key`).
pub fn minimize(ops: Vec<Operation>, fails: impl Fn(&[Operation]) -> bool) -> Vec<Operation> {
    minimize_by(ops, fails)
}

/// [`minimize`] over any items (which may all go: an empty list is tried).
pub fn minimize_by<T: Clone>(items: Vec<T>, fails: impl Fn(&[T]) -> bool) -> Vec<T> {
    let mut cur = items;
    let mut tries = 0;
    let mut chunk = (cur.len() / 2).max(1);
    loop {
        let mut removed = false;
        let mut i = 0;
        while i < cur.len() && tries < MAX_TRIES {
            let end = (i + chunk).min(cur.len());
            let candidate: Vec<T> = cur[..i].iter().chain(&cur[end..]).cloned().collect();
            tries += 1;
            if fails(&candidate) {
                cur = candidate;
                removed = true;
            } else {
                i += chunk;
            }
        }
        if cur.is_empty() || tries >= MAX_TRIES || (chunk == 1 && !removed) {
            return cur;
        }
        chunk = (chunk / 2).max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Call, Outcome};

    fn get(i: u64) -> Operation {
        Operation {
            client: 0,
            invoke: i,
            complete: Some(i + 1),
            call: Call::Get {
                key: format!("k{i}"),
            },
            outcome: Outcome::NotFound,
        }
    }

    #[test]
    fn keeps_only_what_the_failure_needs() {
        let ops: Vec<Operation> = (0..37).map(get).collect();
        let needs = |sub: &[Operation]| {
            sub.iter().any(|o| o.invoke == 5) && sub.iter().any(|o| o.invoke == 30)
        };
        let min = minimize(ops, needs);
        let kept: Vec<u64> = min.iter().map(|o| o.invoke).collect();
        assert_eq!(kept, vec![5, 30]);
    }
}
