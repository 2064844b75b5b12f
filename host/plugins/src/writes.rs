//! What a controller may write: the host's write calls ([`Writes`], which
//! the registry implements as requests of the controller's identity, so
//! RBAC, admission and audit apply) and a per-reconcile budget
//! ([`WriteAccess`]).

use crate::cluster::Target;
use crate::types::FieldCause;
use serde_json::Value;
use std::sync::Arc;

/// A refused write, as the `Status` a client would get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub causes: Vec<FieldCause>,
}

impl WriteError {
    /// A refusal by the host itself (bad input, budget), as a 400 or 429.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        WriteError {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            causes: Vec::new(),
        }
    }
}

/// A patch's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
}

/// `DeleteOptions` a controller may set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    pub propagation_policy: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// The host's writes, made as the controller's identity.
#[async_trait::async_trait]
pub trait Writes: Send + Sync {
    async fn create(
        &self,
        target: &Target,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, WriteError>;

    async fn update(
        &self,
        target: &Target,
        object: Value,
        subresource: Option<&str>,
    ) -> Result<Value, WriteError>;

    #[allow(clippy::too_many_arguments)]
    async fn patch(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: Value,
        subresource: Option<&str>,
    ) -> Result<Value, WriteError>;

    async fn apply(
        &self,
        target: &Target,
        configuration: Value,
        force: bool,
        subresource: Option<&str>,
    ) -> Result<Value, WriteError>;

    async fn delete(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), WriteError>;

    /// Several applies; the host may run them concurrently. One answer per
    /// configuration, in order. By default, one after another.
    async fn apply_all(
        &self,
        configurations: Vec<(Target, Value)>,
        force: bool,
    ) -> Vec<Result<Value, WriteError>> {
        let mut out = Vec::with_capacity(configurations.len());
        for (target, configuration) in configurations {
            out.push(self.apply(&target, configuration, force, None).await);
        }
        out
    }

    /// Records an Event about `regarding`; never fails.
    async fn event(&self, regarding: &Value, warning: bool, reason: &str, note: &str);
}

/// A controller's writes and how many one reconcile may make.
#[derive(Clone)]
pub struct WriteAccess {
    pub writes: Arc<dyn Writes>,
    /// Most writes (events included) in one reconcile.
    pub max_writes: u32,
}

impl std::fmt::Debug for WriteAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteAccess")
            .field("max_writes", &self.max_writes)
            .finish()
    }
}

impl WriteAccess {
    /// Counts one write against the reconcile's budget.
    pub(crate) fn charge(&self, spent: &mut u32) -> Result<(), WriteError> {
        if *spent >= self.max_writes {
            return Err(WriteError::new(
                429,
                "TooManyRequests",
                format!(
                    "the controller made more than {} writes in one reconcile",
                    self.max_writes
                ),
            ));
        }
        *spent += 1;
        Ok(())
    }
}
