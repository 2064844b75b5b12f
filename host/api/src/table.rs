//! `Table` rendering (`meta.k8s.io/v1`), which `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Each resource
//! describes its columns as data ([`Column`]: a CRD printer column's
//! fields, JSONPaths evaluated by one implementation); the built-in kinds'
//! columns follow upstream's printers.

use crate::resource::{Column, Render, ResourceInfo};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// What each row carries besides its cells (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(format!("includeObject: unsupported value {other:?}")),
        }
    }
}

fn column_definition(c: &Column) -> Value {
    json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
}

/// Upstream's `HumanDuration`-style age: `45s`, `5m10s`, `3h`, `2d`, `3y`.
pub fn human_age(since: &str, now: DateTime<Utc>) -> String {
    let Ok(t) = DateTime::parse_from_rfc3339(since) else {
        return "<unknown>".into();
    };
    human_duration((now - t.with_timezone(&Utc)).num_seconds())
}

/// A duration in seconds as upstream's `duration.HumanDuration` prints it.
pub fn human_duration(secs: i64) -> String {
    match secs {
        s if s < 0 => "0s".into(),
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 8 * 86400 => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
        s if s < 2 * 365 * 86400 => format!("{}d", s / 86400),
        s => format!("{}y", s / (365 * 86400)),
    }
}

/// A CertificateSigningRequest's state as kubectl prints it:
/// `Pending`, `Approved` or `Denied`, then `,Failed` and `,Issued`.
fn csr_condition(obj: &Value) -> String {
    let has = |t: &str| {
        obj["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t))
    };
    let mut out = if has("Denied") {
        "Denied".to_string()
    } else if has("Approved") {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if has("Failed") {
        out.push_str(",Failed");
    }
    if obj["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
    {
        out.push_str(",Issued");
    }
    out
}

/// Whether a JSONPath result counts as a value (not null, not "").
fn present(v: &&Value) -> bool {
    !v.is_null() && v.as_str() != Some("")
}

/// The first present result of the column's paths, tried in order.
fn first<'a>(c: &Column, obj: &'a Value) -> Option<&'a Value> {
    c.json_paths
        .iter()
        .find_map(|p| p.query(obj).into_iter().find(present))
}

fn size(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    }
}

/// One cell: the column's JSONPath results, rendered as the column says.
fn cell(c: &Column, obj: &Value, now: DateTime<Utc>) -> Value {
    let fallback = || c.default.clone().unwrap_or(Value::Null);
    match c.render {
        Render::Value => first(c, obj).cloned().unwrap_or_else(fallback),
        Render::Age => json!(human_age(
            first(c, obj).and_then(Value::as_str).unwrap_or_default(),
            now
        )),
        Render::Count => json!(
            c.json_paths
                .iter()
                .flat_map(|p| p.query(obj))
                .map(size)
                .sum::<usize>()
        ),
        Render::Join => {
            // The first path with results (alternatives, as for values).
            let items: Vec<&str> = c
                .json_paths
                .iter()
                .map(|p| p.query(obj))
                .find(|found| found.iter().any(|v| v.is_string()))
                .unwrap_or_default()
                .into_iter()
                .filter_map(Value::as_str)
                .collect();
            match (&c.default, items.is_empty()) {
                (Some(d), true) => d.clone(),
                _ => json!(items.join(",")),
            }
        }
        Render::ServiceRef => match first(c, obj) {
            Some(r) => json!(format!(
                "{}/{}",
                r["namespace"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default()
            )),
            None => json!("Local"),
        },
        Render::Condition => match first(c, obj) {
            Some(cond) => {
                let status = cond["status"].as_str().unwrap_or("Unknown");
                match cond["reason"].as_str().filter(|_| status != "True") {
                    Some(reason) => json!(format!("{status} ({reason})")),
                    None => json!(status),
                }
            }
            None => c.default.clone().unwrap_or(Value::Null),
        },
        Render::ObjectRef => {
            let r = first(c, obj).unwrap_or(&Value::Null);
            json!(format!(
                "{}/{}",
                r["kind"].as_str().unwrap_or_default().to_ascii_lowercase(),
                r["name"].as_str().unwrap_or_default()
            ))
        }
        Render::Param => json!(match first(c, obj) {
            None => "<unset>".to_string(),
            Some(p) if p.get("kind").is_some() => format!(
                "{}/{}",
                p["apiVersion"].as_str().unwrap_or_default(),
                p["kind"].as_str().unwrap_or_default()
            ),
            Some(p) => match (p["name"].as_str(), p["namespace"].as_str()) {
                (Some(name), Some(ns)) if !ns.is_empty() => format!("{ns}/{name}"),
                (Some(name), _) => format!("*/{name}"),
                (None, ns) => format!(
                    "{}/{}",
                    ns.filter(|n| !n.is_empty()).unwrap_or("*"),
                    crate::selector::selector_text(&p["selector"])
                ),
            },
        }),
        Render::Ratio => {
            let n = |i: usize| {
                c.json_paths
                    .get(i)
                    .and_then(|p| p.query(obj).into_iter().find_map(Value::as_i64))
                    .unwrap_or(0)
            };
            json!(format!("{}/{}", n(0), n(1)))
        }
        Render::Sum => json!(
            all(c, 0, obj)
                .into_iter()
                .filter_map(Value::as_i64)
                .sum::<i64>()
        ),
        Render::Selector => match first(c, obj).map(crate::selector::selector_text) {
            Some(text) if !text.is_empty() => json!(text),
            _ => c.default.clone().unwrap_or(json!("<none>")),
        },
        Render::PodReady => {
            let statuses = all(c, 0, obj);
            let ready = statuses
                .first()
                .and_then(|s| s.as_array())
                .map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            let total = all(c, 1, obj)
                .first()
                .and_then(|s| s.as_array())
                .map_or(0, Vec::len);
            json!(format!("{ready}/{total}"))
        }
        Render::PodStatus => json!(pod_status(obj)),
        Render::Seconds => match first(c, obj).and_then(Value::as_i64) {
            Some(s) => json!(human_duration(s)),
            None => json!("<none>"),
        },
        Render::CsrCondition => json!(csr_condition(obj)),
        Render::ServicePorts => {
            let ports: Vec<String> = first(c, obj)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| {
                    let protocol = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                        None => format!("{}/{protocol}", p["port"]),
                    }
                })
                .collect();
            json!(if ports.is_empty() {
                "<none>".to_string()
            } else {
                ports.join(",")
            })
        }
        Render::ComponentHealth => json!(match first(c, obj).map(|c| &c["status"]) {
            Some(s) if s == "True" => "Healthy",
            Some(_) => "Unhealthy",
            None => "Unknown",
        }),
        Render::NodeReady => {
            // Upstream's printNode: `Unknown` only without a condition.
            let ready = match first(c, obj).map(|c| &c["status"]) {
                Some(s) if s == "True" => "Ready",
                Some(_) => "NotReady",
                None => "Unknown",
            };
            json!(if obj["spec"]["unschedulable"] == true {
                format!("{ready},SchedulingDisabled")
            } else {
                ready.to_string()
            })
        }
        Render::JobStatus => {
            let conditions = first(c, obj).and_then(Value::as_array);
            let holds = |ty: &str| {
                conditions
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == ty && c["status"] == "True"))
            };
            json!(if holds("Complete") {
                "Complete"
            } else if holds("Failed") {
                "Failed"
            } else if holds("Suspended") {
                "Suspended"
            } else {
                "Running"
            })
        }
        Render::IngressPorts => json!(if first(c, obj).is_some_and(|t| size(t) > 0) {
            "80, 443"
        } else {
            "80"
        }),
    }
}

/// Every result of the column's `i`-th path.
fn all<'a>(c: &Column, i: usize, obj: &'a Value) -> Vec<&'a Value> {
    c.json_paths
        .get(i)
        .map(|p| p.query(obj))
        .unwrap_or_default()
}

/// The `STATUS` column of `kubectl get pods` (upstream's `printPod`, in short).
fn pod_status(pod: &Value) -> String {
    let status = &pod["status"];
    let mut reason = status["reason"]
        .as_str()
        .or(status["phase"].as_str())
        .unwrap_or("Pending")
        .to_string();
    for cs in status["containerStatuses"].as_array().into_iter().flatten() {
        let state = &cs["state"];
        if let Some(r) = state["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        } else if let Some(r) = state["terminated"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        } else if state["terminated"].is_object() {
            reason = match state["terminated"]["signal"].as_i64().filter(|s| *s != 0) {
                Some(sig) => format!("Signal:{sig}"),
                None => format!("ExitCode:{}", state["terminated"]["exitCode"]),
            };
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    reason
}

fn cells(info: &ResourceInfo, obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    info.columns.iter().map(|c| cell(c, obj, now)).collect()
}

fn row(info: &ResourceInfo, obj: &Value, include: IncludeObject, now: DateTime<Utc>) -> Value {
    let object = match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => obj.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    };
    json!({"cells": cells(info, obj, now), "object": object})
}

/// Renders objects as a `Table`; `list_meta` becomes the table's metadata
/// (resourceVersion, continue).
pub fn to_table(
    info: &ResourceInfo,
    objects: &[Value],
    list_meta: Value,
    include: IncludeObject,
) -> Value {
    let now = Utc::now();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": info.columns.iter().map(column_definition).collect::<Vec<_>>(),
        "rows": objects.iter().map(|o| row(info, o, include, now)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Registry;

    #[test]
    fn configmap_table() {
        let r = Registry::builtin();
        let cm = r.get("", "v1", "configmaps").unwrap();
        let obj = json!({"metadata": {"name": "a", "creationTimestamp": crate::meta::timestamp(Utc::now())}, "data": {"x": "1", "y": "2"}});
        let t = to_table(
            cm,
            &[obj],
            json!({"resourceVersion": "5"}),
            IncludeObject::Metadata,
        );
        let names: Vec<_> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].clone())
            .collect();
        assert_eq!(names, vec!["Name", "Data", "Age"]);
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert_eq!(t["rows"][0]["cells"][1], 2);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn csr_conditions_as_kubectl_prints_them() {
        let csr = |conds: Value, cert: Option<&str>| json!({"status": {"conditions": conds, "certificate": cert}});
        assert_eq!(csr_condition(&csr(json!([]), None)), "Pending");
        assert_eq!(
            csr_condition(&csr(json!([{"type": "Approved"}]), Some("Y2VydA=="))),
            "Approved,Issued"
        );
        assert_eq!(
            csr_condition(&csr(
                json!([{"type": "Approved"}, {"type": "Failed"}]),
                None
            )),
            "Approved,Failed"
        );
        assert_eq!(
            csr_condition(&csr(json!([{"type": "Denied"}]), None)),
            "Denied"
        );
        assert_eq!(human_duration(3600), "60m");
    }

    #[test]
    fn ages() {
        let now = Utc::now();
        let ago = |s: i64| crate::meta::timestamp(now - chrono::Duration::seconds(s));
        assert_eq!(human_age(&ago(5), now), "5s");
        assert_eq!(human_age(&ago(310), now), "5m10s");
        assert_eq!(human_age(&ago(3600), now), "60m");
        assert_eq!(human_age(&ago(3 * 86400), now), "3d0h");
        assert_eq!(human_age("garbage", now), "<unknown>");
    }

    fn cells_of(plural: &str, group: &str, obj: Value) -> Vec<Value> {
        let r = Registry::builtin();
        let info = r
            .all()
            .find(|i| i.plural == plural && i.group == group)
            .unwrap();
        let t = to_table(info, &[obj], json!({}), IncludeObject::None);
        t["rows"][0]["cells"].as_array().unwrap().clone()
    }

    #[test]
    fn builtin_columns_render_as_upstream_printers() {
        let now = crate::meta::timestamp(Utc::now() - chrono::Duration::seconds(30));
        let ev = cells_of(
            "events",
            "",
            json!({"metadata": {"name": "e", "creationTimestamp": now}, "lastTimestamp": null,
                   "type": "Warning", "reason": "Boom", "message": "m",
                   "involvedObject": {"kind": "Pod", "name": "web"}}),
        );
        // The age is rendered from the clock now: a slow run may see 31s.
        assert!(matches!(ev[0].as_str(), Some("30s" | "31s")), "{ev:?}");
        assert_eq!(
            ev[1..],
            [
                json!("Warning"),
                json!("Boom"),
                json!("pod/web"),
                json!("m")
            ]
        );
        let ap = cells_of(
            "admissionplugins",
            crate::admission::GROUP,
            json!({"metadata": {"name": "p"}, "spec": {"phases": ["Mutating", "Validating"]}}),
        );
        assert_eq!(
            ap[1..4],
            [json!("Mutating,Validating"), json!("Deny"), json!("")]
        );
        assert_eq!(ap[4], json!(null));
        assert_eq!(ap[5], "<unknown>");
        let secret = cells_of(
            "secrets",
            "",
            json!({"metadata": {"name": "s"}, "data": {"a": "", "b": ""}}),
        );
        assert_eq!(secret[1..3], [json!(""), json!(2)]);
        let cm = cells_of(
            "configmaps",
            "",
            json!({"metadata": {"name": "c"}, "data": {"a": ""}, "binaryData": {"b": ""}}),
        );
        assert_eq!(cm[1], 2);
    }

    #[test]
    fn custom_columns_use_upstream_jsonpath() {
        let mut info =
            crate::resource::ResourceInfo::new("example.com", "v1", "widgets", "Widget", true);
        info.columns = vec![
            Column::name(),
            Column::with_path(
                "Ready",
                "string",
                "",
                crate::resource::ColumnPath::parse(
                    r#".status.conditions[?(@.type=="Ready")].status"#,
                )
                .unwrap(),
            ),
            Column::with_path(
                "Replicas",
                "integer",
                "",
                crate::resource::ColumnPath::parse("{.spec.replicas}").unwrap(),
            ),
        ];
        let obj = json!({"metadata": {"name": "w"}, "spec": {"replicas": 3},
            "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        let t = to_table(
            &info,
            &[obj, json!({"metadata": {"name": "x"}})],
            json!({}),
            IncludeObject::None,
        );
        assert_eq!(t["rows"][0]["cells"], json!(["w", "True", 3]));
        assert_eq!(t["rows"][1]["cells"], json!(["x", null, null]));
        assert_eq!(t["columnDefinitions"][2]["type"], "integer");
        assert!(crate::resource::ColumnPath::parse(".status[?(").is_err());
    }
}
