//! `SchedulerPlugin` objects (`scheduling.wasm-apiserver.io/v1alpha1`,
//! cluster-scoped): a wasm component of the `scheduler-plugin` world that
//! filters and scores nodes for the pods of one scheduler, beside its
//! built-in plugins, as a plugin of a KubeSchedulerConfiguration profile
//! would (loaded, replaced and removed at runtime).
//!
//! ```yaml
//! apiVersion: scheduling.wasm-apiserver.io/v1alpha1
//! kind: SchedulerPlugin
//! metadata: {name: node-label-score}
//! spec:
//!   module: {file: node_label_score.wasm}   # or {wasm: <base64>}, or {image: <OCI reference>}; sha256 optional
//!   schedulerName: default-scheduler        # whose cycles it joins (the default)
//!   weight: 1                               # its scores count weight times (1-100; default 1)
//!   failurePolicy: Fail                     # a failed call fails the pod's cycle; Ignore: skip the plugin
//!   limits: {timeoutMillis: 1000, memoryBytes: 67108864, maxClusterReads: 64, maxClusterReadBytes: 8388608}
//!   contextAwareResources: [{apiVersion: v1, kind: ConfigMap}]   # what it may read of the cluster
//!   config: {label: score, avoidLabel: avoid}   # any JSON; passed as a string
//! status:
//!   phase: Active                           # or Failed (with message; the previous version keeps running)
//!   observedGeneration: 1
//!   activeGeneration: 1                     # the generation running (after a failed load)
//!   digest: sha256:...
//!   extensionPoints: [Filter, Score]        # what the component implements
//!   calls: 12                               # filter and score calls so far (this leader)
//!   refusals: 3                             # calls that refused a node or the pod
//!   failures: 0                             # calls that failed (trap, timeout, memory, bad answer)
//!   lastError: ...
//! ```

use crate::admission::{ContextAwareResource, FailurePolicy, Module, ModuleFormat, PluginLimits};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const GROUP: &str = "scheduling.wasm-apiserver.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "SchedulerPlugin";
pub const PLURAL: &str = "schedulerplugins";

/// The highest `spec.weight` (upstream validates score plugin weights as
/// positive and bounds their sum; 100 keeps a wasm plugin's share within
/// reach of the built-in plugins').
pub const MAX_WEIGHT: i64 = 100;

/// `spec` of a `SchedulerPlugin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SchedulerPluginSpec {
    pub module: Module,
    #[serde(default = "default_scheduler")]
    pub scheduler_name: String,
    #[serde(default = "one")]
    pub weight: i64,
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    #[serde(default)]
    pub limits: PluginLimits,
    /// The kinds the plugin may read of the cluster (read-only).
    #[serde(default)]
    pub context_aware_resources: Vec<ContextAwareResource>,
    /// Opaque configuration; a string is passed as is, anything else as JSON.
    #[serde(default)]
    pub config: Value,
}

fn default_scheduler() -> String {
    crate::scheduler::DEFAULT_SCHEDULER.to_string()
}

fn one() -> i64 {
    1
}

impl SchedulerPluginSpec {
    /// Parses and checks `spec`; the error names the field.
    pub fn parse(spec: &Value) -> Result<Self, String> {
        let s: SchedulerPluginSpec =
            serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
        s.module.check()?;
        if s.module.format != ModuleFormat::Component {
            return Err("spec.module.format: scheduler plugins are components".into());
        }
        if !(1..=MAX_WEIGHT).contains(&s.weight) {
            return Err(format!(
                "spec.weight: Invalid value: {}: must be between 1 and {MAX_WEIGHT}",
                s.weight
            ));
        }
        if s.scheduler_name.is_empty() {
            return Err("spec.schedulerName: Required value".into());
        }
        for (i, g) in s.context_aware_resources.iter().enumerate() {
            if g.api_version.is_empty() || g.kind.is_empty() {
                return Err(format!(
                    "spec.contextAwareResources[{i}]: apiVersion and kind are required"
                ));
            }
        }
        Ok(s)
    }

    /// The configuration string handed to the plugin.
    pub fn config_string(&self) -> String {
        crate::admission::config_string(&self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_checks() {
        let s = SchedulerPluginSpec::parse(&json!({"module": {"file": "a.wasm"}})).unwrap();
        assert_eq!(s.scheduler_name, "default-scheduler");
        assert_eq!(s.weight, 1);
        assert_eq!(s.failure_policy, FailurePolicy::Fail);
        assert_eq!(s.config_string(), "");
        for (spec, field) in [
            (
                json!({"module": {"file": "a.wasm"}, "weight": 0}),
                "spec.weight",
            ),
            (
                json!({"module": {"file": "a.wasm"}, "weight": 101}),
                "spec.weight",
            ),
            (json!({"module": {"file": "../a.wasm"}}), "spec.module"),
            (
                json!({"module": {"file": "a.wasm", "format": "kubewarden"}}),
                "spec.module.format",
            ),
            (
                json!({"module": {"file": "a.wasm"}, "schedulerName": ""}),
                "spec.schedulerName",
            ),
            (json!({"module": {"file": "a.wasm"}, "bogus": 1}), "spec"),
            (
                json!({"module": {"file": "a.wasm"}, "failurePolicy": "Sometimes"}),
                "spec",
            ),
        ] {
            let e = SchedulerPluginSpec::parse(&spec).unwrap_err();
            assert!(e.starts_with(field), "{spec}: {e}");
        }
        let s = SchedulerPluginSpec::parse(&json!({
            "module": {"file": "a.wasm"},
            "weight": 5,
            "schedulerName": "edge",
            "failurePolicy": "Ignore",
            "config": {"label": "x"},
        }))
        .unwrap();
        assert_eq!(
            (s.weight, s.scheduler_name.as_str(), s.failure_policy),
            (5, "edge", FailurePolicy::Ignore)
        );
        assert_eq!(s.config_string(), r#"{"label":"x"}"#);
    }
}
