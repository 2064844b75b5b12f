//! Upstream's `rest_client_*` families (client-go `rest/request.go`, as
//! component-base registers them) for the calls the server's controllers
//! make through their `Client` (`controllers`): kube-controller-manager
//! exposes them for its calls to kube-apiserver, and kubernetes-mixin's
//! `KubeClientErrors` alert reads them. The controllers call the registry
//! in-process, so `host` is `loopback` (kube-apiserver's name for its own
//! client) and the code is the status the call would have had over HTTP.

use prometheus::core::Collector;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};
use std::time::Duration;

/// The two families.
pub struct ClientMetrics {
    requests: IntCounterVec,
    duration: HistogramVec,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        ClientMetrics {
            requests: IntCounterVec::new(
                Opts::new(
                    "rest_client_requests_total",
                    "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
                ),
                &["code", "method", "host"],
            )
            .expect("metric"),
            duration: HistogramVec::new(
                HistogramOpts::new(
                    "rest_client_request_duration_seconds",
                    "[ALPHA] Request latency in seconds. Broken down by verb, and host.",
                )
                .buckets(vec![
                    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
                ]),
                &["verb", "host"],
            )
            .expect("metric"),
        }
    }
}

/// The HTTP method of a Kubernetes verb.
fn method(verb: &str) -> &'static str {
    match verb {
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        _ => "GET",
    }
}

impl ClientMetrics {
    /// The families, for the server's registry.
    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.requests.clone()),
            Box::new(self.duration.clone()),
        ]
    }

    /// One call: its verb, the status it ended with, how long it took.
    pub fn call(&self, verb: &str, code: u16, elapsed: Duration) {
        let method = method(verb);
        self.requests
            .with_label_values(&[&code.to_string(), method, "loopback"])
            .inc();
        self.duration
            .with_label_values(&[method, "loopback"])
            .observe(elapsed.as_secs_f64());
    }
}
