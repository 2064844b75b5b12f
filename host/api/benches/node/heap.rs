//! The Node authorizer graph's memory per pod (issue 52's benchmark), in a
//! bench binary of its own whose allocator counts the live heap (bytes
//! handed out and not given back; the timing bench, `node-authz`, runs on
//! the bare system allocator).
//!
//! ```text
//! cargo bench -p wasm-apiserver-api --bench node-graph-heap
//! ```
//!
//! Builds the graph of 1,000 nodes and 10,000 pods (`fixture.rs`, with
//! their claims and volumes) and reads the live heap before and after:
//! the graph's bytes, per pod. The decoded pods themselves are dropped as
//! they are added (the registry's follower keeps no copy either).

mod fixture;

#[global_allocator]
static ALLOC: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

fn main() {
    let before = ALLOC.allocated();
    let graph = fixture::graph();
    let after = ALLOC.allocated();
    let bytes = after.saturating_sub(before);
    let per_pod = bytes as f64 / graph.pods() as f64;
    println!(
        "Node authorizer graph: {} nodes, {} pods (one in five with a claim and a volume): {:.2} MB live heap, {per_pod:.0} bytes per pod",
        fixture::NODES,
        graph.pods(),
        bytes as f64 / 1e6
    );
    // Removing every pod gives it back (nothing is kept for objects no
    // bound pod references).
    let mut graph = graph;
    for i in 0..fixture::PODS {
        graph.delete_pod(&fixture::namespace(i), &fixture::pod_name(i));
    }
    let emptied = ALLOC.allocated().saturating_sub(before);
    println!(
        "after deleting every pod: {:.2} MB (claims and volumes, and the maps' capacity)",
        emptied as f64 / 1e6
    );
    println!(
        "target Node authorizer graph memory per pod: {per_pod:.0} bytes (<= 1024 bytes) {}",
        if per_pod <= 1024.0 { "met" } else { "missed" }
    );
    drop(graph);
}
