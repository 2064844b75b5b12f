//! The benchmarks of issues 2, 3, 4 and 5: throughput and watch latency of
//! the API server on the embedded store and on etcd, the cost of admission
//! (wasm plugins vs an HTTPS webhook) and of RBAC authorization, over real
//! HTTP/1.1 on loopback.
//!
//! ```text
//! cargo bench -p wasm-apiserver [--features etcd] --bench apiserver [-- SCENARIO...]
//! ```
//!
//! Scenarios (a name given on the command line runs only the scenarios whose
//! name contains it): `create`, `get`, `list-1k`, `watch` (issue 2, embedded
//! store), `admission` (issue 3), `crd` (issue 10: custom resource creates
//! with a schema, with and without CEL rules, vs ConfigMaps; µs per CEL
//! rule), `conversion` (issue 10: a list of 1,000 custom resources in
//! the storage version, in another version with `conversion: None`, and
//! through the wasm converter), `workloads` (issue 11: Pod creates vs
//! ConfigMaps, defaulting + validation per Pod, the OpenAPI v3 core
//! document), `apply` (issue 12: server-side apply vs PUT of a ConfigMap
//! and a Deployment, managedFields bytes), `gc` (issue 32: the garbage
//! collector with 1,000 owners x 10 dependents: deletion latency, graph
//! bytes per object, idle CPU, creates/s with controllers on vs off),
//! `context` (issue 33: a Kubewarden unique-Ingress-host check listing
//! 10,000 Ingresses in 3,000 Namespaces: added latency per create, RSS and
//! live heap of the loaded policy, µs per host `get` and 100-item `list`;
//! it reads the live heap, so it runs in a bench binary of its own,
//! `apiserver-heap`, see `heap.rs`),
//! `wasm-controllers` (issue 34: namespace-defaults as a wasm controller vs
//! the same logic as a kopf operator, interleaved: namespace-to-third-object
//! latency, CPU per namespace, RSS per loaded controller vs the operator's
//! process; no-op reconciles/s; installs kopf with pip when missing),
//! `policy-audit` (issue 35: a full background audit of 10,000 objects
//! against 5 plugins; creates during it vs a twin server without it; a
//! shadow version's cost on creates; report bytes of an unchanged pass),
//! `flood` and `snapshot` (issue 37: another user's GETs and Lease
//! renewals during a 10x LIST flood under priority and fairness; a
//! snapshot of 100,000 objects, run only when named), `churn` (issue 37:
//! the data file under 1,000 Leases renewed every 2 s, after 1 minute and
//! after `BENCH_CHURN_MINUTES`, default 10; run only when named),
//! `scheduler-plugins` (issue 54: a scheduling cycle in-process with no
//! plugin, a native plugin and the same logic as a wasm component; see
//! `scheduler.rs`), `rbac` (issue 4) and `etcd` (issue 5;
//! needs the `etcd` feature and `etcd` on PATH). Each is a function that returns one or more
//! [`Row`]s; the table at the end is Markdown, so runs can be pasted side by
//! side, and the targets and ratios of each issue follow it. `BENCH_SECONDS`
//! (default 5) sets the measured window of the closed-loop scenarios and
//! `BENCH_CLIENTS` (default 64) their concurrency.
//!
//! * `admission`: creates with no admission plugin, one and five wasm
//!   validating plugins (`require_labels.wasm`, built by
//!   `scripts/build-plugins.sh`), and one HTTPS webhook on loopback doing the
//!   same check in a process of its own (this binary again, see `hook.rs`;
//!   its CPU counts as the server's) and, side by side, on a runtime of this
//!   process; each on a fresh server, with 1 and [`ADMISSION_CLIENTS`]
//!   clients; the one- and five-plugin rows also on a runtime that prepares
//!   no instances (`... on demand`), a ValidatingAdmissionPolicy and a
//!   Kubewarden policy doing the same check, and a no-op plugin
//!   (`allow_all.wasm`: the host's own cost of a call, the floor under any
//!   policy's). Plus the plugin runtime alone:
//!   cold compile, cached load, instantiate + `validate` per call, and
//!   CPU per call from [`ADMISSION_CLIENTS`] tasks at once of a plugin, of
//!   the no-op plugin and of the webhook (client and server), with no API
//!   server around either.
//!   `BENCH_ADMISSION_VARIANTS` (comma-separated variant names, e.g.
//!   `none,5 wasm plugins,5 wasm plugins on demand`) runs only those; the
//!   issue-14 target lines need `none`, both `1 wasm plugin` and
//!   `5 wasm plugins`, and `HTTPS webhook`. `BENCH_ADMISSION_COSTS=0`
//!   skips the plugin-runtime rows and `BENCH_ADMISSION_ONE_CLIENT=0` the
//!   1-client phase (for a profiler attached to the run);
//!   `BENCH_ADMISSION_ROUNDS=N` interleaves the variants in N rounds
//!   instead of 3 (finer, for comparisons on a noisy machine);
//!   `BENCH_ADMISSION_RATE=N` adds a phase where [`ADMISSION_CLIENTS`]
//!   paced clients send N creates/s in all to every variant, and prints
//!   server CPU per create at that equal load.
//! * `rbac`: GETs of one ConfigMap with a bearer token (token file) on two
//!   fresh servers, one authorizing with RBAC (bootstrap policy plus a
//!   RoleBinding of `view` to the token's user), one with AlwaysAllow; in
//!   [`RBAC_ROUNDS`] interleaved rounds.
//! * `etcd`: starts its own `etcd` on free loopback ports; raw etcd-client
//!   puts, create transactions and watches, then the API server on etcd
//!   (creates and watch delivery). etcd runs with [`ETCD_ARGS`] unless
//!   `BENCH_ETCD_ARGS` gives other flags (`BENCH_ETCD_ARGS=` for etcd's
//!   defaults). `BENCH_ETCD_BURN_US=N` adds a raw create txn row whose
//!   clients spin N µs before each txn: how the raw rate falls as the client
//!   side costs more CPU on etcd's cores (the API server's share of a
//!   create). Run it with `create watch` for the embedded-store rows to
//!   compare with.
//!
//! The server and the load generator live in one process but in two tokio
//! runtimes (threads `srv-*` and `cli-*`), so they compete for the same cores
//! as two processes would; per-thread CPU time from `/proc/self/task` splits
//! the cores used between server (including the store's writer thread and the
//! webhook's runtime, `hook-*`, or its own process) and client; etcd's CPU
//! is read from its process. Each closed-loop client owns one keep-alive connection. The
//! server binary serves HTTPS; here the router is served over plain HTTP, so
//! client-side TLS is not part of any number (the webhook's TLS is).
//!
//! [`Row`]: harness::Row
//! [`ADMISSION_CLIENTS`]: admission::ADMISSION_CLIENTS
//! [`RBAC_ROUNDS`]: rbac::RBAC_ROUNDS
//! [`ETCD_ARGS`]: etcd::ETCD_ARGS

// The product's allocator, with no wrapper: a throughput or latency figure
// is only worth what the allocator under it is (a counting wrapper cost a
// fifth of the `get` scenario's CPU). The scenarios that read the live heap
// run in `apiserver-heap` (heap.rs); `allocators_of_the_benches` (server
// tests) keeps it so.
#[global_allocator]
static ALLOC: wasm_apiserver::Allocator = wasm_apiserver::Allocator;

mod admission;
mod apply;
mod controllers;
mod conversion;
mod crd;
mod crossplane;
mod crud;
mod etcd;
mod gc;
mod harness;
mod hook;
mod operations;
mod policy_audit;
mod rbac;
mod scheduler;
mod watch;
mod workloads;

use admission::admission;
use crud::{LIST_CLIENTS, create, get, list_1k};
use etcd::etcd;
use harness::{Api, Error, Row, WARMUP, print_table, runtime, start_server};
use rbac::rbac;
use std::time::{Duration, Instant};
use watch::{WATCH_PACE, WATCH_WRITES, WATCHERS, watch};

fn main() -> Result<(), Error> {
    if std::env::var_os(hook::CHILD_ENV).is_some() {
        return hook::serve_child();
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let env = |k: &str, default: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let window = Duration::from_secs(env("BENCH_SECONDS", 5));
    let clients = env("BENCH_CLIENTS", 64) as usize;
    let cores = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1);

    let server_rt = runtime("srv-worker")?;
    let client_rt = runtime("cli-worker")?;
    // The `admission` scenario's webhook when it runs in this process (see
    // `hook.rs`; by default it runs in its own).
    let hook_rt = runtime("hook-worker")?;
    let (srv, hook) = (server_rt.handle().clone(), hook_rt.handle().clone());

    let dir = tempfile::tempdir()?;
    let addr = server_rt.block_on(start_server(&dir.path().join("store.redb")))?;
    let api = Api::new(addr);

    println!(
        "wasm-apiserver benchmark: embedded store (unless a row says etcd), plain HTTP/1.1 on {addr} \
         (the router in-process; the binary serves HTTPS, TLS to the API server is not measured)"
    );
    println!(
        "{cores} cores, shared by client and server (one process, a {cores}-worker tokio runtime each, \
         plus the store's writer thread; etcd and the webhook on the same cores); \
         window {}s after {}ms warm-up",
        window.as_secs(),
        WARMUP.as_millis()
    );

    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!(
            "load average before the run: {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }

    let started = Instant::now();
    let rows = client_rt.block_on(async {
        if ["create", "get", "list-1k", "watch"]
            .iter()
            .any(|s| wanted(s))
        {
            crud::setup(&api).await?;
        }
        let mut rows = Vec::new();
        if wanted("create") {
            rows.push(create(&api, clients, window, 0).await?);
        }
        if wanted("get") {
            rows.push(get(&api, clients, window).await?);
        }
        if wanted("list-1k") {
            rows.push(list_1k(&api, LIST_CLIENTS, window).await?);
        }
        if wanted("watch") {
            rows.extend(watch(&api, WATCHERS, WATCH_WRITES, WATCH_PACE).await?);
        }
        if wanted("admission") {
            rows.extend(admission(&srv, &hook, dir.path(), window).await?);
        }
        if wanted("crd") {
            rows.extend(crd::crd(&api, clients, window).await?);
        }
        if wanted("workloads") {
            rows.extend(workloads::workloads(&api, clients, window).await?);
        }
        if wanted("apply") {
            rows.extend(apply::apply(&api, clients, window).await?);
        }
        if wanted("gc") {
            rows.extend(gc::gc(&srv, dir.path(), clients, window).await?);
        }
        if wanted("context") {
            println!(
                "context: a memory scenario, in a process of its own whose allocator counts the \
                 live heap: cargo bench -p wasm-apiserver --bench apiserver-heap"
            );
        }
        if wanted("wasm-controllers") {
            rows.extend(controllers::wasm_controllers(&srv, dir.path()).await?);
        }
        if wanted("policy-audit") {
            rows.extend(policy_audit::policy_audit(&srv, dir.path(), window).await?);
        }
        if wanted("flood") {
            rows.extend(operations::flood(&srv, dir.path(), window).await?);
        }
        // 100,000 objects: only when asked for by name.
        if filters.iter().any(|f| f == "snapshot") {
            rows.extend(operations::snapshot(&srv, dir.path()).await?);
        }
        // Ten minutes: only when asked for by name.
        if filters.iter().any(|f| f == "churn") {
            rows.extend(operations::churn(&srv, dir.path(), env("BENCH_CHURN_MINUTES", 10)).await?);
        }
        if wanted("conversion") {
            rows.extend(conversion::conversion(&srv, dir.path()).await?);
        }
        if wanted("rbac") {
            rows.extend(rbac(&srv, dir.path(), clients, window).await?);
        }
        if wanted("etcd") {
            rows.extend(etcd(&srv, dir.path(), clients, window).await?);
        }
        if wanted("crossplane") {
            crossplane::crossplane(&srv, dir.path()).await?;
        }
        if wanted("scheduler-plugins") {
            rows.extend(scheduler::scheduler_plugins().await?);
        }
        Ok::<_, Error>(rows)
    })?;

    println!();
    print_table(&rows);
    println!();
    print_targets(&rows);
    println!("\ntotal run time {:.1}s", started.elapsed().as_secs_f64());

    client_rt.shutdown_timeout(Duration::from_secs(1));
    hook_rt.shutdown_timeout(Duration::from_secs(1));
    server_rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// The targets and ratios of each issue, in scenario order.
fn print_targets(rows: &[Row]) {
    crud::print_targets(rows);
    watch::print_targets(rows);
    admission::print_targets(rows);
    crd::print_targets(rows);
    conversion::print_targets(rows);
    workloads::print_targets(rows);
    apply::print_targets(rows);
    gc::print_targets(rows);
    controllers::print_targets(rows);
    policy_audit::print_targets(rows);
    operations::print_targets(rows);
    rbac::print_targets(rows);
    scheduler::print_targets(rows);
    #[cfg(feature = "etcd")]
    etcd::print_targets(rows);
}
