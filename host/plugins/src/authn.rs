//! Authenticator plugins: the `wasm-apiserver:plugin/authenticator-plugin`
//! world.
//!
//! Only what is specific to authentication lives here: the world's binding,
//! the plain request/outcome types ([`AuthnRequest`], [`AuthnOutcome`],
//! [`ClientCertificate`]) and their conversion. Loading, limits,
//! concurrency and metrics come from [`crate::runtime`].
//!
//! This module also implements the host side of the `log` and `types`
//! imports for its binding; the authorizer kind reuses that binding through
//! `bindgen!`'s `with`.

use crate::kind::{Loaded, world_pre};
use crate::runtime::{Limits, PluginCore, Runtime};
use crate::sandbox::{LogLevel, StoreState};
use crate::types::UserInfo;
use crate::{PluginError, metrics::OpMetrics};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// The bindings of the authenticator world.
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        world: "authenticator-plugin",
        path: "../../wit",
        exports: { default: async },
    });
}

use bindings::exports::wasm_apiserver::plugin::authenticator as wit;
use bindings::wasm_apiserver::plugin::{log, types as wit_types};

/// `kind` label of authenticator metrics.
const KIND: &str = "authn";
/// The group every authenticated user belongs to.
const AUTHENTICATED: &str = "system:authenticated";

impl wit_types::Host for StoreState {}

impl log::Host for StoreState {
    fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) {
        let level = match level {
            log::Level::Trace => LogLevel::Trace,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Info => LogLevel::Info,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Error => LogLevel::Error,
        };
        StoreState::log(self, level, message, fields);
    }
}

/// The subject of a verified client certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertificate {
    /// The whole subject as RFC 4514 text, e.g. `CN=alice,O=dev`.
    pub subject: String,
    /// The common name (CN).
    pub common_name: String,
    /// The organizations (O).
    pub organizations: Vec<String>,
}

/// The credentials of one HTTP request; the input of authenticator plugins.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthnRequest {
    /// Identifies the call in logs.
    pub uid: String,
    /// Credential headers as (name, value), names lower-cased by the host
    /// (e.g. `("authorization", "Bearer abc")`).
    pub headers: Vec<(String, String)>,
    /// The verified client certificate, if the client presented one.
    pub client_certificate: Option<ClientCertificate>,
}

/// An authenticator plugin's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AuthnOutcome {
    /// The credential is valid; the user always carries `system:authenticated`.
    Authenticated(UserInfo),
    /// The plugin does not recognise the credential; ask the next authenticator.
    NoOpinion,
    /// A presented but invalid credential: answer 401. The reason is for
    /// logs and audit, not for the client.
    Denied(String),
}

/// A loaded authenticator plugin, ready to be called concurrently. Cheap to clone.
#[derive(Clone)]
pub struct AuthenticatorPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    plugin: Loaded<bindings::AuthenticatorPluginPre<StoreState>>,
    metrics: Arc<OpMetrics>,
}

world_pre!(
    bindings::AuthenticatorPlugin,
    AuthenticatorPluginPre,
    wasm_apiserver_plugin_authenticator,
    "wasm-apiserver:plugin/authenticator-plugin@0.1.0",
    "authenticator"
);

impl std::fmt::Debug for AuthenticatorPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthenticatorPlugin")
            .field("name", &self.name())
            .field("sha256", &self.digest())
            .finish()
    }
}

impl Runtime {
    /// Loads an authenticator plugin: compiles `wasm` (or takes it from the
    /// cache), checks that it targets the authenticator world and imports
    /// nothing the host lacks, and has it check `config` once.
    ///
    /// `name` labels logs and metrics; `config` is handed verbatim to every call.
    pub async fn load_authenticator(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
    ) -> Result<AuthenticatorPlugin, PluginError> {
        let plugin = self.load(name, wasm, config, limits).await?;
        let inner = Inner {
            metrics: self.metrics().op(name, KIND, "authenticate"),
            plugin,
        };
        inner.plugin.check_config().await?;
        Ok(AuthenticatorPlugin {
            inner: Arc::new(inner),
        })
    }
}

impl AuthenticatorPlugin {
    /// The name the plugin was loaded under.
    pub fn name(&self) -> &str {
        &self.inner.plugin.core.name
    }

    /// The SHA-256 of the plugin's wasm bytes, in hex.
    pub fn digest(&self) -> &str {
        &self.inner.plugin.core.digest
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.plugin.core.limits
    }

    /// Asks the plugin who made `request`. A `Denied` outcome counts as a
    /// denial in the metrics.
    pub async fn authenticate(&self, request: &AuthnRequest) -> Result<AuthnOutcome, PluginError> {
        let inner = &self.inner;
        inner.metrics.call();
        let start = Instant::now();
        let result = self.call(request).await;
        inner
            .plugin
            .core
            .record(&inner.metrics, start, &result, |r| {
                matches!(r, AuthnOutcome::Denied(_))
            });
        result
    }

    async fn call(&self, request: &AuthnRequest) -> Result<AuthnOutcome, PluginError> {
        let plugin = &self.inner.plugin;
        let wit_request = to_wit(request);
        let response = plugin
            .call(&request.uid, async move |instance, store, config| {
                let export = instance.wasm_apiserver_plugin_authenticator();
                export.call_authenticate(store, config, &wit_request).await
            })
            .await?;
        from_wit(&plugin.core, response)
    }
}

fn to_wit(r: &AuthnRequest) -> wit::AuthnRequest {
    wit::AuthnRequest {
        uid: r.uid.clone(),
        headers: r.headers.clone(),
        client_certificate: r
            .client_certificate
            .as_ref()
            .map(|c| wit::ClientCertificate {
                subject: c.subject.clone(),
                common_name: c.common_name.clone(),
                organizations: c.organizations.clone(),
            }),
    }
}

/// Converts a WIT `user-info` (shared with the authorizer kind).
pub(crate) fn user_from_wit(u: wit_types::UserInfo) -> UserInfo {
    UserInfo {
        username: u.username,
        uid: u.uid,
        groups: u.groups,
        extra: u.extra.into_iter().collect(),
    }
}

/// Converts a [`UserInfo`] to its WIT record (shared with the authorizer kind).
pub(crate) fn user_to_wit(u: &UserInfo) -> wit_types::UserInfo {
    wit_types::UserInfo {
        username: u.username.clone(),
        uid: u.uid.clone(),
        groups: u.groups.clone(),
        extra: u
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// The size the output limit applies to.
fn output_size(r: &wit::AuthnResponse) -> usize {
    match r {
        wit::AuthnResponse::Authenticated(u) => {
            u.username.len()
                + u.uid.len()
                + u.groups.iter().map(String::len).sum::<usize>()
                + u.extra
                    .iter()
                    .map(|(k, v)| k.len() + v.iter().map(String::len).sum::<usize>())
                    .sum::<usize>()
        }
        wit::AuthnResponse::NoOpinion => 0,
        wit::AuthnResponse::Denied(reason) => reason.len(),
    }
}

/// Checks and converts a plugin's answer.
fn from_wit(core: &PluginCore, r: wit::AuthnResponse) -> Result<AuthnOutcome, PluginError> {
    let size = output_size(&r);
    if size > core.limits.max_output_bytes {
        return Err(PluginError::OutputTooLarge {
            plugin: core.name.to_string(),
            size,
            limit: core.limits.max_output_bytes,
        });
    }
    Ok(match r {
        wit::AuthnResponse::Authenticated(user) => {
            if user.username.is_empty() {
                return Err(PluginError::InvalidOutput {
                    plugin: core.name.to_string(),
                    message: "authenticated a user with an empty name".to_owned(),
                });
            }
            let mut user = user_from_wit(user);
            if !user.groups.iter().any(|g| g == AUTHENTICATED) {
                user.groups.push(AUTHENTICATED.to_owned());
            }
            AuthnOutcome::Authenticated(user)
        }
        wit::AuthnResponse::NoOpinion => AuthnOutcome::NoOpinion,
        wit::AuthnResponse::Denied(reason) => AuthnOutcome::Denied(if reason.is_empty() {
            format!("credential rejected by authenticator plugin {}", core.name)
        } else {
            reason
        }),
    })
}
