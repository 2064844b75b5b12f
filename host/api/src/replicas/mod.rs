//! What kube-controller-manager's replica controllers decide, without IO:
//! the ReplicaSet (and ReplicationController) controller's arithmetic
//! ([`replicaset`]: which pods to delete first, slow-start batches, status)
//! and the Deployment controller's ([`deployment`]: pod-template hashes,
//! revisions, rolling-update fenceposts, proportional scaling, conditions
//! and status). Shared here: the pod facts both read (active, ready,
//! available, as upstream's `pkg/api/v1/pod` and `controller_utils.go`),
//! controller references, label selectors of either shape, and the
//! controllers' expectations of their own writes ([`Expectations`]).
//! The controllers that act on these decisions live in the registry.
//!
//! Every decision that depends on time takes `now` as an argument.

pub mod deployment;
pub mod replicaset;

use crate::selector::LabelSelector;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A timestamp of the API (`metav1.Time`), if it parses.
pub fn time(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// `now` as the API writes times (seconds, UTC).
pub fn timestamp(now: DateTime<Utc>) -> String {
    now.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A pod that counts towards a controller's replicas: not terminal and
/// not being deleted (upstream's `IsPodActive`).
pub fn pod_is_active(pod: &Value) -> bool {
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    phase != "Succeeded" && phase != "Failed" && pod["metadata"]["deletionTimestamp"].is_null()
}

/// The pod's `Ready` condition, if any.
fn ready_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// Whether the pod's `Ready` condition is `True` (`IsPodReady`).
pub fn pod_is_ready(pod: &Value) -> bool {
    ready_condition(pod).is_some_and(|c| c["status"] == "True")
}

/// When a ready pod became ready (its `Ready` condition's last transition).
pub fn pod_ready_since(pod: &Value) -> Option<DateTime<Utc>> {
    ready_condition(pod)
        .filter(|c| c["status"] == "True")
        .and_then(|c| time(&c["lastTransitionTime"]))
}

/// Ready for at least `min_ready_seconds` (`IsPodAvailable`).
pub fn pod_is_available(pod: &Value, min_ready_seconds: i64, now: DateTime<Utc>) -> bool {
    if !pod_is_ready(pod) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    pod_ready_since(pod).is_some_and(|t| t + chrono::Duration::seconds(min_ready_seconds) < now)
}

/// The owner reference with `controller: true`, if any.
pub fn controller_of(obj: &Value) -> Option<&Value> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
}

/// The uid of the object's controller, if any.
pub fn controller_uid(obj: &Value) -> Option<&str> {
    controller_of(obj).and_then(|r| r["uid"].as_str())
}

/// A controller reference to `owner` (`metav1.NewControllerRef`):
/// `controller` and `blockOwnerDeletion` set.
pub fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// A selector of either shape: a `LabelSelector` (`matchLabels`,
/// `matchExpressions`) or a ReplicationController's plain label map.
pub fn selector(sel: &Value) -> Result<LabelSelector, String> {
    LabelSelector::parse(&crate::selector::selector_text(sel))
}

/// How long an expectation is waited for before the controller looks
/// again anyway (upstream's `ExpectationsTimeout`).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// What a controller expects to see after its own writes, per owner key:
/// how many creations it has not yet seen, and which pods it deleted that
/// it has not yet seen go (upstream's `UIDTrackingControllerExpectations`).
/// An owner is synced only when its expectations are met or have expired:
/// a second sync that ran before the informer saw the first sync's pods
/// would create them again.
#[derive(Debug)]
pub struct Expectations<K> {
    items: HashMap<K, Expected>,
}

#[derive(Debug)]
struct Expected {
    adds: i64,
    deletes: HashSet<String>,
    since: Instant,
}

impl<K> Default for Expectations<K> {
    fn default() -> Self {
        Expectations {
            items: HashMap::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Expectations<K> {
    /// Whether the owner may be synced: nothing expected, all seen, or
    /// waited for longer than [`EXPECTATIONS_TIMEOUT`].
    pub fn satisfied(&self, key: &K, now: Instant) -> bool {
        match self.items.get(key) {
            None => true,
            Some(e) => {
                (e.adds <= 0 && e.deletes.is_empty())
                    || now.duration_since(e.since) > EXPECTATIONS_TIMEOUT
            }
        }
    }

    /// Expects `adds` creations (replacing what was expected).
    pub fn expect_creations(&mut self, key: &K, adds: usize, now: Instant) {
        self.items.insert(
            key.clone(),
            Expected {
                adds: adds as i64,
                deletes: HashSet::new(),
                since: now,
            },
        );
    }

    /// Expects the pods `deleted` (their `namespace/name`) to go.
    pub fn expect_deletions(&mut self, key: &K, deleted: Vec<String>, now: Instant) {
        self.items.insert(
            key.clone(),
            Expected {
                adds: 0,
                deletes: deleted.into_iter().collect(),
                since: now,
            },
        );
    }

    /// One expected creation seen (or given up).
    pub fn creation_observed(&mut self, key: &K) {
        if let Some(e) = self.items.get_mut(key) {
            e.adds -= 1;
        }
    }

    /// The deletion of `pod` (`namespace/name`) seen (or given up).
    pub fn deletion_observed(&mut self, key: &K, pod: &str) {
        if let Some(e) = self.items.get_mut(key) {
            e.deletes.remove(pod);
        }
    }

    /// Forgets the owner (it was deleted).
    pub fn forget(&mut self, key: &K) {
        self.items.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready_pod(ready: bool, since: &str) -> Value {
        json!({"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready {"True"} else {"False"}, "lastTransitionTime": since}
        ]}})
    }

    #[test]
    fn pods_active_ready_available() {
        let now = time(&json!("2024-01-01T00:01:00Z")).unwrap();
        let p = ready_pod(true, "2024-01-01T00:00:00Z");
        assert!(pod_is_active(&p) && pod_is_ready(&p));
        assert!(pod_is_available(&p, 0, now));
        assert!(pod_is_available(&p, 59, now));
        assert!(
            !pod_is_available(&p, 60, now),
            "ready for exactly 60 s is not > 60 s"
        );
        assert!(!pod_is_available(
            &ready_pod(false, "2024-01-01T00:00:00Z"),
            0,
            now
        ));
        let mut gone = p.clone();
        gone["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:30Z");
        assert!(!pod_is_active(&gone));
        let mut done = p;
        done["status"]["phase"] = json!("Succeeded");
        assert!(!pod_is_active(&done));
    }

    #[test]
    fn selectors_of_both_shapes() {
        let labels = json!({"metadata": {"labels": {"app": "web", "tier": "a"}}});
        let rs = selector(&json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}))
        .unwrap();
        assert!(rs.matches_object(&labels));
        let rc = selector(&json!({"app": "web", "tier": "b"})).unwrap();
        assert!(!rc.matches_object(&labels));
    }

    #[test]
    fn expectations_wait_for_every_write_or_the_timeout() {
        let mut e = Expectations::default();
        let t0 = Instant::now();
        let k = "ns/rs".to_string();
        assert!(e.satisfied(&k, t0));
        e.expect_creations(&k, 2, t0);
        assert!(!e.satisfied(&k, t0));
        e.creation_observed(&k);
        assert!(!e.satisfied(&k, t0));
        e.creation_observed(&k);
        assert!(e.satisfied(&k, t0));
        e.expect_deletions(&k, vec!["ns/a".into()], t0);
        assert!(!e.satisfied(&k, t0));
        assert!(e.satisfied(&k, t0 + EXPECTATIONS_TIMEOUT + Duration::from_secs(1)));
        e.deletion_observed(&k, "ns/a");
        assert!(e.satisfied(&k, t0));
    }
}
