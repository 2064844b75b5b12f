//! `hostile-scheduler`: a test fixture scheduler plugin (world
//! `scheduler-plugin`) claiming `filter` and `score`, which misbehave in
//! both as `{"mode": ...}` says:
//!
//! - `trap`: panics (the component traps);
//! - `loop`: spins forever (the host's deadline must interrupt it);
//! - `memory`: allocates 16 MiB chunks and touches them, without bound,
//!   until the sandbox's memory limit stops it;
//! - `out-of-range`: every node fits, and every score is 1000 (above
//!   upstream's `MaxNodeScore` of 100, which fails the cycle).
//!
//! Without a mode (empty configuration) it traps; any other mode is a
//! `check-config` error.

use wasm_apiserver_plugin_sdk::scheduler::{Node, Pod, Point, Refusal, SchedulerPlugin};

/// How to misbehave.
#[derive(serde::Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Panic.
    #[default]
    Trap,
    /// Spin forever.
    Loop,
    /// Allocate without bound.
    Memory,
    /// Fit every node, score 1000.
    OutOfRange,
}

/// The configuration: `{"mode": "trap" | "loop" | "memory" | "out-of-range"}`.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    mode: Mode,
}

/// Misbehaves as `mode` says; returns only in `out-of-range`.
fn misbehave(mode: Mode, point: &str) {
    match mode {
        Mode::Trap => panic!("hostile-scheduler traps in {point} on purpose"),
        Mode::Loop => {
            let mut i = 0u64;
            loop {
                i = std::hint::black_box(i.wrapping_add(1));
            }
        }
        Mode::Memory => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                // Non-zero bytes: every page is written, not just reserved.
                hoard.push(vec![0xA5u8; 16 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        Mode::OutOfRange => {}
    }
}

/// The plugin.
pub struct HostileScheduler;

impl SchedulerPlugin for HostileScheduler {
    type Config = Config;
    const POINTS: &'static [Point] = &[Point::Filter, Point::Score];

    fn filter(config: &Config, _: &str, _: &Pod, _: &Node) -> Result<(), Refusal> {
        misbehave(config.mode, "filter");
        Ok(())
    }

    fn score(config: &Config, _: &str, _: &Pod, _: &Node) -> Result<i64, Refusal> {
        misbehave(config.mode, "score");
        Ok(1000)
    }
}

wasm_apiserver_plugin_sdk::export_scheduler_plugin!(HostileScheduler);

#[cfg(test)]
mod tests {
    use wasm_apiserver_plugin_sdk::scheduler::configure;

    use super::*;
    use wasm_apiserver_plugin_sdk::scheduler::Object;

    fn node(name: &str) -> Node {
        Node::from_object(
            Object::parse(&format!(r#"{{"metadata": {{"name": "{name}"}}}}"#)).unwrap(),
        )
    }

    #[test]
    fn modes_parse_and_others_are_refused() {
        for mode in ["trap", "loop", "memory", "out-of-range"] {
            assert!(
                configure::<HostileScheduler>(&format!(r#"{{"mode": "{mode}"}}"#)).is_ok(),
                "{mode}"
            );
        }
        assert!(configure::<HostileScheduler>(r#"{"mode": "nice"}"#).is_err());
    }

    #[test]
    fn out_of_range_fits_every_node_and_scores_1000() {
        let nodes = [node("a")];
        let config = r#"{"mode": "out-of-range"}"#;
        let pod = r#"{"metadata": {"name": "p"}}"#;
        let filter = wasm_apiserver_plugin_sdk::scheduler::run_filter::<HostileScheduler>(
            config, "", pod, &nodes,
        );
        assert_eq!(filter, vec![None]);
        let score = wasm_apiserver_plugin_sdk::scheduler::run_score::<HostileScheduler>(
            config, "", pod, &nodes,
        );
        assert_eq!(score, Ok(vec![1000]));
    }

    #[test]
    #[should_panic(expected = "traps in filter")]
    fn trap_panics() {
        let nodes = [node("a")];
        wasm_apiserver_plugin_sdk::scheduler::run_filter::<HostileScheduler>(
            r#"{"mode": "trap"}"#,
            "",
            "{}",
            &nodes,
        );
    }
}
