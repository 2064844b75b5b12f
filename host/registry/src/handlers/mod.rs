//! Resource handlers: wasm components bound to custom resources by
//! `ResourceHandler` objects (`apiextensions.wasm-apiserver.io/v1alpha1`),
//! which convert their objects between served versions and default and
//! validate them beyond their schema.
//!
//! * The active set is an immutable snapshot ([`ArcSwap`]): a request sees
//!   one handler per resource, and loading, replacing or removing a handler
//!   is an atomic swap. Custom resources look their handler up on every
//!   call, so a new handler takes effect without re-registering the CRD.
//! * Every replica follows `ResourceHandler` objects through a storage watch
//!   ([`spawn_controller`]). A module that fails to load is reported in the
//!   object's status (`phase: Failed`, `message`) while the previous version
//!   keeps serving; a resource claimed by two handlers stays with the one
//!   that claimed it first, and the other reports the conflict.
//! * Handler calls run in the plugin runtime's sandbox (fresh instance per
//!   call, time and memory limits); a failing handler fails the request
//!   that needed it (500) and never the server.

pub mod controller;

use crate::admission::chain::superseded;
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::sync::Arc;
use wasm_apiserver_api::handler::{HandlerSpec, Operation};
use wasm_apiserver_plugins::ResourceHandlerPlugin;

pub use controller::spawn_controller;

/// A loaded handler and the object it came from.
pub struct Bound {
    /// The `ResourceHandler` object's name.
    pub name: String,
    pub generation: i64,
    /// The object's `metadata.uid`.
    pub uid: String,
    pub spec: HandlerSpec,
    pub plugin: ResourceHandlerPlugin,
}

impl Bound {
    fn handles(&self, group: &str, plural: &str) -> bool {
        self.spec
            .resources
            .iter()
            .any(|r| r.group == group && r.resource == plural)
    }
}

/// The active handlers, by object name.
#[derive(Default)]
pub struct Handlers {
    active: ArcSwap<BTreeMap<String, Arc<Bound>>>,
    /// The uid of the last deleted object of each name (its later events
    /// load nothing); held while the active set changes, so an install and
    /// a removal never interleave.
    removed: std::sync::Mutex<BTreeMap<String, String>>,
}

impl Handlers {
    /// The handler of a custom resource that does `op`, if any.
    pub fn get(&self, group: &str, plural: &str, op: Operation) -> Option<Arc<Bound>> {
        self.active
            .load()
            .values()
            .find(|b| b.handles(group, plural))
            .filter(|b| b.spec.does(op))
            .cloned()
    }

    /// Names of the active handlers.
    pub fn names(&self) -> Vec<String> {
        self.active.load().keys().cloned().collect()
    }

    /// The generation and digest of an active handler.
    pub fn loaded(&self, name: &str) -> Option<(i64, String)> {
        self.active
            .load()
            .get(name)
            .map(|b| (b.generation, b.plugin.digest().to_owned()))
    }

    /// Another active handler that already claims one of `spec`'s resources.
    pub(crate) fn claimed_by_other(
        &self,
        name: &str,
        spec: &HandlerSpec,
    ) -> Option<(String, String)> {
        let active = self.active.load();
        spec.resources.iter().find_map(|r| {
            active
                .values()
                .find(|b| b.name != name && b.handles(&r.group, &r.resource))
                .map(|b| (format!("{}.{}", r.resource, r.group), b.name.clone()))
        })
    }

    /// Activates (or replaces) the handler of an object, unless a newer
    /// generation of the same object is active already (see
    /// [`Admission::install`](crate::admission::chain::Admission::install)).
    pub(crate) fn install(&self, bound: Arc<Bound>) {
        let mut removed = self.removed.lock().unwrap_or_else(|e| e.into_inner());
        if removed.get(&bound.name) == Some(&bound.uid) {
            return; // loaded for an event older than the object's deletion
        }
        removed.remove(&bound.name);
        self.active.rcu(|m| {
            let mut m = BTreeMap::clone(m);
            let newer = m.get(&bound.name).is_some_and(|b| {
                superseded((&b.uid, b.generation), (&bound.uid, bound.generation))
            });
            if !newer {
                m.insert(bound.name.clone(), bound.clone());
            }
            m
        });
    }

    /// Whether generation `generation` of the object `uid` named `name` is
    /// older than the handler of it active here: a stale event.
    ///
    /// An event of an object already deleted here is superseded too.
    pub fn superseded(&self, name: &str, uid: &str, generation: i64) -> bool {
        let removed = self.removed.lock().unwrap_or_else(|e| e.into_inner());
        removed.get(name).is_some_and(|u| u == uid)
            || self
                .active
                .load()
                .get(name)
                .is_some_and(|b| superseded((&b.uid, b.generation), (uid, generation)))
    }

    /// Deactivates the handler of a deleted object (`uid`); its later
    /// events (a lagging watch's) do not bring it back.
    pub fn remove(&self, name: &str, uid: &str) {
        let mut removed = self.removed.lock().unwrap_or_else(|e| e.into_inner());
        if !uid.is_empty() {
            removed.insert(name.to_owned(), uid.to_owned());
        }
        self.active.rcu(|m| {
            let mut m = BTreeMap::clone(m);
            m.remove(name);
            m
        });
    }
}
