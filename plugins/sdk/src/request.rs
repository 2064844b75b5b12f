//! The admission request as a policy reads it.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::admission::AdmissionRequest;
use crate::{GroupVersionKind, Operation, Patch, UserInfo};

/// An admission request with its `object` and `oldObject` parsed once.
///
/// Accessors that read the object (`name`, `labels`, `label`,
/// `annotation`) look at `object`, falling back to `oldObject` (a delete
/// has only the old one).
pub struct Request {
    raw: AdmissionRequest,
    object: Option<Value>,
    old_object: Option<Value>,
}

fn parse(text: Option<&str>, what: &str) -> Result<Option<Value>, String> {
    text.map(|s| serde_json::from_str(s).map_err(|e| format!("{what} is not valid JSON: {e}")))
        .transpose()
}

impl Request {
    /// Parses the JSON documents of a request the host sent.
    pub fn new(raw: AdmissionRequest) -> Result<Self, String> {
        let object = parse(raw.object.as_deref(), "object")?;
        let old_object = parse(raw.old_object.as_deref(), "oldObject")?;
        Ok(Self {
            raw,
            object,
            old_object,
        })
    }

    /// The request record as the host sent it.
    pub fn raw(&self) -> &AdmissionRequest {
        &self.raw
    }

    /// What is being done.
    pub fn operation(&self) -> Operation {
        self.raw.operation
    }

    /// True for a create.
    pub fn is_create(&self) -> bool {
        matches!(self.raw.operation, Operation::Create)
    }

    /// True for an update (a replace or a patch).
    pub fn is_update(&self) -> bool {
        matches!(self.raw.operation, Operation::Update)
    }

    /// True for a delete.
    pub fn is_delete(&self) -> bool {
        matches!(self.raw.operation, Operation::Delete)
    }

    /// The object's kind, e.g. `Deployment`.
    pub fn kind(&self) -> &str {
        &self.raw.kind.kind
    }

    /// The object's group, version and kind.
    pub fn gvk(&self) -> &GroupVersionKind {
        &self.raw.kind
    }

    /// The plural resource, e.g. `deployments`.
    pub fn resource(&self) -> &str {
        &self.raw.resource.resource
    }

    /// The subresource (`status`, `scale`...), if any.
    pub fn sub_resource(&self) -> Option<&str> {
        self.raw.sub_resource.as_deref()
    }

    /// The namespace; `None` for cluster-scoped resources.
    pub fn namespace(&self) -> Option<&str> {
        self.raw.namespace.as_deref()
    }

    /// Who is making the request.
    pub fn user(&self) -> &UserInfo {
        &self.raw.user_info
    }

    /// True when nothing will be persisted (`?dryRun=All`).
    pub fn dry_run(&self) -> bool {
        self.raw.dry_run
    }

    /// The object after the operation; `None` for a delete.
    pub fn object(&self) -> Option<&Value> {
        self.object.as_ref()
    }

    /// The object before the operation (updates and deletes).
    pub fn old_object(&self) -> Option<&Value> {
        self.old_object.as_ref()
    }

    /// The object as a typed value, e.g. `k8s_openapi::api::core::v1::Pod`.
    pub fn object_as<T: DeserializeOwned>(&self) -> Result<Option<T>, String> {
        self.object
            .as_ref()
            .map(|v| T::deserialize(v).map_err(|e| format!("object is not a {}: {e}", self.kind())))
            .transpose()
    }

    /// The object, or the old object when there is none (a delete).
    pub fn subject(&self) -> Option<&Value> {
        self.object.as_ref().or(self.old_object.as_ref())
    }

    fn metadata(&self, field: &str) -> Option<&serde_json::Map<String, Value>> {
        self.subject()?.get("metadata")?.get(field)?.as_object()
    }

    /// The object's name: `metadata.name`, else the request's name, else
    /// empty (a create with `generateName`).
    pub fn name(&self) -> &str {
        self.subject()
            .and_then(|o| o.pointer("/metadata/name"))
            .and_then(Value::as_str)
            .or(self.raw.name.as_deref())
            .unwrap_or("")
    }

    /// The object's labels (empty when it has none).
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        strings(self.metadata("labels"))
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.metadata("labels")?.get(key)?.as_str()
    }

    /// A [`Patch`] of the object (empty when there is none).
    pub fn patch(&self) -> Patch {
        Patch::on(self.object.as_ref().unwrap_or(&Value::Null))
    }

    /// The keys of `required` the object has no label for, in order.
    pub fn missing_labels<'a, S: AsRef<str>>(&self, required: &'a [S]) -> Vec<&'a str> {
        required
            .iter()
            .map(AsRef::as_ref)
            .filter(|k| self.label(k).is_none())
            .collect()
    }

    /// The object's annotations (empty when it has none).
    pub fn annotations(&self) -> impl Iterator<Item = (&str, &str)> {
        strings(self.metadata("annotations"))
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata("annotations")?.get(key)?.as_str()
    }
}

fn strings(map: Option<&serde_json::Map<String, Value>>) -> impl Iterator<Item = (&str, &str)> {
    map.into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}
