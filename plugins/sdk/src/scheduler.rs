//! Scheduler plugins: filter and score plugins of the scheduling framework
//! (the `scheduler-plugin` world of `wit/scheduler.wit`).
//!
//! A plugin is a type implementing [`SchedulerPlugin`] for one pod and one
//! node at a time, exported with [`export_scheduler_plugin!`](crate::export_scheduler_plugin):
//!
//! ```ignore
//! use wasm_apiserver_plugin_sdk::scheduler::{Node, Pod, Point, Refusal, SchedulerPlugin, clamp_score, parse_int};
//!
//! #[derive(serde::Deserialize, Default)]
//! struct Config { label: String }
//!
//! struct ByLabel;
//! impl SchedulerPlugin for ByLabel {
//!     type Config = Config;
//!     const POINTS: &'static [Point] = &[Point::Filter, Point::Score];
//!     fn filter(_: &Config, _: &str, _: &Pod, node: &Node) -> Result<(), Refusal> {
//!         match node.label("maintenance") {
//!             Some("true") => Err(Refusal::unschedulable("node in maintenance")),
//!             _ => Ok(()),
//!         }
//!     }
//!     fn score(config: &Config, _: &str, _: &Pod, node: &Node) -> Result<i64, Refusal> {
//!         Ok(clamp_score(node.label(&config.label).and_then(parse_int).unwrap_or(0)))
//!     }
//! }
//! wasm_apiserver_plugin_sdk::export_scheduler_plugin!(ByLabel);
//! ```
//!
//! The host passes every candidate node of a scheduling cycle in one call;
//! the SDK parses the pod once per call, calls the trait's per-node method
//! for each node, and answers in the nodes' order. A [`Node`] arrives as a
//! record (name, labels, taints, `unschedulable`), which costs no parsing;
//! a plugin that needs the whole object lists [`Point::NodeObjects`] and
//! reads [`Node::object`]. Which extension points the host calls is
//! [`SchedulerPlugin::POINTS`]: list exactly the methods the plugin
//! overrides. The others answer neutrally (every node fits, every score 0,
//! state passed on, scores unchanged), should a host call them anyway.
//!
//! Failures never trap: a configuration that does not parse, or a pod or
//! node object that is not JSON, answers a refusal with [`Code::Error`]
//! (the cycle fails, or the plugin is skipped under `failurePolicy:
//! Ignore`).
//! A score is not clamped by the SDK: a plugin that answers out of 0–100
//! without `normalize-score` fails the cycle, as upstream's framework does
//! ([`clamp_score`] brings a value into range).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::rc::Rc;

use crate::parse_config;

/// The raw bindings of the `scheduler-plugin` world, for plugins that want
/// them: the exported interface is [`raw`] (its `Guest` trait and records),
/// exported with [`export_scheduler!`].
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "scheduler-plugin",
        pub_export_macro: true,
        export_macro_name: "export_scheduler",
        default_bindings_module: "wasm_apiserver_plugin_sdk::scheduler::bindings",
        // The imports shared with the admission world are the crate root's
        // bindings (one `log`, one `cluster` for every world).
        with: {
            "wasm-apiserver:plugin/types@0.4.0": crate::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.4.0": crate::wasm_apiserver::plugin::log,
            "wasm-apiserver:plugin/cluster@0.4.0": crate::wasm_apiserver::plugin::cluster,
        },
    });
}

/// The `scheduler` interface a plugin exports: its `Guest` trait and the
/// `code`, `refusal`, `prepared` and `extension-points` types.
pub mod raw {
    pub use super::bindings::exports::wasm_apiserver::plugin::scheduler::*;
}

pub use bindings::export_scheduler;
pub use raw::{Code, ExtensionPointSet};

/// The lowest score a node may get (upstream's `MinNodeScore`).
pub const MIN_SCORE: i64 = 0;
/// The highest score a node may get (upstream's `MaxNodeScore`).
pub const MAX_SCORE: i64 = 100;

/// Brings `score` into [`MIN_SCORE`]..=[`MAX_SCORE`].
pub fn clamp_score(score: i64) -> i64 {
    score.clamp(MIN_SCORE, MAX_SCORE)
}

/// Reads an integer as the scheduler SDKs do alike (Rust, Python and
/// JavaScript): an optional sign and ASCII digits, nothing else (no spaces,
/// fractions or exponents); a value past `i64` saturates. `None` for
/// anything else.
pub fn parse_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse().unwrap_or(if text.starts_with('-') {
        i64::MIN
    } else {
        i64::MAX
    }))
}

/// One extension point of the scheduling framework that a plugin
/// implements (listed in [`SchedulerPlugin::POINTS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// [`SchedulerPlugin::pre_filter`].
    PreFilter,
    /// [`SchedulerPlugin::filter`].
    Filter,
    /// [`SchedulerPlugin::pre_score`].
    PreScore,
    /// [`SchedulerPlugin::score`].
    Score,
    /// [`SchedulerPlugin::normalize_score`].
    NormalizeScore,
    /// Not an extension point: every [`Node`] carries its whole object
    /// ([`Node::object`]). Without it the host sends none, which is
    /// cheaper (no JSON to copy and parse per node).
    NodeObjects,
}

/// The `extension-points` flags of a list of points.
pub fn extension_points(points: &[Point]) -> ExtensionPointSet {
    points
        .iter()
        .fold(ExtensionPointSet::empty(), |flags, p| match p {
            Point::PreFilter => flags | ExtensionPointSet::PRE_FILTER,
            Point::Filter => flags | ExtensionPointSet::FILTER,
            Point::PreScore => flags | ExtensionPointSet::PRE_SCORE,
            Point::Score => flags | ExtensionPointSet::SCORE,
            Point::NormalizeScore => flags | ExtensionPointSet::NORMALIZE_SCORE,
            Point::NodeObjects => flags | ExtensionPointSet::NODE_OBJECTS,
        })
}

/// Why a pod cannot go to a node, or why the plugin failed: upstream's
/// non-success `Status` (a code and its reasons, which users read in the
/// pod's `PodScheduled` condition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `unschedulable`, `unschedulable-and-unresolvable` or `error`.
    pub code: Code,
    /// The reasons, e.g. `node has label maintenance=true`.
    pub reasons: Vec<String>,
}

impl Refusal {
    /// A refusal with one reason.
    pub fn new(code: Code, reason: impl Into<String>) -> Self {
        Self {
            code,
            reasons: vec![reason.into()],
        }
    }

    /// The node does not fit now; preempting pods might change that.
    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Self::new(Code::Unschedulable, reason)
    }

    /// The node does not fit, and preemption cannot change that.
    pub fn unschedulable_and_unresolvable(reason: impl Into<String>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// The plugin failed.
    pub fn error(reason: impl Into<String>) -> Self {
        Self::new(Code::Error, reason)
    }

    /// Adds a reason.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reasons.push(reason.into());
        self
    }

    /// The record the host reads.
    pub fn into_wit(self) -> raw::Refusal {
        raw::Refusal {
            code: self.code,
            reasons: self.reasons,
        }
    }
}

/// What [`SchedulerPlugin::pre_filter`] and [`SchedulerPlugin::pre_score`]
/// answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Go on; the text is the cycle state that the next points receive as
    /// `state` (e.g. a `serde_json` document of what was computed once).
    Proceed(String),
    /// Nothing to do for this pod: `filter` (or `score` and
    /// `normalize-score`) is not called.
    Skip,
    /// The pod fits no node at all (`pre-filter`), or the cycle fails
    /// (`pre-score`).
    Refuse(Refusal),
}

impl Prepared {
    fn into_wit(self) -> raw::Prepared {
        match self {
            Prepared::Proceed(state) => raw::Prepared::Proceed(state),
            Prepared::Skip => raw::Prepared::Skip,
            Prepared::Refuse(r) => raw::Prepared::Refuse(r.into_wit()),
        }
    }
}

/// A Kubernetes object as the host sent it (a `v1` Pod or Node, as
/// `kubectl get -o json` prints it), parsed once, with readers for the
/// fields plugins use most.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    json: Value,
}

/// The pod being scheduled.
pub type Pod = Object;

/// A taint of a node (`spec.taints[]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taint<'a> {
    pub key: &'a str,
    /// Empty when the taint has none.
    pub value: &'a str,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: &'a str,
}

/// A call's nodes as the host packed them (the WIT `nodes` record), checked
/// once, shared by the call's [`Node`]s.
#[derive(Debug)]
struct Batch {
    text: String,
    labels: Vec<raw::Label>,
    taints: Vec<raw::Taint>,
    items: Vec<raw::Node>,
    objects: Vec<Option<Object>>,
}

impl Batch {
    fn str(&self, s: raw::Span) -> &str {
        // Checked by `unpack`.
        &self.text[s.start as usize..(s.start + s.len) as usize]
    }
}

/// Whether `s` is a range of `len` items (bytes on character boundaries
/// when `text` is given).
fn span_ok(s: raw::Span, len: usize, text: Option<&str>) -> bool {
    let (start, end) = (s.start as usize, s.start as usize + s.len as usize);
    match text {
        Some(t) => t.get(start..end).is_some(),
        None => end <= len,
    }
}

/// The nodes of a `nodes` batch, every span checked and claimed objects
/// parsed; an error for a batch that does not hold together.
pub fn unpack(nodes: raw::Nodes) -> Result<Vec<Node>, String> {
    let raw::Nodes {
        text,
        labels,
        taints,
        items,
    } = nodes;
    let text = String::from_utf8(text).map_err(|e| format!("nodes' text is not UTF-8: {e}"))?;
    let t = Some(text.as_str());
    let bad = |what: &str, i: usize| Err(format!("node #{i}: {what} is outside the batch"));
    for (i, n) in items.iter().enumerate() {
        if !span_ok(n.name, 0, t) {
            return bad("name", i);
        }
        if !span_ok(n.labels, labels.len(), None) {
            return bad("labels", i);
        }
        if !span_ok(n.taints, taints.len(), None) {
            return bad("taints", i);
        }
        if n.object.is_some_and(|o| !span_ok(o, 0, t)) {
            return bad("object", i);
        }
    }
    if let Some(i) = labels
        .iter()
        .position(|l| !span_ok(l.key, 0, t) || !span_ok(l.value, 0, t))
    {
        return bad("a label", i);
    }
    if let Some(i) = taints
        .iter()
        .position(|x| !span_ok(x.key, 0, t) || !span_ok(x.value, 0, t) || !span_ok(x.effect, 0, t))
    {
        return bad("a taint", i);
    }
    let mut batch = Batch {
        text,
        labels,
        taints,
        items,
        objects: Vec::new(),
    };
    let mut objects = Vec::with_capacity(batch.items.len());
    for n in &batch.items {
        objects.push(match n.object {
            Some(o) => Some(
                Object::parse(batch.str(o))
                    .map_err(|e| format!("node {} object is {e}", batch.str(n.name)))?,
            ),
            None => None,
        });
    }
    batch.objects = objects;
    let batch = Rc::new(batch);
    Ok((0..batch.items.len())
        .map(|index| Node {
            batch: batch.clone(),
            index,
        })
        .collect())
}

/// Packs nodes as the host does: one `nodes` batch of `nodes`, with their
/// objects when `objects` (a node without one gets none). What the native
/// harness hands a plugin, through [`unpack`], as the component gets it.
pub fn pack<'a>(nodes: impl IntoIterator<Item = &'a Node>, objects: bool) -> raw::Nodes {
    let mut batch = raw::Nodes {
        text: Vec::new(),
        labels: Vec::new(),
        taints: Vec::new(),
        items: Vec::new(),
    };
    fn put(text: &mut Vec<u8>, s: &str) -> raw::Span {
        let start = text.len() as u32;
        text.extend_from_slice(s.as_bytes());
        raw::Span {
            start,
            len: s.len() as u32,
        }
    }
    for n in nodes {
        let name = put(&mut batch.text, n.name());
        let first = batch.labels.len() as u32;
        for (k, v) in n.labels() {
            let label = raw::Label {
                key: put(&mut batch.text, k),
                value: put(&mut batch.text, v),
            };
            batch.labels.push(label);
        }
        let first_taint = batch.taints.len() as u32;
        for t in n.taints() {
            let taint = raw::Taint {
                key: put(&mut batch.text, t.key),
                value: put(&mut batch.text, t.value),
                effect: put(&mut batch.text, t.effect),
            };
            batch.taints.push(taint);
        }
        let object = match (objects, n.object()) {
            (true, Some(o)) => Some(put(&mut batch.text, &o.json().to_string())),
            _ => None,
        };
        batch.items.push(raw::Node {
            name,
            labels: raw::Span {
                start: first,
                len: batch.labels.len() as u32 - first,
            },
            taints: raw::Span {
                start: first_taint,
                len: batch.taints.len() as u32 - first_taint,
            },
            unschedulable: n.unschedulable(),
            object,
        });
    }
    batch
}

/// A candidate node: its name, labels, taints and `spec.unschedulable`
/// read from the host's packed batch without parsing, and the whole object
/// when the plugin lists [`Point::NodeObjects`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Node {
    batch: Rc<Batch>,
    index: usize,
}

impl Node {
    fn item(&self) -> &raw::Node {
        &self.batch.items[self.index]
    }

    /// The node of a whole node object (what the host would send), with
    /// the object kept: labels that are not strings are left out, as
    /// [`Object::labels`] does.
    pub fn from_object(object: Object) -> Self {
        let mut labels: Vec<(&str, &str)> = object.labels().collect();
        labels.sort();
        let mut text = Vec::new();
        let mut put = |s: &str| {
            let start = text.len() as u32;
            text.extend_from_slice(s.as_bytes());
            raw::Span {
                start,
                len: s.len() as u32,
            }
        };
        let name = put(object.name());
        let labels: Vec<raw::Label> = labels
            .into_iter()
            .map(|(k, v)| raw::Label {
                key: put(k),
                value: put(v),
            })
            .collect();
        let taints: Vec<raw::Taint> = object
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|t| {
                let field = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or("");
                raw::Taint {
                    key: put(field("key")),
                    value: put(field("value")),
                    effect: put(field("effect")),
                }
            })
            .collect();
        let unschedulable = object
            .pointer("/spec/unschedulable")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let item = raw::Node {
            name,
            labels: raw::Span {
                start: 0,
                len: labels.len() as u32,
            },
            taints: raw::Span {
                start: 0,
                len: taints.len() as u32,
            },
            unschedulable,
            object: None,
        };
        let text = String::from_utf8(text).expect("joined from strings");
        Node {
            batch: Rc::new(Batch {
                text,
                labels,
                taints,
                items: vec![item],
                objects: vec![Some(object)],
            }),
            index: 0,
        }
    }

    /// The same node without its object (what a plugin that does not
    /// list [`Point::NodeObjects`] receives).
    pub fn without_object(self) -> Self {
        match self.object() {
            None => self,
            Some(_) => unpack(pack([&self], false)).expect("packed").remove(0),
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.batch.str(self.item().name)
    }

    fn label_records(&self) -> &[raw::Label] {
        let s = self.item().labels;
        &self.batch.labels[s.start as usize..(s.start + s.len) as usize]
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.label_records()
            .iter()
            .map(|l| (self.batch.str(l.key), self.batch.str(l.value)))
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.label_records()
            .iter()
            .find(|l| self.batch.str(l.key) == key)
            .map(|l| self.batch.str(l.value))
    }

    /// `spec.taints`, in order.
    pub fn taints(&self) -> impl Iterator<Item = Taint<'_>> {
        let s = self.item().taints;
        self.batch.taints[s.start as usize..(s.start + s.len) as usize]
            .iter()
            .map(|t| Taint {
                key: self.batch.str(t.key),
                value: self.batch.str(t.value),
                effect: self.batch.str(t.effect),
            })
    }

    /// `spec.unschedulable` (cordoned).
    pub fn unschedulable(&self) -> bool {
        self.item().unschedulable
    }

    /// The whole object, when the plugin lists [`Point::NodeObjects`].
    pub fn object(&self) -> Option<&Object> {
        self.batch.objects[self.index].as_ref()
    }

    /// One annotation's value (from [`Node::object`]: `None` without it).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.object()?.annotation(key)
    }
}

impl Object {
    /// Parses an object's JSON text.
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text)
            .map(Self::new)
            .map_err(|e| format!("not valid JSON: {e}"))
    }

    /// Wraps an already parsed object.
    pub fn new(json: Value) -> Self {
        Self { json }
    }

    /// The whole object.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The value at a JSON pointer (`/spec/nodeName`), if any.
    pub fn pointer(&self, pointer: &str) -> Option<&Value> {
        self.json.pointer(pointer)
    }

    /// The string at a JSON pointer, if it is one.
    pub fn str_at(&self, pointer: &str) -> Option<&str> {
        self.pointer(pointer).and_then(Value::as_str)
    }

    /// The object as a typed value (e.g. a `k8s_openapi` `Node`).
    pub fn as_type<T: DeserializeOwned>(&self) -> Result<T, String> {
        T::deserialize(&self.json).map_err(|e| format!("unexpected object: {e}"))
    }

    /// `metadata.name` ("" when absent).
    pub fn name(&self) -> &str {
        self.str_at("/metadata/name").unwrap_or_default()
    }

    /// `metadata.namespace` (`None` for a node).
    pub fn namespace(&self) -> Option<&str> {
        self.str_at("/metadata/namespace")
    }

    fn metadata_map(&self, field: &str) -> Option<&Map<String, Value>> {
        self.json.get("metadata")?.get(field)?.as_object()
    }

    /// `metadata.labels`, as string pairs (values that are not strings are
    /// left out).
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.metadata_map("labels")
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.metadata_map("labels")?.get(key)?.as_str()
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata_map("annotations")?.get(key)?.as_str()
    }
}

/// A scheduler plugin, one pod and one node at a time.
///
/// Every method has a neutral default, so a plugin writes only the points
/// it implements and lists them in [`POINTS`](Self::POINTS): the host calls
/// exactly those. `state` is the text the plugin's own `pre_filter` (for
/// `filter`) or `pre_score` (for `score` and `normalize_score`) returned,
/// empty without one.
pub trait SchedulerPlugin {
    /// The configuration (the plugin's `config` in the scheduler
    /// configuration), parsed with [`parse_config`]: empty text is
    /// `Default`.
    type Config: DeserializeOwned + Default;

    /// The extension points this plugin implements, answered from
    /// `extension-points`: exactly the methods below that it overrides.
    const POINTS: &'static [Point];

    /// Checks a parsed configuration beyond what its type says; runs at
    /// load time (`check-config`).
    fn check(_config: &Self::Config) -> Result<(), String> {
        Ok(())
    }

    /// Once per pod, before any `filter`.
    fn pre_filter(_config: &Self::Config, _pod: &Pod) -> Prepared {
        Prepared::Proceed(String::new())
    }

    /// Whether `node` can run `pod`: `Ok(())` when it fits.
    fn filter(
        _config: &Self::Config,
        _state: &str,
        _pod: &Pod,
        _node: &Node,
    ) -> Result<(), Refusal> {
        Ok(())
    }

    /// Once per pod, with the nodes that passed every filter, before
    /// `score`.
    fn pre_score(_config: &Self::Config, state: &str, _pod: &Pod, _nodes: &[Node]) -> Prepared {
        Prepared::Proceed(state.to_owned())
    }

    /// The node's raw score: 0–100 unless the plugin implements
    /// `normalize_score`. An error fails the cycle.
    fn score(
        _config: &Self::Config,
        _state: &str,
        _pod: &Pod,
        _node: &Node,
    ) -> Result<i64, Refusal> {
        Ok(MIN_SCORE)
    }

    /// Brings the raw scores (in the order of the scored nodes) to 0–100,
    /// in place.
    fn normalize_score(
        _config: &Self::Config,
        _state: &str,
        _pod: &Pod,
        _scores: &mut [i64],
    ) -> Result<(), Refusal> {
        Ok(())
    }
}

/// Parses and checks a configuration: what `check-config` answers.
pub fn configure<P: SchedulerPlugin>(config: &str) -> Result<P::Config, String> {
    let c = parse_config::<P::Config>(config)?;
    P::check(&c)?;
    Ok(c)
}

/// The configuration and the pod of one call, or the refusal (code
/// `error`) that answers it instead.
fn prepare<P: SchedulerPlugin>(config: &str, pod: &str) -> Result<(P::Config, Pod), Refusal> {
    let config = configure::<P>(config).map_err(Refusal::error)?;
    let pod = Pod::parse(pod).map_err(|e| Refusal::error(format!("pod is {e}")))?;
    Ok((config, pod))
}

fn nodes_from_wit(nodes: raw::Nodes) -> Result<Vec<Node>, Refusal> {
    unpack(nodes).map_err(Refusal::error)
}

/// `pre-filter`, as the SDK answers it for `P`.
pub fn run_pre_filter<P: SchedulerPlugin>(config: &str, pod: &str) -> Prepared {
    match prepare::<P>(config, pod) {
        Ok((config, pod)) => P::pre_filter(&config, &pod),
        Err(r) => Prepared::Refuse(r),
    }
}

/// `filter`, as the SDK answers it for `P`: one entry per node, in order,
/// `None` for a node that fits.
pub fn run_filter<P: SchedulerPlugin>(
    config: &str,
    state: &str,
    pod: &str,
    nodes: &[Node],
) -> Vec<Option<Refusal>> {
    let (config, pod) = match prepare::<P>(config, pod) {
        Ok(p) => p,
        Err(r) => return vec![Some(r); nodes.len()],
    };
    nodes
        .iter()
        .map(|node| P::filter(&config, state, &pod, node).err())
        .collect()
}

/// `pre-score`, as the SDK answers it for `P`.
pub fn run_pre_score<P: SchedulerPlugin>(
    config: &str,
    state: &str,
    pod: &str,
    nodes: &[Node],
) -> Prepared {
    match prepare::<P>(config, pod) {
        Ok((config, pod)) => P::pre_score(&config, state, &pod, nodes),
        Err(r) => Prepared::Refuse(r),
    }
}

/// `score`, as the SDK answers it for `P`: one raw score per node, in
/// order, or the first refusal.
pub fn run_score<P: SchedulerPlugin>(
    config: &str,
    state: &str,
    pod: &str,
    nodes: &[Node],
) -> Result<Vec<i64>, Refusal> {
    let (config, pod) = prepare::<P>(config, pod)?;
    nodes
        .iter()
        .map(|node| P::score(&config, state, &pod, node))
        .collect()
}

/// `normalize-score`, as the SDK answers it for `P`.
pub fn run_normalize_score<P: SchedulerPlugin>(
    config: &str,
    state: &str,
    pod: &str,
    mut scores: Vec<i64>,
) -> Result<Vec<i64>, Refusal> {
    let (config, pod) = prepare::<P>(config, pod)?;
    P::normalize_score(&config, state, &pod, &mut scores)?;
    Ok(scores)
}

#[doc(hidden)]
pub fn guest_pre_filter<P: SchedulerPlugin>(config: String, pod: String) -> raw::Prepared {
    run_pre_filter::<P>(&config, &pod).into_wit()
}

#[doc(hidden)]
pub fn guest_filter<P: SchedulerPlugin>(
    config: String,
    state: String,
    pod: String,
    nodes: raw::Nodes,
) -> Vec<Option<raw::Refusal>> {
    let count = nodes.items.len();
    match nodes_from_wit(nodes) {
        Ok(nodes) => run_filter::<P>(&config, &state, &pod, &nodes)
            .into_iter()
            .map(|r| r.map(Refusal::into_wit))
            .collect(),
        Err(r) => vec![Some(r.into_wit()); count],
    }
}

#[doc(hidden)]
pub fn guest_pre_score<P: SchedulerPlugin>(
    config: String,
    state: String,
    pod: String,
    nodes: raw::Nodes,
) -> raw::Prepared {
    match nodes_from_wit(nodes) {
        Ok(nodes) => run_pre_score::<P>(&config, &state, &pod, &nodes).into_wit(),
        Err(r) => raw::Prepared::Refuse(r.into_wit()),
    }
}

#[doc(hidden)]
pub fn guest_score<P: SchedulerPlugin>(
    config: String,
    state: String,
    pod: String,
    nodes: raw::Nodes,
) -> Result<Vec<i64>, raw::Refusal> {
    let nodes = nodes_from_wit(nodes).map_err(Refusal::into_wit)?;
    run_score::<P>(&config, &state, &pod, &nodes).map_err(Refusal::into_wit)
}

#[doc(hidden)]
pub fn guest_normalize_score<P: SchedulerPlugin>(
    config: String,
    state: String,
    pod: String,
    scores: Vec<i64>,
) -> Result<Vec<i64>, raw::Refusal> {
    run_normalize_score::<P>(&config, &state, &pod, scores).map_err(Refusal::into_wit)
}

/// Exports a [`SchedulerPlugin`] as the component's `scheduler` interface.
#[macro_export]
macro_rules! export_scheduler_plugin {
    ($plugin:ty) => {
        #[allow(dead_code)] // natively (tests) nothing is exported
        struct __WasmApiserverSchedulerGuest;
        impl $crate::scheduler::raw::Guest for __WasmApiserverSchedulerGuest {
            fn check_config(
                config: ::std::string::String,
            ) -> ::std::result::Result<(), ::std::string::String> {
                $crate::scheduler::configure::<$plugin>(&config).map(|_| ())
            }
            fn extension_points(
                _config: ::std::string::String,
            ) -> $crate::scheduler::ExtensionPointSet {
                $crate::scheduler::extension_points(
                    <$plugin as $crate::scheduler::SchedulerPlugin>::POINTS,
                )
            }
            fn pre_filter(
                config: ::std::string::String,
                pod: ::std::string::String,
            ) -> $crate::scheduler::raw::Prepared {
                $crate::scheduler::guest_pre_filter::<$plugin>(config, pod)
            }
            fn filter(
                config: ::std::string::String,
                state: ::std::string::String,
                pod: ::std::string::String,
                nodes: $crate::scheduler::raw::Nodes,
            ) -> ::std::vec::Vec<::std::option::Option<$crate::scheduler::raw::Refusal>> {
                $crate::scheduler::guest_filter::<$plugin>(config, state, pod, nodes)
            }
            fn pre_score(
                config: ::std::string::String,
                state: ::std::string::String,
                pod: ::std::string::String,
                nodes: $crate::scheduler::raw::Nodes,
            ) -> $crate::scheduler::raw::Prepared {
                $crate::scheduler::guest_pre_score::<$plugin>(config, state, pod, nodes)
            }
            fn score(
                config: ::std::string::String,
                state: ::std::string::String,
                pod: ::std::string::String,
                nodes: $crate::scheduler::raw::Nodes,
            ) -> ::std::result::Result<::std::vec::Vec<i64>, $crate::scheduler::raw::Refusal> {
                $crate::scheduler::guest_score::<$plugin>(config, state, pod, nodes)
            }
            fn normalize_score(
                config: ::std::string::String,
                state: ::std::string::String,
                pod: ::std::string::String,
                scores: ::std::vec::Vec<i64>,
            ) -> ::std::result::Result<::std::vec::Vec<i64>, $crate::scheduler::raw::Refusal> {
                $crate::scheduler::guest_normalize_score::<$plugin>(config, state, pod, scores)
            }
        }
        // Component exports only in the wasm build, as `export_policy!`.
        #[cfg(target_arch = "wasm32")]
        $crate::scheduler::export_scheduler!(__WasmApiserverSchedulerGuest);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct Config {
        #[serde(default)]
        avoid: String,
    }

    /// Refuses nodes labelled `avoid`'s label, scores by `score` label,
    /// and counts how often the pod was seen through the state.
    struct Sample;
    impl SchedulerPlugin for Sample {
        type Config = Config;
        const POINTS: &'static [Point] = &[Point::PreFilter, Point::Filter, Point::Score];

        fn check(config: &Config) -> Result<(), String> {
            if config.avoid == "bad" {
                return Err("avoid may not be bad".into());
            }
            Ok(())
        }

        fn pre_filter(_: &Config, pod: &Pod) -> Prepared {
            match pod.label("skip") {
                Some(_) => Prepared::Skip,
                None => Prepared::Proceed(pod.name().to_owned()),
            }
        }

        fn filter(config: &Config, state: &str, _: &Pod, node: &Node) -> Result<(), Refusal> {
            match node.label(&config.avoid) {
                Some(_) => Err(Refusal::unschedulable(format!(
                    "{state} avoids {}",
                    node.name()
                ))),
                None => Ok(()),
            }
        }

        fn score(_: &Config, _: &str, _: &Pod, node: &Node) -> Result<i64, Refusal> {
            node.label("score")
                .ok_or_else(|| Refusal::error(format!("{} has no score", node.name())))?
                .parse()
                .map_err(|e| Refusal::error(format!("{e}")))
        }
    }

    fn node(name: &str, labels: Value) -> Node {
        Node::from_object(Object::new(
            serde_json::json!({"kind": "Node", "metadata": {"name": name, "labels": labels}}),
        ))
        .without_object()
    }

    const POD: &str = r#"{"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}"#;

    #[test]
    fn points_become_flags() {
        assert_eq!(
            extension_points(Sample::POINTS),
            ExtensionPointSet::PRE_FILTER | ExtensionPointSet::FILTER | ExtensionPointSet::SCORE
        );
        assert_eq!(extension_points(&[]), ExtensionPointSet::empty());
    }

    #[test]
    fn filter_answers_each_node_in_order() {
        let nodes = [
            node("a", serde_json::json!({})),
            node("b", serde_json::json!({"gpu": "x"})),
        ];
        let out = run_filter::<Sample>(r#"{"avoid": "gpu"}"#, "p", POD, &nodes);
        assert_eq!(out, [None, Some(Refusal::unschedulable("p avoids b"))]);
    }

    #[test]
    fn nodes_unpack_from_the_hosts_batch_and_objects_come_only_when_sent() {
        let object = serde_json::json!({"kind": "Node",
            "metadata": {"name": "a", "labels": {"z": "zürich", "b": "2", "n": 3},
                "annotations": {"note": "x"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "k", "effect": "NoSchedule"},
                {"key": "gpu", "value": "a100", "effect": "NoExecute"}]}});
        let n = Node::from_object(Object::new(object.clone()));
        let check = |n: &Node| {
            assert_eq!(n.name(), "a");
            assert_eq!(
                n.labels().collect::<Vec<_>>(),
                [("b", "2"), ("z", "zürich")]
            );
            assert_eq!((n.label("z"), n.label("n")), (Some("zürich"), None));
            assert!(n.unschedulable());
            let taints: Vec<_> = n.taints().collect();
            assert_eq!((taints[0].value, taints[0].effect), ("", "NoSchedule"));
            assert_eq!((taints[1].key, taints[1].value), ("gpu", "a100"));
        };
        check(&n);
        assert_eq!(n.annotation("note"), Some("x"));
        assert_eq!(n.object().map(Object::json), Some(&object));
        let bare = n.clone().without_object();
        check(&bare);
        assert_eq!(
            (bare.object().is_none(), bare.annotation("note")),
            (true, None)
        );
        // Through the host's packing: the objects parsed when sent.
        let b = node("b", serde_json::json!({"x": "1"}));
        let both = unpack(pack([&b, &n], true)).unwrap();
        check(&both[1]);
        assert_eq!(both[0].label("x"), Some("1"));
        assert_eq!(both[1].object().map(Object::json), Some(&object));
        assert!(unpack(pack([&n], false)).unwrap()[0].object().is_none());
        // A batch that does not hold together is an error (never a trap).
        let mut broken = pack([&n], true);
        broken.items[0].name.len = 1000;
        let e = unpack(broken).unwrap_err();
        assert!(e.contains("name is outside the batch"), "{e}");
        let mut split = pack([&n], false);
        split.labels[1].value.len = 2; // "z" and half of "ü"
        assert!(unpack(split).is_err());
        let mut bad_json = pack([&n], true);
        let o = bad_json.items[0].object.unwrap();
        bad_json.text[o.start as usize] = b'[';
        let e = unpack(bad_json).unwrap_err();
        assert!(e.starts_with("node a object is not valid JSON"), "{e}");
        let mut broken = pack([&n, &b], false);
        broken.labels[0].key.start = 10_000;
        let out = guest_filter::<Sample>(r#"{"avoid": "x"}"#.into(), "".into(), POD.into(), broken);
        assert_eq!(out.len(), 2);
        assert!(
            out.iter()
                .all(|r| r.as_ref().is_some_and(|r| r.code == Code::Error))
        );
        assert_eq!(
            extension_points(&[Point::Filter, Point::NodeObjects]),
            ExtensionPointSet::FILTER | ExtensionPointSet::NODE_OBJECTS
        );
    }

    #[test]
    fn a_bad_configuration_or_pod_refuses_every_node_with_error() {
        let nodes = [
            node("a", serde_json::json!({})),
            node("b", serde_json::json!({})),
        ];
        let out = run_filter::<Sample>(r#"{"avoid": "bad"}"#, "", POD, &nodes);
        assert_eq!(out, vec![Some(Refusal::error("avoid may not be bad")); 2]);
        let out = run_filter::<Sample>("", "", "{", &nodes);
        assert!(out.iter().all(|r| r.as_ref().unwrap().code == Code::Error));
        let e = configure::<Sample>(r#"{"avoyd": "x"}"#).err().unwrap();
        assert!(e.contains("unknown field `avoyd`"), "{e}");
        assert!(matches!(
            run_pre_filter::<Sample>("", "["),
            Prepared::Refuse(Refusal {
                code: Code::Error,
                ..
            })
        ));
    }

    #[test]
    fn pre_filter_state_and_skip() {
        assert_eq!(
            run_pre_filter::<Sample>("", POD),
            Prepared::Proceed("p".into())
        );
        let skipped = r#"{"metadata": {"name": "p", "labels": {"skip": "1"}}}"#;
        assert_eq!(run_pre_filter::<Sample>("", skipped), Prepared::Skip);
    }

    #[test]
    fn score_is_per_node_and_the_first_refusal_fails_it() {
        let nodes = [
            node("a", serde_json::json!({"score": "7"})),
            node("b", serde_json::json!({"score": "1000"})),
        ];
        assert_eq!(run_score::<Sample>("", "", POD, &nodes), Ok(vec![7, 1000]));
        let nodes = [
            node("a", serde_json::json!({"score": "7"})),
            node("c", serde_json::json!({})),
        ];
        assert_eq!(
            run_score::<Sample>("", "", POD, &nodes),
            Err(Refusal::error("c has no score"))
        );
    }

    #[test]
    fn points_not_implemented_answer_neutrally() {
        assert_eq!(
            run_pre_score::<Sample>("", "kept", POD, &[]),
            Prepared::Proceed("kept".into())
        );
        assert_eq!(
            run_normalize_score::<Sample>("", "", POD, vec![5, 500]),
            Ok(vec![5, 500])
        );
        struct Nothing;
        impl SchedulerPlugin for Nothing {
            type Config = Config;
            const POINTS: &'static [Point] = &[];
        }
        let nodes = [node("a", serde_json::json!({}))];
        assert_eq!(run_filter::<Nothing>("", "", POD, &nodes), vec![None]);
        assert_eq!(run_score::<Nothing>("", "", POD, &nodes), Ok(vec![0]));
    }

    #[test]
    fn objects_read_names_and_labels() {
        let n = Object::new(serde_json::json!({"kind": "Node",
            "metadata": {"name": "a", "labels": {"x": "1", "n": 2}}}));
        assert_eq!(n.name(), "a");
        assert_eq!(n.namespace(), None);
        assert_eq!(n.label("x"), Some("1"));
        assert_eq!(n.label("n"), None);
        assert_eq!(n.labels().collect::<Vec<_>>(), [("x", "1")]);
        let p = Pod::parse(POD).unwrap();
        assert_eq!((p.name(), p.namespace()), ("p", Some("ns")));
        assert_eq!(p.str_at("/kind"), Some("Pod"));
        assert_eq!(clamp_score(-5), 0);
        assert_eq!(clamp_score(1000), 100);
        assert_eq!(clamp_score(42), 42);
        assert_eq!(parse_int("42"), Some(42));
        assert_eq!(parse_int("+7"), Some(7));
        assert_eq!(parse_int("-5"), Some(-5));
        assert_eq!(parse_int("99999999999999999999"), Some(i64::MAX));
        assert_eq!(parse_int("-99999999999999999999"), Some(i64::MIN));
        for bad in ["", "-", " 7", "7 ", "1.5", "1e3", "0x10", "high", "٣"] {
            assert_eq!(parse_int(bad), None, "{bad:?}");
        }
    }
}
