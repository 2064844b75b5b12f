//! The REST handler for every resource path under `/api/v1` and
//! `/apis/<group>/<version>`: it looks the resource up in one registry
//! snapshot, decodes query parameters and bodies, calls the resource's REST
//! object (the generic store, or a computed create) and encodes the answer
//! (JSON or a `Table`). One small function per verb; nothing here knows a
//! particular resource: what is special lives with the resource's
//! [`Strategy`](wasm_apiserver_registry::Strategy) or REST object.

use crate::discovery::{api_group, json_response, resource_list};
use crate::error::ErrorResponse;
use crate::state::AppState;
use crate::watch::{self, WatchOptions};
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_api::audit::Annotations;
use wasm_apiserver_api::builtin::APIREGISTRATION;
use wasm_apiserver_api::error::{Target, success_status};
use wasm_apiserver_api::patch::{self, PatchType};
use wasm_apiserver_api::request::query_pairs;
use wasm_apiserver_api::selector::{FieldSelector, LabelSelector};
use wasm_apiserver_api::table::{IncludeObject, to_table};
use wasm_apiserver_api::{ApiError, Cause, RequestInfo, ResourceInfo, meta};
use wasm_apiserver_plugins::UserInfo;
use wasm_apiserver_registry::apply::Applied;
use wasm_apiserver_registry::builtin::is_remote_api_service;
use wasm_apiserver_registry::{
    CreateRequest, Creater, Deleted, FieldValidation, ListOutcome, ListParams, Preconditions,
    Propagation, Reader, Resource, WriteOptions,
};

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
        for (k, v) in query_pairs(raw.unwrap_or("")).map_err(ApiError::BadRequest)? {
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

fn write_options(
    q: &Query,
    user: &UserInfo,
    audit: &Option<Annotations>,
    headers: &HeaderMap,
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
    opts.field_manager = field_manager(q, headers)?;
    Ok(opts)
}

/// `fieldManager`, or upstream's default: the User-Agent up to its first
/// `/` (`kubectl`), at most 128 characters.
fn field_manager(q: &Query, headers: &HeaderMap) -> Result<String> {
    if let Some(m) = q.get("fieldManager") {
        if m.chars().count() > 128 || m.chars().any(|c| c.is_control()) {
            return Err(ApiError::Invalid(
                Target::default(),
                vec![wasm_apiserver_api::Cause {
                    reason: "FieldValueInvalid".into(),
                    field: "fieldManager".into(),
                    message: format!(
                        "Invalid value: {m:?}: must be at most 128 printable characters"
                    ),
                }],
            ));
        }
        return Ok(m.to_string());
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Ok(agent
        .split('/')
        .next()
        .unwrap_or_default()
        .chars()
        .take(128)
        .collect())
}

/// Adds admission warnings as `Warning: 299 - "..."` headers, as upstream.
fn with_warnings(resp: Response, opts: &WriteOptions) -> Response {
    opts.warnings().iter().fold(resp, |r, w| with_warning(r, w))
}

/// Adds one `Warning: 299 - "..."` header.
fn with_warning(mut resp: Response, w: &str) -> Response {
    // A quoted-string (RFC 9110): quotes and backslashes escaped, as
    // upstream does and kubectl undoes.
    let text = w
        .replace(['\n', '\r'], " ")
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    if let Ok(v) = axum::http::HeaderValue::from_str(&format!("299 - \"{text}\"")) {
        resp.headers_mut().append("warning", v);
    }
    resp
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
        // REST lists select by upstream's fields only, read as upstream.
        indexed: false,
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

/// Decodes a JSON, YAML or protobuf request body (by its Content-Type).
fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = ct.split(';').next().unwrap_or("").trim();
    wasm_apiserver_api::request::decode_body(media, body)
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

/// One resource request, decoded once for the verb functions.
struct Call<'a> {
    state: &'a AppState,
    res: &'a Resource,
    ns: Option<&'a str>,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
    q: &'a Query,
    headers: &'a HeaderMap,
    user: &'a UserInfo,
    audit: &'a Option<Annotations>,
}

impl Call<'_> {
    async fn body(&self, body: Body) -> Result<Bytes> {
        to_bytes(body, self.state.max_request_bytes)
            .await
            .map_err(|_| ApiError::RequestEntityTooLarge("the request is too large".into()))
    }

    async fn object(&self, body: Body) -> Result<Value> {
        decode_body(self.headers, &self.body(body).await?)
    }

    /// The body of a create or update of this resource's objects: protobuf
    /// only where the resource's kind has a protobuf schema (415 otherwise,
    /// as upstream answers for custom resources).
    async fn stored_object(&self, body: Body) -> Result<Value> {
        let media = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if media.starts_with("application/vnd.kubernetes.protobuf")
            && !wasm_apiserver_api::protobuf::supports(&self.res.api_version(), &self.res.kind)
        {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {media})"
            )));
        }
        self.object(body).await
    }

    fn write_options(&self) -> Result<WriteOptions> {
        write_options(self.q, self.user, self.audit, self.headers)
    }

    fn name(&self) -> &str {
        self.name.unwrap_or_default()
    }

    /// Patches the named object (or its subresource) with `apply`.
    async fn patch_object(
        &self,
        apply: &(dyn Fn(&Value) -> Result<Value> + Send + Sync),
        opts: &WriteOptions,
    ) -> Result<Value> {
        self.state
            .objects
            .patch(
                self.res,
                self.ns,
                self.name(),
                self.subresource,
                apply,
                opts,
            )
            .await
    }

    /// The answer for the request's subresource: its own view of the
    /// object where it has one (`scale`), else the object.
    fn view(&self, obj: Value) -> Value {
        let obj = self
            .subresource
            .and_then(|sub| self.res.strategy.get_subresource(sub, &obj))
            .unwrap_or(obj);
        if self.metadata_only() {
            meta::partial_object_metadata(&obj)
        } else {
            obj
        }
    }

    /// `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`.
    fn metadata_only(&self) -> bool {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(meta::wants_partial_metadata)
    }
}

fn not_found() -> ApiError {
    ApiError::NotFound(Target::default())
}

async fn handle(state: &Arc<AppState>, req: Request) -> Result<Response> {
    let ext = req.extensions();
    let info: RequestInfo = ext.get::<RequestInfo>().cloned().unwrap_or_default();
    let user: UserInfo = ext.get::<UserInfo>().cloned().unwrap_or_default();
    let audit = ext.get::<Annotations>().cloned();
    if let Some(route) = aggregated_route(state, &info) {
        let watch = info.verb == "watch";
        return Ok(crate::proxy::forward(state, route, req, &user, watch).await);
    }
    let (parts, body) = req.into_parts();
    let q = Query::parse(parts.uri.query())?;
    // One registry snapshot for the whole request.
    let snapshot = state.resources.snapshot();

    if !info.is_resource_request {
        // /api/v1, /apis/<group>, /apis/<group>/<version>
        let segs: Vec<&str> = info.path.trim_matches('/').split('/').collect();
        let doc = match segs.as_slice() {
            ["api", v] => resource_list(snapshot.infos(), "", v),
            ["apis", g] => match api_group(snapshot.infos(), g) {
                Err(ApiError::NotFound(_)) => {
                    crate::discovery::aggregated_api_group(&state.aggregator, g)
                }
                other => other,
            },
            ["apis", g, v] => match resource_list(snapshot.infos(), g, v) {
                Err(ApiError::NotFound(_)) => Err(aggregated_or_not_found(state, g, v).await),
                other => other,
            },
            _ => Err(not_found()),
        }?;
        return Ok(json_response(StatusCode::OK, &doc));
    }

    let Some(res) = snapshot.get(&info.api_group, &info.api_version, &info.resource) else {
        return Err(aggregated_or_not_found(state, &info.api_group, &info.api_version).await);
    };
    let ns = res
        .strategy
        .scope(res, info.namespace.as_deref(), &info.verb)
        .ok_or_else(not_found)?;
    if let Some(sub) = info.subresource.as_deref()
        && crate::connect::is_connect(&info.api_group, &info.resource, sub)
        && res
            .find_subresource(sub)
            .is_some_and(|s| s.verbs.contains(&info.verb))
    {
        let target = crate::connect::Target {
            resource: &info.resource,
            namespace: ns,
            id: info.name.as_deref().unwrap_or_default(),
            sub,
            path: &info.path,
        };
        return crate::connect::connect(state, target, parts, body).await;
    }
    let call = Call {
        state,
        res,
        ns,
        name: info.name.as_deref(),
        subresource: info.subresource.as_deref(),
        q: &q,
        headers: &parts.headers,
        user: &user,
        audit: &audit,
    };
    let verb = info.verb.as_str();
    if let Some(sub) = call.subresource {
        if let Some(creater) = res.subresource_creaters.get(sub)
            && verb == "create"
        {
            return computed_create(&call, creater.as_ref(), body).await;
        }
        if !res
            .find_subresource(sub)
            .is_some_and(|s| s.verbs.iter().any(|v| v == verb))
        {
            return Err(not_found());
        }
    }
    if let Some(creater) = &res.create_only {
        return match verb {
            "create" => computed_create(&call, creater.as_ref(), body).await,
            _ => Err(ApiError::MethodNotAllowed),
        };
    }
    if let Some(reader) = &res.reader {
        return match verb {
            "get" | "list" => computed_read(&call, reader.as_ref()).await,
            _ => Err(ApiError::MethodNotAllowed),
        }
        .map(|resp| match &res.deprecation_warning {
            Some(w) => with_warning(resp, w),
            None => resp,
        });
    }
    let resp = match verb {
        "get" => get(&call).await,
        "list" => list(&call).await,
        "watch" => watch(&call).await,
        "create" => create(&call, body).await,
        "update" => update(&call, body).await,
        "patch" => patch(&call, body).await,
        "delete" => delete(&call, body).await,
        "deletecollection" => delete_collection(&call, body).await,
        _ => Err(ApiError::MethodNotAllowed),
    }?;
    // A deprecated version warns on every request, as upstream.
    Ok(match &res.deprecation_warning {
        Some(w) => with_warning(resp, w),
        None => resp,
    })
}

/// The route of a request for a group version that a remote APIService
/// claims (`/apis/<group>/<version>` and everything under it).
fn aggregated_route(
    state: &AppState,
    info: &RequestInfo,
) -> Option<Arc<wasm_apiserver_registry::aggregator::Route>> {
    if info.is_resource_request {
        return state.aggregator.route(&info.api_group, &info.api_version);
    }
    let rest = info.path.strip_prefix("/apis/")?;
    let mut segs = rest.trim_end_matches('/').split('/');
    let (group, version) = (segs.next()?, segs.next()?);
    state.aggregator.route(group, version)
}

/// A group version this server does not serve: 503 when a non-local
/// APIService claims it (its backend is not reachable through this server,
/// as upstream answers for an unavailable aggregated API), else 404.
async fn aggregated_or_not_found(state: &AppState, group: &str, version: &str) -> ApiError {
    let Some(api_services) = state.resources.get(APIREGISTRATION, "v1", "apiservices") else {
        return not_found();
    };
    match state
        .objects
        .get(&api_services, None, &format!("{version}.{group}"))
        .await
    {
        Ok(obj) if is_remote_api_service(&obj) => ApiError::ServiceUnavailable(
            "the server is currently unable to handle the request".into(),
        ),
        _ => not_found(),
    }
}

/// `create` answered by a REST object (access reviews, TokenRequest).
async fn computed_create(call: &Call<'_>, creater: &dyn Creater, body: Body) -> Result<Response> {
    let obj = call.object(body).await?;
    let req = CreateRequest {
        info: call.res,
        namespace: call.ns,
        name: call.name,
        user: call.user,
    };
    let answer = creater.create(req, obj).await?;
    Ok(json_response(StatusCode::CREATED, &answer))
}

/// `get` or `list` of a resource computed on every read: the objects the
/// [`Reader`] gives, filtered by name, label and field selectors as a
/// stored list would be (no paging: there are few).
async fn computed_read(call: &Call<'_>, reader: &dyn Reader) -> Result<Response> {
    let table = table_request(call.headers, call.q)?;
    let items = reader.list().await?;
    if let Some(name) = call.name {
        let obj = items
            .into_iter()
            .find(|o| meta::name(o) == Some(name))
            .ok_or_else(|| {
                ApiError::NotFound(Target::new(&call.res.group, &call.res.plural, name))
            })?;
        return Ok(object_response(StatusCode::OK, call.res, obj, table));
    }
    let params = list_params(call.q, call.res)?;
    let items = items.into_iter().filter(|o| params.matches(o)).collect();
    let out = ListOutcome {
        items,
        resource_version: 0,
        continue_token: None,
    };
    Ok(list_response(call.res, out, table, call.metadata_only()))
}

async fn get(call: &Call<'_>) -> Result<Response> {
    let table = table_request(call.headers, call.q)?;
    let obj = call
        .state
        .objects
        .get(call.res, call.ns, call.name())
        .await?;
    Ok(object_response(
        StatusCode::OK,
        call.res,
        call.view(obj),
        table,
    ))
}

/// A LIST is built on the bulk runtime (see [`crate::bulk`]): its read,
/// decoding and encoding are the longest stretches without an await point
/// a request has, and there they yield the CPU to short requests.
async fn list(call: &Call<'_>) -> Result<Response> {
    let table = table_request(call.headers, call.q)?;
    let params = list_params(call.q, call.res)?;
    let metadata_only = call.metadata_only();
    let (objects, res, ns) = (
        call.state.objects.clone(),
        call.res.clone(),
        call.ns.map(str::to_owned),
    );
    crate::bulk::run(async move {
        let out = objects.list(&res, ns.as_deref(), &params).await?;
        Ok(list_response(&res, out, table, metadata_only))
    })
    .await
}

fn list_response(
    res: &Resource,
    out: ListOutcome,
    table: Option<IncludeObject>,
    metadata_only: bool,
) -> Response {
    match table {
        Some(include) => {
            let mut m = json!({"resourceVersion": out.resource_version.to_string()});
            if let Some(c) = &out.continue_token {
                m["continue"] = json!(c);
            }
            json_response(StatusCode::OK, &to_table(res, &out.items, m, include))
        }
        None if metadata_only => {
            let mut body = list_body(res, out);
            body["kind"] = json!("PartialObjectMetadataList");
            body["apiVersion"] = json!("meta.k8s.io/v1");
            for item in body["items"].as_array_mut().into_iter().flatten() {
                *item = meta::partial_object_metadata(item);
            }
            json_response(StatusCode::OK, &body)
        }
        None => json_response(StatusCode::OK, &list_body(res, out)),
    }
}

async fn watch(call: &Call<'_>) -> Result<Response> {
    let q = call.q;
    let table = table_request(call.headers, q)?;
    let mut params = list_params(q, call.res)?;
    if let Some(n) = call.name {
        params.fields = FieldSelector::parse(&format!("metadata.name={n}"), &call.res.kind)
            .map_err(ApiError::BadRequest)?;
    }
    let rv = meta::parse_resource_version(q.get("resourceVersion").unwrap_or(""))
        .map_err(ApiError::BadRequest)?;
    let timeout = match q.get("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse()
                .map_err(|_| ApiError::BadRequest(format!("invalid timeoutSeconds {t:?}")))?,
        ),
        None => DEFAULT_WATCH_TIMEOUT,
    };
    let opts = WatchOptions {
        resource_version: rv,
        allow_bookmarks: q.flag("allowWatchBookmarks"),
        send_initial_events: q.flag("sendInitialEvents"),
        timeout,
        table,
        metadata_only: call.metadata_only(),
    };
    watch::serve(&call.state.objects, call.res, call.ns, params, opts).await
}

async fn create(call: &Call<'_>, body: Body) -> Result<Response> {
    if call.name.is_some() {
        return Err(ApiError::MethodNotAllowed);
    }
    let opts = call.write_options()?;
    let obj = call.stored_object(body).await?;
    let created = call
        .state
        .objects
        .create(call.res, call.ns, obj, &opts)
        .await?;
    Ok(with_warnings(
        json_response(StatusCode::CREATED, &created),
        &opts,
    ))
}

async fn update(call: &Call<'_>, body: Body) -> Result<Response> {
    let opts = call.write_options()?;
    let obj = call.stored_object(body).await?;
    let updated = call
        .state
        .objects
        .update(call.res, call.ns, call.name(), call.subresource, obj, &opts)
        .await?;
    Ok(with_warnings(
        json_response(StatusCode::OK, &call.view(updated)),
        &opts,
    ))
}

async fn patch(call: &Call<'_>, body: Body) -> Result<Response> {
    let mut opts = call.write_options()?;
    opts.patching = true;
    let ct = call
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ptype = PatchType::from_content_type(ct).ok_or_else(|| {
        ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {ct:?})"
        ))
    })?;
    if ptype == PatchType::Apply {
        return server_side_apply(call, body, opts).await;
    }
    if call.q.get("force").is_some() {
        return Err(ApiError::BadRequest(
            "force: Forbidden: may not be specified for non-apply patch".into(),
        ));
    }
    let bytes = call.body(body).await?;
    let doc: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
    let kind = call.res.kind.clone();
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
    let patched = call.patch_object(&apply, &opts).await?;
    Ok(with_warnings(
        json_response(StatusCode::OK, &call.view(patched)),
        &opts,
    ))
}

/// `PATCH` with `application/apply-patch+yaml`: server-side apply of the
/// body (YAML or JSON) by `fieldManager`, creating the object if it does
/// not exist.
async fn server_side_apply(
    call: &Call<'_>,
    body: Body,
    mut opts: WriteOptions,
) -> Result<Response> {
    if call.q.get("fieldManager").is_none() {
        return Err(wasm_apiserver_registry::apply::required(
            "fieldManager",
            "Required value: is required for apply patch",
        ));
    }
    let force = match call.q.get("force") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!("invalid force {other:?}")));
        }
    };
    let bytes = call.body(body).await?;
    let config: Value = serde_yaml::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
    let applied = call
        .state
        .objects
        .apply(
            call.res,
            call.ns,
            call.name(),
            call.subresource,
            &config,
            force,
            &mut opts,
        )
        .await?;
    let response = match applied {
        Applied::Patched(obj) => json_response(StatusCode::OK, &call.view(obj)),
        Applied::Created(obj) => json_response(StatusCode::CREATED, &obj),
    };
    Ok(with_warnings(response, &opts))
}

async fn delete(call: &Call<'_>, body: Body) -> Result<Response> {
    let bytes = call.body(body).await?;
    let (opts, pre) = delete_options(call.q, call.user, call.audit, call.headers, &bytes)?;
    let name = call.name();
    let resp = match call
        .state
        .objects
        .delete(call.res, call.ns, name, &pre, &opts)
        .await?
    {
        Deleted::Pending(obj) => json_response(StatusCode::OK, &obj),
        Deleted::Now(obj) => {
            let uid = meta::str_field(&obj, "uid").map(String::from);
            let target = Target::new(&call.res.group, &call.res.plural, name);
            json_response(StatusCode::OK, &success_status(&target, uid))
        }
    };
    Ok(with_warnings(resp, &opts))
}

async fn delete_collection(call: &Call<'_>, body: Body) -> Result<Response> {
    let bytes = call.body(body).await?;
    let (opts, pre) = delete_options(call.q, call.user, call.audit, call.headers, &bytes)?;
    let params = list_params(call.q, call.res)?;
    let out = call
        .state
        .objects
        .delete_collection(call.res, call.ns, &params, &pre, &opts)
        .await?;
    Ok(json_response(StatusCode::OK, &list_body(call.res, out)))
}

/// `DeleteOptions` from the body (if any) and the query.
fn delete_options(
    q: &Query,
    user: &UserInfo,
    audit: &Option<Annotations>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(WriteOptions, Preconditions)> {
    let mut opts = write_options(q, user, audit, headers)?;
    let mut pre = Preconditions::default();
    let (mut policy, mut orphan) = (None, None);
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
        policy = doc["propagationPolicy"].as_str().map(String::from);
        orphan = doc["orphanDependents"].as_bool();
        pre.grace_period_seconds = match &doc["gracePeriodSeconds"] {
            Value::Null => None,
            v => Some(v.as_i64().ok_or_else(|| {
                ApiError::BadRequest(format!("gracePeriodSeconds: expected an integer, got {v}"))
            })?),
        };
    }
    if let Some(g) = q.get("gracePeriodSeconds") {
        pre.grace_period_seconds = Some(g.parse().map_err(|_| {
            ApiError::BadRequest(format!(
                "gracePeriodSeconds: invalid value {g:?}: expected an integer"
            ))
        })?);
    }
    // The query's values win over the body's, as upstream decodes both
    // into one DeleteOptions with the query last.
    if let Some(p) = q.get("propagationPolicy") {
        policy = Some(p.to_string());
    }
    if q.get("orphanDependents").is_some() {
        orphan = Some(q.flag("orphanDependents"));
    }
    let invalid =
        |cause| ApiError::Invalid(Target::new("meta.k8s.io", "DeleteOptions", ""), vec![cause]);
    pre.propagation = match (policy.as_deref(), orphan) {
        (Some(p), Some(_)) => {
            return Err(invalid(Cause::invalid(
                "propagationPolicy",
                p,
                "orphanDependents and deletionPropagation cannot be both set",
            )));
        }
        (Some(p), None) => Some(Propagation::parse(p).ok_or_else(|| {
            invalid(Cause {
                reason: "FieldValueNotSupported".into(),
                field: "propagationPolicy".into(),
                message: format!(
                    "Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            })
        })?),
        (None, Some(true)) => Some(Propagation::Orphan),
        (None, Some(false)) => Some(Propagation::Background),
        (None, None) => None,
    };
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
