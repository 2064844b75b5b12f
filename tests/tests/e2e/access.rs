//! End-to-end access control: TLS, authentication (admin kubeconfig, client
//! certificates from `--client-ca-file`, static tokens, bootstrap tokens,
//! anonymous requests) and RBAC authorization (view bindings, `kubectl auth
//! can-i`, escalation prevention), driven by kubectl and curl over HTTPS.
//!
//! Each test starts its own server. Identities other than the admin are
//! given to kubectl as flags (`--server`, `--certificate-authority` and a
//! token or client certificate) with `--kubeconfig /dev/null`; anonymous
//! requests go through curl, since kubectl without credentials may prompt.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasm_apiserver_e2e::{
    POLL_INTERVAL, Server, expect_success, kubectl, kubectl_binary, kubectl_json, kubectl_ok,
    kubectl_stdin, poll_until, write_manifest,
};

/// How long an RBAC change or the bootstrap-token cleaner may take to act.
const DEADLINE: Duration = Duration::from_secs(30);

/// kubectl used for the non-admin identities.
const VERSION: Option<&str> = Some("1.33");

/// Credentials for kubectl, given as flags.
enum Credential {
    /// `--token`.
    Token(String),
    /// `--client-certificate` and `--client-key`.
    ClientCert { cert: PathBuf, key: PathBuf },
}

/// Runs kubectl against `server` as the holder of `credential`, without the
/// admin kubeconfig.
fn kubectl_as(
    server: &Server,
    version: Option<&str>,
    credential: &Credential,
    args: &[&str],
) -> Output {
    let cache = tempfile::tempdir().expect("kubectl cache dir");
    let mut command = Command::new(kubectl_binary(version));
    command
        .args(["--kubeconfig", "/dev/null", "--server", server.url()])
        .arg("--certificate-authority")
        .arg(server.data_dir().join("pki/ca.crt"))
        .arg("--cache-dir")
        .arg(cache.path());
    match credential {
        Credential::Token(token) => {
            command.args(["--token", token]);
        }
        Credential::ClientCert { cert, key } => {
            command
                .arg("--client-certificate")
                .arg(cert)
                .arg("--client-key")
                .arg(key);
        }
    }
    command
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl")
}

/// [`kubectl_as`], panicking unless it succeeds; returns stdout.
fn kubectl_as_ok(
    server: &Server,
    version: Option<&str>,
    credential: &Credential,
    args: &[&str],
) -> String {
    let output = kubectl_as(server, version, credential, args);
    if !output.status.success() {
        eprintln!("{}", server.diagnostics());
    }
    expect_success(&output, version, args)
}

/// [`kubectl_as`], expecting failure; returns stderr.
fn kubectl_as_err(
    server: &Server,
    version: Option<&str>,
    credential: &Credential,
    args: &[&str],
) -> String {
    let output = kubectl_as(server, version, credential, args);
    assert!(
        !output.status.success(),
        "kubectl {} should have failed but printed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        server.diagnostics()
    );
    stderr(&output)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `kubectl auth whoami -o json` → (username, groups).
fn whoami(stdout: &str) -> (String, Vec<String>) {
    let review: Value = serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("whoami printed no JSON ({e}):\n{stdout}"));
    assert_eq!(review["kind"], "SelfSubjectReview", "{review:#}");
    let user = &review["status"]["userInfo"];
    let name = user["username"].as_str().unwrap_or_default().to_string();
    let groups = user["groups"]
        .as_array()
        .map(|gs| {
            gs.iter()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    (name, groups)
}

/// Polls until `kubectl_as ARGS` succeeds (an RBAC change takes effect
/// asynchronously) and returns stdout.
fn poll_as_ok(server: &Server, credential: &Credential, args: &[&str]) -> String {
    let end = Instant::now() + DEADLINE;
    loop {
        let output = kubectl_as(server, VERSION, credential, args);
        if output.status.success() {
            return String::from_utf8_lossy(&output.stdout).into_owned();
        }
        assert!(
            Instant::now() < end,
            "kubectl {} did not succeed within {DEADLINE:?}; last stderr:\n{}\n{}",
            args.join(" "),
            stderr(&output),
            server.diagnostics()
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Writes a static token file (`token,user,uid,"groups"` lines) under the
/// test's temp dir.
fn token_file(dir: &Path, lines: &[&str]) -> PathBuf {
    let path = dir.join("tokens.csv");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write token file");
    path
}

fn run_openssl(args: &[&str], dir: &Path) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    assert!(
        output.status.success(),
        "openssl {} failed:\n{}",
        args.join(" "),
        stderr(&output)
    );
}

/// Creates `ca.crt`/`ca.key` (a self-signed CA) in `dir`, and a client
/// certificate `<name>.crt`/`<name>.key` it issues for `subject`.
fn client_cert(dir: &Path, name: &str, subject: &str) -> Credential {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca = vec!["req", "-x509", "-nodes", "-days", "1"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=e2e-ca"]);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    ca.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    run_openssl(&ca, dir);

    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    let mut req = vec!["req", "-new", "-nodes"];
    req.extend(ec);
    req.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
    run_openssl(&req, dir);

    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\n\
         extendedKeyUsage=clientAuth\n",
    )
    .expect("write extensions");
    run_openssl(
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "client.ext",
            "-out",
            &crt,
        ],
        dir,
    );
    Credential::ClientCert {
        cert: dir.join(crt),
        key: dir.join(key),
    }
}

/// `GET path` with curl, trusting the cluster CA and presenting no client
/// certificate: with `token` as a bearer token, or no credentials at all.
/// Returns status and body.
fn raw_get(server: &Server, path: &str, token: Option<&str>) -> (u16, String) {
    let mut command = Command::new("curl");
    command
        .args(["-s", "-S", "-H", "Accept: application/json"])
        .arg("--cacert")
        .arg(server.data_dir().join("pki/ca.crt"))
        .args(["-w", "\n%{http_code}"]);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let output = command
        .arg(format!("{}{path}", server.url()))
        .stdin(Stdio::null())
        .output()
        .expect("run curl");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "curl {path} failed: {}\n{stdout}",
        stderr(&output)
    );
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    let code = code
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("curl printed no status code:\n{stdout}"));
    (code, body.to_string())
}

/// [`raw_get`] without any credentials.
fn anonymous_get(server: &Server, path: &str) -> (u16, String) {
    raw_get(server, path, None)
}

/// Asserts that `token` is refused: a 401 `Status` on a raw request, and
/// kubectl reporting that it must log in.
fn assert_unauthorized(server: &Server, token: &str, what: &str) {
    let (code, body) = raw_get(server, "/api/v1/namespaces/default/configmaps", Some(token));
    assert_eq!(code, 401, "{what}: {body}");
    assert_status(&body, 401, "Unauthorized");
    let credential = Credential::Token(token.into());
    // A POST that needs no discovery: kubectl shows the Status's message.
    let err = kubectl_as_err(server, VERSION, &credential, &["auth", "whoami"]);
    assert!(
        err.contains("You must be logged in to the server (Unauthorized)"),
        "{what}: {err}"
    );
    // kubectl's discovery client words a 401 its own way, as with upstream.
    let err = kubectl_as_err(server, VERSION, &credential, &["get", "cm"]);
    assert!(
        err.contains("You must be logged in to the server"),
        "{what}: {err}"
    );
}

/// Asserts `body` is a `Status` with `code` and `reason`; returns its message.
fn assert_status(body: &str, code: u16, reason: &str) -> String {
    let status: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("body is not JSON ({e}):\n{body}"));
    assert_eq!(status["kind"], "Status", "{status:#}");
    assert_eq!(status["apiVersion"], "v1", "{status:#}");
    assert_eq!(status["status"], "Failure", "{status:#}");
    assert_eq!(status["code"], code, "{status:#}");
    assert_eq!(status["reason"], reason, "{status:#}");
    status["message"].as_str().unwrap_or_default().to_string()
}

fn create_namespace(server: &Server, name: &str) {
    kubectl_ok(server, None, &["create", "namespace", name]);
}

// 1. The admin kubeconfig works over TLS, with more than one kubectl.
#[test]
fn admin_kubeconfig_whoami() {
    let server = Server::start();
    for version in [None, Some("1.29")] {
        let stdout = kubectl_ok(&server, version, &["auth", "whoami", "-o", "json"]);
        let (name, groups) = whoami(&stdout);
        assert_eq!(name, "kubernetes-admin", "kubectl {version:?}: {stdout}");
        assert!(
            groups.iter().any(|g| g == "system:masters"),
            "kubectl {version:?}: {stdout}"
        );
        assert!(
            groups.iter().any(|g| g == "system:authenticated"),
            "kubectl {version:?}: {stdout}"
        );
        // The admin may do anything.
        let list = kubectl_json(&server, version, &["get", "namespaces"]);
        assert!(
            list["items"]
                .as_array()
                .is_some_and(|items| items.iter().any(|ns| ns["metadata"]["name"] == "default")),
            "{list:#}"
        );
    }
}

// 2. A client certificate from a `--client-ca-file` CA.
#[test]
fn client_certificate_user() {
    let pki = tempfile::tempdir().expect("temp dir");
    let alice = client_cert(pki.path(), "alice", "/CN=alice/O=devs");
    let ca = pki.path().join("ca.crt");
    let server = Server::start_with_args(&["--client-ca-file", ca.to_str().expect("utf-8 path")]);

    let (name, groups) = whoami(&kubectl_as_ok(
        &server,
        VERSION,
        &alice,
        &["auth", "whoami", "-o", "json"],
    ));
    assert_eq!(name, "alice");
    assert!(groups.contains(&"devs".to_string()), "{groups:?}");
    assert!(
        groups.contains(&"system:authenticated".to_string()),
        "{groups:?}"
    );

    let err = kubectl_as_err(&server, VERSION, &alice, &["get", "cm"]);
    assert!(err.to_lowercase().contains("forbidden"), "{err}");
    assert!(
        err.contains(r#"User "alice" cannot list resource "configmaps""#),
        "{err}"
    );

    create_namespace(&server, "team");
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "cm",
            "settings",
            "-n",
            "team",
            "--from-literal=a=1",
        ],
    );
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "rolebinding",
            "devs-view",
            "-n",
            "team",
            "--clusterrole=view",
            "--group=devs",
        ],
    );
    let listed = poll_as_ok(&server, &alice, &["get", "cm", "-n", "team", "-o", "name"]);
    assert!(listed.contains("configmap/settings"), "{listed}");

    let err = kubectl_as_err(
        &server,
        VERSION,
        &alice,
        &["create", "cm", "mine", "-n", "team"],
    );
    assert!(err.to_lowercase().contains("forbidden"), "{err}");
    assert!(
        err.contains(r#"User "alice" cannot create resource "configmaps""#),
        "{err}"
    );
    // The binding is namespaced: other namespaces stay closed.
    let err = kubectl_as_err(&server, VERSION, &alice, &["get", "cm", "-n", "default"]);
    assert!(err.to_lowercase().contains("forbidden"), "{err}");
}

/// A client certificate made exactly as the Kubernetes docs show
/// (`openssl x509 -req` with no extensions: an X.509 **v1** certificate),
/// RSA as the docs' `openssl genrsa`, is accepted; one signed by a CA the
/// server does not trust gets 401, not a failed handshake.
#[test]
fn docs_style_v1_client_certificates() {
    let pki = tempfile::tempdir().expect("temp dir");
    let dir = pki.path();
    run_openssl(&["genrsa", "-out", "ca.key", "2048"], dir);
    run_openssl(
        &[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-key",
            "ca.key",
            "-subj",
            "/CN=docs-ca",
            "-days",
            "1",
            "-out",
            "ca.crt",
        ],
        dir,
    );
    run_openssl(&["genrsa", "-out", "bob.key", "2048"], dir);
    run_openssl(
        &[
            "req",
            "-new",
            "-key",
            "bob.key",
            "-subj",
            "/CN=bob/O=docs",
            "-out",
            "bob.csr",
        ],
        dir,
    );
    run_openssl(
        &[
            "x509",
            "-req",
            "-in",
            "bob.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            "bob.crt",
        ],
        dir,
    );
    let text = Command::new("openssl")
        .args(["x509", "-in", "bob.crt", "-noout", "-text"])
        .current_dir(dir)
        .output()
        .expect("openssl x509 -text");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("Version: 1"),
        "the docs' recipe makes a v1 certificate"
    );
    let server =
        Server::start_with_args(&["--client-ca-file", dir.join("ca.crt").to_str().unwrap()]);
    let bob = Credential::ClientCert {
        cert: dir.join("bob.crt"),
        key: dir.join("bob.key"),
    };
    let (name, groups) = whoami(&kubectl_as_ok(
        &server,
        VERSION,
        &bob,
        &["auth", "whoami", "-o", "json"],
    ));
    assert_eq!(name, "bob");
    assert!(groups.contains(&"docs".to_string()), "{groups:?}");

    // Another CA's certificate: 401.
    let other = tempfile::tempdir().expect("temp dir");
    let mallory = client_cert(other.path(), "mallory", "/CN=mallory/O=system:masters");
    let err = kubectl_as_err(&server, VERSION, &mallory, &["get", "ns"]);
    assert!(
        err.contains("Unauthorized") || err.contains("must be logged in"),
        "{err}"
    );
}

// 3. A static token bound to `view`; `kubectl auth can-i`; a wrong token.
#[test]
fn static_token_view() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = token_file(
        dir.path(),
        &[r#"bob-token-0123456789,bob,uid-bob,"readers,staff""#],
    );
    let server =
        Server::start_with_args(&["--token-auth-file", file.to_str().expect("utf-8 path")]);
    let bob = Credential::Token("bob-token-0123456789".into());

    let (name, groups) = whoami(&kubectl_as_ok(
        &server,
        VERSION,
        &bob,
        &["auth", "whoami", "-o", "json"],
    ));
    assert_eq!(name, "bob");
    for group in ["readers", "staff", "system:authenticated"] {
        assert!(groups.contains(&group.to_string()), "{groups:?}");
    }

    create_namespace(&server, "team");
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "cm",
            "settings",
            "-n",
            "team",
            "--from-literal=a=1",
        ],
    );
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "rolebinding",
            "bob-view",
            "-n",
            "team",
            "--clusterrole=view",
            "--user=bob",
        ],
    );
    let listed = poll_as_ok(&server, &bob, &["get", "cm", "-n", "team", "-o", "name"]);
    assert!(listed.contains("configmap/settings"), "{listed}");
    let err = kubectl_as_err(&server, VERSION, &bob, &["create", "cm", "x", "-n", "team"]);
    assert!(
        err.contains(r#"User "bob" cannot create resource "configmaps""#),
        "{err}"
    );

    let yes = kubectl_as(
        &server,
        VERSION,
        &bob,
        &["auth", "can-i", "list", "configmaps", "-n", "team"],
    );
    assert_eq!(
        String::from_utf8_lossy(&yes.stdout).trim(),
        "yes",
        "{}",
        stderr(&yes)
    );
    assert!(yes.status.success());
    let no = kubectl_as(
        &server,
        VERSION,
        &bob,
        &["auth", "can-i", "create", "configmaps", "-n", "team"],
    );
    assert_eq!(
        String::from_utf8_lossy(&no.stdout).trim(),
        "no",
        "{}",
        stderr(&no)
    );
    assert!(!no.status.success(), "can-i answers `no` with exit code 1");
    // Not bound in `default`.
    let no = kubectl_as(
        &server,
        VERSION,
        &bob,
        &["auth", "can-i", "list", "configmaps", "-n", "default"],
    );
    assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");

    let rules = kubectl_as_ok(
        &server,
        VERSION,
        &bob,
        &["auth", "can-i", "--list", "-n", "team"],
    );
    let configmaps = rules
        .lines()
        .find(|line| line.split_whitespace().next() == Some("configmaps"))
        .unwrap_or_else(|| panic!("no configmaps row in can-i --list:\n{rules}"));
    assert!(
        configmaps.contains("[get list watch]"),
        "configmaps row {configmaps:?} in:\n{rules}"
    );
    // Granted to every authenticated user by system:basic-user.
    assert!(
        rules.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{rules}"
    );

    assert_unauthorized(&server, "not-a-token", "unknown static token");
    // A known token with a stray suffix is no match either.
    assert_unauthorized(
        &server,
        "bob-token-0123456789x",
        "static token with a suffix",
    );
}

// 4. Escalation prevention on roles and role bindings.
#[test]
fn escalation_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = token_file(dir.path(), &["carol-token-0123456789,carol,uid-carol,"]);
    let server =
        Server::start_with_args(&["--token-auth-file", file.to_str().expect("utf-8 path")]);
    let carol = Credential::Token("carol-token-0123456789".into());

    create_namespace(&server, "team");
    let manifest = write_manifest(
        &server,
        "rbac-manager.yaml",
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: rbac-manager
  namespace: team
rules:
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "get", "list"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "get", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: carol-rbac-manager
  namespace: team
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: rbac-manager
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: carol
"#,
    );
    kubectl_ok(
        &server,
        None,
        &["apply", "-f", manifest.to_str().expect("utf-8 path")],
    );
    poll_as_ok(&server, &carol, &["get", "roles", "-n", "team"]);

    // Within what carol holds: allowed.
    kubectl_as_ok(
        &server,
        VERSION,
        &carol,
        &[
            "create",
            "role",
            "cm-reader",
            "-n",
            "team",
            "--verb=get",
            "--resource=configmaps",
        ],
    );
    let role = kubectl_json(&server, None, &["get", "role", "cm-reader", "-n", "team"]);
    assert_eq!(
        role["rules"][0]["verbs"],
        serde_json::json!(["get"]),
        "{role:#}"
    );
    // Binding a role whose rules carol holds, to herself: allowed.
    kubectl_as_ok(
        &server,
        VERSION,
        &carol,
        &[
            "create",
            "rolebinding",
            "carol-cm-reader",
            "-n",
            "team",
            "--role=cm-reader",
            "--user=carol",
        ],
    );

    // Beyond it: refused.
    let err = kubectl_as_err(
        &server,
        VERSION,
        &carol,
        &[
            "create",
            "role",
            "secrets-all",
            "-n",
            "team",
            "--verb=*",
            "--resource=secrets",
        ],
    );
    assert!(err.to_lowercase().contains("forbidden"), "{err}");
    assert!(
        err.contains("attempting to grant RBAC permissions not currently held"),
        "{err}"
    );
    let err = kubectl_as_err(
        &server,
        VERSION,
        &carol,
        &[
            "create",
            "rolebinding",
            "carol-admin",
            "-n",
            "team",
            "--clusterrole=admin",
            "--user=carol",
        ],
    );
    assert!(err.to_lowercase().contains("forbidden"), "{err}");
    let out = kubectl(&server, None, &["get", "role", "secrets-all", "-n", "team"]);
    assert!(stderr(&out).contains("NotFound"), "{}", stderr(&out));
    let out = kubectl(
        &server,
        None,
        &["get", "rolebinding", "carol-admin", "-n", "team"],
    );
    assert!(stderr(&out).contains("NotFound"), "{}", stderr(&out));
    // And carol still cannot read secrets.
    let err = kubectl_as_err(&server, VERSION, &carol, &["get", "secrets", "-n", "team"]);
    assert!(
        err.contains(r#"User "carol" cannot list resource "secrets""#),
        "{err}"
    );
}

/// A bootstrap-token Secret (as upstream documents it, with `stringData`).
fn bootstrap_secret(id: &str, secret: &str, expiration: &str, usage: bool) -> String {
    let usage = if usage {
        "  usage-bootstrap-authentication: \"true\"\n"
    } else {
        "  usage-bootstrap-signing: \"true\"\n"
    };
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-{id}
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: e2e
  token-id: {id}
  token-secret: {secret}
  expiration: {expiration}
{usage}  auth-extra-groups: system:bootstrappers:worker
"
    )
}

// 5. Bootstrap tokens: valid, wrong secret, expired (and cleaned), no usage.
#[test]
fn bootstrap_tokens() {
    let server = Server::start_with_args(&["--enable-bootstrap-token-auth"]);
    const FUTURE: &str = "2099-01-01T00:00:00Z";
    const PAST: &str = "2000-01-01T00:00:00Z";
    let secrets = [
        bootstrap_secret("abc123", "0123456789abcdef", FUTURE, true),
        bootstrap_secret("exp456", "0123456789abcdef", PAST, true),
        bootstrap_secret("nou789", "0123456789abcdef", FUTURE, false),
    ]
    .join("---\n");
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], &secrets);
    expect_success(&out, None, &["apply", "-f", "-"]);

    // First, while the expired Secret is still there (the cleaner's first
    // pass is 10 s after start), so its expiration is what refuses it.
    for (what, token) in [
        ("expired", "exp456.0123456789abcdef"),
        ("wrong secret", "abc123.ffffffffffffffff"),
        ("unknown id", "zzz999.0123456789abcdef"),
        (
            "no usage-bootstrap-authentication",
            "nou789.0123456789abcdef",
        ),
        ("malformed", "abc123.0123456789ABCDEF"),
    ] {
        assert_unauthorized(&server, token, what);
    }

    // The cleaner (every 10 s) deletes the expired Secret and only it.
    poll_until(
        DEADLINE,
        "the expired bootstrap token to be deleted",
        || {
            let out = kubectl(
                &server,
                None,
                &[
                    "get",
                    "secret",
                    "bootstrap-token-exp456",
                    "-n",
                    "kube-system",
                ],
            );
            (!out.status.success() && stderr(&out).contains("NotFound")).then_some(())
        },
    );
    for kept in ["bootstrap-token-abc123", "bootstrap-token-nou789"] {
        kubectl_ok(&server, None, &["get", "secret", kept, "-n", "kube-system"]);
    }

    let valid = Credential::Token("abc123.0123456789abcdef".into());
    let stdout = kubectl_as_ok(&server, VERSION, &valid, &["auth", "whoami", "-o", "json"]);
    let (name, groups) = whoami(&stdout);
    assert_eq!(name, "system:bootstrap:abc123", "{stdout}");
    for group in [
        "system:bootstrappers",
        "system:bootstrappers:worker",
        "system:authenticated",
    ] {
        assert!(groups.contains(&group.to_string()), "{group}: {stdout}");
    }
}

// 6a. `--anonymous-auth=false`: no credentials → 401 Status.
#[test]
fn anonymous_disabled_is_unauthorized() {
    let server = Server::start_with_args(&["--anonymous-auth=false"]);
    for path in ["/api", "/api/v1/namespaces"] {
        let (code, body) = anonymous_get(&server, path);
        assert_eq!(code, 401, "GET {path}: {body}");
        assert_status(&body, 401, "Unauthorized");
    }
    // The admin still gets in.
    let (code, body) = server.get("/api").expect("admin GET /api");
    assert_eq!(code, 200, "{body}");
}

// 6b. Anonymous enabled (default): public info readable, the rest 403.
#[test]
fn anonymous_enabled_public_info_only() {
    let server = Server::start();
    let (code, body) = anonymous_get(&server, "/version");
    assert_eq!(code, 200, "{body}");
    let version: Value = serde_json::from_str(&body).expect("version JSON");
    assert!(version["gitVersion"].is_string(), "{version:#}");
    for path in ["/readyz", "/healthz", "/livez"] {
        let (code, body) = anonymous_get(&server, path);
        assert_eq!(code, 200, "GET {path}: {body}");
    }

    let (code, body) = anonymous_get(&server, "/api/v1/namespaces");
    assert_eq!(code, 403, "{body}");
    let message = assert_status(&body, 403, "Forbidden");
    assert!(message.contains("system:anonymous"), "{message}");
    let status: Value = serde_json::from_str(&body).expect("Status JSON");
    assert_eq!(status["details"]["kind"], "namespaces", "{status:#}");
}

/// `kubectl create token`: a ServiceAccount token authenticates as the
/// ServiceAccount, gets what its bindings grant, and stops working once the
/// ServiceAccount is deleted.
#[test]
fn service_account_tokens() {
    let server = Server::start();
    kubectl_ok(&server, None, &["create", "serviceaccount", "bot"]);
    let token = kubectl_ok(&server, None, &["create", "token", "bot", "--duration=20m"])
        .trim()
        .to_string();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "rolebinding",
            "bot-view",
            "--clusterrole=view",
            "--serviceaccount=default:bot",
        ],
    );
    let credential = Credential::Token(token.clone());
    let (user, groups) = whoami(&kubectl_as_ok(
        &server,
        VERSION,
        &credential,
        &["auth", "whoami", "-o", "json"],
    ));
    assert_eq!(user, "system:serviceaccount:default:bot");
    assert!(
        groups.contains(&"system:serviceaccounts:default".to_string()),
        "{groups:?}"
    );
    poll_as_ok(
        &server,
        &credential,
        &["get", "configmaps", "-n", "default"],
    );
    let denied = kubectl_as_err(
        &server,
        VERSION,
        &credential,
        &["create", "configmap", "x", "-n", "default"],
    );
    assert!(
        denied.contains("cannot create resource \"configmaps\""),
        "{denied}"
    );
    kubectl_ok(&server, None, &["delete", "serviceaccount", "bot"]);
    assert_unauthorized(&server, &token, "token of a deleted ServiceAccount");
}

/// A wasm authenticator and a wasm authorizer decide requests: the token
/// plugin names the user, the namespace plugin allows her in `team-a`, and its
/// deny rule for secrets wins over an RBAC grant because `Wasm` comes first in
/// `--authorization-mode`; so does its deny rule for impersonation, even for
/// the admin (`system:masters`).
#[test]
fn wasm_authenticator_and_authorizer_decide() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("access.yaml");
    std::fs::write(
        &config,
        r#"apiVersion: access.wasm-apiserver.io/v1alpha1
kind: AuthenticatorPlugin
metadata: {name: tokens}
spec:
  module: {file: token_authenticator.wasm}
  config:
    prefix: "wasm-"
    tokens:
      wasm-alice: {username: alice, groups: [wasm-users]}
---
apiVersion: access.wasm-apiserver.io/v1alpha1
kind: AuthorizerPlugin
metadata: {name: namespaces}
spec:
  module: {file: namespace_authorizer.wasm}
  config:
    allow: [{user: alice, namespaces: [team-a], verbs: ["*"]}]
    deny: [{resource: secrets}, {verb: impersonate}]
"#,
    )
    .unwrap();
    let plugin_dir = wasm_apiserver_e2e::plugin_dir();
    let server = Server::start_with_args(&[
        "--plugin-dir",
        plugin_dir.to_str().unwrap(),
        "--access-plugin-config-file",
        config.to_str().unwrap(),
        "--authorization-mode",
        "Wasm,RBAC",
    ]);
    create_namespace(&server, "team-a");
    create_namespace(&server, "team-b");
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "rolebinding",
            "alice-admin",
            "-n",
            "team-a",
            "--clusterrole=admin",
            "--user=alice",
        ],
    );

    let alice = Credential::Token("wasm-alice".into());
    let (user, groups) = whoami(&kubectl_as_ok(
        &server,
        VERSION,
        &alice,
        &["auth", "whoami", "-o", "json"],
    ));
    assert_eq!(user, "alice");
    assert!(groups.contains(&"wasm-users".to_string()), "{groups:?}");
    kubectl_as_ok(
        &server,
        VERSION,
        &alice,
        &[
            "create",
            "configmap",
            "by-wasm",
            "-n",
            "team-a",
            "--from-literal=k=v",
        ],
    );
    let other_ns = kubectl_as_err(
        &server,
        VERSION,
        &alice,
        &["get", "configmaps", "-n", "team-b"],
    );
    assert!(other_ns.contains("forbidden"), "{other_ns}");
    let secrets = kubectl_as_err(
        &server,
        VERSION,
        &alice,
        &["get", "secrets", "-n", "team-a"],
    );
    assert!(
        secrets.contains("denied by namespaces"),
        "the wasm deny wins over RBAC: {secrets}"
    );
    assert_unauthorized(
        &server,
        "wasm-mallory",
        "a token the wasm authenticator denies",
    );
    let impersonating = kubectl(
        &server,
        None,
        &["--as", "bob", "get", "--raw", "/api/v1/namespaces"],
    );
    assert!(!impersonating.status.success());
    let err = String::from_utf8_lossy(&impersonating.stderr);
    assert!(
        err.contains("cannot impersonate") && err.contains("denied by namespaces"),
        "{err}"
    );
}

/// `kubectl --as`: impersonation needs the `impersonate` verb on the target
/// user (and groups); once granted, requests run as the impersonated user.
#[test]
fn impersonation_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), &["imptoken,impersonator,u9"]);
    let server = Server::start_with_args(&["--token-auth-file", tokens.to_str().unwrap()]);
    let me = Credential::Token("imptoken".into());
    let denied = kubectl_as_err(
        &server,
        VERSION,
        &me,
        &[
            "--as",
            "someone-else",
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps",
        ],
    );
    assert!(
        denied.contains("cannot impersonate resource \"users\""),
        "{denied}"
    );

    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "clusterrole",
            "impersonate-bob",
            "--verb=impersonate",
            "--resource=users",
            "--resource-name=bob",
        ],
    );
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "clusterrolebinding",
            "impersonator",
            "--clusterrole=impersonate-bob",
            "--user=impersonator",
        ],
    );
    let out = poll_as_ok(
        &server,
        &me,
        &["--as", "bob", "auth", "whoami", "-o", "json"],
    );
    let (user, groups) = whoami(&out);
    assert_eq!(user, "bob");
    assert!(
        groups.contains(&"system:authenticated".to_string()),
        "{groups:?}"
    );
    let other = kubectl_as_err(
        &server,
        VERSION,
        &me,
        &[
            "--as",
            "carol",
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps",
        ],
    );
    assert!(
        other.contains("cannot impersonate resource \"users\""),
        "only bob: {other}"
    );
    // Impersonating a group needs its own grant.
    let group = kubectl_as_err(
        &server,
        VERSION,
        &me,
        &[
            "--as",
            "bob",
            "--as-group",
            "system:masters",
            "get",
            "--raw",
            "/api/v1/secrets",
        ],
    );
    assert!(
        group.contains("cannot impersonate resource \"groups\""),
        "{group}"
    );
}

/// Even the answers the HTTP layer writes itself are `Status` objects: a
/// request line over 64 KiB gets 414 with a JSON `Status` body.
#[test]
fn a_too_long_request_line_gets_a_status() {
    let server = Server::start();
    let path = format!(
        "/api/v1/namespaces/default/configmaps?labelSelector={}",
        "a".repeat(70_000)
    );
    let (code, body) = server.get(&path).expect("GET with a long URI");
    assert_eq!(code, 414, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 414);
    // The server goes on serving.
    let (code, _) = server.get("/api/v1/namespaces/default/configmaps").unwrap();
    assert_eq!(code, 200);
}
