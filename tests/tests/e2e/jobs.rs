//! End-to-end: the Job, CronJob and TTL-after-finished controllers
//! (issue 53) against the real binary, driven by kubectl. Pods run on the
//! stand-in node agent, which finishes them as their template's
//! `node-agent.wasm-apiserver.io/exit-after` / `exit-code` annotations say.
//!
//! CronJobs run on an injected clock: the hidden server flag
//! `--cronjob-controller-clock-speed=60` makes the controller's minute a
//! second, so an every-minute schedule fires every second of the test.
//! The Job controller's pod-failure backoff is shortened with the hidden
//! `--job-pod-failure-backoff`.

use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

const WAIT: Duration = Duration::from_secs(60);

fn apply(server: &Server, manifest: &str) {
    let out = kubectl_stdin(server, None, &["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "apply failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.diagnostics()
    );
}

fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

fn condition<'a>(obj: &'a Value, ty: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty && c["status"] == "True")
}

/// The reasons of the Events about `name` (any kind).
fn event_reasons(server: &Server, name: &str) -> Vec<String> {
    let events = kubectl_json(
        server,
        None,
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={name}"),
        ],
    );
    items(&events)
        .iter()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect()
}

/// The Jobs a CronJob owns, by name.
fn jobs_of(server: &Server, cronjob: &str) -> Vec<Value> {
    items(&kubectl_json(server, None, &["get", "jobs"]))
        .into_iter()
        .filter(|j| {
            j["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|r| {
                    r.iter()
                        .any(|r| r["kind"] == "CronJob" && r["name"] == cronjob)
                })
        })
        .collect()
}

/// A CronJob firing every minute; `extra_spec` goes in its spec,
/// `pod_annotations` and `pod_spec` in its pods'.
fn cronjob(
    name: &str,
    policy: &str,
    extra_spec: &str,
    pod_annotations: &str,
    pod_spec: &str,
) -> String {
    format!(
        r#"{{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {{"name": "{name}"}},
  "spec": {{"schedule": "* * * * *", "concurrencyPolicy": "{policy}", {extra_spec}
    "jobTemplate": {{"metadata": {{"labels": {{"from": "{name}"}}}}, "spec": {{"template": {{
      "metadata": {{"annotations": {{{pod_annotations}}}}},
      "spec": {{"restartPolicy": "Never", {pod_spec}
        "containers": [{{"name": "c", "image": "busybox"}}]}}}}}}}}}}}}"#
    )
}

#[test]
fn suspended_job_makes_no_pods_until_resumed() {
    let server = Server::start();
    apply(
        &server,
        r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "later"},
  "spec": {"suspend": true, "completions": 2, "parallelism": 2, "template": {"spec": {
    "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}"#,
    );
    let job = poll_until(WAIT, "the Suspended condition", || {
        let job = kubectl_json(&server, None, &["get", "job", "later"]);
        condition(&job, "Suspended").is_some().then_some(job)
    });
    let c = condition(&job, "Suspended").unwrap();
    assert_eq!(c["reason"], "JobSuspended");
    assert!(job["status"]["startTime"].is_null(), "{job}");
    let pods = kubectl_json(&server, None, &["get", "pods", "-l", "job-name=later"]);
    assert!(items(&pods).is_empty(), "{pods}");
    assert!(event_reasons(&server, "later").contains(&"Suspended".to_string()));

    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "job",
            "later",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":false}}"#,
        ],
    );
    let pods = poll_until(WAIT, "two pods after resuming", || {
        let pods = items(&kubectl_json(
            &server,
            None,
            &["get", "pods", "-l", "job-name=later"],
        ));
        (pods.len() == 2).then_some(pods)
    });
    for p in &pods {
        assert_eq!(
            p["metadata"]["finalizers"][0], "batch.kubernetes.io/job-tracking",
            "{p}"
        );
        let owner = &p["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["controller"].as_bool()),
            (Some("Job"), Some(true))
        );
        assert!(p["metadata"]["generateName"] == "later-", "{p}");
    }
    let job = poll_until(WAIT, "Suspended=False and active=2", || {
        let job = kubectl_json(&server, None, &["get", "job", "later"]);
        let resumed = job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Suspended" && c["status"] == "False" && c["reason"] == "JobResumed"
            });
        (resumed && job["status"]["active"] == 2).then_some(job)
    });
    assert!(job["status"]["startTime"].is_string(), "{job}");
    let reasons = event_reasons(&server, "later");
    assert!(reasons.contains(&"Resumed".to_string()), "{reasons:?}");
    assert!(
        reasons.contains(&"SuccessfulCreate".to_string()),
        "{reasons:?}"
    );

    // Suspending again deletes the pods (their finalizers removed first).
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "job",
            "later",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
    );
    poll_until(WAIT, "the pods deleted on suspension", || {
        let pods = items(&kubectl_json(
            &server,
            None,
            &["get", "pods", "-l", "job-name=later"],
        ));
        pods.is_empty().then_some(())
    });
    let reasons = event_reasons(&server, "later");
    assert!(
        reasons.contains(&"SuccessfulDelete".to_string()),
        "{reasons:?}"
    );
}

#[test]
fn active_deadline_fails_the_job() {
    let server = Server::start();
    apply(
        &server,
        r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "slow"},
  "spec": {"activeDeadlineSeconds": 2, "template": {"spec": {
    "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}"#,
    );
    // No node runs the pod: the deadline passes.
    let out = kubectl(
        &server,
        None,
        &[
            "wait",
            "--for=condition=failed",
            "job/slow",
            "--timeout=60s",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = kubectl_json(&server, None, &["get", "job", "slow"]);
    let failed = condition(&job, "Failed").unwrap();
    assert_eq!(failed["reason"], "DeadlineExceeded");
    assert_eq!(
        failed["message"],
        "Job was active longer than specified deadline"
    );
    let target = condition(&job, "FailureTarget").expect("the interim FailureTarget condition");
    assert_eq!(target["reason"], "DeadlineExceeded");
    // Its pod was deleted and counted as failed.
    assert_eq!(job["status"]["failed"], 1, "{job}");
    assert!(job["status"]["active"].is_null(), "{job}");
    poll_until(WAIT, "the pod gone", || {
        items(&kubectl_json(
            &server,
            None,
            &["get", "pods", "-l", "job-name=slow"],
        ))
        .is_empty()
        .then_some(())
    });
    assert!(event_reasons(&server, "slow").contains(&"DeadlineExceeded".to_string()));
}

#[test]
fn cronjob_forbid_keeps_one_job_and_create_job_from_cronjob() {
    let server = Server::start_with_args(&["--cronjob-controller-clock-speed=60"]);
    // The pods are never run (no node agent): the first Job stays active.
    apply(&server, &cronjob("tick", "Forbid", "", "", ""));
    let first = poll_until(WAIT, "the first Job", || {
        let jobs = jobs_of(&server, "tick");
        (jobs.len() == 1).then(|| jobs[0].clone())
    });
    let name = first["metadata"]["name"].as_str().unwrap().to_string();
    let minutes: i64 = name
        .strip_prefix("tick-")
        .unwrap()
        .parse()
        .expect("minutes since epoch");
    assert!(minutes > 28_000_000, "{name}");
    let stamp = first["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
        .as_str()
        .expect("scheduled timestamp annotation");
    let scheduled = chrono::DateTime::parse_from_rfc3339(stamp).unwrap();
    assert_eq!(scheduled.timestamp() / 60, minutes);
    assert_eq!(first["metadata"]["labels"]["from"], "tick");
    // Several minutes of the controller's clock later: still one Job.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(jobs_of(&server, "tick").len(), 1);
    let cj = kubectl_json(&server, None, &["get", "cronjob", "tick"]);
    assert_eq!(cj["status"]["active"][0]["name"], name.as_str(), "{cj}");
    assert!(cj["status"]["lastScheduleTime"].is_string(), "{cj}");
    let reasons = event_reasons(&server, "tick");
    assert!(
        reasons.contains(&"SuccessfulCreate".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"JobAlreadyActive".to_string()),
        "{reasons:?}"
    );

    // kubectl's own Job from the CronJob's template.
    kubectl_ok(
        &server,
        None,
        &["create", "job", "manual", "--from=cronjob/tick"],
    );
    let manual = kubectl_json(&server, None, &["get", "job", "manual"]);
    assert_eq!(
        manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"],
        "manual"
    );
    assert_eq!(manual["metadata"]["ownerReferences"][0]["name"], "tick");
    // The controller notices a Job it did not create.
    poll_until(WAIT, "UnexpectedJob", || {
        event_reasons(&server, "tick")
            .contains(&"UnexpectedJob".to_string())
            .then_some(())
    });
    // Suspended: no more Jobs even when the active ones go.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "cronjob",
            "tick",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
    );
    kubectl_ok(
        &server,
        None,
        &["delete", "job", &name, "manual", "--wait=false"],
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(jobs_of(&server, "tick").is_empty());
}

#[test]
fn cronjob_replace_deletes_the_running_job() {
    let server = Server::start_with_args(&["--cronjob-controller-clock-speed=60"]);
    apply(&server, &cronjob("swap", "Replace", "", "", ""));
    let first = poll_until(WAIT, "the first Job", || {
        jobs_of(&server, "swap")
            .first()
            .and_then(|j| j["metadata"]["name"].as_str().map(String::from))
    });
    // A later schedule time replaces it.
    let seen = poll_until(WAIT, "a second Job replacing the first", || {
        let names: BTreeSet<String> = jobs_of(&server, "swap")
            .iter()
            .filter(|j| j["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|j| j["metadata"]["name"].as_str().map(String::from))
            .collect();
        (!names.is_empty() && !names.contains(&first)).then_some(names)
    });
    assert_eq!(seen.len(), 1, "{seen:?}");
    let reasons = event_reasons(&server, "swap");
    assert!(
        reasons.contains(&"SuccessfulDelete".to_string()),
        "{reasons:?}"
    );
    let cj = kubectl_json(&server, None, &["get", "cronjob", "swap"]);
    assert!(
        cj["status"]["active"]
            .as_array()
            .is_some_and(|a| a.len() == 1),
        "{cj}"
    );
}

#[test]
fn cronjob_schedules_and_time_zones_are_validated() {
    let server = Server::start();
    let out = kubectl(
        &server,
        None,
        &[
            "create",
            "cronjob",
            "bad",
            "--image=busybox",
            "--schedule=61 * * * *",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("spec.schedule") && stderr.contains("end of range (61) above maximum (59)"),
        "{stderr}"
    );
    let out = kubectl_stdin(
        &server,
        None,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tz"},
  "spec": {"schedule": "0 9 * * *", "timeZone": "Mars/Olympus_Mons", "jobTemplate": {"spec": {"template": {"spec": {
    "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}}"#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("spec.timeZone") && stderr.contains("unknown time zone Mars/Olympus_Mons"),
        "{stderr}"
    );
    // A real zone is accepted.
    apply(
        &server,
        r#"{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tz"},
  "spec": {"schedule": "0 9 * * *", "timeZone": "Europe/Paris", "jobTemplate": {"spec": {"template": {"spec": {
    "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}}"#,
    );
}

/// Finishes a pod as its kubelet would: phase `Succeeded` (code 0) or
/// `Failed`, its container terminated with `code`.
fn finish(server: &Server, pod: &str, code: i32) {
    let phase = if code == 0 { "Succeeded" } else { "Failed" };
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    let status = format!(
        r#"{{"status": {{"phase": "{phase}", "containerStatuses": [{{"name": "c", "image": "busybox",
  "imageID": "", "ready": false, "restartCount": 0,
  "state": {{"terminated": {{"exitCode": {code}, "finishedAt": "{now}", "startedAt": "{now}"}}}}}}]}}}}"#
    );
    kubectl_ok(
        server,
        None,
        &[
            "patch",
            "pod",
            pod,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ],
    );
}

fn pods_of(server: &Server, job: &str) -> Vec<Value> {
    items(&kubectl_json(
        server,
        None,
        &["get", "pods", "-l", &format!("job-name={job}")],
    ))
}

fn unfinished(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_null()
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
}

fn simple_job(name: &str, spec: &str) -> String {
    format!(
        r#"{{"apiVersion": "batch/v1", "kind": "Job", "metadata": {{"name": "{name}"}},
  "spec": {{{spec} "template": {{"spec": {{"restartPolicy": "Never",
    "containers": [{{"name": "c", "image": "busybox"}}]}}}}}}}}"#
    )
}

#[test]
fn job_counts_completions_within_parallelism() {
    // The pods' kubelet is played by the test: it finishes them one by one.
    let server = Server::start();
    apply(
        &server,
        &simple_job("pi", r#""completions": 4, "parallelism": 2,"#),
    );
    let mut finished = BTreeSet::new();
    for round in 0..4 {
        let running: Vec<String> = poll_until(WAIT, "the pods parallelism allows", || {
            let pods = pods_of(&server, "pi");
            let running: Vec<String> = pods
                .iter()
                .filter(|p| unfinished(p))
                .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
                .collect();
            assert!(running.len() <= 2, "more than 2 pods running: {running:?}");
            let want = 2.min(4 - round);
            (running.len() == want).then_some(running)
        });
        finish(&server, &running[0], 0);
        finished.insert(running[0].clone());
    }
    let out = kubectl(
        &server,
        None,
        &[
            "wait",
            "--for=condition=complete",
            "job/pi",
            "--timeout=60s",
        ],
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.diagnostics()
    );
    let job = kubectl_json(&server, None, &["get", "job", "pi"]);
    assert_eq!(job["status"]["succeeded"], 4, "{job}");
    assert!(
        job["status"]["failed"].is_null() && job["status"]["active"].is_null(),
        "{job}"
    );
    assert!(job["status"]["completionTime"].is_string(), "{job}");
    let met = condition(&job, "SuccessCriteriaMet").expect("SuccessCriteriaMet first");
    assert_eq!(met["reason"], "CompletionsReached");
    let pods = pods_of(&server, "pi");
    assert_eq!(pods.len(), 4, "{pods:?}");
    for p in &pods {
        // Counted: the tracking finalizer is gone, the pod stays.
        assert!(
            p["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty()),
            "{p}"
        );
    }
    let reasons = event_reasons(&server, "pi");
    assert!(reasons.contains(&"Completed".to_string()), "{reasons:?}");
    assert_eq!(
        reasons.iter().filter(|r| *r == "SuccessfulCreate").count(),
        4,
        "{reasons:?}"
    );
    let table = kubectl_ok(&server, None, &["get", "job", "pi"]);
    assert!(
        table.contains("Complete") && table.contains("4/4"),
        "{table}"
    );
}

#[test]
fn backoff_limit_and_pod_failure_policy_fail_jobs() {
    let server = Server::start_with_args(&["--job-pod-failure-backoff=100ms"]);
    apply(&server, &simple_job("flaky", r#""backoffLimit": 1,"#));
    for _ in 0..2 {
        let pod = poll_until(WAIT, "a running pod", || {
            pods_of(&server, "flaky")
                .iter()
                .find(|p| unfinished(p))
                .and_then(|p| p["metadata"]["name"].as_str().map(String::from))
        });
        finish(&server, &pod, 1);
    }
    let out = kubectl(
        &server,
        None,
        &[
            "wait",
            "--for=condition=failed",
            "job/flaky",
            "--timeout=60s",
        ],
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.diagnostics()
    );
    let job = kubectl_json(&server, None, &["get", "job", "flaky"]);
    let failed = condition(&job, "Failed").unwrap();
    assert_eq!(failed["reason"], "BackoffLimitExceeded");
    assert_eq!(
        failed["message"],
        "Job has reached the specified backoff limit"
    );
    assert_eq!(job["status"]["failed"], 2, "{job}");
    assert!(condition(&job, "FailureTarget").is_some(), "{job}");
    assert_eq!(pods_of(&server, "flaky").len(), 2);
    assert!(event_reasons(&server, "flaky").contains(&"BackoffLimitExceeded".to_string()));

    // Exit code 42 fails the Job at once, whatever the backoff limit.
    apply(
        &server,
        &simple_job(
            "strict",
            r#""backoffLimit": 6, "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]}}]},"#,
        ),
    );
    let pod = poll_until(WAIT, "the pod", || {
        pods_of(&server, "strict")
            .first()
            .and_then(|p| p["metadata"]["name"].as_str().map(String::from))
    });
    finish(&server, &pod, 42);
    let out = kubectl(
        &server,
        None,
        &[
            "wait",
            "--for=condition=failed",
            "job/strict",
            "--timeout=60s",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = kubectl_json(&server, None, &["get", "job", "strict"]);
    let failed = condition(&job, "Failed").unwrap();
    assert_eq!(failed["reason"], "PodFailurePolicy");
    assert_eq!(
        failed["message"],
        format!(
            "Container c for pod default/{pod} failed with exit code 42 matching FailJob rule at index 0"
        )
    );
    assert_eq!(pods_of(&server, "strict").len(), 1);
}

#[test]
fn indexed_job_completes_every_index_and_ttl_deletes_it() {
    let server = Server::start();
    apply(
        &server,
        &simple_job(
            "ix",
            r#""completions": 3, "parallelism": 3, "completionMode": "Indexed", "ttlSecondsAfterFinished": 2,"#,
        ),
    );
    let pods = poll_until(WAIT, "three indexed pods", || {
        let pods = pods_of(&server, "ix");
        (pods.len() == 3).then_some(pods)
    });
    let mut indexes = BTreeSet::new();
    for p in &pods {
        let ix = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
            ix.as_str()
        );
        assert_eq!(p["spec"]["hostname"], format!("ix-{ix}"));
        assert!(
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with(&format!("ix-{ix}-")),
            "{p}"
        );
        assert_eq!(
            p["spec"]["containers"][0]["env"][0]["name"], "JOB_COMPLETION_INDEX",
            "{p}"
        );
        indexes.insert(ix);
    }
    assert_eq!(
        indexes,
        BTreeSet::from(["0".into(), "1".into(), "2".into()])
    );
    // Index 1 first: completedIndexes shows it alone.
    let by_ix = |ix: &str| {
        pods.iter()
            .find(|p| {
                p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == ix
            })
            .and_then(|p| p["metadata"]["name"].as_str())
            .unwrap()
            .to_string()
    };
    finish(&server, &by_ix("1"), 0);
    poll_until(WAIT, "completedIndexes 1", || {
        let job = kubectl_json(&server, None, &["get", "job", "ix"]);
        (job["status"]["completedIndexes"] == "1").then_some(())
    });
    finish(&server, &by_ix("0"), 0);
    finish(&server, &by_ix("2"), 0);
    let out = kubectl(
        &server,
        None,
        &[
            "wait",
            "--for=condition=complete",
            "job/ix",
            "--timeout=60s",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = kubectl_json(&server, None, &["get", "job", "ix"]);
    assert_eq!(job["status"]["completedIndexes"], "0-2", "{job}");
    assert_eq!(job["status"]["succeeded"], 3, "{job}");
    // ttlSecondsAfterFinished: the Job and its pods go.
    poll_until(WAIT, "the Job deleted after its TTL", || {
        let out = kubectl(&server, None, &["get", "job", "ix"]);
        (!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound"))
            .then_some(())
    });
    poll_until(WAIT, "its pods deleted", || {
        pods_of(&server, "ix").is_empty().then_some(())
    });
}
