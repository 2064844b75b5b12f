//! Kubewarden policies, unchanged, as `AdmissionPlugin`s of the real binary
//! driven by kubectl: the policies of `tests/kubewarden-policies/`, built
//! from Kubewarden's published Rust SDK for `wasm32-wasip1` (no `kwctl
//! annotate`), loaded with `spec.module.format: kubewarden` from
//! `--plugin-dir` and inline as base64.
//!
//! Covered: a privileged Pod denied with the policy's message, an
//! unprivileged one created; bad settings reported in the object's status
//! while the previous version keeps serving; the mutator's label stored;
//! a looping policy contained under both failure policies; an ungranted
//! cluster read answering a clear error; an unknown format
//! refused; the example manifest `examples/kubewarden-policies.yaml`;
//! context-aware policies (issue 33) listing Services and reading the
//! Namespace through `kubewarden/kubernetes/*` within their
//! `contextAwareResources`, refused reads of ungranted kinds, a namespace
//! admin unable to grant the cluster's Secrets; a policy logging through
//! `kubewarden/tracing/log` at every level.

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
fn ungranted_cluster_reads_answer_a_clear_error() {
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
             kubernetes.get_resource: Host error: reading v1 Namespace is not granted: \
             it is not in the plugin's spec.contextAwareResources"
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

/// An `AdmissionPlugin` running a context-aware policy on `resources`,
/// granted `grants` (`apiVersion/Kind` pairs).
fn context_aware_yaml(
    name: &str,
    file: &str,
    phase: &str,
    resources: &str,
    grants: &[(&str, &str)],
) -> String {
    let grants: Vec<String> = grants
        .iter()
        .map(|(v, k)| format!("{{apiVersion: {v}, kind: {k}}}"))
        .collect();
    format!(
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: {name}
spec:
  module: {{file: {file}, format: kubewarden}}
  phases: [{phase}]
  rules:
  - operations: [CREATE]
    apiGroups: [""]
    apiVersions: ["*"]
    resources: [{resources}]
  contextAwareResources: [{}]
"#,
        grants.join(", ")
    )
}

fn service_yaml(name: &str, app: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  selector: {{app: {app}}}\n  ports: [{{port: 80}}]\n"
    )
}

#[test]
fn context_aware_policies_read_the_cluster_they_are_granted() {
    let s = start();
    // Unique selectors: the policy lists the namespace's Services.
    apply(
        &s,
        "unique-selector",
        &context_aware_yaml(
            "unique-selector",
            "kw_unique_selector.wasm",
            "Validating",
            "services",
            &[("v1", "Service")],
        ),
    );
    assert_eq!(plugin_status(&s, "unique-selector")["phase"], "Active");
    let create = |name: &str, yaml: &str| {
        let path = write_manifest(&s, &format!("{name}.yaml"), yaml);
        kubectl(&s, None, &["create", "-f", path.to_str().unwrap()])
    };
    let out = create("web", &service_yaml("web", "web"));
    assert!(out.status.success(), "{}", stderr(&out));
    // Read-your-writes: the Service created just before is seen.
    let out = create("web-2", &service_yaml("web-2", "web"));
    assert!(
        !out.status.success(),
        "a second Service with the same selector"
    );
    let err = stderr(&out);
    assert!(
        err.contains("service \\\"web\\\" already selects these pods")
            || err.contains(r#"service "web" already selects these pods"#),
        "{err}"
    );
    let out = create("db", &service_yaml("db", "db"));
    assert!(out.status.success(), "{}", stderr(&out));

    // Without the grant, the read fails with an error naming the kind.
    apply(
        &s,
        "unique-selector",
        &context_aware_yaml(
            "unique-selector",
            "kw_unique_selector.wasm",
            "Validating",
            "services",
            &[("v1", "ConfigMap")],
        ),
    );
    let out = create("web-3", &service_yaml("web-3", "web"));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("reading v1 Service is not granted"), "{err}");

    // A mutator reads the Pod's Namespace.
    kubectl_ok(&s, None, &["label", "namespace", "default", "team=blue"]);
    apply(
        &s,
        "namespace-team",
        &context_aware_yaml(
            "namespace-team",
            "kw_namespace_team.wasm",
            "Mutating",
            "pods",
            &[("v1", "Namespace")],
        ),
    );
    let out = create_pod(&s, "labelled", false);
    assert!(out.status.success(), "{}", stderr(&out));
    let pod = kubectl_json(&s, None, &["get", "pod", "labelled"]);
    assert_eq!(pod["metadata"]["labels"]["team"], "blue", "{pod}");

    // Nobody grants a plugin reads they cannot make: a namespace admin
    // (admin of `default` only) may not grant the cluster's Secrets.
    kubectl_ok(
        &s,
        None,
        &[
            "create",
            "rolebinding",
            "nadia-admin",
            "--clusterrole=admin",
            "--user=nadia",
            "-n",
            "default",
        ],
    );
    kubectl_ok(
        &s,
        None,
        &[
            "create",
            "clusterrole",
            "plugin-writer",
            "--verb=*",
            "--resource=admissionplugins.admission.wasm-apiserver.io",
        ],
    );
    kubectl_ok(
        &s,
        None,
        &[
            "create",
            "clusterrolebinding",
            "nadia-plugins",
            "--clusterrole=plugin-writer",
            "--user=nadia",
        ],
    );
    let path = write_manifest(
        &s,
        "secrets-reader.yaml",
        &context_aware_yaml(
            "secrets-reader",
            "kw_unique_selector.wasm",
            "Validating",
            "services",
            &[("v1", "Secret")],
        ),
    );
    let out = kubectl(
        &s,
        None,
        &["--as", "nadia", "apply", "-f", path.to_str().unwrap()],
    );
    assert!(
        !out.status.success(),
        "a namespace admin granted the cluster's Secrets"
    );
    let err = stderr(&out);
    assert!(
        err.contains(r#"user \"nadia\" cannot get secrets cluster-wide"#)
            || err.contains(r#"user "nadia" cannot get secrets cluster-wide"#),
        "{err}"
    );
    // The cluster admin may.
    kubectl_ok(&s, None, &["apply", "-f", path.to_str().unwrap()]);
}

#[test]
fn a_policy_that_logs_is_heard_at_every_level() {
    let s = start();
    apply(
        &s,
        "logger",
        &context_aware_yaml("logger", "kw_logging.wasm", "Validating", "configmaps", &[]),
    );
    kubectl_ok(
        &s,
        None,
        &["create", "configmap", "logged", "--from-literal=k=v"],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = s.log();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("logger") && l.contains("object") && l.contains("logged"))
            .collect();
        let has =
            |text: &str, level: &str| lines.iter().any(|l| l.contains(text) && l.contains(level));
        if has("info line", "INFO") && has("warning line", "WARN") && has("error line", "ERROR") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the policy's lines in the server log:\n{}",
            lines.join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
