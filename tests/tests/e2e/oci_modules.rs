//! End-to-end: plugin modules pulled from a real OCI registry (Debian's
//! `docker-registry`, CNCF distribution, started here on loopback):
//! `spec.module.image` on an AdmissionPlugin and a Controller, by tag and
//! by digest; a missing image and a wrong `sha256` are reported in status
//! while nothing runs.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::{Value, json};
use wasm_apiserver_e2e::{Server, kubectl_json, kubectl_ok, kubectl_stdin, plugin_dir, poll_until};

const WAIT: Duration = Duration::from_secs(30);

/// A registry on a loopback port, with its storage in a temporary directory.
struct Registry {
    child: Child,
    host: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_registry() -> Registry {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = format!("127.0.0.1:{port}");
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\nhttp: {{addr: '{host}'}}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker-registry (scripts/install-etcd-deps.sh installs it)");
    poll_until(WAIT, "the registry to listen", || {
        std::net::TcpStream::connect(&host).ok().map(drop)
    });
    Registry {
        child,
        host,
        _dir: dir,
    }
}

/// Pushes `wasm` as a wasm OCI artifact (Kubewarden's and wasm-to-oci's
/// media types); the manifest's digest.
fn push(registry: &Registry, repo: &str, wasm: Vec<u8>) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(vec![registry.host.clone()]),
            ..Default::default()
        });
        let reference: Reference = format!("{}/{repo}", registry.host).parse().unwrap();
        let layer = ImageLayer::new(
            wasm,
            "application/vnd.wasm.content.layer.v1+wasm".into(),
            None,
        );
        let config = Config::new(
            b"{}".to_vec(),
            "application/vnd.wasm.config.v1+json".into(),
            None,
        );
        client
            .push(&reference, &[layer], config, &RegistryAuth::Anonymous, None)
            .await
            .expect("push");
        client
            .fetch_manifest_digest(&reference, &RegistryAuth::Anonymous)
            .await
            .expect("digest")
    })
}

fn apply(server: &Server, doc: &Value) {
    let out = kubectl_stdin(server, None, &["apply", "-f", "-"], &doc.to_string());
    assert!(
        out.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn status(server: &Server, kind: &str, name: &str, phase: &str) -> Value {
    poll_until(WAIT, &format!("{kind} {name} to be {phase}"), || {
        let o = kubectl_json(server, None, &["get", kind, name, "-o", "json"]);
        (o["status"]["phase"] == phase).then(|| o["status"].clone())
    })
}

fn plugin(name: &str, module: Value) -> Value {
    json!({"apiVersion": "admission.wasm-apiserver.io/v1alpha1", "kind": "AdmissionPlugin",
        "metadata": {"name": name},
        "spec": {"module": module, "phases": ["Validating"],
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "config": {"labels": ["team"]}}})
}

#[test]
fn modules_are_pulled_from_an_oci_registry() {
    let registry = start_registry();
    let dir = plugin_dir();
    let labels = std::fs::read(dir.join("require_labels.wasm")).unwrap();
    let digest = push(&registry, "policies/require-labels:v1", labels.clone());
    push(
        &registry,
        "controllers/namespace-defaults:v1",
        std::fs::read(dir.join("namespace_defaults.wasm")).unwrap(),
    );
    let server = Server::start_with_args(&["--insecure-plugin-registries", &registry.host]);

    // By tag: the policy runs.
    apply(
        &server,
        &plugin(
            "by-tag",
            json!({"image": format!("{}/policies/require-labels:v1", registry.host)}),
        ),
    );
    let st = status(&server, "admissionplugin", "by-tag", "Active");
    use sha2::Digest;
    let sha = format!("sha256:{:x}", sha2::Sha256::digest(&labels));
    assert_eq!(
        st["digest"],
        sha.as_str(),
        "the pulled bytes are the pushed ones"
    );
    let out = kubectl_stdin(&server, None, &["create", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}).to_string());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing required label(s): team"));
    kubectl_ok(&server, None, &["delete", "admissionplugin", "by-tag"]);

    // By digest, as an immutable pin.
    apply(
        &server,
        &plugin(
            "by-digest",
            json!({"image": format!("{}/policies/require-labels@{digest}", registry.host)}),
        ),
    );
    status(&server, "admissionplugin", "by-digest", "Active");
    kubectl_ok(&server, None, &["delete", "admissionplugin", "by-digest"]);

    // A missing tag and a wrong sha256 are reported; nothing runs.
    apply(
        &server,
        &plugin(
            "missing",
            json!({"image": format!("{}/policies/require-labels:nope", registry.host)}),
        ),
    );
    let st = status(&server, "admissionplugin", "missing", "Failed");
    assert!(st["message"].as_str().unwrap().contains("pulling"), "{st}");
    apply(
        &server,
        &plugin(
            "tampered",
            json!({"image": format!("{}/policies/require-labels:v1", registry.host),
        "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}),
        ),
    );
    let st = status(&server, "admissionplugin", "tampered", "Failed");
    assert!(
        st["message"].as_str().unwrap().contains("sha256 mismatch"),
        "{st}"
    );
    kubectl_ok(
        &server,
        None,
        &["delete", "admissionplugin", "missing", "tampered"],
    );
    kubectl_ok(
        &server,
        None,
        &["create", "configmap", "free", "-n", "default"],
    );

    // A controller's module, pulled too (its ServiceAccount may follow
    // Namespaces).
    apply(
        &server,
        &json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "nd-read"},
         "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "nd-read"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "nd-read"},
         "subjects": [{"kind": "ServiceAccount", "name": "namespace-defaults", "namespace": "kube-system"}]}]}),
    );
    apply(
        &server,
        &json!({"apiVersion": "controllers.wasm-apiserver.io/v1alpha1", "kind": "Controller",
        "metadata": {"name": "namespace-defaults"},
        "spec": {"module": {"image": format!("{}/controllers/namespace-defaults:v1", registry.host)},
            "for": {"apiVersion": "v1", "kind": "Namespace"},
            "serviceAccountName": "kube-system/namespace-defaults"}}),
    );
    status(&server, "controller", "namespace-defaults", "Active");
}
