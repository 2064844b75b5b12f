//! The resource-handler world and WIT package versions, with the real
//! guest components of `plugins/`: the first-party `widget-converter`
//! (lossless conversion in batches, defaulting, validation with field
//! paths), the `hostile-handler` fixture contained, and a component of the
//! frozen `wasm-apiserver:plugin@0.1.0` package loaded and called next to
//! 0.2.0 and 0.3.0 ones; a 0.3.0 handler reading the cluster it is granted.

use crate::common;

use common::{access, wasm};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use wasm_apiserver_plugins::{
    AdmissionRequest, Gvk, Gvr, Limits, ObjectRequest, Operation, PluginError, Runtime,
    RuntimeConfig, UserInfo,
};

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default()).expect("runtime")
}

fn limits(timeout_ms: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(timeout_ms),
        max_memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

fn alpha(name: &str, size: u64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"size": size, "color": "red", "legacyId": format!("L-{name}")}})
}

fn object_request(obj: Value) -> ObjectRequest {
    let version = obj["apiVersion"]
        .as_str()
        .unwrap()
        .split('/')
        .nth(1)
        .unwrap()
        .to_owned();
    ObjectRequest {
        uid: "u1".into(),
        kind: Gvk {
            group: "example.com".into(),
            version,
            kind: "Widget".into(),
        },
        operation: Operation::Create,
        user: UserInfo {
            username: "alice".into(),
            ..UserInfo::default()
        },
        object: obj,
        old_object: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widget_converter_converts_batches_losslessly() {
    let runtime = runtime();
    let handler = runtime
        .load_resource_handler("widgets", &wasm("widget_converter"), "", limits(1000))
        .await
        .expect("load");
    let v1 = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "b", "namespace": "default", "uid": "uid-b"},
        "spec": {"dimensions": {"size": 12}, "appearance": {"color": "blue", "finish": "matte"}}});
    // One batch of mixed versions, in order.
    let batch = vec![alpha("a", 4), v1.clone()];
    let as_v1 = handler
        .convert("c1", "example.com/v1", &batch)
        .await
        .expect("to v1");
    assert_eq!(as_v1.len(), 2);
    assert_eq!(
        as_v1[0]["spec"],
        json!({"dimensions": {"size": 4}, "appearance": {"color": "red"}})
    );
    assert_eq!(
        as_v1[0]["metadata"]["annotations"]["example.com/v1alpha1-legacy-id"],
        "L-a"
    );
    assert_eq!(
        as_v1[1], v1,
        "an object already in the version is unchanged"
    );
    let back = handler
        .convert("c2", "example.com/v1alpha1", &as_v1)
        .await
        .expect("back to v1alpha1");
    assert_eq!(
        back[0],
        alpha("a", 4),
        "v1alpha1 -> v1 -> v1alpha1 is lossless"
    );
    assert_eq!(back[1]["spec"], json!({"size": 12, "color": "blue"}));
    let again = handler
        .convert("c3", "example.com/v1", &back[1..])
        .await
        .expect("v1 again");
    assert_eq!(again[0], v1, "v1 -> v1alpha1 -> v1 is lossless");

    let err = handler
        .convert("c4", "example.com/v2", &batch)
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Refused { .. }), "{err}");
    assert!(err.to_string().contains("cannot convert"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widget_converter_defaults_and_validates_with_field_paths() {
    let runtime = runtime();
    let handler = runtime
        .load_resource_handler(
            "widgets",
            &wasm("widget_converter"),
            r#"{"sizeStep": 2}"#,
            limits(1000),
        )
        .await
        .expect("load");
    let defaulted = handler
        .default(&object_request(alpha("a", 12)))
        .await
        .expect("default")
        .expect("a label is added");
    assert_eq!(
        defaulted["metadata"]["labels"]["example.com/size-class"],
        "large"
    );
    assert_eq!(
        handler
            .default(&object_request(defaulted))
            .await
            .expect("default"),
        None,
        "defaulting twice changes nothing"
    );

    assert!(
        handler
            .validate(&object_request(alpha("a", 4)))
            .await
            .unwrap()
            .is_empty()
    );
    let causes = handler
        .validate(&object_request(alpha("a", 3)))
        .await
        .unwrap();
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "spec.size");
    assert_eq!(causes[0].reason, "FieldValueInvalid");
    assert!(causes[0].message.contains("multiple of 2"), "{causes:?}");
    let v1 = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "b"},
        "spec": {"dimensions": {"size": 5}}});
    let causes = handler.validate(&object_request(v1)).await.unwrap();
    assert_eq!(causes[0].field, "spec.dimensions.size");

    let err = runtime
        .load_resource_handler(
            "widgets",
            &wasm("widget_converter"),
            r#"{"sizeStep": 0}"#,
            limits(1000),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Config { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_handlers_are_contained() {
    let runtime = runtime();
    let trapping = runtime
        .load_resource_handler("trap", &wasm("hostile_handler"), "trap", limits(300))
        .await
        .expect("load");
    let err = trapping
        .convert("c1", "example.com/v1", &[alpha("a", 1)])
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");

    let looping = runtime
        .load_resource_handler("loop", &wasm("hostile_handler"), "loop", limits(300))
        .await
        .expect("load");
    let start = Instant::now();
    let err = looping
        .convert("c2", "example.com/v1", &[alpha("a", 1)])
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Timeout { .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );

    // A handler that changes what a conversion may not change is refused.
    let honest = runtime
        .load_resource_handler("plain", &wasm("hostile_handler"), "", limits(300))
        .await
        .expect("load");
    let converted = honest
        .convert("c3", "example.com/v1", &[alpha("a", 1)])
        .await
        .expect("apiVersion only");
    assert_eq!(converted[0]["apiVersion"], "example.com/v1");

    // The runtime keeps serving.
    let good = runtime
        .load_resource_handler("widgets", &wasm("widget_converter"), "", limits(1000))
        .await
        .expect("load");
    good.convert("c4", "example.com/v1", &[alpha("a", 1)])
        .await
        .expect("still converting");
}

fn configmap_request(name: &str) -> AdmissionRequest {
    AdmissionRequest {
        uid: "r1".into(),
        kind: Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        },
        resource: Gvr {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
        },
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: Some(name.into()),
        namespace: Some("default".into()),
        operation: Operation::Create,
        user: UserInfo::default(),
        dry_run: false,
        object: Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}})),
        old_object: None,
        options: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_of_the_frozen_package_load_next_to_current_ones() {
    let runtime = runtime();
    let frozen = runtime
        .load_admission(
            "frozen",
            &wasm("frozen_deny_names"),
            r#"{"prefix": "legacy-"}"#,
            Limits::default(),
        )
        .await
        .expect("a 0.1.0 component loads");
    let current = runtime
        .load_admission(
            "require-labels",
            &wasm("require_labels"),
            r#"{"labels": ["team"]}"#,
            Limits::default(),
        )
        .await
        .expect("a 0.4.0 component loads");
    // The frozen 0.2.0 and 0.3.0 packages too, next to both.
    let v2 = runtime
        .load_admission(
            "frozen-v2",
            &wasm("frozen_v2_deny_names"),
            r#"{"prefix": "old-"}"#,
            Limits::default(),
        )
        .await
        .expect("a 0.2.0 component loads");
    let v3 = runtime
        .load_admission(
            "frozen-v3",
            &wasm("frozen_v3_deny_names"),
            r#"{"prefix": "older-"}"#,
            Limits::default(),
        )
        .await
        .expect("a 0.3.0 component loads");
    let denied = v3.validate(&configmap_request("older-one")).await.unwrap();
    assert!(!denied.allowed);
    assert!(denied.status.unwrap().message.contains("reserved"));
    assert!(
        v3.validate(&configmap_request("old-one"))
            .await
            .unwrap()
            .allowed
    );
    let denied = v2.validate(&configmap_request("old-one")).await.unwrap();
    assert!(!denied.allowed);
    assert!(denied.status.unwrap().message.contains("reserved"));
    assert!(
        v2.validate(&configmap_request("new-one"))
            .await
            .unwrap()
            .allowed
    );
    let denied = frozen
        .validate(&configmap_request("legacy-one"))
        .await
        .unwrap();
    assert!(!denied.allowed);
    let status = denied.status.unwrap();
    assert_eq!(status.code, 403);
    assert!(status.message.contains("reserved"), "{status:?}");
    assert!(status.causes.is_empty());
    assert!(
        frozen
            .validate(&configmap_request("fine"))
            .await
            .unwrap()
            .allowed
    );
    let denied = current.validate(&configmap_request("fine")).await.unwrap();
    assert!(!denied.allowed, "require-labels wants a team label");

    // Each world is its own: a handler is not an admission plugin and back.
    let err = runtime
        .load_admission("widgets", &wasm("widget_converter"), "", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
    assert!(err.to_string().contains("admission-plugin@0.4.0"), "{err}");
    let err = runtime
        .load_resource_handler("frozen", &wasm("frozen_deny_names"), "", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
}

/// A handler of package 0.3.0 reads the cluster it is granted: `default`
/// copies the Namespace's `team` label; ungranted, the write fails with the
/// host's error naming the kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_reads_the_cluster_it_is_granted() {
    let rt = runtime();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {"team": "blue"}}});
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "team-a"}, "spec": {}});
    let load = |grants: &'static [(&'static str, &'static str)]| {
        let (rt, ns) = (rt.clone(), ns.clone());
        async move {
            rt.load_resource_handler_with_cluster(
                "team",
                &wasm("namespace_team_handler"),
                "",
                limits(2_000),
                Some(access(vec![ns], grants, 64, 1 << 20)),
            )
            .await
            .expect("load")
        }
    };
    let granted = load(&[("v1", "Namespace")]).await;
    let defaulted = granted
        .default(&object_request(widget.clone()))
        .await
        .unwrap()
        .expect("a defaulted object");
    assert_eq!(defaulted["spec"]["team"], "blue");
    let ungranted = load(&[]).await;
    let err = ungranted
        .default(&object_request(widget))
        .await
        .expect_err("an ungranted read fails the write");
    assert!(
        err.to_string()
            .contains("cannot read namespace team-a: reading v1 Namespace is not granted"),
        "{err}"
    );
}
