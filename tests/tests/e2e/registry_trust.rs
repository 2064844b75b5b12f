//! End-to-end: `spec.module.image` from a private registry (issue 55, trust
//! and credentials): Debian's `docker-registry` started here over HTTPS
//! with a certificate from a CA made in the test, and htpasswd (bcrypt)
//! authentication.
//!
//! * without the CA the pull is refused and the status says the
//!   certificate is not trusted; with `--plugin-registry-ca-file`, or the
//!   CA given for that registry alone in `--plugin-sources-file`
//!   (Kubewarden's `sources.yaml`), the module loads;
//! * without credentials the status says unauthorized; with
//!   `--plugin-registry-config` (a docker `config.json`) or
//!   `spec.module.pullSecret` (a `kubernetes.io/dockerconfigjson` Secret) it
//!   loads; a missing Secret or one of another type is reported while the
//!   previous version keeps judging requests;
//! * the password is nowhere in the servers' logs or the plugins' status.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, Config, ImageLayer,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::{Value, json};
use wasm_apiserver_e2e::{Server, kubectl_json, kubectl_ok, kubectl_stdin, plugin_dir, poll_until};

const WAIT: Duration = Duration::from_secs(30);
const USER: &str = "modules";
/// Distinctive, so that a grep for it finds only a leak.
const PASSWORD: &str = "Pw-5f1c9e8a-never-in-logs";

/// A registry on a loopback port, TLS from a private CA, htpasswd auth.
struct Registry {
    child: Child,
    host: String,
    ca_pem: String,
    dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn image(&self, repo: &str) -> String {
        format!("{}/{repo}", self.host)
    }
}

/// A CA and a server certificate for 127.0.0.1 signed by it (PEM).
fn pki() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "registry-trust test CA");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "127.0.0.1");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

fn start_registry() -> Registry {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = format!("127.0.0.1:{port}");
    let (ca_pem, cert_pem, key_pem) = pki();
    let p = |name: &str| dir.path().join(name);
    std::fs::write(p("server.pem"), cert_pem).unwrap();
    std::fs::write(p("server-key.pem"), key_pem).unwrap();
    // A bcrypt password file, as `htpasswd -B` writes it.
    let out = Command::new("htpasswd")
        .args(["-Bbn", USER, PASSWORD])
        .output()
        .expect("htpasswd (apache2-utils; scripts/install-etcd-deps.sh installs it)");
    assert!(out.status.success(), "htpasswd failed");
    std::fs::write(p("htpasswd"), out.stdout).unwrap();
    let config = p("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n\
             http:\n  addr: '{host}'\n  tls: {{certificate: {}, key: {}}}\n\
             auth:\n  htpasswd: {{realm: modules, path: {}}}\n",
            p("data").display(),
            p("server.pem").display(),
            p("server-key.pem").display(),
            p("htpasswd").display(),
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
        ca_pem,
        dir,
    }
}

/// Pushes `wasm` as a wasm OCI artifact, over HTTPS trusting the test CA,
/// with the registry's credentials.
fn push(registry: &Registry, repo: &str, wasm: Vec<u8>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::Https,
            extra_root_certificates: vec![Certificate {
                encoding: CertificateEncoding::Pem,
                data: registry.ca_pem.clone().into_bytes(),
            }],
            ..Default::default()
        });
        let reference: Reference = registry.image(repo).parse().unwrap();
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
        let auth = RegistryAuth::Basic(USER.into(), PASSWORD.into());
        client
            .push(&reference, &[layer], config, &auth, None)
            .await
            .expect("push");
    })
}

/// A docker `config.json` with the registry's credentials (`auth` form).
fn docker_config(registry: &Registry) -> String {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    json!({"auths": {registry.host.as_str(): {"auth": auth}}}).to_string()
}

fn apply(server: &Server, doc: &Value) {
    let out = kubectl_stdin(server, None, &["apply", "-f", "-"], &doc.to_string());
    assert!(
        out.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The plugin's status once its current generation is observed in `phase`.
fn status(server: &Server, name: &str, phase: &str) -> Value {
    poll_until(
        WAIT,
        &format!("admissionplugin {name} to be {phase}"),
        || {
            let o = kubectl_json(
                server,
                None,
                &["get", "admissionplugin", name, "-o", "json"],
            );
            (o["status"]["phase"] == phase
                && o["status"]["observedGeneration"] == o["metadata"]["generation"])
                .then(|| o["status"].clone())
        },
    )
}

fn plugin(name: &str, module: Value) -> Value {
    json!({"apiVersion": "admission.wasm-apiserver.io/v1alpha1", "kind": "AdmissionPlugin",
        "metadata": {"name": name},
        "spec": {"module": module, "phases": ["Validating"],
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "config": {"labels": ["team"]}}})
}

/// Whether an unlabelled ConfigMap is refused by require-labels.
fn policy_denies(server: &Server, name: &str) -> bool {
    let out = kubectl_stdin(server, None, &["create", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}).to_string());
    if out.status.success() {
        return false;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing required label(s): team"), "{err}");
    true
}

/// Nothing the server wrote holds the password (or its base64 forms).
fn assert_no_password(server: &Server, statuses: &[&str]) {
    let b64 = base64::engine::general_purpose::STANDARD;
    let needles = [
        PASSWORD.to_string(),
        b64.encode(format!("{USER}:{PASSWORD}")),
        b64.encode(PASSWORD),
    ];
    let log = server.log();
    let mut texts = vec![("the server's log".to_string(), log)];
    for name in statuses {
        let o = kubectl_json(
            server,
            None,
            &["get", "admissionplugin", name, "-o", "json"],
        );
        texts.push((format!("{name}'s status"), o["status"].to_string()));
    }
    for (what, text) in texts {
        for n in &needles {
            assert!(!text.contains(n.as_str()), "the password is in {what}");
        }
    }
}

fn flag_path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn private_ca_is_refused_unless_trusted() {
    let registry = start_registry();
    push(
        &registry,
        "policies/require-labels:v1",
        std::fs::read(plugin_dir().join("require_labels.wasm")).unwrap(),
    );
    let image = registry.image("policies/require-labels:v1");
    let config = registry.file("config.json", &docker_config(&registry));

    // The public roots only: the registry's certificate is not trusted.
    let server = Server::start_with_args(&["--plugin-registry-config", flag_path(&config)]);
    apply(&server, &plugin("p", json!({"image": image})));
    let st = status(&server, "p", "Failed");
    let msg = st["message"].as_str().unwrap();
    assert!(msg.contains("certificate is not trusted"), "{st}");
    assert!(!policy_denies(&server, "untrusted"));
    assert_no_password(&server, &["p"]);
    drop(server);

    // The CA for every registry.
    let ca = registry.file("ca.pem", &registry.ca_pem);
    let server = Server::start_with_args(&[
        "--plugin-registry-ca-file",
        flag_path(&ca),
        "--plugin-registry-config",
        flag_path(&config),
    ]);
    apply(&server, &plugin("p", json!({"image": image})));
    status(&server, "p", "Active");
    assert!(policy_denies(&server, "with-ca-file"));
    assert_no_password(&server, &["p"]);
    drop(server);

    // The CA for this registry only, in Kubewarden's sources.yaml: inline
    // (`Data`) and as a file (`Path`).
    for authority in [
        json!({"type": "Data", "data": registry.ca_pem}),
        json!({"type": "Path", "path": ca}),
    ] {
        let sources = registry.file(
            "sources.yaml",
            &serde_yaml::to_string(&json!({
                "insecure_sources": ["registry.invalid:5000"],
                "source_authorities": {registry.host.as_str(): [authority]}}))
            .unwrap(),
        );
        let server = Server::start_with_args(&[
            "--plugin-sources-file",
            flag_path(&sources),
            "--plugin-registry-config",
            flag_path(&config),
        ]);
        apply(&server, &plugin("p", json!({"image": image})));
        status(&server, "p", "Active");
        assert!(policy_denies(&server, "with-sources"));
    }
}

#[test]
fn credentials_from_the_config_file_and_pull_secrets() {
    let registry = start_registry();
    push(
        &registry,
        "policies/require-labels:v1",
        std::fs::read(plugin_dir().join("require_labels.wasm")).unwrap(),
    );
    let image = registry.image("policies/require-labels:v1");
    let ca = registry.file("ca.pem", &registry.ca_pem);

    // No credentials: unauthorized.
    let server = Server::start_with_args(&["--plugin-registry-ca-file", flag_path(&ca)]);
    apply(&server, &plugin("anonymous", json!({"image": image})));
    let st = status(&server, "anonymous", "Failed");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .to_ascii_lowercase()
            .contains("unauthorized"),
        "{st}"
    );

    // A pull Secret: the server reads it with its own identity.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "registry-creds", "namespace": "kube-system"},
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(docker_config(&registry))}});
    apply(&server, &secret);
    let with_secret = |name: &str| json!({"image": image, "pullSecret": {"namespace": "kube-system", "name": name}});
    apply(&server, &plugin("p", with_secret("registry-creds")));
    status(&server, "p", "Active");
    assert!(policy_denies(&server, "with-secret"));

    // A missing Secret, and one of another type, are reported; the loaded
    // version keeps judging requests.
    apply(&server, &plugin("p", with_secret("nope")));
    let st = status(&server, "p", "Failed");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("spec.module.pullSecret kube-system/nope: not found"),
        "{st}"
    );
    assert!(policy_denies(&server, "previous-version-1"));
    apply(
        &server,
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "opaque", "namespace": "kube-system"},
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(docker_config(&registry))}}),
    );
    apply(&server, &plugin("p", with_secret("opaque")));
    let st = status(&server, "p", "Failed");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("not \"kubernetes.io/dockerconfigjson\""),
        "{st}"
    );
    assert!(policy_denies(&server, "previous-version-2"));
    // Wrong credentials in a Secret: unauthorized, and not echoed.
    let wrong = docker_config(&registry).replace(
        &base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}")),
        &base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}-wrong")),
    );
    apply(
        &server,
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "wrong", "namespace": "kube-system"},
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(wrong)}}),
    );
    apply(&server, &plugin("wrong", with_secret("wrong")));
    let st = status(&server, "wrong", "Failed");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .to_ascii_lowercase()
            .contains("unauthorized"),
        "{st}"
    );
    assert_no_password(&server, &["anonymous", "p", "wrong"]);
    kubectl_ok(
        &server,
        None,
        &["delete", "admissionplugin", "p", "wrong", "anonymous"],
    );
    drop(server);

    // Credentials from --plugin-registry-config.
    let config = registry.file("config.json", &docker_config(&registry));
    let server = Server::start_with_args(&[
        "--plugin-registry-ca-file",
        flag_path(&ca),
        "--plugin-registry-config",
        flag_path(&config),
    ]);
    apply(&server, &plugin("p", json!({"image": image})));
    status(&server, "p", "Active");
    assert!(policy_denies(&server, "with-config"));
    assert_no_password(&server, &["p"]);
}
