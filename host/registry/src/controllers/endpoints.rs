//! kube-controller-manager's **endpoints** (`endpoints-controller`, as the
//! ServiceAccount `endpoint-controller`) and **EndpointSlice**
//! (`endpointslice-controller`) controllers: for every Service with a
//! selector, the Endpoints of the same name and the Service's
//! EndpointSlices (labelled `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`,
//! owned by the Service) list the pods it selects, with what
//! `wasm_apiserver_api::endpoints` decides.
//!
//! One set of followers (Services, Pods, Nodes for zones, and the slices
//! themselves, so that a slice someone else changes or deletes is put
//! back) fills a cache both read; keys are Services (`namespace`, `name`).
//! A pod's change queues the Services of its namespace that select it
//! before or after, and only when what endpoints show of it changed (its
//! IP, readiness, labels, node, phase, deletion). A sync reads the
//! controller's own Endpoints or slices through its client (never a stale
//! cache, so a slice is never made twice) and writes only what differs.
//! Endpoints of a deleted Service are deleted; its slices go with it by
//! their owner reference (the garbage collector).
//!
//! Left out: `endpointslicemirroring-controller` (slices for Endpoints
//! written by hand for Services without a selector), dual-stack slices
//! (IPv6 addresses), topology hints, and the
//! `endpoints.kubernetes.io/last-change-trigger-time` annotation.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key};
use crate::options::{ListParams, Preconditions};
use crate::resources::Resource;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use wasm_apiserver_api::endpoints::{self as ep, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, MANAGED_BY};
use wasm_apiserver_api::selector::LabelSelector;
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The endpoints controller's `--controllers` name.
pub const ENDPOINTS: &str = "endpoints-controller";
/// Its identity (upstream's ServiceAccount and role name).
pub const ENDPOINTS_SA: &str = "endpoint-controller";
/// The EndpointSlice controller's `--controllers` name and identity.
pub const SLICES: &str = "endpointslice-controller";

type Key = (String, String);

#[derive(Default)]
struct Cache {
    services: HashMap<Key, Value>,
    pods: HashMap<Key, Value>,
    /// Namespace → names of its pods.
    pods_by_ns: HashMap<String, BTreeSet<String>>,
    /// Node → `topology.kubernetes.io/zone`.
    zones: HashMap<String, String>,
}

impl Cache {
    fn set_pod(&mut self, key: Key, pod: Option<Value>) {
        match pod {
            Some(p) => {
                self.pods_by_ns
                    .entry(key.0.clone())
                    .or_default()
                    .insert(key.1.clone());
                self.pods.insert(key, p);
            }
            None => {
                self.pods.remove(&key);
                if let Some(set) = self.pods_by_ns.get_mut(&key.0) {
                    set.remove(&key.1);
                    if set.is_empty() {
                        self.pods_by_ns.remove(&key.0);
                    }
                }
            }
        }
    }

    /// The pods of `service`'s namespace it selects.
    fn selected(&self, service: &Value) -> Vec<Value> {
        let ns = meta::namespace(service).unwrap_or_default();
        self.pods_by_ns
            .get(ns)
            .into_iter()
            .flatten()
            .filter_map(|name| self.pods.get(&(ns.to_string(), name.clone())))
            .filter(|p| ep::selected(service, p))
            .cloned()
            .collect()
    }

    /// Services of `ns` that select any of `pods`.
    fn services_of(&self, ns: &str, pods: &[&Value]) -> Vec<Key> {
        self.services
            .iter()
            .filter(|((n, _), svc)| n == ns && pods.iter().any(|p| ep::selected(svc, p)))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// What endpoints show of a pod: a change elsewhere (another status
/// field, an annotation) queues nothing.
fn endpoint_view(pod: &Value) -> Value {
    json!([
        pod["metadata"]["labels"],
        pod["metadata"]["deletionTimestamp"],
        pod["metadata"]["uid"],
        pod["spec"]["nodeName"],
        pod["spec"]["hostname"],
        pod["spec"]["subdomain"],
        pod["status"]["podIP"],
        pod["status"]["phase"],
        ep::pod_condition(pod, "Ready"),
    ])
}

/// The endpoints controller.
struct Endpoints {
    client: Client,
    cache: Arc<Mutex<Cache>>,
    info: Arc<Resource>,
}

#[async_trait::async_trait]
impl Reconcile for Endpoints {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        let (service, pods) = {
            let c = lock(&self.cache);
            match c.services.get(key) {
                Some(s) => (Some(s.clone()), c.selected(s)),
                None => (None, Vec::new()),
            }
        };
        let Some(service) = service else {
            // The Service is gone: so are its Endpoints.
            return match self
                .client
                .delete(&self.info, Some(ns), name, &Preconditions::default())
                .await
            {
                Ok(_) | Err(ApiError::NotFound(_)) => Ok(Action::Done),
                Err(e) => Err(e),
            };
        };
        if !ep::selects_pods(&service) {
            // Endpoints of a Service without a selector are someone else's.
            return Ok(Action::Done);
        }
        let refs: Vec<&Value> = pods.iter().collect();
        let desired = ep::endpoints(&service, &refs);
        match self.client.get(&self.info, Some(ns), name).await {
            Ok(current) if ep::endpoints_equal(&current, &desired) => Ok(Action::Done),
            Ok(current) => {
                let mut new = desired;
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
                // Annotations others set stay; ours follows the capacity.
                let mut annotations = current["metadata"]["annotations"].clone();
                if let Some(a) = annotations.as_object_mut() {
                    a.remove(ep::ANNOTATION_OVER_CAPACITY);
                }
                if let Some(over) = new["metadata"]["annotations"][ep::ANNOTATION_OVER_CAPACITY]
                    .as_str()
                    .map(String::from)
                {
                    annotations[ep::ANNOTATION_OVER_CAPACITY] = json!(over);
                }
                new["metadata"]["annotations"] = annotations;
                self.client
                    .replace(&self.info, Some(ns), name, None, new)
                    .await?;
                Ok(Action::Done)
            }
            Err(ApiError::NotFound(_)) => {
                self.client.create(&self.info, Some(ns), desired).await?;
                Ok(Action::Done)
            }
            Err(e) => Err(e),
        }
    }
}

/// The EndpointSlice controller.
struct Slices {
    client: Client,
    cache: Arc<Mutex<Cache>>,
    info: Arc<Resource>,
}

#[async_trait::async_trait]
impl Reconcile for Slices {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        let (service, pods, zones) = {
            let c = lock(&self.cache);
            match c.services.get(key) {
                Some(s) => (Some(s.clone()), c.selected(s), c.zones.clone()),
                None => (None, Vec::new(), HashMap::new()),
            }
        };
        // A deleted Service's slices go with it (owner references).
        let Some(service) = service.filter(ep::selects_pods) else {
            return Ok(Action::Done);
        };
        let existing = managed_slices(&self.client, &self.info, ns, name, MANAGED_BY).await?;
        let refs: Vec<&Value> = pods.iter().collect();
        let desired = ep::slice_endpoints(&service, &refs, |node| zones.get(node).cloned());
        let plan = ep::plan_slices(&service, &existing, desired, ep::MAX_ENDPOINTS_PER_SLICE);
        apply_slice_plan(&self.client, &self.info, ns, plan).await?;
        Ok(Action::Done)
    }
}

/// The slices of Service `name` that `managed_by` keeps, read through the
/// client (never a cache, so a slice is never made twice).
pub(super) async fn managed_slices(
    client: &Client,
    info: &Resource,
    ns: &str,
    name: &str,
    managed_by: &str,
) -> Result<Vec<Value>> {
    let selector = LabelSelector::parse(&format!(
        "{LABEL_SERVICE_NAME}={name},{LABEL_MANAGED_BY}={managed_by}"
    ))
    .map_err(ApiError::BadRequest)?;
    let params = ListParams {
        labels: selector,
        ..Default::default()
    };
    Ok(client.list(info, Some(ns), &params).await?.items)
}

/// Writes a slice plan: updates, then creates, then deletes (a slice
/// already gone is fine).
pub(super) async fn apply_slice_plan(
    client: &Client,
    info: &Resource,
    ns: &str,
    plan: ep::SlicePlan,
) -> Result<()> {
    for slice in plan.update {
        let slice_name = meta::name(&slice).unwrap_or_default().to_string();
        client
            .replace(info, Some(ns), &slice_name, None, slice)
            .await?;
    }
    for slice in plan.create {
        client.create(info, Some(ns), slice).await?;
    }
    for slice_name in plan.delete {
        match client
            .delete(info, Some(ns), &slice_name, &Preconditions::default())
            .await
        {
            Ok(_) | Err(ApiError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs the controllers given a client while this replica leads.
pub fn spawn(
    endpoints: Option<Client>,
    slices: Option<Client>,
    leadership: Leadership,
    metrics: &Metrics,
) {
    if endpoints.is_none() && slices.is_none() {
        return;
    }
    let endpoints_q: Arc<Queue<Key>> = Queue::new("endpoint");
    let slices_q: Arc<Queue<Key>> = Queue::new("endpoint_slice");
    if endpoints.is_some() {
        metrics.register(endpoints_q.clone());
    }
    if slices.is_some() {
        metrics.register(slices_q.clone());
    }
    tokio::spawn(leadership.run_while_leading(move || {
        let cache: Arc<Mutex<Cache>> = Default::default();
        let objects = endpoints
            .as_ref()
            .or(slices.as_ref())
            .expect("one client at least")
            .objects
            .clone();
        let endpoints = endpoints.clone().map(|client| {
            Arc::new(Endpoints {
                info: client.objects.resources.builtin("", "v1", "endpoints"),
                client,
                cache: cache.clone(),
            })
        });
        let slices = slices.clone().map(|client| {
            Arc::new(Slices {
                info: client
                    .objects
                    .resources
                    .builtin("discovery.k8s.io", "v1", "endpointslices"),
                client,
                cache: cache.clone(),
            })
        });
        let (eq, sq) = (endpoints_q.clone(), slices_q.clone());
        let (on_e, on_s) = (endpoints.is_some(), slices.is_some());
        let queue = move |key: Key| {
            if on_e {
                eq.add(key.clone());
            }
            if on_s {
                sq.add(key);
            }
        };
        // Workers start once Services, Pods and Nodes have been listed
        // (client-go's `WaitForCacheSync`): no Endpoints are written from a
        // half-filled cache.
        let (listed_tx, listed_rx) = tokio::sync::watch::channel(0usize);
        let listed_tx = Arc::new(listed_tx);
        let (l1, l2, l3) = (listed_tx.clone(), listed_tx.clone(), listed_tx);
        let (endpoints_q, slices_q) = (endpoints_q.clone(), slices_q.clone());
        async move {
            let services = objects.resources.builtin("", "v1", "services");
            let (c1, c2, q1, q2) = (cache.clone(), cache.clone(), queue.clone(), queue.clone());
            let follow_services = objects.follow(
                &services,
                move |listed| {
                    l1.send_modify(|n| *n += 1);
                    let mut c = lock(&c1);
                    let names: BTreeSet<Key> = listed.iter().map(namespaced_key).collect();
                    let gone: Vec<Key> = c
                        .services
                        .keys()
                        .filter(|k| !names.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        c.services.remove(&k);
                        q1(k);
                    }
                },
                move |svc, deleted| {
                    let key = namespaced_key(&svc);
                    {
                        let mut c = lock(&c2);
                        if deleted {
                            c.services.remove(&key);
                        } else {
                            c.services.insert(key.clone(), svc);
                        }
                    }
                    q2(key);
                    async {}
                },
            );
            let pods = objects.resources.builtin("", "v1", "pods");
            let (c3, c4, q3) = (cache.clone(), cache.clone(), queue.clone());
            let follow_pods = objects.follow(
                &pods,
                move |_| {
                    l2.send_modify(|n| *n += 1);
                    let mut c = lock(&c3);
                    c.pods.clear();
                    c.pods_by_ns.clear();
                },
                move |pod, deleted| {
                    let key = namespaced_key(&pod);
                    let services = {
                        let mut c = lock(&c4);
                        let old = c.pods.get(&key).cloned();
                        let changed = deleted
                            || old
                                .as_ref()
                                .is_none_or(|o| endpoint_view(o) != endpoint_view(&pod));
                        let services = if changed {
                            let mut both: Vec<&Value> = vec![&pod];
                            if let Some(o) = &old {
                                both.push(o);
                            }
                            c.services_of(&key.0, &both)
                        } else {
                            Vec::new()
                        };
                        c.set_pod(key, (!deleted).then_some(pod));
                        services
                    };
                    for s in services {
                        q3(s);
                    }
                    async {}
                },
            );
            let nodes = objects.resources.builtin("", "v1", "nodes");
            let (c5, c6, q4) = (cache.clone(), cache.clone(), queue.clone());
            let follow_nodes = objects.follow(
                &nodes,
                move |_| {
                    l3.send_modify(|n| *n += 1);
                    lock(&c5).zones.clear();
                },
                move |node, deleted| {
                    let name = meta::name(&node).unwrap_or_default().to_string();
                    let zone = node["metadata"]["labels"]["topology.kubernetes.io/zone"]
                        .as_str()
                        .filter(|_| !deleted)
                        .map(String::from);
                    let requeue = {
                        let mut c = lock(&c6);
                        let before = c.zones.get(&name).cloned();
                        match &zone {
                            Some(z) => c.zones.insert(name.clone(), z.clone()),
                            None => c.zones.remove(&name),
                        };
                        if before != zone {
                            // Services with endpoints on that node.
                            let on_node: Vec<&Value> = c
                                .pods
                                .values()
                                .filter(|p| p["spec"]["nodeName"] == name.as_str())
                                .collect();
                            let mut keys = BTreeSet::new();
                            for p in on_node {
                                let ns = meta::namespace(p).unwrap_or_default();
                                keys.extend(c.services_of(ns, &[p]));
                            }
                            keys.into_iter().collect()
                        } else {
                            Vec::new()
                        }
                    };
                    for k in requeue {
                        q4(k);
                    }
                    async {}
                },
            );
            // The controller's own slices: one changed or deleted by
            // someone else is put back.
            let slice_info = objects
                .resources
                .builtin("discovery.k8s.io", "v1", "endpointslices");
            let sq2 = slices_q.clone();
            let follow_slices = async {
                if on_s {
                    objects
                        .follow(
                            &slice_info,
                            |_| {},
                            move |slice, _deleted| {
                                let labels = &slice["metadata"]["labels"];
                                if labels[LABEL_MANAGED_BY] == MANAGED_BY
                                    && let Some(svc) = labels[LABEL_SERVICE_NAME].as_str()
                                {
                                    sq2.add((
                                        meta::namespace(&slice).unwrap_or_default().to_string(),
                                        svc.to_string(),
                                    ));
                                }
                                async {}
                            },
                        )
                        .await;
                }
            };
            let mut synced = listed_rx.clone();
            let mut synced2 = listed_rx;
            let run_endpoints = async {
                let _ = synced.wait_for(|n| *n >= 3).await;
                if let Some(e) = endpoints {
                    super::run(endpoints_q.clone(), e, 2).await;
                }
            };
            let run_slices = async {
                let _ = synced2.wait_for(|n| *n >= 3).await;
                if let Some(s) = slices {
                    super::run(slices_q.clone(), s, 2).await;
                }
            };
            tokio::join!(
                follow_services,
                follow_pods,
                follow_nodes,
                follow_slices,
                run_endpoints,
                run_slices
            );
        }
    }));
}
