//! ControllerRevisions, as upstream's `pkg/controller/history` keeps them
//! for the DaemonSet and StatefulSet controllers (no IO): the hash that
//! names a revision (`<parent>-<hash>`, labelled
//! `controller-revision-hash`), the revision object itself, the order of a
//! history, the next revision number and which old revisions a history
//! limit deletes. The controllers in the registry read and write them.

use serde_json::{Value, json};
use std::cmp::Ordering;

/// `controller-revision-hash`: on a ControllerRevision, its hash; on a pod,
/// the revision it was made from (a DaemonSet's hash, a StatefulSet's
/// revision name).
pub const LABEL_REVISION_HASH: &str = "controller-revision-hash";

/// A stable hash of `value` (FNV-1a of it, object keys in order, then of
/// the collision count), written in the alphabet of upstream's
/// `SafeEncodeString`, so it names objects without spelling words.
pub fn hash(value: &Value, collision_count: Option<i64>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(value, &mut eat);
    if let Some(c) = collision_count {
        eat(&c.to_le_bytes());
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let digits = h.to_string();
    digits
        .bytes()
        .map(|d| ALPHABET[usize::from(d - b'0') % ALPHABET.len()] as char)
        .collect()
}

/// Feeds `v` to `eat` with object keys in order, whatever order the map
/// keeps them in.
fn feed(v: &Value, eat: &mut impl FnMut(&[u8])) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            eat(b"{");
            for k in keys {
                eat(k.as_bytes());
                eat(b":");
                feed(&m[k], eat);
                eat(b",");
            }
            eat(b"}");
        }
        Value::Array(a) => {
            eat(b"[");
            for x in a {
                feed(x, eat);
                eat(b",");
            }
            eat(b"]");
        }
        other => eat(other.to_string().as_bytes()),
    }
}

/// Upstream's `ControllerRevisionName`: `<parent>-<hash>`, the parent's
/// name cut to 223 characters so the whole stays a valid name.
pub fn revision_name(parent: &str, hash: &str) -> String {
    let prefix: String = parent.chars().take(223).collect();
    format!("{prefix}-{hash}")
}

/// What a DaemonSet's or StatefulSet's revision records (upstream's
/// `getPatch`): a strategic merge patch that puts `template` back,
/// replacing whatever template the object has then.
pub fn template_patch(template: &Value) -> Value {
    let mut t = if template.is_object() {
        template.clone()
    } else {
        json!({})
    };
    t["$patch"] = json!("replace");
    json!({"spec": {"template": t}})
}

/// A ControllerRevision of `data` owned by `owner_ref` (upstream's
/// `NewControllerRevision`): labelled as the template is plus
/// `controller-revision-hash`, named `<parent>-<hash>`.
pub fn new_revision(
    parent: &Value,
    owner_ref: Value,
    template_labels: &Value,
    data: Value,
    revision: i64,
    hash: &str,
) -> Value {
    let mut labels = if template_labels.is_object() {
        template_labels.clone()
    } else {
        json!({})
    };
    labels[LABEL_REVISION_HASH] = json!(hash);
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(name, hash),
            "namespace": parent["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [owner_ref],
        },
        "data": data,
        "revision": revision,
    })
}

/// A revision's number.
pub fn number(revision: &Value) -> i64 {
    revision["revision"].as_i64().unwrap_or(0)
}

/// Upstream's `SortControllerRevisions` order: by number, then creation,
/// then name.
pub fn by_number(a: &Value, b: &Value) -> Ordering {
    let key = |r: &Value| {
        (
            number(r),
            r["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            r["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    key(a).cmp(&key(b))
}

/// The number a new revision gets: one past the newest of `sorted`.
pub fn next_number(sorted: &[Value]) -> i64 {
    sorted.last().map_or(1, |r| number(r) + 1)
}

/// Which revisions of `sorted` (oldest first) a history limit deletes:
/// those not `live`, oldest first, as many as exceed `limit` (upstream's
/// `truncateHistory` / `cleanupHistory`). A negative limit keeps all.
pub fn beyond_limit(sorted: &[Value], live: impl Fn(&Value) -> bool, limit: i64) -> Vec<&Value> {
    let old: Vec<&Value> = sorted.iter().filter(|r| !live(r)).collect();
    if limit < 0 {
        return Vec::new();
    }
    let excess = old.len().saturating_sub(limit as usize);
    old.into_iter().take(excess).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_differ_by_value_and_collisions() {
        let a = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}]}});
        let b = json!({"spec": {"containers": [{"name": "a", "image": "x:2"}]}});
        assert_eq!(hash(&a, None), hash(&a.clone(), None));
        assert_ne!(hash(&a, None), hash(&b, None));
        assert_ne!(hash(&a, None), hash(&a, Some(1)));
        assert!(hash(&a, None).chars().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn revisions_are_named_labelled_and_owned() {
        let parent = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u"}});
        let data = template_patch(&json!({"metadata": {"labels": {"app": "web"}}}));
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        let r = new_revision(
            &parent,
            json!({"uid": "u", "controller": true}),
            &json!({"app": "web"}),
            data,
            3,
            "abc",
        );
        assert_eq!(r["metadata"]["name"], "web-abc");
        assert_eq!(r["metadata"]["labels"]["app"], "web");
        assert_eq!(r["metadata"]["labels"][LABEL_REVISION_HASH], "abc");
        assert_eq!(r["revision"], 3);
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
    }

    #[test]
    fn history_limits_delete_the_oldest_dead_revisions() {
        let rev = |name: &str, n: i64| json!({"metadata": {"name": name}, "revision": n});
        let mut all = vec![rev("c", 3), rev("a", 1), rev("d", 4), rev("b", 2)];
        all.sort_by(by_number);
        assert_eq!(next_number(&all), 5);
        assert_eq!(next_number(&[]), 1);
        let live = |r: &Value| r["metadata"]["name"] == "d" || r["metadata"]["name"] == "a";
        let gone: Vec<&str> = beyond_limit(&all, live, 1)
            .iter()
            .map(|r| r["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(gone, ["b"]);
        assert_eq!(beyond_limit(&all, live, 0).len(), 2);
        assert!(beyond_limit(&all, live, -1).is_empty());
    }
}
