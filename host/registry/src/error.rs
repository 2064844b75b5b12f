//! Storage failures as API errors.

use wasm_apiserver_api::ApiError;
use wasm_apiserver_storage::StorageError;

/// Maps storage failures that have no resource context (the resource-aware
/// cases are mapped where the target is known, in the store).
pub fn storage_error(e: StorageError) -> ApiError {
    match e {
        StorageError::Expired {
            requested,
            compacted,
        } => ApiError::Expired(format!(
            "too old resource version: {requested} ({compacted})"
        )),
        StorageError::TooLarge { requested, current } => {
            ApiError::TooLargeResourceVersion { requested, current }
        }
        StorageError::Unavailable(m) => ApiError::ServiceUnavailable(m),
        StorageError::NoSpace(m) => ApiError::InsufficientStorage(format!(
            "the storage is out of space, so writes are refused until space is freed (reads still work): {m}"
        )),
        other => ApiError::Internal(other.to_string()),
    }
}
