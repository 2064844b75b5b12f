//! The OpenAPI v2 document at `/openapi/v2`, derived from the registry.
//!
//! kubectl reads it for two things: whether a resource's PATCH accepts the
//! `fieldValidation` query parameter (then it validates on the server instead
//! of the client), and the `x-kubernetes-group-version-kind` of each
//! definition. Schemas are open (`type: object`) so client-side validation
//! never rejects a field the server accepts.

use crate::resource::{Registry, ResourceInfo};
use serde_json::{Map, Value, json};

/// The definition name kubectl looks up, e.g. `io.k8s.api.core.v1.ConfigMap`.
pub fn definition_name(info: &ResourceInfo) -> String {
    let group = if info.group.is_empty() { "core" } else { info.group.split('.').next().unwrap_or("") };
    format!("io.k8s.api.{group}.{}.{}", info.version, info.kind)
}

fn gvk(info: &ResourceInfo) -> Value {
    json!({"group": info.group, "version": info.version, "kind": info.kind})
}

fn param(name: &str) -> Value {
    json!({"name": name, "in": "query", "type": "string", "uniqueItems": true})
}

fn operation(info: &ResourceInfo, action: &str, extra: &[&str]) -> Value {
    let mut params: Vec<Value> = ["dryRun", "fieldManager"].iter().map(|p| param(p)).collect();
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
    let mut definitions = Map::new();
    for info in registry.all() {
        let collection = base_path(info, info.namespaced);
        paths.insert(
            collection.clone(),
            json!({
                "get": operation(info, "list", &[]),
                "post": operation(info, "post", &["fieldValidation"]),
                "delete": operation(info, "deletecollection", &[]),
            }),
        );
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "get": operation(info, "get", &[]),
                "put": operation(info, "put", &["fieldValidation"]),
                "patch": operation(info, "patch", &["fieldValidation", "force"]),
                "delete": operation(info, "delete", &[]),
            }),
        );
        definitions.insert(
            definition_name(info),
            json!({
                "description": format!("{} is a {} object.", info.kind, info.api_version()),
                "type": "object",
                "x-kubernetes-group-version-kind": [gvk(info)],
            }),
        );
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths,
        "definitions": definitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_declares_field_validation() {
        let doc = openapi_v2(&Registry::builtin(), "v1.33.0");
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "ConfigMap");
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        assert!(doc["paths"].get("/api/v1/namespaces/{name}").is_some());
        assert!(doc["definitions"].get("io.k8s.api.coordination.v1.Lease").is_some());
    }
}
