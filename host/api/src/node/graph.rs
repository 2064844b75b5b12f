//! The Node authorizer's graph (upstream's `plugin/pkg/auth/authorizer/node/graph.go`,
//! reshaped): which objects each node may reach through the pods bound to
//! it.
//!
//! Upstream keeps a general graph of vertices and edges and walks it. The
//! edges it has are few and fixed (pod → node; secret, configmap, PVC,
//! service account, resource claim → pod; PV → PVC; secret → PV), so here
//! each bound pod records what it references, and every referenced object
//! keeps a count per node of the pods that reach it: a check is two hash
//! lookups, adding or removing a pod touches only its own references, and
//! memory is proportional to the references of bound pods (nothing is kept
//! for unbound pods or unreferenced objects). Node names and references
//! are interned to `u32` ids, so a pod holds ids, not strings (the
//! `node-graph-heap` bench: 1,000 nodes and 10,000 pods in
//! `benches/node/fixture.rs`).

use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The kinds of object a node can reach through its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Secret,
    ConfigMap,
    PersistentVolumeClaim,
    ServiceAccount,
    ResourceClaim,
}

/// What one bound pod references.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRefs {
    pub node: String,
    pub secrets: BTreeSet<String>,
    pub configmaps: BTreeSet<String>,
    pub pvcs: BTreeSet<String>,
    pub service_account: Option<String>,
    pub resource_claims: BTreeSet<String>,
}

impl PodRefs {
    /// The references of a Pod object, or `None` when it is not bound to a
    /// node (upstream's populator ignores unbound pods). Resource claims
    /// are the names in `status.resourceClaimStatuses`, as upstream takes
    /// them.
    pub fn of(pod: &Value) -> Option<PodRefs> {
        let spec = &pod["spec"];
        let node = spec["nodeName"].as_str().filter(|n| !n.is_empty())?;
        let mut r = PodRefs {
            node: node.to_string(),
            ..Default::default()
        };
        let add = |set: &mut BTreeSet<String>, v: &Value| {
            if let Some(n) = v.as_str().filter(|n| !n.is_empty()) {
                set.insert(n.to_string());
            }
        };
        for s in spec["imagePullSecrets"].as_array().into_iter().flatten() {
            add(&mut r.secrets, &s["name"]);
        }
        let containers = ["initContainers", "containers", "ephemeralContainers"]
            .iter()
            .flat_map(|k| spec[*k].as_array().into_iter().flatten());
        for c in containers {
            for e in c["envFrom"].as_array().into_iter().flatten() {
                add(&mut r.secrets, &e["secretRef"]["name"]);
                add(&mut r.configmaps, &e["configMapRef"]["name"]);
            }
            for e in c["env"].as_array().into_iter().flatten() {
                add(&mut r.secrets, &e["valueFrom"]["secretKeyRef"]["name"]);
                add(
                    &mut r.configmaps,
                    &e["valueFrom"]["configMapKeyRef"]["name"],
                );
            }
        }
        for v in spec["volumes"].as_array().into_iter().flatten() {
            add(&mut r.secrets, &v["secret"]["secretName"]);
            add(&mut r.configmaps, &v["configMap"]["name"]);
            add(&mut r.pvcs, &v["persistentVolumeClaim"]["claimName"]);
            for p in v["projected"]["sources"].as_array().into_iter().flatten() {
                add(&mut r.secrets, &p["secret"]["name"]);
                add(&mut r.configmaps, &p["configMap"]["name"]);
            }
            // Volume plugins that name a secret directly.
            for plugin in [
                "azureFile",
                "cephfs",
                "cinder",
                "flexVolume",
                "iscsi",
                "rbd",
                "scaleIO",
                "storageos",
                "csi",
            ] {
                let p = &v[plugin];
                add(&mut r.secrets, &p["secretRef"]["name"]);
                add(&mut r.secrets, &p["nodePublishSecretRef"]["name"]);
            }
            add(&mut r.secrets, &v["azureFile"]["secretName"]);
            // A generic ephemeral volume's claim is `<pod>-<volume>`.
            if v["ephemeral"].is_object()
                && let (Some(pod), Some(vol)) =
                    (pod["metadata"]["name"].as_str(), v["name"].as_str())
            {
                r.pvcs.insert(format!("{pod}-{vol}"));
            }
        }
        r.service_account = spec["serviceAccountName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(String::from);
        for c in pod["status"]["resourceClaimStatuses"]
            .as_array()
            .into_iter()
            .flatten()
        {
            add(&mut r.resource_claims, &c["resourceClaimName"]);
        }
        Some(r)
    }

    /// The keys of what the pod reaches, its own first.
    fn keys(&self, ns: &str, pod: &str) -> Vec<String> {
        let mut out = vec![ref_key(Kind::Pod, ns, pod)];
        let sets = [
            (Kind::Secret, &self.secrets),
            (Kind::ConfigMap, &self.configmaps),
            (Kind::PersistentVolumeClaim, &self.pvcs),
            (Kind::ResourceClaim, &self.resource_claims),
        ];
        for (kind, set) in sets {
            out.extend(set.iter().map(|n| ref_key(kind, ns, n)));
        }
        if let Some(sa) = &self.service_account {
            out.push(ref_key(Kind::ServiceAccount, ns, sa));
        }
        out
    }
}

/// A namespaced reference as one string: the kind's letter, then
/// `<namespace>/<name>` (neither may hold a `/`, so keys cannot collide).
fn ref_key(kind: Kind, ns: &str, name: &str) -> String {
    let tag = match kind {
        Kind::Pod => 'p',
        Kind::Secret => 's',
        Kind::ConfigMap => 'c',
        Kind::PersistentVolumeClaim => 'v',
        Kind::ServiceAccount => 'a',
        Kind::ResourceClaim => 'r',
    };
    let mut k = String::with_capacity(ns.len() + name.len() + 2);
    k.push(tag);
    k.push_str(ns);
    k.push('/');
    k.push_str(name);
    k
}

/// What a PersistentVolume references: the claim bound to it and the
/// secrets its volume source names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PvRefs {
    /// `spec.claimRef` (namespace, name).
    pub claim: Option<(String, String)>,
    /// (namespace, name) of secrets named by the volume source.
    pub secrets: BTreeSet<(String, String)>,
}

impl PvRefs {
    pub fn of(pv: &Value) -> PvRefs {
        let spec = &pv["spec"];
        let claim = match (
            spec["claimRef"]["namespace"].as_str(),
            spec["claimRef"]["name"].as_str(),
        ) {
            (Some(ns), Some(n)) if !ns.is_empty() && !n.is_empty() => {
                Some((ns.to_string(), n.to_string()))
            }
            _ => None,
        };
        let mut secrets = BTreeSet::new();
        let default_ns = claim.as_ref().map(|(ns, _)| ns.as_str()).unwrap_or("");
        let mut add = |r: &Value| {
            if let Some(n) = r["name"].as_str().filter(|n| !n.is_empty()) {
                let ns = r["namespace"].as_str().unwrap_or(default_ns);
                secrets.insert((ns.to_string(), n.to_string()));
            }
        };
        for plugin in [
            "azureFile",
            "cephfs",
            "cinder",
            "flexVolume",
            "iscsi",
            "rbd",
            "scaleIO",
            "storageos",
        ] {
            add(&spec[plugin]["secretRef"]);
        }
        for key in [
            "controllerPublishSecretRef",
            "nodeStageSecretRef",
            "nodePublishSecretRef",
            "controllerExpandSecretRef",
            "nodeExpandSecretRef",
        ] {
            add(&spec["csi"][key]);
        }
        PvRefs { claim, secrets }
    }
}

/// `(node id, pods of that node reaching the object)` pairs.
type Reach = Vec<(u32, u32)>;

/// Which node reaches what.
///
/// Names are interned: each node and each referenced object has a small
/// id while some bound pod needs it (and is forgotten when none does), so
/// a pod costs its own entry, its node id and one `u32` per reference, and
/// a shared object (a Deployment's Secret) one count per node that runs
/// its pods.
#[derive(Debug, Default)]
pub struct NodeGraph {
    /// Node name → id.
    node_ids: HashMap<Arc<str>, u32>,
    /// By id: the name and how many bound pods the node has (`None`: free).
    nodes: Vec<Option<(Arc<str>, u32)>>,
    free_nodes: Vec<u32>,
    /// Reference key ([`ref_key`]) → id.
    ref_ids: HashMap<Arc<str>, u32>,
    /// By id: the key, and for each node id how many of its pods reach the
    /// object (`None`: free).
    refs: Vec<Option<(Arc<str>, Reach)>>,
    free_refs: Vec<u32>,
    /// Bound pods by the id of their own reference: node id, and the ids
    /// of what they reach (their own first).
    pods: HashMap<u32, (u32, Box<[u32]>)>,
    /// PersistentVolumes by name.
    pvs: HashMap<String, PvRefs>,
    /// PVC (namespace, name) → the PV bound to it (`spec.volumeName`).
    pvc_volume: HashMap<(String, String), String>,
    /// Secret (namespace, name) → PVs whose source names it.
    secret_pvs: HashMap<(String, String), BTreeSet<String>>,
}

/// Takes a slot for `key` in an interned table.
fn intern<T>(
    ids: &mut HashMap<Arc<str>, u32>,
    slots: &mut Vec<Option<(Arc<str>, T)>>,
    free: &mut Vec<u32>,
    key: &str,
    empty: impl FnOnce() -> T,
) -> u32 {
    if let Some(&id) = ids.get(key) {
        return id;
    }
    let key: Arc<str> = Arc::from(key);
    let slot = Some((key.clone(), empty()));
    let id = match free.pop() {
        Some(id) => {
            slots[id as usize] = slot;
            id
        }
        None => {
            slots.push(slot);
            (slots.len() - 1) as u32
        }
    };
    ids.insert(key, id);
    id
}

/// Gives back the slot `id` of an interned table.
fn release<T>(
    ids: &mut HashMap<Arc<str>, u32>,
    slots: &mut [Option<(Arc<str>, T)>],
    free: &mut Vec<u32>,
    id: u32,
) {
    if let Some((key, _)) = slots[id as usize].take() {
        ids.remove(&key);
        free.push(id);
    }
}

impl NodeGraph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bound pods the graph holds.
    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    /// Records a pod (added or changed); an unbound pod is removed.
    pub fn set_pod(&mut self, ns: &str, name: &str, refs: Option<PodRefs>) {
        let Some(r) = refs else {
            return self.delete_pod(ns, name);
        };
        let keys = r.keys(ns, name);
        // Unchanged (most pod events are status updates): nothing to do.
        if let (Some(&node), Some(&own)) = (
            self.node_ids.get(r.node.as_str()),
            self.ref_ids.get(keys[0].as_str()),
        ) && let Some((n, ids)) = self.pods.get(&own)
            && *n == node
            && ids.len() == keys.len()
            && keys
                .iter()
                .zip(ids.iter())
                .all(|(k, id)| self.ref_ids.get(k.as_str()) == Some(id))
        {
            return;
        }
        self.delete_pod(ns, name);
        let node = intern(
            &mut self.node_ids,
            &mut self.nodes,
            &mut self.free_nodes,
            &r.node,
            || 0,
        );
        if let Some((_, pods)) = &mut self.nodes[node as usize] {
            *pods += 1;
        }
        let mut ids = Vec::with_capacity(keys.len());
        for k in &keys {
            let id = intern(
                &mut self.ref_ids,
                &mut self.refs,
                &mut self.free_refs,
                k,
                Vec::new,
            );
            if let Some((_, reach)) = &mut self.refs[id as usize] {
                match reach.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, c)) => *c += 1,
                    None => {
                        // Most objects are reached from one node or a
                        // few: grow by half, not double.
                        if reach.len() == reach.capacity() {
                            reach.reserve_exact((reach.len() / 2).max(1));
                        }
                        reach.push((node, 1));
                    }
                }
            }
            ids.push(id);
        }
        self.pods.insert(ids[0], (node, ids.into_boxed_slice()));
    }

    pub fn delete_pod(&mut self, ns: &str, name: &str) {
        let Some(&own) = self.ref_ids.get(ref_key(Kind::Pod, ns, name).as_str()) else {
            return;
        };
        let Some((node, ids)) = self.pods.remove(&own) else {
            return;
        };
        for id in ids.iter().copied() {
            let mut empty = false;
            if let Some((_, reach)) = &mut self.refs[id as usize]
                && let Some(i) = reach.iter().position(|(n, _)| *n == node)
            {
                reach[i].1 -= 1;
                if reach[i].1 == 0 {
                    reach.swap_remove(i);
                    if reach.capacity() > 2 * reach.len() + 1 {
                        reach.shrink_to_fit();
                    }
                }
                empty = reach.is_empty();
            }
            if empty {
                release(&mut self.ref_ids, &mut self.refs, &mut self.free_refs, id);
            }
        }
        let mut gone = false;
        if let Some((_, pods)) = &mut self.nodes[node as usize] {
            *pods -= 1;
            gone = *pods == 0;
        }
        if gone {
            release(
                &mut self.node_ids,
                &mut self.nodes,
                &mut self.free_nodes,
                node,
            );
        }
    }

    /// Forgets every pod (before a relist).
    pub fn clear_pods(&mut self) {
        self.pods.clear();
        self.ref_ids.clear();
        self.refs.clear();
        self.free_refs.clear();
        self.node_ids.clear();
        self.nodes.clear();
        self.free_nodes.clear();
    }

    /// Records a PVC's bound volume (`spec.volumeName`, `None` if unbound).
    pub fn set_pvc(&mut self, ns: &str, name: &str, volume: Option<&str>) {
        let key = (ns.to_string(), name.to_string());
        match volume.filter(|v| !v.is_empty()) {
            Some(v) => {
                self.pvc_volume.insert(key, v.to_string());
            }
            None => {
                self.pvc_volume.remove(&key);
            }
        }
    }

    pub fn clear_pvcs(&mut self) {
        self.pvc_volume.clear();
    }

    /// Records a PV (added or changed), or forgets it (`None`).
    pub fn set_pv(&mut self, name: &str, refs: Option<PvRefs>) {
        if let Some(old) = self.pvs.remove(name) {
            for s in &old.secrets {
                if let Some(set) = self.secret_pvs.get_mut(s) {
                    set.remove(name);
                    if set.is_empty() {
                        self.secret_pvs.remove(s);
                    }
                }
            }
        }
        if let Some(r) = refs {
            for s in &r.secrets {
                self.secret_pvs
                    .entry(s.clone())
                    .or_default()
                    .insert(name.to_string());
            }
            self.pvs.insert(name.to_string(), r);
        }
    }

    pub fn clear_pvs(&mut self) {
        self.pvs.clear();
        self.secret_pvs.clear();
    }

    fn reaches(&self, node: &str, kind: Kind, ns: &str, name: &str) -> bool {
        let Some(&node) = self.node_ids.get(node) else {
            return false;
        };
        self.ref_ids
            .get(ref_key(kind, ns, name).as_str())
            .and_then(|&id| self.refs[id as usize].as_ref())
            .is_some_and(|(_, reach)| reach.iter().any(|(n, _)| *n == node))
    }

    /// Whether a pod bound to `node` reaches the PV `name`: through the
    /// claim the PV is bound to, when that claim is bound back to the PV.
    pub fn reaches_pv(&self, node: &str, name: &str) -> bool {
        let Some(pv) = self.pvs.get(name) else {
            return false;
        };
        let Some((ns, claim)) = &pv.claim else {
            return false;
        };
        self.pvc_volume
            .get(&(ns.clone(), claim.clone()))
            .is_some_and(|v| v == name)
            && self.reaches(node, Kind::PersistentVolumeClaim, ns, claim)
    }

    /// Whether `node` reaches the namespaced object `kind` `ns/name`.
    pub fn has_path(&self, node: &str, kind: Kind, ns: &str, name: &str) -> bool {
        if self.reaches(node, kind, ns, name) {
            return true;
        }
        kind == Kind::Secret
            && self
                .secret_pvs
                .get(&(ns.to_string(), name.to_string()))
                .is_some_and(|pvs| pvs.iter().any(|pv| self.reaches_pv(node, pv)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": "sa",
                "imagePullSecrets": [{"name": "pull"}],
                "containers": [{
                    "name": "c",
                    "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-s", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "env-cm"}}],
                }],
                "volumes": [
                    {"name": "a", "secret": {"secretName": "s1"}},
                    {"name": "b", "configMap": {"name": "c1"}},
                    {"name": "c", "persistentVolumeClaim": {"claimName": "claim"}},
                    {"name": "d", "projected": {"sources": [{"secret": {"name": "proj"}}]}},
                    {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}},
                ],
            },
        })
    }

    #[test]
    fn a_bound_pod_reaches_what_it_references() {
        let mut g = NodeGraph::new();
        g.set_pod("ns", "p", PodRefs::of(&pod("a")));
        for (kind, name) in [
            (Kind::Pod, "p"),
            (Kind::Secret, "s1"),
            (Kind::Secret, "pull"),
            (Kind::Secret, "env-s"),
            (Kind::Secret, "proj"),
            (Kind::ConfigMap, "c1"),
            (Kind::ConfigMap, "env-cm"),
            (Kind::PersistentVolumeClaim, "claim"),
            (Kind::PersistentVolumeClaim, "p-e"),
            (Kind::ServiceAccount, "sa"),
        ] {
            assert!(g.has_path("a", kind, "ns", name), "{kind:?} {name}");
            assert!(!g.has_path("b", kind, "ns", name), "{kind:?} {name} from b");
            assert!(
                !g.has_path("a", kind, "other", name),
                "{kind:?} {name} in other"
            );
        }
        assert!(!g.has_path("a", Kind::Secret, "ns", "s2"));
        assert!(!g.has_path("a", Kind::Secret, "ns", "c1"));
    }

    #[test]
    fn unbound_pods_reach_nothing_and_deletion_removes_access() {
        let mut g = NodeGraph::new();
        g.set_pod("ns", "p", PodRefs::of(&pod("")));
        assert_eq!(g.pods(), 0);
        g.set_pod("ns", "p", PodRefs::of(&pod("a")));
        let mut twin = pod("a");
        twin["metadata"]["name"] = json!("q");
        g.set_pod("ns", "q", PodRefs::of(&twin));
        g.delete_pod("ns", "p");
        // q still references s1.
        assert!(g.has_path("a", Kind::Secret, "ns", "s1"));
        assert!(!g.has_path("a", Kind::Pod, "ns", "p"));
        g.delete_pod("ns", "q");
        assert!(!g.has_path("a", Kind::Secret, "ns", "s1"));
        assert!(
            g.ref_ids.is_empty() && g.node_ids.is_empty() && g.pods.is_empty(),
            "no leftovers: {g:?}"
        );
    }

    #[test]
    fn a_pod_moving_or_changing_its_references_moves_access() {
        let mut g = NodeGraph::new();
        g.set_pod("ns", "p", PodRefs::of(&pod("a")));
        let mut moved = pod("b");
        moved["spec"]["volumes"][0]["secret"]["secretName"] = json!("s9");
        g.set_pod("ns", "p", PodRefs::of(&moved));
        assert!(!g.has_path("a", Kind::Secret, "ns", "s1"));
        assert!(!g.has_path("b", Kind::Secret, "ns", "s1"));
        assert!(g.has_path("b", Kind::Secret, "ns", "s9"));
        assert_eq!(g.pods(), 1);
    }

    #[test]
    fn persistent_volumes_and_their_secrets_through_a_bound_claim() {
        let mut g = NodeGraph::new();
        g.set_pod("ns", "p", PodRefs::of(&pod("a")));
        let pv = json!({"spec": {
            "claimRef": {"namespace": "ns", "name": "claim"},
            "csi": {"driver": "d", "volumeHandle": "h",
                    "nodePublishSecretRef": {"name": "csi-s", "namespace": "vault"}},
        }});
        g.set_pv("pv1", Some(PvRefs::of(&pv)));
        assert!(!g.reaches_pv("a", "pv1"), "the claim is not bound yet");
        g.set_pvc("ns", "claim", Some("pv1"));
        assert!(g.reaches_pv("a", "pv1"));
        assert!(!g.reaches_pv("b", "pv1"));
        assert!(g.has_path("a", Kind::Secret, "vault", "csi-s"));
        assert!(!g.has_path("b", Kind::Secret, "vault", "csi-s"));
        g.set_pv("pv1", None);
        assert!(!g.has_path("a", Kind::Secret, "vault", "csi-s"));
        assert!(g.secret_pvs.is_empty());
    }

    #[test]
    fn clearing_pods_before_a_relist() {
        let mut g = NodeGraph::new();
        g.set_pod("ns", "p", PodRefs::of(&pod("a")));
        g.clear_pods();
        assert!(!g.has_path("a", Kind::Secret, "ns", "s1"));
        assert_eq!(g.pods(), 0);
    }
}
