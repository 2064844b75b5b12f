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

use crate::kind::Versioned;
use crate::runtime::{Limits, PluginCore, Runtime};
use crate::types::UserInfo;
use crate::{PluginError, metrics::OpMetrics};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// The version-neutral part of each version's binding: the conversion of
/// requests and responses.
macro_rules! binding {
    ($version:literal, $imports:ident) => {
        use crate::admission::$imports::user_from_wit;
        use crate::authn::{AuthnOutcome, AuthnRequest};
        use crate::sandbox::StoreState;
        use crate::{PluginError, kind::Loaded};
        use exports::wasm_apiserver::plugin::authenticator as wit;

        crate::kind::world_pre!(
            AuthenticatorPlugin,
            AuthenticatorPluginPre,
            wasm_apiserver_plugin_authenticator,
            $version,
            "authenticator-plugin",
            "authenticator",
            "authenticator"
        );

        /// A plugin loaded against this version.
        pub(crate) type Pre = AuthenticatorPluginPre<StoreState>;

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

        /// Calls `authenticate` and converts the answer (unchecked).
        pub(super) async fn call(
            plugin: &Loaded<Pre>,
            request: &AuthnRequest,
        ) -> Result<AuthnOutcome, PluginError> {
            let wit_request = to_wit(request);
            let response = plugin
                .call(&request.uid, async move |instance, store, config| {
                    let export = instance.wasm_apiserver_plugin_authenticator();
                    export.call_authenticate(store, config, &wit_request).await
                })
                .await?;
            Ok(match response {
                wit::AuthnResponse::Authenticated(u) => {
                    AuthnOutcome::Authenticated(user_from_wit(u))
                }
                wit::AuthnResponse::NoOpinion => AuthnOutcome::NoOpinion,
                wit::AuthnResponse::Denied(reason) => AuthnOutcome::Denied(reason),
            })
        }
    };
}

/// The frozen 0.1.0 authenticator world; imports shared with admission's.
pub(crate) mod v0_1 {
    wasmtime::component::bindgen!({
        world: "authenticator-plugin",
        path: "../../wit/frozen/0.1.0",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types": crate::admission::v0_1::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log": crate::admission::v0_1::wasm_apiserver::plugin::log,
        },
    });
    binding!("0.1.0", v0_1);
}

/// The frozen 0.2.0 authenticator world; imports shared with admission's.
pub(crate) mod v0_2 {
    wasmtime::component::bindgen!({
        world: "authenticator-plugin",
        path: "../../wit/frozen/0.2.0",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.2.0": crate::admission::v0_2::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.2.0": crate::admission::v0_2::wasm_apiserver::plugin::log,
        },
    });
    binding!("0.2.0", v0_2);
}

/// The frozen 0.3.0 authenticator world; imports shared with admission's.
pub(crate) mod v0_3 {
    wasmtime::component::bindgen!({
        world: "authenticator-plugin",
        path: "../../wit/frozen/0.3.0",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::log,
        },
    });
    binding!("0.3.0", v0_3);
}

/// The current 0.4.0 authenticator world; imports shared with admission's.
pub(crate) mod v0_4 {
    wasmtime::component::bindgen!({
        world: "authenticator-plugin",
        path: "../../wit",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::log,
        },
    });
    binding!("0.4.0", v0_4);
}

/// `kind` label of authenticator metrics.
const KIND: &str = "authn";
/// The group every authenticated user belongs to.
const AUTHENTICATED: &str = "system:authenticated";

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
    plugin: Versioned<v0_1::Pre, v0_2::Pre, v0_3::Pre, v0_4::Pre>,
    metrics: Arc<OpMetrics>,
}

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
        let plugin = self.load_versioned(name, wasm, config, limits).await?;
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
        &self.inner.plugin.core().name
    }

    /// The SHA-256 of the plugin's wasm bytes, in hex.
    pub fn digest(&self) -> &str {
        &self.inner.plugin.core().digest
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.plugin.core().limits
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
            .core()
            .record(&inner.metrics, start, &result, |r| {
                matches!(r, AuthnOutcome::Denied(_))
            });
        result
    }

    async fn call(&self, request: &AuthnRequest) -> Result<AuthnOutcome, PluginError> {
        let outcome = match &self.inner.plugin {
            Versioned::V0_1(p) => v0_1::call(p, request).await,
            Versioned::V0_2(p) => v0_2::call(p, request).await,
            Versioned::V0_3(p) => v0_3::call(p, request).await,
            Versioned::V0_4(p) => v0_4::call(p, request).await,
        }?;
        check(self.inner.plugin.core(), outcome)
    }
}

/// The size the output limit applies to.
fn output_size(r: &AuthnOutcome) -> usize {
    match r {
        AuthnOutcome::Authenticated(u) => {
            u.username.len()
                + u.uid.len()
                + u.groups.iter().map(String::len).sum::<usize>()
                + u.extra
                    .iter()
                    .map(|(k, v)| k.len() + v.iter().map(String::len).sum::<usize>())
                    .sum::<usize>()
        }
        AuthnOutcome::NoOpinion => 0,
        AuthnOutcome::Denied(reason) => reason.len(),
    }
}

/// Checks and converts a plugin's answer.
fn check(core: &PluginCore, r: AuthnOutcome) -> Result<AuthnOutcome, PluginError> {
    let size = output_size(&r);
    if size > core.limits.max_output_bytes {
        return Err(PluginError::OutputTooLarge {
            plugin: core.name.to_string(),
            size,
            limit: core.limits.max_output_bytes,
        });
    }
    Ok(match r {
        AuthnOutcome::Authenticated(mut user) => {
            if user.username.is_empty() {
                return Err(PluginError::InvalidOutput {
                    plugin: core.name.to_string(),
                    message: "authenticated a user with an empty name".to_owned(),
                });
            }
            if !user.groups.iter().any(|g| g == AUTHENTICATED) {
                user.groups.push(AUTHENTICATED.to_owned());
            }
            AuthnOutcome::Authenticated(user)
        }
        AuthnOutcome::NoOpinion => AuthnOutcome::NoOpinion,
        AuthnOutcome::Denied(reason) => AuthnOutcome::Denied(if reason.is_empty() {
            format!("credential rejected by authenticator plugin {}", core.name)
        } else {
            reason
        }),
    })
}
