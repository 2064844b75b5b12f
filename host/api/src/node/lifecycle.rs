//! Node lifecycle decisions, without IO: what kube-controller-manager's
//! node lifecycle controller (`pkg/controller/nodelifecycle`), taint
//! eviction controller (`pkg/controller/tainteviction`) and pod garbage
//! collector (`pkg/controller/podgc`) decide, and the
//! `DefaultTolerationSeconds` admission plugin's defaulting. The
//! controllers that act on these decisions live in the registry.
//!
//! * **Node health**: the controller keeps, per node, when it last saw the
//!   node's `Ready` heartbeat or its Lease in `kube-node-lease` change
//!   ([`Health`], on its own clock, as upstream does, so clocks of nodes
//!   need not agree with the server's). A node not seen for the grace
//!   period (`--node-monitor-grace-period`, or the startup grace for a
//!   node that never posted a `Ready` condition) gets `Ready`,
//!   `MemoryPressure`, `DiskPressure` and `PIDPressure` set to `Unknown`
//!   ([`mark_unknown`]).
//! * **Taints**: a node's `NoExecute` taint follows its `Ready` status
//!   (`False`: `not-ready`, `Unknown`: `unreachable`, `True`: neither), its
//!   `NoSchedule` taints follow its conditions and `spec.unschedulable`
//!   ([`node_taints`]).
//! * **Disruption**: when no node is ready, or more than two and over
//!   55% are not, the fault is likelier the control plane's network than
//!   the nodes': no `NoExecute` taint is added (and, when none is ready,
//!   they are taken away), as upstream's zone states do ([`disruption`]).
//! * **Eviction**: a pod on a node with `NoExecute` taints it does not
//!   tolerate goes at once; one that tolerates them all goes after the
//!   least `tolerationSeconds` of the tolerations used ([`eviction`]).

use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const TAINT_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
pub const NO_EXECUTE: &str = "NoExecute";
pub const NO_SCHEDULE: &str = "NoSchedule";

/// The node conditions the controller sets to `Unknown` when a node stops
/// reporting (`NetworkUnavailable` is left alone, as upstream leaves it).
const CONDITIONS_MARKED_UNKNOWN: [&str; 4] =
    ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// `(condition, status, taint key)`: the `NoSchedule` taints conditions
/// put on a node (upstream's `nodeConditionToTaintKeyStatusMap`).
const CONDITION_TAINTS: [(&str, &str, &str); 6] = [
    ("Ready", "False", TAINT_NOT_READY),
    ("Ready", "Unknown", TAINT_UNREACHABLE),
    ("MemoryPressure", "True", TAINT_MEMORY_PRESSURE),
    ("DiskPressure", "True", TAINT_DISK_PRESSURE),
    ("NetworkUnavailable", "True", TAINT_NETWORK_UNAVAILABLE),
    ("PIDPressure", "True", TAINT_PID_PRESSURE),
];

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

/// The node's condition of type `kind`.
pub fn condition<'a>(node: &'a Value, kind: &str) -> Option<&'a Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// The status (`True`, `False`, `Unknown`) of the node's `Ready`
/// condition, if it has one.
pub fn ready_status(node: &Value) -> Option<&str> {
    condition(node, "Ready").and_then(|c| c["status"].as_str())
}

/// Whether `toleration` tolerates `taint` (upstream's
/// `Toleration.ToleratesTaint`): an empty effect matches every effect, an
/// empty key (with `Exists`) every key; `Equal` (or no operator) compares
/// the values.
pub fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = str_of(toleration, "effect");
    if !effect.is_empty() && effect != str_of(taint, "effect") {
        return false;
    }
    let key = str_of(toleration, "key");
    if !key.is_empty() && key != str_of(taint, "key") {
        return false;
    }
    match str_of(toleration, "operator") {
        "" | "Equal" => str_of(toleration, "value") == str_of(taint, "value"),
        "Exists" => true,
        _ => false,
    }
}

/// What the taint eviction controller does with a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// Nothing to evict for (no `NoExecute` taint), or every taint is
    /// tolerated forever.
    Never,
    /// A taint is not tolerated: delete the pod now.
    Now,
    /// Every taint is tolerated, the shortest for this long.
    After(Duration),
}

/// The node's `NoExecute` taints.
pub fn no_execute_taints(node: &Value) -> Vec<&Value> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["effect"] == NO_EXECUTE)
        .collect()
}

/// Whether and when a pod with `tolerations` goes from a node with the
/// `NoExecute` `taints` (upstream's `processPodOnNode`: each taint needs a
/// toleration, the first one that matches it is the one used; the least
/// `tolerationSeconds` among those used decides, none meaning forever,
/// zero or less meaning now).
pub fn eviction(taints: &[&Value], tolerations: &[Value]) -> Eviction {
    if taints.is_empty() {
        return Eviction::Never;
    }
    let mut least: Option<i64> = None;
    for taint in taints {
        let Some(used) = tolerations.iter().find(|t| tolerates(t, taint)) else {
            return Eviction::Now;
        };
        if let Some(s) = used["tolerationSeconds"].as_i64() {
            if s <= 0 {
                return Eviction::After(Duration::ZERO);
            }
            least = Some(least.map_or(s, |l| l.min(s)));
        }
    }
    match least {
        Some(s) => Eviction::After(Duration::from_secs(s as u64)),
        None => Eviction::Never,
    }
}

/// The pod's tolerations.
pub fn tolerations(pod: &Value) -> &[Value] {
    pod["spec"]["tolerations"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// What the node lifecycle controller remembers of a node between passes
/// (upstream's `nodeHealthData`): the `Ready` heartbeat and Lease renewal
/// it last saw, and when (on the controller's clock) it last saw either
/// change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    ready_heartbeat: Option<String>,
    lease_renew: Option<chrono::DateTime<chrono::Utc>>,
    probe: Instant,
}

fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

impl Health {
    /// The health after looking at `node` and its Lease's `renewTime` at
    /// `now`, given what was known before (`prev`, `None` the first time).
    /// `created_ago` is the node's age: a node that never posted a `Ready`
    /// condition is timed from its creation, as upstream does.
    pub fn observe(
        prev: Option<&Health>,
        node: &Value,
        lease_renew: Option<&str>,
        now: Instant,
        created_ago: Duration,
    ) -> Health {
        let heartbeat =
            condition(node, "Ready").map(|c| str_of(c, "lastHeartbeatTime").to_string());
        let mut h = match prev {
            None if heartbeat.is_none() => Health {
                ready_heartbeat: None,
                lease_renew: None,
                probe: now.checked_sub(created_ago).unwrap_or(now),
            },
            None => Health {
                ready_heartbeat: heartbeat,
                lease_renew: None,
                probe: now,
            },
            Some(p) => {
                let mut h = p.clone();
                if heartbeat != p.ready_heartbeat {
                    // A new heartbeat, or the condition appeared or went.
                    if heartbeat.is_some() {
                        h.probe = now;
                    }
                    h.ready_heartbeat = heartbeat;
                }
                h
            }
        };
        // Any renewal of the Lease counts as a heartbeat.
        if let Some(renew) = lease_renew.and_then(parse_time)
            && h.lease_renew.is_none_or(|seen| seen < renew)
        {
            h.lease_renew = Some(renew);
            h.probe = now;
        }
        h
    }

    /// Starts the node's grace afresh at `now` (upstream does so for every
    /// node when the cluster leaves full disruption).
    pub fn refresh(&mut self, now: Instant) {
        self.probe = now;
    }

    /// Whether the node was last heard of longer than `grace` before `now`.
    pub fn stale(&self, now: Instant, grace: Duration) -> bool {
        now.saturating_duration_since(self.probe) > grace
    }

    /// How long until the node goes stale, from `now` (zero when it is).
    pub fn stale_in(&self, now: Instant, grace: Duration) -> Duration {
        (self.probe + grace).saturating_duration_since(now)
    }
}

/// The cluster's disruption state (upstream's zone states, for the
/// cluster as one zone): it decides whether `NoExecute` taints are added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruption {
    /// Taints follow each node's `Ready` status.
    Normal,
    /// More than two nodes, and at least `--unhealthy-zone-threshold`
    /// (55%) of them, are not ready: no new `NoExecute` taints (upstream
    /// stops evicting in such a zone of 50 nodes or fewer, and slows to
    /// 0.01 nodes/s in a larger one).
    Partial,
    /// No node is ready: upstream's "master disruption mode", in which
    /// the fault is more likely the control plane's than every node's;
    /// `NoExecute` taints are taken away, so nothing is evicted.
    Full,
}

/// The disruption state from the nodes' `Ready` statuses (`None`: the
/// node has no `Ready` condition, which counts as not ready).
pub fn disruption<'a>(ready: impl IntoIterator<Item = Option<&'a str>>) -> Disruption {
    let (mut up, mut down) = (0usize, 0usize);
    for r in ready {
        if r == Some("True") {
            up += 1;
        } else {
            down += 1;
        }
    }
    if up == 0 && down > 0 {
        Disruption::Full
    } else if down > 2 && down as f64 / (up + down) as f64 >= 0.55 {
        Disruption::Partial
    } else {
        Disruption::Normal
    }
}

/// The `Ready` status [`node_taints`] should act on for `NoExecute`
/// taints in `state`: the observed one when normal, nothing new when
/// partially disrupted (existing taints stay), `True` (no taint) when
/// fully disrupted.
pub fn no_execute_basis(state: Disruption, observed: Option<&str>) -> Option<&str> {
    match state {
        Disruption::Normal => observed,
        Disruption::Partial => None,
        Disruption::Full => Some("True"),
    }
}

/// The grace a node gets: `startup` until it has posted a `Ready`
/// condition, then `monitor`.
pub fn grace_period(node: &Value, monitor: Duration, startup: Duration) -> Duration {
    if condition(node, "Ready").is_some() {
        monitor
    } else {
        startup
    }
}

/// Sets the node's `Ready`, `MemoryPressure`, `DiskPressure` and
/// `PIDPressure` conditions to `Unknown` (upstream's reasons and messages;
/// a condition never posted is added as `NodeStatusNeverUpdated`) at
/// `now` (RFC 3339). Whether the `Ready` condition changed.
pub fn mark_unknown(node: &mut Value, now: &str) -> bool {
    let before = condition(node, "Ready").cloned();
    let created = node["metadata"]["creationTimestamp"].clone();
    if !node["status"].is_object() {
        node["status"] = json!({});
    }
    if !node["status"]["conditions"].is_array() {
        node["status"]["conditions"] = json!([]);
    }
    let conditions = node["status"]["conditions"]
        .as_array_mut()
        .expect("made an array above");
    for kind in CONDITIONS_MARKED_UNKNOWN {
        match conditions.iter_mut().find(|c| c["type"] == kind) {
            None => conditions.push(json!({
                "type": kind,
                "status": "Unknown",
                "reason": "NodeStatusNeverUpdated",
                "message": "Kubelet never posted node status.",
                "lastHeartbeatTime": created,
                "lastTransitionTime": now,
            })),
            Some(c) if c["status"] != "Unknown" => {
                c["status"] = json!("Unknown");
                c["reason"] = json!("NodeStatusUnknown");
                c["message"] = json!("Kubelet stopped posting node status.");
                c["lastTransitionTime"] = json!(now);
            }
            Some(_) => {}
        }
    }
    condition(node, "Ready") != before.as_ref()
}

fn taint(key: &str, effect: &str) -> Value {
    json!({"key": key, "effect": effect})
}

fn same_taint(a: &Value, b: &Value) -> bool {
    a["key"] == b["key"] && a["effect"] == b["effect"]
}

/// The node's taints as the node lifecycle controller wants them, or
/// `None` when they are right already:
/// * `NoExecute`: from `observed_ready`, the `Ready` status the pass
///   started from (`False`: `not-ready`, `Unknown`: `unreachable`, `True`:
///   neither; no condition yet: left alone), as upstream's
///   `processTaintBaseEviction`;
/// * `NoSchedule`: one per condition in upstream's map and
///   `unschedulable` for a cordoned node (upstream's
///   `doNoScheduleTaintingPass`; taints of those keys it does not want
///   go).
///
/// Added taints carry `timeAdded` `now`; other taints are kept as they are.
pub fn node_taints(node: &Value, observed_ready: Option<&str>, now: &str) -> Option<Vec<Value>> {
    let current: Vec<Value> = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut wanted: Vec<Value> = Vec::new();
    let mut managed: Vec<Value> = Vec::new();
    // NoExecute, from the observed Ready status.
    let no_execute = match observed_ready {
        Some("False") => Some(Some(TAINT_NOT_READY)),
        Some("Unknown") => Some(Some(TAINT_UNREACHABLE)),
        Some("True") => Some(None),
        _ => None,
    };
    if let Some(want) = no_execute {
        managed.push(taint(TAINT_NOT_READY, NO_EXECUTE));
        managed.push(taint(TAINT_UNREACHABLE, NO_EXECUTE));
        if let Some(key) = want {
            wanted.push(taint(key, NO_EXECUTE));
        }
    }
    // NoSchedule, from the conditions as they are.
    for (kind, status, key) in CONDITION_TAINTS {
        managed.push(taint(key, NO_SCHEDULE));
        if condition(node, kind).is_some_and(|c| c["status"] == status) {
            wanted.push(taint(key, NO_SCHEDULE));
        }
    }
    managed.push(taint(TAINT_UNSCHEDULABLE, NO_SCHEDULE));
    if node["spec"]["unschedulable"] == true {
        wanted.push(taint(TAINT_UNSCHEDULABLE, NO_SCHEDULE));
    }
    let mut out: Vec<Value> = current
        .iter()
        .filter(|t| {
            !managed.iter().any(|m| same_taint(m, t)) || wanted.iter().any(|w| same_taint(w, t))
        })
        .cloned()
        .collect();
    for w in wanted {
        if !out.iter().any(|t| same_taint(t, &w)) {
            let mut w = w;
            if w["effect"] == NO_EXECUTE {
                w["timeAdded"] = json!(now);
            }
            out.push(w);
        }
    }
    (out != current).then_some(out)
}

/// The pod's `Ready` condition set to `False` at `now` (upstream's
/// `MarkPodsNotReady`), as the new `status`, or `None` when the pod has
/// no `Ready` condition or it is already `False`.
pub fn pod_not_ready(pod: &Value, now: &str) -> Option<Value> {
    let mut status = pod["status"].clone();
    let ready = status["conditions"]
        .as_array_mut()?
        .iter_mut()
        .find(|c| c["type"] == "Ready")?;
    if ready["status"] == "False" {
        return None;
    }
    ready["status"] = json!("False");
    ready["lastTransitionTime"] = json!(now);
    Some(status)
}

/// Upstream's `DisruptionTarget` condition, for a pod about to be deleted
/// by a controller.
pub fn disruption_target(reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": "DisruptionTarget",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    })
}

/// `DefaultTolerationSeconds`: adds `not-ready` and `unreachable`
/// `NoExecute` tolerations (`Exists`, for `not_ready` and `unreachable`
/// seconds) to a pod that has no toleration of them (a toleration with an
/// empty key or an empty effect counts). Whether the pod changed.
pub fn default_tolerations(pod: &mut Value, not_ready: i64, unreachable: i64) -> bool {
    let has = |pod: &Value, key: &str| {
        tolerations(pod).iter().any(|t| {
            let (k, e) = (str_of(t, "key"), str_of(t, "effect"));
            (k == key || k.is_empty()) && (e == NO_EXECUTE || e.is_empty())
        })
    };
    let mut added = Vec::new();
    for (key, seconds) in [
        (TAINT_NOT_READY, not_ready),
        (TAINT_UNREACHABLE, unreachable),
    ] {
        if !has(pod, key) {
            added.push(
                json!({"key": key, "operator": "Exists", "effect": NO_EXECUTE,
                "tolerationSeconds": seconds}),
            );
        }
    }
    if added.is_empty() {
        return false;
    }
    if !pod["spec"]["tolerations"].is_array() {
        pod["spec"]["tolerations"] = json!([]);
    }
    pod["spec"]["tolerations"]
        .as_array_mut()
        .expect("made an array above")
        .extend(added);
    true
}

/// `TaintNodesByCondition`: a new node gets the `not-ready` `NoSchedule`
/// taint (the node lifecycle controller takes it away once the node is
/// ready), so nothing is scheduled to it before it says it is ready.
/// Whether the node changed.
pub fn taint_new_node(node: &mut Value) -> bool {
    let t = taint(TAINT_NOT_READY, NO_SCHEDULE);
    if node["spec"]["taints"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|x| same_taint(x, &t)))
    {
        return false;
    }
    if !node["spec"].is_object() {
        node["spec"] = json!({});
    }
    if !node["spec"]["taints"].is_array() {
        node["spec"]["taints"] = json!([]);
    }
    node["spec"]["taints"]
        .as_array_mut()
        .expect("made an array above")
        .push(t);
    true
}

/// The taint that says a node is out of service for good.
pub const TAINT_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Whether the pod garbage collector may force delete the terminating pods
/// of `node` (upstream's `gcTerminating`): it is not `Ready` and carries
/// the `out-of-service` taint.
pub fn out_of_service(node: &Value) -> bool {
    ready_status(node) != Some("True")
        && node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == TAINT_OUT_OF_SERVICE)
}

/// Whether a pod has finished (`Succeeded` or `Failed`).
pub fn terminated(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// Which of the terminated `pods` the pod garbage collector deletes to
/// keep `threshold` of them (upstream's `gcTerminated`): the excess,
/// evicted pods first, then the oldest by creation (then name); indices
/// into `pods`. A threshold of 0 keeps all.
pub fn terminated_to_delete(pods: &[&Value], threshold: usize) -> Vec<usize> {
    if threshold == 0 || pods.len() <= threshold {
        return Vec::new();
    }
    let evicted =
        |p: &Value| p["status"]["phase"] == "Failed" && p["status"]["reason"] == "Evicted";
    let created = |p: &Value| {
        p["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(parse_time)
    };
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|&i, &j| {
        let (a, b) = (pods[i], pods[j]);
        evicted(b)
            .cmp(&evicted(a))
            .then_with(|| created(a).cmp(&created(b)))
            .then_with(|| str_of(&a["metadata"], "name").cmp(str_of(&b["metadata"], "name")))
    });
    order.truncate(pods.len() - threshold);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ready: Option<&str>) -> Value {
        let mut n = json!({"metadata": {"name": "n", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {}, "status": {}});
        if let Some(s) = ready {
            n["status"]["conditions"] = json!([
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2026-01-01T00:00:10Z"},
                {"type": "Ready", "status": s, "lastHeartbeatTime": "2026-01-01T00:00:10Z",
                 "lastTransitionTime": "2026-01-01T00:00:05Z", "reason": "KubeletReady"},
            ]);
        }
        n
    }

    #[test]
    fn out_of_service_needs_the_taint_and_a_node_not_ready() {
        let node = |ready: &str, taint: Option<&str>| {
            json!({"spec": {"taints": taint.map(|k| vec![json!({"key": k, "effect": "NoExecute"})]).unwrap_or_default()},
                   "status": {"conditions": [{"type": "Ready", "status": ready}]}})
        };
        assert!(out_of_service(&node("False", Some(TAINT_OUT_OF_SERVICE))));
        assert!(out_of_service(&node("Unknown", Some(TAINT_OUT_OF_SERVICE))));
        assert!(!out_of_service(&node("True", Some(TAINT_OUT_OF_SERVICE))));
        assert!(!out_of_service(&node("False", Some("other"))));
        assert!(!out_of_service(&node("False", None)));
    }

    #[test]
    fn tolerations_match_taints_as_upstream() {
        let t = json!({"key": "k", "value": "v", "effect": "NoExecute"});
        for (tol, want) in [
            (
                json!({"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}),
                true,
            ),
            (json!({"key": "k", "value": "v"}), true),
            (json!({"key": "k", "value": "w"}), false),
            (json!({"key": "k", "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (json!({"operator": "Exists", "effect": "NoSchedule"}), false),
            (json!({"key": "other", "operator": "Exists"}), false),
            (json!({"key": "k", "operator": "Lt", "value": "v"}), false),
        ] {
            assert_eq!(tolerates(&tol, &t), want, "{tol}");
        }
    }

    #[test]
    fn eviction_follows_the_least_toleration_of_the_taints() {
        let unreachable = json!({"key": TAINT_UNREACHABLE, "effect": "NoExecute"});
        let other = json!({"key": "maintenance", "effect": "NoExecute"});
        let taints = [&unreachable];
        assert_eq!(eviction(&[], &[]), Eviction::Never);
        assert_eq!(eviction(&taints, &[]), Eviction::Now);
        let forever = json!({"key": TAINT_UNREACHABLE, "operator": "Exists"});
        assert_eq!(
            eviction(&taints, std::slice::from_ref(&forever)),
            Eviction::Never
        );
        let five = json!({"key": TAINT_UNREACHABLE, "operator": "Exists", "tolerationSeconds": 5});
        assert_eq!(
            eviction(&taints, &[five.clone(), forever.clone()]),
            Eviction::After(Duration::from_secs(5))
        );
        // The first matching toleration is the one used.
        assert_eq!(
            eviction(&taints, &[forever.clone(), five.clone()]),
            Eviction::Never
        );
        let zero = json!({"operator": "Exists", "tolerationSeconds": -3});
        assert_eq!(eviction(&taints, &[zero]), Eviction::After(Duration::ZERO));
        // Every taint needs a toleration.
        assert_eq!(
            eviction(&[&unreachable, &other], std::slice::from_ref(&five)),
            Eviction::Now
        );
        let maint = json!({"key": "maintenance", "operator": "Exists", "tolerationSeconds": 2});
        assert_eq!(
            eviction(&[&unreachable, &other], &[five, maint]),
            Eviction::After(Duration::from_secs(2))
        );
    }

    #[test]
    fn a_node_goes_stale_when_neither_heartbeat_nor_lease_moves() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(50);
        let n = node(Some("True"));
        let h = Health::observe(
            None,
            &n,
            Some("2026-01-01T00:00:10.000000Z"),
            t0,
            Duration::ZERO,
        );
        assert!(!h.stale(t0 + Duration::from_secs(50), grace));
        // Nothing changed for 51 s.
        let t1 = t0 + Duration::from_secs(51);
        let h1 = Health::observe(
            Some(&h),
            &n,
            Some("2026-01-01T00:00:10.000000Z"),
            t1,
            Duration::ZERO,
        );
        assert!(h1.stale(t1, grace));
        // A renewed lease alone keeps it fresh.
        let h2 = Health::observe(
            Some(&h),
            &n,
            Some("2026-01-01T00:00:40.000000Z"),
            t1,
            Duration::ZERO,
        );
        assert!(!h2.stale(t1, grace));
        assert_eq!(h2.stale_in(t1, grace), grace);
        // So does a new Ready heartbeat.
        let mut beat = n.clone();
        beat["status"]["conditions"][1]["lastHeartbeatTime"] = json!("2026-01-01T00:00:50Z");
        let h3 = Health::observe(
            Some(&h),
            &beat,
            Some("2026-01-01T00:00:10.000000Z"),
            t1,
            Duration::ZERO,
        );
        assert!(!h3.stale(t1, grace));
        // A lease going back in time is not a renewal.
        let h4 = Health::observe(
            Some(&h2),
            &n,
            Some("2026-01-01T00:00:20.000000Z"),
            t1 + grace * 2,
            Duration::ZERO,
        );
        assert!(h4.stale(t1 + grace * 2, grace));
    }

    #[test]
    fn a_node_that_never_reported_is_timed_from_its_creation() {
        let now = Instant::now() + Duration::from_secs(3600);
        let n = node(None);
        let startup = Duration::from_secs(60);
        assert_eq!(grace_period(&n, Duration::from_secs(50), startup), startup);
        let h = Health::observe(None, &n, None, now, Duration::from_secs(61));
        assert!(h.stale(now, startup));
        let h = Health::observe(None, &n, None, now, Duration::from_secs(10));
        assert!(!h.stale(now, startup));
    }

    #[test]
    fn marking_unknown_keeps_heartbeats_and_adds_missing_conditions() {
        let mut n = node(Some("True"));
        assert!(mark_unknown(&mut n, "2026-01-01T00:01:00Z"));
        let ready = condition(&n, "Ready").unwrap();
        assert_eq!(ready["status"], "Unknown");
        assert_eq!(ready["reason"], "NodeStatusUnknown");
        assert_eq!(ready["message"], "Kubelet stopped posting node status.");
        assert_eq!(ready["lastHeartbeatTime"], "2026-01-01T00:00:10Z");
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:01:00Z");
        assert_eq!(
            condition(&n, "MemoryPressure").unwrap()["status"],
            "Unknown"
        );
        let disk = condition(&n, "DiskPressure").unwrap();
        assert_eq!(disk["reason"], "NodeStatusNeverUpdated");
        assert_eq!(disk["message"], "Kubelet never posted node status.");
        assert_eq!(condition(&n, "NetworkUnavailable"), None);
        // Again: nothing changes.
        assert!(!mark_unknown(&mut n, "2026-01-01T00:02:00Z"));
        assert_eq!(
            condition(&n, "Ready").unwrap()["lastTransitionTime"],
            "2026-01-01T00:01:00Z"
        );
        let mut never = node(None);
        assert!(mark_unknown(&mut never, "2026-01-01T00:01:00Z"));
        assert_eq!(
            condition(&never, "Ready").unwrap()["reason"],
            "NodeStatusNeverUpdated"
        );
    }

    #[test]
    fn taints_follow_ready_and_the_other_conditions() {
        let now = "2026-01-01T00:01:00Z";
        let keys = |t: &[Value]| -> Vec<String> {
            t.iter()
                .map(|t| format!("{}:{}", str_of(t, "key"), str_of(t, "effect")))
                .collect()
        };
        let mut n = node(Some("True"));
        assert_eq!(node_taints(&n, Some("True"), now), None);
        n["spec"]["taints"] = json!([{"key": "mine", "effect": "NoSchedule"}]);
        mark_unknown(&mut n, now);
        // The NoSchedule taint follows the condition now; NoExecute the
        // Ready status the pass observed.
        let t = node_taints(&n, Some("True"), now).unwrap();
        assert_eq!(
            keys(&t),
            [
                "mine:NoSchedule",
                "node.kubernetes.io/unreachable:NoSchedule"
            ]
        );
        n["spec"]["taints"] = json!(t);
        let t = node_taints(&n, Some("Unknown"), now).unwrap();
        assert_eq!(
            keys(&t),
            [
                "mine:NoSchedule",
                "node.kubernetes.io/unreachable:NoSchedule",
                "node.kubernetes.io/unreachable:NoExecute"
            ]
        );
        assert_eq!(t[2]["timeAdded"], now);
        n["spec"]["taints"] = json!(t);
        assert_eq!(node_taints(&n, Some("Unknown"), now), None);
        // The kubelet says False: not-ready replaces unreachable.
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        let t = node_taints(&n, Some("False"), now).unwrap();
        assert_eq!(
            keys(&t),
            [
                "mine:NoSchedule",
                "node.kubernetes.io/not-ready:NoExecute",
                "node.kubernetes.io/not-ready:NoSchedule"
            ]
        );
        // Ready again and cordoned.
        n["spec"]["taints"] = json!(t);
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        n["spec"]["unschedulable"] = json!(true);
        let t = node_taints(&n, Some("True"), now).unwrap();
        assert_eq!(
            keys(&t),
            [
                "mine:NoSchedule",
                "node.kubernetes.io/unschedulable:NoSchedule"
            ]
        );
        // No Ready condition yet: NoExecute taints are left alone.
        let mut fresh = node(None);
        fresh["spec"]["taints"] = json!([{"key": TAINT_UNREACHABLE, "effect": "NoExecute"}]);
        assert_eq!(node_taints(&fresh, None, now), None);
    }

    #[test]
    fn disruption_states_as_upstream() {
        let t = Some("True");
        let u = Some("Unknown");
        assert_eq!(disruption([t, u]), Disruption::Normal);
        assert_eq!(disruption([u]), Disruption::Full);
        assert_eq!(disruption([u, None, Some("False")]), Disruption::Full);
        assert_eq!(disruption(Vec::<Option<&str>>::new()), Disruption::Normal);
        // More than two not ready, and 55% or more.
        assert_eq!(disruption([t, t, u, u, u]), Disruption::Partial);
        assert_eq!(disruption([t, t, t, u, u, u]), Disruption::Normal);
        assert_eq!(disruption([t, u, u]), Disruption::Normal);
        assert_eq!(no_execute_basis(Disruption::Normal, u), u);
        assert_eq!(no_execute_basis(Disruption::Partial, u), None);
        assert_eq!(no_execute_basis(Disruption::Full, u), t);
        // Fully disrupted, an unreachable node's NoExecute taint goes.
        let mut n = node(Some("Unknown"));
        n["spec"]["taints"] = json!([{"key": TAINT_UNREACHABLE, "effect": "NoExecute"}]);
        let basis = no_execute_basis(Disruption::Full, ready_status(&n));
        let t = node_taints(&n, basis, "now").unwrap();
        assert!(t.iter().all(|t| t["effect"] != "NoExecute"), "{t:?}");
    }

    #[test]
    fn pods_are_marked_not_ready_once() {
        let pod = json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "t0"}]}});
        let status = pod_not_ready(&pod, "t1").unwrap();
        assert_eq!(status["conditions"][1]["status"], "False");
        assert_eq!(status["conditions"][1]["lastTransitionTime"], "t1");
        assert_eq!(pod_not_ready(&json!({"status": status}), "t2"), None);
        assert_eq!(pod_not_ready(&json!({"status": {}}), "t2"), None);
    }

    #[test]
    fn default_toleration_seconds_as_upstream() {
        let mut pod = json!({"spec": {"containers": []}});
        assert!(default_tolerations(&mut pod, 300, 200));
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 200},
            ])
        );
        assert!(!default_tolerations(&mut pod, 300, 300));
        // A toleration of every NoExecute taint covers both.
        let mut all =
            json!({"spec": {"tolerations": [{"operator": "Exists", "effect": "NoExecute"}]}});
        assert!(!default_tolerations(&mut all, 300, 300));
        // One of its own for not-ready (any effect) keeps only unreachable's.
        let mut own =
            json!({"spec": {"tolerations": [{"key": TAINT_NOT_READY, "operator": "Exists"}]}});
        assert!(default_tolerations(&mut own, 300, 300));
        let t = own["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1]["key"], TAINT_UNREACHABLE);
        // A NoSchedule toleration of not-ready does not count.
        let mut sched = json!({"spec": {"tolerations": [{"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]}});
        assert!(default_tolerations(&mut sched, 300, 300));
        assert_eq!(sched["spec"]["tolerations"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn new_nodes_are_not_ready_until_they_say_so() {
        let mut n = json!({"metadata": {"name": "n"}});
        assert!(taint_new_node(&mut n));
        assert_eq!(
            n["spec"]["taints"],
            json!([{"key": TAINT_NOT_READY, "effect": "NoSchedule"}])
        );
        assert!(!taint_new_node(&mut n));
        // The lifecycle controller removes it once Ready is True.
        n["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        assert_eq!(node_taints(&n, Some("True"), "t"), Some(vec![]));
    }

    #[test]
    fn terminated_pods_beyond_the_threshold_go_evicted_then_oldest_first() {
        let pod = |name: &str, created: &str, phase: &str, reason: &str| {
            json!({"metadata": {"name": name, "creationTimestamp": created},
                "status": {"phase": phase, "reason": reason}})
        };
        let pods = [
            pod("new", "2026-01-03T00:00:00Z", "Succeeded", ""),
            pod("old", "2026-01-01T00:00:00Z", "Failed", ""),
            pod("evicted", "2026-01-05T00:00:00Z", "Failed", "Evicted"),
            pod("mid-b", "2026-01-02T00:00:00Z", "Succeeded", ""),
            pod("mid-a", "2026-01-02T00:00:00Z", "Succeeded", ""),
        ];
        let refs: Vec<&Value> = pods.iter().collect();
        let names = |idx: Vec<usize>| -> Vec<&str> {
            idx.into_iter()
                .map(|i| str_of(&pods[i]["metadata"], "name"))
                .collect()
        };
        assert_eq!(
            names(terminated_to_delete(&refs, 2)),
            ["evicted", "old", "mid-a"]
        );
        assert!(terminated_to_delete(&refs, 5).is_empty());
        assert!(terminated_to_delete(&refs, 0).is_empty());
        assert!(terminated(&pods[0]));
        assert!(!terminated(&json!({"status": {"phase": "Running"}})));
    }
}
