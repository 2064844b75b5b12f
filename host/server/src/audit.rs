//! Audit logging: `--audit-log-path` + `--audit-policy-file` (upstream's
//! `audit.k8s.io/v1` Policy), JSON lines of `audit.k8s.io/v1` Events with
//! stages, rotated by size (`--audit-log-maxsize` MB, `--audit-log-maxbackup`
//! files). The middleware sits after authentication (so the user is known)
//! and, as upstream, before impersonation (so `user` is the authenticated
//! user, a refused impersonation is audited, and the impersonation filter
//! reports whom it impersonates through [`ImpersonatedUser`]) and
//! authorization; authorization decisions and admission plugins' audit
//! annotations land in the event through [`Annotations`].

use crate::filters::UserInfo;
use crate::request::RequestInfo;
use crate::server::{AppState, ConnectionInfo};
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use wasm_apiserver_api::audit::{self, Level, ObjectRef, Policy, Record, Stage};

/// Audit annotations of one request, shared by the pipeline stages.
#[derive(Clone, Default, Debug)]
pub struct Annotations(pub Arc<Mutex<BTreeMap<String, String>>>);

impl Annotations {
    pub fn add(&self, items: impl IntoIterator<Item = (String, String)>) {
        self.0.lock().expect("audit annotations").extend(items);
    }
}

/// Whom the request impersonates, set by the impersonation filter (which
/// runs after the audit middleware) for the event's `impersonatedUser`.
#[derive(Clone, Default, Debug)]
pub struct ImpersonatedUser(Arc<Mutex<Option<UserInfo>>>);

impl ImpersonatedUser {
    pub fn set(&self, user: &UserInfo) {
        *self.0.lock().expect("impersonated user") = Some(user.clone());
    }

    fn get(&self) -> Option<wasm_apiserver_api::authn::UserInfo> {
        self.0
            .lock()
            .expect("impersonated user")
            .as_ref()
            .map(api_user)
    }
}

/// A size-rotated JSON-lines file (or stdout for `-`).
struct Sink {
    path: PathBuf,
    file: Option<std::fs::File>,
    size: u64,
    max_bytes: u64,
    max_backups: usize,
}

impl Sink {
    fn open(path: PathBuf, max_mb: u64, max_backups: usize) -> std::io::Result<Self> {
        let (file, size) = if path.as_os_str() == "-" {
            (None, 0)
        } else {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            let size = f.metadata()?.len();
            (Some(f), size)
        };
        Ok(Sink {
            path,
            file,
            size,
            max_bytes: max_mb * 1024 * 1024,
            max_backups,
        })
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let stamp = chrono::Utc::now().format("%Y-%m-%dT%H-%M-%S%.3f");
        let backup = PathBuf::from(format!("{}-{stamp}", self.path.display()));
        std::fs::rename(&self.path, &backup)?;
        self.file = Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?,
        );
        self.size = 0;
        if self.max_backups > 0 {
            let name = self
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let dir = self
                .path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| ".".into());
            let mut backups: Vec<PathBuf> = std::fs::read_dir(&dir)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}-")))
                })
                .collect();
            backups.sort();
            while backups.len() > self.max_backups {
                let _ = std::fs::remove_file(backups.remove(0));
            }
        }
        Ok(())
    }

    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        match &mut self.file {
            None => {
                let mut out = std::io::stdout().lock();
                out.write_all(line)?;
                out.write_all(b"\n")
            }
            Some(_) => {
                if self.max_bytes > 0
                    && self.size > 0
                    && self.size + line.len() as u64 + 1 > self.max_bytes
                {
                    self.rotate()?;
                }
                let f = self.file.as_mut().expect("file");
                f.write_all(line)?;
                f.write_all(b"\n")?;
                self.size += line.len() as u64 + 1;
                Ok(())
            }
        }
    }
}

/// The audit backend.
pub struct AuditLog {
    policy: Policy,
    sink: Mutex<Sink>,
}

impl AuditLog {
    pub fn open(
        path: PathBuf,
        policy_text: &str,
        max_mb: u64,
        max_backups: usize,
    ) -> anyhow::Result<Self> {
        let policy = Policy::parse(policy_text).map_err(anyhow::Error::msg)?;
        Ok(AuditLog {
            policy,
            sink: Mutex::new(Sink::open(path, max_mb, max_backups)?),
        })
    }

    fn emit(
        &self,
        record: &Record,
        level: Level,
        stage: Stage,
        omit: &[Stage],
        omit_managed: bool,
    ) {
        if !audit::should_emit(level, omit, stage) {
            return;
        }
        let event = audit::event(record, level, stage, chrono::Utc::now(), omit_managed);
        let line = serde_json::to_vec(&event).unwrap_or_default();
        if let Err(e) = self.sink.lock().expect("audit sink").write(&line) {
            tracing::error!(error = %e, "writing the audit log failed");
        }
    }
}

fn api_user(u: &UserInfo) -> wasm_apiserver_api::authn::UserInfo {
    wasm_apiserver_api::authn::UserInfo {
        username: u.username.clone(),
        uid: u.uid.clone(),
        groups: u.groups.clone(),
        extra: u.extra.clone(),
    }
}

/// The audit middleware.
pub async fn audit(State(state): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let Some(log) = state.audit.clone() else {
        return next.run(req).await;
    };
    let (Some(info), Some(user)) = (
        req.extensions().get::<RequestInfo>().cloned(),
        req.extensions().get::<UserInfo>().cloned(),
    ) else {
        return next.run(req).await;
    };
    let attrs = crate::authz::attributes(&info, &user);
    let cfg = audit::config_for(&log.policy, &attrs);
    if cfg.level == Level::None {
        return next.run(req).await;
    }
    let annotations = Annotations::default();
    req.extensions_mut().insert(annotations.clone());
    let impersonated = ImpersonatedUser::default();
    req.extensions_mut().insert(impersonated.clone());
    let mut record = Record {
        audit_id: uuid::Uuid::new_v4().to_string(),
        request_uri: req.uri().to_string(),
        verb: info.verb.clone(),
        user: api_user(&user),
        source_ips: req
            .extensions()
            .get::<ConnectionInfo>()
            .map(|c| vec![c.peer.ip().to_string()])
            .unwrap_or_default(),
        user_agent: req
            .headers()
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .map(String::from),
        object_ref: info.is_resource_request.then(|| ObjectRef {
            resource: info.resource.clone(),
            namespace: info.namespace.clone().unwrap_or_default(),
            name: info.name.clone().unwrap_or_default(),
            api_group: info.api_group.clone(),
            api_version: info.api_version.clone(),
            subresource: info.subresource.clone().unwrap_or_default(),
            ..Default::default()
        }),
        request_received: chrono::Utc::now(),
        ..Default::default()
    };
    if cfg.level >= Level::Request
        && matches!(info.verb.as_str(), "create" | "update" | "patch" | "delete")
    {
        let (parts, body) = req.into_parts();
        let bytes = to_bytes(body, state.max_request_bytes)
            .await
            .unwrap_or_default();
        let ct = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        record.request_object = if ct.starts_with("application/vnd.kubernetes.protobuf") {
            wasm_apiserver_api::protobuf::decode(&bytes).ok()
        } else if ct.contains("yaml") {
            serde_yaml::from_slice::<Value>(&bytes).ok()
        } else {
            serde_json::from_slice::<Value>(&bytes).ok()
        };
        req = Request::from_parts(parts, Body::from(bytes));
    }
    log.emit(
        &record,
        cfg.level,
        Stage::RequestReceived,
        &cfg.omit_stages,
        cfg.omit_managed_fields,
    );

    let resp = next.run(req).await;
    record.impersonated_user = impersonated.get();
    let code = resp.status().as_u16();
    if info.verb == "watch" && code == 200 {
        record.annotations = annotations.0.lock().expect("audit annotations").clone();
        record.response_status = Some(audit::response_status(code, None));
        log.emit(
            &record,
            cfg.level,
            Stage::ResponseStarted,
            &cfg.omit_stages,
            cfg.omit_managed_fields,
        );
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let body_json = serde_json::from_slice::<Value>(&bytes).ok();
    let status_body = body_json.as_ref().filter(|b| b["kind"] == "Status");
    record.response_status = Some(audit::response_status(code, status_body));
    if cfg.level >= Level::RequestResponse {
        record.response_object = body_json.clone();
    }
    record.annotations = annotations.0.lock().expect("audit annotations").clone();
    log.emit(
        &record,
        cfg.level,
        Stage::ResponseComplete,
        &cfg.omit_stages,
        cfg.omit_managed_fields,
    );
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_rotates_by_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut sink = Sink::open(path.clone(), 0, 2).unwrap();
        sink.max_bytes = 100;
        for i in 0..20 {
            sink.write(format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(30)).as_bytes())
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "the live file and two backups: {names:?}");
        let live = std::fs::read_to_string(&path).unwrap();
        assert!(live.len() <= 100 && live.contains("\"n\":19"), "{live}");
    }
}
