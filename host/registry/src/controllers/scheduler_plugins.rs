//! The scheduler's wasm plugins: `SchedulerPlugin` objects
//! (`scheduling.wasm-apiserver.io/v1alpha1`) loaded by the scheduler on
//! the leader, and the two calls each makes in a scheduling cycle.
//!
//! * **Loading** goes through the plugin loader every kind shares (module
//!   sources, digest, limits, cluster grants: [`crate::admission::Admission`])
//!   and the runtime's [`SchedulerPlugin`]. The set in use is swapped
//!   atomically between cycles: a cycle runs with the set it started with.
//!   A module that fails to load leaves the previous version running, and
//!   the object's status says why (`phase: Failed`, `activeGeneration`).
//! * **A cycle** ([`filter`], [`score`]): the built-in filters run first,
//!   then each wasm plugin, in name order, once over every node still
//!   feasible (a node one plugin refuses is not shown to the next, as in
//!   upstream's per-node loop); then each scoring plugin once over the
//!   feasible nodes, its scores weighted beside the built-in ones.
//! * **Bounds**: every call runs under the plugin's limits (time, memory),
//!   so a cycle takes at most two calls' time per plugin. A failed call
//!   (trap, timeout, memory, a malformed answer, an `error` refusal) fails
//!   the pod's cycle (`failurePolicy: Fail`: the pod stays Pending with
//!   reason `SchedulerError` naming the plugin) or skips the plugin
//!   (`Ignore`). After [`TRIP_AFTER`] failures in a row a plugin is
//!   suspended for [`SUSPEND_FOR`]: its cycles fail (or skip it) at once
//!   instead of waiting out its limits again, so a broken plugin never
//!   stalls the queue.

use super::Client;
use arc_swap::ArcSwap;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasm_apiserver_api::admission::FailurePolicy;
use wasm_apiserver_api::meta;
use wasm_apiserver_api::scheduler::{Code, ExtraScores, Filtered, Status};
use wasm_apiserver_api::scheduler_plugin::{self as spec_api, SchedulerPluginSpec};
use wasm_apiserver_plugins::{
    self as plugins, RefusalCode, SchedulerNode, SchedulerPlugin, Scored,
};

/// Failures in a row after which a plugin is suspended.
pub const TRIP_AFTER: u32 = 3;
/// How long a suspended plugin is not called.
pub const SUSPEND_FOR: Duration = Duration::from_secs(30);
/// How often the plugins' counters are written to their status.
const STATUS_PERIOD: Duration = Duration::from_secs(5);

/// What one loaded plugin did, for its status.
#[derive(Default)]
pub struct Counters {
    calls: AtomicU64,
    refusals: AtomicU64,
    failures: AtomicU64,
    in_a_row: AtomicU32,
    suspended_until: Mutex<Option<Instant>>,
    last_error: Mutex<Option<String>>,
}

/// A plugin in use.
pub struct Active {
    pub name: String,
    pub generation: i64,
    pub weight: i64,
    pub policy: FailurePolicy,
    pub plugin: SchedulerPlugin,
    counters: Arc<Counters>,
}

impl Active {
    /// Why the plugin is not called now, if it is suspended.
    fn suspended(&self, now: Instant) -> Option<String> {
        let until = (*super::lock(&self.counters.suspended_until))?;
        (now < until).then(|| {
            format!(
                "suspended for {}s after {TRIP_AFTER} failed calls in a row; last: {}",
                until.saturating_duration_since(now).as_secs().max(1),
                super::lock(&self.counters.last_error)
                    .clone()
                    .unwrap_or_default()
            )
        })
    }

    fn succeeded(&self, refused: bool) {
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.in_a_row.store(0, Ordering::Relaxed);
        if refused {
            c.refusals.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn failed(&self, message: &str) {
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.failures.fetch_add(1, Ordering::Relaxed);
        *super::lock(&c.last_error) = Some(message.to_owned());
        if c.in_a_row.fetch_add(1, Ordering::Relaxed) + 1 >= TRIP_AFTER {
            c.in_a_row.store(0, Ordering::Relaxed);
            *super::lock(&c.suspended_until) = Some(Instant::now() + SUSPEND_FOR);
            tracing::warn!(plugin = %self.name, error = %message, "scheduler plugin suspended");
        }
    }

    /// What a failed (or suspended) plugin means for the cycle: its error
    /// (`Fail`), or nothing (`Ignore`: the cycle goes on without it).
    fn failure(&self, point: &str, message: &str) -> Result<(), String> {
        match self.policy {
            FailurePolicy::Fail => {
                Err(format!("running {point} plugin {:?}: {message}", self.name))
            }
            FailurePolicy::Ignore => {
                tracing::debug!(plugin = %self.name, error = %message, "scheduler plugin ignored");
                Ok(())
            }
        }
    }
}

/// The plugins of one scheduler, swapped as a whole.
#[derive(Default)]
pub struct Plugins {
    active: ArcSwap<Vec<Arc<Active>>>,
}

impl Plugins {
    /// The set a cycle runs with.
    pub fn snapshot(&self) -> Arc<Vec<Arc<Active>>> {
        self.active.load_full()
    }

    fn get(&self, name: &str) -> Option<Arc<Active>> {
        self.active.load().iter().find(|a| a.name == name).cloned()
    }

    fn put(&self, a: Option<Arc<Active>>, name: &str) {
        let mut next: Vec<Arc<Active>> = self
            .active
            .load()
            .iter()
            .filter(|x| x.name != name)
            .cloned()
            .collect();
        next.extend(a);
        next.sort_by(|x, y| x.name.cmp(&y.name));
        self.active.store(Arc::new(next));
    }
}

fn refusal_status(r: plugins::Refusal) -> Status {
    let code = match r.code {
        RefusalCode::Unschedulable => Code::Unschedulable,
        RefusalCode::UnschedulableAndUnresolvable => Code::UnschedulableAndUnresolvable,
        RefusalCode::Error => Code::Error,
    };
    Status {
        code,
        reasons: r.reasons,
        plugin: String::new(),
    }
}

/// A pod or node as plugins see it: the object without `managedFields`
/// (upstream's scheduler strips them from its informers' objects too).
pub fn plugin_text(obj: &Value) -> String {
    if obj["metadata"].get("managedFields").is_none() {
        return obj.to_string();
    }
    let mut o = obj.clone();
    if let Some(m) = o["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    o.to_string()
}

/// The filter half of the wasm plugins: each plugin in turn over the
/// nodes still feasible (`records` by node name), its refusals applied to
/// `filtered`. The cycle states for [`score`], by plugin, or the cycle's
/// error.
pub async fn filter(
    active: &[Arc<Active>],
    uid: &str,
    pod: &str,
    records: &HashMap<String, Arc<SchedulerNode>>,
    filtered: &mut Filtered,
) -> Result<HashMap<String, String>, String> {
    let mut states = HashMap::new();
    for a in active {
        if filtered.feasible.is_empty() {
            break;
        }
        if !a.plugin.points().filters() {
            continue;
        }
        if let Some(why) = a.suspended(Instant::now()) {
            a.failure("filter", &why)?;
            continue;
        }
        // The nodes known to the records (every feasible one: both come
        // from the same watch).
        let (names, nodes): (Vec<String>, Vec<Arc<SchedulerNode>>) = filtered
            .feasible
            .iter()
            .filter_map(|n| Some((n.clone(), records.get(n)?.clone())))
            .unzip();
        match a.plugin.filter(uid, pod, &nodes).await {
            Err(e) => {
                let m = e.to_string();
                a.failed(&m);
                a.failure("filter", &m)?;
            }
            Ok(plugins::Filtered::Refused(r)) if r.code == RefusalCode::Error => {
                let m = r.reasons.join(", ");
                a.failed(&m);
                a.failure("PreFilter", &m)?;
            }
            Ok(plugins::Filtered::Refused(r)) => {
                a.succeeded(true);
                filtered.refuse_pod(&a.name, refusal_status(r));
            }
            Ok(plugins::Filtered::Nodes { state, verdicts }) => {
                if let Some(r) = verdicts
                    .iter()
                    .flatten()
                    .find(|r| r.code == RefusalCode::Error)
                {
                    let m = r.reasons.join(", ");
                    a.failed(&m);
                    a.failure("filter", &m)?;
                    continue;
                }
                a.succeeded(verdicts.iter().any(Option::is_some));
                for (node, v) in names.iter().zip(verdicts) {
                    if let Some(r) = v {
                        filtered.refuse(&a.name, node, refusal_status(r));
                    }
                }
                states.insert(a.name.clone(), state);
            }
        }
    }
    Ok(states)
}

/// The score half of the wasm plugins: each scoring plugin once over the
/// `feasible` nodes, its scores with its weight; or the cycle's error.
pub async fn score(
    active: &[Arc<Active>],
    uid: &str,
    pod: &str,
    records: &HashMap<String, Arc<SchedulerNode>>,
    feasible: &[String],
    states: &HashMap<String, String>,
) -> Result<Vec<ExtraScores>, String> {
    let mut out = Vec::new();
    let (feasible, nodes): (Vec<String>, Vec<Arc<SchedulerNode>>) = feasible
        .iter()
        .filter_map(|n| Some((n.clone(), records.get(n)?.clone())))
        .unzip();
    for a in active {
        if !a.plugin.points().scores() {
            continue;
        }
        if let Some(why) = a.suspended(Instant::now()) {
            a.failure("score", &why)?;
            continue;
        }
        let state = states.get(&a.name).map(String::as_str).unwrap_or_default();
        match a.plugin.score(uid, state, pod, &nodes).await {
            Err(e) => {
                let m = e.to_string();
                a.failed(&m);
                a.failure("score", &m)?;
            }
            Ok(Scored::Refused(r)) => {
                let m = r.reasons.join(", ");
                a.failed(&m);
                a.failure("score", &m)?;
            }
            Ok(Scored::Skip) => a.succeeded(false),
            Ok(Scored::Scores(s)) => {
                a.succeeded(false);
                out.push(ExtraScores {
                    weight: a.weight,
                    scores: feasible.iter().cloned().zip(s).collect(),
                });
            }
        }
    }
    Ok(out)
}

/// Follows `SchedulerPlugin` objects for scheduler `scheduler_name`, keeps
/// `plugins` in line with them and writes their status; runs while this
/// replica leads (the caller's task). `synced` is set once the objects of
/// the first list have all been tried, so that a new leader schedules no
/// pod without the plugins in force.
pub async fn manage(
    client: Client,
    scheduler_name: &'static str,
    plugins: Arc<Plugins>,
    synced: Arc<std::sync::atomic::AtomicBool>,
) {
    let objects = client.objects.clone();
    let Some(info) = objects
        .resources
        .get(spec_api::GROUP, spec_api::VERSION, spec_api::PLURAL)
    else {
        synced.store(true, Ordering::Relaxed);
        return;
    };
    // The first list's names not yet tried.
    let first: Arc<Mutex<Option<std::collections::HashSet<String>>>> = Default::default();
    // The last object seen by name, for the counters' status writes.
    let seen: Arc<Mutex<BTreeMap<String, Value>>> = Default::default();
    let follow = {
        let (watcher, watched) = (objects.clone(), info.clone());
        let (objects, info, plugins, seen) =
            (objects.clone(), info.clone(), plugins.clone(), seen.clone());
        let reset = (plugins.clone(), seen.clone(), first.clone(), synced.clone());
        let (first, synced) = (first.clone(), synced.clone());
        async move {
            watcher
                .follow(
                    &watched,
                    move |listed| {
                        // Objects deleted while the watch was down.
                        let names: Vec<&str> = listed.iter().filter_map(meta::name).collect();
                        for a in reset.0.snapshot().iter() {
                            if !names.contains(&a.name.as_str()) {
                                reset.0.put(None, &a.name);
                            }
                        }
                        super::lock(&reset.1).retain(|n, _| names.contains(&n.as_str()));
                        if !reset.3.load(Ordering::Relaxed) {
                            if names.is_empty() {
                                reset.3.store(true, Ordering::Relaxed);
                            } else {
                                *super::lock(&reset.2) =
                                    Some(names.iter().map(|n| n.to_string()).collect());
                            }
                        }
                    },
                    move |obj, deleted| {
                        let (objects, info, plugins, seen) =
                            (objects.clone(), info.clone(), plugins.clone(), seen.clone());
                        let (first, synced) = (first.clone(), synced.clone());
                        async move {
                            let name = meta::name(&obj).unwrap_or_default().to_string();
                            reconcile(
                                &objects,
                                &info,
                                scheduler_name,
                                &plugins,
                                &seen,
                                obj,
                                deleted,
                            )
                            .await;
                            let mut first = super::lock(&first);
                            if let Some(left) = first.as_mut() {
                                left.remove(&name);
                                if left.is_empty() {
                                    *first = None;
                                    synced.store(true, Ordering::Relaxed);
                                }
                            }
                        }
                    },
                )
                .await;
        }
    };
    let flush = async move {
        let mut tick = tokio::time::interval(STATUS_PERIOD);
        loop {
            tick.tick().await;
            let objs: Vec<Value> = super::lock(&seen).values().cloned().collect();
            for obj in objs {
                let name = meta::name(&obj).unwrap_or_default();
                if let Some(a) = plugins.get(name) {
                    let status = with_counters(obj["status"].clone(), &a);
                    objects
                        .record_status(&info, &obj, status, super::scheduler::MANAGER)
                        .await;
                }
            }
        }
    };
    futures::future::join(follow, flush).await;
}

/// `status` with the counters of `a`.
fn with_counters(mut status: Value, a: &Active) -> Value {
    let c = &a.counters;
    status["calls"] = json!(c.calls.load(Ordering::Relaxed));
    status["refusals"] = json!(c.refusals.load(Ordering::Relaxed));
    status["failures"] = json!(c.failures.load(Ordering::Relaxed));
    match super::lock(&c.last_error).clone() {
        Some(e) => status["lastError"] = json!(e),
        None => {
            if let Some(s) = status.as_object_mut() {
                s.remove("lastError");
            }
        }
    }
    status
}

/// Brings the set in line with one object (or its deletion) and records
/// the outcome in its status.
async fn reconcile(
    objects: &crate::store::Objects,
    info: &Arc<crate::resources::Resource>,
    scheduler_name: &str,
    plugins: &Plugins,
    seen: &Mutex<BTreeMap<String, Value>>,
    obj: Value,
    deleted: bool,
) {
    let name = meta::name(&obj).unwrap_or_default().to_string();
    if deleted || meta::str_field(&obj, "deletionTimestamp").is_some() {
        if plugins.get(&name).is_some() {
            tracing::info!(plugin = %name, "scheduler plugin removed");
        }
        plugins.put(None, &name);
        super::lock(seen).remove(&name);
        return;
    }
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    let running = plugins.get(&name);
    if running.as_ref().is_some_and(|a| a.generation == generation) {
        super::lock(seen).insert(name, obj);
        return;
    }
    let mut status = obj.get("status").cloned().unwrap_or_else(|| json!({}));
    status["observedGeneration"] = json!(generation);
    let loaded = load(
        objects,
        &name,
        generation,
        &obj,
        scheduler_name,
        running.as_deref(),
    )
    .await;
    match loaded {
        Ok(Some(a)) => {
            status["phase"] = json!("Active");
            status["digest"] = json!(format!("sha256:{}", a.plugin.digest()));
            let p = a.plugin.points();
            let points: Vec<&str> = [
                (p.pre_filter, "PreFilter"),
                (p.filter, "Filter"),
                (p.pre_score, "PreScore"),
                (p.score, "Score"),
                (p.normalize_score, "NormalizeScore"),
            ]
            .into_iter()
            .filter_map(|(on, n)| on.then_some(n))
            .collect();
            status["extensionPoints"] = json!(points);
            if let Some(s) = status.as_object_mut() {
                s.remove("message");
                s.remove("activeGeneration");
            }
            status = with_counters(status, &a);
            tracing::info!(plugin = %name, generation, "scheduler plugin active");
            plugins.put(Some(Arc::new(a)), &name);
        }
        Ok(None) => {
            // Another scheduler's: not run here.
            plugins.put(None, &name);
            status["phase"] = json!("Pending");
            status["message"] = json!(format!(
                "no scheduler named {:?} runs in this server (it runs {scheduler_name:?})",
                obj["spec"]["schedulerName"].as_str().unwrap_or_default()
            ));
        }
        Err(message) => {
            tracing::warn!(plugin = %name, generation, error = %message, "scheduler plugin failed to load");
            status["phase"] = json!("Failed");
            status["message"] = json!(message);
            match &running {
                Some(r) => {
                    status["activeGeneration"] = json!(r.generation);
                    status["digest"] = json!(format!("sha256:{}", r.plugin.digest()));
                }
                None => {
                    if let Some(s) = status.as_object_mut() {
                        s.remove("activeGeneration");
                        s.remove("digest");
                        s.remove("extensionPoints");
                    }
                }
            }
        }
    }
    objects
        .record_status(info, &obj, status, super::scheduler::MANAGER)
        .await;
    super::lock(seen).insert(name, obj);
}

/// Loads generation `generation` of plugin `name`; `None` when it belongs
/// to another scheduler.
async fn load(
    objects: &crate::store::Objects,
    name: &str,
    generation: i64,
    obj: &Value,
    scheduler_name: &str,
    running: Option<&Active>,
) -> Result<Option<Active>, String> {
    let spec = SchedulerPluginSpec::parse(&obj["spec"])?;
    if spec.scheduler_name != scheduler_name {
        return Ok(None);
    }
    let admission = objects
        .admission
        .as_ref()
        .ok_or("the server runs without a plugin runtime")?;
    let bytes = admission.module_bytes(&spec.module).await?;
    let plugin = admission
        .runtime()
        .load_scheduler(
            name,
            &bytes,
            &spec.config_string(),
            crate::admission::limits(&spec.limits),
            admission.cluster_access_for(&spec.context_aware_resources, &spec.limits),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(Some(Active {
        name: name.to_owned(),
        generation,
        weight: spec.weight,
        policy: spec.failure_policy,
        plugin,
        // A new version starts with the old one's counts and last error,
        // not its suspension.
        counters: running.map_or_else(Default::default, |r| {
            Arc::new(Counters {
                calls: AtomicU64::new(r.counters.calls.load(Ordering::Relaxed)),
                refusals: AtomicU64::new(r.counters.refusals.load(Ordering::Relaxed)),
                failures: AtomicU64::new(r.counters.failures.load(Ordering::Relaxed)),
                last_error: Mutex::new(super::lock(&r.counters.last_error).clone()),
                ..Default::default()
            })
        }),
    }))
}
