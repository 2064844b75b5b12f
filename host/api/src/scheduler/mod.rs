//! kube-scheduler's decisions, with no IO: the scheduling framework
//! (`pkg/scheduler/framework`), its default plugins and the scheduling
//! queue's rules. The scheduler controller in the registry keeps the
//! cluster's state ([`Cluster`]) from its watches and asks [`Framework`]
//! where each pod goes.
//!
//! * [`Plugin`] is the framework's one plugin shape: `PreFilter`, `Filter`,
//!   `PreScore`, `Score` and `NormalizeScore` as methods with neutral
//!   defaults, so a plugin implements the points it has. A profile
//!   ([`Framework`]) lists its filter plugins in order and its score
//!   plugins with their weights; wasm plugins can later be more entries of
//!   the same lists.
//! * [`plugins`] has the default profile's node-local plugins
//!   (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
//!   NodePorts, NodeResourcesFit, NodeResourcesBalancedAllocation),
//!   [`spread`] PodTopologySpread and [`interpod`] InterPodAffinity.
//! * [`Framework::schedule`] is upstream's `schedulePod`: PreFilter, the
//!   filters over nodes from a rotating start until enough feasible nodes
//!   are found (`percentageOfNodesToScore`, adaptive), the scores weighted
//!   and summed, the best node picked (ties broken at random); or a
//!   [`FitError`] whose message is upstream's (`0/3 nodes are available:
//!   3 Insufficient cpu. preemption: ...`).
//! * [`queue`] is the scheduling queue's bookkeeping (active, backoff and
//!   unschedulable pods).

pub mod interpod;
pub mod plugins;
pub mod queue;
pub mod spread;

use crate::selector::{LabelSelector, Requirement};
use serde_json::{Value, json};
use std::any::Any;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// The default profile's `schedulerName`.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";
/// The highest score a plugin gives a node (`framework.MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;
/// The well-known hostname label.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The well-known zone label.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The CPU a container without a CPU request counts for in scores
/// (upstream's `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory a container without a memory request counts for in scores
/// (upstream's `DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Labels as a map.
pub type Labels = BTreeMap<String, String>;

// ---- resources --------------------------------------------------------

/// Amounts of resources (upstream's `framework.Resource`): CPU in
/// millicores, memory and ephemeral storage in bytes, extended resources
/// and huge pages in units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// `pods` (a node's allocatable count; 0 in requests).
    pub pods: i64,
    pub scalar: BTreeMap<String, i64>,
}

/// A quantity in units, rounded up; `milli` in thousandths.
fn quantity(v: &Value, milli: bool) -> Option<i64> {
    let q = match v {
        Value::String(s) => crate::cel::parse_quantity(s).ok()?.nanos(),
        Value::Number(n) => (n.as_f64()? * 1e9) as i128,
        _ => return None,
    };
    let unit: i128 = if milli { 1_000_000 } else { 1_000_000_000 };
    let v = q / unit + i128::from(q % unit > 0);
    Some(v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
}

/// Whether a resource name is scalar in upstream's sense: extended
/// resources (a domain outside `kubernetes.io`), huge pages and attachable
/// volumes.
fn is_scalar(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("kubernetes.io/"))
}

impl Resources {
    /// A resource list (`{"cpu": "500m", "memory": "1Gi", ...}`).
    pub fn from_list(list: &Value) -> Resources {
        let mut r = Resources::default();
        for (name, q) in list.as_object().into_iter().flatten() {
            match name.as_str() {
                "cpu" => r.milli_cpu = quantity(q, true).unwrap_or(0),
                "memory" => r.memory = quantity(q, false).unwrap_or(0),
                "ephemeral-storage" => r.ephemeral_storage = quantity(q, false).unwrap_or(0),
                "pods" => r.pods = quantity(q, false).unwrap_or(0),
                n if is_scalar(n) => {
                    r.scalar
                        .insert(n.to_string(), quantity(q, false).unwrap_or(0));
                }
                _ => {}
            }
        }
        r
    }

    pub fn add(&mut self, o: &Resources) {
        self.milli_cpu += o.milli_cpu;
        self.memory += o.memory;
        self.ephemeral_storage += o.ephemeral_storage;
        self.pods += o.pods;
        for (k, v) in &o.scalar {
            *self.scalar.entry(k.clone()).or_default() += v;
        }
    }

    pub fn sub(&mut self, o: &Resources) {
        self.milli_cpu -= o.milli_cpu;
        self.memory -= o.memory;
        self.ephemeral_storage -= o.ephemeral_storage;
        self.pods -= o.pods;
        for (k, v) in &o.scalar {
            *self.scalar.entry(k.clone()).or_default() -= v;
        }
    }

    /// Each amount the larger of the two.
    pub fn max_with(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        self.pods = self.pods.max(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// A container's requests (its limits where a request is missing, as API
/// defaulting makes them), and its requests for scoring: a missing CPU or
/// memory request counts as upstream's defaults.
fn container_requests(c: &Value) -> (Resources, (i64, i64)) {
    let requests = &c["resources"]["requests"];
    let limits = &c["resources"]["limits"];
    let mut list = limits.as_object().cloned().unwrap_or_default();
    for (k, v) in requests.as_object().into_iter().flatten() {
        list.insert(k.clone(), v.clone());
    }
    let r = Resources::from_list(&Value::Object(list.clone()));
    let cpu = if list.contains_key("cpu") {
        r.milli_cpu
    } else {
        DEFAULT_MILLI_CPU_REQUEST
    };
    let mem = if list.contains_key("memory") {
        r.memory
    } else {
        DEFAULT_MEMORY_REQUEST
    };
    (r, (cpu, mem))
}

/// A pod's requests as upstream's `resourcehelper.PodRequests` computes
/// them: the containers' sum, restartable (sidecar) init containers added
/// to it, the largest of that and each init container's (with the sidecars
/// started before it), plus `spec.overhead`. The second value is the
/// same for CPU and memory with missing requests defaulted (scores).
pub fn pod_requests(pod: &Value) -> (Resources, (i64, i64)) {
    let spec = &pod["spec"];
    let mut reqs = Resources::default();
    let mut non_zero = (0i64, 0i64);
    for c in spec["containers"].as_array().into_iter().flatten() {
        let (r, nz) = container_requests(c);
        reqs.add(&r);
        non_zero.0 += nz.0;
        non_zero.1 += nz.1;
    }
    let mut restartable = Resources::default();
    let mut restartable_nz = (0i64, 0i64);
    let mut init_max = Resources::default();
    let mut init_max_nz = (0i64, 0i64);
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let (mut r, mut nz) = container_requests(c);
        if c["restartPolicy"].as_str() == Some("Always") {
            reqs.add(&r);
            non_zero.0 += nz.0;
            non_zero.1 += nz.1;
            restartable.add(&r);
            restartable_nz.0 += nz.0;
            restartable_nz.1 += nz.1;
            r = restartable.clone();
            nz = restartable_nz;
        } else {
            r.add(&restartable);
            nz.0 += restartable_nz.0;
            nz.1 += restartable_nz.1;
        }
        init_max.max_with(&r);
        init_max_nz = (init_max_nz.0.max(nz.0), init_max_nz.1.max(nz.1));
    }
    reqs.max_with(&init_max);
    non_zero = (non_zero.0.max(init_max_nz.0), non_zero.1.max(init_max_nz.1));
    if spec["overhead"].is_object() {
        let o = Resources::from_list(&spec["overhead"]);
        reqs.add(&o);
        non_zero.0 += o.milli_cpu;
        non_zero.1 += o.memory;
    }
    (reqs, non_zero)
}

// ---- selectors and terms ----------------------------------------------

/// A `metav1.LabelSelector` as requirements; `None` for a null selector
/// (which selects nothing where upstream says so).
pub fn label_selector(sel: &Value) -> Option<LabelSelector> {
    if !sel.is_object() {
        return None;
    }
    let mut reqs = Vec::new();
    for (k, v) in sel["matchLabels"].as_object().into_iter().flatten() {
        reqs.push(Requirement::Equals(
            k.clone(),
            v.as_str().unwrap_or_default().to_string(),
        ));
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default().to_string();
        let values: Vec<String> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        reqs.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => Requirement::In(key, values),
            "NotIn" => Requirement::NotIn(key, values),
            "Exists" => Requirement::Exists(key),
            "DoesNotExist" => Requirement::DoesNotExist(key),
            // An unknown operator selects nothing.
            _ => Requirement::In(key, Vec::new()),
        });
    }
    Some(LabelSelector(reqs))
}

/// One requirement of a node selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

impl NodeRequirement {
    fn parse(v: &Value) -> NodeRequirement {
        NodeRequirement {
            key: v["key"].as_str().unwrap_or_default().to_string(),
            operator: v["operator"].as_str().unwrap_or_default().to_string(),
            values: v["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
        }
    }

    fn matches(&self, value: Option<&str>) -> bool {
        match self.operator.as_str() {
            "In" => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            "NotIn" => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            op @ ("Gt" | "Lt") => {
                let (Some(v), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if op == "Gt" { v > bound } else { v < bound }
            }
            _ => false,
        }
    }
}

/// A `NodeSelectorTerm`: every expression over the node's labels and every
/// field requirement (only `metadata.name`) must hold; an empty term
/// matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSelectorTerm {
    pub expressions: Vec<NodeRequirement>,
    pub fields: Vec<NodeRequirement>,
}

impl NodeSelectorTerm {
    pub fn parse(v: &Value) -> NodeSelectorTerm {
        let list = |f: &str| {
            v[f].as_array()
                .into_iter()
                .flatten()
                .map(NodeRequirement::parse)
                .collect()
        };
        NodeSelectorTerm {
            expressions: list("matchExpressions"),
            fields: list("matchFields"),
        }
    }

    pub fn matches(&self, node: &NodeInfo) -> bool {
        if self.expressions.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.expressions
            .iter()
            .all(|r| r.matches(node.labels.get(&r.key).map(String::as_str)))
            && self
                .fields
                .iter()
                .all(|r| r.key == "metadata.name" && r.matches(Some(node.name.as_str())))
    }
}

/// A pod (anti-)affinity term, its namespaces resolved as upstream's
/// `AffinityTerm`: the listed namespaces, or the pod's own when neither
/// they nor a namespace selector are given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityTerm {
    /// `None`: a null selector, matching no pod.
    pub selector: Option<LabelSelector>,
    pub namespaces: HashSet<String>,
    pub namespace_selector: Option<LabelSelector>,
    pub topology_key: String,
}

impl AffinityTerm {
    /// Parses `term` of a pod in `ns` with labels `own` (its
    /// `matchLabelKeys` / `mismatchLabelKeys` read them).
    pub fn parse(term: &Value, ns: &str, own: &Labels) -> AffinityTerm {
        let mut selector = label_selector(&term["labelSelector"]);
        if let Some(sel) = selector.as_mut() {
            for k in term["matchLabelKeys"].as_array().into_iter().flatten() {
                if let Some(v) = k.as_str().and_then(|k| own.get(k).map(|v| (k, v))) {
                    sel.0
                        .push(Requirement::In(v.0.to_string(), vec![v.1.clone()]));
                }
            }
            for k in term["mismatchLabelKeys"].as_array().into_iter().flatten() {
                if let Some(v) = k.as_str().and_then(|k| own.get(k).map(|v| (k, v))) {
                    sel.0
                        .push(Requirement::NotIn(v.0.to_string(), vec![v.1.clone()]));
                }
            }
        }
        let mut namespaces: HashSet<String> = term["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        let namespace_selector = label_selector(&term["namespaceSelector"]);
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.insert(ns.to_string());
        }
        AffinityTerm {
            selector,
            namespaces,
            namespace_selector,
            topology_key: term["topologyKey"].as_str().unwrap_or_default().to_string(),
        }
    }

    /// Whether `pod` is one this term selects (`ns_labels`: the labels of
    /// the cluster's namespaces, for namespace selectors).
    pub fn matches(&self, pod: &PodInfo, ns_labels: &HashMap<String, Labels>) -> bool {
        let in_ns = self.namespaces.contains(&pod.namespace)
            || self.namespace_selector.as_ref().is_some_and(|s| {
                s.is_empty()
                    || ns_labels
                        .get(&pod.namespace)
                        .is_some_and(|labels| s.matches(labels))
            });
        in_ns
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

/// A weighted (preferred) pod affinity term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedTerm {
    pub weight: i64,
    pub term: AffinityTerm,
}

/// One topology spread constraint, its selector merged with
/// `matchLabelKeys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadConstraint {
    pub max_skew: i64,
    pub topology_key: String,
    /// `DoNotSchedule` (true) or `ScheduleAnyway`.
    pub hard: bool,
    pub selector: LabelSelector,
    pub min_domains: i64,
    /// `nodeAffinityPolicy: Honor` (the default).
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default `Ignore`).
    pub honor_node_taints: bool,
}

impl SpreadConstraint {
    fn parse(c: &Value, own: &Labels) -> SpreadConstraint {
        // A null selector selects nothing: no pod counts.
        let mut selector = label_selector(&c["labelSelector"])
            .unwrap_or_else(|| LabelSelector(vec![Requirement::In(String::new(), Vec::new())]));
        for k in c["matchLabelKeys"].as_array().into_iter().flatten() {
            if let Some((k, v)) = k.as_str().and_then(|k| own.get(k).map(|v| (k, v))) {
                selector
                    .0
                    .push(Requirement::In(k.to_string(), vec![v.clone()]));
            }
        }
        SpreadConstraint {
            max_skew: c["maxSkew"].as_i64().unwrap_or(1),
            topology_key: c["topologyKey"].as_str().unwrap_or_default().to_string(),
            hard: c["whenUnsatisfiable"].as_str() != Some("ScheduleAnyway"),
            selector,
            min_domains: c["minDomains"].as_i64().unwrap_or(1).max(1),
            honor_node_affinity: c["nodeAffinityPolicy"].as_str() != Some("Ignore"),
            honor_node_taints: c["nodeTaintsPolicy"].as_str() == Some("Honor"),
        }
    }
}

/// A host port a pod asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i64,
}

impl HostPort {
    /// Whether two ports collide (same protocol and port, and the same IP
    /// or either on every address).
    pub fn conflicts(&self, o: &HostPort) -> bool {
        self.port == o.port
            && self.protocol == o.protocol
            && (self.ip == o.ip || self.ip == "0.0.0.0" || o.ip == "0.0.0.0")
    }
}

// ---- pods and nodes ---------------------------------------------------

/// What the scheduler reads of a pod, parsed once.
#[derive(Debug, Clone, Default)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: Labels,
    /// `spec.nodeName` (empty when unbound).
    pub node_name: String,
    pub scheduler_name: String,
    pub priority: i64,
    /// `spec.preemptionPolicy: Never`.
    pub never_preempt: bool,
    pub terminating: bool,
    pub requests: Resources,
    /// CPU (millicores) and memory (bytes) requests as scores count them.
    pub non_zero: (i64, i64),
    pub host_ports: Vec<HostPort>,
    pub node_selector: Labels,
    /// Required node affinity terms (any may match); `None` when absent.
    pub required_node_affinity: Option<Vec<NodeSelectorTerm>>,
    pub preferred_node_affinity: Vec<(i64, NodeSelectorTerm)>,
    pub tolerations: Vec<Value>,
    pub spread_constraints: Vec<SpreadConstraint>,
    /// The selector of upstream's system default spread constraints (the
    /// Services, ReplicaSets, ReplicationControllers and StatefulSets that
    /// select the pod): filled by the caller, which knows them.
    pub default_spread_selector: Option<LabelSelector>,
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<WeightedTerm>,
    pub preferred_anti_affinity: Vec<WeightedTerm>,
}

impl PodInfo {
    pub fn new(pod: &Value) -> PodInfo {
        let meta = &pod["metadata"];
        let spec = &pod["spec"];
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let namespace = s(&meta["namespace"]);
        let labels = crate::meta::labels(pod);
        let (requests, non_zero) = pod_requests(pod);
        let mut host_ports = Vec::new();
        for c in spec["containers"].as_array().into_iter().flatten() {
            for p in c["ports"].as_array().into_iter().flatten() {
                let port = p["hostPort"].as_i64().unwrap_or(0);
                if port > 0 {
                    host_ports.push(HostPort {
                        ip: p["hostIP"]
                            .as_str()
                            .filter(|s| !s.is_empty())
                            .unwrap_or("0.0.0.0")
                            .to_string(),
                        protocol: p["protocol"]
                            .as_str()
                            .filter(|s| !s.is_empty())
                            .unwrap_or("TCP")
                            .to_string(),
                        port,
                    });
                }
            }
        }
        let node_affinity = &spec["affinity"]["nodeAffinity"];
        let required = &node_affinity["requiredDuringSchedulingIgnoredDuringExecution"];
        let required_node_affinity = required.is_object().then(|| {
            required["nodeSelectorTerms"]
                .as_array()
                .into_iter()
                .flatten()
                .map(NodeSelectorTerm::parse)
                .collect()
        });
        let preferred_node_affinity =
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    (
                        p["weight"].as_i64().unwrap_or(0),
                        NodeSelectorTerm::parse(&p["preference"]),
                    )
                })
                .collect();
        let terms = |v: &Value| -> Vec<AffinityTerm> {
            v["requiredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| AffinityTerm::parse(t, &namespace, &labels))
                .collect()
        };
        let weighted = |v: &Value| -> Vec<WeightedTerm> {
            v["preferredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| WeightedTerm {
                    weight: t["weight"].as_i64().unwrap_or(0),
                    term: AffinityTerm::parse(&t["podAffinityTerm"], &namespace, &labels),
                })
                .collect()
        };
        let affinity = &spec["affinity"]["podAffinity"];
        let anti = &spec["affinity"]["podAntiAffinity"];
        PodInfo {
            name: s(&meta["name"]),
            uid: s(&meta["uid"]),
            node_name: s(&spec["nodeName"]),
            scheduler_name: spec["schedulerName"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or(DEFAULT_SCHEDULER)
                .to_string(),
            priority: spec["priority"].as_i64().unwrap_or(0),
            never_preempt: spec["preemptionPolicy"].as_str() == Some("Never"),
            terminating: meta["deletionTimestamp"].is_string(),
            requests,
            non_zero,
            host_ports,
            node_selector: spec["nodeSelector"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect(),
            required_node_affinity,
            preferred_node_affinity,
            tolerations: spec["tolerations"].as_array().cloned().unwrap_or_default(),
            spread_constraints: spec["topologySpreadConstraints"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| SpreadConstraint::parse(c, &labels))
                .collect(),
            default_spread_selector: None,
            required_affinity: terms(affinity),
            required_anti_affinity: terms(anti),
            preferred_affinity: weighted(affinity),
            preferred_anti_affinity: weighted(anti),
            namespace,
            labels,
        }
    }

    /// Whether the pod has any (anti-)affinity term (upstream's
    /// `PodsWithAffinity`).
    pub fn has_affinity(&self) -> bool {
        !(self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty())
    }

    /// Whether the pod's required node selector and affinity accept `node`
    /// (upstream's `RequiredNodeAffinity.Match`).
    pub fn node_affinity_matches(&self, node: &NodeInfo) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
            && self
                .required_node_affinity
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(node)))
    }

    /// Whether the pod tolerates every `NoSchedule` and `NoExecute` taint
    /// of `node` (the first it does not, if any).
    pub fn untolerated_taint<'a>(&self, node: &'a NodeInfo) -> Option<&'a Value> {
        node.taints.iter().find(|t| {
            matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute"))
                && !self
                    .tolerations
                    .iter()
                    .any(|tol| crate::node::lifecycle::tolerates(tol, t))
        })
    }
}

/// A node with what is on it (upstream's `framework.NodeInfo`): the pods
/// bound or assumed to it and what they request.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Value>,
    pub unschedulable: bool,
    pub allocatable: Resources,
    /// The sum of its pods' requests.
    pub requested: Resources,
    /// The same with missing CPU and memory requests defaulted (scores).
    pub non_zero_requested: (i64, i64),
    pub pods: Vec<Arc<PodInfo>>,
    pub used_ports: Vec<HostPort>,
    /// How many of its pods have (anti-)affinity terms, and required
    /// anti-affinity terms.
    pub pods_with_affinity: usize,
    pub pods_with_required_anti_affinity: usize,
}

impl NodeInfo {
    pub fn new(node: &Value) -> NodeInfo {
        let mut n = NodeInfo::default();
        n.set_node(node);
        n
    }

    /// Takes the node's labels, taints, `unschedulable` and allocatable
    /// (its capacity where allocatable is absent) from `node`.
    pub fn set_node(&mut self, node: &Value) {
        self.name = crate::meta::name(node).unwrap_or_default().to_string();
        self.labels = crate::meta::labels(node);
        self.taints = node["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        self.unschedulable = node["spec"]["unschedulable"].as_bool().unwrap_or(false);
        let status = &node["status"];
        self.allocatable = if status["allocatable"].is_object() {
            Resources::from_list(&status["allocatable"])
        } else {
            Resources::from_list(&status["capacity"])
        };
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.0 += pod.non_zero.0;
        self.non_zero_requested.1 += pod.non_zero.1;
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if pod.has_affinity() {
            self.pods_with_affinity += 1;
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.pods.push(pod);
    }

    /// Removes the pod with `uid`; whether it was here.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.uid == uid) else {
            return false;
        };
        let pod = self.pods.swap_remove(i);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.0 -= pod.non_zero.0;
        self.non_zero_requested.1 -= pod.non_zero.1;
        for p in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|u| u == p) {
                self.used_ports.swap_remove(j);
            }
        }
        if pod.has_affinity() {
            self.pods_with_affinity -= 1;
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity -= 1;
        }
        true
    }
}

/// The cluster as the scheduler knows it (upstream's cache snapshot): the
/// nodes with their pods, and the namespaces' labels.
#[derive(Debug, Default)]
pub struct Cluster {
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    /// Where each pod (by uid) is counted.
    pod_node: HashMap<String, String>,
    /// Pods bound to nodes not (yet) known, by node.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    pub namespace_labels: HashMap<String, Labels>,
}

impl Cluster {
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }

    /// Adds or updates a node.
    pub fn set_node(&mut self, node: &Value) {
        let name = crate::meta::name(node).unwrap_or_default();
        if let Some(i) = self.index.get(name) {
            self.nodes[*i].set_node(node);
            return;
        }
        let mut info = NodeInfo::new(node);
        for p in self.orphans.remove(name).unwrap_or_default() {
            info.add_pod(p);
        }
        self.index.insert(info.name.clone(), self.nodes.len());
        self.nodes.push(info);
    }

    pub fn remove_node(&mut self, name: &str) {
        let Some(i) = self.index.remove(name) else {
            return;
        };
        let gone = self.nodes.swap_remove(i);
        if i < self.nodes.len() {
            self.index.insert(self.nodes[i].name.clone(), i);
        }
        // Its pods stay counted should the node come back (upstream keeps
        // them until the pods go).
        if !gone.pods.is_empty() {
            self.orphans.insert(gone.name.clone(), gone.pods);
        }
    }

    /// Counts `pod` on `node` (bound or assumed), replacing where it was.
    pub fn add_pod(&mut self, node: &str, pod: Arc<PodInfo>) {
        self.remove_pod(&pod.uid.clone());
        self.pod_node.insert(pod.uid.clone(), node.to_string());
        match self.index.get(node) {
            Some(i) => self.nodes[*i].add_pod(pod),
            None => self.orphans.entry(node.to_string()).or_default().push(pod),
        }
    }

    /// Stops counting the pod `uid`; the node it was on.
    pub fn remove_pod(&mut self, uid: &str) -> Option<String> {
        let node = self.pod_node.remove(uid)?;
        match self.index.get(&node) {
            Some(i) => {
                self.nodes[*i].remove_pod(uid);
            }
            None => {
                if let Some(list) = self.orphans.get_mut(&node) {
                    list.retain(|p| p.uid != uid);
                    if list.is_empty() {
                        self.orphans.remove(&node);
                    }
                }
            }
        }
        Some(node)
    }

    /// The node a pod is counted on.
    pub fn pod_node(&self, uid: &str) -> Option<&str> {
        self.pod_node.get(uid).map(String::as_str)
    }

    pub fn pod_count(&self) -> usize {
        self.pod_node.len()
    }
}

// ---- the framework ------------------------------------------------------

/// A plugin's verdict (upstream's `framework.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Success,
    /// The pod does not fit now; preemption might help.
    Unschedulable,
    /// The pod does not fit, and preemption cannot change that.
    UnschedulableAndUnresolvable,
    /// The plugin has nothing to do for this pod (PreFilter, PreScore).
    Skip,
    Error,
}

/// A plugin's answer with its reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Vec<String>,
    /// The plugin that failed the pod.
    pub plugin: String,
}

impl Status {
    pub fn success() -> Status {
        Status {
            code: Code::Success,
            reasons: Vec::new(),
            plugin: String::new(),
        }
    }

    pub fn skip() -> Status {
        Status {
            code: Code::Skip,
            ..Status::success()
        }
    }

    pub fn new(code: Code, reason: impl Into<String>) -> Status {
        Status {
            code,
            reasons: vec![reason.into()],
            plugin: String::new(),
        }
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// The reasons joined, as upstream's `Status.Message`.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

/// What plugins keep between the extension points of one cycle, by
/// plugin name.
#[derive(Default)]
pub struct CycleState {
    data: HashMap<String, Box<dyn Any + Send + Sync>>,
}

impl CycleState {
    pub fn write<T: Any + Send + Sync>(&mut self, key: &str, value: T) {
        self.data.insert(key.to_string(), Box::new(value));
    }

    pub fn read<T: Any>(&self, key: &str) -> Option<&T> {
        self.data.get(key).and_then(|b| b.downcast_ref())
    }
}

/// A scheduling plugin: one shape for every extension point; each has a
/// neutral default, so a plugin implements the points it has.
pub trait Plugin: Send + Sync {
    fn name(&self) -> &str;

    /// Once per pod, before the filters, with every node. `Skip` skips this
    /// plugin's `filter`; `Unschedulable*` fails the pod on every node.
    fn pre_filter(&self, _state: &mut CycleState, _pod: &PodInfo, _cluster: &Cluster) -> Status {
        Status::success()
    }

    /// Whether `node` can run `pod`.
    fn filter(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> Status {
        Status::success()
    }

    /// Once per pod, before scoring, with the feasible nodes. `Skip`
    /// skips this plugin's `score` and `normalize_score`.
    fn pre_score(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _feasible: &[&NodeInfo],
        _cluster: &Cluster,
    ) -> Status {
        Status::success()
    }

    /// The node's raw score.
    fn score(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> i64 {
        0
    }

    /// Brings the raw scores of `nodes` (the feasible ones, in order) to
    /// `0..=MAX_NODE_SCORE`.
    fn normalize_score(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _nodes: &[&NodeInfo],
        _scores: &mut [i64],
    ) {
    }
}

/// Upstream's `DefaultNormalizeScore`: scores scaled so the largest is
/// `max`, reversed when a low raw score is good.
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [i64]) {
    let highest = scores.iter().copied().max().unwrap_or(0);
    if highest == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = max * *s / highest;
        if reverse {
            *s = max - *s;
        }
    }
}

/// Where a pod goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleResult {
    pub node: String,
    /// Nodes filtered, and how many of them fit.
    pub evaluated: usize,
    pub feasible: usize,
}

/// Why no node was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleError {
    /// There is no node at all.
    NoNodes,
    /// No node fits.
    Fit(FitError),
    /// A plugin failed.
    Error(String),
}

/// The message of [`ScheduleError::NoNodes`] (upstream's `ErrNoNodesAvailable`).
pub const NO_NODES_MESSAGE: &str = "no nodes available to schedule pods";

impl ScheduleError {
    pub fn message(&self) -> String {
        match self {
            ScheduleError::NoNodes => NO_NODES_MESSAGE.into(),
            ScheduleError::Fit(f) => f.message(),
            ScheduleError::Error(e) => e.clone(),
        }
    }
}

/// Why a pod fits no node (upstream's `FitError`): every node's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitError {
    pub num_all_nodes: usize,
    /// The failing statuses of the nodes looked at, by node.
    pub statuses: BTreeMap<String, Status>,
    /// A PreFilter plugin's message when one failed the pod.
    pub pre_filter_msg: Option<String>,
    /// The message of the PostFilter point (preemption).
    pub post_filter_msg: Option<String>,
    /// The plugins that failed the pod somewhere.
    pub unschedulable_plugins: std::collections::BTreeSet<String>,
}

/// Counts of `reason`s as upstream's `sortReasonsHistogram` prints them:
/// `"<count> <reason>"`, sorted as strings.
fn reasons_histogram<'a>(reasons: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r).or_default() += 1;
    }
    let mut out: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    out.sort();
    out
}

/// Preemption's message for a node that cannot become feasible by
/// evicting pods.
pub const PREEMPTION_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Preemption's message for a node with no pod it could evict.
pub const NO_PREEMPTION_VICTIMS: &str = "No preemption victims found for incoming pod";

impl FitError {
    /// Upstream's `FitError.Error()`: `0/<n> nodes are available: <the
    /// PreFilter message, or the reasons histogram>.` and the PostFilter
    /// message after it.
    pub fn message(&self) -> String {
        let mut msg = format!("0/{} nodes are available:", self.num_all_nodes);
        match &self.pre_filter_msg {
            Some(m) => msg.push_str(&format!(" {m}.")),
            None => {
                let h = reasons_histogram(
                    self.statuses
                        .values()
                        .flat_map(|s| s.reasons.iter().map(String::as_str)),
                );
                if !h.is_empty() {
                    msg.push_str(&format!(" {}.", h.join(", ")));
                }
            }
        }
        if let Some(p) = &self.post_filter_msg {
            msg.push_str(&format!(" {p}."));
        }
        msg
    }

    /// The PostFilter message upstream's DefaultPreemption gives when it
    /// finds no pod to evict, which is always the case here (this
    /// scheduler does not preempt): nodes failed by an unresolvable status
    /// are not helped by preemption; on the others no victims are found.
    pub fn set_preemption_message(&mut self, pod: &PodInfo) {
        if pod.never_preempt {
            self.post_filter_msg =
                Some("preemption: not eligible due to preemptionPolicy=Never.".into());
            return;
        }
        // Nodes without a status (none here: every node was looked at)
        // count as not helped, as upstream's `SetAbsentNodesStatus`.
        let absent = self.num_all_nodes.saturating_sub(self.statuses.len());
        let reasons = self
            .statuses
            .values()
            .map(|s| {
                if s.code == Code::UnschedulableAndUnresolvable {
                    PREEMPTION_NOT_HELPFUL
                } else {
                    NO_PREEMPTION_VICTIMS
                }
            })
            .chain(std::iter::repeat_n(PREEMPTION_NOT_HELPFUL, absent));
        let h = reasons_histogram(reasons);
        self.post_filter_msg = Some(format!(
            "preemption: 0/{} nodes are available: {}.",
            self.num_all_nodes,
            h.join(", ")
        ));
    }
}

/// How many feasible nodes to look for among `all` (upstream's
/// `numFeasibleNodesToFind`): every node below 100; else `percentage`
/// of them (adaptive when 0: 50% less 1% per 125 nodes, at least 5%), at
/// least 100.
pub fn num_feasible_nodes_to_find(percentage: u32, all: usize) -> usize {
    const MIN_FEASIBLE_NODES: usize = 100;
    const MIN_PERCENTAGE: i64 = 5;
    if all < MIN_FEASIBLE_NODES || percentage >= 100 {
        return all;
    }
    let mut adaptive = i64::from(percentage);
    if adaptive <= 0 {
        adaptive = (50 - all as i64 / 125).max(MIN_PERCENTAGE);
    }
    let n = all * adaptive as usize / 100;
    n.max(MIN_FEASIBLE_NODES)
}

/// A profile: filter plugins in order, score plugins with weights.
pub struct Framework {
    pub filters: Vec<Arc<dyn Plugin>>,
    pub scorers: Vec<(Arc<dyn Plugin>, i64)>,
    /// `percentageOfNodesToScore` (0: adaptive, upstream's default).
    pub percentage_of_nodes_to_score: u32,
    /// Where the next cycle starts looking (upstream's
    /// `nextStartNodeIndex`).
    next_start: usize,
    /// Tie-breaking state.
    rng: u64,
}

impl Framework {
    pub fn new(filters: Vec<Arc<dyn Plugin>>, scorers: Vec<(Arc<dyn Plugin>, i64)>) -> Self {
        Framework {
            filters,
            scorers,
            percentage_of_nodes_to_score: 0,
            next_start: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// The default profile with upstream's plugins and weights
    /// (`apis/config/v1/default_plugins.go`): filters NodeUnschedulable,
    /// NodeName, TaintToleration, NodeAffinity, NodePorts,
    /// NodeResourcesFit, PodTopologySpread, InterPodAffinity; scores
    /// TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1,
    /// PodTopologySpread 2, InterPodAffinity 2,
    /// NodeResourcesBalancedAllocation 1.
    pub fn default_profile() -> Self {
        let taints: Arc<dyn Plugin> = Arc::new(plugins::TaintToleration);
        let affinity: Arc<dyn Plugin> = Arc::new(plugins::NodeAffinity);
        let fit: Arc<dyn Plugin> = Arc::new(plugins::NodeResourcesFit);
        let spread: Arc<dyn Plugin> = Arc::new(spread::PodTopologySpread);
        let interpod: Arc<dyn Plugin> = Arc::new(interpod::InterPodAffinity);
        Framework::new(
            vec![
                Arc::new(plugins::NodeUnschedulable),
                Arc::new(plugins::NodeName),
                taints.clone(),
                affinity.clone(),
                Arc::new(plugins::NodePorts),
                fit.clone(),
                spread.clone(),
                interpod.clone(),
            ],
            vec![
                (taints, 3),
                (affinity, 2),
                (fit, 1),
                (spread, 2),
                (interpod, 2),
                (Arc::new(plugins::BalancedAllocation), 1),
            ],
        )
    }

    /// Seeds the tie-breaker (tests).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = seed.max(1);
        self
    }

    fn random(&mut self) -> u64 {
        // xorshift64
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Upstream's `schedulePod`: the node `pod` goes to, or why none.
    pub fn schedule(
        &mut self,
        pod: &PodInfo,
        cluster: &Cluster,
    ) -> Result<ScheduleResult, ScheduleError> {
        let filtered = self.filter(pod, cluster, false)?;
        self.score(pod, cluster, filtered, &[])
    }

    /// The filter half of a cycle: PreFilter, then the filters over the
    /// nodes from where the last cycle stopped until enough fit (every
    /// node when `all`: plugins outside the framework, which filter
    /// after it, must not find too few). An error when no node fits.
    pub fn filter(
        &mut self,
        pod: &PodInfo,
        cluster: &Cluster,
        all: bool,
    ) -> Result<Filtered, ScheduleError> {
        let nodes = cluster.nodes();
        if nodes.is_empty() {
            return Err(ScheduleError::NoNodes);
        }
        let mut state = CycleState::default();
        let mut fit = FitError {
            num_all_nodes: nodes.len(),
            statuses: BTreeMap::new(),
            pre_filter_msg: None,
            post_filter_msg: None,
            unschedulable_plugins: Default::default(),
        };
        // PreFilter.
        let mut skipped = HashSet::new();
        for p in &self.filters {
            let s = p.pre_filter(&mut state, pod, cluster);
            match s.code {
                Code::Success => {}
                Code::Skip => {
                    skipped.insert(p.name().to_string());
                }
                Code::Error => {
                    return Err(ScheduleError::Error(format!(
                        "running PreFilter plugin {:?}: {}",
                        p.name(),
                        s.message()
                    )));
                }
                _ => {
                    let mut filtered = Filtered {
                        state,
                        feasible: nodes.iter().map(|n| n.name.clone()).collect(),
                        fit,
                        evaluated: 0,
                    };
                    filtered.refuse_pod(p.name(), s);
                    return Err(filtered.into_error(pod));
                }
            }
        }
        let filters: Vec<&Arc<dyn Plugin>> = self
            .filters
            .iter()
            .filter(|p| !skipped.contains(p.name()))
            .collect();
        // Filter, from where the last cycle stopped, until enough fit.
        let want = if all {
            nodes.len()
        } else {
            num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, nodes.len())
        };
        let mut feasible = Vec::with_capacity(want.min(nodes.len()));
        let start = self.next_start % nodes.len();
        let mut processed = 0;
        for i in 0..nodes.len() {
            if feasible.len() >= want {
                break;
            }
            let node = &nodes[(start + i) % nodes.len()];
            processed += 1;
            let mut ok = true;
            for p in &filters {
                let s = p.filter(&state, pod, node);
                match s.code {
                    Code::Success | Code::Skip => {}
                    Code::Error => {
                        return Err(ScheduleError::Error(format!(
                            "running {:?} filter plugin: {}",
                            p.name(),
                            s.message()
                        )));
                    }
                    _ => {
                        fit.unschedulable_plugins.insert(p.name().to_string());
                        fit.statuses.insert(
                            node.name.clone(),
                            Status {
                                plugin: p.name().to_string(),
                                ..s
                            },
                        );
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                feasible.push(node.name.clone());
            }
        }
        self.next_start = (start + processed) % nodes.len();
        let filtered = Filtered {
            state,
            feasible,
            fit,
            evaluated: processed,
        };
        if filtered.feasible.is_empty() {
            return Err(filtered.into_error(pod));
        }
        Ok(filtered)
    }

    /// The score half of a cycle: PreScore, Score, NormalizeScore and the
    /// weights of the framework's scorers, plus `extra` scores (plugins
    /// outside the framework, each node's score already normalized and a
    /// weight), then the best of the feasible nodes that still exist, ties
    /// broken at random.
    pub fn score(
        &mut self,
        pod: &PodInfo,
        cluster: &Cluster,
        filtered: Filtered,
        extra: &[ExtraScores],
    ) -> Result<ScheduleResult, ScheduleError> {
        let Filtered {
            mut state,
            feasible,
            fit,
            evaluated,
        } = filtered;
        let feasible: Vec<&NodeInfo> = feasible.iter().filter_map(|n| cluster.node(n)).collect();
        if feasible.is_empty() {
            let mut fit = fit;
            fit.set_preemption_message(pod);
            return Err(ScheduleError::Fit(fit));
        }
        if feasible.len() == 1 {
            return Ok(ScheduleResult {
                node: feasible[0].name.clone(),
                evaluated,
                feasible: 1,
            });
        }
        // PreScore, Score, NormalizeScore, weights.
        let mut totals = vec![0i64; feasible.len()];
        let mut scores = vec![0i64; feasible.len()];
        for (p, weight) in &self.scorers {
            if p.pre_score(&mut state, pod, &feasible, cluster).code == Code::Skip {
                continue;
            }
            for (i, n) in feasible.iter().enumerate() {
                scores[i] = p.score(&state, pod, n);
            }
            p.normalize_score(&state, pod, &feasible, &mut scores);
            for (t, s) in totals.iter_mut().zip(&scores) {
                *t += s * weight;
            }
        }
        for e in extra {
            for (t, n) in totals.iter_mut().zip(&feasible) {
                *t += e.scores.get(&n.name).copied().unwrap_or(0) * e.weight;
            }
        }
        // The best, ties broken at random (reservoir sampling, as upstream).
        let mut best = 0;
        let mut ties = 1u64;
        for i in 1..totals.len() {
            if totals[i] > totals[best] {
                best = i;
                ties = 1;
            } else if totals[i] == totals[best] {
                ties += 1;
                if self.random().is_multiple_of(ties) {
                    best = i;
                }
            }
        }
        Ok(ScheduleResult {
            node: feasible[best].name.clone(),
            evaluated,
            feasible: feasible.len(),
        })
    }
}

/// The filter half of a cycle ([`Framework::filter`]), which plugins
/// outside the framework (wasm ones, called between the halves) narrow
/// further before [`Framework::score`].
pub struct Filtered {
    /// What the framework's plugins keep for the score half.
    pub state: CycleState,
    /// The names of the nodes that fit so far, in the order filtered.
    pub feasible: Vec<String>,
    /// Why the others do not.
    pub fit: FitError,
    /// How many nodes were filtered.
    pub evaluated: usize,
}

impl Filtered {
    /// Plugin `plugin` refused `node` with `status` (not a success).
    pub fn refuse(&mut self, plugin: &str, node: &str, status: Status) {
        self.feasible.retain(|n| n != node);
        self.fit.unschedulable_plugins.insert(plugin.to_string());
        self.fit.statuses.insert(
            node.to_string(),
            Status {
                plugin: plugin.to_string(),
                ..status
            },
        );
    }

    /// Plugin `plugin`'s PreFilter refused the pod: every node still
    /// feasible fails with `status`, whose message becomes the error's.
    pub fn refuse_pod(&mut self, plugin: &str, status: Status) {
        let status = Status {
            plugin: plugin.to_string(),
            ..status
        };
        self.fit.pre_filter_msg = Some(status.message());
        self.fit.unschedulable_plugins.insert(plugin.to_string());
        for n in self.feasible.drain(..) {
            self.fit.statuses.insert(n, status.clone());
        }
    }

    /// The error of a cycle no node is left for.
    pub fn into_error(mut self, pod: &PodInfo) -> ScheduleError {
        self.fit.set_preemption_message(pod);
        ScheduleError::Fit(self.fit)
    }
}

/// One outside plugin's normalized scores (`0..=MAX_NODE_SCORE`) by node
/// name, and its weight.
#[derive(Debug, Clone, Default)]
pub struct ExtraScores {
    pub weight: i64,
    pub scores: HashMap<String, i64>,
}

/// Sets `PodScheduled` to `status` with `reason` and `message`, its
/// transition time moved only when its status changes (upstream's
/// `UpdatePodCondition`).
pub fn set_pod_scheduled(pod: &mut Value, status: &str, why: Option<(&str, &str)>, now: &str) {
    let st = &mut pod["status"];
    if !st.is_object() {
        *st = json!({});
    }
    if !st["conditions"].is_array() {
        st["conditions"] = json!([]);
    }
    let conditions = st["conditions"].as_array_mut().expect("array");
    let mut new = json!({
        "type": "PodScheduled",
        "status": status,
        "lastProbeTime": null,
        "lastTransitionTime": now,
    });
    if let Some((reason, message)) = why {
        new["reason"] = json!(reason);
        new["message"] = json!(message);
    }
    match conditions.iter_mut().find(|c| c["type"] == "PodScheduled") {
        Some(c) => {
            if c["status"] == status {
                new["lastTransitionTime"] = c["lastTransitionTime"].clone();
            }
            *c = new;
        }
        None => conditions.push(new),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A Ready node with `cpu`, `memory` and 110 pods allocatable.
    pub fn node(name: &str, cpu: &str, memory: &str) -> Value {
        json!({
            "metadata": {"name": name, "labels": {HOSTNAME_LABEL: name}},
            "spec": {},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
        })
    }

    /// A pod whose one container requests `cpu` and `memory` ("" for none).
    pub fn pod(name: &str, cpu: &str, memory: &str) -> Value {
        let mut requests = serde_json::Map::new();
        if !cpu.is_empty() {
            requests.insert("cpu".into(), json!(cpu));
        }
        if !memory.is_empty() {
            requests.insert("memory".into(), json!(memory));
        }
        json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
        })
    }

    pub fn cluster(nodes: &[Value]) -> Cluster {
        let mut c = Cluster::default();
        for n in nodes {
            c.set_node(n);
        }
        c
    }

    #[test]
    fn pod_requests_follow_upstream() {
        // Upstream's TestPodRequests cases: init containers' max, sidecars
        // added, overhead on top.
        let p = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "500m"}}},
            ],
            "initContainers": [
                {"resources": {"requests": {"cpu": "2"}}},
                {"resources": {"requests": {"memory": "3Gi"}}},
            ],
            "overhead": {"cpu": "100m"},
        }});
        let (r, nz) = pod_requests(&p);
        assert_eq!(r.milli_cpu, 2100);
        assert_eq!(r.memory, 3 << 30);
        // Scores default the second container's memory (and the second
        // init container's CPU).
        assert_eq!(nz.0, 2100);
        assert_eq!(nz.1, 3 << 30);
        let sidecar = json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "1500m"}}},
            ],
        }});
        // Sidecar runs beside the app (2) and beside the later init (2.5).
        assert_eq!(pod_requests(&sidecar).0.milli_cpu, 2500);
        // Limits stand in for missing requests.
        let limits = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "300m"}}}]}});
        assert_eq!(pod_requests(&limits).0.milli_cpu, 300);
    }

    /// The two halves with outside plugins between them: a refused node
    /// is gone and named in the error, outside scores decide among equals,
    /// a refused pod fails with that plugin's message.
    #[test]
    fn outside_plugins_narrow_and_score_between_the_halves() {
        let c = cluster(&[
            node("a", "4", "8Gi"),
            node("b", "4", "8Gi"),
            node("c", "4", "8Gi"),
        ]);
        let mut f = Framework::default_profile().with_seed(7);
        let p = PodInfo::new(&pod("p", "100m", "64Mi"));
        let mut filtered = f.filter(&p, &c, true).unwrap();
        assert_eq!(filtered.feasible.len(), 3);
        filtered.refuse(
            "wasm",
            "b",
            Status::new(
                Code::UnschedulableAndUnresolvable,
                "node has label avoid=true",
            ),
        );
        assert_eq!(filtered.feasible.len(), 2);
        assert!(!filtered.feasible.contains(&"b".to_string()));
        for _ in 0..20 {
            let mut again = f.filter(&p, &c, true).unwrap();
            again.refuse("wasm", "b", Status::new(Code::Unschedulable, "no"));
            let extra = ExtraScores {
                weight: 2,
                scores: [("a".to_string(), 10), ("c".to_string(), 90)].into(),
            };
            let r = f.score(&p, &c, again, &[extra]).unwrap();
            assert_eq!(r.node, "c");
            assert_eq!(r.feasible, 2);
        }
        // Every node refused: the fit error counts the outside reason.
        let mut all = f.filter(&p, &c, true).unwrap();
        for n in ["a", "b", "c"] {
            all.refuse(
                "wasm",
                n,
                Status::new(
                    Code::UnschedulableAndUnresolvable,
                    "node has label avoid=true",
                ),
            );
        }
        assert!(all.feasible.is_empty());
        let e = all.into_error(&p);
        assert_eq!(
            e.message(),
            "0/3 nodes are available: 3 node has label avoid=true. preemption: 0/3 nodes are \
             available: 3 Preemption is not helpful for scheduling.."
        );
        // A refused pod: the plugin's message is the error's.
        let mut refused = f.filter(&p, &c, true).unwrap();
        refused.refuse_pod("wasm", Status::new(Code::Unschedulable, "not today"));
        let ScheduleError::Fit(fit) = refused.into_error(&p) else {
            panic!("a fit error")
        };
        assert_eq!(fit.pre_filter_msg.as_deref(), Some("not today"));
        assert!(fit.unschedulable_plugins.contains("wasm"));
        assert_eq!(fit.statuses.len(), 3);
    }

    #[test]
    fn adaptive_percentage_of_nodes() {
        assert_eq!(num_feasible_nodes_to_find(0, 10), 10);
        assert_eq!(num_feasible_nodes_to_find(0, 99), 99);
        assert_eq!(num_feasible_nodes_to_find(0, 100), 100);
        // 1000 nodes: 50 - 8 = 42%.
        assert_eq!(num_feasible_nodes_to_find(0, 1000), 420);
        // 5000 nodes: 50 - 40 = 10%.
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500);
        // Never below 5%.
        assert_eq!(num_feasible_nodes_to_find(0, 10000), 500);
        assert_eq!(num_feasible_nodes_to_find(10, 200), 100);
        assert_eq!(num_feasible_nodes_to_find(100, 5000), 5000);
    }

    #[test]
    fn fit_error_message_is_upstreams() {
        let c = cluster(&[
            node("a", "1", "1Gi"),
            node("b", "1", "1Gi"),
            node("c", "1", "1Gi"),
        ]);
        let mut fw = Framework::default_profile();
        let p = PodInfo::new(&pod("big", "2", ""));
        let err = fw.schedule(&p, &c).unwrap_err();
        assert_eq!(
            err.message(),
            "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are \
             available: 3 No preemption victims found for incoming pod.."
        );
        // Mixed reasons are counted and sorted as strings; unresolvable
        // ones are not helped by preemption.
        let mut tainted = node("d", "4", "4Gi");
        tainted["spec"]["taints"] = json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]);
        let mut c = c;
        c.set_node(&tainted);
        let err = fw.schedule(&p, &c).unwrap_err();
        assert_eq!(
            err.message(),
            "0/4 nodes are available: 1 node(s) had untolerated taint {k: v}, 3 Insufficient \
             cpu. preemption: 0/4 nodes are available: 1 Preemption is not helpful for \
             scheduling, 3 No preemption victims found for incoming pod.."
        );
        assert_eq!(
            Framework::default_profile()
                .schedule(&p, &Cluster::default())
                .unwrap_err()
                .message(),
            "no nodes available to schedule pods"
        );
    }

    #[test]
    fn least_allocated_node_wins_and_ties_rotate() {
        let mut c = cluster(&[node("a", "4", "8Gi"), node("b", "4", "8Gi")]);
        let busy = Arc::new(PodInfo::new(&pod("busy", "3", "6Gi")));
        c.add_pod("a", busy);
        let mut fw = Framework::default_profile();
        let p = PodInfo::new(&pod("p", "500m", "512Mi"));
        assert_eq!(fw.schedule(&p, &c).unwrap().node, "b");
        // Two equal nodes: both get chosen over many cycles.
        let c = cluster(&[node("a", "4", "8Gi"), node("b", "4", "8Gi")]);
        let chosen: HashSet<String> = (0..20).map(|_| fw.schedule(&p, &c).unwrap().node).collect();
        assert_eq!(chosen.len(), 2);
    }

    #[test]
    fn cluster_counts_pods_on_nodes_added_later() {
        let mut c = Cluster::default();
        c.add_pod("late", Arc::new(PodInfo::new(&pod("p", "1", "1Gi"))));
        c.set_node(&node("late", "4", "8Gi"));
        assert_eq!(c.node("late").unwrap().requested.milli_cpu, 1000);
        assert_eq!(c.remove_pod("uid-p").as_deref(), Some("late"));
        assert_eq!(c.node("late").unwrap().requested.milli_cpu, 0);
        c.add_pod("late", Arc::new(PodInfo::new(&pod("q", "1", "1Gi"))));
        c.remove_node("late");
        c.set_node(&node("late", "4", "8Gi"));
        assert_eq!(c.node("late").unwrap().pods.len(), 1);
    }
}
