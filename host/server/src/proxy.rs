//! The aggregator's proxy (kube-aggregator's `proxyHandler`): a request for
//! a group version a remote APIService claims goes, after this server's
//! authentication, audit, impersonation, flow control and authorization,
//! to the extension API server the availability controller resolved for it
//! ([`wasm_apiserver_registry::aggregator`]), over [`outbound`]'s TLS with
//! the front-proxy client certificate. The caller's identity travels in
//! the request-header headers (`X-Remote-User`, one `X-Remote-Group` per
//! group, `X-Remote-Extra-<key>` per extra value); the caller's own
//! credentials and any identity headers it sent do not. The answer streams
//! back as it comes (watches, chunked lists), status and body untouched.
//!
//! [`outbound`]: wasm_apiserver_registry::outbound

use crate::error::ErrorResponse;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use std::sync::Arc;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_plugins::UserInfo;
use wasm_apiserver_registry::aggregator::{ProxyHeaders, Route, error_chain};
use wasm_apiserver_registry::outbound::BoxError;

/// Upstream's message for a group version whose extension is unavailable.
const UNAVAILABLE: &str = "the server is currently unable to handle the request";

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether a request header stays out of the proxied request: hop-by-hop
/// headers, the caller's credentials and impersonation (already resolved
/// into the user), and any identity header the caller sent itself.
fn dropped(name: &HeaderName, route_headers: &[&str], extra_prefix: &str) -> bool {
    let n = name.as_str();
    HOP_BY_HOP.contains(&n)
        || n == "host"
        || n == "authorization"
        || n.starts_with("impersonate-")
        || n.starts_with("x-remote-")
        || route_headers.iter().any(|h| h.eq_ignore_ascii_case(n))
        || (!extra_prefix.is_empty()
            && n.len() >= extra_prefix.len()
            && n[..extra_prefix.len()].eq_ignore_ascii_case(extra_prefix))
}

/// `key` as a header-name suffix: what a header name can't carry is
/// percent-encoded, as upstream escapes extra keys.
fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-!#$&'*+.^_`|~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The headers of the proxied request.
fn outgoing_headers(names: &ProxyHeaders, incoming: &HeaderMap, user: &UserInfo) -> HeaderMap {
    let route_headers = [
        names.user.as_str(),
        names.group.as_str(),
        names.uid.as_str(),
    ];
    let mut out = HeaderMap::with_capacity(incoming.len() + user.groups.len() + 1);
    for (name, value) in incoming {
        if !dropped(name, &route_headers, &names.extra_prefix) {
            out.append(name.clone(), value.clone());
        }
    }
    let mut set = |name: &str, value: &str| {
        if let (Ok(n), Ok(v)) = (
            HeaderName::try_from(name),
            HeaderValue::try_from(value.to_string()),
        ) {
            out.append(n, v);
        }
    };
    set(&names.user, &user.username);
    if !names.uid.is_empty() && !user.uid.is_empty() {
        set(&names.uid, &user.uid);
    }
    for g in &user.groups {
        set(&names.group, g);
    }
    for (key, values) in &user.extra {
        let name = format!("{}{}", names.extra_prefix, escape_key(key));
        for v in values {
            set(&name, v);
        }
    }
    out
}

/// Forwards `req` to `route`'s extension API server and streams its answer
/// back. `long_running` (a watch) has no deadline; any other request gets
/// 504 when the extension has not answered within `--request-timeout`.
pub async fn forward(
    state: &AppState,
    route: Arc<Route>,
    req: Request,
    user: &UserInfo,
    long_running: bool,
) -> Response {
    let backend = match (&route.backend, route.available) {
        (Some(b), true) => b,
        _ => {
            return ErrorResponse(ApiError::ServiceUnavailable(UNAVAILABLE.into())).into_response();
        }
    };
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut out = hyper::Request::builder()
        .method(parts.method.clone())
        .uri(format!("{}{path}", backend.base));
    if let Some(h) = out.headers_mut() {
        *h = outgoing_headers(&state.aggregator.headers, &parts.headers, user);
    }
    let body = body.map_err(|e| Box::new(e) as BoxError).boxed_unsync();
    let out = match out.body(body) {
        Ok(r) => r,
        Err(e) => return ErrorResponse(ApiError::BadRequest(e.to_string())).into_response(),
    };
    let sent = backend.client.request(out);
    let answered = if long_running {
        Ok(sent.await)
    } else {
        tokio::time::timeout(state.request_timeout, sent).await
    };
    let resp = match answered {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            let why = error_chain(&e);
            tracing::debug!(apiservice = %route.name, error = %why, "proxied request failed");
            // The backend may be gone: have its availability looked at now.
            state.aggregator.suspect(&route.name);
            return ErrorResponse(ApiError::ServiceUnavailable(format!(
                "error trying to reach service: {why}"
            )))
            .into_response();
        }
        Err(_) => {
            return ErrorResponse(ApiError::Timeout(
                "Timeout: request did not complete within the allotted timeout".into(),
            ))
            .into_response();
        }
    };
    let (mut parts, body) = resp.into_parts();
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    Response::from_parts(parts, Body::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_identity_headers_and_credentials_are_not_forwarded() {
        let mut incoming = HeaderMap::new();
        incoming.insert("authorization", "Bearer secret".parse().unwrap());
        incoming.insert("x-remote-user", "admin".parse().unwrap());
        incoming.insert("X-Remote-Extra-Scopes", "all".parse().unwrap());
        incoming.insert("impersonate-user", "root".parse().unwrap());
        incoming.insert("connection", "keep-alive".parse().unwrap());
        incoming.insert("accept", "application/json".parse().unwrap());
        let user = UserInfo {
            username: "alice".into(),
            uid: "u-1".into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            extra: [(
                "example.org/Team a".to_string(),
                vec!["x".to_string(), "y".to_string()],
            )]
            .into_iter()
            .collect(),
        };
        let out = outgoing_headers(&ProxyHeaders::default(), &incoming, &user);
        assert_eq!(out.get("accept").unwrap(), "application/json");
        assert!(out.get("authorization").is_none());
        assert!(out.get("impersonate-user").is_none());
        assert!(out.get("connection").is_none());
        assert!(out.get("x-remote-extra-scopes").is_none());
        let all =
            |n: &str| -> Vec<&str> { out.get_all(n).iter().map(|v| v.to_str().unwrap()).collect() };
        assert_eq!(all("x-remote-user"), ["alice"]);
        assert_eq!(all("x-remote-group"), ["dev", "system:authenticated"]);
        assert_eq!(all("x-remote-extra-example.org%2FTeam%20a"), ["x", "y"]);
        // No uid header unless one is configured (upstream's default).
        assert!(out.get("x-remote-uid").is_none());
    }
}
