//! `require-labels`: a validating admission plugin.
//!
//! Configuration (JSON):
//!
//! ```json
//! {"labels": ["team"], "denyNamePattern": "^forbidden-"}
//! ```
//!
//! * `labels`: label keys every created or updated object must carry.
//! * `denyNamePattern` (optional): a regular expression; an object whose
//!   name matches it is denied.
//!
//! Deletes and requests without an object are allowed. `mutate` allows
//! everything unchanged.

use regex_lite::Regex;
use serde::Deserialize;
use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver_plugin_sdk::{allow, deny, log, object};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    deny_name_pattern: Option<String>,
}

struct Parsed {
    labels: Vec<String>,
    deny_name: Option<(String, Regex)>,
}

fn parse(config: &str) -> Result<Parsed, String> {
    let config: Config = if config.trim().is_empty() {
        Config {
            labels: Vec::new(),
            deny_name_pattern: None,
        }
    } else {
        serde_json::from_str(config).map_err(|e| format!("invalid configuration: {e}"))?
    };
    let deny_name = config
        .deny_name_pattern
        .map(|p| {
            Regex::new(&p)
                .map(|re| (p.clone(), re))
                .map_err(|e| format!("invalid denyNamePattern {p:?}: {e}"))
        })
        .transpose()?;
    Ok(Parsed {
        labels: config.labels,
        deny_name,
    })
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(config: String) -> Result<(), String> {
        parse(&config).map(|_| ())
    }

    fn validate(config: String, request: AdmissionRequest) -> AdmissionResponse {
        let config = match parse(&config) {
            Ok(c) => c,
            Err(e) => return deny(500, "InternalError", e),
        };
        let obj = match object(&request) {
            Ok(Some(obj)) => obj,
            Ok(None) => return allow(),
            Err(e) => return deny(400, "BadRequest", e),
        };
        let metadata = obj.get("metadata");
        let name = metadata
            .and_then(|m| m.get("name"))
            .and_then(|n| n.as_str())
            .or(request.name.as_deref())
            .unwrap_or("");

        let mut problems = Vec::new();
        if let Some((pattern, re)) = &config.deny_name
            && !name.is_empty()
            && re.is_match(name)
        {
            problems.push(format!(
                "name {name:?} matches the forbidden pattern {pattern:?}"
            ));
        }
        let labels = metadata.and_then(|m| m.get("labels"));
        let missing: Vec<&str> = config
            .labels
            .iter()
            .filter(|key| labels.and_then(|l| l.get(key.as_str())).is_none())
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            problems.push(format!("missing required label(s): {}", missing.join(", ")));
        }

        if problems.is_empty() {
            return allow();
        }
        let kind = &request.kind.kind;
        let message = format!(
            "{kind} {name:?} denied by require-labels: {}",
            problems.join("; ")
        );
        log::info("denied", &[("name", name), ("kind", kind)]);
        let mut response = deny(403, "Forbidden", message);
        response
            .audit_annotations
            .push(("reason".to_owned(), problems.join("; ")));
        response
    }

    fn mutate(_config: String, _request: AdmissionRequest) -> AdmissionResponse {
        allow()
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
