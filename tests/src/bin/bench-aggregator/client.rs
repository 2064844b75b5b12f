//! The benchmark's client: one HTTP/1.1 connection over TLS per simulated
//! client (hyper's connection-level client on tokio-rustls, so nothing but
//! the connection sits between the clock and the wire), the same code for
//! both paths; only the endpoint, the trust and the identity differ.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Where a client connects and as whom.
pub struct Endpoint {
    /// `127.0.0.1:PORT`.
    addr: String,
    tls: tokio_rustls::TlsConnector,
    server_name: ServerName<'static>,
    /// Sent with every request (the front proxy's identity headers).
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Endpoint {
    /// An endpoint that trusts `ca` (PEM), presents `cert`/`key` and checks
    /// the serving certificate for `server_name`.
    pub fn new(
        addr: String,
        ca: &Path,
        (cert, key): (&Path, &Path),
        server_name: &str,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Endpoint> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).with_context(|| ca.display().to_string())? {
            roots.add(c?)?;
        }
        let chain = CertificateDer::pem_file_iter(cert)
            .with_context(|| cert.display().to_string())?
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(key).with_context(|| key.display().to_string())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        let headers = headers
            .iter()
            .map(|(n, v)| Ok((HeaderName::try_from(*n)?, HeaderValue::try_from(*v)?)))
            .collect::<anyhow::Result<_>>()?;
        Ok(Endpoint {
            addr,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name: ServerName::try_from(server_name.to_string())?,
            headers,
        })
    }

    /// A new keep-alive connection (TCP and TLS handshakes done).
    pub async fn connect(self: &Arc<Self>) -> anyhow::Result<Conn> {
        let tcp = tokio::net::TcpStream::connect(&self.addr).await?;
        tcp.set_nodelay(true)?;
        let tls = self.tls.connect(self.server_name.clone(), tcp).await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(Conn {
            endpoint: self.clone(),
            sender,
        })
    }
}

/// One connection; requests on it go one at a time.
pub struct Conn {
    endpoint: Arc<Endpoint>,
    sender: SendRequest<Full<Bytes>>,
}

impl Conn {
    /// Sends a request and returns the response with its body unread.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<hyper::Response<Incoming>> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, &self.endpoint.addr)
            .header(http::header::ACCEPT, "application/json");
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        for (name, value) in &self.endpoint.headers {
            req = req.header(name, value);
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        self.sender.ready().await?;
        Ok(self.sender.send_request(req).await?)
    }

    /// Sends a request, reads the whole body and fails unless the status
    /// is `want`.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        want: StatusCode,
    ) -> anyhow::Result<Bytes> {
        let response = self.send(method.clone(), path, body).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        if status != want {
            bail!(
                "{method} {path} on {}: {status}: {}",
                self.endpoint.addr,
                String::from_utf8_lossy(&bytes)
            );
        }
        Ok(bytes)
    }

    /// `GET path` expecting 200, timed from the request to the body's end.
    pub async fn timed_get(&mut self, path: &str) -> anyhow::Result<std::time::Duration> {
        let start = Instant::now();
        self.call(Method::GET, path, None, StatusCode::OK).await?;
        Ok(start.elapsed())
    }
}
