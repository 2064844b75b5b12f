//! Building a policy's answer.

use serde_json::Value;

use crate::admission::AdmissionResponse;
use crate::{FieldCause, Patch, Status};

/// A policy's decision, built fluently:
///
/// ```
/// # use wasm_apiserver_plugin_sdk::Response;
/// let r = Response::deny("replicas must be at most 5")
///     .code(422)
///     .reason("Invalid")
///     .cause("spec.replicas", "FieldValueInvalid", "must be at most 5")
///     .annotate("replicas", "7");
/// assert!(!r.is_allowed());
/// ```
#[derive(Clone, Debug)]
pub struct Response {
    allowed: bool,
    status: Option<Status>,
    patch: Patch,
    warnings: Vec<String>,
    annotations: Vec<(String, String)>,
}

impl Response {
    /// Admits the request unchanged.
    pub fn allow() -> Self {
        Self {
            allowed: true,
            status: None,
            patch: Patch::new(),
            warnings: Vec::new(),
            annotations: Vec::new(),
        }
    }

    /// Refuses the request: 403 `Forbidden` with `message` unless
    /// [`code`](Self::code) and [`reason`](Self::reason) say otherwise.
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            status: Some(Status {
                code: 403,
                reason: "Forbidden".into(),
                message: message.into(),
                causes: Vec::new(),
            }),
            ..Self::allow()
        }
    }

    /// Refuses the request as invalid: 422 `Invalid` (add the fields with
    /// [`cause`](Self::cause)).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::deny(message).code(422).reason("Invalid")
    }

    /// Admits the request with `patch` applied (the mutating phase).
    pub fn patched(patch: Patch) -> Self {
        Self::allow().patch(patch)
    }

    /// The denial's HTTP code (400..=599; the host clamps others to 403).
    pub fn code(mut self, code: u16) -> Self {
        if let Some(s) = &mut self.status {
            s.code = code;
        }
        self
    }

    /// The denial's CamelCase reason, e.g. `Invalid`.
    pub fn reason(mut self, reason: &str) -> Self {
        if let Some(s) = &mut self.status {
            s.reason = reason.into();
        }
        self
    }

    /// Names a field the denial is about (`details.causes` of the Status):
    /// e.g. `("metadata.labels", "FieldValueRequired", "team is required")`.
    pub fn cause(mut self, field: &str, reason: &str, message: impl Into<String>) -> Self {
        if let Some(s) = &mut self.status {
            s.causes.push(FieldCause {
                field: field.into(),
                reason: reason.into(),
                message: message.into(),
            });
        }
        self
    }

    /// Adds a warning shown to the client (kubectl prints it).
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Adds an audit annotation (the host prefixes the plugin's name).
    pub fn annotate(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.push((key.into(), value.into()));
        self
    }

    /// Sets the JSON Patch of a mutating answer (an empty patch is none).
    pub fn patch(mut self, patch: Patch) -> Self {
        self.patch = patch;
        self
    }

    /// This answer when `condition` holds, else a plain allow: e.g.
    /// `Response::patched(p).when(req.is_create())`.
    pub fn when(self, condition: bool) -> Self {
        if condition { self } else { Self::allow() }
    }

    /// Whether the request is admitted.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The denial's status (`None` when allowed).
    pub fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }

    /// The denial's message (empty when allowed).
    pub fn message(&self) -> &str {
        self.status.as_ref().map_or("", |s| s.message.as_str())
    }

    /// The patch (empty when there is none).
    pub fn patch_ops(&self) -> &Patch {
        &self.patch
    }

    /// The warnings.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The audit annotations.
    pub fn audit_annotations(&self) -> &[(String, String)] {
        &self.annotations
    }

    /// Appends `other`'s warnings and annotations (used to chain phases).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn absorb_notes(&mut self, other: &Response) {
        let mut w = other.warnings.clone();
        w.append(&mut self.warnings);
        self.warnings = w;
        let mut a = other.annotations.clone();
        a.append(&mut self.annotations);
        self.annotations = a;
    }

    /// The WIT record the host receives.
    pub fn into_wit(self) -> AdmissionResponse {
        AdmissionResponse {
            allowed: self.allowed,
            status: if self.allowed { None } else { self.status },
            patch: (!self.patch.is_empty()).then(|| self.patch.to_json()),
            warnings: self.warnings,
            audit_annotations: self.annotations,
        }
    }

    /// The answer as the `response` of an `admission.k8s.io/v1`
    /// AdmissionReview (`patch` as a JSON array, not base64).
    pub fn to_review_json(&self) -> Value {
        let mut v = serde_json::json!({ "allowed": self.allowed });
        if let (false, Some(s)) = (self.allowed, &self.status) {
            let causes: Vec<Value> = s
                .causes
                .iter()
                .map(|c| serde_json::json!({"field": c.field, "reason": c.reason, "message": c.message}))
                .collect();
            v["status"] = serde_json::json!({
                "code": s.code, "reason": s.reason, "message": s.message,
                "details": {"causes": causes},
            });
        }
        if !self.patch.is_empty() {
            v["patch"] = self.patch.ops().into();
        }
        if !self.warnings.is_empty() {
            v["warnings"] = self.warnings.clone().into();
        }
        v
    }
}

/// The problems a validation finds, each tied to a field; one denial
/// naming them all, or an allow when there is none:
///
/// ```
/// # use wasm_apiserver_plugin_sdk::Violations;
/// let mut v = Violations::new();
/// v.required("metadata.labels", "missing required label(s): team");
/// v.forbidden("metadata.name", "name \"tmp-a\" is reserved");
/// let r = v.into_response("ConfigMap \"tmp-a\" denied");
/// assert_eq!(r.message(), "ConfigMap \"tmp-a\" denied: missing required label(s): team; name \"tmp-a\" is reserved");
/// assert_eq!(r.status().unwrap().causes.len(), 2);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Violations {
    causes: Vec<FieldCause>,
}

impl Violations {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A problem with `field` (`reason` as a `StatusCause`'s, e.g.
    /// `FieldValueInvalid`).
    pub fn add(&mut self, field: &str, reason: &str, message: impl Into<String>) {
        self.causes.push(FieldCause {
            field: field.into(),
            reason: reason.into(),
            message: message.into(),
        });
    }

    /// `field` has a value it must not have (`FieldValueInvalid`).
    pub fn invalid(&mut self, field: &str, message: impl Into<String>) {
        self.add(field, "FieldValueInvalid", message);
    }

    /// `field` is missing (`FieldValueRequired`).
    pub fn required(&mut self, field: &str, message: impl Into<String>) {
        self.add(field, "FieldValueRequired", message);
    }

    /// `field` is not allowed (`FieldValueForbidden`).
    pub fn forbidden(&mut self, field: &str, message: impl Into<String>) {
        self.add(field, "FieldValueForbidden", message);
    }

    /// True when nothing was found.
    pub fn is_empty(&self) -> bool {
        self.causes.is_empty()
    }

    /// Allow when empty; otherwise a 403 denial whose message is
    /// `"{prefix}: {first}; {second}..."`, with one cause per problem.
    pub fn into_response(self, prefix: impl Into<String>) -> Response {
        if self.causes.is_empty() {
            return Response::allow();
        }
        let list: Vec<&str> = self.causes.iter().map(|c| c.message.as_str()).collect();
        let mut r = Response::deny(format!("{}: {}", prefix.into(), list.join("; ")));
        if let Some(s) = &mut r.status {
            s.causes = self.causes;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn allow_has_nothing_but_allowed() {
        let w = Response::allow().into_wit();
        assert!(w.allowed);
        assert!(w.status.is_none() && w.patch.is_none());
        assert!(w.warnings.is_empty() && w.audit_annotations.is_empty());
    }

    #[test]
    fn deny_defaults_to_forbidden_and_takes_code_reason_and_causes() {
        let w = Response::deny("no").into_wit();
        let s = w.status.unwrap();
        assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (403, "Forbidden", "no")
        );
        let w = Response::invalid("bad")
            .cause("spec.replicas", "FieldValueInvalid", "too many")
            .cause("metadata.labels", "FieldValueRequired", "team")
            .into_wit();
        let s = w.status.unwrap();
        assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
        let fields: Vec<_> = s.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["spec.replicas", "metadata.labels"]);
        assert_eq!(s.causes[1].reason, "FieldValueRequired");
    }

    #[test]
    fn an_allowing_answer_never_carries_a_status_and_code_on_allow_is_inert() {
        let w = Response::allow()
            .code(500)
            .reason("X")
            .cause("a", "b", "c")
            .into_wit();
        assert!(w.allowed && w.status.is_none());
    }

    #[test]
    fn warnings_annotations_and_patch_reach_the_record() {
        let w = Response::patched(Patch::new().add("/spec/x", json!(1)))
            .warn("w1")
            .warn("w2")
            .annotate("k", "v")
            .into_wit();
        assert_eq!(w.warnings, ["w1", "w2"]);
        assert_eq!(w.audit_annotations, [("k".to_owned(), "v".to_owned())]);
        let p: Value = serde_json::from_str(&w.patch.unwrap()).unwrap();
        assert_eq!(p, json!([{"op": "add", "path": "/spec/x", "value": 1}]));
        // An empty patch is no patch at all.
        assert!(Response::patched(Patch::new()).into_wit().patch.is_none());
    }

    #[test]
    fn no_violation_allows() {
        let r = Violations::new().into_response("x");
        assert!(r.is_allowed() && r.message().is_empty());
        let mut v = Violations::new();
        v.invalid("spec.replicas", "too many");
        let s = v
            .into_response("Deployment \"web\" denied")
            .into_wit()
            .status
            .unwrap();
        assert_eq!(s.message, "Deployment \"web\" denied: too many");
        assert_eq!(
            (s.causes[0].field.as_str(), s.causes[0].reason.as_str()),
            ("spec.replicas", "FieldValueInvalid")
        );
    }

    #[test]
    fn the_review_form_is_what_a_webhook_answers() {
        let v = Response::invalid("bad")
            .cause("f", "R", "m")
            .warn("w")
            .to_review_json();
        assert_eq!(
            v,
            json!({"allowed": false, "warnings": ["w"], "status": {"code": 422, "reason": "Invalid",
                "message": "bad", "details": {"causes": [{"field": "f", "reason": "R", "message": "m"}]}}})
        );
    }
}
