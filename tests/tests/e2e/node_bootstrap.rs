//! End-to-end: a node joins with nothing but a bootstrap token (issue 32),
//! as kubeadm's TLS bootstrap does: it reads `kube-public/cluster-info`
//! anonymously without trusting the connection, checks the kubeconfig
//! against the JWS its token makes, makes a key and a CSR with openssl,
//! posts the CSR with the token; the approver and signer act; the
//! certificate authenticates as `system:node:<name>`, and the node renews
//! it itself (`selfnodeclient`). A token asking for `system:masters` gets
//! nothing. Approval and signing are authorized per signer name; kube-rs's
//! `patch_approval` approves a client certificate that the signer signs.

use base64::Engine;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use wasm_apiserver_e2e::{
    Server, kubectl, kubectl_binary, kubectl_json, kubectl_ok, kubectl_stdin, kubectl_with_token,
    poll_until, write_manifest,
};

const WAIT: Duration = Duration::from_secs(30);
const TOKEN_ID: &str = "abcdef";
const TOKEN_SECRET: &str = "0123456789abcdef";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn token() -> String {
    format!("{TOKEN_ID}.{TOKEN_SECRET}")
}

/// kubeadm's token Secret and its three ClusterRoleBindings.
fn kubeadm_setup(server: &Server) {
    let manifest = format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-{TOKEN_ID}
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  token-id: {TOKEN_ID}
  token-secret: {TOKEN_SECRET}
  usage-bootstrap-authentication: \"true\"
  usage-bootstrap-signing: \"true\"
  auth-extra-groups: system:bootstrappers:kubeadm:default-node-token
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-bootstrapper
subjects:
- kind: Group
  name: system:bootstrappers:kubeadm:default-node-token
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:nodeclient
subjects:
- kind: Group
  name: system:bootstrappers:kubeadm:default-node-token
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient
subjects:
- kind: Group
  name: system:nodes
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: nodes-request-certificates
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-bootstrapper
subjects:
- kind: Group
  name: system:nodes
"
    );
    let out = kubectl_stdin(server, None, &["apply", "-f", "-"], &manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A new key and a CSR for `subject` (openssl's `/O=../CN=..`); `rsa`
/// picks RSA 2048, else ECDSA P-256 (what kubelets make).
fn key_and_csr(dir: &Path, name: &str, subject: &str, rsa: bool) -> (PathBuf, String) {
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let mut cmd = Command::new("openssl");
    cmd.args(["req", "-new", "-nodes", "-subj", subject, "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&csr);
    if rsa {
        cmd.args(["-newkey", "rsa:2048"]);
    } else {
        cmd.args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]);
    }
    run(&mut cmd);
    (key, std::fs::read_to_string(csr).expect("csr"))
}

fn csr_object(name: &str, pem: &str, signer: &str, usages: &[&str]) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": B64.encode(pem), "signerName": signer, "usages": usages}})
}

/// Creates a CSR as the bootstrap token.
fn create_as_token(server: &Server, obj: &Value) -> Output {
    let path = write_manifest(
        server,
        &format!("{}.json", obj["metadata"]["name"].as_str().unwrap()),
        &obj.to_string(),
    );
    kubectl_with_token(server, &token(), &["create", "-f", path.to_str().unwrap()])
}

/// kubectl with a client certificate and nothing else.
fn kubectl_with_cert(server: &Server, cert: &Path, key: &Path, args: &[&str]) -> Output {
    Command::new(kubectl_binary(None))
        .args(["--kubeconfig", "/dev/null", "--server", server.url()])
        .arg("--certificate-authority")
        .arg(server.data_dir().join("pki/ca.crt"))
        .arg("--client-certificate")
        .arg(cert)
        .arg("--client-key")
        .arg(key)
        .arg("--cache-dir")
        .arg(server.kubectl_cache_dir())
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl")
}

fn csr(server: &Server, name: &str) -> Value {
    kubectl_json(server, None, &["get", "csr", name, "-o", "json"])
}

/// Waits for the CSR's certificate and writes it to `<dir>/<name>.crt`.
fn wait_signed(server: &Server, dir: &Path, name: &str) -> (Value, PathBuf) {
    let deadline = std::time::Instant::now() + WAIT;
    let obj = loop {
        let c = csr(server, name);
        if c["status"]["certificate"].is_string() {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} not signed: {c}\n{}",
            server.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let pem = B64
        .decode(obj["status"]["certificate"].as_str().unwrap())
        .expect("base64 certificate");
    let path = dir.join(format!("{name}.crt"));
    std::fs::write(&path, pem).expect("write cert");
    (obj, path)
}

fn whoami(server: &Server, cert: &Path, key: &Path) -> Value {
    let out = kubectl_with_cert(server, cert, key, &["auth", "whoami", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout).expect("JSON")["status"]["userInfo"].clone()
}

#[test]
fn a_node_joins_with_only_a_bootstrap_token() {
    let server = Server::start_with_args(&["--enable-bootstrap-token-auth"]);
    kubeadm_setup(&server);
    let dir = tempfile::tempdir().expect("tmp");

    // 1. Discovery: cluster-info, read anonymously over an unverified
    //    connection, then checked with the token.
    let url = format!(
        "{}/api/v1/namespaces/kube-public/configmaps/cluster-info",
        server.url()
    );
    let info: Value = poll_until(WAIT, "cluster-info signed for the token", || {
        let out = Command::new("curl")
            .args(["-sk", &url])
            .output()
            .expect("curl");
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        v["data"][format!("jws-kubeconfig-{TOKEN_ID}")]
            .is_string()
            .then_some(v)
    });
    let kubeconfig = info["data"]["kubeconfig"].as_str().unwrap();
    let jws = info["data"][format!("jws-kubeconfig-{TOKEN_ID}")]
        .as_str()
        .unwrap();
    let (header, signature) = jws.split_once("..").expect("detached JWS");
    let url64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    assert_eq!(
        url64.decode(header).unwrap(),
        format!(r#"{{"alg":"HS256","kid":"{TOKEN_ID}"}}"#).as_bytes()
    );
    let input = format!("{header}.{}", url64.encode(kubeconfig));
    let mut hmac = Command::new("openssl")
        .args(["dgst", "-sha256", "-binary", "-hmac", TOKEN_SECRET])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl");
    use std::io::Write;
    hmac.stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let mac = hmac.wait_with_output().unwrap().stdout;
    assert_eq!(
        signature,
        url64.encode(mac),
        "the token verifies cluster-info"
    );
    let parsed: Value = serde_yaml::from_str(kubeconfig).expect("kubeconfig YAML");
    let ca = std::fs::read_to_string(server.data_dir().join("pki/ca.crt")).unwrap();
    assert_eq!(
        B64.decode(
            parsed["clusters"][0]["cluster"]["certificate-authority-data"]
                .as_str()
                .unwrap()
        )
        .unwrap(),
        ca.as_bytes()
    );
    assert_eq!(parsed["clusters"][0]["cluster"]["server"], server.url());

    // 2. TLS bootstrap: the token posts a kubelet client CSR.
    let (node_key, pem) = key_and_csr(
        dir.path(),
        "node",
        "/O=system:nodes/CN=system:node:edge-1",
        true,
    );
    let out = create_as_token(
        &server,
        &csr_object(
            "node-csr-1",
            &pem,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "key encipherment", "client auth"],
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (obj, node_cert) = wait_signed(&server, dir.path(), "node-csr-1");
    assert_eq!(
        obj["spec"]["username"],
        format!("system:bootstrap:{TOKEN_ID}")
    );
    let approved = &obj["status"]["conditions"][0];
    assert_eq!(approved["type"], "Approved");
    assert_eq!(approved["reason"], "AutoApproved");
    assert_eq!(
        approved["message"],
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );
    let user = whoami(&server, &node_cert, &node_key);
    assert_eq!(user["username"], "system:node:edge-1");
    assert!(
        user["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:nodes")),
        "{user}"
    );

    // 3. A token asking for system:masters gets nothing: refused outright
    //    for the client signer, never approved for the kubelet one.
    let (_, masters) = key_and_csr(
        dir.path(),
        "masters",
        "/O=system:masters/CN=intruder",
        false,
    );
    let out = create_as_token(
        &server,
        &csr_object(
            "masters-client",
            &masters,
            "kubernetes.io/kube-apiserver-client",
            &["digital signature", "client auth"],
        ),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"),
        "{err}"
    );
    let out = create_as_token(
        &server,
        &csr_object(
            "masters-kubelet",
            &masters,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // 4. The node renews its own certificate with it (selfnodeclient).
    let (renewed_key, pem) = key_and_csr(
        dir.path(),
        "renewed",
        "/O=system:nodes/CN=system:node:edge-1",
        false,
    );
    let path = write_manifest(
        &server,
        "renew.json",
        &csr_object(
            "node-csr-2",
            &pem,
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
        )
        .to_string(),
    );
    let out = kubectl_with_cert(
        &server,
        &node_cert,
        &node_key,
        &["create", "-f", path.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (obj, renewed_cert) = wait_signed(&server, dir.path(), "node-csr-2");
    assert_eq!(
        obj["status"]["conditions"][0]["message"],
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    assert_eq!(
        whoami(&server, &renewed_cert, &renewed_key)["username"],
        "system:node:edge-1"
    );
    // The masters request, created before, was looked at and left alone.
    let masters = csr(&server, "masters-kubelet");
    assert!(masters["status"]["conditions"].is_null(), "{masters}");
    assert!(masters["status"]["certificate"].is_null(), "{masters}");

    // 5. Approving needs `approve` on the signer, not only the subresource.
    let grant = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: csr-approval-only
rules:
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests, certificatesigningrequests/approval]
  verbs: [get, list, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: carol-csr-approval-only
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: csr-approval-only
subjects:
- kind: User
  name: carol
";
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], grant);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let denied = poll_until(WAIT, "carol reaches admission", || {
        let out = kubectl(
            &server,
            None,
            &["--as", "carol", "certificate", "approve", "masters-kubelet"],
        );
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        (!err.contains("cannot update")).then_some((out.status.success(), err))
    });
    assert!(!denied.0);
    assert!(
        denied.1.contains(r#"user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client-kubelet""#),
        "{}",
        denied.1
    );
    // The cluster admin may; the signer then refuses what the kubelet
    // signer's rules forbid.
    kubectl_ok(
        &server,
        None,
        &["certificate", "approve", "masters-kubelet"],
    );
    let failed = poll_until(WAIT, "masters-kubelet failed", || {
        let c = csr(&server, "masters-kubelet");
        c["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Failed").cloned())
    });
    assert_eq!(failed["reason"], "SignerValidationFailure");
    assert_eq!(
        failed["message"],
        "subject organization is not system:nodes"
    );
    assert!(csr(&server, "masters-kubelet")["status"]["certificate"].is_null());

    // 6. `kubectl get csr` prints upstream's columns.
    let table = kubectl_ok(&server, None, &["get", "csr"]);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.split_whitespace().eq([
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ]),
        "{table}"
    );
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    let node = row("node-csr-1 ");
    assert_eq!(
        node[2..],
        [
            "kubernetes.io/kube-apiserver-client-kubelet",
            "system:bootstrap:abcdef",
            "<none>",
            "Approved,Issued"
        ]
    );
    assert_eq!(row("masters-kubelet ")[5], "Approved,Failed");
}

#[test]
fn kube_rs_patch_approval_and_the_signer() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tmp");
    let (key, pem) = key_and_csr(dir.path(), "alice", "/O=dev/CN=alice", false);
    let obj: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": "alice"},
        "spec": {"request": B64.encode(&pem), "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"], "expirationSeconds": 3600}
    }))
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let api: Api<CertificateSigningRequest> =
            Api::all(wasm_apiserver_e2e::kube_client(&server));
        let created = api
            .create(&PostParams::default(), &obj)
            .await
            .expect("create");
        // The requester is the creator, whatever the body said.
        assert_eq!(created.spec.username.as_deref(), Some("kubernetes-admin"));
        let patch = json!({"status": {"conditions": [{"type": "Approved", "status": "True",
            "reason": "KubeRs", "message": "approved by kube-rs"}]}});
        let approved = api
            .patch_approval("alice", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch_approval");
        let cond = &approved.status.unwrap().conditions.unwrap()[0];
        assert_eq!(cond.type_, "Approved");
        assert!(cond.last_update_time.is_some());
        // The status subresource may not remove the approval.
        let err = api
            .patch_status(
                "alice",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"conditions": []}})),
            )
            .await
            .expect_err("approval removed through status");
        assert!(err.to_string().contains("may not remove"), "{err}");
    });
    let (obj, cert) = wait_signed(&server, dir.path(), "alice");
    let user = whoami(&server, &cert, &key);
    assert_eq!(user["username"], "alice");
    assert!(user["groups"].as_array().unwrap().contains(&json!("dev")));
    // expirationSeconds honoured: about an hour (backdated 5 minutes).
    let out = run(Command::new("openssl")
        .args(["x509", "-noout", "-startdate", "-enddate", "-in"])
        .arg(&cert));
    let text = String::from_utf8_lossy(&out.stdout);
    let date = |k: &str| {
        let line = text.lines().find(|l| l.starts_with(k)).unwrap();
        let s = line.split_once('=').unwrap().1;
        let out = run(Command::new("date").args(["-d", s, "+%s"]));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let life = date("notAfter") - date("notBefore");
    assert_eq!(life, 3600 + 300, "{text}");
    assert_eq!(obj["spec"]["expirationSeconds"], 3600);
}
