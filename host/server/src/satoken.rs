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
use std::path::Path;

/// The token issuer (`iss`), also the default audience.
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

/// Signs and verifies ServiceAccount tokens with a key kept in
/// `<data-dir>/pki/sa.key` (created on first start).
pub struct TokenSigner {
    key: EcdsaKeyPair,
    rng: SystemRandom,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSigner")
    }
}

impl TokenSigner {
    pub fn load_or_create(data_dir: &Path) -> anyhow::Result<Self> {
        let path = data_dir.join("pki/sa.key");
        let pem = match std::fs::read_to_string(&path) {
            Ok(p) => p,
            Err(_) => {
                let key = rcgen::KeyPair::generate()?;
                std::fs::create_dir_all(data_dir.join("pki"))?;
                let pem = key.serialize_pem();
                std::fs::write(&path, &pem)?;
                pem
            }
        };
        let der = rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes())
            .map(|d: rustls::pki_types::PrivatePkcs8KeyDer<'static>| d.secret_pkcs8_der().to_vec())
            .map_err(|e| anyhow::anyhow!("pki/sa.key: {e}"))?;
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng)
            .map_err(|e| anyhow::anyhow!("pki/sa.key: {e}"))?;
        Ok(TokenSigner { key, rng })
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
        let audiences = if audiences.is_empty() {
            vec![ISSUER.to_string()]
        } else {
            audiences.to_vec()
        };
        let header = json!({"alg": "ES256", "typ": "JWT"});
        let claims = json!({
            "iss": ISSUER,
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
        let public = ring::signature::UnparsedPublicKey::new(
            &ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        );
        public
            .verify(format!("{h}.{c}").as_bytes(), &dec(s)?)
            .ok()?;
        let header: Value = serde_json::from_slice(&dec(h)?).ok()?;
        if header["alg"] != "ES256" {
            return None;
        }
        let claims: Value = serde_json::from_slice(&dec(c)?).ok()?;
        let now = chrono::Utc::now().timestamp();
        let aud_ok = claims["aud"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == ISSUER));
        if claims["iss"] != ISSUER
            || !aud_ok
            || claims["exp"].as_i64()? <= now
            || claims["nbf"].as_i64().unwrap_or(0) > now + 60
        {
            return None;
        }
        let k = &claims["kubernetes.io"];
        Some(TokenSubject {
            namespace: k["namespace"].as_str()?.to_string(),
            name: k["serviceaccount"]["name"].as_str()?.to_string(),
            uid: k["serviceaccount"]["uid"].as_str()?.to_string(),
        })
    }
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
}
