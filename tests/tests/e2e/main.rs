//! The end-to-end tests, one module per area, linked into one test binary
//! (`e2e`) so that the suite links the server once. Each test still starts
//! its own `wasm-apiserver` process (see the harness, `wasm_apiserver_e2e`).
//! Run one area or one test by its path: `scripts/test admission::` or
//! `cargo test -p wasm-apiserver-e2e --test e2e admission::plugins_load`.

mod access;
mod admission;
mod admission_policies;
mod aggregation;
mod audit;
mod consistency;
mod context_aware;
mod controllers;
mod crds;
mod daemonsets;
mod discovery_apis;
mod disk_full;
mod disruption_budgets;
mod etcd_replicas;
mod flowcontrol;
mod jobs;
mod kube_rs;
mod kube_rs_crd;
mod kubectl;
mod kubelet;
mod kubewarden;
mod many_crds;
mod node_bootstrap;
mod nodes;
mod observability;
mod oci_modules;
mod plugin_cli;
mod pod_lifecycle;
mod policy_audit;
mod policy_kit;
mod python_client;
mod registry_trust;
mod resource_handlers;
mod resource_quotas;
mod rollouts;
mod scheduler_plugins;
mod scheduling;
mod server_side_apply;
mod service_endpoints;
mod snapshots;
mod statefulsets;
mod storage_space;
mod upgrade;
mod wasm_controllers;
mod workloads;
