//! `ValidatingAdmissionPolicy` and `ValidatingAdmissionPolicyBinding`
//! (`admissionregistration.k8s.io/v1`) without IO: specs checked and
//! compiled once ([`Policy::compile`], [`Binding::parse`]), matched against a
//! request ([`Matcher`]) and evaluated ([`Policy::evaluate`]) on the CEL
//! engine of [`crate::cel`].
//!
//! Semantics follow upstream's `validatingadmissionpolicy` plugin:
//! `matchConstraints` and the binding's `matchResources` both have to match
//! (namespace and object selectors, `resourceRules` with `resourceNames` and
//! `scope`, `excludeResourceRules`, `matchPolicy`); then every
//! `matchCondition` has to be true; `variables` are evaluated in order and
//! read as `variables.<name>`; each failed `validation` is a [`Failure`]
//! with its message (`messageExpression`, then `message`, then `failed
//! expression: ...`) and reason, and each `auditAnnotation` a
//! `<policy>/<key>` annotation. What a failure does (Deny, Warn, Audit) and
//! how an evaluation error counts (`failurePolicy`) is the caller's.
//!
//! Every expression's cost is computed from the request's actual data
//! before it runs (upstream's per-call limit, and a budget for one
//! policy evaluation), so a runaway expression is an error, never a hang.

pub mod mutating;

use crate::admission::{FailurePolicy, RequestAttributes, Rule};
use crate::cel::{self, authz::Authorizer, cost::Shape};
use crate::error::Cause;
use crate::meta;
use crate::selector::{LabelSelector, Requirement};
use ::cel::{Context, Value as CelValue};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const GROUP: &str = "admissionregistration.k8s.io";
pub const POLICIES: &str = "validatingadmissionpolicies";
pub const BINDINGS: &str = "validatingadmissionpolicybindings";

/// Resources no admission policy applies to (upstream exempts the
/// admission configuration itself, so a policy cannot lock itself in).
pub fn is_exempt(group: &str, resource: &str) -> bool {
    group == GROUP
        && matches!(
            resource,
            POLICIES
                | BINDINGS
                | "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// One compiled expression.
pub struct Expression {
    pub source: String,
    rule: Arc<cel::Rule>,
}

impl Expression {
    fn compile(source: &str, field: &str, causes: &mut Vec<Cause>) -> Option<Self> {
        if source.trim().is_empty() {
            causes.push(Cause::missing(field));
            return None;
        }
        match cel::compile_rule(source) {
            Ok(rule) => Some(Expression {
                source: source.to_string(),
                rule,
            }),
            Err(e) => {
                causes.push(Cause::invalid(
                    field,
                    source,
                    &format!("compilation failed: {e}"),
                ));
                None
            }
        }
    }
}

/// A rule with the names it is limited to.
struct NamedRule {
    rule: Rule,
    names: Vec<String>,
}

/// `matchConstraints` of a policy, `matchResources` of a binding.
pub struct Matcher {
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
    resource_rules: Vec<NamedRule>,
    exclude: Vec<NamedRule>,
    /// `matchPolicy: Equivalent` (the default): a rule matches the same
    /// group and resource in any version.
    equivalent: bool,
}

/// What a request looks like to the matchers.
pub struct MatchInput<'a> {
    pub attrs: RequestAttributes<'a>,
    /// The object's name (empty on a create with `generateName`).
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    /// The labels of the request's namespace; `None` when it has none
    /// (cluster-scoped objects, which namespace selectors do not filter).
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn selector(v: &Value, field: &str, causes: &mut Vec<Cause>) -> Option<LabelSelector> {
    if v.is_null() {
        return None;
    }
    let mut reqs: Vec<Requirement> = v["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| Requirement::Equals(k.clone(), v.as_str().unwrap_or("").into()))
                .collect()
        })
        .unwrap_or_default();
    for (i, e) in v["matchExpressions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let key = e["key"].as_str().unwrap_or_default().to_string();
        let values = strings(&e["values"]);
        reqs.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => Requirement::In(key, values),
            "NotIn" => Requirement::NotIn(key, values),
            "Exists" => Requirement::Exists(key),
            "DoesNotExist" => Requirement::DoesNotExist(key),
            other => {
                causes.push(Cause {
                    reason: "FieldValueNotSupported".into(),
                    field: format!("{field}.matchExpressions[{i}].operator"),
                    message: format!(
                        "Unsupported value: {other:?}: supported values: \"DoesNotExist\", \"Exists\", \"In\", \"NotIn\""
                    ),
                });
                continue;
            }
        });
    }
    Some(LabelSelector(reqs))
}

fn named_rules(v: &Value, field: &str, causes: &mut Vec<Cause>) -> Vec<NamedRule> {
    let mut out = Vec::new();
    for (i, r) in v
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let rule = Rule {
            operations: strings(&r["operations"]),
            api_groups: strings(&r["apiGroups"]),
            api_versions: strings(&r["apiVersions"]),
            resources: strings(&r["resources"]),
            scope: r["scope"].as_str().map(String::from),
        };
        for (key, list) in [
            ("operations", &rule.operations),
            ("apiGroups", &rule.api_groups),
            ("apiVersions", &rule.api_versions),
            ("resources", &rule.resources),
        ] {
            if list.is_empty() {
                causes.push(Cause::missing(&format!("{field}[{i}].{key}")));
            }
        }
        if let Some(scope) = &rule.scope
            && !matches!(scope.as_str(), "*" | "Cluster" | "Namespaced")
        {
            causes.push(Cause {
                reason: "FieldValueNotSupported".into(),
                field: format!("{field}[{i}].scope"),
                message: format!(
                    "Unsupported value: {scope:?}: supported values: \"*\", \"Cluster\", \"Namespaced\""
                ),
            });
        }
        out.push(NamedRule {
            rule,
            names: strings(&r["resourceNames"]),
        });
    }
    out
}

impl NamedRule {
    fn matches(&self, m: &MatchInput<'_>, equivalent: bool) -> bool {
        if !self.names.is_empty() && !self.names.iter().any(|n| n == m.name) {
            return false;
        }
        if self.rule.matches(&m.attrs) {
            return true;
        }
        equivalent
            && self.rule.matches(&RequestAttributes {
                version: self
                    .rule
                    .api_versions
                    .first()
                    .map_or(m.attrs.version, String::as_str),
                ..m.attrs
            })
    }
}

impl Matcher {
    fn parse(v: &Value, field: &str, rules_required: bool, causes: &mut Vec<Cause>) -> Self {
        let resource_rules = named_rules(
            &v["resourceRules"],
            &format!("{field}.resourceRules"),
            causes,
        );
        if rules_required && resource_rules.is_empty() {
            causes.push(Cause::missing(&format!("{field}.resourceRules")));
        }
        let equivalent = match v["matchPolicy"].as_str() {
            None | Some("Equivalent") => true,
            Some("Exact") => false,
            Some(other) => {
                causes.push(Cause {
                    reason: "FieldValueNotSupported".into(),
                    field: format!("{field}.matchPolicy"),
                    message: format!(
                        "Unsupported value: {other:?}: supported values: \"Equivalent\", \"Exact\""
                    ),
                });
                true
            }
        };
        Matcher {
            namespace_selector: selector(
                &v["namespaceSelector"],
                &format!("{field}.namespaceSelector"),
                causes,
            ),
            object_selector: selector(
                &v["objectSelector"],
                &format!("{field}.objectSelector"),
                causes,
            ),
            resource_rules,
            exclude: named_rules(
                &v["excludeResourceRules"],
                &format!("{field}.excludeResourceRules"),
                causes,
            ),
            equivalent,
        }
    }

    /// Whether a request is in scope.
    pub fn matches(&self, m: &MatchInput<'_>) -> bool {
        if let Some(sel) = self.namespace_selector.as_ref().filter(|s| !s.is_empty()) {
            let own;
            let labels = if m.attrs.resource == "namespaces" && m.attrs.group.is_empty() {
                own = m
                    .object
                    .or(m.old_object)
                    .map(meta::labels)
                    .unwrap_or_default();
                Some(&own)
            } else {
                m.namespace_labels
            };
            if let Some(labels) = labels
                && !sel.matches(labels)
            {
                return false;
            }
        }
        if let Some(sel) = self.object_selector.as_ref().filter(|s| !s.is_empty()) {
            let hit = |o: Option<&Value>| o.is_some_and(|o| sel.matches_object(o));
            if !hit(m.object) && !hit(m.old_object) {
                return false;
            }
        }
        if self.exclude.iter().any(|r| r.matches(m, self.equivalent)) {
            return false;
        }
        self.resource_rules.is_empty()
            || self
                .resource_rules
                .iter()
                .any(|r| r.matches(m, self.equivalent))
    }

    /// Whether matching needs the request's namespace labels.
    pub fn selects_namespaces(&self) -> bool {
        self.namespace_selector
            .as_ref()
            .is_some_and(|s| !s.is_empty())
    }

    /// Whether the rules can match a group at all (for callers that skip
    /// work: none of a policy's rules names the request's group).
    pub fn mentions_group(&self, group: &str) -> bool {
        self.resource_rules.is_empty()
            || self
                .resource_rules
                .iter()
                .any(|r| r.rule.api_groups.iter().any(|g| g == "*" || g == group))
    }
}

/// `spec.paramKind`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamKind {
    pub api_version: String,
    pub kind: String,
}

struct Validation {
    expression: Expression,
    message: Option<String>,
    message_expression: Option<Expression>,
    reason: String,
}

/// What validating and mutating policies share: where they apply and
/// what every evaluation starts with.
pub struct Common {
    pub name: String,
    pub generation: i64,
    pub param_kind: Option<ParamKind>,
    pub matcher: Matcher,
    pub failure_policy: FailurePolicy,
    match_conditions: Vec<(String, Expression)>,
    variables: Vec<(String, Expression)>,
}

impl Common {
    /// Whether an expression of this policy reads `namespaceObject`
    /// (or the policy selects namespaces): only then is it looked up.
    pub fn needs_namespace(&self, more: &[&Expression]) -> bool {
        self.matcher.selects_namespaces()
            || self
                .match_conditions
                .iter()
                .chain(&self.variables)
                .map(|(_, e)| e)
                .chain(more.iter().copied())
                .any(|e| e.rule.references().has_variable("namespaceObject"))
    }
}

/// A compiled `ValidatingAdmissionPolicy`.
pub struct Policy {
    common: Common,
    validations: Vec<Validation>,
    audit_annotations: Vec<(String, Expression)>,
}

impl std::ops::Deref for Policy {
    type Target = Common;
    fn deref(&self) -> &Common {
        &self.common
    }
}

const REASONS: [&str; 4] = [
    "Unauthorized",
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
];

/// The HTTP code of a validation's `reason`.
pub fn reason_code(reason: &str) -> u16 {
    match reason {
        "Unauthorized" => 401,
        "Invalid" => 422,
        "RequestEntityTooLarge" => 413,
        _ => 403,
    }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn is_identifier(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Named expressions (`matchConditions`, `variables`) with upstream's checks.
fn named_expressions(
    list: &Value,
    field: &str,
    key: &str,
    causes: &mut Vec<Cause>,
    check_name: impl Fn(&str) -> Option<String>,
) -> Vec<(String, Expression)> {
    let mut out: Vec<(String, Expression)> = Vec::new();
    for (i, v) in items(list).iter().enumerate() {
        let name = v["name"].as_str().unwrap_or_default();
        let name_field = format!("{field}[{i}].name");
        if name.is_empty() {
            causes.push(Cause::missing(&name_field));
        } else if let Some(why) = check_name(name) {
            causes.push(Cause::invalid(&name_field, name, &why));
        } else if out.iter().any(|(n, _)| n == name) {
            causes.push(Cause {
                reason: "FieldValueDuplicate".into(),
                field: name_field,
                message: format!("Duplicate value: {name:?}"),
            });
        }
        let source = v[key].as_str().unwrap_or_default();
        if let Some(e) = Expression::compile(source, &format!("{field}[{i}].{key}"), causes) {
            out.push((name.to_string(), e));
        }
    }
    out
}

impl Common {
    /// Parses and compiles the shared fields of a policy object.
    pub(crate) fn parse(obj: &Value, causes: &mut Vec<Cause>) -> Common {
        let spec = &obj["spec"];
        let param_kind = match &spec["paramKind"] {
            Value::Null => None,
            pk => {
                let api_version = pk["apiVersion"].as_str().unwrap_or_default().to_string();
                let kind = pk["kind"].as_str().unwrap_or_default().to_string();
                if api_version.is_empty() {
                    causes.push(Cause::missing("spec.paramKind.apiVersion"));
                }
                if kind.is_empty() {
                    causes.push(Cause::missing("spec.paramKind.kind"));
                }
                Some(ParamKind { api_version, kind })
            }
        };
        if spec["matchConstraints"].is_null() {
            causes.push(Cause::missing("spec.matchConstraints"));
        }
        let matcher = Matcher::parse(
            &spec["matchConstraints"],
            "spec.matchConstraints",
            !spec["matchConstraints"].is_null(),
            causes,
        );
        let failure_policy = match spec["failurePolicy"].as_str() {
            None | Some("Fail") => FailurePolicy::Fail,
            Some("Ignore") => FailurePolicy::Ignore,
            Some(other) => {
                causes.push(Cause {
                    reason: "FieldValueNotSupported".into(),
                    field: "spec.failurePolicy".into(),
                    message: format!(
                        "Unsupported value: {other:?}: supported values: \"Fail\", \"Ignore\""
                    ),
                });
                FailurePolicy::Fail
            }
        };
        let match_conditions = named_expressions(
            &spec["matchConditions"],
            "spec.matchConditions",
            "expression",
            causes,
            crate::validation::label_key_error,
        );
        let variables = named_expressions(
            &spec["variables"],
            "spec.variables",
            "expression",
            causes,
            |n| (!is_identifier(n)).then(|| "name is not a valid CEL identifier".to_string()),
        );
        Common {
            name: meta::name(obj).unwrap_or_default().to_string(),
            generation: obj["metadata"]["generation"].as_i64().unwrap_or(0),
            param_kind,
            matcher,
            failure_policy,
            match_conditions,
            variables,
        }
    }
}

impl Policy {
    /// Checks and compiles a policy object; the causes carry upstream's
    /// field paths (`spec.validations[0].expression`).
    pub fn compile(obj: &Value) -> Result<Policy, Vec<Cause>> {
        let mut causes = Vec::new();
        let common = Common::parse(obj, &mut causes);
        let spec = &obj["spec"];
        let mut validations = Vec::new();
        for (i, v) in items(&spec["validations"]).iter().enumerate() {
            let field = format!("spec.validations[{i}]");
            let expression = Expression::compile(
                v["expression"].as_str().unwrap_or_default(),
                &format!("{field}.expression"),
                &mut causes,
            );
            let message_expression = v["messageExpression"].as_str().and_then(|m| {
                Expression::compile(m, &format!("{field}.messageExpression"), &mut causes)
            });
            let reason = v["reason"].as_str().unwrap_or("Forbidden").to_string();
            if !REASONS.contains(&reason.as_str()) {
                causes.push(Cause {
                    reason: "FieldValueNotSupported".into(),
                    field: format!("{field}.reason"),
                    message: format!(
                        "Unsupported value: {reason:?}: supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\", \"Unauthorized\""
                    ),
                });
            }
            if let Some(message) = v["message"].as_str()
                && message.contains('\n')
            {
                causes.push(Cause::invalid(
                    &format!("{field}.message"),
                    message,
                    "message must not contain line breaks",
                ));
            }
            if let Some(expression) = expression {
                validations.push(Validation {
                    expression,
                    message: v["message"]
                        .as_str()
                        .filter(|m| !m.trim().is_empty())
                        .map(String::from),
                    message_expression,
                    reason,
                });
            }
        }
        let audit_annotations = named_expressions(
            &spec["auditAnnotations"],
            "spec.auditAnnotations",
            "valueExpression",
            &mut causes,
            |_| None,
        );
        for (i, a) in items(&spec["auditAnnotations"]).iter().enumerate() {
            if a["name"].is_null() {
                // `named_expressions` reads `name`; audit annotations have a `key`.
                causes.retain(|c| c.field != format!("spec.auditAnnotations[{i}].name"));
            }
            let key = a["key"].as_str().unwrap_or_default();
            if key.is_empty() {
                causes.push(Cause::missing(&format!("spec.auditAnnotations[{i}].key")));
            }
        }
        let audit_annotations = audit_annotations
            .into_iter()
            .zip(items(&spec["auditAnnotations"]))
            .map(|((_, e), a)| (a["key"].as_str().unwrap_or_default().to_string(), e))
            .collect();
        if items(&spec["validations"]).is_empty() && items(&spec["auditAnnotations"]).is_empty() {
            causes.push(Cause::required(
                "spec.validations",
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        if !causes.is_empty() {
            return Err(causes);
        }
        Ok(Policy {
            common,
            validations,
            audit_annotations,
        })
    }

    /// Whether evaluating it needs the request's namespace object.
    pub fn needs_namespace(&self) -> bool {
        let mut more: Vec<&Expression> = Vec::new();
        for v in &self.validations {
            more.push(&v.expression);
            more.extend(&v.message_expression);
        }
        more.extend(self.audit_annotations.iter().map(|(_, e)| e));
        self.common.needs_namespace(&more)
    }

    /// The number of validations (the `VALIDATIONS` column).
    pub fn validation_count(&self) -> usize {
        self.validations.len()
    }
}

/// `spec.validationActions` of a binding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Actions {
    pub deny: bool,
    pub warn: bool,
    pub audit: bool,
}

impl Actions {
    /// As upstream lists them in audit annotations.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.deny, "Deny"),
            (self.warn, "Warn"),
            (self.audit, "Audit"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect()
    }
}

/// `spec.paramRef` of a binding.
pub struct ParamRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub selector: Option<LabelSelector>,
    /// `parameterNotFoundAction: Deny`.
    pub deny_when_missing: bool,
}

/// A checked `ValidatingAdmissionPolicyBinding`.
pub struct Binding {
    pub name: String,
    pub policy_name: String,
    pub param_ref: Option<ParamRef>,
    pub matcher: Option<Matcher>,
    pub actions: Actions,
}

impl Binding {
    pub fn parse(obj: &Value) -> Result<Binding, Vec<Cause>> {
        let spec = &obj["spec"];
        let mut causes = Vec::new();
        let policy_name = spec["policyName"].as_str().unwrap_or_default().to_string();
        if policy_name.is_empty() {
            causes.push(Cause::missing("spec.policyName"));
        }
        let mut actions = Actions::default();
        let listed = strings(&spec["validationActions"]);
        if listed.is_empty() {
            causes.push(Cause::required(
                "spec.validationActions",
                "at least one validation action is required",
            ));
        }
        for (i, a) in listed.iter().enumerate() {
            let slot = match a.as_str() {
                "Deny" => &mut actions.deny,
                "Warn" => &mut actions.warn,
                "Audit" => &mut actions.audit,
                other => {
                    causes.push(Cause {
                        reason: "FieldValueNotSupported".into(),
                        field: format!("spec.validationActions[{i}]"),
                        message: format!(
                            "Unsupported value: {other:?}: supported values: \"Audit\", \"Deny\", \"Warn\""
                        ),
                    });
                    continue;
                }
            };
            if *slot {
                causes.push(Cause {
                    reason: "FieldValueDuplicate".into(),
                    field: format!("spec.validationActions[{i}]"),
                    message: format!("Duplicate value: {a:?}"),
                });
            }
            *slot = true;
        }
        if actions.deny && actions.warn {
            causes.push(Cause::invalid(
                "spec.validationActions",
                &listed.join(","),
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ));
        }
        let (param_ref, matcher) = binding_targets(spec, &mut causes);
        if !causes.is_empty() {
            return Err(causes);
        }
        Ok(Binding {
            name: meta::name(obj).unwrap_or_default().to_string(),
            policy_name,
            param_ref,
            matcher,
            actions,
        })
    }
}

/// A binding's `paramRef` and `matchResources`, checked.
fn binding_targets(spec: &Value, causes: &mut Vec<Cause>) -> (Option<ParamRef>, Option<Matcher>) {
    let param_ref = match &spec["paramRef"] {
        Value::Null => None,
        p => {
            let name = p["name"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(String::from);
            let selector = selector(&p["selector"], "spec.paramRef.selector", causes);
            if name.is_some() == selector.is_some() {
                causes.push(Cause::invalid(
                    "spec.paramRef",
                    "",
                    "one of name or selector must be set",
                ));
            }
            let deny_when_missing = match p["parameterNotFoundAction"].as_str() {
                Some("Deny") => true,
                Some("Allow") => false,
                None => {
                    causes.push(Cause::missing("spec.paramRef.parameterNotFoundAction"));
                    false
                }
                Some(other) => {
                    causes.push(Cause {
                        reason: "FieldValueNotSupported".into(),
                        field: "spec.paramRef.parameterNotFoundAction".into(),
                        message: format!(
                            "Unsupported value: {other:?}: supported values: \"Allow\", \"Deny\""
                        ),
                    });
                    false
                }
            };
            Some(ParamRef {
                name,
                namespace: p["namespace"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(String::from),
                selector,
                deny_when_missing,
            })
        }
    };
    let matcher = match &spec["matchResources"] {
        Value::Null => None,
        m => Some(Matcher::parse(m, "spec.matchResources", false, causes)),
    };
    (param_ref, matcher)
}

/// The variables every policy of one request sees, converted once.
pub struct Input<'a> {
    object: &'a Value,
    old_object: &'a Value,
    request: &'a Value,
    namespace_object: &'a Value,
    ctx: Context<'static, 'static>,
}

/// One failed validation (or, with `error`, one that could not be
/// evaluated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// `Forbidden`, `Invalid`, `Unauthorized`, `RequestEntityTooLarge`.
    pub reason: String,
    /// The index in `spec.validations`.
    pub index: usize,
    /// An evaluation error rather than a `false`: counts per `failurePolicy`.
    pub error: bool,
}

/// The outcome of evaluating a policy once (for one param).
#[derive(Debug, Default)]
pub struct Evaluation {
    pub failures: Vec<Failure>,
    /// `<policy>/<key>` → value.
    pub audit_annotations: Vec<(String, String)>,
}

static NULL: Value = Value::Null;

impl<'a> Input<'a> {
    /// `object` and `old_object` (absent on create and delete
    /// respectively), `request` (the `admission.k8s.io/v1`
    /// `AdmissionRequest`), the request's `Namespace` and the authorizer.
    pub fn new(
        object: Option<&'a Value>,
        old_object: Option<&'a Value>,
        request: &'a Value,
        namespace_object: Option<&'a Value>,
        authorizer: Option<Authorizer>,
    ) -> Result<Self, String> {
        let mut ctx = cel::new_context();
        let (object, old_object) = (object.unwrap_or(&NULL), old_object.unwrap_or(&NULL));
        let namespace_object = namespace_object.unwrap_or(&NULL);
        for (name, v) in [
            ("object", object),
            ("oldObject", old_object),
            ("request", request),
            ("namespaceObject", namespace_object),
        ] {
            ctx.add_variable_from_value(name, cel::from_json(v));
        }
        if let Some(a) = authorizer {
            ctx.add_variable_as_val("authorizer", Box::new(a));
        }
        Ok(Input {
            object,
            old_object,
            request,
            namespace_object,
            ctx,
        })
    }
}

/// Runs expressions of one evaluation within its cost budget.
pub(crate) struct Run<'i, 'a> {
    input: &'i Input<'a>,
    params: &'i Value,
    variables: serde_json::Map<String, Value>,
    spent: u64,
}

impl<'i, 'a> Run<'i, 'a> {
    pub(crate) fn new(input: &'i Input<'a>, params: &'i Value) -> Self {
        Run {
            input,
            params,
            variables: serde_json::Map::new(),
            spent: 0,
        }
    }

    pub(crate) fn eval(&mut self, ctx: &Context, e: &Expression) -> Result<CelValue, String> {
        let vars = Value::Object(self.variables.clone());
        let shapes = vec![
            ("object".to_string(), Shape::Data(self.input.object)),
            ("oldObject".to_string(), Shape::Data(self.input.old_object)),
            ("request".to_string(), Shape::Data(self.input.request)),
            (
                "namespaceObject".to_string(),
                Shape::Data(self.input.namespace_object),
            ),
            ("params".to_string(), Shape::Data(self.params)),
            ("variables".to_string(), Shape::Data(&vars)),
        ];
        let cost = e.rule.cost_with(shapes);
        if cost > cel::cost::PER_CALL_LIMIT {
            return Err("operation cancelled: actual cost limit exceeded".into());
        }
        self.spent = self.spent.saturating_add(cost);
        if self.spent > cel::cost::RUNTIME_BUDGET {
            return Err(
                "validation failed due to running out of cost budget, no further validation rules will be run"
                    .into(),
            );
        }
        e.rule.execute(ctx).map_err(|e| e.to_string())
    }
}

/// One evaluation's context: params and variables bound, match
/// conditions passed.
pub(crate) struct Scope<'p> {
    pub(crate) ctx: Context<'p, 'static>,
    failed_variables: Vec<(String, String)>,
}

impl Scope<'_> {
    /// An error of an expression, naming the failed variable it read.
    pub(crate) fn explain(&self, source: &str, err: String) -> String {
        match self
            .failed_variables
            .iter()
            .find(|(n, _)| source.contains(&format!("variables.{n}")))
        {
            Some((n, verr)) => format!("composited variable {n:?} fails to compile: {verr}"),
            None => err,
        }
    }
}

impl Common {
    /// Binds params and variables and checks the match conditions:
    /// `Ok(None)` when one is false, `Err` when one failed to evaluate
    /// (counts per `failurePolicy`).
    pub(crate) fn begin<'p>(
        &self,
        input: &'p Input<'_>,
        run: &mut Run<'_, '_>,
    ) -> Result<Option<Scope<'p>>, String> {
        let mut ctx = input.ctx.new_inner_scope();
        ctx.add_variable_from_value("params", cel::from_json(run.params));
        // Variables first: match conditions may read them too.
        let mut failed_variables: Vec<(String, String)> = Vec::new();
        let mut values: std::collections::HashMap<String, CelValue> = Default::default();
        for (name, e) in &self.variables {
            let mut scope = ctx.new_inner_scope();
            scope.add_variable_from_value("variables", values.clone());
            match run.eval(&scope, e) {
                Ok(v) => {
                    if let Some(j) = to_json(&v) {
                        run.variables.insert(name.clone(), j);
                    }
                    values.insert(name.clone(), v);
                }
                Err(err) => failed_variables.push((name.clone(), err)),
            }
        }
        ctx.add_variable_from_value("variables", values);
        let scope = Scope {
            ctx,
            failed_variables,
        };
        let mut errors = Vec::new();
        for (name, e) in &self.match_conditions {
            match run.eval(&scope.ctx, e) {
                Ok(CelValue::Bool(true)) => {}
                Ok(CelValue::Bool(false)) => return Ok(None),
                // The type: a map's entries print in hash order.
                Ok(other) => errors.push(format!(
                    "matchCondition {name:?} did not evaluate to a bool but to a {}",
                    other.type_of()
                )),
                Err(err) => errors.push(format!(
                    "matchCondition {name:?} resulted in error: {}",
                    scope.explain(&e.source, err)
                )),
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        Ok(Some(scope))
    }
}

fn to_json(v: &CelValue) -> Option<Value> {
    v.json().ok()
}

impl Policy {
    /// Evaluates the policy for one param (`None` without `paramKind`):
    /// `Ok(None)` when a `matchCondition` is false, `Err` when one failed
    /// to evaluate (counts per `failurePolicy`).
    pub fn evaluate(
        &self,
        input: &Input<'_>,
        params: Option<&Value>,
    ) -> Result<Option<Evaluation>, String> {
        let params = params.unwrap_or(&NULL);
        let mut run = Run::new(input, params);
        let Some(scope) = self.common.begin(input, &mut run)? else {
            return Ok(None);
        };
        let (ctx, explain) = (&scope.ctx, |s: &str, e: String| scope.explain(s, e));
        let mut out = Evaluation::default();
        for (index, v) in self.validations.iter().enumerate() {
            let source = &v.expression.source;
            let failure = |message: String, error: bool| Failure {
                message,
                reason: v.reason.clone(),
                index,
                error,
            };
            match run.eval(ctx, &v.expression) {
                Ok(CelValue::Bool(true)) => {}
                Ok(CelValue::Bool(false)) => {
                    let from_expression = v.message_expression.as_ref().and_then(|m| {
                        match run.eval(ctx, m) {
                            Ok(CelValue::String(s)) if !s.trim().is_empty() && !s.contains('\n') => {
                                Some(s.to_string())
                            }
                            _ => None,
                        }
                    });
                    let message = from_expression
                        .or_else(|| v.message.clone())
                        .unwrap_or_else(|| format!("failed expression: {source}"));
                    out.failures.push(failure(message, false));
                }
                Ok(other) => out.failures.push(failure(
                    format!("expression '{source}' resulted in error: no such overload: expected a bool, got {other:?}"),
                    true,
                )),
                Err(err) => out.failures.push(failure(
                    format!(
                        "expression '{source}' resulted in error: {}",
                        explain(source, err)
                    ),
                    true,
                )),
            }
        }
        for (key, e) in &self.audit_annotations {
            match run.eval(ctx, e) {
                Ok(CelValue::String(s)) => out
                    .audit_annotations
                    .push((format!("{}/{key}", self.name), s.to_string())),
                Ok(CelValue::Null) => {}
                Ok(other) => out.failures.push(Failure {
                    message: format!(
                        "valueExpression '{}' resulted in error: expected a string or null, got {other:?}",
                        e.source
                    ),
                    reason: "Forbidden".into(),
                    index: usize::MAX,
                    error: true,
                }),
                Err(err) => out.failures.push(Failure {
                    message: format!(
                        "valueExpression '{}' resulted in error: {}",
                        e.source,
                        explain(&e.source, err)
                    ),
                    reason: "Forbidden".into(),
                    index: usize::MAX,
                    error: true,
                }),
            }
        }
        Ok(Some(out))
    }
}

/// The first field a selection chain on `object`/`oldObject` names that
/// `schema` does not declare (upstream's type check, for the
/// `undefined field` case: open maps, preserved unknown fields and
/// undeclared schemas are not checked).
fn undefined_field(path: &[&str], mut schema: crate::managed::typed::Schema<'_>) -> Option<String> {
    for f in path {
        let node = schema.0?;
        let open = node
            .get("additionalProperties")
            .is_some_and(|a| a.is_object() || a == true)
            || node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        match node.get("properties").and_then(Value::as_object) {
            Some(props) if props.contains_key(*f) => schema = schema.field(f),
            Some(props) if !props.is_empty() && !open => return Some(f.to_string()),
            _ => return None,
        }
    }
    None
}

/// Every select chain rooted at `object` or `oldObject` in `e`.
fn object_paths<'e>(e: &'e ::cel::IdedExpr, out: &mut Vec<Vec<&'e str>>) {
    use ::cel::common::ast::Expr;
    if let Expr::Select(s) = &e.expr {
        let mut path = vec![s.field.as_str()];
        let mut cur = &s.operand.expr;
        loop {
            match cur {
                Expr::Select(inner) => {
                    path.push(inner.field.as_str());
                    cur = &inner.operand.expr;
                }
                Expr::Ident(root) if root == "object" || root == "oldObject" => {
                    path.reverse();
                    out.push(path);
                    return;
                }
                _ => break,
            }
        }
    }
    for child in cel::children(e) {
        object_paths(child, out);
    }
}

impl Matcher {
    /// The `(group, version, resource)`s the rules name exactly (no
    /// wildcards): what a policy is type-checked against.
    pub fn exact_resources(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for r in &self.resource_rules {
            for g in &r.rule.api_groups {
                for v in &r.rule.api_versions {
                    for res in &r.rule.resources {
                        if g != "*" && v != "*" && !res.contains('*') && !res.contains('/') {
                            out.push((g.clone(), v.clone(), res.clone()));
                        }
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

impl Policy {
    /// Upstream's `status.typeChecking`, for what is cheap to check here:
    /// fields of `object`/`oldObject` that the schema of a matched kind
    /// (`kinds`: display name such as `apps/v1, Kind=Deployment`, and its
    /// schema) does not declare. `(fieldRef, warning)` pairs.
    pub fn type_check(
        &self,
        kinds: &[(String, crate::managed::typed::Schema<'_>)],
    ) -> Vec<(String, String)> {
        let mut exprs: Vec<(String, &Expression)> = Vec::new();
        for (i, v) in self.validations.iter().enumerate() {
            exprs.push((format!("spec.validations[{i}].expression"), &v.expression));
            if let Some(m) = &v.message_expression {
                exprs.push((format!("spec.validations[{i}].messageExpression"), m));
            }
        }
        for (i, (_, e)) in self.common.match_conditions.iter().enumerate() {
            exprs.push((format!("spec.matchConditions[{i}].expression"), e));
        }
        for (i, (_, e)) in self.common.variables.iter().enumerate() {
            exprs.push((format!("spec.variables[{i}].expression"), e));
        }
        for (i, (_, e)) in self.audit_annotations.iter().enumerate() {
            exprs.push((format!("spec.auditAnnotations[{i}].valueExpression"), e));
        }
        let mut out = Vec::new();
        for (field_ref, e) in exprs {
            let mut paths = Vec::new();
            object_paths(e.rule.ast(), &mut paths);
            let mut warnings = Vec::new();
            for (kind, schema) in kinds {
                for path in &paths {
                    if let Some(f) = undefined_field(path, *schema) {
                        let w = format!("{kind}: ERROR: undefined field '{f}'");
                        if !warnings.contains(&w) {
                            warnings.push(w);
                        }
                    }
                }
            }
            if !warnings.is_empty() {
                out.push((field_ref, warnings.join("\n")));
            }
        }
        out
    }
}

/// The `validation.policy.admission.k8s.io/validation_failure` audit
/// annotation's entry for one failure.
pub fn audit_failure(policy: &str, binding: &str, f: &Failure, actions: &Actions) -> Value {
    json!({
        "message": f.message,
        "policy": policy,
        "binding": binding,
        "expressionIndex": f.index,
        "validationActions": actions.names(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::{Attributes, Decision};

    fn policy(spec: Value) -> Policy {
        Policy::compile(&json!({"metadata": {"name": "p", "generation": 1}, "spec": spec}))
            .unwrap_or_else(|c| panic!("{c:?}"))
    }

    fn deployments() -> Value {
        json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
    }

    fn attrs<'a>(op: &'a str, group: &'a str, resource: &'a str) -> RequestAttributes<'a> {
        RequestAttributes {
            operation: op,
            group,
            version: "v1",
            resource,
            subresource: None,
            namespaced: true,
        }
    }

    fn eval(p: &Policy, obj: &Value, params: Option<&Value>) -> Result<Option<Evaluation>, String> {
        let request = json!({"operation": "CREATE", "userInfo": {"username": "alice"}});
        let input = Input::new(Some(obj), None, &request, None, None).unwrap();
        p.evaluate(&input, params)
    }

    #[test]
    fn validations_messages_and_reasons() {
        let p = policy(json!({
            "matchConstraints": deployments(),
            "validations": [
                {"expression": "object.spec.replicas <= 5", "messageExpression": "'replicas must be at most 5, got ' + string(object.spec.replicas)", "reason": "Invalid"},
                {"expression": "object.spec.replicas > 0", "message": "at least one"},
                {"expression": "object.spec.replicas != 7"},
            ],
        }));
        let ok = eval(&p, &json!({"spec": {"replicas": 3}}), None)
            .unwrap()
            .unwrap();
        assert!(ok.failures.is_empty());
        let bad = eval(&p, &json!({"spec": {"replicas": 7}}), None)
            .unwrap()
            .unwrap();
        let messages: Vec<_> = bad
            .failures
            .iter()
            .map(|f| (f.message.as_str(), f.reason.as_str(), f.index))
            .collect();
        assert_eq!(
            messages,
            [
                ("replicas must be at most 5, got 7", "Invalid", 0),
                (
                    "failed expression: object.spec.replicas != 7",
                    "Forbidden",
                    2
                )
            ]
        );
        let none = eval(&p, &json!({"spec": {"replicas": 0}}), None)
            .unwrap()
            .unwrap();
        assert_eq!(none.failures[0].message, "at least one");
        // A missing field is an evaluation error, not a denial.
        let missing = eval(&p, &json!({"spec": {}}), None).unwrap().unwrap();
        assert!(missing.failures.iter().all(|f| f.error), "{missing:?}");
        assert!(
            missing.failures[0]
                .message
                .starts_with("expression 'object.spec.replicas <= 5' resulted in error")
        );
    }

    #[test]
    fn variables_params_match_conditions_and_audit_annotations() {
        let p = policy(json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": deployments(),
            "matchConditions": [{"name": "not-exempt", "expression": "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}],
            "variables": [
                {"name": "limit", "expression": "int(params.data.maxReplicas)"},
                {"name": "over", "expression": "object.spec.replicas > variables.limit"},
            ],
            "validations": [{"expression": "!variables.over", "messageExpression": "'at most ' + string(variables.limit)"}],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}],
        }));
        let params = json!({"data": {"maxReplicas": "4"}});
        let out = eval(
            &p,
            &json!({"metadata": {}, "spec": {"replicas": 6}}),
            Some(&params),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.failures[0].message, "at most 4");
        assert_eq!(
            out.audit_annotations,
            [("p/replicas".to_string(), "6".to_string())]
        );
        let exempt = json!({"metadata": {"labels": {"exempt": "yes"}}, "spec": {"replicas": 6}});
        assert!(eval(&p, &exempt, Some(&params)).unwrap().is_none());
        let bad_params = json!({"data": {"maxReplicas": "many"}});
        let out = eval(
            &p,
            &json!({"metadata": {}, "spec": {"replicas": 6}}),
            Some(&bad_params),
        )
        .unwrap()
        .unwrap();
        assert!(
            out.failures[0].error && out.failures[0].message.contains("limit"),
            "{:?}",
            out.failures
        );
    }

    #[test]
    fn runaway_expressions_are_refused_before_they_run() {
        let p = policy(json!({
            "matchConstraints": deployments(),
            "validations": [{"expression": "object.items.all(a, object.items.all(b, object.items.all(c, a + b + c != 'x')))"}],
        }));
        let items: Vec<String> = (0..300).map(|i| format!("item-{i}")).collect();
        let started = std::time::Instant::now();
        let out = eval(&p, &json!({"items": items}), None).unwrap().unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert!(out.failures[0].error);
        assert!(
            out.failures[0]
                .message
                .ends_with("operation cancelled: actual cost limit exceeded"),
            "{:?}",
            out.failures
        );
        let small = eval(&p, &json!({"items": ["a", "b"]}), None)
            .unwrap()
            .unwrap();
        assert!(small.failures.is_empty(), "{small:?}");
    }

    #[test]
    fn compile_errors_name_their_fields() {
        let bad = Policy::compile(&json!({"spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"]}]},
            "validations": [{"expression": "object.spec.replicas <"}, {"expression": "true", "reason": "Teapot"}],
            "variables": [{"name": "a-b", "expression": "1"}],
        }}))
        .err()
        .unwrap();
        let fields: Vec<_> = bad.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.matchConstraints.resourceRules[0].resources",
                "spec.variables[0].name",
                "spec.validations[0].expression",
                "spec.validations[1].reason"
            ],
            "{bad:?}"
        );
        assert!(bad[2].message.contains("compilation failed"), "{bad:?}");
        let none = Policy::compile(&json!({"spec": {"matchConstraints": deployments()}}))
            .err()
            .unwrap();
        assert_eq!(none[0].field, "spec.validations");
    }

    #[test]
    fn bindings_are_checked() {
        let ok = Binding::parse(&json!({"metadata": {"name": "b"}, "spec": {
            "policyName": "p", "validationActions": ["Warn", "Audit"],
            "paramRef": {"selector": {"matchLabels": {"a": "b"}}, "parameterNotFoundAction": "Deny"},
        }}))
        .unwrap_or_else(|c| panic!("{c:?}"));
        assert_eq!(ok.actions.names(), ["Warn", "Audit"]);
        assert!(ok.param_ref.unwrap().deny_when_missing);
        for (spec, field) in [
            (json!({"validationActions": ["Deny"]}), "spec.policyName"),
            (json!({"policyName": "p"}), "spec.validationActions"),
            (
                json!({"policyName": "p", "validationActions": ["Deny", "Warn"]}),
                "spec.validationActions",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": {"name": "x"}}),
                "spec.paramRef.parameterNotFoundAction",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": {"parameterNotFoundAction": "Allow"}}),
                "spec.paramRef",
            ),
        ] {
            let causes = Binding::parse(&json!({"spec": spec})).err().unwrap();
            assert_eq!(causes[0].field, field, "{spec}: {causes:?}");
        }
    }

    #[test]
    fn matching() {
        let p = policy(json!({
            "matchConstraints": {
                "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"], "resourceNames": ["web", "api"]}],
                "excludeResourceRules": [{"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["*"], "resources": ["deployments"], "resourceNames": ["api"]}],
                "namespaceSelector": {"matchLabels": {"env": "prod"}},
                "matchPolicy": "Exact",
            },
            "validations": [{"expression": "true"}],
        }));
        let prod = BTreeMap::from([("env".to_string(), "prod".to_string())]);
        let dev = BTreeMap::from([("env".to_string(), "dev".to_string())]);
        let input = |name: &'static str, labels: &'static BTreeMap<String, String>| MatchInput {
            attrs: attrs("CREATE", "apps", "deployments"),
            name,
            object: None,
            old_object: None,
            namespace_labels: Some(labels),
        };
        let prod: &'static _ = Box::leak(Box::new(prod));
        let dev: &'static _ = Box::leak(Box::new(dev));
        assert!(p.matcher.matches(&input("web", prod)));
        assert!(!p.matcher.matches(&input("web", dev)));
        assert!(!p.matcher.matches(&input("api", prod)), "excluded");
        assert!(!p.matcher.matches(&input("db", prod)), "not named");
        let mut v1beta1 = input("web", prod);
        v1beta1.attrs.version = "v1beta1";
        assert!(!p.matcher.matches(&v1beta1), "Exact");
        assert!(is_exempt(GROUP, POLICIES) && !is_exempt("apps", "deployments"));
    }

    #[test]
    fn type_checking_reports_undefined_fields() {
        let p = policy(json!({
            "matchConstraints": deployments(),
            "validations": [
                {"expression": "object.spec.replicass <= 5"},
                {"expression": "object.metadata.labels.all(k, k != 'x') && object.spec.template.metadata.name != ''"},
            ],
        }));
        assert_eq!(
            p.matcher.exact_resources(),
            [(
                "apps".to_string(),
                "v1".to_string(),
                "deployments".to_string()
            )]
        );
        let defs = crate::openapi::definitions::builtin();
        let schema = crate::managed::typed::Schema::new(&defs["io.k8s.api.apps.v1.Deployment"]);
        let warnings = p.type_check(&[("apps/v1, Kind=Deployment".into(), schema)]);
        assert_eq!(
            warnings,
            [(
                "spec.validations[0].expression".to_string(),
                "apps/v1, Kind=Deployment: ERROR: undefined field 'replicass'".to_string()
            )]
        );
    }

    #[test]
    fn the_namespace_is_read_only_when_needed() {
        let plain = policy(
            json!({"matchConstraints": deployments(), "validations": [{"expression": "true"}]}),
        );
        assert!(!plain.needs_namespace());
        let reads = policy(
            json!({"matchConstraints": deployments(), "validations": [{"expression": "true", "messageExpression": "namespaceObject.metadata.name"}]}),
        );
        assert!(reads.needs_namespace());
        let mut selects = deployments();
        selects["namespaceSelector"] = json!({"matchLabels": {"a": "b"}});
        let selects =
            policy(json!({"matchConstraints": selects, "validations": [{"expression": "true"}]}));
        assert!(selects.needs_namespace());
        // And an expression sees it.
        let p = policy(
            json!({"matchConstraints": deployments(), "validations": [{"expression": "namespaceObject.metadata.labels.env == 'prod'"}]}),
        );
        let (obj, req) = (json!({}), json!({}));
        let ns = json!({"metadata": {"name": "n", "labels": {"env": "dev"}}});
        let input = Input::new(Some(&obj), None, &req, Some(&ns), None).unwrap();
        assert_eq!(p.evaluate(&input, None).unwrap().unwrap().failures.len(), 1);
    }

    struct OnlyAlice;
    impl cel::authz::Authorize for OnlyAlice {
        fn authorize(&self, a: &Attributes) -> Decision {
            if a.user == "alice" && a.resource == "secrets" && a.verb == "list" {
                Decision::Allow("alice may".into())
            } else {
                Decision::NoOpinion(format!("{} may not", a.user))
            }
        }
    }

    #[test]
    fn authorizer_checks_as_the_requests_user() {
        let p = policy(json!({
            "matchConstraints": deployments(),
            "validations": [
                {"expression": "authorizer.group('').resource('secrets').namespace('ns').check('list').allowed()"},
                {"expression": "authorizer.serviceAccount('ns', 'bot').group('').resource('secrets').check('list').allowed()", "messageExpression": "authorizer.serviceAccount('ns', 'bot').group('').resource('secrets').check('list').reason()"},
            ],
        }));
        let request = json!({});
        let obj = json!({});
        let authz = Authorizer::new(Arc::new(OnlyAlice), "alice", &[]);
        let input = Input::new(Some(&obj), None, &request, None, Some(authz)).unwrap();
        let out = p.evaluate(&input, None).unwrap().unwrap();
        assert_eq!(out.failures.len(), 1, "{out:?}");
        assert_eq!(
            out.failures[0].message,
            "system:serviceaccount:ns:bot may not"
        );
    }

    #[test]
    fn gateway_api_safe_upgrades_expressions_compile_and_run() {
        // The Gateway API project's safe-upgrades policy relies on
        // `matches(s, re)` and map `exists`.
        let p = policy(json!({
            "matchConstraints": deployments(),
            "validations": [{"expression": "object.spec.group != 'gateway.networking.k8s.io' || (has(object.metadata.annotations) && object.metadata.annotations.exists(k, k == 'v') && !matches(object.metadata.annotations['v'], 'v1.[0-5].\\\\d+'))"}],
        }));
        let crd = |v: &str| json!({"metadata": {"annotations": {"v": v}}, "spec": {"group": "gateway.networking.k8s.io"}});
        assert!(
            eval(&p, &crd("v1.6.0"), None)
                .unwrap()
                .unwrap()
                .failures
                .is_empty()
        );
        assert_eq!(
            eval(&p, &crd("v1.4.2"), None)
                .unwrap()
                .unwrap()
                .failures
                .len(),
            1
        );
    }
}
