//! The built-in resources of this server as data: group, version, kind,
//! scope, short names, subresources and upstream's `kubectl get` columns
//! for each. The server registers these (with their strategies) at start;
//! custom resources register the same [`ResourceInfo`] shape at runtime.

use crate::resource::{AUTHZ, Column, RBAC, Registry, Render, ResourceInfo, Subresource};
use crate::{admission, controller, handler, scheduler_plugin};
use serde_json::json;

/// The group of APIService objects.
pub const APIREGISTRATION: &str = "apiregistration.k8s.io";

fn string(name: &str, description: &str, json_path: &str) -> Column {
    Column::new(name, "string", description, json_path).or(json!(""))
}

fn count(name: &str, description: &str, json_path: &str) -> Column {
    Column::new(name, "string", description, json_path).render(Render::Count)
}

/// An access review: `create` computes an answer and nothing is stored.
fn review(group: &str, plural: &str, kind: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo::new(group, "v1", plural, kind, namespaced).verbs(&["create"])
}

/// The k8s-openapi type of each classic resource below (its OpenAPI
/// definition); `kinds` marks its own.
fn typed(info: ResourceInfo) -> ResourceInfo {
    use k8s_openapi::api::{
        admissionregistration::v1 as adm, authentication::v1 as authn, authorization::v1 as authz,
        coordination::v1 as coordination, core::v1 as core, rbac::v1 as rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as reg;
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => info.typed::<core::Namespace>(),
        ("", "ConfigMap") => info.typed::<core::ConfigMap>(),
        ("", "Secret") => info.typed::<core::Secret>(),
        ("", "ServiceAccount") => info.typed::<core::ServiceAccount>(),
        ("", "Event") => info.typed::<core::Event>(),
        (_, "Lease") => info.typed::<coordination::Lease>(),
        (_, "Role") => info.typed::<rbac::Role>(),
        (_, "ClusterRole") => info.typed::<rbac::ClusterRole>(),
        (_, "RoleBinding") => info.typed::<rbac::RoleBinding>(),
        (_, "ClusterRoleBinding") => info.typed::<rbac::ClusterRoleBinding>(),
        (_, "SelfSubjectAccessReview") => info.typed::<authz::SelfSubjectAccessReview>(),
        (_, "SubjectAccessReview") => info.typed::<authz::SubjectAccessReview>(),
        (_, "LocalSubjectAccessReview") => info.typed::<authz::LocalSubjectAccessReview>(),
        (_, "SelfSubjectRulesReview") => info.typed::<authz::SelfSubjectRulesReview>(),
        (_, "SelfSubjectReview") => info.typed::<authn::SelfSubjectReview>(),
        (_, "TokenReview") => info.typed::<authn::TokenReview>(),
        (_, "CustomResourceDefinition") => info.typed::<ext::CustomResourceDefinition>(),
        (_, "APIService") => info.typed::<reg::APIService>(),
        (_, "ValidatingWebhookConfiguration") => {
            info.typed::<adm::ValidatingWebhookConfiguration>()
        }
        (_, "MutatingWebhookConfiguration") => info.typed::<adm::MutatingWebhookConfiguration>(),
        _ => info,
    }
}

/// Every built-in resource.
pub fn resources() -> Vec<ResourceInfo> {
    let all = vec![
        ResourceInfo::new("", "v1", "namespaces", "Namespace", false)
            .short_names(&["ns"])
            .subresources(&["status", "finalize"])
            .columns(vec![
                Column::name(),
                string("Status", "The status of the namespace", ".status.phase"),
                Column::age(),
            ]),
        ResourceInfo::new("", "v1", "configmaps", "ConfigMap", true)
            .short_names(&["cm"])
            .columns(vec![
                Column::name(),
                count("Data", "Number of keys in the config map", ".data").path(".binaryData"),
                Column::age(),
            ]),
        ResourceInfo::new("", "v1", "secrets", "Secret", true).columns(vec![
            Column::name(),
            string("Type", "The type of the secret", ".type"),
            count("Data", "The number of entries in the secret", ".data"),
            Column::age(),
        ]),
        ResourceInfo::new("", "v1", "serviceaccounts", "ServiceAccount", true)
            .short_names(&["sa"])
            .subresource(Subresource {
                name: "token".into(),
                group: "authentication.k8s.io".into(),
                version: "v1".into(),
                kind: "TokenRequest".into(),
                verbs: vec!["create".into()],
            })
            .columns(vec![
                Column::name(),
                count("Secrets", "Number of secrets", ".secrets"),
                Column::age(),
            ]),
        ResourceInfo::new("", "v1", "events", "Event", true)
            .short_names(&["ev"])
            .columns(vec![
                Column::new(
                    "Last Seen",
                    "string",
                    "Time when last event occurred",
                    ".lastTimestamp",
                )
                .path(".eventTime")
                .path(".metadata.creationTimestamp")
                .render(Render::Age),
                string("Type", "Type of this event (Normal, Warning)", ".type"),
                string("Reason", "Short, machine understandable string", ".reason"),
                Column::new(
                    "Object",
                    "string",
                    "The object that this event is about",
                    ".involvedObject",
                )
                .render(Render::ObjectRef),
                string(
                    "Message",
                    "A human-readable description of the status",
                    ".message",
                ),
            ]),
        ResourceInfo::new("coordination.k8s.io", "v1", "leases", "Lease", true).columns(vec![
            Column::name(),
            string("Holder", "The holder of the lease", ".spec.holderIdentity"),
            Column::age(),
        ]),
        ResourceInfo::new(RBAC, "v1", "roles", "Role", true),
        ResourceInfo::new(RBAC, "v1", "clusterroles", "ClusterRole", false),
        ResourceInfo::new(RBAC, "v1", "rolebindings", "RoleBinding", true),
        ResourceInfo::new(
            RBAC,
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
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
        review(
            "authentication.k8s.io",
            "tokenreviews",
            "TokenReview",
            false,
        ),
        ResourceInfo::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        )
        .short_names(&["crd", "crds"])
        .subresources(&["status"])
        .columns(vec![
            Column::name(),
            Column::new(
                "Created At",
                "date",
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
                ".metadata.creationTimestamp",
            )
            .or(json!("")),
        ]),
        ResourceInfo::new(APIREGISTRATION, "v1", "apiservices", "APIService", false)
            .subresources(&["status"])
            .columns(vec![
                Column::name(),
                Column::new(
                    "Service",
                    "string",
                    "The reference to the service that hosts this API endpoint.",
                    ".spec.service",
                )
                .render(Render::ServiceRef),
                Column::new(
                    "Available",
                    "string",
                    "Whether this service is available.",
                    r#".status.conditions[?(@.type=="Available")]"#,
                )
                .render(Render::Condition)
                .or(json!("Unknown")),
                Column::age(),
            ]),
        ResourceInfo::new(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
        ),
        ResourceInfo::new(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
        ),
        ResourceInfo::new(
            admission::GROUP,
            admission::VERSION,
            admission::PLURAL,
            admission::KIND,
            false,
        )
        .short_names(&["ap"])
        .subresources(&["status"])
        .columns(vec![
            Column::name(),
            Column::new(
                "Phases",
                "string",
                "Admission phases the plugin runs in",
                ".spec.phases[*]",
            )
            .render(Render::Join),
            Column::new(
                "Mode",
                "string",
                "What a denial does: Deny, Warn or Audit",
                ".spec.mode",
            )
            .or(json!("Deny")),
            string("Status", "Whether the plugin is loaded", ".status.phase"),
            Column::new(
                "Violations",
                "integer",
                "Stored objects the plugin denies (background audit)",
                ".status.audit.violations",
            ),
            Column::age(),
        ]),
        ResourceInfo::new(
            handler::GROUP,
            handler::VERSION,
            handler::PLURAL,
            handler::KIND,
            false,
        )
        .short_names(&["rh"])
        .subresources(&["status"])
        .columns(vec![
            Column::name(),
            Column::new(
                "Resources",
                "string",
                "The custom resources the handler is bound to",
                ".spec.resources[*].resource",
            )
            .render(Render::Join),
            string("Status", "Whether the handler is loaded", ".status.phase"),
            Column::age(),
        ]),
        ResourceInfo::new(
            controller::GROUP,
            controller::VERSION,
            controller::PLURAL,
            controller::KIND,
            false,
        )
        .short_names(&["wctl"])
        .subresources(&["status"])
        .columns(vec![
            Column::name(),
            string("For", "The primary kind", ".spec.for.kind"),
            string("Status", "Whether the controller runs", ".status.phase"),
            Column::new(
                "Queue",
                "integer",
                "Keys waiting to be reconciled",
                ".status.queueDepth",
            ),
            Column::age(),
        ]),
        ResourceInfo::new(
            scheduler_plugin::GROUP,
            scheduler_plugin::VERSION,
            scheduler_plugin::PLURAL,
            scheduler_plugin::KIND,
            false,
        )
        .short_names(&["schedplugin"])
        .subresources(&["status"])
        .columns(vec![
            Column::name(),
            Column::new(
                "Scheduler",
                "string",
                "The scheduler whose cycles the plugin joins",
                ".spec.schedulerName",
            )
            .or(json!(crate::scheduler::DEFAULT_SCHEDULER)),
            Column::new(
                "Weight",
                "integer",
                "How many times its scores count",
                ".spec.weight",
            )
            .or(json!(1)),
            string("Status", "Whether the plugin is loaded", ".status.phase"),
            Column::age(),
        ]),
    ];
    let mut all: Vec<ResourceInfo> = all.into_iter().map(typed).collect();
    all.extend(crate::kinds::resources());
    all
}

impl Registry {
    /// A registry of the built-in resources.
    pub fn builtin() -> Self {
        let mut r = Registry::default();
        for info in resources() {
            r.insert(info);
        }
        r
    }
}
