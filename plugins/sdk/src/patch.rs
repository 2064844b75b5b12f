//! A JSON Patch (RFC 6902) builder.

use serde_json::{Map, Value, json};

/// A JSON Patch under construction.
///
/// [`Patch::new`] collects raw operations. [`Patch::on`] also keeps a copy
/// of the object being patched, so the path helpers (`set`, `set_default`,
/// `remove`, and the label and annotation shorthands) know what exists:
/// they create missing parents (`add /metadata/annotations {...}` when the
/// object has no annotations yet), skip no-op changes, and see the effect
/// of the operations before them.
///
/// ```
/// # use wasm_apiserver_plugin_sdk::{Patch, json};
/// let obj = json!({"metadata": {"name": "web"}});
/// let p = Patch::on(&obj).set_label("team", "a").set_annotation("example.com/owner", "me");
/// assert_eq!(p.to_json(), json!([
///     {"op": "add", "path": "/metadata/labels", "value": {"team": "a"}},
///     {"op": "add", "path": "/metadata/annotations", "value": {"example.com/owner": "me"}},
/// ]).to_string());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Patch {
    ops: Vec<Value>,
    doc: Option<Value>,
}

impl PartialEq for Patch {
    fn eq(&self, other: &Self) -> bool {
        self.ops == other.ops
    }
}

/// The JSON Pointer (RFC 6901) of `segments`: `["metadata", "labels",
/// "app.kubernetes.io/name"]` is `/metadata/labels/app.kubernetes.io~1name`.
pub fn pointer<S: AsRef<str>>(segments: &[S]) -> String {
    segments
        .iter()
        .map(|s| format!("/{}", s.as_ref().replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn sorted<K: AsRef<str>, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Vec<(K, V)> {
    let mut v: Vec<(K, V)> = pairs.into_iter().collect();
    v.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
    v
}

impl Patch {
    /// An empty patch of raw operations.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty patch of `object`, for the path helpers.
    pub fn on(object: &Value) -> Self {
        Self {
            ops: Vec::new(),
            doc: Some(object.clone()),
        }
    }

    fn push(mut self, op: Value) -> Self {
        self.ops.push(op);
        self
    }

    /// `add` at a JSON Pointer.
    pub fn add(self, path: &str, value: Value) -> Self {
        self.push(json!({"op": "add", "path": path, "value": value}))
    }

    /// `replace` at a JSON Pointer.
    pub fn replace(self, path: &str, value: Value) -> Self {
        self.push(json!({"op": "replace", "path": path, "value": value}))
    }

    /// `remove` at a JSON Pointer.
    pub fn remove_pointer(self, path: &str) -> Self {
        self.push(json!({"op": "remove", "path": path}))
    }

    /// `test` at a JSON Pointer: the patch fails unless the value is there.
    pub fn test(self, path: &str, value: Value) -> Self {
        self.push(json!({"op": "test", "path": path, "value": value}))
    }

    fn doc(&mut self) -> &mut Value {
        self.doc.get_or_insert_with(|| Value::Object(Map::new()))
    }

    /// Sets the member at `path` to `value`, adding missing parent objects;
    /// nothing when it already has that value.
    pub fn set<S: AsRef<str>>(mut self, path: &[S], value: impl Into<Value>) -> Self {
        let value = value.into();
        let Some((last, parents)) = path.split_last() else {
            return self;
        };
        let mut at = self.doc();
        for (i, seg) in parents.iter().enumerate() {
            let Some(obj) = at.as_object_mut() else {
                return self;
            };
            if !obj.get(seg.as_ref()).is_some_and(Value::is_object) {
                // Build the rest of the path as one nested value.
                let mut nested = value;
                for s in path[i + 1..].iter().rev() {
                    nested = json!({ s.as_ref(): nested });
                }
                let replacing = obj.contains_key(seg.as_ref());
                obj.insert(seg.as_ref().to_owned(), nested.clone());
                let ptr = pointer(&path[..=i]);
                return if replacing {
                    self.replace(&ptr, nested)
                } else {
                    self.add(&ptr, nested)
                };
            }
            at = obj.get_mut(seg.as_ref()).expect("checked above");
        }
        let Some(obj) = at.as_object_mut() else {
            return self;
        };
        if obj.get(last.as_ref()) == Some(&value) {
            return self;
        }
        // `add` on an existing member replaces it (RFC 6902, 4.1).
        obj.insert(last.as_ref().to_owned(), value.clone());
        self.add(&pointer(path), value)
    }

    /// Sets the member at `path` only when it is missing (a default).
    pub fn set_default<S: AsRef<str>>(self, path: &[S], value: impl Into<Value>) -> Self {
        if self.get(path).is_some() {
            return self;
        }
        self.set(path, value)
    }

    /// Removes the member at `path`; nothing when it is missing.
    pub fn remove<S: AsRef<str>>(mut self, path: &[S]) -> Self {
        let Some((last, parents)) = path.split_last() else {
            return self;
        };
        let mut at = self.doc();
        for seg in parents {
            match at.get_mut(seg.as_ref()) {
                Some(v) => at = v,
                None => return self,
            }
        }
        match at.as_object_mut().and_then(|o| o.remove(last.as_ref())) {
            Some(_) => self.remove_pointer(&pointer(path)),
            None => self,
        }
    }

    /// The value at `path` in the patched copy of the object.
    pub fn get<S: AsRef<str>>(&self, path: &[S]) -> Option<&Value> {
        let mut at = self.doc.as_ref()?;
        for seg in path {
            at = at.get(seg.as_ref())?;
        }
        Some(at)
    }

    /// Sets label `key` to `value`.
    pub fn set_label(self, key: &str, value: &str) -> Self {
        self.set(&["metadata", "labels", key], value)
    }

    /// Sets label `key` to `value` unless the object has that label.
    pub fn default_label(self, key: &str, value: &str) -> Self {
        self.set_default(&["metadata", "labels", key], value)
    }

    /// Removes label `key`.
    pub fn remove_label(self, key: &str) -> Self {
        self.remove(&["metadata", "labels", key])
    }

    /// Sets annotation `key` to `value`.
    pub fn set_annotation(self, key: &str, value: &str) -> Self {
        self.set(&["metadata", "annotations", key], value)
    }

    /// Sets annotation `key` to `value` unless the object has it.
    pub fn default_annotation(self, key: &str, value: &str) -> Self {
        self.set_default(&["metadata", "annotations", key], value)
    }

    /// Sets each annotation the object does not have yet, in key order.
    pub fn default_annotations<K: AsRef<str>, V: AsRef<str>>(
        self,
        annotations: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        sorted(annotations).into_iter().fold(self, |p, (k, v)| {
            p.default_annotation(k.as_ref(), v.as_ref())
        })
    }

    /// Sets each label the object does not have yet, in key order.
    pub fn default_labels<K: AsRef<str>, V: AsRef<str>>(
        self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        sorted(labels)
            .into_iter()
            .fold(self, |p, (k, v)| p.default_label(k.as_ref(), v.as_ref()))
    }

    /// Removes annotation `key`.
    pub fn remove_annotation(self, key: &str) -> Self {
        self.remove(&["metadata", "annotations", key])
    }

    /// True when there is no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The operations.
    pub fn ops(&self) -> &[Value] {
        &self.ops
    }

    /// The patch as JSON text (a JSON array).
    pub fn to_json(&self) -> String {
        Value::Array(self.ops.clone()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(p: &Patch) -> Value {
        Value::Array(p.ops().to_vec())
    }

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(
            pointer(&["metadata", "labels", "a/b~c"]),
            "/metadata/labels/a~1b~0c"
        );
        assert_eq!(pointer::<&str>(&[]), "");
    }

    #[test]
    fn set_creates_missing_parents_once() {
        let obj = json!({"metadata": {"name": "x"}});
        let p = Patch::on(&obj).set_label("a", "1").set_label("b", "2");
        assert_eq!(
            ops(&p),
            json!([
                {"op": "add", "path": "/metadata/labels", "value": {"a": "1"}},
                {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            ])
        );
        assert_eq!(
            p.get(&["metadata", "labels"]),
            Some(&json!({"a": "1", "b": "2"}))
        );
        // No metadata at all: one add of the nested value.
        let p = Patch::on(&json!({})).set_annotation("k", "v");
        assert_eq!(
            ops(&p),
            json!([{"op": "add", "path": "/metadata", "value": {"annotations": {"k": "v"}}}])
        );
    }

    #[test]
    fn set_replaces_a_non_object_parent_and_skips_unchanged_values() {
        let obj = json!({"metadata": {"labels": null, "annotations": {"k": "v"}}});
        let p = Patch::on(&obj).set_label("a", "1").set_annotation("k", "v");
        assert_eq!(
            ops(&p),
            json!([{"op": "replace", "path": "/metadata/labels", "value": {"a": "1"}}])
        );
        let p = Patch::on(&obj).set_annotation("k", "w");
        assert_eq!(
            ops(&p),
            json!([{"op": "add", "path": "/metadata/annotations/k", "value": "w"}])
        );
    }

    #[test]
    fn defaults_keep_what_is_there() {
        let obj = json!({"metadata": {"annotations": {"example.com/owner": "me"}}});
        let p = Patch::on(&obj)
            .default_annotation("example.com/owner", "platform")
            .default_annotation("example.com/tier", "web");
        assert_eq!(
            ops(&p),
            json!([{"op": "add", "path": "/metadata/annotations/example.com~1tier", "value": "web"}])
        );
    }

    #[test]
    fn default_maps_go_in_key_order() {
        let obj = json!({"metadata": {"labels": {"b": "old"}}});
        let p = Patch::on(&obj)
            .default_labels([("c", "3"), ("a", "1"), ("b", "2")])
            .default_annotations(std::collections::HashMap::from([("y", "2"), ("x", "1")]));
        assert_eq!(
            ops(&p),
            json!([
                {"op": "add", "path": "/metadata/labels/a", "value": "1"},
                {"op": "add", "path": "/metadata/labels/c", "value": "3"},
                {"op": "add", "path": "/metadata/annotations", "value": {"x": "1"}},
                {"op": "add", "path": "/metadata/annotations/y", "value": "2"},
            ])
        );
    }

    #[test]
    fn remove_only_what_exists() {
        let obj = json!({"metadata": {"labels": {"a": "1"}}});
        let p = Patch::on(&obj)
            .remove_label("a")
            .remove_label("a")
            .remove_annotation("x");
        assert_eq!(
            ops(&p),
            json!([{"op": "remove", "path": "/metadata/labels/a"}])
        );
    }

    #[test]
    fn raw_operations_and_text() {
        let p = Patch::new()
            .test("/spec/replicas", json!(3))
            .replace("/spec/replicas", json!(5))
            .remove_pointer("/status");
        assert_eq!(
            p.to_json(),
            r#"[{"op":"test","path":"/spec/replicas","value":3},{"op":"replace","path":"/spec/replicas","value":5},{"op":"remove","path":"/status"}]"#
        );
        assert!(Patch::new().is_empty());
    }
}
