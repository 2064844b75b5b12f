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

/// A node as scheduler plugins receive it, built once per node version
/// and kept by the scheduler between cycles: the `node` record (name,
/// sorted labels, taints, `spec.unschedulable`) and the object's JSON
/// without `managedFields`, sent only to plugins that claim
/// `node-objects`.
#[derive(Debug, Clone)]
pub struct SchedulerNode {
    record: wit::Node,
    object: String,
}

impl SchedulerNode {
    /// The node's record and text, from a `v1` Node.
    pub fn new(node: &serde_json::Value) -> Self {
        let str_of = |v: &serde_json::Value, f: &str| {
            v.get(f)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let meta = &node["metadata"];
        let mut labels: Vec<(String, String)> = meta["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect();
        labels.sort();
        let taints = node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| wit::Taint {
                key: str_of(t, "key"),
                value: str_of(t, "value"),
                effect: str_of(t, "effect"),
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
                name: str_of(meta, "name"),
                labels,
                taints,
                unschedulable: node["spec"]["unschedulable"].as_bool().unwrap_or(false),
                object: None,
            },
            object,
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.record.name
    }

    /// The node's object as plugins read it (without `managedFields`).
    pub fn object(&self) -> &str {
        &self.object
    }

    /// The records of `nodes`, with their objects when `objects`.
    fn records(nodes: &[Arc<SchedulerNode>], objects: bool) -> Vec<wit::Node> {
        nodes
            .iter()
            .map(|n| wit::Node {
                object: objects.then(|| n.object.clone()),
                ..n.record.clone()
            })
            .collect()
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
        let records = points
            .filter
            .then(|| SchedulerNode::records(nodes, points.node_objects))
            .unwrap_or_default();
        let nodes = &records;
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
                    .call_filter(&mut *store, config, &state, pod, nodes)
                    .await?;
                if verdicts.len() != nodes.len() {
                    return Ok(Err(format!(
                        "filter answered {} verdicts for {} nodes",
                        verdicts.len(),
                        nodes.len()
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
        let records = SchedulerNode::records(nodes, points.node_objects);
        let nodes = &records;
        inner.score_metrics.call();
        let start = Instant::now();
        let result = inner
            .plugin
            .call(uid, async move |instance, store, config| {
                let export = instance.wasm_apiserver_plugin_scheduler();
                let mut state = state.to_owned();
                if points.pre_score {
                    match export
                        .call_pre_score(&mut *store, config, &state, pod, nodes)
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
                    .call_score(&mut *store, config, &state, pod, nodes)
                    .await?
                {
                    Ok(s) => s,
                    Err(r) => return Ok(Ok(Scored::Refused(Refusal::from_wit(r)))),
                };
                if scores.len() != nodes.len() {
                    return Ok(Err(format!(
                        "score answered {} scores for {} nodes",
                        scores.len(),
                        nodes.len()
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
                    if scores.len() != nodes.len() {
                        return Ok(Err(format!(
                            "normalize-score answered {} scores for {} nodes",
                            scores.len(),
                            nodes.len()
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

    #[test]
    fn a_node_record_has_what_plugins_read_most_and_its_object_only_when_claimed() {
        let node = serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"zone": "b", "score": "7", "n": 1},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"unschedulable": true,
                "taints": [{"key": "gpu", "effect": "NoSchedule"},
                    {"key": "k", "value": "v", "effect": "NoExecute"}]}});
        let n = Arc::new(SchedulerNode::new(&node));
        assert_eq!(n.name(), "n1");
        assert!(!n.object().contains("managedFields"), "{}", n.object());
        assert!(n.object().contains("\"zone\":\"b\""), "{}", n.object());
        let nodes = [n.clone()];
        let [bare] = &SchedulerNode::records(&nodes, false)[..] else {
            panic!("one record")
        };
        assert_eq!(
            bare.labels,
            [("score".into(), "7".into()), ("zone".into(), "b".into())]
        );
        assert!(bare.unschedulable);
        assert_eq!(
            bare.taints
                .iter()
                .map(|t| (t.key.as_str(), t.value.as_str(), t.effect.as_str()))
                .collect::<Vec<_>>(),
            [("gpu", "", "NoSchedule"), ("k", "v", "NoExecute")]
        );
        assert_eq!(bare.object, None);
        let full = &SchedulerNode::records(&nodes, true)[0];
        assert_eq!(full.object.as_deref(), Some(n.object()));
    }
}
