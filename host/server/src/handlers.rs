//! The REST handler for every resource path under `/api/v1` and
//! `/apis/<group>/<version>`: it decodes query parameters and bodies, calls
//! the object store and encodes the answer (JSON or a `Table`).

use crate::discovery::{api_group, json_response, resource_list};
use crate::error::ErrorResponse;
use crate::filters::UserInfo;
use crate::objects::{
    Deleted, FieldValidation, ListOutcome, ListParams, Preconditions, WriteOptions,
};
use crate::request::RequestInfo;
use crate::server::AppState;
use crate::watch::{self, WatchOptions};
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_api::error::{Target, success_status};
use wasm_apiserver_api::patch::{self, PatchType};
use wasm_apiserver_api::selector::{FieldSelector, LabelSelector};
use wasm_apiserver_api::table::{IncludeObject, to_table};
use wasm_apiserver_api::{ApiError, ResourceInfo, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Upstream's default watch duration is 30–60 minutes; we use the low end.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Entry point for `/api/...` and `/apis/...`.
pub async fn dispatch(State(state): State<Arc<AppState>>, req: Request) -> Response {
    match handle(&state, req).await {
        Ok(r) => r,
        Err(e) => ErrorResponse(e).into_response(),
    }
}

struct Query(HashMap<String, String>);

impl Query {
    fn parse(raw: Option<&str>) -> Result<Self> {
        let mut map = HashMap::new();
        // As upstream, the first of repeated parameters counts.
        for (k, v) in query_pairs(raw.unwrap_or(""))? {
            map.entry(k).or_insert(v);
        }
        Ok(Query(map))
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|v| !v.is_empty())
    }
    /// A boolean parameter as upstream decodes it: present and neither
    /// `0` nor `false` (any case), so `True` (the Python client's) counts.
    fn flag(&self, k: &str) -> bool {
        self.0
            .get(k)
            .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
    }
}

/// The decoded `key=value` pairs of a query string, in order.
pub(crate) fn query_pairs(raw: &str) -> Result<Vec<(String, String)>> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| {
                percent_decode(&s.replace('+', " "))
                    .ok_or_else(|| ApiError::BadRequest(format!("invalid query parameter {s:?}")))
            };
            Ok((dec(k)?, dec(v)?))
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn write_options(
    q: &Query,
    user: &UserInfo,
    audit: &Option<crate::audit::Annotations>,
) -> Result<WriteOptions> {
    let dry_run = match q.get("dryRun") {
        None => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\""
            )));
        }
    };
    let field_validation = match q.get("fieldValidation") {
        None | Some("Warn") => FieldValidation::Warn,
        Some("Ignore") => FieldValidation::Ignore,
        Some("Strict") => FieldValidation::Strict,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Warn\", \"Strict\""
            )));
        }
    };
    let mut opts = WriteOptions::new(dry_run, user.clone());
    opts.audit = audit.clone();
    opts.field_validation = field_validation;
    Ok(opts)
}

/// Adds admission warnings as `Warning: 299 - "..."` headers, as upstream.
fn with_warnings(mut resp: Response, opts: &WriteOptions) -> Response {
    for w in opts.warnings() {
        // A quoted-string (RFC 9110): quotes and backslashes escaped, as
        // upstream does and kubectl undoes.
        let text = w
            .replace(['\n', '\r'], " ")
            .replace('\\', "\\\\")
            .replace('"', "\\\"");
        if let Ok(v) = axum::http::HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

/// `AdmissionPlugin` writes take effect on this replica before the response
/// (other replicas follow through the watch).
async fn after_write(state: &AppState, res: &ResourceInfo, obj: &Value, opts: &WriteOptions) {
    if opts.dry_run {
        return;
    }
    if res.group == wasm_apiserver_api::admission::GROUP {
        crate::admission::reconcile(&state.objects, obj).await;
    } else if res.group == crate::webhook::GROUP {
        crate::admission::reconcile_webhooks(&state.objects, &res.plural, obj, false);
    }
}

fn list_params(q: &Query, info: &ResourceInfo) -> Result<ListParams> {
    let labels =
        LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(ApiError::BadRequest)?;
    let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), &info.kind)
        .map_err(ApiError::BadRequest)?;
    let limit = match q.get("limit") {
        None => None,
        Some(l) => Some(
            l.parse::<i64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid limit {l:?}")))?
                .max(0) as usize,
        ),
    };
    Ok(ListParams {
        labels,
        fields,
        limit,
        continue_token: q.get("continue").map(String::from),
        resource_version: q.get("resourceVersion").map(String::from),
        resource_version_match: q.get("resourceVersionMatch").map(String::from),
    })
}

/// `Some(include)` when the client asked for a `Table`.
fn table_request(headers: &HeaderMap, q: &Query) -> Result<Option<IncludeObject>> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let wants_table = accept
        .split(',')
        .any(|m| m.contains("as=Table") && m.contains("g=meta.k8s.io"));
    if !wants_table {
        if !accept.is_empty()
            && !accept.split(',').any(|m| {
                let m = m.trim();
                m.starts_with("application/json")
                    || m.starts_with("*/*")
                    || m.starts_with("application/*")
                    || m.is_empty()
            })
        {
            return Err(ApiError::NotAcceptable(format!(
                "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io (got {accept})"
            )));
        }
        return Ok(None);
    }
    IncludeObject::parse(q.get("includeObject").unwrap_or(""))
        .map(Some)
        .map_err(ApiError::BadRequest)
}

/// Decodes a JSON (or YAML) request body.
fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = ct.split(';').next().unwrap_or("").trim();
    let value: Value = match media {
        "application/json" | "" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding request body: {e}")))?,
        "application/vnd.kubernetes.protobuf" => wasm_apiserver_api::protobuf::decode(body)
            .map_err(|e| {
                ApiError::BadRequest(format!("error decoding protobuf request body: {e}"))
            })?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding YAML request body: {e}")))?,
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {other})"
            )));
        }
    };
    if !value.is_object() {
        return Err(ApiError::BadRequest(
            "the request body must be a JSON object".into(),
        ));
    }
    Ok(value)
}

fn list_body(info: &ResourceInfo, out: ListOutcome) -> Value {
    let mut meta = json!({"resourceVersion": out.resource_version.to_string()});
    if let Some(c) = out.continue_token {
        meta["continue"] = json!(c);
    }
    json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": meta, "items": out.items})
}

fn object_response(
    status: StatusCode,
    info: &ResourceInfo,
    obj: Value,
    table: Option<IncludeObject>,
) -> Response {
    match table {
        Some(include) => {
            let rv = meta::str_field(&obj, "resourceVersion")
                .unwrap_or_default()
                .to_string();
            json_response(
                status,
                &to_table(info, &[obj], json!({"resourceVersion": rv}), include),
            )
        }
        None => json_response(status, &obj),
    }
}

async fn handle(state: &Arc<AppState>, req: Request) -> Result<Response> {
    let info: RequestInfo = req
        .extensions()
        .get::<RequestInfo>()
        .cloned()
        .unwrap_or_default();
    let user: UserInfo = req
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_default();
    let audit = req.extensions().get::<crate::audit::Annotations>().cloned();
    let (parts, body) = req.into_parts();
    let q = Query::parse(parts.uri.query())?;
    let headers = parts.headers;

    if !info.is_resource_request {
        // /api/v1, /apis/<group>, /apis/<group>/<version>
        let segs: Vec<&str> = info.path.trim_matches('/').split('/').collect();
        let doc = match segs.as_slice() {
            ["api", v] => resource_list(&state.registry, "", v)?,
            ["apis", g] => api_group(&state.registry, g)?,
            ["apis", g, v] => resource_list(&state.registry, g, v)?,
            _ => return Err(ApiError::NotFound(Default::default())),
        };
        return Ok(json_response(StatusCode::OK, &doc));
    }

    let not_found = || ApiError::NotFound(Target::default());
    let res = state
        .registry
        .get(&info.api_group, &info.api_version, &info.resource)
        .ok_or_else(not_found)?;
    // Scope checks: namespaced objects need a namespace (except cluster-wide
    // list/watch); cluster-scoped ones must not have one.
    let mut ns = info.namespace.as_deref();
    let cluster_scoped_with_ns = !res.namespaced && ns.is_some();
    let namespaced_without_ns =
        res.namespaced && ns.is_none() && !matches!(info.verb.as_str(), "list" | "watch");
    if res.plural == "namespaces" {
        ns = None;
    } else if cluster_scoped_with_ns || namespaced_without_ns {
        return Err(not_found());
    }
    if res.plural == "serviceaccounts"
        && info.subresource.as_deref() == Some("token")
        && info.verb == "create"
    {
        let body = read_body_limited(body, state.max_request_bytes).await?;
        let req_obj = decode_body(&headers, &body)?;
        let answer = token_request(
            state,
            res,
            ns.unwrap_or_default(),
            info.name.as_deref().unwrap_or_default(),
            req_obj,
        )
        .await?;
        return Ok(json_response(StatusCode::CREATED, &answer));
    }
    if let Some(sub) = &info.subresource
        && (!res.subresources.contains(sub)
            || !matches!(info.verb.as_str(), "get" | "update" | "patch"))
    {
        return Err(not_found());
    }
    let name = info.name.as_deref();
    let objects = &state.objects;

    let read_body = |body: Body| async move {
        to_bytes(body, state.max_request_bytes)
            .await
            .map_err(|_| ApiError::RequestEntityTooLarge("the request is too large".into()))
    };

    match info.verb.as_str() {
        "get" => {
            let table = table_request(&headers, &q)?;
            let obj = objects.get(res, ns, name.unwrap_or_default()).await?;
            Ok(object_response(StatusCode::OK, res, obj, table))
        }
        "list" => {
            let table = table_request(&headers, &q)?;
            let out = objects.list(res, ns, &list_params(&q, res)?).await?;
            Ok(match table {
                Some(include) => {
                    let mut m = json!({"resourceVersion": out.resource_version.to_string()});
                    if let Some(c) = &out.continue_token {
                        m["continue"] = json!(c);
                    }
                    json_response(StatusCode::OK, &to_table(res, &out.items, m, include))
                }
                None => json_response(StatusCode::OK, &list_body(res, out)),
            })
        }
        "watch" => {
            let table = table_request(&headers, &q)?;
            let mut params = list_params(&q, res)?;
            if let Some(n) = name {
                params.fields = FieldSelector::parse(&format!("metadata.name={n}"), &res.kind)
                    .map_err(ApiError::BadRequest)?;
            }
            let rv = meta::parse_resource_version(q.get("resourceVersion").unwrap_or(""))
                .map_err(ApiError::BadRequest)?;
            let timeout =
                match q.get("timeoutSeconds") {
                    Some(t) => Duration::from_secs(t.parse().map_err(|_| {
                        ApiError::BadRequest(format!("invalid timeoutSeconds {t:?}"))
                    })?),
                    None => DEFAULT_WATCH_TIMEOUT,
                };
            let opts = WatchOptions {
                resource_version: rv,
                allow_bookmarks: q.flag("allowWatchBookmarks"),
                send_initial_events: q.flag("sendInitialEvents"),
                timeout,
                table,
            };
            watch::serve(objects, res, ns, params, opts).await
        }
        "create" if res.create_only => {
            let obj = decode_body(&headers, &read_body(body).await?)?;
            let answer = crate::authz::review(&state.authz, res, ns, &user, obj).await?;
            Ok(json_response(StatusCode::CREATED, &answer))
        }
        _ if res.create_only => Err(ApiError::MethodNotAllowed),
        "create" => {
            if name.is_some() {
                return Err(ApiError::MethodNotAllowed);
            }
            let opts = write_options(&q, &user, &audit)?;
            let obj = decode_body(&headers, &read_body(body).await?)?;
            let created = objects.create(res, ns, obj, &opts).await?;
            after_write(state, res, &created, &opts).await;
            Ok(with_warnings(
                json_response(StatusCode::CREATED, &created),
                &opts,
            ))
        }
        "update" => {
            let opts = write_options(&q, &user, &audit)?;
            let obj = decode_body(&headers, &read_body(body).await?)?;
            let updated = objects
                .update(
                    res,
                    ns,
                    name.unwrap_or_default(),
                    info.subresource.as_deref(),
                    obj,
                    &opts,
                )
                .await?;
            after_write(state, res, &updated, &opts).await;
            Ok(with_warnings(
                json_response(StatusCode::OK, &updated),
                &opts,
            ))
        }
        "patch" => {
            let opts = write_options(&q, &user, &audit)?;
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let ptype = PatchType::from_content_type(ct).ok_or_else(|| {
                ApiError::UnsupportedMediaType(format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {ct:?})"
                ))
            })?;
            if ptype == PatchType::Apply {
                return Err(ApiError::UnsupportedMediaType(
                    "server-side apply (application/apply-patch+yaml) is not supported yet; use client-side kubectl apply".into(),
                ));
            }
            let bytes = read_body(body).await?;
            let doc: Value = serde_json::from_slice(&bytes)
                .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
            let kind = res.kind.clone();
            let apply = move |cur: &Value| -> Result<Value> {
                let out = match ptype {
                    PatchType::Json => patch::apply_json_patch(cur, &doc),
                    PatchType::Merge => patch::apply_merge_patch(cur, &doc),
                    _ => patch::apply_strategic_merge_patch(&kind, cur, &doc),
                };
                out.map_err(|e| match e {
                    patch::PatchError::Invalid(m) => ApiError::BadRequest(m),
                    patch::PatchError::Apply(m) => ApiError::Invalid(
                        Target::default(),
                        vec![wasm_apiserver_api::Cause {
                            reason: "FieldValueInvalid".into(),
                            field: "patch".into(),
                            message: m,
                        }],
                    ),
                })
            };
            let patched = objects
                .patch(res, ns, name.unwrap_or_default(), &apply, &opts)
                .await?;
            after_write(state, res, &patched, &opts).await;
            Ok(with_warnings(
                json_response(StatusCode::OK, &patched),
                &opts,
            ))
        }
        "delete" => {
            let bytes = read_body(body).await?;
            let (opts, pre) = delete_options(&q, &user, &audit, &headers, &bytes)?;
            let name = name.unwrap_or_default();
            let resp = match objects.delete(res, ns, name, &pre, &opts).await? {
                Deleted::Pending(obj) => json_response(StatusCode::OK, &obj),
                Deleted::Now(obj) => {
                    if !opts.dry_run && res.group == wasm_apiserver_api::admission::GROUP {
                        if let Some(adm) = &objects.admission {
                            adm.remove(name);
                        }
                    } else if !opts.dry_run && res.group == crate::webhook::GROUP {
                        crate::admission::reconcile_webhooks(objects, &res.plural, &obj, true);
                    }
                    let uid = meta::str_field(&obj, "uid").map(String::from);
                    let target = Target::new(&res.group, &res.plural, name);
                    json_response(StatusCode::OK, &success_status(&target, uid))
                }
            };
            Ok(with_warnings(resp, &opts))
        }
        "deletecollection" => {
            let opts = write_options(&q, &user, &audit)?;
            let out = objects
                .delete_collection(res, ns, &list_params(&q, res)?, &opts)
                .await?;
            Ok(json_response(StatusCode::OK, &list_body(res, out)))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

async fn read_body_limited(body: Body, limit: usize) -> Result<bytes::Bytes> {
    to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::RequestEntityTooLarge("the request is too large".into()))
}

/// `POST .../serviceaccounts/<name>/token` (TokenRequest, `kubectl create token`).
async fn token_request(
    state: &AppState,
    res: &ResourceInfo,
    ns: &str,
    name: &str,
    mut body: Value,
) -> Result<Value> {
    let sa = state.objects.get(res, Some(ns), name).await?;
    let signer = state.authn.service_accounts.as_ref().ok_or_else(|| {
        ApiError::ServiceUnavailable("ServiceAccount tokens are not enabled".into())
    })?;
    let audiences: Vec<String> = body["spec"]["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    // Upstream's bounds: at least 10 minutes, at most 48 hours; default 1 hour.
    let lifetime = body["spec"]["expirationSeconds"]
        .as_i64()
        .unwrap_or(3600)
        .clamp(600, 48 * 3600);
    let sub = crate::satoken::TokenSubject {
        namespace: ns.to_string(),
        name: name.to_string(),
        uid: meta::str_field(&sa, "uid").unwrap_or_default().to_string(),
    };
    let (token, exp) = signer
        .issue(&sub, &audiences, lifetime)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    body["apiVersion"] = json!("authentication.k8s.io/v1");
    body["kind"] = json!("TokenRequest");
    body["spec"]["expirationSeconds"] = json!(lifetime);
    body["status"] = json!({"token": token, "expirationTimestamp": meta::timestamp(exp)});
    Ok(body)
}

/// `DeleteOptions` from the body (if any) and the query.
fn delete_options(
    q: &Query,
    user: &UserInfo,
    audit: &Option<crate::audit::Annotations>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(WriteOptions, Preconditions)> {
    let mut opts = write_options(q, user, audit)?;
    let mut pre = Preconditions::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let doc = decode_body(headers, body)?;
        if let Some(dry) = doc.get("dryRun").and_then(Value::as_array) {
            match dry
                .iter()
                .map(|v| v.as_str().unwrap_or(""))
                .collect::<Vec<_>>()
                .as_slice()
            {
                [] => {}
                ["All"] => opts.dry_run = true,
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "dryRun: Unsupported value: {other:?}"
                    )));
                }
            }
        }
        let p = &doc["preconditions"];
        pre.uid = p["uid"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(String::from);
        pre.resource_version =
            meta::parse_resource_version(p["resourceVersion"].as_str().unwrap_or(""))
                .map_err(ApiError::BadRequest)?;
    }
    Ok((opts, pre))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+(a%2Cb)&watch=1&limit=5",
        ))
        .unwrap();
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a,b)"));
        assert!(q.flag("watch"));
        assert!(Query::parse(Some("x=%zz")).is_err());
        // Booleans as upstream decodes them.
        for (raw, want) in [
            ("w=True", true),
            ("w=", true),
            ("w=0", false),
            ("w=FALSE", false),
        ] {
            assert_eq!(Query::parse(Some(raw)).unwrap().flag("w"), want, "{raw}");
        }
        assert!(!Query::parse(Some("x=1")).unwrap().flag("w"));
    }
}
