//! A context-aware admission policy in Python end to end: the
//! unique-ingress-host example (`examples/unique-ingress-host/python`, on
//! the Python SDK's `cluster` helpers, built by componentize-py against
//! WIT 0.3.0's `admission-plugin` world) loaded into a running server as
//! an `AdmissionPlugin` with `spec.contextAwareResources`. Its `list`
//! reads the server's Ingresses across namespaces (seen as soon as a write
//! returned); its `can_i` asks the server's RBAC whether the requesting
//! user may update the Ingress already serving a host; without a grant
//! each call fails and the policy denies with the host's error, naming
//! the kind. Offline, it passes the Rust plugin's case table.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use wasm_apiserver_e2e::{
    Server, example_plugin_dir, kubectl, kubectl_json, kubectl_ok, poll_until, server_binary,
    write_manifest,
};

const INGRESS: &str = "{apiVersion: networking.k8s.io/v1, kind: Ingress}";
const ACCESS_REVIEW: &str = "{apiVersion: authorization.k8s.io/v1, kind: SubjectAccessReview}";

fn plugin(grants: &[&str], config: &str) -> String {
    format!(
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: unique-ingress-host
spec:
  module: {{file: unique-ingress-host-python.wasm}}
  phases: [Validating]
  failurePolicy: Fail
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [networking.k8s.io]
    apiVersions: ["*"]
    resources: [ingresses]
  contextAwareResources: [{}]
  config: '{config}'
"#,
        grants.join(", ")
    )
}

/// Applies the plugin and waits until the server serves this generation.
fn load(server: &Server, grants: &[&str], config: &str) {
    let path = write_manifest(server, "plugin.yaml", &plugin(grants, config));
    kubectl_ok(server, None, &["apply", "-f", path.to_str().unwrap()]);
    poll_until(Duration::from_secs(120), "the plugin to be Active", || {
        let p = kubectl_json(
            server,
            None,
            &["get", "admissionplugin", "unique-ingress-host"],
        );
        (p["status"]["phase"] == "Active"
            && p["status"]["observedGeneration"] == p["metadata"]["generation"])
            .then_some(())
    });
}

/// `kubectl create ingress` (as `user` when given): `Ok` or kubectl's stderr.
fn ingress(
    server: &Server,
    user: Option<&str>,
    ns: &str,
    name: &str,
    host: &str,
) -> Result<(), String> {
    let rule = format!("--rule={host}/=web:80");
    let mut args = vec!["-n", ns, "create", "ingress", name, &rule];
    if let Some(user) = user {
        args.extend(["--as", user]);
    }
    let out = kubectl(server, None, &args);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn denied(result: Result<(), String>, what: &str) -> String {
    let err = result.expect_err(what);
    // kubectl prints the message as is or JSON-quoted, by version.
    err.replace(r#"\""#, "\"")
}

#[test]
fn a_python_policy_reads_the_cluster_and_asks_the_authorizers() {
    let dir = example_plugin_dir();
    assert!(
        dir.join("unique-ingress-host-python.wasm").exists(),
        "scripts/build-example-plugins.sh did not build unique-ingress-host-python.wasm"
    );
    let s = Server::start_with_args(&["--plugin-dir", dir.to_str().unwrap()]);
    for ns in ["team-a", "team-b"] {
        kubectl_ok(&s, None, &["create", "namespace", ns]);
    }

    // list: a host is unique across namespaces; the first write is seen by
    // the next create's admission.
    load(&s, &[INGRESS], "");
    ingress(&s, None, "team-a", "web", "web.example.com").unwrap();
    let err = denied(
        ingress(&s, None, "team-b", "web", "web.example.com"),
        "a second Ingress for the same host",
    );
    assert!(
        err.contains(r#"host "web.example.com" is already served by ingress team-a/web"#),
        "{err}"
    );
    ingress(&s, None, "team-b", "api", "api.example.com").unwrap();
    let err = denied(
        ingress(&s, None, "team-a", "api", "api.example.com"),
        "the host team-b/api serves",
    );
    assert!(
        err.contains("already served by ingress team-b/api"),
        "{err}"
    );

    // can_i without its grant: the host's error, naming the kind.
    load(&s, &[INGRESS], r#"{"ownersMayShare": true}"#);
    let err = denied(
        ingress(&s, None, "team-b", "web", "web.example.com"),
        "can_i without the SubjectAccessReview grant",
    );
    assert!(
        err.contains(
            "cannot review access to ingress team-a/web: reading authorization.k8s.io/v1 \
             SubjectAccessReview is not granted"
        ),
        "{err}"
    );

    // can_i through RBAC: alice may create Ingresses in team-b only, so
    // she may not take team-a's host; once she may update team-a's
    // Ingresses she may, and so may the admin (system:masters).
    load(&s, &[INGRESS, ACCESS_REVIEW], r#"{"ownersMayShare": true}"#);
    let rbac = |ns: &str, verb: &str| {
        let role = format!("ingress-{verb}");
        kubectl_ok(
            &s,
            None,
            &[
                "-n",
                ns,
                "create",
                "role",
                &role,
                &format!("--verb={verb}"),
                "--resource=ingresses.networking.k8s.io",
            ],
        );
        kubectl_ok(
            &s,
            None,
            &[
                "-n",
                ns,
                "create",
                "rolebinding",
                &role,
                "--role",
                &role,
                "--user=alice",
            ],
        );
    };
    rbac("team-b", "create");
    let err = denied(
        ingress(&s, Some("alice"), "team-b", "web", "web.example.com"),
        "alice may not update team-a/web",
    );
    assert!(
        err.contains(r#"host "web.example.com" is already served by ingress team-a/web"#),
        "{err}"
    );
    rbac("team-a", "update");
    ingress(&s, Some("alice"), "team-b", "web", "web.example.com").unwrap();
    ingress(&s, None, "team-b", "web-admin", "web.example.com").unwrap();
    let web: Value = kubectl_json(&s, None, &["-n", "team-b", "get", "ingress", "web"]);
    assert_eq!(web["spec"]["rules"][0]["host"], "web.example.com", "{web}");

    // Granted something else: the list is refused, naming the kind.
    load(&s, &["{apiVersion: v1, kind: ConfigMap}"], "");
    let err = denied(
        ingress(&s, None, "team-b", "other", "other.example.com"),
        "a list of a kind not granted",
    );
    assert!(
        err.contains(
            "cannot list ingresses: reading networking.k8s.io/v1 Ingress is not granted: \
             it is not in the plugin's spec.contextAwareResources"
        ),
        "{err}"
    );
}

/// The Rust unique-ingress-host's case table (cluster fixtures included)
/// passes the Python component too, in the server's runtime, offline.
#[test]
fn the_rust_plugins_case_table_passes_the_python_policy_offline() {
    let dir = example_plugin_dir();
    let table = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/plugin-cases/unique-ingress-host.yaml");
    let out = Command::new(server_binary())
        .arg("plugin")
        .arg("test")
        .arg(dir.join("unique-ingress-host-python.wasm"))
        .arg("--cases")
        .arg(&table)
        // The compile cache the policy kit's tests share (keyed by digest).
        .arg("--cache-dir")
        .arg(dir.join(".plugin-cache"))
        .output()
        .expect("run wasm-apiserver plugin test");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("2 passed, 0 failed"), "{text}");
}
