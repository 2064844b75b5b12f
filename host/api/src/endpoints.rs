//! What a Service's endpoints are, as kube-controller-manager's endpoints
//! and EndpointSlice controllers compute them (no IO: the controllers in
//! the registry read pods and services and write what this decides).
//!
//! * A Service with a `selector` selects the pods of its namespace whose
//!   labels hold every pair of it; a pod is an endpoint once it has an IP
//!   and has not finished (`ShouldPodBeInEndpoints`). Endpoints list a
//!   terminating pod only when the Service publishes not-ready addresses;
//!   EndpointSlices list it with `terminating: true`.
//! * Each Service port's `targetPort` resolves per pod (a number, or a
//!   named container port: pods whose names resolve differently get
//!   different port sets, hence different subsets and slices).
//! * EndpointSlices hold at most [`MAX_ENDPOINTS_PER_SLICE`] endpoints
//!   (`--max-endpoints-per-slice`'s default); [`plan_slices`] keeps the
//!   endpoints that stay in the slice they are in (upstream's reconciler
//!   does the same, to keep writes and watch events few).

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// `kubernetes.io/service-name`: the Service a slice belongs to.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// `endpointslice.kubernetes.io/managed-by`.
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// The EndpointSlice controller's `managed-by` value.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// `service.kubernetes.io/headless`, on the endpoints of a headless Service.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// Upstream's default `--max-endpoints-per-slice`.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// Upstream's cap on the addresses of an Endpoints object.
pub const MAX_ENDPOINTS_ADDRESSES: usize = 1000;
/// `endpoints.kubernetes.io/over-capacity`.
pub const ANNOTATION_OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";

/// Whether the Service's endpoints are computed from pods (it has a
/// non-empty selector and is not `ExternalName`).
pub fn selects_pods(service: &Value) -> bool {
    service["spec"]["type"] != "ExternalName"
        && service["spec"]["selector"]
            .as_object()
            .is_some_and(|s| !s.is_empty())
}

/// Whether `pod` carries every label of the Service's selector.
pub fn selected(service: &Value, pod: &Value) -> bool {
    let Some(selector) = service["spec"]["selector"].as_object() else {
        return false;
    };
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| pod["metadata"]["labels"].get(k) == Some(v))
}

/// The pod's condition `ty` is `True`.
pub fn pod_condition(pod: &Value, ty: &str) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == ty && c["status"] == "True")
}

/// Upstream's `ShouldPodBeInEndpoints`: an IP, not finished, and (unless
/// `include_terminating`) not being deleted.
pub fn in_endpoints(pod: &Value, include_terminating: bool) -> bool {
    if pod_ip(pod).is_none() {
        return false;
    }
    if matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    include_terminating || !pod["metadata"]["deletionTimestamp"].is_string()
}

fn pod_ip(pod: &Value) -> Option<&str> {
    pod["status"]["podIP"].as_str().filter(|s| !s.is_empty())
}

/// One resolved port of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Port {
    pub name: String,
    pub port: i64,
    pub protocol: String,
    pub app_protocol: Option<String>,
}

impl Port {
    fn json(&self, with_app_protocol: bool) -> Value {
        let mut p = json!({"name": self.name, "port": self.port, "protocol": self.protocol});
        if let (true, Some(a)) = (with_app_protocol, &self.app_protocol) {
            p["appProtocol"] = json!(a);
        }
        p
    }
}

/// The Service's ports as this pod serves them (upstream's
/// `FindPort`): a numeric `targetPort` (default: `port`), or the
/// container port of that name and protocol; a port the pod does not have
/// is left out.
pub fn ports_for(service: &Value, pod: &Value) -> Vec<Port> {
    let mut out = Vec::new();
    for sp in service["spec"]["ports"].as_array().into_iter().flatten() {
        let protocol = sp["protocol"].as_str().unwrap_or("TCP").to_string();
        let port = match &sp["targetPort"] {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => match s.parse::<i64>() {
                Ok(n) => Some(n),
                Err(_) => named_port(pod, s, &protocol),
            },
            _ => sp["port"].as_i64(),
        };
        if let Some(port) = port {
            out.push(Port {
                name: sp["name"].as_str().unwrap_or_default().to_string(),
                port,
                protocol,
                app_protocol: sp["appProtocol"].as_str().map(String::from),
            });
        }
    }
    out
}

fn named_port(pod: &Value, name: &str, protocol: &str) -> Option<i64> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"] == name && p["protocol"].as_str().unwrap_or("TCP") == protocol)
        .and_then(|p| p["containerPort"].as_i64())
}

fn target_ref(pod: &Value) -> Value {
    json!({
        "kind": "Pod",
        "namespace": pod["metadata"]["namespace"],
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
    })
}

/// The pod's hostname in the Service's DNS (a pod whose `subdomain` is the
/// Service's name and which has a `hostname`).
fn hostname<'a>(service: &Value, pod: &'a Value) -> Option<&'a str> {
    let h = pod["spec"]["hostname"].as_str().filter(|h| !h.is_empty())?;
    (pod["spec"]["subdomain"] == service["metadata"]["name"]).then_some(h)
}

/// The labels of a Service's Endpoints (and slices): the Service's own,
/// plus `service.kubernetes.io/headless` for a headless Service.
fn derived_labels(service: &Value) -> Map<String, Value> {
    let mut labels = service["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.remove(LABEL_HEADLESS);
    if service["spec"]["clusterIP"] == "None" {
        labels.insert(LABEL_HEADLESS.into(), json!(""));
    }
    labels
}

/// The Endpoints object the endpoints controller keeps for `service`
/// from the pods it selects (upstream's subsets, repacked: one subset per
/// distinct port set, addresses sorted by IP).
pub fn endpoints(service: &Value, pods: &[&Value]) -> Value {
    let publish = service["spec"]["publishNotReadyAddresses"] == true;
    let headless_no_ports = service["spec"]["clusterIP"] == "None"
        && service["spec"]["ports"]
            .as_array()
            .is_none_or(Vec::is_empty);
    // Port set → (ready, not ready) addresses by IP.
    type Addresses = BTreeMap<String, Value>;
    let mut subsets: BTreeMap<Vec<Port>, (Addresses, Addresses)> = BTreeMap::new();
    for pod in pods {
        if !in_endpoints(pod, publish) {
            continue;
        }
        let ports = ports_for(service, pod);
        if ports.is_empty() && !headless_no_ports {
            continue;
        }
        let ip = pod_ip(pod).expect("in_endpoints checked").to_string();
        let mut address = json!({"ip": ip, "targetRef": target_ref(pod)});
        if let Some(node) = pod["spec"]["nodeName"].as_str() {
            address["nodeName"] = json!(node);
        }
        if let Some(h) = hostname(service, pod) {
            address["hostname"] = json!(h);
        }
        let entry = subsets.entry(ports).or_default();
        let ready = publish || pod_condition(pod, "Ready");
        if ready {
            entry.0.insert(ip, address);
        } else {
            entry.1.insert(ip, address);
        }
    }
    let mut over = false;
    let mut budget = MAX_ENDPOINTS_ADDRESSES;
    let mut out = Vec::new();
    for (ports, (ready, not_ready)) in subsets {
        let mut subset = Map::new();
        let mut take = |set: Addresses| -> Vec<Value> {
            let n = set.len().min(budget);
            over |= n < set.len();
            budget -= n;
            set.into_values().take(n).collect()
        };
        let ready = take(ready);
        let not_ready = take(not_ready);
        if !ready.is_empty() {
            subset.insert("addresses".into(), json!(ready));
        }
        if !not_ready.is_empty() {
            subset.insert("notReadyAddresses".into(), json!(not_ready));
        }
        if !ports.is_empty() {
            subset.insert(
                "ports".into(),
                Value::Array(ports.iter().map(|p| p.json(true)).collect()),
            );
        }
        if subset.contains_key("addresses") || subset.contains_key("notReadyAddresses") {
            out.push(Value::Object(subset));
        }
    }
    let mut metadata = json!({
        "name": service["metadata"]["name"],
        "namespace": service["metadata"]["namespace"],
        "labels": derived_labels(service),
    });
    if over {
        metadata["annotations"] = json!({ANNOTATION_OVER_CAPACITY: "truncated"});
    }
    json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": metadata,
        "subsets": out,
    })
}

/// Whether two Endpoints say the same (subsets, labels, the over-capacity
/// annotation): the controller writes only when they do not.
pub fn endpoints_equal(a: &Value, b: &Value) -> bool {
    let subsets = |v: &Value| match &v["subsets"] {
        Value::Null => json!([]),
        s => s.clone(),
    };
    let labels = |v: &Value| match &v["metadata"]["labels"] {
        Value::Null => json!({}),
        l => l.clone(),
    };
    subsets(a) == subsets(b)
        && labels(a) == labels(b)
        && a["metadata"]["annotations"][ANNOTATION_OVER_CAPACITY]
            == b["metadata"]["annotations"][ANNOTATION_OVER_CAPACITY]
}

/// One endpoint of a slice, with the port set it serves.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceEndpoint {
    pub ports: Vec<Port>,
    pub endpoint: Value,
}

/// The EndpointSlice endpoints of the pods `service` selects: ready =
/// serving and not terminating (or the Service publishes not-ready
/// addresses), serving = the pod's `Ready`, terminating = being deleted.
/// `zone` gives a node's `topology.kubernetes.io/zone`.
pub fn slice_endpoints(
    service: &Value,
    pods: &[&Value],
    zone: impl Fn(&str) -> Option<String>,
) -> Vec<SliceEndpoint> {
    let publish = service["spec"]["publishNotReadyAddresses"] == true;
    let mut out = Vec::new();
    for pod in pods {
        if !in_endpoints(pod, true) {
            continue;
        }
        let terminating = pod["metadata"]["deletionTimestamp"].is_string();
        let serving = pod_condition(pod, "Ready");
        let ready = publish || (serving && !terminating);
        let mut endpoint = json!({
            "addresses": [pod_ip(pod).expect("in_endpoints checked")],
            "conditions": {"ready": ready, "serving": serving || publish, "terminating": terminating},
            "targetRef": target_ref(pod),
        });
        if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            endpoint["nodeName"] = json!(node);
            if let Some(z) = zone(node) {
                endpoint["zone"] = json!(z);
            }
        }
        if let Some(h) = hostname(service, pod) {
            endpoint["hostname"] = json!(h);
        }
        out.push(SliceEndpoint {
            ports: ports_for(service, pod),
            endpoint,
        });
    }
    out
}

/// The slices to write for a Service.
#[derive(Debug, Default, PartialEq)]
pub struct SlicePlan {
    /// New slices (no name: `generateName` is `<service>-`).
    pub create: Vec<Value>,
    /// Existing slices with new contents (name and resourceVersion kept).
    pub update: Vec<Value>,
    /// Names of slices to delete.
    pub delete: Vec<String>,
}

/// A slice's identity for matching: the target of each endpoint.
fn endpoint_key(e: &Value) -> String {
    match e["targetRef"]["uid"].as_str() {
        Some(uid) => uid.to_string(),
        None => e["addresses"][0].as_str().unwrap_or_default().to_string(),
    }
}

fn slice_ports(slice: &Value) -> Vec<Port> {
    let mut ports: Vec<Port> = slice["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| Port {
            name: p["name"].as_str().unwrap_or_default().to_string(),
            port: p["port"].as_i64().unwrap_or_default(),
            protocol: p["protocol"].as_str().unwrap_or("TCP").to_string(),
            app_protocol: p["appProtocol"].as_str().map(String::from),
        })
        .collect();
    ports.sort();
    ports
}

/// Who a controller's slices belong to: their labels, annotations,
/// owner reference and `generateName` prefix.
#[derive(Debug, Clone)]
pub struct SliceOwner {
    pub name: String,
    pub namespace: Value,
    pub labels: Map<String, Value>,
    pub annotations: Map<String, Value>,
    pub owner: Value,
}

impl SliceOwner {
    /// The EndpointSlice controller's slices of `service`: the Service's
    /// labels (and `headless`), owned by the Service.
    pub fn service(service: &Value) -> SliceOwner {
        let mut labels = derived_labels(service);
        labels.insert(
            LABEL_SERVICE_NAME.into(),
            service["metadata"]["name"].clone(),
        );
        labels.insert(LABEL_MANAGED_BY.into(), json!(MANAGED_BY));
        SliceOwner {
            name: service["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            namespace: service["metadata"]["namespace"].clone(),
            labels,
            annotations: Map::new(),
            owner: json!([{
                "apiVersion": "v1",
                "kind": "Service",
                "name": service["metadata"]["name"],
                "uid": service["metadata"]["uid"],
                "controller": true,
                "blockOwnerDeletion": true,
            }]),
        }
    }
}

/// Decides the writes that make `existing` (the controller's own slices of
/// the Service) hold exactly `desired`: endpoints already in a slice of
/// the same port set stay there (updated when changed), gone ones leave,
/// new ones fill slices with room before new slices are made, and slices
/// left empty are deleted (one empty slice is kept when the Service has no
/// endpoints at all, as upstream keeps a placeholder).
pub fn plan_slices(
    service: &Value,
    existing: &[Value],
    desired: Vec<SliceEndpoint>,
    max_per_slice: usize,
) -> SlicePlan {
    plan_owned_slices(
        &SliceOwner::service(service),
        existing,
        desired,
        max_per_slice,
        true,
    )
}

/// [`plan_slices`] for any owner; `placeholder`: whether an owner without
/// endpoints keeps one empty slice (the EndpointSlice controller's) or
/// none (the mirroring controller's).
pub fn plan_owned_slices(
    owner: &SliceOwner,
    existing: &[Value],
    desired: Vec<SliceEndpoint>,
    max_per_slice: usize,
    placeholder: bool,
) -> SlicePlan {
    let max = max_per_slice.max(1);
    let labels = owner.labels.clone();
    // Desired endpoints by port set, by key.
    let mut wanted: BTreeMap<Vec<Port>, BTreeMap<String, Value>> = BTreeMap::new();
    for d in desired {
        let mut ports = d.ports;
        ports.sort();
        wanted
            .entry(ports)
            .or_default()
            .insert(endpoint_key(&d.endpoint), d.endpoint);
    }
    let mut plan = SlicePlan::default();
    // Existing slices: keep what is still wanted in them.
    struct Kept {
        slice: Value,
        ports: Vec<Port>,
        endpoints: Vec<Value>,
        changed: bool,
    }
    let mut kept: Vec<Kept> = Vec::new();
    for slice in existing {
        let ports = slice_ports(slice);
        let Some(want) = wanted.get_mut(&ports) else {
            kept.push(Kept {
                slice: slice.clone(),
                ports,
                endpoints: Vec::new(),
                changed: true,
            });
            continue;
        };
        let mut changed = false;
        let mut endpoints = Vec::new();
        for e in slice["endpoints"].as_array().into_iter().flatten() {
            match want.remove(&endpoint_key(e)) {
                Some(new) => {
                    changed |= &new != e;
                    endpoints.push(new);
                }
                None => changed = true,
            }
        }
        let annotations = slice["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let meta_changed = slice["metadata"]["labels"].as_object() != Some(&labels)
            || annotations != owner.annotations
            || slice["addressType"] != "IPv4";
        kept.push(Kept {
            slice: slice.clone(),
            ports,
            endpoints,
            changed: changed || meta_changed,
        });
    }
    // New endpoints: into kept slices of their port set with room, then
    // into new slices.
    let mut fresh: Vec<(Vec<Port>, Vec<Value>)> = Vec::new();
    for (ports, mut rest) in wanted {
        for k in kept.iter_mut().filter(|k| k.ports == ports) {
            while k.endpoints.len() < max {
                let Some(key) = rest.keys().next().cloned() else {
                    break;
                };
                k.endpoints.push(rest.remove(&key).expect("key present"));
                k.changed = true;
            }
        }
        let rest: Vec<Value> = rest.into_values().collect();
        for chunk in rest.chunks(max) {
            fresh.push((ports.clone(), chunk.to_vec()));
        }
    }
    let slice_body = |ports: &[Port], endpoints: Vec<Value>| {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": ports.iter().map(|p| p.json(true)).collect::<Vec<_>>(),
        })
    };
    let any_endpoints = kept.iter().any(|k| !k.endpoints.is_empty()) || !fresh.is_empty();
    let mut placeholder_kept = false;
    for k in kept {
        let empty = k.endpoints.is_empty();
        if empty && (any_endpoints || placeholder_kept || !placeholder) {
            plan.delete.push(
                k.slice["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            continue;
        }
        placeholder_kept |= empty;
        if !k.changed {
            continue;
        }
        let ports = if empty { Vec::new() } else { k.ports };
        let mut body = slice_body(&ports, k.endpoints);
        body["metadata"] = k.slice["metadata"].clone();
        body["metadata"]["labels"] = Value::Object(labels.clone());
        if !owner.annotations.is_empty() {
            body["metadata"]["annotations"] = Value::Object(owner.annotations.clone());
        }
        plan.update.push(body);
    }
    let new_meta = || {
        let mut m = json!({
            "generateName": format!("{}-", owner.name),
            "namespace": owner.namespace,
            "labels": labels,
            "ownerReferences": owner.owner,
        });
        if !owner.annotations.is_empty() {
            m["annotations"] = Value::Object(owner.annotations.clone());
        }
        m
    };
    for (ports, endpoints) in fresh {
        let mut body = slice_body(&ports, endpoints);
        body["metadata"] = new_meta();
        plan.create.push(body);
    }
    if placeholder && plan.create.is_empty() && !placeholder_kept && !any_endpoints {
        // No endpoints and no slice: the placeholder.
        let mut body = slice_body(&[], Vec::new());
        body["metadata"] = new_meta();
        plan.create.push(body);
    }
    plan
}

/// The EndpointSliceMirroring controller's `managed-by` value.
pub const MIRRORING_MANAGED_BY: &str = "endpointslicemirroring-controller.k8s.io";
/// `endpointslice.kubernetes.io/skip-mirror`: Endpoints that are not
/// mirrored (the `kubernetes` Service's, written by the server itself).
pub const LABEL_SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
/// Upstream's `--mirroring-max-endpoints-per-subset` default.
pub const MIRRORING_MAX_ENDPOINTS_PER_SUBSET: usize = 1000;

/// Whether hand-written `endpoints` are mirrored into EndpointSlices
/// (upstream's `shouldMirror`): not with `skip-mirror: "true"`, not a
/// leader-election record. Their Service must also exist without a
/// selector ([`selects_pods`] false).
pub fn should_mirror(endpoints: &Value) -> bool {
    endpoints["metadata"]["labels"][LABEL_SKIP_MIRROR] != "true"
        && endpoints["metadata"]["annotations"]["control-plane.alpha.kubernetes.io/leader"]
            .is_null()
}

/// The slices' owner for mirrored `endpoints`: their labels (the
/// service-name and managed-by labels overwritten) and annotations
/// (except the trigger time and kubectl's last-applied), owned by the
/// Endpoints.
pub fn mirror_owner(endpoints: &Value) -> SliceOwner {
    let name = endpoints["metadata"]["name"].as_str().unwrap_or_default();
    let mut labels = endpoints["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(LABEL_SERVICE_NAME.into(), json!(name));
    labels.insert(LABEL_MANAGED_BY.into(), json!(MIRRORING_MANAGED_BY));
    let mut annotations = endpoints["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.remove("endpoints.kubernetes.io/last-change-trigger-time");
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    SliceOwner {
        name: name.to_string(),
        namespace: endpoints["metadata"]["namespace"].clone(),
        labels,
        annotations,
        owner: json!([{
            "apiVersion": "v1",
            "kind": "Endpoints",
            "name": name,
            "uid": endpoints["metadata"]["uid"],
            "controller": true,
            "blockOwnerDeletion": true,
        }]),
    }
}

/// The slice endpoints of hand-written `endpoints`: each subset's ready
/// addresses then its not-ready ones (ready `false`), at most `max` per
/// subset, with the subset's ports; addresses that are not IPv4 are left
/// out (this server's slices are IPv4).
pub fn mirrored_endpoints(endpoints: &Value, max: usize) -> Vec<SliceEndpoint> {
    let mut out = Vec::new();
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        let ports: Vec<Port> = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some(Port {
                    name: p["name"].as_str().unwrap_or_default().to_string(),
                    port: p["port"].as_i64()?,
                    protocol: p["protocol"].as_str().unwrap_or("TCP").to_string(),
                    app_protocol: p["appProtocol"].as_str().map(String::from),
                })
            })
            .collect();
        let addresses = [("addresses", true), ("notReadyAddresses", false)]
            .into_iter()
            .flat_map(|(field, ready)| {
                subset[field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(move |a| (a, ready))
            })
            .filter(|(a, _)| {
                a["ip"]
                    .as_str()
                    .is_some_and(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok())
            })
            .take(max);
        for (address, ready) in addresses {
            let mut endpoint = json!({
                "addresses": [address["ip"]],
                "conditions": {"ready": ready},
            });
            for (from, to) in [
                ("hostname", "hostname"),
                ("nodeName", "nodeName"),
                ("targetRef", "targetRef"),
            ] {
                if !address[from].is_null() {
                    endpoint[to] = address[from].clone();
                }
            }
            out.push(SliceEndpoint {
                ports: ports.clone(),
                endpoint,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(ports: Value) -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "svc-uid", "labels": {"app": "web"}},
            "spec": {"selector": {"app": "web"}, "ports": ports, "clusterIP": "10.96.0.10"},
        })
    }

    fn pod(name: &str, ip: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "web"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    #[test]
    fn target_ports_resolve_by_number_and_name() {
        let svc = service(json!([
            {"name": "a", "port": 80, "targetPort": "http", "protocol": "TCP"},
            {"name": "b", "port": 81, "targetPort": 9090, "protocol": "TCP"},
            {"name": "c", "port": 82, "protocol": "TCP"},
            {"name": "d", "port": 83, "targetPort": "missing", "protocol": "TCP"},
        ]));
        let ports: Vec<(String, i64)> = ports_for(&svc, &pod("p", "10.0.0.1", true))
            .into_iter()
            .map(|p| (p.name, p.port))
            .collect();
        assert_eq!(
            ports,
            [("a".into(), 8080), ("b".into(), 9090), ("c".into(), 82)]
        );
    }

    #[test]
    fn endpoints_split_ready_and_not_ready_and_skip_the_rest() {
        let svc =
            service(json!([{"name": "a", "port": 80, "targetPort": 8080, "protocol": "TCP"}]));
        let mut finished = pod("done", "10.0.0.9", false);
        finished["status"]["phase"] = json!("Succeeded");
        let mut deleting = pod("going", "10.0.0.8", true);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let mut no_ip = pod("new", "", false);
        no_ip["status"]["podIP"] = Value::Null;
        let (a, b) = (pod("b", "10.0.0.2", true), pod("a", "10.0.0.1", false));
        let all = [&a, &b, &finished, &deleting, &no_ip];
        let ep = endpoints(&svc, &all);
        let subset = &ep["subsets"][0];
        assert_eq!(subset["addresses"][0]["ip"], "10.0.0.2");
        assert_eq!(subset["addresses"][0]["targetRef"]["name"], "b");
        assert_eq!(subset["addresses"][0]["nodeName"], "node-a");
        assert_eq!(subset["notReadyAddresses"][0]["ip"], "10.0.0.1");
        assert_eq!(subset["ports"][0]["port"], 8080);
        assert_eq!(ep["subsets"].as_array().unwrap().len(), 1);
        assert_eq!(ep["metadata"]["labels"]["app"], "web");

        // Published not-ready: everything is ready, terminating included.
        let mut publish = svc.clone();
        publish["spec"]["publishNotReadyAddresses"] = json!(true);
        let ep = endpoints(&publish, &all);
        assert_eq!(ep["subsets"][0]["addresses"].as_array().unwrap().len(), 3);
        assert!(ep["subsets"][0]["notReadyAddresses"].is_null());
    }

    #[test]
    fn slices_carry_upstreams_conditions() {
        let svc =
            service(json!([{"name": "a", "port": 80, "targetPort": 8080, "protocol": "TCP"}]));
        let mut going = pod("going", "10.0.0.8", true);
        going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let (ready, unready) = (pod("r", "10.0.0.1", true), pod("u", "10.0.0.2", false));
        let eps = slice_endpoints(&svc, &[&ready, &unready, &going], |n| {
            (n == "node-a").then(|| "z1".to_string())
        });
        let cond = |i: usize| eps[i].endpoint["conditions"].clone();
        assert_eq!(
            cond(0),
            json!({"ready": true, "serving": true, "terminating": false})
        );
        assert_eq!(
            cond(1),
            json!({"ready": false, "serving": false, "terminating": false})
        );
        assert_eq!(
            cond(2),
            json!({"ready": false, "serving": true, "terminating": true})
        );
        assert_eq!(eps[0].endpoint["zone"], "z1");
    }

    #[test]
    fn plans_keep_endpoints_in_place_and_bound_slices() {
        let svc =
            service(json!([{"name": "a", "port": 80, "targetPort": 8080, "protocol": "TCP"}]));
        let pods: Vec<Value> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i:03}"),
                    &format!("10.0.{}.{}", i / 200, i % 200),
                    true,
                )
            })
            .collect();
        let refs: Vec<&Value> = pods.iter().collect();
        let eps = slice_endpoints(&svc, &refs, |_| None);
        let plan = plan_slices(&svc, &[], eps, MAX_ENDPOINTS_PER_SLICE);
        assert_eq!(plan.create.len(), 3);
        assert!(plan.update.is_empty() && plan.delete.is_empty());
        let sizes: Vec<usize> = plan
            .create
            .iter()
            .map(|s| s["endpoints"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, [100, 100, 50]);
        let first = &plan.create[0];
        assert_eq!(first["metadata"]["generateName"], "web-");
        assert_eq!(first["metadata"]["labels"][LABEL_SERVICE_NAME], "web");
        assert_eq!(first["metadata"]["labels"][LABEL_MANAGED_BY], MANAGED_BY);
        assert_eq!(first["metadata"]["ownerReferences"][0]["uid"], "svc-uid");

        // Stored, then one pod goes and one comes: one slice changes.
        let stored: Vec<Value> = plan
            .create
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                s["metadata"]["name"] = json!(format!("web-{i}"));
                s
            })
            .collect();
        let mut pods2: Vec<Value> = pods.clone();
        pods2.remove(0);
        let refs: Vec<&Value> = pods2.iter().collect();
        let eps = slice_endpoints(&svc, &refs, |_| None);
        let plan = plan_slices(&svc, &stored, eps, MAX_ENDPOINTS_PER_SLICE);
        assert_eq!(plan.update.len(), 1, "{plan:?}");
        assert_eq!(plan.update[0]["metadata"]["name"], "web-0");
        assert!(plan.create.is_empty() && plan.delete.is_empty());

        // Unchanged: nothing to write.
        let eps = slice_endpoints(&svc, &pods.iter().collect::<Vec<_>>(), |_| None);
        assert_eq!(
            plan_slices(&svc, &stored, eps, MAX_ENDPOINTS_PER_SLICE),
            SlicePlan::default()
        );

        // No pods: one placeholder slice stays, the others go.
        let plan = plan_slices(&svc, &stored, Vec::new(), MAX_ENDPOINTS_PER_SLICE);
        assert_eq!(plan.delete.len(), 2);
        assert_eq!(plan.update.len(), 1);
        assert_eq!(plan.update[0]["endpoints"], json!([]));
        assert!(plan.create.is_empty());
    }

    #[test]
    fn hand_written_endpoints_are_mirrored_subset_by_subset() {
        let endpoints = json!({
            "metadata": {"name": "ext", "namespace": "default", "uid": "ep-uid",
                "labels": {"team": "a", LABEL_MANAGED_BY: "someone"},
                "annotations": {"note": "x", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "subsets": [
                {"addresses": [{"ip": "10.0.0.1", "hostname": "one"}, {"ip": "fe80::1"}],
                 "notReadyAddresses": [{"ip": "10.0.0.2", "nodeName": "n1"}],
                 "ports": [{"name": "http", "port": 80}]},
                {"addresses": [{"ip": "10.0.0.3"}, {"ip": "10.0.0.4"}, {"ip": "10.0.0.5"}],
                 "ports": [{"port": 53, "protocol": "UDP"}]},
            ],
        });
        assert!(should_mirror(&endpoints));
        let mut skipped = endpoints.clone();
        skipped["metadata"]["labels"][LABEL_SKIP_MIRROR] = json!("true");
        assert!(!should_mirror(&skipped));
        // At most 2 per subset: the ready ones first.
        let desired = mirrored_endpoints(&endpoints, 2);
        let ips: Vec<&str> = desired
            .iter()
            .map(|d| d.endpoint["addresses"][0].as_str().unwrap())
            .collect();
        assert_eq!(ips, ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]);
        assert_eq!(desired[0].endpoint["hostname"], "one");
        assert_eq!(desired[1].endpoint["conditions"]["ready"], false);
        assert_eq!(desired[1].endpoint["nodeName"], "n1");
        let owner = mirror_owner(&endpoints);
        let plan = plan_owned_slices(&owner, &[], desired, 100, false);
        assert_eq!(plan.create.len(), 2, "one slice per port set");
        let slice = &plan.create[0];
        assert_eq!(slice["metadata"]["generateName"], "ext-");
        assert_eq!(
            slice["metadata"]["labels"][LABEL_MANAGED_BY],
            MIRRORING_MANAGED_BY
        );
        assert_eq!(slice["metadata"]["labels"][LABEL_SERVICE_NAME], "ext");
        assert_eq!(slice["metadata"]["labels"]["team"], "a");
        assert_eq!(slice["metadata"]["annotations"], json!({"note": "x"}));
        assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Endpoints");
        // No endpoints: no slice (no placeholder), and stored ones go.
        let mut stored = plan.create.clone();
        for (i, s) in stored.iter_mut().enumerate() {
            s["metadata"]["name"] = json!(format!("ext-{i}"));
        }
        let plan = plan_owned_slices(&owner, &stored, Vec::new(), 100, false);
        assert!(plan.create.is_empty() && plan.update.is_empty());
        assert_eq!(plan.delete, ["ext-0", "ext-1"]);
    }
}
