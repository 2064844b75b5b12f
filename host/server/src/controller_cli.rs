//! `wasm-apiserver plugin test` for controllers: a reconcile run offline,
//! in the server's plugin runtime with the server's limits, against
//! fixture objects (`--cluster`), printing the writes it makes and judging
//! them against a case table.
//!
//! The fixtures stand in for the cluster: reads answer from them, and
//! writes are recorded and applied to them (a create adds, an update
//! replaces, an apply or a merge patch merges the configuration into the
//! object, a delete removes), so a case sees what a live cluster would,
//! short of admission and defaulting. `can_i` (a SubjectAccessReview) is
//! decided by the server's own RBAC evaluation over the fixtures' Roles,
//! ClusterRoles and bindings, on top of the default ones every server has:
//! with none in the fixtures, a user who is not in `system:masters` may
//! do nothing beyond discovery.

use serde::Deserialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use wasm_apiserver_api::controller::KindRef;
use wasm_apiserver_api::rbac::{self, Attributes, RbacSnapshot};
use wasm_apiserver_plugins::writes::{DeleteOptions, PatchKind, WriteAccess, WriteError, Writes};
use wasm_apiserver_plugins::{
    Cluster, ClusterAccess, ControllerPlugin, Gvr, ListQuery, Listed, Outcome, ReconcileReason,
    ReconcileRequest, Runtime, Target,
};

/// One write a reconcile made.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Write {
    pub verb: String,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

impl std::fmt::Display for Write {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}{}",
            self.verb,
            self.kind.as_deref().unwrap_or("?"),
            self.namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            self.name.as_deref().unwrap_or("?")
        )
    }
}

/// The fixtures: the objects, and the writes made so far.
#[derive(Default)]
struct Fixtures {
    objects: Mutex<Vec<Value>>,
    writes: Mutex<Vec<Write>>,
}

fn same(o: &Value, api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> bool {
    o["apiVersion"] == api_version
        && o["kind"] == kind
        && o["metadata"]["namespace"].as_str() == ns
        && o["metadata"]["name"] == name
}

/// `(apiVersion, kind)` of a target.
fn kind_of(target: &Target) -> Result<(String, String), WriteError> {
    match target {
        Target::Kind { api_version, kind } => Ok((api_version.clone(), kind.clone())),
        Target::Resource {
            group,
            version,
            resource,
        } => {
            let kind = builtin_kind(group, version, resource).ok_or_else(|| {
                WriteError::new(404, "NotFound", format!("no resource {resource:?}"))
            })?;
            let api_version = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            Ok((api_version, kind))
        }
    }
}

fn builtin_kind(group: &str, version: &str, resource: &str) -> Option<String> {
    wasm_apiserver_api::resource::Registry::builtin()
        .get(group, version, resource)
        .map(|r| r.kind.clone())
}

/// The plural resource of a kind (a built-in's, else lower case + `s`).
fn plural(k: &KindRef) -> String {
    let (group, version) = k.group_version();
    wasm_apiserver_api::resource::Registry::builtin()
        .all()
        .find(|r| r.group == group && r.version == version && r.kind == k.kind)
        .map(|r| r.plural.clone())
        .unwrap_or_else(|| format!("{}s", k.kind.to_lowercase()))
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

fn not_found(kind: &str, name: &str) -> WriteError {
    WriteError::new(404, "NotFound", format!("{kind} {name:?} not found"))
}

impl Fixtures {
    fn record(&self, verb: &str, kind: &str, ns: Option<&str>, name: &str) {
        self.writes.lock().expect("writes").push(Write {
            verb: verb.into(),
            kind: Some(kind.into()),
            namespace: ns.map(String::from),
            name: Some(name.into()),
        });
    }

    /// Writes `object` as `verb`: `create` adds (409 when present),
    /// `update` replaces (404 when absent), `apply` merges or adds.
    fn write(
        &self,
        verb: &str,
        target: &Target,
        ns: Option<&str>,
        mut object: Value,
    ) -> Result<Value, WriteError> {
        let (api_version, kind) = kind_of(target)?;
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(kind);
        if let Some(ns) = ns {
            object["metadata"]["namespace"] = json!(ns);
        }
        let ns = object["metadata"]["namespace"].as_str().map(String::from);
        let name = object["metadata"]["name"]
            .as_str()
            .ok_or_else(|| WriteError::new(400, "BadRequest", "metadata.name is required"))?
            .to_owned();
        self.record(verb, &kind, ns.as_deref(), &name);
        let mut objects = self.objects.lock().expect("objects");
        let existing = objects
            .iter_mut()
            .find(|o| same(o, &api_version, &kind, ns.as_deref(), &name));
        match (verb, existing) {
            ("create", Some(_)) => Err(WriteError::new(
                409,
                "AlreadyExists",
                format!("{kind} {name:?} already exists"),
            )),
            ("update", None) => Err(not_found(&kind, &name)),
            ("apply", Some(cur)) => {
                merge_into(cur, &object);
                Ok(cur.clone())
            }
            (_, Some(cur)) => {
                *cur = object.clone();
                Ok(object)
            }
            (_, None) => {
                if object["metadata"]["uid"].is_null() {
                    object["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
                }
                objects.push(object.clone());
                Ok(object)
            }
        }
    }
}

#[async_trait::async_trait]
impl Cluster for Fixtures {
    fn kind_of(&self, group: &str, version: &str, resource: &str) -> Option<String> {
        builtin_kind(group, version, resource)
    }

    async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, String> {
        let objects = self.objects.lock().expect("objects");
        Ok(objects
            .iter()
            .find(|o| same(o, api_version, kind, namespace, name))
            .cloned())
    }

    async fn list(&self, q: &ListQuery<'_>, _max_bytes: usize) -> Result<Listed, String> {
        let selector = wasm_apiserver_api::selector::LabelSelector::parse(
            q.label_selector.unwrap_or_default(),
        )?;
        // Any field path, as the server answers plugins' reads.
        let fields = wasm_apiserver_api::selector::FieldSelector::parse_any(
            q.field_selector.unwrap_or_default(),
        )?;
        let objects = self.objects.lock().expect("objects");
        let items: Vec<Value> = objects
            .iter()
            .filter(|o| {
                o["apiVersion"] == q.api_version
                    && o["kind"] == q.kind
                    && (q.namespace.is_none() || o["metadata"]["namespace"].as_str() == q.namespace)
                    && selector.matches_object(o)
                    && fields.matches(o)
            })
            .cloned()
            .collect();
        let bytes = serde_json::to_vec(&items).map_or(0, |b| b.len());
        Ok(Listed {
            list: json!({"apiVersion": q.api_version, "kind": format!("{}List", q.kind),
                "metadata": {"resourceVersion": "1"}, "items": items}),
            bytes,
        })
    }

    /// The server's RBAC decision (`--authorization-mode=RBAC`, its
    /// default) over the fixtures' Roles, ClusterRoles and bindings.
    async fn can_i(&self, spec: &Value) -> Result<Value, String> {
        let attrs = Attributes::from_subject_access_review(spec);
        Ok(rbac::authorize(&self.rbac(), &attrs).review_status())
    }
}

impl Fixtures {
    /// The RBAC a server holding the fixtures would evaluate: the default
    /// roles and bindings every server starts with (`cluster-admin`,
    /// `admin`, `edit`, `view`, discovery, ...), the fixtures' RBAC objects
    /// added to them (one with a default's kind and name replaces it).
    /// Without any, nothing is allowed but what the defaults allow (group
    /// `system:masters` everything; other users discovery and reviews of
    /// themselves), as upstream: RBAC allows only what a rule allows.
    fn rbac(&self) -> RbacSnapshot {
        static DEFAULTS: OnceLock<Vec<Value>> = OnceLock::new();
        let defaults = DEFAULTS.get_or_init(rbac::bootstrap_policy);
        let objects = self.objects.lock().expect("objects");
        let fixtures: Vec<&Value> = objects
            .iter()
            .filter(|o| {
                o["apiVersion"] == rbac::API_VERSION
                    && matches!(
                        o["kind"].as_str(),
                        Some("Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding")
                    )
            })
            .collect();
        let replaced = |d: &Value| {
            fixtures.iter().any(|f| {
                f["kind"] == d["kind"]
                    && f["metadata"]["namespace"] == d["metadata"]["namespace"]
                    && f["metadata"]["name"] == d["metadata"]["name"]
            })
        };
        let all: Vec<Value> = defaults
            .iter()
            .filter(|d| !replaced(d))
            .chain(fixtures.iter().copied())
            .cloned()
            .collect();
        RbacSnapshot::from_objects(&all)
    }
}

/// The fixtures as the controller's writes.
struct FixtureWrites(Arc<Fixtures>);

#[async_trait::async_trait]
impl Writes for FixtureWrites {
    async fn create(
        &self,
        target: &Target,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, WriteError> {
        self.0.write("create", target, namespace, object)
    }

    async fn update(
        &self,
        target: &Target,
        object: Value,
        _sub: Option<&str>,
    ) -> Result<Value, WriteError> {
        self.0.write("update", target, None, object)
    }

    async fn patch(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: Value,
        _sub: Option<&str>,
    ) -> Result<Value, WriteError> {
        let (api_version, k) = kind_of(target)?;
        let cur = Cluster::get(&*self.0, &api_version, &k, namespace, name)
            .await
            .map_err(|m| WriteError::new(500, "InternalError", m))?
            .ok_or_else(|| not_found(&k, name))?;
        let patched = match kind {
            PatchKind::Json => wasm_apiserver_api::patch::apply_json_patch(&cur, &patch),
            PatchKind::Merge => wasm_apiserver_api::patch::apply_merge_patch(&cur, &patch),
            PatchKind::Strategic => {
                wasm_apiserver_api::patch::apply_strategic_merge_patch(&k, &cur, &patch)
            }
        }
        .map_err(|e| WriteError::new(422, "Invalid", format!("{e:?}")))?;
        self.0.record("patch", &k, namespace, name);
        let mut objects = self.0.objects.lock().expect("objects");
        if let Some(o) = objects
            .iter_mut()
            .find(|o| same(o, &api_version, &k, namespace, name))
        {
            *o = patched.clone();
        }
        Ok(patched)
    }

    async fn apply(
        &self,
        target: &Target,
        configuration: Value,
        _force: bool,
        _sub: Option<&str>,
    ) -> Result<Value, WriteError> {
        self.0.write("apply", target, None, configuration)
    }

    async fn delete(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        _o: &DeleteOptions,
    ) -> Result<(), WriteError> {
        let (api_version, kind) = kind_of(target)?;
        let mut objects = self.0.objects.lock().expect("objects");
        let before = objects.len();
        objects.retain(|o| !same(o, &api_version, &kind, namespace, name));
        if objects.len() == before {
            return Err(not_found(&kind, name));
        }
        drop(objects);
        self.0.record("delete", &kind, namespace, name);
        Ok(())
    }

    async fn event(&self, regarding: &Value, _warning: bool, reason: &str, _note: &str) {
        self.0.record(
            "event",
            reason,
            regarding["metadata"]["namespace"].as_str(),
            regarding["metadata"]["name"].as_str().unwrap_or_default(),
        );
    }
}

/// Cluster reads over fixture objects, every kind readable: what `plugin
/// test` gives an admission plugin of package 0.3.0.
pub fn fixture_access(objects: Vec<Value>) -> ClusterAccess {
    ClusterAccess {
        reads: Arc::new(Fixtures {
            objects: Mutex::new(objects),
            writes: Default::default(),
        }),
        grants: Vec::new(),
        all_kinds: true,
        max_calls: wasm_apiserver_api::admission::DEFAULT_CLUSTER_READS,
        max_bytes: wasm_apiserver_api::admission::DEFAULT_CLUSTER_READ_BYTES,
    }
}

/// Objects from a YAML or JSON file: one document, several documents, or
/// a `List`.
pub fn read_objects(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        flatten(v, &mut out);
    }
    Ok(out)
}

fn flatten(v: Value, out: &mut Vec<Value>) {
    match v {
        Value::Null => {}
        Value::Array(items) => items.into_iter().for_each(|i| flatten(i, out)),
        v if v["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
            if let Some(items) = v["items"].as_array() {
                items.iter().cloned().for_each(|i| flatten(i, out));
            }
        }
        v => out.push(v),
    }
}

/// What a reconcile did.
pub struct Run {
    pub outcome: Result<Outcome, String>,
    pub writes: Vec<Write>,
}

/// Loads a controller over `objects` and reconciles `key`
/// (`[<namespace>/]<name>`) of `for_kind`.
pub async fn reconcile(
    runtime: &Runtime,
    component: &Path,
    config: &str,
    for_kind: &KindRef,
    objects: Vec<Value>,
    key: &str,
) -> anyhow::Result<Run> {
    let wasm = std::fs::read(component)?;
    let name = component
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "controller".into());
    let fixtures = Arc::new(Fixtures {
        objects: Mutex::new(objects),
        writes: Default::default(),
    });
    let cluster = ClusterAccess {
        reads: fixtures.clone(),
        grants: Vec::new(),
        all_kinds: true,
        max_calls: wasm_apiserver_api::controller::DEFAULT_READS,
        max_bytes: wasm_apiserver_api::admission::DEFAULT_CLUSTER_READ_BYTES,
    };
    let writes = WriteAccess {
        writes: Arc::new(FixtureWrites(fixtures.clone())),
        max_writes: wasm_apiserver_api::controller::DEFAULT_WRITES,
    };
    let limits = wasm_apiserver_plugins::Limits {
        timeout: std::time::Duration::from_millis(
            wasm_apiserver_api::controller::DEFAULT_TIMEOUT_MILLIS,
        ),
        ..Default::default()
    };
    let plugin: ControllerPlugin = runtime
        .load_controller(&name, &wasm, config, limits, cluster, writes)
        .await?;
    let (group, version) = for_kind.group_version();
    let (namespace, object) = match key.split_once('/') {
        Some((ns, n)) => (Some(ns.to_owned()), n.to_owned()),
        None => (None, key.to_owned()),
    };
    let request = ReconcileRequest {
        uid: "plugin-test".into(),
        resource: Gvr {
            group: group.into(),
            version: version.into(),
            resource: plural(for_kind),
        },
        namespace,
        name: object,
        reason: ReconcileReason::Changed,
        retries: 0,
    };
    let outcome = match plugin.reconcile(&request).await {
        Ok(r) => r,
        Err(e) => Err(e.to_string()),
    };
    let writes = fixtures.writes.lock().expect("writes").clone();
    Ok(Run { outcome, writes })
}

/// `expect:` of a controller case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Expect {
    Done,
    Requeue,
    Error,
}

/// One case of a controller table.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    name: String,
    /// Objects in addition to the table's `cluster`.
    #[serde(default)]
    cluster: Vec<Value>,
    /// `[<namespace>/]<name>` of the primary object.
    key: String,
    #[serde(default = "done")]
    expect: Expect,
    /// The writes, in order (each compared on the fields given).
    #[serde(default)]
    writes: Option<Vec<Write>>,
    /// A substring the error must contain.
    #[serde(default)]
    message: Option<String>,
}

fn done() -> Expect {
    Expect::Done
}

/// A controller case table.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Table {
    #[serde(default)]
    config: Option<Value>,
    #[serde(rename = "for")]
    for_kind: KindRef,
    /// Objects every case starts from.
    #[serde(default)]
    cluster: Vec<Value>,
    cases: Vec<Case>,
}

fn matches(want: &Write, got: &Write) -> bool {
    want.verb == got.verb
        && want
            .kind
            .as_ref()
            .is_none_or(|k| Some(k) == got.kind.as_ref())
        && want
            .name
            .as_ref()
            .is_none_or(|n| Some(n) == got.name.as_ref())
        && want
            .namespace
            .as_ref()
            .is_none_or(|n| Some(n) == got.namespace.as_ref())
}

fn describe(outcome: &Result<Outcome, String>) -> String {
    match outcome {
        Ok(Outcome::Done) => "done".into(),
        Ok(Outcome::RequeueAfter(d)) => format!("requeue after {d:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Prints one reconcile's outcome and writes.
pub fn print_run(run: &Run) {
    for w in &run.writes {
        println!("{w}");
    }
    println!("{}", describe(&run.outcome));
}

/// Runs a controller case table; `(passed, failed)`.
pub async fn run_table(
    runtime: &Runtime,
    component: &Path,
    config: Option<&str>,
    extra: &[Value],
    file: &PathBuf,
) -> anyhow::Result<(usize, usize)> {
    let table: Table = serde_yaml::from_slice(&std::fs::read(file)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let cfg = match (config, &table.config) {
        (Some(c), _) => c.to_owned(),
        (None, Some(c)) => wasm_apiserver_api::admission::config_string(c),
        (None, None) => String::new(),
    };
    let (mut passed, mut failed) = (0, 0);
    for case in &table.cases {
        let mut objects = extra.to_vec();
        objects.extend(table.cluster.iter().cloned());
        objects.extend(case.cluster.iter().cloned());
        let run = reconcile(
            runtime,
            component,
            &cfg,
            &table.for_kind,
            objects,
            &case.key,
        )
        .await?;
        let mut problems = Vec::new();
        let got = match &run.outcome {
            Ok(Outcome::Done) => Expect::Done,
            Ok(Outcome::RequeueAfter(_)) => Expect::Requeue,
            Err(_) => Expect::Error,
        };
        if got != case.expect {
            problems.push(format!(
                "expected {:?}, got {}",
                case.expect,
                describe(&run.outcome)
            ));
        }
        if let Some(want) = &case.writes {
            let ok = want.len() == run.writes.len()
                && want.iter().zip(&run.writes).all(|(w, g)| matches(w, g));
            if !ok {
                let show = |ws: &[Write]| {
                    ws.iter()
                        .map(|w| w.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                problems.push(format!(
                    "expected writes [{}], got [{}]",
                    show(want),
                    show(&run.writes)
                ));
            }
        }
        if let Some(want) = &case.message {
            let message = run.outcome.as_ref().err().map(String::as_str).unwrap_or("");
            if !message.contains(want.as_str()) {
                problems.push(format!(
                    "expected an error containing {want:?}, got {message:?}"
                ));
            }
        }
        if problems.is_empty() {
            passed += 1;
            println!("PASS {}", case.name);
        } else {
            failed += 1;
            println!("FAIL {}: {}", case.name, problems.join("; "));
        }
    }
    Ok((passed, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(user: &str, groups: &[&str], verb: &str, resource: &str, namespace: &str) -> Value {
        let group = match resource {
            "ingresses" => "networking.k8s.io",
            "roles" => "rbac.authorization.k8s.io",
            _ => "",
        };
        json!({"user": user, "groups": groups, "resourceAttributes": {
            "verb": verb, "group": group, "resource": resource, "namespace": namespace}})
    }

    #[tokio::test]
    async fn can_i_answers_from_the_fixtures_rbac() {
        let ingress = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web", "namespace": "team-a"}});
        let bare = Fixtures {
            objects: Mutex::new(vec![ingress.clone()]),
            writes: Default::default(),
        };
        let rbac = |kind: &str, name: &str, body: Value| {
            let mut o = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
                "metadata": {"name": name, "namespace": "team-a"}});
            o.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            o
        };
        let role = rbac(
            "Role",
            "ingress-editor",
            json!({"rules": [{"apiGroups": ["networking.k8s.io"],
            "resources": ["ingresses"], "verbs": ["update"]}]}),
        );
        let bind = |name: &str, kind: &str, role: &str, user: &str| {
            rbac(
                "RoleBinding",
                name,
                json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": [{"kind": "User", "name": user}]}),
            )
        };
        let bound = Fixtures {
            objects: Mutex::new(vec![
                ingress,
                role,
                bind("alice-ingresses", "Role", "ingress-editor", "alice"),
                bind("carol-edits", "ClusterRole", "edit", "carol"),
            ]),
            writes: Default::default(),
        };
        let cases = [
            (
                "no RBAC objects: denied",
                &bare,
                review("alice", &[], "update", "ingresses", "team-a"),
                false,
            ),
            (
                "system:masters: allowed",
                &bare,
                review("root", &["system:masters"], "delete", "ingresses", "team-a"),
                true,
            ),
            (
                "a RoleBinding to a Role of the fixtures",
                &bound,
                review("alice", &[], "update", "ingresses", "team-a"),
                true,
            ),
            (
                "only its verbs",
                &bound,
                review("alice", &[], "delete", "ingresses", "team-a"),
                false,
            ),
            (
                "a RoleBinding to the default edit role",
                &bound,
                review("carol", &[], "delete", "ingresses", "team-a"),
                true,
            ),
            (
                "edit does not write roles",
                &bound,
                review("carol", &[], "create", "roles", "team-a"),
                false,
            ),
            (
                "not in another namespace",
                &bound,
                review("alice", &[], "update", "ingresses", "team-b"),
                false,
            ),
            (
                "not for another user",
                &bound,
                review("bob", &[], "update", "ingresses", "team-a"),
                false,
            ),
        ];
        for (name, fixtures, spec, want) in cases {
            let status = fixtures.can_i(&spec).await.unwrap();
            assert_eq!(status["allowed"], json!(want), "{name}: {status}");
        }
        let status = bound
            .can_i(&review("alice", &[], "update", "ingresses", "team-a"))
            .await
            .unwrap();
        assert_eq!(
            status["reason"],
            r#"RBAC: allowed by RoleBinding "alice-ingresses/team-a" of Role "ingress-editor" to User "alice""#
        );
    }
}
