//! `namespace-authorizer`: an authorizer plugin granting users verbs in
//! namespaces, with deny rules that win over everything.
//!
//! Configuration (JSON):
//!
//! ```json
//! {"allow": [{"user": "alice", "namespaces": ["team-a"], "verbs": ["get", "list", "watch", "create"]}],
//!  "deny": [{"resource": "secrets"}]}
//! ```
//!
//! * `deny`: each rule has optional `user`, `resource`, `namespace` and
//!   `verb`; a rule matches when every field it names matches (an empty rule
//!   is refused). A matching deny rule answers `deny` with the reason.
//! * `allow`: each rule names a `user` (or `group`), the `namespaces` and the
//!   `verbs` it grants; `"*"` matches any namespace or verb. Only resource
//!   requests in a namespace can be allowed.
//! * Anything else gets `no-opinion`, so the next authorizer decides.

use serde::Deserialize;

wit_bindgen::generate!({
    path: "../../wit",
    world: "authorizer-plugin",
});

use exports::wasm_apiserver::plugin::authorizer::{AuthzDecision, AuthzRequest, Guest};
use wasm_apiserver::plugin::log::{Level, log};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Allow {
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    group: Option<String>,
    namespaces: Vec<String>,
    verbs: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Deny {
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    verb: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    allow: Vec<Allow>,
    #[serde(default)]
    deny: Vec<Deny>,
}

fn parse(config: &str) -> Result<Config, String> {
    let config: Config =
        serde_json::from_str(config).map_err(|e| format!("invalid configuration: {e}"))?;
    for (i, rule) in config.allow.iter().enumerate() {
        if rule.user.is_none() == rule.group.is_none() {
            return Err(format!(
                "allow rule {i} must name exactly one of user, group"
            ));
        }
    }
    for (i, rule) in config.deny.iter().enumerate() {
        if rule.user.is_none()
            && rule.resource.is_none()
            && rule.namespace.is_none()
            && rule.verb.is_none()
        {
            return Err(format!("deny rule {i} matches everything; name a field"));
        }
    }
    Ok(config)
}

fn matches(wanted: &Option<String>, actual: &str) -> bool {
    wanted.as_deref().is_none_or(|w| w == actual)
}

fn listed(list: &[String], actual: &str) -> bool {
    list.iter().any(|x| x == "*" || x == actual)
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(config: String) -> Result<(), String> {
        parse(&config).map(|_| ())
    }

    fn authorize(config: String, request: AuthzRequest) -> AuthzDecision {
        let config = match parse(&config) {
            Ok(c) => c,
            Err(e) => return AuthzDecision::NoOpinion(e),
        };
        let user = &request.user;
        let a = &request.attributes;
        for rule in &config.deny {
            let resource = if a.is_resource_request {
                a.resource.as_str()
            } else {
                ""
            };
            if matches(&rule.user, &user.username)
                && rule.resource.as_deref().is_none_or(|r| r == resource)
                && matches(&rule.namespace, &a.namespace)
                && matches(&rule.verb, &a.verb)
            {
                let what = if a.is_resource_request {
                    format!("{} {}", a.verb, a.resource)
                } else {
                    format!("{} {}", a.verb, a.path)
                };
                log(
                    Level::Info,
                    "denied",
                    &[("user".to_owned(), user.username.clone())],
                );
                return AuthzDecision::Deny(format!(
                    "namespace-authorizer: {what} is denied by policy"
                ));
            }
        }
        if a.is_resource_request && !a.namespace.is_empty() {
            let allowed = config.allow.iter().any(|rule| {
                let who = match (&rule.user, &rule.group) {
                    (Some(u), _) => *u == user.username,
                    (None, Some(g)) => user.groups.contains(g),
                    (None, None) => false,
                };
                who && listed(&rule.namespaces, &a.namespace) && listed(&rule.verbs, &a.verb)
            });
            if allowed {
                return AuthzDecision::Allow(format!(
                    "namespace-authorizer: {} may {} in namespace {}",
                    user.username, a.verb, a.namespace
                ));
            }
        }
        AuthzDecision::NoOpinion(String::new())
    }
}

export!(Plugin);
