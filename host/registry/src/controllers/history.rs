//! The ControllerRevision writes the DaemonSet and StatefulSet controllers
//! share (upstream's `pkg/controller/history`, its `realHistory`), through
//! the controller's client; what the revisions are is
//! `wasm_apiserver_api::history`'s.

use super::Client;
use crate::options::{ListParams, Preconditions};
use crate::resources::Resource;
use serde_json::{Value, json};
use wasm_apiserver_api::ApiError;
use wasm_apiserver_api::history::{self, LABEL_REVISION_HASH};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// A parent's ControllerRevisions, read and written as its controller.
pub(crate) struct History<'a> {
    pub(crate) client: &'a Client,
    pub(crate) info: &'a Resource,
}

impl History<'_> {
    /// The namespace's revisions `keep` accepts, oldest first.
    pub(crate) async fn list(&self, ns: &str, keep: impl Fn(&Value) -> bool) -> Result<Vec<Value>> {
        let mut revisions: Vec<Value> = self
            .client
            .list(self.info, Some(ns), &ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|r| keep(r))
            .collect();
        revisions.sort_by(history::by_number);
        Ok(revisions)
    }

    /// Creates `revision`; one of that name already there is taken as it
    /// is (the caller compares).
    pub(crate) async fn create(&self, ns: &str, revision: Value) -> Result<Value> {
        let name = revision["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match self.client.create(self.info, Some(ns), revision).await {
            Err(ApiError::AlreadyExists(..)) => self.client.get(self.info, Some(ns), &name).await,
            other => other,
        }
    }

    /// Upstream's `CreateControllerRevision`: creates the revision
    /// `make(collisions)` builds (named by a hash of its data and the
    /// collision count), counting a collision and trying the next name
    /// while a revision of that name holds other data. Returns the
    /// revision and the collision count.
    pub(crate) async fn create_unique(
        &self,
        ns: &str,
        make: impl Fn(i64) -> Value,
        mut collisions: i64,
    ) -> Result<(Value, i64)> {
        // Each collision is a revision of another template under the same
        // hash: a handful at most; bound the work anyway.
        for _ in 0..16 {
            let revision = make(collisions);
            let data = revision["data"].clone();
            let got = self.create(ns, revision).await?;
            if got["data"] == data {
                return Ok((got, collisions));
            }
            collisions += 1;
        }
        Err(ApiError::Conflict(
            wasm_apiserver_api::error::Target::new("apps", "controllerrevisions", ""),
            "too many ControllerRevision name collisions".into(),
        ))
    }

    /// Gives revision `name` the number `revision` (a template used
    /// before becomes the newest again).
    pub(crate) async fn renumber(&self, ns: &str, name: &str, revision: i64) -> Result<Value> {
        self.client
            .update(self.info, Some(ns), name, None, |cur| {
                let mut new = cur.clone();
                new["revision"] = json!(revision);
                Ok(new)
            })
            .await
    }

    /// Deletes the revisions of `sorted` beyond `limit` that are not `live`.
    pub(crate) async fn truncate(
        &self,
        ns: &str,
        sorted: &[Value],
        live: impl Fn(&Value) -> bool,
        limit: i64,
    ) -> Result<()> {
        for r in history::beyond_limit(sorted, live, limit) {
            let name = r["metadata"]["name"].as_str().unwrap_or_default();
            let pre = Preconditions {
                uid: r["metadata"]["uid"].as_str().map(String::from),
                ..Default::default()
            };
            match self.client.delete(self.info, Some(ns), name, &pre).await {
                Ok(_) | Err(ApiError::NotFound(_) | ApiError::Conflict(..)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The hash label of a revision (or pod).
pub(crate) fn hash_label(obj: &Value) -> &str {
    obj["metadata"]["labels"][LABEL_REVISION_HASH]
        .as_str()
        .unwrap_or_default()
}
