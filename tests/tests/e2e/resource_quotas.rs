//! End-to-end: ResourceQuotas as the `ResourceQuota` admission plugin
//! enforces and charges them and the `resourcequota-controller` counts
//! them, driven by kubectl (and kube-rs for concurrent creates). No node
//! runs here, so pods stay pending and are deleted at once.

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

const WAIT: Duration = Duration::from_secs(30);

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `kubectl describe quota`'s table: resource → (used, hard).
fn describe(server: &Server, ns: &str, name: &str) -> BTreeMap<String, (String, String)> {
    let text = kubectl_ok(server, None, &["describe", "quota", name, "-n", ns]);
    text.lines()
        .skip_while(|l| !l.starts_with("--------"))
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[0].to_string(), (f[1].to_string(), f[2].to_string())))
        })
        .collect()
}

/// Waits until the quota's `status.used[resource]` is `want`.
fn wait_used(server: &Server, ns: &str, name: &str, resource: &str, want: &str) -> Value {
    poll_until(
        WAIT,
        &format!("{ns}/{name}: used {resource}={want}"),
        || {
            let q = kubectl_json(server, None, &["get", "quota", name, "-n", ns]);
            (q["status"]["used"][resource] == want).then_some(q)
        },
    )
}

fn pod(name: &str, cpu: Option<&str>) -> String {
    let resources = match cpu {
        Some(c) => format!(r#", "resources": {{"requests": {{"cpu": "{c}"}}}}"#),
        None => String::new(),
    };
    format!(
        r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}"}},
            "spec": {{"containers": [{{"name": "c", "image": "busybox"{resources}}}]}}}}"#
    )
}

fn create(server: &Server, ns: &str, manifest: &str) -> Output {
    kubectl_stdin(server, None, &["create", "-n", ns, "-f", "-"], manifest)
}

fn create_ok(server: &Server, ns: &str, manifest: &str) {
    let out = create(server, ns, manifest);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A namespace whose root CA ConfigMap is already published (it counts
/// against `configmaps`).
fn namespace(server: &Server, ns: &str) {
    kubectl_ok(server, None, &["create", "namespace", ns]);
    poll_until(WAIT, "kube-root-ca.crt", || {
        kubectl(server, None, &["get", "cm", "kube-root-ca.crt", "-n", ns])
            .status
            .success()
            .then_some(())
    });
}

#[test]
fn quotas_count_refuse_and_give_back() {
    let server = Server::start();
    let ns = "team";
    namespace(&server, ns);
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "quota",
            "q",
            "-n",
            ns,
            "--hard=pods=2,requests.cpu=1,configmaps=3",
        ],
    );
    wait_used(&server, ns, "q", "pods", "0");
    let table = describe(&server, ns, "q");
    assert_eq!(table["pods"], ("0".into(), "2".into()), "{table:?}");
    assert_eq!(table["requests.cpu"], ("0".into(), "1".into()), "{table:?}");
    assert_eq!(table["configmaps"], ("1".into(), "3".into()), "{table:?}");

    create_ok(&server, ns, &pod("p1", Some("250m")));
    create_ok(&server, ns, &pod("p2", Some("250m")));
    // Charged at admission, before the controller looks.
    let table = describe(&server, ns, "q");
    assert_eq!(table["pods"], ("2".into(), "2".into()), "{table:?}");
    assert_eq!(
        table["requests.cpu"],
        ("500m".into(), "1".into()),
        "{table:?}"
    );

    let out = create(&server, ns, &pod("p3", Some("100m")));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "Error from server (Forbidden): error when creating \"STDIN\": pods \"p3\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        ),
        "{err}"
    );
    let out = create(&server, ns, &pod("p4", None));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("pods \"p4\" is forbidden: failed quota: q: must specify requests.cpu for: c"),
        "{err}"
    );

    // Deleting a pod gives its usage back.
    kubectl_ok(&server, None, &["delete", "pod", "p1", "-n", ns]);
    let q = wait_used(&server, ns, "q", "pods", "1");
    assert_eq!(q["status"]["used"]["requests.cpu"], "250m", "{q}");
    create_ok(&server, ns, &pod("p3", Some("100m")));
    let table = describe(&server, ns, "q");
    assert_eq!(
        table["requests.cpu"],
        ("350m".into(), "1".into()),
        "{table:?}"
    );

    // A dry run is checked but charges nothing.
    kubectl_ok(
        &server,
        None,
        &["create", "cm", "dry", "-n", ns, "--dry-run=server"],
    );
    assert_eq!(describe(&server, ns, "q")["configmaps"].0, "1");
    kubectl_ok(&server, None, &["create", "cm", "a", "-n", ns]);
    kubectl_ok(&server, None, &["create", "cm", "b", "-n", ns]);
    let out = kubectl(&server, None, &["create", "cm", "c", "-n", ns]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("configmaps \"c\" is forbidden: exceeded quota: q, requested: configmaps=1, used: configmaps=3, limited: configmaps=3"),
        "{err}"
    );
    let out = kubectl(
        &server,
        None,
        &["create", "cm", "c", "-n", ns, "--dry-run=server"],
    );
    assert!(!out.status.success(), "a dry run is checked too");
}

#[test]
fn object_counts_and_scopes() {
    let server = Server::start();
    kubectl_ok(&server, None, &["create", "namespace", "apps"]);
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "quota",
            "deploys",
            "-n",
            "apps",
            "--hard=count/deployments.apps=1",
        ],
    );
    wait_used(&server, "apps", "deploys", "count/deployments.apps", "0");
    kubectl_ok(
        &server,
        None,
        &["create", "deployment", "d1", "--image=nginx", "-n", "apps"],
    );
    let out = kubectl(
        &server,
        None,
        &["create", "deployment", "d2", "--image=nginx", "-n", "apps"],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("deployments.apps \"d2\" is forbidden: exceeded quota: deploys, requested: count/deployments.apps=1, used: count/deployments.apps=1, limited: count/deployments.apps=1"),
        "{err}"
    );

    // A BestEffort quota counts only best-effort pods.
    kubectl_ok(&server, None, &["create", "namespace", "be"]);
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "quota",
            "be",
            "-n",
            "be",
            "--hard=pods=1",
            "--scopes=BestEffort",
        ],
    );
    wait_used(&server, "be", "be", "pods", "0");
    create_ok(&server, "be", &pod("burstable-1", Some("100m")));
    create_ok(&server, "be", &pod("burstable-2", Some("100m")));
    create_ok(&server, "be", &pod("best-effort-1", None));
    let out = create(&server, "be", &pod("best-effort-2", None));
    assert!(!out.status.success());
    assert!(
        stderr(&out)
            .contains("exceeded quota: be, requested: pods=1, used: pods=1, limited: pods=1"),
        "{}",
        stderr(&out)
    );
    // The controller's own count agrees: the burstable pods are not in it.
    kubectl_ok(&server, None, &["delete", "pod", "burstable-1", "-n", "be"]);
    let q = kubectl_json(&server, None, &["get", "quota", "be", "-n", "be"]);
    assert_eq!(q["status"]["used"]["pods"], "1", "{q}");
    kubectl_ok(
        &server,
        None,
        &["delete", "pod", "best-effort-1", "-n", "be"],
    );
    wait_used(&server, "be", "be", "pods", "0");
}

#[test]
fn concurrent_creates_never_overrun_a_quota() {
    let server = Server::start();
    let ns = "race";
    namespace(&server, ns);
    // kube-root-ca.crt takes one of the five.
    kubectl_ok(
        &server,
        None,
        &["create", "quota", "cm", "-n", ns, "--hard=configmaps=5"],
    );
    wait_used(&server, ns, "cm", "configmaps", "1");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (created, refused) = rt.block_on(async {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, PostParams};
        let client = wasm_apiserver_e2e::kube_client(&server);
        let api: Api<ConfigMap> = Api::namespaced(client, ns);
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let api = api.clone();
                tokio::spawn(async move {
                    let mut cm = ConfigMap::default();
                    cm.metadata.name = Some(format!("c{i}"));
                    api.create(&PostParams::default(), &cm).await
                })
            })
            .collect();
        let (mut created, mut refused) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => created += 1,
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    assert!(e.message.contains("exceeded quota: cm"), "{e:?}");
                    refused += 1;
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        (created, refused)
    });
    assert_eq!((created, refused), (4, 16));
    let listed = kubectl_json(&server, None, &["get", "cm", "-n", ns]);
    assert_eq!(listed["items"].as_array().unwrap().len(), 5, "{listed}");
    let q = kubectl_json(&server, None, &["get", "quota", "cm", "-n", ns]);
    assert_eq!(q["status"]["used"]["configmaps"], "5", "{q}");
}

#[test]
fn without_the_plugin_nothing_is_refused() {
    let server = Server::start_with_args(&[
        "--disable-admission-plugins=ResourceQuota",
        "--resource-quota-sync-period=1s",
    ]);
    kubectl_ok(&server, None, &["create", "quota", "q", "--hard=pods=1"]);
    wait_used(&server, "default", "q", "pods", "0");
    create_ok(&server, "default", &pod("p1", None));
    create_ok(&server, "default", &pod("p2", None));
    // Nothing charged them; the controller's recount sees both.
    wait_used(&server, "default", "q", "pods", "2");
}
