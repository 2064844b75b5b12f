//! Authentication: who a request is. Authenticators run in order and the
//! first that recognizes the request wins; a credential that is presented but
//! invalid is a 401, as upstream's union authenticator answers. Without any
//! credential the request is `system:anonymous` (when `--anonymous-auth`).

use async_trait::async_trait;
use axum::http::{HeaderMap, header};
use serde_json::{Value, json};
use std::sync::Arc;
use wasm_apiserver_api::authn::{self, TokenFile};
use wasm_apiserver_api::{ApiError, ConnectionInfo, meta};
use wasm_apiserver_plugins::UserInfo;
use wasm_apiserver_registry::{
    CreateRequest, Creater, ListParams, Objects, Preconditions, WriteOptions,
};

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
    /// Front proxies (`--requestheader-*`).
    pub request_header: Option<Arc<RequestHeader>>,
}

/// kube-apiserver's request-header authenticator: a request over a
/// connection whose client certificate the request-header CA signed (a
/// front proxy, see [`ConnectionInfo::front_proxy`]) is the user its
/// headers name, when the certificate's CN is allowed. Anybody else's
/// `X-Remote-*` headers mean nothing.
#[derive(Debug, Clone, Default)]
pub struct RequestHeader {
    /// `--requestheader-allowed-names` (empty: any CN).
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

impl RequestHeader {
    /// The user a front proxy `cn` names in `headers`: `Ok(None)` when it
    /// names none (the other authenticators then judge the request), an
    /// error when `cn` is not allowed.
    pub fn user(&self, cn: &str, headers: &HeaderMap) -> Result<Option<UserInfo>, ApiError> {
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|n| n == cn) {
            tracing::debug!(%cn, "front proxy certificate CN not in --requestheader-allowed-names");
            return Err(unauthorized());
        }
        let first = |names: &[String]| {
            names.iter().find_map(|h| {
                headers
                    .get(h.as_str())
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| !v.is_empty())
                    .map(String::from)
            })
        };
        let Some(username) = first(&self.username_headers) else {
            return Ok(None);
        };
        let mut groups: Vec<String> = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h.as_str()))
            .filter_map(|v| v.to_str().ok().map(String::from))
            .collect();
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        let mut extra: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (name, value) in headers {
            let name = name.as_str();
            let Some(key) = self.extra_prefixes.iter().find_map(|p| {
                name.get(..p.len())
                    .filter(|head| head.eq_ignore_ascii_case(p))
                    .map(|_| &name[p.len()..])
            }) else {
                continue;
            };
            if let Ok(v) = value.to_str() {
                extra
                    .entry(percent_decode(key).to_lowercase())
                    .or_default()
                    .push(v.to_string());
            }
        }
        Ok(Some(UserInfo {
            username,
            uid: first(&self.uid_headers).unwrap_or_default(),
            groups,
            extra,
        }))
    }
}

/// `%XX` escapes decoded (extra keys travel escaped in header names, as
/// upstream writes them); an invalid escape stays as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Default for Authenticator {
    fn default() -> Self {
        Authenticator {
            anonymous: true,
            token_file: None,
            bootstrap_tokens: false,
            service_accounts: None,
            plugins: Default::default(),
            request_header: None,
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

/// The server itself, as upstream's loopback client (`system:apiserver`
/// in `system:masters`): what its own in-process loops act as.
pub fn apiserver_user() -> UserInfo {
    UserInfo {
        username: "system:apiserver".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
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
        if let (Some(rh), Some(cn)) = (
            &self.request_header,
            conn.and_then(|c| c.front_proxy.as_deref()),
        ) && let Some(user) = rh.user(cn, headers)?
        {
            return Ok(user);
        }
        if let Some((cn, orgs)) = conn.and_then(|c| c.client_cert.as_ref()) {
            return Ok(x509_user(cn, orgs));
        }
        // A presented but invalid certificate is a 401, as upstream's x509
        // authenticator answers.
        if conn.is_some_and(|c| c.client_cert_error.is_some()) {
            return Err(unauthorized());
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
        let info = objects.resources.builtin("", "v1", "serviceaccounts");
        match objects.get(&info, Some(&sub.namespace), &sub.name).await {
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
        let info = objects.resources.builtin("", "v1", "secrets");
        let obj = match objects
            .get(
                &info,
                Some("kube-system"),
                &authn::bootstrap_secret_name(id),
            )
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

impl Authenticator {
    /// A TokenReview: authenticates `token` for `audiences` (the API
    /// audiences when empty) with every token authenticator; returns the
    /// user and the audiences the token is good for, or `None`.
    /// Authenticators that know no audiences (static tokens, bootstrap
    /// tokens, wasm plugins) count for the API audiences only, as upstream's
    /// audience-agnostic wrapper.
    pub async fn review_token(
        &self,
        objects: &Objects,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<(UserInfo, Vec<String>)>, ApiError> {
        let api: Vec<String> = match &self.service_accounts {
            Some(s) => s.api_audiences().to_vec(),
            None => vec![crate::satoken::ISSUER.to_string()],
        };
        let wanted = if audiences.is_empty() {
            api.clone()
        } else {
            audiences.to_vec()
        };
        let implicit: Vec<String> = wanted.iter().filter(|a| api.contains(a)).cloned().collect();
        let not_authenticated = |r: Result<UserInfo, ApiError>, auds: Vec<String>| match r {
            Ok(user) => Ok(Some((user, auds))),
            Err(ApiError::Unauthorized(_)) => Ok(None),
            Err(e) => Err(e),
        };
        if !implicit.is_empty() {
            if let Some(user) = self.token_file.as_ref().and_then(|f| f.lookup(token)) {
                return Ok(Some((to_user(user.with_authenticated_group()), implicit)));
            }
            if self.bootstrap_tokens
                && let Some((id, secret)) = authn::parse_bootstrap_token(token)
            {
                return not_authenticated(self.bootstrap(objects, &id, &secret).await, implicit);
            }
        }
        if let Some(signer) = &self.service_accounts
            && let Some((sub, matched)) = signer.verify_for(token, &wanted)
        {
            return not_authenticated(self.service_account(objects, sub).await, matched);
        }
        if !implicit.is_empty() {
            let mut headers = HeaderMap::new();
            if let Ok(v) = format!("Bearer {token}").parse() {
                headers.insert(header::AUTHORIZATION, v);
            }
            if let crate::access_plugins::AuthnVerdict::User(user) =
                self.plugins.authenticate(&headers, None).await
            {
                return Ok(Some((user, implicit)));
            }
        }
        Ok(None)
    }
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`: the REST object of
/// TokenReview (create-only), over the whole authenticator chain.
pub struct TokenReviews {
    pub authn: Authenticator,
    pub objects: Objects,
}

#[async_trait]
impl Creater for TokenReviews {
    async fn create(&self, req: CreateRequest<'_>, mut body: Value) -> Result<Value, ApiError> {
        let token = body["spec"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if token.is_empty() {
            return Err(ApiError::BadRequest(
                "token is required for TokenReview in authentication".into(),
            ));
        }
        let audiences: Vec<String> = body["spec"]["audiences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let status = match self
            .authn
            .review_token(&self.objects, &token, &audiences)
            .await?
        {
            Some((user, audiences)) => {
                let mut u = json!({"username": user.username, "groups": user.groups});
                if !user.uid.is_empty() {
                    u["uid"] = json!(user.uid);
                }
                if !user.extra.is_empty() {
                    u["extra"] = json!(user.extra);
                }
                json!({"authenticated": true, "user": u, "audiences": audiences})
            }
            None => json!({"authenticated": false, "user": {}, "error": "invalid bearer token"}),
        };
        body["apiVersion"] = json!(req.info.api_version());
        body["kind"] = json!(req.info.kind);
        if !body["metadata"].is_object() {
            body["metadata"] = json!({});
        }
        body["status"] = status;
        Ok(body)
    }
}

/// Makes `authn` answer TokenReviews (again, whenever it changes).
pub fn install_token_reviews(objects: &Objects, authn: &Authenticator) {
    let reviews: Arc<dyn Creater> = Arc::new(TokenReviews {
        authn: authn.clone(),
        objects: objects.clone(),
    });
    let installed = objects
        .resources
        .update("authentication.k8s.io", "v1", "tokenreviews", |r| {
            r.with_create_only(reviews)
        });
    debug_assert!(installed, "tokenreviews are built in");
}

/// Deletes expired bootstrap-token Secrets, as upstream's token cleaner.
pub fn spawn_token_cleaner(
    objects: Objects,
    every: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let info = objects.resources.builtin("", "v1", "secrets");
        let opts = WriteOptions::system("token-cleaner");
        loop {
            let params = ListParams {
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
                        let pre = Preconditions {
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

/// `POST .../serviceaccounts/<name>/token` (TokenRequest, `kubectl create
/// token`): the REST object of the `serviceaccounts/token` subresource.
pub struct TokenRequests {
    pub objects: Objects,
    pub signer: Arc<crate::satoken::TokenSigner>,
}

#[async_trait]
impl Creater for TokenRequests {
    async fn create(&self, req: CreateRequest<'_>, mut body: Value) -> Result<Value, ApiError> {
        let ns = req.namespace.unwrap_or_default();
        let name = req.name.unwrap_or_default();
        let info = self.objects.resources.builtin("", "v1", "serviceaccounts");
        let sa = self.objects.get(&info, Some(ns), name).await?;
        let audiences: Vec<String> = body["spec"]["audiences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        // Upstream's bounds: at least 10 minutes, at most 48 hours; default 1 hour.
        let lifetime = body["spec"]["expirationSeconds"]
            .as_i64()
            .unwrap_or(3600)
            .clamp(600, 48 * 3600);
        let sub = crate::satoken::TokenSubject {
            namespace: ns.to_string(),
            name: name.to_string(),
            uid: meta::str_field(&sa, "uid").unwrap_or_default().to_string(),
        };
        let (token, exp) = self
            .signer
            .issue(&sub, &audiences, lifetime)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        body["apiVersion"] = json!("authentication.k8s.io/v1");
        body["kind"] = json!("TokenRequest");
        body["spec"]["expirationSeconds"] = json!(lifetime);
        body["status"] = json!({"token": token, "expirationTimestamp": meta::timestamp(exp)});
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeadm() -> RequestHeader {
        RequestHeader {
            allowed_names: vec!["front-proxy-client".into()],
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: vec![],
            group_headers: vec!["X-Remote-Group".into()],
            extra_prefixes: vec!["X-Remote-Extra-".into()],
        }
    }

    #[test]
    fn a_front_proxy_names_the_user_in_its_headers() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", "alice".parse().unwrap());
        h.append("x-remote-group", "dev".parse().unwrap());
        h.append("x-remote-group", "ops".parse().unwrap());
        h.append("x-remote-extra-scopes", "a".parse().unwrap());
        h.append("x-remote-extra-scopes", "b".parse().unwrap());
        h.append("x-remote-extra-example.org%2Fteam", "x".parse().unwrap());
        let user = kubeadm()
            .user("front-proxy-client", &h)
            .unwrap()
            .expect("a user");
        assert_eq!(user.username, "alice");
        assert_eq!(user.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(user.extra["scopes"], ["a", "b"]);
        assert_eq!(user.extra["example.org/team"], ["x"]);
    }

    #[test]
    fn a_proxy_with_another_cn_is_refused_and_no_header_is_no_opinion() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", "admin".parse().unwrap());
        assert!(kubeadm().user("someone-else", &h).is_err());
        assert!(
            kubeadm()
                .user("front-proxy-client", &HeaderMap::new())
                .unwrap()
                .is_none()
        );
        // Any CN when no names are listed.
        let any = RequestHeader {
            allowed_names: vec![],
            ..kubeadm()
        };
        assert_eq!(any.user("x", &h).unwrap().unwrap().username, "admin");
    }
}
