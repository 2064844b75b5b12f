//! A PodDisruptionBudget's status as kube-controller-manager's disruption
//! controller computes it (no IO): how many of the selected pods are
//! healthy, how many must be, and so how many disruptions (evictions) are
//! allowed now.
//!
//! * `minAvailable` as a number: the pods themselves are what is expected,
//!   and that many must be healthy;
//! * `minAvailable` as a percentage, or `maxUnavailable`: what is expected
//!   is the sum of the scales of the pods' controllers (a Deployment's
//!   replicas for the pods of its ReplicaSets; a ReplicaSet's,
//!   StatefulSet's or ReplicationController's own); a percentage rounds
//!   up; a pod with no controller makes the budget fail to sync;
//! * a pod is healthy when it is `Ready`, not being deleted, and not among
//!   `disruptedPods` (evicted, deletion not yet seen).

use serde_json::{Value, json};

/// A pod's entry in `disruptedPods` is dropped this long after the
/// eviction that made it (upstream's `DeletionTimeout`).
pub const DELETION_TIMEOUT: chrono::Duration = chrono::Duration::minutes(2);

/// How `expected` was found, for [`status`].
#[derive(Debug, Clone, PartialEq)]
pub enum Expected {
    /// The number of pods the budget selects.
    Pods,
    /// The controllers' scale: the caller resolves it.
    Scale,
}

/// Which count the budget needs for its expected pods.
pub fn needs(pdb: &Value) -> Expected {
    match &pdb["spec"]["minAvailable"] {
        Value::Number(_) => Expected::Pods,
        Value::String(s) if !s.ends_with('%') => Expected::Pods,
        _ => Expected::Scale,
    }
}

/// A value that is a number or a percentage of `total` (rounded up).
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => {
                let p: f64 = p.parse().ok()?;
                Some((p * total as f64 / 100.0).ceil() as i64)
            }
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// `(expected, desired healthy)` for a budget whose expected count is
/// `expected` (see [`needs`]).
pub fn desired_healthy(pdb: &Value, expected: i64) -> (i64, i64) {
    let spec = &pdb["spec"];
    if !spec["maxUnavailable"].is_null() {
        let max = scaled(&spec["maxUnavailable"], expected).unwrap_or(0);
        return (expected, (expected - max).max(0));
    }
    let min = scaled(&spec["minAvailable"], expected).unwrap_or(0);
    (expected, min)
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The healthy pods among `pods` (upstream's `countHealthyPods`).
pub fn current_healthy(
    pods: &[&Value],
    disrupted: &Value,
    now: chrono::DateTime<chrono::Utc>,
) -> i64 {
    pods.iter()
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
        .filter(|p| {
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            !still_disrupted(&disrupted[name], now)
        })
        .filter(|p| ready(p))
        .count() as i64
}

fn still_disrupted(since: &Value, now: chrono::DateTime<chrono::Utc>) -> bool {
    since
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|t| t.with_timezone(&chrono::Utc) + DELETION_TIMEOUT > now)
}

/// `disruptedPods` with the entries of pods that are gone, being deleted,
/// or evicted longer than [`DELETION_TIMEOUT`] ago removed.
pub fn prune_disrupted(
    disrupted: &Value,
    pods: &[&Value],
    now: chrono::DateTime<chrono::Utc>,
) -> Value {
    let mut out = serde_json::Map::new();
    for (name, since) in disrupted.as_object().into_iter().flatten() {
        let live = pods.iter().any(|p| {
            p["metadata"]["name"] == name.as_str()
                && !p["metadata"]["deletionTimestamp"].is_string()
        });
        if live && still_disrupted(since, now) {
            out.insert(name.clone(), since.clone());
        }
    }
    Value::Object(out)
}

/// The budget's new `status`: counts, `disruptionsAllowed`, the
/// `DisruptionAllowed` condition (`SufficientPods`/`InsufficientPods`),
/// `observedGeneration`; the condition's transition time kept when its
/// status does not change.
pub fn status(
    pdb: &Value,
    expected: i64,
    desired: i64,
    healthy: i64,
    disrupted: Value,
    now: &str,
) -> Value {
    let mut allowed = healthy - desired;
    if expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let (state, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    json!({
        "observedGeneration": pdb["metadata"]["generation"],
        "disruptedPods": disrupted,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [condition(pdb, state, reason, "", now)],
    })
}

/// The status of a budget that could not be computed (a pod without a
/// controller, say): nothing allowed, condition `SyncFailed`.
pub fn failed_status(pdb: &Value, message: &str, now: &str) -> Value {
    let mut s = pdb["status"].clone();
    if !s.is_object() {
        s = json!({});
    }
    s["disruptionsAllowed"] = json!(0);
    s["observedGeneration"] = pdb["metadata"]["generation"].clone();
    s["conditions"] = json!([condition(pdb, "False", "SyncFailed", message, now)]);
    s
}

fn condition(pdb: &Value, state: &str, reason: &str, message: &str, now: &str) -> Value {
    let before = pdb["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "DisruptionAllowed");
    let since = match before {
        Some(c) if c["status"] == state => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    json!({
        "type": "DisruptionAllowed",
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": pdb["metadata"]["generation"],
    })
}

/// Whether the status to write differs from the budget's (its conditions'
/// times aside).
pub fn status_changed(pdb: &Value, new: &Value) -> bool {
    let strip = |s: &Value| {
        let mut s = s.clone();
        for c in s["conditions"].as_array_mut().into_iter().flatten() {
            if let Some(c) = c.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
        if s["disruptedPods"].as_object().is_some_and(|m| m.is_empty()) {
            s.as_object_mut().map(|m| m.remove("disruptedPods"));
        }
        s
    };
    strip(&pdb["status"]) != strip(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdb(spec: Value) -> Value {
        json!({"metadata": {"name": "b", "generation": 3}, "spec": spec})
    }

    fn pod(name: &str, ready: bool, deleting: bool) -> Value {
        let mut p = json!({"metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        p
    }

    #[test]
    fn expected_and_desired_as_upstream() {
        let min_n = pdb(json!({"minAvailable": 2}));
        assert_eq!(needs(&min_n), Expected::Pods);
        assert_eq!(desired_healthy(&min_n, 5), (5, 2));
        let min_pct = pdb(json!({"minAvailable": "50%"}));
        assert_eq!(needs(&min_pct), Expected::Scale);
        assert_eq!(desired_healthy(&min_pct, 5), (5, 3), "rounded up");
        let max_n = pdb(json!({"maxUnavailable": 1}));
        assert_eq!(needs(&max_n), Expected::Scale);
        assert_eq!(desired_healthy(&max_n, 3), (3, 2));
        let max_pct = pdb(json!({"maxUnavailable": "30%"}));
        assert_eq!(desired_healthy(&max_pct, 10), (10, 7));
        assert_eq!(
            desired_healthy(&pdb(json!({"maxUnavailable": 5})), 3),
            (3, 0)
        );
    }

    #[test]
    fn healthy_pods_are_ready_not_deleting_nor_disrupted() {
        let now = chrono::Utc::now();
        let (a, b, c, d) = (
            pod("a", true, false),
            pod("b", false, false),
            pod("c", true, true),
            pod("d", true, false),
        );
        let disrupted = json!({"d": meta_time(now), "gone": meta_time(now)});
        let pods = [&a, &b, &c, &d];
        assert_eq!(current_healthy(&pods, &disrupted, now), 1);
        assert_eq!(
            prune_disrupted(&disrupted, &pods, now),
            json!({"d": meta_time(now)})
        );
        let old = json!({"d": meta_time(now - chrono::Duration::minutes(3))});
        assert_eq!(current_healthy(&pods, &old, now), 2);
        assert_eq!(prune_disrupted(&old, &pods, now), json!({}));
    }

    fn meta_time(t: chrono::DateTime<chrono::Utc>) -> String {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    #[test]
    fn allowed_disruptions_and_the_condition() {
        let b = pdb(json!({"minAvailable": 2}));
        let s = status(&b, 3, 2, 3, json!({}), "2026-01-01T00:00:00Z");
        assert_eq!(s["disruptionsAllowed"], 1);
        assert_eq!(s["conditions"][0]["reason"], "SufficientPods");
        assert_eq!(s["observedGeneration"], 3);
        let s = status(&b, 3, 2, 2, json!({}), "2026-01-01T00:00:00Z");
        assert_eq!(s["disruptionsAllowed"], 0);
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["reason"], "InsufficientPods");
        // No pods expected: nothing may be disrupted.
        assert_eq!(status(&b, 0, 0, 0, json!({}), "t")["disruptionsAllowed"], 0);
        let mut with = b.clone();
        with["status"] = s.clone();
        assert!(!status_changed(
            &with,
            &status(&b, 3, 2, 2, json!({}), "later")
        ));
        assert!(status_changed(
            &with,
            &status(&b, 3, 2, 3, json!({}), "later")
        ));
    }
}
