//! Discovery documents from the resource registry: the legacy
//! `APIResourceList` of one group version and the aggregated
//! `APIGroupDiscoveryList` (`apidiscovery.k8s.io/v2`, and `v2beta1`) that
//! kubectl 1.30+ and kube-rs's `Discovery::run_aggregated` ask `/api` and
//! `/apis` for, with upstream's shape (omitted empty fields included) and
//! content negotiation.

use crate::resource::{Registry, ResourceInfo, Subresource};
use serde_json::{Value, json};

/// The discovery group.
pub const GROUP: &str = "apidiscovery.k8s.io";

/// Which document a `GET /api` or `/apis` answers, from its `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `APIVersions` / `APIGroupList`.
    Legacy,
    /// `APIGroupDiscoveryList` in `apidiscovery.k8s.io/<version>`.
    Aggregated(&'static str),
}

impl Format {
    /// The response's media type.
    pub fn content_type(self) -> String {
        match self {
            Format::Legacy => "application/json".into(),
            Format::Aggregated(v) => {
                format!("application/json;g={GROUP};v={v};as=APIGroupDiscoveryList")
            }
        }
    }
}

/// Content negotiation as upstream: the first acceptable media range wins;
/// an aggregated range needs JSON (we serve no protobuf), `g`, `v` (`v2`,
/// `v2beta1`) and `as=APIGroupDiscoveryList`; plain JSON or a wildcard is
/// the legacy document. `None`: nothing acceptable (406).
pub fn negotiate(accept: &str) -> Option<Format> {
    if accept.trim().is_empty() {
        return Some(Format::Legacy);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut params = std::collections::BTreeMap::new();
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                params.insert(k.trim().to_ascii_lowercase(), v.trim().trim_matches('"'));
            }
        }
        if params
            .get("q")
            .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
        {
            continue;
        }
        let json_like = matches!(media.as_str(), "application/json" | "application/*" | "*/*");
        match params.get("as") {
            Some(&"APIGroupDiscoveryList") => {
                let version = match params.get("v") {
                    Some(&"v2") => "v2",
                    Some(&"v2beta1") => "v2beta1",
                    _ => continue,
                };
                if json_like && params.get("g") == Some(&GROUP) {
                    return Some(Format::Aggregated(version));
                }
            }
            Some(_) => continue,
            None if json_like => return Some(Format::Legacy),
            None => {}
        }
    }
    None
}

fn legacy_subresource(r: &ResourceInfo, sub: &Subresource) -> Value {
    let mut entry = json!({
        "name": format!("{}/{}", r.plural, sub.name),
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": sub.kind,
        "verbs": sub.verbs,
    });
    if sub.group != r.group || sub.version != r.version {
        entry["group"] = json!(sub.group);
        entry["version"] = json!(sub.version);
    }
    entry
}

/// `GET /api/v1` or `/apis/<group>/<version>`; `None` when the group
/// version serves nothing.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in registry.in_group_version(group, version) {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
            "shortNames": r.short_names,
        });
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        resources.extend(r.subresources.iter().map(|s| legacy_subresource(r, s)));
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn resource_discovery(r: &ResourceInfo) -> Value {
    let mut entry = json!({
        "resource": r.plural,
        "responseKind": gvk(&r.group, &r.version, &r.kind),
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    if !r.subresources.is_empty() {
        entry["subresources"] = r
            .subresources
            .iter()
            .map(|s| {
                json!({
                    "subresource": s.name,
                    "responseKind": gvk(&s.group, &s.version, &s.kind),
                    "verbs": s.verbs,
                })
            })
            .collect();
    }
    entry
}

fn group_discovery(registry: &Registry, group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = registry
                .in_group_version(group, v)
                .map(resource_discovery)
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let metadata = if group.is_empty() {
        json!({"creationTimestamp": null})
    } else {
        json!({"name": group, "creationTimestamp": null})
    };
    json!({"metadata": metadata, "versions": versions})
}

/// The aggregated discovery document of `/api` (`core`) or `/apis`, in
/// `apidiscovery.k8s.io/<version>`.
pub fn aggregated(registry: &Registry, core: bool, version: &str) -> Value {
    let items: Vec<Value> = if core {
        let versions: Vec<String> = ["v1"]
            .into_iter()
            .filter(|v| registry.in_group_version("", v).next().is_some())
            .map(String::from)
            .collect();
        vec![group_discovery(registry, "", &versions)]
    } else {
        registry
            .groups()
            .iter()
            .map(|(g, vs)| group_discovery(registry, g, vs))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("{GROUP}/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// An aggregated API's version in the aggregated discovery document
/// (`APIVersionDiscovery`), from the legacy `APIResourceList` its extension
/// API server serves: `a/b` entries become subresources of `a`, as
/// upstream's aggregated discovery converts them.
pub fn version_from_resource_list(group: &str, version: &str, list: &Value) -> Value {
    let entries = list["resources"].as_array().cloned().unwrap_or_default();
    let kind_of = |e: &Value| {
        gvk(
            e["group"].as_str().unwrap_or(group),
            e["version"].as_str().unwrap_or(version),
            e["kind"].as_str().unwrap_or_default(),
        )
    };
    let mut resources: Vec<Value> = Vec::new();
    for e in entries.iter().filter(|e| {
        e["name"]
            .as_str()
            .is_some_and(|n| !n.is_empty() && !n.contains('/'))
    }) {
        let mut r = json!({
            "resource": e["name"],
            "responseKind": kind_of(e),
            "scope": if e["namespaced"] == true { "Namespaced" } else { "Cluster" },
            "singularResource": e["singularName"].as_str().unwrap_or_default(),
            "verbs": e["verbs"].as_array().cloned().unwrap_or_default(),
        });
        for field in ["shortNames", "categories"] {
            if e[field].as_array().is_some_and(|a| !a.is_empty()) {
                r[field] = e[field].clone();
            }
        }
        resources.push(r);
    }
    for e in &entries {
        let Some((parent, sub)) = e["name"].as_str().and_then(|n| n.split_once('/')) else {
            continue;
        };
        if let Some(r) = resources.iter_mut().find(|r| r["resource"] == parent) {
            let subs = r["subresources"].as_array().cloned().unwrap_or_default();
            let mut subs = subs;
            subs.push(json!({
                "subresource": sub,
                "responseKind": kind_of(e),
                "verbs": e["verbs"].as_array().cloned().unwrap_or_default(),
            }));
            r["subresources"] = Value::Array(subs);
        }
    }
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_aggregated_resource_list_becomes_a_version_entry() {
        let list = json!({"kind": "APIResourceList", "groupVersion": "wardle.example.com/v1alpha1",
        "resources": [
            {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
             "verbs": ["get", "list"], "shortNames": ["fl"]},
            {"name": "flunders/status", "namespaced": true, "kind": "Flunder", "verbs": ["get"]},
            {"name": "fischers", "singularName": "", "namespaced": false, "kind": "Fischer", "verbs": ["get"]},
        ]});
        let v = version_from_resource_list("wardle.example.com", "v1alpha1", &list);
        assert_eq!(v["version"], "v1alpha1");
        let r = &v["resources"][0];
        assert_eq!(r["resource"], "flunders");
        assert_eq!(r["scope"], "Namespaced");
        assert_eq!(r["shortNames"], json!(["fl"]));
        assert_eq!(r["responseKind"]["group"], "wardle.example.com");
        assert_eq!(r["subresources"][0]["subresource"], "status");
        assert_eq!(v["resources"][1]["scope"], "Cluster");
        assert_eq!(v["resources"].as_array().unwrap().len(), 2);
    }
    use super::*;

    #[test]
    fn negotiation_follows_the_accept_order() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json;q=0.9";
        assert_eq!(negotiate(kubectl), Some(Format::Aggregated("v2")));
        assert_eq!(
            negotiate("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"),
            Some(Format::Aggregated("v2beta1"))
        );
        // Protobuf first: we serve the next acceptable form.
        assert_eq!(
            negotiate(
                "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
            ),
            Some(Format::Legacy)
        );
        assert_eq!(negotiate(""), Some(Format::Legacy));
        assert_eq!(negotiate("*/*"), Some(Format::Legacy));
        assert_eq!(
            negotiate("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"),
            None
        );
        assert_eq!(negotiate("application/yaml"), None);
    }

    #[test]
    fn aggregated_documents_have_upstreams_shape() {
        let r = Registry::builtin();
        let core = aggregated(&r, true, "v2");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert!(core["items"][0]["metadata"].get("name").is_none());
        let sa = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "serviceaccounts")
            .unwrap()
            .clone();
        assert_eq!(sa["scope"], "Namespaced");
        assert_eq!(sa["shortNames"], json!(["sa"]));
        assert_eq!(
            sa["subresources"][0]["responseKind"]["kind"],
            "TokenRequest"
        );
        assert_eq!(sa["subresources"][0]["verbs"], json!(["create"]));
        let apis = aggregated(&r, false, "v2");
        let names: Vec<&str> = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["metadata"]["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"rbac.authorization.k8s.io"), "{names:?}");
        let lease = &apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "coordination.k8s.io")
            .unwrap()["versions"][0];
        assert_eq!(lease["freshness"], "Current");
        assert!(lease["resources"][0].get("shortNames").is_none());
        let list = resource_list(&r, "", "v1").unwrap();
        let token = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "serviceaccounts/token")
            .unwrap()
            .clone();
        assert_eq!(token["group"], "authentication.k8s.io");
        assert_eq!(token["verbs"], json!(["create"]));
    }
}
