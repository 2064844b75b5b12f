//! Plugin modules published as OCI artifacts (`spec.module.image`): the
//! wasm layer of an image, as Kubewarden (`kwctl push`), wasm-to-oci and
//! the CNCF wasm OCI artifact layout publish them, pulled with
//! **oci-client** (the OCI distribution API: token auth, manifest and blob
//! digests checked).
//!
//! [`Registries`] is the one place where an image reference becomes bytes,
//! with the server's registry settings:
//!
//! * **trust**: HTTPS verified against the public roots plus
//!   `--plugin-registry-ca-file`, plus the registry's own CAs from
//!   `--plugin-sources-file` (Kubewarden's `sources.yaml`:
//!   `source_authorities`); plain HTTP for `--insecure-plugin-registries`
//!   and the file's `insecure_sources`;
//! * **credentials**: the registry's entry in `--plugin-registry-config`
//!   (a docker `config.json`), or in a module's `spec.module.pullSecret`
//!   (a `kubernetes.io/dockerconfigjson` Secret), which wins.
//!
//! Certificates are parsed by [`crate::outbound::Trust`], as for every
//! other outbound connection; the connection itself is oci-client's (it
//! owns its HTTP client and takes roots, not a TLS config). Credentials
//! never leave this module: errors are redacted ([`Redact`]) before they
//! reach a status, a log or an event.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::Deserialize;

use crate::outbound::Trust;

/// Layer media types of a wasm module.
const WASM_LAYERS: &[&str] = &[
    // wasm-to-oci and Kubewarden's policies.
    "application/vnd.wasm.content.layer.v1+wasm",
    // The CNCF TAG runtime's wasm OCI artifact layout (wkg, oci-wasm).
    "application/wasm",
    "application/vnd.bytecodealliance.wasm.component.layer.v0+wasm",
];

/// Most bytes of a pulled module.
const MAX_MODULE_BYTES: usize = 256 << 20;

/// The server's registry settings: trust and credentials by registry.
#[derive(Default, Clone)]
pub struct Registries {
    /// Registries (`host[:port]`) pulled from over plain HTTP.
    insecure: Vec<String>,
    /// Roots every registry is trusted with, besides the public ones.
    roots: Vec<Vec<u8>>,
    /// More roots by registry (`host[:port]`).
    authorities: BTreeMap<String, Vec<Vec<u8>>>,
    /// Credentials by registry.
    credentials: DockerConfig,
}

/// Kubewarden's `sources.yaml` (YAML or JSON; every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sources {
    #[serde(default)]
    pub insecure_sources: Vec<String>,
    #[serde(default)]
    pub source_authorities: BTreeMap<String, Vec<SourceAuthority>>,
}

/// One CA of a registry in `sources.yaml`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum SourceAuthority {
    /// A certificate file, PEM or DER.
    Path { path: std::path::PathBuf },
    /// PEM certificates inline.
    Data { data: String },
}

impl Sources {
    /// Parses a sources file's text.
    pub fn parse(text: &str) -> Result<Sources, String> {
        serde_yaml::from_str(text).map_err(|e| e.to_string())
    }
}

impl Registries {
    /// Settings from the server's flags: `insecure` registries, a CA bundle
    /// for all, a sources file and a docker config file.
    pub fn from_files(
        insecure: &[String],
        ca_file: Option<&Path>,
        sources_file: Option<&Path>,
        config_file: Option<&Path>,
    ) -> Result<Registries, String> {
        let mut r = Registries {
            insecure: insecure.to_vec(),
            ..Default::default()
        };
        if let Some(path) = ca_file {
            let pem = read(path, "--plugin-registry-ca-file")?;
            r.roots = certificates(&pem)
                .map_err(|e| format!("--plugin-registry-ca-file {}: {e}", path.display()))?;
        }
        if let Some(path) = sources_file {
            let what = format!("--plugin-sources-file {}", path.display());
            let text = String::from_utf8(read(path, "--plugin-sources-file")?)
                .map_err(|_| format!("{what}: not UTF-8"))?;
            let sources = Sources::parse(&text).map_err(|e| format!("{what}: {e}"))?;
            r.insecure.extend(sources.insecure_sources);
            for (registry, cas) in sources.source_authorities {
                let mut certs = Vec::new();
                for ca in cas {
                    let bytes = match ca {
                        SourceAuthority::Path { path } => read(&path, &what)?,
                        SourceAuthority::Data { data } => data.into_bytes(),
                    };
                    certs
                        .extend(certificates(&bytes).map_err(|e| {
                            format!("{what}: source_authorities {registry:?}: {e}")
                        })?);
                }
                r.authorities.entry(registry).or_default().extend(certs);
            }
        }
        if let Some(path) = config_file {
            r.credentials = DockerConfig::parse(&read(path, "--plugin-registry-config")?)
                .map_err(|e| format!("--plugin-registry-config {}: {e}", path.display()))?;
        }
        Ok(r)
    }

    /// Pulls the wasm module of `image`, with the credentials of
    /// `pull_secret` (a docker config) first; the error says what failed,
    /// without credentials.
    pub async fn pull(
        &self,
        image: &str,
        pull_secret: Option<&DockerConfig>,
    ) -> Result<Vec<u8>, String> {
        let reference: Reference = image
            .parse()
            .map_err(|e| format!("spec.module.image {image:?}: {e}"))?;
        let registry = reference.resolve_registry().to_string();
        let credential = pull_secret
            .and_then(|c| c.find(&registry))
            .or_else(|| self.credentials.find(&registry));
        let redact = Redact::of(credential);
        let auth = credential.map_or(RegistryAuth::Anonymous, Credential::auth);
        let mut roots = self.roots.clone();
        if let Some(extra) = self
            .authorities
            .get(&registry)
            .or_else(|| self.authorities.get(reference.registry()))
        {
            roots.extend(extra.iter().cloned());
        }
        // reqwest's rustls takes the process's default provider: ring, as the
        // rest of the server uses (a second install is refused harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.insecure.clone()),
            extra_root_certificates: roots
                .into_iter()
                .map(|data| Certificate {
                    encoding: CertificateEncoding::Der,
                    data,
                })
                .collect(),
            ..Default::default()
        });
        let data = client
            .pull(&reference, &auth, WASM_LAYERS.to_vec())
            .await
            .map_err(|e| {
                let why = redact.apply(&error_chain(&e));
                format!("spec.module.image {image:?}: pulling: {why}{}", hint(&why))
            })?;
        let mut layers = data.layers.into_iter();
        match (layers.next(), layers.next()) {
            (Some(layer), None) if layer.data.len() <= MAX_MODULE_BYTES => Ok(layer.data.to_vec()),
            (Some(layer), None) => Err(format!(
                "spec.module.image {image:?}: the module is {} bytes, more than {MAX_MODULE_BYTES}",
                layer.data.len()
            )),
            (None, _) => Err(format!(
                "spec.module.image {image:?}: the image has no wasm layer"
            )),
            (Some(_), Some(_)) => Err(format!(
                "spec.module.image {image:?}: the image has more than one wasm layer"
            )),
        }
    }
}

fn read(path: &Path, flag: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// The DER certificates of a PEM bundle, or of one DER certificate.
fn certificates(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
        return if bytes.first() == Some(&0x30) {
            Ok(vec![bytes.to_vec()])
        } else {
            Err("neither PEM nor a DER certificate".into())
        };
    }
    match Trust::from_pem(bytes)? {
        Trust::Bundle(certs) => Ok(certs.into_iter().map(|c| c.to_vec()).collect()),
        Trust::Insecure => Ok(Vec::new()),
    }
}

/// An error and its sources, `: `-joined (a TLS failure's reason is
/// several sources deep in reqwest's error).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = inner.source();
    }
    s
}

/// What the operator can do about a failure, when it is a common one.
fn hint(why: &str) -> &'static str {
    let lower = why.to_ascii_lowercase();
    if lower.contains("unknownissuer") || lower.contains("invalid peer certificate") {
        " (the registry's certificate is not trusted: give its CA with \
         --plugin-registry-ca-file or in --plugin-sources-file)"
    } else if lower.contains("unauthorized")
        || lower.contains("not authorized")
        || lower.contains("401")
    {
        " (unauthorized: give credentials with --plugin-registry-config or \
         spec.module.pullSecret)"
    } else {
        ""
    }
}

/// Registry credentials by registry: a docker `config.json`, the
/// `.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` Secret.
#[derive(Default, Clone)]
pub struct DockerConfig {
    auths: BTreeMap<String, Credential>,
}

/// One registry's credentials.
#[derive(Clone)]
pub enum Credential {
    /// A user name and password (`auth`, or `username` and `password`).
    Basic(String, String),
    /// An `identitytoken` (a refresh token the registry's token service
    /// takes as the password, docker's user name `<token>` when none is
    /// given).
    IdentityToken(String, String),
    /// A `registrytoken`, sent to the registry as a bearer token.
    RegistryToken(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    auths: BTreeMap<String, RawAuth>,
}

#[derive(Deserialize)]
struct RawAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

impl DockerConfig {
    /// Parses a docker `config.json`; errors never quote its content.
    pub fn parse(json: &[u8]) -> Result<DockerConfig, String> {
        // serde_json's messages may quote values: name the place only.
        let raw: RawConfig = serde_json::from_slice(json).map_err(|e| {
            format!(
                "not a docker config.json ({:?} error at line {} column {})",
                e.classify(),
                e.line(),
                e.column()
            )
        })?;
        let mut auths = BTreeMap::new();
        for (key, a) in raw.auths {
            let registry = registry_of(&key);
            let credential = if let Some(token) = a.registrytoken.filter(|t| !t.is_empty()) {
                Credential::RegistryToken(token)
            } else if let Some(token) = a.identitytoken.filter(|t| !t.is_empty()) {
                Credential::IdentityToken(a.username.unwrap_or_else(|| "<token>".into()), token)
            } else if let Some(auth) = a.auth.filter(|a| !a.is_empty()) {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| format!("auths {key:?}: auth is not base64 of user:password"))?;
                let (user, password) = decoded
                    .split_once(':')
                    .ok_or_else(|| format!("auths {key:?}: auth is not base64 of user:password"))?;
                Credential::Basic(user.into(), password.into())
            } else if let (Some(user), Some(password)) = (a.username, a.password) {
                Credential::Basic(user, password)
            } else {
                return Err(format!(
                    "auths {key:?}: needs auth, username and password, identitytoken or registrytoken"
                ));
            };
            auths.insert(registry, credential);
        }
        Ok(DockerConfig { auths })
    }

    /// The credentials of `registry` (`host[:port]`, as oci-client resolves
    /// it: Docker Hub is `index.docker.io`).
    pub fn find(&self, registry: &str) -> Option<&Credential> {
        self.auths.get(registry).or_else(|| {
            const HUB: &[&str] = &["index.docker.io", "docker.io", "registry-1.docker.io"];
            if HUB.contains(&registry) {
                HUB.iter().find_map(|h| self.auths.get(*h))
            } else {
                None
            }
        })
    }
}

/// The registry (`host[:port]`) of a `config.json` key, which may be a URL
/// (`https://index.docker.io/v1/`).
fn registry_of(key: &str) -> String {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    rest.split('/').next().unwrap_or(rest).to_string()
}

impl Credential {
    fn auth(&self) -> RegistryAuth {
        match self {
            Credential::Basic(user, password) | Credential::IdentityToken(user, password) => {
                RegistryAuth::Basic(user.clone(), password.clone())
            }
            Credential::RegistryToken(token) => RegistryAuth::Bearer(token.clone()),
        }
    }
}

/// Removes credentials from text (a registry client's error may echo a
/// header or a token).
pub struct Redact(Vec<String>);

impl Redact {
    fn of(credential: Option<&Credential>) -> Redact {
        let mut secrets = Vec::new();
        match credential {
            Some(Credential::Basic(user, password))
            | Some(Credential::IdentityToken(user, password)) => {
                secrets.push(password.clone());
                let b64 = base64::engine::general_purpose::STANDARD;
                secrets.push(b64.encode(format!("{user}:{password}")));
            }
            Some(Credential::RegistryToken(token)) => secrets.push(token.clone()),
            None => {}
        }
        secrets.retain(|s| !s.is_empty());
        Redact(secrets)
    }

    /// `text` with every credential replaced by `<redacted>`.
    pub fn apply(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_string(), |t, s| t.replace(s.as_str(), "<redacted>"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_forms() {
        let json = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNzOndvcmQ="},
            "reg.example:5000": {"username": "u", "password": "p"},
            "tok.example": {"identitytoken": "refresh"},
            "bearer.example": {"registrytoken": "bearer"}}}"#;
        let c = DockerConfig::parse(json).unwrap();
        assert!(
            matches!(c.find("index.docker.io"), Some(Credential::Basic(u, p)) if u == "user" && p == "pass:word")
        );
        assert!(
            matches!(c.find("reg.example:5000"), Some(Credential::Basic(u, p)) if u == "u" && p == "p")
        );
        assert!(
            matches!(c.find("tok.example"), Some(Credential::IdentityToken(u, t)) if u == "<token>" && t == "refresh")
        );
        assert!(
            matches!(c.find("bearer.example"), Some(Credential::RegistryToken(t)) if t == "bearer")
        );
        assert!(c.find("other.example").is_none());
    }

    #[test]
    fn bad_configs_never_quote_secrets() {
        for json in [
            br#"{"auths": {"r": {"auth": "c2VjcmV0"}}}"#.as_slice(),
            br#"{"auths": {"r": {"password": "secret"}}}"#.as_slice(),
            br#"{"auths": {"r": {"auth": "secret!"}}"#.as_slice(),
        ] {
            let e = DockerConfig::parse(json).err().unwrap();
            assert!(!e.contains("secret") && !e.contains("c2VjcmV0"), "{e}");
        }
    }

    #[test]
    fn redaction() {
        let r = Redact::of(Some(&Credential::Basic("u".into(), "hunter2".into())));
        assert_eq!(
            r.apply("Basic dTpodW50ZXIy failed for hunter2"),
            "Basic <redacted> failed for <redacted>"
        );
    }

    #[test]
    fn sources_file() {
        let s = Sources::parse(
            "insecure_sources: [\"a:5000\"]\nsource_authorities:\n  \"b:5500\":\n    - type: Data\n      data: x\n    - type: Path\n      path: /ca.pem\n",
        )
        .unwrap();
        assert_eq!(s.insecure_sources, ["a:5000"]);
        assert_eq!(s.source_authorities["b:5500"].len(), 2);
        let s = Sources::parse(r#"{"source_authorities": {"h": [{"type": "Data", "data": "p"}]}}"#)
            .unwrap();
        assert!(s.insecure_sources.is_empty());
        assert!(Sources::parse("insecure_sources: [a]\nother: 1\n").is_err());
    }

    #[test]
    fn certificate_forms() {
        let cert = rcgen::generate_simple_self_signed(vec!["r".into()]).unwrap();
        let pem = format!("{}{}", cert.cert.pem(), cert.cert.pem());
        assert_eq!(certificates(pem.as_bytes()).unwrap().len(), 2);
        assert_eq!(certificates(cert.cert.der()).unwrap().len(), 1);
        assert!(certificates(b"junk").is_err());
    }
}
