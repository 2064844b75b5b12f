//! `sample-apiserver`: a small extension API server for the aggregation tests,
//! a stand-in for Kubernetes' `k8s.io/sample-apiserver`.
//!
//! It serves the group `wardle.example.com/v1alpha1` (one namespaced
//! resource, `flunders`, kept in memory) over TLS, and behaves towards the
//! main server as a server built with `k8s.io/apiserver` does behind
//! kube-aggregator:
//!
//! - **Authentication** by the front proxy's request headers
//!   (`requestheader` authenticator): a client certificate signed by the
//!   request-header CA, with an allowed CN, vouches for `X-Remote-User`,
//!   `X-Remote-Group` and `X-Remote-Extra-*`; otherwise a bearer token goes
//!   to a `TokenReview`. The CA, the allowed names and the header names come
//!   from ConfigMap `kube-system/extension-apiserver-authentication`, read
//!   through `--kubeconfig` and re-read every 10 s (delegated authentication).
//! - **Authorization** by a `SubjectAccessReview` to the main server
//!   (delegated authorization), decisions cached for 10 s.
//! - **The API**: discovery (legacy and aggregated v2), OpenAPI v2 and v3,
//!   create/get/list/watch/update/patch/delete with upstream's `Status`
//!   errors, and `Table` output for kubectl.
//!
//! `--mode hang` and `--mode garbage-discovery` make it misbehave on purpose
//! so that tests can check how the main server copes. `--request-log` records
//! what reached it. The modules: [`tls`] (certificates and the TLS layer),
//! [`auth`] (authentication and authorization), [`api`] (request attributes,
//! the store and the handlers), [`status`] (responses and `Status` errors),
//! [`docs`] (discovery and OpenAPI documents).
//!
//! # Flags
//!
//! `--flag value` or `--flag=value`:
//!
//! - `--secure-port N` (0 picks a free port), `--bind-address ADDR`
//!   (127.0.0.1); once listening it prints `listening on ADDR:PORT`.
//! - `--cert-dir DIR`: `ca.crt` (for the APIService's `caBundle`),
//!   `tls.crt`, `tls.key` (and `ca.key`), created unless there; the serving
//!   certificate names `--tls-sni NAME` (repeatable; `api.wardle.svc`),
//!   `127.0.0.1` and `localhost`.
//! - `--kubeconfig PATH`: the main server, for the authentication ConfigMap,
//!   TokenReviews and SubjectAccessReviews.
//! - Without it: `--requestheader-client-ca-file PATH`,
//!   `--requestheader-allowed-names a,b`, `--requestheader-username-headers`,
//!   `--requestheader-group-headers`, `--requestheader-extra-headers-prefix`
//!   (comma lists; `X-Remote-User`, `X-Remote-Group`, `X-Remote-Extra-`) and
//!   `--authorization-always-allow` (also allowed with `--kubeconfig`).
//! - `--request-log FILE`: one line per request,
//!   `METHOD PATH?QUERY user=NAME groups=G1,G2` (empty when unauthenticated).
//! - `--mode normal|hang|garbage-discovery`.

mod api;
mod auth;
mod docs;
mod status;
mod tls;

use std::convert::Infallible;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;

use crate::api::RequestInfo;
use crate::auth::{Auth, Decision, HeaderNames};
use crate::status::{Body, Status};

/// How the server answers: normally, never, or with broken discovery.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Normal,
    Hang,
    GarbageDiscovery,
}

/// The command line, with kube-apiserver's flag names where one exists.
struct Args {
    secure_port: u16,
    bind_address: String,
    cert_dir: Option<PathBuf>,
    tls_sni: Vec<String>,
    kubeconfig: Option<PathBuf>,
    requestheader_client_ca_file: Option<PathBuf>,
    requestheader_allowed_names: Vec<String>,
    headers: HeaderNames,
    authorization_always_allow: bool,
    request_log: Option<PathBuf>,
    mode: Mode,
}

fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parses `--flag=value` and `--flag value`; a bare
/// `--authorization-always-allow` means true.
fn parse_args(argv: impl IntoIterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        secure_port: 0,
        bind_address: "127.0.0.1".into(),
        cert_dir: None,
        tls_sni: Vec::new(),
        kubeconfig: None,
        requestheader_client_ca_file: None,
        requestheader_allowed_names: Vec::new(),
        headers: HeaderNames::default(),
        authorization_always_allow: false,
        request_log: None,
        mode: Mode::Normal,
    };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--") else {
            bail!("unexpected argument {arg:?}");
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (flag, None),
        };
        if name == "authorization-always-allow" {
            args.authorization_always_allow = inline.as_deref().unwrap_or("true").parse()?;
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .with_context(|| format!("--{name} needs a value"))?,
        };
        match name {
            "secure-port" => args.secure_port = value.parse().context("--secure-port")?,
            "bind-address" => args.bind_address = value,
            "cert-dir" => args.cert_dir = Some(value.into()),
            "tls-sni" => args.tls_sni.push(value),
            "kubeconfig" => args.kubeconfig = Some(value.into()),
            "requestheader-client-ca-file" => {
                args.requestheader_client_ca_file = Some(value.into())
            }
            "requestheader-allowed-names" => args.requestheader_allowed_names = split_list(&value),
            "requestheader-username-headers" => args.headers.username = split_list(&value),
            "requestheader-group-headers" => args.headers.group = split_list(&value),
            "requestheader-extra-headers-prefix" => args.headers.extra_prefix = split_list(&value),
            "request-log" => args.request_log = Some(value.into()),
            "mode" => {
                args.mode = match value.as_str() {
                    "normal" => Mode::Normal,
                    "hang" => Mode::Hang,
                    "garbage-discovery" => Mode::GarbageDiscovery,
                    other => bail!("--mode: unknown mode {other:?}"),
                }
            }
            other => bail!("unknown flag --{other}"),
        }
    }
    if args.tls_sni.is_empty() {
        args.tls_sni.push("api.wardle.svc".into());
    }
    if args.kubeconfig.is_none() && !args.authorization_always_allow {
        bail!("without --kubeconfig there is no authorizer: pass --authorization-always-allow");
    }
    Ok(args)
}

/// Everything a request needs.
struct App {
    mode: Mode,
    auth: Auth,
    store: api::Store,
    request_log: Option<Mutex<std::fs::File>>,
}

impl App {
    /// The filter chain in request order: authentication → request log →
    /// (hang) → health → authorization → handler.
    async fn handle(
        &self,
        req: Request<Incoming>,
        peer: &[CertificateDer<'static>],
    ) -> Response<Body> {
        let user = self.auth.authenticate(req.headers(), peer).await;
        self.log(&req, user.as_ref());
        if self.mode == Mode::Hang {
            std::future::pending::<()>().await;
        }
        let path = req.uri().path().to_owned();
        if matches!(path.as_str(), "/healthz" | "/readyz" | "/livez") {
            return status::respond(200, "text/plain; charset=utf-8", b"ok".to_vec());
        }
        let Some(user) = user else {
            return Status::failure(401, "Unauthorized", "Unauthorized").into();
        };
        let info = RequestInfo::new(req.method(), &path, req.uri().query());
        match self.auth.authorize(&user, &info).await {
            Decision::Allow => {}
            Decision::Deny(reason) => {
                return Status::forbidden(&user.name, &info, &reason).into();
            }
            Decision::Error(e) => {
                eprintln!("sample-apiserver: authorization of {path}: {e}");
                let message = "Internal error occurred: authorization failed";
                return Status::failure(500, "InternalError", message).into();
            }
        }
        if self.mode == Mode::GarbageDiscovery
            && matches!(path.as_str(), "/apis" | "/apis/wardle.example.com/v1alpha1")
        {
            return status::respond(200, "application/json", b"<html>garbage".to_vec());
        }
        api::serve(&self.store, req, &info).await
    }

    /// One line per request: `METHOD PATH?QUERY user=NAME groups=G1,G2`.
    fn log(&self, req: &Request<Incoming>, user: Option<&auth::User>) {
        let Some(file) = &self.request_log else {
            return;
        };
        let (name, groups) = user.map_or((String::new(), String::new()), |u| {
            (u.name.clone(), u.groups.join(","))
        });
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let line = format!("{} {target} user={name} groups={groups}\n", req.method());
        if let Err(e) = file.lock().unwrap().write_all(line.as_bytes()) {
            eprintln!("sample-apiserver: --request-log: {e}");
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args(std::env::args().skip(1))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert_dir = args.cert_dir.clone().context("--cert-dir is required")?;
    let serving = tls::Serving::ensure(&cert_dir, &args.tls_sni, provider.clone())?;
    let auth = Auth::start(&args, provider.clone()).await?;
    let request_log = match &args.request_log {
        Some(p) => Some(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| p.display().to_string())?,
        )),
        None => None,
    };
    let app = Arc::new(App {
        mode: args.mode,
        auth,
        store: api::Store::default(),
        request_log,
    });

    let listener =
        tokio::net::TcpListener::bind((args.bind_address.as_str(), args.secure_port)).await?;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;

    loop {
        let (tcp, _) = listener.accept().await?;
        // The request-header CA may have changed since the last connection:
        // each connection gets a configuration with the current one's hints.
        let acceptor = match serving.server_config(&app.auth.client_ca_hints()) {
            Ok(config) => tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            Err(e) => {
                eprintln!("sample-apiserver: TLS configuration: {e:#}");
                continue;
            }
        };
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let peer: Arc<[CertificateDer<'static>]> = stream
                .get_ref()
                .1
                .peer_certificates()
                .map(|c| c.to_vec().into())
                .unwrap_or_default();
            let service = service_fn(move |req| {
                let (app, peer) = (app.clone(), peer.clone());
                async move { Ok::<_, Infallible>(app.handle(req, &peer).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
