//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`), as upstream's
//! apiextensions server serves them: a CRD's write checks its names and
//! structural schemas and sets its `NamesAccepted`/`Established`
//! conditions; an accepted CRD is registered in the live registry (one
//! [`Resource`] per served version, all over one storage prefix), so its
//! objects are routed, discovered and in OpenAPI at once; deleting a CRD
//! marks it `Terminating`, deletes its objects, then drops the
//! `customresourcecleanup` finalizer and unregisters it. Every replica
//! follows CRDs through a storage watch ([`spawn_controller`]).

use crate::codec::decode;
use crate::error::storage_error;
use crate::handlers::{Bound, Handlers};
use crate::options::{ListParams, Preconditions, WriteOptions};
use crate::resources::Resource;
use crate::store::Objects;
use crate::strategy::Strategy;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasm_apiserver_api::handler::Operation;
use wasm_apiserver_api::resource::{ColumnPath, Render, compare_versions};
use wasm_apiserver_api::schema::{Schema, structural_errors};
use wasm_apiserver_api::validation::validate_object;
use wasm_apiserver_api::{ApiError, Cause, Column, ResourceInfo, meta};
use wasm_apiserver_plugins::{ObjectRequest, UserInfo};
use wasm_apiserver_storage::{EventKind, WatchItem};

/// The CRD group.
pub const GROUP: &str = "apiextensions.k8s.io";
/// The CRD resource.
pub const PLURAL: &str = "customresourcedefinitions";
/// Holds a deleted CRD until its objects are gone.
pub const FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// A served resource's group, version and plural.
type Gvr = (String, String, String);

/// Which resources each CRD serves (by CRD name), and the revision of the
/// CRD they were last brought in line with.
#[derive(Default)]
pub struct Served(Mutex<BTreeMap<String, Entry>>);

/// One CRD as [`apply`] last saw it.
struct Entry {
    /// The CRD's `resourceVersion` then (its deletion's for a deleted CRD:
    /// the entry stays, without resources, so that an older change applied
    /// late cannot register it again).
    revision: u64,
    resources: BTreeSet<Gvr>,
}

impl Entry {
    /// Whether a change at `revision` is one this entry already reflects
    /// or has gone past (0: unknown, never stale).
    fn supersedes(&self, revision: u64) -> bool {
        revision != 0 && revision <= self.revision
    }
}

impl Served {
    fn owner_of(
        &self,
        group: &str,
        plural_or_kind: &str,
        snapshot: &crate::Snapshot,
    ) -> Option<String> {
        let served = self.0.lock().expect("served CRDs");
        snapshot
            .all()
            .filter(|r| {
                r.group == group && (r.plural == plural_or_kind || r.kind == plural_or_kind)
            })
            .map(|r| {
                let key = (r.group.clone(), r.version.clone(), r.plural.clone());
                served
                    .iter()
                    .find(|(_, entry)| entry.resources.contains(&key))
                    .map(|(name, _)| name.clone())
                    .unwrap_or_default()
            })
            .next()
    }
}

fn invalid(obj: &Value, causes: Vec<Cause>) -> ApiError {
    ApiError::Invalid(
        wasm_apiserver_api::error::Target::new(GROUP, PLURAL, meta::name(obj).unwrap_or_default()),
        causes,
    )
}

/// The checks upstream's CRD validation makes that users meet first.
fn validate_definition(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default();
    let kind = names["kind"].as_str().unwrap_or_default();
    if group.is_empty() {
        out.push(Cause::missing("spec.group"));
    } else if !group.contains('.') {
        out.push(Cause::invalid(
            "spec.group",
            group,
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        out.push(Cause::missing("spec.names.plural"));
    } else if wasm_apiserver_api::validation::dns1123_label_error(plural).is_some() {
        out.push(Cause::invalid(
            "spec.names.plural",
            plural,
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'",
        ));
    }
    if kind.is_empty() {
        out.push(Cause::missing("spec.names.kind"));
    }
    let name = meta::name(obj).unwrap_or_default();
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        out.push(Cause::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        Some(other) => out.push(Cause {
            reason: "FieldValueNotSupported".into(),
            field: "spec.scope".into(),
            message: format!(
                "Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
            ),
        }),
        None => out.push(Cause::missing("spec.scope")),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        out.push(Cause::missing("spec.versions"));
    }
    let storage = versions.iter().filter(|v| v["storage"] == true).count();
    if !versions.is_empty() && storage != 1 {
        out.push(Cause {
            reason: "FieldValueInvalid".into(),
            field: "spec.versions".into(),
            message: format!(
                "Invalid value: {}: must have exactly one version marked as storage version",
                json!(
                    versions
                        .iter()
                        .filter_map(|v| v["name"].as_str())
                        .collect::<Vec<_>>()
                )
            ),
        });
    }
    for (i, v) in versions.iter().enumerate() {
        if v["name"].as_str().unwrap_or_default().is_empty() {
            out.push(Cause::missing(&format!("spec.versions[{i}].name")));
        }
        let schema = &v["schema"]["openAPIV3Schema"];
        let base = format!("spec.versions[{i}].schema.openAPIV3Schema");
        if schema.is_null() {
            out.push(Cause {
                reason: "FieldValueRequired".into(),
                field: base,
                message: "Required value: schemas are required".into(),
            });
        } else {
            out.extend(structural_errors(schema, &base));
            out.extend(wasm_apiserver_api::cel::compile_errors(schema, &base));
        }
        for (j, c) in v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let path = c["jsonPath"].as_str().unwrap_or_default();
            if let Err(e) = ColumnPath::parse(path) {
                out.push(Cause::invalid(
                    &format!("spec.versions[{i}].additionalPrinterColumns[{j}].jsonPath"),
                    path,
                    &e,
                ));
            }
        }
    }
    out
}

/// The name of a CRD's storage version.
fn storage_version(crd: &Value) -> &str {
    crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
}

/// The `ResourceInfo` of one served version of an accepted CRD.
fn version_info(crd: &Value, version: &Value) -> ResourceInfo {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kind = names["kind"].as_str().unwrap_or_default();
    let mut info = ResourceInfo::new(
        spec["group"].as_str().unwrap_or_default(),
        version["name"].as_str().unwrap_or_default(),
        names["plural"].as_str().unwrap_or_default(),
        kind,
        spec["scope"] == "Namespaced",
    );
    info.singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(String::from)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    info.short_names = strs(&names["shortNames"]);
    info.schema = version["schema"]["openAPIV3Schema"]
        .is_object()
        .then(|| Schema::intern(&version["schema"]["openAPIV3Schema"]));
    info.categories = strs(&names["categories"]);
    if version["deprecated"] == true {
        info.deprecation_warning = Some(
            version["deprecationWarning"]
                .as_str()
                .map_or_else(|| default_deprecation_warning(crd, version), String::from),
        );
    }
    if version["subresources"]["status"].is_object() {
        info = info.subresources(&["status"]);
    }
    if version["subresources"]["scale"].is_object() {
        info = info.subresource(wasm_apiserver_api::resource::Subresource {
            name: "scale".into(),
            group: "autoscaling".into(),
            version: "v1".into(),
            kind: "Scale".into(),
            verbs: ["get", "patch", "update"].map(String::from).to_vec(),
        });
    }
    let mut columns = vec![Column::name()];
    let printer = version["additionalPrinterColumns"].as_array();
    for c in printer.into_iter().flatten() {
        let Ok(path) = ColumnPath::parse(c["jsonPath"].as_str().unwrap_or_default()) else {
            continue;
        };
        let ty = c["type"].as_str().unwrap_or("string");
        let mut column = Column::with_path(
            c["name"].as_str().unwrap_or_default(),
            ty,
            c["description"].as_str().unwrap_or_default(),
            path,
        )
        .format(c["format"].as_str().unwrap_or_default());
        column.priority = c["priority"].as_i64().unwrap_or(0) as i32;
        if ty == "date" {
            // As upstream: a date column shows the time since.
            column = column.render(Render::Age);
        }
        columns.push(column);
    }
    if printer.is_none_or(|p| p.is_empty()) {
        columns.push(Column::age());
    }
    info.columns = columns;
    info
}

/// Upstream's warning for a deprecated version without its own:
/// `<group>/<version> <Kind> is deprecated`, and the preferred served
/// version that is not (and is newer), if any.
fn default_deprecation_warning(crd: &Value, version: &Value) -> String {
    let (group, kind) = (
        crd["spec"]["group"].as_str().unwrap_or_default(),
        crd["spec"]["names"]["kind"].as_str().unwrap_or_default(),
    );
    let name = version["name"].as_str().unwrap_or_default();
    let mut message = format!("{group}/{name} {kind} is deprecated");
    let newer = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"] == true && v["deprecated"] != true)
        .filter_map(|v| v["name"].as_str())
        .filter(|v| compare_versions(v, name) == std::cmp::Ordering::Less)
        .min_by(|a, b| compare_versions(a, b));
    if let Some(newer) = newer {
        message.push_str(&format!("; use {group}/{newer} {kind}"));
    }
    message
}

/// The objects of one custom resource version: schema pruning, defaulting
/// and validation, storage in the storage version, and the `scale`
/// subresource.
struct CustomResources {
    schema: Schema,
    /// `<group>/<storage version>`: what is stored.
    storage_api_version: String,
    scale: Option<ScalePaths>,
    /// With a `status` subresource a create's status is dropped (then
    /// defaulted), as upstream.
    status_subresource: bool,
    /// Where this resource's `ResourceHandler` is looked up on every call.
    handlers: Arc<Handlers>,
}

/// A CRD version's `subresources.scale`.
struct ScalePaths {
    spec_replicas: String,
    status_replicas: String,
    label_selector: Option<String>,
}

/// The value at a simple JSONPath (`.spec.replicas`), as CRD scale paths are.
fn at<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|k| !k.is_empty())
        .try_fold(obj, |v, k| v.get(k))
}

fn set_at(obj: &mut Value, path: &str, value: Value) {
    let keys: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|k| !k.is_empty())
        .collect();
    let mut cur = obj;
    for (i, k) in keys.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i + 1 == keys.len() {
            cur[*k] = value;
            return;
        }
        cur = &mut cur[*k];
    }
}

impl CustomResources {
    fn handler(&self, info: &ResourceInfo, op: Operation) -> Option<Arc<Bound>> {
        self.handlers.get(&info.group, &info.plural, op)
    }

    /// Brings `objs` to `api_version`: through the resource's handler when
    /// one converts it (only the objects in another version, in one call),
    /// else by changing `apiVersion` (`conversion: None`).
    async fn convert(
        &self,
        info: &ResourceInfo,
        objs: &mut [Value],
        api_version: &str,
    ) -> Result<(), ApiError> {
        let stale: Vec<usize> = (0..objs.len())
            .filter(|&i| objs[i].is_object() && objs[i]["apiVersion"] != api_version)
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        let Some(handler) = self.handler(info, Operation::Convert) else {
            for i in stale {
                objs[i]["apiVersion"] = json!(api_version);
            }
            return Ok(());
        };
        let input: Vec<&Value> = stale.iter().map(|&i| &objs[i]).collect();
        let uid = uuid::Uuid::new_v4().to_string();
        let converted = handler
            .plugin
            .convert(&uid, api_version, &input)
            .await
            .map_err(|e| {
                ApiError::Internal(format!(
                    "conversion by resource handler {:?} to {api_version}, Kind={} failed: {e}",
                    handler.name, info.kind
                ))
            })?;
        for (i, obj) in stale.into_iter().zip(converted) {
            objs[i] = obj;
        }
        Ok(())
    }

    fn object_request(
        info: &ResourceInfo,
        obj: &Value,
        old: Option<&Value>,
        user: &UserInfo,
    ) -> ObjectRequest {
        ObjectRequest {
            uid: uuid::Uuid::new_v4().to_string(),
            kind: wasm_apiserver_plugins::Gvk {
                group: info.group.clone(),
                version: info.version.clone(),
                kind: info.kind.clone(),
            },
            operation: if old.is_some() {
                wasm_apiserver_plugins::Operation::Update
            } else {
                wasm_apiserver_plugins::Operation::Create
            },
            user: user.clone(),
            object: obj.clone(),
            old_object: old.cloned(),
        }
    }
}

#[async_trait]
impl Strategy for CustomResources {
    fn prepare_for_create(&self, obj: &mut Value, _user: &UserInfo) {
        if self.status_subresource
            && let Some(map) = obj.as_object_mut()
        {
            map.remove("status");
        }
    }

    async fn present(&self, info: &ResourceInfo, objs: &mut [Value]) -> Result<(), ApiError> {
        self.convert(info, objs, &info.api_version()).await
    }

    async fn to_storage(
        &self,
        info: &ResourceInfo,
        obj: &Value,
    ) -> Result<Option<Value>, ApiError> {
        if obj["apiVersion"] == self.storage_api_version.as_str() {
            return Ok(None);
        }
        let mut converted = [obj.clone()];
        self.convert(info, &mut converted, &self.storage_api_version)
            .await?;
        let [converted] = converted;
        Ok(Some(converted))
    }

    async fn plugin_default(
        &self,
        info: &ResourceInfo,
        obj: &mut Value,
        old: Option<&Value>,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        let Some(handler) = self.handler(info, Operation::Default) else {
            return Ok(());
        };
        let request = Self::object_request(info, obj, old, user);
        match handler.plugin.default(&request).await {
            Ok(Some(defaulted)) => {
                *obj = defaulted;
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(ApiError::Internal(format!(
                "defaulting by resource handler {:?} failed: {e}",
                handler.name
            ))),
        }
    }

    async fn plugin_validate(
        &self,
        info: &ResourceInfo,
        obj: &Value,
        old: Option<&Value>,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        let Some(handler) = self.handler(info, Operation::Validate) else {
            return Ok(());
        };
        let request = Self::object_request(info, obj, old, user);
        let causes = handler.plugin.validate(&request).await.map_err(|e| {
            ApiError::Internal(format!(
                "validation by resource handler {:?} failed: {e}",
                handler.name
            ))
        })?;
        crate::strategy::invalid_if_any(info, obj, crate::admission::chain::causes(&causes))
    }

    fn get_subresource(&self, sub: &str, obj: &Value) -> Option<Value> {
        let scale = self.scale.as_ref().filter(|_| sub == "scale")?;
        let m = &obj["metadata"];
        let mut metadata = json!({"name": m["name"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"]});
        if let Some(ns) = m.get("namespace") {
            metadata["namespace"] = ns.clone();
        }
        let mut status =
            json!({"replicas": at(obj, &scale.status_replicas).cloned().unwrap_or(json!(0))});
        if let Some(sel) = scale.label_selector.as_deref().and_then(|p| at(obj, p)) {
            status["selector"] = sel.clone();
        }
        Some(json!({
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": metadata,
            "spec": {"replicas": at(obj, &scale.spec_replicas).cloned().unwrap_or(json!(0))},
            "status": status,
        }))
    }

    fn update_subresource(
        &self,
        sub: &str,
        current: &Value,
        body: &Value,
    ) -> Option<Result<Value, ApiError>> {
        let scale = self.scale.as_ref().filter(|_| sub == "scale")?;
        let mut new = current.clone();
        set_at(
            &mut new,
            &scale.spec_replicas,
            body["spec"]["replicas"].clone(),
        );
        Some(Ok(new))
    }

    fn prune(&self, _info: &ResourceInfo, obj: &mut Value) -> Vec<String> {
        self.schema.prune(obj)
    }

    fn canonicalize(&self, obj: &mut Value) {
        self.schema.default(obj);
    }

    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        let causes = self.schema.validate(obj, old);
        crate::strategy::invalid_if_any(info, obj, causes)
    }
}

fn condition(ty: &str, status: bool, reason: &str, message: &str, old: &Value) -> Value {
    let status = if status { "True" } else { "False" };
    let since = old["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == ty))
        .filter(|c| c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
        .unwrap_or_else(|| meta::timestamp(chrono::Utc::now()));
    json!({"type": ty, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
}

/// CRD objects.
pub struct Definitions {
    objects: Objects,
    served: Arc<Served>,
}

impl Definitions {
    pub fn new(objects: Objects, served: Arc<Served>) -> Self {
        Definitions { objects, served }
    }

    /// The name conflict that keeps `crd` from being served, if any.
    fn conflict(&self, crd: &Value) -> Option<String> {
        let name = meta::name(crd).unwrap_or_default();
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap_or_default();
        let snapshot = self.objects.resources.snapshot();
        for (field, value) in [
            ("plural", spec["names"]["plural"].as_str()),
            ("kind", spec["names"]["kind"].as_str()),
        ] {
            let Some(value) = value else { continue };
            if let Some(owner) = self.served.owner_of(group, value, &snapshot)
                && owner != name
            {
                return Some(format!("{field} {value:?} is already in use"));
            }
        }
        None
    }
}

#[async_trait]
impl Strategy for Definitions {
    fn prepare_for_create(&self, obj: &mut Value, _user: &UserInfo) {
        let m = meta::metadata_mut(obj);
        let finalizers = m.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = finalizers.as_array_mut()
            && !list.iter().any(|f| f == FINALIZER)
        {
            list.push(json!(FINALIZER));
        }
    }

    fn canonicalize(&self, obj: &mut Value) {
        let kind = obj["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let names = &mut obj["spec"]["names"];
        if names.is_object() {
            if names["singular"].as_str().is_none_or(str::is_empty) {
                names["singular"] = json!(kind.to_ascii_lowercase());
            }
            if names["listKind"].as_str().is_none_or(str::is_empty) {
                names["listKind"] = json!(format!("{kind}List"));
            }
        }
        let old = obj.clone();
        let conflict = self.conflict(obj);
        let accepted = conflict.is_none();
        let mut conditions = vec![
            match &conflict {
                None => condition(
                    "NamesAccepted",
                    true,
                    "NoConflicts",
                    "no conflicts found",
                    &old,
                ),
                Some(why) => condition("NamesAccepted", false, "NameConflict", why, &old),
            },
            if accepted {
                condition(
                    "Established",
                    true,
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                    &old,
                )
            } else {
                condition(
                    "Established",
                    false,
                    "NotAccepted",
                    "not all names are accepted",
                    &old,
                )
            },
        ];
        if meta::str_field(obj, "deletionTimestamp").is_some() {
            conditions.push(condition(
                "Terminating",
                true,
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress",
                &old,
            ));
        }
        let mut stored: Vec<Value> = old["status"]["storedVersions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(storage) = obj["spec"]["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
            .and_then(|v| v.get("name").cloned())
            && !stored.contains(&storage)
        {
            stored.push(storage);
        }
        obj["status"] = json!({
            "conditions": conditions,
            "acceptedNames": if accepted { obj["spec"]["names"].clone() } else { old["status"]["acceptedNames"].clone() },
            "storedVersions": stored,
        });
        if obj["status"]["acceptedNames"].is_null() {
            obj["status"]["acceptedNames"] = json!({"plural": "", "kind": ""});
        }
    }

    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        _old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        let causes = validate_definition(obj);
        if causes.is_empty() {
            Ok(())
        } else {
            Err(invalid(obj, causes))
        }
    }

    async fn after_write(&self, obj: &Value, deleted: bool) {
        apply(&self.objects, &self.served, obj, deleted);
    }
}

/// Brings the registry in line with one CRD (idempotent): registers the
/// served versions of an accepted CRD, unregisters a deleted one, and
/// starts the cleanup of a terminating one.
///
/// Every change comes twice, in no set order: from the write that made it
/// (`after_write`) and from the watch ([`spawn_controller`]). A change older
/// than the last one applied is dropped (the CRD's `resourceVersion`
/// orders them): else the watch's `Terminating` event, handled after the
/// cleanup deleted the CRD, or the delete request's own, handled after the
/// watch's cleanup did, registers a deleted CRD again, for good.
pub fn apply(objects: &Objects, served: &Arc<Served>, crd: &Value, deleted: bool) {
    let name = meta::name(crd).unwrap_or_default().to_string();
    let revision = meta::str_field(crd, "resourceVersion")
        .and_then(|rv| rv.parse::<u64>().ok())
        .unwrap_or(0);
    let seen = |served: &BTreeMap<String, Entry>| {
        served
            .get(&name)
            .is_some_and(|entry| entry.supersedes(revision))
    };
    // The second copy of a change skips building its resources.
    if seen(&served.0.lock().expect("served CRDs")) {
        return;
    }
    let accepted = crd["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "NamesAccepted" && c["status"] == "True")
    });
    let wanted: Vec<Resource> = if deleted || !accepted {
        Vec::new()
    } else {
        crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["served"] != false)
            .map(|v| {
                let schema = Schema::shared(Schema::intern(&v["schema"]["openAPIV3Schema"]));
                let scale = &v["subresources"]["scale"];
                let scale = scale.is_object().then(|| ScalePaths {
                    spec_replicas: scale["specReplicasPath"]
                        .as_str()
                        .unwrap_or(".spec.replicas")
                        .into(),
                    status_replicas: scale["statusReplicasPath"]
                        .as_str()
                        .unwrap_or(".status.replicas")
                        .into(),
                    label_selector: scale["labelSelectorPath"].as_str().map(String::from),
                });
                let storage_api_version = format!(
                    "{}/{}",
                    crd["spec"]["group"].as_str().unwrap_or_default(),
                    storage_version(crd)
                );
                Resource::new(version_info(crd, v)).with_strategy(Arc::new(CustomResources {
                    schema,
                    storage_api_version,
                    scale,
                    status_subresource: v["subresources"]["status"].is_object(),
                    handlers: objects.handlers.clone(),
                }))
            })
            .collect()
    };
    let keys: BTreeSet<Gvr> = wanted
        .iter()
        .map(|r| (r.group.clone(), r.version.clone(), r.plural.clone()))
        .collect();
    {
        // Checked again, and held while the registry changes, so that two
        // changes of one CRD cannot interleave.
        let mut map = served.0.lock().expect("served CRDs");
        if seen(&map) {
            return;
        }
        let previous = map
            .insert(
                name.clone(),
                Entry {
                    revision,
                    resources: keys.clone(),
                },
            )
            .map(|entry| entry.resources)
            .unwrap_or_default();
        for (g, v, p) in previous.difference(&keys) {
            objects.resources.remove(g, v, p);
        }
        if !wanted.is_empty() {
            objects.resources.insert_all(wanted);
        }
    }
    if !deleted && meta::str_field(crd, "deletionTimestamp").is_some() {
        let objects = objects.clone();
        let crd = crd.clone();
        tokio::spawn(async move {
            if let Err(e) = clean_up(&objects, &crd).await {
                tracing::warn!(crd = %name, error = %e, "CRD cleanup failed; retried on the next change");
            }
        });
    }
}

/// Deletes a terminating CRD's objects, then drops its finalizer.
async fn clean_up(objects: &Objects, crd: &Value) -> Result<(), ApiError> {
    let name = meta::name(crd).unwrap_or_default();
    let info = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.first())
        .map(|v| Resource::new(version_info(crd, v)));
    let opts = WriteOptions::system("apiextensions-controller");
    if let Some(res) = info {
        loop {
            let listed = objects.list(&res, None, &ListParams::default()).await?;
            let mut pending = 0;
            for obj in &listed.items {
                let ns = meta::namespace(obj).map(String::from);
                let n = meta::name(obj).unwrap_or_default();
                match objects
                    .delete(&res, ns.as_deref(), n, &Preconditions::default(), &opts)
                    .await
                {
                    Ok(crate::options::Deleted::Pending(_)) => pending += 1,
                    Ok(_) | Err(ApiError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            if pending == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let crds = objects.resources.builtin(GROUP, "v1", PLURAL);
    let result = objects
        .guaranteed_update(&crds, None, name, None, &opts, |cur| {
            let mut new = cur.clone();
            let kept: Vec<Value> = meta::finalizers(cur)
                .into_iter()
                .filter(|f| f != FINALIZER)
                .map(Value::from)
                .collect();
            meta::metadata_mut(&mut new).insert("finalizers".into(), json!(kept));
            Ok(new)
        })
        .await;
    match result {
        Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Registers every stored CRD (at start, before serving), and, on a
/// relist after a watch error, unregisters those deleted meanwhile (whose
/// deletion the watch never showed).
pub async fn install_existing(objects: &Objects, served: &Arc<Served>) -> Result<u64, ApiError> {
    let crds = objects.resources.builtin(GROUP, "v1", PLURAL);
    let listed = objects.list(&crds, None, &ListParams::default()).await?;
    let names: BTreeSet<&str> = listed.items.iter().filter_map(meta::name).collect();
    let gone: Vec<String> = served
        .0
        .lock()
        .expect("served CRDs")
        .iter()
        .filter(|(name, entry)| !entry.resources.is_empty() && !names.contains(name.as_str()))
        .map(|(name, _)| name.clone())
        .collect();
    for name in gone {
        // At the list's revision: one created since is newer, and stays.
        let tombstone = json!({"metadata": {
            "name": name,
            "resourceVersion": listed.resource_version.to_string(),
        }});
        apply(objects, served, &tombstone, true);
    }
    for crd in &listed.items {
        apply(objects, served, crd, false);
    }
    Ok(listed.resource_version)
}

/// Follows CRDs through a storage watch, so every replica serves the same
/// custom resources.
pub fn spawn_controller(objects: Objects, served: Arc<Served>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let crds = objects.resources.builtin(GROUP, "v1", PLURAL);
        loop {
            let result: Result<(), ApiError> = async {
                let revision = install_existing(&objects, &served).await?;
                let mut stream = objects
                    .storage
                    .watch(&crds.collection_key(None), revision)
                    .await
                    .map_err(storage_error)?;
                while let Some(item) = stream.next().await {
                    let WatchItem::Event(ev) = item.map_err(storage_error)? else {
                        continue;
                    };
                    let obj = decode(&ev.kv)?;
                    apply(&objects, &served, &obj, ev.kind == EventKind::Deleted);
                }
                Ok(())
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "CRD watch ended; relisting");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}
