//! Server-side apply and `metadata.managedFields`.
//!
//! Every write records which field manager set which fields: a create, an
//! update or a (non-apply) patch adds the fields it changed to its
//! manager's `Update` entry and takes them from every other entry; an apply
//! makes its manager's `Apply` entry exactly the fields of its
//! configuration, fails with a conflict when it would change a field
//! another manager owns (unless forced, which takes ownership), and
//! removes the fields it applied before and no longer applies, unless
//! another manager still owns them. The merge follows the schemas
//! ([`typed`]); the sets are [`fieldset`]s.

pub mod fieldset;
#[cfg(test)]
mod sequences;
pub mod typed;

use crate::error::Cause;
use fieldset::{Element, FieldSet};
use serde_json::{Value, json};
use typed::Schema;

/// Who writes, and through what.
pub struct Manager<'a> {
    /// The field manager (`fieldManager`, or the User-Agent's product).
    pub name: &'a str,
    /// `status` for the status subresource, else `None`.
    pub subresource: Option<&'a str>,
    /// The request's `apiVersion`.
    pub api_version: &'a str,
    /// Whether the resource has a `status` subresource (then the main
    /// resource's writes own no status field).
    pub has_status: bool,
    /// RFC 3339, the entries' `time`.
    pub now: &'a str,
}

/// One `managedFields` entry.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    fn is(&self, m: &Manager<'_>, operation: &str) -> bool {
        self.manager == m.name
            && self.operation == operation
            && self.subresource.as_deref() == m.subresource
    }

    fn to_json(&self) -> Value {
        let mut e = json!({
            "manager": self.manager, "operation": self.operation,
            "apiVersion": self.api_version, "time": self.time,
            "fieldsType": "FieldsV1", "fieldsV1": self.set.to_fields_v1(),
        });
        if let Some(s) = &self.subresource {
            e["subresource"] = json!(s);
        }
        e
    }

    fn from_json(v: &Value) -> Result<Entry, String> {
        let text = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        if v.get("fieldsType").is_some_and(|t| t != "FieldsV1") {
            return Err("fieldsType must be FieldsV1".into());
        }
        let operation = text("operation");
        if operation != "Apply" && operation != "Update" {
            return Err(format!("unknown operation {operation:?}"));
        }
        Ok(Entry {
            manager: text("manager"),
            operation,
            api_version: text("apiVersion"),
            time: text("time"),
            subresource: v
                .get("subresource")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(String::from),
            set: FieldSet::from_fields_v1(v.get("fieldsV1").unwrap_or(&json!({})))?,
        })
    }
}

fn read(obj: &Value) -> Option<Result<Vec<Entry>, String>> {
    let list = obj.get("metadata")?.get("managedFields")?;
    Some(match list.as_array() {
        Some(items) => items.iter().map(Entry::from_json).collect(),
        None if list.is_null() => Ok(Vec::new()),
        None => Err("managedFields must be a list".into()),
    })
}

fn write(obj: &mut Value, entries: &[Entry]) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.set.is_empty())
        .map(Entry::to_json)
        .collect();
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Most `Update` managers an object keeps (upstream's
/// `DefaultMaxUpdateManagers`).
pub const MAX_UPDATE_MANAGERS: usize = 10;
/// The entry the oldest `Update` managers are merged into beyond the cap.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// Upstream's `capUpdateManagers`: beyond [`MAX_UPDATE_MANAGERS`] `Update`
/// entries, the oldest (by time, then name) are merged, one API version
/// each, into an `ancient-changes` entry of that version, until the count
/// is under the cap.
fn cap_updates(entries: &mut Vec<Entry>) {
    let is_update = |e: &Entry| e.operation == "Update" && !e.set.is_empty();
    let mut length = entries.iter().filter(|e| is_update(e)).count();
    if length <= MAX_UPDATE_MANAGERS {
        return;
    }
    let mut oldest: Vec<usize> = (0..entries.len())
        .filter(|&i| is_update(&entries[i]) && entries[i].manager != ANCIENT_CHANGES)
        .collect();
    oldest.sort_by(|&a, &b| {
        (&entries[a].time, &entries[a].manager).cmp(&(&entries[b].time, &entries[b].manager))
    });
    let mut merged = std::collections::BTreeSet::new();
    for i in oldest {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let e = entries[i].clone();
        let bucket = entries.iter().position(|b| {
            b.manager == ANCIENT_CHANGES
                && b.operation == "Update"
                && b.api_version == e.api_version
                && b.subresource.is_none()
        });
        match bucket {
            Some(b) => {
                entries[b].set.union(&e.set);
                entries[b].time = e.time.clone();
            }
            None => entries.push(Entry {
                manager: ANCIENT_CHANGES.into(),
                operation: "Update".into(),
                api_version: e.api_version.clone(),
                time: e.time.clone(),
                subresource: None,
                set: e.set.clone(),
            }),
        }
        // A manager merged into a new bucket is replaced by it: the count
        // only falls when the bucket was already there.
        if bucket.is_some() {
            length -= 1;
        }
        merged.insert(i);
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        !merged.contains(&(i - 1))
    });
}

/// Fields no manager owns: the type, server-set metadata, and what the
/// subresource does not write (status from the main resource when the
/// kind has a status subresource; all but status from `status`).
fn owned_part(mut set: FieldSet, m: &Manager<'_>) -> FieldSet {
    let f = |s: &str| Element::Field(s.into());
    set.children.remove(&f("apiVersion"));
    set.children.remove(&f("kind"));
    if let Some(meta) = set.children.get_mut(&f("metadata")) {
        for k in [
            "name",
            "namespace",
            "generateName",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ] {
            meta.children.remove(&f(k));
        }
        meta.member = false;
    }
    match m.subresource {
        Some("status") => set.children.retain(|e, _| *e == f("status")),
        Some(_) => {}
        None if m.has_status => {
            set.children.remove(&f("status"));
        }
        None => {}
    }
    set.member = false;
    set
}

fn without_managed_fields(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    v
}

/// The entries a write starts from: the request's own when it sets them
/// (an empty list resets them all), else the live object's (a client that
/// does not know the field, or sent invalid entries, loses nothing).
fn base_entries(old: Option<&Value>, new: &Value) -> (Vec<Entry>, bool) {
    let live = || old.and_then(read).and_then(Result::ok).unwrap_or_default();
    match read(new) {
        None => (live(), false),
        Some(Ok(entries)) if entries.iter().all(|e| e.set.is_empty()) => {
            let reset = new["metadata"]["managedFields"]
                .as_array()
                .is_some_and(|l| l.is_empty() || l.iter().all(|e| e == &json!({})))
                && old.and_then(read).is_some();
            if reset {
                (Vec::new(), true)
            } else {
                (live(), false)
            }
        }
        Some(Ok(entries)) => (entries, false),
        Some(Err(_)) => (live(), false),
    }
}

/// Records a create (`old` = `None`), update or patch by `m` in
/// `new.metadata.managedFields`.
pub fn record_update(old: Option<&Value>, new: &mut Value, schema: Schema<'_>, m: &Manager<'_>) {
    let (mut entries, reset) = base_entries(old, new);
    if reset {
        write(new, &[]);
        return;
    }
    let bare_new = without_managed_fields(new);
    let changed = match old {
        Some(old) => typed::changed(&without_managed_fields(old), &bare_new, schema),
        None => typed::to_fieldset(&bare_new, schema),
    };
    let changed = owned_part(changed, m);
    let present = typed::to_fieldset(&bare_new, schema);
    let mine = changed.intersection(&present);
    for e in entries.iter_mut().filter(|e| !e.is(m, "Update")) {
        e.set = e.set.difference(&changed);
    }
    if !mine.is_empty() {
        match entries.iter_mut().find(|e| e.is(m, "Update")) {
            Some(e) => {
                e.set.union(&mine);
                e.time = m.now.to_string();
                e.api_version = m.api_version.to_string();
            }
            None => entries.push(Entry {
                manager: m.name.to_string(),
                operation: "Update".into(),
                api_version: m.api_version.to_string(),
                time: m.now.to_string(),
                subresource: m.subresource.map(String::from),
                set: mine,
            }),
        }
    } else if let Some(e) = entries.iter_mut().find(|e| e.is(m, "Update")) {
        // Removed fields leave even the writer's own entry.
        e.set = e.set.difference(&changed);
    }
    cap_updates(&mut entries);
    write(new, &entries);
}

/// A conflict: the field, and who owns it in which version.
pub struct Conflicts(pub Vec<Cause>);

impl Conflicts {
    /// Upstream's message: `Apply failed with 1 conflict: conflict with
    /// "mgr" using apps/v1: .spec.replicas`.
    pub fn message(&self) -> String {
        let n = self.0.len();
        let list: Vec<String> = self
            .0
            .iter()
            .map(|c| format!("{}: {}", c.message, c.field))
            .collect();
        let plural = if n == 1 { "" } else { "s" };
        format!(
            "Apply failed with {n} conflict{plural}: {}",
            list.join("\n")
        )
    }
}

/// Applies `config` by `m` onto `live` (`None`: the object does not exist
/// yet): the merged object with its managed fields, or the conflicts.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    schema: Schema<'_>,
    m: &Manager<'_>,
    force: bool,
) -> Result<Value, Conflicts> {
    let empty = json!({});
    let live_obj = live.unwrap_or(&empty);
    let mut entries = live.and_then(read).and_then(Result::ok).unwrap_or_default();
    let bare_live = without_managed_fields(live_obj);
    let config = without_managed_fields(config);
    let applied = owned_part(typed::to_fieldset(&config, schema), m);
    let mut merged = typed::merge(&bare_live, &config, schema);
    let changed = owned_part(typed::changed(&bare_live, &merged, schema), m);
    let contested = changed.intersection(&applied);
    let mut causes = Vec::new();
    for e in entries.iter_mut().filter(|e| !e.is(m, "Apply")) {
        let lost = e.set.intersection(&contested);
        if lost.is_empty() {
            continue;
        }
        if force {
            e.set = e.set.difference(&lost);
            continue;
        }
        for path in lost.paths() {
            causes.push(Cause {
                reason: "FieldManagerConflict".into(),
                field: fieldset::display(&path),
                message: format!("conflict with {:?} using {}", e.manager, e.api_version),
            });
        }
    }
    if !causes.is_empty() {
        return Err(Conflicts(causes));
    }
    // What this manager applied before and applies no more goes, unless
    // another manager still owns it.
    let previous_entry = entries.iter().find(|e| e.is(m, "Apply"));
    // An apply that owns what it owned keeps the entry's time, so applying
    // an unchanged configuration changes nothing and is not written.
    let time = previous_entry
        .filter(|e| e.set == applied && e.api_version == m.api_version)
        .map_or_else(|| m.now.to_string(), |e| e.time.clone());
    let previous = previous_entry.map(|e| e.set.clone()).unwrap_or_default();
    let mut dropped = previous.difference(&applied);
    let mut owned = applied.clone();
    for e in entries.iter().filter(|e| !e.is(m, "Apply")) {
        dropped = dropped.difference(&e.set);
        owned.union(&e.set);
    }
    if !dropped.is_empty() {
        typed::remove(&mut merged, &dropped, &owned, schema);
    }
    let at = entries
        .iter()
        .position(|e| e.is(m, "Apply"))
        .unwrap_or(entries.len());
    entries.retain(|e| !e.is(m, "Apply"));
    entries.insert(
        at.min(entries.len()),
        Entry {
            manager: m.name.to_string(),
            operation: "Apply".into(),
            api_version: m.api_version.to_string(),
            time,
            subresource: m.subresource.map(String::from),
            set: applied,
        },
    );
    cap_updates(&mut entries);
    write(&mut merged, &entries);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openapi::definitions;

    fn schema() -> Schema<'static> {
        Schema::new(&definitions::builtin()["io.k8s.api.apps.v1.Deployment"])
    }

    fn mgr(name: &str) -> Manager<'_> {
        Manager {
            name,
            subresource: None,
            api_version: "apps/v1",
            has_status: true,
            now: "2026-12-01T00:00:00Z",
        }
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    fn owners(obj: &Value) -> Vec<(String, String)> {
        obj["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap().to_string(),
                    e["operation"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn a_second_manager_conflicts_unless_forced() {
        let a = apply(None, &deployment(1, "nginx"), schema(), &mgr("a"), false)
            .ok()
            .unwrap();
        assert_eq!(owners(&a), [("a".to_string(), "Apply".to_string())]);
        // Same values: shared ownership, no conflict.
        let shared = apply(
            Some(&a),
            &deployment(1, "nginx"),
            schema(),
            &mgr("b"),
            false,
        )
        .ok()
        .unwrap();
        assert_eq!(owners(&shared).len(), 2);
        // A different replicas value conflicts with a.
        let err = apply(
            Some(&a),
            &deployment(2, "nginx"),
            schema(),
            &mgr("b"),
            false,
        )
        .err()
        .unwrap();
        assert_eq!(err.0.len(), 1);
        assert_eq!(err.0[0].field, ".spec.replicas");
        assert!(err.message().contains("conflict with \"a\" using apps/v1"));
        // Forced: b owns replicas, a keeps the image.
        let forced = apply(Some(&a), &deployment(2, "nginx"), schema(), &mgr("b"), true)
            .ok()
            .unwrap();
        assert_eq!(forced["spec"]["replicas"], 2);
        let a_entry = &forced["metadata"]["managedFields"][0];
        assert!(a_entry["fieldsV1"]["f:spec"].get("f:replicas").is_none());
    }

    #[test]
    fn fields_dropped_from_the_config_are_removed_unless_shared() {
        let mut with_paused = deployment(1, "nginx");
        with_paused["spec"]["paused"] = json!(true);
        with_paused["spec"]["minReadySeconds"] = json!(5);
        let a = apply(None, &with_paused, schema(), &mgr("a"), false)
            .ok()
            .unwrap();
        // b shares minReadySeconds.
        let b_config = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": {"minReadySeconds": 5}});
        let both = apply(Some(&a), &b_config, schema(), &mgr("b"), false)
            .ok()
            .unwrap();
        let again = apply(
            Some(&both),
            &deployment(1, "nginx"),
            schema(),
            &mgr("a"),
            false,
        )
        .ok()
        .unwrap();
        assert!(again["spec"].get("paused").is_none(), "{again}");
        assert_eq!(again["spec"]["minReadySeconds"], 5);
    }

    #[test]
    fn more_than_ten_updaters_merge_the_oldest_into_ancient_changes() {
        let mut obj = deployment(1, "nginx");
        record_update(None, &mut obj, schema(), &mgr("creator"));
        for i in 0..16 {
            let mut next = obj.clone();
            let mut labels = obj["metadata"]["labels"].clone();
            if !labels.is_object() {
                labels = json!({});
            }
            labels[format!("l{i}")] = json!("x");
            next["metadata"]["labels"] = labels;
            let name = format!("m{i:02}");
            let time = format!("2026-12-01T00:00:{i:02}Z");
            let m = Manager {
                now: &time,
                ..mgr(&name)
            };
            record_update(Some(&obj), &mut next, schema(), &m);
            obj = next;
        }
        let owners = owners(&obj);
        assert_eq!(owners.len(), MAX_UPDATE_MANAGERS, "{owners:?}");
        let ancient = obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == ANCIENT_CHANGES)
            .expect("an ancient-changes entry");
        // The creator's fields and the oldest labels are in it.
        assert!(
            ancient["fieldsV1"]["f:spec"].get("f:replicas").is_some(),
            "{ancient}"
        );
        assert!(
            ancient["fieldsV1"]["f:metadata"]["f:labels"]
                .get("f:l0")
                .is_some(),
            "{ancient}"
        );
        // The newest managers keep their own entries.
        assert!(owners.contains(&("m15".to_string(), "Update".to_string())));
    }

    #[test]
    fn updates_take_the_fields_they_change() {
        let a = apply(None, &deployment(1, "nginx"), schema(), &mgr("a"), false)
            .ok()
            .unwrap();
        let mut edited = a.clone();
        edited["spec"]["replicas"] = json!(4);
        record_update(Some(&a), &mut edited, schema(), &mgr("kubectl-edit"));
        assert_eq!(
            owners(&edited),
            [
                ("a".into(), "Apply".into()),
                ("kubectl-edit".into(), "Update".into())
            ]
        );
        let edit = &edited["metadata"]["managedFields"][1]["fieldsV1"];
        assert_eq!(edit, &json!({"f:spec": {"f:replicas": {}}}));
        // Now a's apply of replicas 1 conflicts with kubectl-edit.
        let err = apply(
            Some(&edited),
            &deployment(1, "nginx"),
            schema(),
            &mgr("a"),
            false,
        )
        .err()
        .unwrap();
        assert!(err.0[0].message.contains("kubectl-edit"));
        // A create records every field but the server's own.
        let mut created = deployment(1, "nginx");
        record_update(None, &mut created, schema(), &mgr("kubectl-create"));
        let set = &created["metadata"]["managedFields"][0]["fieldsV1"];
        assert!(set.get("f:apiVersion").is_none());
        assert!(set["f:spec"].get("f:replicas").is_some());
        // An empty list resets ownership.
        let mut reset = edited.clone();
        reset["metadata"]["managedFields"] = json!([]);
        reset["spec"]["replicas"] = json!(5);
        record_update(Some(&edited), &mut reset, schema(), &mgr("x"));
        assert!(reset["metadata"].get("managedFields").is_none());
    }
}
