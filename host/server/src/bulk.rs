//! Where LIST responses are built: a runtime of their own whose threads
//! run at a lower OS priority than the request workers.
//!
//! A LIST reads, decodes and encodes every object it returns: hundreds of
//! microseconds to seconds with no await point, on whichever worker runs
//! it. On a machine of two cores a flood of LISTs (each holding only the
//! seat flow control gives it) still keeps a worker busy, and a short
//! request woken on that worker waits behind it. Here the kernel settles
//! it: a request worker made ready preempts a niced bulk thread at once,
//! and the bulk threads take what CPU is left (CFS gives a nice-19 thread
//! 15/1024 of the weight of a nice-0 one: slowed while the request
//! workers are busy, never starved).

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The bulk threads' nice value (the request workers run at 0): the
/// lowest. In the flood bench (one run each, interleaved with LISTs on
/// the request workers) 19 gave another user's GET p99 1.40x and 1.59x of
/// quiet, 10 gave 2.34x and 2.15x.
const NICE: i32 = 19;

static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether [`run`] uses the bulk runtime (on by default) or runs its work
/// in place: for the benchmark, which measures a LIST flood both ways in
/// one process.
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    RUNTIME
        .get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(1, usize::from);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("bulk")
                .on_thread_start(|| {
                    // On Linux a thread's nice value is its own.
                    if let Err(e) = rustix::process::nice(NICE) {
                        tracing::warn!("cannot lower a bulk thread's priority: {e}");
                    }
                })
                .enable_all()
                .build()
                .inspect_err(|e| {
                    tracing::error!("no bulk runtime, LISTs run on the request workers: {e}");
                })
                .ok()
        })
        .as_ref()
}

/// Aborts the spawned task when the request that waits for it goes away
/// (its client disconnected or its deadline passed).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `work` on the bulk runtime and waits for it; a panic in it is
/// resumed here, as if it had run in place.
pub async fn run<F>(work: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let Some(rt) = runtime().filter(|_| ENABLED.load(Ordering::Relaxed)) else {
        return work.await;
    };
    let mut task = AbortOnDrop(rt.spawn(work));
    match (&mut task.0).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only an abort cancels the task, and only dropping `task` aborts.
        Err(e) => unreachable!("bulk task cancelled while awaited: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn runs_on_a_niced_thread_and_returns_its_output() {
        let here = rustix::process::getpriority_process(None).expect("priority");
        let (name, nice) = super::run(async {
            (
                std::thread::current().name().map(str::to_owned),
                rustix::process::getpriority_process(None).expect("priority"),
            )
        })
        .await;
        assert_eq!(name.as_deref(), Some("bulk"));
        assert_eq!(nice, (here + super::NICE).min(19));
    }

    #[tokio::test]
    async fn a_panic_is_resumed_in_the_caller() {
        let caught = tokio::spawn(super::run(async { panic!("boom") })).await;
        assert!(caught.is_err_and(|e| e.is_panic()));
    }

    #[tokio::test]
    async fn dropping_the_waiter_aborts_the_work() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let waiter = tokio::spawn(super::run(async move {
            let _tx = tx;
            std::future::pending::<()>().await
        }));
        tokio::task::yield_now().await;
        waiter.abort();
        // The sender is dropped only when the bulk task is.
        assert!(rx.await.is_err());
    }
}
