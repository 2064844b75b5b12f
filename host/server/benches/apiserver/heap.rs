//! The memory scenarios, in a bench binary of their own: its global
//! allocator is the product's wrapped in a counter of the bytes handed out
//! and not yet given back (the live heap, which, unlike the RSS, the
//! allocator's retention of freed pages does not blur). Every allocation
//! and free then updates one shared atomic, which costs the `get`
//! scenario a fifth of its CPU; so no throughput or latency scenario runs
//! here (`apiserver`, main.rs, has them, on the bare allocator), and
//! `allocators_of_the_benches` (server tests) fails when one is added.
//!
//! ```text
//! cargo bench -p wasm-apiserver --bench apiserver-heap [-- context]
//! ```
//!
//! Scenarios: `context` (issue 33, see `context.rs`): RSS and live heap of
//! loaded policies and components, their first load, the field index; the
//! added latency per create it prints is a difference of two variants
//! measured on this same (counting) allocator.

// The modules are the `apiserver` bench's; this binary runs one scenario.
#![allow(dead_code)]

#[global_allocator]
static ALLOC: cap::Cap<wasm_apiserver::Allocator> =
    cap::Cap::new(wasm_apiserver::Allocator, usize::MAX);

mod context;
mod harness;

use harness::{Error, print_table, runtime};
use std::time::{Duration, Instant};

/// Bytes of heap live now (allocated and not freed), across the process.
pub(crate) fn live_heap() -> usize {
    ALLOC.allocated()
}

fn main() -> Result<(), Error> {
    let window = Duration::from_secs(
        std::env::var("BENCH_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5),
    );
    let server_rt = runtime("srv-worker")?;
    let client_rt = runtime("cli-worker")?;
    let srv = server_rt.handle().clone();
    let dir = tempfile::tempdir()?;
    println!(
        "wasm-apiserver memory benchmark (apiserver-heap): the product's allocator counting the \
         live heap; no throughput figure is measured here"
    );
    let started = Instant::now();
    let rows = client_rt.block_on(context::context(&srv, dir.path(), window))?;
    println!();
    print_table(&rows);
    println!();
    context::print_targets(&rows);
    println!("\ntotal run time {:.1}s", started.elapsed().as_secs_f64());
    client_rt.shutdown_timeout(Duration::from_secs(1));
    server_rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
