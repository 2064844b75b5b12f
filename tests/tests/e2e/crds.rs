//! End-to-end: CustomResourceDefinitions driven by kubectl. A CRD applied
//! at runtime is served at once (discovery, tables, categories); its
//! structural schema validates, prunes and defaults; `status` is a
//! subresource; name conflicts are reported, not served; deleting the CRD
//! deletes its objects.

use std::time::Duration;

use serde_json::{Value, json};
use wasm_apiserver_e2e::{
    KubectlWatch, Server, expect_success, kubectl, kubectl_json, kubectl_ok, kubectl_stdin,
    poll_until,
};

fn crd(name_kind: (&str, &str), group: &str) -> Value {
    let (plural, kind) = name_kind;
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                      "shortNames": ["wd"], "categories": ["examples"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "x-kubernetes-validations": [
                                {"rule": "self.size <= 8 || self.color == 'blue'", "message": "big widgets must be blue"},
                            ],
                            "properties": {
                                "size": {"type": "integer", "minimum": 1, "maximum": 10,
                                         "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "size may not shrink"}]},
                                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                          "x-kubernetes-list-map-keys": ["port"],
                                          "items": {"type": "object", "properties": {
                                              "port": {"type": "integer"},
                                              "protocol": {"type": "string", "default": "TCP"}}}},
                            },
                        },
                        "status": {"type": "object", "properties": {
                            "conditions": {"type": "array", "items": {"type": "object",
                                "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}},
                    },
                }},
            }],
        },
    })
}

fn apply(server: &Server, doc: &Value) -> std::process::Output {
    kubectl_stdin(server, None, &["apply", "-f", "-"], &doc.to_string())
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

/// Waits until the CRD `name` (`crd/<plural>.<group>`) is Established.
fn wait_established(server: &Server, name: &str) {
    kubectl_ok(
        server,
        None,
        &["wait", "--for=condition=Established", "--timeout=10s", name],
    );
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn custom_resources_are_served_validated_and_cleaned_up() {
    let server = Server::start();
    let definition = crd(("widgets", "Widget"), "example.com");
    let out = apply(&server, &definition);
    expect_success(&out, None, &["apply", "-f", "-"]);
    wait_established(&server, "crd/widgets.example.com");
    let status = kubectl_json(&server, None, &["get", "crd", "widgets.example.com"]);
    assert_eq!(status["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(status["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(status["spec"]["names"]["listKind"], "WidgetList");

    // Watch, create, get with printer columns, defaults.
    let mut watch = KubectlWatch::spawn(&server, None, &["get", "widgets", "-w", "-o", "json"]);
    let mut w1 = widget("w1", json!({"size": 3, "ports": [{"port": 80}]}));
    w1["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    let out = apply(&server, &w1);
    expect_success(&out, None, &["apply"]);
    watch.wait_for_json(Duration::from_secs(15), "the widget's ADDED", |d| {
        d["metadata"]["name"] == "w1"
    });
    let got = kubectl_json(&server, None, &["get", "wd", "w1"]);
    assert_eq!(got["spec"]["color"], "red", "defaulted: {got}");
    assert_eq!(
        got["spec"]["ports"][0]["protocol"], "TCP",
        "defaulted in list items: {got}"
    );
    assert!(
        got.get("status").is_none(),
        "a create's status is dropped: {got}"
    );
    let table = kubectl_ok(&server, None, &["get", "widgets"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SIZE", "READY", "AGE"], "{table}");
    let wide = kubectl_ok(&server, None, &["get", "widgets", "-o", "wide"]);
    assert!(wide.lines().next().unwrap().contains("COLOR"), "{wide}");
    assert!(wide.contains("red"), "{wide}");
    // Its schema is published: kubectl explain reads it.
    let explained = kubectl_ok(&server, None, &["explain", "widgets.spec"]);
    assert!(
        explained.contains("size") && explained.contains("<integer>"),
        "{explained}"
    );
    let category = kubectl_ok(&server, None, &["get", "examples"]);
    assert!(category.contains("w1"), "{category}");

    // Schema violations: 422 with field paths.
    let out = apply(
        &server,
        &widget("w2", json!({"size": 11, "color": "green"})),
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(
            "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
        ),
        "{err}"
    );
    assert!(
        err.contains("spec.color: Unsupported value: \"green\""),
        "{err}"
    );
    let out = apply(&server, &widget("w3", json!({"color": "red"})));
    assert!(
        stderr(&out).contains("spec.size: Required value"),
        "{}",
        stderr(&out)
    );
    let out = apply(
        &server,
        &widget(
            "w4",
            json!({"size": 1, "ports": [{"port": 1}, {"port": 1}]}),
        ),
    );
    assert!(
        stderr(&out).contains("spec.ports[1]: Duplicate value"),
        "{}",
        stderr(&out)
    );

    // Unknown fields: kubectl's strict validation names them; without it they are pruned.
    let extra = widget("w5", json!({"size": 2, "extra": true}));
    let out = apply(&server, &extra);
    assert!(
        stderr(&out).contains("unknown field \"spec.extra\""),
        "{}",
        stderr(&out)
    );
    let out = kubectl_stdin(
        &server,
        None,
        &["apply", "--validate=false", "-f", "-"],
        &extra.to_string(),
    );
    expect_success(&out, None, &["apply", "--validate=false"]);
    let pruned = kubectl_json(&server, None, &["get", "widget", "w5"]);
    assert!(pruned["spec"].get("extra").is_none(), "{pruned}");

    // Patches and the status subresource.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":4}}"#,
        ],
    );
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "widget",
            "w1",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/color","value":"blue"}]"#,
        ],
    );
    let before = kubectl_json(&server, None, &["get", "widget", "w1"]);
    assert_eq!(
        (
            before["spec"]["size"].clone(),
            before["spec"]["color"].clone()
        ),
        (json!(4), json!("blue"))
    );
    let generation = before["metadata"]["generation"].as_i64().unwrap();
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "widget",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]},"spec":{"size":9}}"#,
        ],
    );
    let after = kubectl_json(&server, None, &["get", "widget", "w1"]);
    assert_eq!(
        after["status"]["conditions"][0]["status"], "True",
        "{after}"
    );
    assert_eq!(
        after["spec"]["size"], 4,
        "a status write does not change spec: {after}"
    );
    assert_eq!(
        after["metadata"]["generation"].as_i64().unwrap(),
        generation
    );
    let table = kubectl_ok(&server, None, &["get", "widget", "w1"]);
    assert!(table.lines().nth(1).unwrap().contains("True"), "{table}");
    // A spec write keeps status and bumps the generation.
    let mut replaced = after.clone();
    replaced["spec"]["size"] = json!(5);
    replaced["status"] = json!({});
    let out = kubectl_stdin(
        &server,
        None,
        &["replace", "-f", "-"],
        &replaced.to_string(),
    );
    expect_success(&out, None, &["replace"]);
    let replaced = kubectl_json(&server, None, &["get", "widget", "w1"]);
    assert_eq!(
        replaced["status"]["conditions"][0]["status"], "True",
        "{replaced}"
    );
    assert_eq!(
        replaced["metadata"]["generation"].as_i64().unwrap(),
        generation + 1
    );

    // A second CRD claiming the same kind in the group is not served.
    let rival = crd(("gadgets", "Widget"), "example.com");
    expect_success(&apply(&server, &rival), None, &["apply"]);
    let rival = kubectl_json(&server, None, &["get", "crd", "gadgets.example.com"]);
    let accepted = rival["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "NamesAccepted")
        .cloned()
        .unwrap();
    assert_eq!(
        (accepted["status"].clone(), accepted["reason"].clone()),
        (json!("False"), json!("NameConflict")),
        "{rival}"
    );
    let (code, _) = server.get("/apis/example.com/v1/gadgets").unwrap();
    assert_eq!(code, 404);
    kubectl_ok(&server, None, &["delete", "crd", "gadgets.example.com"]);

    // Deleting the CRD deletes its objects; created again, it starts empty.
    kubectl_ok(
        &server,
        None,
        &["delete", "crd", "widgets.example.com", "--timeout=30s"],
    );
    poll_until(
        Duration::from_secs(15),
        "the widgets resource to go",
        || {
            let (code, _) = server
                .get("/apis/example.com/v1/namespaces/default/widgets")
                .unwrap();
            (code == 404).then_some(())
        },
    );
    expect_success(&apply(&server, &definition), None, &["apply"]);
    wait_established(&server, "crd/widgets.example.com");
    let listed = kubectl_json(&server, None, &["get", "widgets"]);
    assert_eq!(listed["items"], json!([]), "{listed}");
}

#[test]
fn cel_rules_validate_custom_resources() {
    let server = Server::start();
    expect_success(
        &apply(&server, &crd(("widgets", "Widget"), "example.com")),
        None,
        &["apply"],
    );
    wait_established(&server, "crd/widgets.example.com");
    let out = apply(&server, &widget("big", json!({"size": 9})));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("spec: Invalid value: \"object\": big widgets must be blue"),
        "{err}"
    );
    expect_success(
        &apply(&server, &widget("big", json!({"size": 9, "color": "blue"}))),
        None,
        &["apply"],
    );
    // A transition rule: checked on updates only.
    let out = kubectl(
        &server,
        None,
        &[
            "patch",
            "widget",
            "big",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":2}}"#,
        ],
    );
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("size may not shrink"),
        "{err}"
    );
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "widget",
            "big",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":10}}"#,
        ],
    );

    // A rule that does not compile refuses the CRD, naming the rule.
    let mut bad = crd(("gizmos", "Gizmo"), "example.com");
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([{"rule": "self.size >"}]);
    let out = apply(&server, &bad);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("properties[spec].x-kubernetes-validations[0].rule")
            && err.contains("compilation failed"),
        "{err}"
    );
}

#[test]
fn non_structural_schemas_are_refused_and_crds_survive_a_restart() {
    let mut server = Server::start();
    let mut bad = crd(("things", "Thing"), "example.org");
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("type");
    let out = apply(&server, &bad);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value"
        ),
        "{err}"
    );
    let good = crd(("things", "Thing"), "example.org");
    expect_success(&apply(&server, &good), None, &["apply"]);
    let thing = json!({"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {"size": 1}});
    poll_until(Duration::from_secs(10), "the thing to be created", || {
        let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], &thing.to_string());
        out.status.success().then_some(())
    });
    server.restart();
    let got = kubectl(&server, None, &["get", "things", "t", "-o", "name"]);
    assert!(got.status.success(), "{}", stderr(&got));
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        "thing.example.org/t"
    );
}

#[test]
fn versions_share_one_storage_version_and_scale_works() {
    let server = Server::start();
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}, "selector": {"type": "string"}}},
        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}, "selector": {"type": "string"}}}}}});
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage, "schema": schema,
               "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                   "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}}})
    };
    let definition = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "pools.example.net"},
        "spec": {"group": "example.net", "scope": "Namespaced",
                 "names": {"plural": "pools", "kind": "Pool"},
                 "versions": [version("v1alpha1", false), version("v1", true)]},
    });
    expect_success(&apply(&server, &definition), None, &["apply"]);
    wait_established(&server, "crd/pools.example.net");
    let pool = json!({"apiVersion": "example.net/v1alpha1", "kind": "Pool",
                      "metadata": {"name": "p1"}, "spec": {"replicas": 1}});
    expect_success(&apply(&server, &pool), None, &["apply"]);
    let v1 = kubectl_json(&server, None, &["get", "pools.v1.example.net", "p1"]);
    assert_eq!(v1["apiVersion"], "example.net/v1", "{v1}");
    let (code, body) = server
        .get("/apis/example.net/v1alpha1/namespaces/default/pools")
        .unwrap();
    assert_eq!(code, 200);
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        listed["items"][0]["apiVersion"], "example.net/v1alpha1",
        "{listed}"
    );
    let crd = kubectl_json(&server, None, &["get", "crd", "pools.example.net"]);
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));

    kubectl_ok(&server, None, &["scale", "pool", "p1", "--replicas=5"]);
    let scaled = kubectl_json(&server, None, &["get", "pool", "p1"]);
    assert_eq!(scaled["spec"]["replicas"], 5, "{scaled}");
    let (code, body) = server
        .get("/apis/example.net/v1/namespaces/default/pools/p1/scale")
        .unwrap();
    assert_eq!(code, 200, "{body}");
    let scale: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 5);
}
