//! TLS for the secure port: the cluster CA, the serving certificate and the
//! admin client certificate, created in `<data-dir>/pki` on first start and
//! reused after (like kubeadm's `/etc/kubernetes/pki`), and the rustls server
//! configuration that asks for (but does not require) client certificates.

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Subject of the admin client certificate: `kubernetes-admin` in group
/// `system:masters`, as kubeadm issues it.
pub const ADMIN_USER: &str = "kubernetes-admin";
pub const ADMIN_GROUP: &str = "system:masters";

/// The PEM material the server and its kubeconfig need.
pub struct Pki {
    pub ca_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
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

/// Loads `<dir>/pki`, creating what is missing. `hosts` become the serving
/// certificate's SANs (IP addresses or DNS names).
pub fn ensure(dir: &Path, hosts: &[String]) -> anyhow::Result<Pki> {
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki)?;
    let file = |n: &str| -> PathBuf { pki.join(n) };
    let read = |n: &str| std::fs::read_to_string(file(n)).ok();

    let (ca_pem, ca_key_pem) = match (read("ca.crt"), read("ca.key")) {
        (Some(c), Some(k)) => (c, k),
        _ => {
            let key = rcgen::KeyPair::generate()?;
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "wasm-apiserver-ca");
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.key_usages = vec![
                rcgen::KeyUsagePurpose::KeyCertSign,
                rcgen::KeyUsagePurpose::CrlSign,
            ];
            validity(&mut params, 3650);
            let cert = params.self_signed(&key)?;
            write_secret(&file("ca.key"), &key.serialize_pem())?;
            std::fs::write(file("ca.crt"), cert.pem())?;
            (cert.pem(), key.serialize_pem())
        }
    };
    let ca_key = rcgen::KeyPair::from_pem(&ca_key_pem).context("pki/ca.key")?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).context("pki/ca.crt")?;

    let issue = |name: &str,
                 mut params: rcgen::CertificateParams|
     -> anyhow::Result<(String, String)> {
        if let (Some(c), Some(k)) = (read(&format!("{name}.crt")), read(&format!("{name}.key"))) {
            return Ok((c, k));
        }
        let key = rcgen::KeyPair::generate()?;
        validity(&mut params, 365);
        let cert = params.signed_by(&key, &issuer)?;
        write_secret(&file(&format!("{name}.key")), &key.serialize_pem())?;
        std::fs::write(file(&format!("{name}.crt")), cert.pem())?;
        Ok((cert.pem(), key.serialize_pem()))
    };

    let mut serving = rcgen::CertificateParams::new(hosts.to_vec())?;
    serving
        .distinguished_name
        .push(rcgen::DnType::CommonName, "wasm-apiserver");
    serving.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let (serving_cert_pem, serving_key_pem) = issue("apiserver", serving)?;

    let mut admin = rcgen::CertificateParams::new(Vec::<String>::new())?;
    admin
        .distinguished_name
        .push(rcgen::DnType::CommonName, ADMIN_USER);
    admin
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, ADMIN_GROUP);
    admin.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let (admin_cert_pem, admin_key_pem) = issue("admin", admin)?;

    Ok(Pki {
        ca_pem,
        serving_cert_pem,
        serving_key_pem,
        admin_cert_pem,
        admin_key_pem,
    })
}

fn certs(pem: &str, what: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let out: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .with_context(|| what.to_string())?;
    anyhow::ensure!(!out.is_empty(), "{what}: no certificates");
    Ok(out)
}

/// The rustls configuration of the secure port: serves `cert_pem`/`key_pem`,
/// and verifies client certificates against `client_cas` when one is sent.
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_cas: &[String],
) -> anyhow::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for pem in client_cas {
        for c in certs(pem, "client CA")? {
            roots.add(c)?;
        }
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).context("TLS private key")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(cert_pem, "TLS certificate")?, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
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
        server_config(
            &a.serving_cert_pem,
            &a.serving_key_pem,
            std::slice::from_ref(&a.ca_pem),
        )
        .unwrap();
        // A lost leaf is re-issued by the same CA.
        std::fs::remove_file(dir.path().join("pki/admin.crt")).unwrap();
        let c = ensure(dir.path(), &["127.0.0.1".into()]).unwrap();
        assert_eq!(c.ca_pem, a.ca_pem);
        assert_ne!(c.admin_cert_pem, a.admin_cert_pem);
    }
}
