//! Several `wasm-apiserver` replicas on one real etcd cluster, driven with
//! kubectl and kube-rs: writes, watches and optimistic concurrency across
//! replicas, admission plugins registered through one replica enforced by
//! another, no acknowledged write lost when the etcd leader dies under a
//! writer, watches resuming across a replica restart, ServiceAccount tokens
//! valid on every replica sharing the signing key, and 503/504 answers
//! with a failing `/readyz` (not hangs) while etcd is unreachable.
//!
//! Every test starts its own etcd ([`EtcdCluster`], Debian's `etcd-server`:
//! run `scripts/install-etcd-deps.sh`) and its own replicas, so the server
//! under test must be built with etcd support:
//! `scripts/e2e etcd_replicas::` (the harness builds the server with its
//! `etcd` feature).

use std::collections::BTreeSet;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use serde_json::Value;
use wasm_apiserver_e2e::etcd::EtcdCluster;
use wasm_apiserver_e2e::{KubectlWatch, Server, kubectl, kubectl_ok, poll_until, write_manifest};

/// Bound on one kubectl call (`--request-timeout`): an answer, not a hang.
const REQUEST_TIMEOUT: &str = "--request-timeout=10s";

/// How long a change made through one replica may take to show on another.
const PROPAGATION: Duration = Duration::from_secs(30);

/// Starts a replica on `etcd` (all its endpoints) with extra flags.
fn replica(etcd: &EtcdCluster, extra: &[&str]) -> Server {
    let servers = etcd.servers_flag();
    let mut args = vec!["--etcd-servers", servers.as_str()];
    args.extend_from_slice(extra);
    Server::start_with_args(&args)
}

/// kubectl with [`REQUEST_TIMEOUT`].
fn run(server: &Server, args: &[&str]) -> Output {
    let mut all = vec![REQUEST_TIMEOUT];
    all.extend_from_slice(args);
    kubectl(server, None, &all)
}

/// kubectl with [`REQUEST_TIMEOUT`]; panics unless it succeeds.
fn ok(server: &Server, args: &[&str]) -> String {
    let mut all = vec![REQUEST_TIMEOUT];
    all.extend_from_slice(args);
    kubectl_ok(server, None, &all)
}

/// kubectl with [`REQUEST_TIMEOUT`] and `-o json`, parsed.
fn json(server: &Server, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let stdout = ok(server, &all);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("kubectl {all:?}: no JSON ({e})"))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `GET path` as the admin; panics on a transport error.
fn get(server: &Server, path: &str) -> (u16, String) {
    server
        .get(path)
        .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", server.diagnostics()))
}

/// `GET path` as the admin, expecting 200 and JSON.
fn get_json(server: &Server, path: &str) -> Value {
    let (status, body) = get(server, path);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// Names of the ConfigMaps in `default`, and the list's resourceVersion.
fn configmaps(server: &Server) -> (BTreeSet<String>, String) {
    let list = get_json(server, "/api/v1/namespaces/default/configmaps");
    let names = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|cm| cm["metadata"]["name"].as_str().expect("name").to_string())
        .collect();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list resourceVersion")
        .to_string();
    (names, rv)
}

/// Polls `check` until it holds or `deadline` passes; whether it held.
fn poll_until_or_timeout(deadline: Duration, mut check: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A watch event printed by `kubectl get -w --output-watch-events -o json`
/// or by a raw watch: `{"type": .., "object": ..}`.
fn is_event(doc: &Value, kind: &str, name: &str) -> bool {
    doc["type"] == kind && doc["object"]["metadata"]["name"] == name
}

#[test]
fn replicas_share_objects_watches_and_optimistic_concurrency() {
    let etcd = EtcdCluster::start(1);
    // A key prefix, to check below that the objects really live in etcd.
    let a = replica(&etcd, &["--etcd-prefix", "/e2e"]);
    let b = replica(&etcd, &["--etcd-prefix", "/e2e"]);

    // A write through A is visible through B.
    ok(
        &a,
        &["create", "configmap", "shared", "--from-literal=k=from-a"],
    );
    let on_b = json(&b, &["get", "configmap", "shared"]);
    assert_eq!(on_b["data"]["k"], "from-a", "{on_b}");
    let under_prefix = etcd.count_keys(0, "/e2e/").expect("read etcd");
    let outside = etcd.count_keys(0, "/registry/").expect("read etcd");
    assert!(
        under_prefix > 0 && outside == 0,
        "{under_prefix} keys under --etcd-prefix /e2e/, {outside} under /registry/"
    );

    // A watch on B sees changes made through A.
    let mut watch = KubectlWatch::spawn(
        &b,
        None,
        &[
            "get",
            "configmaps",
            "-w",
            "--output-watch-events",
            "-o",
            "json",
        ],
    );
    watch.wait_for_json(PROPAGATION, "ADDED shared (initial list)", |d| {
        is_event(d, "ADDED", "shared")
    });
    ok(&a, &["label", "configmap", "shared", "step=one"]);
    watch.wait_for_json(PROPAGATION, "MODIFIED shared with step=one", |d| {
        is_event(d, "MODIFIED", "shared") && d["object"]["metadata"]["labels"]["step"] == "one"
    });
    ok(&a, &["create", "configmap", "second", "--from-literal=k=v"]);
    watch.wait_for_json(PROPAGATION, "ADDED second", |d| {
        is_event(d, "ADDED", "second")
    });
    ok(&a, &["delete", "configmap", "second"]);
    watch.wait_for_json(PROPAGATION, "DELETED second", |d| {
        is_event(d, "DELETED", "second")
    });
    drop(watch);

    // Optimistic concurrency across replicas: both read the same version,
    // A writes, then B's write of its stale copy is a 409 Conflict.
    let read_a = json(&a, &["get", "configmap", "shared"]);
    let read_b = json(&b, &["get", "configmap", "shared"]);
    let rv = &read_a["metadata"]["resourceVersion"];
    assert_eq!(rv, &read_b["metadata"]["resourceVersion"]);
    ok(
        &a,
        &["label", "--overwrite", "configmap", "shared", "step=two"],
    );

    let mut stale = read_b.clone();
    stale["data"]["k"] = "from-b".into();
    let path = write_manifest(&b, "stale.json", &stale.to_string());
    let replace = run(&b, &["replace", "-v=6", "-f", path.to_str().unwrap()]);
    assert!(
        !replace.status.success(),
        "a replace with the stale resourceVersion {rv} succeeded through B"
    );
    let err = stderr(&replace);
    assert!(err.contains("409 Conflict"), "no 409 answer:\n{err}");
    assert!(
        err.contains("Error from server (Conflict)")
            && err.contains("the object has been modified"),
        "{err}"
    );

    // A's write won, on both replicas; B can write once it reads again.
    for server in [&a, &b] {
        let now = json(server, &["get", "configmap", "shared"]);
        assert_eq!(now["data"]["k"], "from-a", "{now}");
        assert_eq!(now["metadata"]["labels"]["step"], "two", "{now}");
    }
    let mut fresh = json(&b, &["get", "configmap", "shared"]);
    fresh["data"]["k"] = "from-b".into();
    let path = write_manifest(&b, "fresh.json", &fresh.to_string());
    ok(&b, &["replace", "-f", path.to_str().unwrap()]);
    let now = json(&a, &["get", "configmap", "shared"]);
    assert_eq!(now["data"]["k"], "from-b", "{now}");
}

/// `kubectl auth whoami` on `server` with a bearer token and nothing else.
fn whoami_with_token(server: &Server, token: &str) -> Output {
    wasm_apiserver_e2e::kubectl_with_token(
        server,
        token,
        &[
            REQUEST_TIMEOUT,
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    )
}

/// A ServiceAccount token issued through one replica authenticates on
/// another that shares the signing key (`--service-account-signing-key-file`),
/// and on no replica with a key of its own.
#[test]
fn service_account_tokens_work_on_replicas_sharing_the_signing_key() {
    let etcd = EtcdCluster::start(1);
    let a = replica(&etcd, &[]);
    let key = a.data_dir().join("pki/sa.key");
    let b = replica(
        &etcd,
        &["--service-account-signing-key-file", key.to_str().unwrap()],
    );
    let own_key = replica(&etcd, &[]);

    ok(&a, &["create", "serviceaccount", "bot"]);
    let token = ok(&a, &["create", "token", "bot"]);
    let token = token.trim();
    for server in [&a, &b] {
        let out = whoami_with_token(server, token);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "system:serviceaccount:default:bot"
        );
    }
    let out = whoami_with_token(&own_key, token);
    assert!(
        !out.status.success(),
        "another key must not verify the token"
    );
    assert!(stderr(&out).contains("Unauthorized"), "{}", stderr(&out));
}

/// The guest components' directory as a string flag value.
fn plugin_dir() -> String {
    wasm_apiserver_e2e::plugin_dir().display().to_string()
}

const REQUIRE_TEAM: &str = r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: require-team
spec:
  module: {file: require_labels.wasm}
  phases: [Validating]
  mode: Deny
  failurePolicy: Fail
  limits: {timeoutMillis: 300, memoryBytes: 16777216}
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [""]
    apiVersions: ["*"]
    resources: [configmaps]
  config: {labels: [team]}
"#;

#[test]
fn admission_plugins_registered_through_one_replica_apply_on_the_other() {
    let plugins = plugin_dir();
    let etcd = EtcdCluster::start(1);
    let a = replica(&etcd, &["--plugin-dir", &plugins]);
    let b = replica(&etcd, &["--plugin-dir", &plugins]);

    // Without the plugin B admits anything.
    ok(&b, &["create", "configmap", "before", "--from-literal=k=v"]);

    let path = write_manifest(&a, "require-team.yaml", REQUIRE_TEAM);
    ok(&a, &["apply", "-f", path.to_str().unwrap()]);

    // B learns about the plugin through its watch and starts denying.
    let mut n = 0;
    let denied = poll_until(PROPAGATION, "B to deny a ConfigMap without team", || {
        n += 1;
        let out = run(
            &b,
            &[
                "create",
                "configmap",
                &format!("probe-{n}"),
                "--from-literal=k=v",
            ],
        );
        (!out.status.success()).then(|| stderr(&out))
    });
    assert!(
        denied.contains("admission plugin \"require-team\" denied the request")
            && denied.contains("missing required label(s): team"),
        "{denied}"
    );
    let on_b = json(&b, &["get", "admissionplugin", "require-team"]);
    assert_eq!(on_b["spec"]["config"]["labels"][0], "team", "{on_b}");

    // A enforces it too, and a labelled ConfigMap passes on B.
    let out = run(&a, &["create", "configmap", "on-a", "--from-literal=k=v"]);
    assert!(
        stderr(&out).contains("missing required label(s): team"),
        "A did not deny: {}",
        stderr(&out)
    );
    let labelled = write_manifest(
        &b,
        "labelled.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: labelled, labels: {team: a}}\ndata: {k: v}\n",
    );
    ok(&b, &["create", "-f", labelled.to_str().unwrap()]);

    // Removed through A: B admits again.
    ok(&a, &["delete", "admissionplugin", "require-team"]);
    poll_until(
        PROPAGATION,
        "B to admit a ConfigMap without team again",
        || {
            n += 1;
            let out = run(
                &b,
                &[
                    "create",
                    "configmap",
                    &format!("probe-{n}"),
                    "--from-literal=k=v",
                ],
            );
            out.status.success().then_some(())
        },
    );
}

/// What became of one create of the writer.
enum Outcome {
    /// 201: the server acknowledged the write.
    Acked,
    /// A `Status` answer with this code and message.
    Refused(u16, String),
    /// No `Status` answer: a transport or decoding error.
    Broken(String),
    /// No answer within the request timeout.
    Hung,
}

struct Attempt {
    name: String,
    outcome: Outcome,
    took: Duration,
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, took) = (&self.name, self.took);
        match &self.outcome {
            Outcome::Acked => write!(f, "{name}: acknowledged after {took:?}"),
            Outcome::Refused(code, message) => {
                write!(f, "{name}: Status {code} after {took:?}: {message}")
            }
            Outcome::Broken(error) => write!(f, "{name}: no Status after {took:?}: {error}"),
            Outcome::Hung => write!(f, "{name}: no answer within {took:?}"),
        }
    }
}

/// Creates `w-0`, `w-1`, … through `server` until `stop`, each bounded by
/// 10 s, counting acknowledged creates in `acked`.
fn spawn_writer(
    server: &Server,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<Vec<Attempt>> {
    let kubeconfig = server.kubeconfig_path();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let client = runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let mut config =
            Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .expect("kube config");
        // Each attempt must show the server's own answer: kube retries a 503
        // by default, and a retried create whose first try committed late
        // (etcd decided it after the server's timeout) answers 409.
        config.default_retry = false;
        Client::try_from(config).expect("kube client")
    });
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let api: Api<ConfigMap> = Api::default_namespaced(client);
            let mut attempts = Vec::new();
            for i in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let name = format!("w-{i}");
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name},
                    "data": {"i": i.to_string()},
                }))
                .expect("ConfigMap");
                let start = Instant::now();
                let result = tokio::time::timeout(
                    Duration::from_secs(10),
                    api.create(&PostParams::default(), &cm),
                )
                .await;
                let outcome = match result {
                    Ok(Ok(_)) => {
                        acked.fetch_add(1, Ordering::SeqCst);
                        Outcome::Acked
                    }
                    Ok(Err(kube::Error::Api(status))) => {
                        Outcome::Refused(status.code, status.message.clone())
                    }
                    Ok(Err(e)) => Outcome::Broken(e.to_string()),
                    Err(_) => Outcome::Hung,
                };
                attempts.push(Attempt {
                    name,
                    outcome,
                    took: start.elapsed(),
                });
            }
            attempts
        })
    })
}

#[test]
fn no_acknowledged_write_lost_when_the_etcd_leader_dies_or_a_replica_restarts() {
    let mut etcd = EtcdCluster::start(3);
    let mut a = replica(&etcd, &[]);
    let b = replica(&etcd, &[]);

    // A writer through A; the etcd leader dies once it is going.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let writer = spawn_writer(&a, stop.clone(), acked.clone());
    let count = || acked.load(Ordering::SeqCst);
    poll_until(Duration::from_secs(60), "20 acknowledged creates", || {
        (count() >= 20).then_some(())
    });
    let leader = etcd.leader();
    let before_kill = count();
    let killed_at = Instant::now();
    etcd.kill_member(leader);
    let new_leader = etcd.leader();
    assert_ne!(new_leader, leader);
    let elected_after = killed_at.elapsed();
    // Not `poll_until`: on a timeout we still want the writer's record.
    let recovered = poll_until_or_timeout(Duration::from_secs(60), || count() >= before_kill + 20);
    stop.store(true, Ordering::SeqCst);
    let attempts = writer.join().expect("writer thread");

    let acked_names: BTreeSet<String> = attempts
        .iter()
        .filter(|a| matches!(a.outcome, Outcome::Acked))
        .map(|a| a.name.clone())
        .collect();
    let failures: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| !matches!(a.outcome, Outcome::Acked))
        .collect();
    let slowest = attempts.iter().map(|a| a.took).max().unwrap_or_default();
    eprintln!(
        "writer: {} creates, {} acknowledged, {} failed, slowest {slowest:?}; \
         leader {leader} killed after {before_kill} acks, new leader {new_leader} after {elected_after:?}; \
         failures:\n{}",
        attempts.len(),
        acked_names.len(),
        failures.len(),
        failures
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        recovered,
        "fewer than 20 creates acknowledged within 60 s after the etcd leader died\n{}\n{}",
        a.diagnostics(),
        etcd.logs()
    );
    for failure in &failures {
        match &failure.outcome {
            Outcome::Refused(code, _) if *code >= 500 => {}
            _ => panic!(
                "a create during the etcd election got no 5xx Status answer: {failure}\n{}",
                a.diagnostics()
            ),
        }
    }

    // Requests recover: with two of three members up, a replica's reads
    // all succeed again (after a grace period for its etcd client to
    // notice the dead member).
    for server in [&a, &b] {
        let mut last = (0, String::new());
        let recovered = poll_until_or_timeout(Duration::from_secs(20), || {
            (0..20).all(|_| {
                last = get(server, "/api/v1/namespaces/default/configmaps?limit=1");
                last.0 == 200
            })
        });
        assert!(
            recovered,
            "reads through {} still fail 20 s after the etcd election with one member down; \
             last: GET /api/v1/namespaces/default/configmaps?limit=1 -> {last:?}\n{}",
            server.url(),
            server.diagnostics()
        );
    }

    // Every acknowledged create is there, through both replicas.
    for server in [&a, &b] {
        let (names, _) = configmaps(server);
        let lost: Vec<&String> = acked_names.difference(&names).collect();
        assert!(
            lost.is_empty(),
            "acknowledged creates missing through {}: {lost:?}",
            server.url()
        );
    }
    // Requests succeed again, through both replicas.
    ok(
        &a,
        &["create", "configmap", "after-a", "--from-literal=k=v"],
    );
    ok(
        &b,
        &["create", "configmap", "after-b", "--from-literal=k=v"],
    );
    etcd.restart_member(leader);

    // Replica A goes down; B changes things meanwhile; A comes back.
    let (before, rv) = configmaps(&a);
    a.kill9();
    let first = acked_names.iter().next().expect("an acknowledged create");
    let second = acked_names.iter().nth(1).expect("two acknowledged creates");
    ok(
        &b,
        &["create", "configmap", "while-down", "--from-literal=k=v"],
    );
    ok(&b, &["label", "configmap", first, "changed=while-down"]);
    ok(&b, &["delete", "configmap", second]);
    a.restart();

    // No data lost: A lists what it had plus B's changes.
    let mut expected = before.clone();
    expected.insert("while-down".into());
    expected.remove(second);
    let (after, _) = configmaps(&a);
    assert_eq!(after, expected);
    let changed = json(&a, &["get", "configmap", first]);
    assert_eq!(
        changed["metadata"]["labels"]["changed"], "while-down",
        "{changed}"
    );

    // A watch on A from the resourceVersion taken before the restart
    // delivers what happened while A was down.
    let path = format!(
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=60"
    );
    let mut watch = KubectlWatch::spawn(&a, None, &["get", "--raw", &path]);
    watch.wait_for_json(PROPAGATION, "ADDED while-down", |d| {
        is_event(d, "ADDED", "while-down")
    });
    watch.wait_for_json(PROPAGATION, "MODIFIED first", |d| {
        is_event(d, "MODIFIED", first)
            && d["object"]["metadata"]["labels"]["changed"] == "while-down"
    });
    watch.wait_for_json(PROPAGATION, "DELETED second", |d| {
        is_event(d, "DELETED", second)
    });
    let early: Vec<Value> = watch
        .json_documents()
        .into_iter()
        .filter(|d| {
            d["object"]["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|r| r.parse::<u64>().ok())
                .is_some_and(|r| r <= rv.parse().unwrap())
        })
        .collect();
    assert!(
        early.is_empty(),
        "the watch from {rv} replayed older events: {early:?}"
    );
}

#[test]
fn unreachable_etcd_gives_503_or_504_and_failing_readyz() {
    let mut etcd = EtcdCluster::start(1);
    let a = replica(&etcd, &[]);
    ok(&a, &["create", "configmap", "kept", "--from-literal=k=v"]);
    // Warm kubectl's discovery cache while the server is healthy.
    ok(&a, &["get", "configmaps"]);

    etcd.kill_all();
    let readyz = poll_until(Duration::from_secs(30), "/readyz to fail", || {
        let (status, body) = get(&a, "/readyz");
        (status != 200).then_some((status, body))
    });
    eprintln!("/readyz with etcd down: {readyz:?}");

    // Reads and writes answer quickly with a 503/504 Status.
    for path in [
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/namespaces/default/configmaps/kept",
    ] {
        let start = Instant::now();
        let (status, body) = get(&a, path);
        let took = start.elapsed();
        eprintln!("GET {path} with etcd down: {status} after {took:?}: {body}");
        assert!(
            status == 503 || status == 504,
            "GET {path}: {status} {body}"
        );
        let doc: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"));
        assert_eq!(doc["kind"], "Status", "{doc}");
        assert_eq!(doc["code"], status, "{doc}");
        assert!(took < Duration::from_secs(15), "GET {path} took {took:?}");
    }
    for args in [
        &["get", "configmaps", "-v=6"][..],
        &[
            "create",
            "configmap",
            "refused",
            "--from-literal=k=v",
            "-v=6",
        ][..],
    ] {
        let start = Instant::now();
        let mut all = vec!["--request-timeout=60s"];
        all.extend_from_slice(args);
        let out = kubectl(&a, None, &all);
        let took = start.elapsed();
        let err = stderr(&out);
        eprintln!(
            "kubectl {args:?} with etcd down: {} after {took:?}, {} answers 503/504, last line: {}",
            out.status,
            err.matches("503 Service Unavailable").count()
                + err.matches("504 Gateway Timeout").count(),
            err.lines().last().unwrap_or("")
        );
        assert!(
            !out.status.success(),
            "kubectl {args:?} succeeded with etcd down"
        );
        assert!(
            err.contains("503 Service Unavailable") || err.contains("504 Gateway Timeout"),
            "kubectl {args:?}: no 503/504 answer:\n{err}"
        );
        assert!(
            took < Duration::from_secs(15),
            "kubectl {args:?} took {took:?} with etcd down:\n{err}"
        );
    }
    // Still alive, not crashed: the process answers its `ping` check
    // (`/healthz` and `/livez` include `etcd`, as upstream's, so they fail
    // while it is down).
    assert_eq!(get(&a, "/livez/ping").0, 200, "{}", a.diagnostics());
    assert_eq!(get(&a, "/healthz").0, 500, "{}", a.diagnostics());

    etcd.restart_all();
    poll_until(Duration::from_secs(60), "/readyz to pass again", || {
        (get(&a, "/readyz").0 == 200).then_some(())
    });
    let kept = json(&a, &["get", "configmap", "kept"]);
    assert_eq!(kept["data"]["k"], "v", "{kept}");
    ok(&a, &["create", "configmap", "after", "--from-literal=k=v"]);
}
