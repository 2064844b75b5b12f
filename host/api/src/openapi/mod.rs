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
use serde_json::{Map, Value, json};

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

/// A kind's published schema: a custom resource's own (with `apiVersion`,
/// `kind` and `metadata` added, and its GVK so `kubectl explain` finds it),
/// else an open object.
fn kind_schema(info: &ResourceInfo, with_gvk: bool) -> Value {
    let description = format!("{} is a {} object.", info.kind, info.api_version());
    let Some(schema) = &info.schema else {
        let mut open = json!({"description": description, "type": "object"});
        if with_gvk {
            open["x-kubernetes-group-version-kind"] = json!([gvk(info)]);
        }
        return open;
    };
    let mut s = Value::clone(schema);
    if !s.is_object() {
        s = json!({"type": "object"});
    }
    if s.get("description").is_none() {
        s["description"] = json!(description);
    }
    let props = s
        .as_object_mut()
        .expect("an object")
        .entry("properties")
        .or_insert_with(|| json!({}));
    if let Some(props) = props.as_object_mut() {
        props.entry("apiVersion").or_insert_with(|| json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
        props.entry("kind").or_insert_with(|| json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
        props.entry("metadata").or_insert_with(
            || json!({"type": "object", "description": "Standard object's metadata."}),
        );
    }
    s["x-kubernetes-group-version-kind"] = json!([gvk(info)]);
    s
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

/// Builds the swagger 2.0 document for every resource in the registry.
pub fn openapi_v2(registry: &Registry, version: &str) -> Value {
    let mut paths = Map::new();
    let mut definitions = definitions::builtin().clone();
    for info in registry.all() {
        insert_paths(&mut paths, info, operation);
        if info.type_schema.is_none() {
            definitions.insert(definition_name(info), kind_schema(info, true));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths,
        "definitions": definitions,
    })
}

/// The group-version paths of `/openapi/v3` (`api/v1`, `apis/<g>/<v>`).
pub fn v3_group_versions(registry: &Registry) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for r in registry.all() {
        let path = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        if !out.iter().any(|(p, _, _)| *p == path) {
            out.push((path, r.group.clone(), r.version.clone()));
        }
    }
    out
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

/// The OpenAPI v3 document of one group version: its kinds' definitions
/// and every definition they refer to. Operations declare the parameters
/// kubectl probes for (`fieldValidation`).
pub fn openapi_v3(registry: &Registry, group: &str, version: &str, server_version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let typed: Vec<String> = registry
        .in_group_version(group, version)
        .filter_map(definitions::builtin_name)
        .collect();
    for name in definitions::closure(typed.iter().map(String::as_str)) {
        if let Some(def) = definitions::builtin().get(&name) {
            schemas.insert(name, definitions::v3_schema(def));
        }
    }
    for info in registry.in_group_version(group, version) {
        insert_paths(&mut paths, info, v3_operation);
        if info.type_schema.is_none() {
            schemas.insert(definition_name(info), kind_schema(info, false));
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_declares_field_validation() {
        let doc = openapi_v2(&Registry::builtin(), "v1.33.0");
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
        let doc = openapi_v3(&r, "", "v1", "v1.33.0");
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
}
