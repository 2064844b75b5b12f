//! End-to-end: a selector Service's Endpoints and EndpointSlices follow
//! its pods (the endpoints and EndpointSlice controllers), with the stand-in
//! node agent running the pods: ready, not ready, terminating, gone.

use serde_json::Value;
use std::time::Duration;
use wasm_apiserver_e2e::node_agent::{NodeAgent, NodeSpec};
use wasm_apiserver_e2e::{Server, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, poll_until};

fn create_pod(server: &Server, name: &str, node: &str, app: &str, annotations: &str) {
    let manifest = format!(
        r#"{{"apiVersion": "v1", "kind": "Pod",
            "metadata": {{"name": "{name}", "labels": {{"app": "{app}"}}, "annotations": {{{annotations}}}}},
            "spec": {{"nodeName": "{node}",
                      "containers": [{{"name": "main", "image": "nginx",
                                       "ports": [{{"name": "http", "containerPort": 8080}}]}}]}}}}"#
    );
    let out = kubectl_stdin(server, None, &["create", "-f", "-"], &manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Service's endpoints in its slices: pod name → conditions.
fn slice_endpoints(server: &Server, service: &str) -> Vec<(String, Value, Value)> {
    let slices = kubectl_json(
        server,
        None,
        &[
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={service}"),
        ],
    );
    let mut out = Vec::new();
    for s in slices["items"].as_array().unwrap() {
        assert_eq!(
            s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io"
        );
        for e in s["endpoints"].as_array().into_iter().flatten() {
            out.push((
                e["targetRef"]["name"].as_str().unwrap().to_string(),
                e["conditions"].clone(),
                e.get("zone").cloned().unwrap_or(Value::Null),
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn endpoint_names(server: &Server, service: &str, field: &str) -> Vec<String> {
    let ep = kubectl_json(server, None, &["get", "endpoints", service]);
    let mut names: Vec<String> = ep["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s[field].as_array().cloned().unwrap_or_default())
        .map(|a| a["targetRef"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn service_endpoints_follow_ready_pods() {
    let server = Server::start();
    let agent = NodeAgent::start(
        &server,
        vec![
            NodeSpec::new("node-a").label("topology.kubernetes.io/zone", "z1"),
            NodeSpec::new("node-b"),
        ],
    );
    create_pod(&server, "web-1", "node-a", "web", "");
    create_pod(
        &server,
        "web-2",
        "node-b",
        "web",
        r#""node-agent.wasm-apiserver.io/never-ready": "true""#,
    );
    create_pod(&server, "other", "node-a", "db", "");
    kubectl_ok(
        &server,
        None,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/web-1",
            "--timeout=30s",
        ],
    );
    let svc = r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}"#;
    kubectl_stdin(&server, None, &["create", "-f", "-"], svc);

    let ready = |c: &Value| c["ready"] == true;
    poll_until(Duration::from_secs(20), "both pods in the slice", || {
        let eps = slice_endpoints(&server, "web");
        (eps.len() == 2 && eps.iter().filter(|e| ready(&e.1)).count() == 1).then_some(())
    });
    let eps = slice_endpoints(&server, "web");
    assert_eq!(eps[0].0, "web-1");
    assert_eq!(
        eps[0].1,
        serde_json::json!({"ready": true, "serving": true, "terminating": false})
    );
    assert_eq!(eps[0].2, "z1");
    assert_eq!(eps[1].0, "web-2");
    assert_eq!(eps[1].1["ready"], false);
    let slices = kubectl_json(
        &server,
        None,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ],
    );
    assert_eq!(
        slices["items"][0]["ports"][0]["port"], 8080,
        "the named target port resolved"
    );
    assert_eq!(
        slices["items"][0]["metadata"]["ownerReferences"][0]["kind"],
        "Service"
    );
    poll_until(Duration::from_secs(10), "Endpoints", || {
        (endpoint_names(&server, "web", "addresses") == ["web-1"]
            && endpoint_names(&server, "web", "notReadyAddresses") == ["web-2"])
        .then_some(())
    });

    // Ready later: listed ready.
    agent.set_ready("default", "web-2", true);
    poll_until(Duration::from_secs(10), "web-2 ready", || {
        (endpoint_names(&server, "web", "addresses") == ["web-1", "web-2"]).then_some(())
    });

    // Terminating: off the Endpoints at once, in the slice as terminating
    // (still serving) until its node has deleted it.
    let out = kubectl(
        &server,
        None,
        &[
            "annotate",
            "pod",
            "web-1",
            "node-agent.wasm-apiserver.io/terminate-after=4s",
        ],
    );
    assert!(out.status.success());
    kubectl_ok(&server, None, &["delete", "pod", "web-1", "--wait=false"]);
    poll_until(
        Duration::from_secs(10),
        "web-1 terminating in the slice",
        || {
            let eps = slice_endpoints(&server, "web");
            eps.iter()
                .find(|e| e.0 == "web-1" && e.1["terminating"] == true)
                .map(|e| {
                    assert_eq!(
                        e.1,
                        serde_json::json!({"ready": false, "serving": true, "terminating": true})
                    )
                })
        },
    );
    assert_eq!(endpoint_names(&server, "web", "addresses"), ["web-2"]);
    poll_until(Duration::from_secs(20), "web-1 gone from the slice", || {
        (slice_endpoints(&server, "web")
            .iter()
            .map(|e| e.0.as_str())
            .collect::<Vec<_>>()
            == ["web-2"])
        .then_some(())
    });

    // A slice deleted by hand is made again.
    let name = kubectl_json(
        &server,
        None,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ],
    )["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    kubectl_ok(&server, None, &["delete", "endpointslice", &name]);
    poll_until(Duration::from_secs(10), "the slice back", || {
        (slice_endpoints(&server, "web").len() == 1).then_some(())
    });

    // The Service gone: its Endpoints and slices go.
    kubectl_ok(&server, None, &["delete", "service", "web"]);
    poll_until(Duration::from_secs(20), "endpoints and slices gone", || {
        let ep = kubectl(&server, None, &["get", "endpoints", "web"]);
        let slices = kubectl_json(
            &server,
            None,
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=web",
            ],
        );
        (!ep.status.success() && slices["items"].as_array().unwrap().is_empty()).then_some(())
    });
}

/// The mirrored slices of `name`: (addresses, ready) per endpoint, sorted,
/// and the slices themselves.
fn mirrored(server: &Server, name: &str) -> (Vec<(String, bool)>, Vec<Value>) {
    let slices = kubectl_json(
        server,
        None,
        &[
            "get",
            "endpointslices",
            "-l",
            &format!(
                "kubernetes.io/service-name={name},\
                 endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io"
            ),
        ],
    );
    let items = slices["items"].as_array().cloned().unwrap_or_default();
    let mut endpoints: Vec<(String, bool)> = items
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .map(|e| {
            (
                e["addresses"][0].as_str().unwrap_or_default().to_string(),
                e["conditions"]["ready"] == true,
            )
        })
        .collect();
    endpoints.sort();
    (endpoints, items)
}

/// Endpoints written by hand for a Service without a selector are
/// mirrored into EndpointSlices (the EndpointSliceMirroring controller),
/// follow their changes, and stop being mirrored when the Service gets a
/// selector; the `kubernetes` Service's own Endpoints (`skip-mirror`) are
/// not.
#[test]
fn endpoints_of_a_service_without_selector_are_mirrored() {
    let server = Server::start();
    let apply = |doc: &str| {
        let out = kubectl_stdin(&server, None, &["apply", "-f", "-"], doc);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    apply(
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"db"},
            "spec":{"ports":[{"name":"pg","port":5432}]}}"#,
    );
    apply(
        r#"{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"db","labels":{"team":"data"}},
            "subsets":[{"addresses":[{"ip":"192.0.2.10"},{"ip":"192.0.2.11"}],
                        "notReadyAddresses":[{"ip":"192.0.2.12"}],
                        "ports":[{"name":"pg","port":5432}]}]}"#,
    );
    let (endpoints, slices) = poll_until(Duration::from_secs(30), "the mirrored slice", || {
        let m = mirrored(&server, "db");
        (m.0.len() == 3).then_some(m)
    });
    assert_eq!(
        endpoints,
        [
            ("192.0.2.10".to_string(), true),
            ("192.0.2.11".to_string(), true),
            ("192.0.2.12".to_string(), false)
        ]
    );
    assert_eq!(slices.len(), 1);
    let slice = &slices[0];
    assert_eq!(slice["metadata"]["labels"]["team"], "data");
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Endpoints");
    assert_eq!(slice["ports"][0]["port"], 5432);
    assert_eq!(slice["addressType"], "IPv4");
    // A change of the Endpoints follows.
    apply(
        r#"{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"db","labels":{"team":"data"}},
            "subsets":[{"addresses":[{"ip":"192.0.2.20"}],
                        "ports":[{"name":"pg","port":5432}]}]}"#,
    );
    poll_until(Duration::from_secs(30), "the new address", || {
        (mirrored(&server, "db").0 == [("192.0.2.20".to_string(), true)]).then_some(())
    });
    // A slice deleted by hand comes back.
    let name = slice["metadata"]["name"].as_str().unwrap().to_string();
    kubectl_ok(&server, None, &["delete", "endpointslice", &name]);
    poll_until(Duration::from_secs(30), "the slice back", || {
        (mirrored(&server, "db").0.len() == 1).then_some(())
    });
    // With a selector, the Service's endpoints come from pods: no mirror.
    kubectl_ok(
        &server,
        None,
        &[
            "patch",
            "service",
            "db",
            "-p",
            r#"{"spec":{"selector":{"app":"db"}}}"#,
        ],
    );
    poll_until(Duration::from_secs(30), "the mirrored slices to go", || {
        mirrored(&server, "db").1.is_empty().then_some(())
    });
    // Never mirrored: the `kubernetes` Service's Endpoints.
    assert!(mirrored(&server, "kubernetes").1.is_empty());
}
