//! What kube-controller-manager's DaemonSet controller decides (no IO):
//! which nodes should run a DaemonSet's pod, the pods to create and delete
//! (including a `RollingUpdate`'s), and the status. The controller in the
//! registry reads the DaemonSet, the nodes and its pods, and writes what
//! [`plan`] says.
//!
//! As upstream: a daemon pod carries the DaemonSet's template with the
//! daemon tolerations added (`not-ready`/`unreachable` `NoExecute`, the
//! pressure and `unschedulable` `NoSchedule` taints), the labels
//! `controller-revision-hash` and `pod-template-generation`, and a required
//! node affinity naming its node by `metadata.name` (so the scheduler binds
//! it there); a node should run one when the template's node selector and
//! affinity accept it and it tolerates the node's `NoSchedule` and
//! `NoExecute` taints, and keeps one it has while it tolerates the
//! `NoExecute` ones.

use crate::scheduler::{NodeInfo, PodInfo};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub use crate::history::LABEL_REVISION_HASH;
/// `pod-template-generation` (deprecated upstream, still written).
pub const LABEL_TEMPLATE_GENERATION: &str = "pod-template-generation";
/// Upstream's `BurstReplicas` for DaemonSets: creates per sync.
pub const BURST: usize = 250;

/// Upstream's `AddOrUpdateDaemonPodTolerations`.
pub fn add_daemon_tolerations(spec: &mut Value) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec["hostNetwork"] == true {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    if !spec["tolerations"].is_array() {
        spec["tolerations"] = json!([]);
    }
    let list = spec["tolerations"].as_array_mut().expect("made an array");
    for (key, effect) in wanted {
        list.retain(|t| !(t["key"] == key && t["effect"] == effect));
        list.push(json!({"key": key, "operator": "Exists", "effect": effect}));
    }
}

/// The node a daemon pod is for: its `nodeName`, or the `metadata.name` its
/// required node affinity names (upstream's `GetTargetNodeName`).
pub fn target_node(pod: &Value) -> Option<&str> {
    if let Some(n) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Some(n);
    }
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()?
        .iter()
        .flat_map(|t| t["matchFields"].as_array().into_iter().flatten())
        .find(|f| f["key"] == "metadata.name" && f["operator"] == "In")
        .and_then(|f| f["values"][0].as_str())
}

/// The pod the DaemonSet's template makes, before it is placed.
pub fn template_pod(ds: &Value) -> Value {
    let template = &ds["spec"]["template"];
    let mut pod = json!({
        "metadata": template["metadata"].clone(),
        "spec": template["spec"].clone(),
    });
    pod["metadata"]["namespace"] = ds["metadata"]["namespace"].clone();
    add_daemon_tolerations(&mut pod["spec"]);
    pod
}

/// Upstream's `NodeShouldRunDaemonPod`: (should run, should keep running).
pub fn should_run(template: &PodInfo, node: &NodeInfo) -> (bool, bool) {
    let fits_name = template.node_name.is_empty() || template.node_name == node.name;
    if !fits_name || !template.node_affinity_matches(node) {
        return (false, false);
    }
    if template.untolerated_taint(node).is_some() {
        let untolerated_no_execute = node.taints.iter().any(|t| {
            t["effect"] == "NoExecute"
                && !template
                    .tolerations
                    .iter()
                    .any(|tol| crate::node::lifecycle::tolerates(tol, t))
        });
        return (false, !untolerated_no_execute);
    }
    (true, true)
}

/// The daemon pod for `node`: the template with the daemon tolerations,
/// the revision labels, a required affinity naming the node (other
/// required terms replaced, as upstream's
/// `ReplaceDaemonSetPodNodeNameNodeAffinity`), owned by the DaemonSet.
pub fn new_pod(ds: &Value, node: &str, hash: &str) -> Value {
    let mut pod = template_pod(ds);
    let name = ds["metadata"]["name"].as_str().unwrap_or_default();
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    let meta = &mut pod["metadata"];
    if let Some(m) = meta.as_object_mut() {
        m.remove("name");
        m.remove("uid");
        m.remove("resourceVersion");
        m.remove("creationTimestamp");
    }
    meta["generateName"] = json!(format!("{name}-"));
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][LABEL_REVISION_HASH] = json!(hash);
    meta["labels"][LABEL_TEMPLATE_GENERATION] = json!(
        ds["metadata"]["generation"]
            .as_i64()
            .unwrap_or(1)
            .to_string()
    );
    meta["ownerReferences"] = json!([{
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": name,
        "uid": ds["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    let required = json!({"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}
    ]}]});
    let spec = &mut pod["spec"];
    if !spec["affinity"].is_object() {
        spec["affinity"] = json!({});
    }
    if !spec["affinity"]["nodeAffinity"].is_object() {
        spec["affinity"]["nodeAffinity"] = json!({});
    }
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = required;
    pod
}

fn ready_since(pod: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .map(|c| {
            c["lastTransitionTime"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
        })
}

/// Upstream's `IsPodAvailable`: ready for at least `min_ready` seconds.
pub fn available(pod: &Value, min_ready: i64, now: chrono::DateTime<chrono::Utc>) -> bool {
    if pod["metadata"]["deletionTimestamp"].is_string() {
        return false;
    }
    ready_since(pod)
        .is_some_and(|t| min_ready <= 0 || t + chrono::Duration::seconds(min_ready) <= now)
}

fn ready(pod: &Value) -> bool {
    ready_since(pod).is_some()
}

/// What a sync does.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Nodes that get a new pod (at most [`BURST`]).
    pub create: Vec<String>,
    /// Pods to delete, by name.
    pub delete: Vec<String>,
    /// Failed pods among `delete` (for the `FailedDaemonPod` event).
    pub failed: Vec<String>,
    pub status: Value,
}

/// Resolves `maxUnavailable` (default 1) and `maxSurge` (default 0), a
/// percentage of `desired` rounded up, as upstream's
/// `UnavailableCount`/`SurgeCount`; with a surge of 0 at least one may be
/// unavailable.
pub fn rolling_limits(ds: &Value, desired: usize) -> (usize, usize) {
    let ru = &ds["spec"]["updateStrategy"]["rollingUpdate"];
    let resolve = |v: &Value, default: usize, up: bool| -> usize {
        match v {
            Value::Number(n) => n.as_u64().unwrap_or(0) as usize,
            Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()) {
                Some(p) => {
                    let x = p * desired as f64 / 100.0;
                    if up {
                        x.ceil() as usize
                    } else {
                        x.floor() as usize
                    }
                }
                None => s.parse().unwrap_or(default),
            },
            _ => default,
        }
    };
    let surge = resolve(&ru["maxSurge"], 0, true);
    let mut unavailable = resolve(&ru["maxUnavailable"], 1, true);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// Decides a sync of `ds` over `nodes` with its `pods` (the pods it owns)
/// at `now`: upstream's `manage` (create where a pod should run and none
/// is, delete failed or succeeded pods, extras on a node, pods where none
/// should keep running) and, for `RollingUpdate`, its `rollingUpdate`
/// with no surge (old pods deleted while at most `maxUnavailable` nodes
/// lack an available new one; an old pod that is unavailable anyway goes
/// at once), then the status as it stands before these writes.
pub fn plan(
    ds: &Value,
    hash: &str,
    nodes: &[NodeInfo],
    pods: &[Value],
    now: chrono::DateTime<chrono::Utc>,
) -> Plan {
    let template = PodInfo::new(&template_pod(ds));
    let min_ready = ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let mut by_node: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for p in pods {
        if let Some(n) = target_node(p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    let mut plan = Plan::default();
    let rolling = ds["spec"]["updateStrategy"]["type"]
        .as_str()
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    // Upstream's `AllowsSurge`: any non-zero `maxSurge`.
    let surging = rolling && rolling_limits(ds, 1).0 > 0;
    let (mut desired, mut scheduled, mut misscheduled) = (0, 0, 0);
    let (mut n_ready, mut n_available, mut updated) = (0, 0, 0);
    let is_new = |p: &Value| p["metadata"]["labels"][LABEL_REVISION_HASH] == hash;
    let live = |p: &Value| !p["metadata"]["deletionTimestamp"].is_string();
    for node in nodes {
        let (run, keep) = should_run(&template, node);
        let on = by_node.get(node.name.as_str()).cloned().unwrap_or_default();
        // Status (upstream's `updateDaemonSetStatus`).
        if run {
            desired += 1;
            if !on.is_empty() {
                scheduled += 1;
                let mut ordered = on.clone();
                ordered.sort_by_key(|p| creation(p));
                let p = ordered[0];
                if ready(p) {
                    n_ready += 1;
                    if available(p, min_ready, now) {
                        n_available += 1;
                    }
                }
                if on.iter().any(|p| is_new(p) && live(p)) {
                    updated += 1;
                }
            }
        } else if !on.is_empty() {
            misscheduled += 1;
        }
        // Manage.
        if run && on.is_empty() {
            if plan.create.len() < BURST {
                plan.create.push(node.name.clone());
            }
        } else if keep {
            let mut running = Vec::new();
            for p in on.iter().filter(|p| live(p)) {
                match p["status"]["phase"].as_str() {
                    Some("Failed") => {
                        plan.failed.push(name_of(p));
                        plan.delete.push(name_of(p));
                    }
                    Some("Succeeded") => plan.delete.push(name_of(p)),
                    _ => running.push(*p),
                }
            }
            running.sort_by_key(|p| creation(p));
            if !surging {
                for extra in running.iter().skip(1) {
                    plan.delete.push(name_of(extra));
                }
            } else {
                // Two pods may share a node while surging: the oldest new
                // one and the oldest old one, as long as the old one is
                // ready and the new one is not yet.
                let (mut oldest_new, mut oldest_old) = (None, None);
                for p in &running {
                    let slot = if is_new(p) {
                        &mut oldest_new
                    } else {
                        &mut oldest_old
                    };
                    if slot.is_none() {
                        *slot = Some(*p);
                    } else {
                        plan.delete.push(name_of(p));
                    }
                }
                if let (Some(new), Some(old)) = (oldest_new, oldest_old)
                    && (!ready(old) || ready(new))
                {
                    plan.delete.push(name_of(old));
                }
            }
        } else {
            for p in on.iter().filter(|p| live(p)) {
                plan.delete.push(name_of(p));
            }
        }
    }
    if surging {
        let (max_surge, _) = rolling_limits(ds, desired);
        surge_update(
            &mut plan,
            &by_node,
            max_surge,
            |p| is_new(p),
            |p| available(p, min_ready, now),
        );
    } else if rolling {
        let (_surge, max_unavailable) = rolling_limits(ds, desired);
        let mut unavailable = 0;
        let (mut replace, mut candidates) = (Vec::new(), Vec::new());
        for on in by_node.values() {
            let alive: Vec<&&Value> = on.iter().filter(|p| live(p)).collect();
            let new: Vec<&&Value> = alive.iter().copied().filter(|p| is_new(p)).collect();
            let old: Vec<&&Value> = alive.iter().copied().filter(|p| !is_new(p)).collect();
            match (new.as_slice(), old.as_slice()) {
                ([n], []) => {
                    if !available(n, min_ready, now) {
                        unavailable += 1;
                    }
                }
                ([], [o]) => {
                    if !available(o, min_ready, now) {
                        replace.push(name_of(o));
                    } else if unavailable < max_unavailable {
                        candidates.push(name_of(o));
                    }
                }
                // None, both, or several: the manage pass sorts it out.
                _ => unavailable += 1,
            }
        }
        let room = max_unavailable
            .saturating_sub(unavailable)
            .min(candidates.len());
        for name in replace.into_iter().chain(candidates.into_iter().take(room)) {
            if !plan.delete.contains(&name) {
                plan.delete.push(name);
            }
        }
    }
    plan.status = json!({
        "currentNumberScheduled": scheduled,
        "numberMisscheduled": misscheduled,
        "desiredNumberScheduled": desired,
        "numberReady": n_ready,
        "updatedNumberScheduled": updated,
        "numberAvailable": n_available,
        "numberUnavailable": desired.saturating_sub(n_available),
        "observedGeneration": ds["metadata"]["generation"],
    });
    if let Some(c) = ds["status"]["collisionCount"].as_i64() {
        plan.status["collisionCount"] = json!(c);
    }
    plan
}

/// Upstream's `rollingUpdate` with a surge: on a node with only an old
/// pod a new one is made beside it (at once when the old one is not
/// available, else while fewer than `max_surge` nodes are surging); once
/// the new one is available the old one goes. Nodes with no pod are the
/// manage pass's; nodes with several pods of one kind count as surging.
fn surge_update(
    plan: &mut Plan,
    by_node: &BTreeMap<&str, Vec<&Value>>,
    max_surge: usize,
    is_new: impl Fn(&Value) -> bool,
    available: impl Fn(&Value) -> bool,
) {
    let live = |p: &&&Value| !p["metadata"]["deletionTimestamp"].is_string();
    let (mut surging, mut allowed, mut candidates) = (0, Vec::new(), Vec::new());
    for (node, on) in by_node {
        let new: Vec<&&Value> = on.iter().filter(live).filter(|p| is_new(p)).collect();
        let old: Vec<&&Value> = on.iter().filter(live).filter(|p| !is_new(p)).collect();
        if new.len() > 1 || old.len() > 1 {
            surging += 1;
            continue;
        }
        match (new.first(), old.first()) {
            (_, None) => {}
            (None, Some(o)) => {
                if !available(o) {
                    allowed.push(node.to_string());
                } else if surging < max_surge {
                    candidates.push(node.to_string());
                }
            }
            (Some(n), Some(o)) => {
                if available(n) {
                    let name = name_of(o);
                    if !plan.delete.contains(&name) {
                        plan.delete.push(name);
                    }
                } else {
                    surging += 1;
                }
            }
        }
    }
    let room = max_surge.saturating_sub(surging).min(candidates.len());
    for node in allowed.into_iter().chain(candidates.into_iter().take(room)) {
        if plan.create.len() < BURST && !plan.create.contains(&node) {
            plan.create.push(node);
        }
    }
}

fn name_of(p: &Value) -> String {
    p["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn creation(p: &Value) -> (String, String) {
    (
        p["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        name_of(p),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(update: Value) -> Value {
        json!({
            "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-uid", "generation": 2},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                             "spec": {"containers": [{"name": "a", "image": "agent:1"}]}},
                "updateStrategy": update,
            },
        })
    }

    fn node(name: &str, taints: Value) -> NodeInfo {
        NodeInfo::new(
            &json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                              "spec": {"taints": taints}}),
        )
    }

    fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"app": "agent", LABEL_REVISION_HASH: hash},
                         "creationTimestamp": format!("2026-01-01T00:00:0{}Z", name.len() % 10)},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        })
    }

    fn now() -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now()
    }

    #[test]
    fn daemon_pods_tolerate_what_upstream_adds_and_name_their_node() {
        let d = ds(json!({"type": "RollingUpdate"}));
        let p = new_pod(&d, "n1", "abc");
        let tolerations = p["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(tolerations.len(), 6);
        assert!(
            tolerations
                .iter()
                .any(|t| t["key"] == "node.kubernetes.io/unschedulable")
        );
        assert_eq!(target_node(&p), Some("n1"));
        assert_eq!(p["metadata"]["labels"][LABEL_REVISION_HASH], "abc");
        assert_eq!(p["metadata"]["labels"][LABEL_TEMPLATE_GENERATION], "2");
        assert_eq!(p["metadata"]["generateName"], "agent-");
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
    }

    #[test]
    fn taints_decide_where_pods_run_and_stay() {
        let template = PodInfo::new(&template_pod(&ds(json!({}))));
        assert_eq!(should_run(&template, &node("n", json!([]))), (true, true));
        let no_schedule = node("n", json!([{"key": "gpu", "effect": "NoSchedule"}]));
        assert_eq!(should_run(&template, &no_schedule), (false, true));
        let no_execute = node("n", json!([{"key": "gpu", "effect": "NoExecute"}]));
        assert_eq!(should_run(&template, &no_execute), (false, false));
        // The daemon tolerations: unschedulable and not-ready nodes too.
        let cordoned = node(
            "n",
            json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
        );
        assert_eq!(should_run(&template, &cordoned), (true, true));
        let mut selective = ds(json!({}));
        selective["spec"]["template"]["spec"]["nodeSelector"] =
            json!({"kubernetes.io/hostname": "other"});
        let template = PodInfo::new(&template_pod(&selective));
        assert_eq!(should_run(&template, &node("n", json!([]))), (false, false));
    }

    #[test]
    fn manage_creates_where_missing_and_deletes_extras_and_failures() {
        let d = ds(json!({"type": "OnDelete"}));
        let nodes = [
            node("a", json!([])),
            node("b", json!([])),
            node("c", json!([])),
        ];
        let mut failed = pod("fail", "b", "h", false);
        failed["status"]["phase"] = json!("Failed");
        let pods = vec![
            pod("a1", "a", "h", true),
            pod("a22", "a", "h", true),
            failed,
            pod("x", "gone", "h", true),
        ];
        let plan = plan(&d, "h", &nodes, &pods, now());
        assert_eq!(plan.create, ["c"]);
        let mut deleted = plan.delete.clone();
        deleted.sort();
        assert_eq!(deleted, ["a22", "fail"]);
        assert_eq!(plan.failed, ["fail"]);
        assert_eq!(plan.status["desiredNumberScheduled"], 3);
        assert_eq!(plan.status["currentNumberScheduled"], 2);
        assert_eq!(plan.status["numberReady"], 1);
    }

    #[test]
    fn rolling_updates_keep_at_most_max_unavailable_down() {
        let d = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}));
        let nodes: Vec<NodeInfo> = ["a", "b", "c"].iter().map(|n| node(n, json!([]))).collect();
        let old = vec![
            pod("a", "a", "old", true),
            pod("b", "b", "old", true),
            pod("c", "c", "old", true),
        ];
        let p = plan(&d, "new", &nodes, &old, now());
        assert_eq!(p.delete.len(), 1, "{p:?}");
        assert_eq!(p.status["updatedNumberScheduled"], 0);
        // One node has a new pod not yet available: nothing else goes.
        let mid = vec![
            pod("a", "a", "new", false),
            pod("b", "b", "old", true),
            pod("c", "c", "old", true),
        ];
        assert!(plan(&d, "new", &nodes, &mid, now()).delete.is_empty());
        // Available: the next goes.
        let mid = vec![
            pod("a", "a", "new", true),
            pod("b", "b", "old", true),
            pod("c", "c", "old", true),
        ];
        let p = plan(&d, "new", &nodes, &mid, now());
        assert_eq!(p.delete.len(), 1);
        assert_eq!(p.status["updatedNumberScheduled"], 1);
        // An old pod that is unavailable anyway is replaced at once.
        let mid = vec![
            pod("a", "a", "new", false),
            pod("b", "b", "old", false),
            pod("c", "c", "old", true),
        ];
        assert_eq!(plan(&d, "new", &nodes, &mid, now()).delete, ["b"]);
        // 50% of 3 rounds up to 2.
        let d = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}}));
        assert_eq!(plan(&d, "new", &nodes, &old, now()).delete.len(), 2);
    }

    #[test]
    fn a_surge_makes_the_new_pod_beside_the_old_one_first() {
        let d = ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
        );
        let nodes = [
            node("n1", json!([])),
            node("n2", json!([])),
            node("n3", json!([])),
        ];
        let old = |n: &str| pod(&format!("old-{n}"), n, "old", true);
        // Every node runs an old, available pod: one new pod, beside one.
        let pods = vec![old("n1"), old("n2"), old("n3")];
        let p = plan(&d, "new", &nodes, &pods, now());
        assert_eq!(p.create, ["n1"]);
        assert!(p.delete.is_empty(), "{:?}", p.delete);
        // The new pod is not ready yet: both stay, nothing more surges.
        let pods = vec![
            old("n1"),
            pod("new-n1", "n1", "new", false),
            old("n2"),
            old("n3"),
        ];
        let p = plan(&d, "new", &nodes, &pods, now());
        assert!(
            p.create.is_empty() && p.delete.is_empty(),
            "{:?} {:?}",
            p.create,
            p.delete
        );
        // Ready: the old one goes, the next node surges.
        let pods = vec![
            old("n1"),
            pod("new-n1", "n1", "new", true),
            old("n2"),
            old("n3"),
        ];
        let p = plan(&d, "new", &nodes, &pods, now());
        assert_eq!(p.delete, ["old-n1"]);
        assert_eq!(p.create, ["n2"]);
        // An old pod that is not available is replaced at once, beyond
        // the surge.
        let pods = vec![
            old("n1"),
            pod("new-n1", "n1", "new", false),
            pod("old-n2", "n2", "old", false),
            old("n3"),
        ];
        let p = plan(&d, "new", &nodes, &pods, now());
        assert_eq!(p.create, ["n2"]);
        // 50% of 3 nodes rounds up to 2.
        let d = ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}}),
        );
        assert_eq!(rolling_limits(&d, 3).0, 2);
        let p = plan(&d, "new", &nodes, &[old("n1"), old("n2"), old("n3")], now());
        assert_eq!(p.create, ["n1", "n2"]);
    }
}
