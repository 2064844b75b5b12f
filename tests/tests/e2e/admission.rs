//! End-to-end admission with kubectl against the real binary: plugins loaded
//! at runtime as `AdmissionPlugin` objects, swapped and removed without a
//! restart, mutation, Warn mode, hostile plugins under both failure
//! policies, static plugins from `--admission-control-config-file`
//! guarding the plugin objects themselves, and the request attributes a
//! plugin sees (user and groups, also impersonated; dry runs); a
//! context-aware component (package 0.3.0 and later) reading the cluster.

use std::time::Duration;
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, write_manifest};

fn start(extra: &[&str]) -> Server {
    let dir = wasm_apiserver_e2e::plugin_dir();
    let dir = dir.to_str().expect("UTF-8 path");
    let mut args = vec!["--plugin-dir", dir];
    args.extend_from_slice(extra);
    Server::start_with_args(&args)
}

fn plugin_yaml(
    name: &str,
    file: &str,
    phase: &str,
    mode: &str,
    failure: &str,
    config: &str,
) -> String {
    format!(
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: {name}
spec:
  module: {{file: {file}}}
  phases: [{phase}]
  mode: {mode}
  failurePolicy: {failure}
  limits: {{timeoutMillis: 300, memoryBytes: 16777216}}
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [""]
    apiVersions: ["*"]
    resources: [configmaps]
  config: {config}
"#
    )
}

fn apply(server: &Server, name: &str, yaml: &str) {
    let path = write_manifest(server, &format!("{name}.yaml"), yaml);
    kubectl_ok(server, None, &["apply", "-f", path.to_str().unwrap()]);
}

fn create_cm(server: &Server, name: &str, labels: &[&str]) -> std::process::Output {
    let out = kubectl(
        server,
        None,
        &["create", "configmap", name, "--from-literal=k=v"],
    );
    if out.status.success() && !labels.is_empty() {
        let mut args = vec!["label", "configmap", name];
        args.extend_from_slice(labels);
        kubectl_ok(server, None, &args);
    }
    out
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn plugins_load_swap_and_unload_at_runtime() {
    let s = start(&[]);
    apply(
        &s,
        "p",
        &plugin_yaml(
            "require-team",
            "require_labels.wasm",
            "Validating",
            "Deny",
            "Fail",
            r#"{labels: [team]}"#,
        ),
    );
    let status = kubectl_json(&s, None, &["get", "admissionplugin", "require-team"]);
    assert_eq!(status["status"]["phase"], "Active", "{status}");

    let denied = create_cm(&s, "a", &[]);
    assert!(!denied.status.success());
    assert!(
        stderr(&denied).contains("admission plugin \"require-team\" denied the request"),
        "{}",
        stderr(&denied)
    );
    assert!(
        stderr(&denied).contains("missing required label(s): team"),
        "{}",
        stderr(&denied)
    );

    // Change the policy: now `owner` is required. No restart.
    apply(
        &s,
        "p",
        &plugin_yaml(
            "require-team",
            "require_labels.wasm",
            "Validating",
            "Deny",
            "Fail",
            r#"{labels: [owner]}"#,
        ),
    );
    let denied = create_cm(&s, "b", &[]);
    assert!(
        stderr(&denied).contains("missing required label(s): owner"),
        "{}",
        stderr(&denied)
    );

    // Labels set at creation satisfy it.
    let path = write_manifest(
        &s,
        "ok.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, labels: {owner: me}}\ndata: {k: v}\n",
    );
    kubectl_ok(&s, None, &["apply", "-f", path.to_str().unwrap()]);

    kubectl_ok(&s, None, &["delete", "admissionplugin", "require-team"]);
    assert!(
        create_cm(&s, "c", &[]).status.success(),
        "deleting the plugin lets requests through"
    );
}

#[test]
fn mutating_patch_is_stored_and_warn_mode_warns() {
    let s = start(&[]);
    apply(
        &s,
        "m",
        &plugin_yaml(
            "defaults",
            "default_labels.wasm",
            "Mutating",
            "Deny",
            "Fail",
            r#"{labels: {managed-by: wasm-apiserver}}"#,
        ),
    );
    assert!(create_cm(&s, "m", &[]).status.success());
    let cm = kubectl_json(&s, None, &["get", "configmap", "m"]);
    assert_eq!(
        cm["metadata"]["labels"]["managed-by"], "wasm-apiserver",
        "{cm}"
    );

    apply(
        &s,
        "w",
        &plugin_yaml(
            "warn-team",
            "require_labels.wasm",
            "Validating",
            "Warn",
            "Fail",
            r#"{labels: [team]}"#,
        ),
    );
    let out = create_cm(&s, "w", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Warning:")
            && stderr(&out).contains("missing required label(s): team"),
        "{}",
        stderr(&out)
    );
    kubectl_ok(&s, None, &["get", "configmap", "w"]);
}

#[test]
fn hostile_plugins_are_contained() {
    let s = start(&[]);
    for fixture in [
        "hostile_loop",
        "hostile_memory",
        "hostile_trap",
        "hostile_output",
    ] {
        let name = fixture.replace('_', "-");
        apply(
            &s,
            &name,
            &plugin_yaml(
                &name,
                &format!("{fixture}.wasm"),
                "Validating",
                "Deny",
                "Fail",
                "{}",
            ),
        );
        let out = create_cm(&s, &format!("{name}-1"), &[]);
        assert!(!out.status.success(), "{fixture} under Fail must reject");
        assert!(
            stderr(&out).contains(&format!("failed calling admission plugin \"{name}\"")),
            "{}",
            stderr(&out)
        );
        let (code, body) = s.get("/readyz").expect("readyz");
        assert_eq!(
            (code, body.trim()),
            (200, "ok"),
            "{fixture} took the server down"
        );

        apply(
            &s,
            &name,
            &plugin_yaml(
                &name,
                &format!("{fixture}.wasm"),
                "Validating",
                "Deny",
                "Ignore",
                "{}",
            ),
        );
        let out = create_cm(&s, &format!("{name}-2"), &[]);
        assert!(
            out.status.success(),
            "{fixture} under Ignore: {}",
            stderr(&out)
        );
        kubectl_ok(&s, None, &["delete", "admissionplugin", &name]);
    }
    let (code, metrics) = s.get("/metrics").expect("metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("wasm_apiserver_plugin_timeouts_total{plugin=\"hostile-loop\""),
        "{metrics}"
    );
}

#[test]
fn static_plugins_guard_the_plugin_objects_and_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(
        &config,
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata: {name: plugins-need-approval}
spec:
  module: {file: require_labels.wasm}
  phases: [Validating]
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [admission.wasm-apiserver.io]
    apiVersions: ["*"]
    resources: [admissionplugins]
  config: {labels: [approved-by]}
"#,
    )
    .unwrap();
    let mut s = start(&["--admission-control-config-file", config.to_str().unwrap()]);
    let yaml = plugin_yaml(
        "p",
        "require_labels.wasm",
        "Validating",
        "Deny",
        "Fail",
        "{labels: [team]}",
    );
    let path = write_manifest(&s, "p.yaml", &yaml);
    let out = kubectl(&s, None, &["apply", "-f", path.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("missing required label(s): approved-by"),
        "{}",
        stderr(&out)
    );

    let approved = yaml.replace("  name: p\n", "  name: p\n  labels: {approved-by: admin}\n");
    apply(&s, "p", &approved);
    assert!(
        !create_cm(&s, "x", &[]).status.success(),
        "the approved plugin is active"
    );

    // After a restart the stored plugin is loaded again from storage.
    s.restart();
    let denied = wasm_apiserver_e2e::poll_until(
        Duration::from_secs(30),
        "plugin active after restart",
        || {
            let out = create_cm(&s, "y", &[]);
            (!out.status.success()).then_some(out)
        },
    );
    assert!(
        stderr(&denied).contains("missing required label(s): team"),
        "{}",
        stderr(&denied)
    );
}

/// The JSON the `echo-request` fixture put in its denial, from kubectl's
/// error output.
fn echoed(out: &std::process::Output) -> serde_json::Value {
    assert!(!out.status.success(), "echo-request denies everything");
    let err = stderr(out);
    let start = err.find("echo {").map(|i| i + "echo ".len());
    let end = err.rfind('}').map(|i| i + 1);
    match start.zip(end) {
        Some((start, end)) => serde_json::from_str(&err[start..end])
            .unwrap_or_else(|e| panic!("echo is not JSON ({e}): {err}")),
        None => panic!("no echo in: {err}"),
    }
}

/// Plugins see who asks: the authenticated (here impersonated) user and
/// groups, the operation, the object's coordinates and dry runs.
#[test]
fn plugins_see_the_requesting_user_and_attributes() {
    let s = start(&[]);
    apply(
        &s,
        "echo",
        &plugin_yaml(
            "echo",
            "echo_request.wasm",
            "Validating",
            "Deny",
            "Fail",
            "{}",
        ),
    );
    let me = kubectl_json(&s, None, &["auth", "whoami", "-o", "json"]);
    let admin = me["status"]["userInfo"]["username"]
        .as_str()
        .unwrap()
        .to_owned();

    let out = kubectl(
        &s,
        None,
        &["create", "configmap", "e1", "--from-literal=k=v"],
    );
    let echo = echoed(&out);
    assert_eq!(echo["user"], admin.as_str(), "{echo}");
    assert_eq!(
        (
            &echo["operation"],
            &echo["resource"],
            &echo["namespace"],
            &echo["name"]
        ),
        (
            &"CREATE".into(),
            &"configmaps".into(),
            &"default".into(),
            &"e1".into()
        ),
        "{echo}"
    );
    assert_eq!(echo["dryRun"], false, "{echo}");

    let out = kubectl(
        &s,
        None,
        &[
            "--as",
            "alice",
            "--as-group",
            "system:masters",
            "--as-group",
            "devs",
            "create",
            "configmap",
            "e2",
            "--from-literal=k=v",
            "--dry-run=server",
        ],
    );
    let echo = echoed(&out);
    assert_eq!(echo["user"], "alice", "{echo}");
    let groups: Vec<&str> = echo["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g.as_str())
        .collect();
    for g in ["system:masters", "devs", "system:authenticated"] {
        assert!(groups.contains(&g), "{g} missing from {echo}");
    }
    assert_eq!(echo["dryRun"], true, "{echo}");
    assert_eq!(echo["name"], "e2", "{echo}");
}

/// A component of WIT package 0.3.0 or later reads the cluster through its
/// `cluster` import: Ingress hosts unique across namespaces, seen as soon
/// as the first write returned; without the grant the read is refused.
#[test]
fn a_context_aware_component_reads_the_cluster() {
    let s = start(&[]);
    let policy = |grant: &str| {
        format!(
            r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: unique-ingress-host
spec:
  module: {{file: unique_ingress_host.wasm}}
  phases: [Validating]
  rules:
  - operations: [CREATE]
    apiGroups: [networking.k8s.io]
    apiVersions: ["*"]
    resources: [ingresses]
  contextAwareResources: [{{apiVersion: {grant}}}]
"#
        )
    };
    apply(&s, "unique", &policy("networking.k8s.io/v1, kind: Ingress"));
    kubectl_ok(&s, None, &["create", "namespace", "team-a"]);
    kubectl_ok(&s, None, &["create", "namespace", "team-b"]);
    let ingress = |ns: &str, name: &str, host: &str| {
        kubectl(
            &s,
            None,
            &[
                "-n",
                ns,
                "create",
                "ingress",
                name,
                &format!("--rule={host}/=web:80"),
            ],
        )
    };
    let out = ingress("team-a", "web", "web.example.com");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = ingress("team-b", "web", "web.example.com");
    assert!(!out.status.success(), "a second Ingress for the same host");
    let err = stderr(&out);
    assert!(
        err.contains(r#"host \"web.example.com\" is already served by ingress team-a/web"#)
            || err.contains(r#"host "web.example.com" is already served by ingress team-a/web"#),
        "{err}"
    );
    let out = ingress("team-b", "api", "api.example.com");
    assert!(out.status.success(), "{}", stderr(&out));
    // Granted something else: the read is refused, naming the kind.
    apply(&s, "unique", &policy("v1, kind: ConfigMap"));
    let out = ingress("team-b", "web-2", "web.example.com");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("reading networking.k8s.io/v1 Ingress is not granted"),
        "{err}"
    );
}
