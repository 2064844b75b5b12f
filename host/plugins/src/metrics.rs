//! Per-plugin call metrics, rendered in the Prometheus text exposition
//! format (version 0.0.4) so the server can append them to its `/metrics`.
//!
//! Series are keyed by `plugin`, `kind` (admission, ...) and `op` (validate,
//! mutate, ...). Counters are lock-free atomics; the registry lock is taken
//! only when a plugin is loaded and when the text is rendered. Reloading a
//! plugin under the same name keeps its series.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram's buckets.
const BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Error kinds counted separately (the `error` label); see [`crate::PluginError::kind`].
const ERROR_KINDS: [&str; 6] = [
    "timeout",
    "memory",
    "trap",
    "output_too_large",
    "invalid_output",
    "busy",
];

/// The series of one (plugin, kind, op).
#[derive(Default)]
pub(crate) struct OpMetrics {
    calls: AtomicU64,
    denials: AtomicU64,
    errors: [AtomicU64; ERROR_KINDS.len()],
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl OpMetrics {
    pub(crate) fn call(&self) {
        self.calls.fetch_add(1, Relaxed);
    }

    pub(crate) fn denial(&self) {
        self.denials.fetch_add(1, Relaxed);
    }

    pub(crate) fn error(&self, kind: &str) {
        // Kinds outside the list (load-time errors) are not call errors.
        if let Some(i) = ERROR_KINDS.iter().position(|k| *k == kind) {
            self.errors[i].fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        for (bucket, bound) in self.buckets.iter().zip(BUCKETS) {
            if secs <= bound {
                bucket.fetch_add(1, Relaxed);
            }
        }
        self.count.fetch_add(1, Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }
}

type Key = (String, &'static str, &'static str);

/// All series of one [`Runtime`](crate::Runtime).
#[derive(Default)]
pub(crate) struct Registry {
    ops: Mutex<BTreeMap<Key, Arc<OpMetrics>>>,
}

impl Registry {
    /// The series of `plugin`'s `op`, created on first use.
    pub(crate) fn op(&self, plugin: &str, kind: &'static str, op: &'static str) -> Arc<OpMetrics> {
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        ops.entry((plugin.to_owned(), kind, op))
            .or_default()
            .clone()
    }

    /// Renders every series, plus the compilation cache counters.
    pub(crate) fn render(&self, cache_hits: usize, cache_misses: usize) -> String {
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        let labels = |(plugin, kind, op): &Key| {
            format!("plugin=\"{}\",kind=\"{kind}\",op=\"{op}\"", escape(plugin))
        };
        let mut counter = |name: &str, help: &str, get: &dyn Fn(&OpMetrics) -> u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (key, m) in ops.iter() {
                let _ = writeln!(out, "{name}{{{}}} {}", labels(key), get(m));
            }
        };
        counter(
            "wasm_apiserver_plugin_calls_total",
            "Plugin calls started.",
            &|m| m.calls.load(Relaxed),
        );
        counter(
            "wasm_apiserver_plugin_denials_total",
            "Plugin calls that answered with a denial.",
            &|m| m.denials.load(Relaxed),
        );
        counter(
            "wasm_apiserver_plugin_timeouts_total",
            "Plugin calls stopped at their wall-time limit.",
            &|m| m.errors[0].load(Relaxed),
        );

        let name = "wasm_apiserver_plugin_errors_total";
        let _ = writeln!(
            out,
            "# HELP {name} Plugin calls that failed, by error kind.\n# TYPE {name} counter"
        );
        for (key, m) in ops.iter() {
            for (kind, n) in ERROR_KINDS.iter().zip(&m.errors) {
                let _ = writeln!(
                    out,
                    "{name}{{{},error=\"{kind}\"}} {}",
                    labels(key),
                    n.load(Relaxed)
                );
            }
        }

        let name = "wasm_apiserver_plugin_call_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Wall time of plugin calls, queueing included.\n# TYPE {name} histogram"
        );
        for (key, m) in ops.iter() {
            let l = labels(key);
            for (bound, n) in BUCKETS.iter().zip(&m.buckets) {
                let _ = writeln!(
                    out,
                    "{name}_bucket{{{l},le=\"{bound}\"}} {}",
                    n.load(Relaxed)
                );
            }
            let count = m.count.load(Relaxed);
            let sum = Duration::from_nanos(m.sum_nanos.load(Relaxed)).as_secs_f64();
            let _ = writeln!(out, "{name}_bucket{{{l},le=\"+Inf\"}} {count}");
            let _ = writeln!(out, "{name}_sum{{{l}}} {sum}");
            let _ = writeln!(out, "{name}_count{{{l}}} {count}");
        }

        for (name, help, value) in [
            (
                "wasm_apiserver_plugin_cache_hits_total",
                "Plugins loaded from the on-disk cache of compiled code.",
                cache_hits,
            ),
            (
                "wasm_apiserver_plugin_cache_misses_total",
                "Plugins compiled because the on-disk cache had no entry.",
                cache_misses,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        out
    }
}

/// Escapes a label value (backslash, double quote, newline).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histogram() {
        let registry = Registry::default();
        let op = registry.op("a\"b", "admission", "validate");
        op.call();
        op.denial();
        op.error("timeout");
        op.observe(Duration::from_millis(3));
        let text = registry.render(1, 2);
        assert!(text.contains(
            "wasm_apiserver_plugin_calls_total{plugin=\"a\\\"b\",kind=\"admission\",op=\"validate\"} 1"
        ));
        assert!(text.contains("wasm_apiserver_plugin_timeouts_total{plugin=\"a\\\"b\",kind=\"admission\",op=\"validate\"} 1"));
        assert!(text.contains(",error=\"timeout\"} 1"));
        assert!(text.contains("le=\"0.0025\"} 0"));
        assert!(text.contains("le=\"0.005\"} 1"));
        assert!(text.contains("le=\"+Inf\"} 1"));
        assert!(text.contains("wasm_apiserver_plugin_cache_hits_total 1"));
        assert!(text.contains("wasm_apiserver_plugin_cache_misses_total 2"));
    }
}
