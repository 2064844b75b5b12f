//! Running a scheduler plugin natively on a case table: the format of
//! `wasm-apiserver plugin test` for scheduler plugins, so one file tests
//! the native build here and the component there.
//!
//! ```yaml
//! config: {label: score, avoidLabel: avoid}   # for every case (a case may override it)
//! nodes:                                      # Node objects (a case may override them)
//! - {apiVersion: v1, kind: Node, metadata: {name: a, labels: {score: "80"}}}
//! cases:
//! - name: a labelled node scores its label
//!   pod: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}}  # optional
//!   expect:
//!     refused: {b: "node has label avoid=true"}  # node -> substring of a reason; the others must fit
//!     scores: {a: 80}                            # node -> score 0-100 (listed nodes only)
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::scheduler::{
    Node, Object, Point, Prepared, Refusal, SchedulerPlugin, configure, pack, run_filter,
    run_normalize_score, run_pre_filter, run_pre_score, run_score, unpack,
};

/// The pod of a case that names none.
pub fn default_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
}

/// What one scheduling cycle of a plugin decided, node by node.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cycle {
    /// The refused nodes (by name) with the plugin's refusal.
    pub refused: BTreeMap<String, Refusal>,
    /// The final (normalized) score of each node that fits, by name; empty
    /// when the plugin does not score or skipped scoring.
    pub scores: BTreeMap<String, i64>,
}

/// Runs one scheduling cycle of `P` as the server's scheduler does: the
/// configuration checked, then only the points `P` claims, `pre-filter` and
/// `filter` over every node, `pre-score`, `score` and `normalize-score`
/// over the nodes that fit. `Err` is a failed cycle: a configuration
/// `check-config` refuses, a refusal from `pre-score`, `score` or
/// `normalize-score`, a score out of 0–100, or a wrong number of answers.
pub fn cycle<P: SchedulerPlugin>(
    config: &str,
    pod: &Value,
    nodes: &[Value],
) -> Result<Cycle, String> {
    configure::<P>(config).map_err(|e| format!("check-config: {e}"))?;
    let claims = |p: Point| P::POINTS.contains(&p);
    let pod = pod.to_string();
    // Packed and unpacked as the host and the component do: the objects
    // only when claimed.
    let objects: Vec<Node> = nodes
        .iter()
        .map(|n| Node::from_object(Object::new(n.clone())))
        .collect();
    let records = unpack(pack(&objects, claims(Point::NodeObjects)))
        .map_err(|e| format!("the nodes do not pack: {e}"))?;
    let names: Vec<String> = records.iter().map(|n| n.name().to_owned()).collect();
    let mut out = Cycle::default();

    let mut state = String::new();
    let mut filtering = claims(Point::Filter);
    if claims(Point::PreFilter) {
        match run_pre_filter::<P>(config, &pod) {
            Prepared::Proceed(s) => state = s,
            Prepared::Skip => filtering = false,
            Prepared::Refuse(r) => {
                for name in &names {
                    out.refused.insert(name.clone(), r.clone());
                }
                return Ok(out);
            }
        }
    }
    if filtering {
        let answers = run_filter::<P>(config, &state, &pod, &records);
        if answers.len() != records.len() {
            return Err(format!(
                "filter answered {} entries for {} nodes",
                answers.len(),
                records.len()
            ));
        }
        for (name, answer) in names.iter().zip(answers) {
            if let Some(r) = answer {
                out.refused.insert(name.clone(), r);
            }
        }
    }

    if !claims(Point::Score) {
        return Ok(out);
    }
    let (fit_names, fit_records): (Vec<String>, Vec<Node>) = names
        .iter()
        .zip(&records)
        .filter(|(n, _)| !out.refused.contains_key(*n))
        .map(|(n, t)| (n.clone(), t.clone()))
        .unzip();
    // `score` gets `pre-filter`'s state when there is no `pre-score`.
    let mut score_state = state.clone();
    if claims(Point::PreScore) {
        match run_pre_score::<P>(config, &state, &pod, &fit_records) {
            Prepared::Proceed(s) => score_state = s,
            Prepared::Skip => return Ok(out),
            Prepared::Refuse(r) => return Err(format!("pre-score refused: {r:?}")),
        }
    }
    let mut scores = run_score::<P>(config, &score_state, &pod, &fit_records)
        .map_err(|r| format!("score refused: {r:?}"))?;
    if claims(Point::NormalizeScore) {
        scores = run_normalize_score::<P>(config, &score_state, &pod, scores)
            .map_err(|r| format!("normalize-score refused: {r:?}"))?;
    }
    if scores.len() != fit_records.len() {
        return Err(format!(
            "score answered {} entries for {} nodes",
            scores.len(),
            fit_records.len()
        ));
    }
    for (name, score) in fit_names.into_iter().zip(scores) {
        if !(crate::scheduler::MIN_SCORE..=crate::scheduler::MAX_SCORE).contains(&score) {
            return Err(format!("node {name:?} scored {score}, out of 0-100"));
        }
        out.scores.insert(name, score);
    }
    Ok(out)
}

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
    pod: Option<Value>,
    #[serde(default)]
    config: Option<Value>,
    #[serde(default)]
    nodes: Option<Vec<Value>>,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    refused: BTreeMap<String, String>,
    #[serde(default)]
    scores: BTreeMap<String, i64>,
}

/// A table's `config:` as the text the plugin receives: a string as it
/// is, anything else as JSON; none is empty text.
fn config_text(config: Option<&Value>) -> String {
    match config {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

fn check(case: &Case, got: &Cycle, names: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for name in names {
        match (case.expect.refused.get(*name), got.refused.get(*name)) {
            (Some(want), Some(r)) if !r.reasons.iter().any(|x| x.contains(want.as_str())) => {
                problems.push(format!(
                    "{name}: expected a reason containing {want:?}, got {r:?}"
                ))
            }
            (Some(want), None) => {
                problems.push(format!("{name}: expected refused ({want:?}), it fits"))
            }
            (None, Some(r)) => problems.push(format!("{name}: expected to fit, refused {r:?}")),
            _ => {}
        }
    }
    for name in case
        .expect
        .refused
        .keys()
        .filter(|n| !names.contains(&n.as_str()))
    {
        problems.push(format!(
            "{name}: expected refused, but there is no such node"
        ));
    }
    for (name, want) in &case.expect.scores {
        match got.scores.get(name) {
            Some(s) if s == want => {}
            Some(s) => problems.push(format!("{name}: expected score {want}, got {s}")),
            None => problems.push(format!("{name}: expected score {want}, got none")),
        }
    }
    problems
}

/// Runs every case of a YAML table (the format above) natively; prints
/// `PASS`/`FAIL` per case and fails naming each case that differs.
pub fn run_scheduler_cases<P: SchedulerPlugin>(table: impl AsRef<Path>) -> Result<(), String> {
    let path = table.as_ref();
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let table: Table =
        serde_yaml::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut failures = String::new();
    for case in &table.cases {
        let config = config_text(case.config.as_ref().or(table.config.as_ref()));
        let nodes = case.nodes.as_deref().unwrap_or(&table.nodes);
        let pod = case.pod.clone().unwrap_or_else(default_pod);
        let names: Vec<&str> = nodes
            .iter()
            .map(|n| {
                n.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            })
            .collect();
        let problems = match cycle::<P>(&config, &pod, nodes) {
            Ok(got) => check(case, &got, &names),
            Err(e) => vec![format!("the cycle failed: {e}")],
        };
        if problems.is_empty() {
            println!("PASS {}", case.name);
        } else {
            println!("FAIL {}: {}", case.name, problems.join("; "));
            let _ = writeln!(failures, "{}: {}", case.name, problems.join("; "));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: failed cases:\n{failures}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::{Node, Pod};

    /// Refuses nodes labelled `off`, pre-scores the number of nodes, and
    /// normalizes raw scores (the `raw` label) by the highest.
    struct Scaled;
    impl SchedulerPlugin for Scaled {
        type Config = ();
        const POINTS: &'static [Point] = &[
            Point::Filter,
            Point::PreScore,
            Point::Score,
            Point::NormalizeScore,
        ];
        fn filter(_: &(), _: &str, _: &Pod, node: &Node) -> Result<(), Refusal> {
            match node.label("off") {
                Some(_) => Err(Refusal::unschedulable(format!("{} is off", node.name()))),
                None => Ok(()),
            }
        }
        fn pre_score(_: &(), _: &str, _: &Pod, nodes: &[Node]) -> Prepared {
            Prepared::Proceed(nodes.len().to_string())
        }
        fn score(_: &(), state: &str, _: &Pod, node: &Node) -> Result<i64, Refusal> {
            assert!(
                state.parse::<usize>().is_ok(),
                "pre-score's state reaches score: {state:?}"
            );
            Ok(node.label("raw").and_then(|v| v.parse().ok()).unwrap_or(0))
        }
        fn normalize_score(_: &(), _: &str, _: &Pod, scores: &mut [i64]) -> Result<(), Refusal> {
            let max = scores.iter().copied().max().unwrap_or(1).max(1);
            scores.iter_mut().for_each(|s| *s = *s * 100 / max);
            Ok(())
        }
    }

    fn node(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
    }

    #[test]
    fn a_cycle_filters_then_scores_what_fits() {
        let nodes = [
            node("a", json!({"raw": "500"})),
            node("b", json!({"raw": "1000"})),
            node("c", json!({"off": "1", "raw": "9"})),
        ];
        let got = cycle::<Scaled>("", &default_pod(), &nodes).unwrap();
        assert_eq!(got.refused.keys().collect::<Vec<_>>(), ["c"]);
        assert_eq!(
            got.scores,
            BTreeMap::from([("a".into(), 50), ("b".into(), 100)])
        );
    }

    #[test]
    fn a_table_passes_and_a_wrong_expectation_fails() {
        let dir = std::env::temp_dir().join(format!("sdk-sched-cases-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let table = dir.join("cases.yaml");
        let write = |expect: &str| {
            std::fs::write(
                &table,
                format!(
                    "nodes:\n\
                     - {{metadata: {{name: a, labels: {{raw: \"5\"}}}}}}\n\
                     - {{metadata: {{name: b, labels: {{raw: \"10\", off: x}}}}}}\n\
                     cases:\n\
                     - name: one\n  expect: {expect}\n"
                ),
            )
            .unwrap();
        };
        write("{refused: {b: is off}, scores: {a: 100}}");
        let ok = run_scheduler_cases::<Scaled>(&table);
        write("{scores: {a: 50}}");
        let bad = run_scheduler_cases::<Scaled>(&table);
        let _ = std::fs::remove_dir_all(&dir);
        ok.unwrap();
        let e = bad.unwrap_err();
        assert!(e.contains("b: expected to fit"), "{e}");
        assert!(e.contains("a: expected score 50, got 100"), "{e}");
    }

    #[test]
    fn out_of_range_scores_fail_the_cycle() {
        struct Big;
        impl SchedulerPlugin for Big {
            type Config = ();
            const POINTS: &'static [Point] = &[Point::Score];
            fn score(_: &(), _: &str, _: &Pod, _: &Node) -> Result<i64, Refusal> {
                Ok(1000)
            }
        }
        let e = cycle::<Big>("", &default_pod(), &[node("a", json!({}))]).unwrap_err();
        assert!(e.contains("out of 0-100"), "{e}");
    }

    #[test]
    fn node_objects_reach_only_the_plugins_that_claim_them() {
        /// Scores 100 when it sees the node's `score` annotation (only in
        /// the object), 0 without the object.
        struct Reads<const CLAIM: bool>;
        impl<const CLAIM: bool> SchedulerPlugin for Reads<CLAIM> {
            type Config = ();
            const POINTS: &'static [Point] = if CLAIM {
                &[Point::Score, Point::NodeObjects]
            } else {
                &[Point::Score]
            };
            fn score(_: &(), _: &str, _: &Pod, node: &Node) -> Result<i64, Refusal> {
                Ok(node.annotation("score").map_or(0, |_| 100))
            }
        }
        let mut n = node("a", json!({}));
        n["metadata"]["annotations"] = json!({"score": "yes"});
        let claimed = cycle::<Reads<true>>("", &default_pod(), std::slice::from_ref(&n));
        let unclaimed = cycle::<Reads<false>>("", &default_pod(), &[n]);
        assert_eq!(claimed.unwrap().scores["a"], 100);
        assert_eq!(unclaimed.unwrap().scores["a"], 0);
    }
}
