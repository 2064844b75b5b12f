//! Policy reports as the background audit writes them, and the
//! definitions of their resources; no IO.
//!
//! * **Format**: `openreports.io/v1alpha1` `Report` / `ClusterReport` (the
//!   format Kyverno and Kubewarden are moving to) or, behind a flag,
//!   `wgpolicyk8s.io/v1alpha2` `PolicyReport` / `ClusterPolicyReport`.
//!   Both are served as custom resources whose definitions
//!   ([`crds`]) follow what the upstream projects publish (names, short
//!   names, printer columns, schema), so tools such as policy-reporter read
//!   them unchanged and could install them without this server.
//! * **Shape** (as Kubewarden's audit-scanner writes them): one report per
//!   checked resource, named by the resource's uid, in its namespace (a
//!   cluster-scoped resource gets a cluster report), owned by it (so the
//!   garbage collector removes it with the resource), `scope` naming it,
//!   one result per policy (`pass`, `fail`, `warn`, `error`, `skip`) and a
//!   `summary`.
//! * **Bounded**: at most [`MAX_RESULTS`] results, messages cut at
//!   [`MAX_MESSAGE`] bytes.
//! * **Written only when a result changes**: [`same_results`] compares
//!   what a write would change, timestamps aside; [`keep_timestamps`]
//!   keeps the time of results that did not change.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Most results one report holds (the rest are dropped, and the last
/// result's message says how many).
pub const MAX_RESULTS: usize = 200;
/// Longest result message kept, in bytes.
pub const MAX_MESSAGE: usize = 1024;
/// The `app.kubernetes.io/managed-by` label of the reports this server writes.
pub const MANAGED_BY: &str = "wasm-apiserver";
/// `source` of every result.
pub const SOURCE: &str = "wasm-apiserver";

/// Which report resources are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `openreports.io/v1alpha1` `Report` / `ClusterReport`.
    #[default]
    OpenReports,
    /// `wgpolicyk8s.io/v1alpha2` `PolicyReport` / `ClusterPolicyReport`.
    PolicyReport,
}

/// One of the two report resources of a format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    short_name: &'static str,
}

impl Format {
    /// Parses the `--report-format` value.
    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "openreports" | "openreports.io" => Ok(Format::OpenReports),
            "policyreport" | "wgpolicyk8s.io" => Ok(Format::PolicyReport),
            other => Err(format!(
                "unsupported report format {other:?}: must be \"openreports\" or \"policyreport\""
            )),
        }
    }

    /// The namespaced and the cluster-scoped report resources.
    pub fn kinds(self) -> [Kind; 2] {
        let (group, version) = match self {
            Format::OpenReports => ("openreports.io", "v1alpha1"),
            Format::PolicyReport => ("wgpolicyk8s.io", "v1alpha2"),
        };
        let k = |kind, plural, namespaced, short_name| Kind {
            group,
            version,
            kind,
            plural,
            namespaced,
            short_name,
        };
        match self {
            Format::OpenReports => [
                k("Report", "reports", true, "reps"),
                k("ClusterReport", "clusterreports", false, "creps"),
            ],
            Format::PolicyReport => [
                k("PolicyReport", "policyreports", true, "polr"),
                k(
                    "ClusterPolicyReport",
                    "clusterpolicyreports",
                    false,
                    "cpolr",
                ),
            ],
        }
    }

    /// The report resource for a resource that is (or is not) namespaced.
    pub fn kind_for(self, namespaced: bool) -> Kind {
        let [ns, cluster] = self.kinds();
        if namespaced { ns } else { cluster }
    }
}

impl Kind {
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// A result's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The policy's requirements are met.
    Pass,
    /// They are not.
    Fail,
    /// They are not, and the policy only warns.
    Warn,
    /// The policy could not be evaluated.
    Error,
    /// The policy was not evaluated.
    Skip,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Warn => "warn",
            Outcome::Error => "error",
            Outcome::Skip => "skip",
        }
    }
}

/// What one policy said of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The policy's name (an `AdmissionPlugin`, a ValidatingAdmissionPolicy).
    pub policy: String,
    /// The rule within it (a VAP's binding), if any.
    pub rule: Option<String>,
    pub outcome: Outcome,
    pub message: String,
    /// `critical`, `high`, `medium`, `low` or `info`, when declared.
    pub severity: Option<String>,
    pub category: Option<String>,
    pub properties: BTreeMap<String, String>,
}

/// A severity as reports accept it (`None` for anything else).
pub fn severity(s: &str) -> Option<String> {
    let s = s.trim().to_ascii_lowercase();
    matches!(s.as_str(), "critical" | "high" | "medium" | "low" | "info").then_some(s)
}

fn cut(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// The `{seconds, nanos}` timestamp of results.
pub fn timestamp(unix_nanos: i128) -> Value {
    json!({
        "seconds": (unix_nanos / 1_000_000_000) as i64,
        "nanos": (unix_nanos % 1_000_000_000) as i64,
    })
}

/// The report of `object` (a stored resource with `apiVersion`, `kind`
/// and `metadata.uid`) holding `findings`, at `now` (see [`timestamp`]).
pub fn report(
    format: Format,
    object: &Value,
    namespaced: bool,
    findings: &[Finding],
    now: &Value,
) -> Value {
    let kind = format.kind_for(namespaced);
    let m = &object["metadata"];
    let mut scope = json!({
        "apiVersion": object["apiVersion"],
        "kind": object["kind"],
        "name": m["name"],
        "uid": m["uid"],
    });
    let mut metadata = json!({
        "name": m["uid"],
        "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
        "ownerReferences": [{
            "apiVersion": object["apiVersion"],
            "kind": object["kind"],
            "name": m["name"],
            "uid": m["uid"],
        }],
    });
    if namespaced {
        scope["namespace"] = m["namespace"].clone();
        metadata["namespace"] = m["namespace"].clone();
    }
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by(|a, b| (&a.policy, &a.rule).cmp(&(&b.policy, &b.rule)));
    let dropped = sorted.len().saturating_sub(MAX_RESULTS);
    sorted.truncate(MAX_RESULTS);
    let mut summary: BTreeMap<&str, u64> = ["pass", "fail", "warn", "error", "skip"]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
    let results: Vec<Value> = sorted
        .iter()
        .map(|f| {
            *summary.entry(f.outcome.as_str()).or_default() += 1;
            let mut r = json!({
                "source": SOURCE,
                "policy": f.policy,
                "result": f.outcome.as_str(),
                "scored": true,
                "timestamp": now,
            });
            if let Some(rule) = &f.rule {
                r["rule"] = json!(rule);
            }
            let message = cut(&f.message);
            if !message.is_empty() {
                r["message"] = json!(message);
            }
            if let Some(s) = &f.severity {
                r["severity"] = json!(s);
            }
            if let Some(c) = &f.category {
                r["category"] = json!(c);
            }
            if !f.properties.is_empty() {
                r["properties"] = json!(f.properties);
            }
            r
        })
        .collect();
    let mut results = results;
    if dropped > 0
        && let Some(last) = results.last_mut()
    {
        let message = last["message"].as_str().unwrap_or_default().to_string();
        last["message"] = json!(format!(
            "{message} ({dropped} more results dropped: a report holds at most {MAX_RESULTS})"
        ));
    }
    let mut out = json!({
        "apiVersion": kind.api_version(),
        "kind": kind.kind,
        "metadata": metadata,
        "scope": scope,
        "summary": summary,
        "results": results,
    });
    if format == Format::OpenReports {
        out["source"] = json!(SOURCE);
    }
    out
}

/// The results without their timestamps, for comparison.
fn untimed(report: &Value) -> Vec<Value> {
    report["results"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    let mut r = r.clone();
                    if let Some(o) = r.as_object_mut() {
                        o.remove("timestamp");
                    }
                    r
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether writing `new` over `existing` would change anything but
/// timestamps (results, summary, scope, owners).
pub fn same_results(existing: &Value, new: &Value) -> bool {
    untimed(existing) == untimed(new)
        && existing["summary"] == new["summary"]
        && existing["scope"] == new["scope"]
        && existing["metadata"]["ownerReferences"] == new["metadata"]["ownerReferences"]
}

/// Gives the results of `new` that `existing` already had (same policy,
/// rule, outcome and message) their old timestamps.
pub fn keep_timestamps(existing: &Value, new: &mut Value) {
    let old: Vec<(Value, Value)> = existing["results"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    let mut k = r.clone();
                    if let Some(o) = k.as_object_mut() {
                        o.remove("timestamp");
                    }
                    (k, r["timestamp"].clone())
                })
                .collect()
        })
        .unwrap_or_default();
    if let Some(rs) = new["results"].as_array_mut() {
        for r in rs {
            let mut k = r.clone();
            if let Some(o) = k.as_object_mut() {
                o.remove("timestamp");
            }
            if let Some((_, t)) = old.iter().find(|(ok, _)| *ok == k) {
                r["timestamp"] = t.clone();
            }
        }
    }
}

/// The results of a report with `policy`'s removed; `None` when nothing
/// changed.
pub fn without_policy(report: &Value, policy: &str) -> Option<Vec<Value>> {
    let rs = report["results"].as_array()?;
    let kept: Vec<Value> = rs
        .iter()
        .filter(|r| r["policy"].as_str() != Some(policy))
        .cloned()
        .collect();
    (kept.len() != rs.len()).then_some(kept)
}

/// The summary of a list of results.
pub fn summary(results: &[Value]) -> Value {
    let mut summary: BTreeMap<&str, u64> = ["pass", "fail", "warn", "error", "skip"]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
    for r in results {
        if let Some(n) = r["result"].as_str().and_then(|s| summary.get_mut(s)) {
            *n += 1;
        }
    }
    json!(summary)
}

fn result_schema() -> Value {
    let object_reference = json!({
        "type": "object",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "apiVersion": {"type": "string"},
            "fieldPath": {"type": "string"},
            "kind": {"type": "string"},
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "resourceVersion": {"type": "string"},
            "uid": {"type": "string"},
        },
    });
    json!({
        "type": "object",
        "required": ["policy"],
        "properties": {
            "source": {"type": "string", "description": "The policy engine that produced the result."},
            "policy": {"type": "string", "description": "The name of the policy."},
            "rule": {"type": "string", "description": "The rule within the policy."},
            "category": {"type": "string"},
            "severity": {"type": "string", "enum": ["critical", "high", "low", "medium", "info"]},
            "timestamp": {
                "type": "object",
                "required": ["nanos", "seconds"],
                "properties": {
                    "nanos": {"type": "integer", "format": "int32"},
                    "seconds": {"type": "integer", "format": "int64"},
                },
            },
            "result": {"type": "string", "enum": ["pass", "fail", "warn", "error", "skip"]},
            "scored": {"type": "boolean"},
            "resources": {"type": "array", "items": object_reference},
            "resourceSelector": {
                "type": "object",
                "x-kubernetes-map-type": "atomic",
                "x-kubernetes-preserve-unknown-fields": true,
            },
            "message": {"type": "string"},
            "properties": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    })
}

/// The `CustomResourceDefinition`s of a format's two report resources.
pub fn crds(format: Format) -> Vec<Value> {
    let count =
        |name: &str| json!({"type": "integer", "description": format!("Results that are {name}.")});
    format
        .kinds()
        .iter()
        .map(|k| {
            let mut properties = json!({
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "scope": {
                    "type": "object",
                    "x-kubernetes-map-type": "atomic",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "fieldPath": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "namespace": {"type": "string"},
                        "resourceVersion": {"type": "string"},
                        "uid": {"type": "string"},
                    },
                },
                "scopeSelector": {
                    "type": "object",
                    "x-kubernetes-map-type": "atomic",
                    "x-kubernetes-preserve-unknown-fields": true,
                },
                "summary": {
                    "type": "object",
                    "properties": {
                        "pass": count("pass"),
                        "fail": count("fail"),
                        "warn": count("warn"),
                        "error": count("error"),
                        "skip": count("skip"),
                    },
                },
                "results": {"type": "array", "items": result_schema()},
            });
            if format == Format::OpenReports {
                properties["source"] = json!({"type": "string"});
                properties["configuration"] = json!({
                    "type": "object",
                    "properties": {"limits": {
                        "type": "object",
                        "properties": {
                            "maxResults": {"type": "integer"},
                            "statusFilter": {"type": "array", "items": {
                                "type": "string",
                                "enum": ["pass", "fail", "warn", "error", "skip"],
                            }},
                        },
                    }},
                });
            }
            let column = |name: &str, ty: &str, path: &str, priority: i64| {
                json!({"name": name, "type": ty, "jsonPath": path, "priority": priority})
            };
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {
                    "name": format!("{}.{}", k.plural, k.group),
                    "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
                },
                "spec": {
                    "group": k.group,
                    "names": {
                        "kind": k.kind,
                        "listKind": format!("{}List", k.kind),
                        "plural": k.plural,
                        "singular": k.kind.to_ascii_lowercase(),
                        "shortNames": [k.short_name],
                    },
                    "scope": if k.namespaced { "Namespaced" } else { "Cluster" },
                    "versions": [{
                        "name": k.version,
                        "served": true,
                        "storage": true,
                        "additionalPrinterColumns": [
                            column("Kind", "string", ".scope.kind", 1),
                            column("Name", "string", ".scope.name", 1),
                            column("Pass", "integer", ".summary.pass", 0),
                            column("Fail", "integer", ".summary.fail", 0),
                            column("Warn", "integer", ".summary.warn", 0),
                            column("Error", "integer", ".summary.error", 0),
                            column("Skip", "integer", ".summary.skip", 0),
                            column("Age", "date", ".metadata.creationTimestamp", 0),
                        ],
                        "schema": {"openAPIV3Schema": {
                            "type": "object",
                            "properties": properties,
                        }},
                    }],
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "web", "namespace": "a", "uid": "u-1", "resourceVersion": "7"}})
    }

    fn finding(policy: &str, outcome: Outcome, message: &str) -> Finding {
        Finding {
            policy: policy.into(),
            rule: None,
            outcome,
            message: message.into(),
            severity: severity("HIGH"),
            category: None,
            properties: BTreeMap::new(),
        }
    }

    #[test]
    fn a_report_names_owns_and_summarises_its_resource() {
        let r = report(
            Format::OpenReports,
            &pod(),
            true,
            &[
                finding("b", Outcome::Fail, "no team"),
                finding("a", Outcome::Pass, ""),
            ],
            &timestamp(1_500_000_000_000_000_001),
        );
        assert_eq!(r["kind"], "Report");
        assert_eq!(r["metadata"]["name"], "u-1");
        assert_eq!(r["metadata"]["namespace"], "a");
        assert_eq!(r["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(r["scope"]["namespace"], "a");
        assert_eq!(r["summary"]["fail"], 1);
        assert_eq!(r["summary"]["pass"], 1);
        assert_eq!(r["results"][0]["policy"], "a");
        assert_eq!(r["results"][1]["severity"], "high");
        assert_eq!(r["results"][1]["timestamp"]["nanos"], 1);
        let c = report(Format::PolicyReport, &pod(), false, &[], &timestamp(0));
        assert_eq!(c["kind"], "ClusterPolicyReport");
        assert!(c["metadata"].get("namespace").is_none());
        assert!(c.get("source").is_none());
    }

    #[test]
    fn only_changed_results_count_as_a_change() {
        let a = report(
            Format::OpenReports,
            &pod(),
            true,
            &[finding("p", Outcome::Pass, "")],
            &timestamp(1),
        );
        let b = report(
            Format::OpenReports,
            &pod(),
            true,
            &[finding("p", Outcome::Pass, "")],
            &timestamp(2),
        );
        assert!(same_results(&a, &b));
        let mut c = report(
            Format::OpenReports,
            &pod(),
            true,
            &[
                finding("p", Outcome::Pass, ""),
                finding("q", Outcome::Fail, "x"),
            ],
            &timestamp(3),
        );
        assert!(!same_results(&a, &c));
        keep_timestamps(&a, &mut c);
        assert_eq!(c["results"][0]["timestamp"], timestamp(1));
        assert_eq!(c["results"][1]["timestamp"], timestamp(3));
        let kept = without_policy(&c, "q").unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(summary(&kept)["pass"], 1);
        assert!(without_policy(&c, "zzz").is_none());
    }

    #[test]
    fn reports_are_bounded() {
        let many: Vec<Finding> = (0..MAX_RESULTS + 5)
            .map(|i| finding(&format!("p{i:04}"), Outcome::Fail, &"x".repeat(5000)))
            .collect();
        let r = report(Format::OpenReports, &pod(), true, &many, &timestamp(0));
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), MAX_RESULTS);
        assert!(results[0]["message"].as_str().unwrap().len() <= MAX_MESSAGE);
        assert!(
            results[MAX_RESULTS - 1]["message"]
                .as_str()
                .unwrap()
                .contains("5 more results dropped")
        );
    }

    #[test]
    fn crds_follow_the_published_names() {
        let c = crds(Format::OpenReports);
        assert_eq!(c[0]["metadata"]["name"], "reports.openreports.io");
        assert_eq!(c[1]["spec"]["scope"], "Cluster");
        assert_eq!(c[0]["spec"]["names"]["shortNames"][0], "reps");
        let w = crds(Format::PolicyReport);
        assert_eq!(
            w[1]["metadata"]["name"],
            "clusterpolicyreports.wgpolicyk8s.io"
        );
        assert!(Format::parse("nope").is_err());
    }
}
