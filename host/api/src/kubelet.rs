//! Where a connect subresource goes, as upstream's REST objects compute it
//! (`pkg/registry/core/pod/strategy.go` `LogLocation`, `ExecLocation`,
//! `AttachLocation`, `PortForwardLocation`, `ResourceLocation`;
//! `pkg/registry/core/node/strategy.go`; the service proxy): which
//! container, which node address and port, which path and query on the
//! kubelet, which pod or endpoint address for a proxy. Options are read
//! from the request's query and checked with upstream's messages. No IO:
//! the registry dials what this computes.

use crate::error::{ApiError, Cause, Target};
use serde_json::Value;
use std::net::IpAddr;

/// The kubelet's port when a node does not publish one
/// (`--kubelet-port`'s default).
pub const DEFAULT_KUBELET_PORT: u16 = 10250;

/// `--kubelet-preferred-address-types`' default, upstream's order.
pub const DEFAULT_ADDRESS_TYPES: [&str; 5] = [
    "Hostname",
    "InternalDNS",
    "InternalIP",
    "ExternalDNS",
    "ExternalIP",
];

/// The node address types upstream accepts in
/// `--kubelet-preferred-address-types`.
pub fn check_address_types(types: &[String]) -> Result<(), String> {
    for t in types {
        if !DEFAULT_ADDRESS_TYPES.contains(&t.as_str()) {
            return Err(format!(
                "--kubelet-preferred-address-types: unknown address type {t:?} (one of {})",
                DEFAULT_ADDRESS_TYPES.join(", ")
            ));
        }
    }
    Ok(())
}

/// Query parameters, in order, each value decoded.
pub type Params = [(String, String)];

fn param<'a>(q: &'a Params, key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Go's `strconv.ParseBool`, as the query decoder reads booleans.
fn parse_bool(key: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(ApiError::BadRequest(format!(
            "{key}: strconv.ParseBool: parsing {v:?}: invalid syntax"
        ))),
    }
}

fn flag(q: &Params, key: &str) -> Result<bool, ApiError> {
    match param(q, key) {
        None | Some("") => Ok(false),
        Some(v) => parse_bool(key, v),
    }
}

fn int(q: &Params, key: &str) -> Result<Option<i64>, ApiError> {
    match param(q, key) {
        None | Some("") => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            ApiError::BadRequest(format!(
                "{key}: strconv.ParseInt: parsing {v:?}: invalid syntax"
            ))
        }),
    }
}

/// `PodLogOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub container: String,
    pub follow: bool,
    pub previous: bool,
    pub since_seconds: Option<i64>,
    /// RFC 3339, as given.
    pub since_time: Option<String>,
    pub timestamps: bool,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    pub insecure_skip_tls_verify_backend: bool,
}

impl LogOptions {
    /// Reads and validates the options of a `pods/log` request
    /// (upstream's `ValidatePodLogOptions`: 422 `PodLogOptions`).
    pub fn parse(pod: &str, q: &Params) -> Result<LogOptions, ApiError> {
        let opts = LogOptions {
            container: param(q, "container").unwrap_or_default().to_string(),
            follow: flag(q, "follow")?,
            previous: flag(q, "previous")?,
            since_seconds: int(q, "sinceSeconds")?,
            since_time: param(q, "sinceTime")
                .filter(|s| !s.is_empty())
                .map(String::from),
            timestamps: flag(q, "timestamps")?,
            tail_lines: int(q, "tailLines")?,
            limit_bytes: int(q, "limitBytes")?,
            insecure_skip_tls_verify_backend: flag(q, "insecureSkipTLSVerifyBackend")?,
        };
        let mut causes = Vec::new();
        if let Some(t) = &opts.since_time
            && chrono::DateTime::parse_from_rfc3339(t).is_err()
        {
            return Err(ApiError::BadRequest(format!(
                "sinceTime: parsing time {t:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse"
            )));
        }
        if let Some(n) = opts.tail_lines
            && n < 0
        {
            causes.push(Cause::invalid(
                "tailLines",
                &n.to_string(),
                "must be greater than or equal to 0",
            ));
        }
        if let Some(n) = opts.limit_bytes
            && n < 1
        {
            causes.push(Cause::invalid(
                "limitBytes",
                &n.to_string(),
                "must be greater than 0",
            ));
        }
        if opts.since_seconds.is_some() && opts.since_time.is_some() {
            causes.push(Cause {
                reason: "FieldValueForbidden".into(),
                field: String::new(),
                message: "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
                    .into(),
            });
        }
        if let Some(n) = opts.since_seconds
            && n < 1
        {
            causes.push(Cause::invalid(
                "sinceSeconds",
                &n.to_string(),
                "must be greater than 0",
            ));
        }
        if !causes.is_empty() {
            return Err(ApiError::Invalid(
                Target::new("", "PodLogOptions", pod),
                causes,
            ));
        }
        Ok(opts)
    }

    /// The kubelet's query for these options (upstream's `LogLocation`;
    /// keys sorted, as Go's `url.Values.Encode`).
    pub fn kubelet_query(&self) -> String {
        let mut p: Vec<(&str, String)> = Vec::new();
        if self.follow {
            p.push(("follow", "true".into()));
        }
        if let Some(n) = self.limit_bytes {
            p.push(("limitBytes", n.to_string()));
        }
        if self.previous {
            p.push(("previous", "true".into()));
        }
        if let Some(n) = self.since_seconds {
            p.push(("sinceSeconds", n.to_string()));
        }
        if let Some(t) = &self.since_time {
            // Go formats the parsed time again as RFC 3339 (seconds).
            let t = chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_else(|_| t.clone());
            p.push(("sinceTime", t));
        }
        if let Some(n) = self.tail_lines {
            p.push(("tailLines", n.to_string()));
        }
        if self.timestamps {
            p.push(("timestamps", "true".into()));
        }
        encode(&p)
    }
}

/// `k=v&k=v`, each part percent-encoded as Go's `url.QueryEscape`.
pub fn encode(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Percent-encodes one path segment (a name in a kubelet path).
fn path_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The names of a pod's containers: regular, init, then ephemeral ones
/// (upstream's `VisitContainers` order).
fn container_names(pod: &Value) -> Vec<&str> {
    ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod["spec"][k].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// Upstream's `validateContainer`: the named container, or the only one.
pub fn choose_container(pod: &Value, container: &str) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    if !container.is_empty() {
        if container_names(pod).contains(&container) {
            return Ok(container.to_string());
        }
        return Err(ApiError::BadRequest(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    let regular: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    match regular.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(ApiError::BadRequest(format!(
            "a container name must be specified for pod {name}"
        ))),
        _ => Err(ApiError::BadRequest(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            container_names(pod).join(" ")
        ))),
    }
}

/// The node a pod is bound to, or upstream's 400 for an unscheduled pod.
pub fn pod_node(pod: &Value) -> Result<&str, ApiError> {
    pod["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "pod {} does not have a host assigned",
                pod["metadata"]["name"].as_str().unwrap_or_default()
            ))
        })
}

/// `/containerLogs/<ns>/<pod>/<container>?...`.
pub fn log_path(pod: &Value, container: &str, opts: &LogOptions) -> String {
    let q = opts.kubelet_query();
    let base = format!(
        "/containerLogs/{}/{}/{}",
        path_escape(pod["metadata"]["namespace"].as_str().unwrap_or_default()),
        path_escape(pod["metadata"]["name"].as_str().unwrap_or_default()),
        path_escape(container)
    );
    if q.is_empty() {
        base
    } else {
        format!("{base}?{q}")
    }
}

/// A streaming subresource of a pod: `exec`, `attach` or `portforward`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Exec,
    Attach,
    PortForward,
}

impl Stream {
    pub fn of(sub: &str) -> Option<Stream> {
        match sub {
            "exec" => Some(Stream::Exec),
            "attach" => Some(Stream::Attach),
            "portforward" => Some(Stream::PortForward),
            _ => None,
        }
    }
}

/// The kubelet path and query of a streaming request (upstream's
/// `streamLocation` and `PortForwardLocation`): `PodExecOptions`,
/// `PodAttachOptions` or `PodPortForwardOptions` read from the query and
/// written as the kubelet reads them.
pub fn stream_path(kind: Stream, pod: &Value, q: &Params) -> Result<String, ApiError> {
    let ns = path_escape(pod["metadata"]["namespace"].as_str().unwrap_or_default());
    let name = path_escape(pod["metadata"]["name"].as_str().unwrap_or_default());
    if kind == Stream::PortForward {
        let mut ports = Vec::new();
        for (k, v) in q {
            if k == "ports" {
                for p in v.split(',').filter(|p| !p.is_empty()) {
                    let n: u16 = p.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        ApiError::BadRequest(format!("invalid port {p:?}: must be 1-65535"))
                    })?;
                    ports.push(n.to_string());
                }
            }
        }
        pod_node(pod)?;
        let base = format!("/portForward/{ns}/{name}");
        return Ok(if ports.is_empty() {
            base
        } else {
            format!("{base}?{}", encode(&[("port", ports.join(","))]))
        });
    }
    let container = choose_container(pod, param(q, "container").unwrap_or_default())?;
    pod_node(pod)?;
    let mut p: Vec<(&str, String)> = Vec::new();
    if kind == Stream::Exec {
        for (k, v) in q {
            if k == "command" {
                p.push(("command", v.clone()));
            }
        }
    }
    for key in ["stderr", "stdin", "stdout", "tty"] {
        if flag(q, key)? {
            p.push((key, "1".into()));
        }
    }
    let verb = if kind == Stream::Exec {
        "exec"
    } else {
        "attach"
    };
    let base = format!("/{verb}/{ns}/{name}/{}", path_escape(&container));
    Ok(if p.is_empty() {
        base
    } else {
        format!("{base}?{}", encode(&p))
    })
}

/// Go's `SplitSchemeNamePort`: `name`, `name:port` or `scheme:name:port`,
/// the scheme `http`, `https` or empty.
pub fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [n] => ("", *n, ""),
        [n, p] => ("", *n, *p),
        [s, n, p] => (*s, *n, *p),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some((scheme, name, port))
}

/// Where a node's kubelet answers: the first address of the preferred
/// types (in that order) and the port the node publishes
/// (`status.daemonEndpoints.kubeletEndpoint.Port`), else `default_port`.
pub fn kubelet_address(
    node: &Value,
    preferred: &[String],
    default_port: u16,
) -> Result<(String, u16), ApiError> {
    let addresses: Vec<(&str, &str)> = node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| Some((a["type"].as_str()?, a["address"].as_str()?)))
        .filter(|(_, a)| !a.is_empty())
        .collect();
    let host = preferred
        .iter()
        .find_map(|t| addresses.iter().find(|(at, _)| at == t).map(|(_, a)| *a))
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "no preferred addresses found; known addresses: [{}]",
                addresses
                    .iter()
                    .map(|(t, a)| format!("{{{t} {a}}}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
        })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .filter(|p| *p > 0 && *p <= u16::MAX as u64)
        .map(|p| p as u16)
        .unwrap_or(default_port);
    Ok((host.to_string(), port))
}

/// `host:port`, an IPv6 address in brackets (Go's `net.JoinHostPort`).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Whether an address is a global unicast one (Go's `IsGlobalUnicast`:
/// not unspecified, loopback, multicast, link-local or broadcast).
fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// Upstream's pod `ResourceLocation` for `pods/<id>/proxy`: the pod's
/// first IP, the requested port or the first declared container port, the
/// requested scheme (`http` by default). `http://10.0.0.5:8080`.
pub fn pod_proxy_base(pod: &Value, scheme: &str, port: &str) -> Result<String, ApiError> {
    let mut port = port.to_string();
    if port.is_empty() {
        port = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| c["ports"][0]["containerPort"].as_i64())
            .map(|p| p.to_string())
            .unwrap_or_default();
    }
    let ip = pod["status"]["podIPs"][0]["ip"]
        .as_str()
        .or_else(|| pod["status"]["podIP"].as_str())
        .unwrap_or_default();
    match ip.parse::<IpAddr>() {
        Ok(addr) if is_global_unicast(addr) => {}
        _ => return Err(ApiError::BadRequest("address not allowed".into())),
    }
    let scheme = if scheme.is_empty() { "http" } else { scheme };
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    Ok(if port.is_empty() {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}:{port}")
    })
}

/// The service port a `services/<id>/proxy` request means: by name, or by
/// number, or the only one when none is given.
pub fn service_port<'a>(svc: &'a Value, port: &str) -> Result<&'a Value, ApiError> {
    let name = svc["metadata"]["name"].as_str().unwrap_or_default();
    let ports: Vec<&Value> = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let found = if port.is_empty() {
        (ports.len() == 1).then(|| ports[0])
    } else {
        ports.iter().copied().find(|p| {
            p["name"].as_str() == Some(port)
                || p["port"].as_i64().map(|n| n.to_string()).as_deref() == Some(port)
        })
    };
    found.ok_or_else(|| {
        ApiError::ServiceUnavailable(format!("no endpoints available for service {name:?}"))
    })
}

/// A ready endpoint of `svc`'s port `svc_port` among its EndpointSlices:
/// `host:port` (the first one; upstream picks at random).
pub fn service_endpoint(slices: &[Value], svc_port: &Value) -> Option<String> {
    let port_name = svc_port["name"].as_str().unwrap_or_default();
    ready_endpoint(slices, port_name).map(|(addr, port)| join_host_port(addr, port))
}

/// The first ready endpoint address among `slices` (EndpointSlices) that
/// has the port named `port_name` (`""` for an unnamed port), with that
/// port's number. Shared by the service proxy and the aggregator.
pub fn ready_endpoint<'a>(slices: &'a [Value], port_name: &str) -> Option<(&'a str, u16)> {
    for slice in slices {
        let Some(port) = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
            .and_then(|p| p["port"].as_u64())
        else {
            continue;
        };
        let ready = slice["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
            .find_map(|e| e["addresses"].as_array()?.first()?.as_str());
        if let Some(addr) = ready {
            return Some((addr, port as u16));
        }
    }
    None
}

/// The path a proxy request forwards: what follows
/// `<resource>/<name>/proxy` in the request path (`/` when nothing does).
pub fn proxy_rest(path: &str, resource: &str, name: &str) -> String {
    let marker = format!("/{resource}/{name}/proxy");
    let rest = path
        .find(&marker)
        .map(|i| &path[i + marker.len()..])
        .unwrap_or_default();
    if rest.is_empty() {
        "/".into()
    } else {
        rest.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pod(containers: &[&str]) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1",
                "containers": containers.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()}})
    }

    #[test]
    fn log_options_validate_as_upstream() {
        let e =
            LogOptions::parse("p", &q(&[("tailLines", "-1"), ("limitBytes", "0")])).unwrap_err();
        assert_eq!(e.code(), 422);
        let text = e.to_string();
        assert!(
            text.contains("tailLines: Invalid value: \"-1\": must be greater than or equal to 0"),
            "{text}"
        );
        assert!(text.contains("limitBytes"), "{text}");
        let e = LogOptions::parse(
            "p",
            &q(&[("sinceSeconds", "5"), ("sinceTime", "2024-01-01T00:00:00Z")]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("at most one of"), "{e}");
        assert_eq!(
            LogOptions::parse("p", &q(&[("follow", "maybe")]))
                .unwrap_err()
                .code(),
            400
        );
        assert_eq!(
            LogOptions::parse("p", &q(&[("sinceTime", "yesterday")]))
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn log_path_carries_every_option_sorted() {
        let o = LogOptions::parse(
            "p",
            &q(&[
                ("follow", "true"),
                ("tailLines", "3"),
                ("timestamps", "1"),
                ("limitBytes", "100"),
                ("previous", "false"),
                ("sinceTime", "2024-01-02T03:04:05.123+00:00"),
            ]),
        )
        .unwrap();
        assert_eq!(
            log_path(&pod(&["c"]), "c", &o),
            "/containerLogs/ns/p/c?follow=true&limitBytes=100&sinceTime=2024-01-02T03%3A04%3A05Z&tailLines=3&timestamps=true"
        );
        assert_eq!(
            log_path(&pod(&["c"]), "c", &LogOptions::default()),
            "/containerLogs/ns/p/c"
        );
    }

    #[test]
    fn containers_are_chosen_as_upstream() {
        assert_eq!(choose_container(&pod(&["a"]), "").unwrap(), "a");
        assert_eq!(
            choose_container(&pod(&["a", "b"]), "")
                .unwrap_err()
                .to_string(),
            "a container name must be specified for pod p, choose one of: [a b]"
        );
        assert_eq!(
            choose_container(&pod(&["a"]), "z").unwrap_err().to_string(),
            "container z is not valid for pod p"
        );
        assert_eq!(choose_container(&pod(&["a", "b"]), "b").unwrap(), "b");
        let mut unscheduled = pod(&["a"]);
        unscheduled["spec"]["nodeName"] = json!("");
        assert_eq!(
            pod_node(&unscheduled).unwrap_err().to_string(),
            "pod p does not have a host assigned"
        );
    }

    #[test]
    fn stream_paths_are_the_kubelets() {
        let p = pod(&["c"]);
        assert_eq!(
            stream_path(
                Stream::Exec,
                &p,
                &q(&[
                    ("command", "sh"),
                    ("command", "-c"),
                    ("command", "echo a b"),
                    ("stdin", "true"),
                    ("stdout", "true"),
                    ("tty", "false")
                ])
            )
            .unwrap(),
            "/exec/ns/p/c?command=sh&command=-c&command=echo+a+b&stdin=1&stdout=1"
        );
        assert_eq!(
            stream_path(Stream::Attach, &p, &q(&[("stdout", "1"), ("stderr", "1")])).unwrap(),
            "/attach/ns/p/c?stderr=1&stdout=1"
        );
        assert_eq!(
            stream_path(
                Stream::PortForward,
                &p,
                &q(&[("ports", "8080"), ("ports", "9090")])
            )
            .unwrap(),
            "/portForward/ns/p?port=8080%2C9090"
        );
        assert_eq!(
            stream_path(Stream::PortForward, &p, &q(&[("ports", "x")]))
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn node_addresses_follow_the_preferred_types() {
        let node = json!({"metadata": {"name": "n"}, "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                          {"type": "Hostname", "address": "n.local"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 12345}}}});
        let types: Vec<String> = DEFAULT_ADDRESS_TYPES
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            kubelet_address(&node, &types, 10250).unwrap(),
            ("n.local".to_string(), 12345)
        );
        let ip_first = vec!["InternalIP".to_string()];
        assert_eq!(
            kubelet_address(&node, &ip_first, 10250).unwrap().0,
            "10.0.0.1"
        );
        let none = json!({"metadata": {"name": "n"}, "status": {}});
        assert_eq!(
            kubelet_address(&none, &types, 10250).unwrap_err().code(),
            400
        );
        let no_port = json!({"status": {"addresses": [{"type": "InternalIP", "address": "::1"}]}});
        let (h, p) = kubelet_address(&no_port, &types, 10250).unwrap();
        assert_eq!(join_host_port(&h, p), "[::1]:10250");
        assert!(check_address_types(&["Hostname".into(), "Bogus".into()]).is_err());
    }

    #[test]
    fn proxy_locations_as_upstream() {
        assert_eq!(split_scheme_name_port("p"), Some(("", "p", "")));
        assert_eq!(split_scheme_name_port("p:80"), Some(("", "p", "80")));
        assert_eq!(
            split_scheme_name_port("https:p:443"),
            Some(("https", "p", "443"))
        );
        assert_eq!(split_scheme_name_port("ftp:p:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
        let mut p = pod(&["c"]);
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 8080}]);
        p["status"]["podIP"] = json!("10.1.2.3");
        assert_eq!(pod_proxy_base(&p, "", "").unwrap(), "http://10.1.2.3:8080");
        assert_eq!(
            pod_proxy_base(&p, "https", "443").unwrap(),
            "https://10.1.2.3:443"
        );
        p["status"]["podIP"] = json!("127.0.0.1");
        assert_eq!(
            pod_proxy_base(&p, "", "").unwrap_err().to_string(),
            "address not allowed"
        );
        assert_eq!(
            proxy_rest("/api/v1/namespaces/n/pods/p/proxy", "pods", "p"),
            "/"
        );
        assert_eq!(
            proxy_rest(
                "/api/v1/namespaces/proxy/pods/p:80/proxy/a/proxy/b",
                "pods",
                "p:80"
            ),
            "/a/proxy/b"
        );
    }

    #[test]
    fn service_endpoints_are_ready_ones_of_the_port() {
        let svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [
            {"name": "web", "port": 80}, {"name": "metrics", "port": 9090}]}});
        let slices = vec![json!({
            "ports": [{"name": "web", "port": 8080}],
            "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": false}},
                          {"addresses": ["10.0.0.7"], "conditions": {"ready": true}}]})];
        let port = service_port(&svc, "80").unwrap();
        assert_eq!(
            service_endpoint(&slices, port).as_deref(),
            Some("10.0.0.7:8080")
        );
        let port = service_port(&svc, "metrics").unwrap();
        assert_eq!(service_endpoint(&slices, port), None);
        assert_eq!(service_port(&svc, "").unwrap_err().code(), 503);
    }
}
