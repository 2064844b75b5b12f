//! `Table` rendering (`meta.k8s.io/v1`), which `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Columns follow
//! upstream's printers for the built-in kinds.

use crate::resource::{Printer, ResourceInfo};
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

fn column(name: &str, ty: &str, format: &str, description: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": 0})
}

fn columns(info: &ResourceInfo) -> Vec<Value> {
    let name = column(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace.",
    );
    let age = column(
        "Age",
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );
    match info.printer {
        Printer::Default => vec![name, age],
        Printer::Namespace => vec![
            name,
            column("Status", "string", "", "The status of the namespace"),
            age,
        ],
        Printer::ConfigMap => vec![
            name,
            column("Data", "string", "", "Number of keys in the config map"),
            age,
        ],
        Printer::Secret => vec![
            name,
            column("Type", "string", "", "The type of the secret"),
            column("Data", "string", "", "The number of entries in the secret"),
            age,
        ],
        Printer::ServiceAccount => vec![
            name,
            column("Secrets", "string", "", "Number of secrets"),
            age,
        ],
        Printer::Event => vec![
            column("Last Seen", "string", "", "Time when last event occurred"),
            column("Type", "string", "", "Type of this event (Normal, Warning)"),
            column(
                "Reason",
                "string",
                "",
                "Short, machine understandable string",
            ),
            column(
                "Object",
                "string",
                "",
                "The object that this event is about",
            ),
            column(
                "Message",
                "string",
                "",
                "A human-readable description of the status",
            ),
        ],
        Printer::Lease => vec![
            name,
            column("Holder", "string", "", "The holder of the lease"),
            age,
        ],
        Printer::AdmissionPlugin => vec![
            name,
            column(
                "Phases",
                "string",
                "",
                "Admission phases the plugin runs in",
            ),
            column(
                "Mode",
                "string",
                "",
                "What a denial does: Deny, Warn or Audit",
            ),
            column("Status", "string", "", "Whether the plugin is loaded"),
            age,
        ],
    }
}

/// Upstream's `HumanDuration`-style age: `45s`, `5m10s`, `3h`, `2d`, `3y`.
pub fn human_age(since: &str, now: DateTime<Utc>) -> String {
    let Ok(t) = DateTime::parse_from_rfc3339(since) else {
        return "<unknown>".into();
    };
    let secs = (now - t.with_timezone(&Utc)).num_seconds();
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

fn count(v: Option<&Value>) -> usize {
    v.and_then(Value::as_object).map_or(0, |m| m.len())
}

fn cells(info: &ResourceInfo, obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let name = json!(crate::meta::name(obj).unwrap_or_default());
    let created = crate::meta::str_field(obj, "creationTimestamp").unwrap_or_default();
    let age = json!(human_age(created, now));
    let s = |path: &[&str]| -> String {
        path.iter()
            .try_fold(obj, |v, k| v.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match info.printer {
        Printer::Default => vec![name, age],
        Printer::Namespace => vec![name, json!(s(&["status", "phase"])), age],
        Printer::ConfigMap => vec![
            name,
            json!(count(obj.get("data")) + count(obj.get("binaryData"))),
            age,
        ],
        Printer::Secret => vec![
            name,
            json!(s(&["type"])),
            json!(count(obj.get("data"))),
            age,
        ],
        Printer::ServiceAccount => {
            vec![
                name,
                json!(
                    obj.get("secrets")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len)
                ),
                age,
            ]
        }
        Printer::Event => {
            let last = [
                &["lastTimestamp"][..],
                &["eventTime"],
                &["metadata", "creationTimestamp"],
            ]
            .iter()
            .map(|p| s(p))
            .find(|t| !t.is_empty())
            .unwrap_or_default();
            let object = format!(
                "{}/{}",
                s(&["involvedObject", "kind"]).to_ascii_lowercase(),
                s(&["involvedObject", "name"])
            );
            vec![
                json!(human_age(&last, now)),
                json!(s(&["type"])),
                json!(s(&["reason"])),
                json!(object),
                json!(s(&["message"])),
            ]
        }
        Printer::Lease => vec![name, json!(s(&["spec", "holderIdentity"])), age],
        Printer::AdmissionPlugin => {
            let phases: Vec<&str> = obj["spec"]["phases"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mode = obj["spec"]["mode"].as_str().unwrap_or("Deny");
            vec![
                name,
                json!(phases.join(",")),
                json!(mode),
                json!(s(&["status", "phase"])),
                age,
            ]
        }
    }
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
        "columnDefinitions": columns(info),
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
    fn ages() {
        let now = Utc::now();
        let ago = |s: i64| crate::meta::timestamp(now - chrono::Duration::seconds(s));
        assert_eq!(human_age(&ago(5), now), "5s");
        assert_eq!(human_age(&ago(310), now), "5m10s");
        assert_eq!(human_age(&ago(3600), now), "60m");
        assert_eq!(human_age(&ago(3 * 86400), now), "3d0h");
        assert_eq!(human_age("garbage", now), "<unknown>");
    }
}
