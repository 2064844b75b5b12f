//! Structured merge over a schema: what fields a value sets, how an applied
//! configuration merges into a live object, which fields differ between two
//! objects, and removing fields.
//!
//! The semantics follow upstream's structured-merge-diff, read from its
//! documentation and the Kubernetes API conventions:
//! - objects with declared properties (structs) and maps are *granular*:
//!   merged key by key, unless `x-kubernetes-map-type: atomic`;
//! - lists are `atomic` (replaced whole) unless `x-kubernetes-list-type`
//!   says `set` (items by value) or `map` (items by their
//!   `x-kubernetes-list-map-keys`); a built-in list without a list type but
//!   with a strategic-merge `x-kubernetes-patch-merge-key` is a map on that
//!   key, one with `x-kubernetes-patch-strategy: merge` alone is a set;
//! - where the schema says nothing (`x-kubernetes-preserve-unknown-fields`,
//!   an open object), the type is *deduced* from the value: objects are
//!   granular maps, lists atomic.

use super::fieldset::{Element, FieldSet};
use crate::openapi::definitions;
use serde_json::{Map, Value};

/// A node of a schema, resolved through `$ref`s into the built-in
/// definitions. `None` is "deduced from the value".
#[derive(Clone, Copy)]
pub struct Schema<'a>(pub Option<&'a Value>);

enum Shape<'a> {
    Struct { atomic: bool },
    Map { atomic: bool },
    List { ty: ListType, elem: Schema<'a> },
    Scalar,
    Deduced,
}

#[derive(Clone)]
enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

impl<'a> Schema<'a> {
    pub fn new(v: &'a Value) -> Self {
        Schema(Some(v)).resolve()
    }

    /// This node with its `$ref`s followed.
    pub fn resolved(self) -> Self {
        self.resolve()
    }

    fn resolve(self) -> Self {
        let mut cur = self.0;
        for _ in 0..8 {
            let Some(v) = cur else { break };
            if let Some(first) = v.get("allOf").and_then(|a| a.get(0)) {
                cur = Some(first);
                continue;
            }
            match v.get("$ref").and_then(Value::as_str) {
                Some(r) => {
                    let name = r.rsplit('/').next().unwrap_or(r);
                    cur = definitions::builtin().get(name);
                }
                None => break,
            }
        }
        Schema(cur)
    }

    fn ext(&self, name: &str) -> Option<&'a Value> {
        self.0?.get(name)
    }

    fn shape(&self) -> Shape<'a> {
        let Some(v) = self.0 else {
            return Shape::Deduced;
        };
        let atomic = self.ext("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
        if v.get("x-kubernetes-int-or-string").is_some() {
            return Shape::Scalar;
        }
        if v.get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty())
        {
            return Shape::Struct { atomic };
        }
        if v.get("additionalProperties").is_some_and(Value::is_object) {
            return Shape::Map { atomic };
        }
        match v.get("type").and_then(Value::as_str) {
            Some("array") => {
                let elem = Schema(v.get("items")).resolve();
                let strategy = self
                    .ext("x-kubernetes-patch-strategy")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let merge_key = self
                    .ext("x-kubernetes-patch-merge-key")
                    .and_then(Value::as_str);
                let ty = match self.ext("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => ListType::Map(
                        self.ext("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(|k| k.as_str().map(String::from))
                            .collect(),
                    ),
                    Some(_) => ListType::Atomic,
                    None if strategy.split(',').any(|s| s == "merge") => match merge_key {
                        Some(k) => ListType::Map(vec![k.to_string()]),
                        None => ListType::Set,
                    },
                    None => ListType::Atomic,
                };
                Shape::List { ty, elem }
            }
            Some("object") | None => Shape::Deduced,
            Some(_) => Shape::Scalar,
        }
    }

    /// The schema of field `name` (deduced when undeclared).
    pub fn field(&self, name: &str) -> Schema<'a> {
        let Some(v) = self.0 else {
            return Schema(None);
        };
        if let Some(p) = v.get("properties").and_then(|p| p.get(name)) {
            return Schema(Some(p)).resolve();
        }
        match v.get("additionalProperties").filter(|a| a.is_object()) {
            Some(a) => Schema(Some(a)).resolve(),
            None => Schema(None),
        }
    }

    fn declares(&self, name: &str) -> bool {
        self.0
            .and_then(|v| v.get("properties"))
            .and_then(|p| p.get(name))
            .is_some()
    }
}

/// The path element of list item `item` in a list of type `ty` whose items
/// have schema `elem`. A key field the item leaves out takes its schema
/// default (`protocol: TCP` of container ports), as the stored item has it
/// after defaulting; otherwise an applied port without a protocol would
/// never match its own stored item.
fn item_element(ty: &ListType, elem: Schema<'_>, index: usize, item: &Value) -> Element {
    match ty {
        ListType::Set => Element::Value(item.to_string()),
        ListType::Map(keys) => {
            let mut k = Map::new();
            for key in keys {
                let default = || elem.field(key).0.and_then(|s| s.get("default"));
                if let Some(v) = item.get(key).or_else(default) {
                    k.insert(key.clone(), v.clone());
                }
            }
            Element::key(&k)
        }
        ListType::Atomic => Element::Index(index),
    }
}

/// The fields `v` sets (upstream's `ToFieldSet`): every scalar, atomic
/// value and list item is a member; a granular object's key is a member
/// when its value is empty or null, or it is a map entry rather than a
/// declared field.
pub fn to_fieldset(v: &Value, schema: Schema<'_>) -> FieldSet {
    let mut set = FieldSet::default();
    fill(v, schema, &mut set);
    set
}

fn fill(v: &Value, schema: Schema<'_>, set: &mut FieldSet) {
    match (schema.shape(), v) {
        (Shape::Struct { atomic: false } | Shape::Map { atomic: false }, Value::Object(m))
        | (Shape::Deduced, Value::Object(m)) => {
            for (k, cv) in m {
                let child = set.child(Element::Field(k.clone()));
                fill(cv, schema.field(k), child);
                let empty = cv.is_null() || cv.as_object().is_some_and(Map::is_empty);
                if empty || !schema.declares(k) {
                    child.member = true;
                }
            }
        }
        (
            Shape::List {
                ty: ty @ (ListType::Set | ListType::Map(_)),
                elem,
            },
            Value::Array(items),
        ) => {
            for (i, item) in items.iter().enumerate() {
                let child = set.child(item_element(&ty, elem, i, item));
                if matches!(ty, ListType::Map(_)) {
                    fill(item, elem, child);
                }
                child.member = true;
            }
        }
        _ => set.member = true,
    }
}

/// The list items `v` sets twice: two items of an associative list with
/// the same key values, or of a set with the same value. Upstream refuses
/// such an applied configuration (its fields have no single owner, and
/// applying it twice would not give the same object): one message per
/// duplicate, `.spec.containers[name="c"].env: duplicate entries for key
/// [name="FOO"]`, and the path of the list.
pub fn duplicates(v: &Value, schema: Schema<'_>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    find_duplicates(v, schema, &mut Vec::new(), &mut out);
    out
}

fn find_duplicates(
    v: &Value,
    schema: Schema<'_>,
    path: &mut Vec<Element>,
    out: &mut Vec<(String, String)>,
) {
    match (schema.shape(), v) {
        (Shape::Struct { atomic: false } | Shape::Map { atomic: false }, Value::Object(m))
        | (Shape::Deduced, Value::Object(m)) => {
            for (k, cv) in m {
                path.push(Element::Field(k.clone()));
                find_duplicates(cv, schema.field(k), path, out);
                path.pop();
            }
        }
        (
            Shape::List {
                ty: ty @ (ListType::Set | ListType::Map(_)),
                elem,
            },
            Value::Array(items),
        ) => {
            let mut seen = std::collections::BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let e = item_element(&ty, elem, i, item);
                let list = super::fieldset::display(path);
                if !seen.insert(e.clone()) {
                    let what = match &ty {
                        ListType::Map(_) => "key",
                        _ => "value",
                    };
                    let shown = super::fieldset::display(std::slice::from_ref(&e));
                    out.push((
                        list.clone(),
                        format!("{list}: duplicate entries for {what} {shown}"),
                    ));
                    continue;
                }
                if matches!(ty, ListType::Map(_)) {
                    path.push(e);
                    find_duplicates(item, elem, path, out);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

/// `config` applied onto `live`: granular objects merged key by key (a
/// `null` removes the key), atomic values replaced, set lists joined,
/// associative lists merged item by item on their keys.
pub fn merge(live: &Value, config: &Value, schema: Schema<'_>) -> Value {
    match (schema.shape(), live, config) {
        (
            Shape::Struct { atomic: false } | Shape::Map { atomic: false } | Shape::Deduced,
            Value::Object(l),
            Value::Object(c),
        ) => {
            let mut out = l.clone();
            for (k, cv) in c {
                if cv.is_null() {
                    out.remove(k);
                    continue;
                }
                let merged = match l.get(k) {
                    Some(lv) => merge(lv, cv, schema.field(k)),
                    None => cv.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Shape::List { ty, elem }, Value::Array(l), Value::Array(c)) => match ty {
            ListType::Atomic => config.clone(),
            ListType::Set => {
                let mut out = l.clone();
                for item in c {
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                }
                Value::Array(out)
            }
            ListType::Map(_) => {
                let mut out = l.clone();
                for (i, item) in c.iter().enumerate() {
                    let key = item_element(&ty, elem, i, item);
                    match out
                        .iter()
                        .position(|o| item_element(&ty, elem, 0, o) == key)
                    {
                        Some(at) => out[at] = merge(&out[at], item, elem),
                        None => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
        },
        _ => config.clone(),
    }
}

/// The paths whose values differ between `a` and `b` (added, changed or
/// removed), down to the members [`to_fieldset`] would name.
pub fn changed(a: &Value, b: &Value, schema: Schema<'_>) -> FieldSet {
    let mut set = FieldSet::default();
    diff(a, b, schema, &mut set);
    set
}

fn diff(a: &Value, b: &Value, schema: Schema<'_>, set: &mut FieldSet) {
    if a == b {
        return;
    }
    match (schema.shape(), a, b) {
        (
            Shape::Struct { atomic: false } | Shape::Map { atomic: false } | Shape::Deduced,
            Value::Object(x),
            Value::Object(y),
        ) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let child_schema = schema.field(k);
                let child = set.child(Element::Field(k.clone()));
                match (x.get(k), y.get(k)) {
                    (Some(xv), Some(yv)) => diff(xv, yv, child_schema, child),
                    (Some(v), None) | (None, Some(v)) => {
                        child.union(&to_fieldset(v, child_schema));
                        child.member = true;
                    }
                    (None, None) => {}
                }
            }
        }
        (
            Shape::List {
                ty: ty @ (ListType::Set | ListType::Map(_)),
                elem,
            },
            Value::Array(x),
            Value::Array(y),
        ) => {
            let keyed = |items: &[Value]| -> Vec<(Element, Value)> {
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (item_element(&ty, elem, i, v), v.clone()))
                    .collect()
            };
            let (x, y) = (keyed(x), keyed(y));
            for (e, v) in &x {
                match y.iter().find(|(f, _)| f == e) {
                    Some((_, w)) => diff(v, w, elem, set.child(e.clone())),
                    None => {
                        let child = set.child(e.clone());
                        child.union(&to_fieldset(v, elem));
                        child.member = true;
                    }
                }
            }
            for (e, w) in y.iter().filter(|(e, _)| !x.iter().any(|(f, _)| f == e)) {
                let child = set.child(e.clone());
                child.union(&to_fieldset(w, elem));
                child.member = true;
            }
        }
        _ => set.member = true,
    }
}

/// Removes the value at each member path of `paths` from `v`, except what
/// `keep` names (upstream's prune: remove what the applier no longer
/// applies, then add back what any manager still owns). A member path with
/// owned paths below it is not removed whole: only its parts nobody owns
/// go, so a map a manager once applied as `{}` keeps the keys it (or
/// anyone) applies later.
pub fn remove(v: &mut Value, paths: &FieldSet, keep: &FieldSet, schema: Schema<'_>) {
    let empty = FieldSet::default();
    let kept = |e: &Element| keep.children.get(e).unwrap_or(&empty);
    match (schema.shape(), v) {
        (_, Value::Object(m)) => {
            for (e, sub) in &paths.children {
                let Element::Field(k) = e else { continue };
                let keep = kept(e);
                if sub.member && keep.is_empty() {
                    m.remove(k);
                } else if let Some(child) = m.get_mut(k) {
                    if sub.member {
                        retain(child, keep, schema.field(k));
                    } else {
                        remove(child, sub, keep, schema.field(k));
                    }
                }
            }
        }
        (Shape::List { ty, elem }, Value::Array(items)) => {
            let mut i = 0;
            items.retain(|item| {
                let e = item_element(&ty, elem, i, item);
                i += 1;
                !paths
                    .children
                    .get(&e)
                    .is_some_and(|s| s.member && kept(&e).is_empty())
            });
            for (i, item) in items.iter_mut().enumerate() {
                let e = item_element(&ty, elem, i, item);
                if let Some(sub) = paths.children.get(&e) {
                    if sub.member {
                        retain(item, kept(&e), elem);
                    } else {
                        remove(item, sub, kept(&e), elem);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Keeps of `v` only what `keep` names (all of it where `keep` is a
/// member): the owned parts of a value whose whole was dropped.
fn retain(v: &mut Value, keep: &FieldSet, schema: Schema<'_>) {
    if keep.member {
        return;
    }
    match (schema.shape(), v) {
        (_, Value::Object(m)) => {
            m.retain(|k, _| {
                keep.children
                    .get(&Element::Field(k.clone()))
                    .is_some_and(|c| !c.is_empty())
            });
            for (k, child) in m.iter_mut() {
                if let Some(c) = keep.children.get(&Element::Field(k.clone())) {
                    retain(child, c, schema.field(k));
                }
            }
        }
        (Shape::List { ty, elem }, Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, mut item) in std::mem::take(items).into_iter().enumerate() {
                let e = item_element(&ty, elem, i, &item);
                if let Some(c) = keep.children.get(&e).filter(|c| !c.is_empty()) {
                    retain(&mut item, c, elem);
                    out.push(item);
                }
            }
            *items = out;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Schema<'static> {
        Schema::new(&definitions::builtin()["io.k8s.api.apps.v1.Deployment"])
    }

    fn paths(set: &FieldSet) -> Vec<String> {
        set.paths()
            .iter()
            .map(|p| super::super::fieldset::display(p))
            .collect()
    }

    #[test]
    fn repeated_list_keys_are_found_at_every_depth() {
        let d = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "a", "env": [{"name": "FOO", "value": "1"}, {"name": "FOO", "value": "2"}],
             "ports": [{"containerPort": 80}, {"containerPort": 80, "protocol": "TCP"}]},
            {"name": "d", "image": "b"},
            {"name": "c", "image": "c"}]}}}});
        let got: Vec<String> = duplicates(&d, deployment())
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        assert_eq!(
            got,
            [
                r#".spec.template.spec.containers[name="c"].env: duplicate entries for key [name="FOO"]"#,
                // `protocol` defaults to TCP: the same key.
                r#".spec.template.spec.containers[name="c"].ports: duplicate entries for key [containerPort=80,protocol="TCP"]"#,
                r#".spec.template.spec.containers: duplicate entries for key [name="c"]"#,
            ]
        );
        let distinct = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "c", "env": [{"name": "A"}, {"name": "B"}]}, {"name": "d"}]}}}});
        assert!(duplicates(&distinct, deployment()).is_empty());
    }

    #[test]
    fn containers_are_keyed_by_name_and_labels_are_granular() {
        let d = json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        let got = paths(&to_fieldset(&d, deployment()));
        assert_eq!(
            got,
            [
                ".metadata.labels.app",
                ".spec.replicas",
                r#".spec.template.spec.containers[name="web"]"#,
                r#".spec.template.spec.containers[name="web"].image"#,
                r#".spec.template.spec.containers[name="web"].name"#,
            ]
        );
    }

    #[test]
    fn merge_joins_associative_lists_and_replaces_atomic_ones() {
        let live = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]}],
            "nodeSelector": {"k": "v"}}}}});
        let config = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "y"}, {"name": "b", "image": "z"}],
            "nodeSelector": {"other": "w"}}}}});
        let out = merge(&live, &config, deployment());
        let spec = &out["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["image"], "y");
        assert_eq!(spec["containers"][0]["env"][0]["name"], "E");
        assert_eq!(spec["containers"][1]["name"], "b");
        // nodeSelector is `x-kubernetes-map-type: atomic`.
        assert_eq!(spec["nodeSelector"], json!({"other": "w"}));
    }

    #[test]
    fn changed_names_only_what_differs_and_remove_drops_it() {
        let a = json!({"spec": {"replicas": 1, "paused": true,
            "template": {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}}});
        let b = json!({"spec": {"replicas": 3, "paused": true,
            "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        let c = changed(&a, &b, deployment());
        assert_eq!(
            paths(&c),
            [
                ".spec.replicas",
                r#".spec.template.spec.containers[name="b"]"#,
                r#".spec.template.spec.containers[name="b"].image"#,
                r#".spec.template.spec.containers[name="b"].name"#,
            ]
        );
        let mut d = a.clone();
        let mut gone = FieldSet::default();
        gone.insert(&[
            Element::Field("spec".into()),
            Element::Field("paused".into()),
        ]);
        let item = Element::Key(r#"{"name":"b"}"#.into());
        gone.insert(&[
            Element::Field("spec".into()),
            Element::Field("template".into()),
            Element::Field("spec".into()),
            Element::Field("containers".into()),
            item,
        ]);
        remove(&mut d, &gone, &FieldSet::default(), deployment());
        assert!(d["spec"].get("paused").is_none());
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn untyped_values_are_deduced() {
        // Keys of a deduced map are map entries, so members themselves.
        let v = json!({"a": {"b": 1}, "l": [1, 2]});
        assert_eq!(paths(&to_fieldset(&v, Schema(None))), [".a", ".a.b", ".l"]);
    }

    #[test]
    fn set_lists_join_by_value() {
        // metadata.finalizers is `+listType=set`.
        let live = json!({"metadata": {"finalizers": ["a", "b"]}});
        let config = json!({"metadata": {"finalizers": ["c", "a"]}});
        let out = merge(&live, &config, deployment());
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        assert_eq!(
            paths(&to_fieldset(&config, deployment())),
            [
                r#".metadata.finalizers[="a"]"#,
                r#".metadata.finalizers[="c"]"#
            ]
        );
    }

    #[test]
    fn map_lists_with_two_keys() {
        // Container.ports: `+listType=map`, keys containerPort and protocol.
        let c = |ports: Value| json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "ports": ports}]}}}});
        let live = c(
            json!([{"containerPort": 80, "protocol": "TCP", "name": "http"},
                            {"containerPort": 80, "protocol": "UDP"}]),
        );
        let config = c(json!([{"containerPort": 80, "protocol": "TCP", "hostPort": 8080}]));
        let out = merge(&live, &config, deployment());
        let ports = &out["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert_eq!(ports.as_array().unwrap().len(), 2);
        assert_eq!(ports[0]["name"], "http");
        assert_eq!(ports[0]["hostPort"], 8080);
        let got = paths(&to_fieldset(&config, deployment()));
        assert!(
            got.contains(&r#".spec.template.spec.containers[name="a"].ports[containerPort=80,protocol="TCP"].hostPort"#.to_string()),
            "{got:?}"
        );
    }

    #[test]
    fn atomic_structs_are_owned_and_replaced_whole() {
        // LabelSelector is `+structType=atomic`.
        let live =
            json!({"spec": {"selector": {"matchLabels": {"a": "1"}, "matchExpressions": []}}});
        let config = json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}});
        let out = merge(&live, &config, deployment());
        assert_eq!(out["spec"]["selector"], json!({"matchLabels": {"b": "2"}}));
        assert_eq!(
            paths(&to_fieldset(&config, deployment())),
            [".spec.selector"]
        );
        // A list without a list type (container args) is atomic.
        let args = |a: Value| json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": a}]}}}});
        let out = merge(&args(json!(["x", "y"])), &args(json!(["z"])), deployment());
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["z"])
        );
    }

    #[test]
    fn a_null_in_the_config_removes_the_field() {
        let live = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let config = json!({"metadata": {"labels": {"b": null}}});
        let out = merge(&live, &config, deployment());
        assert_eq!(out["metadata"]["labels"], json!({"a": "1"}));
    }

    #[test]
    fn key_fields_left_out_take_their_defaults() {
        let c = |ports: Value| json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "ports": ports}]}}}});
        let stored = c(json!([{"containerPort": 8080, "protocol": "TCP"}]));
        let applied = c(json!([{"containerPort": 8080, "name": "http"}]));
        let out = merge(&stored, &applied, deployment());
        let ports = &out["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert_eq!(
            ports,
            &json!([{"containerPort": 8080, "protocol": "TCP", "name": "http"}])
        );
        // Only the name changed: the item itself is the same item.
        assert_eq!(
            paths(&changed(&stored, &out, deployment())),
            [
                r#".spec.template.spec.containers[name="a"].ports[containerPort=8080,protocol="TCP"].name"#
            ]
        );
    }
}
