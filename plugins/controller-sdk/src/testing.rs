//! Native test harness: a reconcile runs against fixture objects, and the
//! writes it makes are recorded (and applied to the fixtures, so a second
//! reconcile sees the first one's outcome).
//!
//! ```ignore
//! testing::set_cluster(vec![json!({"apiVersion": "v1", "kind": "Namespace", ...})]);
//! let action = testing::reconcile::<MyController>("{}", testing::key("", "v1", "namespaces", None, "a"))?;
//! assert_eq!(testing::writes()[0].verb, "apply");
//! ```

use crate::{Action, Controller, Error, Request, Value};
use std::cell::RefCell;

/// One write a reconcile made.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// `apply`, `create`, `update`, `patch`, `delete` or `event`.
    pub verb: &'static str,
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// The object written (the event's reason and note for `event`).
    pub object: Value,
}

thread_local! {
    static OBJECTS: RefCell<Vec<Value>> = const { RefCell::new(Vec::new()) };
    static WRITES: RefCell<Vec<Write>> = const { RefCell::new(Vec::new()) };
}

/// Replaces the fixture objects and forgets recorded writes.
pub fn set_cluster(objects: Vec<Value>) {
    OBJECTS.with(|o| *o.borrow_mut() = objects);
    WRITES.with(|w| w.borrow_mut().clear());
}

/// The fixture objects now (after the writes so far).
pub fn objects() -> Vec<Value> {
    OBJECTS.with(|o| o.borrow().clone())
}

/// The writes recorded since [`set_cluster`] (or [`take_writes`]).
pub fn writes() -> Vec<Write> {
    WRITES.with(|w| w.borrow().clone())
}

/// The writes recorded so far, forgetting them.
pub fn take_writes() -> Vec<Write> {
    WRITES.with(|w| std::mem::take(&mut *w.borrow_mut()))
}

/// The object of the last recorded write of `kind` (panics when none:
/// for tests).
pub fn find_write(kind: &str) -> Value {
    writes()
        .into_iter()
        .rev()
        .find(|w| w.kind == kind)
        .map(|w| w.object)
        .unwrap_or_else(|| panic!("no write of a {kind}"))
}

/// A reconcile request for a key.
pub fn key(
    group: &str,
    version: &str,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) -> Request {
    Request {
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
        namespace: namespace.map(String::from),
        name: name.into(),
        reason: "changed",
        retries: 0,
    }
}

/// Runs `C`'s reconcile natively with `config` (JSON text).
pub fn reconcile<C: Controller>(config: &str, request: &Request) -> Result<Action, String> {
    crate::reconcile_with::<C>(config, request)
}

fn same(o: &Value, api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> bool {
    o["apiVersion"] == api_version
        && o["kind"] == kind
        && o["metadata"]["namespace"].as_str() == ns
        && o["metadata"]["name"] == name
}

pub(crate) fn find(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> Option<Value> {
    OBJECTS.with(|o| {
        o.borrow()
            .iter()
            .find(|o| same(o, api_version, kind, ns, name))
            .cloned()
    })
}

/// The fixture's kind for a resource: the plural of a kind is its lower
/// case plus `s` (enough for fixtures; `…y` → `…ies`).
fn plural(kind: &str) -> String {
    let k = kind.to_lowercase();
    match k.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None if k.ends_with('s') => format!("{k}es"),
        None => format!("{k}s"),
    }
}

pub(crate) fn get_resource(
    group: &str,
    version: &str,
    resource: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    OBJECTS.with(|o| {
        o.borrow()
            .iter()
            .find(|o| {
                o["apiVersion"] == api_version.as_str()
                    && plural(o["kind"].as_str().unwrap_or_default()) == resource
                    && o["metadata"]["namespace"].as_str() == ns
                    && o["metadata"]["name"] == name
            })
            .cloned()
    })
}

/// `key=value` terms of a selector (what fixtures support).
fn matches(obj: &Value, selector: Option<&str>) -> bool {
    selector
        .unwrap_or_default()
        .split(',')
        .filter(|t| !t.is_empty())
        .all(|term| match term.split_once('=') {
            Some((k, v)) => obj["metadata"]["labels"][k.trim()] == v.trim(),
            None => obj["metadata"]["labels"].get(term.trim()).is_some(),
        })
}

pub(crate) fn select(
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    selector: Option<&str>,
) -> Vec<Value> {
    OBJECTS.with(|o| {
        o.borrow()
            .iter()
            .filter(|o| {
                o["apiVersion"] == api_version
                    && o["kind"] == kind
                    && (ns.is_none() || o["metadata"]["namespace"].as_str() == ns)
                    && matches(o, selector)
            })
            .cloned()
            .collect()
    })
}

fn record(verb: &'static str, api_version: &str, kind: &str, object: &Value) {
    let w = Write {
        verb,
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: object["metadata"]["namespace"].as_str().map(String::from),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .into(),
        object: object.clone(),
    };
    WRITES.with(|ws| ws.borrow_mut().push(w));
}

/// Records a write and applies it to the fixtures (an apply merges into
/// the existing object).
pub(crate) fn write(
    verb: &'static str,
    api_version: &str,
    kind: &str,
    object: Value,
) -> Result<Value, Error> {
    record(verb, api_version, kind, &object);
    let ns = object["metadata"]["namespace"].as_str().map(String::from);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    OBJECTS.with(|o| {
        let mut objects = o.borrow_mut();
        let existing = objects
            .iter_mut()
            .find(|o| same(o, api_version, kind, ns.as_deref(), &name));
        match (verb, existing) {
            ("create", Some(_)) => Err(Error {
                code: 409,
                reason: "AlreadyExists".into(),
                message: format!("{kind} {name:?} already exists"),
            }),
            ("update", None) => Err(Error {
                code: 404,
                reason: "NotFound".into(),
                message: format!("{kind} {name:?} not found"),
            }),
            ("apply", Some(cur)) => {
                merge_into(cur, &object);
                Ok(cur.clone())
            }
            (_, Some(cur)) => {
                *cur = object.clone();
                Ok(object)
            }
            (_, None) => {
                objects.push(object.clone());
                Ok(object)
            }
        }
    })
}

fn merge_into(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_into(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

pub(crate) fn merge(
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
    patch: &Value,
) -> Result<Value, Error> {
    let mut cur = find(api_version, kind, ns, name).ok_or_else(|| Error {
        code: 404,
        reason: "NotFound".into(),
        message: format!("{kind} {name:?} not found"),
    })?;
    merge_into(&mut cur, patch);
    write("patch", api_version, kind, cur)
}

pub(crate) fn remove(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> bool {
    let gone = OBJECTS.with(|o| {
        let mut objects = o.borrow_mut();
        let before = objects.len();
        objects.retain(|o| !same(o, api_version, kind, ns, name));
        before != objects.len()
    });
    if gone {
        record(
            "delete",
            api_version,
            kind,
            &serde_json::json!({"metadata": {"namespace": ns, "name": name}}),
        );
    }
    gone
}

pub(crate) fn record_event(regarding: &Value, warning: bool, reason: &str, note: &str) {
    let w = Write {
        verb: "event",
        api_version: regarding["apiVersion"].as_str().unwrap_or_default().into(),
        kind: regarding["kind"].as_str().unwrap_or_default().into(),
        namespace: regarding["metadata"]["namespace"]
            .as_str()
            .map(String::from),
        name: regarding["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .into(),
        object: serde_json::json!({"warning": warning, "reason": reason, "note": note}),
    };
    WRITES.with(|ws| ws.borrow_mut().push(w));
}
