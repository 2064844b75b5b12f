//! The controllers layer: logic that acts by itself, as kube-controller-
//! manager's controllers do beside kube-apiserver.
//!
//! Every controller has the same shape (client-go's and kube-runtime's):
//! * it is a **client of the registry** ([`Client`]): it reads and writes
//!   through the same [`Objects`] calls as any request, so admission runs on
//!   its writes, under an **identity of its own**
//!   (`system:serviceaccount:kube-system:<controller>`), checked by the
//!   server's authorizer against upstream's `system:controller:<name>`
//!   role; it never touches storage;
//! * it learns of changes from the registry's watches (the metadata
//!   [`informer`](crate::informer), or [`Objects::follow`]) and turns them
//!   into keys on its own work [`Queue`](queue::Queue) (de-duplicated, one
//!   worker per key at a time, failures retried with backoff);
//! * workers [`run`] its [`Reconcile`] on each key;
//! * singleton controllers run on one replica at a time, the holder of a
//!   `coordination.k8s.io` Lease ([`leader`]).
//!
//! The native controllers here: the garbage collector ([`gc`]), the
//! `default` ServiceAccount and `kube-root-ca.crt` publishers
//! ([`serviceaccounts`]), the `kubernetes` Service ([`apiservice`]), and
//! the background audit of policies with its reports ([`policy_audit`]),
//! which runs on the lowest-priority thread of [`background`].

pub mod apiservice;
pub mod availability;
pub mod background;
pub mod bootstrap;
pub mod certificates;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslicemirroring;
pub mod extension_auth;
pub mod gc;
pub(crate) mod history;
pub mod job;
pub mod leader;
pub mod node_graph;
pub mod nodelifecycle;
pub mod podgc;
pub mod policy_audit;
pub mod queue;
pub mod replicaset;
pub mod resourcequota;
pub mod scheduler;
pub mod scheduler_plugins;
pub mod serviceaccounts;
pub mod statefulset;
pub mod ttlafterfinished;
pub mod wasm;

use crate::options::{Deleted, ListOutcome, ListParams, Preconditions, WriteOptions};
use crate::resources::Resource;
use crate::store::Objects;
use futures::FutureExt;
use queue::Queue;
use serde_json::{Value, json};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasm_apiserver_api::cel::authz::Authorize;
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::rbac::Attributes;
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_plugins::UserInfo;

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Done until the key is queued again.
    Done,
    /// Look again after this long.
    RequeueAfter(Duration),
}

/// A controller's logic for one key (controller-runtime's `Reconciler`).
#[async_trait::async_trait]
pub trait Reconcile: Send + Sync + 'static {
    type Key: Clone + Eq + Hash + Debug + Send + Sync + 'static;
    async fn reconcile(&self, key: &Self::Key) -> Result<Action>;
}

/// Runs `workers` workers taking keys off `queue` until the task is
/// aborted. A failing (or panicking) reconcile is retried with the key's
/// backoff; it never stops the others.
pub async fn run<R: Reconcile>(queue: Arc<Queue<R::Key>>, reconciler: Arc<R>, workers: usize) {
    let (_keep, stop) = tokio::sync::watch::channel(false);
    run_until(queue, reconciler, workers, stop).await;
    std::future::pending::<()>().await;
}

/// As [`run`], until `stop` turns true: then each worker finishes the key
/// it holds and returns (a controller swapped to a new version hands its
/// queue over without losing or doubling a key). Aborting the task aborts
/// the workers at once.
pub async fn run_until<R: Reconcile>(
    queue: Arc<Queue<R::Key>>,
    reconciler: Arc<R>,
    workers: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let workers = workers.max(1);
    queue.set_workers(workers);
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (queue, reconciler, mut stop) = (queue.clone(), reconciler.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let key = tokio::select! {
                    key = queue.get() => key,
                    _ = stop.wait_for(|s| *s) => return,
                };
                let busy = queue.busy();
                let start = std::time::Instant::now();
                let outcome = std::panic::AssertUnwindSafe(reconciler.reconcile(&key))
                    .catch_unwind()
                    .await;
                let result = match outcome {
                    Ok(Ok(Action::Done)) => {
                        queue.forget(&key);
                        queue::Reconciled::Success
                    }
                    Ok(Ok(Action::RequeueAfter(d))) => {
                        queue.forget(&key);
                        queue.add_after(key.clone(), d);
                        queue::Reconciled::RequeueAfter
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(queue = queue.name(), ?key, error = %e, "reconcile failed; retrying");
                        queue.add_rate_limited(key.clone());
                        queue::Reconciled::Error
                    }
                    Err(_) => {
                        tracing::error!(queue = queue.name(), ?key, "reconcile panicked; retrying");
                        queue.add_rate_limited(key.clone());
                        queue::Reconciled::Error
                    }
                };
                queue.observe_reconcile(result, start.elapsed());
                drop(busy);
                queue.done(&key);
            }
        }));
    }
    // Aborting this task aborts the workers; a stop lets them finish.
    let mut tasks = AbortOnDrop(tasks);
    for t in tasks.0.iter_mut() {
        let _ = t.await;
    }
}

/// Locks a controller's cache, whatever a panicking holder left in it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A namespaced object's queue key: (`namespace`, `name`).
pub(crate) fn namespaced_key(obj: &Value) -> (String, String) {
    (
        meta::namespace(obj).unwrap_or_default().to_string(),
        meta::name(obj).unwrap_or_default().to_string(),
    )
}

pub(crate) struct AbortOnDrop(pub(crate) Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The metrics of every controller's queue, for `/metrics`.
#[derive(Default)]
pub struct Metrics {
    queues: Mutex<std::collections::BTreeMap<String, Arc<dyn RenderMetrics>>>,
}

/// A queue whose metrics `/metrics` shows.
pub trait RenderMetrics: Send + Sync {
    fn name(&self) -> &str;
    fn render(&self, out: &mut String);
}

impl<K: Clone + Eq + Hash + Send + 'static> RenderMetrics for Queue<K> {
    fn name(&self) -> &str {
        Queue::name(self)
    }

    fn render(&self, out: &mut String) {
        self.render_metrics(out);
    }
}

/// The metric families queues render, with their types and (upstream's)
/// help texts.
const FAMILIES: [(&str, &str, &str); 14] = [
    (
        "workqueue_depth",
        "gauge",
        "[ALPHA] Current depth of workqueue",
    ),
    (
        "workqueue_adds_total",
        "counter",
        "[ALPHA] Total number of adds handled by workqueue",
    ),
    (
        "workqueue_retries_total",
        "counter",
        "[ALPHA] Total number of retries handled by workqueue",
    ),
    (
        "workqueue_unfinished_work_seconds",
        "gauge",
        "[ALPHA] How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
    ),
    (
        "workqueue_longest_running_processor_seconds",
        "gauge",
        "[ALPHA] How many seconds has the longest running processor for workqueue been running.",
    ),
    (
        "workqueue_queue_duration_seconds",
        "histogram",
        "[ALPHA] How long in seconds an item stays in workqueue before being requested.",
    ),
    (
        "workqueue_work_duration_seconds",
        "histogram",
        "[ALPHA] How long in seconds processing an item from workqueue takes.",
    ),
    (
        "controller_runtime_reconcile_total",
        "counter",
        "Total number of reconciliations per controller",
    ),
    (
        "controller_runtime_reconcile_errors_total",
        "counter",
        "Total number of reconciliation errors per controller",
    ),
    (
        "controller_runtime_reconcile_time_seconds",
        "histogram",
        "Length of time per reconciliation per controller",
    ),
    (
        "controller_runtime_active_workers",
        "gauge",
        "Number of currently used workers per controller",
    ),
    (
        "controller_runtime_max_concurrent_reconciles",
        "gauge",
        "Maximum number of concurrent reconciles per controller",
    ),
    (
        "scheduler_schedule_attempts_total",
        "counter",
        "[STABLE] Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
    ),
    (
        "scheduler_pending_pods",
        "gauge",
        "[STABLE] Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed.",
    ),
];

impl Metrics {
    /// Shows `q`'s metrics (replacing a queue of the same name).
    pub fn register(&self, q: Arc<dyn RenderMetrics>) {
        let name = q.name().to_owned();
        self.queues.lock().expect("metrics lock").insert(name, q);
    }

    /// Stops showing the queue `name` (a removed controller's).
    pub fn unregister(&self, name: &str) {
        self.queues.lock().expect("metrics lock").remove(name);
    }

    /// Prometheus text of every queue, one group per metric family (as
    /// the text format requires), each after its `# TYPE` line.
    pub fn text(&self) -> String {
        let queues: Vec<_> = self
            .queues
            .lock()
            .expect("metrics lock")
            .values()
            .cloned()
            .collect();
        let mut samples = String::new();
        for q in queues {
            q.render(&mut samples);
        }
        let family = |line: &str| {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            FAMILIES.iter().position(|(f, kind, _)| {
                name == *f
                    || (*kind == "histogram"
                        && name
                            .strip_prefix(f)
                            .is_some_and(|rest| matches!(rest, "_bucket" | "_sum" | "_count")))
            })
        };
        let mut lines: Vec<(usize, &str)> = samples
            .lines()
            .map(|l| (family(l).unwrap_or(FAMILIES.len()), l))
            .collect();
        lines.sort_by_key(|(f, _)| *f);
        let mut out = String::new();
        let mut last = None;
        for (f, line) in lines {
            if last != Some(f) {
                if let Some((name, kind, help)) = FAMILIES.get(f) {
                    out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
                }
                last = Some(f);
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// The identity of the server's controller `name`: the ServiceAccount
/// `kube-system/<name>`, as kube-controller-manager's controllers run with
/// `--use-service-account-credentials`.
pub fn controller_user(name: &str) -> UserInfo {
    UserInfo {
        username: format!("system:serviceaccount:kube-system:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:kube-system".into(),
            "system:authenticated".into(),
        ],
        ..Default::default()
    }
}

/// One call a controller made, as the audit log records it (upstream
/// audits kube-controller-manager's requests like any other client's).
pub struct Call<'a> {
    pub controller: &'a str,
    pub user: &'a UserInfo,
    pub verb: &'a str,
    pub resource: &'a Resource,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub subresource: Option<&'a str>,
    /// The outcome: the object written or read, or the error.
    pub outcome: std::result::Result<Option<&'a Value>, &'a ApiError>,
    pub received: chrono::DateTime<chrono::Utc>,
}

impl Call<'_> {
    /// The URL the call would have had as an HTTP request.
    pub fn request_uri(&self) -> String {
        let r = self.resource;
        let mut uri = if r.group.is_empty() {
            format!("/api/{}", r.version)
        } else {
            format!("/apis/{}/{}", r.group, r.version)
        };
        if let Some(ns) = self.namespace.filter(|_| r.namespaced) {
            uri.push_str(&format!("/namespaces/{ns}"));
        }
        uri.push_str(&format!("/{}", r.plural));
        if let Some(n) = self.name {
            uri.push_str(&format!("/{n}"));
        }
        if let Some(s) = self.subresource {
            uri.push_str(&format!("/{s}"));
        }
        uri
    }
}

/// The answer itself as the audited object.
fn itself(v: &Value) -> Option<&Value> {
    Some(v)
}

/// Where controllers' calls are audited (the server's audit log).
pub trait AuditCalls: Send + Sync {
    fn record(&self, call: &Call<'_>);
}

/// A controller's connection to the registry: every call made as the
/// controller's identity, authorized (when an authorizer is set) as a
/// request with that identity would be, with admission on every write, and
/// audited (when an audit log is set).
#[derive(Clone)]
pub struct Client {
    pub objects: Objects,
    name: String,
    user: UserInfo,
    authorize: Option<Arc<dyn Authorize>>,
    audit: Option<Arc<dyn AuditCalls>>,
}

impl Client {
    /// The client of controller `name` (its ServiceAccount in kube-system).
    pub fn new(objects: Objects, name: &str, authorize: Option<Arc<dyn Authorize>>) -> Self {
        Client {
            objects,
            name: name.to_string(),
            user: controller_user(name),
            authorize,
            audit: None,
        }
    }

    /// The client of controller `name` acting as `user` (a wasm
    /// controller's ServiceAccount).
    pub fn with_user(
        objects: Objects,
        name: &str,
        user: UserInfo,
        authorize: Option<Arc<dyn Authorize>>,
    ) -> Self {
        Client {
            objects,
            name: name.to_string(),
            user,
            authorize,
            audit: None,
        }
    }

    /// Audits this client's calls to `audit`.
    pub fn with_audit(mut self, audit: Option<Arc<dyn AuditCalls>>) -> Self {
        self.audit = audit;
        self
    }

    /// Records one call in the audit log and hands its outcome back.
    #[allow(clippy::too_many_arguments)]
    fn audited<T>(
        &self,
        verb: &str,
        info: &Resource,
        ns: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
        received: chrono::DateTime<chrono::Utc>,
        outcome: Result<T>,
        object: for<'v> fn(&'v T) -> Option<&'v Value>,
    ) -> Result<T> {
        let code = match &outcome {
            Ok(_) if verb == "create" => 201,
            Ok(_) => 200,
            Err(e) => e.code(),
        };
        let elapsed = (chrono::Utc::now() - received).to_std().unwrap_or_default();
        self.objects.client_metrics.call(verb, code, elapsed);
        if let Some(audit) = &self.audit {
            audit.record(&Call {
                controller: &self.name,
                user: &self.user,
                verb,
                resource: info,
                namespace: ns,
                name,
                subresource: sub,
                outcome: outcome.as_ref().map(object),
                received,
            });
        }
        outcome
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn user(&self) -> &UserInfo {
        &self.user
    }

    /// The options of this controller's writes: its identity, and its name
    /// as the field manager.
    pub fn write_options(&self) -> WriteOptions {
        let mut opts = WriteOptions::new(false, self.user.clone());
        opts.field_manager = self.name.clone();
        opts
    }

    fn check(
        &self,
        verb: &str,
        info: &Resource,
        ns: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> Result<()> {
        let Some(authz) = &self.authorize else {
            return Ok(());
        };
        let mut attrs = self.attributes(verb, &info.group, &info.plural);
        if let Some(ns) = ns.filter(|_| info.namespaced) {
            attrs = attrs.in_namespace(ns);
        }
        if let Some(n) = name {
            attrs = attrs.named(n);
        }
        if let Some(s) = sub {
            attrs = attrs.with_subresource(s);
        }
        let d = authz.authorize(&attrs);
        if d.is_allowed() {
            return Ok(());
        }
        let what = match sub {
            Some(s) => format!("{}/{s}", info.plural),
            None => info.plural.clone(),
        };
        Err(ApiError::Forbidden(
            Target::new(&info.group, &info.plural, name.unwrap_or_default()),
            format!(
                "User {:?} cannot {verb} resource {what:?} in API group {:?}{}",
                self.user.username,
                info.group,
                ns.map(|n| format!(" in the namespace {n:?}"))
                    .unwrap_or_else(|| " at the cluster scope".into())
            ),
        ))
    }

    /// Whether this controller may `verb` the resource `info` in `ns`
    /// (every namespace for `None`); the error is the 403 a request gets.
    pub fn allowed(&self, verb: &str, info: &Resource, ns: Option<&str>) -> Result<()> {
        self.check(verb, info, ns, None, None)
    }

    /// A request by this controller's identity: `verb` on `resource`.
    fn attributes(&self, verb: &str, group: &str, resource: &str) -> Attributes {
        let groups: Vec<&str> = self.user.groups.iter().map(String::as_str).collect();
        Attributes::resource(&self.user.username, &groups, verb, group, resource)
    }

    /// A SubjectAccessReview made by this controller: whether another
    /// user's request `attrs` would be allowed. The controller must itself
    /// be allowed to create `subjectaccessreviews`; without an authorizer
    /// nothing is allowed.
    pub fn access_review(&self, attrs: &Attributes) -> Result<bool> {
        let Some(authz) = &self.authorize else {
            return Ok(false);
        };
        let mine = self.attributes("create", "authorization.k8s.io", "subjectaccessreviews");
        if !authz.authorize(&mine).is_allowed() {
            return Err(ApiError::Forbidden(
                Target::new("authorization.k8s.io", "subjectaccessreviews", ""),
                format!(
                    "User {:?} cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope",
                    self.user.username
                ),
            ));
        }
        Ok(authz.authorize(attrs).is_allowed())
    }

    pub async fn get(&self, info: &Resource, ns: Option<&str>, name: &str) -> Result<Value> {
        let at = chrono::Utc::now();
        let outcome = match self.check("get", info, ns, Some(name), None) {
            Ok(()) => self.objects.get(info, ns, name).await,
            Err(e) => Err(e),
        };
        self.audited("get", info, ns, Some(name), None, at, outcome, itself)
    }

    pub async fn list(
        &self,
        info: &Resource,
        ns: Option<&str>,
        p: &ListParams,
    ) -> Result<ListOutcome> {
        let at = chrono::Utc::now();
        let outcome = match self.check("list", info, ns, None, None) {
            Ok(()) => self.objects.list(info, ns, p).await,
            Err(e) => Err(e),
        };
        self.audited("list", info, ns, None, None, at, outcome, |_| None)
    }

    pub async fn create(&self, info: &Resource, ns: Option<&str>, obj: Value) -> Result<Value> {
        let at = chrono::Utc::now();
        let name = meta::name(&obj).map(String::from);
        let outcome = match self.check("create", info, ns, None, None) {
            Ok(()) => {
                self.objects
                    .create(info, ns, obj, &self.write_options())
                    .await
            }
            Err(e) => Err(e),
        };
        let name = outcome
            .as_ref()
            .ok()
            .and_then(meta::name)
            .map(String::from)
            .or(name);
        self.audited(
            "create",
            info,
            ns,
            name.as_deref(),
            None,
            at,
            outcome,
            itself,
        )
    }

    /// Creates a computed subresource of object `name` (`pods/binding`):
    /// `create` on `<plural>/<sub>` as RBAC sees it, answered by the
    /// resource's REST object for it.
    pub async fn create_subresource(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        sub: &str,
        body: Value,
    ) -> Result<Value> {
        let at = chrono::Utc::now();
        let outcome = match self.check("create", info, ns, Some(name), Some(sub)) {
            Ok(()) => match info.subresource_creaters.get(sub) {
                Some(creater) => {
                    let req = crate::strategy::CreateRequest {
                        info: &info.info,
                        namespace: ns,
                        name: Some(name),
                        user: &self.user,
                    };
                    creater.create(req, body).await
                }
                None => Err(ApiError::NotFound(Target::new(
                    &info.group,
                    &format!("{}/{sub}", info.plural),
                    name,
                ))),
            },
            Err(e) => Err(e),
        };
        self.audited(
            "create",
            info,
            ns,
            Some(name),
            Some(sub),
            at,
            outcome,
            itself,
        )
    }

    /// Reads, changes and writes (compare-and-swap, retried) an object or
    /// its subresource: an `update` as far as RBAC and admission see it.
    pub async fn update<F>(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        change: F,
    ) -> Result<Value>
    where
        F: FnMut(&Value) -> Result<Value>,
    {
        let at = chrono::Utc::now();
        let outcome = match self.check("update", info, ns, Some(name), sub) {
            Ok(()) => {
                self.objects
                    .guaranteed_update(info, ns, name, sub, &self.write_options(), change)
                    .await
            }
            Err(e) => Err(e),
        };
        self.audited("update", info, ns, Some(name), sub, at, outcome, itself)
    }

    /// Replaces an object or its subresource (PUT); a `resourceVersion`
    /// in `obj` is a precondition.
    pub async fn replace(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        obj: Value,
    ) -> Result<Value> {
        let at = chrono::Utc::now();
        let outcome = match self.check("update", info, ns, Some(name), sub) {
            Ok(()) => {
                self.objects
                    .update(info, ns, name, sub, obj, &self.write_options())
                    .await
            }
            Err(e) => Err(e),
        };
        self.audited("update", info, ns, Some(name), sub, at, outcome, itself)
    }

    /// Patches an object or its subresource with `kind` (JSON, merge or
    /// strategic merge patch).
    pub async fn patch(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        kind: wasm_apiserver_api::patch::PatchType,
        doc: &Value,
    ) -> Result<Value> {
        use wasm_apiserver_api::patch::{self, PatchError, PatchType};
        let at = chrono::Utc::now();
        let apply = |cur: &Value| -> Result<Value> {
            let out = match kind {
                PatchType::Json => patch::apply_json_patch(cur, doc),
                PatchType::Merge => patch::apply_merge_patch(cur, doc),
                _ => patch::apply_strategic_merge_patch(&info.kind, cur, doc),
            };
            out.map_err(|e| match e {
                PatchError::Invalid(m) => ApiError::BadRequest(m),
                PatchError::Apply(m) => ApiError::Invalid(
                    Target::default(),
                    vec![wasm_apiserver_api::Cause {
                        reason: "FieldValueInvalid".into(),
                        field: "patch".into(),
                        message: m,
                    }],
                ),
            })
        };
        let outcome = match self.check("patch", info, ns, Some(name), sub) {
            Ok(()) => {
                let mut opts = self.write_options();
                opts.patching = true;
                self.objects.patch(info, ns, name, sub, &apply, &opts).await
            }
            Err(e) => Err(e),
        };
        self.audited("patch", info, ns, Some(name), sub, at, outcome, itself)
    }

    /// Server-side apply of `config` with this controller's name as field
    /// manager, creating the object when it is absent.
    pub async fn apply(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        config: &Value,
        force: bool,
    ) -> Result<Value> {
        let at = chrono::Utc::now();
        let outcome = match self.check("patch", info, ns, Some(name), sub) {
            Ok(()) => {
                let mut opts = self.write_options();
                self.objects
                    .apply(info, ns, name, sub, config, force, &mut opts)
                    .await
                    .map(crate::apply::Applied::into_object)
            }
            Err(e) => Err(e),
        };
        self.audited("patch", info, ns, Some(name), sub, at, outcome, itself)
    }

    pub async fn delete(
        &self,
        info: &Resource,
        ns: Option<&str>,
        name: &str,
        pre: &Preconditions,
    ) -> Result<Deleted> {
        let at = chrono::Utc::now();
        let outcome = match self.check("delete", info, ns, Some(name), None) {
            Ok(()) => {
                self.objects
                    .delete(info, ns, name, pre, &self.write_options())
                    .await
            }
            Err(e) => Err(e),
        };
        self.audited(
            "delete",
            info,
            ns,
            Some(name),
            None,
            at,
            outcome,
            |d| match d {
                Deleted::Now(o) | Deleted::Pending(o) => Some(o),
            },
        )
    }

    /// Records a core/v1 Event about `regarding`, as client-go's event
    /// recorder writes them (`source.component` and `reportingComponent`
    /// are `wasm-apiserver/<controller>`): the Events `kubectl get events`
    /// and `kubectl describe` show (this server stores `events.k8s.io/v1`
    /// Events apart from core ones, so a recorder of that API would be
    /// invisible to them). Failures are logged: an event is never worth
    /// failing a reconcile for.
    pub async fn event(&self, regarding: &Value, kind: &str, reason: &str, note: &str) {
        let Some(info) = self.objects.resources.get("", "v1", "events") else {
            return;
        };
        let ns = meta::namespace(regarding).unwrap_or("default").to_string();
        let api_version = regarding["apiVersion"].as_str().unwrap_or_default();
        let name = meta::name(regarding).unwrap_or_default();
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let component = format!("wasm-apiserver/{}", self.name);
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": ns},
            "involvedObject": {
                "apiVersion": api_version,
                "kind": regarding["kind"],
                "name": name,
                "namespace": meta::namespace(regarding),
                "uid": meta::str_field(regarding, "uid"),
                "resourceVersion": meta::str_field(regarding, "resourceVersion"),
            },
            "reason": reason,
            "message": note,
            "type": kind,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": null,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": format!("{}-{}", self.name, hostname()),
        });
        if let Err(e) = self.create(&info, Some(&ns), event).await {
            tracing::debug!(controller = %self.name, error = %e, "could not record event");
        }
    }
}

/// Now as a `MicroTime` (Leases' and Events' timestamps).
pub fn micro_time() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// This machine's host name (upstream's leader identities and event
/// instances start with it).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
