//! The request pipeline before the handlers, in request order:
//! request info → authentication → authorization. Admission runs inside the
//! object store, where the decoded object is known.
//!
//! Authentication and authorization are placeholders until the access-control
//! work lands: every request acts as the cluster admin, which is why the
//! server binds to loopback by default.

use crate::request::{self, RequestInfo};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

pub use wasm_apiserver_plugins::UserInfo;

/// Parses the [`RequestInfo`] once for everything after it.
pub async fn with_request_info(mut req: Request, next: Next) -> Response {
    let info: RequestInfo = request::parse(req.method(), req.uri().path(), req.uri().query());
    req.extensions_mut().insert(info);
    next.run(req).await
}

/// Authentication (placeholder): everyone is the admin.
pub async fn authenticate(mut req: Request, next: Next) -> Response {
    req.extensions_mut().insert(UserInfo {
        username: "system:admin".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
        ..Default::default()
    });
    next.run(req).await
}

/// Authorization (placeholder): AlwaysAllow.
pub async fn authorize(req: Request, next: Next) -> Response {
    next.run(req).await
}
