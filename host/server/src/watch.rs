//! `?watch=true`: a streamed sequence of JSON watch events, one per line.
//!
//! Semantics as upstream: without a resourceVersion (or with `0`) the watch
//! first sends the current objects as ADDED; otherwise it replays everything
//! after the given resourceVersion. Selectors turn a modification that moves
//! an object in or out of the selection into ADDED or DELETED. Progress from
//! storage becomes BOOKMARK events when asked for; a resourceVersion older than
//! the retained history is an ERROR event carrying a 410 `Expired` Status.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc;
use wasm_apiserver_api::table::{IncludeObject, to_table};
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_registry::codec::decode;
use wasm_apiserver_registry::error::storage_error;
use wasm_apiserver_registry::{ListParams, Objects, Resource};
use wasm_apiserver_storage::{EventKind, StorageError, WatchItem};

/// Options of a watch request beyond the selectors.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub resource_version: Option<u64>,
    pub allow_bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Duration,
    /// Render objects as one-row Tables (`kubectl get -w`).
    pub table: Option<IncludeObject>,
    /// Send each object as a `PartialObjectMetadata`.
    pub metadata_only: bool,
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut buf = wasm_apiserver_api::encode::watch_event(kind, &object);
    buf.push(b'\n');
    Bytes::from(buf)
}

/// Starts a watch and returns the streaming response.
pub async fn serve(
    objects: &Objects,
    info: &Resource,
    ns: Option<&str>,
    params: ListParams,
    opts: WatchOptions,
) -> Result<Response, ApiError> {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    // `render` takes objects already in the request's version.
    let render = {
        let info = info.info.clone();
        let table = opts.table;
        let metadata_only = opts.metadata_only;
        move |obj: Value| -> Value {
            match table {
                None if metadata_only => meta::partial_object_metadata(&obj),
                None => obj,
                Some(include) => {
                    let rv = meta::str_field(&obj, "resourceVersion")
                        .unwrap_or_default()
                        .to_string();
                    to_table(&info, &[obj], json!({"resourceVersion": rv}), include)
                }
            }
        }
    };
    let (kind, api_version) = (info.kind.clone(), info.api_version());
    let bookmark = move |rv: u64, initial_end: bool| {
        let mut m = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            m["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(
            "BOOKMARK",
            json!({"kind": kind, "apiVersion": api_version, "metadata": m}),
        )
    };

    // Initial state, then the revision to watch from.
    let mut initial = Vec::new();
    let start = match opts.resource_version {
        Some(rv) if rv > 0 && !opts.send_initial_events => rv,
        _ => {
            let listed = objects
                .list(
                    info,
                    ns,
                    &ListParams {
                        limit: None,
                        continue_token: None,
                        resource_version: None,
                        ..params.clone()
                    },
                )
                .await?;
            for obj in listed.items {
                initial.push(line("ADDED", render(obj)));
            }
            if opts.send_initial_events && opts.allow_bookmarks {
                initial.push(bookmark(listed.resource_version, true));
            }
            listed.resource_version
        }
    };
    let prefix = info.collection_key(ns);
    let watch = objects.storage.watch(&prefix, start).await;
    let resource = info.clone();
    tokio::spawn(async move {
        for l in initial {
            if tx.send(l).await.is_err() {
                return;
            }
        }
        let mut stream = match watch {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(line("ERROR", storage_error(e).status_json())).await;
                return;
            }
        };
        let deadline = tokio::time::sleep(opts.timeout);
        tokio::pin!(deadline);
        loop {
            let item = tokio::select! {
                _ = &mut deadline => return,
                _ = tx.closed() => return,
                item = stream.next() => item,
            };
            let out = match item {
                None => return,
                Some(Err(e @ StorageError::Expired { .. })) | Some(Err(e)) => {
                    let _ = tx.send(line("ERROR", storage_error(e).status_json())).await;
                    return;
                }
                Some(Ok(WatchItem::Progress(rev))) => {
                    if !opts.allow_bookmarks {
                        continue;
                    }
                    bookmark(rev, false)
                }
                Some(Ok(WatchItem::Event(ev))) => {
                    let Ok(obj) = decode(&ev.kv) else { continue };
                    let now = params.matches(&obj);
                    let before = match (&ev.prev, ev.kind) {
                        (Some(prev), EventKind::Modified) => {
                            decode(prev).map(|p| params.matches(&p)).unwrap_or(false)
                        }
                        _ => now,
                    };
                    let kind = match (ev.kind, before, now) {
                        (EventKind::Created, _, true) => "ADDED",
                        (EventKind::Modified, true, true) => "MODIFIED",
                        (EventKind::Modified, false, true) => "ADDED",
                        (EventKind::Modified, true, false) => "DELETED",
                        (EventKind::Deleted, _, true) => "DELETED",
                        _ => continue,
                    };
                    let mut objs = [obj];
                    if let Err(e) = resource.strategy.present(&resource, &mut objs).await {
                        let _ = tx.send(line("ERROR", e.status_json())).await;
                        return;
                    }
                    let [obj] = objs;
                    line(kind, render(obj))
                }
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    }));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}
