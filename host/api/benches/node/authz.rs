//! The Node authorizer's decision time (issue 52's benchmark): a kubelet's
//! request checked against a graph of 1,000 nodes and 10,000 pods
//! (`fixture.rs`), as the request path calls it (`node::authorize` with
//! the request's attributes), on the system allocator (no counting
//! allocator here: the memory bench is `node-graph-heap`).
//!
//! ```text
//! cargo bench -p wasm-apiserver-api --bench node-authz
//! ```
//!
//! Each decision is timed on its own (`BENCH_DECISIONS`, default 200,000,
//! over a shuffled mix): a Secret, ConfigMap, PVC, PV or token request its
//! own pods reach (allowed), the same of another node's pod (no opinion:
//! the graph is consulted and says no), and a Node read (the static
//! rules). Prints p50/p99 per kind and `target ... met|missed`.

mod fixture;

use std::hint::black_box;
use std::time::{Duration, Instant};
use wasm_apiserver_api::node::authorize;
use wasm_apiserver_api::rbac::{Attributes, Decision};

fn node_user(node: &str) -> Attributes {
    Attributes::resource(
        &format!("system:node:{node}"),
        &["system:nodes", "system:authenticated"],
        "get",
        "",
        "secrets",
    )
}

fn request(kind: usize, pod: usize, own: bool) -> Attributes {
    // Claims and volumes belong to every fifth pod.
    let i = if matches!(kind, 2 | 3) {
        pod - pod % 5
    } else {
        pod
    };
    // The node asking: the pod's own, or one half the cluster away (which
    // runs no pod of the same Deployment).
    let asker = fixture::node(if own { i } else { i + fixture::NODES / 2 });
    let ns = fixture::namespace(i);
    let app = fixture::deployment(i);
    let mut a = node_user(&asker);
    match kind {
        0 => {
            a.resource = "secrets".into();
            a.in_namespace(&ns).named(&format!("{app}-tls"))
        }
        1 => {
            a.resource = "configmaps".into();
            a.in_namespace(&ns).named(&format!("{app}-config"))
        }
        2 => {
            a.resource = "persistentvolumeclaims".into();
            a.in_namespace(&ns).named(&format!("data-{i}"))
        }
        3 => {
            a.resource = "persistentvolumes".into();
            a.named(&format!("pv-{i}"))
        }
        4 => {
            a.verb = "create".into();
            a.resource = "serviceaccounts".into();
            a.in_namespace(&ns).named(&app).with_subresource("token")
        }
        _ => {
            a.resource = "nodes".into();
            a.named(&asker)
        }
    }
}

const KINDS: [&str; 6] = [
    "secret",
    "configmap",
    "pvc",
    "pv",
    "sa token",
    "node (static)",
];

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let decisions: usize = std::env::var("BENCH_DECISIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let built = Instant::now();
    let graph = fixture::graph();
    println!(
        "Node authorizer decisions: {} nodes, {} pods (graph built in {:.0} ms), {decisions} decisions",
        fixture::NODES,
        graph.pods(),
        built.elapsed().as_secs_f64() * 1e3
    );
    // A fixed pseudo-random mix (xorshift), the attributes built ahead.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut reqs = Vec::with_capacity(decisions);
    for _ in 0..decisions {
        let r = next();
        let kind = (r % 6) as usize;
        let own = (r >> 8) % 2 == 0;
        let pod = ((r >> 16) as usize) % fixture::PODS;
        reqs.push((kind, own, request(kind, pod, own)));
    }
    // Warm up, and check the answers are the ones expected.
    for (kind, own, a) in &reqs {
        let allowed = matches!(authorize(&graph, a), Some(Decision::Allow(_)));
        assert_eq!(allowed, *own || *kind == 5, "{kind} own={own}: {a:?}");
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); 2 * KINDS.len()];
    let mut all = Vec::with_capacity(decisions);
    for (kind, own, a) in &reqs {
        let t = Instant::now();
        black_box(authorize(black_box(&graph), black_box(a)));
        let d = t.elapsed();
        times[kind * 2 + usize::from(!own)].push(d);
        all.push(d);
    }
    // The clock's own cost, to read the figures against.
    let mut empty = Vec::with_capacity(10_000);
    for _ in 0..10_000 {
        let t = Instant::now();
        empty.push(black_box(t).elapsed());
    }
    println!();
    println!("| request | answer | decisions | p50 µs | p99 µs |");
    println!("|---|---|---:|---:|---:|");
    for (k, name) in KINDS.iter().enumerate() {
        for (j, answer) in ["allowed", "no opinion"].iter().enumerate() {
            let v = &mut times[k * 2 + j];
            if v.is_empty() {
                continue;
            }
            let answer = if k == 5 { "allowed" } else { answer };
            println!(
                "| {name} | {answer} | {} | {:.2} | {:.2} |",
                v.len(),
                pct(v, 0.5).as_secs_f64() * 1e6,
                pct(v, 0.99).as_secs_f64() * 1e6
            );
        }
    }
    let p50 = pct(&mut all, 0.5);
    let p99 = pct(&mut all, 0.99);
    println!(
        "| all | | {} | {:.2} | {:.2} |",
        all.len(),
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    println!(
        "\n(an empty timed region reads p50 {:.3} µs on this clock)",
        pct(&mut empty, 0.5).as_secs_f64() * 1e6
    );
    let met = p50 <= Duration::from_micros(5);
    println!(
        "target Node authorizer decision p50 with {} nodes and {} pods: {:.2} µs (<= 5 µs) {}",
        fixture::NODES,
        fixture::PODS,
        p50.as_secs_f64() * 1e6,
        if met { "met" } else { "missed" }
    );
}
