//! `wasm-apiserver plugin test` of scheduler plugins: a table of nodes and
//! pods whose cases say which nodes a plugin refuses (and why) and how it
//! scores the others, run in the runtime and limits the server uses, with
//! the calls a scheduling cycle makes (the filter phase over every node,
//! the score phase over the nodes that fit).
//!
//! ```yaml
//! config: {label: score, avoidLabel: avoid}   # the plugin's config (a case may set its own)
//! nodes:                                      # Node objects (a case may set its own)
//! - {apiVersion: v1, kind: Node, metadata: {name: a, labels: {score: "80"}}}
//! cases:
//! - name: the label is the score
//!   pod: {apiVersion: v1, kind: Pod, metadata: {name: p}}   # optional: a minimal pod
//!   expect:
//!     refused: {b: "node has label avoid=true"}   # node -> part of its reason; the others must fit
//!     scores: {a: 80}                             # node -> score, of nodes that fit
//! ```

use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use wasm_apiserver_plugins::{Filtered, Limits, Runtime, SchedulerNode, SchedulerPlugin, Scored};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    config: Option<Value>,
    #[serde(default)]
    nodes: Vec<Value>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    config: Option<Value>,
    #[serde(default)]
    nodes: Option<Vec<Value>>,
    #[serde(default)]
    pod: Option<Value>,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// Node name → a substring of the reason it is refused with.
    #[serde(default)]
    refused: BTreeMap<String, String>,
    /// Node name → its score.
    #[serde(default)]
    scores: BTreeMap<String, i64>,
}

/// Whether a case table is a scheduler plugin's (it lists nodes).
pub fn is_scheduler_table(table: &Value) -> bool {
    table.get("nodes").is_some()
        || table["cases"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c.get("nodes").is_some()))
}

/// The pod a case without one schedules.
fn default_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plugin-test", "namespace": "default", "uid": "plugin-test"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    })
}

/// Runs the cases of `file` against `component`; (passed, failed).
pub async fn run_table(
    runtime: &Runtime,
    component: &Path,
    config: Option<&str>,
    file: &Path,
) -> anyhow::Result<(usize, usize)> {
    let table: Table = serde_yaml::from_slice(&std::fs::read(file)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let wasm = std::fs::read(component)?;
    let name = component
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    // One load per configuration (loads of the same bytes share the code).
    let mut loaded: HashMap<String, SchedulerPlugin> = HashMap::new();
    let (mut passed, mut failed) = (0, 0);
    for case in &table.cases {
        let cfg = match (config, case.config.as_ref().or(table.config.as_ref())) {
            (Some(text), _) => text.to_owned(),
            (None, Some(v)) => wasm_apiserver_api::admission::config_string(v),
            (None, None) => String::new(),
        };
        if !loaded.contains_key(&cfg) {
            let plugin = runtime
                .load_scheduler(&name, &wasm, &cfg, Limits::default(), None)
                .await?;
            loaded.insert(cfg.clone(), plugin);
        }
        let plugin = &loaded[&cfg];
        let nodes = case.nodes.as_ref().unwrap_or(&table.nodes);
        let pod = case.pod.clone().unwrap_or_else(default_pod);
        let problems = match check(plugin, &pod, nodes, &case.expect).await {
            Ok(p) => p,
            Err(e) => vec![e.to_string()],
        };
        if problems.is_empty() {
            passed += 1;
            println!("PASS {}", case.name);
        } else {
            failed += 1;
            println!("FAIL {}: {}", case.name, problems.join("; "));
        }
    }
    Ok((passed, failed))
}

/// One cycle's two calls; what differs from `expect`.
async fn check(
    plugin: &SchedulerPlugin,
    pod: &Value,
    nodes: &[Value],
    expect: &Expect,
) -> anyhow::Result<Vec<String>> {
    // As the scheduler sends them: records, objects for plugins that claim them.
    let records: Vec<Arc<SchedulerNode>> = nodes
        .iter()
        .map(|n| Arc::new(SchedulerNode::new(n)))
        .collect();
    let names: Vec<String> = records.iter().map(|n| n.name().to_owned()).collect();
    let pod_text = pod.to_string();
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    let state = match plugin.filter("plugin-test", &pod_text, &records).await? {
        Filtered::Refused(r) => {
            let why = format!("{:?}: {}", r.code, r.reasons.join(", "));
            for n in &names {
                refused.insert(n.clone(), why.clone());
            }
            String::new()
        }
        Filtered::Nodes { state, verdicts } => {
            for (n, v) in names.iter().zip(verdicts) {
                if let Some(r) = v {
                    refused.insert(n.clone(), format!("{:?}: {}", r.code, r.reasons.join(", ")));
                }
            }
            state
        }
    };
    let mut problems = Vec::new();
    for n in &names {
        match (refused.get(n), expect.refused.get(n)) {
            (Some(got), Some(want)) if !got.contains(want.as_str()) => problems.push(format!(
                "node {n}: expected a refusal containing {want:?}, got {got:?}"
            )),
            (Some(got), None) => {
                problems.push(format!("node {n}: expected to fit, refused: {got}"))
            }
            (None, Some(want)) => problems.push(format!(
                "node {n}: expected a refusal containing {want:?}, it fits"
            )),
            _ => {}
        }
    }
    for n in expect.refused.keys().filter(|n| !names.contains(n)) {
        problems.push(format!("no node {n} in the case"));
    }
    let fit: Vec<usize> = (0..names.len())
        .filter(|i| !refused.contains_key(&names[*i]))
        .collect();
    if expect.scores.is_empty() || fit.is_empty() {
        return Ok(problems);
    }
    let fit_records: Vec<Arc<SchedulerNode>> = fit.iter().map(|i| records[*i].clone()).collect();
    let scores: HashMap<&str, i64> = match plugin
        .score("plugin-test", &state, &pod_text, &fit_records)
        .await?
    {
        Scored::Scores(s) => fit.iter().map(|i| names[*i].as_str()).zip(s).collect(),
        Scored::Skip => HashMap::new(),
        Scored::Refused(r) => {
            problems.push(format!(
                "score refused: {:?}: {}",
                r.code,
                r.reasons.join(", ")
            ));
            return Ok(problems);
        }
    };
    for (n, want) in &expect.scores {
        match scores.get(n.as_str()) {
            Some(got) if got == want => {}
            Some(got) => problems.push(format!("node {n}: expected score {want}, got {got}")),
            None => problems.push(format!("node {n}: expected score {want}, got none")),
        }
    }
    Ok(problems)
}
