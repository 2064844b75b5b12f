//! Node bootstrap's public half, as kubeadm and upstream's bootstrap
//! signer set it up: `kube-public/cluster-info` holds a `kubeconfig` with
//! the cluster CA and the server's URL (readable anonymously, published by
//! the server when missing, as `kubeadm init` does), and the **bootstrap
//! signer** adds a detached JWS `jws-kubeconfig-<token-id>` of it for every
//! valid bootstrap token with `usage-bootstrap-signing`, and removes the
//! signatures of tokens that are gone or expired. A joining node that holds
//! only a token reads the kubeconfig without trusting the connection and
//! checks it against the signature its token makes.

use super::leader::Leadership;
use super::queue::Queue;
use super::{Action, Client, Metrics, Reconcile};
use crate::options::WriteOptions;
use crate::store::Objects;
use base64::Engine;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_api::{ApiError, meta};

type Result<T, E = ApiError> = std::result::Result<T, E>;

pub const NAME: &str = "bootstrap-signer";
pub const CONTROLLER: &str = "bootstrap-signer-controller";
pub const NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO: &str = "cluster-info";
const SIGNATURE_PREFIX: &str = "jws-kubeconfig-";
const TOKEN_TYPE: &str = "bootstrap.kubernetes.io/token";

/// The kubeconfig `cluster-info` carries (kubeadm's: one unnamed cluster).
pub fn kubeconfig(server: &str, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
    )
}

/// The detached compact JWS (HS256, `kid` = token id) of `content` keyed
/// by the token's secret: `<header>..<signature>`, as upstream's
/// `ComputeDetachedSignature`.
pub fn detached_signature(content: &str, token_id: &str, token_secret: &str) -> String {
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let header = b64(format!(r#"{{"alg":"HS256","kid":"{token_id}"}}"#).as_bytes());
    let input = format!("{header}.{}", b64(content.as_bytes()));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token_secret.as_bytes());
    let tag = ring::hmac::sign(&key, input.as_bytes());
    format!("{header}..{}", b64(tag.as_ref()))
}

/// A bootstrap token that signs: `(id, secret, expires)`, or `None`.
fn signing_token(
    secret: &Value,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<(String, String, Option<chrono::DateTime<chrono::Utc>>)> {
    if secret["type"] != TOKEN_TYPE {
        return None;
    }
    let data = |k: &str| {
        secret["data"][k].as_str().and_then(|v| {
            base64::engine::general_purpose::STANDARD
                .decode(v)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
        })
    };
    let id = meta::name(secret)?.strip_prefix("bootstrap-token-")?;
    let id_ok = id.len() == 6
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !id_ok || data("token-id").as_deref() != Some(id) {
        return None;
    }
    let token_secret = data("token-secret").filter(|s| !s.is_empty())?;
    if data("usage-bootstrap-signing").as_deref() != Some("true") {
        return None;
    }
    let expires = match data("expiration") {
        None => None,
        Some(e) => {
            let at = chrono::DateTime::parse_from_rfc3339(&e).ok()?.to_utc();
            if at <= now {
                return None;
            }
            Some(at)
        }
    };
    Some((id.to_string(), token_secret, expires))
}

struct BootstrapSigner {
    client: Client,
}

#[async_trait::async_trait]
impl Reconcile for BootstrapSigner {
    type Key = String;

    async fn reconcile(&self, _key: &String) -> Result<Action> {
        let objects = &self.client.objects;
        let configmaps = objects.resources.builtin("", "v1", "configmaps");
        let cm = match self
            .client
            .get(&configmaps, Some(NAMESPACE), CLUSTER_INFO)
            .await
        {
            Ok(cm) => cm,
            Err(ApiError::NotFound(_)) => return Ok(Action::Done),
            Err(e) => return Err(e),
        };
        let Some(content) = cm["data"]["kubeconfig"].as_str().map(String::from) else {
            tracing::debug!("cluster-info has no kubeconfig to sign");
            return Ok(Action::Done);
        };
        let secrets = objects.resources.builtin("", "v1", "secrets");
        let listed = self
            .client
            .list(&secrets, Some("kube-system"), &Default::default())
            .await?;
        let now = chrono::Utc::now();
        let mut signatures = Map::new();
        let mut next_expiry: Option<chrono::DateTime<chrono::Utc>> = None;
        for s in &listed.items {
            let Some((id, token_secret, expires)) = signing_token(s, now) else {
                continue;
            };
            let key = format!("{SIGNATURE_PREFIX}{id}");
            if signatures.contains_key(&key) {
                continue;
            }
            signatures.insert(key, json!(detached_signature(&content, &id, &token_secret)));
            if let Some(at) = expires {
                next_expiry = Some(next_expiry.map_or(at, |n| n.min(at)));
            }
        }
        let signed = |data: &Value| -> Value {
            let mut out: Map<String, Value> = data
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| !k.starts_with(SIGNATURE_PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            out.extend(signatures.clone());
            Value::Object(out)
        };
        if signed(&cm["data"]) != cm["data"] {
            let written = self
                .client
                .update(&configmaps, Some(NAMESPACE), CLUSTER_INFO, None, |cur| {
                    let mut new = cur.clone();
                    new["data"] = signed(&cur["data"]);
                    Ok(new)
                })
                .await;
            match written {
                Ok(_) => tracing::info!(tokens = signatures.len(), "cluster-info signed"),
                Err(ApiError::NotFound(_)) => return Ok(Action::Done),
                Err(e) => return Err(e),
            }
        }
        // A token's signature goes when it expires, whether or not the
        // token cleaner has deleted it yet.
        Ok(match next_expiry {
            Some(at) => Action::RequeueAfter(
                (at - now).to_std().unwrap_or_default() + Duration::from_secs(1),
            ),
            None => Action::Done,
        })
    }
}

/// Creates `kube-public/cluster-info` unless it exists (kubeadm's init
/// step; an existing one is the cluster's and is left alone). Retried
/// until the store answers.
pub async fn publish_cluster_info(objects: Objects, kubeconfig: String) {
    let info = objects.resources.builtin("", "v1", "configmaps");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": CLUSTER_INFO, "namespace": NAMESPACE},
        "data": {"kubeconfig": kubeconfig}});
    let opts = WriteOptions::system("cluster-info");
    for _ in 0..60 {
        match objects
            .create(&info, Some(NAMESPACE), cm.clone(), &opts)
            .await
        {
            Ok(_) | Err(ApiError::AlreadyExists(_)) => return,
            Err(e) => {
                tracing::debug!(error = %e, "could not publish cluster-info; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Runs the bootstrap signer while this replica leads.
pub fn spawn(client: Client, leadership: Leadership, metrics: &Metrics) {
    let queue: Arc<Queue<String>> = Queue::new("bootstrap_signer_queue");
    metrics.register(queue.clone());
    let signer = Arc::new(BootstrapSigner { client });
    tokio::spawn(leadership.run_while_leading(move || {
        let (queue, signer) = (queue.clone(), signer.clone());
        async move {
            let objects = signer.client.objects.clone();
            let key = || format!("{NAMESPACE}/{CLUSTER_INFO}");
            let secrets = objects.resources.builtin("", "v1", "secrets");
            let configmaps = objects.resources.builtin("", "v1", "configmaps");
            let q1 = queue.clone();
            let system = secrets.collection_key(Some("kube-system"));
            let follow_secrets = objects.follow_keys(
                &secrets,
                move |key| key.contains(&system),
                |_| {},
                move |s, _| {
                    if meta::namespace(&s) == Some("kube-system") && s["type"] == TOKEN_TYPE {
                        q1.add(key());
                    }
                    async {}
                },
            );
            let q2 = queue.clone();
            let info_key = configmaps.object_key(Some(NAMESPACE), CLUSTER_INFO);
            let follow_info = objects.follow_keys(
                &configmaps,
                move |key| key.ends_with(&info_key),
                |_| {},
                move |cm, _| {
                    if meta::namespace(&cm) == Some(NAMESPACE)
                        && meta::name(&cm) == Some(CLUSTER_INFO)
                    {
                        q2.add(key());
                    }
                    async {}
                },
            );
            queue.add(key());
            let work = super::run(queue, signer, 1);
            tokio::join!(follow_secrets, follow_info, work);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_upstream_test_vector() {
        // From cluster-bootstrap's jws_test.go.
        assert_eq!(
            detached_signature(
                "Hello from the other side. I must have called a thousand times.",
                "joshua",
                "my voice is my passcode"
            ),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
        );
    }

    #[test]
    fn only_valid_signing_tokens_count() {
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let token = |name: &str, id: &str, signing: &str, expiration: Option<&str>| {
            let mut data = json!({"token-id": b(id), "token-secret": b("0123456789abcdef"),
                "usage-bootstrap-signing": b(signing)});
            if let Some(e) = expiration {
                data["expiration"] = json!(b(e));
            }
            json!({"type": TOKEN_TYPE, "metadata": {"name": name}, "data": data})
        };
        let now = chrono::Utc::now();
        assert!(
            signing_token(
                &token("bootstrap-token-abcdef", "abcdef", "true", None),
                now
            )
            .is_some()
        );
        assert!(
            signing_token(
                &token("bootstrap-token-abcdef", "abcdeg", "true", None),
                now
            )
            .is_none()
        );
        assert!(
            signing_token(
                &token("bootstrap-token-abcdef", "abcdef", "false", None),
                now
            )
            .is_none()
        );
        assert!(
            signing_token(
                &token("bootstrap-token-ABCDEF", "ABCDEF", "true", None),
                now
            )
            .is_none()
        );
        let past = token(
            "bootstrap-token-abcdef",
            "abcdef",
            "true",
            Some("2000-01-01T00:00:00Z"),
        );
        assert!(signing_token(&past, now).is_none());
        let future = token(
            "bootstrap-token-abcdef",
            "abcdef",
            "true",
            Some("2999-01-01T00:00:00Z"),
        );
        assert!(signing_token(&future, now).unwrap().2.is_some());
    }
}
