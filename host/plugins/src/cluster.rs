//! What a plugin may read of the cluster: the server's own objects, read
//! in place (no copy per plugin, no cache to go stale), limited to the
//! kinds its object grants (`spec.contextAwareResources`, Kubewarden's
//! field), and counted against a per-evaluation budget of calls and bytes.
//!
//! The host implements [`Cluster`] over its registry (reads go through the
//! same store every request reads, so a write that returned before the
//! evaluation began is seen). This module checks grants and budgets and
//! answers Kubewarden's `kubewarden/kubernetes/*` host capabilities with
//! their request and response shapes.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The registry's reads, as plugins see them. Errors are the messages the
/// plugin receives.
#[async_trait::async_trait]
pub trait Cluster: Send + Sync {
    /// The kind a resource serves (`group`, `version`, `resource` →
    /// `kind`), to check grants of reads that name a resource.
    fn kind_of(&self, group: &str, version: &str, resource: &str) -> Option<String>;

    /// One object by `apiVersion`, `kind`, namespace and name; `Ok(None)`
    /// when there is none.
    async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, String>;

    /// The kind's objects in `namespace` (all namespaces for `None`) as a
    /// `<Kind>List`, selected by label and field selectors; fails rather
    /// than answer more than `max_bytes` of objects.
    async fn list(&self, query: &ListQuery<'_>, max_bytes: usize) -> Result<Listed, String>;

    /// A SubjectAccessReview `spec` through the server's authorizers; the
    /// review's `status`.
    async fn can_i(&self, spec: &Value) -> Result<Value, String>;
}

/// A list's answer: the `<Kind>List`, and the bytes of its items as JSON
/// (counted once, while reading, for the read budget).
#[derive(Debug)]
pub struct Listed {
    pub list: Value,
    pub bytes: usize,
}

/// A list request.
#[derive(Debug, Default)]
pub struct ListQuery<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: Option<&'a str>,
    pub label_selector: Option<&'a str>,
    pub field_selector: Option<&'a str>,
    /// At most this many items (a page, with `metadata.continue` when more
    /// follow); `None`: every item.
    pub limit: Option<usize>,
    pub continue_token: Option<&'a str>,
}

/// What a read names: a kind, or a resource.
#[derive(Debug, Clone)]
pub enum Target {
    Kind {
        api_version: String,
        kind: String,
    },
    Resource {
        group: String,
        version: String,
        resource: String,
    },
}

/// One `spec.contextAwareResources` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    pub api_version: String,
    pub kind: String,
}

/// The grant that lets a plugin ask for SubjectAccessReviews (`can_i`).
pub const ACCESS_REVIEW: (&str, &str) = ("authorization.k8s.io/v1", "SubjectAccessReview");

/// A plugin's access to the cluster: the reads, what it may read, and how
/// much per evaluation.
#[derive(Clone)]
pub struct ClusterAccess {
    pub reads: Arc<dyn Cluster>,
    pub grants: Vec<Grant>,
    /// Every kind is readable (`grants` is not consulted): a controller's
    /// reads, which the host checks against its identity's RBAC instead.
    pub all_kinds: bool,
    /// Most host reads in one evaluation.
    pub max_calls: u32,
    /// Most bytes of objects returned in one evaluation.
    pub max_bytes: usize,
}

impl std::fmt::Debug for ClusterAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterAccess")
            .field("grants", &self.grants)
            .finish()
    }
}

/// What one evaluation has used of its budget.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Spent {
    pub calls: u32,
    pub bytes: usize,
}

impl ClusterAccess {
    fn granted(&self, api_version: &str, kind: &str) -> Result<(), String> {
        if self.all_kinds
            || self
                .grants
                .iter()
                .any(|g| g.api_version == api_version && g.kind == kind)
        {
            return Ok(());
        }
        Err(format!(
            "reading {api_version} {kind} is not granted: it is not in the plugin's spec.contextAwareResources"
        ))
    }

    fn charge_call(&self, spent: &mut Spent) -> Result<(), String> {
        if spent.calls >= self.max_calls {
            return Err(format!(
                "the plugin made more than {} cluster reads in one evaluation",
                self.max_calls
            ));
        }
        spent.calls += 1;
        Ok(())
    }

    fn charge_bytes(&self, spent: &mut Spent, bytes: usize) -> Result<(), String> {
        if spent.bytes + bytes > self.max_bytes {
            return Err(format!(
                "cluster reads of more than {} bytes in one evaluation",
                self.max_bytes
            ));
        }
        spent.bytes += bytes;
        Ok(())
    }

    /// `target` as `(apiVersion, kind)`, once its read is granted.
    fn granted_target(&self, target: &Target) -> Result<(String, String), String> {
        let (api_version, kind) = match target {
            Target::Kind { api_version, kind } => (api_version.clone(), kind.clone()),
            Target::Resource {
                group,
                version,
                resource,
            } => {
                let api_version = if group.is_empty() {
                    version.clone()
                } else {
                    format!("{group}/{version}")
                };
                let kind = self
                    .reads
                    .kind_of(group, version, resource)
                    .ok_or_else(|| format!("no resource {resource:?} in {api_version:?}"))?;
                (api_version, kind)
            }
        };
        self.granted(&api_version, &kind)?;
        Ok((api_version, kind))
    }

    /// One object (the `cluster` import's `get`).
    pub(crate) async fn get(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        spent: &mut Spent,
    ) -> Result<Option<Value>, String> {
        self.charge_call(spent)?;
        let (api_version, kind) = self.granted_target(target)?;
        let found = self.reads.get(&api_version, &kind, namespace, name).await?;
        if let Some(obj) = &found {
            self.charge_bytes(spent, serde_json::to_vec(obj).map_or(0, |b| b.len()))?;
        }
        Ok(found)
    }

    /// A page of a list (the `cluster` import's `list`).
    pub(crate) async fn list(
        &self,
        target: &Target,
        query: ListQuery<'_>,
        spent: &mut Spent,
    ) -> Result<Value, String> {
        self.charge_call(spent)?;
        let (api_version, kind) = self.granted_target(target)?;
        let query = ListQuery {
            api_version: &api_version,
            kind: &kind,
            ..query
        };
        let left = self.max_bytes.saturating_sub(spent.bytes);
        let Listed { list, bytes } = self.reads.list(&query, left).await?;
        self.charge_bytes(spent, bytes)?;
        Ok(list)
    }

    /// A SubjectAccessReview (the `cluster` import's `can-i`).
    pub(crate) async fn can_i(&self, spec: &Value, spent: &mut Spent) -> Result<bool, String> {
        self.charge_call(spent)?;
        let (api_version, kind) = ACCESS_REVIEW;
        self.granted(api_version, kind)?;
        let status = self.reads.can_i(spec).await?;
        Ok(status["allowed"] == true)
    }

    /// Answers Kubewarden's `kubewarden/kubernetes/<operation>` host call.
    pub(crate) async fn kubewarden(
        &self,
        operation: &str,
        payload: &[u8],
        spent: &mut Spent,
    ) -> Result<Vec<u8>, String> {
        let bad = |e: serde_json::Error| format!("cannot decode the {operation} request: {e}");
        self.charge_call(spent)?;
        let answer = match operation {
            "get_resource" => {
                let r: GetResource = serde_json::from_slice(payload).map_err(bad)?;
                self.granted(&r.api_version, &r.kind)?;
                let found = self
                    .reads
                    .get(&r.api_version, &r.kind, r.namespace.as_deref(), &r.name)
                    .await?;
                let obj = found.ok_or_else(|| {
                    format!(
                        "{} {} {:?} not found",
                        r.api_version,
                        r.kind,
                        match &r.namespace {
                            Some(ns) => format!("{ns}/{}", r.name),
                            None => r.name.clone(),
                        }
                    )
                })?;
                mask(obj, r.field_masks.as_ref())
            }
            "list_resources_by_namespace" | "list_resources_all" => {
                let r: ListResources = serde_json::from_slice(payload).map_err(bad)?;
                self.granted(&r.api_version, &r.kind)?;
                let by_namespace = operation == "list_resources_by_namespace";
                if by_namespace && r.namespace.as_deref().is_none_or(str::is_empty) {
                    return Err("list_resources_by_namespace needs a namespace".into());
                }
                let query = ListQuery {
                    api_version: &r.api_version,
                    kind: &r.kind,
                    namespace: r.namespace.as_deref().filter(|_| by_namespace),
                    label_selector: r.label_selector.as_deref().filter(|s| !s.is_empty()),
                    field_selector: r.field_selector.as_deref().filter(|s| !s.is_empty()),
                    ..Default::default()
                };
                let left = self.max_bytes.saturating_sub(spent.bytes);
                let mut list = self.reads.list(&query, left).await?.list;
                if let Some(items) = list.get_mut("items").and_then(Value::as_array_mut) {
                    for item in items.iter_mut() {
                        *item = mask(std::mem::take(item), r.field_masks.as_ref());
                    }
                }
                list
            }
            "can_i" => {
                let (api_version, kind) = ACCESS_REVIEW;
                self.granted(api_version, kind)?;
                let r: CanI = serde_json::from_slice(payload).map_err(bad)?;
                let sar = &r.subject_access_review;
                let mut spec = json!({
                    "user": sar["user"],
                    "resourceAttributes": sar["resource_attributes"],
                });
                if let Some(groups) = sar.get("groups").filter(|g| !g.is_null()) {
                    spec["groups"] = groups.clone();
                }
                self.reads.can_i(&spec).await?
            }
            other => {
                return Err(format!(
                    "host capability kubewarden/kubernetes/{other} is not available in wasm-apiserver"
                ));
            }
        };
        let bytes = serde_json::to_vec(&answer).map_err(|e| e.to_string())?;
        self.charge_bytes(spent, bytes.len())?;
        Ok(bytes)
    }
}

#[derive(Deserialize)]
struct GetResource {
    api_version: String,
    kind: String,
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    field_masks: Option<BTreeSet<String>>,
}

#[derive(Deserialize)]
struct ListResources {
    api_version: String,
    kind: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    label_selector: Option<String>,
    #[serde(default)]
    field_selector: Option<String>,
    #[serde(default)]
    field_masks: Option<BTreeSet<String>>,
}

#[derive(Deserialize)]
struct CanI {
    subject_access_review: Value,
}

/// Keeps only the dotted paths of `masks` (and `apiVersion`, `kind`), as
/// Kubewarden's `field_masks`; no masks keeps everything.
fn mask(obj: Value, masks: Option<&BTreeSet<String>>) -> Value {
    let Some(masks) = masks.filter(|m| !m.is_empty()) else {
        return obj;
    };
    let mut out = Value::Object(Map::new());
    for k in ["apiVersion", "kind"] {
        if let Some(v) = obj.get(k) {
            out[k] = v.clone();
        }
    }
    for path in masks {
        let parts: Vec<&str> = path.split('.').collect();
        let mut src = &obj;
        let mut found = true;
        for p in &parts {
            match src.get(p) {
                Some(v) => src = v,
                None => {
                    found = false;
                    break;
                }
            }
        }
        if !found {
            continue;
        }
        let mut dst = &mut out;
        for p in &parts[..parts.len() - 1] {
            if !dst.get(p).is_some_and(Value::is_object) {
                dst[*p] = Value::Object(Map::new());
            }
            dst = dst.get_mut(p).expect("just set");
        }
        dst[parts[parts.len() - 1]] = src.clone();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_masks_keep_only_the_paths_asked_for() {
        let svc = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]}});
        let masks: BTreeSet<String> = ["metadata.name", "spec.selector", "status.nothing"]
            .map(String::from)
            .into();
        assert_eq!(
            mask(svc.clone(), Some(&masks)),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"},
                "spec": {"selector": {"app": "a"}}})
        );
        assert_eq!(mask(svc.clone(), None), svc);
    }
}
