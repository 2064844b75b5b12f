//! Scheduler plugins: the `wasm-apiserver:plugin/scheduler-plugin` world
//! (package 0.4.0), filter and score plugins of the scheduling framework.
//!
//! Only what is specific to scheduling lives here: the world's binding,
//! the plain answer types ([`ExtensionPoints`], [`Refusal`], [`Filtered`],
//! [`Scored`]), the nodes as plugins receive them ([`SchedulerNode`]: a
//! record, and the object for plugins that claim `node-objects`) and the
//! two calls a scheduling cycle makes, each in one
//! fresh instance: [`SchedulerPlugin::filter`] (`pre-filter` then `filter`
//! over every candidate node at once) and [`SchedulerPlugin::score`]
//! (`pre-score`, `score` and `normalize-score` over the feasible nodes).
//! Answers are checked here (one verdict and one score per node, scores
//! within 0–100), so the scheduler gets well-formed data or a
//! [`PluginError`]. Loading, limits, concurrency and metrics come from
//! [`crate::runtime`].

use crate::cluster::ClusterAccess;
use crate::kind::Loaded;
use crate::runtime::{Limits, Runtime};
use crate::{PluginError, metrics::OpMetrics};
use std::sync::Arc;
use std::time::Instant;

/// The current (and first) scheduler world.
mod v0_4 {
    wasmtime::component::bindgen!({
        world: "scheduler-plugin",
        path: "../../wit",
        exports: { default: async },
        with: {
            "wasm-apiserver:plugin/types@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::types,
            "wasm-apiserver:plugin/log@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::log,
            "wasm-apiserver:plugin/cluster@0.4.0": crate::admission::v0_4::wasm_apiserver::plugin::cluster,
        },
    });
    crate::kind::world_pre!(
        SchedulerPlugin,
        SchedulerPluginPre,
        wasm_apiserver_plugin_scheduler,
        "0.4.0",
        "scheduler-plugin",
        "scheduler",
        "scheduler"
    );
    pub(crate) type Pre = SchedulerPluginPre<crate::sandbox::StoreState>;
}

use v0_4::exports::wasm_apiserver::plugin::scheduler as wit;

/// `kind` label of scheduler plugin metrics.
const KIND: &str = "scheduler";

/// The highest score a plugin may give a node (upstream's `MaxNodeScore`).
pub const MAX_SCORE: i64 = 100;

/// The extension points a plugin implements (its `extension-points`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtensionPoints {
    pub pre_filter: bool,
    pub filter: bool,
    pub pre_score: bool,
    pub score: bool,
    pub normalize_score: bool,
    /// Not a point: its nodes carry their whole objects.
    pub node_objects: bool,
}

impl ExtensionPoints {
    /// Whether the plugin takes part in filtering.
    pub fn filters(&self) -> bool {
        self.pre_filter || self.filter
    }

    /// Whether the plugin takes part in scoring.
    pub fn scores(&self) -> bool {
        self.score
    }
}

/// Upstream's `framework.Code` of a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCode {
    Unschedulable,
    UnschedulableAndUnresolvable,
    Error,
}

/// A plugin's refusal with its reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: RefusalCode,
    pub reasons: Vec<String>,
}

impl Refusal {
    fn from_wit(r: wit::Refusal) -> Refusal {
        Refusal {
            code: match r.code {
                wit::Code::Unschedulable => RefusalCode::Unschedulable,
                wit::Code::UnschedulableAndUnresolvable => {
                    RefusalCode::UnschedulableAndUnresolvable
                }
                wit::Code::Error => RefusalCode::Error,
            },
            reasons: r.reasons,
        }
    }
}

/// The answer of a cycle's filter call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filtered {
    /// `pre-filter` refused the pod: it fits no node.
    Refused(Refusal),
    /// One verdict per node (`None`: it fits), and the cycle state for the
    /// score call. `verdicts` is empty when `pre-filter` skipped `filter`
    /// or the plugin has none (every node fits).
    Nodes {
        state: String,
        verdicts: Vec<Option<Refusal>>,
    },
}

/// The answer of a cycle's score call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scored {
    /// The plugin has nothing to score for this pod.
    Skip,
    /// `pre-score`, `score` or `normalize-score` failed the cycle.
    Refused(Refusal),
    /// One score (0–100) per node, in order.
    Scores(Vec<i64>),
}

/// A node as scheduler plugins receive it, packed once per node version
/// and kept by the scheduler between cycles: its strings (name, sorted
/// labels, taints) in one text with the `node` record's spans relative to
/// it, and the object's JSON without `managedFields`, sent only to plugins
/// that claim `node-objects`. [`SchedulerNode::pack`] joins a call's nodes
/// into one `nodes` batch by copying and shifting spans (no per-string
/// work, in the host or the guest).
#[derive(Debug, Clone)]
pub struct SchedulerNode {
    name: String,
    text: Vec<u8>,
    labels: Vec<wit::Label>,
    taints: Vec<wit::Taint>,
    record: wit::Node,
    object: String,
}

/// A span of `len` from `start` (batches are far below 4 GiB: the guest's
/// memory limit bounds them first, and `pack` refuses a bigger one).
fn span(start: usize, len: usize) -> wit::Span {
    wit::Span {
        start: start as u32,
        len: len as u32,
    }
}

impl SchedulerNode {
    /// The node's packed form and text, from a `v1` Node.
    pub fn new(node: &serde_json::Value) -> Self {
        let str_of = |v: &serde_json::Value, f: &str| {
            v.get(f)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let meta = &node["metadata"];
        let name = str_of(meta, "name");
        let mut text = Vec::new();
        let mut put = |s: &str| {
            let start = text.len();
            text.extend_from_slice(s.as_bytes());
            span(start, s.len())
        };
        let name_span = put(&name);
        let mut pairs: Vec<(&String, &str)> = meta["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k, v.as_str()?)))
            .collect();
        pairs.sort();
        let labels: Vec<wit::Label> = pairs
            .into_iter()
            .map(|(k, v)| wit::Label {
                key: put(k),
                value: put(v),
            })
            .collect();
        let taints: Vec<wit::Taint> = node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| wit::Taint {
                key: put(&str_of(t, "key")),
                value: put(&str_of(t, "value")),
                effect: put(&str_of(t, "effect")),
            })
            .collect();
        let object = match meta.get("managedFields") {
            None => node.to_string(),
            Some(_) => {
                let mut o = node.clone();
                if let Some(m) = o["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
                o.to_string()
            }
        };
        SchedulerNode {
            record: wit::Node {
                name: name_span,
                labels: span(0, labels.len()),
                taints: span(0, taints.len()),
                unschedulable: node["spec"]["unschedulable"].as_bool().unwrap_or(false),
                object: None,
            },
            name,
            text,
            labels,
            taints,
            object,
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's object as plugins read it (without `managedFields`).
    pub fn object(&self) -> &str {
        &self.object
    }

    /// One call's `nodes` batch of `nodes`, with their objects when
    /// `objects`; `None` past 4 GiB of text.
    fn pack(nodes: &[Arc<SchedulerNode>], objects: bool) -> Option<wit::Nodes> {
        let size: usize = nodes
            .iter()
            .map(|n| n.text.len() + if objects { n.object.len() } else { 0 })
            .sum();
        u32::try_from(size).ok()?;
        let mut batch = wit::Nodes {
            text: Vec::with_capacity(size),
            labels: Vec::with_capacity(nodes.iter().map(|n| n.labels.len()).sum()),
            taints: Vec::with_capacity(nodes.iter().map(|n| n.taints.len()).sum()),
            items: Vec::with_capacity(nodes.len()),
        };
        for n in nodes {
            let base = batch.text.len() as u32;
            let shift = |s: wit::Span| wit::Span {
                start: s.start + base,
                len: s.len,
            };
            batch.text.extend_from_slice(&n.text);
            let (labels, taints) = (batch.labels.len(), batch.taints.len());
            batch.labels.extend(n.labels.iter().map(|l| wit::Label {
                key: shift(l.key),
                value: shift(l.value),
            }));
            batch.taints.extend(n.taints.iter().map(|t| wit::Taint {
                key: shift(t.key),
                value: shift(t.value),
                effect: shift(t.effect),
            }));
            let object = objects.then(|| {
                let start = batch.text.len();
                batch.text.extend_from_slice(n.object.as_bytes());
                span(start, n.object.len())
            });
            batch.items.push(wit::Node {
                name: shift(n.record.name),
                labels: span(labels, n.labels.len()),
                taints: span(taints, n.taints.len()),
                unschedulable: n.record.unschedulable,
                object,
            });
        }
        Some(batch)
    }
}

/// A loaded scheduler plugin. Cheap to clone.
#[derive(Clone)]
pub struct SchedulerPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    plugin: Loaded<v0_4::Pre>,
    points: ExtensionPoints,
    filter_metrics: Arc<OpMetrics>,
    score_metrics: Arc<OpMetrics>,
}

impl std::fmt::Debug for SchedulerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerPlugin")
            .field("name", &self.name())
            .field("sha256", &self.digest())
            .field("points", &self.points())
            .finish()
    }
}

impl Runtime {
    /// Loads a scheduler plugin: compiles `wasm` (or takes it from the
    /// cache), checks that it targets the scheduler world, gives it the
    /// cluster reads of `cluster`, has it check `config` and asks which
    /// extension points it implements.
    pub async fn load_scheduler(
        &self,
        name: &str,
        wasm: &[u8],
        config: &str,
        limits: Limits,
        cluster: Option<ClusterAccess>,
    ) -> Result<SchedulerPlugin, PluginError> {
        let compiled = self.compile(name, wasm).await?;
        let mut plugin: Loaded<v0_4::Pre> = self.link_compiled(name, compiled, config, limits)?;
        plugin.cluster = cluster.map(Arc::new);
        plugin.check_config().await?;
        let flags = plugin
            .call("extension-points", async |instance, store, config| {
                instance
                    .wasm_apiserver_plugin_scheduler()
                    .call_extension_points(store, config)
                    .await
            })
            .await?;
        let points = ExtensionPoints {
            pre_filter: flags.contains(wit::ExtensionPointSet::PRE_FILTER),
            filter: flags.contains(wit::ExtensionPointSet::FILTER),
            pre_score: flags.contains(wit::ExtensionPointSet::PRE_SCORE),
            score: flags.contains(wit::ExtensionPointSet::SCORE),
            normalize_score: flags.contains(wit::ExtensionPointSet::NORMALIZE_SCORE),
            node_objects: flags.contains(wit::ExtensionPointSet::NODE_OBJECTS),
        };
        Ok(SchedulerPlugin {
            inner: Arc::new(Inner {
                filter_metrics: self.metrics().op(name, KIND, "filter"),
                score_metrics: self.metrics().op(name, KIND, "score"),
                plugin,
                points,
            }),
        })
    }
}

impl SchedulerPlugin {
    /// The name the plugin was loaded under.
    pub fn name(&self) -> &str {
        &self.inner.plugin.core.name
    }

    /// The SHA-256 of the plugin's wasm bytes, in hex.
    pub fn digest(&self) -> &str {
        &self.inner.plugin.core.digest
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.plugin.core.limits
    }

    /// The extension points it implements.
    pub fn points(&self) -> ExtensionPoints {
        self.inner.points
    }

    /// `nodes` packed for this plugin (with objects when it claims them).
    fn pack(&self, nodes: &[Arc<SchedulerNode>]) -> Result<wit::Nodes, PluginError> {
        SchedulerNode::pack(nodes, self.inner.points.node_objects)
            .ok_or_else(|| self.invalid("the nodes exceed 4 GiB of text".to_owned()))
    }

    fn invalid(&self, message: String) -> PluginError {
        PluginError::InvalidOutput {
            plugin: self.name().to_owned(),
            message,
        }
    }

    /// The filter phase of one cycle, in one instance: `pre-filter` (when
    /// implemented) with `pod` (its JSON text), then `filter` with every
    /// node of `nodes` unless `pre-filter` skipped it. A wrong number of
    /// verdicts is an error.
    pub async fn filter(
        &self,
        uid: &str,
        pod: &str,
        nodes: &[Arc<SchedulerNode>],
    ) -> Result<Filtered, PluginError> {
        let inner = &self.inner;
        let points = inner.points;
        let pod = &pod.to_owned();
        // Nothing to pack for a plugin without `filter` (it is not called).
        let batch = &self.pack(if points.filter { nodes } else { &[] })?;
        let nodes = nodes.len();
        inner.filter_metrics.call();
        let start = Instant::now();
        let result = inner
            .plugin
            .call(uid, async move |instance, store, config| {
                let export = instance.wasm_apiserver_plugin_scheduler();
                let mut state = String::new();
                if points.pre_filter {
                    match export.call_pre_filter(&mut *store, config, pod).await? {
                        wit::Prepared::Proceed(s) => state = s,
                        wit::Prepared::Skip => {
                            return Ok(Ok(Filtered::Nodes {
                                state,
                                verdicts: Vec::new(),
                            }));
                        }
                        wit::Prepared::Refuse(r) => {
                            return Ok(Ok(Filtered::Refused(Refusal::from_wit(r))));
                        }
                    }
                }
                if !points.filter {
                    return Ok(Ok(Filtered::Nodes {
                        state,
                        verdicts: Vec::new(),
                    }));
                }
                let verdicts = export
                    .call_filter(&mut *store, config, &state, pod, batch)
                    .await?;
                if verdicts.len() != nodes {
                    return Ok(Err(format!(
                        "filter answered {} verdicts for {nodes} nodes",
                        verdicts.len(),
                    )));
                }
                Ok(Ok(Filtered::Nodes {
                    state,
                    verdicts: verdicts
                        .into_iter()
                        .map(|v| v.map(Refusal::from_wit))
                        .collect(),
                }))
            })
            .await
            .and_then(|r| r.map_err(|m| self.invalid(m)));
        inner
            .plugin
            .core
            .record(&inner.filter_metrics, start, &result, |f| match f {
                Filtered::Refused(_) => true,
                Filtered::Nodes { verdicts, .. } => verdicts.iter().any(Option::is_some),
            });
        result
    }

    /// The score phase of one cycle, in one instance: `pre-score` (when
    /// implemented), `score` and `normalize-score` (when implemented) over
    /// `nodes`, the feasible ones. `state` is what the filter phase
    /// returned. A wrong number of scores, or a score outside 0–100 after
    /// normalizing, is an error (upstream's framework fails the cycle
    /// alike).
    pub async fn score(
        &self,
        uid: &str,
        state: &str,
        pod: &str,
        nodes: &[Arc<SchedulerNode>],
    ) -> Result<Scored, PluginError> {
        let inner = &self.inner;
        let points = inner.points;
        if !points.score {
            return Ok(Scored::Skip);
        }
        let pod = &pod.to_owned();
        let batch = &self.pack(nodes)?;
        let nodes = nodes.len();
        inner.score_metrics.call();
        let start = Instant::now();
        let result = inner
            .plugin
            .call(uid, async move |instance, store, config| {
                let export = instance.wasm_apiserver_plugin_scheduler();
                let mut state = state.to_owned();
                if points.pre_score {
                    match export
                        .call_pre_score(&mut *store, config, &state, pod, batch)
                        .await?
                    {
                        wit::Prepared::Proceed(s) => state = s,
                        wit::Prepared::Skip => return Ok(Ok(Scored::Skip)),
                        wit::Prepared::Refuse(r) => {
                            return Ok(Ok(Scored::Refused(Refusal::from_wit(r))));
                        }
                    }
                }
                let mut scores = match export
                    .call_score(&mut *store, config, &state, pod, batch)
                    .await?
                {
                    Ok(s) => s,
                    Err(r) => return Ok(Ok(Scored::Refused(Refusal::from_wit(r)))),
                };
                if scores.len() != nodes {
                    return Ok(Err(format!(
                        "score answered {} scores for {nodes} nodes",
                        scores.len(),
                    )));
                }
                if points.normalize_score {
                    scores = match export
                        .call_normalize_score(&mut *store, config, &state, pod, &scores)
                        .await?
                    {
                        Ok(s) => s,
                        Err(r) => return Ok(Ok(Scored::Refused(Refusal::from_wit(r)))),
                    };
                    if scores.len() != nodes {
                        return Ok(Err(format!(
                            "normalize-score answered {} scores for {nodes} nodes",
                            scores.len(),
                        )));
                    }
                }
                if let Some((i, s)) = scores
                    .iter()
                    .enumerate()
                    .find(|(_, s)| !(0..=MAX_SCORE).contains(*s))
                {
                    return Ok(Err(format!(
                        "score {s} for node #{i} is outside 0..={MAX_SCORE}"
                    )));
                }
                Ok(Ok(Scored::Scores(scores)))
            })
            .await
            .and_then(|r| r.map_err(|m| self.invalid(m)));
        inner
            .plugin
            .core
            .record(&inner.score_metrics, start, &result, |s| {
                matches!(s, Scored::Refused(_))
            });
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of `span` in `batch`.
    fn text(batch: &wit::Nodes, span: wit::Span) -> &str {
        let (start, len) = (span.start as usize, span.len as usize);
        std::str::from_utf8(&batch.text[start..start + len]).unwrap()
    }

    #[test]
    fn nodes_are_packed_with_what_plugins_read_most_and_objects_only_when_claimed() {
        let node = serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"zone": "zürich", "score": "7", "n": 1},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"unschedulable": true,
                "taints": [{"key": "gpu", "effect": "NoSchedule"},
                    {"key": "k", "value": "v", "effect": "NoExecute"}]}});
        let other = serde_json::json!({"metadata": {"name": "n2", "labels": {"a": "b"}}});
        let n = Arc::new(SchedulerNode::new(&node));
        assert_eq!(n.name(), "n1");
        assert!(!n.object().contains("managedFields"), "{}", n.object());
        assert!(n.object().contains("zürich"), "{}", n.object());
        let nodes = [Arc::new(SchedulerNode::new(&other)), n.clone()];
        let batch = SchedulerNode::pack(&nodes, false).unwrap();
        assert_eq!(batch.items.len(), 2);
        let [first, second] = &batch.items[..] else {
            unreachable!()
        };
        assert_eq!(
            (text(&batch, first.name), text(&batch, second.name)),
            ("n2", "n1")
        );
        let labels = |node: &wit::Node| {
            let (start, len) = (node.labels.start as usize, node.labels.len as usize);
            batch.labels[start..start + len]
                .iter()
                .map(|l| (text(&batch, l.key), text(&batch, l.value)))
                .collect::<Vec<_>>()
        };
        assert_eq!(labels(first), [("a", "b")]);
        assert_eq!(labels(second), [("score", "7"), ("zone", "zürich")]);
        assert!(second.unschedulable && !first.unschedulable);
        assert_eq!(first.taints.len, 0);
        let (start, len) = (second.taints.start as usize, second.taints.len as usize);
        let taints: Vec<_> = batch.taints[start..start + len]
            .iter()
            .map(|t| {
                (
                    text(&batch, t.key),
                    text(&batch, t.value),
                    text(&batch, t.effect),
                )
            })
            .collect();
        assert_eq!(taints, [("gpu", "", "NoSchedule"), ("k", "v", "NoExecute")]);
        assert!(batch.items.iter().all(|i| i.object.is_none()));
        let full = SchedulerNode::pack(&nodes, true).unwrap();
        let object = full.items[1].object.expect("claimed");
        assert_eq!(text(&full, object), n.object());
        assert_eq!(text(&full, full.items[1].name), "n1");
    }
}
