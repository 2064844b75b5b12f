//! The bench binaries measure what users run: no throughput or latency
//! scenario runs under a counting allocator (issue 57). `apiserver`
//! (`benches/apiserver/main.rs`) installs the product's allocator bare; the
//! live-heap readings live in `apiserver-heap` (`heap.rs`), whose wrapper
//! counts every allocation and free on one shared atomic, and which may
//! hold only the memory scenarios.

use std::collections::BTreeSet;
use std::path::Path;

fn bench_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/apiserver")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(bench_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The `mod NAME;` items of a crate root.
fn modules(root: &str) -> BTreeSet<String> {
    root.lines()
        .filter_map(|l| l.trim().strip_prefix("mod "))
        .filter_map(|l| l.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

/// The type of the `#[global_allocator]` static of a file, if it has one.
fn global_allocator(source: &str) -> Option<String> {
    let at = source.find("#[global_allocator]")?;
    let item = &source[at..];
    let ty = item.split_once(':')?.1.split_once('=')?.0;
    Some(ty.split_whitespace().collect())
}

#[test]
fn allocators_of_the_benches() {
    let main = read("main.rs");
    assert_eq!(
        global_allocator(&main).as_deref(),
        Some("wasm_apiserver::Allocator"),
        "the throughput bench must run on the product's allocator, unwrapped"
    );
    // No module of the throughput bench installs another.
    for module in modules(&main) {
        let source = read(&format!("{module}.rs"));
        assert!(
            global_allocator(&source).is_none() && !source.contains("cap::"),
            "{module}.rs installs or names a counting allocator; the throughput bench links it"
        );
    }
    let heap = read("heap.rs");
    assert!(
        global_allocator(&heap).is_some_and(|t| t.starts_with("cap::Cap<")),
        "heap.rs counts the live heap"
    );
    // The memory bench holds the memory scenarios and the harness, nothing
    // that measures throughput or latency.
    let memory: BTreeSet<String> = ["context", "harness"].map(String::from).into();
    let extra: Vec<_> = modules(&heap).difference(&memory).cloned().collect();
    assert!(
        extra.is_empty(),
        "throughput scenarios {extra:?} in the bench whose allocator counts (heap.rs)"
    );
}
