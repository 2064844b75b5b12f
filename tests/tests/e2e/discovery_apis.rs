//! End-to-end: what clients ask the server about itself. Aggregated
//! discovery (kube-rs `Discovery::run_aggregated`, kubectl), the legacy
//! documents for clients that do not ask for it, `ETag` revalidation,
//! TokenReview through the authenticator chain, and APIService objects.

use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};
use wasm_apiserver_e2e::{
    Server, expect_success, kubectl, kubectl_json, kubectl_ok, kubectl_stdin, kubectl_with_token,
    poll_until,
};

use wasm_apiserver_e2e::kube_client as client;

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

async fn get(
    client: &Client,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    let mut req = http::Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .send(req.body(Vec::new()).unwrap().map(kube::client::Body::from))
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let hs = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (status, hs, String::from_utf8_lossy(&body).into_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[test]
fn aggregated_discovery_for_kube_rs_and_kubectl_with_legacy_fallback() {
    let server = Server::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = client(&server);
        let discovery = kube::Discovery::new(client.clone())
            .run_aggregated()
            .await
            .expect("aggregated discovery");
        let core = discovery.get("").expect("the core group");
        let (cm, caps) = core
            .recommended_resources()
            .into_iter()
            .find(|(r, _)| r.plural == "configmaps")
            .expect("configmaps in the core group");
        assert_eq!(cm.kind, "ConfigMap");
        assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
        assert!(caps.operations.iter().any(|v| v == "watch"), "{:?}", caps.operations);
        for group in [
            "admission.wasm-apiserver.io",
            "coordination.k8s.io",
            "rbac.authorization.k8s.io",
            "apiregistration.k8s.io",
        ] {
            assert!(discovery.has_group(group), "{group} missing from aggregated discovery");
        }
        let plugins = discovery.get("admission.wasm-apiserver.io").unwrap();
        let (ap, _) = plugins
            .recommended_resources()
            .into_iter()
            .find(|(r, _)| r.plural == "admissionplugins")
            .expect("our own kind");
        assert_eq!(ap.kind, "AdmissionPlugin");

        // The raw document: upstream's media type, shape and ETag.
        let (status, headers, body) = get(&client, "/apis", &[("accept", AGGREGATED_V2)]).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(header(&headers, "content-type"), Some(AGGREGATED_V2));
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["kind"], "APIGroupDiscoveryList");
        assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
        let mut etag = header(&headers, "etag").expect("an ETag").to_string();
        // The controllers still starting may add resources (the policy
        // audit's report CRDs) between two reads: the document may change
        // once or twice, then a matching If-None-Match revalidates.
        let mut revalidated = false;
        for _ in 0..20 {
            let (status, headers, _) = get(
                &client,
                "/apis",
                &[("accept", AGGREGATED_V2), ("if-none-match", &etag)],
            )
            .await;
            if status == 304 {
                revalidated = true;
                break;
            }
            assert_eq!(status, 200);
            etag = header(&headers, "etag").expect("an ETag").to_string();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(revalidated, "a matching If-None-Match revalidates");
        let (status, _, core_doc) = get(&client, "/api", &[("accept", AGGREGATED_V2)]).await;
        assert_eq!(status, 200);
        let core_doc: Value = serde_json::from_str(&core_doc).unwrap();
        let sa = core_doc["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "serviceaccounts")
            .cloned()
            .unwrap();
        assert_eq!(
            sa["subresources"][0],
            json!({"subresource": "token", "verbs": ["create"],
                   "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}})
        );

        // Clients that do not ask get the legacy documents.
        let (status, headers, body) = get(&client, "/apis", &[("accept", "application/json")]).await;
        assert_eq!(status, 200);
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["kind"], "APIGroupList");
        let (_, _, body) = get(&client, "/api", &[]).await;
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["kind"], "APIVersions");
        let legacy = kube::Discovery::new(client.clone()).run().await.expect("legacy discovery");
        assert!(legacy.has_group("coordination.k8s.io"));
    });

    // kubectl 1.30+ asks for and uses the aggregated document: no
    // per-group-version discovery requests.
    for version in [Some("1.33"), Some("1.30")] {
        let cache = server
            .kubectl_cache_dir()
            .join(format!("fresh-{version:?}"));
        let out = kubectl(
            &server,
            version,
            &[
                "get",
                "leases",
                "-A",
                "-v=8",
                "--cache-dir",
                cache.to_str().unwrap(),
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("apidiscovery.k8s.io;v=v2"),
            "kubectl {version:?} did not get aggregated discovery:\n{stderr}"
        );
        assert!(
            !stderr.contains("/apis/coordination.k8s.io/v1?timeout"),
            "kubectl {version:?} fell back to legacy discovery:\n{stderr}"
        );
    }
}

#[test]
fn token_review_runs_the_authenticator_chain() {
    let server = Server::start();
    kubectl_ok(&server, None, &["create", "serviceaccount", "robot"]);
    let token = kubectl_ok(&server, None, &["create", "token", "robot"])
        .trim()
        .to_string();
    let aud_token = kubectl_ok(
        &server,
        None,
        &["create", "token", "robot", "--audience", "vault"],
    )
    .trim()
    .to_string();
    let review = |token: &str, audiences: &[&str]| -> Value {
        let manifest = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": audiences},
        });
        let args = ["create", "-f", "-", "-o", "json"];
        let out = kubectl_stdin(&server, None, &args, &manifest.to_string());
        let stdout = expect_success(&out, None, &args);
        serde_json::from_str(&stdout).unwrap()
    };

    let ok = review(&token, &[]);
    assert_eq!(ok["kind"], "TokenReview");
    assert_eq!(ok["status"]["authenticated"], true, "{ok}");
    assert_eq!(
        ok["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    let groups = ok["status"]["user"]["groups"].as_array().unwrap();
    assert!(
        groups.iter().any(|g| g == "system:serviceaccounts:default"),
        "{ok}"
    );
    assert!(ok["status"]["user"]["uid"].is_string());

    let garbage = review("not.a.token", &[]);
    assert_eq!(garbage["status"]["authenticated"], false, "{garbage}");

    // Audiences: a token for "vault" is no API credential, but a review for
    // "vault" accepts it and says so.
    assert_eq!(review(&aud_token, &[])["status"]["authenticated"], false);
    let vault = review(&aud_token, &["vault", "other"]);
    assert_eq!(vault["status"]["authenticated"], true, "{vault}");
    assert_eq!(vault["status"]["audiences"], json!(["vault"]));

    // The permission is `create tokenreviews` (system:auth-delegator).
    let manifest = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                          "spec": {"token": token}});
    let path = wasm_apiserver_e2e::write_manifest(&server, "review.json", &manifest.to_string());
    let denied = kubectl_with_token(&server, &token, &["create", "-f", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        !denied.status.success() && stderr.contains("Forbidden"),
        "{stderr}"
    );
    kubectl_ok(
        &server,
        None,
        &[
            "create",
            "clusterrolebinding",
            "robot-delegator",
            "--clusterrole=system:auth-delegator",
            "--serviceaccount=default:robot",
        ],
    );
    let allowed = poll_until(
        Duration::from_secs(10),
        "the binding to take effect",
        || {
            let out = kubectl_with_token(
                &server,
                &token,
                &["create", "-f", path.to_str().unwrap(), "-o", "json"],
            );
            out.status.success().then_some(out)
        },
    );
    let answer: Value = serde_json::from_slice(&allowed.stdout).unwrap();
    assert_eq!(answer["status"]["authenticated"], true, "{answer}");
}

#[test]
fn api_services_list_the_local_groups() {
    let server = Server::start();
    let listed = kubectl_ok(&server, None, &["get", "apiservices"]);
    let header = listed.lines().next().unwrap_or_default();
    assert!(
        header.contains("SERVICE") && header.contains("AVAILABLE"),
        "{listed}"
    );
    for name in [
        "v1.",
        "v1.coordination.k8s.io",
        "v1.rbac.authorization.k8s.io",
    ] {
        let row = listed
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} not listed:\n{listed}"));
        assert!(row.contains("Local") && row.contains("True"), "{row}");
    }
    let core = kubectl_json(&server, None, &["get", "apiservice", "v1."]);
    assert_eq!(core["spec"]["version"], "v1");
    assert_eq!(core["status"]["conditions"][0]["type"], "Available");

    // A non-local APIService: stored and listed, not available, and its
    // group version answers 503.
    let remote = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                 "service": {"namespace": "kube-system", "name": "metrics-server"},
                 "groupPriorityMinimum": 100, "versionPriority": 100,
                 "insecureSkipTLSVerify": true},
    });
    let args = ["apply", "-f", "-"];
    expect_success(
        &kubectl_stdin(&server, None, &args, &remote.to_string()),
        None,
        &args,
    );
    // The availability controller finds no Service behind it.
    poll_until(
        Duration::from_secs(30),
        "Available=False (ServiceNotFound)",
        || {
            let got = kubectl_ok(
                &server,
                None,
                &["get", "apiservice", "v1beta1.metrics.k8s.io"],
            );
            (got.contains("kube-system/metrics-server") && got.contains("False (ServiceNotFound)"))
                .then_some(())
        },
    );
    let (status, body) = server.get("/apis/metrics.k8s.io/v1beta1/pods").unwrap();
    assert_eq!(status, 503, "{body}");
    let (status, _) = server.get("/apis/example.org/v1/things").unwrap();
    assert_eq!(status, 404);

    // The name must be <version>.<group>.
    let bad = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                     "metadata": {"name": "wrong"}, "spec": {"group": "x.io", "version": "v1"}});
    let out = kubectl_stdin(&server, None, &args, &bad.to_string());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("metadata.name"),
        "{stderr}"
    );
}
