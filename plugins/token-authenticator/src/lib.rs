//! `token-authenticator`: an authenticator plugin for static bearer tokens.
//!
//! Configuration (JSON):
//!
//! ```json
//! {"tokens": {"s3cr3t": {"username": "alice", "uid": "1", "groups": ["dev"]}},
//!  "prefix": "wasm-"}
//! ```
//!
//! * `tokens`: the accepted bearer tokens and the user each one stands for
//!   (`uid` and `groups` are optional).
//! * `prefix` (optional): tokens starting with it are this plugin's own, so
//!   an unknown one is a presented-but-invalid credential (`denied`, 401)
//!   rather than someone else's (`no-opinion`).
//!
//! A request without a bearer token, or with a token that is neither
//! configured nor carries the prefix, gets `no-opinion`.

use serde::Deserialize;
use std::collections::BTreeMap;

wit_bindgen::generate!({
    path: "../../wit",
    world: "authenticator-plugin",
});

use exports::wasm_apiserver::plugin::authenticator::{AuthnRequest, AuthnResponse, Guest};
use wasm_apiserver::plugin::log::{Level, log};
use wasm_apiserver::plugin::types::UserInfo;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct User {
    username: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    groups: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    tokens: BTreeMap<String, User>,
    #[serde(default)]
    prefix: Option<String>,
}

fn parse(config: &str) -> Result<Config, String> {
    let config: Config =
        serde_json::from_str(config).map_err(|e| format!("invalid configuration: {e}"))?;
    if let Some((token, _)) = config.tokens.iter().find(|(_, u)| u.username.is_empty()) {
        let shown: String = token.chars().take(4).collect();
        return Err(format!("token {shown}... has an empty username"));
    }
    if config.prefix.as_deref() == Some("") {
        return Err("prefix must not be empty".to_owned());
    }
    Ok(config)
}

/// The bearer token of the first `authorization` header, if any.
fn bearer(request: &AuthnRequest) -> Option<&str> {
    let (_, value) = request
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(config: String) -> Result<(), String> {
        parse(&config).map(|_| ())
    }

    fn authenticate(config: String, request: AuthnRequest) -> AuthnResponse {
        let config = match parse(&config) {
            Ok(c) => c,
            Err(e) => return AuthnResponse::Denied(e),
        };
        let Some(token) = bearer(&request) else {
            return AuthnResponse::NoOpinion;
        };
        if let Some(user) = config.tokens.get(token) {
            log(
                Level::Debug,
                "token accepted",
                &[("user".to_owned(), user.username.clone())],
            );
            return AuthnResponse::Authenticated(UserInfo {
                username: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: Vec::new(),
            });
        }
        match &config.prefix {
            Some(prefix) if token.starts_with(prefix.as_str()) => {
                log(Level::Info, "unknown token with our prefix", &[]);
                AuthnResponse::Denied(format!("unknown token with prefix {prefix:?}"))
            }
            _ => AuthnResponse::NoOpinion,
        }
    }
}

export!(Plugin);
