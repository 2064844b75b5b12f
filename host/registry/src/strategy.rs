//! What is special about a resource, as objects the generic store and the
//! REST handler call, the way upstream's `rest.Strategy` and per-resource
//! `rest.Storage` implementations are:
//!
//! * [`Strategy`]: object semantics of a stored resource (scope, defaulting,
//!   validation, subresources, graceful deletion, what follows a write);
//! * [`Creater`]: a resource or subresource whose `create` computes an
//!   answer instead of storing an object (access reviews, TokenRequest);
//! * [`Escalation`]: the check RBAC writes need from the access-control
//!   layer above (which implements it), so the registry never names it.

use async_trait::async_trait;
use serde_json::Value;
use wasm_apiserver_api::validation::{prune_unknown_fields, validate_object};
use wasm_apiserver_api::{ApiError, Cause, ResourceInfo, meta};
use wasm_apiserver_plugins::UserInfo;

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The object semantics of one stored resource where they differ from the
/// generic store's. Every method has the generic behaviour as its default.
#[async_trait]
pub trait Strategy: Send + Sync {
    /// The namespace a request's objects live in, given the URL's
    /// namespace and the verb; `None` when the request addresses nothing
    /// (404). Namespaced resources need a namespace except for cluster-wide
    /// list and watch; cluster-scoped ones must not have one.
    fn scope<'a>(
        &self,
        info: &ResourceInfo,
        namespace: Option<&'a str>,
        verb: &str,
    ) -> Option<Option<&'a str>> {
        match (info.namespaced, namespace) {
            (false, Some(_)) => None,
            (true, None) if !matches!(verb, "list" | "watch") => None,
            (_, ns) => Some(ns),
        }
    }

    /// Drops the fields the resource's schema does not know; returns their
    /// paths (the `fieldValidation` parameter decides what they cause).
    fn prune(&self, info: &ResourceInfo, obj: &mut Value) -> Vec<String> {
        prune_unknown_fields(info, obj)
    }

    /// Fields set on create only (after the generic metadata); `user` is
    /// the creator (a CertificateSigningRequest records its requester).
    fn prepare_for_create(&self, _obj: &mut Value, _user: &UserInfo) {}

    /// Fields an update keeps from the current object when the request
    /// leaves them out (a service's allocated cluster IP).
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value) {}

    /// Defaulting and canonicalization, on every create and update.
    fn canonicalize(&self, _obj: &mut Value) {}

    /// Validates the object to be stored (after mutating admission, before
    /// validating admission). `old` is the current object on updates;
    /// `user` is the writer.
    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        _old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<()> {
        validate_object(info, obj)
    }

    /// The object an update of subresource `sub` stores, from the current
    /// object and the request's body, or why the update is refused.
    /// `status` is generic unless the strategy has its own; other
    /// subresources (a namespace's `finalize`) are the strategy's. `None`:
    /// no such subresource (or the generic `status`).
    fn update_subresource(
        &self,
        _sub: &str,
        _current: &Value,
        _body: &Value,
    ) -> Option<Result<Value>> {
        None
    }

    /// Stored objects as a request in `info`'s version shows them, in one
    /// batch (a list converts all its items at once). Custom resources are
    /// stored in their storage version and read in any served one: through
    /// their `ResourceHandler` when one converts them, else by changing
    /// only `apiVersion` (`conversion: None`).
    async fn present(&self, _info: &ResourceInfo, _objs: &mut [Value]) -> Result<()> {
        Ok(())
    }

    /// The object to store, from the request's version of it: the last
    /// step of a write, after validation and admission. `None`: store `obj`
    /// as it is (no copy on the write path of resources that never convert).
    async fn to_storage(&self, _info: &ResourceInfo, _obj: &Value) -> Result<Option<Value>> {
        Ok(None)
    }

    /// Defaulting by a plugin, beyond [`Strategy::canonicalize`]: runs
    /// after it, before mutating admission. `old` is the current object on
    /// updates.
    async fn plugin_default(
        &self,
        _info: &ResourceInfo,
        _obj: &mut Value,
        _old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<()> {
        Ok(())
    }

    /// Validation by a plugin, beyond [`Strategy::validate`]: runs after
    /// it, before validating admission.
    async fn plugin_validate(
        &self,
        _info: &ResourceInfo,
        _obj: &Value,
        _old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<()> {
        Ok(())
    }

    /// A subresource's own view of an object (`scale`'s `autoscaling/v1`
    /// `Scale`); `None`: the object itself (as `status` is read). Writes to
    /// such a subresource get (and patch) this view, and
    /// [`Strategy::update_subresource`] maps it back.
    fn get_subresource(&self, _sub: &str, _obj: &Value) -> Option<Value> {
        None
    }

    /// Whether deleting `obj` only marks it for deletion (finalizers hold
    /// it, or the resource is always deleted gracefully).
    fn graceful_delete(&self, obj: &Value) -> bool {
        !meta::finalizers(obj).is_empty()
    }

    /// The grace period a delete of `obj` gets, for resources deleted
    /// gracefully (upstream's `CheckGracefulDelete`); `requested` is the
    /// request's `gracePeriodSeconds`. `None`: the resource has no grace
    /// period (it goes at once unless finalizers hold it). A positive
    /// period marks the object (`deletionTimestamp` that far ahead,
    /// `deletionGracePeriodSeconds`) and leaves it for another actor (a
    /// pod's kubelet) to delete with a period of 0.
    fn grace_period(&self, _obj: &Value, _requested: Option<i64>) -> Option<i64> {
        None
    }

    /// What a delete does to dependents when the request does not say
    /// (upstream's `DefaultGarbageCollectionPolicy`).
    fn default_propagation(&self, _info: &ResourceInfo) -> crate::options::Propagation {
        crate::options::Propagation::Background
    }

    /// Changes to an object as it is marked for deletion.
    fn prepare_for_delete(&self, _marked: &mut Value) {}

    /// Whether something besides `metadata.finalizers` still holds an
    /// object marked for deletion.
    fn holds_deletion(&self, _obj: &Value) -> bool {
        false
    }

    /// Takes what a new object needs from a shared pool (a service's
    /// cluster IP and node ports): after validation and admission, right
    /// before the object is stored, never on dry runs.
    async fn allocate(&self, _info: &ResourceInfo, _obj: &mut Value) -> Result<()> {
        Ok(())
    }

    /// Gives back what [`Strategy::allocate`] took: when the create is not
    /// stored after all, or the object is deleted.
    async fn release(&self, _obj: &Value) {}

    /// Runs after a write is stored (never on dry runs): `deleted` when the
    /// object is gone, else `obj` is what was stored.
    async fn after_write(&self, _obj: &Value, _deleted: bool) {}
}

/// `Ok` when `causes` is empty, else the 422 `Invalid` of `obj` listing them.
pub fn invalid_if_any(info: &ResourceInfo, obj: &Value, causes: Vec<Cause>) -> Result<()> {
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid(
        wasm_apiserver_api::error::Target::new(
            &info.group,
            &info.plural,
            meta::name(obj).unwrap_or_default(),
        ),
        causes,
    ))
}

/// The generic store's behaviour, unchanged.
pub struct DefaultStrategy;

impl Strategy for DefaultStrategy {}

/// What a computed `create` is about.
pub struct CreateRequest<'a> {
    pub info: &'a ResourceInfo,
    pub namespace: Option<&'a str>,
    /// The parent object's name, for a subresource (`serviceaccounts/x/token`).
    pub name: Option<&'a str>,
    pub user: &'a UserInfo,
}

/// A resource or subresource whose `create` computes its answer (and
/// stores nothing).
#[async_trait]
pub trait Creater: Send + Sync {
    async fn create(&self, req: CreateRequest<'_>, body: Value) -> Result<Value>;
}

/// A cluster-scoped resource whose objects are computed on every read and
/// never stored (`componentstatuses`): `get` and `list` are answered from
/// [`Reader::list`], every other verb is 405.
#[async_trait]
pub trait Reader: Send + Sync {
    /// Every object, in name order.
    async fn list(&self) -> Result<Vec<Value>>;
}

/// Refuses RBAC writes that would grant more than the writer holds.
pub trait Escalation: Send + Sync {
    fn check(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        obj: &Value,
        user: &UserInfo,
    ) -> Result<()>;
}
