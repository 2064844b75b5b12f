//! The kubelet connection (upstream's `pkg/kubelet/client`): how this
//! server reaches a node's kubelet and where each connect subresource goes.
//!
//! [`Kubelets`] holds one connection pool to kubelets, built by
//! [`outbound`](crate::outbound) from `--kubelet-certificate-authority`
//! (without it a kubelet's certificate is not verified, upstream's
//! default) and the kubelet client certificate
//! (`--kubelet-client-certificate`, or the one generated at first start),
//! and one to pods and service endpoints for `pods/proxy` and
//! `services/proxy`. [`Kubelets::locate`] reads the pod, node, service and
//! EndpointSlices a request needs and answers the URL to send it to
//! (computed by `wasm_apiserver_api::kubelet`); the HTTP layer sends it
//! and streams or splices the answer back.

use crate::options::ListParams;
use crate::outbound::{self, HttpsClient, Identity, Peer, Trust};
use crate::store::Objects;
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_api::kubelet::{self as loc, LogOptions, Stream};
use wasm_apiserver_api::selector::LabelSelector;

/// `--kubelet-timeout`'s default (upstream's).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The kubelet connection's settings (the `--kubelet-*` flags).
pub struct KubeletConfig {
    /// `--kubelet-preferred-address-types`.
    pub preferred_address_types: Vec<String>,
    /// The port of a node that publishes none (`--kubelet-port`, 10250).
    pub default_port: u16,
    /// `--kubelet-timeout`: how long dialling a kubelet and waiting for its
    /// answer's headers may take (the body of a stream has no deadline).
    pub timeout: Duration,
    /// `--kubelet-certificate-authority`, or `Insecure` without it.
    pub trust: Trust,
    /// The client certificate presented to kubelets.
    pub identity: Option<Arc<Identity>>,
}

/// Connection pools to kubelets and to proxied pods and endpoints.
pub struct Kubelets {
    pub config: KubeletConfig,
    kubelet: HttpsClient,
    /// The kubelet client certificate without verifying the kubelet: a
    /// log request's `insecureSkipTLSVerifyBackend`.
    kubelet_unverified: HttpsClient,
    proxy: HttpsClient,
}

/// A connect request: `<resource>/<id>/<sub>` (`id` is the name in the
/// path, with a `:port` for a proxy), the request's path (a proxy
/// forwards what follows `/proxy`), its query as sent (a proxy forwards it
/// untouched) and decoded.
#[derive(Debug, Clone, Copy)]
pub struct ConnectRequest<'a> {
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub id: &'a str,
    pub sub: &'a str,
    pub path: &'a str,
    pub raw_query: Option<&'a str>,
    pub query: &'a loc::Params,
}

/// Which pool a location is reached with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The kubelet pool: the kubelet client certificate, the kubelet CA.
    Kubelet,
    /// The kubelet client certificate, the kubelet's not verified (a log
    /// request's `insecureSkipTLSVerifyBackend`, as upstream).
    KubeletUnverified,
    /// The proxy pool: plain HTTP or unverified HTTPS, no identity.
    Proxy,
}

/// Where a connect request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// `https://host:port/path?query`; `None`: answer an empty body (the
    /// log of a pod no node runs, as upstream).
    pub url: Option<String>,
    pub via: Via,
    /// `exec`, `attach`, `portforward`: the request is an upgrade.
    pub stream: bool,
}

impl Kubelets {
    pub fn new(config: KubeletConfig) -> Result<Kubelets, String> {
        let kubelet = outbound::client(&Peer {
            trust: &config.trust,
            server_name: None,
            identity: config.identity.as_deref(),
        })?;
        let kubelet_unverified = outbound::client(&Peer {
            trust: &Trust::Insecure,
            server_name: None,
            identity: config.identity.as_deref(),
        })?;
        Ok(Kubelets {
            kubelet,
            kubelet_unverified,
            proxy: outbound::proxy_client()?,
            config,
        })
    }

    /// The pool of `via`.
    pub fn client(&self, via: Via) -> &HttpsClient {
        match via {
            Via::Kubelet => &self.kubelet,
            Via::KubeletUnverified => &self.kubelet_unverified,
            Via::Proxy => &self.proxy,
        }
    }

    /// `https://<address>:<port>` of node `name`'s kubelet.
    pub async fn node_base(&self, objects: &Objects, name: &str) -> Result<String, ApiError> {
        let nodes = resource(objects, "", "v1", "nodes")?;
        let node = objects.get(&nodes, None, name).await?;
        let (host, port) = loc::kubelet_address(
            &node,
            &self.config.preferred_address_types,
            self.config.default_port,
        )?;
        Ok(format!("https://{}", loc::join_host_port(&host, port)))
    }

    /// Where a connect request goes.
    pub async fn locate(
        &self,
        objects: &Objects,
        req: &ConnectRequest<'_>,
    ) -> Result<Location, ApiError> {
        let ConnectRequest {
            resource: resource_name,
            namespace: ns,
            id,
            sub,
            path,
            raw_query,
            query: q,
        } = *req;
        let with_query = |base: String| match raw_query.filter(|r| !r.is_empty()) {
            Some(r) => format!("{base}?{r}"),
            None => base,
        };
        match (resource_name, sub) {
            ("pods", "log") => {
                let pods = resource(objects, "", "v1", "pods")?;
                let pod = objects.get(&pods, ns, id).await?;
                let opts = LogOptions::parse(id, q)?;
                let container = loc::choose_container(&pod, &opts.container)?;
                let Ok(node) = loc::pod_node(&pod) else {
                    return Ok(Location {
                        url: None,
                        via: Via::Kubelet,
                        stream: false,
                    });
                };
                let base = self.node_base(objects, node).await?;
                Ok(Location {
                    url: Some(format!("{base}{}", loc::log_path(&pod, &container, &opts))),
                    via: if opts.insecure_skip_tls_verify_backend {
                        Via::KubeletUnverified
                    } else {
                        Via::Kubelet
                    },
                    stream: false,
                })
            }
            ("pods", "exec" | "attach" | "portforward") => {
                let kind = Stream::of(sub).expect("a stream subresource");
                let pods = resource(objects, "", "v1", "pods")?;
                let pod = objects.get(&pods, ns, id).await?;
                let path = loc::stream_path(kind, &pod, q)?;
                let base = self.node_base(objects, loc::pod_node(&pod)?).await?;
                Ok(Location {
                    url: Some(format!("{base}{path}")),
                    via: Via::Kubelet,
                    stream: true,
                })
            }
            ("pods", "proxy") => {
                let (scheme, name, port) = loc::split_scheme_name_port(id)
                    .ok_or_else(|| ApiError::BadRequest(format!("invalid pod request {id:?}")))?;
                let pods = resource(objects, "", "v1", "pods")?;
                let pod = objects.get(&pods, ns, name).await?;
                let base = loc::pod_proxy_base(&pod, scheme, port)?;
                Ok(Location {
                    url: Some(with_query(format!(
                        "{base}{}",
                        loc::proxy_rest(path, "pods", id)
                    ))),
                    via: Via::Proxy,
                    stream: false,
                })
            }
            ("nodes", "proxy") => {
                let (scheme, name, port) = loc::split_scheme_name_port(id)
                    .ok_or_else(|| ApiError::BadRequest(format!("invalid node request {id:?}")))?;
                let nodes = resource(objects, "", "v1", "nodes")?;
                let node = objects.get(&nodes, None, name).await?;
                let (host, kubelet_port) = loc::kubelet_address(
                    &node,
                    &self.config.preferred_address_types,
                    self.config.default_port,
                )?;
                let rest = loc::proxy_rest(path, "nodes", id);
                // The kubelet's port (or none) goes to the kubelet with its
                // client certificate; any other port with the proxy's.
                if port.is_empty() || port == kubelet_port.to_string() {
                    return Ok(Location {
                        url: Some(with_query(format!(
                            "https://{}{rest}",
                            loc::join_host_port(&host, kubelet_port)
                        ))),
                        via: Via::Kubelet,
                        stream: false,
                    });
                }
                let port: u16 = port
                    .parse()
                    .map_err(|_| ApiError::BadRequest(format!("invalid node request {id:?}")))?;
                let scheme = if scheme.is_empty() { "http" } else { scheme };
                Ok(Location {
                    url: Some(with_query(format!(
                        "{scheme}://{}{rest}",
                        loc::join_host_port(&host, port)
                    ))),
                    via: Via::Proxy,
                    stream: false,
                })
            }
            ("services", "proxy") => {
                let (scheme, name, port) = loc::split_scheme_name_port(id).ok_or_else(|| {
                    ApiError::BadRequest(format!("invalid service request {id:?}"))
                })?;
                let services = resource(objects, "", "v1", "services")?;
                let svc = objects.get(&services, ns, name).await?;
                let svc_port = loc::service_port(&svc, port)?;
                let slices = resource(objects, "discovery.k8s.io", "v1", "endpointslices")?;
                let selector = LabelSelector::parse(&format!("kubernetes.io/service-name={name}"))
                    .map_err(ApiError::BadRequest)?;
                let listed = objects
                    .list(
                        &slices,
                        ns,
                        &ListParams {
                            labels: selector,
                            ..Default::default()
                        },
                    )
                    .await?;
                let endpoint = loc::service_endpoint(&listed.items, svc_port).ok_or_else(|| {
                    ApiError::ServiceUnavailable(format!(
                        "no endpoints available for service {name:?}"
                    ))
                })?;
                let scheme = if scheme.is_empty() { "http" } else { scheme };
                Ok(Location {
                    url: Some(with_query(format!(
                        "{scheme}://{endpoint}{}",
                        loc::proxy_rest(path, "services", id)
                    ))),
                    via: Via::Proxy,
                    stream: false,
                })
            }
            _ => Err(ApiError::NotFound(Default::default())),
        }
    }
}

fn resource(
    objects: &Objects,
    group: &str,
    version: &str,
    plural: &str,
) -> Result<Arc<crate::resources::Resource>, ApiError> {
    objects
        .resources
        .get(group, version, plural)
        .ok_or_else(|| ApiError::Internal(format!("{plural} are not served")))
}
