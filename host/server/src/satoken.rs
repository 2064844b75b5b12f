//! ServiceAccount tokens: ES256-signed JWTs issued through the
//! `serviceaccounts/<name>/token` subresource (TokenRequest, what `kubectl
//! create token` calls) and accepted as bearer tokens while the
//! ServiceAccount they name still exists with the same uid.

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The default token issuer (`iss`), also the audience API tokens carry.
pub const ISSUER: &str = "https://wasm-apiserver.local";

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

/// Who a valid token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSubject {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Signs and verifies ServiceAccount tokens.
///
/// The signing key (ECDSA P-256, PKCS#8 PEM) is
/// `--service-account-signing-key-file`, else `<data-dir>/pki/sa.key`
/// (created on first start); replicas must share it. Tokens verify against
/// its public key and against every `--service-account-key-file` key (key
/// rotation). Tokens are issued by the first `--service-account-issuer`
/// and for it as audience; every listed issuer is accepted.
pub struct TokenSigner {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    /// Uncompressed P-256 points that verify tokens (the signing key's first).
    verifying: Vec<Vec<u8>>,
    /// Accepted issuers; the first issues.
    issuers: Vec<String>,
}

/// Where the keys and issuers come from (the `--service-account-*` flags).
#[derive(Debug, Clone, Default)]
pub struct SignerConfig {
    pub signing_key_file: Option<PathBuf>,
    pub key_files: Vec<PathBuf>,
    pub issuers: Vec<String>,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSigner")
    }
}

impl TokenSigner {
    /// The signer with the key in `<data-dir>/pki/sa.key` (created if
    /// missing) and the default issuer.
    pub fn load_or_create(data_dir: &Path) -> anyhow::Result<Self> {
        Self::from_config(data_dir, &SignerConfig::default())
    }

    /// The signer `config` describes; without a signing key file, the key in
    /// `<data-dir>/pki/sa.key` (created if missing).
    pub fn from_config(data_dir: &Path, config: &SignerConfig) -> anyhow::Result<Self> {
        let path = match &config.signing_key_file {
            Some(path) => path.clone(),
            None => {
                let path = data_dir.join("pki/sa.key");
                if !path.exists() {
                    let key = rcgen::KeyPair::generate()?;
                    std::fs::create_dir_all(data_dir.join("pki"))?;
                    // Readable by the server's user only, as the TLS keys.
                    crate::tls::write_secret(&path, &key.serialize_pem())?;
                }
                path
            }
        };
        let named = |e: String| anyhow::anyhow!("{}: {e}", path.display());
        let pem = std::fs::read(&path).map_err(|e| named(e.to_string()))?;
        let rng = SystemRandom::new();
        let key = private_key(&pem, &rng).map_err(named)?;
        let mut verifying = vec![key.public_key().as_ref().to_vec()];
        for file in &config.key_files {
            let pem =
                std::fs::read(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let keys =
                public_keys(&pem, &rng).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            verifying.extend(keys);
        }
        let issuers = if config.issuers.is_empty() {
            vec![ISSUER.to_string()]
        } else {
            config.issuers.clone()
        };
        Ok(TokenSigner {
            key,
            rng,
            verifying,
            issuers,
        })
    }

    /// Issues a token for a ServiceAccount; returns it with its expiry.
    pub fn issue(
        &self,
        sub: &TokenSubject,
        audiences: &[String],
        lifetime_seconds: i64,
    ) -> anyhow::Result<(String, chrono::DateTime<chrono::Utc>)> {
        let now = chrono::Utc::now();
        let exp = now + chrono::Duration::seconds(lifetime_seconds);
        let issuer = &self.issuers[0];
        let audiences = if audiences.is_empty() {
            vec![issuer.clone()]
        } else {
            audiences.to_vec()
        };
        let header = json!({"alg": "ES256", "typ": "JWT"});
        let claims = json!({
            "iss": issuer,
            "sub": format!("system:serviceaccount:{}:{}", sub.namespace, sub.name),
            "aud": audiences,
            "iat": now.timestamp(),
            "nbf": now.timestamp(),
            "exp": exp.timestamp(),
            "kubernetes.io": {"namespace": sub.namespace, "serviceaccount": {"name": sub.name, "uid": sub.uid}},
        });
        let signing_input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|_| anyhow::anyhow!("signing failed"))?;
        Ok((format!("{signing_input}.{}", b64(sig.as_ref())), exp))
    }

    /// Checks signature, issuer, audience and time; returns the subject.
    pub fn verify(&self, token: &str) -> Option<TokenSubject> {
        self.verify_for(token, &self.issuers).map(|(sub, _)| sub)
    }

    /// The audiences API tokens carry (the issuers).
    pub fn api_audiences(&self) -> &[String] {
        &self.issuers
    }

    /// Checks signature, issuer and time, and that the token is for one of
    /// `audiences`; returns the subject and the audiences it matched (a
    /// TokenReview's `status.audiences`).
    pub fn verify_for(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Option<(TokenSubject, Vec<String>)> {
        let mut parts = token.split('.');
        let (h, c, s) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let dec = |p: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p)
                .ok()
        };
        let signed = format!("{h}.{c}");
        let signature = dec(s)?;
        self.verifying.iter().find(|k| {
            ring::signature::UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, k)
                .verify(signed.as_bytes(), &signature)
                .is_ok()
        })?;
        let header: Value = serde_json::from_slice(&dec(h)?).ok()?;
        if header["alg"] != "ES256" {
            return None;
        }
        let claims: Value = serde_json::from_slice(&dec(c)?).ok()?;
        let now = chrono::Utc::now().timestamp();
        let known = |v: &Value| self.issuers.iter().any(|i| v == i.as_str());
        let matched: Vec<String> = claims["aud"]
            .as_array()
            .map(|a| {
                audiences
                    .iter()
                    .filter(|want| a.iter().any(|v| v == want.as_str()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if !known(&claims["iss"])
            || matched.is_empty()
            || claims["exp"].as_i64()? <= now
            || claims["nbf"].as_i64().unwrap_or(0) > now + 60
        {
            return None;
        }
        let k = &claims["kubernetes.io"];
        let sub = TokenSubject {
            namespace: k["namespace"].as_str()?.to_string(),
            name: k["serviceaccount"]["name"].as_str()?.to_string(),
            uid: k["serviceaccount"]["uid"].as_str()?.to_string(),
        };
        Some((sub, matched))
    }
}

/// The ECDSA P-256 key pair of the PKCS#8 PEM `pem`.
fn private_key(pem: &[u8], rng: &SystemRandom) -> Result<EcdsaKeyPair, String> {
    use rustls::pki_types::{PrivatePkcs8KeyDer, pem::PemObject};
    let der = PrivatePkcs8KeyDer::from_pem_slice(pem)
        .map_err(|e| format!("no PKCS#8 private key (BEGIN PRIVATE KEY): {e}"))?;
    EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        der.secret_pkcs8_der(),
        rng,
    )
    .map_err(|e| format!("not an ECDSA P-256 key: {e}"))
}

/// The P-256 public keys (uncompressed points) in `pem`: every `PUBLIC KEY`
/// block, or the public half of a `PRIVATE KEY`.
fn public_keys(pem: &[u8], rng: &SystemRandom) -> Result<Vec<Vec<u8>>, String> {
    use rustls::pki_types::{SubjectPublicKeyInfoDer, pem::PemObject};
    use x509_parser::prelude::FromDer;
    let mut keys = Vec::new();
    for spki in SubjectPublicKeyInfoDer::pem_slice_iter(pem) {
        let spki = spki.map_err(|e| e.to_string())?;
        let (_, info) = x509_parser::x509::SubjectPublicKeyInfo::from_der(spki.as_ref())
            .map_err(|e| format!("bad public key: {e}"))?;
        let point = info.subject_public_key.data.to_vec();
        if info.algorithm.algorithm != x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
            || point.len() != 65
        {
            return Err("only ECDSA P-256 public keys are supported".into());
        }
        keys.push(point);
    }
    if keys.is_empty() {
        let key = private_key(pem, rng).map_err(|e| format!("no PUBLIC KEY block, and {e}"))?;
        keys.push(key.public_key().as_ref().to_vec());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_and_tampering_fails() {
        let dir = tempfile::tempdir().unwrap();
        let signer = TokenSigner::load_or_create(dir.path()).unwrap();
        let sub = TokenSubject {
            namespace: "ns".into(),
            name: "bot".into(),
            uid: "u1".into(),
        };
        let (token, _) = signer.issue(&sub, &[], 600).unwrap();
        assert_eq!(signer.verify(&token), Some(sub.clone()));
        // The same key is reused after a restart.
        let again = TokenSigner::load_or_create(dir.path()).unwrap();
        assert_eq!(again.verify(&token), Some(sub.clone()));
        let mut forged = token.clone();
        forged.replace_range(forged.len() - 4.., "AAAA");
        assert_eq!(signer.verify(&forged), None);
        let (expired, _) = signer.issue(&sub, &[], -10).unwrap();
        assert_eq!(signer.verify(&expired), None);
        let (other_aud, _) = signer.issue(&sub, &["vault".into()], 600).unwrap();
        assert_eq!(
            signer.verify(&other_aud),
            None,
            "tokens for other audiences are not API credentials"
        );
        let other = TokenSigner::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert_eq!(other.verify(&token), None);
    }

    #[test]
    fn shared_keys_rotation_and_issuers() {
        let sub = TokenSubject {
            namespace: "ns".into(),
            name: "bot".into(),
            uid: "u1".into(),
        };
        let old_dir = tempfile::tempdir().unwrap();
        let old = TokenSigner::load_or_create(old_dir.path()).unwrap();
        let (old_token, _) = old.issue(&sub, &[], 600).unwrap();
        let old_key = old_dir.path().join("pki/sa.key");

        // A replica given the same signing key accepts the token.
        let config = SignerConfig {
            signing_key_file: Some(old_key.clone()),
            ..Default::default()
        };
        let replica = TokenSigner::from_config(tempfile::tempdir().unwrap().path(), &config);
        assert_eq!(replica.unwrap().verify(&old_token), Some(sub.clone()));

        // A new signing key with the old one as a verification key (as a
        // private key file, and as a PUBLIC KEY block) accepts both.
        let new_dir = tempfile::tempdir().unwrap();
        let public = new_dir.path().join("old.pub");
        let pem = std::fs::read_to_string(&old_key).unwrap();
        let public_pem = rcgen::KeyPair::from_pem(&pem).unwrap().public_key_pem();
        std::fs::write(&public, public_pem).unwrap();
        for key_file in [old_key.clone(), public.clone()] {
            let config = SignerConfig {
                key_files: vec![key_file],
                ..Default::default()
            };
            let rotated = TokenSigner::from_config(new_dir.path(), &config).unwrap();
            assert_eq!(rotated.verify(&old_token), Some(sub.clone()));
            let (new_token, _) = rotated.issue(&sub, &[], 600).unwrap();
            assert_eq!(rotated.verify(&new_token), Some(sub.clone()));
            assert_eq!(old.verify(&new_token), None);
        }

        // Issuers: the first issues; all are accepted; others are not.
        let config = |issuers: &[&str]| SignerConfig {
            signing_key_file: Some(old_key.clone()),
            issuers: issuers.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let custom = TokenSigner::from_config(dir.path(), &config(&["https://a", ISSUER])).unwrap();
        let (token, _) = custom.issue(&sub, &[], 600).unwrap();
        assert_eq!(custom.verify(&old_token), Some(sub.clone()));
        assert_eq!(custom.verify(&token), Some(sub.clone()));
        assert_eq!(old.verify(&token), None, "issued by https://a");
        let strict = TokenSigner::from_config(dir.path(), &config(&["https://b"])).unwrap();
        assert_eq!(strict.verify(&token), None);

        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a key").unwrap();
        let config = SignerConfig {
            key_files: vec![garbage],
            ..Default::default()
        };
        assert!(TokenSigner::from_config(dir.path(), &config).is_err());
    }
}
