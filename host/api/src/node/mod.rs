//! The Node authorizer's decisions (upstream's
//! `plugin/pkg/auth/authorizer/node/node_authorizer.go`): for a kubelet
//! (user `system:node:<name>` in group `system:nodes`) only.
//!
//! * Secrets and ConfigMaps (get, list and watch of one named object),
//!   PVCs and PVs (get), service-account tokens (create `token`) and
//!   resource claims (get): allowed when a pod bound to the node reaches
//!   the object in the [`graph`]; `persistentvolumeclaims/status` update
//!   and patch likewise.
//! * Leases: in `kube-node-lease` only, named as the node (create is
//!   left to the NodeRestriction admission plugin, which sees the name).
//! * Everything else: upstream's static node rules (`NodeRules()`, what the
//!   `system:node` ClusterRole grants): nodes, `nodes/status`, events,
//!   pods and `pods/status`, CSRs and so on. NodeRestriction admission
//!   narrows the writes to the node's own objects.
//! * Anything not allowed is *no opinion*, with upstream's reason, so a
//!   later mode (RBAC) may still allow it; users that are not nodes get
//!   no decision at all ([`authorize`] returns `None`).
//!
//! Upstream, with `AuthorizeNodeWithSelectors` (1.32+), also restricts
//! node reads and pod list/watch by field selector; the attributes here
//! carry no field selector, so pods and nodes follow the static rules as
//! before that gate.

pub mod graph;
pub mod lifecycle;

use crate::rbac::{Attributes, Decision};
use graph::{Kind, NodeGraph};

/// Where node leases live.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
pub const NODES_GROUP: &str = "system:nodes";
pub const NODE_USER_PREFIX: &str = "system:node:";

/// The node a user is, if it is one: `Some("")` for a node whose name is
/// unknown (upstream's `NodeIdentity`).
pub fn node_identity<'a>(user: &'a str, groups: &[String]) -> Option<&'a str> {
    let name = user.strip_prefix(NODE_USER_PREFIX)?;
    groups.iter().any(|g| g == NODES_GROUP).then_some(name)
}

/// Upstream's static node rules: (verbs, group, resources).
const NODE_RULES: &[(&[&str], &str, &[&str])] = &[
    (&["create"], "authentication.k8s.io", &["tokenreviews"]),
    (
        &["create"],
        "authorization.k8s.io",
        &["subjectaccessreviews", "localsubjectaccessreviews"],
    ),
    (&["get", "list", "watch"], "", &["services"]),
    (&["create", "get", "list", "watch"], "", &["nodes"]),
    (&["update", "patch"], "", &["nodes/status"]),
    (&["update", "patch"], "", &["nodes"]),
    (&["create", "update", "patch"], "", &["events"]),
    (&["create", "update", "patch"], "events.k8s.io", &["events"]),
    (&["get", "list", "watch"], "", &["pods"]),
    (&["create", "delete"], "", &["pods"]),
    (&["update", "patch"], "", &["pods/status"]),
    (&["create"], "", &["pods/eviction"]),
    (&["get", "list", "watch"], "", &["secrets", "configmaps"]),
    (
        &["get"],
        "",
        &["persistentvolumeclaims", "persistentvolumes"],
    ),
    (&["get"], "", &["endpoints"]),
    (
        &["create", "get", "list", "watch"],
        "certificates.k8s.io",
        &["certificatesigningrequests"],
    ),
    (
        &["get", "create", "update", "patch", "delete"],
        "coordination.k8s.io",
        &["leases"],
    ),
    (&["get"], "storage.k8s.io", &["volumeattachments"]),
    (
        &["get", "update", "patch"],
        "",
        &["persistentvolumeclaims/status"],
    ),
    (&["create"], "", &["serviceaccounts/token"]),
    (&["get", "watch", "list"], "storage.k8s.io", &["csidrivers"]),
    (
        &["get", "create", "update", "patch", "delete"],
        "storage.k8s.io",
        &["csinodes"],
    ),
    (
        &["get", "list", "watch"],
        "node.k8s.io",
        &["runtimeclasses"],
    ),
    (
        &["get", "list", "watch"],
        "resource.k8s.io",
        &["resourceslices"],
    ),
];

fn static_rules_allow(a: &Attributes) -> bool {
    if !a.is_resource_request {
        return false;
    }
    let resource = match &a.subresource {
        Some(s) => format!("{}/{s}", a.resource),
        None => a.resource.clone(),
    };
    NODE_RULES.iter().any(|(verbs, group, resources)| {
        *group == a.api_group
            && verbs.contains(&a.verb.as_str())
            && resources.contains(&resource.as_str())
    })
}

fn no(reason: impl Into<String>) -> Option<Decision> {
    Some(Decision::NoOpinion(reason.into()))
}

fn allow() -> Option<Decision> {
    Some(Decision::Allow(String::new()))
}

/// The Node authorizer's decision, or `None` when the user is not a node.
pub fn authorize(graph: &NodeGraph, a: &Attributes) -> Option<Decision> {
    let node = node_identity(&a.user, &a.groups)?;
    if node.is_empty() {
        return no(format!("unknown node for user {:?}", a.user));
    }
    if a.is_resource_request {
        let sub = a.subresource.as_deref();
        match (a.api_group.as_str(), a.resource.as_str()) {
            ("", "secrets") => return read_namespaced(graph, node, Kind::Secret, a),
            ("", "configmaps") => return read_namespaced(graph, node, Kind::ConfigMap, a),
            ("", "persistentvolumeclaims") if sub == Some("status") => {
                if !matches!(a.verb.as_str(), "update" | "patch") {
                    return no("can only get/update/patch this type");
                }
                return related(graph, node, Kind::PersistentVolumeClaim, a);
            }
            ("", "persistentvolumeclaims") => {
                return get(graph, node, Kind::PersistentVolumeClaim, a);
            }
            ("", "persistentvolumes") => {
                if let Some(d) = get_checks(a) {
                    return Some(d);
                }
                let name = a.name.as_deref().unwrap_or_default();
                return if graph.reaches_pv(node, name) {
                    allow()
                } else {
                    no(no_relationship(node))
                };
            }
            ("resource.k8s.io", "resourceclaims") => {
                return get(graph, node, Kind::ResourceClaim, a);
            }
            ("", "serviceaccounts") => {
                if a.verb != "create" || a.name.as_deref().unwrap_or_default().is_empty() {
                    return no("can only create tokens for individual service accounts");
                }
                if sub != Some("token") {
                    return no("can only create token subresource of serviceaccount");
                }
                return related(graph, node, Kind::ServiceAccount, a);
            }
            ("coordination.k8s.io", "leases") => return lease(node, a),
            _ => {}
        }
    }
    if static_rules_allow(a) {
        allow()
    } else {
        no("")
    }
}

fn no_relationship(node: &str) -> String {
    format!("no relationship found between node '{node}' and this object")
}

fn related(graph: &NodeGraph, node: &str, kind: Kind, a: &Attributes) -> Option<Decision> {
    let name = a.name.as_deref().unwrap_or_default();
    if name.is_empty() {
        return no("No Object name found");
    }
    let ns = a.namespace.as_deref().unwrap_or_default();
    if graph.has_path(node, kind, ns, name) {
        allow()
    } else {
        no(no_relationship(node))
    }
}

fn get_checks(a: &Attributes) -> Option<Decision> {
    if a.verb != "get" {
        return no("can only get individual resources of this type");
    }
    if a.subresource.is_some() {
        return no("cannot get subresource");
    }
    if a.name.as_deref().unwrap_or_default().is_empty() {
        return no("No Object name found");
    }
    None
}

fn get(graph: &NodeGraph, node: &str, kind: Kind, a: &Attributes) -> Option<Decision> {
    get_checks(a).or_else(|| related(graph, node, kind, a))
}

fn read_namespaced(graph: &NodeGraph, node: &str, kind: Kind, a: &Attributes) -> Option<Decision> {
    if !matches!(a.verb.as_str(), "get" | "list" | "watch") {
        return no("can only read resources of this type");
    }
    if a.subresource.is_some() {
        return no("cannot read subresource");
    }
    if a.namespace.as_deref().unwrap_or_default().is_empty() {
        return no("can only read namespaced object of this type");
    }
    related(graph, node, kind, a)
}

fn lease(node: &str, a: &Attributes) -> Option<Decision> {
    if !matches!(
        a.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no("can only get, create, update, patch, or delete a node lease");
    }
    if a.namespace.as_deref() != Some(NODE_LEASE_NAMESPACE) {
        return no(format!(
            "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
        ));
    }
    if a.verb != "create" && a.name.as_deref() != Some(node) {
        return no("can only access node lease with the same name as the requesting node");
    }
    allow()
}

#[cfg(test)]
mod tests {
    use super::graph::PodRefs;
    use super::*;
    use serde_json::json;

    fn attrs(
        user: &str,
        verb: &str,
        group: &str,
        resource: &str,
        ns: Option<&str>,
        name: Option<&str>,
    ) -> Attributes {
        let (resource, sub) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (resource, None),
        };
        Attributes {
            user: user.into(),
            groups: vec![NODES_GROUP.into(), "system:authenticated".into()],
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub,
            namespace: ns.map(String::from),
            name: name.map(String::from),
            path: String::new(),
            is_resource_request: true,
        }
    }

    fn graph() -> NodeGraph {
        let mut g = NodeGraph::new();
        let pod = json!({"spec": {"nodeName": "a", "serviceAccountName": "sa",
            "volumes": [{"name": "v", "secret": {"secretName": "s1"}},
                        {"name": "w", "configMap": {"name": "c1"}}]}});
        g.set_pod("ns", "p", PodRefs::of(&pod));
        g
    }

    #[test]
    fn decisions() {
        let g = graph();
        let a = "system:node:a";
        let b = "system:node:b";
        let cases: &[(Attributes, bool)] = &[
            (attrs(a, "get", "", "secrets", Some("ns"), Some("s1")), true),
            (
                attrs(a, "watch", "", "secrets", Some("ns"), Some("s1")),
                true,
            ),
            (
                attrs(a, "get", "", "configmaps", Some("ns"), Some("c1")),
                true,
            ),
            (
                attrs(b, "get", "", "secrets", Some("ns"), Some("s1")),
                false,
            ),
            (
                attrs(a, "get", "", "secrets", Some("ns"), Some("s2")),
                false,
            ),
            (attrs(a, "list", "", "secrets", Some("ns"), None), false),
            (attrs(a, "list", "", "secrets", None, None), false),
            (
                attrs(a, "update", "", "secrets", Some("ns"), Some("s1")),
                false,
            ),
            (
                attrs(
                    a,
                    "create",
                    "",
                    "serviceaccounts/token",
                    Some("ns"),
                    Some("sa"),
                ),
                true,
            ),
            (
                attrs(
                    b,
                    "create",
                    "",
                    "serviceaccounts/token",
                    Some("ns"),
                    Some("sa"),
                ),
                false,
            ),
            (
                attrs(a, "get", "", "serviceaccounts", Some("ns"), Some("sa")),
                false,
            ),
            (
                attrs(
                    a,
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    Some("kube-node-lease"),
                    Some("a"),
                ),
                true,
            ),
            (
                attrs(
                    a,
                    "create",
                    "coordination.k8s.io",
                    "leases",
                    Some("kube-node-lease"),
                    None,
                ),
                true,
            ),
            (
                attrs(
                    a,
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    Some("kube-node-lease"),
                    Some("b"),
                ),
                false,
            ),
            (
                attrs(
                    a,
                    "get",
                    "coordination.k8s.io",
                    "leases",
                    Some("default"),
                    Some("a"),
                ),
                false,
            ),
            (
                attrs(
                    a,
                    "list",
                    "coordination.k8s.io",
                    "leases",
                    Some("kube-node-lease"),
                    None,
                ),
                false,
            ),
            (attrs(a, "patch", "", "nodes/status", None, Some("a")), true),
            (attrs(a, "create", "", "nodes", None, None), true),
            (
                attrs(a, "update", "", "pods/status", Some("ns"), Some("p")),
                true,
            ),
            (attrs(a, "create", "", "events", Some("ns"), None), true),
            (
                attrs(
                    a,
                    "create",
                    "certificates.k8s.io",
                    "certificatesigningrequests",
                    None,
                    None,
                ),
                true,
            ),
            (attrs(a, "delete", "", "nodes", None, Some("a")), false),
            (attrs(a, "create", "", "namespaces", None, None), false),
            (
                attrs(a, "get", "", "persistentvolumes", None, Some("pv")),
                false,
            ),
        ];
        for (at, want) in cases {
            let d = authorize(&g, at).expect("a node gets a decision");
            assert_eq!(
                d.is_allowed(),
                *want,
                "{} {} {:?}/{:?}: {d:?}",
                at.verb,
                at.resource,
                at.namespace,
                at.name
            );
        }
    }

    #[test]
    fn only_nodes_get_a_decision() {
        let g = graph();
        let mut at = attrs("alice", "get", "", "secrets", Some("ns"), Some("s1"));
        assert!(authorize(&g, &at).is_none());
        at.user = "system:node:a".into();
        at.groups = vec!["system:authenticated".into()];
        assert!(authorize(&g, &at).is_none(), "not in system:nodes");
        at.user = "system:node:".into();
        at.groups = vec![NODES_GROUP.into()];
        assert!(!authorize(&g, &at).unwrap().is_allowed());
    }
}
