//! The bodies of the fuzz targets over the parsers and mergers of untrusted
//! input in `host/api` (request bodies in JSON and YAML among them), and (feature `plugins`) over what crosses the
//! plugin boundary in `host/plugins`, shared by two runners:
//! - cargo-fuzz (`fuzz/fuzz_targets/<name>.rs`, nightly, libFuzzer), which
//!   searches for inputs that break a target (`scripts/fuzz`);
//! - this crate's test (`tests/corpus.rs`, stable), which replays every
//!   file of the committed corpus `fuzz/corpus/<name>/` through its target,
//!   so the inputs fuzzing found (and the seeds) stay regression tests.
//!
//! A target takes the raw bytes libFuzzer hands it and panics when a
//! property fails; each asserts more than "no panic" where it can (round
//! trips, idempotence, agreement between two implementations). Targets over
//! JSON values read the input as JSON text (`[target, patch]` and the
//! like), so the corpus stays readable; other input is ignored.
//!
//! Targets that recurse run on a thread with the stack a tokio worker has
//! (2 MiB), as the server runs them, so that a stack overflow the server
//! would suffer is not hidden by the fuzzer's larger main-thread stack.

mod body;
mod cel;
mod managed;
mod patch;
#[cfg(feature = "plugins")]
mod plugins;
mod protobuf;
mod schema;
mod text;

/// A target: its name (the `fuzz/fuzz_targets/<name>.rs` and
/// `fuzz/corpus/<name>/` it goes with) and its body.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, most important first.
pub const TARGETS: &[Target] = &[
    Target {
        name: "label_selector",
        run: text::label_selector,
    },
    Target {
        name: "field_selector",
        run: text::field_selector,
    },
    Target {
        name: "quantity",
        run: text::quantity,
    },
    Target {
        name: "resource_version",
        run: text::resource_version,
    },
    Target {
        name: "continue_token",
        run: text::continue_token,
    },
    Target {
        name: "request_body",
        run: body::decode,
    },
    Target {
        name: "merge_patch",
        run: patch::merge_patch,
    },
    Target {
        name: "json_patch",
        run: patch::json_patch,
    },
    Target {
        name: "strategic_merge_patch",
        run: patch::strategic_merge_patch,
    },
    Target {
        name: "fields_v1",
        run: managed::fields_v1,
    },
    Target {
        name: "apply",
        run: managed::apply,
    },
    Target {
        name: "protobuf",
        run: protobuf::decode,
    },
    Target {
        name: "cel",
        run: cel::compile_and_cost,
    },
    Target {
        name: "schema",
        run: schema::prune_default_validate,
    },
    #[cfg(feature = "plugins")]
    Target {
        name: "admission_request",
        run: plugins::admission_request,
    },
    #[cfg(feature = "plugins")]
    Target {
        name: "wapc",
        run: plugins::wapc,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The stack of a tokio worker (and of `spawn_blocking`) thread.
const SERVER_STACK: usize = 2 << 20;

/// Runs `f` on a thread with the server's stack size, re-raising its panic.
fn on_server_stack<F: FnOnce() + Send>(f: F) {
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .stack_size(SERVER_STACK)
            .spawn_scoped(s, f)
            .expect("spawn a fuzz thread");
        if let Err(panic) = handle.join() {
            std::panic::resume_unwind(panic);
        }
    });
}

/// The input as a JSON value, if it is JSON text.
fn json(data: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(data).ok()
}
