//! End-to-end: kubelets' identities (`system:node:<name>` in
//! `system:nodes`, client certificates signed by the cluster CA) against
//! the Node authorizer and the NodeRestriction admission plugin (issue
//! 52): a node reads the Secrets and ConfigMaps of pods bound to it and
//! nothing else, loses them when the pod goes, writes only its own Node and
//! its own pods' status; `--authorization-mode=RBAC` alone leaves nodes
//! with RBAC only; an unknown admission plugin name stops start-up.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use wasm_apiserver_e2e::{
    Server, kubectl_binary, kubectl_ok, kubectl_stdin, poll_until, server_binary,
};

const WAIT: Duration = Duration::from_secs(30);

struct Node {
    cert: PathBuf,
    key: PathBuf,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A client certificate for `system:node:<name>`, signed with the
/// server's CA key, as the cluster's signer would sign a kubelet's CSR.
fn node_identity(server: &Server, name: &str) -> Node {
    let pki = server.data_dir().join("pki");
    let dir = server.data_dir().join(format!("node-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (key, csr, cert, ext) = (
        dir.join("node.key"),
        dir.join("node.csr"),
        dir.join("node.crt"),
        dir.join("ext.cnf"),
    );
    run(Command::new("openssl")
        .args(["req", "-new", "-nodes", "-newkey", "ec"])
        .args(["-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-subj", &format!("/O=system:nodes/CN=system:node:{name}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&csr));
    std::fs::write(
        &ext,
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "1", "-in"])
        .arg(&csr)
        .arg("-CA")
        .arg(pki.join("ca.crt"))
        .arg("-CAkey")
        .arg(pki.join("ca.key"))
        .arg("-CAcreateserial")
        .arg("-extfile")
        .arg(&ext)
        .arg("-out")
        .arg(&cert));
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
