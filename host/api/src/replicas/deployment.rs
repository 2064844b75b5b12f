//! The Deployment controller's decisions (`pkg/controller/deployment` and
//! its `util/deployment_util.go`), over the Deployment and its
//! ReplicaSets as JSON:
//!
//! * **Which ReplicaSet is new**: the one whose pod template equals the
//!   Deployment's but for the `pod-template-hash` label ([`find_new`]);
//!   a new one is named `<deployment>-<hash>` ([`template_hash`], FNV-1a
//!   of the template and `status.collisionCount`, encoded as upstream's
//!   `SafeEncodeString`; stable, though not byte for byte upstream's hash,
//!   whose input is Go's memory dump of the struct).
//! * **Revisions**: `deployment.kubernetes.io/revision` on each
//!   ReplicaSet (the new one gets the highest old one plus one, a reused
//!   old one keeps its former numbers in `revision-history`) and on the
//!   Deployment; `desired-replicas` and `max-replicas` record the size the
//!   Deployment had when it last scaled the set ([`set_new_rs_annotations`]).
//! * **Rolling updates**: `maxSurge` rounded up and `maxUnavailable` down
//!   from percentages ([`fenceposts`]), how far the new set may grow
//!   ([`new_rs_new_replicas`]) and the old ones shrink
//!   ([`old_scale_downs`]), proportional scaling of every active set when
//!   the Deployment is resized mid-rollout ([`scale`]).
//! * **Status and conditions**: `Available` (`MinimumReplicasAvailable`),
//!   `Progressing` (`NewReplicaSetCreated`, `FoundNewReplicaSet`,
//!   `ReplicaSetUpdated`, `NewReplicaSetAvailable`,
//!   `ProgressDeadlineExceeded`, `DeploymentPaused`/`DeploymentResumed`)
//!   and `ReplicaFailure` copied from a set ([`rollout_status`]).

use super::timestamp;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use std::cmp::Ordering;

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The label that tells a Deployment's ReplicaSets (and their pods) apart.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Annotations of a Deployment not copied to its ReplicaSets.
const NOT_COPIED: [&str; 6] = [
    LAST_APPLIED,
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    ROLLBACK_TO,
];
/// Upstream's cap on `revision-history` (`maxRevHistoryLengthInChars`).
const MAX_REVISION_HISTORY_CHARS: usize = 2000;

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
pub const NEW_RS_REASON: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS_REASON: &str = "FoundNewReplicaSet";
pub const FAILED_RS_CREATE_REASON: &str = "ReplicaSetCreateError";
pub const RS_UPDATED_REASON: &str = "ReplicaSetUpdated";
pub const NEW_RS_AVAILABLE_REASON: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
pub const PAUSED_REASON: &str = "DeploymentPaused";
pub const RESUMED_REASON: &str = "DeploymentResumed";

/// An integer field, 0 when absent.
fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// `spec.replicas` (of a Deployment or a ReplicaSet).
pub fn replicas(obj: &Value) -> i64 {
    int(&obj["spec"]["replicas"])
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

fn int_annotation(obj: &Value, key: &str) -> Option<i64> {
    annotation(obj, key).and_then(|s| s.parse().ok())
}

/// A ReplicaSet's revision (0 when it has none).
pub fn revision(rs: &Value) -> i64 {
    int_annotation(rs, REVISION).unwrap_or(0)
}

/// The highest revision among `sets`.
pub fn max_revision<'a>(sets: impl IntoIterator<Item = &'a Value>) -> i64 {
    sets.into_iter().map(revision).max().unwrap_or(0)
}

fn fnv1a(bytes: &[u8], mut h: u32) -> u32 {
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(16_777_619);
    }
    h
}

/// Upstream's `rand.SafeEncodeString`: each byte to a character that
/// cannot spell words.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// The `pod-template-hash` of a template (upstream's `ComputeHash`):
/// FNV-1a over the template's JSON (keys sorted, so stable) and the
/// collision count, printed in decimal and safe-encoded.
pub fn template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut h = fnv1a(template.to_string().as_bytes(), 2_166_136_261);
    if let Some(c) = collision_count {
        h = fnv1a(&(c as u32).to_le_bytes(), h);
    }
    safe_encode(&h.to_string())
}

/// A template as compared: without the hash label and without the empty
/// or null metadata fields that a round trip may add or drop.
fn comparable(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(l) = m.get_mut("labels").and_then(Value::as_object_mut) {
            l.remove(POD_TEMPLATE_HASH);
        }
        m.retain(|_, v| !(v.is_null() || v.as_object().is_some_and(Map::is_empty)));
    }
    t
}

/// Whether two pod templates are equal but for `pod-template-hash`
/// (`EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &Value, b: &Value) -> bool {
    comparable(a) == comparable(b)
}

fn created(obj: &Value) -> Option<DateTime<Utc>> {
    super::time(&obj["metadata"]["creationTimestamp"])
}

fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

/// Oldest first, ties by name (`ReplicaSetsByCreationTimestamp`).
pub fn by_creation(a: &Value, b: &Value) -> Ordering {
    created(a)
        .cmp(&created(b))
        .then_with(|| name(a).cmp(name(b)))
}

/// The ReplicaSet whose template is the Deployment's, the oldest when
/// several are (`FindNewReplicaSet`). Index into `sets`.
pub fn find_new(d: &Value, sets: &[Value]) -> Option<usize> {
    let mut order: Vec<usize> = (0..sets.len()).collect();
    order.sort_by(|&i, &j| by_creation(&sets[i], &sets[j]));
    order
        .into_iter()
        .find(|&i| equal_ignore_hash(&sets[i]["spec"]["template"], &d["spec"]["template"]))
}

/// `intstr` resolution (`GetScaledValueFromIntOrPercent`): an integer as
/// is, a percentage of `total`, rounded up or down.
pub fn scaled_value(v: &Value, total: i64, round_up: bool) -> Result<i64, String> {
    match v {
        Value::Null => Ok(0),
        Value::Number(n) => n.as_i64().ok_or_else(|| format!("invalid value {n}")),
        Value::String(s) => {
            let p: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let scaled = p * total;
            Ok(if round_up {
                (scaled + 99).div_euclid(100)
            } else {
                scaled.div_euclid(100)
            })
        }
        other => Err(format!("invalid type: {other}")),
    }
}

fn is_rolling(d: &Value) -> bool {
    d["spec"]["strategy"]["type"]
        .as_str()
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

/// `(maxSurge, maxUnavailable)` for `desired` replicas
/// (`ResolveFenceposts`): surge rounds up, unavailability down, and both
/// zero would stall a rollout, so unavailability becomes 1.
pub fn fenceposts(d: &Value, desired: i64) -> (i64, i64) {
    let r = &d["spec"]["strategy"]["rollingUpdate"];
    let surge = scaled_value(&r["maxSurge"], desired, true).unwrap_or(0);
    let unavailable = scaled_value(&r["maxUnavailable"], desired, false).unwrap_or(0);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// How many pods above `spec.replicas` a rolling update may run.
pub fn max_surge(d: &Value) -> i64 {
    if !is_rolling(d) {
        return 0;
    }
    fenceposts(d, replicas(d)).0
}

/// How many of `spec.replicas` may be unavailable during a rolling update.
pub fn max_unavailable(d: &Value) -> i64 {
    if !is_rolling(d) || replicas(d) == 0 {
        return 0;
    }
    fenceposts(d, replicas(d)).1.min(replicas(d))
}

fn sum(sets: &[&Value], f: impl Fn(&Value) -> i64) -> i64 {
    sets.iter().map(|s| f(s)).sum()
}

fn status_int(rs: &Value, field: &str) -> i64 {
    int(&rs["status"][field])
}

/// The size the new set should have now (`NewRSNewReplicas`): Recreate
/// jumps to the full size; a rolling update grows it while every set
/// together stays within `replicas + maxSurge`.
pub fn new_rs_new_replicas(d: &Value, all: &[&Value], new_rs: &Value) -> i64 {
    if !is_rolling(d) {
        return replicas(d);
    }
    let current = replicas(new_rs);
    let total = sum(all, replicas);
    let max_total = replicas(d) + max_surge(d);
    if total >= max_total {
        return current;
    }
    let up = (max_total - total).min(replicas(d) - current);
    current + up.max(0)
}

/// How old sets shrink in one rolling step (upstream's
/// `reconcileOldReplicaSets`): first the unhealthy pods of old sets
/// (oldest set first), as far as `maxUnavailable` allows counting the new
/// set's not-yet-available pods, then available ones down to
/// `replicas - maxUnavailable` available pods. `(name, new size)`, in
/// order.
pub fn old_scale_downs(d: &Value, old: &[&Value], new_rs: Option<&Value>) -> Vec<(String, i64)> {
    let mut old: Vec<(&Value, i64)> = old.iter().map(|rs| (*rs, replicas(rs))).collect();
    let old_pods: i64 = old.iter().map(|(_, r)| r).sum();
    if old_pods == 0 {
        return Vec::new();
    }
    let new_replicas = new_rs.map(replicas).unwrap_or(0);
    let new_available = new_rs
        .map(|n| status_int(n, "availableReplicas"))
        .unwrap_or(0);
    let all_pods = old_pods + new_replicas;
    let min_available = replicas(d) - max_unavailable(d);
    let new_unavailable = new_replicas - new_available;
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    old.sort_by(|a, b| by_creation(a.0, b.0));
    let mut out: Vec<(String, i64)> = Vec::new();
    let set = |out: &mut Vec<(String, i64)>, rs: &Value, to: i64| {
        let n = name(rs).to_string();
        match out.iter_mut().find(|(m, _)| *m == n) {
            Some(e) => e.1 = to,
            None => out.push((n, to)),
        }
    };
    // cleanupUnhealthyReplicas
    let mut cleaned = 0;
    for (rs, size) in old.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        let available = status_int(rs, "availableReplicas");
        if *size == 0 || *size == available {
            continue;
        }
        let down = (max_scaled_down - cleaned).min(*size - available);
        *size -= down;
        cleaned += down;
        set(&mut out, rs, *size);
    }
    // scaleDownOldReplicaSetsForRollingUpdate
    let available: i64 = old
        .iter()
        .map(|(rs, _)| status_int(rs, "availableReplicas"))
        .sum::<i64>()
        + new_available;
    if available > min_available {
        let total = available - min_available;
        let mut scaled = 0;
        for (rs, size) in old.iter_mut() {
            if scaled >= total {
                break;
            }
            if *size == 0 {
                continue;
            }
            let down = (*size).min(total - scaled);
            *size -= down;
            scaled += down;
            set(&mut out, rs, *size);
        }
    }
    out
}

/// Whether the Deployment was resized since its active sets last scaled
/// (`isScalingEvent`): their `desired-replicas` is not `spec.replicas`.
pub fn is_scaling_event(d: &Value, sets: &[&Value]) -> bool {
    sets.iter()
        .filter(|rs| replicas(rs) > 0)
        .filter_map(|rs| int_annotation(rs, DESIRED_REPLICAS))
        .any(|desired| desired != replicas(d))
}

/// Whether the new set has every pod and all are available.
pub fn is_saturated(d: &Value, rs: &Value) -> bool {
    int_annotation(rs, DESIRED_REPLICAS) == Some(replicas(d))
        && replicas(rs) == replicas(d)
        && status_int(rs, "availableReplicas") == replicas(d)
}

/// The one set to scale to `spec.replicas` when a resize needs no
/// proportions (`FindActiveOrLatest`): the only active set, or the newest
/// when none is active; `None` when several are active.
fn active_or_latest<'a>(new_rs: Option<&'a Value>, old: &[&'a Value]) -> Option<&'a Value> {
    let mut old: Vec<&Value> = old.to_vec();
    old.sort_by(|a, b| by_creation(b, a));
    let active: Vec<&Value> = old
        .iter()
        .copied()
        .chain(new_rs)
        .filter(|rs| replicas(rs) > 0)
        .collect();
    match active.len() {
        0 => new_rs.or(old.first().copied()),
        1 => Some(active[0]),
        _ => None,
    }
}

/// How much a set grows or shrinks for the Deployment's new size
/// (`getReplicaSetFraction`): its share of the new `replicas + maxSurge`
/// against the size its `max-replicas` annotation recorded.
fn fraction(rs: &Value, d: &Value) -> i64 {
    if replicas(d) == 0 {
        return -replicas(rs);
    }
    let max_now = replicas(d) + max_surge(d);
    let before = match int_annotation(rs, MAX_REPLICAS) {
        Some(m) if m != 0 => m,
        _ => {
            let r = int(&d["status"]["replicas"]);
            if r == 0 {
                return 0;
            }
            r
        }
    };
    let size = (replicas(rs) * max_now) as f64 / before as f64;
    size.round() as i64 - replicas(rs)
}

fn proportion(rs: &Value, d: &Value, to_add: i64, added: i64) -> i64 {
    if replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let f = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        f.min(allowed)
    } else {
        f.max(allowed)
    }
}

/// The sizes a resize gives (upstream's `scale`): the one active (or
/// newest) set takes `spec.replicas`; a saturated new set leaves the old
/// at 0; otherwise a rolling Deployment's active sets share the change in
/// proportion to their sizes, leftovers to the largest. `(name, size)` of
/// every set to write.
pub fn scale(d: &Value, new_rs: Option<&Value>, old: &[&Value]) -> Vec<(String, i64)> {
    if let Some(rs) = active_or_latest(new_rs, old) {
        if replicas(rs) == replicas(d) {
            return Vec::new();
        }
        return vec![(name(rs).to_string(), replicas(d))];
    }
    if let Some(n) = new_rs
        && is_saturated(d, n)
    {
        return old
            .iter()
            .filter(|rs| replicas(rs) > 0)
            .map(|rs| (name(rs).to_string(), 0))
            .collect();
    }
    if !is_rolling(d) {
        return Vec::new();
    }
    let mut all: Vec<&Value> = old
        .iter()
        .copied()
        .chain(new_rs)
        .filter(|rs| replicas(rs) > 0)
        .collect();
    let total = sum(&all, replicas);
    let allowed = if replicas(d) > 0 {
        replicas(d) + max_surge(d)
    } else {
        0
    };
    let to_add = allowed - total;
    match to_add.cmp(&0) {
        // Larger first; newer first among equals when growing, older
        // first when shrinking.
        Ordering::Greater => all.sort_by(|a, b| {
            replicas(b)
                .cmp(&replicas(a))
                .then_with(|| by_creation(b, a))
        }),
        Ordering::Less => all.sort_by(|a, b| {
            replicas(b)
                .cmp(&replicas(a))
                .then_with(|| by_creation(a, b))
        }),
        Ordering::Equal => {}
    }
    let mut added = 0;
    let mut sizes: Vec<i64> = Vec::with_capacity(all.len());
    for rs in &all {
        if to_add != 0 {
            let p = proportion(rs, d, to_add, added);
            sizes.push(replicas(rs) + p);
            added += p;
        } else {
            sizes.push(replicas(rs));
        }
    }
    if let Some(first) = sizes.first_mut()
        && to_add != 0
    {
        *first = (*first + to_add - added).max(0);
    }
    all.iter()
        .zip(sizes)
        .map(|(rs, s)| (name(rs).to_string(), s))
        .collect()
}

fn annotations_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let meta = crate::meta::metadata_mut(obj);
    let a = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !a.is_object() {
        *a = Value::Object(Map::new());
    }
    a.as_object_mut().expect("an object")
}

/// Whether `desired-replicas`/`max-replicas` differ from the Deployment's
/// size now (`ReplicasAnnotationsNeedUpdate`).
pub fn replicas_annotations_need_update(rs: &Value, desired: i64, max: i64) -> bool {
    annotation(rs, DESIRED_REPLICAS) != Some(&desired.to_string())
        || annotation(rs, MAX_REPLICAS) != Some(&max.to_string())
}

/// Records the Deployment's size on a set (`SetReplicasAnnotations`).
pub fn set_replicas_annotations(rs: &mut Value, desired: i64, max: i64) -> bool {
    if !replicas_annotations_need_update(rs, desired, max) {
        return false;
    }
    let a = annotations_mut(rs);
    a.insert(DESIRED_REPLICAS.into(), json!(desired.to_string()));
    a.insert(MAX_REPLICAS.into(), json!(max.to_string()));
    true
}

/// Copies the Deployment's annotations (but its own bookkeeping) to the
/// set; whether anything changed.
fn copy_annotations(d: &Value, rs: &mut Value) -> bool {
    let mut changed = false;
    let from = d["metadata"]["annotations"].as_object().cloned();
    for (k, v) in from.into_iter().flatten() {
        if NOT_COPIED.contains(&k.as_str()) {
            continue;
        }
        let a = annotations_mut(rs);
        if a.get(&k) != Some(&v) {
            a.insert(k, v);
            changed = true;
        }
    }
    changed
}

/// The new set's annotations (`SetNewReplicaSetAnnotations`): the
/// Deployment's copied, `revision` raised to `new_revision` (the former
/// number kept in `revision-history`), and for a set being created its
/// `desired-replicas`/`max-replicas`. Whether anything changed.
pub fn set_new_rs_annotations(d: &Value, rs: &mut Value, new_revision: i64, exists: bool) -> bool {
    let mut changed = copy_annotations(d, rs);
    let old = annotation(rs, REVISION).map(String::from);
    let old_number = old.as_deref().and_then(|s| s.parse().ok()).unwrap_or(0);
    if old_number < new_revision {
        let history = annotation(rs, REVISION_HISTORY).map(String::from);
        let a = annotations_mut(rs);
        a.insert(REVISION.into(), json!(new_revision.to_string()));
        changed = true;
        if let Some(old) = old.filter(|o| !o.is_empty()) {
            let mut h = match history.filter(|h| !h.is_empty()) {
                Some(h) => format!("{h},{old}"),
                None => old,
            };
            while h.len() > MAX_REVISION_HISTORY_CHARS {
                match h.split_once(',') {
                    Some((_, rest)) => h = rest.to_string(),
                    None => break,
                }
            }
            a.insert(REVISION_HISTORY.into(), json!(h));
        }
    }
    if !exists && set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)) {
        changed = true;
    }
    changed
}

/// The ReplicaSet a Deployment creates for its template: named
/// `<deployment>-<hash>`, the hash label on its template, selector and
/// labels, controlled by the Deployment.
pub fn new_replica_set(d: &Value, hash: &str, replicas: i64, new_revision: i64) -> Value {
    let mut template = d["spec"]["template"].clone();
    let labels = crate::meta::metadata_mut(&mut template)
        .entry("labels")
        .or_insert_with(|| json!({}));
    labels[POD_TEMPLATE_HASH] = json!(hash);
    let labels = labels.clone();
    let mut selector = d["spec"]["selector"].clone();
    if !selector.is_object() {
        selector = json!({});
    }
    let ml = selector
        .as_object_mut()
        .expect("an object")
        .entry("matchLabels")
        .or_insert_with(|| json!({}));
    ml[POD_TEMPLATE_HASH] = json!(hash);
    let mut rs = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{}-{hash}", name(d)),
            "namespace": d["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [super::controller_ref(d, "apps/v1", "Deployment")],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": int(&d["spec"]["minReadySeconds"]),
            "selector": selector,
            "template": template,
        },
    });
    set_new_rs_annotations(d, &mut rs, new_revision, false);
    rs
}

/// The condition of `type` in a status, if any.
pub fn condition<'a>(status: &'a Value, ty: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

/// A Deployment condition stamped `now` (`NewDeploymentCondition`).
pub fn new_condition(ty: &str, status: &str, reason: &str, msg: &str, now: DateTime<Utc>) -> Value {
    let t = timestamp(now);
    json!({"type": ty, "status": status, "lastUpdateTime": t, "lastTransitionTime": t,
        "reason": reason, "message": msg})
}

/// Sets a condition (`SetDeploymentCondition`): nothing when status and
/// reason are the same; the transition time kept when only the reason
/// changes.
pub fn set_condition(status: &mut Value, mut cond: Value) {
    let ty = cond["type"].as_str().unwrap_or_default().to_string();
    if let Some(cur) = condition(status, &ty) {
        if cur["status"] == cond["status"] && cur["reason"] == cond["reason"] {
            return;
        }
        if cur["status"] == cond["status"] {
            cond["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
    }
    remove_condition(status, &ty);
    match status["conditions"].as_array_mut() {
        Some(c) => c.push(cond),
        None => status["conditions"] = json!([cond]),
    }
}

pub fn remove_condition(status: &mut Value, ty: &str) {
    if let Some(c) = status["conditions"].as_array_mut() {
        c.retain(|c| c["type"] != ty);
    }
}

/// `progressDeadlineSeconds`, unless it is absent or "forever" (MaxInt32).
fn progress_deadline(d: &Value) -> Option<i64> {
    d["spec"]["progressDeadlineSeconds"]
        .as_i64()
        .filter(|s| *s != i64::from(i32::MAX))
}

/// Whether the Deployment has a progress deadline (`HasProgressDeadline`).
pub fn has_progress_deadline(d: &Value) -> bool {
    progress_deadline(d).is_some()
}

/// The status the sets give, before progress is judged
/// (`calculateStatus`), with the `Available` condition.
pub fn calculate_status(
    d: &Value,
    all: &[&Value],
    new_rs: Option<&Value>,
    now: DateTime<Utc>,
) -> Value {
    let available = sum(all, |rs| status_int(rs, "availableReplicas"));
    let total = sum(all, replicas);
    let mut status = json!({
        "observedGeneration": d["metadata"]["generation"],
        "replicas": sum(all, |rs| status_int(rs, "replicas")),
        "updatedReplicas": new_rs.map(|n| status_int(n, "replicas")).unwrap_or(0),
        "readyReplicas": sum(all, |rs| status_int(rs, "readyReplicas")),
        "availableReplicas": available,
        "unavailableReplicas": (total - available).max(0),
    });
    if let Some(c) = d["status"].get("collisionCount").filter(|c| !c.is_null()) {
        status["collisionCount"] = c.clone();
    }
    if let Some(c) = d["status"]["conditions"].as_array() {
        status["conditions"] = json!(c);
    }
    let cond = if available >= replicas(d) - max_unavailable(d) {
        new_condition(
            AVAILABLE,
            "True",
            MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.",
            now,
        )
    } else {
        new_condition(
            AVAILABLE,
            "False",
            MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.",
            now,
        )
    };
    set_condition(&mut status, cond);
    status
}

/// Every pod updated and available, and the spec seen
/// (`DeploymentComplete`).
pub fn complete(d: &Value, status: &Value) -> bool {
    let r = replicas(d);
    int(&status["updatedReplicas"]) == r
        && int(&status["replicas"]) == r
        && int(&status["availableReplicas"]) == r
        && int(&status["observedGeneration"]) >= int(&d["metadata"]["generation"])
}

/// Whether `new` moved on from the Deployment's current status
/// (`DeploymentProgressing`).
pub fn progressing(d: &Value, new: &Value) -> bool {
    let old = &d["status"];
    let old_old = int(&old["replicas"]) - int(&old["updatedReplicas"]);
    let new_old = int(&new["replicas"]) - int(&new["updatedReplicas"]);
    int(&new["updatedReplicas"]) > int(&old["updatedReplicas"])
        || new_old < old_old
        || int(&new["readyReplicas"]) > int(&old["readyReplicas"])
        || int(&new["availableReplicas"]) > int(&old["availableReplicas"])
}

/// Whether no progress was recorded for `progressDeadlineSeconds`
/// (`DeploymentTimedOut`).
pub fn timed_out(d: &Value, status: &Value, now: DateTime<Utc>) -> bool {
    let Some(deadline) = progress_deadline(d) else {
        return false;
    };
    let Some(c) = condition(status, PROGRESSING) else {
        return false;
    };
    match c["reason"].as_str().unwrap_or_default() {
        NEW_RS_AVAILABLE_REASON => false,
        TIMED_OUT_REASON => true,
        _ => super::time(&c["lastUpdateTime"])
            .is_some_and(|t| t + chrono::Duration::seconds(deadline) < now),
    }
}

/// The status after a rollout step (upstream's `syncRolloutStatus`): the
/// counts and `Available`, then `Progressing` judged against the progress
/// deadline, and a set's `ReplicaFailure` copied. `new_name` names the new
/// set in the messages.
pub fn rollout_status(
    d: &Value,
    all: &[&Value],
    new_rs: Option<&Value>,
    now: DateTime<Utc>,
) -> Value {
    let mut status = calculate_status(d, all, new_rs, now);
    if !has_progress_deadline(d) {
        remove_condition(&mut status, PROGRESSING);
    }
    let current = condition(&d["status"], PROGRESSING);
    let is_complete = int(&status["replicas"]) == int(&status["updatedReplicas"])
        && current.is_some_and(|c| c["reason"] == NEW_RS_AVAILABLE_REASON);
    let what = match new_rs {
        Some(n) => format!("ReplicaSet {:?}", name(n)),
        None => format!("Deployment {:?}", name(d)),
    };
    if has_progress_deadline(d) && !is_complete {
        if complete(d, &status) {
            let c = new_condition(
                PROGRESSING,
                "True",
                NEW_RS_AVAILABLE_REASON,
                &format!("{what} has successfully progressed."),
                now,
            );
            set_condition(&mut status, c);
        } else if progressing(d, &status) {
            let mut c = new_condition(
                PROGRESSING,
                "True",
                RS_UPDATED_REASON,
                &format!("{what} is progressing."),
                now,
            );
            if let Some(cur) = current {
                if cur["status"] == "True" {
                    c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
                }
                remove_condition(&mut status, PROGRESSING);
            }
            set_condition(&mut status, c);
        } else if timed_out(d, &status, now) {
            let c = new_condition(
                PROGRESSING,
                "False",
                TIMED_OUT_REASON,
                &format!("{what} has timed out progressing."),
                now,
            );
            set_condition(&mut status, c);
        }
    }
    // The first ReplicaFailure of a set (the new one first).
    let failure = new_rs
        .into_iter()
        .chain(all.iter().copied())
        .find_map(|rs| condition(&rs["status"], REPLICA_FAILURE))
        .filter(|c| c["status"] == "True");
    match failure {
        Some(f) => {
            let c = json!({"type": REPLICA_FAILURE, "status": f["status"],
                "lastUpdateTime": f["lastTransitionTime"], "lastTransitionTime": f["lastTransitionTime"],
                "reason": f["reason"], "message": f["message"]});
            set_condition(&mut status, c);
        }
        None => remove_condition(&mut status, REPLICA_FAILURE),
    }
    status
}

/// When to look again at a Deployment whose rollout has not progressed,
/// so the deadline is noticed (`requeueStuckDeployment`).
pub fn stuck_requeue(d: &Value, status: &Value, now: DateTime<Utc>) -> Option<std::time::Duration> {
    let deadline = progress_deadline(d)?;
    let c = condition(status, PROGRESSING)?;
    if complete(d, status) || c["reason"] == TIMED_OUT_REASON {
        return None;
    }
    let from = super::time(&c["lastUpdateTime"])?;
    let after = from + chrono::Duration::seconds(deadline) - now;
    Some(
        after
            .to_std()
            .map(|a| a + std::time::Duration::from_secs(1))
            .unwrap_or_default(),
    )
}

/// The `Progressing` condition for a paused or resumed Deployment
/// (`checkPausedConditions`), when it must change.
pub fn paused_condition(d: &Value, now: DateTime<Utc>) -> Option<Value> {
    if !has_progress_deadline(d) {
        return None;
    }
    let cur = condition(&d["status"], PROGRESSING);
    if cur.is_some_and(|c| c["reason"] == TIMED_OUT_REASON) {
        return None;
    }
    let paused_now = cur.is_some_and(|c| c["reason"] == PAUSED_REASON);
    let paused = d["spec"]["paused"] == true;
    let c = if paused && !paused_now {
        new_condition(
            PROGRESSING,
            "Unknown",
            PAUSED_REASON,
            "Deployment is paused",
            now,
        )
    } else if !paused && paused_now {
        new_condition(
            PROGRESSING,
            "Unknown",
            RESUMED_REASON,
            "Deployment is resumed",
            now,
        )
    } else {
        return None;
    };
    let mut status = d["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    set_condition(&mut status, c);
    Some(status)
}

/// The old sets beyond `revisionHistoryLimit` to delete, lowest revision
/// first, skipping any with pods or unobserved changes
/// (`cleanupDeployment`).
pub fn sets_to_clean_up<'a>(d: &Value, old: &[&'a Value]) -> Vec<&'a Value> {
    let Some(limit) = d["spec"]["revisionHistoryLimit"].as_i64() else {
        return Vec::new();
    };
    let mut alive: Vec<&Value> = old
        .iter()
        .copied()
        .filter(|rs| rs["metadata"]["deletionTimestamp"].is_null())
        .collect();
    let diff = alive.len() as i64 - limit;
    if diff <= 0 {
        return Vec::new();
    }
    alive.sort_by(|a, b| {
        revision(a)
            .cmp(&revision(b))
            .then_with(|| by_creation(a, b))
    });
    alive
        .into_iter()
        .take(diff as usize)
        .filter(|rs| {
            status_int(rs, "replicas") == 0
                && replicas(rs) == 0
                && int(&rs["metadata"]["generation"]) <= status_int(rs, "observedGeneration")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        super::super::time(&json!("2024-01-01T01:00:00Z")).unwrap()
    }

    fn deployment(replicas: i64, surge: Value, unavailable: Value) -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "d-uid", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
                "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
        })
    }

    fn rs(name: &str, created: &str, replicas: i64, available: i64) -> Value {
        json!({
            "metadata": {"name": name, "creationTimestamp": created, "generation": 1},
            "spec": {"replicas": replicas},
            "status": {"replicas": replicas, "availableReplicas": available,
                "readyReplicas": available, "observedGeneration": 1},
        })
    }

    /// Upstream's `TestResolveFenceposts` and `TestGetScaledValueFromIntOrPercent`.
    #[test]
    fn fenceposts_round_surge_up_and_unavailability_down() {
        let cases = [
            (json!("0%"), json!("0%"), 0, (0, 1)),
            (json!("39%"), json!("39%"), 10, (4, 3)),
            (json!("oops"), json!("39%"), 10, (0, 3)),
            (json!("55%"), json!("oops"), 10, (6, 0)),
            (json!(0), json!("13%"), 10, (0, 1)),
            (json!("25%"), json!("25%"), 3, (1, 0)),
            (json!(2), json!(0), 5, (2, 0)),
        ];
        for (surge, unavailable, desired, want) in cases {
            let d = deployment(desired, surge.clone(), unavailable.clone());
            assert_eq!(
                fenceposts(&d, desired),
                want,
                "{surge} {unavailable} {desired}"
            );
        }
        assert_eq!(scaled_value(&json!("50%"), 5, true), Ok(3));
        assert_eq!(scaled_value(&json!("50%"), 5, false), Ok(2));
        assert!(scaled_value(&json!("x"), 5, false).is_err());
        let d = deployment(2, json!(0), json!(5));
        assert_eq!(max_unavailable(&d), 2, "never more than replicas");
    }

    #[test]
    fn hashes_are_stable_and_change_with_template_or_collisions() {
        let d = deployment(3, json!(1), json!(0));
        let t = &d["spec"]["template"];
        let h = template_hash(t, None);
        assert_eq!(h, template_hash(&t.clone(), None));
        assert!(
            h.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
        assert_ne!(h, template_hash(t, Some(1)));
        let mut other = t.clone();
        other["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert_ne!(h, template_hash(&other, None));
        let rs = new_replica_set(&d, &h, 1, 1);
        assert_eq!(rs["metadata"]["name"], format!("web-{h}"));
        assert_eq!(rs["spec"]["selector"]["matchLabels"][POD_TEMPLATE_HASH], h);
        assert_eq!(rs["metadata"]["labels"][POD_TEMPLATE_HASH], h);
        assert_eq!(rs["metadata"]["annotations"][REVISION], "1");
        assert_eq!(rs["metadata"]["annotations"][DESIRED_REPLICAS], "3");
        assert_eq!(rs["metadata"]["annotations"][MAX_REPLICAS], "4");
        assert_eq!(rs["metadata"]["ownerReferences"][0]["uid"], "d-uid");
        assert!(equal_ignore_hash(&rs["spec"]["template"], t));
        assert_eq!(find_new(&d, &[json!({}), rs]), Some(1));
    }

    /// Upstream's `TestNewRSNewReplicas`.
    #[test]
    fn new_set_grows_within_surge() {
        let d = deployment(10, json!(1), json!(0));
        let new_rs = rs("new", "2024-01-01T00:00:00Z", 0, 0);
        let old = rs("old", "2023-01-01T00:00:00Z", 10, 10);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new_rs], &new_rs), 1);
        let new_rs = rs("new", "2024-01-01T00:00:00Z", 1, 0);
        assert_eq!(
            new_rs_new_replicas(&d, &[&old, &new_rs], &new_rs),
            1,
            "at the surge"
        );
        let d = deployment(10, json!("50%"), json!(0));
        let new_rs = rs("new", "2024-01-01T00:00:00Z", 0, 0);
        let old = rs("old", "2023-01-01T00:00:00Z", 1, 1);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new_rs], &new_rs), 10);
        let mut recreate = d.clone();
        recreate["spec"]["strategy"] = json!({"type": "Recreate"});
        assert_eq!(new_rs_new_replicas(&recreate, &[&new_rs], &new_rs), 10);
    }

    /// Upstream's `TestReconcileOldReplicaSets` and
    /// `TestDeploymentController_cleanupUnhealthyReplicas` shapes.
    #[test]
    fn old_sets_shrink_within_max_unavailable() {
        // 10 replicas, maxUnavailable 2: old all available, new none yet.
        let d = deployment(10, json!(0), json!(2));
        let old = rs("old", "2023-01-01T00:00:00Z", 10, 10);
        let new_rs = rs("new", "2024-01-01T00:00:00Z", 0, 0);
        assert_eq!(
            old_scale_downs(&d, &[&old], Some(&new_rs)),
            vec![("old".into(), 8)]
        );
        // New set's 2 pods not available: nothing more may go.
        let old = rs("old", "2023-01-01T00:00:00Z", 8, 8);
        let new_rs = rs("new", "2024-01-01T00:00:00Z", 2, 0);
        assert!(old_scale_downs(&d, &[&old], Some(&new_rs)).is_empty());
        // Unhealthy old pods go first, even when none available could.
        let old = rs("old", "2023-01-01T00:00:00Z", 10, 6);
        let new_rs = rs("new", "2024-01-01T00:00:00Z", 0, 0);
        assert_eq!(
            old_scale_downs(&d, &[&old], Some(&new_rs)),
            vec![("old".into(), 8)]
        );
        // Oldest first across old sets.
        let a = rs("a", "2022-01-01T00:00:00Z", 5, 5);
        let b = rs("b", "2023-01-01T00:00:00Z", 5, 5);
        let new_rs = rs("new", "2024-01-01T00:00:00Z", 2, 2);
        assert_eq!(
            old_scale_downs(&d, &[&b, &a], Some(&new_rs)),
            vec![("a".into(), 1)]
        );
    }

    /// Upstream's `TestScale` proportional cases.
    #[test]
    fn resizes_mid_rollout_are_proportional() {
        let mut d = deployment(12, json!(3), json!(0));
        d["status"]["replicas"] = json!(10);
        let ann = |mut r: Value, desired: i64, max: i64| {
            r["metadata"]["annotations"] = json!({DESIRED_REPLICAS: desired.to_string(),
                MAX_REPLICAS: max.to_string()});
            r
        };
        // Deployment 10 → 12 (surge 3): 7 old + 6 new of max 13 → 15.
        let old = ann(rs("old", "2023-01-01T00:00:00Z", 7, 7), 10, 13);
        let new_rs = ann(rs("new", "2024-01-01T00:00:00Z", 6, 0), 10, 13);
        let plan = scale(&d, Some(&new_rs), &[&old]);
        let total: i64 = plan.iter().map(|(_, s)| s).sum();
        assert_eq!(total, 15);
        assert!(plan.contains(&("old".into(), 8)), "{plan:?}");
        assert!(plan.contains(&("new".into(), 7)), "{plan:?}");
        // One active set takes the whole size.
        let only = rs("only", "2023-01-01T00:00:00Z", 3, 3);
        assert_eq!(scale(&d, Some(&only), &[]), vec![("only".into(), 12)]);
        assert!(is_scaling_event(&d, &[&old]));
    }

    #[test]
    fn revisions_and_history() {
        let mut d = deployment(3, json!(1), json!(0));
        d["metadata"]["annotations"] = json!({"kubernetes.io/change-cause": "v2",
            REVISION: "3", LAST_APPLIED: "{}"});
        let mut old = rs("old", "2023-01-01T00:00:00Z", 0, 0);
        old["metadata"]["annotations"] = json!({REVISION: "1"});
        assert!(set_new_rs_annotations(&d, &mut old, 4, true));
        let a = &old["metadata"]["annotations"];
        assert_eq!(a[REVISION], "4");
        assert_eq!(a[REVISION_HISTORY], "1");
        assert_eq!(a["kubernetes.io/change-cause"], "v2");
        assert!(a.get(LAST_APPLIED).is_none());
        assert!(!set_new_rs_annotations(&d, &mut old, 4, true), "idempotent");
        assert_eq!(max_revision([&old, &rs("x", "", 0, 0)]), 4);
    }

    #[test]
    fn progress_conditions() {
        let mut d = deployment(2, json!(1), json!(0));
        let new_rs = rs("web-abc", "2024-01-01T00:00:00Z", 2, 1);
        d["status"] = json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 0,
            "conditions": [new_condition(PROGRESSING, "True", NEW_RS_REASON, "Created", now())]});
        let s = rollout_status(&d, &[&new_rs], Some(&new_rs), now());
        let p = condition(&s, PROGRESSING).unwrap();
        assert_eq!(p["reason"], RS_UPDATED_REASON);
        assert_eq!(p["message"], "ReplicaSet \"web-abc\" is progressing.");
        assert_eq!(condition(&s, AVAILABLE).unwrap()["status"], "False");
        // No progress for longer than the deadline.
        d["status"] = s;
        let later = now() + chrono::Duration::seconds(601);
        assert!(stuck_requeue(&d, &d["status"], now()).is_some());
        let s = rollout_status(&d, &[&new_rs], Some(&new_rs), later);
        assert_eq!(
            condition(&s, PROGRESSING).unwrap()["reason"],
            TIMED_OUT_REASON
        );
        // Complete.
        let done = rs("web-abc", "2024-01-01T00:00:00Z", 2, 2);
        let s = rollout_status(&d, &[&done], Some(&done), now());
        assert_eq!(
            condition(&s, PROGRESSING).unwrap()["reason"],
            NEW_RS_AVAILABLE_REASON
        );
        assert!(complete(&d, &s));
        assert_eq!(condition(&s, AVAILABLE).unwrap()["status"], "True");
        // Paused.
        d["spec"]["paused"] = json!(true);
        d["status"] = s;
        let p = paused_condition(&d, now()).unwrap();
        assert_eq!(condition(&p, PROGRESSING).unwrap()["reason"], PAUSED_REASON);
    }

    #[test]
    fn history_beyond_the_limit_is_cleaned_up_oldest_first() {
        let mut d = deployment(1, json!(1), json!(0));
        d["spec"]["revisionHistoryLimit"] = json!(1);
        let mut sets: Vec<Value> = (1..=3)
            .map(|i| {
                let mut r = rs(&format!("r{i}"), "2024-01-01T00:00:00Z", 0, 0);
                r["metadata"]["annotations"] = json!({REVISION: i.to_string()});
                r
            })
            .collect();
        sets[1]["status"]["replicas"] = json!(1);
        let refs: Vec<&Value> = sets.iter().collect();
        let names: Vec<&str> = sets_to_clean_up(&d, &refs).into_iter().map(name).collect();
        assert_eq!(names, ["r1"], "r2 still has a pod");
    }
}
