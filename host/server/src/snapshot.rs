//! Backups of the embedded store, as etcd's snapshots:
//!
//! * `GET /snapshot` (a non-resource URL: by default only `system:masters`
//!   may read it) streams a consistent copy of the store at one revision,
//!   taken without stopping writes ([`EmbeddedStore::snapshot`]); the
//!   revision is in the `X-Snapshot-Revision` header.
//! * `wasm-apiserver snapshot save FILE` downloads it with a kubeconfig
//!   (`data/admin.kubeconfig` by default), or copies a stopped server's
//!   store with `--data-dir`.
//! * `wasm-apiserver snapshot restore FILE --data-dir DIR`, or `serve
//!   --restore-from FILE`, makes a new store from it whose revisions
//!   continue a billion above the snapshot's
//!   ([`DEFAULT_RESTORE_BUMP`]), so no client's resourceVersion goes back.
//! * `--snapshot-interval` takes snapshots into `<data-dir>/snapshots`,
//!   keeping the newest `--snapshot-retention`.

use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use wasm_apiserver_storage::embedded::{self, DEFAULT_RESTORE_BUMP, EmbeddedStore, SnapshotInfo};

/// `wasm-apiserver snapshot ...`
#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Saves a consistent snapshot of the embedded store: of a running
    /// server (through `GET /snapshot`, as the kubeconfig's user), or with
    /// `--data-dir` of a stopped server's data directory.
    Save {
        /// Where to write the snapshot.
        file: PathBuf,
        /// The kubeconfig to reach the running server with.
        #[arg(
            long,
            default_value = "data/admin.kubeconfig",
            conflicts_with = "data_dir"
        )]
        kubeconfig: PathBuf,
        /// Read a stopped server's data directory instead.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Makes a new data directory's store from a snapshot.
    Restore {
        /// The snapshot.
        file: PathBuf,
        /// The new data directory (it must not hold a store yet).
        #[arg(long, default_value = "data")]
        data_dir: PathBuf,
        /// How many revisions the restored store skips: every
        /// resourceVersion clients saw before stays below its own.
        #[arg(long, default_value_t = DEFAULT_RESTORE_BUMP)]
        bump_revision: u64,
    },
}

/// The store file of a data directory.
pub fn store_file(data_dir: &Path) -> PathBuf {
    data_dir.join("store.redb")
}

fn describe(what: &str, file: &Path, info: &SnapshotInfo) -> String {
    format!(
        "{what} {}: revision {}, {} keys, {} bytes",
        file.display(),
        info.revision,
        info.keys,
        info.bytes
    )
}

/// Runs a `snapshot` command; the exit code.
pub fn run(cmd: SnapshotCommand) -> anyhow::Result<i32> {
    match cmd {
        SnapshotCommand::Save {
            file,
            data_dir: Some(dir),
            ..
        } => {
            let store = EmbeddedStore::open(&store_file(&dir), Default::default())?;
            let info = store.snapshot(&file)?;
            println!("{}", describe("saved", &file, &info));
        }
        SnapshotCommand::Save {
            file, kubeconfig, ..
        } => {
            let revision = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(download(&kubeconfig, &file))?;
            let bytes = std::fs::metadata(&file)?.len();
            println!(
                "saved {}: revision {revision}, {bytes} bytes",
                file.display()
            );
        }
        SnapshotCommand::Restore {
            file,
            data_dir,
            bump_revision,
        } => {
            std::fs::create_dir_all(&data_dir)?;
            let info = embedded::restore(&file, &store_file(&data_dir), bump_revision)?;
            println!("{}", describe("restored", &store_file(&data_dir), &info));
        }
    }
    Ok(0)
}

/// What a kubeconfig says about reaching its current cluster.
struct Target {
    server: String,
    ca_pem: Vec<u8>,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

fn read_kubeconfig(path: &Path) -> anyhow::Result<Target> {
    use base64::Engine;
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let k: serde_json::Value = serde_yaml::from_str(&text)?;
    let current = k["current-context"].as_str().unwrap_or_default();
    let named = |list: &str, name: &str| {
        k[list]
            .as_array()
            .and_then(|l| l.iter().find(|e| e["name"] == name || name.is_empty()))
            .cloned()
            .unwrap_or_default()
    };
    let context = named("contexts", current);
    let cluster = named(
        "clusters",
        context["context"]["cluster"].as_str().unwrap_or_default(),
    );
    let user = named(
        "users",
        context["context"]["user"].as_str().unwrap_or_default(),
    );
    let b64 = |v: &serde_json::Value, what: &str| -> anyhow::Result<Vec<u8>> {
        let s = v
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("{}: no {what}", path.display()))?;
        Ok(base64::engine::general_purpose::STANDARD.decode(s.trim())?)
    };
    Ok(Target {
        server: cluster["cluster"]["server"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("{}: no cluster server", path.display()))?
            .trim_end_matches('/')
            .to_string(),
        ca_pem: b64(
            &cluster["cluster"]["certificate-authority-data"],
            "certificate-authority-data",
        )?,
        cert_pem: b64(
            &user["user"]["client-certificate-data"],
            "client-certificate-data",
        )?,
        key_pem: b64(&user["user"]["client-key-data"], "client-key-data")?,
    })
}

/// Downloads `GET /snapshot` into `file` (beside it, then renamed);
/// returns the snapshot's revision.
async fn download(kubeconfig: &Path, file: &Path) -> anyhow::Result<u64> {
    use http_body_util::BodyExt;
    use tokio::io::AsyncWriteExt;
    let t = read_kubeconfig(kubeconfig)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile_certs(&t.ca_pem)? {
        roots.add(cert)?;
    }
    use rustls::pki_types::pem::PemObject;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&t.key_pem)
        .map_err(|e| anyhow::anyhow!("client key: {e}"))?;
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_client_auth_cert(rustls_pemfile_certs(&t.cert_pem)?, key)?;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(connector);
    let uri: hyper::Uri = format!("{}/snapshot", t.server).parse()?;
    let resp = client.get(uri).await?;
    let status = resp.status();
    let revision = resp
        .headers()
        .get("x-snapshot-revision")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let mut body = resp.into_body();
    if !status.is_success() {
        let text = body.collect().await?.to_bytes();
        anyhow::bail!(
            "GET /snapshot: {status}: {}",
            String::from_utf8_lossy(&text)
        );
    }
    let tmp = file.with_extension("partial");
    let mut out = tokio::fs::File::create(&tmp).await?;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            out.write_all(&data).await?;
        }
    }
    out.sync_all().await?;
    drop(out);
    tokio::fs::rename(&tmp, file).await?;
    revision.ok_or_else(|| anyhow::anyhow!("the server sent no X-Snapshot-Revision"))
}

fn rustls_pemfile_certs(
    pem: &[u8],
) -> anyhow::Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    Ok(rustls::pki_types::CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?)
}

/// Takes a snapshot into `dir` (named by time and revision).
async fn take(store: EmbeddedStore, dir: PathBuf) -> anyhow::Result<(PathBuf, SnapshotInfo)> {
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir)?;
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
        let tmp = dir.join(format!(".taking-{}.db", uuid::Uuid::new_v4()));
        let info = store.snapshot(&tmp)?;
        let file = dir.join(format!("snapshot-{stamp}-{}.db", info.revision));
        std::fs::rename(&tmp, &file)?;
        Ok((file, info))
    })
    .await?
}

/// `GET /snapshot`.
pub async fn serve_snapshot(State(state): State<Arc<AppState>>) -> Response {
    let Some(store) = state.embedded.clone() else {
        return crate::error::ErrorResponse(wasm_apiserver_api::ApiError::BadRequest(
            "this server stores its objects in etcd: take snapshots with etcd's own tools \
             (etcdctl snapshot save)"
                .into(),
        ))
        .into_response();
    };
    let dir = state.data_dir.join("snapshots");
    let (file, info) = match take(store, dir).await {
        Ok(taken) => taken,
        Err(e) => {
            tracing::error!(error = %e, "snapshot failed");
            return crate::error::ErrorResponse(wasm_apiserver_api::ApiError::Internal(format!(
                "snapshot failed: {e}"
            )))
            .into_response();
        }
    };
    let opened = tokio::fs::File::open(&file).await;
    // The open file stays readable once its name is gone.
    let _ = tokio::fs::remove_file(&file).await;
    let Ok(f) = opened else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let stream = futures::stream::unfold(f, |mut f| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 256 << 10];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(bytes::Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    });
    tracing::info!(
        revision = info.revision,
        keys = info.keys,
        bytes = info.bytes,
        "snapshot served"
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, info.bytes.to_string()),
            (
                header::HeaderName::from_static("x-snapshot-revision"),
                info.revision.to_string(),
            ),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Takes a snapshot every `interval` into `<data-dir>/snapshots`, keeping
/// the newest `retention`.
pub fn spawn_periodic(
    store: EmbeddedStore,
    data_dir: PathBuf,
    interval: Duration,
    retention: usize,
) {
    let dir = data_dir.join("snapshots");
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            match take(store.clone(), dir.clone()).await {
                Ok((file, info)) => {
                    tracing::info!(file = %file.display(), revision = info.revision, bytes = info.bytes, "periodic snapshot");
                }
                Err(e) => tracing::warn!(error = %e, "periodic snapshot failed"),
            }
            prune(&dir, retention);
        }
    });
}

/// Removes all but the newest `retention` periodic snapshots.
fn prune(dir: &Path, retention: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snapshot-") && n.ends_with(".db"))
        })
        .collect();
    // Names start with a UTC time stamp: newest last.
    files.sort();
    let drop = files.len().saturating_sub(retention.max(1));
    for f in &files[..drop] {
        if let Err(e) = std::fs::remove_file(f) {
            tracing::warn!(file = %f.display(), error = %e, "could not remove an old snapshot");
        }
    }
}
