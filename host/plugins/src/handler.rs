//! Custom-resource handlers: the `wasm-apiserver:plugin/resource-handler-plugin`
//! world (package 0.2.0 and later), the in-process counterpart of a CRD's
//! conversion webhook, with defaulting and validation beyond the schema.
//!
//! Only what is specific to handlers lives here: the world's binding, the
//! plain request type ([`ObjectRequest`]) and the checks on answers (a
//! conversion returns as many objects as it was given, each in the desired
//! version, with no metadata changed but labels and annotations). Loading,
//! limits, concurrency and metrics come from [`crate::runtime`].

use crate::kind::Loaded;
use crate::runtime::{Limits, PluginCore, Runtime};
use crate::types::{FieldCause, Gvk, Operation, UserInfo};
use crate::{PluginError, metrics::OpMetrics};
use serde_json::Value;
use std::borrow::Borrow;
use std::sync::Arc;
use std::time::Instant;

/// One version's binding of the handler world (its imports are
/// admission's of the same version): the world and calls of each export
/// with plain Rust types in and out.
macro_rules! handler_binding {
    ($version:literal, $admission:ident) => {
        crate::kind::world_pre!(
            ResourceHandlerPlugin,
            ResourceHandlerPluginPre,
            wasm_apiserver_plugin_resource_handler,
            $version,
            "resource-handler-plugin",
            "resource-handler",
            "resource handler"
        );

        use crate::admission::$admission::{operation_to_wit, user_to_wit};
        use crate::kind::Loaded;
        use crate::sandbox::StoreState;
        use crate::{FieldCause, ObjectRequest, PluginError};
        use exports::wasm_apiserver::plugin::resource_handler as wit;
        use wasm_apiserver::plugin::types as wit_types;

        /// A handler loaded against this version.
        pub(crate) type Pre = ResourceHandlerPluginPre<StoreState>;

        fn to_wit(r: &ObjectRequest) -> wit::ObjectRequest {
            wit::ObjectRequest {
                uid: r.uid.clone(),
                kind: wit_types::GroupVersionKind {
                    group: r.kind.group.clone(),
                    version: r.kind.version.clone(),
                    kind: r.kind.kind.clone(),
                },
                operation: operation_to_wit(r.operation),
                user_info: user_to_wit(&r.user),
                object: r.object.to_string(),
                old_object: r.old_object.as_ref().map(serde_json::Value::to_string),
            }
        }

        pub(super) async fn convert(
            plugin: &Loaded<Pre>,
            uid: &str,
            desired: &str,
            objects: Vec<String>,
        ) -> Result<Result<Vec<String>, String>, PluginError> {
            let request = wit::ConversionRequest {
                uid: uid.to_owned(),
                desired_api_version: desired.to_owned(),
                objects,
            };
            plugin
                .call(uid, async move |instance, store, config| {
                    let export = instance.wasm_apiserver_plugin_resource_handler();
                    export.call_convert(store, config, &request).await
                })
                .await
        }

        pub(super) async fn default(
            plugin: &Loaded<Pre>,
            request: &ObjectRequest,
        ) -> Result<Result<Option<String>, String>, PluginError> {
            let wit_request = to_wit(request);
            plugin
                .call(&request.uid, async move |instance, store, config| {
                    let export = instance.wasm_apiserver_plugin_resource_handler();
                    export.call_default(store, config, &wit_request).await
                })
                .await
        }

        pub(super) async fn validate(
            plugin: &Loaded<Pre>,
            request: &ObjectRequest,
        ) -> Result<Vec<FieldCause>, PluginError> {
            let wit_request = to_wit(request);
            let causes = plugin
                .call(&request.uid, async move |instance, store, config| {
                    let export = instance.wasm_apiserver_plugin_resource_handler();
                    export.call_validate(store, config, &wit_request).await
                })
                .await?;
            Ok(causes
                .into_iter()
                .map(|c| FieldCause {
                    field: c.field,
                    reason: c.reason,
                    message: c.message,
                })
                .collect())
        }
    };
}

/// The frozen 0.2.0 handler world.
mod v0_2 {
    wasmtime::component::bindgen!({
        world: "resource-handler-plugin",
        path: "../../wit/frozen/0.2.0",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.2.0": crate::admission::v0_2::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.2.0": crate::admission::v0_2::wasm_apiserver::plugin::log,
        },
    });
    handler_binding!("0.2.0", v0_2);
}

/// The frozen 0.3.0 handler world (it imports `cluster`).
mod v0_3 {
    wasmtime::component::bindgen!({
        world: "resource-handler-plugin",
        path: "../../wit/frozen/0.3.0",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::log,
            "wasm-apiserver:plugin/cluster@0.3.0": crate::admission::v0_3::wasm_apiserver::plugin::cluster,
        },
    });
    handler_binding!("0.3.0", v0_3);
}

/// The current 0.4.0 handler world.
mod v0_4 {
    wasmtime::component::bindgen!({
        world: "resource-handler-plugin",
        path: "../../wit",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::log,
            "wasm-apiserver:plugin/cluster@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::cluster,
        },
    });
    handler_binding!("0.4.0", v0_4);
}

/// A handler of any version (the world is new in 0.2.0).
enum Versions {
    V0_2(Loaded<v0_2::Pre>),
    V0_3(Loaded<v0_3::Pre>),
    V0_4(Loaded<v0_4::Pre>),
}

impl Versions {
    fn core(&self) -> &PluginCore {
        match self {
            Versions::V0_2(p) => &p.core,
            Versions::V0_3(p) => &p.core,
            Versions::V0_4(p) => &p.core,
        }
    }

    async fn check_config(&self) -> Result<(), PluginError> {
        match self {
            Versions::V0_2(p) => p.check_config().await,
            Versions::V0_3(p) => p.check_config().await,
            Versions::V0_4(p) => p.check_config().await,
        }
    }

    /// Gives a handler of a version whose world imports `cluster` its reads.
    fn set_cluster(&mut self, cluster: Option<Arc<crate::ClusterAccess>>) {
        match self {
            Versions::V0_3(p) => p.cluster = cluster,
            Versions::V0_4(p) => p.cluster = cluster,
            Versions::V0_2(_) => {}
        }
    }
}

/// `kind` label of handler metrics.
const KIND: &str = "handler";

/// An object being written, as a handler's `default` and `validate` see it.
#[derive(Clone, Debug)]
pub struct ObjectRequest {
    /// Identifies the call in logs.
    pub uid: String,
    /// The object's group, version (the request's) and kind.
    pub kind: Gvk,
    /// `Create` or `Update`.
    pub operation: Operation,
    /// The writer.
    pub user: UserInfo,
    /// The object to be stored, in the request's version.
    pub object: Value,
    /// The current object on an update.
    pub old_object: Option<Value>,
}

/// A loaded resource handler, ready to be called concurrently. Cheap to clone.
#[derive(Clone)]
pub struct ResourceHandlerPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    plugin: Versions,
    convert_metrics: Arc<OpMetrics>,
    default_metrics: Arc<OpMetrics>,
    validate_metrics: Arc<OpMetrics>,
}

impl std::fmt::Debug for ResourceHandlerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceHandlerPlugin")
            .field("name", &self.name())
            .field("sha256", &self.digest())
            .finish()
    }
}

impl Runtime {
    /// Loads a resource handler: compiles `wasm` (or takes it from the
    /// cache), checks that it targets the handler world and imports nothing
    /// the host lacks, and has it check `config` once.
    pub async fn load_resource_handler(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
    ) -> Result<ResourceHandlerPlugin, PluginError> {
        self.load_resource_handler_with_cluster(name, wasm, config, limits, None)
            .await
    }

    /// As [`Runtime::load_resource_handler`], with the cluster reads a
    /// handler of package 0.3.0 or later may make.
    pub async fn load_resource_handler_with_cluster(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
        cluster: Option<crate::ClusterAccess>,
    ) -> Result<ResourceHandlerPlugin, PluginError> {
        use crate::kind::WorldPre;
        let compiled = self.compile(name, wasm).await?;
        let mut plugin = if compiled.exports(v0_2::Pre::EXPORT) {
            Versions::V0_2(self.link_compiled(name, compiled, config, limits)?)
        } else if compiled.exports(v0_3::Pre::EXPORT) {
            Versions::V0_3(self.link_compiled(name, compiled, config, limits)?)
        } else {
            Versions::V0_4(self.link_compiled(name, compiled, config, limits)?)
        };
        plugin.set_cluster(cluster.map(Arc::new));
        let inner = Inner {
            convert_metrics: self.metrics().op(name, KIND, "convert"),
            default_metrics: self.metrics().op(name, KIND, "default"),
            validate_metrics: self.metrics().op(name, KIND, "validate"),
            plugin,
        };
        inner.plugin.check_config().await?;
        Ok(ResourceHandlerPlugin {
            inner: Arc::new(inner),
        })
    }
}

impl ResourceHandlerPlugin {
    /// The name the handler was loaded under.
    pub fn name(&self) -> &str {
        &self.inner.plugin.core().name
    }

    /// The SHA-256 of the handler's wasm bytes, in hex.
    pub fn digest(&self) -> &str {
        &self.inner.plugin.core().digest
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.plugin.core().limits
    }

    /// Converts `objects` to `desired_api_version` (`<group>/<version>`) in
    /// one call. The answer has as many objects, in order, each with
    /// `apiVersion` set to the desired one and its metadata unchanged but
    /// for labels and annotations. The output limit is the handler's
    /// `max_output_bytes` plus twice the input's size, since a conversion's
    /// answer grows with its input.
    pub async fn convert(
        &self,
        uid: &str,
        desired_api_version: &str,
        objects: &[impl Borrow<Value> + Sync],
    ) -> Result<Vec<Value>, PluginError> {
        let inner = &self.inner;
        inner.convert_metrics.call();
        let start = Instant::now();
        let result = self.convert_inner(uid, desired_api_version, objects).await;
        inner
            .plugin
            .core()
            .record(&inner.convert_metrics, start, &result, |_| false);
        result
    }

    async fn convert_inner(
        &self,
        uid: &str,
        desired: &str,
        objects: &[impl Borrow<Value> + Sync],
    ) -> Result<Vec<Value>, PluginError> {
        let core = self.inner.plugin.core();
        let texts: Vec<String> = objects.iter().map(|o| o.borrow().to_string()).collect();
        let input_size: usize = texts.iter().map(String::len).sum();
        let answer = match &self.inner.plugin {
            Versions::V0_2(p) => v0_2::convert(p, uid, desired, texts).await,
            Versions::V0_3(p) => v0_3::convert(p, uid, desired, texts).await,
            Versions::V0_4(p) => v0_4::convert(p, uid, desired, texts).await,
        }?
        .map_err(|message| refused(core, message))?;
        let size: usize = answer.iter().map(String::len).sum();
        check_size(core, size, core.limits.max_output_bytes + 2 * input_size)?;
        if answer.len() != objects.len() {
            return Err(invalid(
                core,
                format!(
                    "convert returned {} objects for {}",
                    answer.len(),
                    objects.len()
                ),
            ));
        }
        answer
            .iter()
            .zip(objects)
            .enumerate()
            .map(|(i, (text, original))| {
                let converted = parse_object(core, text, "convert", i)?;
                check_conversion(original.borrow(), &converted, desired)
                    .map_err(|m| invalid(core, format!("convert: object {i}: {m}")))?;
                Ok(converted)
            })
            .collect()
    }

    /// Defaults an object beyond its schema: the defaulted object, or
    /// `None` when the handler changes nothing. Metadata but labels and
    /// annotations must stay as they are.
    pub async fn default(&self, request: &ObjectRequest) -> Result<Option<Value>, PluginError> {
        let inner = &self.inner;
        inner.default_metrics.call();
        let start = Instant::now();
        let result = self.default_inner(request).await;
        inner
            .plugin
            .core()
            .record(&inner.default_metrics, start, &result, |_| false);
        result
    }

    async fn default_inner(&self, request: &ObjectRequest) -> Result<Option<Value>, PluginError> {
        let core = self.inner.plugin.core();
        let answer = match &self.inner.plugin {
            Versions::V0_2(p) => v0_2::default(p, request).await,
            Versions::V0_3(p) => v0_3::default(p, request).await,
            Versions::V0_4(p) => v0_4::default(p, request).await,
        }?
        .map_err(|message| refused(core, message))?;
        let Some(text) = answer else {
            return Ok(None);
        };
        check_size(core, text.len(), core.limits.max_output_bytes)?;
        let defaulted = parse_object(core, &text, "default", 0)?;
        let version = request.object["apiVersion"].as_str().unwrap_or_default();
        check_conversion(&request.object, &defaulted, version)
            .map_err(|m| invalid(core, format!("default: {m}")))?;
        Ok(Some(defaulted))
    }

    /// Validates an object beyond its schema: one cause per invalid field,
    /// empty when it is valid. A cause without a reason gets
    /// `FieldValueInvalid`.
    pub async fn validate(&self, request: &ObjectRequest) -> Result<Vec<FieldCause>, PluginError> {
        let inner = &self.inner;
        inner.validate_metrics.call();
        let start = Instant::now();
        let result = self.validate_inner(request).await;
        inner
            .plugin
            .core()
            .record(&inner.validate_metrics, start, &result, |c| !c.is_empty());
        result
    }

    async fn validate_inner(
        &self,
        request: &ObjectRequest,
    ) -> Result<Vec<FieldCause>, PluginError> {
        let core = self.inner.plugin.core();
        let causes = match &self.inner.plugin {
            Versions::V0_2(p) => v0_2::validate(p, request).await,
            Versions::V0_3(p) => v0_3::validate(p, request).await,
            Versions::V0_4(p) => v0_4::validate(p, request).await,
        }?;
        let size = causes
            .iter()
            .map(|c| c.field.len() + c.reason.len() + c.message.len())
            .sum();
        check_size(core, size, core.limits.max_output_bytes)?;
        Ok(causes
            .into_iter()
            .map(|c| FieldCause {
                reason: if c.reason.is_empty() {
                    "FieldValueInvalid".to_owned()
                } else {
                    c.reason
                },
                field: c.field,
                message: c.message,
            })
            .collect())
    }
}

fn refused(core: &PluginCore, message: String) -> PluginError {
    PluginError::Refused {
        plugin: core.name.to_string(),
        message: if message.is_empty() {
            "refused without a message".to_owned()
        } else {
            message
        },
    }
}

fn invalid(core: &PluginCore, message: String) -> PluginError {
    PluginError::InvalidOutput {
        plugin: core.name.to_string(),
        message,
    }
}

fn check_size(core: &PluginCore, size: usize, limit: usize) -> Result<(), PluginError> {
    if size > limit {
        return Err(PluginError::OutputTooLarge {
            plugin: core.name.to_string(),
            size,
            limit,
        });
    }
    Ok(())
}

fn parse_object(core: &PluginCore, text: &str, op: &str, i: usize) -> Result<Value, PluginError> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(invalid(
            core,
            format!("{op}: object {i} is not a JSON object"),
        )),
        Err(e) => Err(invalid(core, format!("{op}: object {i} is not JSON: {e}"))),
    }
}

/// What upstream requires of a conversion webhook's answer: the desired
/// `apiVersion`, the same kind, and metadata changed only in labels and
/// annotations.
fn check_conversion(original: &Value, converted: &Value, desired: &str) -> Result<(), String> {
    if converted["apiVersion"].as_str() != Some(desired) {
        return Err(format!(
            "apiVersion is {}, expected {desired:?}",
            converted["apiVersion"]
        ));
    }
    if converted["kind"] != original["kind"] {
        return Err(format!(
            "kind changed from {} to {}",
            original["kind"], converted["kind"]
        ));
    }
    // Compared in place (no copies: a list converts many objects).
    if fixed_metadata(original) != fixed_metadata(converted) {
        return Err("metadata changed beyond labels and annotations".to_owned());
    }
    Ok(())
}

/// The metadata fields a conversion must not change: all but labels and
/// annotations.
fn fixed_metadata(obj: &Value) -> Vec<(&String, &Value)> {
    obj["metadata"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| *k != "labels" && *k != "annotations")
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::check_conversion;
    use serde_json::json;

    #[test]
    fn conversion_answers_are_checked() {
        let original = json!({"apiVersion": "x.io/v1alpha1", "kind": "W",
            "metadata": {"name": "a", "labels": {"k": "v"}}, "spec": {"size": 1}});
        let good = json!({"apiVersion": "x.io/v1", "kind": "W",
            "metadata": {"name": "a", "annotations": {"x.io/lost": "1"}}, "spec": {"s": {"size": 1}}});
        assert_eq!(check_conversion(&original, &good, "x.io/v1"), Ok(()));
        assert!(
            check_conversion(&original, &good, "x.io/v2")
                .unwrap_err()
                .contains("apiVersion")
        );
        let renamed = json!({"apiVersion": "x.io/v1", "kind": "W", "metadata": {"name": "b"}});
        assert!(
            check_conversion(&original, &renamed, "x.io/v1")
                .unwrap_err()
                .contains("metadata")
        );
        let rekinded = json!({"apiVersion": "x.io/v1", "kind": "V", "metadata": {"name": "a"}});
        assert!(
            check_conversion(&original, &rekinded, "x.io/v1")
                .unwrap_err()
                .contains("kind")
        );
    }
}
