//! Work that must stay below requests
//! ([`policy_audit`](super::policy_audit)) runs on a thread of its own at
//! the lowest priority.
//!
//! The thread drives a single-threaded tokio runtime at nice 19 (on Linux
//! a thread's nice value is its own). The kernel then gives it a core when
//! the request path leaves one idle, and a request's thread that wakes
//! takes the core back from it: what a CPU budget can only approximate
//! from the request counts ([`crate::load::Load`]), the scheduler does
//! with a weight of 15 against a request worker's 1024. The work still
//! holds its own budget, so an idle server is not filled by it either.
//!
//! Whatever the work awaits of the rest of the server (a storage commit, a
//! read) is done where it always is; only its own polling, and the plugin
//! calls in it, happen on this thread. One thread serves the process.

use super::AbortOnDrop;
use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::Handle;

/// The background runtime, started on first use.
fn handle() -> &'static Handle {
    static HANDLE: OnceLock<Handle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("background")
            .build()
            .expect("the background runtime");
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("background".to_owned())
            .spawn(move || {
                if let Err(e) = rustix::process::nice(19) {
                    tracing::warn!("cannot lower the background thread's priority: {e}");
                }
                rt.block_on(std::future::pending::<()>());
            })
            .expect("the background thread");
        handle
    })
}

/// Runs `work` on the background thread until it ends or the returned
/// future is dropped (which aborts it).
pub async fn run<F>(work: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut task = AbortOnDrop(vec![handle().spawn(work)]);
    if let Some(t) = task.0.first_mut() {
        let _ = t.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn work_runs_on_the_background_thread_and_stops_when_dropped() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        run(async move {
            let name = std::thread::current().name().map(str::to_owned);
            let _ = tx.send((name, rustix::process::getpriority_process(None).ok()));
        })
        .await;
        let (name, nice) = rx.await.unwrap();
        assert_eq!(name.as_deref(), Some("background"));
        // The work's own thread runs at the lowest priority.
        assert_eq!(nice, Some(19));

        let dropped = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flag = Flag(dropped.clone());
        let forever = run(async move {
            let _flag = flag;
            std::future::pending::<()>().await;
        });
        let _ = tokio::time::timeout(Duration::from_millis(50), forever).await;
        for _ in 0..100 {
            if dropped.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the background task outlived its caller");
    }
}
