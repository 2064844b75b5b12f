//! Responses: JSON bodies written as Go's encoder writes them (ending with a
//! newline), content negotiation by `Accept` parameters, and the `Status`
//! errors shaped as `apimachinery`'s `apierrors` and `responsewriters` make
//! them.

use std::convert::Infallible;

use http::HeaderMap;
use http::header::{ACCEPT, CONTENT_TYPE};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::Response;
use hyper::body::Bytes;
use serde::Serialize;

use crate::api::{GROUP, RESOURCE, RequestInfo};

pub type Body = BoxBody<Bytes, Infallible>;

pub fn respond(code: u16, content_type: &str, body: Vec<u8>) -> Response<Body> {
    let body = Full::new(Bytes::from(body)).boxed();
    let mut response = Response::new(body);
    *response.status_mut() = http::StatusCode::from_u16(code).expect("a valid status code");
    let content_type = content_type.parse().expect("a valid Content-Type");
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

pub fn to_json_line(value: &impl Serialize) -> Vec<u8> {
    let mut body = serde_json::to_vec(value).expect("JSON values serialize");
    body.push(b'\n');
    body
}

pub fn json(code: u16, value: &impl Serialize) -> Response<Body> {
    respond(code, "application/json", to_json_line(value))
}

/// Whether `Accept` has a media range with all of `params`
/// (`as=Table`, `v=v1`, `g=meta.k8s.io`).
pub fn accepts(headers: &HeaderMap, params: &[&str]) -> bool {
    let accept = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept.split(',').any(|range| {
        let have: Vec<&str> = range.split(';').map(str::trim).collect();
        params.iter().all(|p| have.contains(p))
    })
}

/// A `meta.k8s.io/v1` `Status`, its fields in upstream's order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    kind: &'static str,
    api_version: &'static str,
    metadata: Empty,
    status: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Box<Details>>,
    #[serde(skip_serializing_if = "is_zero")]
    code: u16,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize, Default)]
struct Details {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    uid: String,
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

impl Status {
    pub fn failure(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: "Status",
            api_version: "v1",
            metadata: Empty {},
            status: "Failure",
            message: message.into(),
            reason,
            details: None,
            code,
        }
    }

    /// Sets `details` to name an object of `resource` (both may be empty).
    fn about(mut self, name: &str, resource: &str) -> Self {
        let group = if resource.is_empty() { "" } else { GROUP };
        let details = Details {
            name: name.into(),
            group: group.into(),
            kind: resource.into(),
            ..Default::default()
        };
        self.details = Some(Box::new(details));
        self
    }

    /// What the generic registry answers for a delete that does not
    /// return the object.
    pub fn deleted(name: &str, uid: &str) -> Self {
        let mut status = Self::failure(0, "", "").about(name, RESOURCE);
        status.status = "Success";
        status.details.as_mut().expect("set by about").uid = uid.into();
        status
    }

    pub fn not_found(name: &str) -> Self {
        let message = format!("{RESOURCE}.{GROUP} {name:?} not found");
        Self::failure(404, "NotFound", message).about(name, RESOURCE)
    }

    pub fn already_exists(name: &str) -> Self {
        let message = format!("{RESOURCE}.{GROUP} {name:?} already exists");
        Self::failure(409, "AlreadyExists", message).about(name, RESOURCE)
    }

    pub fn conflict(name: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {RESOURCE}.{GROUP} {name:?}: the object has been \
             modified; please apply your changes to the latest version and try again"
        );
        Self::failure(409, "Conflict", message).about(name, RESOURCE)
    }

    pub fn invalid(name: &str, field: &str, problem: &str) -> Self {
        let message = format!("Flunder.{GROUP} {name:?} is invalid: {field}: {problem}");
        Self::failure(422, "Invalid", message).about(name, "Flunder")
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::failure(400, "BadRequest", message)
    }

    pub fn no_route() -> Self {
        let message = "the server could not find the requested resource";
        Self::failure(404, "NotFound", message).about("", "")
    }

    pub fn method_not_allowed() -> Self {
        let message = "the server does not allow this method on the requested resource";
        Self::failure(405, "MethodNotAllowed", message).about("", "")
    }

    /// The 403 of `responsewriters.Forbidden`, worded as upstream words it.
    pub fn forbidden(user: &str, info: &RequestInfo, reason: &str) -> Self {
        let verb = &info.verb;
        let Some(r) = &info.resource else {
            let why = format!("User {user:?} cannot {verb} path {:?}", info.path);
            return Self::failure(
                403,
                "Forbidden",
                format!("forbidden: {}", with_reason(why, reason)),
            )
            .about("", "");
        };
        let resource = match &r.subresource {
            Some(sub) => format!("{}/{sub}", r.resource),
            None => r.resource.clone(),
        };
        let scope = match &r.namespace {
            Some(ns) => format!("in the namespace {ns:?}"),
            None => "at the cluster scope".into(),
        };
        let why = format!(
            "User {user:?} cannot {verb} resource {resource:?} in API group {GROUP:?} {scope}"
        );
        let qualified = format!("{}.{GROUP}", r.resource);
        let name = r.name.as_deref().unwrap_or("");
        let message = match name {
            "" => format!("{qualified} is forbidden: {}", with_reason(why, reason)),
            name => format!(
                "{qualified} {name:?} is forbidden: {}",
                with_reason(why, reason)
            ),
        };
        Self::failure(403, "Forbidden", message).about(name, &r.resource)
    }
}

fn with_reason(why: String, reason: &str) -> String {
    if reason.is_empty() {
        why
    } else {
        format!("{why}: {reason}")
    }
}

impl From<Status> for Response<Body> {
    fn from(status: Status) -> Self {
        json(if status.code == 0 { 200 } else { status.code }, &status)
    }
}
