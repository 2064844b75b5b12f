//! Label and field selectors, with upstream's string syntax.
//!
//! Label selectors: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`,
//! `a` (exists) and `!a` (does not exist), joined by commas.
//! Field selectors: `path=value`, `path==value`, `path!=value` over a small set
//! of supported fields per resource; plugins' cluster reads may name any
//! field path ([`FieldSelector::parse_any`]), a list in the path matching
//! when any of its items does (`spec.rules.host=a.example.com`).

use serde_json::Value;
use std::collections::BTreeMap;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn check_key(key: &str) -> Result<String, String> {
    let key = key.trim();
    if key.is_empty() {
        return Err("found '', expected: identifier".into());
    }
    if let Some(err) = crate::validation::label_key_error(key) {
        return Err(format!("invalid label key {key:?}: {err}"));
    }
    Ok(key.to_string())
}

fn check_value(v: &str) -> Result<String, String> {
    let v = v.trim();
    if let Some(err) = crate::validation::label_value_error(v) {
        return Err(format!("invalid label value: {v:?}: {err}"));
    }
    Ok(v.to_string())
}

fn parse_set(s: &str) -> Result<Vec<String>, String> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found {s:?}, expected: '(' value list ')'"))?;
    inner.split(',').map(check_value).collect()
}

impl LabelSelector {
    /// Parses upstream syntax; an empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top_level(s) {
            let part = part.trim();
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(check_key(k)?, check_value(v)?)
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(check_key(k)?, check_value(v)?)
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(check_key(k)?, check_value(v)?)
            } else if let Some(idx) = part.find(" notin ").or_else(|| part.find(" notin(")) {
                Requirement::NotIn(check_key(&part[..idx])?, parse_set(&part[idx + 6..])?)
            } else if let Some(idx) = part.find(" in ").or_else(|| part.find(" in(")) {
                Requirement::In(check_key(&part[..idx])?, parse_set(&part[idx + 3..])?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::DoesNotExist(check_key(k)?)
            } else if part.contains(['(', ')', ' ', '<', '>']) {
                return Err(format!("unable to parse requirement: {part:?}"));
            } else {
                Requirement::Exists(check_key(part)?)
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// True when the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// Matches the `metadata.labels` of a JSON object.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.0.is_empty() || self.matches(&crate::meta::labels(obj))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One field requirement: `path` equals (or not) `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub path: String,
    pub value: String,
    pub negate: bool,
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<FieldRequirement>);

/// Fields every resource can be selected by.
const COMMON_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// Extra selectable fields of some built-in kinds, as upstream.
fn kind_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Secret" => &["type"],
        "Namespace" => &["status.phase"],
        // `kubectl drain` and schedulers select a node's pods.
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Node" => &["spec.unschedulable"],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `a=b,c!=d` and checks that each field is selectable for `kind`.
    pub fn parse(s: &str, kind: &str) -> Result<Self, String> {
        let sel = Self::parse_any(s)?;
        for r in &sel.0 {
            let path = r.path.as_str();
            if !COMMON_FIELDS.contains(&path) && !kind_fields(kind).contains(&path) {
                return Err(format!("field label not supported: {path}"));
            }
        }
        Ok(sel)
    }

    /// Parses `a=b,c!=d` over any field path: how plugins' cluster reads
    /// select (a path of dot-separated JSON object keys of letters, digits,
    /// `-` and `_`).
    pub fn parse_any(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, value, negate) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, true)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, v, false)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let path = path.trim();
            // Segments of letters, digits, `-` and `_`: a `!` or `=` at the
            // end of one would read back as part of the operator.
            let segment = |seg: &str| {
                !seg.is_empty()
                    && seg
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            };
            if !path.split('.').all(segment) {
                return Err(format!(
                    "invalid selector: '{s}'; '{part}' names no field path"
                ));
            }
            reqs.push(FieldRequirement {
                path: path.into(),
                value: value.trim().into(),
                negate,
            });
        }
        Ok(FieldSelector(reqs))
    }

    /// True when every requirement holds for the object: `path=value` when
    /// some value at the path is `value` (a missing field reads as ""),
    /// `path!=value` when none is.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let mut found = false;
            let mut any = false;
            field_values(obj, &r.path, &mut |v| {
                any = true;
                found |= v == r.value;
            });
            if !any {
                found = r.value.is_empty();
            }
            found != r.negate
        })
    }

    /// The first `path=value` requirement on a field other than the name
    /// and namespace (which storage keys answer): what a field index can
    /// answer.
    pub fn indexable(&self) -> Option<&FieldRequirement> {
        self.0
            .iter()
            .find(|r| !r.negate && !r.value.is_empty() && !COMMON_FIELDS.contains(&r.path.as_str()))
    }

    /// The name this selector pins with `metadata.name=`, if any.
    pub fn exact_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.path == "metadata.name" && !r.negate)
            .map(|r| r.value.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Calls `f` with each scalar at the dot-separated `path` of `obj`, a list
/// on the way fanning out to its items (`spec.rules.host` of every rule):
/// strings as they are, numbers and booleans as their JSON text.
pub fn field_values(obj: &Value, path: &str, f: &mut impl FnMut(&str)) {
    fn walk(v: &Value, rest: &[&str], f: &mut impl FnMut(&str)) {
        match (v, rest.split_first()) {
            (Value::Array(items), _) => items.iter().for_each(|i| walk(i, rest, f)),
            (Value::Object(map), Some((seg, rest))) => {
                if let Some(next) = map.get(*seg) {
                    walk(next, rest, f);
                }
            }
            (Value::String(s), None) => f(s),
            (Value::Number(n), None) => f(&n.to_string()),
            (Value::Bool(b), None) => f(if *b { "true" } else { "false" }),
            _ => {}
        }
    }
    let segments: Vec<&str> = path.split('.').collect();
    walk(obj, &segments, f);
}

/// A `LabelSelector` (`matchLabels`, `matchExpressions`) or a plain label
/// map as selector text, as kubectl prints it and a `Scale`'s
/// `status.selector` carries it: `app=web,tier in (a,b),!legacy`; empty
/// when it selects everything.
pub fn selector_text(sel: &serde_json::Value) -> String {
    use serde_json::Value;
    let is_selector = sel.get("matchLabels").is_some() || sel.get("matchExpressions").is_some();
    let labels = if is_selector {
        &sel["matchLabels"]
    } else {
        sel
    };
    let mut parts: Vec<String> = labels
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
        .collect();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            _ => format!("!{key}"),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_operators() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db, cache)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web,tier in (front,back),!debug", true),
            ("app=web,tier=back", false),
            ("example.com/role=x", false),
        ];
        for (sel, want) in cases {
            let parsed = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(parsed.matches(&l), want, "selector {sel:?}");
        }
    }

    #[test]
    fn label_syntax_errors() {
        for bad in ["app in web", "=x", "a b", "app=not valid!"] {
            assert!(
                LabelSelector::parse(bad).is_err(),
                "{bad:?} should not parse"
            );
        }
    }

    #[test]
    fn field_selectors() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns1"}, "type": "Opaque"});
        let s =
            FieldSelector::parse("metadata.name=a,metadata.namespace!=ns2", "ConfigMap").unwrap();
        assert!(s.matches(&obj));
        assert_eq!(s.exact_name(), Some("a"));
        assert!(
            !FieldSelector::parse("metadata.name==b", "ConfigMap")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("type=Opaque", "Secret")
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=x", "ConfigMap").unwrap_err(),
            "field label not supported: spec.foo"
        );
    }

    #[test]
    fn field_selectors_on_any_path_fan_out_through_lists() {
        let ing = json!({"metadata": {"name": "web", "namespace": "a"},
            "spec": {"rules": [{"host": "a.example.com"}, {"host": "b.example.com"}, {}],
                     "replicas": 3, "paused": false}});
        let sel = |s: &str| FieldSelector::parse_any(s).unwrap();
        assert!(sel("spec.rules.host=b.example.com").matches(&ing));
        assert!(!sel("spec.rules.host=c.example.com").matches(&ing));
        assert!(sel("spec.rules.host!=c.example.com").matches(&ing));
        assert!(!sel("spec.rules.host!=a.example.com").matches(&ing));
        assert!(sel("spec.replicas=3,spec.paused=false").matches(&ing));
        // A missing field reads as "", as upstream's.
        assert!(sel("spec.missing=").matches(&ing));
        assert!(!sel("spec.missing=x").matches(&ing));
        // What an index answers: the first positive requirement that is
        // not the name or namespace.
        let s = sel("metadata.name=web,spec.rules.host!=x,spec.rules.host=a.example.com");
        assert_eq!(
            s.indexable().map(|r| r.path.as_str()),
            Some("spec.rules.host")
        );
        assert!(sel("metadata.namespace=a,spec.x!=y").indexable().is_none());
        for bad in ["spec..host=a", "=a", ".a=b", "nothing", "a!\r=b", "a b=c"] {
            assert!(FieldSelector::parse_any(bad).is_err(), "{bad}");
        }
        let mut seen = Vec::new();
        field_values(&ing, "spec.rules.host", &mut |v| seen.push(v.to_string()));
        assert_eq!(seen, ["a.example.com", "b.example.com"]);
    }
}
