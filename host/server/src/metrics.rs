//! kube-apiserver's own metric families, with upstream's names, labels,
//! buckets and cardinality rules (k8s.io/apiserver `endpoints/metrics`,
//! `endpoints/filters/metrics.go`, `storage/etcd3/metrics`, `audit`,
//! component-base): requests, in-flight and long-running requests,
//! authentication, authorization, audit, storage latency and object counts,
//! and `process_*`. The families that other layers keep (plugins, admission
//! policies, flow control, work queues, the aggregator) are rendered by
//! their owners and appended by the `/metrics` handler.
//!
//! The request path looks up one cached [`Series`] per (verb, dry run,
//! group, version, resource, subresource, scope, component) and bumps its
//! atomics: no label hashing per family per request.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use wasm_apiserver_api::RequestInfo;
use wasm_apiserver_storage::{
    KeyValue, ListOptions, ListResult, Result as StorageResult, Storage, StoreStatus, WatchStream,
    WriteAnnouncement,
};

/// `apiserver_request_duration_seconds` and `etcd_request_duration_seconds`.
const REQUEST_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];
/// `apiserver_request_sli_duration_seconds`.
const SLI_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0,
    30.0, 45.0, 60.0,
];
/// Verbs upstream reports; any other is `other`.
const VALID_VERBS: &[&str] = &[
    "APPLY", "CONNECT", "DELETE", "GET", "LIST", "PATCH", "POST", "PUT", "WATCH",
];
/// Subresources whose requests are `CONNECT`.
const CONNECT_SUBRESOURCES: &[&str] = &["log", "exec", "portforward", "attach", "proxy"];

/// `authentication_attempts` results.
const AUTHN_RESULTS: [&str; 3] = ["success", "failure", "error"];
/// `authenticated_user_requests` buckets: upstream keeps these user names,
/// folds any with `@` into `email_id` and every other into `other` (last).
const USER_BUCKETS: [&str; 7] = [
    "admin",
    "client",
    "kube_proxy",
    "kubelet",
    "system:serviceaccount:kube-system:default",
    "email_id",
    "other",
];
/// `authorization_attempts_total` results.
const AUTHZ_RESULTS: [&str; 3] = ["allowed", "denied", "no-opinion"];
/// `apiserver_authorization_decisions_total` series: the authorizers that
/// can decide, and the two terminal decisions.
const DECIDERS: [(&str, &str, &str); 6] = [
    ("Node", "node", "allowed"),
    ("RBAC", "rbac", "allowed"),
    ("AlwaysAllow", "alwaysallow", "allowed"),
    ("Wasm", "wasm", "allowed"),
    ("Wasm", "wasm", "denied"),
    ("Node", "node", "denied"),
];

/// The labels of one request series (all but `code`), borrowed from the
/// request.
struct Key<'a> {
    verb: &'static str,
    dry_run: &'a str,
    group: &'a str,
    version: &'a str,
    resource: &'a str,
    subresource: &'a str,
    scope: &'static str,
    component: &'static str,
}

impl<'a> Key<'a> {
    /// The values in `apiserver_request_duration_seconds`'s label order.
    fn parts(&self) -> impl Iterator<Item = &'a str> {
        [
            self.verb,
            self.dry_run,
            self.group,
            self.version,
            self.resource,
            self.subresource,
            self.scope,
            self.component,
        ]
        .into_iter()
    }
}

/// The handles of one request series, created on its first request.
pub struct Series {
    /// The label values, in [`Key::parts`] order.
    labels: Vec<String>,
    verb: &'static str,
    duration: Histogram,
    sli: Histogram,
    sizes: Histogram,
    longrunning: IntGauge,
    codes: RwLock<Vec<(u16, IntCounter)>>,
}

/// What the request filter learned of a request before it ran: its series
/// (`None`: not counted, as upstream counts no unregistered resource) and
/// whether it is long-running.
pub struct Recorder {
    series: Option<Arc<Series>>,
    started: Instant,
    long_running: bool,
    read_only: bool,
}

/// Time a request spent waiting on others, which the SLI latency leaves
/// out (upstream's latency trackers): its turn in a flow-control queue and
/// its admission webhooks' calls. Shared through the request's extensions.
#[derive(Clone, Default)]
pub struct Excluded(Arc<AtomicU64>);

impl Excluded {
    /// The counter itself, for the admission chain's webhook time
    /// (`WEBHOOK_NANOS`).
    pub fn nanos(&self) -> Arc<AtomicU64> {
        self.0.clone()
    }

    pub fn add(&self, d: Duration) {
        self.0
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }
    fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Relaxed))
    }
}

/// The server's metric families and their registry.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    duration: HistogramVec,
    sli: HistogramVec,
    sizes: HistogramVec,
    longrunning: IntGaugeVec,
    inflight: IntGaugeVec,
    /// Requests in flight now and the most since the last scrape, read-only
    /// and mutating (upstream reports a watermark).
    in_flight: [(AtomicI64, AtomicI64); 2],
    series: RwLock<HashMap<Box<str>, Arc<Series>>>,
    audit_events: IntCounter,
    storage_duration: HistogramVec,
    storage_requests: IntCounterVec,
    storage_errors: IntCounterVec,
    storage_objects: IntGaugeVec,
    /// Handles of the fixed label values, resolved once (a label lookup
    /// hashes every value under a lock): by result, user bucket, decider.
    authn: [(IntCounter, Histogram); 3],
    authn_user: [IntCounter; 7],
    authz: [(IntCounter, Histogram); 3],
    decisions: [IntCounter; 6],
    /// Storage handles by operation and key prefix (`/registry/core/pods`).
    storage: [RwLock<HashMap<Box<str>, StorageHandles>>; STORAGE_OPS.len()],
    watch_events: IntCounterVec,
    watch_sizes: HistogramVec,
    /// Off (`--enable-request-metrics=false`, for the benchmark's
    /// comparison): the request filter records nothing.
    pub requests_enabled: bool,
}

/// The label values of `k` in a family's order: with `dry_run` (after the
/// verb) or without it.
fn labels<'a>(k: &Key<'a>, out: &mut Vec<&'a str>, dry_run: bool) {
    for (i, part) in k.parts().enumerate() {
        if i != 1 || dry_run {
            out.push(part);
        }
    }
}

fn stable(help: &str) -> String {
    format!("[STABLE] {help}")
}

fn alpha(help: &str) -> String {
    format!("[ALPHA] {help}")
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(true)
    }
}

impl Metrics {
    /// Every family, registered; `requests_enabled: false` leaves the
    /// request families empty.
    pub fn new(requests_enabled: bool) -> Self {
        let registry = Registry::new();
        let series_labels = [
            "verb",
            "group",
            "version",
            "resource",
            "subresource",
            "scope",
            "component",
        ];
        let mut with_dry_run = vec!["verb", "dry_run"];
        with_dry_run.extend_from_slice(&series_labels[1..]);
        let mut with_code = with_dry_run.clone();
        with_code.push("code");
        let counter = |name: &str, help: String, l: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), l).expect("metric");
            registry.register(Box::new(c.clone())).expect("register");
            c
        };
        let histogram = |name: &str, help: String, l: &[&str], buckets: Vec<f64>| {
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), l)
                .expect("metric");
            registry.register(Box::new(h.clone())).expect("register");
            h
        };
        let gauge = |name: &str, help: String, l: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), l).expect("metric");
            registry.register(Box::new(g.clone())).expect("register");
            g
        };
        let exp = |start: f64, factor: f64, n: usize| {
            prometheus::exponential_buckets(start, factor, n).expect("buckets")
        };
        let requests = counter(
            "apiserver_request_total",
            stable(
                "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
            ),
            &with_code,
        );
        let duration = histogram(
            "apiserver_request_duration_seconds",
            stable(
                "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
            ),
            &with_dry_run,
            REQUEST_BUCKETS.to_vec(),
        );
        let sli = histogram(
            "apiserver_request_sli_duration_seconds",
            alpha(
                "Response latency distribution (not counting webhook duration and priority & fairness queue wait times) in seconds for each verb, group, version, resource, subresource, scope and component.",
            ),
            &series_labels,
            SLI_BUCKETS.to_vec(),
        );
        let sizes = histogram(
            "apiserver_response_sizes",
            stable(
                "Response size distribution in bytes for each group, version, verb, resource, subresource, scope and component.",
            ),
            &series_labels,
            exp(1000.0, 10.0, 7),
        );
        let longrunning = gauge(
            "apiserver_longrunning_requests",
            stable(
                "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.",
            ),
            &series_labels,
        );
        let inflight = gauge(
            "apiserver_current_inflight_requests",
            stable(
                "Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
            ),
            &["request_kind"],
        );
        let authn_attempts = counter(
            "authentication_attempts",
            alpha("Counter of authenticated attempts."),
            &["result"],
        );
        let authn_duration = histogram(
            "authentication_duration_seconds",
            alpha("Authentication duration in seconds broken out by result."),
            &["result"],
            exp(0.001, 2.0, 15),
        );
        let authn_users = counter(
            "authenticated_user_requests",
            alpha("Counter of authenticated requests broken out by username."),
            &["username"],
        );
        let authz_attempts = counter(
            "authorization_attempts_total",
            alpha(
                "Counter of authorization attempts broken down by result. It can be either 'allowed', 'denied', 'no-opinion' or 'error'.",
            ),
            &["result"],
        );
        let authz_duration = histogram(
            "authorization_duration_seconds",
            alpha("Authorization duration in seconds broken out by result."),
            &["result"],
            exp(0.001, 2.0, 15),
        );
        let authz_decisions = counter(
            "apiserver_authorization_decisions_total",
            alpha(
                "Total number of terminal decisions made by an authorizer split by authorizer type, name, and decision.",
            ),
            &["type", "name", "decision"],
        );
        let audit_events = IntCounter::with_opts(Opts::new(
            "apiserver_audit_event_total",
            alpha("Counter of audit events generated and sent to the audit backend."),
        ))
        .expect("metric");
        registry
            .register(Box::new(audit_events.clone()))
            .expect("register");
        let storage_duration = histogram(
            "etcd_request_duration_seconds",
            alpha("Etcd request latency in seconds for each operation and object type."),
            &["operation", "type"],
            REQUEST_BUCKETS.to_vec(),
        );
        let storage_requests = counter(
            "etcd_requests_total",
            alpha("Etcd request counts for each operation and object type."),
            &["operation", "type"],
        );
        let storage_errors = counter(
            "etcd_request_errors_total",
            alpha("Etcd failed request counts for each operation and object type."),
            &["operation", "type"],
        );
        let watch_events = counter(
            "apiserver_watch_events_total",
            alpha("Number of events sent in watch clients"),
            &["group", "version", "kind"],
        );
        let watch_sizes = histogram(
            "apiserver_watch_events_sizes",
            alpha("Watch event size distribution in bytes"),
            &["group", "version", "kind"],
            exp(1024.0, 2.0, 8),
        );
        let storage_objects = gauge(
            "apiserver_storage_objects",
            stable(
                "Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
            ),
            &["resource"],
        );
        let build = IntGaugeVec::new(
            Opts::new(
                "kubernetes_build_info",
                alpha("A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running."),
            ),
            &["major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"],
        )
        .expect("metric");
        let v = wasm_apiserver_api::KUBERNETES_VERSION;
        let mut parts = v.trim_start_matches('v').split('.');
        build
            .with_label_values(&[
                parts.next().unwrap_or("1"),
                parts.next().unwrap_or("0"),
                v,
                concat!("wasm-apiserver-", env!("CARGO_PKG_VERSION")),
                "clean",
                "2026-01-01T00:00:00Z",
                "n/a (rust)",
                "rustc",
                std::env::consts::OS,
            ])
            .set(1);
        registry.register(Box::new(build)).expect("register");
        let authn = AUTHN_RESULTS.map(|r| {
            (
                authn_attempts.with_label_values(&[r]),
                authn_duration.with_label_values(&[r]),
            )
        });
        let authn_user = USER_BUCKETS.map(|u| authn_users.with_label_values(&[u]));
        let authz = AUTHZ_RESULTS.map(|r| {
            (
                authz_attempts.with_label_values(&[r]),
                authz_duration.with_label_values(&[r]),
            )
        });
        let decisions = DECIDERS.map(|(kind, name, decision)| {
            authz_decisions.with_label_values(&[kind, name, decision])
        });
        Metrics {
            authn,
            authn_user,
            authz,
            decisions,
            storage: Default::default(),
            registry,
            requests,
            duration,
            sli,
            sizes,
            longrunning,
            inflight,
            in_flight: Default::default(),
            series: Default::default(),
            audit_events,
            storage_duration,
            storage_requests,
            storage_errors,
            storage_objects,
            watch_events,
            watch_sizes,
            requests_enabled,
        }
    }

    /// Adds families another layer keeps (the admission chain's).
    pub fn register(&self, families: Vec<Box<dyn Collector>>) {
        for f in families {
            if let Err(e) = self.registry.register(f) {
                tracing::warn!(error = %e, "a metric family is registered twice");
            }
        }
    }

    /// The series of a request, as upstream labels it: `None` for what
    /// upstream does not count (unregistered resources, non-resource paths
    /// other than discovery and the health checks, `/metrics` itself).
    /// `registered` says whether `info`'s resource is served.
    pub fn start(
        &self,
        info: &RequestInfo,
        method: &str,
        query: Option<&str>,
        content_type: Option<&str>,
        registered: impl FnOnce(&RequestInfo) -> bool,
    ) -> Recorder {
        let long_running = info.verb == "watch"
            || info
                .subresource
                .as_deref()
                .is_some_and(|s| CONNECT_SUBRESOURCES.contains(&s));
        let read_only = matches!(info.verb.as_str(), "get" | "list" | "watch");
        let mut rec = Recorder {
            series: None,
            started: Instant::now(),
            long_running,
            read_only,
        };
        let idx = usize::from(!read_only);
        let (now, max) = &self.in_flight[idx];
        let n = now.fetch_add(1, Relaxed) + 1;
        max.fetch_max(n, Relaxed);
        if !self.requests_enabled {
            return rec;
        }
        let (verb, scope, component, subresource) = if info.is_resource_request {
            if !registered(info) {
                return rec;
            }
            let scope = if info.name.is_some() || info.verb == "create" {
                "resource"
            } else if info.namespace.is_some() {
                "namespace"
            } else {
                "cluster"
            };
            (
                verb(info, method, scope, content_type),
                scope,
                "apiserver",
                info.subresource.as_deref().unwrap_or(""),
            )
        } else {
            let path = info.path.trim_end_matches('/');
            let component = match path {
                "/livez" | "/readyz" | "/healthz" => "",
                "/api" | "/apis" => "apiserver",
                _ => return rec,
            };
            (verb(info, method, "", content_type), "", component, path)
        };
        let dry_run = dry_run(query);
        let resource = info.is_resource_request;
        let key = Key {
            verb,
            dry_run: &dry_run,
            group: if resource { &info.api_group } else { "" },
            version: if resource { &info.api_version } else { "" },
            resource: if resource { &info.resource } else { "" },
            subresource,
            scope,
            component,
        };
        rec.series = Some(self.series(&key));
        if rec.long_running
            && let Some(s) = &rec.series
        {
            s.longrunning.inc();
        }
        rec
    }

    /// The cached series of `key`: one lookup by one composed string.
    fn series(&self, key: &Key<'_>) -> Arc<Series> {
        let mut lookup = String::with_capacity(96);
        for part in key.parts() {
            lookup.push_str(part);
            lookup.push('\u{1}');
        }
        if let Some(s) = self
            .series
            .read()
            .expect("series lock")
            .get(lookup.as_str())
        {
            return s.clone();
        }
        let mut l = Vec::with_capacity(8);
        labels(key, &mut l, true);
        let duration = self.duration.with_label_values(&l);
        l.clear();
        labels(key, &mut l, false);
        let sli = self.sli.with_label_values(&l);
        let sizes = self.sizes.with_label_values(&l);
        let longrunning = self.longrunning.with_label_values(&l);
        let series = Arc::new(Series {
            labels: key.parts().map(String::from).collect(),
            verb: key.verb,
            duration,
            sli,
            sizes,
            longrunning,
            codes: Default::default(),
        });
        self.series
            .write()
            .expect("series lock")
            .entry(lookup.into_boxed_str())
            .or_insert(series)
            .clone()
    }

    /// A request's response head is ready: its code, and (a non-streamed
    /// body's) size. A long-running request's latency waits for
    /// [`Metrics::finish`].
    pub fn respond(
        &self,
        rec: &Recorder,
        code: u16,
        size: Option<u64>,
        excluded: &Excluded,
    ) -> bool {
        let (now, _) = &self.in_flight[usize::from(!rec.read_only)];
        now.fetch_sub(1, Relaxed);
        let Some(s) = &rec.series else {
            return false;
        };
        let counter = s
            .codes
            .read()
            .expect("codes lock")
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, n)| n.clone());
        let counter = counter.unwrap_or_else(|| {
            let mut l: Vec<&str> = s.labels.iter().map(String::as_str).collect();
            let code_text = code.to_string();
            l.push(&code_text);
            let n = self.requests.with_label_values(&l);
            s.codes.write().expect("codes lock").push((code, n.clone()));
            n
        });
        counter.inc();
        if matches!(s.verb, "GET" | "LIST")
            && let Some(size) = size
        {
            s.sizes.observe(size as f64);
        }
        if rec.long_running {
            return true;
        }
        self.observe(s, rec.started, excluded);
        false
    }

    /// A long-running request ended (its stream closed).
    pub fn finish(&self, rec: &Recorder, excluded: &Excluded) {
        if let Some(s) = &rec.series {
            s.longrunning.dec();
            self.observe(s, rec.started, excluded);
        }
    }

    fn observe(&self, s: &Series, started: Instant, excluded: &Excluded) {
        let elapsed = started.elapsed();
        s.duration.observe(elapsed.as_secs_f64());
        s.sli
            .observe(elapsed.saturating_sub(excluded.get()).as_secs_f64());
    }

    /// The counter and size histogram of watch events of one kind
    /// (upstream's `group`, `version`, `kind` labels).
    pub fn watch_events(&self, group: &str, version: &str, kind: &str) -> (IntCounter, Histogram) {
        let labels = [group, version, kind];
        (
            self.watch_events.with_label_values(&labels),
            self.watch_sizes.with_label_values(&labels),
        )
    }

    /// One authentication: `success`, `failure` or `error`, and the user
    /// of a success (folded as upstream folds user names).
    pub fn authenticated(&self, result: &str, elapsed: Duration, user: Option<&str>) {
        let i = AUTHN_RESULTS.iter().position(|r| *r == result).unwrap_or(2);
        let (attempts, duration) = &self.authn[i];
        attempts.inc();
        duration.observe(elapsed.as_secs_f64());
        if let Some(user) = user {
            let folded = if user.contains('@') { "email_id" } else { user };
            let bucket = USER_BUCKETS
                .iter()
                .position(|b| *b == folded)
                .unwrap_or(USER_BUCKETS.len() - 1);
            self.authn_user[bucket].inc();
        }
    }

    /// One authorization: `allowed`, `denied` or `no-opinion`; `decider`:
    /// the authorizer (type, name) whose decision was terminal.
    pub fn authorized(&self, result: &str, elapsed: Duration, decider: Option<(&str, &str)>) {
        let i = AUTHZ_RESULTS.iter().position(|r| *r == result).unwrap_or(2);
        let (attempts, duration) = &self.authz[i];
        attempts.inc();
        duration.observe(elapsed.as_secs_f64());
        if let Some((kind, name)) = decider {
            let decision = if result == "allowed" {
                "allowed"
            } else {
                "denied"
            };
            if let Some(i) = DECIDERS
                .iter()
                .position(|d| (d.0, d.1, d.2) == (kind, name, decision))
            {
                self.decisions[i].inc();
            }
        }
    }

    /// `apiserver_audit_event_total`, for the audit log to count into.
    pub fn audit_events(&self) -> IntCounter {
        self.audit_events.clone()
    }

    /// The objects of each resource (`pods`, `deployments.apps`); `-1`
    /// where counting failed.
    pub fn set_object_counts(&self, counts: &[(String, i64)]) {
        for (resource, n) in counts {
            self.storage_objects.with_label_values(&[resource]).set(*n);
        }
    }

    /// Prometheus text of every family here.
    pub fn text(&self) -> String {
        for (i, kind) in ["readOnly", "mutating"].into_iter().enumerate() {
            let (now, max) = &self.in_flight[i];
            let current = now.load(Relaxed);
            let peak = max.swap(current, Relaxed).max(current);
            self.inflight.with_label_values(&[kind]).set(peak);
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        let mut text = String::from_utf8(out).unwrap_or_default();
        process_text(&mut text);
        text
    }

    /// The number of series the request families hold (a test's bound on
    /// cardinality).
    pub fn request_series(&self) -> usize {
        self.requests
            .collect()
            .iter()
            .map(|f| f.get_metric().len())
            .sum()
    }
}

/// client_golang's `process_*` families, read from `/proc/self` at each
/// scrape (Linux; elsewhere none).
fn process_text(out: &mut String) {
    use std::fmt::Write as _;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields after the command name (which may hold spaces), from field 3.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
    let page = rustix::param::page_size() as u64;
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    let mut family = |name: &str, kind: &str, help: &str, value: String| {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
        );
    };
    if let (Some(utime), Some(stime)) = (field(14), field(15)) {
        family(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            format!("{}", (utime + stime) as f64 / ticks),
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        family(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            fds.count().to_string(),
        );
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if let Some(max) = limit.current {
        family(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max.to_string(),
        );
    }
    if let Some(vsize) = field(23) {
        family(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            vsize.to_string(),
        );
    }
    let vmax = rustix::process::getrlimit(rustix::process::Resource::As).current;
    family(
        "process_virtual_memory_max_bytes",
        "gauge",
        "Maximum amount of virtual memory available in bytes.",
        vmax.map_or("-1".to_string(), |v| v.to_string()),
    );
    if let Some(rss) = field(24) {
        family(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            (rss * page).to_string(),
        );
    }
    if let (Some(start), Some(boot)) = (field(22), boot) {
        family(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            format!("{}", boot as f64 + start as f64 / ticks),
        );
    }
}

/// Upstream's reported verb (`CanonicalVerb` then `CleanVerb`): from the
/// HTTP method, with reads split into GET and LIST by scope, watches,
/// server-side apply and connect subresources named, anything else
/// `other`.
fn verb(info: &RequestInfo, method: &str, scope: &str, content_type: Option<&str>) -> &'static str {
    if info.verb == "watch" {
        return "WATCH";
    }
    if info.is_resource_request
        && info
            .subresource
            .as_deref()
            .is_some_and(|s| CONNECT_SUBRESOURCES.contains(&s))
    {
        return "CONNECT";
    }
    match method {
        "GET" | "HEAD" if !matches!(scope, "resource" | "") => "LIST",
        "GET" | "HEAD" => "GET",
        "PATCH" if content_type.is_some_and(|c| c.starts_with("application/apply-patch")) => {
            "APPLY"
        }
        m => VALID_VERBS
            .iter()
            .find(|v| **v == m)
            .copied()
            .unwrap_or("other"),
    }
}

/// Upstream's `cleanDryRun`: the `dryRun` values, deduplicated and sorted,
/// joined by commas; `invalid` when one is not `All`.
fn dry_run(query: Option<&str>) -> String {
    let Some(q) = query.filter(|q| q.contains("dryRun")) else {
        return String::new();
    };
    let mut values: Vec<String> = q
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .filter(|(k, _)| *k == "dryRun")
        .map(|(_, v)| v.to_string())
        .collect();
    values.sort();
    values.dedup();
    if values.iter().any(|v| v != "All") {
        return "invalid".into();
    }
    values.join(",")
}

/// Storage operations, upstream's names.
const STORAGE_OPS: [&str; 6] = ["get", "list", "create", "update", "delete", "listWithCount"];

/// The series of one (operation, group-resource).
#[derive(Clone)]
struct StorageHandles {
    duration: Histogram,
    requests: IntCounter,
    errors: IntCounter,
}

/// Storage metrics of one operation.
pub struct StorageOp {
    handles: StorageHandles,
    started: Instant,
}

/// The part of a key that names its resource: `/registry/<group>/<plural>`.
fn resource_prefix(key: &str) -> &str {
    let Some(rest) = key.strip_prefix("/registry/") else {
        return "";
    };
    let mut slashes = rest.match_indices('/');
    match (slashes.next(), slashes.next()) {
        (Some(_), Some((i, _))) => &key[.."/registry/".len() + i],
        (Some(_), None) => key,
        _ => "",
    }
}

impl Metrics {
    /// Starts timing a storage operation (one of [`STORAGE_OPS`]) on `key`
    /// (or prefix).
    pub fn storage_op(&self, operation: &'static str, key: &str) -> StorageOp {
        let op = STORAGE_OPS
            .iter()
            .position(|o| *o == operation)
            .unwrap_or(0);
        let prefix = resource_prefix(key);
        let cached = self.storage[op]
            .read()
            .expect("storage metrics lock")
            .get(prefix)
            .cloned();
        let handles = cached.unwrap_or_else(|| {
            let kind = group_resource(key);
            let labels = [STORAGE_OPS[op], kind.as_str()];
            let h = StorageHandles {
                duration: self.storage_duration.with_label_values(&labels),
                requests: self.storage_requests.with_label_values(&labels),
                errors: self.storage_errors.with_label_values(&labels),
            };
            self.storage[op]
                .write()
                .expect("storage metrics lock")
                .insert(prefix.into(), h.clone());
            h
        });
        StorageOp {
            handles,
            started: Instant::now(),
        }
    }
}

impl StorageOp {
    pub fn done(self, ok: bool) {
        self.handles
            .duration
            .observe(self.started.elapsed().as_secs_f64());
        self.handles.requests.inc();
        if !ok {
            self.handles.errors.inc();
        }
    }
}

/// Upstream's group-resource string of a storage key
/// (`/registry/<group>/<plural>/...`): `pods`, `deployments.apps`; keys
/// outside resources (ranges, leases of the store itself) are `other`.
pub fn group_resource(key: &str) -> String {
    let rest = key.strip_prefix("/registry/").unwrap_or("");
    let mut parts = rest.split('/');
    match (parts.next(), parts.next()) {
        (Some("core"), Some(plural)) if !plural.is_empty() => plural.to_string(),
        (Some(group), Some(plural)) if !group.is_empty() && !plural.is_empty() => {
            format!("{plural}.{group}")
        }
        _ => "other".to_string(),
    }
}

/// A store whose every request is timed and counted under upstream's
/// `etcd_request_*` families (for the embedded store too: the names are
/// the ones dashboards query).
pub struct MeteredStorage {
    inner: Arc<dyn Storage>,
    metrics: Arc<Metrics>,
}

impl MeteredStorage {
    pub fn new(inner: Arc<dyn Storage>, metrics: Arc<Metrics>) -> Self {
        MeteredStorage { inner, metrics }
    }
}

#[async_trait::async_trait]
impl Storage for MeteredStorage {
    async fn get(&self, key: &str) -> StorageResult<Option<KeyValue>> {
        let op = self.metrics.storage_op("get", key);
        let r = self.inner.get(key).await;
        op.done(r.is_ok());
        r
    }
    async fn create(&self, key: &str, value: Vec<u8>) -> StorageResult<KeyValue> {
        let op = self.metrics.storage_op("create", key);
        let r = self.inner.create(key, value).await;
        op.done(r.is_ok());
        r
    }
    async fn update(&self, key: &str, value: Vec<u8>, expected: u64) -> StorageResult<KeyValue> {
        let op = self.metrics.storage_op("update", key);
        let r = self.inner.update(key, value, expected).await;
        op.done(r.is_ok());
        r
    }
    async fn delete(&self, key: &str, expected: Option<u64>) -> StorageResult<KeyValue> {
        let op = self.metrics.storage_op("delete", key);
        let r = self.inner.delete(key, expected).await;
        op.done(r.is_ok());
        r
    }
    async fn list(&self, prefix: &str, opts: ListOptions) -> StorageResult<ListResult> {
        let op = self.metrics.storage_op("list", prefix);
        let r = self.inner.list(prefix, opts).await;
        op.done(r.is_ok());
        r
    }
    async fn count(&self, prefix: &str) -> StorageResult<u64> {
        let op = self.metrics.storage_op("listWithCount", prefix);
        let r = self.inner.count(prefix).await;
        op.done(r.is_ok());
        r
    }
    async fn watch(&self, prefix: &str, after: u64) -> StorageResult<WatchStream> {
        self.inner.watch(prefix, after).await
    }
    async fn current_revision(&self) -> StorageResult<u64> {
        self.inner.current_revision().await
    }
    async fn modified_since(&self, prefix: &str, after: u64) -> StorageResult<ListResult> {
        let op = self.metrics.storage_op("list", prefix);
        let r = self.inner.modified_since(prefix, after).await;
        op.done(r.is_ok());
        r
    }
    async fn compact(&self, revision: u64) -> StorageResult<()> {
        self.inner.compact(revision).await
    }
    async fn status(&self) -> StorageResult<StoreStatus> {
        self.inner.status().await
    }
    async fn server_health(&self) -> Vec<StorageResult<String>> {
        self.inner.server_health().await
    }
    fn announce_write(&self) -> WriteAnnouncement {
        self.inner.announce_write()
    }
}

/// Counts each served resource's objects every `interval` into
/// `apiserver_storage_objects` (upstream's `startObservingCount`), the
/// first time at once.
pub fn spawn_object_counter(
    metrics: Arc<Metrics>,
    storage: Arc<dyn Storage>,
    resources: Arc<wasm_apiserver_registry::Resources>,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let snapshot = resources.snapshot();
            let mut seen = std::collections::HashSet::new();
            let mut counts = Vec::new();
            for r in snapshot.all() {
                let prefix = r.key_prefix();
                if !seen.insert(prefix.clone()) {
                    continue;
                }
                let name = if r.group.is_empty() {
                    r.plural.clone()
                } else {
                    format!("{}.{}", r.plural, r.group)
                };
                let n = match storage.count(&prefix).await {
                    Ok(n) => i64::try_from(n).unwrap_or(i64::MAX),
                    Err(_) => -1,
                };
                counts.push((name, n));
            }
            metrics.set_object_counts(&counts);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_apiserver_api::request;

    fn key_of(
        method: &str,
        path: &str,
        query: Option<&str>,
        ct: Option<&str>,
    ) -> Option<(String, String, String)> {
        let m = Metrics::new(true);
        let info = request::parse(method, path, query);
        let rec = m.start(&info, method, query, ct, |_| true);
        rec.series
            .as_ref()
            .map(|s| (s.verb.to_string(), s.labels[6].clone(), s.labels[1].clone()))
    }

    #[test]
    fn verbs_and_scopes_are_upstream_s() {
        let cases = [
            (
                "GET",
                "/api/v1/namespaces/ns/pods/p",
                None,
                None,
                "GET",
                "resource",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/pods",
                None,
                None,
                "LIST",
                "namespace",
            ),
            ("GET", "/api/v1/pods", None, None, "LIST", "cluster"),
            (
                "GET",
                "/api/v1/pods",
                Some("watch=true"),
                None,
                "WATCH",
                "cluster",
            ),
            (
                "GET",
                "/api/v1/watch/namespaces/ns/pods",
                None,
                None,
                "WATCH",
                "namespace",
            ),
            (
                "POST",
                "/api/v1/namespaces/ns/pods",
                None,
                None,
                "POST",
                "resource",
            ),
            (
                "PUT",
                "/api/v1/namespaces/ns/pods/p",
                None,
                None,
                "PUT",
                "resource",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/ns/pods",
                None,
                None,
                "DELETE",
                "namespace",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/ns/pods/p",
                None,
                Some("application/apply-patch+yaml"),
                "APPLY",
                "resource",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/ns/pods/p",
                None,
                Some("application/merge-patch+json"),
                "PATCH",
                "resource",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/pods/p/log",
                None,
                None,
                "CONNECT",
                "resource",
            ),
            (
                "OPTIONS",
                "/api/v1/namespaces/ns/pods/p",
                None,
                None,
                "other",
                "resource",
            ),
            ("GET", "/readyz", None, None, "GET", ""),
        ];
        for (method, path, query, ct, verb, scope) in cases {
            let (v, s, _) =
                key_of(method, path, query, ct).unwrap_or_else(|| panic!("{path} not counted"));
            assert_eq!(
                (v.as_str(), s.as_str()),
                (verb, scope),
                "{method} {path} {query:?}"
            );
        }
        assert!(key_of("GET", "/metrics", None, None).is_none());
        assert!(key_of("GET", "/version", None, None).is_none());
    }

    #[test]
    fn dry_run_is_cleaned() {
        assert_eq!(dry_run(None), "");
        assert_eq!(dry_run(Some("dryRun=All&dryRun=All")), "All");
        assert_eq!(dry_run(Some("dryRun=Nope")), "invalid");
        assert_eq!(dry_run(Some("limit=1")), "");
    }

    #[test]
    fn unregistered_resources_are_not_counted() {
        let m = Metrics::new(true);
        for i in 0..100 {
            let path = format!("/apis/g{i}.example/v1/things{i}");
            let info = request::parse("GET", &path, None);
            let rec = m.start(&info, "GET", None, None, |_| false);
            m.respond(&rec, 404, None, &Excluded::default());
        }
        assert_eq!(m.request_series(), 0);
        let info = request::parse("GET", "/api/v1/pods", None);
        let rec = m.start(&info, "GET", None, None, |_| true);
        m.respond(&rec, 200, Some(10), &Excluded::default());
        assert_eq!(m.request_series(), 1);
        assert!(m.text().contains(
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"cluster\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 1"
        ));
    }

    #[test]
    fn storage_types_are_group_resources() {
        assert_eq!(group_resource("/registry/core/pods/ns/p"), "pods");
        assert_eq!(
            group_resource("/registry/apps/deployments/"),
            "deployments.apps"
        );
        assert_eq!(group_resource("/other"), "other");
    }
}
