//! The policy author's kit end to end: labels-policy, written in Rust,
//! Python and JavaScript on the three SDKs, built into components by the
//! test command, gives identical decisions, messages and patches on one
//! shared case table — offline through `wasm-apiserver plugin test` and in
//! a running server through kubectl, loaded, swapped between languages and
//! rolled back as `AdmissionPlugin` objects.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use wasm_apiserver_e2e::{
    Server, example_plugin_dir, kubectl, kubectl_json, kubectl_ok, server_binary, write_manifest,
};

const LANGUAGES: [&str; 3] = ["rust", "python", "js"];

fn table_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/labels-policy/cases.yaml")
}

fn table() -> Value {
    serde_yaml::from_slice(&std::fs::read(table_path()).expect("read cases.yaml"))
        .expect("cases.yaml is YAML")
}

fn component(lang: &str) -> String {
    let path = example_plugin_dir().join(format!("labels-policy-{lang}.wasm"));
    assert!(path.exists(), "{} was not built", path.display());
    path.display().to_string()
}

/// Runs `wasm-apiserver plugin ARGS` with a compile cache beside the
/// built examples (the Python and JavaScript components take seconds to
/// compile, and each runs several times here; entries are keyed by the
/// component's digest).
fn plugin(args: &[&str]) -> (i32, String) {
    let out = Command::new(server_binary())
        .arg("plugin")
        .args(args)
        .arg("--cache-dir")
        .arg(example_plugin_dir().join(".plugin-cache"))
        .output()
        .expect("run wasm-apiserver plugin");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn three_languages_pass_one_table_offline_and_a_wrong_expectation_is_named() {
    let cases = table()["cases"].as_array().expect("cases").len();
    assert!(cases >= 10, "the table has {cases} cases");
    let mut reports = Vec::new();
    for lang in LANGUAGES {
        let (code, out) = plugin(&[
            "test",
            &component(lang),
            "--cases",
            table_path().to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{lang}: {out}");
        assert!(
            out.contains(&format!("{cases} passed, 0 failed")),
            "{lang}: {out}"
        );
        reports.push(out);
    }
    // Same lines, case by case, in every language.
    assert!(reports.windows(2).all(|w| w[0] == w[1]), "{reports:#?}");

    // The same table with one expectation changed fails, naming that case,
    // for each language.
    let mut wrong = table();
    let case = wrong["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == "existing annotations get one more member")
        .expect("the case");
    case["patch"] = json!([]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wrong.yaml");
    std::fs::write(&path, serde_yaml::to_string(&wrong).unwrap()).unwrap();
    for lang in LANGUAGES {
        let (code, out) = plugin(&["test", &component(lang), "--cases", path.to_str().unwrap()]);
        assert_eq!(code, 1, "{lang}: {out}");
        assert!(
            out.lines().any(|l| l
                .starts_with("FAIL existing annotations get one more member: expected patch []")),
            "{lang}: {out}"
        );
        assert!(
            out.contains(&format!("{} passed, 1 failed", cases - 1)),
            "{lang}: {out}"
        );
    }
}

#[test]
fn a_captured_review_replays_with_the_config_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/labels-policy");
    let (review, config) = (dir.join("review.json"), dir.join("config.json"));
    let (review, config) = (review.to_str().unwrap(), config.to_str().unwrap());
    for lang in LANGUAGES {
        let wasm = component(lang);
        let args = ["test", &wasm, "--request", review, "--config", config];
        let (code, out) = plugin(&[&args[..], &["--expect", "allow"]].concat());
        assert_eq!(code, 0, "{lang}: {out}");
        assert_eq!(
            out.trim(),
            r#"allow
patch: [{"op":"add","path":"/metadata/annotations","value":{"example.com/owner":"platform"}}]"#,
            "{lang}"
        );
        let (code, out) = plugin(&[&args[..], &["--expect", "deny"]].concat());
        assert_eq!(code, 1, "{lang}: {out}");
        assert!(
            out.contains("FAIL: expected Deny, got Allow"),
            "{lang}: {out}"
        );
    }
}

#[test]
fn inspect_shows_each_example_in_the_admission_world() {
    for lang in LANGUAGES {
        let (code, out) = plugin(&["inspect", &component(lang)]);
        assert_eq!(code, 0, "{lang}: {out}");
        assert!(
            out.contains("world:     admission-plugin (wasm-apiserver:plugin@0.4.0"),
            "{lang}: {out}"
        );
        assert!(
            out.contains("  wasm-apiserver:plugin/admission@0.4.0"),
            "{lang}: {out}"
        );
        assert!(out.contains("loads:     yes"), "{lang}: {out}");
        assert!(
            !out.contains("not provided by this server"),
            "{lang}: {out}"
        );
    }
}

fn plugin_object(lang: &str, config: &str) -> String {
    format!(
        r#"apiVersion: admission.wasm-apiserver.io/v1alpha1
kind: AdmissionPlugin
metadata:
  name: labels-policy
spec:
  module: {{file: labels-policy-{lang}.wasm}}
  phases: [Mutating, Validating]
  failurePolicy: Fail
  rules:
  - operations: [CREATE, UPDATE, DELETE]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: [configmaps, secrets]
  config: {config}
"#
    )
}

/// The component's sha256, as `plugin inspect` prints it.
fn digest(lang: &str) -> String {
    let (_, out) = plugin(&["inspect", &component(lang)]);
    let line = out
        .lines()
        .find(|l| l.starts_with("size:"))
        .expect("size line");
    let sha = line
        .split("sha256 ")
        .nth(1)
        .expect("sha256")
        .trim_end_matches(')');
    format!("sha256:{sha}")
}

/// Applies the AdmissionPlugin with `lang`'s module and checks the server
/// runs that module now.
fn load(server: &Server, lang: &str, config: &str) {
    let path = write_manifest(
        server,
        &format!("plugin-{lang}.yaml"),
        &plugin_object(lang, config),
    );
    kubectl_ok(server, None, &["apply", "-f", path.to_str().unwrap()]);
    let p = kubectl_json(
        server,
        None,
        &["get", "admissionplugin", "labels-policy", "-o", "json"],
    );
    assert_eq!(p["status"]["phase"], "Active", "{p}");
    assert_eq!(
        p["status"]["observedGeneration"], p["metadata"]["generation"],
        "{p}"
    );
    assert_eq!(p["status"]["digest"], digest(lang), "{p}");
}

/// What the server did with one case: `allow <annotations>` or `deny`
/// with the message kubectl printed.
fn run_case(server: &Server, ns: &str, case: &Value) -> String {
    let mut object = case["object"].clone();
    object["metadata"]["namespace"] = json!(ns);
    let name = case["name"].as_str().unwrap().replace([' ', ','], "-");
    let file = write_manifest(server, &format!("{ns}-{name}.json"), &object.to_string());
    let out = kubectl(
        server,
        None,
        &["create", "-f", file.to_str().unwrap(), "-o", "json"],
    );
    if out.status.success() {
        let stored: Value = serde_json::from_slice(&out.stdout).expect("created object");
        format!("allow {}", stored["metadata"]["annotations"])
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        format!("deny {}", err.trim())
    }
}

#[test]
fn three_languages_decide_alike_in_a_running_server_and_swap_without_a_restart() {
    let dir = example_plugin_dir();
    let server = Server::start_with_args(&["--plugin-dir", dir.to_str().unwrap()]);
    let table = table();
    let config = table["config"].as_str().unwrap();
    // CREATE cases of kinds the test can create as written.
    let cases: Vec<&Value> = table["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.get("operation").is_none() && c.get("object").is_some())
        .filter(|c| matches!(c["object"]["kind"].as_str(), Some("ConfigMap" | "Secret")))
        .filter(|c| c["object"]["metadata"].get("name").is_some())
        .collect();
    assert!(cases.len() >= 6, "{} create cases", cases.len());

    let mut outcomes: Vec<Vec<String>> = Vec::new();
    for lang in LANGUAGES {
        // Applying the same AdmissionPlugin with another module swaps the
        // language in place: no restart, no second plugin.
        load(&server, lang, config);
        let ns = format!("kit-{lang}");
        kubectl_ok(&server, None, &["create", "namespace", &ns]);
        let mut got = Vec::new();
        for case in &cases {
            let outcome = run_case(&server, &ns, case);
            let expect = case["expect"].as_str().unwrap();
            assert!(
                outcome.starts_with(expect),
                "{lang}: {}: {outcome}",
                case["name"]
            );
            if let Some(message) = case.get("message").and_then(Value::as_str) {
                assert!(
                    outcome.contains(message),
                    "{lang}: {}: {outcome}",
                    case["name"]
                );
            }
            // A stored object carries exactly what the expected patch adds.
            if expect == "allow" {
                let mut want = case["object"].clone();
                let patch: json_patch::Patch =
                    serde_json::from_value(case["patch"].clone()).unwrap();
                json_patch::patch(&mut want, &patch).unwrap();
                assert_eq!(
                    outcome,
                    format!("allow {}", want["metadata"]["annotations"]),
                    "{lang}"
                );
                // Deletes pass the policy too (the next case may reuse the name).
                let (kind, name) = (&case["object"]["kind"], &case["object"]["metadata"]["name"]);
                let what = format!(
                    "{}/{}",
                    kind.as_str().unwrap().to_lowercase(),
                    name.as_str().unwrap()
                );
                kubectl_ok(&server, None, &["delete", "-n", &ns, &what]);
            }
            got.push(outcome.replace(&ns, "NS"));
        }
        // An update dropping a required label is refused, by the policy's message.
        let web = cases
            .iter()
            .find(|c| c["object"]["metadata"]["name"] == "web" && c["expect"] == "allow");
        assert!(
            run_case(&server, &ns, web.expect("an allowed case named web")).starts_with("allow")
        );
        let out = kubectl(
            &server,
            None,
            &["label", "-n", &ns, "configmap", "web", "team-"],
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("ConfigMap \"web\" denied: missing required label(s): team"),
            "{lang}: {err}"
        );
        let cm = kubectl_json(
            &server,
            None,
            &["get", "-n", &ns, "configmap", "web", "-o", "json"],
        );
        assert_eq!(
            cm["metadata"]["labels"]["team"], "a",
            "{lang}: the denied update changed nothing"
        );
        outcomes.push(got);
    }
    assert!(outcomes.windows(2).all(|w| w[0] == w[1]), "{outcomes:#?}");

    // Roll back: re-applying the Rust object puts the Rust module back.
    load(&server, "rust", config);
    let out = kubectl(
        &server,
        None,
        &["create", "configmap", "bare", "-n", "kit-rust"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing required label(s): team, env"));
}
