//! Discovery (`/api`, `/apis`, group and group-version resource lists),
//! `/version`, health probes and `/openapi/v2`, all derived from the
//! resource registry.

use crate::error::ErrorResponse;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use wasm_apiserver_api::{ApiError, KUBERNETES_VERSION, Registry};

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn not_found() -> ApiError {
    ApiError::NotFound(Default::default())
}

/// `GET /api`.
pub async fn api_versions(State(state): State<Arc<AppState>>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": state.address.to_string()}],
        }),
    )
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `GET /apis`.
pub async fn api_groups(State(state): State<Arc<AppState>>) -> Response {
    let groups: Vec<Value> = state
        .resources
        .snapshot()
        .infos()
        .groups()
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
    )
}

/// `GET /apis/<group>`.
pub fn api_group(registry: &Registry, group: &str) -> Result<Value, ApiError> {
    let groups = registry.groups();
    let versions = groups.get(group).ok_or_else(not_found)?;
    let mut g = group_json(group, versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Ok(g)
}

/// `GET /api/v1` or `/apis/<group>/<version>`.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Result<Value, ApiError> {
    let mut resources = Vec::new();
    for r in registry.in_group_version(group, version) {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
            "shortNames": r.short_names,
        });
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        for sub in &r.subresources {
            resources.push(json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return Err(not_found());
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// `GET /version`.
pub async fn version() -> Response {
    let v = KUBERNETES_VERSION.trim_start_matches('v');
    let mut parts = v.split('.');
    json_response(
        StatusCode::OK,
        &json!({
            "major": parts.next().unwrap_or("1"),
            "minor": parts.next().unwrap_or("0"),
            "gitVersion": KUBERNETES_VERSION,
            "gitCommit": concat!("wasm-apiserver-", env!("CARGO_PKG_VERSION")),
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "n/a (rust)",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, if cfg!(target_arch = "x86_64") { "amd64" } else { std::env::consts::ARCH }),
        }),
    )
}

/// `GET /healthz`, `/livez`: the process serves.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: storage answers.
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.objects.storage.current_revision().await {
        Ok(_) => (StatusCode::OK, "ok").into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("[-]storage failed: {e}\nreadyz check failed"),
        )
            .into_response(),
    }
}

/// `GET /openapi/v2` (JSON only: a protobuf-only Accept gets 406, which
/// makes client-go retry with JSON).
pub async fn openapi_v2(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !accept.is_empty() && !accept.contains("json") && !accept.contains("*/*") {
        // client-go retries with JSON after a 404 (not after a 406).
        return ErrorResponse(not_found()).into_response();
    }
    json_response(StatusCode::OK, state.resources.snapshot().openapi_v2())
}

/// `GET /openapi/v3`: the index of group-version documents.
pub async fn openapi_v3_root(State(state): State<Arc<AppState>>) -> Response {
    let snapshot = state.resources.snapshot();
    let mut paths = serde_json::Map::new();
    for (path, _, _) in wasm_apiserver_api::openapi::v3_group_versions(snapshot.infos()) {
        let url = format!("/openapi/v3/{path}?hash={}", snapshot.openapi_hash());
        paths.insert(path, json!({"serverRelativeURL": url}));
    }
    json_response(StatusCode::OK, &json!({"paths": paths}))
}

/// `GET /openapi/v3/<api|apis/group>/<version>`.
pub async fn openapi_v3_doc(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(rest): axum::extract::Path<String>,
) -> Response {
    let snapshot = state.resources.snapshot();
    let found = wasm_apiserver_api::openapi::v3_group_versions(snapshot.infos())
        .into_iter()
        .find(|(path, _, _)| *path == rest);
    match found {
        Some((_, g, v)) => json_response(
            StatusCode::OK,
            &wasm_apiserver_api::openapi::openapi_v3(snapshot.infos(), &g, &v, KUBERNETES_VERSION),
        ),
        None => ErrorResponse(not_found()).into_response(),
    }
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = state
        .objects
        .admission
        .as_ref()
        .map(|a| a.runtime().metrics_text())
        .unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}
