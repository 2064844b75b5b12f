//! The admission webhook client (`admissionregistration.k8s.io/v1`
//! Validating/MutatingWebhookConfiguration): the baseline that wasm plugins
//! replace, run through the same chain so users can migrate one policy at a
//! time. This is the registry's one outgoing HTTP call. Only `clientConfig.url` (HTTPS) is supported: there are no Services
//! to resolve. The server trusts exactly the `caBundle` of each webhook.

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_plugins::{AdmissionRequest, AdmissionResponse, DenyStatus, FieldCause};

pub const GROUP: &str = "admissionregistration.k8s.io";
pub const VALIDATING: &str = "validatingwebhookconfigurations";
pub const MUTATING: &str = "mutatingwebhookconfigurations";

/// One webhook endpoint with its own TLS trust.
pub struct Webhook {
    url: hyper::Uri,
    timeout: Duration,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// Why a webhook call failed (the chain applies the failure policy).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("timeout")]
    Timeout,
    #[error("request failed: {0}")]
    Transport(String),
    #[error("webhook answered HTTP {0}")]
    Status(u16),
    #[error("invalid response: {0}")]
    Invalid(String),
}

impl CallError {
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Timeout => "timeout",
            CallError::Transport(_) => "transport",
            CallError::Status(_) => "http_status",
            CallError::Invalid(_) => "invalid_output",
        }
    }
}

impl Webhook {
    pub fn new(url: &str, ca_bundle_b64: &str, timeout: Duration) -> Result<Self, String> {
        let url: hyper::Uri = url.parse().map_err(|e| format!("clientConfig.url: {e}"))?;
        if url.scheme_str() != Some("https") {
            return Err("clientConfig.url: must use https".into());
        }
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca_bundle_b64.trim())
            .map_err(|e| format!("clientConfig.caBundle: not base64: {e}"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("clientConfig.caBundle: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("clientConfig.caBundle: {e}"))?;
        }
        if roots.is_empty() {
            return Err("clientConfig.caBundle: no certificates".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let bundle: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .filter_map(Result::ok)
            .collect();
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| format!("clientConfig.caBundle: {e}"))?;
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(BundleVerifier { webpki, bundle }))
            .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .build();
        Ok(Webhook {
            url,
            timeout,
            client: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// Sends an `AdmissionReview` and reads the answer.
    pub async fn call(&self, req: &AdmissionRequest) -> Result<AdmissionResponse, CallError> {
        let review =
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req});
        let body = serde_json::to_vec(&review).map_err(|e| CallError::Invalid(e.to_string()))?;
        let http_req = hyper::Request::post(self.url.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| CallError::Transport(e.to_string()))?;
        let work = async {
            let resp = self
                .client
                .request(http_req)
                .await
                .map_err(|e| CallError::Transport(e.to_string()))?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| CallError::Transport(e.to_string()))?
                .to_bytes();
            if status != 200 {
                return Err(CallError::Status(status));
            }
            Ok(bytes)
        };
        let bytes = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| CallError::Timeout)??;
        parse_review(&bytes, &req.uid)
    }
}

fn parse_review(bytes: &[u8], uid: &str) -> Result<AdmissionResponse, CallError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| CallError::Invalid(e.to_string()))?;
    let r = &v["response"];
    if r["uid"].as_str() != Some(uid) {
        return Err(CallError::Invalid(
            "response.uid does not match the request".into(),
        ));
    }
    let allowed = r["allowed"]
        .as_bool()
        .ok_or_else(|| CallError::Invalid("response.allowed missing".into()))?;
    let status = r
        .get("status")
        .filter(|s| s.is_object())
        .map(|s| DenyStatus {
            code: s["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(403),
            reason: s["reason"].as_str().unwrap_or_default().to_string(),
            message: s["message"].as_str().unwrap_or_default().to_string(),
            causes: s["details"]["causes"]
                .as_array()
                .map(|causes| {
                    causes
                        .iter()
                        .map(|c| FieldCause {
                            field: c["field"].as_str().unwrap_or_default().to_string(),
                            reason: c["reason"].as_str().unwrap_or_default().to_string(),
                            message: c["message"].as_str().unwrap_or_default().to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        });
    let patch = match r["patch"].as_str() {
        None => None,
        Some(b64) => {
            if r["patchType"].as_str() != Some("JSONPatch") {
                return Err(CallError::Invalid("patchType must be JSONPatch".into()));
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| CallError::Invalid(format!("patch: {e}")))?;
            Some(
                serde_json::from_slice(&raw)
                    .map_err(|e| CallError::Invalid(format!("patch: {e}")))?,
            )
        }
    };
    let warnings = r["warnings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let audit_annotations = r["auditAnnotations"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    Ok(AdmissionResponse {
        allowed,
        status,
        patch,
        warnings,
        audit_annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_are_checked() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/x","value":1}]"#);
        let ok = json!({"response": {"uid": "u1", "allowed": true, "patchType": "JSONPatch", "patch": patch, "warnings": ["w"]}});
        let r = parse_review(ok.to_string().as_bytes(), "u1").unwrap();
        assert!(r.allowed);
        assert_eq!(
            r.patch,
            Some(json!([{"op": "add", "path": "/x", "value": 1}]))
        );
        assert_eq!(r.warnings, vec!["w"]);
        assert!(
            parse_review(ok.to_string().as_bytes(), "other").is_err(),
            "uid must match"
        );
        let denied = json!({"response": {"uid": "u1", "allowed": false, "status": {"code": 422, "message": "no"}}});
        let r = parse_review(denied.to_string().as_bytes(), "u1").unwrap();
        assert_eq!(r.status.unwrap().code, 422);
        assert!(parse_review(b"{}", "u1").is_err());
    }

    #[test]
    fn configs_need_https_and_a_ca() {
        let cfg = |url: &str, ca: &str| json!({"metadata": {"name": "c"}, "webhooks": [{"name": "w.example.com", "clientConfig": {"url": url, "caBundle": ca}}]});
        let err = |url, ca| {
            crate::admission::controller::webhook_entries(&cfg(url, ca), false)
                .err()
                .unwrap_or_default()
        };
        assert!(err("http://127.0.0.1:1/x", "AAAA").contains("https"));
        assert!(err("https://127.0.0.1:1/x", "").contains("caBundle"));
    }
}

/// Verifies a webhook's serving certificate as Go's `x509.Verify` does with
/// the `caBundle` as its roots (what kube-apiserver does): a serving
/// certificate that *is* one of the bundle's certificates is trusted as
/// itself once its validity period and names are checked, even when it is
/// marked `CA:TRUE` (kopf serves such a self-signed certificate and gives
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
