//! kube-apiserver's `ClientCARegistrationHook`: the ConfigMap
//! `kube-system/extension-apiserver-authentication`, from which extension
//! API servers learn which client CA this server trusts (`client-ca-file`)
//! and how it proxies to them (`requestheader-client-ca-file`,
//! `requestheader-allowed-names`, the header names, JSON arrays as
//! upstream writes them). Every replica writes it at start and puts it back
//! whenever it is changed or deleted.

use super::Client;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use wasm_apiserver_api::rbac::EXTENSION_AUTH_CONFIGMAP;
use wasm_apiserver_api::{ApiError, meta};

pub const NAME: &str = "extension-apiserver-authentication-publisher";

/// What the server publishes.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// The client CAs (PEM).
    pub client_ca: String,
    /// The request-header CA and its settings, when front proxies are
    /// accepted.
    pub request_header: Option<RequestHeader>,
}

#[derive(Debug, Clone, Default)]
pub struct RequestHeader {
    pub client_ca: String,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefix: Vec<String>,
}

impl Published {
    /// The ConfigMap's `data`.
    pub fn data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        data.insert("client-ca-file".to_string(), self.client_ca.clone());
        if let Some(rh) = &self.request_header {
            let list = |v: &[String]| json!(v).to_string();
            data.insert("requestheader-client-ca-file".into(), rh.client_ca.clone());
            data.insert(
                "requestheader-allowed-names".into(),
                list(&rh.allowed_names),
            );
            data.insert(
                "requestheader-username-headers".into(),
                list(&rh.username_headers),
            );
            data.insert("requestheader-uid-headers".into(), list(&rh.uid_headers));
            data.insert(
                "requestheader-group-headers".into(),
                list(&rh.group_headers),
            );
            data.insert(
                "requestheader-extra-headers-prefix".into(),
                list(&rh.extra_headers_prefix),
            );
        }
        data
    }
}

/// Writes the ConfigMap unless it already holds `data`.
async fn ensure(client: &Client, data: &Value) -> Result<(), ApiError> {
    let info = client.objects.resources.builtin("", "v1", "configmaps");
    match client
        .get(&info, Some("kube-system"), EXTENSION_AUTH_CONFIGMAP)
        .await
    {
        Ok(cm) if cm["data"] == *data => Ok(()),
        Ok(_) => client
            .update(
                &info,
                Some("kube-system"),
                EXTENSION_AUTH_CONFIGMAP,
                None,
                |cur| {
                    let mut new = cur.clone();
                    new["data"] = data.clone();
                    Ok(new)
                },
            )
            .await
            .map(drop),
        Err(ApiError::NotFound(_)) => {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": EXTENSION_AUTH_CONFIGMAP, "namespace": "kube-system"},
                "data": data});
            match client.create(&info, Some("kube-system"), cm).await {
                Ok(_) | Err(ApiError::AlreadyExists(_)) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Publishes `what` now and keeps it there.
pub fn spawn(client: Client, what: Published) {
    let data = json!(what.data());
    tokio::spawn(async move {
        let info = client.objects.resources.builtin("", "v1", "configmaps");
        let (changed_tx, mut changed) = tokio::sync::mpsc::unbounded_channel::<()>();
        let suffix = format!("/kube-system/{EXTENSION_AUTH_CONFIGMAP}");
        let objects = client.objects.clone();
        let follow = objects.follow_keys(
            &info,
            move |key| key.ends_with(&suffix),
            |_| {},
            move |cm, _| {
                if meta::name(&cm) == Some(EXTENSION_AUTH_CONFIGMAP)
                    && meta::namespace(&cm) == Some("kube-system")
                {
                    let _ = changed_tx.send(());
                }
                async {}
            },
        );
        let keep = async {
            loop {
                if let Err(e) = ensure(&client, &data).await {
                    tracing::warn!(error = %e, "publishing {EXTENSION_AUTH_CONFIGMAP} failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                // Look again when it changes, and now and then.
                let _ = tokio::time::timeout(Duration::from_secs(60), changed.recv()).await;
            }
        };
        tokio::join!(follow, keep);
    });
}
