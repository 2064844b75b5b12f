//! The workloads bench (issue 53): the real server binary with its
//! scheduler and workload controllers, nodes played by the stand-in node
//! agent or registered as bare Ready nodes. Scenarios, in this order:
//!
//! - `configmaps`: two servers side by side, one with every controller and
//!   the scheduler, one with none (`--controllers=` `--disable-scheduler`);
//!   ConfigMap creates per second by 16 clients, interleaved rounds; target
//!   on ÷ off ≥ 0.95×.
//! - `schedule`: 100 bare Ready nodes (4 CPUs, 16 GiB, 110 pods each) and
//!   1,000 pending pods (100m, 128 MiB) created while the scheduler is off;
//!   then the server restarts with it and binds them all: pods bound per
//!   second between the first and the last binding (the scheduling
//!   throughput, as kube-scheduler's `scheduler_perf` reports it); target
//!   ≥ 500. Also pods bound per second when they are created and scheduled
//!   at once (bounded by the creation rate).
//! - `plugins`: the `schedule` scenario's pending pods on nodes labelled
//!   `score` (0–100) and some `avoid=true`, bound by a scheduler with no
//!   plugin and by one with the `node-label-score` example (Rust) as a
//!   `SchedulerPlugin`, rounds interleaved; target wasm ÷ none ≥ 0.6×.
//!   Also the plugin's cost per (pod, node) of a filter and a score call,
//!   from the server's `wasm_apiserver_plugin_call_duration_seconds`.
//! - `deployment`: 100 agent nodes; the time from creating a Deployment of
//!   1,000 replicas to `availableReplicas` 1,000; then the server's RSS
//!   with those 1,000 pods and 100 nodes, every controller on.
//! - `idle`: the same Deployment scaled to 10,000 replicas, all
//!   available; then the server's CPU over 30 s while nothing changes but
//!   the agent's Lease renewals (100 nodes, every 10 s, as kubelets do);
//!   target ≤ 1% of a core.
//!
//! Each target prints a `target NAME: VALUE (TARGET) met|missed` line.
//!
//!   bench-workloads [SCENARIO...] [--nodes N] [--pods N] [--idle-pods N]
//!                   [--rounds N] [--creates N]

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use wasm_apiserver_e2e::node_agent::{NodeAgent, NodeSpec};
use wasm_apiserver_e2e::{Server, kube_client};

const SCENARIOS: &[&str] = &["configmaps", "schedule", "plugins", "deployment", "idle"];

struct Options {
    scenarios: Vec<String>,
    nodes: usize,
    pods: usize,
    idle_pods: usize,
    rounds: usize,
    creates: usize,
}

impl Options {
    fn parse() -> anyhow::Result<Options> {
        let mut o = Options {
            scenarios: Vec::new(),
            nodes: 100,
            pods: 1000,
            idle_pods: 10_000,
            rounds: 3,
            creates: 2000,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value =
                || -> anyhow::Result<usize> { Ok(args.next().context("a value")?.parse()?) };
            match a.as_str() {
                "--nodes" => o.nodes = value()?,
                "--pods" => o.pods = value()?,
                "--idle-pods" => o.idle_pods = value()?,
                "--rounds" => o.rounds = value()?,
                "--creates" => o.creates = value()?,
                s if SCENARIOS.contains(&s) => o.scenarios.push(s.to_string()),
                _ => bail!(
                    "unknown argument {a} (scenarios: {}; --nodes N, --pods N, --idle-pods N, \
                     --rounds N, --creates N)",
                    SCENARIOS.join(", ")
                ),
            }
        }
        if o.scenarios.is_empty() {
            o.scenarios = SCENARIOS.iter().map(|s| s.to_string()).collect();
        }
        Ok(o)
    }

    fn runs(&self, scenario: &str) -> bool {
        self.scenarios.iter().any(|s| s == scenario)
    }
}

fn binary() -> anyhow::Result<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("WASM_APISERVER_BIN") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .context("no parent dir")?
        .join(format!("wasm-apiserver{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        bail!("{} is missing: run scripts/bench-workloads", path.display());
    }
    Ok(path)
}

fn target(name: &str, value: f64, unit: &str, goal: &str, met: bool) {
    println!(
        "target {name}: {value:.3}{unit} ({goal}) {}",
        if met { "met" } else { "missed" }
    );
}

fn main() -> anyhow::Result<()> {
    let o = Options::parse()?;
    let bin = binary()?;
    println!(
        "server {} ({}), {} cores; scenarios {}",
        bin.display(),
        bin.parent()
            .and_then(|p| p.file_name())
            .map_or("?".into(), |p| p.to_string_lossy().into_owned()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        o.scenarios.join(", "),
    );
    let runtime = tokio::runtime::Runtime::new()?;
    if o.runs("configmaps") {
        configmaps(&runtime, &bin, &o)?;
    }
    if o.runs("schedule") {
        schedule(&runtime, &bin, &o)?;
    }
    if o.runs("plugins") {
        plugins(&runtime, &bin, &o)?;
    }
    if o.runs("deployment") || o.runs("idle") {
        deployment_and_idle(&runtime, &bin, &o)?;
    }
    Ok(())
}

/// Runs `f` and prints the server's diagnostics when it fails.
fn or_diagnose<T>(server: &Server, r: anyhow::Result<T>) -> anyhow::Result<T> {
    if r.is_err() {
        eprintln!("{}", server.diagnostics());
    }
    r
}

// --- configmaps: controllers on vs off --------------------------------------

fn configmaps(
    rt: &tokio::runtime::Runtime,
    bin: &std::path::Path,
    o: &Options,
) -> anyhow::Result<()> {
    println!("\n== configmaps: creates/s with every controller on vs off");
    let on = Server::start_binary(bin.to_path_buf(), &[]);
    let off = Server::start_binary(
        bin.to_path_buf(),
        &["--controllers=", "--disable-scheduler"],
    );
    let (mut on_total, mut off_total) = (0.0, 0.0);
    for round in 0..o.rounds {
        // Alternate which goes first, so neither always runs on a
        // warmer (or more fragmented) machine.
        let order: [(&str, &Server); 2] = if round % 2 == 0 {
            [("on", &on), ("off", &off)]
        } else {
            [("off", &off), ("on", &on)]
        };
        let mut line = format!("round {}:", round + 1);
        for (label, server) in order {
            let rate = or_diagnose(server, rt.block_on(create_configmaps(server, round, o)))?;
            line += &format!(" {label} {rate:.0}/s");
            if label == "on" {
                on_total += rate;
            } else {
                off_total += rate;
            }
        }
        println!("{line}");
    }
    let ratio = on_total / off_total;
    println!(
        "creates/s: on {:.0}, off {:.0} (mean of {} rounds)",
        on_total / o.rounds as f64,
        off_total / o.rounds as f64,
        o.rounds
    );
    target(
        "configmap-creates-controllers-on-vs-off",
        ratio,
        "×",
        "≥ 0.95×",
        ratio >= 0.95,
    );
    Ok(())
}

async fn create_configmaps(server: &Server, round: usize, o: &Options) -> anyhow::Result<f64> {
    let client = kube_client(server);
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let start = Instant::now();
    futures::stream::iter(0..o.creates)
        .map(|i| {
            let cms = cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("bench-{round}-{i:05}")},
                    "data": {"key": "value"},
                }))?;
                cms.create(&PostParams::default(), &cm).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(o.creates as f64 / start.elapsed().as_secs_f64())
}

// --- schedule: the scheduler's throughput -----------------------------------

fn schedule(
    rt: &tokio::runtime::Runtime,
    bin: &std::path::Path,
    o: &Options,
) -> anyhow::Result<()> {
    println!("\n== schedule: {} bare nodes, {} pods", o.nodes, o.pods);
    // The nodes have no kubelet to renew their Leases: the node lifecycle
    // controller and `TaintNodesByCondition` are off, so they stay as
    // created.
    let base = [
        "--disable-admission-plugins=TaintNodesByCondition",
        "--controllers=*,-node-lifecycle-controller,-taint-eviction-controller",
    ];
    // 1. Pods created while the scheduler is off, then bound by a
    //    scheduler that finds them all pending.
    let mut args = base.to_vec();
    args.push("--disable-scheduler");
    let mut server = Server::start_binary(bin.to_path_buf(), &args);
    let pending = or_diagnose(
        &server,
        rt.block_on(async {
            register_bare_nodes(&server, o.nodes).await?;
            create_pods(&server, "pending", o.pods, 16).await
        }),
    )?;
    println!(
        "created {} pods in {:.2} s ({:.0}/s) with the scheduler off",
        o.pods,
        pending.as_secs_f64(),
        o.pods as f64 / pending.as_secs_f64()
    );
    server.remove_args(&["--disable-scheduler"]);
    server.restart();
    let restarted = Instant::now();
    let bound = or_diagnose(&server, rt.block_on(follow_bindings(&server, o.pods, None)))?;
    let (first, last) = span(&bound)?;
    let throughput = (o.pods - 1) as f64 / last.duration_since(first).as_secs_f64().max(1e-3);
    println!(
        "bound {} pending pods: the first {:.2} s after the restart (leader election \
         included), the last {:.2} s after the first; spread {}",
        o.pods,
        first.duration_since(restarted).as_secs_f64(),
        last.duration_since(first).as_secs_f64(),
        spread(&bound),
    );
    target(
        "pods-scheduled-per-second",
        throughput,
        "",
        "≥ 500",
        throughput >= 500.0,
    );
    drop(server);

    // 2. Created and scheduled at once: what a user creating pods sees;
    //    bounded by how fast the clients create them.
    let server = Server::start_binary(bin.to_path_buf(), &base);
    or_diagnose(
        &server,
        rt.block_on(async {
            register_bare_nodes(&server, o.nodes).await?;
            let rv = list_rv(&server).await?;
            let watch = tokio::spawn({
                let client = kube_client(&server);
                let total = o.pods;
                async move { follow_bindings_with(client, total, Some(rv)).await }
            });
            let start = Instant::now();
            let created = create_pods(&server, "live", o.pods, 16).await?;
            let bound = watch.await??;
            let (_, last) = span(&bound)?;
            let all = last.duration_since(start).as_secs_f64();
            println!(
                "created and scheduled at once: created in {:.2} s ({:.0}/s), all bound {all:.2} s \
             after the first create ({:.0}/s), the last {:.3} s after the last create; spread {}",
                created.as_secs_f64(),
                o.pods as f64 / created.as_secs_f64(),
                o.pods as f64 / all,
                all - created.as_secs_f64(),
                spread(&bound),
            );
            anyhow::Ok(())
        }),
    )?;
    Ok(())
}

// --- plugins: the scheduler with a wasm plugin ------------------------------

fn plugins(rt: &tokio::runtime::Runtime, bin: &std::path::Path, o: &Options) -> anyhow::Result<()> {
    println!(
        "\n== plugins: {} labelled nodes, {} pods; no plugin vs node-label-score (wasm), {} rounds",
        o.nodes, o.pods, o.rounds
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/target");
    let module = "node-label-score-rust.wasm";
    if !dir.join(module).is_file() {
        bail!(
            "{} is missing: run scripts/build-example-plugins.sh",
            dir.join(module).display()
        );
    }
    let dir_arg = dir.to_string_lossy().into_owned();
    let args = [
        "--disable-admission-plugins=TaintNodesByCondition",
        "--controllers=*,-node-lifecycle-controller,-taint-eviction-controller",
        "--disable-scheduler",
        "--plugin-dir",
        dir_arg.as_str(),
    ];
    let mut rates: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut per_node_us = Vec::new();
    for round in 0..o.rounds {
        // Interleaved, the order flipped every round.
        let order = if round % 2 == 0 {
            ["none", "wasm"]
        } else {
            ["wasm", "none"]
        };
        for variant in order {
            let mut server = Server::start_binary(bin.to_path_buf(), &args);
            or_diagnose(
                &server,
                rt.block_on(async {
                    register_nodes(&server, o.nodes, true).await?;
                    create_pods(&server, "pending", o.pods, 16).await?;
                    if variant == "wasm" {
                        let plugins: Api<kube::api::DynamicObject> = Api::all_with(
                            kube_client(&server),
                            &kube::api::ApiResource {
                                group: "scheduling.wasm-apiserver.io".into(),
                                version: "v1alpha1".into(),
                                api_version: "scheduling.wasm-apiserver.io/v1alpha1".into(),
                                kind: "SchedulerPlugin".into(),
                                plural: "schedulerplugins".into(),
                            },
                        );
                        let obj = serde_json::from_value(json!({
                            "apiVersion": "scheduling.wasm-apiserver.io/v1alpha1",
                            "kind": "SchedulerPlugin",
                            "metadata": {"name": "label-score"},
                            "spec": {"module": {"file": module}, "weight": 1,
                                "config": {"label": "score", "avoidLabel": "avoid"}},
                        }))?;
                        plugins.create(&PostParams::default(), &obj).await?;
                    }
                    anyhow::Ok(())
                }),
            )?;
            server.remove_args(&["--disable-scheduler"]);
            server.restart();
            let bound = or_diagnose(&server, rt.block_on(follow_bindings(&server, o.pods, None)))?;
            let (first, last) = span(&bound)?;
            let rate = (o.pods - 1) as f64 / last.duration_since(first).as_secs_f64().max(1e-3);
            let avoided = bound.values().filter(|(_, n)| avoided_node(n)).count();
            println!(
                "round {round} {variant}: {rate:.0} pods/s; spread {}; on avoided nodes: {avoided}",
                spread(&bound)
            );
            if variant == "wasm" {
                if avoided > 0 {
                    bail!("the plugin let {avoided} pods onto avoided nodes");
                }
                let metrics = rt.block_on(server_metrics(&server))?;
                let (mut secs, mut calls) = (0.0, 0.0);
                for op in ["filter", "score"] {
                    let l = format!("plugin=\"label-score\",kind=\"scheduler\",op=\"{op}\"");
                    secs += metric(
                        &metrics,
                        &format!("wasm_apiserver_plugin_call_duration_seconds_sum{{{l}}}"),
                    );
                    calls += metric(
                        &metrics,
                        &format!("wasm_apiserver_plugin_call_duration_seconds_count{{{l}}}"),
                    );
                }
                // A cycle is one filter and one score call (over every
                // node and the feasible ones).
                let pairs = calls / 2.0 * o.nodes as f64;
                if pairs > 0.0 {
                    per_node_us.push(secs * 1e6 / pairs);
                }
            }
            rates.entry(variant).or_default().push(rate);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let none = median(rates.get_mut("none").context("no rounds")?);
    let wasm = median(rates.get_mut("wasm").context("no rounds")?);
    println!("median pods/s: none {none:.0}, wasm {wasm:.0}");
    if !per_node_us.is_empty() {
        let us = median(&mut per_node_us);
        println!("wasm plugin: {us:.2} µs per (pod, node) for its filter and score calls together");
    }
    target(
        "plugin-wasm-vs-none",
        wasm / none,
        "×",
        "≥ 0.6×",
        wasm / none >= 0.6,
    );
    Ok(())
}

/// Whether the node `register_nodes` labelled `avoid=true`.
fn avoided_node(name: &str) -> bool {
    name.trim_start_matches("node-")
        .parse::<usize>()
        .is_ok_and(|i: usize| i.is_multiple_of(10))
}

async fn server_metrics(server: &Server) -> anyhow::Result<String> {
    let client = kube_client(server);
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(req).await?)
}

/// The value of the sample `series` (name and labels as printed).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn register_bare_nodes(server: &Server, count: usize) -> anyhow::Result<()> {
    register_nodes(server, count, false).await
}

/// Ready nodes without a kubelet; with `scores`, each labelled `score` (a
/// spread of 0–100) and every tenth `avoid=true`.
async fn register_nodes(server: &Server, count: usize, scores: bool) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(kube_client(server));
    let resources = json!({"cpu": "4", "memory": "16Gi", "pods": "110"});
    for i in 0..count {
        let name = format!("node-{i:03}");
        let mut labels = json!({
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
        });
        if scores {
            labels["score"] = json!(((i * 37) % 101).to_string());
            if i.is_multiple_of(10) {
                labels["avoid"] = json!("true");
            }
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
        }))?;
        nodes.create(&PostParams::default(), &node).await?;
        let status = json!({"status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": chrono::Utc::now().to_rfc3339(),
                "lastTransitionTime": chrono::Utc::now().to_rfc3339()}],
        }});
        nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &kube::api::Patch::Merge(&status),
            )
            .await?;
    }
    Ok(())
}

async fn create_pods(
    server: &Server,
    prefix: &str,
    count: usize,
    clients: usize,
) -> anyhow::Result<Duration> {
    let pods: Api<Pod> = Api::namespaced(kube_client(server), "default");
    let start = Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("{prefix}-{i:05}"), "labels": {"app": "bench"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(clients)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(start.elapsed())
}

async fn list_rv(server: &Server) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(kube_client(server), "default");
    Ok(pods
        .list_metadata(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default())
}

type Bound = HashMap<String, (Instant, String)>;

async fn follow_bindings(
    server: &Server,
    total: usize,
    rv: Option<String>,
) -> anyhow::Result<Bound> {
    follow_bindings_with(kube_client(server), total, rv).await
}

/// Watches pods (from `rv`, or from a fresh list whose bound pods count as
/// bound now) until `total` have a node.
async fn follow_bindings_with(
    client: kube::Client,
    total: usize,
    rv: Option<String>,
) -> anyhow::Result<Bound> {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut bound: Bound = HashMap::new();
    let rv = match rv {
        Some(rv) => rv,
        None => {
            let list = pods.list(&Default::default()).await?;
            for p in &list.items {
                if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    bound.insert(
                        p.metadata.name.clone().unwrap_or_default(),
                        (Instant::now(), node),
                    );
                }
            }
            list.metadata.resource_version.unwrap_or_default()
        }
    };
    let mut stream = pods.watch(&WatchParams::default(), &rv).await?.boxed();
    while bound.len() < total {
        let ev = match tokio::time::timeout(Duration::from_secs(120), stream.try_next()).await {
            Ok(Ok(Some(ev))) => ev,
            Ok(Ok(None)) => bail!("the watch ended with {} bound", bound.len()),
            Ok(Err(e)) => bail!("watch: {e}"),
            Err(_) => bail!("no binding for 120 s; {} bound", bound.len()),
        };
        if let WatchEvent::Modified(p) | WatchEvent::Added(p) = ev
            && let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone())
        {
            let name = p.metadata.name.clone().unwrap_or_default();
            bound.entry(name).or_insert((Instant::now(), node));
        }
    }
    Ok(bound)
}

fn span(bound: &Bound) -> anyhow::Result<(Instant, Instant)> {
    let first = bound.values().map(|b| b.0).min().context("nothing bound")?;
    let last = bound.values().map(|b| b.0).max().context("nothing bound")?;
    Ok((first, last))
}

fn spread(bound: &Bound) -> String {
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, n) in bound.values() {
        *per_node.entry(n.as_str()).or_default() += 1;
    }
    format!(
        "{} nodes used, {}..{} pods per node",
        per_node.len(),
        per_node.values().min().copied().unwrap_or(0),
        per_node.values().max().copied().unwrap_or(0)
    )
}

// --- deployment and idle -----------------------------------------------------

fn deployment_and_idle(
    rt: &tokio::runtime::Runtime,
    bin: &std::path::Path,
    o: &Options,
) -> anyhow::Result<()> {
    println!(
        "\n== deployment: {} agent nodes, a Deployment of {} replicas",
        o.nodes, o.pods
    );
    let server = Server::start_binary(bin.to_path_buf(), &[]);
    let pid = server.pid().context("server pid")?;
    let started = Instant::now();
    let specs = (0..o.nodes)
        .map(|i| {
            NodeSpec::new(&format!("node-{i:03}"))
                .cpu("4")
                .memory("16Gi")
                .pods(110)
                .label("topology.kubernetes.io/zone", &format!("zone-{}", i % 3))
        })
        .collect();
    let agent = NodeAgent::start(&server, specs);
    println!(
        "{} nodes registered and ready in {:.1} s",
        o.nodes,
        started.elapsed().as_secs_f64()
    );
    let client = {
        let _guard = rt.enter();
        kube_client(&server)
    };
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    let result = rt.block_on(async {
        let deployment: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": o.pods,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
                },
            },
        }))?;
        let start = Instant::now();
        deployments
            .create(&PostParams::default(), &deployment)
            .await?;
        let took = wait_available(&deployments, o.pods, start).await?;
        println!(
            "Deployment of {} replicas: all available {:.2} s after the create ({:.0} pods/s)",
            o.pods,
            took.as_secs_f64(),
            o.pods as f64 / took.as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        println!(
            "server RSS with {} pods on {} nodes, every controller on: {:.1} MiB",
            o.pods,
            o.nodes,
            rss_kib(pid)? as f64 / 1024.0
        );
        if !o.runs("idle") {
            return anyhow::Ok(());
        }
        println!("\n== idle: {} pods", o.idle_pods);
        let start = Instant::now();
        deployments
            .patch(
                "web",
                &PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"replicas": o.idle_pods}})),
            )
            .await?;
        let took = wait_available(&deployments, o.idle_pods, start).await?;
        println!(
            "scaled to {}: all available {:.1} s after the patch; RSS {:.1} MiB",
            o.idle_pods,
            took.as_secs_f64(),
            rss_kib(pid)? as f64 / 1024.0
        );
        // Let the last status writes and the agent's work settle.
        tokio::time::sleep(Duration::from_secs(15)).await;
        let window = Duration::from_secs(30);
        let before = cpu_ticks(pid)?;
        tokio::time::sleep(window).await;
        let used = (cpu_ticks(pid)? - before) as f64 / clock_ticks()? as f64;
        let share = used / window.as_secs_f64();
        println!(
            "server CPU over {} s with {} idle pods on {} nodes (Lease renewals only): \
             {:.3} s ({:.2}% of a core); RSS {:.1} MiB",
            window.as_secs(),
            o.idle_pods,
            o.nodes,
            used,
            share * 100.0,
            rss_kib(pid)? as f64 / 1024.0
        );
        target(
            "idle-cpu-share-of-a-core",
            share * 100.0,
            "%",
            "≤ 1%",
            share <= 0.01,
        );
        anyhow::Ok(())
    });
    drop(agent);
    or_diagnose(&server, result)
}

async fn wait_available(
    deployments: &Api<Deployment>,
    want: usize,
    start: Instant,
) -> anyhow::Result<Duration> {
    let mut last_seen = (0, Instant::now());
    loop {
        let d = deployments.get_status("web").await?;
        let available = d
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0) as usize;
        if available >= want {
            return Ok(start.elapsed());
        }
        if available != last_seen.0 {
            last_seen = (available, Instant::now());
        } else if last_seen.1.elapsed() > Duration::from_secs(120) {
            bail!("stuck at {available} of {want} available for 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn proc_file(pid: u32, file: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .with_context(|| format!("read /proc/{pid}/{file}"))
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = proc_file(pid, "status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()?)
}

/// utime + stime of the process, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = proc_file(pid, "stat")?;
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').context("stat format")? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at 3.
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

fn clock_ticks() -> anyhow::Result<u64> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("getconf CLK_TCK")?;
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}
