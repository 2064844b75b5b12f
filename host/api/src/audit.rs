//! Auditing without IO: upstream's `audit.k8s.io/v1` [`Policy`] (which
//! [`Level`] and which stages a request is logged at) and the `Event` JSON
//! written one per line to `--audit-log-path`.
//!
//! Policy rules are tried in order and the first match wins ([`level_for`]);
//! with no match the level is `None`. A rule matches when every field it sets
//! matches: `users`, `userGroups` (any group), `verbs`, then either resources
//! (`namespaces`, `resources` with `group`, `resources` as `res`, `res/sub`,
//! `*`, `*/sub`, `res/*` for a resource and all its subresources,
//! and `resourceNames`) for resource requests, or
//! `nonResourceURLs` (exact, `*`, prefix ending in `*`) for non-resource
//! requests. The policy's `omitStages` are added to every rule's.
//!
//! [`event`] builds one `Event` for a stage; request and response bodies
//! are included only at levels `Request` and `RequestResponse` (and the
//! response body only at `RequestResponse`). [`should_emit`] says whether
//! a stage is logged at all.

use crate::authn::UserInfo;
use crate::rbac::Attributes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Audit annotations of one request, shared by the pipeline stages that add
/// them (authorization, admission) and the audit log that records them.
#[derive(Clone, Default, Debug)]
pub struct Annotations(pub Arc<Mutex<BTreeMap<String, String>>>);

impl Annotations {
    pub fn add(&self, items: impl IntoIterator<Item = (String, String)>) {
        self.0.lock().expect("audit annotations").extend(items);
    }
}

pub const API_VERSION: &str = "audit.k8s.io/v1";
/// Annotation keys the authorizer adds to every event.
pub const DECISION_ANNOTATION: &str = "authorization.k8s.io/decision";
pub const REASON_ANNOTATION: &str = "authorization.k8s.io/reason";

/// How much of a request is logged; ordered from least to most.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Level {
    /// Not logged.
    #[default]
    None,
    /// User, verb, resource, timestamps, status; no bodies.
    Metadata,
    /// Metadata plus the request body.
    Request,
    /// Metadata plus request and response bodies.
    RequestResponse,
}

/// A point in a request's life at which an event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// As soon as the request is received, before it is handled.
    RequestReceived,
    /// When response headers are sent (long-running requests such as watch).
    ResponseStarted,
    /// When the response is complete.
    ResponseComplete,
    /// When the handler panicked.
    Panic,
}

/// Resources of one API group in a policy rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    /// `""` is the core group.
    #[serde(default)]
    pub group: String,
    /// Empty means every resource of the group.
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One rule of a [`Policy`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// `""` matches non-namespaced resources.
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Overrides the policy's `omitManagedFields` when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omit_managed_fields: Option<bool>,
}

/// `audit.k8s.io/v1` `Policy`, as read from `--audit-policy-file`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    /// Stages never logged, for every rule.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from logged bodies.
    #[serde(default)]
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Parses and validates a policy file (YAML or JSON). Like upstream it
    /// needs `apiVersion: audit.k8s.io/v1`, `kind: Policy` and at least one
    /// rule; a rule may not name both resources and non-resource URLs, and
    /// `*` may only end a non-resource URL.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let p: Policy =
            serde_yaml::from_str(text).map_err(|e| format!("invalid audit policy: {e}"))?;
        if p.api_version != API_VERSION || p.kind != "Policy" {
            return Err(format!(
                "invalid audit policy: want apiVersion {API_VERSION} and kind Policy, got {:?} and {:?}",
                p.api_version, p.kind
            ));
        }
        if p.rules.is_empty() {
            return Err("invalid audit policy: policy contains no rules".into());
        }
        for (i, r) in p.rules.iter().enumerate() {
            if !r.non_resource_urls.is_empty()
                && (!r.resources.is_empty() || !r.namespaces.is_empty())
            {
                return Err(format!(
                    "invalid audit policy: rules[{i}]: rules cannot apply to both regular resources and non-resource URLs"
                ));
            }
            for u in &r.non_resource_urls {
                if u.trim_end_matches('*').contains('*') {
                    return Err(format!(
                        "invalid audit policy: rules[{i}].nonResourceURLs: {u:?}: '*' only allowed at the end"
                    ));
                }
            }
        }
        Ok(p)
    }
}

/// What the policy says about one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestAuditConfig {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

fn has(set: &[String], s: &str) -> bool {
    set.iter().any(|x| x == s)
}

fn url_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || (spec.ends_with('*') && path.starts_with(spec.trim_end_matches('*')))
}

fn resource_matches(rule: &PolicyRule, a: &Attributes) -> bool {
    if !a.is_resource_request {
        return false;
    }
    if !rule.namespaces.is_empty() && !has(&rule.namespaces, a.namespace.as_deref().unwrap_or("")) {
        return false;
    }
    if rule.resources.is_empty() {
        return true;
    }
    let sub = a.subresource.as_deref().unwrap_or("");
    // Borrowed in the common case: no allocation per rule.
    let combined: std::borrow::Cow<'_, str> = if sub.is_empty() {
        a.resource.as_str().into()
    } else {
        format!("{}/{sub}", a.resource).into()
    };
    let name = a.name.as_deref().unwrap_or("");
    rule.resources
        .iter()
        .filter(|gr| gr.group == a.api_group)
        .any(|gr| {
            gr.resources.is_empty()
                || gr.resources.iter().any(|res| {
                    (gr.resource_names.is_empty() || has(&gr.resource_names, name))
                        && (res == "*"
                            || *res == combined
                            || (!sub.is_empty() && res.strip_prefix("*/") == Some(sub))
                            || res.strip_suffix("/*") == Some(a.resource.as_str()))
                })
        })
}

/// Upstream `ruleMatches`.
fn rule_matches(rule: &PolicyRule, a: &Attributes) -> bool {
    if !rule.users.is_empty() && !has(&rule.users, &a.user) {
        return false;
    }
    if !rule.user_groups.is_empty() && !a.groups.iter().any(|g| has(&rule.user_groups, g)) {
        return false;
    }
    if !rule.verbs.is_empty() && !has(&rule.verbs, &a.verb) {
        return false;
    }
    if !rule.namespaces.is_empty() || !rule.resources.is_empty() {
        return resource_matches(rule, a);
    }
    if !rule.non_resource_urls.is_empty() {
        return !a.is_resource_request
            && rule
                .non_resource_urls
                .iter()
                .any(|s| url_matches(&a.path, s));
    }
    true
}

fn union(a: &[Stage], b: &[Stage]) -> Vec<Stage> {
    let mut out = a.to_vec();
    for s in b {
        if !out.contains(s) {
            out.push(*s);
        }
    }
    out
}

/// The first matching rule's level, stages to omit (the rule's plus the
/// policy's) and managed-fields choice; with no match, level `None`.
pub fn config_for(policy: &Policy, attrs: &Attributes) -> RequestAuditConfig {
    match policy.rules.iter().find(|r| rule_matches(r, attrs)) {
        Some(r) => RequestAuditConfig {
            level: r.level,
            omit_stages: union(&policy.omit_stages, &r.omit_stages),
            omit_managed_fields: r.omit_managed_fields.unwrap_or(policy.omit_managed_fields),
        },
        None => RequestAuditConfig {
            level: Level::None,
            omit_stages: policy.omit_stages.clone(),
            omit_managed_fields: policy.omit_managed_fields,
        },
    }
}

/// [`config_for`]'s level and stages to omit.
pub fn level_for(policy: &Policy, attrs: &Attributes) -> (Level, Vec<Stage>) {
    let c = config_for(policy, attrs);
    (c.level, c.omit_stages)
}

/// Whether an event is written for `stage`.
pub fn should_emit(level: Level, omit_stages: &[Stage], stage: Stage) -> bool {
    level > Level::None && !omit_stages.contains(&stage)
}

/// The object a request is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// Everything known about a request, filled in as it is handled; each
/// stage's [`event`] is built from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    pub audit_id: String,
    pub request_uri: String,
    pub verb: String,
    pub user: UserInfo,
    pub impersonated_user: Option<UserInfo>,
    pub source_ips: Vec<String>,
    pub user_agent: Option<String>,
    pub object_ref: Option<ObjectRef>,
    /// See [`response_status`].
    pub response_status: Option<Value>,
    pub request_object: Option<Value>,
    pub response_object: Option<Value>,
    pub request_received: DateTime<Utc>,
    /// Authorization decision and reason, admission plugin annotations.
    pub annotations: BTreeMap<String, String>,
}

impl Record {
    /// Records the authorizer's verdict as upstream's annotations
    /// (`authorization.k8s.io/decision`: `allow` or `forbid`, and the reason).
    pub fn annotate_decision(&mut self, allowed: bool, reason: &str) {
        let decision = if allowed { "allow" } else { "forbid" };
        self.annotations
            .insert(DECISION_ANNOTATION.into(), decision.into());
        self.annotations
            .insert(REASON_ANNOTATION.into(), reason.into());
    }
}

/// `metav1.MicroTime` text: RFC 3339 in UTC with six fractional digits.
pub fn micro_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The event's `responseStatus` for an HTTP `code`, with `status`,
/// `message`, `reason` and `details` copied from a `Status` body if the
/// response was one (as upstream copies only those bounded fields).
pub fn response_status(code: u16, status_body: Option<&Value>) -> Value {
    let mut s = Map::new();
    s.insert("metadata".into(), json!({}));
    if let Some(body) =
        status_body.filter(|b| b.get("kind").and_then(Value::as_str) == Some("Status"))
    {
        for k in ["status", "message", "reason", "details"] {
            if let Some(v) = body.get(k).filter(|v| !v.is_null() && *v != "") {
                s.insert(k.into(), v.clone());
            }
        }
    }
    s.insert("code".into(), json!(code));
    Value::Object(s)
}

fn strip_managed_fields(mut v: Value) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(m) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
        }
    }
    v
}

/// One `audit.k8s.io/v1` `Event` for `stage` at `level`.
pub fn event(
    record: &Record,
    level: Level,
    stage: Stage,
    stage_timestamp: DateTime<Utc>,
    omit_managed_fields: bool,
) -> Value {
    let mut e = Map::new();
    e.insert("kind".into(), json!("Event"));
    e.insert("apiVersion".into(), json!(API_VERSION));
    e.insert("level".into(), json!(level));
    e.insert("auditID".into(), json!(record.audit_id));
    e.insert("stage".into(), json!(stage));
    e.insert("requestURI".into(), json!(record.request_uri));
    e.insert("verb".into(), json!(record.verb));
    e.insert("user".into(), json!(record.user));
    if let Some(u) = &record.impersonated_user {
        e.insert("impersonatedUser".into(), json!(u));
    }
    if !record.source_ips.is_empty() {
        e.insert("sourceIPs".into(), json!(record.source_ips));
    }
    if let Some(ua) = &record.user_agent {
        e.insert("userAgent".into(), json!(ua));
    }
    if let Some(o) = &record.object_ref {
        e.insert("objectRef".into(), json!(o));
    }
    if let Some(s) = &record.response_status {
        e.insert("responseStatus".into(), s.clone());
    }
    let body = |v: &Value| {
        if omit_managed_fields {
            strip_managed_fields(v.clone())
        } else {
            v.clone()
        }
    };
    if level >= Level::Request
        && let Some(o) = &record.request_object
    {
        e.insert("requestObject".into(), body(o));
    }
    if level >= Level::RequestResponse
        && let Some(o) = &record.response_object
    {
        e.insert("responseObject".into(), body(o));
    }
    e.insert(
        "requestReceivedTimestamp".into(),
        json!(micro_time(record.request_received)),
    );
    e.insert("stageTimestamp".into(), json!(micro_time(stage_timestamp)));
    if !record.annotations.is_empty() {
        e.insert("annotations".into(), json!(record.annotations));
    }
    Value::Object(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
  - level: None
    userGroups: ["system:nodes"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["secrets", "configmaps/status"]
  - level: Request
    namespaces: ["audited"]
    omitStages: [ResponseStarted]
    omitManagedFields: false
  - level: RequestResponse
    resources:
      - group: "apps"
        resources: ["deployments/*", "*/scale"]
      - group: "coordination.k8s.io"
        resourceNames: ["special"]
        resources: ["leases"]
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  - level: Metadata
    omitStages: [RequestReceived]
omitManagedFields: true
"#;

    fn res(user: &str, groups: &[&str], verb: &str, group: &str, resource: &str) -> Attributes {
        Attributes::resource(user, groups, verb, group, resource)
    }

    #[test]
    fn policy_levels_first_match_wins() {
        let p = Policy::parse(POLICY).unwrap();
        let cases: Vec<(&str, Attributes, Level)> = vec![
            (
                "user and verb",
                res("system:kube-proxy", &[], "watch", "", "services"),
                Level::None,
            ),
            (
                "user, other verb",
                res("system:kube-proxy", &[], "get", "", "services"),
                Level::Metadata,
            ),
            (
                "group",
                res("n1", &["system:nodes"], "get", "", "secrets"),
                Level::None,
            ),
            (
                "earlier rule wins",
                res("u", &[], "get", "", "secrets").in_namespace("audited"),
                Level::RequestResponse,
            ),
            (
                "namespace rule",
                res("u", &[], "create", "", "configmaps").in_namespace("audited"),
                Level::Request,
            ),
            (
                "namespace rule misses",
                res("u", &[], "create", "", "configmaps").in_namespace("dev"),
                Level::Metadata,
            ),
            (
                "exact subresource",
                res("u", &[], "update", "", "configmaps").with_subresource("status"),
                Level::RequestResponse,
            ),
            (
                "resource without its subresource",
                res("u", &[], "update", "", "configmaps"),
                Level::Metadata,
            ),
            (
                "resource/* matches subresource",
                res("u", &[], "get", "apps", "deployments").with_subresource("status"),
                Level::RequestResponse,
            ),
            (
                "resource/* matches the resource too",
                res("u", &[], "get", "apps", "deployments"),
                Level::RequestResponse,
            ),
            (
                "resource/* needs that resource",
                res("u", &[], "get", "apps", "replicasets"),
                Level::Metadata,
            ),
            (
                "*/scale",
                res("u", &[], "get", "apps", "statefulsets").with_subresource("scale"),
                Level::RequestResponse,
            ),
            (
                "*/scale needs scale",
                res("u", &[], "get", "apps", "statefulsets").with_subresource("status"),
                Level::Metadata,
            ),
            (
                "resourceNames match",
                res("u", &[], "get", "coordination.k8s.io", "leases").named("special"),
                Level::RequestResponse,
            ),
            (
                "resourceNames miss",
                res("u", &[], "get", "coordination.k8s.io", "leases").named("other"),
                Level::Metadata,
            ),
            (
                "group must match",
                res("u", &[], "get", "apps", "secrets"),
                Level::Metadata,
            ),
            (
                "url prefix",
                Attributes::non_resource("u", &[], "get", "/healthz/etcd"),
                Level::None,
            ),
            (
                "url exact",
                Attributes::non_resource("u", &[], "get", "/version"),
                Level::None,
            ),
            (
                "url other",
                Attributes::non_resource("u", &[], "get", "/version/x"),
                Level::Metadata,
            ),
        ];
        for (name, a, want) in cases {
            assert_eq!(level_for(&p, &a).0, want, "{name}");
        }
    }

    #[test]
    fn omit_stages_and_managed_fields_merge() {
        let p = Policy::parse(POLICY).unwrap();
        let c = config_for(
            &p,
            &res("u", &[], "create", "", "configmaps").in_namespace("audited"),
        );
        assert_eq!(c.level, Level::Request);
        assert_eq!(
            c.omit_stages,
            vec![Stage::RequestReceived, Stage::ResponseStarted]
        );
        assert!(!c.omit_managed_fields, "rule overrides policy");
        let c = config_for(&p, &res("u", &[], "get", "", "secrets"));
        assert_eq!(c.omit_stages, vec![Stage::RequestReceived]);
        assert!(c.omit_managed_fields);
        let empty = Policy {
            rules: vec![PolicyRule {
                level: Level::Request,
                users: vec!["x".into()],
                ..Default::default()
            }],
            omit_stages: vec![Stage::Panic],
            ..Default::default()
        };
        assert_eq!(
            config_for(&empty, &res("u", &[], "get", "", "pods")),
            RequestAuditConfig {
                level: Level::None,
                omit_stages: vec![Stage::Panic],
                omit_managed_fields: false
            }
        );
        let cases = [
            (Level::Metadata, Stage::ResponseComplete, true),
            (Level::Metadata, Stage::RequestReceived, false),
            (Level::None, Stage::ResponseComplete, false),
            (Level::RequestResponse, Stage::Panic, true),
        ];
        for (level, stage, want) in cases {
            assert_eq!(
                should_emit(level, &[Stage::RequestReceived], stage),
                want,
                "{level:?} {stage:?}"
            );
        }
    }

    #[test]
    fn policy_parse_errors() {
        let cases = [
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n",
                "no rules",
            ),
            (
                "apiVersion: v1\nkind: Policy\nrules: [{level: None}]\n",
                "apiVersion",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n",
                "unknown variant",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, omitStages: [Later]}]\n",
                "unknown variant",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [/a], resources: [{group: ''}]}]\n",
                "both",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: ['/a*/b']}]\n",
                "only allowed at the end",
            ),
        ];
        for (text, want) in cases {
            let err = Policy::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        let json =
            r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"Metadata"}]}"#;
        assert_eq!(Policy::parse(json).unwrap().rules[0].level, Level::Metadata);
    }

    fn record() -> Record {
        let mut r = Record {
            audit_id: "1b2c".into(),
            request_uri: "/api/v1/namespaces/dev/configmaps".into(),
            verb: "create".into(),
            user: UserInfo::new("alice", &["system:authenticated"]),
            source_ips: vec!["127.0.0.1".into()],
            user_agent: Some("kubectl/v1.34".into()),
            impersonated_user: None,
            object_ref: Some(ObjectRef {
                resource: "configmaps".into(),
                namespace: "dev".into(),
                name: "cm".into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            response_status: Some(response_status(201, None)),
            request_object: Some(
                json!({"kind":"ConfigMap","metadata":{"name":"cm","managedFields":[{}]}}),
            ),
            response_object: Some(json!({"kind":"ConfigMap","metadata":{"name":"cm","uid":"u1"}})),
            request_received: "2030-01-01T00:00:00.123456789Z".parse().unwrap(),
            annotations: BTreeMap::new(),
        };
        r.annotate_decision(true, "RBAC: allowed by x");
        r
    }

    #[test]
    fn event_shape_at_each_level() {
        let r = record();
        let t: DateTime<Utc> = "2030-01-01T00:00:01.5Z".parse().unwrap();
        let e = event(&r, Level::Metadata, Stage::ResponseComplete, t, false);
        assert_eq!(
            e,
            json!({
                "kind": "Event",
                "apiVersion": "audit.k8s.io/v1",
                "level": "Metadata",
                "auditID": "1b2c",
                "stage": "ResponseComplete",
                "requestURI": "/api/v1/namespaces/dev/configmaps",
                "verb": "create",
                "user": {"username": "alice", "groups": ["system:authenticated"]},
                "sourceIPs": ["127.0.0.1"],
                "userAgent": "kubectl/v1.34",
                "objectRef": {"resource": "configmaps", "namespace": "dev", "name": "cm", "apiVersion": "v1"},
                "responseStatus": {"metadata": {}, "code": 201},
                "requestReceivedTimestamp": "2030-01-01T00:00:00.123456Z",
                "stageTimestamp": "2030-01-01T00:00:01.500000Z",
                "annotations": {
                    "authorization.k8s.io/decision": "allow",
                    "authorization.k8s.io/reason": "RBAC: allowed by x"
                }
            })
        );
        let e = event(&r, Level::Request, Stage::ResponseComplete, t, true);
        assert_eq!(
            e["requestObject"],
            json!({"kind":"ConfigMap","metadata":{"name":"cm"}})
        );
        assert!(e.get("responseObject").is_none());
        let e = event(
            &r,
            Level::RequestResponse,
            Stage::ResponseComplete,
            t,
            false,
        );
        assert_eq!(e["requestObject"]["metadata"]["managedFields"], json!([{}]));
        assert_eq!(e["responseObject"]["metadata"]["uid"], "u1");
        assert_eq!(e["level"], "RequestResponse");
    }

    #[test]
    fn denied_event_and_status_copy() {
        let mut r = record();
        r.annotate_decision(false, "");
        r.request_object = None;
        r.response_object = None;
        r.impersonated_user = Some(UserInfo::new("bob", &[]));
        let status = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"forbidden","reason":"Forbidden","details":{"kind":"configmaps"},"code":403});
        r.response_status = Some(response_status(403, Some(&status)));
        let e = event(
            &r,
            Level::RequestResponse,
            Stage::ResponseComplete,
            r.request_received,
            false,
        );
        assert_eq!(
            e["responseStatus"],
            json!({"metadata":{},"status":"Failure","message":"forbidden","reason":"Forbidden",
                   "details":{"kind":"configmaps"},"code":403})
        );
        assert_eq!(e["annotations"][DECISION_ANNOTATION], "forbid");
        assert_eq!(e["impersonatedUser"], json!({"username": "bob"}));
        assert!(e.get("requestObject").is_none() && e.get("responseObject").is_none());
        // A non-Status body contributes only the code.
        assert_eq!(
            response_status(200, Some(&json!({"kind":"Pod","status":{}}))),
            json!({"metadata":{},"code":200})
        );
    }

    #[test]
    fn managed_fields_stripped_from_lists() {
        let list = json!({"kind":"List","metadata":{},"items":[
            {"metadata":{"name":"a","managedFields":[{}]}},{"metadata":{"name":"b"}}]});
        assert_eq!(
            strip_managed_fields(list),
            json!({"kind":"List","metadata":{},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]})
        );
    }

    #[test]
    fn micro_time_format() {
        let t: DateTime<Utc> = "2024-02-29T23:59:59Z".parse().unwrap();
        assert_eq!(micro_time(t), "2024-02-29T23:59:59.000000Z");
    }
}
