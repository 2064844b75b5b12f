//! End-to-end: kubelets' identities (`system:node:<name>` in
//! `system:nodes`, client certificates signed by the cluster CA) against
//! the Node authorizer and the NodeRestriction admission plugin (issue
//! 52): a node reads the Secrets and ConfigMaps of pods bound to it and
//! nothing else, loses them when the pod goes, writes only its own Node and
//! its own pods' status; `--authorization-mode=RBAC` alone leaves nodes
//! with RBAC only; an unknown admission plugin name stops start-up.
//!
//! Node lifecycle (item 5), with timings shortened by flags: a node whose
//! Lease stops is `Unknown` and tainted `unreachable`, its pods are evicted
//! as their tolerations say and marked not ready, and it comes back;
//! `DefaultTolerationSeconds`; the pod garbage collector; `kubectl cordon`,
//! `uncordon` and `drain` (through `pods/eviction`, held by a budget).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use wasm_apiserver_e2e::{
    Server, client_certificate, kubectl_binary, kubectl_ok, kubectl_stdin, poll_until,
    server_binary,
};

const WAIT: Duration = Duration::from_secs(30);

struct Node {
    cert: PathBuf,
    key: PathBuf,
}

/// A client certificate for `system:node:<name>`, signed with the
/// server's CA key, as the cluster's signer would sign a kubelet's CSR.
fn node_identity(server: &Server, name: &str) -> Node {
    let (cert, key) = client_certificate(
        server,
        &format!("/O=system:nodes/CN=system:node:{name}"),
        &format!("node-{name}"),
    );
    Node { cert, key }
}

/// kubectl as `node`, with its certificate and nothing else.
fn as_node(server: &Server, node: &Node, args: &[&str]) -> Output {
    Command::new(kubectl_binary(None))
        .args(["--kubeconfig", "/dev/null", "--server", server.url()])
        .arg("--certificate-authority")
        .arg(server.data_dir().join("pki/ca.crt"))
        .arg("--client-certificate")
        .arg(&node.cert)
        .arg("--client-key")
        .arg(&node.key)
        .arg("--cache-dir")
        .arg(server.kubectl_cache_dir())
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl")
}

/// A merge PATCH as `node`, straight to the path (as a kubelet patches
/// `nodes/status` and `pods/status`, without reading them first, which
/// upstream's node rules do not allow): the status code and body.
fn patch_as(server: &Server, node: &Node, path: &str, body: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-X", "PATCH", "-w", "\n%{http_code}"])
        .arg("--cacert")
        .arg(server.data_dir().join("pki/ca.crt"))
        .arg("--cert")
        .arg(&node.cert)
        .arg("--key")
        .arg(&node.key)
        .args(["-H", "Content-Type: application/merge-patch+json"])
        .args(["--data", body])
        .arg(format!("{}{path}", server.url()))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn patch_ok(server: &Server, node: &Node, path: &str, body: &str) {
    let (code, text) = patch_as(server, node, path, body);
    assert_eq!(code, 200, "PATCH {path}: {text}");
}

fn patch_forbidden(server: &Server, node: &Node, path: &str, body: &str, why: &str) {
    let (code, text) = patch_as(server, node, path, body);
    assert_eq!(code, 403, "PATCH {path}: {text}");
    assert!(
        text.contains(why),
        "PATCH {path}: {text} does not say {why:?}"
    );
}

fn ok(server: &Server, node: &Node, args: &[&str]) -> String {
    let out = as_node(server, node, args);
    assert!(
        out.status.success(),
        "{args:?} should succeed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts a 403 whose message contains `why`.
fn forbidden(server: &Server, node: &Node, args: &[&str], why: &str) {
    let out = as_node(server, node, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should be refused");
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{args:?}: not a 403: {err}"
    );
    assert!(err.contains(why), "{args:?}: {err:?} does not say {why:?}");
}

fn apply(server: &Server, manifest: &str) {
    let out = kubectl_stdin(server, None, &["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn node_manifest(name: &str) -> String {
    format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{{\"name\":\"{name}\",\
         \"labels\":{{\"kubernetes.io/hostname\":\"{name}\"}}}}}}"
    )
}

fn register(server: &Server, node: &Node, name: &str) {
    let path = server.data_dir().join(format!("node-{name}.json"));
    std::fs::write(&path, node_manifest(name)).unwrap();
    ok(server, node, &["create", "-f", path.to_str().unwrap()]);
}

/// Secrets s1, s2, sb and ConfigMap c1; pod `pa` on node a mounts s1 and
/// c1, pod `pb` on node b mounts sb.
const WORKLOAD: &str = "
apiVersion: v1
kind: Secret
metadata: {name: s1, namespace: default}
stringData: {k: v}
---
apiVersion: v1
kind: Secret
metadata: {name: s2, namespace: default}
stringData: {k: v}
---
apiVersion: v1
kind: Secret
metadata: {name: sb, namespace: default}
stringData: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c1, namespace: default}
data: {k: v}
---
apiVersion: v1
kind: Pod
metadata: {name: pa, namespace: default}
spec:
  nodeName: a
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: s, secret: {secretName: s1}}
  - {name: c, configMap: {name: c1}}
---
apiVersion: v1
kind: Pod
metadata: {name: pb, namespace: default}
spec:
  nodeName: b
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: s, secret: {secretName: sb}}
";

fn setup(server: &Server) -> (Node, Node) {
    let a = node_identity(server, "a");
    let b = node_identity(server, "b");
    register(server, &a, "a");
    register(server, &b, "b");
    apply(server, WORKLOAD);
    (a, b)
}

fn can_get(server: &Server, node: &Node, what: &str, name: &str) -> bool {
    as_node(server, node, &["get", what, name, "-n", "default"])
        .status
        .success()
}

#[test]
fn a_node_reads_only_what_its_pods_reference_and_writes_only_its_own() {
    let server = Server::start();
    let (a, b) = setup(&server);

    // The graph follows the pods' watch: poll until a's pod is in it.
    poll_until(WAIT, "node a to read s1", || {
        can_get(&server, &a, "secret", "s1").then_some(())
    });
    ok(&server, &a, &["get", "configmap", "c1", "-n", "default"]);
    ok(&server, &a, &["get", "pod", "pa", "-n", "default"]);
    poll_until(WAIT, "node b to read sb", || {
        can_get(&server, &b, "secret", "sb").then_some(())
    });
    let no_rel = "no relationship found between node 'a' and this object";
    forbidden(
        &server,
        &a,
        &["get", "secret", "s2", "-n", "default"],
        no_rel,
    );
    forbidden(
        &server,
        &a,
        &["get", "secret", "sb", "-n", "default"],
        no_rel,
    );
    forbidden(
        &server,
        &b,
        &["get", "secret", "s1", "-n", "default"],
        "node 'b'",
    );
    forbidden(
        &server,
        &a,
        &["get", "secrets", "-n", "default"],
        "cannot list resource \"secrets\"",
    );
    forbidden(
        &server,
        &a,
        &["get", "secrets", "-A"],
        "cannot list resource \"secrets\"",
    );
    forbidden(
        &server,
        &a,
        &["delete", "secret", "s1", "-n", "default"],
        "cannot delete resource",
    );

    // Its own Node: status and ordinary labels; not b's, not restricted labels.
    let ready = r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    patch_ok(&server, &a, "/api/v1/nodes/a/status", ready);
    let conditions = kubectl_ok(
        &server,
        None,
        &[
            "get",
            "node",
            "a",
            "-o",
            "jsonpath={.status.conditions[0].reason}",
        ],
    );
    assert_eq!(conditions, "KubeletReady");
    patch_forbidden(
        &server,
        &a,
        "/api/v1/nodes/b/status",
        ready,
        "node \\\"a\\\" is not allowed to modify node \\\"b\\\"",
    );
    forbidden(
        &server,
        &a,
        &["label", "node", "b", "x=y"],
        "node \"a\" is not allowed to modify node \"b\"",
    );
    forbidden(
        &server,
        &a,
        &["delete", "node", "b"],
        "cannot delete resource \"nodes\"",
    );
    ok(&server, &a, &["label", "node", "a", "example.com/x=y"]);
    forbidden(
        &server,
        &a,
        &["label", "node", "a", "node-restriction.kubernetes.io/x=y"],
        "is not allowed to modify labels: node-restriction.kubernetes.io/x",
    );

    // Pods' status: its own only; mirror pods only, bound to itself.
    let running = r#"{"status":{"phase":"Running"}}"#;
    patch_ok(
        &server,
        &a,
        "/api/v1/namespaces/default/pods/pa/status",
        running,
    );
    patch_forbidden(
        &server,
        &a,
        "/api/v1/namespaces/default/pods/pb/status",
        running,
        "node \\\"a\\\" can only update pod status for pods with spec.nodeName set to itself",
    );
    forbidden(
        &server,
        &a,
        &["delete", "pod", "pb", "-n", "default"],
        "node \"a\" can only delete pods with spec.nodeName set to itself",
    );
    let pod = server.data_dir().join("plain-pod.json");
    std::fs::write(
        &pod,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"plain","namespace":"default"},"spec":{"nodeName":"a","containers":[{"name":"c","image":"busybox"}]}}"#,
    )
    .unwrap();
    forbidden(
        &server,
        &a,
        &["create", "-f", pod.to_str().unwrap()],
        "node \"a\" can only create mirror pods",
    );

    // Node leases: its own name in kube-node-lease only.
    let lease = |name: &str| {
        let p = server.data_dir().join(format!("lease-{name}.json"));
        std::fs::write(
            &p,
            format!(r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{name}","namespace":"kube-node-lease"}},"spec":{{"holderIdentity":"{name}"}}}}"#),
        )
        .unwrap();
        p
    };
    ok(&server, &a, &["create", "-f", lease("a").to_str().unwrap()]);
    forbidden(
        &server,
        &a,
        &["create", "-f", lease("b").to_str().unwrap()],
        "can only access node lease with the same name as the requesting node",
    );

    // The pod goes: a loses its secret and configmap.
    kubectl_ok(
        &server,
        None,
        &[
            "delete",
            "pod",
            "pa",
            "-n",
            "default",
            "--grace-period=0",
            "--force",
        ],
    );
    poll_until(WAIT, "node a to lose s1", || {
        (!can_get(&server, &a, "secret", "s1")).then_some(())
    });
    forbidden(
        &server,
        &a,
        &["get", "configmap", "c1", "-n", "default"],
        no_rel,
    );
    // b is untouched.
    ok(&server, &b, &["get", "secret", "sb", "-n", "default"]);
}

#[test]
fn rbac_alone_leaves_nodes_to_rbac() {
    let server = Server::start_with_args(&["--authorization-mode=RBAC"]);
    // Nodes cannot even register: nothing grants them anything.
    let a = node_identity(&server, "a");
    let path = server.data_dir().join("node-a.json");
    std::fs::write(&path, node_manifest("a")).unwrap();
    forbidden(
        &server,
        &a,
        &["create", "-f", path.to_str().unwrap()],
        "cannot create resource \"nodes\"",
    );
    kubectl_ok(&server, None, &["create", "-f", path.to_str().unwrap()]);
    apply(&server, WORKLOAD);
    // Its pod's secret stays out of reach (no graph), after the watch had
    // ample time.
    std::thread::sleep(Duration::from_secs(1));
    forbidden(
        &server,
        &a,
        &["get", "secret", "s1", "-n", "default"],
        "cannot get resource \"secrets\"",
    );
}

#[test]
fn an_unknown_admission_plugin_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(server_binary())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--bind-address", "127.0.0.1", "--secure-port", "0"])
        .args([
            "--enable-admission-plugins",
            "NodeRestriction,PodNodeSelectorX",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run the server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started: {err}");
    assert!(
        err.contains("--enable-admission-plugins: unknown admission plugin \"PodNodeSelectorX\""),
        "{err}"
    );
    assert!(
        err.contains("known plugins: NamespaceLifecycle, ServiceAccount, NodeRestriction"),
        "{err}"
    );
    let out = Command::new(server_binary())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--bind-address", "127.0.0.1", "--secure-port", "0"])
        .args(["--disable-admission-plugins", "NodeRestriction"])
        .args(["--enable-admission-plugins", "NodeRestriction"])
        .stdin(Stdio::null())
        .output()
        .expect("run the server");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is both enabled and disabled"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// --- Node lifecycle (issue 52, item 5) ---

/// Short timings, so a node goes stale in seconds: the node lifecycle
/// controller looks every second, a node unheard of for 3 s is Unknown;
/// the pod garbage collector looks every second, a node missing for 2 s
/// has its pods deleted.
const FAST: &[&str] = &[
    "--node-monitor-period=1s",
    "--node-monitor-grace-period=3s",
    "--node-startup-grace-period=3s",
    "--pod-gc-period=1s",
    "--pod-gc-orphan-quarantine=2s",
];

fn admin_apply(server: &Server, manifest: &str) {
    apply(server, manifest);
}

fn get_json(server: &Server, args: &[&str]) -> Option<serde_json::Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = wasm_apiserver_e2e::kubectl(server, None, &all);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("json"))
}

fn micro_now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Posts the node's `Ready` condition as its kubelet would (as the admin,
/// through `nodes/status`).
fn post_ready(server: &Server, node: &str, status: &str) {
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let patch = format!(
        r#"{{"status":{{"conditions":[{{"type":"Ready","status":"{status}","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":"{now}","lastTransitionTime":"{now}"}}]}}}}"#
    );
    kubectl_ok(
        server,
        None,
        &[
            "patch",
            "node",
            node,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ],
    );
}

/// Renews `node`'s Lease once, as its kubelet would: a merge patch of
/// `renewTime` through kube-rs, not a kubectl process (which under a
/// loaded machine can take longer than the grace period to start).
fn renew_lease(server: &Server, node: &str) {
    LeaseClient::new(server).renew(node);
}

/// One kube-rs client on a runtime of its own, for lease renewals from
/// synchronous tests.
struct LeaseClient {
    runtime: tokio::runtime::Runtime,
    leases: kube::Api<k8s_openapi::api::coordination::v1::Lease>,
}

impl LeaseClient {
    fn new(server: &Server) -> LeaseClient {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = runtime.block_on(async { wasm_apiserver_e2e::kube_client(server) });
        LeaseClient {
            runtime,
            leases: kube::Api::namespaced(client, "kube-node-lease"),
        }
    }

    fn renew(&self, node: &str) {
        self.try_renew(node)
            .unwrap_or_else(|e| panic!("renew {node}'s lease: {e}"));
    }

    fn try_renew(&self, node: &str) -> Result<(), kube::Error> {
        let patch = serde_json::json!({"spec": {"renewTime": micro_now()}});
        self.runtime
            .block_on(self.leases.patch(
                node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            ))
            .map(drop)
    }
}

fn ready_condition(server: &Server, node: &str) -> serde_json::Value {
    let n = get_json(server, &["node", node]).expect("node");
    n["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or_default()
}

fn has_taint(server: &Server, node: &str, key: &str, effect: &str) -> bool {
    get_json(server, &["node", node]).is_some_and(|n| {
        n["spec"]["taints"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["key"] == key && t["effect"] == effect))
    })
}

fn pod_exists(server: &Server, name: &str) -> bool {
    get_json(server, &["pod", name, "-n", "default"]).is_some()
}

/// Evicted: gone, or deleted gracefully and waiting for a kubelet (there
/// is none here) to finish.
fn evicted(server: &Server, name: &str) -> bool {
    get_json(server, &["pod", name, "-n", "default"])
        .is_none_or(|p| p["metadata"]["deletionTimestamp"].is_string())
}

fn lifecycle_node(server: &Server, name: &str) {
    admin_apply(server, &node_manifest(name));
    admin_apply(
        server,
        &format!(
            r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{name}","namespace":"kube-node-lease"}},"spec":{{"holderIdentity":"{name}","leaseDurationSeconds":40,"renewTime":"{}"}}}}"#,
            micro_now()
        ),
    );
    post_ready(server, name, "True");
}

/// Renews `node`'s Lease every 700 ms until dropped, as its kubelet would.
struct KeepAlive {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KeepAlive {
    fn start(server: &Server, node: &str) -> KeepAlive {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, node) = (stop.clone(), node.to_string());
        let client = LeaseClient::new(server);
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                // A failed renewal is what a kubelet losing the server
                // would do: the node goes Unknown and the test says so.
                let _ = client.try_renew(&node);
                std::thread::sleep(Duration::from_millis(700));
            }
        });
        KeepAlive {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pod_on(name: &str, node: &str, tolerations: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"nodeName":"{node}","containers":[{{"name":"c","image":"busybox"}}],"tolerations":{tolerations}}}}}"#
    )
}

#[test]
fn a_node_whose_lease_stops_goes_unknown_its_pods_are_evicted_and_it_comes_back() {
    // Without DefaultTolerationSeconds, so that a pod can lack a toleration
    // of `unreachable`.
    // A grace of 6 s rather than FAST's 3 s: on a loaded machine the
    // controller may see a renewal a few seconds late, and that alone must
    // not make the node Unknown here.
    let mut args: Vec<&str> = FAST
        .iter()
        .map(|a| {
            if a.starts_with("--node-monitor-grace-period=") {
                "--node-monitor-grace-period=6s"
            } else {
                a
            }
        })
        .collect();
    args.push("--disable-admission-plugins=DefaultTolerationSeconds");
    let server = Server::start_with_args(&args);
    lifecycle_node(&server, "n1");
    // A second node that stays healthy: were every node unreachable, the
    // controller would take it for the control plane's fault and evict
    // nothing (checked at the end).
    lifecycle_node(&server, "n2");
    let n2 = KeepAlive::start(&server, "n2");
    let unreachable = "node.kubernetes.io/unreachable";
    for (name, tolerations) in [
        ("bare", "[]".to_string()),
        (
            "patient",
            format!(
                r#"[{{"key":"{unreachable}","operator":"Exists","effect":"NoExecute","tolerationSeconds":8}}]"#
            ),
        ),
        (
            "forever",
            format!(r#"[{{"key":"{unreachable}","operator":"Exists","effect":"NoExecute"}}]"#),
        ),
    ] {
        admin_apply(&server, &pod_on(name, "n1", &tolerations));
        // Running and ready, as its kubelet would say.
        kubectl_ok(
            &server,
            None,
            &[
                "patch",
                "pod",
                name,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#,
            ],
        );
    }
    // Ready, and the not-ready taint new nodes get (TaintNodesByCondition)
    // is gone once the node says it is ready.
    poll_until(WAIT, "n1's not-ready taint to go", || {
        (!has_taint(&server, "n1", "node.kubernetes.io/not-ready", "NoSchedule")).then_some(())
    });
    // The Lease alone keeps the node alive: its Ready heartbeat never moves
    // again, yet for twice the grace period it stays Ready.
    let until = std::time::Instant::now() + Duration::from_secs(13);
    while std::time::Instant::now() < until {
        renew_lease(&server, "n1");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(ready_condition(&server, "n1")["status"], "True");
    assert!(pod_exists(&server, "bare"));

    // The Lease stops: Unknown, with upstream's reason and message.
    let ready = poll_until(WAIT, "n1 to be Unknown", || {
        let c = ready_condition(&server, "n1");
        (c["status"] == "Unknown").then_some(c)
    });
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    let listed = kubectl_ok(&server, None, &["get", "node", "n1"]);
    assert!(listed.contains("NotReady"), "{listed}");
    poll_until(WAIT, "the unreachable NoExecute taint", || {
        has_taint(&server, "n1", unreachable, "NoExecute").then_some(())
    });
    let tainted = std::time::Instant::now();
    assert!(has_taint(&server, "n1", unreachable, "NoSchedule"));
    // The pod that does not tolerate it goes at once.
    poll_until(Duration::from_secs(5), "bare to be evicted", || {
        evicted(&server, "bare").then_some(())
    });
    // The others were marked not ready (MarkPodsNotReady).
    let forever = get_json(&server, &["pod", "forever", "-n", "default"]).unwrap();
    let pod_ready = forever["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(pod_ready["status"], "False", "{forever}");
    // The patient one after its 8 s.
    assert!(
        !evicted(&server, "patient"),
        "evicted before its toleration"
    );
    poll_until(WAIT, "patient to be evicted", || {
        evicted(&server, "patient").then_some(())
    });
    let waited = tainted.elapsed();
    assert!(
        waited >= Duration::from_secs(6),
        "patient went {waited:?} after the taint, before its 8 s"
    );
    // Tolerated forever: stays.
    assert!(pod_exists(&server, "forever"));
    let events = get_json(&server, &["events", "-n", "default"]).unwrap();
    let said = |reason: &str, text: &str| {
        events["items"].as_array().unwrap().iter().any(|e| {
            e["reason"] == reason && e["message"].as_str().is_some_and(|m| m.contains(text))
        })
    };
    assert!(
        said(
            "TaintManagerEviction",
            "Marking for deletion Pod default/bare"
        ),
        "{events}"
    );
    assert!(said(
        "TaintManagerEviction",
        "Marking for deletion Pod default/patient"
    ));
    assert!(said("NodeNotReady", "Node n1 status is now: NodeNotReady"));
    assert!(said("NodeNotReady", "Node is not ready"));

    // The kubelet is back: Ready, and the taints go.
    renew_lease(&server, "n1");
    post_ready(&server, "n1", "True");
    poll_until(WAIT, "n1 to be Ready and untainted", || {
        let ready = ready_condition(&server, "n1")["status"] == "True";
        (ready
            && !has_taint(&server, "n1", unreachable, "NoExecute")
            && !has_taint(&server, "n1", unreachable, "NoSchedule"))
        .then_some(())
    });
    assert!(pod_exists(&server, "forever"));

    // Every node goes silent at once: when no node is ready, no NoExecute
    // taint stays and nothing is evicted (upstream's full disruption
    // mode). The pod tolerates 6 s, so the node that goes stale first,
    // tainted while the other is still ready, does not evict it before
    // the second goes too.
    let n1 = KeepAlive::start(&server, "n1");
    admin_apply(
        &server,
        &pod_on(
            "bare2",
            "n1",
            &format!(
                r#"[{{"key":"{unreachable}","operator":"Exists","effect":"NoExecute","tolerationSeconds":6}}]"#
            ),
        ),
    );
    drop((n1, n2));
    poll_until(WAIT, "both nodes to be Unknown", || {
        (ready_condition(&server, "n1")["status"] == "Unknown"
            && ready_condition(&server, "n2")["status"] == "Unknown")
            .then_some(())
    });
    poll_until(WAIT, "the NoExecute taints to go", || {
        (!has_taint(&server, "n1", unreachable, "NoExecute")
            && !has_taint(&server, "n2", unreachable, "NoExecute"))
        .then_some(())
    });
    std::thread::sleep(Duration::from_secs(7));
    assert!(pod_exists(&server, "bare2"), "evicted in full disruption");
}

#[test]
fn default_toleration_seconds_and_upstream_plugin_names() {
    // kubeadm's list, with plugins this server does not implement.
    let server = Server::start_with_args(&[
        "--enable-admission-plugins=NodeRestriction,LimitRanger,PodSecurity,ResourceQuota,DefaultTolerationSeconds",
        "--default-unreachable-toleration-seconds=120",
    ]);
    let log = server.log();
    assert!(
        log.contains("this server does not implement") && log.contains("LimitRanger"),
        "no warning about the plugins not implemented: {log}"
    );
    admin_apply(&server, &pod_on("plain", "", "[]"));
    let pod = get_json(&server, &["pod", "plain", "-n", "default"]).unwrap();
    assert_eq!(
        pod["spec"]["tolerations"],
        serde_json::json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 120},
        ])
    );
    // Its own toleration of unreachable is kept; only not-ready's is added.
    admin_apply(
        &server,
        &pod_on(
            "own",
            "",
            r#"[{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":7}]"#,
        ),
    );
    let pod = get_json(&server, &["pod", "own", "-n", "default"]).unwrap();
    let t = pod["spec"]["tolerations"].as_array().unwrap();
    assert_eq!(t.len(), 2, "{t:?}");
    assert_eq!(t[0]["tolerationSeconds"], 7);
    assert_eq!(t[1]["key"], "node.kubernetes.io/not-ready");
    // A new node is tainted not-ready until it says it is ready
    // (TaintNodesByCondition).
    // (A dry run: the node lifecycle controller would take the taint away
    // from a node without conditions at once, as upstream's does; real
    // kubelets register with their conditions.)
    let path = server.data_dir().join("fresh-node.json");
    std::fs::write(&path, node_manifest("fresh")).unwrap();
    let fresh: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &server,
        None,
        &[
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            path.to_str().unwrap(),
        ],
    ))
    .unwrap();
    assert_eq!(
        fresh["spec"]["taints"],
        serde_json::json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    );
    // Typos still stop start-up.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(server_binary())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--bind-address", "127.0.0.1", "--secure-port", "0"])
        .args(["--enable-admission-plugins", "LimitRangr"])
        .stdin(Stdio::null())
        .output()
        .expect("run the server");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown admission plugin \"LimitRangr\"")
    );
}

#[test]
fn pod_gc_deletes_pods_of_deleted_nodes_and_old_terminated_pods() {
    let mut args = FAST.to_vec();
    args.push("--terminated-pod-gc-threshold=2");
    let server = Server::start_with_args(&args);
    lifecycle_node(&server, "gone");
    lifecycle_node(&server, "stays");
    admin_apply(&server, &pod_on("on-gone", "gone", "[]"));
    admin_apply(&server, &pod_on("on-stays", "stays", "[]"));
    for name in ["done-1", "done-2", "done-3", "done-4"] {
        admin_apply(&server, &pod_on(name, "", "[]"));
        kubectl_ok(
            &server,
            None,
            &[
                "patch",
                "pod",
                name,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"phase":"Succeeded"}}"#,
            ],
        );
    }
    // Beyond the threshold of 2, the oldest go.
    poll_until(WAIT, "the two oldest terminated pods to go", || {
        (!pod_exists(&server, "done-1") && !pod_exists(&server, "done-2")).then_some(())
    });
    assert!(pod_exists(&server, "done-3") && pod_exists(&server, "done-4"));
    kubectl_ok(&server, None, &["delete", "node", "gone"]);
    let deleted = std::time::Instant::now();
    poll_until(WAIT, "the pod of the deleted node to go", || {
        (!pod_exists(&server, "on-gone")).then_some(())
    });
    assert!(
        deleted.elapsed() >= Duration::from_secs(1),
        "deleted before the quarantine"
    );
    assert!(pod_exists(&server, "on-stays"));
}

#[test]
fn cordon_uncordon_and_drain_with_and_without_a_disruption_budget() {
    let server = Server::start_with_args(FAST);
    lifecycle_node(&server, "n1");
    // Keep n1 alive for the whole test.
    let _alive = KeepAlive::start(&server, "n1");
    kubectl_ok(&server, None, &["cordon", "n1"]);
    let listed = kubectl_ok(&server, None, &["get", "node", "n1"]);
    assert!(listed.contains("SchedulingDisabled"), "{listed}");
    let taint = "node.kubernetes.io/unschedulable";
    poll_until(WAIT, "the unschedulable taint", || {
        has_taint(&server, "n1", taint, "NoSchedule").then_some(())
    });
    kubectl_ok(&server, None, &["uncordon", "n1"]);
    poll_until(WAIT, "the unschedulable taint to go", || {
        (!has_taint(&server, "n1", taint, "NoSchedule")).then_some(())
    });

    // A DaemonSet's pod, a pod with an emptyDir, a bare pod, and a pod a
    // budget guards.
    admin_apply(
        &server,
        r#"{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"ds","namespace":"default"},"spec":{"selector":{"matchLabels":{"app":"ds"}},"template":{"metadata":{"labels":{"app":"ds"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}"#,
    );
    let ds_uid = kubectl_ok(
        &server,
        None,
        &["get", "daemonset", "ds", "-o", "jsonpath={.metadata.uid}"],
    );
    admin_apply(
        &server,
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"ds-n1","namespace":"default","labels":{{"app":"ds"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"DaemonSet","name":"ds","uid":"{ds_uid}","controller":true}}]}},"spec":{{"nodeName":"n1","containers":[{{"name":"c","image":"busybox"}}]}}}}"#
        ),
    );
    admin_apply(
        &server,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"scratch","namespace":"default"},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"busybox"}],"volumes":[{"name":"tmp","emptyDir":{}}]}}"#,
    );
    admin_apply(&server, &pod_on("bare", "n1", "[]"));
    admin_apply(
        &server,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"guarded","namespace":"default","labels":{"app":"guarded"}},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"busybox"}]}}"#,
    );
    admin_apply(
        &server,
        r#"{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"keep-one","namespace":"default"},"spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"guarded"}}}}"#,
    );
    // The guarded pod runs (a pending pod is evicted whatever its budget
    // says, as upstream), and the disruption controller has counted it.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "pod",
            "guarded",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#,
        ],
    );
    poll_until(WAIT, "the budget's status", || {
        let b = get_json(&server, &["pdb", "keep-one", "-n", "default"])?;
        (b["status"]["currentHealthy"] == 1
            && b["status"]["observedGeneration"] == b["metadata"]["generation"])
            .then_some(())
    });
    // No kubelet runs here to finish a graceful deletion: drain forces it.
    let drain = [
        "drain",
        "n1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--force",
        "--grace-period=0",
        "--timeout=8s",
    ];
    let out = wasm_apiserver_e2e::kubectl(&server, None, &drain);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "drain went through the budget: {err}"
    );
    assert!(err.contains("disruption budget"), "{err}");
    assert!(pod_exists(&server, "guarded"));
    assert!(!pod_exists(&server, "bare") && !pod_exists(&server, "scratch"));
    assert!(pod_exists(&server, "ds-n1"));
    let listed = kubectl_ok(&server, None, &["get", "node", "n1"]);
    assert!(listed.contains("SchedulingDisabled"), "{listed}");
    // Without the budget, the drain completes; the DaemonSet's pod stays.
    kubectl_ok(&server, None, &["delete", "pdb", "keep-one"]);
    let out = kubectl_ok(&server, None, &drain);
    assert!(out.contains("drained"), "{out}");
    assert!(!pod_exists(&server, "guarded"));
    assert!(pod_exists(&server, "ds-n1"));
}
