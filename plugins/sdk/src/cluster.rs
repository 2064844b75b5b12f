//! Reads of the cluster (the `cluster` import, since package 0.3.0): objects
//! of the kinds the plugin's `spec.contextAwareResources` grants, straight
//! from the server's store, within the plugin's read budget, and
//! SubjectAccessReviews through the server's authorizers ([`can_i`]).
//!
//! Natively (in `cargo test`) the calls answer from fixtures:
//! [`crate::testing::set_cluster`]'s objects, [`crate::testing::set_can_i`]'s
//! answer, and, once [`crate::testing::set_grants`] restricts them, the
//! host's "not granted" error for any other kind.
//!
//! ```ignore
//! use wasm_apiserver_plugin_sdk::cluster::{self, ResourceAttributes};
//! let ns = cluster::get("v1", "Namespace", None, "team-a")?;
//! let web = cluster::list("v1", "Service", Some("team-a"), Some("app=web"))?;
//! let may = cluster::can_i(req.user(), &ResourceAttributes::new("delete", "", "pods").namespace("team-a"))?;
//! ```

use serde_json::Value;

use crate::UserInfo;

/// The raw interface (records and functions) for plugins that want it.
pub mod raw {
    pub use crate::wasm_apiserver::plugin::cluster::*;
}

pub use raw::ResourceAttributes;

impl ResourceAttributes {
    /// `verb` on `resource` of API `group` (`""` for the core group), in
    /// every namespace and of any name until narrowed.
    pub fn new(verb: &str, group: &str, resource: &str) -> Self {
        Self {
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: None,
            namespace: None,
            name: None,
        }
    }

    /// In one namespace.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// On the object of this name.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// On this subresource (`status`, `scale`).
    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.to_owned());
        self
    }
}

/// One object of `kind` in `api_version` (as objects spell them: `v1`,
/// `Namespace`), or `None` when there is none.
pub fn get(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, String> {
    #[cfg(target_arch = "wasm32")]
    {
        let target = raw::Target::Kind(raw::KindRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
        let found = raw::get(&target, namespace, name)?;
        found
            .map(|o| serde_json::from_str(&o.json).map_err(|e| e.to_string()))
            .transpose()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::granted(api_version, kind)?;
        Ok(crate::testing::fixtures(api_version, kind, namespace)
            .into_iter()
            .find(|o| {
                o["metadata"]["name"] == name && o["metadata"]["namespace"].as_str() == namespace
            }))
    }
}

/// Every object of `kind` in `namespace` (every namespace for `None`)
/// matching `label_selector`, following `continue` tokens.
pub fn list(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Value>, String> {
    list_selected(api_version, kind, namespace, label_selector, None)
}

/// As [`list`], keeping only the objects `field_selector` matches too:
/// `path=value`, `path!=value`, joined by commas, on any field path, a list
/// on the way matching when one of its items does
/// (`spec.rules.host=a.example.com`). The server answers a `path=value` on
/// a field other than the name and namespace from a field index, so a
/// plugin looking for one value reads only the objects that have it, not
/// every object of the kind.
pub fn list_selected(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
    field_selector: Option<&str>,
) -> Result<Vec<Value>, String> {
    #[cfg(target_arch = "wasm32")]
    {
        let target = raw::Target::Kind(raw::KindRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = raw::list(
                &target,
                &raw::ListOptions {
                    namespace: namespace.map(String::from),
                    label_selector: label_selector.map(String::from),
                    field_selector: field_selector.map(String::from),
                    limit: None,
                    continue_token: token.take(),
                },
            )?;
            for o in page.items {
                out.push(serde_json::from_str(&o.json).map_err(|e| e.to_string())?);
            }
            match page.continue_token {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::granted(api_version, kind)?;
        let mut out = Vec::new();
        for o in crate::testing::fixtures(api_version, kind, namespace) {
            let matches = match label_selector {
                Some(s) => crate::testing::selector_matches(s, &o["metadata"]["labels"])?,
                None => true,
            } && match field_selector {
                Some(s) => crate::testing::field_selector_matches(s, &o)?,
                None => true,
            };
            if matches {
                out.push(o);
            }
        }
        Ok(out)
    }
}

/// Whether `user` may do what `attributes` say (a SubjectAccessReview
/// through the server's authorizers, e.g. for the request's own user:
/// `can_i(req.user(), ...)`). The plugin needs the grant
/// `{apiVersion: authorization.k8s.io/v1, kind: SubjectAccessReview}` in
/// its `spec.contextAwareResources`; without it the answer is the host's
/// "not granted" error. The user's `extra` is not part of the review.
pub fn can_i(user: &UserInfo, attributes: &ResourceAttributes) -> Result<bool, String> {
    #[cfg(target_arch = "wasm32")]
    {
        raw::can_i(user, attributes)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::can_i(user, attributes)
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::testing::{set_can_i, set_cluster, set_grants};
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: name.to_owned(),
            uid: String::new(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: Vec::new(),
        }
    }

    fn ingress(ns: &str, name: &str, labels: Value) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"namespace": ns, "name": name, "labels": labels}})
    }

    fn names(list: &[Value]) -> Vec<&str> {
        list.iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn get_and_list_answer_from_the_fixtures() {
        set_cluster(vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}),
            ingress("a", "web", json!({"app": "web", "tier": "front"})),
            ingress("b", "web", json!({"app": "web"})),
            ingress("b", "db", json!({"app": "db", "legacy": "yes"})),
        ]);
        let ns = get("v1", "Namespace", None, "a").unwrap().unwrap();
        assert_eq!(ns["metadata"]["name"], "a");
        assert_eq!(get("v1", "Namespace", None, "b").unwrap(), None);
        // A namespaced object is found in its namespace only.
        let web = get("networking.k8s.io/v1", "Ingress", Some("b"), "web").unwrap();
        assert_eq!(web.unwrap()["metadata"]["namespace"], "b");
        assert_eq!(
            get("networking.k8s.io/v1", "Ingress", None, "web").unwrap(),
            None
        );
        // Another version of the kind is another kind here.
        assert_eq!(get("v1", "Ingress", Some("b"), "web").unwrap(), None);

        let all = list("networking.k8s.io/v1", "Ingress", None, None).unwrap();
        assert_eq!(names(&all), ["web", "web", "db"]);
        let in_b = list("networking.k8s.io/v1", "Ingress", Some("b"), None).unwrap();
        assert_eq!(names(&in_b), ["web", "db"]);
        for (selector, want) in [
            ("app=web", &["web", "web"][..]),
            ("app==web,tier=front", &["web"]),
            ("app!=web", &["db"]),
            ("tier!=front", &["web", "db"]),
            ("app in (db, web),!legacy", &["web", "web"]),
            ("app notin (web)", &["db"]),
            ("legacy", &["db"]),
            ("", &["web", "web", "db"]),
        ] {
            let got = list("networking.k8s.io/v1", "Ingress", None, Some(selector)).unwrap();
            assert_eq!(names(&got), want, "{selector}");
        }
        assert!(list("networking.k8s.io/v1", "Ingress", None, Some("app in web")).is_err());
    }

    #[test]
    fn field_selectors_match_any_path_as_the_server_does() {
        let with_hosts = |ns: &str, name: &str, hosts: &[&str]| {
            let rules: Vec<Value> = hosts.iter().map(|h| json!({"host": h})).collect();
            let mut o = ingress(ns, name, json!({}));
            o["spec"] = json!({"rules": rules});
            o
        };
        set_cluster(vec![
            with_hosts("a", "one", &["x.example.com", "y.example.com"]),
            with_hosts("b", "two", &["y.example.com"]),
            with_hosts("b", "three", &[]),
        ]);
        let kind = "networking.k8s.io/v1";
        for (selector, want) in [
            ("spec.rules.host=y.example.com", &["one", "two"][..]),
            ("spec.rules.host=x.example.com", &["one"]),
            ("spec.rules.host!=x.example.com", &["two", "three"]),
            ("spec.rules.host=", &["three"]),
            (
                "spec.rules.host=y.example.com,metadata.namespace=b",
                &["two"],
            ),
        ] {
            let got = list_selected(kind, "Ingress", None, None, Some(selector)).unwrap();
            assert_eq!(names(&got), want, "{selector}");
        }
        assert!(list_selected(kind, "Ingress", None, None, Some("spec..host=a")).is_err());
    }

    #[test]
    fn reads_of_kinds_not_granted_fail_with_the_hosts_error() {
        set_cluster(vec![ingress("a", "web", json!({}))]);
        set_grants(&[("networking.k8s.io/v1", "Ingress")]);
        assert_eq!(
            list("networking.k8s.io/v1", "Ingress", None, None)
                .unwrap()
                .len(),
            1
        );
        let e = get("v1", "Secret", Some("a"), "token").unwrap_err();
        assert_eq!(
            e,
            "reading v1 Secret is not granted: it is not in the plugin's spec.contextAwareResources"
        );
        assert!(list("v1", "Secret", None, None).is_err());
        let e = can_i(
            &user("alice", &[]),
            &ResourceAttributes::new("get", "", "pods"),
        )
        .unwrap_err();
        assert!(
            e.starts_with("reading authorization.k8s.io/v1 SubjectAccessReview is not granted"),
            "{e}"
        );
    }

    #[test]
    fn can_i_answers_from_the_fixture_and_denies_without_one() {
        let delete_pods = ResourceAttributes::new("delete", "", "pods").namespace("team-a");
        assert!(!can_i(&user("alice", &[]), &delete_pods).unwrap());
        set_can_i(|u, a| {
            (u.username == "alice" || u.groups.iter().any(|g| g == "admins"))
                && a.verb == "delete"
                && a.namespace.as_deref() == Some("team-a")
                && a.subresource.is_none()
        });
        assert!(can_i(&user("alice", &[]), &delete_pods).unwrap());
        assert!(can_i(&user("bob", &["admins"]), &delete_pods).unwrap());
        assert!(!can_i(&user("bob", &["devs"]), &delete_pods).unwrap());
        let other_ns = ResourceAttributes::new("delete", "", "pods").namespace("team-b");
        assert!(!can_i(&user("alice", &[]), &other_ns).unwrap());
        let status = delete_pods.clone().name("web").subresource("status");
        assert_eq!(
            (status.name.as_deref(), status.subresource.as_deref()),
            (Some("web"), Some("status"))
        );
        assert!(!can_i(&user("alice", &[]), &status).unwrap());
        set_grants(&[("authorization.k8s.io/v1", "SubjectAccessReview")]);
        assert!(can_i(&user("alice", &[]), &delete_pods).unwrap());
    }
}
