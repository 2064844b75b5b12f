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
