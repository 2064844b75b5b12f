//! What a component is, without running it: `wasm-apiserver plugin inspect`.

use crate::error::PluginError;
use crate::runtime::Runtime;

/// The plugin kinds a component can be, by the interface it exports.
const KINDS: &[(&str, &str)] = &[
    ("admission", "admission-plugin"),
    ("authenticator", "authenticator-plugin"),
    ("authorizer", "authorizer-plugin"),
    ("resource-handler", "resource-handler-plugin"),
    ("controller", "controller-plugin"),
    ("scheduler", "scheduler-plugin"),
];

/// The description of a component.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub size: usize,
    pub sha256: String,
    /// The plugin kind and world it targets (`admission`, `admission-plugin`),
    /// from the interface it exports.
    pub kind: Option<(&'static str, &'static str)>,
    /// The WIT package version of that interface (`0.2.0`).
    pub version: Option<String>,
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    /// Imports this server links but grants nothing through (WASI
    /// filesystem, sockets, environment...): calls fail or see nothing.
    pub inert_imports: Vec<String>,
    /// Imports this server does not provide at all: the component cannot
    /// be instantiated here.
    pub missing_imports: Vec<String>,
}

impl Inspection {
    /// Whether the component loads in this server: it targets a known
    /// world and imports nothing the server lacks.
    pub fn loads(&self) -> bool {
        self.kind.is_some() && self.missing_imports.is_empty()
    }
}

impl Runtime {
    /// Compiles `wasm` and describes it.
    pub async fn inspect(&self, wasm: &[u8]) -> Result<Inspection, PluginError> {
        let compiled = self.compile("inspect", wasm).await?;
        let engine = self.engine();
        let ty = compiled.component.component_type();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let mut kind = None;
        let mut version = None;
        for e in &exports {
            let Some(rest) = e.strip_prefix("wasm-apiserver:plugin/") else {
                continue;
            };
            let (iface, v) = rest.split_once('@').unwrap_or((rest, ""));
            if let Some(k) = KINDS.iter().find(|(i, _)| *i == iface) {
                kind = Some(*k);
                version = Some(v.to_string());
            }
        }
        // What the linker provides: the plugin package's own interfaces
        // (and its world-level `log`) and WASI preview 2, through which
        // nothing is granted: no preopened directory, socket or variable.
        let mut missing = Vec::new();
        let mut inert = Vec::new();
        for name in &imports {
            if name.starts_with("wasm-apiserver:plugin/") || name == "log" {
                continue;
            }
            let iface = name.split('@').next().unwrap_or(name);
            match iface.split('/').next().unwrap_or_default() {
                "wasi:io" | "wasi:clocks" | "wasi:random" | "wasi:cli" => {}
                "wasi:filesystem" | "wasi:sockets" => inert.push(name.clone()),
                _ => missing.push(name.clone()),
            }
        }
        Ok(Inspection {
            size: wasm.len(),
            sha256: compiled.digest,
            kind,
            version,
            exports,
            imports,
            inert_imports: inert,
            missing_imports: missing,
        })
    }
}
