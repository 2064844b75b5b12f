//! A Job's `podFailurePolicy` matched against a failed pod (upstream's
//! `pod_failure_policy.go`): the first rule whose `onExitCodes` (a
//! terminated container, init containers after the others, with a non-zero
//! exit code `In`/`NotIn` the values) or `onPodConditions` (a condition of
//! that type and status) matches decides.

use serde_json::Value;

/// What the policy says about one failed pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `FailJob`: the Job fails with this message.
    pub fail_job: Option<String>,
    /// Whether the failure counts towards `backoffLimit` (`Ignore` does not).
    pub count_failed: bool,
    /// The action of the rule that matched.
    pub action: Option<String>,
}

impl Outcome {
    fn default_count() -> Outcome {
        Outcome {
            fail_job: None,
            count_failed: true,
            action: None,
        }
    }
}

fn matching_container<'a>(statuses: &'a Value, req: &Value) -> Option<&'a Value> {
    let name = req["containerName"].as_str();
    let values: Vec<i64> = req["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    let op = req["operator"].as_str().unwrap_or_default();
    statuses.as_array()?.iter().find(|cs| {
        let Some(code) = cs["state"]["terminated"]["exitCode"].as_i64() else {
            return false;
        };
        if name.is_some_and(|n| cs["name"] != n) || code == 0 {
            return false;
        }
        match op {
            "In" => values.contains(&code),
            "NotIn" => !values.contains(&code),
            _ => false,
        }
    })
}

/// Upstream's `matchPodFailurePolicy`.
pub fn matches(policy: &Value, pod: &Value) -> Outcome {
    let Some(rules) = policy["rules"].as_array() else {
        return Outcome::default_count();
    };
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        let action = rule["action"].as_str().unwrap_or_default();
        let what = if rule["onExitCodes"].is_object() {
            let req = &rule["onExitCodes"];
            let status = &pod["status"];
            matching_container(&status["containerStatuses"], req)
                .or_else(|| matching_container(&status["initContainerStatuses"], req))
                .map(|cs| {
                    format!(
                        "Container {} for pod {ns}/{name} failed with exit code {} matching {action} rule at index {i}",
                        cs["name"].as_str().unwrap_or_default(),
                        cs["state"]["terminated"]["exitCode"]
                    )
                })
        } else if let Some(patterns) = rule["onPodConditions"].as_array() {
            pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| {
                    patterns
                        .iter()
                        .any(|p| c["type"] == p["type"] && c["status"] == p["status"])
                })
                .map(|c| {
                    format!(
                        "Pod {ns}/{name} has condition {} matching {action} rule at index {i}",
                        c["type"].as_str().unwrap_or_default()
                    )
                })
        } else {
            None
        };
        let Some(message) = what else { continue };
        let outcome = |fail_job, count_failed| Outcome {
            fail_job,
            count_failed,
            action: Some(action.to_string()),
        };
        match action {
            "Ignore" => return outcome(None, false),
            "Count" | "FailIndex" => return outcome(None, true),
            "FailJob" => return outcome(Some(message), true),
            _ => {}
        }
    }
    Outcome::default_count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed_pod(code: i64, init_code: Option<i64>, conditions: Value) -> Value {
        let mut pod = json!({
            "metadata": {"namespace": "ns", "name": "p"},
            "status": {
                "phase": "Failed",
                "conditions": conditions,
                "containerStatuses": [
                    {"name": "main", "state": {"terminated": {"exitCode": code}}},
                    {"name": "side", "state": {"running": {}}},
                ],
            }
        });
        if let Some(c) = init_code {
            pod["status"]["initContainerStatuses"] =
                json!([{"name": "init", "state": {"terminated": {"exitCode": c}}}]);
        }
        pod
    }

    #[test]
    fn rules() {
        let policy = json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
        ]});
        // Disrupted: ignored, whatever the exit code.
        let out = matches(
            &policy,
            &failed_pod(
                42,
                None,
                json!([{"type": "DisruptionTarget", "status": "True"}]),
            ),
        );
        assert_eq!(out.action.as_deref(), Some("Ignore"));
        assert!(!out.count_failed);
        // Exit code 42 of `main`: the job fails, with upstream's message.
        let out = matches(&policy, &failed_pod(42, None, json!([])));
        assert_eq!(
            out.fail_job.as_deref(),
            Some(
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
            )
        );
        // 3 is not in [1, 2]: counted by the rule.
        let out = matches(&policy, &failed_pod(3, None, json!([])));
        assert_eq!(out.action.as_deref(), Some("Count"));
        // 1: no rule matches, counted by default.
        let out = matches(&policy, &failed_pod(1, None, json!([])));
        assert_eq!(out, Outcome::default_count());
        // An init container's code counts when no container matches.
        let out = matches(
            &json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [5]}}]}),
            &failed_pod(1, Some(5), json!([])),
        );
        assert!(out.fail_job.unwrap().starts_with("Container init "));
        // Exit code 0 never matches.
        let out = matches(
            &json!({"rules": [{"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [1]}}]}),
            &failed_pod(0, None, json!([])),
        );
        assert!(out.count_failed);
    }
}
