//! ResourceQuota's decisions, as upstream's quota packages make them
//! (`k8s.io/apiserver/pkg/quota/v1`, `pkg/quota/v1/evaluator/core`, the
//! admission plugin's `CheckRequest` and the controller's
//! `syncResourceQuota`): what an object uses (its *evaluator*: pods,
//! services, persistent volume claims, object counts), which quotas match
//! it (resources and scopes), whether a request fits (`used + delta <=
//! hard`, with upstream's messages) and a quota's status from the usage
//! counted. No IO: the admission plugin and the controller feed it
//! objects, and `now` for the pods whose deletion grace has run out.
//!
//! Quantities are [`crate::cel::parse_quantity`]'s exact nano-units with
//! the format they were written in, printed as upstream's
//! `Quantity.String()` prints them (`1536Mi`, `500m`, `1e3`).

use crate::selector::{LabelSelector, Requirement};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

// ---- quantities -------------------------------------------------------

const NANO: i128 = 1_000_000_000;

/// How a quantity prints (upstream's `resource.Format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `1k`, `500m`.
    DecimalSI,
    /// `1Gi`.
    BinarySI,
    /// `1e3`.
    DecimalExponent,
}

/// A resource quantity: an exact count of nano-units and its format.
/// Compares by value only.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Quantity {
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// Parses a quantity (upstream's `ParseQuantity`); its suffix decides
    /// its format.
    pub fn parse(s: &str) -> Result<Quantity, String> {
        let nanos = crate::cel::parse_quantity(s)?.nanos();
        let suffix = s.trim_start_matches(|c: char| c.is_ascii_digit() || "+-.".contains(c));
        let format = if suffix.ends_with('i') {
            Format::BinarySI
        } else if suffix.len() > 1 && suffix.starts_with(['e', 'E']) {
            Format::DecimalExponent
        } else {
            Format::DecimalSI
        };
        Ok(Quantity { nanos, format })
    }

    /// A quantity as JSON holds it: a string, or a number.
    pub fn from_value(v: &Value) -> Option<Quantity> {
        match v {
            Value::String(s) => Quantity::parse(s).ok(),
            Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
            _ => None,
        }
    }

    /// `n` units (a count).
    pub fn count(n: i64) -> Quantity {
        Quantity {
            nanos: i128::from(n) * NANO,
            format: Format::DecimalSI,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// `self + o` in `self`'s format (`o`'s when `self` is zero), as
    /// upstream's `Quantity.Add`.
    pub fn plus(self, o: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(o.nanos),
            format: if self.nanos == 0 {
                o.format
            } else {
                self.format
            },
        }
    }

    /// `self - o`, formatted as [`Quantity::plus`].
    pub fn minus(self, o: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(o.nanos),
            format: if self.nanos == 0 {
                o.format
            } else {
                self.format
            },
        }
    }

    /// Rounded up to a whole unit (`RoundUp(0)`).
    fn round_up(self) -> Quantity {
        let rem = self.nanos.rem_euclid(NANO);
        Quantity {
            nanos: if rem == 0 {
                self.nanos
            } else {
                self.nanos - rem + NANO
            },
            format: self.format,
        }
    }
}

impl fmt::Display for Quantity {
    /// Upstream's canonical form (`CanonicalizeBytes`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let nano = NANO as u128;
        let binary =
            self.format == Format::BinarySI && abs >= 1024 * nano && abs.is_multiple_of(nano);
        if binary {
            let (mut v, mut exp) = (abs / nano, 0usize);
            while exp < 6 && v % 1024 == 0 {
                v /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            return write!(f, "{sign}{v}{suffix}");
        }
        let (mut mantissa, mut exp) = (abs, -9i32);
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exp += 1;
        }
        let r = exp.rem_euclid(3);
        mantissa *= 10u128.pow(r as u32);
        exp -= r;
        let suffix = match (self.format, exp) {
            (_, 0) => String::new(),
            (Format::DecimalExponent, e) => format!("e{e}"),
            (_, -9) => "n".into(),
            (_, -6) => "u".into(),
            (_, -3) => "m".into(),
            (_, 3) => "k".into(),
            (_, 6) => "M".into(),
            (_, 9) => "G".into(),
            (_, 12) => "T".into(),
            (_, 15) => "P".into(),
            (_, 18) => "E".into(),
            (_, e) => format!("e{e}"),
        };
        write!(f, "{sign}{mantissa}{suffix}")
    }
}

/// Resource name → quantity (`corev1.ResourceList`).
pub type ResourceList = BTreeMap<String, Quantity>;

/// A resource list from JSON (`{"cpu": "500m"}`); entries that are not
/// quantities are left out.
pub fn list_from(v: &Value) -> ResourceList {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), Quantity::from_value(q)?)))
        .collect()
}

/// A resource list as JSON, each quantity in its canonical form.
pub fn list_to_json(l: &ResourceList) -> Value {
    Value::Object(
        l.iter()
            .map(|(k, q)| (k.clone(), json!(q.to_string())))
            .collect::<Map<_, _>>(),
    )
}

/// `a + b` key by key (`quota.Add`).
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        let sum = out.get(k).map_or(*q, |have| have.plus(*q));
        out.insert(k.clone(), sum);
    }
    out
}

/// `a - b` key by key, never below zero; keys only in `b` are zero
/// (`quota.SubtractWithNonNegativeResult`).
pub fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, q) in a {
        let d = b.get(k).map_or(*q, |o| q.minus(*o));
        out.insert(k.clone(), if d.nanos > 0 { d } else { Quantity::ZERO });
    }
    for k in b.keys() {
        out.entry(k.clone()).or_insert(Quantity::ZERO);
    }
    out
}

/// The entries of `l` named in `names` (`quota.Mask`).
pub fn mask<'a>(l: &ResourceList, names: impl IntoIterator<Item = &'a String>) -> ResourceList {
    let names: BTreeSet<&String> = names.into_iter().collect();
    l.iter()
        .filter(|(k, _)| names.contains(k))
        .map(|(k, q)| (k.clone(), *q))
        .collect()
}

/// Whether every entry of `a` that `b` also has is at most `b`'s, and the
/// names of those that are not (`quota.LessThanOrEqual`).
pub fn less_than_or_equal(a: &ResourceList, b: &ResourceList) -> (bool, Vec<String>) {
    let exceeded: Vec<String> = b
        .iter()
        .filter(|(k, limit)| a.get(*k).is_some_and(|v| v > *limit))
        .map(|(k, _)| k.clone())
        .collect();
    (exceeded.is_empty(), exceeded)
}

/// The same names with equal quantities (`quota.Equals`).
pub fn equals(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, q)| b.get(k) == Some(q))
}

/// Without the zero entries (`quota.RemoveZeros`).
pub fn remove_zeros(l: &ResourceList) -> ResourceList {
    l.iter()
        .filter(|(_, q)| !q.is_zero())
        .map(|(k, q)| (k.clone(), *q))
        .collect()
}

/// `name=quantity` pairs by name, comma-separated (the admission
/// plugin's `prettyPrint`).
pub fn pretty_print(l: &ResourceList) -> String {
    l.iter()
        .map(|(k, q)| format!("{k}={q}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn sorted_names(names: &[String]) -> String {
    let mut n = names.to_vec();
    n.sort();
    n.dedup();
    n.join(",")
}

// ---- quotas -----------------------------------------------------------

/// One `scopeSelector.matchExpressions` entry (a `spec.scopes` entry is
/// one with operator `Exists`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeRequirement {
    pub scope: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// A quota as admission and the controller read it.
#[derive(Clone, Debug)]
pub struct Quota {
    pub name: String,
    /// `status.hard`: what admission enforces (the controller copies
    /// `spec.hard` there).
    pub hard: ResourceList,
    /// `status.used`.
    pub used: ResourceList,
    pub scopes: Vec<ScopeRequirement>,
}

impl Quota {
    pub fn from_object(obj: &Value) -> Quota {
        Quota {
            name: obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            hard: list_from(&obj["status"]["hard"]),
            used: list_from(&obj["status"]["used"]),
            scopes: scopes(obj),
        }
    }
}

/// A quota's scopes: `spec.scopes` (each `Exists`), then
/// `spec.scopeSelector.matchExpressions`.
pub fn scopes(quota: &Value) -> Vec<ScopeRequirement> {
    let mut out: Vec<ScopeRequirement> = quota["spec"]["scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| ScopeRequirement {
            scope: s.to_string(),
            operator: "Exists".into(),
            values: Vec::new(),
        })
        .collect();
    for e in quota["spec"]["scopeSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push(ScopeRequirement {
            scope: e["scopeName"].as_str().unwrap_or_default().to_string(),
            operator: e["operator"].as_str().unwrap_or_default().to_string(),
            values: e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
        });
    }
    out
}

// ---- evaluators -------------------------------------------------------

/// What a request does, as far as quota cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

/// Resources quota never counts (upstream's `DefaultIgnoredResources`).
pub fn ignored(group: &str, resource: &str) -> bool {
    matches!(
        (group, resource),
        ("", "bindings" | "componentstatuses" | "events")
            | (
                "authentication.k8s.io",
                "tokenreviews" | "selfsubjectreviews"
            )
            | (
                "authorization.k8s.io",
                "subjectaccessreviews"
                    | "selfsubjectaccessreviews"
                    | "localsubjectaccessreviews"
                    | "selfsubjectrulesreviews"
            )
            | ("events.k8s.io", "events")
    )
}

/// The object-count name of a resource: `count/<resource>[.<group>]`.
pub fn count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// The `(group, resource)` an object-count name counts.
pub fn count_target(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix("count/")?;
    let (resource, group) = rest.split_once('.').unwrap_or((rest, ""));
    (!resource.is_empty()).then(|| (group.to_string(), resource.to_string()))
}

const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

const SERVICE_RESOURCES: &[&str] = &[
    "count/services",
    "services",
    "services.nodeports",
    "services.loadbalancers",
];

const CLAIM_RESOURCES: &[&str] = &["persistentvolumeclaims", "requests.storage"];

const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// The resources a quota on cpu or memory makes every container state
/// (upstream's backward-compatible `validationSet`).
const MUST_SPECIFY: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// How a kind's usage is measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evaluator {
    Pods,
    Services,
    PersistentVolumeClaims,
    /// One of each object, under these names (`count/<resource>` and, for
    /// the legacy kinds, the bare plural).
    Count(Vec<String>),
}

/// The evaluator of a resource; `None` for one quota ignores.
pub fn evaluator(group: &str, resource: &str) -> Option<Evaluator> {
    if ignored(group, resource) {
        return None;
    }
    Some(match (group, resource) {
        ("", "pods") => Evaluator::Pods,
        ("", "services") => Evaluator::Services,
        ("", "persistentvolumeclaims") => Evaluator::PersistentVolumeClaims,
        ("", r @ ("configmaps" | "resourcequotas" | "replicationcontrollers" | "secrets")) => {
            Evaluator::Count(vec![count_name("", r), r.to_string()])
        }
        (g, r) => Evaluator::Count(vec![count_name(g, r)]),
    })
}

/// Kubernetes' own resource names (no domain, or one in `kubernetes.io`).
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// An extended resource a container may request (`example.com/gpu`).
fn is_extended(name: &str) -> bool {
    !is_native(name)
        && !name.starts_with("requests.")
        && crate::validation::label_key_error(&format!("requests.{name}")).is_none()
}

impl Evaluator {
    /// Whether admission measures this operation (upstream's `Handles`:
    /// creates, and updates of services and claims, whose usage can
    /// change).
    pub fn handles(&self, op: Operation) -> bool {
        match self {
            Evaluator::Pods | Evaluator::Count(_) => op == Operation::Create,
            Evaluator::Services | Evaluator::PersistentVolumeClaims => true,
        }
    }

    /// The names in `input` this evaluator measures.
    pub fn matching_resources<'a>(
        &self,
        input: impl IntoIterator<Item = &'a String>,
    ) -> Vec<String> {
        input
            .into_iter()
            .filter(|name| match self {
                Evaluator::Pods => {
                    POD_RESOURCES.contains(&name.as_str())
                        || name.starts_with("hugepages-")
                        || name.starts_with("requests.hugepages-")
                        || (!is_native(name) && name.starts_with("requests."))
                }
                Evaluator::Services => SERVICE_RESOURCES.contains(&name.as_str()),
                Evaluator::PersistentVolumeClaims => {
                    name.as_str() == "count/persistentvolumeclaims"
                        || CLAIM_RESOURCES.contains(&name.as_str())
                        || CLAIM_RESOURCES
                            .iter()
                            .any(|r| name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{r}")))
                }
                Evaluator::Count(names) => names.contains(*name),
            })
            .cloned()
            .collect()
    }

    /// Whether the object is in a scope (only pods have scopes).
    pub fn matches_scope(&self, scope: &ScopeRequirement, obj: &Value) -> bool {
        match self {
            Evaluator::Pods => pod_matches_scope(scope, obj),
            _ => false,
        }
    }

    /// Whether a quota counts the object: it limits something this
    /// evaluator measures, and the object is in all its scopes.
    pub fn matches(&self, quota: &Quota, obj: &Value) -> bool {
        !self.matching_resources(quota.hard.keys()).is_empty()
            && quota.scopes.iter().all(|s| self.matches_scope(s, obj))
    }

    /// What the object uses.
    pub fn usage(&self, obj: &Value, now: DateTime<Utc>) -> ResourceList {
        match self {
            Evaluator::Pods => pod_usage(obj, now),
            Evaluator::Services => service_usage(obj),
            Evaluator::PersistentVolumeClaims => claim_usage(obj),
            Evaluator::Count(names) => names
                .iter()
                .map(|n| (n.clone(), Quantity::count(1)))
                .collect(),
        }
    }

    /// Whether the object states what the quota's `required` resources
    /// need (a pod's containers their cpu and memory); the message says
    /// what is missing.
    pub fn constraints(&self, required: &[String], obj: &Value) -> Result<(), String> {
        if *self != Evaluator::Pods {
            return Ok(());
        }
        let required: BTreeSet<&str> = required
            .iter()
            .map(String::as_str)
            .filter(|r| MUST_SPECIFY.contains(r))
            .collect();
        let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for c in containers(obj) {
            let usage = compute_usage(
                &list_from(&c["resources"]["requests"]),
                &list_from(&c["resources"]["limits"]),
            );
            for r in &required {
                if !usage.contains_key(*r) {
                    missing
                        .entry(*r)
                        .or_default()
                        .insert(c["name"].as_str().unwrap_or_default().to_string());
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = missing
            .iter()
            .map(|(r, names)| {
                format!(
                    "{r} for: {}",
                    names.iter().cloned().collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        Err(format!("must specify {}", parts.join("; ")))
    }
}

/// The evaluators that measure more than counts, and the legacy counted
/// kinds, by `(group, resource)` (upstream's `NewEvaluators`).
pub fn core_evaluators() -> Vec<(&'static str, &'static str, Evaluator)> {
    [
        "pods",
        "services",
        "persistentvolumeclaims",
        "configmaps",
        "resourcequotas",
        "replicationcontrollers",
        "secrets",
    ]
    .into_iter()
    .filter_map(|r| Some(("", r, evaluator("", r)?)))
    .collect()
}

// ---- pods -------------------------------------------------------------

fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["containers", "initContainers"]
        .into_iter()
        .flat_map(move |l| pod["spec"][l].as_array().into_iter().flatten())
}

/// What the pod's containers' requests and limits come to in quota's
/// names (`podComputeUsageHelper`).
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("pods".into(), Quantity::count(1));
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            out.insert(r.into(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if let Some(q) = limits.get(r) {
            out.insert(format!("limits.{r}"), *q);
        }
    }
    for (name, q) in requests {
        if name.starts_with("hugepages-") {
            out.insert(name.clone(), *q);
            out.insert(format!("requests.{name}"), *q);
        }
        if is_extended(name) {
            out.insert(format!("requests.{name}"), *q);
        }
    }
    out
}

/// Adds `new` into `list` (`addResourceList`).
fn add_into(list: &mut ResourceList, new: &ResourceList) {
    for (k, q) in new {
        let sum = list.get(k).map_or(*q, |have| have.plus(*q));
        list.insert(k.clone(), sum);
    }
}

/// Each entry the larger of the two (`maxResourceList`).
fn max_into(list: &mut ResourceList, new: &ResourceList) {
    for (k, q) in new {
        if list.get(k).is_none_or(|have| q > have) {
            list.insert(k.clone(), *q);
        }
    }
}

/// A pod's requests or limits (`field`) as upstream's `PodRequests` and
/// `PodLimits` sum them: the containers, restartable (sidecar) init
/// containers added to them, the largest of that and each init container
/// with the sidecars started before it; `spec.overhead` added (to limits
/// only where a limit is set).
fn pod_resources(pod: &Value, field: &str) -> ResourceList {
    let of = |c: &Value| list_from(&c["resources"][field]);
    let mut total = ResourceList::new();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        add_into(&mut total, &of(c));
    }
    let mut sidecars = ResourceList::new();
    let mut init = ResourceList::new();
    for c in pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut r = of(c);
        if c["restartPolicy"] == "Always" {
            add_into(&mut total, &r);
            add_into(&mut sidecars, &r);
            r = sidecars.clone();
        } else {
            add_into(&mut r, &sidecars);
        }
        max_into(&mut init, &r);
    }
    max_into(&mut total, &init);
    let overhead = list_from(&pod["spec"]["overhead"]);
    if field == "requests" {
        add_into(&mut total, &overhead);
    } else {
        for (k, q) in overhead {
            if let Some(have) = total.get_mut(&k) {
                *have = have.plus(q);
            }
        }
    }
    total
}

/// Whether a pod still counts for quota (`QuotaV1Pod`): not finished
/// (`Succeeded`, `Failed`), and not deleted past its grace period.
pub fn pod_counts(pod: &Value, now: DateTime<Utc>) -> bool {
    if matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    pod_grace_end(pod).is_none_or(|end| now <= end)
}

/// When a deleted pod's grace period runs out (it stops counting then).
pub fn pod_grace_end(pod: &Value) -> Option<DateTime<Utc>> {
    let at = pod["metadata"]["deletionTimestamp"].as_str()?;
    let grace = pod["metadata"]["deletionGracePeriodSeconds"].as_i64()?;
    let at = DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc);
    Some(at + chrono::Duration::seconds(grace))
}

fn pod_usage(pod: &Value, now: DateTime<Utc>) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("count/pods".into(), Quantity::count(1));
    if !pod_counts(pod, now) {
        return out;
    }
    add(
        &out,
        &compute_usage(
            &pod_resources(pod, "requests"),
            &pod_resources(pod, "limits"),
        ),
    )
}

/// A pod's QoS class (`GetPodQOS`: `status.qosClass`, else computed from
/// the containers' cpu and memory as `ComputePodQOS` does).
pub fn pod_qos(pod: &Value) -> String {
    if let Some(q) = pod["status"]["qosClass"].as_str().filter(|q| !q.is_empty()) {
        return q.to_string();
    }
    compute_qos(pod).to_string()
}

/// `ComputePodQOS`: `BestEffort` without any positive cpu or memory
/// request or limit; `Guaranteed` when every container limits both and
/// requests equal limits; `Burstable` otherwise.
pub fn compute_qos(pod: &Value) -> &'static str {
    let mut requests = ResourceList::new();
    let mut limits = ResourceList::new();
    let mut guaranteed = true;
    let positive = |l: &ResourceList| -> ResourceList {
        l.iter()
            .filter(|(k, q)| matches!(k.as_str(), "cpu" | "memory") && q.nanos > 0)
            .map(|(k, q)| (k.clone(), *q))
            .collect()
    };
    for c in containers(pod) {
        add_into(
            &mut requests,
            &positive(&list_from(&c["resources"]["requests"])),
        );
        let l = positive(&list_from(&c["resources"]["limits"]));
        if !(l.contains_key("cpu") && l.contains_key("memory")) {
            guaranteed = false;
        }
        add_into(&mut limits, &l);
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed
        && requests.iter().all(|(k, q)| limits.get(k) == Some(q))
        && requests.len() == limits.len()
    {
        return "Guaranteed";
    }
    "Burstable"
}

fn cross_namespace_terms(terms: &Value, weighted: bool) -> bool {
    terms.as_array().into_iter().flatten().any(|t| {
        let t = if weighted { &t["podAffinityTerm"] } else { t };
        t["namespaces"].as_array().is_some_and(|n| !n.is_empty())
            || t["namespaceSelector"].is_object()
    })
}

fn uses_cross_namespace_affinity(pod: &Value) -> bool {
    let a = &pod["spec"]["affinity"];
    ["podAffinity", "podAntiAffinity"].into_iter().any(|k| {
        cross_namespace_terms(
            &a[k]["requiredDuringSchedulingIgnoredDuringExecution"],
            false,
        ) || cross_namespace_terms(
            &a[k]["preferredDuringSchedulingIgnoredDuringExecution"],
            true,
        )
    })
}

/// Whether a pod is in a quota scope (`podMatchesScopeFunc`).
pub fn pod_matches_scope(scope: &ScopeRequirement, pod: &Value) -> bool {
    let terminating = pod["spec"]["activeDeadlineSeconds"]
        .as_i64()
        .is_some_and(|s| s >= 0);
    let best_effort = pod_qos(pod) == "BestEffort";
    match scope.scope.as_str() {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort,
        "NotBestEffort" => !best_effort,
        "PriorityClass" => {
            let class = pod["spec"]["priorityClassName"]
                .as_str()
                .unwrap_or_default();
            if scope.operator == "Exists" {
                return !class.is_empty();
            }
            let mut labels = BTreeMap::new();
            if !class.is_empty() {
                labels.insert("PriorityClass".to_string(), class.to_string());
            }
            let key = "PriorityClass".to_string();
            let req = match scope.operator.as_str() {
                "In" => Requirement::In(key, scope.values.clone()),
                "NotIn" => Requirement::NotIn(key, scope.values.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                _ => return false,
            };
            LabelSelector(vec![req]).matches(&labels)
        }
        "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
        _ => false,
    }
}

// ---- services and claims ----------------------------------------------

/// The service type quota tells apart (`GetQuotaServiceType`).
pub fn service_quota_type(svc: &Value) -> &str {
    let t = svc["spec"]["type"].as_str().unwrap_or_default();
    if matches!(t, "NodePort" | "LoadBalancer") {
        t
    } else {
        ""
    }
}

fn service_usage(svc: &Value) -> ResourceList {
    let ports = svc["spec"]["ports"].as_array().map_or(0, Vec::len) as i64;
    let mut out = ResourceList::new();
    out.insert("count/services".into(), Quantity::count(1));
    out.insert("services".into(), Quantity::count(1));
    out.insert("services.loadbalancers".into(), Quantity::ZERO);
    out.insert("services.nodeports".into(), Quantity::ZERO);
    match service_quota_type(svc) {
        "NodePort" => {
            out.insert("services.nodeports".into(), Quantity::count(ports));
        }
        "LoadBalancer" => {
            let node_ports = if svc["spec"]["allocateLoadBalancerNodePorts"] == false {
                svc["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["nodePort"].as_i64().is_some_and(|n| n != 0))
                    .count() as i64
            } else {
                ports
            };
            out.insert("services.nodeports".into(), Quantity::count(node_ports));
            out.insert("services.loadbalancers".into(), Quantity::count(1));
        }
        _ => {}
    }
    out
}

/// A claim's storage class: the beta annotation, else
/// `spec.storageClassName` (`GetPersistentVolumeClaimClass`).
fn claim_class(pvc: &Value) -> &str {
    pvc["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
        .as_str()
        .or_else(|| pvc["spec"]["storageClassName"].as_str())
        .unwrap_or_default()
}

/// The storage a claim is charged: its request in whole bytes, or what
/// was allocated when that is more.
fn claim_storage(pvc: &Value) -> Option<Quantity> {
    let requested =
        Quantity::from_value(&pvc["spec"]["resources"]["requests"]["storage"])?.round_up();
    match Quantity::from_value(&pvc["status"]["allocatedResources"]["storage"]) {
        Some(a) if a > requested => Some(a.round_up()),
        _ => Some(requested),
    }
}

/// A claim's allocated storage (a change of it is a reason to recount).
pub fn claim_allocated(pvc: &Value) -> Option<Quantity> {
    Quantity::from_value(&pvc["status"]["allocatedResources"]["storage"])
}

fn claim_usage(pvc: &Value) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("persistentvolumeclaims".into(), Quantity::count(1));
    out.insert("count/persistentvolumeclaims".into(), Quantity::count(1));
    let class = claim_class(pvc);
    if !class.is_empty() {
        out.insert(
            format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
            Quantity::count(1),
        );
    }
    if let Some(storage) = claim_storage(pvc) {
        out.insert("requests.storage".into(), storage);
        if !class.is_empty() {
            out.insert(
                format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                storage,
            );
        }
    }
    out
}

// ---- admission ---------------------------------------------------------

/// Whether a quota has a usage for every resource of `names` it limits
/// (`hasUsageStats`).
fn has_usage_stats(quota: &Quota, names: &[String]) -> bool {
    quota
        .hard
        .keys()
        .filter(|k| names.contains(k))
        .all(|k| quota.used.contains_key(k))
}

/// A request's object checked against the namespace's quotas (the
/// admission plugin's `CheckRequest`): for each quota, its new
/// `status.used` when the request changes it, or why the request is
/// refused (the message of upstream's `Forbidden`).
pub fn check_request(
    quotas: &[Quota],
    evaluator: &Evaluator,
    op: Operation,
    obj: &Value,
    old: Option<&Value>,
    now: DateTime<Utc>,
) -> Result<Vec<Option<ResourceList>>, String> {
    let mut out = vec![None; quotas.len()];
    if !evaluator.handles(op) {
        return Ok(out);
    }
    let mut interesting = Vec::new();
    for (i, q) in quotas.iter().enumerate() {
        if !evaluator.matches(q, obj) {
            continue;
        }
        let restricted = evaluator.matching_resources(q.hard.keys());
        evaluator
            .constraints(&restricted, obj)
            .map_err(|e| format!("failed quota: {}: {e}", q.name))?;
        if !has_usage_stats(q, &restricted) {
            return Err(format!(
                "status unknown for quota: {}, resources: {}",
                q.name,
                sorted_names(&restricted)
            ));
        }
        interesting.push(i);
    }
    let usage = evaluator.usage(obj, now);
    let negative: Vec<String> = usage
        .iter()
        .filter(|(_, q)| q.nanos < 0)
        .map(|(k, _)| k.clone())
        .collect();
    if !negative.is_empty() {
        return Err(format!(
            "quota usage is negative for resource(s): {}",
            sorted_names(&negative)
        ));
    }
    let mut deltas: BTreeMap<usize, ResourceList> =
        interesting.iter().map(|i| (*i, usage.clone())).collect();
    if op == Operation::Update {
        let old = old.ok_or_else(|| {
            "unable to get previous usage since prior version of object was not found".to_string()
        })?;
        // Not a create-on-update: charge what changed.
        if old["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty())
        {
            let delta = subtract_non_negative(&usage, &evaluator.usage(old, now));
            for i in &interesting {
                if evaluator.matches(&quotas[*i], old) {
                    deltas.insert(*i, delta.clone());
                }
            }
        }
    }
    for (i, q) in quotas.iter().enumerate() {
        let Some(delta) = deltas.get(&i).map(remove_zeros).filter(|d| !d.is_empty()) else {
            continue;
        };
        let requested = mask(&delta, q.hard.keys());
        let new_used = add(&q.used, &requested);
        let (fits, exceeded) = less_than_or_equal(&mask(&new_used, requested.keys()), &q.hard);
        if !fits {
            return Err(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                q.name,
                pretty_print(&mask(&requested, &exceeded)),
                pretty_print(&mask(&q.used, &exceeded)),
                pretty_print(&mask(&q.hard, &exceeded)),
            ));
        }
        if !equals(&new_used, &q.used) {
            out[i] = Some(new_used);
        }
    }
    Ok(out)
}

// ---- the controller -----------------------------------------------------

/// What the objects a quota counts use (`CalculateUsageStats`): every
/// resource of `resources` starts at zero, and each object in all the
/// quota's scopes adds its usage.
pub fn usage_stats(
    evaluator: &Evaluator,
    objects: &[Value],
    scopes: &[ScopeRequirement],
    resources: &[String],
    now: DateTime<Utc>,
) -> ResourceList {
    let mut used: ResourceList = resources
        .iter()
        .map(|r| (r.clone(), Quantity::ZERO))
        .collect();
    for obj in objects {
        if scopes.iter().all(|s| evaluator.matches_scope(s, obj)) {
            used = add(&used, &evaluator.usage(obj, now));
        }
    }
    used
}

/// What the controller counts for a quota limiting `hard`: each
/// `(group, resource)` to list, its evaluator and the resources of `hard`
/// it measures. The core evaluators come first; any other kind is counted
/// when `hard` names its `count/<resource>.<group>`.
pub fn usage_plan(hard: &ResourceList) -> Vec<(String, String, Evaluator, Vec<String>)> {
    let mut plan: Vec<(String, String, Evaluator, Vec<String>)> = Vec::new();
    for (g, r, ev) in core_evaluators() {
        let names = ev.matching_resources(hard.keys());
        if !names.is_empty() {
            plan.push((g.to_string(), r.to_string(), ev, names));
        }
    }
    for name in hard.keys() {
        let Some((group, resource)) = count_target(name) else {
            continue;
        };
        if plan
            .iter()
            .any(|(g, r, _, _)| *g == group && *r == resource)
        {
            continue;
        }
        let Some(ev) = evaluator(&group, &resource) else {
            continue;
        };
        plan.push((group, resource, ev, vec![name.clone()]));
    }
    plan
}

/// A quota's status from the usage counted (`syncResourceQuota`):
/// `hard` is `spec.hard`, `used` the previous usage with the new counts
/// over it, limited to what `hard` names. `None` when the status already
/// says so.
pub fn quota_status(quota: &Value, counted: &ResourceList) -> Option<Value> {
    let spec_hard = list_from(&quota["spec"]["hard"]);
    let status = &quota["status"];
    let old_used = list_from(&status["used"]);
    let mut dirty = !equals(&spec_hard, &list_from(&status["hard"]))
        || !status["hard"].is_object()
        || !status["used"].is_object();
    let mut used = old_used.clone();
    for (k, q) in counted {
        used.insert(k.clone(), *q);
    }
    let used = mask(&used, spec_hard.keys());
    dirty = dirty || !equals(&used, &old_used);
    if !dirty {
        return None;
    }
    let mut out = Map::new();
    if !spec_hard.is_empty() {
        out.insert("hard".into(), list_to_json(&spec_hard));
    }
    if !used.is_empty() {
        out.insert("used".into(), list_to_json(&used));
    }
    let out = Value::Object(out);
    (out != *status).then_some(out)
}

/// Whether a quota limits anything `evaluator` measures (a change of such
/// an object is a reason to recount it).
pub fn tracks(quota: &Value, evaluator: &Evaluator) -> bool {
    !evaluator
        .matching_resources(list_from(&quota["status"]["hard"]).keys())
        .is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn list(v: Value) -> ResourceList {
        list_from(&v)
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn quantities_print_as_upstream() {
        for (input, out) in [
            ("1.5Gi", "1536Mi"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("1024", "1024"),
            ("2048Mi", "2Gi"),
            ("1500", "1500"),
            ("1k", "1k"),
            ("1e3", "1e3"),
            ("12e2", "1200"),
            ("100m", "100m"),
            ("0", "0"),
            ("512", "512"),
            ("0.5Gi", "512Mi"),
            ("-2", "-2"),
            ("1E", "1E"),
        ] {
            assert_eq!(q(input).to_string(), out, "{input}");
        }
        assert_eq!(q("100Mi").plus(q("100Mi")).to_string(), "200Mi");
        assert_eq!(q("500m").plus(q("500m")).to_string(), "1");
        assert_eq!(Quantity::ZERO.plus(q("1Gi")).to_string(), "1Gi");
        assert_eq!(q("1Gi"), q("1024Mi"));
    }

    fn pod(containers: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    #[test]
    fn pods_use_requests_limits_init_containers_and_overhead() {
        let mut p = pod(json!([
            {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi", "example.com/gpu": "1"}, "limits": {"cpu": "200m"}}},
            {"name": "b", "resources": {"requests": {"cpu": "300m"}}},
        ]));
        p["spec"]["initContainers"] = json!([
            {"name": "big", "resources": {"requests": {"cpu": "1"}}},
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
            {"name": "after", "resources": {"requests": {"cpu": "500m"}}},
        ]);
        p["spec"]["overhead"] = json!({"cpu": "10m", "memory": "1Mi"});
        let u = Evaluator::Pods.usage(&p, now());
        // containers 400m + sidecar 50m = 450m; init max(1, 500m + 50m) = 1;
        // plus 10m overhead.
        assert_eq!(u["requests.cpu"].to_string(), "1010m");
        assert_eq!(u["cpu"].to_string(), "1010m");
        assert_eq!(u["requests.memory"].to_string(), "65Mi");
        // Overhead only adds to a limit that is set.
        assert_eq!(u["limits.cpu"].to_string(), "210m");
        assert!(!u.contains_key("limits.memory"));
        assert_eq!(u["requests.example.com/gpu"].to_string(), "1");
        assert_eq!(u["pods"].to_string(), "1");
        assert_eq!(u["count/pods"].to_string(), "1");
    }

    #[test]
    fn finished_and_expired_pods_count_only_as_objects() {
        let mut p = pod(json!([{"name": "a", "resources": {"requests": {"cpu": "1"}}}]));
        p["status"]["phase"] = json!("Succeeded");
        let u = Evaluator::Pods.usage(&p, now());
        assert_eq!(u.keys().collect::<Vec<_>>(), ["count/pods"]);
        p["status"]["phase"] = json!("Running");
        p["metadata"]["deletionTimestamp"] = json!("2025-12-31T23:59:00Z");
        p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        assert!(!pod_counts(&p, now()), "grace ran out 30 s ago");
        p["metadata"]["deletionGracePeriodSeconds"] = json!(120);
        assert!(pod_counts(&p, now()), "still within its grace");
    }

    fn quota(name: &str, hard: Value, used: Value) -> Quota {
        Quota {
            name: name.into(),
            hard: list(hard),
            used: list(used),
            scopes: Vec::new(),
        }
    }

    #[test]
    fn exceeding_a_quota_is_refused_with_upstreams_message() {
        let p = pod(
            json!([{"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]),
        );
        let qs = [quota(
            "compute",
            json!({"limits.cpu": "2"}),
            json!({"limits.cpu": "1500m"}),
        )];
        let err =
            check_request(&qs, &Evaluator::Pods, Operation::Create, &p, None, now()).unwrap_err();
        assert_eq!(
            err,
            "exceeded quota: compute, requested: limits.cpu=1, used: limits.cpu=1500m, limited: limits.cpu=2"
        );
        let qs = [quota(
            "compute",
            json!({"limits.cpu": "2", "pods": "3"}),
            json!({"limits.cpu": "1", "pods": "1"}),
        )];
        let out = check_request(&qs, &Evaluator::Pods, Operation::Create, &p, None, now()).unwrap();
        let used = out[0].as_ref().unwrap();
        assert_eq!(pretty_print(used), "limits.cpu=2,pods=2");
    }

    #[test]
    fn quotas_on_cpu_make_containers_state_it() {
        let mut p =
            pod(json!([{"name": "c"}, {"name": "d", "resources": {"requests": {"cpu": "1"}}}]));
        p["spec"]["initContainers"] = json!([{"name": "i"}]);
        let qs = [quota(
            "compute",
            json!({"requests.cpu": "2", "limits.memory": "1Gi"}),
            json!({"requests.cpu": "0", "limits.memory": "0"}),
        )];
        let err =
            check_request(&qs, &Evaluator::Pods, Operation::Create, &p, None, now()).unwrap_err();
        assert_eq!(
            err,
            "failed quota: compute: must specify limits.memory for: c,d,i; requests.cpu for: c,i"
        );
    }

    #[test]
    fn a_quota_without_usage_is_status_unknown() {
        let p = pod(json!([{"name": "c"}]));
        let qs = [quota(
            "q",
            json!({"pods": "2", "count/pods": "3"}),
            json!({"pods": "0"}),
        )];
        let err =
            check_request(&qs, &Evaluator::Pods, Operation::Create, &p, None, now()).unwrap_err();
        assert_eq!(
            err,
            "status unknown for quota: q, resources: count/pods,pods"
        );
        // A quota whose status is not computed at all limits nothing yet.
        let qs = [quota("q", json!({}), json!({}))];
        let out = check_request(&qs, &Evaluator::Pods, Operation::Create, &p, None, now()).unwrap();
        assert!(out[0].is_none());
    }

    #[test]
    fn scopes_choose_the_pods_a_quota_counts() {
        let best_effort = pod(json!([{"name": "c"}]));
        let burstable = pod(json!([{"name": "c", "resources": {"requests": {"cpu": "1"}}}]));
        let mut q = quota("be", json!({"pods": "1"}), json!({"pods": "1"}));
        q.scopes = scopes(&json!({"spec": {"scopes": ["BestEffort"]}}));
        let qs = [q];
        assert!(
            check_request(
                &qs,
                &Evaluator::Pods,
                Operation::Create,
                &best_effort,
                None,
                now()
            )
            .is_err()
        );
        let out = check_request(
            &qs,
            &Evaluator::Pods,
            Operation::Create,
            &burstable,
            None,
            now(),
        )
        .unwrap();
        assert!(out[0].is_none(), "not best effort: not counted");
        // A scope selector on the priority class.
        let mut q = quota("high", json!({"pods": "5"}), json!({"pods": "0"}));
        q.scopes = scopes(&json!({"spec": {"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}}));
        let mut high = burstable.clone();
        high["spec"]["priorityClassName"] = json!("high");
        assert!(Evaluator::Pods.matches(&q, &high));
        assert!(!Evaluator::Pods.matches(&q, &burstable));
        // Scopes never match other kinds.
        assert!(!Evaluator::Count(vec!["configmaps".into()]).matches(&q, &high));
        assert_eq!(compute_qos(&best_effort), "BestEffort");
        let guaranteed = pod(
            json!([{"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]),
        );
        assert_eq!(compute_qos(&guaranteed), "Guaranteed");
        assert_eq!(compute_qos(&burstable), "Burstable");
    }

    #[test]
    fn services_and_claims_charge_what_changes_on_update() {
        let svc = |ty: &str| json!({"metadata": {"resourceVersion": "5"}, "spec": {"type": ty, "ports": [{"port": 80}, {"port": 443}]}});
        let qs = [quota(
            "svc",
            json!({"services.nodeports": "2", "services": "10"}),
            json!({"services.nodeports": "1", "services": "1"}),
        )];
        let err = check_request(
            &qs,
            &Evaluator::Services,
            Operation::Update,
            &svc("NodePort"),
            Some(&svc("ClusterIP")),
            now(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "exceeded quota: svc, requested: services.nodeports=2, used: services.nodeports=1, limited: services.nodeports=2"
        );
        let out = check_request(
            &qs,
            &Evaluator::Services,
            Operation::Update,
            &svc("ClusterIP"),
            Some(&svc("ClusterIP")),
            now(),
        )
        .unwrap();
        assert!(out[0].is_none(), "nothing changes");
        let pvc = |size: &str| json!({"metadata": {"resourceVersion": "1"}, "spec": {"storageClassName": "gold", "resources": {"requests": {"storage": size}}}});
        let u = Evaluator::PersistentVolumeClaims.usage(&pvc("1.5Gi"), now());
        assert_eq!(
            u["gold.storageclass.storage.k8s.io/requests.storage"].to_string(),
            "1536Mi"
        );
        assert_eq!(
            u["gold.storageclass.storage.k8s.io/persistentvolumeclaims"].to_string(),
            "1"
        );
        let qs = [quota(
            "st",
            json!({"requests.storage": "10Gi"}),
            json!({"requests.storage": "4Gi"}),
        )];
        let out = check_request(
            &qs,
            &Evaluator::PersistentVolumeClaims,
            Operation::Update,
            &pvc("6Gi"),
            Some(&pvc("2Gi")),
            now(),
        )
        .unwrap();
        assert_eq!(
            pretty_print(out[0].as_ref().unwrap()),
            "requests.storage=8Gi"
        );
    }

    #[test]
    fn object_counts_by_name_and_legacy_alias() {
        let ev = evaluator("", "configmaps").unwrap();
        let qs = [quota(
            "q",
            json!({"configmaps": "1"}),
            json!({"configmaps": "1"}),
        )];
        let err = check_request(&qs, &ev, Operation::Create, &json!({}), None, now()).unwrap_err();
        assert_eq!(
            err,
            "exceeded quota: q, requested: configmaps=1, used: configmaps=1, limited: configmaps=1"
        );
        let ev = evaluator("apps", "deployments").unwrap();
        assert_eq!(ev, Evaluator::Count(vec!["count/deployments.apps".into()]));
        assert!(!ev.handles(Operation::Update));
        assert_eq!(
            count_target("count/deployments.apps"),
            Some(("apps".into(), "deployments".into()))
        );
        assert_eq!(
            count_target("count/widgets.example.com"),
            Some(("example.com".into(), "widgets".into()))
        );
        assert!(evaluator("", "events").is_none());
        let plan = usage_plan(&list(
            json!({"pods": "1", "count/deployments.apps": "2", "configmaps": "3"}),
        ));
        let kinds: Vec<_> = plan
            .iter()
            .map(|(g, r, _, n)| (g.as_str(), r.as_str(), n.clone()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("", "pods", vec!["pods".to_string()]),
                ("", "configmaps", vec!["configmaps".to_string()]),
                (
                    "apps",
                    "deployments",
                    vec!["count/deployments.apps".to_string()]
                ),
            ]
        );
    }

    #[test]
    fn the_controller_writes_status_only_when_it_changes() {
        let q = json!({"spec": {"hard": {"pods": "2", "requests.cpu": "1000m"}}});
        let counted = usage_stats(
            &Evaluator::Pods,
            &[pod(
                json!([{"name": "c", "resources": {"requests": {"cpu": "250m"}}}]),
            )],
            &[],
            &["pods".into(), "requests.cpu".into()],
            now(),
        );
        let status = quota_status(&q, &counted).unwrap();
        assert_eq!(
            status,
            json!({"hard": {"pods": "2", "requests.cpu": "1"}, "used": {"pods": "1", "requests.cpu": "250m"}})
        );
        let mut synced = q.clone();
        synced["status"] = status;
        assert_eq!(quota_status(&synced, &counted), None);
        let none = usage_stats(
            &Evaluator::Pods,
            &[],
            &[],
            &["pods".into(), "requests.cpu".into()],
            now(),
        );
        assert_eq!(
            quota_status(&synced, &none).unwrap()["used"],
            json!({"pods": "0", "requests.cpu": "0"})
        );
    }
}
