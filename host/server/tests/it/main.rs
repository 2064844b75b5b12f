//! The server's in-process tests, linked into one test binary (`it`): the
//! router driven with `tower::ServiceExt::oneshot` on the embedded store,
//! the field indexes against a naive model, and the bench binaries'
//! allocators.

mod benches;
mod field_index;
mod router;
