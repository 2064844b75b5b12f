//! The resource-handler controller: follows `ResourceHandler` objects,
//! loads their modules into [`Handlers`](crate::handlers::Handlers) and records the outcome in each
//! object's status.

use crate::handlers::Bound;
use crate::resources::Resource;
use crate::store::Objects;
use serde_json::{Value, json};
use std::sync::Arc;
use wasm_apiserver_api::handler::{GROUP, HandlerSpec, PLURAL, VERSION};
use wasm_apiserver_api::meta;

fn handler_info(objects: &Objects) -> Arc<Resource> {
    objects.resources.builtin(GROUP, VERSION, PLURAL)
}

/// Loads the handler of one `ResourceHandler` object.
async fn load(objects: &Objects, name: &str, obj: &Value) -> Result<Bound, String> {
    let admission = objects
        .admission
        .as_ref()
        .ok_or("the server runs without a plugin runtime")?;
    let spec = HandlerSpec::parse(&obj["spec"])?;
    if let Some((resource, other)) = objects.handlers.claimed_by_other(name, &spec) {
        return Err(format!("{resource} is already handled by {other:?}"));
    }
    let bytes = admission.module_bytes(&spec.module).await?;
    let plugin = admission
        .runtime()
        .load_resource_handler_with_cluster(
            name,
            &bytes,
            &spec.config_string(),
            crate::admission::limits(&spec.limits),
            admission.cluster_access_for(&spec.context_aware_resources, &spec.limits),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(Bound {
        name: name.to_owned(),
        generation: obj["metadata"]["generation"].as_i64().unwrap_or(0),
        uid: meta::str_field(obj, "uid").unwrap_or_default().to_owned(),
        spec,
        plugin,
    })
}

/// Brings the active set in line with one `ResourceHandler` object (or its
/// deletion) and records the outcome in its status. Idempotent.
pub async fn reconcile(objects: &Objects, obj: &Value, deleted: bool) {
    let handlers = &objects.handlers;
    let name = meta::name(obj).unwrap_or_default().to_string();
    if deleted || meta::str_field(obj, "deletionTimestamp").is_some() {
        handlers.remove(&name, meta::str_field(obj, "uid").unwrap_or_default());
        return;
    }
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    if handlers.superseded(
        &name,
        meta::str_field(obj, "uid").unwrap_or_default(),
        generation,
    ) {
        // A stale event: the newer generation's own reconcile recorded it.
        return;
    }
    let outcome = match handlers.loaded(&name) {
        Some((g, digest)) if g == generation => Ok(digest),
        _ => match load(objects, &name, obj).await {
            Ok(bound) => {
                let digest = bound.plugin.digest().to_owned();
                handlers.install(Arc::new(bound));
                tracing::info!(handler = %name, generation, %digest, "resource handler active");
                Ok(digest)
            }
            Err(e) => {
                tracing::warn!(handler = %name, generation, error = %e, "resource handler failed to load");
                Err(e)
            }
        },
    };
    let mut status = json!({"observedGeneration": generation});
    match outcome {
        Ok(digest) => {
            status["phase"] = json!("Active");
            status["digest"] = json!(format!("sha256:{digest}"));
        }
        Err(message) => {
            status["phase"] = json!("Failed");
            status["message"] = json!(message);
            if let Some((g, d)) = handlers.loaded(&name) {
                status["activeGeneration"] = json!(g);
                status["digest"] = json!(format!("sha256:{d}"));
            }
        }
    }
    objects
        .record_status(
            &handler_info(objects),
            obj,
            status,
            "resource-handler-controller",
        )
        .await;
}

/// Loads every stored handler (at start, before serving, so that no custom
/// resource is ever converted without its handler).
pub async fn install_existing(objects: &Objects) -> Result<(), wasm_apiserver_api::ApiError> {
    let info = handler_info(objects);
    let listed = objects.list(&info, None, &Default::default()).await?;
    for obj in &listed.items {
        reconcile(objects, obj, false).await;
    }
    Ok(())
}

/// Follows `ResourceHandler` objects through a storage watch, so every
/// replica converts, defaults and validates with the same handlers.
pub fn spawn_controller(objects: Objects) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let info = handler_info(&objects);
        objects
            .follow(
                &info,
                |listed| {
                    let names: Vec<&str> = listed.iter().filter_map(meta::name).collect();
                    for stale in objects.handlers.names() {
                        if !names.contains(&stale.as_str()) {
                            // Gone before this list: no older event follows it.
                            objects.handlers.remove(&stale, "");
                        }
                    }
                },
                |obj, deleted| {
                    let objects = objects.clone();
                    async move { reconcile(&objects, &obj, deleted).await }
                },
            )
            .await
    })
}
