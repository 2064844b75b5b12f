//! End-to-end audit logging: a denied request and an allowed write each
//! appear in the audit log at the level the policy gives them, with the
//! authorization decision and a wasm admission plugin's audit annotation;
//! the server's controllers' calls are audited under their own identities.

use serde_json::Value;
use std::time::Duration;
use wasm_apiserver_e2e::{Server, kubectl, kubectl_ok, poll_until, write_manifest};

const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  nonResourceURLs: ["/readyz", "/healthz", "/livez", "/version", "/api", "/api/*", "/apis", "/apis/*", "/openapi/*"]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
- level: Metadata
"#;

fn events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit lines are JSON"))
        .collect()
}

#[test]
fn allowed_writes_denials_and_plugin_annotations_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.path().join("audit.log");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "evetoken,eve,u-eve\n").unwrap();
    let plugins = wasm_apiserver_e2e::plugin_dir();
    let s = Server::start_with_args(&[
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
        "--audit-policy-file",
        policy.to_str().unwrap(),
        "--plugin-dir",
        plugins.to_str().unwrap(),
    ]);

    // An Audit-mode plugin lets the write through and annotates it.
    let plugin = write_manifest(
        &s,
        "p.yaml",
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata: {name: team-audit}
spec:
  module: {file: require_labels.wasm}
  phases: [Validating]
  mode: Audit
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: ["*"], resources: [configmaps]}]
  config: {labels: [team]}
"#,
    );
    kubectl_ok(&s, None, &["apply", "-f", plugin.to_str().unwrap()]);
    kubectl_ok(
        &s,
        None,
        &["create", "configmap", "audited", "--from-literal=k=v"],
    );
    let denied = kubectl(
        &s,
        None,
        &[
            "--as",
            "nobody",
            "create",
            "configmap",
            "denied",
            "--from-literal=k=v",
        ],
    );
    assert!(!denied.status.success());
    // eve may not impersonate: refused by the impersonation filter, which
    // runs after the audit middleware, so still audited.
    let refused = wasm_apiserver_e2e::kubectl_with_token(
        &s,
        "evetoken",
        &[
            "--as",
            "mallory",
            "get",
            "--raw",
            "/api/v1/namespaces/default/secrets",
        ],
    );
    assert!(!refused.status.success());

    let all = poll_until(
        Duration::from_secs(10),
        "both events in the audit log",
        || {
            let evs = events(&log);
            let write = evs.iter().any(|e| {
                e["objectRef"]["resource"] == "configmaps"
                    && e["responseStatus"]["code"] == 201
                    && e["user"]["username"] == "kubernetes-admin"
            });
            let deny = evs.iter().any(|e| e["responseStatus"]["code"] == 403);
            let refused = evs.iter().any(|e| e["user"]["username"] == "eve");
            (write && deny && refused).then_some(evs)
        },
    );
    let write = all
        .iter()
        .find(|e| {
            e["objectRef"]["resource"] == "configmaps"
                && e["responseStatus"]["code"] == 201
                && e["user"]["username"] == "kubernetes-admin"
        })
        .unwrap();
    assert_eq!(write["level"], "RequestResponse", "{write}");
    assert_eq!(write["stage"], "ResponseComplete");
    assert_eq!(write["verb"], "create");
    assert_eq!(write["user"]["username"], "kubernetes-admin");
    assert_eq!(
        write["requestObject"]["metadata"]["name"], "audited",
        "Request level and above log the body"
    );
    assert_eq!(write["responseObject"]["metadata"]["name"], "audited");
    assert_eq!(
        write["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert!(
        write["annotations"]["team-audit/audit-denial"]
            .as_str()
            .unwrap_or("")
            .contains("missing required label(s): team"),
        "the plugin's Audit-mode denial is annotated: {write}"
    );

    let deny = all
        .iter()
        .find(|e| e["responseStatus"]["code"] == 403 && e["user"]["username"] == "kubernetes-admin")
        .unwrap();
    assert_eq!(
        deny["annotations"]["authorization.k8s.io/decision"], "forbid",
        "{deny}"
    );
    // `--as nobody`: the authenticated user, and whom it impersonated.
    assert_eq!(deny["user"]["username"], "kubernetes-admin", "{deny}");
    assert_eq!(deny["impersonatedUser"]["username"], "nobody", "{deny}");
    assert!(write.get("impersonatedUser").is_none(), "{write}");
    let refused = all.iter().find(|e| e["user"]["username"] == "eve").unwrap();
    assert_eq!(refused["responseStatus"]["code"], 403, "{refused}");
    assert!(refused.get("impersonatedUser").is_none(), "{refused}");
    assert_eq!(deny["level"], "RequestResponse");
    // The AdmissionPlugin write is logged at Metadata: no bodies.
    let meta = all
        .iter()
        .find(|e| e["objectRef"]["resource"] == "admissionplugins")
        .expect("plugin write audited");
    assert_eq!(meta["level"], "Metadata");
    assert!(
        meta.get("requestObject").is_none() && meta.get("responseObject").is_none(),
        "{meta}"
    );
    assert!(
        all.iter().all(|e| e["stage"] != "RequestReceived"),
        "omitStages is honoured"
    );
    // The controllers are audited as the clients they are: the root-CA
    // publisher's writes, under its own identity, at the policy's level.
    let published = all
        .iter()
        .find(|e| {
            e["user"]["username"] == "system:serviceaccount:kube-system:root-ca-cert-publisher"
                && e["verb"] == "create"
        })
        .unwrap_or_else(|| panic!("the root-CA publisher's create is audited: {all:?}"));
    assert_eq!(published["objectRef"]["resource"], "configmaps");
    assert_eq!(published["objectRef"]["name"], "kube-root-ca.crt");
    assert_eq!(published["responseStatus"]["code"], 201);
    assert_eq!(published["level"], "RequestResponse");
    assert_eq!(
        published["userAgent"],
        "wasm-apiserver/root-ca-cert-publisher"
    );
    assert!(
        published["requestURI"]
            .as_str()
            .unwrap()
            .starts_with("/api/v1/namespaces/"),
        "{published}"
    );
    assert!(
        all.iter().all(|e| e["requestURI"] != "/readyz"),
        "level None is not logged"
    );
}
