//! The admission chain in the request path: wasm admission plugins and
//! webhooks, matched and run in order (the controller that loads them at
//! runtime is the sibling `controller` module).
//!
//! * Mutating plugins run first, in `(order, name)` order, each seeing the
//!   previous one's patch applied; then validating plugins run on the final
//!   object. Rules, `namespaceSelector` and `objectSelector` match as for
//!   webhooks. A denial rejects the request (`mode: Deny`), becomes a
//!   `Warning` header (`Warn`) or only an audit annotation and log line
//!   (`Audit`). A plugin failure (trap, timeout, memory, bad output) rejects
//!   the request with 500 under `failurePolicy: Fail` and is skipped under
//!   `Ignore`; either way the server keeps serving.
//! * The active set is an immutable snapshot behind a lock held only to
//!   clone an `Arc`: a request sees one consistent chain, and loading,
//!   replacing or removing a plugin is an atomic swap.
//! * Plugins come from `--admission-control-config-file` (static, loaded at
//!   start, cannot be replaced through the API: they can protect the
//!   `AdmissionPlugin` objects themselves) and from `AdmissionPlugin` objects,
//!   which every replica follows through a storage watch. A module that fails
//!   to load is reported in the object's status and the previous version
//!   keeps serving.

use crate::codec::decode;
use crate::options::WriteOptions;
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use wasm_apiserver_api::admission::{
    FailurePolicy, Mode, Module, ModuleFormat, Phase, PluginSpec, RequestAttributes, Rule, Selector,
};
use wasm_apiserver_api::selector::LabelSelector;
use wasm_apiserver_api::{ApiError, Cause, ResourceInfo, meta, patch};
use wasm_apiserver_plugins::{
    AdmissionPlugin, AdmissionRequest, AdmissionResponse, Encoded, FieldCause, Gvk, Gvr, Limits,
    Operation, Runtime,
};
use wasm_apiserver_storage::Storage;

/// What answers an admission call.
pub enum Backend {
    /// A wasm component run in the sandbox.
    Wasm(AdmissionPlugin),
    /// An HTTPS admission webhook.
    Webhook(Arc<crate::webhook::Webhook>),
}

/// One entry of the chain: a plugin or webhook with its match rules.
pub struct Active {
    pub name: String,
    pub phases: Vec<Phase>,
    pub order: i32,
    pub rules: Vec<Rule>,
    pub failure_policy: FailurePolicy,
    pub mode: Mode,
    /// `metadata.generation` of the object it came from (0: static or webhook).
    pub generation: i64,
    /// `metadata.uid` of that object (empty: static or webhook).
    pub uid: String,
    pub backend: Backend,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
    /// Whether the background audit runs it on stored objects.
    pub background_audit: bool,
    /// Severity and category of its report results.
    pub severity: Option<String>,
    pub category: Option<String>,
    /// The version on trial (`spec.shadow`).
    pub shadow: Option<super::shadow::Shadow>,
}

impl Active {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        phases: Vec<Phase>,
        order: i32,
        rules: Vec<Rule>,
        namespace_selector: Option<Selector>,
        object_selector: Option<Selector>,
        failure_policy: FailurePolicy,
        mode: Mode,
        generation: i64,
        backend: Backend,
    ) -> Result<Self, String> {
        let sel = |s: Option<Selector>| s.map(|s| s.to_label_selector()).transpose();
        Ok(Active {
            name,
            phases,
            order,
            rules,
            failure_policy,
            mode,
            generation,
            uid: String::new(),
            backend,
            namespace_selector: sel(namespace_selector)?,
            object_selector: sel(object_selector)?,
            background_audit: true,
            severity: None,
            category: None,
            shadow: None,
        })
    }

    /// Takes severity and category from `io.kubewarden.policy.severity`
    /// and `io.kubewarden.policy.category` annotations, when present.
    pub fn set_report_annotations(&mut self, annotations: &BTreeMap<String, String>) {
        if let Some(s) = annotations
            .get("io.kubewarden.policy.severity")
            .and_then(|s| wasm_apiserver_api::report::severity(s))
        {
            self.severity = Some(s);
        }
        if let Some(c) = annotations.get("io.kubewarden.policy.category") {
            self.category = Some(c.clone());
        }
    }

    pub(crate) fn digest(&self) -> String {
        match &self.backend {
            Backend::Wasm(p) => p.digest().to_string(),
            Backend::Webhook(_) => String::new(),
        }
    }

    /// Calls the plugin or webhook's mutating phase.
    async fn mutate(
        &self,
        req: &AdmissionRequest,
    ) -> Result<AdmissionResponse, (&'static str, String)> {
        match &self.backend {
            Backend::Wasm(p) => p.mutate(req).await.map_err(|e| (e.kind(), e.to_string())),
            Backend::Webhook(w) => w.call(req).await.map_err(|e| (e.kind(), e.to_string())),
        }
    }

    /// Calls the plugin or webhook's validating phase with a request
    /// encoded once for every validating plugin.
    async fn validate(
        &self,
        req: &Encoded<'_>,
    ) -> Result<AdmissionResponse, (&'static str, String)> {
        match &self.backend {
            Backend::Wasm(p) => p
                .validate_encoded(req)
                .await
                .map_err(|e| (e.kind(), e.to_string())),
            Backend::Webhook(w) => w
                .call(req.request())
                .await
                .map_err(|e| (e.kind(), e.to_string())),
        }
    }
}

#[derive(Default, Clone)]
pub(crate) struct Chain {
    statics: Vec<Arc<Active>>,
    pub(crate) dynamic: BTreeMap<String, Arc<Active>>,
    /// Webhooks by configuration (`validating/<name>`, `mutating/<name>`).
    webhooks: BTreeMap<String, Vec<Arc<Active>>>,
    /// The uid of the last deleted object of each name: its events that
    /// arrive after the deletion (a lagging watch's) load nothing.
    removed: BTreeMap<String, String>,
}

impl Chain {
    fn phase(&self, phase: Phase) -> Vec<Arc<Active>> {
        let mut out: Vec<Arc<Active>> = self
            .statics
            .iter()
            .chain(self.dynamic.values())
            .chain(self.webhooks.values().flatten())
            .filter(|a| a.phases.contains(&phase))
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.order, &a.name).cmp(&(b.order, &b.name)));
        out
    }
}

/// What an admission pass is about.
pub struct Attributes<'a> {
    pub info: &'a ResourceInfo,
    pub operation: Operation,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

impl Attributes<'_> {
    pub(crate) fn op_str(&self) -> &'static str {
        match self.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// The admission chain and the loader of its plugins.
pub struct Admission {
    runtime: Runtime,
    plugin_dir: Option<PathBuf>,
    chain: RwLock<Arc<Chain>>,
    storage: Arc<dyn Storage>,
    /// The active ValidatingAdmissionPolicies and bindings.
    pub policies: super::policy::Policies,
    /// The reads plugins granted `contextAwareResources` make (set once by
    /// the assembly).
    cluster: std::sync::OnceLock<Arc<dyn wasm_apiserver_plugins::Cluster>>,
    /// Trust and credentials of the registries `spec.module.image` is
    /// pulled from (`--plugin-registry-*`, `--insecure-plugin-registries`).
    registries: RwLock<Arc<crate::oci::Registries>>,
    /// Shadow counts by plugin name.
    shadow_stats: std::sync::Mutex<BTreeMap<String, Arc<super::shadow::Stats>>>,
    /// Upstream's admission latency families (shared with the store).
    pub metrics: Arc<super::metrics::AdmissionMetrics>,
}

/// A plugin's field causes as API causes (`FieldValueInvalid` when it gave no reason).
pub fn causes(causes: &[FieldCause]) -> Vec<Cause> {
    causes
        .iter()
        .map(|c| Cause {
            reason: if c.reason.is_empty() {
                "FieldValueInvalid".into()
            } else {
                c.reason.clone()
            },
            field: c.field.clone(),
            message: c.message.clone(),
        })
        .collect()
}

/// Runtime limits from a plugin's `spec.limits`; unset fields take the
/// runtime's defaults. Shared by admission and access plugins.
pub fn limits(l: &wasm_apiserver_api::admission::PluginLimits) -> Limits {
    let d = Limits::default();
    Limits {
        timeout: l
            .timeout_millis
            .map(Duration::from_millis)
            .unwrap_or(d.timeout),
        max_memory_bytes: l.memory_bytes.unwrap_or(d.max_memory_bytes),
        max_output_bytes: l.max_output_bytes.unwrap_or(d.max_output_bytes),
        max_concurrency: l.max_concurrency.unwrap_or(d.max_concurrency).max(1),
        ..d
    }
}

impl Admission {
    pub fn new(runtime: Runtime, plugin_dir: Option<PathBuf>, storage: Arc<dyn Storage>) -> Self {
        Admission {
            runtime,
            plugin_dir,
            chain: RwLock::new(Arc::new(Chain::default())),
            storage,
            policies: Default::default(),
            shadow_stats: Default::default(),
            cluster: Default::default(),
            registries: Default::default(),
            metrics: Default::default(),
        }
    }

    /// The registries' trust and credentials for `spec.module.image`.
    pub fn set_registries(&self, registries: crate::oci::Registries) {
        if let Ok(mut r) = self.registries.write() {
            *r = Arc::new(registries);
        }
    }

    /// The credentials of `spec.module.pullSecret`, read from storage with
    /// the server's own identity; the error names the Secret, never its
    /// content.
    async fn pull_secret(
        &self,
        p: &wasm_apiserver_api::admission::PullSecret,
    ) -> Result<crate::oci::DockerConfig, String> {
        let what = format!("spec.module.pullSecret {}/{}", p.namespace, p.name);
        let kv = self
            .storage
            .get(&format!(
                "/registry/core/secrets/{}/{}",
                p.namespace, p.name
            ))
            .await
            .map_err(|e| format!("{what}: reading it: {e}"))?
            .ok_or_else(|| format!("{what}: not found"))?;
        let secret: serde_json::Value = serde_json::from_slice(&kv.value)
            .map_err(|_| format!("{what}: not a readable Secret"))?;
        let kind = secret["type"].as_str().unwrap_or("Opaque");
        if kind != "kubernetes.io/dockerconfigjson" {
            return Err(format!(
                "{what}: type is {kind:?}, not \"kubernetes.io/dockerconfigjson\""
            ));
        }
        let data = secret["data"][".dockerconfigjson"]
            .as_str()
            .ok_or_else(|| format!("{what}: no .dockerconfigjson key"))?;
        let json = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|_| format!("{what}: .dockerconfigjson is not base64"))?;
        crate::oci::DockerConfig::parse(&json).map_err(|e| format!("{what}: {e}"))
    }

    /// What plugins read the cluster through.
    pub fn set_cluster(&self, cluster: Arc<dyn wasm_apiserver_plugins::Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// A plugin's cluster access: its grants and read budget.
    fn cluster_access(&self, spec: &PluginSpec) -> Option<wasm_apiserver_plugins::ClusterAccess> {
        self.cluster_access_for(&spec.context_aware_resources, &spec.limits)
    }

    /// The cluster access of a plugin (or resource handler) granted
    /// `grants`, within `limits`.
    pub fn cluster_access_for(
        &self,
        grants: &[wasm_apiserver_api::admission::ContextAwareResource],
        limits: &wasm_apiserver_api::admission::PluginLimits,
    ) -> Option<wasm_apiserver_plugins::ClusterAccess> {
        use wasm_apiserver_api::admission::{DEFAULT_CLUSTER_READ_BYTES, DEFAULT_CLUSTER_READS};
        let reads = self.cluster.get()?.clone();
        Some(wasm_apiserver_plugins::ClusterAccess {
            reads,
            grants: grants
                .iter()
                .map(|g| wasm_apiserver_plugins::Grant {
                    api_version: g.api_version.clone(),
                    kind: g.kind.clone(),
                })
                .collect(),
            all_kinds: false,
            max_calls: limits.max_cluster_reads.unwrap_or(DEFAULT_CLUSTER_READS),
            max_bytes: limits
                .max_cluster_read_bytes
                .unwrap_or(DEFAULT_CLUSTER_READ_BYTES),
        })
    }

    /// Prometheus text of the plugins' and the admission policies' metrics.
    pub fn metrics_text(&self) -> String {
        let mut out = self.runtime.metrics_text() + &self.policies.metrics_text();
        let shadows = self.shadows();
        if !shadows.is_empty() {
            out.push_str(
                "# HELP wasm_apiserver_admission_shadow_decisions_total Decisions of admission plugins' shadow versions, by how they compare with the enforced decision.\n\
                 # TYPE wasm_apiserver_admission_shadow_decisions_total counter\n",
            );
            for (name, stats, _) in &shadows {
                for (outcome, n) in stats.totals() {
                    out.push_str(&format!(
                        "wasm_apiserver_admission_shadow_decisions_total{{plugin=\"{name}\",outcome=\"{outcome}\"}} {n}\n"
                    ));
                }
            }
        }
        out
    }

    /// What the plugins whose background audit is on say of a stored
    /// object: each plugin whose rules and selectors match a CREATE of it
    /// runs on a synthetic dry-run CREATE by `user` (what Kubewarden's
    /// audit-scanner sends). A mutating-only plugin runs its mutating
    /// phase (a patch is not a failure); webhooks are not audited. A denial
    /// is a `fail` (a `warn` for a plugin in `Warn` mode), a plugin failure
    /// an `error`.
    pub async fn audit(
        &self,
        a: &Attributes<'_>,
        obj: &Value,
        user: wasm_apiserver_plugins::UserInfo,
    ) -> Vec<wasm_apiserver_api::report::Finding> {
        use wasm_apiserver_api::report::{Finding, Outcome};
        let ctx = WriteOptions::new(true, user);
        let mut plugins = self.matching(Phase::Validating, a, Some(obj), None).await;
        for m in self.matching(Phase::Mutating, a, Some(obj), None).await {
            if !plugins.iter().any(|p| p.name == m.name) {
                plugins.push(m);
            }
        }
        plugins.retain(|p| p.background_audit && matches!(p.backend, Backend::Wasm(_)));
        if plugins.is_empty() {
            return Vec::new();
        }
        let req = Self::request(a, Some(obj), None, &ctx);
        let encoded = req.encode();
        let mut out = Vec::with_capacity(plugins.len());
        for p in plugins {
            let Backend::Wasm(plugin) = &p.backend else {
                continue;
            };
            // One plugin call per poll: a request waiting for this worker
            // thread waits for one call at most, not for the whole check.
            tokio::task::yield_now().await;
            let result = if p.phases.contains(&Phase::Validating) {
                plugin.validate_encoded(&encoded).await
            } else {
                plugin.mutate(&req).await
            };
            let (outcome, message) = match result {
                Ok(r) if r.allowed => (Outcome::Pass, String::new()),
                Ok(r) => (
                    if p.mode == Mode::Warn {
                        Outcome::Warn
                    } else {
                        Outcome::Fail
                    },
                    r.status.map(|s| s.message).unwrap_or_default(),
                ),
                Err(e) => (Outcome::Error, e.to_string()),
            };
            out.push(Finding {
                policy: p.name.clone(),
                rule: None,
                outcome,
                message,
                severity: p.severity.clone(),
                category: p.category.clone(),
                properties: Default::default(),
            });
        }
        out
    }

    /// The names and background-audit settings of the plugins of the
    /// chain, with what changes when they are replaced (generation and
    /// digest), and their rules: what the background audit follows.
    pub fn audited(&self) -> Vec<(String, String, Vec<Rule>)> {
        let c = self.snapshot();
        c.statics
            .iter()
            .chain(c.dynamic.values())
            .filter(|a| a.background_audit && matches!(a.backend, Backend::Wasm(_)))
            .map(|a| {
                (
                    a.name.clone(),
                    format!(
                        "{}/{}/{:?}/{:?}",
                        a.generation,
                        a.digest(),
                        a.severity,
                        a.category
                    ),
                    a.rules.clone(),
                )
            })
            .collect()
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub(crate) fn snapshot(&self) -> Arc<Chain> {
        self.chain.read().expect("admission chain lock").clone()
    }

    fn swap(&self, f: impl FnOnce(&mut Chain)) {
        let mut guard = self.chain.write().expect("admission chain lock");
        let mut next = Chain::clone(&guard);
        f(&mut next);
        *guard = Arc::new(next);
    }

    /// Names of the active plugins (statics first).
    pub fn active_names(&self) -> Vec<String> {
        let c = self.snapshot();
        c.statics
            .iter()
            .chain(c.dynamic.values())
            .map(|a| a.name.clone())
            .collect()
    }

    /// Reads the component bytes a spec points at and checks its digest.
    pub async fn module_bytes(&self, module: &Module) -> Result<Vec<u8>, String> {
        let bytes = match (&module.wasm, &module.file) {
            (Some(b64), _) => base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| format!("spec.module.wasm is not valid base64: {e}"))?,
            (None, None) if module.image.is_some() => {
                let image = module.image.as_deref().unwrap_or_default();
                let secret = match &module.pull_secret {
                    Some(p) => Some(self.pull_secret(p).await?),
                    None => None,
                };
                let registries = self
                    .registries
                    .read()
                    .map(|r| r.clone())
                    .unwrap_or_default();
                registries.pull(image, secret.as_ref()).await?
            }
            (None, Some(file)) => {
                let dir = self
                    .plugin_dir
                    .as_ref()
                    .ok_or("spec.module.file needs the server to run with --plugin-dir")?;
                // `PluginSpec::parse` allows plain file names only.
                tokio::fs::read(dir.join(file))
                    .await
                    .map_err(|e| format!("spec.module.file {file:?}: {e}"))?
            }
            (None, None) => return Err("spec.module is empty".into()),
        };
        let digest = hex(&Sha256::digest(&bytes));
        if let Some(want) = &module.sha256
            && !want.eq_ignore_ascii_case(&digest)
        {
            return Err(format!(
                "spec.module.sha256 mismatch: the module's sha256 is {digest}"
            ));
        }
        Ok(bytes)
    }

    /// Compiles (or takes from the cache) and instantiates-checks a plugin,
    /// and its shadow version when it has one.
    pub async fn load(
        &self,
        name: &str,
        spec: PluginSpec,
        generation: i64,
    ) -> Result<Active, String> {
        let bytes = self.module_bytes(&spec.module).await?;
        let (config, limits) = (spec.config_string(), limits(&spec.limits));
        let cluster = self.cluster_access(&spec);
        let plugin = self
            .load_module(name, spec.module.format, &bytes, &config, &limits, &cluster)
            .await?;
        let shadow = match &spec.shadow {
            None => None,
            Some(shadow) => {
                let bytes = self
                    .module_bytes(&shadow.module)
                    .await
                    .map_err(|e| format!("spec.shadow: {e}"))?;
                let config = shadow
                    .config
                    .as_ref()
                    .map(wasm_apiserver_api::admission::config_string)
                    .unwrap_or_else(|| config.clone());
                let plugin = self
                    .load_module(
                        &format!("{name}/shadow"),
                        spec.module.format,
                        &bytes,
                        &config,
                        &limits,
                        &cluster,
                    )
                    .await
                    .map_err(|e| format!("spec.shadow: {e}"))?;
                Some(super::shadow::Shadow {
                    // Instantiating inside the call puts that work on the
                    // shadow's CPU share too.
                    plugin: plugin.unprepared(),
                    idle_time: self.runtime.idle_time(),
                    stats: self.shadow_stats(name),
                })
            }
        };
        let kubewarden = plugin.kubewarden_audit();
        let mut active = Active::new(
            name.to_string(),
            spec.phases,
            spec.order,
            spec.rules,
            spec.namespace_selector,
            spec.object_selector,
            spec.failure_policy,
            spec.mode,
            generation,
            Backend::Wasm(plugin),
        )?;
        active.background_audit = spec
            .background_audit
            .unwrap_or_else(|| kubewarden.as_ref().is_none_or(|(audit, _)| *audit));
        if let Some((_, annotations)) = &kubewarden {
            active.set_report_annotations(annotations);
        }
        active.shadow = shadow;
        Ok(active)
    }

    async fn load_module(
        &self,
        name: &str,
        format: ModuleFormat,
        bytes: &[u8],
        config: &str,
        limits: &Limits,
        cluster: &Option<wasm_apiserver_plugins::ClusterAccess>,
    ) -> Result<AdmissionPlugin, String> {
        match format {
            ModuleFormat::Component => {
                self.runtime
                    .load_admission_with_cluster(
                        name,
                        bytes,
                        config,
                        limits.clone(),
                        cluster.clone(),
                    )
                    .await
            }
            // `spec.config` is the policy's settings.
            ModuleFormat::Kubewarden => {
                self.runtime
                    .load_kubewarden(name, bytes, config, limits.clone(), cluster.clone())
                    .await
            }
        }
        .map_err(|e| e.to_string())
    }

    /// The shadow counts of the plugin `name` (kept across reloads).
    pub fn shadow_stats(&self, name: &str) -> Arc<super::shadow::Stats> {
        self.shadow_stats
            .lock()
            .expect("shadow stats lock")
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// The plugins with shadow counts, and their shadow's digest when one
    /// is loaded.
    pub fn shadows(&self) -> Vec<(String, Arc<super::shadow::Stats>, Option<String>)> {
        let chain = self.snapshot();
        self.shadow_stats
            .lock()
            .expect("shadow stats lock")
            .iter()
            .map(|(name, stats)| {
                let digest = chain
                    .dynamic
                    .get(name)
                    .and_then(|a| a.shadow.as_ref())
                    .map(|s| s.plugin.digest().to_string());
                (name.clone(), stats.clone(), digest)
            })
            .collect()
    }

    /// Installs a plugin loaded from the configuration file.
    pub fn install_static(&self, active: Active) {
        self.swap(|c| c.statics.push(Arc::new(active)));
    }

    /// Activates (or atomically replaces) the plugin of an API object,
    /// unless a newer generation of the same object is active already: a
    /// load of a stale event that finished after the newer one's stays out.
    pub fn install(&self, active: Active) {
        self.swap(|c| {
            if c.removed.get(&active.name) == Some(&active.uid) {
                return; // loaded for an event older than the object's deletion
            }
            c.removed.remove(&active.name);
            let newer = c.dynamic.get(&active.name).is_some_and(|a| {
                superseded((&a.uid, a.generation), (&active.uid, active.generation))
            });
            if !newer {
                c.dynamic.insert(active.name.clone(), Arc::new(active));
            }
        });
    }

    /// Whether generation `generation` of the object `uid` named `name` is
    /// older than the version of it active here: an event that arrives
    /// after the write that made the newer one took effect (the write's
    /// own reconcile installs it before its response; the watch's events
    /// come later).
    ///
    /// An event of an object already deleted here is superseded too.
    pub fn superseded(&self, name: &str, uid: &str, generation: i64) -> bool {
        let chain = self.snapshot();
        chain.removed.get(name).is_some_and(|u| u == uid)
            || chain
                .dynamic
                .get(name)
                .is_some_and(|a| superseded((&a.uid, a.generation), (uid, generation)))
    }

    /// Deactivates the plugin of a deleted API object (`uid`); the
    /// object's later events (a lagging watch's) do not bring it back.
    pub fn remove(&self, name: &str, uid: &str) {
        self.swap(|c| {
            c.dynamic.remove(name);
            if !uid.is_empty() {
                c.removed.insert(name.to_owned(), uid.to_owned());
            }
        });
    }

    /// The generation and digest of an active API-object plugin.
    pub fn loaded(&self, name: &str) -> Option<(i64, String)> {
        self.snapshot()
            .dynamic
            .get(name)
            .map(|a| (a.generation, a.digest()))
    }

    /// Replaces the webhooks of one configuration (`None` removes them).
    pub fn set_webhooks(&self, key: &str, entries: Option<Vec<Active>>) {
        self.swap(|c| match entries {
            Some(e) => {
                c.webhooks
                    .insert(key.to_string(), e.into_iter().map(Arc::new).collect());
            }
            None => {
                c.webhooks.remove(key);
            }
        });
    }

    async fn namespace_labels(&self, ns: &str) -> BTreeMap<String, String> {
        match self
            .storage
            .get(&format!("/registry/core/namespaces/{ns}"))
            .await
        {
            Ok(Some(kv)) => decode(&kv).map(|o| meta::labels(&o)).unwrap_or_default(),
            _ => BTreeMap::new(),
        }
    }

    /// The plugins of `phase` whose rules and selectors match.
    async fn matching(
        &self,
        phase: Phase,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> Vec<Arc<Active>> {
        let attrs = RequestAttributes {
            operation: a.op_str(),
            group: &a.info.group,
            version: &a.info.version,
            resource: &a.info.plural,
            subresource: a.subresource,
            namespaced: a.info.namespaced,
        };
        let mut ns_labels: Option<BTreeMap<String, String>> = None;
        let mut out = Vec::new();
        for p in self.snapshot().phase(phase) {
            if !p.rules.iter().any(|r| r.matches(&attrs)) {
                continue;
            }
            if let Some(sel) = &p.object_selector {
                let hit = |o: Option<&Value>| o.is_some_and(|o| sel.matches_object(o));
                if !sel.is_empty() && !hit(obj) && !hit(old) {
                    continue;
                }
            }
            if let Some(sel) = p.namespace_selector.as_ref().filter(|s| !s.is_empty()) {
                let labels = if a.info.plural == "namespaces" {
                    obj.or(old).map(meta::labels).unwrap_or_default()
                } else if let Some(ns) = a.namespace {
                    if ns_labels.is_none() {
                        ns_labels = Some(self.namespace_labels(ns).await);
                    }
                    ns_labels.clone().unwrap_or_default()
                } else {
                    // Cluster-scoped objects are not filtered by namespace.
                    out.push(p);
                    continue;
                };
                if !sel.matches(&labels) {
                    continue;
                }
            }
            out.push(p);
        }
        out
    }

    /// The `request` of admission-policy expressions: upstream's
    /// `AdmissionRequest` without the objects (they are variables of
    /// their own).
    pub(crate) fn request_json(a: &Attributes<'_>, ctx: &WriteOptions) -> Value {
        serde_json::to_value(Self::request(a, None, None, ctx)).unwrap_or_default()
    }

    fn request(
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
        ctx: &WriteOptions,
    ) -> AdmissionRequest {
        let kind_of = |info: &ResourceInfo| Gvk {
            group: info.group.clone(),
            version: info.version.clone(),
            kind: info.kind.clone(),
        };
        let options_kind = match a.operation {
            Operation::Create => "CreateOptions",
            Operation::Update if ctx.patching => "PatchOptions",
            Operation::Update => "UpdateOptions",
            _ => "DeleteOptions",
        };
        let mut options = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
        if ctx.dry_run {
            options["dryRun"] = json!(["All"]);
        }
        if !ctx.field_manager.is_empty() && a.operation != Operation::Delete {
            options["fieldManager"] = json!(ctx.field_manager);
        }
        if ctx.applying && a.operation == Operation::Update && ctx.forcing {
            options["force"] = json!(true);
        }
        AdmissionRequest {
            uid: uuid_v4(),
            kind: kind_of(a.info),
            resource: Gvr {
                group: a.info.group.clone(),
                version: a.info.version.clone(),
                resource: a.info.plural.clone(),
            },
            sub_resource: a.subresource.map(String::from),
            request_kind: None,
            request_resource: None,
            request_sub_resource: None,
            name: (!a.name.is_empty()).then(|| a.name.to_string()),
            namespace: a.namespace.map(String::from),
            operation: a.operation,
            user: ctx.user.clone(),
            dry_run: ctx.dry_run,
            object: obj.cloned(),
            old_object: old.cloned(),
            options: Some(options),
        }
    }

    /// Handles a plugin's answer; `Ok(true)` means "continue".
    fn decide(p: &Active, resp: &AdmissionResponse, ctx: &WriteOptions) -> Result<(), ApiError> {
        ctx.add_warnings(
            resp.warnings
                .iter()
                .map(|w| format!("admission plugin {:?}: {w}", p.name)),
        );
        ctx.add_audit_annotations(
            resp.audit_annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        if resp.allowed {
            return Ok(());
        }
        let (code, reason, text, causes) = match &resp.status {
            Some(s) => (
                s.code,
                s.reason.clone(),
                s.message.clone(),
                causes(&s.causes),
            ),
            None => (403, String::new(), String::new(), Vec::new()),
        };
        let message = format!("admission plugin {:?} denied the request: {text}", p.name);
        match p.mode {
            Mode::Deny => Err(ApiError::Custom {
                code: if (400..600).contains(&code) {
                    code
                } else {
                    403
                },
                reason: if reason.is_empty() {
                    "Forbidden".into()
                } else {
                    reason
                },
                message,
                causes,
            }),
            Mode::Warn => {
                ctx.add_warnings([message]);
                Ok(())
            }
            Mode::Audit => {
                tracing::info!(plugin = %p.name, %message, "admission denial in Audit mode");
                ctx.add_audit_annotations([(format!("{}/audit-denial", p.name), text)]);
                Ok(())
            }
        }
    }

    fn failed(p: &Active, e: impl std::fmt::Display, kind: &str) -> Result<(), ApiError> {
        tracing::warn!(plugin = %p.name, error = %e, "admission plugin failed");
        match p.failure_policy {
            FailurePolicy::Fail => Err(ApiError::Internal(format!(
                "failed calling admission plugin {:?}: {kind}",
                p.name
            ))),
            FailurePolicy::Ignore => Ok(()),
        }
    }

    /// Times one plugin's or webhook's call under its name; a denial or a
    /// failure is `rejected` (as upstream counts a webhook's error).
    fn observe<E>(
        &self,
        p: &Active,
        phase: super::metrics::Phase,
        a: &Attributes<'_>,
        started: std::time::Instant,
        result: &Result<AdmissionResponse, E>,
    ) {
        let rejected = !matches!(result, Ok(r) if r.allowed);
        match &p.backend {
            Backend::Wasm(_) => {
                self.metrics
                    .controller(&p.name, phase, a.op_str(), started, rejected)
            }
            Backend::Webhook(_) => {
                self.metrics
                    .webhook(&p.name, phase, a.op_str(), started, rejected)
            }
        }
    }

    /// Runs the mutating plugins; applies their patches to `obj`. Returns
    /// whether any patch was applied.
    pub async fn mutate(
        &self,
        a: &Attributes<'_>,
        obj: &mut Value,
        old: Option<&Value>,
        ctx: &WriteOptions,
    ) -> Result<bool, ApiError> {
        let mut patched_any = false;
        for p in self.matching(Phase::Mutating, a, Some(obj), old).await {
            let req = Self::request(a, Some(obj), old, ctx);
            let started = std::time::Instant::now();
            let result = p.mutate(&req).await;
            self.observe(&p, super::metrics::Phase::Admit, a, started, &result);
            if let Some(shadow) = &p.shadow {
                shadow.observe(Phase::Mutating, &req, &result);
            }
            match result {
                Ok(resp) => {
                    Self::decide(&p, &resp, ctx)?;
                    if let Some(patch_doc) = resp.patch.as_ref().filter(|_| resp.allowed) {
                        match patch::apply_json_patch(obj, patch_doc) {
                            Ok(patched) => {
                                *obj = patched;
                                patched_any = true;
                            }
                            Err(e) => Self::failed(&p, e, "invalid patch")?,
                        }
                    }
                }
                Err((kind, e)) => Self::failed(&p, e, kind)?,
            }
        }
        Ok(patched_any)
    }

    /// Runs the validating plugins on the final object.
    pub async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
        ctx: &WriteOptions,
    ) -> Result<(), ApiError> {
        let plugins = self.matching(Phase::Validating, a, obj, old).await;
        if plugins.is_empty() {
            return Ok(());
        }
        let req = Self::request(a, obj, old, ctx);
        let encoded = req.encode();
        for p in plugins {
            let started = std::time::Instant::now();
            let result = p.validate(&encoded).await;
            self.observe(&p, super::metrics::Phase::Validate, a, started, &result);
            if let Some(shadow) = &p.shadow {
                shadow.observe(Phase::Validating, encoded.request(), &result);
            }
            match result {
                Ok(resp) => Self::decide(&p, &resp, ctx)?,
                Err((kind, e)) => Self::failed(&p, e, kind)?,
            }
        }
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn uuid_v4() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Whether `candidate` (uid, generation) is older than `active`: the same
/// object at a lower generation. A recreated object (another uid) is never
/// superseded by its predecessor.
pub(crate) fn superseded(active: (&str, i64), candidate: (&str, i64)) -> bool {
    active.0 == candidate.0 && active.1 > candidate.1
}

#[cfg(test)]
mod tests {
    use super::superseded;

    #[test]
    fn only_an_older_generation_of_the_same_object_is_superseded() {
        assert!(superseded(("u1", 2), ("u1", 1)), "a stale event");
        assert!(!superseded(("u1", 2), ("u1", 2)), "the same generation");
        assert!(!superseded(("u1", 1), ("u1", 2)), "a newer generation");
        assert!(
            !superseded(("u1", 3), ("u2", 1)),
            "a recreated object starts at generation 1 again"
        );
    }
}
