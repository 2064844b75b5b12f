//! Role-based access control (`rbac.authorization.k8s.io/v1`) without IO.
//!
//! - [`rule_allows`] matches one [`PolicyRule`] against request
//!   [`Attributes`], as upstream's `RuleAllows` with the `VerbMatches`,
//!   `APIGroupMatches`, `ResourceMatches` (`*`, `res/sub`, `*/sub`),
//!   `ResourceNameMatches` and `NonResourceURLMatches` helpers.
//! - [`RbacSnapshot`] indexes Roles, ClusterRoles, RoleBindings and
//!   ClusterRoleBindings once, so the server can cache it and rebuild it when
//!   one of them changes; [`authorize`] and [`rules_for`] read it.
//! - [`aggregate`] fills aggregated ClusterRoles (`aggregationRule`) as the
//!   upstream aggregation controller does.
//! - [`bootstrap_policy`] returns the default roles and bindings.
//! - [`covers`] is upstream's escalation check (`validation.Covers`): a user
//!   may only grant rules they hold themselves.
//!
//! Group `system:masters` is handled here: [`authorize`] allows it before
//! looking at any binding, as upstream's privileged-groups authorizer (which
//! runs ahead of RBAC) does, so the server need not check it separately.

use crate::admission::Selector;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

pub const GROUP: &str = "rbac.authorization.k8s.io";
pub const API_VERSION: &str = "rbac.authorization.k8s.io/v1";
/// Members of this group may do anything.
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The prefix of ServiceAccount user names: `system:serviceaccount:<ns>:<name>`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// The label every default role and binding carries.
pub const BOOTSTRAP_LABEL: &str = "kubernetes.io/bootstrapping";
const ALL: &str = "*";

/// What a request asks to do, as upstream's `authorizer.Attributes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub user: String,
    pub groups: Vec<String>,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`, or any custom verb (`escalate`, `bind`, `impersonate`).
    pub verb: String,
    /// `""` is the core group.
    pub api_group: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The URL path of a non-resource request (`/healthz`).
    pub path: String,
    pub is_resource_request: bool,
}

impl Attributes {
    /// A resource request (`verb` on `resource` in `api_group`).
    pub fn resource(
        user: &str,
        groups: &[&str],
        verb: &str,
        api_group: &str,
        resource: &str,
    ) -> Self {
        Attributes {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            verb: verb.into(),
            api_group: api_group.into(),
            resource: resource.into(),
            is_resource_request: true,
            ..Default::default()
        }
    }

    /// A non-resource request (`verb` on URL `path`).
    pub fn non_resource(user: &str, groups: &[&str], verb: &str, path: &str) -> Self {
        Attributes {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    pub fn with_subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.into());
        self
    }

    /// The attributes of a `SubjectAccessReview` / `SelfSubjectAccessReview`
    /// `spec` (`resourceAttributes` or `nonResourceAttributes`), for the given
    /// user and groups (the spec's own for a SubjectAccessReview, the
    /// requester's for a SelfSubjectAccessReview).
    pub fn from_access_review_spec(spec: &Value, user: &str, groups: &[String]) -> Self {
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let opt = |v: &Value, k: &str| Some(s(v, k)).filter(|x| !x.is_empty());
        let mut a = Attributes {
            user: user.into(),
            groups: groups.to_vec(),
            ..Default::default()
        };
        if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
            a.is_resource_request = true;
            a.verb = s(r, "verb");
            a.api_group = s(r, "group");
            a.resource = s(r, "resource");
            a.subresource = opt(r, "subresource");
            a.namespace = opt(r, "namespace");
            a.name = opt(r, "name");
        } else if let Some(n) = spec.get("nonResourceAttributes") {
            a.verb = s(n, "verb");
            a.path = s(n, "path");
        }
        a
    }

    /// The attributes of a `SubjectAccessReview` `spec`, for the `user`
    /// and `groups` it names.
    pub fn from_subject_access_review(spec: &Value) -> Self {
        let user = spec.get("user").and_then(Value::as_str).unwrap_or("");
        let groups: Vec<String> = spec
            .get("groups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g.as_str().map(String::from))
            .collect();
        Self::from_access_review_spec(spec, user, &groups)
    }

    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref().filter(|n| !n.is_empty())
    }
}

/// Accepts `null` (Go's nil slice) as an empty list.
fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

/// One rule of a Role or ClusterRole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub verbs: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub api_groups: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resources: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl PolicyRule {
    /// A resource rule.
    pub fn new(verbs: &[&str], api_groups: &[&str], resources: &[&str]) -> Self {
        PolicyRule {
            verbs: strings(verbs),
            api_groups: strings(api_groups),
            resources: strings(resources),
            ..Default::default()
        }
    }

    /// A non-resource URL rule.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        PolicyRule {
            verbs: strings(verbs),
            non_resource_urls: strings(urls),
            ..Default::default()
        }
    }

    pub fn names(mut self, names: &[&str]) -> Self {
        self.resource_names = strings(names);
        self
    }

    /// The `rules` of a Role or ClusterRole; unreadable rules are dropped
    /// (denying is the safe side).
    pub fn from_role(role: &Value) -> Vec<PolicyRule> {
        role.get("rules")
            .and_then(Value::as_array)
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(|r| serde_json::from_value(r.clone()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Upstream's `CompactString`: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`.
    pub fn compact_string(&self) -> String {
        let q = |v: &[String]| {
            let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
            format!("[{}]", items.join(" "))
        };
        let mut parts = Vec::new();
        for (label, v) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !v.is_empty() {
                parts.push(format!("{label}:{}", q(v)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

fn has(set: &[String], s: &str) -> bool {
    set.iter().any(|x| x == s)
}

/// Upstream `VerbMatches`.
pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == ALL || v == verb)
}

/// Upstream `APIGroupMatches`.
pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups.iter().any(|g| g == ALL || g == group)
}

/// Upstream `ResourceMatches`: `combined` is `resource` or `resource/subresource`.
pub fn resource_matches(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    rule.resources.iter().any(|r| {
        r == ALL
            || r == combined
            || (!subresource.is_empty()
                && r.len() == subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(subresource))
    })
}

/// Upstream `ResourceNameMatches`: no names means every name.
pub fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    rule.resource_names.is_empty() || has(&rule.resource_names, name)
}

/// Upstream `NonResourceURLMatches`: exact, `*`, or a prefix ending in `*`.
pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls.iter().any(|u| {
        u == ALL
            || u == path
            || u.strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix))
    })
}

/// Upstream `RuleAllows`.
pub fn rule_allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if !verb_matches(rule, &attrs.verb) {
        return false;
    }
    if !attrs.is_resource_request {
        return non_resource_url_matches(rule, &attrs.path);
    }
    let sub = attrs.subresource.as_deref().unwrap_or("");
    // Borrowed in the common case: no allocation per rule.
    let combined: std::borrow::Cow<'_, str> = if sub.is_empty() {
        attrs.resource.as_str().into()
    } else {
        format!("{}/{sub}", attrs.resource).into()
    };
    api_group_matches(rule, &attrs.api_group)
        && resource_matches(rule, &combined, sub)
        && resource_name_matches(rule, attrs.name.as_deref().unwrap_or(""))
}

/// The outcome of [`authorize`]. RBAC never denies: without a matching rule
/// it has no opinion and the next authorizer (or a 403) decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow(String),
    NoOpinion(String),
}

impl Decision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow(r) | Decision::NoOpinion(r) => r,
        }
    }

    /// A `SubjectAccessReview`'s `status` for this decision: `allowed`, and
    /// the `reason` when there is one.
    pub fn review_status(&self) -> Value {
        let mut status = json!({"allowed": self.is_allowed()});
        if !self.reason().is_empty() {
            status["reason"] = json!(self.reason());
        }
        status
    }
}

/// A binding's subject.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

impl Subject {
    /// Upstream `appliesToUser`; `namespace` is the binding's (empty for a
    /// ClusterRoleBinding) and defaults a ServiceAccount subject's namespace.
    fn applies_to(&self, user: &str, groups: &[String], namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user == self.name,
            "Group" => has(groups, &self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    namespace
                } else {
                    &self.namespace
                };
                !ns.is_empty() && service_account_matches(ns, &self.name, user)
            }
            _ => false,
        }
    }

    fn describe(&self, binding_namespace: &str) -> String {
        if self.kind == "ServiceAccount" {
            let ns = if self.namespace.is_empty() {
                binding_namespace
            } else {
                &self.namespace
            };
            format!("{} {:?}", self.kind, format!("{}/{ns}", self.name))
        } else {
            format!("{} {:?}", self.kind, self.name)
        }
    }
}

/// True when `user` is `system:serviceaccount:<namespace>:<name>`.
pub fn service_account_matches(namespace: &str, name: &str, user: &str) -> bool {
    user.strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|r| r.strip_prefix(namespace))
        .and_then(|r| r.strip_prefix(':'))
        == Some(name)
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoleRef {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
}

/// A parsed RoleBinding or ClusterRoleBinding.
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    /// Empty for a ClusterRoleBinding.
    namespace: String,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
}

impl Binding {
    fn parse(obj: &Value) -> Option<Binding> {
        Some(Binding {
            name: crate::meta::name(obj).unwrap_or("").into(),
            namespace: crate::meta::namespace(obj).unwrap_or("").into(),
            role_ref: serde_json::from_value(obj.get("roleRef")?.clone()).ok()?,
            subjects: match obj.get("subjects") {
                None | Some(Value::Null) => Vec::new(),
                Some(s) => serde_json::from_value(s.clone()).ok()?,
            },
        })
    }

    /// Upstream `appliesTo`: the first subject naming the user.
    fn subject_for(&self, user: &str, groups: &[String]) -> Option<&Subject> {
        self.subjects
            .iter()
            .find(|s| s.applies_to(user, groups, &self.namespace))
    }

    /// Upstream's binding describers, used in reasons.
    fn describe(&self, subject: &Subject) -> String {
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                self.name,
                self.role_ref.kind,
                self.role_ref.name,
                subject.describe("")
            )
        } else {
            format!(
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{}", self.name, self.namespace),
                self.role_ref.kind,
                self.role_ref.name,
                subject.describe(&self.namespace)
            )
        }
    }
}

/// A rule with the binding and subject that granted it.
type Grant<'a> = (&'a Binding, &'a Subject, &'a PolicyRule);

/// Roles, ClusterRoles and bindings indexed for authorization. Build it once
/// from the stored objects and rebuild it when any of them changes.
#[derive(Debug, Clone, Default)]
pub struct RbacSnapshot {
    cluster_roles: HashMap<String, Vec<PolicyRule>>,
    /// Keyed by (namespace, name).
    roles: HashMap<(String, String), Vec<PolicyRule>>,
    cluster_role_bindings: Vec<Binding>,
    /// Keyed by namespace.
    role_bindings: HashMap<String, Vec<Binding>>,
}

impl RbacSnapshot {
    /// The rules of a Role (`kind` "Role", in `namespace`) or ClusterRole.
    pub fn role_rules_of(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Vec<PolicyRule>> {
        match kind {
            "ClusterRole" => self.cluster_roles.get(name).cloned(),
            "Role" => self
                .roles
                .get(&(namespace.unwrap_or_default().to_string(), name.to_string()))
                .cloned(),
            _ => None,
        }
    }

    /// Indexes the four kinds of objects. ClusterRoles are passed through
    /// [`aggregate`] first (idempotent, so already aggregated roles are
    /// unchanged). Bindings that cannot be read are skipped.
    pub fn new(
        roles: &[Value],
        cluster_roles: &[Value],
        role_bindings: &[Value],
        cluster_role_bindings: &[Value],
    ) -> Self {
        let mut snap = RbacSnapshot::default();
        for cr in aggregate(cluster_roles) {
            if let Some(name) = crate::meta::name(&cr) {
                snap.cluster_roles
                    .insert(name.into(), PolicyRule::from_role(&cr));
            }
        }
        for r in roles {
            if let (Some(ns), Some(name)) = (crate::meta::namespace(r), crate::meta::name(r)) {
                snap.roles
                    .insert((ns.into(), name.into()), PolicyRule::from_role(r));
            }
        }
        snap.cluster_role_bindings = cluster_role_bindings
            .iter()
            .filter_map(Binding::parse)
            .map(|mut b| {
                b.namespace.clear();
                b
            })
            .collect();
        for b in role_bindings.iter().filter_map(Binding::parse) {
            if !b.namespace.is_empty() {
                snap.role_bindings
                    .entry(b.namespace.clone())
                    .or_default()
                    .push(b);
            }
        }
        snap
    }

    /// Sorts a mixed list of Role, ClusterRole, RoleBinding and
    /// ClusterRoleBinding objects by `kind` and indexes them.
    pub fn from_objects(objects: &[Value]) -> Self {
        let mut by_kind: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
        for o in objects {
            let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
            by_kind.entry(kind).or_default().push(o.clone());
        }
        let get = |k: &str| by_kind.get(k).map(Vec::as_slice).unwrap_or(&[]);
        RbacSnapshot::new(
            get("Role"),
            get("ClusterRole"),
            get("RoleBinding"),
            get("ClusterRoleBinding"),
        )
    }

    /// Upstream `GetRoleReferenceRules`.
    fn role_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<&[PolicyRule], String> {
        match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .get(&(namespace.to_string(), role_ref.name.clone()))
                .map(Vec::as_slice)
                .ok_or_else(|| format!("role.{GROUP} {:?} not found", role_ref.name)),
            "ClusterRole" => self
                .cluster_roles
                .get(&role_ref.name)
                .map(Vec::as_slice)
                .ok_or_else(|| format!("clusterrole.{GROUP} {:?} not found", role_ref.name)),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// Upstream `VisitRulesFor`: ClusterRoleBindings, then the namespace's
    /// RoleBindings. `visit` gets the binding and subject that granted each
    /// rule, or a resolution error; returning false stops the walk.
    fn visit(
        &self,
        user: &str,
        groups: &[String],
        namespace: Option<&str>,
        visit: &mut dyn FnMut(Result<Grant<'_>, String>) -> bool,
    ) {
        let namespaced = namespace
            .filter(|n| !n.is_empty())
            .and_then(|ns| self.role_bindings.get(ns))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for b in self.cluster_role_bindings.iter().chain(namespaced) {
            let Some(subject) = b.subject_for(user, groups) else {
                continue;
            };
            match self.role_rules(&b.role_ref, &b.namespace) {
                Err(e) => {
                    if !visit(Err(e)) {
                        return;
                    }
                }
                Ok(rules) => {
                    for r in rules {
                        if !visit(Ok((b, subject, r))) {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Decides a request as upstream's RBAC authorizer, after allowing group
/// `system:masters` outright (with an empty reason, as upstream's
/// privileged-groups authorizer). Allow reasons name the binding:
/// `RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to User "u"`;
/// a no-opinion reason lists role resolution errors, if any.
pub fn authorize(snapshot: &RbacSnapshot, attrs: &Attributes) -> Decision {
    if has(&attrs.groups, SYSTEM_MASTERS) {
        return Decision::Allow(String::new());
    }
    let mut allowed = None;
    let mut errors = Vec::new();
    snapshot.visit(
        &attrs.user,
        &attrs.groups,
        attrs.namespace(),
        &mut |item| match item {
            Ok((binding, subject, rule)) if rule_allows(rule, attrs) => {
                allowed = Some(format!("RBAC: allowed by {}", binding.describe(subject)));
                false
            }
            Ok(_) => true,
            Err(e) => {
                errors.push(e);
                true
            }
        },
    );
    match allowed {
        Some(reason) => Decision::Allow(reason),
        None if errors.is_empty() => Decision::NoOpinion(String::new()),
        None if errors.len() == 1 => Decision::NoOpinion(format!("RBAC: {}", errors[0])),
        None => Decision::NoOpinion(format!("RBAC: [{}]", errors.join(", "))),
    }
}

/// Every rule granted to the user in `namespace` (cluster-wide bindings
/// included), for `SelfSubjectRulesReview` and escalation checks.
pub fn rules_for(
    snapshot: &RbacSnapshot,
    user: &str,
    groups: &[String],
    namespace: Option<&str>,
) -> Vec<PolicyRule> {
    rules_for_with_errors(snapshot, user, groups, namespace).0
}

/// [`rules_for`] plus the errors met resolving role references (a binding to
/// a missing role), which upstream reports as `evaluationError`.
pub fn rules_for_with_errors(
    snapshot: &RbacSnapshot,
    user: &str,
    groups: &[String],
    namespace: Option<&str>,
) -> (Vec<PolicyRule>, Vec<String>) {
    let (mut rules, mut errors) = (Vec::new(), Vec::new());
    snapshot.visit(user, groups, namespace, &mut |item| {
        match item {
            Ok((_, _, rule)) => rules.push(rule.clone()),
            Err(e) => errors.push(e),
        }
        true
    });
    (rules, errors)
}

/// The `status` of a `SelfSubjectRulesReview` for these rules.
pub fn subject_rules_review_status(rules: &[PolicyRule], errors: &[String]) -> Value {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rules {
        if !r.resources.is_empty() {
            let mut o =
                json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
            if !r.resource_names.is_empty() {
                o["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(o);
        }
        if !r.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    status
}

/// The selectors of a ClusterRole's `aggregationRule`, or `None` when the
/// role is not aggregated. An unreadable selector is an error.
fn aggregation_selectors(
    role: &Value,
) -> Option<Result<Vec<crate::selector::LabelSelector>, String>> {
    let rule = role.get("aggregationRule").filter(|r| !r.is_null())?;
    let selectors = rule
        .get("clusterRoleSelectors")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Some(
        selectors
            .into_iter()
            .map(|s| {
                serde_json::from_value::<Selector>(s)
                    .map_err(|e| e.to_string())
                    .and_then(|s| s.to_label_selector())
            })
            .collect(),
    )
}

/// Fills the `rules` of every ClusterRole that has an `aggregationRule`
/// with the rules of the other ClusterRoles its selectors match, as the
/// upstream aggregation controller does: for each selector in order, the
/// matching roles sorted by name (itself excluded), rules deduplicated; the
/// aggregated role's own rules are replaced. Repeats until nothing changes,
/// so chains (`view` → `edit` → `admin`) settle in one call. Roles with an
/// unreadable selector are left as they are. Other roles pass unchanged.
pub fn aggregate(cluster_roles: &[Value]) -> Vec<Value> {
    let mut roles: Vec<Value> = cluster_roles.to_vec();
    let mut order: Vec<usize> = (0..roles.len()).collect();
    order.sort_by(|&a, &b| crate::meta::name(&roles[a]).cmp(&crate::meta::name(&roles[b])));
    // Each pass can only propagate rules one more step along a chain.
    for _ in 0..=roles.len() {
        let mut changed = false;
        for i in 0..roles.len() {
            let Some(Ok(selectors)) = aggregation_selectors(&roles[i]) else {
                continue;
            };
            let me = crate::meta::name(&roles[i]).unwrap_or("").to_string();
            let mut rules: Vec<PolicyRule> = Vec::new();
            for sel in &selectors {
                for &j in &order {
                    if crate::meta::name(&roles[j]).unwrap_or("") == me
                        || !sel.matches_object(&roles[j])
                    {
                        continue;
                    }
                    for r in PolicyRule::from_role(&roles[j]) {
                        if !rules.contains(&r) {
                            rules.push(r);
                        }
                    }
                }
            }
            // Compare as rules, not JSON, so equivalent spellings are kept.
            if roles[i].get("rules").is_none() || PolicyRule::from_role(&roles[i]) != rules {
                roles[i]["rules"] = serde_json::to_value(&rules).unwrap_or_else(|_| json!([]));
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    roles
}

fn bootstrap_meta(name: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = BTreeMap::from([(BOOTSTRAP_LABEL.to_string(), "rbac-defaults".to_string())]);
    for (k, v) in extra_labels {
        labels.insert(k.to_string(), v.to_string());
    }
    json!({
        "name": name,
        "labels": labels,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "ClusterRole",
        "metadata": bootstrap_meta(name, labels),
        "rules": rules,
    })
}

fn aggregated_cluster_role(name: &str, labels: &[(&str, &str)], aggregate_from: &str) -> Value {
    let mut role = cluster_role(name, labels, Vec::new());
    role["aggregationRule"] = json!({
        "clusterRoleSelectors": [{"matchLabels": {aggregate_from: "true"}}]
    });
    role
}

fn cluster_role_binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "apiGroup": GROUP, "name": g}))
        .collect();
    json!({
        "apiVersion": API_VERSION,
        "kind": "ClusterRoleBinding",
        "metadata": bootstrap_meta(name, &[]),
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

/// The server's own controllers: each runs as the ServiceAccount
/// `kube-system/<name>` with upstream's `system:controller:<name>` role
/// (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/controller_policy.go`),
/// so a controller can do only what its role allows.
pub const CONTROLLERS: &[&str] = &[
    "generic-garbage-collector",
    "service-account-controller",
    "root-ca-cert-publisher",
    "certificate-controller",
    // The node lifecycle and taint eviction controllers (the latter uses
    // the node controller's role upstream too).
    "node-controller",
    "pod-garbage-collector",
    "replicaset-controller",
    "replication-controller",
    "deployment-controller",
    "endpoint-controller",
    "endpointslice-controller",
    "endpointslicemirroring-controller",
    "disruption-controller",
    "resourcequota-controller",
    "daemon-set-controller",
    "statefulset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    // Ours: runs `Controller` objects (each as its own ServiceAccount); it
    // only records the Events about their failures.
    "wasm-controller-manager",
    // Ours: the background audit of admission plugins and policies; reads
    // what their rules match, writes policy reports and the violation
    // counts in the policies' status.
    "policy-audit",
];

/// Controllers whose upstream roles are namespaced: `(controller,
/// namespace, rules)` (`namespace_policy.go`).
fn controller_namespace_roles() -> Vec<(&'static str, &'static str, Vec<PolicyRule>)> {
    let events = || {
        [
            PolicyRule::new(&["create", "patch", "update"], &[""], &["events"]),
            PolicyRule::new(
                &["create", "patch", "update"],
                &["events.k8s.io"],
                &["events"],
            ),
        ]
    };
    let mut public = vec![
        PolicyRule::new(READ, &[""], &["configmaps"]),
        PolicyRule::new(&["update"], &[""], &["configmaps"]).names(&["cluster-info"]),
    ];
    public.extend(events());
    vec![
        (
            "bootstrap-signer",
            "kube-system",
            vec![PolicyRule::new(READ, &[""], &["secrets"])],
        ),
        ("bootstrap-signer", "kube-public", public),
    ]
}

/// The ConfigMap in `kube-system` where the server publishes how it
/// authenticates clients and front proxies, for extension API servers.
pub const EXTENSION_AUTH_CONFIGMAP: &str = "extension-apiserver-authentication";
/// The Role that reads it.
pub const EXTENSION_AUTH_READER: &str = "extension-apiserver-authentication-reader";

/// Roles and RoleBindings in the initial namespaces: the namespaced
/// controller roles, and the anonymous read of `kube-public/cluster-info`
/// that node bootstrap starts from (kubeadm's
/// `kubeadm:bootstrap-signer-clusterinfo`).
pub fn bootstrap_namespace_policy() -> Vec<Value> {
    let role = |ns: &str, name: &str, rules: Vec<PolicyRule>| {
        let mut m = bootstrap_meta(name, &[]);
        m["namespace"] = json!(ns);
        json!({"apiVersion": API_VERSION, "kind": "Role", "metadata": m, "rules": rules})
    };
    let binding = |ns: &str, name: &str, subject: Value| {
        let mut m = bootstrap_meta(name, &[]);
        m["namespace"] = json!(ns);
        json!({"apiVersion": API_VERSION, "kind": "RoleBinding", "metadata": m,
            "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": name},
            "subjects": [subject]})
    };
    let mut out = Vec::new();
    for (controller, ns, rules) in controller_namespace_roles() {
        let name = format!("system:controller:{controller}");
        out.push(role(ns, &name, rules));
        out.push(binding(
            ns,
            &name,
            json!({"kind": "ServiceAccount", "name": controller, "namespace": "kube-system"}),
        ));
    }
    // Extension API servers read the front-proxy and client CAs from here
    // (their installers bind it; upstream binds it to the controller
    // manager and the scheduler).
    out.push(role(
        "kube-system",
        EXTENSION_AUTH_READER,
        vec![
            PolicyRule::new(&["get", "list", "watch"], &[""], &["configmaps"])
                .names(&[EXTENSION_AUTH_CONFIGMAP]),
        ],
    ));
    let mut reader = binding(
        "kube-system",
        "system::extension-apiserver-authentication-reader",
        json!({"kind": "User", "apiGroup": GROUP, "name": "system:kube-controller-manager"}),
    );
    reader["roleRef"]["name"] = json!(EXTENSION_AUTH_READER);
    reader["subjects"]
        .as_array_mut()
        .expect("subjects")
        .push(json!({"kind": "User", "apiGroup": GROUP, "name": "system:kube-scheduler"}));
    out.push(reader);
    let info = "kubeadm:bootstrap-signer-clusterinfo";
    out.push(role(
        "kube-public",
        info,
        vec![PolicyRule::new(&["get"], &[""], &["configmaps"]).names(&["cluster-info"])],
    ));
    out.push(binding(
        "kube-public",
        info,
        json!({"kind": "User", "apiGroup": GROUP, "name": "system:anonymous"}),
    ));
    out
}

/// Upstream's roles for node bootstrap and certificate approval (none
/// bound by default: kubeadm binds the first two to its bootstrap tokens'
/// group).
fn certificate_roles() -> Vec<Value> {
    let csr = "certificates.k8s.io";
    let mut out = vec![
        cluster_role(
            "system:node-bootstrapper",
            &[],
            vec![PolicyRule::new(
                &["create", "get", "list", "watch"],
                &[csr],
                &["certificatesigningrequests"],
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &[],
            vec![PolicyRule::new(
                &["create"],
                &[csr],
                &["certificatesigningrequests/nodeclient"],
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[],
            vec![PolicyRule::new(
                &["create"],
                &[csr],
                &["certificatesigningrequests/selfnodeclient"],
            )],
        ),
    ];
    for signer in [
        "legacy-unknown",
        "kubelet-serving",
        "kube-apiserver-client",
        "kube-apiserver-client-kubelet",
    ] {
        out.push(cluster_role(
            &format!("system:certificates.k8s.io:{signer}-approver"),
            &[],
            vec![
                PolicyRule::new(&["approve"], &[csr], &["signers"])
                    .names(&[&format!("kubernetes.io/{signer}")]),
            ],
        ));
    }
    out
}

fn controller_roles() -> Vec<Value> {
    let events = || {
        [
            PolicyRule::new(&["create", "patch", "update"], &[""], &["events"]),
            PolicyRule::new(
                &["create", "patch", "update"],
                &["events.k8s.io"],
                &["events"],
            ),
        ]
    };
    let rules = |name: &str| -> Vec<PolicyRule> {
        let mut rules = match name {
            "generic-garbage-collector" => vec![PolicyRule::new(
                &["delete", "get", "list", "patch", "update", "watch"],
                &["*"],
                &["*"],
            )],
            "service-account-controller" => {
                vec![PolicyRule::new(&["create"], &[""], &["serviceaccounts"])]
            }
            "node-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "update", "delete", "patch"],
                    &[""],
                    &["nodes"],
                ),
                PolicyRule::new(&["patch", "update"], &[""], &["nodes/status"]),
                PolicyRule::new(&["patch", "update"], &[""], &["pods/status"]),
                PolicyRule::new(&["list", "get", "delete"], &[""], &["pods"]),
            ],
            "endpoint-controller" => vec![
                PolicyRule::new(&["get", "list", "watch"], &[""], &["services", "pods"]),
                PolicyRule::new(
                    &["get", "list", "create", "update", "delete"],
                    &[""],
                    &["endpoints"],
                ),
                PolicyRule::new(&["create"], &[""], &["endpoints/restricted"]),
            ],
            "endpointslice-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "watch"],
                    &[""],
                    &["services", "pods", "nodes"],
                ),
                // Slices it makes name their Service with
                // `blockOwnerDeletion`.
                PolicyRule::new(&["update"], &[""], &["services/finalizers"]),
                PolicyRule::new(
                    &["get", "list", "create", "update", "delete"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
            ],
            "endpointslicemirroring-controller" => vec![
                PolicyRule::new(&["get", "list", "watch"], &[""], &["services", "endpoints"]),
                // Slices it makes name their Endpoints with
                // `blockOwnerDeletion`.
                PolicyRule::new(&["update"], &[""], &["endpoints/finalizers"]),
                PolicyRule::new(
                    &["get", "list", "create", "update", "delete"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
            ],
            "daemon-set-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "watch"],
                    &["extensions", "apps"],
                    &["daemonsets"],
                ),
                PolicyRule::new(&["update"], &["extensions", "apps"], &["daemonsets/status"]),
                PolicyRule::new(
                    &["update"],
                    &["extensions", "apps"],
                    &["daemonsets/finalizers"],
                ),
                PolicyRule::new(&["list", "watch"], &[""], &["nodes"]),
                PolicyRule::new(
                    &["list", "watch", "create", "delete", "patch"],
                    &[""],
                    &["pods"],
                ),
                PolicyRule::new(&["create"], &[""], &["pods/binding"]),
                PolicyRule::new(
                    &[
                        "get", "list", "watch", "create", "delete", "update", "patch",
                    ],
                    &["apps"],
                    &["controllerrevisions"],
                ),
            ],
            "statefulset-controller" => vec![
                PolicyRule::new(&["list", "watch"], &[""], &["pods"]),
                PolicyRule::new(&["get", "list", "watch"], &["apps"], &["statefulsets"]),
                PolicyRule::new(&["update"], &["apps"], &["statefulsets/status"]),
                PolicyRule::new(&["update"], &["apps"], &["statefulsets/finalizers"]),
                PolicyRule::new(
                    &["get", "create", "delete", "update", "patch"],
                    &[""],
                    &["pods"],
                ),
                PolicyRule::new(
                    &[
                        "get", "create", "delete", "update", "patch", "list", "watch",
                    ],
                    &["apps"],
                    &["controllerrevisions"],
                ),
                PolicyRule::new(&["get", "create"], &[""], &["persistentvolumeclaims"]),
                // `StatefulSetAutoDeletePVC` (GA in 1.32): the retention
                // policy's owner references on claims.
                PolicyRule::new(&["update", "delete"], &[""], &["persistentvolumeclaims"]),
            ],
            "disruption-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "watch"],
                    &["extensions", "apps"],
                    &["deployments"],
                ),
                PolicyRule::new(
                    &["get", "list", "watch"],
                    &["apps", "extensions"],
                    &["replicasets"],
                ),
                PolicyRule::new(
                    &["get", "list", "watch"],
                    &[""],
                    &["replicationcontrollers"],
                ),
                PolicyRule::new(
                    &["get", "list", "watch"],
                    &["policy"],
                    &["poddisruptionbudgets"],
                ),
                PolicyRule::new(&["get", "list", "watch"], &["apps"], &["statefulsets"]),
                PolicyRule::new(&["update"], &["policy"], &["poddisruptionbudgets/status"]),
                PolicyRule::new(&["get"], &["*"], &["*/scale"]),
                PolicyRule::new(&["patch", "update"], &[""], &["pods/status"]),
            ],
            "job-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "watch", "update", "patch"],
                    &["batch"],
                    &["jobs"],
                ),
                PolicyRule::new(&["update"], &["batch"], &["jobs/status"]),
                PolicyRule::new(&["update"], &["batch"], &["jobs/finalizers"]),
                PolicyRule::new(
                    &["list", "watch", "create", "delete", "patch"],
                    &[""],
                    &["pods"],
                ),
            ],
            "cronjob-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "watch", "update"],
                    &["batch"],
                    &["cronjobs"],
                ),
                PolicyRule::new(
                    &[
                        "get", "list", "watch", "create", "update", "delete", "patch",
                    ],
                    &["batch"],
                    &["jobs"],
                ),
                PolicyRule::new(&["update"], &["batch"], &["cronjobs/status"]),
                PolicyRule::new(&["update"], &["batch"], &["cronjobs/finalizers"]),
                PolicyRule::new(&["list", "delete"], &[""], &["pods"]),
            ],
            "ttl-after-finished-controller" => vec![PolicyRule::new(
                &["get", "list", "watch", "delete"],
                &["batch"],
                &["jobs"],
            )],
            "replicaset-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "watch", "update"],
                    &["apps", "extensions"],
                    &["replicasets"],
                ),
                PolicyRule::new(
                    &["update"],
                    &["apps", "extensions"],
                    &["replicasets/status"],
                ),
                PolicyRule::new(
                    &["update"],
                    &["apps", "extensions"],
                    &["replicasets/finalizers"],
                ),
                PolicyRule::new(
                    &["list", "watch", "patch", "create", "delete"],
                    &[""],
                    &["pods"],
                ),
            ],
            "replication-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "watch", "update"],
                    &[""],
                    &["replicationcontrollers"],
                ),
                PolicyRule::new(&["update"], &[""], &["replicationcontrollers/status"]),
                PolicyRule::new(&["update"], &[""], &["replicationcontrollers/finalizers"]),
                PolicyRule::new(
                    &["list", "watch", "patch", "create", "delete"],
                    &[""],
                    &["pods"],
                ),
            ],
            "deployment-controller" => vec![
                PolicyRule::new(
                    &["get", "list", "watch", "update"],
                    &["apps", "extensions"],
                    &["deployments"],
                ),
                PolicyRule::new(
                    &["update"],
                    &["apps", "extensions"],
                    &["deployments/status"],
                ),
                PolicyRule::new(
                    &["update"],
                    &["apps", "extensions"],
                    &["deployments/finalizers"],
                ),
                PolicyRule::new(
                    &[
                        "get", "list", "watch", "create", "update", "patch", "delete",
                    ],
                    &["apps", "extensions"],
                    &["replicasets"],
                ),
                PolicyRule::new(&["get", "list", "watch", "update"], &[""], &["pods"]),
            ],
            // Quota can count anything, so it may list and watch all.
            "resourcequota-controller" => vec![
                PolicyRule::new(&["list", "watch"], &["*"], &["*"]),
                PolicyRule::new(&["update"], &[""], &["resourcequotas/status"]),
            ],
            "pod-garbage-collector" => vec![
                PolicyRule::new(&["list", "watch", "delete"], &[""], &["pods"]),
                PolicyRule::new(&["get", "list"], &[""], &["nodes"]),
                PolicyRule::new(&["patch"], &[""], &["pods/status"]),
            ],
            "policy-audit" => vec![
                PolicyRule::new(&["get", "list", "watch"], &["*"], &["*"]),
                PolicyRule::new(
                    &["create", "delete", "patch", "update"],
                    &["openreports.io"],
                    &["reports", "clusterreports"],
                ),
                PolicyRule::new(
                    &["create", "delete", "patch", "update"],
                    &["wgpolicyk8s.io"],
                    &["policyreports", "clusterpolicyreports"],
                ),
                PolicyRule::new(
                    &["create"],
                    &["apiextensions.k8s.io"],
                    &["customresourcedefinitions"],
                ),
                PolicyRule::new(
                    &["update", "patch"],
                    &["admission.wasm-apiserver.io"],
                    &["admissionplugins/status"],
                ),
                PolicyRule::new(
                    &["update", "patch"],
                    &["admissionregistration.k8s.io"],
                    &["validatingadmissionpolicies/status"],
                ),
            ],
            "root-ca-cert-publisher" => {
                vec![PolicyRule::new(
                    &["create", "update"],
                    &[""],
                    &["configmaps"],
                )]
            }
            "certificate-controller" => {
                let csr = "certificates.k8s.io";
                vec![
                    PolicyRule::new(
                        &["delete", "get", "list", "watch"],
                        &[csr],
                        &["certificatesigningrequests"],
                    ),
                    PolicyRule::new(
                        &["update"],
                        &[csr],
                        &[
                            "certificatesigningrequests/approval",
                            "certificatesigningrequests/status",
                        ],
                    ),
                    PolicyRule::new(&["approve"], &[csr], &["signers"])
                        .names(&["kubernetes.io/kube-apiserver-client-kubelet"]),
                    PolicyRule::new(&["sign"], &[csr], &["signers"]).names(&[
                        "kubernetes.io/legacy-unknown",
                        "kubernetes.io/kube-apiserver-client",
                        "kubernetes.io/kube-apiserver-client-kubelet",
                        "kubernetes.io/kubelet-serving",
                    ]),
                    PolicyRule::new(
                        &["create"],
                        &["authorization.k8s.io"],
                        &["subjectaccessreviews"],
                    ),
                ]
            }
            _ => Vec::new(),
        };
        // Upstream's pod garbage collector records no events.
        if name != "pod-garbage-collector" {
            rules.extend(events());
        }
        rules
    };
    let mut out = Vec::new();
    for name in CONTROLLERS {
        let role = format!("system:controller:{name}");
        out.push(cluster_role(&role, &[], rules(name)));
        out.push(json!({
            "apiVersion": API_VERSION,
            "kind": "ClusterRoleBinding",
            "metadata": bootstrap_meta(&role, &[]),
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}],
        }));
    }
    out
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];
const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// A Pod's subresources that reach into it (read with `get` for the
/// streaming upgrade, written with `create`).
const POD_ACCESS: &[&str] = &["pods/attach", "pods/exec", "pods/portforward", "pods/proxy"];

/// The user of the client certificate this server presents to kubelets
/// (kubeadm's `apiserver-kubelet-client`).
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// The default ClusterRoles and ClusterRoleBindings (upstream's essentials;
/// `admin`, `edit` and `view` with upstream's rules, 1.33), labelled
/// `kubernetes.io/bootstrapping: rbac-defaults`. `admin`, `edit` and `view`
/// are aggregated (as upstream: `view` feeds `edit`, `edit` feeds `admin`)
/// and returned with their rules already filled in.
pub fn bootstrap_policy() -> Vec<Value> {
    let roles = vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![
                PolicyRule::new(&["*"], &["*"], &["*"]),
                PolicyRule::urls(&["*"], &["*"]),
            ],
        ),
        aggregated_cluster_role("admin", &[], AGGREGATE_TO_ADMIN),
        aggregated_cluster_role("edit", &[(AGGREGATE_TO_ADMIN, "true")], AGGREGATE_TO_EDIT),
        aggregated_cluster_role("view", &[(AGGREGATE_TO_EDIT, "true")], AGGREGATE_TO_VIEW),
        cluster_role(
            "system:aggregate-to-admin",
            &[(AGGREGATE_TO_ADMIN, "true")],
            vec![
                PolicyRule::new(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                ),
                PolicyRule::new(READ_WRITE, &[GROUP], &["rolebindings", "roles"]),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[(AGGREGATE_TO_EDIT, "true")],
            vec![
                PolicyRule::new(
                    READ,
                    &[""],
                    &[POD_ACCESS, &["secrets", "services/proxy"]].concat(),
                ),
                PolicyRule::new(&["impersonate"], &[""], &["serviceaccounts"]),
                PolicyRule::new(WRITE, &[""], &[&["pods"][..], POD_ACCESS].concat()),
                PolicyRule::new(&["create"], &[""], &["pods/eviction"]),
                PolicyRule::new(
                    WRITE,
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                PolicyRule::new(&["create"], &[""], &["serviceaccounts/token"]),
                PolicyRule::new(
                    WRITE,
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                PolicyRule::new(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
                PolicyRule::new(WRITE, &["batch"], &["cronjobs", "jobs"]),
                PolicyRule::new(
                    WRITE,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "ingresses",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                    ],
                ),
                PolicyRule::new(WRITE, &["policy"], &["poddisruptionbudgets"]),
                PolicyRule::new(
                    WRITE,
                    &["networking.k8s.io"],
                    &["ingresses", "networkpolicies"],
                ),
                PolicyRule::new(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
            ],
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[(AGGREGATE_TO_VIEW, "true")],
            vec![
                PolicyRule::new(
                    READ,
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                PolicyRule::new(
                    READ,
                    &[""],
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                PolicyRule::new(READ, &[""], &["namespaces"]),
                PolicyRule::new(READ, &["discovery.k8s.io"], &["endpointslices"]),
                PolicyRule::new(
                    READ,
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                PolicyRule::new(
                    READ,
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                ),
                PolicyRule::new(
                    READ,
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                ),
                PolicyRule::new(
                    READ,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                    ],
                ),
                PolicyRule::new(
                    READ,
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
                PolicyRule::new(
                    READ,
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                ),
            ],
        ),
        // Delegated authentication and authorization (kube-rbac-proxy,
        // metrics sidecars, other servers' webhook authenticators).
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![
                PolicyRule::new(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                PolicyRule::new(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        // Upstream's `system:monitoring`: metrics and every health
        // check, for the group of the same name (a Prometheus scraper).
        cluster_role(
            "system:monitoring",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &[
                    "/metrics",
                    "/metrics/slis",
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/livez/*",
                    "/readyz/*",
                    "/healthz/*",
                ],
            )],
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                PolicyRule::new(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                PolicyRule::new(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
    ];
    let mut roles = roles;
    // Upstream's role for full access to the kubelet API, and (as k3s
    // binds its API server's kubelet client) the binding of the kubelet
    // client certificate this server presents to kubelets.
    roles.push(cluster_role(
        "system:kubelet-api-admin",
        &[],
        vec![
            PolicyRule::new(&["get", "list", "watch"], &[""], &["nodes"]),
            PolicyRule::new(&["proxy"], &[""], &["nodes"]),
            PolicyRule::new(
                &["*"],
                &[""],
                &["nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"],
            ),
        ],
    ));
    // Upstream's role for kube-scheduler (`policy.go`), bound to its user.
    roles.push(cluster_role(
        "system:kube-scheduler",
        &[],
        vec![
            PolicyRule::new(
                &["create", "patch", "update"],
                &["", "events.k8s.io"],
                &["events"],
            ),
            PolicyRule::new(&["create"], &["coordination.k8s.io"], &["leases"]),
            PolicyRule::new(&["get", "update"], &["coordination.k8s.io"], &["leases"])
                .names(&["kube-scheduler"]),
            PolicyRule::new(READ, &[""], &["nodes"]),
            PolicyRule::new(&["get", "list", "watch", "delete"], &[""], &["pods"]),
            PolicyRule::new(&["create"], &[""], &["pods/binding", "bindings"]),
            PolicyRule::new(&["patch", "update"], &[""], &["pods/status"]),
            PolicyRule::new(READ, &[""], &["services", "replicationcontrollers"]),
            PolicyRule::new(READ, &["apps", "extensions"], &["replicasets"]),
            PolicyRule::new(READ, &["apps"], &["statefulsets"]),
            PolicyRule::new(READ, &["policy"], &["poddisruptionbudgets"]),
            PolicyRule::new(
                READ,
                &[""],
                &["persistentvolumeclaims", "persistentvolumes"],
            ),
            PolicyRule::new(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
            PolicyRule::new(
                &["create"],
                &["authorization.k8s.io"],
                &["subjectaccessreviews"],
            ),
            PolicyRule::new(READ, &["storage.k8s.io"], &["csinodes"]),
            PolicyRule::new(READ, &[""], &["namespaces"]),
            PolicyRule::new(
                READ,
                &["storage.k8s.io"],
                &["csidrivers", "csistoragecapacities"],
            ),
            // Not upstream's: the wasm plugins it runs, and their status.
            PolicyRule::new(
                READ,
                &[crate::scheduler_plugin::GROUP],
                &[crate::scheduler_plugin::PLURAL],
            ),
            PolicyRule::new(
                &["patch", "update"],
                &[crate::scheduler_plugin::GROUP],
                &["schedulerplugins/status"],
            ),
        ],
    ));
    let mut out = aggregate(&roles);
    let mut kubelet_client = cluster_role_binding(
        "system:kube-apiserver-kubelet-client",
        "system:kubelet-api-admin",
        &[],
    );
    kubelet_client["subjects"] =
        json!([{"kind": "User", "apiGroup": GROUP, "name": KUBELET_CLIENT_USER}]);
    out.push(kubelet_client);
    let mut scheduler = cluster_role_binding("system:kube-scheduler", "system:kube-scheduler", &[]);
    scheduler["subjects"] =
        json!([{"kind": "User", "apiGroup": GROUP, "name": "system:kube-scheduler"}]);
    out.push(scheduler);
    out.extend(controller_roles());
    out.extend(certificate_roles());
    out.extend([
        cluster_role_binding("cluster-admin", "cluster-admin", &[SYSTEM_MASTERS]),
        cluster_role_binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        cluster_role_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        cluster_role_binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        cluster_role_binding(
            "system:monitoring",
            "system:monitoring",
            &["system:monitoring"],
        ),
    ]);
    out
}

/// Upstream `breakdownRule`: one rule per (group, resource, verb,
/// resourceName) and per (nonResourceURL, verb).
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let one = |s: &String| vec![s.clone()];
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: one(verb),
                    ..Default::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for name in &rule.resource_names {
                        out.push(PolicyRule {
                            resource_names: one(name),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: one(verb),
                ..Default::default()
            });
        }
    }
    out
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

/// Upstream `resourceCoversAll`: `*`, exact, or `*/<subresource>`.
fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, ALL) || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(owner, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

/// Upstream `nonResourceURLCovers`.
fn url_covers(owner: &str, path: &str) -> bool {
    owner == path || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

/// Upstream `ruleCovers`: does `owner` grant everything the atomic `sub` does?
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, ALL) || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resources_cover(&owner.resources, &sub.resources);
    let urls = sub
        .non_resource_urls
        .iter()
        .all(|p| owner.non_resource_urls.iter().any(|o| url_covers(o, p)));
    let names = owner.resource_names.is_empty()
        || (!sub.resource_names.is_empty() && has_all(&owner.resource_names, &sub.resource_names));
    verbs && groups && resources && urls && names
}

/// Upstream `validation.Covers`: whether `owner_rules` grant everything in
/// `requested`, and the atomic pieces of `requested` they do not grant.
pub fn covers(owner_rules: &[PolicyRule], requested: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let uncovered: Vec<PolicyRule> = requested
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner_rules.iter().any(|o| rule_covers(o, sub)))
        .collect();
    (uncovered.is_empty(), uncovered)
}

/// Merges atomic rules that differ only in their verb, for messages.
fn compact(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for r in rules {
        let same = out.iter_mut().find(|o| {
            o.api_groups == r.api_groups
                && o.resources == r.resources
                && o.resource_names == r.resource_names
                && o.non_resource_urls == r.non_resource_urls
        });
        match same {
            Some(o) => {
                for v in &r.verbs {
                    if !has(&o.verbs, v) {
                        o.verbs.push(v.clone());
                    }
                }
            }
            None => out.push(r.clone()),
        }
    }
    out
}

/// Upstream's escalation refusal message for the `uncovered` rules from
/// [`covers`] (the server wraps it in a 403 Forbidden).
pub fn escalation_message(user: &str, groups: &[String], uncovered: &[PolicyRule]) -> String {
    let lines: BTreeSet<String> = compact(uncovered)
        .iter()
        .map(PolicyRule::compact_string)
        .collect();
    let groups: Vec<String> = groups.iter().map(|g| format!("{g:?}")).collect();
    format!(
        "user {user:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        groups.join(" "),
        lines.into_iter().collect::<Vec<_>>().join("\n")
    )
}

impl fmt::Display for PolicyRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.compact_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap()
    }

    fn groups(g: &[&str]) -> Vec<String> {
        g.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn policy_rule_serde_uses_upstream_names() {
        let r = rule(json!({
            "verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
            "resourceNames": ["a"], "nonResourceURLs": null
        }));
        assert_eq!(r, PolicyRule::new(&["get"], &[""], &["pods"]).names(&["a"]));
        let back = serde_json::to_value(PolicyRule::urls(&["get"], &["/healthz"])).unwrap();
        assert_eq!(
            back,
            json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]})
        );
    }

    #[test]
    fn resource_rule_matching() {
        let base = || Attributes::resource("u", &[], "get", "", "pods");
        let cases: Vec<(&str, Value, Attributes, bool)> = vec![
            (
                "exact",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["pods"]}),
                base(),
                true,
            ),
            (
                "verb star",
                json!({"verbs":["*"],"apiGroups":[""],"resources":["pods"]}),
                base(),
                true,
            ),
            (
                "wrong verb",
                json!({"verbs":["list"],"apiGroups":[""],"resources":["pods"]}),
                base(),
                false,
            ),
            (
                "group star",
                json!({"verbs":["get"],"apiGroups":["*"],"resources":["pods"]}),
                base(),
                true,
            ),
            (
                "wrong group",
                json!({"verbs":["get"],"apiGroups":["apps"],"resources":["pods"]}),
                base(),
                false,
            ),
            (
                "no groups",
                json!({"verbs":["get"],"resources":["pods"]}),
                base(),
                false,
            ),
            (
                "resource star",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["*"]}),
                base(),
                true,
            ),
            (
                "wrong resource",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["secrets"]}),
                base(),
                false,
            ),
            (
                "resource does not grant subresource",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["pods"]}),
                base().with_subresource("log"),
                false,
            ),
            (
                "res/sub",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["pods/log"]}),
                base().with_subresource("log"),
                true,
            ),
            (
                "res/sub does not grant resource",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["pods/log"]}),
                base(),
                false,
            ),
            (
                "*/sub",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["*/log"]}),
                base().with_subresource("log"),
                true,
            ),
            (
                "*/sub other sub",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["*/log"]}),
                base().with_subresource("status"),
                false,
            ),
            (
                "*/sub same length, other sub",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["*/xyz"]}),
                base().with_subresource("log"),
                false,
            ),
            (
                "*/sub suffix only",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["*/log"]}),
                base().with_subresource("blog"),
                false,
            ),
            (
                "* grants subresource",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["*"]}),
                base().with_subresource("status"),
                true,
            ),
            (
                "name listed",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["pods"],"resourceNames":["a","b"]}),
                base().named("b"),
                true,
            ),
            (
                "name not listed",
                json!({"verbs":["get"],"apiGroups":[""],"resources":["pods"],"resourceNames":["a"]}),
                base().named("c"),
                false,
            ),
            (
                "names need a name",
                json!({"verbs":["list"],"apiGroups":[""],"resources":["pods"],"resourceNames":["a"]}),
                Attributes::resource("u", &[], "list", "", "pods"),
                false,
            ),
            (
                "url rule ignores resource requests",
                json!({"verbs":["*"],"nonResourceURLs":["*"]}),
                base(),
                false,
            ),
        ];
        for (name, r, attrs, want) in cases {
            assert_eq!(rule_allows(&rule(r), &attrs), want, "{name}");
        }
    }

    #[test]
    fn non_resource_rule_matching() {
        let cases = [
            (vec!["/healthz"], "get", "/healthz", true),
            (vec!["/healthz"], "get", "/healthz/etcd", false),
            (vec!["/healthz/*"], "get", "/healthz/etcd", true),
            (vec!["/healthz/*"], "get", "/healthz/", true),
            (vec!["/healthz/*"], "get", "/healthz", false),
            (vec!["/api*"], "get", "/apis/apps", true),
            (vec!["*"], "get", "/anything", true),
            (vec!["/version"], "post", "/version", false),
            (vec![], "get", "/", false),
        ];
        for (urls, verb, path, want) in cases {
            let r = PolicyRule::urls(&["get"], &urls);
            let attrs = Attributes::non_resource("u", &[], verb, path);
            assert_eq!(rule_allows(&r, &attrs), want, "{urls:?} {verb} {path}");
        }
        let resource_rule = PolicyRule::new(&["*"], &["*"], &["*"]);
        assert!(!rule_allows(
            &resource_rule,
            &Attributes::non_resource("u", &[], "get", "/api")
        ));
    }

    #[test]
    fn service_account_user_names() {
        let cases = [
            ("ns", "sa", "system:serviceaccount:ns:sa", true),
            ("ns", "sa", "system:serviceaccount:ns:sa2", false),
            ("ns", "sa", "system:serviceaccount:ns2:sa", false),
            ("ns", "sa", "system:serviceaccount:nssa", false),
            ("ns", "sa", "ns:sa", false),
        ];
        for (ns, name, user, want) in cases {
            assert_eq!(service_account_matches(ns, name, user), want, "{user}");
        }
    }

    fn role(ns: &str, name: &str, rules: Value) -> Value {
        json!({"kind":"Role","metadata":{"namespace":ns,"name":name},"rules":rules})
    }

    fn crole(name: &str, rules: Value) -> Value {
        json!({"kind":"ClusterRole","metadata":{"name":name},"rules":rules})
    }

    fn rb(ns: &str, name: &str, kind: &str, role: &str, subjects: Value) -> Value {
        json!({"kind":"RoleBinding","metadata":{"namespace":ns,"name":name},
               "roleRef":{"apiGroup":GROUP,"kind":kind,"name":role},"subjects":subjects})
    }

    fn crb(name: &str, role: &str, subjects: Value) -> Value {
        json!({"kind":"ClusterRoleBinding","metadata":{"name":name},
               "roleRef":{"apiGroup":GROUP,"kind":"ClusterRole","name":role},"subjects":subjects})
    }

    fn fixture() -> RbacSnapshot {
        RbacSnapshot::from_objects(&[
            crole(
                "pod-reader",
                json!([{"verbs":["get","list"],"apiGroups":[""],"resources":["pods"]}]),
            ),
            crole(
                "node-reader",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["nodes"]}]),
            ),
            role(
                "dev",
                "cm-writer",
                json!([{"verbs":["create"],"apiGroups":[""],"resources":["configmaps"]}]),
            ),
            crb(
                "readers",
                "node-reader",
                json!([{"kind":"Group","name":"readers"}]),
            ),
            rb(
                "dev",
                "alice-pods",
                "ClusterRole",
                "pod-reader",
                json!([{"kind":"User","name":"alice"}]),
            ),
            rb(
                "dev",
                "bob-cm",
                "Role",
                "cm-writer",
                json!([{"kind":"User","name":"bob"}]),
            ),
            rb(
                "dev",
                "sa-cm",
                "Role",
                "cm-writer",
                json!([{"kind":"ServiceAccount","name":"builder"}]),
            ),
            rb(
                "dev",
                "other-sa",
                "Role",
                "cm-writer",
                json!([{"kind":"ServiceAccount","name":"deployer","namespace":"ci"}]),
            ),
            rb(
                "dev",
                "dangling",
                "Role",
                "missing",
                json!([{"kind":"User","name":"carol"}]),
            ),
            rb(
                "prod",
                "bob-cm",
                "Role",
                "cm-writer",
                json!([{"kind":"User","name":"dave"}]),
            ),
            crb(
                "sa-without-namespace",
                "node-reader",
                json!([{"kind":"ServiceAccount","name":"orphan"}]),
            ),
        ])
    }

    #[test]
    fn authorize_walks_bindings() {
        let snap = fixture();
        let a = |user: &str, g: &[&str], verb: &str, res: &str, ns: Option<&str>| {
            let mut at = Attributes::resource(user, g, verb, "", res);
            at.namespace = ns.map(String::from);
            authorize(&snap, &at)
        };
        let cases = [
            (
                "cluster role via role binding",
                a("alice", &[], "get", "pods", Some("dev")),
                true,
            ),
            (
                "role binding is namespace-scoped",
                a("alice", &[], "get", "pods", Some("prod")),
                false,
            ),
            (
                "role binding does not grant cluster-wide",
                a("alice", &[], "list", "pods", None),
                false,
            ),
            (
                "verb not granted",
                a("alice", &[], "delete", "pods", Some("dev")),
                false,
            ),
            (
                "role in binding's namespace",
                a("bob", &[], "create", "configmaps", Some("dev")),
                true,
            ),
            (
                "role only resolves in its namespace",
                a("dave", &[], "create", "configmaps", Some("prod")),
                false,
            ),
            (
                "group cluster role binding",
                a("x", &["readers"], "get", "nodes", None),
                true,
            ),
            (
                "cluster binding sa needs a namespace",
                a("system:serviceaccount::orphan", &[], "get", "nodes", None),
                false,
            ),
            (
                "cluster binding applies in namespaces",
                a("x", &["readers"], "get", "nodes", Some("dev")),
                true,
            ),
            (
                "no binding",
                a("eve", &["readers"], "get", "pods", Some("dev")),
                false,
            ),
            (
                "sa defaulted to binding namespace",
                a(
                    "system:serviceaccount:dev:builder",
                    &[],
                    "create",
                    "configmaps",
                    Some("dev"),
                ),
                true,
            ),
            (
                "sa in other namespace",
                a(
                    "system:serviceaccount:prod:builder",
                    &[],
                    "create",
                    "configmaps",
                    Some("dev"),
                ),
                false,
            ),
            (
                "sa with explicit namespace",
                a(
                    "system:serviceaccount:ci:deployer",
                    &[],
                    "create",
                    "configmaps",
                    Some("dev"),
                ),
                true,
            ),
            (
                "system:masters",
                a("root", &[SYSTEM_MASTERS], "delete", "anything", None),
                true,
            ),
        ];
        for (name, d, want) in cases {
            assert_eq!(d.is_allowed(), want, "{name}: {d:?}");
        }
    }

    #[test]
    fn authorize_reasons_are_upstream_shaped() {
        let snap = fixture();
        let at = Attributes::resource("alice", &[], "get", "", "pods").in_namespace("dev");
        assert_eq!(
            authorize(&snap, &at),
            Decision::Allow(
                r#"RBAC: allowed by RoleBinding "alice-pods/dev" of ClusterRole "pod-reader" to User "alice""#.into()
            )
        );
        let at = Attributes::resource("x", &["readers"], "get", "", "nodes");
        assert_eq!(
            authorize(&snap, &at).reason(),
            r#"RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "node-reader" to Group "readers""#
        );
        let at = Attributes::resource(
            "system:serviceaccount:dev:builder",
            &[],
            "create",
            "",
            "configmaps",
        )
        .in_namespace("dev");
        assert_eq!(
            authorize(&snap, &at).reason(),
            r#"RBAC: allowed by RoleBinding "sa-cm/dev" of Role "cm-writer" to ServiceAccount "builder/dev""#
        );
        let at = Attributes::resource("carol", &[], "get", "", "pods").in_namespace("dev");
        assert_eq!(
            authorize(&snap, &at),
            Decision::NoOpinion(format!(r#"RBAC: role.{GROUP} "missing" not found"#))
        );
        let at = Attributes::resource("eve", &[], "get", "", "pods").in_namespace("dev");
        assert_eq!(authorize(&snap, &at), Decision::NoOpinion(String::new()));
    }

    #[test]
    fn rules_for_collects_cluster_and_namespace_rules() {
        let snap = fixture();
        let (rules, errors) =
            rules_for_with_errors(&snap, "alice", &groups(&["readers"]), Some("dev"));
        assert_eq!(
            rules,
            vec![
                PolicyRule::new(&["get"], &[""], &["nodes"]),
                PolicyRule::new(&["get", "list"], &[""], &["pods"]),
            ]
        );
        assert!(errors.is_empty());
        assert_eq!(
            rules_for(&snap, "alice", &groups(&["readers"]), None).len(),
            1
        );
        let (rules, errors) = rules_for_with_errors(&snap, "carol", &[], Some("dev"));
        assert!(rules.is_empty());
        assert_eq!(errors.len(), 1);
        let status = subject_rules_review_status(&rules, &errors);
        assert_eq!(
            status["evaluationError"],
            json!(format!(r#"role.{GROUP} "missing" not found"#))
        );
    }

    #[test]
    fn subject_rules_review_status_splits_rules() {
        let rules = [
            PolicyRule::new(&["get"], &[""], &["pods"]).names(&["a"]),
            PolicyRule::urls(&["get"], &["/api"]),
        ];
        assert_eq!(
            subject_rules_review_status(&rules, &[]),
            json!({
                "resourceRules": [{"verbs":["get"],"apiGroups":[""],"resources":["pods"],"resourceNames":["a"]}],
                "nonResourceRules": [{"verbs":["get"],"nonResourceURLs":["/api"]}],
                "incomplete": false,
            })
        );
    }

    #[test]
    fn bindings_with_unknown_kinds_or_bad_refs_grant_nothing() {
        let snap = RbacSnapshot::from_objects(&[
            crole(
                "all",
                json!([{"verbs":["*"],"apiGroups":["*"],"resources":["*"]}]),
            ),
            crb("weird", "all", json!([{"kind":"Robot","name":"u"}])),
            json!({"kind":"ClusterRoleBinding","metadata":{"name":"noref"},"subjects":[{"kind":"User","name":"u"}]}),
            json!({"kind":"ClusterRoleBinding","metadata":{"name":"badkind"},
                   "roleRef":{"kind":"Thing","name":"all"},"subjects":[{"kind":"User","name":"v"}]}),
        ]);
        let d = authorize(&snap, &Attributes::resource("u", &[], "get", "", "pods"));
        assert_eq!(d, Decision::NoOpinion(String::new()));
        let d = authorize(&snap, &Attributes::resource("v", &[], "get", "", "pods"));
        assert_eq!(
            d,
            Decision::NoOpinion(r#"RBAC: unsupported role reference kind: "Thing""#.into())
        );
    }

    #[test]
    fn aggregation_fills_rules_from_selected_roles() {
        let labelled = |name: &str, labels: Value, rules: Value| json!({"kind":"ClusterRole","metadata":{"name":name,"labels":labels},"rules":rules});
        let roles = vec![
            json!({"kind":"ClusterRole","metadata":{"name":"agg"},
                   "aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"to-agg":"true"}}]},
                   "rules":[{"verbs":["stale"],"apiGroups":[""],"resources":["x"]}]}),
            labelled(
                "b",
                json!({"to-agg":"true"}),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["b"]}]),
            ),
            labelled(
                "a",
                json!({"to-agg":"true"}),
                json!([
                    {"verbs":["get"],"apiGroups":[""],"resources":["a"]},
                    {"verbs":["get"],"apiGroups":[""],"resources":["b"]}
                ]),
            ),
            labelled(
                "c",
                json!({"to-agg":"false"}),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["c"]}]),
            ),
        ];
        let out = aggregate(&roles);
        assert_eq!(out.len(), 4);
        assert_eq!(
            PolicyRule::from_role(&out[0]),
            vec![
                PolicyRule::new(&["get"], &[""], &["a"]),
                PolicyRule::new(&["get"], &[""], &["b"]),
            ],
            "sorted by role name, deduplicated, own stale rules replaced"
        );
        assert_eq!(out[1..], roles[1..], "non-aggregated roles unchanged");
        assert_eq!(aggregate(&out), out, "idempotent");
    }

    #[test]
    fn aggregation_handles_chains_self_selection_and_bad_selectors() {
        let roles = vec![
            json!({"kind":"ClusterRole","metadata":{"name":"top"},
                   "aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"to-top":"true"}}]}}),
            json!({"kind":"ClusterRole","metadata":{"name":"mid","labels":{"to-top":"true","to-mid":"true"}},
                   "aggregationRule":{"clusterRoleSelectors":[{"matchExpressions":[{"key":"to-mid","operator":"Exists"}]}]},
                   "rules":[{"verbs":["stale"],"apiGroups":[""],"resources":["mid"]}]}),
            json!({"kind":"ClusterRole","metadata":{"name":"leaf","labels":{"to-mid":"true"}},
                   "rules":[{"verbs":["get"],"apiGroups":[""],"resources":["leaf"]}]}),
            json!({"kind":"ClusterRole","metadata":{"name":"bad"},
                   "aggregationRule":{"clusterRoleSelectors":[{"matchExpressions":[{"key":"k","operator":"Near"}]}]},
                   "rules":[{"verbs":["keep"],"apiGroups":[""],"resources":["x"]}]}),
        ];
        let out = aggregate(&roles);
        let leaf = vec![PolicyRule::new(&["get"], &[""], &["leaf"])];
        assert_eq!(PolicyRule::from_role(&out[1]), leaf, "mid skips itself");
        assert_eq!(
            PolicyRule::from_role(&out[0]),
            leaf,
            "top sees mid's aggregated rules"
        );
        assert_eq!(
            out[3], roles[3],
            "unreadable selector leaves the role alone"
        );
    }

    #[test]
    fn bootstrap_policy_grants_upstream_defaults() {
        let objs = bootstrap_policy();
        assert!(
            objs.iter()
                .all(|o| o["metadata"]["labels"][BOOTSTRAP_LABEL] == "rbac-defaults")
        );
        let snap = RbacSnapshot::from_objects(&objs);
        let authn = ["system:authenticated"];
        let anon = ["system:unauthenticated"];
        let url = |g: &[&str], path: &str| {
            authorize(&snap, &Attributes::non_resource("u", g, "get", path)).is_allowed()
        };
        let cases = [
            ("anon version", url(&anon, "/version"), true),
            ("anon healthz", url(&anon, "/healthz"), true),
            ("anon readyz", url(&anon, "/readyz"), true),
            ("anon api", url(&anon, "/api"), false),
            ("authn api", url(&authn, "/api/v1"), true),
            ("authn apis", url(&authn, "/apis"), true),
            ("authn openapi", url(&authn, "/openapi/v3"), true),
            ("authn metrics", url(&authn, "/metrics"), false),
            (
                "monitoring metrics",
                url(&["system:monitoring"], "/metrics"),
                true,
            ),
            (
                "monitoring readyz/etcd",
                url(&["system:monitoring"], "/readyz/etcd"),
                true,
            ),
            ("authn readyz/etcd", url(&authn, "/readyz/etcd"), false),
            ("monitoring api", url(&["system:monitoring"], "/api"), false),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
        let ssar = Attributes::resource(
            "u",
            &authn,
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
        );
        assert!(authorize(&snap, &ssar).is_allowed());
        let master = Attributes::resource("u", &[SYSTEM_MASTERS], "delete", "", "nodes");
        assert!(authorize(&snap, &master).is_allowed());
    }

    #[test]
    fn bootstrap_view_edit_admin_are_aggregated() {
        let objs = bootstrap_policy();
        let find = |name: &str| {
            PolicyRule::from_role(
                objs.iter()
                    .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name)
                    .unwrap(),
            )
        };
        let (view, edit, admin) = (find("view"), find("edit"), find("admin"));
        let can = |rules: &[PolicyRule], verb: &str, group: &str, res: &str| {
            rules
                .iter()
                .any(|r| rule_allows(r, &Attributes::resource("u", &[], verb, group, res)))
        };
        let cases = [
            (
                "view lists configmaps",
                can(&view, "list", "", "configmaps"),
                true,
            ),
            (
                "view cannot create configmaps",
                can(&view, "create", "", "configmaps"),
                false,
            ),
            (
                "view cannot read secrets",
                can(&view, "get", "", "secrets"),
                false,
            ),
            (
                "view reads namespaces",
                can(&view, "watch", "", "namespaces"),
                true,
            ),
            (
                "view does not read leases (edit does)",
                can(&view, "get", "coordination.k8s.io", "leases"),
                false,
            ),
            (
                "edit renews leases",
                can(&edit, "update", "coordination.k8s.io", "leases"),
                true,
            ),
            ("view lists pods", can(&view, "list", "", "pods"), true),
            (
                "view cannot exec into pods",
                can(&view, "create", "", "pods/exec"),
                false,
            ),
            (
                "edit execs into pods",
                can(&edit, "create", "", "pods/exec"),
                true,
            ),
            (
                "edit scales deployments",
                can(&edit, "update", "apps", "deployments/scale"),
                true,
            ),
            (
                "edit writes ingresses",
                can(&edit, "patch", "networking.k8s.io", "ingresses"),
                true,
            ),
            (
                "view reads endpointslices",
                can(&view, "watch", "discovery.k8s.io", "endpointslices"),
                true,
            ),
            (
                "edit cannot write endpointslices",
                can(&edit, "create", "discovery.k8s.io", "endpointslices"),
                false,
            ),
            ("edit reads secrets", can(&edit, "get", "", "secrets"), true),
            (
                "edit writes configmaps",
                can(&edit, "update", "", "configmaps"),
                true,
            ),
            (
                "edit inherits view",
                can(&edit, "list", "", "serviceaccounts"),
                true,
            ),
            (
                "edit cannot write roles",
                can(&edit, "create", GROUP, "roles"),
                false,
            ),
            (
                "admin writes roles",
                can(&admin, "create", GROUP, "rolebindings"),
                true,
            ),
            (
                "admin inherits edit",
                can(&admin, "delete", "", "secrets"),
                true,
            ),
            (
                "admin inherits view",
                can(&admin, "get", "", "events"),
                true,
            ),
            (
                "admin cannot delete namespaces",
                can(&admin, "delete", "", "namespaces"),
                false,
            ),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
        // A user bound to `view` in a namespace, end to end.
        let mut all = objs.clone();
        all.push(rb(
            "team",
            "v",
            "ClusterRole",
            "view",
            json!([{"kind":"User","name":"viewer"}]),
        ));
        let snap = RbacSnapshot::from_objects(&all);
        let list = Attributes::resource(
            "viewer",
            &["system:authenticated"],
            "list",
            "",
            "configmaps",
        )
        .in_namespace("team");
        assert!(authorize(&snap, &list).is_allowed());
        let create = Attributes {
            verb: "create".into(),
            ..list
        };
        assert!(!authorize(&snap, &create).is_allowed());
    }

    #[test]
    fn covers_matches_upstream_cases() {
        let r = |v: Value| -> Vec<PolicyRule> { serde_json::from_value(v).unwrap() };
        let cases: Vec<(&str, Value, Value, bool, usize)> = vec![
            (
                "exact",
                json!([{"verbs":["get","list"],"apiGroups":[""],"resources":["pods"]}]),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]),
                true,
                0,
            ),
            (
                "missing verb",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]),
                json!([{"verbs":["get","delete"],"apiGroups":[""],"resources":["pods"]}]),
                false,
                1,
            ),
            (
                "stars cover everything",
                json!([{"verbs":["*"],"apiGroups":["*"],"resources":["*"]}]),
                json!([{"verbs":["get","escalate"],"apiGroups":["apps",""],"resources":["deployments","pods/exec"]}]),
                true,
                0,
            ),
            (
                "split across owner rules",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["pods"]},
                       {"verbs":["list"],"apiGroups":[""],"resources":["pods"]}]),
                json!([{"verbs":["get","list"],"apiGroups":[""],"resources":["pods"]}]),
                true,
                0,
            ),
            (
                "*/sub covers res/sub",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["*/status"]}]),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["pods/status"]}]),
                true,
                0,
            ),
            (
                "*/sub does not cover resource",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["*/status"]}]),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]),
                false,
                1,
            ),
            (
                "resource does not cover subresource",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["pods/exec"]}]),
                false,
                1,
            ),
            (
                "names: unrestricted owner covers named",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["secrets"]}]),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["secrets"],"resourceNames":["a","b"]}]),
                true,
                0,
            ),
            (
                "names: named owner does not cover unrestricted",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["secrets"],"resourceNames":["a"]}]),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["secrets"]}]),
                false,
                1,
            ),
            (
                "names: partial",
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["secrets"],"resourceNames":["a"]}]),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["secrets"],"resourceNames":["a","b"]}]),
                false,
                1,
            ),
            (
                "urls: prefix star",
                json!([{"verbs":["get"],"nonResourceURLs":["/apis/*"]}]),
                json!([{"verbs":["get"],"nonResourceURLs":["/apis/apps","/apis/*"]}]),
                true,
                0,
            ),
            (
                "urls: narrower star",
                json!([{"verbs":["get"],"nonResourceURLs":["/apis/apps/*"]}]),
                json!([{"verbs":["get"],"nonResourceURLs":["/apis/*"]}]),
                false,
                1,
            ),
            (
                "resource owner does not cover urls",
                json!([{"verbs":["*"],"apiGroups":["*"],"resources":["*"]}]),
                json!([{"verbs":["get"],"nonResourceURLs":["/healthz"]}]),
                false,
                1,
            ),
            (
                "wrong group",
                json!([{"verbs":["get"],"apiGroups":["apps"],"resources":["pods"]}]),
                json!([{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]),
                false,
                1,
            ),
            ("nothing requested", json!([]), json!([]), true, 0),
        ];
        for (name, owner, requested, want, n) in cases {
            let (ok, uncovered) = covers(&r(owner), &r(requested));
            assert_eq!((ok, uncovered.len()), (want, n), "{name}: {uncovered:?}");
        }
    }

    #[test]
    fn covers_reports_atomic_uncovered_rules_and_message() {
        let owner = vec![PolicyRule::new(&["get"], &[""], &["pods"])];
        let requested = vec![PolicyRule::new(
            &["get", "delete", "patch"],
            &[""],
            &["pods", "secrets"],
        )];
        let (ok, uncovered) = covers(&owner, &requested);
        assert!(!ok);
        assert_eq!(uncovered.len(), 5);
        assert!(
            uncovered
                .iter()
                .all(|r| r.verbs.len() == 1 && r.resources.len() == 1)
        );
        assert_eq!(
            escalation_message("bob", &groups(&["system:authenticated"]), &uncovered),
            "user \"bob\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"patch\"]}\n\
             {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\" \"patch\"]}"
        );
    }

    #[test]
    fn subject_access_review_names_its_subject_and_status_its_reason() {
        let spec = json!({"user": "alice", "groups": ["g"],
            "resourceAttributes": {"namespace": "dev", "verb": "list", "resource": "pods"}});
        let a = Attributes::from_subject_access_review(&spec);
        assert_eq!(
            a,
            Attributes::resource("alice", &["g"], "list", "", "pods").in_namespace("dev")
        );
        assert_eq!(
            Decision::NoOpinion(String::new()).review_status(),
            json!({"allowed": false})
        );
        assert_eq!(
            Decision::Allow("RBAC: allowed by x".into()).review_status(),
            json!({"allowed": true, "reason": "RBAC: allowed by x"})
        );
    }

    #[test]
    fn access_review_spec_to_attributes() {
        let spec = json!({"resourceAttributes": {"namespace":"dev","verb":"get","group":"apps",
            "resource":"deployments","subresource":"scale","name":"web"}});
        let a = Attributes::from_access_review_spec(&spec, "alice", &groups(&["g"]));
        assert_eq!(
            a,
            Attributes::resource("alice", &["g"], "get", "apps", "deployments")
                .in_namespace("dev")
                .named("web")
                .with_subresource("scale")
        );
        let spec = json!({"nonResourceAttributes": {"path":"/healthz","verb":"get"}});
        let a = Attributes::from_access_review_spec(&spec, "alice", &[]);
        assert_eq!(a, Attributes::non_resource("alice", &[], "get", "/healthz"));
    }
}
