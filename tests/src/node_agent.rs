//! A stand-in **node agent** for the workload tests (as kwok is for
//! upstream's): it registers Nodes with capacity, renews their Leases in
//! `kube-node-lease`, and plays the kubelet's part for the pods bound to
//! them, through the API only. Not a product: nothing in `host/` knows it.
//!
//! For every pod whose `spec.nodeName` is one of its nodes it posts the
//! status a kubelet posts: `Running`, `hostIP`/`podIP`, `startTime`,
//! running container statuses and the `PodReadyToStartContainers`,
//! `Initialized`, `ContainersReady`, `Ready` and `PodScheduled`
//! conditions. A terminating pod (`deletionTimestamp`) has its containers
//! stopped and is deleted with a grace period of 0, as a kubelet finishes
//! a graceful deletion. Pod annotations steer it:
//! - `node-agent.wasm-apiserver.io/exit-after: "300ms"` and
//!   `.../exit-code: "N"` (default 0): the containers exit that long after
//!   starting; with `restartPolicy` `Never` (or `OnFailure` and code 0)
//!   the pod ends `Succeeded`/`Failed`, else the containers restart
//!   (`restartCount`, `CrashLoopBackOff` with a back-off of 1 s doubling to
//!   16 s: the kubelet's 10 s to 5 min, shortened for tests);
//! - `.../ready-after: "1s"`: containers start unready and turn ready
//!   then; `.../never-ready: "true"`: never ready;
//! - `.../terminate-after: "2s"`: a terminating pod takes that long to stop.
//!
//! It acts with the admin identity (one watch of all pods), not as
//! `system:node:<name>`: the Node authorizer's rules are tested apart.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::Server;

const ANNOTATION: &str = "node-agent.wasm-apiserver.io/";
/// How often a node's Lease is renewed (the kubelet's: a quarter of its
/// 40 s duration).
const RENEW: Duration = Duration::from_secs(10);

/// One node the agent registers.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Value>,
}

impl NodeSpec {
    /// A node with 4 CPUs, 8 GiB and room for 110 pods.
    pub fn new(name: &str) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            cpu: "4".into(),
            memory: "8Gi".into(),
            pods: 110,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    pub fn cpu(mut self, cpu: &str) -> NodeSpec {
        self.cpu = cpu.to_string();
        self
    }

    pub fn memory(mut self, memory: &str) -> NodeSpec {
        self.memory = memory.to_string();
        self
    }

    pub fn pods(mut self, pods: u32) -> NodeSpec {
        self.pods = pods;
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> NodeSpec {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> NodeSpec {
        self.taints
            .push(json!({"key": key, "value": value, "effect": effect}));
        self
    }

    fn object(&self) -> Value {
        let mut labels = json!({
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        });
        for (k, v) in &self.labels {
            labels[k] = json!(v);
        }
        let mut node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
        });
        if !self.taints.is_empty() {
            node["spec"]["taints"] = json!(self.taints);
        }
        node
    }

    fn status(&self, address: &str) -> Value {
        let now = now();
        let resources = json!({
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": self.pods.to_string(),
            "ephemeral-storage": "100Gi",
        });
        let condition = |ty: &str, status: &str, reason: &str, message: &str| {
            json!({"type": ty, "status": status, "reason": reason, "message": message,
                   "lastHeartbeatTime": now, "lastTransitionTime": now})
        };
        json!({
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": self.name, "systemUUID": self.name, "bootID": self.name,
                "kernelVersion": "6.1.0", "osImage": "stand-in node agent",
                "containerRuntimeVersion": "stand-in://1.0", "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64",
            },
        })
    }
}

struct NodeState {
    index: usize,
    heartbeat: bool,
}

#[derive(Default)]
struct State {
    nodes: Mutex<BTreeMap<String, NodeState>>,
    /// Pods (by uid) the agent has started, with their restart count.
    started: Mutex<HashMap<String, i64>>,
    /// Pods (by uid) being stopped.
    stopping: Mutex<HashSet<String>>,
    next_ip: Mutex<HashMap<usize, u32>>,
}

/// The running agent; dropping it stops it (Nodes and pods stay).
pub struct NodeAgent {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    state: Arc<State>,
}

impl NodeAgent {
    /// Registers `nodes` and starts serving them; returns when every Node
    /// is `Ready` and untainted by `node.kubernetes.io/not-ready`.
    pub fn start(server: &Server, nodes: Vec<NodeSpec>) -> NodeAgent {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("node agent runtime");
        let client = {
            let _guard = rt.enter();
            crate::kube_client(server)
        };
        let agent = NodeAgent {
            rt,
            client,
            state: Arc::default(),
        };
        for spec in nodes {
            agent.add_node(spec);
        }
        let (client, state) = (agent.client.clone(), agent.state.clone());
        agent.rt.spawn(renew_leases(client.clone(), state.clone()));
        agent.rt.spawn(follow_pods(client, state));
        agent
    }

    /// Registers one more node; returns when it is ready for pods.
    pub fn add_node(&self, spec: NodeSpec) {
        let index = {
            let mut nodes = self.state.nodes.lock().unwrap();
            let index = nodes.len() + 1;
            nodes.insert(
                spec.name.clone(),
                NodeState {
                    index,
                    heartbeat: true,
                },
            );
            index
        };
        let client = self.client.clone();
        self.rt
            .block_on(register(client, spec, index))
            .unwrap_or_else(|e| panic!("node agent: {e:#}"));
    }

    /// Stops renewing `name`'s Lease (its kubelet is gone): the node
    /// lifecycle controller marks it `Unknown` after its grace period.
    pub fn stop_heartbeats(&self, name: &str) {
        if let Some(n) = self.state.nodes.lock().unwrap().get_mut(name) {
            n.heartbeat = false;
        }
    }

    /// Stops serving `name` and deletes its Node.
    pub fn delete_node(&self, name: &str) {
        self.state.nodes.lock().unwrap().remove(name);
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.rt
            .block_on(nodes.delete(name, &DeleteParams::default()))
            .unwrap_or_else(|e| panic!("node agent: delete node {name}: {e}"));
    }

    /// The containers of `ns/name` exit with `code` (then the pod ends or
    /// restarts them as its `restartPolicy` says).
    pub fn finish_pod(&self, ns: &str, name: &str, code: i32) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let pod = self
            .rt
            .block_on(pods.get(name))
            .unwrap_or_else(|e| panic!("node agent: get pod {ns}/{name}: {e}"));
        let pod = serde_json::to_value(pod).expect("pod as JSON");
        let (client, state) = (self.client.clone(), self.state.clone());
        self.rt
            .block_on(exit(client, state, pod, code))
            .unwrap_or_else(|e| panic!("node agent: finish {ns}/{name}: {e:#}"));
    }

    /// Marks the containers of `ns/name` ready or not.
    pub fn set_ready(&self, ns: &str, name: &str, ready: bool) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let pod = self
            .rt
            .block_on(pods.get(name))
            .unwrap_or_else(|e| panic!("node agent: get pod {ns}/{name}: {e}"));
        let pod = serde_json::to_value(pod).expect("pod as JSON");
        let restarts = self.restarts(&pod);
        self.rt
            .block_on(post_running(&self.client, &pod, ready, restarts))
            .unwrap_or_else(|e| panic!("node agent: ready {ns}/{name}: {e:#}"));
    }

    /// How many pods the agent has started so far.
    pub fn pods_started(&self) -> usize {
        self.state.started.lock().unwrap().len()
    }

    fn restarts(&self, pod: &Value) -> i64 {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        self.state
            .started
            .lock()
            .unwrap()
            .get(uid)
            .copied()
            .unwrap_or(0)
    }
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn micro_now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Go-style durations as the annotations give them: `300ms`, `2s`, `1m`.
fn duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

fn annotation<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    pod["metadata"]["annotations"][format!("{ANNOTATION}{name}")].as_str()
}

async fn register(client: kube::Client, spec: NodeSpec, index: usize) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(spec.object())?;
    let created = match nodes.create(&PostParams::default(), &node).await {
        Ok(n) => n,
        Err(kube::Error::Api(e)) if e.code == 409 => nodes.get(&spec.name).await?,
        Err(e) => return Err(e.into()),
    };
    let address = format!("10.0.{}.{}", index / 250, index % 250 + 1);
    nodes
        .patch_status(
            &spec.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": spec.status(&address)})),
        )
        .await?;
    renew(&client, &spec.name, created.metadata.uid.as_deref()).await?;
    // Ready, and the not-ready taint TaintNodesByCondition put on it gone
    // (the node lifecycle controller takes it off).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let n = serde_json::to_value(nodes.get(&spec.name).await?)?;
        let not_ready = n["spec"]["taints"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["key"] == "node.kubernetes.io/not-ready"));
        if !not_ready {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "node {} still has the not-ready taint after 60 s: {n}",
            spec.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn renew(client: &kube::Client, node: &str, uid: Option<&str>) -> anyhow::Result<()> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    let mut lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": micro_now()},
    });
    if let Some(uid) = uid {
        lease["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]);
    }
    leases
        .patch(
            node,
            &PatchParams::apply("node-agent").force(),
            &Patch::Apply(lease),
        )
        .await?;
    Ok(())
}

async fn renew_leases(client: kube::Client, state: Arc<State>) {
    loop {
        tokio::time::sleep(RENEW).await;
        let beating: Vec<String> = state
            .nodes
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, n)| n.heartbeat)
            .map(|(name, _)| name.clone())
            .collect();
        for node in beating {
            if let Err(e) = renew(&client, &node, None).await {
                eprintln!("node agent: renewing {node}'s lease: {e:#}");
            }
        }
    }
}

/// One watch of every pod; each event of a pod on one of the agent's nodes
/// is handled on a task of its own.
async fn follow_pods(client: kube::Client, state: Arc<State>) {
    let pods: Api<Pod> = Api::all(client.clone());
    let stream = watcher(pods, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    loop {
        let event = match stream.try_next().await {
            Ok(Some(e)) => e,
            Ok(None) => return,
            Err(e) => {
                eprintln!("node agent: pod watch: {e}");
                continue;
            }
        };
        let pods = match event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => vec![p],
            _ => continue,
        };
        for pod in pods {
            let Ok(pod) = serde_json::to_value(pod) else {
                continue;
            };
            let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
            if !state.nodes.lock().unwrap().contains_key(node) {
                continue;
            }
            let (client, state) = (client.clone(), state.clone());
            tokio::spawn(async move {
                if let Err(e) = handle(client, state, pod).await {
                    eprintln!("node agent: {e:#}");
                }
            });
        }
    }
}

async fn handle(client: kube::Client, state: Arc<State>, pod: Value) -> anyhow::Result<()> {
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if pod["metadata"]["deletionTimestamp"].is_string() {
        if !state.stopping.lock().unwrap().insert(uid.clone()) {
            return Ok(());
        }
        if let Some(d) = annotation(&pod, "terminate-after").and_then(duration) {
            tokio::time::sleep(d).await;
        }
        return finish_deletion(&client, &pod).await;
    }
    let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
    if matches!(phase, "Succeeded" | "Failed") {
        return Ok(());
    }
    {
        let mut started = state.started.lock().unwrap();
        if started.contains_key(&uid) {
            return Ok(());
        }
        started.insert(uid.clone(), 0);
    }
    let mut pod = pod;
    assign_ips(&state, &mut pod);
    let never_ready = annotation(&pod, "never-ready") == Some("true");
    let ready_after = annotation(&pod, "ready-after").and_then(duration);
    post_running(&client, &pod, !never_ready && ready_after.is_none(), 0).await?;
    if let (Some(d), false) = (ready_after, never_ready) {
        let (client, pod) = (client.clone(), pod.clone());
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            if let Err(e) = post_running(&client, &pod, true, 0).await {
                eprintln!("node agent: {e:#}");
            }
        });
    }
    if let Some(d) = annotation(&pod, "exit-after").and_then(duration) {
        let code = annotation(&pod, "exit-code")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        tokio::time::sleep(d).await;
        exit(client, state, pod, code).await?;
    }
    Ok(())
}

/// The kubelet's last step of a graceful deletion: delete with grace 0,
/// for this very pod (uid precondition).
async fn finish_deletion(client: &kube::Client, pod: &Value) -> anyhow::Result<()> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod["metadata"]["uid"].as_str().map(String::from),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(anyhow::anyhow!("deleting {ns}/{name}: {e}")),
    }
}

fn pod_ip(state: &State, node: &str) -> String {
    let index = state
        .nodes
        .lock()
        .unwrap()
        .get(node)
        .map(|n| n.index)
        .unwrap_or(0);
    let mut next = state.next_ip.lock().unwrap();
    let n = next.entry(index).or_insert(0);
    *n += 1;
    format!("10.244.{}.{}", index, *n % 250 + 2)
}

fn host_ip(pod: &Value) -> String {
    pod["status"]["hostIP"]
        .as_str()
        .unwrap_or("10.0.0.1")
        .to_string()
}

/// Posts a running pod's status: every container running, `ready` or
/// not, with `restarts` restarts.
async fn post_running(
    client: &kube::Client,
    pod: &Value,
    ready: bool,
    restarts: i64,
) -> anyhow::Result<()> {
    let now = now();
    let start = pod["status"]["startTime"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| now.clone());
    let containers = container_statuses(pod, |_| {
        json!({"ready": ready, "started": true, "restartCount": restarts,
               "state": {"running": {"startedAt": now}}})
    });
    let ready = if ready { "True" } else { "False" };
    let conditions = conditions(&start, &[("ContainersReady", ready), ("Ready", ready)]);
    let mut status = json!({
        "phase": "Running",
        "startTime": start,
        "conditions": conditions,
        "containerStatuses": containers,
    });
    set_ips(pod, &mut status);
    patch_status(client, pod, status).await
}

fn set_ips(pod: &Value, status: &mut Value) {
    if let Some(ip) = pod["status"]["podIP"].as_str() {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
        status["hostIP"] = json!(host_ip(pod));
        status["hostIPs"] = json!([{"ip": host_ip(pod)}]);
    }
}

fn conditions(at: &str, own: &[(&str, &str)]) -> Value {
    let mut all = vec![
        ("PodReadyToStartContainers", "True"),
        ("Initialized", "True"),
    ];
    all.extend_from_slice(own);
    all.push(("PodScheduled", "True"));
    Value::Array(
        all.into_iter()
            .map(|(ty, status)| {
                json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": at})
            })
            .collect(),
    )
}

fn container_statuses(pod: &Value, each: impl Fn(&Value) -> Value) -> Value {
    Value::Array(
        pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let mut s = each(c);
                s["name"] = c["name"].clone();
                s["image"] = c["image"].clone();
                s["imageID"] = json!(format!(
                    "stand-in://{}",
                    c["image"].as_str().unwrap_or_default()
                ));
                s["containerID"] = json!(format!(
                    "stand-in://{}-{}",
                    pod["metadata"]["uid"].as_str().unwrap_or_default(),
                    c["name"].as_str().unwrap_or_default()
                ));
                s
            })
            .collect(),
    )
}

async fn patch_status(client: &kube::Client, pod: &Value, status: Value) -> anyhow::Result<()> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // Only for the pod this status is about: a pod of the same name made
    // since (a StatefulSet's) is left alone.
    let patch = json!({
        "metadata": {"uid": pod["metadata"]["uid"]},
        "status": status,
    });
    match pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(anyhow::anyhow!("status of {ns}/{name}: {e}")),
    }
}

/// The pod's containers exit with `code`: the pod ends, or they restart
/// after a back-off and (with `exit-after`) exit again.
async fn exit(
    client: kube::Client,
    state: Arc<State>,
    mut pod: Value,
    code: i32,
) -> anyhow::Result<()> {
    let policy = pod["spec"]["restartPolicy"].as_str().unwrap_or("Always");
    let restart = match policy {
        "Never" => false,
        "OnFailure" => code != 0,
        _ => true,
    };
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let now = now();
    let start = pod["status"]["startTime"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| now.clone());
    let reason = if code == 0 { "Completed" } else { "Error" };
    if !restart {
        let containers = container_statuses(&pod, |_| {
            json!({"ready": false, "started": false, "restartCount": 0,
                   "state": {"terminated": {"exitCode": code, "reason": reason,
                             "startedAt": start, "finishedAt": now}}})
        });
        let conditions = conditions(&now, &[("ContainersReady", "False"), ("Ready", "False")]);
        let mut conditions = conditions;
        conditions[0]["status"] = json!("False");
        let mut status = json!({
            "phase": if code == 0 { "Succeeded" } else { "Failed" },
            "startTime": start,
            "conditions": conditions,
            "containerStatuses": containers,
        });
        set_ips(&pod, &mut status);
        return patch_status(&client, &pod, status).await;
    }
    // Restarted after a back-off, as long as the pod is left running.
    let mut restarts;
    loop {
        restarts = {
            let mut started = state.started.lock().unwrap();
            let r = started.entry(uid.clone()).or_insert(0);
            *r += 1;
            *r
        };
        let backoff = Duration::from_secs(1 << (restarts - 1).min(4));
        let last = json!({"terminated": {"exitCode": code, "reason": reason,
                          "startedAt": start, "finishedAt": now}});
        let containers = container_statuses(&pod, |_| {
            json!({"ready": false, "started": false, "restartCount": restarts,
                   "lastState": last,
                   "state": {"waiting": {"reason": "CrashLoopBackOff",
                             "message": format!("back-off {}s restarting failed container", backoff.as_secs())}}})
        });
        let mut status = json!({
            "phase": "Running",
            "startTime": start,
            "conditions": conditions(&start, &[("ContainersReady", "False"), ("Ready", "False")]),
            "containerStatuses": containers,
        });
        set_ips(&pod, &mut status);
        patch_status(&client, &pod, status).await?;
        tokio::time::sleep(backoff).await;
        if state.stopping.lock().unwrap().contains(&uid) {
            return Ok(());
        }
        let ready = annotation(&pod, "never-ready") != Some("true");
        post_running(&client, &pod, ready, restarts).await?;
        let Some(d) = annotation(&pod, "exit-after").and_then(duration) else {
            return Ok(());
        };
        tokio::time::sleep(d).await;
        if state.stopping.lock().unwrap().contains(&uid) {
            return Ok(());
        }
        // The pod as it is now (it may be terminating).
        let pods: Api<Pod> = Api::namespaced(
            client.clone(),
            pod["metadata"]["namespace"].as_str().unwrap_or_default(),
        );
        match pods
            .get_opt(pod["metadata"]["name"].as_str().unwrap_or_default())
            .await?
        {
            Some(p) => {
                let p = serde_json::to_value(p)?;
                if p["metadata"]["uid"] != pod["metadata"]["uid"]
                    || p["metadata"]["deletionTimestamp"].is_string()
                {
                    return Ok(());
                }
                pod = p;
            }
            None => return Ok(()),
        }
    }
}

/// Gives a pod about to start its IP and its node's (once set, the pod's
/// own are kept).
fn assign_ips(state: &State, pod: &mut Value) {
    if pod["status"]["podIP"].is_string() {
        return;
    }
    let node = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ip = pod_ip(state, &node);
    let host = {
        let nodes = state.nodes.lock().unwrap();
        let index = nodes.get(&node).map(|n| n.index).unwrap_or(0);
        format!("10.0.{}.{}", index / 250, index % 250 + 1)
    };
    pod["status"]["podIP"] = json!(ip);
    pod["status"]["hostIP"] = json!(host);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_annotations_give_them() {
        assert_eq!(duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(duration("soon"), None);
        assert_eq!(duration("5"), None);
    }
}
