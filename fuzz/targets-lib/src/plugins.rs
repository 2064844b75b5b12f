//! Targets over what crosses the plugin boundary (feature `plugins`): the
//! admission request lowered into a component, and the host side of the
//! waPC protocol. Both run the real runtime (wasmtime) on one guest loaded
//! once per process.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use wasm_apiserver_plugins::{
    AdmissionPlugin, AdmissionRequest, Limits, Operation, Runtime, RuntimeConfig, WapcAnswer,
    WapcModule,
};

/// The guests, loaded once, and the executor their calls run on.
struct Guests {
    executor: tokio::runtime::Runtime,
    echo: AdmissionPlugin,
    wapc: WapcModule,
}

/// Largest answer the waPC guest may give (small, so the fuzzer reaches
/// the limit).
const WAPC_MAX_OUTPUT: usize = 4096;

/// Generous wall-time limits: an instrumented build on a loaded machine
/// must not turn a slow call into a finding.
fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(20),
        queue_timeout: Duration::from_secs(20),
        ..Limits::default()
    }
}

fn guests() -> &'static Guests {
    static GUESTS: OnceLock<Guests> = OnceLock::new();
    GUESTS.get_or_init(|| {
        let executor = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let (echo, wapc) = executor.block_on(async {
            // No pool, no instances prepared in the background: each call
            // instantiates afresh, the same way every time.
            let runtime = Runtime::new(RuntimeConfig {
                pooling: false,
                prepared_instances: 0,
                prepare_in_idle_time: false,
                ..RuntimeConfig::default()
            })
            .expect("plugin runtime");
            let echo = runtime
                .load_admission("echo-request", &fixture("echo_request"), "", limits())
                .await
                .expect("load echo-request");
            let module = wat::parse_str(WAPC_GUEST).expect("the waPC guest's text");
            let wapc = runtime
                .load_wapc(
                    "wapc-script",
                    &module,
                    Limits {
                        max_output_bytes: WAPC_MAX_OUTPUT,
                        ..limits()
                    },
                )
                .await
                .expect("load the waPC guest");
            (echo, wapc)
        });
        Guests {
            executor,
            echo,
            wapc,
        }
    })
}

/// A first-party fixture component, built by `scripts/build-plugins.sh`
/// (run here when missing).
fn fixture(name: &str) -> Vec<u8> {
    let repo = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let path = repo.join(format!("plugins/target/wasm32-wasip2/release/{name}.wasm"));
    if !path.exists() {
        let out = std::process::Command::new("bash")
            .arg(repo.join("scripts/build-plugins.sh"))
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .output()
            .expect("run scripts/build-plugins.sh");
        assert!(
            out.status.success(),
            "scripts/build-plugins.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ------------------------------------------------------------- admission

/// An admission request (its JSON, as webhooks write it) lowered into the
/// `echo-request` component, whose denial echoes what it was given: every
/// echoed attribute (user, uid, groups, operation, resource, namespace,
/// name, dry run) arrives unchanged, in both phases, and the call never
/// fails (the rest of the request, objects included, only has to cross).
pub fn admission_request(data: &[u8]) {
    let Ok(request) = serde_json::from_slice::<AdmissionRequest>(data) else {
        return;
    };
    let guests = guests();
    for phase in ["validate", "mutate"] {
        let call = async {
            match phase {
                "validate" => guests.echo.validate(&request).await,
                _ => guests.echo.mutate(&request).await,
            }
        };
        let response = guests
            .executor
            .block_on(call)
            .unwrap_or_else(|e| panic!("{phase} failed: {e}"));
        assert!(!response.allowed, "echo-request allowed: {response:?}");
        assert!(response.patch.is_none(), "{response:?}");
        let status = response.status.expect("a denial's status");
        assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
        let echoed: Value = status
            .message
            .strip_prefix("echo ")
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_else(|| panic!("not an echo: {:?}", status.message));
        let operation = match request.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        };
        let want = json!({
            "phase": phase,
            "user": request.user.username,
            "uid": request.user.uid,
            "groups": request.user.groups,
            "operation": operation,
            "resource": request.resource.resource,
            "namespace": request.namespace,
            "name": request.name,
            "dryRun": request.dry_run,
        });
        assert_eq!(echoed, want, "the guest saw another request");
    }
}

// ------------------------------------------------------------------ waPC

/// Guest memory: two pages, fixed.
const MEMORY: usize = 2 << 16;
/// Where the guest asks for the operation name and its payload (the script).
const OP_AT: usize = 0;
const SCRIPT_AT: usize = 256;
/// Host-side bounds of `wapc.rs`, mirrored by the model.
const NAME_BYTES: usize = 256;
const MESSAGE_BYTES: usize = 4096;
const MAX_HOST_REQUEST: usize = 64 << 10;

/// A waPC guest that runs its payload as a script of host calls, so the
/// fuzzer chooses every pointer, length and name the host is handed. It
/// asks for the operation and payload at `OP_AT` and `SCRIPT_AT`, then
/// runs the instruction at `pc` (from `SCRIPT_AT` to the payload's end):
/// an opcode byte and its i32 arguments (little-endian) right after it:
/// 0 `__guest_request(a, b)`, 1 `__guest_response(a, b)`, 2
/// `__guest_error(a, b)`, 3 `__host_call(a..h)` (result dropped), 4
/// `__host_response(a)`, 5 `i32.store a, __host_response_len()`, 6
/// `__host_error(a)`, 7 `i32.store a, __host_error_len()`, 8
/// `__console_log(a, b)`, 9 return `a`; any other byte is skipped. The end
/// of the script returns 1. The instructions are read from memory as it is
/// when they run (a call may overwrite the script).
const WAPC_GUEST: &str = r#"
(module
  (import "wapc" "__guest_request" (func $guest_request (param i32 i32)))
  (import "wapc" "__guest_response" (func $guest_response (param i32 i32)))
  (import "wapc" "__guest_error" (func $guest_error (param i32 i32)))
  (import "wapc" "__host_call"
    (func $host_call (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wapc" "__host_response" (func $host_response (param i32)))
  (import "wapc" "__host_response_len" (func $host_response_len (result i32)))
  (import "wapc" "__host_error" (func $host_error (param i32)))
  (import "wapc" "__host_error_len" (func $host_error_len (result i32)))
  (import "wapc" "__console_log" (func $console_log (param i32 i32)))
  (memory (export "memory") 2 2)
  ;; argument $n of the instruction at $pc
  (func $arg (param $pc i32) (param $n i32) (result i32)
    (i32.load align=1
      (i32.add (i32.add (local.get $pc) (i32.const 1))
               (i32.shl (local.get $n) (i32.const 2)))))
  (func (export "__guest_call") (param $op_len i32) (param $payload_len i32) (result i32)
    (local $pc i32) (local $end i32)
    (call $guest_request (i32.const 0) (i32.const 256))
    (local.set $pc (i32.const 256))
    (local.set $end (i32.add (i32.const 256) (local.get $payload_len)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $pc) (local.get $end)))
        (block $skip
        (block $ret
        (block $log
        (block $herrlen
        (block $herr
        (block $hresplen
        (block $hresp
        (block $hcall
        (block $gerr
        (block $gresp
        (block $greq
          (br_table $greq $gresp $gerr $hcall $hresp $hresplen $herr $herrlen $log $ret $skip
            (i32.load8_u (local.get $pc))))
        ;; 0
        (call $guest_request (call $arg (local.get $pc) (i32.const 0))
                             (call $arg (local.get $pc) (i32.const 1)))
        (local.set $pc (i32.add (local.get $pc) (i32.const 9)))
        (br $next))
        ;; 1
        (call $guest_response (call $arg (local.get $pc) (i32.const 0))
                              (call $arg (local.get $pc) (i32.const 1)))
        (local.set $pc (i32.add (local.get $pc) (i32.const 9)))
        (br $next))
        ;; 2
        (call $guest_error (call $arg (local.get $pc) (i32.const 0))
                           (call $arg (local.get $pc) (i32.const 1)))
        (local.set $pc (i32.add (local.get $pc) (i32.const 9)))
        (br $next))
        ;; 3
        (drop (call $host_call
          (call $arg (local.get $pc) (i32.const 0)) (call $arg (local.get $pc) (i32.const 1))
          (call $arg (local.get $pc) (i32.const 2)) (call $arg (local.get $pc) (i32.const 3))
          (call $arg (local.get $pc) (i32.const 4)) (call $arg (local.get $pc) (i32.const 5))
          (call $arg (local.get $pc) (i32.const 6)) (call $arg (local.get $pc) (i32.const 7))))
        (local.set $pc (i32.add (local.get $pc) (i32.const 33)))
        (br $next))
        ;; 4
        (call $host_response (call $arg (local.get $pc) (i32.const 0)))
        (local.set $pc (i32.add (local.get $pc) (i32.const 5)))
        (br $next))
        ;; 5
        (i32.store align=1 (call $arg (local.get $pc) (i32.const 0)) (call $host_response_len))
        (local.set $pc (i32.add (local.get $pc) (i32.const 5)))
        (br $next))
        ;; 6
        (call $host_error (call $arg (local.get $pc) (i32.const 0)))
        (local.set $pc (i32.add (local.get $pc) (i32.const 5)))
        (br $next))
        ;; 7
        (i32.store align=1 (call $arg (local.get $pc) (i32.const 0)) (call $host_error_len))
        (local.set $pc (i32.add (local.get $pc) (i32.const 5)))
        (br $next))
        ;; 8
        (call $console_log (call $arg (local.get $pc) (i32.const 0))
                           (call $arg (local.get $pc) (i32.const 1)))
        (local.set $pc (i32.add (local.get $pc) (i32.const 9)))
        (br $next))
        ;; 9
        (return (call $arg (local.get $pc) (i32.const 0))))
        ;; anything else
        (local.set $pc (i32.add (local.get $pc) (i32.const 1)))
        (br $next)))
    (i32.const 1)))
"#;

/// How a call should end, as the model of `wapc.rs` predicts it.
#[derive(Debug, PartialEq)]
enum Expected {
    Response(Vec<u8>),
    Error(String),
    /// The guest trapped (a pointer outside its memory).
    Trap,
    /// `__guest_call` returned 1 without a response.
    NoResponse,
    /// The response was larger than the limit.
    TooLarge(usize),
}

/// The host side of waPC as `wapc.rs` implements it, over a model of the
/// guest's memory, running the guest's script (see [`WAPC_GUEST`]).
struct Model {
    memory: Vec<u8>,
    operation: Vec<u8>,
    payload: Vec<u8>,
    response: Option<Vec<u8>>,
    error: Option<String>,
    oversized: Option<usize>,
    host_response: Vec<u8>,
    host_error: Vec<u8>,
}

/// A guest pointer outside its memory: the guest traps.
struct Trap;

impl Model {
    fn range(&self, ptr: i32, len: i32) -> Result<std::ops::Range<usize>, Trap> {
        let start = ptr as u32 as usize;
        let end = start
            .checked_add(len as u32 as usize)
            .filter(|end| *end <= self.memory.len())
            .ok_or(Trap)?;
        Ok(start..end)
    }

    fn read(&self, ptr: i32, len: i32, max: usize) -> Result<Vec<u8>, Trap> {
        let r = self.range(ptr, len)?;
        let end = r.end.min(r.start.saturating_add(max));
        Ok(self.memory[r.start..end].to_vec())
    }

    fn read_text(&self, ptr: i32, len: i32, max: usize) -> Result<String, Trap> {
        let bytes = self.read(ptr, len, max)?;
        let text = String::from_utf8_lossy(&bytes);
        let mut end = text.len().min(max);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Ok(text[..end].to_owned())
    }

    fn write(&mut self, ptr: i32, bytes: &[u8]) -> Result<(), Trap> {
        let start = ptr as u32 as usize;
        let end = start
            .checked_add(bytes.len())
            .filter(|end| *end <= self.memory.len())
            .ok_or(Trap)?;
        self.memory[start..end].copy_from_slice(bytes);
        Ok(())
    }

    fn guest_request(&mut self, op_ptr: i32, ptr: i32) -> Result<(), Trap> {
        let (operation, payload) = (self.operation.clone(), self.payload.clone());
        self.write(ptr, &payload)?;
        self.write(op_ptr, &operation)
    }

    fn host_call(&mut self, a: [i32; 8]) -> Result<(), Trap> {
        let binding = self.read_text(a[0], a[1], NAME_BYTES)?;
        let namespace = self.read_text(a[2], a[3], NAME_BYTES)?;
        let operation = self.read_text(a[4], a[5], NAME_BYTES)?;
        self.read(a[6], a[7], MAX_HOST_REQUEST)?;
        if (binding.as_str(), namespace.as_str(), operation.as_str())
            == ("kubewarden", "tracing", "log")
        {
            self.host_response = Vec::new();
            self.host_error.clear();
        } else {
            // No cluster access is granted: every other capability,
            // `kubewarden/kubernetes/*` included, is not available.
            self.host_response.clear();
            self.host_error = format!(
                "host capability {binding}/{namespace}/{operation} is not available in wasm-apiserver"
            )
            .into_bytes();
        }
        Ok(())
    }

    fn arg(&self, pc: usize, n: usize) -> Result<i32, Trap> {
        let at = pc + 1 + 4 * n;
        let bytes = self.memory.get(at..at + 4).ok_or(Trap)?;
        Ok(i32::from_le_bytes(bytes.try_into().expect("4 bytes")))
    }

    fn args<const N: usize>(&self, pc: usize) -> Result<[i32; N], Trap> {
        let mut out = [0; N];
        for (n, slot) in out.iter_mut().enumerate() {
            *slot = self.arg(pc, n)?;
        }
        Ok(out)
    }

    fn store_i32(&mut self, ptr: i32, value: usize) -> Result<(), Trap> {
        let value = i32::try_from(value).unwrap_or(i32::MAX);
        self.write(ptr, &value.to_le_bytes())
    }

    /// Runs `__guest_call`; its return value.
    fn guest_call(&mut self) -> Result<i32, Trap> {
        self.guest_request(OP_AT as i32, SCRIPT_AT as i32)?;
        let end = SCRIPT_AT + self.payload.len();
        let mut pc = SCRIPT_AT;
        while pc < end {
            match self.memory[pc] {
                0 => {
                    let [a, b] = self.args(pc)?;
                    self.guest_request(a, b)?;
                    pc += 9;
                }
                1 => {
                    let [ptr, len] = self.args(pc)?;
                    let r = self.range(ptr, len)?;
                    if r.len() > WAPC_MAX_OUTPUT {
                        self.oversized = Some(r.len());
                    } else {
                        self.response = Some(self.read(ptr, len, WAPC_MAX_OUTPUT)?);
                    }
                    pc += 9;
                }
                2 => {
                    let [ptr, len] = self.args(pc)?;
                    self.error = Some(self.read_text(ptr, len, MESSAGE_BYTES)?);
                    pc += 9;
                }
                3 => {
                    let a = self.args::<8>(pc)?;
                    self.host_call(a)?;
                    pc += 33;
                }
                4 => {
                    let [ptr] = self.args(pc)?;
                    let response = self.host_response.clone();
                    self.write(ptr, &response)?;
                    pc += 5;
                }
                5 => {
                    let [ptr] = self.args(pc)?;
                    self.store_i32(ptr, self.host_response.len())?;
                    pc += 5;
                }
                6 => {
                    let [ptr] = self.args(pc)?;
                    let error = self.host_error.clone();
                    self.write(ptr, &error)?;
                    pc += 5;
                }
                7 => {
                    let [ptr] = self.args(pc)?;
                    self.store_i32(ptr, self.host_error.len())?;
                    pc += 5;
                }
                8 => {
                    let [ptr, len] = self.args(pc)?;
                    self.read_text(ptr, len, MESSAGE_BYTES)?;
                    pc += 9;
                }
                9 => return self.args::<1>(pc).map(|[r]| r),
                _ => pc += 1,
            }
        }
        Ok(1)
    }

    /// What the host answers, from the guest's return value and what it
    /// left behind (`Wapc::call`).
    fn expect(mut self) -> Expected {
        let returned = match self.guest_call() {
            Ok(r) => r,
            Err(Trap) => return Expected::Trap,
        };
        if let Some(size) = self.oversized {
            return Expected::TooLarge(size);
        }
        match (returned, self.response.take(), self.error.take()) {
            (1, Some(response), _) => Expected::Response(response),
            (1, None, _) => Expected::NoResponse,
            (_, Some(_), _) => Expected::Error(String::new()),
            (_, None, Some(error)) => Expected::Error(error),
            (_, None, None) => Expected::Error(String::new()),
        }
    }
}

/// The host side of waPC against a model of it: a guest runs the input as
/// a script of calls into the host (every pointer, length, name and
/// payload chosen by the fuzzer), and the answer (the response or error
/// bytes, a trap for a pointer outside the guest's memory, the output
/// limit) must be exactly what the model of `wapc.rs` predicts.
pub fn wapc(data: &[u8]) {
    if data.len() > MEMORY - SCRIPT_AT {
        return;
    }
    let guests = guests();
    let operation = "fuzz";
    let model = Model {
        memory: vec![0; MEMORY],
        operation: operation.as_bytes().to_vec(),
        payload: data.to_vec(),
        response: None,
        error: None,
        oversized: None,
        host_response: Vec::new(),
        host_error: Vec::new(),
    };
    let expected = model.expect();
    let got = guests
        .executor
        .block_on(guests.wapc.call(operation, data.to_vec()));
    use wasm_apiserver_plugins::PluginError as E;
    let got = match got {
        Ok(WapcAnswer::Response(r)) => Expected::Response(r),
        Ok(WapcAnswer::Error(e)) => Expected::Error(e),
        Err(E::Trap { .. }) => Expected::Trap,
        Err(E::InvalidOutput { .. }) => Expected::NoResponse,
        Err(E::OutputTooLarge { size, .. }) => Expected::TooLarge(size),
        Err(other) => panic!("the call failed: {other}"),
    };
    assert_eq!(got, expected);
}
