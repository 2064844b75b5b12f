//! The resource registry: which group/version/resources exist, their kinds,
//! scope and verbs. Discovery, routing, storage keys and OpenAPI all derive
//! from it, so adding a resource is one entry here.

use std::collections::BTreeMap;

/// Columns that `kubectl get` shows for a resource, beyond NAME and AGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    /// NAME, AGE.
    Default,
    /// NAME, STATUS, AGE.
    Namespace,
    /// NAME, DATA, AGE.
    ConfigMap,
    /// NAME, TYPE, DATA, AGE.
    Secret,
    /// NAME, SECRETS, AGE.
    ServiceAccount,
    /// LAST SEEN, TYPE, REASON, OBJECT, MESSAGE.
    Event,
    /// NAME, HOLDER, AGE.
    Lease,
    /// NAME, PHASES, MODE, STATUS, AGE.
    AdmissionPlugin,
}

/// One API resource (a `GroupVersionResource` with its kind and scope).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; empty for the legacy core group.
    pub group: String,
    pub version: String,
    /// Lower-case plural, e.g. `configmaps`; the URL segment.
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub subresources: Vec<String>,
    pub printer: Printer,
    /// A review resource (SubjectAccessReview...): `create` computes an
    /// answer and nothing is stored.
    pub create_only: bool,
}

/// The RBAC API group.
pub const RBAC: &str = "rbac.authorization.k8s.io";
/// The authorization (access review) API group.
pub const AUTHZ: &str = "authorization.k8s.io";

/// The verbs every resource in the registry supports.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl ResourceInfo {
    /// `v1` or `coordination.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `ConfigMapList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The storage key prefix for all objects of this resource:
    /// `/registry/<group>/<resource>/` (group `core` for the legacy group).
    pub fn key_prefix(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("/registry/{group}/{}/", self.plural)
    }

    /// Key prefix of a namespace's objects, or all objects when `None`.
    pub fn collection_key(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/", self.key_prefix()),
            _ => self.key_prefix(),
        }
    }

    /// The storage key of one object.
    pub fn object_key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.key_prefix()),
            _ => format!("{}{name}", self.key_prefix()),
        }
    }
}

/// All known resources, indexed by group/version/plural.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    resources: BTreeMap<(String, String, String), ResourceInfo>,
}

#[allow(clippy::too_many_arguments)]
fn info(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    subresources: &[&str],
    printer: Printer,
) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: kind.to_ascii_lowercase(),
        kind: kind.into(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        subresources: subresources.iter().map(|s| s.to_string()).collect(),
        printer,
        create_only: false,
    }
}

fn review(group: &str, plural: &str, kind: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo {
        create_only: true,
        ..info(
            group,
            "v1",
            plural,
            kind,
            namespaced,
            &[],
            &[],
            Printer::Default,
        )
    }
}

impl Registry {
    /// The built-in resources of this server.
    pub fn builtin() -> Self {
        let mut r = Registry::default();
        for i in [
            info(
                "",
                "v1",
                "namespaces",
                "Namespace",
                false,
                &["ns"],
                &["status", "finalize"],
                Printer::Namespace,
            ),
            info(
                "",
                "v1",
                "configmaps",
                "ConfigMap",
                true,
                &["cm"],
                &[],
                Printer::ConfigMap,
            ),
            info(
                "",
                "v1",
                "secrets",
                "Secret",
                true,
                &[],
                &[],
                Printer::Secret,
            ),
            info(
                "",
                "v1",
                "serviceaccounts",
                "ServiceAccount",
                true,
                &["sa"],
                &["token"],
                Printer::ServiceAccount,
            ),
            info(
                "",
                "v1",
                "events",
                "Event",
                true,
                &["ev"],
                &[],
                Printer::Event,
            ),
            info(
                "coordination.k8s.io",
                "v1",
                "leases",
                "Lease",
                true,
                &[],
                &[],
                Printer::Lease,
            ),
            info(
                RBAC,
                "v1",
                "roles",
                "Role",
                true,
                &[],
                &[],
                Printer::Default,
            ),
            info(
                RBAC,
                "v1",
                "clusterroles",
                "ClusterRole",
                false,
                &[],
                &[],
                Printer::Default,
            ),
            info(
                RBAC,
                "v1",
                "rolebindings",
                "RoleBinding",
                true,
                &[],
                &[],
                Printer::Default,
            ),
            info(
                RBAC,
                "v1",
                "clusterrolebindings",
                "ClusterRoleBinding",
                false,
                &[],
                &[],
                Printer::Default,
            ),
            review(
                AUTHZ,
                "selfsubjectaccessreviews",
                "SelfSubjectAccessReview",
                false,
            ),
            review(AUTHZ, "subjectaccessreviews", "SubjectAccessReview", false),
            review(
                AUTHZ,
                "localsubjectaccessreviews",
                "LocalSubjectAccessReview",
                true,
            ),
            review(
                AUTHZ,
                "selfsubjectrulesreviews",
                "SelfSubjectRulesReview",
                false,
            ),
            review(
                "authentication.k8s.io",
                "selfsubjectreviews",
                "SelfSubjectReview",
                false,
            ),
            info(
                "admissionregistration.k8s.io",
                "v1",
                "validatingwebhookconfigurations",
                "ValidatingWebhookConfiguration",
                false,
                &[],
                &[],
                Printer::Default,
            ),
            info(
                "admissionregistration.k8s.io",
                "v1",
                "mutatingwebhookconfigurations",
                "MutatingWebhookConfiguration",
                false,
                &[],
                &[],
                Printer::Default,
            ),
            info(
                crate::admission::GROUP,
                crate::admission::VERSION,
                crate::admission::PLURAL,
                crate::admission::KIND,
                false,
                &["ap"],
                &["status"],
                Printer::AdmissionPlugin,
            ),
        ] {
            r.insert(i);
        }
        r
    }

    /// Adds or replaces a resource.
    pub fn insert(&mut self, info: ResourceInfo) {
        self.resources.insert(
            (
                info.group.clone(),
                info.version.clone(),
                info.plural.clone(),
            ),
            info,
        );
    }

    /// Looks a resource up by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.resources
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// All resources, in group/version/plural order.
    pub fn all(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.resources.values()
    }

    /// The resources of one group version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceInfo> + 'a {
        self.all()
            .filter(move |r| r.group == group && r.version == version)
    }

    /// Non-core groups with their versions (preferred first).
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in self.all().filter(|r| !r.group.is_empty()) {
            let versions = out.entry(r.group.clone()).or_default();
            if !versions.contains(&r.version) {
                versions.push(r.version.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_registry_layout() {
        let r = Registry::builtin();
        let cm = r.get("", "v1", "configmaps").unwrap();
        assert_eq!(
            cm.object_key(Some("default"), "a"),
            "/registry/core/configmaps/default/a"
        );
        assert_eq!(
            cm.collection_key(Some("default")),
            "/registry/core/configmaps/default/"
        );
        assert_eq!(cm.collection_key(None), "/registry/core/configmaps/");
        let ns = r.get("", "v1", "namespaces").unwrap();
        assert_eq!(
            ns.object_key(Some("ignored"), "kube-system"),
            "/registry/core/namespaces/kube-system"
        );
        let lease = r.get("coordination.k8s.io", "v1", "leases").unwrap();
        assert_eq!(lease.api_version(), "coordination.k8s.io/v1");
        assert_eq!(
            r.groups().keys().collect::<Vec<_>>(),
            vec![
                "admission.wasm-apiserver.io",
                "admissionregistration.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "coordination.k8s.io",
                "rbac.authorization.k8s.io"
            ]
        );
    }
}
