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
//! ([`serviceaccounts`]), and the `kubernetes` Service ([`apiservice`]).

pub mod apiservice;
pub mod bootstrap;
pub mod certificates;
pub mod gc;
pub mod leader;
pub mod queue;
pub mod serviceaccounts;

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
    let mut tasks = Vec::new();
    for _ in 0..workers.max(1) {
        let (queue, reconciler) = (queue.clone(), reconciler.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let key = queue.get().await;
                let outcome = std::panic::AssertUnwindSafe(reconciler.reconcile(&key))
                    .catch_unwind()
                    .await;
                match outcome {
                    Ok(Ok(Action::Done)) => queue.forget(&key),
                    Ok(Ok(Action::RequeueAfter(d))) => {
                        queue.forget(&key);
                        queue.add_after(key.clone(), d);
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(queue = queue.name(), ?key, error = %e, "reconcile failed; retrying");
                        queue.add_rate_limited(key.clone());
                    }
                    Err(_) => {
                        tracing::error!(queue = queue.name(), ?key, "reconcile panicked; retrying");
                        queue.add_rate_limited(key.clone());
                    }
                }
                queue.done(&key);
            }
        }));
    }
    // Aborting this task aborts the workers.
    let _abort = AbortOnDrop(tasks);
    std::future::pending::<()>().await;
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

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
    queues: Mutex<Vec<Arc<dyn RenderMetrics>>>,
}

/// A queue whose metrics `/metrics` shows.
pub trait RenderMetrics: Send + Sync {
    fn render(&self, out: &mut String);
}

impl<K: Clone + Eq + Hash + Send + 'static> RenderMetrics for Queue<K> {
    fn render(&self, out: &mut String) {
        self.render_metrics(out);
    }
}

impl Metrics {
    pub fn register(&self, q: Arc<dyn RenderMetrics>) {
        self.queues.lock().expect("metrics lock").push(q);
    }

    /// Prometheus text of every queue.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let queues = self.queues.lock().expect("metrics lock").clone();
        if !queues.is_empty() {
            out.push_str("# TYPE workqueue_depth gauge\n# TYPE workqueue_adds_total counter\n# TYPE workqueue_retries_total counter\n# TYPE workqueue_queue_duration_seconds histogram\n# TYPE workqueue_work_duration_seconds histogram\n");
        }
        for q in queues {
            q.render(&mut out);
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

    /// Records an `events.k8s.io/v1` Event about `regarding` (upstream's
    /// event recorder: `reportingController` is this controller). Failures
    /// are logged: an event is never worth failing a reconcile for.
    pub async fn event(&self, regarding: &Value, kind: &str, reason: &str, note: &str) {
        let Some(info) = self.objects.resources.get("events.k8s.io", "v1", "events") else {
            return;
        };
        let ns = meta::namespace(regarding).unwrap_or("default").to_string();
        let api_version = regarding["apiVersion"].as_str().unwrap_or_default();
        let name = meta::name(regarding).unwrap_or_default();
        let event = json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": ns},
            "eventTime": micro_time(),
            "reportingController": format!("wasm-apiserver/{}", self.name),
            "reportingInstance": format!("{}-{}", self.name, hostname()),
            "action": reason,
            "reason": reason,
            "type": kind,
            "note": note,
            "regarding": {
                "apiVersion": api_version,
                "kind": regarding["kind"],
                "name": name,
                "namespace": meta::namespace(regarding),
                "uid": meta::str_field(regarding, "uid"),
                "resourceVersion": meta::str_field(regarding, "resourceVersion"),
            },
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
