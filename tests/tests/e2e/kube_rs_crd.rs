//! End-to-end: a kube-rs `#[derive(CustomResource)]` type, its generated
//! CRD (and schema) applied to the real server, then typed CRUD, the status
//! subresource and a watch, as a controller written with kube-rs does.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use wasm_apiserver_e2e::Server;

/// A document with a title, as in kube-rs's own examples.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "kube.rs", version = "v1", kind = "Document", namespaced)]
#[kube(status = "DocumentStatus", shortname = "doc")]
pub struct DocumentSpec {
    title: String,
    hidden: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pages: Option<u32>,
    #[serde(default)]
    tags: Vec<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct DocumentStatus {
    published: bool,
}

use wasm_apiserver_e2e::kube_client as client;

#[test]
fn a_derived_custom_resource_round_trips() {
    let server = Server::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = client(&server);
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &Document::crd())
            .await
            .expect("the generated CRD (and schema) is accepted");
        let established = await_condition(crds, "documents.kube.rs", conditions::is_crd_established());
        tokio::time::timeout(Duration::from_secs(10), established)
            .await
            .expect("Established in time")
            .expect("condition watch");

        let docs: Api<Document> = Api::namespaced(client.clone(), "default");
        let mut events = docs
            .watch(&WatchParams::default(), "0")
            .await
            .expect("watch")
            .boxed();
        let doc = Document::new(
            "readme",
            DocumentSpec { title: "Read me".into(), hidden: false, pages: Some(3), tags: vec!["a".into()] },
        );
        let created = docs.create(&PostParams::default(), &doc).await.expect("create");
        assert_eq!(created.spec.title, "Read me");
        assert!(created.uid().is_some());
        let seen = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(ev) = events.try_next().await.expect("watch stream") {
                if let WatchEvent::Added(d) = ev {
                    return d;
                }
            }
            panic!("watch ended");
        })
        .await
        .expect("an ADDED event");
        assert_eq!(seen.name_any(), "readme");

        let listed = docs.list(&ListParams::default()).await.expect("list");
        assert_eq!(listed.items.len(), 1);

        // A type the schema refuses: 422, from the generated schema.
        let bad = json!({"apiVersion": "kube.rs/v1", "kind": "Document", "metadata": {"name": "bad"},
                         "spec": {"title": 5, "hidden": false}});
        let raw: Api<kube::core::DynamicObject> = Api::namespaced_with(
            client.clone(),
            "default",
            &kube::core::ApiResource::erase::<Document>(&()),
        );
        let refused = raw
            .create(&PostParams::default(), &serde_json::from_value(bad).unwrap())
            .await
            .expect_err("a string title is required");
        match refused {
            kube::Error::Api(s) => {
                assert_eq!(s.code, 422, "{s:?}");
                assert!(s.message.contains("spec.title"), "{}", s.message);
            }
            other => panic!("{other:?}"),
        }

        // The status subresource.
        let status = Patch::Merge(json!({"status": {"published": true}}));
        let patched = docs
            .patch_status("readme", &PatchParams::default(), &status)
            .await
            .expect("status patch");
        assert!(patched.status.as_ref().unwrap().published);
        assert_eq!(patched.spec.title, "Read me");

        docs.delete("readme", &DeleteParams::default()).await.expect("delete");
        assert!(docs.get_opt("readme").await.expect("get").is_none());
    });
}
