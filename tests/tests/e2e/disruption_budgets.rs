//! End-to-end: PodDisruptionBudgets as the disruption controller keeps
//! their status and the eviction subresource spends it, with the stand-in
//! node agent running the pods.

use serde_json::Value;
use std::time::Duration;
use wasm_apiserver_e2e::node_agent::{NodeAgent, NodeSpec};
use wasm_apiserver_e2e::{Server, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

fn create_pod(server: &Server, name: &str) {
    let manifest = format!(
        r#"{{"apiVersion": "v1", "kind": "Pod",
            "metadata": {{"name": "{name}", "labels": {{"app": "db"}}}},
            "spec": {{"nodeName": "node-a", "containers": [{{"name": "db", "image": "db"}}]}}}}"#
    );
    let out = kubectl_stdin(server, None, &["create", "-f", "-"], &manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn budget(server: &Server) -> Value {
    kubectl_json(server, None, &["get", "pdb", "db"])
}

fn evict(server: &Server, pod: &str) -> std::process::Output {
    let body = format!(
        r#"{{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {{"name": "{pod}"}}}}"#
    );
    kubectl_stdin(
        server,
        None,
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/default/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        &body,
    )
}

#[test]
fn budgets_count_healthy_pods_and_evictions_spend_them() {
    let server = Server::start();
    let _agent = NodeAgent::start(&server, vec![NodeSpec::new("node-a")]);
    for name in ["db-1", "db-2", "db-3"] {
        create_pod(&server, name);
        kubectl_ok(
            &server,
            None,
            &[
                "wait",
                "--for=condition=Ready",
                &format!("pod/{name}"),
                "--timeout=30s",
            ],
        );
    }
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "pdb",
            "db",
            "--selector=app=db",
            "--min-available=2",
        ],
    );
    let b = poll_until(Duration::from_secs(20), "the budget's status", || {
        let b = budget(&server);
        (b["status"]["currentHealthy"] == 3).then_some(b)
    });
    let s = &b["status"];
    assert_eq!(s["desiredHealthy"], 2, "{s}");
    assert_eq!(s["expectedPods"], 3, "{s}");
    assert_eq!(s["disruptionsAllowed"], 1, "{s}");
    assert_eq!(s["conditions"][0]["reason"], "SufficientPods", "{s}");
    let listed = kubectl_ok(&server, None, &["get", "pdb", "db", "--no-headers"]);
    assert!(
        listed.split_whitespace().nth(3) == Some("1"),
        "ALLOWED DISRUPTIONS: {listed}"
    );

    // One eviction spends the one disruption at once: the next is refused
    // even before the controller has seen the first pod go.
    let out = evict(&server, "db-1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = evict(&server, "db-2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the second eviction went through");
    assert!(stderr.contains("disruption budget"), "{stderr}");
    poll_until(Duration::from_secs(30), "db-1 gone and counted", || {
        let s = budget(&server)["status"].clone();
        (s["currentHealthy"] == 2 && s["disruptionsAllowed"] == 0).then_some(())
    });
    let s = budget(&server)["status"].clone();
    assert_eq!(s["conditions"][0]["reason"], "InsufficientPods", "{s}");

    // A budget by percentage needs the pods' controllers: these have none.
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "pdb",
            "pct",
            "--selector=app=db",
            "--max-unavailable=50%",
        ],
    );
    let s = poll_until(Duration::from_secs(20), "the sync failure", || {
        let b = kubectl_json(&server, None, &["get", "pdb", "pct"]);
        (b["status"]["conditions"][0]["reason"] == "SyncFailed").then(|| b["status"].clone())
    });
    assert_eq!(s["disruptionsAllowed"], 0, "{s}");
    assert!(
        s["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("found no controller"),
        "{s}"
    );
}
