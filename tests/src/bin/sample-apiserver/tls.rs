//! The TLS layer: the serving certificate in `--cert-dir` (a CA of its own
//! and a certificate it signs, kept across restarts), and a client
//! certificate verifier that, like Go's `tls.RequestClientCert` in
//! `k8s.io/apiserver`, asks for a certificate but leaves judging it to the
//! authenticator: a certificate from another CA is a 401, not a failed
//! handshake.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The serving certificate chain and key.
pub struct Serving {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl Serving {
    /// Loads `dir/tls.crt` and `dir/tls.key`, or creates them: signed by
    /// `dir/ca.crt` (created too when missing) for `names`, `127.0.0.1` and
    /// `localhost`.
    pub fn ensure(
        dir: &Path,
        names: &[String],
        provider: Arc<CryptoProvider>,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        let read = |n: &str| std::fs::read_to_string(dir.join(n)).ok();
        let (cert_pem, key_pem) = match (read("tls.crt"), read("tls.key"), read("ca.crt")) {
            (Some(c), Some(k), Some(_)) => (c, k),
            _ => {
                let (ca_pem, ca_key) = match (read("ca.crt"), read("ca.key")) {
                    (Some(c), Some(k)) => (c, rcgen::KeyPair::from_pem(&k)?),
                    _ => {
                        let key = rcgen::KeyPair::generate()?;
                        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
                        params
                            .distinguished_name
                            .push(rcgen::DnType::CommonName, "sample-apiserver-ca");
                        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                        let pem = params.self_signed(&key)?.pem();
                        write_private(&dir.join("ca.key"), &key.serialize_pem())?;
                        std::fs::write(dir.join("ca.crt"), &pem)?;
                        (pem, key)
                    }
                };
                let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key)?;
                let mut sans = names.to_vec();
                sans.extend(["127.0.0.1".into(), "localhost".into()]);
                let mut params = rcgen::CertificateParams::new(sans)?;
                params
                    .distinguished_name
                    .push(rcgen::DnType::CommonName, names[0].as_str());
                params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
                let key = rcgen::KeyPair::generate()?;
                let cert = params.signed_by(&key, &issuer)?;
                write_private(&dir.join("tls.key"), &key.serialize_pem())?;
                std::fs::write(dir.join("tls.crt"), cert.pem())?;
                (cert.pem(), key.serialize_pem())
            }
        };
        Ok(Self {
            chain: CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>()?,
            key: PrivateKeyDer::from_pem_slice(key_pem.as_bytes())?,
            provider,
        })
    }

    /// A server configuration that asks for a client certificate, hinting
    /// at the subjects of the current request-header CA.
    pub fn server_config(
        &self,
        hints: &[DistinguishedName],
    ) -> anyhow::Result<rustls::ServerConfig> {
        let verifier = RequestClientCert {
            hints: hints.to_vec(),
            algorithms: self.provider.signature_verification_algorithms,
        };
        Ok(
            rustls::ServerConfig::builder_with_provider(self.provider.clone())
                .with_safe_default_protocol_versions()?
                .with_client_cert_verifier(Arc::new(verifier))
                .with_single_cert(self.chain.clone(), self.key.clone_key())?,
        )
    }
}

/// Writes a private key (readable by its owner only on Unix).
fn write_private(path: &Path, pem: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(pem.as_bytes())
}

/// Accepts any client certificate whose holder proves it has the key; the
/// authenticator verifies the chain.
#[derive(Debug)]
struct RequestClientCert {
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A webpki verifier of client certificates against the CAs in `pem`, with
/// the subjects to hint at.
pub fn client_verifier(
    pem: &str,
    provider: Arc<CryptoProvider>,
) -> anyhow::Result<(Arc<dyn ClientCertVerifier>, Vec<DistinguishedName>)> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let hints = roots.subjects();
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()?;
    Ok((verifier, hints))
}

/// Whether `verifier` accepts the chain the peer presented.
pub fn verified(verifier: &dyn ClientCertVerifier, peer: &[CertificateDer<'_>]) -> bool {
    peer.split_first().is_some_and(|(leaf, rest)| {
        verifier
            .verify_client_cert(leaf, rest, UnixTime::now())
            .is_ok()
    })
}

/// The subject's common name of a DER certificate.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_owned();
    Some(cn)
}
