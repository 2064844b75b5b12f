//! Structural OpenAPI v3 schemas of custom resources, as upstream's
//! apiextensions server applies them (`pkg/apiserver/schema`): the
//! structural check a CRD's schema must pass, and for objects: pruning of
//! unknown fields, defaulting, and validation with field paths (types,
//! formats, enum, bounds, lengths, patterns, required, item and property
//! counts, `nullable`, `x-kubernetes-int-or-string`,
//! `x-kubernetes-list-type` `set`/`map` uniqueness) and CEL rules
//! ([`crate::cel`]). Error texts follow
//! upstream's so kubectl prints what users know.

use crate::error::Cause;
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause {
        reason: reason.into(),
        field: field.into(),
        message,
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn json_str(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The structural-schema violations of a CRD version's
/// `openAPIV3Schema` (empty when it is structural), with the field paths
/// upstream reports (`spec.versions[0].schema.openAPIV3Schema.properties[spec].type`).
pub fn structural_errors(schema: &Value, base: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    if !schema.is_object() {
        out.push(cause(
            "FieldValueRequired",
            base,
            "Required value: schemas are required".into(),
        ));
        return out;
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        out.push(cause(
            "FieldValueInvalid",
            &format!("{base}.type"),
            format!(
                "Invalid value: {}: must be object at the root",
                json_str(schema.get("type").unwrap_or(&Value::String(String::new())))
            ),
        ));
    }
    check_node(schema, base, true, &mut out);
    out
}

fn check_node(s: &Value, path: &str, root: bool, out: &mut Vec<Cause>) {
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let ty = s.get("type").and_then(Value::as_str).unwrap_or_default();
    if !root && ty.is_empty() && !int_or_string && !preserve {
        out.push(cause(
            "FieldValueRequired",
            &format!("{path}.type"),
            "Required value: must not be empty for specified object fields".into(),
        ));
    }
    if !ty.is_empty()
        && !matches!(
            ty,
            "object" | "array" | "string" | "integer" | "number" | "boolean"
        )
    {
        out.push(cause(
            "FieldValueNotSupported",
            &format!("{path}.type"),
            format!(
                "Unsupported value: {ty:?}: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
            ),
        ));
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        if ty != "object" && !ty.is_empty() {
            out.push(cause(
                "FieldValueForbidden",
                &format!("{path}.properties"),
                "Forbidden: must not be specified for non-object types".into(),
            ));
        }
        if s.get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(false))
        {
            out.push(cause(
                "FieldValueForbidden",
                &format!("{path}.additionalProperties"),
                "Forbidden: additionalProperties and properties are mutual exclusive".into(),
            ));
        }
        for (k, v) in props {
            check_node(v, &format!("{path}.properties[{k}]"), false, out);
        }
    }
    if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
        check_node(ap, &format!("{path}.additionalProperties"), false, out);
    }
    match (ty, s.get("items")) {
        ("array", None) => out.push(cause(
            "FieldValueRequired",
            &format!("{path}.items"),
            "Required value: must be specified".into(),
        )),
        (_, Some(items)) => check_node(items, &format!("{path}.items"), false, out),
        _ => {}
    }
    for key in [
        "$ref",
        "definitions",
        "dependencies",
        "id",
        "patternProperties",
    ] {
        if s.get(key).is_some() {
            out.push(cause(
                "FieldValueForbidden",
                &format!("{path}.{key}"),
                "Forbidden: must not be specified in a structural schema".into(),
            ));
        }
    }
}

/// Compiled `pattern`s, shared by every schema (patterns repeat across
/// versions and CRDs; compiling one per object would dominate validation).
fn pattern(p: &str) -> Option<Regex> {
    static CACHE: std::sync::OnceLock<Mutex<HashMap<String, Option<Regex>>>> =
        std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().expect("pattern cache");
    map.entry(p.to_string())
        .or_insert_with(|| Regex::new(p).ok())
        .clone()
}

/// A structural schema of one custom resource version.
#[derive(Debug, Clone)]
pub struct Schema(Arc<Value>);

impl Schema {
    pub fn new(schema: Value) -> Self {
        Schema(Arc::new(schema))
    }

    /// A schema over a value shared with others (the resource's published
    /// schema).
    pub fn shared(schema: Arc<Value>) -> Self {
        Schema(schema)
    }

    /// One shared copy per distinct schema: CRD versions (and CRDs) whose
    /// schemas are equal share it. Kept only while some resource holds it.
    pub fn intern(schema: &Value) -> Arc<Value> {
        use std::collections::HashMap;
        use std::sync::{Mutex, OnceLock, Weak};
        static TABLE: OnceLock<Mutex<HashMap<[u8; 32], Weak<Value>>>> = OnceLock::new();
        let key: [u8; 32] = {
            use sha2::Digest;
            sha2::Sha256::digest(serde_json::to_vec(schema).unwrap_or_default()).into()
        };
        let mut table = TABLE
            .get_or_init(Default::default)
            .lock()
            .expect("schema table");
        if let Some(hit) = table.get(&key).and_then(Weak::upgrade) {
            return hit;
        }
        table.retain(|_, w| w.strong_count() > 0);
        let shared = Arc::new(schema.clone());
        table.insert(key, Arc::downgrade(&shared));
        shared
    }

    pub fn raw(&self) -> &Value {
        &self.0
    }

    /// Drops the fields the schema does not know (`metadata` beyond the
    /// object metadata, and `apiVersion`/`kind`, are the store's); returns
    /// their paths.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(map) = obj.as_object_mut() {
            for (k, v) in map.iter_mut() {
                if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(child) = self.0.get("properties").and_then(|p| p.get(k)) {
                    prune_node(child, v, k, &mut out);
                }
            }
            let known = |k: &str| {
                matches!(k, "apiVersion" | "kind" | "metadata")
                    || self.0.get("properties").and_then(|p| p.get(k)).is_some()
            };
            if !flag(&self.0, "x-kubernetes-preserve-unknown-fields") {
                let unknown: Vec<String> = map.keys().filter(|k| !known(k)).cloned().collect();
                for k in unknown {
                    map.remove(&k);
                    out.push(k);
                }
            }
        }
        out
    }

    /// Applies `default`s (missing fields of objects that exist, inside
    /// array items and maps too).
    pub fn default(&self, obj: &mut Value) {
        default_node(&self.0, obj);
    }

    /// Validates an object against the schema and its CEL rules; `old` is
    /// the current object on updates (for transition rules). `apiVersion`,
    /// `kind` and `metadata` are the store's and not checked here.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut out = Vec::new();
        crate::cel::begin_object();
        let empty = Map::new();
        let map = obj.as_object().unwrap_or(&empty);
        let props = self.0.get("properties").and_then(Value::as_object);
        for (k, v) in map {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(child) = props.and_then(|p| p.get(k)) {
                validate_node(child, v, old.and_then(|o| o.get(k)), k, &mut out);
            }
        }
        required(&self.0, map, "", &mut out);
        if out.is_empty() && crate::cel::has_rules(&self.0) {
            crate::cel::check(&self.0, obj, old, "", &mut out);
        }
        out
    }
}

/// Whether `k` is kept without a schema: an embedded resource's
/// `apiVersion`, `kind` and `metadata`.
fn embedded_meta(s: &Value, k: &str) -> bool {
    flag(s, "x-kubernetes-embedded-resource") && matches!(k, "apiVersion" | "kind" | "metadata")
}

fn prune_node(s: &Value, v: &mut Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                let unknown: Vec<String> = map
                    .keys()
                    .filter(|k| !props.contains_key(*k) && !embedded_meta(s, k))
                    .cloned()
                    .collect();
                if !preserve {
                    for k in unknown {
                        map.remove(&k);
                        out.push(join(path, &k));
                    }
                }
                for (k, child) in map.iter_mut() {
                    if let Some(cs) = props.get(k) {
                        prune_node(cs, child, &join(path, k), out);
                    }
                }
            } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, child) in map.iter_mut() {
                    prune_node(ap, child, &join(path, k), out);
                }
            } else if !preserve && s.get("type").and_then(Value::as_str) == Some("object") {
                let unknown: Vec<String> = map
                    .keys()
                    .filter(|k| !embedded_meta(s, k))
                    .cloned()
                    .collect();
                for k in unknown {
                    map.remove(&k);
                    out.push(join(path, &k));
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(is, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn default_node(s: &Value, v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    if !map.contains_key(k)
                        && let Some(d) = ps.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                }
                for (k, child) in map.iter_mut() {
                    if let Some(ps) = props.get(k) {
                        default_node(ps, child);
                    }
                }
            } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for child in map.values_mut() {
                    default_node(ap, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for item in items {
                    default_node(is, item);
                }
            }
        }
        _ => {}
    }
}

fn required(s: &Value, map: &Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    for r in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(r) {
            out.push(cause(
                "FieldValueRequired",
                &join(path, r),
                "Required value".into(),
            ));
        }
    }
}

fn validate_node(s: &Value, v: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    let before = out.len();
    validate_value(s, v, old, path, out);
    // As upstream: CEL rules run on values that passed the schema.
    if out.len() == before && crate::cel::has_rules(s) {
        crate::cel::check(s, v, old, path, out);
    }
}

fn validate_value(s: &Value, v: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    if v.is_null() {
        if !flag(s, "nullable") && s.get("type").is_some() {
            out.push(cause(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                    s["type"].as_str().unwrap_or_default()
                ),
            ));
        }
        return;
    }
    let ty = s.get("type").and_then(Value::as_str).unwrap_or_default();
    if flag(s, "x-kubernetes-int-or-string") {
        if !matches!(crate::cel::type_word(v), "integer" | "string") {
            out.push(cause(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: {}: {path} in body must be of type integer,string: {:?}",
                    json_str(v),
                    crate::cel::type_word(v)
                ),
            ));
        }
        return;
    }
    let actual = crate::cel::type_word(v);
    let ok = match ty {
        "" => true,
        "number" => matches!(actual, "number" | "integer"),
        t => t == actual,
    };
    if !ok {
        out.push(cause(
            "FieldValueTypeInvalid",
            path,
            format!(
                "Invalid value: {:?}: {path} in body must be of type {ty}: {:?}",
                actual, actual
            ),
        ));
        return;
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array)
        && !values.contains(v)
    {
        let supported: Vec<String> = values.iter().map(json_str).collect();
        out.push(cause(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                json_str(v),
                supported.join(", ")
            ),
        ));
    }
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            let shown = v.to_string();
            if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
                let exclusive = flag(s, "exclusiveMinimum");
                if x < min || (exclusive && x == min) {
                    out.push(cause(
                        "FieldValueInvalid",
                        path,
                        format!(
                            "Invalid value: {shown}: {path} in body should be greater than {}{}",
                            if exclusive { "" } else { "or equal to " },
                            s["minimum"]
                        ),
                    ));
                }
            }
            if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
                let exclusive = flag(s, "exclusiveMaximum");
                if x > max || (exclusive && x == max) {
                    out.push(cause(
                        "FieldValueInvalid",
                        path,
                        format!(
                            "Invalid value: {shown}: {path} in body should be less than {}{}",
                            if exclusive { "" } else { "or equal to " },
                            s["maximum"]
                        ),
                    ));
                }
            }
            if let Some(m) = s.get("multipleOf").and_then(Value::as_f64)
                && m > 0.0
                && (x / m).fract() != 0.0
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {shown}: {path} in body should be a multiple of {}",
                        s["multipleOf"]
                    ),
                ));
            }
            if let Some(f) = s.get("format").and_then(Value::as_str) {
                let bad = match f {
                    "int32" => n.as_i64().is_none_or(|i| i32::try_from(i).is_err()),
                    _ => false,
                };
                if bad {
                    out.push(cause(
                        "FieldValueInvalid",
                        path,
                        format!(
                            "Invalid value: {shown}: {path} in body must be of type {f}: {shown:?}"
                        ),
                    ));
                }
            }
        }
        Value::String(text) => {
            let len = text.chars().count() as u64;
            if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                out.push(cause(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = s.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {text:?}: {path} in body should be at least {min} chars long"
                    ),
                ));
            }
            if let Some(p) = s.get("pattern").and_then(Value::as_str)
                && pattern(p).is_some_and(|re| !re.is_match(text))
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!("Invalid value: {text:?}: {path} in body should match '{p}'"),
                ));
            }
            if let Some(f) = s.get("format").and_then(Value::as_str)
                && !format_ok(f, text)
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {text:?}: {path} in body must be of type {f}: {text:?}"
                    ),
                ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                out.push(cause(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {n}: must have at most {max} items"),
                ));
            }
            if let Some(min) = s.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!("Invalid value: {n}: {path} in body should have at least {min} items"),
                ));
            }
            list_type(s, items, path, out);
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_node(is, item, None, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            let n = map.len() as u64;
            if let Some(max) = s.get("maxProperties").and_then(Value::as_u64)
                && n > max
            {
                out.push(cause(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {n}: must have at most {max} items"),
                ));
            }
            if let Some(min) = s.get("minProperties").and_then(Value::as_u64)
                && n < min
            {
                out.push(cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {n}: {path} in body should have at least {min} properties"
                    ),
                ));
            }
            required(s, map, path, out);
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in map {
                let cs = props.and_then(|p| p.get(k)).or(additional);
                if let Some(cs) = cs {
                    validate_node(cs, child, old.and_then(|o| o.get(k)), &join(path, k), out);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

fn list_type(s: &Value, items: &[Value], path: &str, out: &mut Vec<Cause>) {
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    out.push(cause(
                        "FieldValueDuplicate",
                        &format!("{path}[{i}]"),
                        format!("Duplicate value: {}", json_str(item)),
                    ));
                }
            }
        }
        Some("map") => {
            let keys: Vec<&str> = s
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let key_of = |item: &Value| -> Vec<Value> {
                keys.iter()
                    .map(|k| item.get(*k).cloned().unwrap_or(Value::Null))
                    .collect()
            };
            for (i, item) in items.iter().enumerate() {
                let k = key_of(item);
                if items[..i].iter().any(|o| key_of(o) == k) {
                    let shown: Map<String, Value> = keys
                        .iter()
                        .zip(k.iter())
                        .map(|(name, v)| (name.to_string(), v.clone()))
                        .collect();
                    out.push(cause(
                        "FieldValueDuplicate",
                        &format!("{path}[{i}]"),
                        format!("Duplicate value: {}", Value::Object(shown)),
                    ));
                }
            }
        }
        _ => {}
    }
}

fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "uuid" => uuid::Uuid::parse_str(s).is_ok(),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "int-or-string" | "" => true,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn widget() -> Schema {
        Schema::new(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "maxItems": 3},
                        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                                  "items": {"type": "object", "properties": {"port": {"type": "integer"}, "proto": {"type": "string", "default": "TCP"}}}},
                        "port": {"x-kubernetes-int-or-string": true},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "note": {"type": "string", "nullable": true},
                    }
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        }))
    }

    #[test]
    fn validation_reports_field_paths_like_upstream() {
        let s = widget();
        let ok = json!({"spec": {"size": 3, "color": "blue", "port": "http", "note": null, "tags": ["a"]}});
        assert!(
            s.validate(&ok, None).is_empty(),
            "{:?}",
            s.validate(&ok, None)
        );
        let bad = json!({"spec": {"size": 11, "color": "green", "name": "Bad1", "tags": ["a", "a"],
                                  "ports": [{"port": 80}, {"port": 80}], "port": true,
                                  "labels": {"x": 1}}});
        let causes = s.validate(&bad, None);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        for want in [
            "spec.size",
            "spec.color",
            "spec.name",
            "spec.tags[1]",
            "spec.ports[1]",
            "spec.port",
            "spec.labels.x",
        ] {
            assert!(fields.contains(&want), "{want} missing from {causes:?}");
        }
        let size = causes.iter().find(|c| c.field == "spec.size").unwrap();
        assert_eq!(
            size.message,
            "Invalid value: 11: spec.size in body should be less than or equal to 10"
        );
        let color = causes.iter().find(|c| c.field == "spec.color").unwrap();
        assert_eq!(color.reason, "FieldValueNotSupported");
        let missing = s.validate(&json!({"spec": {}}), None);
        assert_eq!(missing[0].field, "spec.size");
        assert_eq!(missing[0].reason, "FieldValueRequired");
        let typed = s.validate(&json!({"spec": {"size": "3"}}), None);
        assert_eq!(
            typed[0].message,
            "Invalid value: \"string\": spec.size in body must be of type integer: \"string\""
        );
    }

    #[test]
    fn pruning_and_defaulting() {
        let s = widget();
        let mut obj = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
                             "spec": {"size": 1, "extra": 1, "free": {"any": {"thing": 1}},
                                      "ports": [{"port": 1, "junk": true}]},
                             "top": 1});
        let mut pruned = s.prune(&mut obj);
        pruned.sort();
        assert_eq!(pruned, vec!["spec.extra", "spec.ports[0].junk", "top"]);
        assert_eq!(obj["spec"]["free"]["any"]["thing"], 1);
        s.default(&mut obj);
        assert_eq!(obj["spec"]["color"], "red");
        assert_eq!(obj["spec"]["ports"][0]["proto"], "TCP");
        assert_eq!(obj["metadata"]["name"], "w");
    }

    #[test]
    fn structural_schemas_are_enforced() {
        let base = "spec.versions[0].schema.openAPIV3Schema";
        assert!(structural_errors(&widget().raw().clone(), base).is_empty());
        let bad = json!({"type": "object", "properties": {"spec": {"properties": {"x": {"type": "string"}}},
                          "list": {"type": "array"}}});
        let errs = structural_errors(&bad, base);
        let fields: Vec<&str> = errs.iter().map(|c| c.field.as_str()).collect();
        assert!(
            fields.contains(&"spec.versions[0].schema.openAPIV3Schema.properties[spec].type"),
            "{errs:?}"
        );
        assert!(
            fields.contains(&"spec.versions[0].schema.openAPIV3Schema.properties[list].items"),
            "{errs:?}"
        );
    }
}
