//! The runtime resource registry: every served resource with its behaviour
//! ([`Resource`]: the description as data, one [`Strategy`], and REST
//! objects for computed creates), held as an immutable [`Snapshot`] that is
//! swapped atomically when a resource is added, changed or removed. A
//! request reads one snapshot, so it sees one consistent registry; routing,
//! discovery, OpenAPI, Table output and the store all read from it.

use crate::strategy::{Creater, DefaultStrategy, Reader, Strategy};
use arc_swap::ArcSwap;
use bytes::Bytes;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock};
use wasm_apiserver_api::{Registry, ResourceInfo};

/// One served resource.
#[derive(Clone)]
pub struct Resource {
    /// Shared with every snapshot's [`Registry`] (cloned per registry
    /// change, so never deep-copied).
    pub info: Arc<ResourceInfo>,
    pub strategy: Arc<dyn Strategy>,
    /// For resources that store nothing: `create` is answered by this, and
    /// every other verb is 405.
    pub create_only: Option<Arc<dyn Creater>>,
    /// For resources computed on every read (get and list only).
    pub reader: Option<Arc<dyn Reader>>,
    /// Subresources whose `create` is computed (`serviceaccounts/token`).
    pub subresource_creaters: BTreeMap<String, Arc<dyn Creater>>,
}

impl Deref for Resource {
    type Target = ResourceInfo;
    fn deref(&self) -> &ResourceInfo {
        &self.info
    }
}

impl Resource {
    /// A stored resource with the generic behaviour.
    pub fn new(info: ResourceInfo) -> Self {
        Resource {
            info: Arc::new(info),
            strategy: Arc::new(DefaultStrategy),
            create_only: None,
            reader: None,
            subresource_creaters: BTreeMap::new(),
        }
    }

    pub fn with_strategy(mut self, strategy: Arc<dyn Strategy>) -> Self {
        self.strategy = strategy;
        self
    }

    pub fn with_create_only(mut self, creater: Arc<dyn Creater>) -> Self {
        self.create_only = Some(creater);
        self
    }

    pub fn with_reader(mut self, reader: Arc<dyn Reader>) -> Self {
        self.reader = Some(reader);
        self
    }

    /// Whether the store holds none of its objects (computed creates or
    /// reads): no watch, informer, namespace cleanup or audit covers it.
    pub fn stores_nothing(&self) -> bool {
        self.create_only.is_some() || self.reader.is_some()
    }

    pub fn with_subresource_creater(mut self, sub: &str, creater: Arc<dyn Creater>) -> Self {
        self.subresource_creaters.insert(sub.to_string(), creater);
        self
    }
}

type Key = (String, String, String);

fn key(group: &str, version: &str, plural: &str) -> Key {
    (group.to_string(), version.to_string(), plural.to_string())
}

/// One consistent state of the registry.
#[derive(Default)]
pub struct Snapshot {
    entries: BTreeMap<Key, Arc<Resource>>,
    infos: Registry,
    /// The OpenAPI v2 document (JSON), built on first use.
    openapi: OnceLock<Bytes>,
    /// Its protobuf form, built when a client first asks for it.
    openapi_protobuf: OnceLock<Bytes>,
    /// `/openapi/v3` documents by path (`apis/apps/v1`), built on first use.
    openapi_v3: Mutex<HashMap<String, Bytes>>,
    /// Aggregated discovery documents (JSON) and their ETags, by
    /// (`/api` rather than `/apis`, apidiscovery version), built on first use.
    discovery: Mutex<HashMap<(bool, String), (Bytes, String)>>,
}

impl Snapshot {
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<Resource>> {
        self.entries.get(&key(group, version, plural))
    }

    /// The descriptions alone (discovery, OpenAPI).
    pub fn infos(&self) -> &Registry {
        &self.infos
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.entries.values()
    }

    /// The aggregated discovery document of `/api` (`core`) or `/apis` in
    /// apidiscovery `version`, as JSON, and its ETag; built once per
    /// snapshot (with a thousand CRDs building it takes tens of ms).
    pub fn aggregated_discovery(&self, core: bool, version: &str) -> (Bytes, String) {
        let key = (core, version.to_string());
        if let Some(doc) = self.discovery.lock().expect("lock").get(&key) {
            return doc.clone();
        }
        let doc = wasm_apiserver_api::discovery::aggregated(&self.infos, core, version);
        let body = serde_json::to_vec(&doc).expect("JSON");
        let etag = format!("\"{}\"", content_hash(&body));
        let entry = (Bytes::from(body), etag);
        self.discovery
            .lock()
            .expect("lock")
            .insert(key, entry.clone());
        entry
    }

    /// The OpenAPI v2 document of this snapshot as JSON, built once.
    pub fn openapi_v2(&self) -> Bytes {
        self.openapi().clone()
    }

    /// The same document as gnostic protobuf (kubectl 1.27 and 1.28).
    pub fn openapi_v2_protobuf(&self) -> Bytes {
        self.openapi_protobuf
            .get_or_init(|| {
                let doc: Value = serde_json::from_slice(self.openapi()).expect("own JSON");
                wasm_apiserver_api::openapi::proto::encode_v2(&doc).into()
            })
            .clone()
    }

    /// The `/openapi/v3/<path>` document (`path` as `api/v1` or
    /// `apis/<group>/<version>`), built once per snapshot; `None` for a
    /// group version that is not served.
    pub fn openapi_v3(&self, path: &str) -> Option<Bytes> {
        if let Some(doc) = self.openapi_v3.lock().expect("lock").get(path) {
            return Some(doc.clone());
        }
        let (group, version) = wasm_apiserver_api::openapi::v3_group_version(&self.infos, path)?;
        let doc = wasm_apiserver_api::openapi::openapi_v3(
            &self.infos,
            group,
            version,
            wasm_apiserver_api::KUBERNETES_VERSION,
        );
        let bytes = Bytes::from(doc);
        self.openapi_v3
            .lock()
            .expect("lock")
            .insert(path.to_string(), bytes.clone());
        Some(bytes)
    }

    fn openapi(&self) -> &Bytes {
        self.openapi.get_or_init(|| {
            wasm_apiserver_api::openapi::openapi_v2(
                &self.infos,
                wasm_apiserver_api::KUBERNETES_VERSION,
            )
            .into()
        })
    }
}

/// A short hash of a served document, in hex (ETags).
fn content_hash(bytes: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    format!("{:016X}", h.finish())
}

/// The live registry: lock-free reads of the current [`Snapshot`]; writers
/// build the next one and swap it in.
#[derive(Default)]
pub struct Resources {
    current: ArcSwap<Snapshot>,
    /// Serializes writers (readers never wait).
    write: Mutex<()>,
}

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    /// The current snapshot; hold it for the whole request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.current.load().get(group, version, plural).cloned()
    }

    /// The built-in resource `group/version/plural`; a missing one is a bug.
    pub fn builtin(&self, group: &str, version: &str, plural: &str) -> Arc<Resource> {
        self.get(group, version, plural)
            .unwrap_or_else(|| panic!("{plural}.{group}/{version} is built in"))
    }

    /// Adds or replaces resources, in one swap.
    pub fn insert_all(&self, resources: impl IntoIterator<Item = Resource>) {
        self.modify(|entries| {
            for r in resources {
                entries.insert(key(&r.group, &r.version, &r.plural), Arc::new(r));
            }
        });
    }

    /// Adds or replaces one resource.
    pub fn insert(&self, resource: Resource) {
        self.insert_all([resource]);
    }

    /// Changes one resource in place (e.g. adds a REST object); false when
    /// it does not exist.
    pub fn update(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        change: impl FnOnce(Resource) -> Resource,
    ) -> bool {
        let mut found = false;
        self.modify(|entries| {
            let k = key(group, version, plural);
            if let Some(cur) = entries.get(&k) {
                let next = change(Resource::clone(cur));
                entries.insert(k, Arc::new(next));
                found = true;
            }
        });
        found
    }

    /// Removes a resource; its stored objects stay in storage.
    pub fn remove(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        let mut removed = None;
        self.modify(|entries| removed = entries.remove(&key(group, version, plural)));
        removed
    }

    fn modify(&self, f: impl FnOnce(&mut BTreeMap<Key, Arc<Resource>>)) {
        let _writer = self.write.lock().expect("registry writer lock");
        let mut entries = self.current.load().entries.clone();
        f(&mut entries);
        let mut infos = Registry::default();
        for r in entries.values() {
            infos.insert(r.info.clone());
        }
        self.current.store(Arc::new(Snapshot {
            entries,
            infos,
            openapi: OnceLock::new(),
            openapi_protobuf: OnceLock::new(),
            openapi_v3: Mutex::new(HashMap::new()),
            discovery: Mutex::new(HashMap::new()),
        }));
    }
}
