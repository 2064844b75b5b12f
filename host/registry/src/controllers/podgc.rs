//! kube-controller-manager's **pod garbage collector**
//! (`pod-garbage-collector-controller`, as the ServiceAccount
//! `pod-garbage-collector` with upstream's role), every check period
//! (upstream's 20 s):
//!
//! * terminated pods (`Succeeded`, `Failed`) beyond
//!   `--terminated-pod-gc-threshold` are deleted, evicted ones first, then
//!   the oldest (upstream's `gcTerminated`);
//! * pods bound to a node that does not exist are deleted once the node
//!   has been missing for the quarantine (upstream's 40 s) and a read of
//!   the node still finds nothing (upstream's `gcOrphaned`): each first
//!   gets phase `Failed` and a `DisruptionTarget` condition
//!   (`DeletionByPodGC`), then is deleted.
//!
//! * pods terminating on a node that is not `Ready` and is tainted
//!   `node.kubernetes.io/out-of-service` (its kubelet will not finish
//!   them) are force deleted (upstream's `gcTerminating`).
//!
//! Pods are read from a cache kept by a watch (upstream's informer), only
//! the fields the passes read: listing every pod from storage every period
//! was most of an idle server's CPU with 10,000 pods (measured:
//! `bench-workloads idle`). Nodes, far fewer, are listed at each pass.
//!
//! Every delete here is forced (a grace period of 0), as upstream's: no
//! kubelet is left to finish a graceful one. Upstream's pass for
//! unscheduled terminating pods is not run: a pod no node runs is deleted
//! at once (only finalizers hold one, and a forced delete does not lift
//! them either).

use super::leader::Leadership;
use super::{Client, lock, namespaced_key};
use crate::options::{ListParams, Preconditions};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasm_apiserver_api::node::lifecycle;
use wasm_apiserver_api::{ApiError, meta};

/// The identity it runs as.
pub const NAME: &str = "pod-garbage-collector";
/// Its `--controllers` name.
pub const CONTROLLER: &str = "pod-garbage-collector-controller";

#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `--terminated-pod-gc-threshold` (12500; 0 keeps every terminated pod).
    pub terminated_threshold: usize,
    /// How often it looks (upstream's fixed 20 s).
    pub period: Duration,
    /// How long a node must be missing before its pods go (upstream's fixed 40 s).
    pub quarantine: Duration,
}

/// Every pod as the passes read it ([`slim`]), by namespace and name.
type Pods = Arc<Mutex<HashMap<(String, String), Arc<Value>>>>;

/// What the passes read of a pod: its identity, creation and deletion
/// times, node, phase and reason.
fn slim(pod: &Value) -> Value {
    let (m, s) = (&pod["metadata"], &pod["status"]);
    json!({
        "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "creationTimestamp": m["creationTimestamp"],
            "deletionTimestamp": m["deletionTimestamp"]},
        "spec": {"nodeName": pod["spec"]["nodeName"]},
        "status": {"phase": s["phase"], "reason": s["reason"]},
    })
}

struct PodGc {
    client: Client,
    config: Config,
    /// Nodes pods name that were missing, since when.
    missing: HashMap<String, Instant>,
    pods: Pods,
}

impl PodGc {
    async fn pass(&mut self) -> Result<(), ApiError> {
        let objects = &self.client.objects;
        let (pods_info, nodes_info) = (
            objects.resources.builtin("", "v1", "pods"),
            objects.resources.builtin("", "v1", "nodes"),
        );
        // Reading pods needs the same permission as listing them.
        self.client.allowed("list", &pods_info, None)?;
        let pods: Vec<Arc<Value>> = lock(&self.pods).values().cloned().collect();
        let node_objects = self
            .client
            .list(&nodes_info, None, &ListParams::default())
            .await?
            .items;
        let nodes: HashSet<String> = node_objects
            .iter()
            .filter_map(|n| meta::name(n).map(String::from))
            .collect();
        // Terminating pods of out-of-service nodes.
        let out_of_service: HashSet<&str> = node_objects
            .iter()
            .filter(|n| lifecycle::out_of_service(n))
            .filter_map(meta::name)
            .collect();
        for pod in &pods {
            let on_out_of_service = pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| out_of_service.contains(n));
            if on_out_of_service && meta::str_field(pod, "deletionTimestamp").is_some() {
                self.delete(pod, None).await;
            }
        }
        // Terminated pods beyond the threshold.
        let terminated: Vec<&Value> = pods
            .iter()
            .map(|p| &**p)
            .filter(|p| lifecycle::terminated(p))
            .collect();
        let mut deleted = HashSet::new();
        for i in lifecycle::terminated_to_delete(&terminated, self.config.terminated_threshold) {
            let pod = terminated[i];
            if self.delete(pod, None).await {
                deleted.insert(meta::str_field(pod, "uid").unwrap_or_default().to_string());
            }
        }
        // Pods of nodes that are gone.
        let now = Instant::now();
        let named: HashSet<&str> = pods
            .iter()
            .filter_map(|p| p["spec"]["nodeName"].as_str())
            .filter(|n| !n.is_empty() && !nodes.contains(*n))
            .collect();
        self.missing.retain(|n, _| named.contains(n.as_str()));
        for n in &named {
            self.missing.entry(n.to_string()).or_insert(now);
        }
        let mut gone = HashSet::new();
        for (node, since) in &self.missing {
            if now.duration_since(*since) < self.config.quarantine {
                continue;
            }
            match self.client.get(&nodes_info, None, node).await {
                Err(ApiError::NotFound(_)) => {
                    gone.insert(node.clone());
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(node = %node, error = %e, "pod GC could not read node"),
            }
        }
        let condition = lifecycle::disruption_target(
            "DeletionByPodGC",
            "PodGC: node no longer exists",
            &chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        );
        for pod in &pods {
            let on_gone = pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| gone.contains(n));
            if on_gone && !deleted.contains(meta::str_field(pod, "uid").unwrap_or_default()) {
                self.delete(pod, Some(&condition)).await;
            }
        }
        Ok(())
    }

    /// Upstream's `markFailedAndDeletePodWithCondition`: a pod not yet
    /// terminated is first patched to `Failed` (with `condition`), then it
    /// is deleted. Whether it was.
    async fn delete(&self, pod: &Value, condition: Option<&Value>) -> bool {
        let info = self.client.objects.resources.builtin("", "v1", "pods");
        let ns = meta::namespace(pod).unwrap_or_default();
        let name = meta::name(pod).unwrap_or_default();
        tracing::info!(pod = %format!("{ns}/{name}"), "pod GC is force deleting pod");
        if !lifecycle::terminated(pod) {
            let mut status = json!({"phase": "Failed"});
            if let Some(c) = condition {
                status["conditions"] = json!([c]);
            }
            let patched = self
                .client
                .patch(
                    &info,
                    Some(ns),
                    name,
                    Some("status"),
                    wasm_apiserver_api::patch::PatchType::StrategicMerge,
                    &json!({"status": status}),
                )
                .await;
            match patched {
                Ok(_) => {}
                Err(ApiError::NotFound(_)) => return false,
                Err(e) => {
                    tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "pod GC could not mark pod failed");
                    return false;
                }
            }
        }
        // A forced delete, as upstream's: no kubelet is left to finish a
        // graceful one.
        let pre = Preconditions {
            uid: meta::str_field(pod, "uid").map(String::from),
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        match self.client.delete(&info, Some(ns), name, &pre).await {
            Ok(_) => true,
            Err(ApiError::NotFound(_)) => false,
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "pod GC could not delete pod");
                false
            }
        }
    }
}

/// Runs the collector while this replica leads: a watch keeps the pod
/// cache, and no pass runs before its first list is in.
pub fn spawn(client: Client, config: Config, leadership: Leadership) {
    tokio::spawn(leadership.run_while_leading(move || {
        let pods: Pods = Arc::default();
        let mut gc = PodGc {
            client: client.clone(),
            config,
            missing: HashMap::new(),
            pods: pods.clone(),
        };
        let objects = client.objects.clone();
        async move {
            let info = objects.resources.builtin("", "v1", "pods");
            let (synced_tx, mut synced) = tokio::sync::watch::channel(false);
            let (listed, changed) = (pods.clone(), pods);
            let follow = objects.follow(
                &info,
                move |all| {
                    let fresh = all
                        .iter()
                        .map(|p| (namespaced_key(p), Arc::new(slim(p))))
                        .collect();
                    *lock(&listed) = fresh;
                    synced_tx.send_replace(true);
                },
                move |pod, deleted| {
                    let key = namespaced_key(&pod);
                    let mut cache = lock(&changed);
                    match deleted {
                        true => cache.remove(&key),
                        false => cache.insert(key, Arc::new(slim(&pod))),
                    };
                    async {}
                },
            );
            let passes = async {
                let _ = synced.wait_for(|s| *s).await;
                let mut tick = tokio::time::interval(gc.config.period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    if let Err(e) = gc.pass().await {
                        tracing::warn!(error = %e, "pod garbage collection failed");
                    }
                }
            };
            tokio::join!(follow, passes);
        }
    }));
}
