//! Apply sequences, table-driven: each row runs applies and updates by
//! several managers in order and checks the stored object and every
//! manager's field set after the last one. The rows follow the transitions
//! structured-merge-diff's own scenarios exercise (`merge/*_test.go`):
//! empty ↔ filled maps, structs and lists, `null`, a field dropped and
//! applied again, atomic and granular types, shared fields, forced
//! conflicts, and `Update`s in between.

use super::*;
use crate::openapi::definitions;

enum Op {
    /// An apply by the manager, with this configuration.
    Apply(&'static str, Value),
    /// A forced apply.
    Force(&'static str, Value),
    /// An apply that must fail with conflicts on exactly these fields.
    Conflicts(&'static str, Value, &'static [&'static str]),
    /// An update (PUT or a non-apply patch) writing this whole object.
    Update(&'static str, Value),
}

struct Case {
    name: &'static str,
    kind: &'static str,
    ops: Vec<Op>,
    /// The stored object after the last op, without `managedFields`.
    object: Value,
    /// Every entry: manager, operation, paths owned.
    owners: &'static [(&'static str, &'static str, &'static [&'static str])],
}

fn definition(kind: &str) -> &'static str {
    match kind {
        "ConfigMap" => "io.k8s.api.core.v1.ConfigMap",
        "Deployment" => "io.k8s.api.apps.v1.Deployment",
        other => panic!("no schema for {other}"),
    }
}

/// The object of `kind` named `x` with `body`'s fields.
fn object(kind: &str, body: &Value) -> Value {
    let api_version = if kind == "Deployment" {
        "apps/v1"
    } else {
        "v1"
    };
    let mut o = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
    for (k, v) in body.as_object().expect("a body is an object") {
        if k == "metadata" {
            for (mk, mv) in v.as_object().unwrap() {
                o["metadata"][mk] = mv.clone();
            }
        } else {
            o[k] = v.clone();
        }
    }
    o
}

/// A deployment body with one container `c` with these extra fields.
fn container(fields: Value) -> Value {
    let mut c = json!({"name": "c", "image": "nginx"});
    for (k, v) in fields.as_object().unwrap() {
        c[k] = v.clone();
    }
    json!({"spec": {"template": {"spec": {"containers": [c]}}}})
}

fn owners_of(obj: &Value) -> Vec<(String, String, Vec<String>)> {
    let mut out: Vec<_> = read(obj)
        .unwrap_or(Ok(Vec::new()))
        .unwrap()
        .into_iter()
        .map(|e| {
            let mut paths: Vec<String> =
                e.set.paths().iter().map(|p| fieldset::display(p)).collect();
            paths.sort();
            (e.manager, e.operation, paths)
        })
        .collect();
    out.sort();
    out
}

fn run(case: &Case) {
    let schema = Schema::new(&definitions::builtin()[definition(case.kind)]);
    let api_version = if case.kind == "Deployment" {
        "apps/v1"
    } else {
        "v1"
    };
    let mgr = |name| Manager {
        name,
        subresource: None,
        api_version,
        has_status: true,
        now: "2026-12-01T00:00:00Z",
    };
    let mut live: Option<Value> = None;
    for (i, op) in case.ops.iter().enumerate() {
        let at = format!("{}: op {i}", case.name);
        match op {
            Op::Apply(m, body) | Op::Force(m, body) => {
                let force = matches!(op, Op::Force(..));
                let config = object(case.kind, body);
                match apply(live.as_ref(), &config, schema, &mgr(m), force) {
                    Ok(v) => live = Some(v),
                    Err(c) => panic!("{at}: unexpected conflict: {}", c.message()),
                }
            }
            Op::Conflicts(m, body, fields) => {
                let config = object(case.kind, body);
                match apply(live.as_ref(), &config, schema, &mgr(m), false) {
                    Ok(v) => panic!("{at}: expected conflicts on {fields:?}, got {v}"),
                    Err(c) => {
                        let got: Vec<&str> = c.0.iter().map(|c| c.field.as_str()).collect();
                        assert_eq!(got, *fields, "{at}");
                    }
                }
            }
            Op::Update(m, body) => {
                let mut new = object(case.kind, body);
                record_update(live.as_ref(), &mut new, schema, &mgr(m));
                live = Some(new);
            }
        }
    }
    let live = live.expect("at least one op");
    assert_eq!(
        without_managed_fields(&live),
        object(case.kind, &case.object),
        "{}: stored object",
        case.name
    );
    let mut want: Vec<(String, String, Vec<String>)> = case
        .owners
        .iter()
        .map(|(m, op, paths)| {
            let mut p: Vec<String> = paths.iter().map(|s| s.to_string()).collect();
            p.sort();
            (m.to_string(), op.to_string(), p)
        })
        .collect();
    want.sort();
    assert_eq!(owners_of(&live), want, "{}: managers", case.name);
}

fn cases() -> Vec<Case> {
    use Op::*;
    vec![
        Case {
            name: "map filled, emptied, filled again (issue 38)",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"a": "1", "b": "2"}})),
                Apply("a", json!({"data": {}})),
                Apply("a", json!({"data": {"a": "3"}})),
            ],
            object: json!({"data": {"a": "3"}}),
            owners: &[("a", "Apply", &[".data.a"])],
        },
        Case {
            name: "map emptied keeps nothing, owns the map",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"a": "1", "b": "2"}})),
                Apply("a", json!({"data": {}})),
            ],
            object: json!({"data": {}}),
            owners: &[("a", "Apply", &[".data"])],
        },
        Case {
            name: "empty label set, then labels",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"metadata": {"labels": {}}})),
                Apply("a", json!({"metadata": {"labels": {"app": "web"}}})),
            ],
            object: json!({"metadata": {"labels": {"app": "web"}}}),
            owners: &[("a", "Apply", &[".metadata.labels.app"])],
        },
        Case {
            name: "null map, then a filled one",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"a": "1"}})),
                Apply("a", json!({"data": null})),
                Apply("a", json!({"data": {"b": "2"}})),
            ],
            object: json!({"data": {"b": "2"}}),
            owners: &[("a", "Apply", &[".data.b"])],
        },
        Case {
            name: "a stored null map is filled by an apply",
            kind: "ConfigMap",
            ops: vec![
                Update("editor", json!({"binaryData": {"k": "AA=="}, "data": null})),
                Apply("a", json!({"data": {"a": "1"}})),
            ],
            object: json!({"binaryData": {"k": "AA=="}, "data": {"a": "1"}}),
            owners: &[
                ("a", "Apply", &[".data.a"]),
                ("editor", "Update", &[".binaryData.k", ".data"]),
            ],
        },
        Case {
            name: "emptied map keeps an updater's key and takes new ones",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {}})),
                Update("editor", json!({"data": {"x": "9"}})),
                Apply("a", json!({"data": {"a": "1"}})),
            ],
            object: json!({"data": {"a": "1", "x": "9"}}),
            owners: &[
                ("a", "Apply", &[".data.a"]),
                ("editor", "Update", &[".data.x"]),
            ],
        },
        Case {
            name: "a field dropped and applied again",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"x": "1", "y": "1"}})),
                Apply("a", json!({"data": {"x": "1"}})),
                Apply("a", json!({"data": {"x": "1", "y": "5"}})),
            ],
            object: json!({"data": {"x": "1", "y": "5"}}),
            owners: &[("a", "Apply", &[".data.x", ".data.y"])],
        },
        Case {
            name: "the whole map dropped, then applied again",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"x": "1"}})),
                Apply("a", json!({})),
                Apply("a", json!({"data": {"y": "2"}})),
            ],
            object: json!({"data": {"y": "2"}}),
            owners: &[("a", "Apply", &[".data.y"])],
        },
        Case {
            name: "two managers share a field until both drop it",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"x": "1", "y": "1"}})),
                Apply("b", json!({"data": {"x": "1"}})),
                Apply("a", json!({"data": {"y": "1"}})),
            ],
            object: json!({"data": {"x": "1", "y": "1"}}),
            owners: &[("a", "Apply", &[".data.y"]), ("b", "Apply", &[".data.x"])],
        },
        Case {
            name: "the last sharer dropping a field removes it",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"x": "1", "y": "1"}})),
                Apply("b", json!({"data": {"x": "1"}})),
                Apply("a", json!({"data": {"y": "1"}})),
                Apply("b", json!({"data": {"z": "1"}})),
            ],
            object: json!({"data": {"y": "1", "z": "1"}}),
            owners: &[("a", "Apply", &[".data.y"]), ("b", "Apply", &[".data.z"])],
        },
        Case {
            name: "an update in between takes the field it changes",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"x": "1", "y": "1"}})),
                Update("editor", json!({"data": {"x": "1", "y": "2"}})),
                Apply("a", json!({"data": {"x": "1"}})),
            ],
            object: json!({"data": {"x": "1", "y": "2"}}),
            owners: &[
                ("a", "Apply", &[".data.x"]),
                ("editor", "Update", &[".data.y"]),
            ],
        },
        Case {
            name: "an applier conflicts with an updater's value, then forces",
            kind: "ConfigMap",
            ops: vec![
                Apply("a", json!({"data": {"x": "1"}})),
                Update("editor", json!({"data": {"x": "2"}})),
                Conflicts("a", json!({"data": {"x": "1"}}), &[".data.x"]),
                Force("a", json!({"data": {"x": "1"}})),
            ],
            object: json!({"data": {"x": "1"}}),
            owners: &[("a", "Apply", &[".data.x"])],
        },
        Case {
            name: "force after a conflict between appliers, then the loser conflicts",
            kind: "Deployment",
            ops: vec![
                Apply("a", json!({"spec": {"replicas": 1, "paused": true}})),
                Conflicts("b", json!({"spec": {"replicas": 2}}), &[".spec.replicas"]),
                Force("b", json!({"spec": {"replicas": 2}})),
                Conflicts(
                    "a",
                    json!({"spec": {"replicas": 1, "paused": true}}),
                    &[".spec.replicas"],
                ),
            ],
            object: json!({"spec": {"replicas": 2, "paused": true}}),
            owners: &[
                ("a", "Apply", &[".spec.paused"]),
                ("b", "Apply", &[".spec.replicas"]),
            ],
        },
        Case {
            name: "struct emptied, then filled",
            kind: "Deployment",
            ops: vec![
                Apply(
                    "a",
                    json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 1}}}}),
                ),
                Apply("a", json!({"spec": {"strategy": {}}})),
                Apply("a", json!({"spec": {"strategy": {"type": "Recreate"}}})),
            ],
            object: json!({"spec": {"strategy": {"type": "Recreate"}}}),
            owners: &[("a", "Apply", &[".spec.strategy.type"])],
        },
        Case {
            name: "struct dropped keeps what an updater set in it",
            kind: "Deployment",
            ops: vec![
                Apply(
                    "a",
                    json!({"spec": {"strategy": {"type": "RollingUpdate"}}}),
                ),
                Update(
                    "controller",
                    json!({"spec": {"strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 2}}}}),
                ),
                Apply("a", json!({"spec": {"strategy": {}}})),
            ],
            object: json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 2}}}}),
            owners: &[
                ("a", "Apply", &[".spec.strategy"]),
                (
                    "controller",
                    "Update",
                    &[".spec.strategy.rollingUpdate.maxSurge"],
                ),
            ],
        },
        Case {
            name: "atomic list filled, emptied, filled",
            kind: "Deployment",
            ops: vec![
                Apply("a", container(json!({"args": ["a", "b"]}))),
                Apply("a", container(json!({"args": []}))),
                Apply("a", container(json!({"args": ["c"]}))),
            ],
            object: container(json!({"args": ["c"]})),
            owners: &[(
                "a",
                "Apply",
                &[
                    r#".spec.template.spec.containers[name="c"]"#,
                    r#".spec.template.spec.containers[name="c"].args"#,
                    r#".spec.template.spec.containers[name="c"].image"#,
                    r#".spec.template.spec.containers[name="c"].name"#,
                ],
            )],
        },
        Case {
            name: "associative list emptied, then another item",
            kind: "Deployment",
            ops: vec![
                Apply(
                    "a",
                    container(json!({"env": [{"name": "A", "value": "1"}]})),
                ),
                Apply("a", container(json!({"env": []}))),
                Apply(
                    "a",
                    container(json!({"env": [{"name": "B", "value": "2"}]})),
                ),
            ],
            object: container(json!({"env": [{"name": "B", "value": "2"}]})),
            owners: &[(
                "a",
                "Apply",
                &[
                    r#".spec.template.spec.containers[name="c"]"#,
                    r#".spec.template.spec.containers[name="c"].env[name="B"]"#,
                    r#".spec.template.spec.containers[name="c"].env[name="B"].name"#,
                    r#".spec.template.spec.containers[name="c"].env[name="B"].value"#,
                    r#".spec.template.spec.containers[name="c"].image"#,
                    r#".spec.template.spec.containers[name="c"].name"#,
                ],
            )],
        },
        Case {
            name: "set list: each manager's items, a dropped one goes",
            kind: "Deployment",
            ops: vec![
                Apply(
                    "a",
                    json!({"metadata": {"finalizers": ["x/a", "x/shared"]}}),
                ),
                Apply(
                    "b",
                    json!({"metadata": {"finalizers": ["x/shared", "x/b"]}}),
                ),
                Apply("a", json!({"metadata": {"finalizers": []}})),
            ],
            object: json!({"metadata": {"finalizers": ["x/shared", "x/b"]}}),
            owners: &[(
                "b",
                "Apply",
                &[
                    r#".metadata.finalizers[="x/b"]"#,
                    r#".metadata.finalizers[="x/shared"]"#,
                ],
            )],
        },
        Case {
            name: "granular map: two appliers keep their own keys",
            kind: "Deployment",
            ops: vec![
                Apply("a", json!({"metadata": {"labels": {"a": "1"}}})),
                Apply("b", json!({"metadata": {"labels": {"b": "2"}}})),
                Apply("a", json!({"metadata": {"labels": {"c": "3"}}})),
            ],
            object: json!({"metadata": {"labels": {"b": "2", "c": "3"}}}),
            owners: &[
                ("a", "Apply", &[".metadata.labels.c"]),
                ("b", "Apply", &[".metadata.labels.b"]),
            ],
        },
        Case {
            name: "atomic map: a second applier conflicts, forcing replaces it whole",
            kind: "Deployment",
            ops: vec![
                Apply(
                    "a",
                    json!({"spec": {"template": {"spec": {"nodeSelector": {"a": "1"}}}}}),
                ),
                Conflicts(
                    "b",
                    json!({"spec": {"template": {"spec": {"nodeSelector": {"b": "2"}}}}}),
                    &[".spec.template.spec.nodeSelector"],
                ),
                Force(
                    "b",
                    json!({"spec": {"template": {"spec": {"nodeSelector": {"b": "2"}}}}}),
                ),
            ],
            object: json!({"spec": {"template": {"spec": {"nodeSelector": {"b": "2"}}}}}),
            owners: &[("b", "Apply", &[".spec.template.spec.nodeSelector"])],
        },
        Case {
            name: "atomic map emptied, then filled",
            kind: "Deployment",
            ops: vec![
                Apply(
                    "a",
                    json!({"spec": {"template": {"spec": {"nodeSelector": {"a": "1"}}}}}),
                ),
                Apply(
                    "a",
                    json!({"spec": {"template": {"spec": {"nodeSelector": {}}}}}),
                ),
                Apply(
                    "a",
                    json!({"spec": {"template": {"spec": {"nodeSelector": {"b": "2"}}}}}),
                ),
            ],
            object: json!({"spec": {"template": {"spec": {"nodeSelector": {"b": "2"}}}}}),
            owners: &[("a", "Apply", &[".spec.template.spec.nodeSelector"])],
        },
    ]
}

#[test]
fn apply_sequences() {
    for case in cases() {
        run(&case);
    }
}
