//! The plugin-boundary targets (`admission_request`, `wapc`) on random
//! mutations of their corpus for a few seconds each. `scripts/fuzz --ci`
//! leaves them out (their instrumented build would take CI far longer than
//! the fuzzing), so this is how CI runs them: no coverage guidance, but
//! every run new inputs. A failing input is written to
//! `fuzz/artifacts/<target>/` (and the seed printed: `FUZZ_SEED=N` replays
//! the run); fix the bug and add the input to the corpus.
#![cfg(feature = "plugins")]

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use std::path::Path;
use std::time::{Duration, Instant};
use wasm_apiserver_fuzz_targets::target;

const PER_TARGET: Duration = Duration::from_secs(4);

/// Values a pointer or length is worth trying (the `wapc` guest's memory is
/// two pages; its script starts at 256).
const INTERESTING: [i32; 10] = [
    0,
    1,
    -1,
    4,
    256,
    4096,
    0x1_0000,
    0x1_fffc,
    0x2_0000,
    i32::MAX,
];

/// One to eight random edits of `input`: bit flips, bytes set, inserted,
/// removed or repeated, interesting 32-bit values, and splices of another
/// corpus input.
fn mutate(input: &mut Vec<u8>, rng: &mut StdRng, corpus: &[Vec<u8>]) {
    for _ in 0..1 + rng.random_range(0..8) {
        let len = input.len();
        let at = rng.random_range(0..len + 1);
        match rng.random_range(0..7) {
            0 if len > 0 => input[at.min(len - 1)] ^= 1 << rng.random_range(0..8),
            1 if len > 0 => input[at.min(len - 1)] = rng.random::<u8>(),
            2 => input.insert(at, rng.random::<u8>()),
            3 if len > 0 => {
                let end = (at + 1 + rng.random_range(0..16)).min(len);
                input.drain(at.min(len - 1)..end);
            }
            4 if len > 0 => {
                let start = rng.random_range(0..len);
                let end = (start + 1 + rng.random_range(0..32)).min(len);
                let chunk = input[start..end].to_vec();
                input.splice(at..at, chunk);
            }
            5 => {
                let value = INTERESTING[rng.random_range(0..INTERESTING.len())].to_le_bytes();
                let end = (at + 4).min(len);
                input.splice(at..end, value);
            }
            _ => {
                let other = &corpus[rng.random_range(0..corpus.len())];
                if !other.is_empty() {
                    let start = rng.random_range(0..other.len());
                    let end = (start + 1 + rng.random_range(0..64)).min(other.len());
                    let end_here = (at + rng.random_range(0..64)).min(len);
                    input.splice(at..end_here, other[start..end].iter().copied());
                }
            }
        }
    }
}

#[test]
fn plugin_targets_survive_random_mutations() {
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let fuzz = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    for name in ["admission_request", "wapc"] {
        let t = target(name).expect("target");
        let dir = fuzz.join("corpus").join(name);
        let corpus: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| std::fs::read(e.expect("corpus entry").path()).expect("corpus file"))
            .collect();
        assert!(!corpus.is_empty(), "{name} has no corpus");
        let mut rng = StdRng::seed_from_u64(seed ^ name.len() as u64);
        let deadline = Instant::now() + PER_TARGET;
        let mut runs = 0u64;
        while Instant::now() < deadline {
            let mut input = corpus[rng.random_range(0..corpus.len())].clone();
            mutate(&mut input, &mut rng, &corpus);
            if std::panic::catch_unwind(|| (t.run)(&input)).is_err() {
                let artifacts = fuzz.join("artifacts").join(name);
                let _ = std::fs::create_dir_all(&artifacts);
                let file = artifacts.join(format!("mutation-{seed}-{runs}"));
                let _ = std::fs::write(&file, &input);
                panic!(
                    "{name} failed on a random mutation (FUZZ_SEED={seed}); input in {}",
                    file.display()
                );
            }
            runs += 1;
        }
        eprintln!("{name}: {runs} random mutations passed (FUZZ_SEED={seed})");
        assert!(runs > 0);
    }
}
