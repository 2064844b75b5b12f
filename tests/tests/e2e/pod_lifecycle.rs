//! End-to-end: pods as a kubelet sees them, with the stand-in node agent
//! (`wasm_apiserver_e2e::node_agent`): nodes register and stay `Ready`
//! through their Leases, bound pods run and become ready, and deletion is
//! graceful as upstream's (`deletionTimestamp` + grace period, finished by
//! the node with a period of 0; immediate for pods no node runs).

use serde_json::Value;
use std::time::Duration;
use wasm_apiserver_e2e::node_agent::{NodeAgent, NodeSpec};
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

fn pod(server: &Server, name: &str) -> Option<Value> {
    let out = kubectl(server, None, &["get", "pod", name, "-o", "json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("pod JSON"))
}

fn create_pod(server: &Server, name: &str, node: Option<&str>, annotations: &str) {
    let node = node
        .map(|n| format!(r#""nodeName": "{n}","#))
        .unwrap_or_default();
    let manifest = format!(
        r#"{{"apiVersion": "v1", "kind": "Pod",
            "metadata": {{"name": "{name}", "annotations": {{{annotations}}}}},
            "spec": {{{node} "restartPolicy": "Never",
                      "containers": [{{"name": "main", "image": "busybox"}}]}}}}"#
    );
    let out = kubectl_stdin(server, None, &["create", "-f", "-"], &manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn nodes_register_and_run_their_pods() {
    let server = Server::start();
    let agent = NodeAgent::start(
        &server,
        vec![
            NodeSpec::new("node-a").label("zone", "z1"),
            NodeSpec::new("node-b").cpu("2").memory("4Gi"),
        ],
    );
    let nodes = kubectl_ok(&server, None, &["get", "nodes", "--no-headers"]);
    for name in ["node-a", "node-b"] {
        let line = nodes
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in\n{nodes}"));
        assert!(line.split_whitespace().nth(1) == Some("Ready"), "{line}");
    }
    let b = kubectl_json(&server, None, &["get", "node", "node-b"]);
    assert_eq!(b["status"]["allocatable"]["cpu"], "2");
    let lease = kubectl_json(
        &server,
        None,
        &["get", "lease", "-n", "kube-node-lease", "node-a"],
    );
    assert_eq!(lease["spec"]["holderIdentity"], "node-a");

    create_pod(&server, "web", Some("node-a"), "");
    kubectl_ok(
        &server,
        None,
        &["wait", "--for=condition=Ready", "pod/web", "--timeout=30s"],
    );
    let web = pod(&server, "web").expect("web");
    assert_eq!(web["status"]["phase"], "Running");
    assert!(
        web["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.244."))
    );
    assert_eq!(web["status"]["containerStatuses"][0]["ready"], true);
    assert_eq!(agent.pods_started(), 1);

    // A pod on a node the agent does not serve is left alone.
    create_pod(&server, "elsewhere", Some("node-x"), "");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        pod(&server, "elsewhere").unwrap()["status"]["phase"],
        "Pending"
    );

    // Containers that exit end a `Never` pod, as their exit code says.
    create_pod(
        &server,
        "task",
        Some("node-b"),
        r#""node-agent.wasm-apiserver.io/exit-after": "200ms",
           "node-agent.wasm-apiserver.io/exit-code": "3""#,
    );
    let done = poll_until(Duration::from_secs(20), "task to fail", || {
        pod(&server, "task").filter(|p| p["status"]["phase"] == "Failed")
    });
    assert_eq!(
        done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        3
    );
    agent.set_ready("default", "web", false);
    let web = pod(&server, "web").unwrap();
    let ready = web["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap();
    assert_eq!(ready["status"], "False", "{web}");
}

#[test]
fn pods_are_deleted_gracefully_as_upstream() {
    let server = Server::start();
    let _agent = NodeAgent::start(&server, vec![NodeSpec::new("node-a")]);

    // Not scheduled: no node runs it, so it goes at once.
    create_pod(&server, "unbound", None, "");
    kubectl_ok(&server, None, &["delete", "pod", "unbound", "--wait=false"]);
    assert!(pod(&server, "unbound").is_none());

    // Bound to a node with no kubelet: it waits out its grace period.
    create_pod(&server, "orphan", Some("node-x"), "");
    kubectl_ok(&server, None, &["delete", "pod", "orphan", "--wait=false"]);
    let marked = pod(&server, "orphan").expect("still there while terminating");
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let listed = kubectl_ok(&server, None, &["get", "pod", "orphan", "--no-headers"]);
    assert!(listed.contains("Terminating"), "{listed}");
    // A longer period changes nothing; a shorter one moves it earlier.
    kubectl_ok(
        &server,
        None,
        &[
            "delete",
            "pod",
            "orphan",
            "--wait=false",
            "--grace-period=60",
        ],
    );
    assert_eq!(
        pod(&server, "orphan").unwrap()["metadata"]["deletionGracePeriodSeconds"],
        30
    );
    kubectl_ok(
        &server,
        None,
        &[
            "delete",
            "pod",
            "orphan",
            "--wait=false",
            "--grace-period=10",
        ],
    );
    let shortened = pod(&server, "orphan").unwrap();
    assert_eq!(shortened["metadata"]["deletionGracePeriodSeconds"], 10);
    let at = |p: &Value| {
        chrono::DateTime::parse_from_rfc3339(p["metadata"]["deletionTimestamp"].as_str().unwrap())
            .unwrap()
    };
    let moved = (at(&marked) - at(&shortened)).num_seconds();
    assert!((19..=21).contains(&moved), "moved by {moved} s");
    // Forced, it goes.
    kubectl_ok(
        &server,
        None,
        &["delete", "pod", "orphan", "--grace-period=0", "--force"],
    );
    assert!(pod(&server, "orphan").is_none());

    // Running on a node: terminating until the node has stopped it, then
    // deleted by the node with a period of 0.
    create_pod(
        &server,
        "web",
        Some("node-a"),
        r#""node-agent.wasm-apiserver.io/terminate-after": "2s""#,
    );
    kubectl_ok(
        &server,
        None,
        &["wait", "--for=condition=Ready", "pod/web", "--timeout=30s"],
    );
    kubectl_ok(&server, None, &["delete", "pod", "web", "--wait=false"]);
    let terminating = pod(&server, "web").expect("terminating");
    assert_eq!(terminating["metadata"]["deletionGracePeriodSeconds"], 30);
    kubectl_ok(
        &server,
        None,
        &["wait", "--for=delete", "pod/web", "--timeout=30s"],
    );
}
