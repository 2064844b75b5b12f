//! The `default/kubernetes` Service and its endpoints, as kube-apiserver's
//! own bootstrap controller and lease endpoint reconciler keep them: the
//! Service has the service range's first address and port 443 (`https`)
//! to the secure port; its Endpoints and EndpointSlice list every live
//! replica. Each replica holds a Lease `kube-system/kube-apiserver-<id>`
//! (label `apiserver.kubernetes.io/identity: kube-apiserver`, as upstream's
//! apiserver identity leases) naming its advertised address, renewed every
//! 10 s; the endpoints are the addresses of the Leases renewed within the
//! last 45 s, so a replica that dies drops out. Every replica runs this
//! (it is how each publishes itself); the writes are idempotent.

use crate::options::WriteOptions;
use crate::store::Objects;
use serde_json::{Value, json};
use std::net::IpAddr;
use std::time::Duration;
use wasm_apiserver_api::{ApiError, meta};

const RENEW: Duration = Duration::from_secs(10);
/// A replica whose Lease is older than this is gone.
const EXPIRE: Duration = Duration::from_secs(45);
const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";

/// What this replica publishes.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `--advertise-address`.
    pub address: IpAddr,
    /// `--secure-port`.
    pub port: u16,
    /// The `kubernetes` Service's cluster IP (the range's first address).
    pub cluster_ip: IpAddr,
    /// This replica's identity (Lease name suffix).
    pub id: String,
}

fn opts() -> WriteOptions {
    WriteOptions::system("bootstrap-controller")
}

/// Creates or replaces `obj` (keeping what the server set) unless the
/// stored one already has `want`'s spec-like fields.
async fn ensure(
    objects: &Objects,
    group: &str,
    plural: &str,
    ns: &str,
    want: Value,
    same: impl Fn(&Value, &Value) -> bool,
) -> Result<(), ApiError> {
    let info = objects.resources.builtin(group, "v1", plural);
    let name = meta::name(&want).unwrap_or_default().to_string();
    match objects.get(&info, Some(ns), &name).await {
        Ok(cur) if same(&cur, &want) => Ok(()),
        Ok(_) => objects
            .guaranteed_update(&info, Some(ns), &name, None, &opts(), |cur| {
                let mut new = want.clone();
                new["metadata"] = cur["metadata"].clone();
                for (k, v) in want["metadata"].as_object().into_iter().flatten() {
                    new["metadata"][k] = v.clone();
                }
                Ok(new)
            })
            .await
            .map(drop),
        Err(ApiError::NotFound(_)) => match objects.create(&info, Some(ns), want, &opts()).await {
            Ok(_) | Err(ApiError::AlreadyExists(_)) => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// One pass: renew this replica's Lease, then make the Service, Endpoints
/// and EndpointSlice match the live replicas.
pub async fn reconcile(objects: &Objects, me: &Endpoint) -> Result<(), ApiError> {
    let lease_name = format!("kube-apiserver-{}", me.id);
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": lease_name, "namespace": "kube-system",
            "labels": {IDENTITY_LABEL: "kube-apiserver"},
            "annotations": {"wasm-apiserver.io/advertise-address": me.address.to_string(),
                "wasm-apiserver.io/secure-port": me.port.to_string()}},
        "spec": {"holderIdentity": lease_name, "leaseDurationSeconds": 3600,
            "renewTime": super::micro_time()}});
    ensure(
        objects,
        "coordination.k8s.io",
        "leases",
        "kube-system",
        lease,
        |_, _| false,
    )
    .await?;

    let leases = objects
        .resources
        .builtin("coordination.k8s.io", "v1", "leases");
    let listed = objects
        .list(&leases, Some("kube-system"), &Default::default())
        .await?;
    let now = chrono::Utc::now();
    let mut addresses: Vec<String> = listed
        .items
        .iter()
        .filter(|l| {
            meta::labels(l).get(IDENTITY_LABEL).map(String::as_str) == Some("kube-apiserver")
        })
        .filter(|l| {
            l["spec"]["renewTime"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| {
                    (now - t.with_timezone(&chrono::Utc))
                        .to_std()
                        .is_ok_and(|age| age < EXPIRE)
                        || t > now
                })
        })
        .filter_map(|l| {
            l["metadata"]["annotations"]["wasm-apiserver.io/advertise-address"]
                .as_str()
                .map(String::from)
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    if addresses.is_empty() {
        addresses.push(me.address.to_string());
    }

    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": me.cluster_ip.to_string(),
            "clusterIPs": [me.cluster_ip.to_string()], "sessionAffinity": "None",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": me.port}]}});
    ensure(objects, "", "services", "default", service, |cur, want| {
        cur["spec"]["ports"] == want["spec"]["ports"]
    })
    .await?;

    let ports = json!([{"name": "https", "port": me.port, "protocol": "TCP"}]);
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": addresses.iter().map(|a| json!({"ip": a})).collect::<Vec<_>>(),
            "ports": ports}]});
    ensure(
        objects,
        "",
        "endpoints",
        "default",
        endpoints,
        |cur, want| cur["subsets"] == want["subsets"],
    )
    .await?;

    let v6 = me.address.is_ipv6();
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": if v6 { "IPv6" } else { "IPv4" },
        "endpoints": addresses.iter().map(|a| json!({"addresses": [a], "conditions": {"ready": true}})).collect::<Vec<_>>(),
        "ports": ports});
    ensure(
        objects,
        "discovery.k8s.io",
        "endpointslices",
        "default",
        slice,
        |cur, want| cur["endpoints"] == want["endpoints"] && cur["ports"] == want["ports"],
    )
    .await
}

/// Runs [`reconcile`] now and every 10 s, on every replica.
pub fn spawn(objects: Objects, me: Endpoint) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(e) = reconcile(&objects, &me).await {
                tracing::warn!(error = %e, "could not publish the kubernetes service endpoints");
            }
            tokio::time::sleep(RENEW).await;
        }
    })
}
