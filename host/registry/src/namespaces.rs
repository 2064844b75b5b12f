//! Namespace lifecycle: the initial namespaces, and the controller that
//! empties a terminating namespace and then removes it (upstream's namespace
//! controller plus the `kubernetes` finalizer).

use crate::codec::decode;
use crate::error::storage_error;
use crate::options::{Deleted, ListParams, Preconditions, WriteOptions};
use crate::store::Objects;
use serde_json::{Value, json};
use std::time::Duration;
use wasm_apiserver_api::{ApiError, meta};

/// Namespaces that exist on every cluster.
pub const INITIAL: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates the initial namespaces if missing.
pub async fn ensure_initial(objects: &Objects) -> Result<(), ApiError> {
    let info = objects.resources.builtin("", "v1", "namespaces");
    for name in INITIAL {
        let obj = json!({"metadata": {"name": name}});
        match objects
            .create(
                &info,
                None,
                obj,
                &WriteOptions::system("namespace-controller"),
            )
            .await
        {
            Ok(_) | Err(ApiError::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs the controller until the process ends: on every namespace deletion
/// and every few seconds, finalizes the terminating namespaces.
pub fn spawn_controller(objects: Objects) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(e) = finalize_all(&objects).await {
                tracing::warn!(error = %e, "namespace controller pass failed");
            }
            tokio::select! {
                _ = objects.namespace_deleted.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
    })
}

async fn finalize_all(objects: &Objects) -> Result<(), ApiError> {
    let info = objects.resources.builtin("", "v1", "namespaces");
    let all = objects.list(&info, None, &ListParams::default()).await?;
    for ns in all
        .items
        .iter()
        .filter(|n| meta::str_field(n, "deletionTimestamp").is_some())
    {
        let name = meta::name(ns).unwrap_or_default();
        finalize(objects, name).await?;
    }
    Ok(())
}

/// Deletes the namespace's contents; once empty, drops the `kubernetes`
/// finalizer, which deletes the namespace.
async fn finalize(objects: &Objects, ns: &str) -> Result<(), ApiError> {
    let opts = WriteOptions::system("namespace-controller");
    let mut remaining = 0;
    let snapshot = objects.resources.snapshot();
    for info in snapshot
        .all()
        .filter(|r| r.namespaced && !r.stores_nothing())
    {
        let listed = objects.list(info, Some(ns), &ListParams::default()).await?;
        for obj in &listed.items {
            let name = meta::name(obj).unwrap_or_default();
            match objects
                .delete(info, Some(ns), name, &Preconditions::default(), &opts)
                .await
            {
                Ok(Deleted::Pending(_)) => remaining += 1,
                Ok(_) | Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    if remaining > 0 {
        tracing::debug!(namespace = ns, remaining, "namespace waits for finalizers");
        return Ok(());
    }
    let info = objects.resources.builtin("", "v1", "namespaces");
    let result = objects
        .guaranteed_update(&info, None, ns, Some("finalize"), &opts, |cur| {
            let mut new = cur.clone();
            let kept: Vec<Value> = cur["spec"]["finalizers"]
                .as_array()
                .map(|a| a.iter().filter(|f| *f != "kubernetes").cloned().collect())
                .unwrap_or_default();
            new["spec"]["finalizers"] = json!(kept);
            Ok(new)
        })
        .await;
    match result {
        Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Keeps `Objects::namespace_cache` in line with storage (every replica sees
/// every namespace change through the watch).
pub fn spawn_cache(objects: Objects) -> tokio::task::JoinHandle<()> {
    use futures::StreamExt;
    tokio::spawn(async move {
        let info = objects.resources.builtin("", "v1", "namespaces");
        loop {
            let result: Result<(), ApiError> = async {
                let listed = objects.list(&info, None, &ListParams::default()).await?;
                for ns in &listed.items {
                    let terminating = meta::str_field(ns, "deletionTimestamp").is_some();
                    objects
                        .namespace_cache
                        .set(meta::name(ns).unwrap_or_default(), Some(terminating));
                }
                let mut stream = objects
                    .storage
                    .watch(&info.collection_key(None), listed.resource_version)
                    .await
                    .map_err(storage_error)?;
                while let Some(item) = stream.next().await {
                    let wasm_apiserver_storage::WatchItem::Event(ev) =
                        item.map_err(storage_error)?
                    else {
                        continue;
                    };
                    let obj = decode(&ev.kv)?;
                    let name = meta::name(&obj).unwrap_or_default();
                    let state = match ev.kind {
                        wasm_apiserver_storage::EventKind::Deleted => None,
                        _ => Some(meta::str_field(&obj, "deletionTimestamp").is_some()),
                    };
                    objects.namespace_cache.set(name, state);
                }
                Ok(())
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "namespace cache watch ended; relisting");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}
