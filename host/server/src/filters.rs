//! The request pipeline before the handlers, in request order:
//! request info → authentication → audit → impersonation → authorization.
//! These are the HTTP side of access control: each filter reads the
//! request's extensions and calls the access-control modules (`authn`,
//! `authz`, `audit`). Admission runs inside the registry's store, where the
//! decoded object is known.

use crate::audit::{Annotations, ImpersonatedUser, api_user};
use crate::error::ErrorResponse;
use crate::state::AppState;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;
use wasm_apiserver_api::audit::{self, Level, ObjectRef, Record, Stage};
use wasm_apiserver_api::request;
use wasm_apiserver_api::{ConnectionInfo, RequestInfo};

pub use wasm_apiserver_plugins::UserInfo;

/// Parses the [`RequestInfo`] once for everything after it.
pub async fn with_request_info(mut req: Request, next: Next) -> Response {
    let info: RequestInfo =
        request::parse(req.method().as_str(), req.uri().path(), req.uri().query());
    req.extensions_mut().insert(info);
    next.run(req).await
}

/// Request metrics ([`crate::metrics`]): upstream's request families, by
/// the labels of the request info; a long-running request's latency is
/// observed when its stream ends.
pub async fn instrument(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(info) = req.extensions().get::<RequestInfo>() else {
        return next.run(req).await;
    };
    let metrics = &state.metrics;
    let content_type = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let resource = info
        .is_resource_request
        .then(|| {
            state
                .resources
                .get(&info.api_group, &info.api_version, &info.resource)
        })
        .flatten();
    // A watch's events are counted by the kind it streams.
    let watched = resource
        .as_ref()
        .filter(|_| info.verb == "watch")
        .map(|r| metrics.watch_events(&info.api_group, &info.api_version, &r.kind));
    let rec = metrics.start(
        info,
        req.method().as_str(),
        req.uri().query(),
        content_type,
        |_| resource.is_some(),
    );
    let excluded = crate::metrics::Excluded::default();
    req.extensions_mut().insert(excluded.clone());
    // The audit ID (the client's `Audit-ID`, else a new one), on the
    // response, the audit events and the request's log lines.
    let audit_id = req
        .headers()
        .get("audit-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(String::from)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let header = axum::http::HeaderValue::from_str(&audit_id).ok();
    let log = Arc::new(crate::logging::RequestLog {
        audit_id,
        user: Default::default(),
    });
    req.extensions_mut().insert(log.clone());
    let webhooks = wasm_apiserver_registry::admission::metrics::WEBHOOK_NANOS
        .scope(excluded.nanos(), next.run(req));
    let mut resp = crate::logging::REQUEST.scope(log, webhooks).await;
    if let Some(h) = header {
        resp.headers_mut().insert("audit-id", h);
    }
    let size = axum::body::HttpBody::size_hint(resp.body()).exact();
    if !metrics.respond(&rec, resp.status().as_u16(), size, &excluded) {
        return resp;
    }
    // An upgraded connection (exec, attach, port-forward) is spliced
    // outside this body: its latency is the handshake's.
    if resp.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
        metrics.finish(&rec, &excluded);
        return resp;
    }
    // Long-running: the latency is the stream's, observed when it closes.
    struct Finish(
        Arc<AppState>,
        crate::metrics::Recorder,
        crate::metrics::Excluded,
    );
    impl Drop for Finish {
        fn drop(&mut self) {
            self.0.metrics.finish(&self.1, &self.2);
        }
    }
    let finish = Finish(state.clone(), rec, excluded);
    let (parts, body) = resp.into_parts();
    let stream = futures::StreamExt::map(body.into_data_stream(), move |chunk| {
        let _ = &finish;
        // One frame is one watch event.
        if let (Some((events, sizes)), Ok(bytes)) = (&watched, &chunk) {
            events.inc();
            sizes.observe(bytes.len() as f64);
        }
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Counts the request as in flight while it is served (until its response
/// head is ready: a watch's stream is not counted).
pub async fn count_in_flight(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let _in_flight = state.load.enter();
    next.run(req).await
}

/// API Priority and Fairness ([`crate::flowcontrol`]): a seat, a turn in
/// a queue, or 429.
pub async fn flow_control(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    crate::flowcontrol::filter(&state.flowcontrol, req, next).await
}

/// Authentication: sets the request's [`UserInfo`] or answers 401.
pub async fn authenticate(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let conn = req.extensions().get::<ConnectionInfo>().cloned();
    let started = std::time::Instant::now();
    let result = state
        .authn
        .authenticate(&state.objects, conn.as_ref(), req.headers())
        .await;
    match result {
        Ok(user) => {
            state
                .metrics
                .authenticated("success", started.elapsed(), Some(&user.username));
            if let Some(log) = req.extensions().get::<Arc<crate::logging::RequestLog>>() {
                let _ = log.user.set(user.username.clone());
            }
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(e) => {
            let result = match e {
                wasm_apiserver_api::ApiError::Unauthorized(_) => "failure",
                _ => "error",
            };
            state.metrics.authenticated(result, started.elapsed(), None);
            ErrorResponse(e).into_response()
        }
    }
}

/// Authorization: 403 unless an authorizer allows the request.
pub async fn authorize(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let (Some(info), Some(user)) = (
        req.extensions().get::<RequestInfo>(),
        req.extensions().get::<UserInfo>(),
    ) else {
        return ErrorResponse(wasm_apiserver_api::ApiError::Internal(
            "request without identity".into(),
        ))
        .into_response();
    };
    let attrs = crate::authz::attributes(info, user);
    let started = std::time::Instant::now();
    let (decision, decider) = state.authz.authorize_request_by(&attrs).await;
    let result = match (&decision, decider) {
        (wasm_apiserver_api::rbac::Decision::Allow(_), _) => "allowed",
        (_, Some(_)) => "denied",
        (_, None) => "no-opinion",
    };
    state.metrics.authorized(result, started.elapsed(), decider);
    if let Some(a) = req.extensions().get::<Annotations>() {
        a.add([
            (
                "authorization.k8s.io/decision".to_string(),
                if decision.is_allowed() {
                    "allow"
                } else {
                    "forbid"
                }
                .to_string(),
            ),
            (
                "authorization.k8s.io/reason".to_string(),
                decision.reason().to_string(),
            ),
        ]);
    }
    match decision {
        wasm_apiserver_api::rbac::Decision::Allow(_) => next.run(req).await,
        wasm_apiserver_api::rbac::Decision::NoOpinion(reason) => {
            tracing::debug!(user = %attrs.user, verb = %attrs.verb, path = %attrs.path, %reason, "forbidden");
            ErrorResponse(crate::authz::forbidden(&attrs, &reason)).into_response()
        }
    }
}

/// Impersonation (`kubectl --as`, `--as-group`): `Impersonate-User`,
/// `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-*` headers
/// replace the request's user when the real user may `impersonate` each of
/// them, as upstream's impersonation filter.
pub async fn impersonate(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    let user_h = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(String::from))
        .collect();
    let uid = headers
        .get("impersonate-uid")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let mut extra: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (name, value) in headers.iter() {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-")
            && let Ok(v) = value.to_str()
        {
            extra
                .entry(key.to_string())
                .or_default()
                .push(v.to_string());
        }
    }
    if user_h.is_none() && (!groups.is_empty() || uid.is_some() || !extra.is_empty()) {
        return ErrorResponse(wasm_apiserver_api::ApiError::BadRequest(
            "requested impersonation of groups, uid or extra without impersonating a user".into(),
        ))
        .into_response();
    }
    let Some(target) = user_h else {
        return next.run(req).await;
    };
    let Some(real) = req.extensions().get::<UserInfo>().cloned() else {
        return next.run(req).await;
    };
    let attributes =
        |resource: &str, name: &str, namespace: Option<&str>, subresource: Option<&str>| {
            wasm_apiserver_api::rbac::Attributes {
                user: real.username.clone(),
                groups: real.groups.clone(),
                verb: "impersonate".into(),
                // As upstream: users, groups and serviceaccounts are core; uids and
                // userextras are in authentication.k8s.io.
                api_group: if matches!(resource, "uids" | "userextras") {
                    "authentication.k8s.io".into()
                } else {
                    String::new()
                },
                resource: resource.into(),
                subresource: subresource.map(String::from),
                namespace: namespace.map(String::from),
                name: Some(name.into()),
                is_resource_request: true,
                ..Default::default()
            }
        };
    let mut checks = Vec::new();
    match target
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, name)) => checks.push(attributes("serviceaccounts", name, Some(ns), None)),
        None => checks.push(attributes("users", &target, None, None)),
    }
    checks.extend(groups.iter().map(|g| attributes("groups", g, None, None)));
    if let Some(u) = &uid {
        checks.push(attributes("uids", u, None, None));
    }
    for (key, values) in &extra {
        checks.extend(
            values
                .iter()
                .map(|v| attributes("userextras", v, None, Some(key))),
        );
    }
    // Every authorization mode decides, wasm authorizers included.
    for attrs in &checks {
        if let wasm_apiserver_api::rbac::Decision::NoOpinion(r) =
            state.authz.authorize_request(attrs).await
        {
            return ErrorResponse(crate::authz::forbidden(attrs, &r)).into_response();
        }
    }
    let mut groups = groups;
    if target != "system:anonymous" && !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    let user = UserInfo {
        username: target,
        uid: uid.unwrap_or_default(),
        groups,
        extra,
    };
    if let Some(audited) = req.extensions().get::<ImpersonatedUser>() {
        audited.set(&user);
    }
    req.extensions_mut().insert(user);
    next.run(req).await
}

/// The audit middleware.
pub async fn audit(State(state): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let Some(log) = state.audit.clone() else {
        return next.run(req).await;
    };
    let (Some(info), Some(user)) = (
        req.extensions().get::<RequestInfo>().cloned(),
        req.extensions().get::<UserInfo>().cloned(),
    ) else {
        return next.run(req).await;
    };
    let attrs = crate::authz::attributes(&info, &user);
    let cfg = log.config_for(&attrs);
    if cfg.level == Level::None {
        return next.run(req).await;
    }
    let annotations = Annotations::default();
    req.extensions_mut().insert(annotations.clone());
    let impersonated = ImpersonatedUser::default();
    req.extensions_mut().insert(impersonated.clone());
    let audit_id = req
        .extensions()
        .get::<Arc<crate::logging::RequestLog>>()
        .map(|l| l.audit_id.clone())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut record = Record {
        audit_id,
        request_uri: req.uri().to_string(),
        verb: info.verb.clone(),
        user: api_user(&user),
        source_ips: req
            .extensions()
            .get::<ConnectionInfo>()
            .map(|c| vec![c.peer.ip().to_string()])
            .unwrap_or_default(),
        user_agent: req
            .headers()
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .map(String::from),
        object_ref: info.is_resource_request.then(|| ObjectRef {
            resource: info.resource.clone(),
            namespace: info.namespace.clone().unwrap_or_default(),
            name: info.name.clone().unwrap_or_default(),
            api_group: info.api_group.clone(),
            api_version: info.api_version.clone(),
            subresource: info.subresource.clone().unwrap_or_default(),
            ..Default::default()
        }),
        request_received: chrono::Utc::now(),
        ..Default::default()
    };
    if cfg.level >= Level::Request
        && matches!(info.verb.as_str(), "create" | "update" | "patch" | "delete")
    {
        let (parts, body) = req.into_parts();
        let bytes = to_bytes(body, state.max_request_bytes)
            .await
            .unwrap_or_default();
        let ct = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        record.request_object = if ct.starts_with("application/vnd.kubernetes.protobuf") {
            wasm_apiserver_api::protobuf::decode(&bytes).ok()
        } else if ct.contains("yaml") {
            serde_yaml::from_slice::<Value>(&bytes).ok()
        } else {
            serde_json::from_slice::<Value>(&bytes).ok()
        };
        req = Request::from_parts(parts, Body::from(bytes));
    }
    log.emit(
        &record,
        cfg.level,
        Stage::RequestReceived,
        &cfg.omit_stages,
        cfg.omit_managed_fields,
    );

    let resp = next.run(req).await;
    record.impersonated_user = impersonated.get();
    let code = resp.status().as_u16();
    if info.verb == "watch" && code == 200 {
        record.annotations = annotations.0.lock().expect("audit annotations").clone();
        record.response_status = Some(audit::response_status(code, None));
        log.emit(
            &record,
            cfg.level,
            Stage::ResponseStarted,
            &cfg.omit_stages,
            cfg.omit_managed_fields,
        );
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let body_json = serde_json::from_slice::<Value>(&bytes).ok();
    let status_body = body_json.as_ref().filter(|b| b["kind"] == "Status");
    record.response_status = Some(audit::response_status(code, status_body));
    if cfg.level >= Level::RequestResponse {
        record.response_object = body_json.clone();
    }
    record.annotations = annotations.0.lock().expect("audit annotations").clone();
    log.emit(
        &record,
        cfg.level,
        Stage::ResponseComplete,
        &cfg.omit_stages,
        cfg.omit_managed_fields,
    );
    Response::from_parts(parts, Body::from(bytes))
}
