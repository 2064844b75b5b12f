//! The shared storage suite on the embedded backend, plus its own extras.

use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_storage::embedded::{EmbeddedOptions, EmbeddedStore};
use wasm_apiserver_storage::suite::Harness;
use wasm_apiserver_storage::{Storage, WatchItem, storage_suite};

struct Embedded {
    dir: tempfile::TempDir,
}

impl Embedded {
    fn new() -> Self {
        Embedded {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn options() -> EmbeddedOptions {
        EmbeddedOptions {
            progress_interval: Duration::from_millis(200),
            broadcast_capacity: 16,
            // Small, so the suite runs with pages evicted and re-read.
            cache_bytes: 1024 * 1024,
            commit_delay: Duration::from_millis(1),
        }
    }
}

#[async_trait::async_trait]
impl Harness for Embedded {
    async fn open(&mut self) -> Arc<dyn Storage> {
        Arc::new(EmbeddedStore::open(&self.dir.path().join("db"), Self::options()).unwrap())
    }

    async fn reopen(&mut self, old: Arc<dyn Storage>) -> Arc<dyn Storage> {
        drop(old);
        // The writer thread releases the file once its queue closes.
        for _ in 0..100 {
            if let Ok(s) = EmbeddedStore::open(&self.dir.path().join("db"), Self::options()) {
                return Arc::new(s);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("could not reopen the store");
    }
}

storage_suite!(Embedded::new());

#[tokio::test]
async fn idle_watch_reports_progress() {
    let mut h = Embedded::new();
    let s = h.open().await;
    let a = s.create("/p/a", b"1".to_vec()).await.unwrap();
    s.create("/q/b", b"1".to_vec()).await.unwrap();
    let mut w = s.watch("/p/", a.mod_revision).await.unwrap();
    let item = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // Progress covers writes outside the prefix too.
    assert_eq!(item, WatchItem::Progress(a.mod_revision + 1));
}

/// A store whose writer waits `delay` for announced writes.
fn delayed_store(dir: &tempfile::TempDir, delay: Duration) -> EmbeddedStore {
    EmbeddedStore::open(
        &dir.path().join("db"),
        EmbeddedOptions {
            commit_delay: delay,
            ..EmbeddedOptions::default()
        },
    )
    .unwrap()
}

#[tokio::test]
async fn a_lone_write_never_waits_for_the_commit_delay() {
    let dir = tempfile::tempdir().unwrap();
    let store = delayed_store(&dir, Duration::from_secs(30));
    // One announced write (its own, or one other): never enough to wait.
    let own = store.announce_write();
    let other = store.announce_write();
    drop(own);
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), store.create("/a", b"1".to_vec()))
        .await
        .expect("a write with one sibling announced waited for the delay")
        .unwrap();
    drop(other);
    tokio::time::timeout(Duration::from_secs(10), store.create("/b", b"2".to_vec()))
        .await
        .expect("a write with nothing announced waited for the delay")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(store.commits(), 2);
}

#[tokio::test]
async fn announced_writes_share_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let delay = Duration::from_millis(400);
    let store = delayed_store(&dir, delay);
    let before = store.commits();
    // Two more writes are on their way when the first reaches the writer.
    let (b, c) = (store.announce_write(), store.announce_write());
    let started = std::time::Instant::now();
    let first = tokio::spawn({
        let store = store.clone();
        async move { store.create("/a", b"1".to_vec()).await }
    });
    tokio::time::sleep(delay / 4).await;
    drop(b);
    let second = store.create("/b", b"2".to_vec());
    drop(c);
    let third = store.create("/c", b"3".to_vec());
    let (second, third) = tokio::join!(second, third);
    let first = first.await.unwrap().unwrap();
    let (second, third) = (second.unwrap(), third.unwrap());
    assert!(
        started.elapsed() >= delay,
        "the writer did not wait for the announced writes"
    );
    assert_eq!(
        store.commits() - before,
        1,
        "writes announced before the commit were committed apart"
    );
    assert_eq!(
        (first.mod_revision + 1, first.mod_revision + 2),
        (second.mod_revision, third.mod_revision)
    );
}

/// Writes a data file as an earlier release did (no `format` key) or as a
/// later one might (a format number this binary does not know).
fn write_meta(path: &std::path::Path, entries: &[(&str, u64)]) {
    let db = redb::Database::create(path).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut kv = w
            .open_table(redb::TableDefinition::<&str, &[u8]>::new("kv"))
            .unwrap();
        // create and mod revision 1, value "v".
        let mut v = Vec::new();
        v.extend_from_slice(&1u64.to_be_bytes());
        v.extend_from_slice(&1u64.to_be_bytes());
        v.extend_from_slice(b"v");
        kv.insert("/registry/a", v.as_slice()).unwrap();
        w.open_table(redb::TableDefinition::<u64, &[u8]>::new("log"))
            .unwrap();
        let mut meta = w
            .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
            .unwrap();
        for (k, v) in entries {
            meta.insert(*k, *v).unwrap();
        }
    }
    w.commit().unwrap();
}

#[tokio::test]
async fn older_files_are_migrated_and_newer_ones_refused() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.db");
    write_meta(&old, &[("revision", 1)]);
    let store = EmbeddedStore::open(&old, Embedded::options()).unwrap();
    assert_eq!(store.get("/registry/a").await.unwrap().unwrap().value, b"v");
    let status = store.status().await.unwrap();
    assert_eq!(status.revision, 1);
    assert!(status.size_bytes.unwrap() > 0);
    drop(store);

    let newer = dir.path().join("newer.db");
    write_meta(&newer, &[("revision", 1), ("format", 99)]);
    let Err(e) = EmbeddedStore::open(&newer, Embedded::options()) else {
        panic!("a newer format was opened");
    };
    let text = e.to_string();
    assert!(
        text.contains("format is 99, newer than this binary reads (1)"),
        "{text}"
    );
}

#[tokio::test]
async fn snapshots_are_consistent_and_restores_move_revisions_forward() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("db"), Embedded::options()).unwrap();
    for i in 0..50 {
        store
            .create(&format!("/registry/k{i:02}"), vec![b'0'])
            .await
            .unwrap();
    }
    // Writers keep going while the snapshot is taken.
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut rev = store
                .get("/registry/k00")
                .await
                .unwrap()
                .unwrap()
                .mod_revision;
            for n in 0..300u32 {
                let kv = store
                    .update("/registry/k00", n.to_string().into_bytes(), rev)
                    .await
                    .unwrap();
                rev = kv.mod_revision;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    let snap = dir.path().join("snap.db");
    let s2 = store.clone();
    let path = snap.clone();
    let info = tokio::task::spawn_blocking(move || s2.snapshot(&path))
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    assert_eq!(info.keys, 50);
    // The snapshot is the store as of its revision, exactly.
    let at = store
        .list(
            "/registry/",
            wasm_apiserver_storage::ListOptions {
                revision: Some(info.revision),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let after = store.current_revision().await.unwrap();
    assert!(after >= info.revision);

    let restored = dir.path().join("restored").join("db");
    std::fs::create_dir_all(restored.parent().unwrap()).unwrap();
    let r = wasm_apiserver_storage::embedded::restore(&snap, &restored, 1_000).unwrap();
    assert_eq!(r.revision, info.revision + 1_000);
    assert!(wasm_apiserver_storage::embedded::restore(&snap, &restored, 1).is_err());
    let back = EmbeddedStore::open(&restored, Embedded::options()).unwrap();
    let listed = back.list("/registry/", Default::default()).await.unwrap();
    assert_eq!(listed.items, at.items);
    assert_eq!(
        back.current_revision().await.unwrap(),
        info.revision + 1_000
    );
    // History from before the restore is gone: a watch from there is 410.
    assert!(matches!(
        back.watch("/registry/", info.revision).await,
        Err(wasm_apiserver_storage::StorageError::Expired { .. })
    ));
    // New writes continue above every revision seen before.
    let kv = back.create("/registry/new", vec![1]).await.unwrap();
    assert!(kv.mod_revision > after);
}

#[tokio::test]
async fn compaction_runs_in_steps_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("db"), Embedded::options()).unwrap();
    let mut rev = store
        .create("/registry/k", vec![0])
        .await
        .unwrap()
        .mod_revision;
    let steps = wasm_apiserver_storage::embedded::COMPACTION_STEP * 2 + 10;
    for i in 0..steps {
        rev = store
            .update("/registry/k", i.to_be_bytes().to_vec(), rev)
            .await
            .unwrap()
            .mod_revision;
    }
    let commits = store.commits();
    store.compact(rev - 1).await.unwrap();
    // More than one step, each its own transaction.
    assert!(
        store.commits() - commits >= 3,
        "{}",
        store.commits() - commits
    );
    let status = store.status().await.unwrap();
    assert_eq!(status.compacted, Some(rev - 1));
    assert!(matches!(
        store.watch("/registry/", rev - 2).await,
        Err(wasm_apiserver_storage::StorageError::Expired { .. })
    ));
    assert!(store.watch("/registry/", rev - 1).await.is_ok());
}
