//! A real HTTPS admission webhook on loopback, for tests and the benchmark:
//! it denies objects missing a required label (the same check as the
//! `require-labels` wasm plugin) and answers over TLS with a throw-away CA.

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct TestWebhook {
    pub url: String,
    /// The CA certificate, base64 of PEM (a `caBundle`).
    pub ca_bundle: String,
    pub calls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
    /// Closes open connections too when the webhook is dropped.
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Drop for TestWebhook {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.shutdown.send(true);
    }
}

fn review(req: &Value, label: &str) -> Value {
    let uid = req["request"]["uid"].clone();
    let has = req["request"]["object"]["metadata"]["labels"]
        .get(label)
        .is_some();
    let response = if has || req["request"]["operation"] != "CREATE" {
        json!({"uid": uid, "allowed": true})
    } else {
        json!({"uid": uid, "allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": format!("missing required label(s): {label}")}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Starts the webhook; it requires `label` on created objects.
pub async fn start(label: &'static str) -> TestWebhook {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    serve(label, leaf.der().clone(), leaf_key, ca.pem()).await
}

/// Starts the webhook serving one self-signed certificate marked
/// `CA:TRUE` for 127.0.0.1, which is also its `caBundle` (as kopf does).
#[allow(
    dead_code,
    reason = "not every test binary that includes this module uses it"
)]
pub async fn start_self_signed_ca(label: &'static str) -> TestWebhook {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    serve(label, cert.der().clone(), key, cert.pem()).await
}

async fn serve(
    label: &'static str,
    cert: rustls::pki_types::CertificateDer<'static>,
    leaf_key: rcgen::KeyPair,
    ca_pem: String,
) -> TestWebhook {
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let (shutdown, stop) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            let mut stop = stop.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::Relaxed);
                        let body = req.into_body().collect().await?.to_bytes();
                        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                        let out = serde_json::to_vec(&review(&v, label)).unwrap();
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from(out))))
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection(TokioIo::new(tls), svc);
                tokio::select! {
                    _ = conn => {}
                    _ = stop.changed() => {}
                }
            });
        }
    });
    TestWebhook {
        url: format!("https://{addr}/validate"),
        ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca_pem),
        calls,
        task,
        shutdown,
    }
}
