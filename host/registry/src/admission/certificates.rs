//! Upstream's certificate admission plugins, compiled in (validating):
//!
//! * `CertificateApproval`: an update of `certificatesigningrequests/approval`
//!   needs `approve` on the request's signer (`signers` in
//!   `certificates.k8s.io`, named after the signer or `<domain>/*`);
//! * `CertificateSigning`: a `status` update that changes the certificate
//!   needs `sign` on the signer;
//! * `CertificateSubjectRestriction`: nobody asks the
//!   `kubernetes.io/kube-apiserver-client` signer for `system:masters`.

use crate::admission::{Attributes, plugins};
use crate::certificates::{self, KUBE_APISERVER_CLIENT};
use serde_json::Value;
use wasm_apiserver_api::cel::authz::Authorize;
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::rbac::Attributes as Access;
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_plugins::{Operation, UserInfo};

/// Whether `user` may `verb` (`approve`, `sign`) requests for `signer`.
pub fn allowed_for_signer(
    authorize: &dyn Authorize,
    user: &UserInfo,
    verb: &str,
    signer: &str,
) -> bool {
    let groups: Vec<&str> = user.groups.iter().map(String::as_str).collect();
    let domain = signer.split('/').next().unwrap_or_default();
    [signer.to_string(), format!("{domain}/*")]
        .iter()
        .any(|name| {
            let attrs = Access::resource(
                &user.username,
                &groups,
                verb,
                certificates::GROUP,
                "signers",
            )
            .named(name);
            authorize.authorize(&attrs).is_allowed()
        })
}

/// Runs the three plugins on a write to a CertificateSigningRequest.
pub fn validate(
    authorize: Option<&dyn Authorize>,
    on: &dyn Fn(&str) -> bool,
    a: &Attributes<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    user: &UserInfo,
) -> Result<(), ApiError> {
    if a.info.group != certificates::GROUP || a.info.plural != certificates::PLURAL {
        return Ok(());
    }
    let target = Target::new(certificates::GROUP, certificates::PLURAL, a.name);
    let forbidden = |why: String| Err(ApiError::Forbidden(target.clone(), why));
    match (a.operation, a.subresource, obj, old) {
        (Operation::Create, None, Some(obj), _) => {
            if obj["spec"]["signerName"] != KUBE_APISERVER_CLIENT
                || !on(plugins::CERTIFICATE_SUBJECT_RESTRICTION)
            {
                return Ok(());
            }
            let req = match certificates::parse_request(&obj["spec"]) {
                Ok(r) => r,
                Err(e) => return forbidden(format!("failed to parse CSR: {e}")),
            };
            if req.organizations.iter().any(|o| o == "system:masters") {
                return forbidden(format!(
                    "use of {KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed"
                ));
            }
            Ok(())
        }
        (Operation::Update, Some(sub @ ("approval" | "status")), Some(obj), Some(old)) => {
            let Some(authorize) = authorize else {
                return Ok(());
            };
            let verb = match sub {
                "approval" if on(plugins::CERTIFICATE_APPROVAL) => "approve",
                "status"
                    if on(plugins::CERTIFICATE_SIGNING)
                        && certificates::certificate(obj) != certificates::certificate(old) =>
                {
                    "sign"
                }
                _ => return Ok(()),
            };
            let signer = old["spec"]["signerName"].as_str().unwrap_or_default();
            if allowed_for_signer(authorize, user, verb, signer) {
                return Ok(());
            }
            tracing::debug!(csr = %meta::name(old).unwrap_or_default(), user = %user.username, verb, "refused");
            forbidden(format!(
                "user not permitted to {verb} requests with signerName {signer:?}"
            ))
        }
        _ => Ok(()),
    }
}
