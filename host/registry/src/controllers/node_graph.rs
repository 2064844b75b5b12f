//! Feeds the Node authorizer's graph ([`NodeGraph`]) from the registry's
//! watches of Pods, PersistentVolumeClaims and PersistentVolumes
//! (upstream's `graph_populator.go`): each event updates only the object it
//! is about; a relist clears that kind and adds what was listed. It only
//! reads, so it needs no identity of its own.

use crate::store::Objects;
use serde_json::Value;
use std::sync::{Arc, RwLock};
use wasm_apiserver_api::node::graph::{NodeGraph, PodRefs, PvRefs};

fn ns_name(obj: &Value) -> (&str, &str) {
    let m = &obj["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
    )
}

/// Starts the three followers; they run for the life of the process.
pub fn spawn(objects: Objects, graph: Arc<RwLock<NodeGraph>>) {
    {
        let (objects, graph) = (objects.clone(), graph.clone());
        tokio::spawn(async move {
            let info = objects.resources.builtin("", "v1", "pods");
            let g2 = graph.clone();
            objects
                .follow(
                    &info,
                    move |_| write(&g2).clear_pods(),
                    |pod, deleted| {
                        let (ns, name) = ns_name(&pod);
                        let refs = if deleted { None } else { PodRefs::of(&pod) };
                        write(&graph).set_pod(ns, name, refs);
                        async {}
                    },
                )
                .await
        });
    }
    {
        let (objects, graph) = (objects.clone(), graph.clone());
        tokio::spawn(async move {
            let info = objects
                .resources
                .builtin("", "v1", "persistentvolumeclaims");
            let g2 = graph.clone();
            objects
                .follow(
                    &info,
                    move |_| write(&g2).clear_pvcs(),
                    |pvc, deleted| {
                        let (ns, name) = ns_name(&pvc);
                        let volume = if deleted {
                            None
                        } else {
                            pvc["spec"]["volumeName"].as_str()
                        };
                        write(&graph).set_pvc(ns, name, volume);
                        async {}
                    },
                )
                .await
        });
    }
    tokio::spawn(async move {
        let info = objects.resources.builtin("", "v1", "persistentvolumes");
        let g2 = graph.clone();
        objects
            .follow(
                &info,
                move |_| write(&g2).clear_pvs(),
                |pv, deleted| {
                    let (_, name) = ns_name(&pv);
                    let refs = (!deleted).then(|| PvRefs::of(&pv));
                    write(&graph).set_pv(name, refs);
                    async {}
                },
            )
            .await
    });
}

fn write(g: &RwLock<NodeGraph>) -> std::sync::RwLockWriteGuard<'_, NodeGraph> {
    g.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}
