//! End-to-end: the controllers layer (issue 32) through kubectl: garbage
//! collection in the background, the foreground and orphaning, dependents
//! with two owners and dangling references, a custom resource owning a
//! ConfigMap; the `default` ServiceAccount and `kube-root-ca.crt` of every
//! namespace, and the ServiceAccount and token volume of every Pod; the
//! `kubernetes` Service and its endpoints; and, on etcd,
//! one collector among two replicas that another takes over.

use std::time::Duration;

use serde_json::{Value, json};
use wasm_apiserver_e2e::etcd::EtcdCluster;
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

const WAIT: Duration = Duration::from_secs(30);

fn create(server: &Server, obj: &Value) -> Value {
    let out = kubectl_stdin(
        server,
        None,
        &["create", "-o", "json", "-f", "-"],
        &obj.to_string(),
    );
    assert!(
        out.status.success(),
        "create {obj}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn cm(name: &str, owners: &[(&Value, bool)], finalizers: &[&str]) -> Value {
    let refs: Vec<Value> = owners
        .iter()
        .map(|(o, block)| {
            json!({"apiVersion": o["apiVersion"], "kind": o["kind"],
                "name": o["metadata"]["name"], "uid": o["metadata"]["uid"],
                "blockOwnerDeletion": block})
        })
        .collect();
    let mut c = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}});
    if !refs.is_empty() {
        c["metadata"]["ownerReferences"] = json!(refs);
    }
    if !finalizers.is_empty() {
        c["metadata"]["finalizers"] = json!(finalizers);
    }
    c
}

/// The object, or `None` once it is gone.
fn get(server: &Server, kind: &str, name: &str) -> Option<Value> {
    let out = kubectl(server, None, &["get", kind, name, "-o", "json"]);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("NotFound") || err.contains("not found"),
            "{err}"
        );
        return None;
    }
    Some(serde_json::from_slice(&out.stdout).expect("JSON"))
}

fn wait_gone(server: &Server, kind: &str, name: &str) {
    poll_until(WAIT, &format!("{kind} {name} to be collected"), || {
        get(server, kind, name).is_none().then_some(())
    });
}

fn uids(obj: &Value) -> Vec<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["uid"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn garbage_collection_background_foreground_orphan_and_dangling() {
    let server = Server::start();

    // Background (kubectl's default): the owner goes, then its dependents.
    let owner = create(&server, &cm("owner-bg", &[], &[]));
    create(&server, &cm("dep-bg-1", &[(&owner, false)], &[]));
    create(&server, &cm("dep-bg-2", &[(&owner, true)], &[]));
    kubectl_ok(&server, None, &["delete", "cm", "owner-bg"]);
    wait_gone(&server, "cm", "dep-bg-1");
    wait_gone(&server, "cm", "dep-bg-2");

    // Foreground: the owner stays while a blocking dependent is held by a
    // finalizer; once that is removed both go.
    let owner = create(&server, &cm("owner-fg", &[], &[]));
    create(
        &server,
        &cm("dep-fg", &[(&owner, true)], &["example.com/hold"]),
    );
    kubectl_ok(
        &server,
        None,
        &[
            "delete",
            "cm",
            "owner-fg",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    poll_until(
        WAIT,
        "the blocking dependent to be marked for deletion",
        || {
            get(&server, "cm", "dep-fg")?["metadata"]["deletionTimestamp"]
                .as_str()
                .map(drop)
        },
    );
    let held = get(&server, "cm", "owner-fg").expect("the owner waits for its dependent");
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    assert_eq!(
        held["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "cm",
            "dep-fg",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    wait_gone(&server, "cm", "dep-fg");
    wait_gone(&server, "cm", "owner-fg");

    // Orphan: the owner goes, its dependents stay without the reference.
    let owner = create(&server, &cm("owner-or", &[], &[]));
    create(&server, &cm("dep-or", &[(&owner, true)], &[]));
    kubectl_ok(
        &server,
        None,
        &["delete", "cm", "owner-or", "--cascade=orphan"],
    );
    wait_gone(&server, "cm", "owner-or");
    let orphan = get(&server, "cm", "dep-or").expect("an orphan stays");
    assert!(uids(&orphan).is_empty(), "{orphan}");

    // Two owners: one goes, the dependent stays with the other; then both.
    let a = create(&server, &cm("owner-a", &[], &[]));
    let b = create(&server, &cm("owner-b", &[], &[]));
    create(&server, &cm("dep-two", &[(&a, false), (&b, false)], &[]));
    kubectl_ok(&server, None, &["delete", "cm", "owner-a"]);
    let b_uid = b["metadata"]["uid"].as_str().unwrap().to_string();
    poll_until(WAIT, "the dangling reference to be removed", || {
        let dep = get(&server, "cm", "dep-two").expect("kept while owner-b lives");
        (uids(&dep) == [b_uid.clone()]).then_some(())
    });
    kubectl_ok(&server, None, &["delete", "cm", "owner-b"]);
    wait_gone(&server, "cm", "dep-two");

    // A reference to an owner that never existed is dangling.
    let ghost = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ghost", "uid": "2b7c3f7e-0000-4000-8000-000000000000"}});
    create(&server, &cm("dep-dangling", &[(&ghost, false)], &[]));
    wait_gone(&server, "cm", "dep-dangling");

    // Objects nobody owns are never touched.
    assert!(get(&server, "cm", "dep-or").is_some());
    let metrics = server.get("/metrics").expect("metrics").1;
    assert!(
        metrics.contains("workqueue_adds_total{name=\"garbage_collector_attempt_to_delete\"}"),
        "{metrics}"
    );
}

#[test]
fn owner_references_need_delete_and_blocking_needs_finalizers() {
    let server = Server::start();
    // dave may create, read and update ConfigMaps, not delete them.
    let grant = "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm-writer, namespace: default}
rules:
- apiGroups: [\"\"]
  resources: [configmaps]
  verbs: [create, get, list, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dave-cm-writer, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-writer}
subjects: [{kind: User, name: dave}]
";
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], grant);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let owner = create(&server, &cm("owned-by-admin", &[], &[]));
    let as_dave = |args: &[&str], body: &Value| {
        let mut all = vec!["--as", "dave"];
        all.extend_from_slice(args);
        kubectl_stdin(&server, None, &all, &body.to_string())
    };
    // A creator may set a reference...
    let out = poll_until(WAIT, "dave's grant", || {
        let out = as_dave(
            &["create", "-f", "-"],
            &cm("dave-1", &[(&owner, false)], &[]),
        );
        (!String::from_utf8_lossy(&out.stderr).contains("cannot create")).then_some(out)
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ...but not block an owner it cannot finalize.
    let out = as_dave(
        &["create", "-f", "-"],
        &cm("dave-2", &[(&owner, true)], &[]),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"configmaps "dave-2" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on"#),
        "{err}"
    );
    // Changing references needs delete on the object.
    let mine = create(&server, &cm("dave-3", &[], &[]));
    let mut changed = cm("dave-3", &[(&owner, false)], &[]);
    changed["metadata"]["resourceVersion"] = mine["metadata"]["resourceVersion"].clone();
    let out = as_dave(&["replace", "-f", "-"], &changed);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot set an ownerRef on a resource you can't delete"),
        "{err}"
    );
    // The admin may do both.
    create(&server, &cm("admin-blocking", &[(&owner, true)], &[]));
}

#[test]
fn a_custom_resource_owns_a_configmap() {
    let server = Server::start();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    create(&server, &crd);
    let gadget = poll_until(WAIT, "the CRD to be served", || {
        let out = kubectl_stdin(
            &server,
            None,
            &["create", "-o", "json", "-f", "-"],
            &json!({"apiVersion": "example.com/v1", "kind": "Gadget",
                "metadata": {"name": "g", "namespace": "default"}})
            .to_string(),
        );
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).expect("JSON"))
    });
    create(&server, &cm("gadget-config", &[(&gadget, true)], &[]));
    kubectl_ok(&server, None, &["delete", "gadget", "g"]);
    wait_gone(&server, "cm", "gadget-config");
}

#[test]
fn namespaces_get_a_default_service_account_and_the_root_ca() {
    let server = Server::start();
    kubectl_ok(&server, None, &["create", "namespace", "team"]);
    let ca = std::fs::read_to_string(server.data_dir().join("pki/ca.crt")).expect("cluster CA");
    let root = |server: &Server| {
        poll_until(WAIT, "kube-root-ca.crt", || {
            get_in(server, "team", "cm", "kube-root-ca.crt")
        })
    };
    let cm = root(&server);
    assert_eq!(cm["data"]["ca.crt"], json!(ca));
    poll_until(WAIT, "the default ServiceAccount", || {
        get_in(&server, "team", "sa", "default")
    });
    // Both come back when deleted.
    let first = cm["metadata"]["uid"].clone();
    kubectl_ok(&server, None, &["-n", "team", "delete", "sa", "default"]);
    kubectl_ok(
        &server,
        None,
        &["-n", "team", "delete", "cm", "kube-root-ca.crt"],
    );
    poll_until(WAIT, "the default ServiceAccount again", || {
        get_in(&server, "team", "sa", "default")
    });
    poll_until(WAIT, "a new kube-root-ca.crt", || {
        get_in(&server, "team", "cm", "kube-root-ca.crt").filter(|c| c["metadata"]["uid"] != first)
    });
    // An edited CA is put back.
    kubectl_ok(
        &server,
        None,
        &[
            "-n",
            "team",
            "patch",
            "cm",
            "kube-root-ca.crt",
            "--type=merge",
            "-p",
            r#"{"data":{"ca.crt":"forged"}}"#,
        ],
    );
    poll_until(WAIT, "the CA restored", || {
        get_in(&server, "team", "cm", "kube-root-ca.crt")
            .filter(|c| c["data"]["ca.crt"] == json!(ca))
    });
    // The controllers write as their own ServiceAccounts.
    let cm = get_in(&server, "team", "cm", "kube-root-ca.crt").unwrap();
    let managers: Vec<&str> = cm["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert_eq!(managers, ["root-ca-cert-publisher"], "{cm}");
}

#[test]
fn pods_get_their_service_account_and_token_volume() {
    let server = Server::start();
    // Created at once: admission waits for the controller's `default`.
    kubectl_ok(&server, None, &["create", "namespace", "apps"]);
    let pod = |name: &str, extra: Value| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [{"name": "app", "image": "nginx"}]}});
        if let (Some(spec), Some(more)) = (p["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(more.clone());
        }
        p
    };
    let created = create(&server, &pod("web", json!({})));
    let spec = &created["spec"];
    assert_eq!(spec["serviceAccountName"], "default", "{created}");
    let volume = spec["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["projected"].is_object()))
        .unwrap_or_else(|| panic!("a projected token volume: {created}"));
    let name = volume["name"].as_str().unwrap();
    assert!(name.starts_with("kube-api-access-"), "{name}");
    let sources = &volume["projected"]["sources"];
    assert_eq!(sources[0]["serviceAccountToken"]["path"], "token");
    assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
    assert_eq!(
        sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    for c in [&spec["initContainers"][0], &spec["containers"][0]] {
        assert_eq!(
            c["volumeMounts"][0],
            json!({"name": name, "readOnly": true,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}),
            "{created}"
        );
    }
    // Opting out: no volume.
    let created = create(
        &server,
        &pod("quiet", json!({"automountServiceAccountToken": false})),
    );
    assert!(created["spec"]["volumes"].is_null(), "{created}");
    // A ServiceAccount that opts out, and a Pod that names it.
    create(
        &server,
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "robot", "namespace": "apps"},
            "automountServiceAccountToken": false}),
    );
    let created = create(&server, &pod("bot", json!({"serviceAccountName": "robot"})));
    assert_eq!(created["spec"]["serviceAccountName"], "robot");
    assert!(created["spec"]["volumes"].is_null(), "{created}");
    // A missing ServiceAccount is refused, as upstream refuses it.
    let out = kubectl_stdin(
        &server,
        None,
        &["create", "-f", "-"],
        &pod("ghost", json!({"serviceAccountName": "nobody"})).to_string(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"pods "ghost" is forbidden: error looking up service account apps/nobody: serviceaccount "nobody" not found"#),
        "{err}"
    );
}

fn get_in(server: &Server, ns: &str, kind: &str, name: &str) -> Option<Value> {
    let out = kubectl(
        server,
        None,
        &[
            "-n",
            ns,
            "get",
            kind,
            name,
            "-o",
            "json",
            "--show-managed-fields",
        ],
    );
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("JSON"))
}

#[test]
fn the_kubernetes_service_and_its_endpoints() {
    let server = Server::start();
    let svc = poll_until(WAIT, "default/kubernetes", || {
        get_in(&server, "default", "svc", "kubernetes")
    });
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    // Upstream's default status of a Service.
    assert_eq!(svc["status"], json!({"loadBalancer": {}}));
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": server.port()}])
    );
    let slice = poll_until(WAIT, "the kubernetes EndpointSlice", || {
        get_in(&server, "default", "endpointslices", "kubernetes")
    });
    assert_eq!(slice["endpoints"][0]["addresses"], json!(["127.0.0.1"]));
    assert_eq!(slice["ports"][0]["port"], json!(server.port()));
    let ep = kubectl_json(&server, None, &["get", "endpoints", "kubernetes"]);
    assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
}

#[test]
fn one_collector_among_replicas_and_another_takes_over() {
    let etcd = EtcdCluster::start(1);
    let servers = etcd.servers_flag();
    let args = [
        "--etcd-servers",
        servers.as_str(),
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=500ms",
    ];
    let mut a = Server::start_with_args(&args);
    let b = Server::start_with_args(&args);
    let lease = |s: &Server| {
        poll_until(WAIT, "the controllers' lease", || {
            get_in(s, "kube-system", "lease", "wasm-apiserver-controllers")
        })
    };
    let holder = lease(&a)["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_string();
    let owner = create(&a, &cm("owner-1", &[], &[]));
    create(&a, &cm("dep-1", &[(&owner, false)], &[]));
    kubectl_ok(&a, None, &["delete", "cm", "owner-1"]);
    wait_gone(&b, "cm", "dep-1");
    // Exactly one replica's collector acts: the leader's (a second delete
    // of the same object would log a NotFound; one queue holds the work).
    let leading: Vec<&Server> = [&a, &b]
        .into_iter()
        .filter(|s| {
            let m = s.get("/metrics").unwrap().1;
            m.lines().any(|l| {
                l.starts_with("workqueue_adds_total{name=\"garbage_collector_attempt_to_delete\"}")
                    && !l.ends_with(" 0")
            })
        })
        .collect();
    assert_eq!(leading.len(), 1, "one collector runs");
    let leader_is_a = std::ptr::eq(leading[0], &a);
    // Kill the leader; the other takes the lease and collects.
    let (survivor, killed) = if leader_is_a {
        (&b, &mut a)
    } else {
        (&a, &mut { b })
    };
    killed.kill9();
    poll_until(
        Duration::from_secs(20),
        "another replica to take the lease",
        || {
            let l = lease(survivor);
            (l["spec"]["holderIdentity"].as_str() != Some(holder.as_str())).then_some(())
        },
    );
    let owner = create(survivor, &cm("owner-2", &[], &[]));
    create(survivor, &cm("dep-2", &[(&owner, false)], &[]));
    kubectl_ok(survivor, None, &["delete", "cm", "owner-2"]);
    wait_gone(survivor, "cm", "dep-2");
}

/// `componentstatuses` (deprecated, still served by kube-apiserver 1.33):
/// the scheduler, the controller manager and each etcd server, healthy or
/// not as they are, computed on every read; read-only.
#[test]
fn componentstatuses_say_what_runs_and_which_etcd_servers_answer() {
    let mut etcd = EtcdCluster::start(3);
    let servers = etcd.servers_flag();
    let server = Server::start_with_args(&["--etcd-servers", &servers]);
    let out = kubectl(&server, None, &["get", "componentstatuses"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: v1 ComponentStatus is deprecated in v1.19+"),
        "{stderr}"
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "STATUS", "MESSAGE", "ERROR"], "{stdout}");
    let names: Vec<&str> = rows[1..].iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        [
            "controller-manager",
            "etcd-0",
            "etcd-1",
            "etcd-2",
            "scheduler"
        ],
        "{stdout}"
    );
    for row in &rows[1..] {
        assert_eq!(row[1], "Healthy", "{stdout}");
    }
    let scheduler = kubectl_json(&server, None, &["get", "cs", "scheduler", "-o", "json"]);
    assert_eq!(scheduler["conditions"][0]["type"], "Healthy");
    assert_eq!(scheduler["conditions"][0]["status"], "True");
    assert_eq!(scheduler["conditions"][0]["message"], "ok");
    // kube-rs reads it typed (as its event recorder's cluster test does).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let typed = runtime.block_on(async {
        let api: kube::Api<k8s_openapi::api::core::v1::ComponentStatus> =
            kube::Api::all(wasm_apiserver_e2e::kube_client(&server));
        api.get("scheduler").await
    });
    let typed = typed.expect("kube-rs get componentstatuses/scheduler");
    assert_eq!(
        typed.conditions.unwrap_or_default()[0].status,
        "True",
        "kube-rs"
    );

    // A stopped etcd server is unhealthy, the others still answer.
    etcd.kill_member(2);
    let table = poll_until(WAIT, "etcd-2 to be unhealthy", || {
        let out = kubectl_ok(&server, None, &["get", "cs"]);
        out.lines()
            .any(|l| l.starts_with("etcd-2 ") && l.contains("Unhealthy"))
            .then_some(out)
    });
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("etcd-0 ") && l.contains("Healthy") && !l.contains("Unhealthy")),
        "{table}"
    );

    // Read-only: what cannot be stored cannot be written.
    let out = kubectl(&server, None, &["delete", "cs", "scheduler"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MethodNotAllowed")
            || String::from_utf8_lossy(&out.stderr).contains("not allowed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(&server, None, &["get", "cs", "no-such-component"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(r#"componentstatuses "no-such-component" not found"#),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(server);

    // Without the scheduler, it is unhealthy and says why.
    let server = Server::start_with_args(&["--disable-scheduler"]);
    let scheduler = kubectl_json(&server, None, &["get", "cs", "scheduler", "-o", "json"]);
    assert_eq!(scheduler["conditions"][0]["status"], "False");
    assert!(
        scheduler["conditions"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("--disable-scheduler")),
        "{scheduler}"
    );
    let etcd0 = kubectl_json(&server, None, &["get", "cs", "etcd-0", "-o", "json"]);
    assert_eq!(etcd0["conditions"][0]["status"], "True", "{etcd0}");
}
