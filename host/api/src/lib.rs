//! Kubernetes API machinery with no IO.
//!
//! Everything here is a pure function of its inputs so it can be unit-tested
//! without a server or a store: the resource registry ([`resource`]), the
//! `Status` error model ([`error`]), label and field selectors ([`selector`]),
//! the three patch formats ([`patch`]), object metadata rules ([`meta`],
//! [`validation`]), `Table` rendering for `kubectl get` ([`table`]) and the
//! OpenAPI document kubectl reads ([`openapi`]), and access control:
//! authentication rules ([`authn`]), RBAC ([`rbac`]) and audit policy and
//! events ([`audit`]).

pub mod admission;
pub mod audit;
pub mod authn;
pub mod error;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod rbac;
pub mod resource;
pub mod selector;
pub mod table;
pub mod validation;

pub use error::{ApiError, Cause};
pub use resource::{Registry, ResourceInfo};
