//! The request pipeline before the handlers, in request order:
//! request info → authentication → (audit, [`crate::audit`]) →
//! impersonation → authorization. Admission runs inside the object store,
//! where the decoded object is known.
//!
//! Authentication is [`crate::authn`], authorization [`crate::authz`].

use crate::error::ErrorResponse;
use crate::request::{self, RequestInfo};
use crate::server::{AppState, ConnectionInfo};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use std::sync::Arc;

pub use wasm_apiserver_plugins::UserInfo;

/// Parses the [`RequestInfo`] once for everything after it.
pub async fn with_request_info(mut req: Request, next: Next) -> Response {
    let info: RequestInfo = request::parse(req.method(), req.uri().path(), req.uri().query());
    req.extensions_mut().insert(info);
    next.run(req).await
}

/// Authentication: sets the request's [`UserInfo`] or answers 401.
pub async fn authenticate(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let conn = req.extensions().get::<ConnectionInfo>().cloned();
    match state
        .authn
        .authenticate(&state.objects, conn.as_ref(), req.headers())
        .await
    {
        Ok(user) => {
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(e) => ErrorResponse(e).into_response(),
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
    let decision = state.authz.authorize_request(&attrs).await;
    if let Some(a) = req.extensions().get::<crate::audit::Annotations>() {
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
    if let Some(audited) = req.extensions().get::<crate::audit::ImpersonatedUser>() {
        audited.set(&user);
    }
    req.extensions_mut().insert(user);
    next.run(req).await
}
