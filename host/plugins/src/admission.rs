//! Admission plugins: the `wasm-apiserver:plugin/admission-plugin` world,
//! and Kubewarden policies (waPC modules, [`crate::kubewarden`]) behind the
//! same [`AdmissionPlugin`].
//!
//! Only what is specific to admission lives here: the world's binding, the
//! conversion of [`AdmissionRequest`]/[`AdmissionResponse`] to and from
//! their WIT records (or a Kubewarden verdict), and the checks on a
//! response (size, patch shape), which answers of both formats go through.
//! Loading, limits, concurrency and metrics come from [`crate::runtime`].

use crate::kind::Versioned;
use crate::kubewarden::{Policy, Verdict};
use crate::runtime::{Limits, PluginCore, Runtime};
use crate::types::{AdmissionRequest, AdmissionResponse, DenyStatus, FieldCause};
use crate::{PluginError, metrics::OpMetrics};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The version-neutral part of each version's binding: host side of the
/// `log` and `types` imports, and the conversion of requests and responses.
/// `$causes` turns a WIT `status` into its field causes (0.1.0 has none).
macro_rules! binding {
    ($version:literal, $causes:expr) => {
        use crate::sandbox::{LogLevel, StoreState};
        use crate::types::{FieldCause, Gvk, Gvr, Operation};
        use crate::{PluginError, kind::Loaded};
        use exports::wasm_apiserver::plugin::admission as wit;
        use wasm_apiserver::plugin::{log, types as wit_types};

        crate::kind::world_pre!(
            AdmissionPlugin,
            AdmissionPluginPre,
            wasm_apiserver_plugin_admission,
            $version,
            "admission-plugin",
            "admission",
            "admission"
        );

        /// A plugin loaded against this version.
        pub(crate) type Pre = AdmissionPluginPre<StoreState>;

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

        /// Converts a [`UserInfo`](crate::UserInfo) to its WIT record.
        pub(crate) fn user_to_wit(u: &crate::UserInfo) -> wit_types::UserInfo {
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

        /// Converts a WIT `user-info`.
        pub(crate) fn user_from_wit(u: wit_types::UserInfo) -> crate::UserInfo {
            crate::UserInfo {
                username: u.username,
                uid: u.uid,
                groups: u.groups,
                extra: u.extra.into_iter().collect(),
            }
        }

        /// Converts an [`Operation`] to its WIT enum.
        pub(crate) fn operation_to_wit(o: Operation) -> wit_types::Operation {
            match o {
                Operation::Create => wit_types::Operation::Create,
                Operation::Update => wit_types::Operation::Update,
                Operation::Delete => wit_types::Operation::Delete,
                Operation::Connect => wit_types::Operation::Connect,
            }
        }

        fn gvk(g: &Gvk) -> wit_types::GroupVersionKind {
            wit_types::GroupVersionKind {
                group: g.group.clone(),
                version: g.version.clone(),
                kind: g.kind.clone(),
            }
        }

        fn gvr(g: &Gvr) -> wit_types::GroupVersionResource {
            wit_types::GroupVersionResource {
                group: g.group.clone(),
                version: g.version.clone(),
                resource: g.resource.clone(),
            }
        }

        fn to_wit(e: &super::Encoded<'_>) -> wit::AdmissionRequest {
            let r = e.request;
            wit::AdmissionRequest {
                uid: r.uid.clone(),
                kind: gvk(&r.kind),
                resource: gvr(&r.resource),
                sub_resource: r.sub_resource.clone(),
                request_kind: r.request_kind.as_ref().map(gvk),
                request_resource: r.request_resource.as_ref().map(gvr),
                request_sub_resource: r.request_sub_resource.clone(),
                name: r.name.clone(),
                namespace: r.namespace.clone(),
                operation: operation_to_wit(r.operation),
                user_info: user_to_wit(&r.user),
                dry_run: r.dry_run,
                object: e.object.clone(),
                old_object: e.old_object.clone(),
                options: e.options.clone(),
            }
        }

        /// Converts a WIT `status`.
        pub(crate) fn status_from_wit(s: wit_types::Status) -> super::RawStatus {
            let causes: fn(&wit_types::Status) -> Vec<FieldCause> = $causes;
            super::RawStatus {
                causes: causes(&s),
                code: s.code,
                reason: s.reason,
                message: s.message,
            }
        }

        /// Calls `validate` or `mutate` and converts the answer.
        pub(super) async fn call(
            plugin: &Loaded<Pre>,
            phase: super::Phase,
            request: &super::Encoded<'_>,
        ) -> Result<super::RawResponse, PluginError> {
            let (uid, wit_request) = (&request.request.uid, to_wit(request));
            let r = plugin
                .call(uid, async move |instance, store, config| {
                    let admission = instance.wasm_apiserver_plugin_admission();
                    match phase {
                        super::Phase::Validate => {
                            admission.call_validate(store, config, &wit_request).await
                        }
                        super::Phase::Mutate => {
                            admission.call_mutate(store, config, &wit_request).await
                        }
                    }
                })
                .await?;
            Ok(super::RawResponse {
                allowed: r.allowed,
                status: r.status.map(status_from_wit),
                patch: r.patch,
                warnings: r.warnings,
                audit_annotations: r.audit_annotations,
            })
        }
    };
}

/// The host side of the `cluster` import and its conversions, for every
/// version whose worlds import it (0.3.0 and later).
macro_rules! cluster_binding {
    () => {
    use wasm_apiserver::plugin::cluster as wit_cluster;

    impl wit_cluster::Host for StoreState {
        async fn get(
            &mut self,
            target: wit_cluster::Target,
            namespace: Option<String>,
            name: String,
        ) -> Result<Option<wit_cluster::Object>, String> {
            let access = self.cluster_access()?;
            let mut spent = self.spent;
            let found = access
                .get(
                    &target_from_wit(target),
                    namespace.as_deref(),
                    &name,
                    &mut spent,
                )
                .await;
            self.spent = spent;
            Ok(found?.map(object_to_wit))
        }

        async fn list(
            &mut self,
            target: wit_cluster::Target,
            options: wit_cluster::ListOptions,
        ) -> Result<wit_cluster::ObjectList, String> {
            let access = self.cluster_access()?;
            let mut spent = self.spent;
            let query = crate::cluster::ListQuery {
                namespace: options.namespace.as_deref(),
                label_selector: options.label_selector.as_deref(),
                field_selector: options.field_selector.as_deref(),
                limit: options.limit.map(|l| l as usize),
                continue_token: options.continue_token.as_deref(),
                ..Default::default()
            };
            let listed = access
                .list(&target_from_wit(target), query, &mut spent)
                .await;
            self.spent = spent;
            let mut list = listed?;
            let items = match list.get_mut("items").map(serde_json::Value::take) {
                Some(serde_json::Value::Array(items)) => items,
                _ => Vec::new(),
            };
            Ok(wit_cluster::ObjectList {
                items: items.into_iter().map(object_to_wit).collect(),
                resource_version: list["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                continue_token: list["metadata"]["continue"]
                    .as_str()
                    .filter(|c| !c.is_empty())
                    .map(String::from),
            })
        }

        async fn can_i(
            &mut self,
            user: wit_types::UserInfo,
            attributes: wit_cluster::ResourceAttributes,
        ) -> Result<bool, String> {
            let access = self.cluster_access()?;
            let mut spent = self.spent;
            let spec = serde_json::json!({
                "user": user.username,
                "uid": user.uid,
                "groups": user.groups,
                "resourceAttributes": {
                    "verb": attributes.verb,
                    "group": attributes.group,
                    "resource": attributes.resource,
                    "subresource": attributes.subresource,
                    "namespace": attributes.namespace,
                    "name": attributes.name,
                },
            });
            let allowed = access.can_i(&spec, &mut spent).await;
            self.spent = spent;
            allowed
        }
    }

    pub(crate) fn target_from_wit(t: wit_cluster::Target) -> crate::cluster::Target {
        match t {
            wit_cluster::Target::Kind(k) => crate::cluster::Target::Kind {
                api_version: k.api_version,
                kind: k.kind,
            },
            wit_cluster::Target::Resource(r) => crate::cluster::Target::Resource {
                group: r.group,
                version: r.version,
                resource: r.resource,
            },
        }
    }

    pub(crate) fn object_to_wit(o: serde_json::Value) -> wit_cluster::Object {
        let resource_version = o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        wit_cluster::Object {
            json: serde_json::to_string(&o).unwrap_or_default(),
            resource_version,
        }
    }
    };
}

/// The causes of a WIT `status` of 0.2.0 and later.
macro_rules! causes {
    () => {
        |s| {
            s.causes
                .iter()
                .map(|c| FieldCause {
                    field: c.field.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect()
        }
    };
}

/// The frozen 0.1.0 admission world (`wit/frozen/0.1.0`); the
/// authenticator and authorizer bindings of 0.1.0 reuse its `log` and
/// `types` imports.
pub(crate) mod v0_1 {
    wasmtime::component::bindgen!({
        world: "admission-plugin",
        path: "../../wit/frozen/0.1.0",
        exports: { default: async },
    });
    binding!("0.1.0", |_| Vec::new());
}

/// The frozen 0.2.0 admission world (`wit/frozen/0.2.0`); the other 0.2.0
/// bindings reuse its `log` and `types` imports.
pub(crate) mod v0_2 {
    wasmtime::component::bindgen!({
        world: "admission-plugin",
        path: "../../wit/frozen/0.2.0",
        exports: { default: async },
    });
    binding!("0.2.0", causes!());
}

/// The frozen 0.3.0 admission world (`wit/frozen/0.3.0`), which imports
/// `cluster`; the other 0.3.0 bindings reuse its `log`, `types` and
/// `cluster`.
pub(crate) mod v0_3 {
    wasmtime::component::bindgen!({
        world: "admission-plugin",
        path: "../../wit/frozen/0.3.0",
        imports: { "wasm-apiserver:plugin/cluster": async },
        exports: { default: async },
    });
    binding!("0.3.0", causes!());
    cluster_binding!();
}

/// The current 0.4.0 admission world (`wit/`); the other 0.4.0 bindings
/// (the scheduler's too) reuse its `log`, `types` and `cluster`.
pub(crate) mod v0_4 {
    wasmtime::component::bindgen!({
        world: "admission-plugin",
        path: "../../wit",
        imports: { "wasm-apiserver:plugin/cluster": async },
        exports: { default: async },
    });
    binding!("0.4.0", causes!());
    cluster_binding!();
}

/// `kind` label of admission metrics.
const KIND: &str = "admission";

/// A WIT `status`, whatever its version.
pub(crate) struct RawStatus {
    pub(crate) code: u16,
    pub(crate) reason: String,
    pub(crate) message: String,
    pub(crate) causes: Vec<FieldCause>,
}

/// A WIT `admission-response`, whatever its version, before its checks.
pub(crate) struct RawResponse {
    allowed: bool,
    status: Option<RawStatus>,
    patch: Option<String>,
    warnings: Vec<String>,
    audit_annotations: Vec<(String, String)>,
}

/// An [`AdmissionRequest`] with its objects encoded (as the JSON text the
/// plugin world takes) once, for every plugin the request goes to:
/// encoding is the costly part of a call's input, and validating plugins
/// all see the same object.
pub struct Encoded<'a> {
    request: &'a AdmissionRequest,
    object: Option<String>,
    old_object: Option<String>,
    options: Option<String>,
}

impl AdmissionRequest {
    /// Encodes the request's objects for plugin calls.
    pub fn encode(&self) -> Encoded<'_> {
        // `to_string` straight into a buffer: `Display` (`v.to_string()`)
        // goes through a formatter adapter, measurably slower.
        let json = |v: &Option<serde_json::Value>| {
            v.as_ref()
                .map(|v| serde_json::to_string(v).unwrap_or_else(|_| v.to_string()))
        };
        Encoded {
            request: self,
            object: json(&self.object),
            old_object: json(&self.old_object),
            options: json(&self.options),
        }
    }
}

impl Encoded<'_> {
    /// The request this encodes.
    pub fn request(&self) -> &AdmissionRequest {
        self.request
    }
}

/// Which export a call goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Validate,
    Mutate,
}

/// A loaded admission plugin, ready to be called concurrently. Cheap to clone.
#[derive(Clone)]
pub struct AdmissionPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    plugin: Backend,
    validate_metrics: Arc<OpMetrics>,
    mutate_metrics: Arc<OpMetrics>,
}

/// What runs an admission plugin's calls.
enum Backend {
    /// A component of either version of the admission world.
    Component(Versioned<v0_1::Pre, v0_2::Pre, v0_3::Pre, v0_4::Pre>),
    /// A Kubewarden policy (a waPC core module).
    Kubewarden(Policy),
}

impl Backend {
    fn core(&self) -> &PluginCore {
        match self {
            Backend::Component(p) => p.core(),
            Backend::Kubewarden(p) => &p.wapc.core,
        }
    }
}

impl std::fmt::Debug for AdmissionPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionPlugin")
            .field("name", &self.name())
            .field("sha256", &self.digest())
            .finish()
    }
}

impl Runtime {
    /// Loads an admission plugin: compiles `wasm` (or takes it from the
    /// cache), checks that it targets the admission world and imports
    /// nothing the host lacks, and has it check `config` once.
    ///
    /// `name` labels logs, metrics and audit annotations; `config` is handed
    /// verbatim to every call.
    pub async fn load_admission(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
    ) -> Result<AdmissionPlugin, PluginError> {
        self.load_admission_with_cluster(name, wasm, config, limits, None)
            .await
    }

    /// As [`Runtime::load_admission`], with the cluster reads a component
    /// of a world that imports `cluster` (0.3.0 and later) may make; older
    /// ones have no such import.
    pub async fn load_admission_with_cluster(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
        cluster: Option<crate::ClusterAccess>,
    ) -> Result<AdmissionPlugin, PluginError> {
        if is_core_module(wasm) {
            return Err(PluginError::Compile {
                plugin: name.to_owned(),
                message: "this is a core wasm module, not a component; a Kubewarden policy \
                          needs spec.module.format: kubewarden"
                    .to_owned(),
            });
        }
        let mut plugin = self.load_versioned(name, wasm, config, limits).await?;
        plugin.set_cluster(cluster.map(Arc::new));
        let inner = Inner {
            validate_metrics: self.metrics().op(name, KIND, "validate"),
            mutate_metrics: self.metrics().op(name, KIND, "mutate"),
            plugin: Backend::Component(plugin),
        };
        if let Backend::Component(p) = &inner.plugin {
            p.check_config().await?;
        }
        Ok(AdmissionPlugin {
            inner: Arc::new(inner),
        })
    }

    /// Loads a Kubewarden policy, unchanged: a core wasm module
    /// (`wasm32-wasip1`) speaking waPC, as Kubewarden's SDKs build them. It
    /// runs in the same sandbox as components (a fresh instance per call,
    /// the same `limits`, WASI granting nothing; of Kubewarden's host
    /// capabilities only logging, and the cluster reads `cluster` grants)
    /// and answers through the same [`AdmissionPlugin`]. `settings` (a JSON
    /// object's text, empty for none) go to every `validate`; the policy's
    /// `validate_settings` checks them here, and its rejection is a
    /// [`PluginError::Config`]. See [`crate::kubewarden`].
    pub async fn load_kubewarden(
        &self,
        name: &str,
        wasm: &[u8],
        settings: &str,
        limits: Limits,
        cluster: Option<crate::ClusterAccess>,
    ) -> Result<AdmissionPlugin, PluginError> {
        let policy = self
            .load_kubewarden_policy(name, wasm, settings, limits, cluster)
            .await?;
        Ok(AdmissionPlugin {
            inner: Arc::new(Inner {
                validate_metrics: self.metrics().op(name, KIND, "validate"),
                mutate_metrics: self.metrics().op(name, KIND, "mutate"),
                plugin: Backend::Kubewarden(policy),
            }),
        })
    }
}

/// Whether `wasm` starts like a core module (version 1) rather than a
/// component.
fn is_core_module(wasm: &[u8]) -> bool {
    wasm.starts_with(b"\0asm\x01\0\0\0")
}

impl AdmissionPlugin {
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

    /// The module format: `component` or `kubewarden`.
    pub fn format(&self) -> &'static str {
        match &self.inner.plugin {
            Backend::Component(_) => "component",
            Backend::Kubewarden(_) => "kubewarden",
        }
    }

    /// Whether a Kubewarden policy's `io.kubewarden.metadata` declares it
    /// mutating (`None`: a component, or a policy without metadata).
    pub fn kubewarden_mutating(&self) -> Option<bool> {
        match &self.inner.plugin {
            Backend::Component(_) => None,
            Backend::Kubewarden(p) => p.metadata.as_ref().map(|m| m.mutating),
        }
    }

    /// What a Kubewarden policy's metadata says of background audits and
    /// its annotations (`backgroundAudit`, default true; `None` for a
    /// component or a policy without metadata).
    pub fn kubewarden_audit(&self) -> Option<(bool, std::collections::BTreeMap<String, String>)> {
        match &self.inner.plugin {
            Backend::Component(_) => None,
            Backend::Kubewarden(p) => p
                .metadata
                .as_ref()
                .map(|m| (m.background_audit.unwrap_or(true), m.annotations.clone())),
        }
    }

    /// This plugin with no instances prepared ahead of its calls: each call
    /// instantiates and drops its own store where it runs, so the cost of a
    /// call is all in the call (what a shadow version's CPU share counts).
    /// A Kubewarden policy instantiates for every call already.
    pub fn unprepared(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner)
            && let Backend::Component(p) = &mut inner.plugin
        {
            p.unprepared();
        }
        self
    }

    /// How many calls so far found an instance prepared ahead of need, and
    /// how many instantiated on demand
    /// ([`RuntimeConfig::prepared_instances`](crate::RuntimeConfig::prepared_instances)).
    /// A Kubewarden policy instantiates for every call (its load-time
    /// calls included).
    pub fn prepared_calls(&self) -> (u64, u64) {
        match &self.inner.plugin {
            Backend::Component(p) => p.prepared_stats(),
            Backend::Kubewarden(p) => (0, p.calls()),
        }
    }

    /// Runs the validating phase. The response never carries a patch.
    pub async fn validate(
        &self,
        request: &AdmissionRequest,
    ) -> Result<AdmissionResponse, PluginError> {
        self.call(Phase::Validate, &request.encode()).await
    }

    /// As [`AdmissionPlugin::validate`], for a request encoded once for
    /// several plugins.
    pub async fn validate_encoded(
        &self,
        request: &Encoded<'_>,
    ) -> Result<AdmissionResponse, PluginError> {
        self.call(Phase::Validate, request).await
    }

    /// Runs the mutating phase; the response may carry a JSON Patch.
    pub async fn mutate(
        &self,
        request: &AdmissionRequest,
    ) -> Result<AdmissionResponse, PluginError> {
        self.call(Phase::Mutate, &request.encode()).await
    }

    async fn call(
        &self,
        phase: Phase,
        request: &Encoded<'_>,
    ) -> Result<AdmissionResponse, PluginError> {
        let inner = &self.inner;
        let metrics = match phase {
            Phase::Validate => &inner.validate_metrics,
            Phase::Mutate => &inner.mutate_metrics,
        };
        metrics.call();
        let start = Instant::now();
        let result = self.call_inner(phase, request).await;
        inner
            .plugin
            .core()
            .record(metrics, start, &result, |r| !r.allowed);
        result
    }

    async fn call_inner(
        &self,
        phase: Phase,
        request: &Encoded<'_>,
    ) -> Result<AdmissionResponse, PluginError> {
        let raw = match &self.inner.plugin {
            Backend::Component(Versioned::V0_1(p)) => v0_1::call(p, phase, request).await,
            Backend::Component(Versioned::V0_2(p)) => v0_2::call(p, phase, request).await,
            Backend::Component(Versioned::V0_3(p)) => v0_3::call(p, phase, request).await,
            Backend::Component(Versioned::V0_4(p)) => v0_4::call(p, phase, request).await,
            Backend::Kubewarden(p) => p
                .validate(request.request, phase == Phase::Mutate)
                .await
                .map(RawResponse::from),
        }?;
        check(self.inner.plugin.core(), phase, raw)
    }
}

impl From<Verdict> for RawResponse {
    fn from(v: Verdict) -> Self {
        RawResponse {
            allowed: v.accepted,
            status: (!v.accepted).then(|| RawStatus {
                code: v.code,
                reason: String::new(),
                message: v.message,
                causes: Vec::new(),
            }),
            patch: v.patch,
            warnings: v.warnings,
            audit_annotations: v.audit_annotations,
        }
    }
}

/// The size the output limit applies to.
fn output_size(r: &RawResponse) -> usize {
    let status = r.status.as_ref().map_or(0, |s| {
        s.reason.len()
            + s.message.len()
            + s.causes
                .iter()
                .map(|c| c.field.len() + c.reason.len() + c.message.len())
                .sum::<usize>()
    });
    let patch = r.patch.as_ref().map_or(0, String::len);
    let warnings: usize = r.warnings.iter().map(String::len).sum();
    let annotations: usize = r
        .audit_annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    status + patch + warnings + annotations
}

/// The reason Kubernetes uses for an HTTP code.
fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Forbidden",
    }
}

/// Checks and converts a plugin's response.
fn check(
    core: &PluginCore,
    phase: Phase,
    r: RawResponse,
) -> Result<AdmissionResponse, PluginError> {
    let plugin = || core.name.to_string();
    let size = output_size(&r);
    if size > core.limits.max_output_bytes {
        return Err(PluginError::OutputTooLarge {
            plugin: plugin(),
            size,
            limit: core.limits.max_output_bytes,
        });
    }
    let invalid = |message: String| PluginError::InvalidOutput {
        plugin: plugin(),
        message,
    };

    let patch = match (&r.patch, phase) {
        (None, _) => None,
        (Some(_), Phase::Validate) => {
            return Err(invalid("validate returned a patch".to_owned()));
        }
        // A denial's patch is never applied.
        (Some(_), Phase::Mutate) if !r.allowed => None,
        (Some(text), Phase::Mutate) => Some(check_patch(text).map_err(invalid)?),
    };

    let status = if r.allowed {
        None
    } else {
        let status = r.status.unwrap_or(RawStatus {
            code: 403,
            reason: String::new(),
            message: String::new(),
            causes: Vec::new(),
        });
        let code = if (400..=599).contains(&status.code) {
            status.code
        } else {
            403
        };
        let reason = if status.reason.is_empty() {
            reason_for(code).to_owned()
        } else {
            status.reason
        };
        let message = if status.message.is_empty() {
            format!("denied by admission plugin {}", core.name)
        } else {
            status.message
        };
        Some(DenyStatus {
            code,
            reason,
            message,
            causes: status.causes,
        })
    };

    let audit_annotations: BTreeMap<String, String> = r
        .audit_annotations
        .into_iter()
        .map(|(k, v)| (format!("{}/{k}", core.name), v))
        .collect();

    Ok(AdmissionResponse {
        allowed: r.allowed,
        status,
        patch,
        warnings: r.warnings,
        audit_annotations,
    })
}

/// Parses a JSON Patch and checks its shape: an array of objects, each with
/// a known `op` and a string `path`.
fn check_patch(text: &str) -> Result<serde_json::Value, String> {
    let patch: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("patch is not JSON: {e}"))?;
    let ops = patch
        .as_array()
        .ok_or_else(|| "patch is not a JSON array".to_owned())?;
    for (i, op) in ops.iter().enumerate() {
        let name = op.get("op").and_then(|o| o.as_str());
        if !matches!(
            name,
            Some("add" | "remove" | "replace" | "move" | "copy" | "test")
        ) {
            return Err(format!("patch operation {i} has no valid \"op\""));
        }
        if op.get("path").and_then(|p| p.as_str()).is_none() {
            return Err(format!("patch operation {i} has no \"path\""));
        }
    }
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::check_patch;

    #[test]
    fn patch_shape_is_checked() {
        assert!(check_patch(r#"[{"op":"add","path":"/a","value":1}]"#).is_ok());
        assert!(check_patch("[]").is_ok());
        assert!(check_patch("{}").unwrap_err().contains("not a JSON array"));
        assert!(check_patch("[{\"op\":\"frob\",\"path\":\"/\"}]").is_err());
        assert!(check_patch("[{\"op\":\"add\"}]").is_err());
        assert!(check_patch("nope").is_err());
    }
}
