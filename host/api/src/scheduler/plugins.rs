//! The default profile's node-local plugins, with upstream's names,
//! reasons and scores (`pkg/scheduler/framework/plugins/*`).

use super::{
    Cluster, Code, CycleState, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, Status,
    default_normalize_score,
};
use serde_json::json;

/// `NodeUnschedulable`: a node with `spec.unschedulable` takes only pods
/// that tolerate `node.kubernetes.io/unschedulable:NoSchedule`.
pub struct NodeUnschedulable;

/// Its reason (`ErrReasonUnschedulable`).
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &str {
        "NodeUnschedulable"
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let taint = json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"});
        if pod
            .tolerations
            .iter()
            .any(|t| crate::node::lifecycle::tolerates(t, &taint))
        {
            return Status::success();
        }
        Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_UNSCHEDULABLE)
    }
}

/// `NodeName`: a pod naming a node fits only there.
pub struct NodeName;

/// Its reason (`ErrReason`).
pub const ERR_REASON_NODE_NAME: &str = "node(s) didn't match the requested node name";

impl Plugin for NodeName {
    fn name(&self) -> &str {
        "NodeName"
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.node_name.is_empty() || pod.node_name == node.name {
            Status::success()
        } else {
            Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_NODE_NAME)
        }
    }
}

/// `TaintToleration`: filters on `NoSchedule` / `NoExecute` taints;
/// scores by the `PreferNoSchedule` taints a pod does not tolerate (fewer
/// is better).
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &str {
        "TaintToleration"
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.untolerated_taint(node) {
            None => Status::success(),
            Some(t) => Status::new(
                Code::UnschedulableAndUnresolvable,
                format!(
                    "node(s) had untolerated taint {{{}: {}}}",
                    t["key"].as_str().unwrap_or_default(),
                    t["value"].as_str().unwrap_or_default()
                ),
            ),
        }
    }

    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        // Only tolerations that apply to PreferNoSchedule count.
        let tolerations: Vec<&serde_json::Value> = pod
            .tolerations
            .iter()
            .filter(|t| {
                matches!(
                    t["effect"].as_str(),
                    None | Some("") | Some("PreferNoSchedule")
                )
            })
            .collect();
        node.taints
            .iter()
            .filter(|t| t["effect"].as_str() == Some("PreferNoSchedule"))
            .filter(|t| {
                !tolerations
                    .iter()
                    .any(|tol| crate::node::lifecycle::tolerates(tol, t))
            })
            .count() as i64
    }

    fn normalize_score(&self, _: &CycleState, _: &PodInfo, _: &[&NodeInfo], scores: &mut [i64]) {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
    }
}

/// `NodeAffinity`: filters on `nodeSelector` and required node affinity;
/// scores by the weights of the preferred terms a node matches.
pub struct NodeAffinity;

/// Its reason (`ErrReasonPod`).
pub const ERR_REASON_NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";

impl Plugin for NodeAffinity {
    fn name(&self) -> &str {
        "NodeAffinity"
    }

    fn pre_filter(&self, _: &mut CycleState, pod: &PodInfo, _: &Cluster) -> Status {
        if pod.node_selector.is_empty() && pod.required_node_affinity.is_none() {
            return Status::skip();
        }
        Status::success()
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.node_affinity_matches(node) {
            Status::success()
        } else {
            Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_NODE_AFFINITY)
        }
    }

    fn pre_score(&self, _: &mut CycleState, pod: &PodInfo, _: &[&NodeInfo], _: &Cluster) -> Status {
        if pod.preferred_node_affinity.is_empty() {
            return Status::skip();
        }
        Status::success()
    }

    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        pod.preferred_node_affinity
            .iter()
            .filter(|(w, t)| *w != 0 && t.matches(node))
            .map(|(w, _)| *w)
            .sum()
    }

    fn normalize_score(&self, _: &CycleState, _: &PodInfo, _: &[&NodeInfo], scores: &mut [i64]) {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
    }
}

/// `NodePorts`: a node must have the pod's host ports free.
pub struct NodePorts;

/// Its reason (`ErrReason`).
pub const ERR_REASON_NODE_PORTS: &str =
    "node(s) didn't have free ports for the requested pod ports";

impl Plugin for NodePorts {
    fn name(&self) -> &str {
        "NodePorts"
    }

    fn pre_filter(&self, _: &mut CycleState, pod: &PodInfo, _: &Cluster) -> Status {
        if pod.host_ports.is_empty() {
            return Status::skip();
        }
        Status::success()
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let conflict = pod
            .host_ports
            .iter()
            .any(|p| node.used_ports.iter().any(|u| u.conflicts(p)));
        if conflict {
            Status::new(Code::Unschedulable, ERR_REASON_NODE_PORTS)
        } else {
            Status::success()
        }
    }
}

/// `NodeResourcesFit`: requests against allocatable less what the node's
/// pods (bound and assumed) request, and the `pods` count; scores with
/// the `LeastAllocated` strategy (CPU and memory, weight 1 each).
pub struct NodeResourcesFit;

/// What does not fit on `node`, as upstream's reasons (`Too many pods`,
/// `Insufficient cpu`, ...).
pub fn insufficient(pod: &PodInfo, node: &NodeInfo) -> Vec<String> {
    let mut out = Vec::new();
    if node.pods.len() as i64 + 1 > node.allocatable.pods {
        out.push("Too many pods".to_string());
    }
    let r = &pod.requests;
    if r.is_zero() {
        return out;
    }
    let (a, u) = (&node.allocatable, &node.requested);
    if a.milli_cpu < r.milli_cpu + u.milli_cpu {
        out.push("Insufficient cpu".into());
    }
    if a.memory < r.memory + u.memory {
        out.push("Insufficient memory".into());
    }
    if a.ephemeral_storage < r.ephemeral_storage + u.ephemeral_storage {
        out.push("Insufficient ephemeral-storage".into());
    }
    for (name, q) in &r.scalar {
        if *q == 0 {
            continue;
        }
        let have = a.scalar.get(name).copied().unwrap_or(0);
        let used = u.scalar.get(name).copied().unwrap_or(0);
        if have < q + used {
            out.push(format!("Insufficient {name}"));
        }
    }
    out
}

/// `LeastAllocated` for one resource: the free share, 0..=100.
fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &str {
        "NodeResourcesFit"
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let reasons = insufficient(pod, node);
        if reasons.is_empty() {
            return Status::success();
        }
        Status {
            code: Code::Unschedulable,
            reasons,
            plugin: String::new(),
        }
    }

    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let cpu = least_requested(
            node.non_zero_requested.0 + pod.non_zero.0,
            node.allocatable.milli_cpu,
        );
        let mem = least_requested(
            node.non_zero_requested.1 + pod.non_zero.1,
            node.allocatable.memory,
        );
        (cpu + mem) / 2
    }
}

/// `NodeResourcesBalancedAllocation`: prefers nodes whose CPU and memory
/// would be used in equal shares (1 − the shares' standard deviation).
pub struct BalancedAllocation;

impl Plugin for BalancedAllocation {
    fn name(&self) -> &str {
        "NodeResourcesBalancedAllocation"
    }

    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let a = &node.allocatable;
        let mut fractions = Vec::with_capacity(2);
        for (requested, allocatable) in [
            (
                node.requested.milli_cpu + pod.requests.milli_cpu,
                a.milli_cpu,
            ),
            (node.requested.memory + pod.requests.memory, a.memory),
        ] {
            if allocatable == 0 {
                continue;
            }
            fractions.push((requested as f64 / allocatable as f64).min(1.0));
        }
        let std = if fractions.len() == 2 {
            ((fractions[0] - fractions[1]) / 2.0).abs()
        } else {
            0.0
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{cluster, node, pod};
    use super::super::{Framework, PodInfo};
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn filter(p: &dyn Plugin, pod: &serde_json::Value, node: &serde_json::Value) -> Status {
        let c = cluster(std::slice::from_ref(node));
        let pod = PodInfo::new(pod);
        let mut state = CycleState::default();
        let s = p.pre_filter(&mut state, &pod, &c);
        if s.code == Code::Skip {
            return Status::success();
        }
        p.filter(&state, &pod, &c.nodes()[0])
    }

    #[test]
    fn unschedulable_nodes_take_only_tolerating_pods() {
        let mut n = node("a", "1", "1Gi");
        n["spec"]["unschedulable"] = json!(true);
        let s = filter(&NodeUnschedulable, &pod("p", "", ""), &n);
        assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(s.reasons, vec![ERR_REASON_UNSCHEDULABLE]);
        let mut p = pod("p", "", "");
        p["spec"]["tolerations"] = json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]);
        assert!(filter(&NodeUnschedulable, &p, &n).is_success());
    }

    #[test]
    fn taints_filter_and_prefer_no_schedule_scores() {
        let mut n = node("a", "1", "1Gi");
        n["spec"]["taints"] = json!([
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
        ]);
        let s = filter(&TaintToleration, &pod("p", "", ""), &n);
        assert_eq!(
            s.reasons,
            vec!["node(s) had untolerated taint {dedicated: gpu}"]
        );
        let mut p = pod("p", "", "");
        p["spec"]["tolerations"] = json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
        assert!(filter(&TaintToleration, &p, &n).is_success());
        // PreferNoSchedule is never filtered; scored by count, reversed.
        let mut scores = vec![2, 0, 1];
        TaintToleration.normalize_score(
            &CycleState::default(),
            &PodInfo::default(),
            &[],
            &mut scores,
        );
        assert_eq!(scores, vec![0, 100, 50]);
        let info = NodeInfo::new(&n);
        assert_eq!(
            TaintToleration.score(&CycleState::default(), &PodInfo::new(&p), &info),
            1
        );
    }

    #[test]
    fn node_selector_and_required_affinity() {
        let mut n = node("a", "1", "1Gi");
        n["metadata"]["labels"]["disk"] = json!("ssd");
        n["metadata"]["labels"]["gen"] = json!("5");
        let mut p = pod("p", "", "");
        p["spec"]["nodeSelector"] = json!({"disk": "hdd"});
        assert_eq!(
            filter(&NodeAffinity, &p, &n).reasons,
            vec![ERR_REASON_NODE_AFFINITY]
        );
        p["spec"]["nodeSelector"] = json!({"disk": "ssd"});
        assert!(filter(&NodeAffinity, &p, &n).is_success());
        // Terms are ORed, expressions ANDed; Gt compares integers; an
        // empty term matches nothing.
        p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["6"]}]},
            {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}, {"key": "disk", "operator": "In", "values": ["ssd"]}]},
        ]}}});
        assert!(filter(&NodeAffinity, &p, &n).is_success());
        p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] =
            json!([{}]);
        assert!(!filter(&NodeAffinity, &p, &n).is_success());
        p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] =
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]);
        assert!(filter(&NodeAffinity, &p, &n).is_success());
    }

    #[test]
    fn preferred_node_affinity_scores() {
        let mut a = node("a", "4", "8Gi");
        a["metadata"]["labels"]["zone"] = json!("z1");
        let b = node("b", "4", "8Gi");
        let c = cluster(&[a, b]);
        let mut p = pod("p", "", "");
        p["spec"]["affinity"] = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}}
        ]}});
        let mut fw = Framework::default_profile();
        for _ in 0..5 {
            assert_eq!(fw.schedule(&PodInfo::new(&p), &c).unwrap().node, "a");
        }
    }

    #[test]
    fn host_ports_conflict() {
        let mut c = cluster(&[node("a", "4", "8Gi")]);
        let mut used = pod("used", "", "");
        used["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
        c.add_pod("a", Arc::new(PodInfo::new(&used)));
        let mut p = pod("p", "", "");
        p["spec"]["containers"][0]["ports"] =
            json!([{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}]);
        let info = PodInfo::new(&p);
        let s = NodePorts.filter(&CycleState::default(), &info, &c.nodes()[0]);
        assert_eq!(s.reasons, vec![ERR_REASON_NODE_PORTS]);
        p["spec"]["containers"][0]["ports"][0]["protocol"] = json!("UDP");
        let info = PodInfo::new(&p);
        assert!(
            NodePorts
                .filter(&CycleState::default(), &info, &c.nodes()[0])
                .is_success()
        );
    }

    #[test]
    fn resources_fit_counts_every_reason() {
        let mut c = cluster(&[node("a", "2", "2Gi")]);
        c.add_pod("a", Arc::new(PodInfo::new(&pod("used", "1500m", "1Gi"))));
        let info = PodInfo::new(&pod("p", "1", "2Gi"));
        let s = NodeResourcesFit.filter(&CycleState::default(), &info, &c.nodes()[0]);
        assert_eq!(s.code, Code::Unschedulable);
        assert_eq!(s.reasons, vec!["Insufficient cpu", "Insufficient memory"]);
        // The pods count is checked even for pods without requests.
        let mut full = node("b", "2", "2Gi");
        full["status"]["allocatable"]["pods"] = json!("1");
        let mut c = cluster(&[full]);
        c.add_pod("b", Arc::new(PodInfo::new(&pod("x", "", ""))));
        let info = PodInfo::new(&pod("p", "", ""));
        assert_eq!(
            NodeResourcesFit
                .filter(&CycleState::default(), &info, &c.nodes()[0])
                .reasons,
            vec!["Too many pods"]
        );
        // Extended resources.
        let mut gpu = pod("g", "", "");
        gpu["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = json!("1");
        let info = PodInfo::new(&gpu);
        let c = cluster(&[node("c", "2", "2Gi")]);
        assert_eq!(
            NodeResourcesFit
                .filter(&CycleState::default(), &info, &c.nodes()[0])
                .reasons,
            vec!["Insufficient example.com/gpu"]
        );
    }

    #[test]
    fn least_allocated_and_balanced_scores_match_upstream() {
        // Upstream's TestLeastAllocatedScoringStrategy "nothing scheduled,
        // resources requested, differently sized nodes": node1 4000m/10000,
        // node2 6000m/10000, pod 3000m/5000 → 37 and 50.
        let mk = |name: &str, cpu: i64, mem: i64| NodeInfo {
            name: name.into(),
            allocatable: super::super::Resources {
                milli_cpu: cpu,
                memory: mem,
                pods: 110,
                ..Default::default()
            },
            ..Default::default()
        };
        let p = PodInfo {
            requests: super::super::Resources {
                milli_cpu: 3000,
                memory: 5000,
                ..Default::default()
            },
            non_zero: (3000, 5000),
            ..Default::default()
        };
        let s = CycleState::default();
        assert_eq!(NodeResourcesFit.score(&s, &p, &mk("1", 4000, 10000)), 37);
        assert_eq!(NodeResourcesFit.score(&s, &p, &mk("2", 6000, 10000)), 50);
        // Balanced: fractions 0.75 and 0.5 → std 0.125 → 87; 0.5 and 0.5 → 100.
        assert_eq!(BalancedAllocation.score(&s, &p, &mk("1", 4000, 10000)), 87);
        assert_eq!(BalancedAllocation.score(&s, &p, &mk("2", 6000, 10000)), 100);
    }
}
