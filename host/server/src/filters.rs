//! The request pipeline before the handlers, in request order:
//! request info → authentication → authorization. Admission runs inside the
//! object store, where the decoded object is known.
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
    match state.authn.authenticate(&state.objects, conn.as_ref(), req.headers()).await {
        Ok(user) => {
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(e) => ErrorResponse(e).into_response(),
    }
}

/// Authorization: 403 unless an authorizer allows the request.
pub async fn authorize(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let (Some(info), Some(user)) = (req.extensions().get::<RequestInfo>(), req.extensions().get::<UserInfo>()) else {
        return ErrorResponse(wasm_apiserver_api::ApiError::Internal("request without identity".into())).into_response();
    };
    let attrs = crate::authz::attributes(info, user);
    match state.authz.authorize(&attrs) {
        wasm_apiserver_api::rbac::Decision::Allow(_) => next.run(req).await,
        wasm_apiserver_api::rbac::Decision::NoOpinion(reason) => {
            tracing::debug!(user = %attrs.user, verb = %attrs.verb, path = %attrs.path, %reason, "forbidden");
            ErrorResponse(crate::authz::forbidden(&attrs, &reason)).into_response()
        }
    }
}
