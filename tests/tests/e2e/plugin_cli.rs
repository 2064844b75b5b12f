//! End-to-end: `wasm-apiserver plugin inspect|test` on real compiled
//! components, through the real binary.

use std::path::PathBuf;
use std::process::{Command, Output};

use wasm_apiserver_e2e::{plugin_dir, server_binary};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/plugin-cases")
}

fn plugin(args: &[&str]) -> (i32, String) {
    let out: Output = Command::new(server_binary())
        .arg("plugin")
        .args(args)
        .output()
        .expect("run wasm-apiserver plugin");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn component(name: &str) -> String {
    plugin_dir().join(name).display().to_string()
}

#[test]
fn a_case_table_passes_and_a_wrong_expectation_fails_by_name() {
    let table = fixtures().join("require-labels.yaml");
    let (code, out) = plugin(&[
        "test",
        &component("require_labels.wasm"),
        "--cases",
        table.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("4 passed, 0 failed"), "{out}");
    assert!(
        out.contains("PASS a captured AdmissionReview replays"),
        "{out}"
    );

    // The same table with a configuration that requires nothing: the
    // denials it expected are named, and the exit code says so.
    let lax = std::env::temp_dir().join(format!("plugin-cli-lax-{}.json", std::process::id()));
    std::fs::write(&lax, r#"{"labels": []}"#).unwrap();
    let (code, out) = plugin(&[
        "test",
        &component("require_labels.wasm"),
        "--cases",
        table.to_str().unwrap(),
        "--config",
        lax.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL a configmap without the team label is denied: expected Deny, got allow"),
        "{out}"
    );
    assert!(out.contains("2 passed, 2 failed"), "{out}");
    let _ = std::fs::remove_file(lax);

    // One captured AdmissionReview with an expectation.
    let config = std::env::temp_dir().join(format!("plugin-cli-{}.json", std::process::id()));
    std::fs::write(&config, r#"{"labels": ["team"]}"#).unwrap();
    let review = fixtures().join("review-unlabelled.json");
    let args = |expect: &'static str| {
        vec![
            "test".to_string(),
            component("require_labels.wasm"),
            "--request".into(),
            review.display().to_string(),
            "--config".into(),
            config.display().to_string(),
            "--expect".into(),
            expect.into(),
        ]
    };
    let run = |a: Vec<String>| plugin(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, out) = run(args("deny"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("missing required label(s): team"), "{out}");
    let (code, out) = run(args("allow"));
    assert_eq!(code, 1, "{out}");
    let _ = std::fs::remove_file(config);
}

#[test]
fn inspect_names_the_world_and_what_is_not_granted() {
    let (code, out) = plugin(&["inspect", &component("require_labels.wasm")]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("admission-plugin (wasm-apiserver:plugin@0.4.0"),
        "{out}"
    );
    assert!(
        out.contains("wasm-apiserver:plugin/admission@0.4.0"),
        "{out}"
    );
    assert!(out.contains("loads:     yes"), "{out}");

    let (code, out) = plugin(&["inspect", &component("frozen_deny_names.wasm")]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("wasm-apiserver:plugin@0.1.0"), "{out}");

    // The hostile fixture imports sockets: linked, nothing granted.
    let (code, out) = plugin(&["inspect", &component("hostile_io.wasm")]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("wasi:sockets/tcp") && out.contains("(linked, nothing granted)"),
        "{out}"
    );

    let (code, out) = plugin(&["inspect", &component("namespace_authorizer.wasm")]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("authorizer-plugin"), "{out}");

    // Not a component at all.
    let (code, out) = plugin(&[
        "inspect",
        fixtures().join("review-delete.json").to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "{out}");
}

#[test]
fn bench_prints_a_row_of_timings() {
    let review = fixtures().join("review-unlabelled.json");
    let (code, out) = plugin(&[
        "bench",
        &component("require_labels.wasm"),
        "--request",
        review.to_str().unwrap(),
        "--calls",
        "20",
    ]);
    assert_eq!(code, 0, "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("| require_labels.wasm"))
        .unwrap_or_else(|| panic!("no row in {out}"));
    // size, compile, load, then four latencies: all numbers.
    let cells: Vec<&str> = row
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(cells.len(), 8, "{row}");
    for cell in &cells[1..] {
        let number: String = cell
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        assert!(
            number.parse::<f64>().is_ok_and(|n| n > 0.0),
            "{cell} in {row}"
        );
    }
}

/// A controller: one key over `--cluster` fixtures prints the writes the
/// reconcile makes; the example's case table passes; a configuration that
/// watches another label fails the cases that expected writes, by name.
#[test]
fn a_controller_reconciles_fixtures_and_judges_a_case_table() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = dir.join("cluster.yaml");
    std::fs::write(
        &cluster,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-x, uid: u1, labels: {tenant: x}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n",
    )
    .unwrap();
    let (code, out) = plugin(&[
        "test",
        &component("namespace_defaults.wasm"),
        "--cluster",
        cluster.to_str().unwrap(),
        "--for",
        "v1/Namespace",
        "--key",
        "team-x",
    ]);
    assert_eq!(code, 0, "{out}");
    for line in [
        "apply NetworkPolicy team-x/default-deny",
        "apply ResourceQuota team-x/default-quota",
        "apply RoleBinding team-x/tenant-admins",
        "done",
    ] {
        assert!(out.lines().any(|l| l == line), "no {line:?} in:\n{out}");
    }
    let (code, out) = plugin(&[
        "test",
        &component("namespace_defaults.wasm"),
        "--cluster",
        cluster.to_str().unwrap(),
        "--for",
        "v1/Namespace",
        "--key",
        "other",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("apply"), "{out}");

    let table =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/namespace-defaults/cases.yaml");
    let (code, out) = plugin(&[
        "test",
        &component("namespace_defaults.wasm"),
        "--cases",
        table.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("4 passed, 0 failed"), "{out}");
    // The Python and JavaScript examples pass the Rust one's table.
    for lang in ["python", "js"] {
        let component = wasm_apiserver_e2e::example_plugin_dir()
            .join(format!("namespace-defaults-{lang}.wasm"));
        // Each case loads the component: a cache compiles it once.
        let cache = dir.join(format!("cache-{lang}"));
        let (code, out) = plugin(&[
            "test",
            component.to_str().unwrap(),
            "--cases",
            table.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{lang}: {out}");
        assert!(out.contains("4 passed, 0 failed"), "{lang}: {out}");
    }
    let config = dir.join("config.json");
    std::fs::write(&config, r#"{"label": "owner"}"#).unwrap();
    let (code, out) = plugin(&[
        "test",
        &component("namespace_defaults.wasm"),
        "--cases",
        table.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL a labelled namespace gets its three objects: expected writes"),
        "{out}"
    );
}

/// A context-aware admission plugin (package 0.3.0 and later) reads fixture objects
/// offline: the table's `cluster:` (or `--cluster`) answers its reads, and
/// without them the denial it expected does not happen.
#[test]
fn a_context_aware_plugin_reads_fixtures_offline() {
    let table = fixtures().join("unique-ingress-host.yaml");
    let (code, out) = plugin(&[
        "test",
        &component("unique_ingress_host.wasm"),
        "--cases",
        table.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 passed, 0 failed"), "{out}");

    // The same cases without the fixtures: the host is free, so the
    // denial does not happen; given again through --cluster, it does.
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&table).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bare = dir.join("bare.yaml");
    let mut without = serde_yaml::Mapping::new();
    without.insert("cases".into(), doc["cases"].clone());
    std::fs::write(&bare, serde_yaml::to_string(&without).unwrap()).unwrap();
    let (code, out) = plugin(&[
        "test",
        &component("unique_ingress_host.wasm"),
        "--cases",
        bare.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL a host another Ingress serves is refused: expected Deny"),
        "{out}"
    );
    let objects = dir.join("objects.yaml");
    std::fs::write(&objects, serde_yaml::to_string(&doc["cluster"]).unwrap()).unwrap();
    let (code, out) = plugin(&[
        "test",
        &component("unique_ingress_host.wasm"),
        "--cases",
        bare.to_str().unwrap(),
        "--cluster",
        objects.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
}

/// A scheduler plugin's case table (nodes, pods, expected refusals and
/// scores) passes offline for the example in all three languages; a
/// configuration that scores another label fails it by name; `inspect`
/// names the scheduler world.
#[test]
fn the_scheduler_example_passes_one_case_table_in_three_languages() {
    let table = fixtures().join("node-label-score.yaml");
    let dir = tempfile::tempdir().unwrap();
    for lang in ["rust", "python", "js"] {
        let component =
            wasm_apiserver_e2e::example_plugin_dir().join(format!("node-label-score-{lang}.wasm"));
        let cache = dir.path().join(format!("cache-{lang}"));
        let (code, out) = plugin(&[
            "test",
            component.to_str().unwrap(),
            "--cases",
            table.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{lang}: {out}");
        assert!(out.contains(" passed, 0 failed"), "{lang}: {out}");
        assert!(!out.contains("FAIL"), "{lang}: {out}");
        let (code, out) = plugin(&[
            "inspect",
            component.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{lang}: {out}");
        assert!(
            out.contains("scheduler-plugin (wasm-apiserver:plugin@0.4.0"),
            "{lang}: {out}"
        );
    }
    let other = dir.path().join("other.json");
    std::fs::write(&other, r#"{"label": "elsewhere"}"#).unwrap();
    let rust = wasm_apiserver_e2e::example_plugin_dir().join("node-label-score-rust.wasm");
    let (code, out) = plugin(&[
        "test",
        rust.to_str().unwrap(),
        "--cases",
        table.to_str().unwrap(),
        "--config",
        other.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("expected score"), "{out}");
    assert!(out.contains("expected a refusal"), "{out}");
}
