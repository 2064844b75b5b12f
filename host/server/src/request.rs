//! Request info: what a request is about (verb, group/version/resource,
//! namespace, name, subresource), parsed from the path once, as upstream's
//! `RequestInfoFactory` does, so authorization and handlers share it.

use axum::http::Method;

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

/// Parses a request path and method.
pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
    let mut info = RequestInfo {
        path: path.to_string(),
        verb: method.as_str().to_ascii_lowercase(),
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
        .and_then(|q| crate::handlers::query_pairs(q).ok())
        .and_then(|pairs| pairs.into_iter().find(|(k, _)| k == "watch"))
        .is_some_and(|(_, v)| v != "0" && !v.eq_ignore_ascii_case("false"));
    info.verb = match *method {
        Method::GET | Method::HEAD if legacy_watch || watch_param => "watch",
        Method::GET | Method::HEAD if info.name.is_some() => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if info.name.is_some() => "delete",
        Method::DELETE => "deletecollection",
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
        let i = parse(
            &Method::GET,
            "/api/v1/namespaces/default/configmaps/a",
            None,
        );
        assert_eq!(
            (
                i.verb.as_str(),
                i.namespace.as_deref(),
                i.resource.as_str(),
                i.name.as_deref()
            ),
            ("get", Some("default"), "configmaps", Some("a"))
        );
        let i = parse(&Method::GET, "/api/v1/namespaces/default", None);
        assert_eq!(
            (
                i.resource.as_str(),
                i.name.as_deref(),
                i.namespace.as_deref()
            ),
            ("namespaces", Some("default"), Some("default"))
        );
        let i = parse(&Method::PUT, "/api/v1/namespaces/x/finalize", None);
        assert_eq!(
            (
                i.resource.as_str(),
                i.subresource.as_deref(),
                i.verb.as_str()
            ),
            ("namespaces", Some("finalize"), "update")
        );
        let i = parse(
            &Method::GET,
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
            let i = parse(&Method::GET, "/api/v1/configmaps", Some(query));
            assert_eq!(i.verb, verb, "{query}");
        }
        let i = parse(&Method::DELETE, "/api/v1/namespaces/n/secrets", None);
        assert_eq!(i.verb, "deletecollection");
        assert!(!parse(&Method::GET, "/apis/coordination.k8s.io", None).is_resource_request);
        assert!(!parse(&Method::GET, "/version", None).is_resource_request);
    }
}
