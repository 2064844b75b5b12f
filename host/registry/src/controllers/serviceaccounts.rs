//! Upstream's service-account controller and root-CA publisher: every
//! active namespace has a `default` ServiceAccount and a `kube-root-ca.crt`
//! ConfigMap holding the cluster CA (`ca.crt`), recreated when deleted and
//! kept equal to the CA. Each runs as its own ServiceAccount with its
//! upstream role; both are singletons keyed by namespace.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile};
use serde_json::{Value, json};
use std::sync::Arc;
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

pub const SA_CONTROLLER: &str = "service-account-controller";
pub const ROOT_CA_PUBLISHER: &str = "root-ca-cert-publisher";
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// What each namespace gets.
enum Publish {
    DefaultServiceAccount,
    RootCa(String),
}

struct Publisher {
    client: Client,
    what: Publish,
}

impl Publisher {
    /// Whether `ns` exists and is not terminating.
    async fn active(&self, ns: &str) -> Result<bool> {
        let info = self
            .client
            .objects
            .resources
            .builtin("", "v1", "namespaces");
        match self.client.objects.get(&info, None, ns).await {
            Ok(n) => Ok(meta::str_field(&n, "deletionTimestamp").is_none()),
            Err(ApiError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[async_trait::async_trait]
impl Reconcile for Publisher {
    type Key = String;

    async fn reconcile(&self, ns: &String) -> Result<Action> {
        if !self.active(ns).await? {
            return Ok(Action::Done);
        }
        let objects = &self.client.objects;
        let result = match &self.what {
            Publish::DefaultServiceAccount => {
                let info = objects.resources.builtin("", "v1", "serviceaccounts");
                match objects.get(&info, Some(ns), "default").await {
                    Ok(_) => return Ok(Action::Done),
                    Err(ApiError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
                let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": ns}});
                self.client.create(&info, Some(ns), sa).await.map(drop)
            }
            Publish::RootCa(ca) => {
                let info = objects.resources.builtin("", "v1", "configmaps");
                let data = json!({"ca.crt": ca});
                match objects.get(&info, Some(ns), ROOT_CA_CONFIGMAP).await {
                    Ok(cm) if cm["data"] == data => return Ok(Action::Done),
                    Ok(_) => self
                        .client
                        .update(&info, Some(ns), ROOT_CA_CONFIGMAP, None, |cur| {
                            let mut new: Value = cur.clone();
                            new["data"] = data.clone();
                            Ok(new)
                        })
                        .await
                        .map(drop),
                    Err(ApiError::NotFound(_)) => {
                        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": ns,
                                "annotations": {"kubernetes.io/description": DESCRIPTION}},
                            "data": data});
                        self.client.create(&info, Some(ns), cm).await.map(drop)
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        match result {
            // Raced with another writer, or the namespace went: look again.
            Ok(()) | Err(ApiError::AlreadyExists(_)) => Ok(Action::Done),
            Err(ApiError::Forbidden(..)) if !self.active(ns).await? => Ok(Action::Done),
            Err(e) => Err(e),
        }
    }
}

/// Runs both publishers while this replica leads. `ca_pem` is the cluster
/// CA the ConfigMaps carry.
pub fn spawn(
    sa_client: Client,
    ca_client: Client,
    ca_pem: String,
    leadership: Leadership,
    metrics: &Metrics,
) {
    for (client, what, watched, name) in [
        (
            sa_client,
            Publish::DefaultServiceAccount,
            "serviceaccounts",
            "default",
        ),
        (
            ca_client,
            Publish::RootCa(ca_pem),
            "configmaps",
            ROOT_CA_CONFIGMAP,
        ),
    ] {
        let queue: Arc<Queue<String>> = Queue::new(&client.name().replace('-', "_"));
        metrics.register(queue.clone());
        let publisher = Arc::new(Publisher { client, what });
        tokio::spawn(leadership.clone().run_while_leading(move || {
            let (queue, publisher) = (queue.clone(), publisher.clone());
            async move {
                let objects = publisher.client.objects.clone();
                let namespaces = objects.resources.builtin("", "v1", "namespaces");
                let children = objects.resources.builtin("", "v1", watched);
                let q1 = queue.clone();
                let follow_ns = objects.follow(
                    &namespaces,
                    |_| {},
                    move |ns, deleted| {
                        if !deleted && meta::str_field(&ns, "deletionTimestamp").is_none() {
                            q1.add(meta::name(&ns).unwrap_or_default().to_string());
                        }
                        async {}
                    },
                );
                let q2 = queue.clone();
                let suffix = format!("/{name}");
                let follow_children = objects.follow_keys(
                    &children,
                    move |key| key.ends_with(&suffix),
                    |_| {},
                    move |obj, _| {
                        if meta::name(&obj) == Some(name) {
                            q2.add(meta::namespace(&obj).unwrap_or_default().to_string());
                        }
                        async {}
                    },
                );
                let work = super::run(queue, publisher, 2);
                tokio::join!(follow_ns, follow_children, work);
            }
        }));
    }
}
