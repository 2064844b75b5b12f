//! The wasm-controllers scenario (issue 34), on the embedded store:
//! `namespace-defaults` as a wasm controller in the server against the same
//! logic as a kopf operator (its own Python process, the official client)
//! against a second server, interleaved: the time from creating a labelled
//! Namespace to its third generated object (a RoleBinding) being served,
//! the CPU per namespace (the servers' threads, and the operator's process),
//! and the memory each way (RSS added per loaded wasm controller against
//! the operator process's RSS). Also the reconciles/s of a no-op
//! controller over 2,000 ConfigMaps.

use crate::harness::{Api, Error, Row, cpu_sample, cpu_since, send};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use wasm_apiserver_plugins::RuntimeConfig;
use wasm_apiserver_registry::Objects;
use wasm_apiserver_registry::controllers::leader::Leadership;
use wasm_apiserver_registry::controllers::{Client, wasm};
use wasm_apiserver_storage::embedded::EmbeddedOptions;

const ROUNDS: usize = 4;
const PER_ROUND: usize = 50;
const LOADED: usize = 10;
const NOOP_KEYS: usize = 2_000;
const KOPF_VERSION: &str = "1.45.2";
/// The official Python client, as `scripts/test` installs it.
const PY_CLIENT_VERSION: &str = "33.1.0";
pub(crate) const WASM: &str = "wasm-controllers: namespace to 3rd object, wasm controller";
pub(crate) const KOPF: &str = "wasm-controllers: namespace to 3rd object, kopf operator";
/// The floor: the client itself writes the Namespace, then the three
/// objects at once (two durable commits, no controller).
pub(crate) const FLOOR: &str =
    "wasm-controllers: namespace, then its 3 objects at once, written by the client";
/// The least a controller of this server could add: a native watcher in
/// the server's process that writes the three objects at once the moment
/// the Namespace's watch event reaches it (no queue, no sandbox, no
/// server-side apply; the registry's create, admission included).
pub(crate) const NATIVE: &str =
    "wasm-controllers: namespace to 3rd object, native in-process watcher";
const NOOP: &str = "wasm-controllers: no-op reconciles";

fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/wasm32-wasip2/release")
}

fn controller(name: &str, file: &str, for_kind: (&str, &str), config: serde_json::Value) -> String {
    json!({
        "apiVersion": "controllers.wasm-apiserver.io/v1alpha1", "kind": "Controller",
        "metadata": {"name": name},
        "spec": {
            "module": {"file": file},
            "for": {"apiVersion": for_kind.0, "kind": for_kind.1},
            "owns": if file == "namespace_defaults.wasm" { json!([
                {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy"},
                {"apiVersion": "v1", "kind": "ResourceQuota"},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding"}]) } else { json!([]) },
            "serviceAccountName": "kube-system/bench",
            "workers": 2,
            "config": config,
        },
    })
    .to_string()
}

const CONTROLLERS: &str = "/apis/controllers.wasm-apiserver.io/v1alpha1/controllers";

/// Waits until controller `name` is Active.
async fn active(api: &Api, name: &str) -> Result<(), Error> {
    api.wait_active(&format!("{CONTROLLERS}/{name}")).await
}

/// A process's resident set, in bytes (`/proc/<pid>/statm`).
fn rss(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// A process's CPU time (user + system), in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0.0;
    };
    let mut rest = stat[close + 1..].split_whitespace().skip(11);
    let ticks: u64 = rest.next().and_then(|t| t.parse().ok()).unwrap_or(0)
        + rest.next().and_then(|t| t.parse().ok()).unwrap_or(0);
    ticks as f64 / 100.0
}

/// Installs kopf (pinned) when it is missing.
fn ensure_kopf() -> Result<(), Error> {
    let installed = Command::new("python3")
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('kopf'), m.version('kubernetes'))",
        ])
        .output()?;
    let wanted = format!("{KOPF_VERSION} {PY_CLIENT_VERSION}");
    if String::from_utf8_lossy(&installed.stdout).trim() == wanted {
        return Ok(());
    }
    // The operator writes its objects with the official Python client.
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg(format!("kopf=={KOPF_VERSION}"))
        .arg(format!("kubernetes=={PY_CLIENT_VERSION}"))
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()?;
    if !status.success() {
        return Err("could not install kopf".into());
    }
    Ok(())
}

/// The kopf operator, against the server at `api`.
struct Kopf(Child);

impl Drop for Kopf {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_kopf(api: &Api, dir: &Path) -> Result<Kopf, Error> {
    ensure_kopf()?;
    let kubeconfig = dir.join("kopf.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: b, cluster: {{server: 'http://{}'}}}}]\n\
             users: [{{name: b, user: {{}}}}]\ncontexts: [{{name: b, context: {{cluster: b, user: b}}}}]\n\
             current-context: b\n",
            api.addr
        ),
    )?;
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/apiserver/kopf/namespace_defaults.py");
    let log = std::fs::File::create(dir.join("kopf.log"))?;
    let child = Command::new("python3")
        .args([
            "-m",
            "kopf",
            "run",
            "--standalone",
            "--all-namespaces",
            "--quiet",
        ])
        .arg(&script)
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    Ok(Kopf(child))
}

/// The three objects, as the client writes them for the floor.
fn generated(ns: &str) -> [(String, String); 3] {
    [
        (
            format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "default-deny"},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}})
            .to_string(),
        ),
        (
            format!("/api/v1/namespaces/{ns}/resourcequotas"),
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "default-quota"},
                "spec": {"hard": {"pods": "20"}}})
            .to_string(),
        ),
        (
            format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "tenant-admins"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "tenant:bench"}]})
            .to_string(),
        ),
    ]
}

/// The minimal controller of [`NATIVE`]: follows Namespaces and, for each
/// new one labelled `tenant`, creates the three [`generated`] objects at
/// once through the registry.
async fn native_watcher(objects: Objects) {
    let resources = [
        ("networking.k8s.io", "networkpolicies"),
        ("", "resourcequotas"),
        ("rbac.authorization.k8s.io", "rolebindings"),
    ]
    .map(|(group, plural)| objects.resources.builtin(group, "v1", plural));
    let namespaces = objects.resources.builtin("", "v1", "namespaces");
    let client = Client::new(objects.clone(), "native-floor", None);
    objects
        .follow(
            &namespaces,
            |_| {},
            move |ns: Value, deleted| {
                let (client, resources) = (client.clone(), resources.clone());
                async move {
                    let name = ns["metadata"]["name"].as_str().unwrap_or_default();
                    if deleted || ns["metadata"]["labels"]["tenant"].is_null() {
                        return;
                    }
                    let writes =
                        generated(name)
                            .into_iter()
                            .zip(&resources)
                            .map(|((_, body), res)| {
                                let client = client.clone();
                                async move {
                                    let obj: Value =
                                        serde_json::from_str(&body).unwrap_or_default();
                                    // AlreadyExists on the initial list's replay is fine.
                                    let _ = client.create(res, Some(name), obj).await;
                                }
                            });
                    futures::future::join_all(writes).await;
                }
            },
        )
        .await
}

/// Namespaces whose RoleBinding `tenant-admins` has been added, as a
/// watch of every RoleBinding reports them (with when).
type Seen = tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>;

/// Opens a watch of every RoleBinding on `api` and reports each added
/// `tenant-admins` by namespace, the moment its event arrives.
async fn watch_rolebindings(api: &Api) -> Result<Seen, Error> {
    use http_body_util::BodyExt;
    let mut conn = api.connect().await?;
    let req = api.request(
        Method::GET,
        "/apis/rbac.authorization.k8s.io/v1/rolebindings?watch=true&timeoutSeconds=3600".parse()?,
        None,
    );
    conn.ready().await?;
    let resp = conn.send_request(req).await?;
    if resp.status() != StatusCode::OK {
        return Err(format!("watch returned {}", resp.status()).into());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _conn = conn;
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let at = Instant::now();
            buf.extend_from_slice(&data);
            let mut consumed = 0;
            while let Some(n) = buf[consumed..].iter().position(|b| *b == b'\n') {
                let line = &buf[consumed..consumed + n];
                consumed += n + 1;
                let Ok(ev) = serde_json::from_slice::<serde_json::Value>(line) else {
                    continue;
                };
                let o = &ev["object"]["metadata"];
                if ev["type"] == "ADDED" && o["name"] == "tenant-admins" {
                    let _ = tx.send((o["namespace"].as_str().unwrap_or_default().to_owned(), at));
                }
            }
            buf.drain(..consumed);
        }
    });
    Ok(rx)
}

/// Creates `PER_ROUND` labelled namespaces one at a time and times each
/// until a watch delivers its RoleBinding (the third object); with
/// `write_self`, the client writes the three objects itself.
async fn converge(
    api: &Api,
    seen: &mut Seen,
    prefix: &str,
    write_self: bool,
) -> Result<Vec<u32>, Error> {
    let mut conn = api.connect().await?;
    let mut extra = Vec::new();
    if write_self {
        for _ in 0..3 {
            extra.push(api.connect().await?);
        }
    }
    let mut latencies = Vec::new();
    for i in 0..PER_ROUND {
        let ns = format!("{prefix}-{i}");
        let body = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"tenant": "bench"}}})
        .to_string();
        let t = Instant::now();
        let req = api.request(
            Method::POST,
            "/api/v1/namespaces".parse()?,
            Some(("application/json", body.into())),
        );
        let (status, body) = send(&mut conn, req).await?;
        if status != StatusCode::CREATED {
            return Err(format!(
                "namespace {ns}: {status} {}",
                String::from_utf8_lossy(&body)
            )
            .into());
        }
        if write_self {
            // The three at once, one connection each, as the controller
            // writes them (so they can share a commit).
            let writes = generated(&ns).into_iter().zip(extra.iter_mut()).map(
                |((path, body), conn)| async move {
                    let req = api.request(
                        Method::POST,
                        path.parse()?,
                        Some(("application/json", body.into())),
                    );
                    let (status, body) = send(conn, req).await?;
                    if status != StatusCode::CREATED {
                        return Err::<(), Error>(
                            format!("{path}: {status} {}", String::from_utf8_lossy(&body)).into(),
                        );
                    }
                    Ok(())
                },
            );
            futures::future::try_join_all(writes).await?;
        }
        // Until the watch reports this namespace's RoleBinding.
        let at = loop {
            let Ok(Some((added, at))) =
                tokio::time::timeout(Duration::from_secs(60), seen.recv()).await
            else {
                return Err(format!("{ns}: no RoleBinding after 60 s").into());
            };
            if added == ns {
                break at;
            }
        };
        latencies.push(at.duration_since(t).as_micros().min(u32::MAX as u128) as u32);
    }
    Ok(latencies)
}

/// `controller_runtime_reconcile_total{controller=name,result="success"}`.
fn reconciled(metrics: &str, name: &str) -> u64 {
    let prefix =
        format!("controller_runtime_reconcile_total{{controller=\"{name}\",result=\"success\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0)
}

pub(crate) async fn wasm_controllers(srv: &Handle, dir: &Path) -> Result<Vec<Row>, Error> {
    let cache = dir.join("controllers-cache");
    // A server of this scenario, its store named `name`.
    let serve = |name: &str| {
        srv.spawn(crate::harness::serve_admission(
            dir.join(format!("controllers-{name}.redb")),
            plugin_dir(),
            RuntimeConfig {
                cache_dir: Some(cache.clone()),
                ..RuntimeConfig::default()
            },
            EmbeddedOptions::default(),
        ))
    };
    // The server with wasm controllers, and the kopf operator's server.
    let (wasm_server, _rt) = serve("wasm").await??;
    let state = wasm_server.state.clone();
    srv.spawn(async move {
        wasm::spawn(
            wasm::Deps {
                objects: state.objects.clone(),
                authorize: None,
                audit: None,
                metrics: state.controllers.clone(),
            },
            Leadership::always(),
        )
    })
    .await?;
    let (kopf_server, _rt2) = serve("kopf").await??;
    let (floor_server, _rt3) = serve("floor").await??;
    let (native_server, _rt4) = serve("native").await??;
    srv.spawn(native_watcher(native_server.state.objects.clone()));
    let (wapi, kapi) = (Api::new(wasm_server.addr), Api::new(kopf_server.addr));
    let (fapi, napi) = (Api::new(floor_server.addr), Api::new(native_server.addr));

    // RSS per loaded controller: one loaded first (the module compiled and
    // cached), then LOADED more, each following four kinds and idle (a
    // label no namespace has).
    let me = std::process::id().to_string();
    wapi.create(
        CONTROLLERS,
        controller(
            "nd-warm",
            "namespace_defaults.wasm",
            ("v1", "Namespace"),
            json!({"label": "warm", "manager": "warm"}),
        ),
    )
    .await?;
    active(&wapi, "nd-warm").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Two batches: the allocator grows in steps (one batch may reuse memory
    // kept from the warm-up's compile, the other pay for a new segment), so
    // the average over both is reported, with each.
    let mut slopes = Vec::new();
    for batch in 0..2 {
        let before = rss(&me);
        for i in batch * LOADED..(batch + 1) * LOADED {
            let name = format!("nd-idle-{i}");
            wapi.create(
                CONTROLLERS,
                controller(
                    &name,
                    "namespace_defaults.wasm",
                    ("v1", "Namespace"),
                    json!({"label": format!("idle-{i}"), "manager": name}),
                ),
            )
            .await?;
            active(&wapi, &name).await?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        slopes.push(rss(&me).saturating_sub(before) / LOADED as u64);
    }
    let per_controller = slopes.iter().sum::<u64>() / slopes.len().max(1) as u64;
    // They would each reconcile every new namespace: remove them.
    for i in 0..2 * LOADED {
        wapi.delete(&format!("{CONTROLLERS}/nd-idle-{i}")).await?;
    }
    wapi.delete(&format!("{CONTROLLERS}/nd-warm")).await?;

    // The measured controller and the operator.
    wapi.create(
        CONTROLLERS,
        controller(
            "namespace-defaults",
            "namespace_defaults.wasm",
            ("v1", "Namespace"),
            json!({}),
        ),
    )
    .await?;
    active(&wapi, "namespace-defaults").await?;
    let kopf = start_kopf(&kapi, dir)?;
    let kopf_pid = kopf.0.id();
    // The operator is up once it has handled a first namespace.
    converge_warmup(&kapi).await?;
    let (mut wseen, mut kseen, mut fseen, mut nseen) = (
        watch_rolebindings(&wapi).await?,
        watch_rolebindings(&kapi).await?,
        watch_rolebindings(&fapi).await?,
        watch_rolebindings(&napi).await?,
    );
    let mut rows: Vec<Row> = Vec::new();
    let mut kopf_cpu = 0.0;
    for round in 0..ROUNDS {
        for (scenario, api, seen) in [
            (WASM, &wapi, &mut wseen),
            (KOPF, &kapi, &mut kseen),
            (FLOOR, &fapi, &mut fseen),
            (NATIVE, &napi, &mut nseen),
        ] {
            let sample = cpu_sample();
            let k0 = cpu_seconds(kopf_pid);
            let started = Instant::now();
            let tag = match scenario {
                WASM => "w",
                KOPF => "k",
                NATIVE => "n",
                _ => "f",
            };
            let mut latencies =
                converge(api, seen, &format!("r{round}-{tag}"), scenario == FLOOR).await?;
            let seconds = started.elapsed().as_secs_f64();
            let cpu = cpu_since(&sample);
            if scenario == KOPF {
                kopf_cpu += cpu_seconds(kopf_pid) - k0;
            }
            latencies.sort_unstable();
            let row = Row {
                scenario: scenario.to_string(),
                clients: 1,
                ops: PER_ROUND as u64,
                errors: 0,
                seconds,
                latencies,
                cpu,
                note: String::new(),
            };
            match rows.iter_mut().find(|r| r.scenario == scenario) {
                Some(r) => crate::harness::merge(r, row),
                None => rows.push(row),
            }
        }
    }
    let kopf_rss = rss(&kopf_pid.to_string());
    drop(kopf);
    // Where the wasm controller's time goes: its reconciles and the keys'
    // wait in the queue (averages over the run).
    let text = wasm_server.state.controllers.text();
    let avg = |metric: &str, label: &str| {
        let find = |suffix: &str| {
            text.lines()
                .find_map(|l| {
                    l.strip_prefix(&format!(
                        "{metric}_{suffix}{{{label}=\"namespace-defaults\"}} "
                    ))?
                    .parse::<f64>()
                    .ok()
                })
                .unwrap_or(0.0)
        };
        find("sum") / find("count").max(1.0) * 1e3
    };
    let breakdown = format!(
        "reconciles {} averaging {:.2} ms, queue wait {:.2} ms",
        reconciled(&text, "namespace-defaults"),
        avg("controller_runtime_reconcile_time_seconds", "controller"),
        avg("workqueue_queue_duration_seconds", "name"),
    );
    for r in &mut rows {
        r.latencies.sort_unstable();
    }
    let namespaces = (ROUNDS * PER_ROUND) as f64;
    let server_cpu_per_ns = |r: &Row| {
        r.cpu
            .map_or(0.0, |c| c.server * r.seconds * 1e6 / r.ops as f64)
    };
    if let Some(r) = rows.iter_mut().find(|r| r.scenario == WASM) {
        r.note = format!(
            "server CPU {:.0} us/namespace (controller included); RSS +{per_controller} B per loaded controller (slopes {slopes:?} B over two batches of {LOADED}); {breakdown}",
            server_cpu_per_ns(r)
        );
    }
    if let Some(r) = rows.iter_mut().find(|r| r.scenario == KOPF) {
        r.note = format!(
            "server CPU {:.0} us/namespace + operator process {:.0} us/namespace; operator RSS {kopf_rss} B",
            server_cpu_per_ns(r),
            kopf_cpu * 1e6 / namespaces
        );
    }

    // No-op reconciles/s: 2,000 ConfigMaps, then a controller of them.
    let names: Vec<String> = (0..NOOP_KEYS).map(|i| format!("cm-{i}")).collect();
    wapi.create_namespaces(&["noop"]).await?;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let api = Api::new(wapi.addr);
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            for n in names.iter().skip(w).step_by(8) {
                api.create(
                    "/api/v1/namespaces/noop/configmaps",
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}})
                        .to_string(),
                )
                .await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let configmaps = {
        let req = wapi.request(Method::GET, "/api/v1/configmaps".parse()?, None);
        let (_, body) = send(&mut wapi.connect().await?, req).await?;
        let list: serde_json::Value = serde_json::from_slice(&body)?;
        list["items"].as_array().map_or(0, Vec::len) as u64
    };
    let sample = cpu_sample();
    let started = Instant::now();
    wapi.create(
        CONTROLLERS,
        controller(
            "noop",
            "noop_controller.wasm",
            ("v1", "ConfigMap"),
            json!({}),
        ),
    )
    .await?;
    let metrics = wasm_server.state.controllers.clone();
    while reconciled(&metrics.text(), "noop") < configmaps {
        if started.elapsed() > Duration::from_secs(120) {
            return Err("the no-op controller did not finish".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    rows.push(Row {
        scenario: NOOP.to_string(),
        clients: 2,
        ops: configmaps,
        errors: 0,
        seconds,
        latencies: Vec::new(),
        cpu: cpu_since(&sample),
        note: format!(
            "{configmaps} keys from the initial list, 2 workers (load and list included)"
        ),
    });
    Ok(rows)
}

/// Waits for the operator to handle a first labelled namespace.
async fn converge_warmup(api: &Api) -> Result<(), Error> {
    let mut conn = api.connect().await?;
    let body = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "warmup", "labels": {"tenant": "warmup"}}})
    .to_string();
    let req = api.request(
        Method::POST,
        "/api/v1/namespaces".parse()?,
        Some(("application/json", body.into())),
    );
    send(&mut conn, req).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let req = api.request(
            Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/namespaces/warmup/rolebindings/tenant-admins"
                .parse()?,
            None,
        );
        if send(&mut conn, req).await?.0 == StatusCode::OK {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the kopf operator did not start (see kopf.log in the bench's directory)".into())
}

pub(crate) fn print_targets(rows: &[Row]) {
    use crate::harness::{find, met};
    let (Some(w), Some(k)) = (find(rows, WASM, 1), find(rows, KOPF, 1)) else {
        return;
    };
    let floor = find(rows, FLOOR, 1);
    let p = |r: &Row, q| r.percentile(q).map_or(0.0, |d| d.as_secs_f64() * 1e3);
    let rss_of = |note: &str, key: &str| -> f64 {
        note.split(key)
            .nth(1)
            .and_then(|s| {
                s.trim_start_matches(['+', ' '])
                    .split(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    let per = rss_of(&w.note, "RSS ");
    let kopf_rss = rss_of(&k.note, "operator RSS ");
    println!("issue 34 (wasm controllers), one run, variants interleaved:");
    println!(
        "  namespace to 3rd object: wasm p50 {:.1} ms p99 {:.1} ms; kopf p50 {:.1} ms p99 {:.1} ms",
        p(w, 0.5),
        p(w, 0.99),
        p(k, 0.5),
        p(k, 0.99)
    );
    let faster = p(k, 0.5) / p(w, 0.5).max(1e-9);
    println!(
        "  convergence p50 kopf/wasm {faster:.1}x (target >= 5x): {}",
        met(faster >= 5.0)
    );
    if let Some(f) = floor {
        // What no controller can beat: the Namespace's commit, then one
        // commit of the three, with no controller between them.
        println!(
            "  the client writing the Namespace, then its three objects at once (two durable commits, \
             no controller): p50 {:.1} ms (wasm {:+.1} ms against it, kopf {:+.1} ms); \
             kopf/this {:.1}x: the most any controller could reach here",
            p(f, 0.5),
            p(w, 0.5) - p(f, 0.5),
            p(k, 0.5) - p(f, 0.5),
            p(k, 0.5) / p(f, 0.5).max(1e-9)
        );
    }
    if let Some(n) = find(rows, NATIVE, 1) {
        println!(
            "  a native watcher in the server writing the three at once (no queue, no sandbox): \
             p50 {:.1} ms (wasm {:+.1} ms against it); kopf/this {:.1}x",
            p(n, 0.5),
            p(w, 0.5) - p(n, 0.5),
            p(k, 0.5) / p(n, 0.5).max(1e-9)
        );
    }
    println!(
        "  RSS per loaded controller {:.2} MB (target <= 2 MB): {}",
        per / 1e6,
        met(per <= 2e6)
    );
    let less = kopf_rss / per.max(1.0);
    println!(
        "  memory: operator process / wasm controller {less:.0}x (target >= 10x): {}",
        met(less >= 10.0)
    );
    if let Some(n) = find(rows, NOOP, 2) {
        println!("  no-op controller: {:.0} reconciles/s", n.rate());
    }
}
