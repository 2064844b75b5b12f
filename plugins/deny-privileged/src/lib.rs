//! `deny-privileged`: a validating admission plugin that denies privileged
//! containers (`securityContext.privileged: true`) in Pods and in every pod
//! template (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs,
//! CronJobs, PodTemplates...), naming each offending field in the denial's
//! causes (package 0.2.0), so kubectl prints them as for a 422.
//!
//! Configuration: none (an empty string or `{}`).

use serde_json::Value;
use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver_plugin_sdk::{FieldCause, allow, deny, object};

/// Where the pod spec of an object of `kind` is, as a path of keys.
fn pod_spec_path(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &["spec"],
        "PodTemplate" => &["template", "spec"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => &["spec", "template", "spec"],
    }
}

/// The privileged containers' `securityContext.privileged` fields.
fn privileged(obj: &Value, kind: &str) -> Vec<String> {
    let path = pod_spec_path(kind);
    let Some(spec) = path.iter().try_fold(obj, |v, k| v.get(*k)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            if c["securityContext"]["privileged"] == true {
                out.push(format!(
                    "{}.{list}[{i}].securityContext.privileged",
                    path.join(".")
                ));
            }
        }
    }
    out
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(config: String) -> Result<(), String> {
        match config.trim() {
            "" | "{}" | "null" => Ok(()),
            other => Err(format!(
                "deny-privileged takes no configuration, got {other}"
            )),
        }
    }

    fn validate(_config: String, request: AdmissionRequest) -> AdmissionResponse {
        let Ok(Some(obj)) = object(&request) else {
            return allow();
        };
        let fields = privileged(&obj, &request.kind.kind);
        if fields.is_empty() {
            return allow();
        }
        let mut response = deny(
            403,
            "Forbidden",
            format!(
                "privileged containers are not allowed ({})",
                fields.join(", ")
            ),
        );
        if let Some(status) = response.status.as_mut() {
            status.causes = fields
                .into_iter()
                .map(|field| FieldCause {
                    field,
                    reason: "FieldValueForbidden".to_owned(),
                    message: "Forbidden: privileged containers are not allowed".to_owned(),
                })
                .collect();
        }
        response
    }

    fn mutate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        allow()
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
