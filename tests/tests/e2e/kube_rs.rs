//! End-to-end: the real server driven by kube-rs (kube 5, k8s-openapi 0.29)
//! over plain HTTP.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::Status;
use serde_json::json;
use wasm_apiserver_e2e::Server;

/// How long one watch event may take to arrive.
const EVENT_DEADLINE: Duration = Duration::from_secs(15);

use wasm_apiserver_e2e::kube_client as client;

fn configmap(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let to_map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: (!labels.is_empty()).then(|| to_map(labels)),
            ..ObjectMeta::default()
        },
        data: Some(to_map(data)),
        ..ConfigMap::default()
    }
}

fn data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The Status of an API error, or a panic naming what was expected.
fn api_status<T: std::fmt::Debug>(result: kube::Result<T>, expected: &str) -> Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected {expected}, got {other:?}"),
    }
}

fn rv(meta: &ObjectMeta) -> String {
    meta.resource_version.clone().expect("resourceVersion")
}

#[tokio::test]
async fn configmap_crud() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    let pp = PostParams::default();

    let created = api
        .create(&pp, &configmap("crud", &[("app", "web")], &[("a", "1")]))
        .await
        .expect("create");
    assert_eq!(created.name_any(), "crud");
    assert_eq!(created.namespace().as_deref(), Some("default"));
    assert!(created.uid().is_some_and(|u| !u.is_empty()));
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(data(&created), map(&[("a", "1")]));

    api.create(&pp, &configmap("other", &[("app", "db")], &[]))
        .await
        .expect("create other");

    let got = api.get("crud").await.expect("get");
    assert_eq!(got.uid(), created.uid());
    assert_eq!(got.resource_version(), created.resource_version());

    let list = api
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list");
    let names: Vec<_> = list.items.iter().map(|cm| cm.name_any()).collect();
    assert_eq!(names, ["crud"]);
    assert!(list.metadata.resource_version.is_some());
    let all = api.list(&ListParams::default()).await.expect("list all");
    let all: BTreeSet<_> = all.items.iter().map(|cm| cm.name_any()).collect();
    assert!(all.contains("crud") && all.contains("other"), "{all:?}");

    let by_field = api
        .list(&ListParams::default().fields("metadata.name=other"))
        .await
        .expect("list by field");
    let names: Vec<_> = by_field.items.iter().map(|cm| cm.name_any()).collect();
    assert_eq!(names, ["other"]);

    let pp_patch = PatchParams::default();
    let merged = api
        .patch(
            "crud",
            &pp_patch,
            &Patch::Merge(json!({"data": {"b": "2"}, "metadata": {"labels": {"tier": "x"}}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(data(&merged), map(&[("a", "1"), ("b", "2")]));
    assert_eq!(merged.labels(), &map(&[("app", "web"), ("tier", "x")]));
    assert_ne!(merged.resource_version(), created.resource_version());

    let strategic = api
        .patch(
            "crud",
            &pp_patch,
            &Patch::Strategic(json!({"data": {"a": null, "c": "3"}})),
        )
        .await
        .expect("strategic patch");
    assert_eq!(data(&strategic), map(&[("b", "2"), ("c", "3")]));

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/b", "value": "2"},
        {"op": "replace", "path": "/data/b", "value": "20"},
        {"op": "add", "path": "/metadata/annotations", "value": {"note": "json"}},
    ]))
    .expect("json patch");
    let patched = api
        .patch("crud", &pp_patch, &Patch::Json::<()>(ops))
        .await
        .expect("json patch");
    assert_eq!(data(&patched), map(&[("b", "20"), ("c", "3")]));
    assert_eq!(
        patched.annotations().get("note").map(String::as_str),
        Some("json")
    );

    let mut replacement = patched.clone();
    replacement.data = Some(map(&[("only", "this")]));
    let replaced = api
        .replace("crud", &pp, &replacement)
        .await
        .expect("replace");
    assert_eq!(data(&replaced), map(&[("only", "this")]));
    assert_eq!(replaced.uid(), created.uid());
    assert_eq!(api.get("crud").await.expect("get").data, replaced.data);

    let deleted = api
        .delete("crud", &DeleteParams::default())
        .await
        .expect("delete");
    if let Some(gone) = deleted.left() {
        assert_eq!(gone.name_any(), "crud");
    }
    let status = api_status(api.get("crud").await, "404 after delete");
    assert_eq!(status.code, 404);
    assert_eq!(status.reason, "NotFound");
    assert!(api.get_opt("crud").await.expect("get_opt").is_none());
    let left: Vec<_> = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|cm| cm.name_any())
        .collect();
    assert!(!left.contains(&"crud".to_string()), "{left:?}");
}

#[tokio::test]
async fn duplicate_create_is_409_already_exists() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    let cm = configmap("dup", &[], &[("a", "1")]);
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let status = api_status(
        api.create(&PostParams::default(), &cm).await,
        "409 AlreadyExists",
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "AlreadyExists");
}

#[tokio::test]
async fn stale_replace_is_409_conflict() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    api.create(
        &PostParams::default(),
        &configmap("cas", &[], &[("v", "0")]),
    )
    .await
    .expect("create");
    let stale = api.get("cas").await.expect("first read");

    let mut fresh = api.get("cas").await.expect("second read");
    fresh.data = Some(map(&[("v", "1")]));
    api.replace("cas", &PostParams::default(), &fresh)
        .await
        .expect("replace with current resourceVersion");

    let mut conflicting = stale.clone();
    conflicting.data = Some(map(&[("v", "stale")]));
    let status = api_status(
        api.replace("cas", &PostParams::default(), &conflicting)
            .await,
        "409 Conflict",
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        data(&api.get("cas").await.expect("get")),
        map(&[("v", "1")])
    );
}

#[tokio::test]
async fn invalid_name_is_422() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    for name in ["Not_Valid", "-leading-dash", &"x".repeat(254)] {
        let status = api_status(
            api.create(&PostParams::default(), &configmap(name, &[], &[]))
                .await,
            "422 Invalid",
        );
        assert_eq!(status.code, 422, "{name}: {status:?}");
        assert_eq!(status.reason, "Invalid", "{name}: {status:?}");
        assert!(
            status.message.contains("metadata.name"),
            "{name}: {status:?}"
        );
    }
    let names: Vec<_> = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|cm| cm.name_any())
        .collect();
    assert!(
        names.iter().all(|n| n.len() < 64 && !n.contains('_')),
        "{names:?}"
    );
}

#[tokio::test]
async fn paging_returns_every_object_once() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    let expected: BTreeSet<String> = (0..23).map(|i| format!("page-{i:02}")).collect();
    for name in &expected {
        api.create(
            &PostParams::default(),
            &configmap(name, &[("paged", "yes")], &[]),
        )
        .await
        .expect("create");
    }
    // Not selected: must not show up in any page.
    api.create(
        &PostParams::default(),
        &configmap("unpaged", &[("paged", "no")], &[]),
    )
    .await
    .expect("create");

    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().labels("paged=yes").limit(5);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.expect("list page");
        pages += 1;
        assert!(page.items.len() <= 5, "page of {} items", page.items.len());
        seen.extend(page.items.iter().map(|cm| cm.name_any()));
        // An object created mid-way is not part of the snapshot being paged.
        if pages == 2 {
            api.create(
                &PostParams::default(),
                &configmap("page-late", &[("paged", "yes")], &[]),
            )
            .await
            .expect("create mid-way");
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => token = Some(next),
            None => break,
        }
        assert!(pages < 20, "paging does not end: {seen:?}");
    }
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "duplicates: {seen:?}");
    assert_eq!(unique, expected);

    // A fresh listing does see the late object.
    let all = api
        .list(&ListParams::default().labels("paged=yes"))
        .await
        .expect("list");
    assert_eq!(all.items.len(), 24);
}

/// Next non-bookmark watch event, failing after [`EVENT_DEADLINE`].
async fn next_event<S>(stream: &mut S) -> WatchEvent<ConfigMap>
where
    S: Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    loop {
        let item = tokio::time::timeout(EVENT_DEADLINE, stream.next())
            .await
            .expect("no watch event in time")
            .expect("watch stream ended")
            .expect("watch error");
        if !matches!(item, WatchEvent::Bookmark(_)) {
            return item;
        }
    }
}

/// `("ADDED", name, data["v"])` for comparing events.
fn describe(event: &WatchEvent<ConfigMap>) -> (String, String, Option<String>) {
    let (kind, cm) = match event {
        WatchEvent::Added(cm) => ("ADDED", cm),
        WatchEvent::Modified(cm) => ("MODIFIED", cm),
        WatchEvent::Deleted(cm) => ("DELETED", cm),
        other => panic!("unexpected watch event {other:?}"),
    };
    (kind.to_string(), cm.name_any(), data(cm).get("v").cloned())
}

fn event_rv(event: &WatchEvent<ConfigMap>) -> String {
    match event {
        WatchEvent::Added(cm) | WatchEvent::Modified(cm) | WatchEvent::Deleted(cm) => {
            rv(&cm.metadata)
        }
        other => panic!("no object in {other:?}"),
    }
}

fn ev(kind: &str, name: &str, v: Option<&str>) -> (String, String, Option<String>) {
    (kind.to_string(), name.to_string(), v.map(str::to_string))
}

#[tokio::test]
async fn watch_resumes_from_last_resource_version() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    let pp = PostParams::default();
    let wp = WatchParams::default().labels("w=yes").timeout(60);
    let cm = |name: &str, v: &str| configmap(name, &[("w", "yes")], &[("v", v)]);

    api.create(&pp, &cm("before", "0")).await.expect("create");
    let list = api
        .list(&ListParams::default().labels("w=yes"))
        .await
        .expect("list");
    let list_rv = list
        .metadata
        .resource_version
        .expect("list resourceVersion");

    // First connection: sees only what happens after the list.
    let mut stream = api.watch(&wp, &list_rv).await.expect("watch").boxed();
    api.create(&pp, &cm("a", "1")).await.expect("create a");
    api.patch(
        "before",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "1"}})),
    )
    .await
    .expect("patch before");
    let first = next_event(&mut stream).await;
    let second = next_event(&mut stream).await;
    assert_eq!(describe(&first), ev("ADDED", "a", Some("1")));
    assert_eq!(describe(&second), ev("MODIFIED", "before", Some("1")));
    let last_rv = event_rv(&second);
    drop(stream);

    // Changes while disconnected, including one the selector filters out.
    api.create(&pp, &cm("b", "1")).await.expect("create b");
    api.create(&pp, &configmap("unwatched", &[("w", "no")], &[]))
        .await
        .expect("create unwatched");
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .expect("patch a");
    api.delete("before", &DeleteParams::default())
        .await
        .expect("delete before");

    // Reconnect from the last seen resourceVersion: exactly the missed
    // events, in order, then the live ones.
    let mut stream = api.watch(&wp, &last_rv).await.expect("re-watch").boxed();
    let mut missed = Vec::new();
    for _ in 0..3 {
        missed.push(next_event(&mut stream).await);
    }
    let described: Vec<_> = missed.iter().map(describe).collect();
    assert_eq!(
        described,
        [
            ev("ADDED", "b", Some("1")),
            ev("MODIFIED", "a", Some("2")),
            ev("DELETED", "before", Some("1")),
        ]
    );
    let rvs: Vec<u64> = missed
        .iter()
        .filter_map(|e| event_rv(e).parse().ok())
        .collect();
    if rvs.len() == missed.len() {
        assert!(
            rvs.windows(2).all(|w| w[0] < w[1]),
            "resourceVersions not increasing: {rvs:?}"
        );
    }
    api.create(&pp, &cm("live", "1"))
        .await
        .expect("create live");
    assert_eq!(
        describe(&next_event(&mut stream).await),
        ev("ADDED", "live", Some("1"))
    );
}

#[tokio::test]
async fn watch_sends_bookmarks_when_asked() {
    let server = Server::start_with_args(&["--watch-progress-interval", "200ms"]);
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    let created = api
        .create(&PostParams::default(), &configmap("idle", &[], &[]))
        .await
        .expect("create");
    let created_rv = rv(&created.metadata);
    let mut stream = api
        .watch(&WatchParams::default().timeout(30), &created_rv)
        .await
        .expect("watch")
        .boxed();
    // No changes happen, so the first event must be a bookmark.
    let first = tokio::time::timeout(EVENT_DEADLINE, stream.next())
        .await
        .expect("no bookmark in time")
        .expect("watch stream ended")
        .expect("watch error");
    let WatchEvent::Bookmark(bookmark) = first else {
        panic!("idle watch got {first:?}");
    };
    assert!(!bookmark.metadata.resource_version.is_empty());
}

#[tokio::test]
async fn watch_from_compacted_resource_version_is_410() {
    let server = Server::start_with_args(&["--etcd-compaction-interval", "1s"]);
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    let created = api
        .create(
            &PostParams::default(),
            &configmap("old", &[], &[("v", "0")]),
        )
        .await
        .expect("create");
    let old_rv = rv(&created.metadata);

    // Keep writing and re-watching from the old revision until the server
    // has compacted it away (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 0u32;
    let status = loop {
        attempt += 1;
        api.patch(
            "old",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": attempt.to_string()}})),
        )
        .await
        .expect("patch");
        match api
            .watch(&WatchParams::default().timeout(10), &old_rv)
            .await
        {
            Err(kube::Error::Api(status)) => break *status,
            Err(other) => panic!("watch failed without a Status: {other:?}"),
            Ok(stream) => {
                let mut stream = stream.boxed();
                let first = tokio::time::timeout(EVENT_DEADLINE, stream.next())
                    .await
                    .expect("a watch from an old revision replays or fails at once")
                    .expect("watch stream ended");
                match first {
                    Ok(WatchEvent::Error(status)) => break *status,
                    Err(kube::Error::Api(status)) => break *status,
                    Ok(WatchEvent::Modified(_) | WatchEvent::Bookmark(_)) => {}
                    other => panic!("unexpected first event {other:?}"),
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "revision {old_rv} still watchable after {attempt} attempts"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status.code, 410, "{status:?}");
    assert_eq!(status.reason, "Expired", "{status:?}");

    // A fresh watch from "0" (any revision) still works.
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .expect("fresh watch")
        .boxed();
    let first = tokio::time::timeout(EVENT_DEADLINE, stream.next())
        .await
        .expect("fresh watch from 0 starts with the current state")
        .expect("stream ended")
        .expect("watch error");
    assert_eq!(describe(&first).0, "ADDED");
}

#[tokio::test]
async fn lease_round_trip() {
    let server = Server::start();
    let api: Api<Lease> = Api::namespaced(client(&server), "kube-node-lease");
    let acquired = MicroTime("2024-05-01T10:00:00.123456Z".parse().expect("time"));
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("node-1".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("node-1".into()),
            lease_duration_seconds: Some(40),
            acquire_time: Some(acquired.clone()),
            renew_time: Some(acquired.clone()),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    };
    let created = api
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    assert_eq!(created.spec, lease.spec);
    assert_eq!(created.namespace().as_deref(), Some("kube-node-lease"));

    let mut got = api.get("node-1").await.expect("get lease");
    assert_eq!(got.spec, lease.spec);

    let renewed = MicroTime("2024-05-01T10:00:30.654321Z".parse().expect("time"));
    let spec = got.spec.as_mut().expect("spec");
    spec.renew_time = Some(renewed.clone());
    spec.lease_transitions = Some(1);
    let replaced = api
        .replace("node-1", &PostParams::default(), &got)
        .await
        .expect("renew");
    let spec = replaced.spec.expect("spec");
    assert_eq!(spec.renew_time, Some(renewed));
    assert_eq!(spec.acquire_time, Some(acquired));
    assert_eq!(spec.lease_transitions, Some(1));

    let list = api.list(&ListParams::default()).await.expect("list leases");
    assert!(list.items.iter().any(|l| l.name_any() == "node-1"));

    api.delete("node-1", &DeleteParams::default())
        .await
        .expect("delete lease");
    assert_eq!(api_status(api.get("node-1").await, "404").code, 404);
}

#[tokio::test]
async fn finalizer_delays_deletion() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    let mut cm = configmap("held", &[("f", "yes")], &[("v", "1")]);
    cm.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let created = api
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let mut stream = api
        .watch(
            &WatchParams::default().labels("f=yes").timeout(30),
            &rv(&created.metadata),
        )
        .await
        .expect("watch")
        .boxed();

    // Delete answers with the object, now terminating, and it stays.
    let deleted = api
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = deleted.left().expect("delete of a held object returns it");
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "{terminating:?}"
    );
    let got = api.get("held").await.expect("still there");
    assert!(got.metadata.deletion_timestamp.is_some());
    assert_eq!(got.finalizers(), ["example.com/hold"]);
    let event = next_event(&mut stream).await;
    assert_eq!(describe(&event), ev("MODIFIED", "held", Some("1")));

    // Removing the last finalizer completes the deletion.
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    assert_eq!(
        describe(&next_event(&mut stream).await),
        ev("DELETED", "held", Some("1"))
    );
    assert_eq!(api_status(api.get("held").await, "404").code, 404);
}

#[tokio::test]
async fn delete_collection_with_selector() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    for (name, group) in [("d1", "a"), ("d2", "a"), ("d3", "b")] {
        api.create(
            &PostParams::default(),
            &configmap(name, &[("group", group)], &[]),
        )
        .await
        .expect("create");
    }
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("group=a"),
    )
    .await
    .expect("deletecollection");
    let left: BTreeSet<_> = api
        .list(&ListParams::default().labels("group"))
        .await
        .expect("list")
        .items
        .iter()
        .map(|cm| cm.name_any())
        .collect();
    assert_eq!(left, BTreeSet::from(["d3".to_string()]));
}

#[tokio::test]
async fn dry_run_all_changes_nothing() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answered = api
        .create(&dry, &configmap("dry", &[], &[("v", "1")]))
        .await
        .expect("dry-run create");
    assert_eq!(answered.name_any(), "dry");
    assert_eq!(data(&answered), map(&[("v", "1")]));
    assert!(
        api.get_opt("dry").await.expect("get_opt").is_none(),
        "dry-run create stored the object"
    );

    let real = api
        .create(
            &PostParams::default(),
            &configmap("real", &[], &[("v", "1")]),
        )
        .await
        .expect("create");
    let patched = api
        .patch(
            "real",
            &PatchParams {
                dry_run: true,
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .expect("dry-run patch");
    assert_eq!(
        data(&patched),
        map(&[("v", "2")]),
        "dry-run answers with the result"
    );
    api.delete(
        "real",
        &DeleteParams {
            dry_run: true,
            ..DeleteParams::default()
        },
    )
    .await
    .expect("dry-run delete");
    let stored = api.get("real").await.expect("still there");
    assert_eq!(data(&stored), map(&[("v", "1")]));
    assert_eq!(stored.resource_version(), real.resource_version());
}

#[tokio::test]
async fn secret_serviceaccount_event_round_trip() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{Event, ObjectReference, Secret, ServiceAccount};

    let server = Server::start();
    let client = client(&server);
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    };

    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let secret = Secret {
        metadata: meta("creds"),
        string_data: Some(map(&[("user", "admin")])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let got = secrets.get("creds").await.expect("get secret");
    let bytes = got.data.expect("data")["user"].clone();
    assert_eq!(bytes, ByteString(b"admin".to_vec()));
    assert!(got.string_data.is_none());

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    accounts
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta("robot"),
                ..ServiceAccount::default()
            },
        )
        .await
        .expect("create service account");
    assert_eq!(
        accounts
            .get("robot")
            .await
            .expect("get")
            .namespace()
            .as_deref(),
        Some("kube-system")
    );

    let events: Api<Event> = Api::default_namespaced(client);
    let event = Event {
        metadata: meta("creds.1"),
        involved_object: ObjectReference {
            kind: Some("Secret".into()),
            name: Some("creds".into()),
            namespace: Some("default".into()),
            ..ObjectReference::default()
        },
        reason: Some("Tested".into()),
        message: Some("round trip".into()),
        type_: Some("Normal".into()),
        count: Some(1),
        ..Event::default()
    };
    events
        .create(&PostParams::default(), &event)
        .await
        .expect("create event");
    let got = events.get("creds.1").await.expect("get event");
    assert_eq!(got.involved_object, event.involved_object);
    assert_eq!(got.reason.as_deref(), Some("Tested"));
    assert_eq!(got.message.as_deref(), Some("round trip"));
}

#[tokio::test]
async fn discovery_and_version() {
    let server = Server::start();
    let client = client(&server);
    let version = client.apiserver_version().await.expect("/version");
    assert!(version.git_version.starts_with("v1."), "{version:?}");
    assert_eq!(version.major, "1");

    let discovery = kube::Discovery::new(client).run().await.expect("discovery");
    let resources = |group: &str| -> BTreeSet<String> {
        discovery
            .get(group)
            .unwrap_or_else(|| panic!("no group {group:?}"))
            .recommended_resources()
            .into_iter()
            .map(|(ar, _)| ar.plural)
            .collect()
    };
    let core = resources("");
    for plural in [
        "namespaces",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "events",
    ] {
        assert!(core.contains(plural), "{plural} missing from {core:?}");
    }
    assert!(resources("coordination.k8s.io").contains("leases"));
    let (lease, caps) = discovery
        .get("coordination.k8s.io")
        .and_then(|g| g.recommended_kind("Lease"))
        .expect("Lease kind");
    assert_eq!(lease.version, "v1");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    for verb in [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ] {
        assert!(
            caps.supports_operation(verb),
            "leases lack {verb}: {:?}",
            caps.operations
        );
    }
}

#[tokio::test]
async fn pods_and_deployments_through_typed_apis() {
    use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    let server = Server::start();
    let client = client(&server);
    let labels = map(&[("app", "kube-rs")]);
    let spec = PodSpec {
        containers: vec![Container {
            name: "web".into(),
            image: Some("nginx:1.27".into()),
            ..Container::default()
        }],
        ..PodSpec::default()
    };
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod = pods
        .create(
            &PostParams::default(),
            &Pod {
                metadata: ObjectMeta {
                    name: Some("p".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec.clone()),
                ..Pod::default()
            },
        )
        .await
        .expect("create pod");
    let status = pod.status.expect("a status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let defaulted = pod.spec.expect("a spec");
    assert_eq!(defaulted.restart_policy.as_deref(), Some("Always"));
    assert_eq!(defaulted.dns_policy.as_deref(), Some("ClusterFirst"));

    let deployments: Api<Deployment> = Api::default_namespaced(client);
    let d = deployments
        .create(
            &PostParams::default(),
            &Deployment {
                metadata: ObjectMeta {
                    name: Some("web".into()),
                    ..ObjectMeta::default()
                },
                spec: DeploymentSpec {
                    selector: LabelSelector {
                        match_labels: Some(labels.clone()),
                        ..LabelSelector::default()
                    },
                    template: PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some(labels),
                            ..ObjectMeta::default()
                        }),
                        spec: Some(spec),
                    },
                    ..DeploymentSpec::default()
                },
                ..Deployment::default()
            },
        )
        .await
        .expect("create deployment");
    let spec = d.spec;
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    let scale = deployments.get_scale("web").await.expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(1));
    deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale up");
    let d = deployments.get("web").await.expect("get");
    assert_eq!(d.spec.replicas, Some(4));
    let listed = deployments
        .list(&ListParams::default())
        .await
        .expect("list");
    assert_eq!(listed.items.len(), 1);
}

/// Metadata-only reads (`Accept: ...;as=PartialObjectMetadata[List]`), as
/// the garbage collector, controller-runtime's metadata informers and
/// kube-rs's `*_metadata` calls make them: the answer carries no data.
#[tokio::test]
async fn metadata_only_get_list_patch_and_watch() {
    let server = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(client(&server));
    api.create(
        &PostParams::default(),
        &configmap("meta", &[("app", "web")], &[("secret-ish", "big value")]),
    )
    .await
    .expect("create");

    let got = api.get_metadata("meta").await.expect("get_metadata");
    assert_eq!(
        got.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(got.metadata.labels, Some(map(&[("app", "web")])));

    let listed = api
        .list_metadata(&ListParams::default().labels("app=web"))
        .await
        .expect("list_metadata");
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("meta"));

    let patched = api
        .patch_metadata(
            "meta",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "one"}}})),
        )
        .await
        .expect("patch_metadata");
    assert_eq!(
        patched
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("tier"))
            .map(String::as_str),
        Some("one")
    );

    // The raw answers hold no data: the request's Accept decides.
    let raw = client(&server);
    let req = http::Request::get("/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1")
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap();
    let text = raw.request_text(req).await.expect("watch");
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("an event")).expect("JSON");
    assert_eq!(first["object"]["kind"], "PartialObjectMetadata", "{first}");
    assert!(first["object"].get("data").is_none(), "{first}");
    assert!(!text.contains("big value"), "{text}");
}

/// kube-client's own `fetch_fails` cluster test: a Service fetched as a Pod
/// fails with the column where `kind` is, which is where upstream writes it
/// (built-in objects come in their Go types' field order: `kind`,
/// `apiVersion`, `metadata`, ...).
#[tokio::test]
async fn fetch_fails_names_the_column_of_kind() {
    use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
    use kube::Resource;
    let server = Server::start();
    let client = client(&server);
    let reference = ObjectReference {
        kind: Some(Service::kind(&()).into()),
        api_version: Some(Service::api_version(&()).into()),
        name: Some("kubernetes".into()),
        namespace: Some("default".into()),
        ..Default::default()
    };
    // The `kubernetes` Service is written by a controller after start.
    let deadline = Instant::now() + Duration::from_secs(30);
    let svc: Service = loop {
        match client.fetch(&reference).await {
            Ok(svc) => break svc,
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for default/kubernetes: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("default/kubernetes never appeared: {e}"),
        }
    };
    let err = client.fetch::<Pod>(&svc.object_ref(&())).await.unwrap_err();
    assert!(matches!(err, kube::Error::SerdeError(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "Error deserializing response: invalid value: string \"Service\", expected Pod at line 1 column 17"
    );
    let obj: kube::core::DynamicObject = client.fetch(&svc.object_ref(&())).await.unwrap();
    assert_eq!(
        obj.try_parse::<Pod>().unwrap_err().to_string(),
        "failed to parse this DynamicObject into a Resource: invalid value: string \"Service\", expected Pod"
    );

    // The bytes themselves: a GET and a LIST of built-in objects in Go's
    // order, a custom-resource-like unknown key never first.
    let get = |path: &str| {
        http::Request::get(path.to_string())
            .body(Vec::new())
            .unwrap()
    };
    let body = client
        .request_text(get("/api/v1/namespaces/default/services/kubernetes"))
        .await
        .unwrap();
    assert!(
        body.starts_with(
            r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"kubernetes","namespace":"default","uid":"#
        ),
        "{body}"
    );
    let spec = body.find(r#""spec":{"#).expect("spec");
    assert!(
        body.find(r#""status":{"#).is_some_and(|s| s > spec),
        "{body}"
    );
    let list = client
        .request_text(get("/api/v1/namespaces/default/services"))
        .await
        .unwrap();
    assert!(
        list.starts_with(
            r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"#
        ),
        "{list}"
    );
    assert!(
        list.contains(r#""items":[{"metadata":{"name":"kubernetes""#),
        "{list}"
    );
}
