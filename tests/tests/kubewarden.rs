//! Kubewarden policies, unchanged, as `AdmissionPlugin`s of the real binary
//! driven by kubectl: the policies of `tests/kubewarden-policies/`, built
//! from Kubewarden's published Rust SDK for `wasm32-wasip1` (no `kwctl
//! annotate`), loaded with `spec.module.format: kubewarden` from
//! `--plugin-dir` and inline as base64.
//!
//! Covered: a privileged Pod denied with the policy's message, an
//! unprivileged one created; bad settings reported in the object's status
//! while the previous version keeps serving; the mutator's label stored;
//! a looping policy contained under both failure policies; a host
//! capability answering the clear "not available" error; an unknown format
//! refused; the example manifest `examples/kubewarden-policies.yaml`.

use base64::Engine;
use std::time::{Duration, Instant};
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, write_manifest};

fn start() -> Server {
    let dir = wasm_apiserver_e2e::kubewarden_policy_dir();
    Server::start_with_args(&["--plugin-dir", dir.to_str().expect("UTF-8 path")])
}

/// An `AdmissionPlugin` running a Kubewarden policy on Pods and ConfigMaps;
/// `module` is the flow mapping's inside (`file: x.wasm` or `wasm: ...`).
fn policy_yaml(name: &str, module: &str, phase: &str, failure: &str, settings: &str) -> String {
    format!(
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: {name}
spec:
  module: {{{module}, format: kubewarden}}
  phases: [{phase}]
  failurePolicy: {failure}
  limits: {{timeoutMillis: 300}}
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [""]
    apiVersions: ["*"]
    resources: [pods, configmaps]
  config: {settings}
"#
    )
}

fn apply(server: &Server, name: &str, yaml: &str) {
    let path = write_manifest(server, &format!("{name}.yaml"), yaml);
    kubectl_ok(server, None, &["apply", "-f", path.to_str().unwrap()]);
}

fn pod_yaml(name: &str, privileged: bool) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: app
    image: nginx
  - name: debug
    image: busybox
    securityContext: {{privileged: {privileged}}}
"#
    )
}

fn create_pod(server: &Server, name: &str, privileged: bool) -> std::process::Output {
    let path = write_manifest(
        server,
        &format!("pod-{name}.yaml"),
        &pod_yaml(name, privileged),
    );
    kubectl(server, None, &["create", "-f", path.to_str().unwrap()])
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn plugin_status(server: &Server, name: &str) -> serde_json::Value {
    kubectl_json(server, None, &["get", "admissionplugin", name])["status"].clone()
}

#[test]
fn privileged_pods_are_denied_and_bad_settings_keep_the_old_version() {
    let s = start();
    apply(
        &s,
        "no-privileged",
        &policy_yaml(
            "no-privileged",
            "file: kw_privileged_pods.wasm",
            "Validating",
            "Fail",
            "{exempt_namespaces: [kube-system]}",
        ),
    );
    let status = plugin_status(&s, "no-privileged");
    assert_eq!(status["phase"], "Active", "{status}");

    let out = create_pod(&s, "plain", false);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = create_pod(&s, "root", true);
    assert!(!out.status.success(), "a privileged Pod was created");
    let err = stderr(&out);
    assert!(
        err.contains(
            "admission plugin \"no-privileged\" denied the request: \
             privileged containers are not allowed: debug"
        ),
        "{err}"
    );
    // The policy gave no code: 400, as for a webhook's denial.
    assert!(err.contains("(BadRequest)"), "{err}");

    // Bad settings: the policy's validate_settings rejects them at load;
    // the status says why and the previous version keeps serving.
    apply(
        &s,
        "no-privileged",
        &policy_yaml(
            "no-privileged",
            "file: kw_privileged_pods.wasm",
            "Validating",
            "Fail",
            "{exempt_namespaces: [Bad_NS]}",
        ),
    );
    let status = plugin_status(&s, "no-privileged");
    assert_eq!(status["phase"], "Failed", "{status}");
    assert_eq!(status["observedGeneration"], 2, "{status}");
    assert_eq!(status["activeGeneration"], 1, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(r#"exempt_namespaces: \"Bad_NS\" is not a valid namespace name"#)
            || message.contains(r#"exempt_namespaces: "Bad_NS" is not a valid namespace name"#),
        "{status}"
    );
    let out = create_pod(&s, "root2", true);
    assert!(
        stderr(&out).contains("privileged containers are not allowed"),
        "the previous version stopped serving: {}",
        stderr(&out)
    );
    let out = create_pod(&s, "plain2", false);
    assert!(out.status.success(), "{}", stderr(&out));

    // An unknown format is refused by the spec parser.
    let path = write_manifest(
        &s,
        "opa.yaml",
        &policy_yaml(
            "opa",
            "file: kw_privileged_pods.wasm",
            "Validating",
            "Fail",
            "{}",
        )
        .replace("format: kubewarden", "format: opa"),
    );
    kubectl_ok(&s, None, &["apply", "-f", path.to_str().unwrap()]);
    let status = plugin_status(&s, "opa");
    assert_eq!(status["phase"], "Failed", "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains(r#"spec.module.format: unsupported value "opa""#),
        "{status}"
    );
}

#[test]
fn the_mutators_label_is_stored() {
    let s = start();
    let wasm = std::fs::read(wasm_apiserver_e2e::kubewarden_policy_dir().join("kw_add_label.wasm"))
        .expect("kw_add_label.wasm");
    let b64 = base64::engine::general_purpose::STANDARD.encode(wasm);
    apply(
        &s,
        "add-owner",
        &policy_yaml(
            "add-owner",
            &format!("wasm: {b64}"),
            "Mutating",
            "Fail",
            "{key: owner, value: team-a}",
        ),
    );
    let status = plugin_status(&s, "add-owner");
    assert_eq!(status["phase"], "Active", "{status}");

    let out = create_pod(&s, "labelled", false);
    assert!(out.status.success(), "{}", stderr(&out));
    let label = kubectl_ok(
        &s,
        None,
        &[
            "get",
            "pod",
            "labelled",
            "-o",
            "jsonpath={.metadata.labels.owner}",
        ],
    );
    assert_eq!(label.trim(), "team-a");
    kubectl_ok(
        &s,
        None,
        &["create", "configmap", "cm", "--from-literal=k=v"],
    );
    let shown = kubectl_ok(&s, None, &["get", "configmap", "cm", "--show-labels"]);
    assert!(shown.contains("owner=team-a"), "{shown}");
}

#[test]
fn a_looping_policy_is_contained_under_both_failure_policies() {
    let s = start();
    apply(
        &s,
        "spin",
        &policy_yaml(
            "spin",
            "file: kw_hostile.wasm",
            "Validating",
            "Fail",
            "{mode: loop}",
        ),
    );
    assert_eq!(plugin_status(&s, "spin")["phase"], "Active");
    let start = Instant::now();
    let out = kubectl(
        &s,
        None,
        &["create", "configmap", "a", "--from-literal=k=v"],
    );
    let elapsed = start.elapsed();
    assert!(
        !out.status.success(),
        "a looping policy under Fail must reject"
    );
    let err = stderr(&out);
    assert!(
        err.contains("Internal error occurred: failed calling admission plugin \"spin\": timeout"),
        "{err}"
    );
    // The 300 ms timeout, plus kubectl's own start and round trip.
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    let (code, body) = s.get("/readyz").expect("readyz");
    assert_eq!(
        (code, body.trim()),
        (200, "ok"),
        "the loop took the server down"
    );

    apply(
        &s,
        "spin",
        &policy_yaml(
            "spin",
            "file: kw_hostile.wasm",
            "Validating",
            "Ignore",
            "{mode: loop}",
        ),
    );
    let out = kubectl(
        &s,
        None,
        &["create", "configmap", "b", "--from-literal=k=v"],
    );
    assert!(out.status.success(), "under Ignore: {}", stderr(&out));
    let (code, metrics) = s.get("/metrics").expect("metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("wasm_apiserver_plugin_timeouts_total{plugin=\"spin\""),
        "{metrics}"
    );
}

#[test]
fn host_capabilities_answer_a_clear_error() {
    let s = start();
    apply(
        &s,
        "probe",
        &policy_yaml(
            "probe",
            "file: kw_privileged_pods.wasm",
            "Validating",
            "Fail",
            "{probe_cluster: true}",
        ),
    );
    let out = create_pod(&s, "plain", false);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "cannot read namespace default: error invoking host capability \
             kubernetes.get_resource: Host error: host capability \
             kubewarden/kubernetes/get_resource is not available in wasm-apiserver"
        ),
        "{err}"
    );
}

#[test]
fn the_example_manifest_loads_and_enforces() {
    let s = start();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/kubewarden-policies.yaml");
    kubectl_ok(&s, None, &["apply", "-f", example.to_str().unwrap()]);
    for name in ["no-privileged-pods", "owner-label"] {
        let status = plugin_status(&s, name);
        assert_eq!(status["phase"], "Active", "{name}: {status}");
    }
    let out = create_pod(&s, "root", true);
    assert!(
        stderr(&out).contains("privileged containers are not allowed: debug"),
        "{}",
        stderr(&out)
    );
    let out = create_pod(&s, "plain", false);
    assert!(out.status.success(), "{}", stderr(&out));
    let label = kubectl_ok(
        &s,
        None,
        &[
            "get",
            "pod",
            "plain",
            "-o",
            "jsonpath={.metadata.labels.owner}",
        ],
    );
    assert_eq!(label.trim(), "platform-team");
}
