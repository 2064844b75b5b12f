//! The `AdmissionPlugin` API object (`admission.wasm-apiserver.io/v1alpha1`)
//! and webhook-style match rules, without IO.
//!
//! ```yaml
//! apiVersion: admission.wasm-apiserver.io/v1alpha1
//! kind: AdmissionPlugin
//! metadata: {name: require-team}
//! spec:
//!   module: {file: require_labels.wasm}   # or {wasm: <base64>}, or {image: <OCI reference>}; sha256 optional;
//!                                         # format: component (default) or kubewarden;
//!                                         # pullSecret: {namespace, name} of a dockerconfigjson Secret (image only)
//!   phases: [Validating]                  # Mutating and/or Validating
//!   order: 0                              # run order within a phase (then name)
//!   rules: [{operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: ["*"], resources: [configmaps]}]
//!   namespaceSelector: {matchLabels: {policy: strict}}
//!   objectSelector: {matchExpressions: [{key: skip, operator: DoesNotExist}]}
//!   failurePolicy: Fail                   # or Ignore
//!   mode: Deny                            # or Warn, Audit
//!   limits: {timeoutMillis: 1000, memoryBytes: 67108864, maxOutputBytes: 1048576, maxConcurrency: 16,
//!            maxClusterReads: 64, maxClusterReadBytes: 8388608}
//!   contextAwareResources: [{apiVersion: v1, kind: Service}]  # what it may read
//!                                         # (Kubewarden policies' host calls)
//!   config: {labels: [team]}              # any JSON; passed to the plugin as a string
//!   backgroundAudit: true                 # check stored objects too (reports); default true
//!   shadow: {module: {file: v2.wasm}, config: {...}}  # a version on trial: sees every
//!                                         # request, never enforced, disagreements counted
//! ```
//!
//! Severity and category of its report results come from the object's
//! annotations `io.kubewarden.policy.severity` and
//! `io.kubewarden.policy.category` (Kubewarden's), or a Kubewarden
//! module's own metadata annotations.

use crate::selector::{LabelSelector, Requirement};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

pub const GROUP: &str = "admission.wasm-apiserver.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "AdmissionPlugin";
pub const PLURAL: &str = "admissionplugins";

/// What kind of wasm module a plugin is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModuleFormat {
    /// A component targeting our `admission-plugin` world.
    #[default]
    Component,
    /// A Kubewarden policy: a core module (`wasm32-wasip1`) speaking waPC;
    /// `spec.config` is its settings (a JSON object).
    Kubewarden,
}

/// Where the component comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Module {
    /// The component, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<String>,
    /// A file name in the server's plugin directory (`--plugin-dir`); no
    /// paths, so an object can only name modules the operator installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// An OCI image reference (`registry/repository:tag` or `@sha256:...`)
    /// whose wasm layer is the module, as Kubewarden and wasm-to-oci
    /// publish policies; pulled over HTTPS (plain HTTP for the server's
    /// `--insecure-plugin-registries`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret whose credentials pull
    /// `image` (read by the server with its own identity when the module
    /// is loaded; they win over `--plugin-registry-config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<PullSecret>,
    /// Expected sha256 (hex) of the component; checked when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `component` (the default) or `kubewarden`.
    #[serde(default, deserialize_with = "module_format")]
    pub format: ModuleFormat,
}

/// `spec.module.pullSecret`: the Secret holding registry credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PullSecret {
    pub namespace: String,
    pub name: String,
}

/// Parses `spec.module.format`, naming the accepted values.
fn module_format<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ModuleFormat, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    match s.as_deref() {
        None | Some("component") => Ok(ModuleFormat::Component),
        Some("kubewarden") => Ok(ModuleFormat::Kubewarden),
        Some(other) => Err(serde::de::Error::custom(format!(
            "spec.module.format: unsupported value {other:?}: must be \"component\" or \"kubewarden\""
        ))),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Mutating,
    Validating,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailurePolicy {
    #[default]
    Fail,
    Ignore,
}

/// What a denial does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Reject the request.
    #[default]
    Deny,
    /// Let it through with a `Warning` header.
    Warn,
    /// Let it through; record the denial in logs, metrics and audit annotations.
    Audit,
}

/// Upstream's `RuleWithOperations`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    #[serde(default)]
    pub operations: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub api_versions: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// `metav1.LabelSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<SelectorExpression>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectorExpression {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

impl Selector {
    /// Converts to a [`LabelSelector`]; unknown operators are an error.
    pub fn to_label_selector(&self) -> Result<LabelSelector, String> {
        let mut reqs: Vec<Requirement> = self
            .match_labels
            .iter()
            .map(|(k, v)| Requirement::Equals(k.clone(), v.clone()))
            .collect();
        for e in &self.match_expressions {
            reqs.push(match e.operator.as_str() {
                "In" => Requirement::In(e.key.clone(), e.values.clone()),
                "NotIn" => Requirement::NotIn(e.key.clone(), e.values.clone()),
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
                other => return Err(format!("unsupported selector operator {other:?}")),
            });
        }
        Ok(LabelSelector(reqs))
    }
}

/// Per-plugin limits; unset fields take the server's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginLimits {
    pub timeout_millis: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub max_output_bytes: Option<usize>,
    pub max_concurrency: Option<usize>,
    /// Most cluster reads in one evaluation (default 64).
    pub max_cluster_reads: Option<u32>,
    /// Most bytes of objects the cluster reads of one evaluation return
    /// (default 8 MiB).
    pub max_cluster_read_bytes: Option<usize>,
}

/// Default of [`PluginLimits::max_cluster_reads`].
pub const DEFAULT_CLUSTER_READS: u32 = 64;
/// Default of [`PluginLimits::max_cluster_read_bytes`].
pub const DEFAULT_CLUSTER_READ_BYTES: usize = 8 << 20;

/// One `spec.contextAwareResources` entry: a kind the plugin may read
/// (Kubewarden's field and meaning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextAwareResource {
    pub api_version: String,
    pub kind: String,
}

/// `spec` of an `AdmissionPlugin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSpec {
    pub module: Module,
    pub phases: Vec<Phase>,
    #[serde(default)]
    pub order: i32,
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub namespace_selector: Option<Selector>,
    #[serde(default)]
    pub object_selector: Option<Selector>,
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub limits: PluginLimits,
    /// The kinds the plugin may read of the cluster (read-only).
    #[serde(default)]
    pub context_aware_resources: Vec<ContextAwareResource>,
    /// Opaque configuration; a string is passed as is, anything else as JSON.
    #[serde(default)]
    pub config: Value,
    /// Whether the background audit checks stored objects against the
    /// plugin (Kubewarden's metadata field). Unset: yes for components,
    /// what a Kubewarden module's metadata says (default yes).
    #[serde(default)]
    pub background_audit: Option<bool>,
    /// A second version of the plugin that sees every request this one
    /// sees, off the request path, and whose decision is never enforced.
    #[serde(default)]
    pub shadow: Option<ShadowSpec>,
}

/// `spec.shadow` of an `AdmissionPlugin`: the module and configuration of a
/// version on trial (same format, rules and limits as the plugin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShadowSpec {
    pub module: Module,
    /// Its configuration; unset means the plugin's own `spec.config`.
    #[serde(default)]
    pub config: Option<Value>,
}

impl PluginSpec {
    /// Parses and checks `spec`; the error lists what is wrong.
    pub fn parse(spec: &Value) -> Result<Self, String> {
        let s: PluginSpec =
            serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
        s.module.check()?;
        if let Some(shadow) = &s.shadow {
            shadow
                .module
                .check()
                .map_err(|e| e.replacen("spec.module", "spec.shadow.module", 1))?;
            if shadow.module.format != s.module.format {
                return Err("spec.shadow.module.format: must be the format of spec.module".into());
            }
        }
        if s.phases.is_empty() {
            return Err("spec.phases: at least one of Mutating, Validating is required".into());
        }
        for sel in [&s.namespace_selector, &s.object_selector]
            .into_iter()
            .flatten()
        {
            sel.to_label_selector()?;
        }
        Ok(s)
    }

    /// The configuration string handed to the plugin.
    pub fn config_string(&self) -> String {
        config_string(&self.config)
    }
}

/// A plugin's `spec.config` as the string handed to it: a string as is,
/// anything else as JSON, nothing as the empty string.
pub fn config_string(config: &Value) -> String {
    match config {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A module file name: no directories, no hidden files.
pub fn valid_file_name(f: &str) -> bool {
    f.ends_with(".wasm")
        && !f.starts_with('.')
        && f.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The attributes of a request that rules match on.
#[derive(Debug, Clone, Copy)]
pub struct RequestAttributes<'a> {
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub namespaced: bool,
}

fn any_or(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    /// Upstream rule matching, including `*/status`-style resources.
    pub fn matches(&self, a: &RequestAttributes<'_>) -> bool {
        let resource_ok = self.resources.iter().any(|r| {
            let (res, sub) = r
                .split_once('/')
                .map_or((r.as_str(), None), |(x, y)| (x, Some(y)));
            let res_ok = res == "*" || res == a.resource;
            let sub_ok = match (sub, a.subresource) {
                (None, None) => true,
                (None, Some(_)) => false,
                (Some("*"), _) => true,
                (Some(s), Some(want)) => s == want,
                (Some(_), None) => false,
            };
            res_ok && sub_ok
        });
        let scope_ok = match self.scope.as_deref() {
            None | Some("*") => true,
            Some("Cluster") => !a.namespaced,
            Some("Namespaced") => a.namespaced,
            Some(_) => false,
        };
        any_or(&self.operations, a.operation)
            && any_or(&self.api_groups, a.group)
            && any_or(&self.api_versions, a.version)
            && resource_ok
            && scope_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs<'a>(op: &'a str, resource: &'a str, sub: Option<&'a str>) -> RequestAttributes<'a> {
        RequestAttributes {
            operation: op,
            group: "",
            version: "v1",
            resource,
            subresource: sub,
            namespaced: true,
        }
    }

    #[test]
    fn rules_match_like_webhooks() {
        let r = Rule {
            operations: vec!["CREATE".into(), "UPDATE".into()],
            api_groups: vec!["".into()],
            api_versions: vec!["*".into()],
            resources: vec!["configmaps".into(), "*/status".into()],
            scope: Some("Namespaced".into()),
        };
        assert!(r.matches(&attrs("CREATE", "configmaps", None)));
        assert!(!r.matches(&attrs("DELETE", "configmaps", None)));
        assert!(!r.matches(&attrs("CREATE", "secrets", None)));
        assert!(!r.matches(&attrs("UPDATE", "configmaps", Some("scale"))));
        assert!(r.matches(&attrs("UPDATE", "namespaces", Some("status"))));
        assert!(!r.matches(&RequestAttributes {
            namespaced: false,
            ..attrs("CREATE", "configmaps", None)
        }));
        let all = Rule {
            operations: vec!["*".into()],
            api_groups: vec!["*".into()],
            api_versions: vec!["*".into()],
            resources: vec!["*/*".into()],
            scope: None,
        };
        assert!(all.matches(&attrs("DELETE", "x", Some("y"))));
        assert!(all.matches(&attrs("DELETE", "x", None)));
    }

    #[test]
    fn spec_parsing() {
        let s = PluginSpec::parse(&json!({
            "module": {"file": "require_labels.wasm"},
            "phases": ["Validating"],
            "config": {"labels": ["team"]},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}
        }))
        .unwrap();
        assert_eq!(
            (s.mode, s.failure_policy),
            (Mode::Deny, FailurePolicy::Fail)
        );
        assert_eq!(s.config_string(), r#"{"labels":["team"]}"#);
        let sel = s.object_selector.unwrap().to_label_selector().unwrap();
        assert!(sel.matches(&BTreeMap::new()));
        for bad in [
            json!({"module": {"file": "../etc/passwd.wasm"}, "phases": ["Validating"]}),
            json!({"module": {"file": "a.wasm", "wasm": "AA=="}, "phases": ["Validating"]}),
            json!({"module": {"file": "a.wasm"}, "phases": []}),
            json!({"module": {"file": "a.wasm"}, "phases": ["Sometimes"]}),
            json!({"module": {"file": "a.wasm"}, "phases": ["Mutating"], "objectSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
            json!({"module": {"file": "a.wasm", "format": "opa"}, "phases": ["Validating"]}),
        ] {
            assert!(PluginSpec::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn module_format_defaults_to_component() {
        let parse = |module: Value| {
            PluginSpec::parse(&json!({"module": module, "phases": ["Validating"]}))
                .map(|s| s.module.format)
        };
        assert_eq!(
            parse(json!({"file": "a.wasm"})),
            Ok(ModuleFormat::Component)
        );
        assert_eq!(
            parse(json!({"file": "a.wasm", "format": "component"})),
            Ok(ModuleFormat::Component)
        );
        assert_eq!(
            parse(json!({"file": "a.wasm", "format": "kubewarden"})),
            Ok(ModuleFormat::Kubewarden)
        );
        let e = parse(json!({"file": "a.wasm", "format": "wasi"})).unwrap_err();
        assert!(
            e.contains(r#"spec.module.format: unsupported value "wasi": must be "component" or "kubewarden""#),
            "{e}"
        );
    }
}
