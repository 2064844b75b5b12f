//! Audit logging: `--audit-log-path` + `--audit-policy-file` (upstream's
//! `audit.k8s.io/v1` Policy), JSON lines of `audit.k8s.io/v1` Events with
//! stages, rotated by size (`--audit-log-maxsize` MB, `--audit-log-maxbackup`
//! files). The middleware (in `filters`) sits after authentication (so the user is known)
//! and, as upstream, before impersonation (so `user` is the authenticated
//! user, a refused impersonation is audited, and the impersonation filter
//! reports whom it impersonates through [`ImpersonatedUser`]) and
//! authorization; authorization decisions and admission plugins' audit
//! annotations land in the event through [`Annotations`].

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
pub use wasm_apiserver_api::audit::Annotations;
use wasm_apiserver_api::audit::{self, Level, Policy, Record, RequestAuditConfig, Stage};
use wasm_apiserver_api::rbac::Attributes;
use wasm_apiserver_plugins::UserInfo;

/// Whom the request impersonates, set by the impersonation filter (which
/// runs after the audit middleware) for the event's `impersonatedUser`.
#[derive(Clone, Default, Debug)]
pub struct ImpersonatedUser(Arc<Mutex<Option<UserInfo>>>);

impl ImpersonatedUser {
    pub fn set(&self, user: &UserInfo) {
        *self.0.lock().expect("impersonated user") = Some(user.clone());
    }

    pub fn get(&self) -> Option<wasm_apiserver_api::authn::UserInfo> {
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
    /// `apiserver_audit_event_total` ([`AuditLog::count_into`]).
    events: std::sync::OnceLock<prometheus::IntCounter>,
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
            events: Default::default(),
        })
    }

    /// What the policy says about a request.
    pub fn config_for(&self, attrs: &Attributes) -> RequestAuditConfig {
        audit::config_for(&self.policy, attrs)
    }

    /// Writes the event of one stage, if the level and policy ask for it.
    pub fn emit(
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
        if let Some(c) = self.events.get() {
            c.inc();
        }
    }

    /// Counts each event written into `counter`.
    pub fn count_into(&self, counter: prometheus::IntCounter) {
        let _ = self.events.set(counter);
    }
}

/// The server's controllers are audited as the clients they are: each
/// call one event per stage, under the controller's identity and the
/// policy's level for it (upstream audits kube-controller-manager's
/// requests the same way).
impl wasm_apiserver_registry::controllers::AuditCalls for AuditLog {
    fn record(&self, call: &wasm_apiserver_registry::controllers::Call<'_>) {
        let r = call.resource;
        let groups: Vec<&str> = call.user.groups.iter().map(String::as_str).collect();
        let mut attrs =
            Attributes::resource(&call.user.username, &groups, call.verb, &r.group, &r.plural);
        if let Some(ns) = call.namespace.filter(|_| r.namespaced) {
            attrs = attrs.in_namespace(ns);
        }
        if let Some(n) = call.name {
            attrs = attrs.named(n);
        }
        if let Some(sub) = call.subresource {
            attrs = attrs.with_subresource(sub);
        }
        let cfg = self.config_for(&attrs);
        if cfg.level == Level::None {
            return;
        }
        let (code, status, object) = match call.outcome {
            Ok(obj) => (
                if call.verb == "create" { 201 } else { 200 },
                None,
                obj.cloned(),
            ),
            Err(e) => (
                e.code(),
                serde_json::from_slice(&e.status_body()).ok(),
                None,
            ),
        };
        let record = Record {
            audit_id: uuid::Uuid::new_v4().to_string(),
            request_uri: call.request_uri(),
            verb: call.verb.to_string(),
            user: api_user(call.user),
            user_agent: Some(format!("wasm-apiserver/{}", call.controller)),
            object_ref: Some(audit::ObjectRef {
                resource: r.plural.clone(),
                namespace: call.namespace.unwrap_or_default().to_string(),
                name: call.name.unwrap_or_default().to_string(),
                api_group: r.group.clone(),
                api_version: r.version.clone(),
                subresource: call.subresource.unwrap_or_default().to_string(),
                ..Default::default()
            }),
            response_status: Some(audit::response_status(code, status.as_ref())),
            response_object: object,
            request_received: call.received,
            ..Default::default()
        };
        for stage in [Stage::RequestReceived, Stage::ResponseComplete] {
            self.emit(
                &record,
                cfg.level,
                stage,
                &cfg.omit_stages,
                cfg.omit_managed_fields,
            );
        }
    }
}

pub fn api_user(u: &UserInfo) -> wasm_apiserver_api::authn::UserInfo {
    wasm_apiserver_api::authn::UserInfo {
        username: u.username.clone(),
        uid: u.uid.clone(),
        groups: u.groups.clone(),
        extra: u.extra.clone(),
    }
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
