//! The `authorizer` variable of admission-policy expressions (upstream's
//! authz library, `k8s.io/apiserver/pkg/cel/library/authz.go`):
//!
//! ```cel
//! authorizer.group('apps').resource('deployments').namespace('ns').name('x').check('delete').allowed()
//! authorizer.path('/healthz').check('get').reason()
//! authorizer.serviceAccount('ns', 'sa').group('').resource('secrets').check('list').allowed()
//! ```
//!
//! A check asks the server's authorizers through [`Authorize`], as the
//! request's user (or the named service account), synchronously: the
//! expression gets a [`Decision`] with `allowed()`, `reason()`,
//! `errored()` and `error()`.

use crate::rbac::{Attributes, Decision as RbacDecision};
use cel::common::types::{CelBool, CelString};
use cel::{DeclarationError, Env, ExecutionError};
use std::sync::Arc;

/// What answers an expression's authorization checks.
pub trait Authorize: Send + Sync {
    fn authorize(&self, attrs: &Attributes) -> RbacDecision;
}

/// Which step of a check chain a value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Authorizer,
    Path,
    Group,
    Resource,
}

/// `authorizer` and the checks built from it (`PathCheck`, `GroupCheck`,
/// `ResourceCheck` upstream).
#[derive(Clone)]
pub struct Authorizer {
    authorize: Arc<dyn Authorize>,
    user: String,
    groups: Vec<String>,
    step: Step,
    path: String,
    group: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("user", &self.user)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Authorizer {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.authorize, &o.authorize)
            && (
                &self.user,
                self.step,
                &self.path,
                &self.group,
                &self.resource,
            ) == (&o.user, o.step, &o.path, &o.group, &o.resource)
            && (&self.subresource, &self.namespace, &self.name)
                == (&o.subresource, &o.namespace, &o.name)
    }
}

opaque!(Authorizer, "kubernetes.authorization.Authorizer");

/// The answer of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    allowed: bool,
    reason: String,
}

opaque!(Decision, "kubernetes.authorization.Decision");

impl Authorizer {
    /// The `authorizer` of a request made by `user` in `groups`.
    pub fn new(authorize: Arc<dyn Authorize>, user: &str, groups: &[String]) -> Self {
        Authorizer {
            authorize,
            user: user.to_string(),
            groups: groups.to_vec(),
            step: Step::Authorizer,
            path: String::new(),
            group: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
        }
    }

    fn next(&self, from: &[Step], to: Step, function: &str) -> Result<Self, ExecutionError> {
        if !from.contains(&self.step) {
            return Err(ExecutionError::function_error(
                function,
                format!("{function}() does not apply to a {:?} check", self.step),
            ));
        }
        let mut out = self.clone();
        out.step = to;
        Ok(out)
    }
}

pub(crate) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_member_overload!(env, fn path: (Authorizer, CelString) -> Result<Authorizer>)?;
    cel::add_member_overload!(env, fn group: (Authorizer, CelString) -> Result<Authorizer>)?;
    cel::add_member_overload!(env, fn service_account: (Authorizer, CelString, CelString) -> Result<Authorizer>)?;
    cel::add_member_overload!(env, fn resource: (Authorizer, CelString) -> Result<Authorizer>)?;
    cel::add_member_overload!(env, fn subresource: (Authorizer, CelString) -> Result<Authorizer>)?;
    cel::add_member_overload!(env, fn namespace: (Authorizer, CelString) -> Result<Authorizer>)?;
    cel::add_member_overload!(env, fn name: (Authorizer, CelString) -> Result<Authorizer>)?;
    cel::add_member_overload!(env, fn check: (Authorizer, CelString) -> Result<Decision>)?;
    cel::add_member_overload!(env, fn allowed: (Decision) -> CelBool)?;
    cel::add_member_overload!(env, fn reason: (Decision) -> CelString)?;
    cel::add_member_overload!(env, fn errored: (Decision) -> CelBool)?;
    cel::add_member_overload!(env, fn error: (Decision) -> CelString)?;
    Ok(())
}

fn path(a: &Authorizer, p: &CelString<'_>) -> Result<Authorizer, ExecutionError> {
    let mut out = a.next(&[Step::Authorizer], Step::Path, "path")?;
    out.path = p.inner().to_string();
    Ok(out)
}

fn group(a: &Authorizer, g: &CelString<'_>) -> Result<Authorizer, ExecutionError> {
    let mut out = a.next(&[Step::Authorizer], Step::Group, "group")?;
    out.group = g.inner().to_string();
    Ok(out)
}

fn service_account(
    a: &Authorizer,
    ns: &CelString<'_>,
    name: &CelString<'_>,
) -> Result<Authorizer, ExecutionError> {
    let mut out = a.next(&[Step::Authorizer], Step::Authorizer, "serviceAccount")?;
    let (ns, name) = (ns.inner(), name.inner());
    out.user = format!("system:serviceaccount:{ns}:{name}");
    out.groups = vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{ns}"),
        "system:authenticated".into(),
    ];
    Ok(out)
}

fn resource(a: &Authorizer, r: &CelString<'_>) -> Result<Authorizer, ExecutionError> {
    let mut out = a.next(&[Step::Group], Step::Resource, "resource")?;
    out.resource = r.inner().to_string();
    Ok(out)
}

fn subresource(a: &Authorizer, s: &CelString<'_>) -> Result<Authorizer, ExecutionError> {
    let mut out = a.next(&[Step::Resource], Step::Resource, "subresource")?;
    out.subresource = s.inner().to_string();
    Ok(out)
}

fn namespace(a: &Authorizer, s: &CelString<'_>) -> Result<Authorizer, ExecutionError> {
    let mut out = a.next(&[Step::Resource], Step::Resource, "namespace")?;
    out.namespace = s.inner().to_string();
    Ok(out)
}

fn name(a: &Authorizer, s: &CelString<'_>) -> Result<Authorizer, ExecutionError> {
    let mut out = a.next(&[Step::Resource], Step::Resource, "name")?;
    out.name = s.inner().to_string();
    Ok(out)
}

fn check(a: &Authorizer, verb: &CelString<'_>) -> Result<Decision, ExecutionError> {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let attrs = match a.step {
        Step::Path => Attributes {
            user: a.user.clone(),
            groups: a.groups.clone(),
            verb: verb.inner().to_string(),
            path: a.path.clone(),
            ..Default::default()
        },
        Step::Resource => Attributes {
            user: a.user.clone(),
            groups: a.groups.clone(),
            verb: verb.inner().to_string(),
            api_group: a.group.clone(),
            resource: a.resource.clone(),
            subresource: opt(&a.subresource),
            namespace: opt(&a.namespace),
            name: opt(&a.name),
            is_resource_request: true,
            ..Default::default()
        },
        _ => {
            return Err(ExecutionError::function_error(
                "check",
                "check() needs a path() or a group().resource() check",
            ));
        }
    };
    Ok(match a.authorize.authorize(&attrs) {
        RbacDecision::Allow(reason) => Decision {
            allowed: true,
            reason,
        },
        RbacDecision::NoOpinion(reason) => Decision {
            allowed: false,
            reason,
        },
    })
}

fn allowed(d: &Decision) -> CelBool {
    d.allowed.into()
}

fn reason(d: &Decision) -> CelString<'static> {
    d.reason.clone().into()
}

fn errored(_: &Decision) -> CelBool {
    false.into()
}

fn error(_: &Decision) -> CelString<'static> {
    String::new().into()
}
