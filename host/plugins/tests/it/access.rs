//! End-to-end tests of the authenticator and authorizer plugin kinds with
//! the real guest components of `plugins/` (built once per test run by
//! `scripts/build-plugins.sh`).
//!
//! Covered: `token-authenticator` (authenticated, denied, no opinion),
//! `namespace-authorizer` (allow, deny, no opinion), configurations
//! rejected at load time, components of another world rejected, and the
//! `authn`/`authz` metrics.

use crate::common;

use common::wasm;
use wasm_apiserver_plugins::{
    AuthenticatorPlugin, AuthnOutcome, AuthnRequest, AuthorizerPlugin, AuthzAttributes,
    AuthzDecision, AuthzRequest, ClientCertificate, Limits, PluginError, Runtime, RuntimeConfig,
    UserInfo,
};

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        max_instances: 8,
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

const TOKENS: &str = r#"{
    "tokens": {"wasm-alice-token": {"username": "alice", "uid": "42", "groups": ["dev"]}},
    "prefix": "wasm-"
}"#;

async fn token_authenticator(runtime: &Runtime) -> AuthenticatorPlugin {
    runtime
        .load_authenticator(
            "token-authenticator",
            &wasm("token_authenticator"),
            TOKENS,
            Limits::default(),
        )
        .await
        .expect("load token-authenticator")
}

fn authn_request(headers: &[(&str, &str)]) -> AuthnRequest {
    AuthnRequest {
        uid: "authn-1".to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        client_certificate: None,
    }
}

#[tokio::test]
async fn token_authenticator_authenticates_a_configured_token() {
    let runtime = runtime();
    let plugin = token_authenticator(&runtime).await;
    let outcome = plugin
        .authenticate(&authn_request(&[
            ("user-agent", "kubectl"),
            ("authorization", "Bearer wasm-alice-token"),
        ]))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        AuthnOutcome::Authenticated(UserInfo {
            username: "alice".to_owned(),
            uid: "42".to_owned(),
            // The host adds system:authenticated.
            groups: vec!["dev".to_owned(), "system:authenticated".to_owned()],
            extra: Default::default(),
        })
    );
    // The scheme is case-insensitive, as in HTTP.
    let outcome = plugin
        .authenticate(&authn_request(&[(
            "authorization",
            "bearer wasm-alice-token",
        )]))
        .await
        .unwrap();
    assert!(matches!(outcome, AuthnOutcome::Authenticated(ref u) if u.username == "alice"));
}

#[tokio::test]
async fn token_authenticator_denies_an_unknown_token_with_its_prefix() {
    let runtime = runtime();
    let plugin = token_authenticator(&runtime).await;
    let outcome = plugin
        .authenticate(&authn_request(&[("authorization", "Bearer wasm-forged")]))
        .await
        .unwrap();
    let AuthnOutcome::Denied(reason) = outcome else {
        panic!("expected a denial, got {outcome:?}");
    };
    assert!(reason.contains("wasm-"), "{reason}");
    let metrics = runtime.metrics_text();
    assert!(
        metrics.contains(
            r#"wasm_apiserver_plugin_denials_total{plugin="token-authenticator",kind="authn",op="authenticate"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn token_authenticator_has_no_opinion_on_other_credentials() {
    let runtime = runtime();
    let plugin = token_authenticator(&runtime).await;
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("authorization", "Bearer someone-elses-token")],
        &[("authorization", "Basic YWxpY2U6cGFzcw==")],
        &[("authorization", "Bearer ")],
    ];
    for headers in cases {
        let outcome = plugin.authenticate(&authn_request(headers)).await.unwrap();
        assert_eq!(outcome, AuthnOutcome::NoOpinion, "{headers:?}");
    }
    // A client certificate alone is not this plugin's business.
    let mut request = authn_request(&[]);
    request.client_certificate = Some(ClientCertificate {
        subject: "CN=bob,O=ops".to_owned(),
        common_name: "bob".to_owned(),
        organizations: vec!["ops".to_owned()],
    });
    assert_eq!(
        plugin.authenticate(&request).await.unwrap(),
        AuthnOutcome::NoOpinion
    );
}

const RULES: &str = r#"{
    "allow": [{"user": "alice", "namespaces": ["team-a"], "verbs": ["get", "list", "watch", "create"]}],
    "deny": [{"resource": "secrets"}]
}"#;

async fn namespace_authorizer(runtime: &Runtime) -> AuthorizerPlugin {
    runtime
        .load_authorizer(
            "namespace-authorizer",
            &wasm("namespace_authorizer"),
            RULES,
            Limits::default(),
        )
        .await
        .expect("load namespace-authorizer")
}

fn authz_request(user: &str, verb: &str, resource: &str, namespace: &str) -> AuthzRequest {
    AuthzRequest {
        uid: "authz-1".to_owned(),
        user: UserInfo {
            username: user.to_owned(),
            groups: vec!["system:authenticated".to_owned()],
            ..UserInfo::default()
        },
        attributes: AuthzAttributes {
            verb: verb.to_owned(),
            api_version: "v1".to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            path: format!("/api/v1/namespaces/{namespace}/{resource}"),
            is_resource_request: true,
            ..AuthzAttributes::default()
        },
    }
}

#[tokio::test]
async fn namespace_authorizer_allows_a_granted_verb_in_a_granted_namespace() {
    let runtime = runtime();
    let plugin = namespace_authorizer(&runtime).await;
    for verb in ["get", "list", "watch", "create"] {
        let decision = plugin
            .authorize(&authz_request("alice", verb, "configmaps", "team-a"))
            .await
            .unwrap();
        let AuthzDecision::Allow(reason) = &decision else {
            panic!("{verb}: expected allow, got {decision:?}");
        };
        assert!(
            reason.contains("alice") && reason.contains("team-a"),
            "{reason}"
        );
    }
}

#[tokio::test]
async fn namespace_authorizer_deny_rules_win() {
    let runtime = runtime();
    let plugin = namespace_authorizer(&runtime).await;
    // Alice may get in team-a, but secrets are denied to everyone.
    let decision = plugin
        .authorize(&authz_request("alice", "get", "secrets", "team-a"))
        .await
        .unwrap();
    let AuthzDecision::Deny(reason) = &decision else {
        panic!("expected deny, got {decision:?}");
    };
    assert!(reason.contains("secrets"), "{reason}");
    let metrics = runtime.metrics_text();
    assert!(
        metrics.contains(
            r#"wasm_apiserver_plugin_denials_total{plugin="namespace-authorizer",kind="authz",op="authorize"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn namespace_authorizer_has_no_opinion_otherwise() {
    let runtime = runtime();
    let plugin = namespace_authorizer(&runtime).await;
    let cases = [
        authz_request("bob", "get", "configmaps", "team-a"),
        authz_request("alice", "delete", "configmaps", "team-a"),
        authz_request("alice", "get", "configmaps", "team-b"),
        AuthzRequest {
            attributes: AuthzAttributes {
                verb: "get".to_owned(),
                path: "/version".to_owned(),
                ..AuthzAttributes::default()
            },
            ..authz_request("alice", "get", "", "")
        },
    ];
    for request in &cases {
        let decision = plugin.authorize(request).await.unwrap();
        assert!(
            matches!(decision, AuthzDecision::NoOpinion(_)),
            "{:?}: {decision:?}",
            request.attributes
        );
    }
}

#[tokio::test]
async fn bad_configurations_are_rejected_at_load() {
    let runtime = runtime();
    for config in [
        "not json",
        r#"{"tokens": {"t": {"username": ""}}}"#,
        r#"{"tokens": {}, "unknown": 1}"#,
    ] {
        let err = runtime
            .load_authenticator(
                "token-authenticator",
                &wasm("token_authenticator"),
                config,
                Limits::default(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, PluginError::Config { .. }), "{config}: {err}");
    }
    for config in [
        r#"{"allow": "everyone"}"#,
        r#"{"deny": [{}]}"#,
        r#"{"allow": [{"namespaces": ["a"], "verbs": ["get"]}]}"#,
    ] {
        let err = runtime
            .load_authorizer(
                "namespace-authorizer",
                &wasm("namespace_authorizer"),
                config,
                Limits::default(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, PluginError::Config { .. }), "{config}: {err}");
    }
}

#[tokio::test]
async fn components_of_another_world_are_rejected() {
    let runtime = runtime();
    // hostile-loop exports the admission world: it can never be called as
    // an authorizer or an authenticator, so its loop never runs.
    let err = runtime
        .load_authorizer("hostile-loop", &wasm("hostile_loop"), "", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
    assert!(err.to_string().contains("authorizer-plugin"), "{err}");

    let err = runtime
        .load_authenticator("hostile-loop", &wasm("hostile_loop"), "", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
    assert!(err.to_string().contains("authenticator-plugin"), "{err}");

    // The two access worlds are not interchangeable either.
    let err = runtime
        .load_authorizer(
            "token-authenticator",
            &wasm("token_authenticator"),
            TOKENS,
            Limits::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
    let err = runtime
        .load_authenticator(
            "namespace-authorizer",
            &wasm("namespace_authorizer"),
            RULES,
            Limits::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
}
