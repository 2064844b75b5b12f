//! The `flunders` resource: request attributes (as upstream's
//! `RequestInfoFactory` derives them), the in-memory store with its watch
//! history, the REST handlers and `Table` output.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::Method;
use http::header::CONTENT_TYPE;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::status::{Body, Status, accepts, json, respond, to_json_line};

pub const GROUP: &str = "wardle.example.com";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "wardle.example.com/v1alpha1";
pub const RESOURCE: &str = "flunders";
/// Watch events kept for watches from a resourceVersion.
const HISTORY: usize = 1000;
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// What a request asks for, in authorization's terms.
pub struct RequestInfo {
    /// Kubernetes' verb for resources, the lower-case method otherwise.
    pub verb: String,
    pub path: String,
    /// Set for paths under `/apis/wardle.example.com/v1alpha1/`.
    pub resource: Option<ResourceRef>,
    query: HashMap<String, String>,
}

pub struct ResourceRef {
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl RequestInfo {
    pub fn new(method: &Method, path: &str, query: Option<&str>) -> Self {
        let query: HashMap<String, String> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .into_owned()
            .collect();
        let rest = path.strip_prefix("/apis/wardle.example.com/v1alpha1/");
        let resource = rest.filter(|r| !r.is_empty()).map(|rest| {
            let mut segs: Vec<&str> = rest.split('/').collect();
            let mut namespace = None;
            if segs.len() >= 3 && segs[0] == "namespaces" {
                namespace = Some(segs[1].to_owned());
                segs.drain(..2);
            }
            let seg = |i: usize| segs.get(i).map(|s| s.to_string());
            ResourceRef {
                namespace,
                resource: segs[0].to_owned(),
                name: seg(1),
                subresource: seg(2),
            }
        });
        // Go's strconv.ParseBool, as upstream parses `watch`.
        let watch = matches!(
            query.get("watch").map(String::as_str),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True")
        );
        let method = method.as_str().to_ascii_lowercase();
        let verb = match (&resource, method.as_str()) {
            (None, _) => method,
            (Some(_), "get" | "head") if watch => "watch".into(),
            (Some(r), "get" | "head") => if r.name.is_some() { "get" } else { "list" }.into(),
            (Some(_), "post") => "create".into(),
            (Some(_), "put") => "update".into(),
            (Some(r), "delete") if r.name.is_none() => "deletecollection".into(),
            (Some(_), _) => method,
        };
        Self {
            verb,
            path: path.into(),
            resource,
            query,
        }
    }

    fn param(&self, key: &str) -> Option<&str> {
        self.query
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// A requirement on a label (`k=v`, `k==v`, `k!=v`, `k`, `!k`) or a field
/// (`metadata.name`, `metadata.namespace`): value `None` asks for existence.
struct Requirement {
    label: bool,
    key: String,
    value: Option<String>,
    equal: bool,
}

/// Which objects a list or watch selects.
struct Filter(Vec<Requirement>);

fn requirement(label: bool, term: &str) -> Requirement {
    let (key, value, equal) = match term.split_once("!=") {
        Some((k, v)) => (k, Some(v), false),
        None => match term.split_once("==").or_else(|| term.split_once('=')) {
            Some((k, v)) => (k, Some(v), true),
            None => term
                .strip_prefix('!')
                .map_or((term, None, true), |k| (k, None, false)),
        },
    };
    let (key, value) = (key.trim().to_owned(), value.map(|v| v.trim().to_owned()));
    Requirement {
        label,
        key,
        value,
        equal,
    }
}

impl Filter {
    fn new(info: &RequestInfo, r: &ResourceRef) -> Result<Self, Status> {
        let terms = |p| {
            info.param(p)
                .unwrap_or("")
                .split(',')
                .filter(|t| !t.is_empty())
        };
        let mut reqs: Vec<Requirement> = terms("labelSelector")
            .map(|t| requirement(true, t))
            .collect();
        if let Some(bad) = reqs
            .iter()
            .find(|r| r.key.is_empty() || r.key.contains([' ', '(', ')']))
        {
            let message = format!(
                "unable to parse requirement {:?}: only =, ==, != and existence",
                bad.key
            );
            return Err(Status::bad_request(message));
        }
        for mut req in terms("fieldSelector").map(|t| requirement(false, t)) {
            match req.key.strip_prefix("metadata.") {
                Some(key @ ("name" | "namespace")) if req.value.is_some() => req.key = key.into(),
                _ => {
                    return Err(Status::bad_request(format!(
                        "field label not supported: {}",
                        req.key
                    )));
                }
            }
            reqs.push(req);
        }
        for (key, value) in [("namespace", &r.namespace), ("name", &r.name)] {
            let (key, value) = (key.into(), value.clone());
            if value.is_some() {
                reqs.push(Requirement {
                    label: false,
                    key,
                    value,
                    equal: true,
                });
            }
        }
        Ok(Self(reqs))
    }

    fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|req| {
            let meta = &obj["metadata"];
            let actual = if req.label {
                &meta["labels"][&req.key]
            } else {
                &meta[&req.key]
            }
            .as_str();
            match &req.value {
                Some(want) => (actual == Some(want.as_str())) == req.equal,
                None => actual.is_some() == req.equal,
            }
        })
    }
}

/// A change, as watchers see it.
#[derive(Clone)]
struct Event {
    kind: &'static str,
    rv: u64,
    object: Value,
}

#[derive(Serialize)]
struct WatchEvent<'a, T> {
    r#type: &'a str,
    object: &'a T,
}

#[derive(Default)]
struct Inner {
    /// The last resourceVersion handed out.
    rv: u64,
    objects: BTreeMap<(String, String), Value>,
    history: VecDeque<Event>,
    /// The resourceVersion of the newest event dropped from `history`.
    compacted: u64,
}

/// Flunders in memory; every change takes the next resourceVersion.
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Event>,
}

impl Default for Store {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            events: broadcast::channel(1024).0,
        }
    }
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj["metadata"][key].as_str().unwrap_or("")
}

/// Fills in kind and apiVersion, refusing other types and bodies without
/// metadata.
fn check_type(obj: &mut Value) -> Result<(), Status> {
    let (kind, api_version) = (obj["kind"].as_str(), obj["apiVersion"].as_str());
    let (kind, api_version) = (
        kind.unwrap_or("Flunder"),
        api_version.unwrap_or(API_VERSION),
    );
    if (kind, api_version) != ("Flunder", API_VERSION) {
        let message =
            format!("the body is a {api_version}, Kind={kind}, not a {API_VERSION}, Kind=Flunder");
        return Err(Status::bad_request(message));
    }
    let o = obj
        .as_object_mut()
        .ok_or_else(|| Status::bad_request("the body is not a JSON object"))?;
    o.insert("kind".into(), "Flunder".into());
    o.insert("apiVersion".into(), API_VERSION.into());
    o.entry("metadata").or_insert_with(|| json!({}));
    Ok(())
}

impl Store {
    /// Stamps `obj` with the next resourceVersion, records and sends the event.
    fn commit(&self, inner: &mut Inner, kind: &'static str, obj: &mut Value) {
        inner.rv += 1;
        obj["metadata"]["resourceVersion"] = inner.rv.to_string().into();
        let event = Event {
            kind,
            rv: inner.rv,
            object: obj.clone(),
        };
        inner.history.push_back(event.clone());
        if inner.history.len() > HISTORY {
            inner.compacted = inner.history.pop_front().map_or(0, |e| e.rv);
        }
        let _ = self.events.send(event);
    }

    fn create(&self, ns: &str, mut obj: Value) -> Result<Value, Status> {
        check_type(&mut obj)?;
        let name = meta_str(&obj, "name").to_owned();
        let given = meta_str(&obj, "namespace");
        if !given.is_empty() && given != ns {
            let message = "the namespace of the provided object does not match the namespace sent on the request";
            return Err(Status::bad_request(message));
        }
        if name.is_empty() {
            return Err(Status::invalid(
                "",
                "metadata.name",
                "Required value: name is required",
            ));
        }
        let meta = &mut obj["metadata"];
        meta["namespace"] = ns.into();
        meta["uid"] = uuid::Uuid::new_v4().to_string().into();
        meta["creationTimestamp"] = chrono::Utc::now()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
            .into();
        let mut inner = self.inner.lock().unwrap();
        let key = (ns.to_owned(), name.clone());
        if inner.objects.contains_key(&key) {
            return Err(Status::already_exists(&name));
        }
        self.commit(&mut inner, "ADDED", &mut obj);
        inner.objects.insert(key, obj.clone());
        Ok(obj)
    }

    fn get(&self, ns: &str, name: &str) -> Result<Value, Status> {
        let inner = self.inner.lock().unwrap();
        inner
            .objects
            .get(&(ns.into(), name.into()))
            .cloned()
            .ok_or_else(|| Status::not_found(name))
    }

    /// Replaces a flunder with what `change` makes of it. With `update`
    /// (a PUT) the new object must carry the resourceVersion it replaces.
    fn modify(
        &self,
        ns: &str,
        name: &str,
        update: bool,
        change: impl FnOnce(Value) -> Result<Value, Status>,
    ) -> Result<Value, Status> {
        let mut inner = self.inner.lock().unwrap();
        let key = (ns.to_owned(), name.to_owned());
        let old = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| Status::not_found(name))?;
        let mut new = change(old.clone())?;
        check_type(&mut new)?;
        if meta_str(&new, "name") != name {
            let message = format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&new, "name")
            );
            return Err(Status::bad_request(message));
        }
        match meta_str(&new, "resourceVersion") {
            "" if update => {
                let problem = "Invalid value: 0x0: must be specified for an update";
                return Err(Status::invalid(name, "metadata.resourceVersion", problem));
            }
            "" => {}
            rv if rv != meta_str(&old, "resourceVersion") => return Err(Status::conflict(name)),
            _ => {}
        }
        for key in ["namespace", "uid", "creationTimestamp", "resourceVersion"] {
            new["metadata"][key] = old["metadata"][key].clone();
        }
        if new != old {
            self.commit(&mut inner, "MODIFIED", &mut new);
            inner.objects.insert(key, new.clone());
        }
        Ok(new)
    }

    fn delete(&self, ns: &str, name: &str) -> Result<Value, Status> {
        let mut inner = self.inner.lock().unwrap();
        let removed = inner.objects.remove(&(ns.into(), name.into()));
        let mut obj = removed.ok_or_else(|| Status::not_found(name))?;
        self.commit(&mut inner, "DELETED", &mut obj);
        Ok(obj)
    }

    /// At most `limit` selected flunders in (namespace, name) order after
    /// the key `after`, and the list's metadata.
    fn list(
        &self,
        filter: &Filter,
        limit: usize,
        after: Option<(String, String)>,
    ) -> (Vec<Value>, Value) {
        let inner = self.inner.lock().unwrap();
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut selected = inner
            .objects
            .range((start, Bound::Unbounded))
            .map(|(_, o)| o);
        let mut items: Vec<Value> = selected
            .by_ref()
            .filter(|o| filter.matches(o))
            .take(limit)
            .cloned()
            .collect();
        let mut list_meta = json!({"resourceVersion": inner.rv.to_string()});
        if let Some(last) = items.last().filter(|_| selected.any(|o| filter.matches(o))) {
            let key = format!("{}/{}", meta_str(last, "namespace"), meta_str(last, "name"));
            list_meta["continue"] = BASE64.encode(key).into();
        }
        // Typed lists carry no kind and apiVersion on their items.
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            item.remove("kind");
            item.remove("apiVersion");
        }
        (items, list_meta)
    }
}

/// kubectl's short age: `42s`, `5m`, `3h`, `2d`, `1y`.
fn age(obj: &Value) -> String {
    let Ok(created) = chrono::DateTime::parse_from_rfc3339(meta_str(obj, "creationTimestamp"))
    else {
        return "<unknown>".into();
    };
    match (chrono::Utc::now() - created.to_utc()).num_seconds().max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s if s < 2 * 365 * 86400 => format!("{}d", s / 86400),
        s => format!("{}y", s / (365 * 86400)),
    }
}

/// A `meta.k8s.io/v1` `Table` of `objects`; `include` is `includeObject`.
fn table(objects: &[Value], metadata: Value, include: &str) -> Value {
    let row = |o: &Value| {
        let mut row = json!({"cells": [meta_str(o, "name"), age(o)]});
        match include {
            "None" => {}
            "Object" => row["object"] = o.clone(),
            _ => {
                let partial =
                    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"});
                row["object"] = partial;
                row["object"]["metadata"] = o["metadata"].clone();
            }
        }
        row
    };
    let name = "Name must be unique within a namespace.";
    let age = "CreationTimestamp is a timestamp representing the server time when this object was created.";
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": name, "priority": 0},
            {"name": "Age", "type": "date", "format": "", "description": age, "priority": 0},
        ],
        "rows": objects.iter().map(row).collect::<Vec<_>>(),
    })
}

/// Answers an authorized request: flunders here, documents in [`crate::docs`].
pub async fn serve(store: &Store, req: Request<Incoming>, info: &RequestInfo) -> Response<Body> {
    let Some(r) = &info.resource else {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return Status::method_not_allowed().into();
        }
        return crate::docs::serve(&info.path, req.headers())
            .unwrap_or_else(|| Status::no_route().into());
    };
    if r.resource != RESOURCE || r.subresource.is_some() {
        return Status::no_route().into();
    }
    let include = accepts(req.headers(), &["as=Table", "v=v1", "g=meta.k8s.io"])
        .then(|| info.param("includeObject").unwrap_or("Metadata").to_owned());
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return Status::bad_request("reading the request body failed").into();
    };
    let parse = || {
        serde_json::from_slice::<Value>(&body)
            .map_err(|e| Status::bad_request(format!("bad JSON: {e}")))
    };
    let result = match (
        info.verb.as_str(),
        r.namespace.as_deref(),
        r.name.as_deref(),
    ) {
        ("watch", _, _) => return watch(store, info, r, include),
        ("list", _, None) => return list(store, info, r, include),
        ("get", Some(ns), Some(name)) => store.get(ns, name).map(|o| (200, o)),
        ("create", Some(ns), None) => parse().and_then(|o| store.create(ns, o)).map(|o| (201, o)),
        ("update", Some(ns), Some(name)) => parse()
            .and_then(|o| store.modify(ns, name, true, |_| Ok(o)))
            .map(|o| (200, o)),
        ("patch", Some(ns), Some(name)) => {
            let patch = |old| apply_patch(&content_type, old, &body);
            store.modify(ns, name, false, patch).map(|o| (200, o))
        }
        ("delete", Some(ns), Some(name)) => match store.delete(ns, name) {
            Ok(o) => return Status::deleted(name, meta_str(&o, "uid")).into(),
            Err(e) => Err(e),
        },
        (_, None, Some(_)) => Err(Status::no_route()),
        _ => Err(Status::method_not_allowed()),
    };
    match (result, include) {
        (Ok((code, obj)), Some(include)) => respond(
            code,
            TABLE,
            to_json_line(&table(&[obj], json!({}), &include)),
        ),
        (Ok((code, obj)), None) => json(code, &obj),
        (Err(status), _) => status.into(),
    }
}

/// JSON patch, or merge patch (also for strategic merge patch: a flunder
/// has no lists with a patch strategy).
fn apply_patch(content_type: &str, mut old: Value, body: &[u8]) -> Result<Value, Status> {
    let bad = |e: serde_json::Error| Status::bad_request(format!("bad patch: {e}"));
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            json_patch::merge(&mut old, &serde_json::from_slice(body).map_err(bad)?)
        }
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_slice(body).map_err(bad)?;
            json_patch::patch(&mut old, &ops)
                .map_err(|e| Status::failure(422, "Invalid", e.to_string()))?;
        }
        _ => {
            let message = "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json";
            return Err(Status::failure(415, "UnsupportedMediaType", message));
        }
    }
    Ok(old)
}

fn list(
    store: &Store,
    info: &RequestInfo,
    r: &ResourceRef,
    include: Option<String>,
) -> Response<Body> {
    let filter = match Filter::new(info, r) {
        Ok(f) => f,
        Err(status) => return status.into(),
    };
    let limit = info
        .param("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let after = match info.param("continue") {
        None => None,
        Some(token) => {
            let key = BASE64
                .decode(token)
                .ok()
                .and_then(|k| String::from_utf8(k).ok());
            match key.as_deref().and_then(|k| k.split_once('/')) {
                Some((ns, name)) => Some((ns.to_owned(), name.to_owned())),
                None => return Status::bad_request("the continue token is not valid").into(),
            }
        }
    };
    let (items, metadata) = store.list(&filter, limit, after);
    match include {
        Some(include) => respond(200, TABLE, to_json_line(&table(&items, metadata, &include))),
        None => {
            let list = json!({"kind": "FlunderList", "apiVersion": API_VERSION, "metadata": metadata, "items": items});
            json(200, &list)
        }
    }
}

/// One watch event line; with `include` (a Table was asked for) its object
/// is a one-row Table.
fn render(e: &Event, include: Option<&str>) -> Bytes {
    let object = match include {
        Some(include) => table(
            std::slice::from_ref(&e.object),
            json!({"resourceVersion": e.rv.to_string()}),
            include,
        ),
        None => e.object.clone(),
    };
    Bytes::from(to_json_line(&WatchEvent {
        r#type: e.kind,
        object: &object,
    }))
}

/// A chunked stream of watch events, one JSON object per line. Without a
/// resourceVersion (or with "0") it starts with ADDED for what exists; with
/// one it replays the history after it (410 Expired as an ERROR event when
/// that is gone). It ends after `timeoutSeconds`; no periodic bookmarks.
fn watch(
    store: &Store,
    info: &RequestInfo,
    r: &ResourceRef,
    include: Option<String>,
) -> Response<Body> {
    let filter = match Filter::new(info, r) {
        Ok(f) => f,
        Err(status) => return status.into(),
    };
    let Ok(since) = info.param("resourceVersion").unwrap_or("0").parse::<u64>() else {
        return Status::bad_request("resourceVersion: Invalid value: not a number").into();
    };
    let timeout = info
        .param("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .unwrap_or(1800);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let (initial, rx) = {
        let inner = store.inner.lock().unwrap();
        if since != 0 && since < inner.compacted {
            let message = format!(
                "too old resource version: {since} ({})",
                inner.compacted + 1
            );
            let status = Status::failure(410, "Expired", message);
            return json(
                200,
                &WatchEvent {
                    r#type: "ERROR",
                    object: &status,
                },
            );
        }
        // A streaming list (`sendInitialEvents=true`) starts from the current
        // state and marks the end of it with a bookmark.
        let streaming_list = info.param("sendInitialEvents") == Some("true");
        let mut initial: VecDeque<Bytes> = if since == 0 || streaming_list {
            let current = inner.objects.values().filter(|o| filter.matches(o));
            let added = current.map(|o| Event {
                kind: "ADDED",
                rv: inner.rv,
                object: o.clone(),
            });
            added.map(|e| render(&e, include.as_deref())).collect()
        } else {
            let replay = inner
                .history
                .iter()
                .filter(|e| e.rv > since && filter.matches(&e.object));
            replay.map(|e| render(e, include.as_deref())).collect()
        };
        if streaming_list {
            let end = json!({"kind": "Flunder", "apiVersion": API_VERSION, "metadata": {
                "resourceVersion": inner.rv.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"},
            }});
            initial.push_back(Bytes::from(to_json_line(&WatchEvent {
                r#type: "BOOKMARK",
                object: &end,
            })));
        }
        (initial, store.events.subscribe())
    };
    let state = (initial, rx, filter, include);
    let events = futures::stream::unfold(
        state,
        move |(mut initial, mut rx, filter, include)| async move {
            let line = match initial.pop_front() {
                Some(line) => line,
                None => loop {
                    let event = tokio::select! {
                        event = rx.recv() => event.ok()?,
                        _ = tokio::time::sleep_until(deadline) => return None,
                    };
                    if filter.matches(&event.object) {
                        break render(&event, include.as_deref());
                    }
                },
            };
            Some((Ok(Frame::data(line)), (initial, rx, filter, include)))
        },
    );
    let mut response = Response::new(StreamBody::new(events).boxed());
    response.headers_mut().insert(
        CONTENT_TYPE,
        "application/json".parse().expect("a valid Content-Type"),
    );
    response
}
