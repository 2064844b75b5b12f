//! The plugin runtime's integration tests, one module per plugin kind,
//! linked into one test binary (`it`): real guest components built by
//! `scripts/build-plugins.sh` and Kubewarden's policies, run by the runtime.

mod access;
mod admission;
mod common;
mod controllers;
mod handlers;
mod kubewarden;
mod polyglot;
mod scheduler;
