//! The checker on histories made by hand: correct ones pass, and each kind
//! of wrong one (a lost write, a stale read, a watch skipping, repeating or
//! reordering an event, a resourceVersion going back or used twice, a
//! conflict that should not be) is caught, with a short witness.

use wasm_apiserver_history::{
    Call, Event, EventKind, History, Item, Kind, Operation, Outcome, Report, Rv, Time, WatchEnd,
    check,
};

fn op(
    client: u32,
    invoke: Time,
    complete: Option<Time>,
    call: Call,
    outcome: Outcome,
) -> Operation {
    Operation {
        client,
        invoke,
        complete,
        call,
        outcome,
    }
}

fn create(t: Time, key: &str, value: &str, rv: Rv) -> Operation {
    op(
        1,
        t,
        Some(t + 1),
        Call::Create {
            key: key.into(),
            value: value.into(),
        },
        Outcome::Written { rv },
    )
}

fn update(t: Time, key: &str, expected: Rv, value: &str, outcome: Outcome) -> Operation {
    op(
        2,
        t,
        Some(t + 1),
        Call::Update {
            key: key.into(),
            expected,
            value: value.into(),
        },
        outcome,
    )
}

fn delete(t: Time, key: &str, expected: Rv, rv: Rv) -> Operation {
    op(
        3,
        t,
        Some(t + 1),
        Call::Delete {
            key: key.into(),
            expected: Some(expected),
        },
        Outcome::Deleted { rv: Some(rv) },
    )
}

fn get(t: Time, key: &str, found: Option<(Rv, &str)>) -> Operation {
    op(
        4,
        t,
        Some(t + 1),
        Call::Get { key: key.into() },
        match found {
            Some((rv, value)) => Outcome::Found {
                rv,
                value: value.into(),
            },
            None => Outcome::NotFound,
        },
    )
}

fn list(t: Time, rv: Rv, items: &[(&str, Rv, &str)]) -> Operation {
    op(
        5,
        t,
        Some(t + 1),
        Call::List,
        Outcome::Listed {
            rv,
            items: items
                .iter()
                .map(|(k, rv, v)| Item {
                    key: (*k).into(),
                    rv: *rv,
                    value: (*v).into(),
                })
                .collect(),
        },
    )
}

fn ev(kind: EventKind, key: &str, rv: Rv, value: &str) -> Event {
    Event {
        kind,
        key: key.into(),
        rv,
        value: value.into(),
        at: 1_000,
    }
}

fn watch(from: Rv, events: Vec<Event>, end: WatchEnd) -> Operation {
    op(
        6,
        0,
        Some(1_000),
        Call::Watch { from },
        Outcome::Watched { events, end },
    )
}

/// A correct history: a key created, updated (one CAS winning, one losing),
/// read, listed, deleted and created again; a watch sees all of it.
fn correct() -> Vec<Operation> {
    use EventKind::*;
    vec![
        create(10, "a", "v1", 5),
        create(12, "b", "w1", 6),
        update(20, "a", 5, "v2", Outcome::Written { rv: 7 }),
        update(22, "a", 5, "v3", Outcome::Conflict),
        get(30, "a", Some((7, "v2"))),
        list(40, 7, &[("a", 7, "v2"), ("b", 6, "w1")]),
        delete(50, "a", 7, 8),
        get(60, "a", None),
        update(62, "a", 7, "v4", Outcome::NotFound),
        create(70, "a", "v5", 9),
        list(80, 9, &[("a", 9, "v5"), ("b", 6, "w1")]),
        watch(
            4,
            vec![
                ev(Added, "a", 5, "v1"),
                ev(Added, "b", 6, "w1"),
                ev(Modified, "a", 7, "v2"),
                ev(Deleted, "a", 8, "v2"),
                ev(Added, "a", 9, "v5"),
            ],
            WatchEnd::Stopped,
        ),
        watch(
            6,
            vec![ev(Modified, "a", 7, "v2"), ev(Deleted, "a", 8, "v2")],
            WatchEnd::Broken {
                reason: "connection reset".into(),
            },
        ),
        watch(2, vec![], WatchEnd::Gone),
    ]
}

fn run(ops: Vec<Operation>) -> Report {
    let report = check(&History::new(ops));
    eprintln!("{report}");
    report
}

fn assert_caught(report: &Report, kind: Kind) {
    assert!(
        report.has(kind),
        "expected a {kind:?} violation, got:\n{report}"
    );
    for v in report.violations.iter().filter(|v| v.kind == kind) {
        assert!(!v.witness.is_empty(), "{kind:?} without a witness");
    }
}

#[test]
fn a_correct_history_passes() {
    let report = run(correct());
    assert!(report.is_ok(), "{report}");
    assert!(report.undecided.is_empty());
    assert_eq!(report.stats.operations, 14);
    assert_eq!(report.stats.watch_events, 7);
    assert_eq!(report.stats.watches_gone, 1);
}

#[test]
fn concurrent_and_unanswered_operations_pass_when_some_order_explains_them() {
    let ops = vec![
        create(10, "a", "v1", 5),
        // Two overlapping CAS updates from rv 5: the later-invoked one won.
        op(
            1,
            20,
            Some(40),
            Call::Update {
                key: "a".into(),
                expected: 5,
                value: "x".into(),
            },
            Outcome::Conflict,
        ),
        op(
            2,
            21,
            Some(30),
            Call::Update {
                key: "a".into(),
                expected: 5,
                value: "y".into(),
            },
            Outcome::Written { rv: 8 },
        ),
        // A read overlapping both sees the old value.
        get(22, "a", Some((5, "v1"))),
        // An update that timed out and took effect, seen later by a read.
        op(
            3,
            50,
            None,
            Call::Update {
                key: "a".into(),
                expected: 8,
                value: "z".into(),
            },
            Outcome::Unknown {
                reason: "timeout".into(),
            },
        ),
        get(60, "a", Some((8, "y"))),
        get(70, "a", Some((11, "z"))),
        // A create that failed with a broken connection and never happened.
        op(
            3,
            80,
            Some(85),
            Call::Create {
                key: "b".into(),
                value: "never".into(),
            },
            Outcome::Unknown {
                reason: "connection reset".into(),
            },
        ),
        list(90, 11, &[("a", 11, "z")]),
    ];
    let report = run(ops);
    assert!(report.is_ok(), "{report}");
}

#[test]
fn a_lost_write_is_caught() {
    // The update of rv 7 was acknowledged, yet the final list shows rv 5.
    let ops = vec![
        create(10, "a", "v1", 5),
        update(20, "a", 5, "v2", Outcome::Written { rv: 7 }),
        list(100, 9, &[("a", 5, "v1")]),
    ];
    let report = run(ops);
    assert_caught(&report, Kind::LostWrite);
    assert_caught(&report, Kind::NotLinearizable);
}

#[test]
fn a_stale_read_is_caught() {
    let ops = vec![
        create(10, "a", "v1", 5),
        update(20, "a", 5, "v2", Outcome::Written { rv: 7 }),
        get(30, "a", Some((5, "v1"))),
        get(40, "a", Some((7, "v2"))),
    ];
    let report = run(ops);
    assert_caught(&report, Kind::StaleRead);
    assert!(!report.has(Kind::LostWrite), "{report}");
    assert_caught(&report, Kind::NotLinearizable);
}

#[test]
fn a_deleted_key_read_back_is_caught() {
    let ops = vec![
        create(10, "a", "v1", 5),
        delete(20, "a", 5, 6),
        get(30, "a", Some((5, "v1"))),
    ];
    let report = run(ops);
    assert_caught(&report, Kind::LostWrite);
    assert_caught(&report, Kind::NotLinearizable);
}

#[test]
fn a_conflict_on_the_current_version_is_caught() {
    // Nothing else wrote "a", yet the CAS on its current rv failed.
    let ops = vec![
        create(10, "a", "v1", 5),
        update(20, "a", 5, "v2", Outcome::Conflict),
    ];
    let report = run(ops);
    assert_caught(&report, Kind::NotLinearizable);
}

#[test]
fn two_successful_cas_on_one_version_are_caught() {
    let ops = vec![
        create(10, "a", "v1", 5),
        update(20, "a", 5, "v2", Outcome::Written { rv: 7 }),
        update(30, "a", 5, "v3", Outcome::Written { rv: 8 }),
    ];
    let report = run(ops);
    assert_caught(&report, Kind::NotLinearizable);
}

#[test]
fn a_watch_skipping_an_event_is_caught() {
    use EventKind::*;
    let mut ops = correct();
    ops.push(watch(
        4,
        vec![
            ev(Added, "a", 5, "v1"),
            ev(Added, "b", 6, "w1"),
            // rv 7 (a := v2) is missing.
            ev(Deleted, "a", 8, "v2"),
        ],
        WatchEnd::Stopped,
    ));
    let report = run(ops);
    assert_caught(&report, Kind::WatchGap);
    assert_eq!(report.violations.len(), 1, "{report}");
}

#[test]
fn a_watch_missing_the_tail_it_caught_up_to_is_caught() {
    use EventKind::*;
    let mut ops = correct();
    ops.push(watch(
        6,
        vec![ev(Modified, "a", 7, "v2")],
        WatchEnd::CaughtUp { through: 9 },
    ));
    let report = run(ops);
    assert_caught(&report, Kind::WatchGap);
}

#[test]
fn a_watch_repeating_an_event_is_caught() {
    use EventKind::*;
    let mut ops = correct();
    ops.push(watch(
        6,
        vec![
            ev(Modified, "a", 7, "v2"),
            ev(Modified, "a", 7, "v2"),
            ev(Deleted, "a", 8, "v2"),
        ],
        WatchEnd::Stopped,
    ));
    let report = run(ops);
    assert_caught(&report, Kind::WatchRepeated);
}

#[test]
fn a_watch_going_back_or_replaying_its_start_is_caught() {
    use EventKind::*;
    let mut ops = correct();
    ops.push(watch(
        6,
        vec![ev(Deleted, "a", 8, "v2"), ev(Modified, "a", 7, "v2")],
        WatchEnd::Stopped,
    ));
    ops.push(watch(
        7,
        vec![ev(Modified, "a", 7, "v2"), ev(Deleted, "a", 8, "v2")],
        WatchEnd::Stopped,
    ));
    let report = run(ops);
    assert_caught(&report, Kind::WatchOutOfOrder);
    assert_caught(&report, Kind::WatchBeforeStart);
}

#[test]
fn a_resource_version_going_back_is_caught() {
    // "b" is written after "a"'s write of rv 7 was acknowledged, yet gets 6.
    let ops = vec![
        create(10, "a", "v1", 7),
        create(20, "b", "w1", 6),
        list(30, 7, &[("a", 7, "v1"), ("b", 6, "w1")]),
    ];
    let report = run(ops);
    assert_caught(&report, Kind::RevisionWentBack);
    let v = report
        .violations
        .iter()
        .find(|v| v.kind == Kind::RevisionWentBack)
        .expect("violation");
    assert_eq!(v.witness.len(), 2);
}

#[test]
fn a_list_older_than_a_completed_write_is_caught() {
    let ops = vec![create(10, "a", "v1", 7), list(30, 6, &[])];
    let report = run(ops);
    assert_caught(&report, Kind::RevisionWentBack);
}

#[test]
fn a_resource_version_used_twice_is_caught() {
    // After a crash the store handed out rv 7 again.
    let ops = vec![
        create(10, "a", "v1", 7),
        create(20, "b", "w1", 7),
        list(30, 8, &[("a", 7, "v1"), ("b", 7, "w1")]),
    ];
    let report = run(ops);
    assert_caught(&report, Kind::RevisionReused);
}

#[test]
fn the_witness_of_a_long_history_is_short() {
    // Forty keys written, updated and read correctly, concurrently, and one
    // stale read of key k17 hidden in the middle.
    let mut ops = Vec::new();
    let mut rv = 100;
    let mut t = 0;
    for round in 0..5 {
        for k in 0..40 {
            let key = format!("k{k}");
            rv += 1;
            t += 10;
            if round == 0 {
                ops.push(create(t, &key, &format!("{key}-{round}"), rv));
            } else {
                ops.push(update(
                    t,
                    &key,
                    rv - 40,
                    &format!("{key}-{round}"),
                    Outcome::Written { rv },
                ));
            }
            ops.push(get(t + 5, &key, Some((rv, &format!("{key}-{round}")))));
        }
    }
    // After the last round, k17 read back at its round-3 state.
    ops.push(get(t + 100, "k17", Some((rv - 62, "k17-3"))));
    ops.push(get(t + 200, "k17", Some((rv - 22, "k17-4"))));
    let report = run(ops);
    assert_caught(&report, Kind::NotLinearizable);
    let v = report
        .violations
        .iter()
        .find(|v| v.kind == Kind::NotLinearizable)
        .expect("violation");
    assert_eq!(v.key.as_deref(), Some("k17"));
    assert!(
        v.witness.len() <= 3,
        "witness of {} operations:\n{v}",
        v.witness.len()
    );
    assert!(v.witness.iter().any(|o| o.invoke == t + 100), "{v}");
}

#[test]
fn histories_round_trip_through_json() {
    let history = History::new(correct());
    let back = History::from_json(&history.to_json()).expect("parse");
    assert_eq!(back, history);
}

#[test]
fn a_write_refused_yet_applied_is_caught_with_a_witness_that_proves_it() {
    // The shape found on etcd: an update answered 409 Conflict took effect
    // (a concurrent read returns its value), in a busy history.
    let mut ops = Vec::new();
    let mut rv = 10;
    ops.push(create(0, "a", "v0", rv));
    for i in 1..20 {
        let t = i * 100;
        rv += 2;
        ops.push(update(
            t,
            "a",
            rv - 2,
            &format!("v{i}"),
            Outcome::Written { rv },
        ));
        ops.push(get(t + 10, "a", Some((rv, &format!("v{i}")))));
    }
    ops.push(op(
        7,
        5_000,
        Some(5_050),
        Call::Update {
            key: "a".into(),
            expected: rv,
            value: "refused".into(),
        },
        Outcome::Conflict,
    ));
    ops.push(op(
        8,
        5_010,
        Some(5_060),
        Call::Get { key: "a".into() },
        Outcome::Found {
            rv: rv + 3,
            value: "refused".into(),
        },
    ));
    let report = run(ops);
    let v = report
        .violations
        .iter()
        .find(|v| v.kind == Kind::NotLinearizable)
        .unwrap_or_else(|| panic!("not caught:\n{report}"));
    // Both operations are needed, and nothing more.
    assert_eq!(v.witness.len(), 2, "{v}");
    assert!(v.witness.iter().all(|o| o.invoke >= 5_000), "{v}");
}

#[test]
fn a_witness_keeps_the_writes_its_reads_depend_on() {
    // A stale read in the middle of a busy key: cutting writes out of the
    // middle would make up other violations, so the witness keeps the
    // writes between the state read and the read.
    let ops = vec![
        create(0, "a", "v1", 5),
        update(10, "a", 5, "v2", Outcome::Written { rv: 7 }),
        update(20, "a", 7, "v3", Outcome::Written { rv: 9 }),
        get(30, "a", Some((7, "v2"))),
        update(40, "a", 9, "v4", Outcome::Written { rv: 11 }),
        get(50, "a", Some((11, "v4"))),
    ];
    let report = run(ops);
    let v = report
        .violations
        .iter()
        .find(|v| v.kind == Kind::NotLinearizable)
        .unwrap_or_else(|| panic!("not caught:\n{report}"));
    let shown: Vec<Time> = v.witness.iter().map(|o| o.invoke).collect();
    assert_eq!(shown, vec![10, 20, 30], "{v}");
}
