//! kube-controller-manager's **EndpointSliceMirroring controller**
//! (`endpointslicemirroring-controller`, also its identity): Endpoints
//! written by hand for a Service without a selector are mirrored into
//! EndpointSlices (labelled `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by:
//! endpointslicemirroring-controller.k8s.io`, owned by the Endpoints), so
//! that clients reading slices see them. What a slice holds is decided by
//! `wasm_apiserver_api::endpoints` (`should_mirror`, `mirrored_endpoints`,
//! `plan_owned_slices`).
//!
//! Keys are Endpoints (`namespace`, `name`), queued when the Endpoints,
//! their Service or one of the controller's own slices change. A sync
//! reads the Endpoints and Service from the followers' cache and the
//! controller's slices through its client (so none is made twice), and
//! writes only what differs. Slices of Endpoints that stop being mirrored
//! (the Service is gone or got a selector, `skip-mirror` was set) are
//! deleted; slices of deleted Endpoints go by their owner reference.
//! Left out: the `endpoints.kubernetes.io/over-capacity`-style warning
//! for subsets over `--mirroring-max-endpoints-per-subset` (upstream's
//! default, 1000, caps them silently here).

use super::endpoints::{apply_slice_plan, managed_slices};
use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile, lock, namespaced_key};
use crate::resources::Resource;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wasm_apiserver_api::endpoints::{
    self as ep, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, MIRRORING_MANAGED_BY,
};
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Its `--controllers` name and identity (upstream's ServiceAccount and
/// role name).
pub const NAME: &str = "endpointslicemirroring-controller";

type Key = (String, String);

#[derive(Default)]
struct Cache {
    services: HashMap<Key, Value>,
    endpoints: HashMap<Key, Value>,
}

struct Mirroring {
    client: Client,
    cache: Arc<Mutex<Cache>>,
    slices: Arc<Resource>,
}

#[async_trait::async_trait]
impl Reconcile for Mirroring {
    type Key = Key;

    async fn reconcile(&self, key: &Key) -> Result<Action> {
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        let (endpoints, service) = {
            let c = lock(&self.cache);
            (c.endpoints.get(key).cloned(), c.services.get(key).cloned())
        };
        let mirrored = match (&endpoints, &service) {
            (Some(e), Some(s)) => ep::should_mirror(e) && !ep::selects_pods(s),
            _ => false,
        };
        let existing =
            managed_slices(&self.client, &self.slices, ns, name, MIRRORING_MANAGED_BY).await?;
        let plan = match endpoints.filter(|_| mirrored) {
            Some(e) => ep::plan_owned_slices(
                &ep::mirror_owner(&e),
                &existing,
                ep::mirrored_endpoints(&e, ep::MIRRORING_MAX_ENDPOINTS_PER_SUBSET),
                ep::MAX_ENDPOINTS_PER_SLICE,
                false,
            ),
            None => ep::SlicePlan {
                delete: existing
                    .iter()
                    .filter_map(|s| meta::name(s).map(String::from))
                    .collect(),
                ..Default::default()
            },
        };
        apply_slice_plan(&self.client, &self.slices, ns, plan).await?;
        Ok(Action::Done)
    }
}

/// Runs the controller while this replica leads.
pub fn spawn(client: Client, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<Key>> = Queue::new("endpoint_slice_mirroring");
    metrics.register(queue.clone());
    tokio::spawn(leadership.run_while_leading(move || {
        let objects = client.objects.clone();
        let cache: Arc<Mutex<Cache>> = Default::default();
        let slices = objects
            .resources
            .builtin("discovery.k8s.io", "v1", "endpointslices");
        let controller = Arc::new(Mirroring {
            client: client.clone(),
            cache: cache.clone(),
            slices: slices.clone(),
        });
        let queue = queue.clone();
        async move {
            // Workers start once Services and Endpoints are listed.
            let (listed_tx, listed_rx) = tokio::sync::watch::channel(0usize);
            let listed_tx = Arc::new(listed_tx);
            // Services and Endpoints fill the cache the same way.
            let follow =
                |resource: Arc<Resource>, pick: fn(&mut Cache) -> &mut HashMap<Key, Value>| {
                    let (c1, c2, q1, q2, listed) = (
                        cache.clone(),
                        cache.clone(),
                        queue.clone(),
                        queue.clone(),
                        listed_tx.clone(),
                    );
                    let objects = objects.clone();
                    async move {
                        objects
                            .follow(
                                &resource,
                                move |items| {
                                    let mut c = lock(&c1);
                                    let map = pick(&mut c);
                                    let keys: Vec<Key> = map.keys().cloned().collect();
                                    map.clear();
                                    for item in items {
                                        map.insert(namespaced_key(item), item.clone());
                                    }
                                    // Everything known before and after.
                                    let all: Vec<Key> =
                                        keys.into_iter().chain(map.keys().cloned()).collect();
                                    drop(c);
                                    for k in all {
                                        q1.add(k);
                                    }
                                    listed.send_modify(|n| *n += 1);
                                },
                                move |obj, deleted| {
                                    let key = namespaced_key(&obj);
                                    {
                                        let mut c = lock(&c2);
                                        let map = pick(&mut c);
                                        if deleted {
                                            map.remove(&key);
                                        } else {
                                            map.insert(key.clone(), obj);
                                        }
                                    }
                                    q2.add(key);
                                    async {}
                                },
                            )
                            .await
                    }
                };
            let follow_services = follow(objects.resources.builtin("", "v1", "services"), |c| {
                &mut c.services
            });
            let follow_endpoints = follow(objects.resources.builtin("", "v1", "endpoints"), |c| {
                &mut c.endpoints
            });
            // Its own slices: one changed or deleted by someone else is
            // put back.
            let q = queue.clone();
            let follow_slices = objects.follow(
                &slices,
                |_| {},
                move |slice, _deleted| {
                    let labels = &slice["metadata"]["labels"];
                    if labels[LABEL_MANAGED_BY] == MIRRORING_MANAGED_BY
                        && let Some(svc) = labels[LABEL_SERVICE_NAME].as_str()
                    {
                        q.add((
                            meta::namespace(&slice).unwrap_or_default().to_string(),
                            svc.to_string(),
                        ));
                    }
                    async {}
                },
            );
            let mut synced = listed_rx;
            let run = async {
                let _ = synced.wait_for(|n| *n >= 2).await;
                super::run(queue.clone(), controller, 2).await;
            };
            tokio::join!(follow_services, follow_endpoints, follow_slices, run);
        }
    }));
}
