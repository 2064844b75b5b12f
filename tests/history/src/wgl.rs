//! A linearizability search after Wing and Gong, with Lowe's memo of
//! (set of operations linearized, model state) pairs already explored: the
//! algorithm of Knossos and Porcupine, over any sequential [`Model`].
//!
//! Operations are call and return entries in one list ordered by time. The
//! search walks it: at a call it tries to linearize that operation now (a
//! model step from the current state), lifting its call and return out of
//! the list and starting again from the front; at a return whose operation
//! is not linearized yet it backtracks. An operation may have several
//! possible next states (one whose outcome is unknown may have taken effect
//! or not), tried in turn. Operations that never returned need not be
//! linearized at all: the history is linearizable once every returned one
//! is.

use std::collections::HashSet;
use std::hash::Hash;

use crate::history::Time;

/// A sequential specification.
pub trait Model {
    type State: Clone + Eq + Hash;
    type Op;

    fn init(&self) -> Self::State;

    /// The states `op` may lead to from `state` (none: it cannot happen
    /// there), appended to `next`.
    fn step(&self, state: &Self::State, op: &Self::Op, next: &mut Vec<Self::State>);
}

/// One operation of the history under check.
#[derive(Debug, Clone)]
pub struct Timed<O> {
    pub invoke: Time,
    /// `None`: never returned.
    pub complete: Option<Time>,
    pub op: O,
}

/// What the search concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// The search gave up after its budget of steps.
    Undecided,
}

#[derive(Clone, Copy)]
struct Entry {
    op: usize,
    is_call: bool,
}

/// A set of operation indices.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Checks `ops` against `model`, giving up after `budget` steps.
pub fn check<M: Model>(model: &M, ops: &[Timed<M::Op>], budget: u64) -> Verdict {
    let n = ops.len();
    // Entries sorted by time; at equal times calls first (the two overlap).
    let mut entries: Vec<(Time, bool, Entry)> = Vec::with_capacity(2 * n);
    for (i, o) in ops.iter().enumerate() {
        entries.push((
            o.invoke,
            false,
            Entry {
                op: i,
                is_call: true,
            },
        ));
        if let Some(c) = o.complete {
            entries.push((
                c.max(o.invoke),
                true,
                Entry {
                    op: i,
                    is_call: false,
                },
            ));
        }
    }
    entries.sort_by_key(|(t, is_return, e)| (*t, *is_return, e.op));
    let entries: Vec<Entry> = entries.into_iter().map(|(_, _, e)| e).collect();
    let len = entries.len();
    // A doubly linked list over entries 0..len, with a head at `len`.
    let head = len;
    let mut next: Vec<usize> = (0..=len)
        .map(|i| if i + 1 < len { i + 1 } else { usize::MAX })
        .collect();
    next[head] = if len == 0 { usize::MAX } else { 0 };
    let mut prev: Vec<usize> = (0..=len)
        .map(|i| if i == 0 { head } else { i - 1 })
        .collect();
    let mut call_of = vec![0; n];
    let mut return_of = vec![None; n];
    for (idx, e) in entries.iter().enumerate() {
        if e.is_call {
            call_of[e.op] = idx;
        } else {
            return_of[e.op] = Some(idx);
        }
    }
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, e: usize| {
        let (p, nx) = (prev[e], next[e]);
        next[p] = nx;
        if nx != usize::MAX {
            prev[nx] = p;
        }
    };
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, e: usize| {
        let (p, nx) = (prev[e], next[e]);
        next[p] = e;
        if nx != usize::MAX {
            prev[nx] = e;
        }
    };

    let mut remaining_returns = return_of.iter().filter(|r| r.is_some()).count();
    let mut state = model.init();
    let mut linearized = Bits::new(n);
    let mut cache: HashSet<(Bits, M::State)> = HashSet::new();
    // (operation, state before it, candidate taken)
    let mut stack: Vec<(usize, M::State, usize)> = Vec::new();
    let mut candidates = Vec::new();
    let mut entry = next[head];
    let mut first_candidate = 0;
    let mut steps = 0u64;
    loop {
        if remaining_returns == 0 {
            return Verdict::Linearizable;
        }
        steps += 1;
        if steps > budget {
            return Verdict::Undecided;
        }
        if entry == usize::MAX {
            // Only calls left that never return, yet returns remain: cannot
            // happen (a return is always after its call), but be safe.
            return Verdict::NotLinearizable;
        }
        let e = entries[entry];
        if e.is_call {
            candidates.clear();
            model.step(&state, &ops[e.op].op, &mut candidates);
            let mut taken = None;
            for (c, candidate) in candidates.iter().enumerate().skip(first_candidate) {
                let mut lin = linearized.clone();
                lin.set(e.op);
                if cache.insert((lin, candidate.clone())) {
                    taken = Some(c);
                    break;
                }
            }
            first_candidate = 0;
            match taken {
                Some(c) => {
                    let before = std::mem::replace(&mut state, candidates[c].clone());
                    stack.push((e.op, before, c));
                    linearized.set(e.op);
                    unlink(&mut next, &mut prev, call_of[e.op]);
                    if let Some(r) = return_of[e.op] {
                        unlink(&mut next, &mut prev, r);
                        remaining_returns -= 1;
                    }
                    entry = next[head];
                }
                None => entry = next[entry],
            }
        } else {
            let Some((op, before, c)) = stack.pop() else {
                return Verdict::NotLinearizable;
            };
            linearized.clear(op);
            state = before;
            if let Some(r) = return_of[op] {
                relink(&mut next, &mut prev, r);
                remaining_returns += 1;
            }
            relink(&mut next, &mut prev, call_of[op]);
            entry = call_of[op];
            first_candidate = c + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain register of integers: `Some(v)` writes, `None(v)` reads `v`.
    struct Register;

    #[derive(Debug, Clone)]
    enum RegOp {
        Write(u8),
        Read(u8),
        /// A write that may or may not have happened.
        MaybeWrite(u8),
    }

    impl Model for Register {
        type State = u8;
        type Op = RegOp;
        fn init(&self) -> u8 {
            0
        }
        fn step(&self, s: &u8, op: &RegOp, next: &mut Vec<u8>) {
            match op {
                RegOp::Write(v) => next.push(*v),
                RegOp::Read(v) if v == s => next.push(*s),
                RegOp::Read(_) => {}
                RegOp::MaybeWrite(v) => next.extend([*v, *s]),
            }
        }
    }

    fn op(invoke: Time, complete: Option<Time>, op: RegOp) -> Timed<RegOp> {
        Timed {
            invoke,
            complete,
            op,
        }
    }

    #[test]
    fn overlapping_operations_may_be_reordered() {
        // write 1 [0,10] overlaps read 1 [2,4] and read 0 [1,3]: read 0,
        // write 1, read 1 is a linearization.
        let ops = [
            op(0, Some(10), RegOp::Write(1)),
            op(2, Some(4), RegOp::Read(1)),
            op(1, Some(3), RegOp::Read(0)),
        ];
        assert_eq!(check(&Register, &ops, 10_000), Verdict::Linearizable);
    }

    #[test]
    fn a_read_after_a_write_returned_sees_it() {
        let ops = [
            op(0, Some(1), RegOp::Write(1)),
            op(2, Some(3), RegOp::Read(0)),
        ];
        assert_eq!(check(&Register, &ops, 10_000), Verdict::NotLinearizable);
    }

    #[test]
    fn an_unanswered_write_may_take_effect_late_or_never() {
        let late = [
            op(0, None, RegOp::Write(2)),
            op(1, Some(2), RegOp::Read(0)),
            op(5, Some(6), RegOp::Read(2)),
        ];
        assert_eq!(check(&Register, &late, 10_000), Verdict::Linearizable);
        let never = [op(0, None, RegOp::Write(2)), op(5, Some(6), RegOp::Read(0))];
        assert_eq!(check(&Register, &never, 10_000), Verdict::Linearizable);
        // But once seen it stays.
        let flip = [
            op(0, None, RegOp::Write(2)),
            op(1, Some(2), RegOp::Read(2)),
            op(5, Some(6), RegOp::Read(0)),
        ];
        assert_eq!(check(&Register, &flip, 10_000), Verdict::NotLinearizable);
    }

    #[test]
    fn an_answered_write_of_unknown_outcome_is_either_within_its_interval() {
        let ops = [
            op(0, Some(3), RegOp::MaybeWrite(2)),
            op(4, Some(5), RegOp::Read(0)),
        ];
        assert_eq!(check(&Register, &ops, 10_000), Verdict::Linearizable);
        let ops = [
            op(0, Some(3), RegOp::MaybeWrite(2)),
            op(4, Some(5), RegOp::Read(2)),
            op(6, Some(7), RegOp::Read(0)),
        ];
        assert_eq!(check(&Register, &ops, 10_000), Verdict::NotLinearizable);
    }

    #[test]
    fn the_budget_bounds_the_search() {
        let ops: Vec<_> = (0..40)
            .map(|i| op(0, Some(100), RegOp::Write(i)))
            .chain([op(200, Some(201), RegOp::Read(255))])
            .collect();
        assert_eq!(check(&Register, &ops, 1_000), Verdict::Undecided);
    }
}
