//! labels-policy in Rust: the same policy as ../python and ../js (see ../README.md).
use wasm_apiserver_plugin_sdk::{Pattern, Policy, Request, Response, Violations};

#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    labels: Vec<String>,
    deny_name_pattern: Option<Pattern>,
    default_annotations: std::collections::BTreeMap<String, String>,
}

pub struct LabelsPolicy;

impl Policy for LabelsPolicy {
    type Config = Config;

    fn validate(config: &Config, req: &Request) -> Response {
        let (mut v, name) = (Violations::new(), req.name());
        if let Some(p) = config.deny_name_pattern.as_ref().filter(|p| p.is_match(name)) {
            v.forbidden("metadata.name", format!("name matches the forbidden pattern {p:?}"));
        }
        let missing = req.missing_labels(&config.labels).join(", ");
        if !missing.is_empty() {
            v.required("metadata.labels", format!("missing required label(s): {missing}"));
        }
        v.into_response(format!("{} {name:?} denied", req.kind())).when(!req.is_delete())
    }

    fn mutate(config: &Config, req: &Request) -> Response {
        let patch = req.patch().default_annotations(&config.default_annotations);
        Response::patched(patch).when(req.is_create())
    }
}

wasm_apiserver_plugin_sdk::export_policy!(LabelsPolicy);

#[cfg(test)]
mod tests {
    /// The shared case table, run natively (no wasm) by the SDK's harness.
    #[test]
    fn cases() {
        let table = concat!(env!("CARGO_MANIFEST_DIR"), "/../cases.yaml");
        wasm_apiserver_plugin_sdk::testing::run_cases::<super::LabelsPolicy>(table).unwrap();
    }
}
