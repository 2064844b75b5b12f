//! `wasm-apiserver plugin ...`: inspect and test plugin components offline,
//! in the same runtime, with the same limits, as the server runs them.

use clap::{Args, Subcommand, ValueEnum};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use wasm_apiserver_plugins::{
    AdmissionPlugin, AdmissionRequest, AdmissionResponse, Limits, Runtime, RuntimeConfig,
};

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Show a component's world, WIT package version, exports and imports,
    /// and whether it loads in this server.
    Inspect {
        /// The component (`.wasm`).
        component: PathBuf,
        /// Keep compiled components here across runs (as the server's
        /// data directory does); without it every run compiles.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
    },
    /// Run an admission plugin on AdmissionReview requests (what webhooks
    /// receive) and compare its answers with the expected ones; or run a
    /// controller's reconcile of one key over fixture objects
    /// (`--cluster`, `--for`, `--key`), printing the writes it makes, or
    /// over a case table (`--cases`); or a scheduler plugin's filter and
    /// score over the nodes and pods of a case table (`--cases`).
    Test(TestArgs),
    /// Measure an admission plugin: cold compile, cached load, and the
    /// latency of calls (each on a fresh instance, as the server runs them).
    Bench(BenchArgs),
}

#[derive(Args)]
pub struct BenchArgs {
    /// The admission plugin component (`.wasm`).
    pub component: PathBuf,
    /// The request to call it with: an AdmissionReview (or its `request`).
    #[arg(long)]
    pub request: PathBuf,
    /// The plugin's configuration.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// How many calls of each phase to time.
    #[arg(long, default_value_t = 2000)]
    pub calls: usize,
}

#[derive(Args)]
pub struct TestArgs {
    /// The admission plugin component (`.wasm`).
    pub component: PathBuf,
    /// One request: an `admission.k8s.io/v1` AdmissionReview (or its `request`).
    #[arg(long, conflicts_with = "cases")]
    pub request: Option<PathBuf>,
    /// A YAML table of cases (a file, or a directory of `*.yaml` files).
    #[arg(long)]
    pub cases: Option<PathBuf>,
    /// The plugin's configuration (the `spec.config` text of its AdmissionPlugin).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// With `--request`: the outcome the request must have.
    #[arg(long)]
    pub expect: Option<Outcome>,
    /// Keep compiled components here across runs (a CI cache); without it
    /// every run compiles (seconds for Python and JavaScript components).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Objects the cluster holds (YAML or JSON: documents or a `List`): an
    /// admission plugin's cluster reads answer from them; a controller's
    /// reads too, and its writes change them. `can_i` is answered as the
    /// server's RBAC would, from the Roles, ClusterRoles, RoleBindings and
    /// ClusterRoleBindings among them (over the default roles and
    /// bindings a server starts with): with none, a user outside
    /// `system:masters` may do only what the defaults let everyone
    /// (discovery, reviews of oneself).
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// Controllers: the primary kind, `<apiVersion>/<Kind>` (`v1/Namespace`,
    /// `apps/v1/Deployment`).
    #[arg(long = "for")]
    pub for_kind: Option<String>,
    /// Controllers: the key to reconcile, `[<namespace>/]<name>`.
    #[arg(long)]
    pub key: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Allow,
    Deny,
}

/// One case of a `--cases` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    /// An AdmissionReview file, relative to the table.
    #[serde(default)]
    request: Option<PathBuf>,
    /// Or the object itself (the request is built around it).
    #[serde(default)]
    object: Option<Value>,
    #[serde(default, rename = "oldObject")]
    old_object: Option<Value>,
    #[serde(default)]
    operation: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    /// The plural resource (default: the kind, lower-cased, plus `s`).
    #[serde(default)]
    resource: Option<String>,
    /// Who makes the request (`{username, groups}`; default `plugin-test`,
    /// in no group): what a policy's `can_i` asks about.
    #[serde(default, rename = "userInfo")]
    user_info: Option<Value>,
    expect: Outcome,
    /// The JSON Patch the mutating phase must answer (`[]` for none).
    #[serde(default)]
    patch: Option<Value>,
    /// Warnings the answer must carry.
    #[serde(default)]
    warnings: Option<Vec<String>>,
    /// A substring the denial message must contain.
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    config: Option<String>,
    /// Objects the plugin's cluster reads answer from (with `--cluster`'s).
    #[serde(default)]
    cluster: Vec<Value>,
    cases: Vec<Case>,
}

/// Runs a `plugin` subcommand; the process exit code.
pub fn run(cmd: PluginCommand) -> anyhow::Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let cache_dir = match &cmd {
        PluginCommand::Inspect { cache_dir, .. } => cache_dir.clone(),
        PluginCommand::Test(args) => args.cache_dir.clone(),
        PluginCommand::Bench(_) => None,
    };
    rt.block_on(async {
        let runtime = Runtime::new(RuntimeConfig {
            pooling: false,
            cache_dir,
            // One-shot calls: instances prepared in the background would
            // only be made and thrown away.
            prepared_instances: 0,
            ..RuntimeConfig::default()
        })?;
        match cmd {
            PluginCommand::Inspect { component, .. } => inspect(&runtime, &component).await,
            PluginCommand::Test(args) => test(&runtime, args).await,
            PluginCommand::Bench(args) => bench(args).await,
        }
    })
}

async fn inspect(runtime: &Runtime, path: &Path) -> anyhow::Result<i32> {
    let wasm = std::fs::read(path)?;
    let i = runtime.inspect(&wasm).await?;
    println!("component: {}", path.display());
    println!("size:      {} bytes (sha256 {})", i.size, i.sha256);
    match (i.kind, &i.version) {
        (Some((kind, world)), Some(v)) => {
            println!("world:     {world} (wasm-apiserver:plugin@{v}; kind: {kind})")
        }
        _ => println!(
            "world:     none this server knows (it exports no wasm-apiserver:plugin interface)"
        ),
    }
    println!("exports:");
    for e in &i.exports {
        println!("  {e}");
    }
    println!("imports:");
    for m in &i.imports {
        let note = if i.missing_imports.contains(m) {
            "  (not provided by this server)"
        } else if i.inert_imports.contains(m) {
            "  (linked, nothing granted)"
        } else {
            ""
        };
        println!("  {m}{note}");
    }
    if i.loads() {
        println!("loads:     yes");
        Ok(0)
    } else {
        println!("loads:     no");
        Ok(1)
    }
}

/// An AdmissionReview (or a bare request) as the runtime's request.
fn parse_request(v: &Value) -> anyhow::Result<AdmissionRequest> {
    let mut req = v.get("request").cloned().unwrap_or_else(|| v.clone());
    if req.get("uid").is_none() {
        req["uid"] = json!("00000000-0000-0000-0000-000000000000");
    }
    if req.get("userInfo").is_none_or(Value::is_null) {
        req["userInfo"] = json!({"username": "plugin-test"});
    }
    Ok(serde_json::from_value(req)?)
}

/// The request of a case written with `object:`.
fn case_request(case: &Case) -> anyhow::Result<AdmissionRequest> {
    let obj = case
        .object
        .as_ref()
        .or(case.old_object.as_ref())
        .ok_or_else(|| anyhow::anyhow!("case {:?}: needs `request` or `object`", case.name))?;
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().unwrap_or_default();
    let resource = case
        .resource
        .clone()
        .unwrap_or_else(|| format!("{}s", kind.to_ascii_lowercase()));
    let operation = case.operation.as_deref().unwrap_or("CREATE");
    parse_request(&json!({
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": obj["metadata"]["name"],
        "namespace": case.namespace.clone().or_else(|| obj["metadata"]["namespace"].as_str().map(String::from)),
        "operation": operation,
        "object": case.object,
        "oldObject": case.old_object,
        "userInfo": case.user_info,
    }))
}

/// The plugin's answer: the mutating phase, then the validating phase on
/// the patched object, as the server's chain runs them.
async fn answer(
    plugin: &AdmissionPlugin,
    req: &AdmissionRequest,
) -> anyhow::Result<(AdmissionResponse, Value)> {
    let mutated = plugin.mutate(req).await?;
    let patch = mutated.patch.clone().unwrap_or(json!([]));
    if !mutated.allowed {
        return Ok((mutated, patch));
    }
    let mut next = req.clone();
    if let (Some(obj), Some(p)) = (&req.object, &mutated.patch) {
        let p: json_patch::Patch = serde_json::from_value(p.clone())?;
        let mut patched = obj.clone();
        json_patch::patch(&mut patched, &p)?;
        next.object = Some(patched);
    }
    let mut validated = plugin.validate(&next).await?;
    let mut warnings = mutated.warnings;
    warnings.append(&mut validated.warnings);
    validated.warnings = warnings;
    Ok((validated, patch))
}

fn describe(r: &AdmissionResponse) -> String {
    match &r.status {
        Some(s) if !r.allowed => format!("deny ({} {}: {})", s.code, s.reason, s.message),
        _ => "allow".into(),
    }
}

/// Loads an admission plugin; its cluster reads (package 0.3.0) answer
/// from `objects`, every kind readable (offline, nothing is granted or
/// refused: the grants are the `AdmissionPlugin`'s business), and its
/// `can_i` from their RBAC objects.
async fn load(
    runtime: &Runtime,
    component: &Path,
    config: &str,
    objects: &[Value],
) -> anyhow::Result<AdmissionPlugin> {
    let wasm = std::fs::read(component)?;
    let name = component
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    let cluster = crate::controller_cli::fixture_access(objects.to_vec());
    Ok(runtime
        .load_admission_with_cluster(&name, &wasm, config, Limits::default(), Some(cluster))
        .await?)
}

async fn test(runtime: &Runtime, args: TestArgs) -> anyhow::Result<i32> {
    let config = match &args.config {
        Some(p) => Some(std::fs::read_to_string(p)?),
        None => None,
    };
    // A controller's test names a key (with `--for`), or a table with `for:`.
    let controller_table = match &args.cases {
        Some(cases) => table_files(cases)?.iter().any(|f| {
            std::fs::read(f)
                .ok()
                .and_then(|b| serde_yaml::from_slice::<Value>(&b).ok())
                .is_some_and(|t| t.get("for").is_some())
        }),
        None => false,
    };
    if args.key.is_some() || args.for_kind.is_some() || controller_table {
        return test_controller(runtime, &args, config.as_deref()).await;
    }
    // A scheduler plugin's table lists nodes.
    if let Some(cases) = &args.cases {
        let files = table_files(cases)?;
        let tables: Vec<Value> = files
            .iter()
            .filter_map(|f| std::fs::read(f).ok())
            .filter_map(|b| serde_yaml::from_slice::<Value>(&b).ok())
            .collect();
        if tables.iter().any(crate::scheduler_cli::is_scheduler_table) {
            let (mut passed, mut failed) = (0, 0);
            for file in files {
                let (p, f) = crate::scheduler_cli::run_table(
                    runtime,
                    &args.component,
                    config.as_deref(),
                    &file,
                )
                .await?;
                passed += p;
                failed += f;
            }
            println!("{passed} passed, {failed} failed");
            return Ok(if failed == 0 { 0 } else { 1 });
        }
    }
    // An admission plugin's cluster reads answer from `--cluster`.
    let cluster = match &args.cluster {
        Some(p) => crate::controller_cli::read_objects(p)?,
        None => Vec::new(),
    };
    if let Some(path) = &args.request {
        let plugin = load(
            runtime,
            &args.component,
            config.as_deref().unwrap_or(""),
            &cluster,
        )
        .await?;
        let req = parse_request(&serde_json::from_slice(&std::fs::read(path)?)?)?;
        let (resp, patch) = answer(&plugin, &req).await?;
        println!("{}", describe(&resp));
        if patch != json!([]) {
            println!("patch: {patch}");
        }
        for w in &resp.warnings {
            println!("warning: {w}");
        }
        let got = if resp.allowed {
            Outcome::Allow
        } else {
            Outcome::Deny
        };
        return Ok(match args.expect {
            Some(want) if want != got => {
                println!("FAIL: expected {want:?}, got {got:?}");
                1
            }
            _ => 0,
        });
    }
    let Some(cases) = &args.cases else {
        anyhow::bail!("give --request or --cases");
    };
    let files = table_files(cases)?;
    let (mut passed, mut failed) = (0, 0);
    for file in files {
        let table: Table = serde_yaml::from_slice(&std::fs::read(&file)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let cfg = config.clone().or(table.config.clone()).unwrap_or_default();
        let mut objects = cluster.clone();
        objects.extend(table.cluster.iter().cloned());
        let plugin = load(runtime, &args.component, &cfg, &objects).await?;
        let base = file.parent().unwrap_or(Path::new("."));
        for case in &table.cases {
            let req = match &case.request {
                Some(p) => parse_request(&serde_json::from_slice(&std::fs::read(base.join(p))?)?)?,
                None => case_request(case)?,
            };
            let (resp, patch) = answer(&plugin, &req).await?;
            let mut problems = Vec::new();
            let got = if resp.allowed {
                Outcome::Allow
            } else {
                Outcome::Deny
            };
            if got != case.expect {
                problems.push(format!(
                    "expected {:?}, got {}",
                    case.expect,
                    describe(&resp)
                ));
            }
            if let Some(want) = &case.patch
                && *want != patch
            {
                problems.push(format!("expected patch {want}, got {patch}"));
            }
            if let Some(want) = &case.warnings
                && *want != resp.warnings
            {
                problems.push(format!(
                    "expected warnings {want:?}, got {:?}",
                    resp.warnings
                ));
            }
            if let Some(want) = &case.message {
                let message = resp
                    .status
                    .as_ref()
                    .map(|s| s.message.as_str())
                    .unwrap_or("");
                if !message.contains(want.as_str()) {
                    problems.push(format!(
                        "expected a message containing {want:?}, got {message:?}"
                    ));
                }
            }
            if problems.is_empty() {
                passed += 1;
                println!("PASS {}", case.name);
            } else {
                failed += 1;
                println!("FAIL {}: {}", case.name, problems.join("; "));
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 { 0 } else { 1 })
}

/// `plugin test` of a controller component.
async fn test_controller(
    runtime: &Runtime,
    args: &TestArgs,
    config: Option<&str>,
) -> anyhow::Result<i32> {
    use crate::controller_cli;
    let objects = match &args.cluster {
        Some(p) => controller_cli::read_objects(p)?,
        None => Vec::new(),
    };
    if let Some(key) = &args.key {
        let Some(for_kind) = &args.for_kind else {
            anyhow::bail!("--key needs --for <apiVersion>/<Kind>");
        };
        let (api_version, kind) = for_kind
            .rsplit_once('/')
            .ok_or_else(|| anyhow::anyhow!("--for {for_kind:?}: expected <apiVersion>/<Kind>"))?;
        let for_kind = wasm_apiserver_api::controller::KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        };
        let run = controller_cli::reconcile(
            runtime,
            &args.component,
            config.unwrap_or(""),
            &for_kind,
            objects,
            key,
        )
        .await?;
        controller_cli::print_run(&run);
        return Ok(if run.outcome.is_ok() { 0 } else { 1 });
    }
    let Some(cases) = &args.cases else {
        anyhow::bail!("a controller needs --key (with --for) or --cases");
    };
    let (mut passed, mut failed) = (0, 0);
    for file in table_files(cases)? {
        let (p, f) =
            controller_cli::run_table(runtime, &args.component, config, &objects, &file).await?;
        passed += p;
        failed += f;
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 { 0 } else { 1 })
}

/// The tables of `--cases`: a file, or a directory's `*.yaml` files.
fn table_files(cases: &Path) -> anyhow::Result<Vec<PathBuf>> {
    Ok(if cases.is_dir() {
        let mut f: Vec<PathBuf> = std::fs::read_dir(cases)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        f.sort();
        f
    } else {
        vec![cases.to_path_buf()]
    })
}

/// The `p`-th percentile of sorted durations, in µs.
fn percentile(sorted: &[std::time::Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

async fn bench(args: BenchArgs) -> anyhow::Result<i32> {
    use std::time::{Duration, Instant};
    let wasm = std::fs::read(&args.component)?;
    let config = match &args.config {
        Some(p) => std::fs::read_to_string(p)?,
        None => String::new(),
    };
    let req = parse_request(&serde_json::from_slice(&std::fs::read(&args.request)?)?)?;
    let cache = std::env::temp_dir().join(format!(
        "wasm-apiserver-plugin-bench-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&cache);
    let runtime_with_cache = || {
        Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.clone()),
            // Every timed call instantiates, as the table says.
            prepared_instances: 0,
            ..RuntimeConfig::default()
        })
    };
    // Cold: an empty cache, so the load compiles.
    let cold = runtime_with_cache()?;
    let start = Instant::now();
    cold.load_admission("bench", &wasm, &config, Limits::default())
        .await?;
    let compile = start.elapsed();
    drop(cold);
    // Cached: a new runtime (as after a restart) finds the compiled artifact.
    let warm = runtime_with_cache()?;
    let start = Instant::now();
    let plugin = warm
        .load_admission("bench", &wasm, &config, Limits::default())
        .await?;
    let cached = start.elapsed();
    let mut rows = Vec::new();
    for phase in ["validate", "mutate"] {
        let mut samples: Vec<Duration> = Vec::with_capacity(args.calls);
        for _ in 0..args.calls {
            let start = Instant::now();
            let r = if phase == "validate" {
                plugin.validate(&req).await
            } else {
                plugin.mutate(&req).await
            };
            samples.push(start.elapsed());
            r?;
        }
        samples.sort();
        rows.push((phase, percentile(&samples, 0.5), percentile(&samples, 0.99)));
    }
    let _ = std::fs::remove_dir_all(&cache);
    println!(
        "| component | size | cold compile | cached load | validate p50 | validate p99 | mutate p50 | mutate p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} KB | {:.1} ms | {:.2} ms | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs |",
        args.component
            .file_name()
            .map(|f| f.to_string_lossy())
            .unwrap_or_default(),
        wasm.len() / 1024,
        compile.as_secs_f64() * 1e3,
        cached.as_secs_f64() * 1e3,
        rows[0].1,
        rows[0].2,
        rows[1].1,
        rows[1].2,
    );
    println!(
        "(each call instantiates a fresh sandbox: the latencies include instantiation; {} calls per phase)",
        args.calls
    );
    Ok(0)
}
