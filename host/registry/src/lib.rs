//! The registry layer: Kubernetes object semantics between access control
//! and storage, like upstream's `pkg/registry`.
//!
//! * [`resources`]: the runtime resource registry, an atomically swapped
//!   snapshot of every served [`Resource`] (its description as data, one
//!   [`Strategy`], REST objects for computed creates);
//! * [`store`]: the generic store ([`Objects`]): metadata rules, CAS
//!   retries, finalizers, namespace lifecycle, selectors and paging, and
//!   the admission chain, for every resource alike;
//! * [`strategy`]: the traits a resource's special behaviour implements;
//! * [`builtin`]: the built-in resources and their strategies;
//! * [`crd`]: CustomResourceDefinitions, which register resources at runtime;
//! * [`handlers`]: resource handlers, wasm components that convert, default
//!   and validate custom resources, and their controller;
//! * [`admission`]: the admission chain (wasm plugins and webhooks) and the
//!   controller that loads it from API objects; [`webhook`] is the webhook
//!   client;
//! * [`namespaces`]: the namespace controller;
//! * [`controllers`]: logic that acts by itself (garbage collector,
//!   service accounts, the `kubernetes` Service), each controller a client
//!   of the registry with a work queue and leader election; [`informer`]
//!   is the metadata view of every object they follow;
//! * [`certificates`]: CertificateSigningRequests (requester, `approval`
//!   and `status`, validation) and the request parsing the certificate
//!   controllers share;
//! * [`cluster`]: the cluster as plugins read it (granted kinds only,
//!   straight from the store, within a byte budget);
//! * [`workloads`]: pods, workloads and services: defaulting, validation
//!   and the `scale` subresource;
//! * [`options`]: the options and outcomes of store operations.
//!
//! Architecture invariant: this crate names no server-side HTTP type (no
//! axum, no routes, no request or response types); the access-control and
//! HTTP layers above call it, never the other way round. Its one HTTP use
//! is the outgoing admission webhook call ([`webhook`]).

pub mod admission;
pub mod aggregator;
pub mod allocator;
pub mod apply;
pub mod autoscaling;
pub mod builtin;
pub mod certificates;
pub mod client_metrics;
pub mod cluster;
pub mod codec;
pub mod componentstatuses;
pub mod controllers;
pub mod crd;
pub mod error;
pub mod field_index;
pub mod handlers;
pub mod informer;
pub mod kubelet;
pub mod load;
pub mod namespaces;
pub mod oci;
pub mod options;
pub mod outbound;
pub mod resources;
pub mod store;
pub mod strategy;
pub mod webhook;
pub mod workloads;

pub use options::{
    Deleted, FieldValidation, ListOutcome, ListParams, Preconditions, Propagation, WriteOptions,
};
pub use resources::{Resource, Resources, Snapshot};
pub use store::Objects;
pub use strategy::{CreateRequest, Creater, Escalation, Reader, Strategy};
