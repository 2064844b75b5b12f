//! Harness for the end-to-end tests: starts the real `wasm-apiserver` binary
//! in a temp dir on a free loopback port and drives it with kubectl.
//!
//! # Locating the binary
//!
//! The server under test is the real `wasm-apiserver` binary of
//! `host/server`, which [`server_binary`] brings up to date with `cargo
//! build` once per test process, in the tests' own target dir and profile
//! (see there). This package does not link the server: a change in `host/`
//! rebuilds and relinks the server alone, and the end-to-end test binary
//! stays as it is. Set `WASM_APISERVER_BIN=/path/to/wasm-apiserver` to test
//! another binary instead.
//!
//! # Waiting for readiness
//!
//! [`Server::start`] spawns `wasm-apiserver serve --secure-port 0`, polls for
//! `DATA_DIR/admin.kubeconfig` (written atomically once the server is ready),
//! reads the URL from it and polls `GET /readyz` until it answers 200. Every
//! wait has a deadline; on timeout or early exit it panics with the server's
//! log.

pub mod etcd;
pub mod node_agent;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a server may take to write its kubeconfig and answer `/readyz`.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(60);

/// Interval between two polls of anything the harness waits for.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A running `wasm-apiserver` with its own temp dir; killed on drop.
pub struct Server {
    /// Holds `data/` (the server's `--data-dir`), `server.log` and
    /// kubectl's `cache/`; removed on drop.
    root: TempDir,
    /// The `wasm-apiserver` binary it runs ([`server_binary`] unless
    /// [`Server::start_binary`] or [`Server::restart_as`] said otherwise).
    binary: PathBuf,
    extra_args: Vec<String>,
    child: Option<Child>,
    url: String,
    port: u16,
}

impl Server {
    /// Starts a server with default flags.
    pub fn start() -> Server {
        Server::start_with_args(&[])
    }

    /// Starts a server with extra flags after the harness's own
    /// (e.g. `["--etcd-compaction-interval", "1s"]`); they are kept for
    /// [`Server::restart`].
    pub fn start_with_args(extra_args: &[&str]) -> Server {
        Server::start_binary(server_binary(), extra_args)
    }

    /// Starts `binary` (another build of the server: the upgrade test's
    /// previous release) with extra flags.
    pub fn start_binary(binary: PathBuf, extra_args: &[&str]) -> Server {
        let root = tempfile::Builder::new()
            .prefix("wasm-apiserver-e2e-")
            .tempdir()
            .expect("create temp dir");
        let mut server = Server {
            root,
            binary,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            child: None,
            url: String::new(),
            port: 0,
        };
        server.spawn(0);
        server
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    /// `GET path` over HTTPS as the admin (see [`https_get`]).
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        https_get(&self.data_dir().join("pki"), &self.url, path)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `admin.kubeconfig` written by the server.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.data_dir().join("admin.kubeconfig")
    }

    /// The server's `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// A cache dir for kubectl's discovery cache, private to this server.
    pub fn kubectl_cache_dir(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    /// Everything the server (all its runs) wrote to stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Whether the server still answers `/readyz`, and the tail of its log:
    /// for failure messages.
    pub fn diagnostics(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!(
            "server {}: GET /readyz -> {:?}\n--- last lines of the server log ---\n{tail}",
            self.url,
            self.get("/readyz")
        )
    }

    /// Kills the server with SIGKILL (no graceful shutdown) and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same data dir and the same port (so
    /// URLs and kubeconfigs taken before stay valid). Kills it first if it
    /// is still running.
    pub fn restart(&mut self) {
        self.kill9();
        let port = self.port;
        self.spawn(port);
    }

    /// The running server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Adds flags for the next [`Server::restart`] (e.g. a file the first
    /// start wrote into the data dir, such as `pki/ca.crt`).
    pub fn add_args(&mut self, args: &[&str]) {
        self.extra_args.extend(args.iter().map(|s| s.to_string()));
    }

    /// Drops flags given before, for the next [`Server::restart`].
    pub fn remove_args(&mut self, args: &[&str]) {
        self.extra_args.retain(|a| !args.contains(&a.as_str()));
    }

    /// Stops the server (SIGKILL) and starts `binary` on the same data dir
    /// and port: an upgrade (or a downgrade).
    pub fn restart_as(&mut self, binary: PathBuf) {
        self.binary = binary;
        self.restart();
    }

    fn log_path(&self) -> PathBuf {
        self.root.path().join("server.log")
    }

    fn spawn(&mut self, port: u16) {
        let kubeconfig = self.kubeconfig_path();
        // A kubeconfig left by an earlier run must not be taken as a sign of
        // readiness of this one.
        match std::fs::remove_file(&kubeconfig) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("remove {}: {e}", kubeconfig.display()),
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open server log");
        let mut log_for_stdout = log.try_clone().expect("clone log handle");
        let _ = writeln!(log_for_stdout, "=== starting server on port {port} ===");
        let child = Command::new(&self.binary)
            .arg("serve")
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(["--bind-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string()])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log_for_stdout)
            .stderr(log)
            .spawn()
            .expect("spawn wasm-apiserver");
        self.child = Some(child);

        let deadline = Instant::now() + STARTUP_DEADLINE;
        let url = loop {
            self.assert_running("while waiting for admin.kubeconfig");
            if let Ok(text) = std::fs::read_to_string(&kubeconfig) {
                match kubeconfig_server_url(&text) {
                    Some(url) => break url,
                    None => self.fail(&format!(
                        "admin.kubeconfig has no server URL for its current context:\n{text}"
                    )),
                }
            }
            if Instant::now() > deadline {
                self.fail("admin.kubeconfig did not appear in time");
            }
            std::thread::sleep(POLL_INTERVAL);
        };
        self.port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .unwrap_or_else(|| self.fail(&format!("no port in server URL {url:?}")));
        if port != 0 && self.port != port {
            self.fail(&format!("asked for port {port}, kubeconfig says {url}"));
        }
        self.url = url.trim_end_matches('/').to_string();

        loop {
            self.assert_running("while polling /readyz");
            if let Ok((200, _)) = self.get("/readyz") {
                return;
            }
            if Instant::now() > deadline {
                let last = self.get("/readyz");
                self.fail(&format!(
                    "GET /readyz did not answer 200 in time (last: {last:?})"
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn assert_running(&mut self, when: &str) {
        let status = match self.child.as_mut() {
            Some(child) => child.try_wait().expect("try_wait"),
            None => return,
        };
        if let Some(status) = status {
            self.child = None;
            self.fail(&format!("server exited {when}: {status}"));
        }
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "wasm-apiserver in {}: {what}\n--- server log ---\n{}\n--- end of server log ---",
            self.root.path().display(),
            self.log()
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() && std::env::var_os("E2E_PRINT_SERVER_LOG").is_some() {
            eprintln!("--- server log ---\n{}\n--- end ---", self.log());
        }
    }
}

/// Reads the `server:` of the current context's cluster from a kubeconfig.
pub fn kubeconfig_server_url(kubeconfig: &str) -> Option<String> {
    let doc: serde_yaml::Value = serde_yaml::from_str(kubeconfig).ok()?;
    let current = doc.get("current-context")?.as_str()?;
    let named = |list: &str, name: &str| -> Option<serde_yaml::Value> {
        doc.get(list)?
            .as_sequence()?
            .iter()
            .find(|item| item.get("name").and_then(|n| n.as_str()) == Some(name))
            .cloned()
    };
    let context = named("contexts", current)?;
    let cluster_name = context
        .get("context")?
        .get("cluster")?
        .as_str()?
        .to_string();
    let cluster = named("clusters", &cluster_name)?;
    Some(cluster.get("cluster")?.get("server")?.as_str()?.to_string())
}

/// A minimal blocking `GET` over HTTPS/1.1 for readiness probes and simple
/// checks, trusting the server's CA and presenting the admin client
/// certificate from its `pki/` directory: returns status and body.
pub fn https_get(pki: &Path, base_url: &str, path: &str) -> std::io::Result<(u16, String)> {
    https_request(pki, base_url, "GET", path, None).map(|(status, _, body)| (status, body))
}

/// As [`https_get`], with any method and, given a bearer token, as that
/// token's user (then no client certificate is presented); returns the
/// status, the response head and the body.
pub fn https_request(
    pki: &Path,
    base_url: &str,
    method: &str,
    path: &str,
    bearer: Option<&str>,
) -> std::io::Result<(u16, String, String)> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let authority = base_url
        .strip_prefix("https://")
        .ok_or_else(|| std::io::Error::other(format!("not an https:// URL: {base_url}")))?
        .trim_end_matches('/');
    let io = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pki.join("ca.crt")).map_err(|e| io(&e))? {
        roots.add(cert.map_err(|e| io(&e))?).map_err(|e| io(&e))?;
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pki.join("admin.crt"))
        .map_err(|e| io(&e))?
        .collect::<Result<_, _>>()
        .map_err(|e| io(&e))?;
    let key = PrivateKeyDer::from_pem_file(pki.join("admin.key")).map_err(|e| io(&e))?;
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| io(&e))?
    .with_root_certificates(roots);
    let config = match bearer {
        // The token's user, not the certificate's.
        Some(_) => builder.with_no_client_auth(),
        None => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| io(&e))?,
    };
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_matches(['[', ']']);
    let name = ServerName::try_from(host.to_string()).map_err(|e| io(&e))?;
    let conn =
        rustls::ClientConnection::new(std::sync::Arc::new(config), name).map_err(|e| io(&e))?;
    let tcp = TcpStream::connect(authority)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    match stream.read_to_end(&mut response) {
        Ok(_) => {}
        // Servers may close without close_notify after a full response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
        Err(e) => return Err(e),
    }
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, head.to_string(), body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
        else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A client certificate for `subject` (`/O=group/CN=user`), signed with
/// the server's CA key as the cluster's signer signs a CSR, in
/// `<data-dir>/<dir>`: the certificate's and the key's paths.
pub fn client_certificate(server: &Server, subject: &str, dir: &str) -> (PathBuf, PathBuf) {
    let pki = server.data_dir().join("pki");
    let dir = server.data_dir().join(dir);
    std::fs::create_dir_all(&dir).expect("create the certificate's dir");
    let (key, csr, cert, ext) = (
        dir.join("client.key"),
        dir.join("client.csr"),
        dir.join("client.crt"),
        dir.join("ext.cnf"),
    );
    let run = |cmd: &mut Command| {
        let out = cmd.output().expect("run openssl");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(Command::new("openssl")
        .args(["req", "-new", "-nodes", "-newkey", "ec"])
        .args(["-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-subj", subject])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&csr));
    std::fs::write(
        &ext,
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .expect("write the extensions");
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
    (cert, key)
}

/// Path of the server binary: `WASM_APISERVER_BIN`, or the real
/// `wasm-apiserver` binary of `host/server` in the target dir and profile the
/// tests were built in. `cargo test --workspace` (and so `scripts/test`)
/// builds it beside the tests; when it is missing or older than a source
/// file of `host/` or `wit/` (a run of this package alone), the first call
/// in a test process builds it (`cargo test --workspace --features
/// wasm-apiserver/etcd --no-run --test it`, which links it).
///
/// This package does not depend on the server's crates: the tests drive the
/// binary from outside, so a change in `host/` rebuilds the server, never
/// the test binary.
pub fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("WASM_APISERVER_BIN") {
        return PathBuf::from(path);
    }
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(build_server).clone()
}

/// The newest modification time of a file under `dir` (build outputs left
/// out).
fn newest_source(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        let Ok(meta) = entry.metadata() else { continue };
        let time = if meta.is_dir() {
            if name == "target" || name == "benches" || name == "tests" {
                continue;
            }
            newest_source(&entry.path())
        } else {
            meta.modified().ok()
        };
        newest = newest.max(time);
    }
    newest
}

/// Brings the server binary up to date when needed and returns its path.
fn build_server() -> PathBuf {
    // <target>/<profile>/deps/<test exe>
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary is not in <target>/<profile>/deps");
    let target_dir = profile_dir
        .parent()
        .expect("<target>/<profile> has a parent");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let binary = profile_dir.join(format!("wasm-apiserver{}", std::env::consts::EXE_SUFFIX));
    let built = std::fs::metadata(&binary).and_then(|m| m.modified()).ok();
    let sources = [repo.join("host"), repo.join("wit")]
        .iter()
        .filter_map(|dir| newest_source(dir))
        .chain(["Cargo.lock", "Cargo.toml"].iter().filter_map(|f| {
            std::fs::metadata(repo.join(f))
                .and_then(|m| m.modified())
                .ok()
        }))
        .max();
    if built.is_some() && built >= sources {
        return binary;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // The package selection and features of `scripts/test`, so that cargo
    // resolves dependencies' features as there and reuses its build (with
    // `-p wasm-apiserver` alone it would build other variants of many
    // crates); selecting the `it` targets links host/server's binary.
    let mut build = Command::new(cargo);
    build
        .current_dir(&repo)
        .args(["test", "--quiet", "--locked", "--workspace", "--no-run"])
        .args(["--features", "wasm-apiserver/etcd", "--test", "it"])
        .arg("--target-dir")
        .arg(target_dir);
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    let out = build.output().expect("run cargo");
    assert!(
        out.status.success(),
        "building the server (cargo test --workspace --no-run --test it) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        binary.exists(),
        "{} missing after the build",
        binary.display()
    );
    binary
}

/// Directory holding the versioned kubectl binaries (`kubectl.1.27` …): the
/// one the `kubectl` dispatcher on `PATH` links to.
pub fn kubectl_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let on_path = std::env::var_os("PATH")
            .and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join("kubectl"))
                    .find(|candidate| candidate.is_file())
            })
            .expect("kubectl not found on PATH");
        let real = std::fs::canonicalize(&on_path).expect("resolve kubectl");
        real.parent()
            .expect("kubectl has a parent dir")
            .to_path_buf()
    })
    .clone()
}

/// The kubectl to run: `None` is the dispatcher on `PATH` (it picks the
/// version matching the server's `/version`), `Some("1.29")` is
/// `kubectl.1.29` beside it.
pub fn kubectl_binary(version: Option<&str>) -> PathBuf {
    match version {
        None => PathBuf::from("kubectl"),
        Some(v) => {
            let binary = kubectl_dir().join(format!("kubectl.{v}"));
            assert!(binary.is_file(), "{} does not exist", binary.display());
            binary
        }
    }
}

/// A kubectl command against `server` (with `--kubeconfig` and a private
/// `--cache-dir`), not yet started: for watches that must be spawned.
pub fn kubectl_command(server: &Server, version: Option<&str>, args: &[&str]) -> Command {
    let mut command = Command::new(kubectl_binary(version));
    command
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .arg("--cache-dir")
        .arg(server.kubectl_cache_dir())
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null());
    command
}

/// Runs kubectl to completion.
pub fn kubectl(server: &Server, version: Option<&str>, args: &[&str]) -> Output {
    kubectl_command(server, version, args)
        .output()
        .expect("run kubectl")
}

/// Runs kubectl against `server` as the holder of a bearer `token` only (no
/// admin kubeconfig; the server's CA for TLS).
pub fn kubectl_with_token(server: &Server, token: &str, args: &[&str]) -> Output {
    Command::new(kubectl_binary(None))
        .args(["--kubeconfig", "/dev/null", "--server", server.url()])
        .arg("--certificate-authority")
        .arg(server.data_dir().join("pki/ca.crt"))
        .arg("--cache-dir")
        .arg(server.kubectl_cache_dir())
        .args(["--token", token])
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl")
}

/// Runs kubectl to completion with `stdin` piped in (for `apply -f -`).
pub fn kubectl_stdin(server: &Server, version: Option<&str>, args: &[&str], stdin: &str) -> Output {
    let mut child = kubectl_command(server, version, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kubectl");
    let mut pipe = child.stdin.take().expect("stdin piped");
    pipe.write_all(stdin.as_bytes())
        .expect("write kubectl stdin");
    drop(pipe);
    child.wait_with_output().expect("wait for kubectl")
}

/// Runs kubectl and panics (showing the command, stdout, stderr and the
/// server's state) unless it exits 0; returns stdout.
pub fn kubectl_ok(server: &Server, version: Option<&str>, args: &[&str]) -> String {
    let output = kubectl(server, version, args);
    if !output.status.success() {
        eprintln!("{}", server.diagnostics());
    }
    expect_success(&output, version, args)
}

/// Panics with the command's output unless it exited 0; returns stdout.
pub fn expect_success(output: &Output, version: Option<&str>, args: &[&str]) -> String {
    assert!(
        output.status.success(),
        "kubectl{} {} failed ({}):\nstdout: {}\nstderr: {}",
        version.map(|v| format!(".{v}")).unwrap_or_default(),
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs kubectl with `-o json` appended and parses stdout.
pub fn kubectl_json(server: &Server, version: Option<&str>, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let stdout = kubectl_ok(server, version, &all);
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("kubectl {} printed no JSON ({e}):\n{stdout}", all.join(" ")))
}

/// Polls `check` every [`POLL_INTERVAL`] until it returns `Some`, or panics
/// with `what` after `deadline`.
pub fn poll_until<T>(deadline: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Writes `contents` to a fresh file under the server's temp dir (for
/// `kubectl apply -f FILE`) and returns its path.
pub fn write_manifest(server: &Server, name: &str, contents: &str) -> PathBuf {
    let dir = server.root.path().join("manifests");
    std::fs::create_dir_all(&dir).expect("create manifests dir");
    let path = dir.join(name);
    File::create(&path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .expect("write manifest");
    path
}

/// A spawned, long-running kubectl (e.g. `get -w -o json`) whose stdout is
/// collected by a background thread; killed on drop.
pub struct KubectlWatch {
    child: Child,
    chunks: std::sync::mpsc::Receiver<String>,
    stdout: String,
}

impl KubectlWatch {
    /// Spawns `kubectl ARGS` against `server`, with stdout captured and
    /// stderr sent to a pipe read on failure.
    pub fn spawn(server: &Server, version: Option<&str>, args: &[&str]) -> KubectlWatch {
        let mut child = kubectl_command(server, version, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubectl");
        let mut pipe = child.stdout.take().expect("stdout piped");
        let (tx, chunks) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0
                    || tx
                        .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                        .is_err()
                {
                    break;
                }
            }
        });
        KubectlWatch {
            child,
            chunks,
            stdout: String::new(),
        }
    }

    /// Everything printed to stdout so far.
    pub fn stdout(&self) -> &str {
        &self.stdout
    }

    /// The complete JSON documents printed so far (kubectl prints one per
    /// object or watch event, back to back).
    pub fn json_documents(&self) -> Vec<serde_json::Value> {
        serde_json::Deserializer::from_str(&self.stdout)
            .into_iter::<serde_json::Value>()
            .map_while(Result::ok)
            .collect()
    }

    /// Reads stdout until one of the JSON documents printed so far satisfies
    /// `found`, and returns it; panics with everything kubectl printed after
    /// `deadline` or if it exits first.
    pub fn wait_for_json(
        &mut self,
        deadline: Duration,
        what: &str,
        found: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let end = Instant::now() + deadline;
        loop {
            if let Some(doc) = self.json_documents().into_iter().find(|d| found(d)) {
                return doc;
            }
            let left = end.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left.min(POLL_INTERVAL * 4)) {
                Ok(chunk) => self.stdout.push_str(&chunk),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if left > Duration::ZERO => {}
                Err(e) => {
                    let _ = self.child.kill();
                    let mut stderr = String::new();
                    if let Some(mut pipe) = self.child.stderr.take() {
                        let _ = pipe.read_to_string(&mut stderr);
                    }
                    panic!(
                        "kubectl watch: no {what} ({e:?}); exit: {:?}\nstdout:\n{}\nstderr:\n{stderr}",
                        self.child.try_wait(),
                        self.stdout
                    );
                }
            }
        }
    }
}

impl Drop for KubectlWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a build script of `scripts/` (they are idempotent), panicking with
/// its stderr when it fails.
fn run_build_script(repo: &Path, script: &str) {
    let out = Command::new("bash")
        .arg(repo.join("scripts").join(script))
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap_or_else(|e| panic!("run scripts/{script}: {e}"));
    assert!(
        out.status.success(),
        "scripts/{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first-party guest components' directory (the servers' `--plugin-dir`),
/// built once per test process by `scripts/build-plugins.sh` (a no-op when
/// they are fresh).
pub fn plugin_dir() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    BUILT.get_or_init(|| run_build_script(&repo, "build-plugins.sh"));
    repo.join("plugins/target/wasm32-wasip2/release")
}

/// The example policies' directory (`examples/target`: the Python and
/// JavaScript examples, and labels-policy in Rust, Python and JavaScript),
/// built once per test process by `scripts/build-example-plugins.sh`.
pub fn example_plugin_dir() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    BUILT.get_or_init(|| run_build_script(&repo, "build-example-plugins.sh"));
    repo.join("examples/target")
}

/// The Kubewarden test policies' directory (built from Kubewarden's Rust
/// SDK for `wasm32-wasip1`), built once per test process by
/// `scripts/build-kubewarden-policies.sh`.
pub fn kubewarden_policy_dir() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    BUILT.get_or_init(|| run_build_script(&repo, "build-kubewarden-policies.sh"));
    repo.join("tests/kubewarden-policies/target/wasm32-wasip1/release")
}

/// A kube-rs client from the server's admin kubeconfig (HTTPS, cluster CA,
/// admin client certificate).
pub fn kube_client(server: &Server) -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(server.kubeconfig_path()).expect("read kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let config =
        futures::executor::block_on(kube::Config::from_custom_kubeconfig(kubeconfig, &options))
            .expect("kube config");
    kube::Client::try_from(config).expect("kube client")
}
