//! The state the HTTP layer (filters and handlers) shares: the registry
//! (store and live resources) and the access-control components. The
//! assembly (`server.rs`) builds it.

use crate::audit::AuditLog;
use crate::authn::Authenticator;
use crate::authz::Authorizer;
use std::net::SocketAddr;
use std::sync::Arc;
use wasm_apiserver_registry::{Objects, Resources};

/// State shared by every handler.
pub struct AppState {
    pub objects: Objects,
    /// The live resource registry (also `objects.resources`).
    pub resources: Arc<Resources>,
    /// The address clients reach this server at.
    pub address: SocketAddr,
    pub max_request_bytes: usize,
    pub authn: Authenticator,
    /// Shared with the RBAC strategies (escalation checks).
    pub authz: Arc<Authorizer>,
    /// `--audit-log-path` with `--audit-policy-file`.
    pub audit: Option<Arc<AuditLog>>,
    /// The resources CRDs serve (the CRD controller's bookkeeping).
    pub crds: Arc<wasm_apiserver_registry::crd::Served>,
    /// The controllers' work queues, for `/metrics`.
    pub controllers: Arc<wasm_apiserver_registry::controllers::Metrics>,
    /// Requests in flight (background work stays below them).
    pub load: Arc<wasm_apiserver_registry::load::Load>,
    /// The embedded store, when objects live there (for snapshots).
    pub embedded: Option<wasm_apiserver_storage::embedded::EmbeddedStore>,
    /// `--data-dir`.
    pub data_dir: std::path::PathBuf,
    /// API Priority and Fairness (and the in-flight limits).
    pub flowcontrol: Arc<crate::flowcontrol::FlowControl>,
    /// The aggregation layer's routes to extension API servers.
    pub aggregator: Arc<wasm_apiserver_registry::aggregator::Aggregator>,
    /// `--request-timeout` (proxied requests).
    pub request_timeout: std::time::Duration,
    /// The kubelet connection (logs, exec, attach, port-forward and the
    /// proxy subresources); `None`: those answer 503.
    pub kubelets: Option<Arc<wasm_apiserver_registry::kubelet::Kubelets>>,
    /// The server's own metric families ([`crate::metrics`]).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// What `/livez` and `/readyz` check beyond storage.
    pub health: Arc<crate::health::Health>,
}
