//! node-label-score in Rust: the same scheduler plugin as ../python and ../js (see ../README.md).
use wasm_apiserver_plugin_sdk::scheduler::{
    Node, Pod, Point, Refusal, SchedulerPlugin, clamp_score, parse_int,
};

#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    label: String,
    avoid_label: String,
}

pub struct NodeLabelScore;

impl SchedulerPlugin for NodeLabelScore {
    type Config = Config;
    const POINTS: &'static [Point] = &[Point::Filter, Point::Score];

    fn check(config: &Config) -> Result<(), String> {
        let ok = !config.label.is_empty();
        ok.then_some(()).ok_or("invalid configuration: label must be a non-empty string".into())
    }

    fn filter(config: &Config, _: &str, _: &Pod, node: &Node) -> Result<(), Refusal> {
        let avoid = &config.avoid_label;
        let fits = avoid.is_empty() || node.label(avoid) != Some("true");
        fits.then_some(()).ok_or_else(|| {
            Refusal::unschedulable_and_unresolvable(format!("node has label {avoid}=true"))
        })
    }

    fn score(config: &Config, _: &str, _: &Pod, node: &Node) -> Result<i64, Refusal> {
        Ok(clamp_score(node.label(&config.label).and_then(parse_int).unwrap_or(0)))
    }
}

wasm_apiserver_plugin_sdk::export_scheduler_plugin!(NodeLabelScore);

#[cfg(test)]
mod tests {
    use wasm_apiserver_plugin_sdk::scheduler::configure;

    use super::NodeLabelScore;

    /// The shared case table, run natively (no wasm) by the SDK's harness.
    #[test]
    fn cases() {
        let table = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../tests/fixtures/plugin-cases/node-label-score.yaml"
        );
        wasm_apiserver_plugin_sdk::testing::run_scheduler_cases::<NodeLabelScore>(table).unwrap();
    }

    #[test]
    fn check_config_wants_an_object_with_a_string_label() {
        assert!(configure::<NodeLabelScore>(r#"{"label": "score"}"#).is_ok());
        assert!(
            configure::<NodeLabelScore>(r#"{"label": "score", "avoidLabel": "avoid"}"#).is_ok()
        );
        for bad in ["", "{}", "[]", "5", r#"{"label": 5}"#, r#"{"label": "s", "avoidLabel": true}"#]
        {
            assert!(configure::<NodeLabelScore>(bad).is_err(), "{bad}");
        }
    }
}
