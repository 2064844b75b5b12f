//! The checks run on a whole history, and the report they make.
//!
//! - **Linearizability** of each key (the compare-and-swap register of
//!   `register.rs`, searched by `wgl.rs`), a list being a read of every key.
//! - **One change per revision**: every revision observed (a write's
//!   answer, a read, a list item, a watch event) names one change, and every
//!   value is seen at one revision only.
//! - **Revisions never go backwards**: a write that starts after anything
//!   showed revision `r` gets a revision above `r`, a list one at least `r`;
//!   no list item is newer than its list.
//! - **Watches**: events in strictly increasing revisions, none at or
//!   before the start, and no change skipped between the start and the last
//!   event (or the revision it was known to have caught up with). A clean
//!   `410 Gone` ends a watch without a gap.
//! - **No acknowledged write lost**: a read that starts after a write was
//!   acknowledged sees it or something newer ([`Kind::StaleRead`], or
//!   [`Kind::LostWrite`] when no later read of the key exists, as for the
//!   final reads after a campaign).
//!
//! Each violation comes with a witness: for linearizability the smallest
//! sub-history still not linearizable (delta debugging), for the other
//! checks the two or three operations that contradict each other.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::history::{Call, EventKind, History, Operation, Outcome, Rv, Time, WatchEnd};
use crate::register;
use crate::wgl::Verdict;

/// Search steps allowed per key (and per minimization attempt).
pub const DEFAULT_BUDGET: u64 = 2_000_000;

/// At most this many violations of one kind are reported in full.
const MAX_PER_KIND: usize = 3;

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// No order of a key's operations explains what clients saw.
    NotLinearizable,
    /// One revision names two different changes, or one value is seen at
    /// two revisions.
    RevisionReused,
    /// A revision lower than one already observed.
    RevisionWentBack,
    /// A watch delivered an event at or before its starting revision.
    WatchBeforeStart,
    /// A watch delivered one revision twice.
    WatchRepeated,
    /// A watch delivered a revision lower than the one before.
    WatchOutOfOrder,
    /// A watch skipped a change between its start and its last event.
    WatchGap,
    /// A read saw a value no client wrote.
    PhantomValue,
    /// A read missed an acknowledged write that later reads saw again.
    StaleRead,
    /// The last read of a key missed an acknowledged write.
    LostWrite,
}

/// One violation and the operations that show it.
#[derive(Debug, Clone)]
pub struct Violation {
    pub kind: Kind,
    pub key: Option<String>,
    pub message: String,
    /// The shortest history found that shows it.
    pub witness: Vec<Operation>,
}

/// Counts of what was checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub operations: usize,
    pub writes: usize,
    pub acknowledged_writes: usize,
    pub unknown_outcomes: usize,
    pub reads: usize,
    pub lists: usize,
    pub watches: usize,
    pub watch_events: usize,
    pub watches_gone: usize,
    pub keys: usize,
    pub revisions_seen: usize,
}

/// What [`check`] found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub stats: Stats,
    pub violations: Vec<Violation>,
    /// Violations beyond the first few of each kind, counted only.
    pub more: BTreeMap<Kind, usize>,
    /// Keys whose linearizability search ran out of budget.
    pub undecided: Vec<String>,
}

impl Report {
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Whether a violation of `kind` was found.
    pub fn has(&self, kind: Kind) -> bool {
        self.violations.iter().any(|v| v.kind == kind)
    }

    fn add(&mut self, v: Violation) {
        if self.violations.iter().filter(|x| x.kind == v.kind).count() < MAX_PER_KIND {
            self.violations.push(v);
        } else {
            *self.more.entry(v.kind).or_default() += 1;
        }
    }
}

/// Runs every check on `history`.
pub fn check(history: &History) -> Report {
    check_with_budget(history, DEFAULT_BUDGET)
}

/// [`check`] with a given search budget per key.
pub fn check_with_budget(history: &History, budget: u64) -> Report {
    let mut report = Report {
        stats: stats(history),
        ..Report::default()
    };
    revisions(history, &mut report);
    revision_order(history, &mut report);
    watches(history, &mut report);
    stale_reads(history, &mut report);
    for key in history.keys() {
        let ops = register::ops_of_key(history, &key);
        match register::check_key(&ops, &key, false, budget) {
            Verdict::Linearizable => {}
            Verdict::Undecided => report.undecided.push(key),
            Verdict::NotLinearizable => {
                let witness = register::minimize_key(&ops, &key, budget);
                report.add(Violation {
                    kind: Kind::NotLinearizable,
                    message: format!(
                        "no order of the {} operations below on {key:?} explains what they saw",
                        witness.len()
                    ),
                    key: Some(key),
                    witness,
                });
            }
        }
    }
    report
}

fn stats(history: &History) -> Stats {
    let mut s = Stats {
        operations: history.ops.len(),
        keys: history.keys().len(),
        ..Stats::default()
    };
    let mut revisions = BTreeSet::new();
    for op in &history.ops {
        let unknown = matches!(op.outcome, Outcome::Unknown { .. });
        s.unknown_outcomes += usize::from(unknown);
        match &op.call {
            c if c.is_write() => {
                s.writes += 1;
                s.acknowledged_writes += usize::from(matches!(
                    op.outcome,
                    Outcome::Written { .. } | Outcome::Deleted { .. }
                ));
            }
            Call::Get { .. } => s.reads += 1,
            Call::List => s.lists += 1,
            _ => {}
        }
        if let Outcome::Watched { events, end } = &op.outcome {
            s.watches += 1;
            s.watch_events += events.len();
            s.watches_gone += usize::from(*end == WatchEnd::Gone);
        }
        revisions.extend(changes_seen(op).into_iter().map(|(rv, _)| rv));
    }
    s.revisions_seen = revisions.len();
    s
}

/// A change to one key: a put of a value or a deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change<'a> {
    pub key: &'a str,
    /// `None` for a deletion.
    pub put: Option<&'a str>,
}

/// The puts `op` observed: key, revision, value.
pub(crate) fn puts_seen(op: &Operation) -> Vec<(&str, Rv, &str)> {
    changes_seen(op)
        .into_iter()
        .filter_map(|(rv, c)| c.put.map(|v| (c.key, rv, v)))
        .collect()
}

/// The changes `op` observed, with their revisions.
pub(crate) fn changes_seen(op: &Operation) -> Vec<(Rv, Change<'_>)> {
    let put = |key, value| Change {
        key,
        put: Some(value),
    };
    match (&op.call, &op.outcome) {
        (
            Call::Create { key, value } | Call::Update { key, value, .. },
            Outcome::Written { rv },
        ) => {
            vec![(*rv, put(key, value))]
        }
        (Call::Delete { key, .. }, Outcome::Deleted { rv: Some(rv) }) => {
            vec![(*rv, Change { key, put: None })]
        }
        (Call::Get { key }, Outcome::Found { rv, value }) => vec![(*rv, put(key, value))],
        (_, Outcome::Listed { items, .. }) => items
            .iter()
            .map(|i| (i.rv, put(&i.key, &i.value)))
            .collect(),
        (_, Outcome::Watched { events, .. }) => events
            .iter()
            .map(|e| {
                let change = match e.kind {
                    EventKind::Deleted => Change {
                        key: &e.key,
                        put: None,
                    },
                    _ => put(&e.key, &e.value),
                };
                (e.rv, change)
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Every revision names one change; every value has one revision.
fn revisions(history: &History, report: &mut Report) {
    let mut by_rv: BTreeMap<Rv, (Change, usize)> = BTreeMap::new();
    let mut by_value: BTreeMap<&str, (Rv, usize)> = BTreeMap::new();
    let written: BTreeSet<(&str, &str)> = history
        .ops
        .iter()
        .filter_map(|op| match &op.call {
            Call::Create { key, value } | Call::Update { key, value, .. } => {
                Some((key.as_str(), value.as_str()))
            }
            _ => None,
        })
        .collect();
    for (i, op) in history.ops.iter().enumerate() {
        for (rv, change) in changes_seen(op) {
            if let Some(value) = change.put
                && !written.contains(&(change.key, value))
            {
                report.add(Violation {
                    kind: Kind::PhantomValue,
                    key: Some(change.key.to_string()),
                    message: format!(
                        "{:?} is seen holding {value:?} at revision {rv}, which no client wrote \
                         to it",
                        change.key
                    ),
                    witness: vec![op.clone()],
                });
            }
            if let Some(value) = change.put {
                match by_value.get(value) {
                    Some((other, j)) if *other != rv => report.add(Violation {
                        kind: Kind::RevisionReused,
                        key: Some(change.key.to_string()),
                        message: format!(
                            "value {value:?} is seen at revision {other} and at revision {rv}"
                        ),
                        witness: vec![history.ops[*j].clone(), op.clone()],
                    }),
                    Some(_) => {}
                    None => {
                        by_value.insert(value, (rv, i));
                    }
                }
            }
            match by_rv.get(&rv) {
                Some((other, j)) if *other != change => report.add(Violation {
                    kind: Kind::RevisionReused,
                    key: Some(change.key.to_string()),
                    message: format!(
                        "revision {rv} is {} and also {}",
                        describe_change(other),
                        describe_change(&change)
                    ),
                    witness: vec![history.ops[*j].clone(), op.clone()],
                }),
                Some(_) => {}
                None => {
                    by_rv.insert(rv, (change, i));
                }
            }
        }
    }
}

fn describe_change(c: &Change) -> String {
    match c.put {
        Some(v) => format!("{:?} := {v:?}", c.key),
        None => format!("the deletion of {:?}", c.key),
    }
}

/// Writes and lists that start after a revision was observed are not
/// older than it.
fn revision_order(history: &History, report: &mut Report) {
    // (time observed, revision, op)
    let mut facts: Vec<(Time, Rv, usize)> = Vec::new();
    // (time started, revision, strictly newer?, op)
    let mut points: Vec<(Time, Rv, bool, usize)> = Vec::new();
    for (i, op) in history.ops.iter().enumerate() {
        let written = match op.outcome {
            Outcome::Written { rv } | Outcome::Deleted { rv: Some(rv) } => Some(rv),
            _ => None,
        };
        if let Some(rv) = written {
            points.push((op.invoke, rv, true, i));
        }
        if let Outcome::Listed { rv, items } = &op.outcome {
            points.push((op.invoke, *rv, false, i));
            if let Some(item) = items.iter().find(|item| item.rv > *rv) {
                report.add(Violation {
                    kind: Kind::RevisionWentBack,
                    key: Some(item.key.clone()),
                    message: format!(
                        "a list at revision {rv} holds {:?} at revision {}",
                        item.key, item.rv
                    ),
                    witness: vec![op.clone()],
                });
            }
        }
        if let Outcome::Watched { events, .. } = &op.outcome {
            facts.extend(events.iter().map(|e| (e.at, e.rv, i)));
        } else if let Some(complete) = op.complete {
            let seen = changes_seen(op).into_iter().map(|(rv, _)| rv);
            let list_rv = match op.outcome {
                Outcome::Listed { rv, .. } => Some(rv),
                _ => None,
            };
            if let Some(max) = seen.chain(list_rv).max() {
                facts.push((complete, max, i));
            }
        }
    }
    facts.sort();
    points.sort();
    let mut f = 0;
    let mut newest: Option<(Rv, usize)> = None;
    for (invoke, rv, strict, i) in points {
        while f < facts.len() && facts[f].0 < invoke {
            if newest.is_none_or(|(n, _)| facts[f].1 > n) {
                newest = Some((facts[f].1, facts[f].2));
            }
            f += 1;
        }
        let Some((seen, j)) = newest else { continue };
        if rv < seen || (strict && rv == seen) {
            let what = if strict { "a write" } else { "a list" };
            report.add(Violation {
                kind: Kind::RevisionWentBack,
                key: history.ops[i].call.key().map(str::to_string),
                message: format!(
                    "{what} got revision {rv} after revision {seen} had been observed"
                ),
                witness: vec![history.ops[j].clone(), history.ops[i].clone()],
            });
        }
    }
}

/// Each watch delivers every change after its start, once, in order.
fn watches(history: &History, report: &mut Report) {
    // The known changes: revision -> (key, op that saw it).
    let mut known: BTreeMap<Rv, (String, usize)> = BTreeMap::new();
    for (i, op) in history.ops.iter().enumerate() {
        for (rv, change) in changes_seen(op) {
            known.entry(rv).or_insert((change.key.to_string(), i));
        }
    }
    for op in &history.ops {
        let (Call::Watch { from }, Outcome::Watched { events, end }) = (&op.call, &op.outcome)
        else {
            continue;
        };
        let mut last: Option<Rv> = None;
        let mut broken = false;
        for e in events {
            if e.rv <= *from {
                report.add(Violation {
                    kind: Kind::WatchBeforeStart,
                    key: Some(e.key.clone()),
                    message: format!(
                        "a watch from revision {from} delivered {:?} {:?} at revision {}",
                        e.kind, e.key, e.rv
                    ),
                    witness: vec![op.clone()],
                });
                broken = true;
            }
            if let Some(prev) = last {
                let kind = if e.rv == prev {
                    Some(Kind::WatchRepeated)
                } else if e.rv < prev {
                    Some(Kind::WatchOutOfOrder)
                } else {
                    None
                };
                if let Some(kind) = kind {
                    report.add(Violation {
                        kind,
                        key: Some(e.key.clone()),
                        message: format!(
                            "a watch from revision {from} delivered revision {} after revision {prev}",
                            e.rv
                        ),
                        witness: vec![op.clone()],
                    });
                    broken = true;
                }
            }
            last = Some(last.map_or(e.rv, |l| l.max(e.rv)));
        }
        if broken {
            continue;
        }
        let through = match end {
            WatchEnd::CaughtUp { through } => last.map_or(*through, |l| l.max(*through)),
            _ => last.unwrap_or(*from),
        };
        let delivered: BTreeSet<Rv> = events.iter().map(|e| e.rv).collect();
        if through <= *from {
            continue;
        }
        let skipped: Vec<(&Rv, &(String, usize))> = known
            .range(from + 1..=through)
            .filter(|(rv, _)| !delivered.contains(rv))
            .collect();
        if let Some((rv, (key, j))) = skipped.first() {
            report.add(Violation {
                kind: Kind::WatchGap,
                key: Some(key.clone()),
                message: format!(
                    "a watch from revision {from} delivered up to revision {through} but skipped \
                     {} change(s), the first at revision {rv} (to {key:?}, seen by the other \
                     operation below); skipped revisions: {:?}",
                    skipped.len(),
                    skipped
                        .iter()
                        .map(|(rv, _)| **rv)
                        .take(10)
                        .collect::<Vec<_>>()
                ),
                witness: vec![op.clone(), history.ops[*j].clone()],
            });
        }
    }
}

/// A read of a key that starts after a write of it was acknowledged sees
/// that write or a newer state.
fn stale_reads(history: &History, report: &mut Report) {
    for key in history.keys() {
        // Acknowledged writes of the key: (completion, revision, is a put, op).
        let mut writes: Vec<(Time, Rv, bool, usize)> = Vec::new();
        // Deletions that may have happened without their revision known.
        let mut unsure_deletes: Vec<usize> = Vec::new();
        // Reads: (invoke, completion, revision seen or None for absent, op).
        let mut reads: Vec<(Time, Time, Option<Rv>, usize)> = Vec::new();
        for (i, op) in history.ops.iter().enumerate() {
            if op.call.key().is_some_and(|k| k != key) {
                continue;
            }
            match (&op.call, &op.outcome, op.complete) {
                (Call::Create { .. } | Call::Update { .. }, Outcome::Written { rv }, Some(c)) => {
                    writes.push((c, *rv, true, i));
                }
                (Call::Delete { .. }, Outcome::Deleted { rv: Some(rv) }, Some(c)) => {
                    writes.push((c, *rv, false, i));
                }
                (
                    Call::Delete { .. },
                    Outcome::Deleted { rv: None } | Outcome::Unknown { .. },
                    _,
                ) => {
                    unsure_deletes.push(i);
                }
                (Call::Get { .. }, Outcome::Found { rv, .. }, Some(c)) => {
                    reads.push((op.invoke, c, Some(*rv), i));
                }
                (Call::Get { .. }, Outcome::NotFound, Some(c)) => {
                    reads.push((op.invoke, c, None, i));
                }
                (Call::List, Outcome::Listed { items, .. }, Some(c)) => {
                    let seen = items.iter().find(|it| it.key == key).map(|it| it.rv);
                    reads.push((op.invoke, c, seen, i));
                }
                _ => {}
            }
        }
        // Deletions known from watches (their revision), for absent reads.
        let deleted_at: BTreeSet<Rv> = history
            .ops
            .iter()
            .flat_map(changes_seen)
            .filter(|(_, c)| c.key == key && c.put.is_none())
            .map(|(rv, _)| rv)
            .collect();
        writes.sort();
        reads.sort();
        let last_invoke = reads.last().map(|r| r.0);
        for &(invoke, _, seen, r) in &reads {
            // The newest write acknowledged before this read started.
            let Some(&(_, wrv, is_put, w)) = writes
                .iter()
                .filter(|(c, ..)| *c < invoke)
                .max_by_key(|(_, rv, ..)| *rv)
            else {
                continue;
            };
            let stale = match seen {
                Some(rv) => rv < wrv,
                None => {
                    is_put
                        && deleted_at.range(wrv + 1..).next().is_none()
                        && !unsure_deletes.iter().any(|&d| {
                            history.ops[d].invoke < history.ops[r].complete.unwrap_or(Time::MAX)
                        })
                }
            };
            if !stale {
                continue;
            }
            let lost = Some(invoke) == last_invoke;
            let seen_text = match seen {
                Some(rv) => format!("the state of revision {rv}"),
                None => "no object".to_string(),
            };
            report.add(Violation {
                kind: if lost {
                    Kind::LostWrite
                } else {
                    Kind::StaleRead
                },
                key: Some(key.clone()),
                message: format!(
                    "{} of {key:?} saw {seen_text}, after the write of revision {wrv} had been \
                     acknowledged{}",
                    if lost { "the last read" } else { "a read" },
                    if lost { ": the write is lost" } else { "" }
                ),
                witness: vec![history.ops[w].clone(), history.ops[r].clone()],
            });
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        writeln!(
            f,
            "{} operations on {} keys: {} writes ({} acknowledged, {} of unknown outcome), \
             {} gets, {} lists, {} watches ({} events, {} ended by 410 Gone); {} revisions seen",
            s.operations,
            s.keys,
            s.writes,
            s.acknowledged_writes,
            s.unknown_outcomes,
            s.reads,
            s.lists,
            s.watches,
            s.watch_events,
            s.watches_gone,
            s.revisions_seen
        )?;
        if !self.undecided.is_empty() {
            writeln!(
                f,
                "linearizability undecided (search budget spent) for keys {:?}",
                self.undecided
            )?;
        }
        if self.violations.is_empty() {
            return writeln!(f, "no violations");
        }
        for v in &self.violations {
            writeln!(f, "\n{v}")?;
        }
        for (kind, n) in &self.more {
            writeln!(f, "... and {n} more {kind:?} violation(s)")?;
        }
        Ok(())
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "VIOLATION {:?}: {}", self.kind, self.message)?;
        let mut ops: Vec<&Operation> = self.witness.iter().collect();
        ops.sort_by_key(|op| op.invoke);
        // A long witness shows its two ends (the whole history is kept by
        // the harness).
        const SHOWN: usize = 25;
        for (i, op) in ops.iter().enumerate() {
            if ops.len() > 2 * SHOWN && i == SHOWN {
                writeln!(f, "  ... {} operations ...", ops.len() - 2 * SHOWN)?;
            }
            if ops.len() <= 2 * SHOWN || i < SHOWN || i >= ops.len() - SHOWN {
                writeln!(f, "  {}", crate::describe(op, self.key.as_deref()))?;
            }
        }
        Ok(())
    }
}
