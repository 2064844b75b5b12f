//! Plain Rust mirrors of the WIT types that cross the plugin boundary.
//!
//! These are what the rest of the server sees: no wasmtime type appears in
//! them. They serialize (serde) with the field names of the Kubernetes API
//! types they mirror (`AdmissionRequest`/`AdmissionResponse` of
//! `admission.k8s.io/v1`, `UserInfo` of `authentication.k8s.io/v1`), so the
//! server can also build them from, or turn them into, webhook JSON.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A group, version and kind (`apps/v1, Kind=Deployment`). The core group is `""`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// A group, version and resource (`apps/v1, Resource=deployments`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

/// The user a request is made by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The operation of an admission request (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// What the API server is about to do; the input of admission plugins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    pub kind: Gvk,
    pub resource: Gvr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<Gvk>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<Gvr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(rename = "userInfo")]
    pub user: UserInfo,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<serde_json::Value>,
}

/// Why a request was denied: the `code`, `reason`, `message` and
/// `details.causes` of a Kubernetes `Status` with `status: Failure`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenyStatus {
    /// An HTTP status code in 400..=599.
    pub code: u16,
    /// A CamelCase reason such as `Forbidden`; never empty.
    pub reason: String,
    /// A human-readable message.
    pub message: String,
    /// The fields the denial is about (plugins of package 0.2.0 and later).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<FieldCause>,
}

/// One invalid field, as a Kubernetes `StatusCause`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldCause {
    /// The field's path, e.g. `spec.replicas`.
    pub field: String,
    /// A CamelCase reason such as `FieldValueInvalid`; may be empty.
    pub reason: String,
    /// A human-readable message.
    pub message: String,
}

/// A plugin's decision; the output of admission plugins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub allowed: bool,
    /// Present exactly when `allowed` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DenyStatus>,
    /// A JSON Patch (RFC 6902): always a JSON array of operation objects.
    /// Only ever set by `mutate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Keys are prefixed with the plugin's name: `<plugin>/<key>`, as the API
    /// server does for webhook audit annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<String, String>,
}

/// Counters of the on-disk compilation cache since the [`Runtime`](crate::Runtime) started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Components loaded from a precompiled artifact.
    pub hits: usize,
    /// Components compiled (and then stored).
    pub misses: usize,
}
