//! End-to-end: the StatefulSet controller, driven with kubectl against the
//! real binary, pods run by the stand-in node agent (which does not care
//! about volumes: with no provisioner the claims stay `Pending`).
//! `OrderedReady` makes web-0, web-1, web-2 each only once the one before
//! is Ready, each with its claim; `rollout status` completes; scaling down
//! removes the highest first and keeps the claims (`whenScaled: Retain`)
//! or lets them go (`Delete`); a deleted pod comes back with its name and
//! claim; a pod another controller owns is left alone; `Parallel` makes
//! them all at once; a `RollingUpdate` with a partition replaces only the
//! ordinals at or above it, highest first, and `rollout undo` goes back.

use serde_json::Value;
use std::time::Duration;
use wasm_apiserver_e2e::node_agent::{NodeAgent, NodeSpec};
use wasm_apiserver_e2e::{Server, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

const READY_AFTER: &str = "node-agent.wasm-apiserver.io/ready-after";

fn manifest(policy: &str, partition: i64, ready_after: &str) -> String {
    format!(
        r#"{{"apiVersion": "apps/v1", "kind": "StatefulSet",
  "metadata": {{"name": "web"}},
  "spec": {{"replicas": 3, "serviceName": "nginx", "podManagementPolicy": "{policy}",
           "selector": {{"matchLabels": {{"app": "web"}}}},
           "updateStrategy": {{"type": "RollingUpdate", "rollingUpdate": {{"partition": {partition}}}}},
           "template": {{"metadata": {{"labels": {{"app": "web"}},
                                       "annotations": {{"{READY_AFTER}": "{ready_after}",
                                         "node-agent.wasm-apiserver.io/terminate-after": "2s"}}}},
                        "spec": {{"containers": [{{"name": "nginx", "image": "nginx:1"}}]}}}},
           "volumeClaimTemplates": [{{"metadata": {{"name": "www"}},
              "spec": {{"accessModes": ["ReadWriteOnce"],
                        "resources": {{"requests": {{"storage": "1Gi"}}}}}}}}]}}}}"#
    )
}

fn items(v: Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

/// The live pods of the set, by name (ordinal order for up to 10).
fn pods(server: &Server) -> Vec<Value> {
    let mut out: Vec<Value> = items(kubectl_json(
        server,
        None,
        &["get", "pods", "-l", "app=web"],
    ))
    .into_iter()
    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
    .collect();
    out.sort_by(|a, b| name(a).cmp(name(b)));
    out
}

fn names(pods: &[Value]) -> Vec<String> {
    pods.iter().map(|p| name(p).to_string()).collect()
}

fn claims(server: &Server) -> Vec<String> {
    let mut out: Vec<String> = items(kubectl_json(server, None, &["get", "pvc"]))
        .iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .map(|c| name(c).to_string())
        .collect();
    out.sort();
    out
}

/// When the pod's `Ready` condition turned true.
fn ready_at(p: &Value) -> Option<String> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
}

fn created_at(p: &Value) -> String {
    p["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The claim the pod's `www` volume names.
fn claim_of(p: &Value) -> String {
    p["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "www")
        .and_then(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn image(p: &Value) -> &str {
    p["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

fn all_ready(server: &Server, want: &[&str]) -> Option<Vec<Value>> {
    let pods = pods(server);
    (names(&pods) == want && pods.iter().all(|p| ready_at(p).is_some())).then_some(pods)
}

/// The StatefulSet's events, one `reason: message` a line.
fn events(server: &Server) -> String {
    items(kubectl_json(server, None, &["get", "events"]))
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == "StatefulSet")
        .map(|e| {
            format!(
                "{}: {}\n",
                e["reason"].as_str().unwrap_or_default(),
                e["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn rollout_status(server: &Server) -> String {
    kubectl_ok(
        server,
        None,
        &["rollout", "status", "statefulset/web", "--timeout=90s"],
    )
}

/// A server, a node agent and the set `web` applied.
fn start_with(policy: &str, partition: i64, ready_after: &str) -> (Server, NodeAgent) {
    let server = Server::start();
    let agent = NodeAgent::start(&server, vec![NodeSpec::new("n1"), NodeSpec::new("n2")]);
    kubectl_stdin(
        &server,
        None,
        &["apply", "-f", "-"],
        &manifest(policy, partition, ready_after),
    );
    (server, agent)
}

#[test]
fn ordered_ready_makes_pods_in_order_and_scales_down_from_the_top() {
    let server = Server::start();
    let _agent = NodeAgent::start(&server, vec![NodeSpec::new("n1"), NodeSpec::new("n2")]);
    // A pod the selector matches (and whose name is the set's) that
    // another controller owns: left alone.
    kubectl_ok(&server, None, &["create", "configmap", "other"]);
    let owner = kubectl_json(&server, None, &["get", "configmap", "other"]);
    kubectl_stdin(
        &server,
        None,
        &["apply", "-f", "-"],
        &format!(
            r#"{{"apiVersion": "v1", "kind": "Pod",
            "metadata": {{"name": "web-7", "labels": {{"app": "web"}},
                         "ownerReferences": [{{"apiVersion": "v1", "kind": "ConfigMap", "name": "other",
                                              "uid": "{}", "controller": true}}]}},
            "spec": {{"containers": [{{"name": "c", "image": "other:1"}}]}}}}"#,
            owner["metadata"]["uid"].as_str().unwrap()
        ),
    );
    kubectl_stdin(
        &server,
        None,
        &["apply", "-f", "-"],
        &manifest("OrderedReady", 0, "2s"),
    );
    rollout_status(&server);
    let ours = |server: &Server| -> Vec<Value> {
        pods(server)
            .into_iter()
            .filter(|p| name(p) != "web-7")
            .collect()
    };
    let made = ours(&server);
    assert_eq!(names(&made), ["web-0", "web-1", "web-2"]);
    // In order: each made only once the one before was Ready.
    for pair in made.windows(2) {
        let before = ready_at(&pair[0]).expect("ready");
        assert!(
            created_at(&pair[1]) >= before,
            "{} made at {} before {} was ready at {before}",
            name(&pair[1]),
            created_at(&pair[1]),
            name(&pair[0])
        );
    }
    for (i, p) in made.iter().enumerate() {
        assert_eq!(p["spec"]["hostname"], format!("web-{i}"));
        assert_eq!(p["spec"]["subdomain"], "nginx");
        assert_eq!(
            p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            format!("web-{i}")
        );
        assert_eq!(
            p["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
            i.to_string()
        );
        assert_eq!(claim_of(p), format!("www-web-{i}"));
    }
    assert_eq!(claims(&server), ["www-web-0", "www-web-1", "www-web-2"]);
    let claim = kubectl_json(&server, None, &["get", "pvc", "www-web-0"]);
    // No provisioner binds it (this server leaves a new claim's status
    // empty where upstream shows `Pending`).
    assert_ne!(claim["status"]["phase"], "Bound", "{claim}");
    assert_eq!(claim["metadata"]["labels"]["app"], "web");
    let status = kubectl_json(&server, None, &["get", "statefulset", "web"])["status"].clone();
    assert_eq!(status["replicas"], 3, "{status}");
    assert_eq!(status["readyReplicas"], 3, "{status}");
    assert_eq!(status["availableReplicas"], 3, "{status}");
    assert_eq!(
        status["currentRevision"], status["updateRevision"],
        "{status}"
    );
    let seen = events(&server);
    assert!(
        seen.contains("create Pod web-0 in StatefulSet web successful"),
        "{seen}"
    );
    assert!(
        seen.contains("create Claim www-web-0 Pod web-0 in StatefulSet web success"),
        "{seen}"
    );
    // The other controller's pod was not adopted.
    let other = kubectl_json(&server, None, &["get", "pod", "web-7"]);
    assert_eq!(other["metadata"]["ownerReferences"][0]["kind"], "ConfigMap");

    // A deleted pod comes back with its name and claim.
    let uid = made[1]["metadata"]["uid"].clone();
    kubectl_ok(&server, None, &["delete", "pod", "web-1", "--wait=false"]);
    let back = poll_until(Duration::from_secs(60), "web-1 made again", || {
        ours(&server)
            .into_iter()
            .find(|p| name(p) == "web-1" && p["metadata"]["uid"] != uid && ready_at(p).is_some())
    });
    assert_eq!(claim_of(&back), "www-web-1");

    // Scale down: web-2 goes before web-1, the claims stay.
    kubectl_ok(&server, None, &["scale", "statefulset/web", "--replicas=1"]);
    let mut seen_two = false;
    poll_until(Duration::from_secs(60), "scaled to 1", || {
        let now = names(&ours(&server));
        assert!(
            now != ["web-0", "web-2"],
            "web-1 went before web-2: {now:?}"
        );
        seen_two |= now == ["web-0", "web-1"];
        (now == ["web-0"]).then_some(())
    });
    assert!(seen_two, "web-2 was not removed first");
    assert_eq!(claims(&server), ["www-web-0", "www-web-1", "www-web-2"]);
    assert!(
        kubectl_json(&server, None, &["get", "pod", "web-7"])["metadata"]["deletionTimestamp"]
            .is_null(),
        "another controller's pod is no replica to scale away"
    );

    // `whenScaled: Delete`: scaled-away pods take their claims along.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "statefulset",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec": {"replicas": 2, "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}}"#,
        ],
    );
    poll_until(Duration::from_secs(60), "web-1 back", || {
        all_ready(&server, &["web-0", "web-1", "web-7"])
    });
    kubectl_ok(&server, None, &["scale", "statefulset/web", "--replicas=1"]);
    poll_until(Duration::from_secs(60), "www-web-1 deleted", || {
        (claims(&server) == ["www-web-0", "www-web-2"]).then_some(())
    });
    assert_eq!(names(&ours(&server)), ["web-0"]);
}

#[test]
fn parallel_makes_every_pod_at_once() {
    let (server, _agent) = start_with("Parallel", 0, "3s");
    rollout_status(&server);
    // All three were made before the first one was ready.
    let made = all_ready(&server, &["web-0", "web-1", "web-2"]).expect("three ready pods");
    let first_ready = made.iter().filter_map(ready_at).min().unwrap();
    for p in &made {
        assert!(
            created_at(p) < first_ready,
            "{} made at {} after a pod was ready at {first_ready}",
            name(p),
            created_at(p)
        );
    }
    assert_eq!(claims(&server), ["www-web-0", "www-web-1", "www-web-2"]);
}

#[test]
fn rolling_updates_respect_the_partition_and_undo() {
    let (server, _agent) = start_with("OrderedReady", 1, "1s");
    rollout_status(&server);
    let before = all_ready(&server, &["web-0", "web-1", "web-2"]).expect("three ready pods");
    kubectl_ok(
        &server,
        None,
        &["set", "image", "statefulset/web", "nginx=nginx:2"],
    );
    let out = rollout_status(&server);
    assert!(out.contains("partitioned roll out complete"), "{out}");
    let after = poll_until(Duration::from_secs(60), "the partitioned rollout", || {
        all_ready(&server, &["web-0", "web-1", "web-2"])
            .filter(|p| image(&p[1]) == "nginx:2" && image(&p[2]) == "nginx:2")
    });
    // Below the partition: untouched.
    assert_eq!(image(&after[0]), "nginx:1");
    assert_eq!(after[0]["metadata"]["uid"], before[0]["metadata"]["uid"]);
    // Highest first: web-1 was replaced only once the new web-2 was ready.
    assert!(
        created_at(&after[1]) >= ready_at(&after[2]).unwrap(),
        "web-1 made at {} before web-2 was ready at {:?}",
        created_at(&after[1]),
        ready_at(&after[2])
    );
    let status = kubectl_json(&server, None, &["get", "statefulset", "web"])["status"].clone();
    assert_eq!(status["updatedReplicas"], 2, "{status}");
    assert_ne!(
        status["currentRevision"], status["updateRevision"],
        "{status}"
    );
    assert_eq!(
        after[1]["metadata"]["labels"]["controller-revision-hash"],
        status["updateRevision"]
    );

    let history = kubectl_ok(&server, None, &["rollout", "history", "statefulset/web"]);
    let revisions = history
        .lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .count();
    assert_eq!(revisions, 2, "{history}");
    kubectl_ok(&server, None, &["rollout", "undo", "statefulset/web"]);
    poll_until(Duration::from_secs(90), "the undo", || {
        all_ready(&server, &["web-0", "web-1", "web-2"])
            .filter(|p| p.iter().all(|p| image(p) == "nginx:1"))
    });
    // The whole set at the first revision again: the rollout completes.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "statefulset",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}"#,
        ],
    );
    poll_until(Duration::from_secs(60), "one revision", || {
        let s = kubectl_json(&server, None, &["get", "statefulset", "web"])["status"].clone();
        (s["currentRevision"] == s["updateRevision"] && s["currentReplicas"] == 3).then_some(())
    });
}
