//! ValidatingAdmissionPolicies in the request path: the active policies and
//! bindings (an immutable snapshot swapped on every change, as the chain
//! is), params read from storage, and what a failed validation does per
//! the binding's `validationActions` (Deny, Warn, Audit) and the policy's
//! `failurePolicy`. Compilation and evaluation are the API layer's
//! ([`wasm_apiserver_api::admission_policy`]).
//!
//! They run where upstream's `ValidatingAdmissionPolicy` plugin does: after
//! mutating admission, before the validating plugins and webhooks.

use crate::admission::chain::Attributes;
use crate::options::{ListOutcome, ListParams, WriteOptions};
use crate::resources::{Resource, Resources};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;
use wasm_apiserver_api::admission::{FailurePolicy, RequestAttributes};
use wasm_apiserver_api::admission_policy::mutating::{
    self, MutatingBinding, MutatingPolicy, MutationInput,
};
use wasm_apiserver_api::admission_policy::{
    self as vap, Binding, Common, Evaluation, Failure, Input, MatchInput, ParamRef, Policy,
};
use wasm_apiserver_api::cel::authz::{Authorize, Authorizer};
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::{ApiError, Cause, ResourceInfo, meta};

/// A policy as the set holds it: compiled, or why it is not.
enum Entry<P> {
    Ready(Arc<P>),
    Broken {
        generation: i64,
        message: String,
        failure_policy: FailurePolicy,
    },
}

impl<P: Compile> Entry<P> {
    fn generation(&self) -> i64 {
        match self {
            Entry::Ready(p) => p.generation,
            Entry::Broken { generation, .. } => *generation,
        }
    }
}

/// Validating and mutating policies, compiled alike.
trait Compile: std::ops::Deref<Target = Common> + Sized {
    fn compile(obj: &Value) -> Result<Self, Vec<Cause>>;
}

impl Compile for Policy {
    fn compile(obj: &Value) -> Result<Self, Vec<Cause>> {
        Policy::compile(obj)
    }
}

impl Compile for MutatingPolicy {
    fn compile(obj: &Value) -> Result<Self, Vec<Cause>> {
        MutatingPolicy::compile(obj)
    }
}

/// The entry of a policy object: the current one when its generation is
/// active already (`None`), else newly compiled.
fn entry_for<P: Compile>(
    current: Option<&Arc<Entry<P>>>,
    obj: &Value,
) -> (Option<Entry<P>>, Compiled) {
    let name = meta::name(obj).unwrap_or_default();
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    if let Some(e) = current
        && e.generation() == generation
    {
        let error = match &**e {
            Entry::Ready(_) => None,
            Entry::Broken { message, .. } => Some(message.clone()),
        };
        return (None, Compiled { generation, error });
    }
    match P::compile(obj) {
        Ok(p) => (
            Some(Entry::Ready(Arc::new(p))),
            Compiled {
                generation,
                error: None,
            },
        ),
        Err(causes) => {
            let message = causes_text(&causes);
            let failure_policy = match obj["spec"]["failurePolicy"].as_str() {
                Some("Ignore") => FailurePolicy::Ignore,
                _ => FailurePolicy::Fail,
            };
            tracing::warn!(policy = %name, error = %message, "admission policy does not compile");
            let entry = Entry::Broken {
                generation,
                message: message.clone(),
                failure_policy,
            };
            (
                Some(entry),
                Compiled {
                    generation,
                    error: Some(message),
                },
            )
        }
    }
}

#[derive(Default, Clone)]
struct Set {
    policies: BTreeMap<String, Arc<Entry<Policy>>>,
    bindings: BTreeMap<String, Arc<Binding>>,
    mutating: BTreeMap<String, Arc<Entry<MutatingPolicy>>>,
    mutating_bindings: BTreeMap<String, Arc<MutatingBinding>>,
}

/// Which of the four admission-policy resources an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Policy,
    Binding,
    MutatingPolicy,
    MutatingBinding,
}

impl Kind {
    /// The kind of resource `plural` of `admissionregistration.k8s.io`.
    pub fn of(plural: &str) -> Option<Kind> {
        Some(match plural {
            vap::POLICIES => Kind::Policy,
            vap::BINDINGS => Kind::Binding,
            mutating::POLICIES => Kind::MutatingPolicy,
            mutating::BINDINGS => Kind::MutatingBinding,
            _ => return None,
        })
    }

    pub fn version(self) -> &'static str {
        match self {
            Kind::Policy | Kind::Binding => "v1",
            Kind::MutatingPolicy | Kind::MutatingBinding => mutating::VERSION,
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Kind::Policy => vap::POLICIES,
            Kind::Binding => vap::BINDINGS,
            Kind::MutatingPolicy => mutating::POLICIES,
            Kind::MutatingBinding => mutating::BINDINGS,
        }
    }

    pub fn is_binding(self) -> bool {
        matches!(self, Kind::Binding | Kind::MutatingBinding)
    }

    pub fn is_mutating(self) -> bool {
        matches!(self, Kind::MutatingPolicy | Kind::MutatingBinding)
    }
}

/// Counters for `apiserver_validating_admission_policy_check_total` and
/// the duration histogram's sum and count.
#[derive(Default)]
struct Metrics {
    checks: BTreeMap<(String, String, &'static str, &'static str), u64>,
    duration: BTreeMap<(String, String), (f64, u64)>,
    mutating_checks: BTreeMap<(String, String, &'static str), u64>,
    mutating_duration: BTreeMap<(String, String), (f64, u64)>,
}

/// The active ValidatingAdmissionPolicies and their bindings.
#[derive(Default)]
pub struct Policies {
    set: RwLock<Arc<Set>>,
    authorizer: OnceLock<Arc<dyn Authorize>>,
    metrics: Mutex<Metrics>,
}

/// What a policy object's status says after it was (re)compiled.
pub struct Compiled {
    pub generation: i64,
    /// The error that keeps it from running (requests then follow its
    /// `failurePolicy`).
    pub error: Option<String>,
}

fn causes_text(causes: &[Cause]) -> String {
    causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Policies {
    fn snapshot(&self) -> Arc<Set> {
        self.set.read().expect("policy set lock").clone()
    }

    fn swap(&self, f: impl FnOnce(&mut Set)) {
        let mut guard = self.set.write().expect("policy set lock");
        let mut next = Set::clone(&guard);
        f(&mut next);
        *guard = Arc::new(next);
    }

    /// What `authorizer` checks in expressions go through (set once by the
    /// assembly; without it expressions that use `authorizer` fail).
    pub fn set_authorizer(&self, a: Arc<dyn Authorize>) {
        let _ = self.authorizer.set(a);
    }

    /// The server's authorizer, once the assembly has set it (what the
    /// compiled-in plugins that check permissions ask).
    pub fn authorizer(&self) -> Option<&dyn Authorize> {
        self.authorizer.get().map(|a| a.as_ref())
    }

    /// Installs (or replaces) a policy object (`mutating`: a
    /// MutatingAdmissionPolicy), compiling it unless this generation is
    /// active already.
    pub fn apply_policy(&self, obj: &Value, mutating: bool) -> Compiled {
        let name = meta::name(obj).unwrap_or_default().to_string();
        let set = self.snapshot();
        if mutating {
            let (entry, c) = entry_for(set.mutating.get(&name), obj);
            if let Some(e) = entry {
                self.swap(|s| {
                    s.mutating.insert(name, Arc::new(e));
                });
            }
            c
        } else {
            let (entry, c) = entry_for(set.policies.get(&name), obj);
            if let Some(e) = entry {
                self.swap(|s| {
                    s.policies.insert(name, Arc::new(e));
                });
            }
            c
        }
    }

    /// Installs (or replaces) a binding object; a binding that does not
    /// parse is left out (the API refuses such objects on write).
    pub fn apply_binding(&self, obj: &Value, mutating: bool) {
        let name = meta::name(obj).unwrap_or_default().to_string();
        let result = if mutating {
            MutatingBinding::parse(obj).map(|b| {
                self.swap(|s| {
                    s.mutating_bindings.insert(name.clone(), Arc::new(b));
                })
            })
        } else {
            Binding::parse(obj).map(|b| {
                self.swap(|s| {
                    s.bindings.insert(name.clone(), Arc::new(b));
                })
            })
        };
        if let Err(causes) = result {
            tracing::warn!(binding = %name, error = %causes_text(&causes), "admission policy binding rejected");
            let kind = if mutating {
                Kind::MutatingBinding
            } else {
                Kind::Binding
            };
            self.remove(kind, &name);
        }
    }

    /// Removes one policy or binding.
    pub fn remove(&self, kind: Kind, name: &str) {
        self.retain_where(kind, |n| n != name);
    }

    /// Keeps only the named objects of `kind` (after a relist).
    pub fn retain(&self, kind: Kind, names: &[&str]) {
        self.retain_where(kind, |n| names.contains(&n));
    }

    fn retain_where(&self, kind: Kind, keep: impl Fn(&str) -> bool) {
        self.swap(|s| match kind {
            Kind::Policy => s.policies.retain(|n, _| keep(n)),
            Kind::Binding => s.bindings.retain(|n, _| keep(n)),
            Kind::MutatingPolicy => s.mutating.retain(|n, _| keep(n)),
            Kind::MutatingBinding => s.mutating_bindings.retain(|n, _| keep(n)),
        });
    }

    fn count(&self, policy: &str, binding: &str, action: &'static str, error: &'static str) {
        let mut m = self.metrics.lock().expect("policy metrics lock");
        *m.checks
            .entry((policy.into(), binding.into(), action, error))
            .or_default() += 1;
    }

    fn count_mutating(&self, policy: &str, binding: &str, error: &'static str) {
        let mut m = self.metrics.lock().expect("policy metrics lock");
        *m.mutating_checks
            .entry((policy.into(), binding.into(), error))
            .or_default() += 1;
    }

    /// Adds one evaluation's duration (`mutating`: of a mutating policy).
    fn time(&self, mutating: bool, policy: &str, binding: &str, seconds: f64) {
        let mut m = self.metrics.lock().expect("policy metrics lock");
        let map = if mutating {
            &mut m.mutating_duration
        } else {
            &mut m.duration
        };
        let e = map.entry((policy.into(), binding.into())).or_default();
        e.0 += seconds;
        e.1 += 1;
    }

    /// Prometheus text of upstream's policy metrics.
    pub fn metrics_text(&self) -> String {
        let m = self.metrics.lock().expect("policy metrics lock");
        let mut out = String::new();
        if !m.mutating_checks.is_empty() {
            out.push_str("# HELP apiserver_mutating_admission_policy_check_total Mutation admission policy check total, labeled by policy and further identified by binding.\n# TYPE apiserver_mutating_admission_policy_check_total counter\n");
            for ((p, b, error), n) in &m.mutating_checks {
                out.push_str(&format!(
                    "apiserver_mutating_admission_policy_check_total{{error_type=\"{error}\",policy=\"{p}\",policy_binding=\"{b}\"}} {n}\n"
                ));
            }
            out.push_str("# HELP apiserver_mutating_admission_policy_check_duration_seconds Mutation admission latency for individual mutation expressions in seconds, labeled by policy and binding.\n# TYPE apiserver_mutating_admission_policy_check_duration_seconds summary\n");
            for ((p, b), (sum, count)) in &m.mutating_duration {
                let labels = format!("policy=\"{p}\",policy_binding=\"{b}\"");
                out.push_str(&format!(
                    "apiserver_mutating_admission_policy_check_duration_seconds_sum{{{labels}}} {sum}\napiserver_mutating_admission_policy_check_duration_seconds_count{{{labels}}} {count}\n"
                ));
            }
        }
        if m.checks.is_empty() && m.duration.is_empty() {
            return out;
        }
        out.push_str(
            "# HELP apiserver_validating_admission_policy_check_total Validation admission policy check total, labeled by policy and further identified by binding and enforcement action taken.\n# TYPE apiserver_validating_admission_policy_check_total counter\n",
        );
        for ((p, b, action, error), n) in &m.checks {
            out.push_str(&format!(
                "apiserver_validating_admission_policy_check_total{{enforcement_action=\"{action}\",error_type=\"{error}\",policy=\"{p}\",policy_binding=\"{b}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP apiserver_validating_admission_policy_check_duration_seconds Validation admission latency for individual validation expressions in seconds, labeled by policy and binding.\n# TYPE apiserver_validating_admission_policy_check_duration_seconds summary\n");
        for ((p, b), (sum, count)) in &m.duration {
            let labels = format!("policy=\"{p}\",policy_binding=\"{b}\"");
            out.push_str(&format!(
                "apiserver_validating_admission_policy_check_duration_seconds_sum{{{labels}}} {sum}\napiserver_validating_admission_policy_check_duration_seconds_count{{{labels}}} {count}\n"
            ));
        }
        out
    }
}

/// One matched binding with its policy.
struct Matched {
    entry: Arc<Entry<Policy>>,
    binding: Arc<Binding>,
}

/// What one policy/binding pair decided.
enum Verdict {
    /// Failures to act on (errors already filtered by `failurePolicy`).
    Failures(Vec<Failure>, Vec<(String, String)>),
    Skip,
}

fn deny_error(a: &Attributes<'_>, message: String, reason: &str) -> ApiError {
    if reason == "Invalid" {
        return ApiError::Invalid(
            Target::new(&a.info.group, &a.info.plural, a.name),
            vec![Cause {
                reason: String::new(),
                field: String::new(),
                message,
            }],
        );
    }
    ApiError::Custom {
        code: vap::reason_code(reason),
        reason: reason.to_string(),
        message,
        causes: Vec::new(),
    }
}

/// What admission policies read through the registry. The store
/// implements it (and runs admission, so this module does not name it).
#[async_trait::async_trait]
pub trait Lookup: Send + Sync {
    fn resources(&self) -> &Resources;
    /// One object as the resource's version presents it.
    async fn get(&self, res: &Resource, ns: Option<&str>, name: &str) -> Result<Value, ApiError>;
    async fn list(
        &self,
        res: &Resource,
        ns: Option<&str>,
        p: &ListParams,
    ) -> Result<ListOutcome, ApiError>;
    /// A namespace object.
    async fn namespace(&self, name: &str) -> Option<Value>;
    /// Merges an apply configuration into an object of `info`'s kind, as
    /// server-side apply merges.
    fn merge(&self, info: &ResourceInfo, live: &Value, config: &Value) -> Value;
}

/// Finds the resource of a `paramKind`.
fn param_resource(objects: &dyn Lookup, kind: &vap::ParamKind) -> Option<Arc<Resource>> {
    let (group, version) = kind
        .api_version
        .split_once('/')
        .unwrap_or(("", &kind.api_version));
    objects
        .resources()
        .snapshot()
        .all()
        .find(|r| r.info.group == group && r.info.version == version && r.info.kind == kind.kind)
        .cloned()
}

/// The params a binding selects; `Err` is a configuration error.
async fn params(
    objects: &dyn Lookup,
    policy: &Common,
    binding: &str,
    param_ref: Option<&ParamRef>,
    namespace: Option<&str>,
) -> Result<Option<Vec<Value>>, String> {
    let Some(kind) = &policy.param_kind else {
        return Ok(None);
    };
    let Some(pref) = param_ref else {
        return Err(format!(
            "policy '{}' with binding '{binding}' is misconfigured: paramRef is required when the policy has a paramKind",
            policy.name
        ));
    };
    let res = param_resource(objects, kind).ok_or_else(|| {
        format!(
            "failed to find resource referenced by paramKind: '{}, Kind={}'",
            kind.api_version, kind.kind
        )
    })?;
    let ns = if res.info.namespaced {
        match pref.namespace.as_deref().or(namespace) {
            Some(ns) => Some(ns),
            None => {
                return Err("paramRef.namespace must be set when the param resource is namespaced and the request is cluster-scoped".into());
            }
        }
    } else {
        None
    };
    let found = if let Some(name) = &pref.name {
        match objects.get(&res, ns, name).await {
            Ok(obj) => vec![obj],
            Err(ApiError::NotFound(_)) => Vec::new(),
            Err(e) => return Err(format!("failed to read params: {e}")),
        }
    } else {
        let p = ListParams {
            labels: pref.selector.clone().unwrap_or_default(),
            ..Default::default()
        };
        objects
            .list(&res, ns, &p)
            .await
            .map_err(|e| format!("failed to list params: {e}"))?
            .items
    };
    Ok(Some(found))
}

/// The policy/binding pairs that match a request, and the namespace
/// object when a policy or binding needs it (`None`: nothing matches).
async fn select(
    objects: &dyn Lookup,
    set: &Set,
    a: &Attributes<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> Option<(Vec<Matched>, Option<Value>)> {
    if set.bindings.is_empty() || vap::is_exempt(&a.info.group, &a.info.plural) {
        return None;
    }
    let candidates: Vec<Matched> = set
        .bindings
        .values()
        .filter_map(|b| {
            let entry = set.policies.get(&b.policy_name)?;
            match &**entry {
                Entry::Ready(p) if !p.matcher.mentions_group(&a.info.group) => None,
                _ => Some(Matched {
                    entry: entry.clone(),
                    binding: b.clone(),
                }),
            }
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    // One storage read, only when a policy selects namespaces or reads
    // `namespaceObject`.
    let binding_selects = |b: &Binding| b.matcher.as_ref().is_some_and(|m| m.selects_namespaces());
    let needs_namespace = candidates.iter().any(|m| {
        binding_selects(&m.binding)
            || match &*m.entry {
                Entry::Ready(p) => p.needs_namespace(),
                Entry::Broken { .. } => false,
            }
    });
    let namespace_object = match needs_namespace {
        true => namespace_object(objects, a).await,
        false => None,
    };
    let ns_labels = namespace_object.as_ref().map(meta::labels);
    let match_input = MatchInput {
        attrs: request_attributes(a),
        name: a.name,
        object: obj,
        old_object: old,
        namespace_labels: ns_labels.as_ref(),
    };
    let matched: Vec<Matched> = candidates
        .into_iter()
        .filter(|m| match &*m.entry {
            Entry::Ready(p) => p.matcher.matches(&match_input),
            Entry::Broken { .. } => true,
        })
        .filter(|m| {
            m.binding
                .matcher
                .as_ref()
                .is_none_or(|b| b.matches(&match_input))
        })
        .collect();
    (!matched.is_empty()).then_some((matched, namespace_object))
}

/// Runs the matching admission policies on the object to be stored.
pub async fn validate(
    objects: &dyn Lookup,
    policies: &Policies,
    a: &Attributes<'_>,
    request: impl FnOnce() -> Value,
    obj: Option<&Value>,
    old: Option<&Value>,
    ctx: &WriteOptions,
) -> Result<(), ApiError> {
    let set = policies.snapshot();
    let Some((matched, namespace_object)) = select(objects, &set, a, obj, old).await else {
        return Ok(());
    };
    let request = request();
    let authorizer = policies
        .authorizer
        .get()
        .map(|z| Authorizer::new(z.clone(), &ctx.user.username, &ctx.user.groups));
    let input = Input::new(obj, old, &request, namespace_object.as_ref(), authorizer)
        .map_err(|e| ApiError::Internal(format!("admission policy input: {e}")))?;
    let mut denial: Option<ApiError> = None;
    let mut audit_failures = Vec::new();
    for m in &matched {
        let started = Instant::now();
        let b = &m.binding;
        let (policy_name, verdict) = match &*m.entry {
            Entry::Broken {
                message,
                failure_policy,
                ..
            } => (
                b.policy_name.as_str(),
                on_error(*failure_policy, message.clone()),
            ),
            Entry::Ready(p) => (
                p.name.as_str(),
                run(objects, p, b, &input, a.namespace).await,
            ),
        };
        policies.time(false, policy_name, &b.name, started.elapsed().as_secs_f64());
        let Verdict::Failures(failures, annotations) = verdict else {
            continue;
        };
        ctx.add_audit_annotations(annotations);
        if failures.is_empty() {
            policies.count(policy_name, &b.name, "allow", "no_error");
        }
        for f in failures {
            let error_type = if f.error {
                "expression_error"
            } else {
                "no_error"
            };
            if b.actions.deny {
                policies.count(policy_name, &b.name, "deny", error_type);
                if denial.is_none() {
                    denial = Some(deny_error(
                        a,
                        format!(
                            "ValidatingAdmissionPolicy '{policy_name}' with binding '{}' denied request: {}",
                            b.name, f.message
                        ),
                        &f.reason,
                    ));
                }
            }
            if b.actions.warn {
                policies.count(policy_name, &b.name, "warn", error_type);
                ctx.add_warnings([format!(
                    "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{}': {}",
                    b.name, f.message
                )]);
            }
            if b.actions.audit {
                policies.count(policy_name, &b.name, "audit", error_type);
                audit_failures.push(vap::audit_failure(policy_name, &b.name, &f, &b.actions));
            }
        }
    }
    if !audit_failures.is_empty() {
        ctx.add_audit_annotations([(
            "validation.policy.admission.k8s.io/validation_failure".to_string(),
            Value::Array(audit_failures).to_string(),
        )]);
    }
    match denial {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What the validating policies say of a stored object, for the
/// background audit: each binding that matches a CREATE of it (a
/// synthetic request, `request`) is one finding named by its policy, with
/// the binding as its rule. No failure is a `pass`; a failure is a `fail`
/// when the binding denies or audits, a `warn` when it only warns; an
/// expression error is an `error`; a binding whose params are missing is
/// a `skip`.
pub async fn audit(
    objects: &dyn Lookup,
    policies: &Policies,
    a: &Attributes<'_>,
    request: &Value,
    obj: &Value,
    user: &wasm_apiserver_plugins::UserInfo,
) -> Vec<wasm_apiserver_api::report::Finding> {
    use wasm_apiserver_api::report::{Finding, Outcome};
    let set = policies.snapshot();
    let Some((matched, namespace_object)) = select(objects, &set, a, Some(obj), None).await else {
        return Vec::new();
    };
    let authorizer = policies
        .authorizer
        .get()
        .map(|z| Authorizer::new(z.clone(), &user.username, &user.groups));
    let input = match Input::new(
        Some(obj),
        None,
        request,
        namespace_object.as_ref(),
        authorizer,
    ) {
        Ok(input) => input,
        Err(e) => {
            tracing::warn!(error = %e, "background audit: admission policy input");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for m in &matched {
        let b = &m.binding;
        let (policy_name, verdict) = match &*m.entry {
            Entry::Broken {
                message,
                failure_policy,
                ..
            } => (
                b.policy_name.as_str(),
                on_error(*failure_policy, message.clone()),
            ),
            Entry::Ready(p) => (
                p.name.as_str(),
                run(objects, p, b, &input, a.namespace).await,
            ),
        };
        let (outcome, message) = match verdict {
            Verdict::Skip => (Outcome::Skip, String::new()),
            Verdict::Failures(f, _) if f.is_empty() => (Outcome::Pass, String::new()),
            Verdict::Failures(f, _) => {
                let message = f
                    .iter()
                    .map(|f| f.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ");
                let outcome = if f.iter().any(|f| f.error) {
                    Outcome::Error
                } else if b.actions.deny || b.actions.audit {
                    Outcome::Fail
                } else {
                    Outcome::Warn
                };
                (outcome, message)
            }
        };
        let actions: Vec<&str> = [
            (b.actions.deny, "Deny"),
            (b.actions.warn, "Warn"),
            (b.actions.audit, "Audit"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        out.push(Finding {
            policy: policy_name.to_string(),
            rule: Some(b.name.clone()),
            outcome,
            message,
            severity: None,
            category: Some("ValidatingAdmissionPolicy".into()),
            properties: [("validationActions".to_string(), actions.join(","))].into(),
        });
    }
    out
}

/// The namespace object of a namespaced request.
async fn namespace_object(objects: &dyn Lookup, a: &Attributes<'_>) -> Option<Value> {
    objects
        .namespace(a.namespace.filter(|_| a.info.namespaced)?)
        .await
}

fn request_attributes<'a>(a: &'a Attributes<'_>) -> RequestAttributes<'a> {
    RequestAttributes {
        operation: a.op_str(),
        group: &a.info.group,
        version: &a.info.version,
        resource: &a.info.plural,
        subresource: a.subresource,
        namespaced: a.info.namespaced,
    }
}

/// Runs the matching MutatingAdmissionPolicies on `obj`, in binding-name
/// order; returns whether any changed it.
#[allow(clippy::too_many_arguments)]
pub async fn mutate(
    objects: &dyn Lookup,
    policies: &Policies,
    a: &Attributes<'_>,
    request: impl FnOnce() -> Value,
    obj: &mut Value,
    old: Option<&Value>,
    ctx: &WriteOptions,
) -> Result<bool, ApiError> {
    let set = policies.snapshot();
    if set.mutating_bindings.is_empty() || vap::is_exempt(&a.info.group, &a.info.plural) {
        return Ok(false);
    }
    let candidates: Vec<(Arc<Entry<MutatingPolicy>>, Arc<MutatingBinding>)> = set
        .mutating_bindings
        .values()
        .filter_map(|b| {
            let entry = set.mutating.get(&b.policy_name)?;
            match &**entry {
                Entry::Ready(p) if !p.matcher.mentions_group(&a.info.group) => None,
                _ => Some((entry.clone(), b.clone())),
            }
        })
        .collect();
    if candidates.is_empty() {
        return Ok(false);
    }
    let needs_namespace = candidates.iter().any(|(e, b)| {
        b.matcher.as_ref().is_some_and(|m| m.selects_namespaces())
            || match &**e {
                Entry::Ready(p) => p.needs_namespace(),
                Entry::Broken { .. } => false,
            }
    });
    let namespace_object = match needs_namespace {
        true => namespace_object(objects, a).await,
        false => None,
    };
    let ns_labels = namespace_object.as_ref().map(meta::labels);
    let request = request();
    let authorizer = policies
        .authorizer
        .get()
        .map(|z| Authorizer::new(z.clone(), &ctx.user.username, &ctx.user.groups));
    let info = a.info;
    let merge = |live: &Value, config: &Value| objects.merge(info, live, config);
    let mut changed = false;
    for (entry, b) in candidates {
        let matches = {
            let input = MatchInput {
                attrs: request_attributes(a),
                name: a.name,
                object: Some(&*obj),
                old_object: old,
                namespace_labels: ns_labels.as_ref(),
            };
            match &*entry {
                Entry::Ready(p) => p.matcher.matches(&input),
                Entry::Broken { .. } => true,
            }
        } && b.matcher.as_ref().is_none_or(|m| {
            m.matches(&MatchInput {
                attrs: request_attributes(a),
                name: a.name,
                object: Some(&*obj),
                old_object: old,
                namespace_labels: ns_labels.as_ref(),
            })
        });
        if !matches {
            continue;
        }
        let started = Instant::now();
        let (policy_name, failure_policy) = match &*entry {
            Entry::Ready(p) => (p.name.clone(), p.failure_policy),
            Entry::Broken { failure_policy, .. } => (b.policy_name.clone(), *failure_policy),
        };
        let outcome: Result<bool, String> = match &*entry {
            Entry::Broken { message, .. } => Err(message.clone()),
            Entry::Ready(p) => {
                match params(objects, p, &b.name, b.param_ref.as_ref(), a.namespace).await {
                    Err(e) => Err(e),
                    Ok(Some(list)) if list.is_empty() => {
                        if b.param_ref.as_ref().is_some_and(|r| r.deny_when_missing) {
                            Err("no params found for policy binding with `Deny` parameterNotFoundAction".into())
                        } else {
                            Ok(false)
                        }
                    }
                    Ok(list) => {
                        let list: Vec<Option<&Value>> = match &list {
                            None => vec![None],
                            Some(l) => l.iter().map(Some).collect(),
                        };
                        let mut out = Ok(false);
                        for param in list {
                            let m = MutationInput {
                                old_object: old,
                                request: &request,
                                namespace_object: namespace_object.as_ref(),
                                authorizer: authorizer.clone(),
                                params: param,
                                merge: &merge,
                            };
                            match p.mutate(obj, &m) {
                                Ok(c) => out = out.map(|o| o || c),
                                Err(e) => {
                                    out = Err(e);
                                    break;
                                }
                            }
                        }
                        out
                    }
                }
            }
        };
        policies.time(true, &policy_name, &b.name, started.elapsed().as_secs_f64());
        match outcome {
            Ok(c) => {
                policies.count_mutating(&policy_name, &b.name, "no_error");
                changed |= c;
            }
            Err(e) => {
                policies.count_mutating(&policy_name, &b.name, "expression_error");
                match failure_policy {
                    FailurePolicy::Ignore => {
                        tracing::info!(policy = %policy_name, binding = %b.name, error = %e, "mutating admission policy error ignored (failurePolicy: Ignore)");
                    }
                    FailurePolicy::Fail => {
                        return Err(ApiError::Custom {
                            code: 403,
                            reason: "Forbidden".into(),
                            message: format!(
                                "MutatingAdmissionPolicy '{policy_name}' with binding '{}' denied request: {e}",
                                b.name
                            ),
                            causes: Vec::new(),
                        });
                    }
                }
            }
        }
    }
    Ok(changed)
}

/// An error of a whole policy/binding pair, per `failurePolicy`.
fn on_error(failure_policy: FailurePolicy, message: String) -> Verdict {
    match failure_policy {
        FailurePolicy::Ignore => {
            tracing::info!(error = %message, "admission policy error ignored (failurePolicy: Ignore)");
            Verdict::Skip
        }
        FailurePolicy::Fail => Verdict::Failures(
            vec![Failure {
                message,
                reason: "Forbidden".into(),
                index: usize::MAX,
                error: true,
            }],
            Vec::new(),
        ),
    }
}

async fn run(
    objects: &dyn Lookup,
    p: &Policy,
    b: &Binding,
    input: &Input<'_>,
    namespace: Option<&str>,
) -> Verdict {
    let params = match params(objects, p, &b.name, b.param_ref.as_ref(), namespace).await {
        Ok(params) => params,
        Err(e) => return on_error(p.failure_policy, e),
    };
    let mut evaluations: Vec<Result<Option<Evaluation>, String>> = Vec::new();
    match params {
        None => evaluations.push(p.evaluate(input, None)),
        Some(list) if list.is_empty() => {
            let deny = b.param_ref.as_ref().is_some_and(|r| r.deny_when_missing);
            if !deny {
                return Verdict::Skip;
            }
            return Verdict::Failures(
                vec![Failure {
                    message:
                        "no params found for policy binding with `Deny` parameterNotFoundAction"
                            .into(),
                    reason: "Forbidden".into(),
                    index: usize::MAX,
                    error: false,
                }],
                Vec::new(),
            );
        }
        Some(list) => {
            for param in &list {
                evaluations.push(p.evaluate(input, Some(param)));
            }
        }
    }
    let mut failures = Vec::new();
    let mut annotations = Vec::new();
    for e in evaluations {
        match e {
            Ok(None) => {}
            Ok(Some(ev)) => {
                annotations.extend(ev.audit_annotations);
                failures.extend(
                    ev.failures
                        .into_iter()
                        .filter(|f| !f.error || p.failure_policy == FailurePolicy::Fail),
                );
            }
            Err(e) => {
                if let Verdict::Failures(f, _) = on_error(p.failure_policy, e) {
                    failures.extend(f);
                }
            }
        }
    }
    Verdict::Failures(failures, annotations)
}

impl Policies {
    /// What changes when a validating policy or binding is added, changed
    /// or removed (the background audit's cue for a full pass).
    pub fn fingerprint(&self) -> String {
        let set = self.snapshot();
        let mut out = String::new();
        for (name, e) in &set.policies {
            out.push_str(&format!("p:{name}:{};", e.generation()));
        }
        for (name, b) in &set.bindings {
            out.push_str(&format!("b:{name}:{:p};", Arc::as_ptr(b)));
        }
        out
    }

    /// Whether a validating policy with a binding may match resources of
    /// `group` (a cheap filter; matching decides).
    pub fn may_match_group(&self, group: &str) -> bool {
        let set = self.snapshot();
        set.bindings.values().any(|b| {
            set.policies
                .get(&b.policy_name)
                .is_some_and(|e| match &**e {
                    Entry::Ready(p) => p.matcher.mentions_group(group),
                    Entry::Broken { .. } => false,
                })
        })
    }

    /// The compiled validating policy of that name, if it compiles.
    pub fn validating(&self, name: &str) -> Option<Arc<Policy>> {
        match &**self.snapshot().policies.get(name)? {
            Entry::Ready(p) => Some(p.clone()),
            Entry::Broken { .. } => None,
        }
    }
}

/// The status of a policy object: `observedGeneration`, `typeChecking`
/// (upstream's expression warnings) and, when it cannot run, a condition
/// saying why.
pub fn policy_status(c: &Compiled, warnings: &[(String, String)], current: &Value) -> Value {
    let type_checking = if warnings.is_empty() {
        json!({})
    } else {
        json!({"expressionWarnings": warnings
            .iter()
            .map(|(f, w)| json!({"fieldRef": f, "warning": w}))
            .collect::<Vec<_>>()})
    };
    let mut status = json!({"observedGeneration": c.generation, "typeChecking": type_checking});
    // The background audit's condition stays.
    let audited: Vec<Value> = current["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter(|c| c["type"] == "Audited")
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let mut conditions = Vec::new();
    if let Some(e) = &c.error {
        let compiled = current["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Compiled"))
            .cloned()
            .unwrap_or_default();
        let since = compiled["lastTransitionTime"]
            .as_str()
            .filter(|_| compiled["message"] == json!(e))
            .map(String::from)
            .unwrap_or_else(|| meta::timestamp(chrono::Utc::now()));
        conditions.push(json!({
            "type": "Compiled",
            "status": "False",
            "reason": "CompilationFailed",
            "message": e,
            "observedGeneration": c.generation,
            "lastTransitionTime": since,
        }));
    }
    conditions.extend(audited);
    if !conditions.is_empty() {
        status["conditions"] = json!(conditions);
    }
    status
}
