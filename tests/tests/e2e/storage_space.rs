//! The embedded store's file under Lease churn plateaus (a shortened run of
//! the `churn` bench): 200 Leases each renewed once a second (a steady rate,
//! as real holders renew: the history kept between compactions, and with it
//! the file, is proportional to the write rate, so an unpaced writer that
//! speeds up when the machine frees up would grow the file for a reason that
//! is not a leak), history compacted every 6 s; `/metrics` shows the
//! compacted revision moving, and the file has stopped growing: after 50 s
//! it is within 1.2x of its size after 20 s, or no larger than after 35 s
//! (redb's file is a high-water mark: a moment when freed pages cannot be
//! reused yet, such as a long read on a starved machine, raises it once
//! for good, where history kept without compaction, 200 revisions a second,
//! grows it in every 15 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use wasm_apiserver_e2e::{Server, poll_until};

const LEASES: usize = 200;

fn gauge(server: &Server, name: &str) -> u64 {
    let (_, text) = server.get("/metrics").expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn the_data_file_plateaus_under_lease_churn() {
    let s = Server::start_with_args(&["--etcd-compaction-interval", "6s"]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async { wasm_apiserver_e2e::kube_client(&s) });
    let stop = Arc::new(AtomicBool::new(false));
    let renewals = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (client, stop, renewals) = (client.clone(), stop.clone(), renewals.clone());
            rt.spawn(async move {
                use k8s_openapi::api::coordination::v1::Lease;
                use kube::api::{Api, Patch, PatchParams, PostParams};
                let api: Api<Lease> = Api::namespaced(client, "default");
                let mine: Vec<String> = (w..LEASES)
                    .step_by(4)
                    .map(|i| format!("lease-{i}"))
                    .collect();
                for name in &mine {
                    let lease: Lease = serde_json::from_value(serde_json::json!({
                        "metadata": {"name": name},
                        "spec": {"holderIdentity": name, "leaseDurationSeconds": 10},
                    }))
                    .unwrap();
                    api.create(&PostParams::default(), &lease)
                        .await
                        .expect("create lease");
                }
                let mut n = 0u64;
                let mut pace = tokio::time::interval(Duration::from_secs(1));
                pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.load(Ordering::Relaxed) {
                    pace.tick().await;
                    for name in &mine {
                        n += 1;
                        let patch = serde_json::json!({"spec": {
                            "renewTime": chrono_like(n),
                            "holderIdentity": format!("{name}-{}", n % 7),
                        }});
                        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                            .expect("renew");
                        renewals.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    poll_until(Duration::from_secs(30), "renewals under way", || {
        (renewals.load(Ordering::Relaxed) > LEASES as u64).then_some(())
    });
    let at = |secs: u64| {
        let wait = Duration::from_secs(secs).saturating_sub(started.elapsed());
        std::thread::sleep(wait);
        gauge(
            &s,
            "apiserver_storage_size_bytes{storage_cluster_id=\"embedded\"}",
        )
    };
    let early = at(20);
    let compacted_early = gauge(&s, "wasm_apiserver_storage_compacted_revision");
    let mid = at(35);
    let late = at(50);
    let compacted_late = gauge(&s, "wasm_apiserver_storage_compacted_revision");
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        rt.block_on(w).unwrap();
    }
    let total = renewals.load(Ordering::Relaxed);
    eprintln!("{total} renewals; file {early} bytes at 20 s, {mid} at 35 s, {late} at 50 s");
    assert!(total > 4_000, "too few renewals to judge: {total}");
    assert!(
        compacted_late > compacted_early,
        "{compacted_early} -> {compacted_late}"
    );
    assert!(
        late as f64 <= early as f64 * 1.2 || late <= mid,
        "the file grew from {early} (20 s) to {mid} (35 s) to {late} bytes (50 s)"
    );
}

/// A MicroTime-shaped string that changes with `n`.
fn chrono_like(n: u64) -> String {
    format!(
        "2026-01-01T00:{:02}:{:02}.{:06}Z",
        (n / 60) % 60,
        n % 60,
        n % 1_000_000
    )
}
