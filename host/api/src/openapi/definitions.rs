//! The OpenAPI definitions of the built-in kinds.
//!
//! Where each piece comes from:
//! - the schemas (properties, types, formats, descriptions) are
//!   k8s-openapi's `JsonSchema` implementations (its `schemars` feature),
//!   generated from upstream's own OpenAPI document;
//! - the `x-kubernetes-patch-merge-key`, `-patch-strategy`, `-list-type`,
//!   `-list-map-keys` and `-map-type` extensions, which k8s-openapi does not
//!   carry, come from `generated/extensions.json`: the `+patchMergeKey`,
//!   `+listType`... markers of upstream's 1.33 API packages, extracted by
//!   `scripts/gen-api-tables.py` (they are what upstream's openapi-gen turns
//!   into the same extensions). kubectl computes strategic merge patches from
//!   them (containers merged by `name`), and server-side apply merges by them;
//! - `x-kubernetes-group-version-kind` from the registry.
//!
//! They are built once per process, in the v2 form (`#/definitions/...`
//! references); [`v3_schema`] rewrites a definition for `/openapi/v3`.

use crate::resource::{Registry, ResourceInfo};
use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::LazyLock;

const EXTENSIONS: &str = include_str!("../generated/extensions.json");
const V2_PREFIX: &str = "#/definitions/";
const V3_PREFIX: &str = "#/components/schemas/";

static BUILTIN: LazyLock<Map<String, Value>> = LazyLock::new(build);

/// Every definition the built-in kinds use, by name.
pub fn builtin() -> &'static Map<String, Value> {
    &BUILTIN
}

/// The definition name of a built-in kind, if it has a k8s-openapi type.
pub fn builtin_name(info: &ResourceInfo) -> Option<String> {
    info.type_schema.map(|t| (t.name)().into_owned())
}

fn build() -> Map<String, Value> {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = V2_PREFIX.trim_start_matches('#').into();
            s.meta_schema = None;
        })
        .into_generator();
    let registry = Registry::builtin();
    let typed: Vec<&ResourceInfo> = registry.all().filter(|i| i.type_schema.is_some()).collect();
    for info in &typed {
        (info.type_schema.expect("typed").write)(&mut generator);
    }
    let mut defs = generator.take_definitions(false);
    let extensions: Map<String, Value> =
        serde_json::from_str(EXTENSIONS).expect("generated extensions");
    for (name, props) in extensions {
        let Some(def) = defs.get_mut(&name).and_then(Value::as_object_mut) else {
            continue;
        };
        for (prop, ext) in props.as_object().into_iter().flatten() {
            let target = if prop.is_empty() {
                Some(&mut *def)
            } else {
                def.get_mut("properties")
                    .and_then(|p| p.get_mut(prop))
                    .and_then(Value::as_object_mut)
            };
            if let (Some(target), Some(ext)) = (target, ext.as_object()) {
                target.extend(ext.clone());
            }
        }
    }
    for info in typed {
        let name = builtin_name(info).expect("typed");
        if let Some(def) = defs.get_mut(&name).and_then(Value::as_object_mut) {
            let gvks = def
                .entry("x-kubernetes-group-version-kind")
                .or_insert_with(|| json!([]));
            if let Some(list) = gvks.as_array_mut() {
                list.push(json!({"group": info.group, "version": info.version, "kind": info.kind}));
            }
        }
    }
    defs
}

/// The names of `roots` and every definition they refer to, transitively.
pub fn closure<'a>(roots: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = roots.into_iter().map(str::to_string).collect();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(def) = BUILTIN.get(&name) {
            refs(def, &mut |r| {
                if !seen.contains(r) {
                    todo.push(r.to_string());
                }
            });
        }
    }
    seen
}

fn refs(v: &Value, f: &mut impl FnMut(&str)) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                f(r.trim_start_matches(V2_PREFIX));
            }
            m.values().for_each(|v| refs(v, f));
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, f)),
        _ => {}
    }
}

/// A v2 definition in its `/openapi/v3` form: references under
/// `#/components/schemas/`, and a reference with siblings (a description)
/// wrapped in `allOf`, as upstream publishes them (OpenAPI 3.0 ignores a
/// `$ref`'s siblings).
pub fn v3_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                let target = json!({"$ref": r.replacen(V2_PREFIX, V3_PREFIX, 1)});
                if m.len() == 1 {
                    return target;
                }
                let mut out: Map<String, Value> = m
                    .iter()
                    .filter(|(k, _)| *k != "$ref")
                    .map(|(k, v)| (k.clone(), v3_schema(v)))
                    .collect();
                out.insert("allOf".into(), json!([target]));
                return Value::Object(out);
            }
            Value::Object(m.iter().map(|(k, v)| (k.clone(), v3_schema(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(v3_schema).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_merge_by_name_and_kinds_carry_their_gvk() {
        let defs = builtin();
        let pod_spec = &defs["io.k8s.api.core.v1.PodSpec"];
        let containers = &pod_spec["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        assert_eq!(
            containers["items"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.Container"
        );
        let ports = &defs["io.k8s.api.core.v1.Container"]["properties"]["ports"];
        assert_eq!(
            ports["x-kubernetes-list-map-keys"],
            json!(["containerPort", "protocol"])
        );
        assert_eq!(
            defs["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        assert!(defs["io.k8s.api.apps.v1.Deployment"]["description"].is_string());
        // Every reference resolves.
        for name in closure(defs.keys().map(String::as_str)) {
            assert!(
                defs.contains_key(&name),
                "{name} is referred to but missing"
            );
        }
    }

    #[test]
    fn v3_wraps_described_references() {
        let v3 = v3_schema(&builtin()["io.k8s.api.apps.v1.Deployment"]);
        let meta = &v3["properties"]["metadata"];
        assert_eq!(
            meta["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert!(meta["description"].is_string());
        let reach = closure(["io.k8s.api.apps.v1.Deployment"]);
        assert!(reach.contains("io.k8s.api.core.v1.Container"));
        assert!(!reach.contains("io.k8s.api.batch.v1.Job"));
    }
}
