//! `/livez`, `/readyz` and `/healthz` with upstream's named checks
//! (k8s.io/apiserver `server/healthz`): each path runs its checks in order
//! and answers `ok`, or with `?verbose` (or on any failure) one
//! `[+]name ok` / `[-]name failed: reason withheld` line per check and
//! `<path> check passed|failed`; `?exclude=name` skips a check;
//! `/<path>/<check>` runs one check and says why it failed.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasm_apiserver_storage::Storage;

/// How long the storage check waits for an answer.
const STORAGE_TIMEOUT: Duration = Duration::from_secs(2);

/// The process-wide facts the checks read.
#[derive(Default)]
pub struct Health {
    /// Set when SIGTERM or SIGINT arrives: `/readyz` fails from then on,
    /// so load balancers stop sending requests before the server exits.
    shutting_down: AtomicBool,
}

impl Health {
    pub fn shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }
}

/// Which health path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Livez,
    Readyz,
    Healthz,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
            Endpoint::Healthz => "healthz",
        }
    }

    /// The checks of this path, in the order upstream runs them.
    fn checks(self) -> &'static [&'static str] {
        match self {
            Endpoint::Livez | Endpoint::Healthz => &["ping", "etcd"],
            Endpoint::Readyz => &["ping", "etcd", "etcd-readiness", "shutdown"],
        }
    }
}

/// Runs one check: `Err` says why it failed.
async fn check(health: &Health, storage: &dyn Storage, name: &str) -> Result<(), String> {
    match name {
        "ping" => Ok(()),
        "etcd" | "etcd-readiness" => {
            match tokio::time::timeout(STORAGE_TIMEOUT, storage.current_revision()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("storage: {e}")),
                Err(_) => Err(format!(
                    "storage did not answer in {}s",
                    STORAGE_TIMEOUT.as_secs()
                )),
            }
        }
        "shutdown" => {
            if health.shutting_down.load(Ordering::Relaxed) {
                Err("process is shutting down".into())
            } else {
                Ok(())
            }
        }
        _ => Err(format!("no check {name:?}")),
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// `GET /livez`, `/readyz`, `/healthz`.
pub async fn root(
    health: &Health,
    storage: &dyn Storage,
    endpoint: Endpoint,
    query: Option<&str>,
) -> Response {
    let mut verbose = false;
    let mut excluded: Vec<String> = Vec::new();
    let pairs = wasm_apiserver_api::request::query_pairs(query.unwrap_or("")).unwrap_or_default();
    for (k, v) in pairs {
        match k.as_str() {
            "verbose" => verbose = true,
            "exclude" => excluded.push(v),
            _ => {}
        }
    }
    let mut lines = String::new();
    let mut failed = false;
    for name in endpoint.checks() {
        if let Some(i) = excluded.iter().position(|e| e == name) {
            excluded.swap_remove(i);
            lines.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        match check(health, storage, name).await {
            Ok(()) => lines.push_str(&format!("[+]{name} ok\n")),
            Err(reason) => {
                failed = true;
                tracing::info!(check = %name, path = endpoint.name(), %reason, "health check failed");
                lines.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    if !excluded.is_empty() {
        excluded.sort();
        excluded.dedup();
        let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        lines.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            names.join(",")
        ));
    }
    let path = endpoint.name();
    if failed {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{lines}{path} check failed\n"),
        );
    }
    if !verbose {
        return text(StatusCode::OK, "ok".into());
    }
    text(StatusCode::OK, format!("{lines}{path} check passed\n"))
}

/// `GET /<path>/<check>`: one check, with its reason when it fails.
pub async fn single(
    health: &Health,
    storage: &dyn Storage,
    endpoint: Endpoint,
    name: &str,
) -> Response {
    if !endpoint.checks().contains(&name) {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    }
    match check(health, storage, name).await {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(reason) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        ),
    }
}
