//! The sequential specification of one key: a compare-and-swap register
//! whose versions are the store's resourceVersions, and the projection of
//! a history onto one key (a list is a read of every key at once).

use std::collections::HashMap;

use crate::history::{Call, History, Operation, Outcome, Rv};
use crate::wgl::{Model, Timed, Verdict};

/// Values interned to small ids, with the revision each was written at
/// when any operation saw it.
#[derive(Debug, Default)]
pub struct Values {
    ids: HashMap<String, u32>,
    rv: Vec<Option<Rv>>,
    /// Whether an operation of the history writes it.
    written: Vec<bool>,
}

impl Values {
    /// The values of `ops` and the revisions observed for them (the first
    /// seen, if several were: that is reported by the revision checks).
    pub fn of(ops: &[Operation]) -> Values {
        let mut values = Values::default();
        for op in ops {
            for (_, rv, value) in crate::checks::puts_seen(op) {
                let id = values.intern(value);
                values.rv[id as usize].get_or_insert(rv);
            }
            if let Call::Create { value, .. } | Call::Update { value, .. } = &op.call {
                let id = values.intern(value);
                values.written[id as usize] = true;
            }
        }
        values
    }

    /// These values and revisions, with `written` true only for values an
    /// operation of `sub` writes (a sub-history of the one they come from).
    pub fn written_by(&self, sub: &[Operation]) -> Values {
        let mut values = Values {
            ids: self.ids.clone(),
            rv: self.rv.clone(),
            written: vec![false; self.rv.len()],
        };
        for op in sub {
            if let Call::Create { value, .. } | Call::Update { value, .. } = &op.call
                && let Some(&id) = self.ids.get(value)
            {
                values.written[id as usize] = true;
            }
        }
        values
    }

    fn intern(&mut self, value: &str) -> u32 {
        if let Some(id) = self.ids.get(value) {
            return *id;
        }
        let id = self.rv.len() as u32;
        self.ids.insert(value.to_string(), id);
        self.rv.push(None);
        self.written.push(false);
        id
    }

    fn id(&self, value: &str) -> u32 {
        self.ids.get(value).copied().unwrap_or(u32::MAX)
    }

    /// The id of a value some operation writes.
    fn written_id(&self, value: &str) -> Option<u32> {
        let id = self.id(value);
        self.written
            .get(id as usize)
            .copied()
            .unwrap_or(false)
            .then_some(id)
    }

    fn rv_of(&self, id: u32) -> Option<Rv> {
        self.rv.get(id as usize).copied().flatten()
    }
}

/// What an operation requires of the key's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Absent,
    Present,
    /// Present at exactly this resourceVersion.
    RvIs(Rv),
    /// Present at another resourceVersion (a 409 Conflict).
    RvIsNot(Rv),
    /// Holding exactly this value.
    Holds(u32),
}

/// What an operation does to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Nothing,
    /// Writes the value, at the revision if known.
    Put(u32, Option<Rv>),
    /// Deletes, at the revision if known.
    Delete(Option<Rv>),
}

/// One operation on one key, as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyOp {
    pub expect: Expect,
    pub effect: Effect,
    /// The outcome is unknown: it may also have had no effect at all.
    pub maybe: bool,
}

/// What the key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holds {
    Absent,
    /// A value written by an operation of the history.
    Value(u32),
    /// A value from before the history (only when the initial state is
    /// unknown), at this revision if known.
    Prior(Option<Rv>),
    /// Nothing known yet: the initial state of a sub-history.
    Unknown,
}

/// The key's state: what it holds, and the newest revision any write of
/// it has had (revisions of one key only go up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyState {
    pub holds: Holds,
    pub last_rv: Rv,
}

/// The register, with the revisions of values known from the history.
pub struct Register<'a> {
    pub values: &'a Values,
    /// Start from [`Holds::Unknown`] rather than an absent key (to judge a
    /// sub-history cut out of a longer one).
    pub unknown_start: bool,
}

impl Register<'_> {
    /// The state once `expect` is known to hold in `s`, if it can hold.
    fn matching(&self, s: &KeyState, expect: Expect) -> Option<KeyState> {
        let rv_of = |v: u32| self.values.rv_of(v);
        let holds = match (s.holds, expect) {
            (Holds::Unknown, Expect::Absent) => Holds::Absent,
            (Holds::Unknown, Expect::Present | Expect::RvIsNot(_)) => Holds::Prior(None),
            (Holds::Unknown, Expect::RvIs(e)) => Holds::Prior(Some(e)),
            (Holds::Unknown | Holds::Prior(_) | Holds::Absent, Expect::Holds(_)) => return None,
            (Holds::Absent, Expect::Absent) => Holds::Absent,
            (Holds::Absent, _) => return None,
            (Holds::Value(_) | Holds::Prior(_), Expect::Absent) => return None,
            (h @ (Holds::Value(_) | Holds::Prior(_)), Expect::Present) => h,
            (Holds::Value(v), Expect::RvIs(e)) if rv_of(v) == Some(e) => s.holds,
            (Holds::Value(v), Expect::RvIsNot(e)) if rv_of(v) != Some(e) => s.holds,
            (Holds::Value(v), Expect::Holds(w)) if v == w => s.holds,
            (Holds::Value(_), _) => return None,
            (Holds::Prior(rv), Expect::RvIs(e)) if rv.is_none_or(|r| r == e) => {
                Holds::Prior(Some(e))
            }
            (Holds::Prior(rv), Expect::RvIsNot(e)) if rv != Some(e) => s.holds,
            (Holds::Prior(_), _) => return None,
        };
        let last_rv = match holds {
            Holds::Prior(Some(rv)) => s.last_rv.max(rv),
            _ => s.last_rv,
        };
        Some(KeyState { holds, last_rv })
    }
}

impl Model for Register<'_> {
    type State = KeyState;
    type Op = KeyOp;

    fn init(&self) -> KeyState {
        KeyState {
            holds: if self.unknown_start {
                Holds::Unknown
            } else {
                Holds::Absent
            },
            last_rv: 0,
        }
    }

    fn step(&self, s: &KeyState, op: &KeyOp, next: &mut Vec<KeyState>) {
        if let Some(m) = self.matching(s, op.expect) {
            let after = |holds: Holds, rv: Option<Rv>| match rv {
                None => Some(KeyState { holds, ..m }),
                Some(rv) if rv > m.last_rv => Some(KeyState { holds, last_rv: rv }),
                Some(_) => None,
            };
            let applied = match op.effect {
                Effect::Nothing => Some(m),
                Effect::Put(v, rv) => after(Holds::Value(v), rv),
                Effect::Delete(rv) => after(Holds::Absent, rv),
            };
            next.extend(applied);
        }
        if op.maybe {
            next.push(*s);
        }
    }
}

/// The operations of `ops` that bear on `key`, as model operations with
/// their times, each with the index of the operation it comes from.
pub fn project(ops: &[Operation], key: &str, values: &Values) -> Vec<(usize, Timed<KeyOp>)> {
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if let Some(kop) = key_op(op, key, values) {
            out.push((
                i,
                Timed {
                    invoke: op.invoke,
                    complete: op.complete,
                    op: kop,
                },
            ));
        }
    }
    out
}

fn key_op(op: &Operation, key: &str, values: &Values) -> Option<KeyOp> {
    let k = |expect, effect, maybe| {
        Some(KeyOp {
            expect,
            effect,
            maybe,
        })
    };
    if op.call.key().is_some_and(|k| k != key) {
        return None;
    }
    match (&op.call, &op.outcome) {
        (Call::Create { value, .. }, Outcome::Written { rv }) => k(
            Expect::Absent,
            Effect::Put(values.id(value), Some(*rv)),
            false,
        ),
        (Call::Create { value, .. }, Outcome::Unknown { .. }) => {
            let id = values.id(value);
            k(Expect::Absent, Effect::Put(id, values.rv_of(id)), true)
        }
        (Call::Create { .. }, Outcome::AlreadyExists) => k(Expect::Present, Effect::Nothing, false),
        (
            Call::Update {
                expected, value, ..
            },
            Outcome::Written { rv },
        ) => k(
            Expect::RvIs(*expected),
            Effect::Put(values.id(value), Some(*rv)),
            false,
        ),
        (
            Call::Update {
                expected, value, ..
            },
            Outcome::Unknown { .. },
        ) => {
            let id = values.id(value);
            k(
                Expect::RvIs(*expected),
                Effect::Put(id, values.rv_of(id)),
                true,
            )
        }
        (
            Call::Update { expected, .. }
            | Call::Delete {
                expected: Some(expected),
                ..
            },
            Outcome::Conflict,
        ) => k(Expect::RvIsNot(*expected), Effect::Nothing, false),
        (Call::Update { .. } | Call::Delete { .. } | Call::Get { .. }, Outcome::NotFound) => {
            k(Expect::Absent, Effect::Nothing, false)
        }
        (Call::Delete { expected, .. }, Outcome::Deleted { rv }) => k(
            expected.map_or(Expect::Present, Expect::RvIs),
            Effect::Delete(*rv),
            false,
        ),
        (Call::Delete { expected, .. }, Outcome::Unknown { .. }) => k(
            expected.map_or(Expect::Present, Expect::RvIs),
            Effect::Delete(None),
            true,
        ),
        // A value no operation wrote constrains nothing here (it is
        // reported as a phantom value).
        (Call::Get { .. }, Outcome::Found { value, .. }) => k(
            Expect::Holds(values.written_id(value)?),
            Effect::Nothing,
            false,
        ),
        (Call::List, Outcome::Listed { items, .. }) => {
            match items.iter().find(|item| item.key == key) {
                Some(item) => k(
                    Expect::Holds(values.written_id(&item.value)?),
                    Effect::Nothing,
                    false,
                ),
                None => k(Expect::Absent, Effect::Nothing, false),
            }
        }
        _ => None,
    }
}

/// Whether `key`'s operations in `ops` are linearizable, from an absent
/// key or (`unknown_start`) from any state.
pub fn check_key(ops: &[Operation], key: &str, unknown_start: bool, budget: u64) -> Verdict {
    check_key_with(ops, key, &Values::of(ops), unknown_start, budget)
}

/// [`check_key`] with the values (and their revisions) of a longer history.
pub fn check_key_with(
    ops: &[Operation],
    key: &str,
    values: &Values,
    unknown_start: bool,
    budget: u64,
) -> Verdict {
    let projected: Vec<Timed<KeyOp>> = project(ops, key, values)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let model = Register {
        values,
        unknown_start,
    };
    crate::wgl::check(&model, &projected, budget)
}

/// Whether `op` leaves the store as it was whatever happened: a read, a
/// watch, or a write refused with a definite answer.
fn effect_free(op: &Operation) -> bool {
    !op.call.is_write()
        || matches!(
            op.outcome,
            Outcome::AlreadyExists | Outcome::Conflict | Outcome::NotFound
        )
}

/// The shortest sub-history found of `ops` (one key's operations, not
/// linearizable) that still is not, cut only in ways that keep a
/// linearizable history linearizable, so the witness proves the violation:
/// operations with no effect may go anywhere; writes only with everything
/// before a point no operation spans (the rest then starts from an unknown
/// state) or after one.
pub fn minimize_key(ops: &[Operation], key: &str, budget: u64) -> Vec<Operation> {
    let full = Values::of(ops);
    let fails = |sub: &[Operation], unknown_start: bool| {
        check_key_with(sub, key, &full.written_by(sub), unknown_start, budget)
            == Verdict::NotLinearizable
    };
    let mut ops: Vec<Operation> = ops.to_vec();
    ops.sort_by_key(|op| op.invoke);
    // Quiescent points: i such that every operation before i completed
    // before any from i on started.
    let mut cuts = Vec::new();
    let mut done_by = 0;
    for (i, op) in ops.iter().enumerate() {
        if i > 0 && done_by < op.invoke {
            cuts.push(i);
        }
        done_by = done_by.max(op.complete.unwrap_or(u64::MAX));
    }
    // The shortest failing prefix ending at a cut (failing is monotone in
    // the length of the prefix): binary search.
    let (mut lo, mut hi) = (0, cuts.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if fails(&ops[..cuts[mid]], false) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    if lo < cuts.len() {
        ops.truncate(cuts[lo]);
    }
    cuts.retain(|&c| c < ops.len());
    // The longest prefix that can go (failing from an unknown state is
    // monotone the other way).
    let (mut lo, mut hi) = (0, cuts.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fails(&ops[cuts[mid - 1]..], true) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let unknown_start = lo > 0;
    if unknown_start {
        ops.drain(..cuts[lo - 1]);
    }
    // Then every operation without effect that is not needed.
    type Numbered = Vec<(usize, Operation)>;
    let (keep, free): (Numbered, Numbered) = ops
        .into_iter()
        .enumerate()
        .partition(|(_, op)| !effect_free(op));
    let merged = |free: &[(usize, Operation)]| {
        let mut all: Vec<(usize, Operation)> = keep.iter().chain(free).cloned().collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, op)| op).collect::<Vec<_>>()
    };
    let free = crate::minimize::minimize_by(free, |f| fails(&merged(f), unknown_start));
    merged(&free)
}

/// The operations of `history` that bear on `key` (its own and the lists).
pub fn ops_of_key(history: &History, key: &str) -> Vec<Operation> {
    history
        .ops
        .iter()
        .filter(|op| match &op.call {
            Call::List => matches!(op.outcome, Outcome::Listed { .. }),
            call => call.key() == Some(key),
        })
        .cloned()
        .collect()
}
