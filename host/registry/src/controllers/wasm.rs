//! Controllers as wasm components: `Controller` objects
//! (`controllers.wasm-apiserver.io/v1alpha1`) run here, on the leader, in
//! the same shape as the native controllers (a [`Queue`] per controller,
//! workers through [`super::run_until`], leader election), with their logic
//! in a component of the `controller-plugin` world.
//!
//! * **Identity.** Every read and write a component makes is a call of a
//!   [`Client`] acting as the ServiceAccount `spec.serviceAccountName`
//!   (RBAC per call, admission on writes, audit). The watches that feed
//!   the queue are the host's, but a controller only starts when its
//!   ServiceAccount may `list` and `watch` every kind it follows, as an
//!   operator's informers would need.
//! * **Keys.** Events of `spec.for` queue their own key; events of
//!   `spec.owns` queue the controlling owner (an `ownerReference` with
//!   `controller: true` of the primary kind); `spec.watches` map by
//!   [`Mapping`]. Each key remembers why it was first queued.
//! * **Echoes.** A child's event that is the echo of the controller's own
//!   write (the same object at the `resourceVersion` that write returned)
//!   does not queue the owner again: the reconcile that wrote it already
//!   had the result. Every other change of a child does (drift, another
//!   writer, a delete), as does every event of `spec.for`. (controller-
//!   runtime queues echoes too: a second reconcile per write that only
//!   finds everything in place.) [`Echoes`].
//! * **Swaps.** A new generation is loaded beside the running one; when it
//!   loads, the queue (with its keys and backoffs) passes to it: the
//!   component is swapped in place when only module, configuration or
//!   limits changed, otherwise the old workers finish their keys and new
//!   watches start (their first list queues every object once). A
//!   generation that fails to load leaves the previous one running
//!   (`status.phase: Failed`, `activeGeneration`).
//! * **Containment.** A trap, a timeout or a memory bomb fails only the
//!   reconcile of its key (backoff 5 ms → 1000 s); the error is in
//!   `status.lastError` and a `Warning` Event on the `Controller`.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, AuditCalls, Client, Metrics, Reconcile};
use crate::options::{ListParams, Preconditions, Propagation};
use crate::resources::Resource;
use crate::store::Objects;
use arc_swap::ArcSwap;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasm_apiserver_api::cel::authz::Authorize;
use wasm_apiserver_api::controller::{self as spec_api, ControllerSpec, KindRef, Mapping, Watch};
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_plugins::writes::{DeleteOptions, PatchKind, WriteAccess, WriteError, Writes};
use wasm_apiserver_plugins::{
    ClusterAccess, ControllerPlugin, Gvr, Outcome, ReconcileReason, ReconcileRequest, Target,
    UserInfo,
};

/// The `--controllers` name that turns the manager on (or off).
pub const CONTROLLER: &str = "wasm-controllers";

/// The manager's own identity: it records controllers' status and the
/// Events about their failures.
pub const NAME: &str = "wasm-controller-manager";

/// How often a running controller's status is brought up to date.
const STATUS_PERIOD: Duration = Duration::from_secs(2);

/// A primary object: namespace (for namespaced kinds) and name.
type Key = (Option<String>, String);

/// The objects a controller wrote, at the `resourceVersion` each write
/// returned, until their watch events (the echoes) arrive. A child's event
/// may arrive before the write that made it has returned: while a key's
/// reconcile runs, the events of its children are held and judged when it
/// ends, once all its writes are known.
#[derive(Default)]
struct Echoes {
    written: Mutex<HashMap<EchoKey, String>>,
    /// The keys being reconciled, with their children's events so far.
    held: Mutex<HashMap<Key, Vec<(EchoKey, String)>>>,
}

/// An object: its resource's group and plural, namespace and name.
type EchoKey = (String, String, Option<String>, String);

/// At most this many writes wait for their echo; a write whose echo never
/// comes (a no-op apply writes nothing) is forgotten when the map is full,
/// at the cost of one more reconcile.
const MAX_ECHOES: usize = 4096;

impl Echoes {
    fn key(res: &Resource, obj: &Value) -> Option<(EchoKey, String)> {
        Some((
            (
                res.group.clone(),
                res.plural.clone(),
                meta::namespace(obj).map(String::from),
                meta::name(obj)?.to_owned(),
            ),
            meta::str_field(obj, "resourceVersion")?.to_owned(),
        ))
    }

    /// Remembers the object a write returned.
    fn wrote(&self, res: &Resource, obj: &Value) {
        let Some((key, rv)) = Self::key(res, obj) else {
            return;
        };
        let mut map = self.written.lock().expect("echoes lock");
        if map.len() >= MAX_ECHOES && !map.contains_key(&key) {
            map.clear();
        }
        map.insert(key, rv);
    }

    /// Whether `key` at `rv` is a remembered write's echo (then forgotten).
    fn take(&self, key: &EchoKey, rv: &str) -> bool {
        let mut map = self.written.lock().expect("echoes lock");
        if map.get(key).is_some_and(|w| w == rv) {
            map.remove(key);
            return true;
        }
        false
    }

    /// `owner`'s reconcile starts.
    fn begin(&self, owner: &Key) {
        let mut held = self.held.lock().expect("echoes lock");
        held.entry(owner.clone()).or_default();
    }

    /// Whether a child's (non-delete) event queues its `owner` now: not
    /// when it echoes the owner's own write, nor while the owner's
    /// reconcile runs (held until [`Echoes::end`]).
    fn child_changed(&self, owner: &Key, res: &Resource, obj: &Value) -> bool {
        let Some((key, rv)) = Self::key(res, obj) else {
            return true;
        };
        if let Some(events) = self.held.lock().expect("echoes lock").get_mut(owner) {
            events.push((key, rv));
            return false;
        }
        !self.take(&key, &rv)
    }

    /// `owner`'s reconcile ended: whether a child's event held meanwhile
    /// was not the echo of its writes (then it is queued again).
    fn end(&self, owner: &Key) -> bool {
        let events = self
            .held
            .lock()
            .expect("echoes lock")
            .remove(owner)
            .unwrap_or_default();
        events
            .iter()
            .filter(|(key, rv)| !self.take(key, rv))
            .count()
            > 0
    }
}

/// The identity of ServiceAccount `ns/name`, as its tokens authenticate.
pub fn service_account_user(ns: &str, name: &str) -> UserInfo {
    UserInfo {
        username: format!("system:serviceaccount:{ns}:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into(),
        ],
        ..Default::default()
    }
}

/// What a wasm controller needs from the server.
#[derive(Clone)]
pub struct Deps {
    pub objects: Objects,
    pub authorize: Option<Arc<dyn Authorize>>,
    pub audit: Option<Arc<dyn AuditCalls>>,
    pub metrics: Arc<Metrics>,
}

impl Deps {
    fn client(&self, name: &str, user: UserInfo) -> Client {
        Client::with_user(self.objects.clone(), name, user, self.authorize.clone())
            .with_audit(self.audit.clone())
    }
}

fn info(objects: &Objects) -> Arc<Resource> {
    objects
        .resources
        .builtin(spec_api::GROUP, spec_api::VERSION, spec_api::PLURAL)
}

/// The resource serving `kind`.
fn resource_of(objects: &Objects, k: &KindRef) -> Result<Arc<Resource>, String> {
    crate::cluster::resource_for_kind(objects, &k.api_version, &k.kind)
}

/// What a running controller shares across swaps.
struct Shared {
    name: String,
    queue: Arc<Queue<Key>>,
    reasons: Mutex<HashMap<Key, ReconcileReason>>,
    plugin: ArcSwap<ControllerPlugin>,
    reconciles: AtomicU64,
    failures: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Records Events about the controller (as the manager).
    manager: Client,
    /// Its writes whose events are still to come.
    echoes: Arc<Echoes>,
}

impl Shared {
    /// Queues `key`, remembering `reason` unless one is already waiting.
    fn add(&self, key: Key, reason: ReconcileReason) {
        self.reasons
            .lock()
            .expect("reasons lock")
            .entry(key.clone())
            .or_insert(reason);
        self.queue.add(key);
    }

    fn remember(&self, key: &Key, reason: ReconcileReason) {
        self.reasons
            .lock()
            .expect("reasons lock")
            .entry(key.clone())
            .or_insert(reason);
    }

    async fn failed(&self, key: &Key, message: String) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.remember(key, ReconcileReason::Retry);
        let text = match &key.0 {
            Some(ns) => format!("{ns}/{}: {message}", key.1),
            None => format!("{}: {message}", key.1),
        };
        let changed = {
            let mut last = self.last_error.lock().expect("error lock");
            let changed = last.as_deref() != Some(&text);
            *last = Some(text.clone());
            changed
        };
        // One log line and one Event per distinct error, not one per retry.
        if changed {
            tracing::warn!(controller = %self.name, error = %text, "reconcile failed; retrying with backoff");
            let regarding = json!({"apiVersion": format!("{}/{}", spec_api::GROUP, spec_api::VERSION),
                "kind": spec_api::KIND, "metadata": {"name": self.name}});
            self.manager
                .event(&regarding, "Warning", "ReconcileError", &text)
                .await;
        }
    }
}

/// The reconciler the shared workers run: one component call per key.
struct WasmReconcile {
    shared: Arc<Shared>,
    resource: Gvr,
}

#[async_trait::async_trait]
impl Reconcile for WasmReconcile {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action, ApiError> {
        self.shared.echoes.begin(key);
        // Ends the hold on its children's events however the call ends.
        let _held = Held {
            shared: &self.shared,
            key,
        };
        self.reconcile_once(key).await
    }
}

/// A reconcile in flight: on drop, a child's event that came meanwhile and
/// was not the echo of its writes queues the key again.
struct Held<'a> {
    shared: &'a Shared,
    key: &'a Key,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.shared.echoes.end(self.key) {
            self.shared.add(self.key.clone(), ReconcileReason::Owned);
        }
    }
}

impl WasmReconcile {
    async fn reconcile_once(&self, key: &Key) -> Result<Action, ApiError> {
        let shared = &self.shared;
        let reason = shared
            .reasons
            .lock()
            .expect("reasons lock")
            .remove(key)
            .unwrap_or(ReconcileReason::Changed);
        let request = ReconcileRequest {
            uid: uuid::Uuid::new_v4().to_string(),
            resource: self.resource.clone(),
            namespace: key.0.clone(),
            name: key.1.clone(),
            reason,
            retries: shared.queue.failures(key),
        };
        let plugin = shared.plugin.load_full();
        shared.reconciles.fetch_add(1, Ordering::Relaxed);
        let message = match plugin.reconcile(&request).await {
            Ok(Ok(Outcome::Done)) => return Ok(Action::Done),
            Ok(Ok(Outcome::RequeueAfter(d))) => {
                shared.remember(key, ReconcileReason::Requeued);
                return Ok(Action::RequeueAfter(d));
            }
            Ok(Err(message)) => message,
            Err(e) => e.to_string(),
        };
        shared.failed(key, message.clone()).await;
        Err(ApiError::Internal(message))
    }
}

/// A controller's writes, as calls of its client.
#[derive(Clone)]
struct ControllerWrites {
    client: Client,
    echoes: Arc<Echoes>,
    /// The `spec.owns` kinds (group, plural): only writes to them have
    /// echoes worth remembering (no other follower reads them).
    owned: Arc<[(String, String)]>,
}

fn write_error(e: ApiError) -> WriteError {
    let causes = match &e {
        ApiError::Invalid(_, causes) | ApiError::Custom { causes, .. } => causes
            .iter()
            .map(|c| wasm_apiserver_plugins::FieldCause {
                field: c.field.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
        _ => Vec::new(),
    };
    WriteError {
        code: e.code(),
        reason: e.reason().to_owned(),
        message: e.to_string(),
        causes,
    }
}

impl ControllerWrites {
    /// Remembers the object a write returned (see [`Echoes`]).
    fn wrote(&self, res: &Resource, obj: Value) -> Value {
        if self
            .owned
            .iter()
            .any(|(g, p)| *g == res.group && *p == res.plural)
        {
            self.echoes.wrote(res, &obj);
        }
        obj
    }

    fn resource(&self, target: &Target) -> Result<Arc<Resource>, WriteError> {
        let objects = &self.client.objects;
        let found = match target {
            Target::Kind { api_version, kind } => resource_of(
                objects,
                &KindRef {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                },
            ),
            Target::Resource {
                group,
                version,
                resource,
            } => objects
                .resources
                .get(group, version, resource)
                .ok_or_else(|| format!("no resource {resource:?} in {group}/{version}")),
        };
        found.map_err(|m| WriteError::new(404, "NotFound", m))
    }
}

/// The namespace a write addresses: the given one, else the object's own;
/// none for cluster-scoped kinds.
fn namespace_of<'a>(
    res: &Resource,
    given: Option<&'a str>,
    obj: &'a Value,
) -> Result<Option<&'a str>, WriteError> {
    if !res.namespaced {
        return Ok(None);
    }
    given
        .or_else(|| meta::namespace(obj))
        .map(Some)
        .ok_or_else(|| {
            WriteError::new(
                400,
                "BadRequest",
                format!("{} is namespaced: a namespace is required", res.kind),
            )
        })
}

#[async_trait::async_trait]
impl Writes for ControllerWrites {
    async fn create(
        &self,
        target: &Target,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, WriteError> {
        let res = self.resource(target)?;
        let ns = namespace_of(&res, namespace, &object)?.map(String::from);
        self.client
            .create(&res, ns.as_deref(), object)
            .await
            .map(|o| self.wrote(&res, o))
            .map_err(write_error)
    }

    async fn update(
        &self,
        target: &Target,
        object: Value,
        subresource: Option<&str>,
    ) -> Result<Value, WriteError> {
        let res = self.resource(target)?;
        let ns = namespace_of(&res, None, &object)?.map(String::from);
        let name = meta::name(&object)
            .ok_or_else(|| WriteError::new(400, "BadRequest", "metadata.name is required"))?
            .to_owned();
        self.client
            .replace(&res, ns.as_deref(), &name, subresource, object)
            .await
            .map(|o| self.wrote(&res, o))
            .map_err(write_error)
    }

    async fn patch(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: Value,
        subresource: Option<&str>,
    ) -> Result<Value, WriteError> {
        use wasm_apiserver_api::patch::PatchType;
        let res = self.resource(target)?;
        let ns = namespace_of(&res, namespace, &Value::Null)?;
        let kind = match kind {
            PatchKind::Json => PatchType::Json,
            PatchKind::Merge => PatchType::Merge,
            PatchKind::Strategic => PatchType::StrategicMerge,
        };
        self.client
            .patch(&res, ns, name, subresource, kind, &patch)
            .await
            .map(|o| self.wrote(&res, o))
            .map_err(write_error)
    }

    async fn apply(
        &self,
        target: &Target,
        configuration: Value,
        force: bool,
        subresource: Option<&str>,
    ) -> Result<Value, WriteError> {
        let res = self.resource(target)?;
        let ns = namespace_of(&res, None, &configuration)?.map(String::from);
        let name = meta::name(&configuration)
            .ok_or_else(|| WriteError::new(400, "BadRequest", "metadata.name is required"))?
            .to_owned();
        self.client
            .apply(
                &res,
                ns.as_deref(),
                &name,
                subresource,
                &configuration,
                force,
            )
            .await
            .map(|o| self.wrote(&res, o))
            .map_err(write_error)
    }

    async fn delete(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), WriteError> {
        let res = self.resource(target)?;
        let ns = namespace_of(&res, namespace, &Value::Null)?;
        let propagation = match options.propagation_policy.as_deref() {
            None => None,
            Some(p) => Some(Propagation::parse(p).ok_or_else(|| {
                WriteError::new(
                    400,
                    "BadRequest",
                    format!("propagationPolicy: Unsupported value: {p:?}"),
                )
            })?),
        };
        let resource_version = match options.resource_version.as_deref() {
            None => None,
            Some(rv) => Some(rv.parse().map_err(|_| {
                WriteError::new(400, "BadRequest", format!("invalid resourceVersion {rv:?}"))
            })?),
        };
        let pre = Preconditions {
            uid: options.uid.clone(),
            resource_version,
            propagation,
            // The WIT's delete options carry no grace period: the
            // resource's default.
            grace_period_seconds: None,
        };
        self.client
            .delete(&res, ns, name, &pre)
            .await
            .map(drop)
            .map_err(write_error)
    }

    /// In parallel, a task each: independent objects then share the
    /// store's commits, and their admission and merges run on every core.
    /// (A reconcile that ends first, by its timeout, leaves them to
    /// finish: each write is whole or not made.)
    async fn apply_all(
        &self,
        configurations: Vec<(Target, Value)>,
        force: bool,
    ) -> Vec<Result<Value, WriteError>> {
        let tasks: Vec<_> = configurations
            .into_iter()
            .map(|(target, c)| {
                let this = self.clone();
                tokio::spawn(async move { this.apply(&target, c, force, None).await })
            })
            .collect();
        let mut results = Vec::with_capacity(tasks.len());
        for task in tasks {
            results.push(task.await.unwrap_or_else(|e| {
                Err(WriteError::new(500, "InternalError", format!("apply: {e}")))
            }));
        }
        results
    }

    async fn event(&self, regarding: &Value, warning: bool, reason: &str, note: &str) {
        let kind = if warning { "Warning" } else { "Normal" };
        self.client.event(regarding, kind, reason, note).await;
    }
}

/// One running controller.
struct Running {
    generation: i64,
    spec: ControllerSpec,
    shared: Arc<Shared>,
    /// Watches, resync and status: aborted on a swap that changes what is
    /// watched, and on removal.
    followers: tokio::task::JoinHandle<()>,
    /// Tells the workers to finish their keys and return.
    stop: tokio::sync::watch::Sender<bool>,
    /// `None` once handed over to finish on their own (a swap).
    workers: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    fn digest(&self) -> String {
        self.shared.plugin.load().digest().to_owned()
    }
}

/// Stops at once: a deleted controller, or this replica losing the lead.
impl Drop for Running {
    fn drop(&mut self) {
        self.followers.abort();
        if let Some(w) = &self.workers {
            w.abort();
        }
    }
}

/// The controllers this replica runs, while it leads.
struct Manager {
    deps: Deps,
    running: tokio::sync::Mutex<HashMap<String, Running>>,
}

/// Starts the manager: while this replica leads, it follows `Controller`
/// objects and runs them; on losing the lead every controller stops.
pub fn spawn(deps: Deps, leadership: Leadership) {
    tokio::spawn(leadership.run_while_leading(move || {
        let manager = Arc::new(Manager {
            deps: deps.clone(),
            running: Default::default(),
        });
        async move { manager.follow().await }
    }));
}

impl Manager {
    async fn follow(self: Arc<Self>) {
        let objects = self.deps.objects.clone();
        let info = info(&objects);
        let this = self.clone();
        objects
            .follow(
                &info,
                |_| {},
                move |obj, deleted| {
                    let this = this.clone();
                    async move { this.reconcile(&obj, deleted).await }
                },
            )
            .await;
    }

    /// Brings the running set in line with one `Controller` object.
    async fn reconcile(&self, obj: &Value, deleted: bool) {
        let objects = &self.deps.objects;
        let name = meta::name(obj).unwrap_or_default().to_string();
        let mut running = self.running.lock().await;
        if deleted || meta::str_field(obj, "deletionTimestamp").is_some() {
            if running.remove(&name).is_some() {
                self.deps.metrics.unregister(&name);
                tracing::info!(controller = %name, "controller stopped");
            }
            return;
        }
        let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
        if running
            .get(&name)
            .is_some_and(|r| r.generation == generation)
        {
            return;
        }
        let outcome = self.start(&name, generation, obj, &mut running).await;
        let mut status = obj.get("status").cloned().unwrap_or_else(|| json!({}));
        status["observedGeneration"] = json!(generation);
        match outcome {
            Ok(()) => {
                let r = &running[&name];
                status["phase"] = json!("Active");
                status["digest"] = json!(format!("sha256:{}", r.digest()));
                if let Some(s) = status.as_object_mut() {
                    s.remove("message");
                    s.remove("activeGeneration");
                }
                tracing::info!(controller = %name, generation, "controller active");
            }
            Err(message) => {
                tracing::warn!(controller = %name, generation, error = %message, "controller failed to start");
                status["phase"] = json!("Failed");
                status["message"] = json!(message);
                match running.get(&name) {
                    Some(r) => {
                        status["activeGeneration"] = json!(r.generation);
                        status["digest"] = json!(format!("sha256:{}", r.digest()));
                    }
                    None => {
                        if let Some(s) = status.as_object_mut() {
                            s.remove("activeGeneration");
                            s.remove("digest");
                        }
                    }
                }
            }
        }
        objects
            .record_status(&info(objects), obj, status, NAME)
            .await;
    }

    /// Loads generation `generation` of controller `name` and runs it,
    /// taking over the queue of the running one.
    async fn start(
        &self,
        name: &str,
        generation: i64,
        obj: &Value,
        running: &mut HashMap<String, Running>,
    ) -> Result<(), String> {
        let deps = &self.deps;
        let objects = &deps.objects;
        let spec = ControllerSpec::parse(&obj["spec"])?;
        let (sa_ns, sa_name) = spec.service_account()?;
        let client = deps.client(name, service_account_user(sa_ns, sa_name));
        // The kinds it follows, and its right to list and watch them.
        let primary = resource_of(objects, &spec.for_kind).map_err(|m| format!("spec.for: {m}"))?;
        let owned = spec
            .owns
            .iter()
            .enumerate()
            .map(|(i, k)| resource_of(objects, k).map_err(|m| format!("spec.owns[{i}]: {m}")))
            .collect::<Result<Vec<_>, _>>()?;
        let watched = spec
            .watches
            .iter()
            .enumerate()
            .map(|(i, w)| {
                resource_of(objects, &w.kind_ref())
                    .map(|r| (r, w.clone()))
                    .map_err(|m| format!("spec.watches[{i}]: {m}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for res in std::iter::once(&primary)
            .chain(&owned)
            .chain(watched.iter().map(|(r, _)| r))
        {
            for verb in ["list", "watch"] {
                client
                    .allowed(verb, res, None)
                    .map_err(|e| format!("spec.serviceAccountName: {e}"))?;
            }
        }
        // The component, with reads and writes as the ServiceAccount.
        let admission = objects
            .admission
            .as_ref()
            .ok_or("the server runs without a plugin runtime")?;
        let bytes = admission.module_bytes(&spec.module).await?;
        let l = &spec.limits;
        let limits = wasm_apiserver_plugins::Limits {
            timeout: Duration::from_millis(
                l.timeout_millis.unwrap_or(spec_api::DEFAULT_TIMEOUT_MILLIS),
            ),
            max_memory_bytes: l
                .memory_bytes
                .unwrap_or(wasm_apiserver_plugins::Limits::default().max_memory_bytes),
            max_concurrency: spec.workers as usize,
            ..Default::default()
        };
        let cluster = ClusterAccess {
            reads: Arc::new(crate::cluster::ClusterReads::as_client(client.clone())),
            grants: Vec::new(),
            all_kinds: true,
            max_calls: l.max_cluster_reads.unwrap_or(spec_api::DEFAULT_READS),
            max_bytes: l
                .max_cluster_read_bytes
                .unwrap_or(wasm_apiserver_api::admission::DEFAULT_CLUSTER_READ_BYTES),
        };
        // One record of writes across swaps, as the queue.
        let echoes = running
            .get(name)
            .map_or_else(Default::default, |r| r.shared.echoes.clone());
        let writes = WriteAccess {
            writes: Arc::new(ControllerWrites {
                client: client.clone(),
                echoes: echoes.clone(),
                owned: owned
                    .iter()
                    .map(|r| (r.group.clone(), r.plural.clone()))
                    .collect(),
            }),
            max_writes: l.max_writes.unwrap_or(spec_api::DEFAULT_WRITES),
        };
        let plugin = admission
            .runtime()
            .load_controller(name, &bytes, &spec.config_string(), limits, cluster, writes)
            .await
            .map_err(|e| e.to_string())?;

        // Swap in place when only the component changed.
        if let Some(r) = running.get_mut(name)
            && r.spec.same_watches(&spec)
        {
            r.shared.plugin.store(Arc::new(plugin));
            r.generation = generation;
            r.spec = spec;
            return Ok(());
        }
        let shared = match running.remove(name) {
            Some(mut old) => {
                // The old workers finish their keys; the queue passes on.
                drop(old.workers.take());
                let _ = old.stop.send(true);
                old.shared.plugin.store(Arc::new(plugin));
                old.shared.clone()
            }
            None => {
                let queue = Queue::new(name);
                deps.metrics.register(queue.clone());
                Arc::new(Shared {
                    name: name.to_owned(),
                    queue,
                    reasons: Default::default(),
                    plugin: ArcSwap::from_pointee(plugin),
                    reconciles: AtomicU64::new(0),
                    failures: AtomicU64::new(0),
                    last_error: Mutex::new(None),
                    manager: deps.client(NAME, super::controller_user(NAME)),
                    echoes,
                })
            }
        };
        let reconciler = Arc::new(WasmReconcile {
            shared: shared.clone(),
            resource: Gvr {
                group: primary.group.clone(),
                version: primary.version.clone(),
                resource: primary.plural.clone(),
            },
        });
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let workers = tokio::spawn(super::run_until(
            shared.queue.clone(),
            reconciler,
            spec.workers as usize,
            stopped,
        ));
        let followers = tokio::spawn(follow_all(
            objects.clone(),
            shared.clone(),
            primary,
            owned,
            watched,
            spec.for_kind.clone(),
            spec.resync_seconds(),
        ));
        running.insert(
            name.to_owned(),
            Running {
                generation,
                spec,
                shared,
                followers,
                stop,
                workers: Some(workers),
            },
        );
        Ok(())
    }
}

/// The key of the controlling owner of `child`, when it is of the primary
/// kind.
fn owner_key(child: &Value, primary: &Resource, for_kind: &KindRef) -> Option<Key> {
    let (group, _) = for_kind.group_version();
    let owner = child["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?;
    let api_version = owner["apiVersion"].as_str().unwrap_or_default();
    let owner_group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if owner["kind"].as_str() != Some(&for_kind.kind) || owner_group != group {
        return None;
    }
    let ns = primary
        .namespaced
        .then(|| meta::namespace(child).map(String::from))
        .flatten();
    Some((ns, owner["name"].as_str()?.to_owned()))
}

/// The primary keys a watched object maps to.
async fn watched_keys(
    objects: &Objects,
    obj: &Value,
    watch: &Watch,
    primary: &Resource,
) -> Vec<Key> {
    let ns = meta::namespace(obj).map(String::from);
    let name = meta::name(obj).unwrap_or_default().to_owned();
    match watch.map {
        Mapping::SameName => vec![(ns.filter(|_| primary.namespaced), name)],
        Mapping::Namespace => ns.map(|n| vec![(None, n)]).unwrap_or_default(),
        Mapping::All => every_key(objects, primary).await,
    }
}

/// Every primary object's key.
async fn every_key(objects: &Objects, primary: &Resource) -> Vec<Key> {
    match objects.list(primary, None, &ListParams::default()).await {
        Ok(listed) => listed.items.iter().filter_map(key_of).collect(),
        Err(e) => {
            tracing::debug!(error = %e, "could not list primary objects");
            Vec::new()
        }
    }
}

fn key_of(obj: &Value) -> Option<Key> {
    Some((
        meta::namespace(obj).map(String::from),
        meta::name(obj)?.to_owned(),
    ))
}

/// Follows the primary, owned and watched kinds, resyncs, and keeps the
/// status current. Aborted on swap or removal.
async fn follow_all(
    objects: Objects,
    shared: Arc<Shared>,
    primary: Arc<Resource>,
    owned: Vec<Arc<Resource>>,
    watched: Vec<(Arc<Resource>, Watch)>,
    for_kind: KindRef,
    resync_seconds: u64,
) {
    let mut tasks = Vec::new();
    {
        let (objects, shared, primary) = (objects.clone(), shared.clone(), primary.clone());
        tasks.push(tokio::spawn(async move {
            let initial = shared.clone();
            objects
                .follow(
                    &primary,
                    move |items| {
                        for key in items.iter().filter_map(key_of) {
                            initial.add(key, ReconcileReason::Initial);
                        }
                    },
                    move |obj, deleted| {
                        if let Some(key) = key_of(&obj) {
                            let reason = if deleted {
                                ReconcileReason::Deleted
                            } else {
                                ReconcileReason::Changed
                            };
                            shared.add(key, reason);
                        }
                        async {}
                    },
                )
                .await
        }));
    }
    for child in owned {
        let (objects, shared, primary, for_kind, child_res) = (
            objects.clone(),
            shared.clone(),
            primary.clone(),
            for_kind.clone(),
            child.clone(),
        );
        tasks.push(tokio::spawn(async move {
            objects
                .follow(
                    &child,
                    |_| {},
                    move |obj, deleted| {
                        if let Some(key) = owner_key(&obj, &primary, &for_kind)
                            && (deleted || shared.echoes.child_changed(&key, &child_res, &obj))
                        {
                            shared.add(key, ReconcileReason::Owned);
                        }
                        async {}
                    },
                )
                .await
        }));
    }
    for (res, watch) in watched {
        let (objects2, shared, primary) = (objects.clone(), shared.clone(), primary.clone());
        let selector = watch
            .label_selector
            .as_ref()
            .and_then(|s| s.to_label_selector().ok());
        tasks.push(tokio::spawn(async move {
            let objects = objects2.clone();
            objects2
                .follow(
                    &res,
                    |_| {},
                    move |obj, _| {
                        let (objects, shared, primary, watch, selector) = (
                            objects.clone(),
                            shared.clone(),
                            primary.clone(),
                            watch.clone(),
                            selector.clone(),
                        );
                        async move {
                            if selector.as_ref().is_some_and(|s| !s.matches_object(&obj)) {
                                return;
                            }
                            for key in watched_keys(&objects, &obj, &watch, &primary).await {
                                shared.add(key, ReconcileReason::Watched);
                            }
                        }
                    },
                )
                .await
        }));
    }
    if resync_seconds > 0 {
        let (objects, shared, primary) = (objects.clone(), shared.clone(), primary.clone());
        tasks.push(tokio::spawn(async move {
            let period = Duration::from_secs(resync_seconds);
            loop {
                tokio::time::sleep(period).await;
                for key in every_key(&objects, &primary).await {
                    shared.add(key, ReconcileReason::Resync);
                }
            }
        }));
    }
    let _abort = super::AbortOnDrop(tasks);
    // The status, while running: queue depth, counts and the last error.
    let info = info(&objects);
    loop {
        tokio::time::sleep(STATUS_PERIOD).await;
        let Ok(obj) = objects.get(&info, None, &shared.name).await else {
            continue;
        };
        let mut status = obj.get("status").cloned().unwrap_or_else(|| json!({}));
        status["queueDepth"] = json!(shared.queue.len());
        status["reconciles"] = json!(shared.reconciles.load(Ordering::Relaxed));
        status["failures"] = json!(shared.failures.load(Ordering::Relaxed));
        if let Some(e) = shared.last_error.lock().expect("error lock").clone() {
            status["lastError"] = json!(e);
        }
        objects.record_status(&info, &obj, status, NAME).await;
    }
}
