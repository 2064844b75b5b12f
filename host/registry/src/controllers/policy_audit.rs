//! The background audit (`policy-audit`): stored objects checked against
//! the admission plugins and ValidatingAdmissionPolicies that would judge
//! them, with the results written as policy reports.
//!
//! * **What is checked**: every object of a resource that an audited plugin
//!   (`backgroundAudit` on, our components and Kubewarden modules; not
//!   webhooks) has a rule for, or that a validating policy with a binding
//!   may match, as a synthetic dry-run CREATE by this controller's identity
//!   (Kubewarden's audit-scanner sends the same): [`Admission::audit`] and
//!   [`policy::audit`]. Reports and Events are never audited.
//! * **When**: an object that changes is checked alone (the metadata
//!   informer queues its key); a policy added, changed or removed, and
//!   every `--audit-interval` (default 1 h), starts a full pass: every
//!   object of the audited resources, and the resource of every report
//!   (so results of a removed policy go).
//! * **Below requests**: all of it runs on the [`background`](super::background)
//!   thread, at the lowest priority (nice 19): the kernel gives it a core
//!   when requests leave one idle. One worker, paced by a CPU budget
//!   too (so that an idle server is not filled by it): after a check
//!   (or a page of a full pass's listing) that took `t` it waits
//!   `t·(1−b)/b`, where `b` is `--audit-cpu-budget` (default half of one
//!   core) while the server is idle and a fiftieth of it while requests are
//!   in flight ([`Load::busy`]); a check yields between its plugin calls, so
//!   a request never waits behind more than one of them.
//! * **Reports** ([`wasm_apiserver_api::report`]): one per checked object,
//!   named by its uid, owned by it (the garbage collector removes it with
//!   the object), written through the registry as this controller
//!   (admission, RBAC and audit apply) and **only when a result changes**:
//!   a hash of what was last written skips the read, and a read report
//!   whose results are the same is left alone. An object no policy checks
//!   any more loses its report. The report resources' CRDs are created at
//!   start when they are not served yet.
//! * **Counts**: each plugin's `status.audit` (`violations`: objects that
//!   fail it or that it warns of, `checked`, `lastFullPass`), and each
//!   validating policy's `Audited` condition, are written every two
//!   seconds when they change.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile};
use crate::admission::chain::Attributes;
use crate::admission::{Admission, policy};
use crate::informer::{self, Change, Resolver};
use crate::load::Load;
use crate::options::{ListParams, Preconditions, WriteOptions};
use crate::resources::{Resource, Snapshot};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasm_apiserver_api::admission::RequestAttributes;
use wasm_apiserver_api::report::{self, Finding, Format, Outcome};
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_plugins::Operation;

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The `--controllers` name, ServiceAccount and queue of the audit.
pub const NAME: &str = "policy-audit";
/// How often policies are looked at for changes.
const POLICY_PERIOD: Duration = Duration::from_secs(1);
/// How often changed counts are written to the policies' status.
const STATUS_PERIOD: Duration = Duration::from_secs(2);
/// Objects per page of a full pass's lists.
const PAGE: usize = 500;

/// While requests are served the audit's budget is this many times
/// smaller. Measured (the `policy-audit` bench, creates at 16 clients
/// against a twin without the audit): a tenth raised create p50 by 15% and
/// p99 by 14%; a fiftieth gave 0.90–1.05× p50 and 0.94–1.11× p99 in four
/// runs.
const BUSY_DIVISOR: f64 = 50.0;

/// The audit's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Time between full passes (`--audit-interval`).
    pub interval: Duration,
    /// Which report resources are written (`--report-format`).
    pub format: Format,
    /// Share of one core the audit may use while the server is idle
    /// (`--audit-cpu-budget`); a fiftieth of it while requests are served.
    pub cpu_budget: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            interval: Duration::from_secs(3600),
            format: Format::OpenReports,
            cpu_budget: 0.5,
        }
    }
}

/// A queued object: its storage key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(Arc<str>);

/// The resources audited under the current policies.
#[derive(Default)]
struct Audited {
    fingerprint: String,
    snapshot: Option<Arc<Snapshot>>,
    by_prefix: HashMap<String, Arc<Resource>>,
}

/// What the audit found, by policy (`plugin/<name>` or `vap/<name>`).
#[derive(Default)]
struct Findings {
    checked: HashMap<String, HashSet<Arc<str>>>,
    failing: HashMap<String, HashSet<Arc<str>>>,
    /// Per object uid: the policies that checked it.
    by_uid: HashMap<Arc<str>, Vec<String>>,
    /// Per object uid: the hash of its report as last written or found
    /// this term (0: it has none).
    reports: HashMap<Arc<str>, u64>,
    dirty: HashSet<String>,
    last_full_pass: Option<String>,
}

/// Counters for `/metrics` and the benchmark.
#[derive(Default)]
pub struct Stats {
    pub checks: AtomicU64,
    pub full_passes: AtomicU64,
    pub report_writes: AtomicU64,
    pub report_bytes: AtomicU64,
    pub report_deletes: AtomicU64,
}

impl super::RenderMetrics for Stats {
    fn name(&self) -> &str {
        "policy_audit_stats"
    }

    fn render(&self, out: &mut String) {
        for (name, help, v) in [
            (
                "wasm_apiserver_policy_audit_checks_total",
                "Objects the background audit checked.",
                &self.checks,
            ),
            (
                "wasm_apiserver_policy_audit_full_passes_total",
                "Full passes the background audit started.",
                &self.full_passes,
            ),
            (
                "wasm_apiserver_policy_audit_report_writes_total",
                "Policy reports the background audit created or replaced.",
                &self.report_writes,
            ),
            (
                "wasm_apiserver_policy_audit_report_bytes_total",
                "Bytes of policy reports the background audit wrote.",
                &self.report_bytes,
            ),
            (
                "wasm_apiserver_policy_audit_report_deletes_total",
                "Policy reports the background audit deleted.",
                &self.report_deletes,
            ),
        ] {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
                v.load(Ordering::Relaxed)
            ));
        }
    }
}

/// The audit of one leader's term.
pub struct Auditor {
    client: Client,
    admission: Arc<Admission>,
    config: Config,
    load: Arc<Load>,
    queue: Arc<Queue<Key>>,
    resolver: Mutex<Resolver>,
    audited: Mutex<Audited>,
    findings: Mutex<Findings>,
    stats: Arc<Stats>,
}

/// Starts the audit on the leader; returns its counters.
pub fn spawn(
    client: Client,
    config: Config,
    load: Arc<Load>,
    leadership: Leadership,
    metrics: &Metrics,
) -> Arc<Stats> {
    let stats = Arc::new(Stats::default());
    let Some(admission) = client.objects.admission.clone() else {
        return stats;
    };
    let queue: Arc<Queue<Key>> = Queue::new("policy_audit");
    metrics.register(queue.clone());
    metrics.register(stats.clone());
    let s = stats.clone();
    tokio::spawn(leadership.run_while_leading(move || {
        let auditor = Arc::new(Auditor {
            client: client.clone(),
            admission: admission.clone(),
            config: config.clone(),
            load: load.clone(),
            queue: queue.clone(),
            resolver: Mutex::default(),
            audited: Mutex::default(),
            findings: Mutex::default(),
            stats: s.clone(),
        });
        super::background::run(async move {
            tokio::join!(
                auditor.clone().follow(),
                auditor.clone().follow_policies(),
                auditor.clone().record_status(),
                super::run(auditor.queue.clone(), auditor.clone(), 1),
            );
        })
    }));
    stats
}

/// Whether a resource is never audited: reports themselves and Events.
fn never_audited(r: &Resource) -> bool {
    matches!(r.group.as_str(), "openreports.io" | "wgpolicyk8s.io")
        || (r.plural == "events" && matches!(r.group.as_str(), "" | "events.k8s.io"))
}

fn hash_of(v: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    h.finish().max(1)
}

/// What a report write would set, timestamps aside (the hash input).
fn report_identity(r: &Value) -> Value {
    let mut results = r["results"].clone();
    if let Some(rs) = results.as_array_mut() {
        for x in rs {
            if let Some(o) = x.as_object_mut() {
                o.remove("timestamp");
            }
        }
    }
    json!([results, r["scope"], r["metadata"]["ownerReferences"]])
}

impl Auditor {
    fn objects(&self) -> &crate::store::Objects {
        &self.client.objects
    }

    /// Queues every changed object of an audited resource; forgets deleted
    /// ones. Writes of other resources are skipped undecoded (deletions
    /// too while nothing has findings).
    async fn follow(self: Arc<Self>) {
        let objects = self.objects().clone();
        let keep = |key: &str, deleted: bool| {
            self.is_audited(key)
                || (deleted
                    && !self
                        .findings
                        .lock()
                        .expect("findings lock")
                        .by_uid
                        .is_empty())
        };
        informer::follow_metadata_keys(&objects, keep, |change| match change {
            Change::Upsert(key, _) => {
                if self.is_audited(key) {
                    self.queue.add(Key(key.into()));
                }
            }
            Change::Delete(_, m) => self.forget(&m.uid),
            Change::Reset | Change::Synced => {}
        })
        .await;
    }

    fn is_audited(&self, key: &str) -> bool {
        let Some(rest) = key.strip_prefix("/registry/") else {
            return false;
        };
        let mut parts = rest.splitn(3, '/');
        let (Some(group), Some(plural)) = (parts.next(), parts.next()) else {
            return false;
        };
        let prefix = format!("/registry/{group}/{plural}/");
        self.audited
            .lock()
            .expect("audited lock")
            .by_prefix
            .contains_key(&prefix)
    }

    fn forget(&self, uid: &str) {
        let mut f = self.findings.lock().expect("findings lock");
        f.reports.remove(uid);
        let Some(policies) = f.by_uid.remove(uid) else {
            return;
        };
        for p in policies {
            if let Some(s) = f.checked.get_mut(&p) {
                s.remove(uid);
            }
            if let Some(s) = f.failing.get_mut(&p) {
                s.remove(uid);
            }
            f.dirty.insert(p);
        }
    }

    /// Recomputes the audited resources; `true` when the policies changed.
    fn refresh_audited(&self) -> bool {
        let snapshot = self.objects().resources.snapshot();
        let plugins = self.admission.audited();
        let mut fingerprint = self.admission.policies.fingerprint();
        for (name, fp, _) in &plugins {
            fingerprint.push_str(&format!("a:{name}:{fp};"));
        }
        let mut a = self.audited.lock().expect("audited lock");
        let policies_changed = a.fingerprint != fingerprint;
        let snapshot_changed = a
            .snapshot
            .as_ref()
            .is_none_or(|s| !Arc::ptr_eq(s, &snapshot));
        if !policies_changed && !snapshot_changed {
            return false;
        }
        let mut by_prefix = HashMap::new();
        for r in snapshot.all() {
            if r.stores_nothing() || never_audited(r) {
                continue;
            }
            let attrs = RequestAttributes {
                operation: "CREATE",
                group: &r.group,
                version: &r.version,
                resource: &r.plural,
                subresource: None,
                namespaced: r.namespaced,
            };
            let matched = plugins
                .iter()
                .any(|(_, _, rules)| rules.iter().any(|rule| rule.matches(&attrs)))
                || self.admission.policies.may_match_group(&r.group);
            if matched {
                by_prefix.entry(r.key_prefix()).or_insert_with(|| r.clone());
            }
        }
        *a = Audited {
            fingerprint,
            snapshot: Some(snapshot),
            by_prefix,
        };
        policies_changed
    }

    /// Creates the report CRDs, then starts a full pass when the policies
    /// change and every `interval`.
    async fn follow_policies(self: Arc<Self>) {
        while let Err(e) = self.ensure_crds().await {
            tracing::warn!(error = %e, "policy audit: cannot create the report CRDs; retrying");
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let mut last_pass: Option<Instant> = None;
        loop {
            let changed = self.refresh_audited();
            let due = last_pass.is_none_or(|t| t.elapsed() >= self.config.interval);
            if changed || due {
                last_pass = Some(Instant::now());
                if let Err(e) = self.full_pass().await {
                    tracing::warn!(error = %e, "policy audit: full pass incomplete");
                    last_pass = None;
                }
            }
            tokio::time::sleep(POLICY_PERIOD).await;
        }
    }

    async fn ensure_crds(&self) -> Result<()> {
        let crds = self.objects().resources.builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
        );
        for crd in report::crds(self.config.format) {
            match self.client.create(&crds, None, crd).await {
                Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Queues every object of the audited resources and the resource of
    /// every report.
    async fn full_pass(&self) -> Result<()> {
        self.stats.full_passes.fetch_add(1, Ordering::Relaxed);
        let resources: Vec<Arc<Resource>> = self
            .audited
            .lock()
            .expect("audited lock")
            .by_prefix
            .values()
            .cloned()
            .collect();
        for res in &resources {
            self.each_object(res, &ListParams::default(), |obj| {
                let (ns, name) = (meta::namespace(obj), meta::name(obj).unwrap_or_default());
                Some(res.object_key(ns, name))
            })
            .await?;
        }
        let labels = wasm_apiserver_api::selector::LabelSelector::parse(&format!(
            "app.kubernetes.io/managed-by={}",
            report::MANAGED_BY
        ))
        .map_err(ApiError::BadRequest)?;
        let params = ListParams {
            labels,
            ..Default::default()
        };
        for kind in self.config.format.kinds() {
            let Some(res) = self
                .objects()
                .resources
                .get(kind.group, kind.version, kind.plural)
            else {
                continue;
            };
            self.each_object(&res, &params, |report| {
                let scope = &report["scope"];
                let r = self
                    .resolver()
                    .by_kind
                    .get(&(
                        scope["apiVersion"].as_str()?.to_string(),
                        scope["kind"].as_str()?.to_string(),
                    ))?
                    .clone();
                Some(r.object_key(scope["namespace"].as_str(), scope["name"].as_str()?))
            })
            .await?;
        }
        let mut f = self.findings.lock().expect("findings lock");
        f.last_full_pass = Some(meta::timestamp(chrono::Utc::now()));
        let all: Vec<String> = f.checked.keys().cloned().collect();
        f.dirty.extend(all);
        Ok(())
    }

    /// Lists `res` page by page and queues the key `key_of` gives each
    /// object.
    async fn each_object(
        &self,
        res: &Resource,
        params: &ListParams,
        key_of: impl Fn(&Value) -> Option<String>,
    ) -> Result<()> {
        let mut params = ListParams {
            limit: Some(PAGE),
            ..params.clone()
        };
        loop {
            let started = Instant::now();
            let page = self.client.list(res, None, &params).await?;
            for obj in &page.items {
                if let Some(key) = key_of(obj) {
                    self.queue.add(Key(key.into()));
                }
            }
            // Listing is the pass's work too: within the same budget.
            self.pace(started.elapsed()).await;
            match page.continue_token {
                Some(c) => params.continue_token = Some(c),
                None => return Ok(()),
            }
        }
    }

    fn resolver(&self) -> std::sync::MutexGuard<'_, Resolver> {
        let mut r = self.resolver.lock().expect("resolver lock");
        r.refresh(self.objects().resources.snapshot());
        r
    }

    /// Waits so that the audit stays within its CPU share after a check
    /// that took `took`.
    async fn pace(&self, took: Duration) {
        let mut budget = self.config.cpu_budget.clamp(0.001, 1.0);
        if self.load.busy() {
            budget /= BUSY_DIVISOR;
        }
        if budget < 1.0 {
            let wait = took
                .mul_f64((1.0 - budget) / budget)
                .min(Duration::from_secs(1));
            tokio::time::sleep(wait).await;
        }
    }

    /// Checks one object and brings its report in line.
    async fn check(&self, key: &Key) -> Result<Action> {
        let Some(at) = self.resolver().locate(&key.0) else {
            return Ok(Action::Done);
        };
        let res = self
            .audited
            .lock()
            .expect("audited lock")
            .by_prefix
            .get(&at.res.key_prefix())
            .cloned()
            .unwrap_or(at.res);
        let obj = match self.client.get(&res, at.ns.as_deref(), &at.name).await {
            Ok(obj) => obj,
            Err(ApiError::NotFound(_)) => return Ok(Action::Done),
            Err(e) => return Err(e),
        };
        if meta::str_field(&obj, "deletionTimestamp").is_some() {
            return Ok(Action::Done);
        }
        let Some(uid) = meta::str_field(&obj, "uid").map(Arc::<str>::from) else {
            return Ok(Action::Done);
        };
        self.stats.checks.fetch_add(1, Ordering::Relaxed);
        let a = Attributes {
            info: &res.info,
            operation: Operation::Create,
            subresource: None,
            namespace: at.ns.as_deref(),
            name: &at.name,
        };
        let user = self.client.user().clone();
        let mut findings = self.admission.audit(&a, &obj, user.clone()).await;
        let request = Admission::request_json(&a, &WriteOptions::new(true, user.clone()));
        findings.extend(
            policy::audit(
                self.objects(),
                &self.admission.policies,
                &a,
                &request,
                &obj,
                &user,
            )
            .await,
        );
        self.count(&uid, &findings);
        self.write_report(&res, &obj, &uid, &findings).await?;
        Ok(Action::Done)
    }

    /// Records which policies checked the object and which it fails.
    fn count(&self, uid: &Arc<str>, findings: &[Finding]) {
        let id = |f: &Finding| match f.rule {
            Some(_) => format!("vap/{}", f.policy),
            None => format!("plugin/{}", f.policy),
        };
        let mut now: Vec<(String, bool)> = Vec::new();
        for f in findings {
            let failing = matches!(f.outcome, Outcome::Fail | Outcome::Warn);
            match now.iter_mut().find(|(p, _)| *p == id(f)) {
                Some((_, fails)) => *fails |= failing,
                None => now.push((id(f), failing)),
            }
        }
        let mut g = self.findings.lock().expect("findings lock");
        let f = &mut *g;
        let before = f.by_uid.get(uid).cloned().unwrap_or_default();
        for p in before.iter().filter(|p| !now.iter().any(|(n, _)| n == *p)) {
            f.checked.entry(p.clone()).or_default().remove(uid);
            f.failing.entry(p.clone()).or_default().remove(uid);
            f.dirty.insert(p.clone());
        }
        for (p, failing) in &now {
            let newly_checked = f.checked.entry(p.clone()).or_default().insert(uid.clone());
            let set = f.failing.entry(p.clone()).or_default();
            let changed = if *failing {
                set.insert(uid.clone())
            } else {
                set.remove(uid)
            };
            if newly_checked || changed {
                f.dirty.insert(p.clone());
            }
        }
        f.by_uid
            .insert(uid.clone(), now.into_iter().map(|(p, _)| p).collect());
    }

    fn written(&self, uid: &Arc<str>) -> Option<u64> {
        self.findings
            .lock()
            .expect("findings lock")
            .reports
            .get(uid)
            .copied()
    }

    fn set_written(&self, uid: &Arc<str>, hash: u64) {
        let mut f = self.findings.lock().expect("findings lock");
        f.reports.insert(uid.clone(), hash);
    }

    async fn write_report(
        &self,
        res: &Resource,
        obj: &Value,
        uid: &Arc<str>,
        findings: &[Finding],
    ) -> Result<()> {
        let kind = self.config.format.kind_for(res.namespaced);
        let Some(reports) = self
            .objects()
            .resources
            .get(kind.group, kind.version, kind.plural)
        else {
            return Err(ApiError::ServiceUnavailable(format!(
                "{} is not served yet",
                kind.api_version()
            )));
        };
        let ns = if res.namespaced {
            meta::namespace(obj)
        } else {
            None
        };
        let known = self.written(uid);
        if findings.is_empty() {
            // `Some(0)`: this term saw no report for it.
            if known == Some(0) {
                return Ok(());
            }
            match self
                .client
                .delete(&reports, ns, uid, &Preconditions::default())
                .await
            {
                Ok(_) => {
                    self.stats.report_deletes.fetch_add(1, Ordering::Relaxed);
                }
                Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
            self.set_written(uid, 0);
            return Ok(());
        }
        let now = report::timestamp(chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) as i128);
        let mut new = report::report(self.config.format, obj, res.namespaced, findings, &now);
        let hash = hash_of(&report_identity(&new));
        if known == Some(hash) {
            return Ok(());
        }
        let written = match self.client.get(&reports, ns, uid).await {
            Err(ApiError::NotFound(_)) => {
                let bytes = serde_json::to_vec(&new).map_or(0, |b| b.len());
                self.client.create(&reports, ns, new).await?;
                bytes
            }
            Err(e) => return Err(e),
            Ok(existing) if report::same_results(&existing, &new) => 0,
            Ok(existing) => {
                report::keep_timestamps(&existing, &mut new);
                new["metadata"]["resourceVersion"] =
                    existing["metadata"]["resourceVersion"].clone();
                let bytes = serde_json::to_vec(&new).map_or(0, |b| b.len());
                self.client.replace(&reports, ns, uid, None, new).await?;
                bytes
            }
        };
        if written > 0 {
            self.stats.report_writes.fetch_add(1, Ordering::Relaxed);
            self.stats
                .report_bytes
                .fetch_add(written as u64, Ordering::Relaxed);
        }
        self.set_written(uid, hash);
        Ok(())
    }

    /// Writes the counts of the policies whose counts changed.
    async fn record_status(self: Arc<Self>) {
        use wasm_apiserver_api::patch::PatchType;
        let plugins = self.objects().resources.builtin(
            wasm_apiserver_api::admission::GROUP,
            wasm_apiserver_api::admission::VERSION,
            wasm_apiserver_api::admission::PLURAL,
        );
        let vaps = self.objects().resources.builtin(
            wasm_apiserver_api::admission_policy::GROUP,
            "v1",
            wasm_apiserver_api::admission_policy::POLICIES,
        );
        loop {
            tokio::time::sleep(STATUS_PERIOD).await;
            let (dirty, counts, last_pass) = {
                let mut f = self.findings.lock().expect("findings lock");
                let dirty: Vec<String> = f.dirty.drain().collect();
                let counts: Vec<(usize, usize)> = dirty
                    .iter()
                    .map(|p| {
                        (
                            f.failing.get(p).map_or(0, |s| s.len()),
                            f.checked.get(p).map_or(0, |s| s.len()),
                        )
                    })
                    .collect();
                (dirty, counts, f.last_full_pass.clone())
            };
            for (id, (violations, checked)) in dirty.iter().zip(counts) {
                let result = if let Some(name) = id.strip_prefix("plugin/") {
                    let doc = json!({"status": {"audit": {
                        "violations": violations,
                        "checked": checked,
                        "lastFullPass": last_pass,
                    }}});
                    self.client
                        .patch(&plugins, None, name, Some("status"), PatchType::Merge, &doc)
                        .await
                        .map(|_| ())
                } else if let Some(name) = id.strip_prefix("vap/") {
                    self.client
                        .update(&vaps, None, name, Some("status"), |cur| {
                            let mut new = cur.clone();
                            set_audited_condition(&mut new, violations, checked);
                            Ok(new)
                        })
                        .await
                        .map(|_| ())
                } else {
                    Ok(())
                };
                match result {
                    Ok(()) | Err(ApiError::NotFound(_)) => {}
                    Err(e) => {
                        tracing::debug!(policy = %id, error = %e, "policy audit: could not record counts");
                        self.findings
                            .lock()
                            .expect("findings lock")
                            .dirty
                            .insert(id.clone());
                    }
                }
            }
        }
    }
}

/// Sets a policy's `Audited` condition (upstream's condition shape) to
/// the counts, keeping its transition time when its reason stays.
pub fn set_audited_condition(policy: &mut Value, violations: usize, checked: usize) {
    let reason = if violations == 0 {
        "NoViolations"
    } else {
        "ViolationsFound"
    };
    let mut conditions: Vec<Value> = policy["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let old = conditions.iter().position(|c| c["type"] == "Audited");
    let since = old
        .and_then(|i| {
            (conditions[i]["reason"] == reason).then(|| conditions[i]["lastTransitionTime"].clone())
        })
        .unwrap_or_else(|| json!(meta::timestamp(chrono::Utc::now())));
    let condition = json!({
        "type": "Audited",
        "status": "True",
        "reason": reason,
        "message": format!("{violations} of {checked} checked objects violate the policy"),
        "observedGeneration": policy["metadata"]["generation"],
        "lastTransitionTime": since,
    });
    match old {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    policy["status"]["conditions"] = json!(conditions);
}

#[async_trait::async_trait]
impl Reconcile for Auditor {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let started = Instant::now();
        let result = self.check(key).await;
        self.pace(started.elapsed()).await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audited_condition_keeps_its_transition_time() {
        let mut p = json!({"metadata": {"generation": 2}, "status": {"conditions": [
            {"type": "Compiled", "status": "False"}]}});
        set_audited_condition(&mut p, 3, 10);
        let c = &p["status"]["conditions"][1];
        assert_eq!(c["reason"], "ViolationsFound");
        assert_eq!(c["message"], "3 of 10 checked objects violate the policy");
        let since = c["lastTransitionTime"].clone();
        std::thread::sleep(Duration::from_millis(1100));
        set_audited_condition(&mut p, 1, 10);
        assert_eq!(p["status"]["conditions"][1]["lastTransitionTime"], since);
        set_audited_condition(&mut p, 0, 10);
        assert_eq!(p["status"]["conditions"][1]["reason"], "NoViolations");
        assert_eq!(p["status"]["conditions"].as_array().unwrap().len(), 2);
    }
}
