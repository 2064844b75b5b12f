//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`: seeds and
//! every input fuzzing found a bug with) through its target, on the
//! stable toolchain, so each finding stays a regression test.

use std::path::Path;
use wasm_apiserver_fuzz_targets::{TARGETS, target};

fn corpus() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../corpus"))
}

#[test]
fn every_corpus_file_passes_its_target() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for t in TARGETS {
        let dir = corpus().join(t.name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("corpus entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has no corpus", t.name);
        for file in files {
            let data = std::fs::read(&file).expect("corpus file");
            if std::panic::catch_unwind(|| (t.run)(&data)).is_err() {
                failures.push(file.display().to_string());
            }
            replayed += 1;
        }
    }
    assert!(failures.is_empty(), "failing inputs: {failures:#?}");
    assert!(replayed > 0);
}

#[test]
fn every_corpus_folder_and_fuzz_target_has_a_target() {
    for dir in [corpus().to_path_buf(), corpus().join("../fuzz_targets")] {
        for entry in std::fs::read_dir(&dir).expect("fuzz folder") {
            let path = entry.expect("entry").path();
            let name = path.file_stem().and_then(|n| n.to_str()).expect("a name");
            assert!(target(name).is_some(), "{} has no target", path.display());
        }
    }
}
