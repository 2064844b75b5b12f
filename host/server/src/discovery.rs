//! Discovery (`/api`, `/apis` in the legacy and the aggregated form, group
//! and group-version resource lists),
//! `/version`, health probes and `/openapi/v2`, all derived from the
//! resource registry.

use crate::error::ErrorResponse;
use crate::health;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use wasm_apiserver_api::discovery::{self, Format};
use wasm_apiserver_api::{ApiError, KUBERNETES_VERSION, Registry};
use wasm_apiserver_registry::aggregator::Aggregator;

/// A JSON response with the given status: built-in objects in their Go
/// types' field order, and a newline at the end, as Go's JSON encoder writes
/// them (clients compare bodies byte for byte).
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut bytes = wasm_apiserver_api::encode::to_vec(body);
    bytes.push(b'\n');
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn not_found() -> ApiError {
    ApiError::NotFound(Default::default())
}

/// Answers `GET /api` or `/apis` as `Accept` asks: the aggregated
/// discovery document (with an `ETag`; a matching `If-None-Match` is 304) or
/// the legacy one that `legacy` builds.
fn discovery(
    state: &AppState,
    headers: &HeaderMap,
    core: bool,
    legacy: impl FnOnce() -> Value,
) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(format) = discovery::negotiate(accept) else {
        return ErrorResponse(ApiError::NotAcceptable(format!(
            "only the following media types are accepted: application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList (got {accept})"
        )))
        .into_response();
    };
    let Format::Aggregated(version) = format else {
        return json_response(StatusCode::OK, &legacy());
    };
    let (mut body, mut etag) = state
        .resources
        .snapshot()
        .aggregated_discovery(core, version);
    let remote = if core {
        Vec::new()
    } else {
        remote_groups(&state.aggregator)
    };
    if !remote.is_empty()
        && let Ok(mut doc) = serde_json::from_slice::<Value>(&body)
        && let Some(items) = doc["items"].as_array_mut()
    {
        for (group, routes) in &remote {
            let versions: Vec<Value> = routes
                .iter()
                .filter_map(|r| {
                    let list = r.discovery.as_ref()?;
                    Some(discovery::version_from_resource_list(
                        group, &r.version, list,
                    ))
                })
                .collect();
            items.push(
                json!({"metadata": {"name": group, "creationTimestamp": null},
                "versions": versions}),
            );
        }
        let bytes = serde_json::to_vec(&doc).unwrap_or_default();
        etag = format!("\"{}\"", content_hash(&bytes));
        body = bytes.into();
    }
    let vary = [(header::VARY, "Accept")];
    let matched = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    if matched {
        return (StatusCode::NOT_MODIFIED, vary, [(header::ETAG, etag)]).into_response();
    }
    (
        StatusCode::OK,
        vary,
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::ETAG, etag),
        ],
        body,
    )
        .into_response()
}

/// `GET /api`.
pub async fn api_versions(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    discovery(&state, &headers, true, || {
        json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": state.address.to_string()}],
        })
    })
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `GET /apis`.
pub async fn api_groups(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    discovery(&state, &headers, false, || {
        let groups: Vec<Value> = state
            .resources
            .snapshot()
            .infos()
            .groups()
            .iter()
            .map(|(g, vs)| group_json(g, vs))
            .chain(
                remote_groups(&state.aggregator)
                    .into_iter()
                    .map(|(g, routes)| group_json(&g, &versions_of(&routes))),
            )
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    })
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

type Routes = Vec<Arc<wasm_apiserver_registry::aggregator::Route>>;

/// The groups of available remote APIServices, each with its routes by
/// descending `versionPriority` (the first is the preferred version), in
/// descending `groupPriorityMinimum` order, as upstream orders `/apis`.
fn remote_groups(agg: &Aggregator) -> Vec<(String, Routes)> {
    let routes = agg.routes();
    let mut groups: std::collections::BTreeMap<String, Routes> = Default::default();
    for r in routes.values().filter(|r| r.available) {
        groups.entry(r.group.clone()).or_default().push(r.clone());
    }
    let mut out: Vec<(String, Routes)> = groups.into_iter().collect();
    for (_, rs) in &mut out {
        rs.sort_by(|a, b| {
            b.version_priority
                .cmp(&a.version_priority)
                .then_with(|| a.version.cmp(&b.version))
        });
    }
    let top = |rs: &Routes| rs.iter().map(|r| r.group_priority_minimum).max();
    out.sort_by(|a, b| top(&b.1).cmp(&top(&a.1)).then_with(|| a.0.cmp(&b.0)));
    out
}

fn versions_of(routes: &Routes) -> Vec<String> {
    routes.iter().map(|r| r.version.clone()).collect()
}

/// `GET /apis/<group>` of a group that only remote APIServices serve.
pub fn aggregated_api_group(agg: &Aggregator, group: &str) -> Result<Value, ApiError> {
    let (_, routes) = remote_groups(agg)
        .into_iter()
        .find(|(g, _)| g == group)
        .ok_or_else(not_found)?;
    let mut g = group_json(group, &versions_of(&routes));
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Ok(g)
}

fn content_hash(bytes: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    format!("{:016X}", h.finish())
}

/// `GET /api/v1` or `/apis/<group>/<version>`.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Result<Value, ApiError> {
    discovery::resource_list(registry, group, version).ok_or_else(not_found)
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

/// `GET /openapi/v2`: JSON, or gnostic protobuf for a client that asks
/// for it (kubectl 1.27 and 1.28 ask for nothing else).
pub async fn openapi_v2(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let snapshot = state.resources.snapshot();
    use wasm_apiserver_api::openapi::proto;
    let (content_type, body) =
        if accept.contains(proto::MEDIA_TYPE) || accept.contains(proto::CONTENT_TYPE) {
            (proto::CONTENT_TYPE, snapshot.openapi_v2_protobuf())
        } else if accept.is_empty() || accept.contains("json") || accept.contains("*/*") {
            ("application/json", snapshot.openapi_v2())
        } else {
            // client-go retries with JSON after a 404 (not after a 406).
            return ErrorResponse(not_found()).into_response();
        };
    (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// `GET /openapi/v3`: the index of group-version documents.
pub async fn openapi_v3_root(State(state): State<Arc<AppState>>) -> Response {
    let snapshot = state.resources.snapshot();
    let mut paths = serde_json::Map::new();
    use wasm_apiserver_api::{KUBERNETES_VERSION, openapi};
    for (path, group, version) in openapi::v3_group_versions(snapshot.infos()) {
        let hash = openapi::v3_hash(snapshot.infos(), &group, &version, KUBERNETES_VERSION);
        let url = format!("/openapi/v3/{path}?hash={hash}");
        paths.insert(path, json!({"serverRelativeURL": url}));
    }
    // Aggregated group versions: the extension serves the document.
    for (group, routes) in remote_groups(&state.aggregator) {
        for r in routes {
            let hash = r.openapi_v3_hash.clone().unwrap_or_else(|| {
                content_hash(&serde_json::to_vec(&r.discovery).unwrap_or_default())
            });
            let path = format!("apis/{group}/{}", r.version);
            let url = format!("/openapi/v3/{path}?hash={hash}");
            paths.insert(path, json!({"serverRelativeURL": url}));
        }
    }
    json_response(StatusCode::OK, &json!({"paths": paths}))
}

/// `GET /openapi/v3/<api|apis/group>/<version>`.
/// An aggregated group version's document is its extension's, proxied.
pub async fn openapi_v3_doc(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(rest): axum::extract::Path<String>,
    req: axum::extract::Request,
) -> Response {
    let mut segs = rest.trim_end_matches('/').split('/');
    if let (Some("apis"), Some(group), Some(version), None) =
        (segs.next(), segs.next(), segs.next(), segs.next())
        && let Some(route) = state.aggregator.route(group, version)
    {
        let user = req
            .extensions()
            .get::<wasm_apiserver_plugins::UserInfo>()
            .cloned()
            .unwrap_or_default();
        return crate::proxy::forward(&state, route, req, &user, false).await;
    }
    match state.resources.snapshot().openapi_v3(&rest) {
        Some(doc) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            doc,
        )
            .into_response(),
        None => ErrorResponse(not_found()).into_response(),
    }
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut text = state.metrics.text();
    text.push_str(
        &state
            .objects
            .admission
            .as_ref()
            .map(|a| a.metrics_text())
            .unwrap_or_default(),
    );
    text.push_str(&state.controllers.text());
    text.push_str(&state.flowcontrol.metrics_text());
    text.push_str(&state.aggregator.metrics_text());
    if let Ok(s) = state.objects.storage.status().await {
        text.push_str(&format!(
            "# HELP wasm_apiserver_storage_revision The store's current revision.\n\
             # TYPE wasm_apiserver_storage_revision gauge\n\
             wasm_apiserver_storage_revision {}\n",
            s.revision
        ));
        if let Some(c) = s.compacted {
            text.push_str(&format!(
                "# HELP wasm_apiserver_storage_compacted_revision History up to this revision is compacted.\n\
                 # TYPE wasm_apiserver_storage_compacted_revision gauge\n\
                 wasm_apiserver_storage_compacted_revision {c}\n"
            ));
        }
        if let Some(b) = s.size_bytes {
            text.push_str(&format!(
                "# HELP apiserver_storage_size_bytes Size of the storage database file physically allocated in bytes.\n\
                 # TYPE apiserver_storage_size_bytes gauge\n\
                 apiserver_storage_size_bytes{{storage_cluster_id=\"embedded\"}} {b}\n"
            ));
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}

macro_rules! health_handlers {
    ($root:ident, $single:ident, $endpoint:expr) => {
        /// The health path's checks ([`health::root`]).
        pub async fn $root(
            State(state): State<Arc<AppState>>,
            axum::extract::RawQuery(q): axum::extract::RawQuery,
        ) -> Response {
            health::root(
                &state.health,
                state.objects.storage.as_ref(),
                $endpoint,
                q.as_deref(),
            )
            .await
        }

        /// One check of the health path ([`health::single`]).
        pub async fn $single(
            State(state): State<Arc<AppState>>,
            axum::extract::Path(name): axum::extract::Path<String>,
        ) -> Response {
            health::single(
                &state.health,
                state.objects.storage.as_ref(),
                $endpoint,
                &name,
            )
            .await
        }
    };
}

health_handlers!(livez, livez_check, health::Endpoint::Livez);
health_handlers!(readyz, readyz_check, health::Endpoint::Readyz);
health_handlers!(healthz, healthz_check, health::Endpoint::Healthz);
