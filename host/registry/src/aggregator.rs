//! The aggregation layer's routing table (kube-aggregator's
//! `proxyHandler`s and `availableConditionController` state): for every
//! APIService that names a `spec.service`, where its extension API server
//! is (an endpoint of the Service, or an `ExternalName`'s host), how to
//! reach it (a connection pool trusting the APIService's `caBundle`,
//! verifying `<service>.<namespace>.svc` and presenting the front-proxy
//! client certificate), whether it is available, and its discovery
//! document. The availability controller
//! (`controllers/availability.rs`) fills it; the server's proxy and
//! discovery read it, one snapshot per request.
//!
//! Without kube-proxy here, a ClusterIP Service is always reached through
//! its endpoints, as upstream with `--enable-aggregator-routing=true`.

use crate::outbound::{self, HttpsClient, Identity, Peer, Trust};
use arc_swap::ArcSwap;
use http_body_util::BodyExt;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use wasm_apiserver_api::meta;

/// How long the discovery probe of an extension may take (upstream's
/// availability check gives it 5 s).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The user the discovery probe is made as (upstream's).
pub const PROBE_USER: &str = "system:kube-aggregator";

/// Upstream's reasons of an APIService's `Available` condition.
pub mod reason {
    pub const PASSED: &str = "Passed";
    pub const LOCAL: &str = "Local";
    pub const SERVICE_NOT_FOUND: &str = "ServiceNotFound";
    pub const SERVICE_PORT_ERROR: &str = "ServicePortError";
    pub const ENDPOINTS_NOT_FOUND: &str = "EndpointsNotFound";
    pub const MISSING_ENDPOINTS: &str = "MissingEndpoints";
    pub const FAILED_DISCOVERY_CHECK: &str = "FailedDiscoveryCheck";
}

/// Where and how an APIService's requests go.
#[derive(Clone)]
pub struct Backend {
    /// `https://<endpoint>:<port>`.
    pub base: String,
    pub client: HttpsClient,
    /// What the connection pool was built from (reused while unchanged).
    key: String,
}

/// One remote APIService as the proxy sees it.
pub struct Route {
    pub name: String,
    pub group: String,
    pub version: String,
    pub group_priority_minimum: i64,
    pub version_priority: i64,
    /// Resolved, when the Service and its endpoints are there.
    pub backend: Option<Backend>,
    /// `Available=True`: requests are proxied; else they get 503.
    pub available: bool,
    /// The extension's `APIResourceList` for this group version (from the
    /// last passed discovery check).
    pub discovery: Option<Value>,
    /// The `hash` of the extension's OpenAPI v3 document of this group
    /// version, from its `/openapi/v3` index (clients cache by it).
    pub openapi_v3_hash: Option<String>,
}

/// The routing table, swapped whole on every change.
pub struct Aggregator {
    routes: ArcSwap<HashMap<String, Arc<Route>>>,
    /// The front-proxy client certificate (`--proxy-client-cert-file`).
    pub identity: Option<Arc<Identity>>,
    /// `--requestheader-username-headers` and friends, as the proxy sets
    /// them: the first of each list.
    pub headers: ProxyHeaders,
    /// The availability controller's queue, once it runs: the proxy asks
    /// it to look again at an APIService whose backend failed.
    recheck: OnceLock<Recheck>,
}

/// Asks for an APIService to be checked again.
type Recheck = Box<dyn Fn(&str) + Send + Sync>;

/// The header names the front proxy writes the caller's identity in.
#[derive(Debug, Clone)]
pub struct ProxyHeaders {
    pub user: String,
    /// Empty: no uid is sent (upstream's default).
    pub uid: String,
    pub group: String,
    pub extra_prefix: String,
}

impl Default for ProxyHeaders {
    fn default() -> Self {
        ProxyHeaders {
            user: "X-Remote-User".into(),
            uid: String::new(),
            group: "X-Remote-Group".into(),
            extra_prefix: "X-Remote-Extra-".into(),
        }
    }
}

impl Aggregator {
    pub fn new(identity: Option<Arc<Identity>>, headers: ProxyHeaders) -> Arc<Self> {
        Arc::new(Aggregator {
            routes: Default::default(),
            identity,
            headers,
            recheck: OnceLock::new(),
        })
    }

    /// The route of a group version that a remote APIService claims.
    pub fn route(&self, group: &str, version: &str) -> Option<Arc<Route>> {
        let routes = self.routes.load();
        if routes.is_empty() {
            return None;
        }
        routes.get(&format!("{version}.{group}")).cloned()
    }

    /// Every remote APIService's route.
    pub fn routes(&self) -> Arc<HashMap<String, Arc<Route>>> {
        self.routes.load_full()
    }

    pub(crate) fn set(&self, route: Route) {
        let route = Arc::new(route);
        self.routes.rcu(|cur| {
            let mut next = HashMap::clone(cur);
            next.insert(route.name.clone(), route.clone());
            next
        });
    }

    pub(crate) fn remove(&self, name: &str) {
        if self.routes.load().contains_key(name) {
            self.routes.rcu(|cur| {
                let mut next = HashMap::clone(cur);
                next.remove(name);
                next
            });
        }
    }

    /// kube-aggregator's `aggregator_unavailable_apiservice` gauge (1 while
    /// an APIService is unavailable), for every remote APIService, in
    /// Prometheus' text format.
    pub fn metrics_text(&self) -> String {
        let routes = self.routes.load();
        if routes.is_empty() {
            return String::new();
        }
        let mut names: Vec<(&String, bool)> =
            routes.iter().map(|(n, r)| (n, r.available)).collect();
        names.sort();
        let mut out = String::from(
            "# HELP aggregator_unavailable_apiservice Gauge of APIServices which are marked as unavailable broken down by APIService name.\n\
             # TYPE aggregator_unavailable_apiservice gauge\n",
        );
        for (name, available) in names {
            out.push_str(&format!(
                "aggregator_unavailable_apiservice{{name=\"{name}\"}} {}\n",
                u8::from(!available)
            ));
        }
        out
    }

    pub(crate) fn set_recheck(&self, recheck: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.recheck.set(Box::new(recheck));
    }

    /// Asks the availability controller to check `name` again now (its
    /// backend refused or dropped a proxied request).
    pub fn suspect(&self, name: &str) {
        if let Some(recheck) = self.recheck.get() {
            recheck(name);
        }
    }
}

/// Why an APIService is not available: upstream's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub reason: &'static str,
    pub message: String,
}

pub(crate) fn unavailable(reason: &'static str, message: String) -> Unavailable {
    Unavailable { reason, message }
}

/// The backend of `api_service` at `host:port`, reusing `old`'s
/// connection pool when nothing it was built from changed.
pub(crate) fn backend(
    agg: &Aggregator,
    api_service: &Value,
    (host, port, server_name): (String, u16, String),
    old: Option<&Backend>,
) -> Result<Backend, Unavailable> {
    let insecure = api_service["spec"]["insecureSkipTLSVerify"] == true;
    let ca = api_service["spec"]["caBundle"].as_str().unwrap_or_default();
    let key = format!("{insecure}/{server_name}/{ca}");
    let base = format!("https://{host}:{port}");
    if let Some(old) = old.filter(|o| o.key == key) {
        return Ok(Backend {
            base,
            client: old.client.clone(),
            key,
        });
    }
    let failed = |e: String| {
        unavailable(
            reason::FAILED_DISCOVERY_CHECK,
            format!("failing or missing response from {base}/apis: {e}"),
        )
    };
    let trust = if insecure {
        Trust::Insecure
    } else {
        Trust::from_ca_bundle(ca, "spec.caBundle").map_err(failed)?
    };
    let client = outbound::client(&Peer {
        trust: &trust,
        server_name: Some(&server_name),
        identity: agg.identity.as_deref(),
    })
    .map_err(failed)?;
    Ok(Backend { base, client, key })
}

/// Upstream's discovery check: `GET /apis/<group>/<version>` as
/// [`PROBE_USER`] within [`PROBE_TIMEOUT`]; a 2xx with an
/// `APIResourceList` passes and gives the extension's resources.
pub(crate) async fn probe(
    agg: &Aggregator,
    backend: &Backend,
    group: &str,
    version: &str,
) -> Result<Value, Unavailable> {
    let url = format!("{}/apis/{group}/{version}", backend.base);
    let failed = |e: String| {
        unavailable(
            reason::FAILED_DISCOVERY_CHECK,
            format!("failing or missing response from {url}: {e}"),
        )
    };
    let req = hyper::Request::get(&url)
        .header("accept", "application/json")
        .header(agg.headers.user.as_str(), PROBE_USER)
        .header(agg.headers.group.as_str(), "system:masters")
        .body(outbound::full(bytes::Bytes::new()))
        .map_err(|e| failed(e.to_string()))?;
    let work = async {
        let resp = backend
            .client
            .request(req)
            .await
            .map_err(|e| failed(error_chain(&e)))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| failed(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(failed(format!(
                "bad status from {url}: {}",
                status.as_u16()
            )));
        }
        let list: Value = serde_json::from_slice(&body)
            .map_err(|e| failed(format!("invalid discovery document: {e}")))?;
        if !list["resources"].is_array() {
            return Err(failed(
                "invalid discovery document: not an APIResourceList".into(),
            ));
        }
        Ok(list)
    };
    tokio::time::timeout(PROBE_TIMEOUT, work)
        .await
        .map_err(|_| failed(format!("Get {url:?}: context deadline exceeded")))?
}

/// The `hash` the extension's `/openapi/v3` index gives its document of
/// `group/version`, if it serves one.
pub(crate) async fn openapi_v3_hash(
    agg: &Aggregator,
    backend: &Backend,
    group: &str,
    version: &str,
) -> Option<String> {
    let req = hyper::Request::get(format!("{}/openapi/v3", backend.base))
        .header("accept", "application/json")
        .header(agg.headers.user.as_str(), PROBE_USER)
        .header(agg.headers.group.as_str(), "system:masters")
        .body(outbound::full(bytes::Bytes::new()))
        .ok()?;
    let work = async {
        let resp = backend.client.request(req).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        let index: Value = serde_json::from_slice(&body).ok()?;
        let url =
            index["paths"][format!("apis/{group}/{version}")]["serverRelativeURL"].as_str()?;
        url.split_once("hash=")
            .map(|(_, h)| h.split('&').next().unwrap_or_default().to_string())
    };
    tokio::time::timeout(PROBE_TIMEOUT, work)
        .await
        .ok()
        .flatten()
}

/// An error with its sources (hyper's top-level errors say little).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// The `Available` condition an APIService should carry now.
pub(crate) fn condition(outcome: &Result<(), Unavailable>) -> (&'static str, &'static str, String) {
    match outcome {
        Ok(()) => ("True", reason::PASSED, "all checks passed".to_string()),
        Err(u) => ("False", u.reason, u.message.clone()),
    }
}

/// The APIService's `(groupPriorityMinimum, versionPriority)`.
pub(crate) fn priorities(api_service: &Value) -> (i64, i64) {
    (
        api_service["spec"]["groupPriorityMinimum"]
            .as_i64()
            .unwrap_or(0),
        api_service["spec"]["versionPriority"].as_i64().unwrap_or(0),
    )
}

/// The `(namespace, name)` of the Service an APIService names.
pub(crate) fn service_of(api_service: &Value) -> Option<(String, String)> {
    let svc = api_service["spec"]["service"].as_object()?;
    Some((
        svc.get("namespace")?.as_str()?.to_string(),
        svc.get("name")?.as_str()?.to_string(),
    ))
}

/// The Service an EndpointSlice belongs to.
pub(crate) fn service_of_slice(slice: &Value) -> Option<(String, String)> {
    Some((
        meta::namespace(slice)?.to_string(),
        meta::labels(slice)
            .get("kubernetes.io/service-name")?
            .clone(),
    ))
}
