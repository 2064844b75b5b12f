//! Context-aware admission policies end to end. The unique-ingress-host
//! example in Python and JavaScript (`examples/unique-ingress-host/{python,js}`,
//! on the SDKs' `cluster` helpers, built by componentize-py and
//! componentize-js against WIT 0.4.0's `admission-plugin` world) is loaded
//! into a running server as an `AdmissionPlugin` with
//! `spec.contextAwareResources`; one test per language runs the same
//! steps. Its `list` reads the server's Ingresses across namespaces (seen
//! as soon as a write returned); its `can_i` asks the server's RBAC
//! whether the requesting user may update the Ingress already serving a
//! host; without a grant each call fails and the policy denies with the
//! host's error, naming the kind. Offline (`plugin test`), both pass the
//! Rust plugin's case table, and their `can_i` is answered by RBAC over the
//! fixtures. The Rust plugin, with a small `maxClusterReadBytes`, shows a
//! list larger than its read budget failing that one request alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use wasm_apiserver_e2e::{
    Server, example_plugin_dir, kubectl, kubectl_json, kubectl_ok, plugin_dir, poll_until,
    server_binary, write_manifest,
};

const INGRESS: &str = "{apiVersion: networking.k8s.io/v1, kind: Ingress}";
const ACCESS_REVIEW: &str = "{apiVersion: authorization.k8s.io/v1, kind: SubjectAccessReview}";

/// The policy's component in `examples/target`.
fn component(lang: &str) -> String {
    format!("unique-ingress-host-{lang}.wasm")
}

fn plugin(lang: &str, grants: &[&str], config: &str) -> String {
    format!(
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: unique-ingress-host
spec:
  module: {{file: {}}}
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
        component(lang),
        grants.join(", ")
    )
}

/// Applies the plugin and waits until the server serves this generation.
fn load(server: &Server, lang: &str, grants: &[&str], config: &str) {
    let path = write_manifest(server, "plugin.yaml", &plugin(lang, grants, config));
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
    reads_the_cluster_and_asks_the_authorizers("python");
}

#[test]
fn a_javascript_policy_reads_the_cluster_and_asks_the_authorizers() {
    reads_the_cluster_and_asks_the_authorizers("js");
}

/// The same steps for the policy in `lang`.
fn reads_the_cluster_and_asks_the_authorizers(lang: &str) {
    let dir = example_plugin_dir();
    assert!(
        dir.join(component(lang)).exists(),
        "scripts/build-example-plugins.sh did not build {}",
        component(lang)
    );
    let s = Server::start_with_args(&["--plugin-dir", dir.to_str().unwrap()]);
    for ns in ["team-a", "team-b"] {
        kubectl_ok(&s, None, &["create", "namespace", ns]);
    }

    // list: a host is unique across namespaces; the first write is seen by
    // the next create's admission.
    load(&s, lang, &[INGRESS], "");
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
    load(&s, lang, &[INGRESS], r#"{"ownersMayShare": true}"#);
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
    load(
        &s,
        lang,
        &[INGRESS, ACCESS_REVIEW],
        r#"{"ownersMayShare": true}"#,
    );
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
    load(&s, lang, &["{apiVersion: v1, kind: ConfigMap}"], "");
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

/// `wasm-apiserver plugin test COMPONENT ARGS...` of an example policy, in
/// the server's runtime, offline: the exit code and what it printed.
fn plugin_test(lang: &str, args: &[&Path]) -> (i32, String) {
    let dir = example_plugin_dir();
    let out = Command::new(server_binary())
        .arg("plugin")
        .arg("test")
        .arg(dir.join(component(lang)))
        .args(args)
        // The compile cache the policy kit's tests share (keyed by digest).
        .arg("--cache-dir")
        .arg(dir.join(".plugin-cache"))
        .output()
        .expect("run wasm-apiserver plugin test");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(path)
}

/// The Rust unique-ingress-host's case table (cluster fixtures included)
/// passes the Python and JavaScript components too, offline.
#[test]
fn the_rust_plugins_case_table_passes_the_python_and_js_policies_offline() {
    let table = fixture("plugin-cases/unique-ingress-host.yaml");
    for lang in ["python", "js"] {
        let (code, text) = plugin_test(lang, &[Path::new("--cases"), &table]);
        assert_eq!(code, 0, "{lang}: {text}");
        assert!(text.contains("2 passed, 0 failed"), "{lang}: {text}");
    }
}

/// Offline, `can_i` is the server's RBAC over the fixtures: with no RBAC
/// objects only `system:masters` may update the Ingress serving the host,
/// so alice's case fails; with a RoleBinding of `edit` to her in its
/// namespace (`--cluster`), she may, and bob still may not.
#[test]
fn offline_can_i_answers_from_rbac_objects_in_the_fixtures() {
    let table = fixture("plugin-cases/unique-ingress-host-owners.yaml");
    let rbac = fixture("cluster/ingress-editors.yaml");
    for lang in ["python", "js"] {
        let (code, text) = plugin_test(lang, &[Path::new("--cases"), &table]);
        assert_eq!(code, 1, "{lang}: {text}");
        assert!(
            text.contains(
                "FAIL alice may update other/taken, so she may share its host: expected Allow, \
                 got deny (409 Conflict: host \"shop.example.com\" is already served by ingress other/taken)"
            ),
            "{lang}: {text}"
        );
        assert!(text.contains("2 passed, 1 failed"), "{lang}: {text}");

        let (code, text) = plugin_test(
            lang,
            &[Path::new("--cases"), &table, Path::new("--cluster"), &rbac],
        );
        assert_eq!(code, 0, "{lang}: {text}");
        assert!(text.contains("3 passed, 0 failed"), "{lang}: {text}");
    }
}

/// A list larger than the plugin's read budget (`limits.maxClusterReadBytes`)
/// fails that evaluation alone, naming the budget; the next request through
/// the same server is served, and with the default budget the same create
/// reads every Ingress it matched (it is refused for the host they serve).
#[test]
fn a_list_over_the_read_budget_fails_alone_naming_the_budget() {
    let dir = plugin_dir();
    let s = Server::start_with_args(&["--plugin-dir", dir.to_str().unwrap()]);
    kubectl_ok(&s, None, &["create", "namespace", "bulk"]);
    // 64 Ingresses of about 4 KiB each (a 4,000-byte annotation) serving
    // one host: the plugin's read of that host (a field selector) returns
    // ~270 KB, four times a 64 KiB budget.
    let padding = "x".repeat(4000);
    let items: Vec<Value> = (0..64)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": format!("ing-{i}"), "namespace": "bulk",
                    "annotations": {"padding": padding}},
                "spec": {"rules": [{"host": format!("h{i}.example.com")}, {"host": "shared.example.com"}]},
            })
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let path = write_manifest(&s, "ingresses.json", &list.to_string());
    kubectl_ok(&s, None, &["create", "-f", path.to_str().unwrap()]);

    let policy = |limits: &str| {
        format!(
            r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: unique-ingress-host
spec:
  module: {{file: unique_ingress_host.wasm}}
  phases: [Validating]
  failurePolicy: Fail
  rules:
  - operations: [CREATE]
    apiGroups: [networking.k8s.io]
    apiVersions: ["*"]
    resources: [ingresses]
  contextAwareResources: [{INGRESS}]
  limits: {limits}
"#
        )
    };
    let apply = |limits: &str| {
        let path = write_manifest(&s, "budget.yaml", &policy(limits));
        kubectl_ok(&s, None, &["apply", "-f", path.to_str().unwrap()]);
        poll_until(Duration::from_secs(60), "the plugin to be Active", || {
            let p = kubectl_json(&s, None, &["get", "admissionplugin", "unique-ingress-host"]);
            (p["status"]["phase"] == "Active"
                && p["status"]["observedGeneration"] == p["metadata"]["generation"])
                .then_some(())
        });
    };
    apply("{maxClusterReadBytes: 65536}");
    // A host nobody serves reads nothing: admitted under the small budget.
    ingress(&s, None, "bulk", "fresh", "fresh.example.com").unwrap();
    let err = denied(
        ingress(&s, None, "bulk", "late", "shared.example.com"),
        "a list over the read budget",
    );
    assert!(
        err.contains(
            "cannot list ingresses: listing networking.k8s.io/v1 Ingress returns more than \
             the 65536 bytes left of the plugin's read budget"
        ),
        "{err}"
    );
    // The server serves on: the next request, right after, succeeds.
    kubectl_ok(
        &s,
        None,
        &[
            "-n",
            "bulk",
            "create",
            "configmap",
            "after",
            "--from-literal=k=v",
        ],
    );
    // With the default budget (8 MiB) the same create reads the 64 and is
    // refused for what they serve, not for the budget.
    apply("{}");
    let err = denied(
        ingress(&s, None, "bulk", "late", "shared.example.com"),
        "the shared host",
    );
    assert!(
        err.contains("host \"shared.example.com\" is already served by ingress bulk/ing-0"),
        "{err}"
    );
}
