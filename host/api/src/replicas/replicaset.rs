//! The ReplicaSet controller's decisions (`pkg/controller/replicaset`,
//! which serves ReplicationControllers too): how many pods one sync may
//! create or delete ([`BURST_REPLICAS`], [`slow_start_batches`]), which
//! pods go first when there are too many ([`pods_to_delete`], upstream's
//! `ActivePodsWithRanks`), and the status a set of pods gives
//! ([`status`]).

use super::{pod_is_available, pod_is_ready, pod_ready_since, time};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::cmp::Ordering;

/// At most this many pods are created or deleted per sync (upstream's
/// `BurstReplicas`); the rest wait for the next sync, once the informer
/// has seen these.
pub const BURST_REPLICAS: usize = 500;

/// The first batch of creates (`SlowStartInitialBatchSize`).
pub const SLOW_START_INITIAL_BATCH: usize = 1;

/// The sizes of the batches `count` creates are made in: 1, 2, 4, …
/// (upstream's `slowStartBatch`); a batch with a failure ends the sync,
/// so a quota or an admission refusal costs a few calls, not `count`.
pub fn slow_start_batches(count: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut remaining = count;
    let mut size = remaining.min(SLOW_START_INITIAL_BATCH);
    while size > 0 {
        out.push(size);
        remaining -= size;
        size = (2 * size).min(remaining);
    }
    out
}

fn phase_ordinal(pod: &Value) -> u8 {
    match pod["status"]["phase"].as_str().unwrap_or_default() {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn max_restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_i64())
        .max()
        .unwrap_or(0)
}

fn deletion_cost(pod: &Value) -> i64 {
    pod["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `log2` of how long ago `t` was, in nanoseconds (-1 for the future):
/// upstream's buckets for `LogarithmicScaleDown`.
fn log_rank(t: DateTime<Utc>, now: DateTime<Utc>) -> i64 {
    let d = (now - t).num_nanoseconds().unwrap_or(i64::MAX);
    if d > 0 { (d as f64).log2() as i64 } else { -1 }
}

/// Upstream's "empty < newer < older" (`afterOrZero`), bucketed by
/// `log2` of age (`LogarithmicScaleDown`, on by default): `Less` when `a`
/// should go before `b`; ties of a bucket go by uid.
fn newer_first(
    a: Option<DateTime<Utc>>,
    b: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    uids: (&str, &str),
) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) if a == b => Ordering::Equal,
        (Some(a), Some(b)) => match log_rank(a, now).cmp(&log_rank(b, now)) {
            Ordering::Equal => uids.0.cmp(uids.1),
            o => o,
        },
    }
}

/// Upstream's `ActivePodsWithRanks.Less`: `Less` when `a` should be
/// deleted before `b`. `rank` is how many related pods share the pod's
/// node ("doubled up" pods go first).
fn deletion_order(a: (&Value, usize), b: (&Value, usize), now: DateTime<Utc>) -> Ordering {
    let (pa, ra) = a;
    let (pb, rb) = b;
    let node = |p: &Value| {
        p["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let (na, nb) = (node(pa), node(pb));
    // 1. Unassigned < assigned.
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    // 2. Pending < Unknown < Running.
    let o = phase_ordinal(pa).cmp(&phase_ordinal(pb));
    if o != Ordering::Equal {
        return o;
    }
    // 3. Not ready < ready.
    let (ready_a, ready_b) = (pod_is_ready(pa), pod_is_ready(pb));
    if ready_a != ready_b {
        return if ready_a {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    // 4. Lower pod-deletion-cost < higher.
    let o = deletion_cost(pa).cmp(&deletion_cost(pb));
    if o != Ordering::Equal {
        return o;
    }
    // 5. Doubled up < not doubled up.
    if ra != rb {
        return rb.cmp(&ra);
    }
    let uid = |p: &'_ Value| {
        p["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let (ua, ub) = (uid(pa), uid(pb));
    // 6. Ready for less time < more time.
    if ready_a && ready_b {
        let o = newer_first(pod_ready_since(pa), pod_ready_since(pb), now, (&ua, &ub));
        if o != Ordering::Equal {
            return o;
        }
    }
    // 7. More restarts < fewer.
    let o = max_restarts(pb).cmp(&max_restarts(pa));
    if o != Ordering::Equal {
        return o;
    }
    // 8. Newer < older.
    let created = |p: &Value| time(&p["metadata"]["creationTimestamp"]);
    newer_first(created(pa), created(pb), now, (&ua, &ub))
}

/// Which of `pods` (the owner's active pods) to delete when there are
/// `diff` too many: the first `diff` of upstream's ranking (unscheduled,
/// pending, not ready, cheap to delete, sharing a node with more of
/// `related` pods (those of every ReplicaSet of the same Deployment),
/// ready for the least time, restarted most, newest). Indices into `pods`.
pub fn pods_to_delete(
    pods: &[&Value],
    related: &[&Value],
    diff: usize,
    now: DateTime<Utc>,
) -> Vec<usize> {
    if diff >= pods.len() {
        return (0..pods.len()).collect();
    }
    let mut per_node = std::collections::HashMap::<&str, usize>::new();
    for p in related {
        if let Some(n) = p["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            *per_node.entry(n).or_default() += 1;
        }
    }
    let rank = |p: &Value| {
        p["spec"]["nodeName"]
            .as_str()
            .and_then(|n| per_node.get(n))
            .copied()
            .unwrap_or(0)
    };
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|&i, &j| deletion_order((pods[i], rank(pods[i])), (pods[j], rank(pods[j])), now));
    order.truncate(diff);
    order
}

/// Why the last sync could not create or delete what it wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManageError {
    /// `FailedCreate` or `FailedDelete`.
    pub reason: &'static str,
    pub message: String,
}

/// The owner's new `status` from its active pods (upstream's
/// `calculateStatus`): `replicas`, `fullyLabeledReplicas` (pods carrying
/// every template label), `readyReplicas`, `availableReplicas` (ready for
/// `minReadySeconds`), `observedGeneration`, and the `ReplicaFailure`
/// condition while creates or deletes fail.
pub fn status(
    owner: &Value,
    pods: &[&Value],
    failure: Option<&ManageError>,
    now: DateTime<Utc>,
) -> Value {
    let mut status = owner["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let template: Vec<(&String, &Value)> = owner["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    let min_ready = owner["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let (mut labeled, mut ready, mut available) = (0, 0, 0);
    for p in pods {
        let labels = &p["metadata"]["labels"];
        if template
            .iter()
            .all(|(k, v)| labels.get(k.as_str()) == Some(v))
        {
            labeled += 1;
        }
        if pod_is_ready(p) {
            ready += 1;
            if pod_is_available(p, min_ready, now) {
                available += 1;
            }
        }
    }
    let mut conditions: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let has_failure = conditions.iter().any(|c| c["type"] == "ReplicaFailure");
    match failure {
        Some(f) if !has_failure => conditions.push(json!({
            "type": "ReplicaFailure",
            "status": "True",
            "lastTransitionTime": super::timestamp(now),
            "reason": f.reason,
            "message": f.message,
        })),
        None if has_failure => conditions.retain(|c| c["type"] != "ReplicaFailure"),
        _ => {}
    }
    let s = status.as_object_mut().expect("an object");
    if conditions.is_empty() {
        s.remove("conditions");
    } else {
        s.insert("conditions".into(), json!(conditions));
    }
    s.insert("replicas".into(), json!(pods.len()));
    s.insert("fullyLabeledReplicas".into(), json!(labeled));
    s.insert("readyReplicas".into(), json!(ready));
    s.insert("availableReplicas".into(), json!(available));
    s.insert(
        "observedGeneration".into(),
        owner["metadata"]["generation"].clone(),
    );
    status
}

/// When a pod becomes available (ready for `minReadySeconds`) if it is
/// not yet: the owner looks again then.
pub fn next_available_in(
    owner: &Value,
    pods: &[&Value],
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let min_ready = owner["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    if min_ready <= 0 {
        return None;
    }
    pods.iter()
        .filter(|p| pod_is_ready(p) && !pod_is_available(p, min_ready, now))
        .filter_map(|p| pod_ready_since(p))
        .map(|t| t + chrono::Duration::seconds(min_ready + 1) - now)
        .filter_map(|d| d.to_std().ok())
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        time(&json!("2024-01-01T01:00:00Z")).unwrap()
    }

    fn pod(name: &str, node: &str, phase: &str, ready: Option<&str>) -> Value {
        let mut p = json!({
            "metadata": {"name": name, "uid": name, "creationTimestamp": "2024-01-01T00:00:00Z",
                "labels": {"app": "web"}},
            "spec": {"nodeName": node},
            "status": {"phase": phase},
        });
        if let Some(since) = ready {
            p["status"]["conditions"] =
                json!([{"type": "Ready", "status": "True", "lastTransitionTime": since}]);
        }
        p
    }

    #[test]
    fn slow_start_doubles_up_to_the_count() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), vec![1]);
        assert_eq!(slow_start_batches(10), vec![1, 2, 4, 3]);
        assert_eq!(slow_start_batches(500).iter().sum::<usize>(), 500);
        assert_eq!(slow_start_batches(500).len(), 9);
    }

    /// Upstream's `TestSortingActivePodsWithRanks` order, one rule each.
    #[test]
    fn deletion_ranking_as_upstream() {
        let unscheduled = pod("unscheduled", "", "Pending", None);
        let pending = pod("pending", "n1", "Pending", None);
        let unknown = pod("unknown", "n1", "Unknown", None);
        let running = pod("running", "n1", "Running", None);
        let ready_recent = pod(
            "ready-recent",
            "n2",
            "Running",
            Some("2024-01-01T00:59:00Z"),
        );
        let ready_old = pod("ready-old", "n2", "Running", Some("2024-01-01T00:00:00Z"));
        let pods = [
            &ready_old,
            &running,
            &ready_recent,
            &unknown,
            &pending,
            &unscheduled,
        ];
        let order = pods_to_delete(&pods, &[], 6, now());
        assert_eq!(order.len(), 6);
        let names: Vec<&str> = pods_to_delete(&pods, &[], 5, now())
            .into_iter()
            .map(|i| pods[i]["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "unscheduled",
                "pending",
                "unknown",
                "running",
                "ready-recent"
            ]
        );
    }

    #[test]
    fn deletion_prefers_cheap_doubled_up_restarted_then_newer() {
        let mut cheap = pod("cheap", "n1", "Running", None);
        cheap["metadata"]["annotations"] =
            json!({"controller.kubernetes.io/pod-deletion-cost": "-10"});
        let plain = pod("plain", "n2", "Running", None);
        let crowded = pod("crowded", "n1", "Running", None);
        let related = [&plain, &crowded, &cheap];
        let names = |pods: &[&Value], related: &[&Value]| -> Vec<String> {
            pods_to_delete(pods, related, 1, now())
                .into_iter()
                .map(|i| pods[i]["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&[&plain, &crowded, &cheap], &related), ["cheap"]);
        // n1 has two related pods, n2 one: the doubled-up pod goes first.
        assert_eq!(names(&[&plain, &crowded], &related), ["crowded"]);
        let mut restarted = pod("restarted", "n2", "Running", None);
        restarted["status"]["containerStatuses"] = json!([{"restartCount": 3}]);
        assert_eq!(names(&[&plain, &restarted], &[]), ["restarted"]);
        let mut newer = pod("newer", "n2", "Running", None);
        newer["metadata"]["creationTimestamp"] = json!("2024-01-01T00:59:59Z");
        assert_eq!(names(&[&plain, &newer], &[]), ["newer"]);
    }

    #[test]
    fn status_counts_labeled_ready_and_available_pods() {
        let rs = json!({
            "metadata": {"generation": 3},
            "spec": {"replicas": 3, "minReadySeconds": 120,
                "template": {"metadata": {"labels": {"app": "web", "v": "1"}}}},
        });
        let mut a = pod("a", "n1", "Running", Some("2024-01-01T00:00:00Z"));
        a["metadata"]["labels"]["v"] = json!("1");
        let b = pod("b", "n1", "Running", Some("2024-01-01T00:59:30Z"));
        let c = pod("c", "n1", "Pending", None);
        let s = status(&rs, &[&a, &b, &c], None, now());
        assert_eq!(
            s,
            json!({"replicas": 3, "fullyLabeledReplicas": 1, "readyReplicas": 2,
                "availableReplicas": 1, "observedGeneration": 3})
        );
        let wait = next_available_in(&rs, &[&a, &b, &c], now()).unwrap();
        assert_eq!(wait.as_secs(), 91);
        let failed = ManageError {
            reason: "FailedCreate",
            message: "pods \"x\" is forbidden: exceeded quota".into(),
        };
        let s = status(&rs, &[&a], Some(&failed), now());
        assert_eq!(s["conditions"][0]["type"], "ReplicaFailure");
        assert_eq!(s["conditions"][0]["reason"], "FailedCreate");
        let mut again = rs.clone();
        again["status"] = s;
        assert!(status(&again, &[&a], None, now())["conditions"].is_null());
    }
}
