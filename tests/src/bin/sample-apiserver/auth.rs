//! Delegated authentication and authorization, as `k8s.io/apiserver`'s
//! `DelegatingAuthenticationOptions` and `DelegatingAuthorizationOptions`
//! set them up: the request-header authenticator
//! (`authentication/request/headerrequest`), a `TokenReview` for bearer
//! tokens, and a `SubjectAccessReview` per request, all against the main
//! server named by `--kubeconfig`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rustls::DistinguishedName;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;

use crate::api::{GROUP, RequestInfo, VERSION};
use crate::{Args, tls};

/// How long TokenReview and SubjectAccessReview answers are reused.
const CACHE_TTL: Duration = Duration::from_secs(10);
/// How often the authentication ConfigMap is read again.
const RELOAD_INTERVAL: Duration = Duration::from_secs(10);
/// How long startup waits for the authentication ConfigMap.
const STARTUP_WAIT: Duration = Duration::from_secs(30);

/// An authenticated user.
#[derive(Clone, Debug)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The headers the front proxy puts its user in.
#[derive(Clone)]
pub struct HeaderNames {
    pub username: Vec<String>,
    pub group: Vec<String>,
    pub extra_prefix: Vec<String>,
    pub uid: Vec<String>,
}

impl Default for HeaderNames {
    fn default() -> Self {
        Self {
            username: vec!["X-Remote-User".into()],
            group: vec!["X-Remote-Group".into()],
            extra_prefix: vec!["X-Remote-Extra-".into()],
            uid: Vec::new(),
        }
    }
}

/// The request-header authenticator's configuration at one moment.
struct RequestHeader {
    /// Verifies the front proxy's certificate; `None` without a CA.
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    hints: Vec<DistinguishedName>,
    /// Allowed common names; empty allows any.
    allowed_names: Vec<String>,
    headers: HeaderNames,
}

impl RequestHeader {
    fn new(
        ca_pem: Option<&str>,
        allowed_names: Vec<String>,
        headers: HeaderNames,
        provider: &Arc<CryptoProvider>,
    ) -> anyhow::Result<Self> {
        let (verifier, hints) = match ca_pem {
            Some(pem) => {
                let (v, h) = tls::client_verifier(pem, provider.clone())?;
                (Some(v), h)
            }
            None => (None, Vec::new()),
        };
        Ok(Self {
            verifier,
            hints,
            allowed_names,
            headers,
        })
    }

    /// Reads ConfigMap `kube-system/extension-apiserver-authentication`,
    /// which the main server keeps (lists are JSON arrays in strings).
    async fn from_configmap(
        client: &kube::Client,
        provider: &Arc<CryptoProvider>,
    ) -> anyhow::Result<Self> {
        let cm = Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
            .get("extension-apiserver-authentication")
            .await?;
        let data = cm.data.unwrap_or_default();
        let list = |key: &str| -> anyhow::Result<Vec<String>> {
            data.get(key)
                .map_or(Ok(Vec::new()), |s| serde_json::from_str(s))
                .with_context(|| format!("{key} is not a JSON array of strings"))
        };
        let headers = HeaderNames {
            username: list("requestheader-username-headers")?,
            group: list("requestheader-group-headers")?,
            extra_prefix: list("requestheader-extra-headers-prefix")?,
            uid: list("requestheader-uid-headers")?,
        };
        let ca = data.get("requestheader-client-ca-file").map(String::as_str);
        Self::new(ca, list("requestheader-allowed-names")?, headers, provider)
    }

    /// The user the headers name, if the peer's certificate is the front
    /// proxy's and a username header is set.
    fn authenticate(&self, headers: &HeaderMap, peer: &[CertificateDer<'_>]) -> Option<User> {
        if !tls::verified(self.verifier.as_deref()?, peer) {
            return None;
        }
        if !self.allowed_names.is_empty() {
            let cn = tls::common_name(&peer[0])?;
            if !self.allowed_names.contains(&cn) {
                return None;
            }
        }
        // Like Go's `Header.Get`: the first value of the first header set.
        let first = |names: &[String]| {
            names.iter().find_map(|h| {
                headers
                    .get(h.as_str())
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| !v.is_empty())
            })
        };
        let name = first(&self.headers.username)?.to_owned();
        let groups = self
            .headers
            .group
            .iter()
            .flat_map(|h| headers.get_all(h.as_str()));
        let mut extra = BTreeMap::<String, Vec<String>>::new();
        for (header, value) in headers {
            for prefix in &self.headers.extra_prefix {
                let Some(key) = header
                    .as_str()
                    .strip_prefix(prefix.to_ascii_lowercase().as_str())
                else {
                    continue;
                };
                let key = percent_encoding::percent_decode_str(key)
                    .decode_utf8_lossy()
                    .into_owned();
                extra
                    .entry(key)
                    .or_default()
                    .extend(value.to_str().ok().map(str::to_owned));
            }
        }
        Some(User {
            name,
            uid: first(&self.headers.uid).unwrap_or_default().to_owned(),
            groups: groups
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect(),
            extra,
        })
    }
}

/// An authorization answer.
#[derive(Clone)]
pub enum Decision {
    Allow,
    /// Denied, with the authorizer's reason (maybe empty).
    Deny(String),
    /// The authorizer could not be asked.
    Error(String),
}

/// Answers remembered for [`CACHE_TTL`].
struct TtlCache<V>(Mutex<HashMap<String, (Instant, V)>>);

impl<V: Clone> TtlCache<V> {
    fn new() -> Self {
        Self(Mutex::new(HashMap::new()))
    }

    fn get(&self, key: &str) -> Option<V> {
        let map = self.0.lock().unwrap();
        map.get(key)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: String, value: V) {
        let mut map = self.0.lock().unwrap();
        map.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
        map.insert(key, (Instant::now(), value));
    }
}

/// Authentication and authorization state.
pub struct Auth {
    requestheader: Arc<RwLock<Arc<RequestHeader>>>,
    /// A client of the main server (`--kubeconfig`).
    client: Option<kube::Client>,
    always_allow: bool,
    tokens: TtlCache<Option<User>>,
    decisions: TtlCache<Decision>,
}

impl Auth {
    /// With `--kubeconfig`, waits for the authentication ConfigMap and
    /// re-reads it in the background; otherwise takes the flags.
    pub async fn start(args: &Args, provider: Arc<CryptoProvider>) -> anyhow::Result<Self> {
        let client = match &args.kubeconfig {
            Some(path) => Some(kube_client(path).await?),
            None => None,
        };
        let requestheader = match &client {
            Some(client) => {
                let deadline = Instant::now() + STARTUP_WAIT;
                let initial = loop {
                    match RequestHeader::from_configmap(client, &provider).await {
                        Ok(rh) => break rh,
                        Err(_) if Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(500)).await
                        }
                        Err(e) => {
                            return Err(e.context(
                                "reading kube-system/extension-apiserver-authentication",
                            ));
                        }
                    }
                };
                let slot = Arc::new(RwLock::new(Arc::new(initial)));
                let (client, slot2) = (client.clone(), slot.clone());
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(RELOAD_INTERVAL).await;
                        match RequestHeader::from_configmap(&client, &provider).await {
                            Ok(rh) => *slot2.write().unwrap() = Arc::new(rh),
                            Err(e) => eprintln!(
                                "sample-apiserver: re-reading the authentication ConfigMap: {e:#}"
                            ),
                        }
                    }
                });
                slot
            }
            None => {
                let ca = match &args.requestheader_client_ca_file {
                    Some(p) => {
                        Some(std::fs::read_to_string(p).with_context(|| p.display().to_string())?)
                    }
                    None => None,
                };
                let rh = RequestHeader::new(
                    ca.as_deref(),
                    args.requestheader_allowed_names.clone(),
                    args.headers.clone(),
                    &provider,
                )?;
                Arc::new(RwLock::new(Arc::new(rh)))
            }
        };
        Ok(Self {
            requestheader,
            client,
            always_allow: args.authorization_always_allow,
            tokens: TtlCache::new(),
            decisions: TtlCache::new(),
        })
    }

    /// The subjects of the current request-header CA, for the TLS layer.
    pub fn client_ca_hints(&self) -> Vec<DistinguishedName> {
        self.requestheader.read().unwrap().hints.clone()
    }

    /// The request's user: from the front proxy's headers, else from a
    /// bearer token by `TokenReview`; `None` is a 401.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: &[CertificateDer<'_>],
    ) -> Option<User> {
        let rh = self.requestheader.read().unwrap().clone();
        if let Some(user) = rh.authenticate(headers, peer) {
            return Some(user);
        }
        let (scheme, token) = headers
            .get(http::header::AUTHORIZATION)?
            .to_str()
            .ok()?
            .split_once(' ')?;
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return None;
        }
        if let Some(user) = self.tokens.get(token) {
            return user;
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        let user = match Api::<TokenReview>::all(self.client.clone()?)
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(review) => review
                .status
                .filter(|s| s.authenticated == Some(true))
                .and_then(|s| s.user)
                .map(|u| User {
                    name: u.username.unwrap_or_default(),
                    uid: u.uid.unwrap_or_default(),
                    groups: u.groups.unwrap_or_default(),
                    extra: u.extra.unwrap_or_default(),
                }),
            Err(e) => {
                eprintln!("sample-apiserver: TokenReview: {e}");
                return None;
            }
        };
        self.tokens.put(token.to_owned(), user.clone());
        user
    }

    /// Asks the main server whether `user` may do what `info` describes.
    pub async fn authorize(&self, user: &User, info: &RequestInfo) -> Decision {
        if self.always_allow {
            return Decision::Allow;
        }
        let Some(client) = &self.client else {
            return Decision::Error("no authorizer configured".into());
        };
        let spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()),
            resource_attributes: info.resource.as_ref().map(|r| ResourceAttributes {
                group: Some(GROUP.into()),
                version: Some(VERSION.into()),
                resource: Some(r.resource.clone()),
                subresource: r.subresource.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                verb: Some(info.verb.clone()),
                ..Default::default()
            }),
            non_resource_attributes: info.resource.is_none().then(|| NonResourceAttributes {
                path: Some(info.path.clone()),
                verb: Some(info.verb.clone()),
            }),
        };
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(decision) = self.decisions.get(&key) {
            return decision;
        }
        let review = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let decision = match Api::<SubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(review) => {
                let status = review.status.unwrap_or_default();
                if status.allowed {
                    Decision::Allow
                } else {
                    Decision::Deny(status.reason.unwrap_or_default())
                }
            }
            Err(e) => return Decision::Error(e.to_string()),
        };
        self.decisions.put(key, decision.clone());
        decision
    }
}

async fn kube_client(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path).with_context(|| path.display().to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}
