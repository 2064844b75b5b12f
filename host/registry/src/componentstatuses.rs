//! `componentstatuses` (core/v1 `ComponentStatus`, deprecated since 1.19
//! and still served by kube-apiserver 1.33): the health of the scheduler,
//! the controller manager and each etcd server, computed on every read
//! (upstream probes their `/healthz` and etcd's `/health`; here the
//! scheduler and the controllers run in this process, and the store
//! answers for its servers). Nothing is stored; `get` and `list` only.

use crate::strategy::Reader;
use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_storage::Storage;

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// What runs in this process, as the flags said.
pub struct ComponentStatuses {
    pub storage: Arc<dyn Storage>,
    /// `false` with `--disable-scheduler`.
    pub scheduler: bool,
    /// `false` when `--controllers` enables none.
    pub controllers: bool,
}

/// One `ComponentStatus`: healthy with `message`, or not with `error`.
fn status(name: &str, health: std::result::Result<String, String>) -> Value {
    let condition = match health {
        Ok(message) => json!({"type": "Healthy", "status": "True", "message": message}),
        Err(error) => json!({"type": "Healthy", "status": "False", "error": error}),
    };
    json!({
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": {"name": name},
        "conditions": [condition],
    })
}

/// The statuses, given what runs and each etcd server's health, in name
/// order (as a list from the store would be).
fn statuses(
    scheduler: bool,
    controllers: bool,
    etcd: Vec<std::result::Result<String, String>>,
) -> Vec<Value> {
    let mut out = vec![
        status(
            "controller-manager",
            if controllers {
                Ok("ok".into())
            } else {
                Err("no controller runs in this server (--controllers)".into())
            },
        ),
        status(
            "scheduler",
            if scheduler {
                Ok("ok".into())
            } else {
                Err("the scheduler does not run in this server (--disable-scheduler)".into())
            },
        ),
    ];
    for (i, health) in etcd.into_iter().enumerate() {
        out.push(status(&format!("etcd-{i}"), health));
    }
    out.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    out
}

#[async_trait]
impl Reader for ComponentStatuses {
    async fn list(&self) -> Result<Vec<Value>> {
        let etcd = self.storage.server_health().await;
        Ok(statuses(
            self.scheduler,
            self.controllers,
            etcd.into_iter()
                .map(|h| h.map_err(|e| e.to_string()))
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_component_says_whether_it_runs_and_each_etcd_server_its_health() {
        let list = statuses(
            false,
            true,
            vec![
                Ok("{\"health\":\"true\"}".into()),
                Err("etcd did not answer within 5s".into()),
            ],
        );
        let names: Vec<&str> = list
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["controller-manager", "etcd-0", "etcd-1", "scheduler"]
        );
        let condition = |i: usize| &list[i]["conditions"][0];
        assert_eq!(condition(0)["status"], "True");
        assert_eq!(condition(1)["message"], "{\"health\":\"true\"}");
        assert_eq!(condition(2)["status"], "False");
        assert_eq!(condition(2)["error"], "etcd did not answer within 5s");
        assert_eq!(condition(3)["status"], "False");
        assert!(
            condition(3)["error"]
                .as_str()
                .unwrap()
                .contains("--disable-scheduler")
        );
        let list = statuses(true, false, vec![]);
        assert_eq!(list[0]["conditions"][0]["status"], "False");
        assert_eq!(list[1]["conditions"][0]["message"], "ok");
    }
}
