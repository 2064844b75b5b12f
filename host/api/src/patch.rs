//! The three patch formats of `PATCH`: JSON Patch (RFC 6902), JSON Merge
//! Patch (RFC 7386), and strategic merge patch for built-in kinds.
//!
//! JSON and merge patches come from the `json-patch` crate. Strategic merge
//! patch is Kubernetes-specific and is implemented here: maps merge
//! recursively, `null` deletes, lists are replaced unless the field declares a
//! merge strategy (a merge key, or set-union for primitive lists), and the
//! directives `$patch` (replace/delete/merge), `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` work as
//! kubectl emits them.

use serde_json::{Map, Value};

/// The patch formats, by their `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}

impl PatchType {
    /// Maps a `Content-Type` (parameters ignored) to a patch type.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// How a list field merges under strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    Replace,
    /// Elements are maps identified by this key.
    MergeKey(&'static str),
    /// A list of primitives merged as a set.
    MergePrimitives,
}

/// The `patchStrategy`/`patchMergeKey` tags of the built-in kinds' lists.
fn list_strategy(kind: &str, path: &[String]) -> ListStrategy {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match (kind, p.as_slice()) {
        (_, ["metadata", "finalizers"]) => ListStrategy::MergePrimitives,
        (_, ["metadata", "ownerReferences"]) => ListStrategy::MergeKey("uid"),
        ("ServiceAccount", ["secrets"]) => ListStrategy::MergeKey("name"),
        // Pod specs, wherever they are (pods and every pod template), with
        // upstream's `patchMergeKey`s.
        (_, [.., "containers" | "initContainers" | "ephemeralContainers"]) => {
            ListStrategy::MergeKey("name")
        }
        (
            _,
            [
                ..,
                "containers" | "initContainers" | "ephemeralContainers",
                "ports",
            ],
        ) => ListStrategy::MergeKey("containerPort"),
        (
            _,
            [
                ..,
                "containers" | "initContainers" | "ephemeralContainers",
                "env",
            ],
        ) => ListStrategy::MergeKey("name"),
        (
            _,
            [
                ..,
                "containers" | "initContainers" | "ephemeralContainers",
                "volumeMounts",
            ],
        ) => ListStrategy::MergeKey("mountPath"),
        (_, [.., "spec", "volumes" | "imagePullSecrets"]) => ListStrategy::MergeKey("name"),
        (_, [.., "spec", "hostAliases"]) => ListStrategy::MergeKey("ip"),
        ("Service", ["spec", "ports"]) => ListStrategy::MergeKey("port"),
        (_, ["status", "conditions"]) => ListStrategy::MergeKey("type"),
        _ => ListStrategy::Replace,
    }
}

/// Errors from applying a patch; the caller maps them to 400/422.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("{0}")]
    Invalid(String),
    #[error("the server rejected our request due to an error in our request: {0}")]
    Apply(String),
}

/// Applies a JSON Patch (RFC 6902) document.
pub fn apply_json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| PatchError::Invalid(e.to_string()))?;
    // A failed patch leaves a copy behind, so nothing needs undoing (the
    // crate's undo panics when an applied `move` cannot be reversed).
    let mut doc = target.clone();
    json_patch::patch_unsafe(&mut doc, &patch).map_err(|e| PatchError::Apply(e.to_string()))?;
    Ok(doc)
}

/// Applies a JSON Merge Patch (RFC 7386) document.
pub fn apply_merge_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(PatchError::Invalid(
            "merge patch must be a JSON object".into(),
        ));
    }
    let mut doc = target.clone();
    json_patch::merge(&mut doc, patch);
    Ok(doc)
}

/// Applies a strategic merge patch to an object of the given built-in kind.
pub fn apply_strategic_merge_patch(
    kind: &str,
    target: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    let patch = patch
        .as_object()
        .ok_or_else(|| PatchError::Invalid("strategic merge patch must be a JSON object".into()))?;
    let original = target.as_object().cloned().unwrap_or_default();
    merge_map(kind, &mut Vec::new(), original, patch).map(Value::Object)
}

fn merge_map(
    kind: &str,
    path: &mut Vec<String>,
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Map<String, Value>, PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut out = patch.clone();
            out.remove("$patch");
            return Ok(out);
        }
        Some("delete") => return Ok(Map::new()),
        Some("merge") | None => {}
        Some(other) => return Err(PatchError::Invalid(format!("unknown patch type: {other}"))),
    }
    if let Some(retain) = patch.get("$retainKeys") {
        let keep: Vec<&str> = retain
            .as_array()
            .ok_or_else(|| PatchError::Invalid("$retainKeys must be a list".into()))?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        original.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = original.get_mut(field) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if value.is_null() {
            original.remove(key);
            continue;
        }
        path.push(key.clone());
        let merged = match (original.remove(key), value) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                Value::Object(merge_map(kind, path, o, p)?)
            }
            // A value of another type is replaced as if it were missing:
            // the patch's nulls and directives are dropped, not stored.
            (_, Value::Object(p)) => Value::Object(merge_map(kind, path, Map::new(), p)?),
            (Some(Value::Array(o)), Value::Array(p)) => Value::Array(merge_list(kind, path, o, p)?),
            (_, Value::Array(p)) => Value::Array(merge_list(kind, path, Vec::new(), p)?),
            (_, v) => v.clone(),
        };
        path.pop();
        original.insert(key.clone(), merged);
    }
    Ok(original)
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn merge_list(
    kind: &str,
    path: &mut Vec<String>,
    original: Vec<Value>,
    patch: &[Value],
) -> Result<Vec<Value>, PatchError> {
    let replace_all = patch
        .iter()
        .any(|v| v.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace_all {
        return Ok(patch
            .iter()
            .filter(|v| v.get("$patch").is_none())
            .map(strip_directives)
            .collect());
    }
    match list_strategy(kind, path) {
        ListStrategy::Replace => Ok(patch.iter().map(strip_directives).collect()),
        ListStrategy::MergePrimitives => {
            let mut out = original;
            for v in patch {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(out)
        }
        ListStrategy::MergeKey(merge_key) => {
            let mut out = original;
            for item in patch {
                let Some(p) = item.as_object() else {
                    return Err(PatchError::Invalid(format!(
                        "list {} needs maps",
                        path.join(".")
                    )));
                };
                let id = p.get(merge_key).cloned().ok_or_else(|| {
                    PatchError::Invalid(format!(
                        "map in list {} lacks merge key {merge_key}",
                        path.join(".")
                    ))
                })?;
                let pos = out.iter().position(|o| o.get(merge_key) == Some(&id));
                let delete = p.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        let o = out[i].as_object().cloned().unwrap_or_default();
                        out[i] = Value::Object(merge_map(kind, path, o, p)?);
                    }
                    (None, false) => out.push(strip_directives(item)),
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
    }

    #[test]
    fn json_patch_ops_and_failures() {
        let doc = json!({"data": {"a": "1"}});
        let out = apply_json_patch(&doc, &json!([{"op": "add", "path": "/data/b", "value": "2"}, {"op": "remove", "path": "/data/a"}])).unwrap();
        assert_eq!(out, json!({"data": {"b": "2"}}));
        assert!(
            apply_json_patch(
                &doc,
                &json!([{"op": "test", "path": "/data/a", "value": "9"}])
            )
            .is_err()
        );
        assert!(apply_json_patch(&doc, &json!({"op": "add"})).is_err());
    }

    #[test]
    fn merge_patch_nulls_delete() {
        let doc = json!({"data": {"a": "1", "b": "2"}, "x": [1, 2]});
        let out =
            apply_merge_patch(&doc, &json!({"data": {"a": null, "c": "3"}, "x": [3]})).unwrap();
        assert_eq!(out, json!({"data": {"b": "2", "c": "3"}, "x": [3]}));
    }

    #[test]
    fn strategic_merge_as_kubectl_apply_sends_it() {
        let live = json!({
            "metadata": {"name": "cm", "finalizers": ["a"], "annotations": {"keep": "1", "old": "x"}},
            "data": {"k1": "v1", "k2": "v2"}
        });
        let patch = json!({
            "metadata": {"annotations": {"old": null}, "finalizers": ["b"], "$setElementOrder/finalizers": ["a", "b"]},
            "data": {"k2": null, "k3": "v3"}
        });
        let out = apply_strategic_merge_patch("ConfigMap", &live, &patch).unwrap();
        assert_eq!(
            out,
            json!({
                "metadata": {"name": "cm", "finalizers": ["a", "b"], "annotations": {"keep": "1"}},
                "data": {"k1": "v1", "k3": "v3"}
            })
        );
    }

    #[test]
    fn pod_template_containers_merge_by_name() {
        let deployment = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]}}}});
        // What `kubectl apply` sends when `b` is dropped, `a` changes and `c` is new.
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
            "containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "c:1"}]}}}});
        let out = apply_strategic_merge_patch("Deployment", &deployment, &patch).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([
                {"name": "a", "image": "a:2", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
                {"name": "c", "image": "c:1"}])
        );
    }

    #[test]
    fn strategic_merge_keys_and_directives() {
        let live = json!({"secrets": [{"name": "a", "x": 1}, {"name": "b"}], "imagePullSecrets": [{"name": "p"}]});
        let patch = json!({
            "secrets": [{"name": "a", "y": 2}, {"name": "b", "$patch": "delete"}, {"name": "c"}],
            "imagePullSecrets": [{"name": "q"}]
        });
        let out = apply_strategic_merge_patch("ServiceAccount", &live, &patch).unwrap();
        assert_eq!(
            out["secrets"],
            json!([{"name": "a", "x": 1, "y": 2}, {"name": "c"}])
        );
        assert_eq!(
            out["imagePullSecrets"],
            json!([{"name": "q"}]),
            "no strategy: replace"
        );

        let out = apply_strategic_merge_patch(
            "ConfigMap",
            &json!({"data": {"a": "1"}}),
            &json!({"data": {"$patch": "replace", "b": "2"}}),
        )
        .unwrap();
        assert_eq!(out, json!({"data": {"b": "2"}}));
        let out = apply_strategic_merge_patch(
            "X",
            &json!({"metadata": {"finalizers": ["a", "b"]}}),
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(out, json!({"metadata": {"finalizers": ["b"]}}));
        let out = apply_strategic_merge_patch(
            "X",
            &json!({"spec": {"a": 1, "b": 2}}),
            &json!({"spec": {"$retainKeys": ["b"], "b": 3}}),
        )
        .unwrap();
        assert_eq!(out, json!({"spec": {"b": 3}}));
        assert!(apply_strategic_merge_patch("X", &json!({}), &json!([1])).is_err());
    }
}
