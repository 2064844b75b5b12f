//! Request info: what a request is about (verb, group/version/resource,
//! namespace, name, subresource), parsed from the path once, as upstream's
//! `RequestInfoFactory` does, so authorization and handlers share it; the
//! query-string decoding both use; and what the connection knows about the
//! client ([`ConnectionInfo`]). These are the types every layer of the server
//! shares, so they live at the bottom.

use std::net::SocketAddr;

/// What the connection knows about a request: the peer address and the
/// verified client certificate's subject (CN, O).
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub peer: SocketAddr,
    /// The user and groups of a client certificate a client CA signed.
    pub client_cert: Option<(String, Vec<String>)>,
    /// Why a presented client certificate was refused (the request gets 401).
    pub client_cert_error: Option<String>,
    /// The CN of a client certificate the request-header CA
    /// (`--requestheader-client-ca-file`) signed: a front proxy, whose
    /// `X-Remote-*` headers name the user when the CN is allowed.
    pub front_proxy: Option<String>,
}

/// Decodes a request body of media type `media` (the Content-Type without
/// its parameters; empty reads as JSON): JSON, YAML (one document, aliases
/// expanded within serde_yaml's limits) or Kubernetes protobuf, into a JSON
/// object; a 400 `Status` when it does not decode to an object, a 415 for
/// another media type.
pub fn decode_body(media: &str, body: &[u8]) -> Result<serde_json::Value, crate::ApiError> {
    use crate::ApiError;
    let value: serde_json::Value = match media {
        "application/json" | "" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding request body: {e}")))?,
        "application/vnd.kubernetes.protobuf" => crate::protobuf::decode(body).map_err(|e| {
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

/// The decoded `key=value` pairs of a query string, in order.
pub fn query_pairs(raw: &str) -> Result<Vec<(String, String)>, String> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| {
                percent_decode(&s.replace('+', " "))
                    .ok_or_else(|| format!("invalid query parameter {s:?}"))
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

/// The parsed target of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// False for `/version`, `/healthz`, discovery and other non-resource paths.
    pub is_resource_request: bool,
    pub path: String,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete,
    /// deletecollection (or the lower-case HTTP method for non-resource paths).
    pub verb: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub subresource: Option<String>,
    pub name: Option<String>,
}

/// Subresources of a namespace that are not namespaced resources.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Parses a request path and (upper-case HTTP) method.
pub fn parse(method: &str, path: &str, query: Option<&str>) -> RequestInfo {
    let mut info = RequestInfo {
        path: path.to_string(),
        verb: method.to_ascii_lowercase(),
        ..Default::default()
    };
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let rest = match parts.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => {
            info.api_version = version.to_string();
            rest
        }
        ["apis", group, version, rest @ ..] if !rest.is_empty() => {
            info.api_group = group.to_string();
            info.api_version = version.to_string();
            rest
        }
        _ => return info,
    };
    info.is_resource_request = true;
    let mut rest: Vec<&str> = rest.to_vec();
    let mut legacy_watch = false;
    if rest.first() == Some(&"watch") {
        legacy_watch = true;
        rest.remove(0);
    }
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        info.namespace = Some(rest[1].to_string());
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest.drain(..2);
        }
    }
    info.resource = rest.first().map(|s| s.to_string()).unwrap_or_default();
    info.name = rest.get(1).map(|s| s.to_string());
    info.subresource = rest.get(2).map(|s| s.to_string());
    // As upstream: the first `watch` parameter, decoded, as a boolean
    // (anything but `0` and `false`, any case). An undecodable query is the
    // handler's to reject.
    let watch_param = query
        .and_then(|q| query_pairs(q).ok())
        .and_then(|pairs| pairs.into_iter().find(|(k, _)| k == "watch"))
        .is_some_and(|(_, v)| v != "0" && !v.eq_ignore_ascii_case("false"));
    info.verb = match method {
        "GET" | "HEAD" if legacy_watch || watch_param => "watch",
        "GET" | "HEAD" if info.name.is_some() => "get",
        "GET" | "HEAD" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if info.name.is_some() => "delete",
        "DELETE" => "deletecollection",
        _ => "unknown",
    }
    .to_string();
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_upstream() {
        let i = parse("GET", "/api/v1/namespaces/default/configmaps/a", None);
        assert_eq!(
            (
                i.verb.as_str(),
                i.namespace.as_deref(),
                i.resource.as_str(),
                i.name.as_deref()
            ),
            ("get", Some("default"), "configmaps", Some("a"))
        );
        let i = parse("GET", "/api/v1/namespaces/default", None);
        assert_eq!(
            (
                i.resource.as_str(),
                i.name.as_deref(),
                i.namespace.as_deref()
            ),
            ("namespaces", Some("default"), Some("default"))
        );
        let i = parse("PUT", "/api/v1/namespaces/x/finalize", None);
        assert_eq!(
            (
                i.resource.as_str(),
                i.subresource.as_deref(),
                i.verb.as_str()
            ),
            ("namespaces", Some("finalize"), "update")
        );
        let i = parse(
            "GET",
            "/apis/coordination.k8s.io/v1/leases",
            Some("watch=1&x=y"),
        );
        assert_eq!(
            (i.api_group.as_str(), i.verb.as_str(), i.namespace),
            ("coordination.k8s.io", "watch", None)
        );
        for (query, verb) in [
            ("watch=True", "watch"),
            ("watch=false", "list"),
            ("watch=0", "list"),
            ("watch=%66alse", "list"),
            ("watch=false&watch=true", "list"),
            ("watch", "watch"),
        ] {
            let i = parse("GET", "/api/v1/configmaps", Some(query));
            assert_eq!(i.verb, verb, "{query}");
        }
        let i = parse("DELETE", "/api/v1/namespaces/n/secrets", None);
        assert_eq!(i.verb, "deletecollection");
        assert!(!parse("GET", "/apis/coordination.k8s.io", None).is_resource_request);
        assert!(!parse("GET", "/version", None).is_resource_request);
    }
}
