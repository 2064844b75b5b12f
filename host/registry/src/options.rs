//! The options and outcomes of store operations: a write's context
//! ([`WriteOptions`]: dry run, field validation, the user, and the warnings
//! and audit annotations admission adds), delete preconditions, list
//! parameters and pages.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;
use wasm_apiserver_api::audit::Annotations;
use wasm_apiserver_api::selector::{FieldSelector, LabelSelector};
use wasm_apiserver_plugins::UserInfo;

/// The identity the server's own controllers write as.
pub fn system_user(component: &str) -> UserInfo {
    UserInfo {
        username: format!("system:wasm-apiserver:{component}"),
        groups: vec!["system:masters".into()],
        ..Default::default()
    }
}

/// The context of one write: options, identity, and what admission adds to
/// the response (warnings, audit annotations).
#[derive(Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: run everything but the storage write.
    pub dry_run: bool,
    /// `fieldValidation`: what unknown fields in the request's object cause.
    pub field_validation: FieldValidation,
    /// Who makes the request (handed to admission plugins).
    pub user: UserInfo,
    warnings: Mutex<Vec<String>>,
    audit_annotations: Mutex<BTreeMap<String, String>>,
    /// The request's audit annotations, when the audit log records it.
    pub audit: Option<Annotations>,
    /// Whose write this is in `metadata.managedFields` (`fieldManager`, or
    /// the client's User-Agent product as upstream); empty records nothing.
    pub field_manager: String,
    /// A server-side apply, which records its own managed fields.
    pub applying: bool,
    /// An apply with `force=true`.
    pub forcing: bool,
    /// A PATCH (admission sees `PatchOptions`).
    pub patching: bool,
}

/// The `fieldValidation` query parameter. Unknown fields of built-in kinds
/// are never stored; this says whether they fail the request, warn, or go
/// silently. Upstream's default is `Warn`; kubectl sends `Strict` by default.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl WriteOptions {
    pub fn new(dry_run: bool, user: UserInfo) -> Self {
        WriteOptions {
            dry_run,
            user,
            ..Default::default()
        }
    }

    /// A write by one of the server's own controllers.
    pub fn system(component: &str) -> Self {
        let mut opts = Self::new(false, system_user(component));
        opts.field_manager = format!("wasm-apiserver-{component}");
        opts
    }

    /// Adds warnings, each once (a write retried after a conflict repeats
    /// its checks).
    pub fn add_warnings(&self, w: impl IntoIterator<Item = String>) {
        let mut warnings = self.warnings.lock().expect("warnings lock");
        for w in w {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }

    pub fn add_audit_annotations(&self, a: impl IntoIterator<Item = (String, String)>) {
        let items: Vec<(String, String)> = a.into_iter().collect();
        if let Some(audit) = &self.audit {
            audit.add(items.iter().cloned());
        }
        self.audit_annotations
            .lock()
            .expect("annotations lock")
            .extend(items);
    }

    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().expect("warnings lock").clone()
    }

    pub fn audit_annotations(&self) -> BTreeMap<String, String> {
        self.audit_annotations
            .lock()
            .expect("annotations lock")
            .clone()
    }
}

/// `DeleteOptions`: preconditions and what happens to dependents.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<u64>,
    /// `propagationPolicy` (or the legacy `orphanDependents`); `None`: the
    /// object's own GC finalizers, else the resource's default.
    pub propagation: Option<Propagation>,
    /// `gracePeriodSeconds`: how long a resource deleted gracefully (pods)
    /// has before it goes; `None`: the object's own default.
    pub grace_period_seconds: Option<i64>,
}

/// What a delete does to the objects that name the deleted one in their
/// `ownerReferences` (upstream's `DeletionPropagation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents lose the reference and stay (the `orphan` finalizer
    /// holds the owner until the garbage collector has done that).
    Orphan,
    /// The owner goes now; the garbage collector deletes dependents after.
    Background,
    /// The owner stays (finalizer `foregroundDeletion`) until every
    /// dependent whose reference has `blockOwnerDeletion` is gone.
    Foreground,
}

/// The finalizer of an orphaning delete.
pub const FINALIZER_ORPHAN: &str = "orphan";
/// The finalizer of a foreground delete.
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

impl Propagation {
    /// `propagationPolicy` as the API spells it.
    pub fn parse(s: &str) -> Option<Propagation> {
        Some(match s {
            "Orphan" => Propagation::Orphan,
            "Background" => Propagation::Background,
            "Foreground" => Propagation::Foreground,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Orphan => "Orphan",
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
        }
    }

    /// The finalizers a delete leaves on `finalizers` (upstream's
    /// `deletionFinalizersForGarbageCollection`): an explicit policy
    /// replaces the object's GC finalizer; without one, a GC finalizer the
    /// object has stays, else the resource's default applies.
    pub fn finalizers(
        explicit: Option<Propagation>,
        default: Propagation,
        finalizers: &[String],
    ) -> Vec<String> {
        let has = |f: &str| finalizers.iter().any(|x| x == f);
        let policy = explicit.unwrap_or(if has(FINALIZER_ORPHAN) {
            Propagation::Orphan
        } else if has(FINALIZER_FOREGROUND) {
            Propagation::Foreground
        } else {
            default
        });
        let mut out: Vec<String> = finalizers
            .iter()
            .filter(|f| *f != FINALIZER_ORPHAN && *f != FINALIZER_FOREGROUND)
            .cloned()
            .collect();
        match policy {
            Propagation::Orphan => out.push(FINALIZER_ORPHAN.into()),
            Propagation::Foreground => out.push(FINALIZER_FOREGROUND.into()),
            Propagation::Background => {}
        }
        out
    }
}

/// Parameters of a list (and of a watch's initial state).
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    /// Answer a field selector on any field from a field index
    /// (the registry's field indexes): plugins' cluster reads.
    pub indexed: bool,
}

impl ListParams {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches_object(obj) && self.fields.matches(obj)
    }
}

/// A page of a list.
#[derive(Debug, Clone)]
pub struct ListOutcome {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone; this was its last state.
    Now(Value),
    /// Finalizers (or namespace cleanup) hold it; it is marked for deletion.
    Pending(Value),
}
