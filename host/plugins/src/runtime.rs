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
use crate::sandbox::{Capture, StoreState, truncate};
use crate::types::CacheStats;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use wasmtime::component::{Component, Linker};
use wasmtime::{
    Cache, CacheConfig, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store,
    Trap, UpdateDeadline,
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
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: None,
            max_instances: 128,
            max_memory_bytes: 512 << 20,
            pooling: true,
            epoch_tick: Duration::from_millis(5),
        }
    }
}

/// Per-plugin limits, enforced on every call.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Wall-time limit of one call (instantiation included, queueing excluded).
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
            wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&wasm).map_err(|e| engine_err("engine", e))?;
        spawn_epoch_ticker(&engine, config.epoch_tick);
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                engine,
                cache,
                metrics: Registry::default(),
                config,
            }),
        })
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
        let digest = hex(&Sha256::digest(wasm));
        let engine = self.inner.engine.clone();
        let bytes = wasm.to_vec();
        let hits_before = self.cache_stats().hits;
        let start = Instant::now();
        let component = tokio::task::spawn_blocking(move || Component::new(&engine, bytes))
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
            "plugin compiled"
        );
        Ok(Compiled { component, digest })
    }

    /// The shared part of a loaded plugin, after checking `limits` against
    /// the runtime's configuration.
    pub(crate) fn core(
        &self,
        name: &str,
        digest: String,
        limits: Limits,
    ) -> Result<PluginCore, PluginError> {
        if limits.max_memory_bytes > self.inner.config.max_memory_bytes {
            return Err(PluginError::Engine(format!(
                "plugin {name}: max_memory_bytes {} exceeds the runtime's maximum of {}",
                limits.max_memory_bytes, self.inner.config.max_memory_bytes
            )));
        }
        let grace = (self.inner.config.epoch_tick * 4).max(Duration::from_millis(20));
        Ok(PluginCore {
            name: name.into(),
            digest,
            permits: Arc::new(Semaphore::new(limits.max_concurrency.max(1))),
            limits,
            grace,
            engine: self.inner.engine.clone(),
        })
    }
}

/// A compiled component and the SHA-256 of its bytes.
pub(crate) struct Compiled {
    pub(crate) component: Component,
    pub(crate) digest: String,
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
    pub(crate) limits: Limits,
    permits: Arc<Semaphore>,
    grace: Duration,
    engine: Engine,
}

impl PluginCore {
    /// Runs `call` in a fresh store, within the plugin's limits.
    ///
    /// `call` receives the store, instantiates the plugin in it, calls an
    /// export and hands the store back with the result, so that a trap can
    /// be told apart from a memory-limit death and explained by the guest's
    /// stderr.
    pub(crate) async fn run<R, F, Fut>(&self, uid: &str, call: F) -> Result<R, PluginError>
    where
        F: FnOnce(Store<StoreState>) -> Fut,
        Fut: Future<Output = (Store<StoreState>, wasmtime::Result<R>)>,
    {
        let plugin = || self.name.to_string();
        // A free slot needs no timer (registering one can wake tokio's
        // parked timer driver on another thread).
        let _permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::time::timeout(
                self.limits.queue_timeout,
                self.permits.clone().acquire_owned(),
            )
            .await
            .map_err(|_| PluginError::Busy { plugin: plugin() })?
            .map_err(|_| PluginError::Busy { plugin: plugin() })?,
        };

        let output = Capture::default();
        let state = StoreState::new(
            self.name.clone(),
            uid.to_owned(),
            self.limits.max_memory_bytes,
            &output,
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        let deadline = Instant::now() + self.limits.timeout;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Err(Trap::Interrupt.into())
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });

        let timeout = PluginError::Timeout {
            plugin: plugin(),
            limit: self.limits.timeout,
        };
        let (store, result) = tokio::time::timeout(self.limits.timeout + self.grace, call(store))
            .await
            .map_err(|_| timeout)?;

        let captured = output.text();
        if !captured.is_empty() {
            tracing::debug!(plugin = &*self.name, uid, output = %captured, "plugin stdout/stderr");
        }
        result.map_err(|e| self.classify(e, store.data().limiter.hit_limit, &captured))
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
