//! Sets of field paths, and their `FieldsV1` form.
//!
//! A path walks an object: `f:<name>` a field or map key, `k:<json>` the
//! item of an associative list with those key values, `v:<json>` the item
//! of a set list, `i:<n>` an item by index. A set is a tree of path
//! elements; a node is a *member* when its path itself is in the set (a
//! leaf field, a list item, an atomic value). In `FieldsV1` a member with
//! children carries a `"."` entry, as upstream writes it.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Element {
    Field(String),
    /// An associative list item, by its key values (canonical JSON object).
    Key(String),
    /// A set item, by its value (canonical JSON).
    Value(String),
    Index(usize),
}

impl Element {
    /// `k:` of an item's key fields.
    pub fn key(keys: &Map<String, Value>) -> Element {
        Element::Key(Value::Object(keys.clone()).to_string())
    }

    fn encode(&self) -> String {
        match self {
            Element::Field(f) => format!("f:{f}"),
            Element::Key(k) => format!("k:{k}"),
            Element::Value(v) => format!("v:{v}"),
            Element::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Option<Element> {
        let (kind, rest) = s.split_once(':')?;
        Some(match kind {
            "f" => Element::Field(rest.to_string()),
            // Re-serialized so that equal keys compare equal.
            "k" => Element::Key(serde_json::from_str::<Value>(rest).ok()?.to_string()),
            "v" => Element::Value(serde_json::from_str::<Value>(rest).ok()?.to_string()),
            "i" => Element::Index(rest.parse().ok()?),
            _ => return None,
        })
    }

    /// As kubectl shows a path: `.spec.containers[name="web"].image`.
    fn display(&self) -> String {
        match self {
            Element::Field(f) => format!(".{f}"),
            Element::Key(k) => {
                let keys: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("[{}]", parts.join(","))
            }
            Element::Value(v) => format!("[={v}]"),
            Element::Index(i) => format!("[{i}]"),
        }
    }
}

/// A set of paths (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub member: bool,
    pub children: BTreeMap<Element, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    /// The node at `e`, created if missing.
    pub fn child(&mut self, e: Element) -> &mut FieldSet {
        self.children.entry(e).or_default()
    }

    /// Adds `path`.
    pub fn insert(&mut self, path: &[Element]) {
        match path.split_first() {
            None => self.member = true,
            Some((e, rest)) => self.child(e.clone()).insert(rest),
        }
    }

    pub fn contains(&self, path: &[Element]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((e, rest)) => self.children.get(e).is_some_and(|c| c.contains(rest)),
        }
    }

    pub fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (e, c) in &other.children {
            self.child(e.clone()).union(c);
        }
    }

    /// The paths of `self` that are not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (e, c) in &self.children {
            let d = match other.children.get(e) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                out.children.insert(e.clone(), d);
            }
        }
        out
    }

    /// The paths in both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (e, c) in &self.children {
            if let Some(o) = other.children.get(e) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(e.clone(), i);
                }
            }
        }
        out
    }

    /// Every member path, shortest first within a branch.
    pub fn paths(&self) -> Vec<Vec<Element>> {
        let mut out = Vec::new();
        self.walk(&mut Vec::new(), &mut out);
        out
    }

    fn walk(&self, prefix: &mut Vec<Element>, out: &mut Vec<Vec<Element>>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (e, c) in &self.children {
            prefix.push(e.clone());
            c.walk(prefix, out);
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON of the set.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (e, c) in &self.children {
            if !c.is_empty() {
                m.insert(e.encode(), c.to_fields_v1());
            }
        }
        Value::Object(m)
    }

    /// Reads `FieldsV1` JSON (the root is never a member).
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let mut set = Self::decode_node(v)?;
        set.member = false;
        Ok(set)
    }

    fn decode_node(v: &Value) -> Result<FieldSet, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("expected an object in fieldsV1, got {v}"))?;
        let mut set = FieldSet {
            member: obj.is_empty(),
            children: BTreeMap::new(),
        };
        for (k, c) in obj {
            if k == "." {
                set.member = true;
                continue;
            }
            let e = Element::decode(k).ok_or_else(|| format!("invalid path element {k:?}"))?;
            set.children.insert(e, Self::decode_node(c)?);
        }
        Ok(set)
    }
}

/// `.spec.replicas` for a path.
pub fn display(path: &[Element]) -> String {
    path.iter().map(Element::display).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &str) -> Element {
        Element::Field(s.into())
    }

    #[test]
    fn fields_v1_round_trips_with_dot_for_members_with_children() {
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}},
        });
        let set = FieldSet::from_fields_v1(&v).unwrap();
        assert!(set.contains(&[f("metadata"), f("labels")]));
        assert!(set.contains(&[f("metadata"), f("labels"), f("app")]));
        assert!(!set.contains(&[f("metadata")]));
        let item = Element::Key(r#"{"name":"web"}"#.into());
        assert!(set.contains(&[f("spec"), f("containers"), item.clone(), f("image")]));
        assert_eq!(set.to_fields_v1(), v);
        assert_eq!(
            display(&[f("spec"), f("containers"), item, f("image")]),
            r#".spec.containers[name="web"].image"#
        );
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
    }

    #[test]
    fn set_algebra_is_path_wise() {
        let mut a = FieldSet::default();
        a.insert(&[f("spec"), f("replicas")]);
        a.insert(&[f("spec"), f("paused")]);
        let mut b = FieldSet::default();
        b.insert(&[f("spec"), f("replicas")]);
        b.insert(&[f("spec")]);
        let d = a.difference(&b);
        assert_eq!(d.paths(), vec![vec![f("spec"), f("paused")]]);
        let i = a.intersection(&b);
        assert_eq!(i.paths(), vec![vec![f("spec"), f("replicas")]]);
        a.union(&b);
        assert_eq!(a.paths().len(), 3);
        assert!(FieldSet::default().is_empty());
    }
}
