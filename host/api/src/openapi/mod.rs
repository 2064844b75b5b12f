//! The OpenAPI documents (`/openapi/v2`, `/openapi/v3/<group-version>`),
//! derived from the registry.
//!
//! kubectl reads them for whether a resource's PATCH accepts the
//! `fieldValidation` query parameter (then it validates on the server),
//! for `kubectl explain`, and for the patch strategies and merge keys of
//! client-side apply, found through each definition's
//! `x-kubernetes-group-version-kind`. Built-in kinds publish their full
//! schemas ([`definitions`]); a custom resource publishes its CRD's schema;
//! the server's own kinds publish an open object (in v2 only, so kubectl
//! falls back to JSON merge patches for them).

pub mod definitions;
pub mod proto;

use crate::resource::{Registry, ResourceInfo};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The definition name kubectl looks up, e.g. `io.k8s.api.core.v1.ConfigMap`
/// (a custom resource's is its group reversed, `com.example.v1.Widget`, as
/// upstream names them).
pub fn definition_name(info: &ResourceInfo) -> String {
    if let Some(name) = definitions::builtin_name(info) {
        return name;
    }
    if info.schema.is_some() {
        let reversed: Vec<&str> = info.group.split('.').rev().collect();
        return format!("{}.{}.{}", reversed.join("."), info.version, info.kind);
    }
    let group = if info.group.is_empty() {
        "core"
    } else {
        info.group.split('.').next().unwrap_or("")
    };
    format!("io.k8s.api.{group}.{}.{}", info.version, info.kind)
}

fn gvk(info: &ResourceInfo) -> Value {
    json!({"group": info.group, "version": info.version, "kind": info.kind})
}

const GVK: &str = "x-kubernetes-group-version-kind";

/// A kind's published schema: a custom resource's own (with `apiVersion`,
/// `kind` and `metadata` added, and its GVK so `kubectl explain` finds it),
/// else an open object. Serialized straight from the shared schema: a
/// thousand CRDs' schemas are never cloned to build a document.
struct KindSchema<'a> {
    info: &'a ResourceInfo,
    with_gvk: bool,
}

impl Serialize for KindSchema<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let info = self.info;
        let description = format!("{} is a {} object.", info.kind, info.api_version());
        let mut map = ser.serialize_map(None)?;
        let Some(schema) = &info.schema else {
            map.serialize_entry("description", &description)?;
            map.serialize_entry("type", "object")?;
            if self.with_gvk {
                map.serialize_entry(GVK, &[gvk(info)])?;
            }
            return map.end();
        };
        let empty = Map::new();
        let fields = schema.as_object().unwrap_or(&empty);
        if !schema.is_object() {
            map.serialize_entry("type", "object")?;
        }
        for (k, v) in fields {
            match k.as_str() {
                GVK => {}
                "properties" => map.serialize_entry(k, &Properties(v))?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        if !fields.contains_key("description") {
            map.serialize_entry("description", &description)?;
        }
        if !fields.contains_key("properties") {
            map.serialize_entry("properties", &Properties(&Value::Object(Map::new())))?;
        }
        map.serialize_entry(GVK, &[gvk(info)])?;
        map.end()
    }
}

/// A custom resource's `properties`, with `apiVersion`, `kind` and
/// `metadata` where the schema leaves them out.
struct Properties<'a>(&'a Value);

impl Serialize for Properties<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let Some(props) = self.0.as_object() else {
            return self.0.serialize(ser);
        };
        let mut map = ser.serialize_map(None)?;
        for (k, v) in props {
            map.serialize_entry(k, v)?;
        }
        let standard = [
            (
                "apiVersion",
                json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
            ),
            (
                "kind",
                json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
            ),
            (
                "metadata",
                json!({"type": "object", "description": "Standard object's metadata."}),
            ),
        ];
        for (k, v) in standard {
            if !props.contains_key(k) {
                map.serialize_entry(k, &v)?;
            }
        }
        map.end()
    }
}

/// A definition of a document: a built-in one, or a kind's.
enum Definition<'a> {
    Builtin(&'a Value),
    Converted(Value),
    Kind(KindSchema<'a>),
}

impl Serialize for Definition<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        match self {
            Definition::Builtin(v) => v.serialize(ser),
            Definition::Converted(v) => v.serialize(ser),
            Definition::Kind(k) => k.serialize(ser),
        }
    }
}

/// Serializes `doc` as JSON with `definitions` added under `definitions`
/// (v2) or `components.schemas` (v3).
fn write(doc: Map<String, Value>, v3: bool, definitions: BTreeMap<String, Definition>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Components<'a> {
        schemas: &'a BTreeMap<String, Definition<'a>>,
    }
    #[derive(Serialize)]
    struct Doc<'a> {
        #[serde(flatten)]
        doc: Map<String, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        definitions: Option<&'a BTreeMap<String, Definition<'a>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        components: Option<Components<'a>>,
    }
    let doc = Doc {
        doc,
        definitions: (!v3).then_some(&definitions),
        components: v3.then_some(Components {
            schemas: &definitions,
        }),
    };
    serde_json::to_vec(&doc).expect("JSON")
}

fn param(name: &str) -> Value {
    json!({"name": name, "in": "query", "type": "string", "uniqueItems": true})
}

fn operation(info: &ResourceInfo, action: &str, extra: &[&str]) -> Value {
    let mut params: Vec<Value> = ["dryRun", "fieldManager"]
        .iter()
        .map(|p| param(p))
        .collect();
    params.extend(extra.iter().map(|p| param(p)));
    json!({
        "operationId": format!("{action}{}", info.kind),
        "consumes": ["*/*"],
        "produces": ["application/json"],
        "parameters": params,
        "responses": {"200": {"description": "OK", "schema": {"$ref": format!("#/definitions/{}", definition_name(info))}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(info),
    })
}

fn base_path(info: &ResourceInfo, namespaced_path: bool) -> String {
    let prefix = if info.group.is_empty() {
        "/api/v1".to_string()
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    };
    if namespaced_path {
        format!("{prefix}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{prefix}/{}", info.plural)
    }
}

/// The swagger 2.0 document (JSON) of every resource in the registry.
pub fn openapi_v2(registry: &Registry, version: &str) -> Vec<u8> {
    let mut paths = Map::new();
    let mut definitions: BTreeMap<String, Definition> = definitions::builtin()
        .iter()
        .map(|(k, v)| (k.clone(), Definition::Builtin(v)))
        .collect();
    for info in registry.all() {
        insert_paths(&mut paths, info, operation);
        if info.type_schema.is_none() {
            let kind = KindSchema {
                info,
                with_gvk: true,
            };
            definitions.insert(definition_name(info), Definition::Kind(kind));
        }
    }
    let doc = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths,
    });
    write(into_map(doc), false, definitions)
}

fn into_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The group-version paths of `/openapi/v3` (`api/v1`, `apis/<g>/<v>`).
pub fn v3_group_versions(registry: &Registry) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    // `all` is in group/version order: a group version's resources are
    // consecutive.
    for r in registry.all() {
        if out
            .last()
            .is_some_and(|(_, g, v)| *g == r.group && *v == r.version)
        {
            continue;
        }
        let path = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        out.push((path, r.group.clone(), r.version.clone()));
    }
    out
}

/// The group and version of an `/openapi/v3` path (`api/v1`,
/// `apis/<group>/<version>`), when it names one the registry serves.
pub fn v3_group_version<'a>(registry: &Registry, path: &'a str) -> Option<(&'a str, &'a str)> {
    let (group, version) = match path.split('/').collect::<Vec<_>>()[..] {
        ["api", version] => ("", version),
        ["apis", group, version] if !group.is_empty() => (group, version),
        _ => return None,
    };
    registry
        .in_group_version(group, version)
        .next()
        .map(|_| (group, version))
}

/// The `hash` of a group version's `/openapi/v3` URL: changes whenever
/// its document does, without building it (the index lists every group
/// version, and with a thousand CRDs building them all takes seconds).
pub fn v3_hash(registry: &Registry, group: &str, version: &str, server_version: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (server_version, env!("CARGO_PKG_VERSION")).hash(&mut h);
    for info in registry.in_group_version(group, version) {
        h.write_u64(*info.openapi_digest.get_or_init(|| digest(info)));
    }
    format!("{:016X}", h.finish())
}

/// What of `info` its OpenAPI definition and paths are made of.
fn digest(info: &ResourceInfo) -> u64 {
    use std::hash::{Hash, Hasher};
    struct Writer(std::collections::hash_map::DefaultHasher);
    impl std::io::Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = Writer(Default::default());
    let i = info;
    (&i.group, &i.version, &i.plural, &i.kind, i.namespaced).hash(&mut w.0);
    definitions::builtin_name(info).hash(&mut w.0);
    if let Some(schema) = &info.schema {
        serde_json::to_writer(&mut w, &**schema).expect("hashing cannot fail");
    }
    w.0.finish()
}

/// The collection's and the item's paths of `info`, with `op`'s
/// operation for each verb (the query parameters kubectl probes for).
fn insert_paths(
    paths: &mut Map<String, Value>,
    info: &ResourceInfo,
    op: fn(&ResourceInfo, &str, &[&str]) -> Value,
) {
    let collection = base_path(info, info.namespaced);
    paths.insert(
        collection.clone(),
        json!({
            "get": op(info, "list", &[]),
            "post": op(info, "post", &["fieldValidation"]),
            "delete": op(info, "deletecollection", &[]),
        }),
    );
    paths.insert(
        format!("{collection}/{{name}}"),
        json!({
            "get": op(info, "get", &[]),
            "put": op(info, "put", &["fieldValidation"]),
            "patch": op(info, "patch", &["fieldValidation", "force"]),
            "delete": op(info, "delete", &[]),
        }),
    );
}

fn v3_operation(info: &ResourceInfo, action: &str, extra: &[&str]) -> Value {
    let params: Vec<Value> = ["dryRun", "fieldManager"]
        .iter()
        .chain(extra)
        .map(|p| {
            let ty = if *p == "force" { "boolean" } else { "string" };
            json!({"name": p, "in": "query", "schema": {"type": ty, "uniqueItems": true}})
        })
        .collect();
    json!({
        "operationId": format!("{action}{}", info.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", definition_name(info))}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(info),
    })
}

/// The OpenAPI v3 document (JSON) of one group version: its kinds'
/// definitions and every definition they refer to. Operations declare the
/// parameters kubectl probes for (`fieldValidation`).
pub fn openapi_v3(
    registry: &Registry,
    group: &str,
    version: &str,
    server_version: &str,
) -> Vec<u8> {
    let mut paths = Map::new();
    let mut schemas = BTreeMap::new();
    let typed: Vec<String> = registry
        .in_group_version(group, version)
        .filter_map(definitions::builtin_name)
        .collect();
    for name in definitions::closure(typed.iter().map(String::as_str)) {
        if let Some(def) = definitions::builtin().get(&name) {
            schemas.insert(name, Definition::Converted(definitions::v3_schema(def)));
        }
    }
    for info in registry.in_group_version(group, version) {
        insert_paths(&mut paths, info, v3_operation);
        if info.type_schema.is_none() {
            let kind = KindSchema {
                info,
                with_gvk: false,
            };
            schemas.insert(definition_name(info), Definition::Kind(kind));
        }
    }
    let doc = json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": paths,
    });
    write(into_map(doc), true, schemas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_declares_field_validation() {
        let doc: Value =
            serde_json::from_slice(&openapi_v2(&Registry::builtin(), "v1.33.0")).unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(doc["paths"].get("/api/v1/namespaces/{name}").is_some());
        assert!(
            doc["definitions"]
                .get("io.k8s.api.coordination.v1.Lease")
                .is_some()
        );
    }

    #[test]
    fn v3_per_group_version() {
        let r = Registry::builtin();
        let gvs = v3_group_versions(&r);
        assert_eq!(gvs[0].0, "api/v1");
        assert!(
            gvs.iter()
                .any(|(p, _, _)| p == "apis/coordination.k8s.io/v1")
        );
        let doc: Value = serde_json::from_slice(&openapi_v3(&r, "", "v1", "v1.33.0")).unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/secrets/{name}"]["patch"];
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(
            doc["paths"]
                .get("/apis/coordination.k8s.io/v1/leases")
                .is_none()
        );
    }

    fn widget(schema: Value) -> ResourceInfo {
        let mut info = ResourceInfo::new("example.com", "v1", "widgets", "Widget", true);
        info.schema = Some(std::sync::Arc::new(schema));
        info
    }

    #[test]
    fn custom_schema_published_with_standard_fields() {
        let mut r = Registry::builtin();
        r.insert(widget(json!({
            "type": "object",
            "properties": {"spec": {"type": "object"}, "kind": {"type": "string", "enum": ["Widget"]}},
        })));
        let doc: Value =
            serde_json::from_slice(&openapi_v3(&r, "example.com", "v1", "v1.33.0")).unwrap();
        let s = &doc["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(s["type"], "object");
        assert_eq!(s["description"], "Widget is a example.com/v1 object.");
        assert_eq!(s["properties"]["spec"]["type"], "object");
        // The schema's own `kind` wins; the missing ones are added.
        assert_eq!(s["properties"]["kind"]["enum"][0], "Widget");
        assert_eq!(s["properties"]["apiVersion"]["type"], "string");
        assert_eq!(s["properties"]["metadata"]["type"], "object");
        assert_eq!(s[GVK][0]["kind"], "Widget");
        let v2: Value = serde_json::from_slice(&openapi_v2(&r, "v1.33.0")).unwrap();
        assert_eq!(
            v2["definitions"]["com.example.v1.Widget"]["properties"],
            s["properties"]
        );
        assert!(
            v2["definitions"]
                .get("io.k8s.api.core.v1.ConfigMap")
                .is_some()
        );
    }

    #[test]
    fn v3_hash_follows_the_group_version_content() {
        let mut r = Registry::builtin();
        r.insert(widget(json!({"type": "object"})));
        let before = v3_hash(&r, "example.com", "v1", "v1.33.0");
        let core = v3_hash(&r, "", "v1", "v1.33.0");
        assert_eq!(before, v3_hash(&r, "example.com", "v1", "v1.33.0"));
        r.insert(widget(
            json!({"type": "object", "properties": {"spec": {"type": "string"}}}),
        ));
        let after = v3_hash(&r, "example.com", "v1", "v1.33.0");
        assert_ne!(before, after);
        assert_eq!(core, v3_hash(&r, "", "v1", "v1.33.0"));
        // A copy of an info whose digest is known, then changed, is digested
        // anew.
        let original = widget(json!({"type": "object"}));
        original.openapi_digest.get_or_init(|| digest(&original));
        let mut changed = original.clone();
        changed.schema = Some(std::sync::Arc::new(json!({"type": "string"})));
        let (mut copied, mut fresh) = (Registry::builtin(), Registry::builtin());
        copied.insert(changed);
        fresh.insert(widget(json!({"type": "string"})));
        assert_eq!(
            v3_hash(&copied, "example.com", "v1", "v1.33.0"),
            v3_hash(&fresh, "example.com", "v1", "v1.33.0")
        );
        assert_eq!(
            v3_group_version(&r, "apis/example.com/v1"),
            Some(("example.com", "v1"))
        );
        assert_eq!(v3_group_version(&r, "api/v1"), Some(("", "v1")));
        assert_eq!(v3_group_version(&r, "apis//v1"), None);
        assert_eq!(v3_group_version(&r, "apis/example.com/v2"), None);
    }
}
