//! The object semantics of pods, workloads and services that clients see,
//! as upstream's `pkg/apis/*/v1/defaults.go`, validation and registry
//! strategies give them: defaulting of every pod spec (pods and every pod
//! template), of Deployments, ReplicaSets, StatefulSets, DaemonSets,
//! ReplicationControllers, Jobs, CronJobs and Services; the checks that
//! matter (containers, selectors that must match template labels and stay
//! immutable, service ports); a created pod's `Pending` status and QoS
//! class; and the `scale` subresource of the scalable kinds. The
//! controllers that act on them live in `controllers/`.

use crate::strategy::Strategy;
use serde_json::{Map, Value, json};
use wasm_apiserver_api::error::Target;
use wasm_apiserver_api::validation::{dns1123_label_error, validate_object};
use wasm_apiserver_api::{ApiError, Cause, ResourceInfo, meta};
use wasm_apiserver_plugins::UserInfo;

/// Which kind a [`Workloads`] strategy serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pod,
    PodTemplate,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    ReplicationController,
    Job,
    CronJob,
    Service,
}

impl Kind {
    /// The kind served at `group`/`plural`, if this module handles it.
    pub fn of(group: &str, plural: &str) -> Option<Kind> {
        Some(match (group, plural) {
            ("", "pods") => Kind::Pod,
            ("", "podtemplates") => Kind::PodTemplate,
            ("", "replicationcontrollers") => Kind::ReplicationController,
            ("", "services") => Kind::Service,
            ("apps", "deployments") => Kind::Deployment,
            ("apps", "replicasets") => Kind::ReplicaSet,
            ("apps", "statefulsets") => Kind::StatefulSet,
            ("apps", "daemonsets") => Kind::DaemonSet,
            ("batch", "jobs") => Kind::Job,
            ("batch", "cronjobs") => Kind::CronJob,
            _ => return None,
        })
    }

    fn scalable(self) -> bool {
        matches!(
            self,
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet | Kind::ReplicationController
        )
    }

    /// Where the pod template is.
    fn template_path(self) -> Option<&'static [&'static str]> {
        match self {
            Kind::Pod | Kind::Service => None,
            Kind::CronJob => Some(&["spec", "jobTemplate", "spec", "template"]),
            Kind::PodTemplate => Some(&["template"]),
            _ => Some(&["spec", "template"]),
        }
    }
}

/// The strategy of one kind of this module.
pub struct Workloads(pub Kind);

fn at_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, k| v.get_mut(*k))
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// Sets `obj[key]` when it is absent or null.
fn set_default(obj: &mut Value, key: &str, value: Value) {
    if let Some(map) = obj.as_object_mut() {
        let slot = map.entry(key).or_insert(Value::Null);
        if slot.is_null() {
            *slot = value;
        }
    }
}

/// The object at `key`, created empty when absent.
fn child<'a>(obj: &'a mut Value, key: &str) -> &'a mut Value {
    set_default(obj, key, json!({}));
    &mut obj[key]
}

/// `Always` for `:latest` or untagged images, else `IfNotPresent`, as upstream.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let name = image.rsplit('/').next().unwrap_or(image);
    match name.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// Upstream's pod spec defaults (`SetDefaults_PodSpec`, `_Container`).
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let image = c["image"].as_str().unwrap_or_default().to_owned();
            set_default(c, "imagePullPolicy", json!(pull_policy(&image)));
            set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
            set_default(c, "terminationMessagePolicy", json!("File"));
            set_default(c, "resources", json!({}));
            for p in c
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                set_default(p, "protocol", json!("TCP"));
            }
        }
    }
}

/// Upstream's `SetDefaults_Pod`: a container (or init container) with a
/// limit and no request for a resource requests its limit. Pods only, not
/// pod templates.
fn default_requests_from_limits(pod: &mut Value) {
    for list in ["containers", "initContainers"] {
        for c in pod["spec"]
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(limits) = c["resources"]["limits"].as_object().cloned() else {
                continue;
            };
            if limits.is_empty() {
                continue;
            }
            let requests = child(child(c, "resources"), "requests");
            for (k, v) in limits {
                set_default(requests, &k, v);
            }
        }
    }
}

fn default_rolling(strategy: &mut Value, rolling: Value) {
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let r = child(strategy, "rollingUpdate");
        for (k, v) in rolling.as_object().into_iter().flatten() {
            set_default(r, k, v.clone());
        }
    }
}

impl Workloads {
    fn defaults(&self, obj: &mut Value) {
        if let Some(path) = self.0.template_path()
            && let Some(template) = at_mut(obj, path)
        {
            default_pod_spec(child(template, "spec"));
        }
        match self.0 {
            Kind::Pod => {
                default_pod_spec(child(obj, "spec"));
                default_requests_from_limits(obj);
            }
            Kind::Deployment => {
                let spec = child(obj, "spec");
                set_default(spec, "replicas", json!(1));
                default_rolling(
                    child(spec, "strategy"),
                    json!({"maxUnavailable": "25%", "maxSurge": "25%"}),
                );
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
            }
            Kind::ReplicaSet => set_default(child(obj, "spec"), "replicas", json!(1)),
            Kind::ReplicationController => {
                let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
                let spec = child(obj, "spec");
                set_default(spec, "replicas", json!(1));
                if labels.is_object() {
                    set_default(spec, "selector", labels.clone());
                    set_default(child(obj, "metadata"), "labels", labels);
                }
            }
            Kind::StatefulSet => {
                let spec = child(obj, "spec");
                set_default(spec, "replicas", json!(1));
                set_default(spec, "podManagementPolicy", json!("OrderedReady"));
                default_rolling(child(spec, "updateStrategy"), json!({"partition": 0}));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
            }
            Kind::DaemonSet => {
                let spec = child(obj, "spec");
                default_rolling(
                    child(spec, "updateStrategy"),
                    json!({"maxUnavailable": 1, "maxSurge": 0}),
                );
                set_default(spec, "revisionHistoryLimit", json!(10));
            }
            Kind::Job => {
                let spec = child(obj, "spec");
                if spec["completions"].is_null() && spec["parallelism"].is_null() {
                    spec["completions"] = json!(1);
                }
                set_default(spec, "parallelism", json!(1));
                set_default(spec, "backoffLimit", json!(6));
                set_default(spec, "completionMode", json!("NonIndexed"));
                set_default(spec, "suspend", json!(false));
                if spec["podFailurePolicy"].is_null() {
                    set_default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
                }
            }
            Kind::CronJob => {
                let spec = child(obj, "spec");
                set_default(spec, "concurrencyPolicy", json!("Allow"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "successfulJobsHistoryLimit", json!(3));
                set_default(spec, "failedJobsHistoryLimit", json!(1));
            }
            Kind::Service => default_service(child(obj, "spec")),
            Kind::PodTemplate => {}
        }
    }
}

/// Upstream's service defaults (`SetDefaults_Service`); the cluster IP is
/// allocated by the service strategy.
fn default_service(spec: &mut Value) {
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    let ty = spec["type"].as_str().unwrap_or_default().to_owned();
    if ty != "ExternalName" {
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer") {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    for p in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        set_default(p, "protocol", json!("TCP"));
        let port = p["port"].clone();
        set_default(p, "targetPort", port);
    }
}

fn invalid(field: &str, value: &Value, why: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        field: field.into(),
        message: format!("Invalid value: {value}: {why}"),
    }
}

/// The checks of a pod spec that users meet first (containers, names, images).
fn validate_pod_spec(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    let containers = spec["containers"].as_array();
    if containers.is_none_or(Vec::is_empty) {
        out.push(Cause::missing(&format!("{path}.containers")));
    }
    let mut names = std::collections::BTreeSet::new();
    for list in ["containers", "initContainers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let at = format!("{path}.{list}[{i}]");
            match c["name"].as_str() {
                None | Some("") => out.push(Cause::missing(&format!("{at}.name"))),
                Some(n) => {
                    if let Some(why) = dns1123_label_error(n) {
                        out.push(invalid(&format!("{at}.name"), &c["name"], &why));
                    } else if !names.insert(n.to_owned()) {
                        out.push(Cause {
                            reason: "FieldValueDuplicate".into(),
                            field: format!("{at}.name"),
                            message: format!("Duplicate value: {:?}", n),
                        });
                    }
                }
            }
            if c["image"].as_str().is_none_or(|i| i.trim().is_empty()) {
                out.push(Cause::missing(&format!("{at}.image")));
            }
            for (j, p) in c["ports"].as_array().into_iter().flatten().enumerate() {
                let port = &p["containerPort"];
                if !port.as_i64().is_some_and(|n| (1..=65535).contains(&n)) {
                    out.push(invalid(
                        &format!("{at}.ports[{j}].containerPort"),
                        port,
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
    }
    if let Some(policy) = spec["restartPolicy"].as_str()
        && !matches!(policy, "Always" | "OnFailure" | "Never")
    {
        out.push(Cause {
            reason: "FieldValueNotSupported".into(),
            field: format!("{path}.restartPolicy"),
            message: format!(
                "Unsupported value: {policy:?}: supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
        });
    }
}

/// Whether `labels` satisfy a `LabelSelector` (or a plain label map).
pub(crate) fn selects(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let map = match selector.get("matchLabels") {
        Some(m) => m,
        None if selector.get("matchExpressions").is_none() => selector,
        None => &Value::Null,
    };
    let labels_match = map
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let expressions_match = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str().unwrap_or_default() {
                "In" => label(key).is_some_and(|l| values.contains(&l)),
                "NotIn" => label(key).is_none_or(|l| !values.contains(&l)),
                "Exists" => label(key).is_some(),
                _ => label(key).is_none(),
            }
        });
    labels_match && expressions_match
}

/// Whether a selector is null or has no requirement.
pub(crate) fn selector_is_empty(selector: &Value) -> bool {
    let empty = |v: &Value| {
        v.as_object().is_none_or(Map::is_empty) && v.as_array().is_none_or(Vec::is_empty)
    };
    selector.is_null()
        || (empty(&selector["matchLabels"]) && empty(&selector["matchExpressions"]) && {
            // A plain map (ReplicationController): empty when it has no keys.
            selector.as_object().is_none_or(|m| {
                m.keys()
                    .all(|k| k == "matchLabels" || k == "matchExpressions")
            })
        })
}

impl Workloads {
    fn validate_kind(&self, obj: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
        if let Some(path) = self.0.template_path() {
            let template = at(obj, path).unwrap_or(&Value::Null);
            let dotted = path.join(".");
            validate_pod_spec(&template["spec"], &format!("{dotted}.spec"), out);
            if self.0 == Kind::Job || self.0 == Kind::CronJob {
                let policy = &template["spec"]["restartPolicy"];
                if policy == "Always" {
                    out.push(Cause {
                        reason: "FieldValueNotSupported".into(),
                        field: format!("{dotted}.spec.restartPolicy"),
                        message: "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"".into(),
                    });
                }
            }
            let has_selector = matches!(
                self.0,
                Kind::Deployment
                    | Kind::ReplicaSet
                    | Kind::StatefulSet
                    | Kind::DaemonSet
                    | Kind::ReplicationController
            );
            if has_selector {
                let selector = &obj["spec"]["selector"];
                if selector_is_empty(selector) {
                    out.push(Cause::missing("spec.selector"));
                } else if !selects(selector, &template["metadata"]["labels"]) {
                    out.push(invalid(
                        &format!("{dotted}.metadata.labels"),
                        &template["metadata"]["labels"],
                        "`selector` does not match template `labels`",
                    ));
                }
                let immutable = self.0 != Kind::ReplicationController;
                if immutable
                    && let Some(old) = old
                    && old["spec"]["selector"] != *selector
                {
                    out.push(invalid("spec.selector", selector, "field is immutable"));
                }
            }
        }
        match self.0 {
            Kind::Pod => validate_pod_spec(&obj["spec"], "spec", out),
            Kind::Service => validate_service(&obj["spec"], out),
            Kind::CronJob => {
                // `schedule` and `timeZone` as kube-apiserver checks them.
                for (field, message) in wasm_apiserver_api::batch::cronjob::validate(&obj["spec"]) {
                    let value = &obj["spec"][field.trim_start_matches("spec.")];
                    out.push(if message.is_empty() {
                        Cause::missing(field)
                    } else {
                        invalid(field, value, &message)
                    });
                }
            }
            _ => {}
        }
    }
}

fn validate_service(spec: &Value, out: &mut Vec<Cause>) {
    let ty = spec["type"].as_str().unwrap_or("ClusterIP");
    if !matches!(
        ty,
        "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName"
    ) {
        out.push(Cause {
            reason: "FieldValueNotSupported".into(),
            field: "spec.type".into(),
            message: format!("Unsupported value: {ty:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""),
        });
    }
    let ports = spec["ports"].as_array();
    let headless = spec["clusterIP"] == "None";
    if ty != "ExternalName" && !headless && ports.is_none_or(Vec::is_empty) {
        out.push(Cause::missing("spec.ports"));
    }
    for (i, p) in ports.into_iter().flatten().enumerate() {
        if !p["port"].as_i64().is_some_and(|n| (1..=65535).contains(&n)) {
            out.push(invalid(
                &format!("spec.ports[{i}].port"),
                &p["port"],
                "must be between 1 and 65535, inclusive",
            ));
        }
        if ports.is_some_and(|all| all.len() > 1) && p["name"].as_str().is_none_or(str::is_empty) {
            out.push(Cause::missing(&format!("spec.ports[{i}].name")));
        }
    }
    if ty == "ExternalName" && spec["externalName"].as_str().is_none_or(str::is_empty) {
        out.push(Cause::missing("spec.externalName"));
    }
}

impl Strategy for Workloads {
    fn default_propagation(&self, info: &ResourceInfo) -> crate::options::Propagation {
        // Upstream keeps core/v1 ReplicationControllers orphaning their
        // pods by default, for backward compatibility.
        match self.0 {
            Kind::ReplicationController if info.version == "v1" => {
                crate::options::Propagation::Orphan
            }
            _ => crate::options::Propagation::Background,
        }
    }

    /// Upstream's pod `CheckGracefulDelete`: the request's period, else
    /// `terminationGracePeriodSeconds`; 0 for a pod no node runs (not
    /// scheduled) or one that has finished; a negative period is 1 s.
    fn grace_period(&self, obj: &Value, requested: Option<i64>) -> Option<i64> {
        if self.0 != Kind::Pod {
            return None;
        }
        let mut period = requested
            .or_else(|| obj["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(0);
        if obj["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
            || matches!(
                obj["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        {
            period = 0;
        }
        Some(if period < 0 { 1 } else { period })
    }

    fn prepare_for_create(&self, obj: &mut Value, _user: &UserInfo) {
        match self.0 {
            Kind::Pod => {
                default_requests_from_limits(obj);
                let qos = wasm_apiserver_api::quota::compute_qos(obj);
                obj["status"] = json!({"phase": "Pending", "qosClass": qos});
            }
            Kind::Job if obj["spec"]["manualSelector"] != true => {
                // As upstream: the job selects its pods by its uid.
                let uid = meta::str_field(obj, "uid").unwrap_or_default().to_owned();
                let name = meta::name(obj).unwrap_or_default().to_owned();
                let spec = child(obj, "spec");
                spec["selector"] =
                    json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
                let labels = child(child(child(spec, "template"), "metadata"), "labels");
                for (k, v) in [
                    ("batch.kubernetes.io/controller-uid", &uid),
                    ("batch.kubernetes.io/job-name", &name),
                    ("controller-uid", &uid),
                    ("job-name", &name),
                ] {
                    set_default(labels, k, json!(v));
                }
            }
            _ => {}
        }
    }

    fn canonicalize(&self, obj: &mut Value) {
        self.defaults(obj);
    }

    fn validate(
        &self,
        info: &ResourceInfo,
        _namespace: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
        _user: &UserInfo,
    ) -> Result<(), ApiError> {
        validate_object(info, obj)?;
        let mut causes = Vec::new();
        self.validate_kind(obj, old, &mut causes);
        crate::strategy::invalid_if_any(info, obj, causes)
    }

    fn get_subresource(&self, sub: &str, obj: &Value) -> Option<Value> {
        if sub != "scale" || !self.0.scalable() {
            return None;
        }
        let m = &obj["metadata"];
        let mut metadata = json!({"name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"]});
        if metadata["namespace"].is_null() {
            metadata.as_object_mut().map(|m| m.remove("namespace"));
        }
        Some(json!({
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": metadata,
            "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(0)},
            "status": {
                "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0),
                "selector": wasm_apiserver_api::selector::selector_text(&obj["spec"]["selector"]),
            },
        }))
    }

    fn update_subresource(
        &self,
        sub: &str,
        current: &Value,
        body: &Value,
    ) -> Option<Result<Value, ApiError>> {
        if sub != "scale" || !self.0.scalable() {
            return None;
        }
        let mut new = current.clone();
        new["spec"]["replicas"] = body["spec"]["replicas"].clone();
        Some(Ok(new))
    }
}

/// Services: the kind's defaults and checks, plus the cluster IP and node
/// ports each gets from the [`Allocator`](crate::allocator::Allocator).
pub struct Services {
    pub allocator: crate::allocator::Allocator,
}

impl Services {
    fn base() -> Workloads {
        Workloads(Kind::Service)
    }

    fn taken_ip(obj: &Value) -> Option<&str> {
        obj["spec"]["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty() && *ip != "None")
    }

    fn node_ports(obj: &Value) -> Vec<i64> {
        obj["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["nodePort"].as_i64())
            .collect()
    }
}

fn allocation_error(
    info: &ResourceInfo,
    obj: &Value,
    field: &str,
    value: Value,
    why: String,
) -> ApiError {
    ApiError::Invalid(
        Target::new(
            &info.group,
            &info.plural,
            meta::name(obj).unwrap_or_default(),
        ),
        vec![invalid(field, &value, &why)],
    )
}

#[async_trait::async_trait]
impl Strategy for Services {
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        // An update that leaves out what was allocated keeps it, as upstream.
        let spec = child(new, "spec");
        for key in ["clusterIP", "clusterIPs"] {
            if spec[key].is_null() && !old["spec"][key].is_null() {
                spec[key] = old["spec"][key].clone();
            }
        }
        let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
        for p in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if p["nodePort"].is_null()
                && let Some(o) = old_ports
                    .iter()
                    .find(|o| o["port"] == p["port"] && o["protocol"] == p["protocol"])
                && !o["nodePort"].is_null()
            {
                p["nodePort"] = o["nodePort"].clone();
            }
        }
    }

    fn prepare_for_create(&self, obj: &mut Value, user: &UserInfo) {
        Self::base().prepare_for_create(obj, user);
        // Upstream resets a new Service's status: `{"loadBalancer": {}}`.
        obj["status"] = json!({"loadBalancer": {}});
    }

    fn canonicalize(&self, obj: &mut Value) {
        Self::base().canonicalize(obj);
        if obj.get("status").is_none_or(Value::is_null) {
            obj["status"] = json!({"loadBalancer": {}});
        }
    }

    fn validate(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
        user: &UserInfo,
    ) -> Result<(), ApiError> {
        Self::base().validate(info, namespace, obj, old, user)?;
        if let Some(old) = old
            && let Some(was) = Self::taken_ip(old)
            && obj["spec"]["clusterIP"].as_str() != Some(was)
        {
            return Err(allocation_error(
                info,
                obj,
                "spec.clusterIPs[0]",
                obj["spec"]["clusterIP"].clone(),
                "may not change once set".into(),
            ));
        }
        Ok(())
    }

    async fn allocate(&self, info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
        let ty = obj["spec"]["type"]
            .as_str()
            .unwrap_or("ClusterIP")
            .to_owned();
        if ty == "ExternalName" {
            return Ok(());
        }
        if obj["spec"]["clusterIP"] != "None" {
            let requested = Self::taken_ip(obj).map(String::from);
            let ip = match self.allocator.take_ip(requested.as_deref()).await {
                Ok(ip) => ip.to_string(),
                Err(Ok(why)) => {
                    return Err(allocation_error(
                        info,
                        obj,
                        "spec.clusterIPs",
                        json!([requested.unwrap_or_default()]),
                        why,
                    ));
                }
                Err(Err(e)) => return Err(e),
            };
            obj["spec"]["clusterIP"] = json!(ip);
            obj["spec"]["clusterIPs"] = json!([ip]);
        }
        if matches!(ty.as_str(), "NodePort" | "LoadBalancer") {
            let count = obj["spec"]["ports"].as_array().map_or(0, Vec::len);
            for i in 0..count {
                let requested = obj["spec"]["ports"][i]["nodePort"]
                    .as_i64()
                    .and_then(|p| u16::try_from(p).ok());
                match self.allocator.take_port(requested).await {
                    Ok(port) => obj["spec"]["ports"][i]["nodePort"] = json!(port),
                    Err(e) => {
                        // Give back what this create took so far.
                        obj["spec"]["ports"][i]["nodePort"] = Value::Null;
                        self.release(obj).await;
                        return Err(match e {
                            Ok(why) => allocation_error(
                                info,
                                obj,
                                &format!("spec.ports[{i}].nodePort"),
                                json!(requested),
                                why,
                            ),
                            Err(e) => e,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    async fn release(&self, obj: &Value) {
        if let Some(ip) = Self::taken_ip(obj) {
            self.allocator.free_ip(ip).await;
        }
        for port in Self::node_ports(obj) {
            self.allocator.free_port(port).await;
        }
    }
}

/// The `Status` a computed create of a pod subresource answers.
fn created() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// `pods/binding`: assigns a pod to a node (what a scheduler does), once.
pub struct PodBinding(pub crate::store::Objects);

#[async_trait::async_trait]
impl crate::strategy::Creater for PodBinding {
    async fn create(
        &self,
        req: crate::strategy::CreateRequest<'_>,
        body: Value,
    ) -> Result<Value, ApiError> {
        let name = req.name.unwrap_or_default();
        let node = body["target"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if node.is_empty() {
            return Err(ApiError::Invalid(
                Target::new("", "Binding", name),
                vec![Cause::missing("target.name")],
            ));
        }
        let pods = self.0.resources.builtin("", "v1", "pods");
        let opts = crate::options::WriteOptions::new(false, req.user.clone());
        self.0
            .guaranteed_update(&pods, req.namespace, name, None, &opts, |cur| {
                if let Some(on) = cur["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                    return Err(ApiError::Conflict(
                        Target::new("", "pods", name),
                        format!("pod {name} is already assigned to node {on:?}"),
                    ));
                }
                let mut new = cur.clone();
                new["spec"]["nodeName"] = json!(node);
                // In the same write, as upstream's binding.
                let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
                wasm_apiserver_api::scheduler::set_pod_scheduled(&mut new, "True", None, &now);
                Ok(new)
            })
            .await?;
        Ok(created())
    }
}

/// `pods/eviction` (upstream's eviction REST): deletes a pod unless the
/// one PodDisruptionBudget that selects it allows no disruption (429).
/// A pod that has finished, is pending or is already being deleted goes
/// without a budget check; two budgets selecting the pod are an error, as
/// upstream; a budget the disruption controller has not yet processed
/// (`observedGeneration` behind) refuses. An eviction that a budget allows
/// takes one of its `disruptionsAllowed` and records the pod in
/// `disruptedPods` (a compare-and-swap write of the budget's status, so
/// two evictions never spend the same disruption) before the pod is
/// deleted. A pod that is not ready may go without spending one when the
/// budget is healthy anyway (`unhealthyPodEvictionPolicy`
/// `IfHealthyBudget`, the default) or always (`AlwaysAllow`).
pub struct PodEviction(pub crate::store::Objects);

fn too_many(message: String) -> ApiError {
    ApiError::Custom {
        code: 429,
        reason: "TooManyRequests".into(),
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        causes: vec![Cause {
            reason: "DisruptionBudget".into(),
            field: String::new(),
            message,
        }],
    }
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

#[async_trait::async_trait]
impl crate::strategy::Creater for PodEviction {
    async fn create(
        &self,
        req: crate::strategy::CreateRequest<'_>,
        body: Value,
    ) -> Result<Value, ApiError> {
        let name = req.name.unwrap_or_default();
        let pods = self.0.resources.builtin("", "v1", "pods");
        let pod = self.0.get(&pods, req.namespace, name).await?;
        let mut opts = crate::options::WriteOptions::new(false, req.user.clone());
        opts.dry_run = body["deleteOptions"]["dryRun"]
            .as_array()
            .is_some_and(|d| d.iter().any(|v| v == "All"));
        let pre = crate::options::Preconditions {
            uid: body["deleteOptions"]["preconditions"]["uid"]
                .as_str()
                .map(String::from),
            grace_period_seconds: body["deleteOptions"]["gracePeriodSeconds"].as_i64(),
            ..Default::default()
        };
        let ignore_budgets = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed" | "Pending")
        ) || pod["metadata"]["deletionTimestamp"].is_string();
        if !ignore_budgets {
            self.spend_disruption(&req, &pod, name, opts.dry_run)
                .await?;
        }
        self.0
            .delete(&pods, req.namespace, name, &pre, &opts)
            .await?;
        Ok(created())
    }
}

impl PodEviction {
    async fn spend_disruption(
        &self,
        req: &crate::strategy::CreateRequest<'_>,
        pod: &Value,
        name: &str,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let budgets = self
            .0
            .resources
            .builtin("policy", "v1", "poddisruptionbudgets");
        let listed = self
            .0
            .list(&budgets, req.namespace, &Default::default())
            .await?;
        let matching: Vec<&Value> = listed
            .items
            .iter()
            .filter(|pdb| {
                let selector = &pdb["spec"]["selector"];
                !selector_is_empty(selector) && selects(selector, &pod["metadata"]["labels"])
            })
            .collect();
        let pdb = match matching.as_slice() {
            [] => return Ok(()),
            [one] => *one,
            _ => {
                return Err(ApiError::Internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                        .into(),
                ));
            }
        };
        let pdb_name = meta::name(pdb).unwrap_or_default().to_string();
        if !pod_ready(pod) {
            let status = &pdb["status"];
            let healthy = status["currentHealthy"].as_i64().unwrap_or(0);
            let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
            let always = pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow";
            if always || (healthy >= desired && desired > 0) {
                return Ok(());
            }
        }
        if dry_run {
            return check_budget(pdb, &pdb_name).map(|_| ());
        }
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        self.0
            .guaranteed_update(
                &budgets,
                req.namespace,
                &pdb_name,
                Some("status"),
                &crate::options::WriteOptions::new(false, crate::options::system_user("eviction")),
                |cur| {
                    let allowed = check_budget(cur, &pdb_name)?;
                    let mut new = cur.clone();
                    new["status"]["disruptionsAllowed"] = json!(allowed - 1);
                    if !new["status"]["disruptedPods"].is_object() {
                        new["status"]["disruptedPods"] = json!({});
                    }
                    new["status"]["disruptedPods"][name] = json!(now);
                    Ok(new)
                },
            )
            .await?;
        Ok(())
    }
}

/// The disruptions `pdb` allows now (at least one), or why none.
fn check_budget(pdb: &Value, pdb_name: &str) -> Result<i64, ApiError> {
    let status = &pdb["status"];
    if status["observedGeneration"].as_i64().unwrap_or(0)
        < pdb["metadata"]["generation"].as_i64().unwrap_or(0)
    {
        return Err(too_many(format!(
            "The disruption budget {pdb_name} is still being processed by the server."
        )));
    }
    let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
    if allowed < 0 {
        return Err(ApiError::Forbidden(
            Target::new("policy", "poddisruptionbudgets", pdb_name),
            "pdb disruptions allowed is negative".into(),
        ));
    }
    if status["disruptedPods"]
        .as_object()
        .is_some_and(|m| m.len() > 2000)
    {
        return Err(ApiError::Forbidden(
            Target::new("policy", "poddisruptionbudgets", pdb_name),
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller".into(),
        ));
    }
    if allowed == 0 {
        return Err(too_many(format!(
            "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
            status["desiredHealthy"].as_i64().unwrap_or(0),
            status["currentHealthy"].as_i64().unwrap_or(0)
        )));
    }
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_upstreams_grace_period() {
        let pods = Workloads(Kind::Pod);
        let bound = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30}, "status": {"phase": "Running"}});
        assert_eq!(pods.grace_period(&bound, None), Some(30));
        assert_eq!(pods.grace_period(&bound, Some(5)), Some(5));
        assert_eq!(pods.grace_period(&bound, Some(0)), Some(0));
        assert_eq!(pods.grace_period(&bound, Some(-3)), Some(1));
        let mut unscheduled = bound.clone();
        unscheduled["spec"]["nodeName"] = json!("");
        assert_eq!(pods.grace_period(&unscheduled, Some(30)), Some(0));
        for phase in ["Succeeded", "Failed"] {
            let mut done = bound.clone();
            done["status"]["phase"] = json!(phase);
            assert_eq!(pods.grace_period(&done, None), Some(0), "{phase}");
        }
        let no_default = json!({"spec": {"nodeName": "n1"}});
        assert_eq!(pods.grace_period(&no_default, None), Some(0));
        assert_eq!(
            Workloads(Kind::Deployment).grace_period(&bound, Some(30)),
            None
        );
    }

    #[test]
    fn pod_specs_are_defaulted_as_upstream() {
        let mut spec = json!({"containers": [
            {"name": "a", "image": "nginx"},
            {"name": "b", "image": "nginx:1.27", "ports": [{"containerPort": 80}]},
            {"name": "c", "image": "registry:5000/app:latest"},
            {"name": "d", "image": "app@sha256:abc"},
        ]});
        default_pod_spec(&mut spec);
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["securityContext"], json!({}));
        let policies: Vec<&str> = (0..4)
            .map(|i| spec["containers"][i]["imagePullPolicy"].as_str().unwrap())
            .collect();
        assert_eq!(
            policies,
            ["Always", "IfNotPresent", "Always", "IfNotPresent"]
        );
        assert_eq!(spec["containers"][1]["ports"][0]["protocol"], "TCP");
        assert_eq!(
            spec["containers"][0]["terminationMessagePath"],
            "/dev/termination-log"
        );
    }

    #[test]
    fn selectors_must_match_template_labels() {
        let w = Workloads(Kind::Deployment);
        let mut d = json!({"spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let mut out = Vec::new();
        w.validate_kind(&d, None, &mut out);
        assert!(out.is_empty(), "{out:?}");
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("db");
        w.validate_kind(&d, None, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field, "spec.template.metadata.labels");
        let changed = json!({"spec": {"selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let mut out = Vec::new();
        w.validate_kind(&changed, Some(&d), &mut out);
        assert_eq!(out[0].field, "spec.selector");
        assert!(out[0].message.contains("field is immutable"), "{out:?}");
    }
}
