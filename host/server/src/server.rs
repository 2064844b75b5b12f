//! Server assembly: shared state, the router with its middleware stack, and
//! `run` (open storage, start controllers, bind, write the kubeconfig, serve).

use crate::admission::Admission;
use crate::config::ServeArgs;
use crate::objects::Objects;
use crate::{discovery, filters, handlers, namespaces};
use axum::Router;
use axum::middleware::from_fn;
use axum::routing::{any, get};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tower::ServiceBuilder;
use wasm_apiserver_api::Registry;
use wasm_apiserver_storage::Storage;
use wasm_apiserver_storage::embedded::{EmbeddedOptions, EmbeddedStore};

/// State shared by every handler.
pub struct AppState {
    pub objects: Objects,
    pub registry: Arc<Registry>,
    /// The OpenAPI v2 document, built once from the registry.
    pub openapi: Value,
    /// Changes whenever the registry does; part of `/openapi/v3` URLs.
    pub openapi_hash: String,
    /// The address clients reach this server at.
    pub address: SocketAddr,
    pub max_request_bytes: usize,
}

impl AppState {
    pub fn new(
        storage: Arc<dyn Storage>,
        address: SocketAddr,
        max_request_bytes: usize,
        admission: Option<Arc<Admission>>,
    ) -> Self {
        let registry = Arc::new(Registry::builtin());
        let openapi = wasm_apiserver_api::openapi::openapi_v2(&registry, crate::KUBERNETES_VERSION);
        let openapi_hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            openapi.to_string().hash(&mut h);
            format!("{:016X}", h.finish())
        };
        AppState {
            objects: Objects::new(storage, registry.clone(), admission),
            openapi,
            openapi_hash,
            registry,
            address,
            max_request_bytes,
        }
    }
}

/// The HTTP router. Middleware runs in request order:
/// request info → authentication → authorization → handler.
pub fn router(state: Arc<AppState>) -> Router {
    let pipeline = ServiceBuilder::new()
        .layer(from_fn(filters::with_request_info))
        .layer(from_fn(filters::authenticate))
        .layer(from_fn(filters::authorize));
    Router::new()
        .route("/api", get(discovery::api_versions))
        .route("/apis", get(discovery::api_groups))
        .route("/api/{*rest}", any(handlers::dispatch))
        .route("/apis/{*rest}", any(handlers::dispatch))
        .route("/version", get(discovery::version))
        .route("/healthz", get(discovery::healthz))
        .route("/livez", get(discovery::healthz))
        .route("/readyz", get(discovery::readyz))
        .route("/metrics", get(discovery::metrics))
        .route("/openapi/v2", get(discovery::openapi_v2))
        .route("/openapi/v3", get(discovery::openapi_v3_root))
        .route("/openapi/v3/{*rest}", get(discovery::openapi_v3_doc))
        .layer(pipeline)
        .with_state(state)
}

/// Writes `admin.kubeconfig` atomically, so its presence means "ready".
fn write_kubeconfig(dir: &Path, address: SocketAddr) -> std::io::Result<()> {
    let host = if address.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        address.ip().to_string()
    };
    let host = if address.is_ipv6() && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: wasm-apiserver\n  cluster:\n    server: http://{host}:{port}\ncontexts:\n- name: admin@wasm-apiserver\n  context:\n    cluster: wasm-apiserver\n    user: admin\n    namespace: default\ncurrent-context: admin@wasm-apiserver\nusers:\n- name: admin\n  user: {{}}\n",
        port = address.port()
    );
    let tmp = dir.join("admin.kubeconfig.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, dir.join("admin.kubeconfig"))
}

/// Runs the server until SIGINT/SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)?;
    let _ = std::fs::remove_file(args.data_dir.join("admin.kubeconfig"));
    let store = EmbeddedStore::open(
        &args.data_dir.join("store.redb"),
        EmbeddedOptions {
            progress_interval: args.watch_progress_interval,
            ..Default::default()
        },
    )?;
    let storage: Arc<dyn Storage> = Arc::new(store);
    let listener = tokio::net::TcpListener::bind((args.bind_address, args.secure_port)).await?;
    let address = listener.local_addr()?;
    let runtime = wasm_apiserver_plugins::Runtime::new(wasm_apiserver_plugins::RuntimeConfig {
        cache_dir: Some(args.data_dir.join("plugin-cache")),
        ..Default::default()
    })?;
    let admission = Arc::new(Admission::new(
        runtime,
        args.plugin_dir.clone(),
        storage.clone(),
    ));
    if let Some(path) = &args.admission_control_config_file {
        let n = crate::admission::load_config_file(&admission, path).await?;
        tracing::info!(plugins = n, file = %path.display(), "static admission plugins loaded");
    }
    let state = Arc::new(AppState::new(
        storage.clone(),
        address,
        args.max_request_bytes,
        Some(admission),
    ));

    namespaces::ensure_initial(&state.objects).await?;
    crate::admission::spawn_controller(state.objects.clone());
    namespaces::spawn_controller(state.objects.clone());
    if !args.etcd_compaction_interval.is_zero() {
        wasm_apiserver_storage::spawn_compactor(storage.clone(), args.etcd_compaction_interval);
    }

    write_kubeconfig(&args.data_dir, address)?;
    tracing::info!(%address, kubeconfig = %args.data_dir.join("admin.kubeconfig").display(), "serving (plain HTTP; authentication is not enabled yet)");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown())
        .await?;
    Ok(())
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}
