//! End-to-end: controllers as wasm components (issue 34), through kubectl
//! against the real binary with real compiled components: the
//! `namespace-defaults` example generates, repairs and removes; RBAC and
//! admission bind a controller's writes; hostile components fail alone;
//! a swap to a new version misses no key; a deleted controller stops.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

const WAIT: Duration = Duration::from_secs(30);

fn start() -> Server {
    let dir = wasm_apiserver_e2e::plugin_dir();
    Server::start_with_args(&["--plugin-dir", dir.to_str().expect("UTF-8 path")])
}

fn apply(server: &Server, doc: &Value) {
    let out = kubectl_stdin(server, None, &["apply", "-f", "-"], &doc.to_string());
    assert!(
        out.status.success(),
        "apply failed: {}\n{doc}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A ServiceAccount in kube-system bound to a ClusterRole of `rules`.
fn service_account(server: &Server, name: &str, rules: Value) {
    apply(
        server,
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": name, "namespace": "kube-system"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": format!("controller:{name}")}, "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": format!("controller:{name}")},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": format!("controller:{name}")},
             "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}]},
        ]}),
    );
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

const ALL: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
const READ: &[&str] = &["get", "list", "watch"];

fn namespace_defaults(name: &str, sa: &str) -> Value {
    json!({
        "apiVersion": "controllers.wasm-apiserver.io/v1alpha1", "kind": "Controller",
        "metadata": {"name": name},
        "spec": {
            "module": {"file": "namespace_defaults.wasm"},
            "for": {"apiVersion": "v1", "kind": "Namespace"},
            "owns": [
                {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy"},
                {"apiVersion": "v1", "kind": "ResourceQuota"},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding"},
            ],
            "serviceAccountName": format!("kube-system/{sa}"),
            "workers": 2,
        },
    })
}

/// The controller's status once it has seen its latest generation.
fn wait_status(server: &Server, name: &str, phase: &str) -> Value {
    wait_status_for(server, name, phase, WAIT)
}

/// [`wait_status`] with its own patience: a componentize-py module is
/// compiled cold by every test server (its cache lives in the data dir),
/// which takes tens of seconds on a busy machine, as in `context_aware`.
fn wait_status_for(server: &Server, name: &str, phase: &str, wait: Duration) -> Value {
    poll_until(wait, &format!("controller {name} to be {phase}"), || {
        let c = kubectl_json(server, None, &["get", "controller", name, "-o", "json"]);
        let seen = c["status"]["observedGeneration"] == c["metadata"]["generation"];
        (seen && c["status"]["phase"] == phase).then(|| c["status"].clone())
    })
}

fn get(server: &Server, args: &[&str]) -> Option<Value> {
    let mut full = vec!["get"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["-o", "json"]);
    let out = kubectl(server, None, &full);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("NotFound") || err.contains("not found"),
            "{err}"
        );
        return None;
    }
    Some(serde_json::from_slice(&out.stdout).expect("JSON"))
}

fn generated(server: &Server, ns: &str) -> Vec<Option<Value>> {
    [
        ["networkpolicy", "default-deny"],
        ["resourcequota", "default-quota"],
        ["rolebinding", "tenant-admins"],
    ]
    .iter()
    .map(|[kind, name]| get(server, &[kind, name, "-n", ns, "--show-managed-fields"]))
    .collect()
}

fn full_rbac(server: &Server, sa: &str) {
    service_account(
        server,
        sa,
        json!([
            rule(&[""], &["namespaces"], READ),
            rule(&["networking.k8s.io"], &["networkpolicies"], ALL),
            rule(&[""], &["resourcequotas"], ALL),
            rule(&["rbac.authorization.k8s.io"], &["rolebindings"], ALL),
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "verbs": ["bind"], "resourceNames": ["admin"]},
            rule(&["", "events.k8s.io"], &["events"], &["create", "patch"]),
        ]),
    );
}

/// The `namespace-defaults` example: a labelled namespace gets its three
/// objects, a deleted one and a hand-edited quota come back, removing the
/// label removes them, and unlabelled namespaces are left alone; the
/// controller reports through `kubectl get controllers`, Events and
/// controller-runtime's metrics.
#[test]
fn namespace_defaults_generates_repairs_and_removes() {
    let server = start();
    full_rbac(&server, "namespace-defaults");
    kubectl_ok(&server, None, &["create", "namespace", "plain"]);
    apply(
        &server,
        &namespace_defaults("namespace-defaults", "namespace-defaults"),
    );
    let status = wait_status(&server, "namespace-defaults", "Active");
    assert!(
        status["digest"].as_str().unwrap().starts_with("sha256:"),
        "{status}"
    );
    let table = kubectl_ok(&server, None, &["get", "controllers"]);
    assert!(
        table.contains("FOR") && table.contains("namespace-defaults   Namespace   Active"),
        "{table}"
    );

    kubectl_ok(&server, None, &["create", "namespace", "team-a"]);
    kubectl_ok(&server, None, &["label", "namespace", "team-a", "tenant=a"]);
    let objects = poll_until(WAIT, "the three generated objects", || {
        let g = generated(&server, "team-a");
        g.iter()
            .all(Option::is_some)
            .then(|| g.into_iter().flatten().collect::<Vec<_>>())
    });
    let ns = kubectl_json(&server, None, &["get", "namespace", "team-a", "-o", "json"]);
    for o in &objects {
        assert_eq!(
            o["metadata"]["ownerReferences"][0]["uid"], ns["metadata"]["uid"],
            "{o}"
        );
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "namespace-defaults"
        );
        // Written as the controller's ServiceAccount, by apply (the
        // quota's status is the resourcequota-controller's, as upstream).
        let managers: Vec<&str> = o["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["subresource"] != "status")
            .map(|m| m["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["namespace-defaults"], "{o}");
    }
    assert_eq!(objects[2]["subjects"][0]["name"], "tenant:a");

    // Drift is repaired: a deleted NetworkPolicy comes back, in one
    // reconcile (the echo of the controller's own write does not queue the
    // Namespace again)...
    let old_uid = objects[0]["metadata"]["uid"].clone();
    let before = settled_reconciles(&server, "namespace-defaults");
    kubectl_ok(
        &server,
        None,
        &["delete", "networkpolicy", "default-deny", "-n", "team-a"],
    );
    poll_until(WAIT, "the NetworkPolicy to come back", || {
        get(&server, &["networkpolicy", "default-deny", "-n", "team-a"])
            .filter(|np| np["metadata"]["uid"] != old_uid)
    });
    let after = settled_reconciles(&server, "namespace-defaults");
    assert_eq!(after - before, 1, "reconciles for one repair");
    // ...and a hand-edited quota is put back.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "resourcequota",
            "default-quota",
            "-n",
            "team-a",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"hard":{"pods":"99"}}}"#,
        ],
    );
    poll_until(WAIT, "the quota to be put back", || {
        get(&server, &["resourcequota", "default-quota", "-n", "team-a"])
            .filter(|q| q["spec"]["hard"]["pods"] == "20")
    });

    // Unlabelled namespaces got nothing.
    assert!(generated(&server, "plain").iter().all(Option::is_none));

    // The label goes: so do the generated objects.
    kubectl_ok(&server, None, &["label", "namespace", "team-a", "tenant-"]);
    poll_until(WAIT, "the generated objects to go", || {
        generated(&server, "team-a")
            .iter()
            .all(Option::is_none)
            .then_some(())
    });

    let metrics = server.get("/metrics").expect("metrics").1;
    let success = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                "controller_runtime_reconcile_total{controller=\"namespace-defaults\",result=\"success\"}",
            )
        })
        .unwrap_or_else(|| panic!("no reconcile metric:\n{metrics}"));
    let n: u64 = success.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 4, "{success}");
    assert!(metrics.contains("workqueue_depth{name=\"namespace-defaults\"}"));
    assert!(
        metrics.contains(
            "wasm_apiserver_plugin_calls_total{plugin=\"namespace-defaults\",kind=\"controller\",op=\"reconcile\"}"
        ),
        "{metrics}"
    );
}

/// Reconciles of controller `name` so far, once none has started for a
/// second.
fn settled_reconciles(server: &Server, name: &str) -> u64 {
    let count = || {
        let metrics = server.get("/metrics").expect("metrics").1;
        let prefix = format!("controller_runtime_reconcile_total{{controller=\"{name}\",");
        metrics
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    let mut last = count();
    poll_until(WAIT, "the reconciles to settle", || {
        std::thread::sleep(Duration::from_secs(1));
        let now = count();
        std::mem::replace(&mut last, now).eq(&now).then_some(now)
    })
}

/// A controller can do only what its ServiceAccount may: without RBAC for
/// NetworkPolicies its writes are 403s (in its status and a Warning Event)
/// and nothing is created; an admission plugin that denies its write is
/// honoured; and nobody may name a ServiceAccount they cannot impersonate.
#[test]
fn rbac_and_admission_bind_a_controllers_writes() {
    let server = start();
    service_account(
        &server,
        "weak",
        json!([
            rule(&[""], &["namespaces"], READ),
            rule(&["networking.k8s.io"], &["networkpolicies"], READ),
            rule(&[""], &["resourcequotas"], READ),
            rule(&["rbac.authorization.k8s.io"], &["rolebindings"], READ),
        ]),
    );
    apply(&server, &namespace_defaults("weak-defaults", "weak"));
    wait_status(&server, "weak-defaults", "Active");
    kubectl_ok(&server, None, &["create", "namespace", "team-b"]);
    kubectl_ok(&server, None, &["label", "namespace", "team-b", "tenant=b"]);
    let status = poll_until(WAIT, "a forbidden write in the status", || {
        let c = kubectl_json(
            &server,
            None,
            &["get", "controller", "weak-defaults", "-o", "json"],
        );
        c["status"]["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("team-b") && e.contains("Forbidden"))
            .then(|| c["status"].clone())
    });
    assert!(
        status["lastError"]
            .as_str()
            .unwrap()
            .contains("system:serviceaccount:kube-system:weak"),
        "{status}"
    );
    let events = poll_until(WAIT, "the Warning Event", || {
        let list = kubectl_json(
            &server,
            None,
            &["get", "events", "-n", "default", "-o", "json"],
        );
        let found: Vec<Value> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["reason"] == "ReconcileError" && e["type"] == "Warning")
            .cloned()
            .collect();
        (!found.is_empty()).then_some(found)
    });
    assert_eq!(
        events[0]["involvedObject"]["name"], "weak-defaults",
        "{events:?}"
    );
    assert!(generated(&server, "team-b").iter().all(Option::is_none));

    // An admission plugin denying its NetworkPolicies is honoured, and
    // once it goes the retries (with backoff) get through.
    full_rbac(&server, "strong");
    apply(
        &server,
        &json!({"apiVersion": "admission.wasm-apiserver.io/v1alpha1", "kind": "AdmissionPlugin",
            "metadata": {"name": "netpol-owner"},
            "spec": {"module": {"file": "require_labels.wasm"}, "phases": ["Validating"],
                "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["networking.k8s.io"],
                           "apiVersions": ["*"], "resources": ["networkpolicies"]}],
                "config": {"labels": ["owner"]}}}),
    );
    poll_until(WAIT, "the admission plugin", || {
        let p = kubectl_json(
            &server,
            None,
            &["get", "admissionplugin", "netpol-owner", "-o", "json"],
        );
        (p["status"]["phase"] == "Active").then_some(())
    });
    kubectl_ok(&server, None, &["create", "namespace", "team-c"]);
    kubectl_ok(&server, None, &["label", "namespace", "team-c", "tenant=c"]);
    apply(&server, &namespace_defaults("strong-defaults", "strong"));
    poll_until(WAIT, "the admission denial in the status", || {
        let c = kubectl_json(
            &server,
            None,
            &["get", "controller", "strong-defaults", "-o", "json"],
        );
        c["status"]["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("admission plugin \"netpol-owner\" denied"))
            .then_some(())
    });
    assert!(get(&server, &["networkpolicy", "default-deny", "-n", "team-c"]).is_none());
    kubectl_ok(
        &server,
        None,
        &["delete", "admissionplugin", "netpol-owner"],
    );
    poll_until(WAIT, "the objects once admission allows them", || {
        generated(&server, "team-c")
            .iter()
            .all(Option::is_some)
            .then_some(())
    });

    // Naming a ServiceAccount needs the right to impersonate it.
    apply(
        &server,
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "controller-author"},
             "rules": [rule(&["controllers.wasm-apiserver.io"], &["controllers"], ALL)]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "controller-author"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "controller-author"},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]},
        ]}),
    );
    let out = kubectl_stdin(
        &server,
        None,
        &["--as", "alice", "apply", "-f", "-"],
        &namespace_defaults("alice-defaults", "strong").to_string(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "alice may not act as strong");
    assert!(
        err.contains("spec.serviceAccountName") && err.contains("cannot impersonate"),
        "{err}"
    );
}

fn hostile(config: Value, workers: u32) -> Value {
    json!({
        "apiVersion": "controllers.wasm-apiserver.io/v1alpha1", "kind": "Controller",
        "metadata": {"name": "hostile"},
        "spec": {
            "module": {"file": "hostile_controller.wasm"},
            "for": {"apiVersion": "v1", "kind": "ConfigMap"},
            "serviceAccountName": "kube-system/hostile",
            "workers": workers,
            "limits": {"timeoutMillis": 500, "memoryBytes": 16777216},
            "config": config,
        },
    })
}

fn configmaps(names: &[String]) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": names.iter().map(|n| json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "hostile"}})).collect::<Vec<_>>()})
}

fn marks(server: &Server) -> std::collections::BTreeMap<String, String> {
    let list = kubectl_json(
        server,
        None,
        &["get", "configmaps", "-n", "hostile", "-o", "json"],
    );
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| {
            Some((
                c["metadata"]["name"].as_str()?.to_owned(),
                c["metadata"]["annotations"]["reconciled-by"]
                    .as_str()?
                    .to_owned(),
            ))
        })
        .collect()
}

/// A loop, a memory bomb, a trap, an error and a flood of 10,000 applies in
/// one `apply-all` fail only their own keys (with backoff, reported in the
/// status) while other keys, other requests and a second controller go on; swapping the component (in place, and
/// with new watches) loses no key; a deleted controller stops.
#[test]
fn hostile_controllers_are_contained_and_swaps_miss_nothing() {
    let server = start();
    service_account(
        &server,
        "hostile",
        json!([
            rule(&[""], &["configmaps"], ALL),
            rule(&["", "events.k8s.io"], &["events"], &["create"])
        ]),
    );
    full_rbac(&server, "namespace-defaults");
    apply(
        &server,
        &namespace_defaults("namespace-defaults", "namespace-defaults"),
    );
    kubectl_ok(&server, None, &["create", "namespace", "hostile"]);
    apply(&server, &hostile(json!({"mark": "v1"}), 2));
    wait_status(&server, "hostile", "Active");
    let bad: Vec<String> = ["loop-1", "bomb-1", "trap-1", "fail-1", "flood-1"]
        .map(String::from)
        .to_vec();
    apply(&server, &configmaps(&bad));
    apply(&server, &configmaps(&["ok-1".to_string()]));
    poll_until(WAIT, "ok-1 to be reconciled", || {
        (marks(&server).get("ok-1").map(String::as_str) == Some("v1")).then_some(())
    });
    // Requests keep their latency while the loops spin.
    let started = Instant::now();
    kubectl_ok(&server, None, &["get", "namespaces"]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The other controller keeps working.
    kubectl_ok(&server, None, &["create", "namespace", "team-h"]);
    kubectl_ok(&server, None, &["label", "namespace", "team-h", "tenant=h"]);
    poll_until(WAIT, "the other controller's objects", || {
        generated(&server, "team-h")
            .iter()
            .all(Option::is_some)
            .then_some(())
    });
    let status = poll_until(WAIT, "the failures in the status", || {
        let c = kubectl_json(
            &server,
            None,
            &["get", "controller", "hostile", "-o", "json"],
        );
        (c["status"]["failures"].as_u64().unwrap_or(0) >= 8).then(|| c["status"].clone())
    });
    assert!(status["lastError"].is_string(), "{status}");
    let log = poll_until(WAIT, "the flood's outcome in the log", || {
        let log = server.log();
        log.contains("flooded: ").then_some(log)
    });
    for what in [
        "timed out",
        "memory limit",
        "trapped",
        "failing on purpose",
        // 10,000 configurations in one apply-all: the budget's 64 are
        // made, the rest refused alone with a clear error.
        "flooded: 64 made; first refusal: ",
        "the controller made more than 64 writes in one reconcile",
    ] {
        assert!(log.contains(what), "no {what:?} in the log");
    }
    let made = kubectl_json(
        &server,
        None,
        &["get", "configmaps", "-n", "hostile", "-o", "json"],
    )["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("made-flood-1-"))
        })
        .count();
    assert_eq!(made, 64, "only the write budget's objects are made");

    // Swap in place (configuration only) while keys arrive: none is missed.
    let burst: Vec<String> = (0..15).map(|i| format!("ok-swap-{i}")).collect();
    apply(&server, &hostile(json!({"mark": "v2"}), 2));
    apply(&server, &configmaps(&burst));
    // Swap again, now with new workers (new watches), while more arrive.
    let burst2: Vec<String> = (0..15).map(|i| format!("ok-restart-{i}")).collect();
    apply(&server, &hostile(json!({"mark": "v3"}), 3));
    apply(&server, &configmaps(&burst2));
    wait_status(&server, "hostile", "Active");
    let all = poll_until(WAIT, "every key reconciled", || {
        let m = marks(&server);
        burst
            .iter()
            .chain(&burst2)
            .all(|n| m.contains_key(n))
            .then_some(m)
    });
    assert_eq!(all["ok-restart-0"], "v3", "{all:?}");
    // A restart reconciles every object once, with the new version.
    poll_until(WAIT, "ok-1 reconciled by v3", || {
        (marks(&server).get("ok-1").map(String::as_str) == Some("v3")).then_some(())
    });

    // Deleted: it stops.
    kubectl_ok(&server, None, &["delete", "controller", "hostile"]);
    std::thread::sleep(Duration::from_millis(500));
    apply(&server, &configmaps(&["ok-after".to_string()]));
    std::thread::sleep(Duration::from_secs(2));
    assert!(!marks(&server).contains_key("ok-after"));
    let metrics = server.get("/metrics").expect("metrics").1;
    assert!(
        !metrics.contains("name=\"hostile\""),
        "the queue's metrics went with it"
    );
}

/// On etcd with two replicas, only the leader runs wasm controllers (one
/// queue, so every key is reconciled by one replica), and when the leader
/// is killed the other takes the Lease and runs them.
#[test]
fn one_replica_runs_wasm_controllers_and_another_takes_over() {
    let etcd = wasm_apiserver_e2e::etcd::EtcdCluster::start(1);
    let servers = etcd.servers_flag();
    let dir = wasm_apiserver_e2e::plugin_dir();
    let args = [
        "--etcd-servers",
        servers.as_str(),
        "--plugin-dir",
        dir.to_str().expect("UTF-8 path"),
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=500ms",
    ];
    let mut a = Server::start_with_args(&args);
    let mut b = Server::start_with_args(&args);
    full_rbac(&a, "namespace-defaults");
    apply(
        &a,
        &namespace_defaults("namespace-defaults", "namespace-defaults"),
    );
    wait_status(&b, "namespace-defaults", "Active");
    kubectl_ok(&a, None, &["create", "namespace", "team-r"]);
    kubectl_ok(&b, None, &["label", "namespace", "team-r", "tenant=r"]);
    poll_until(WAIT, "the generated objects", || {
        generated(&b, "team-r")
            .iter()
            .all(Option::is_some)
            .then_some(())
    });
    let runs = |s: &Server| {
        s.get("/metrics")
            .unwrap()
            .1
            .contains("controller_runtime_reconcile_total{controller=\"namespace-defaults\"")
    };
    let (ra, rb) = (runs(&a), runs(&b));
    assert!(
        ra != rb,
        "exactly one replica runs the controller: a {ra}, b {rb}"
    );
    let survivor = if ra {
        a.kill9();
        &b
    } else {
        b.kill9();
        &a
    };
    kubectl_ok(survivor, None, &["create", "namespace", "team-s"]);
    kubectl_ok(
        survivor,
        None,
        &["label", "namespace", "team-s", "tenant=s"],
    );
    poll_until(WAIT, "the survivor to generate", || {
        generated(survivor, "team-s")
            .iter()
            .all(Option::is_some)
            .then_some(())
    });
    assert!(runs(survivor));
}

/// The Python SDK's namespace-defaults (componentize-py) does live what
/// the Rust one does: the same three objects, field for field but the
/// owner's uid, and their removal with the label.
#[test]
fn the_python_example_generates_what_the_rust_one_does() {
    let dir = tempfile::tempdir().unwrap();
    for (from, to) in [
        (
            wasm_apiserver_e2e::plugin_dir().join("namespace_defaults.wasm"),
            "namespace_defaults.wasm",
        ),
        (
            wasm_apiserver_e2e::example_plugin_dir().join("namespace-defaults-python.wasm"),
            "namespace_defaults_python.wasm",
        ),
    ] {
        std::fs::copy(&from, dir.path().join(to)).unwrap();
    }
    let server = Server::start_with_args(&["--plugin-dir", dir.path().to_str().unwrap()]);
    full_rbac(&server, "namespace-defaults");
    apply(
        &server,
        &namespace_defaults("rust-defaults", "namespace-defaults"),
    );
    let mut python = namespace_defaults("python-defaults", "namespace-defaults");
    python["spec"]["module"]["file"] = json!("namespace_defaults_python.wasm");
    python["spec"]["config"] = json!({"label": "py-tenant", "manager": "python-defaults"});
    apply(&server, &python);
    wait_status_for(
        &server,
        "python-defaults",
        "Active",
        Duration::from_secs(120),
    );
    wait_status(&server, "rust-defaults", "Active");
    kubectl_ok(&server, None, &["create", "namespace", "by-rust"]);
    kubectl_ok(
        &server,
        None,
        &["label", "namespace", "by-rust", "tenant=t"],
    );
    kubectl_ok(&server, None, &["create", "namespace", "by-python"]);
    kubectl_ok(
        &server,
        None,
        &["label", "namespace", "by-python", "py-tenant=t"],
    );
    let made = |ns: &str| {
        poll_until(WAIT, &format!("the objects in {ns}"), || {
            let g = generated(&server, ns);
            g.iter()
                .all(Option::is_some)
                .then(|| g.into_iter().flatten().collect::<Vec<_>>())
        })
    };
    let (rust, py) = (made("by-rust"), made("by-python"));

    let essence = |o: &Value| {
        let mut o = o.clone();
        o.as_object_mut().unwrap().remove("status");
        let m = o["metadata"].as_object_mut().unwrap();
        for volatile in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "namespace",
            "generation",
        ] {
            m.remove(volatile);
        }
        m["ownerReferences"][0]
            .as_object_mut()
            .unwrap()
            .remove("uid");
        m["ownerReferences"][0]
            .as_object_mut()
            .unwrap()
            .remove("name");
        m.remove("labels");
        o
    };
    for (r, p) in rust.iter().zip(&py) {
        assert_eq!(essence(r), essence(p));
        assert_eq!(
            p["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "python-defaults"
        );
    }
    // Neither removes the other's objects, and a no-op apply writes
    // nothing: the objects stay as they are.
    let rv = |objs: &[Value]| {
        objs.iter()
            .map(|o| o["metadata"]["resourceVersion"].clone())
            .collect::<Vec<_>>()
    };
    std::thread::sleep(Duration::from_secs(2));
    let again: Vec<Value> = generated(&server, "by-rust")
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(rv(&rust), rv(&again));
    kubectl_ok(
        &server,
        None,
        &["label", "namespace", "by-python", "py-tenant-"],
    );
    poll_until(WAIT, "the Python controller to remove its objects", || {
        generated(&server, "by-python")
            .iter()
            .all(Option::is_none)
            .then_some(())
    });
}

/// The `widget-status` example: a Widget gets a ConfigMap it owns (with the
/// namespace's watched widget defaults) and a `Ready` condition that
/// `kubectl wait` sees; a spec change flows through; the garbage collector
/// removes the ConfigMap with its Widget.
#[test]
fn widget_status_owns_a_configmap_and_sets_ready() {
    let server = start();
    apply(
        &server,
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}}),
    );
    poll_until(WAIT, "the Widget resource", || {
        kubectl(&server, None, &["get", "widgets"])
            .status
            .success()
            .then_some(())
    });
    service_account(
        &server,
        "widget-status",
        json!([
            rule(&["example.com"], &["widgets"], READ),
            rule(&["example.com"], &["widgets/status"], &["update", "patch"]),
            rule(&[""], &["configmaps"], ALL),
        ]),
    );
    apply(
        &server,
        &json!({"apiVersion": "controllers.wasm-apiserver.io/v1alpha1", "kind": "Controller",
            "metadata": {"name": "widget-status"},
            "spec": {"module": {"file": "widget_status.wasm"},
                "for": {"apiVersion": "example.com/v1", "kind": "Widget"},
                "owns": [{"apiVersion": "v1", "kind": "ConfigMap"}],
                "watches": [{"apiVersion": "v1", "kind": "ConfigMap", "map": "All",
                    "labelSelector": {"matchLabels": {"widget-defaults": "true"}}}],
                "serviceAccountName": "kube-system/widget-status"}}),
    );
    wait_status(&server, "widget-status", "Active");
    apply(
        &server,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default"}, "spec": {"size": 1}}),
    );
    kubectl_ok(
        &server,
        None,
        &[
            "wait",
            "--for=condition=Ready",
            "widget/w1",
            "--timeout=30s",
        ],
    );
    let widget = kubectl_json(&server, None, &["get", "widget", "w1", "-o", "json"]);
    let cm = poll_until(WAIT, "the owned ConfigMap", || {
        get(&server, &["configmap", "w1-widget"])
    });
    assert_eq!(
        cm["metadata"]["ownerReferences"][0]["uid"],
        widget["metadata"]["uid"]
    );
    assert_eq!(cm["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(cm["data"]["spec"], r#"{"size":1}"#);
    assert_eq!(widget["status"]["configMap"], "w1-widget");
    let since = widget["status"]["conditions"][0]["lastTransitionTime"].clone();

    // The watched defaults reach every Widget.
    apply(
        &server,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "widget-defaults", "namespace": "default",
                "labels": {"widget-defaults": "true"}},
            "data": {"color": "blue"}}),
    );
    poll_until(WAIT, "the defaults in the owned ConfigMap", || {
        get(&server, &["configmap", "w1-widget"]).filter(|c| c["data"]["color"] == "blue")
    });
    // A spec change flows through; the condition keeps its transition time.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "widget",
            "w1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":2}}"#,
        ],
    );
    let widget = poll_until(WAIT, "the new generation observed", || {
        let w = kubectl_json(&server, None, &["get", "widget", "w1", "-o", "json"]);
        (w["status"]["conditions"][0]["observedGeneration"] == 2).then_some(w)
    });
    assert_eq!(
        widget["status"]["conditions"][0]["lastTransitionTime"],
        since
    );
    poll_until(WAIT, "the new spec in the ConfigMap", || {
        get(&server, &["configmap", "w1-widget"]).filter(|c| c["data"]["spec"] == r#"{"size":2}"#)
    });
    // The garbage collector removes the ConfigMap with its Widget.
    kubectl_ok(&server, None, &["delete", "widget", "w1"]);
    poll_until(WAIT, "the owned ConfigMap to be collected", || {
        get(&server, &["configmap", "w1-widget"])
            .is_none()
            .then_some(())
    });
}

/// `spec.resyncSeconds` queues every primary object again on its period
/// (controller-runtime's SyncPeriod), with nothing changed; without it
/// (the 10 h default) nothing is reconciled while nothing changes.
#[test]
fn resync_reconciles_every_object_on_its_period() {
    let server = start();
    service_account(&server, "noop", json!([rule(&[""], &["namespaces"], READ)]));
    let noop = |name: &str, resync: Option<u64>| {
        let mut c = json!({
            "apiVersion": "controllers.wasm-apiserver.io/v1alpha1", "kind": "Controller",
            "metadata": {"name": name},
            "spec": {"module": {"file": "noop_controller.wasm"},
                "for": {"apiVersion": "v1", "kind": "Namespace"},
                "serviceAccountName": "kube-system/noop"}});
        if let Some(r) = resync {
            c["spec"]["resyncSeconds"] = json!(r);
        }
        c
    };
    apply(&server, &noop("resyncing", Some(1)));
    apply(&server, &noop("steady", None));
    wait_status(&server, "resyncing", "Active");
    wait_status(&server, "steady", "Active");
    let namespaces = kubectl_json(&server, None, &["get", "namespaces", "-o", "json"])["items"]
        .as_array()
        .unwrap()
        .len() as u64;
    let reconciled = |name: &str| -> u64 {
        let m = server.get("/metrics").expect("metrics").1;
        let prefix = format!(
            "controller_runtime_reconcile_total{{controller=\"{name}\",result=\"success\"}} "
        );
        m.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
            .unwrap_or(0)
    };
    // Both have reconciled every namespace once.
    poll_until(WAIT, "the initial reconciles", || {
        (reconciled("resyncing") >= namespaces && reconciled("steady") >= namespaces).then_some(())
    });
    let (r0, s0) = (reconciled("resyncing"), reconciled("steady"));
    std::thread::sleep(Duration::from_millis(3500));
    let (r1, s1) = (reconciled("resyncing"), reconciled("steady"));
    assert!(
        r1 >= r0 + 2 * namespaces,
        "resync: {r0} -> {r1} for {namespaces} namespaces"
    );
    assert_eq!(s1, s0, "no resync without a period");
}
