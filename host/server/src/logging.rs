//! The server's log lines: `--logging-format=text|json` and `-v`, as
//! kube-apiserver's component-base logs them.
//!
//! * `json`: one object per line in component-base's shape: `ts` (epoch
//!   milliseconds, a float), `caller` (`dir/file.rs:line`), `msg`, `v` (not
//!   on errors), the event's fields in order, then `err` (an `error` field)
//!   last.
//! * `text`: a timestamp, the level, the target, the message and the
//!   fields; colour only when standard error is a terminal, so a log file
//!   has no escape codes.
//!
//! A line logged while a request is served carries the request's
//! `auditID` and `user` ([`RequestLog`], a task-local set by the request
//! filter: no span per request).

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::sync::{Arc, OnceLock};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// What a request's log lines say of it.
pub struct RequestLog {
    pub audit_id: String,
    /// Set once authentication has decided.
    pub user: OnceLock<String>,
}

tokio::task_local! {
    /// The request being served by this task, if any.
    pub static REQUEST: Arc<RequestLog>;
}

/// The log format.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text { ansi: bool },
    Json,
}

/// The filter `-v` stands for when `RUST_LOG` is not set: klog levels 0–3
/// log info, warnings and errors; 4–5 add this server's debug lines; 6
/// and above its trace lines (libraries stay at info, as `-v` is
/// kube-apiserver's own verbosity).
pub fn directive(verbosity: u8) -> String {
    let level = match verbosity {
        0..=3 => return "info".into(),
        4 | 5 => "debug",
        _ => "trace",
    };
    let crates = [
        "wasm_apiserver",
        "wasm_apiserver_api",
        "wasm_apiserver_storage",
        "wasm_apiserver_plugins",
        "wasm_apiserver_registry",
    ];
    let mut out = String::from("info");
    for c in crates {
        out.push_str(&format!(",{c}={level}"));
    }
    out
}

/// Installs the global subscriber: standard error, `format`, `RUST_LOG` or
/// `-v`.
pub fn init(format: &str, verbosity: u8) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| directive(verbosity).into());
    let format = if format == "json" {
        Format::Json
    } else {
        Format::Text {
            ansi: std::io::stderr().is_terminal(),
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(matches!(format, Format::Text { ansi: true }))
        .event_format(Formatter(format))
        .init();
}

/// The event formatter of both formats.
pub struct Formatter(pub Format);

/// An event's fields, in order, with `message` and `error` set apart.
#[derive(Default)]
struct Fields {
    msg: String,
    err: Option<String>,
    pairs: Vec<(&'static str, Value)>,
}

enum Value {
    Str(String),
    Raw(String),
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::Str(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::Raw(value.to_string()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::Raw(value.to_string()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Raw(value.to_string()));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        let v = if value.is_finite() {
            Value::Raw(value.to_string())
        } else {
            Value::Str(value.to_string())
        };
        self.put(field, v);
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::Str(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, Value::Str(format!("{value:?}")));
    }
}

impl Fields {
    fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| *k == key)
    }

    fn put(&mut self, field: &Field, value: Value) {
        let text = || match &value {
            Value::Str(s) | Value::Raw(s) => s.clone(),
        };
        match field.name() {
            "message" => self.msg = text(),
            "error" | "err" => self.err = Some(text()),
            name => self.pairs.push((name, value)),
        }
    }
}

fn json_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

/// `dir/file.rs`: the last directory and the file, as zap's short caller.
fn short_caller(file: &str) -> &str {
    let mut slashes = file.rmatch_indices('/');
    slashes.next();
    match slashes.next() {
        Some((i, _)) => &file[i + 1..],
        None => file,
    }
}

/// klog's verbosity of a level.
fn v(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 6,
        Level::DEBUG => 4,
        _ => 0,
    }
}

impl<S, N> FormatEvent<S, N> for Formatter
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let request = REQUEST
            .try_with(|r| (r.audit_id.clone(), r.user.get().cloned()))
            .ok();
        let mut line = String::with_capacity(128);
        match self.0 {
            Format::Json => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                let _ = write!(line, "{{\"ts\":{:.3}", now.as_nanos() as f64 / 1e6);
                if let (Some(file), Some(n)) = (meta.file(), meta.line()) {
                    line.push_str(",\"caller\":");
                    json_str(&mut line, &format!("{}:{n}", short_caller(file)));
                }
                line.push_str(",\"msg\":");
                json_str(&mut line, &fields.msg);
                if *meta.level() != Level::ERROR {
                    let _ = write!(line, ",\"v\":{}", v(meta.level()));
                }
                for (k, value) in &fields.pairs {
                    line.push(',');
                    json_str(&mut line, k);
                    line.push(':');
                    match value {
                        Value::Str(s) => json_str(&mut line, s),
                        Value::Raw(s) => line.push_str(s),
                    }
                }
                if let Some((id, user)) = &request {
                    line.push_str(",\"auditID\":");
                    json_str(&mut line, id);
                    if let Some(user) = user.as_ref().filter(|_| !fields.has("user")) {
                        line.push_str(",\"user\":");
                        json_str(&mut line, user);
                    }
                }
                if let Some(err) = &fields.err {
                    line.push_str(",\"err\":");
                    json_str(&mut line, err);
                }
                line.push('}');
            }
            Format::Text { ansi } => {
                let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ");
                let level = meta.level();
                let (on, off) = match (ansi, *level) {
                    (false, _) => ("", ""),
                    (true, Level::ERROR) => ("\x1b[31m", "\x1b[0m"),
                    (true, Level::WARN) => ("\x1b[33m", "\x1b[0m"),
                    (true, Level::INFO) => ("\x1b[32m", "\x1b[0m"),
                    (true, _) => ("\x1b[34m", "\x1b[0m"),
                };
                let _ = write!(
                    line,
                    "{now} {on}{level:>5}{off} {}: {}",
                    meta.target(),
                    fields.msg
                );
                for (k, value) in &fields.pairs {
                    match value {
                        Value::Str(s) | Value::Raw(s) => {
                            let _ = write!(line, " {k}={s}");
                        }
                    }
                }
                if let Some((id, user)) = &request {
                    let _ = write!(line, " auditID={id}");
                    if let Some(user) = user.as_ref().filter(|_| !fields.has("user")) {
                        let _ = write!(line, " user={user}");
                    }
                }
                if let Some(err) = &fields.err {
                    let _ = write!(line, " err={err}");
                }
            }
        }
        writeln!(writer, "{line}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    fn capture(format: Format, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let sub = tracing_subscriber::fmt()
            .with_writer(buf.clone())
            .with_max_level(Level::TRACE)
            .event_format(Formatter(format))
            .finish();
        tracing::subscriber::with_default(sub, f);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn json_lines_have_component_base_shape() {
        let out = capture(Format::Json, || {
            tracing::info!(ns = "default", podnum = 2, "test \"quoted\"");
            tracing::error!(
                error = "invalid namespace",
                ns = "default",
                "wrong namespace"
            );
            tracing::debug!("detail");
        });
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["msg"], "test \"quoted\"");
        assert_eq!(lines[0]["v"], 0);
        assert_eq!(lines[0]["ns"], "default");
        assert_eq!(lines[0]["podnum"], 2);
        assert!(
            lines[0]["ts"].as_f64().unwrap() > 1.6e12,
            "ts in milliseconds"
        );
        assert!(
            lines[0]["caller"]
                .as_str()
                .unwrap()
                .starts_with("src/logging.rs:")
        );
        assert!(lines[1].get("v").is_none(), "errors carry no v");
        assert_eq!(lines[1]["err"], "invalid namespace");
        assert!(
            out.lines()
                .nth(1)
                .unwrap()
                .ends_with("\"err\":\"invalid namespace\"}")
        );
        assert_eq!(lines[2]["v"], 4);
    }

    #[tokio::test]
    async fn request_lines_carry_audit_id_and_user() {
        let log = Arc::new(RequestLog {
            audit_id: "0b5e-id".into(),
            user: OnceLock::new(),
        });
        let _ = log.user.set("alice".into());
        let out = REQUEST
            .scope(log, async {
                capture(Format::Json, || tracing::warn!("inside"))
                    + &capture(Format::Text { ansi: false }, || tracing::warn!("inside"))
            })
            .await;
        let mut lines = out.lines();
        let json: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(
            (json["auditID"].as_str(), json["user"].as_str()),
            (Some("0b5e-id"), Some("alice"))
        );
        let text = lines.next().unwrap();
        assert!(text.contains("auditID=0b5e-id user=alice"), "{text}");
        assert!(!text.contains('\x1b'), "no escape codes: {text}");
    }
}
