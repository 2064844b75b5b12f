//! The cluster as plugins read it ([`wasm_apiserver_plugins::Cluster`]):
//! gets and lists straight from the generic store (the same reads a
//! request makes, in the kind's requested version, so a write that returned
//! before the evaluation began is seen and no plugin holds a copy of
//! anything), paged so a huge list stops at the caller's byte budget, and
//! SubjectAccessReviews through the server's authorizer. Grants and budgets
//! are the plugin runtime's; this only reads.

use crate::options::ListParams;
use crate::resources::Resource;
use crate::store::Objects;
use serde_json::{Value, json};
use std::sync::Arc;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_api::cel::authz::Authorize;
use wasm_apiserver_api::rbac::Attributes;
use wasm_apiserver_api::selector::{FieldSelector, LabelSelector};
use wasm_apiserver_plugins::{Cluster, ListQuery, Listed};

/// Items read per page of a plugin's list.
const PAGE: usize = 500;

pub struct ClusterReads {
    objects: Objects,
    authorize: Option<Arc<dyn Authorize>>,
    /// Reads made as a controller's identity: checked by RBAC and audited
    /// per call (admission plugins' reads are checked by their grants).
    client: Option<crate::controllers::Client>,
}

impl ClusterReads {
    pub fn new(objects: Objects, authorize: Option<Arc<dyn Authorize>>) -> Self {
        ClusterReads {
            objects,
            authorize,
            client: None,
        }
    }

    /// The reads of a controller, made through its client.
    pub fn as_client(client: crate::controllers::Client) -> Self {
        ClusterReads {
            objects: client.objects.clone(),
            authorize: None,
            client: Some(client),
        }
    }

    async fn get_one(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        match &self.client {
            Some(c) => c.get(res, ns, name).await,
            None => self.objects.get(res, ns, name).await,
        }
    }

    async fn list_page(
        &self,
        res: &Resource,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<crate::options::ListOutcome, ApiError> {
        match &self.client {
            Some(c) => c.list(res, ns, params).await,
            None => self.objects.list(res, ns, params).await,
        }
    }

    /// The resource serving `kind` in `api_version`.
    fn resource(&self, api_version: &str, kind: &str) -> Result<Arc<Resource>, String> {
        resource_for_kind(&self.objects, api_version, kind)
    }
}

/// The resource serving `kind` in `api_version` (no create-only ones: a
/// review kind is not readable).
pub fn resource_for_kind(
    objects: &Objects,
    api_version: &str,
    kind: &str,
) -> Result<Arc<Resource>, String> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    objects
        .resources
        .snapshot()
        .all()
        .find(|r| r.group == group && r.version == version && r.kind == kind && !r.stores_nothing())
        .cloned()
        .ok_or_else(|| format!("no resource serves kind {kind:?} in {api_version:?}"))
}

fn message(e: ApiError) -> String {
    e.to_string()
}

#[async_trait::async_trait]
impl Cluster for ClusterReads {
    fn kind_of(&self, group: &str, version: &str, resource: &str) -> Option<String> {
        self.objects
            .resources
            .get(group, version, resource)
            .filter(|r| !r.stores_nothing())
            .map(|r| r.kind.clone())
    }

    async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, String> {
        let res = self.resource(api_version, kind)?;
        let ns = namespace.filter(|_| res.namespaced);
        if res.namespaced && ns.is_none() {
            return Err(format!("{kind} is namespaced: a namespace is required"));
        }
        match self.get_one(&res, ns, name).await {
            Ok(obj) => Ok(Some(obj)),
            Err(ApiError::NotFound(_)) => Ok(None),
            Err(e) => Err(message(e)),
        }
    }

    async fn list(&self, q: &ListQuery<'_>, max_bytes: usize) -> Result<Listed, String> {
        let res = self.resource(q.api_version, q.kind)?;
        // One page of the caller's size, or every page of ours.
        let one_page = q.limit.is_some();
        let mut params = ListParams {
            labels: LabelSelector::parse(q.label_selector.unwrap_or_default())?,
            // Any field: a selector on one that is not the name or
            // namespace is answered from a field index.
            fields: FieldSelector::parse_any(q.field_selector.unwrap_or_default())?,
            indexed: true,
            limit: Some(q.limit.unwrap_or(PAGE).max(1)),
            continue_token: q.continue_token.map(String::from),
            ..Default::default()
        };
        let mut next = None;
        let ns = q.namespace.filter(|_| res.namespaced);
        let mut items = Vec::new();
        let mut bytes = 0;
        let mut revision = 0;
        loop {
            let page = self.list_page(&res, ns, &params).await.map_err(message)?;
            if revision == 0 {
                revision = page.resource_version;
            }
            for item in page.items {
                bytes += serde_json::to_vec(&item).map(|b| b.len()).unwrap_or(0);
                if bytes > max_bytes {
                    return Err(format!(
                        "listing {} {} returns more than the {max_bytes} bytes left of the plugin's read budget",
                        q.api_version, q.kind
                    ));
                }
                items.push(item);
            }
            match page.continue_token {
                Some(token) if one_page => {
                    next = Some(token);
                    break;
                }
                Some(token) => {
                    params.continue_token = Some(token);
                    params.resource_version = None;
                }
                None => break,
            }
        }
        let list = json!({
            "apiVersion": q.api_version,
            "kind": format!("{}List", q.kind),
            "metadata": {"resourceVersion": revision.to_string(), "continue": next},
            "items": items,
        });
        Ok(Listed { list, bytes })
    }

    async fn can_i(&self, spec: &Value) -> Result<Value, String> {
        let attrs = Attributes::from_subject_access_review(spec);
        if let Some(client) = &self.client {
            let allowed = client.access_review(&attrs).map_err(message)?;
            return Ok(json!({"allowed": allowed}));
        }
        let Some(authz) = &self.authorize else {
            return Err("no authorizer answers SubjectAccessReviews".into());
        };
        Ok(authz.authorize(&attrs).review_status())
    }
}
