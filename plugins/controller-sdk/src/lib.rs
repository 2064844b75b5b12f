//! The Rust SDK for wasm-apiserver controllers.
//!
//! It binds the `controller-plugin` world of `wasm-apiserver:plugin@0.4.0`
//! (`wit/controller.wit` at the repository root). A controller is a type
//! implementing [`Controller`], exported with [`export_controller!`]:
//!
//! ```ignore
//! use wasm_apiserver_controller_sdk::{export_controller, Action, Controller, Request, json};
//!
//! #[derive(serde::Deserialize, Default)]
//! struct Config { label: String }
//!
//! struct Defaults;
//! impl Controller for Defaults {
//!     type Config = Config;
//!     fn reconcile(config: &Config, req: &Request) -> Result<Action, String> {
//!         let Some(ns) = req.get()? else { return Ok(Action::Done) };
//!         wasm_apiserver_controller_sdk::apply(&json!({
//!             "apiVersion": "v1", "kind": "ConfigMap",
//!             "metadata": {"name": "defaults", "namespace": req.name},
//!             "data": {"label": config.label},
//!         }))?;
//!         Ok(Action::Done)
//!     }
//! }
//! export_controller!(Defaults);
//! ```
//!
//! What the SDK gives a controller:
//! - [`Request`]: the key (resource, namespace, name), why it was queued,
//!   and [`Request::get`] for the primary object;
//! - reads ([`get`], [`list`], and typed: [`get_as`], [`list_as`],
//!   [`Request::get_as`] into any `Deserialize` type) and writes ([`apply`] and [`apply_all`], the default:
//!   server-side apply with the controller as field manager and
//!   ownership forced, so the same configuration applied twice changes
//!   nothing and a hand edit of a field it owns is put back; [`create`],
//!   [`delete`], [`patch`], [`update`]), all made by the server as the
//!   controller's ServiceAccount; [`owner_reference`] to make what it
//!   creates owned (so the garbage collector removes it);
//! - [`event`] and [`log`];
//! - [`testing`] (native targets only): run a reconcile on fixture
//!   objects and read back the writes it made.

wit_bindgen::generate!({
    path: "../../wit",
    world: "controller-plugin",
    pub_export_macro: true,
    export_macro_name: "export_raw_controller",
    default_bindings_module: "wasm_apiserver_controller_sdk",
});

#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use serde_json::{self, Value, json};

/// The raw exported interface, for controllers that want it.
pub mod raw {
    pub use crate::exports::wasm_apiserver::plugin::controller::*;
}

use raw::{Reason, ReconcileRequest, ReconcileResult};
use serde::de::DeserializeOwned;

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Done until something changes.
    Done,
    /// Look again after so many milliseconds.
    RequeueAfterMillis(u32),
}

/// A refused write, as the `Status` a client would get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// HTTP code: 403 Forbidden, 404 NotFound, 409 Conflict/AlreadyExists,
    /// 422 Invalid...
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

impl Error {
    pub fn is_not_found(&self) -> bool {
        self.code == 404
    }
}

/// One key to reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The primary resource: `(group, version, resource)`.
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
    /// Why it was queued: `initial`, `changed`, `deleted`, `owned`,
    /// `watched`, `resync`, `requeued` or `retry`.
    pub reason: &'static str,
    /// Failed reconciles of this key before this one.
    pub retries: u32,
}

impl Request {
    /// The primary object, or `None` when it is gone.
    pub fn get(&self) -> Result<Option<Value>, String> {
        get_resource(
            &self.group,
            &self.version,
            &self.resource,
            self.namespace.as_deref(),
            &self.name,
        )
    }

    /// The primary object as a typed value (e.g. a `k8s_openapi` type, or
    /// the controller's own struct), or `None` when it is gone.
    pub fn get_as<T: DeserializeOwned>(&self) -> Result<Option<T>, String> {
        self.get()?.map(decode).transpose()
    }

    fn from_wit(r: ReconcileRequest) -> Self {
        Request {
            group: r.resource.group,
            version: r.resource.version,
            resource: r.resource.resource,
            namespace: r.namespace,
            name: r.name,
            reason: match r.reason {
                Reason::Initial => "initial",
                Reason::Changed => "changed",
                Reason::Deleted => "deleted",
                Reason::Owned => "owned",
                Reason::Watched => "watched",
                Reason::Resync => "resync",
                Reason::Requeued => "requeued",
                Reason::Retry => "retry",
            },
            retries: r.retries,
        }
    }
}

/// A controller: its configuration type and its reconcile.
pub trait Controller {
    /// `spec.config` of the `Controller` object (JSON), parsed once per
    /// call; `Default` when the spec has none.
    type Config: DeserializeOwned + Default;

    /// Brings the cluster in line for one key. An error is retried with
    /// backoff and shown in the `Controller`'s status.
    fn reconcile(config: &Self::Config, request: &Request) -> Result<Action, String>;
}

/// Parses a configuration string (empty: the default).
pub fn parse_config<C: DeserializeOwned + Default>(config: &str) -> Result<C, String> {
    if config.trim().is_empty() {
        return Ok(C::default());
    }
    serde_json::from_str(config).map_err(|e| format!("invalid configuration: {e}"))
}

/// Implements the raw `Guest` for a [`Controller`].
pub struct Adapter<C>(std::marker::PhantomData<C>);

impl<C: Controller> raw::Guest for Adapter<C> {
    fn check_config(config: String) -> Result<(), String> {
        parse_config::<C::Config>(&config).map(drop)
    }

    fn reconcile(config: String, request: ReconcileRequest) -> Result<ReconcileResult, String> {
        let config = parse_config::<C::Config>(&config)?;
        Ok(match C::reconcile(&config, &Request::from_wit(request))? {
            Action::Done => ReconcileResult::Done,
            Action::RequeueAfterMillis(ms) => ReconcileResult::RequeueAfter(ms),
        })
    }
}

/// Runs a reconcile natively (what [`testing`] and `export_controller!`
/// share): parses the configuration and calls the controller.
pub fn reconcile_with<C: Controller>(config: &str, request: &Request) -> Result<Action, String> {
    C::reconcile(&parse_config::<C::Config>(config)?, request)
}

/// Exports a [`Controller`] as the component's `controller` interface.
#[macro_export]
macro_rules! export_controller {
    ($t:ty) => {
        #[allow(dead_code)] // natively (tests) nothing is exported
        struct __WasmApiserverController;
        impl $crate::raw::Guest for __WasmApiserverController {
            fn check_config(
                config: ::std::string::String,
            ) -> ::std::result::Result<(), ::std::string::String> {
                <$crate::Adapter<$t> as $crate::raw::Guest>::check_config(config)
            }
            fn reconcile(
                config: ::std::string::String,
                request: $crate::raw::ReconcileRequest,
            ) -> ::std::result::Result<$crate::raw::ReconcileResult, ::std::string::String> {
                <$crate::Adapter<$t> as $crate::raw::Guest>::reconcile(config, request)
            }
        }
        // Component exports only in the wasm build.
        #[cfg(target_arch = "wasm32")]
        $crate::export_raw_controller!(__WasmApiserverController);
    };
}

#[cfg(target_arch = "wasm32")]
mod host {
    pub use crate::wasm_apiserver::plugin::cluster::{self, KindRef, ListOptions, Target};
    pub use crate::wasm_apiserver::plugin::types::{GroupVersionResource, Status};
    pub use crate::wasm_apiserver::plugin::{events, writes};

    pub fn kind(api_version: &str, kind: &str) -> Target {
        Target::Kind(KindRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })
    }

    pub fn error(s: Status) -> super::Error {
        super::Error {
            code: s.code,
            reason: s.reason,
            message: s.message,
        }
    }

    pub fn parse(text: &str) -> Result<super::Value, super::Error> {
        serde_json::from_str(text).map_err(|e| super::Error {
            code: 500,
            reason: "InternalError".into(),
            message: format!("the host answered invalid JSON: {e}"),
        })
    }
}

fn get_resource(
    group: &str,
    version: &str,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, String> {
    #[cfg(target_arch = "wasm32")]
    {
        let target = host::Target::Resource(host::GroupVersionResource {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
        });
        host::cluster::get(&target, namespace, name)?
            .map(|o| serde_json::from_str(&o.json).map_err(|e| e.to_string()))
            .transpose()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Ok(testing::get_resource(
            group, version, resource, namespace, name,
        ))
    }
}

/// One object of `kind` in `api_version` (`v1`, `Namespace`), or `None`.
pub fn get(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, String> {
    #[cfg(target_arch = "wasm32")]
    {
        host::cluster::get(&host::kind(api_version, kind), namespace, name)?
            .map(|o| serde_json::from_str(&o.json).map_err(|e| e.to_string()))
            .transpose()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Ok(testing::find(api_version, kind, namespace, name))
    }
}

/// Decodes an object into `T`, naming what did not fit.
fn decode<T: DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| format!("cannot decode the object: {e}"))
}

/// [`get`] as a typed value.
pub fn get_as<T: DeserializeOwned>(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<T>, String> {
    get(api_version, kind, namespace, name)?
        .map(decode)
        .transpose()
}

/// [`list`] as typed values.
pub fn list_as<T: DeserializeOwned>(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<T>, String> {
    list(api_version, kind, namespace, label_selector)?
        .into_iter()
        .map(decode)
        .collect()
}

/// Every object of `kind` in `namespace` (all for `None`) matching
/// `label_selector` (`app=web,tier in (a,b)`), following continue tokens.
pub fn list(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Value>, String> {
    #[cfg(target_arch = "wasm32")]
    {
        let target = host::kind(api_version, kind);
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = host::cluster::list(
                &target,
                &host::ListOptions {
                    namespace: namespace.map(String::from),
                    label_selector: label_selector.map(String::from),
                    field_selector: None,
                    limit: None,
                    continue_token: token.take(),
                },
            )?;
            for o in page.items {
                out.push(serde_json::from_str(&o.json).map_err(|e| e.to_string())?);
            }
            match page.continue_token {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Ok(testing::select(
            api_version,
            kind,
            namespace,
            label_selector,
        ))
    }
}

/// `(apiVersion, kind)` of an object.
fn kind_of(obj: &Value) -> Result<(&str, &str), Error> {
    match (obj["apiVersion"].as_str(), obj["kind"].as_str()) {
        (Some(v), Some(k)) => Ok((v, k)),
        _ => Err(Error {
            code: 400,
            reason: "BadRequest".into(),
            message: "the object needs apiVersion and kind".into(),
        }),
    }
}

/// Server-side apply of `configuration` (apiVersion, kind, metadata.name
/// and namespace, and the fields the controller owns), ownership forced:
/// creates the object when absent, puts back fields others changed, and
/// changes nothing when all is as applied.
pub fn apply(configuration: &Value) -> Result<Value, Error> {
    let (api_version, kind) = kind_of(configuration)?;
    #[cfg(target_arch = "wasm32")]
    {
        let o = host::writes::apply(
            &host::kind(api_version, kind),
            &configuration.to_string(),
            true,
            None,
        )
        .map_err(host::error)?;
        host::parse(&o.json)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        testing::write("apply", api_version, kind, configuration.clone())
    }
}

/// Several applies at once (each as [`apply`]): the server runs them
/// concurrently, so independent objects cost one round trip and one
/// storage commit. One result per configuration, in order.
pub fn apply_all(configurations: &[Value]) -> Vec<Result<Value, Error>> {
    #[cfg(target_arch = "wasm32")]
    {
        let texts: Vec<String> = configurations.iter().map(Value::to_string).collect();
        host::writes::apply_all(&texts, true)
            .into_iter()
            .map(|r| r.map_err(host::error).and_then(|o| host::parse(&o.json)))
            .collect()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        configurations.iter().map(apply).collect()
    }
}

/// Creates an object (409 `AlreadyExists` when it exists).
pub fn create(object: &Value) -> Result<Value, Error> {
    let (api_version, kind) = kind_of(object)?;
    #[cfg(target_arch = "wasm32")]
    {
        let o = host::writes::create(&host::kind(api_version, kind), None, &object.to_string())
            .map_err(host::error)?;
        host::parse(&o.json)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        testing::write("create", api_version, kind, object.clone())
    }
}

/// Replaces an object (or its `status` with `subresource: Some("status")`);
/// its `metadata.resourceVersion`, when set, must be current (409
/// `Conflict` otherwise).
pub fn update(object: &Value, subresource: Option<&str>) -> Result<Value, Error> {
    let (api_version, kind) = kind_of(object)?;
    #[cfg(target_arch = "wasm32")]
    {
        let o = host::writes::update(
            &host::kind(api_version, kind),
            &object.to_string(),
            subresource,
        )
        .map_err(host::error)?;
        host::parse(&o.json)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = subresource;
        testing::write("update", api_version, kind, object.clone())
    }
}

/// Merge-patches (RFC 7386) an object or its `subresource`.
pub fn patch(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    merge_patch: &Value,
    subresource: Option<&str>,
) -> Result<Value, Error> {
    #[cfg(target_arch = "wasm32")]
    {
        let o = host::writes::patch(
            &host::kind(api_version, kind),
            namespace,
            name,
            host::writes::PatchType::Merge,
            &merge_patch.to_string(),
            subresource,
        )
        .map_err(host::error)?;
        host::parse(&o.json)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = subresource;
        testing::merge(api_version, kind, namespace, name, merge_patch)
    }
}

/// Deletes an object; `Ok(false)` when it was already gone.
pub fn delete(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<bool, Error> {
    #[cfg(target_arch = "wasm32")]
    {
        let options = host::writes::DeleteOptions {
            propagation_policy: None,
            uid: None,
            resource_version: None,
        };
        match host::writes::delete(&host::kind(api_version, kind), namespace, name, &options) {
            Ok(()) => Ok(true),
            Err(s) if s.code == 404 => Ok(false),
            Err(s) => Err(host::error(s)),
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Ok(testing::remove(api_version, kind, namespace, name))
    }
}

/// Records an Event about `regarding` (`warning` or normal). Never fails.
pub fn event(regarding: &Value, warning: bool, reason: &str, note: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        let t = if warning {
            host::events::EventType::Warning
        } else {
            host::events::EventType::Normal
        };
        host::events::publish(&regarding.to_string(), t, reason, note);
    }
    #[cfg(not(target_arch = "wasm32"))]
    testing::record_event(regarding, warning, reason, note);
}

/// Logs an info record into the server's log.
pub fn log(message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::wasm_apiserver::plugin::log::log(
        crate::wasm_apiserver::plugin::log::Level::Info,
        message,
        &[],
    );
    #[cfg(not(target_arch = "wasm32"))]
    let _ = message;
}

/// An `ownerReference` to `owner` marking it the controlling owner, so the
/// object is reconciled with its owner's key (`spec.owns`) and removed by
/// the garbage collector when the owner goes.
pub fn owner_reference(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
    })
}
