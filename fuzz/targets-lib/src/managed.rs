//! Targets over server-side apply: `FieldsV1` as clients send it in
//! `metadata.managedFields`, and the apply merge.

use serde_json::{Value, json};
use wasm_apiserver_api::managed::fieldset::{self, FieldSet};
use wasm_apiserver_api::managed::typed::{self, Schema};
use wasm_apiserver_api::managed::{self as ssa, Manager};
use wasm_apiserver_api::openapi::definitions;

/// `FieldsV1` JSON that reads as a field set writes back as `FieldsV1`
/// that reads as the same set, and that form is a fixed point; every path
/// of the set is in it and prints.
pub fn fields_v1(data: &[u8]) {
    let Some(v) = crate::json(data) else {
        return;
    };
    let Ok(set) = FieldSet::from_fields_v1(&v) else {
        return;
    };
    // serde_json (without `float_roundtrip`) may read a float's shortest
    // text back as a neighbouring float, so such keys need not round trip.
    let float = |e: &fieldset::Element| match e {
        fieldset::Element::Key(j) | fieldset::Element::Value(j) => j.contains(['.', 'e', 'E']),
        _ => false,
    };
    if set.paths().iter().flatten().any(float) {
        return;
    }
    let written = set.to_fields_v1();
    let again = FieldSet::from_fields_v1(&written)
        .unwrap_or_else(|e| panic!("{v} read, its FieldsV1 {written} does not: {e}"));
    let canonical = |s: &FieldSet| s.paths();
    assert_eq!(canonical(&set), canonical(&again), "{v} -> {written}");
    assert_eq!(again.to_fields_v1(), written, "not a fixed point");
    for path in set.paths() {
        assert!(again.contains(&path));
        fieldset::display(&path);
    }
    let mut union = set.clone();
    union.union(&again);
    assert_eq!(canonical(&union), canonical(&set), "union with itself");
    assert!(set.difference(&again).is_empty(), "difference with itself");
    assert_eq!(canonical(&set.intersection(&again)), canonical(&set));
}

/// The schemas an applied configuration is merged over, by its `kind`
/// (built-in kinds from their definitions; others deduced from the value,
/// as for a custom resource preserving unknown fields).
fn schema_of(config: &Value) -> Schema<'static> {
    let name = match config["kind"].as_str() {
        Some("Deployment") => "io.k8s.api.apps.v1.Deployment",
        Some("ConfigMap") => "io.k8s.api.core.v1.ConfigMap",
        Some("Pod") => "io.k8s.api.core.v1.Pod",
        Some("Service") => "io.k8s.api.core.v1.Service",
        _ => return Schema(None),
    };
    Schema::new(&definitions::builtin()[name])
}

const NOW: &str = "2025-01-01T00:00:00Z";

fn manager(name: &str) -> Manager<'_> {
    Manager {
        name,
        subresource: None,
        api_version: "v1",
        has_status: true,
        now: NOW,
    }
}

/// `[live, config]` (`live` null: a create): server-side apply by one
/// manager merges without panicking (with conflicts forced); applying the
/// same configuration again by the same manager changes nothing and
/// conflicts with no one; the managed fields it writes read back.
pub fn apply(data: &[u8]) {
    let Some(Value::Array(items)) = crate::json(data) else {
        return;
    };
    let [live, config] = items.as_slice() else {
        return;
    };
    if !config.is_object() || !(live.is_object() || live.is_null()) {
        return;
    }
    let schema = schema_of(config);
    // A configuration naming one list item twice is refused before it is
    // merged (the registry answers 422 from `typed::duplicates`).
    if !typed::duplicates(config, schema).is_empty() {
        return;
    }
    // Nulls (which remove what they name) change a configuration merged
    // with itself: such configurations are not idempotent by design.
    if typed::merge(config, config, schema) != *config {
        return;
    }
    let live = live.as_object().map(|_| live);
    let m = manager("fuzz");
    let Ok(once) = ssa::apply(live, config, schema, &m, true) else {
        panic!("a forced apply conflicted");
    };
    let twice = match ssa::apply(Some(&once), config, schema, &m, false) {
        Ok(v) => v,
        Err(c) => panic!("re-applying conflicts: {}", c.message()),
    };
    assert_eq!(once, twice, "apply is not idempotent");
    // What one manager applied, another applying it unchanged shares.
    let other = manager("other");
    if let Err(c) = ssa::apply(Some(&once), config, schema, &other, false) {
        panic!("the same values conflict: {}", c.message());
    }
    for entry in once["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
    {
        FieldSet::from_fields_v1(&entry["fieldsV1"]).expect("written FieldsV1 reads");
    }
    // An update recording over the same schema does not panic either.
    let mut updated = once.clone();
    if let Some(meta) = updated.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("labels".into(), json!({"fuzz": "1"}));
    }
    ssa::record_update(Some(&once), &mut updated, schema, &m);
    typed::changed(&once, &updated, schema);
}
