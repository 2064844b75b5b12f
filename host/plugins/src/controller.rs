//! Controllers: the `wasm-apiserver:plugin/controller-plugin` world
//! (packages 0.3.0 and 0.4.0), logic that reconciles one key at a time when the
//! cluster changes.
//!
//! Only what is specific to controllers lives here: the world's binding,
//! the plain request and outcome types, and the host side of the `writes`
//! and `events` imports (over the [`WriteAccess`] set on the store per
//! call, as `cluster` reads are). Loading, limits, concurrency and metrics
//! come from [`crate::runtime`].

use crate::cluster::ClusterAccess;
use crate::kind::Loaded;
use crate::runtime::{Limits, Runtime};
use crate::sandbox::StoreState;
use crate::writes::{WriteAccess, WriteError};
use crate::{PluginError, metrics::OpMetrics};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The version-neutral part of each version's binding: the host side of
/// the `writes` and `events` imports and the `reconcile` call, over the
/// `types`, `log` and `cluster` of admission's binding of the same version
/// (`$imports`).
macro_rules! controller_binding {
    ($imports:ident) => {
        use crate::admission::$imports::{object_to_wit, target_from_wit};
        use crate::cluster::Target;
        use crate::controller::{Outcome, ReconcileReason, ReconcileRequest};
        use crate::sandbox::StoreState;
        use crate::writes::{DeleteOptions, PatchKind, WriteError};
        use crate::{PluginError, kind::Loaded};
        use exports::wasm_apiserver::plugin::controller as wit;
        use std::time::Duration;
        use wasm_apiserver::plugin::{events as wit_events, writes as wit_writes};
        use crate::admission::$imports::wasm_apiserver::plugin::types as wit_types;
        type WitStatus = wit_types::Status;
        type WitTarget = crate::admission::$imports::wasm_apiserver::plugin::cluster::Target;
        type WitObject = crate::admission::$imports::wasm_apiserver::plugin::cluster::Object;

        /// A controller loaded against this version.
        pub(crate) type Pre = ControllerPluginPre<StoreState>;

        fn reason_to_wit(r: ReconcileReason) -> wit::Reason {
            match r {
                ReconcileReason::Initial => wit::Reason::Initial,
                ReconcileReason::Changed => wit::Reason::Changed,
                ReconcileReason::Deleted => wit::Reason::Deleted,
                ReconcileReason::Owned => wit::Reason::Owned,
                ReconcileReason::Watched => wit::Reason::Watched,
                ReconcileReason::Resync => wit::Reason::Resync,
                ReconcileReason::Requeued => wit::Reason::Requeued,
                ReconcileReason::Retry => wit::Reason::Retry,
            }
        }

        /// Reconciles one key in a fresh sandbox.
        pub(super) async fn reconcile(
            plugin: &Loaded<Pre>,
            request: &ReconcileRequest,
        ) -> Result<Result<Outcome, String>, PluginError> {
            let wit_request = wit::ReconcileRequest {
                resource: wit_types::GroupVersionResource {
                    group: request.resource.group.clone(),
                    version: request.resource.version.clone(),
                    resource: request.resource.resource.clone(),
                },
                namespace: request.namespace.clone(),
                name: request.name.clone(),
                reason: reason_to_wit(request.reason),
                retries: request.retries,
            };
            plugin
                .call(&request.uid, async move |instance, store, config| {
                    instance
                        .wasm_apiserver_plugin_controller()
                        .call_reconcile(store, config, &wit_request)
                        .await
                })
                .await
                .map(|r| {
                    r.map(|o| match o {
                        wit::ReconcileResult::Done => Outcome::Done,
                        wit::ReconcileResult::RequeueAfter(ms) => {
                            Outcome::RequeueAfter(Duration::from_millis(ms.into()))
                        }
                    })
                })
        }

        fn status_to_wit(e: WriteError) -> WitStatus {
            WitStatus {
                code: e.code,
                reason: e.reason,
                message: e.message,
                causes: e
                    .causes
                    .into_iter()
                    .map(
                        |c| wit_types::FieldCause {
                            field: c.field,
                            reason: c.reason,
                            message: c.message,
                        },
                    )
                    .collect(),
            }
        }

        impl wit_writes::Host for StoreState {
            async fn create(
                &mut self,
                target: WitTarget,
                namespace: Option<String>,
                object: String,
            ) -> Result<WitObject, WitStatus> {
                let access = self.write_access().map_err(status_to_wit)?;
                let object = super::parse(&object, "the object").map_err(status_to_wit)?;
                access
                    .writes
                    .create(&target_from_wit(target), namespace.as_deref(), object)
                    .await
                    .map(object_to_wit)
                    .map_err(status_to_wit)
            }

            async fn update(
                &mut self,
                target: WitTarget,
                object: String,
                subresource: Option<String>,
            ) -> Result<WitObject, WitStatus> {
                let access = self.write_access().map_err(status_to_wit)?;
                let object = super::parse(&object, "the object").map_err(status_to_wit)?;
                access
                    .writes
                    .update(&target_from_wit(target), object, subresource.as_deref())
                    .await
                    .map(object_to_wit)
                    .map_err(status_to_wit)
            }

            async fn patch(
                &mut self,
                target: WitTarget,
                namespace: Option<String>,
                name: String,
                patch_type: wit_writes::PatchType,
                patch: String,
                subresource: Option<String>,
            ) -> Result<WitObject, WitStatus> {
                let access = self.write_access().map_err(status_to_wit)?;
                let patch = super::parse(&patch, "the patch").map_err(status_to_wit)?;
                let kind = match patch_type {
                    wit_writes::PatchType::Json => PatchKind::Json,
                    wit_writes::PatchType::Merge => PatchKind::Merge,
                    wit_writes::PatchType::Strategic => PatchKind::Strategic,
                };
                access
                    .writes
                    .patch(
                        &target_from_wit(target),
                        namespace.as_deref(),
                        &name,
                        kind,
                        patch,
                        subresource.as_deref(),
                    )
                    .await
                    .map(object_to_wit)
                    .map_err(status_to_wit)
            }

            async fn apply(
                &mut self,
                target: WitTarget,
                configuration: String,
                force: bool,
                subresource: Option<String>,
            ) -> Result<WitObject, WitStatus> {
                let access = self.write_access().map_err(status_to_wit)?;
                let configuration = super::parse(&configuration, "the configuration").map_err(status_to_wit)?;
                access
                    .writes
                    .apply(
                        &target_from_wit(target),
                        configuration,
                        force,
                        subresource.as_deref(),
                    )
                    .await
                    .map(object_to_wit)
                    .map_err(status_to_wit)
            }

            async fn apply_all(
                &mut self,
                configurations: Vec<String>,
                force: bool,
            ) -> Vec<Result<WitObject, WitStatus>> {
                // Each is one write of the budget; those past it are refused alone.
                let mut answers: Vec<Option<Result<WitObject, WitStatus>>> = Vec::new();
                let mut batch = Vec::new();
                let mut access = None;
                for text in configurations {
                    let parsed = self.write_access().and_then(|a| {
                        access = Some(a);
                        let c = super::parse(&text, "the configuration")?;
                        match (c["apiVersion"].as_str(), c["kind"].as_str()) {
                            (Some(v), Some(k)) => Ok((
                                Target::Kind {
                                    api_version: v.to_owned(),
                                    kind: k.to_owned(),
                                },
                                c,
                            )),
                            _ => Err(WriteError::new(
                                400,
                                "BadRequest",
                                "a configuration needs apiVersion and kind",
                            )),
                        }
                    });
                    match parsed {
                        Ok(item) => {
                            batch.push(item);
                            answers.push(None);
                        }
                        Err(e) => answers.push(Some(Err(status_to_wit(e)))),
                    }
                }
                let done = match access {
                    Some(a) if !batch.is_empty() => a.writes.apply_all(batch, force).await,
                    _ => Vec::new(),
                };
                let mut done = done.into_iter();
                answers
                    .into_iter()
                    .map(|a| match a {
                        Some(r) => r,
                        None => match done.next() {
                            Some(r) => r.map(object_to_wit).map_err(status_to_wit),
                            None => Err(status_to_wit(WriteError::new(
                                500,
                                "InternalError",
                                "the host answered fewer results than configurations",
                            ))),
                        },
                    })
                    .collect()
            }

            async fn delete(
                &mut self,
                target: WitTarget,
                namespace: Option<String>,
                name: String,
                options: wit_writes::DeleteOptions,
            ) -> Result<(), WitStatus> {
                let access = self.write_access().map_err(status_to_wit)?;
                let options = DeleteOptions {
                    propagation_policy: options.propagation_policy,
                    uid: options.uid,
                    resource_version: options.resource_version,
                };
                access
                    .writes
                    .delete(
                        &target_from_wit(target),
                        namespace.as_deref(),
                        &name,
                        &options,
                    )
                    .await
                    .map_err(status_to_wit)
            }
        }

        impl wit_events::Host for StoreState {
            async fn publish(
                &mut self,
                regarding: String,
                event_type: wit_events::EventType,
                reason: String,
                note: String,
            ) {
                let access = match self.write_access() {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e.message, "event dropped");
                        return;
                    }
                };
                let Ok(regarding) = serde_json::from_str::<serde_json::Value>(&regarding) else {
                    tracing::debug!("event dropped: `regarding` is not JSON");
                    return;
                };
                let warning = matches!(event_type, wit_events::EventType::Warning);
                access
                    .writes
                    .event(&regarding, warning, &reason, &note)
                    .await;
            }
        }
    };
}

/// The frozen 0.3.0 controller world (`wit/frozen/0.3.0`).
mod v0_3 {
    wasmtime::component::bindgen!({
        world: "controller-plugin",
        path: "../../wit/frozen/0.3.0",
        imports: {
            "wasm-apiserver:plugin/writes": async,
            "wasm-apiserver:plugin/events": async,
        },
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::log,
            "wasm-apiserver:plugin/cluster@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::cluster,
        },
    });
    crate::kind::world_pre!(
        ControllerPlugin,
        ControllerPluginPre,
        wasm_apiserver_plugin_controller,
        "0.3.0",
        "controller-plugin",
        "controller",
        "controller"
    );
    controller_binding!(v0_3);
}

/// The current 0.4.0 controller world (`wit/`).
mod v0_4 {
    wasmtime::component::bindgen!({
        world: "controller-plugin",
        path: "../../wit",
        imports: {
            "wasm-apiserver:plugin/writes": async,
            "wasm-apiserver:plugin/events": async,
        },
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::log,
            "wasm-apiserver:plugin/cluster@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::cluster,
        },
    });
    crate::kind::world_pre!(
        ControllerPlugin,
        ControllerPluginPre,
        wasm_apiserver_plugin_controller,
        "0.4.0",
        "controller-plugin",
        "controller",
        "controller"
    );
    controller_binding!(v0_4);
}

/// A controller of any version (the world is new in 0.3.0).
enum Versions {
    V0_3(Loaded<v0_3::Pre>),
    V0_4(Loaded<v0_4::Pre>),
}

impl Versions {
    fn core(&self) -> &crate::runtime::PluginCore {
        match self {
            Versions::V0_3(p) => &p.core,
            Versions::V0_4(p) => &p.core,
        }
    }
}

/// `kind` label of controller metrics.
const KIND: &str = "controller";

/// Why a key was queued (the WIT `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileReason {
    Initial,
    Changed,
    Deleted,
    Owned,
    Watched,
    Resync,
    Requeued,
    Retry,
}

/// One key to reconcile.
#[derive(Debug, Clone)]
pub struct ReconcileRequest {
    /// Identifies the call in logs.
    pub uid: String,
    pub resource: crate::Gvr,
    pub namespace: Option<String>,
    pub name: String,
    pub reason: ReconcileReason,
    pub retries: u32,
}

/// What a successful reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    RequeueAfter(Duration),
}

/// A loaded controller, ready to be called concurrently. Cheap to clone.
#[derive(Clone)]
pub struct ControllerPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    plugin: Versions,
    metrics: Arc<OpMetrics>,
}

impl std::fmt::Debug for ControllerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerPlugin")
            .field("name", &self.name())
            .field("sha256", &self.digest())
            .finish()
    }
}

impl Runtime {
    /// Loads a controller: compiles `wasm` (or takes it from the cache),
    /// checks that it targets the controller world, gives it its reads and
    /// writes, and has it check `config` once.
    pub async fn load_controller(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
        cluster: ClusterAccess,
        writes: WriteAccess,
    ) -> Result<ControllerPlugin, PluginError> {
        use crate::kind::WorldPre;
        let compiled = self.compile(name, wasm).await?;
        let (cluster, writes) = (Some(Arc::new(cluster)), Some(Arc::new(writes)));
        let plugin = if compiled.exports(v0_3::Pre::EXPORT) {
            let mut p: Loaded<v0_3::Pre> = self.link_compiled(name, compiled, config, limits)?;
            (p.cluster, p.writes) = (cluster, writes);
            p.check_config().await?;
            Versions::V0_3(p)
        } else {
            let mut p: Loaded<v0_4::Pre> = self.link_compiled(name, compiled, config, limits)?;
            (p.cluster, p.writes) = (cluster, writes);
            p.check_config().await?;
            Versions::V0_4(p)
        };
        Ok(ControllerPlugin {
            inner: Arc::new(Inner {
                metrics: self.metrics().op(name, KIND, "reconcile"),
                plugin,
            }),
        })
    }
}

impl ControllerPlugin {
    /// The name the controller was loaded under.
    pub fn name(&self) -> &str {
        &self.inner.plugin.core().name
    }

    /// The SHA-256 of the controller's wasm bytes, in hex.
    pub fn digest(&self) -> &str {
        &self.inner.plugin.core().digest
    }

    /// The limits every reconcile runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.plugin.core().limits
    }

    /// Reconciles one key in a fresh sandbox. `Ok(Err(message))` is the
    /// controller's own error; `Err` a sandbox failure (trap, timeout,
    /// memory); both are retried by the caller.
    pub async fn reconcile(
        &self,
        request: &ReconcileRequest,
    ) -> Result<Result<Outcome, String>, PluginError> {
        let inner = &self.inner;
        inner.metrics.call();
        let start = Instant::now();
        let result = match &inner.plugin {
            Versions::V0_3(p) => v0_3::reconcile(p, request).await,
            Versions::V0_4(p) => v0_4::reconcile(p, request).await,
        };
        inner
            .plugin
            .core()
            .record(&inner.metrics, start, &result, Result::is_err);
        result
    }
}

fn parse(text: &str, what: &str) -> Result<serde_json::Value, WriteError> {
    serde_json::from_str(text)
        .map_err(|e| WriteError::new(400, "BadRequest", format!("{what} is not valid JSON: {e}")))
}

impl StoreState {
    /// The call's write access (charged one write), or why there is none.
    fn write_access(&mut self) -> Result<Arc<WriteAccess>, WriteError> {
        let access = self.writes.clone().ok_or_else(|| {
            WriteError::new(403, "Forbidden", "this plugin has no access to writes")
        })?;
        access.charge(&mut self.writes_spent)?;
        Ok(access)
    }
}
