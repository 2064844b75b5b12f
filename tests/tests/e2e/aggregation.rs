//! The aggregation layer: a real extension API server (this package's
//! `sample-apiserver`, its own process with its own TLS) registered with an
//! APIService, driven through this server with kubectl and curl: discovery,
//! explain, create/get/list/watch through the proxy, a 404 `Status` passed
//! through, 403 before the extension sees anything, the front proxy's
//! identity headers and the request-header authenticator, availability
//! going and coming back with the extension, and bad backends (wrong CA,
//! hanging, garbage discovery) that never stall the rest of the server.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use wasm_apiserver_e2e::{
    KubectlWatch, Server, expect_success, kubectl, kubectl_json, kubectl_ok, kubectl_stdin,
    kubectl_with_token, poll_until,
};

const APISERVICE: &str = "v1alpha1.wardle.example.com";
const LIMITED_TOKEN: &str = "limited-token-0123456789";

/// A running `sample-apiserver`; killed on drop.
struct Sample {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Sample {
    /// Starts the extension on `port` (0: any) in `dir` (its certificates
    /// and request log stay there across restarts).
    fn start(server: &Server, dir: &Path, port: u16, mode: &str) -> Sample {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sample-apiserver"))
            .arg("--secure-port")
            .arg(port.to_string())
            .arg("--cert-dir")
            .arg(dir.join("certs"))
            .args(["--tls-sni", "api.wardle.svc"])
            .arg("--kubeconfig")
            .arg(server.kubeconfig_path())
            .arg("--request-log")
            .arg(dir.join("requests.log"))
            .args(["--mode", mode])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sample-apiserver");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let _ = tx.send(addr.to_string());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("sample-apiserver listening");
        let port = addr.rsplit_once(':').unwrap().1.parse().unwrap();
        Sample {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    fn ca_bundle(&self) -> String {
        let pem = std::fs::read(self.dir.join("certs/ca.crt")).expect("ca.crt");
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    fn requests(&self) -> String {
        std::fs::read_to_string(self.dir.join("requests.log")).unwrap_or_default()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sample {
    fn drop(&mut self) {
        self.stop();
    }
}

fn apply(server: &Server, obj: &Value) {
    let args = ["apply", "-f", "-"];
    expect_success(
        &kubectl_stdin(server, None, &args, &obj.to_string()),
        None,
        &args,
    );
}

/// The Service `wardle/api` (no selector: its EndpointSlice is written by
/// hand, as for a server outside the cluster) pointing at `port`.
fn register(server: &Server, port: u16, ca_bundle: &str) {
    apply(
        server,
        &json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "wardle"}}),
    );
    apply(
        server,
        &json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "api", "namespace": "wardle"},
        "spec": {"ports": [{"port": 443, "targetPort": port}]}}),
    );
    point_at(server, port);
    apply(
        server,
        &json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {"group": "wardle.example.com", "version": "v1alpha1",
            "service": {"namespace": "wardle", "name": "api", "port": 443},
            "caBundle": ca_bundle, "groupPriorityMinimum": 1000, "versionPriority": 15}}),
    );
}

fn point_at(server: &Server, port: u16) {
    apply(
        server,
        &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "api-1", "namespace": "wardle",
            "labels": {"kubernetes.io/service-name": "api"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        "ports": [{"port": port, "protocol": "TCP"}]}),
    );
}

/// The APIService's `Available` condition: `(status, reason, message)`.
fn available(server: &Server) -> (String, String, String) {
    let obj = kubectl_json(server, None, &["get", "apiservice", APISERVICE]);
    let c = obj["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
        .cloned()
        .unwrap_or(Value::Null);
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

fn wait_available(server: &Server, want: &str, reason: &str) -> String {
    poll_until(
        Duration::from_secs(60),
        &format!("{APISERVICE} Available={want} ({reason})"),
        || {
            let (status, r, message) = available(server);
            (status == want && r == reason).then_some(message)
        },
    )
}

/// `curl` against the server with extra headers; `cert` is a client
/// certificate and key from the server's `pki/`, else the bearer token.
fn curl(server: &Server, cert: Option<&str>, token: Option<&str>, args: &[&str]) -> Value {
    let pki = server.data_dir().join("pki");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "--cacert"])
        .arg(pki.join("ca.crt"));
    if let Some(name) = cert {
        cmd.arg("--cert")
            .arg(pki.join(format!("{name}.crt")))
            .arg("--key")
            .arg(pki.join(format!("{name}.key")));
    }
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd.args(args).output().expect("run curl");
    let body = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"))
}

fn token_file(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.csv");
    std::fs::write(
        &path,
        format!("{LIMITED_TOKEN},limited,uid-limited,\"staff\"\n"),
    )
    .unwrap();
    path
}

#[test]
fn an_extension_api_server_is_served_through_the_aggregator() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = token_file(dir.path());
    let server = Server::start_with_args(&["--token-auth-file", tokens.to_str().unwrap()]);

    // What extension servers read: the client and front-proxy CAs and the
    // header names, as upstream writes them.
    let cm = poll_until(
        Duration::from_secs(30),
        "extension-apiserver-authentication",
        || {
            let out = kubectl(
                &server,
                None,
                &[
                    "get",
                    "configmap",
                    "-n",
                    "kube-system",
                    "extension-apiserver-authentication",
                    "-o",
                    "json",
                ],
            );
            out.status
                .success()
                .then(|| serde_json::from_slice::<Value>(&out.stdout).unwrap())
        },
    );
    let data = &cm["data"];
    assert!(
        data["client-ca-file"]
            .as_str()
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    assert!(
        data["requestheader-client-ca-file"]
            .as_str()
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );
    let reader = kubectl_json(
        &server,
        None,
        &[
            "get",
            "role",
            "-n",
            "kube-system",
            "extension-apiserver-authentication-reader",
        ],
    );
    assert_eq!(
        reader["rules"][0]["resourceNames"][0],
        "extension-apiserver-authentication"
    );

    let mut sample = Sample::start(&server, dir.path(), 0, "normal");
    register(&server, sample.port, &sample.ca_bundle());
    let message = wait_available(&server, "True", "Passed");
    assert_eq!(message, "all checks passed");
    let (_, metrics) = server.get("/metrics").unwrap();
    assert!(
        metrics.contains(&format!(
            "aggregator_unavailable_apiservice{{name=\"{APISERVICE}\"}} 0"
        )),
        "{metrics}"
    );

    // Discovery: legacy, aggregated (kubectl api-resources) and OpenAPI v3
    // (kubectl explain).
    let (status, groups) = server.get("/apis").unwrap();
    assert_eq!(status, 200);
    assert!(
        groups.contains("\"wardle.example.com/v1alpha1\""),
        "{groups}"
    );
    let (status, group) = server.get("/apis/wardle.example.com").unwrap();
    assert_eq!(status, 200, "{group}");
    let resources = kubectl_ok(
        &server,
        None,
        &["api-resources", "--api-group=wardle.example.com"],
    );
    assert!(
        resources.contains("flunders") && resources.contains("Flunder"),
        "{resources}"
    );
    let explained = kubectl_ok(&server, None, &["explain", "flunders.spec"]);
    assert!(explained.contains("reference"), "{explained}");

    // Create, get, list, watch: through the proxy.
    let mut watch = KubectlWatch::spawn(
        &server,
        None,
        &[
            "get",
            "flunders.wardle.example.com",
            "-n",
            "default",
            "-w",
            "-o",
            "json",
        ],
    );
    apply(
        &server,
        &json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": "one", "namespace": "default"}, "spec": {"reference": "x"}}),
    );
    let got = kubectl_json(&server, None, &["get", "flunder", "one", "-n", "default"]);
    assert_eq!(got["spec"]["reference"], "x");
    let listed = kubectl_ok(&server, None, &["get", "flunders", "-n", "default"]);
    assert!(listed.contains("one"), "{listed}");
    watch.wait_for_json(Duration::from_secs(30), "the watched flunder", |d| {
        d["metadata"]["name"] == "one"
    });

    // kube-rs: discovery, list, get and a watch event, through the proxy.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use futures::{StreamExt, TryStreamExt};
        use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
        let client = wasm_apiserver_e2e::kube_client(&server);
        let discovery = kube::Discovery::new(client.clone())
            .filter(&["wardle.example.com"])
            .run()
            .await
            .expect("kube-rs discovery");
        let (ar, _) = discovery
            .resolve_gvk(&kube::core::GroupVersionKind::gvk(
                "wardle.example.com",
                "v1alpha1",
                "Flunder",
            ))
            .expect("Flunder discovered");
        let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
        let listed = api.list(&ListParams::default()).await.expect("kube-rs list");
        assert!(listed.items.iter().any(|o| o.metadata.name.as_deref() == Some("one")));
        let one = api.get("one").await.expect("kube-rs get");
        assert_eq!(one.data["spec"]["reference"], "x");
        let rv = listed.metadata.resource_version.unwrap_or_default();
        let mut events = api
            .watch(&WatchParams::default().timeout(20), &rv)
            .await
            .expect("kube-rs watch")
            .boxed();
        apply(&server, &json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
            "metadata": {"name": "from-kube-rs", "namespace": "default"}, "spec": {"reference": "k"}}));
        let seen = loop {
            match events.try_next().await.expect("watch stream") {
                Some(WatchEvent::Added(o)) if o.metadata.name.as_deref() == Some("from-kube-rs") => {
                    break o;
                }
                Some(_) => continue,
                None => panic!("watch ended before the event"),
            }
        };
        assert_eq!(seen.data["spec"]["reference"], "k");
    });

    // The official Python client: list, get and a 404 as ApiException.
    let script = r#"
import sys
from kubernetes import client, config
config.load_kube_config(sys.argv[1])
api = client.CustomObjectsApi()
items = api.list_namespaced_custom_object("wardle.example.com", "v1alpha1", "default", "flunders")["items"]
assert any(i["metadata"]["name"] == "one" for i in items), items
one = api.get_namespaced_custom_object("wardle.example.com", "v1alpha1", "default", "flunders", "one")
assert one["spec"]["reference"] == "x", one
try:
    api.get_namespaced_custom_object("wardle.example.com", "v1alpha1", "default", "flunders", "nope")
    raise SystemExit("no 404")
except client.exceptions.ApiException as e:
    assert e.status == 404 and '"reason":"NotFound"' in e.body, e.body
print("python ok")
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(server.kubeconfig_path())
        .output()
        .expect("python3");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("python ok"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // A 404 `Status` from the extension passes through.
    let out = kubectl(&server, None, &["get", "flunder", "nope", "-n", "default"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("flunders.wardle.example.com \"nope\" not found"),
        "{stderr}"
    );
    let status = curl(
        &server,
        Some("admin"),
        None,
        &[&format!(
            "{}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders/nope",
            server.url()
        )],
    );
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["code"], 404);

    // The extension saw the caller through the front proxy's headers.
    let log = sample.requests();
    assert!(log.contains("user=kubernetes-admin"), "{log}");
    assert!(log.contains("groups=system:masters"), "{log}");

    // A caller without RBAC gets 403 here; the extension sees nothing of
    // it, whatever identity headers it sends.
    let out = kubectl_with_token(
        &server,
        LIMITED_TOKEN,
        &["get", "flunders", "-n", "default"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("Forbidden"),
        "{stderr}"
    );
    let forged = curl(
        &server,
        None,
        Some(LIMITED_TOKEN),
        &[
            "-H",
            "X-Remote-User: kubernetes-admin",
            "-H",
            "X-Remote-Group: system:masters",
            &format!(
                "{}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
                server.url()
            ),
        ],
    );
    assert_eq!(forged["code"], 403, "{forged}");
    assert!(
        !sample.requests().contains("limited"),
        "{}",
        sample.requests()
    );
    // A client of another CA naming somebody in the headers is itself.
    curl(
        &server,
        Some("admin"),
        None,
        &[
            "-H",
            "X-Remote-User: mallory",
            &format!(
                "{}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
                server.url()
            ),
        ],
    );
    assert!(
        !sample.requests().contains("mallory"),
        "{}",
        sample.requests()
    );
    // The front proxy's own certificate (the request-header CA's) makes
    // the headers the user, as kube-apiserver trusts its front proxy.
    let review = curl(
        &server,
        Some("front-proxy-client"),
        None,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-H",
            "X-Remote-User: alice",
            "-H",
            "X-Remote-Group: dev",
            "-d",
            r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
            &format!(
                "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                server.url()
            ),
        ],
    );
    assert_eq!(
        review["status"]["userInfo"]["username"], "alice",
        "{review}"
    );
    assert!(
        review["status"]["userInfo"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("dev")),
        "{review}"
    );

    // The extension stops: 503 for its group only, then Available=False;
    // back on the same port, available again.
    let port = sample.port;
    sample.stop();
    let (status, body) = server
        .get("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders")
        .unwrap();
    assert_eq!(status, 503, "{body}");
    wait_available(&server, "False", "FailedDiscoveryCheck");
    let (status, _) = server.get("/api/v1/namespaces/default/configmaps").unwrap();
    assert_eq!(status, 200);
    let (status, groups) = server.get("/apis").unwrap();
    assert_eq!(status, 200);
    assert!(!groups.contains("wardle.example.com"), "{groups}");
    let (_, metrics) = server.get("/metrics").unwrap();
    assert!(
        metrics.contains(&format!(
            "aggregator_unavailable_apiservice{{name=\"{APISERVICE}\"}} 1"
        )),
        "{metrics}"
    );
    let _sample = Sample::start(&server, dir.path(), port, "normal");
    wait_available(&server, "True", "Passed");
    // Its store was its memory: write again and read back.
    apply(
        &server,
        &json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": "two", "namespace": "default"}, "spec": {"reference": "y"}}),
    );
    let got = kubectl_json(&server, None, &["get", "flunder", "two", "-n", "default"]);
    assert_eq!(got["spec"]["reference"], "y");
}

#[test]
fn bad_backends_never_stall_the_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_with_args(&["--request-timeout", "3s"]);

    // No Service behind the APIService.
    apply(
        &server,
        &json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {"group": "wardle.example.com", "version": "v1alpha1",
            "service": {"namespace": "wardle", "name": "api", "port": 443},
            "caBundle": "", "groupPriorityMinimum": 1000, "versionPriority": 15}}),
    );
    let message = wait_available(&server, "False", "ServiceNotFound");
    assert_eq!(message, "service/api in \"wardle\" is not present");
    let (status, _) = server
        .get("/apis/wardle.example.com/v1alpha1/flunders")
        .unwrap();
    assert_eq!(status, 503);

    // A wrong caBundle: TLS refused, the reason in the condition.
    let mut sample = Sample::start(&server, dir.path(), 0, "normal");
    let other_ca = {
        let other = tempfile::tempdir().unwrap();
        let s = Sample::start(&server, other.path(), 0, "normal");
        s.ca_bundle()
    };
    register(&server, sample.port, &other_ca);
    let message = wait_available(&server, "False", "FailedDiscoveryCheck");
    assert!(
        message.contains("certificate") || message.contains("UnknownIssuer"),
        "{message}"
    );
    register(&server, sample.port, &sample.ca_bundle());
    wait_available(&server, "True", "Passed");

    // An extension that stops answering: its requests time out after
    // --request-timeout while everything else answers at once.
    let port = sample.port;
    sample.stop();
    let _hanging = Sample::start(&server, dir.path(), port, "hang");
    let url = server.url().to_string();
    let pki = server.data_dir().join("pki");
    let slow = std::thread::spawn(move || {
        let start = Instant::now();
        let got = wasm_apiserver_e2e::https_get(
            &pki,
            &url,
            "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
        );
        (got, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let (status, _) = server.get("/api/v1/namespaces/default/configmaps").unwrap();
    assert_eq!(status, 200);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let (got, took) = slow.join().unwrap();
    let (status, body) = got.unwrap();
    assert!(status == 504 || status == 503, "{status} {body}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    wait_available(&server, "False", "FailedDiscoveryCheck");
    drop(_hanging);

    // Garbage discovery: the group drops out, the server keeps serving.
    let _garbage = Sample::start(&server, dir.path(), port, "garbage-discovery");
    point_at(&server, port);
    poll_until(
        Duration::from_secs(60),
        "invalid discovery document",
        || {
            let (status, _, message) = available(&server);
            (status == "False" && message.contains("invalid discovery document")).then_some(())
        },
    );
    let (status, groups) = server.get("/apis").unwrap();
    assert_eq!(status, 200);
    assert!(!groups.contains("wardle.example.com"), "{groups}");
    let out = kubectl_ok(&server, None, &["api-resources"]);
    assert!(
        out.contains("configmaps") && !out.contains("flunders"),
        "{out}"
    );
}
