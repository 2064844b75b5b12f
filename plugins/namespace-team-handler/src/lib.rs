//! `namespace-team-handler`: a context-aware resource handler (since package
//! 0.3.0). `default` sets a namespaced custom resource's `spec.team` from
//! its Namespace's `team` label, read through the `cluster` import (its
//! `ResourceHandler` grants `{apiVersion: v1, kind: Namespace}`); a failed
//! read fails the write with the host's error. `convert` only sets the
//! desired `apiVersion`; `validate` accepts everything.

use serde_json::Value;

wit_bindgen::generate!({
    path: "../../wit",
    world: "resource-handler-plugin",
});

use exports::wasm_apiserver::plugin::resource_handler::{ConversionRequest, Guest, ObjectRequest};
use wasm_apiserver::plugin::cluster::{self, KindRef, Target};
use wasm_apiserver::plugin::types::FieldCause;

struct Handler;

impl Guest for Handler {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn convert(_config: String, request: ConversionRequest) -> Result<Vec<String>, String> {
        request
            .objects
            .iter()
            .map(|text| {
                let mut obj: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
                obj["apiVersion"] = Value::String(request.desired_api_version.clone());
                Ok(obj.to_string())
            })
            .collect()
    }

    fn default(_config: String, request: ObjectRequest) -> Result<Option<String>, String> {
        let mut obj: Value = serde_json::from_str(&request.object).map_err(|e| e.to_string())?;
        let Some(ns) = obj["metadata"]["namespace"].as_str().map(String::from) else {
            return Ok(None);
        };
        let target = Target::Kind(KindRef {
            api_version: "v1".to_owned(),
            kind: "Namespace".to_owned(),
        });
        let namespace = cluster::get(&target, None, &ns)
            .map_err(|e| format!("cannot read namespace {ns}: {e}"))?;
        let team = namespace
            .and_then(|o| serde_json::from_str::<Value>(&o.json).ok())
            .and_then(|n| n["metadata"]["labels"]["team"].as_str().map(String::from));
        match team {
            Some(team) if obj["spec"]["team"].as_str() != Some(team.as_str()) => {
                obj["spec"]["team"] = Value::String(team);
                Ok(Some(obj.to_string()))
            }
            _ => Ok(None),
        }
    }

    fn validate(_config: String, _request: ObjectRequest) -> Vec<FieldCause> {
        Vec::new()
    }
}

export!(Handler);
