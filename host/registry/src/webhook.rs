//! The admission webhook client (`admissionregistration.k8s.io/v1`
//! Validating/MutatingWebhookConfiguration): the baseline that wasm plugins
//! replace, run through the same chain so users can migrate one policy at a
//! time. Its connections are [`crate::outbound`]'s. Only `clientConfig.url` (HTTPS) is supported: there are no Services
//! to resolve. The server trusts exactly the `caBundle` of each webhook.

use crate::outbound::{self, HttpsClient, Peer, Trust};
use base64::Engine;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::time::Duration;
use wasm_apiserver_plugins::{AdmissionRequest, AdmissionResponse, DenyStatus, FieldCause};

pub const GROUP: &str = "admissionregistration.k8s.io";
pub const VALIDATING: &str = "validatingwebhookconfigurations";
pub const MUTATING: &str = "mutatingwebhookconfigurations";

/// One webhook endpoint with its own TLS trust.
pub struct Webhook {
    url: hyper::Uri,
    timeout: Duration,
    client: HttpsClient,
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
        let trust = Trust::from_ca_bundle(ca_bundle_b64, "clientConfig.caBundle")?;
        let client = outbound::client(&Peer {
            trust: &trust,
            server_name: None,
            identity: None,
        })
        .map_err(|e| format!("clientConfig.caBundle: {e}"))?;
        Ok(Webhook {
            url,
            timeout,
            client,
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
            .body(outbound::full(body))
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
