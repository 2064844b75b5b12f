//! Histories of concurrent clients of the API server, recorded while
//! faults are injected, and the checks that decide whether the server kept
//! its promises: per-key linearizability of the compare-and-swap register
//! with resourceVersions, watches delivering each change exactly once and
//! in order, resourceVersions never going backwards, no acknowledged write
//! lost. A failure prints the shortest history found that shows it.
//!
//! - `history`: the recorded operations and the [`Recorder`] clients use;
//! - `wgl`: a Wing–Gong–Lowe linearizability search over any [`wgl::Model`];
//! - `register`: the model of one key and the projection of a history on it;
//! - `checks`: every check, the [`Report`] and its violations;
//! - `minimize`: delta debugging of failing histories.
//!
//! The crate does no IO; the end-to-end harness (`tests/tests/e2e/consistency.rs`)
//! records histories against the real binary.

pub mod checks;
pub mod history;
pub mod minimize;
pub mod register;
pub mod wgl;

pub use checks::{Kind, Report, Violation, check, check_with_budget};
pub use history::{
    Call, Event, EventKind, History, Item, Operation, Outcome, Pending, Recorder, Rv, Time,
    WatchEnd,
};

/// One line describing `op`; with `key`, lists show only that key.
pub fn describe(op: &Operation, key: Option<&str>) -> String {
    let ms = |t: Time| format!("{:.3}", t as f64 / 1e6);
    let when = format!(
        "[{:>10} ms .. {:>10}]",
        ms(op.invoke),
        op.complete
            .map_or("never".to_string(), |c| format!("{} ms", ms(c)))
    );
    let call = match &op.call {
        Call::Create { key, value } => format!("create {key} = {value:?}"),
        Call::Update {
            key,
            expected,
            value,
        } => format!("update {key} if rv={expected} to {value:?}"),
        Call::Delete { key, expected } => match expected {
            Some(e) => format!("delete {key} if rv={e}"),
            None => format!("delete {key}"),
        },
        Call::Get { key } => format!("get {key}"),
        Call::List => "list".to_string(),
        Call::Watch { from } => format!("watch from rv={from}"),
    };
    let outcome = match &op.outcome {
        Outcome::Written { rv } => format!("written at rv={rv}"),
        Outcome::Deleted { rv: Some(rv) } => format!("deleted at rv={rv}"),
        Outcome::Deleted { rv: None } => "deleted".to_string(),
        Outcome::AlreadyExists => "409 AlreadyExists".to_string(),
        Outcome::Conflict => "409 Conflict".to_string(),
        Outcome::NotFound => "404 NotFound".to_string(),
        Outcome::Found { rv, value } => format!("found {value:?} at rv={rv}"),
        Outcome::Listed { rv, items } => {
            let shown: Vec<String> = items
                .iter()
                .filter(|i| key.is_none_or(|k| k == i.key))
                .map(|i| format!("{}={:?}@{}", i.key, i.value, i.rv))
                .collect();
            match key {
                Some(k) if shown.is_empty() => format!("listed at rv={rv}: {k} absent"),
                _ => format!("listed at rv={rv}: [{}]", shown.join(", ")),
            }
        }
        Outcome::Watched { events, end } => {
            let mut shown: Vec<String> = events
                .iter()
                .take(30)
                .map(|e| format!("{:?} {}={:?}@{}", e.kind, e.key, e.value, e.rv))
                .collect();
            if events.len() > 30 {
                shown.push(format!("... {} more", events.len() - 30));
            }
            format!("events [{}], then {end:?}", shown.join(", "))
        }
        Outcome::Unknown { reason } => format!("unknown outcome ({reason})"),
    };
    format!("client {:>3} {when} {call} => {outcome}", op.client)
}
