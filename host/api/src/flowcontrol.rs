//! API Priority and Fairness, without IO: upstream's bootstrap
//! FlowSchemas and PriorityLevelConfigurations (`flowcontrol.apiserver.k8s.io/v1`,
//! `staging/src/k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go`),
//! the classification of a request to a FlowSchema, its priority level and
//! its flow, and each level's share of the server's concurrency.

use serde_json::{Value, json};

/// What classification looks at.
pub struct Request<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub verb: &'a str,
    pub is_resource: bool,
    pub api_group: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub path: &'a str,
}

/// A parsed FlowSchema, its rules compiled once (a request's
/// classification allocates nothing and reads no JSON).
#[derive(Debug, Clone)]
pub struct FlowSchema {
    pub name: String,
    pub uid: String,
    pub precedence: i64,
    pub level: String,
    /// `ByUser`, `ByNamespace`, or none (one flow).
    pub distinguisher: Option<String>,
    rules: Vec<Rule>,
}

/// One of a schema's `rules`: who, and which requests of theirs.
#[derive(Debug, Clone)]
struct Rule {
    subjects: Vec<Subject>,
    resource_rules: Vec<ResourceRule>,
    non_resource_rules: Vec<NonResourceRule>,
}

/// A subject; `*` in a name matches any.
#[derive(Debug, Clone)]
enum Subject {
    User(String),
    Group(String),
    ServiceAccount {
        namespace: String,
        name: String,
    },
    /// A kind this server does not know: matches nothing.
    Unknown,
}

#[derive(Debug, Clone)]
struct ResourceRule {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    /// `resource` or `resource/subresource`.
    resources: Vec<String>,
    cluster_scope: bool,
    namespaces: Vec<String>,
}

#[derive(Debug, Clone)]
struct NonResourceRule {
    verbs: Vec<String>,
    urls: Vec<String>,
}

/// How a limited level answers when its queues are full.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitResponse {
    Reject,
    Queue {
        queues: usize,
        hand_size: usize,
        queue_length_limit: usize,
    },
}

/// A parsed PriorityLevelConfiguration.
#[derive(Debug, Clone)]
pub struct PriorityLevel {
    pub name: String,
    pub uid: String,
    /// `None`: exempt.
    pub limited: Option<Limited>,
}

#[derive(Debug, Clone)]
pub struct Limited {
    pub shares: u64,
    pub response: LimitResponse,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn any_or(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

fn str_or_empty(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

impl Rule {
    fn parse(rule: &Value) -> Rule {
        let list = |key: &str| rule[key].as_array().map(Vec::as_slice).unwrap_or_default();
        Rule {
            subjects: list("subjects")
                .iter()
                .map(|s| match s["kind"].as_str() {
                    Some("User") => Subject::User(str_or_empty(&s["user"]["name"])),
                    Some("Group") => Subject::Group(str_or_empty(&s["group"]["name"])),
                    Some("ServiceAccount") => Subject::ServiceAccount {
                        namespace: str_or_empty(&s["serviceAccount"]["namespace"]),
                        name: str_or_empty(&s["serviceAccount"]["name"]),
                    },
                    _ => Subject::Unknown,
                })
                .collect(),
            resource_rules: list("resourceRules")
                .iter()
                .map(|rr| ResourceRule {
                    verbs: strings(&rr["verbs"]),
                    api_groups: strings(&rr["apiGroups"]),
                    resources: strings(&rr["resources"]),
                    cluster_scope: rr["clusterScope"].as_bool().unwrap_or(false),
                    namespaces: strings(&rr["namespaces"]),
                })
                .collect(),
            non_resource_rules: list("nonResourceRules")
                .iter()
                .map(|nr| NonResourceRule {
                    verbs: strings(&nr["verbs"]),
                    urls: strings(&nr["nonResourceURLs"]),
                })
                .collect(),
        }
    }
}

impl FlowSchema {
    pub fn parse(obj: &Value) -> Option<FlowSchema> {
        let spec = &obj["spec"];
        Some(FlowSchema {
            name: obj["metadata"]["name"].as_str()?.to_string(),
            uid: obj["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            precedence: spec["matchingPrecedence"].as_i64().unwrap_or(1000),
            level: spec["priorityLevelConfiguration"]["name"]
                .as_str()?
                .to_string(),
            distinguisher: spec["distinguisherMethod"]["type"]
                .as_str()
                .map(String::from),
            rules: spec["rules"]
                .as_array()
                .map(|rules| rules.iter().map(Rule::parse).collect())
                .unwrap_or_default(),
        })
    }

    /// Whether one of the schema's rules matches the request.
    pub fn matches(&self, r: &Request<'_>) -> bool {
        self.rules.iter().any(|rule| {
            rule.subjects.iter().any(|s| subject_matches(s, r))
                && if r.is_resource {
                    rule.resource_rules
                        .iter()
                        .any(|rr| resource_rule_matches(rr, r))
                } else {
                    rule.non_resource_rules
                        .iter()
                        .any(|nr| non_resource_matches(nr, r))
                }
        })
    }

    /// The part of the request that tells its flow apart within the
    /// schema: the user (`ByUser`), the namespace (`ByNamespace`), or
    /// nothing (one flow).
    pub fn distinguisher_of<'r>(&self, r: &Request<'r>) -> Option<&'r str> {
        match self.distinguisher.as_deref() {
            Some("ByUser") => Some(r.user),
            Some("ByNamespace") => Some(r.namespace.unwrap_or_default()),
            _ => None,
        }
    }

    /// The flow of the request within the schema, as upstream names it.
    pub fn flow(&self, r: &Request<'_>) -> String {
        match self.distinguisher_of(r) {
            Some(d) => format!("{}/{d}", self.name),
            None => self.name.clone(),
        }
    }
}

fn subject_matches(s: &Subject, r: &Request<'_>) -> bool {
    match s {
        Subject::User(name) => name == "*" || name == r.user,
        Subject::Group(name) => name == "*" || r.groups.iter().any(|g| g == name),
        Subject::ServiceAccount { namespace, name } => {
            let Some(rest) = r.user.strip_prefix("system:serviceaccount:") else {
                return false;
            };
            let Some((ns, sa)) = rest.split_once(':') else {
                return false;
            };
            (namespace == "*" || namespace == ns) && (name == "*" || name == sa)
        }
        Subject::Unknown => false,
    }
}

/// `want` (an entry of `resources`) against the request's resource and
/// subresource, without building `resource/subresource`.
fn resource_matches(want: &str, r: &Request<'_>) -> bool {
    if want == "*" {
        return true;
    }
    match r.subresource {
        None => want == r.resource,
        Some(sub) => {
            want.strip_prefix(r.resource)
                .and_then(|rest| rest.strip_prefix('/'))
                == Some(sub)
        }
    }
}

fn resource_rule_matches(rr: &ResourceRule, r: &Request<'_>) -> bool {
    let scope = match r.namespace {
        None => rr.cluster_scope,
        Some(ns) => any_or(&rr.namespaces, ns),
    };
    any_or(&rr.verbs, r.verb)
        && any_or(&rr.api_groups, r.api_group)
        && rr.resources.iter().any(|want| resource_matches(want, r))
        && scope
}

fn non_resource_matches(nr: &NonResourceRule, r: &Request<'_>) -> bool {
    any_or(&nr.verbs, r.verb)
        && nr.urls.iter().any(|u| {
            u == "*" || u == r.path || u.strip_suffix('*').is_some_and(|p| r.path.starts_with(p))
        })
}

impl PriorityLevel {
    pub fn parse(obj: &Value) -> Option<PriorityLevel> {
        let spec = &obj["spec"];
        let limited = match spec["type"].as_str()? {
            "Exempt" => None,
            _ => {
                let l = &spec["limited"];
                let response = match l["limitResponse"]["type"].as_str() {
                    Some("Queue") => {
                        let q = &l["limitResponse"]["queuing"];
                        LimitResponse::Queue {
                            queues: q["queues"].as_u64().unwrap_or(64).max(1) as usize,
                            hand_size: q["handSize"].as_u64().unwrap_or(8).max(1) as usize,
                            queue_length_limit: q["queueLengthLimit"].as_u64().unwrap_or(50)
                                as usize,
                        }
                    }
                    _ => LimitResponse::Reject,
                };
                Some(Limited {
                    shares: l["nominalConcurrencyShares"].as_u64().unwrap_or(30),
                    response,
                })
            }
        };
        Some(PriorityLevel {
            name: obj["metadata"]["name"].as_str()?.to_string(),
            uid: obj["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            limited,
        })
    }
}

/// The schema a request falls in: the matching one of lowest
/// `matchingPrecedence` (then name), as upstream orders them.
pub fn classify<'s>(schemas: &'s [FlowSchema], r: &Request<'_>) -> Option<&'s FlowSchema> {
    schemas.iter().find(|s| s.matches(r))
}

/// Orders schemas for [`classify`].
pub fn sort(schemas: &mut [FlowSchema]) {
    schemas.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
}

/// Each limited level's nominal seats: `ceil(total × shares / Σ shares)`
/// (upstream's `NominalConcurrencyLimit`), at least one.
pub fn nominal_seats(total: usize, shares: u64, sum: u64) -> usize {
    if sum == 0 {
        return total.max(1);
    }
    ((total as u64 * shares).div_ceil(sum)).max(1) as usize
}

const GROUP: &str = "flowcontrol.apiserver.k8s.io/v1";

fn level(name: &str, shares: u64, queue: Option<(u64, u64, u64)>, lendable: u64) -> Value {
    let limit_response = match queue {
        Some((queues, hand, len)) => json!({"type": "Queue", "queuing": {
            "queues": queues, "handSize": hand, "queueLengthLimit": len}}),
        None => json!({"type": "Reject"}),
    };
    json!({
        "apiVersion": GROUP, "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name, "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": shares,
            "lendablePercent": lendable,
            "limitResponse": limit_response,
        }},
    })
}

fn schema(name: &str, level: &str, precedence: i64, by: Option<&str>, rules: Value) -> Value {
    let mut spec = json!({
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": precedence,
        "rules": rules,
    });
    if let Some(by) = by {
        spec["distinguisherMethod"] = json!({"type": by});
    }
    json!({
        "apiVersion": GROUP, "kind": "FlowSchema",
        "metadata": {"name": name, "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}},
        "spec": spec,
    })
}

fn everything() -> Value {
    json!({
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    })
}

fn rule(subjects: Value, rest: Value) -> Value {
    let mut r = rest;
    r["subjects"] = subjects;
    r
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "group": {"name": name}})
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "user": {"name": name}})
}

/// Upstream's mandatory and suggested configuration objects (the ones
/// that concern what this server serves).
pub fn bootstrap_objects() -> Vec<Value> {
    let leases = json!({"resourceRules": [{"verbs": ["get", "create", "update"],
        "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]});
    let mut exempt_level = json!({
        "apiVersion": GROUP, "kind": "PriorityLevelConfiguration",
        "metadata": {"name": "exempt", "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}},
        "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}},
    });
    exempt_level["metadata"]["name"] = json!("exempt");
    vec![
        exempt_level,
        level("catch-all", 5, None, 0),
        level("system", 30, Some((64, 6, 50)), 33),
        level("node-high", 40, Some((64, 6, 50)), 25),
        level("leader-election", 10, Some((16, 4, 50)), 0),
        level("workload-high", 40, Some((128, 6, 50)), 50),
        level("workload-low", 100, Some((128, 6, 50)), 90),
        level("global-default", 20, Some((128, 6, 50)), 50),
        schema(
            "exempt",
            "exempt",
            1,
            None,
            json!([rule(json!([group("system:masters")]), everything())]),
        ),
        schema(
            "probes",
            "exempt",
            2,
            None,
            json!([rule(
                json!([
                    group("system:unauthenticated"),
                    group("system:authenticated")
                ]),
                json!({"nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]}),
            )]),
        ),
        schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            json!([rule(
                json!([user("system:kube-controller-manager"), user("system:kube-scheduler"),
                {"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "*"}}]),
                leases.clone(),
            )]),
        ),
        schema(
            "workload-leader-election",
            "leader-election",
            200,
            Some("ByUser"),
            json!([rule(
                json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "*", "name": "*"}}]),
                leases,
            )]),
        ),
        schema(
            "system-nodes",
            "system",
            500,
            Some("ByUser"),
            json!([rule(json!([group("system:nodes")]), everything())]),
        ),
        schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            json!([rule(
                json!([user("system:kube-controller-manager")]),
                everything()
            )]),
        ),
        schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            json!([rule(
                json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "*"}}]),
                everything(),
            )]),
        ),
        schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            json!([rule(json!([group("system:serviceaccounts")]), everything())]),
        ),
        schema(
            "global-default",
            "global-default",
            9900,
            Some("ByUser"),
            json!([rule(
                json!([
                    group("system:unauthenticated"),
                    group("system:authenticated")
                ]),
                everything()
            )]),
        ),
        schema(
            "catch-all",
            "catch-all",
            10000,
            Some("ByUser"),
            json!([rule(
                json!([
                    group("system:unauthenticated"),
                    group("system:authenticated")
                ]),
                everything()
            )]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schemas() -> Vec<FlowSchema> {
        let mut s: Vec<FlowSchema> = bootstrap_objects()
            .iter()
            .filter(|o| o["kind"] == "FlowSchema")
            .filter_map(FlowSchema::parse)
            .collect();
        sort(&mut s);
        s
    }

    fn req<'a>(
        user: &'a str,
        groups: &'a [String],
        verb: &'a str,
        resource: &'a str,
    ) -> Request<'a> {
        Request {
            user,
            groups,
            verb,
            is_resource: true,
            api_group: if resource == "leases" {
                "coordination.k8s.io"
            } else {
                ""
            },
            resource,
            subresource: None,
            namespace: Some("kube-system"),
            path: "/x",
        }
    }

    #[test]
    fn requests_land_in_upstreams_schemas() {
        let s = schemas();
        let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let masters = g(&["system:masters", "system:authenticated"]);
        assert_eq!(
            classify(&s, &req("admin", &masters, "get", "pods"))
                .unwrap()
                .level,
            "exempt"
        );
        let sa = g(&["system:serviceaccounts", "system:authenticated"]);
        let gc = "system:serviceaccount:kube-system:generic-garbage-collector";
        assert_eq!(
            classify(&s, &req(gc, &sa, "update", "leases"))
                .unwrap()
                .name,
            "system-leader-election"
        );
        let kss = classify(&s, &req(gc, &sa, "list", "pods")).unwrap();
        assert_eq!(kss.name, "kube-system-service-accounts");
        let alice = g(&["system:authenticated"]);
        let r = req("alice", &alice, "get", "configmaps");
        let gd = classify(&s, &r).unwrap();
        assert_eq!(gd.name, "global-default");
        assert_eq!(gd.flow(&r), "global-default/alice");
        let anon = g(&["system:unauthenticated"]);
        let probe = Request {
            is_resource: false,
            path: "/readyz",
            ..req("system:anonymous", &anon, "get", "")
        };
        assert_eq!(classify(&s, &probe).unwrap().level, "exempt");
        assert!(classify(&s, &req("nobody", &[], "get", "pods")).is_none());
    }

    #[test]
    fn resource_rules_name_subresources_as_upstream() {
        let obj = schema(
            "status-writers",
            "workload-low",
            100,
            Some("ByUser"),
            json!([rule(
                json!([user("*")]),
                json!({"resourceRules": [{
                "verbs": ["update"], "apiGroups": [""], "resources": ["pods/status", "nodes"],
                "namespaces": ["*"], "clusterScope": true}]})
            )]),
        );
        let s = FlowSchema::parse(&obj).unwrap();
        let groups: Vec<String> = Vec::new();
        let base = req("kubelet", &groups, "update", "pods");
        let status = Request {
            subresource: Some("status"),
            ..req("kubelet", &groups, "update", "pods")
        };
        let podsx = Request {
            resource: "podsx",
            subresource: Some("status"),
            ..req("kubelet", &groups, "update", "pods")
        };
        let node_status = Request {
            resource: "nodes",
            subresource: Some("status"),
            ..req("kubelet", &groups, "update", "nodes")
        };
        assert!(s.matches(&status), "pods/status");
        assert!(!s.matches(&base), "pods is not pods/status");
        assert!(!s.matches(&podsx), "podsx/status is not pods/status");
        assert!(!s.matches(&node_status), "nodes is not nodes/status");
        assert!(s.matches(&Request {
            namespace: None,
            ..req("kubelet", &groups, "update", "nodes")
        }));
        assert_eq!(s.flow(&status), "status-writers/kubelet");
        assert_eq!(s.distinguisher_of(&status), Some("kubelet"));
    }

    #[test]
    fn levels_share_the_server() {
        let levels: Vec<PriorityLevel> = bootstrap_objects()
            .iter()
            .filter(|o| o["kind"] == "PriorityLevelConfiguration")
            .filter_map(PriorityLevel::parse)
            .collect();
        let sum: u64 = levels
            .iter()
            .filter_map(|l| l.limited.as_ref())
            .map(|l| l.shares)
            .sum();
        assert_eq!(sum, 245);
        // Upstream's numbers at the default 600 seats: global-default 49.
        assert_eq!(nominal_seats(600, 20, sum), 49);
        assert!(
            levels
                .iter()
                .any(|l| l.name == "exempt" && l.limited.is_none())
        );
        let catch_all = levels.iter().find(|l| l.name == "catch-all").unwrap();
        assert_eq!(
            catch_all.limited.as_ref().unwrap().response,
            LimitResponse::Reject
        );
    }
}
