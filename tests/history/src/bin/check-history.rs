//! Checks a history kept by a fault campaign (JSON, as `History::to_json`
//! writes it) and prints the report: `check-history FILE`. Exits 1 when it
//! finds a violation.

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: check-history HISTORY.json");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(2);
    });
    let history = wasm_apiserver_history::History::from_json(&text).unwrap_or_else(|e| {
        eprintln!("{path}: not a history: {e}");
        std::process::exit(2);
    });
    let report = wasm_apiserver_history::check(&history);
    println!("{report}");
    if !report.is_ok() {
        std::process::exit(1);
    }
}
