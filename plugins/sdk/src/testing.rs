//! Running a policy natively (no wasm), for `cargo test`.
//!
//! ```ignore
//! #[test]
//! fn cases() {
//!     wasm_apiserver_plugin_sdk::testing::run_cases::<MyPolicy>("cases.yaml").unwrap();
//! }
//! ```
//!
//! The case table is the format of `wasm-apiserver plugin test --cases`
//! (the same file tests the native build here and the component there):
//!
//! ```yaml
//! config: '{"labels": ["team"]}'
//! cases:
//! - name: a labelled configmap is allowed
//!   object: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, labels: {team: x}}}
//!   expect: allow            # or deny
//!   patch: []                # the mutating phase's JSON Patch ([] for none)
//!   warnings: []             # optional
//!   message: team            # optional: a substring of the denial message
//!   # also: operation (CREATE), oldObject, namespace, resource, request (an AdmissionReview file)
//! ```
//!
//! A context-aware policy's [`crate::cluster`] calls answer from fixtures on
//! the test's thread: [`set_cluster`] (the objects `get` and `list` find),
//! [`set_can_i`] (what `can_i` answers) and [`set_grants`] (which kinds the
//! plugin may read, as `spec.contextAwareResources`; others fail with the
//! host's error).
//!
//! Scheduler plugins run on their own case table: [`run_scheduler_cases`]
//! (the format is in [`scheduler`]), or one
//! cycle at a time with [`cycle`].

pub mod scheduler;

pub use scheduler::{Cycle, cycle, default_pod, run_scheduler_cases};

use std::cell::RefCell;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::admission::AdmissionRequest;
use crate::cluster::ResourceAttributes;
use crate::log::Level;
use crate::policy::{Policy, configure};
use crate::{GroupVersionKind, GroupVersionResource, Operation, Response, UserInfo};

/// One log record a policy emitted: level, message, fields.
pub type LogRecord = (Level, String, Vec<(String, String)>);

thread_local! {
    static LOGS: RefCell<Vec<LogRecord>> = const { RefCell::new(Vec::new()) };
}

pub(crate) fn record_log(level: Level, message: &str, fields: Vec<(String, String)>) {
    LOGS.with(|l| l.borrow_mut().push((level, message.to_owned(), fields)));
}

thread_local! {
    static CLUSTER: RefCell<Vec<Value>> = const { RefCell::new(Vec::new()) };
}

/// The objects [`crate::cluster`] reads answer from on this thread
/// (`get` by namespace and name, `list` by namespace and label selector).
pub fn set_cluster(objects: Vec<Value>) {
    CLUSTER.with(|c| *c.borrow_mut() = objects);
}

/// Whether a user may do something: [`set_can_i`]'s answer.
type CanI = Box<dyn Fn(&UserInfo, &ResourceAttributes) -> bool>;

thread_local! {
    static GRANTS: RefCell<Option<Vec<(String, String)>>> = const { RefCell::new(None) };
    static CAN_I: RefCell<Option<CanI>> = const { RefCell::new(None) };
}

/// Restricts [`crate::cluster`] reads on this thread to these
/// `(apiVersion, kind)` pairs, as `spec.contextAwareResources` does on the
/// server: any other kind answers the host's "not granted" error, and
/// [`crate::cluster::can_i`] needs
/// `("authorization.k8s.io/v1", "SubjectAccessReview")`. Until it is
/// called every kind is readable.
pub fn set_grants(grants: &[(&str, &str)]) {
    let grants = grants
        .iter()
        .map(|(a, k)| ((*a).to_owned(), (*k).to_owned()))
        .collect();
    GRANTS.with(|g| *g.borrow_mut() = Some(grants));
}

/// Answers [`crate::cluster::can_i`] on this thread with `answer` (until it
/// is called, every review answers `false`, as an authorizer with no rule
/// would):
///
/// ```ignore
/// testing::set_can_i(|user, a| user.username == "alice" && a.verb == "get");
/// ```
pub fn set_can_i(answer: impl Fn(&UserInfo, &ResourceAttributes) -> bool + 'static) {
    CAN_I.with(|c| *c.borrow_mut() = Some(Box::new(answer)));
}

/// `Ok` when [`set_grants`] lets the plugin read `kind`, else the host's
/// error.
pub(crate) fn granted(api_version: &str, kind: &str) -> Result<(), String> {
    GRANTS.with(|g| match &*g.borrow() {
        Some(grants) if !grants.iter().any(|(a, k)| a == api_version && k == kind) => Err(format!(
            "reading {api_version} {kind} is not granted: it is not in the plugin's spec.contextAwareResources"
        )),
        _ => Ok(()),
    })
}

pub(crate) fn can_i(user: &UserInfo, attributes: &ResourceAttributes) -> Result<bool, String> {
    granted("authorization.k8s.io/v1", "SubjectAccessReview")?;
    Ok(CAN_I.with(|c| c.borrow().as_ref().is_some_and(|f| f(user, attributes))))
}

/// Whether `obj` matches a field selector (`spec.rules.host=a,kind!=b`), as
/// the server matches plugins' reads: any field path, a list on the way
/// matching when one of its items does, a missing field reading as "".
pub(crate) fn field_selector_matches(selector: &str, obj: &Value) -> Result<bool, String> {
    fn values(v: &Value, path: &[&str], out: &mut Vec<String>) {
        match (v, path.split_first()) {
            (Value::Array(items), _) => items.iter().for_each(|i| values(i, path, out)),
            (Value::Object(m), Some((seg, rest))) => {
                if let Some(next) = m.get(*seg) {
                    values(next, rest, out);
                }
            }
            (Value::String(s), None) => out.push(s.clone()),
            (Value::Number(_) | Value::Bool(_), None) => out.push(v.to_string()),
            _ => {}
        }
    }
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (path, value, negate) = match term.split_once("!=") {
            Some((p, v)) => (p, v, true),
            None => match term.split_once("==").or_else(|| term.split_once('=')) {
                Some((p, v)) => (p, v, false),
                None => {
                    return Err(format!(
                        "invalid selector: '{selector}'; can't understand '{term}'"
                    ));
                }
            },
        };
        let path: Vec<&str> = path.trim().split('.').collect();
        if path.iter().any(|s| s.is_empty()) {
            return Err(format!(
                "invalid selector: '{selector}'; '{term}' names no field path"
            ));
        }
        let mut found = Vec::new();
        values(obj, &path, &mut found);
        let value = value.trim();
        let hit = if found.is_empty() {
            value.is_empty()
        } else {
            found.iter().any(|f| f == value)
        };
        if hit == negate {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether `labels` (an object's `metadata.labels`) match a label selector
/// (`app=web,tier in (a,b),!legacy`), as the server matches them.
pub(crate) fn selector_matches(selector: &str, labels: &Value) -> Result<bool, String> {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let bad = || format!("invalid label selector {selector:?}");
    // Split on the commas outside parentheses.
    let (mut terms, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    for term in terms.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        let ok = if let Some(key) = term.strip_prefix('!') {
            label(key.trim()).is_none()
        } else if let Some((key, value)) = term.split_once("!=") {
            label(key.trim()) != Some(value.trim())
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            label(key.trim()) == Some(value.trim())
        } else if let Some((key, rest)) = term.split_once(char::is_whitespace) {
            let rest = rest.trim_start();
            let (negated, set) = match rest.strip_prefix("notin") {
                Some(set) => (true, set),
                None => (false, rest.strip_prefix("in").ok_or_else(bad)?),
            };
            let set = set
                .trim()
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(bad)?;
            let within = label(key).is_some_and(|v| set.split(',').any(|s| s.trim() == v));
            within != negated
        } else {
            label(term).is_some()
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The fixture objects of `kind` in `api_version` (and `namespace`).
pub(crate) fn fixtures(api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
    CLUSTER.with(|c| {
        c.borrow()
            .iter()
            .filter(|o| o["apiVersion"] == api_version && o["kind"] == kind)
            .filter(|o| namespace.is_none_or(|ns| o["metadata"]["namespace"] == ns))
            .cloned()
            .collect()
    })
}

/// The log records this thread's policy calls emitted, drained.
pub fn logs() -> Vec<LogRecord> {
    LOGS.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn opt_text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn gvk(v: &Value) -> GroupVersionKind {
    GroupVersionKind {
        group: text(v, "group"),
        version: text(v, "version"),
        kind: text(v, "kind"),
    }
}

fn gvr(v: &Value) -> GroupVersionResource {
    GroupVersionResource {
        group: text(v, "group"),
        version: text(v, "version"),
        resource: text(v, "resource"),
    }
}

fn json_text(v: Option<&Value>) -> Option<String> {
    v.filter(|v| !v.is_null()).map(Value::to_string)
}

/// The request of an `admission.k8s.io/v1` AdmissionReview (or of its
/// bare `request`), as the host would pass it: what a webhook captured
/// from a real cluster replays here.
pub fn request_from_review(review: &Value) -> Result<AdmissionRequest, String> {
    let r = review.get("request").unwrap_or(review);
    let operation = match r
        .get("operation")
        .and_then(Value::as_str)
        .unwrap_or("CREATE")
    {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        "DELETE" => Operation::Delete,
        "CONNECT" => Operation::Connect,
        other => return Err(format!("unknown operation {other:?}")),
    };
    let user = r
        .get("userInfo")
        .cloned()
        .unwrap_or(json!({"username": "plugin-test"}));
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let extra = user
        .get("extra")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), strings(Some(v))))
                .collect()
        })
        .unwrap_or_default();
    let kind = r.get("kind").ok_or("the request has no kind")?;
    Ok(AdmissionRequest {
        uid: opt_text(r, "uid").unwrap_or_else(|| "00000000-0000-0000-0000-000000000000".into()),
        kind: gvk(kind),
        resource: gvr(r.get("resource").unwrap_or(&Value::Null)),
        sub_resource: opt_text(r, "subResource"),
        request_kind: r.get("requestKind").map(gvk),
        request_resource: r.get("requestResource").map(gvr),
        request_sub_resource: opt_text(r, "requestSubResource"),
        name: opt_text(r, "name"),
        namespace: opt_text(r, "namespace"),
        operation,
        user_info: UserInfo {
            username: text(&user, "username"),
            uid: text(&user, "uid"),
            groups: strings(user.get("groups")),
            extra,
        },
        dry_run: r.get("dryRun").and_then(Value::as_bool).unwrap_or(false),
        object: json_text(r.get("object")),
        old_object: json_text(r.get("oldObject")),
        options: json_text(r.get("options")),
    })
}

/// An AdmissionReview for `object` (or `old_object` on a delete), with
/// the kind and resource derived from its `apiVersion` and `kind` (the
/// resource is the kind lower-cased plus `s` unless given).
pub fn review(
    operation: &str,
    object: Option<&Value>,
    old_object: Option<&Value>,
    resource: Option<&str>,
) -> Value {
    let subject = object.or(old_object).cloned().unwrap_or(Value::Null);
    let api_version = subject
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = subject
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let resource =
        resource.map_or_else(|| format!("{}s", kind.to_ascii_lowercase()), str::to_owned);
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000000",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "name": subject.pointer("/metadata/name"),
            "namespace": subject.pointer("/metadata/namespace"),
            "operation": operation,
            "userInfo": {"username": "plugin-test"},
            "object": object,
            "oldObject": old_object,
        }
    })
}

/// A policy with a checked configuration, called as the server calls it.
pub struct Harness<P: Policy> {
    config: String,
    _policy: std::marker::PhantomData<P>,
}

/// The outcome of both phases: the validating answer (carrying the
/// mutating phase's warnings and annotations too) and the mutating patch.
#[derive(Debug)]
pub struct Admission {
    pub response: Response,
    pub patch: Value,
}

impl<P: Policy> Harness<P> {
    /// Checks `config` as `check-config` does.
    pub fn new(config: &str) -> Result<Self, String> {
        configure::<P>(config)?;
        Ok(Self {
            config: config.to_owned(),
            _policy: std::marker::PhantomData,
        })
    }

    /// The validating phase on an AdmissionReview.
    pub fn validate(&self, review: &Value) -> Result<Response, String> {
        let req = request_from_review(review)?;
        Ok(crate::policy::run::<P>(&self.config, req, P::validate))
    }

    /// The mutating phase on an AdmissionReview.
    pub fn mutate(&self, review: &Value) -> Result<Response, String> {
        let req = request_from_review(review)?;
        Ok(crate::policy::run::<P>(&self.config, req, P::mutate))
    }

    /// Both phases as the server chains them: `mutate`, its patch applied
    /// to the object, then `validate` on the result.
    pub fn admit(&self, review: &Value) -> Result<Admission, String> {
        let mutated = self.mutate(review)?;
        let patch = Value::Array(mutated.patch_ops().ops().to_vec());
        if !mutated.is_allowed() {
            return Ok(Admission {
                response: mutated,
                patch,
            });
        }
        let mut next = review.clone();
        let request = match next.get("request") {
            Some(_) => next.get_mut("request").expect("present"),
            None => &mut next,
        };
        if let Some(obj) = request.get_mut("object").filter(|o| !o.is_null()) {
            let ops: json_patch::Patch =
                serde_json::from_value(patch.clone()).map_err(|e| format!("bad patch: {e}"))?;
            json_patch::patch(obj, &ops).map_err(|e| format!("the patch does not apply: {e}"))?;
        }
        let mut response = self.validate(&next)?;
        response.absorb_notes(&mutated);
        Ok(Admission { response, patch })
    }
}

/// One case of a table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    request: Option<PathBuf>,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default, rename = "oldObject")]
    old_object: Option<Value>,
    #[serde(default)]
    operation: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    resource: Option<String>,
    /// Who makes the request (`{username, groups}`; default `plugin-test`).
    #[serde(default, rename = "userInfo")]
    user_info: Option<Value>,
    expect: Expect,
    #[serde(default)]
    patch: Option<Value>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum Expect {
    Allow,
    Deny,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    config: Option<String>,
    cases: Vec<Case>,
}

/// Runs every case of a YAML table (the `plugin test --cases` format)
/// natively; prints `PASS`/`FAIL` per case and fails naming each case
/// that differs.
pub fn run_cases<P: Policy>(table: impl AsRef<Path>) -> Result<(), String> {
    let path = table.as_ref();
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let table: Table =
        serde_yaml::from_slice(&read(path)?).map_err(|e| format!("{}: {e}", path.display()))?;
    let harness = Harness::<P>::new(table.config.as_deref().unwrap_or(""))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut failures = String::new();
    for case in &table.cases {
        let mut review = match &case.request {
            Some(p) => serde_json::from_slice(&read(&base.join(p))?)
                .map_err(|e| format!("case {:?}: {e}", case.name))?,
            None => review(
                case.operation.as_deref().unwrap_or("CREATE"),
                case.object.as_ref(),
                case.old_object.as_ref(),
                case.resource.as_deref(),
            ),
        };
        if let (Some(ns), Some(r)) = (&case.namespace, review.get_mut("request")) {
            r["namespace"] = json!(ns);
        }
        if let (Some(user), Some(r)) = (&case.user_info, review.get_mut("request")) {
            r["userInfo"] = user.clone();
        }
        let got = harness.admit(&review)?;
        let mut problems = Vec::new();
        let outcome = if got.response.is_allowed() {
            Expect::Allow
        } else {
            Expect::Deny
        };
        if outcome != case.expect {
            problems.push(format!(
                "expected {:?}, got {outcome:?} ({:?})",
                case.expect,
                got.response.message()
            ));
        }
        if let Some(want) = case.patch.as_ref().filter(|w| **w != got.patch) {
            problems.push(format!("expected patch {want}, got {}", got.patch));
        }
        if let Some(want) = case
            .warnings
            .as_ref()
            .filter(|w| **w != got.response.warnings())
        {
            problems.push(format!(
                "expected warnings {want:?}, got {:?}",
                got.response.warnings()
            ));
        }
        if let Some(want) = case
            .message
            .as_ref()
            .filter(|w| !got.response.message().contains(w.as_str()))
        {
            problems.push(format!(
                "expected a message containing {want:?}, got {:?}",
                got.response.message()
            ));
        }
        if problems.is_empty() {
            println!("PASS {}", case.name);
        } else {
            println!("FAIL {}: {}", case.name, problems.join("; "));
            let _ = writeln!(failures, "{}: {}", case.name, problems.join("; "));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: failed cases:\n{failures}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;

    #[test]
    fn a_review_round_trips_into_the_request_record() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"}});
        let mut rv = review("UPDATE", Some(&obj), Some(&obj), None);
        rv["request"]["userInfo"] = json!({"username": "alice", "groups": ["dev"],
            "extra": {"scopes": ["a", "b"]}});
        rv["request"]["dryRun"] = json!(true);
        let r = request_from_review(&rv).unwrap();
        assert_eq!(
            (r.kind.group.as_str(), r.kind.kind.as_str()),
            ("apps", "Deployment")
        );
        assert_eq!(r.resource.resource, "deployments");
        assert_eq!(
            (r.name.as_deref(), r.namespace.as_deref()),
            (Some("web"), Some("prod"))
        );
        assert!(matches!(r.operation, Operation::Update) && r.dry_run);
        assert_eq!(r.user_info.groups, ["dev"]);
        assert_eq!(
            r.user_info.extra,
            [("scopes".to_owned(), vec!["a".to_owned(), "b".to_owned()])]
        );
        let req = Request::new(r).unwrap();
        assert_eq!(req.name(), "web");
        assert!(req.old_object().is_some());
        assert!(
            request_from_review(&json!({"request": {"kind": {}, "operation": "PATCH"}})).is_err()
        );
    }

    #[test]
    fn a_case_names_who_asks() {
        struct OnlyAlice;
        impl Policy for OnlyAlice {
            type Config = ();
            fn validate(_: &(), req: &Request) -> crate::Response {
                if req.user().username == "alice" {
                    crate::Response::allow()
                } else {
                    crate::Response::deny(format!("not {}", req.user().username))
                }
            }
        }
        let dir = std::env::temp_dir().join(format!("sdk-user-cases-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let table = dir.join("cases.yaml");
        let obj = "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}";
        std::fs::write(
            &table,
            format!(
                "cases:\n\
                 - {{name: alice, object: {obj}, userInfo: {{username: alice}}, expect: allow}}\n\
                 - {{name: default, object: {obj}, expect: deny, message: not plugin-test}}\n"
            ),
        )
        .unwrap();
        let result = run_cases::<OnlyAlice>(&table);
        let _ = std::fs::remove_dir_all(&dir);
        result.unwrap();
    }

    #[test]
    fn the_object_reads_as_a_typed_value() {
        #[derive(serde::Deserialize)]
        struct Deployment {
            spec: Spec,
        }
        #[derive(serde::Deserialize)]
        struct Spec {
            replicas: i32,
        }
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 7}});
        let req =
            Request::new(request_from_review(&review("CREATE", Some(&obj), None, None)).unwrap())
                .unwrap();
        let d: Deployment = req.object_as().unwrap().unwrap();
        assert_eq!(d.spec.replicas, 7);
        let bad = json!({"kind": "Deployment", "spec": {"replicas": "seven"}});
        let req =
            Request::new(request_from_review(&review("CREATE", Some(&bad), None, None)).unwrap())
                .unwrap();
        let e = req.object_as::<Deployment>().err().unwrap();
        assert!(
            e.starts_with("object is not a Deployment: invalid type"),
            "{e}"
        );
    }

    #[test]
    fn bad_object_json_is_a_400_denial_not_a_panic() {
        struct P;
        impl Policy for P {
            type Config = ();
        }
        let mut req = request_from_review(&review("CREATE", Some(&json!({})), None, None)).unwrap();
        req.object = Some("{not json".into());
        let r = crate::policy::run::<P>("", req, P::validate);
        assert_eq!(r.status().map(|s| s.code), Some(400));
        let req = request_from_review(&review("CREATE", Some(&json!({})), None, None)).unwrap();
        let r = crate::policy::run::<P>("{\"x\": 1}", req, P::validate);
        assert_eq!(r.status().map(|s| s.code), Some(500), "{r:?}");
    }
}
