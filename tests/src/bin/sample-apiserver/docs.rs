//! Discovery (`/apis`, legacy and aggregated v2) and OpenAPI (v2 and v3)
//! documents for `wardle.example.com/v1alpha1`, as `k8s.io/apiserver`
//! installs them for a group.

use base64::Engine;
use http::HeaderMap;
use http::header::{HeaderValue, VARY};
use hyper::Response;
use serde_json::{Map, Value, json};
use sha2::Digest;

use crate::api::{API_VERSION, GROUP, RESOURCE, VERSION};
use crate::status::{Body, accepts, json, respond, to_json_line};

/// The verbs `flunders` supports.
const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V3_PATH: &str = "apis/wardle.example.com/v1alpha1";

/// The document at `path`, if it is one.
pub fn serve(path: &str, headers: &HeaderMap) -> Option<Response<Body>> {
    let version = json!({"groupVersion": API_VERSION, "version": VERSION});
    let group = json!({"name": GROUP, "versions": [version], "preferredVersion": version});
    let mut response = match path {
        "/apis"
            if accepts(
                headers,
                &["as=APIGroupDiscoveryList", "v=v2", "g=apidiscovery.k8s.io"],
            ) =>
        {
            respond(200, AGGREGATED, to_json_line(&aggregated()))
        }
        "/apis" => json(
            200,
            &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}),
        ),
        "/apis/wardle.example.com" => {
            let mut group = group;
            group["kind"] = "APIGroup".into();
            group["apiVersion"] = "v1".into();
            json(200, &group)
        }
        "/apis/wardle.example.com/v1alpha1" => json(200, &resource_list()),
        "/openapi/v2" => json(200, &openapi_v2()),
        "/openapi/v3" => {
            let hash = sha2::Sha512::digest(to_json_line(&openapi_v3()));
            let hex: String = hash.iter().map(|b| format!("{b:02X}")).collect();
            let url = format!("/{V3_PATH}?hash={hex}");
            json(
                200,
                &json!({"paths": {V3_PATH: {"serverRelativeURL": format!("/openapi/v3{url}")}}}),
            )
        }
        p if p.strip_prefix("/openapi/v3/") == Some(V3_PATH) => json(200, &openapi_v3()),
        _ => return None,
    };
    if path == "/apis" {
        response
            .headers_mut()
            .insert(VARY, HeaderValue::from_static("Accept"));
    }
    Some(response)
}

fn resource_list() -> Value {
    // discovery.StorageVersionHash: the first 8 bytes of sha256("group/version/kind").
    let digest = sha2::Sha256::digest(format!("{API_VERSION}/Flunder"));
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [{
            "name": RESOURCE,
            "singularName": "flunder",
            "namespaced": true,
            "kind": "Flunder",
            "verbs": VERBS,
            "shortNames": ["fl"],
            "storageVersionHash": base64::engine::general_purpose::STANDARD.encode(&digest[..8]),
        }],
    })
}

fn aggregated() -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": [{
            "metadata": {"name": GROUP, "creationTimestamp": null},
            "versions": [{
                "version": VERSION,
                "resources": [{
                    "resource": RESOURCE,
                    "responseKind": {"group": GROUP, "version": VERSION, "kind": "Flunder"},
                    "scope": "Namespaced",
                    "singularResource": "flunder",
                    "verbs": VERBS,
                    "shortNames": ["fl"],
                }],
                "freshness": "Current",
            }],
        }],
    })
}

/// The schemas, with `$ref`s under `prefix` (`#/definitions/` in v2,
/// `#/components/schemas/` in v3). ObjectMeta and ListMeta are minimal.
fn schemas(prefix: &str) -> Value {
    let gvk = |kind: &str| json!([{"group": GROUP, "kind": kind, "version": VERSION}]);
    let to = |name: &str| json!({"$ref": format!("{prefix}{name}")});
    let string = |description: &str| json!({"type": "string", "description": description});
    let api_version =
        string("APIVersion defines the versioned schema of this representation of an object.");
    let kind =
        string("Kind is a string value representing the REST resource this object represents.");
    json!({
        "com.example.wardle.v1alpha1.Flunder": {
            "type": "object",
            "description": "Flunder is an example type with a spec and a status.",
            "properties": {
                "apiVersion": api_version,
                "kind": kind,
                "metadata": to("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                "spec": to("com.example.wardle.v1alpha1.FlunderSpec"),
                "status": to("com.example.wardle.v1alpha1.FlunderStatus"),
            },
            "x-kubernetes-group-version-kind": gvk("Flunder"),
        },
        "com.example.wardle.v1alpha1.FlunderList": {
            "type": "object",
            "description": "FlunderList is a list of Flunder objects.",
            "required": ["items"],
            "properties": {
                "apiVersion": api_version,
                "items": {"type": "array", "items": to("com.example.wardle.v1alpha1.Flunder")},
                "kind": kind,
                "metadata": to("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"),
            },
            "x-kubernetes-group-version-kind": gvk("FlunderList"),
        },
        "com.example.wardle.v1alpha1.FlunderSpec": {
            "type": "object",
            "properties": {
                "reference": string("A name of another flunder, or of a fischer, depending on referenceType."),
                "referenceType": string("The type of the reference: Flunder (the default) or Fischer."),
            },
        },
        "com.example.wardle.v1alpha1.FlunderStatus": {"type": "object"},
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
            "type": "object",
            "description": "ObjectMeta is metadata that all persisted resources must have.",
            "properties": {
                "name": string("Name must be unique within a namespace."),
                "generateName": string("An optional prefix used to generate a unique name."),
                "namespace": string("Namespace defines the space within which each name must be unique."),
                "uid": string("UID is the unique in time and space value for this object."),
                "resourceVersion": string("An opaque value that represents the internal version of this object."),
                "creationTimestamp": {"type": "string", "format": "date-time"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta": {
            "type": "object",
            "properties": {"resourceVersion": {"type": "string"}, "continue": {"type": "string"}},
        },
    })
}

/// The flunders paths; `v3` says how bodies and parameters are written.
fn paths(v3: bool, prefix: &str) -> Value {
    let schema =
        |kind: &str| json!({"$ref": format!("{prefix}com.example.wardle.v1alpha1.{kind}")});
    let param = |name: &str, place: &str| match v3 {
        true => {
            json!({"name": name, "in": place, "required": place == "path", "schema": {"type": "string"}})
        }
        false => json!({"name": name, "in": place, "required": place == "path", "type": "string"}),
    };
    let op = |id: &str, action: &str, kind: &str| {
        let ok = match v3 {
            true => {
                json!({"description": "OK", "content": {"application/json": {"schema": schema(kind)}}})
            }
            false => json!({"description": "OK", "schema": schema(kind)}),
        };
        let mut op = json!({
            "operationId": id,
            "tags": ["wardleV1alpha1"],
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": GROUP, "version": VERSION, "kind": "Flunder"},
            "responses": {"200": ok},
        });
        if matches!(action, "post" | "put" | "patch") {
            // kubectl validates on the server when PATCH takes `fieldValidation`.
            let mut params = vec![param("fieldValidation", "query")];
            let body = if action == "patch" {
                json!({"type": "object"})
            } else {
                schema("Flunder")
            };
            match v3 {
                true => {
                    op["requestBody"] =
                        json!({"required": true, "content": {"application/json": {"schema": body}}})
                }
                false => params
                    .push(json!({"name": "body", "in": "body", "required": true, "schema": body})),
            }
            op["parameters"] = params.into();
        }
        op
    };
    let base = "/apis/wardle.example.com/v1alpha1";
    let mut paths = Map::new();
    paths.insert(
        format!("{base}/flunders"),
        json!({"get": op("listWardleV1alpha1FlunderForAllNamespaces", "list", "FlunderList")}),
    );
    paths.insert(
        format!("{base}/namespaces/{{namespace}}/flunders"),
        json!({
            "get": op("listWardleV1alpha1NamespacedFlunder", "list", "FlunderList"),
            "post": op("createWardleV1alpha1NamespacedFlunder", "post", "Flunder"),
            "parameters": [param("namespace", "path")],
        }),
    );
    paths.insert(
        format!("{base}/namespaces/{{namespace}}/flunders/{{name}}"),
        json!({
            "get": op("readWardleV1alpha1NamespacedFlunder", "get", "Flunder"),
            "put": op("replaceWardleV1alpha1NamespacedFlunder", "put", "Flunder"),
            "patch": op("patchWardleV1alpha1NamespacedFlunder", "patch", "Flunder"),
            "delete": op("deleteWardleV1alpha1NamespacedFlunder", "delete", "Flunder"),
            "parameters": [param("name", "path"), param("namespace", "path")],
        }),
    );
    Value::Object(paths)
}

fn info() -> Value {
    json!({"title": "Wardle", "version": VERSION})
}

fn openapi_v2() -> Value {
    let prefix = "#/definitions/";
    json!({"swagger": "2.0", "info": info(), "paths": paths(false, prefix), "definitions": schemas(prefix)})
}

fn openapi_v3() -> Value {
    let prefix = "#/components/schemas/";
    json!({"openapi": "3.0.0", "info": info(), "paths": paths(true, prefix), "components": {"schemas": schemas(prefix)}})
}
