//! Crossplane-scale custom resources (issue 16), functionally: a few
//! hundred generated CRDs (`scripts/gen-crds.py`: 40-50 KB schemas with
//! nested objects, lists with map keys, CEL rules, printer columns, two
//! served versions) applied with one `kubectl apply` while discovery and
//! `kubectl get` are used throughout; all are served, their objects
//! validated and listed, and deleting them takes them out of discovery.
//! Timing and memory are the bench's (`crds-1000`), not this test's.

use std::process::{Command, Stdio};
use std::time::Duration;
use wasm_apiserver_e2e::{
    Server, kubectl, kubectl_command, kubectl_json, kubectl_ok, poll_until, write_manifest,
};

const CRDS: usize = 240;
const SUFFIX: &str = "scale.example.com";

#[test]
fn a_few_hundred_crds_are_served_and_discovery_keeps_working() {
    let s = Server::start();
    let file = s.data_dir().join("crds.yaml");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gen-crds.py");
    let status = Command::new("python3")
        .arg(&script)
        .arg(CRDS.to_string())
        .arg(&file)
        .arg(SUFFIX)
        .status()
        .expect("run gen-crds.py");
    assert!(status.success());

    // One apply of every CRD, while clients keep reading discovery.
    let mut apply = kubectl_command(&s, None, &["apply", "-f", file.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kubectl apply");
    let mut rounds = 0;
    while apply.try_wait().unwrap().is_none() {
        let (code, body) = s.get("/apis").unwrap();
        assert_eq!(code, 200, "{body}");
        let groups: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(groups["groups"].as_array().is_some_and(|g| !g.is_empty()));
        kubectl_ok(&s, None, &["get", "configmaps", "-A"]);
        rounds += 1;
    }
    let out = apply.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(rounds > 0);

    // Every one Established (one list: `kubectl wait --all` waits on each
    // in turn, which takes minutes on a debug build).
    poll_until(Duration::from_secs(60), "every CRD Established", || {
        let crds = kubectl_json(&s, None, &["get", "crds", "-o", "json"]);
        let established = crds["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                c["spec"]["group"]
                    .as_str()
                    .is_some_and(|g| g.ends_with(SUFFIX))
            })
            .filter(|c| {
                c["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Established" && c["status"] == "True")
                })
            })
            .count();
        (established == CRDS).then_some(())
    });

    // Every group is discovered with both versions; kubectl's view agrees.
    let resources = kubectl_ok(&s, None, &["api-resources", "-o", "name"]);
    for n in [0, CRDS / 2, CRDS - 1] {
        let group = format!("g{}.{SUFFIX}", n % 50);
        assert!(
            resources
                .lines()
                .any(|l| l == format!("resource{n}s.{group}")),
            "resource{n}s"
        );
        let (code, body) = s.get(&format!("/apis/{group}")).unwrap();
        assert_eq!(code, 200);
        let versions: Vec<String> =
            serde_json::from_str::<serde_json::Value>(&body).unwrap()["versions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["version"].as_str().unwrap().to_string())
                .collect();
        assert_eq!(versions, ["v1beta2", "v1beta1"], "{body}");
        let (code, _) = s.get(&format!("/openapi/v3/apis/{group}/v1beta1")).unwrap();
        assert_eq!(code, 200);
    }

    // A custom resource of the last CRD: validated (its CEL rule), stored,
    // listed with its printer columns, in either version.
    let n = CRDS - 1;
    let field = format!("field{}x2", n % 97);
    let group = format!("g{}.{SUFFIX}", n % 50);
    let cr = |name: &str, value: &str| {
        format!(
            "apiVersion: {group}/v1beta1\nkind: Resource{n}\nmetadata: {{name: {name}}}\nspec:\n  forProvider: {{{field}: {value}}}\n"
        )
    };
    let bad = write_manifest(&s, "bad.yaml", &cr("bad", "forbidden"));
    let out = kubectl(&s, None, &["apply", "-f", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("field must not be 'forbidden'"),
        "{err}"
    );
    let good = write_manifest(&s, "good.yaml", &cr("good", "fine"));
    kubectl_ok(&s, None, &["apply", "-f", good.to_str().unwrap()]);
    let table = kubectl_ok(&s, None, &["get", &format!("resource{n}s.{group}")]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "SYNCED", "AGE"], "{table}");
    assert!(table.lines().any(|l| l.starts_with("good ")), "{table}");
    let other = kubectl_json(
        &s,
        None,
        &[
            "get",
            &format!("resource{n}s.v1beta2.{group}"),
            "good",
            "-o",
            "json",
        ],
    );
    assert_eq!(other["apiVersion"], format!("{group}/v1beta2"));
    assert_eq!(
        other["spec"]["deletionPolicy"], "Delete",
        "defaulted: {other}"
    );

    // Deleting them all takes them out of discovery.
    kubectl_ok(
        &s,
        None,
        &["delete", "-f", file.to_str().unwrap(), "--wait=true"],
    );
    // Up to 300 s: alone the whole test takes about 70 s, but beside
    // another test on 2 cores the groups once took over 120 s to go.
    poll_until(
        Duration::from_secs(300),
        "the groups to leave discovery",
        || {
            let (_, body) = s.get("/apis").unwrap();
            (!body.contains(SUFFIX)).then_some(())
        },
    );
}
