//! End-to-end: the built-in workload API driven by kubectl's own
//! generators, against the real binary: `create deployment`, `run`,
//! `create job|cronjob`, `expose`, `create service nodeport`, `scale`,
//! `get` tables and `get all`, defaults visible in the stored objects,
//! invalid workloads rejected with field paths, and cluster IPs never
//! handed out twice.

use serde_json::Value;
use std::collections::BTreeSet;
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin};

fn get(server: &Server, kind: &str, name: &str) -> Value {
    kubectl_json(server, None, &["get", kind, name])
}

fn in_service_range(ip: &str) -> bool {
    let ip: std::net::Ipv4Addr = ip.parse().expect("an IPv4 cluster IP");
    let n = u32::from(ip);
    (n & 0xfff0_0000) == u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0))
}

#[test]
fn kubectl_generators_create_defaulted_workloads() {
    let server = Server::start();
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=8080",
        ],
    );
    let d = get(&server, "deployment", "web");
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(spec["strategy"]["type"], "RollingUpdate");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], "25%");
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always");
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert_eq!(pod["schedulerName"], "default-scheduler");
    let c = &pod["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["ports"][0]["protocol"], "TCP");

    let table = kubectl_ok(&server, None, &["get", "deployments"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{table}"
    );
    assert!(table.lines().nth(1).unwrap().starts_with("web"), "{table}");
    assert!(table.contains("0/2"), "{table}");
    let wide = kubectl_ok(&server, None, &["get", "deployments", "-o", "wide"]);
    assert!(
        wide.contains("nginx:1.27") && wide.contains("app=web"),
        "{wide}"
    );

    kubectl_ok(
        &server,
        None,
        &["scale", "deployment", "web", "--replicas=5"],
    );
    assert_eq!(get(&server, "deployment", "web")["spec"]["replicas"], 5);

    // Reads that need no controller.
    let history = kubectl_ok(&server, None, &["rollout", "history", "deployment/web"]);
    assert!(history.contains("deployment.apps/web"), "{history}");
    let described = kubectl_ok(&server, None, &["describe", "deployment", "web"]);
    assert!(
        described.contains("25% max unavailable, 25% max surge")
            && described.contains("nginx:1.27"),
        "{described}"
    );
    let scale: Value = serde_json::from_str(&kubectl_ok(
        &server,
        None,
        &[
            "get",
            "--raw",
            "/apis/apps/v1/namespaces/default/deployments/web/scale",
        ],
    ))
    .expect("a Scale");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(scale["status"]["selector"], "app=web");

    // Pods: defaults, a Pending status, and upstream's table.
    kubectl_ok(
        &server,
        None,
        &["run", "box", "--image=busybox", "--", "sleep", "1d"],
    );
    let p = get(&server, "pod", "box");
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
    let pods = kubectl_ok(&server, None, &["get", "pods"]);
    let header: Vec<&str> = pods.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{pods}"
    );
    let row: Vec<&str> = pods.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["box", "0/1", "Pending", "0"], "{pods}");

    // What needs a kubelet gets upstream's answers, not a hang: an
    // unscheduled pod has an empty log, and no host to exec in.
    let out = kubectl(&server, None, &["logs", "box"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let out = kubectl(&server, None, &["exec", "box", "--", "ls"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("does not have a host assigned"), "{stderr}");

    // Jobs and CronJobs.
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "job",
            "once",
            "--image=busybox",
            "--",
            "echo",
            "hi",
        ],
    );
    let j = get(&server, "job", "once");
    assert_eq!(j["spec"]["completions"], 1);
    assert_eq!(j["spec"]["parallelism"], 1);
    assert_eq!(j["spec"]["backoffLimit"], 6);
    assert_eq!(j["spec"]["completionMode"], "NonIndexed");
    let uid = j["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid
    );
    assert_eq!(
        j["spec"]["template"]["metadata"]["labels"]["job-name"],
        "once"
    );
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "cronjob",
            "tick",
            "--image=busybox",
            "--schedule=*/5 * * * *",
            "--",
            "date",
        ],
    );
    let cj = get(&server, "cronjob", "tick");
    assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
    assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(cj["spec"]["failedJobsHistoryLimit"], 1);
    let cronjobs = kubectl_ok(&server, None, &["get", "cronjobs"]);
    assert!(cronjobs.contains("*/5 * * * *"), "{cronjobs}");

    // Services: expose, NodePort, tables.
    kubectl_ok(
        &server,
        None,
        &[
            "expose",
            "deployment",
            "web",
            "--port=80",
            "--target-port=8080",
        ],
    );
    let svc = get(&server, "service", "web");
    let ip = svc["spec"]["clusterIP"].as_str().unwrap();
    assert!(in_service_range(ip), "{svc}");
    assert_eq!(svc["spec"]["clusterIPs"][0], ip);
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["sessionAffinity"], "None");
    assert_eq!(svc["spec"]["ipFamilies"][0], "IPv4");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    kubectl_ok(
        &server,
        None,
        &["create", "service", "nodeport", "np", "--tcp=80:8080"],
    );
    let np = get(&server, "service", "np");
    let node_port = np["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&node_port), "{np}");
    let services = kubectl_ok(&server, None, &["get", "services"]);
    let header: Vec<&str> = services
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ],
        "{services}"
    );
    assert!(
        services.contains(ip) && services.contains("80/TCP"),
        "{services}"
    );
    assert!(
        services.contains(&format!("80:{node_port}/TCP")),
        "{services}"
    );

    let all = kubectl_ok(&server, None, &["get", "all"]);
    for expected in [
        "pod/box",
        "service/web",
        "deployment.apps/web",
        "job.batch/once",
        "cronjob.batch/tick",
    ] {
        assert!(
            all.contains(expected),
            "{expected} missing from `get all`:\n{all}"
        );
    }
}

#[test]
fn invalid_workloads_are_rejected_with_field_paths() {
    let server = Server::start();
    let bad_selector = r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"},
        "spec": {"selector": {"matchLabels": {"app": "a"}},
                 "template": {"metadata": {"labels": {"app": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}"#;
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], bad_selector);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("spec.template.metadata.labels")
            && stderr.contains("`selector` does not match template `labels`"),
        "{stderr}"
    );
    let no_image = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c"}]}}"#;
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], no_image);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("spec.containers[0].image: Required value"),
        "{stderr}"
    );

    // Unknown fields of built-in kinds are refused under kubectl's Strict validation.
    let typo = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typo"},
        "spec": {"containers": [{"name": "c", "image": "nginx", "imagez": "x"}]}}"#;
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], typo);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("imagez"), "{stderr}");

    // More than 1 MiB of ConfigMap data is refused, as upstream.
    let big = format!(
        r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "big"}}, "data": {{"k": "{}"}}}}"#,
        "x".repeat(1024 * 1024 + 1)
    );
    let out = kubectl_stdin(&server, None, &["create", "-f", "-"], &big);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("Too long: must have at most 1048576 bytes"),
        "{stderr}"
    );

    // The selector of an apps/v1 workload cannot change.
    kubectl_ok(
        &server,
        None,
        &["create", "deployment", "web", "--image=nginx"],
    );
    let out = kubectl(
        &server,
        None,
        &[
            "patch",
            "deployment",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"selector":{"matchLabels":{"app":"other"}},"template":{"metadata":{"labels":{"app":"other"}}}}}"#,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("spec.selector") && stderr.contains("field is immutable"),
        "{stderr}"
    );
}

#[test]
fn cluster_ips_are_never_handed_out_twice() {
    let server = Server::start();
    let ips: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|i| {
                let server = &server;
                s.spawn(move || {
                    let name = format!("svc-{i}");
                    kubectl_ok(
                        server,
                        None,
                        &["create", "service", "clusterip", &name, "--tcp=80:80"],
                    );
                    get(server, "service", &name)["spec"]["clusterIP"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: BTreeSet<&String> = ips.iter().collect();
    assert_eq!(distinct.len(), ips.len(), "{ips:?}");

    // A requested IP that is taken is refused; once freed it can be had.
    let taken = &ips[0];
    let manifest = |name: &str| {
        format!(
            r#"{{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "{name}"}},
                "spec": {{"clusterIP": "{taken}", "ports": [{{"port": 80}}]}}}}"#
        )
    };
    let out = kubectl_stdin(&server, None, &["create", "-f", "-"], &manifest("again"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("provided IP is already allocated"),
        "{stderr}"
    );
    kubectl_ok(&server, None, &["delete", "service", "svc-0"]);
    let out = kubectl_stdin(&server, None, &["create", "-f", "-"], &manifest("again"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        get(&server, "service", "again")["spec"]["clusterIP"],
        taken.as_str()
    );
}

#[test]
fn a_privileged_container_policy_loaded_at_runtime_guards_pods_and_templates() {
    let dir = wasm_apiserver_e2e::plugin_dir();
    let server = Server::start_with_args(&["--plugin-dir", dir.to_str().expect("UTF-8 path")]);
    let plugin = r#"{"apiVersion": "admission.wasm-apiserver.io/v1alpha1", "kind": "AdmissionPlugin",
        "metadata": {"name": "deny-privileged"},
        "spec": {"module": {"file": "deny_privileged.wasm"}, "phases": ["Validating"],
                 "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["", "apps"],
                            "apiVersions": ["v1"], "resources": ["pods", "deployments"]}]}}"#;
    kubectl_stdin(&server, None, &["apply", "-f", "-"], plugin);
    wasm_apiserver_e2e::poll_until(std::time::Duration::from_secs(20), "plugin active", || {
        (get(&server, "admissionplugin", "deny-privileged")["status"]["phase"] == "Active")
            .then_some(())
    });
    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]}}"#;
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], pod);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("privileged containers are not allowed")
            && stderr.contains("spec.containers[0].securityContext.privileged"),
        "{stderr}"
    );
    let deployment = r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "root"},
        "spec": {"selector": {"matchLabels": {"app": "r"}},
                 "template": {"metadata": {"labels": {"app": "r"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox",
                                                       "securityContext": {"privileged": true}}]}}}}"#;
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], deployment);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("spec.template.spec.containers[0].securityContext.privileged"),
        "{stderr}"
    );
    // Unprivileged ones pass.
    kubectl_ok(&server, None, &["run", "plain", "--image=busybox"]);
}

#[test]
fn apply_twice_merges_containers_by_name() {
    let server = Server::start();
    let manifest = |containers: &str| {
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: {containers}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: web}}
data: {{k: v}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: web}}
spec:
  rules: [{{host: web.example, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: web}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}
  minReplicas: 1
  maxReplicas: 5
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web}}
spec:
  minAvailable: 1
  selector: {{matchLabels: {{app: web}}}}
"#
        )
    };
    let first = manifest(
        "[{name: a, image: 'a:1', env: [{name: X, value: '1'}]}, {name: b, image: 'b:1'}]",
    );
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], &first);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ip = get(&server, "service", "web")["spec"]["clusterIP"].clone();
    let second = manifest(
        "[{name: a, image: 'a:2', env: [{name: X, value: '1'}]}, {name: c, image: 'c:1'}]",
    );
    let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], &second);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = get(&server, "deployment", "web");
    let containers = &d["spec"]["template"]["spec"]["containers"];
    let names: Vec<&str> = containers
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "c"], "{d}");
    assert_eq!(containers[0]["image"], "a:2");
    assert_eq!(containers[0]["env"][0]["name"], "X");
    assert_eq!(
        containers[0]["imagePullPolicy"], "IfNotPresent",
        "defaults kept"
    );
    assert_eq!(
        get(&server, "service", "web")["spec"]["clusterIP"],
        ip,
        "the cluster IP stays"
    );
    for (kind, header) in [
        ("ingress", "HOSTS"),
        ("hpa", "REFERENCE"),
        ("pdb", "MIN AVAILABLE"),
    ] {
        let table = kubectl_ok(&server, None, &["get", kind]);
        assert!(
            table.contains(header) && table.contains("web"),
            "{kind}: {table}"
        );
    }
}

#[test]
fn pods_are_bound_and_evicted_as_upstream() {
    let server = Server::start();
    for name in ["free", "guarded"] {
        kubectl_ok(
            &server,
            None,
            &[
                "run",
                name,
                "--image=busybox",
                &format!("--labels=app={name}"),
            ],
        );
    }
    let binding = r#"{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "free"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}"#;
    let path = "/api/v1/namespaces/default/pods/free/binding";
    let out = kubectl_stdin(
        &server,
        None,
        &["create", "--raw", path, "-f", "-"],
        binding,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(get(&server, "pod", "free")["spec"]["nodeName"], "node-1");
    let out = kubectl_stdin(
        &server,
        None,
        &["create", "--raw", path, "-f", "-"],
        binding,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("already assigned to node"), "{stderr}");
    // Scheduled to a node that does not exist, there is no kubelet to ask.
    let out = kubectl(&server, None, &["logs", "free"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(r#"nodes "node-1" not found"#), "{stderr}");

    // A budget with no disruptions allowed blocks the eviction of a
    // running pod (429); the disruption controller computes it.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "pod",
            "guarded",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}"#,
        ],
    );
    let pdb = r#"{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}"#;
    kubectl_stdin(&server, None, &["apply", "-f", "-"], pdb);
    wasm_apiserver_e2e::poll_until(
        std::time::Duration::from_secs(20),
        "the budget's status",
        || {
            let b = get(&server, "pdb", "keep");
            (b["status"]["observedGeneration"] == b["metadata"]["generation"]
                && b["status"]["currentHealthy"] == 1)
                .then_some(())
        },
    );
    let eviction = |pod: &str| {
        format!(
            r#"{{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {{"name": "{pod}"}}}}"#
        )
    };
    let out = kubectl_stdin(
        &server,
        None,
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/default/pods/guarded/eviction",
            "-f",
            "-",
        ],
        &eviction("guarded"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("disruption budget"), "{stderr}");
    assert!(
        kubectl(&server, None, &["get", "pod", "guarded"])
            .status
            .success()
    );
    let out = kubectl_stdin(
        &server,
        None,
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/default/pods/free/eviction",
            "-f",
            "-",
        ],
        &eviction("free"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Evicted, it is deleted gracefully: bound to a node, it waits for
    // that node's kubelet (none here) for its termination grace period.
    let evicted = get(&server, "pod", "free");
    assert!(
        evicted["metadata"]["deletionTimestamp"].is_string(),
        "{evicted}"
    );
    assert_eq!(evicted["metadata"]["deletionGracePeriodSeconds"], 30);
    kubectl_ok(
        &server,
        None,
        &["delete", "pod", "free", "--grace-period=0", "--force"],
    );
    assert!(
        !kubectl(&server, None, &["get", "pod", "free"])
            .status
            .success(),
        "force-deleted"
    );
}

/// An HPA is one object in both versions: written through autoscaling/v2
/// (`kubectl autoscale`), read through v1 with v2's CPU metric as
/// `targetCPUUtilizationPercentage`, and a v1 write keeps the metrics v1
/// cannot express.
#[test]
fn hpas_convert_between_autoscaling_v1_and_v2() {
    let server = Server::start();
    kubectl_ok(
        &server,
        None,
        &["create", "deployment", "web", "--image=nginx"],
    );
    let hpa = r#"{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 5,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}}]}}"#;
    let out = kubectl_stdin(&server, None, &["create", "-f", "-"], hpa);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v1 = kubectl_json(
        &server,
        None,
        &["get", "horizontalpodautoscalers.v1.autoscaling", "web"],
    );
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60, "{v1}");
    assert!(v1["spec"].get("metrics").is_none());
    // A v1 write (maxReplicas) through the v1 API keeps the memory metric.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "horizontalpodautoscalers.v1.autoscaling",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec": {"maxReplicas": 7}}"#,
        ],
    );
    let v2 = kubectl_json(
        &server,
        None,
        &["get", "horizontalpodautoscalers.v2.autoscaling", "web"],
    );
    assert_eq!(v2["spec"]["maxReplicas"], 7);
    let metrics = v2["spec"]["metrics"].as_array().expect("metrics");
    assert_eq!(metrics.len(), 2, "{v2}");
    assert_eq!(metrics[1]["resource"]["name"], "memory");
    assert!(
        v2["metadata"]["annotations"]
            .get("autoscaling.alpha.kubernetes.io/metrics")
            .is_none(),
        "{v2}"
    );
    // `kubectl autoscale` (v2 since kubectl 1.23) makes one v1 shows.
    kubectl_ok(
        &server,
        None,
        &[
            "autoscale",
            "deployment",
            "web",
            "--name=auto",
            "--max=3",
            "--cpu-percent=50",
        ],
    );
    let auto = kubectl_json(
        &server,
        None,
        &["get", "horizontalpodautoscalers.v1.autoscaling", "auto"],
    );
    assert_eq!(auto["spec"]["targetCPUUtilizationPercentage"], 50, "{auto}");
}

/// Discovery prefers a group's highest version, as upstream: `kubectl get
/// hpa` reads autoscaling/v2.
#[test]
fn discovery_prefers_autoscaling_v2() {
    let server = Server::start();
    let group: Value = serde_json::from_str(&server.get("/apis/autoscaling").unwrap().1).unwrap();
    assert_eq!(group["preferredVersion"]["version"], "v2", "{group}");
}
