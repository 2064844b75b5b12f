//! ValidatingAdmissionPolicy end to end, with kubectl against the real
//! binary: Deny/Warn/Audit bindings, a `messageExpression`, params from a
//! ConfigMap (by name, by selector, missing), `matchConditions`, a runaway
//! expression, compile errors refused on write, the policy's status and
//! metrics, and the Gateway API project's own "safe upgrades" policy.

use serde_json::Value;
use std::time::{Duration, Instant};
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, poll_until, write_manifest};

fn apply(s: &Server, name: &str, yaml: &str) {
    let path = write_manifest(s, name, yaml);
    kubectl_ok(s, None, &["apply", "-f", path.to_str().unwrap()]);
}

fn deployment(name: &str, replicas: u32, labels: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, labels: {{{labels}}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: c, image: nginx}}]}}
"#
    )
}

/// `kubectl apply` of a deployment; the output (stdout + stderr) and
/// whether it succeeded.
fn apply_deployment(
    s: &Server,
    ns: &str,
    name: &str,
    replicas: u32,
    labels: &str,
) -> (bool, String) {
    let path = write_manifest(
        s,
        &format!("{ns}-{name}-{replicas}.yaml"),
        &deployment(name, replicas, labels),
    );
    let out = kubectl(s, None, &["-n", ns, "apply", "-f", path.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

const REPLICA_LIMIT: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  matchConditions:
  - name: not-exempt
    expression: "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"
  validations:
  - expression: object.spec.replicas <= 5
    messageExpression: "'replicas must be no greater than 5, got ' + string(object.spec.replicas)"
    reason: Invalid
  auditAnnotations:
  - key: replicas
    valueExpression: string(object.spec.replicas)
"#;

fn binding(name: &str, policy: &str, actions: &str, namespace_label: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {policy}
  validationActions: [{actions}]
  matchResources:
    namespaceSelector: {{matchLabels: {{policy: {namespace_label}}}}}
"#
    )
}

fn namespace(s: &Server, name: &str, label: &str) {
    apply(
        s,
        &format!("ns-{name}.yaml"),
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{policy: {label}}}}}\n"
        ),
    );
}

const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: apps, resources: [deployments]}]
- level: None
"#;

#[test]
fn deny_warn_and_audit_bindings_with_match_conditions_status_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let audit_policy = dir.path().join("audit-policy.yaml");
    std::fs::write(&audit_policy, AUDIT_POLICY).unwrap();
    let audit_log = dir.path().join("audit.log");
    // The deployment controller updates each Deployment it rolls out
    // (its revision annotation), which the policy checks again: the counts
    // below are of the requests this test makes.
    let s = Server::start_with_args(&[
        "--audit-log-path",
        audit_log.to_str().unwrap(),
        "--audit-policy-file",
        audit_policy.to_str().unwrap(),
        "--controllers=*,-deployment-controller",
    ]);
    for (ns, label) in [
        ("strict", "deny"),
        ("lenient", "warn"),
        ("watched", "audit"),
        ("free", "none"),
    ] {
        namespace(&s, ns, label);
    }
    apply(&s, "policy.yaml", REPLICA_LIMIT);
    apply(
        &s,
        "b-deny.yaml",
        &binding("replica-limit-deny", "replica-limit", "Deny", "deny"),
    );
    apply(
        &s,
        "b-warn.yaml",
        &binding("replica-limit-warn", "replica-limit", "Warn", "warn"),
    );
    apply(
        &s,
        "b-audit.yaml",
        &binding("replica-limit-audit", "replica-limit", "Audit", "audit"),
    );

    // Deny: the messageExpression's text, as kubectl prints an Invalid.
    let (ok, out) = apply_deployment(&s, "strict", "big", 6, "");
    assert!(!ok, "{out}");
    assert!(
        out.contains(r#"The deployments "big" is invalid: : ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-deny' denied request: replicas must be no greater than 5, got 6"#),
        "{out}"
    );
    let gone = kubectl(&s, None, &["-n", "strict", "get", "deployment", "big"]);
    assert!(!gone.status.success(), "a denied create stores nothing");
    let (ok, out) = apply_deployment(&s, "strict", "small", 3, "");
    assert!(ok, "{out}");
    // An update past the limit is denied too, and changes nothing.
    let (ok, out) = apply_deployment(&s, "strict", "small", 9, "");
    assert!(!ok && out.contains("got 9"), "{out}");
    let stored = kubectl_json(
        &s,
        None,
        &["-n", "strict", "get", "deployment", "small", "-o", "json"],
    );
    assert_eq!(stored["spec"]["replicas"], 3);
    // matchConditions: an exempt deployment is not checked.
    let (ok, out) = apply_deployment(&s, "strict", "exempt", 8, "exempt: 'yes'");
    assert!(ok, "{out}");
    // No binding selects this namespace.
    let (ok, out) = apply_deployment(&s, "free", "big", 7, "");
    assert!(ok, "{out}");

    // Warn: created, with upstream's warning text.
    let (ok, out) = apply_deployment(&s, "lenient", "big", 6, "");
    assert!(ok, "{out}");
    assert!(
        out.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-warn': replicas must be no greater than 5, got 6"),
        "{out}"
    );

    // Audit: created, and the audit event carries the failure and the
    // policy's own audit annotation.
    let (ok, out) = apply_deployment(&s, "watched", "big", 7, "");
    assert!(ok && !out.contains("Warning"), "{out}");
    let event = poll_until(
        Duration::from_secs(10),
        "the audit event of the create",
        || {
            std::fs::read_to_string(&audit_log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|e| {
                    e["verb"] == "create"
                        && e["objectRef"]["namespace"] == "watched"
                        && e["stage"] == "ResponseComplete"
                })
        },
    );
    let failure: Value = serde_json::from_str(
        event["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap_or_else(|| panic!("no validation_failure annotation: {event}")),
    )
    .unwrap();
    assert_eq!(
        failure,
        serde_json::json!([{
            "message": "replicas must be no greater than 5, got 7",
            "policy": "replica-limit",
            "binding": "replica-limit-audit",
            "expressionIndex": 0,
            "validationActions": ["Audit"],
        }])
    );
    assert_eq!(
        event["annotations"]["replica-limit/replicas"], "7",
        "{event}"
    );

    // kubectl columns and status.
    let table = kubectl_ok(&s, None, &["get", "validatingadmissionpolicies"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("replica-limit"))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..3], ["replica-limit", "1", "<unset>"], "{table}");
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .contains("VALIDATIONS   PARAMKIND"),
        "{table}"
    );
    let bindings = kubectl_ok(&s, None, &["get", "validatingadmissionpolicybindings"]);
    assert!(
        bindings.lines().any(|l| l.split_whitespace().take(3).eq([
            "replica-limit-deny",
            "replica-limit",
            "<unset>"
        ])),
        "{bindings}"
    );
    let policy = poll_until(Duration::from_secs(10), "the policy's status", || {
        let p = kubectl_json(
            &s,
            None,
            &[
                "get",
                "validatingadmissionpolicy",
                "replica-limit",
                "-o",
                "json",
            ],
        );
        (p["status"]["observedGeneration"] == 1).then_some(p)
    });
    assert_eq!(policy["status"]["typeChecking"], serde_json::json!({}));
    // A misspelt field is reported, and the policy still runs (it fails
    // to evaluate on objects, per its failurePolicy).
    apply(
        &s,
        "typo.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: typo}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
  validations:
  - expression: object.spec.replicass <= 5
"#,
    );
    let typo = poll_until(Duration::from_secs(10), "the typo's type check", || {
        let p = kubectl_json(
            &s,
            None,
            &["get", "validatingadmissionpolicy", "typo", "-o", "json"],
        );
        p["status"]["typeChecking"]["expressionWarnings"]
            .as_array()
            .cloned()
    });
    assert_eq!(
        typo,
        [serde_json::json!({
            "fieldRef": "spec.validations[0].expression",
            "warning": "apps/v1, Kind=Deployment: ERROR: undefined field 'replicass'"
        })]
    );
    kubectl_ok(&s, None, &["delete", "validatingadmissionpolicy", "typo"]);

    // A policy that does not compile is refused with the field at fault.
    let bad = write_manifest(
        &s,
        "bad.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: broken}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
  validations:
  - expression: "object.spec.replicas <"
"#,
    );
    let out = kubectl(&s, None, &["apply", "-f", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("spec.validations[0].expression") && err.contains("compilation failed"),
        "{err}"
    );
    let bad_binding = write_manifest(
        &s,
        "bad-binding.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: nothing}\nspec: {policyName: replica-limit}\n",
    );
    let out = kubectl(&s, None, &["apply", "-f", bad_binding.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("spec.validationActions"),
        "{out:?}"
    );

    // Metrics, labeled as upstream's.
    let (code, metrics) = s.get("/metrics").unwrap();
    assert_eq!(code, 200);
    for line in [
        r#"apiserver_validating_admission_policy_check_total{enforcement_action="deny",error_type="no_error",policy="replica-limit",policy_binding="replica-limit-deny"} 2"#,
        r#"apiserver_validating_admission_policy_check_total{enforcement_action="warn",error_type="no_error",policy="replica-limit",policy_binding="replica-limit-warn"} 1"#,
        r#"apiserver_validating_admission_policy_check_total{enforcement_action="audit",error_type="no_error",policy="replica-limit",policy_binding="replica-limit-audit"} 1"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }

    // Deleting the binding lifts the policy at once.
    kubectl_ok(
        &s,
        None,
        &[
            "delete",
            "validatingadmissionpolicybinding",
            "replica-limit-deny",
        ],
    );
    let (ok, out) = apply_deployment(&s, "strict", "big", 6, "");
    assert!(ok, "{out}");
}

const PARAM_POLICY: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-param}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  variables:
  - name: limit
    expression: int(params.data.maxReplicas)
  validations:
  - expression: object.spec.replicas <= variables.limit
    messageExpression: "'at most ' + string(variables.limit) + ' replicas (' + params.metadata.name + ')'"
"#;

#[test]
fn params_from_config_maps_and_a_runaway_expression() {
    let s = Server::start();
    for (ns, label) in [
        ("byname", "name"),
        ("byselector", "selector"),
        ("missing", "missing"),
        ("allowed", "allow"),
    ] {
        namespace(&s, ns, label);
    }
    apply(&s, "policy.yaml", PARAM_POLICY);
    let param_binding = |name: &str, label: &str, param_ref: &str| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: {name}}}\nspec:\n  policyName: replica-param\n  validationActions: [Deny]\n  paramRef: {param_ref}\n  matchResources:\n    namespaceSelector: {{matchLabels: {{policy: {label}}}}}\n"
        )
    };
    apply(
        &s,
        "b1.yaml",
        &param_binding(
            "by-name",
            "name",
            "{name: limits, namespace: default, parameterNotFoundAction: Deny}",
        ),
    );
    apply(
        &s,
        "b2.yaml",
        &param_binding(
            "by-selector",
            "selector",
            "{selector: {matchLabels: {limits: 'yes'}}, parameterNotFoundAction: Deny}",
        ),
    );
    apply(
        &s,
        "b3.yaml",
        &param_binding(
            "missing",
            "missing",
            "{name: nowhere, parameterNotFoundAction: Deny}",
        ),
    );
    apply(
        &s,
        "b4.yaml",
        &param_binding(
            "allowed",
            "allow",
            "{name: nowhere, parameterNotFoundAction: Allow}",
        ),
    );
    kubectl_ok(
        &s,
        None,
        &[
            "-n",
            "default",
            "create",
            "configmap",
            "limits",
            "--from-literal=maxReplicas=4",
        ],
    );

    let (ok, out) = apply_deployment(&s, "byname", "web", 5, "");
    assert!(
        !ok && out.contains("denied request: at most 4 replicas (limits)"),
        "{out}"
    );
    assert!(out.contains("Error from server (Forbidden)"), "{out}");
    let (ok, out) = apply_deployment(&s, "byname", "web", 4, "");
    assert!(ok, "{out}");
    // A new limit takes effect on the next request.
    kubectl_ok(
        &s,
        None,
        &[
            "-n",
            "default",
            "patch",
            "configmap",
            "limits",
            "-p",
            r#"{"data":{"maxReplicas":"6"}}"#,
        ],
    );
    let (ok, out) = apply_deployment(&s, "byname", "web", 5, "");
    assert!(ok, "{out}");

    // By selector, in the request's namespace: every selected param must pass.
    let (ok, out) = apply_deployment(&s, "byselector", "web", 5, "");
    assert!(
        !ok && out
            .contains("no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{out}"
    );
    kubectl_ok(
        &s,
        None,
        &[
            "-n",
            "byselector",
            "create",
            "configmap",
            "loose",
            "--from-literal=maxReplicas=10",
        ],
    );
    kubectl_ok(
        &s,
        None,
        &[
            "-n",
            "byselector",
            "create",
            "configmap",
            "tight",
            "--from-literal=maxReplicas=2",
        ],
    );
    kubectl_ok(
        &s,
        None,
        &[
            "-n",
            "byselector",
            "label",
            "configmap",
            "loose",
            "tight",
            "limits=yes",
        ],
    );
    let (ok, out) = apply_deployment(&s, "byselector", "web", 5, "");
    assert!(
        !ok && out.contains("at most 2 replicas (tight)") && !out.contains("(loose)"),
        "{out}"
    );
    let (ok, out) = apply_deployment(&s, "byselector", "web", 2, "");
    assert!(ok, "{out}");

    let (ok, out) = apply_deployment(&s, "missing", "web", 1, "");
    assert!(!ok && out.contains("no params found"), "{out}");
    let (ok, out) = apply_deployment(&s, "allowed", "web", 50, "");
    assert!(ok, "{out}");
    let bindings = kubectl_ok(&s, None, &["get", "validatingadmissionpolicybindings"]);
    for (name, param) in [
        ("by-name", "default/limits"),
        ("missing", "*/nowhere"),
        ("by-selector", "*/limits=yes"),
    ] {
        assert!(
            bindings.lines().any(|l| l.split_whitespace().take(3).eq([
                name,
                "replica-param",
                param
            ])),
            "{name} {param}: {bindings}"
        );
    }

    // A runaway expression: its cost over the data is computed before it
    // runs; under Fail the request is refused at once, under Ignore it
    // passes; the server keeps serving.
    let runaway = |name: &str, failure_policy: &str, label: &str| {
        format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: {failure_policy}
  matchConstraints:
    resourceRules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}]
    objectSelector: {{matchLabels: {{check: {label}}}}}
  validations:
  - expression: "object.data.all(a, object.data.all(b, object.data.all(c, a + b + c != 'x')))"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec: {{policyName: {name}, validationActions: [Deny]}}
"#
        )
    };
    apply(
        &s,
        "runaway-fail.yaml",
        &runaway("runaway-fail", "Fail", "fail"),
    );
    apply(
        &s,
        "runaway-ignore.yaml",
        &runaway("runaway-ignore", "Ignore", "ignore"),
    );
    let big: String = (0..400).map(|i| format!("  k{i}: v\n")).collect();
    for (label, should_pass) in [("fail", false), ("ignore", true)] {
        let path = write_manifest(
            &s,
            &format!("big-{label}.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: big-{label}, labels: {{check: {label}}}}}\ndata:\n{big}"
            ),
        );
        let started = Instant::now();
        let out = kubectl(&s, None, &["create", "-f", path.to_str().unwrap()]);
        let elapsed = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), should_pass, "{label}: {err}");
        assert!(
            elapsed < Duration::from_secs(10),
            "{label}: took {elapsed:?}"
        );
        if !should_pass {
            assert!(err.contains("actual cost limit exceeded"), "{err}");
        }
    }
    // Small data is cheap enough to run.
    apply(
        &s,
        "small.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: small, labels: {check: fail}}\ndata: {a: '1', b: '2', c: '3'}\n",
    );
    kubectl_ok(&s, None, &["get", "--raw", "/readyz"]);
}

#[test]
fn gateway_api_safe_upgrades_policy_behaves_as_upstream() {
    let s = Server::start();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/gateway-api-safe-upgrades.yaml");
    kubectl_ok(&s, None, &["apply", "-f", fixture.to_str().unwrap()]);
    let crd = |group: &str, version: &str, channel: &str| {
        format!(
            r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
  annotations:
    gateway.networking.k8s.io/bundle-version: {version}
    gateway.networking.k8s.io/channel: {channel}
spec:
  group: {group}
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"#
        )
    };
    let try_apply = |name: &str, yaml: &str| {
        let path = write_manifest(&s, name, yaml);
        let out = kubectl(&s, None, &["apply", "-f", path.to_str().unwrap()]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    const GW: &str = "gateway.networking.k8s.io";
    // Versions before v1.5.0 are refused; release candidates and later pass.
    let (ok, err) = try_apply("old.yaml", &crd(GW, "v1.4.1", "standard"));
    assert!(!ok, "{err}");
    assert!(
        err.contains("ValidatingAdmissionPolicy 'safe-upgrades.gateway.networking.k8s.io' with binding 'safe-upgrades.gateway.networking.k8s.io' denied request: Installing CRDs with version before v1.5.0 is prohibited by default."),
        "{err}"
    );
    assert!(err.contains("is invalid"), "reason Invalid: {err}");
    let (ok, err) = try_apply("rc.yaml", &crd(GW, "v1.5.0-rc.2", "standard"));
    assert!(ok, "{err}");
    let (ok, err) = try_apply("std.yaml", &crd(GW, "v1.6.0", "standard"));
    assert!(ok, "{err}");
    // Standard → experimental in place is refused; the stored CRD stays.
    let (ok, err) = try_apply("exp.yaml", &crd(GW, "v1.6.0", "experimental"));
    assert!(!ok, "{err}");
    assert!(
        err.contains(
            "Installing experimental CRDs on top of standard channel CRDs is prohibited by default."
        ),
        "{err}"
    );
    let stored = kubectl_json(
        &s,
        None,
        &[
            "get",
            "crd",
            "widgets.gateway.networking.k8s.io",
            "-o",
            "json",
        ],
    );
    assert_eq!(
        stored["metadata"]["annotations"]["gateway.networking.k8s.io/channel"],
        "standard"
    );
    // Other groups are not the policy's concern.
    let (ok, err) = try_apply("other.yaml", &crd("example.com", "v0.1.0", "experimental"));
    assert!(ok, "{err}");
    // Removing the policy lifts it, as its message says.
    kubectl_ok(
        &s,
        None,
        &[
            "delete",
            "validatingadmissionpolicy",
            "safe-upgrades.gateway.networking.k8s.io",
        ],
    );
    let (ok, err) = try_apply("exp2.yaml", &crd(GW, "v1.6.0", "experimental"));
    assert!(ok, "{err}");

    // The README's example manifest does what its comments say.
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/admission-policies.yaml");
    kubectl_ok(&s, None, &["apply", "-f", example.to_str().unwrap()]);
    let out = kubectl(
        &s,
        None,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=6",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("replicas must be no greater than 5"),
        "{err}"
    );
    kubectl_ok(
        &s,
        None,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=5",
        ],
    );
    kubectl_ok(&s, None, &["create", "configmap", "stamped"]);
    let cm = kubectl_json(&s, None, &["get", "configmap", "stamped", "-o", "json"]);
    assert_eq!(
        cm["metadata"]["labels"]["stamped-by"], "mutating-admission-policy",
        "{cm}"
    );
}

#[test]
fn mutating_admission_policies_apply_configurations_and_json_patches() {
    let s = Server::start();
    // Upstream's sidecar example: an apply configuration merges into the
    // pod's initContainers (a list keyed by name), keeping what is there.
    apply(
        &s,
        "sidecar.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {name: sidecar}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  matchConditions:
  - name: not-yet-injected
    expression: "!has(object.spec.initContainers) || !object.spec.initContainers.exists(c, c.name == 'mesh-proxy')"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{initContainers: [Object.spec.initContainers{name: "mesh-proxy", image: "mesh/proxy:v1.0.0", restartPolicy: "Always"}]}}
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata: {name: sidecar}
spec: {policyName: sidecar}
"#,
    );
    // A JSON patch whose value comes from a param, and a validating policy
    // that needs what it adds: mutation runs first.
    kubectl_ok(
        &s,
        None,
        &[
            "create",
            "configmap",
            "owner",
            "--from-literal=team=platform",
        ],
    );
    apply(
        &s,
        "label.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {name: team-label}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
    objectSelector: {matchLabels: {stamp: "yes"}}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/team"), value: params.data.team}]
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata: {name: team-label}
spec:
  policyName: team-label
  paramRef: {name: owner, namespace: default, parameterNotFoundAction: Deny}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: team-required}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
    objectSelector: {matchLabels: {stamp: "yes"}}
  validations:
  - expression: "'example.com/team' in object.metadata.labels"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: team-required}
spec: {policyName: team-required, validationActions: [Deny]}
"#,
    );
    apply(
        &s,
        "pod.yaml",
        r#"apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  initContainers: [{name: setup, image: busybox}]
  containers: [{name: app, image: nginx}]
"#,
    );
    let pod = kubectl_json(&s, None, &["get", "pod", "app", "-o", "json"]);
    let names: Vec<&str> = pod["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["setup", "mesh-proxy"], "{pod}");
    assert_eq!(
        pod["spec"]["initContainers"][1]["image"],
        "mesh/proxy:v1.0.0"
    );
    assert_eq!(pod["spec"]["containers"][0]["name"], "app");

    apply(
        &s,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stamped, labels: {stamp: 'yes'}}\ndata: {a: b}\n",
    );
    let cm = kubectl_json(&s, None, &["get", "configmap", "stamped", "-o", "json"]);
    assert_eq!(
        cm["metadata"]["labels"]["example.com/team"], "platform",
        "{cm}"
    );
    kubectl_ok(&s, None, &["create", "configmap", "plain"]);
    let plain = kubectl_json(&s, None, &["get", "configmap", "plain", "-o", "json"]);
    assert!(plain["metadata"]["labels"].is_null(), "{plain}");
    let table = kubectl_ok(&s, None, &["get", "mutatingadmissionpolicies"]);
    assert!(
        table.lines().any(|l| l
            .split_whitespace()
            .take(3)
            .eq(["team-label", "1", "v1/ConfigMap"])),
        "{table}"
    );

    // Without its param the binding denies (parameterNotFoundAction: Deny),
    // and a mutation that fails under failurePolicy: Fail refuses the write.
    kubectl_ok(&s, None, &["delete", "configmap", "owner"]);
    let denied = write_manifest(
        &s,
        "cm2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stamped2, labels: {stamp: 'yes'}}\n",
    );
    let out = kubectl(&s, None, &["create", "-f", denied.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("MutatingAdmissionPolicy 'team-label' with binding 'team-label' denied request: no params found"),
        "{err}"
    );
    apply(
        &s,
        "broken.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {name: broken}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets]}]
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "remove", path: "/spec/nothing"}]'}
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata: {name: broken}
spec: {policyName: broken}
"#,
    );
    let out = kubectl(
        &s,
        None,
        &["create", "secret", "generic", "s1", "--from-literal=a=b"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("MutatingAdmissionPolicy 'broken'"),
        "{err}"
    );
    let missing = kubectl(&s, None, &["get", "secret", "s1"]);
    assert!(!missing.status.success(), "nothing stored");
    let (_, metrics) = s.get("/metrics").unwrap();
    assert!(
        metrics.contains(r#"apiserver_mutating_admission_policy_check_total{error_type="no_error",policy="sidecar",policy_binding="sidecar"} 1"#),
        "{metrics}"
    );
}
