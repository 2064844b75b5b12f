//! `PodTopologySpread` (`plugins/podtopologyspread`): `DoNotSchedule`
//! constraints filter, `ScheduleAnyway` ones (and upstream's system
//! default constraints, for pods without constraints of their own) score.

use super::{
    Cluster, Code, CycleState, HOSTNAME_LABEL, LabelSelector, MAX_NODE_SCORE, NodeInfo, Plugin,
    PodInfo, SpreadConstraint, Status, ZONE_LABEL,
};
use std::collections::{HashMap, HashSet};

pub struct PodTopologySpread;

const NAME: &str = "PodTopologySpread";
const SCORE_STATE: &str = "PreScorePodTopologySpread";

/// The filter's reasons (`ErrReasonConstraintsNotMatch`,
/// `ErrReasonNodeLabelNotMatch`).
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// Upstream's system default constraints: hostname with skew 3, zone with
/// skew 5, both `ScheduleAnyway`, selecting what selects the pod.
pub fn system_default_constraints(selector: &LabelSelector) -> Vec<SpreadConstraint> {
    [(HOSTNAME_LABEL, 3), (ZONE_LABEL, 5)]
        .into_iter()
        .map(|(key, skew)| SpreadConstraint {
            max_skew: skew,
            topology_key: key.to_string(),
            hard: false,
            selector: selector.clone(),
            min_domains: 1,
            honor_node_affinity: true,
            honor_node_taints: false,
        })
        .collect()
}

/// Pods on `node` in `ns` that `sel` selects, terminating ones excepted
/// (upstream's `countPodsMatchSelector`).
fn count_matching(node: &NodeInfo, sel: &LabelSelector, ns: &str) -> i64 {
    node.pods
        .iter()
        .filter(|p| !p.terminating && p.namespace == ns && sel.matches(&p.labels))
        .count() as i64
}

/// Whether `node` counts for constraint `c` of `pod` (its node inclusion
/// policies).
fn included(c: &SpreadConstraint, pod: &PodInfo, node: &NodeInfo) -> bool {
    (!c.honor_node_affinity || pod.node_affinity_matches(node))
        && (!c.honor_node_taints || pod.untolerated_taint(node).is_none())
}

/// The filter's state: matching pods per (constraint, domain) and each
/// constraint's smallest domain count.
struct FilterState {
    constraints: Vec<SpreadConstraint>,
    /// Per constraint: domain value → matching pods.
    counts: Vec<HashMap<String, i64>>,
}

impl FilterState {
    /// The smallest count of constraint `i` (0 when fewer domains than
    /// `minDomains` exist).
    fn min_match(&self, i: usize) -> i64 {
        let counts = &self.counts[i];
        if (counts.len() as i64) < self.constraints[i].min_domains {
            return 0;
        }
        counts.values().copied().min().unwrap_or(0)
    }
}

/// The score's state.
struct ScoreState {
    constraints: Vec<SpreadConstraint>,
    /// Nodes that lack a key of the pod's own constraints.
    ignored: HashSet<String>,
    /// Per constraint: domain value → matching pods (not for hostname).
    counts: Vec<HashMap<String, i64>>,
    /// Per constraint: `ln(domains + 2)`.
    weights: Vec<f64>,
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &str {
        NAME
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, cluster: &Cluster) -> Status {
        let constraints: Vec<SpreadConstraint> = pod
            .spread_constraints
            .iter()
            .filter(|c| c.hard)
            .cloned()
            .collect();
        if constraints.is_empty() {
            return Status::skip();
        }
        let mut counts = vec![HashMap::new(); constraints.len()];
        for node in cluster.nodes() {
            // A node counts only when it has every constraint's key.
            if !constraints
                .iter()
                .all(|c| node.labels.contains_key(&c.topology_key))
            {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if !included(c, pod, node) {
                    continue;
                }
                let value = &node.labels[&c.topology_key];
                *counts[i].entry(value.clone()).or_insert(0) +=
                    count_matching(node, &c.selector, &pod.namespace);
            }
        }
        state.write(
            NAME,
            FilterState {
                constraints,
                counts,
            },
        );
        Status::success()
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<FilterState>(NAME) else {
            return Status::success();
        };
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = node.labels.get(&c.topology_key) else {
                return Status::new(
                    Code::UnschedulableAndUnresolvable,
                    ERR_REASON_NODE_LABEL_NOT_MATCH,
                );
            };
            let self_match = i64::from(c.selector.matches(&pod.labels));
            let matching = s.counts[i].get(value).copied().unwrap_or(0);
            let skew = matching + self_match - s.min_match(i);
            if skew > c.max_skew {
                return Status::new(Code::Unschedulable, ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }

    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: &[&NodeInfo],
        cluster: &Cluster,
    ) -> Status {
        let own = !pod.spread_constraints.is_empty();
        let constraints: Vec<SpreadConstraint> = if own {
            pod.spread_constraints
                .iter()
                .filter(|c| !c.hard)
                .cloned()
                .collect()
        } else {
            pod.default_spread_selector
                .as_ref()
                .filter(|s| !s.is_empty())
                .map(system_default_constraints)
                .unwrap_or_default()
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        let mut ignored = HashSet::new();
        let mut counts = vec![HashMap::new(); constraints.len()];
        for node in feasible {
            if own
                && !constraints
                    .iter()
                    .all(|c| node.labels.contains_key(&c.topology_key))
            {
                ignored.insert(node.name.clone());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == HOSTNAME_LABEL {
                    continue;
                }
                if let Some(v) = node.labels.get(&c.topology_key) {
                    counts[i].entry(v.clone()).or_insert(0i64);
                }
            }
        }
        let weights = constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let size = if c.topology_key == HOSTNAME_LABEL {
                    feasible.len() - ignored.len()
                } else {
                    counts[i].len()
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        for node in cluster.nodes() {
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == HOSTNAME_LABEL || !included(c, pod, node) {
                    continue;
                }
                let Some(v) = node.labels.get(&c.topology_key) else {
                    continue;
                };
                if let Some(n) = counts[i].get_mut(v) {
                    *n += count_matching(node, &c.selector, &pod.namespace);
                }
            }
        }
        state.write(
            SCORE_STATE,
            ScoreState {
                constraints,
                ignored,
                counts,
                weights,
            },
        );
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<ScoreState>(SCORE_STATE) else {
            return 0;
        };
        if s.ignored.contains(&node.name) {
            return 0;
        }
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(v) = node.labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == HOSTNAME_LABEL {
                count_matching(node, &c.selector, &pod.namespace)
            } else {
                s.counts[i].get(v).copied().unwrap_or(0)
            };
            score += count as f64 * s.weights[i] + (c.max_skew - 1) as f64;
        }
        score.round() as i64
    }

    fn normalize_score(
        &self,
        state: &CycleState,
        _: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [i64],
    ) {
        let Some(s) = state.read::<ScoreState>(SCORE_STATE) else {
            return;
        };
        let ignored = |i: usize| nodes.get(i).is_some_and(|n| s.ignored.contains(&n.name));
        let (mut min, mut max) = (i64::MAX, 0i64);
        for (i, &v) in scores.iter().enumerate() {
            if !ignored(i) {
                min = min.min(v);
                max = max.max(v);
            }
        }
        for (i, v) in scores.iter_mut().enumerate() {
            *v = if ignored(i) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *v) / max
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{node, pod};
    use super::super::{Cluster, Framework, PodInfo};
    use super::*;
    use serde_json::{Value, json};
    use std::sync::Arc;

    fn zoned(name: &str, zone: &str) -> Value {
        let mut n = node(name, "100", "100Gi");
        n["metadata"]["labels"][ZONE_LABEL] = json!(zone);
        n
    }

    fn labelled(name: &str, app: &str) -> Value {
        let mut p = pod(name, "", "");
        p["metadata"]["labels"] = json!({"app": app});
        p
    }

    fn spread(p: &mut Value, key: &str, skew: i64, when: &str) {
        p["spec"]["topologySpreadConstraints"] = json!([{
            "maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": "web"}},
        }]);
    }

    #[test]
    fn do_not_schedule_keeps_skew() {
        // Zones a (2 matching pods, one other) and b (1): with maxSkew 1
        // only zone b fits.
        let mut c = Cluster::default();
        for (n, z) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
            c.set_node(&zoned(n, z));
        }
        c.add_pod("a1", Arc::new(PodInfo::new(&labelled("w1", "web"))));
        c.add_pod("a2", Arc::new(PodInfo::new(&labelled("w2", "web"))));
        c.add_pod("b1", Arc::new(PodInfo::new(&labelled("w3", "web"))));
        c.add_pod("a2", Arc::new(PodInfo::new(&labelled("other", "db"))));
        let mut p = labelled("new", "web");
        spread(&mut p, ZONE_LABEL, 1, "DoNotSchedule");
        let mut fw = Framework::default_profile();
        for _ in 0..5 {
            assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "b1");
        }
        // Fewer domains than minDomains: the minimum counts as 0, so no
        // zone fits; a node without the key is unresolvable.
        c.set_node(&node("bare", "100", "100Gi"));
        p["spec"]["topologySpreadConstraints"][0]["minDomains"] = json!(3);
        let err = fw.schedule(&PodInfo::new(&p), &c).unwrap_err();
        assert_eq!(
            err.message(),
            "0/4 nodes are available: 1 node(s) didn't match pod topology spread constraints \
             (missing required label), 3 node(s) didn't match pod topology spread constraints. \
             preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, \
             3 No preemption victims found for incoming pod.."
        );
    }

    #[test]
    fn do_not_schedule_fails_when_skew_would_break() {
        let mut c = Cluster::default();
        c.set_node(&zoned("a1", "a"));
        c.set_node(&zoned("b1", "b"));
        c.add_pod("a1", Arc::new(PodInfo::new(&labelled("w1", "web"))));
        let mut p = labelled("new", "web");
        spread(&mut p, HOSTNAME_LABEL, 1, "DoNotSchedule");
        let mut fw = Framework::default_profile();
        assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "b1");
        c.add_pod("b1", Arc::new(PodInfo::new(&labelled("w2", "web"))));
        c.add_pod("b1", Arc::new(PodInfo::new(&labelled("w3", "web"))));
        // a1 has 1, b1 has 2: a1 only.
        assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "a1");
    }

    #[test]
    fn schedule_anyway_and_system_defaults_spread() {
        let mut c = Cluster::default();
        c.set_node(&node("a", "100", "100Gi"));
        c.set_node(&node("b", "100", "100Gi"));
        for i in 0..3 {
            c.add_pod(
                "a",
                Arc::new(PodInfo::new(&labelled(&format!("w{i}"), "web"))),
            );
        }
        let mut fw = Framework::default_profile();
        let mut p = labelled("new", "web");
        spread(&mut p, HOSTNAME_LABEL, 1, "ScheduleAnyway");
        assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "b");
        // No constraints of its own: the system defaults spread by what
        // selects it.
        let mut info = PodInfo::new(&labelled("new", "web"));
        info.default_spread_selector =
            super::super::label_selector(&json!({"matchLabels": {"app": "web"}}));
        for _ in 0..5 {
            assert_eq!(fw.schedule(&info, &c).unwrap().node, "b");
        }
    }

    #[test]
    fn normalize_matches_upstream() {
        // min 2, max 8: (8 + 2 - s) * 100 / 8.
        let mut state = CycleState::default();
        state.write(
            SCORE_STATE,
            ScoreState {
                constraints: vec![],
                ignored: HashSet::new(),
                counts: vec![],
                weights: vec![],
            },
        );
        let mut scores = vec![2, 8, 5];
        PodTopologySpread.normalize_score(&state, &PodInfo::default(), &[], &mut scores);
        assert_eq!(scores, vec![100, 25, 62]);
    }
}
