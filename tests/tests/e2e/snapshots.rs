//! Backups of the embedded store against the real binary: a snapshot taken
//! with `wasm-apiserver snapshot save` while a client keeps writing holds
//! exactly the objects of one revision; `serve --restore-from` starts from
//! it with every object back and resourceVersions moved forward; periodic
//! snapshots keep their retention; `/metrics` shows the store's size and
//! compacted revision.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use wasm_apiserver_e2e::{Server, kubectl_ok, poll_until, write_manifest};

/// name -> (resourceVersion, data)
fn configmaps(server: &Server, query: &str) -> (BTreeMap<String, (String, Value)>, u64) {
    let list: Value = serde_json::from_str(&kubectl_ok(
        server,
        None,
        &[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/default/configmaps{query}"),
        ],
    ))
    .expect("list JSON");
    let items = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|c| c["metadata"]["name"].as_str().unwrap().starts_with("cm-"))
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap().to_string(),
                (
                    c["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                    c["data"].clone(),
                ),
            )
        })
        .collect();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (items, rv)
}

#[test]
fn snapshots_under_writes_restore_every_object_with_revisions_forward() {
    let a = Server::start_with_args(&["--snapshot-interval", "1s", "--snapshot-retention", "2"]);
    let list: String = (0..100)
        .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: default}}\ndata: {{n: \"0\"}}\n"))
        .collect();
    let path = write_manifest(&a, "cms.yaml", &list);
    kubectl_ok(&a, None, &["apply", "-f", path.to_str().unwrap()]);

    // A client keeps updating while the snapshot is taken.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async { wasm_apiserver_e2e::kube_client(&a) });
        let (stop, written) = (stop.clone(), written.clone());
        std::thread::spawn(move || {
            rt.block_on(async move {
                use k8s_openapi::api::core::v1::ConfigMap;
                use kube::api::{Api, Patch, PatchParams};
                let api: Api<ConfigMap> = Api::namespaced(client, "default");
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let patch = serde_json::json!({"data": {"n": n.to_string()}});
                    api.patch(
                        &format!("cm-{}", n % 100),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .expect("patch");
                    written.store(n, Ordering::Relaxed);
                }
            })
        })
    };
    poll_until(Duration::from_secs(30), "writes under way", || {
        (written.load(Ordering::Relaxed) > 20).then_some(())
    });
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap.db");
    let out = std::process::Command::new(wasm_apiserver_e2e::server_binary())
        .args(["snapshot", "save"])
        .arg(&snap)
        .arg("--kubeconfig")
        .arg(a.kubeconfig_path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let revision: u64 = stdout
        .split("revision ")
        .nth(1)
        .and_then(|r| r.split(',').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    let during = written.load(Ordering::Relaxed);
    poll_until(Duration::from_secs(30), "writes after the snapshot", || {
        (written.load(Ordering::Relaxed) > during + 20).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    // The snapshot is the store at its revision, exactly: what a list at
    // that revision returns.
    let (exact, _) = configmaps(
        &a,
        &format!("?resourceVersion={revision}&resourceVersionMatch=Exact"),
    );
    let (now, last_seen) = configmaps(&a, "");
    assert_eq!(exact.len(), 100);
    assert_ne!(exact, now, "the writes went on after the snapshot");

    let metrics = a.get("/metrics").unwrap().1;
    let gauge = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert!(gauge("apiserver_storage_size_bytes{storage_cluster_id=\"embedded\"}") > 0);
    assert!(gauge("wasm_apiserver_storage_revision") >= last_seen);
    gauge("wasm_apiserver_storage_compacted_revision");

    // Periodic snapshots: at most the retention is kept.
    let snapshots = || {
        std::fs::read_dir(a.data_dir().join("snapshots"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("snapshot-"))
                    .count()
            })
            .unwrap_or(0)
    };
    poll_until(Duration::from_secs(30), "two periodic snapshots", || {
        (snapshots() >= 2).then_some(())
    });
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(snapshots(), 2);

    // Restored: every object as of the snapshot, and revisions forward.
    let b = Server::start_with_args(&["--restore-from", snap.to_str().unwrap()]);
    let (restored, restored_rv) = configmaps(&b, "");
    assert_eq!(restored, exact);
    assert!(restored_rv > last_seen, "{restored_rv} <= {last_seen}");
    kubectl_ok(
        &b,
        None,
        &["create", "configmap", "after", "--from-literal=k=v"],
    );
    let after: Value = serde_json::from_str(&kubectl_ok(
        &b,
        None,
        &["get", "configmap", "after", "-o", "json"],
    ))
    .unwrap();
    let rv: u64 = after["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv > last_seen);

    // A restore never overwrites a store.
    let out = std::process::Command::new(wasm_apiserver_e2e::server_binary())
        .args(["snapshot", "restore"])
        .arg(&snap)
        .arg("--data-dir")
        .arg(b.data_dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a store exists already"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
