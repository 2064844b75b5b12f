//! Bringing the two real processes up: this server (the harness's
//! [`Server`]) and the `sample-apiserver` behind an APIService, available,
//! and the two endpoints the variants call.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::{Value, json};
use wasm_apiserver_e2e::{Server, expect_success, kubectl_stdin, poll_until};

use crate::client::Endpoint;

pub const APISERVICE: &str = "v1alpha1.wardle.example.com";
/// The name the proxy checks the extension's certificate for.
const SERVICE_NAME: &str = "api.wardle.svc";

/// The binaries: `WASM_APISERVER_BIN` and `SAMPLE_APISERVER_BIN`, else the
/// ones beside this benchmark in its target dir and profile (built by the
/// same `cargo test --workspace --no-run`).
pub fn binaries() -> anyhow::Result<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("the benchmark has no parent dir")?;
    let find = |var: &str, name: &str| -> anyhow::Result<PathBuf> {
        let path = std::env::var_os(var).map_or_else(
            || dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX)),
            PathBuf::from,
        );
        if !path.is_file() {
            bail!(
                "{} is missing: build with `cargo test --workspace --features \
                 wasm-apiserver/etcd --no-run` (scripts/bench-aggregator does) or set {var}",
                path.display()
            );
        }
        Ok(path)
    };
    Ok((
        find("WASM_APISERVER_BIN", "wasm-apiserver")?,
        find("SAMPLE_APISERVER_BIN", "sample-apiserver")?,
    ))
}

/// The running extension server; killed on drop.
pub struct Extension {
    child: Child,
    /// Kept open so that the extension never writes to a closed pipe.
    _stdout: std::io::BufReader<ChildStdout>,
    pub port: u16,
    pub cert_dir: PathBuf,
}

impl Extension {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Extension {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `sample-apiserver` with delegated authentication and
/// authorization against `server` (as a real extension runs), its
/// certificates and log under `dir`; waits for `listening on`.
pub fn start_extension(binary: &Path, server: &Server, dir: &Path) -> anyhow::Result<Extension> {
    let cert_dir = dir.join("sample-certs");
    let log = std::fs::File::create(dir.join("sample.log"))?;
    let mut child = Command::new(binary)
        .args(["--secure-port", "0", "--tls-sni", SERVICE_NAME])
        .arg("--cert-dir")
        .arg(&cert_dir)
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .with_context(|| format!("spawn {}", binary.display()))?;
    let mut stdout = std::io::BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    let Some(port) = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
    else {
        let _ = child.kill();
        bail!(
            "sample-apiserver did not start ({line:?}); see {}",
            dir.join("sample.log").display()
        );
    };
    Ok(Extension {
        child,
        _stdout: stdout,
        port,
        cert_dir,
    })
}

/// The Service (no selector), its EndpointSlice, the APIService and the
/// benchmark's namespaces, in one `kubectl apply`; then waits until the
/// APIService is `Available=True`.
pub fn register(server: &Server, ext: &Extension) -> anyhow::Result<()> {
    let ca = std::fs::read(ext.cert_dir.join("ca.crt"))?;
    let namespace =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let items = [
        namespace("wardle"),
        namespace(crate::NAMESPACE),
        namespace(crate::WATCH_NAMESPACE),
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "api", "namespace": "wardle"},
            "spec": {"ports": [{"port": 443, "targetPort": ext.port}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "api-bench", "namespace": "wardle",
                "labels": {"kubernetes.io/service-name": "api"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"port": ext.port, "protocol": "TCP"}]}),
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {"group": "wardle.example.com", "version": "v1alpha1",
                "service": {"namespace": "wardle", "name": "api", "port": 443},
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
                "groupPriorityMinimum": 1000, "versionPriority": 15}}),
    ];
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let args = ["apply", "-f", "-"];
    expect_success(
        &kubectl_stdin(server, None, &args, &list.to_string()),
        None,
        &args,
    );
    let path = format!("/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}");
    poll_until(Duration::from_secs(60), "the APIService Available", || {
        let (_, body) = server.get(&path).ok()?;
        let obj: Value = serde_json::from_str(&body).ok()?;
        let conditions = obj["status"]["conditions"].as_array()?;
        conditions
            .iter()
            .any(|c| c["type"] == "Available" && c["status"] == "True")
            .then_some(())
    });
    Ok(())
}

/// The two endpoints: this server as the admin (its client certificate),
/// and the extension as the front proxy (its client certificate and the
/// admin in the request headers, as the proxy sends them: the user, then
/// one `X-Remote-Group` per group).
pub fn endpoints(
    server: &Server,
    ext: &Extension,
) -> anyhow::Result<(Arc<Endpoint>, Arc<Endpoint>)> {
    let pki = server.data_dir().join("pki");
    let authority = server
        .url()
        .strip_prefix("https://")
        .context("server URL is not https")?;
    let aggregated = Endpoint::new(
        authority.to_string(),
        &pki.join("ca.crt"),
        (&pki.join("admin.crt"), &pki.join("admin.key")),
        "127.0.0.1",
        &[],
    )?;
    let user = admin_identity(server)?;
    let mut headers = vec![("x-remote-user", user.0.as_str())];
    headers.extend(user.1.iter().map(|g| ("x-remote-group", g.as_str())));
    let direct = Endpoint::new(
        format!("127.0.0.1:{}", ext.port),
        &ext.cert_dir.join("ca.crt"),
        (
            &pki.join("front-proxy-client.crt"),
            &pki.join("front-proxy-client.key"),
        ),
        SERVICE_NAME,
        &headers,
    )?;
    Ok((Arc::new(aggregated), Arc::new(direct)))
}

/// The admin's user name and groups as this server sees them (a
/// SelfSubjectReview), which the proxy puts in the headers.
fn admin_identity(server: &Server) -> anyhow::Result<(String, Vec<String>)> {
    let out = kubectl_stdin(
        server,
        None,
        &["create", "-o", "json", "-f", "-"],
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
    );
    let review: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
    let info = &review["status"]["userInfo"];
    let name = info["username"]
        .as_str()
        .context("no username")?
        .to_string();
    let groups = info["groups"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(|g| g.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok((name, groups))
}
