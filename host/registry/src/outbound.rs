//! Outbound HTTPS: the one place where this server connects to something
//! outside itself (admission webhooks, aggregated API servers, kubelets,
//! and the pods and service endpoints `pods/proxy` and `services/proxy`
//! reach). Every such connection is built here from three things:
//!
//! * **trust**: the `caBundle` an object names ([`Trust::Bundle`]), verified
//!   as Go's `x509.Verify` does with the bundle as roots, or none at all
//!   when an APIService says `insecureSkipTLSVerify` ([`Trust::Insecure`]);
//! * **the name the certificate must carry** when it is not the URL's host
//!   (an aggregated API server is dialled at an endpoint address and
//!   verified as `<service>.<namespace>.svc`, as kube-aggregator does);
//! * **the server's identity**, a client certificate (the front-proxy
//!   client certificate for aggregated API servers).
//!
//! Timeouts are the caller's (a webhook has its `timeoutSeconds`, a proxied
//! watch none); dialling has its own. Bodies stream both ways
//! ([`OutBody`]).

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use std::time::Duration;

/// The error type of a streamed body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body sent out: buffered or streamed from the caller's request.
pub type OutBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// A connection pool to one kind of peer (one trust, name and identity).
pub type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, OutBody>;

/// How long dialling a peer may take (TCP and TLS handshake are the
/// request's; this bounds the TCP connect of a peer that drops SYNs).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A buffered body.
pub fn full(bytes: impl Into<Bytes>) -> OutBody {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Which server certificates a connection accepts.
#[derive(Clone)]
pub enum Trust {
    /// Chains to one of these roots (a PEM `caBundle`).
    Bundle(Vec<CertificateDer<'static>>),
    /// Any certificate (`insecureSkipTLSVerify`).
    Insecure,
}

impl Trust {
    /// The trust of a base64 `caBundle` field (`field` names it in errors).
    pub fn from_ca_bundle(b64: &str, field: &str) -> Result<Trust, String> {
        use base64::Engine;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| format!("{field}: not base64: {e}"))?;
        Trust::from_pem(&pem).map_err(|e| format!("{field}: {e}"))
    }

    /// The trust of PEM certificates.
    pub fn from_pem(pem: &[u8]) -> Result<Trust, String> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        if certs.is_empty() {
            return Err("no certificates".into());
        }
        Ok(Trust::Bundle(certs))
    }
}

/// This server's client certificate and key.
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Identity, String> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("client certificate: {e}"))?;
        if chain.is_empty() {
            return Err("client certificate: no certificates".into());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| format!("client key: {e}"))?;
        Ok(Identity { chain, key })
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").finish_non_exhaustive()
    }
}

/// One peer's connection settings.
pub struct Peer<'a> {
    pub trust: &'a Trust,
    /// The name the peer's certificate must carry, when not the URL's host.
    pub server_name: Option<&'a str>,
    /// The client certificate this server presents.
    pub identity: Option<&'a Identity>,
}

/// A connection pool for `peer` (HTTPS only, HTTP/1.1). Its connections
/// can be upgraded (`hyper::upgrade::on` on a `101` answer): the kubelet
/// connection's exec, attach and port-forward streams.
pub fn client(peer: &Peer<'_>) -> Result<HttpsClient, String> {
    build(peer, false)
}

/// A connection pool that dials `http://` as well as `https://` URLs, for
/// `pods/proxy` and `services/proxy` (upstream's proxy transport: the
/// target's certificate is not verified, since a pod serves whatever
/// certificate it has, and no client certificate is presented).
pub fn proxy_client() -> Result<HttpsClient, String> {
    build(
        &Peer {
            trust: &Trust::Insecure,
            server_name: None,
            identity: None,
        },
        true,
    )
}

fn build(peer: &Peer<'_>, allow_http: bool) -> Result<HttpsClient, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> = match peer.trust {
        Trust::Bundle(certs) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs {
                roots.add(cert.clone()).map_err(|e| e.to_string())?;
            }
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| e.to_string())?;
            Arc::new(BundleVerifier {
                webpki,
                bundle: certs.clone(),
            })
        }
        Trust::Insecure => Arc::new(AnyServerCert(provider.clone())),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let tls = match peer.identity {
        Some(id) => builder
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .map_err(|e| format!("client certificate: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
    let https = if allow_http {
        https.https_or_http()
    } else {
        https.https_only()
    };
    let https = match peer.server_name {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.to_string())
                .map_err(|e| format!("server name {name:?}: {e}"))?;
            https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => https,
    };
    let https = https.enable_http1().wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(https))
}

/// `insecureSkipTLSVerify`: any certificate, its signatures still checked
/// (the handshake stays authenticated to whoever holds the key).
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Verifies a peer's serving certificate as Go's `x509.Verify` does with
/// the `caBundle` as its roots (what kube-apiserver does): a serving
/// certificate that *is* one of the bundle's certificates is trusted as
/// itself once its validity period and names are checked, even when it is
/// marked `CA:TRUE` (a webhook by kopf serves such a self-signed certificate and gives
/// it as its own `caBundle`; webpki refuses it as `CaUsedAsEndEntity`).
/// Every other chain is webpki's to verify.
#[derive(Debug)]
struct BundleVerifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    bundle: Vec<CertificateDer<'static>>,
}

impl rustls::client::danger::ServerCertVerifier for BundleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if self
            .bundle
            .iter()
            .any(|c| c.as_ref() == end_entity.as_ref())
        {
            check_root_as_leaf(end_entity, server_name, now)?;
            return Ok(rustls::client::danger::ServerCertVerified::assertion());
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Go's checks of a leaf that is itself a trusted root: within its validity
/// period, and one of its subject alternative names matches (IP addresses
/// exactly, DNS names case-insensitively with a `*.` wildcard for one
/// label; no common-name fallback, as Go since 1.15).
fn check_root_as_leaf(
    cert: &CertificateDer<'_>,
    server_name: &rustls::pki_types::ServerName<'_>,
    now: rustls::pki_types::UnixTime,
) -> Result<(), rustls::Error> {
    use rustls::CertificateError;
    use x509_parser::extensions::GeneralName;
    let bad = |e: CertificateError| rustls::Error::InvalidCertificate(e);
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|_| bad(CertificateError::BadEncoding))?;
    let at = x509_parser::time::ASN1Time::from_timestamp(now.as_secs() as i64)
        .map_err(|_| bad(CertificateError::BadEncoding))?;
    if !parsed.validity().is_valid_at(at) {
        return Err(bad(CertificateError::Expired));
    }
    let names: Vec<GeneralName<'_>> = parsed
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| san.value.general_names.clone())
        .unwrap_or_default();
    let matches = names.iter().any(|n| match (n, server_name) {
        (GeneralName::IPAddress(bytes), rustls::pki_types::ServerName::IpAddress(ip)) => {
            let want: std::net::IpAddr = (*ip).into();
            match want {
                std::net::IpAddr::V4(v4) => *bytes == v4.octets().as_slice(),
                std::net::IpAddr::V6(v6) => *bytes == v6.octets().as_slice(),
            }
        }
        (GeneralName::DNSName(pattern), rustls::pki_types::ServerName::DnsName(host)) => {
            let (p, h) = (
                pattern.to_ascii_lowercase(),
                host.as_ref().to_ascii_lowercase(),
            );
            match p.strip_prefix("*.") {
                Some(rest) => h
                    .split_once('.')
                    .is_some_and(|(first, tail)| !first.is_empty() && tail == rest),
                None => p == h,
            }
        }
        _ => false,
    });
    if !matches {
        return Err(bad(CertificateError::NotValidForName));
    }
    Ok(())
}
