//! The Kubernetes `Status` error model.
//!
//! [`ApiError`] is the one error type every handler returns. It knows its HTTP
//! code and upstream `reason`, and renders the same `Status` body that
//! kube-apiserver sends, so clients (kubectl, kube-rs, client-python) parse
//! and print it unchanged. The HTTP layer only has to copy [`ApiError::code`]
//! and [`ApiError::status`] into a response.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

/// One field-level problem inside an `Invalid` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Upstream cause type, e.g. `FieldValueInvalid`, `FieldValueRequired`.
    pub reason: String,
    /// JSON path of the field, e.g. `metadata.name`.
    pub field: String,
    /// Human-readable text, e.g. `Invalid value: "Foo": ...`.
    pub message: String,
}

impl Cause {
    /// A `FieldValueInvalid` cause for `field` holding `value`.
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueInvalid".into(),
            field: field.into(),
            message: format!("Invalid value: {value:?}: {detail}"),
        }
    }

    /// A `FieldValueRequired` cause with upstream's bare `Required value`.
    pub fn missing(field: &str) -> Self {
        Cause {
            reason: "FieldValueRequired".into(),
            field: field.into(),
            message: "Required value".into(),
        }
    }

    /// A `FieldValueRequired` cause for `field`.
    pub fn required(field: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueRequired".into(),
            field: field.into(),
            message: format!("Required value: {detail}"),
        }
    }
}

/// Which object an error is about: `group`, `kind` (plural resource for most
/// reasons, Kind for `Invalid`, as upstream does) and `name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    pub group: String,
    pub kind: String,
    pub name: String,
}

impl Target {
    pub fn new(group: &str, kind: &str, name: &str) -> Self {
        Target {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// `configmaps "foo"` or `leases.coordination.k8s.io "foo"`.
    fn qualified(&self) -> String {
        let kind = if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        };
        if self.name.is_empty() {
            kind
        } else {
            format!("{kind} {:?}", self.name)
        }
    }
}

/// The message of a 404: the object's, or upstream's for a path that names
/// no resource this server serves (an empty target).
fn not_found(t: &Target) -> String {
    if t.kind.is_empty() && t.name.is_empty() {
        "the server could not find the requested resource".into()
    } else {
        format!("{} not found", t.qualified())
    }
}

/// An API error with an upstream-compatible code, reason and message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{}", not_found(.0))]
    NotFound(Target),
    #[error("{} already exists", .0.qualified())]
    AlreadyExists(Target),
    #[error("Operation cannot be fulfilled on {}: {}", .0.qualified(), .1)]
    Conflict(Target, String),
    #[error("{} is invalid: {}", .0.qualified(), causes_text(.1))]
    Invalid(Target, Vec<Cause>),
    #[error("{} is forbidden: {}", .0.qualified(), .1)]
    Forbidden(Target, String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("{0}")]
    NotAcceptable(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 410 with reason `Expired`: a resourceVersion or continue token older than
    /// the retained history.
    #[error("{0}")]
    Expired(String),
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    RequestEntityTooLarge(String),
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: u64, current: u64 },
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    ServiceUnavailable(String),
    /// 507: the storage is out of space, so the write was refused (reads
    /// still work).
    #[error("{0}")]
    InsufficientStorage(String),
    #[error("Internal error occurred: {0}")]
    Internal(String),
    /// A refusal with a code and reason chosen by someone else (an admission
    /// plugin or webhook), passed through as upstream does.
    #[error("{message}")]
    Custom {
        code: u16,
        reason: String,
        message: String,
        /// The fields the refusal is about (`details.causes`).
        causes: Vec<Cause>,
    },
}

fn causes_text(causes: &[Cause]) -> String {
    let parts: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

impl ApiError {
    /// The HTTP status code upstream uses for this error.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound(_) => 404,
            ApiError::AlreadyExists(_) | ApiError::Conflict(..) => 409,
            ApiError::Invalid(..) => 422,
            ApiError::Forbidden(..) => 403,
            ApiError::BadRequest(_) => 400,
            ApiError::Unauthorized(_) => 401,
            ApiError::MethodNotAllowed => 405,
            ApiError::NotAcceptable(_) => 406,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Expired(_) | ApiError::Gone(_) => 410,
            ApiError::RequestEntityTooLarge(_) => 413,
            ApiError::TooLargeResourceVersion { .. } | ApiError::Timeout(_) => 504,
            ApiError::ServiceUnavailable(_) => 503,
            ApiError::InsufficientStorage(_) => 507,
            ApiError::Internal(_) => 500,
            ApiError::Custom { code, .. } => *code,
        }
    }

    /// The upstream `reason` string (`metav1.StatusReason`).
    pub fn reason(&self) -> &str {
        match self {
            ApiError::NotFound(_) => "NotFound",
            ApiError::AlreadyExists(_) => "AlreadyExists",
            ApiError::Conflict(..) => "Conflict",
            ApiError::Invalid(..) => "Invalid",
            ApiError::Forbidden(..) => "Forbidden",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized(_) => "Unauthorized",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Expired(_) => "Expired",
            ApiError::Gone(_) => "Gone",
            ApiError::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            ApiError::TooLargeResourceVersion { .. } | ApiError::Timeout(_) => "Timeout",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
            ApiError::InsufficientStorage(_) => "InsufficientStorage",
            ApiError::Internal(_) => "InternalError",
            ApiError::Custom { reason, .. } => reason,
        }
    }

    /// The standard optimistic-concurrency conflict.
    pub fn stale(target: Target) -> Self {
        ApiError::Conflict(
            target,
            "the object has been modified; please apply your changes to the latest version and try again"
                .into(),
        )
    }

    /// The `Status` object that goes into the response body.
    pub fn status(&self) -> Status {
        let details = match self {
            ApiError::NotFound(t)
            | ApiError::AlreadyExists(t)
            | ApiError::Conflict(t, _)
            | ApiError::Forbidden(t, _) => Some(details(t, vec![])),
            ApiError::Invalid(t, causes) => Some(details(t, status_causes(causes))),
            ApiError::Custom { causes, .. } if !causes.is_empty() => Some(StatusDetails {
                causes: Some(status_causes(causes)),
                ..Default::default()
            }),
            ApiError::TooLargeResourceVersion { .. } => Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ResourceVersionTooLarge".into()),
                    message: Some("Too large resource version".into()),
                    field: None,
                }]),
                retry_after_seconds: Some(1),
                ..Default::default()
            }),
            _ => None,
        };
        Status {
            status: Some("Failure".into()),
            message: Some(self.to_string()),
            reason: Some(self.reason().into()),
            code: Some(self.code().into()),
            details,
            metadata: Default::default(),
        }
    }

    /// The `Status` body as JSON.
    pub fn status_json(&self) -> serde_json::Value {
        serde_json::to_value(self.status()).unwrap_or_default()
    }

    /// The `Status` body as bytes, its fields in upstream's order (`kind,
    /// apiVersion, metadata, status, message, reason, details{name, group,
    /// kind, uid, causes, retryAfterSeconds}, code`): clients that compare
    /// error bodies as strings see what kube-apiserver writes.
    pub fn status_body(&self) -> Vec<u8> {
        status_bytes(&self.status())
    }
}

/// `status` serialized in upstream's field order (Go's struct order).
pub fn status_bytes(status: &Status) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Wire<'a> {
        kind: &'static str,
        #[serde(rename = "apiVersion")]
        api_version: &'static str,
        metadata: serde_json::Map<String, serde_json::Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        details: Option<Details<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
    }
    #[derive(serde::Serialize)]
    struct Details<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        group: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        uid: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        causes: Option<Vec<WireCause<'a>>>,
        #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
        retry_after_seconds: Option<i32>,
    }
    #[derive(serde::Serialize)]
    struct WireCause<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        field: Option<&'a str>,
    }
    let wire = Wire {
        kind: "Status",
        api_version: "v1",
        metadata: serde_json::Map::new(),
        status: status.status.as_deref(),
        message: status.message.as_deref(),
        reason: status.reason.as_deref(),
        details: status.details.as_ref().map(|d| Details {
            name: d.name.as_deref(),
            group: d.group.as_deref(),
            kind: d.kind.as_deref(),
            uid: d.uid.as_deref(),
            causes: d.causes.as_ref().map(|cs| {
                cs.iter()
                    .map(|c| WireCause {
                        reason: c.reason.as_deref(),
                        message: c.message.as_deref(),
                        field: c.field.as_deref(),
                    })
                    .collect()
            }),
            retry_after_seconds: d.retry_after_seconds,
        }),
        code: status.code,
    };
    serde_json::to_vec(&wire).unwrap_or_default()
}

fn status_causes(causes: &[Cause]) -> Vec<StatusCause> {
    causes
        .iter()
        .map(|c| StatusCause {
            reason: Some(c.reason.clone()),
            message: Some(c.message.clone()),
            field: Some(c.field.clone()),
        })
        .collect()
}

fn details(t: &Target, causes: Vec<StatusCause>) -> StatusDetails {
    StatusDetails {
        name: (!t.name.is_empty()).then(|| t.name.clone()),
        group: (!t.group.is_empty()).then(|| t.group.clone()),
        kind: (!t.kind.is_empty()).then(|| t.kind.clone()),
        causes: (!causes.is_empty()).then_some(causes),
        ..Default::default()
    }
}

/// A `Status` with `status: Success`, as returned by an immediate delete.
pub fn success_status(t: &Target, uid: Option<String>) -> serde_json::Value {
    let status = Status {
        status: Some("Success".into()),
        details: Some(StatusDetails {
            uid,
            ..details(t, vec![])
        }),
        ..Default::default()
    };
    serde_json::to_value(status).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn not_found_body_matches_upstream() {
        let e = ApiError::NotFound(Target::new("", "configmaps", "foo"));
        assert_eq!(
            e.status_json(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "configmaps \"foo\" not found", "reason": "NotFound",
                "details": {"name": "foo", "kind": "configmaps"}, "code": 404
            })
        );
    }

    #[test]
    fn status_bodies_keep_upstreams_field_order() {
        let e = ApiError::Invalid(
            Target::new("", "ConfigMap", "x"),
            vec![Cause::missing("metadata.name")],
        );
        let body = String::from_utf8(e.status_body()).unwrap();
        assert!(
            body.starts_with(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"#
            ),
            "{body}"
        );
        assert!(
            body.ends_with(r#""reason":"Invalid","details":{"name":"x","kind":"ConfigMap","causes":[{"reason":"FieldValueRequired","message":"Required value","field":"metadata.name"}]},"code":422}"#),
            "{body}"
        );
        let parsed: serde_json::Value = serde_json::from_slice(e.status_body().as_slice()).unwrap();
        assert_eq!(parsed, e.status_json());
    }

    #[test]
    fn unknown_resource_is_upstreams_404() {
        let e = ApiError::NotFound(Target::default());
        let body = e.status_json();
        assert_eq!(
            body["message"],
            "the server could not find the requested resource"
        );
        assert_eq!(
            (body["code"].as_u64(), &body["reason"]),
            (Some(404), &json!("NotFound"))
        );
    }

    #[test]
    fn grouped_conflict_and_invalid_messages() {
        let e = ApiError::stale(Target::new("coordination.k8s.io", "leases", "l"));
        assert_eq!(e.code(), 409);
        assert!(
            e.to_string()
                .starts_with("Operation cannot be fulfilled on leases.coordination.k8s.io \"l\": ")
        );
        let e = ApiError::Invalid(
            Target::new("", "ConfigMap", "Foo"),
            vec![Cause::invalid("metadata.name", "Foo", "bad")],
        );
        let s = e.status_json();
        assert_eq!(s["code"], 422);
        assert_eq!(
            s["message"],
            "ConfigMap \"Foo\" is invalid: metadata.name: Invalid value: \"Foo\": bad"
        );
        assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
    }

    #[test]
    fn expired_is_410() {
        let s = ApiError::Expired("too old resource version: 1 (5)".into()).status_json();
        assert_eq!(
            (s["code"].as_i64(), s["reason"].as_str()),
            (Some(410), Some("Expired"))
        );
    }
}
