//! CertificateSigningRequests (`certificates.k8s.io/v1`), as upstream's
//! registry strategy and validation: the requester is recorded on create
//! (nobody creates a pre-approved request), the object itself changes only
//! in metadata, `approval` changes only the conditions, `status` changes
//! everything else and may set the certificate once; approval conditions
//! are never removed, `Approved` and `Denied` exclude each other. Also the
//! parsing of the PKCS#10 request that admission and the certificate
//! controllers share.

use crate::strategy::Strategy;
use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::validation::{dns1123_label_error, dns1123_subdomain_error};
use wasm_apiserver_api::{ApiError, Cause, ResourceInfo, meta};
use wasm_apiserver_plugins::UserInfo;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

pub const GROUP: &str = "certificates.k8s.io";
pub const PLURAL: &str = "certificatesigningrequests";
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// The key usages a request may ask for (upstream's `KeyUsage` values).
const USAGES: [&str; 23] = [
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// What the server needs of a PKCS#10 request.
#[derive(Debug, Default)]
pub struct Request {
    pub pem: String,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: usize,
    pub emails: usize,
    pub ips: usize,
    pub uris: usize,
}

/// Decodes and checks `spec.request` (base64 of a PEM `CERTIFICATE
/// REQUEST`): its structure and its self-signature.
pub fn parse_request(spec: &Value) -> Result<Request, String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(spec["request"].as_str().unwrap_or_default())
        .map_err(|e| format!("not base64: {e}"))?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&raw)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
            .map_err(|e| format!("x509: {e}"))?;
    csr.verify_signature()
        .map_err(|_| "x509: invalid signature".to_string())?;
    let subject = &csr.certification_request_info.subject;
    let text = |a: &x509_parser::x509::AttributeTypeAndValue| a.as_str().unwrap_or("").to_string();
    let mut out = Request {
        pem: String::from_utf8_lossy(&raw).into_owned(),
        common_name: subject
            .iter_common_name()
            .next()
            .map(text)
            .unwrap_or_default(),
        organizations: subject.iter_organization().map(text).collect(),
        ..Default::default()
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(_) => out.dns_names += 1,
                    GeneralName::RFC822Name(_) => out.emails += 1,
                    GeneralName::IPAddress(_) => out.ips += 1,
                    GeneralName::URI(_) => out.uris += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(out)
}

/// The request's `spec.usages`.
pub fn usages(spec: &Value) -> BTreeSet<String> {
    spec["usages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u.as_str().map(String::from))
        .collect()
}

fn usages_are(have: &BTreeSet<String>, choices: &[&[&str]]) -> bool {
    choices
        .iter()
        .any(|c| c.len() == have.len() && c.iter().all(|u| have.contains(*u)))
}

/// Upstream's `ValidateKubeletClientCSR`: a node's client certificate.
pub fn check_kubelet_client(req: &Request, usages: &BTreeSet<String>) -> Result<(), String> {
    if req.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    for (n, what) in [
        (req.dns_names, "DNS"),
        (req.emails, "Email"),
        (req.ips, "IP"),
        (req.uris, "URI"),
    ] {
        if n > 0 {
            return Err(format!("{what} subjectAltNames are not allowed"));
        }
    }
    if !req.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    if !usages_are(
        usages,
        &[
            &["digital signature", "key encipherment", "client auth"],
            &["digital signature", "client auth"],
        ],
    ) {
        return Err("usages did not match [client auth digital signature key encipherment]".into());
    }
    Ok(())
}

/// Upstream's `ValidateKubeletServingCSR`: a node's serving certificate.
pub fn check_kubelet_serving(req: &Request, usages: &BTreeSet<String>) -> Result<(), String> {
    if req.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if req.dns_names + req.ips == 0 {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if req.emails > 0 {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if req.uris > 0 {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !usages_are(
        usages,
        &[
            &["digital signature", "key encipherment", "server auth"],
            &["digital signature", "server auth"],
        ],
    ) {
        return Err("usages did not match [digital signature key encipherment server auth]".into());
    }
    if !req.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// The `kubernetes.io/kube-apiserver-client` signer's check: client usages.
pub fn check_client_usages(usages: &BTreeSet<String>) -> Result<(), String> {
    for u in usages {
        if !matches!(
            u.as_str(),
            "digital signature" | "key encipherment" | "client auth"
        ) {
            return Err(format!("invalid usage for client certificate: {u}"));
        }
    }
    if !usages.contains("client auth") {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

/// The conditions of type `ty`.
fn of_type<'a>(obj: &'a Value, ty: &str) -> Vec<&'a Value> {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == ty)
        .collect()
}

/// Whether the request carries a condition of type `ty` (any status, as
/// upstream's approval check).
pub fn has_condition(obj: &Value, ty: &str) -> bool {
    !of_type(obj, ty).is_empty()
}

/// Approved, not denied, not failed.
pub fn approved(obj: &Value) -> bool {
    has_condition(obj, "Approved")
        && !has_condition(obj, "Denied")
        && !of_type(obj, "Failed")
            .iter()
            .any(|c| matches!(c["status"].as_str(), Some("True" | "") | None))
}

pub fn certificate(obj: &Value) -> &str {
    obj["status"]["certificate"].as_str().unwrap_or_default()
}

fn forbidden(field: &str, detail: String) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        field: field.into(),
        message: format!("Forbidden: {detail}"),
    }
}

/// Fills in condition timestamps as upstream: a new condition's
/// `lastTransitionTime` carries over from an old one of the same type and
/// status.
fn stamp_conditions(new: &mut Value, old: &Value) {
    let now = json!(meta::timestamp(chrono::Utc::now()));
    let Some(conds) = new["status"]
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for c in conds {
        if !c.is_object() {
            continue;
        }
        if c["lastUpdateTime"].as_str().is_none_or(str::is_empty) {
            c["lastUpdateTime"] = now.clone();
        }
        if c["lastTransitionTime"].as_str().is_none_or(str::is_empty) {
            let carried = of_type(old, c["type"].as_str().unwrap_or_default())
                .into_iter()
                .find(|o| o["status"] == c["status"] && o["lastTransitionTime"].is_string())
                .map(|o| o["lastTransitionTime"].clone());
            c["lastTransitionTime"] = carried.unwrap_or_else(|| now.clone());
        }
    }
}

pub struct CertificateSigningRequests;

impl CertificateSigningRequests {
    fn invalid(obj: &Value, causes: Vec<Cause>) -> ApiError {
        ApiError::Invalid(
            Target::new(
                GROUP,
                "CertificateSigningRequest",
                meta::name(obj).unwrap_or_default(),
            ),
            causes,
        )
    }

    fn validate_spec(spec: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
        if let Err(e) = parse_request(spec) {
            out.push(Cause::invalid("spec.request", "<request>", &e));
        }
        let old_usages_odd = old.is_some_and(|o| {
            let list: Vec<&Value> = o["spec"]["usages"]
                .as_array()
                .into_iter()
                .flatten()
                .collect();
            let set: BTreeSet<&str> = list.iter().filter_map(|u| u.as_str()).collect();
            set.len() != list.len() || set.iter().any(|u| !USAGES.contains(u))
        });
        let list: Vec<&Value> = spec["usages"].as_array().into_iter().flatten().collect();
        if list.is_empty() {
            out.push(Cause::missing("spec.usages"));
        }
        if !old_usages_odd {
            let mut seen = BTreeSet::new();
            for (i, u) in list.iter().enumerate() {
                let s = u.as_str().unwrap_or_default();
                if !USAGES.contains(&s) {
                    out.push(Cause {
                        reason: "FieldValueNotSupported".into(),
                        field: format!("spec.usages[{i}]"),
                        message: format!(
                            "Unsupported value: {s:?}: supported values: {}",
                            USAGES.map(|u| format!("{u:?}")).join(", ")
                        ),
                    });
                } else if !seen.insert(s) {
                    out.push(Cause {
                        reason: "FieldValueDuplicate".into(),
                        field: format!("spec.usages[{i}]"),
                        message: format!("Duplicate value: {s:?}"),
                    });
                }
            }
        }
        let signer = spec["signerName"].as_str().unwrap_or_default();
        if signer == LEGACY_UNKNOWN && old.is_none_or(|o| o["spec"]["signerName"] != LEGACY_UNKNOWN)
        {
            out.push(Cause::invalid(
                "spec.signerName",
                signer,
                "the legacy signerName is not allowed via this API version",
            ));
        } else if let Some(e) = signer_name_error(signer) {
            out.push(e);
        }
        if let Some(s) = spec["expirationSeconds"].as_i64().filter(|s| *s < 600) {
            out.push(Cause {
                reason: "FieldValueInvalid".into(),
                field: "spec.expirationSeconds".into(),
                message: format!(
                    "Invalid value: {s}: may not specify a duration less than 600 seconds (10 minutes)"
                ),
            });
        }
    }

    fn validate_status(obj: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
        let conds: Vec<&Value> = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let old_has_both =
            old.is_some_and(|o| has_condition(o, "Approved") && has_condition(o, "Denied"));
        let mut seen = BTreeSet::new();
        let mut approval = None;
        for (i, c) in conds.iter().enumerate() {
            let ty = c["type"].as_str().unwrap_or_default();
            let status = c["status"].as_str().unwrap_or_default();
            let at = |f: &str| format!("status.conditions[{i}].{f}");
            if ty.is_empty() {
                out.push(Cause::missing(&at("type")));
            }
            if status.is_empty() {
                out.push(Cause::missing(&at("status")));
            } else if matches!(ty, "Approved" | "Denied" | "Failed") && status != "True" {
                out.push(Cause {
                    reason: "FieldValueNotSupported".into(),
                    field: at("status"),
                    message: format!("Unsupported value: {status:?}: supported values: \"True\""),
                });
            } else if !matches!(status, "True" | "False" | "Unknown") {
                out.push(Cause {
                    reason: "FieldValueNotSupported".into(),
                    field: at("status"),
                    message: format!("Unsupported value: {status:?}: supported values: \"False\", \"True\", \"Unknown\""),
                });
            }
            if matches!(ty, "Approved" | "Denied") {
                match approval {
                    Some(first) if first != ty && !old_has_both => out.push(Cause::invalid(
                        &at("type"),
                        ty,
                        "Approved and Denied conditions are mutually exclusive",
                    )),
                    _ => approval = Some(ty),
                }
            }
            if !ty.is_empty() && !seen.insert(ty) {
                out.push(Cause {
                    reason: "FieldValueDuplicate".into(),
                    field: at("type"),
                    message: format!("Duplicate value: {ty:?}"),
                });
            }
        }
        let cert = certificate(obj);
        if !cert.is_empty()
            && old.is_none_or(|o| certificate(o) != cert)
            && let Err(e) = check_certificate_pem(cert)
        {
            out.push(Cause::invalid(
                "status.certificate",
                "<certificate data>",
                &e,
            ));
        }
        if let Some(old) = old {
            for ty in ["Approved", "Denied", "Failed"] {
                if of_type(obj, ty).len() < of_type(old, ty).len() {
                    out.push(forbidden(
                        "status.conditions",
                        format!("updates may not remove a condition of type {ty:?}"),
                    ));
                }
            }
            if !certificate(old).is_empty() && certificate(old) != cert {
                out.push(forbidden(
                    "status.certificate",
                    "updates may not modify existing certificate content".into(),
                ));
            }
        }
    }
}

/// `status.certificate`: PEM `CERTIFICATE` blocks only, no headers, each
/// a certificate.
fn check_certificate_pem(text: &str) -> Result<(), String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not base64: {e}"))?;
    let mut blocks = 0;
    for pem in x509_parser::pem::Pem::iter_from_buffer(&raw) {
        let pem = pem.map_err(|e| format!("PEM: {e}"))?;
        if pem.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                pem.label
            ));
        }
        x509_parser::parse_x509_certificate(&pem.contents).map_err(|e| e.to_string())?;
        blocks += 1;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

/// Upstream's `ValidateSignerName`: `<domain>/<path>`.
fn signer_name_error(name: &str) -> Option<Cause> {
    let field = "spec.signerName";
    if name.is_empty() {
        return Some(Cause::missing(field));
    }
    let Some((domain, path)) = name.split_once('/').filter(|(_, p)| !p.contains('/')) else {
        return Some(Cause::invalid(
            field,
            name,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
    };
    let labels: Vec<&str> = domain.split('.').collect();
    if let Some((l, e)) = labels
        .iter()
        .find_map(|l| dns1123_label_error(l).map(|e| (l, e)))
    {
        return Some(Cause::invalid(
            field,
            domain,
            &format!("validating label {l:?}: {e}"),
        ));
    }
    if labels.len() < 2 {
        return Some(Cause::invalid(
            field,
            domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    if let Some((p, e)) = path
        .split('.')
        .find_map(|p| dns1123_subdomain_error(p).map(|e| (p, e)))
    {
        return Some(Cause::invalid(
            field,
            path,
            &format!("validating label {p:?}: {e}"),
        ));
    }
    None
}

impl Strategy for CertificateSigningRequests {
    fn prepare_for_create(&self, obj: &mut Value, user: &UserInfo) {
        let spec = &mut obj["spec"];
        if let Some(s) = spec.as_object_mut() {
            for k in ["username", "uid", "groups", "extra"] {
                s.remove(k);
            }
        }
        spec["username"] = json!(user.username);
        if !user.uid.is_empty() {
            spec["uid"] = json!(user.uid);
        }
        if !user.groups.is_empty() {
            spec["groups"] = json!(user.groups);
        }
        if !user.extra.is_empty() {
            spec["extra"] = json!(user.extra);
        }
        // Nobody creates an approved (or signed) request.
        obj["status"] = json!({});
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        // The spec never changes (and the generic `status` handling keeps
        // the status on writes to the object itself: it changes only in
        // metadata).
        new["spec"] = old["spec"].clone();
    }

    fn update_subresource(
        &self,
        sub: &str,
        current: &Value,
        body: &Value,
    ) -> Option<Result<Value, ApiError>> {
        let mut new = current.clone();
        match sub {
            "status" => {
                new["status"] = body.get("status").cloned().unwrap_or(json!({}));
                // Approval conditions are `approval`'s: unchanged in number,
                // they are put back as they were; added or removed, refused.
                let mut causes = Vec::new();
                for ty in ["Approved", "Denied"] {
                    let (was, is) = (of_type(current, ty), of_type(&new, ty));
                    if was.len() == is.len() {
                        let originals: Vec<Value> = was.into_iter().cloned().collect();
                        let mut i = 0;
                        for c in new["status"]["conditions"]
                            .as_array_mut()
                            .into_iter()
                            .flatten()
                        {
                            if c["type"] == ty {
                                *c = originals[i].clone();
                                i += 1;
                            }
                        }
                    } else if is.len() > was.len() {
                        causes.push(forbidden(
                            "status.conditions",
                            format!("updates may not add a condition of type {ty:?}"),
                        ));
                    }
                }
                if !causes.is_empty() {
                    return Some(Err(Self::invalid(current, causes)));
                }
            }
            "approval" => {
                new["status"]["conditions"] = body["status"]["conditions"].clone();
                if new["status"]["conditions"].is_null() {
                    new["status"]
                        .as_object_mut()
                        .map(|s| s.remove("conditions"));
                }
            }
            _ => return None,
        }
        stamp_conditions(&mut new, current);
        Some(Ok(new))
    }

    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<(), ApiError> {
        wasm_apiserver_api::validation::validate_object(info, obj)?;
        let mut causes = Vec::new();
        Self::validate_spec(&obj["spec"], old, &mut causes);
        Self::validate_status(obj, old, &mut causes);
        crate::strategy::invalid_if_any(info, obj, causes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signer_names_as_upstream_validates_them() {
        assert!(signer_name_error("example.com/my-signer").is_none());
        assert!(signer_name_error("kubernetes.io/kube-apiserver-client").is_none());
        for bad in ["", "nosigner", "example/x", "a.b/c/d", "Example.com/x"] {
            assert!(signer_name_error(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn approval_conditions_cannot_be_removed_or_mixed() {
        let s = CertificateSigningRequests;
        let approved = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "ok"}]}});
        // `status` may not add an approval...
        let pending = json!({"status": {}});
        assert!(matches!(
            s.update_subresource("status", &pending, &approved),
            Some(Err(_))
        ));
        // ... and puts an edited one back.
        let edited = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "changed"}],
            "certificate": "x"}});
        let new = s
            .update_subresource("status", &approved, &edited)
            .unwrap()
            .unwrap();
        assert_eq!(new["status"]["conditions"][0]["reason"], "ok");
        assert_eq!(new["status"]["certificate"], "x");
        // `approval` keeps the certificate.
        let signed = json!({"status": {"certificate": "c"}});
        let new = s
            .update_subresource("approval", &signed, &approved)
            .unwrap()
            .unwrap();
        assert_eq!(new["status"]["certificate"], "c");
        assert!(new["status"]["conditions"][0]["lastTransitionTime"].is_string());
        // Removal and Approved with Denied are invalid.
        let mut causes = Vec::new();
        CertificateSigningRequests::validate_status(&pending, Some(&approved), &mut causes);
        assert_eq!(causes.len(), 1, "{causes:?}");
        let both = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]}});
        let mut causes = Vec::new();
        CertificateSigningRequests::validate_status(&both, Some(&approved), &mut causes);
        assert!(
            causes[0].message.contains("mutually exclusive"),
            "{causes:?}"
        );
    }

    #[test]
    fn kubelet_client_requests_are_recognized_as_upstream() {
        let node = Request {
            common_name: "system:node:edge-1".into(),
            organizations: vec!["system:nodes".into()],
            ..Default::default()
        };
        let u = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        assert!(check_kubelet_client(&node, &u(&["digital signature", "client auth"])).is_ok());
        assert!(check_kubelet_client(&node, &u(&["client auth"])).is_err());
        let masters = Request {
            organizations: vec!["system:masters".into()],
            ..node
        };
        assert_eq!(
            check_kubelet_client(&masters, &u(&["digital signature", "client auth"])).unwrap_err(),
            "subject organization is not system:nodes"
        );
        assert!(check_client_usages(&u(&["client auth", "server auth"])).is_err());
    }
}
