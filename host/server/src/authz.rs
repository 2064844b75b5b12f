//! Authorization: `--authorization-mode` (comma list, evaluated in order,
//! first allow wins): `AlwaysAllow`, `AlwaysDeny`, `Node`, `RBAC`, `Wasm`.
//! `Node` decides for kubelets only (`system:node:<name>` in
//! `system:nodes`), from a graph of what their pods reference
//! ([`wasm_apiserver_api::node`], fed by the registry's `node_graph`
//! controller). RBAC evaluates a
//! cached snapshot of Roles, ClusterRoles and their bindings that a
//! controller rebuilds from a storage watch, so a request costs no storage
//! read. Also: the default RBAC policy, access reviews (`kubectl auth
//! can-i`), and escalation prevention on RBAC writes.

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use wasm_apiserver_api::node::{self, graph::NodeGraph};
use wasm_apiserver_api::rbac::{self, RbacSnapshot};
pub use wasm_apiserver_api::rbac::{Attributes, Decision};
use wasm_apiserver_api::resource::RBAC;
use wasm_apiserver_api::{ApiError, RequestInfo, ResourceInfo, meta};
use wasm_apiserver_plugins::UserInfo;
use wasm_apiserver_registry::error::storage_error;
use wasm_apiserver_registry::{
    CreateRequest, Creater, Escalation, Objects, Resource, Resources, WriteOptions,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    AlwaysDeny,
    /// Upstream's Node authorizer.
    Node,
    Rbac,
    /// The wasm authorizer plugins of `--access-plugin-config-file`.
    Wasm,
}

/// The configured authorizers.
pub struct Authorizer {
    modes: RwLock<Vec<Mode>>,
    rbac: RwLock<Arc<RbacSnapshot>>,
    /// Wasm authorizers (`Wasm` mode).
    plugins: RwLock<crate::access_plugins::AccessPlugins>,
    /// What each node's pods reach (`Node` mode).
    node_graph: Arc<RwLock<NodeGraph>>,
}

impl Authorizer {
    /// Parses `--authorization-mode`.
    pub fn parse(modes: &str) -> Result<Self, String> {
        let modes = modes
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| match m {
                "AlwaysAllow" => Ok(Mode::AlwaysAllow),
                "AlwaysDeny" => Ok(Mode::AlwaysDeny),
                "Node" => Ok(Mode::Node),
                "RBAC" => Ok(Mode::Rbac),
                "Wasm" => Ok(Mode::Wasm),
                other => Err(format!(
                    "unknown authorization mode {other:?} (AlwaysAllow, AlwaysDeny, Node, RBAC, Wasm)"
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if modes.is_empty() {
            return Err("--authorization-mode needs at least one mode".into());
        }
        Ok(Authorizer {
            modes: RwLock::new(modes),
            rbac: RwLock::new(Arc::new(RbacSnapshot::from_objects(&[]))),
            plugins: Default::default(),
            node_graph: Default::default(),
        })
    }

    pub fn uses_node(&self) -> bool {
        self.modes.read().expect("modes lock").contains(&Mode::Node)
    }

    /// The Node authorizer's graph, for its controller to keep current.
    pub fn node_graph(&self) -> Arc<RwLock<NodeGraph>> {
        self.node_graph.clone()
    }

    fn node(&self, attrs: &Attributes, reasons: &mut Vec<String>) -> Option<Decision> {
        let graph = self
            .node_graph
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match node::authorize(&graph, attrs)? {
            d @ Decision::Allow(_) => Some(d),
            Decision::NoOpinion(r) => {
                if !r.is_empty() {
                    reasons.push(r);
                }
                None
            }
        }
    }

    /// Replaces the modes (at start-up, from the flags).
    pub fn set_modes(&self, other: Authorizer) {
        *self.modes.write().expect("modes lock") = other.modes.into_inner().expect("modes lock");
    }

    pub fn always_allow() -> Self {
        Self::parse("AlwaysAllow").expect("valid")
    }

    pub fn uses_rbac(&self) -> bool {
        self.modes.read().expect("modes lock").contains(&Mode::Rbac)
    }

    pub fn snapshot(&self) -> Arc<RbacSnapshot> {
        self.rbac.read().expect("rbac lock").clone()
    }

    fn set_snapshot(&self, s: RbacSnapshot) {
        *self.rbac.write().expect("rbac lock") = Arc::new(s);
    }

    /// Installs the wasm authorizers.
    pub fn set_plugins(&self, plugins: crate::access_plugins::AccessPlugins) {
        *self.plugins.write().expect("plugins lock") = plugins;
    }

    /// Decides one request with every mode, wasm plugins included.
    pub async fn authorize_request(&self, attrs: &Attributes) -> Decision {
        self.authorize_request_by(attrs).await.0
    }

    /// [`Authorizer::authorize_request`], and the authorizer whose decision
    /// was terminal as (type, name) (`None`: every one had no opinion),
    /// for `apiserver_authorization_decisions_total`.
    pub async fn authorize_request_by(
        &self,
        attrs: &Attributes,
    ) -> (Decision, Option<(&'static str, &'static str)>) {
        let modes = self.modes.read().expect("modes lock").clone();
        let mut reasons = Vec::new();
        for mode in &modes {
            match mode {
                Mode::Wasm => {
                    let plugins = self.plugins.read().expect("plugins lock").clone();
                    if let Some(d) = plugins.authorize(attrs).await {
                        return (d, Some(("Wasm", "wasm")));
                    }
                }
                Mode::AlwaysAllow => {
                    return (
                        Decision::Allow(String::new()),
                        Some(("AlwaysAllow", "alwaysallow")),
                    );
                }
                // Upstream's AlwaysDeny has no opinion (nothing allows).
                Mode::AlwaysDeny => {
                    return (Decision::NoOpinion("Everything is forbidden.".into()), None);
                }
                Mode::Node => {
                    if let Some(d) = self.node(attrs, &mut reasons) {
                        return (d, Some(("Node", "node")));
                    }
                }
                Mode::Rbac => match rbac::authorize(&self.snapshot(), attrs) {
                    d @ Decision::Allow(_) => return (d, Some(("RBAC", "rbac"))),
                    Decision::NoOpinion(r) => reasons.push(r),
                },
            }
        }
        (Decision::NoOpinion(reasons.join("; ")), None)
    }

    /// Decides one request with the built-in modes only (RBAC escalation
    /// checks, which are about RBAC's own rules).
    pub fn authorize(&self, attrs: &Attributes) -> Decision {
        let mut reasons = Vec::new();
        let modes = self.modes.read().expect("modes lock").clone();
        for mode in &modes {
            match mode {
                Mode::Wasm => {}
                Mode::AlwaysAllow => return Decision::Allow(String::new()),
                Mode::AlwaysDeny => return Decision::NoOpinion("Everything is forbidden.".into()),
                Mode::Node => {
                    if let Some(d) = self.node(attrs, &mut reasons) {
                        return d;
                    }
                }
                Mode::Rbac => match rbac::authorize(&self.snapshot(), attrs) {
                    d @ Decision::Allow(_) => return d,
                    Decision::NoOpinion(r) => reasons.push(r),
                },
            }
        }
        Decision::NoOpinion(reasons.join("; "))
    }
}

/// Admission-policy expressions' `authorizer` checks: the built-in modes
/// (RBAC, AlwaysAllow, AlwaysDeny), decided synchronously inside an
/// expression; wasm authorizers are asynchronous sandbox calls and are not
/// consulted there.
impl wasm_apiserver_api::cel::authz::Authorize for Authorizer {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        Authorizer::authorize(self, attrs)
    }
}

/// The authorization attributes of a request.
pub fn attributes(info: &RequestInfo, user: &UserInfo) -> Attributes {
    Attributes {
        user: user.username.clone(),
        groups: user.groups.clone(),
        verb: info.verb.clone(),
        api_group: info.api_group.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
        namespace: info.namespace.clone(),
        name: info.name.clone(),
        path: info.path.clone(),
        is_resource_request: info.is_resource_request,
    }
}

/// Upstream's 403 text, e.g. `configmaps "x" is forbidden: User "alice"
/// cannot get resource "configmaps" in API group "" in the namespace "ns"`.
pub fn forbidden(attrs: &Attributes, reason: &str) -> ApiError {
    let suffix = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    if !attrs.is_resource_request {
        return ApiError::Custom {
            code: 403,
            reason: "Forbidden".into(),
            message: format!(
                "forbidden: User \"{}\" cannot {} path \"{}\"{suffix}",
                attrs.user, attrs.verb, attrs.path
            ),
            causes: Vec::new(),
        };
    }
    let resource = match &attrs.subresource {
        Some(sub) => format!("{}/{sub}", attrs.resource),
        None => attrs.resource.clone(),
    };
    let scope = match &attrs.namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".into(),
    };
    let target = wasm_apiserver_api::error::Target::new(
        &attrs.api_group,
        &resource,
        attrs.name.as_deref().unwrap_or_default(),
    );
    ApiError::Forbidden(
        target,
        format!(
            "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}{suffix}",
            attrs.user, attrs.verb, attrs.api_group
        ),
    )
}

fn info(objects: &Objects, plural: &str) -> Arc<Resource> {
    objects.resources.builtin(RBAC, "v1", plural)
}

/// Creates the default roles and bindings that are missing.
pub async fn ensure_bootstrap_policy(objects: &Objects) -> Result<(), ApiError> {
    let opts = WriteOptions::system("rbac-bootstrap");
    let namespaced = rbac::bootstrap_namespace_policy();
    for obj in rbac::bootstrap_policy().into_iter().chain(namespaced) {
        let plural = match obj["kind"].as_str() {
            Some("ClusterRole") => "clusterroles",
            Some("Role") => "roles",
            Some("RoleBinding") => "rolebindings",
            _ => "clusterrolebindings",
        };
        let ns = obj["metadata"]["namespace"].as_str().map(String::from);
        match objects
            .create(&info(objects, plural), ns.as_deref(), obj, &opts)
            .await
        {
            Ok(_) | Err(ApiError::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads all RBAC objects and installs a fresh snapshot; returns the revision.
pub async fn reload(objects: &Objects, authz: &Authorizer) -> Result<u64, ApiError> {
    let mut all = Vec::new();
    let mut revision = 0;
    for plural in [
        "roles",
        "clusterroles",
        "rolebindings",
        "clusterrolebindings",
    ] {
        let listed = objects
            .list(&info(objects, plural), None, &Default::default())
            .await?;
        revision = revision.max(listed.resource_version);
        all.extend(listed.items);
    }
    authz.set_snapshot(RbacSnapshot::from_objects(&all));
    Ok(revision)
}

/// Keeps the RBAC snapshot current: one watch on the RBAC group's keys; any
/// change rebuilds the snapshot (RBAC objects are few and change rarely).
pub fn spawn_controller(objects: Objects, authz: Arc<Authorizer>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let result: Result<(), ApiError> = async {
                let revision = reload(&objects, &authz).await?;
                let mut stream = objects
                    .storage
                    .watch(&format!("/registry/{RBAC}/"), revision)
                    .await
                    .map_err(storage_error)?;
                while let Some(item) = stream.next().await {
                    if let wasm_apiserver_storage::WatchItem::Event(_) =
                        item.map_err(storage_error)?
                    {
                        reload(&objects, &authz).await?;
                    }
                }
                Ok(())
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "RBAC watch ended; reloading");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// The access review resources, answered by [`Reviews`].
pub const REVIEWS: &[(&str, &str)] = &[
    (
        wasm_apiserver_api::resource::AUTHZ,
        "selfsubjectaccessreviews",
    ),
    (wasm_apiserver_api::resource::AUTHZ, "subjectaccessreviews"),
    (
        wasm_apiserver_api::resource::AUTHZ,
        "localsubjectaccessreviews",
    ),
    (
        wasm_apiserver_api::resource::AUTHZ,
        "selfsubjectrulesreviews",
    ),
    ("authentication.k8s.io", "selfsubjectreviews"),
];

/// Makes `authz` answer the access review resources.
pub fn install_reviews(resources: &Resources, authz: &Arc<Authorizer>) {
    let reviews: Arc<dyn Creater> = Arc::new(Reviews(authz.clone()));
    for (group, plural) in REVIEWS {
        let installed =
            resources.update(group, "v1", plural, |r| r.with_create_only(reviews.clone()));
        debug_assert!(installed, "{plural} is built in");
    }
}

/// The REST object of the access review resources (their `create`
/// answers a question and stores nothing).
pub struct Reviews(pub Arc<Authorizer>);

#[async_trait]
impl Creater for Reviews {
    async fn create(&self, req: CreateRequest<'_>, body: Value) -> Result<Value, ApiError> {
        review(&self.0, req.info, req.namespace, req.user, body).await
    }
}

impl Escalation for Authorizer {
    fn check(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        obj: &Value,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        check_escalation(self, info, namespace, obj, user)
    }
}

/// Answers a `create` of an access review resource.
async fn review(
    authz: &Authorizer,
    res: &ResourceInfo,
    ns: Option<&str>,
    user: &UserInfo,
    mut body: Value,
) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match res.plural.as_str() {
        "selfsubjectaccessreviews" | "subjectaccessreviews" | "localsubjectaccessreviews" => {
            let (name, groups) = if res.plural == "selfsubjectaccessreviews" {
                (user.username.clone(), user.groups.clone())
            } else {
                let name = spec["user"].as_str().unwrap_or_default().to_string();
                let groups = spec["groups"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|g| g.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                (name, groups)
            };
            let mut attrs = Attributes::from_access_review_spec(&spec, &name, &groups);
            if res.plural == "localsubjectaccessreviews" {
                attrs.namespace = ns.map(String::from);
            }
            match authz.authorize_request(&attrs).await {
                Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
                Decision::NoOpinion(reason) => json!({"allowed": false, "reason": reason}),
            }
        }
        "selfsubjectrulesreviews" => {
            let namespace = spec["namespace"].as_str().filter(|n| !n.is_empty());
            let (rules, errors) = rbac::rules_for_with_errors(
                &authz.snapshot(),
                &user.username,
                &user.groups,
                namespace,
            );
            rbac::subject_rules_review_status(&rules, &errors)
        }
        "selfsubjectreviews" => json!({"userInfo": {
            "username": user.username, "uid": user.uid, "groups": user.groups,
        }}),
        _ => return Err(ApiError::MethodNotAllowed),
    };
    body["apiVersion"] = json!(res.api_version());
    body["kind"] = json!(res.kind);
    body["status"] = status;
    Ok(body)
}

/// Refuses RBAC writes that would grant more than the writer holds, unless
/// the writer may `escalate` (roles) or `bind` (bindings), as upstream.
fn check_escalation(
    authz: &Authorizer,
    res: &ResourceInfo,
    ns: Option<&str>,
    obj: &Value,
    user: &UserInfo,
) -> Result<(), ApiError> {
    if res.group != RBAC || !authz.uses_rbac() {
        return Ok(());
    }
    let snapshot = authz.snapshot();
    let may = |verb: &str, resource: &str, name: Option<&str>| {
        let mut a = Attributes {
            user: user.username.clone(),
            groups: user.groups.clone(),
            verb: verb.into(),
            api_group: RBAC.into(),
            resource: resource.into(),
            namespace: ns.map(String::from),
            name: name.map(String::from),
            is_resource_request: true,
            ..Default::default()
        };
        if resource == "clusterroles" && verb == "escalate" {
            a.namespace = None;
        }
        authz.authorize(&a).is_allowed()
    };
    let (requested, escape) = match res.plural.as_str() {
        "roles" | "clusterroles" => (
            rbac::PolicyRule::from_role(obj),
            may("escalate", &res.plural, meta::name(obj)),
        ),
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &obj["roleRef"];
            let role_name = role_ref["name"].as_str().unwrap_or_default();
            let kind = role_ref["kind"].as_str().unwrap_or_default();
            let rules = snapshot
                .role_rules_of(kind, ns, role_name)
                .unwrap_or_default();
            let plural = if kind == "ClusterRole" {
                "clusterroles"
            } else {
                "roles"
            };
            (rules, may("bind", plural, Some(role_name)))
        }
        _ => return Ok(()),
    };
    if escape {
        return Ok(());
    }
    let owned = rbac::rules_for(&snapshot, &user.username, &user.groups, ns);
    let (covered, missing) = rbac::covers(&owned, &requested);
    if covered {
        return Ok(());
    }
    Err(ApiError::Forbidden(
        wasm_apiserver_api::error::Target::new(
            &res.group,
            &res.plural,
            meta::name(obj).unwrap_or_default(),
        ),
        rbac::escalation_message(&user.username, &user.groups, &missing),
    ))
}
