//! The built-in resources with their strategies: the descriptions come from
//! `wasm_apiserver_api::builtin`, the behaviour that differs from the
//! generic store lives here, one strategy per kind (namespaces, secrets,
//! RBAC, admission plugins and webhook configurations). The access reviews
//! and TokenRequest are REST objects of the access-control layer, which
//! registers them.

use crate::admission::{controller, policy};
use crate::crd;
use crate::resources::Resource;
use crate::store::{NamespaceCache, Objects};
use crate::strategy::{Escalation, Strategy};
use crate::{webhook, workloads};
use async_trait::async_trait;
use base64::Engine;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::Notify;
use wasm_apiserver_api::admission_policy as vap;
use wasm_apiserver_api::resource::RBAC;
use wasm_apiserver_api::validation::validate_object;
use wasm_apiserver_api::{ApiError, ResourceInfo, meta};
use wasm_apiserver_plugins::UserInfo;

/// Namespaces: cluster-scoped objects addressed by their own name, always
/// deleted gracefully (the namespace controller empties them first), with
/// the `kubernetes` spec finalizer and the `finalize` subresource.
struct Namespaces {
    cache: Arc<NamespaceCache>,
    deleted: Arc<Notify>,
}

#[async_trait]
impl Strategy for Namespaces {
    fn scope<'a>(
        &self,
        _info: &ResourceInfo,
        _namespace: Option<&'a str>,
        _verb: &str,
    ) -> Option<Option<&'a str>> {
        // `/api/v1/namespaces/<name>`: the URL's namespace is the object.
        Some(None)
    }

    fn prepare_for_create(&self, obj: &mut Value, _user: &UserInfo) {
        obj["spec"]["finalizers"] = json!(["kubernetes"]);
    }

    fn canonicalize(&self, obj: &mut Value) {
        // Upstream labels every namespace with its own name.
        let name = meta::name(obj).unwrap_or_default().to_string();
        if !name.is_empty() {
            let m = meta::metadata_mut(obj);
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            if labels.is_object() {
                labels["kubernetes.io/metadata.name"] = json!(name);
            }
        }
        if meta::str_field(obj, "deletionTimestamp").is_none() {
            obj["status"] = json!({"phase": "Active"});
        }
    }

    fn update_subresource(
        &self,
        sub: &str,
        current: &Value,
        body: &Value,
    ) -> Option<Result<Value, ApiError>> {
        (sub == "finalize").then(|| {
            let mut new = current.clone();
            new["spec"]["finalizers"] = body["spec"]["finalizers"].clone();
            Ok(new)
        })
    }

    fn graceful_delete(&self, _obj: &Value) -> bool {
        true
    }

    fn prepare_for_delete(&self, marked: &mut Value) {
        marked["status"] = json!({"phase": "Terminating"});
    }

    fn holds_deletion(&self, obj: &Value) -> bool {
        obj["spec"]["finalizers"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    }

    async fn after_write(&self, obj: &Value, deleted: bool) {
        let name = meta::name(obj).unwrap_or_default();
        if deleted {
            self.cache.set(name, None);
        } else if meta::str_field(obj, "deletionTimestamp").is_some() {
            self.cache.set(name, Some(true));
            self.deleted.notify_one();
        }
    }
}

/// ResourceQuotas: a new quota has no status (upstream's
/// `PrepareForCreate`): its usage is the controller's to count. This
/// replica's admission knows of a quota as soon as it is written.
struct ResourceQuotas(Arc<crate::admission::resourcequota::QuotaNamespaces>);

#[async_trait]
impl Strategy for ResourceQuotas {
    fn prepare_for_create(&self, obj: &mut Value, _user: &UserInfo) {
        if let Some(m) = obj.as_object_mut() {
            m.remove("status");
        }
    }

    async fn after_write(&self, obj: &Value, deleted: bool) {
        self.0.set(
            meta::namespace(obj).unwrap_or_default(),
            meta::name(obj).unwrap_or_default(),
            !deleted,
        );
    }
}

/// Secrets: `type` defaults to `Opaque`; write-only `stringData` folds into
/// `data`.
struct Secrets;

impl Strategy for Secrets {
    fn canonicalize(&self, obj: &mut Value) {
        if obj
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            obj["type"] = json!("Opaque");
        }
        if let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) {
            let engine = base64::engine::general_purpose::STANDARD;
            for (k, v) in sd {
                let s = v.as_str().unwrap_or_default();
                obj["data"][k] = json!(engine.encode(s));
            }
        }
    }
}

/// RBAC objects: a write may not grant more than the writer holds.
struct Rbac(Arc<dyn Escalation>);

impl Strategy for Rbac {
    fn validate(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        obj: &Value,
        _old: Option<&Value>,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        self.0.check(info, namespace, obj, user)
    }
}

/// `AdmissionPlugin` objects: a write takes effect on this replica before
/// the response (other replicas follow through the controller's watch).
struct AdmissionPlugins(Objects);

/// A plugin (or resource handler) may be granted only reads its author
/// could make: every
/// kind in `spec.contextAwareResources` must exist and be readable
/// (`get` and `list`, cluster-wide, as the plugin's reads are) by the
/// user writing the object, so nobody grants a plugin what they cannot
/// see themselves.
fn check_grants(
    objects: &Objects,
    info: &ResourceInfo,
    obj: &Value,
    old: Option<&Value>,
    user: &UserInfo,
) -> Result<(), ApiError> {
    // Only a change of grants is checked: a status write by a controller
    // keeps what its author was allowed.
    if old
        .is_some_and(|o| o["spec"]["contextAwareResources"] == obj["spec"]["contextAwareResources"])
    {
        return Ok(());
    }
    let Some(grants) = obj["spec"]["contextAwareResources"].as_array() else {
        return Ok(());
    };
    let authorize = objects
        .admission
        .as_ref()
        .and_then(|a| a.policies.authorizer());
    let snapshot = objects.resources.snapshot();
    let groups: Vec<&str> = user.groups.iter().map(String::as_str).collect();
    let mut causes = Vec::new();
    for (i, g) in grants.iter().enumerate() {
        let field = format!("spec.contextAwareResources[{i}]");
        let api_version = g["apiVersion"].as_str().unwrap_or_default();
        let kind = g["kind"].as_str().unwrap_or_default();
        if (api_version, kind) == wasm_apiserver_plugins::cluster::ACCESS_REVIEW {
            continue;
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let Some(res) = snapshot
            .all()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
        else {
            causes.push(wasm_apiserver_api::Cause::invalid(
                &field,
                &format!("{api_version} {kind}"),
                "no resource of the server serves this kind",
            ));
            continue;
        };
        let Some(authorize) = authorize else {
            continue;
        };
        for verb in ["get", "list"] {
            let attrs = wasm_apiserver_api::rbac::Attributes::resource(
                &user.username,
                &groups,
                verb,
                &res.group,
                &res.plural,
            );
            if !authorize.authorize(&attrs).is_allowed() {
                causes.push(wasm_apiserver_api::Cause {
                        reason: "FieldValueForbidden".into(),
                        field: field.clone(),
                        message: format!(
                            "Forbidden: user {:?} cannot {verb} {} cluster-wide, so may not grant a plugin reads of them",
                            user.username,
                            if res.group.is_empty() { res.plural.clone() } else { format!("{}.{}", res.plural, res.group) }
                        ),
                    });
                break;
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid(
        wasm_apiserver_api::error::Target::new(
            &info.group,
            &info.kind,
            meta::name(obj).unwrap_or_default(),
        ),
        causes,
    ))
}

#[async_trait]
impl Strategy for AdmissionPlugins {
    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        check_grants(&self.0, info, obj, old, user)
    }

    async fn after_write(&self, obj: &Value, deleted: bool) {
        match (&self.0.admission, deleted) {
            (Some(adm), true) => adm.remove(
                meta::name(obj).unwrap_or_default(),
                meta::str_field(obj, "uid").unwrap_or_default(),
            ),
            (Some(_), false) => controller::reconcile(&self.0, obj).await,
            (None, _) => {}
        }
    }
}

/// `ResourceHandler` objects: a write takes effect on this replica before
/// the response (other replicas follow through the controller's watch).
struct ResourceHandlers(Objects);

#[async_trait]
impl Strategy for ResourceHandlers {
    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        check_grants(&self.0, info, obj, old, user)
    }

    async fn after_write(&self, obj: &Value, deleted: bool) {
        crate::handlers::controller::reconcile(&self.0, obj, deleted).await;
    }
}

/// A 422 for a spec its parser refused with `message` (`<field>: <text>`).
fn invalid_spec(info: &ResourceInfo, obj: &Value, message: &str) -> ApiError {
    let name = meta::name(obj).unwrap_or_default();
    let (field, text) = message
        .split_once(": ")
        .filter(|(f, _)| f.starts_with("spec"))
        .unwrap_or(("spec", message));
    ApiError::Invalid(
        wasm_apiserver_api::error::Target::new(&info.group, &info.kind, name),
        vec![wasm_apiserver_api::Cause {
            reason: "FieldValueInvalid".into(),
            field: field.into(),
            message: text.into(),
        }],
    )
}

/// `SchedulerPlugin` objects: the spec is checked on write (a 422 naming
/// the field) and its cluster grants as an admission plugin's; the
/// scheduler on the leader loads them.
struct SchedulerPlugins(Objects);

impl Strategy for SchedulerPlugins {
    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        wasm_apiserver_api::scheduler_plugin::SchedulerPluginSpec::parse(&obj["spec"])
            .map_err(|m| invalid_spec(info, obj, &m))?;
        check_grants(&self.0, info, obj, old, user)
    }
}

/// `Controller` objects: the spec is checked on write (a 422 naming the
/// field), and naming a ServiceAccount needs the writer's own right to act
/// as it (`impersonate` on that `serviceaccounts` object, as
/// `kubectl --as` would), so nobody hands a controller an identity they
/// could not use themselves. The leader's manager runs them.
struct Controllers(Objects);

impl Strategy for Controllers {
    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        let name = meta::name(obj).unwrap_or_default();
        let target = wasm_apiserver_api::error::Target::new(&info.group, &info.kind, name);
        let spec = wasm_apiserver_api::controller::ControllerSpec::parse(&obj["spec"])
            .map_err(|m| invalid_spec(info, obj, &m))?;
        // A status write keeps what the author was allowed.
        if old.is_some_and(|o| o["spec"]["serviceAccountName"] == obj["spec"]["serviceAccountName"])
        {
            return Ok(());
        }
        let Some(authorize) = self
            .0
            .admission
            .as_ref()
            .and_then(|a| a.policies.authorizer())
        else {
            return Ok(());
        };
        let (sa_ns, sa_name) = spec.service_account().map_err(ApiError::BadRequest)?;
        let groups: Vec<&str> = user.groups.iter().map(String::as_str).collect();
        let attrs = wasm_apiserver_api::rbac::Attributes::resource(
            &user.username,
            &groups,
            "impersonate",
            "",
            "serviceaccounts",
        )
        .in_namespace(sa_ns)
        .named(sa_name);
        if authorize.authorize(&attrs).is_allowed() {
            return Ok(());
        }
        Err(ApiError::Invalid(
            target,
            vec![wasm_apiserver_api::Cause {
                reason: "FieldValueForbidden".into(),
                field: "spec.serviceAccountName".into(),
                message: format!(
                    "Forbidden: user {:?} cannot impersonate serviceaccount {sa_ns}/{sa_name}, so may not run a controller as it",
                    user.username
                ),
            }],
        ))
    }
}

/// Webhook configurations: applied to this replica's chain on write.
struct WebhookConfigurations {
    objects: Objects,
    plural: &'static str,
}

#[async_trait]
impl Strategy for WebhookConfigurations {
    async fn after_write(&self, obj: &Value, deleted: bool) {
        controller::reconcile_webhooks(&self.objects, self.plural, obj, deleted);
    }
}

/// Admission policies (validating and mutating) and their bindings:
/// checked (their expressions compiled) on write, applied to this
/// replica's admission policies before the response (other replicas follow
/// through the controller's watch).
struct AdmissionPolicies {
    objects: Objects,
    kind: policy::Kind,
}

#[async_trait]
impl Strategy for AdmissionPolicies {
    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        _old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<(), ApiError> {
        use wasm_apiserver_api::admission_policy::mutating::{MutatingBinding, MutatingPolicy};
        use wasm_apiserver_api::admission_policy::{Binding, Policy};
        validate_object(info, obj)?;
        let causes = match self.kind {
            policy::Kind::Policy => Policy::compile(obj).err(),
            policy::Kind::Binding => Binding::parse(obj).err(),
            policy::Kind::MutatingPolicy => MutatingPolicy::compile(obj).err(),
            policy::Kind::MutatingBinding => MutatingBinding::parse(obj).err(),
        };
        crate::strategy::invalid_if_any(info, obj, causes.unwrap_or_default())
    }

    async fn after_write(&self, obj: &Value, deleted: bool) {
        controller::reconcile_policy(&self.objects, self.kind, obj, deleted).await;
    }
}

/// APIService objects: the name is `<version>.<group>`. A local one
/// (served here) is always `Available`; a remote one's condition is the
/// availability controller's ([`crate::controllers::availability`]).
struct ApiServices;

/// Whether an APIService object names a backend service (not local).
pub fn is_remote_api_service(obj: &Value) -> bool {
    obj["spec"]["service"].is_object()
}

impl Strategy for ApiServices {
    fn canonicalize(&self, obj: &mut Value) {
        if is_remote_api_service(obj) {
            return;
        }
        let since = obj["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
            .filter(|c| c["status"] == "True" && c["reason"] == "Local")
            .and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
            .unwrap_or_else(|| meta::timestamp(chrono::Utc::now()));
        obj["status"] = json!({"conditions": [{
            "type": "Available",
            "status": "True",
            "lastTransitionTime": since,
            "reason": "Local",
            "message": "Local APIServices are always available",
        }]});
    }

    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        _old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        let name = meta::name(obj).unwrap_or_default();
        let group = obj["spec"]["group"].as_str().unwrap_or_default();
        let version = obj["spec"]["version"].as_str().unwrap_or_default();
        let mut causes = Vec::new();
        if version.is_empty() {
            causes.push(wasm_apiserver_api::Cause {
                reason: "FieldValueRequired".into(),
                field: "spec.version".into(),
                message: "Required value".into(),
            });
        }
        let want = format!("{version}.{group}");
        if name != want {
            causes.push(wasm_apiserver_api::Cause {
                reason: "FieldValueInvalid".into(),
                field: "metadata.name".into(),
                message: format!("Invalid value: {name:?}: must be {want:?}"),
            });
        }
        if causes.is_empty() {
            return Ok(());
        }
        Err(ApiError::Invalid(
            wasm_apiserver_api::error::Target::new(&info.group, &info.plural, name),
            causes,
        ))
    }
}

/// Creates the local APIService of every served group version that has
/// none (`v1.` for the core group, `v1.apps`...), as upstream lists them.
pub async fn ensure_local_api_services(objects: &Objects) -> Result<(), ApiError> {
    let res = objects.resources.builtin(
        wasm_apiserver_api::builtin::APIREGISTRATION,
        "v1",
        "apiservices",
    );
    let snapshot = objects.resources.snapshot();
    let mut versions: Vec<(String, String)> = vec![(String::new(), "v1".into())];
    for (group, vs) in snapshot.infos().groups() {
        versions.extend(vs.into_iter().map(|v| (group.clone(), v)));
    }
    let opts = crate::options::WriteOptions::system("apiservice-registration");
    for (group, version) in versions {
        let core = group.is_empty();
        let obj = json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": format!("{version}.{group}")},
            "spec": {
                "group": group,
                "version": version,
                "groupPriorityMinimum": if core { 18000 } else { 1000 },
                "versionPriority": 15,
            },
        });
        match objects.create(&res, None, obj, &opts).await {
            Ok(_) | Err(ApiError::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What the built-in resources need from the layers above.
pub struct Dependencies {
    /// RBAC's escalation check.
    pub escalation: Arc<dyn Escalation>,
}

/// What [`install`] hands back to the assembly.
pub struct Installed {
    /// Which resources the CRDs serve (for [`crate::crd`]'s controller).
    pub crds: Arc<crd::Served>,
}

/// Registers every built-in resource with its strategy, in one swap.
pub fn install(objects: &Objects, deps: Dependencies) -> Installed {
    let crds = Arc::new(crd::Served::default());
    let resources = wasm_apiserver_api::builtin::resources()
        .into_iter()
        .map(|info| {
            let strategy: Option<Arc<dyn Strategy>> =
                match (info.group.as_str(), info.plural.as_str()) {
                    ("", "namespaces") => Some(Arc::new(Namespaces {
                        cache: objects.namespace_cache.clone(),
                        deleted: objects.namespace_deleted.clone(),
                    })),
                    ("", "secrets") => Some(Arc::new(Secrets)),
                    ("", "resourcequotas") => {
                        Some(Arc::new(ResourceQuotas(objects.quota_namespaces.clone())))
                    }
                    (crate::certificates::GROUP, crate::certificates::PLURAL) => {
                        Some(Arc::new(crate::certificates::CertificateSigningRequests))
                    }
                    (crd::GROUP, crd::PLURAL) => Some(Arc::new(crd::Definitions::new(
                        objects.clone(),
                        crds.clone(),
                    ))),
                    (wasm_apiserver_api::builtin::APIREGISTRATION, "apiservices") => {
                        Some(Arc::new(ApiServices))
                    }
                    (RBAC, _) => Some(Arc::new(Rbac(deps.escalation.clone()))),
                    (wasm_apiserver_api::admission::GROUP, _) => {
                        Some(Arc::new(AdmissionPlugins(objects.clone())))
                    }
                    (wasm_apiserver_api::handler::GROUP, _) => {
                        Some(Arc::new(ResourceHandlers(objects.clone())))
                    }
                    (wasm_apiserver_api::controller::GROUP, _) => {
                        Some(Arc::new(Controllers(objects.clone())))
                    }
                    (wasm_apiserver_api::scheduler_plugin::GROUP, _) => {
                        Some(Arc::new(SchedulerPlugins(objects.clone())))
                    }
                    (webhook::GROUP, webhook::VALIDATING) => {
                        Some(Arc::new(WebhookConfigurations {
                            objects: objects.clone(),
                            plural: webhook::VALIDATING,
                        }))
                    }
                    (vap::GROUP, plural) if policy::Kind::of(plural).is_some() => {
                        Some(Arc::new(AdmissionPolicies {
                            objects: objects.clone(),
                            kind: policy::Kind::of(plural).expect("checked"),
                        }))
                    }
                    (webhook::GROUP, webhook::MUTATING) => Some(Arc::new(WebhookConfigurations {
                        objects: objects.clone(),
                        plural: webhook::MUTATING,
                    })),
                    ("autoscaling", "horizontalpodautoscalers") => {
                        Some(Arc::new(crate::autoscaling::Hpa))
                    }
                    ("", "services") => Some(Arc::new(workloads::Services {
                        allocator: crate::allocator::Allocator::new(
                            objects.storage.clone(),
                            Default::default(),
                        ),
                    })),
                    (group, plural) => workloads::Kind::of(group, plural)
                        .map(|kind| Arc::new(workloads::Workloads(kind)) as Arc<dyn Strategy>),
                };
            let r = Resource::new(info);
            match strategy {
                Some(s) => r.with_strategy(s),
                None => r,
            }
        });
    objects.resources.insert_all(resources);
    objects.resources.update("", "v1", "pods", |pods| {
        pods.with_subresource_creater("binding", Arc::new(workloads::PodBinding(objects.clone())))
            .with_subresource_creater(
                "eviction",
                Arc::new(workloads::PodEviction(objects.clone())),
            )
    });
    Installed { crds }
}
