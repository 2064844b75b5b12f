//! The backend-agnostic storage test suite.
//!
//! Every backend runs the same cases through [`storage_suite!`]: give it an
//! expression that builds a fresh [`Harness`] and it expands to one
//! `#[tokio::test]` per case. The embedded backend runs it in
//! `tests/it/embedded.rs`; other backends add one line of their own.

use crate::{EventKind, ListOptions, Storage, StorageError, WatchItem, WatchStream};
use async_trait::async_trait;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// Opens a backend on fresh, private data, and reopens it on the same data.
#[async_trait]
pub trait Harness: Send {
    async fn open(&mut self) -> Arc<dyn Storage>;
    /// Drops `old` (every clone of it must be gone) and opens the same data
    /// again, as a process restart would.
    async fn reopen(&mut self, old: Arc<dyn Storage>) -> Arc<dyn Storage>;
}

/// Expands to one `#[tokio::test]` per suite case for the given harness.
#[macro_export]
macro_rules! storage_suite {
    ($harness:expr) => {
        $crate::storage_suite!(@cases $harness;
            crud_and_compare_and_swap,
            list_pages_at_a_fixed_revision,
            watch_replays_exactly_the_missed_events,
            watch_sees_every_concurrent_write_in_order,
            compaction_expires_old_revisions,
            modified_since_reads_what_changed,
            count_counts_the_live_keys_under_a_prefix,
            restart_keeps_data_and_revision);
    };
    (@cases $harness:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let mut harness = $harness;
                $crate::suite::$case(&mut harness).await;
            }
        )*
    };
}

fn v(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Next event of a watch, failing the test after 10 s.
async fn next_event(w: &mut WatchStream) -> crate::Event {
    loop {
        let item = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .expect("watch event within 10s")
            .expect("watch stream ended")
            .expect("watch error");
        if let WatchItem::Event(e) = item {
            return e;
        }
    }
}

pub async fn crud_and_compare_and_swap(h: &mut dyn Harness) {
    let s = h.open().await;
    let a = s.create("/t/a", v("1")).await.unwrap();
    assert_eq!(a.create_revision, a.mod_revision);
    assert_eq!(s.current_revision().await.unwrap(), a.mod_revision);
    assert_eq!(
        s.create("/t/a", v("x")).await,
        Err(StorageError::AlreadyExists)
    );
    assert_eq!(s.get("/t/a").await.unwrap(), Some(a.clone()));

    let stale = s.update("/t/a", v("x"), a.mod_revision + 100).await;
    assert_eq!(
        stale,
        Err(StorageError::Conflict {
            current: a.mod_revision
        })
    );
    let a2 = s.update("/t/a", v("2"), a.mod_revision).await.unwrap();
    assert!(a2.mod_revision > a.mod_revision);
    assert_eq!(a2.create_revision, a.create_revision);
    assert_eq!(
        s.update("/t/a", v("3"), a.mod_revision).await,
        Err(StorageError::Conflict {
            current: a2.mod_revision
        })
    );
    assert_eq!(
        s.update("/t/missing", v("3"), 1).await,
        Err(StorageError::NotFound)
    );

    assert_eq!(
        s.delete("/t/a", Some(a.mod_revision)).await,
        Err(StorageError::Conflict {
            current: a2.mod_revision
        })
    );
    let gone = s.delete("/t/a", Some(a2.mod_revision)).await.unwrap();
    assert_eq!(gone.value, v("2"));
    assert!(gone.mod_revision > a2.mod_revision);
    assert_eq!(s.get("/t/a").await.unwrap(), None);
    assert_eq!(s.delete("/t/a", None).await, Err(StorageError::NotFound));
    // A failed write consumes no revision.
    assert_eq!(s.current_revision().await.unwrap(), gone.mod_revision);
}

pub async fn list_pages_at_a_fixed_revision(h: &mut dyn Harness) {
    let s = h.open().await;
    for i in 0..10 {
        s.create(&format!("/p/k{i}"), v(&format!("v{i}")))
            .await
            .unwrap();
    }
    s.create("/pz/other", v("x")).await.unwrap();
    s.create("/o/other", v("x")).await.unwrap();

    let first = s
        .list(
            "/p/",
            ListOptions {
                limit: Some(4),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        first
            .items
            .iter()
            .map(|kv| kv.key.as_str())
            .collect::<Vec<_>>(),
        ["/p/k0", "/p/k1", "/p/k2", "/p/k3"]
    );
    assert_eq!(first.next_key.as_deref(), Some("/p/k4"));

    // Change the range between pages: the pages still show the old revision.
    let k5 = s.get("/p/k5").await.unwrap().unwrap();
    s.update("/p/k5", v("changed"), k5.mod_revision)
        .await
        .unwrap();
    s.delete("/p/k7", None).await.unwrap();
    s.create("/p/k45", v("new")).await.unwrap();

    let mut seen = first.items.clone();
    let mut next = first.next_key.clone();
    while let Some(start) = next {
        let page = s
            .list(
                "/p/",
                ListOptions {
                    revision: Some(first.revision),
                    start_key: Some(start),
                    limit: Some(4),
                },
            )
            .await
            .unwrap();
        assert_eq!(page.revision, first.revision);
        seen.extend(page.items);
        next = page.next_key;
    }
    let want: Vec<(String, Vec<u8>)> = (0..10)
        .map(|i| (format!("/p/k{i}"), v(&format!("v{i}"))))
        .collect();
    let got: Vec<(String, Vec<u8>)> = seen.into_iter().map(|kv| (kv.key, kv.value)).collect();
    assert_eq!(got, want);

    let now = s.list("/p/", ListOptions::default()).await.unwrap();
    assert_eq!(now.items.len(), 10, "k45 added, k7 deleted");
    assert!(
        now.items
            .iter()
            .any(|kv| kv.key == "/p/k5" && kv.value == v("changed"))
    );
    let current = s.current_revision().await.unwrap();
    let too_new = s
        .list(
            "/p/",
            ListOptions {
                revision: Some(current + 10),
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(too_new, Err(StorageError::TooLarge { .. })),
        "{too_new:?}"
    );
}

pub async fn watch_replays_exactly_the_missed_events(h: &mut dyn Harness) {
    let s = h.open().await;
    s.create("/w/before", v("0")).await.unwrap();
    let from = s.current_revision().await.unwrap();
    let a = s.create("/w/a", v("1")).await.unwrap();
    s.create("/x/elsewhere", v("1")).await.unwrap();
    let a2 = s.update("/w/a", v("2"), a.mod_revision).await.unwrap();
    let del = s.delete("/w/a", None).await.unwrap();

    let mut w = s.watch("/w/", from).await.unwrap();
    let e1 = next_event(&mut w).await;
    assert_eq!(
        (
            e1.kind,
            e1.kv.key.as_str(),
            e1.kv.value.clone(),
            e1.revision()
        ),
        (EventKind::Created, "/w/a", v("1"), a.mod_revision)
    );
    let e2 = next_event(&mut w).await;
    assert_eq!(
        (e2.kind, e2.revision()),
        (EventKind::Modified, a2.mod_revision)
    );
    assert_eq!(e2.prev.as_ref().map(|p| p.value.clone()), Some(v("1")));
    let e3 = next_event(&mut w).await;
    assert_eq!(
        (e3.kind, e3.revision(), e3.kv.value.clone()),
        (EventKind::Deleted, del.mod_revision, v("2"))
    );
    // Then live events follow.
    let b = s.create("/w/b", v("live")).await.unwrap();
    let e4 = next_event(&mut w).await;
    assert_eq!(
        (e4.kind, e4.kv.key.as_str(), e4.revision()),
        (EventKind::Created, "/w/b", b.mod_revision)
    );
}

pub async fn watch_sees_every_concurrent_write_in_order(h: &mut dyn Harness) {
    let s = h.open().await;
    let from = s.current_revision().await.unwrap();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    s.create(&format!("/c/{w}-{i}"), v("x")).await.unwrap();
                }
            })
        })
        .collect();
    // Start watching while the writes are in flight.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut w = s.watch("/c/", from).await.unwrap();
    let mut revs = Vec::new();
    for _ in 0..200 {
        revs.push(next_event(&mut w).await.revision());
    }
    for t in writers {
        t.await.unwrap();
    }
    assert!(
        revs.windows(2).all(|p| p[1] == p[0] + 1),
        "contiguous revisions: {revs:?}"
    );
    assert_eq!(revs[0], from + 1);
}

pub async fn compaction_expires_old_revisions(h: &mut dyn Harness) {
    let s = h.open().await;
    let a = s.create("/e/a", v("1")).await.unwrap();
    let b = s.create("/e/b", v("1")).await.unwrap();
    s.update("/e/a", v("2"), a.mod_revision).await.unwrap();
    s.compact(b.mod_revision).await.unwrap();

    let old_watch = s.watch("/e/", a.mod_revision).await;
    assert!(
        matches!(old_watch, Err(StorageError::Expired { .. })),
        "watch before compaction must expire"
    );
    let old_list = s
        .list(
            "/e/",
            ListOptions {
                revision: Some(a.mod_revision),
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(old_list, Err(StorageError::Expired { .. })),
        "list before compaction must expire"
    );

    let mut w = s.watch("/e/", b.mod_revision).await.unwrap();
    let e = next_event(&mut w).await;
    assert_eq!((e.kind, e.kv.key.as_str()), (EventKind::Modified, "/e/a"));
    let list = s
        .list(
            "/e/",
            ListOptions {
                revision: Some(b.mod_revision),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        list.items
            .iter()
            .map(|kv| kv.value.clone())
            .collect::<Vec<_>>(),
        vec![v("1"), v("1")]
    );
}

pub async fn count_counts_the_live_keys_under_a_prefix(h: &mut dyn Harness) {
    let s = h.open().await;
    assert_eq!(s.count("/k/").await.unwrap(), 0);
    for i in 0..5 {
        s.create(&format!("/k/{i}"), v("x")).await.unwrap();
    }
    s.create("/k2/other", v("x")).await.unwrap();
    s.create("/j/before", v("x")).await.unwrap();
    s.delete("/k/3", None).await.unwrap();
    assert_eq!(
        s.count("/k/").await.unwrap(),
        4,
        "deleted keys do not count"
    );
    assert_eq!(s.count("/k").await.unwrap(), 5, "a prefix is a prefix");
    assert_eq!(s.count("/").await.unwrap(), 6);
}

pub async fn modified_since_reads_what_changed(h: &mut dyn Harness) {
    let s = h.open().await;
    let a = s.create("/m/a", v("1")).await.unwrap();
    let b = s.create("/m/b", v("1")).await.unwrap();
    s.create("/m/c", v("1")).await.unwrap();
    let seen = b.mod_revision;
    // After `seen`: a updated twice, c deleted, d created, and a write
    // under another prefix.
    let a2 = s.update("/m/a", v("2"), a.mod_revision).await.unwrap();
    let a3 = s.update("/m/a", v("3"), a2.mod_revision).await.unwrap();
    s.delete("/m/c", None).await.unwrap();
    let d = s.create("/m/d", v("1")).await.unwrap();
    let other = s.create("/n/x", v("1")).await.unwrap();
    let changed = s.modified_since("/m/", seen).await.unwrap();
    let got: Vec<(&str, &[u8], u64)> = changed
        .items
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_slice(), kv.mod_revision))
        .collect();
    assert_eq!(
        got,
        vec![
            ("/m/a", &b"3"[..], a3.mod_revision),
            ("/m/d", &b"1"[..], d.mod_revision)
        ]
    );
    assert!(
        changed.revision >= other.mod_revision,
        "read at the latest revision"
    );
    // Nothing changed since the latest revision; after compaction the
    // answer is the same (read from the data instead of the history).
    assert!(
        s.modified_since("/m/", changed.revision)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    s.compact(d.mod_revision).await.unwrap();
    let again = s.modified_since("/m/", seen).await.unwrap();
    assert_eq!(again.items, changed.items);
}

pub async fn restart_keeps_data_and_revision(h: &mut dyn Harness) {
    let s = h.open().await;
    let a = s.create("/r/a", v("1")).await.unwrap();
    s.update("/r/a", v("2"), a.mod_revision).await.unwrap();
    let rev = s.current_revision().await.unwrap();
    let s = h.reopen(s).await;
    assert_eq!(s.current_revision().await.unwrap(), rev);
    let got = s.get("/r/a").await.unwrap().unwrap();
    assert_eq!((got.value, got.mod_revision), (v("2"), rev));
    let b = s.create("/r/b", v("1")).await.unwrap();
    assert_eq!(b.mod_revision, rev + 1);
    let mut w = s.watch("/r/", a.mod_revision).await.unwrap();
    assert_eq!(
        next_event(&mut w).await.kind,
        EventKind::Modified,
        "history survives restart"
    );
}
