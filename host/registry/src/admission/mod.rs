//! Admission: the chain of wasm admission plugins and webhooks in the
//! request path ([`chain`]), and the controller that loads them at runtime
//! from `AdmissionPlugin` and webhook-configuration objects ([`controller`]).
//!
//! * Mutating plugins run first, in `(order, name)` order, each seeing the
//!   previous one's patch applied; then validating plugins run on the final
//!   object. Rules, `namespaceSelector` and `objectSelector` match as for
//!   webhooks. A denial rejects the request (`mode: Deny`), becomes a
//!   `Warning` header (`Warn`) or only an audit annotation and log line
//!   (`Audit`). A plugin failure (trap, timeout, memory, bad output) rejects
//!   the request with 500 under `failurePolicy: Fail` and is skipped under
//!   `Ignore`; either way the server keeps serving.
//! * The active set is an immutable snapshot behind a lock held only to
//!   clone an `Arc`: a request sees one consistent chain, and loading,
//!   replacing or removing a plugin is an atomic swap.
//! * Plugins come from `--admission-control-config-file` (static, loaded at
//!   start, cannot be replaced through the API: they can protect the
//!   `AdmissionPlugin` objects themselves) and from `AdmissionPlugin` objects,
//!   which every replica follows through a storage watch. A module that fails
//!   to load is reported in the object's status and the previous version
//!   keeps serving.
//! * A plugin's shadow version ([`shadow`]) sees what the plugin sees, off
//!   the request path, and is never enforced; the background audit of
//!   stored objects ([`Admission::audit`], driven by the `policy-audit`
//!   controller) runs the same plugins on synthetic requests.

pub mod certificates;
pub mod chain;
pub mod controller;
pub mod metrics;
pub mod noderestriction;
pub mod ownerrefs;
pub mod plugins;
pub mod policy;
pub mod resourcequota;
pub mod serviceaccount;
pub mod shadow;

pub use chain::{Active, Admission, Attributes, Backend, limits};
