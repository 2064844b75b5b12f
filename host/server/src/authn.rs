//! Authentication: who a request is. Authenticators run in order and the
//! first that recognizes the request wins; a credential that is presented but
//! invalid is a 401, as upstream's union authenticator answers. Without any
//! credential the request is `system:anonymous` (when `--anonymous-auth`).

use crate::objects::Objects;
use crate::server::ConnectionInfo;
use axum::http::{HeaderMap, header};
use std::sync::Arc;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_api::authn::{self, TokenFile};
use wasm_apiserver_plugins::UserInfo;

/// The configured authenticators.
#[derive(Debug, Clone)]
pub struct Authenticator {
    pub anonymous: bool,
    /// `--token-auth-file`.
    pub token_file: Option<Arc<TokenFile>>,
    /// `--enable-bootstrap-token-auth`.
    pub bootstrap_tokens: bool,
    /// Verifies ServiceAccount tokens.
    pub service_accounts: Option<Arc<crate::satoken::TokenSigner>>,
    /// Wasm authenticator plugins.
    pub plugins: crate::access_plugins::AccessPlugins,
}

impl Default for Authenticator {
    fn default() -> Self {
        Authenticator {
            anonymous: true,
            token_file: None,
            bootstrap_tokens: false,
            service_accounts: None,
            plugins: Default::default(),
        }
    }
}

fn to_user(u: wasm_apiserver_api::authn::UserInfo) -> UserInfo {
    UserInfo {
        username: u.username,
        uid: u.uid,
        groups: u.groups,
        extra: u.extra,
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
        objects: &Objects,
        conn: Option<&ConnectionInfo>,
        headers: &HeaderMap,
    ) -> Result<UserInfo, ApiError> {
        if let Some((cn, orgs)) = conn.and_then(|c| c.client_cert.as_ref()) {
            return Ok(x509_user(cn, orgs));
        }
        let bearer = headers.get(header::AUTHORIZATION).map(|auth| {
            auth.to_str()
                .ok()
                .and_then(|v| {
                    v.strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("bearer "))
                })
                .map(str::trim)
                .filter(|t| !t.is_empty())
        });
        if let Some(Some(token)) = bearer {
            if let Some(user) = self.token_file.as_ref().and_then(|f| f.lookup(token)) {
                return Ok(to_user(user.with_authenticated_group()));
            }
            if self.bootstrap_tokens
                && let Some((id, secret)) = authn::parse_bootstrap_token(token)
            {
                return self.bootstrap(objects, &id, &secret).await;
            }
            if let Some(signer) = &self.service_accounts
                && let Some(sub) = signer.verify(token)
            {
                return self.service_account(objects, sub).await;
            }
        }
        match self.plugins.authenticate(headers, None).await {
            crate::access_plugins::AuthnVerdict::User(user) => return Ok(user),
            crate::access_plugins::AuthnVerdict::Denied(reason) => {
                tracing::debug!(%reason, "authenticator plugin denied the credential");
                return Err(unauthorized());
            }
            crate::access_plugins::AuthnVerdict::NoOpinion => {}
        }
        if bearer.is_some() {
            // A credential was presented and nobody accepted it.
            return Err(unauthorized());
        }
        if self.anonymous {
            return Ok(anonymous_user());
        }
        Err(unauthorized())
    }
}

impl Authenticator {
    /// A ServiceAccount token is valid while its ServiceAccount exists with
    /// the uid the token was issued for.
    async fn service_account(
        &self,
        objects: &Objects,
        sub: crate::satoken::TokenSubject,
    ) -> Result<UserInfo, ApiError> {
        let info = objects
            .registry
            .get("", "v1", "serviceaccounts")
            .expect("built in");
        match objects.get(info, Some(&sub.namespace), &sub.name).await {
            Ok(sa) if wasm_apiserver_api::meta::str_field(&sa, "uid") == Some(sub.uid.as_str()) => {
                Ok(UserInfo {
                    username: format!("system:serviceaccount:{}:{}", sub.namespace, sub.name),
                    uid: sub.uid,
                    groups: vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{}", sub.namespace),
                        "system:authenticated".into(),
                    ],
                    ..Default::default()
                })
            }
            Ok(_) | Err(ApiError::NotFound(_)) => Err(unauthorized()),
            Err(e) => Err(e),
        }
    }

    /// A bootstrap token: the Secret `kube-system/bootstrap-token-<id>`.
    async fn bootstrap(
        &self,
        objects: &Objects,
        id: &str,
        secret: &str,
    ) -> Result<UserInfo, ApiError> {
        let info = objects.registry.get("", "v1", "secrets").expect("built in");
        let obj = match objects
            .get(info, Some("kube-system"), &authn::bootstrap_secret_name(id))
            .await
        {
            Ok(o) => o,
            Err(ApiError::NotFound(_)) => return Err(unauthorized()),
            Err(e) => return Err(e),
        };
        match authn::authenticate_bootstrap(&obj, id, secret, chrono::Utc::now()) {
            Ok(user) => Ok(to_user(user.with_authenticated_group())),
            Err(e) => {
                tracing::debug!(token_id = id, error = ?e, "bootstrap token rejected");
                Err(unauthorized())
            }
        }
    }
}

/// Deletes expired bootstrap-token Secrets, as upstream's token cleaner.
pub fn spawn_token_cleaner(
    objects: Objects,
    every: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let info = objects
            .registry
            .get("", "v1", "secrets")
            .expect("built in")
            .clone();
        let opts = crate::objects::WriteOptions::system("token-cleaner");
        loop {
            let params = crate::objects::ListParams {
                fields: wasm_apiserver_api::selector::FieldSelector::parse(
                    "type=bootstrap.kubernetes.io/token",
                    "Secret",
                )
                .expect("valid selector"),
                ..Default::default()
            };
            match objects.list(&info, Some("kube-system"), &params).await {
                Ok(listed) => {
                    for secret in listed
                        .items
                        .iter()
                        .filter(|s| authn::is_expired(s, chrono::Utc::now()))
                    {
                        let name = wasm_apiserver_api::meta::name(secret).unwrap_or_default();
                        let pre = crate::objects::Preconditions {
                            uid: wasm_apiserver_api::meta::str_field(secret, "uid")
                                .map(String::from),
                            ..Default::default()
                        };
                        match objects
                            .delete(&info, Some("kube-system"), name, &pre, &opts)
                            .await
                        {
                            Ok(_) => {
                                tracing::info!(secret = name, "deleted expired bootstrap token")
                            }
                            Err(e) => tracing::debug!(secret = name, error = %e, "token cleaner"),
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "token cleaner could not list secrets"),
            }
            tokio::time::sleep(every).await;
        }
    })
}
