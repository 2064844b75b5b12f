//! Upgrades (issue 37): a data file written by the previous release of this
//! repository (the commit in `tests/upgrade-from`, built from this clone's
//! history by `scripts/build-previous`) is read by this binary. The old
//! binary writes objects of many kinds (built-ins, a CRD and its custom
//! objects, objects updated and deleted); this binary starts on the same
//! data dir, records the file's format (the migration is logged once),
//! reads every object back unchanged, and writes after them with higher
//! resourceVersions; a second start migrates nothing.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use wasm_apiserver_e2e::{Server, kubectl_ok, kubectl_stdin, server_binary};

/// The previous release's binary, built once by `scripts/build-previous`
/// (scripts/test does it before `cargo test`; run alone, this test does).
fn previous_binary() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/build-previous"))
        .output()
        .expect("run scripts/build-previous");
    assert!(
        out.status.success(),
        "scripts/build-previous failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

const RESOURCES: &[&str] = &[
    "/api/v1/namespaces",
    "/api/v1/configmaps",
    "/api/v1/secrets",
    "/api/v1/serviceaccounts",
    "/api/v1/services",
    "/apis/apps/v1/deployments",
    "/apis/rbac.authorization.k8s.io/v1/roles",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/coordination.k8s.io/v1/leases",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/apis/example.com/v1/widgets",
];

/// Every object of [`RESOURCES`], by list path, namespace and name.
fn dump(server: &Server) -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for path in RESOURCES {
        let list: Value =
            serde_json::from_str(&kubectl_ok(server, None, &["get", "--raw", path])).expect("list");
        for item in list["items"].as_array().expect("items") {
            let key = format!(
                "{path} {}/{}",
                item["metadata"]["namespace"].as_str().unwrap_or(""),
                item["metadata"]["name"].as_str().expect("name")
            );
            // A typed list's items carry no `kind`/`apiVersion` (as
            // upstream writes them); older releases wrote them.
            let mut item = item.clone();
            if let Some(m) = item.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            all.insert(key, item);
        }
    }
    all
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {obj}"))
}

fn apply(server: &Server, manifest: &str) {
    let out = kubectl_stdin(server, None, &["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "kubectl apply: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.diagnostics()
    );
}

fn manifest() -> String {
    let mut docs = vec![
        r#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "up", "labels": {"team": "a"}}}"#.to_string(),
        r#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "up"}, "type": "Opaque", "data": {"k": "dmFsdWU="}}"#.into(),
        r#"{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": "up"}}"#.into(),
        r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "up"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}"#.into(),
        r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "up"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}}}}"#.into(),
        r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader", "namespace": "up"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}"#.into(),
        r#"{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader", "namespace": "up"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}"#.into(),
        r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"}, "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string", "default": "blue"}}}}}}}]}}"#.into(),
    ];
    for i in 0..60 {
        docs.push(format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "cm-{i}", "namespace": "up", "labels": {{"i": "{i}"}}}}, "data": {{"value": "{}"}}}}"#,
            "x".repeat(i * 10)
        ));
    }
    docs.join("\n---\n")
}

#[test]
fn a_file_written_by_the_previous_release_reads_back() {
    let previous = previous_binary();
    let mut server = Server::start_binary(previous, &[]);
    apply(&server, &manifest());
    // Custom objects once the CRD is served.
    wasm_apiserver_e2e::poll_until(std::time::Duration::from_secs(30), "widgets served", || {
        kubectl_stdin(&server, None, &["get", "widgets", "-A"], "")
            .status
            .success()
            .then_some(())
    });
    let widgets: Vec<String> = (0..5)
        .map(|i| {
            format!(
                r#"{{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {{"name": "w-{i}", "namespace": "up"}}, "spec": {{"size": {i}}}}}"#
            )
        })
        .collect();
    apply(&server, &widgets.join("\n---\n"));
    // Updates and deletes, so that the file holds more than creations.
    for i in 0..10 {
        kubectl_ok(
            &server,
            None,
            &["-n", "up", "label", "cm", &format!("cm-{i}"), "updated=yes"],
        );
    }
    for i in 50..60 {
        kubectl_ok(
            &server,
            None,
            &["-n", "up", "delete", "cm", &format!("cm-{i}")],
        );
    }
    kubectl_ok(&server, None, &["-n", "up", "delete", "widget", "w-4"]);
    let before = dump(&server);
    let highest = before.values().map(rv).max().expect("objects");
    assert!(
        before.keys().any(|k| k.contains("widgets up/w-3")) && before.len() > 70,
        "the old binary did not write what was applied: {:?}",
        before.keys().collect::<Vec<_>>()
    );
    let old_log = server.log();
    assert!(
        !old_log.contains("data file format migrated"),
        "the previous release already records the format: tests/upgrade-from names the wrong commit"
    );

    // The upgrade.
    server.restart_as(server_binary());
    let migrated = server.log().matches("data file format migrated").count();
    assert_eq!(migrated, 1, "{}", server.diagnostics());
    let after = dump(&server);
    let mut missing = Vec::new();
    for (key, old) in &before {
        match after.get(key) {
            None => missing.push(key.clone()),
            Some(new) => {
                // Objects the control plane keeps (their status, tokens)
                // may have been written since; their identity stays.
                assert_eq!(
                    old["metadata"]["uid"], new["metadata"]["uid"],
                    "{key} changed identity"
                );
                if rv(new) == rv(old) {
                    assert_eq!(old, new, "{key} reads back differently");
                } else {
                    assert!(rv(new) > highest, "{key} went back: {new}");
                }
            }
        }
    }
    assert!(missing.is_empty(), "lost in the upgrade: {missing:?}");
    // What the test wrote (nothing of the control plane's) is unchanged.
    for key in before.keys().filter(|k| k.contains(" up/")) {
        if key.contains("/deployments ") || key.contains("/services ") {
            continue;
        }
        assert_eq!(
            before[key], after[key],
            "{key} was rewritten by the upgrade"
        );
    }
    for i in 50..60 {
        assert!(!after.keys().any(|k| k.ends_with(&format!("up/cm-{i}"))));
    }
    // Writes go on, after every revision the old binary handed out.
    let out = kubectl_ok(
        &server,
        None,
        &[
            "-n",
            "up",
            "create",
            "cm",
            "after",
            "--from-literal=a=b",
            "-o",
            "json",
        ],
    );
    let created: Value = serde_json::from_str(&out).expect("created");
    assert!(rv(&created) > highest, "{created}");
    let w: Value = serde_json::from_str(&kubectl_ok(
        &server,
        None,
        &["-n", "up", "get", "widget", "w-2", "-o", "json"],
    ))
    .expect("widget");
    assert_eq!(w["spec"], serde_json::json!({"size": 2, "color": "blue"}));

    // The recorded format is not migrated again.
    server.restart();
    assert_eq!(
        server.log().matches("data file format migrated").count(),
        1,
        "{}",
        server.diagnostics()
    );
    let last = dump(&server);
    let lost: Vec<&String> = after.keys().filter(|k| !last.contains_key(*k)).collect();
    assert!(lost.is_empty(), "lost at the second start: {lost:?}");
    assert!(last.contains_key("/api/v1/configmaps up/after"));
}
