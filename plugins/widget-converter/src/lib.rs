//! `widget-converter`: a resource handler for a `Widget` custom resource
//! served in two versions, showing what a conversion webhook does, in
//! process:
//!
//! * `v1alpha1` is flat: `spec: {size, color, legacyId}`;
//! * `v1` is nested: `spec: {dimensions: {size}, appearance: {color, finish}}`.
//!
//! Conversion is lossless both ways, as upstream's guidance for conversion
//! webhooks asks: what the other version cannot hold (`v1`'s `finish`,
//! `v1alpha1`'s `legacyId`) travels in an annotation
//! (`<group>/v1-finish`, `<group>/v1alpha1-legacy-id`) and is restored, and
//! the annotation removed, on the way back. Everything but `spec` (status,
//! metadata) is carried unchanged.
//!
//! Beyond the schema, `default` sets the label `<group>/size-class`
//! (`small` below 10, else `large`), and `validate` insists that the size is
//! a multiple of `sizeStep`. Configuration (JSON, optional):
//! `{"sizeStep": 2}` (default 1).

use serde::Deserialize;
use serde_json::{Map, Value, json};

wit_bindgen::generate!({
    path: "../../wit",
    world: "resource-handler-plugin",
});

use exports::wasm_apiserver::plugin::resource_handler::{ConversionRequest, Guest, ObjectRequest};
use wasm_apiserver::plugin::types::FieldCause;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default)]
    size_step: Option<u64>,
}

fn config(text: &str) -> Result<Config, String> {
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    let c: Config = serde_json::from_str(text).map_err(|e| format!("configuration: {e}"))?;
    if c.size_step == Some(0) {
        return Err("configuration: sizeStep must be positive".to_owned());
    }
    Ok(c)
}

/// `(group, version)` of an `apiVersion`.
fn split(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

fn annotations(obj: &mut Value) -> &mut Map<String, Value> {
    let meta = obj
        .as_object_mut()
        .expect("an object")
        .entry("metadata")
        .or_insert_with(|| json!({}));
    meta.as_object_mut()
        .expect("metadata is an object")
        .entry("annotations")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("annotations are an object")
}

/// Takes (removes) an annotation.
fn take_annotation(obj: &mut Value, key: &str) -> Option<Value> {
    let taken = annotations(obj).remove(key);
    drop_empty_annotations(obj);
    taken
}

fn drop_empty_annotations(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
}

/// Sets `map[key] = value` unless the value is absent.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value.filter(|v| !v.is_null()) {
        map.insert(key.to_owned(), v);
    }
}

fn to_v1(mut obj: Value, group: &str) -> Value {
    let spec = obj
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .map(std::mem::take)
        .unwrap_or_default();
    let mut dimensions = Map::new();
    put(&mut dimensions, "size", spec.get("size").cloned());
    let mut appearance = Map::new();
    put(&mut appearance, "color", spec.get("color").cloned());
    put(
        &mut appearance,
        "finish",
        take_annotation(&mut obj, &format!("{group}/v1-finish")),
    );
    if let Some(id) = spec.get("legacyId") {
        annotations(&mut obj).insert(format!("{group}/v1alpha1-legacy-id"), id.clone());
    }
    let mut nested = Map::new();
    if !dimensions.is_empty() {
        nested.insert("dimensions".into(), dimensions.into());
    }
    if !appearance.is_empty() {
        nested.insert("appearance".into(), appearance.into());
    }
    obj["spec"] = nested.into();
    obj
}

fn to_v1alpha1(mut obj: Value, group: &str) -> Value {
    let spec = obj.get("spec").cloned().unwrap_or_default();
    let mut flat = Map::new();
    put(&mut flat, "size", spec.pointer("/dimensions/size").cloned());
    put(
        &mut flat,
        "color",
        spec.pointer("/appearance/color").cloned(),
    );
    put(
        &mut flat,
        "legacyId",
        take_annotation(&mut obj, &format!("{group}/v1alpha1-legacy-id")),
    );
    if let Some(finish) = spec.pointer("/appearance/finish") {
        annotations(&mut obj).insert(format!("{group}/v1-finish"), finish.clone());
    }
    obj["spec"] = flat.into();
    obj
}

fn convert_one(text: &str, desired: &str) -> Result<String, String> {
    let obj: Value = serde_json::from_str(text).map_err(|e| format!("object is not JSON: {e}"))?;
    let from = obj["apiVersion"].as_str().unwrap_or_default().to_owned();
    let (group, from_version) = split(&from);
    let (_, to_version) = split(desired);
    let mut converted = match (from_version, to_version) {
        (a, b) if a == b => obj,
        ("v1alpha1", "v1") => to_v1(obj, group),
        ("v1", "v1alpha1") => to_v1alpha1(obj, group),
        (a, b) => return Err(format!("cannot convert a Widget from {a} to {b}")),
    };
    converted["apiVersion"] = desired.into();
    Ok(converted.to_string())
}

/// The size field and its path, in the object's version.
fn size(obj: &Value) -> (Option<u64>, &'static str) {
    match split(obj["apiVersion"].as_str().unwrap_or_default()).1 {
        "v1alpha1" => (
            obj.pointer("/spec/size").and_then(Value::as_u64),
            "spec.size",
        ),
        _ => (
            obj.pointer("/spec/dimensions/size").and_then(Value::as_u64),
            "spec.dimensions.size",
        ),
    }
}

struct Handler;

impl Guest for Handler {
    fn check_config(text: String) -> Result<(), String> {
        config(&text).map(|_| ())
    }

    fn convert(_config: String, request: ConversionRequest) -> Result<Vec<String>, String> {
        request
            .objects
            .iter()
            .map(|o| convert_one(o, &request.desired_api_version))
            .collect()
    }

    fn default(_config: String, request: ObjectRequest) -> Result<Option<String>, String> {
        let mut obj: Value =
            serde_json::from_str(&request.object).map_err(|e| format!("object: {e}"))?;
        let Some(size) = size(&obj).0 else {
            return Ok(None);
        };
        let class = if size < 10 { "small" } else { "large" };
        let key = format!("{}/size-class", request.kind.group);
        if obj.pointer(&format!("/metadata/labels/{}", key.replace('/', "~1")))
            == Some(&json!(class))
        {
            return Ok(None);
        }
        let meta = obj["metadata"].as_object_mut().ok_or("no metadata")?;
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        labels[&key] = json!(class);
        Ok(Some(obj.to_string()))
    }

    fn validate(text: String, request: ObjectRequest) -> Vec<FieldCause> {
        let step = config(&text).ok().and_then(|c| c.size_step).unwrap_or(1);
        let Ok(obj) = serde_json::from_str::<Value>(&request.object) else {
            return Vec::new();
        };
        match size(&obj) {
            (Some(n), field) if n % step != 0 => vec![FieldCause {
                field: field.to_owned(),
                reason: "FieldValueInvalid".to_owned(),
                message: format!("Invalid value: {n}: must be a multiple of {step}"),
            }],
            _ => Vec::new(),
        }
    }
}

export!(Handler);

#[cfg(test)]
mod tests {
    use super::convert_one;
    use serde_json::{Value, json};

    fn convert(obj: &Value, to: &str) -> Value {
        serde_json::from_str(&convert_one(&obj.to_string(), to).unwrap()).unwrap()
    }

    #[test]
    fn round_trips_are_lossless() {
        let alpha = json!({"apiVersion": "example.com/v1alpha1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"a": "b"}},
            "spec": {"size": 4, "color": "red", "legacyId": "L-1"}, "status": {"ready": true}});
        let v1 = convert(&alpha, "example.com/v1");
        assert_eq!(
            v1["spec"],
            json!({"dimensions": {"size": 4}, "appearance": {"color": "red"}})
        );
        assert_eq!(
            v1["metadata"]["annotations"]["example.com/v1alpha1-legacy-id"],
            "L-1"
        );
        assert_eq!(convert(&v1, "example.com/v1alpha1"), alpha);

        let one = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"dimensions": {"size": 2}, "appearance": {"color": "blue", "finish": "matte"}}});
        let flat = convert(&one, "example.com/v1alpha1");
        assert_eq!(flat["spec"], json!({"size": 2, "color": "blue"}));
        assert_eq!(
            flat["metadata"]["annotations"]["example.com/v1-finish"],
            "matte"
        );
        assert_eq!(convert(&flat, "example.com/v1"), one);
    }
}
