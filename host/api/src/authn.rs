//! Authentication rules without IO: the authenticated [`UserInfo`], the
//! static token file (`--token-auth-file`) and bootstrap tokens
//! (`--enable-bootstrap-token-auth`).
//!
//! Token file: upstream's CSV, one `token,user,uid[,"group1,group2"]` record
//! per line, parsed like Go's `encoding/csv` (quoted fields with `""`
//! escapes, blank lines skipped, no comment syntax); records need at least
//! three columns, an empty token is skipped, a repeated token keeps its last
//! record. Lookups compare token bytes in constant time.
//!
//! Bootstrap tokens follow upstream's authenticator: a token
//! `<id>.<secret>` names the Secret `kube-system/bootstrap-token-<id>` of type
//! `bootstrap.kubernetes.io/token`, which must not be deleting, must hold the
//! same `token-id` and (compared in constant time) `token-secret`, must not be
//! past its `expiration`, must set `usage-bootstrap-authentication: "true"`,
//! and may add `auth-extra-groups` (each `system:bootstrappers:…`). The user
//! is `system:bootstrap:<id>` in `system:bootstrappers` plus those groups.

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use subtle::ConstantTimeEq;

/// The group every authenticated user is in.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of anonymous requests.
pub const ANONYMOUS: &str = "system:anonymous";

pub const BOOTSTRAP_TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const BOOTSTRAP_TOKEN_SECRET_PREFIX: &str = "bootstrap-token-";
pub const BOOTSTRAP_TOKEN_NAMESPACE: &str = "kube-system";
pub const BOOTSTRAP_USER_PREFIX: &str = "system:bootstrap:";
pub const BOOTSTRAP_DEFAULT_GROUP: &str = "system:bootstrappers";
const KEY_TOKEN_ID: &str = "token-id";
const KEY_TOKEN_SECRET: &str = "token-secret";
const KEY_EXPIRATION: &str = "expiration";
const KEY_USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
const KEY_EXTRA_GROUPS: &str = "auth-extra-groups";

/// An authenticated user, shaped as `authentication.k8s.io/v1` `UserInfo`
/// (`username`, `uid`, `groups`, `extra`); `user` is accepted for
/// `username` so a `SubjectAccessReview` spec also reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    #[serde(default, alias = "user")]
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn new(username: &str, groups: &[&str]) -> Self {
        UserInfo {
            username: username.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    /// The anonymous user (`system:anonymous` in `system:unauthenticated`).
    pub fn anonymous() -> Self {
        UserInfo::new(ANONYMOUS, &[ALL_UNAUTHENTICATED])
    }

    /// Adds `system:authenticated` unless present, as upstream does for
    /// every successfully authenticated non-anonymous user.
    pub fn with_authenticated_group(mut self) -> Self {
        if self.username != ANONYMOUS && !self.groups.iter().any(|g| g == ALL_AUTHENTICATED) {
            self.groups.push(ALL_AUTHENTICATED.into());
        }
        self
    }
}

/// Splits text into records as Go's `encoding/csv` does with a variable
/// number of fields per record (`\r\n` read as `\n`, blank lines skipped).
fn parse_csv(text: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let text = text.replace("\r\n", "\n");
    let mut chars = text.chars().peekable();
    let (mut records, mut line) = (Vec::new(), 1);
    while let Some(&c) = chars.peek() {
        if c == '\n' {
            chars.next();
            line += 1;
            continue;
        }
        let start = line;
        let mut fields = Vec::new();
        loop {
            let mut field = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        None => {
                            return Err(format!(
                                "line {start}: extraneous or missing \" in quoted-field"
                            ));
                        }
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            field.push('"');
                        }
                        Some('"') => break,
                        Some(c) => {
                            line += usize::from(c == '\n');
                            field.push(c);
                        }
                    }
                }
                if !matches!(chars.peek(), None | Some(',') | Some('\n')) {
                    return Err(format!(
                        "line {line}: extraneous or missing \" in quoted-field"
                    ));
                }
            } else {
                while let Some(&c) = chars.peek() {
                    match c {
                        ',' | '\n' => break,
                        '"' => return Err(format!("line {line}: bare \" in non-quoted-field")),
                        _ => field.push(c),
                    }
                    chars.next();
                }
            }
            fields.push(field);
            match chars.next() {
                Some(',') => {}
                Some('\n') => {
                    line += 1;
                    break;
                }
                _ => break,
            }
        }
        records.push((start, fields));
    }
    Ok(records)
}

/// The parsed `--token-auth-file`.
#[derive(Clone, Default)]
pub struct TokenFile {
    entries: Vec<(Vec<u8>, UserInfo)>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens.
        f.debug_struct("TokenFile")
            .field(
                "users",
                &self
                    .entries
                    .iter()
                    .map(|(_, u)| &u.username)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl TokenFile {
    /// Parses the CSV text; a record with fewer than three columns is an
    /// error, as upstream.
    pub fn parse(text: &str) -> Result<TokenFile, String> {
        let mut entries: Vec<(Vec<u8>, UserInfo)> = Vec::new();
        for (line, record) in parse_csv(text)? {
            if record.len() < 3 {
                return Err(format!(
                    "token file must have at least 3 columns (token, user name, user uid), found {} on line {line}",
                    record.len()
                ));
            }
            if record[0].is_empty() {
                continue;
            }
            let user = UserInfo {
                username: record[1].clone(),
                uid: record[2].clone(),
                // Upstream splits on commas; empty names are dropped here.
                groups: record
                    .get(3)
                    .map(|g| {
                        g.split(',')
                            .filter(|g| !g.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
                extra: BTreeMap::new(),
            };
            let token = record[0].as_bytes().to_vec();
            entries.retain(|(t, _)| *t != token);
            entries.push((token, user));
        }
        Ok(TokenFile { entries })
    }

    /// The user for a bearer token. Every entry is compared, each in
    /// constant time, so timing does not reveal how much of a token matched.
    pub fn lookup(&self, token: &str) -> Option<UserInfo> {
        let token = token.as_bytes();
        let mut found = None;
        for (t, user) in &self.entries {
            if bool::from(t.as_slice().ct_eq(token)) {
                found = Some(user);
            }
        }
        found.cloned()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Splits a bootstrap token `<id>.<secret>` (`[a-z0-9]{6}\.[a-z0-9]{16}`)
/// into its id and secret; anything else is not a bootstrap token.
pub fn parse_bootstrap_token(s: &str) -> Option<(String, String)> {
    let ok = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let (id, secret) = s.split_once('.')?;
    (ok(id, 6) && ok(secret, 16)).then(|| (id.to_string(), secret.to_string()))
}

/// `bootstrap-token-<id>`, the Secret holding token `<id>`.
pub fn bootstrap_secret_name(token_id: &str) -> String {
    format!("{BOOTSTRAP_TOKEN_SECRET_PREFIX}{token_id}")
}

/// Why a bootstrap token was refused. Upstream logs these and answers the
/// request as unauthenticated (401), without saying why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    #[error("secret is not named {expected:?}")]
    WrongName { expected: String },
    #[error("secret is not in namespace {BOOTSTRAP_TOKEN_NAMESPACE}")]
    WrongNamespace,
    #[error("secret is deleted and awaiting removal")]
    Deleted,
    #[error("secret has invalid type, expected {BOOTSTRAP_TOKEN_SECRET_TYPE}")]
    InvalidType,
    #[error("secret has invalid value for key {KEY_TOKEN_SECRET}")]
    InvalidSecret,
    #[error("secret has invalid value for key {KEY_TOKEN_ID}")]
    InvalidTokenId,
    #[error("secret has expired")]
    Expired,
    #[error("secret not marked {KEY_USAGE_AUTHENTICATION}=true")]
    NotForAuthentication,
    #[error("secret has invalid value for key {KEY_EXTRA_GROUPS}: {0}")]
    InvalidExtraGroups(String),
}

/// A `data` value of a Secret, base64-decoded (empty when missing or not
/// decodable, as upstream's `GetData` returns "" for a missing key).
pub fn secret_data(secret: &Value, key: &str) -> String {
    secret
        .get("data")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default()
}

/// True for a group upstream accepts in `auth-extra-groups`:
/// `^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$`.
pub fn valid_bootstrap_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    let b = rest.as_bytes();
    let lower_digit = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=256).contains(&b.len())
        && b[..b.len() - 1]
            .iter()
            .all(|c| lower_digit(c) || *c == b':' || *c == b'-')
        && lower_digit(&b[b.len() - 1])
}

/// Upstream `GetGroups`: `system:bootstrappers` plus the valid
/// `auth-extra-groups`, sorted and deduplicated; one invalid group is an error.
pub fn bootstrap_groups(secret: &Value) -> Result<Vec<String>, String> {
    let mut groups = BTreeSet::from([BOOTSTRAP_DEFAULT_GROUP.to_string()]);
    let extra = secret_data(secret, KEY_EXTRA_GROUPS);
    if !extra.is_empty() {
        for g in extra.split(',') {
            if !valid_bootstrap_group(g) {
                return Err(format!(
                    "{g:?} (must match system:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9])"
                ));
            }
            groups.insert(g.to_string());
        }
    }
    Ok(groups.into_iter().collect())
}

/// Upstream `HasExpired` on a Secret's `expiration` (RFC 3339): unset never
/// expires, unparseable counts as expired, and the instant itself is expired.
fn expired(secret: &Value, now: DateTime<Utc>) -> bool {
    let exp = secret_data(secret, KEY_EXPIRATION);
    if exp.is_empty() {
        return false;
    }
    match DateTime::parse_from_rfc3339(&exp) {
        Ok(t) => t.with_timezone(&Utc) <= now,
        Err(_) => true,
    }
}

fn is_bootstrap_secret(secret: &Value) -> bool {
    secret.get("type").and_then(Value::as_str) == Some(BOOTSTRAP_TOKEN_SECRET_TYPE)
}

/// For the token cleaner: true when `secret` is a bootstrap-token Secret
/// whose `expiration` has passed. Other Secrets are never "expired", so a
/// cleaner that deletes on `true` cannot delete them.
pub fn is_expired(secret: &Value, now: DateTime<Utc>) -> bool {
    is_bootstrap_secret(secret) && expired(secret, now)
}

/// Authenticates bootstrap token `<token_id>.<token_secret>` against its
/// Secret (the caller fetched `kube-system/bootstrap-token-<token_id>`),
/// checking what upstream checks, in upstream's order.
pub fn authenticate_bootstrap(
    secret: &Value,
    token_id: &str,
    token_secret: &str,
    now: DateTime<Utc>,
) -> Result<UserInfo, BootstrapError> {
    let expected = bootstrap_secret_name(token_id);
    if crate::meta::name(secret) != Some(expected.as_str()) {
        return Err(BootstrapError::WrongName { expected });
    }
    if crate::meta::namespace(secret).is_some_and(|ns| ns != BOOTSTRAP_TOKEN_NAMESPACE) {
        return Err(BootstrapError::WrongNamespace);
    }
    if crate::meta::str_field(secret, "deletionTimestamp").is_some() {
        return Err(BootstrapError::Deleted);
    }
    if !is_bootstrap_secret(secret) || !secret.get("data").is_some_and(Value::is_object) {
        return Err(BootstrapError::InvalidType);
    }
    let stored = secret_data(secret, KEY_TOKEN_SECRET);
    if !bool::from(stored.as_bytes().ct_eq(token_secret.as_bytes())) {
        return Err(BootstrapError::InvalidSecret);
    }
    if secret_data(secret, KEY_TOKEN_ID) != token_id {
        return Err(BootstrapError::InvalidTokenId);
    }
    if expired(secret, now) {
        return Err(BootstrapError::Expired);
    }
    if secret_data(secret, KEY_USAGE_AUTHENTICATION) != "true" {
        return Err(BootstrapError::NotForAuthentication);
    }
    let groups = bootstrap_groups(secret).map_err(BootstrapError::InvalidExtraGroups)?;
    Ok(UserInfo {
        username: format!("{BOOTSTRAP_USER_PREFIX}{token_id}"),
        groups,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn token_file_parses_upstream_csv() {
        let text = "\
abc,alice,1,\"admins,devs\"\n\
\n\
def,bob,2\r\n\
\"g,h\",\"carol \"\"c\"\"\",3,ops\n\
,empty,4\n\
abc,alice2,5\n\
x,nogroups,6,\n";
        let f = TokenFile::parse(text).unwrap();
        assert_eq!(f.len(), 4);
        let cases = [
            ("abc", Some(("alice2", "5", vec![]))),
            ("def", Some(("bob", "2", vec![]))),
            ("g,h", Some(("carol \"c\"", "3", vec!["ops"]))),
            ("x", Some(("nogroups", "6", vec![]))),
            ("", None),
            ("ab", None),
            ("abcd", None),
            ("ABC", None),
        ];
        for (token, want) in cases {
            let got = f.lookup(token).map(|u| (u.username, u.uid, u.groups));
            let want = want.map(|(n, u, g): (&str, &str, Vec<&str>)| {
                (
                    n.to_string(),
                    u.to_string(),
                    g.into_iter().map(String::from).collect::<Vec<_>>(),
                )
            });
            assert_eq!(got, want, "token {token:?}");
        }
        let f = TokenFile::parse("t1,u,1,\"a,b\"\n").unwrap();
        assert_eq!(f.lookup("t1").unwrap().groups, vec!["a", "b"]);
    }

    #[test]
    fn token_file_errors() {
        let cases = [
            ("tok,user\n", "at least 3 columns"),
            ("# comment\n", "at least 3 columns"),
            ("ok,u,1\nbad\n", "line 2"),
            ("a\"b,u,1\n", "bare \""),
            ("\"ab\"c,u,1\n", "extraneous"),
            ("\"abc,u,1\n", "extraneous or missing"),
        ];
        for (text, want) in cases {
            let err = TokenFile::parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
        assert!(TokenFile::parse("").unwrap().is_empty());
        assert!(
            !format!("{:?}", TokenFile::parse("secret-token,u,1").unwrap())
                .contains("secret-token")
        );
    }

    #[test]
    fn bootstrap_token_syntax() {
        let cases = [
            (
                "abcdef.0123456789abcdef",
                Some(("abcdef", "0123456789abcdef")),
            ),
            (
                "abc123.aaaaaaaaaaaaaaaa",
                Some(("abc123", "aaaaaaaaaaaaaaaa")),
            ),
            ("ABCDEF.0123456789abcdef", None),
            ("abcde.0123456789abcdef", None),
            ("abcdefg.0123456789abcdef", None),
            ("abcdef.0123456789abcde", None),
            ("abcdef.0123456789abcdef0", None),
            ("abcdef:0123456789abcdef", None),
            ("abcdef.0123456789abcde-", None),
            ("abcdef.01234567.9abcdef", None),
            ("", None),
        ];
        for (s, want) in cases {
            let want = want.map(|(a, b): (&str, &str)| (a.to_string(), b.to_string()));
            assert_eq!(parse_bootstrap_token(s), want, "{s}");
        }
    }

    #[test]
    fn bootstrap_group_names() {
        let long_ok = format!("system:bootstrappers:{}", "a".repeat(256));
        let too_long = format!("system:bootstrappers:{}", "a".repeat(257));
        let cases = [
            ("system:bootstrappers:kubeadm:default-node-token", true),
            ("system:bootstrappers:a", true),
            ("system:bootstrappers:", false),
            ("system:bootstrappers:ends-", false),
            ("system:bootstrappers:ends:", false),
            ("system:bootstrappers:Upper", false),
            ("system:bootstrappers:under_score", false),
            ("system:masters", false),
            ("system:bootstrappers", false),
            (long_ok.as_str(), true),
            (too_long.as_str(), false),
        ];
        for (g, want) in cases {
            assert_eq!(valid_bootstrap_group(g), want, "{g}");
        }
    }

    fn now() -> DateTime<Utc> {
        "2030-01-01T00:00:00Z".parse().unwrap()
    }

    fn secret(data: &[(&str, &str)]) -> Value {
        let data: serde_json::Map<String, Value> = data
            .iter()
            .map(|(k, v)| (k.to_string(), json!(b64(v))))
            .collect();
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
            "type": BOOTSTRAP_TOKEN_SECRET_TYPE,
            "data": data,
        })
    }

    fn valid() -> Value {
        secret(&[
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-authentication", "true"),
            ("expiration", "2030-01-02T00:00:00Z"),
            (
                "auth-extra-groups",
                "system:bootstrappers:worker,system:bootstrappers:kubeadm:default-node-token",
            ),
        ])
    }

    #[test]
    fn bootstrap_token_authenticates() {
        let user = authenticate_bootstrap(&valid(), "abcdef", "0123456789abcdef", now()).unwrap();
        assert_eq!(
            user,
            UserInfo::new(
                "system:bootstrap:abcdef",
                &[
                    "system:bootstrappers",
                    "system:bootstrappers:kubeadm:default-node-token",
                    "system:bootstrappers:worker"
                ]
            )
        );
        let mut s = valid();
        s["data"]
            .as_object_mut()
            .unwrap()
            .remove("auth-extra-groups");
        s["data"].as_object_mut().unwrap().remove("expiration");
        let user = authenticate_bootstrap(&s, "abcdef", "0123456789abcdef", now()).unwrap();
        assert_eq!(user.groups, vec!["system:bootstrappers"]);
    }

    #[test]
    fn bootstrap_token_rejections() {
        let with = |f: &dyn Fn(&mut Value)| {
            let mut s = valid();
            f(&mut s);
            s
        };
        let set =
            |k: &'static str, v: &'static str| move |s: &mut Value| s["data"][k] = json!(b64(v));
        let cases: Vec<(&str, Value, &str, BootstrapError)> = vec![
            (
                "wrong secret",
                valid(),
                "0123456789abcdee",
                BootstrapError::InvalidSecret,
            ),
            (
                "expired",
                with(&set("expiration", "2029-12-31T23:59:59Z")),
                "0123456789abcdef",
                BootstrapError::Expired,
            ),
            (
                "expires exactly now",
                with(&set("expiration", "2030-01-01T00:00:00Z")),
                "0123456789abcdef",
                BootstrapError::Expired,
            ),
            (
                "unparseable expiration",
                with(&set("expiration", "tomorrow")),
                "0123456789abcdef",
                BootstrapError::Expired,
            ),
            (
                "usage missing",
                with(&|s| {
                    s["data"]
                        .as_object_mut()
                        .unwrap()
                        .remove("usage-bootstrap-authentication");
                }),
                "0123456789abcdef",
                BootstrapError::NotForAuthentication,
            ),
            (
                "usage not true",
                with(&set("usage-bootstrap-authentication", "yes")),
                "0123456789abcdef",
                BootstrapError::NotForAuthentication,
            ),
            (
                "token-id differs",
                with(&set("token-id", "zzzzzz")),
                "0123456789abcdef",
                BootstrapError::InvalidTokenId,
            ),
            (
                "wrong type",
                with(&|s| s["type"] = json!("Opaque")),
                "0123456789abcdef",
                BootstrapError::InvalidType,
            ),
            (
                "no data",
                with(&|s| {
                    s.as_object_mut().unwrap().remove("data");
                }),
                "0123456789abcdef",
                BootstrapError::InvalidType,
            ),
            (
                "deleting",
                with(&|s| s["metadata"]["deletionTimestamp"] = json!("2029-01-01T00:00:00Z")),
                "0123456789abcdef",
                BootstrapError::Deleted,
            ),
            (
                "wrong name",
                with(&|s| s["metadata"]["name"] = json!("bootstrap-token-zzzzzz")),
                "0123456789abcdef",
                BootstrapError::WrongName {
                    expected: "bootstrap-token-abcdef".into(),
                },
            ),
            (
                "wrong namespace",
                with(&|s| s["metadata"]["namespace"] = json!("default")),
                "0123456789abcdef",
                BootstrapError::WrongNamespace,
            ),
        ];
        for (name, s, token_secret, want) in cases {
            assert_eq!(
                authenticate_bootstrap(&s, "abcdef", token_secret, now()),
                Err(want),
                "{name}"
            );
        }
        let bad_group = with(&set(
            "auth-extra-groups",
            "system:bootstrappers:ok,system:masters",
        ));
        let err =
            authenticate_bootstrap(&bad_group, "abcdef", "0123456789abcdef", now()).unwrap_err();
        assert!(
            matches!(&err, BootstrapError::InvalidExtraGroups(g) if g.contains("system:masters")),
            "{err}"
        );
    }

    #[test]
    fn token_cleaner_expiry() {
        let exp = |v: &str| secret(&[("expiration", v)]);
        let cases = [
            ("past", exp("2029-06-01T00:00:00Z"), true),
            ("future", exp("2030-06-01T00:00:00+02:00"), false),
            ("offset past", exp("2030-01-01T01:00:00+02:00"), true),
            ("fractional", exp("2029-12-31T23:59:59.5Z"), true),
            ("garbage", exp("never"), true),
            ("no expiration", secret(&[]), false),
            (
                "other secret type",
                {
                    let mut s = exp("2000-01-01T00:00:00Z");
                    s["type"] = json!("Opaque");
                    s
                },
                false,
            ),
        ];
        for (name, s, want) in cases {
            assert_eq!(is_expired(&s, now()), want, "{name}");
        }
    }

    #[test]
    fn user_info_serde_and_groups() {
        let u = UserInfo::new("alice", &["g"]).with_authenticated_group();
        assert_eq!(
            serde_json::to_value(&u).unwrap(),
            json!({"username": "alice", "groups": ["g", "system:authenticated"]})
        );
        assert_eq!(u.clone().with_authenticated_group(), u);
        assert_eq!(
            UserInfo::anonymous().with_authenticated_group().groups,
            vec![ALL_UNAUTHENTICATED]
        );
        let sar: UserInfo =
            serde_json::from_value(json!({"user": "bob", "uid": "7", "extra": {"k": ["v"]}}))
                .unwrap();
        assert_eq!(sar.username, "bob");
        assert_eq!(sar.uid, "7");
        assert_eq!(sar.extra["k"], vec!["v"]);
    }
}
