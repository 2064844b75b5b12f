//! The shared half of every plugin kind: the engine, the compilation cache,
//! the epoch ticker, and [`PluginCore`], which runs one call in a fresh,
//! limited sandbox and classifies how it ended.
//!
//! A plugin kind (the `admission`, `authn` and `authz` modules) adds only its world binding and
//! the conversion of its request and response; loading, limits, concurrency
//! and metrics all come from here.
//!
//! * **Engine**: one per [`Runtime`], with the pooling instance allocator
//!   (bounded by [`RuntimeConfig::max_instances`]) and epoch interruption.
//! * **Epoch ticker**: a thread increments the engine's epoch every
//!   [`RuntimeConfig::epoch_tick`]; it holds only a weak reference, so it ends
//!   once the engine and every plugin compiled by it are gone.
//! * **Preparer**: a thread at nice 19 running a single-threaded tokio
//!   runtime, on which each plugin's prepared instances are made (and used
//!   stores dropped) with CPU time nothing else wants
//!   ([`RuntimeConfig::prepare_in_idle_time`]); it ends with the last
//!   plugin or runtime holding it.
//! * **Memory reset**: the pool restores only the pages a call wrote
//!   ([`RuntimeConfig::reset_written_pages_only`]).
//! * **Compilation cache**: wasmtime's own on-disk cache of compiled
//!   artifacts ([`RuntimeConfig::cache_dir`]). Entries are keyed by a
//!   SHA-256 of the wasm bytes together with the engine's compilation
//!   settings, under a directory named after the wasmtime version, so a
//!   changed setting or upgrade never loads a stale artifact. (Loading
//!   artifacts ourselves with `Component::deserialize_file` would need
//!   `unsafe`, which this workspace forbids; wasmtime's cache performs the
//!   same lookup behind a safe API.)
//! * **Calls**: a permit from the plugin's semaphore
//!   ([`Limits::max_concurrency`], waiting at most [`Limits::queue_timeout`]),
//!   then a new `Store` with a memory limiter and an epoch deadline. Each
//!   epoch tick lets the call yield to tokio; at [`Limits::timeout`] the
//!   deadline callback traps the guest, and a tokio timeout slightly later
//!   drops the call should the guest be blocked in a host call.

use crate::PluginError;
use crate::metrics::{OpMetrics, Registry};
use crate::sandbox::{CallState, Capture, StoreState, truncate};
use crate::types::CacheStats;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{Component, Linker};
use wasmtime::{
    Cache, CacheConfig, Config, Enabled, Engine, InstanceAllocationStrategy, Module,
    PoolingAllocationConfig, Store, Trap, UpdateDeadline,
};

/// How the [`Runtime`] is set up; shared by all plugins it loads.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Where compiled plugins are cached across restarts; `None` disables
    /// the cache (every load compiles).
    pub cache_dir: Option<PathBuf>,
    /// Most plugin instances alive at once, across all plugins; sizes the
    /// pooling allocator. Calls beyond it fail to instantiate.
    pub max_instances: u32,
    /// The largest [`Limits::max_memory_bytes`] any plugin may be given;
    /// sizes each memory slot of the pool.
    pub max_memory_bytes: u64,
    /// Use the pooling allocator (the default). Turn off where virtual
    /// address space is scarce: each pool slot reserves address space.
    pub pooling: bool,
    /// How often the epoch advances: the granularity of timeouts and of
    /// yielding to other tasks.
    pub epoch_tick: Duration,
    /// Instances of each plugin instantiated ahead of need, off the request
    /// path (refilled in the background), so that a call pays only for
    /// the call. Each is used for exactly one call and then dropped, like
    /// an instance made on demand; 0 instantiates on demand only. Across
    /// all plugins at most a quarter of [`RuntimeConfig::max_instances`] are
    /// held prepared, so calls never starve for slots.
    pub prepared_instances: usize,
    /// Prepare instances on a thread of the lowest priority (nice 19), so
    /// that preparing uses only CPU time nothing else wants: under load the
    /// pool runs dry and calls instantiate for themselves, instead of the
    /// preparing competing with the requests. Off, instances are prepared
    /// by tasks on the caller's tokio runtime.
    pub prepare_in_idle_time: bool,
    /// After a call, restore only the pages of the plugin's memory that the
    /// call wrote (found with Linux's `PAGEMAP_SCAN`, kernel 6.7 or newer;
    /// elsewhere this is ignored) instead of rewriting every page the pool
    /// keeps resident. Either way the next call sees the memory exactly as
    /// the component's image defines it.
    pub reset_written_pages_only: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: None,
            max_instances: 128,
            max_memory_bytes: 512 << 20,
            pooling: true,
            epoch_tick: Duration::from_millis(5),
            prepared_instances: 2,
            prepare_in_idle_time: true,
            reset_written_pages_only: true,
        }
    }
}

/// Per-plugin limits, enforced on every call.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Wall-time limit of one call (instantiation included when the call
    /// instantiates; a prepared instance had the same limit for its own
    /// instantiation; queueing excluded).
    pub timeout: Duration,
    /// Most linear memory the plugin may use, in bytes.
    pub max_memory_bytes: u64,
    /// Largest response accepted, in bytes: the sum of the status reason and
    /// message, the patch, the warnings and the audit annotations.
    pub max_output_bytes: usize,
    /// Most calls of this plugin running at once.
    pub max_concurrency: usize,
    /// How long a call may wait for one of the `max_concurrency` slots
    /// before failing with [`PluginError::Busy`].
    pub queue_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(1),
            max_memory_bytes: 64 << 20,
            max_output_bytes: 1 << 20,
            max_concurrency: 16,
            queue_timeout: Duration::from_secs(1),
        }
    }
}

/// The wasm plugin runtime: compiles, caches and runs plugins. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    engine: Engine,
    cache: Option<Cache>,
    metrics: Registry,
    config: RuntimeConfig,
    /// Instances held prepared right now, across all plugins.
    prepared: Arc<PreparedCount>,
    /// Compiled artifacts in use, by the SHA-256 of their bytes.
    artifacts: Arc<Artifacts>,
}

/// The compiled artifacts that loaded plugins use, by the SHA-256 of their
/// bytes (and what they compiled to): loading the same
/// module again (another policy from one module with other settings, a new
/// generation that changed only the configuration) shares the code already
/// mapped instead of mapping a copy from the on-disk cache. An entry lives
/// while a [`Lease`] of it does.
#[derive(Default)]
struct Artifacts(std::sync::Mutex<HashMap<ArtifactKey, (Weak<Lease>, Artifact)>>);

/// The SHA-256 of the bytes and what they were compiled to.
type ArtifactKey = (String, &'static str);

#[derive(Clone)]
enum Artifact {
    Component(Component),
    Module(Module),
}

/// Held by every plugin loaded from one artifact; the last one dropped
/// takes the artifact out of [`Artifacts`].
pub(crate) struct Lease {
    artifacts: Weak<Artifacts>,
    key: ArtifactKey,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(a) = self.artifacts.upgrade() {
            let mut map = a.0.lock().expect("artifacts lock");
            // A new lease of the same bytes may have replaced this one.
            if map
                .get(&self.key)
                .is_some_and(|(w, _)| w.strong_count() == 0)
            {
                map.remove(&self.key);
            }
        }
    }
}

/// How many instances are held prepared across a runtime's plugins, and
/// how many may be.
#[derive(Debug, Default)]
pub(crate) struct PreparedCount {
    held: AtomicUsize,
    limit: usize,
    /// Calls of any plugin that found a prepared instance, and calls that
    /// instantiated on demand.
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    /// Where instances are prepared ([`RuntimeConfig::prepare_in_idle_time`]);
    /// `None`: on the caller's tokio runtime.
    pub(crate) preparer: Option<tokio::runtime::Handle>,
    /// Dropped with the last plugin or runtime holding this budget: ends
    /// the preparer thread (a plugin may outlive its `Runtime` handle).
    _stop_preparer: Option<tokio::sync::oneshot::Sender<()>>,
}

impl PreparedCount {
    /// Takes one of the budget; false when it is spent.
    pub(crate) fn reserve(&self) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives one back (its instance was used or dropped).
    pub(crate) fn release(&self) {
        self.held.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Runtime {
    /// Creates the engine (and the cache directory) and starts the epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, PluginError> {
        let engine_err =
            |what: &str, e: wasmtime::Error| PluginError::Engine(format!("{what}: {e:#}"));
        let mut wasm = Config::new();
        wasm.epoch_interruption(true).wasm_component_model(true);
        // No component-model concurrency (`call_concurrent`, streams,
        // futures): our worlds are synchronous functions called with
        // `call_async` (for epoch yields). With it on, every `Store` carries
        // the concurrent-task state, and dropping one resumes its parked
        // worker fiber with a "future dropped" error, whose creation also
        // captures a backtrace when RUST_BACKTRACE is set: measured, that
        // halved the calls/s of 16 concurrent instantiate + validate.
        wasm.concurrency_support(false);
        let cache = match &config.cache_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    PluginError::Engine(format!("cache directory {}: {e}", dir.display()))
                })?;
                let mut cache_config = CacheConfig::new();
                cache_config.with_directory(dir);
                let cache = Cache::new(cache_config).map_err(|e| engine_err("cache", e))?;
                wasm.cache(Some(cache.clone()));
                Some(cache)
            }
            None => None,
        };
        if config.pooling {
            let n = config.max_instances.max(1);
            let max_memory = usize::try_from(config.max_memory_bytes).map_err(|_| {
                PluginError::Engine("max_memory_bytes does not fit in usize".to_owned())
            })?;
            let mut pool = PoolingAllocationConfig::new();
            pool.total_component_instances(n)
                .total_core_instances(n.saturating_mul(8))
                .total_memories(n.saturating_mul(2))
                .total_tables(n.saturating_mul(4))
                .total_stacks(n)
                .max_memory_size(max_memory)
                // Reset the first pages of a slot with memset instead of
                // madvise: the madvise and the page faults after it
                // dominated the per-call cost of a fresh instance. Guests
                // that link a small stack (ours: 64 KiB, see
                // plugins/.cargo/config.toml) keep their stack, data and
                // early heap in these pages, so a call faults in nothing
                // and the madvise of the rest finds nothing mapped; then
                // decommitting at once (no batching) beats batching, since
                // the next call reuses the same, cache-warm slot.
                .linear_memory_keep_resident(128 << 10)
                .table_keep_resident(64 << 10)
                .async_stack_keep_resident(64 << 10)
                .decommit_batch_size(1);
            if config.reset_written_pages_only {
                // Measured (the admission bench, side by side): see
                // ARCHITECTURE.md, "Plugin call cost".
                pool.pagemap_scan(Enabled::Auto);
            }
            wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&wasm).map_err(|e| engine_err("engine", e))?;
        spawn_epoch_ticker(&engine, config.epoch_tick);
        let (preparer, stop_preparer) =
            if config.prepared_instances > 0 && config.prepare_in_idle_time {
                let (handle, stop) = spawn_preparer()?;
                (Some(handle), Some(stop))
            } else {
                (None, None)
            };
        let prepared = Arc::new(PreparedCount {
            held: AtomicUsize::new(0),
            limit: (config.max_instances as usize / 4).max(1),
            preparer,
            _stop_preparer: stop_preparer,
            ..PreparedCount::default()
        });
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                engine,
                cache,
                metrics: Registry::default(),
                config,
                prepared,
                artifacts: Default::default(),
            }),
        })
    }

    /// How many plugin instances are held prepared right now, across all
    /// plugins (each waits for exactly one call).
    pub fn prepared_instances(&self) -> usize {
        self.inner.prepared.held.load(Ordering::Acquire)
    }

    /// The tokio runtime of the thread that prepares instances at the
    /// lowest priority ([`RuntimeConfig::prepare_in_idle_time`]), for other
    /// work that should use only CPU time nothing else wants; `None` when
    /// instances are not prepared there.
    pub fn idle_time(&self) -> Option<tokio::runtime::Handle> {
        self.inner.prepared.preparer.clone()
    }

    /// Calls of any plugin so far that found a prepared instance, and calls
    /// that instantiated on demand.
    pub fn prepared_calls(&self) -> (u64, u64) {
        let p = &self.inner.prepared;
        (
            p.hits.load(Ordering::Relaxed),
            p.misses.load(Ordering::Relaxed),
        )
    }

    /// The budget of prepared instances and how many each plugin keeps.
    pub(crate) fn prepared(&self) -> (Arc<PreparedCount>, usize) {
        (
            self.inner.prepared.clone(),
            self.inner.config.prepared_instances,
        )
    }

    /// The metrics of every plugin loaded so far, in the Prometheus text
    /// format: calls, denials, timeouts, errors by kind and a latency
    /// histogram, labelled by plugin, kind and operation; plus the
    /// compilation cache's hits and misses.
    pub fn metrics_text(&self) -> String {
        let stats = self.cache_stats();
        self.inner.metrics.render(stats.hits, stats.misses)
    }

    /// Hits and misses of the on-disk compilation cache (zero without a cache).
    pub fn cache_stats(&self) -> CacheStats {
        match &self.inner.cache {
            Some(cache) => CacheStats {
                hits: cache.cache_hits(),
                misses: cache.cache_misses(),
            },
            None => CacheStats::default(),
        }
    }

    pub(crate) fn metrics(&self) -> &Registry {
        &self.inner.metrics
    }

    /// A linker with WASI (granting nothing, see [`crate::sandbox`]); the
    /// plugin kind adds its world's imports.
    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn linker(&self) -> Result<Linker<StoreState>, PluginError> {
        let mut linker = Linker::new(&self.inner.engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| PluginError::Engine(format!("linking WASI: {e:#}")))?;
        Ok(linker)
    }

    /// Compiles `wasm` (or loads it from the cache) off the async executor.
    pub(crate) async fn compile(&self, name: &str, wasm: &[u8]) -> Result<Compiled, PluginError> {
        let (artifact, digest, lease) = self
            .compile_with(name, wasm, "plugin compiled", |e, b| {
                Component::new(e, b).map(Artifact::Component)
            })
            .await?;
        let Artifact::Component(component) = artifact else {
            unreachable!("a component's entry holds a component")
        };
        Ok(Compiled {
            component,
            digest,
            lease,
        })
    }

    /// As [`Runtime::compile`], for a core wasm module (same engine, same
    /// on-disk cache).
    pub(crate) async fn compile_module(
        &self,
        name: &str,
        wasm: &[u8],
    ) -> Result<CompiledModule, PluginError> {
        let (artifact, digest, lease) = self
            .compile_with(name, wasm, "core module compiled", |e, b| {
                Module::new(e, b).map(Artifact::Module)
            })
            .await?;
        let Artifact::Module(module) = artifact else {
            unreachable!("a core module's entry holds a core module")
        };
        Ok(CompiledModule {
            module,
            digest,
            lease,
        })
    }

    /// The artifact of `wasm` a loaded plugin uses already, else `compile`
    /// run on a blocking thread (logging whether the on-disk cache served
    /// it); with the bytes' sha256 and a lease of the shared artifact.
    async fn compile_with(
        &self,
        name: &str,
        wasm: &[u8],
        what: &'static str,
        compile: fn(&wasmtime::Engine, Vec<u8>) -> wasmtime::Result<Artifact>,
    ) -> Result<(Artifact, String, Arc<Lease>), PluginError> {
        let digest = hex(&Sha256::digest(wasm));
        let key = (digest.clone(), what);
        let shared = {
            let map = self.inner.artifacts.0.lock().expect("artifacts lock");
            map.get(&key)
                .and_then(|(lease, artifact)| Some((artifact.clone(), lease.upgrade()?)))
        };
        if let Some((artifact, lease)) = shared {
            tracing::info!(plugin = name, sha256 = %digest, "{what}: shared with a loaded plugin");
            return Ok((artifact, digest, lease));
        }
        let engine = self.inner.engine.clone();
        let bytes = wasm.to_vec();
        let hits_before = self.cache_stats().hits;
        let start = Instant::now();
        let artifact = tokio::task::spawn_blocking(move || compile(&engine, bytes))
            .await
            .map_err(|e| PluginError::Engine(format!("compile task: {e}")))?
            .map_err(|e| PluginError::Compile {
                plugin: name.to_owned(),
                message: format!("{e:#}"),
            })?;
        let cached = self.cache_stats().hits > hits_before;
        tracing::info!(
            plugin = name,
            sha256 = %digest,
            cached,
            elapsed_ms = start.elapsed().as_secs_f64() * 1e3,
            "{what}"
        );
        let lease = Arc::new(Lease {
            artifacts: Arc::downgrade(&self.inner.artifacts),
            key: key.clone(),
        });
        self.inner
            .artifacts
            .0
            .lock()
            .expect("artifacts lock")
            .insert(key, (Arc::downgrade(&lease), artifact.clone()));
        Ok((artifact, digest, lease))
    }

    /// The shared part of a loaded plugin, after checking `limits` against
    /// the runtime's configuration.
    pub(crate) fn core(
        &self,
        name: &str,
        digest: String,
        lease: Arc<Lease>,
        limits: Limits,
    ) -> Result<PluginCore, PluginError> {
        if limits.max_memory_bytes > self.inner.config.max_memory_bytes {
            return Err(PluginError::Engine(format!(
                "plugin {name}: max_memory_bytes {} exceeds the runtime's maximum of {}",
                limits.max_memory_bytes, self.inner.config.max_memory_bytes
            )));
        }
        let grace = (self.inner.config.epoch_tick * 4).max(Duration::from_millis(20));
        let name: Arc<str> = name.into();
        Ok(PluginCore {
            sandboxes: Sandboxes {
                engine: self.inner.engine.clone(),
                name: name.clone(),
                max_memory_bytes: limits.max_memory_bytes,
                timeout: limits.timeout,
            },
            name,
            digest,
            _lease: lease,
            permits: Arc::new(Semaphore::new(limits.max_concurrency.max(1))),
            limits,
            grace,
        })
    }
}

/// A compiled core module (a Kubewarden policy) and the SHA-256 of its bytes.
pub(crate) struct CompiledModule {
    pub(crate) module: Module,
    pub(crate) digest: String,
    pub(crate) lease: Arc<Lease>,
}

/// A compiled component and the SHA-256 of its bytes.
pub(crate) struct Compiled {
    pub(crate) component: Component,
    pub(crate) digest: String,
    pub(crate) lease: Arc<Lease>,
}

/// Starts the thread that prepares instances
/// ([`RuntimeConfig::prepare_in_idle_time`]): a single-threaded tokio
/// runtime at the lowest priority, running the refill tasks spawned on the
/// returned handle until the returned sender is dropped.
fn spawn_preparer()
-> Result<(tokio::runtime::Handle, tokio::sync::oneshot::Sender<()>), PluginError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| PluginError::Engine(format!("preparer runtime: {e}")))?;
    let handle = rt.handle().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("wasm-preparer".to_owned())
        .spawn(move || {
            // On Linux a thread's nice value is its own.
            if let Err(e) = rustix::process::nice(19) {
                tracing::warn!("cannot lower the preparer thread's priority: {e}");
            }
            // Returns when the runtime drops the sender; the runtime (and
            // what it was preparing) is dropped here, off any async context.
            let _ = rt.block_on(stopped);
        })
        .map_err(|e| PluginError::Engine(format!("preparer thread: {e}")))?;
    Ok((handle, stop))
}

/// Increments `engine`'s epoch every `tick` for as long as the engine lives.
fn spawn_epoch_ticker(engine: &Engine, tick: Duration) {
    let weak = engine.weak();
    let tick = tick.max(Duration::from_millis(1));
    let spawned = std::thread::Builder::new()
        .name("wasm-epoch-ticker".to_owned())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(tick);
            }
        });
    if let Err(e) = spawned {
        // Without a ticker calls still end: the tokio timeout drops them.
        tracing::error!("cannot start the epoch ticker thread: {e}");
    }
}

/// What the guest said about its death: a Rust panic message (from
/// `panicked at` on, without the backtrace hint), else its last line of output.
fn guest_explanation(output: &str) -> String {
    let useful = |l: &&str| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE");
    match output.rfind("panicked at") {
        Some(at) => output[at..]
            .lines()
            .map(str::trim)
            .filter(useful)
            .collect::<Vec<_>>()
            .join(" "),
        None => output
            .lines()
            .map(str::trim)
            .rfind(useful)
            .unwrap_or_default()
            .to_owned(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Everything a loaded plugin of any kind shares: identity, limits,
/// concurrency cap, and the call sandbox.
pub(crate) struct PluginCore {
    pub(crate) name: Arc<str>,
    pub(crate) digest: String,
    /// Keeps its compiled code shared with plugins loaded from the same
    /// bytes.
    _lease: Arc<Lease>,
    pub(crate) limits: Limits,
    permits: Arc<Semaphore>,
    grace: Duration,
    sandboxes: Sandboxes,
}

/// Makes the fresh stores of one plugin's calls. Cheap to clone (the
/// background refill of prepared instances holds one).
#[derive(Clone)]
pub(crate) struct Sandboxes {
    engine: Engine,
    name: Arc<str>,
    max_memory_bytes: u64,
    timeout: Duration,
}

/// A fresh store for one call and the capture of its stdout/stderr; its
/// state is a component's [`StoreState`] unless said otherwise.
pub(crate) struct Sandbox<S: 'static = StoreState> {
    pub(crate) store: Store<S>,
    output: Capture,
}

impl Sandboxes {
    /// A new store with the plugin's memory limit, its deadline armed
    /// [`Limits::timeout`] from now (instantiation runs guest code too).
    pub(crate) fn make<S: CallState>(&self, uid: &str) -> Sandbox<S> {
        let output = Capture::default();
        let state = S::new(
            self.name.clone(),
            uid.to_owned(),
            self.max_memory_bytes,
            &output,
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| s.limiter());
        arm(&mut store, self.timeout);
        Sandbox { store, output }
    }
}

/// Arms `store`'s epoch deadline `timeout` from now: each epoch tick
/// yields to tokio, and the first tick past the deadline traps the guest.
fn arm<S: 'static>(store: &mut Store<S>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            Err(Trap::Interrupt.into())
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
}

impl PluginCore {
    /// What makes this plugin's stores.
    pub(crate) fn sandboxes(&self) -> &Sandboxes {
        &self.sandboxes
    }

    /// One of the plugin's [`Limits::max_concurrency`] slots, waiting at
    /// most [`Limits::queue_timeout`].
    pub(crate) async fn permit(&self) -> Result<OwnedSemaphorePermit, PluginError> {
        let busy = || PluginError::Busy {
            plugin: self.name.to_string(),
        };
        // A free slot needs no timer (registering one can wake tokio's
        // parked timer driver on another thread).
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok(permit),
            Err(_) => tokio::time::timeout(
                self.limits.queue_timeout,
                self.permits.clone().acquire_owned(),
            )
            .await
            .map_err(|_| busy())?
            .map_err(|_| busy()),
        }
    }

    /// Runs `call` in `sandbox` (fresh, or prepared for exactly this call),
    /// within the plugin's limits; the deadline is re-armed from now.
    ///
    /// `call` receives the store, calls an export (instantiating first when
    /// the sandbox has no instance yet) and hands the store back with the
    /// result, so that a trap can be told apart from a memory-limit death
    /// and explained by the guest's stderr. The used store goes to
    /// `retire` (never to another call): dropping it resets its memory
    /// slot, which the caller may do off the request's path.
    pub(crate) async fn run<S, R, F, Fut>(
        &self,
        uid: &str,
        sandbox: Sandbox<S>,
        call: F,
        retire: impl FnOnce(Store<S>),
    ) -> Result<R, PluginError>
    where
        S: CallState,
        F: FnOnce(Store<S>) -> Fut,
        Fut: Future<Output = (Store<S>, wasmtime::Result<R>)>,
    {
        let Sandbox { mut store, output } = sandbox;
        store.data_mut().set_uid(uid);
        arm(&mut store, self.limits.timeout);
        let timeout = PluginError::Timeout {
            plugin: self.name.to_string(),
            limit: self.limits.timeout,
        };
        let (store, result) = tokio::time::timeout(self.limits.timeout + self.grace, call(store))
            .await
            .map_err(|_| timeout)?;

        let captured = output.text();
        if !captured.is_empty() {
            tracing::debug!(plugin = &*self.name, uid, output = %captured, "plugin stdout/stderr");
        }
        let hit_limit = store.data().hit_memory_limit();
        retire(store);
        result.map_err(|e| self.classify(e, hit_limit, &captured))
    }

    /// Turns a guest failure into a [`PluginError`].
    fn classify(&self, e: wasmtime::Error, hit_memory_limit: bool, output: &str) -> PluginError {
        let plugin = self.name.to_string();
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => PluginError::Timeout {
                plugin,
                limit: self.limits.timeout,
            },
            _ if hit_memory_limit => PluginError::MemoryExceeded {
                plugin,
                limit: self.limits.max_memory_bytes,
            },
            trap => {
                let mut message = match trap {
                    Some(trap) => trap.to_string(),
                    None => format!("{e:#}"),
                };
                let explanation = guest_explanation(output);
                if !explanation.is_empty() {
                    message.push_str(": ");
                    message.push_str(truncate(&explanation, 1024));
                }
                PluginError::Trap { plugin, message }
            }
        }
    }

    /// Records a finished call's latency and outcome; `denied` is whether a
    /// successful call answered with a denial.
    pub(crate) fn record<T>(
        &self,
        metrics: &OpMetrics,
        start: Instant,
        result: &Result<T, PluginError>,
        denied: impl FnOnce(&T) -> bool,
    ) {
        metrics.observe(start.elapsed());
        match result {
            Ok(value) if denied(value) => metrics.denial(),
            Ok(_) => {}
            Err(e) => {
                metrics.error(e.kind());
                tracing::warn!(plugin = &*self.name, error = %e, "plugin call failed");
            }
        }
    }
}
