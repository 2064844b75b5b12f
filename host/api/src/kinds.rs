//! The rest of the built-in Kubernetes API that kube-apiserver 1.33 stores:
//! workloads, services, storage, policy and the other groups, described
//! from k8s-openapi's types (group, version, kind, plural and scope come
//! from each type's `k8s_openapi::Resource` constants, so they cannot drift
//! from upstream), plus what the types do not carry: short names,
//! categories, subresources and `kubectl get` columns as upstream's
//! printers show them.

use crate::resource::{Column, Render, ResourceInfo, Subresource};
use k8s_openapi::api::{
    admissionregistration, apps, autoscaling, batch, certificates, core, discovery, events,
    flowcontrol, networking, node, policy, scheduling, storage,
};
use k8s_openapi::{NamespaceResourceScope, Resource};
use serde_json::json;
use std::any::TypeId;

/// The description of `T` as k8s-openapi knows it.
fn info<T: Resource + k8s_openapi::schemars::JsonSchema>() -> ResourceInfo
where
    T::Scope: 'static,
{
    let namespaced = TypeId::of::<T::Scope>() == TypeId::of::<NamespaceResourceScope>();
    ResourceInfo::new(
        T::GROUP,
        T::VERSION,
        T::URL_PATH_SEGMENT,
        T::KIND,
        namespaced,
    )
    .typed::<T>()
}

/// The `scale` subresource (`autoscaling/v1` `Scale`).
pub fn scale() -> Subresource {
    Subresource {
        name: "scale".into(),
        group: "autoscaling".into(),
        version: "v1".into(),
        kind: "Scale".into(),
        verbs: ["get", "patch", "update"].map(String::from).to_vec(),
    }
}

/// A pod subresource served by the kubelet upstream (`log`, `exec`...).
fn connect(name: &str, kind: &str, verbs: &[&str]) -> Subresource {
    Subresource {
        name: name.into(),
        group: String::new(),
        version: "v1".into(),
        kind: kind.into(),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
    }
}

fn string(name: &str, description: &str, json_path: &str) -> Column {
    Column::new(name, "string", description, json_path).or(json!("<none>"))
}

fn int(name: &str, description: &str, json_path: &str) -> Column {
    Column::new(name, "integer", description, json_path).or(json!(0))
}

fn wide(mut c: Column) -> Column {
    c.priority = 1;
    c
}

fn ratio(name: &str, description: &str, have: &str, want: &str) -> Column {
    Column::new(name, "string", description, have)
        .path(want)
        .render(Render::Ratio)
}

/// The columns of a workload with replicas (`READY`, `UP-TO-DATE`, `AVAILABLE`).
fn replica_columns(up_to_date: bool) -> Vec<Column> {
    let mut c = vec![
        Column::name(),
        ratio(
            "Ready",
            "Number of the pod with ready state",
            ".status.readyReplicas",
            ".spec.replicas",
        ),
    ];
    if up_to_date {
        c.push(int(
            "Up-to-date",
            "Total number of non-terminated pods targeted by this deployment that have the desired template spec",
            ".status.updatedReplicas",
        ));
        c.push(int(
            "Available",
            "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment",
            ".status.availableReplicas",
        ));
    }
    c.push(Column::age());
    c.extend(template_columns());
    c
}

/// `-o wide`'s `CONTAINERS`, `IMAGES` and `SELECTOR` of a workload.
fn template_columns() -> Vec<Column> {
    vec![
        wide(
            Column::new(
                "Containers",
                "string",
                "Names of each container in the template",
                ".spec.template.spec.containers[*].name",
            )
            .render(Render::Join),
        ),
        wide(
            Column::new(
                "Images",
                "string",
                "Images referenced by each container in the template",
                ".spec.template.spec.containers[*].image",
            )
            .render(Render::Join),
        ),
        wide(
            Column::new(
                "Selector",
                "string",
                "Label selector for pods",
                ".spec.selector",
            )
            .render(Render::Selector),
        ),
    ]
}

/// Every resource of this module, in the order discovery lists them.
pub fn resources() -> Vec<ResourceInfo> {
    vec![
        info::<core::v1::Pod>()
            .short_names(&["po"])
            .categories(&["all"])
            .subresources(&["status"])
            .subresource(Subresource {
                verbs: vec!["create".into()],
                ..connect("binding", "Binding", &[])
            })
            .subresource(Subresource {
                group: "policy".into(),
                verbs: vec!["create".into()],
                ..connect("eviction", "Eviction", &[])
            })
            .subresource(connect("log", "Pod", &["get"]))
            .subresource(connect("exec", "PodExecOptions", &["create", "get"]))
            .subresource(connect("attach", "PodAttachOptions", &["create", "get"]))
            .subresource(connect(
                "portforward",
                "PodPortForwardOptions",
                &["create", "get"],
            ))
            .subresource(connect(
                "proxy",
                "PodProxyOptions",
                &["create", "delete", "get", "patch", "update"],
            ))
            .columns(vec![
                Column::name(),
                Column::new(
                    "Ready",
                    "string",
                    "The aggregate readiness state of this pod for accepting traffic.",
                    ".status.containerStatuses",
                )
                .path(".spec.containers")
                .render(Render::PodReady),
                Column::new(
                    "Status",
                    "string",
                    "The aggregate status of the containers in this pod.",
                    ".status",
                )
                .render(Render::PodStatus),
                Column::new(
                    "Restarts",
                    "string",
                    "The number of times the containers in this pod have been restarted.",
                    ".status.containerStatuses[*].restartCount",
                )
                .render(Render::Sum),
                Column::age(),
                wide(string(
                    "IP",
                    "The IP address assigned to this pod.",
                    ".status.podIP",
                )),
                wide(string(
                    "Node",
                    "The node the pod is assigned to.",
                    ".spec.nodeName",
                )),
                wide(string(
                    "Nominated Node",
                    "The node the pod is nominated to.",
                    ".status.nominatedNodeName",
                )),
                wide(string(
                    "Readiness Gates",
                    "The readiness gates of the pod.",
                    ".spec.readinessGates[*].conditionType",
                )),
            ]),
        info::<core::v1::Service>()
            .short_names(&["svc"])
            .categories(&["all"])
            .subresources(&["status"])
            .subresource(connect(
                "proxy",
                "ServiceProxyOptions",
                &["create", "delete", "get", "patch", "update"],
            ))
            .columns(vec![
                Column::name(),
                string("Type", "The type of the service.", ".spec.type"),
                string(
                    "Cluster-IP",
                    "The cluster IP of the service.",
                    ".spec.clusterIP",
                ),
                Column::new(
                    "External-IP",
                    "string",
                    "The external IPs of the service.",
                    ".status.loadBalancer.ingress[*].ip",
                )
                .path(".status.loadBalancer.ingress[*].hostname")
                .path(".spec.externalIPs[*]")
                .render(Render::Join)
                .or(json!("<none>")),
                Column::new(
                    "Port(s)",
                    "string",
                    "The ports of the service.",
                    ".spec.ports",
                )
                .render(Render::ServicePorts),
                Column::age(),
                wide(
                    Column::new(
                        "Selector",
                        "string",
                        "The selector of the service.",
                        ".spec.selector",
                    )
                    .render(Render::Selector),
                ),
            ]),
        info::<core::v1::Endpoints>().short_names(&["ep"]),
        info::<core::v1::PersistentVolume>()
            .short_names(&["pv"])
            .subresources(&["status"])
            .columns(vec![
                Column::name(),
                string(
                    "Capacity",
                    "The capacity of the volume.",
                    ".spec.capacity.storage",
                ),
                Column::new(
                    "Access Modes",
                    "string",
                    "The access modes of the volume.",
                    ".spec.accessModes[*]",
                )
                .render(Render::Join),
                string(
                    "Reclaim Policy",
                    "The reclaim policy of the volume.",
                    ".spec.persistentVolumeReclaimPolicy",
                ),
                string("Status", "The phase of the volume.", ".status.phase"),
                Column::new(
                    "Claim",
                    "string",
                    "The claim bound to the volume.",
                    ".spec.claimRef",
                )
                .render(Render::ServiceRef)
                .or(json!("")),
                string(
                    "StorageClass",
                    "The storage class of the volume.",
                    ".spec.storageClassName",
                ),
                Column::age(),
            ]),
        info::<core::v1::PersistentVolumeClaim>()
            .short_names(&["pvc"])
            .subresources(&["status"])
            .columns(vec![
                Column::name(),
                string("Status", "The phase of the claim.", ".status.phase"),
                string("Volume", "The bound volume.", ".spec.volumeName"),
                string(
                    "Capacity",
                    "The capacity of the claim.",
                    ".status.capacity.storage",
                ),
                Column::new(
                    "Access Modes",
                    "string",
                    "The access modes of the claim.",
                    ".status.accessModes[*]",
                )
                .render(Render::Join),
                string(
                    "StorageClass",
                    "The storage class of the claim.",
                    ".spec.storageClassName",
                ),
                Column::age(),
            ]),
        info::<core::v1::ReplicationController>()
            .short_names(&["rc"])
            .categories(&["all"])
            .subresources(&["status"])
            .subresource(scale())
            .columns(replica_columns(false)),
        info::<core::v1::PodTemplate>(),
        info::<core::v1::ResourceQuota>()
            .short_names(&["quota"])
            .subresources(&["status"]),
        info::<core::v1::LimitRange>().short_names(&["limits"]),
        // Computed on every read from the components in this process and
        // the store (served by the registry's `Reader`); get and list only.
        {
            let mut info = info::<core::v1::ComponentStatus>()
                .short_names(&["cs"])
                .verbs(&["get", "list"])
                .columns(vec![
                    Column::name(),
                    Column::new(
                        "Status",
                        "string",
                        "The health of the component.",
                        ".conditions[?(@.type==\"Healthy\")]",
                    )
                    .render(Render::ComponentHealth),
                    Column::new(
                        "Message",
                        "string",
                        "What the health check said.",
                        ".conditions[?(@.type==\"Healthy\")].message",
                    )
                    .or(json!("")),
                    Column::new(
                        "Error",
                        "string",
                        "Why the health check failed.",
                        ".conditions[?(@.type==\"Healthy\")].error",
                    )
                    .or(json!("")),
                ]);
            info.deprecation_warning = Some("v1 ComponentStatus is deprecated in v1.19+".into());
            info
        },
        info::<core::v1::Node>()
            .short_names(&["no"])
            .subresources(&["status"])
            .subresource(connect(
                "proxy",
                "NodeProxyOptions",
                &["create", "delete", "get", "patch", "update"],
            ))
            .columns(vec![
                Column::name(),
                Column::new(
                    "Status",
                    "string",
                    "The readiness of the node.",
                    ".status.conditions[?(@.type==\"Ready\")]",
                )
                .render(Render::NodeReady),
                Column::age(),
                string(
                    "Version",
                    "The kubelet version of the node.",
                    ".status.nodeInfo.kubeletVersion",
                ),
            ]),
        info::<apps::v1::Deployment>()
            .short_names(&["deploy"])
            .categories(&["all"])
            .subresources(&["status"])
            .subresource(scale())
            .columns(replica_columns(true)),
        info::<apps::v1::ReplicaSet>()
            .short_names(&["rs"])
            .categories(&["all"])
            .subresources(&["status"])
            .subresource(scale())
            .columns({
                let mut c = vec![
                    Column::name(),
                    int("Desired", "Number of desired pods", ".spec.replicas"),
                    int("Current", "Number of current pods", ".status.replicas"),
                    int("Ready", "Number of ready pods", ".status.readyReplicas"),
                    Column::age(),
                ];
                c.extend(template_columns());
                c
            }),
        info::<apps::v1::StatefulSet>()
            .short_names(&["sts"])
            .categories(&["all"])
            .subresources(&["status"])
            .subresource(scale())
            .columns(replica_columns(false)),
        info::<apps::v1::DaemonSet>()
            .short_names(&["ds"])
            .categories(&["all"])
            .subresources(&["status"])
            .columns({
                let mut c = vec![
                    Column::name(),
                    int(
                        "Desired",
                        "The number of nodes that should be running the daemon pod.",
                        ".status.desiredNumberScheduled",
                    ),
                    int(
                        "Current",
                        "The number of nodes running at least one daemon pod.",
                        ".status.currentNumberScheduled",
                    ),
                    int(
                        "Ready",
                        "The number of nodes with the daemon pod ready.",
                        ".status.numberReady",
                    ),
                    int(
                        "Up-to-date",
                        "The number of nodes running the updated daemon pod.",
                        ".status.updatedNumberScheduled",
                    ),
                    int(
                        "Available",
                        "The number of nodes with the daemon pod available.",
                        ".status.numberAvailable",
                    ),
                    Column::new(
                        "Node Selector",
                        "string",
                        "The node selector of the daemon pods.",
                        ".spec.template.spec.nodeSelector",
                    )
                    .render(Render::Selector),
                    Column::age(),
                ];
                c.extend(template_columns());
                c
            }),
        info::<apps::v1::ControllerRevision>(),
        info::<batch::v1::Job>()
            .categories(&["all"])
            .subresources(&["status"])
            .columns({
                let mut c = vec![
                    Column::name(),
                    Column::new(
                        "Status",
                        "string",
                        "Status of the job.",
                        ".status.conditions",
                    )
                    .render(Render::JobStatus),
                    ratio(
                        "Completions",
                        "The completed and desired completions of the job.",
                        ".status.succeeded",
                        ".spec.completions",
                    ),
                    Column::age(),
                ];
                c.extend(template_columns());
                c
            }),
        info::<batch::v1::CronJob>()
            .short_names(&["cj"])
            .categories(&["all"])
            .subresources(&["status"])
            .columns(vec![
                Column::name(),
                string("Schedule", "The schedule of the job.", ".spec.schedule"),
                string(
                    "Timezone",
                    "The time zone of the schedule.",
                    ".spec.timeZone",
                ),
                Column::new(
                    "Suspend",
                    "boolean",
                    "Whether the job is suspended.",
                    ".spec.suspend",
                )
                .or(json!(false)),
                Column::new(
                    "Active",
                    "integer",
                    "The number of active jobs.",
                    ".status.active",
                )
                .render(Render::Count),
                Column::new(
                    "Last Schedule",
                    "string",
                    "When the job was last scheduled.",
                    ".status.lastScheduleTime",
                )
                .render(Render::Age)
                .or(json!("<none>")),
                Column::age(),
            ]),
        info::<autoscaling::v2::HorizontalPodAutoscaler>()
            .short_names(&["hpa"])
            .categories(&["all"])
            .subresources(&["status"])
            .columns(hpa_columns()),
        info::<autoscaling::v1::HorizontalPodAutoscaler>()
            .short_names(&["hpa"])
            .categories(&["all"])
            .subresources(&["status"])
            .columns(hpa_columns()),
        info::<networking::v1::Ingress>()
            .short_names(&["ing"])
            .subresources(&["status"])
            .columns(vec![
                Column::name(),
                string(
                    "Class",
                    "The ingress class of the ingress.",
                    ".spec.ingressClassName",
                ),
                Column::new(
                    "Hosts",
                    "string",
                    "The hosts the ingress serves.",
                    ".spec.rules[*].host",
                )
                .render(Render::Join)
                .or(json!("*")),
                Column::new(
                    "Address",
                    "string",
                    "The addresses of the ingress.",
                    ".status.loadBalancer.ingress[*].ip",
                )
                .path(".status.loadBalancer.ingress[*].hostname")
                .render(Render::Join)
                .or(json!("")),
                Column::new(
                    "Ports",
                    "string",
                    "The ports the ingress serves.",
                    ".spec.tls",
                )
                .render(Render::IngressPorts),
                Column::age(),
            ]),
        info::<networking::v1::IngressClass>(),
        info::<networking::v1::NetworkPolicy>().short_names(&["netpol"]),
        info::<networking::v1::IPAddress>(),
        info::<networking::v1::ServiceCIDR>().subresources(&["status"]),
        info::<policy::v1::PodDisruptionBudget>()
            .short_names(&["pdb"])
            .subresources(&["status"])
            .columns(vec![
                Column::name(),
                string(
                    "Min Available",
                    "The minimum number of pods that must be available.",
                    ".spec.minAvailable",
                )
                .or(json!("N/A")),
                string(
                    "Max Unavailable",
                    "The maximum number of pods that may be unavailable.",
                    ".spec.maxUnavailable",
                )
                .or(json!("N/A")),
                int(
                    "Allowed Disruptions",
                    "The number of disruptions currently allowed.",
                    ".status.disruptionsAllowed",
                ),
                Column::age(),
            ]),
        info::<storage::v1::StorageClass>().short_names(&["sc"]),
        info::<storage::v1::VolumeAttachment>().subresources(&["status"]),
        info::<storage::v1::CSIDriver>(),
        info::<storage::v1::CSINode>(),
        info::<storage::v1::CSIStorageCapacity>(),
        info::<scheduling::v1::PriorityClass>().short_names(&["pc"]),
        info::<discovery::v1::EndpointSlice>(),
        info::<node::v1::RuntimeClass>(),
        info::<certificates::v1::CertificateSigningRequest>()
            .short_names(&["csr"])
            .subresources(&["status", "approval"])
            .columns(vec![
                Column::name(),
                Column::age(),
                string(
                    "SignerName",
                    "The signer the request is for.",
                    ".spec.signerName",
                ),
                string("Requestor", "Who made the request.", ".spec.username"),
                Column::new(
                    "RequestedDuration",
                    "string",
                    "The certificate lifetime asked for.",
                    ".spec.expirationSeconds",
                )
                .render(Render::Seconds),
                Column::new(
                    "Condition",
                    "string",
                    "Pending, Approved or Denied, and whether a certificate was issued.",
                    ".status",
                )
                .render(Render::CsrCondition),
            ]),
        info::<events::v1::Event>().short_names(&["ev"]),
        info::<admissionregistration::v1::ValidatingAdmissionPolicy>()
            .subresources(&["status"])
            .columns(policy_columns("Validations", ".spec.validations")),
        info::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>()
            .columns(binding_columns()),
        info::<admissionregistration::v1beta1::MutatingAdmissionPolicy>()
            .columns(policy_columns("Mutations", ".spec.mutations")),
        info::<admissionregistration::v1beta1::MutatingAdmissionPolicyBinding>()
            .columns(binding_columns()),
        info::<flowcontrol::v1::FlowSchema>().subresources(&["status"]),
        info::<flowcontrol::v1::PriorityLevelConfiguration>().subresources(&["status"]),
    ]
}

/// An admission policy's columns: its count of checks (or mutations) and
/// its params' kind, as upstream prints them.
fn policy_columns(name: &str, path: &str) -> Vec<Column> {
    vec![
        Column::name(),
        Column::new(name, "integer", "The number of expressions.", path).render(Render::Count),
        Column::new(
            "ParamKind",
            "string",
            "The kind of the policy's params.",
            ".spec.paramKind",
        )
        .render(Render::Param),
        Column::age(),
    ]
}

/// An admission policy binding's columns.
fn binding_columns() -> Vec<Column> {
    vec![
        Column::name(),
        Column::new(
            "PolicyName",
            "string",
            "The policy the binding binds.",
            ".spec.policyName",
        ),
        Column::new(
            "ParamRef",
            "string",
            "The params the binding selects.",
            ".spec.paramRef",
        )
        .render(Render::Param),
        Column::age(),
    ]
}

fn hpa_columns() -> Vec<Column> {
    vec![
        Column::name(),
        Column::new(
            "Reference",
            "string",
            "The scale target of the autoscaler.",
            ".spec.scaleTargetRef",
        )
        .render(Render::ObjectRef),
        int(
            "MinPods",
            "The lower limit of replicas.",
            ".spec.minReplicas",
        ),
        int(
            "MaxPods",
            "The upper limit of replicas.",
            ".spec.maxReplicas",
        ),
        int(
            "Replicas",
            "The current number of replicas.",
            ".status.currentReplicas",
        ),
        Column::age(),
    ]
}
