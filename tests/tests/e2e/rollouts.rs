//! End-to-end: the ReplicaSet, ReplicationController and Deployment
//! controllers, driven with kubectl against the real binary, pods run by
//! the stand-in node agent: `create deployment` → `rollout status`;
//! `set image` within `maxSurge`/`maxUnavailable` at every step (a watch
//! of the pods replayed); `rollout history`, `undo`, `pause`, `resume`,
//! `restart`; `scale`; a ReplicaSet adopting an orphan and releasing a
//! relabelled pod; two ReplicaSets with one selector not fighting; a
//! ReplicationController keeping its count; and the hostile cases (10,000
//! replicas, a crash-looping pod, a progress deadline).

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use wasm_apiserver_e2e::etcd::EtcdCluster;
use wasm_apiserver_e2e::node_agent::{NodeAgent, NodeSpec};
use wasm_apiserver_e2e::{
    KubectlWatch, Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until,
};

const WAIT: Duration = Duration::from_secs(60);

fn items(v: Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

fn pods(server: &Server, selector: &str) -> Vec<Value> {
    items(kubectl_json(server, None, &["get", "pods", "-l", selector]))
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn terminating(p: &Value) -> bool {
    !p["metadata"]["deletionTimestamp"].is_null()
        || matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// The controller reference of an object: `(kind, name)`.
fn controller(obj: &Value) -> Option<(String, String)> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_string(),
                r["name"].as_str().unwrap_or_default().to_string(),
            )
        })
}

fn rollout_status(server: &Server, what: &str) -> String {
    kubectl_ok(server, None, &["rollout", "status", what, "--timeout=120s"])
}

fn live_pods(server: &Server, selector: &str) -> Vec<Value> {
    pods(server, selector)
        .into_iter()
        .filter(|p| !terminating(p))
        .collect()
}

/// Replays a `kubectl get … -w --output-watch-events -o json`: the state
/// (name → object) after every event, from the first event on which
/// `ready_from` holds (the watch starts with the listed objects, one event
/// each).
fn replay(
    events: &[Value],
    ready_from: impl Fn(&BTreeMap<String, Value>) -> bool,
) -> Vec<BTreeMap<String, Value>> {
    let mut state: BTreeMap<String, Value> = BTreeMap::new();
    let mut out = Vec::new();
    for e in events {
        let obj = &e["object"];
        let key = name(obj).to_string();
        if e["type"] == "DELETED" {
            state.remove(&key);
        } else {
            state.insert(key, obj.clone());
        }
        if !out.is_empty() || ready_from(&state) {
            out.push(state.clone());
        }
    }
    out
}

/// The rolling-update bounds at every step: the ReplicaSets' sizes never
/// add up to more than `max_total` (replicas + maxSurge), and ready pods
/// never drop below `min_ready` (replicas - maxUnavailable). How many
/// states were checked.
fn check_bounds(sets: &[Value], pods: &[Value], max_total: i64, min_ready: usize) -> usize {
    let mut checked = 0;
    for (i, state) in replay(sets, |s| !s.is_empty()).iter().enumerate() {
        let total: i64 = state
            .values()
            .map(|rs| rs["spec"]["replicas"].as_i64().unwrap_or(0))
            .sum();
        assert!(
            total <= max_total,
            "ReplicaSets sized {total} (max {max_total}) after event {i}: {:?}",
            state
                .values()
                .map(|rs| (name(rs), rs["spec"]["replicas"].clone()))
                .collect::<Vec<_>>()
        );
        checked += 1;
    }
    let ready_count =
        |s: &BTreeMap<String, Value>| s.values().filter(|p| !terminating(p) && ready(p)).count();
    for (i, state) in replay(pods, |s| ready_count(s) >= min_ready)
        .iter()
        .enumerate()
    {
        let n = ready_count(state);
        assert!(
            n >= min_ready,
            "{n} pods ready (min {min_ready}) after event {i}: {:?}",
            state
                .values()
                .map(|p| (name(p), ready(p), terminating(p)))
                .collect::<Vec<_>>()
        );
        checked += 1;
    }
    checked
}

fn images(server: &Server, selector: &str) -> Vec<String> {
    live_pods(server, selector)
        .iter()
        .map(|p| {
            p["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

fn replica_sets(server: &Server, selector: &str) -> Vec<Value> {
    items(kubectl_json(server, None, &["get", "rs", "-l", selector]))
}

#[test]
fn deployment_rolls_out_updates_within_bounds_and_rolls_back() {
    let server = Server::start();
    let _agent = NodeAgent::start(
        &server,
        vec![NodeSpec::new("node-a"), NodeSpec::new("node-b")],
    );
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=4",
        ],
    );
    let out = rollout_status(&server, "deployment/web");
    assert!(out.contains("successfully rolled out"), "{out}");
    let d = kubectl_json(&server, None, &["get", "deployment", "web"]);
    assert_eq!(d["status"]["readyReplicas"], 4, "{d}");
    assert_eq!(d["status"]["updatedReplicas"], 4, "{d}");
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let conditions = d["status"]["conditions"].to_string();
    assert!(
        conditions.contains("MinimumReplicasAvailable")
            && conditions.contains("NewReplicaSetAvailable"),
        "{conditions}"
    );
    let sets = replica_sets(&server, "app=web");
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("a pod-template-hash")
        .to_string();
    assert_eq!(name(rs), format!("web-{hash}"));
    assert_eq!(controller(rs), Some(("Deployment".into(), "web".into())));
    let running = live_pods(&server, "app=web");
    assert_eq!(running.len(), 4);
    for p in &running {
        assert_eq!(controller(p), Some(("ReplicaSet".into(), name(rs).into())));
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash.as_str());
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
            true
        );
        assert_eq!(p["status"]["phase"], "Running");
    }
    // The scheduler spread them over the two nodes (PodTopologySpread's
    // system default and LeastAllocated both pull that way).
    let on = |node: &str| {
        running
            .iter()
            .filter(|p| p["spec"]["nodeName"] == node)
            .count()
    };
    assert_eq!((on("node-a"), on("node-b")), (2, 2), "{running:?}");

    // A rolling update within maxSurge 1 / maxUnavailable 1, every step.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "deployment",
            "web",
            "-p",
            r#"{"spec":{"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":1}}}}"#,
        ],
    );
    rollout_status(&server, "deployment/web");
    let watch = |kind: &str| {
        let mut w = KubectlWatch::spawn(
            &server,
            None,
            &[
                "get",
                kind,
                "-l",
                "app=web",
                "-w",
                "--output-watch-events",
                "-o",
                "json",
            ],
        );
        w.wait_for_json(Duration::from_secs(10), "the listed objects", |e| {
            e["type"] == "ADDED"
        });
        w
    };
    let (mut set_watch, mut pod_watch) = (watch("rs"), watch("pods"));
    kubectl_ok(
        &server,
        None,
        &["set", "image", "deployment/web", "nginx=nginx:1.28"],
    );
    rollout_status(&server, "deployment/web");
    assert_eq!(images(&server, "app=web"), vec!["nginx:1.28"; 4]);
    // Let the watches catch up with the last writes.
    let old_set = name(rs).to_string();
    set_watch.wait_for_json(Duration::from_secs(10), "the old set at 0", |e| {
        e["object"]["metadata"]["name"] == old_set.as_str() && e["object"]["spec"]["replicas"] == 0
    });
    for p in &running {
        pod_watch.wait_for_json(Duration::from_secs(30), "an old pod's deletion", |e| {
            e["type"] == "DELETED" && e["object"]["metadata"]["name"] == name(p)
        });
    }
    let (sets, pods) = (set_watch.json_documents(), pod_watch.json_documents());
    let checked = check_bounds(&sets, &pods, 5, 3);
    assert!(
        checked >= 12,
        "only {checked} states checked: {sets:?} {pods:?}"
    );
    assert_eq!(replica_sets(&server, "app=web").len(), 2);

    // History, then undo to revision 1's template (revision 3).
    let history = kubectl_ok(&server, None, &["rollout", "history", "deployment/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");
    kubectl_ok(&server, None, &["rollout", "undo", "deployment/web"]);
    rollout_status(&server, "deployment/web");
    assert_eq!(images(&server, "app=web"), vec!["nginx:1.27"; 4]);
    let sets = replica_sets(&server, "app=web");
    assert_eq!(sets.len(), 2, "the first set was reused");
    let first = sets
        .iter()
        .find(|s| name(s) == format!("web-{hash}"))
        .expect("the first ReplicaSet");
    assert_eq!(
        first["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    assert_eq!(
        first["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"],
        "1"
    );
    let history = kubectl_ok(&server, None, &["rollout", "history", "deployment/web"]);
    assert!(history.contains('2') && history.contains('3'), "{history}");
    let events = kubectl_ok(&server, None, &["get", "events"]);
    assert!(events.contains("ScalingReplicaSet"), "{events}");
}

#[test]
fn deployment_pauses_resumes_restarts_and_scales() {
    let server = Server::start();
    let _agent = NodeAgent::start(
        &server,
        vec![NodeSpec::new("node-a"), NodeSpec::new("node-b")],
    );
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "deployment",
            "app",
            "--image=nginx:1.27",
            "--replicas=2",
        ],
    );
    rollout_status(&server, "deployment/app");

    kubectl_ok(&server, None, &["rollout", "pause", "deployment/app"]);
    kubectl_ok(
        &server,
        None,
        &["set", "image", "deployment/app", "nginx=nginx:1.28"],
    );
    let d = poll_until(Duration::from_secs(10), "the Paused condition", || {
        let d = kubectl_json(&server, None, &["get", "deployment", "app"]);
        d["status"]["conditions"]
            .to_string()
            .contains("DeploymentPaused")
            .then_some(d)
    });
    assert_eq!(d["spec"]["paused"], true);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        replica_sets(&server, "app=app").len(),
        1,
        "no rollout while paused"
    );
    let out = kubectl(&server, None, &["rollout", "undo", "deployment/app"]);
    assert!(
        !out.status.success(),
        "undo of a paused deployment must fail"
    );
    kubectl_ok(&server, None, &["rollout", "resume", "deployment/app"]);
    rollout_status(&server, "deployment/app");
    assert_eq!(images(&server, "app=app"), vec!["nginx:1.28"; 2]);

    kubectl_ok(&server, None, &["rollout", "restart", "deployment/app"]);
    rollout_status(&server, "deployment/app");
    let restarted = live_pods(&server, "app=app");
    assert_eq!(restarted.len(), 2);
    for p in &restarted {
        assert!(
            p["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_string(),
            "{p}"
        );
    }
    assert_eq!(replica_sets(&server, "app=app").len(), 3);

    kubectl_ok(
        &server,
        None,
        &["scale", "deployment", "app", "--replicas=5"],
    );
    rollout_status(&server, "deployment/app");
    poll_until(Duration::from_secs(30), "5 ready pods", || {
        (live_pods(&server, "app=app")
            .iter()
            .filter(|p| ready(p))
            .count()
            == 5)
            .then_some(())
    });
    kubectl_ok(
        &server,
        None,
        &["scale", "deployment", "app", "--replicas=1"],
    );
    poll_until(Duration::from_secs(30), "1 pod", || {
        (live_pods(&server, "app=app").len() == 1).then_some(())
    });
    let d = kubectl_json(&server, None, &["get", "deployment", "app"]);
    poll_until(Duration::from_secs(10), "status of 1 replica", || {
        let d = kubectl_json(&server, None, &["get", "deployment", "app"]);
        (d["status"]["replicas"] == 1 && d["status"]["availableReplicas"] == 1).then_some(())
    });
    assert_eq!(d["spec"]["replicas"], 1);
}

fn replica_set_manifest(name: &str, replicas: u32, selector: &str) -> String {
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{{"name":"{name}"}},
        "spec":{{"replicas":{replicas},"selector":{{"matchLabels":{{"app":"{selector}"}}}},
        "template":{{"metadata":{{"labels":{{"app":"{selector}","set":"{name}"}}}},
        "spec":{{"containers":[{{"name":"c","image":"nginx"}}]}}}}}}}}"#
    )
}

fn owned_by(server: &Server, selector: &str, kind: &str, owner: &str) -> Vec<String> {
    live_pods(server, selector)
        .iter()
        .filter(|p| controller(p) == Some((kind.to_string(), owner.to_string())))
        .map(|p| name(p).to_string())
        .collect()
}

#[test]
fn replica_sets_adopt_release_and_never_fight() {
    let server = Server::start();
    kubectl_ok(
        &server,
        None,
        &["run", "orphan", "--image=nginx", "--labels=app=adopt"],
    );
    let out = kubectl_stdin(
        &server,
        None,
        &["apply", "-f", "-"],
        &replica_set_manifest("first", 2, "adopt"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let owned = poll_until(Duration::from_secs(20), "two pods of first", || {
        let o = owned_by(&server, "app=adopt", "ReplicaSet", "first");
        (o.len() == 2).then_some(o)
    });
    assert!(
        owned.contains(&"orphan".to_string()),
        "the orphan was adopted: {owned:?}"
    );
    let orphan = kubectl_json(&server, None, &["get", "pod", "orphan"]);
    let r = &orphan["metadata"]["ownerReferences"][0];
    assert_eq!(r["blockOwnerDeletion"], true);
    assert_eq!(r["apiVersion"], "apps/v1");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        live_pods(&server, "app=adopt").len(),
        2,
        "nothing created twice"
    );

    // A relabelled pod is released and replaced.
    kubectl_ok(
        &server,
        None,
        &["label", "pod", "orphan", "app=gone", "--overwrite"],
    );
    poll_until(Duration::from_secs(20), "the release", || {
        let p = kubectl_json(&server, None, &["get", "pod", "orphan"]);
        controller(&p).is_none().then_some(())
    });
    poll_until(Duration::from_secs(20), "a replacement", || {
        let o = owned_by(&server, "app=adopt", "ReplicaSet", "first");
        (o.len() == 2 && !o.contains(&"orphan".to_string())).then_some(())
    });

    // A second set with the same selector makes its own pods and takes
    // none of the first's; neither deletes the other's.
    let out = kubectl_stdin(
        &server,
        None,
        &["apply", "-f", "-"],
        &replica_set_manifest("second", 2, "adopt"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    poll_until(Duration::from_secs(20), "two pods of second", || {
        (owned_by(&server, "app=adopt", "ReplicaSet", "second").len() == 2).then_some(())
    });
    let before: Vec<String> = live_pods(&server, "app=adopt")
        .iter()
        .map(|p| name(p).to_string())
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let after: Vec<String> = live_pods(&server, "app=adopt")
        .iter()
        .map(|p| name(p).to_string())
        .collect();
    assert_eq!(before, after, "no fight");
    assert_eq!(after.len(), 4);
    let rs = kubectl_json(&server, None, &["get", "rs", "first"]);
    assert_eq!(rs["status"]["replicas"], 2, "{rs}");
    assert_eq!(rs["status"]["fullyLabeledReplicas"], 2, "{rs}");

    // Scale down picks the first's own pods.
    kubectl_ok(&server, None, &["scale", "rs", "first", "--replicas=0"]);
    poll_until(Duration::from_secs(20), "first scaled to 0", || {
        owned_by(&server, "app=adopt", "ReplicaSet", "first")
            .is_empty()
            .then_some(())
    });
    assert_eq!(
        owned_by(&server, "app=adopt", "ReplicaSet", "second").len(),
        2
    );
}

#[test]
fn replication_controller_keeps_its_count() {
    let server = Server::start();
    let rc = r#"{"apiVersion":"v1","kind":"ReplicationController","metadata":{"name":"legacy"},
        "spec":{"replicas":3,"template":{"metadata":{"labels":{"app":"legacy"}},
        "spec":{"containers":[{"name":"c","image":"nginx"}]}}}}"#;
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], rc);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = poll_until(Duration::from_secs(20), "three pods", || {
        let o = owned_by(&server, "app=legacy", "ReplicationController", "legacy");
        (o.len() == 3).then_some(o)
    });
    let p = kubectl_json(&server, None, &["get", "pod", &first[0]]);
    assert_eq!(p["metadata"]["ownerReferences"][0]["apiVersion"], "v1");
    kubectl_ok(&server, None, &["delete", "pod", &first[0], "--wait=false"]);
    poll_until(Duration::from_secs(20), "a replacement", || {
        let o = owned_by(&server, "app=legacy", "ReplicationController", "legacy");
        (o.len() == 3 && !o.contains(&first[0])).then_some(())
    });
    kubectl_ok(&server, None, &["scale", "rc", "legacy", "--replicas=1"]);
    poll_until(Duration::from_secs(20), "one pod", || {
        (owned_by(&server, "app=legacy", "ReplicationController", "legacy").len() == 1)
            .then_some(())
    });
    poll_until(Duration::from_secs(10), "status", || {
        let rc = kubectl_json(&server, None, &["get", "rc", "legacy"]);
        (rc["status"]["replicas"] == 1).then_some(())
    });
}

/// Seconds a `GET` of `path` took.
fn timed_get(server: &Server, path: &str) -> Duration {
    let t = Instant::now();
    let (status, _) = server.get(path).expect("GET");
    assert_eq!(status, 200, "{path}");
    t.elapsed()
}

#[test]
fn ten_thousand_replicas_do_not_stall_the_server() {
    let server = Server::start();
    let _agent = NodeAgent::start(
        &server,
        vec![NodeSpec::new("node-a"), NodeSpec::new("node-b")],
    );
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "deployment",
            "huge",
            "--image=nginx",
            "--replicas=10000",
        ],
    );
    // While the controllers work, other requests are answered quickly.
    let start = Instant::now();
    let (mut slowest, mut slowest_kubectl) = (Duration::ZERO, Duration::ZERO);
    let mut counts = Vec::new();
    while start.elapsed() < Duration::from_secs(20) {
        slowest = slowest.max(timed_get(&server, "/api/v1/namespaces/default/configmaps"));
        slowest = slowest.max(timed_get(&server, "/readyz"));
        let t = Instant::now();
        kubectl_ok(
            &server,
            None,
            &["create", "configmap", &format!("cm-{}", counts.len())],
        );
        slowest_kubectl = slowest_kubectl.max(t.elapsed());
        let rs = kubectl_json(&server, None, &["get", "rs", "-l", "app=huge"]);
        let created = items(rs)
            .first()
            .and_then(|r| r["status"]["replicas"].as_i64())
            .unwrap_or(0);
        counts.push(created);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        slowest < Duration::from_secs(2),
        "a request took {slowest:?} while 10,000 pods were being created"
    );
    assert!(
        slowest_kubectl < Duration::from_secs(5),
        "a kubectl create took {slowest_kubectl:?} while 10,000 pods were being created"
    );
    let last = *counts.last().unwrap();
    assert!(last > 500, "the controller makes progress: {counts:?}");
    assert!(counts.iter().all(|c| *c <= 10_000), "{counts:?}");
    // Never more than asked for, once it is done or not.
    let pods_now = kubectl_ok(
        &server,
        None,
        &["get", "pods", "-l", "app=huge", "--no-headers"],
    );
    assert!(pods_now.lines().count() <= 10_000);
}

#[test]
fn crash_looping_pods_do_not_hot_loop_the_controllers() {
    let server = Server::start();
    let _agent = NodeAgent::start(&server, vec![NodeSpec::new("node-a")]);
    let manifest = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"crash"},
        "spec":{"replicas":1,"selector":{"matchLabels":{"app":"crash"}},
        "template":{"metadata":{"labels":{"app":"crash"},"annotations":{
            "node-agent.wasm-apiserver.io/exit-after":"200ms",
            "node-agent.wasm-apiserver.io/exit-code":"1"}},
        "spec":{"containers":[{"name":"c","image":"busybox"}]}}}}"#;
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    poll_until(Duration::from_secs(30), "a restart", || {
        live_pods(&server, "app=crash")
            .iter()
            .any(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64() > Some(0))
            .then_some(())
    });
    let reconciles = |queue: &str| -> u64 {
        let metrics = server.get("/metrics").unwrap().1;
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("controller_runtime_reconcile_total{")
                    && l.contains(&format!("controller=\"{queue}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let (rs0, d0) = (reconciles("replicaset"), reconciles("deployment"));
    std::thread::sleep(Duration::from_secs(5));
    let (rs1, d1) = (reconciles("replicaset"), reconciles("deployment"));
    // One pod changes a few times per restart; a hot loop would be
    // thousands of syncs in 5 s.
    assert!(
        rs1 - rs0 < 300,
        "replicaset synced {} times in 5 s",
        rs1 - rs0
    );
    assert!(d1 - d0 < 300, "deployment synced {} times in 5 s", d1 - d0);
    assert_eq!(
        live_pods(&server, "app=crash").len(),
        1,
        "the pod is restarted, not replaced"
    );
}

#[test]
fn a_rollout_that_never_gets_ready_exceeds_its_progress_deadline() {
    let server = Server::start();
    let _agent = NodeAgent::start(&server, vec![NodeSpec::new("node-a")]);
    let manifest = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"stuck"},
        "spec":{"replicas":1,"progressDeadlineSeconds":3,"selector":{"matchLabels":{"app":"stuck"}},
        "template":{"metadata":{"labels":{"app":"stuck"},"annotations":{
            "node-agent.wasm-apiserver.io/never-ready":"true"}},
        "spec":{"containers":[{"name":"c","image":"nginx"}]}}}}"#;
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(
        &server,
        None,
        &["rollout", "status", "deployment/stuck", "--timeout=60s"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("exceeded its progress deadline"),
        "{stderr}"
    );
    let d = kubectl_json(&server, None, &["get", "deployment", "stuck"]);
    let conditions = d["status"]["conditions"].to_string();
    assert!(
        conditions.contains("ProgressDeadlineExceeded"),
        "{conditions}"
    );
    assert!(
        conditions.contains("MinimumReplicasUnavailable"),
        "{conditions}"
    );
}

fn sets_by_name(server: &Server) -> BTreeMap<String, (i64, String)> {
    items(kubectl_json(server, None, &["get", "rs", "-l", "app=web"]))
        .iter()
        .map(|rs| {
            (
                name(rs).to_string(),
                (
                    rs["spec"]["replicas"].as_i64().unwrap_or(-1),
                    rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
            )
        })
        .collect()
}

#[test]
fn deployment_revisions_and_proportional_scaling_without_kubelets() {
    let server = Server::start();
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=3",
        ],
    );
    poll_until(Duration::from_secs(20), "one set with 3 pods", || {
        let s = sets_by_name(&server);
        (s.len() == 1 && live_pods(&server, "app=web").len() == 3).then_some(())
    });
    kubectl_ok(
        &server,
        None,
        &["set", "image", "deployment/web", "nginx=nginx:1.28"],
    );
    let second = poll_until(Duration::from_secs(20), "two sets", || {
        let s = sets_by_name(&server);
        (s.len() == 2 && live_pods(&server, "app=web").len() == 4).then_some(s)
    });
    let total: i64 = second.values().map(|(r, _)| r).sum();
    assert_eq!(total, 4);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        sets_by_name(&server),
        second,
        "stable while nothing is ready"
    );
    let history = kubectl_ok(&server, None, &["rollout", "history", "deployment/web"]);
    assert!(
        history.contains("1 ") && history.contains("2 "),
        "{history}"
    );
    kubectl_ok(&server, None, &["rollout", "undo", "deployment/web"]);
    // The first set is the new one again, with revision 3; the second
    // keeps its pod: nothing is available, and maxUnavailable (25% of 3)
    // is 0, so no old pod may go (as upstream).
    poll_until(Duration::from_secs(20), "the first set back", || {
        let s = sets_by_name(&server);
        let back = s.values().any(|(r, rev)| *r == 3 && rev == "3")
            && s.values().any(|(r, rev)| *r == 1 && rev == "2");
        back.then_some(())
    });
    let d = kubectl_json(&server, None, &["get", "deployment", "web"]);
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    kubectl_ok(
        &server,
        None,
        &["scale", "deployment", "web", "--replicas=5"],
    );
    // Nothing is available, so the old set cannot shrink; the resize is
    // shared in proportion: 3 and 1 of a max of 4 become 5 and 2 of 7.
    poll_until(Duration::from_secs(20), "7 pods", || {
        (live_pods(&server, "app=web").len() == 7).then_some(())
    });
    let events = kubectl_ok(&server, None, &["get", "events"]);
    assert!(
        events.contains("Scaled up replica set") && events.contains("Created pod:"),
        "{events}"
    );
}

/// The deployment queue's adds on `server`'s `/metrics`: non-zero only on
/// the replica that leads (its controllers follow the Deployments).
fn deployment_queue_adds(server: &Server) -> u64 {
    let metrics = server.get("/metrics").map(|r| r.1).unwrap_or_default();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("workqueue_adds_total{name=\"deployment\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Two replicas on etcd; the leading one is killed mid-rollout. The other
/// takes the Lease and finishes the rollout from what is stored: no second
/// ReplicaSet for the same template, no pod beyond replicas + maxSurge, no
/// extra pod created for the new template (its expectations start from a
/// fresh list, not from what the dead leader had in flight).
#[test]
fn a_replica_finishes_the_rollout_its_dead_leader_started() {
    let etcd = EtcdCluster::start(1);
    let servers = etcd.servers_flag();
    let args = [
        "--etcd-servers",
        servers.as_str(),
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=500ms",
    ];
    let a = Server::start_with_args(&args);
    let b = Server::start_with_args(&args);
    // Which replica leads: the one whose deployment controller sees a
    // Deployment.
    kubectl_ok(
        &a,
        None,
        &[
            "create",
            "deployment",
            "probe",
            "--image=nginx",
            "--replicas=0",
        ],
    );
    let leader_is_a = poll_until(WAIT, "one replica to lead", || {
        match (deployment_queue_adds(&a), deployment_queue_adds(&b)) {
            (0, 0) => None,
            (x, 0) if x > 0 => Some(true),
            (0, _) => Some(false),
            (x, y) => panic!("both replicas run the deployment controller: {x} and {y} adds"),
        }
    });
    let (mut leader, survivor) = if leader_is_a { (a, b) } else { (b, a) };
    // The node agent talks to the survivor, so it outlives the leader.
    let _agent = NodeAgent::start(
        &survivor,
        vec![NodeSpec::new("node-a"), NodeSpec::new("node-b")],
    );
    // Each pod takes a second to be ready, so the rollout lasts a while.
    let manifest = |image: &str| {
        format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"web"}},
            "spec":{{"replicas":6,"selector":{{"matchLabels":{{"app":"web"}}}},
            "strategy":{{"rollingUpdate":{{"maxSurge":1,"maxUnavailable":0}}}},
            "template":{{"metadata":{{"labels":{{"app":"web"}},
              "annotations":{{"node-agent.wasm-apiserver.io/ready-after":"1s"}}}},
            "spec":{{"containers":[{{"name":"nginx","image":"{image}"}}]}}}}}}}}"#
        )
    };
    let apply = |image: &str| {
        let out = kubectl_stdin(&survivor, None, &["apply", "-f", "-"], &manifest(image));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    apply("nginx:1.27");
    rollout_status(&survivor, "deployment/web");
    let mut pod_watch = KubectlWatch::spawn(
        &survivor,
        None,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "-w",
            "--output-watch-events",
            "-o",
            "json",
        ],
    );
    pod_watch.wait_for_json(Duration::from_secs(10), "the listed pods", |e| {
        e["type"] == "ADDED"
    });
    apply("nginx:1.28");
    // Mid-rollout: two pods of the new template exist, four to go.
    poll_until(WAIT, "two new pods", || {
        (images(&survivor, "app=web")
            .iter()
            .filter(|i| *i == "nginx:1.28")
            .count()
            >= 2)
            .then_some(())
    });
    leader.kill9();
    let out = kubectl_ok(
        &survivor,
        None,
        &["rollout", "status", "deployment/web", "--timeout=90s"],
    );
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(images(&survivor, "app=web"), vec!["nginx:1.28"; 6]);
    assert_eq!(
        replica_sets(&survivor, "app=web").len(),
        2,
        "one ReplicaSet per template"
    );
    // Every pod that ever existed, from the watch: never more than 7
    // unfinished at once, and exactly 6 made for the new template.
    let new_hash = replica_sets(&survivor, "app=web")
        .iter()
        .find(|rs| rs["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28")
        .and_then(|rs| {
            rs["metadata"]["labels"]["pod-template-hash"]
                .as_str()
                .map(String::from)
        })
        .expect("the new ReplicaSet");
    for p in live_pods(&survivor, "app=web") {
        pod_watch.wait_for_json(Duration::from_secs(10), "the last pods", |e| {
            e["object"]["metadata"]["name"] == name(&p)
        });
    }
    let docs = pod_watch.json_documents();
    let mut live: BTreeMap<String, bool> = BTreeMap::new();
    let mut new_pods = std::collections::BTreeSet::new();
    for e in &docs {
        let p = &e["object"];
        if p["metadata"]["labels"]["pod-template-hash"] == new_hash.as_str() {
            new_pods.insert(name(p).to_string());
        }
        if e["type"] == "DELETED" || terminating(p) {
            live.remove(name(p));
        } else {
            live.insert(name(p).to_string(), true);
        }
        assert!(
            live.len() <= 7,
            "{} pods at once (replicas 6 + maxSurge 1): {:?}",
            live.len(),
            live.keys().collect::<Vec<_>>()
        );
    }
    assert_eq!(
        new_pods.len(),
        6,
        "pods made for the new template: {new_pods:?}"
    );
}
