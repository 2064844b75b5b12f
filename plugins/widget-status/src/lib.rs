//! `widget-status`: a controller of `Widget`s (`example.com/v1`, a custom
//! resource with a `status` subresource); controllers exist since package 0.3.0.
//!
//! For each Widget it applies a ConfigMap `<widget>-widget` that it owns
//! (`ownerReferences` with `controller: true`, so the garbage collector
//! removes it with the Widget, and a changed or deleted ConfigMap queues
//! the Widget again), holding the Widget's `spec` and the namespace's
//! widget defaults (the ConfigMap `widget-defaults`, which its
//! `Controller` watches), then sets the Widget's `Ready` condition and
//! `status.configMap` through the `status` subresource, only when they
//! change (a condition's `lastTransitionTime` moves only with its status).

use wasm_apiserver_controller_sdk::{
    Action, Controller, Request, Value, apply, export_controller, get, json, owner_reference,
    update,
};

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {}

pub struct WidgetStatus;

fn now() -> String {
    // The component has no clock worth trusting for more than seconds;
    // WASI's wall clock is coarse here, which is all a condition needs.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

impl Controller for WidgetStatus {
    type Config = Config;

    fn reconcile(_config: &Config, req: &Request) -> Result<Action, String> {
        let Some(widget) = req.get()? else {
            // Gone: the garbage collector removes what it owned.
            return Ok(Action::Done);
        };
        if widget["metadata"].get("deletionTimestamp").is_some() {
            return Ok(Action::Done);
        }
        let ns = req.namespace.as_deref().unwrap_or_default();
        let defaults = get("v1", "ConfigMap", Some(ns), "widget-defaults")?
            .map(|c| c["data"].clone())
            .unwrap_or(json!({}));
        let cm_name = format!("{}-widget", req.name);
        let mut data = serde_json::Map::new();
        if let Some(d) = defaults.as_object() {
            data.extend(d.clone());
        }
        data.insert("spec".into(), Value::String(widget["spec"].to_string()));
        apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": cm_name, "namespace": ns,
                "ownerReferences": [owner_reference(&widget)]},
            "data": data,
        }))?;
        // The status, when it changes.
        let generation = widget["metadata"]["generation"].clone();
        let ready = widget["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
        let current = ready
            .is_some_and(|c| c["status"] == "True" && c["observedGeneration"] == generation)
            && widget["status"]["configMap"] == cm_name.as_str();
        if current {
            return Ok(Action::Done);
        }
        let transition = match ready {
            Some(c) if c["status"] == "True" => c["lastTransitionTime"].clone(),
            _ => Value::String(now()),
        };
        let mut updated = widget.clone();
        updated["status"] = json!({
            "configMap": cm_name,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "ConfigMapApplied",
                "message": format!("ConfigMap {cm_name} holds the widget"),
                "observedGeneration": generation,
                "lastTransitionTime": transition,
            }],
        });
        // An update with the read resourceVersion: a stale read is a 409,
        // retried with backoff, never a lost write.
        update(&updated, Some("status"))?;
        Ok(Action::Done)
    }
}

export_controller!(WidgetStatus);
