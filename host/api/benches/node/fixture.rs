//! The cluster both Node authorizer benches build: `NODES` nodes and
//! `PODS` pods bound to them (10 per node), in 100 namespaces, as
//! Deployments make them: every pod has a ServiceAccount, the projected
//! `kube-api-access-*` volume (the `kube-root-ca.crt` ConfigMap), an image
//! pull Secret, a Secret volume and a ConfigMap `envFrom` shared by the
//! pods of its Deployment (10 pods each), and one pod in five a
//! PersistentVolumeClaim of its own, bound to a PV.

// Each bench uses part of it.
#![allow(dead_code)]

use serde_json::{Value, json};
use wasm_apiserver_api::node::graph::{NodeGraph, PodRefs, PvRefs};

pub const NODES: usize = 1_000;
pub const PODS: usize = 10_000;
const NAMESPACES: usize = 100;
const PER_DEPLOYMENT: usize = 10;

pub fn namespace(i: usize) -> String {
    format!("team-{}", (i / PER_DEPLOYMENT) % NAMESPACES)
}

pub fn node(i: usize) -> String {
    // A Deployment's pods are spread over nodes.
    format!("node-{:04}", i % NODES)
}

pub fn deployment(i: usize) -> String {
    format!("app-{}", i / PER_DEPLOYMENT)
}

pub fn pod(i: usize) -> Value {
    let app = deployment(i);
    let mut volumes = vec![
        json!({"name": "kube-api-access-x7k2p", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]}}),
        json!({"name": "tls", "secret": {"secretName": format!("{app}-tls")}}),
    ];
    if i.is_multiple_of(5) {
        volumes.push(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{i}")}}),
        );
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{app}-{:05}", i), "namespace": namespace(i)},
        "spec": {
            "nodeName": node(i),
            "serviceAccountName": app,
            "imagePullSecrets": [{"name": "registry"}],
            "containers": [{
                "name": "app", "image": "registry.example.com/app:1.0",
                "envFrom": [{"configMapRef": {"name": format!("{app}-config")}}],
            }],
            "volumes": volumes,
        },
    })
}

pub fn pod_name(i: usize) -> String {
    format!("{}-{:05}", deployment(i), i)
}

/// The graph of every pod, claim and volume.
pub fn graph() -> NodeGraph {
    let mut g = NodeGraph::new();
    for i in 0..PODS {
        let p = pod(i);
        g.set_pod(&namespace(i), &pod_name(i), PodRefs::of(&p));
        if i.is_multiple_of(5) {
            let pv = format!("pv-{i}");
            g.set_pvc(&namespace(i), &format!("data-{i}"), Some(&pv));
            let spec = json!({"spec": {"claimRef": {"namespace": namespace(i), "name": format!("data-{i}")},
                "csi": {"driver": "d", "volumeHandle": pv.clone()}}});
            g.set_pv(&pv, Some(PvRefs::of(&spec)));
        }
    }
    g
}
