//! API Priority and Fairness in the request path (upstream's
//! `apiserver/pkg/util/flowcontrol`), after authentication and
//! impersonation, before authorization:
//!
//! * Each request is classified by the FlowSchema objects (the bootstrap
//!   ones, created at start as upstream's, and any a user adds) into a
//!   priority level and a flow (`ByUser`, `ByNamespace`, or one flow).
//! * An `Exempt` level runs at once (`system:masters`, health probes). A
//!   limited level has `ceil(total × shares / Σ shares)` seats, `total`
//!   being `--max-requests-inflight` + `--max-mutating-requests-inflight`
//!   (upstream's server concurrency limit). With a seat free and nobody
//!   waiting, a request runs; else it waits in one of its level's queues:
//!   the shortest of the `handSize` queues its flow's hash deals it
//!   (shuffle sharding), and a freed seat goes to the queues in turn, so
//!   one flooding flow fills only its own queues while others keep
//!   their turns. A full queue, a `Reject` level with no seat, or a wait
//!   longer than [`MAX_WAIT`] answers `429 TooManyRequests` with
//!   `Retry-After` and upstream's `Status`.
//! * Watches are long-running: they do not hold a seat.
//! * Responses carry `X-Kubernetes-PF-FlowSchema-UID` and
//!   `X-Kubernetes-PF-PriorityLevel-UID`; `/metrics` has upstream's
//!   `apiserver_flowcontrol_*` families.
//! * `--enable-priority-and-fairness=false` keeps only the two in-flight
//!   limits (reads, mutations), each answering 429 when full.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{Semaphore, oneshot};
use wasm_apiserver_api::RequestInfo;
use wasm_apiserver_api::flowcontrol::{self as apf, FlowSchema, LimitResponse, PriorityLevel};
use wasm_apiserver_plugins::UserInfo;
use wasm_apiserver_registry::Objects;

/// The longest a request waits in a queue before it is refused.
pub const MAX_WAIT: Duration = Duration::from_secs(15);

/// The classification and the levels' state.
pub struct FlowControl {
    enabled: bool,
    /// The server's concurrency limit (seats shared by the limited levels).
    total: std::sync::atomic::AtomicUsize,
    config: RwLock<Arc<Config>>,
    levels: Mutex<HashMap<String, Arc<Level>>>,
    metrics: Mutex<Metrics>,
    readonly: Arc<Semaphore>,
    mutating: Arc<Semaphore>,
}

/// The configuration as the filter reads it: the schemas in matching
/// order, each with what a request of it needs made once at
/// [`FlowControl::configure`] (its level's state, the response headers,
/// its counter), so that classifying and admitting a request allocates
/// nothing and takes no lock but its level's.
#[derive(Default)]
struct Config {
    schemas: Vec<Schema>,
}

struct Schema {
    schema: FlowSchema,
    /// The level's state; `None` when the level is exempt or missing (the
    /// request runs at once).
    level: Option<Arc<Level>>,
    /// `X-Kubernetes-PF-FlowSchema-UID` and `...-PriorityLevel-UID`.
    schema_uid: Option<HeaderValue>,
    level_uid: Option<HeaderValue>,
    /// `apiserver_flowcontrol_dispatched_requests_total` of this schema and
    /// level (kept across configurations).
    dispatched: Arc<AtomicU64>,
    /// The flow of a schema without a distinguisher (its only one).
    one_flow: u64,
}

/// A flow's identity within its level: a hash of the schema's name and the
/// request's distinguisher (upstream's flow is `schema/distinguisher`).
fn flow_key(schema: &str, distinguisher: Option<&str>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (schema, distinguisher).hash(&mut h);
    h.finish()
}

#[derive(Default)]
struct Metrics {
    dispatched: BTreeMap<(String, String), Arc<AtomicU64>>,
    rejected: BTreeMap<(String, String, &'static str), u64>,
}

struct Level {
    state: Mutex<LevelState>,
}

struct Waiter {
    id: u64,
    flow: u64,
    tx: oneshot::Sender<()>,
}

struct LevelState {
    limit: usize,
    executing: usize,
    /// Seats held per flow (flows holding none are absent).
    by_flow: HashMap<u64, usize>,
    response: LimitResponse,
    queues: Vec<VecDeque<Waiter>>,
    /// Requests in the queues (a freed seat looks at them only when some
    /// wait).
    waiting: usize,
    next: usize,
    ids: u64,
}

impl LevelState {
    /// The most seats one flow may hold: all but one in a queuing level
    /// of two seats or more (a request of another flow then never waits
    /// behind a level one flow fills), else all.
    fn flow_cap(&self) -> usize {
        match self.response {
            LimitResponse::Queue { .. } if self.limit >= 2 => self.limit - 1,
            _ => self.limit,
        }
    }

    fn held(&self, flow: u64) -> usize {
        self.by_flow.get(&flow).copied().unwrap_or(0)
    }

    fn may_run(&self, flow: u64) -> bool {
        self.executing < self.limit && self.held(flow) < self.flow_cap()
    }

    fn take(&mut self, flow: u64) {
        self.executing += 1;
        *self.by_flow.entry(flow).or_default() += 1;
    }

    fn release(&mut self, flow: u64) {
        self.executing = self.executing.saturating_sub(1);
        if let Some(n) = self.by_flow.get_mut(&flow) {
            *n -= 1;
            if *n == 0 {
                self.by_flow.remove(&flow);
            }
        }
    }

    /// Hands free seats to waiters, the queues in turn, each queue's
    /// first waiter whose flow is under its cap.
    fn dispatch(&mut self) {
        let n = self.queues.len();
        'seats: while self.waiting > 0 && self.executing < self.limit {
            let cap = self.flow_cap();
            for i in 0..n {
                let q = (self.next + i) % n;
                let by_flow = &self.by_flow;
                let Some(pos) = self.queues[q]
                    .iter()
                    .position(|w| by_flow.get(&w.flow).copied().unwrap_or(0) < cap)
                else {
                    continue;
                };
                let w = self.queues[q].remove(pos).expect("position in queue");
                self.waiting -= 1;
                self.next = (q + 1) % n;
                self.take(w.flow);
                if w.tx.send(()).is_err() {
                    // Its request is gone.
                    self.release(w.flow);
                }
                continue 'seats;
            }
            return;
        }
    }
}

/// A held seat; dropping it hands the seat on.
struct Seat(Arc<Level>, u64);

impl Drop for Seat {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().expect("level lock");
        s.release(self.1);
        s.dispatch();
    }
}

enum Admit {
    Run(Seat),
    Wait(Arc<Level>, u64, usize, u64, oneshot::Receiver<()>),
    Reject(&'static str),
}

impl Level {
    fn admit(self: &Arc<Self>, flow: u64) -> Admit {
        let mut s = self.state.lock().expect("level lock");
        // No waiter may run while a seat is free (`dispatch` keeps it so):
        // a request that may run goes before no one.
        if s.may_run(flow) {
            s.take(flow);
            return Admit::Run(Seat(self.clone(), flow));
        }
        let LimitResponse::Queue {
            hand_size,
            queue_length_limit,
            ..
        } = s.response
        else {
            return Admit::Reject("concurrency-limit");
        };
        let n = s.queues.len().max(1);
        // Shuffle sharding: the flow's hand of queues, the shortest of it.
        let q = (0..hand_size)
            .map(|i| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (flow, i).hash(&mut h);
                (h.finish() as usize) % n
            })
            .min_by_key(|q| s.queues.get(*q).map_or(0, VecDeque::len))
            .unwrap_or(0);
        if s.queues
            .get(q)
            .is_none_or(|q| q.len() >= queue_length_limit)
        {
            return Admit::Reject("queue-full");
        }
        s.ids += 1;
        let id = s.ids;
        let (tx, rx) = oneshot::channel();
        s.queues[q].push_back(Waiter { id, flow, tx });
        s.waiting += 1;
        Admit::Wait(self.clone(), flow, q, id, rx)
    }

    /// Waits for a seat at most `max`; `None` when refused.
    async fn wait(
        self: Arc<Self>,
        flow: u64,
        q: usize,
        id: u64,
        mut rx: oneshot::Receiver<()>,
        max: Duration,
    ) -> Option<Seat> {
        match tokio::time::timeout(max, &mut rx).await {
            Ok(Ok(())) => Some(Seat(self, flow)),
            // Its queue was dropped by a new configuration.
            Ok(Err(_)) => None,
            Err(_) => {
                let mut s = self.state.lock().expect("level lock");
                let queued = s.queues.get_mut(q).and_then(|queue| {
                    let at = queue.iter().position(|w| w.id == id)?;
                    queue.remove(at)
                });
                if queued.is_some() {
                    s.waiting -= 1;
                } else if rx.try_recv().is_ok() {
                    // Handed a seat just as the wait ended: give it on.
                    s.release(flow);
                    s.dispatch();
                }
                None
            }
        }
    }
}

fn is_mutating(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection" | "post" | "put"
    )
}

impl FlowControl {
    pub fn new(enabled: bool, max_readonly: usize, max_mutating: usize) -> Self {
        FlowControl {
            enabled,
            total: (max_readonly + max_mutating).max(1).into(),
            config: Default::default(),
            levels: Default::default(),
            metrics: Default::default(),
            readonly: Arc::new(Semaphore::new(max_readonly.max(1))),
            mutating: Arc::new(Semaphore::new(max_mutating.max(1))),
        }
    }

    /// Changes the server's concurrency limit (applied at the next
    /// [`FlowControl::configure`]).
    pub fn set_total(&self, seats: usize) {
        self.total
            .store(seats.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// Replaces the configuration with the current FlowSchema and
    /// PriorityLevelConfiguration objects; levels keep their waiters.
    pub fn configure(&self, schemas: &[serde_json::Value], levels: &[serde_json::Value]) {
        let mut schemas: Vec<FlowSchema> = schemas.iter().filter_map(FlowSchema::parse).collect();
        apf::sort(&mut schemas);
        let levels: HashMap<String, PriorityLevel> = levels
            .iter()
            .filter_map(PriorityLevel::parse)
            .map(|l| (l.name.clone(), l))
            .collect();
        let sum: u64 = levels
            .values()
            .filter_map(|l| l.limited.as_ref())
            .map(|l| l.shares)
            .sum();
        let mut state = self.levels.lock().expect("levels lock");
        for l in levels.values() {
            let Some(limited) = &l.limited else {
                continue;
            };
            let total = self.total.load(std::sync::atomic::Ordering::Relaxed);
            let limit = apf::nominal_seats(total, limited.shares, sum);
            let queues = match limited.response {
                LimitResponse::Queue { queues, .. } => queues,
                LimitResponse::Reject => 0,
            };
            let level = state.entry(l.name.clone()).or_insert_with(|| {
                Arc::new(Level {
                    state: Mutex::new(LevelState {
                        limit,
                        executing: 0,
                        by_flow: HashMap::new(),
                        response: limited.response.clone(),
                        queues: Vec::new(),
                        waiting: 0,
                        next: 0,
                        ids: 0,
                    }),
                })
            });
            let mut s = level.state.lock().expect("level lock");
            s.limit = limit;
            s.response = limited.response.clone();
            if s.queues.len() != queues {
                // Waiters of dropped queues are refused (their senders drop).
                s.queues.resize_with(queues, VecDeque::new);
                s.waiting = s.queues.iter().map(VecDeque::len).sum();
                s.next = 0;
            }
            // A larger limit hands seats to waiters at once.
            s.dispatch();
        }
        let mut metrics = self.metrics.lock().expect("metrics lock");
        let schemas = schemas
            .into_iter()
            .map(|schema| {
                let pl = levels.get(&schema.level);
                let level = pl
                    .filter(|l| l.limited.is_some())
                    .and_then(|_| state.get(&schema.level).cloned());
                let dispatched = metrics
                    .dispatched
                    .entry((schema.name.clone(), schema.level.clone()))
                    .or_default()
                    .clone();
                Schema {
                    level,
                    schema_uid: HeaderValue::from_str(&schema.uid).ok(),
                    level_uid: HeaderValue::from_str(pl.map_or("", |l| l.uid.as_str())).ok(),
                    dispatched,
                    one_flow: flow_key(&schema.name, None),
                    schema,
                }
            })
            .collect();
        drop(metrics);
        *self.config.write().expect("config lock") = Arc::new(Config { schemas });
    }

    fn count_rejected(&self, schema: &str, level: &str, reason: &'static str) {
        *self
            .metrics
            .lock()
            .expect("metrics lock")
            .rejected
            .entry((schema.into(), level.into(), reason))
            .or_default() += 1;
    }

    /// The `apiserver_flowcontrol_*` families.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        let m = self.metrics.lock().expect("metrics lock");
        out.push_str("# HELP apiserver_flowcontrol_dispatched_requests_total Number of requests executed by API Priority and Fairness subsystem\n# TYPE apiserver_flowcontrol_dispatched_requests_total counter\n");
        for ((fs, pl), n) in &m.dispatched {
            let n = n.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            out.push_str(&format!(
                "apiserver_flowcontrol_dispatched_requests_total{{flow_schema=\"{fs}\",priority_level=\"{pl}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP apiserver_flowcontrol_rejected_requests_total Number of requests rejected by API Priority and Fairness subsystem\n# TYPE apiserver_flowcontrol_rejected_requests_total counter\n");
        for ((fs, pl, reason), n) in &m.rejected {
            out.push_str(&format!(
                "apiserver_flowcontrol_rejected_requests_total{{flow_schema=\"{fs}\",priority_level=\"{pl}\",reason=\"{reason}\"}} {n}\n"
            ));
        }
        drop(m);
        let levels = self.levels.lock().expect("levels lock");
        let mut names: Vec<&String> = levels.keys().collect();
        names.sort();
        for (family, help) in [
            (
                "apiserver_flowcontrol_current_executing_requests",
                "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
            ),
            (
                "apiserver_flowcontrol_current_inqueue_requests",
                "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            ),
            (
                "apiserver_flowcontrol_nominal_limit_seats",
                "Nominal number of execution seats configured for each priority level",
            ),
        ] {
            out.push_str(&format!("# HELP {family} {help}\n# TYPE {family} gauge\n"));
            for name in &names {
                let s = levels[*name].state.lock().expect("level lock");
                let v = match family {
                    "apiserver_flowcontrol_current_executing_requests" => s.executing,
                    "apiserver_flowcontrol_current_inqueue_requests" => {
                        s.queues.iter().map(VecDeque::len).sum()
                    }
                    _ => s.limit,
                };
                out.push_str(&format!("{family}{{priority_level=\"{name}\"}} {v}\n"));
            }
        }
        out
    }
}

/// Upstream's 429: a `Status` with `retryAfterSeconds` and a `Retry-After`
/// header.
fn too_many_requests() -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 1},
        "code": 429,
    });
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::RETRY_AFTER, "1"),
        ],
        format!("{body}\n"),
    )
        .into_response()
}

/// The filter (see the module docs; `filters::flow_control` runs it).
pub async fn filter(fc: &FlowControl, req: Request, next: Next) -> Response {
    let (Some(info), Some(user)) = (
        req.extensions().get::<RequestInfo>(),
        req.extensions().get::<UserInfo>(),
    ) else {
        return next.run(req).await;
    };
    if info.verb == "watch" {
        return next.run(req).await;
    }
    if !fc.enabled {
        let sem = if is_mutating(&info.verb) {
            &fc.mutating
        } else {
            &fc.readonly
        };
        let Ok(_permit) = sem.clone().try_acquire_owned() else {
            return too_many_requests();
        };
        return next.run(req).await;
    }
    let config = fc.config.read().expect("config lock").clone();
    let r = apf::Request {
        user: &user.username,
        groups: &user.groups,
        verb: &info.verb,
        is_resource: info.is_resource_request,
        api_group: &info.api_group,
        resource: &info.resource,
        subresource: info.subresource.as_deref(),
        namespace: info.namespace.as_deref(),
        path: &info.path,
    };
    // Nothing matches only without the mandatory `catch-all`: run it.
    let Some(schema) = config.schemas.iter().find(|s| s.schema.matches(&r)) else {
        return next.run(req).await;
    };
    let _seat = match &schema.level {
        None => None,
        Some(level) => {
            let flow = match schema.schema.distinguisher_of(&r) {
                None => schema.one_flow,
                Some(d) => flow_key(&schema.schema.name, Some(d)),
            };
            match level.admit(flow) {
                Admit::Run(seat) => Some(seat),
                Admit::Reject(reason) => {
                    fc.count_rejected(&schema.schema.name, &schema.schema.level, reason);
                    return too_many_requests();
                }
                Admit::Wait(level, flow, q, id, rx) => {
                    // The SLI latency leaves out the turn in the queue.
                    let queued = std::time::Instant::now();
                    let waited = level.wait(flow, q, id, rx, MAX_WAIT).await;
                    if let Some(e) = req.extensions().get::<crate::metrics::Excluded>() {
                        e.add(queued.elapsed());
                    }
                    match waited {
                        Some(seat) => Some(seat),
                        None => {
                            fc.count_rejected(
                                &schema.schema.name,
                                &schema.schema.level,
                                "time-out",
                            );
                            return too_many_requests();
                        }
                    }
                }
            }
        }
    };
    schema.dispatched.fetch_add(1, Ordering::Relaxed);
    let mut resp = next.run(req).await;
    let headers = resp.headers_mut();
    if let Some(v) = &schema.schema_uid {
        headers.insert("x-kubernetes-pf-flowschema-uid", v.clone());
    }
    if let Some(v) = &schema.level_uid {
        headers.insert("x-kubernetes-pf-prioritylevel-uid", v.clone());
    }
    resp
}

/// Creates upstream's bootstrap configuration objects that are missing.
pub async fn ensure_bootstrap(objects: &Objects) -> Result<(), wasm_apiserver_api::ApiError> {
    let opts = wasm_apiserver_registry::options::WriteOptions::system("apf-bootstrap");
    for obj in apf::bootstrap_objects() {
        let plural = if obj["kind"] == "FlowSchema" {
            "flowschemas"
        } else {
            "prioritylevelconfigurations"
        };
        let info = objects
            .resources
            .builtin("flowcontrol.apiserver.k8s.io", "v1", plural);
        match objects.create(&info, None, obj, &opts).await {
            Ok(_) | Err(wasm_apiserver_api::ApiError::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The FlowSchema and PriorityLevelConfiguration objects, by name.
type ConfigObjects = (
    BTreeMap<String, serde_json::Value>,
    BTreeMap<String, serde_json::Value>,
);

/// Follows FlowSchema and PriorityLevelConfiguration objects (every
/// replica), reconfiguring at each change.
pub fn spawn_controller(objects: Objects, fc: Arc<FlowControl>) {
    let current: Arc<Mutex<ConfigObjects>> = Default::default();
    for plural in ["flowschemas", "prioritylevelconfigurations"] {
        let (objects, fc, current) = (objects.clone(), fc.clone(), current.clone());
        tokio::spawn(async move {
            let info = objects
                .resources
                .builtin("flowcontrol.apiserver.k8s.io", "v1", plural);
            let schemas = plural == "flowschemas";
            let apply = |cur: &mut ConfigObjects| {
                let s: Vec<serde_json::Value> = cur.0.values().cloned().collect();
                let l: Vec<serde_json::Value> = cur.1.values().cloned().collect();
                fc.configure(&s, &l);
            };
            objects
                .follow(
                    &info,
                    |listed| {
                        let mut cur = current.lock().expect("apf lock");
                        let map: BTreeMap<String, serde_json::Value> = listed
                            .iter()
                            .filter_map(|o| {
                                Some((o["metadata"]["name"].as_str()?.to_string(), o.clone()))
                            })
                            .collect();
                        if schemas {
                            cur.0 = map;
                        } else {
                            cur.1 = map;
                        }
                        apply(&mut cur);
                    },
                    |obj, deleted| {
                        let mut cur = current.lock().expect("apf lock");
                        let name = obj["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        let map = if schemas { &mut cur.0 } else { &mut cur.1 };
                        if deleted {
                            map.remove(&name);
                        } else {
                            map.insert(name, obj);
                        }
                        apply(&mut cur);
                        async {}
                    },
                )
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(limit: usize, queues: usize) -> Arc<Level> {
        Arc::new(Level {
            state: Mutex::new(LevelState {
                limit,
                executing: 0,
                by_flow: HashMap::new(),
                response: LimitResponse::Queue {
                    queues,
                    hand_size: 2,
                    queue_length_limit: 10,
                },
                queues: (0..queues).map(|_| VecDeque::new()).collect(),
                waiting: 0,
                next: 0,
                ids: 0,
            }),
        })
    }

    fn f(name: &str) -> u64 {
        flow_key("test", Some(name))
    }

    fn executing(l: &Level) -> (usize, usize) {
        let s = l.state.lock().unwrap();
        (s.executing, s.queues.iter().map(VecDeque::len).sum())
    }

    #[tokio::test]
    async fn one_flow_leaves_a_seat_for_others() {
        let l = level(3, 4);
        let a1 = l.admit(f("flooder"));
        let a2 = l.admit(f("flooder"));
        assert!(matches!(a1, Admit::Run(_)) && matches!(a2, Admit::Run(_)));
        // The flooder's third request waits although a seat is free ...
        let Admit::Wait(wl, wf, q, id, rx) = l.admit(f("flooder")) else {
            panic!("a flow took every seat of a 3-seat level");
        };
        assert_eq!(executing(&l), (2, 1));
        // ... which another flow takes at once.
        let other = l.admit(f("other"));
        assert!(matches!(other, Admit::Run(_)));
        assert_eq!(executing(&l), (3, 1));
        // A freed flooder seat goes to the flooder's waiter.
        drop(a1);
        let seat = wl
            .wait(wf, q, id, rx, Duration::from_secs(5))
            .await
            .expect("handed the freed seat");
        assert_eq!(executing(&l), (3, 0));
        drop((seat, a2, other));
        assert_eq!(executing(&l), (0, 0));
    }

    #[tokio::test]
    async fn a_single_seat_level_serves_one_flow() {
        let l = level(1, 2);
        let first = l.admit(f("only"));
        assert!(matches!(first, Admit::Run(_)));
        let Admit::Wait(wl, wf, q, id, rx) = l.admit(f("only")) else {
            panic!("a second request ran beside the only seat");
        };
        drop(first);
        let seat = wl.wait(wf, q, id, rx, Duration::from_secs(5)).await;
        assert!(seat.is_some());
        drop(seat);
        assert_eq!(executing(&l), (0, 0));
    }

    #[tokio::test]
    async fn waiters_are_served_by_turns_across_flows() {
        let l = level(2, 8);
        let held = [l.admit(f("a")), l.admit(f("b"))];
        assert!(held.iter().all(|a| matches!(a, Admit::Run(_))));
        let mut waits = Vec::new();
        for flow in ["a", "a", "a", "b"] {
            let Admit::Wait(wl, wf, q, id, rx) = l.admit(f(flow)) else {
                panic!("{flow} ran with every seat taken");
            };
            // Each waiter gives its seat back as soon as it has it.
            let w = tokio::spawn(async move {
                let seat = wl.wait(wf, q, id, rx, Duration::from_secs(5)).await;
                seat.map(|s| s.1)
            });
            waits.push(w);
        }
        // The held "a" seat frees: "b" (under its cap) or "a" may take it,
        // but "b"'s one waiter must not wait behind all three of "a".
        drop(held);
        let b = waits.pop().expect("b");
        assert_eq!(b.await.unwrap(), Some(f("b")));
        for w in waits {
            assert_eq!(w.await.unwrap(), Some(f("a")));
        }
        assert_eq!(executing(&l), (0, 0));
    }

    #[tokio::test]
    async fn a_timed_out_waiter_leaks_no_seat() {
        let l = level(1, 1);
        let first = l.admit(f("x"));
        let Admit::Wait(wl, wf, q, id, rx) = l.admit(f("y")) else {
            panic!("no wait");
        };
        let refused = wl.wait(wf, q, id, rx, Duration::from_millis(20)).await;
        assert!(refused.is_none());
        assert_eq!(executing(&l), (1, 0));
        drop(first);
        assert_eq!(executing(&l), (0, 0));
    }
}
