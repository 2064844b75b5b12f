//! Object metadata rules on JSON objects: reading name/namespace/labels and
//! the fields the server owns on create and update (uid, creationTimestamp,
//! resourceVersion, generation, deletionTimestamp), as upstream's
//! `BeforeCreate`/`BeforeUpdate` do.

use rand::Rng;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// `metadata.name`, if set and non-empty.
pub fn name(obj: &Value) -> Option<&str> {
    str_field(obj, "name")
}

/// `metadata.namespace`, if set and non-empty.
pub fn namespace(obj: &Value) -> Option<&str> {
    str_field(obj, "namespace")
}

/// `metadata.<field>` as a non-empty string.
pub fn str_field<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?
        .get(field)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// `metadata.labels` (string values only).
pub fn labels(obj: &Value) -> BTreeMap<String, String> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The `metadata` map, created if missing or not an object.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let map = obj.as_object_mut().expect("object");
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().expect("object")
}

/// Sets `metadata.resourceVersion` to a storage revision.
pub fn set_resource_version(obj: &mut Value, revision: u64) {
    metadata_mut(obj).insert(
        "resourceVersion".into(),
        Value::String(revision.to_string()),
    );
}

/// Parses a resourceVersion string; empty means none.
pub fn parse_resource_version(rv: &str) -> Result<Option<u64>, String> {
    if rv.is_empty() {
        return Ok(None);
    }
    // Digits only, as Go's `strconv.ParseUint` (Rust's parse takes a `+`).
    rv.parse::<u64>()
        .ok()
        .filter(|_| rv.bytes().all(|b| b.is_ascii_digit()))
        .map(Some)
        .ok_or_else(|| format!("invalid resource version: {rv:?}"))
}

/// Upstream's continue token: base64url(JSON{v, rv, start}), `start` the
/// key to go on from, relative to the list's prefix (`<ns>/<name>` or
/// `<name>`).
pub fn encode_continue(rv: u64, start: &str) -> String {
    use base64::Engine;
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// Decodes a continue token into its revision and start key; anything
/// else than a token [`encode_continue`] could have made (or a start key
/// reaching outside the list's prefix) is a 400.
pub fn decode_continue(token: &str) -> Result<(u64, String), crate::error::ApiError> {
    use base64::Engine;
    let bad =
        |why: &str| crate::error::ApiError::BadRequest(format!("continue key is not valid: {why}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad("not JSON"))?;
    if v["v"] != "meta.k8s.io/v1" {
        return Err(bad("server does not recognize this encoded version"));
    }
    let rv = v["rv"]
        .as_u64()
        .filter(|r| *r > 0)
        .ok_or_else(|| bad("incorrect encoded start resourceVersion"))?;
    let start = v["start"].as_str().ok_or_else(|| bad("missing start"))?;
    // Upstream's check (`path.Clean(start) == start`, relative): no empty,
    // `.` or `..` segment. A name may hold `..` (`a..b` is a valid event or
    // RBAC name), a segment may not.
    if start
        .split('/')
        .any(|segment| matches!(segment, "" | "." | ".."))
    {
        return Err(bad("path traversal attempt"));
    }
    Ok((rv, start.to_string()))
}

/// RFC 3339 timestamp with second precision, as Kubernetes writes them.
pub fn timestamp(now: chrono::DateTime<chrono::Utc>) -> String {
    now.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The suffix alphabet upstream's `SimpleNameGenerator` uses (no vowels, no
/// look-alike characters).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `generateName` + 5 random characters, truncated as upstream does.
pub fn generate_name(base: &str) -> String {
    let base = if base.len() > 58 { &base[..58] } else { base };
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// Fields a client may not set on create: the server owns them
/// (`managedFields` are the field manager's business, `managed`).
pub fn prepare_for_create(obj: &mut Value, now: chrono::DateTime<chrono::Utc>) {
    let meta = metadata_mut(obj);
    for f in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(f);
    }
    meta.insert(
        "uid".into(),
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    meta.insert("creationTimestamp".into(), Value::String(timestamp(now)));
    meta.insert("generation".into(), json!(1));
}

/// Everything but `metadata` and `status`: a change here bumps `generation`.
fn spec_part(obj: &Value) -> Map<String, Value> {
    obj.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Carries server-owned fields from the stored object into an update and
/// bumps `generation` when anything outside metadata/status changed.
pub fn prepare_for_update(new: &mut Value, old: &Value) {
    let changed = spec_part(new) != spec_part(old);
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let meta = metadata_mut(new);
    meta.remove("selfLink");
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        match old_meta.get(f) {
            Some(v) => meta.insert(f.into(), v.clone()),
            None => meta.remove(f),
        };
    }
    let generation = old_meta
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    meta.insert(
        "generation".into(),
        json!(if changed { generation + 1 } else { generation }),
    );
}

/// `obj` as a `meta.k8s.io/v1` `PartialObjectMetadata`: its metadata alone
/// (what upstream's metadata client, the garbage collector and
/// controller-runtime's metadata informers ask for).
pub fn partial_object_metadata(obj: &Value) -> Value {
    serde_json::json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| serde_json::json!({})),
    })
}

/// Whether an `Accept` header asks for `PartialObjectMetadata` (or its
/// list).
pub fn wants_partial_metadata(accept: &str) -> bool {
    accept
        .split(',')
        .any(|m| m.contains("as=PartialObjectMetadata") && m.contains("g=meta.k8s.io"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        use base64::Engine;
        let t = encode_continue(42, "default/cm-7");
        assert_eq!(
            decode_continue(&t).unwrap(),
            (42, "default/cm-7".to_string())
        );
        assert!(decode_continue("!!!").is_err());
        let evil = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(json!({"v": "meta.k8s.io/v1", "rv": 1, "start": "../x"}).to_string());
        assert!(decode_continue(&evil).is_err());
        // `..` inside a name is no traversal.
        let t = encode_continue(9, "default/pod..1");
        assert_eq!(decode_continue(&t).unwrap(), (9, "default/pod..1".into()));
    }

    #[test]
    fn create_then_update_metadata() {
        let now = chrono::Utc::now();
        let mut obj = json!({"metadata": {"name": "a", "resourceVersion": "9", "uid": "client"}, "data": {"k": "1"}});
        prepare_for_create(&mut obj, now);
        assert_ne!(obj["metadata"]["uid"], "client");
        assert!(obj["metadata"].get("resourceVersion").is_none());
        assert_eq!(obj["metadata"]["generation"], 1);

        let mut same = json!({"metadata": {"name": "a", "uid": "evil", "labels": {"x": "y"}}, "data": {"k": "1"}});
        prepare_for_update(&mut same, &obj);
        assert_eq!(same["metadata"]["uid"], obj["metadata"]["uid"]);
        assert_eq!(
            same["metadata"]["generation"], 1,
            "label change keeps generation"
        );
        let mut changed = json!({"metadata": {"name": "a"}, "data": {"k": "2"}});
        prepare_for_update(&mut changed, &same);
        assert_eq!(changed["metadata"]["generation"], 2);
    }

    #[test]
    fn generated_names() {
        let n = generate_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n.starts_with("web-"));
        assert!(n[4..].bytes().all(|b| NAME_ALPHABET.contains(&b)));
        assert_eq!(generate_name(&"x".repeat(70)).len(), 63);
    }

    #[test]
    fn resource_versions() {
        assert_eq!(parse_resource_version(""), Ok(None));
        assert_eq!(parse_resource_version("42"), Ok(Some(42)));
        assert!(parse_resource_version("abc").is_err());
    }
}
