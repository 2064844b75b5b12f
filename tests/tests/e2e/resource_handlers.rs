//! End-to-end: wasm resource handlers driven by kubectl against the real
//! binary. A `ResourceHandler` applied at runtime converts a custom
//! resource between its served versions (reads, lists, watches and writes
//! in the non-storage version, lossless both ways; the deprecated one
//! warns), defaults it and
//! validates it with field paths; a failed load keeps the previous version
//! serving; a trapping or looping converter fails only the requests that
//! need it. Components of the frozen 0.1.0 WIT package run next to 0.2.0
//! ones in the admission chain.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasm_apiserver_e2e::{
    KubectlWatch, Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until,
};

fn start() -> Server {
    let dir = wasm_apiserver_e2e::plugin_dir();
    Server::start_with_args(&["--plugin-dir", dir.to_str().expect("UTF-8 path")])
}

fn apply(server: &Server, doc: &Value) -> std::process::Output {
    kubectl_stdin(server, None, &["apply", "-f", "-"], &doc.to_string())
}

fn apply_ok(server: &Server, doc: &Value) {
    let out = apply(server, doc);
    assert!(
        out.status.success(),
        "apply failed: {}\n{doc}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CRD served in `v1alpha1` (deprecated) and `v1` (the storage
/// version), with a schema per version.
fn widget_crd(plural: &str, kind: &str, alpha: Value, v1: Value) -> Value {
    let version = |name: &str, storage: bool, spec: Value| {
        json!({"name": name, "served": true, "storage": storage, "deprecated": !storage,
               "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [version("v1alpha1", false, alpha), version("v1", true, v1)],
        },
    })
}

fn handler(name: &str, file: &str, plural: &str, config: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.wasm-apiserver.io/v1alpha1",
        "kind": "ResourceHandler",
        "metadata": {"name": name},
        "spec": {
            "module": {"file": file},
            "resources": [{"group": "example.com", "resource": plural}],
            "limits": {"timeoutMillis": 300},
            "config": config,
        },
    })
}

fn wait_phase(server: &Server, name: &str, phase: &str, generation: i64) -> Value {
    poll_until(
        Duration::from_secs(20),
        &format!("resource handler {name} {phase} at generation {generation}"),
        || {
            let h = kubectl_json(server, None, &["get", "resourcehandler", name]);
            (h["status"]["phase"] == phase && h["status"]["observedGeneration"] == generation)
                .then_some(h)
        },
    )
}

fn get(server: &Server, resource: &str, name: &str) -> Value {
    kubectl_json(server, None, &["get", resource, name])
}

#[test]
fn a_wasm_converter_serves_two_versions_losslessly() {
    let server = start();
    let int = json!({"type": "integer"});
    let string = json!({"type": "string"});
    let alpha = json!({"type": "object", "properties": {
        "size": int, "color": string, "legacyId": string}});
    let v1 = json!({"type": "object", "properties": {
        "dimensions": {"type": "object", "properties": {"size": int}},
        "appearance": {"type": "object", "properties": {"color": string, "finish": string}}}});
    apply_ok(&server, &widget_crd("widgets", "Widget", alpha, v1));
    kubectl_ok(
        &server,
        None,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=10s",
            "crd/widgets.example.com",
        ],
    );
    apply_ok(
        &server,
        &handler(
            "widgets",
            "widget_converter.wasm",
            "widgets",
            json!({"sizeStep": 2}),
        ),
    );
    let active = wait_phase(&server, "widgets", "Active", 1);
    assert!(
        active["status"]["digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{active}"
    );
    let table = kubectl_ok(&server, None, &["get", "resourcehandlers"]);
    assert!(
        table.contains("widgets") && table.contains("Active"),
        "{table}"
    );

    // Written in v1alpha1, stored in v1, read in both.
    apply_ok(
        &server,
        &json!({"apiVersion": "example.com/v1alpha1", "kind": "Widget",
            "metadata": {"name": "flat", "namespace": "default"},
            "spec": {"size": 4, "color": "red", "legacyId": "L-1"}}),
    );
    let as_v1 = get(&server, "widgets.v1.example.com", "flat");
    assert_eq!(as_v1["apiVersion"], "example.com/v1");
    assert_eq!(
        as_v1["spec"],
        json!({"dimensions": {"size": 4}, "appearance": {"color": "red"}})
    );
    assert_eq!(
        as_v1["metadata"]["annotations"]["example.com/v1alpha1-legacy-id"], "L-1",
        "what v1 cannot hold travels in an annotation: {as_v1}"
    );
    assert_eq!(
        as_v1["metadata"]["labels"]["example.com/size-class"], "small",
        "the handler's defaulting ran: {as_v1}"
    );
    let out = kubectl(
        &server,
        None,
        &["get", "widgets.v1alpha1.example.com", "flat"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && stderr.contains(
                "Warning: example.com/v1alpha1 Widget is deprecated; use example.com/v1 Widget"
            ),
        "a deprecated version warns: {stderr}"
    );
    let as_alpha = get(&server, "widgets.v1alpha1.example.com", "flat");
    assert_eq!(
        as_alpha["spec"],
        json!({"size": 4, "color": "red", "legacyId": "L-1"})
    );
    assert!(
        as_alpha["metadata"].get("annotations").is_none()
            || !as_alpha["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .keys()
                .any(|k| k.starts_with("example.com/")),
        "the round trip leaves no conversion annotation: {as_alpha}"
    );

    // Written in v1 with a field v1alpha1 lacks; updated through v1alpha1;
    // the field survives.
    apply_ok(
        &server,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "nested", "namespace": "default"},
            "spec": {"dimensions": {"size": 12}, "appearance": {"color": "blue", "finish": "matte"}}}),
    );
    let nested_alpha = get(&server, "widgets.v1alpha1.example.com", "nested");
    assert_eq!(nested_alpha["spec"], json!({"size": 12, "color": "blue"}));
    assert_eq!(
        nested_alpha["metadata"]["annotations"]["example.com/v1-finish"],
        "matte"
    );
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "widgets.v1alpha1.example.com",
            "nested",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":14}}"#,
        ],
    );
    let nested = get(&server, "widgets.v1.example.com", "nested");
    assert_eq!(
        nested["spec"],
        json!({"dimensions": {"size": 14}, "appearance": {"color": "blue", "finish": "matte"}}),
        "an update through v1alpha1 keeps v1's finish: {nested}"
    );
    assert!(
        nested["metadata"].get("annotations").is_none_or(|a| a
            .as_object()
            .is_none_or(|a| !a.contains_key("example.com/v1-finish"))),
        "{nested}"
    );
    assert_eq!(
        nested["metadata"]["labels"]["example.com/size-class"],
        "large"
    );

    // A list and a watch in the non-storage version convert every object.
    let list = kubectl_json(&server, None, &["get", "widgets.v1alpha1.example.com"]);
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{list}");
    for item in items {
        assert_eq!(item["apiVersion"], "example.com/v1alpha1", "{item}");
        assert!(item["spec"]["size"].is_i64(), "{item}");
        assert!(item["spec"].get("dimensions").is_none(), "{item}");
    }
    let mut watch = KubectlWatch::spawn(
        &server,
        None,
        &[
            "get",
            "widgets.v1alpha1.example.com",
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ],
    );
    apply_ok(
        &server,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "watched", "namespace": "default"},
            "spec": {"dimensions": {"size": 2}, "appearance": {"color": "red"}}}),
    );
    let event = watch.wait_for_json(Duration::from_secs(10), "the watched widget", |d| {
        d["object"]["metadata"]["name"] == "watched"
    });
    assert_eq!(event["object"]["apiVersion"], "example.com/v1alpha1");
    assert_eq!(event["object"]["spec"], json!({"size": 2, "color": "red"}));
    drop(watch);

    // Validation beyond the schema names the field, in the request's version.
    for (version, spec, field) in [
        ("v1alpha1", json!({"size": 3}), "spec.size"),
        (
            "v1",
            json!({"dimensions": {"size": 5}}),
            "spec.dimensions.size",
        ),
    ] {
        let out = apply(
            &server,
            &json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget",
                "metadata": {"name": "odd", "namespace": "default"}, "spec": spec}),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("is invalid") && stderr.contains(field),
            "{version}: {stderr}"
        );
        assert!(stderr.contains("must be a multiple of 2"), "{stderr}");
    }

    // A handler that fails to load is reported; the previous one serves on.
    let mut broken = handler("widgets", "missing.wasm", "widgets", json!({}));
    broken["spec"]["module"] = json!({"file": "no_such_module.wasm"});
    apply_ok(&server, &broken);
    let failed = wait_phase(&server, "widgets", "Failed", 2);
    assert!(
        failed["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no_such_module.wasm")),
        "{failed}"
    );
    assert_eq!(failed["status"]["activeGeneration"], 1, "{failed}");
    let still = get(&server, "widgets.v1alpha1.example.com", "nested");
    assert_eq!(still["spec"], json!({"size": 14, "color": "blue"}));

    // Deleting the handler falls back to `conversion: None` semantics.
    kubectl_ok(&server, None, &["delete", "resourcehandler", "widgets"]);
    poll_until(
        Duration::from_secs(10),
        "conversion without the handler",
        || {
            let w = get(&server, "widgets.v1alpha1.example.com", "nested");
            (w["spec"].get("dimensions").is_some()).then_some(())
        },
    );
}

#[test]
fn a_hostile_converter_fails_only_the_requests_that_need_it() {
    let server = start();
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    apply_ok(
        &server,
        &widget_crd("gadgets", "Gadget", open.clone(), open),
    );
    kubectl_ok(
        &server,
        None,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=10s",
            "crd/gadgets.example.com",
        ],
    );
    apply_ok(
        &server,
        &handler("gadgets", "hostile_handler.wasm", "gadgets", json!("trap")),
    );
    wait_phase(&server, "gadgets", "Active", 1);

    // The storage version needs no conversion.
    apply_ok(
        &server,
        &json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g1", "namespace": "default"}, "spec": {"a": 1}}),
    );
    assert_eq!(
        get(&server, "gadgets.v1.example.com", "g1")["spec"],
        json!({"a": 1})
    );
    let out = kubectl(
        &server,
        None,
        &["get", "gadgets.v1alpha1.example.com", "g1"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("conversion by resource handler") && stderr.contains("trapped"),
        "{stderr}"
    );
    // A write in the other version fails before anything is stored.
    let out = apply(
        &server,
        &json!({"apiVersion": "example.com/v1alpha1", "kind": "Gadget",
            "metadata": {"name": "g2", "namespace": "default"}, "spec": {"a": 2}}),
    );
    assert!(!out.status.success());
    let list = kubectl_json(&server, None, &["get", "gadgets.v1.example.com"]);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");

    // A looping converter is stopped at its time limit.
    let mut looping = handler("gadgets", "hostile_handler.wasm", "gadgets", json!("loop"));
    looping["metadata"]["name"] = json!("gadgets");
    apply_ok(&server, &looping);
    wait_phase(&server, "gadgets", "Active", 2);
    let start = Instant::now();
    let out = kubectl(
        &server,
        None,
        &["get", "gadgets.v1alpha1.example.com", "g1"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("timed out"), "{stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );

    // The server keeps serving everything else.
    kubectl_ok(&server, None, &["get", "namespaces"]);
    assert_eq!(
        get(&server, "gadgets.v1.example.com", "g1")["spec"],
        json!({"a": 1})
    );
}

#[test]
fn components_of_the_frozen_wit_package_run_next_to_current_ones() {
    let server = start();
    let plugin = |name: &str, file: &str, config: Value| {
        json!({
            "apiVersion": "admission.wasm-apiserver.io/v1alpha1",
            "kind": "AdmissionPlugin",
            "metadata": {"name": name},
            "spec": {
                "module": {"file": file},
                "phases": ["Validating"],
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["*"],
                           "resources": ["configmaps"]}],
                "config": config,
            },
        })
    };
    apply_ok(
        &server,
        &plugin(
            "frozen",
            "frozen_deny_names.wasm",
            json!({"prefix": "legacy-"}),
        ),
    );
    apply_ok(
        &server,
        &plugin("labels", "require_labels.wasm", json!({"labels": ["team"]})),
    );
    for name in ["frozen", "labels"] {
        poll_until(Duration::from_secs(20), name, || {
            let p = kubectl_json(&server, None, &["get", "admissionplugin", name]);
            (p["status"]["phase"] == "Active").then_some(())
        });
    }
    let cm = |name: &str, labels: Value| {
        apply(
            &server,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default", "labels": labels}}),
        )
    };
    let out = cm("legacy-one", json!({"team": "a"}));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("\"frozen\"") && stderr.contains("reserved"),
        "{stderr}"
    );
    let out = cm("plain", json!({}));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("\"labels\""), "{stderr}");
    let out = cm("plain", json!({"team": "a"}));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
