//! The generic store: Kubernetes object semantics on top of [`Storage`],
//! like upstream's generic registry store. The REST handler calls it with
//! decoded JSON and the [`Resource`] from the registry; it owns metadata
//! rules, optimistic concurrency (CAS retries), finalizers, namespace
//! lifecycle, selectors and paging, and runs the admission chain. What is
//! special about a resource comes from its [`Strategy`](crate::strategy::Strategy).

use crate::admission::chain::{Admission, Attributes};
use crate::admission::metrics::Phase as AdmissionPhase;
use crate::admission::plugins;
use crate::codec::{decode, encode};
use crate::error::storage_error;
use crate::handlers::Handlers;
use crate::options::{
    Deleted, FieldValidation, ListOutcome, ListParams, Preconditions, WriteOptions,
};
use crate::resources::{Resource, Resources};
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::Notify;
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::managed::{self, typed::Schema};
use wasm_apiserver_api::{ApiError, ResourceInfo, meta};
use wasm_apiserver_plugins::Operation;
use wasm_apiserver_storage::{EventKind, ListOptions, Storage, StorageError, WatchItem};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// How many times a write is retried after losing a compare-and-swap race.
const MAX_RETRIES: usize = 64;

/// Kubernetes object semantics over a [`Storage`].
#[derive(Clone)]
pub struct Objects {
    pub storage: Arc<dyn Storage>,
    /// The live resource registry.
    pub resources: Arc<Resources>,
    /// Woken when a namespace starts terminating.
    pub namespace_deleted: Arc<Notify>,
    /// The admission chain; `None` runs without admission.
    pub admission: Option<Arc<Admission>>,
    /// Which namespaces exist and whether they terminate.
    pub namespace_cache: Arc<NamespaceCache>,
    /// The active resource handlers of custom resources.
    pub handlers: Arc<Handlers>,
    /// The field indexes plugins' cluster reads use.
    pub field_indexes: Arc<crate::field_index::FieldIndexes>,
    /// Which compiled-in admission plugins run (set once at start-up;
    /// all of them until then).
    pub admission_plugins: Arc<std::sync::OnceLock<crate::admission::plugins::Enabled>>,
    /// Which namespaces have ResourceQuotas (for the `ResourceQuota`
    /// admission plugin).
    pub quota_namespaces: Arc<crate::admission::resourcequota::QuotaNamespaces>,
    /// Upstream's admission latency families (the chain's, when there is
    /// one).
    pub admission_metrics: Arc<crate::admission::metrics::AdmissionMetrics>,
    /// `rest_client_*` of the controllers' calls.
    pub client_metrics: Arc<crate::client_metrics::ClientMetrics>,
}

#[async_trait::async_trait]
impl crate::admission::policy::Lookup for Objects {
    fn resources(&self) -> &Resources {
        &self.resources
    }

    async fn get(&self, res: &Resource, ns: Option<&str>, name: &str) -> Result<Value> {
        Objects::get(self, res, ns, name).await
    }

    async fn list(&self, res: &Resource, ns: Option<&str>, p: &ListParams) -> Result<ListOutcome> {
        Objects::list(self, res, ns, p).await
    }

    async fn namespace(&self, name: &str) -> Option<Value> {
        let kv = self
            .storage
            .get(&format!("/registry/core/namespaces/{name}"))
            .await
            .ok()
            .flatten()?;
        decode(&kv).ok()
    }

    fn merge(&self, info: &ResourceInfo, live: &Value, config: &Value) -> Value {
        managed::typed::merge(live, config, merge_schema(info))
    }
}

/// Namespace name → terminating, for the lifecycle check on creates.
#[derive(Debug, Default)]
pub struct NamespaceCache(std::sync::RwLock<std::collections::HashMap<String, bool>>);

impl NamespaceCache {
    pub fn get(&self, ns: &str) -> Option<bool> {
        self.0.read().expect("namespace cache").get(ns).copied()
    }

    /// `None` forgets the namespace (deleted).
    pub fn set(&self, ns: &str, terminating: Option<bool>) {
        let mut map = self.0.write().expect("namespace cache");
        match terminating {
            Some(t) => map.insert(ns.to_string(), t),
            None => map.remove(ns),
        };
    }
}

/// Applies `fieldValidation` to the request's object: its unknown fields
/// fail the request (`Strict`, 400 as upstream's strict decoder) or are
/// dropped, with a warning each (`Warn`) or silently (`Ignore`).
fn check_fields(info: &Resource, obj: &mut Value, opts: &WriteOptions) -> Result<()> {
    let unknown = info.strategy.prune(info, obj);
    if unknown.is_empty() {
        return Ok(());
    }
    let each: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match opts.field_validation {
        FieldValidation::Strict => Err(ApiError::BadRequest(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            each.join(", "),
            kind = info.kind,
            version = info.version,
        ))),
        FieldValidation::Warn => {
            opts.add_warnings(each);
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

/// The `Target` of errors about `name` of this resource.
pub fn target(info: &ResourceInfo, name: &str) -> Target {
    Target::new(&info.group, &info.plural, name)
}

fn map_storage(info: &ResourceInfo, name: &str, e: StorageError) -> ApiError {
    match e {
        StorageError::NotFound => ApiError::NotFound(target(info, name)),
        StorageError::AlreadyExists => ApiError::AlreadyExists(target(info, name)),
        StorageError::Conflict { .. } => ApiError::stale(target(info, name)),
        other => storage_error(other),
    }
}

/// An object as the request's version shows it (see [`Strategy::present`](crate::strategy::Strategy::present)).
async fn present(info: &Resource, obj: Value) -> Result<Value> {
    let mut objs = [obj];
    info.strategy.present(info, &mut objs).await?;
    let [obj] = objs;
    Ok(obj)
}

fn without_rv(obj: &Value) -> Value {
    let mut o = obj.clone();
    meta::metadata_mut(&mut o).remove("resourceVersion");
    o
}

fn now() -> String {
    meta::timestamp(chrono::Utc::now())
}

/// What a delete does to an object already marked for deletion.
#[derive(Debug, PartialEq)]
enum Grace {
    /// Its grace period runs on: the delete changes nothing.
    Pending,
    /// The request's shorter period moves the deletion earlier.
    Shorten { timestamp: String, period: i64 },
    /// No grace period (or one of 0): only finalizers can hold it.
    Over,
}

/// Upstream's `BeforeDelete` for an object that is terminating: only a
/// shorter grace period may be asked for; the deletion moves back by the
/// difference, never into the past (a period that has run out becomes 1 s,
/// so that its kubelet still makes the final delete).
fn shorten_grace(cur: &Value, requested: Option<i64>) -> Grace {
    let existing = cur["metadata"]["deletionGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(0);
    if existing <= 0 {
        return Grace::Over;
    }
    let Some(mut period) = requested.map(|p| if p < 0 { 1 } else { p }) else {
        return Grace::Pending;
    };
    if period >= existing {
        return Grace::Pending;
    }
    let now = chrono::Utc::now();
    let marked = meta::str_field(cur, "deletionTimestamp")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or(now);
    let mut at = marked - chrono::Duration::seconds(existing) + chrono::Duration::seconds(period);
    if at < now {
        at = now;
        if period != 0 {
            period = 1;
        }
    }
    Grace::Shorten {
        timestamp: meta::timestamp(at),
        period,
    }
}

/// True once nothing holds a deleted object any more.
fn ready_to_delete(info: &Resource, obj: &Value) -> bool {
    meta::str_field(obj, "deletionTimestamp").is_some()
        && meta::finalizers(obj).is_empty()
        && !info.strategy.holds_deletion(obj)
}

impl Objects {
    pub fn new(
        storage: Arc<dyn Storage>,
        resources: Arc<Resources>,
        admission: Option<Arc<Admission>>,
    ) -> Self {
        Objects {
            storage,
            resources,
            namespace_deleted: Arc::new(Notify::new()),
            admission_metrics: admission
                .as_ref()
                .map(|a| a.metrics.clone())
                .unwrap_or_default(),
            client_metrics: Default::default(),
            admission,
            namespace_cache: Default::default(),
            handlers: Default::default(),
            field_indexes: Default::default(),
            admission_plugins: Default::default(),
            quota_namespaces: Default::default(),
        }
    }

    /// Whether the compiled-in admission plugin `name` runs.
    pub fn admission_plugin_on(&self, name: &str) -> bool {
        self.admission_plugins.get().is_none_or(|e| e.is_on(name))
    }

    /// Writes `status` to the cluster-scoped object `obj` of `info` through
    /// its `status` subresource, unless it already has it: how controllers
    /// that load modules (admission plugins, resource handlers) report. A
    /// failure is logged; the next reconcile tries again.
    pub async fn record_status(
        &self,
        info: &Resource,
        obj: &Value,
        status: Value,
        component: &str,
    ) {
        if obj.get("status") == Some(&status) {
            return;
        }
        let name = meta::name(obj).unwrap_or_default();
        let ctx = WriteOptions::system(component);
        let result = self
            .guaranteed_update(info, None, name, Some("status"), &ctx, |cur| {
                let mut new = cur.clone();
                new["status"] = status.clone();
                Ok(new)
            })
            .await;
        if let Err(e) = result {
            tracing::debug!(resource = %info.plural, %name, error = %e, "could not record status");
        }
    }

    /// Lists `info`'s objects and hands them to `on_list`, and each to
    /// `on_change`; then follows the storage watch, handing `on_change`
    /// every changed object and whether it was deleted. Relists after a
    /// watch error; never returns. What controllers that keep in-memory
    /// state in line with API objects run.
    pub async fn follow<Fut: Future<Output = ()> + Send>(
        &self,
        info: &Resource,
        on_list: impl FnMut(&[Value]) + Send,
        on_change: impl FnMut(Value, bool) -> Fut + Send,
    ) {
        self.follow_keys(info, |_| true, on_list, on_change).await
    }

    /// As [`Objects::follow`], for watch events whose storage key `keep`
    /// accepts: the others are skipped before they are decoded (a
    /// controller that cares about one object's name does not decode every
    /// write of its resource).
    pub async fn follow_keys<Fut: Future<Output = ()> + Send>(
        &self,
        info: &Resource,
        keep: impl Fn(&str) -> bool + Send,
        mut on_list: impl FnMut(&[Value]) + Send,
        mut on_change: impl FnMut(Value, bool) -> Fut + Send,
    ) {
        loop {
            let result: Result<()> = async {
                let listed = self.list(info, None, &ListParams::default()).await?;
                on_list(&listed.items);
                for obj in listed.items {
                    on_change(obj, false).await;
                }
                let mut stream = self
                    .storage
                    .watch(&info.collection_key(None), listed.resource_version)
                    .await
                    .map_err(storage_error)?;
                while let Some(item) = stream.next().await {
                    let WatchItem::Event(ev) = item.map_err(storage_error)? else {
                        continue;
                    };
                    if !keep(&ev.kv.key) {
                        continue;
                    }
                    on_change(decode(&ev.kv)?, ev.kind == EventKind::Deleted).await;
                }
                Ok(())
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(resource = %info.plural, error = %e, "watch ended; relisting");
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }

    /// Keeps `quota_namespaces` in line with storage (every replica's
    /// quota writes reach it through the watch).
    pub fn spawn_quota_cache(&self) -> tokio::task::JoinHandle<()> {
        let objects = self.clone();
        tokio::spawn(async move {
            let info = objects.resources.builtin("", "v1", "resourcequotas");
            let cache = objects.quota_namespaces.clone();
            let (c1, c2) = (cache.clone(), cache);
            objects
                .follow(
                    &info,
                    move |listed| c1.reset(listed),
                    move |q, deleted| {
                        c2.set(
                            meta::namespace(&q).unwrap_or_default(),
                            meta::name(&q).unwrap_or_default(),
                            !deleted,
                        );
                        async {}
                    },
                )
                .await
        })
    }

    /// The mutating phase of admission, timed.
    async fn admit_mutating(
        &self,
        res: &Resource,
        a: &Attributes<'_>,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        let r = self.mutating_phase(res, a, obj, old, opts).await;
        self.admission_metrics
            .step(AdmissionPhase::Admit, a.op_str(), started, r.is_err());
        r
    }

    /// The validating phase of admission, timed.
    async fn admit_validating(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        let r = self.validating_phase(a, obj, old, opts).await;
        self.admission_metrics
            .step(AdmissionPhase::Validate, a.op_str(), started, r.is_err());
        r
    }

    /// Times a compiled-in admission plugin's call under its name.
    fn timed<T>(
        &self,
        name: &str,
        phase: AdmissionPhase,
        a: &Attributes<'_>,
        started: std::time::Instant,
        r: Result<T>,
    ) -> Result<T> {
        self.admission_metrics
            .controller(name, phase, a.op_str(), started, r.is_err());
        r
    }

    async fn mutating_phase(
        &self,
        res: &Resource,
        a: &Attributes<'_>,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> Result<()> {
        // Upstream's compiled-in plugins run before the configurable ones.
        if a.operation == Operation::Create
            && a.subresource.is_none()
            && a.info.group.is_empty()
            && a.info.plural == "pods"
            && let Some(ns) = a.namespace
            && self.admission_plugin_on(plugins::SERVICE_ACCOUNT)
        {
            crate::admission::serviceaccount::admit(self, ns, a.name, obj).await?;
        }
        if a.subresource.is_none() && a.info.group.is_empty() {
            use wasm_apiserver_api::node::lifecycle;
            if a.info.plural == "nodes"
                && a.operation == Operation::Create
                && self.admission_plugin_on(plugins::TAINT_NODES_BY_CONDITION)
            {
                lifecycle::taint_new_node(obj);
            }
            if a.info.plural == "pods"
                && matches!(a.operation, Operation::Create | Operation::Update)
                && self.admission_plugin_on(plugins::DEFAULT_TOLERATION_SECONDS)
            {
                let (not_ready, unreachable) =
                    self.admission_plugins.get().map_or((300, 300), |e| {
                        (
                            e.not_ready_toleration_seconds,
                            e.unreachable_toleration_seconds,
                        )
                    });
                lifecycle::default_tolerations(obj, not_ready, unreachable);
            }
        }
        let patched = match &self.admission {
            Some(adm) => {
                // Upstream's order: mutating admission policies, then the
                // mutating plugins and webhooks.
                let by_policy = if self.admission_plugin_on(plugins::MUTATING_ADMISSION_POLICY) {
                    let t = std::time::Instant::now();
                    let r = crate::admission::policy::mutate(
                        self,
                        &adm.policies,
                        a,
                        || Admission::request_json(a, opts),
                        obj,
                        old,
                        opts,
                    )
                    .await;
                    self.timed(
                        plugins::MUTATING_ADMISSION_POLICY,
                        AdmissionPhase::Admit,
                        a,
                        t,
                        r,
                    )?
                } else {
                    false
                };
                adm.mutate(a, obj, old, opts).await? || by_policy
            }
            None => false,
        };
        // What plugins added is decoded as upstream decodes a patched
        // object: unknown fields go, silently.
        if patched {
            res.strategy.prune(res, obj);
        }
        Ok(())
    }

    async fn validating_phase(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let authorizer = self
            .admission
            .as_ref()
            .and_then(|a| a.policies.authorizer());
        let on = |name: &str| self.admission_plugin_on(name);
        let validate = AdmissionPhase::Validate;
        let now = std::time::Instant::now;
        if on(plugins::NODE_RESTRICTION) {
            let t = now();
            let r = crate::admission::noderestriction::validate(a, obj, old, &opts.user);
            self.timed(plugins::NODE_RESTRICTION, validate, a, t, r)?;
        }
        crate::admission::certificates::validate(authorizer, &on, a, obj, old, &opts.user)?;
        if on(plugins::OWNER_REFERENCES) {
            let t = now();
            let r = crate::admission::ownerrefs::validate(
                authorizer,
                &self.resources,
                a,
                obj,
                old,
                &opts.user,
            );
            self.timed(plugins::OWNER_REFERENCES, validate, a, t, r)?;
        }
        if let Some(adm) = &self.admission {
            if self.admission_plugin_on(plugins::VALIDATING_ADMISSION_POLICY) {
                let t = now();
                let r = crate::admission::policy::validate(
                    self,
                    &adm.policies,
                    a,
                    || Admission::request_json(a, opts),
                    obj,
                    old,
                    opts,
                )
                .await;
                self.timed(plugins::VALIDATING_ADMISSION_POLICY, validate, a, t, r)?;
            }
            adm.validate(a, obj, old, opts).await?;
        }
        // Last, as upstream: what the others refuse charges no quota.
        if on(plugins::RESOURCE_QUOTA) {
            let t = now();
            let r = crate::admission::resourcequota::validate(
                self.storage.as_ref(),
                &self.resources,
                &self.quota_namespaces,
                a,
                obj,
                old,
                opts,
            )
            .await;
            self.timed(plugins::RESOURCE_QUOTA, validate, a, t, r)?;
        }
        Ok(())
    }

    /// Reads one object.
    pub async fn get(&self, info: &Resource, ns: Option<&str>, name: &str) -> Result<Value> {
        match self
            .storage
            .get(&info.object_key(ns, name))
            .await
            .map_err(storage_error)?
        {
            Some(kv) => present(info, decode(&kv)?).await,
            None => Err(ApiError::NotFound(target(info, name))),
        }
    }

    /// The revision a list starts from, per `resourceVersion` and
    /// `resourceVersionMatch` (upstream semantics without a watch cache).
    async fn list_revision(&self, p: &ListParams) -> Result<Option<u64>> {
        let rv = meta::parse_resource_version(p.resource_version.as_deref().unwrap_or(""))
            .map_err(ApiError::BadRequest)?;
        match (rv, p.resource_version_match.as_deref()) {
            (None, Some(m)) if !m.is_empty() => Err(ApiError::BadRequest(
                "resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
            )),
            (None | Some(0), _) => Ok(None),
            (Some(n), Some("Exact")) => Ok(Some(n)),
            (Some(n), None | Some("")) if p.limit.is_some() => Ok(Some(n)),
            (Some(n), None | Some("") | Some("NotOlderThan")) => {
                let current = self
                    .storage
                    .current_revision()
                    .await
                    .map_err(storage_error)?;
                if n > current {
                    return Err(ApiError::TooLargeResourceVersion {
                        requested: n,
                        current,
                    });
                }
                Ok(None)
            }
            (Some(_), Some(other)) => Err(ApiError::BadRequest(format!(
                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
            ))),
        }
    }

    /// Lists objects matching the selectors, one page at a fixed revision.
    pub async fn list(
        &self,
        info: &Resource,
        ns: Option<&str>,
        p: &ListParams,
    ) -> Result<ListOutcome> {
        if p.indexed
            && let Some(out) = self.field_indexes.list(&self.storage, info, ns, p).await?
        {
            return Ok(out);
        }
        let prefix = info.collection_key(ns);
        let (mut start, mut revision) = match &p.continue_token {
            Some(tok) if !tok.is_empty() => {
                let (rv, start) = meta::decode_continue(tok)?;
                (Some(format!("{prefix}{start}")), Some(rv))
            }
            _ => (None, self.list_revision(p).await?),
        };
        let limit = p.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut next = None;
        loop {
            let page_size = limit.map(|l| {
                (l - items.len()).max(if p.labels.is_empty() && p.fields.is_empty() {
                    1
                } else {
                    256
                })
            });
            let page = self
                .storage
                .list(&prefix, ListOptions { revision, start_key: start.clone(), limit: page_size })
                .await
                .map_err(|e| match e {
                    StorageError::Expired { .. } if p.continue_token.is_some() => ApiError::Expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                    ),
                    other => storage_error(other),
                })?;
            revision = Some(page.revision);
            let mut stopped_at = None;
            for kv in &page.items {
                if limit.is_some_and(|l| items.len() >= l) {
                    stopped_at = Some(kv.key.clone());
                    break;
                }
                let obj = decode(kv)?;
                if p.matches(&obj) {
                    items.push(obj);
                }
            }
            if let Some(key) = stopped_at {
                next = Some(key);
                break;
            }
            match page.next_key {
                None => break,
                Some(key) if limit.is_some_and(|l| items.len() >= l) => {
                    next = Some(key);
                    break;
                }
                Some(key) => start = Some(key),
            }
        }
        info.strategy.present(info, &mut items).await?;
        let resource_version = revision.unwrap_or_default();
        let continue_token = next.map(|k| {
            meta::encode_continue(resource_version, k.strip_prefix(&prefix).unwrap_or(&k))
        });
        Ok(ListOutcome {
            items,
            resource_version,
            continue_token,
        })
    }

    /// Fails unless `ns` exists and is not terminating.
    async fn ensure_namespace_active(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
    ) -> Result<()> {
        if !self.admission_plugin_on(plugins::NAMESPACE_LIFECYCLE) {
            return Ok(());
        }
        // The namespace cache (kept by a watch, and by this replica's own
        // namespace writes) spares a storage read per create, as upstream's
        // NamespaceLifecycle admission uses an informer; a miss reads storage.
        let terminating = match self.namespace_cache.get(ns) {
            Some(t) => t,
            None => {
                let ns_info = self.resources.builtin("", "v1", "namespaces");
                let obj = self.get(&ns_info, None, ns).await?;
                let t = meta::str_field(&obj, "deletionTimestamp").is_some();
                self.namespace_cache.set(ns, Some(t));
                t
            }
        };
        if terminating {
            return Err(ApiError::Forbidden(
                target(info, name),
                format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            ));
        }
        Ok(())
    }

    /// Checks and sets apiVersion/kind and namespace of a request body.
    fn normalize(&self, info: &ResourceInfo, ns: Option<&str>, obj: &mut Value) -> Result<()> {
        let Some(map) = obj.as_object_mut() else {
            return Err(ApiError::BadRequest(
                "the request body must be a JSON object".into(),
            ));
        };
        let api_version = info.api_version();
        match map.get("apiVersion").and_then(Value::as_str) {
            Some(v) if !v.is_empty() && v != api_version => {
                return Err(ApiError::BadRequest(format!(
                    "the API version in the data ({v}) does not match the expected API version ({api_version})"
                )));
            }
            _ => {}
        }
        match map.get("kind").and_then(Value::as_str) {
            Some(k) if !k.is_empty() && k != info.kind => {
                return Err(ApiError::BadRequest(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    info.kind
                )));
            }
            _ => {}
        }
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(info.kind));
        let meta = meta::metadata_mut(obj);
        if info.namespaced {
            let ns = ns.unwrap_or_default();
            match meta.get("namespace").and_then(Value::as_str) {
                Some(body_ns) if !body_ns.is_empty() && body_ns != ns => {
                    return Err(ApiError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ));
                }
                _ => {
                    meta.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            meta.remove("namespace");
        }
        Ok(())
    }

    /// Creates an object (POST).
    pub async fn create(
        &self,
        info: &Resource,
        ns: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        // Admission may take a while: let the store know a write is coming,
        // so that concurrent creates can share a commit.
        let announced = (!opts.dry_run).then(|| self.storage.announce_write());
        self.normalize(info, ns, &mut obj)?;
        check_fields(info, &mut obj, opts)?;
        let generate = meta::str_field(&obj, "generateName").map(String::from);
        if meta::name(&obj).is_none()
            && let Some(base) = &generate
        {
            meta::metadata_mut(&mut obj).insert("name".into(), json!(meta::generate_name(base)));
        }
        meta::prepare_for_create(&mut obj, chrono::Utc::now());
        info.strategy.prepare_for_create(&mut obj, &opts.user);
        info.strategy.canonicalize(&mut obj);
        info.strategy
            .plugin_default(info, &mut obj, None, &opts.user)
            .await?;
        let name = meta::name(&obj).unwrap_or_default().to_string();
        if let Some(ns) = ns.filter(|_| info.namespaced) {
            self.ensure_namespace_active(info, ns, &name).await?;
        }
        let attrs = Attributes {
            info,
            operation: Operation::Create,
            subresource: None,
            namespace: ns,
            name: &name,
        };
        self.admit_mutating(info, &attrs, &mut obj, None, opts)
            .await?;
        info.strategy.validate(info, ns, &obj, None, &opts.user)?;
        info.strategy
            .plugin_validate(info, &obj, None, &opts.user)
            .await?;
        self.admit_validating(&attrs, Some(&obj), None, opts)
            .await?;
        track_managed_fields(info, None, None, &mut obj, opts);
        if opts.dry_run {
            return Ok(obj);
        }
        let key = info.object_key(ns, &name);
        info.strategy.allocate(info, &mut obj).await?;
        let mut converted = None;
        let written = match info.strategy.to_storage(info, &obj).await {
            Ok(c) => {
                converted = c;
                let bytes = encode(converted.as_mut().unwrap_or(&mut obj));
                drop(announced);
                self.storage
                    .create(&key, bytes)
                    .await
                    .map_err(|e| map_storage(info, &name, e))
            }
            Err(e) => Err(e),
        };
        let kv = match written {
            Ok(kv) => kv,
            Err(e) => {
                info.strategy.release(&obj).await;
                return Err(e);
            }
        };
        meta::set_resource_version(&mut obj, kv.mod_revision);
        let stored = match &mut converted {
            Some(c) => {
                meta::set_resource_version(c, kv.mod_revision);
                &*c
            }
            None => &obj,
        };
        info.strategy.after_write(stored, false).await;
        Ok(obj)
    }

    /// Reads, changes and compare-and-swaps an object until the swap wins
    /// (upstream's `GuaranteedUpdate`). `change` sees the current object and
    /// returns the desired one; it enforces the caller's preconditions.
    pub async fn guaranteed_update<F>(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        opts: &WriteOptions,
        mut change: F,
    ) -> Result<Value>
    where
        F: FnMut(&Value) -> Result<Value>,
    {
        let key = info.object_key(ns, name);
        // As in `create`: a write is coming, once admission is done.
        let mut announced = (!opts.dry_run).then(|| self.storage.announce_write());
        for _ in 0..MAX_RETRIES {
            let Some(cur_kv) = self.storage.get(&key).await.map_err(storage_error)? else {
                return Err(ApiError::NotFound(target(info, name)));
            };
            // In the request's version, whose schema prunes: unknown fields
            // stored before they were pruned are not the request's, so
            // they are dropped silently and only the request's count.
            let mut cur = present(info, decode(&cur_kv)?).await?;
            info.strategy.prune(info, &mut cur);
            let mut new = change(&cur)?;
            self.normalize(info, ns, &mut new)?;
            check_fields(info, &mut new, opts)?;
            meta::prepare_for_update(&mut new, &cur);
            info.strategy.prepare_for_update(&mut new, &cur);
            info.strategy.canonicalize(&mut new);
            info.strategy
                .plugin_default(info, &mut new, Some(&cur), &opts.user)
                .await?;
            let attrs = Attributes {
                info,
                operation: Operation::Update,
                subresource,
                namespace: ns,
                name,
            };
            self.admit_mutating(info, &attrs, &mut new, Some(&cur), opts)
                .await?;
            info.strategy
                .validate(info, ns, &new, Some(&cur), &opts.user)?;
            info.strategy
                .plugin_validate(info, &new, Some(&cur), &opts.user)
                .await?;
            self.admit_validating(&attrs, Some(&new), Some(&cur), opts)
                .await?;
            track_managed_fields(info, subresource, Some(&cur), &mut new, opts);
            if ready_to_delete(info, &new) {
                if opts.dry_run {
                    return Ok(new);
                }
                announced.take();
                match self.storage.delete(&key, Some(cur_kv.mod_revision)).await {
                    Ok(kv) => {
                        meta::set_resource_version(&mut new, kv.mod_revision);
                        info.strategy.release(&new).await;
                        info.strategy.after_write(&new, true).await;
                        return Ok(new);
                    }
                    Err(StorageError::Conflict { .. }) => continue,
                    Err(e) => return Err(map_storage(info, name, e)),
                }
            }
            // Both in the request's version: an update that changes nothing
            // is not written (and keeps its resourceVersion).
            if without_rv(&new) == without_rv(&cur) {
                if !opts.dry_run {
                    info.strategy.after_write(&cur, false).await;
                }
                return Ok(cur);
            }
            if opts.dry_run {
                meta::set_resource_version(&mut new, cur_kv.mod_revision);
                return Ok(new);
            }
            let mut converted = info.strategy.to_storage(info, &new).await?;
            let bytes = encode(converted.as_mut().unwrap_or(&mut new));
            announced.take();
            match self.storage.update(&key, bytes, cur_kv.mod_revision).await {
                Ok(kv) => {
                    meta::set_resource_version(&mut new, kv.mod_revision);
                    let stored = match &mut converted {
                        Some(c) => {
                            meta::set_resource_version(c, kv.mod_revision);
                            &*c
                        }
                        None => &new,
                    };
                    info.strategy.after_write(stored, false).await;
                    return Ok(new);
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(map_storage(info, name, e)),
            }
        }
        Err(ApiError::stale(target(info, name)))
    }

    /// Replaces an object (PUT), or one of its subresources.
    pub async fn update(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        mut body: Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        match meta::name(&body) {
            Some(n) if n != name => {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            Some(_) => {}
            None => {
                meta::metadata_mut(&mut body).insert("name".into(), json!(name));
            }
        }
        let precondition =
            meta::parse_resource_version(meta::str_field(&body, "resourceVersion").unwrap_or(""))
                .map_err(ApiError::BadRequest)?;
        let body_uid = meta::str_field(&body, "uid").map(String::from);
        self.guaranteed_update(info, ns, name, subresource, opts, |cur| {
            check_preconditions(info, name, cur, body_uid.as_deref(), precondition)?;
            scope_to_subresource(info, name, subresource, cur, &body)
        })
        .await
    }

    /// Patches an object (PATCH), or one of its subresources, with an
    /// already-parsed patch document.
    pub async fn patch(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        apply: &(dyn Fn(&Value) -> Result<Value> + Send + Sync),
        opts: &WriteOptions,
    ) -> Result<Value> {
        self.guaranteed_update(info, ns, name, subresource, opts, |cur| {
            // A subresource with its own view (`scale`) is patched in that
            // view and mapped back; others patch the object.
            let view =
                subresource.and_then(|sub| Some((sub, info.strategy.get_subresource(sub, cur)?)));
            let patched = match view {
                Some((sub, view)) => {
                    let changed = apply(&view)?;
                    if meta::str_field(&changed, "resourceVersion")
                        .is_some_and(|rv| Some(rv) != meta::str_field(cur, "resourceVersion"))
                    {
                        return Err(ApiError::stale(target(info, name)));
                    }
                    scope_to_subresource(info, name, Some(sub), cur, &changed)?
                }
                None => {
                    let changed = apply(cur)?;
                    let mut scoped = scope_to_subresource(info, name, subresource, cur, &changed)?;
                    // An apply to `status` records its managed fields in
                    // metadata, which the status scope otherwise keeps.
                    if opts.applying
                        && let Some(fields) = changed["metadata"].get("managedFields")
                    {
                        meta::metadata_mut(&mut scoped)
                            .insert("managedFields".into(), fields.clone());
                    }
                    scoped
                }
            };
            // A resourceVersion in the patch is a precondition.
            let want = meta::str_field(&patched, "resourceVersion");
            if want.is_some() && want != meta::str_field(cur, "resourceVersion") {
                return Err(ApiError::stale(target(info, name)));
            }
            if meta::name(&patched) != Some(name) {
                return Err(ApiError::BadRequest(
                    "metadata.name: the name of an object cannot be changed by a patch".into(),
                ));
            }
            Ok(patched)
        })
        .await
    }

    /// Deletes an object, or marks it for deletion while finalizers hold it.
    pub async fn delete(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        pre: &Preconditions,
        opts: &WriteOptions,
    ) -> Result<Deleted> {
        let key = info.object_key(ns, name);
        // As in `create`: a write is coming, once admission is done.
        let mut announced = (!opts.dry_run).then(|| self.storage.announce_write());
        for _ in 0..MAX_RETRIES {
            let Some(cur_kv) = self.storage.get(&key).await.map_err(storage_error)? else {
                return Err(ApiError::NotFound(target(info, name)));
            };
            let cur = decode(&cur_kv)?;
            check_preconditions(info, name, &cur, pre.uid.as_deref(), pre.resource_version)?;
            let attrs = Attributes {
                info,
                operation: Operation::Delete,
                subresource: None,
                namespace: ns,
                name,
            };
            let shown = present(info, cur.clone()).await?;
            self.admit_validating(&attrs, None, Some(&shown), opts)
                .await?;
            // The garbage collector's finalizers, as the request's
            // propagation policy says (upstream's
            // `deletionFinalizersForGarbageCollection`).
            let old_finalizers = meta::finalizers(&cur);
            let finalizers = crate::options::Propagation::finalizers(
                pre.propagation,
                info.strategy.default_propagation(info),
                &old_finalizers,
            );
            let mut marked = cur.clone();
            let gc_changed = {
                let (mut a, mut b) = (old_finalizers.clone(), finalizers.clone());
                a.sort();
                b.sort();
                a != b
            };
            if gc_changed {
                let m = meta::metadata_mut(&mut marked);
                if finalizers.is_empty() {
                    m.remove("finalizers");
                } else {
                    m.insert("finalizers".into(), json!(finalizers));
                }
            }
            let terminating = meta::str_field(&cur, "deletionTimestamp").is_some();
            let held = !finalizers.is_empty() || info.strategy.holds_deletion(&marked);
            // Graceful deletion (upstream's `BeforeDelete`): a period that
            // has not run out marks the object and leaves it.
            let mark = if terminating {
                match shorten_grace(&cur, pre.grace_period_seconds) {
                    Grace::Pending => return Ok(Deleted::Pending(shown)),
                    Grace::Shorten { timestamp, period } => {
                        let m = meta::metadata_mut(&mut marked);
                        m.insert("deletionTimestamp".into(), json!(timestamp));
                        m.insert("deletionGracePeriodSeconds".into(), json!(period));
                        period > 0 || held
                    }
                    // Not (or no longer) graceful: finalizers decide.
                    Grace::Over if !gc_changed => return Ok(Deleted::Pending(shown)),
                    Grace::Over => held,
                }
            } else {
                match info
                    .strategy
                    .grace_period(&cur, pre.grace_period_seconds)
                    .map(|p| p.max(0))
                {
                    Some(period) if period > 0 || held => {
                        let at = chrono::Utc::now() + chrono::Duration::seconds(period);
                        let m = meta::metadata_mut(&mut marked);
                        m.insert("deletionTimestamp".into(), json!(meta::timestamp(at)));
                        m.insert("deletionGracePeriodSeconds".into(), json!(period));
                        if let Some(g) = m
                            .get("generation")
                            .and_then(Value::as_i64)
                            .filter(|g| *g > 0)
                        {
                            m.insert("generation".into(), json!(g + 1));
                        }
                        info.strategy.prepare_for_delete(&mut marked);
                        true
                    }
                    Some(_) => false,
                    None if info.strategy.graceful_delete(&marked) => {
                        let m = meta::metadata_mut(&mut marked);
                        m.insert("deletionTimestamp".into(), json!(now()));
                        m.insert("deletionGracePeriodSeconds".into(), json!(0));
                        info.strategy.prepare_for_delete(&mut marked);
                        true
                    }
                    None => false,
                }
            };
            if mark {
                if opts.dry_run {
                    return Ok(Deleted::Pending(present(info, marked).await?));
                }
                announced.take();
                match self
                    .storage
                    .update(&key, encode(&mut marked), cur_kv.mod_revision)
                    .await
                {
                    Ok(kv) => {
                        meta::set_resource_version(&mut marked, kv.mod_revision);
                        info.strategy.after_write(&marked, false).await;
                        return Ok(Deleted::Pending(present(info, marked).await?));
                    }
                    Err(StorageError::Conflict { .. }) => continue,
                    Err(e) => return Err(map_storage(info, name, e)),
                }
            }
            if opts.dry_run {
                return Ok(Deleted::Now(shown));
            }
            announced.take();
            match self.storage.delete(&key, Some(cur_kv.mod_revision)).await {
                Ok(kv) => {
                    let mut last = cur;
                    meta::set_resource_version(&mut last, kv.mod_revision);
                    info.strategy.release(&last).await;
                    info.strategy.after_write(&last, true).await;
                    let mut shown = shown;
                    meta::set_resource_version(&mut shown, kv.mod_revision);
                    return Ok(Deleted::Now(shown));
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(map_storage(info, name, e)),
            }
        }
        Err(ApiError::stale(target(info, name)))
    }

    /// Deletes every object matching the selectors (DELETE on a collection).
    pub async fn delete_collection(
        &self,
        info: &Resource,
        ns: Option<&str>,
        p: &ListParams,
        pre: &Preconditions,
        opts: &WriteOptions,
    ) -> Result<ListOutcome> {
        let mut listed = self
            .list(
                info,
                ns,
                &ListParams {
                    limit: None,
                    continue_token: None,
                    ..p.clone()
                },
            )
            .await?;
        let mut deleted = Vec::with_capacity(listed.items.len());
        for obj in listed.items.drain(..) {
            let name = meta::name(&obj).unwrap_or_default().to_string();
            let obj_ns = meta::namespace(&obj).map(String::from);
            match self
                .delete(
                    info,
                    obj_ns.as_deref(),
                    &name,
                    &Preconditions {
                        propagation: pre.propagation,
                        grace_period_seconds: pre.grace_period_seconds,
                        ..Default::default()
                    },
                    opts,
                )
                .await
            {
                Ok(Deleted::Now(o) | Deleted::Pending(o)) => deleted.push(o),
                Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        listed.items = deleted;
        listed.continue_token = None;
        Ok(listed)
    }
}

/// What a write of `body` to the object or one of its subresources
/// stores: with a `status` subresource, a write to the object keeps the
/// current status and a write to `status` changes only the status (as
/// upstream's status strategies); other subresources are the strategy's.
fn scope_to_subresource(
    info: &Resource,
    name: &str,
    subresource: Option<&str>,
    cur: &Value,
    body: &Value,
) -> Result<Value> {
    let has_status = info.find_subresource("status").is_some();
    let own = subresource.and_then(|sub| info.strategy.update_subresource(sub, cur, body));
    let mut new = match subresource {
        _ if own.is_some() => own.expect("checked")?,
        None => {
            let mut new = body.clone();
            if has_status {
                new["status"] = cur.get("status").cloned().unwrap_or(Value::Null);
            }
            new
        }
        Some("status") if has_status => {
            let mut new = cur.clone();
            new["status"] = body.get("status").cloned().unwrap_or(Value::Null);
            new
        }
        Some(other) => {
            return Err(ApiError::NotFound(Target::new(
                &info.group,
                &format!("{}/{other}", info.plural),
                name,
            )));
        }
    };
    if new.get("status").is_some_and(Value::is_null) {
        new.as_object_mut().map(|m| m.remove("status"));
    }
    Ok(new)
}

fn check_preconditions(
    info: &ResourceInfo,
    name: &str,
    cur: &Value,
    uid: Option<&str>,
    rv: Option<u64>,
) -> Result<()> {
    let cur_uid = meta::str_field(cur, "uid").unwrap_or_default();
    if let Some(uid) = uid.filter(|u| *u != cur_uid) {
        return Err(ApiError::Conflict(
            target(info, name),
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_uid}"
            ),
        ));
    }
    let cur_rv = meta::str_field(cur, "resourceVersion").unwrap_or_default();
    if let Some(rv) = rv.filter(|rv| rv.to_string() != cur_rv) {
        let _ = rv;
        return Err(ApiError::stale(target(info, name)));
    }
    Ok(())
}

/// The schema server-side apply and managed fields merge by: a built-in
/// kind's OpenAPI definition, a custom resource's CRD schema, or none
/// (types deduced from the values).
pub fn merge_schema(info: &ResourceInfo) -> Schema<'_> {
    if let Some(name) = wasm_apiserver_api::openapi::definitions::builtin_name(info)
        && let Some(def) = wasm_apiserver_api::openapi::definitions::builtin().get(&name)
    {
        return Schema::new(def);
    }
    match &info.schema {
        Some(s) => Schema::new(s),
        None => Schema(None),
    }
}

/// The field manager of a write, as `managed::Manager`.
pub fn manager<'a>(
    info: &'a ResourceInfo,
    subresource: Option<&'a str>,
    opts: &'a WriteOptions,
    api_version: &'a str,
    now: &'a str,
) -> managed::Manager<'a> {
    managed::Manager {
        name: &opts.field_manager,
        subresource,
        api_version,
        has_status: info.find_subresource("status").is_some(),
        now,
    }
}

/// Records a create (`old` = `None`) or update in `new`'s managed fields
/// (an apply has recorded its own).
fn track_managed_fields(
    info: &ResourceInfo,
    subresource: Option<&str>,
    old: Option<&Value>,
    new: &mut Value,
    opts: &WriteOptions,
) {
    if opts.applying {
        return;
    }
    if opts.field_manager.is_empty() {
        // Nobody to record: the stored entries stay as they were.
        let kept = old
            .and_then(|o| o["metadata"].get("managedFields"))
            .cloned();
        let meta = meta::metadata_mut(new);
        match kept {
            Some(k) => meta.insert("managedFields".into(), k),
            None => meta.remove("managedFields"),
        };
        return;
    }
    let api_version = info.api_version();
    let now = now();
    let m = manager(info, subresource, opts, &api_version, &now);
    managed::record_update(old, new, merge_schema(info), &m);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terminating(seconds_ahead: i64, period: i64) -> Value {
        let at = chrono::Utc::now() + chrono::Duration::seconds(seconds_ahead);
        json!({"metadata": {
            "deletionTimestamp": meta::timestamp(at),
            "deletionGracePeriodSeconds": period,
        }})
    }

    #[test]
    fn only_a_shorter_grace_period_changes_a_terminating_object() {
        let cur = terminating(30, 30);
        assert_eq!(shorten_grace(&cur, None), Grace::Pending);
        assert_eq!(shorten_grace(&cur, Some(30)), Grace::Pending);
        assert_eq!(shorten_grace(&cur, Some(60)), Grace::Pending);
        match shorten_grace(&cur, Some(10)) {
            Grace::Shorten { period, timestamp } => {
                assert_eq!(period, 10);
                let at = chrono::DateTime::parse_from_rfc3339(&timestamp).unwrap();
                let ahead = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
                assert!((8..=10).contains(&ahead.num_seconds()), "{ahead:?}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            shorten_grace(&cur, Some(0)),
            Grace::Shorten { period: 0, .. }
        ));
        // A negative period is one second.
        assert!(matches!(
            shorten_grace(&cur, Some(-5)),
            Grace::Shorten { period: 1, .. }
        ));
    }

    #[test]
    fn a_run_out_grace_period_is_never_moved_into_the_past() {
        // Marked 60 s ago with 30 s: asking for 5 s would land 85 s ago.
        let cur = terminating(-30, 30);
        match shorten_grace(&cur, Some(5)) {
            Grace::Shorten { period, timestamp } => {
                assert_eq!(period, 1, "still graceful, so its kubelet deletes it");
                let at = chrono::DateTime::parse_from_rfc3339(&timestamp).unwrap();
                assert!((chrono::Utc::now() - at.with_timezone(&chrono::Utc)).num_seconds() <= 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            shorten_grace(&cur, Some(0)),
            Grace::Shorten { period: 0, .. }
        ));
    }

    #[test]
    fn no_grace_period_leaves_it_to_finalizers() {
        assert_eq!(shorten_grace(&terminating(0, 0), Some(10)), Grace::Over);
        let no_period = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(shorten_grace(&no_period, None), Grace::Over);
    }
}
