//! End-to-end: the server watched as kube-apiserver's operators watch it
//! (issue 56).
//!
//! * A real Prometheus (Debian's) scrapes `/metrics` over TLS with a client
//!   certificate of the `system:monitoring` group, and evaluates
//!   kubernetes-mixin's kube-apiserver rules and alerts, copied verbatim
//!   into `tests/fixtures/kubernetes-mixin/` with their origin: every rule
//!   evaluates without error and the SLO recording rules have data after
//!   some kubectl traffic. `promtool check metrics` finds nothing but
//!   upstream's own two counter names. A user outside the group gets 403.
//! * `/livez`, `/readyz`, `/healthz`: named checks, `?verbose`,
//!   `?exclude=`, single checks with their reason, and a failing etcd.
//! * Logs: `--logging-format=json` lines parse, carry the request's audit
//!   ID (the client's `Audit-ID`, echoed as `Audit-Id`) and user; a text
//!   log written to a file has no escape codes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use wasm_apiserver_e2e::etcd::EtcdCluster;
use wasm_apiserver_e2e::{Server, client_certificate, kubectl, kubectl_ok, poll_until};

const WAIT: Duration = Duration::from_secs(90);

/// `GET url` with curl, presenting `cert` and `key` (or nothing): the
/// status, the response head and the body.
fn curl(
    server: &Server,
    identity: Option<(&Path, &Path)>,
    path: &str,
    headers: &[&str],
) -> (u16, String, String) {
    curl_method(server, identity, "GET", path, headers, None)
}

/// [`curl`] with any method and a JSON body.
fn curl_method(
    server: &Server,
    identity: Option<(&Path, &Path)>,
    method: &str,
    path: &str,
    headers: &[&str],
    body: Option<&str>,
) -> (u16, String, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-X", method, "-D", "-", "-w", "\n%{http_code}"])
        .args(["--max-time", "30"])
        .arg("--cacert")
        .arg(server.data_dir().join("pki/ca.crt"));
    if let Some(body) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data", body]);
    }
    if let Some((cert, key)) = identity {
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .arg(format!("{}{path}", server.url()))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (rest, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    let (head, body) = rest.split_once("\r\n\r\n").unwrap_or((rest, ""));
    (
        code.trim().parse().unwrap_or(0),
        head.to_string(),
        body.to_string(),
    )
}

/// A Prometheus server in a temp dir, killed on drop.
struct Prometheus {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log =
                std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!(
                "--- prometheus log (last lines, newest first) ---\n{}",
                tail.join("\n")
            );
        }
    }
}

impl Prometheus {
    /// Scrapes `server` every second as `job="apiserver"` with `cert` and
    /// `key`, and evaluates the mixin's rules every second.
    fn start(server: &Server, cert: &Path, key: &Path) -> Prometheus {
        let dir = tempfile::Builder::new()
            .prefix("prometheus-e2e-")
            .tempdir()
            .expect("temp dir");
        // The mixin's availability group runs every 3m: every second here.
        let rules = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/kubernetes-mixin/kube-apiserver-rules.yaml"),
        )
        .expect("read the mixin's rules")
        .replace("- interval: 3m\n  name:", "- name:");
        std::fs::write(dir.path().join("rules.yaml"), rules).unwrap();
        let target = server.url().trim_start_matches("https://").to_string();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\nscrape_configs:\n- job_name: apiserver\n  scheme: https\n  tls_config:\n    ca_file: {ca}\n    cert_file: {cert}\n    key_file: {key}\n  static_configs:\n  - targets: ['{target}']\n",
            ca = server.data_dir().join("pki/ca.crt").display(),
            cert = cert.display(),
            key = key.display(),
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .current_dir(dir.path())
            .arg("--config.file=prometheus.yml")
            .arg("--storage.tsdb.path=data")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus (scripts/install-etcd-deps.sh installs it)");
        Prometheus { child, port, dir }
    }

    /// `GET path` on the Prometheus API, parsed (HTTP/1.0: the body is
    /// never chunked).
    fn get(&self, path: &str) -> Option<serde_json::Value> {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        tcp.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(tcp, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut response = String::new();
        tcp.read_to_string(&mut response).ok()?;
        let (_, body) = response.split_once("\r\n\r\n")?;
        serde_json::from_str(body).ok()
    }

    /// The result vector of an instant query.
    fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let q = percent_encoding::utf8_percent_encode(expr, percent_encoding::NON_ALPHANUMERIC);
        self.get(&format!("/api/v1/query?query={q}"))
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    }
}

#[test]
fn prometheus_scrapes_over_tls_and_the_mixin_rules_have_data() {
    // On etcd, so that a storage outage gives real 5xx answers: the
    // mixin's burn rates add the 5xx rate, and have no data until some
    // request failed.
    let mut etcd = EtcdCluster::start(1);
    let servers = etcd.servers_flag();
    let server = Server::start_with_args(&["--etcd-servers", &servers]);
    let (cert, key) =
        client_certificate(&server, "/O=system:monitoring/CN=prometheus", "prometheus");
    let (other_cert, other_key) = client_certificate(&server, "/O=team-a/CN=someone", "someone");
    let monitoring = Some((cert.as_path(), key.as_path()));
    let other = Some((other_cert.as_path(), other_key.as_path()));

    // `/metrics` and single checks need `system:monitoring`.
    assert_eq!(curl(&server, other, "/metrics", &[]).0, 403);
    assert_eq!(curl(&server, other, "/readyz/etcd", &[]).0, 403);
    assert_eq!(curl(&server, None, "/metrics", &[]).0, 403);
    let (code, _, body) = curl(&server, monitoring, "/readyz/etcd", &[]);
    assert_eq!((code, body.as_str()), (200, "ok"));

    // Traffic: writes, reads, lists, a 404, a watch.
    kubectl_ok(
        &server,
        None,
        &["create", "configmap", "seen", "--from-literal=a=b"],
    );
    kubectl_ok(&server, None, &["get", "configmap", "seen"]);
    kubectl_ok(&server, None, &["get", "configmaps", "-A"]);
    kubectl_ok(&server, None, &["label", "configmap", "seen", "x=y"]);
    let missing = kubectl(&server, None, &["get", "configmap", "missing"]);
    assert!(!missing.status.success());
    let pki = server.data_dir().join("pki");
    let admin = Some((pki.join("admin.crt"), pki.join("admin.key")));
    let admin = admin.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    let (code, _, _) = curl(
        &server,
        admin,
        "/api/v1/configmaps?watch=true&timeoutSeconds=1",
        &[],
    );
    assert_eq!(code, 200);

    // Storage down: a read and a write fail with 5xx; then it is back.
    etcd.kill_all();
    let (read, _, _) = curl(
        &server,
        admin,
        "/api/v1/namespaces/default/configmaps/seen",
        &[],
    );
    let (write, _, _) = curl_method(
        &server,
        admin,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[],
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"lost"}}"#),
    );
    assert!(
        read >= 500 && write >= 500,
        "with etcd down: GET {read}, POST {write}"
    );
    etcd.restart_all();
    poll_until(WAIT, "storage back", || {
        (curl(&server, None, "/readyz", &[]).0 == 200).then_some(())
    });

    let (code, _, metrics) = curl(&server, monitoring, "/metrics", &[]);
    assert_eq!(code, 200);
    let failed = |verb: &str| {
        metrics.lines().any(|l| {
            l.starts_with("apiserver_request_total{code=\"5")
                && l.contains("resource=\"configmaps\"")
                && l.contains(&format!("verb=\"{verb}\""))
        })
    };
    assert!(
        failed("GET") && failed("POST"),
        "the 5xx answers are not counted"
    );
    for line in [
        "apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 1",
        "apiserver_request_total{code=\"404\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\"} 1",
        "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"PATCH\",version=\"v1\"} 1",
    ] {
        assert!(metrics.contains(line), "missing {line}");
    }
    for family in [
        "apiserver_request_duration_seconds_bucket{",
        "apiserver_request_sli_duration_seconds_bucket{",
        "apiserver_response_sizes_bucket{",
        "apiserver_longrunning_requests{",
        "apiserver_current_inflight_requests{request_kind=\"mutating\"}",
        "etcd_request_duration_seconds_bucket{",
        "apiserver_storage_objects{resource=\"configmaps\"}",
        "authentication_attempts{result=\"success\"}",
        "authorization_attempts_total{result=\"allowed\"}",
        "apiserver_authorization_decisions_total{decision=\"allowed\",name=\"rbac\",type=\"RBAC\"}",
        "workqueue_depth{",
        "rest_client_requests_total{code=\"201\",host=\"loopback\",method=\"POST\"}",
        "rest_client_request_duration_seconds_bucket{host=\"loopback\",verb=\"POST\",",
        "apiserver_watch_events_total{group=\"\",kind=\"ConfigMap\",version=\"v1\"}",
        "apiserver_watch_events_sizes_bucket{group=\"\",kind=\"ConfigMap\",",
        "apiserver_admission_step_admission_duration_seconds_bucket{operation=\"CREATE\",rejected=\"false\",type=\"validate\",",
        "apiserver_admission_controller_admission_duration_seconds_bucket{name=\"ResourceQuota\",",
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(metrics.contains(family), "no {family} in /metrics");
    }
    // A watch ended: its latency was observed under WATCH.
    assert!(metrics.contains("verb=\"WATCH\""), "no WATCH series");

    // promtool's lint finds only upstream's own names: kube-apiserver
    // exposes these two counters without `_total`, and so must we.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let upstream_names = ["authentication_attempts ", "authenticated_user_requests "];
    for line in report.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            upstream_names.iter().any(|n| line.starts_with(n)),
            "promtool check metrics: {line}\n{report}"
        );
    }

    let prometheus = Prometheus::start(&server, &cert, &key);
    poll_until(WAIT, "Prometheus to scrape the server", || {
        let up = prometheus.query("up{job=\"apiserver\"}");
        (up.first()?["value"][1] == "1").then_some(())
    });
    // More traffic while Prometheus watches, so rates have two samples.
    for i in 0..5 {
        kubectl_ok(&server, None, &["create", "configmap", &format!("c{i}")]);
        kubectl_ok(&server, None, &["get", "configmaps"]);
        std::thread::sleep(Duration::from_millis(500));
    }
    for record in [
        "code_resource:apiserver_request_total:rate5m{verb=\"read\",resource=\"configmaps\"}",
        "code_resource:apiserver_request_total:rate5m{verb=\"write\",resource=\"configmaps\"}",
        "code_verb:apiserver_request_total:increase1h{code=~\"2..\"}",
        "code_verb:apiserver_request_total:increase1h{code=~\"4..\"}",
        "code:apiserver_request_total:increase30d{verb=\"write\"}",
        "cluster_verb_scope_le:apiserver_request_sli_duration_seconds_bucket:increase1h",
        "apiserver_request:availability30d{verb=\"all\"}",
        "apiserver_request:burnrate5m{verb=\"read\"}",
        "apiserver_request:burnrate1h{verb=\"write\"}",
        "cluster_quantile:apiserver_request_sli_duration_seconds:histogram_quantile{verb=\"read\"}",
        // The alerts' left-hand sides.
        "sum by(cluster) (apiserver_request:burnrate1h)",
        "sum by(cluster) (rate(apiserver_request_total{job=\"apiserver\"}[10m]))",
        "sum(rate(rest_client_requests_total{job=\"apiserver\"}[5m])) by (cluster, instance, job, namespace)",
    ] {
        poll_until(WAIT, &format!("{record} to have data"), || {
            (!prometheus.query(record).is_empty()).then_some(())
        });
    }
    // Availability counts errors by their increase while Prometheus
    // watched: the outage was before, everything since succeeded fast, so
    // it is 1 (a 404 is not an error to the SLO).
    let availability = prometheus.query("apiserver_request:availability30d{verb=\"all\"}");
    let value: f64 = availability[0]["value"][1]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(value > 0.99 && value <= 1.0, "availability {value}");
    // Every rule of the groups evaluates without error; no alert fires.
    let rules = poll_until(WAIT, "every rule evaluated", || {
        let groups = prometheus.get("/api/v1/rules")?["data"]["groups"]
            .as_array()?
            .clone();
        let rules: Vec<serde_json::Value> = groups
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        rules
            .iter()
            .all(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
            })
            .then_some(rules)
    });
    assert_eq!(rules.len(), 43);
    for r in &rules {
        assert_eq!(
            r["health"], "ok",
            "rule {} failed: {}",
            r["name"], r["lastError"]
        );
        if r["type"] == "alerting" {
            assert_eq!(
                r["state"], "inactive",
                "alert {} is {}",
                r["name"], r["state"]
            );
        }
    }
}

#[test]
fn health_checks_are_named_verbose_excludable_and_fail_with_storage() {
    let mut etcd = EtcdCluster::start(1);
    let servers = etcd.servers_flag();
    let server = Server::start_with_args(&["--etcd-servers", &servers]);
    let (cert, key) =
        client_certificate(&server, "/O=system:monitoring/CN=prometheus", "prometheus");
    let monitoring = Some((cert.as_path(), key.as_path()));
    let get = |path: &str| {
        let (code, head, body) = curl(&server, monitoring, path, &[]);
        assert!(
            code == 404
                || head
                    .to_ascii_lowercase()
                    .contains("content-type: text/plain; charset=utf-8"),
            "{path}: {head}"
        );
        (code, body)
    };
    // The bare paths are public.
    assert_eq!(curl(&server, None, "/readyz", &[]).2, "ok");
    assert_eq!(get("/livez"), (200, "ok".to_string()));
    assert_eq!(
        get("/readyz?verbose"),
        (
            200,
            "[+]ping ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]shutdown ok\nreadyz check passed\n"
                .to_string()
        )
    );
    assert_eq!(
        get("/livez?verbose").1,
        "[+]ping ok\n[+]etcd ok\nlivez check passed\n"
    );
    assert_eq!(
        get("/healthz?verbose&exclude=etcd&exclude=nope&exclude=alsono").1,
        "[+]ping ok\n[+]etcd excluded: ok\nwarn: some health checks cannot be excluded: no matches for \"alsono\",\"nope\"\nhealthz check passed\n"
    );
    assert_eq!(get("/readyz/shutdown"), (200, "ok".to_string()));
    assert_eq!(get("/livez/shutdown").0, 404);
    assert_eq!(get("/readyz/nope").0, 404);

    // Storage gone: every path fails, says which check, and a single check
    // says why; excluding it passes.
    etcd.kill_all();
    let (code, body) = poll_until(WAIT, "readyz to fail without etcd", || {
        let r = get("/readyz");
        (r.0 == 500).then_some(r)
    });
    assert_eq!(code, 500);
    assert_eq!(
        body,
        "[+]ping ok\n[-]etcd failed: reason withheld\n[-]etcd-readiness failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"
    );
    assert_eq!(get("/livez").0, 500);
    let (code, why) = get("/livez/etcd");
    assert_eq!(code, 500);
    assert!(why.starts_with("internal server error: storage"), "{why}");
    assert_eq!(get("/livez?exclude=etcd"), (200, "ok".to_string()));
    etcd.restart_all();
    poll_until(WAIT, "readyz to pass again", || {
        (get("/readyz").0 == 200).then_some(())
    });
}

#[test]
fn json_logs_parse_and_carry_the_audit_id_and_text_logs_have_no_escapes() {
    let server = Server::start_with_args(&["--logging-format=json", "-v=4"]);
    let (cert, key) = client_certificate(&server, "/O=team-a/CN=someone", "someone");
    // A forbidden request logs a line (at -v=4) in its own context.
    let (code, head, _) = curl(
        &server,
        Some((&cert, &key)),
        "/api/v1/namespaces/default/secrets",
        &["Audit-ID: e2e-audit-0001"],
    );
    assert_eq!(code, 403);
    assert!(
        head.to_ascii_lowercase()
            .contains("audit-id: e2e-audit-0001"),
        "{head}"
    );
    let line = poll_until(WAIT, "the request's log line", || {
        server
            .log()
            .lines()
            .find(|l| l.contains("e2e-audit-0001"))
            .map(String::from)
    });
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["auditID"], "e2e-audit-0001");
    assert_eq!(v["user"], "someone");
    assert_eq!(v["v"], 4);
    assert!(
        v["ts"].as_f64().unwrap() > 1.6e12,
        "ts in epoch milliseconds: {line}"
    );
    assert!(v["caller"].as_str().unwrap().contains(".rs:"), "{line}");
    // Every line the server wrote parses (the harness marks each start
    // with a `===` line of its own).
    let log = server.log();
    assert!(log.lines().count() > 3);
    for l in log
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("=== "))
    {
        let parsed: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(parsed["msg"].is_string(), "{l}");
    }
    drop(server);

    let text = Server::start();
    kubectl_ok(&text, None, &["get", "namespaces"]);
    let log = text.log();
    assert!(log.contains("serving HTTPS"), "{log}");
    assert!(!log.contains('\x1b'), "escape codes in a log file");
}
