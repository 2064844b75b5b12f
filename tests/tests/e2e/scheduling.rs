//! End-to-end: the built-in scheduler (`default-scheduler`, issue 53
//! item 1) against the real binary, with kubectl. Nodes are created with
//! kubectl (their status through `--subresource=status`); the node
//! lifecycle controller and the `TaintNodesByCondition` admission plugin
//! are off, so the nodes keep exactly the taints a test gives them.
//!
//! Pods spread over two nodes (with `Scheduled` Events); `nodeSelector`;
//! taints and tolerations; a pod no node fits stays `Pending` with
//! upstream's condition, message and `FailedScheduling` Event and is bound
//! once a node that fits is added; `DoNotSchedule` topology spread; a pod
//! of another `schedulerName` is left alone, and so is every pod with
//! `--disable-scheduler`.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use wasm_apiserver_e2e::{Server, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

const WAIT: Duration = Duration::from_secs(30);

pub(crate) fn start(extra: &[&str]) -> Server {
    let mut args = vec![
        "--disable-admission-plugins=TaintNodesByCondition",
        "--controllers=*,-node-lifecycle-controller,-taint-eviction-controller",
    ];
    args.extend_from_slice(extra);
    Server::start_with_args(&args)
}

pub(crate) fn apply(server: &Server, doc: &Value) {
    let out = kubectl_stdin(server, None, &["apply", "-f", "-"], &doc.to_string());
    assert!(
        out.status.success(),
        "apply {doc}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Ready node with `cpu` and 8Gi allocatable, `labels` (its hostname
/// label added) and `taints`.
pub(crate) fn add_node(
    server: &Server,
    name: &str,
    cpu: &str,
    labels: &[(&str, &str)],
    taints: Value,
) {
    let mut l: BTreeMap<&str, &str> = labels.iter().copied().collect();
    l.insert("kubernetes.io/hostname", name);
    apply(
        server,
        &json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": l},
            "spec": {"taints": taints}}),
    );
    let resources = json!({"cpu": cpu, "memory": "8Gi", "pods": "110"});
    let status = json!({"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
    }});
    kubectl_ok(
        server,
        None,
        &[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    );
}

/// A pod of one container requesting `cpu`, with `spec` merged in.
pub(crate) fn pod(name: &str, cpu: &str, labels: Value, spec: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "nginx",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}});
    for (k, v) in spec.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    p
}

/// The node the pod is bound to, once it is.
pub(crate) fn bound(server: &Server, name: &str) -> String {
    poll_until(WAIT, &format!("pod {name} to be bound"), || {
        let p = kubectl_json(server, None, &["get", "pod", name]);
        p["spec"]["nodeName"].as_str().map(String::from)
    })
}

fn events(server: &Server, pod: &str) -> Vec<Value> {
    let list = kubectl_json(server, None, &["get", "events"]);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == pod)
        .cloned()
        .collect()
}

pub(crate) fn scheduled_condition(server: &Server, name: &str) -> Option<Value> {
    let p = kubectl_json(server, None, &["get", "pod", name]);
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned()
}

#[test]
fn pods_spread_over_two_nodes() {
    let server = start(&[]);
    add_node(&server, "node-a", "4", &[], json!([]));
    add_node(&server, "node-b", "4", &[], json!([]));
    // A Service selecting them: upstream's default spread constraints.
    apply(
        &server,
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    );
    for i in 0..6 {
        apply(
            &server,
            &pod(
                &format!("web-{i}"),
                "100m",
                json!({"app": "web"}),
                json!({}),
            ),
        );
    }
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..6 {
        *per_node
            .entry(bound(&server, &format!("web-{i}")))
            .or_default() += 1;
    }
    assert_eq!(per_node.len(), 2, "{per_node:?}");
    assert!(
        per_node.values().all(|n| (2..=4).contains(n)),
        "{per_node:?}"
    );
    // Upstream's `Scheduled` Event, from default-scheduler.
    let node = bound(&server, "web-0");
    let ev = poll_until(WAIT, "the Scheduled event", || {
        events(&server, "web-0")
            .into_iter()
            .find(|e| e["reason"] == "Scheduled")
    });
    assert_eq!(ev["type"], "Normal");
    assert_eq!(ev["source"]["component"], "default-scheduler");
    assert_eq!(ev["reportingComponent"], "default-scheduler");
    assert_eq!(
        ev["message"],
        format!("Successfully assigned default/web-0 to {node}").as_str()
    );
    // The binding itself set `PodScheduled=True` (no later write): a pod
    // that never waited has it as soon as it has a node.
    let cond = scheduled_condition(&server, "web-0").expect("PodScheduled");
    assert_eq!(cond["status"], "True", "{cond}");
    assert!(cond["reason"].is_null(), "{cond}");
    // kubectl shows the node.
    let wide = kubectl_ok(&server, None, &["get", "pods", "-o", "wide"]);
    assert!(wide.contains("node-a") && wide.contains("node-b"), "{wide}");
}

#[test]
fn node_selector_and_taints_are_honoured() {
    let server = start(&[]);
    add_node(&server, "ssd", "4", &[("disk", "ssd")], json!([]));
    add_node(
        &server,
        "gpu",
        "4",
        &[("disk", "hdd")],
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    );
    apply(&server, &pod("plain", "100m", json!({}), json!({})));
    apply(
        &server,
        &pod(
            "wants-hdd",
            "100m",
            json!({}),
            json!({
                "nodeSelector": {"disk": "hdd"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            }),
        ),
    );
    apply(
        &server,
        &pod(
            "wants-ssd",
            "100m",
            json!({}),
            json!({"nodeSelector": {"disk": "ssd"}}),
        ),
    );
    // Untolerated taint on gpu, selector mismatch on ssd: never bound.
    apply(
        &server,
        &pod(
            "hdd-untolerated",
            "100m",
            json!({}),
            json!({"nodeSelector": {"disk": "hdd"}}),
        ),
    );
    assert_eq!(bound(&server, "plain"), "ssd");
    assert_eq!(bound(&server, "wants-hdd"), "gpu");
    assert_eq!(bound(&server, "wants-ssd"), "ssd");
    let cond = poll_until(WAIT, "hdd-untolerated's condition", || {
        scheduled_condition(&server, "hdd-untolerated")
    });
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "Unschedulable");
    assert_eq!(
        cond["message"],
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
         1 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/2 nodes are \
         available: 2 Preemption is not helpful for scheduling.."
    );
    let p = kubectl_json(&server, None, &["get", "pod", "hdd-untolerated"]);
    assert!(p["spec"]["nodeName"].is_null(), "{p}");
    // Tainting after the fact leaves bound pods where they are (the
    // scheduler never moves them) and keeps new pods off.
    kubectl_ok(&server, None, &["taint", "nodes", "ssd", "k=v:NoSchedule"]);
    apply(&server, &pod("later", "100m", json!({}), json!({})));
    let cond = poll_until(WAIT, "later's condition", || {
        scheduled_condition(&server, "later")
    });
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .starts_with("0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated taint {k: v}."),
        "{cond}"
    );
    kubectl_ok(&server, None, &["taint", "nodes", "ssd", "k=v:NoSchedule-"]);
    assert_eq!(bound(&server, "later"), "ssd");
}

#[test]
fn pod_no_node_fits_stays_pending_until_a_node_fits() {
    let server = start(&[]);
    for n in ["small-1", "small-2", "small-3"] {
        add_node(&server, n, "1", &[], json!([]));
    }
    apply(&server, &pod("big", "2", json!({}), json!({})));
    let message = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are \
                   available: 3 No preemption victims found for incoming pod..";
    let cond = poll_until(WAIT, "big's PodScheduled condition", || {
        scheduled_condition(&server, "big")
    });
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "Unschedulable");
    assert_eq!(cond["message"], message);
    let ev = poll_until(WAIT, "the FailedScheduling event", || {
        events(&server, "big")
            .into_iter()
            .find(|e| e["reason"] == "FailedScheduling")
    });
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["message"], message);
    assert_eq!(ev["source"]["component"], "default-scheduler");
    // kubectl describe shows the condition and the event.
    let describe = kubectl_ok(&server, None, &["describe", "pod", "big"]);
    assert!(describe.contains("FailedScheduling"), "{describe}");
    // Still pending: it waits for a cluster event, not a loop.
    std::thread::sleep(Duration::from_secs(2));
    let p = kubectl_json(&server, None, &["get", "pod", "big"]);
    assert!(p["spec"]["nodeName"].is_null());
    // A node that fits arrives: the pod goes there.
    add_node(&server, "large", "4", &[], json!([]));
    assert_eq!(bound(&server, "big"), "large");
    let cond = poll_until(WAIT, "PodScheduled=True", || {
        scheduled_condition(&server, "big").filter(|c| c["status"] == "True")
    });
    assert!(cond.get("message").is_none_or(Value::is_null), "{cond}");
    // Requests count: the large node's remaining 2 CPUs take one more such pod, not two.
    apply(&server, &pod("big-2", "2", json!({}), json!({})));
    apply(&server, &pod("big-3", "2", json!({}), json!({})));
    let nodes: Vec<Option<String>> = poll_until(WAIT, "one more bound and one pending", || {
        let a = kubectl_json(&server, None, &["get", "pod", "big-2"]);
        let b = kubectl_json(&server, None, &["get", "pod", "big-3"]);
        let pending = |p: &Value| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == "Unschedulable"))
        };
        let out = vec![
            a["spec"]["nodeName"].as_str().map(String::from),
            b["spec"]["nodeName"].as_str().map(String::from),
        ];
        ((pending(&a) || pending(&b)) && out.iter().any(Option::is_some)).then_some(out)
    });
    assert_eq!(nodes.iter().flatten().collect::<Vec<_>>(), vec!["large"]);
    // Deleting a bound pod frees its CPU: the pending one is retried.
    kubectl_ok(
        &server,
        None,
        &["delete", "pod", "big", "--grace-period=0", "--force"],
    );
    poll_until(WAIT, "the second big pod bound", || {
        let a = kubectl_json(&server, None, &["get", "pod", "big-2"]);
        let b = kubectl_json(&server, None, &["get", "pod", "big-3"]);
        (a["spec"]["nodeName"] == "large" && b["spec"]["nodeName"] == "large").then_some(())
    });
}

#[test]
fn topology_spread_do_not_schedule() {
    let server = start(&[]);
    let zone = "topology.kubernetes.io/zone";
    add_node(&server, "a", "8", &[(zone, "z1")], json!([]));
    add_node(&server, "b", "8", &[(zone, "z2")], json!([]));
    add_node(&server, "c", "8", &[(zone, "z2")], json!([]));
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": zone, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }]});
    let zone_of = |n: &str| if n == "a" { "z1" } else { "z2" };
    let mut counts: BTreeMap<&str, i32> = BTreeMap::new();
    for i in 0..6 {
        let name = format!("s-{i}");
        apply(
            &server,
            &pod(&name, "100m", json!({"app": "spread"}), spread.clone()),
        );
        let z = zone_of(&bound(&server, &name));
        *counts.entry(z).or_default() += 1;
        let (z1, z2) = (
            counts.get("z1").copied().unwrap_or(0),
            counts.get("z2").copied().unwrap_or(0),
        );
        assert!(
            (z1 - z2).abs() <= 1,
            "skew above 1 after {name}: {counts:?}"
        );
    }
    assert_eq!(counts, BTreeMap::from([("z1", 3), ("z2", 3)]));
    // A node without the zone label is never chosen for such a pod.
    add_node(&server, "bare", "64", &[], json!([]));
    for n in ["a", "b", "c"] {
        kubectl_ok(&server, None, &["cordon", n]);
    }
    apply(
        &server,
        &pod("s-x", "100m", json!({"app": "spread"}), spread.clone()),
    );
    let cond = poll_until(WAIT, "s-x's condition", || {
        scheduled_condition(&server, "s-x")
    });
    assert_eq!(
        cond["message"],
        "0/4 nodes are available: 1 node(s) didn't match pod topology spread constraints \
         (missing required label), 3 node(s) were unschedulable. preemption: 0/4 nodes are \
         available: 4 Preemption is not helpful for scheduling.."
    );
}

#[test]
fn another_scheduler_s_pods_are_left_alone() {
    let server = start(&[]);
    add_node(&server, "node-a", "4", &[], json!([]));
    apply(
        &server,
        &pod(
            "theirs",
            "100m",
            json!({}),
            json!({"schedulerName": "my-scheduler"}),
        ),
    );
    apply(&server, &pod("ours", "100m", json!({}), json!({})));
    assert_eq!(bound(&server, "ours"), "node-a");
    std::thread::sleep(Duration::from_secs(2));
    let p = kubectl_json(&server, None, &["get", "pod", "theirs"]);
    assert!(p["spec"]["nodeName"].is_null(), "{p}");
    assert!(scheduled_condition(&server, "theirs").is_none(), "{p}");
    assert!(events(&server, "theirs").is_empty());
    // With --disable-scheduler nothing binds pods.
    let off = start(&["--disable-scheduler"]);
    add_node(&off, "node-a", "4", &[], json!([]));
    apply(&off, &pod("waits", "100m", json!({}), json!({})));
    std::thread::sleep(Duration::from_secs(2));
    let p = kubectl_json(&off, None, &["get", "pod", "waits"]);
    assert!(p["spec"]["nodeName"].is_null(), "{p}");
}
