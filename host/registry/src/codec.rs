//! Objects as storage holds them: JSON without `resourceVersion`, which is
//! the storage revision.

use serde_json::Value;
use wasm_apiserver_api::{ApiError, meta};
use wasm_apiserver_storage::KeyValue;

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Decodes a stored value and stamps its resourceVersion.
pub fn decode(kv: &KeyValue) -> Result<Value> {
    let mut obj: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::Internal(format!("corrupt object at {}: {e}", kv.key)))?;
    meta::set_resource_version(&mut obj, kv.mod_revision);
    Ok(obj)
}

/// Encodes an object for storage: the resourceVersion lives in the revision.
pub fn encode(obj: &mut Value) -> Vec<u8> {
    meta::metadata_mut(obj).remove("resourceVersion");
    serde_json::to_vec(obj).expect("JSON values serialize")
}
