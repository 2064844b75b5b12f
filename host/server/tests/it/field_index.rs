//! Plugins' cluster reads with a field selector on any field, answered from
//! a field index (`wasm_apiserver_registry::field_index`), against the
//! embedded store: the same answer as reading every object, whatever was
//! written, updated or deleted just before the read (read-your-writes), and
//! an index kept per (resource, field) rather than per read.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::sync::Arc;
use wasm_apiserver::server::AppState;
use wasm_apiserver_api::selector::FieldSelector;
use wasm_apiserver_plugins::{Cluster, ListQuery};
use wasm_apiserver_registry::cluster::ClusterReads;
use wasm_apiserver_registry::options::{ListParams, Preconditions, WriteOptions};
use wasm_apiserver_storage::Storage;
use wasm_apiserver_storage::embedded::{EmbeddedOptions, EmbeddedStore};

fn ingress(name: &str, hosts: &[String]) -> Value {
    let rules: Vec<Value> = hosts
        .iter()
        .map(|h| {
            json!({"host": h, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}})
        })
        .collect();
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name}, "spec": {"rules": rules}})
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_read_sees_every_write_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> =
        Arc::new(EmbeddedStore::open(&dir.path().join("db"), EmbeddedOptions::default()).unwrap());
    let state = AppState::new(storage, "127.0.0.1:6443".parse().unwrap(), 1 << 20, None);
    let objects = state.objects.clone();
    wasm_apiserver_registry::namespaces::ensure_initial(&objects)
        .await
        .unwrap();
    let res = objects
        .resources
        .get("networking.k8s.io", "v1", "ingresses")
        .unwrap();
    let ns_res = objects.resources.get("", "v1", "namespaces").unwrap();
    let opts = WriteOptions::default();
    for ns in ["a", "b"] {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        objects.create(&ns_res, None, body, &opts).await.unwrap();
    }
    let reads = ClusterReads::new(objects.clone(), None);
    let list = |ns: Option<&'static str>, selector: String| {
        let reads = &reads;
        async move {
            let q = ListQuery {
                api_version: "networking.k8s.io/v1",
                kind: "Ingress",
                namespace: ns,
                field_selector: Some(&selector),
                ..Default::default()
            };
            reads.list(&q, usize::MAX).await.unwrap().list
        }
    };
    // The scan's answer: every Ingress read, the same selector applied.
    let scan = |ns: Option<&'static str>, selector: String| {
        let objects = objects.clone();
        let res = res.clone();
        async move {
            let p = ListParams {
                fields: FieldSelector::parse_any(&selector).unwrap(),
                ..Default::default()
            };
            let out = objects.list(&res, ns, &p).await.unwrap();
            json!({"items": out.items})
        }
    };

    // Before any index: a field no upstream selector supports, through
    // a list of hosts.
    let hosts = |i: usize| {
        vec![
            format!("h{}.example.com", i % 7),
            format!("x{i}.example.com"),
        ]
    };
    for i in 0..20 {
        let ns = if i % 2 == 0 { "a" } else { "b" };
        objects
            .create(&res, Some(ns), ingress(&format!("i{i}"), &hosts(i)), &opts)
            .await
            .unwrap();
    }
    assert!(objects.field_indexes.is_empty());
    let got = list(None, "spec.rules.host=h3.example.com".into()).await;
    assert_eq!(names(&got), ["a/i10", "b/i17", "b/i3"]);
    assert_eq!(objects.field_indexes.len(), 1, "the read started an index");
    assert_eq!(
        names(&list(Some("b"), "spec.rules.host=h3.example.com".into()).await),
        ["b/i17", "b/i3"]
    );
    assert_eq!(
        names(
            &list(
                None,
                "spec.rules.host=h3.example.com,metadata.name!=i3".into()
            )
            .await
        ),
        ["a/i10", "b/i17"]
    );

    // Random writes, each followed at once by a read that must see it.
    let mut rng = StdRng::seed_from_u64(33);
    for step in 0..300 {
        let i = rng.random_range(0..30usize);
        let ns = if i % 2 == 0 { "a" } else { "b" };
        let name = format!("i{i}");
        let new_hosts = vec![format!("h{}.example.com", rng.random_range(0..7))];
        match rng.random_range(0..3) {
            0 => {
                let _ = objects
                    .create(&res, Some(ns), ingress(&name, &new_hosts), &opts)
                    .await;
            }
            1 => {
                if let Ok(mut cur) = objects.get(&res, Some(ns), &name).await {
                    cur["spec"] = ingress(&name, &new_hosts)["spec"].clone();
                    objects
                        .update(&res, Some(ns), &name, None, cur, &opts)
                        .await
                        .unwrap();
                }
            }
            _ => {
                let _ = objects
                    .delete(&res, Some(ns), &name, &Preconditions::default(), &opts)
                    .await;
            }
        }
        let host = format!("h{}.example.com", rng.random_range(0..7));
        let ns = [None, Some("a"), Some("b")][step % 3];
        let selector = format!("spec.rules.host={host}");
        let (got, want) = (list(ns, selector.clone()).await, scan(ns, selector).await);
        assert_eq!(names(&got), names(&want), "step {step}: {host} in {ns:?}");
        assert_eq!(
            got["items"], want["items"],
            "step {step}: the objects as stored"
        );
    }
    assert_eq!(objects.field_indexes.len(), 1, "one index per field");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_that_is_not_a_field_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> =
        Arc::new(EmbeddedStore::open(&dir.path().join("db"), EmbeddedOptions::default()).unwrap());
    let state = AppState::new(storage, "127.0.0.1:6443".parse().unwrap(), 1 << 20, None);
    let reads = ClusterReads::new(state.objects.clone(), None);
    for bad in ["spec..host=a", "=a", "spec.rules.host"] {
        let q = ListQuery {
            api_version: "networking.k8s.io/v1",
            kind: "Ingress",
            field_selector: Some(bad),
            ..Default::default()
        };
        let Err(err) = reads.list(&q, usize::MAX).await else {
            panic!("{bad} was accepted");
        };
        assert!(err.contains("invalid selector"), "{bad}: {err}");
    }
    assert!(state.objects.field_indexes.is_empty());
}
