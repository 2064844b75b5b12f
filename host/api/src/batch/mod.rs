//! Jobs and CronJobs without IO: the decisions of kube-controller-manager's
//! `job`, `cronjob` and `ttl-after-finished` controllers (upstream's
//! `pkg/controller/job`, `pkg/controller/cronjob`,
//! `pkg/controller/ttlafterfinished`), each a function of the objects and
//! of `now`, so tests need no clock.
//!
//! Here: Job conditions (`Complete`, `Failed` and the interim
//! `SuccessCriteriaMet` / `FailureTarget` 1.33 writes first), which pods
//! are active, failed or terminating, how many pods a Job wants, which to
//! remove first, the pod-failure backoff (10 s doubling to 10 min), the
//! pod made from a Job's template, `ttlSecondsAfterFinished`; indexed
//! completion ([`indexed`]), the pod failure policy ([`failure_policy`]),
//! cron schedules ([`cron`]) and the CronJob's schedule arithmetic
//! ([`cronjob`]).

pub mod cron;
pub mod cronjob;
pub mod failure_policy;
pub mod indexed;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::cmp::Ordering;
use std::time::Duration;

/// The finalizer that keeps a Job's pod until the Job counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// An Indexed Job pod's index (annotation and label).
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The environment variable an Indexed Job's containers read it from.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// The `spec.managedBy` of Jobs this controller manages.
pub const JOB_CONTROLLER_NAME: &str = "kubernetes.io/job-controller";
/// Upstream's cap on creates or deletes per sync, and on pods counted
/// per status write (`MaxPodCreateDeletePerSync`, `MaxUncountedPods`).
pub const MAX_PER_SYNC: usize = 500;

/// Parses an RFC 3339 timestamp.
pub fn time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A timestamp as the API writes it (whole seconds).
pub fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn conditions(job: &Value) -> &[Value] {
    job["status"]["conditions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The condition of type `ty`, if any.
pub fn condition<'a>(job: &'a Value, ty: &str) -> Option<&'a Value> {
    conditions(job).iter().find(|c| c["type"] == ty)
}

fn is_true(c: Option<&Value>) -> bool {
    c.is_some_and(|c| c["status"] == "True")
}

/// `Complete` or `Failed` when the Job has finished (`IsJobFinished`).
pub fn finished(job: &Value) -> Option<&str> {
    conditions(job).iter().find_map(|c| {
        let ty = c["type"].as_str()?;
        ((ty == "Complete" || ty == "Failed") && c["status"] == "True").then_some(ty)
    })
}

/// When the Job finished: its terminal condition's `lastTransitionTime`.
pub fn finish_time(job: &Value) -> Option<DateTime<Utc>> {
    let ty = finished(job)?;
    condition(job, ty)?["lastTransitionTime"]
        .as_str()
        .and_then(time)
}

/// A new condition, as upstream's `newCondition` writes it.
pub fn new_condition(ty: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    let mut c = json!({
        "type": ty,
        "status": status,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    });
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    c
}

/// Upstream's `ensureJobConditionStatus`: sets the condition `ty` when its
/// status, reason or message differ (a `False` one is never added). Whether
/// the list changed.
pub fn ensure_condition(
    list: &mut Vec<Value>,
    ty: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> bool {
    let new = new_condition(ty, status, reason, message, now);
    if let Some(c) = list.iter_mut().find(|c| c["type"] == ty) {
        let same = c["status"] == status
            && c["reason"].as_str().unwrap_or_default() == reason
            && c["message"].as_str().unwrap_or_default() == message;
        if same {
            return false;
        }
        *c = new;
        return true;
    }
    if status != "False" {
        list.push(new);
        return true;
    }
    false
}

/// Whether the Job carries `SuccessCriteriaMet=True` already.
pub fn success_criteria_met(job: &Value) -> bool {
    is_true(condition(job, "SuccessCriteriaMet"))
}

/// A `FailureTarget=True` condition, if the Job carries one.
pub fn failure_target(job: &Value) -> Option<&Value> {
    condition(job, "FailureTarget").filter(|c| c["status"] == "True")
}

pub fn suspended(job: &Value) -> bool {
    job["spec"]["suspend"] == true
}

pub fn indexed(job: &Value) -> bool {
    job["spec"]["completionMode"] == "Indexed"
}

/// `spec.completions`, `None` for a work-queue Job.
pub fn completions(job: &Value) -> Option<u32> {
    job["spec"]["completions"]
        .as_u64()
        .map(|n| n.min(u64::from(u32::MAX)) as u32)
}

pub fn parallelism(job: &Value) -> u32 {
    job["spec"]["parallelism"]
        .as_u64()
        .unwrap_or(1)
        .min(u64::from(u32::MAX)) as u32
}

pub fn backoff_limit(job: &Value) -> u32 {
    job["spec"]["backoffLimit"]
        .as_u64()
        .unwrap_or(6)
        .min(u64::from(u32::MAX)) as u32
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

fn deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// Neither finished nor being deleted (`FilterActivePods`).
pub fn pod_active(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && !deleting(pod)
}

/// Being deleted but not finished (`CountTerminatingPods`).
pub fn pod_terminating(pod: &Value) -> bool {
    deleting(pod) && !matches!(phase(pod), "Succeeded" | "Failed")
}

pub fn pod_succeeded(pod: &Value) -> bool {
    phase(pod) == "Succeeded"
}

/// `Ready=True`.
pub fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

pub fn has_tracking_finalizer(pod: &Value) -> bool {
    pod["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

/// Whether only failed pods are replaced (`podReplacementPolicy: Failed`,
/// or a pod failure policy): then a terminating pod is not yet a failure.
pub fn only_replace_failed(job: &Value) -> bool {
    job["spec"]["podReplacementPolicy"] == "Failed" || job["spec"]["podFailurePolicy"].is_object()
}

/// Upstream's `isPodFailed`: `Failed`, or (unless only failed pods are
/// replaced) being deleted before it succeeded.
pub fn pod_failed(pod: &Value, job: &Value) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    if only_replace_failed(job) {
        return false;
    }
    deleting(pod) && phase(pod) != "Succeeded"
}

/// For `restartPolicy: OnFailure`: whether the restarts of the pods still
/// running reached `backoffLimit` (`pastBackoffLimitOnFailure`).
pub fn past_backoff_limit_on_failure(job: &Value, pods: &[&Value]) -> bool {
    if job["spec"]["template"]["spec"]["restartPolicy"] != "OnFailure" {
        return false;
    }
    let restarts: u64 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .flat_map(|p| {
            ["initContainerStatuses", "containerStatuses"]
                .into_iter()
                .flat_map(move |k| p["status"][k].as_array().into_iter().flatten())
        })
        .map(|cs| cs["restartCount"].as_u64().unwrap_or(0))
        .sum();
    let limit = u64::from(backoff_limit(job));
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// How long the Job may still run under `activeDeadlineSeconds` (zero when
/// past it); `None` without a deadline, a start time, or while suspended.
pub fn deadline_left(job: &Value, now: DateTime<Utc>) -> Option<Duration> {
    let secs = job["spec"]["activeDeadlineSeconds"].as_u64()?;
    let start = job["status"]["startTime"].as_str().and_then(time)?;
    if suspended(job) {
        return None;
    }
    let end = start + chrono::Duration::seconds(secs.min(i64::MAX as u64) as i64);
    Some((end - now).to_std().unwrap_or_default())
}

/// How many pods should run now (`manageJob`'s `wantActive`).
pub fn want_active(job: &Value, active: u32, succeeded: u32) -> u32 {
    let parallelism = parallelism(job);
    match completions(job) {
        // A work queue: parallelism until one succeeds, then what runs.
        None => {
            if succeeded > 0 {
                active
            } else {
                parallelism
            }
        }
        Some(c) => c.saturating_sub(succeeded).min(parallelism),
    }
}

fn ready_since(pod: &Value) -> Option<DateTime<Utc>> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")?["lastTransitionTime"]
        .as_str()
        .and_then(time)
}

fn max_restarts(pod: &Value) -> u64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["restartCount"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0)
}

/// Upstream's `controller.ActivePods` order: the pod to remove first comes
/// first (unscheduled, pending, not ready, ready for less time,
/// more restarts, newer).
pub fn remove_order(a: &Value, b: &Value) -> Ordering {
    let assigned = |p: &Value| {
        p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
    };
    let rank = |p: &Value| match phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    };
    let created = |p: &Value| p["metadata"]["creationTimestamp"].as_str().and_then(time);
    assigned(a)
        .cmp(&assigned(b))
        .then(rank(a).cmp(&rank(b)))
        .then(pod_ready(a).cmp(&pod_ready(b)))
        .then_with(|| match (pod_ready(a), ready_since(a), ready_since(b)) {
            // Ready for less time first.
            (true, Some(x), Some(y)) => y.cmp(&x),
            _ => Ordering::Equal,
        })
        .then(max_restarts(b).cmp(&max_restarts(a)))
        .then_with(|| created(b).cmp(&created(a)))
}

/// When a pod finished (`getFinishedTime`): its containers' last
/// `finishedAt` when all terminated, else when `Ready` went `False`, else
/// its deletion time, else its creation.
pub fn pod_finish_time(pod: &Value) -> Option<DateTime<Utc>> {
    let statuses = pod["status"]["containerStatuses"].as_array();
    let from_containers = statuses.filter(|s| !s.is_empty()).and_then(|s| {
        s.iter()
            .map(|c| {
                c["state"]["terminated"]["finishedAt"]
                    .as_str()
                    .and_then(time)
            })
            .try_fold(None::<DateTime<Utc>>, |acc, t| {
                let t = t?;
                Some(Some(acc.map_or(t, |a| a.max(t))))
            })
            .flatten()
    });
    from_containers
        .or_else(|| {
            pod["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready" && c["status"] == "False")?["lastTransitionTime"]
                .as_str()
                .and_then(time)
        })
        .or_else(|| {
            let at = pod["metadata"]["deletionTimestamp"]
                .as_str()
                .and_then(time)?;
            let grace = pod["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(0);
            Some(at + chrono::Duration::seconds(grace))
        })
        .or_else(|| pod["metadata"]["creationTimestamp"].as_str().and_then(time))
}

/// The pod-failure backoff of one Job (upstream's `backoffRecord`):
/// failures since the last success and when the last one happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    pub failures: u32,
    pub last_failure: Option<DateTime<Utc>>,
}

impl Backoff {
    /// The record after pods newly seen finished (their finish times):
    /// a success resets it to the failures after the last success
    /// (`newBackoffRecord`).
    pub fn observe(self, succeeded: &[DateTime<Utc>], failed: &[DateTime<Utc>]) -> Backoff {
        let mut failed = failed.to_vec();
        failed.sort();
        let Some(last_success) = succeeded.iter().max() else {
            return match failed.last() {
                None => self,
                Some(t) => Backoff {
                    failures: self.failures + failed.len() as u32,
                    last_failure: Some(*t),
                },
            };
        };
        let after: Vec<_> = failed.iter().filter(|t| *t > last_success).collect();
        Backoff {
            failures: after.len() as u32,
            last_failure: after.last().map(|t| **t),
        }
    }

    /// How long before another pod may be created: `base` doubled per
    /// failure after the first, at most `max`, less the time since the
    /// last failure (`getRemainingTimeForFailuresCount`).
    pub fn remaining(&self, now: DateTime<Utc>, base: Duration, max: Duration) -> Duration {
        let (n, Some(last)) = (self.failures, self.last_failure) else {
            return Duration::ZERO;
        };
        if n == 0 {
            return Duration::ZERO;
        }
        let mut delay = base;
        for _ in 1..n {
            delay = delay.saturating_mul(2);
            if delay >= max {
                delay = max;
                break;
            }
        }
        let elapsed = (now - last).to_std().unwrap_or_default();
        delay.saturating_sub(elapsed)
    }
}

/// The pod a Job creates: the template's labels, annotations and spec,
/// the tracking finalizer, the Job as controlling owner, `generateName`
/// `<job>-`; for an Indexed Job also the index (annotation, label,
/// `hostname` `<job>-<index>`, `JOB_COMPLETION_INDEX` in every container)
/// and `generateName` `<job>-<index>-`.
pub fn pod_from_template(job: &Value, index: Option<u32>) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let template = &job["spec"]["template"];
    let mut metadata = json!({
        "generateName": format!("{name}-"),
        "namespace": job["metadata"]["namespace"],
        "finalizers": [TRACKING_FINALIZER],
        "ownerReferences": [{
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": name,
            "uid": job["metadata"]["uid"],
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    });
    for key in ["labels", "annotations"] {
        if let Some(m) = template["metadata"][key]
            .as_object()
            .filter(|m| !m.is_empty())
        {
            metadata[key] = Value::Object(m.clone());
        }
    }
    if let Some(f) = template["metadata"]["finalizers"].as_array() {
        let mut all: Vec<Value> = f.clone();
        if !all.iter().any(|f| f == TRACKING_FINALIZER) {
            all.push(json!(TRACKING_FINALIZER));
        }
        metadata["finalizers"] = json!(all);
    }
    let mut spec = template["spec"].clone();
    if let Some(ix) = index {
        let ix_text = ix.to_string();
        metadata["annotations"][COMPLETION_INDEX] = json!(ix_text);
        metadata["labels"][COMPLETION_INDEX] = json!(ix_text);
        metadata["generateName"] = json!(indexed::generate_name(name, ix));
        spec["hostname"] = json!(format!("{name}-{ix}"));
        let env = json!({
            "name": COMPLETION_INDEX_ENV,
            "valueFrom": {"fieldRef": {
                "apiVersion": "v1",
                "fieldPath": format!("metadata.annotations['{COMPLETION_INDEX}']"),
            }},
        });
        for list in ["initContainers", "containers"] {
            for c in spec[list].as_array_mut().into_iter().flatten() {
                let has = c["env"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|e| e["name"] == COMPLETION_INDEX_ENV));
                if !has {
                    match c["env"].as_array_mut() {
                        Some(e) => e.push(env.clone()),
                        None => c["env"] = json!([env.clone()]),
                    }
                }
            }
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// When a finished Job with `ttlSecondsAfterFinished` may be deleted;
/// `None` when it has none or has not finished (`timeLeft` of upstream's
/// TTL-after-finished controller).
pub fn ttl_expires_at(job: &Value) -> Option<DateTime<Utc>> {
    let ttl = job["spec"]["ttlSecondsAfterFinished"].as_i64()?;
    let finished = finish_time(job)?;
    Some(finished + chrono::Duration::seconds(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        time(s).unwrap()
    }

    #[test]
    fn conditions_as_upstream() {
        let now = "2024-01-01T00:00:00Z";
        let mut list = Vec::new();
        // False is never added.
        assert!(!ensure_condition(
            &mut list,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            now
        ));
        assert!(ensure_condition(
            &mut list,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now
        ));
        assert!(!ensure_condition(
            &mut list,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now
        ));
        assert!(ensure_condition(
            &mut list,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            now
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0]["status"], "False");
        let job = json!({"status": {"conditions": [
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True", "lastTransitionTime": now},
        ]}});
        assert_eq!(finished(&job), Some("Complete"));
        assert!(success_criteria_met(&job));
        assert_eq!(finish_time(&job), Some(at(now)));
        assert_eq!(
            finished(&json!({"status": {"conditions": [{"type": "Failed", "status": "False"}]}})),
            None
        );
    }

    #[test]
    fn wanted_pods() {
        let job = |c: Value, p: u32| json!({"spec": {"completions": c, "parallelism": p}});
        // upstream's manageJob: never more than what remains.
        assert_eq!(want_active(&job(json!(4), 2), 0, 0), 2);
        assert_eq!(want_active(&job(json!(4), 2), 2, 3), 1);
        assert_eq!(want_active(&job(json!(4), 2), 0, 5), 0);
        // A work queue: parallelism until the first success.
        assert_eq!(want_active(&job(Value::Null, 3), 1, 0), 3);
        assert_eq!(want_active(&job(Value::Null, 3), 1, 1), 1);
    }

    #[test]
    fn failed_and_terminating() {
        let job = json!({"spec": {}});
        let failed_job = json!({"spec": {"podReplacementPolicy": "Failed"}});
        let terminating =
            json!({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}});
        assert!(pod_failed(&terminating, &job));
        assert!(!pod_failed(&terminating, &failed_job));
        assert!(pod_terminating(&terminating) && !pod_active(&terminating));
        let done =
            json!({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Succeeded"}});
        assert!(!pod_failed(&done, &job) && !pod_terminating(&done));
    }

    #[test]
    fn backoff_doubles_to_the_cap() {
        // upstream's TestGetRemainingBackoffTime.
        let now = at("2024-01-01T00:01:00Z");
        let base = Duration::from_secs(10);
        let max = Duration::from_secs(600);
        let rec = |n, last: &str| Backoff {
            failures: n,
            last_failure: Some(at(last)),
        };
        assert_eq!(Backoff::default().remaining(now, base, max), Duration::ZERO);
        assert_eq!(
            rec(1, "2024-01-01T00:01:00Z").remaining(now, base, max),
            Duration::from_secs(10)
        );
        assert_eq!(
            rec(1, "2024-01-01T00:00:55Z").remaining(now, base, max),
            Duration::from_secs(5)
        );
        assert_eq!(
            rec(3, "2024-01-01T00:01:00Z").remaining(now, base, max),
            Duration::from_secs(40)
        );
        assert_eq!(
            rec(1, "2024-01-01T00:00:00Z").remaining(now, base, max),
            Duration::ZERO
        );
        assert_eq!(
            rec(20, "2024-01-01T00:01:00Z").remaining(now, base, max),
            max
        );
        // A success resets the count to the failures after it.
        let r = rec(4, "2024-01-01T00:00:00Z").observe(
            &[at("2024-01-01T00:00:30Z")],
            &[at("2024-01-01T00:00:20Z"), at("2024-01-01T00:00:40Z")],
        );
        assert_eq!(
            r,
            Backoff {
                failures: 1,
                last_failure: Some(at("2024-01-01T00:00:40Z"))
            }
        );
        let r = r.observe(&[], &[at("2024-01-01T00:00:50Z")]);
        assert_eq!(r.failures, 2);
    }

    #[test]
    fn finish_times() {
        let pod = json!({"status": {"containerStatuses": [
            {"state": {"terminated": {"finishedAt": "2024-01-01T00:00:05Z"}}},
            {"state": {"terminated": {"finishedAt": "2024-01-01T00:00:09Z"}}},
        ]}});
        assert_eq!(pod_finish_time(&pod), Some(at("2024-01-01T00:00:09Z")));
        let pod = json!({"metadata": {"creationTimestamp": "2024-01-01T00:00:00Z"}, "status": {
            "containerStatuses": [{"state": {"running": {}}}],
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2024-01-01T00:00:03Z"}],
        }});
        assert_eq!(pod_finish_time(&pod), Some(at("2024-01-01T00:00:03Z")));
    }

    #[test]
    fn removal_order() {
        let pending = json!({"spec": {}, "status": {"phase": "Pending"}});
        let running = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
        let ready = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        let mut pods = vec![&ready, &running, &pending];
        pods.sort_by(|a, b| remove_order(a, b));
        assert_eq!(pods, vec![&pending, &running, &ready]);
    }

    #[test]
    fn pods_from_templates() {
        let job = json!({
            "metadata": {"name": "pi", "namespace": "ns", "uid": "u1"},
            "spec": {"completionMode": "Indexed", "template": {
                "metadata": {"labels": {"app": "pi"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"},
            }},
        });
        let pod = pod_from_template(&job, Some(2));
        assert_eq!(pod["metadata"]["generateName"], "pi-2-");
        assert_eq!(pod["metadata"]["labels"]["app"], "pi");
        assert_eq!(pod["metadata"]["labels"][COMPLETION_INDEX], "2");
        assert_eq!(pod["metadata"]["annotations"][COMPLETION_INDEX], "2");
        assert_eq!(pod["metadata"]["finalizers"], json!([TRACKING_FINALIZER]));
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(pod["spec"]["hostname"], "pi-2");
        assert_eq!(
            pod["spec"]["containers"][0]["env"][0]["name"],
            COMPLETION_INDEX_ENV
        );
        let plain = pod_from_template(&job, None);
        assert_eq!(plain["metadata"]["generateName"], "pi-");
        assert!(plain["spec"]["hostname"].is_null());
    }

    #[test]
    fn ttl() {
        let job = json!({"spec": {"ttlSecondsAfterFinished": 30}, "status": {"conditions": [
            {"type": "Complete", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
        assert_eq!(ttl_expires_at(&job), Some(at("2024-01-01T00:00:30Z")));
        assert_eq!(
            ttl_expires_at(&json!({"spec": {"ttlSecondsAfterFinished": 30}})),
            None
        );
    }

    #[test]
    fn deadlines() {
        let job = json!({"spec": {"activeDeadlineSeconds": 10}, "status": {"startTime": "2024-01-01T00:00:00Z"}});
        assert_eq!(
            deadline_left(&job, at("2024-01-01T00:00:04Z")),
            Some(Duration::from_secs(6))
        );
        assert_eq!(
            deadline_left(&job, at("2024-01-01T00:00:20Z")),
            Some(Duration::ZERO)
        );
        let mut suspended = job.clone();
        suspended["spec"]["suspend"] = json!(true);
        assert_eq!(deadline_left(&suspended, at("2024-01-01T00:00:20Z")), None);
    }
}
