//! The embedded store's disk full: the real binary with its data dir on a
//! small tmpfs, filled by a ballast file and then by large ConfigMaps until
//! writes fail. Writes must fail with a `Status` (5xx, saying the storage is
//! out of space), reads (get and list) must go on, the server must keep
//! running, nothing acknowledged may be lost or changed; once the ballast
//! is removed writes must succeed again, and after a restart on the same
//! data dir every acknowledged object must still read back equal.
//!
//! Mounting a tmpfs needs root (CAP_SYS_ADMIN), as the test runs in CI;
//! the mount is lazily unmounted on drop, even when the test fails.
//!
//! On etcd the same end is its space quota: a replica on an etcd whose
//! `--quota-backend-bytes` is small answers 507 once etcd raises its
//! NOSPACE alarm, and reads go on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasm_apiserver_e2e::Server;
use wasm_apiserver_e2e::etcd::EtcdCluster;

/// The tmpfs: room for the server's data dir (a fresh store is about 1 MiB)
/// and a few large writes.
const TMPFS_MIB: u64 = 24;
/// What the ballast leaves free: the large writes fill it.
const LEFT_FREE: u64 = 2 << 20;
/// One large write: a ConfigMap this big (well under the request limit).
const LARGE: usize = 256 << 10;
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// A server whose data dir is a tmpfs mount: on drop the server is killed
/// first, then the mount lazily unmounted (so the temp dir can go).
struct OnTmpfs {
    server: Server,
    mount: PathBuf,
}

impl OnTmpfs {
    /// Starts a server, stops it, moves its data dir onto a new tmpfs of
    /// `TMPFS_MIB` and starts it again there (same port and kubeconfig).
    fn start() -> OnTmpfs {
        let mut server = Server::start();
        server.kill9();
        let data = server.data_dir();
        let aside = data.with_extension("orig");
        std::fs::rename(&data, &aside).expect("move the data dir aside");
        std::fs::create_dir(&data).expect("create the mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={TMPFS_MIB}m"))
            .arg("tmpfs")
            .arg(&data)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t tmpfs on {}: {status} (the disk-full test needs root to mount a tmpfs)",
            data.display()
        );
        let mut on = OnTmpfs {
            server,
            mount: data.clone(),
        };
        let copied = Command::new("cp")
            .arg("-a")
            .arg(aside.join("."))
            .arg(&data)
            .status()
            .expect("run cp");
        assert!(copied.success(), "copy the data dir onto the tmpfs");
        on.server.restart();
        on
    }
}

impl Drop for OnTmpfs {
    fn drop(&mut self) {
        self.server.kill9();
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// Fills `path` until the filesystem is full, then gives back `LEFT_FREE`.
fn ballast(path: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).expect("create ballast");
    let chunk = vec![0x5a_u8; 1 << 20];
    let mut written = 0u64;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("write ballast: {e}"),
        }
    }
    let _ = file.flush();
    file.set_len(written.saturating_sub(LEFT_FREE))
        .expect("shrink ballast");
    file.sync_all().expect("sync ballast");
    eprintln!(
        "ballast: {} MiB, {} MiB left free",
        written.saturating_sub(LEFT_FREE) >> 20,
        LEFT_FREE >> 20
    );
}

/// A kube client without retries (a resent write would blur what was
/// answered).
fn admin_client(server: &Server) -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(server.kubeconfig_path()).expect("read kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let mut config =
        futures::executor::block_on(kube::Config::from_custom_kubeconfig(kubeconfig, &options))
            .expect("kube config");
    config.default_retry = false;
    kube::Client::try_from(config).expect("kube client")
}

/// One request: status and body (JSON, or `Value::Null` when not JSON).
async fn request(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
        .expect("request");
    let call = client.send(req.map(kube::client::Body::from));
    let resp = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer in 30 s"))
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

/// A ConfigMap `name` whose one value is `size` bytes derived from `name`.
fn config_map(name: &str, size: usize) -> Value {
    let seed = name
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    // Incompressible enough: a different pattern per object.
    let value: String = (0..size)
        .map(|i| {
            let x = seed
                .wrapping_add(i as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                >> 59;
            char::from(b'a' + x as u8)
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"v": value},
    })
}

/// What an acknowledged object must read back as.
#[derive(Debug, Clone, PartialEq)]
struct Acked {
    resource_version: String,
    data: Value,
}

async fn create(client: &kube::Client, name: &str, size: usize) -> (u16, Value) {
    request(client, "POST", CONFIGMAPS, Some(&config_map(name, size))).await
}

fn remember(acked: &mut BTreeMap<String, Acked>, name: &str, answer: &Value) {
    acked.insert(
        name.to_string(),
        Acked {
            resource_version: answer["metadata"]["resourceVersion"]
                .as_str()
                .expect("resourceVersion")
                .to_string(),
            data: answer["data"].clone(),
        },
    );
}

/// Every acknowledged object reads back equal, by get and by list.
async fn check_all(client: &kube::Client, acked: &BTreeMap<String, Acked>, when: &str) {
    for (name, want) in acked {
        let (code, got) = request(client, "GET", &format!("{CONFIGMAPS}/{name}"), None).await;
        assert_eq!(code, 200, "{when}: get {name}: {got}");
        let got = Acked {
            resource_version: got["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            data: got["data"].clone(),
        };
        assert!(
            got == *want,
            "{when}: {name} changed: {:?}",
            got.resource_version
        );
    }
    let (code, list) = request(client, "GET", CONFIGMAPS, None).await;
    assert_eq!(code, 200, "{when}: list: {list}");
    let listed: BTreeMap<String, Acked> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|item| {
            let name = item["metadata"]["name"].as_str()?;
            Some((
                name.to_string(),
                Acked {
                    resource_version: item["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    data: item["data"].clone(),
                },
            ))
        })
        .collect();
    let missing: Vec<&String> = acked.keys().filter(|k| !listed.contains_key(*k)).collect();
    assert!(missing.is_empty(), "{when}: list misses {missing:?}");
    let changed: Vec<&String> = acked
        .iter()
        .filter(|(k, v)| listed.get(*k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    assert!(changed.is_empty(), "{when}: list shows {changed:?} changed");
}

#[test]
fn writes_fail_cleanly_on_a_full_disk_and_resume_once_space_is_freed() {
    let mut on = OnTmpfs::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut acked: BTreeMap<String, Acked> = BTreeMap::new();
    let client = {
        let _guard = rt.enter();
        admin_client(&on.server)
    };
    rt.block_on(async {
        for i in 0..20 {
            let name = format!("small-{i}");
            let (code, answer) = create(&client, &name, 100).await;
            assert_eq!(code, 201, "create {name}: {answer}");
            remember(&mut acked, &name, &answer);
        }
    });

    let ballast_path = on.server.data_dir().join("ballast");
    ballast(&ballast_path);

    // Large writes until the store refuses one.
    let refusal = rt.block_on(async {
        for i in 0..200 {
            let name = format!("large-{i}");
            let (code, answer) = create(&client, &name, LARGE).await;
            match code {
                201 => remember(&mut acked, &name, &answer),
                _ => return (name, code, answer),
            }
        }
        panic!(
            "200 writes of {} KiB fit in {} MiB left free",
            LARGE >> 10,
            LEFT_FREE >> 20
        )
    });
    let (refused, code, status) = refusal;
    eprintln!(
        "{} large writes acknowledged, then {refused}: {code} {status}",
        acked.len() - 20
    );
    assert!(
        (500..600).contains(&code),
        "a write on a full disk answered {code}: {status}"
    );
    assert_eq!(status["kind"], "Status", "not a Status: {status}");
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["code"], code, "{status}");
    let message = status["message"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        message.contains("space") || message.contains("full"),
        "the message does not say the storage is out of space: {status}"
    );

    rt.block_on(async {
        // More writes fail the same way (small ones too), without hanging.
        for i in 0..3 {
            let (code, answer) = create(&client, &format!("more-{i}"), LARGE).await;
            assert!(
                (500..600).contains(&code),
                "write {i} on a full disk: {code} {answer}"
            );
        }
        // Reads go on, and nothing acknowledged changed.
        check_all(&client, &acked, "disk full").await;
    });
    let (ready, body) = on.server.get("/readyz").expect("readyz");
    assert_eq!(ready, 200, "readyz on a full disk: {body}");

    // Space freed: writes resume (the store may need a moment to notice).
    std::fs::remove_file(&ballast_path).expect("remove ballast");
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut n = 0;
        loop {
            n += 1;
            let name = format!("after-{n}");
            let (code, answer) = create(&client, &name, LARGE).await;
            if code == 201 {
                remember(&mut acked, &name, &answer);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "writes did not resume once space was freed: {code} {answer}\n{}",
                on.server.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // And update what was there before.
        let name = "small-0";
        let mut body = config_map(name, 200);
        body["metadata"]["resourceVersion"] = json!(acked[name].resource_version);
        let (code, answer) =
            request(&client, "PUT", &format!("{CONFIGMAPS}/{name}"), Some(&body)).await;
        assert_eq!(
            code, 200,
            "update {name} after the disk was freed: {answer}"
        );
        remember(&mut acked, name, &answer);
        check_all(&client, &acked, "space freed").await;
    });

    // A restart on the same data dir finds everything acknowledged.
    on.server.restart();
    let client = {
        let _guard = rt.enter();
        admin_client(&on.server)
    };
    rt.block_on(check_all(&client, &acked, "after a restart"));
    eprintln!(
        "{} acknowledged objects read back equal after a restart",
        acked.len()
    );
}

/// etcd's space quota for the etcd test: room for the server's bootstrap
/// objects and a few dozen large writes (history is not compacted).
const ETCD_QUOTA: u64 = 16 << 20;

#[test]
fn etcd_out_of_its_space_quota_is_a_507_and_reads_go_on() {
    let etcd = EtcdCluster::start_with_args(1, &["--quota-backend-bytes", &ETCD_QUOTA.to_string()]);
    let servers = etcd.servers_flag();
    let server = Server::start_with_args(&["--etcd-servers", &servers]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = {
        let _guard = rt.enter();
        admin_client(&server)
    };
    let mut acked: BTreeMap<String, Acked> = BTreeMap::new();
    let (refused, code, status) = rt.block_on(async {
        for i in 0..(2 * ETCD_QUOTA as usize / LARGE) {
            let name = format!("large-{i}");
            let (code, answer) = create(&client, &name, LARGE).await;
            match code {
                201 => remember(&mut acked, &name, &answer),
                _ => return (name, code, answer),
            }
        }
        panic!("twice the quota was written and etcd took it all")
    });
    eprintln!(
        "{} large writes acknowledged, then {refused}: {code} {status}",
        acked.len()
    );
    assert!(!acked.is_empty(), "the first write was refused: {status}");
    assert_eq!(code, 507, "a write over etcd's quota: {status}");
    assert_eq!(status["kind"], "Status", "not a Status: {status}");
    assert_eq!(status["reason"], "InsufficientStorage", "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("database space exceeded"),
        "the message does not carry etcd's reason: {status}"
    );
    rt.block_on(async {
        // A small write is refused the same way (etcd's alarm is on).
        let (code, answer) = create(&client, "small", 100).await;
        assert_eq!(code, 507, "a small write under etcd's alarm: {answer}");
        // Reads go on, and nothing acknowledged changed.
        check_all(&client, &acked, "etcd over its quota").await;
    });
}
