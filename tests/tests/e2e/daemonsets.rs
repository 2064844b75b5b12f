//! End-to-end: a DaemonSet runs one pod per eligible node (the DaemonSet
//! controller makes them, the scheduler binds them, the stand-in node
//! agent runs them), follows nodes as they come and go, honours taints and
//! node selectors, and rolls a new template out node by node.

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use wasm_apiserver_e2e::node_agent::{NodeAgent, NodeSpec};
use wasm_apiserver_e2e::{Server, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

const DS: &str = r#"{"apiVersion": "apps/v1", "kind": "DaemonSet",
  "metadata": {"name": "agent"},
  "spec": {"selector": {"matchLabels": {"app": "agent"}},
           "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
           "template": {"metadata": {"labels": {"app": "agent"}},
                        "spec": {"nodeSelector": {"role": "worker"},
                                 "containers": [{"name": "agent", "image": "agent:1"}]}}}}"#;

/// Live daemon pods: node → images.
fn placement(server: &Server) -> BTreeMap<String, Vec<String>> {
    let pods = kubectl_json(server, None, &["get", "pods", "-l", "app=agent"]);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in pods["items"].as_array().unwrap() {
        if p["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let node = p["spec"]["nodeName"]
            .as_str()
            .unwrap_or("<unbound>")
            .to_string();
        out.entry(node).or_default().push(
            p["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    out
}

fn status(server: &Server) -> Value {
    kubectl_json(server, None, &["get", "daemonset", "agent"])["status"].clone()
}

#[test]
fn daemonsets_run_one_pod_per_eligible_node_and_roll_out() {
    let server = Server::start();
    let agent = NodeAgent::start(
        &server,
        vec![
            NodeSpec::new("w1").label("role", "worker"),
            NodeSpec::new("w2").label("role", "worker"),
            NodeSpec::new("gpu")
                .label("role", "worker")
                .taint("gpu", "true", "NoSchedule"),
            NodeSpec::new("edge").label("role", "edge"),
        ],
    );
    kubectl_stdin(&server, None, &["apply", "-f", "-"], DS);
    kubectl_ok(
        &server,
        None,
        &["rollout", "status", "daemonset/agent", "--timeout=60s"],
    );
    let placed = placement(&server);
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["w1", "w2"],
        "workers only, not the tainted one: {placed:?}"
    );
    assert!(
        placed.values().all(|images| images.len() == 1),
        "{placed:?}"
    );
    let s = status(&server);
    assert_eq!(s["desiredNumberScheduled"], 2, "{s}");
    assert_eq!(s["numberReady"], 2, "{s}");

    // A new eligible node gets one.
    agent.add_node(NodeSpec::new("w3").label("role", "worker"));
    poll_until(Duration::from_secs(30), "a pod on w3", || {
        placement(&server).contains_key("w3").then_some(())
    });

    // A new template rolls out with at most one node short at a time.
    kubectl_ok(
        &server,
        None,
        &["set", "image", "daemonset/agent", "agent=agent:2"],
    );
    let mut worst = usize::MAX;
    poll_until(Duration::from_secs(90), "the rollout", || {
        let placed = placement(&server);
        let ready_nodes = placed.len();
        worst = worst.min(ready_nodes);
        let done = placed.len() == 3 && placed.values().all(|i| i == &vec!["agent:2".to_string()]);
        done.then_some(())
    });
    assert!(
        worst >= 2,
        "never more than one node without a pod: {worst}"
    );
    kubectl_ok(
        &server,
        None,
        &["rollout", "status", "daemonset/agent", "--timeout=60s"],
    );
    let history = kubectl_ok(&server, None, &["rollout", "history", "daemonset/agent"]);
    assert!(
        history
            .lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .count()
            == 2,
        "{history}"
    );
    kubectl_ok(&server, None, &["rollout", "undo", "daemonset/agent"]);
    poll_until(Duration::from_secs(90), "the undo", || {
        placement(&server)
            .values()
            .all(|i| i == &vec!["agent:1".to_string()])
            .then_some(())
    });

    // With a surge (maxSurge 1, maxUnavailable 0) the new pod starts
    // beside the old one: no node is ever without a pod, and at most one
    // node holds two at a time. The new pods take a second to be ready.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "daemonset",
            "agent",
            "-p",
            r#"{"spec":{"updateStrategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}},
                "template":{"metadata":{"annotations":{"node-agent.wasm-apiserver.io/ready-after":"1s"}},
                "spec":{"containers":[{"name":"agent","image":"agent:3"}]}}}}"#,
        ],
    );
    let (mut fewest_nodes, mut most_doubled) = (usize::MAX, 0);
    poll_until(Duration::from_secs(90), "the surge rollout", || {
        let placed = placement(&server);
        fewest_nodes = fewest_nodes.min(placed.len());
        most_doubled = most_doubled.max(placed.values().filter(|i| i.len() == 2).count());
        assert!(
            placed.values().all(|i| i.len() <= 2),
            "at most an old and a new pod per node: {placed:?}"
        );
        (placed.len() == 3 && placed.values().all(|i| i == &vec!["agent:3".to_string()]))
            .then_some(())
    });
    assert_eq!(fewest_nodes, 3, "no node without a pod while surging");
    assert_eq!(most_doubled, 1, "one node surging at a time (maxSurge 1)");

    // A node that is no longer a worker loses its pod.
    kubectl_ok(
        &server,
        None,
        &["label", "node", "w1", "role=edge", "--overwrite"],
    );
    poll_until(Duration::from_secs(30), "w1's pod gone", || {
        (!placement(&server).contains_key("w1")).then_some(())
    });
}
