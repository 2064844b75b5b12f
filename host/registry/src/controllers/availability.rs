//! kube-aggregator's `availableConditionController`: keeps every remote
//! APIService's `Available` condition and the [`Aggregator`]'s routing
//! table current. For each APIService that names a `spec.service` it
//! resolves the Service to an endpoint, builds the connection, probes the
//! extension's discovery document and writes the condition with upstream's
//! reasons (`Passed`, `ServiceNotFound`, `ServicePortError`,
//! `EndpointsNotFound`, `MissingEndpoints`, `FailedDiscoveryCheck`). It
//! looks again when the APIService, its Service or the Service's
//! EndpointSlices change, when the proxy saw the backend fail, and every
//! [`RECHECK`] (every [`RETRY`] while unavailable).
//!
//! Every replica runs it: the routing table is each replica's own, and the
//! status is written only when it changes. It acts as the server itself
//! (`system:apiserver`, as upstream's loopback client), authorized and
//! audited as any client.

use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile};
use crate::aggregator::{self, Aggregator, Route, Unavailable};
use crate::options::ListParams;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasm_apiserver_api::selector::LabelSelector;
use wasm_apiserver_api::{ApiError, builtin::APIREGISTRATION, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

pub const NAME: &str = "apiservice-availability-controller";

/// How often an available APIService is probed again.
pub const RECHECK: Duration = Duration::from_secs(30);
/// How often an unavailable one is.
pub const RETRY: Duration = Duration::from_secs(5);

/// Which APIServices name each Service `(namespace, name)`.
type ByService = Arc<Mutex<HashMap<(String, String), HashSet<String>>>>;

struct Availability {
    client: Client,
    agg: Arc<Aggregator>,
}

#[async_trait::async_trait]
impl Reconcile for Availability {
    type Key = String;

    async fn reconcile(&self, name: &String) -> Result<Action> {
        let info = self
            .client
            .objects
            .resources
            .builtin(APIREGISTRATION, "v1", "apiservices");
        let api_service = match self.client.get(&info, None, name).await {
            Ok(a) if aggregator::service_of(&a).is_some() => a,
            Ok(_) | Err(ApiError::NotFound(_)) => {
                self.agg.remove(name);
                return Ok(Action::Done);
            }
            Err(e) => return Err(e),
        };
        let group = api_service["spec"]["group"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let version = api_service["spec"]["version"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let old = self.agg.routes().get(name).cloned();
        let backend = match resolve(&self.client, &api_service).await? {
            Ok(at) => aggregator::backend(
                &self.agg,
                &api_service,
                at,
                old.as_ref().and_then(|r| r.backend.as_ref()),
            ),
            Err(u) => Err(u),
        };
        let (backend, outcome, openapi_v3_hash) = match backend {
            Ok(b) => {
                let probed = aggregator::probe(&self.agg, &b, &group, &version).await;
                let hash = match probed {
                    Ok(_) => aggregator::openapi_v3_hash(&self.agg, &b, &group, &version).await,
                    Err(_) => None,
                };
                (Some(b), probed, hash)
            }
            Err(u) => (None, Err(u), None),
        };
        let (priority, version_priority) = aggregator::priorities(&api_service);
        let available = outcome.is_ok();
        self.agg.set(Route {
            name: name.clone(),
            group,
            version,
            group_priority_minimum: priority,
            version_priority,
            backend,
            available,
            discovery: outcome.as_ref().ok().cloned(),
            openapi_v3_hash,
        });
        let (status, reason, message) = aggregator::condition(&outcome.map(drop));
        let current = api_service["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Available"));
        let unchanged = current.is_some_and(|c| {
            c["status"] == status && c["reason"] == reason && c["message"] == message.as_str()
        });
        if !unchanged {
            let write = self
                .client
                .update(&info, None, name, Some("status"), |cur| {
                    let mut new = cur.clone();
                    set_available(&mut new, status, reason, &message);
                    Ok(new)
                })
                .await;
            match write {
                Ok(_) | Err(ApiError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Action::RequeueAfter(if available {
            RECHECK
        } else {
            RETRY
        }))
    }
}

/// Where an APIService's service is: `(host, port, server name)`.
async fn resolve(
    client: &Client,
    api_service: &Value,
) -> Result<Result<(String, u16, String), Unavailable>, ApiError> {
    let svc = &api_service["spec"]["service"];
    let ns = svc["namespace"].as_str().unwrap_or_default();
    let name = svc["name"].as_str().unwrap_or_default();
    let port = svc["port"].as_u64().unwrap_or(443);
    let server_name = format!("{name}.{ns}.svc");
    let services = client.objects.resources.builtin("", "v1", "services");
    let service = match client.get(&services, Some(ns), name).await {
        Ok(s) => s,
        Err(ApiError::NotFound(_)) => {
            return Ok(Err(aggregator::unavailable(
                aggregator::reason::SERVICE_NOT_FOUND,
                format!("service/{name} in {ns:?} is not present"),
            )));
        }
        Err(e) => return Err(e),
    };
    if service["spec"]["type"] == "ExternalName" {
        let host = service["spec"]["externalName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        return Ok(Ok((host, port as u16, server_name)));
    }
    let Some(svc_port) = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(port))
    else {
        return Ok(Err(aggregator::unavailable(
            aggregator::reason::SERVICE_PORT_ERROR,
            format!("service/{name} in {ns:?} is not listening on port {port}"),
        )));
    };
    let port_name = svc_port["name"].as_str().unwrap_or_default();
    let slices = client
        .objects
        .resources
        .builtin("discovery.k8s.io", "v1", "endpointslices");
    let params = ListParams {
        labels: LabelSelector::parse(&format!("kubernetes.io/service-name={name}"))
            .map_err(ApiError::BadRequest)?,
        ..Default::default()
    };
    let listed = client.list(&slices, Some(ns), &params).await?;
    if listed.items.is_empty() {
        return Ok(Err(aggregator::unavailable(
            aggregator::reason::ENDPOINTS_NOT_FOUND,
            format!("cannot find endpoints for service/{name} in {ns:?}"),
        )));
    }
    if let Some((addr, port)) =
        wasm_apiserver_api::kubelet::ready_endpoint(&listed.items, port_name)
    {
        let host = if addr.contains(':') {
            format!("[{addr}]")
        } else {
            addr.to_string()
        };
        return Ok(Ok((host, port, server_name)));
    }
    Ok(Err(aggregator::unavailable(
        aggregator::reason::MISSING_ENDPOINTS,
        format!(
            "endpoints for service/{name} in {ns:?} have no addresses with port name {port_name:?}"
        ),
    )))
}

/// Sets the `Available` condition, keeping its `lastTransitionTime` while
/// the status stays.
fn set_available(obj: &mut Value, status: &str, reason: &str, message: &str) {
    let mut conditions: Vec<Value> = obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let since = conditions
        .iter()
        .find(|c| c["type"] == "Available" && c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
        .unwrap_or_else(|| meta::timestamp(chrono::Utc::now()));
    conditions.retain(|c| c["type"] != "Available");
    conditions.push(json!({
        "type": "Available",
        "status": status,
        "lastTransitionTime": since,
        "reason": reason,
        "message": message,
    }));
    obj["status"]["conditions"] = Value::Array(conditions);
}

/// Runs the controller (on every replica) for `agg`.
pub fn spawn(client: Client, agg: Arc<Aggregator>, metrics: &Metrics) {
    let queue: Arc<Queue<String>> = Queue::new("apiservice_availability");
    metrics.register(queue.clone());
    let recheck = queue.clone();
    agg.set_recheck(move |name| recheck.add(name.to_string()));
    let by_service: ByService = Default::default();
    let reconciler = Arc::new(Availability { client, agg });
    tokio::spawn(async move {
        let objects = reconciler.client.objects.clone();
        let api_services = objects
            .resources
            .builtin(APIREGISTRATION, "v1", "apiservices");
        let services = objects.resources.builtin("", "v1", "services");
        let slices = objects
            .resources
            .builtin("discovery.k8s.io", "v1", "endpointslices");
        let (q1, index) = (queue.clone(), by_service.clone());
        let follow_api_services = objects.follow(
            &api_services,
            |_| {},
            move |obj, deleted| {
                let name = meta::name(&obj).unwrap_or_default().to_string();
                {
                    let mut index = index.lock().unwrap_or_else(|e| e.into_inner());
                    for names in index.values_mut() {
                        names.remove(&name);
                    }
                    index.retain(|_, names| !names.is_empty());
                    if !deleted && let Some(svc) = aggregator::service_of(&obj) {
                        index.entry(svc).or_default().insert(name.clone());
                    }
                }
                q1.add(name);
                async {}
            },
        );
        let enqueue_for =
            |queue: Arc<Queue<String>>, index: ByService, svc: Option<(String, String)>| {
                let Some(svc) = svc else { return };
                let names: Vec<String> = index
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&svc)
                    .map(|n| n.iter().cloned().collect())
                    .unwrap_or_default();
                for n in names {
                    queue.add(n);
                }
            };
        let (q2, i2) = (queue.clone(), by_service.clone());
        let follow_services = objects.follow(
            &services,
            |_| {},
            move |svc, _| {
                let key = meta::namespace(&svc)
                    .zip(meta::name(&svc))
                    .map(|(ns, n)| (ns.to_string(), n.to_string()));
                enqueue_for(q2.clone(), i2.clone(), key);
                async {}
            },
        );
        let (q3, i3) = (queue.clone(), by_service.clone());
        let follow_slices = objects.follow(
            &slices,
            |_| {},
            move |slice, _| {
                enqueue_for(q3.clone(), i3.clone(), aggregator::service_of_slice(&slice));
                async {}
            },
        );
        let work = super::run(queue, reconciler, 2);
        tokio::join!(follow_api_services, follow_services, follow_slices, work);
    });
}
