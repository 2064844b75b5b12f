//! Upstream's admission latency families (k8s.io/apiserver
//! `admission/metrics`): each phase of a write (`step`: the mutating
//! `admit` and the `validate` phase), each compiled-in plugin and wasm
//! admission plugin (`controller`, under its name), each webhook
//! (`webhook`, under its name), by operation and whether it rejected the
//! request. The server registers [`AdmissionMetrics::collectors`] with its
//! own families.

use prometheus::core::Collector;
use prometheus::{HistogramOpts, HistogramVec};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

tokio::task_local! {
    /// Nanoseconds the request served by this task has spent in admission
    /// webhooks, which the server's SLI latency leaves out (upstream's
    /// webhook latency trackers); the server's request filter sets it.
    pub static WEBHOOK_NANOS: Arc<AtomicU64>;
}

/// The phase: upstream's `type` label.
#[derive(Clone, Copy)]
pub enum Phase {
    /// Mutating (`admit`).
    Admit,
    /// Validating (`validate`; a validating webhook's is `validating`).
    Validate,
}

impl Phase {
    /// The `type` label: `admit` or `validate` (a validating webhook's is
    /// `validating`, as upstream labels it).
    fn label(self, webhook: bool) -> &'static str {
        match (self, webhook) {
            (Phase::Admit, _) => "admit",
            (Phase::Validate, false) => "validate",
            (Phase::Validate, true) => "validating",
        }
    }
}

/// The three histograms.
pub struct AdmissionMetrics {
    step: HistogramVec,
    controller: HistogramVec,
    webhook: HistogramVec,
}

impl Default for AdmissionMetrics {
    fn default() -> Self {
        let buckets = vec![0.005, 0.025, 0.1, 0.5, 1.0, 2.5];
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            HistogramVec::new(
                HistogramOpts::new(name, format!("[STABLE] {help}")).buckets(buckets),
                labels,
            )
            .expect("metric")
        };
        AdmissionMetrics {
            step: histogram(
                "apiserver_admission_step_admission_duration_seconds",
                "Admission sub-step latency histogram in seconds, broken out for each operation and API resource and step type (validate or admit).",
                &["type", "operation", "rejected"],
                buckets.clone(),
            ),
            controller: histogram(
                "apiserver_admission_controller_admission_duration_seconds",
                "Admission controller latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
                &["name", "type", "operation", "rejected"],
                buckets.clone(),
            ),
            webhook: histogram(
                "apiserver_admission_webhook_admission_duration_seconds",
                "Admission webhook latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
                &["name", "type", "operation", "rejected"],
                [buckets, vec![10.0, 25.0]].concat(),
            ),
        }
    }
}

fn bool_str(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

impl AdmissionMetrics {
    /// The families, for the server's registry.
    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.step.clone()),
            Box::new(self.controller.clone()),
            Box::new(self.webhook.clone()),
        ]
    }

    /// One phase of one write, started at `started`.
    pub fn step(&self, phase: Phase, operation: &str, started: Instant, rejected: bool) {
        let kind = phase.label(false);
        self.step
            .with_label_values(&[kind, operation, bool_str(rejected)])
            .observe(started.elapsed().as_secs_f64());
    }

    /// One admission plugin's call (compiled-in or wasm).
    pub fn controller(
        &self,
        name: &str,
        phase: Phase,
        operation: &str,
        started: Instant,
        rejected: bool,
    ) {
        let kind = phase.label(false);
        self.controller
            .with_label_values(&[name, kind, operation, bool_str(rejected)])
            .observe(started.elapsed().as_secs_f64());
    }

    /// One webhook's call (also added to the request's [`WEBHOOK_NANOS`]).
    pub fn webhook(
        &self,
        name: &str,
        phase: Phase,
        operation: &str,
        started: Instant,
        rejected: bool,
    ) {
        let kind = phase.label(true);
        let elapsed = started.elapsed();
        let _ = WEBHOOK_NANOS.try_with(|n| {
            n.fetch_add(
                u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            )
        });
        self.webhook
            .with_label_values(&[name, kind, operation, bool_str(rejected)])
            .observe(elapsed.as_secs_f64());
    }
}
