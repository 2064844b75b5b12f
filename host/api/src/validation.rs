//! Object validation: names (DNS-1123), labels, annotations, and the typed
//! shape of built-in kinds (decoded through k8s-openapi's structs).

use crate::error::{ApiError, Cause, Target};
use crate::resource::ResourceInfo;
use regex::Regex;
use serde_json::Value;
use std::sync::LazyLock;

const DNS1123_LABEL: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
static LABEL_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("^{DNS1123_LABEL}$")).unwrap());
static SUBDOMAIN_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(r"^{DNS1123_LABEL}(\.{DNS1123_LABEL})*$")).unwrap());
static QUALIFIED_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").unwrap());

/// Why `name` is not a DNS-1123 label (namespace names), if it is not one.
pub fn dns1123_label_error(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    (!LABEL_RE.is_match(name)).then(|| {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into()
    })
}

/// Why `name` is not a DNS-1123 subdomain (most object names), if it is not one.
pub fn dns1123_subdomain_error(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    (!SUBDOMAIN_RE.is_match(name)).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()
    })
}

/// Why `name` cannot be a URL path segment (event names), if it cannot.
pub fn path_segment_error(name: &str) -> Option<String> {
    if name == "." || name == ".." {
        return Some(format!("may not be '{name}'"));
    }
    name.contains(['/', '%'])
        .then(|| "may not contain '/' or '%'".into())
}

/// Why `key` is not a valid label or annotation key (`[prefix/]name`), if not.
pub fn label_key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("prefix part must be non-empty".into());
        }
        if let Some(e) = dns1123_subdomain_error(p) {
            return Some(format!("prefix part {e}"));
        }
    }
    if name.is_empty() || name.len() > 63 || !QUALIFIED_RE.is_match(name) {
        return Some("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, and be at most 63 characters".into());
    }
    None
}

/// Why `value` is not a valid label value, if not.
pub fn label_value_error(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    (value.len() > 63 || !QUALIFIED_RE.is_match(value)).then(|| {
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, and be at most 63 characters".into()
    })
}

/// Validates `name` for a resource: namespaces need DNS-1123 labels, events
/// path segments, everything else DNS-1123 subdomains.
pub fn name_error(info: &ResourceInfo, name: &str) -> Option<String> {
    match info.plural.as_str() {
        "namespaces" => dns1123_label_error(name),
        // RBAC names may contain ':' (`system:discovery`), as upstream.
        // APIService names are `<version>.<group>`: `v1.` for the core group.
        _ if info.plural == "events"
            || info.group == crate::resource::RBAC
            || info.plural == "apiservices" =>
        {
            path_segment_error(name)
        }
        _ => dns1123_subdomain_error(name),
    }
}

/// Total size limit of `metadata.annotations`, as upstream.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Validates metadata and, for built-in kinds, the typed shape of `obj`.
pub fn validate_object(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let name = crate::meta::name(obj).unwrap_or_default();
    let target = Target::new("", &info.kind, name);
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if let Some(e) = name_error(info, name) {
        causes.push(Cause::invalid("metadata.name", name, &e));
    }
    let meta = obj.get("metadata");
    if let Some(labels) = meta
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    {
        for (k, v) in labels {
            if let Some(e) = label_key_error(k) {
                causes.push(Cause::invalid("metadata.labels", k, &e));
            }
            match v.as_str() {
                Some(s) => {
                    if let Some(e) = label_value_error(s) {
                        causes.push(Cause::invalid(&format!("metadata.labels.{k}"), s, &e));
                    }
                }
                None => causes.push(Cause::invalid(
                    &format!("metadata.labels.{k}"),
                    &v.to_string(),
                    "must be a string",
                )),
            }
        }
    }
    if let Some(ann) = meta
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        let mut total = 0;
        for (k, v) in ann {
            total += k.len() + v.as_str().map_or(0, str::len);
            if let Some(e) = label_key_error(&k.to_ascii_lowercase()) {
                causes.push(Cause::invalid("metadata.annotations", k, &e));
            }
        }
        if total > MAX_ANNOTATIONS_BYTES {
            causes.push(Cause {
                reason: "FieldValueTooLong".into(),
                field: "metadata.annotations".into(),
                message: format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
            });
        }
    }
    if let Some(cause) = data_too_long(info, obj) {
        causes.push(cause);
    }
    if !causes.is_empty() {
        return Err(ApiError::Invalid(target, causes));
    }
    typed_check(info, obj)
}

/// The most data a ConfigMap or Secret may hold (upstream's `MaxSecretSize`).
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// Upstream's size check of a ConfigMap's (`data` and `binaryData`) or a
/// Secret's (`data`, decoded) values.
fn data_too_long(info: &ResourceInfo, obj: &Value) -> Option<Cause> {
    use base64::Engine;
    let values = |field: &str, decode: bool| -> usize {
        obj[field]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.as_str())
            .map(|v| {
                if decode {
                    base64::engine::general_purpose::STANDARD
                        .decode(v)
                        .map_or(v.len(), |b| b.len())
                } else {
                    v.len()
                }
            })
            .sum()
    };
    let (total, field) = match (info.group.as_str(), info.kind.as_str()) {
        ("", "ConfigMap") => (values("data", false) + values("binaryData", true), ""),
        ("", "Secret") => (values("data", true) + values("stringData", false), "data"),
        _ => return None,
    };
    (total > MAX_DATA_BYTES).then(|| Cause {
        reason: "FieldValueTooLong".into(),
        field: field.into(),
        message: format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
    })
}

/// Decodes built-in kinds through their k8s-openapi types so that a wrongly
/// typed field is a 400, as upstream's strict decoder makes it.
fn typed_check(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    match typed(info, obj, false) {
        Some(Err(e)) => Err(ApiError::BadRequest(format!(
            "error decoding {}: {e}",
            info.kind
        ))),
        _ => Ok(()),
    }
}

/// `obj` decoded as its built-in kind's k8s-openapi type and, if `encode`,
/// encoded again (so holding only the fields the kind has; else `Null`);
/// `None` for kinds without a type here (custom kinds, our own API group).
fn typed(
    info: &ResourceInfo,
    obj: &Value,
    encode: bool,
) -> Option<Result<Value, serde_json::Error>> {
    use k8s_openapi::api::{
        admissionregistration::v1 as adm, apps::v1 as apps, batch::v1 as batch,
        coordination::v1 as coord, core::v1 as core, rbac::v1 as rbac,
    };
    let round_trip =
        |decode: fn(&Value, bool) -> Result<Value, serde_json::Error>| Some(decode(obj, encode));
    fn rt<T: serde::de::DeserializeOwned + serde::Serialize>(
        obj: &Value,
        encode: bool,
    ) -> Result<Value, serde_json::Error> {
        let t = T::deserialize(obj)?;
        if encode {
            serde_json::to_value(&t)
        } else {
            Ok(Value::Null)
        }
    }
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => round_trip(rt::<core::Namespace>),
        ("", "ConfigMap") => round_trip(rt::<core::ConfigMap>),
        ("", "Secret") => round_trip(rt::<core::Secret>),
        ("", "ServiceAccount") => round_trip(rt::<core::ServiceAccount>),
        ("", "Event") => round_trip(rt::<core::Event>),
        ("coordination.k8s.io", "Lease") => round_trip(rt::<coord::Lease>),
        ("rbac.authorization.k8s.io", "Role") => round_trip(rt::<rbac::Role>),
        ("rbac.authorization.k8s.io", "ClusterRole") => round_trip(rt::<rbac::ClusterRole>),
        ("rbac.authorization.k8s.io", "RoleBinding") => round_trip(rt::<rbac::RoleBinding>),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            round_trip(rt::<rbac::ClusterRoleBinding>)
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            round_trip(rt::<adm::ValidatingWebhookConfiguration>)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            round_trip(rt::<adm::MutatingWebhookConfiguration>)
        }
        ("", "Pod") => round_trip(rt::<core::Pod>),
        ("", "PodTemplate") => round_trip(rt::<core::PodTemplate>),
        ("", "Service") => round_trip(rt::<core::Service>),
        ("", "ReplicationController") => round_trip(rt::<core::ReplicationController>),
        ("", "PersistentVolumeClaim") => round_trip(rt::<core::PersistentVolumeClaim>),
        ("apps", "Deployment") => round_trip(rt::<apps::Deployment>),
        ("apps", "ReplicaSet") => round_trip(rt::<apps::ReplicaSet>),
        ("apps", "StatefulSet") => round_trip(rt::<apps::StatefulSet>),
        ("apps", "DaemonSet") => round_trip(rt::<apps::DaemonSet>),
        ("batch", "Job") => round_trip(rt::<batch::Job>),
        ("batch", "CronJob") => round_trip(rt::<batch::CronJob>),
        _ => None,
    }
}

/// Removes from `obj` the fields its built-in kind does not have and
/// returns their paths as upstream's field validation names them
/// (`spec.foo`, `rules[0].verbz`). Kinds without a type here, and objects
/// that do not decode (which [`validate_object`] then rejects), are left
/// alone. A `null` is never unknown: it means "absent".
pub fn prune_unknown_fields(info: &ResourceInfo, obj: &mut Value) -> Vec<String> {
    fn walk(path: &str, given: &mut Value, known: &Value, out: &mut Vec<String>) {
        match (given, known) {
            (Value::Object(given), Value::Object(known)) => {
                given.retain(|key, value| {
                    let at = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    match known.get(key) {
                        Some(known) => {
                            walk(&at, value, known, out);
                            true
                        }
                        None if value.is_null() => true,
                        None => {
                            out.push(at);
                            false
                        }
                    }
                });
            }
            (Value::Array(given), Value::Array(known)) => {
                for (i, (value, known)) in given.iter_mut().zip(known).enumerate() {
                    walk(&format!("{path}[{i}]"), value, known, out);
                }
            }
            _ => {}
        }
    }
    let Some(Ok(known)) = typed(info, obj, true) else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    walk("", obj, &known, &mut unknown);
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Registry;
    use serde_json::json;

    #[test]
    fn names() {
        assert!(dns1123_subdomain_error("my-app.example.com").is_none());
        assert!(dns1123_subdomain_error("My-App").is_some());
        assert!(dns1123_subdomain_error("-a").is_some());
        assert!(dns1123_subdomain_error(&"a".repeat(254)).is_some());
        assert!(dns1123_label_error("a.b").is_some());
        assert!(dns1123_label_error(&"a".repeat(64)).is_some());
        assert!(path_segment_error("a.b:c").is_none());
        assert!(path_segment_error("..").is_some());
    }

    #[test]
    fn label_keys_and_values() {
        assert!(label_key_error("app.kubernetes.io/name").is_none());
        assert!(label_key_error("/name").is_some());
        assert!(label_key_error("UPPER.example/x").is_some());
        assert!(label_value_error("").is_none());
        assert!(label_value_error("v1.2_3-x").is_none());
        assert!(label_value_error("-bad").is_some());
    }

    #[test]
    fn object_validation() {
        let r = Registry::builtin();
        let cm = r.get("", "v1", "configmaps").unwrap();
        let ok = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "y"}}, "data": {"k": "v"}});
        validate_object(cm, &ok).unwrap();
        let bad_name = json!({"metadata": {"name": "Bad"}});
        let err = validate_object(cm, &bad_name).unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(
            err.status_json()["details"]["causes"][0]["field"],
            "metadata.name"
        );
        let bad_type = json!({"metadata": {"name": "a"}, "data": {"k": 1}});
        assert_eq!(validate_object(cm, &bad_type).unwrap_err().code(), 400);
        let bad_label = json!({"metadata": {"name": "a", "labels": {"x": "not ok"}}});
        assert_eq!(validate_object(cm, &bad_label).unwrap_err().code(), 422);
    }

    #[test]
    fn unknown_fields_are_found_and_pruned() {
        let r = Registry::builtin();
        let cm = r.get("", "v1", "configmaps").unwrap();
        let mut obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"x": "y"}, "colour": "red", "annotations": null},
            "data": {"k": "v"}, "binaryData": {}, "immutable": false,
            "spc": {"x": 1},
        });
        let unknown = prune_unknown_fields(cm, &mut obj);
        assert_eq!(unknown, ["metadata.colour", "spc"]);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "labels": {"x": "y"}, "annotations": null},
                "data": {"k": "v"}, "binaryData": {}, "immutable": false,
            })
        );

        let role = r.get("rbac.authorization.k8s.io", "v1", "roles").unwrap();
        let mut obj = json!({
            "metadata": {"name": "r"},
            "rules": [{"verbs": ["get"], "resources": ["pods"], "apiGroups": [""]},
                      {"verbs": ["list"], "resourcez": ["x"]}],
        });
        assert_eq!(prune_unknown_fields(role, &mut obj), ["rules[1].resourcez"]);

        let secret = r.get("", "v1", "secrets").unwrap();
        let mut obj =
            json!({"metadata": {"name": "s"}, "stringData": {"a": "b"}, "type": "Opaque"});
        assert!(prune_unknown_fields(secret, &mut obj).is_empty());
        // Objects that do not decode are validate_object's to reject.
        let mut obj = json!({"metadata": {"name": "a"}, "data": {"k": 1}, "x": 1});
        assert!(prune_unknown_fields(cm, &mut obj).is_empty());
    }
}
