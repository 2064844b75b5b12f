//! Kubernetes API machinery with no IO.
//!
//! Everything here is a pure function of its inputs so it can be unit-tested
//! without a server or a store: the resource registry ([`resource`]), the
//! `Status` error model ([`error`]), label and field selectors ([`selector`]),
//! the three patch formats ([`patch`]), object metadata rules ([`meta`],
//! [`validation`]), the built-in resources as data ([`builtin`]), what a
//! request is about ([`request`], shared by every layer above), `Table`
//! rendering for `kubectl get` ([`table`]) and the
//! OpenAPI document kubectl reads ([`openapi`]), and access control:
//! authentication rules ([`authn`]), RBAC ([`rbac`]) and audit policy and
//! events ([`audit`]); the decisions of the Job, CronJob and
//! TTL-after-finished controllers ([`batch`]).

pub mod admission;
pub mod admission_policy;
pub mod audit;
pub mod authn;
pub mod batch;
pub mod builtin;
pub mod cel;
pub mod controller;
pub mod daemonset;
pub mod discovery;
pub mod disruption;
pub mod encode;
pub mod endpoints;
pub mod error;
pub mod flowcontrol;
pub mod handler;
pub mod history;
pub mod kinds;
pub mod kubelet;
pub mod managed;
pub mod meta;
pub mod node;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod quota;
pub mod rbac;
pub mod replicas;
pub mod report;
pub mod request;
pub mod resource;
pub mod scheduler;
pub mod scheduler_plugin;
pub mod schema;
pub mod selector;
pub mod statefulset;
pub mod table;
pub mod validation;

pub use error::{ApiError, Cause};
pub use request::{ConnectionInfo, RequestInfo};
pub use resource::{Column, Registry, ResourceInfo};

/// The Kubernetes version this server reports and implements.
pub const KUBERNETES_VERSION: &str = "v1.33.0";
