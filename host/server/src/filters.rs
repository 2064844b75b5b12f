//! The request pipeline before the handlers, in request order:
//! request info → authentication → authorization. Admission runs inside the
//! object store, where the decoded object is known.
//!
//! Authentication is [`crate::authn`]; authorization is AlwaysAllow until
//! the access-control work lands.

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
    match state.authn.authenticate(conn.as_ref(), req.headers()).await {
        Ok(user) => {
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(e) => ErrorResponse(e).into_response(),
    }
}

/// Authorization (placeholder): AlwaysAllow.
pub async fn authorize(req: Request, next: Next) -> Response {
    next.run(req).await
}
