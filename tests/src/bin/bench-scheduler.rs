//! The scheduler's bench (issue 53): the real server, 100 Ready nodes
//! (4 CPUs, 16 GiB, 110 pods each), then 1,000 pods (100m CPU, 128 MiB)
//! created by 16 concurrent clients; a watch records when each is bound.
//! Prints the creation rate, the scheduling throughput (pods bound per
//! second from the first create to the last binding, and between the first
//! and the last binding), the spread over nodes, and one
//! `target pods-scheduled-per-second: VALUE (≥ 500) met|missed` line.
//!
//! The node lifecycle controller and `TaintNodesByCondition` are off (the
//! nodes have no kubelet to renew their Leases), so nodes stay as created.
//!
//!   bench-scheduler [--nodes N] [--pods N] [--clients N]

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use wasm_apiserver_e2e::{Server, kube_client};

struct Options {
    nodes: usize,
    pods: usize,
    clients: usize,
}

impl Options {
    fn parse() -> anyhow::Result<Options> {
        let mut o = Options {
            nodes: 100,
            pods: 1000,
            clients: 16,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value =
                || -> anyhow::Result<usize> { Ok(args.next().context("a value")?.parse()?) };
            match a.as_str() {
                "--nodes" => o.nodes = value()?,
                "--pods" => o.pods = value()?,
                "--clients" => o.clients = value()?,
                _ => bail!("unknown argument {a} (--nodes N, --pods N, --clients N)"),
            }
        }
        Ok(o)
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
        bail!("{} is missing: run scripts/bench-scheduler", path.display());
    }
    Ok(path)
}

fn main() -> anyhow::Result<()> {
    let options = Options::parse()?;
    let bin = binary()?;
    let server = Server::start_binary(
        bin.clone(),
        &[
            "--disable-admission-plugins=TaintNodesByCondition",
            "--controllers=*,-node-lifecycle-controller,-taint-eviction-controller",
        ],
    );
    println!(
        "server {} ({}), {} cores; {} nodes, {} pods, {} clients",
        bin.display(),
        bin.parent()
            .and_then(|p| p.file_name())
            .map_or("?".into(), |p| p.to_string_lossy().into_owned()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        options.nodes,
        options.pods,
        options.clients,
    );
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(run(&server, &options));
    if result.is_err() {
        eprintln!("{}", server.diagnostics());
    }
    result
}

async fn run(server: &Server, o: &Options) -> anyhow::Result<()> {
    let client = kube_client(server);
    let nodes: Api<Node> = Api::all(client.clone());
    let resources = json!({"cpu": "4", "memory": "16Gi", "pods": "110"});
    for i in 0..o.nodes {
        let name = format!("node-{i:03}");
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
            }},
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
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Follow bindings from now on.
    let rv = pods
        .list_metadata(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = pods.watch(&WatchParams::default(), &rv).await?.boxed();
    let total = o.pods;
    let watcher = tokio::spawn(async move {
        let mut bound: HashMap<String, (Instant, String)> = HashMap::new();
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
    });
    let start = Instant::now();
    futures::stream::iter(0..o.pods)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("bench-{i:05}"), "labels": {"app": "bench"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(o.clients)
        .try_collect::<Vec<()>>()
        .await?;
    let created = start.elapsed();
    let bound = watcher.await??;
    let first = bound.values().map(|b| b.0).min().context("nothing bound")?;
    let last = bound.values().map(|b| b.0).max().context("nothing bound")?;
    let all = last.duration_since(start);
    let overall = o.pods as f64 / all.as_secs_f64();
    let window = last.duration_since(first).as_secs_f64().max(1e-3);
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, n) in bound.values() {
        *per_node.entry(n.as_str()).or_default() += 1;
    }
    let (min, max) = (
        per_node.values().min().copied().unwrap_or(0),
        per_node.values().max().copied().unwrap_or(0),
    );
    println!(
        "created {} pods in {:.2} s ({:.0}/s); all bound {:.2} s after the first create",
        o.pods,
        created.as_secs_f64(),
        o.pods as f64 / created.as_secs_f64(),
        all.as_secs_f64(),
    );
    println!(
        "bound per second: {overall:.0} from the first create, {:.0} between the first and the last binding; \
         the last bound {:.3} s after the last create",
        (o.pods - 1) as f64 / window,
        all.as_secs_f64() - created.as_secs_f64(),
    );
    println!(
        "spread: {} nodes used, {min}..{max} pods per node",
        per_node.len()
    );
    let met = overall >= 500.0;
    println!(
        "target pods-scheduled-per-second: {overall:.0} (≥ 500) {}",
        if met { "met" } else { "missed" }
    );
    Ok(())
}
