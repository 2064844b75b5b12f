//! The assembly: builds the layers and wires them together: storage, the
//! plugin runtime, the registry (store, built-in resources, admission),
//! access control (authenticators, authorizers, audit) and the HTTP router
//! with its middleware stack; `run` opens storage, starts the controllers,
//! binds and serves. Nothing imports this module.

use crate::cli::{Cli, Command};
use crate::config::ServeArgs;
pub use crate::state::AppState;
use crate::{authn, authz, discovery, filters, handlers};
use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{any, get};
use clap::Parser;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tower::ServiceBuilder;
use wasm_apiserver_api::ConnectionInfo;
use wasm_apiserver_registry::admission::{Admission, controller};
use wasm_apiserver_registry::builtin::{self, Dependencies};
use wasm_apiserver_registry::{Objects, Resources, crd, handlers as resource_handlers, namespaces};
use wasm_apiserver_storage::Storage;
use wasm_apiserver_storage::embedded::{EmbeddedOptions, EmbeddedStore};

impl AppState {
    /// The registry over `storage` with every built-in resource, access
    /// control that allows everything (`run` configures it from the
    /// flags), and `admission` (if any) in every write.
    pub fn new(
        storage: Arc<dyn Storage>,
        address: SocketAddr,
        max_request_bytes: usize,
        admission: Option<Arc<Admission>>,
    ) -> Self {
        let resources = Arc::new(Resources::new());
        let objects = Objects::new(storage, resources.clone(), admission);
        let authz = Arc::new(authz::Authorizer::always_allow());
        let installed = builtin::install(
            &objects,
            Dependencies {
                escalation: authz.clone(),
            },
        );
        authz::install_reviews(&resources, &authz);
        if let Some(admission) = &objects.admission {
            admission.policies.set_authorizer(authz.clone());
            admission.set_cluster(Arc::new(
                wasm_apiserver_registry::cluster::ClusterReads::new(
                    objects.clone(),
                    Some(authz.clone()),
                ),
            ));
        }
        let authn = authn::Authenticator::default();
        authn::install_token_reviews(&objects, &authn);
        let metrics = crate::metrics::Metrics::default();
        metrics.register(objects.admission_metrics.collectors());
        metrics.register(objects.client_metrics.collectors());
        let metrics = Arc::new(metrics);
        AppState {
            objects,
            resources,
            address,
            max_request_bytes,
            authn,
            authz,
            audit: None,
            crds: installed.crds,
            controllers: Default::default(),
            load: Default::default(),
            embedded: None,
            data_dir: Default::default(),
            flowcontrol: Arc::new(crate::flowcontrol::FlowControl::new(true, 400, 200)),
            aggregator: wasm_apiserver_registry::aggregator::Aggregator::new(
                None,
                Default::default(),
            ),
            request_timeout: std::time::Duration::from_secs(60),
            kubelets: None,
            metrics,
            health: Default::default(),
        }
    }
}

/// The HTTP router. Middleware runs in request order:
/// request info → authentication → audit → impersonation → authorization →
/// handler (which runs admission).
pub fn router(state: Arc<AppState>) -> Router {
    let pipeline = ServiceBuilder::new()
        .layer(from_fn_with_state(state.clone(), filters::count_in_flight))
        .layer(from_fn(filters::with_request_info))
        .layer(from_fn_with_state(state.clone(), filters::instrument))
        .layer(from_fn_with_state(state.clone(), filters::authenticate))
        .layer(from_fn_with_state(state.clone(), filters::audit))
        .layer(from_fn_with_state(state.clone(), filters::impersonate))
        .layer(from_fn_with_state(state.clone(), filters::flow_control))
        .layer(from_fn_with_state(state.clone(), filters::authorize));
    Router::new()
        .route("/api", get(discovery::api_versions))
        // The Python client asks for `/api/`, `/apis/` and `/version/`.
        .route("/api/", get(discovery::api_versions))
        .route("/apis", get(discovery::api_groups))
        .route("/apis/", get(discovery::api_groups))
        .route("/api/{*rest}", any(handlers::dispatch))
        .route("/apis/{*rest}", any(handlers::dispatch))
        .route("/version", get(discovery::version))
        .route("/version/", get(discovery::version))
        .route("/healthz", get(discovery::healthz))
        .route("/healthz/{*check}", get(discovery::healthz_check))
        .route("/livez", get(discovery::livez))
        .route("/livez/{*check}", get(discovery::livez_check))
        .route("/readyz", get(discovery::readyz))
        .route("/readyz/{*check}", get(discovery::readyz_check))
        .route("/metrics", get(discovery::metrics))
        .route("/snapshot", get(crate::snapshot::serve_snapshot))
        .route("/openapi/v2", get(discovery::openapi_v2))
        .route("/openapi/v3", get(discovery::openapi_v3_root))
        .route("/openapi/v3/{*rest}", get(discovery::openapi_v3_doc))
        .layer(pipeline)
        .with_state(state)
}

/// Writes `admin.kubeconfig` atomically, so its presence means "ready": the
/// cluster CA and the admin client certificate (`system:masters`).
fn write_kubeconfig(dir: &Path, address: SocketAddr, pki: &crate::tls::Pki) -> std::io::Result<()> {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
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
        "apiVersion: v1\nkind: Config\nclusters:\n- name: wasm-apiserver\n  cluster:\n    server: https://{host}:{port}\n    certificate-authority-data: {ca}\ncontexts:\n- name: admin@wasm-apiserver\n  context:\n    cluster: wasm-apiserver\n    user: admin\n    namespace: default\ncurrent-context: admin@wasm-apiserver\nusers:\n- name: admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n",
        port = address.port(),
        ca = b64(&pki.ca_pem),
        cert = b64(&pki.admin_cert_pem),
        key = b64(&pki.admin_key_pem),
    );
    let tmp = dir.join("admin.kubeconfig.tmp");
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        opts.open(&tmp)?.write_all(text.as_bytes())?;
    }
    std::fs::rename(tmp, dir.join("admin.kubeconfig"))
}

/// Accepts TLS connections and serves the router on each (HTTP/1.1 and h2).
async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls: rustls::ServerConfig,
    client_cas: Arc<crate::tls::ClientCas>,
    requestheader_cas: Option<Arc<crate::tls::ClientCas>>,
    app: Router,
) -> anyhow::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tower::ServiceExt;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let shutdown = shutdown();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let client_cas = client_cas.clone();
        let requestheader_cas = requestheader_cas.clone();
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let tls = match tokio::time::timeout(
                std::time::Duration::from_secs(10),
                acceptor.accept(tcp),
            )
            .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            // The x509 authenticator: a presented certificate is verified
            // against the client CAs here, once per connection.
            let leaf = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first());
            // A front proxy's certificate is the request-header CA's; any
            // other is the client CAs' (the x509 authenticator's).
            let front_proxy = leaf
                .zip(requestheader_cas.as_deref())
                .and_then(|(cert, cas)| cas.verify(cert).ok())
                .map(|(cn, _)| cn);
            let (client_cert, client_cert_error) = match leaf.map(|c| client_cas.verify(c)) {
                None => (None, None),
                Some(Ok(subject)) => (Some(subject), None),
                Some(Err(_)) if front_proxy.is_some() => (None, None),
                Some(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "client certificate refused");
                    (None, Some(e))
                }
            };
            let conn = ConnectionInfo {
                peer,
                client_cert,
                client_cert_error,
                front_proxy,
            };
            let svc = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(conn.clone());
                    app.clone().oneshot(req.map(axum::body::Body::new))
                },
            );
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(
                    TokioIo::new(crate::parse_errors::StatusOnParseError::new(tls)),
                    svc,
                )
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

/// Opens the embedded store (restored from `--restore-from` first, when
/// given), or etcd when `--etcd-servers` is given.
async fn open_storage(
    args: &ServeArgs,
) -> anyhow::Result<(Arc<dyn Storage>, Option<EmbeddedStore>)> {
    if args.etcd_servers.is_empty() {
        let file = crate::snapshot::store_file(&args.data_dir);
        if let Some(snapshot) = &args.restore_from {
            let info = wasm_apiserver_storage::embedded::restore(
                snapshot,
                &file,
                wasm_apiserver_storage::embedded::DEFAULT_RESTORE_BUMP,
            )
            .map_err(|e| anyhow::anyhow!("--restore-from {}: {e}", snapshot.display()))?;
            tracing::info!(snapshot = %snapshot.display(), revision = info.revision, keys = info.keys, "store restored from a snapshot");
        }
        let store = EmbeddedStore::open(
            &file,
            EmbeddedOptions {
                progress_interval: args.watch_progress_interval,
                cache_bytes: args.storage_cache_bytes,
                ..Default::default()
            },
        )?;
        return Ok((Arc::new(store.clone()), Some(store)));
    }
    #[cfg(feature = "etcd")]
    {
        use wasm_apiserver_storage::etcd::{EtcdOptions, EtcdStore, EtcdTls};
        let tls = (args.etcd_cafile.is_some() || args.etcd_certfile.is_some()).then(|| EtcdTls {
            ca_file: args.etcd_cafile.clone(),
            cert_file: args.etcd_certfile.clone(),
            key_file: args.etcd_keyfile.clone(),
        });
        let options = EtcdOptions {
            progress_interval: args.watch_progress_interval,
            tls,
            ..Default::default()
        };
        if args.restore_from.is_some() {
            anyhow::bail!("--restore-from restores the embedded store; restore etcd with etcdutl");
        }
        let store = EtcdStore::connect(&args.etcd_servers, &args.etcd_prefix, options).await?;
        tracing::info!(servers = ?args.etcd_servers, "storage: etcd");
        Ok((Arc::new(store), None))
    }
    #[cfg(not(feature = "etcd"))]
    anyhow::bail!(
        "--etcd-servers needs a build with the `etcd` feature (cargo build --features etcd)"
    )
}

/// The command line's entry point: parses the arguments, sets up logging
/// and runs the command.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match &cli.command {
        Command::Serve(args) => crate::logging::init(&args.logging_format, args.verbosity),
        _ => crate::logging::init("text", 0),
    }
    match cli.command {
        Command::Serve(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(run(*args)),
        Command::Plugin(cmd) => {
            let code = crate::plugin_cli::run(cmd)?;
            std::process::exit(code)
        }
        Command::Snapshot(cmd) => {
            let code = crate::snapshot::run(cmd)?;
            std::process::exit(code)
        }
    }
}

/// Runs the server until SIGINT/SIGTERM.
pub async fn run(mut args: ServeArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)?;
    args.data_dir = std::path::absolute(&args.data_dir)?;
    let _ = std::fs::remove_file(args.data_dir.join("admin.kubeconfig"));
    let (storage, embedded) = open_storage(&args).await?;
    let metrics = Arc::new(crate::metrics::Metrics::new(args.enable_request_metrics));
    let storage: Arc<dyn Storage> = Arc::new(crate::metrics::MeteredStorage::new(
        storage,
        metrics.clone(),
    ));
    let listener = tokio::net::TcpListener::bind((args.bind_address, args.secure_port)).await?;
    let address = listener.local_addr()?;
    let runtime = wasm_apiserver_plugins::Runtime::new(wasm_apiserver_plugins::RuntimeConfig {
        cache_dir: Some(args.data_dir.join("plugin-cache")),
        ..Default::default()
    })?;
    let access_runtime = runtime.clone();
    let admission = Arc::new(Admission::new(
        runtime,
        args.plugin_dir.clone(),
        storage.clone(),
    ));
    admission.set_registries(
        wasm_apiserver_registry::oci::Registries::from_files(
            &args.insecure_plugin_registries,
            args.plugin_registry_ca_file.as_deref(),
            args.plugin_sources_file.as_deref(),
            args.plugin_registry_config.as_deref(),
        )
        .map_err(anyhow::Error::msg)?,
    );
    if let Some(path) = &args.admission_control_config_file {
        let n = controller::load_config_file(&admission, path).await?;
        tracing::info!(plugins = n, file = %path.display(), "static admission plugins loaded");
    }
    let mut state = AppState::new(
        storage.clone(),
        address,
        args.max_request_bytes,
        Some(admission),
    );
    state.data_dir = args.data_dir.clone();
    metrics.register(state.objects.admission_metrics.collectors());
    metrics.register(state.objects.client_metrics.collectors());
    state.metrics = metrics.clone();
    crate::metrics::spawn_object_counter(
        metrics,
        storage.clone(),
        state.resources.clone(),
        std::time::Duration::from_secs(60),
    );
    state.flowcontrol = Arc::new(crate::flowcontrol::FlowControl::new(
        args.enable_priority_and_fairness,
        args.max_requests_inflight,
        args.max_mutating_requests_inflight,
    ));
    state.embedded = embedded.clone();
    if let Some(store) = embedded.filter(|_| !args.snapshot_interval.is_zero()) {
        crate::snapshot::spawn_periodic(
            store,
            args.data_dir.clone(),
            args.snapshot_interval,
            args.snapshot_retention,
        );
    }
    let mut hosts = vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "::1".to_string(),
    ];
    if !args.bind_address.is_unspecified() && !args.bind_address.is_loopback() {
        hosts.push(args.bind_address.to_string());
    }
    let pki = crate::tls::ensure(&args.data_dir, &hosts)?;
    let front_proxy = front_proxy(&args, &pki)?;
    let token_file = match &args.token_auth_file {
        Some(path) => Some(Arc::new(
            wasm_apiserver_api::authn::TokenFile::parse(&std::fs::read_to_string(path)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        )),
        None => None,
    };
    state.authn = authn::Authenticator {
        anonymous: args.anonymous_auth,
        token_file,
        bootstrap_tokens: args.enable_bootstrap_token_auth,
        service_accounts: Some(Arc::new(crate::satoken::TokenSigner::from_config(
            &args.data_dir,
            &crate::satoken::SignerConfig {
                signing_key_file: args.service_account_signing_key_file.clone(),
                key_files: args.service_account_key_file.clone(),
                issuers: args.service_account_issuer.clone(),
            },
        )?)),
        plugins: Default::default(),
        request_header: front_proxy.request_header.clone(),
    };
    state.aggregator = wasm_apiserver_registry::aggregator::Aggregator::new(
        Some(front_proxy.identity.clone()),
        front_proxy.proxy_headers.clone(),
    );
    state.request_timeout = args.request_timeout;
    state.kubelets = Some(kubelets(&args, &pki)?);
    if let Some(path) = &args.access_plugin_config_file {
        let plugins =
            crate::access_plugins::load(&access_runtime, args.plugin_dir.as_deref(), path).await?;
        tracing::info!(
            authenticators = plugins.authenticators.len(),
            authorizers = plugins.authorizers.len(),
            "access plugins loaded"
        );
        state.authn.plugins = plugins.clone();
        state.authz.set_plugins(plugins);
    }
    if let Some(path) = &args.audit_log_path {
        let policy_file = args
            .audit_policy_file
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("--audit-log-path needs --audit-policy-file"))?;
        let text = std::fs::read_to_string(policy_file)?;
        let log = crate::audit::AuditLog::open(
            path.clone(),
            &text,
            args.audit_log_maxsize,
            args.audit_log_maxbackup,
        )?;
        log.count_into(state.metrics.audit_events());
        state.audit = Some(Arc::new(log));
    }
    state
        .authz
        .set_modes(authz::Authorizer::parse(&args.authorization_mode).map_err(anyhow::Error::msg)?);
    let mut admission_plugins = wasm_apiserver_registry::admission::plugins::Enabled::from_flags(
        &args.enable_admission_plugins,
        &args.disable_admission_plugins,
    )
    .map_err(anyhow::Error::msg)?;
    admission_plugins.not_ready_toleration_seconds = args.default_not_ready_toleration_seconds;
    admission_plugins.unreachable_toleration_seconds = args.default_unreachable_toleration_seconds;
    tracing::info!(plugins = ?admission_plugins.names(), "compiled-in admission plugins");
    if !admission_plugins.unimplemented().is_empty() {
        tracing::warn!(
            plugins = ?admission_plugins.unimplemented(),
            "--enable-admission-plugins names upstream admission plugins this server does not implement; they are accepted so the configuration starts, but they do nothing here"
        );
    }
    let _ = state.objects.admission_plugins.set(admission_plugins);
    authn::install_token_reviews(&state.objects, &state.authn);
    let components = Arc::new(
        wasm_apiserver_registry::componentstatuses::ComponentStatuses {
            storage: storage.clone(),
            scheduler: !args.disable_scheduler,
            controllers: args.controllers_enabled_any(),
        },
    );
    state
        .resources
        .update("", "v1", "componentstatuses", |r| r.with_reader(components));
    if let Some(signer) = &state.authn.service_accounts {
        let token_requests = Arc::new(authn::TokenRequests {
            objects: state.objects.clone(),
            signer: signer.clone(),
        });
        state.resources.update("", "v1", "serviceaccounts", |sa| {
            sa.with_subresource_creater("token", token_requests)
        });
    }
    let ranges = wasm_apiserver_registry::allocator::Ranges::parse(
        &args.service_cluster_ip_range,
        &args.service_node_port_range,
    )
    .map_err(anyhow::Error::msg)?;
    let allocator =
        wasm_apiserver_registry::allocator::Allocator::new(storage.clone(), ranges.clone());
    state.resources.update("", "v1", "services", |svc| {
        svc.with_strategy(Arc::new(wasm_apiserver_registry::workloads::Services {
            allocator,
        }))
    });
    let state = Arc::new(state);

    namespaces::ensure_initial(&state.objects).await?;
    crd::install_existing(&state.objects, &state.crds).await?;
    crd::spawn_controller(state.objects.clone(), state.crds.clone());
    resource_handlers::controller::install_existing(&state.objects).await?;
    resource_handlers::spawn_controller(state.objects.clone());
    builtin::ensure_local_api_services(&state.objects).await?;
    authz::ensure_bootstrap_policy(&state.objects).await?;
    authz::reload(&state.objects, &state.authz).await?;
    authz::spawn_controller(state.objects.clone(), state.authz.clone());
    if state.authz.uses_node() {
        wasm_apiserver_registry::controllers::node_graph::spawn(
            state.objects.clone(),
            state.authz.node_graph(),
        );
    }
    crate::flowcontrol::ensure_bootstrap(&state.objects).await?;
    crate::flowcontrol::spawn_controller(state.objects.clone(), state.flowcontrol.clone());
    if args.enable_bootstrap_token_auth {
        authn::spawn_token_cleaner(state.objects.clone(), std::time::Duration::from_secs(10));
    }
    controller::spawn_controller(state.objects.clone());
    namespaces::spawn_controller(state.objects.clone());
    namespaces::spawn_cache(state.objects.clone());
    state.objects.spawn_quota_cache();
    if !args.etcd_compaction_interval.is_zero() {
        wasm_apiserver_storage::spawn_compactor(storage.clone(), args.etcd_compaction_interval);
    }

    let (cert_pem, key_pem) = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(c), Some(k)) => (std::fs::read_to_string(c)?, std::fs::read_to_string(k)?),
        (None, None) => (pki.serving_cert_pem.clone(), pki.serving_key_pem.clone()),
        _ => anyhow::bail!("--tls-cert-file and --tls-private-key-file go together"),
    };
    let mut ca_pems = vec![pki.ca_pem.clone()];
    if let Some(path) = &args.client_ca_file {
        ca_pems.push(std::fs::read_to_string(path)?);
    }
    let client_cas = Arc::new(crate::tls::ClientCas::from_pems(&ca_pems)?);
    let tls = crate::tls::server_config(&cert_pem, &key_pem, &client_cas)?;

    start_controllers(&state, &args, &ranges, address, &pki)?;
    {
        use wasm_apiserver_registry::controllers::{availability, extension_auth};
        let apiserver = |name: &str| {
            wasm_apiserver_registry::controllers::Client::with_user(
                state.objects.clone(),
                name,
                crate::authn::apiserver_user(),
                Some(state.authz.clone()),
            )
        };
        availability::spawn(
            apiserver(availability::NAME),
            state.aggregator.clone(),
            &state.controllers,
        );
        extension_auth::spawn(
            apiserver(extension_auth::NAME),
            extension_auth::Published {
                client_ca: ca_pems.concat(),
                request_header: front_proxy.published.clone(),
            },
        );
    }

    let health = state.health.clone();
    tokio::spawn(async move {
        shutdown().await;
        health.shutting_down();
    });
    write_kubeconfig(&args.data_dir, address, &pki)?;
    tracing::info!(%address, kubeconfig = %args.data_dir.join("admin.kubeconfig").display(), "serving HTTPS");
    serve_tls(
        listener,
        tls,
        client_cas,
        front_proxy.requestheader_cas,
        router(state),
    )
    .await
}

/// The kubelet connection from the `--kubelet-*` flags: the client
/// certificate given or generated, the kubelet CA if given.
fn kubelets(
    args: &ServeArgs,
    pki: &crate::tls::Pki,
) -> anyhow::Result<Arc<wasm_apiserver_registry::kubelet::Kubelets>> {
    use wasm_apiserver_registry::kubelet::{KubeletConfig, Kubelets};
    use wasm_apiserver_registry::outbound::{Identity, Trust};
    let (cert, key) = match (&args.kubelet_client_certificate, &args.kubelet_client_key) {
        (Some(c), Some(k)) => (std::fs::read_to_string(c)?, std::fs::read_to_string(k)?),
        (None, None) => (
            pki.kubelet_client_cert_pem.clone(),
            pki.kubelet_client_key_pem.clone(),
        ),
        _ => anyhow::bail!("--kubelet-client-certificate and --kubelet-client-key go together"),
    };
    let trust = match &args.kubelet_certificate_authority {
        Some(path) => Trust::from_pem(&std::fs::read(path)?)
            .map_err(|e| anyhow::anyhow!("--kubelet-certificate-authority: {e}"))?,
        None => Trust::Insecure,
    };
    wasm_apiserver_api::kubelet::check_address_types(&args.kubelet_preferred_address_types)
        .map_err(anyhow::Error::msg)?;
    let kubelets = Kubelets::new(KubeletConfig {
        preferred_address_types: args.kubelet_preferred_address_types.clone(),
        default_port: args.kubelet_port,
        timeout: args.kubelet_timeout,
        trust,
        identity: Some(Arc::new(
            Identity::from_pem(&cert, &key).map_err(anyhow::Error::msg)?,
        )),
    })
    .map_err(anyhow::Error::msg)?;
    Ok(Arc::new(kubelets))
}

/// The front proxy: the identity this server presents to aggregated API
/// servers, and the request-header authenticator for front proxies in
/// front of this one (what it trusts, and what it publishes of that).
struct FrontProxy {
    identity: Arc<wasm_apiserver_registry::outbound::Identity>,
    proxy_headers: wasm_apiserver_registry::aggregator::ProxyHeaders,
    request_header: Option<Arc<authn::RequestHeader>>,
    requestheader_cas: Option<Arc<crate::tls::ClientCas>>,
    published: Option<wasm_apiserver_registry::controllers::extension_auth::RequestHeader>,
}

/// As kube-apiserver with kubeadm's certificates: the proxy client
/// certificate is `--proxy-client-cert-file` or the generated
/// `front-proxy-client`; front proxies are the ones
/// `--requestheader-client-ca-file` signs, or (without a proxy client
/// certificate given) the generated front-proxy CA's `front-proxy-client`.
fn front_proxy(args: &ServeArgs, pki: &crate::tls::Pki) -> anyhow::Result<FrontProxy> {
    let given = match (&args.proxy_client_cert_file, &args.proxy_client_key_file) {
        (Some(c), Some(k)) => Some((std::fs::read_to_string(c)?, std::fs::read_to_string(k)?)),
        (None, None) => None,
        _ => anyhow::bail!("--proxy-client-cert-file and --proxy-client-key-file go together"),
    };
    let generated = given.is_none();
    let (cert, key) = given.unwrap_or_else(|| {
        (
            pki.front_proxy_client_cert_pem.clone(),
            pki.front_proxy_client_key_pem.clone(),
        )
    });
    let identity = Arc::new(
        wasm_apiserver_registry::outbound::Identity::from_pem(&cert, &key)
            .map_err(anyhow::Error::msg)?,
    );
    let ca = match &args.requestheader_client_ca_file {
        Some(path) => Some(std::fs::read_to_string(path)?),
        None if generated => Some(pki.front_proxy_ca_pem.clone()),
        None => None,
    };
    let allowed_names = if args.requestheader_allowed_names.is_empty()
        && args.requestheader_client_ca_file.is_none()
    {
        vec![crate::tls::FRONT_PROXY_CLIENT.to_string()]
    } else {
        args.requestheader_allowed_names.clone()
    };
    let first =
        |v: &[String], default: &str| v.first().cloned().unwrap_or_else(|| default.to_string());
    let defaults = wasm_apiserver_registry::aggregator::ProxyHeaders::default();
    let proxy_headers = wasm_apiserver_registry::aggregator::ProxyHeaders {
        user: first(&args.requestheader_username_headers, &defaults.user),
        uid: args
            .requestheader_uid_headers
            .first()
            .cloned()
            .unwrap_or_default(),
        group: first(&args.requestheader_group_headers, &defaults.group),
        extra_prefix: first(
            &args.requestheader_extra_headers_prefix,
            &defaults.extra_prefix,
        ),
    };
    let Some(ca) = ca else {
        return Ok(FrontProxy {
            identity,
            proxy_headers,
            request_header: None,
            requestheader_cas: None,
            published: None,
        });
    };
    let request_header = authn::RequestHeader {
        allowed_names: allowed_names.clone(),
        username_headers: args.requestheader_username_headers.clone(),
        uid_headers: args.requestheader_uid_headers.clone(),
        group_headers: args.requestheader_group_headers.clone(),
        extra_prefixes: args.requestheader_extra_headers_prefix.clone(),
    };
    Ok(FrontProxy {
        identity,
        proxy_headers,
        requestheader_cas: Some(Arc::new(crate::tls::ClientCas::from_pems(
            std::slice::from_ref(&ca),
        )?)),
        published: Some(
            wasm_apiserver_registry::controllers::extension_auth::RequestHeader {
                client_ca: ca,
                allowed_names,
                username_headers: request_header.username_headers.clone(),
                uid_headers: request_header.uid_headers.clone(),
                group_headers: request_header.group_headers.clone(),
                extra_headers_prefix: request_header.extra_prefixes.clone(),
            },
        ),
        request_header: Some(Arc::new(request_header)),
    })
}

/// Starts the controllers `--controllers` enables (singletons under leader
/// election when replicas share etcd) and the `kubernetes` Service's
/// publisher (on every replica).
fn start_controllers(
    state: &AppState,
    args: &ServeArgs,
    ranges: &wasm_apiserver_registry::allocator::Ranges,
    address: SocketAddr,
    pki: &crate::tls::Pki,
) -> anyhow::Result<()> {
    use wasm_apiserver_registry::controllers::{
        Client, apiservice, bootstrap, certificates, cronjob, daemonset, deployment, disruption,
        endpoints, endpointslicemirroring, gc, hostname, job, leader, nodelifecycle, podgc,
        policy_audit, replicaset, resourcequota, scheduler, serviceaccounts, statefulset,
        ttlafterfinished, wasm,
    };
    let ca_pem = &pki.ca_pem;
    let objects = &state.objects;
    let election = if args.etcd_servers.is_empty() {
        leader::Election::Alone
    } else {
        leader::Election::Lease {
            lease: "wasm-apiserver-controllers".into(),
            identity: format!("{}_{}", hostname(), uuid::Uuid::new_v4()),
            timing: leader::Timing {
                lease_duration: args.leader_elect_lease_duration,
                renew_deadline: args.leader_elect_renew_deadline,
                retry_period: args.leader_elect_retry_period,
            },
        }
    };
    let leadership = leader::start(objects.clone(), election);
    let authorize: Arc<dyn wasm_apiserver_api::cel::authz::Authorize> = state.authz.clone();
    let audit = state
        .audit
        .clone()
        .map(|a| a as Arc<dyn wasm_apiserver_registry::controllers::AuditCalls>);
    let client = |name: &str| {
        Client::new(objects.clone(), name, Some(authorize.clone())).with_audit(audit.clone())
    };
    if args.controller_enabled(wasm::CONTROLLER) {
        wasm::spawn(
            wasm::Deps {
                objects: objects.clone(),
                authorize: Some(authorize.clone()),
                audit: audit.clone(),
                metrics: state.controllers.clone(),
            },
            leadership.clone(),
        );
    }
    if args.controller_enabled(policy_audit::NAME) {
        policy_audit::spawn(
            client(policy_audit::NAME),
            policy_audit::Config {
                interval: args.audit_interval,
                format: args.report_format,
                cpu_budget: args.audit_cpu_budget,
            },
            state.load.clone(),
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled("garbage-collector-controller") {
        gc::spawn(client(gc::NAME), leadership.clone(), &state.controllers);
    }
    let node_lifecycle = nodelifecycle::Enabled {
        lifecycle: args.controller_enabled(nodelifecycle::LIFECYCLE),
        taint_eviction: args.controller_enabled(nodelifecycle::TAINT_EVICTION),
    };
    if node_lifecycle.lifecycle || node_lifecycle.taint_eviction {
        // Upstream's taint eviction controller uses the node controller's
        // identity and role.
        let eviction = Client::with_user(
            objects.clone(),
            nodelifecycle::TAINT_EVICTION,
            wasm_apiserver_registry::controllers::controller_user(nodelifecycle::NAME),
            Some(authorize.clone()),
        )
        .with_audit(audit.clone());
        nodelifecycle::spawn(
            client(nodelifecycle::NAME),
            eviction,
            nodelifecycle::Timing {
                monitor_period: args.node_monitor_period,
                grace: args.node_monitor_grace_period,
                startup_grace: args.node_startup_grace_period,
            },
            node_lifecycle,
            leadership.clone(),
            &state.controllers,
        );
    }
    endpoints::spawn(
        args.controller_enabled(endpoints::ENDPOINTS)
            .then(|| client(endpoints::ENDPOINTS_SA)),
        args.controller_enabled(endpoints::SLICES)
            .then(|| client(endpoints::SLICES)),
        leadership.clone(),
        &state.controllers,
    );
    if args.controller_enabled(endpointslicemirroring::NAME) {
        endpointslicemirroring::spawn(
            client(endpointslicemirroring::NAME),
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled(daemonset::CONTROLLER) {
        daemonset::spawn(
            client(daemonset::NAME),
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled(statefulset::CONTROLLER) {
        statefulset::spawn(
            client(statefulset::NAME),
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled(disruption::NAME) {
        disruption::spawn(
            client(disruption::NAME),
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled(resourcequota::NAME) {
        resourcequota::spawn(
            client(resourcequota::NAME),
            resourcequota::Config {
                sync_period: args.resource_quota_sync_period,
            },
            leadership.clone(),
            &state.controllers,
        );
    }
    if !args.disable_scheduler {
        scheduler::spawn(
            Client::with_user(
                objects.clone(),
                scheduler::MANAGER,
                scheduler::user(),
                Some(authorize.clone()),
            )
            .with_audit(audit.clone()),
            scheduler::Config::default(),
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled(podgc::CONTROLLER) {
        podgc::spawn(
            client(podgc::NAME),
            podgc::Config {
                terminated_threshold: args.terminated_pod_gc_threshold,
                period: args.pod_gc_period,
                quarantine: args.pod_gc_orphan_quarantine,
            },
            leadership.clone(),
        );
    }
    if args.controller_enabled(job::NAME) {
        job::spawn(
            client(job::NAME),
            job::Config {
                backoff_base: args.job_pod_failure_backoff,
                ..Default::default()
            },
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled(cronjob::NAME) {
        cronjob::spawn(
            client(cronjob::NAME),
            cronjob::Clock::new(args.cronjob_controller_clock_speed),
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled(ttlafterfinished::NAME) {
        ttlafterfinished::spawn(
            client(ttlafterfinished::NAME),
            leadership.clone(),
            &state.controllers,
        );
    }
    for flavor in [replicaset::REPLICA_SET, replicaset::REPLICATION_CONTROLLER] {
        if args.controller_enabled(flavor.controller) {
            replicaset::spawn(
                client(flavor.identity),
                flavor,
                leadership.clone(),
                &state.controllers,
            );
        }
    }
    if args.controller_enabled(deployment::NAME) {
        deployment::spawn(
            client(deployment::NAME),
            leadership.clone(),
            &state.controllers,
        );
    }
    if args.controller_enabled("serviceaccount-controller")
        || args.controller_enabled("root-ca-certificate-publisher-controller")
    {
        serviceaccounts::spawn(
            client(serviceaccounts::SA_CONTROLLER),
            client(serviceaccounts::ROOT_CA_PUBLISHER),
            ca_pem.to_string(),
            leadership.clone(),
            &state.controllers,
        );
    }
    let approve = args.controller_enabled(certificates::APPROVING);
    let authority = if args.controller_enabled(certificates::SIGNING) {
        let (cert_pem, key_pem) = match (
            &args.cluster_signing_cert_file,
            &args.cluster_signing_key_file,
        ) {
            (Some(c), Some(k)) => (std::fs::read_to_string(c)?, std::fs::read_to_string(k)?),
            _ => (pki.ca_pem.clone(), pki.ca_key_pem.clone()),
        };
        Some(Arc::new(certificates::Authority {
            cert_pem,
            key_pem,
            duration: args.cluster_signing_duration,
        }))
    } else {
        None
    };
    certificates::spawn(
        client(certificates::NAME),
        authority,
        approve,
        leadership.clone(),
        &state.controllers,
    );
    let advertise = args
        .advertise_address
        .unwrap_or(if address.ip().is_unspecified() {
            std::net::IpAddr::from([127, 0, 0, 1])
        } else {
            address.ip()
        });
    if args.enable_bootstrap_token_auth {
        let host = match advertise {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        let server = format!("https://{host}:{}", address.port());
        tokio::spawn(bootstrap::publish_cluster_info(
            objects.clone(),
            bootstrap::kubeconfig(&server, ca_pem),
        ));
        if args.controller_enabled(bootstrap::CONTROLLER) {
            bootstrap::spawn(
                client(bootstrap::NAME),
                leadership.clone(),
                &state.controllers,
            );
        }
    }
    apiservice::spawn(
        objects.clone(),
        apiservice::Endpoint {
            address: advertise,
            port: address.port(),
            cluster_ip: ranges.kubernetes_ip().into(),
            id: format!("{:x}", uuid::Uuid::new_v4().as_u128() >> 64),
        },
    );
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
