//! The per-call sandbox: the state a fresh `Store` carries and the WASI
//! context that grants nothing.
//!
//! Every call gets a new [`StoreState`] (components) or
//! `WapcState` (Kubewarden's waPC modules, in the `wapc` module, which
//! link WASI preview 1); both implement [`CallState`], which is all the
//! shared call path needs of them. WASI is linked (Rust `std`, Python and
//! JavaScript guests import it) but the context built by [`sealed_wasi`]
//! holds:
//!
//! * no preopened directories, so every filesystem call fails;
//! * no environment variables and no arguments;
//! * no network: TCP, UDP and name lookup are disabled and every address is
//!   refused;
//! * stdin closed; stdout and stderr captured into a small bounded buffer
//!   (excess is silently dropped), logged at debug level after the call and
//!   used to explain traps (a Rust panic message goes to stderr);
//! * a coarse wall clock (whole seconds) and a coarse monotonic clock
//!   (milliseconds): enough for policies that compare timestamps, too coarse
//!   to time side channels;
//! * the host's random generators (a plugin may need unpredictable values
//!   and randomness grants no authority).
//!
//! Memory is bounded by [`MemoryLimiter`], which also remembers that the
//! guest hit the limit so that the resulting trap is reported as
//! [`PluginError::MemoryExceeded`](crate::PluginError::MemoryExceeded).

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncWrite;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{
    HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

/// Bytes of stdout + stderr kept per call.
const CAPTURE_BYTES: usize = 8 * 1024;
/// Log records a plugin may emit per call; later ones are dropped.
const LOG_RECORDS_PER_CALL: u32 = 64;
/// Longest log message kept, in bytes; longer ones are truncated.
const LOG_MESSAGE_BYTES: usize = 2048;
/// Most table elements a guest may have (funcref tables).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// Severity of a plugin's log record (mirrors WIT `log.level`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// What the shared call path (`PluginCore::run` in the `runtime` module)
/// needs of a call's store state, whatever the kind of module.
pub(crate) trait CallState: Send + Sized + 'static {
    /// A fresh state for one call of `plugin`, with `max_memory_bytes` of
    /// linear memory, stdout and stderr going to `output`; `uid` tags log
    /// records.
    fn new(plugin: Arc<str>, uid: String, max_memory_bytes: u64, output: &Capture) -> Self;

    /// The memory limiter of the store.
    fn limiter(&mut self) -> &mut MemoryLimiter;

    /// Whether the guest tried to grow past its memory limit.
    fn hit_memory_limit(&self) -> bool;

    /// Tags this store's log records with the call's `uid` (a prepared
    /// instance learns it when its call comes).
    fn set_uid(&mut self, uid: &str);
}

/// The WASI context every plugin gets: nothing granted (see the module
/// docs); stdout and stderr go to `output`.
pub(crate) fn sealed_wasi(output: &Capture) -> WasiCtxBuilder {
    let mut builder = WasiCtx::builder();
    builder
        .stdout(output.clone())
        .stderr(output.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .wall_clock(CoarseWallClock)
        .monotonic_clock(CoarseMonotonicClock::new())
        .max_random_size(64 * 1024);
    builder
}

/// The plugin and call a store's log records are tagged with, and how many
/// more records the call may emit.
pub(crate) struct LogTags {
    plugin: Arc<str>,
    uid: String,
    budget: u32,
}

impl LogTags {
    pub(crate) fn new(plugin: Arc<str>, uid: String) -> Self {
        LogTags {
            plugin,
            uid,
            budget: LOG_RECORDS_PER_CALL,
        }
    }

    pub(crate) fn set_uid(&mut self, uid: &str) {
        uid.clone_into(&mut self.uid);
    }

    /// The plugin's name.
    pub(crate) fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Logs one record of the guest, bounded in number and size.
    pub(crate) fn log(&mut self, level: LogLevel, message: &str, fields: &[(String, String)]) {
        if self.budget == 0 {
            return;
        }
        self.budget -= 1;
        let message = truncate(message, LOG_MESSAGE_BYTES);
        let fields = format!("{fields:?}");
        let fields = truncate(&fields, LOG_MESSAGE_BYTES);
        let (plugin, uid) = (&*self.plugin, &self.uid);
        match level {
            LogLevel::Trace => tracing::trace!(target: "plugin", plugin, uid, fields, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "plugin", plugin, uid, fields, "{message}"),
            LogLevel::Info => tracing::info!(target: "plugin", plugin, uid, fields, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "plugin", plugin, uid, fields, "{message}"),
            LogLevel::Error => tracing::error!(target: "plugin", plugin, uid, fields, "{message}"),
        }
    }
}

/// The data of one component call's `Store`.
pub(crate) struct StoreState {
    /// Built on the guest's first WASI call: most calls make none, and
    /// building one seeds random generators from the OS (measured: about
    /// 0.5 µs of an 11 µs on-demand call).
    wasi: Option<WasiCtx>,
    output: Capture,
    table: ResourceTable,
    limiter: MemoryLimiter,
    tags: LogTags,
    /// What the plugin may read of the cluster (set per call), and what
    /// this call has read so far.
    pub(crate) cluster: Option<Arc<crate::cluster::ClusterAccess>>,
    pub(crate) spent: crate::cluster::Spent,
    /// What a controller may write (set per call), and how many writes
    /// this call has made.
    pub(crate) writes: Option<Arc<crate::writes::WriteAccess>>,
    pub(crate) writes_spent: u32,
}

impl CallState for StoreState {
    fn new(plugin: Arc<str>, uid: String, max_memory_bytes: u64, output: &Capture) -> Self {
        StoreState {
            wasi: None,
            output: output.clone(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(max_memory_bytes),
            tags: LogTags::new(plugin, uid),
            cluster: None,
            spent: Default::default(),
            writes: None,
            writes_spent: 0,
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

impl StoreState {
    /// The call's cluster access, or why there is none.
    pub(crate) fn cluster_access(&self) -> Result<Arc<crate::cluster::ClusterAccess>, String> {
        self.cluster
            .clone()
            .ok_or_else(|| "this plugin has no access to the cluster".to_owned())
    }

    /// Implements the WIT `log.log` import for every world.
    pub(crate) fn log(&mut self, level: LogLevel, message: String, fields: Vec<(String, String)>) {
        self.tags.log(level, &message, &fields);
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let output = &self.output;
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(|| sealed_wasi(output).build()),
            table: &mut self.table,
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes, on a char boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Caps the guest's linear memory and tables, and records a refused growth.
pub(crate) struct MemoryLimiter {
    max_memory_bytes: usize,
    pub(crate) hit_limit: bool,
}

impl MemoryLimiter {
    pub(crate) fn new(max_memory_bytes: u64) -> Self {
        MemoryLimiter {
            max_memory_bytes: usize::try_from(max_memory_bytes).unwrap_or(usize::MAX),
            hit_limit: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory_bytes {
            self.hit_limit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// A bounded in-memory sink for a call's stdout and stderr. Writes never
/// fail; bytes past the capacity are dropped.
#[derive(Clone, Default)]
pub(crate) struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
}

impl Capture {
    /// What the guest wrote, lossily decoded.
    pub(crate) fn text(&self) -> String {
        let buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buf).into_owned()
    }

    fn append(&self, bytes: &[u8]) {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let room = CAPTURE_BYTES.saturating_sub(buf.len());
        buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl AsyncWrite for Capture {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.append(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The wall clock, truncated to whole seconds.
struct CoarseWallClock;

impl HostWallClock for CoarseWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Duration::from_secs(now.as_secs())
    }
}

/// A monotonic clock starting at zero for each call, in whole milliseconds.
struct CoarseMonotonicClock {
    start: Instant,
}

impl CoarseMonotonicClock {
    fn new() -> Self {
        CoarseMonotonicClock {
            start: Instant::now(),
        }
    }
}

impl HostMonotonicClock for CoarseMonotonicClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        let millis = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        millis.saturating_mul(1_000_000)
    }
}
