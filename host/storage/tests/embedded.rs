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
