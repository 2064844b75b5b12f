//! Upstream's `NodeRestriction` admission plugin
//! (`plugin/pkg/admission/noderestriction/admission.go`), compiled in
//! (validating), for kubelets (`system:node:<name>` in `system:nodes`)
//! only:
//!
//! * Pods: a node creates only mirror pods (`kubernetes.io/config.mirror`)
//!   bound to itself that reference no secrets, configmaps, claims or
//!   service account and are owned by nothing but its own Node; it deletes
//!   and updates the status of only pods bound to itself.
//! * Nodes: a node writes only its own Node object; it sets and changes
//!   no `node-restriction.kubernetes.io/` label and, after creation, no
//!   taint.
//! * Leases in `kube-node-lease`: a node creates only its own.

use crate::admission::Attributes;
use serde_json::Value;
use wasm_apiserver_api::ApiError;
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::node::graph::PodRefs;
use wasm_apiserver_api::node::{NODE_LEASE_NAMESPACE, node_identity};
use wasm_apiserver_plugins::{Operation, UserInfo};

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Labels under this namespace (or a subdomain of it) are for
/// administrators to steer workloads by; kubelets may not set them.
const RESTRICTED_LABEL_NAMESPACE: &str = "node-restriction.kubernetes.io";

fn forbidden_label(key: &str) -> bool {
    let Some((ns, _)) = key.split_once('/') else {
        return false;
    };
    ns == RESTRICTED_LABEL_NAMESPACE || ns.ends_with(&format!(".{RESTRICTED_LABEL_NAMESPACE}"))
}

fn labels(obj: Option<&Value>) -> serde_json::Map<String, Value> {
    obj.and_then(|o| o["metadata"]["labels"].as_object())
        .cloned()
        .unwrap_or_default()
}

pub fn validate(
    a: &Attributes<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    user: &UserInfo,
) -> Result<(), ApiError> {
    let Some(node) = node_identity(&user.username, &user.groups) else {
        return Ok(());
    };
    let info = a.info;
    let target = Target::new(&info.group, &info.plural, a.name);
    let forbidden = |why: String| Err(ApiError::Forbidden(target.clone(), why));
    let relevant = matches!(
        (info.group.as_str(), info.plural.as_str()),
        ("", "pods") | ("", "nodes") | ("coordination.k8s.io", "leases")
    );
    if !relevant {
        return Ok(());
    }
    if node.is_empty() {
        return forbidden(format!(
            "could not determine node from user {:?}",
            user.username
        ));
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => pod(node, a, obj, old, forbidden),
        ("", "nodes") => {
            if a.name != node {
                return forbidden(format!(
                    "node {node:?} is not allowed to modify node {:?}",
                    a.name
                ));
            }
            match a.operation {
                Operation::Create => {
                    let mut bad: Vec<String> = labels(obj)
                        .keys()
                        .filter(|k| forbidden_label(k))
                        .cloned()
                        .collect();
                    bad.sort();
                    if !bad.is_empty() {
                        return forbidden(format!(
                            "node {node:?} is not allowed to set the following labels: {}",
                            bad.join(", ")
                        ));
                    }
                }
                Operation::Update => {
                    let (new, old_l) = (labels(obj), labels(old));
                    let mut bad: Vec<String> = new
                        .keys()
                        .chain(old_l.keys())
                        .filter(|k| new.get(*k) != old_l.get(*k) && forbidden_label(k))
                        .cloned()
                        .collect();
                    bad.sort();
                    bad.dedup();
                    if !bad.is_empty() {
                        return forbidden(format!(
                            "node {node:?} is not allowed to modify labels: {}",
                            bad.join(", ")
                        ));
                    }
                    if a.subresource.is_none()
                        && let (Some(n), Some(o)) = (obj, old)
                        && n["spec"]["taints"] != o["spec"]["taints"]
                    {
                        return forbidden(format!("node {node:?} is not allowed to modify taints"));
                    }
                }
                _ => {}
            }
            Ok(())
        }
        _ => {
            if a.operation == Operation::Create
                && a.namespace == Some(NODE_LEASE_NAMESPACE)
                && a.name != node
            {
                return forbidden(
                    "can only access node lease with the same name as the requesting node".into(),
                );
            }
            Ok(())
        }
    }
}

fn pod(
    node: &str,
    a: &Attributes<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    forbidden: impl Fn(String) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let bound_here = |p: Option<&Value>| p.is_some_and(|p| p["spec"]["nodeName"] == node);
    match (a.subresource, a.operation) {
        (None, Operation::Create) => {
            let Some(pod) = obj else { return Ok(()) };
            if pod["metadata"]["annotations"]
                .get(MIRROR_ANNOTATION)
                .is_none()
            {
                return forbidden(format!(
                    "pod does not have \"{MIRROR_ANNOTATION}\" annotation, node {node:?} can only create mirror pods"
                ));
            }
            if !bound_here(obj) {
                return forbidden(format!(
                    "node {node:?} can only create pods with spec.nodeName set to itself"
                ));
            }
            let owners = pod["metadata"]["ownerReferences"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            if owners.len() > 1
                || owners
                    .iter()
                    .any(|o| o["apiVersion"] != "v1" || o["kind"] != "Node" || o["name"] != node)
            {
                return forbidden(format!(
                    "node {node:?} can only create pods with an owner reference set to itself"
                ));
            }
            if let Some(r) = PodRefs::of(pod) {
                for (what, any) in [
                    ("serviceaccounts", r.service_account.is_some()),
                    ("secrets", !r.secrets.is_empty()),
                    ("configmaps", !r.configmaps.is_empty()),
                    ("persistentvolumeclaims", !r.pvcs.is_empty()),
                    ("resourceclaims", !r.resource_claims.is_empty()),
                ] {
                    if any {
                        return forbidden(format!(
                            "node {node:?} can not create pods that reference {what}"
                        ));
                    }
                }
            }
            Ok(())
        }
        (None, Operation::Delete) => {
            if !bound_here(old) {
                return forbidden(format!(
                    "node {node:?} can only delete pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        (None, _) => forbidden(format!(
            "unexpected operation {:?}, node {node:?} can only create and delete mirror pods",
            a.op_str()
        )),
        (Some("status"), Operation::Update) => {
            if !bound_here(old) {
                return forbidden(format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        (Some("status"), _) => forbidden(format!("unexpected operation {:?}", a.op_str())),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn restricted_labels() {
        assert!(forbidden_label("node-restriction.kubernetes.io/x"));
        assert!(forbidden_label("a.node-restriction.kubernetes.io/x"));
        assert!(!forbidden_label("kubernetes.io/hostname"));
        assert!(!forbidden_label("xnode-restriction.kubernetes.io/x"));
        assert!(!forbidden_label("plain"));
        let _ = json!({});
    }
}
