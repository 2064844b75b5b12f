//! `namespace-defaults`: a controller of `Namespace`s (since package 0.3.0).
//!
//! Every namespace labelled `tenant` (the label is configurable) gets three
//! objects, generated and kept as generated, as Kyverno's `generate` rules
//! with `synchronize: true` do:
//! - NetworkPolicy `default-deny` (no ingress, no egress),
//! - ResourceQuota `default-quota` (`spec.config.quota`, default
//!   `pods: "20"`),
//! - RoleBinding `tenant-admins` (ClusterRole `admin` to the group
//!   `tenant:<label value>`).
//!
//! All three are written by one server-side apply call (`apply_all`:
//! idempotent; a hand edit of a generated field is put back; the server
//! applies them concurrently), carries the label
//! `app.kubernetes.io/managed-by: namespace-defaults` and is owned by its
//! Namespace (so a deleted object queues the namespace again, and the
//! garbage collector removes them with it). When the label goes, the
//! generated objects go too. Unlabelled namespaces are left alone.
//!
//! Its `Controller` object: `for: v1 Namespace`, `owns` the three kinds.

use serde::Deserialize;
use std::collections::BTreeMap;
use wasm_apiserver_controller_sdk::{
    Action, Controller, Request, Value, apply_all, delete, event, export_controller, json, list,
    owner_reference,
};

/// The label that marks generated objects, and its default value.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const ME: &str = "namespace-defaults";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The namespace label that asks for defaults; its value names the
    /// tenant.
    #[serde(default = "tenant")]
    pub label: String,
    /// `spec.hard` of the generated ResourceQuota.
    #[serde(default = "quota")]
    pub quota: BTreeMap<String, String>,
    /// The value of the `app.kubernetes.io/managed-by` label on what it
    /// generates: what it removes when the label goes (two instances with
    /// different values never remove each other's objects).
    #[serde(default = "me")]
    pub manager: String,
}

fn me() -> String {
    ME.into()
}

fn tenant() -> String {
    "tenant".into()
}

fn quota() -> BTreeMap<String, String> {
    BTreeMap::from([("pods".into(), "20".into())])
}

impl Default for Config {
    fn default() -> Self {
        Config {
            label: tenant(),
            quota: quota(),
            manager: me(),
        }
    }
}

/// The generated kinds: `(apiVersion, kind, name)`.
pub const GENERATED: [(&str, &str, &str); 3] = [
    ("networking.k8s.io/v1", "NetworkPolicy", "default-deny"),
    ("v1", "ResourceQuota", "default-quota"),
    (
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "tenant-admins",
    ),
];

/// What a labelled namespace gets.
pub fn desired(config: &Config, ns: &Value, tenant: &str) -> Vec<Value> {
    let name = ns["metadata"]["name"].as_str().unwrap_or_default();
    let metadata = |object: &str| {
        json!({
            "name": object,
            "namespace": name,
            "labels": {MANAGED_BY: config.manager},
            "ownerReferences": [owner_reference(ns)],
        })
    };
    vec![
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata("default-deny"),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        }),
        json!({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": metadata("default-quota"),
            "spec": {"hard": config.quota},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": metadata("tenant-admins"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": format!("tenant:{tenant}")}],
        }),
    ]
}

pub struct NamespaceDefaults;

impl Controller for NamespaceDefaults {
    type Config = Config;

    fn reconcile(config: &Config, req: &Request) -> Result<Action, String> {
        let Some(ns) = req.get()? else {
            return Ok(Action::Done);
        };
        if ns["metadata"].get("deletionTimestamp").is_some() {
            return Ok(Action::Done);
        }
        match ns["metadata"]["labels"][&config.label].as_str() {
            Some(tenant) => {
                // The three at once: one round trip, one storage commit.
                let objects = desired(config, &ns, tenant);
                for (object, result) in objects.iter().zip(apply_all(&objects)) {
                    if let Err(e) = result {
                        let what = format!(
                            "{} {}",
                            object["kind"].as_str().unwrap_or_default(),
                            object["metadata"]["name"].as_str().unwrap_or_default()
                        );
                        event(
                            &ns,
                            true,
                            "GenerateFailed",
                            &format!("could not apply {what}: {e}"),
                        );
                        return Err(format!("applying {what}: {e}"));
                    }
                }
            }
            None => {
                // No longer asked for: remove what was generated.
                let selector = format!("{MANAGED_BY}={}", config.manager);
                for (api_version, kind, name) in GENERATED {
                    let generated = list(api_version, kind, Some(&req.name), Some(&selector))?;
                    if generated.iter().any(|o| o["metadata"]["name"] == name) {
                        delete(api_version, kind, Some(&req.name), name)?;
                    }
                }
            }
        }
        Ok(Action::Done)
    }
}

export_controller!(NamespaceDefaults);

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_apiserver_controller_sdk::testing;

    fn namespace(labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a", "uid": "u1", "labels": labels}})
    }

    fn key() -> Request {
        testing::key("", "v1", "namespaces", None, "team-a")
    }

    #[test]
    fn a_labelled_namespace_gets_three_objects_and_loses_them_with_the_label() {
        testing::set_cluster(vec![namespace(json!({"tenant": "a"}))]);
        testing::reconcile::<NamespaceDefaults>("", &key()).unwrap();
        let writes = testing::take_writes();
        let kinds: Vec<_> = writes.iter().map(|w| (w.verb, w.kind.as_str())).collect();
        assert_eq!(
            kinds,
            [
                ("apply", "NetworkPolicy"),
                ("apply", "ResourceQuota"),
                ("apply", "RoleBinding")
            ]
        );
        assert_eq!(writes[2].object["subjects"][0]["name"], "tenant:a");
        assert_eq!(
            writes[0].object["metadata"]["ownerReferences"][0]["uid"],
            "u1"
        );
        // The label goes: so do the generated objects.
        let mut objects = testing::objects();
        objects[0] = namespace(json!({}));
        testing::set_cluster(objects);
        testing::reconcile::<NamespaceDefaults>("", &key()).unwrap();
        let deleted: Vec<_> = testing::writes()
            .iter()
            .map(|w| (w.verb, w.name.clone()))
            .collect();
        assert_eq!(deleted.len(), 3, "{deleted:?}");
        assert!(deleted.iter().all(|(v, _)| *v == "delete"));
    }

    #[test]
    fn typed_reads_decode_into_the_callers_type() {
        #[derive(serde::Deserialize)]
        struct Meta {
            name: String,
            labels: BTreeMap<String, String>,
        }
        #[derive(serde::Deserialize)]
        struct Ns {
            metadata: Meta,
        }
        testing::set_cluster(vec![namespace(json!({"tenant": "a"}))]);
        let ns: Ns = key().get_as().unwrap().unwrap();
        assert_eq!(
            (
                ns.metadata.name.as_str(),
                ns.metadata.labels["tenant"].as_str()
            ),
            ("team-a", "a")
        );
        let all: Vec<Ns> =
            wasm_apiserver_controller_sdk::list_as("v1", "Namespace", None, Some("tenant=a"))
                .unwrap();
        assert_eq!(all.len(), 1);
        // A shape that does not fit is an error naming why.
        let err =
            wasm_apiserver_controller_sdk::get_as::<Vec<u8>>("v1", "Namespace", None, "team-a")
                .unwrap_err();
        assert!(err.contains("cannot decode"), "{err}");
    }

    #[test]
    fn unlabelled_and_absent_namespaces_are_left_alone() {
        testing::set_cluster(vec![namespace(json!({"team": "x"}))]);
        testing::reconcile::<NamespaceDefaults>("", &key()).unwrap();
        assert!(testing::writes().is_empty());
        testing::set_cluster(vec![]);
        testing::reconcile::<NamespaceDefaults>("", &key()).unwrap();
        assert!(testing::writes().is_empty());
    }

    #[test]
    fn the_quota_and_label_are_configurable() {
        testing::set_cluster(vec![namespace(json!({"owner": "b"}))]);
        testing::reconcile::<NamespaceDefaults>(
            r#"{"label": "owner", "quota": {"pods": "5"}}"#,
            &key(),
        )
        .unwrap();
        let quota = testing::find_write("ResourceQuota");
        assert_eq!(quota["spec"]["hard"]["pods"], "5");
        assert!(testing::reconcile::<NamespaceDefaults>(r#"{"nope": 1}"#, &key()).is_err());
    }
}
