//! End-to-end: server-side apply and managed fields, through kubectl,
//! kube-rs and the official Python client.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};
use wasm_apiserver_e2e::{Server, kube_client, kubectl_json, kubectl_ok, kubectl_stdin};

fn deployment(name: &str, replicas: u32, extra_label: Option<&str>) -> String {
    let labels = match extra_label {
        Some(l) => format!(r#"{{"app": "{name}", "{l}": "yes"}}"#),
        None => format!(r#"{{"app": "{name}"}}"#),
    };
    format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {{"name": "{name}", "labels": {labels}}},
            "spec": {{"replicas": {replicas}, "selector": {{"matchLabels": {{"app": "{name}"}}}},
                "template": {{"metadata": {{"labels": {{"app": "{name}"}}}},
                    "spec": {{"containers": [{{"name": "web", "image": "nginx"}}]}}}}}}}}"#
    )
}

fn apply(server: &Server, manifest: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["apply", "--server-side", "-f", "-"];
    all.extend(args);
    kubectl_stdin(server, None, &all, manifest)
}

/// The managers of `obj`'s fields other than the controllers (the
/// deployment controller writes its revision annotation and the status, as
/// kube-controller-manager does upstream).
fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("no managedFields in {obj}"))
        .iter()
        .filter(|e| {
            !e["manager"]
                .as_str()
                .unwrap_or_default()
                .ends_with("-controller")
        })
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The entry of `manager` with `operation`.
fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> &'a Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
        .unwrap_or_else(|| panic!("no {manager}/{operation} entry in {obj}"))
}

#[test]
fn kubectl_conflicts_force_removal_and_shared_fields() {
    let server = Server::start();
    let out = apply(&server, &deployment("web", 2, Some("tier")), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = kubectl_json(
        &server,
        None,
        &["get", "deployment", "web", "--show-managed-fields"],
    );
    assert_eq!(managers(&got), [("kubectl".into(), "Apply".into())]);
    // Defaults are nobody's: the applier owns what it applied.
    assert!(
        entry(&got, "kubectl", "Apply")["fieldsV1"]["f:spec"]
            .get("f:revisionHistoryLimit")
            .is_none()
    );

    // Another manager changing replicas conflicts, naming the owner.
    let out = apply(
        &server,
        &deployment("web", 5, Some("tier")),
        &["--field-manager=ops"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"conflict with "kubectl""#) && err.contains(".spec.replicas"),
        "{err}"
    );
    let got = kubectl_json(&server, None, &["get", "deployment", "web"]);
    assert_eq!(got["spec"]["replicas"], 2, "a conflict changes nothing");

    // Forced, ops owns replicas.
    let out = apply(
        &server,
        &deployment("web", 5, Some("tier")),
        &["--field-manager=ops", "--force-conflicts"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = kubectl_json(
        &server,
        None,
        &["get", "deployment", "web", "--show-managed-fields"],
    );
    assert_eq!(got["spec"]["replicas"], 5);
    assert!(
        entry(&got, "ops", "Apply")["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_some()
    );
    assert!(
        entry(&got, "kubectl", "Apply")["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none()
    );

    // kubectl drops the `tier` label (owned by kubectl and ops: shared, so
    // it stays) and its replicas (now ops's: stays at 5).
    let out = apply(&server, &deployment("web", 5, None), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = kubectl_json(&server, None, &["get", "deployment", "web"]);
    assert_eq!(got["metadata"]["labels"]["tier"], "yes", "shared with ops");
    // ops drops it too: now nobody owns it and it is removed.
    let out = apply(
        &server,
        &deployment("web", 5, None),
        &["--field-manager=ops"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = kubectl_json(&server, None, &["get", "deployment", "web"]);
    assert!(got["metadata"]["labels"].get("tier").is_none(), "{got}");

    // Updates are recorded as Update entries (kubectl scale writes `scale`).
    kubectl_ok(
        &server,
        None,
        &["scale", "deployment", "web", "--replicas=7"],
    );
    kubectl_ok(&server, None, &["label", "deployment", "web", "edited=1"]);
    let got = kubectl_json(
        &server,
        None,
        &["get", "deployment", "web", "--show-managed-fields"],
    );
    let label = entry(&got, "kubectl-label", "Update");
    assert_eq!(
        label["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:edited": {}}}})
    );
    // Without --show-managed-fields kubectl hides them (the server sends them).
    let plain = kubectl_json(&server, None, &["get", "deployment", "web"]);
    assert!(plain["metadata"].get("managedFields").is_none());
}

#[test]
fn kubectl_migrates_client_side_apply_to_server_side() {
    let server = Server::start();
    let out = kubectl_stdin(
        &server,
        None,
        &["apply", "-f", "-"],
        &deployment("csa", 1, Some("tier")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = kubectl_json(
        &server,
        None,
        &["get", "deployment", "csa", "--show-managed-fields"],
    );
    assert!(managers(&got).contains(&("kubectl-client-side-apply".into(), "Update".into())));
    // The first server-side apply takes over the client-side fields: no
    // conflict, and a field it then drops is removed.
    let out = apply(&server, &deployment("csa", 1, Some("tier")), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = apply(&server, &deployment("csa", 1, None), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = kubectl_json(
        &server,
        None,
        &["get", "deployment", "csa", "--show-managed-fields"],
    );
    assert!(got["metadata"]["labels"].get("tier").is_none(), "{got}");
    assert_eq!(got["spec"]["replicas"], 1);
}

/// A CRD too large for client-side apply's last-applied annotation
/// (256 KiB) applies server-side.
#[test]
fn a_large_crd_applies_server_side() {
    let server = Server::start();
    let mut props = serde_json::Map::new();
    for i in 0..2000 {
        props.insert(
            format!("field{i}"),
            json!({"type": "string", "description": format!("Field number {i} of a large generated schema, described at some length so the document grows.")}),
        );
    }
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "bigs.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "bigs", "singular": "big", "kind": "Big"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": props}}}}}]},
    })
    .to_string();
    assert!(crd.len() > 262_144, "{}", crd.len());
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], &crd);
    assert!(
        !out.status.success(),
        "client-side apply cannot store its annotation"
    );
    let out = apply(&server, &crd, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = kubectl_json(
        &server,
        None,
        &["get", "crd", "bigs.example.com", "--show-managed-fields"],
    );
    assert_eq!(managers(&got), [("kubectl".into(), "Apply".into())]);
}

#[test]
fn kube_rs_applies_built_in_custom_and_status() {
    let server = Server::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = kube_client(&server);
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let d: Value = serde_json::from_str(&deployment("kr", 2, None)).unwrap();
        let params = PatchParams::apply("kube-rs-controller").force();
        let created = deployments.patch("kr", &params, &Patch::Apply(&d)).await.expect("apply creates");
        assert_eq!(created.spec.replicas, Some(2));
        let entries = created.metadata.managed_fields.clone().unwrap_or_default();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].manager.as_deref(), Some("kube-rs-controller"));
        assert_eq!(entries[0].operation.as_deref(), Some("Apply"));

        // A status apply is its own entry, on the status subresource.
        let status = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "status": {"observedGeneration": 1, "replicas": 2}});
        let after = deployments
            .patch_status("kr", &PatchParams::apply("status-writer").force(), &Patch::Apply(&status))
            .await
            .expect("status apply");
        assert_eq!(after.status.as_ref().unwrap().replicas, Some(2));
        let entries = after.metadata.managed_fields.unwrap_or_default();
        let status_entry = entries
            .iter()
            .find(|e| e.manager.as_deref() == Some("status-writer"))
            .expect("status-writer entry");
        assert_eq!(status_entry.subresource.as_deref(), Some("status"));
        assert_eq!(after.spec.replicas, Some(2), "a status apply keeps spec");

        // The scale subresource applies in its own kind.
        let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "kr"}, "spec": {"replicas": 4}});
        let scaled = deployments
            .patch_scale("kr", &PatchParams::apply("autoscaler").force(), &Patch::Apply(&scale))
            .await
            .expect("scale apply");
        assert_eq!(scaled.spec.unwrap().replicas, Some(4));
        let d = deployments.get("kr").await.unwrap();
        assert_eq!(d.spec.replicas, Some(4));

        // Without fieldManager an apply is refused.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        let err = cms
            .patch("c", &PatchParams { field_manager: None, ..PatchParams::default() }, &Patch::Apply(&cm))
            .await
            .expect_err("no field manager");
        assert!(format!("{err}").contains("fieldManager"), "{err}");

        // A custom resource, with its CRD's schema.
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(client.clone());
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                        "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}}}}}}]}});
        crds.patch("widgets.example.com", &params, &Patch::Apply(&crd)).await.expect("CRD apply");
        let established = await_condition(crds, "widgets.example.com", conditions::is_crd_established());
        tokio::time::timeout(Duration::from_secs(10), established).await.expect("established").unwrap();
        let gvk = kube::core::GroupVersionKind::gvk("example.com", "v1", "Widget");
        let ar = kube::core::ApiResource::from_gvk(&gvk);
        let widgets: Api<kube::core::DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 3, "color": "red"}});
        widgets.patch("w", &PatchParams::apply("a"), &Patch::Apply(&w)).await.expect("CR apply");
        let w2 = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 4}});
        let err = widgets
            .patch("w", &PatchParams::apply("b"), &Patch::Apply(&w2))
            .await
            .expect_err("size is a's");
        assert!(format!("{err}").contains("conflict"), "{err}");
        let forced = widgets
            .patch("w", &PatchParams::apply("b").force(), &Patch::Apply(&w2))
            .await
            .expect("forced");
        assert_eq!(forced.data["spec"], json!({"size": 4, "color": "red"}));
    });
}

/// Runs `script` with the official Python client, `cms` bound to
/// ConfigMaps of `server` (dynamic client); its stdout as JSON.
fn python_configmaps(server: &Server, script: &str) -> Value {
    let prelude = r#"
import sys, json
from kubernetes import config, dynamic
from kubernetes.client import api_client
client = dynamic.DynamicClient(api_client.ApiClient(configuration=config.load_kube_config(config_file=sys.argv[1])))
cms = client.resources.get(api_version="v1", kind="ConfigMap")
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", &format!("{prelude}{script}")])
        .arg(server.kubeconfig_path())
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn python_client_server_side_apply() {
    let server = Server::start();
    let script = r#"
body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py", "namespace": "default"}, "data": {"a": "1"}}
out = cms.server_side_apply(body=body, field_manager="python", namespace="default")
print(json.dumps({"data": out.data.to_dict(), "managers": [e.manager for e in out.metadata.managedFields]}))
"#;
    let got = python_configmaps(&server, script);
    assert_eq!(got["data"], json!({"a": "1"}));
    assert_eq!(got["managers"], json!(["python"]));
}

/// Issue 38: a map applied as `{}` and then filled again keeps what was
/// applied (it used to be dropped with a success answer), through kubectl
/// and through the Python client, with managedFields agreeing.
#[test]
fn an_emptied_map_takes_later_applies() {
    let server = Server::start();
    let cm = |data: &str| {
        format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {{"name": "k", "namespace": "default", "labels": {data}}}, "data": {data}}}"#
        )
    };
    for data in [r#"{"a": "1", "b": "2"}"#, "{}", r#"{"a": "3"}"#] {
        let out = apply(&server, &cm(data), &["--field-manager=k"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = kubectl_json(
            &server,
            None,
            &["get", "cm", "k", "-o", "json", "--show-managed-fields"],
        );
        let want: Value = serde_json::from_str(data).unwrap();
        let stored = |v: &Value| if v.is_null() { json!({}) } else { v.clone() };
        assert_eq!(
            stored(&got["data"]),
            want,
            "data after applying {data}: {got}"
        );
        assert_eq!(
            stored(&got["metadata"]["labels"]),
            want,
            "labels after applying {data}: {got}"
        );
        let owned = &entry(&got, "k", "Apply")["fieldsV1"]["f:data"];
        for key in want.as_object().unwrap().keys() {
            assert!(owned.get(format!("f:{key}")).is_some(), "{owned}");
        }
    }

    let script = r#"
seen = []
for data in [{"a": "1", "b": "2"}, {}, {"a": "3"}]:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py", "namespace": "default"}, "data": data}
    cms.server_side_apply(body=body, field_manager="python", namespace="default")
    got = cms.get(name="py", namespace="default")
    seen.append(got.to_dict().get("data") or {})
print(json.dumps(seen))
"#;
    let got = python_configmaps(&server, script);
    assert_eq!(got, json!([{"a": "1", "b": "2"}, {}, {"a": "3"}]));
}

/// An applied configuration that names one list item twice is refused
/// with a 422 naming each duplicate, and the stored object is untouched
/// (upstream refuses it too, with a 500; merging it would keep one of the
/// two at random and applying it twice would not be idempotent).
#[test]
fn duplicate_list_keys_are_refused_and_change_nothing() {
    let server = Server::start();
    let out = apply(&server, &deployment("dup", 1, None), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = kubectl_json(&server, None, &["get", "deployment", "dup", "-o", "json"]);
    let dup = r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dup"},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx",
            "env": [{"name": "FOO", "value": "x"}, {"name": "FOO", "value": "y"}]}]}}}}"#;
    let out = apply(&server, dup, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a duplicate key was applied");
    assert!(
        stderr.contains(r#"duplicate entries for key [name=\"FOO\"]"#)
            || stderr.contains(r#"duplicate entries for key [name="FOO"]"#),
        "{stderr}"
    );
    assert!(stderr.contains("is invalid"), "not a 422 Invalid: {stderr}");
    let after = kubectl_json(&server, None, &["get", "deployment", "dup", "-o", "json"]);
    assert_eq!(
        before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"],
        "the refused apply wrote"
    );
    // Absent objects are not created from such a configuration either.
    let out = apply(
        &server,
        &dup.replace(r#""name": "dup""#, r#""name": "dup2""#),
        &[],
    );
    assert!(!out.status.success());
    let out = kubectl_stdin(&server, None, &["get", "deployment", "dup2"], "");
    assert!(!out.status.success(), "dup2 was created");
}
