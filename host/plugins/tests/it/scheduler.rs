//! The scheduler world (package 0.4.0) on a real component: what a cycle's
//! two calls answer when the plugin traps, spins, eats memory or scores out
//! of range (each a [`PluginError`], the runtime serving on), and the
//! extension points it claims.

use crate::common::wasm;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasm_apiserver_plugins::{
    ExtensionPoints, Filtered, Limits, PluginError, Runtime, RuntimeConfig, SchedulerNode, Scored,
};

fn nodes(n: usize) -> Vec<Arc<SchedulerNode>> {
    (0..n)
        .map(|i| {
            Arc::new(SchedulerNode::new(
                &serde_json::json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("n{i}"), "labels": {"score": "7"}}}),
            ))
        })
        .collect()
}

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","image":"nginx"}]}}"#;

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_millis(300),
        max_memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_scheduler_plugins_fail_their_calls_and_the_runtime_serves_on() {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let wasm = wasm("hostile_scheduler");
    let load = |mode: &str| {
        let config = format!(r#"{{"mode": "{mode}"}}"#);
        let name = format!("hostile-{mode}");
        let (runtime, wasm) = (runtime.clone(), wasm.clone());
        async move {
            runtime
                .load_scheduler(&name, &wasm, &config, limits(), None)
                .await
                .expect("loads")
        }
    };
    let three = nodes(3);

    let trap = load("trap").await;
    assert_eq!(
        trap.points(),
        ExtensionPoints {
            filter: true,
            score: true,
            ..Default::default()
        }
    );
    let err = trap.filter("u1", POD, &three).await.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");
    let err = trap.score("u1", "", POD, &three).await.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");

    let spin = load("loop").await;
    let start = Instant::now();
    let err = spin.filter("u2", POD, &three).await.unwrap_err();
    assert!(matches!(err, PluginError::Timeout { .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );

    let hog = load("memory").await;
    let err = hog.filter("u3", POD, &three).await.unwrap_err();
    assert!(matches!(err, PluginError::MemoryExceeded { .. }), "{err}");

    // Every node fits, but a score of 1000 is refused by the host.
    let wild = load("out-of-range").await;
    match wild.filter("u4", POD, &three).await.unwrap() {
        Filtered::Nodes { verdicts, .. } => {
            assert_eq!(verdicts.len(), three.len());
            assert!(verdicts.iter().all(Option::is_none), "{verdicts:?}");
        }
        other => panic!("{other:?}"),
    }
    let err = wild.score("u4", "", POD, &three).await.unwrap_err();
    assert!(matches!(err, PluginError::InvalidOutput { .. }), "{err}");
    assert!(err.to_string().contains("outside 0..=100"), "{err}");

    // The runtime still serves: the same plugins answer again (and fail
    // again, each in its own fresh instance).
    let err = trap.filter("u5", POD, &three).await.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");
    assert!(matches!(
        wild.filter("u6", POD, &nodes(1)).await,
        Ok(Filtered::Nodes { .. })
    ));
    let text = runtime.metrics_text();
    assert!(
        text.contains(r#"kind="scheduler""#) && text.contains("hostile-trap"),
        "{text}"
    );
    // An empty score list for no nodes is fine.
    assert!(matches!(
        wild.score("u7", "", POD, &[]).await,
        Ok(Scored::Scores(s)) if s.is_empty()
    ));
}
