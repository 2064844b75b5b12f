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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    /// Empty when the taint has none.
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// A candidate node: its name, labels, taints and `spec.unschedulable` as
/// the host's record, and the whole object when the plugin lists
/// [`Point::NodeObjects`].
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    name: String,
    /// Sorted by key.
    labels: Vec<(String, String)>,
    taints: Vec<Taint>,
    unschedulable: bool,
    object: Option<Object>,
}

impl Node {
    /// The record of a whole node object (what the host would send), with
    /// the object kept: labels that are not strings are left out, as
    /// [`Object::labels`] does.
    pub fn from_object(object: Object) -> Self {
        let mut labels: Vec<(String, String)> = object
            .labels()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        labels.sort();
        let taints = object
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|t| {
                let field = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
                Taint {
                    key: field("key"),
                    value: field("value"),
                    effect: field("effect"),
                }
            })
            .collect();
        Node {
            name: object.name().to_owned(),
            labels,
            taints,
            unschedulable: object
                .pointer("/spec/unschedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            object: Some(object),
        }
    }

    /// The same node without its object (what a plugin that does not
    /// list [`Point::NodeObjects`] receives).
    pub fn without_object(mut self) -> Self {
        self.object = None;
        self
    }

    /// A node of the host's record; its object, when sent, is parsed.
    pub fn from_wit(node: raw::Node) -> Result<Self, String> {
        let object = match node.object {
            Some(text) => Some(Object::parse(&text).map_err(|e| format!("node object is {e}"))?),
            None => None,
        };
        Ok(Node {
            name: node.name,
            labels: node.labels,
            taints: node
                .taints
                .into_iter()
                .map(|t| Taint {
                    key: t.key,
                    value: t.value,
                    effect: t.effect,
                })
                .collect(),
            unschedulable: node.unschedulable,
            object,
        })
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `spec.taints`, in order.
    pub fn taints(&self) -> &[Taint] {
        &self.taints
    }

    /// `spec.unschedulable` (cordoned).
    pub fn unschedulable(&self) -> bool {
        self.unschedulable
    }

    /// The whole object, when the plugin lists [`Point::NodeObjects`].
    pub fn object(&self) -> Option<&Object> {
        self.object.as_ref()
    }

    /// One annotation's value (from [`Node::object`]: `None` without it).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.object.as_ref()?.annotation(key)
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

fn nodes_from_wit(nodes: Vec<raw::Node>) -> Result<Vec<Node>, Refusal> {
    nodes
        .into_iter()
        .map(|n| Node::from_wit(n).map_err(Refusal::error))
        .collect()
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
    nodes: Vec<raw::Node>,
) -> Vec<Option<raw::Refusal>> {
    let count = nodes.len();
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
    nodes: Vec<raw::Node>,
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
    nodes: Vec<raw::Node>,
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
                nodes: ::std::vec::Vec<$crate::scheduler::raw::Node>,
            ) -> ::std::vec::Vec<::std::option::Option<$crate::scheduler::raw::Refusal>> {
                $crate::scheduler::guest_filter::<$plugin>(config, state, pod, nodes)
            }
            fn pre_score(
                config: ::std::string::String,
                state: ::std::string::String,
                pod: ::std::string::String,
                nodes: ::std::vec::Vec<$crate::scheduler::raw::Node>,
            ) -> $crate::scheduler::raw::Prepared {
                $crate::scheduler::guest_pre_score::<$plugin>(config, state, pod, nodes)
            }
            fn score(
                config: ::std::string::String,
                state: ::std::string::String,
                pod: ::std::string::String,
                nodes: ::std::vec::Vec<$crate::scheduler::raw::Node>,
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

    /// The record the host would send for `node`, with `object` as given.
    fn wit(node: &Node, object: Option<&str>) -> raw::Node {
        raw::Node {
            name: node.name().to_owned(),
            labels: node
                .labels()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            taints: Vec::new(),
            unschedulable: node.unschedulable(),
            object: object.map(str::to_owned),
        }
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
    fn node_records_and_their_objects() {
        let object = serde_json::json!({"kind": "Node",
            "metadata": {"name": "a", "labels": {"z": "1", "b": "2", "n": 3},
                "annotations": {"note": "x"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "k", "effect": "NoSchedule"},
                {"key": "gpu", "value": "a100", "effect": "NoExecute"}]}});
        let n = Node::from_object(Object::new(object.clone()));
        assert_eq!(n.name(), "a");
        assert_eq!(n.labels().collect::<Vec<_>>(), [("b", "2"), ("z", "1")]);
        assert_eq!((n.label("z"), n.label("n")), (Some("1"), None));
        assert!(n.unschedulable());
        assert_eq!(n.taints()[1].value, "a100");
        assert_eq!(
            (n.taints()[0].value.as_str(), n.taints()[0].effect.as_str()),
            ("", "NoSchedule")
        );
        assert_eq!(n.annotation("note"), Some("x"));
        assert_eq!(n.object().map(Object::json), Some(&object));
        let bare = n.clone().without_object();
        assert_eq!((bare.object(), bare.annotation("note")), (None, None));
        // From the host's record: the object parsed when sent, an error
        // (never a trap) when it is not JSON.
        let sent = Node::from_wit(wit(&n, Some(&object.to_string()))).unwrap();
        assert_eq!(sent.object().map(Object::json), Some(&object));
        assert_eq!(Node::from_wit(wit(&n, None)).unwrap().object(), None);
        let e = Node::from_wit(wit(&n, Some("{"))).unwrap_err();
        assert!(e.starts_with("node object is not valid JSON"), "{e}");
        let out = guest_filter::<Sample>(
            r#"{"avoid": "x"}"#.into(),
            "".into(),
            POD.into(),
            vec![wit(&n, Some("{")), wit(&n, None)],
        );
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
