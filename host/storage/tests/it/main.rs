//! The storage suite against both backends, linked into one test binary
//! (`it`): the embedded store, and etcd (a real `etcd` process per test).

mod embedded;
mod etcd;
