//! End-to-end: scheduler plugins as wasm components (`SchedulerPlugin`
//! objects), loaded, replaced and removed at runtime, with the real binary
//! and kubectl; nodes made as in `scheduling`.
//!
//! The `node-label-score` example in Rust, Python and JavaScript steers
//! pods to the node with the highest `score` label and never to one
//! labelled `avoid=true`; re-applying it with another configuration changes
//! placement from the next pod; deleting it restores the default
//! placement. A plugin that traps, spins or eats memory on every call
//! leaves pods Pending with a `SchedulerError` condition naming it
//! (`failurePolicy: Fail`) or is skipped (`Ignore`), while the server goes
//! on serving and scheduling. Specs are checked on write (422).

use crate::scheduling::{add_node, apply, bound, pod, scheduled_condition, start};
use serde_json::{Value, json};
use std::time::Duration;
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

const WAIT: Duration = Duration::from_secs(60);

/// A server whose plugin directory holds the example in every language and
/// the hostile scheduler plugin.
fn server() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for lang in ["rust", "python", "js"] {
        let name = format!("node-label-score-{lang}.wasm");
        std::fs::copy(
            wasm_apiserver_e2e::example_plugin_dir().join(&name),
            dir.path().join(name.replace('-', "_")),
        )
        .unwrap();
    }
    std::fs::copy(
        wasm_apiserver_e2e::plugin_dir().join("hostile_scheduler.wasm"),
        dir.path().join("hostile_scheduler.wasm"),
    )
    .unwrap();
    let s = start(&["--plugin-dir", dir.path().to_str().unwrap()]);
    (s, dir)
}

fn plugin(name: &str, file: &str, weight: i64, policy: &str, config: Value) -> Value {
    json!({
        "apiVersion": "scheduling.wasm-apiserver.io/v1alpha1",
        "kind": "SchedulerPlugin",
        "metadata": {"name": name},
        "spec": {
            "module": {"file": file},
            "weight": weight,
            "failurePolicy": policy,
            "config": config,
        },
    })
}

/// Waits until the plugin has loaded its latest generation; its status.
fn active(server: &Server, name: &str) -> Value {
    poll_until(
        WAIT,
        &format!("scheduler plugin {name} to be Active"),
        || {
            let p = kubectl_json(server, None, &["get", "schedulerplugin", name]);
            (p["status"]["observedGeneration"] == p["metadata"]["generation"]
                && p["status"]["phase"] == "Active")
                .then(|| p["status"].clone())
        },
    )
}

/// Three equal nodes: `a` scored 10, `b` scored 90 but avoided, `c` 50;
/// `other` labels make `a` the best for another configuration.
fn three_nodes(server: &Server) {
    add_node(
        server,
        "a",
        "8",
        &[("score", "10"), ("other", "90")],
        json!([]),
    );
    add_node(
        server,
        "b",
        "8",
        &[("score", "90"), ("avoid", "true")],
        json!([]),
    );
    add_node(
        server,
        "c",
        "8",
        &[("score", "50"), ("other", "5")],
        json!([]),
    );
}

/// Creates pods `prefix-0..n` and returns the nodes they are bound to.
fn place(server: &Server, prefix: &str, n: usize) -> Vec<String> {
    for i in 0..n {
        apply(
            server,
            &pod(&format!("{prefix}-{i}"), "100m", json!({}), json!({})),
        );
    }
    (0..n)
        .map(|i| bound(server, &format!("{prefix}-{i}")))
        .collect()
}

fn steers_to_the_best_label(lang: &str) {
    let (server, _dir) = server();
    three_nodes(&server);
    let file = format!("node_label_score_{lang}.wasm");
    apply(
        &server,
        &plugin(
            "label-score",
            &file,
            5,
            "Fail",
            json!({"label": "score", "avoidLabel": "avoid"}),
        ),
    );
    let status = active(&server, "label-score");
    assert_eq!(
        status["extensionPoints"],
        json!(["Filter", "Score"]),
        "{status}"
    );
    let placed = place(&server, "p", 4);
    assert!(placed.iter().all(|n| n == "c"), "{lang}: {placed:?}");
    // The calls are counted in its status.
    let status = poll_until(WAIT, "the calls in the status", || {
        let p = kubectl_json(&server, None, &["get", "schedulerplugin", "label-score"]);
        (p["status"]["calls"].as_u64().unwrap_or(0) >= 8).then(|| p["status"].clone())
    });
    assert!(status["refusals"].as_u64().unwrap() >= 4, "{status}");
    assert_eq!(status["failures"], 0, "{status}");
}

#[test]
fn the_rust_example_steers_pods_to_the_highest_label_and_never_to_an_avoided_node() {
    steers_to_the_best_label("rust");
}

#[test]
fn the_python_example_steers_pods_as_the_rust_one() {
    steers_to_the_best_label("python");
}

#[test]
fn the_javascript_example_steers_pods_as_the_rust_one() {
    steers_to_the_best_label("js");
}

#[test]
fn replacing_a_plugin_changes_placement_and_deleting_it_restores_the_default() {
    let (server, _dir) = server();
    three_nodes(&server);
    let config = |label: &str| json!({"label": label, "avoidLabel": "avoid"});
    apply(
        &server,
        &plugin(
            "steer",
            "node_label_score_rust.wasm",
            5,
            "Fail",
            config("score"),
        ),
    );
    active(&server, "steer");
    assert_eq!(place(&server, "first", 2), ["c", "c"]);
    // Another configuration: `a` wins from the next pod on.
    apply(
        &server,
        &plugin(
            "steer",
            "node_label_score_rust.wasm",
            5,
            "Fail",
            config("other"),
        ),
    );
    let status = active(&server, "steer");
    assert_eq!(status["observedGeneration"], 2, "{status}");
    assert_eq!(place(&server, "second", 2), ["a", "a"]);
    // A module that does not load keeps the running version.
    apply(
        &server,
        &plugin("steer", "missing.wasm", 5, "Fail", config("score")),
    );
    let failed = poll_until(WAIT, "the failed load in the status", || {
        let p = kubectl_json(&server, None, &["get", "schedulerplugin", "steer"]);
        (p["status"]["observedGeneration"] == 3 && p["status"]["phase"] == "Failed")
            .then(|| p["status"].clone())
    });
    assert_eq!(failed["activeGeneration"], 2, "{failed}");
    assert!(
        failed["message"].as_str().unwrap().contains("missing.wasm"),
        "{failed}"
    );
    assert_eq!(place(&server, "third", 1), ["a"]);
    // Deleted: the default scoring spreads pods to the emptiest nodes, the
    // avoided one included.
    kubectl_ok(&server, None, &["delete", "schedulerplugin", "steer"]);
    poll_until(WAIT, "the plugin to go", || {
        let out = kubectl(&server, None, &["get", "schedulerplugins", "-o", "name"]);
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .is_empty()
            .then_some(())
    });
    // The removal reaches the scheduler through its watch: pods created
    // after it may still meet the plugin for a moment, so look at several.
    let placed = poll_until(WAIT, "a pod on the avoided node", || {
        let placed = place(&server, &format!("after-{}", rand_suffix()), 2);
        placed.iter().any(|n| n == "b").then_some(placed)
    });
    assert!(placed.contains(&"b".to_string()), "{placed:?}");
}

/// A short suffix that differs between calls.
fn rand_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

#[test]
fn a_hostile_plugin_fails_or_is_ignored_and_scheduling_goes_on() {
    let (server, _dir) = server();
    add_node(&server, "a", "8", &[], json!([]));
    add_node(&server, "b", "8", &[], json!([]));
    for (mode, expect) in [
        ("trap", "trapped"),
        ("loop", "timed out"),
        ("memory", "memory limit"),
        ("out-of-range", "outside 0..=100"),
    ] {
        apply(&server, &hostile(mode, "Fail"));
        active(&server, "hostile");
        let name = format!("stuck-{mode}");
        apply(&server, &pod(&name, "100m", json!({}), json!({})));
        let cond = poll_until(WAIT, &format!("{name} to fail its cycle"), || {
            scheduled_condition(&server, &name).filter(|c| c["reason"] == "SchedulerError")
        });
        let message = cond["message"].as_str().unwrap();
        assert!(
            message.contains("\"hostile\"") && message.contains(expect),
            "{mode}: {cond}"
        );
        let p = kubectl_json(&server, None, &["get", "pod", &name]);
        assert!(p["spec"]["nodeName"].is_null(), "{p}");
        assert_eq!(p["status"]["phase"], "Pending", "{p}");
        // The server serves on.
        let out = kubectl(&server, None, &["get", "--raw", "/readyz"]);
        assert!(out.status.success());
        // Ignore: the plugin is skipped and the pod is bound.
        apply(&server, &hostile(mode, "Ignore"));
        active(&server, "hostile");
        bound(&server, &name);
    }
    let status = kubectl_json(&server, None, &["get", "schedulerplugin", "hostile"]);
    assert!(
        status["status"]["failures"].as_u64().unwrap_or(0) >= 4,
        "{status}"
    );
    assert!(status["status"]["lastError"].is_string(), "{status}");
    // Gone: pods schedule with the built-in plugins alone.
    kubectl_ok(&server, None, &["delete", "schedulerplugin", "hostile"]);
    assert_eq!(place(&server, "plain", 1).len(), 1);
}

/// The hostile plugin in `mode` with `policy`, under tight limits.
fn hostile(mode: &str, policy: &str) -> Value {
    let mut p = plugin(
        "hostile",
        "hostile_scheduler.wasm",
        1,
        policy,
        json!({"mode": mode}),
    );
    p["spec"]["limits"] = json!({"timeoutMillis": 300, "memoryBytes": 33554432});
    p
}

#[test]
fn invalid_specs_are_refused_with_the_field() {
    let (server, _dir) = server();
    for (spec, field) in [
        (
            json!({"module": {"file": "a.wasm"}, "weight": 0}),
            "spec.weight",
        ),
        (json!({"module": {"file": "../a.wasm"}}), "spec.module.file"),
        (json!({"module": {}}), "spec.module"),
    ] {
        let doc = json!({"apiVersion": "scheduling.wasm-apiserver.io/v1alpha1",
            "kind": "SchedulerPlugin", "metadata": {"name": "bad"}, "spec": spec});
        let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], &doc.to_string());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}");
        assert!(
            err.contains("is invalid") && err.contains(field),
            "{spec}: {err}"
        );
    }
    // kubectl knows the kind: a table with its columns.
    let out = kubectl(
        &server,
        None,
        &["api-resources", "--api-group=scheduling.wasm-apiserver.io"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("schedulerplugins") && text.contains("schedplugin"),
        "{text}"
    );
}
