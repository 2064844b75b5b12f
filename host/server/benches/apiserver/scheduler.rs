//! `scheduler-plugins` (issue 54): the scheduler's cycle in-process, 1,000
//! pods on 100 nodes labelled `score` (every tenth `avoid=true`), with no
//! plugin, with the `node-label-score` logic as a native framework plugin,
//! and with the example's Rust component as a wasm plugin (the cycle the
//! scheduler runs: the built-in filters over every node, one wasm `filter`
//! call, one wasm `score` call, the built-in scores); variants interleaved
//! over [`ROUNDS`] rounds, each pod assumed on its node as the scheduler
//! does. No HTTP, no binding: what a plugin adds to a cycle. The real
//! binary's end-to-end figure is `scripts/bench-workloads plugins`.

use crate::harness::{Error, Row};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use wasm_apiserver_api::scheduler::{
    Cluster, Code, CycleState, ExtraScores, Framework, NodeInfo, Plugin, PodInfo, Status,
};
use wasm_apiserver_plugins::{Filtered, Limits, Runtime, RuntimeConfig, SchedulerNode, Scored};

const NODES: usize = 100;
const PODS: usize = 1000;
const ROUNDS: usize = 3;
const NONE: &str = "scheduler-plugins: none";
const NATIVE: &str = "scheduler-plugins: native label score";
const WASM: &str = "scheduler-plugins: wasm label score";

fn node(i: usize) -> Value {
    let mut labels = json!({"kubernetes.io/hostname": format!("node-{i:03}"),
        "score": ((i * 37) % 101).to_string()});
    if i.is_multiple_of(10) {
        labels["avoid"] = json!("true");
    }
    let r = json!({"cpu": "4", "memory": "16Gi", "pods": "110"});
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{i:03}"), "labels": labels},
        "status": {"capacity": r, "allocatable": r}})
}

fn pod(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("p-{i:05}"), "namespace": "default", "uid": format!("u-{i}")},
        "spec": {"containers": [{"name": "c", "image": "nginx",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}})
}

/// The example's logic as a native framework plugin.
struct LabelScore;

impl Plugin for LabelScore {
    fn name(&self) -> &str {
        "LabelScore"
    }

    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        if node.labels.get("avoid").map(String::as_str) == Some("true") {
            return Status::new(
                Code::UnschedulableAndUnresolvable,
                "node has label avoid=true",
            );
        }
        Status::success()
    }

    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> i64 {
        node.labels
            .get("score")
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0)
            .clamp(0, 100)
    }
}

fn cluster() -> Cluster {
    let mut c = Cluster::default();
    for i in 0..NODES {
        c.set_node(&node(i));
    }
    c
}

/// Schedules every pod; seconds taken and pods placed on avoided nodes.
async fn run(
    variant: &str,
    plugin: Option<&wasm_apiserver_plugins::SchedulerPlugin>,
) -> (f64, usize) {
    let mut cluster = cluster();
    let mut framework = Framework::default_profile();
    if variant == NATIVE {
        let p: Arc<dyn Plugin> = Arc::new(LabelScore);
        framework.filters.push(p.clone());
        framework.scorers.push((p, 1));
    }
    let records: HashMap<String, Arc<SchedulerNode>> = (0..NODES)
        .map(|i| {
            (
                format!("node-{i:03}"),
                Arc::new(SchedulerNode::new(&node(i))),
            )
        })
        .collect();
    let pods: Vec<Value> = (0..PODS).map(pod).collect();
    let start = Instant::now();
    let mut avoided = 0;
    for p in &pods {
        let mut info = PodInfo::new(p);
        let result = match plugin {
            None => framework.schedule(&info, &cluster),
            Some(w) => {
                let mut f = framework.filter(&info, &cluster, true).expect("nodes fit");
                let text = p.to_string();
                let nodes: Vec<_> = f.feasible.iter().map(|n| records[n].clone()).collect();
                let state = match w.filter(&info.uid, &text, &nodes).await.expect("filter") {
                    Filtered::Nodes { state, verdicts } => {
                        let names = f.feasible.clone();
                        for (n, v) in names.iter().zip(verdicts) {
                            if let Some(r) = v {
                                f.refuse(
                                    "wasm",
                                    n,
                                    Status::new(Code::Unschedulable, r.reasons.join(", ")),
                                );
                            }
                        }
                        state
                    }
                    Filtered::Refused(_) => panic!("the example refuses no pod"),
                };
                let nodes: Vec<_> = f.feasible.iter().map(|n| records[n].clone()).collect();
                let extra = match w
                    .score(&info.uid, &state, &text, &nodes)
                    .await
                    .expect("score")
                {
                    Scored::Scores(s) => vec![ExtraScores {
                        weight: 1,
                        scores: f.feasible.iter().cloned().zip(s).collect(),
                    }],
                    _ => Vec::new(),
                };
                framework.score(&info, &cluster, f, &extra)
            }
        };
        let r = result.expect("a node fits");
        if r.node
            .trim_start_matches("node-")
            .parse::<usize>()
            .unwrap()
            .is_multiple_of(10)
        {
            avoided += 1;
        }
        info.node_name = r.node.clone();
        cluster.add_pod(&r.node, Arc::new(info));
    }
    (start.elapsed().as_secs_f64(), avoided)
}

pub(crate) async fn scheduler_plugins() -> Result<Vec<Row>, Error> {
    let wasm_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/target/node-label-score-rust.wasm");
    let wasm = std::fs::read(&wasm_path).map_err(|e| {
        format!(
            "{}: {e} (run scripts/build-example-plugins.sh)",
            wasm_path.display()
        )
    })?;
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let plugin = runtime
        .load_scheduler(
            "label-score",
            &wasm,
            r#"{"label":"score","avoidLabel":"avoid"}"#,
            Limits::default(),
            None,
        )
        .await?;
    let mut seconds: HashMap<&str, Vec<f64>> = HashMap::new();
    for round in 0..ROUNDS {
        let mut order = [NONE, NATIVE, WASM];
        order.rotate_left(round % 3);
        for v in order {
            let (s, avoided) = run(v, (v == WASM).then_some(&plugin)).await;
            if v != NONE && avoided > 0 {
                return Err(format!("{v}: {avoided} pods on avoided nodes").into());
            }
            seconds.entry(v).or_default().push(s);
        }
    }
    Ok([NONE, NATIVE, WASM]
        .into_iter()
        .map(|v| {
            let mut s = seconds[v].clone();
            s.sort_by(f64::total_cmp);
            let median = s[s.len() / 2];
            Row {
                scenario: v.into(),
                clients: 1,
                ops: PODS as u64,
                errors: 0,
                seconds: median,
                latencies: Vec::new(),
                cpu: None,
                note: format!(
                    "{:.0} pods/s on {NODES} nodes (median of {ROUNDS}); {:.2} µs per (pod, node)",
                    PODS as f64 / median,
                    median * 1e6 / (PODS * NODES) as f64
                ),
            }
        })
        .collect())
}

pub(crate) fn print_targets(rows: &[Row]) {
    let rate = |name: &str| {
        rows.iter()
            .find(|r| r.scenario == name)
            .map(|r| r.ops as f64 / r.seconds)
    };
    let (Some(none), Some(native), Some(wasm)) = (rate(NONE), rate(NATIVE), rate(WASM)) else {
        return;
    };
    println!(
        "issue 54: wasm ÷ none {:.2}× (target ≥ 0.6×: {}); native ÷ none {:.2}×; wasm ÷ native {:.2}×; \
         the wasm calls add {:.2} µs per (pod, node)",
        wasm / none,
        if wasm / none >= 0.6 { "met" } else { "missed" },
        native / none,
        wasm / native,
        (1.0 / wasm - 1.0 / none) * 1e6 / NODES as f64,
    );
}
