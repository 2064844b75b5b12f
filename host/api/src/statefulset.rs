//! What kube-controller-manager's StatefulSet controller decides (no IO),
//! as upstream's `pkg/controller/statefulset` (1.33): pod identities
//! (`<set>-<ordinal>` from `spec.ordinals.start`, the
//! `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`
//! labels, `hostname`/`subdomain` from `serviceName`), each pod's claims
//! (`<template>-<set>-<ordinal>`, the pod's volumes pointing at them), the
//! revisions (a strategic merge patch restoring the template, as
//! ControllerRevisions named by its hash), the retention policy's owner
//! references on claims, and [`plan`]: the steps of one sync and the
//! status.
//!
//! A sync walks the replicas in ordinal order: `OrderedReady` creates
//! (or replaces a failed pod) one at a time and goes on only past pods
//! that are Running, Ready and available for `minReadySeconds`; scale-down
//! deletes from the highest ordinal, one at a time, once every pod kept is
//! healthy; `Parallel` creates and deletes all at once. A `RollingUpdate`
//! deletes the highest-ordinal pod at or above `partition` that is not of
//! the update revision, one at a time, waiting for each to be healthy
//! again; `OnDelete` replaces only pods someone deleted. `maxUnavailable`
//! is ignored, as upstream 1.33 does while its `MaxUnavailableStatefulSet`
//! gate is off (alpha). Work per sync is bounded by [`BURST`] creates and
//! deletes.

use crate::history;
use crate::replicas::{controller_ref, pod_is_available, pod_is_ready};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

pub use crate::history::LABEL_REVISION_HASH;
/// The label naming a pod of a StatefulSet by itself.
pub const LABEL_POD_NAME: &str = "statefulset.kubernetes.io/pod-name";
/// The label holding a pod's ordinal (`PodIndexLabel`, on since 1.28).
pub const LABEL_POD_INDEX: &str = "apps.kubernetes.io/pod-index";
/// Creates and deletes per sync at most (upstream's `MaxBatchSize`, which
/// bounds a batch; here it also bounds a sync, which requeues itself).
pub const BURST: usize = 500;

/// A pod's parent name and ordinal from its name (upstream's
/// `(.*)-([0-9]+)$`); the ordinal is `None` when it overflows 32 bits.
pub fn parent_and_ordinal(name: &str) -> Option<(&str, Option<i64>)> {
    let (parent, digits) = name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ordinal = digits.parse::<i32>().ok().map(i64::from);
    Some((parent, ordinal))
}

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

/// A pod's ordinal, if its name has one.
pub fn ordinal(pod: &Value) -> Option<i64> {
    parent_and_ordinal(name_of(pod)).and_then(|(_, o)| o)
}

/// Whether `pod`'s name makes it a member of `set` (`isMemberOf`).
pub fn is_member(set: &Value, pod: &Value) -> bool {
    parent_and_ordinal(name_of(pod)).is_some_and(|(p, _)| p == name_of(set))
}

/// The first ordinal (`spec.ordinals.start`, else 0).
pub fn start_ordinal(set: &Value) -> i64 {
    set["spec"]["ordinals"]["start"]
        .as_i64()
        .unwrap_or(0)
        .max(0)
}

/// `spec.replicas` (default 1).
pub fn replicas(set: &Value) -> i64 {
    set["spec"]["replicas"].as_i64().unwrap_or(1).max(0)
}

/// The last ordinal (inclusive); below the start when there are none.
pub fn end_ordinal(set: &Value) -> i64 {
    start_ordinal(set) + replicas(set) - 1
}

fn in_range(ordinal: i64, set: &Value) -> bool {
    ordinal >= start_ordinal(set) && ordinal <= end_ordinal(set)
}

/// `<set>-<ordinal>`.
pub fn pod_name(set: &Value, ordinal: i64) -> String {
    format!("{}-{ordinal}", name_of(set))
}

/// `<template>-<set>-<ordinal>`.
pub fn claim_name(template: &Value, set: &Value, ordinal: i64) -> String {
    format!("{}-{}-{ordinal}", name_of(template), name_of(set))
}

fn templates(set: &Value) -> &[Value] {
    set["spec"]["volumeClaimTemplates"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The revision a pod was made from (its `controller-revision-hash`).
pub fn pod_revision(pod: &Value) -> &str {
    pod["metadata"]["labels"][LABEL_REVISION_HASH]
        .as_str()
        .unwrap_or_default()
}

/// `identityMatches`: name, namespace and the pod-name label.
pub fn identity_matches(set: &Value, pod: &Value) -> bool {
    let Some((parent, Some(ord))) = parent_and_ordinal(name_of(pod)) else {
        return false;
    };
    ord >= 0
        && parent == name_of(set)
        && name_of(pod) == pod_name(set, ord)
        && pod["metadata"]["namespace"] == set["metadata"]["namespace"]
        && pod["metadata"]["labels"][LABEL_POD_NAME] == name_of(pod)
}

/// `storageMatches`: a volume per claim template, on the pod's claim.
pub fn storage_matches(set: &Value, pod: &Value) -> bool {
    let Some(ord) = ordinal(pod) else {
        return false;
    };
    let volumes = pod["spec"]["volumes"].as_array();
    templates(set).iter().all(|t| {
        volumes.into_iter().flatten().any(|v| {
            v["name"] == t["metadata"]["name"]
                && v["persistentVolumeClaim"]["claimName"] == claim_name(t, set, ord).as_str()
        })
    })
}

/// The claims of the pod with `ordinal` (`getPersistentVolumeClaims`),
/// as `(template name, claim)`: each template named for the pod, in the
/// set's namespace, labelled with the template's labels and the
/// selector's `matchLabels`.
pub fn claims(set: &Value, ordinal: i64) -> Vec<(String, Value)> {
    templates(set)
        .iter()
        .map(|t| {
            let mut claim = json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": t["metadata"].clone(),
                "spec": t["spec"].clone(),
            });
            let meta = &mut claim["metadata"];
            if !meta.is_object() {
                *meta = json!({});
            }
            if let Some(m) = meta.as_object_mut() {
                for k in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "generateName",
                ] {
                    m.remove(k);
                }
            }
            meta["name"] = json!(claim_name(t, set, ordinal));
            meta["namespace"] = set["metadata"]["namespace"].clone();
            if !meta["labels"].is_object() {
                meta["labels"] = json!({});
            }
            for (k, v) in set["spec"]["selector"]["matchLabels"]
                .as_object()
                .into_iter()
                .flatten()
            {
                meta["labels"][k] = v.clone();
            }
            (name_of(t).to_string(), claim)
        })
        .collect()
}

/// `updateStorage`: the pod's volumes for its claims, then its other ones.
fn update_storage(set: &Value, pod: &mut Value, ordinal: i64) {
    let claims = claims(set, ordinal);
    let mut volumes: Vec<Value> = claims
        .iter()
        .map(|(template, claim)| {
            json!({"name": template, "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}})
        })
        .collect();
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        if !claims.iter().any(|(t, _)| v["name"] == t.as_str()) {
            volumes.push(v.clone());
        }
    }
    if !volumes.is_empty() {
        pod["spec"]["volumes"] = json!(volumes);
    }
}

/// `updateIdentity`: name, namespace, the pod-name and pod-index labels.
fn update_identity(set: &Value, pod: &mut Value, ordinal: i64) {
    pod["metadata"]["name"] = json!(pod_name(set, ordinal));
    pod["metadata"]["namespace"] = set["metadata"]["namespace"].clone();
    if !pod["metadata"]["labels"].is_object() {
        pod["metadata"]["labels"] = json!({});
    }
    pod["metadata"]["labels"][LABEL_POD_NAME] = json!(pod_name(set, ordinal));
    pod["metadata"]["labels"][LABEL_POD_INDEX] = json!(ordinal.to_string());
}

/// The pod with `ordinal` of `set` (whose template is the revision's),
/// labelled with the revision's name (`newStatefulSetPod`).
pub fn new_pod(set: &Value, ordinal: i64, revision: &str) -> Value {
    let template = &set["spec"]["template"];
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{}-", name_of(set)),
            "ownerReferences": [controller_ref(set, "apps/v1", "StatefulSet")],
        },
        "spec": template["spec"].clone(),
    });
    for k in ["labels", "annotations", "finalizers"] {
        if !template["metadata"][k].is_null() {
            pod["metadata"][k] = template["metadata"][k].clone();
        }
    }
    update_identity(set, &mut pod, ordinal);
    // `initIdentity`: set only when the pod is made (they are immutable).
    pod["spec"]["hostname"] = json!(pod_name(set, ordinal));
    match set["spec"]["serviceName"].as_str() {
        Some(s) if !s.is_empty() => pod["spec"]["subdomain"] = json!(s),
        _ => {}
    }
    update_storage(set, &mut pod, ordinal);
    pod["metadata"]["labels"][LABEL_REVISION_HASH] = json!(revision);
    pod
}

/// Running with its `Ready` condition true (`isRunningAndReady`).
pub fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && pod_is_ready(pod)
}

fn created(pod: &Value) -> bool {
    pod["status"]["phase"]
        .as_str()
        .is_some_and(|p| !p.is_empty())
}

fn terminating(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
}

/// `isHealthy`: running, ready and not terminating.
pub fn healthy(pod: &Value) -> bool {
    running_and_ready(pod) && !terminating(pod)
}

fn finished(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Failed" | "Succeeded")
    )
}

// ---- Revisions.

/// A revision of `set`'s template (`newRevision`): its data restores the
/// template; labelled as the template, annotated as the set, named by
/// the hash of its data and `collisions`.
pub fn new_revision(set: &Value, number: i64, collisions: i64) -> Value {
    let data = history::template_patch(&set["spec"]["template"]);
    let hash = history::hash(&data, Some(collisions));
    let mut revision = history::new_revision(
        set,
        controller_ref(set, "apps/v1", "StatefulSet"),
        &set["spec"]["template"]["metadata"]["labels"],
        data,
        number,
        &hash,
    );
    if let Some(a) = set["metadata"]["annotations"].as_object() {
        revision["metadata"]["annotations"] = json!(a);
    }
    revision
}

/// What the update revision is (`getStatefulSetRevisions`), given the
/// set's revisions oldest first.
#[derive(Debug, PartialEq, Eq)]
pub enum UpdateRevision {
    /// The newest revision has the set's template.
    Newest,
    /// An older one has it: it becomes the newest with this number.
    Renumber(usize, i64),
    /// None has it: a new one (upstream's collision loop) is made.
    Create,
}

/// Which revision is the set's template now.
pub fn update_revision(set: &Value, sorted: &[Value]) -> UpdateRevision {
    let data = history::template_patch(&set["spec"]["template"]);
    match sorted.iter().rposition(|r| r["data"] == data) {
        Some(i) if i + 1 == sorted.len() => UpdateRevision::Newest,
        Some(i) => UpdateRevision::Renumber(i, history::next_number(sorted)),
        None => UpdateRevision::Create,
    }
}

/// `ApplyRevision`: the set with the revision's template.
pub fn apply_revision(set: &Value, revision: &Value) -> Result<Value, String> {
    crate::patch::apply_strategic_merge_patch("StatefulSet", set, &revision["data"])
        .map_err(|e| format!("{e:?}"))
}

// ---- The retention policy (`persistentVolumeClaimRetentionPolicy`).

/// `(whenDeleted, whenScaled)` are `Delete`; anything else retains.
fn policy(set: &Value) -> (bool, bool) {
    let p = &set["spec"]["persistentVolumeClaimRetentionPolicy"];
    (p["whenDeleted"] == "Delete", p["whenScaled"] == "Delete")
}

fn refs(claim: &Value) -> &[Value] {
    claim["metadata"]["ownerReferences"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn uid(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

/// The reference names `obj` of this kind (whatever its uid).
fn names(r: &Value, obj: &Value, api_version: &str, kind: &str) -> bool {
    r["apiVersion"] == api_version && r["kind"] == kind && r["name"] == name_of(obj)
}

fn names_set(r: &Value, set: &Value) -> bool {
    names(r, set, "apps/v1", "StatefulSet")
}

fn names_pod(r: &Value, pod: &Value) -> bool {
    names(r, pod, "v1", "Pod")
}

fn owned_by(claim: &Value, owner: &Value) -> bool {
    refs(claim).iter().any(|r| r["uid"] == uid(owner))
}

/// `hasStaleOwnerRef`: the first reference naming `obj` has another uid.
fn stale_ref(claim: &Value, obj: &Value, is: impl Fn(&Value, &Value) -> bool) -> bool {
    refs(claim)
        .iter()
        .find(|r| is(r, obj))
        .is_some_and(|r| r["uid"] != uid(obj))
}

/// `hasUnexpectedController`: with a policy that deletes, a controller of
/// the claim that is neither the set nor the pod (or is them by name
/// with another uid).
pub fn unexpected_controller(claim: &Value, set: &Value, pod: &Value) -> bool {
    if policy(set) == (false, false) {
        return false;
    }
    for r in refs(claim) {
        if names_set(r, set) {
            if r["uid"] != uid(set) {
                return true;
            }
            continue;
        }
        if names_pod(r, pod) {
            if r["uid"] != uid(pod) {
                return true;
            }
            continue;
        }
        if r["controller"] == true {
            return true;
        }
    }
    false
}

fn non_controller_owner(claim: &Value, set: &Value, pod: &Value) -> bool {
    refs(claim)
        .iter()
        .any(|r| (r["uid"] == uid(set) || r["uid"] == uid(pod)) && r["controller"] != true)
}

/// `isClaimOwnerUpToDate`: the claim's owners are as the policy wants
/// (Retain/Retain: neither; whenDeleted Delete: the set; whenScaled
/// Delete: the pod once it is scaled away, the set before if both).
pub fn claim_owner_up_to_date(claim: &Value, set: &Value, pod: &Value) -> bool {
    if stale_ref(claim, set, names_set) || stale_ref(claim, pod, names_pod) {
        return true;
    }
    if unexpected_controller(claim, set, pod) {
        return !(owned_by(claim, set) || owned_by(claim, pod));
    }
    if non_controller_owner(claim, set, pod) {
        return false;
    }
    let scaled_down = !ordinal(pod).is_some_and(|o| in_range(o, set));
    let (set_owns, pod_owns) = (owned_by(claim, set), owned_by(claim, pod));
    match policy(set) {
        (false, false) => !set_owns && !pod_owns,
        (true, false) => set_owns && !pod_owns,
        (false, true) => !set_owns && scaled_down == pod_owns,
        (true, true) => scaled_down != set_owns && scaled_down == pod_owns,
    }
}

/// `updateClaimOwnerRefForSetAndPod`: the claim's owner references as
/// the policy wants them (references to the set and pod scrubbed, then
/// the wanted ones added as controllers; none with an unexpected
/// controller).
pub fn claim_owner_refs(claim: &Value, set: &Value, pod: &Value) -> Vec<Value> {
    let unexpected = unexpected_controller(claim, set, pod);
    let mut out: Vec<Value> = refs(claim)
        .iter()
        .filter(|r| !names_set(r, set) && !names_pod(r, pod))
        .cloned()
        .collect();
    if unexpected {
        return out;
    }
    let scaled_down = !ordinal(pod).is_some_and(|o| in_range(o, set));
    let (want_set, want_pod) = match policy(set) {
        (false, false) => (false, false),
        (true, false) => (true, false),
        (false, true) => (false, scaled_down),
        (true, true) => (!scaled_down, scaled_down),
    };
    let mut add = |owner: &Value, api: &str, kind: &str| {
        if !out.iter().any(|r| r["uid"] == uid(owner)) {
            let mut r = controller_ref(owner, api, kind);
            if kind == "Pod" {
                // Upstream sets `blockOwnerDeletion` here too, which
                // `OwnerReferencesPermissionEnforcement` (on by default in
                // this server) allows only with `update` on
                // `pods/finalizers`, which upstream's role does not grant.
                if let Some(m) = r.as_object_mut() {
                    m.remove("blockOwnerDeletion");
                }
            }
            out.push(r);
        }
    };
    if want_pod {
        add(pod, "v1", "Pod");
    }
    if want_set {
        add(set, "apps/v1", "StatefulSet");
    }
    out
}

/// `PodClaimIsStale`: with `whenScaled: Delete`, a claim of the pod that
/// still names an earlier pod of that name (it waits for the garbage
/// collector).
pub fn claim_is_stale(claim: &Value, set: &Value, pod: &Value) -> bool {
    policy(set).1 && stale_ref(claim, pod, names_pod)
}

// ---- One sync.

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Failed or succeeded: it is made again.
    Finished,
    /// Its ordinal is beyond the replicas.
    ScaleDown,
    /// A rolling update replaces it.
    Update,
}

/// One write of a sync, in order; the controller stops at the first that
/// fails.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Make the pod's claims (one that exists is reused), the pod, then
    /// give the claims the owners the retention policy wants.
    Create(Value),
    /// Make the missing claims of a pending pod and set their owners.
    Claims(Value),
    /// Set the owners of the pod's claims as the retention policy wants.
    Retention(Value),
    /// Write the pod's identity and volumes (upstream's
    /// `UpdateStatefulPod`).
    Update(Value),
    /// Delete the pod (`name`, `uid`).
    Delete(String, String, Why),
}

/// What a sync does and the status it leaves.
#[derive(Debug, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// The status to write (upstream's whole `StatefulSetStatus`).
    pub status: Value,
    /// The sync stopped at [`BURST`] writes: go again at once.
    pub more: bool,
}

/// The revisions and state a sync works from.
pub struct Input<'a> {
    pub set: &'a Value,
    /// The current and update revisions (names), and the set as each.
    pub current: (&'a str, &'a Value),
    pub update: (&'a str, &'a Value),
    pub collisions: i64,
    /// The pods the set owns (claimed).
    pub pods: &'a [Value],
    /// The namespace's claims by name, as last seen.
    pub claims: &'a HashMap<String, Value>,
    pub now: DateTime<Utc>,
}

#[derive(Default)]
struct Counts {
    replicas: i64,
    ready: i64,
    available: i64,
    current: i64,
    updated: i64,
}

fn count<'a>(
    pods: impl Iterator<Item = &'a Value>,
    min_ready: i64,
    current: &str,
    update: &str,
    now: DateTime<Utc>,
) -> Counts {
    let mut c = Counts::default();
    for p in pods {
        if created(p) {
            c.replicas += 1;
        }
        if running_and_ready(p) {
            c.ready += 1;
            if pod_is_available(p, min_ready, now) {
                c.available += 1;
            }
        }
        if created(p) && !terminating(p) {
            if pod_revision(p) == current {
                c.current += 1;
            }
            if pod_revision(p) == update {
                c.updated += 1;
            }
        }
    }
    c
}

/// Whether the cached claims of `pod` have the owners the policy wants
/// (`ClaimsMatchRetentionPolicy`; a claim not seen yet matches).
fn claims_match(input: &Input<'_>, set: &Value, pod: &Value) -> bool {
    let Some(ord) = ordinal(pod) else {
        return true;
    };
    claims(set, ord).iter().all(|(_, c)| {
        input
            .claims
            .get(name_of(c))
            .is_none_or(|claim| claim_owner_up_to_date(claim, set, pod))
    })
}

/// `newVersionedStatefulSetPod`: below the partition (or, without one,
/// below `currentReplicas`), a pod of the current revision.
fn versioned_pod(input: &Input<'_>, ordinal: i64) -> Value {
    let cur = input.current.1;
    let start = start_ordinal(cur);
    let strategy = &cur["spec"]["updateStrategy"];
    let rolling = strategy["type"].as_str().unwrap_or("RollingUpdate") == "RollingUpdate";
    let ru = &strategy["rollingUpdate"];
    let current_replicas = cur["status"]["currentReplicas"].as_i64().unwrap_or(0);
    let partition = ru["partition"].as_i64().unwrap_or(0);
    let use_current = (rolling && ru.is_null() && ordinal < start + current_replicas)
        || (!ru.is_null() && ordinal < start + partition);
    if use_current {
        new_pod(cur, ordinal, input.current.0)
    } else {
        new_pod(input.update.1, ordinal, input.update.0)
    }
}

/// One sync of a StatefulSet (upstream's `updateStatefulSet` and
/// `updateStatefulSetStatus`).
pub fn plan(input: &Input<'_>) -> Plan {
    let set = input.set;
    let update_set = input.update.1;
    let min_ready = set["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let now = input.now;
    let monotonic = set["spec"]["podManagementPolicy"] != "Parallel";
    let mut plan = Plan::default();
    let (start, end) = (start_ordinal(set), end_ordinal(set));

    // Live replicas by ordinal, and the condemned (valid ordinals out of
    // range), highest first.
    let mut live: BTreeMap<i64, &Value> = BTreeMap::new();
    let mut condemned: Vec<&Value> = Vec::new();
    for p in input.pods {
        match ordinal(p) {
            Some(o) if in_range(o, set) => {
                live.insert(o, p);
            }
            Some(o) if o >= 0 => condemned.push(p),
            _ => {}
        }
    }
    condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));

    // The first unhealthy pod: a missing replica counts as unhealthy.
    let first_missing = (start..=end).find(|o| !live.contains_key(o));
    let first_unhealthy_live = live.iter().find(|(_, p)| !healthy(p)).map(|(o, _)| *o);
    let replicas_all_healthy = first_missing.is_none() && first_unhealthy_live.is_none();
    let first_unhealthy_condemned = condemned
        .iter()
        .rev()
        .find(|p| !healthy(p))
        .map(|p| name_of(p).to_string());
    let first_unhealthy: Option<String> = if replicas_all_healthy {
        first_unhealthy_condemned
    } else {
        None // a replica: never one of the condemned
    };

    let counts = count(
        live.values().copied().chain(condemned.iter().copied()),
        min_ready,
        input.current.0,
        input.update.0,
        now,
    );
    let mut current_replicas = counts.current;
    let mut writes = 0usize;

    let deleting = !set["metadata"]["deletionTimestamp"].is_null();
    'sync: {
        if deleting {
            break 'sync;
        }
        // The replicas, in order.
        let mut ord = start;
        while ord <= end {
            if writes >= BURST {
                plan.more = true;
                break 'sync;
            }
            let Some(pod) = live.get(&ord).copied() else {
                let pod = versioned_pod(input, ord);
                let stale = claims(update_set, ord).iter().any(|(_, c)| {
                    input
                        .claims
                        .get(name_of(c))
                        .is_some_and(|claim| claim_is_stale(claim, set, &pod))
                });
                if stale {
                    // Wait for the garbage collector to take the old claim.
                    if monotonic {
                        break 'sync;
                    }
                    ord += 1;
                    continue;
                }
                plan.steps.push(Step::Create(pod));
                writes += 1;
                if monotonic {
                    break 'sync;
                }
                ord += 1;
                continue;
            };
            ord += 1;
            if finished(pod) {
                if !terminating(pod) {
                    plan.steps.push(Step::Delete(
                        name_of(pod).into(),
                        uid(pod).into(),
                        Why::Finished,
                    ));
                    writes += 1;
                }
                if monotonic {
                    break 'sync;
                }
                continue;
            }
            if pod["status"]["phase"] == "Pending" && !templates(set).is_empty() {
                plan.steps.push(Step::Claims(pod.clone()));
            }
            if monotonic
                && (terminating(pod)
                    || !running_and_ready(pod)
                    || !pod_is_available(pod, min_ready, now))
            {
                break 'sync;
            }
            let retention = claims_match(input, update_set, pod);
            let identity = identity_matches(set, pod) && storage_matches(set, pod);
            if !retention {
                plan.steps.push(Step::Retention(pod.clone()));
            }
            if !identity {
                let mut fixed = pod.clone();
                let o = ordinal(pod).unwrap_or(0);
                update_identity(update_set, &mut fixed, o);
                if !storage_matches(update_set, &fixed) {
                    update_storage(update_set, &mut fixed, o);
                }
                plan.steps.push(Step::Update(fixed));
            }
        }
        // The condemned: their claims' owners first, then scale down.
        for pod in &condemned {
            if !claims_match(input, update_set, pod) {
                plan.steps.push(Step::Retention((*pod).clone()));
            }
        }
        for pod in &condemned {
            if writes >= BURST {
                plan.more = true;
                break 'sync;
            }
            if terminating(pod) {
                if monotonic {
                    break 'sync;
                }
                continue;
            }
            let first = first_unhealthy.as_deref() == Some(name_of(pod));
            if monotonic
                && !first
                && (!running_and_ready(pod) || !pod_is_available(pod, min_ready, now))
            {
                break 'sync;
            }
            plan.steps.push(Step::Delete(
                name_of(pod).into(),
                uid(pod).into(),
                Why::ScaleDown,
            ));
            writes += 1;
            if monotonic {
                break 'sync;
            }
        }
        // A rolling update, from the highest ordinal to the partition.
        let strategy = &set["spec"]["updateStrategy"];
        if strategy["type"] == "OnDelete" {
            break 'sync;
        }
        let partition = strategy["rollingUpdate"]["partition"]
            .as_i64()
            .unwrap_or(0)
            .max(0);
        let mut target = end;
        while target >= start + partition {
            let Some(pod) = live.get(&target).copied() else {
                // Made in this sync (Parallel): not yet healthy.
                break 'sync;
            };
            if pod_revision(pod) != input.update.0 && !terminating(pod) {
                plan.steps.push(Step::Delete(
                    name_of(pod).into(),
                    uid(pod).into(),
                    Why::Update,
                ));
                current_replicas -= 1;
                break 'sync;
            }
            if !healthy(pod) {
                break 'sync;
            }
            target -= 1;
        }
    }

    // The status (`completeRollingUpdate` included).
    let mut current_revision = input.current.0;
    let rolling = set["spec"]["updateStrategy"]["type"]
        .as_str()
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let want = replicas(set);
    if rolling && counts.updated == want && counts.ready == want && counts.replicas == want {
        current_replicas = counts.updated;
        current_revision = input.update.0;
    }
    let mut status = json!({
        "replicas": counts.replicas,
        "availableReplicas": counts.available,
        "collisionCount": input.collisions,
    });
    let mut put = |k: &str, v: Value| {
        let empty = v == json!(0) || v == json!("") || v.is_null();
        if !empty {
            status[k] = v;
        }
    };
    put("observedGeneration", set["metadata"]["generation"].clone());
    put("readyReplicas", json!(counts.ready));
    put("currentReplicas", json!(current_replicas));
    put("updatedReplicas", json!(counts.updated));
    put("currentRevision", json!(current_revision));
    put("updateRevision", json!(input.update.0));
    plan.status = status;
    plan
}

/// Whether the set's status differs from `status` in what upstream's
/// `inconsistentStatus` compares.
pub fn status_changed(set: &Value, status: &Value) -> bool {
    let old = &set["status"];
    let int = |v: &Value, k: &str| v[k].as_i64().unwrap_or(0);
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    int(status, "observedGeneration") > int(old, "observedGeneration")
        || [
            "replicas",
            "currentReplicas",
            "readyReplicas",
            "updatedReplicas",
            "availableReplicas",
        ]
        .iter()
        .any(|k| int(status, k) != int(old, k))
        || ["currentRevision", "updateRevision"]
            .iter()
            .any(|k| text(status, k) != text(old, k))
        || int(status, "collisionCount") != int(old, "collisionCount")
}

/// How long until the next pod becomes available, when some ready pod
/// is not yet (upstream requeues after `minReadySeconds`).
pub fn requeue_for_availability(set: &Value, status: &Value) -> Option<i64> {
    let min_ready = set["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    (min_ready > 0 && status["availableReplicas"].as_i64().unwrap_or(0) != replicas(set))
        .then_some(min_ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(extra: Value) -> Value {
        let mut s = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": 2},
            "spec": {
                "replicas": 3,
                "serviceName": "nginx",
                "selector": {"matchLabels": {"app": "web"}},
                "podManagementPolicy": "OrderedReady",
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "www"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            },
        });
        s = crate::patch::apply_merge_patch(&s, &extra).unwrap();
        s
    }

    fn pod(set: &Value, ord: i64, revision: &str, phase: &str, ready: bool) -> Value {
        let mut p = new_pod(set, ord, revision);
        p["metadata"]["uid"] = json!(format!("pod-{ord}"));
        p["status"] = json!({"phase": phase, "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" },
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        p
    }

    fn plan_of(set: &Value, pods: &[Value], claims: &HashMap<String, Value>) -> Plan {
        plan(&Input {
            set,
            current: ("web-a", set),
            update: ("web-a", set),
            collisions: 0,
            pods,
            claims,
            now: Utc::now(),
        })
    }

    fn created_names(p: &Plan) -> Vec<String> {
        p.steps
            .iter()
            .filter_map(|s| match s {
                Step::Create(pod) => Some(name_of(pod).to_string()),
                _ => None,
            })
            .collect()
    }

    fn deleted(p: &Plan) -> Vec<(String, Why)> {
        p.steps
            .iter()
            .filter_map(|s| match s {
                Step::Delete(n, _, w) => Some((n.clone(), *w)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn names_and_ordinals_parse_as_upstream() {
        assert_eq!(parent_and_ordinal("web-0"), Some(("web", Some(0))));
        assert_eq!(parent_and_ordinal("my-web-12"), Some(("my-web", Some(12))));
        assert_eq!(parent_and_ordinal("web"), None);
        assert_eq!(parent_and_ordinal("web-x1"), None);
        assert_eq!(parent_and_ordinal("web-99999999999"), Some(("web", None)));
        let s = set(json!({}));
        assert!(is_member(&s, &json!({"metadata": {"name": "web-3"}})));
        assert!(!is_member(&s, &json!({"metadata": {"name": "webby-3"}})));
    }

    #[test]
    fn pods_get_identity_labels_hostname_and_claims() {
        let s = set(json!({"spec": {"ordinals": {"start": 5}}}));
        let p = new_pod(&s, 5, "web-abc");
        assert_eq!(p["metadata"]["name"], "web-5");
        assert_eq!(p["metadata"]["generateName"], "web-");
        assert_eq!(p["metadata"]["labels"][LABEL_POD_NAME], "web-5");
        assert_eq!(p["metadata"]["labels"][LABEL_POD_INDEX], "5");
        assert_eq!(p["metadata"]["labels"][LABEL_REVISION_HASH], "web-abc");
        assert_eq!(p["metadata"]["labels"]["app"], "web");
        assert_eq!(p["spec"]["hostname"], "web-5");
        assert_eq!(p["spec"]["subdomain"], "nginx");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
        assert_eq!(
            p["spec"]["volumes"][0],
            json!({"name": "www", "persistentVolumeClaim": {"claimName": "www-web-5"}})
        );
        assert!(identity_matches(&s, &p) && storage_matches(&s, &p));
        let c = claims(&s, 5);
        assert_eq!(c[0].0, "www");
        assert_eq!(c[0].1["metadata"]["name"], "www-web-5");
        assert_eq!(c[0].1["metadata"]["namespace"], "ns");
        assert_eq!(c[0].1["metadata"]["labels"]["app"], "web");
        assert_eq!(start_ordinal(&s), 5);
        assert_eq!(end_ordinal(&s), 7);
    }

    #[test]
    fn ordered_ready_creates_one_at_a_time_after_the_previous_is_ready() {
        let s = set(json!({}));
        let none = HashMap::new();
        assert_eq!(created_names(&plan_of(&s, &[], &none)), ["web-0"]);
        // web-0 pending: nothing more.
        let p0 = pod(&s, 0, "web-a", "Pending", false);
        let p = plan_of(&s, std::slice::from_ref(&p0), &none);
        assert!(created_names(&p).is_empty(), "{:?}", p.steps);
        assert!(matches!(p.steps[..], [Step::Claims(_)]));
        // Running but not ready: still nothing.
        let p0 = pod(&s, 0, "web-a", "Running", false);
        assert!(plan_of(&s, &[p0], &none).steps.is_empty());
        // Ready: web-1.
        let p0 = pod(&s, 0, "web-a", "Running", true);
        assert_eq!(
            created_names(&plan_of(&s, std::slice::from_ref(&p0), &none)),
            ["web-1"]
        );
        // minReadySeconds: ready is not enough until available.
        let mut slow = set(json!({"spec": {"minReadySeconds": 3600}}));
        slow["metadata"]["generation"] = json!(3);
        let mut fresh = pod(&slow, 0, "web-a", "Running", true);
        fresh["status"]["conditions"][0]["lastTransitionTime"] =
            json!(crate::replicas::timestamp(Utc::now()));
        let p = plan_of(&slow, &[fresh], &none);
        assert!(created_names(&p).is_empty());
        assert_eq!(requeue_for_availability(&slow, &p.status), Some(3600));
    }

    #[test]
    fn parallel_creates_all_and_failed_pods_are_replaced() {
        let s = set(json!({"spec": {"podManagementPolicy": "Parallel"}}));
        let none = HashMap::new();
        assert_eq!(
            created_names(&plan_of(&s, &[], &none)),
            ["web-0", "web-1", "web-2"]
        );
        let mut failed = pod(&s, 1, "web-a", "Failed", false);
        failed["metadata"]["uid"] = json!("u1");
        let pods = [pod(&s, 0, "web-a", "Running", false), failed];
        let p = plan_of(&s, &pods, &none);
        assert_eq!(deleted(&p), [("web-1".to_string(), Why::Finished)]);
        assert_eq!(created_names(&p), ["web-2"]);
        // Ordered: a failed pod blocks the ones after it.
        let s = set(json!({}));
        let pods = [pod(&s, 0, "web-a", "Failed", false)];
        let p = plan_of(&s, &pods, &none);
        assert_eq!(deleted(&p), [("web-0".to_string(), Why::Finished)]);
        assert!(created_names(&p).is_empty());
    }

    #[test]
    fn scale_down_goes_from_the_highest_ordinal_once_the_rest_is_healthy() {
        let s = set(json!({"spec": {"replicas": 1}}));
        let none = HashMap::new();
        let pods: Vec<Value> = (0..3)
            .map(|o| pod(&s, o, "web-a", "Running", true))
            .collect();
        let p = plan_of(&s, &pods, &none);
        assert_eq!(deleted(&p), [("web-2".to_string(), Why::ScaleDown)]);
        assert_eq!(p.status["replicas"], 3);
        // web-2 terminating: wait for it.
        let mut pods2 = pods.clone();
        pods2[2]["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(deleted(&plan_of(&s, &pods2, &none)).is_empty());
        // web-0 (kept) unhealthy: no scale down.
        let mut pods3 = pods.clone();
        pods3[0] = pod(&s, 0, "web-a", "Running", false);
        assert!(deleted(&plan_of(&s, &pods3, &none)).is_empty());
        // The highest condemned pod goes when it is healthy, or when it is
        // the first unhealthy one; behind a lower unhealthy one it waits.
        let mut pods4 = pods.clone();
        pods4[1] = pod(&s, 1, "web-a", "Running", false);
        assert_eq!(
            deleted(&plan_of(&s, &pods4, &none)),
            [("web-2".to_string(), Why::ScaleDown)]
        );
        let mut pods5 = pods;
        pods5[2] = pod(&s, 2, "web-a", "Running", false);
        assert_eq!(
            deleted(&plan_of(&s, &pods5, &none)),
            [("web-2".to_string(), Why::ScaleDown)]
        );
        pods5[1] = pod(&s, 1, "web-a", "Running", false);
        assert!(deleted(&plan_of(&s, &pods5, &none)).is_empty());
    }

    #[test]
    fn rolling_updates_go_down_to_the_partition_one_at_a_time() {
        let s = set(json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 1}}}}));
        let none = HashMap::new();
        let old: Vec<Value> = (0..3)
            .map(|o| pod(&s, o, "web-a", "Running", true))
            .collect();
        let input = |pods: &'_ [Value]| {
            plan(&Input {
                set: &s,
                current: ("web-a", &s),
                update: ("web-b", &s),
                collisions: 0,
                pods,
                claims: &none,
                now: Utc::now(),
            })
        };
        let p = input(&old);
        assert_eq!(deleted(&p), [("web-2".to_string(), Why::Update)]);
        assert_eq!(p.status["currentReplicas"], 2);
        assert_eq!(p.status["updateRevision"], "web-b");
        // web-2 updated but not ready: wait.
        let mut mid = old.clone();
        mid[2] = pod(&s, 2, "web-b", "Running", false);
        assert!(deleted(&input(&mid)).is_empty());
        mid[2] = pod(&s, 2, "web-b", "Running", true);
        assert_eq!(deleted(&input(&mid)), [("web-1".to_string(), Why::Update)]);
        // Down to the partition: web-0 stays.
        mid[1] = pod(&s, 1, "web-b", "Running", true);
        let p = input(&mid);
        assert!(deleted(&p).is_empty());
        assert_eq!(p.status["updatedReplicas"], 2);
        assert_eq!(p.status["currentRevision"], "web-a");
        // Below the partition a missing pod is made at the current revision.
        let p = input(&mid[1..]);
        let Step::Create(made) = &p.steps[0] else {
            panic!("{:?}", p.steps)
        };
        assert_eq!(pod_revision(made), "web-a");
        // OnDelete: nothing is deleted.
        let ondelete =
            set(json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}));
        let p = plan(&Input {
            set: &ondelete,
            current: ("web-a", &ondelete),
            update: ("web-b", &ondelete),
            collisions: 0,
            pods: &old,
            claims: &none,
            now: Utc::now(),
        });
        assert!(deleted(&p).is_empty());
    }

    #[test]
    fn a_complete_rolling_update_moves_the_current_revision() {
        let s = set(json!({}));
        let none = HashMap::new();
        let pods: Vec<Value> = (0..3)
            .map(|o| pod(&s, o, "web-b", "Running", true))
            .collect();
        let p = plan(&Input {
            set: &s,
            current: ("web-a", &s),
            update: ("web-b", &s),
            collisions: 0,
            pods: &pods,
            claims: &none,
            now: Utc::now(),
        });
        assert_eq!(p.status["currentRevision"], "web-b");
        assert_eq!(p.status["currentReplicas"], 3);
        assert_eq!(p.status["readyReplicas"], 3);
        assert_eq!(p.status["availableReplicas"], 3);
        assert_eq!(p.status["observedGeneration"], 2);
        assert!(status_changed(&s, &p.status));
        let mut seen = s.clone();
        seen["status"] = p.status.clone();
        assert!(!status_changed(&seen, &p.status));
    }

    #[test]
    fn retention_policies_decide_the_claims_owners() {
        let claim = json!({"metadata": {"name": "www-web-2"}});
        let keep = set(json!({}));
        let p2 = pod(&keep, 2, "web-a", "Running", true);
        assert!(claim_owner_up_to_date(&claim, &keep, &p2));
        // whenDeleted: Delete: the set owns it.
        let del = set(
            json!({"spec": {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"}}}),
        );
        assert!(!claim_owner_up_to_date(&claim, &del, &p2));
        let refs = claim_owner_refs(&claim, &del, &p2);
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0]["uid"], "set-uid");
        assert_eq!(refs[0]["controller"], true);
        let mut owned = claim.clone();
        owned["metadata"]["ownerReferences"] = json!(refs);
        assert!(claim_owner_up_to_date(&owned, &del, &p2));
        // whenScaled: Delete, scaled down to 2: the pod owns it.
        let scaled = set(json!({"spec": {"replicas": 2,
            "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}}));
        assert!(!claim_owner_up_to_date(&claim, &scaled, &p2));
        let refs = claim_owner_refs(&claim, &scaled, &p2);
        assert_eq!(refs[0]["kind"], "Pod");
        assert_eq!(refs[0]["uid"], "pod-2");
        // Back to Retain: the references go.
        owned["metadata"]["ownerReferences"] = json!(refs);
        assert!(!claim_owner_up_to_date(&owned, &keep, &p2));
        assert!(claim_owner_refs(&owned, &keep, &p2).is_empty());
        // A claim of an earlier pod of that name is stale.
        let mut next = new_pod(&scaled, 2, "web-a");
        next["metadata"]["uid"] = json!("new-uid");
        assert!(claim_is_stale(&owned, &scaled, &next));
        assert!(!claim_is_stale(&owned, &keep, &next));
        // Another controller: left alone.
        let mut other = claim.clone();
        other["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Foo", "name": "x", "uid": "x", "controller": true}]);
        assert!(claim_owner_up_to_date(&other, &del, &p2));
    }

    #[test]
    fn stale_claims_block_the_pod_and_policy_fixes_are_planned() {
        let scaled = set(
            json!({"spec": {"persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}}),
        );
        let mut claims_seen = HashMap::new();
        claims_seen.insert(
            "www-web-0".to_string(),
            json!({"metadata": {"name": "www-web-0", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "uid": "old", "controller": true}]}}),
        );
        assert!(plan_of(&scaled, &[], &claims_seen).steps.is_empty());
        // A kept pod's claim owned by a set that retains: fixed.
        let keep = set(json!({}));
        let p0 = pod(&keep, 0, "web-a", "Running", true);
        claims_seen.insert(
            "www-web-0".to_string(),
            json!({"metadata": {"name": "www-web-0", "ownerReferences": [
                controller_ref(&keep, "apps/v1", "StatefulSet")]}}),
        );
        let p = plan_of(&keep, &[p0], &claims_seen);
        assert!(matches!(p.steps[0], Step::Retention(_)), "{:?}", p.steps);
    }

    #[test]
    fn revisions_restore_templates_and_are_found_again() {
        let s = set(json!({"metadata": {"annotations": {"kubernetes.io/change-cause": "v1"}}}));
        let r1 = new_revision(&s, 1, 0);
        assert!(r1["metadata"]["name"].as_str().unwrap().starts_with("web-"));
        assert_eq!(
            r1["metadata"]["annotations"]["kubernetes.io/change-cause"],
            "v1"
        );
        assert_eq!(
            update_revision(&s, std::slice::from_ref(&r1)),
            UpdateRevision::Newest
        );
        let s2 = set(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:2"}]}}}}),
        );
        assert_eq!(
            update_revision(&s2, std::slice::from_ref(&r1)),
            UpdateRevision::Create
        );
        let r2 = new_revision(&s2, 2, 0);
        assert_ne!(r1["metadata"]["name"], r2["metadata"]["name"]);
        assert_ne!(
            new_revision(&s2, 2, 1)["metadata"]["name"],
            r2["metadata"]["name"]
        );
        assert_eq!(
            update_revision(&s, &[r1.clone(), r2.clone()]),
            UpdateRevision::Renumber(0, 3)
        );
        let back = apply_revision(&s2, &r1).unwrap();
        assert_eq!(back["spec"]["template"], s["spec"]["template"]);
        assert_eq!(back["spec"]["replicas"], 3);
    }
}
