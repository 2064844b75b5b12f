//! TLS for the secure port: the cluster CA, the serving certificate and the
//! admin client certificate, created in `<data-dir>/pki` on first start and
//! reused after (like kubeadm's `/etc/kubernetes/pki`), and the rustls server
//! configuration that asks for (but does not require) client certificates.

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

/// Subject of the admin client certificate: `kubernetes-admin` in group
/// `system:masters`, as kubeadm issues it.
pub const ADMIN_USER: &str = "kubernetes-admin";
pub const ADMIN_GROUP: &str = "system:masters";

/// The PEM material the server and its kubeconfig need.
pub struct Pki {
    pub ca_pem: String,
    pub ca_key_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    /// The front proxy's CA (kubeadm's `front-proxy-ca`): it signs the
    /// client certificate this server presents to aggregated API servers.
    pub front_proxy_ca_pem: String,
    pub front_proxy_client_cert_pem: String,
    pub front_proxy_client_key_pem: String,
    /// The client certificate this server presents to kubelets (kubeadm's
    /// `apiserver-kubelet-client`, issued by the cluster CA).
    pub kubelet_client_cert_pem: String,
    pub kubelet_client_key_pem: String,
}

pub(crate) fn write_secret(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)?.write_all(text.as_bytes())
}

fn validity(params: &mut rcgen::CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

/// A CA in `<pki>/<name>.crt` and `.key`, created when missing.
fn ensure_ca(pki: &Path, name: &str, cn: &str) -> anyhow::Result<(String, String)> {
    let read = |ext: &str| std::fs::read_to_string(pki.join(format!("{name}.{ext}"))).ok();
    if let (Some(c), Some(k)) = (read("crt"), read("key")) {
        return Ok((c, k));
    }
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    validity(&mut params, 3650);
    let cert = params.self_signed(&key)?;
    write_secret(&pki.join(format!("{name}.key")), &key.serialize_pem())?;
    std::fs::write(pki.join(format!("{name}.crt")), cert.pem())?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A certificate `<pki>/<name>.crt` (and `.key`) that the CA `ca` issued,
/// created when missing.
fn ensure_issued(
    pki: &Path,
    ca: &(String, String),
    name: &str,
    mut params: rcgen::CertificateParams,
) -> anyhow::Result<(String, String)> {
    let read = |ext: &str| std::fs::read_to_string(pki.join(format!("{name}.{ext}"))).ok();
    if let (Some(c), Some(k)) = (read("crt"), read("key")) {
        return Ok((c, k));
    }
    let ca_key = rcgen::KeyPair::from_pem(&ca.1).context("CA key")?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.0, ca_key).context("CA certificate")?;
    let key = rcgen::KeyPair::generate()?;
    validity(&mut params, 365);
    let cert = params.signed_by(&key, &issuer)?;
    write_secret(&pki.join(format!("{name}.key")), &key.serialize_pem())?;
    std::fs::write(pki.join(format!("{name}.crt")), cert.pem())?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A client certificate's parameters: CN `user`, O `groups`.
fn client_params(user: &str, groups: &[&str]) -> anyhow::Result<rcgen::CertificateParams> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    for g in groups {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *g);
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    Ok(params)
}

/// Loads `<dir>/pki`, creating what is missing, with kubeadm's file names
/// for the front proxy. `hosts` become the serving certificate's SANs (IP
/// addresses or DNS names).
pub fn ensure(dir: &Path, hosts: &[String]) -> anyhow::Result<Pki> {
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki)?;
    let ca = ensure_ca(&pki, "ca", "wasm-apiserver-ca")?;
    // Normalized (a key written by another tool reads back the same).
    let ca_key_pem = rcgen::KeyPair::from_pem(&ca.1)
        .context("pki/ca.key")?
        .serialize_pem();

    let mut serving = rcgen::CertificateParams::new(hosts.to_vec())?;
    serving
        .distinguished_name
        .push(rcgen::DnType::CommonName, "wasm-apiserver");
    serving.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let (serving_cert_pem, serving_key_pem) = ensure_issued(&pki, &ca, "apiserver", serving)?;
    let (admin_cert_pem, admin_key_pem) = ensure_issued(
        &pki,
        &ca,
        "admin",
        client_params(ADMIN_USER, &[ADMIN_GROUP])?,
    )?;

    let front_proxy_ca = ensure_ca(&pki, "front-proxy-ca", "front-proxy-ca")?;
    let (front_proxy_client_cert_pem, front_proxy_client_key_pem) = ensure_issued(
        &pki,
        &front_proxy_ca,
        "front-proxy-client",
        client_params(FRONT_PROXY_CLIENT, &[])?,
    )?;

    let (kubelet_client_cert_pem, kubelet_client_key_pem) = ensure_issued(
        &pki,
        &ca,
        "apiserver-kubelet-client",
        client_params(KUBELET_CLIENT, &[])?,
    )?;

    Ok(Pki {
        ca_pem: ca.0,
        ca_key_pem,
        serving_cert_pem,
        serving_key_pem,
        admin_cert_pem,
        admin_key_pem,
        front_proxy_ca_pem: front_proxy_ca.0,
        front_proxy_client_cert_pem,
        front_proxy_client_key_pem,
        kubelet_client_cert_pem,
        kubelet_client_key_pem,
    })
}

/// The kubelet client certificate's user (kubeadm's CN): the bootstrap
/// policy binds it to `system:kubelet-api-admin`, so a kubelet that
/// authorizes through this server (webhook mode) lets it in, and it is
/// no cluster admin of this server.
pub const KUBELET_CLIENT: &str = wasm_apiserver_api::rbac::KUBELET_CLIENT_USER;

/// The front proxy's client certificate's CN (kubeadm's).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

fn certs(pem: &str, what: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let out: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .with_context(|| what.to_string())?;
    anyhow::ensure!(!out.is_empty(), "{what}: no certificates");
    Ok(out)
}

/// The rustls configuration of the secure port: serves `cert_pem`/`key_pem`
/// and asks for (but does not require) a client certificate. As upstream's
/// TLS layer does, it only checks that the client holds the certificate's
/// key; whether the certificate is signed by a client CA is the x509
/// authenticator's question ([`ClientCas::verify`]), so a bad certificate
/// gets a 401 rather than a failed handshake, and X.509 v1 certificates
/// (what `openssl x509 -req` makes, as the Kubernetes docs show), which
/// webpki refuses, are accepted when a client CA signed them.
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_cas: &ClientCas,
) -> anyhow::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyClientCert {
        hints: client_cas.hints.clone(),
        schemes: provider
            .signature_verification_algorithms
            .supported_schemes(),
    });
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).context("TLS private key")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(cert_pem, "TLS certificate")?, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The client CAs (`--client-ca-file`, and the cluster CA).
#[derive(Clone, Debug, Default)]
pub struct ClientCas {
    /// The CA certificates, DER.
    cas: Vec<Vec<u8>>,
    /// Their subjects, which the TLS layer sends as hints.
    hints: Vec<rustls::DistinguishedName>,
}

impl ClientCas {
    pub fn from_pems(pems: &[String]) -> anyhow::Result<Self> {
        let mut out = ClientCas::default();
        for pem in pems {
            for c in certs(pem, "client CA")? {
                let (_, parsed) = x509_parser::parse_x509_certificate(c.as_ref())
                    .map_err(|e| anyhow::anyhow!("client CA: {e}"))?;
                out.hints.push(rustls::DistinguishedName::from(
                    parsed.subject().as_raw().to_vec(),
                ));
                out.cas.push(c.as_ref().to_vec());
            }
        }
        Ok(out)
    }

    /// Verifies a client certificate against the client CAs, as the x509
    /// authenticator does: signed by one of them (v1 and v3 alike), and
    /// valid now. Returns the subject's user and groups.
    pub fn verify(&self, der: &[u8]) -> Result<(String, Vec<String>), String> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| format!("unparseable client certificate: {e}"))?;
        if !cert.validity().is_valid() {
            return Err("the client certificate has expired or is not yet valid".into());
        }
        let signed = self.cas.iter().any(|ca| {
            x509_parser::parse_x509_certificate(ca).is_ok_and(|(_, ca)| {
                ca.subject().as_raw() == cert.issuer().as_raw()
                    && cert.verify_signature(Some(ca.public_key())).is_ok()
            })
        });
        if !signed {
            return Err("x509: certificate signed by unknown authority".into());
        }
        subject(der).ok_or_else(|| "the client certificate has no common name".into())
    }
}

/// Accepts any client certificate whose key signed the handshake.
#[derive(Debug)]
struct AnyClientCert {
    hints: Vec<rustls::DistinguishedName>,
    schemes: Vec<rustls::SignatureScheme>,
}

impl AnyClientCert {
    /// Checks the handshake signature with the certificate's public key,
    /// which x509-parser reads from v1 certificates too.
    fn verify(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        use ring::signature as sig;
        use rustls::SignatureScheme as S;
        let bad = |m: &str| rustls::Error::General(format!("client certificate: {m}"));
        let (_, parsed) =
            x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|_| bad("unparseable"))?;
        let key = parsed.public_key().subject_public_key.data.as_ref();
        let alg: &dyn sig::VerificationAlgorithm = match dss.scheme {
            S::RSA_PKCS1_SHA256 => &sig::RSA_PKCS1_2048_8192_SHA256,
            S::RSA_PKCS1_SHA384 => &sig::RSA_PKCS1_2048_8192_SHA384,
            S::RSA_PKCS1_SHA512 => &sig::RSA_PKCS1_2048_8192_SHA512,
            S::RSA_PSS_SHA256 => &sig::RSA_PSS_2048_8192_SHA256,
            S::RSA_PSS_SHA384 => &sig::RSA_PSS_2048_8192_SHA384,
            S::RSA_PSS_SHA512 => &sig::RSA_PSS_2048_8192_SHA512,
            S::ECDSA_NISTP256_SHA256 => &sig::ECDSA_P256_SHA256_ASN1,
            S::ECDSA_NISTP384_SHA384 => &sig::ECDSA_P384_SHA384_ASN1,
            S::ED25519 => &sig::ED25519,
            _ => return Err(bad("unsupported signature scheme")),
        };
        sig::UnparsedPublicKey::new(alg, key)
            .verify(message, dss.signature())
            .map_err(|_| bad("bad handshake signature"))?;
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
}

impl rustls::server::danger::ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        // The chain is the x509 authenticator's to judge (a 401 when bad).
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verify(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        // TLS 1.3 allows no PKCS#1 v1.5 signatures in the handshake.
        if matches!(
            dss.scheme,
            rustls::SignatureScheme::RSA_PKCS1_SHA256
                | rustls::SignatureScheme::RSA_PKCS1_SHA384
                | rustls::SignatureScheme::RSA_PKCS1_SHA512
        ) {
            return Err(rustls::Error::PeerMisbehaved(
                rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
            ));
        }
        self.verify(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.schemes.clone()
    }
}

/// The user and groups of a verified client certificate: CN and O, as
/// kube-apiserver's x509 authenticator reads them.
pub fn subject(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let cn = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some((cn, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pki_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = ensure(dir.path(), &["127.0.0.1".into(), "localhost".into()]).unwrap();
        let b = ensure(dir.path(), &["127.0.0.1".into()]).unwrap();
        assert_eq!(a.ca_pem, b.ca_pem);
        assert_eq!(a.serving_cert_pem, b.serving_cert_pem);
        let admin = certs(&a.admin_cert_pem, "admin").unwrap();
        assert_eq!(
            subject(&admin[0]),
            Some((ADMIN_USER.to_string(), vec![ADMIN_GROUP.to_string()]))
        );
        let cas = ClientCas::from_pems(std::slice::from_ref(&a.ca_pem)).unwrap();
        server_config(&a.serving_cert_pem, &a.serving_key_pem, &cas).unwrap();
        assert_eq!(
            cas.verify(&admin[0]),
            Ok((ADMIN_USER.to_string(), vec![ADMIN_GROUP.to_string()]))
        );
        let other = ensure(tempfile::tempdir().unwrap().path(), &["127.0.0.1".into()]).unwrap();
        let stranger = certs(&other.admin_cert_pem, "admin").unwrap();
        assert!(
            cas.verify(&stranger[0])
                .unwrap_err()
                .contains("unknown authority")
        );
        // A lost leaf is re-issued by the same CA.
        std::fs::remove_file(dir.path().join("pki/admin.crt")).unwrap();
        let c = ensure(dir.path(), &["127.0.0.1".into()]).unwrap();
        assert_eq!(c.ca_pem, a.ca_pem);
        assert_ne!(c.admin_cert_pem, a.admin_cert_pem);
    }
}
