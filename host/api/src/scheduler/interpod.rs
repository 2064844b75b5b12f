//! `InterPodAffinity` (`plugins/interpodaffinity`): required pod affinity
//! and anti-affinity (the incoming pod's, and existing pods' anti-affinity
//! against it) filter; preferred terms of both, and existing pods'
//! required affinity (upstream's `hardPodAffinityWeight` 1), score.

use super::{Cluster, Code, CycleState, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, Status};
use std::collections::HashMap;

pub struct InterPodAffinity;

const NAME: &str = "InterPodAffinity";
const SCORE_STATE: &str = "PreScoreInterPodAffinity";
/// Upstream's default `hardPodAffinityWeight`.
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// The filter's reasons.
pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Counts per (topology key, value).
type TopologyCounts = HashMap<(String, String), i64>;

struct FilterState {
    /// Existing pods whose required anti-affinity selects the incoming pod.
    existing_anti: TopologyCounts,
    /// Existing pods matching all of the incoming pod's affinity terms.
    affinity: TopologyCounts,
    /// Existing pods matching each of its anti-affinity terms.
    anti: TopologyCounts,
}

fn has(counts: &TopologyCounts, key: &str, value: &str) -> i64 {
    // Lookups by borrowed pairs would need a second map shape; the maps
    // are small (one entry per domain).
    counts
        .get(&(key.to_string(), value.to_string()))
        .copied()
        .unwrap_or(0)
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &str {
        NAME
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, cluster: &Cluster) -> Status {
        let existing_with_anti = cluster
            .nodes()
            .iter()
            .any(|n| n.pods_with_required_anti_affinity > 0);
        if pod.required_affinity.is_empty()
            && pod.required_anti_affinity.is_empty()
            && !existing_with_anti
        {
            return Status::skip();
        }
        let ns = &cluster.namespace_labels;
        let mut s = FilterState {
            existing_anti: HashMap::new(),
            affinity: HashMap::new(),
            anti: HashMap::new(),
        };
        for node in cluster.nodes() {
            for existing in &node.pods {
                for t in &existing.required_anti_affinity {
                    if let Some(v) = node.labels.get(&t.topology_key)
                        && t.matches(pod, ns)
                    {
                        *s.existing_anti
                            .entry((t.topology_key.clone(), v.clone()))
                            .or_default() += 1;
                    }
                }
                if !pod.required_affinity.is_empty()
                    && pod
                        .required_affinity
                        .iter()
                        .all(|t| t.matches(existing, ns))
                {
                    for t in &pod.required_affinity {
                        if let Some(v) = node.labels.get(&t.topology_key) {
                            *s.affinity
                                .entry((t.topology_key.clone(), v.clone()))
                                .or_default() += 1;
                        }
                    }
                }
                for t in &pod.required_anti_affinity {
                    if let Some(v) = node.labels.get(&t.topology_key)
                        && t.matches(existing, ns)
                    {
                        *s.anti
                            .entry((t.topology_key.clone(), v.clone()))
                            .or_default() += 1;
                    }
                }
            }
        }
        state.write(NAME, (s, cluster.namespace_labels.clone()));
        Status::success()
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some((s, ns)) = state.read::<(FilterState, HashMap<String, super::Labels>)>(NAME)
        else {
            return Status::success();
        };
        // Affinity: every term's domain on this node holds a matching pod;
        // or no pod matches anywhere and the pod matches its own terms
        // (the first pod of a group).
        let mut pods_exist = true;
        for t in &pod.required_affinity {
            match node.labels.get(&t.topology_key) {
                Some(v) => {
                    if has(&s.affinity, &t.topology_key, v) <= 0 {
                        pods_exist = false;
                    }
                }
                None => {
                    return Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_AFFINITY);
                }
            }
        }
        let first_of_group =
            s.affinity.is_empty() && pod.required_affinity.iter().all(|t| t.matches(pod, ns));
        if !pods_exist && !first_of_group {
            return Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_AFFINITY);
        }
        for t in &pod.required_anti_affinity {
            if let Some(v) = node.labels.get(&t.topology_key)
                && has(&s.anti, &t.topology_key, v) > 0
            {
                return Status::new(Code::Unschedulable, ERR_REASON_ANTI_AFFINITY);
            }
        }
        if !s.existing_anti.is_empty()
            && node
                .labels
                .iter()
                .any(|(k, v)| has(&s.existing_anti, k, v) > 0)
        {
            return Status::new(Code::Unschedulable, ERR_REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }

    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[&NodeInfo],
        cluster: &Cluster,
    ) -> Status {
        let preferred =
            !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
        if !preferred && cluster.nodes().iter().all(|n| n.pods_with_affinity == 0) {
            return Status::skip();
        }
        let ns = &cluster.namespace_labels;
        let mut scores: TopologyCounts = HashMap::new();
        let mut add = |node: &NodeInfo, key: &str, weight: i64| {
            if let Some(v) = node.labels.get(key) {
                *scores.entry((key.to_string(), v.clone())).or_default() += weight;
            }
        };
        for node in cluster.nodes() {
            if node.labels.is_empty() || (!preferred && node.pods_with_affinity == 0) {
                continue;
            }
            for existing in &node.pods {
                for w in &pod.preferred_affinity {
                    if w.term.matches(existing, ns) {
                        add(node, &w.term.topology_key, w.weight);
                    }
                }
                for w in &pod.preferred_anti_affinity {
                    if w.term.matches(existing, ns) {
                        add(node, &w.term.topology_key, -w.weight);
                    }
                }
                if !existing.has_affinity() {
                    continue;
                }
                for t in &existing.required_affinity {
                    if t.matches(pod, ns) {
                        add(node, &t.topology_key, HARD_POD_AFFINITY_WEIGHT);
                    }
                }
                for w in &existing.preferred_affinity {
                    if w.term.matches(pod, ns) {
                        add(node, &w.term.topology_key, w.weight);
                    }
                }
                for w in &existing.preferred_anti_affinity {
                    if w.term.matches(pod, ns) {
                        add(node, &w.term.topology_key, -w.weight);
                    }
                }
            }
        }
        if scores.is_empty() {
            return Status::skip();
        }
        state.write(SCORE_STATE, scores);
        Status::success()
    }

    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(scores) = state.read::<TopologyCounts>(SCORE_STATE) else {
            return 0;
        };
        scores
            .iter()
            .filter(|((k, v), _)| node.labels.get(k) == Some(v))
            .map(|(_, s)| *s)
            .sum()
    }

    fn normalize_score(&self, _: &CycleState, _: &PodInfo, _: &[&NodeInfo], scores: &mut [i64]) {
        let (min, max) = (
            scores.iter().copied().min().unwrap_or(0),
            scores.iter().copied().max().unwrap_or(0),
        );
        let diff = max - min;
        for s in scores.iter_mut() {
            *s = if diff > 0 {
                (MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{node, pod};
    use super::super::{Cluster, Framework, HOSTNAME_LABEL, PodInfo, ZONE_LABEL};
    use super::*;
    use serde_json::{Value, json};
    use std::sync::Arc;

    fn zoned(name: &str, zone: &str) -> Value {
        let mut n = node(name, "100", "100Gi");
        n["metadata"]["labels"][ZONE_LABEL] = json!(zone);
        n
    }

    fn app(name: &str, app: &str) -> Value {
        let mut p = pod(name, "", "");
        p["metadata"]["labels"] = json!({"app": app});
        p
    }

    fn term(app: &str, key: &str) -> Value {
        json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key})
    }

    fn cluster() -> Cluster {
        let mut c = Cluster::default();
        c.set_node(&zoned("a1", "a"));
        c.set_node(&zoned("b1", "b"));
        c.add_pod("a1", Arc::new(PodInfo::new(&app("db", "db"))));
        c
    }

    #[test]
    fn required_affinity_follows_matching_pods() {
        let c = cluster();
        let mut p = app("web", "web");
        p["spec"]["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db", ZONE_LABEL)]}});
        let mut fw = Framework::default_profile();
        for _ in 0..4 {
            assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "a1");
        }
        // Nothing matches anywhere and the pod does not match its own
        // term: unschedulable everywhere.
        p["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
            json!([term("cache", ZONE_LABEL)]);
        let err = fw.schedule(&PodInfo::new(&p), &c).unwrap_err();
        assert!(
            err.message()
                .starts_with("0/2 nodes are available: 2 node(s) didn't match pod affinity rules."),
            "{}",
            err.message()
        );
        // The first pod of a group that matches its own term goes anywhere.
        let mut first = app("cache-0", "cache");
        first["spec"]["affinity"] = p["spec"]["affinity"].clone();
        assert!(fw.schedule(&PodInfo::new(&first), &c).is_ok());
    }

    #[test]
    fn anti_affinity_both_ways() {
        let c = cluster();
        let mut p = app("db2", "db");
        p["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db", HOSTNAME_LABEL)]}});
        let mut fw = Framework::default_profile();
        for _ in 0..4 {
            assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "b1");
        }
        // An existing pod's anti-affinity keeps others away from its zone.
        let mut c = Cluster::default();
        c.set_node(&zoned("a1", "a"));
        c.set_node(&zoned("b1", "b"));
        let mut loner = app("loner", "loner");
        loner["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("web", ZONE_LABEL)]}});
        c.add_pod("b1", Arc::new(PodInfo::new(&loner)));
        for _ in 0..4 {
            assert_eq!(
                fw.schedule(&PodInfo::new(&app("w", "web")), &c)
                    .unwrap()
                    .node,
                "a1"
            );
        }
        let s = {
            let info = PodInfo::new(&app("w", "web"));
            let mut state = CycleState::default();
            InterPodAffinity.pre_filter(&mut state, &info, &c);
            InterPodAffinity.filter(&state, &info, c.node("b1").unwrap())
        };
        assert_eq!(s.reasons, vec![ERR_REASON_EXISTING_ANTI_AFFINITY]);
    }

    #[test]
    fn preferred_affinity_scores() {
        let c = cluster();
        let mut p = app("web", "web");
        p["spec"]["affinity"] = json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": term("db", ZONE_LABEL)}
        ]}});
        let mut fw = Framework::default_profile();
        for _ in 0..4 {
            assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "a1");
        }
        p["spec"]["affinity"] = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": term("db", ZONE_LABEL)}
        ]}});
        for _ in 0..4 {
            assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "b1");
        }
    }
}
