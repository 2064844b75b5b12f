//! Wasm authenticator and authorizer plugins, loaded at start from
//! `--access-plugin-config-file` (YAML documents of kind
//! `AuthenticatorPlugin` / `AuthorizerPlugin`, group
//! `access.wasm-apiserver.io/v1alpha1`). They are deliberately not API
//! objects: who may call the API must not be changeable through it.
//!
//! ```yaml
//! apiVersion: access.wasm-apiserver.io/v1alpha1
//! kind: AuthenticatorPlugin
//! metadata: {name: tokens}
//! spec:
//!   module: {file: token_authenticator.wasm}   # in --plugin-dir, or {wasm: <base64>}
//!   limits: {timeoutMillis: 200}
//!   config: {tokens: {...}}
//! ```
//!
//! Authenticators run after the built-in ones and before anonymous:
//! `authenticated` wins, `denied` is a 401, `no-opinion` passes on.
//! Authorizers run where `Wasm` appears in `--authorization-mode`: `allow`
//! and `deny` are final, `no-opinion` passes on. A plugin that fails (trap,
//! timeout, ...) counts as no opinion, so a broken plugin can only take
//! rights away, never grant them.

use base64::Engine;
use serde_json::Value;
use std::path::Path;
use wasm_apiserver_api::admission::{Module, PluginLimits};
use wasm_apiserver_api::meta;
use wasm_apiserver_api::rbac::{Attributes, Decision};
use wasm_apiserver_plugins::{
    AuthenticatorPlugin, AuthnOutcome, AuthnRequest, AuthorizerPlugin, AuthzAttributes,
    AuthzDecision, AuthzRequest, ClientCertificate, Runtime, UserInfo,
};

/// The loaded access plugins, in file order.
#[derive(Default, Clone)]
pub struct AccessPlugins {
    pub authenticators: Vec<AuthenticatorPlugin>,
    pub authorizers: Vec<AuthorizerPlugin>,
}

impl std::fmt::Debug for AccessPlugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessPlugins")
            .field("authenticators", &self.authenticators.len())
            .field("authorizers", &self.authorizers.len())
            .finish()
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    module: Module,
    #[serde(default)]
    limits: PluginLimits,
    #[serde(default)]
    config: Value,
}

/// Loads `--access-plugin-config-file`.
pub async fn load(
    runtime: &Runtime,
    plugin_dir: Option<&Path>,
    path: &Path,
) -> anyhow::Result<AccessPlugins> {
    use serde::Deserialize;
    let text = tokio::fs::read_to_string(path).await?;
    let mut out = AccessPlugins::default();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        let name = meta::name(&v)
            .ok_or_else(|| anyhow::anyhow!("{}: a plugin without metadata.name", path.display()))?;
        let spec: Spec = serde_json::from_value(v["spec"].clone())
            .map_err(|e| anyhow::anyhow!("{}: {name}: spec: {e}", path.display()))?;
        let wasm = match (&spec.module.wasm, &spec.module.file) {
            (Some(b64), None) => base64::engine::general_purpose::STANDARD.decode(b64.trim())?,
            (None, Some(file)) if wasm_apiserver_api::admission::valid_file_name(file) => {
                let dir = plugin_dir.ok_or_else(|| {
                    anyhow::anyhow!("{name}: spec.module.file needs --plugin-dir")
                })?;
                tokio::fs::read(dir.join(file))
                    .await
                    .map_err(|e| anyhow::anyhow!("{name}: {file}: {e}"))?
            }
            _ => anyhow::bail!(
                "{name}: spec.module needs exactly one of wasm, file (a plain .wasm file name)"
            ),
        };
        let config = match &spec.config {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match v["kind"].as_str() {
            Some("AuthenticatorPlugin") => out.authenticators.push(
                runtime
                    .load_authenticator(
                        name,
                        &wasm,
                        &config,
                        wasm_apiserver_registry::admission::limits(&spec.limits),
                    )
                    .await?,
            ),
            Some("AuthorizerPlugin") => out.authorizers.push(
                runtime
                    .load_authorizer(
                        name,
                        &wasm,
                        &config,
                        wasm_apiserver_registry::admission::limits(&spec.limits),
                    )
                    .await?,
            ),
            other => anyhow::bail!(
                "{}: {name}: kind must be AuthenticatorPlugin or AuthorizerPlugin, not {other:?}",
                path.display()
            ),
        }
    }
    Ok(out)
}

/// What the authenticator plugins say about a request.
pub enum AuthnVerdict {
    User(UserInfo),
    Denied(String),
    NoOpinion,
}

impl AccessPlugins {
    pub async fn authenticate(
        &self,
        headers: &axum::http::HeaderMap,
        cert: Option<&(String, Vec<String>)>,
    ) -> AuthnVerdict {
        if self.authenticators.is_empty() {
            return AuthnVerdict::NoOpinion;
        }
        let request = AuthnRequest {
            uid: uuid::Uuid::new_v4().to_string(),
            headers: headers
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "cookie" | "impersonate-user" | "impersonate-group"
                    )
                })
                .filter_map(|(k, v)| {
                    Some((
                        k.as_str().to_ascii_lowercase(),
                        v.to_str().ok()?.to_string(),
                    ))
                })
                .collect(),
            client_certificate: cert.map(|(cn, orgs)| ClientCertificate {
                subject: format!("CN={cn}"),
                common_name: cn.clone(),
                organizations: orgs.clone(),
            }),
        };
        for p in &self.authenticators {
            match p.authenticate(&request).await {
                Ok(AuthnOutcome::Authenticated(user)) => return AuthnVerdict::User(user),
                Ok(AuthnOutcome::Denied(reason)) => return AuthnVerdict::Denied(reason),
                Ok(AuthnOutcome::NoOpinion) => {}
                Err(e) => {
                    tracing::warn!(plugin = p.name(), error = %e, "authenticator plugin failed; no opinion")
                }
            }
        }
        AuthnVerdict::NoOpinion
    }

    /// `Some(decision)` when a plugin decided; `None` for no opinion.
    pub async fn authorize(&self, attrs: &Attributes) -> Option<Decision> {
        let request = AuthzRequest {
            uid: uuid::Uuid::new_v4().to_string(),
            user: UserInfo {
                username: attrs.user.clone(),
                groups: attrs.groups.clone(),
                ..Default::default()
            },
            attributes: AuthzAttributes {
                verb: attrs.verb.clone(),
                api_group: attrs.api_group.clone(),
                resource: attrs.resource.clone(),
                subresource: attrs.subresource.clone().unwrap_or_default(),
                namespace: attrs.namespace.clone().unwrap_or_default(),
                name: attrs.name.clone().unwrap_or_default(),
                path: attrs.path.clone(),
                is_resource_request: attrs.is_resource_request,
                ..Default::default()
            },
        };
        for p in &self.authorizers {
            match p.authorize(&request).await {
                Ok(AuthzDecision::Allow(r)) => {
                    return Some(Decision::Allow(format!("{}: {r}", p.name())));
                }
                Ok(AuthzDecision::Deny(r)) => {
                    return Some(Decision::NoOpinion(format!("denied by {}: {r}", p.name())));
                }
                Ok(AuthzDecision::NoOpinion(_)) => {}
                Err(e) => {
                    tracing::warn!(plugin = p.name(), error = %e, "authorizer plugin failed; no opinion")
                }
            }
        }
        None
    }
}
