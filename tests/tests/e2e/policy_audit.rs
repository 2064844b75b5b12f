//! The background audit and shadow versions, end to end with kubectl
//! against the real binary: objects stored before a policy get
//! `openreports.io` reports once it is applied (fail for the offending
//! ones, pass for the others); fixing an object flips its result without a
//! full pass; deleting it removes its report; a plugin with
//! `backgroundAudit: false` writes nothing; a ValidatingAdmissionPolicy
//! binding in `Audit` shows in the reports and in the policy's status; an
//! unchanged full pass rewrites nothing; a shadow version that denies what
//! the enforced one allows never fails a request but is counted and kept in
//! `status.shadow`; a looping shadow is contained.

use serde_json::Value;
use std::time::{Duration, Instant};
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, poll_until, write_manifest};

const WAIT: Duration = Duration::from_secs(60);

fn start(extra: &[&str]) -> Server {
    let dir = wasm_apiserver_e2e::plugin_dir();
    let dir = dir.to_str().expect("UTF-8 path");
    let mut args = vec!["--plugin-dir", dir];
    args.extend_from_slice(extra);
    Server::start_with_args(&args)
}

fn apply(server: &Server, name: &str, yaml: &str) {
    let path = write_manifest(server, &format!("{name}.yaml"), yaml);
    kubectl_ok(server, None, &["apply", "-f", path.to_str().unwrap()]);
}

fn require_labels(name: &str, labels: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: {name}
  annotations:
    io.kubewarden.policy.severity: high
    io.kubewarden.policy.category: Labels
spec:
  module: {{file: require_labels.wasm}}
  phases: [Validating]
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [""]
    apiVersions: ["*"]
    resources: [configmaps]
  config: {{labels: [{labels}]}}
{extra}"#
    )
}

fn uid(server: &Server, ns: &str, name: &str) -> String {
    let cm = kubectl_json(server, None, &["get", "configmap", "-n", ns, name]);
    cm["metadata"]["uid"].as_str().expect("uid").to_string()
}

/// The report of an object, when there is one.
fn report(server: &Server, ns: &str, uid: &str) -> Option<Value> {
    let out = kubectl(
        server,
        None,
        &["get", "reports.openreports.io", "-n", ns, uid, "-o", "json"],
    );
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("report JSON"))
}

fn result_of<'a>(report: &'a Value, policy: &str) -> Option<&'a Value> {
    report["results"]
        .as_array()?
        .iter()
        .find(|r| r["policy"] == policy)
}

fn metric(server: &Server, name: &str) -> u64 {
    let (code, text) = server.get("/metrics").expect("metrics");
    assert_eq!(code, 200);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn reports_follow_objects_and_policies() {
    let s = start(&[]);
    kubectl_ok(&s, None, &["create", "namespace", "audited"]);
    for (name, labels) in [("good", "team=a"), ("bad", ""), ("vap-bad", "team=b")] {
        kubectl_ok(
            &s,
            None,
            &[
                "create",
                "configmap",
                "-n",
                "audited",
                name,
                "--from-literal=k=v",
            ],
        );
        if !labels.is_empty() {
            kubectl_ok(
                &s,
                None,
                &["label", "configmap", "-n", "audited", name, labels],
            );
        }
    }
    // Applied after the objects exist: admission never saw them.
    apply(&s, "team", &require_labels("require-team", "team", ""));
    apply(
        &s,
        "quiet",
        &require_labels(
            "quiet",
            "never-there",
            "  mode: Warn\n  backgroundAudit: false\n",
        ),
    );
    let (good, bad, vap_bad) = (
        uid(&s, "audited", "good"),
        uid(&s, "audited", "bad"),
        uid(&s, "audited", "vap-bad"),
    );

    let bad_report = poll_until(WAIT, "a failing report for `bad`", || {
        report(&s, "audited", &bad).filter(|r| result_of(r, "require-team").is_some())
    });
    let r = result_of(&bad_report, "require-team").unwrap();
    assert_eq!(r["result"], "fail", "{bad_report}");
    assert_eq!(r["severity"], "high", "{bad_report}");
    assert_eq!(r["category"], "Labels", "{bad_report}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("missing required label(s): team"),
        "{bad_report}"
    );
    assert_eq!(bad_report["summary"]["fail"], 1, "{bad_report}");
    assert_eq!(bad_report["scope"]["name"], "bad", "{bad_report}");
    assert_eq!(
        bad_report["metadata"]["ownerReferences"][0]["uid"],
        bad.as_str()
    );
    let good_report = poll_until(WAIT, "a passing report for `good`", || {
        report(&s, "audited", &good).filter(|r| result_of(r, "require-team").is_some())
    });
    assert_eq!(
        result_of(&good_report, "require-team").unwrap()["result"],
        "pass"
    );
    // `quiet` would deny every object, but does not audit.
    let all = kubectl_json(&s, None, &["get", "reports.openreports.io", "-A"]);
    for item in all["items"].as_array().unwrap() {
        assert!(result_of(item, "quiet").is_none(), "{item}");
    }

    // kubectl shows the summary columns.
    let table = kubectl_ok(&s, None, &["get", "reports", "-n", "audited"]);
    let header = table.lines().next().unwrap_or_default();
    for column in ["NAME", "PASS", "FAIL", "WARN", "ERROR", "SKIP", "AGE"] {
        assert!(header.contains(column), "{table}");
    }
    assert!(table.contains(&bad), "{table}");

    // The plugin's status counts the objects that fail it: every config
    // map without a `team` label (the namespaces' kube-root-ca.crt too).
    let expected = || {
        let cms = kubectl_json(&s, None, &["get", "configmaps", "-A"]);
        cms["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["metadata"]["labels"]["team"].is_null())
            .count() as u64
    };
    let want = expected();
    poll_until(WAIT, "the violation count in status.audit", || {
        let p = kubectl_json(&s, None, &["get", "admissionplugin", "require-team"]);
        (p["status"]["audit"]["violations"] == want).then_some(())
    });

    // A changed plugin starts a full pass; with the same results, it
    // writes nothing.
    let versions = |r: &Value| {
        r["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let before = (
        versions(&report(&s, "audited", &good).unwrap()),
        versions(&report(&s, "audited", &bad).unwrap()),
    );
    let writes = metric(&s, "wasm_apiserver_policy_audit_report_writes_total");
    let passes = metric(&s, "wasm_apiserver_policy_audit_full_passes_total");
    apply(
        &s,
        "team",
        &require_labels("require-team", "team", "  order: 1\n"),
    );
    poll_until(WAIT, "a full pass", || {
        (metric(&s, "wasm_apiserver_policy_audit_full_passes_total") > passes).then_some(())
    });
    // Let the pass's queue drain.
    poll_until(WAIT, "the audit queue to drain", || {
        (metric(&s, "workqueue_depth{name=\"policy_audit\"}") == 0).then_some(())
    });
    assert_eq!(
        (
            versions(&report(&s, "audited", &good).unwrap()),
            versions(&report(&s, "audited", &bad).unwrap())
        ),
        before
    );
    assert_eq!(
        metric(&s, "wasm_apiserver_policy_audit_report_writes_total"),
        writes
    );

    // Fixing the object flips its result, checked as it changes (no full
    // pass runs: the interval is an hour and the policies stay).
    let passes = metric(&s, "wasm_apiserver_policy_audit_full_passes_total");
    kubectl_ok(
        &s,
        None,
        &["label", "configmap", "-n", "audited", "bad", "team=fixed"],
    );
    poll_until(WAIT, "`bad` to pass", || {
        let r = report(&s, "audited", &bad)?;
        (result_of(&r, "require-team")?["result"] == "pass").then_some(())
    });
    assert_eq!(
        metric(&s, "wasm_apiserver_policy_audit_full_passes_total"),
        passes
    );
    poll_until(WAIT, "one violation less", || {
        let p = kubectl_json(&s, None, &["get", "admissionplugin", "require-team"]);
        (p["status"]["audit"]["violations"] == want - 1).then_some(())
    });

    // A ValidatingAdmissionPolicy binding in Audit: reported, never denied.
    apply(
        &s,
        "vap",
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-vap-bad}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  validations:
  - expression: "object.metadata.name != 'vap-bad'"
    message: "the name vap-bad is reserved"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-vap-bad-audit}
spec:
  policyName: no-vap-bad
  validationActions: [Audit]
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: audited}
"#,
    );
    let vap_report = poll_until(WAIT, "the VAP's result for `vap-bad`", || {
        report(&s, "audited", &vap_bad).filter(|r| result_of(r, "no-vap-bad").is_some())
    });
    let r = result_of(&vap_report, "no-vap-bad").unwrap();
    assert_eq!(r["result"], "fail", "{vap_report}");
    assert_eq!(r["rule"], "no-vap-bad-audit", "{vap_report}");
    assert_eq!(r["message"], "the name vap-bad is reserved", "{vap_report}");
    assert_eq!(
        result_of(&vap_report, "require-team").unwrap()["result"],
        "pass"
    );
    let good_now = poll_until(WAIT, "the VAP's pass for `good`", || {
        report(&s, "audited", &good).filter(|r| result_of(r, "no-vap-bad").is_some())
    });
    assert_eq!(
        result_of(&good_now, "no-vap-bad").unwrap()["result"],
        "pass"
    );
    poll_until(WAIT, "the Audited condition", || {
        let p = kubectl_json(
            &s,
            None,
            &["get", "validatingadmissionpolicy", "no-vap-bad"],
        );
        let c = p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Audited")?
            .clone();
        (c["reason"] == "ViolationsFound" && c["message"].as_str()?.starts_with("1 of "))
            .then_some(())
    });
    // Audit only: the object can still be written.
    kubectl_ok(
        &s,
        None,
        &[
            "label",
            "configmap",
            "-n",
            "audited",
            "vap-bad",
            "again=yes",
        ],
    );

    // Deleting the object removes its report (the garbage collector
    // follows the owner reference).
    kubectl_ok(&s, None, &["delete", "configmap", "-n", "audited", "bad"]);
    poll_until(WAIT, "the report of `bad` to go", || {
        report(&s, "audited", &bad).is_none().then_some(())
    });

    // Removing the plugin removes its results from the reports.
    kubectl_ok(&s, None, &["delete", "admissionplugin", "require-team"]);
    poll_until(WAIT, "require-team's results to go", || {
        let r = report(&s, "audited", &good)?;
        result_of(&r, "require-team").is_none().then_some(())
    });
}

#[test]
fn shadow_versions_are_compared_but_never_enforced() {
    let s = start(&[]);
    // Enforced: requires nothing. Shadow: requires `team`.
    apply(
        &s,
        "labels",
        &require_labels(
            "labels",
            "",
            "  shadow:\n    module: {file: require_labels.wasm}\n    config: {labels: [team]}\n",
        ),
    );
    poll_until(WAIT, "the plugin to load", || {
        let p = kubectl_json(&s, None, &["get", "admissionplugin", "labels"]);
        (p["status"]["phase"] == "Active").then_some(())
    });
    // The shadow runs on a low-priority thread, one call at a time: a
    // request arriving while it is still busy would be skipped (a sample,
    // as under saturation), so each request here waits until the shadow
    // has judged the one before (a light load, where it sees them all).
    let judged = || -> u64 {
        ["agree", "disagree", "error", "skipped"]
            .iter()
            .map(|o| {
                metric(
                    &s,
                    &format!(
                        "wasm_apiserver_admission_shadow_decisions_total{{plugin=\"labels\",outcome=\"{o}\"}}"
                    ),
                )
            })
            .sum()
    };
    let creates = [
        ("x1", "--from-literal=secret=v"),
        ("x2", "--from-literal=secret=v"),
        ("x3", "--from-literal=secret=v"),
        ("ok", "--from-literal=k=v"),
    ];
    for (n, (name, data)) in (1..).zip(creates) {
        kubectl_ok(&s, None, &["create", "configmap", name, data]);
        poll_until(WAIT, "the shadow to judge the create", || {
            (judged() >= n).then_some(())
        });
    }
    let disagreements =
        "wasm_apiserver_admission_shadow_decisions_total{plugin=\"labels\",outcome=\"disagree\"}";
    let disagree = metric(&s, disagreements);
    assert!(disagree >= 4, "every create judged: {disagree}");
    kubectl_ok(&s, None, &["label", "configmap", "ok", "team=a"]);
    let status = poll_until(
        WAIT,
        "the disagreements and an agreement in status.shadow",
        || {
            let p = kubectl_json(&s, None, &["get", "admissionplugin", "labels"]);
            let shadow = &p["status"]["shadow"];
            (shadow["disagreements"].as_u64()? >= 3 && shadow["agreements"].as_u64()? >= 1)
                .then_some(p)
        },
    );
    let shadow = &status["status"]["shadow"];
    let last = shadow["last"].as_array().unwrap();
    let x1 = last
        .iter()
        .find(|d| d["name"] == "x1")
        .unwrap_or_else(|| panic!("{shadow}"));
    assert_eq!(x1["enforced"]["allowed"], true, "{x1}");
    assert_eq!(x1["shadow"]["allowed"], false, "{x1}");
    assert!(
        x1["shadow"]["message"].as_str().unwrap().contains("team"),
        "{x1}"
    );
    assert_eq!(x1["object"]["metadata"]["name"], "x1", "{x1}");
    assert!(!x1["uid"].as_str().unwrap().is_empty(), "{x1}");
    assert!(shadow["agreements"].as_u64().unwrap() >= 1, "{shadow}");

    // A looping shadow: requests do not wait for it, and it is counted.
    apply(
        &s,
        "hostile",
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata: {name: hostile}
spec:
  module: {file: allow_all.wasm}
  phases: [Validating]
  limits: {timeoutMillis: 3000}
  rules:
  - operations: [CREATE]
    apiGroups: [""]
    apiVersions: ["*"]
    resources: [secrets]
  shadow:
    module: {file: hostile_loop.wasm}
"#,
    );
    poll_until(WAIT, "the hostile plugin to load", || {
        let p = kubectl_json(&s, None, &["get", "admissionplugin", "hostile"]);
        (p["status"]["phase"] == "Active").then_some(())
    });
    let started = Instant::now();
    for i in 0..6 {
        kubectl_ok(
            &s,
            None,
            &[
                "create",
                "secret",
                "generic",
                &format!("s{i}"),
                "--from-literal=k=v",
            ],
        );
    }
    // Six creates behind a 3 s loop each would take 18 s.
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    poll_until(WAIT, "the hostile shadow's errors and skips", || {
        let p = kubectl_json(&s, None, &["get", "admissionplugin", "hostile"]);
        let sh = &p["status"]["shadow"];
        (sh["errors"].as_u64()? >= 1 && sh["skipped"].as_u64()? >= 1).then_some(())
    });
    // The server still serves.
    kubectl_ok(&s, None, &["get", "secrets"]);
}

#[test]
fn kubewarden_policies_write_wgpolicyk8s_reports() {
    let dir = wasm_apiserver_e2e::kubewarden_policy_dir();
    let s = Server::start_with_args(&[
        "--plugin-dir",
        dir.to_str().expect("UTF-8 path"),
        "--report-format",
        "policyreport",
    ]);
    for (name, privileged) in [("root", true), ("plain", false)] {
        apply(
            &s,
            name,
            &format!(
                r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: debug
    image: busybox
    securityContext: {{privileged: {privileged}}}
"#
            ),
        );
    }
    apply(
        &s,
        "kw",
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata: {name: no-privileged}
spec:
  module: {file: kw_privileged_pods.wasm, format: kubewarden}
  phases: [Validating]
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [""]
    apiVersions: ["*"]
    resources: [pods]
  config: {}
"#,
    );
    let pod_uid = |name: &str| {
        kubectl_json(&s, None, &["get", "pod", name])["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_string()
    };
    let polr = |uid: &str| {
        let out = kubectl(&s, None, &["get", "policyreports", uid, "-o", "json"]);
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).expect("JSON"))
    };
    let (root, plain) = (pod_uid("root"), pod_uid("plain"));
    let r = poll_until(WAIT, "the PolicyReport of the privileged Pod", || {
        polr(&root)
    });
    assert_eq!(r["apiVersion"], "wgpolicyk8s.io/v1alpha2", "{r}");
    let result = result_of(&r, "no-privileged").unwrap_or_else(|| panic!("{r}"));
    assert_eq!(result["result"], "fail", "{r}");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .contains("privileged containers are not allowed"),
        "{r}"
    );
    let r = poll_until(WAIT, "the PolicyReport of the plain Pod", || polr(&plain));
    assert_eq!(
        result_of(&r, "no-privileged").unwrap()["result"],
        "pass",
        "{r}"
    );
    // No openreports.io resources in this format.
    let out = kubectl(&s, None, &["get", "reports.openreports.io", "-A"]);
    assert!(!out.status.success());
}
