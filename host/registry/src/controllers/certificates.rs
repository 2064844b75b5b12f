//! Upstream's certificate controllers, both as the ServiceAccount
//! `kube-system/certificate-controller` (its `system:controller` role lets it
//! approve only kubelet client requests and sign only the built-in signers):
//!
//! * the **approver** (`csrapproving`): a pending
//!   `kubernetes.io/kube-apiserver-client-kubelet` request whose subject
//!   and usages are a node's client certificate is approved when its
//!   requester may `create` `certificatesigningrequests/selfnodeclient`
//!   (renewing its own: the CN is the requester) or `.../nodeclient` (a
//!   bootstrap token); anything else is left for a human;
//! * the **signer** (`csrsigning`): an approved request for one of the
//!   built-in signers gets a certificate from the cluster CA, valid for
//!   `--cluster-signing-duration` or the request's `expirationSeconds`
//!   (at least 10 minutes), or a `Failed` condition when it breaks the
//!   signer's rules.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile};
use crate::certificates::{
    self, KUBE_APISERVER_CLIENT, KUBELET_CLIENT, KUBELET_SERVING, LEGACY_UNKNOWN, Request,
};
use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_api::rbac::Attributes;
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

pub const NAME: &str = "certificate-controller";
pub const APPROVING: &str = "certificatesigningrequest-approving-controller";
pub const SIGNING: &str = "certificatesigningrequest-signing-controller";

/// The cluster CA that signs, and for how long.
pub struct Authority {
    pub cert_pem: String,
    pub key_pem: String,
    /// `--cluster-signing-duration` (upstream's default: a year).
    pub duration: Duration,
}

struct Approver {
    client: Client,
}

fn info(client: &Client) -> Arc<crate::Resource> {
    client
        .objects
        .resources
        .builtin(certificates::GROUP, "v1", certificates::PLURAL)
}

/// `csr` with `condition` appended to its status conditions.
fn with_condition(csr: &Value, condition: &Value) -> Value {
    let mut new = csr.clone();
    let conds = &mut new["status"]["conditions"];
    match conds.as_array_mut() {
        Some(c) => c.push(condition.clone()),
        None => *conds = json!([condition]),
    }
    new
}

fn message(sub: &str) -> &'static str {
    if sub == "selfnodeclient" {
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    } else {
        "Auto approving kubelet client certificate after SubjectAccessReview."
    }
}

#[async_trait::async_trait]
impl Reconcile for Approver {
    type Key = String;

    async fn reconcile(&self, name: &String) -> Result<Action> {
        let info = info(&self.client);
        let csr = match self.client.get(&info, None, name).await {
            Ok(c) => c,
            Err(ApiError::NotFound(_)) => return Ok(Action::Done),
            Err(e) => return Err(e),
        };
        if !certificates::certificate(&csr).is_empty()
            || certificates::has_condition(&csr, "Approved")
            || certificates::has_condition(&csr, "Denied")
        {
            return Ok(Action::Done);
        }
        let spec = &csr["spec"];
        let Ok(req) = certificates::parse_request(spec) else {
            return Ok(Action::Done);
        };
        let node_client = spec["signerName"] == KUBELET_CLIENT
            && certificates::check_kubelet_client(&req, &certificates::usages(spec)).is_ok();
        if !node_client {
            return Ok(Action::Done);
        }
        let requester = spec["username"].as_str().unwrap_or_default();
        let mut recognized = Vec::new();
        if requester == req.common_name {
            recognized.push("selfnodeclient");
        }
        recognized.push("nodeclient");
        let groups: Vec<&str> = spec["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for sub in &recognized {
            let attrs = Attributes::resource(
                requester,
                &groups,
                "create",
                certificates::GROUP,
                certificates::PLURAL,
            )
            .with_subresource(sub);
            if !self.client.access_review(&attrs)? {
                continue;
            }
            let condition = json!({"type": "Approved", "status": "True",
                "reason": "AutoApproved", "message": message(sub)});
            self.client
                .update(&info, None, name, Some("approval"), |cur| {
                    Ok(with_condition(cur, &condition))
                })
                .await?;
            tracing::info!(csr = %name, requester, how = sub, "approved");
            return Ok(Action::Done);
        }
        // Upstream retries (with backoff) until a binding appears.
        Err(ApiError::Forbidden(
            wasm_apiserver_api::error::Target::new(certificates::GROUP, certificates::PLURAL, name),
            format!(
                "recognized csr {name:?} as {recognized:?} but subject access review was not approved"
            ),
        ))
    }
}

struct Signer {
    client: Client,
    authority: Arc<Authority>,
}

/// The signer's rule for a request, by signer name.
fn check_for_signer(signer: &str, req: &Request, usages: &BTreeSet<String>) -> Result<(), String> {
    match signer {
        KUBELET_CLIENT => certificates::check_kubelet_client(req, usages),
        KUBELET_SERVING => certificates::check_kubelet_serving(req, usages),
        KUBE_APISERVER_CLIENT => certificates::check_client_usages(usages),
        _ => Ok(()),
    }
}

impl Authority {
    /// How long a certificate lives: the request's `expirationSeconds`
    /// within [10 minutes, `--cluster-signing-duration`].
    fn ttl(&self, expiration_seconds: Option<i64>) -> Duration {
        match expiration_seconds {
            None => self.duration,
            Some(s) => Duration::from_secs(s.max(0) as u64)
                .clamp(Duration::from_secs(600).min(self.duration), self.duration),
        }
    }

    /// Signs `req` as upstream's permissive policy: the request's subject
    /// and subject alternative names, the asked usages, not a CA, a random
    /// 128-bit serial, backdated 5 minutes; never past the CA's own end.
    pub fn sign(
        &self,
        req: &Request,
        usages: &BTreeSet<String>,
        expiration_seconds: Option<i64>,
    ) -> Result<String, String> {
        use rcgen::{ExtendedKeyUsagePurpose as Ext, KeyUsagePurpose as Key};
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(&req.pem)
            .map_err(|e| format!("unable to parse csr: {e}"))?;
        let p = &mut csr.params;
        p.is_ca = rcgen::IsCa::ExplicitNoCa;
        p.custom_extensions.clear();
        p.name_constraints = None;
        p.crl_distribution_points.clear();
        p.key_usages.clear();
        p.extended_key_usages.clear();
        for u in usages {
            match u.as_str() {
                "signing" | "digital signature" => p.key_usages.push(Key::DigitalSignature),
                "content commitment" => p.key_usages.push(Key::ContentCommitment),
                "key encipherment" => p.key_usages.push(Key::KeyEncipherment),
                "key agreement" => p.key_usages.push(Key::KeyAgreement),
                "data encipherment" => p.key_usages.push(Key::DataEncipherment),
                "cert sign" => p.key_usages.push(Key::KeyCertSign),
                "crl sign" => p.key_usages.push(Key::CrlSign),
                "encipher only" => p.key_usages.push(Key::EncipherOnly),
                "decipher only" => p.key_usages.push(Key::DecipherOnly),
                "any" => p.extended_key_usages.push(Ext::Any),
                "server auth" => p.extended_key_usages.push(Ext::ServerAuth),
                "client auth" => p.extended_key_usages.push(Ext::ClientAuth),
                "code signing" => p.extended_key_usages.push(Ext::CodeSigning),
                "email protection" | "s/mime" => p.extended_key_usages.push(Ext::EmailProtection),
                "timestamping" => p.extended_key_usages.push(Ext::TimeStamping),
                "ocsp signing" => p.extended_key_usages.push(Ext::OcspSigning),
                "ipsec end system" => p.extended_key_usages.push(Ext::Other(oid(&[5]))),
                "ipsec tunnel" => p.extended_key_usages.push(Ext::Other(oid(&[6]))),
                "ipsec user" => p.extended_key_usages.push(Ext::Other(oid(&[7]))),
                "microsoft sgc" => p
                    .extended_key_usages
                    .push(Ext::Other(vec![1, 3, 6, 1, 4, 1, 311, 10, 3, 3])),
                "netscape sgc" => p
                    .extended_key_usages
                    .push(Ext::Other(vec![2, 16, 840, 1, 113730, 4, 1])),
                other => return Err(format!("unrecognized usage values: {other:?}")),
            }
        }
        p.extended_key_usages.dedup();
        let mut serial = uuid::Uuid::new_v4().into_bytes().to_vec();
        serial[0] &= 0x7f;
        p.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        let ttl = self.ttl(expiration_seconds);
        let now = time::OffsetDateTime::now_utc();
        let backdate = time::Duration::minutes(5);
        p.not_before = now - backdate;
        p.not_after = now + ttl;
        if ttl >= Duration::from_secs(8 * 3600) {
            p.not_after -= backdate;
        }
        let ca_end = ca_not_after(&self.cert_pem)?;
        if ca_end < now {
            return Err(format!("the signer has expired: NotAfter={ca_end}"));
        }
        p.not_after = p.not_after.min(ca_end);
        let key = rcgen::KeyPair::from_pem(&self.key_pem).map_err(|e| e.to_string())?;
        let issuer =
            rcgen::Issuer::from_ca_cert_pem(&self.cert_pem, key).map_err(|e| e.to_string())?;
        let cert = csr
            .signed_by(&issuer)
            .map_err(|e| format!("error auto signing csr: {e}"))?;
        Ok(cert.pem())
    }
}

/// An `id-kp` extended key usage (1.3.6.1.5.5.7.3.n).
fn oid(last: &[u64]) -> Vec<u64> {
    let mut v = vec![1, 3, 6, 1, 5, 5, 7, 3];
    v.extend_from_slice(last);
    v
}

fn ca_not_after(pem: &str) -> Result<time::OffsetDateTime, String> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
    let (_, cert) = x509_parser::parse_x509_certificate(&p.contents).map_err(|e| e.to_string())?;
    Ok(cert.validity().not_after.to_datetime())
}

#[async_trait::async_trait]
impl Reconcile for Signer {
    type Key = String;

    async fn reconcile(&self, name: &String) -> Result<Action> {
        let info = info(&self.client);
        let csr = match self.client.get(&info, None, name).await {
            Ok(c) => c,
            Err(ApiError::NotFound(_)) => return Ok(Action::Done),
            Err(e) => return Err(e),
        };
        let spec = &csr["spec"];
        let signer = spec["signerName"].as_str().unwrap_or_default();
        if !certificates::certificate(&csr).is_empty()
            || !certificates::approved(&csr)
            || ![
                KUBE_APISERVER_CLIENT,
                KUBELET_CLIENT,
                KUBELET_SERVING,
                LEGACY_UNKNOWN,
            ]
            .contains(&signer)
        {
            return Ok(Action::Done);
        }
        let usages = certificates::usages(spec);
        let checked = certificates::parse_request(spec)
            .and_then(|req| check_for_signer(signer, &req, &usages).map(|()| req));
        let req = match checked {
            Ok(req) => req,
            Err(why) => {
                let failed = json!({"type": "Failed", "status": "True",
                    "reason": "SignerValidationFailure", "message": why,
                    "lastUpdateTime": meta::timestamp(chrono::Utc::now())});
                self.client
                    .update(&info, None, name, Some("status"), |cur| {
                        Ok(with_condition(cur, &failed))
                    })
                    .await?;
                return Ok(Action::Done);
            }
        };
        let pem = self
            .authority
            .sign(&req, &usages, spec["expirationSeconds"].as_i64())
            .map_err(ApiError::Internal)?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(pem);
        self.client
            .update(&info, None, name, Some("status"), |cur| {
                let mut new = cur.clone();
                new["status"]["certificate"] = json!(encoded);
                Ok(new)
            })
            .await?;
        tracing::info!(csr = %name, signer, "signed");
        Ok(Action::Done)
    }
}

/// Runs the approver and the signer (each when enabled) while this
/// replica leads.
pub fn spawn(
    client: Client,
    authority: Option<Arc<Authority>>,
    approve: bool,
    leadership: Leadership,
    metrics: &Metrics,
) {
    let approver = approve.then(|| {
        Arc::new(Approver {
            client: client.clone(),
        })
    });
    let signer = authority.map(|authority| {
        Arc::new(Signer {
            client: client.clone(),
            authority,
        })
    });
    let queue = |n: &str| {
        let q: Arc<Queue<String>> = Queue::new(n);
        metrics.register(q.clone());
        q
    };
    let approving = approver.map(|a| (a, queue("certificatesigningrequest_approving")));
    let signing = signer.map(|s| (s, queue("certificatesigningrequest_signing")));
    if approving.is_none() && signing.is_none() {
        return;
    }
    tokio::spawn(leadership.run_while_leading(move || {
        let (client, approving, signing) = (client.clone(), approving.clone(), signing.clone());
        async move {
            let objects = client.objects.clone();
            let csrs = info(&client);
            let queues: Vec<_> = [
                approving.as_ref().map(|(_, q)| q.clone()),
                signing.as_ref().map(|(_, q)| q.clone()),
            ]
            .into_iter()
            .flatten()
            .collect();
            let follow = objects.follow(
                &csrs,
                |_| {},
                move |csr, deleted| {
                    if !deleted {
                        for q in &queues {
                            q.add(meta::name(&csr).unwrap_or_default().to_string());
                        }
                    }
                    async {}
                },
            );
            let approve = async {
                if let Some((a, q)) = approving {
                    super::run(q, a, 1).await;
                }
            };
            let sign = async {
                if let Some((s, q)) = signing {
                    super::run(q, s, 1).await;
                }
            };
            tokio::join!(follow, approve, sign);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_are_clamped_as_upstream() {
        let a = Authority {
            cert_pem: String::new(),
            key_pem: String::new(),
            duration: Duration::from_secs(8760 * 3600),
        };
        assert_eq!(a.ttl(None), a.duration);
        assert_eq!(a.ttl(Some(60)), Duration::from_secs(600));
        assert_eq!(a.ttl(Some(3600)), Duration::from_secs(3600));
        assert_eq!(a.ttl(Some(i64::MAX / 2)), a.duration);
    }
}
