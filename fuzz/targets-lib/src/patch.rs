//! Targets over the three patch formats of `PATCH`.

use serde_json::Value;
use wasm_apiserver_api::patch::{apply_json_patch, apply_merge_patch, apply_strategic_merge_patch};

/// Splits JSON text `[a, b]` into its two values.
fn pair(data: &[u8]) -> Option<(Value, Value)> {
    let Value::Array(mut items) = crate::json(data)? else {
        return None;
    };
    if items.len() != 2 {
        return None;
    }
    let b = items.pop()?;
    let a = items.pop()?;
    Some((a, b))
}

/// Whether an object anywhere in `v` holds a `null` (a merge patch's
/// delete; arrays are values and may hold them).
fn has_null_member(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().any(|c| c.is_null() || has_null_member(c)),
        _ => false,
    }
}

/// `[target, patch]`: a merge patch applies without panicking, applying it
/// twice equals applying it once (RFC 7386 patches are idempotent), and
/// the result keeps no `null` member from the patch's objects.
pub fn merge_patch(data: &[u8]) {
    let Some((target, patch)) = pair(data) else {
        return;
    };
    let Ok(once) = apply_merge_patch(&target, &patch) else {
        assert!(!patch.is_object(), "an object patch was refused");
        return;
    };
    let twice = apply_merge_patch(&once, &patch).expect("the same patch applies again");
    assert_eq!(once, twice, "merge patch is not idempotent");
    if !has_null_member(&target) {
        assert!(
            !has_null_member(&once),
            "a null of the patch was kept: {once}"
        );
    }
}

/// `[target, patch]`: a JSON patch applies or fails without panicking; a
/// patch of `test` operations only leaves the target as it was; and a
/// patch that succeeded, followed by a `test` of the whole document
/// against its result, succeeds again.
pub fn json_patch(data: &[u8]) {
    let Some((target, patch)) = pair(data) else {
        return;
    };
    let Ok(out) = apply_json_patch(&target, &patch) else {
        return;
    };
    let ops = patch.as_array().map(Vec::as_slice).unwrap_or_default();
    if ops.iter().all(|op| op["op"] == "test") {
        assert_eq!(out, target, "test operations changed the document");
    }
    let check = serde_json::json!([{"op": "test", "path": "", "value": out}]);
    let again = apply_json_patch(&out, &check).expect("a document tests equal to itself");
    assert_eq!(again, out);
}

/// The kinds whose strategic merge differ (merge keys, primitive sets),
/// and one with no list strategy.
const KINDS: &[&str] = &[
    "ConfigMap",
    "Deployment",
    "Pod",
    "Service",
    "ServiceAccount",
];

/// Whether `v` holds an array or a `$` directive anywhere.
fn has_lists_or_directives(v: &Value) -> bool {
    match v {
        Value::Array(_) => true,
        Value::Object(m) => m
            .iter()
            .any(|(k, c)| k.starts_with('$') || has_lists_or_directives(c)),
        _ => false,
    }
}

/// Whether `v` holds a `$` directive anywhere.
fn has_directives(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().any(has_directives),
        Value::Object(m) => m
            .iter()
            .any(|(k, c)| k.starts_with('$') || has_directives(c)),
        _ => false,
    }
}

/// `[kind, target, patch]` (kind: an index into the kinds above): a
/// strategic merge patch applies or fails without panicking; when the
/// patch holds neither lists nor directives it merges exactly as a JSON
/// merge patch does (upstream's strategic merge patch is a merge patch
/// there); and, without directives, applying it a second time changes
/// nothing.
pub fn strategic_merge_patch(data: &[u8]) {
    let Some(Value::Array(items)) = crate::json(data) else {
        return;
    };
    let [kind, target, patch] = items.as_slice() else {
        return;
    };
    let kind = KINDS[kind.as_u64().unwrap_or(0) as usize % KINDS.len()];
    let Ok(once) = apply_strategic_merge_patch(kind, target, patch) else {
        return;
    };
    if target.is_object() && !has_lists_or_directives(patch) {
        let merged = apply_merge_patch(target, patch).expect("an object patch applies");
        assert_eq!(once, merged, "strategic merge differs from merge patch");
    }
    if !has_directives(patch) {
        // A second run may refuse what the first added unexamined (an item
        // new to a merge-key list is not checked for nested merge keys,
        // as upstream); when it applies, it changes nothing.
        if let Ok(twice) = apply_strategic_merge_patch(kind, &once, patch) {
            assert_eq!(once, twice, "strategic merge patch is not idempotent");
        }
    }
}
