//! `global-counter`: a test fixture that keeps a counter in a global and
//! answers every call with the count as the audit annotation `calls` (and
//! as a warning), allowing. On a fresh instance per call the count is
//! always 1; any reuse of an instance, or state shared between calls,
//! would show 2 or more.

use std::sync::atomic::{AtomicU32, Ordering};
use wasm_apiserver_plugin_sdk::{Policy, Request, Response, export_policy};

static CALLS: AtomicU32 = AtomicU32::new(0);

struct GlobalCounter;

fn count() -> Response {
    let n = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    Response::allow()
        .annotate("calls", n.to_string())
        .warn(format!("calls={n}"))
}

impl Policy for GlobalCounter {
    type Config = ();

    fn validate(_: &(), _: &Request) -> Response {
        count()
    }

    fn mutate(_: &(), _: &Request) -> Response {
        count()
    }
}

export_policy!(GlobalCounter);
