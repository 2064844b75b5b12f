//! The host side of the waPC protocol, as Kubewarden policies speak it: a
//! core wasm module (`wasm32-wasip1`) that imports the `wapc` module's
//! functions and exports `__guest_call(operation_len, payload_len) -> i32`.
//!
//! One operation is one call on a **fresh instance** (instantiated from the
//! plugin's `InstancePre` in a fresh store, never reused):
//!
//! 1. the host puts the operation name and payload in the store
//!    ([`Exchange`]), instantiates, and runs the module's initialisers the
//!    way waPC hosts do: `_initialize` (a WASI reactor), `_start` (TinyGo;
//!    an exit with status 0 is success), then `wapc_init`, where guests
//!    register their operations;
//! 2. it calls `__guest_call`; the guest fetches the operation and payload
//!    with `__guest_request(op_ptr, payload_ptr)`, runs, and answers with
//!    `__guest_response(ptr, len)` (returning 1) or `__guest_error(ptr, len)`
//!    (returning 0);
//! 3. a guest asking the host for something calls `__host_call(binding,
//!    namespace, operation, payload)`. Two of Kubewarden's capabilities
//!    are answered: `kubewarden/tracing/log` (the SDKs' loggers: the event
//!    goes to the server's log at its level, tagged with the plugin, bounded
//!    like the WIT `log` import) and, for a plugin granted cluster reads
//!    ([`crate::cluster`]), `kubewarden/kubernetes/get_resource`,
//!    `list_resources_by_namespace`, `list_resources_all` and `can_i`. A
//!    success answers 1 and the guest copies the answer with
//!    `__host_response_len`/`__host_response`; anything else answers 0 with
//!    the host error (for other capabilities: "host capability
//!    `<binding>/<namespace>/<operation>` is not available in
//!    wasm-apiserver"), read with `__host_error_len`/`__host_error`.
//!    `__console_log` goes to the server's log too.
//!
//! Every pointer and length the guest hands over is checked against its
//! memory; a bad one traps the guest, never the host. The answer is
//! bounded by [`Limits::max_output_bytes`](crate::Limits::max_output_bytes)
//! (a larger one is not even copied), the guest's error message and names
//! of host calls are truncated. WASI preview 1 is linked with the same
//! nothing-granted context as components ([`sealed_wasi`]).

use crate::PluginError;
use crate::cluster::{ClusterAccess, Spent};
use crate::runtime::{CompiledModule, PluginCore, Runtime};
use crate::sandbox::{CallState, Capture, LogLevel, LogTags, MemoryLimiter, sealed_wasi, truncate};
use std::sync::Arc;
use wasmtime::{
    Caller, Extern, ExternType, Instance, InstancePre, Linker, Memory, Store, ValType, bail,
    format_err,
};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;

/// The import module of the waPC host functions.
const MODULE: &str = "wapc";
/// The guest's entry point.
const GUEST_CALL: &str = "__guest_call";
/// Initialisers run, in this order, when the module exports them.
const STARTERS: [&str; 3] = ["_initialize", "_start", "wapc_init"];
/// Longest binding, namespace or operation name of a host call we read.
const NAME_BYTES: usize = 256;
/// Longest guest error message kept, and longest console line.
const MESSAGE_BYTES: usize = 4096;
/// Largest host-call payload read (a request or a log event).
const MAX_HOST_REQUEST: usize = 64 << 10;

/// The data of one waPC call's `Store`.
pub(crate) struct WapcState {
    wasi: WasiP1Ctx,
    limiter: MemoryLimiter,
    tags: LogTags,
    exchange: Exchange,
}

/// What host and guest hand each other during one operation.
#[derive(Default)]
struct Exchange {
    operation: Vec<u8>,
    payload: Vec<u8>,
    /// Largest answer accepted.
    max_response: usize,
    response: Option<Vec<u8>>,
    error: Option<String>,
    /// The size of an answer that exceeded `max_response` (and was dropped).
    oversized: Option<usize>,
    /// The error of the last host call.
    host_error: Vec<u8>,
    /// The answer of the last host call.
    host_response: Vec<u8>,
    /// What the plugin may read of the cluster, and what this operation
    /// has read so far.
    cluster: Option<Arc<ClusterAccess>>,
    spent: Spent,
}

impl CallState for WapcState {
    fn new(plugin: Arc<str>, uid: String, max_memory_bytes: u64, output: &Capture) -> Self {
        WapcState {
            wasi: sealed_wasi(output).build_p1(),
            limiter: MemoryLimiter::new(max_memory_bytes),
            tags: LogTags::new(plugin, uid),
            exchange: Exchange::default(),
        }
    }

    fn limiter(&mut self) -> &mut MemoryLimiter {
        &mut self.limiter
    }

    fn hit_memory_limit(&self) -> bool {
        self.limiter.hit_limit
    }

    fn set_uid(&mut self, uid: &str) {
        self.tags.set_uid(uid);
    }
}

/// How a waPC operation ended, when the guest did not trap.
#[doc(hidden)]
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// `__guest_call` returned 1 with this `__guest_response`.
    Response(Vec<u8>),
    /// It returned 0, with this `__guest_error` (possibly empty).
    Error(String),
}

/// A loaded waPC module: its core (limits, concurrency, sandboxes) and its
/// pre-instantiated module.
pub(crate) struct Wapc {
    pub(crate) core: PluginCore,
    pre: InstancePre<WapcState>,
    /// The cluster reads its host calls may make.
    pub(crate) cluster: Option<Arc<ClusterAccess>>,
}

impl Runtime {
    /// Links a compiled waPC module: WASI preview 1 (nothing granted) and
    /// the `wapc` host functions; an import of anything else, or a module
    /// without `__guest_call` and a memory, is refused here.
    pub(crate) fn link_wapc(
        &self,
        name: &str,
        compiled: CompiledModule,
        limits: crate::Limits,
    ) -> Result<Wapc, PluginError> {
        let wrong = |message: String| PluginError::WrongWorld {
            plugin: name.to_owned(),
            world: "waPC (Kubewarden policy)",
            message,
        };
        let module = &compiled.module;
        let all_i32 = |types: &mut dyn Iterator<Item = ValType>, n: usize| {
            let types: Vec<ValType> = types.collect();
            types.len() == n && types.iter().all(|t| matches!(t, ValType::I32))
        };
        match module.get_export(GUEST_CALL) {
            Some(ExternType::Func(f))
                if all_i32(&mut f.params(), 2) && all_i32(&mut f.results(), 1) => {}
            Some(_) => return Err(wrong(format!("{GUEST_CALL} is not (i32, i32) -> i32"))),
            None => return Err(wrong(format!("the module exports no {GUEST_CALL}"))),
        }
        if !matches!(module.get_export("memory"), Some(ExternType::Memory(_))) {
            return Err(wrong("the module exports no memory".to_owned()));
        }
        let mut linker = Linker::new(self.engine());
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut WapcState| &mut s.wasi)
            .map_err(|e| PluginError::Engine(format!("linking WASI preview 1: {e:#}")))?;
        add_wapc_to_linker(&mut linker)
            .map_err(|e| PluginError::Engine(format!("linking waPC: {e:#}")))?;
        let pre = linker
            .instantiate_pre(module)
            .map_err(|e| wrong(format!("{e:#}")))?;
        let core = self.core(name, compiled.digest, compiled.lease, limits)?;
        Ok(Wapc {
            core,
            pre,
            cluster: None,
        })
    }
}

impl Wapc {
    /// Runs `operation` with `payload` on a fresh instance, within the
    /// plugin's limits (the instantiation and initialisers included).
    pub(crate) async fn call(
        &self,
        uid: &str,
        operation: &str,
        payload: Vec<u8>,
    ) -> Result<Answer, PluginError> {
        let _permit = self.core.permit().await?;
        let mut sandbox = self.core.sandboxes().make::<WapcState>(uid);
        let (op_len, payload_len) =
            match (i32::try_from(operation.len()), i32::try_from(payload.len())) {
                (Ok(o), Ok(p)) => (o, p),
                _ => {
                    return Err(PluginError::Engine(format!(
                        "waPC payload of {} bytes is too large",
                        payload.len()
                    )));
                }
            };
        sandbox.store.data_mut().exchange = Exchange {
            operation: operation.as_bytes().to_vec(),
            payload,
            max_response: self.core.limits.max_output_bytes,
            cluster: self.cluster.clone(),
            ..Exchange::default()
        };
        let pre = self.pre.clone();
        let answer = self
            .core
            .run(
                uid,
                sandbox,
                move |mut store| async move {
                    let result = async {
                        let instance = pre.instantiate_async(&mut store).await?;
                        start(&instance, &mut store).await?;
                        let guest_call =
                            instance.get_typed_func::<(i32, i32), i32>(&mut store, GUEST_CALL)?;
                        guest_call
                            .call_async(&mut store, (op_len, payload_len))
                            .await
                    }
                    .await;
                    let result = result.map(|ok| (ok, take_answer(&mut store)));
                    (store, result)
                },
                drop,
            )
            .await?;
        let plugin = || self.core.name.to_string();
        match answer {
            (_, Taken::Oversized(size)) => Err(PluginError::OutputTooLarge {
                plugin: plugin(),
                size,
                limit: self.core.limits.max_output_bytes,
            }),
            (1, Taken::Response(r)) => Ok(Answer::Response(r)),
            (1, _) => Err(PluginError::InvalidOutput {
                plugin: plugin(),
                message: format!("{GUEST_CALL} succeeded without a __guest_response"),
            }),
            (_, Taken::Error(e)) => Ok(Answer::Error(e)),
            (_, _) => Ok(Answer::Error(String::new())),
        }
    }
}

/// A bare waPC module, without the Kubewarden protocol on top: what the
/// `wapc` fuzz target drives (`fuzz/targets-lib`). Not part of the API.
#[doc(hidden)]
pub struct WapcModule(Wapc);

impl Runtime {
    /// Compiles and links a waPC module (see [`WapcModule`]).
    #[doc(hidden)]
    pub async fn load_wapc(
        &self,
        name: &str,
        wasm: &[u8],
        limits: crate::Limits,
    ) -> Result<WapcModule, PluginError> {
        let compiled = self.compile_module(name, wasm).await?;
        Ok(WapcModule(self.link_wapc(name, compiled, limits)?))
    }
}

impl WapcModule {
    /// Runs `operation` with `payload` on a fresh instance.
    #[doc(hidden)]
    pub async fn call(&self, operation: &str, payload: Vec<u8>) -> Result<Answer, PluginError> {
        self.0.call("fuzz", operation, payload).await
    }
}

/// What the guest left in the exchange.
enum Taken {
    Response(Vec<u8>),
    Error(String),
    Oversized(usize),
    Nothing,
}

fn take_answer(store: &mut Store<WapcState>) -> Taken {
    let exchange = std::mem::take(&mut store.data_mut().exchange);
    match exchange {
        Exchange {
            oversized: Some(size),
            ..
        } => Taken::Oversized(size),
        Exchange {
            response: Some(r), ..
        } => Taken::Response(r),
        Exchange { error: Some(e), .. } => Taken::Error(e),
        _ => Taken::Nothing,
    }
}

/// Runs the initialisers the module exports (see [`STARTERS`]).
async fn start(instance: &Instance, store: &mut Store<WapcState>) -> wasmtime::Result<()> {
    for name in STARTERS {
        let Some(func) = instance.get_func(&mut *store, name) else {
            continue;
        };
        let func = func.typed::<(), ()>(&*store)?;
        if let Err(e) = func.call_async(&mut *store, ()).await {
            // TinyGo's `main` ends in `proc_exit(0)`.
            if e.downcast_ref::<I32Exit>().is_some_and(|exit| exit.0 == 0) {
                continue;
            }
            return Err(e);
        }
    }
    Ok(())
}

/// The guest's exported memory.
fn memory(caller: &mut Caller<'_, WapcState>) -> wasmtime::Result<Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => bail!("the waPC guest exports no memory"),
    }
}

/// The guest range `ptr..ptr + len`, checked against its memory.
fn range(
    caller: &mut Caller<'_, WapcState>,
    ptr: i32,
    len: i32,
) -> wasmtime::Result<(Memory, std::ops::Range<usize>)> {
    let mem = memory(caller)?;
    // waPC passes 32-bit addresses and lengths as i32.
    let start = ptr as u32 as usize;
    let end = start
        .checked_add(len as u32 as usize)
        .filter(|end| *end <= mem.data_size(&*caller))
        .ok_or_else(|| format_err!("waPC guest passed a range outside its memory"))?;
    Ok((mem, start..end))
}

/// Copies at most `max` bytes of the guest range `ptr..ptr + len`.
fn read(
    caller: &mut Caller<'_, WapcState>,
    ptr: i32,
    len: i32,
    max: usize,
) -> wasmtime::Result<Vec<u8>> {
    let (mem, r) = range(caller, ptr, len)?;
    let end = r.end.min(r.start.saturating_add(max));
    Ok(mem.data(&*caller)[r.start..end].to_vec())
}

/// Like [`read`], lossily decoded and truncated to `max` bytes.
fn read_text(
    caller: &mut Caller<'_, WapcState>,
    ptr: i32,
    len: i32,
    max: usize,
) -> wasmtime::Result<String> {
    let bytes = read(caller, ptr, len, max)?;
    Ok(truncate(&String::from_utf8_lossy(&bytes), max).to_owned())
}

/// Writes `bytes` to the guest at `ptr`.
fn write(caller: &mut Caller<'_, WapcState>, ptr: i32, bytes: &[u8]) -> wasmtime::Result<()> {
    let mem = memory(caller)?;
    mem.write(&mut *caller, ptr as u32 as usize, bytes)
        .map_err(|_| format_err!("waPC guest passed a buffer outside its memory"))
}

/// A length for the guest: every buffer here is far below 2 GiB.
fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Adds the `wapc` host functions to `linker`.
fn add_wapc_to_linker(linker: &mut Linker<WapcState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        MODULE,
        "__guest_request",
        |mut caller: Caller<'_, WapcState>, op_ptr: i32, ptr: i32| -> wasmtime::Result<()> {
            let operation = std::mem::take(&mut caller.data_mut().exchange.operation);
            let payload = std::mem::take(&mut caller.data_mut().exchange.payload);
            write(&mut caller, ptr, &payload)?;
            write(&mut caller, op_ptr, &operation)?;
            let exchange = &mut caller.data_mut().exchange;
            exchange.operation = operation;
            exchange.payload = payload;
            Ok(())
        },
    )?;
    linker.func_wrap(
        MODULE,
        "__guest_response",
        |mut caller: Caller<'_, WapcState>, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let (_, r) = range(&mut caller, ptr, len)?;
            let max = caller.data().exchange.max_response;
            if r.len() > max {
                caller.data_mut().exchange.oversized = Some(r.len());
                return Ok(());
            }
            let bytes = read(&mut caller, ptr, len, max)?;
            caller.data_mut().exchange.response = Some(bytes);
            Ok(())
        },
    )?;
    linker.func_wrap(
        MODULE,
        "__guest_error",
        |mut caller: Caller<'_, WapcState>, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let message = read_text(&mut caller, ptr, len, MESSAGE_BYTES)?;
            caller.data_mut().exchange.error = Some(message);
            Ok(())
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "__host_call",
        |mut caller: Caller<'_, WapcState>,
         (
            binding_ptr,
            binding_len,
            namespace_ptr,
            namespace_len,
            operation_ptr,
            operation_len,
            payload_ptr,
            payload_len,
        ): (i32, i32, i32, i32, i32, i32, i32, i32)| {
            Box::new(async move {
                let binding = read_text(&mut caller, binding_ptr, binding_len, NAME_BYTES)?;
                let namespace = read_text(&mut caller, namespace_ptr, namespace_len, NAME_BYTES)?;
                let operation = read_text(&mut caller, operation_ptr, operation_len, NAME_BYTES)?;
                let payload = read(&mut caller, payload_ptr, payload_len, MAX_HOST_REQUEST)?;
                let answer = host_call(&mut caller, &binding, &namespace, &operation, &payload).await;
                let exchange = &mut caller.data_mut().exchange;
                match answer {
                    Ok(bytes) => {
                        exchange.host_response = bytes;
                        exchange.host_error.clear();
                        Ok(1)
                    }
                    Err(error) => {
                        tracing::debug!(plugin = %caller.data().tags.plugin(), %error, "waPC host call failed");
                        let exchange = &mut caller.data_mut().exchange;
                        exchange.host_response.clear();
                        exchange.host_error = error.into_bytes();
                        Ok(0)
                    }
                }
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "__host_response",
        |mut caller: Caller<'_, WapcState>, ptr: i32| -> wasmtime::Result<()> {
            let response = std::mem::take(&mut caller.data_mut().exchange.host_response);
            write(&mut caller, ptr, &response)?;
            caller.data_mut().exchange.host_response = response;
            Ok(())
        },
    )?;
    linker.func_wrap(
        MODULE,
        "__host_response_len",
        |caller: Caller<'_, WapcState>| -> i32 {
            len_i32(caller.data().exchange.host_response.len())
        },
    )?;
    linker.func_wrap(
        MODULE,
        "__host_error",
        |mut caller: Caller<'_, WapcState>, ptr: i32| -> wasmtime::Result<()> {
            let error = std::mem::take(&mut caller.data_mut().exchange.host_error);
            write(&mut caller, ptr, &error)?;
            caller.data_mut().exchange.host_error = error;
            Ok(())
        },
    )?;
    linker.func_wrap(
        MODULE,
        "__host_error_len",
        |caller: Caller<'_, WapcState>| -> i32 { len_i32(caller.data().exchange.host_error.len()) },
    )?;
    linker.func_wrap(
        MODULE,
        "__console_log",
        |mut caller: Caller<'_, WapcState>, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let line = read_text(&mut caller, ptr, len, MESSAGE_BYTES)?;
            caller.data_mut().tags.log(LogLevel::Info, &line, &[]);
            Ok(())
        },
    )?;
    Ok(())
}

/// Answers one `__host_call`: Kubewarden's `tracing/log` (the line in the
/// server's log, at its level, tagged with the plugin), its
/// `kubernetes/*` reads (when the plugin has cluster access), and the
/// "not available" error for everything else.
async fn host_call(
    caller: &mut Caller<'_, WapcState>,
    binding: &str,
    namespace: &str,
    operation: &str,
    payload: &[u8],
) -> Result<Vec<u8>, String> {
    match (binding, namespace) {
        ("kubewarden", "tracing") if operation == "log" => {
            log_event(&mut caller.data_mut().tags, payload);
            Ok(Vec::new())
        }
        ("kubewarden", "kubernetes") => {
            let Some(access) = caller.data().exchange.cluster.clone() else {
                return Err(host_call_error(binding, namespace, operation));
            };
            let mut spent = std::mem::take(&mut caller.data_mut().exchange.spent);
            let answer = access.kubewarden(operation, payload, &mut spent).await;
            caller.data_mut().exchange.spent = spent;
            answer
        }
        _ => Err(host_call_error(binding, namespace, operation)),
    }
}

/// A Kubewarden SDK log event (`{"level", "message", fields...}`) as a
/// line of the server's log.
fn log_event(tags: &mut LogTags, payload: &[u8]) {
    let event: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(payload).unwrap_or_default();
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let level = match event.get("level").and_then(|l| l.as_str()) {
        Some("trace") => LogLevel::Trace,
        Some("debug") => LogLevel::Debug,
        Some("warning" | "warn") => LogLevel::Warn,
        Some("error") => LogLevel::Error,
        _ => LogLevel::Info,
    };
    let message = event.get("message").map(text).unwrap_or_default();
    let fields: Vec<(String, String)> = event
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "level" | "message" | "line" | "column" | "file"))
        .map(|(k, v)| (k.clone(), text(v)))
        .collect();
    tags.log(level, &message, &fields);
}

/// The error every `__host_call` answers.
pub(crate) fn host_call_error(binding: &str, namespace: &str, operation: &str) -> String {
    format!("host capability {binding}/{namespace}/{operation} is not available in wasm-apiserver")
}

#[cfg(test)]
mod tests {
    use super::host_call_error;

    #[test]
    fn host_calls_name_the_capability() {
        assert_eq!(
            host_call_error("kubewarden", "kubernetes", "list_resources_by_namespace"),
            "host capability kubewarden/kubernetes/list_resources_by_namespace \
             is not available in wasm-apiserver"
        );
    }
}
