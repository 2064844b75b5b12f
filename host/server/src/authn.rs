//! Authentication: who a request is. Authenticators run in order and the
//! first that recognizes the request wins; a credential that is presented but
//! invalid is a 401, as upstream's union authenticator answers. Without any
//! credential the request is `system:anonymous` (when `--anonymous-auth`).

use crate::server::ConnectionInfo;
use axum::http::{HeaderMap, header};
use wasm_apiserver_api::ApiError;
use wasm_apiserver_plugins::UserInfo;

/// The configured authenticators.
#[derive(Debug, Clone)]
pub struct Authenticator {
    pub anonymous: bool,
}

impl Default for Authenticator {
    fn default() -> Self {
        Authenticator { anonymous: true }
    }
}

fn unauthorized() -> ApiError {
    ApiError::Unauthorized("Unauthorized".into())
}

/// The user of an x509 client certificate (CN) with its groups (O) and
/// `system:authenticated`.
fn x509_user(cn: &str, orgs: &[String]) -> UserInfo {
    let mut groups = orgs.to_vec();
    groups.push("system:authenticated".into());
    UserInfo {
        username: cn.to_string(),
        groups,
        ..Default::default()
    }
}

pub fn anonymous_user() -> UserInfo {
    UserInfo {
        username: "system:anonymous".into(),
        groups: vec!["system:unauthenticated".into()],
        ..Default::default()
    }
}

impl Authenticator {
    /// Authenticates one request.
    pub async fn authenticate(
        &self,
        conn: Option<&ConnectionInfo>,
        headers: &HeaderMap,
    ) -> Result<UserInfo, ApiError> {
        if let Some((cn, orgs)) = conn.and_then(|c| c.client_cert.as_ref()) {
            return Ok(x509_user(cn, orgs));
        }
        if let Some(auth) = headers.get(header::AUTHORIZATION) {
            let _token = auth
                .to_str()
                .ok()
                .and_then(|v| {
                    v.strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("bearer "))
                })
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(unauthorized)?;
            // No token authenticator accepted it.
            return Err(unauthorized());
        }
        if self.anonymous {
            return Ok(anonymous_user());
        }
        Err(unauthorized())
    }
}
