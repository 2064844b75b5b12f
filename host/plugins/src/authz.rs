//! Authorizer plugins: the `wasm-apiserver:plugin/authorizer-plugin` world.
//!
//! Only what is specific to authorization lives here: the world's binding,
//! the plain request/decision types ([`AuthzRequest`], [`AuthzAttributes`],
//! [`AuthzDecision`]) and their conversion. Loading, limits, concurrency and
//! metrics come from [`crate::runtime`]; the `log` and `types` imports are
//! shared with [`crate::authn`]'s binding.

use crate::kind::Versioned;
use crate::runtime::{Limits, PluginCore, Runtime};
use crate::types::UserInfo;
use crate::{PluginError, metrics::OpMetrics};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// The version-neutral part of each version's binding: the conversion of
/// requests and decisions.
macro_rules! binding {
    ($version:literal, $imports:ident) => {
        use crate::admission::$imports::user_to_wit;
        use crate::authz::{AuthzDecision, AuthzRequest};
        use crate::sandbox::StoreState;
        use crate::{PluginError, kind::Loaded};
        use exports::wasm_apiserver::plugin::authorizer as wit;

        crate::kind::world_pre!(
            AuthorizerPlugin,
            AuthorizerPluginPre,
            wasm_apiserver_plugin_authorizer,
            $version,
            "authorizer-plugin",
            "authorizer",
            "authorizer"
        );

        /// A plugin loaded against this version.
        pub(crate) type Pre = AuthorizerPluginPre<StoreState>;

        fn to_wit(r: &AuthzRequest) -> wit::AuthzRequest {
            let a = &r.attributes;
            wit::AuthzRequest {
                uid: r.uid.clone(),
                user: user_to_wit(&r.user),
                attributes: wit::Attributes {
                    verb: a.verb.clone(),
                    api_group: a.api_group.clone(),
                    api_version: a.api_version.clone(),
                    resource: a.resource.clone(),
                    subresource: a.subresource.clone(),
                    namespace: a.namespace.clone(),
                    name: a.name.clone(),
                    path: a.path.clone(),
                    is_resource_request: a.is_resource_request,
                },
            }
        }

        /// Calls `authorize` and converts the decision (unchecked).
        pub(super) async fn call(
            plugin: &Loaded<Pre>,
            request: &AuthzRequest,
        ) -> Result<AuthzDecision, PluginError> {
            let wit_request = to_wit(request);
            let decision = plugin
                .call(&request.uid, async move |instance, store, config| {
                    let export = instance.wasm_apiserver_plugin_authorizer();
                    export.call_authorize(store, config, &wit_request).await
                })
                .await?;
            Ok(match decision {
                wit::AuthzDecision::Allow(r) => AuthzDecision::Allow(r),
                wit::AuthzDecision::Deny(r) => AuthzDecision::Deny(r),
                wit::AuthzDecision::NoOpinion(r) => AuthzDecision::NoOpinion(r),
            })
        }
    };
}

/// The frozen 0.1.0 authorizer world; imports shared with admission's.
pub(crate) mod v0_1 {
    wasmtime::component::bindgen!({
        world: "authorizer-plugin",
        path: "../../wit/frozen/0.1.0",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types": crate::admission::v0_1::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log": crate::admission::v0_1::wasm_apiserver::plugin::log,
        },
    });
    binding!("0.1.0", v0_1);
}

/// The frozen 0.2.0 authorizer world; imports shared with admission's.
pub(crate) mod v0_2 {
    wasmtime::component::bindgen!({
        world: "authorizer-plugin",
        path: "../../wit/frozen/0.2.0",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.2.0": crate::admission::v0_2::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.2.0": crate::admission::v0_2::wasm_apiserver::plugin::log,
        },
    });
    binding!("0.2.0", v0_2);
}

/// The frozen 0.3.0 authorizer world; imports shared with admission's.
pub(crate) mod v0_3 {
    wasmtime::component::bindgen!({
        world: "authorizer-plugin",
        path: "../../wit/frozen/0.3.0",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::log,
        },
    });
    binding!("0.3.0", v0_3);
}

/// The current 0.4.0 authorizer world; imports shared with admission's.
pub(crate) mod v0_4 {
    wasmtime::component::bindgen!({
        world: "authorizer-plugin",
        path: "../../wit",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::log,
        },
    });
    binding!("0.4.0", v0_4);
}

/// `kind` label of authorizer metrics.
const KIND: &str = "authz";

/// What a request does, as Kubernetes' `authorizer.Attributes`. Fields that
/// do not apply are empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthzAttributes {
    /// `get`, `list`, `create`, ... (or the lower-case HTTP method for non-resource requests).
    pub verb: String,
    /// The API group; empty for the core group.
    pub api_group: String,
    /// The API version, e.g. `v1`.
    pub api_version: String,
    /// The resource, e.g. `pods`.
    pub resource: String,
    /// The subresource, e.g. `status`.
    pub subresource: String,
    /// The namespace; empty when cluster-scoped or across namespaces.
    pub namespace: String,
    /// The object's name; empty for collections and creates.
    pub name: String,
    /// The request path.
    pub path: String,
    /// False for non-resource URLs (`/version`, `/apis`, ...).
    pub is_resource_request: bool,
}

/// Who asks to do what; the input of authorizer plugins.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthzRequest {
    /// Identifies the call in logs.
    pub uid: String,
    /// The authenticated (or anonymous) user.
    pub user: UserInfo,
    /// What the user asks to do.
    pub attributes: AuthzAttributes,
}

/// An authorizer plugin's decision, each with a reason (possibly empty).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AuthzDecision {
    /// Allowed; later authorizers are not asked.
    Allow(String),
    /// Forbidden (403); later authorizers are not asked.
    Deny(String),
    /// Undecided; ask the next authorizer.
    NoOpinion(String),
}

impl AuthzDecision {
    /// The decision's reason.
    pub fn reason(&self) -> &str {
        match self {
            AuthzDecision::Allow(r) | AuthzDecision::Deny(r) | AuthzDecision::NoOpinion(r) => r,
        }
    }
}

/// A loaded authorizer plugin, ready to be called concurrently. Cheap to clone.
#[derive(Clone)]
pub struct AuthorizerPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    plugin: Versioned<v0_1::Pre, v0_2::Pre, v0_3::Pre, v0_4::Pre>,
    metrics: Arc<OpMetrics>,
}

impl std::fmt::Debug for AuthorizerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorizerPlugin")
            .field("name", &self.name())
            .field("sha256", &self.digest())
            .finish()
    }
}

impl Runtime {
    /// Loads an authorizer plugin: compiles `wasm` (or takes it from the
    /// cache), checks that it targets the authorizer world and imports
    /// nothing the host lacks, and has it check `config` once.
    ///
    /// `name` labels logs and metrics; `config` is handed verbatim to every call.
    pub async fn load_authorizer(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
    ) -> Result<AuthorizerPlugin, PluginError> {
        let plugin = self.load_versioned(name, wasm, config, limits).await?;
        let inner = Inner {
            metrics: self.metrics().op(name, KIND, "authorize"),
            plugin,
        };
        inner.plugin.check_config().await?;
        Ok(AuthorizerPlugin {
            inner: Arc::new(inner),
        })
    }
}

impl AuthorizerPlugin {
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

    /// Asks the plugin whether `request` is allowed. A `Deny` counts as a
    /// denial in the metrics.
    pub async fn authorize(&self, request: &AuthzRequest) -> Result<AuthzDecision, PluginError> {
        let inner = &self.inner;
        inner.metrics.call();
        let start = Instant::now();
        let result = self.call(request).await;
        inner
            .plugin
            .core()
            .record(&inner.metrics, start, &result, |d| {
                matches!(d, AuthzDecision::Deny(_))
            });
        result
    }

    async fn call(&self, request: &AuthzRequest) -> Result<AuthzDecision, PluginError> {
        let decision = match &self.inner.plugin {
            Versioned::V0_1(p) => v0_1::call(p, request).await,
            Versioned::V0_2(p) => v0_2::call(p, request).await,
            Versioned::V0_3(p) => v0_3::call(p, request).await,
            Versioned::V0_4(p) => v0_4::call(p, request).await,
        }?;
        check(self.inner.plugin.core(), decision)
    }
}

/// Checks the size of a plugin's decision.
fn check(core: &PluginCore, decision: AuthzDecision) -> Result<AuthzDecision, PluginError> {
    let size = decision.reason().len();
    if size > core.limits.max_output_bytes {
        return Err(PluginError::OutputTooLarge {
            plugin: core.name.to_string(),
            size,
            limit: core.limits.max_output_bytes,
        });
    }
    Ok(decision)
}
