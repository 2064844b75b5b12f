//! `Controller` objects (`controllers.wasm-apiserver.io/v1alpha1`,
//! cluster-scoped): a wasm component of the `controller-plugin` world that
//! reconciles objects of one kind when they, the objects they own, or
//! objects they watch change, with the identity of a ServiceAccount.
//!
//! ```yaml
//! apiVersion: controllers.wasm-apiserver.io/v1alpha1
//! kind: Controller
//! metadata: {name: namespace-defaults}
//! spec:
//!   module: {file: namespace_defaults.wasm}      # or {wasm: <base64>}; sha256 optional
//!   for: {apiVersion: v1, kind: Namespace}       # the primary kind (the keys)
//!   owns:                                        # a child's event queues its controlling owner
//!   - {apiVersion: networking.k8s.io/v1, kind: NetworkPolicy}
//!   watches:                                     # other kinds, mapped to keys
//!   - {apiVersion: v1, kind: Secret, labelSelector: {matchLabels: {copy: "true"}}, map: All}
//!   serviceAccountName: kube-system/namespace-defaults   # the identity of reads and writes
//!   workers: 2                                   # reconciles at once (never two of one key)
//!   resyncSeconds: 36000                         # every object again (controller-runtime's 10 h)
//!   limits: {timeoutMillis: 10000, memoryBytes: 67108864, maxClusterReads: 256,
//!            maxClusterReadBytes: 8388608, maxWrites: 64}
//!   config: {label: tenant}                      # any JSON; passed as a string
//! status:
//!   phase: Active                                # or Failed (with message)
//!   observedGeneration: 1
//!   digest: sha256:...
//!   queueDepth: 0
//!   reconciles: 12
//!   failures: 0
//!   lastError: ...
//! ```

use crate::admission::{Module, ModuleFormat, Selector};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const GROUP: &str = "controllers.wasm-apiserver.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "Controller";
pub const PLURAL: &str = "controllers";

/// Default reconcile time limit: writes run through admission, so a
/// reconcile takes longer than an admission call.
pub const DEFAULT_TIMEOUT_MILLIS: u64 = 10_000;
/// Default most cluster reads in one reconcile.
pub const DEFAULT_READS: u32 = 256;
/// Default most writes (events included) in one reconcile.
pub const DEFAULT_WRITES: u32 = 64;
/// controller-runtime's default `SyncPeriod`.
pub const DEFAULT_RESYNC_SECONDS: u64 = 36_000;
/// Most workers a controller may ask for.
pub const MAX_WORKERS: u32 = 16;

/// A kind, as objects spell it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KindRef {
    pub api_version: String,
    pub kind: String,
}

impl KindRef {
    /// `(group, version)` of `apiVersion`.
    pub fn group_version(&self) -> (&str, &str) {
        self.api_version
            .rsplit_once('/')
            .unwrap_or(("", &self.api_version))
    }
}

/// Which keys a watched object's event queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mapping {
    /// The primary object of the same namespace and name.
    #[default]
    SameName,
    /// The primary object named as the watched object's namespace (for
    /// controllers of `Namespace`s).
    Namespace,
    /// Every primary object.
    All,
}

/// One `spec.watches` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Watch {
    pub api_version: String,
    pub kind: String,
    /// Only objects with these labels are watched.
    #[serde(default)]
    pub label_selector: Option<Selector>,
    #[serde(default)]
    pub map: Mapping,
}

impl Watch {
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
        }
    }
}

/// `spec.limits` of a `Controller`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerLimits {
    /// Wall time of one reconcile, its reads and writes included.
    pub timeout_millis: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// Most cluster reads in one reconcile.
    pub max_cluster_reads: Option<u32>,
    /// Most bytes of objects the reads of one reconcile return.
    pub max_cluster_read_bytes: Option<usize>,
    /// Most writes (events included) in one reconcile.
    pub max_writes: Option<u32>,
}

/// `spec` of a `Controller`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerSpec {
    pub module: Module,
    #[serde(rename = "for")]
    pub for_kind: KindRef,
    #[serde(default)]
    pub owns: Vec<KindRef>,
    #[serde(default)]
    pub watches: Vec<Watch>,
    /// `<namespace>/<name>` of the ServiceAccount whose identity the
    /// controller's reads and writes use.
    pub service_account_name: String,
    #[serde(default = "one")]
    pub workers: u32,
    #[serde(default)]
    pub resync_seconds: Option<u64>,
    #[serde(default)]
    pub limits: ControllerLimits,
    /// Opaque configuration; a string is passed as is, anything else as JSON.
    #[serde(default)]
    pub config: Value,
}

fn one() -> u32 {
    1
}

/// A DNS-1123 label, as namespace and ServiceAccount names are.
fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

impl ControllerSpec {
    /// Parses and checks `spec`; the error names the field.
    pub fn parse(spec: &Value) -> Result<Self, String> {
        let s: ControllerSpec =
            serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
        s.module.check()?;
        if s.module.format != ModuleFormat::Component {
            return Err("spec.module.format: controllers are components".into());
        }
        s.service_account()?;
        if s.workers == 0 || s.workers > MAX_WORKERS {
            return Err(format!(
                "spec.workers: Invalid value: {}: must be between 1 and {MAX_WORKERS}",
                s.workers
            ));
        }
        let kinds = std::iter::once(("spec.for".to_string(), &s.for_kind))
            .chain(
                s.owns
                    .iter()
                    .enumerate()
                    .map(|(i, k)| (format!("spec.owns[{i}]"), k)),
            )
            .collect::<Vec<_>>();
        for (field, k) in kinds {
            if k.api_version.is_empty() || k.kind.is_empty() {
                return Err(format!("{field}: apiVersion and kind are required"));
            }
        }
        for (i, w) in s.watches.iter().enumerate() {
            if w.api_version.is_empty() || w.kind.is_empty() {
                return Err(format!(
                    "spec.watches[{i}]: apiVersion and kind are required"
                ));
            }
            if let Some(sel) = &w.label_selector {
                sel.to_label_selector()
                    .map_err(|e| format!("spec.watches[{i}].labelSelector: {e}"))?;
            }
        }
        Ok(s)
    }

    /// `(namespace, name)` of `serviceAccountName`.
    pub fn service_account(&self) -> Result<(&str, &str), String> {
        match self.service_account_name.split_once('/') {
            Some((ns, name)) if dns_label(ns) && dns_label(name) => Ok((ns, name)),
            _ => Err(format!(
                "spec.serviceAccountName: Invalid value: {:?}: must be <namespace>/<name>",
                self.service_account_name
            )),
        }
    }

    /// The configuration string handed to the controller.
    pub fn config_string(&self) -> String {
        crate::admission::config_string(&self.config)
    }

    /// Seconds between resyncs; 0 turns resync off.
    pub fn resync_seconds(&self) -> u64 {
        self.resync_seconds.unwrap_or(DEFAULT_RESYNC_SECONDS)
    }

    /// Whether two specs differ only in what a running controller can take
    /// without restarting its watches (module, configuration, limits).
    pub fn same_watches(&self, other: &ControllerSpec) -> bool {
        self.for_kind == other.for_kind
            && self.owns == other.owns
            && self.watches == other.watches
            && self.workers == other.workers
            && self.resync_seconds == other.resync_seconds
            && self.service_account_name == other.service_account_name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: Value) -> Result<ControllerSpec, String> {
        let mut s = json!({"module": {"file": "c.wasm"},
            "for": {"apiVersion": "v1", "kind": "Namespace"},
            "serviceAccountName": "kube-system/c"});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        ControllerSpec::parse(&s)
    }

    #[test]
    fn specs_are_checked() {
        let s = spec(json!({})).unwrap();
        assert_eq!(s.workers, 1);
        assert_eq!(s.service_account().unwrap(), ("kube-system", "c"));
        assert_eq!(s.resync_seconds(), DEFAULT_RESYNC_SECONDS);
        assert!(
            spec(json!({"serviceAccountName": "c"}))
                .unwrap_err()
                .contains("spec.serviceAccountName")
        );
        assert!(
            spec(json!({"workers": 0}))
                .unwrap_err()
                .contains("spec.workers")
        );
        assert!(
            spec(json!({"owns": [{"apiVersion": "v1", "kind": ""}]}))
                .unwrap_err()
                .contains("spec.owns[0]")
        );
        assert!(
            spec(json!({"watches": [{"apiVersion": "v1", "kind": "Secret", "map": "Nope"}]}))
                .unwrap_err()
                .contains("unknown variant")
        );
        assert!(
            spec(json!({"module": {"file": "c.wasm", "format": "kubewarden"}}))
                .unwrap_err()
                .contains("components")
        );
        let w = spec(
            json!({"watches": [{"apiVersion": "v1", "kind": "Secret", "map": "All",
            "labelSelector": {"matchLabels": {"copy": "true"}}}]}),
        )
        .unwrap();
        assert_eq!(w.watches[0].map, Mapping::All);
        assert!(!w.same_watches(&s));
        let mut swapped = s.clone();
        swapped.module.file = Some("d.wasm".into());
        assert!(swapped.same_watches(&s));
    }
}
