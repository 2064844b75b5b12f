//! Resource descriptions as data: which group/version/resource a resource
//! is, its kind, scope, verbs, subresources and `kubectl get` columns, and
//! [`Registry`], an immutable map of them. The server keeps the live set of
//! resources as a snapshot of this map (swapped atomically when resources
//! are added or removed at runtime); discovery, OpenAPI, Table output and
//! storage keys all derive from it. The built-in resources are listed in
//! `builtin`.

use serde_json::Value;
use serde_json_path::JsonPath;
use std::collections::BTreeMap;

/// A JSONPath in upstream's dialect (kubectl's and CRD printer columns':
/// `.spec.replicas`, `{.status.phase}`, `.items[*].name`,
/// `.status.conditions[?(@.type=="Ready")].status`), compiled once. It is
/// evaluated as the equivalent RFC 9535 query (`$` prefixed), which the
/// `serde_json_path` crate implements.
#[derive(Debug, Clone)]
pub struct ColumnPath {
    pub source: String,
    compiled: JsonPath,
}

impl ColumnPath {
    pub fn parse(source: &str) -> Result<Self, String> {
        let trimmed = source.trim();
        let inner = trimmed
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(trimmed)
            .trim();
        let query = match inner.strip_prefix('$') {
            Some(rest) => format!("${rest}"),
            None if inner.starts_with('.') || inner.starts_with('[') => format!("${inner}"),
            None => format!("$.{inner}"),
        };
        let compiled =
            JsonPath::parse(&query).map_err(|e| format!("invalid JSONPath {source:?}: {e}"))?;
        Ok(ColumnPath {
            source: source.to_string(),
            compiled,
        })
    }

    /// Every node the path selects, in document order.
    pub fn query<'a>(&self, obj: &'a Value) -> Vec<&'a Value> {
        self.compiled.query(obj).all()
    }
}

/// How a [`Column`]'s JSONPath results become a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Render {
    /// The first non-empty result, as is (a CRD's printer columns).
    #[default]
    Value,
    /// The first non-empty result, a timestamp, as a human age (`5m10s`).
    Age,
    /// The number of keys or items, summed over every path.
    Count,
    /// Every result of the first path that has any, joined with `,`.
    Join,
    /// An object reference (`kind`, `name`) as `kind/name`, kind in lower case.
    ObjectRef,
    /// A service reference (`namespace`, `name`) as `namespace/name`, or
    /// `Local` when there is none (an APIService's backend).
    ServiceRef,
    /// A condition's `status`, with its reason when not `True`:
    /// `False (ServiceNotFound)`.
    Condition,
    /// `have/want` from the first and second paths (`1/3`), each 0 when absent.
    Ratio,
    /// The sum of the first path's numeric results.
    Sum,
    /// A label map or `LabelSelector` as selector text (`app=web,tier in (a,b)`).
    Selector,
    /// An admission policy's `paramKind` (`v1/ConfigMap`) or a binding's
    /// `paramRef` (`ns/name`, `*/name`, the selector), `<unset>` without one.
    Param,
    /// A pod's ready containers of all (`1/2`): container statuses, containers.
    PodReady,
    /// A pod's status as `kubectl get pods` shows it (phase, or the reason a
    /// container waits or terminated, or `Terminating`): status, deletion time.
    PodStatus,
    /// A service's ports as `80/TCP,443:30443/TCP`.
    ServicePorts,
    /// A component's `Healthy` condition as `Healthy` (`True`) or
    /// `Unhealthy`, `Unknown` without one, as upstream prints
    /// ComponentStatuses.
    ComponentHealth,
    /// A node's `Ready` condition as `Ready`, `NotReady` (`False` or
    /// `Unknown`) or `Unknown` (no condition), then `,SchedulingDisabled`
    /// when it is cordoned, as upstream prints nodes.
    NodeReady,
    /// A job's state from its conditions: `Complete`, `Failed`, `Suspended`, `Running`.
    JobStatus,
    /// An ingress's ports: `80`, or `80, 443` with TLS.
    IngressPorts,
    /// A number of seconds as a human duration (`60m`), `<none>` when absent.
    Seconds,
    /// A CertificateSigningRequest's state: `Pending`, `Approved,Issued`...
    CsrCondition,
}

/// One `kubectl get` column, described as a CRD's `additionalPrinterColumns`
/// entry is (name, type, format, description, priority, JSONPath), plus how
/// results render, so built-in and custom resources share one path.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
    /// Upstream-dialect JSONPaths; several are alternatives (first
    /// non-empty wins) or, for [`Render::Count`], summed.
    pub json_paths: Vec<ColumnPath>,
    pub render: Render,
    /// The cell when no path yields anything (`None`: null, which kubectl
    /// prints as `<none>`).
    pub default: Option<Value>,
}

impl Column {
    /// A column over one JSONPath, rendered as is. The path is a constant
    /// of the server's (built-in columns): an invalid one is a bug and
    /// panics. Paths from users go through [`ColumnPath::parse`].
    pub fn new(name: &str, type_: &str, description: &str, json_path: &str) -> Self {
        Self::with_path(name, type_, description, builtin_path(json_path))
    }

    /// A column over an already parsed path.
    pub fn with_path(name: &str, type_: &str, description: &str, path: ColumnPath) -> Self {
        Column {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: description.into(),
            priority: 0,
            json_paths: vec![path],
            render: Render::Value,
            default: None,
        }
    }

    pub fn render(mut self, render: Render) -> Self {
        self.render = render;
        self
    }

    pub fn format(mut self, format: &str) -> Self {
        self.format = format.into();
        self
    }

    pub fn or(mut self, default: Value) -> Self {
        self.default = Some(default);
        self
    }

    /// Adds an alternative (or, for counts, another summed) path.
    pub fn path(mut self, json_path: &str) -> Self {
        self.json_paths.push(builtin_path(json_path));
        self
    }

    /// Upstream's `Name` column.
    pub fn name() -> Self {
        Column::new(
            "Name",
            "string",
            "Name must be unique within a namespace.",
            ".metadata.name",
        )
        .format("name")
        .or(Value::from(""))
    }

    /// Upstream's `Age` column.
    pub fn age() -> Self {
        Column::new(
            "Age",
            "string",
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
            ".metadata.creationTimestamp",
        )
        .render(Render::Age)
    }
}

fn builtin_path(json_path: &str) -> ColumnPath {
    ColumnPath::parse(json_path).unwrap_or_else(|e| panic!("built-in column: {e}"))
}

/// A subresource as discovery describes it: its name, the kind its
/// requests and responses carry, and its verbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subresource {
    pub name: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    pub verbs: Vec<String>,
}

/// One API resource (a `GroupVersionResource` with its kind and scope).
#[derive(Debug, Clone)]
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
    pub categories: Vec<String>,
    pub subresources: Vec<Subresource>,
    /// The verbs discovery lists.
    pub verbs: Vec<String>,
    /// `kubectl get` columns (a `Table`'s column definitions).
    pub columns: Vec<Column>,
    /// The OpenAPI v3 schema of the kind, where one is known (custom
    /// resources); published in `/openapi/v2` and `/openapi/v3` for
    /// `kubectl explain`. Shared: with the custom resource's validation,
    /// and between versions (and CRDs) whose schemas are equal.
    pub schema: Option<std::sync::Arc<Value>>,
    /// The `Warning` every request to this version gets (a CRD version
    /// marked `deprecated`).
    pub deprecation_warning: Option<String>,
    /// The kind's type in k8s-openapi, for a built-in kind: its OpenAPI
    /// definition comes from there (see `openapi::definitions`).
    pub type_schema: Option<TypeSchema>,
    /// A digest of what this resource contributes to its group version's
    /// `/openapi/v3` document, computed on first use (see
    /// `openapi::v3_hash`); infos are shared between registry snapshots, so
    /// each schema is digested once.
    pub(crate) openapi_digest: Derived<u64>,
}

/// A value derived from the rest of a struct, computed once on first use.
/// A clone starts empty, so a copy whose fields are then changed never
/// carries the original's value.
#[derive(Debug, Default)]
pub(crate) struct Derived<T>(std::sync::OnceLock<T>);

impl<T> Derived<T> {
    pub(crate) fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        self.0.get_or_init(f)
    }
}

impl<T> Clone for Derived<T> {
    fn clone(&self) -> Self {
        Derived(std::sync::OnceLock::new())
    }
}

/// How to write a built-in kind's OpenAPI definition: k8s-openapi's
/// `JsonSchema` implementation of its type.
#[derive(Debug, Clone, Copy)]
pub struct TypeSchema {
    /// The definition's name, e.g. `io.k8s.api.apps.v1.Deployment`.
    pub name: fn() -> std::borrow::Cow<'static, str>,
    /// Adds the definition (and those it refers to) to a generator.
    pub write: fn(&mut k8s_openapi::schemars::SchemaGenerator) -> k8s_openapi::schemars::Schema,
}

/// The RBAC API group.
pub const RBAC: &str = "rbac.authorization.k8s.io";
/// The authorization (access review) API group.
pub const AUTHZ: &str = "authorization.k8s.io";

/// The verbs of a stored resource.
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

/// Orders API versions as Kubernetes does (`CompareKubeAwareVersionStrings`):
/// GA before beta before alpha, higher numbers first, then anything else by
/// name. `Less` means `a` is preferred.
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    // (stability: 3 GA, 2 beta, 1 alpha, 0 other; major; minor)
    fn key(v: &str) -> (u8, u64, u64) {
        let Some(rest) = v.strip_prefix('v') else {
            return (0, 0, 0);
        };
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let Ok(major) = rest[..digits].parse::<u64>() else {
            return (0, 0, 0);
        };
        let tail = &rest[digits..];
        let level = |prefix: &str, stability: u8| {
            tail.strip_prefix(prefix)
                .and_then(|n| n.parse::<u64>().ok())
                .map(|minor| (stability, major, minor))
        };
        match tail {
            "" => (3, major, 0),
            _ => level("beta", 2)
                .or_else(|| level("alpha", 1))
                .unwrap_or((0, 0, 0)),
        }
    }
    let (ka, kb) = (key(a), key(b));
    match (ka.0, kb.0) {
        (0, 0) => a.cmp(b),
        _ => kb.cmp(&ka),
    }
}

impl ResourceInfo {
    /// A stored resource with every verb and `NAME`, `AGE` columns.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        ResourceInfo {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.into(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            subresources: Vec::new(),
            verbs: VERBS.iter().map(|v| v.to_string()).collect(),
            columns: vec![Column::name(), Column::age()],
            schema: None,
            deprecation_warning: None,
            type_schema: None,
            openapi_digest: Derived::default(),
        }
    }

    /// Marks the kind as k8s-openapi's type `T` (its OpenAPI definition).
    pub fn typed<T: k8s_openapi::schemars::JsonSchema>(mut self) -> Self {
        self.type_schema = Some(TypeSchema {
            name: T::schema_name,
            write: |g| g.subschema_for::<T>(),
        });
        self
    }

    pub fn short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Subresources that read and write (parts of) the object itself
    /// (`status`, `finalize`): same kind, `get`, `patch`, `update`.
    pub fn subresources(mut self, subs: &[&str]) -> Self {
        for name in subs {
            let sub = Subresource {
                name: name.to_string(),
                group: self.group.clone(),
                version: self.version.clone(),
                kind: self.kind.clone(),
                verbs: ["get", "patch", "update"].map(String::from).to_vec(),
            };
            self.subresources.push(sub);
        }
        self
    }

    /// A subresource with its own kind and verbs (`serviceaccounts/token`).
    pub fn subresource(mut self, sub: Subresource) -> Self {
        self.subresources.push(sub);
        self
    }

    /// The subresource `name`, if the resource has it.
    pub fn find_subresource(&self, name: &str) -> Option<&Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    pub fn verbs(mut self, verbs: &[&str]) -> Self {
        self.verbs = verbs.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Categories (`kubectl get all` lists the resources in `all`).
    pub fn categories(mut self, categories: &[&str]) -> Self {
        self.categories = categories.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn columns(mut self, columns: Vec<Column>) -> Self {
        self.columns = columns;
        self
    }

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

    /// Whether discovery lists `verb`.
    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
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

/// A set of resources, indexed by group/version/plural.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Shared, not copied: a registry is rebuilt on every change of the
    /// set of resources, and a custom resource's description carries its
    /// whole schema.
    resources: BTreeMap<(String, String, String), std::sync::Arc<ResourceInfo>>,
}

impl Registry {
    /// Adds or replaces a resource.
    pub fn insert(&mut self, info: impl Into<std::sync::Arc<ResourceInfo>>) {
        let info = info.into();
        self.resources.insert(
            (
                info.group.clone(),
                info.version.clone(),
                info.plural.clone(),
            ),
            info,
        );
    }

    /// Removes a resource; returns it if it was there.
    pub fn remove(
        &mut self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<std::sync::Arc<ResourceInfo>> {
        self.resources
            .remove(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// Looks a resource up by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.resources
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .map(|i| &**i)
    }

    /// All resources, in group/version/plural order.
    pub fn all(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.resources.values().map(|i| &**i)
    }

    /// The resources of one group version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceInfo> + 'a {
        let start = (group.to_string(), version.to_string(), String::new());
        self.resources
            .range(start..)
            .take_while(move |((g, v, _), _)| g == group && v == version)
            .map(|(_, i)| &**i)
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
        // Preferred first, as upstream lists them (autoscaling: v2, v1).
        for versions in out.values_mut() {
            versions.sort_by(|a, b| compare_versions(a, b));
        }
        out
    }
}

#[cfg(test)]
mod version_tests {
    use super::compare_versions;

    #[test]
    fn versions_order_as_kubernetes_orders_them() {
        let mut v = vec![
            "v1alpha1", "foo1", "v1", "v2beta1", "v1beta2", "v10", "v1beta1", "v2", "foo10",
        ];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            v,
            [
                "v10", "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "foo1", "foo10"
            ]
        );
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
                "apiextensions.k8s.io",
                "apiextensions.wasm-apiserver.io",
                "apiregistration.k8s.io",
                "apps",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "autoscaling",
                "batch",
                "certificates.k8s.io",
                "controllers.wasm-apiserver.io",
                "coordination.k8s.io",
                "discovery.k8s.io",
                "events.k8s.io",
                "flowcontrol.apiserver.k8s.io",
                "networking.k8s.io",
                "node.k8s.io",
                "policy",
                "rbac.authorization.k8s.io",
                "scheduling.k8s.io",
                "scheduling.wasm-apiserver.io",
                "storage.k8s.io",
            ]
        );
    }

    #[test]
    fn resources_come_and_go() {
        let mut r = Registry::default();
        r.insert(ResourceInfo::new(
            "example.com",
            "v1",
            "widgets",
            "Widget",
            true,
        ));
        assert_eq!(r.groups().keys().collect::<Vec<_>>(), vec!["example.com"]);
        assert!(r.remove("example.com", "v1", "widgets").is_some());
        assert!(r.get("example.com", "v1", "widgets").is_none());
        assert!(r.groups().is_empty());
    }
}
