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
    },
    /// Run an admission plugin on AdmissionReview requests (what webhooks
    /// receive) and compare its answers with the expected ones.
    Test(TestArgs),
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
    cases: Vec<Case>,
}

/// Runs a `plugin` subcommand; the process exit code.
pub fn run(cmd: PluginCommand) -> anyhow::Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let runtime = Runtime::new(RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })?;
        match cmd {
            PluginCommand::Inspect { component } => inspect(&runtime, &component).await,
            PluginCommand::Test(args) => test(&runtime, args).await,
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
    if req.get("userInfo").is_none() {
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

async fn load(
    runtime: &Runtime,
    component: &Path,
    config: &str,
) -> anyhow::Result<AdmissionPlugin> {
    let wasm = std::fs::read(component)?;
    let name = component
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    Ok(runtime
        .load_admission(&name, &wasm, config, Limits::default())
        .await?)
}

async fn test(runtime: &Runtime, args: TestArgs) -> anyhow::Result<i32> {
    let config = match &args.config {
        Some(p) => Some(std::fs::read_to_string(p)?),
        None => None,
    };
    if let Some(path) = &args.request {
        let plugin = load(runtime, &args.component, config.as_deref().unwrap_or("")).await?;
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
    let files: Vec<PathBuf> = if cases.is_dir() {
        let mut f: Vec<PathBuf> = std::fs::read_dir(cases)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        f.sort();
        f
    } else {
        vec![cases.clone()]
    };
    let (mut passed, mut failed) = (0, 0);
    for file in files {
        let table: Table = serde_yaml::from_slice(&std::fs::read(&file)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let cfg = config.clone().or(table.config.clone()).unwrap_or_default();
        let plugin = load(runtime, &args.component, &cfg).await?;
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
