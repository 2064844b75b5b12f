//! Command-line flags of `wasm-apiserver serve`, named after
//! kube-apiserver's where one exists.

use clap::Args;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of the `serve` subcommand.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Directory for the embedded store and generated files
    /// (`admin.kubeconfig`). Created if missing.
    #[arg(long, default_value = "./wasm-apiserver-data")]
    pub data_dir: PathBuf,

    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,

    /// Port to serve on (0 picks a free port; the chosen address is logged and
    /// written to the kubeconfig).
    #[arg(long, default_value_t = 6443)]
    pub secure_port: u16,

    /// etcd endpoints (comma-separated, e.g. `http://127.0.0.1:2379`); empty
    /// uses the embedded store in `--data-dir`. Needs a build with the `etcd`
    /// feature.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,

    /// Extra prefix before every key in etcd (keys already start with
    /// `/registry/`), to share one etcd between clusters.
    #[arg(long, default_value = "")]
    pub etcd_prefix: String,

    /// CA bundle of etcd's serving certificate.
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,

    /// Client certificate for etcd.
    #[arg(long)]
    pub etcd_certfile: Option<PathBuf>,

    /// Client key for etcd.
    #[arg(long)]
    pub etcd_keyfile: Option<PathBuf>,

    /// The address this replica publishes in the `kubernetes` Service's
    /// endpoints; default: the bind address (127.0.0.1 when it is
    /// unspecified).
    #[arg(long)]
    pub advertise_address: Option<IpAddr>,

    /// Controllers to run (kube-controller-manager's flag): `*` for all,
    /// `-name` to turn one off: `garbage-collector-controller`,
    /// `serviceaccount-controller`, `root-ca-certificate-publisher-controller`,
    /// `certificatesigningrequest-approving-controller`,
    /// `certificatesigningrequest-signing-controller`,
    /// `bootstrap-signer-controller` (runs with `--enable-bootstrap-token-auth`),
    /// `node-lifecycle-controller` (node `Ready` from Leases and status,
    /// node taints), `taint-eviction-controller` (deletes pods from
    /// `NoExecute`-tainted nodes), `pod-garbage-collector-controller`,
    /// `endpoints-controller` and `endpointslice-controller` (a selector
    /// Service's Endpoints and EndpointSlices from its pods),
    /// `endpointslicemirroring-controller` (EndpointSlices mirroring the
    /// Endpoints of a Service without a selector),
    /// `replicaset-controller`, `replicationcontroller-controller` (keep
    /// their count of pods), `deployment-controller` (rollouts through
    /// ReplicaSets), `daemonset-controller` (a DaemonSet's pod on every eligible node),
    /// `statefulset-controller` (a StatefulSet's ordered pods and claims),
    /// `disruption-controller` (PodDisruptionBudgets' status),
    /// `resourcequota-controller` (ResourceQuotas' status: usage counted),
    /// `job-controller` (runs Jobs' pods), `cronjob-controller` (Jobs on
    /// CronJobs' schedules), `ttl-after-finished-controller` (deletes
    /// finished Jobs after `ttlSecondsAfterFinished`),
    /// `wasm-controllers` (runs `Controller` objects' components),
    /// `policy-audit` (checks stored objects against admission plugins and
    /// policies, writes policy reports).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// Turns off the built-in scheduler (`default-scheduler`, as
    /// kube-scheduler: binds pods without `spec.nodeName` whose
    /// `schedulerName` is `default-scheduler`), k3s's flag.
    #[arg(long)]
    pub disable_scheduler: bool,

    /// Time between full passes of the background policy audit (objects
    /// that change are checked as they change).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub audit_interval: Duration,

    /// Share of one core the background policy audit may use while the
    /// server is idle (a fiftieth of it while requests are served).
    #[arg(long, default_value_t = 0.5)]
    pub audit_cpu_budget: f64,

    /// The policy reports the audit writes: `openreports`
    /// (`openreports.io/v1alpha1` Report, ClusterReport) or `policyreport`
    /// (`wgpolicyk8s.io/v1alpha2` PolicyReport, ClusterPolicyReport).
    #[arg(long, default_value = "openreports", value_parser = wasm_apiserver_api::report::Format::parse)]
    pub report_format: wasm_apiserver_api::report::Format,

    /// How often the node lifecycle controller looks at every node
    /// (kube-controller-manager's flag).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_monitor_period: Duration,

    /// How long a node may go without renewing its Lease or posting its
    /// `Ready` condition before it is marked `Unknown` (kube-controller-
    /// manager's flag; 50 s since 1.32).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    pub node_monitor_grace_period: Duration,

    /// The same for a node that has not posted a `Ready` condition yet.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub node_startup_grace_period: Duration,

    /// Terminated pods kept before the pod garbage collector deletes the
    /// oldest (kube-controller-manager's flag); 0 keeps them all.
    #[arg(long, default_value_t = 12500)]
    pub terminated_pod_gc_threshold: usize,

    /// How often the pod garbage collector looks (upstream's fixed 20 s;
    /// this server's flag).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub pod_gc_period: Duration,

    /// How often the resource quota controller recounts every quota's
    /// usage (kube-controller-manager's flag).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub resource_quota_sync_period: Duration,

    /// The Job controller's first pod-failure backoff, doubled per failure
    /// (upstream's fixed 10 s; for tests).
    #[arg(long, default_value = "10s", value_parser = parse_duration, hide = true)]
    pub job_pod_failure_backoff: Duration,

    /// How many times as fast as the wall clock the CronJob controller's
    /// clock runs (tests: a minute's schedule in seconds).
    #[arg(long, default_value_t = 1.0, hide = true)]
    pub cronjob_controller_clock_speed: f64,

    /// How long a node must be missing before the pod garbage collector
    /// deletes its pods (upstream's fixed 40 s; this server's flag).
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub pod_gc_orphan_quarantine: Duration,

    /// How long a leader's Lease lasts without renewal before another
    /// replica takes over (replicas on etcd only).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,

    /// How long a leader keeps trying to renew before it steps down.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,

    /// How often candidates try to take, and the leader to renew, the Lease.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,

    /// The CA certificate (PEM) that signs approved CertificateSigningRequests
    /// for the built-in signers; default: the cluster CA (`<data-dir>/pki/ca.crt`).
    #[arg(long, requires = "cluster_signing_key_file")]
    pub cluster_signing_cert_file: Option<PathBuf>,

    /// The key (PEM) of `--cluster-signing-cert-file`.
    #[arg(long, requires = "cluster_signing_cert_file")]
    pub cluster_signing_key_file: Option<PathBuf>,

    /// The longest life of a signed certificate (a request's
    /// `expirationSeconds` may shorten it).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub cluster_signing_duration: Duration,

    /// The CIDR cluster IPs of Services come from (kube-apiserver's flag).
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,

    /// The port range NodePort Services get their ports from (`LOW-HIGH`).
    #[arg(long, default_value = "30000-32767")]
    pub service_node_port_range: String,

    /// How often history older than one interval is compacted (kube-apiserver's
    /// `--etcd-compaction-interval`); 0 disables compaction.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub etcd_compaction_interval: Duration,

    /// Start from this snapshot (`wasm-apiserver snapshot save`): the data
    /// directory must not hold a store yet; revisions continue a billion
    /// above the snapshot's, so no client's resourceVersion goes back.
    #[arg(long)]
    pub restore_from: Option<PathBuf>,

    /// Take a snapshot of the embedded store this often, into
    /// `<data-dir>/snapshots` (0: never).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub snapshot_interval: Duration,

    /// How many periodic snapshots to keep.
    #[arg(long, default_value_t = 5)]
    pub snapshot_retention: usize,

    /// Memory the embedded store keeps of its file's pages, in bytes (the
    /// OS page cache holds the rest).
    #[arg(long, default_value_t = wasm_apiserver_storage::embedded::DEFAULT_CACHE_BYTES)]
    pub storage_cache_bytes: usize,

    /// How often an idle watch receives a bookmark when it asked for them.
    #[arg(long, default_value = "5s", value_parser = parse_duration, hide = true)]
    pub watch_progress_interval: Duration,

    /// Directory of wasm components that `AdmissionPlugin` objects may name
    /// with `spec.module.file` (plain file names only).
    #[arg(long)]
    pub plugin_dir: Option<PathBuf>,

    /// Registries (`host[:port]`, comma-separated) that `spec.module.image`
    /// is pulled from over plain HTTP instead of HTTPS (a registry on
    /// loopback or inside the cluster's network).
    #[arg(long, value_delimiter = ',')]
    pub insecure_plugin_registries: Vec<String>,

    /// CA bundle (PEM) that every registry's certificate may chain to, in
    /// addition to the system's roots (a registry behind a private CA).
    #[arg(long)]
    pub plugin_registry_ca_file: Option<PathBuf>,

    /// Per-registry trust in Kubewarden's `sources.yaml` form (YAML or
    /// JSON): `insecure_sources` (plain HTTP, merged with
    /// `--insecure-plugin-registries`) and `source_authorities` (CAs by
    /// `host[:port]`, `type: Path` or `type: Data`).
    #[arg(long)]
    pub plugin_sources_file: Option<PathBuf>,

    /// Registry credentials for `spec.module.image`, a docker `config.json`
    /// (`auths` by registry: `auth`, `username`/`password`,
    /// `identitytoken` or `registrytoken`); a module's
    /// `spec.module.pullSecret` wins over it.
    #[arg(long)]
    pub plugin_registry_config: Option<PathBuf>,

    /// Admission plugins loaded at start (YAML `AdmissionPlugin` documents);
    /// they cannot be changed through the API, so they can guard it.
    #[arg(long)]
    pub admission_control_config_file: Option<PathBuf>,

    /// Serving certificate (PEM); default: one issued by the cluster CA in
    /// `<data-dir>/pki`, created on first start.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,

    /// Private key of `--tls-cert-file` (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,

    /// CA bundle (PEM) whose client certificates authenticate users (CN =
    /// user, O = groups), in addition to the cluster CA.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,

    /// Client certificate (PEM) this server presents to aggregated API
    /// servers, as their front proxy; default: `front-proxy-client`, issued
    /// by the front-proxy CA in `<data-dir>/pki` (both created on first
    /// start, as kubeadm does).
    #[arg(long)]
    pub proxy_client_cert_file: Option<PathBuf>,

    /// Private key of `--proxy-client-cert-file` (PEM).
    #[arg(long)]
    pub proxy_client_key_file: Option<PathBuf>,

    /// CA bundle (PEM) whose client certificates are front proxies: their
    /// requests' `--requestheader-username-headers` name the user. Default
    /// (when `--proxy-client-cert-file` is not given): the generated
    /// front-proxy CA.
    #[arg(long)]
    pub requestheader_client_ca_file: Option<PathBuf>,

    /// Common names a front proxy's certificate may carry (comma-separated;
    /// empty: any the CA signed). Default with the generated front-proxy CA:
    /// `front-proxy-client`.
    #[arg(long, value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,

    /// Headers naming the user behind a front proxy; the first present wins.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-User")]
    pub requestheader_username_headers: Vec<String>,

    /// Headers naming the user's groups behind a front proxy (each repeated
    /// per group).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Group")]
    pub requestheader_group_headers: Vec<String>,

    /// Header prefixes of the user's extra attributes behind a front proxy.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Extra-")]
    pub requestheader_extra_headers_prefix: Vec<String>,

    /// Headers naming the user's UID behind a front proxy (none by
    /// default, as upstream).
    #[arg(long, value_delimiter = ',')]
    pub requestheader_uid_headers: Vec<String>,

    /// How long a request proxied to an aggregated API server may take to
    /// answer (watches are not limited); then 504.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Client certificate (PEM) this server presents to kubelets (logs,
    /// exec, attach, port-forward, `nodes/proxy`); default:
    /// `apiserver-kubelet-client` in `<data-dir>/pki`, CN
    /// `kube-apiserver-kubelet-client`, issued by the cluster CA on first
    /// start (kubeadm's).
    #[arg(long)]
    pub kubelet_client_certificate: Option<PathBuf>,

    /// Private key of `--kubelet-client-certificate` (PEM).
    #[arg(long)]
    pub kubelet_client_key: Option<PathBuf>,

    /// CA bundle (PEM) that kubelets' serving certificates must chain to;
    /// without it they are not verified (upstream's default).
    #[arg(long)]
    pub kubelet_certificate_authority: Option<PathBuf>,

    /// Which node address to reach a kubelet at: the first present of
    /// these types, in order (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "Hostname,InternalDNS,InternalIP,ExternalDNS,ExternalIP"
    )]
    pub kubelet_preferred_address_types: Vec<String>,

    /// The kubelet port of a node whose status publishes none
    /// (`status.daemonEndpoints.kubeletEndpoint.Port`).
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,

    /// How long dialling a kubelet and waiting for its answer's headers may
    /// take (a log or exec stream itself is not limited).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub kubelet_timeout: Duration,

    /// Authorizers, in order (comma-separated): Node, RBAC, AlwaysAllow,
    /// AlwaysDeny, Wasm.
    #[arg(long, default_value = "Node,RBAC")]
    pub authorization_mode: String,

    /// Compiled-in admission plugins to turn on besides the defaults
    /// (comma-separated, upstream's names).
    #[arg(long, value_delimiter = ',')]
    pub enable_admission_plugins: Vec<String>,

    /// Compiled-in admission plugins to turn off (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,

    /// `DefaultTolerationSeconds`: the `tolerationSeconds` of the
    /// `node.kubernetes.io/not-ready:NoExecute` toleration added to pods
    /// that have none.
    #[arg(long, default_value_t = 300)]
    pub default_not_ready_toleration_seconds: i64,

    /// `DefaultTolerationSeconds`: the same for
    /// `node.kubernetes.io/unreachable:NoExecute`.
    #[arg(long, default_value_t = 300)]
    pub default_unreachable_toleration_seconds: i64,

    /// Static bearer tokens, CSV lines `token,user,uid,"group1,group2"`.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,

    /// Accept bootstrap tokens (Secrets of type bootstrap.kubernetes.io/token
    /// in kube-system) and run the cleaner that deletes expired ones.
    #[arg(long, default_value_t = false)]
    pub enable_bootstrap_token_auth: bool,

    /// Wasm authenticator/authorizer plugins (YAML `AuthenticatorPlugin` and
    /// `AuthorizerPlugin` documents); authorizers run where `Wasm` appears in
    /// `--authorization-mode`.
    #[arg(long)]
    pub access_plugin_config_file: Option<PathBuf>,

    /// Audit log file (`-` for stdout); needs `--audit-policy-file`.
    #[arg(long)]
    pub audit_log_path: Option<PathBuf>,

    /// `audit.k8s.io/v1` Policy deciding what is logged at which level.
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,

    /// Rotate the audit log when it reaches this many megabytes (0: never).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxsize: u64,

    /// Rotated audit log files to keep (0: all).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxbackup: usize,

    /// Allow anonymous requests (user `system:anonymous`, group
    /// `system:unauthenticated`); `--anonymous-auth=false` answers 401.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,

    /// PEM private key (PKCS#8, ECDSA P-256) that signs ServiceAccount
    /// tokens; default `<data-dir>/pki/sa.key`, created on first start.
    /// Replicas must share it.
    #[arg(long)]
    pub service_account_signing_key_file: Option<PathBuf>,

    /// PEM file of keys (public, or private) that also verify ServiceAccount
    /// tokens, for key rotation; repeatable.
    #[arg(long)]
    pub service_account_key_file: Vec<PathBuf>,

    /// `iss` of ServiceAccount tokens; repeatable: the first issues (and is
    /// the audience of API tokens), every one is accepted.
    #[arg(long)]
    pub service_account_issuer: Vec<String>,

    /// Seats for requests that do not mutate (kube-apiserver's flag); with
    /// priority and fairness, this plus the next is the server's
    /// concurrency limit shared by the priority levels.
    #[arg(long, default_value_t = 400)]
    pub max_requests_inflight: usize,

    /// Seats for mutating requests (kube-apiserver's flag).
    #[arg(long, default_value_t = 200)]
    pub max_mutating_requests_inflight: usize,

    /// API Priority and Fairness: classify requests by FlowSchema, queue
    /// fairly per flow within each priority level (`false`: only the two
    /// in-flight limits).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_priority_and_fairness: bool,

    /// Maximum request body size in bytes (kube-apiserver's `--max-request-bytes`).
    #[arg(long, default_value_t = 3 * 1024 * 1024)]
    pub max_request_bytes: usize,

    /// Record the request metric families (`apiserver_request_*`); off
    /// only to measure what they cost.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, hide = true)]
    pub enable_request_metrics: bool,

    /// Log format: `text` (colour only on a terminal) or `json`
    /// (component-base's shape: `ts` in epoch milliseconds, `caller`,
    /// `msg`, `v`, key/value pairs, `err`).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub logging_format: String,

    /// Log verbosity, as klog's `-v`: 0 logs info, warnings and errors;
    /// 2 and 3 add debug lines; 4 and above add trace lines.
    /// `RUST_LOG`, when set, overrides it.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

impl ServeArgs {
    /// Defaults for tests and embedding.
    pub fn for_data_dir(data_dir: PathBuf) -> Self {
        ServeArgs {
            data_dir,
            bind_address: [127, 0, 0, 1].into(),
            secure_port: 0,
            etcd_compaction_interval: Duration::from_secs(300),
            service_cluster_ip_range: "10.96.0.0/12".into(),
            service_node_port_range: "30000-32767".into(),
            watch_progress_interval: Duration::from_secs(5),
            storage_cache_bytes: wasm_apiserver_storage::embedded::DEFAULT_CACHE_BYTES,
            restore_from: None,
            snapshot_interval: Duration::ZERO,
            snapshot_retention: 5,
            max_request_bytes: 3 * 1024 * 1024,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            enable_priority_and_fairness: true,
            enable_request_metrics: true,
            logging_format: "text".into(),
            verbosity: 0,
            plugin_dir: None,
            insecure_plugin_registries: Vec::new(),
            plugin_registry_ca_file: None,
            plugin_sources_file: None,
            plugin_registry_config: None,
            admission_control_config_file: None,
            etcd_servers: Vec::new(),
            etcd_prefix: String::new(),
            etcd_cafile: None,
            etcd_certfile: None,
            etcd_keyfile: None,
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            proxy_client_cert_file: None,
            proxy_client_key_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: vec!["X-Remote-User".into()],
            requestheader_group_headers: vec!["X-Remote-Group".into()],
            requestheader_extra_headers_prefix: vec!["X-Remote-Extra-".into()],
            requestheader_uid_headers: Vec::new(),
            request_timeout: Duration::from_secs(60),
            kubelet_client_certificate: None,
            kubelet_client_key: None,
            kubelet_certificate_authority: None,
            kubelet_preferred_address_types: wasm_apiserver_api::kubelet::DEFAULT_ADDRESS_TYPES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            kubelet_port: 10250,
            kubelet_timeout: Duration::from_secs(5),
            anonymous_auth: true,
            authorization_mode: "Node,RBAC".into(),
            enable_admission_plugins: Vec::new(),
            disable_admission_plugins: Vec::new(),
            default_not_ready_toleration_seconds: 300,
            default_unreachable_toleration_seconds: 300,
            token_auth_file: None,
            enable_bootstrap_token_auth: false,
            access_plugin_config_file: None,
            audit_log_path: None,
            audit_policy_file: None,
            audit_log_maxsize: 0,
            audit_log_maxbackup: 0,
            service_account_signing_key_file: None,
            service_account_key_file: Vec::new(),
            service_account_issuer: Vec::new(),
            advertise_address: None,
            controllers: vec!["*".into()],
            disable_scheduler: false,
            audit_interval: Duration::from_secs(3600),
            audit_cpu_budget: 0.5,
            report_format: Default::default(),
            cluster_signing_cert_file: None,
            cluster_signing_key_file: None,
            cluster_signing_duration: Duration::from_secs(8760 * 3600),
            node_monitor_period: Duration::from_secs(5),
            node_monitor_grace_period: Duration::from_secs(50),
            node_startup_grace_period: Duration::from_secs(60),
            terminated_pod_gc_threshold: 12500,
            pod_gc_period: Duration::from_secs(20),
            pod_gc_orphan_quarantine: Duration::from_secs(40),
            resource_quota_sync_period: Duration::from_secs(300),
            job_pod_failure_backoff: Duration::from_secs(10),
            cronjob_controller_clock_speed: 1.0,
            leader_elect_lease_duration: Duration::from_secs(15),
            leader_elect_renew_deadline: Duration::from_secs(10),
            leader_elect_retry_period: Duration::from_secs(2),
        }
    }

    /// Whether `--controllers` turns on controller `name` (as
    /// kube-controller-manager reads it: a name turns it on, `-name` off,
    /// `*` all that are not turned off).
    /// Whether `--controllers` enables any controller at all.
    pub fn controllers_enabled_any(&self) -> bool {
        self.controllers
            .iter()
            .any(|c| !c.is_empty() && !c.starts_with('-'))
    }

    pub fn controller_enabled(&self, name: &str) -> bool {
        if self
            .controllers
            .iter()
            .any(|c| c.strip_prefix('-') == Some(name))
        {
            return false;
        }
        self.controllers.iter().any(|c| c == name || c == "*")
    }
}

/// Parses Go-style durations: `90s`, `5m`, `1h`, `250ms`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(
        s.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len()),
    );
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}")),
    };
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("5x").is_err());
    }
}
