//! End-to-end: the real server driven by kubectl.
//!
//! Every scenario runs once per kubectl in [`kubectl_versions!`]: the
//! dispatcher on `PATH` (which picks the version matching the server's
//! `/version`) and explicit old and new versions. Each test starts its own
//! server.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use wasm_apiserver_e2e::{
    KubectlWatch, Server, expect_success, kubectl, kubectl_json, kubectl_ok, kubectl_stdin,
    poll_until, write_manifest,
};

/// How long a change may take to show up (watch events, namespace cleanup).
const DEADLINE: Duration = Duration::from_secs(30);

/// One module per kubectl, each with every scenario below.
macro_rules! kubectl_versions {
    ($($module:ident => $version:expr),* $(,)?) => {$(
        mod $module {
            const VERSION: Option<&str> = $version;
            kubectl_versions!(@tests
                create_namespace,
                apply_then_apply_changed,
                get_json,
                watch_sees_change,
                delete,
                patch_types,
                dry_run_server_creates_nothing,
                label_selectors,
                table_columns,
                missing_is_not_found,
                create_existing_is_already_exists,
                delete_namespace_removes_its_configmaps,
                kill9_restart_keeps_data,
                api_resources,
                chunked_list,
            );
        }
    )*};
    (@tests $($test:ident),* $(,)?) => {$(
        #[test]
        fn $test() {
            super::$test(VERSION)
        }
    )*};
}

kubectl_versions! {
    dispatcher => None,
    v1_29 => Some("1.29"),
    v1_33 => Some("1.33"),
}

/// Every kubectl from 1.27 on applies a Deployment with no flags (1.27 and
/// 1.28 read the protobuf OpenAPI v2 document), and applies it again with a
/// changed container list as a strategic merge by container name, from the
/// served schemas' merge keys: a field set on the server outside the
/// manifest (an env var added by `kubectl set env`) survives the re-apply,
/// which a list replacement would drop.
#[test]
fn every_kubectl_applies_a_deployment() {
    let server = Server::start();
    for version in ["1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33"] {
        let name = format!("web-{}", version.replace('.', "-"));
        let manifest = |second: &str| {
            format!(
                r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {{"name": "{name}"}},
                "spec": {{"selector": {{"matchLabels": {{"app": "{name}"}}}},
                         "template": {{"metadata": {{"labels": {{"app": "{name}"}}}},
                                      "spec": {{"containers": [{{"name": "c", "image": "nginx"}}, {second}]}}}}}}}}"#
            )
        };
        let apply = |body: &str| {
            let out = kubectl_stdin(&server, Some(version), &["apply", "-f", "-"], body);
            assert!(out.status.success(), "kubectl {version}: {}", stderr(&out));
        };
        apply(&manifest(r#"{"name": "b", "image": "busybox"}"#));
        let got = kubectl_json(&server, Some(version), &["get", "deployment", &name]);
        assert_eq!(got["spec"]["replicas"], 1, "kubectl {version}");
        kubectl_ok(
            &server,
            Some(version),
            &[
                "set",
                "env",
                &format!("deployment/{name}"),
                "-c",
                "c",
                "MODE=live",
            ],
        );
        apply(&manifest(r#"{"name": "r", "image": "redis"}"#));
        let got = kubectl_json(&server, Some(version), &["get", "deployment", &name]);
        let containers = &got["spec"]["template"]["spec"]["containers"];
        let names: Vec<&str> = containers
            .as_array()
            .expect("containers")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["c", "r"], "kubectl {version}: {containers}");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "MODE", "value": "live"}]),
            "kubectl {version}: the live env var is kept by a merge on name"
        );
    }
}

/// `kubectl explain` reads the built-in kinds' full schemas.
#[test]
fn explain_reads_built_in_schemas() {
    let server = Server::start();
    let out = kubectl_ok(
        &server,
        None,
        &["explain", "deployment.spec.template.spec.containers"],
    );
    assert!(out.contains("KIND:       Deployment"), "{out}");
    assert!(out.contains("FIELD: containers <[]Container>"), "{out}");
    assert!(out.contains("imagePullPolicy\t<string>"), "{out}");
    let out = kubectl_ok(&server, None, &["explain", "pods.spec.volumes.configMap"]);
    assert!(out.contains("defaultMode\t<integer>"), "{out}");
    let out = kubectl_ok(&server, None, &["explain", "services", "--recursive"]);
    assert!(out.contains("clusterIP\t<string>"), "{out}");
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The names of the items of a `kubectl get ... -o json` list.
fn item_names(list: &Value) -> BTreeSet<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .map(|item| {
            item["metadata"]["name"]
                .as_str()
                .expect("item name")
                .to_string()
        })
        .collect()
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Asserts that `kubectl get KIND NAME` fails with NotFound.
fn assert_not_found(server: &Server, v: Option<&str>, args: &[&str]) {
    let mut all = vec!["get"];
    all.extend(args);
    let output = kubectl(server, v, &all);
    assert!(
        !output.status.success(),
        "kubectl {} should fail, printed {}",
        all.join(" "),
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        stderr(&output).contains("NotFound"),
        "kubectl {}: {}",
        all.join(" "),
        stderr(&output)
    );
}

fn create_namespace(v: Option<&str>) {
    let server = Server::start();
    let out = kubectl_ok(&server, v, &["create", "namespace", "team-a"]);
    assert!(out.contains("namespace/team-a created"), "{out}");
    let ns = kubectl_json(&server, v, &["get", "namespace", "team-a"]);
    assert_eq!(ns["kind"], "Namespace");
    assert_eq!(ns["apiVersion"], "v1");
    assert_eq!(ns["metadata"]["name"], "team-a");
    assert_eq!(ns["status"]["phase"], "Active", "{ns}");
    assert!(
        ns["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{ns}"
    );
    assert!(ns["metadata"]["creationTimestamp"].is_string(), "{ns}");

    let all = kubectl_json(&server, v, &["get", "namespaces"]);
    let found = item_names(&all);
    for expected in [
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "team-a",
    ] {
        assert!(
            found.contains(expected),
            "{expected} missing from {found:?}"
        );
    }
}

fn apply_then_apply_changed(v: Option<&str>) {
    let server = Server::start();
    kubectl_ok(&server, v, &["create", "namespace", "apps"]);
    let first = write_manifest(
        &server,
        "cm-v1.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: apps\n  labels:\n    app: web\ndata:\n  a: \"1\"\n  b: \"2\"\n",
    );
    let out = kubectl_ok(&server, v, &["apply", "-f", first.to_str().unwrap()]);
    assert!(out.contains("configmap/settings created"), "{out}");
    let created = kubectl_json(&server, v, &["get", "configmap", "settings", "-n", "apps"]);
    assert_eq!(created["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(created["metadata"]["labels"], json!({"app": "web"}));
    assert!(
        created["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string(),
        "apply stores its last-applied annotation: {created}"
    );

    // The changed manifest drops b, changes a, adds c and a label.
    let second = write_manifest(
        &server,
        "cm-v2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: apps\n  labels:\n    app: web\n    tier: front\ndata:\n  a: \"10\"\n  c: \"3\"\n",
    );
    let out = kubectl_ok(&server, v, &["apply", "-f", second.to_str().unwrap()]);
    assert!(out.contains("configmap/settings configured"), "{out}");
    let changed = kubectl_json(&server, v, &["get", "configmap", "settings", "-n", "apps"]);
    assert_eq!(changed["data"], json!({"a": "10", "c": "3"}), "{changed}");
    assert_eq!(
        changed["metadata"]["labels"],
        json!({"app": "web", "tier": "front"})
    );
    assert_eq!(changed["metadata"]["uid"], created["metadata"]["uid"]);
    assert_ne!(
        changed["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    // Applying the same manifest again changes nothing.
    let out = kubectl_ok(&server, v, &["apply", "-f", second.to_str().unwrap()]);
    assert!(out.contains("configmap/settings unchanged"), "{out}");
    let again = kubectl_json(&server, v, &["get", "configmap", "settings", "-n", "apps"]);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        changed["metadata"]["resourceVersion"]
    );
}

fn get_json(v: Option<&str>) {
    let server = Server::start();
    let manifest = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ntype: Opaque\nstringData:\n  user: admin\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one\ndata:\n  k: v\n";
    let out = expect_success(
        &kubectl_stdin(&server, v, &["apply", "-f", "-"], manifest),
        v,
        &["apply", "-f", "-"],
    );
    assert!(
        out.contains("secret/creds created") && out.contains("configmap/one created"),
        "{out}"
    );

    let cm = kubectl_json(&server, v, &["get", "configmap", "one"]);
    assert_eq!(cm["apiVersion"], "v1");
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], "default");
    assert_eq!(cm["data"], json!({"k": "v"}));

    // stringData is folded into base64 data on write.
    let secret = kubectl_json(&server, v, &["get", "secret", "creds"]);
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["data"], json!({"user": "YWRtaW4="}), "{secret}");
    assert!(secret.get("stringData").is_none(), "{secret}");

    let list = kubectl_json(&server, v, &["get", "configmaps"]);
    assert!(item_names(&list).contains("one"), "{list}");
    for item in list["items"].as_array().unwrap() {
        assert_eq!(item["kind"], "ConfigMap", "{item}");
        assert_eq!(item["apiVersion"], "v1", "{item}");
    }

    let jsonpath = kubectl_ok(
        &server,
        v,
        &["get", "cm", "one", "-o", "jsonpath={.data.k}"],
    );
    assert_eq!(jsonpath, "v");
}

fn watch_sees_change(v: Option<&str>) {
    let server = Server::start();
    kubectl_ok(
        &server,
        v,
        &["create", "configmap", "watched", "--from-literal=k=v1"],
    );
    let mut watch = KubectlWatch::spawn(
        &server,
        v,
        &[
            "get",
            "configmap",
            "watched",
            "-w",
            "--output-watch-events",
            "-o",
            "json",
        ],
    );
    // The change must come after the initial listing, so wait for that first.
    watch.wait_for_json(DEADLINE, "initial ADDED event", |doc| {
        doc["type"] == "ADDED" && doc["object"]["data"]["k"] == "v1"
    });
    kubectl_ok(
        &server,
        v,
        &[
            "patch",
            "configmap",
            "watched",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"v2"}}"#,
        ],
    );
    let event = watch.wait_for_json(DEADLINE, "MODIFIED event with k=v2", |doc| {
        doc["type"] == "MODIFIED" && doc["object"]["data"]["k"] == "v2"
    });
    assert_eq!(event["object"]["metadata"]["name"], "watched");
    assert_eq!(event["object"]["kind"], "ConfigMap", "{event}");

    kubectl_ok(&server, v, &["delete", "configmap", "watched"]);
    watch.wait_for_json(DEADLINE, "DELETED event", |doc| {
        doc["type"] == "DELETED" && doc["object"]["metadata"]["name"] == "watched"
    });
    // Exactly one event per change, in order.
    let types: Vec<_> = watch
        .json_documents()
        .iter()
        .map(|d| d["type"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(
        types,
        ["ADDED", "MODIFIED", "DELETED"],
        "{}",
        watch.stdout()
    );
}

fn delete(v: Option<&str>) {
    let server = Server::start();
    kubectl_ok(
        &server,
        v,
        &["create", "configmap", "doomed", "--from-literal=a=b"],
    );
    kubectl_ok(
        &server,
        v,
        &["create", "configmap", "kept", "--from-literal=a=b"],
    );
    let out = kubectl_ok(&server, v, &["delete", "configmap", "doomed"]);
    assert!(out.contains("configmap \"doomed\" deleted"), "{out}");
    assert_not_found(&server, v, &["configmap", "doomed"]);
    kubectl_ok(&server, v, &["get", "configmap", "kept"]);

    // Deleting twice is NotFound.
    let output = kubectl(&server, v, &["delete", "configmap", "doomed"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("NotFound"), "{}", stderr(&output));
}

fn patch_types(v: Option<&str>) {
    let server = Server::start();
    kubectl_ok(
        &server,
        v,
        &[
            "create",
            "configmap",
            "p",
            "--from-literal=a=1",
            "--from-literal=b=2",
        ],
    );
    kubectl_ok(
        &server,
        v,
        &["patch", "configmap", "p", "-p", r#"{"data":{"c":"3"}}"#],
    );
    kubectl_ok(
        &server,
        v,
        &[
            "patch",
            "configmap",
            "p",
            "--type=merge",
            "-p",
            r#"{"data":{"a":null}}"#,
        ],
    );
    kubectl_ok(
        &server,
        v,
        &[
            "patch",
            "configmap",
            "p",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/data/b","value":"20"}]"#,
        ],
    );
    let cm = kubectl_json(&server, v, &["get", "configmap", "p"]);
    assert_eq!(cm["data"], json!({"b": "20", "c": "3"}), "{cm}");

    // A JSON patch whose test fails is rejected and changes nothing.
    let output = kubectl(
        &server,
        v,
        &[
            "patch",
            "configmap",
            "p",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/data/b","value":"nope"}]"#,
        ],
    );
    assert!(
        !output.status.success(),
        "failed test op must fail the patch"
    );
    let after = kubectl_json(&server, v, &["get", "configmap", "p"]);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        cm["metadata"]["resourceVersion"]
    );

    let out = kubectl_ok(&server, v, &["label", "configmap", "p", "color=blue"]);
    assert!(out.contains("labeled"), "{out}");
    let labels = kubectl_ok(
        &server,
        v,
        &[
            "get",
            "configmap",
            "p",
            "-o",
            "jsonpath={.metadata.labels.color}",
        ],
    );
    assert_eq!(labels, "blue");
}

fn dry_run_server_creates_nothing(v: Option<&str>) {
    let server = Server::start();
    let dry = kubectl_json(
        &server,
        v,
        &[
            "create",
            "configmap",
            "ghost",
            "--from-literal=a=b",
            "--dry-run=server",
        ],
    );
    assert_eq!(dry["metadata"]["name"], "ghost");
    assert_eq!(dry["data"], json!({"a": "b"}));
    assert_not_found(&server, v, &["configmap", "ghost"]);

    let manifest =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ghost2\ndata:\n  x: \"y\"\n";
    let args = ["apply", "--dry-run=server", "-f", "-"];
    let out = expect_success(&kubectl_stdin(&server, v, &args, manifest), v, &args);
    assert!(
        out.contains("ghost2") && out.contains("server dry run"),
        "{out}"
    );
    assert_not_found(&server, v, &["configmap", "ghost2"]);

    // A dry-run delete or update leaves the object alone.
    kubectl_ok(
        &server,
        v,
        &["create", "configmap", "real", "--from-literal=a=b"],
    );
    let before = kubectl_json(&server, v, &["get", "configmap", "real"]);
    kubectl_ok(
        &server,
        v,
        &["delete", "configmap", "real", "--dry-run=server"],
    );
    kubectl_ok(
        &server,
        v,
        &[
            "patch",
            "configmap",
            "real",
            "--dry-run=server",
            "--type=merge",
            "-p",
            r#"{"data":{"a":"changed"}}"#,
        ],
    );
    let after = kubectl_json(&server, v, &["get", "configmap", "real"]);
    assert_eq!(after["data"], json!({"a": "b"}));
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
}

fn label_selectors(v: Option<&str>) {
    let server = Server::start();
    let manifest = [("c1", "app: web\n    tier: a"), ("c2", "app: web\n    tier: c\n    x: \"1\""), ("c3", "app: db\n    tier: b\n    x: \"1\""), ("c4", "app: db\n    tier: d")]
        .iter()
        .map(|(name, labels)| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: sel\n  labels:\n    {labels}\n")
        })
        .collect::<Vec<_>>()
        .join("---\n");
    kubectl_ok(&server, v, &["create", "namespace", "sel"]);
    expect_success(
        &kubectl_stdin(&server, v, &["apply", "-f", "-"], &manifest),
        v,
        &["apply"],
    );

    let select = |selector: &str| {
        item_names(&kubectl_json(
            &server,
            v,
            &["get", "configmaps", "-n", "sel", "-l", selector],
        ))
    };
    // Objects the server may create on its own (e.g. kube-root-ca.crt) carry
    // none of these labels, so only `!x` could match them.
    let mine = names(&["c1", "c2", "c3", "c4"]);
    assert_eq!(select("app=web"), names(&["c1", "c2"]));
    assert_eq!(select("app!=web,app"), names(&["c3", "c4"]));
    assert_eq!(select("tier in (a,b)"), names(&["c1", "c3"]));
    assert_eq!(select("tier notin (a,b),app"), names(&["c2", "c4"]));
    assert_eq!(select("x"), names(&["c2", "c3"]));
    let not_x: BTreeSet<_> = select("!x").intersection(&mine).cloned().collect();
    assert_eq!(not_x, names(&["c1", "c4"]));
    assert_eq!(select("app=web,x"), names(&["c2"]));
    assert_eq!(select("app=nothing"), names(&[]));

    // Field selectors.
    let by_name = kubectl_json(
        &server,
        v,
        &[
            "get",
            "configmaps",
            "-n",
            "sel",
            "--field-selector",
            "metadata.name=c3",
        ],
    );
    assert_eq!(item_names(&by_name), names(&["c3"]));

    // An invalid selector is rejected by the server or by kubectl.
    let output = kubectl(
        &server,
        v,
        &["get", "configmaps", "-n", "sel", "-l", "tier in (a"],
    );
    assert!(!output.status.success(), "invalid selector must fail");
}

/// Splits a kubectl table into rows of whitespace-separated cells.
fn table(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn table_columns(v: Option<&str>) {
    let server = Server::start();
    kubectl_ok(
        &server,
        v,
        &[
            "create",
            "configmap",
            "three",
            "--from-literal=a=1",
            "--from-literal=b=2",
            "--from-literal=c=3",
        ],
    );
    kubectl_ok(&server, v, &["create", "configmap", "empty"]);

    let rows = table(&kubectl_ok(&server, v, &["get", "configmaps"]));
    assert_eq!(rows[0], ["NAME", "DATA", "AGE"], "{rows:?}");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("no row {name} in {rows:?}"))
            .clone()
    };
    assert_eq!(row("three")[1], "3");
    assert_eq!(row("empty")[1], "0");
    assert!(
        row("three")[2].ends_with('s') || row("three")[2].ends_with('m'),
        "AGE: {rows:?}"
    );

    let rows = table(&kubectl_ok(
        &server,
        v,
        &["get", "configmaps", "--all-namespaces"],
    ));
    assert_eq!(rows[0], ["NAMESPACE", "NAME", "DATA", "AGE"], "{rows:?}");
    assert!(
        rows.iter().any(|r| r[..3] == ["default", "three", "3"]),
        "{rows:?}"
    );

    let rows = table(&kubectl_ok(&server, v, &["get", "namespaces"]));
    assert_eq!(rows[0], ["NAME", "STATUS", "AGE"], "{rows:?}");
    assert!(
        rows.iter().any(|r| r[..2] == ["kube-system", "Active"]),
        "{rows:?}"
    );

    let rows = table(&kubectl_ok(
        &server,
        v,
        &["get", "configmaps", "--show-labels", "-l", "missing=label"],
    ));
    assert!(rows.is_empty(), "{rows:?}");

    // `-o name` and `--no-headers`.
    let out = kubectl_ok(&server, v, &["get", "configmaps", "-o", "name"]);
    assert!(out.lines().any(|l| l == "configmap/three"), "{out}");
    let rows = table(&kubectl_ok(
        &server,
        v,
        &["get", "configmap", "three", "--no-headers"],
    ));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][..2], ["three", "3"]);
}

fn missing_is_not_found(v: Option<&str>) {
    let server = Server::start();
    let output = kubectl(&server, v, &["get", "configmap", "missing"]);
    assert!(
        !output.status.success(),
        "get of a missing object must fail"
    );
    let err = stderr(&output);
    assert!(err.contains("(NotFound)"), "{err}");
    assert!(err.contains(r#"configmaps "missing" not found"#), "{err}");

    let output = kubectl(
        &server,
        v,
        &["get", "configmaps", "-n", "no-such-namespace"],
    );
    assert!(
        output.status.success(),
        "listing in a missing namespace is an empty list: {}",
        stderr(&output)
    );

    // `kubectl create configmap` words errors itself; `create -f` shows the
    // server's reason.
    let output = kubectl(
        &server,
        v,
        &["create", "configmap", "x", "-n", "no-such-namespace"],
    );
    assert!(
        !output.status.success(),
        "create in a missing namespace must fail"
    );
    assert!(
        stderr(&output).contains(r#"namespaces "no-such-namespace" not found"#),
        "{}",
        stderr(&output)
    );
    let output = create_from_stdin(&server, v, "x", Some("no-such-namespace"));
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("(NotFound)"),
        "{}",
        stderr(&output)
    );

    let output = create_from_stdin(&server, v, "Bad_Name", None);
    assert!(!output.status.success(), "invalid name must fail");
    // kubectl words 422s from the Status details (kind, name, causes).
    let err = stderr(&output);
    assert!(
        err.contains(r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value"#),
        "{err}"
    );
}

/// `kubectl create -f -` of an empty ConfigMap.
fn create_from_stdin(
    server: &Server,
    v: Option<&str>,
    name: &str,
    namespace: Option<&str>,
) -> std::process::Output {
    let namespace = namespace
        .map(|ns| format!("\n  namespace: {ns}"))
        .unwrap_or_default();
    let manifest =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}{namespace}\n");
    kubectl_stdin(server, v, &["create", "-f", "-"], &manifest)
}

fn create_existing_is_already_exists(v: Option<&str>) {
    let server = Server::start();
    kubectl_ok(&server, v, &["create", "configmap", "twice"]);
    let output = kubectl(&server, v, &["create", "configmap", "twice"]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains(r#"configmaps "twice" already exists"#),
        "{err}"
    );
    let output = create_from_stdin(&server, v, "twice", None);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(err.contains("(AlreadyExists)"), "{err}");
    assert!(
        err.contains(r#"configmaps "twice" already exists"#),
        "{err}"
    );
}

fn delete_namespace_removes_its_configmaps(v: Option<&str>) {
    let server = Server::start();
    kubectl_ok(&server, v, &["create", "namespace", "gone"]);
    kubectl_ok(&server, v, &["create", "namespace", "stays"]);
    for ns in ["gone", "stays"] {
        kubectl_ok(
            &server,
            v,
            &["create", "configmap", "c", "-n", ns, "--from-literal=a=b"],
        );
        kubectl_ok(
            &server,
            v,
            &[
                "create",
                "secret",
                "generic",
                "s",
                "-n",
                ns,
                "--from-literal=a=b",
            ],
        );
    }
    let out = kubectl_ok(
        &server,
        v,
        &["delete", "namespace", "gone", "--timeout=60s"],
    );
    assert!(out.contains("namespace \"gone\" deleted"), "{out}");

    poll_until(DEADLINE, "namespace gone to disappear", || {
        let output = kubectl(&server, v, &["get", "namespace", "gone"]);
        (!output.status.success() && stderr(&output).contains("NotFound")).then_some(())
    });
    assert_not_found(&server, v, &["configmap", "c", "-n", "gone"]);
    assert_not_found(&server, v, &["secret", "s", "-n", "gone"]);
    let left = kubectl_json(&server, v, &["get", "configmaps", "-n", "gone"]);
    assert_eq!(item_names(&left), names(&[]));

    kubectl_ok(&server, v, &["get", "configmap", "c", "-n", "stays"]);
    kubectl_ok(&server, v, &["get", "secret", "s", "-n", "stays"]);

    // The name can be used again.
    kubectl_ok(&server, v, &["create", "namespace", "gone"]);
    let ns = kubectl_json(&server, v, &["get", "namespace", "gone"]);
    assert_eq!(ns["status"]["phase"], "Active");
}

fn kill9_restart_keeps_data(v: Option<&str>) {
    let mut server = Server::start();
    kubectl_ok(&server, v, &["create", "namespace", "durable"]);
    kubectl_ok(
        &server,
        v,
        &[
            "create",
            "configmap",
            "kept",
            "-n",
            "durable",
            "--from-literal=k=v",
        ],
    );
    let before = kubectl_json(&server, v, &["get", "configmap", "kept", "-n", "durable"]);
    let url = server.url().to_string();

    server.kill9();
    assert!(
        server.get("/readyz").is_err(),
        "server still answers after kill -9"
    );
    server.restart();
    assert_eq!(server.url(), url, "restart keeps the port");

    let after = kubectl_json(&server, v, &["get", "configmap", "kept", "-n", "durable"]);
    assert_eq!(after["data"], json!({"k": "v"}));
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(
        after["metadata"]["creationTimestamp"],
        before["metadata"]["creationTimestamp"]
    );
    let ns = kubectl_json(&server, v, &["get", "namespace", "durable"]);
    assert_eq!(ns["status"]["phase"], "Active");

    // Writes go on after the restart, and resource versions keep growing
    // (clients resume watches from them).
    kubectl_ok(
        &server,
        v,
        &[
            "patch",
            "configmap",
            "kept",
            "-n",
            "durable",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"v2"}}"#,
        ],
    );
    let changed = kubectl_json(&server, v, &["get", "configmap", "kept", "-n", "durable"]);
    assert_eq!(changed["data"], json!({"k": "v2"}));
    let rv = |o: &Value| {
        o["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
    };
    if let (Some(old), Some(new)) = (rv(&before), rv(&changed)) {
        assert!(
            new > old,
            "resourceVersion went from {old} to {new} across a restart"
        );
    }
}

fn api_resources(v: Option<&str>) {
    let server = Server::start();
    let rows = table(&kubectl_ok(&server, v, &["api-resources"]));
    assert_eq!(
        rows[0],
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"],
        "{rows:?}"
    );
    let row = |name: &str| {
        rows.iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("no {name} in {rows:?}"))
            .clone()
    };
    assert_eq!(
        row("configmaps"),
        ["configmaps", "cm", "v1", "true", "ConfigMap"]
    );
    assert_eq!(
        row("namespaces"),
        ["namespaces", "ns", "v1", "false", "Namespace"]
    );
    assert_eq!(
        row("leases"),
        ["leases", "coordination.k8s.io/v1", "true", "Lease"]
    );

    let out = kubectl_ok(&server, v, &["api-versions"]);
    let versions: BTreeSet<_> = out.lines().map(str::to_string).collect();
    for expected in ["v1", "coordination.k8s.io/v1"] {
        assert!(
            versions.contains(expected),
            "{expected} missing from {versions:?}"
        );
    }

    // Short names resolve through discovery.
    kubectl_ok(&server, v, &["create", "configmap", "short"]);
    kubectl_ok(&server, v, &["get", "cm", "short"]);
    kubectl_ok(&server, v, &["get", "ns", "default"]);
}

fn chunked_list(v: Option<&str>) {
    let server = Server::start();
    let expected: Vec<String> = (0..7).map(|i| format!("chunk-{i}")).collect();
    for name in &expected {
        kubectl_ok(&server, v, &["create", "configmap", name]);
    }
    // kubectl follows `continue` tokens; every object comes exactly once.
    let out = kubectl_ok(
        &server,
        v,
        &["get", "configmaps", "--chunk-size=2", "-o", "name"],
    );
    let got: Vec<_> = out
        .lines()
        .filter_map(|l| l.strip_prefix("configmap/"))
        .filter(|n| n.starts_with("chunk-"))
        .map(str::to_string)
        .collect();
    assert_eq!(got, expected, "{out}");
}

/// Server-side field validation of unknown fields: kubectl's default
/// (`--validate=strict`, so `fieldValidation=Strict`) fails the request;
/// `--validate=warn` stores the object without them and prints a warning
/// each; `--validate=false` (`Ignore`) drops them silently.
#[test]
fn unknown_fields_follow_field_validation() {
    let s = Server::start();
    let manifest = |name: &str| {
        let yaml = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  colour: red\ndata:\n  k: v\nspc: 1\n"
        );
        write_manifest(&s, &format!("{name}.yaml"), &yaml)
    };
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();

    let strict = manifest("strict");
    let out = kubectl(&s, None, &["create", "-f", strict.to_str().unwrap()]);
    assert!(!out.status.success(), "strict create must fail");
    let err = stderr(&out);
    assert!(
        err.contains("strict decoding error")
            && err.contains("unknown field \"spc\"")
            && err.contains("unknown field \"metadata.colour\""),
        "{err}"
    );
    assert!(
        !kubectl(&s, None, &["get", "configmap", "strict"])
            .status
            .success()
    );

    for (name, flag, warns) in [
        ("warn", "--validate=warn", true),
        ("ignore", "--validate=false", false),
    ] {
        let path = manifest(name);
        let out = kubectl(&s, None, &["create", flag, "-f", path.to_str().unwrap()]);
        assert!(out.status.success(), "{flag}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).contains("Warning: unknown field \"spc\""),
            warns,
            "{flag}: {}",
            stderr(&out)
        );
        let cm = kubectl_json(&s, None, &["get", "configmap", name]);
        assert!(
            cm.get("spc").is_none() && cm["metadata"].get("colour").is_none(),
            "{cm}"
        );
        assert_eq!(cm["data"]["k"], "v", "{cm}");
    }
}
