//! The connect subresources (upstream's `UpgradeAwareHandler` in
//! `apimachinery/pkg/util/proxy`): `pods/log`, `pods/exec`, `pods/attach`,
//! `pods/portforward`, `pods/proxy`, `nodes/proxy` and `services/proxy`,
//! after this server's authentication, audit, flow control and
//! authorization. Where each goes is the registry's
//! ([`Kubelets::locate`]); this module sends the request there and gives
//! the answer back:
//!
//! * a plain request (a log, a proxied `GET`) streams both ways, the
//!   answer's body chunk by chunk as the peer writes it, so a client that
//!   stops reading stops the peer through TCP's flow control instead of
//!   filling this server's memory;
//! * an upgrade request (`Connection: Upgrade`: WebSocket with the
//!   `v5.channel.k8s.io` … `portforward.k8s.io` subprotocols, or SPDY/3.1
//!   with `X-Stream-Protocol-Version`) is forwarded with its upgrade
//!   headers; when the peer answers `101 Switching Protocols`, the client
//!   gets that `101` with the peer's headers and the two upgraded
//!   connections are spliced byte for byte both ways. The server never
//!   parses the stream protocol, so every protocol a kubelet speaks works
//!   through it, SPDY included; a peer that refuses the upgrade has its
//!   status and body passed through.
//!
//! Dialling a kubelet and waiting for its answer's headers are bounded by
//! `--kubelet-timeout` (a proxied pod or endpoint by `--request-timeout`);
//! the stream that follows has no deadline.
//!
//! [`Kubelets::locate`]: wasm_apiserver_registry::kubelet::Kubelets::locate

use crate::state::AppState;
use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_api::request::query_pairs;
use wasm_apiserver_registry::aggregator::error_chain;
use wasm_apiserver_registry::kubelet::{ConnectRequest, Via};
use wasm_apiserver_registry::outbound::{self, BoxError};

/// Headers that describe one hop (RFC 9110 §7.6.1); `connection` and
/// `upgrade` go on for an upgrade request.
const HOP_BY_HOP: [&str; 6] = [
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

/// What a connect request is about (from its `RequestInfo`).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub id: &'a str,
    pub sub: &'a str,
    pub path: &'a str,
}

/// Whether `<resource>/<sub>` of the core group is a connect subresource.
pub fn is_connect(group: &str, resource: &str, sub: &str) -> bool {
    group.is_empty()
        && matches!(
            (resource, sub),
            ("pods", "log" | "exec" | "attach" | "portforward" | "proxy")
                | ("nodes" | "services", "proxy")
        )
}

/// Whether a request asks to switch protocols (`Connection: Upgrade` and
/// an `Upgrade` header).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The headers sent on: the caller's, less hop-by-hop headers (its
/// upgrade headers kept when it upgrades), its credentials and identity
/// headers (already resolved into the user, and never the peer's to see).
fn outgoing_headers(incoming: &HeaderMap, upgrade: bool) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(incoming.len());
    for (name, value) in incoming {
        let n = name.as_str();
        let dropped = HOP_BY_HOP.contains(&n)
            || (!upgrade && (n == "connection" || n == "upgrade"))
            || n == "host"
            || n == "authorization"
            || n.starts_with("impersonate-")
            || n.starts_with("x-remote-");
        if !dropped {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// Serves a connect subresource: `<resource>/<id>/<sub>` (`id` is the
/// name in the path, with a `:port` for a proxy).
pub async fn connect(
    state: &AppState,
    target: Target<'_>,
    mut parts: Parts,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(kubelets) = state.kubelets.clone() else {
        return Err(ApiError::ServiceUnavailable(format!(
            "{}/{}: no kubelet connection is configured",
            target.resource, target.sub
        )));
    };
    let raw_query = parts.uri.query();
    let q = query_pairs(raw_query.unwrap_or_default()).map_err(ApiError::BadRequest)?;
    let req = ConnectRequest {
        resource: target.resource,
        namespace: target.namespace,
        id: target.id,
        sub: target.sub,
        path: target.path,
        raw_query,
        query: &q,
    };
    let location = kubelets.locate(&state.objects, &req).await?;
    let sub = target.sub;
    let upgrade = is_upgrade(&parts.headers);
    if location.stream && !upgrade {
        return Err(ApiError::BadRequest("Upgrade request required".into()));
    }
    let Some(url) = location.url else {
        // The log of a pod no node runs: empty, as upstream.
        return Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "").into_response());
    };
    let timeout = match location.via {
        Via::Kubelet | Via::KubeletUnverified => kubelets.config.timeout,
        Via::Proxy => state.request_timeout,
    };
    let mut out = hyper::Request::builder()
        .method(parts.method.clone())
        .uri(url.as_str());
    if let Some(h) = out.headers_mut() {
        *h = outgoing_headers(&parts.headers, upgrade);
    }
    let on_client_upgrade = if upgrade {
        parts.extensions.remove::<hyper::upgrade::OnUpgrade>()
    } else {
        None
    };
    let out_body = if upgrade {
        outbound::full(bytes::Bytes::new())
    } else {
        body.map_err(|e| Box::new(e) as BoxError).boxed_unsync()
    };
    let out = out
        .body(out_body)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let client = kubelets.client(location.via).clone();
    let answered = tokio::time::timeout(timeout, client.request(out)).await;
    let mut resp = match answered {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            let why = error_chain(&e);
            tracing::debug!(%url, error = %why, "connect request failed");
            return Err(unreachable(location.via, &url, &why));
        }
        Err(_) => {
            tracing::debug!(%url, ?timeout, "connect request timed out");
            return Err(unreachable(
                location.via,
                &url,
                "timeout awaiting response headers",
            ));
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_side) = on_client_upgrade else {
            return Err(ApiError::Internal(
                "the connection cannot be upgraded".into(),
            ));
        };
        let peer_side = hyper::upgrade::on(&mut resp);
        let (rparts, _) = resp.into_parts();
        tokio::spawn(splice(client_side, peer_side, url));
        let mut answer = Response::new(Body::empty());
        *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        *answer.headers_mut() = rparts.headers;
        return Ok(answer);
    }
    let (mut rparts, rbody) = resp.into_parts();
    for h in HOP_BY_HOP {
        rparts.headers.remove(h);
    }
    rparts.headers.remove(header::CONNECTION);
    rparts.headers.remove(header::UPGRADE);
    if sub == "log" && !rparts.headers.contains_key(header::CONTENT_TYPE) {
        rparts
            .headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    Ok(Response::from_parts(rparts, Body::new(rbody)))
}

/// Upstream's answers for a peer that cannot be reached: the proxy
/// transport's 503 for proxies, a 500 naming the kubelet request for the
/// kubelet's own subresources.
fn unreachable(via: Via, url: &str, why: &str) -> ApiError {
    match via {
        Via::Proxy => ApiError::ServiceUnavailable(format!("error trying to reach service: {why}")),
        Via::Kubelet | Via::KubeletUnverified => {
            ApiError::Internal(format!("error dialing backend: {url:?}: {why}"))
        }
    }
}

/// Copies bytes both ways between the client's and the peer's upgraded
/// connections until both directions end (each copy holds one buffer, so
/// a slow side slows the other instead of growing memory).
async fn splice(client: hyper::upgrade::OnUpgrade, peer: hyper::upgrade::OnUpgrade, url: String) {
    let (client, peer) = match tokio::join!(client, peer) {
        (Ok(c), Ok(p)) => (c, p),
        (c, p) => {
            tracing::debug!(%url, client = ?c.err(), peer = ?p.err(), "upgrade failed");
            return;
        }
    };
    let mut client = hyper_util::rt::TokioIo::new(client);
    let mut peer = hyper_util::rt::TokioIo::new(peer);
    match tokio::io::copy_bidirectional(&mut client, &mut peer).await {
        Ok((up, down)) => tracing::debug!(%url, up, down, "stream ended"),
        Err(e) => tracing::debug!(%url, error = %e, "stream ended with an error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_headers_go_on_credentials_do_not() {
        let mut h = HeaderMap::new();
        h.insert("connection", "Upgrade".parse().unwrap());
        h.insert("upgrade", "websocket".parse().unwrap());
        h.insert(
            "sec-websocket-protocol",
            "v5.channel.k8s.io".parse().unwrap(),
        );
        h.insert("authorization", "Bearer x".parse().unwrap());
        h.insert("impersonate-user", "root".parse().unwrap());
        h.insert("x-remote-user", "root".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        assert!(is_upgrade(&h));
        let out = outgoing_headers(&h, true);
        assert_eq!(out.get("upgrade").unwrap(), "websocket");
        assert_eq!(out.get("connection").unwrap(), "Upgrade");
        assert!(out.get("sec-websocket-protocol").is_some());
        for gone in [
            "authorization",
            "impersonate-user",
            "x-remote-user",
            "transfer-encoding",
        ] {
            assert!(out.get(gone).is_none(), "{gone}");
        }
        let plain = outgoing_headers(&h, false);
        assert!(plain.get("upgrade").is_none() && plain.get("connection").is_none());
        let mut keep_alive = HeaderMap::new();
        keep_alive.insert("connection", "keep-alive".parse().unwrap());
        assert!(!is_upgrade(&keep_alive));
        assert!(is_connect("", "pods", "exec"));
        assert!(is_connect("", "nodes", "proxy"));
        assert!(!is_connect("", "nodes", "status"));
        assert!(!is_connect("apps", "pods", "log"));
    }
}
