//! Decoding Kubernetes protobuf request bodies into JSON.
//!
//! kubectl 1.32+ sends `application/vnd.kubernetes.protobuf` for the typed
//! create commands (`kubectl create namespace|configmap|secret|serviceaccount`).
//! The body is the `k8s\0` magic followed by a `runtime.Unknown` envelope whose
//! `raw` field holds the object's message. This module decodes the protobuf
//! wire format against a small field table per built-in message (tags from
//! the upstream `generated.proto` files) and produces the same JSON the
//! object would have had, so everything after decoding is shared.

use base64::Engine;
use serde_json::{Map, Value, json};

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8] = b"k8s\0";

/// How one field's value maps to JSON.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    /// A plain (non-pointer) Go bool: `false` is written but omitted in JSON.
    Flag,
    /// `bytes`, base64 in JSON.
    Bytes,
    /// `metav1.Time`: RFC 3339 with seconds.
    Time,
    /// `metav1.MicroTime`: RFC 3339 with microseconds.
    MicroTime,
    MapStr,
    MapBytes,
    /// `map<string, resource.Quantity>` (resource requests and limits).
    MapQuantity,
    /// `intstr.IntOrString`: a number or a string in JSON.
    IntOrString,
    Msg(&'static [Field]),
}

/// `(tag, JSON name, type, repeated)`.
type Field = (u32, &'static str, Ty, bool);

const OWNER_REF: &[Field] = &[
    (5, "apiVersion", Ty::Str, false),
    (1, "kind", Ty::Str, false),
    (3, "name", Ty::Str, false),
    (4, "uid", Ty::Str, false),
    (6, "controller", Ty::Bool, false),
    (7, "blockOwnerDeletion", Ty::Bool, false),
];

const OBJECT_META: &[Field] = &[
    (1, "name", Ty::Str, false),
    (2, "generateName", Ty::Str, false),
    (3, "namespace", Ty::Str, false),
    (5, "uid", Ty::Str, false),
    (6, "resourceVersion", Ty::Str, false),
    (7, "generation", Ty::Int, false),
    (8, "creationTimestamp", Ty::Time, false),
    (9, "deletionTimestamp", Ty::Time, false),
    (10, "deletionGracePeriodSeconds", Ty::Int, false),
    (11, "labels", Ty::MapStr, false),
    (12, "annotations", Ty::MapStr, false),
    (13, "ownerReferences", Ty::Msg(OWNER_REF), true),
    (14, "finalizers", Ty::Str, true),
];

const OBJECT_REF: &[Field] = &[
    (1, "kind", Ty::Str, false),
    (2, "namespace", Ty::Str, false),
    (3, "name", Ty::Str, false),
    (4, "uid", Ty::Str, false),
    (5, "apiVersion", Ty::Str, false),
    (6, "resourceVersion", Ty::Str, false),
    (7, "fieldPath", Ty::Str, false),
];

const LOCAL_OBJECT_REF: &[Field] = &[(1, "name", Ty::Str, false)];

const CONFIG_MAP: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "data", Ty::MapStr, false),
    (3, "binaryData", Ty::MapBytes, false),
    (4, "immutable", Ty::Bool, false),
];

const SECRET: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "data", Ty::MapBytes, false),
    (3, "type", Ty::Str, false),
    (4, "stringData", Ty::MapStr, false),
    (5, "immutable", Ty::Bool, false),
];

const NAMESPACE_CONDITION: &[Field] = &[
    (1, "type", Ty::Str, false),
    (2, "status", Ty::Str, false),
    (4, "lastTransitionTime", Ty::Time, false),
    (5, "reason", Ty::Str, false),
    (6, "message", Ty::Str, false),
];

const NAMESPACE: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[(1, "finalizers", Ty::Str, true)]),
        false,
    ),
    (
        3,
        "status",
        Ty::Msg(&[
            (1, "phase", Ty::Str, false),
            (2, "conditions", Ty::Msg(NAMESPACE_CONDITION), true),
        ]),
        false,
    ),
];

const SERVICE_ACCOUNT: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "secrets", Ty::Msg(OBJECT_REF), true),
    (3, "imagePullSecrets", Ty::Msg(LOCAL_OBJECT_REF), true),
    (4, "automountServiceAccountToken", Ty::Bool, false),
];

const EVENT: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "involvedObject", Ty::Msg(OBJECT_REF), false),
    (3, "reason", Ty::Str, false),
    (4, "message", Ty::Str, false),
    (
        5,
        "source",
        Ty::Msg(&[
            (1, "component", Ty::Str, false),
            (2, "host", Ty::Str, false),
        ]),
        false,
    ),
    (6, "firstTimestamp", Ty::Time, false),
    (7, "lastTimestamp", Ty::Time, false),
    (8, "count", Ty::Int, false),
    (9, "type", Ty::Str, false),
    (10, "eventTime", Ty::MicroTime, false),
    (
        11,
        "series",
        Ty::Msg(&[
            (1, "count", Ty::Int, false),
            (2, "lastObservedTime", Ty::MicroTime, false),
        ]),
        false,
    ),
    (12, "action", Ty::Str, false),
    (13, "related", Ty::Msg(OBJECT_REF), false),
    (14, "reportingComponent", Ty::Str, false),
    (15, "reportingInstance", Ty::Str, false),
];

const LEASE: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[
            (1, "holderIdentity", Ty::Str, false),
            (2, "leaseDurationSeconds", Ty::Int, false),
            (3, "acquireTime", Ty::MicroTime, false),
            (4, "renewTime", Ty::MicroTime, false),
            (5, "leaseTransitions", Ty::Int, false),
            (6, "strategy", Ty::Str, false),
            (7, "preferredHolder", Ty::Str, false),
        ]),
        false,
    ),
];

const POLICY_RULE: &[Field] = &[
    (1, "verbs", Ty::Str, true),
    (2, "apiGroups", Ty::Str, true),
    (3, "resources", Ty::Str, true),
    (4, "resourceNames", Ty::Str, true),
    (5, "nonResourceURLs", Ty::Str, true),
];

const LABEL_SELECTOR: &[Field] = &[
    (1, "matchLabels", Ty::MapStr, false),
    (
        2,
        "matchExpressions",
        Ty::Msg(&[
            (1, "key", Ty::Str, false),
            (2, "operator", Ty::Str, false),
            (3, "values", Ty::Str, true),
        ]),
        true,
    ),
];

const ROLE: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "rules", Ty::Msg(POLICY_RULE), true),
];

const CLUSTER_ROLE: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "rules", Ty::Msg(POLICY_RULE), true),
    (
        3,
        "aggregationRule",
        Ty::Msg(&[(1, "clusterRoleSelectors", Ty::Msg(LABEL_SELECTOR), true)]),
        false,
    ),
];

const BINDING: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "subjects",
        Ty::Msg(&[
            (1, "kind", Ty::Str, false),
            (2, "apiGroup", Ty::Str, false),
            (3, "name", Ty::Str, false),
            (4, "namespace", Ty::Str, false),
        ]),
        true,
    ),
    (
        3,
        "roleRef",
        Ty::Msg(&[
            (1, "apiGroup", Ty::Str, false),
            (2, "kind", Ty::Str, false),
            (3, "name", Ty::Str, false),
        ]),
        false,
    ),
];

const RESOURCE_ATTRIBUTES: &[Field] = &[
    (1, "namespace", Ty::Str, false),
    (2, "verb", Ty::Str, false),
    (3, "group", Ty::Str, false),
    (4, "version", Ty::Str, false),
    (5, "resource", Ty::Str, false),
    (6, "subresource", Ty::Str, false),
    (7, "name", Ty::Str, false),
];

const NON_RESOURCE_ATTRIBUTES: &[Field] =
    &[(1, "path", Ty::Str, false), (2, "verb", Ty::Str, false)];

const SUBJECT_ACCESS_REVIEW: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[
            (1, "resourceAttributes", Ty::Msg(RESOURCE_ATTRIBUTES), false),
            (
                2,
                "nonResourceAttributes",
                Ty::Msg(NON_RESOURCE_ATTRIBUTES),
                false,
            ),
            (3, "user", Ty::Str, false),
            (4, "groups", Ty::Str, true),
            (6, "uid", Ty::Str, false),
        ]),
        false,
    ),
];

const SELF_SUBJECT_ACCESS_REVIEW: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[
            (1, "resourceAttributes", Ty::Msg(RESOURCE_ATTRIBUTES), false),
            (
                2,
                "nonResourceAttributes",
                Ty::Msg(NON_RESOURCE_ATTRIBUTES),
                false,
            ),
        ]),
        false,
    ),
];

const SELF_SUBJECT_RULES_REVIEW: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[(1, "namespace", Ty::Str, false)]),
        false,
    ),
];

const SELF_SUBJECT_REVIEW: &[Field] = &[(1, "metadata", Ty::Msg(OBJECT_META), false)];

const TOKEN_REQUEST: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[
            (1, "audiences", Ty::Str, true),
            (4, "expirationSeconds", Ty::Int, false),
            (
                3,
                "boundObjectRef",
                Ty::Msg(&[
                    (1, "kind", Ty::Str, false),
                    (2, "apiVersion", Ty::Str, false),
                    (3, "name", Ty::Str, false),
                    (4, "uid", Ty::Str, false),
                ]),
                false,
            ),
        ]),
        false,
    ),
];

const DELETE_OPTIONS: &[Field] = &[
    (1, "gracePeriodSeconds", Ty::Int, false),
    (
        2,
        "preconditions",
        Ty::Msg(&[
            (1, "uid", Ty::Str, false),
            (2, "resourceVersion", Ty::Str, false),
        ]),
        false,
    ),
    (3, "orphanDependents", Ty::Bool, false),
    (4, "propagationPolicy", Ty::Str, false),
    (5, "dryRun", Ty::Str, true),
];

const CONTAINER_PORT: &[Field] = &[
    (1, "name", Ty::Str, false),
    (2, "hostPort", Ty::Int, false),
    (3, "containerPort", Ty::Int, false),
    (4, "protocol", Ty::Str, false),
    (5, "hostIP", Ty::Str, false),
];

const ENV_VAR: &[Field] = &[(1, "name", Ty::Str, false), (2, "value", Ty::Str, false)];

const RESOURCES: &[Field] = &[
    (1, "limits", Ty::MapQuantity, false),
    (2, "requests", Ty::MapQuantity, false),
];

/// The container fields kubectl's generators set (`create deployment`,
/// `run`, `create job`...); tags from upstream's `core/v1/generated.proto`.
const CONTAINER: &[Field] = &[
    (1, "name", Ty::Str, false),
    (2, "image", Ty::Str, false),
    (3, "command", Ty::Str, true),
    (4, "args", Ty::Str, true),
    (5, "workingDir", Ty::Str, false),
    (6, "ports", Ty::Msg(CONTAINER_PORT), true),
    (7, "env", Ty::Msg(ENV_VAR), true),
    (8, "resources", Ty::Msg(RESOURCES), false),
    (13, "terminationMessagePath", Ty::Str, false),
    (14, "imagePullPolicy", Ty::Str, false),
    (16, "stdin", Ty::Flag, false),
    (17, "stdinOnce", Ty::Flag, false),
    (18, "tty", Ty::Flag, false),
    (20, "terminationMessagePolicy", Ty::Str, false),
];

const POD_SPEC: &[Field] = &[
    (2, "containers", Ty::Msg(CONTAINER), true),
    (3, "restartPolicy", Ty::Str, false),
    (4, "terminationGracePeriodSeconds", Ty::Int, false),
    (5, "activeDeadlineSeconds", Ty::Int, false),
    (6, "dnsPolicy", Ty::Str, false),
    (7, "nodeSelector", Ty::MapStr, false),
    (8, "serviceAccountName", Ty::Str, false),
    (10, "nodeName", Ty::Str, false),
    (11, "hostNetwork", Ty::Flag, false),
    (15, "imagePullSecrets", Ty::Msg(LOCAL_OBJECT_REF), true),
    (16, "hostname", Ty::Str, false),
    (17, "subdomain", Ty::Str, false),
    (19, "schedulerName", Ty::Str, false),
    (20, "initContainers", Ty::Msg(CONTAINER), true),
    (24, "priorityClassName", Ty::Str, false),
];

const POD_TEMPLATE_SPEC: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "spec", Ty::Msg(POD_SPEC), false),
];

const POD: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "spec", Ty::Msg(POD_SPEC), false),
];

const DEPLOYMENT: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[
            (1, "replicas", Ty::Int, false),
            (2, "selector", Ty::Msg(LABEL_SELECTOR), false),
            (3, "template", Ty::Msg(POD_TEMPLATE_SPEC), false),
            (
                4,
                "strategy",
                Ty::Msg(&[
                    (1, "type", Ty::Str, false),
                    (
                        2,
                        "rollingUpdate",
                        Ty::Msg(&[
                            (1, "maxUnavailable", Ty::IntOrString, false),
                            (2, "maxSurge", Ty::IntOrString, false),
                        ]),
                        false,
                    ),
                ]),
                false,
            ),
            (5, "minReadySeconds", Ty::Int, false),
            (6, "revisionHistoryLimit", Ty::Int, false),
            (7, "paused", Ty::Flag, false),
            (9, "progressDeadlineSeconds", Ty::Int, false),
        ]),
        false,
    ),
];

const JOB_SPEC: &[Field] = &[
    (1, "parallelism", Ty::Int, false),
    (2, "completions", Ty::Int, false),
    (3, "activeDeadlineSeconds", Ty::Int, false),
    (4, "selector", Ty::Msg(LABEL_SELECTOR), false),
    (5, "manualSelector", Ty::Bool, false),
    (6, "template", Ty::Msg(POD_TEMPLATE_SPEC), false),
    (7, "backoffLimit", Ty::Int, false),
    (8, "ttlSecondsAfterFinished", Ty::Int, false),
    (9, "completionMode", Ty::Str, false),
    (10, "suspend", Ty::Bool, false),
];

const JOB: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "spec", Ty::Msg(JOB_SPEC), false),
];

const CRON_JOB: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[
            (1, "schedule", Ty::Str, false),
            (2, "startingDeadlineSeconds", Ty::Int, false),
            (3, "concurrencyPolicy", Ty::Str, false),
            (4, "suspend", Ty::Bool, false),
            (
                5,
                "jobTemplate",
                Ty::Msg(&[
                    (1, "metadata", Ty::Msg(OBJECT_META), false),
                    (2, "spec", Ty::Msg(JOB_SPEC), false),
                ]),
                false,
            ),
            (6, "successfulJobsHistoryLimit", Ty::Int, false),
            (7, "failedJobsHistoryLimit", Ty::Int, false),
            (8, "timeZone", Ty::Str, false),
        ]),
        false,
    ),
];

const SERVICE: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (
        2,
        "spec",
        Ty::Msg(&[
            (
                1,
                "ports",
                Ty::Msg(&[
                    (1, "name", Ty::Str, false),
                    (2, "protocol", Ty::Str, false),
                    (3, "port", Ty::Int, false),
                    (4, "targetPort", Ty::IntOrString, false),
                    (5, "nodePort", Ty::Int, false),
                    (6, "appProtocol", Ty::Str, false),
                ]),
                true,
            ),
            (2, "selector", Ty::MapStr, false),
            (3, "clusterIP", Ty::Str, false),
            (4, "type", Ty::Str, false),
            (5, "externalIPs", Ty::Str, true),
            (7, "sessionAffinity", Ty::Str, false),
            (8, "loadBalancerIP", Ty::Str, false),
            (10, "externalName", Ty::Str, false),
            (11, "externalTrafficPolicy", Ty::Str, false),
            (17, "ipFamilyPolicy", Ty::Str, false),
            (18, "clusterIPs", Ty::Str, true),
            (19, "ipFamilies", Ty::Str, true),
            (22, "internalTrafficPolicy", Ty::Str, false),
        ]),
        false,
    ),
];

const POD_BINDING: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "target", Ty::Msg(OBJECT_REF), false),
];

const EVICTION: &[Field] = &[
    (1, "metadata", Ty::Msg(OBJECT_META), false),
    (2, "deleteOptions", Ty::Msg(DELETE_OPTIONS), false),
];

const TYPE_META: &[Field] = &[
    (1, "apiVersion", Ty::Str, false),
    (2, "kind", Ty::Str, false),
];
const UNKNOWN: &[Field] = &[
    (1, "typeMeta", Ty::Msg(TYPE_META), false),
    (2, "raw", Ty::Bytes, false),
    (3, "contentEncoding", Ty::Str, false),
];

fn schema(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    Some(match (api_version, kind) {
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Event") => EVENT,
        ("v1", "Pod") => POD,
        ("v1", "Binding") => POD_BINDING,
        ("policy/v1", "Eviction") => EVICTION,
        ("v1", "Service") => SERVICE,
        ("apps/v1", "Deployment") => DEPLOYMENT,
        ("batch/v1", "Job") => JOB,
        ("batch/v1", "CronJob") => CRON_JOB,
        ("coordination.k8s.io/v1", "Lease") => LEASE,
        ("rbac.authorization.k8s.io/v1", "Role") => ROLE,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => BINDING,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => SELF_SUBJECT_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SubjectAccessReview" | "LocalSubjectAccessReview") => {
            SUBJECT_ACCESS_REVIEW
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => SELF_SUBJECT_RULES_REVIEW,
        ("authentication.k8s.io/v1", "SelfSubjectReview") => SELF_SUBJECT_REVIEW,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        (_, "DeleteOptions") => DELETE_OPTIONS,
        _ => return None,
    })
}

/// A field value as read off the wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.buf.split_first().ok_or("truncated varint")?;
            self.buf = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err("varint too long".into())
    }

    fn field(&mut self) -> Result<Option<(u32, Wire<'a>)>, String> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| "bad tag")?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                if self.buf.len() < n {
                    return Err("truncated fixed field".into());
                }
                self.buf = &self.buf[n..];
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "bad length")?;
                if self.buf.len() < len {
                    return Err("truncated length-delimited field".into());
                }
                let (b, rest) = self.buf.split_at(len);
                self.buf = rest;
                Wire::Bytes(b)
            }
            w => return Err(format!("unsupported wire type {w}")),
        };
        Ok(Some((tag, wire)))
    }
}

fn text(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "invalid UTF-8 in string field".into())
}

/// A zero time is Go's `null`.
fn time(b: &[u8], micros: bool) -> Result<Option<Value>, String> {
    let (mut secs, mut nanos) = (0i64, 0u32);
    let mut r = Reader { buf: b };
    while let Some((tag, w)) = r.field()? {
        match (tag, w) {
            (1, Wire::Varint(v)) => secs = v as i64,
            (2, Wire::Varint(v)) => nanos = v as u32,
            _ => {}
        }
    }
    if secs == 0 && nanos == 0 {
        return Ok(None);
    }
    let t = chrono::DateTime::from_timestamp(secs, nanos).ok_or("timestamp out of range")?;
    Ok(Some(json!(if micros {
        t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    })))
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), String> {
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    let mut r = Reader { buf: b };
    while let Some((tag, w)) = r.field()? {
        if let Wire::Bytes(b) = w {
            match tag {
                1 => k = text(b)?,
                2 if bytes_value => v = json!(base64::engine::general_purpose::STANDARD.encode(b)),
                2 => v = json!(text(b)?),
                _ => {}
            }
        }
    }
    Ok((k, v))
}

fn scalar(ty: Ty, w: Wire<'_>) -> Result<Option<Value>, String> {
    Ok(match (ty, w) {
        (Ty::Str, Wire::Bytes(b)) => Some(json!(text(b)?)),
        (Ty::Bytes, Wire::Bytes(b)) => {
            Some(json!(base64::engine::general_purpose::STANDARD.encode(b)))
        }
        (Ty::Int, Wire::Varint(v)) => Some(json!(v as i64)),
        (Ty::Bool | Ty::Flag, Wire::Varint(v)) => Some(json!(v != 0)),
        (Ty::Time, Wire::Bytes(b)) => time(b, false)?,
        (Ty::MicroTime, Wire::Bytes(b)) => time(b, true)?,
        (Ty::Msg(fields), Wire::Bytes(b)) => Some(Value::Object(message(b, fields)?)),
        (Ty::IntOrString, Wire::Bytes(b)) => {
            let v = message(
                b,
                &[
                    (1, "type", Ty::Int, false),
                    (2, "intVal", Ty::Int, false),
                    (3, "strVal", Ty::Str, false),
                ],
            )?;
            Some(if v.get("type") == Some(&json!(1)) {
                v.get("strVal").cloned().unwrap_or(json!(""))
            } else {
                v.get("intVal").cloned().unwrap_or(json!(0))
            })
        }
        (_, Wire::Fixed) => None,
        _ => return Err("field has an unexpected wire type".into()),
    })
}

fn message(buf: &[u8], fields: &[Field]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    let mut r = Reader { buf };
    while let Some((tag, w)) = r.field()? {
        // Unknown fields are skipped, as protobuf decoders do.
        let Some(&(_, name, ty, repeated)) = fields.iter().find(|f| f.0 == tag) else {
            continue;
        };
        match ty {
            Ty::MapStr | Ty::MapBytes => {
                let Wire::Bytes(b) = w else {
                    return Err(format!("{name}: bad map entry"));
                };
                let (k, v) = map_entry(b, matches!(ty, Ty::MapBytes))?;
                out.entry(name).or_insert_with(|| json!({}))[k] = v;
            }
            Ty::MapQuantity => {
                let Wire::Bytes(b) = w else {
                    return Err(format!("{name}: bad map entry"));
                };
                let entry = message(
                    b,
                    &[
                        (1, "key", Ty::Str, false),
                        (2, "value", Ty::Msg(&[(1, "string", Ty::Str, false)]), false),
                    ],
                )?;
                let key = entry.get("key").and_then(Value::as_str).unwrap_or_default();
                out.entry(name).or_insert_with(|| json!({}))[key] = entry
                    .get("value")
                    .map_or(json!(""), |q| q["string"].clone());
            }
            _ => {
                let Some(v) = scalar(ty, w).map_err(|e| format!("{name}: {e}"))? else {
                    continue;
                };
                // Go writes empty strings and zero numbers that its JSON
                // omits, and `false` for the plain bools it omits too.
                let omitted_flag = matches!(ty, Ty::Flag) && v == json!(false);
                if !repeated && (v == json!("") || v == json!(0) || omitted_flag) {
                    continue;
                }
                if repeated {
                    out.entry(name)
                        .or_insert_with(|| json!([]))
                        .as_array_mut()
                        .expect("array")
                        .push(v);
                } else {
                    out.insert(name.into(), v);
                }
            }
        }
    }
    Ok(out)
}

/// Whether objects of `kind` in `api_version` can be sent as protobuf (a
/// resource without a protobuf schema, such as a custom resource, takes
/// JSON and YAML only, as upstream).
pub fn supports(api_version: &str, kind: &str) -> bool {
    schema(api_version, kind).is_some()
}

/// Decodes a `k8s\0`-prefixed protobuf body into the JSON form of the object.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or("missing the k8s protobuf magic prefix")?;
    let unknown = message(envelope, UNKNOWN)?;
    let api_version = unknown["typeMeta"]["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = unknown["typeMeta"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if unknown
        .get("contentEncoding")
        .and_then(Value::as_str)
        .is_some_and(|e| !e.is_empty())
    {
        return Err("content encodings are not supported".into());
    }
    let fields = schema(&api_version, &kind).ok_or_else(|| {
        format!("protobuf is not supported for {api_version}, Kind={kind}; send JSON")
    })?;
    let raw = unknown
        .get("raw")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|e| e.to_string())?;
    let mut obj = message(&raw, fields)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn bytes_field(tag: u32, b: &[u8], out: &mut Vec<u8>) {
        varint(u64::from(tag << 3 | 2), out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }
    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        bytes_field(1, k.as_bytes(), &mut e);
        bytes_field(2, v, &mut e);
        e
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let mut meta = Vec::new();
        bytes_field(1, b"cm1", &mut meta);
        bytes_field(2, b"", &mut meta);
        bytes_field(11, &entry("app", b"web"), &mut meta);
        bytes_field(14, b"f1", &mut meta);
        bytes_field(14, b"f2", &mut meta);
        let mut ts = Vec::new();
        varint(1 << 3, &mut ts);
        varint(1_700_000_000, &mut ts);
        bytes_field(8, &ts, &mut meta);
        let mut cm = Vec::new();
        bytes_field(1, &meta, &mut cm);
        bytes_field(2, &entry("k", b"v"), &mut cm);
        bytes_field(3, &entry("bin", &[0, 255]), &mut cm);
        varint(4 << 3, &mut cm);
        varint(1, &mut cm);
        let mut tm = Vec::new();
        bytes_field(1, b"v1", &mut tm);
        bytes_field(2, b"ConfigMap", &mut tm);
        let mut body = MAGIC.to_vec();
        bytes_field(1, &tm, &mut body);
        bytes_field(2, &cm, &mut body);
        bytes_field(4, b"application/vnd.kubernetes.protobuf", &mut body);

        assert_eq!(
            decode(&body).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm1", "labels": {"app": "web"}, "finalizers": ["f1", "f2"], "creationTimestamp": "2023-11-14T22:13:20Z"},
                "data": {"k": "v"}, "binaryData": {"bin": "AP8="}, "immutable": true
            })
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(decode(b"nope").is_err());
        assert!(decode(b"k8s\0\x0a\xff").is_err());
        let mut body = MAGIC.to_vec();
        let mut tm = Vec::new();
        bytes_field(1, b"example.com/v1", &mut tm);
        bytes_field(2, b"Widget", &mut tm);
        bytes_field(1, &tm, &mut body);
        assert!(decode(&body).unwrap_err().contains("not supported"));
    }

    #[test]
    fn decodes_a_deployment_with_int_or_string_and_quantities() {
        let mut quantity = Vec::new();
        bytes_field(1, b"100m", &mut quantity);
        let mut limit = Vec::new();
        bytes_field(1, b"cpu", &mut limit);
        bytes_field(2, &quantity, &mut limit);
        let mut resources = Vec::new();
        bytes_field(1, &limit, &mut resources);
        let mut container = Vec::new();
        bytes_field(1, b"web", &mut container);
        bytes_field(2, b"nginx:1.27", &mut container);
        bytes_field(8, &resources, &mut container);
        container.extend([0x80, 0x01, 0]); // stdin (tag 16): false, omitted
        let mut pod_spec = Vec::new();
        bytes_field(2, &container, &mut pod_spec);
        let mut template = Vec::new();
        bytes_field(2, &pod_spec, &mut template);
        let mut surge = Vec::new();
        surge.extend([1 << 3, 1]); // type: String
        bytes_field(3, b"25%", &mut surge);
        let mut unavailable = Vec::new();
        unavailable.extend([2 << 3, 2]); // intVal: 2
        let mut rolling = Vec::new();
        bytes_field(1, &unavailable, &mut rolling);
        bytes_field(2, &surge, &mut rolling);
        let mut strategy = Vec::new();
        bytes_field(2, &rolling, &mut strategy);
        let mut spec = vec![1 << 3, 3]; // replicas: 3
        bytes_field(3, &template, &mut spec);
        bytes_field(4, &strategy, &mut spec);
        let mut meta = Vec::new();
        bytes_field(1, b"web", &mut meta);
        let mut raw = Vec::new();
        bytes_field(1, &meta, &mut raw);
        bytes_field(2, &spec, &mut raw);
        let mut tm = Vec::new();
        bytes_field(1, b"apps/v1", &mut tm);
        bytes_field(2, b"Deployment", &mut tm);
        let mut body = MAGIC.to_vec();
        bytes_field(1, &tm, &mut body);
        bytes_field(2, &raw, &mut body);
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 3,
                    "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                        "resources": {"limits": {"cpu": "100m"}}}]}},
                    "strategy": {"rollingUpdate": {"maxUnavailable": 2, "maxSurge": "25%"}}}})
        );
    }
}
