//! The HTTPS webhook of the admission scenario, in its own process (as a
//! webhook runs in real life, and as issue 14 counts it) or on a tokio
//! runtime of the bench's own process.
//!
//! The own process is this bench binary again, started with
//! [`CHILD_ENV`] set: [`serve_child`] serves the webhook, writes its URL
//! and CA bundle to stdout, answers each `calls` line on stdin with the
//! number of reviews answered since the last one, and exits when stdin
//! closes (the parent dropped it or died).

use crate::admission::REQUIRED_LABEL;
use crate::harness::{Error, WEBHOOK_PID, runtime};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::Ordering;
use tokio::runtime::Handle;

#[path = "../../tests/it/support/webhook.rs"]
mod webhook_support;

/// Set (to anything) in the environment of the webhook's own process.
pub(crate) const CHILD_ENV: &str = "WASM_APISERVER_BENCH_WEBHOOK_CHILD";

/// A running webhook requiring [`REQUIRED_LABEL`].
pub(crate) enum Hook {
    InProcess(webhook_support::TestWebhook),
    Process(WebhookProcess),
}

impl Hook {
    /// A webhook on `rt`, a runtime of this process.
    pub(crate) async fn in_process(rt: &Handle) -> Result<Hook, Error> {
        Ok(Hook::InProcess(
            rt.spawn(webhook_support::start(REQUIRED_LABEL)).await?,
        ))
    }

    /// A webhook in a process of its own; its CPU is counted with the
    /// server's (`WEBHOOK_PID`). One at a time.
    pub(crate) fn own_process() -> Result<Hook, Error> {
        let mut child = Command::new(std::env::current_exe()?)
            .env(CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("webhook process: no pipes".into());
        };
        let mut process = WebhookProcess {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            url: String::new(),
            ca_bundle: String::new(),
        };
        process.url = process.line()?;
        process.ca_bundle = process.line()?;
        WEBHOOK_PID.store(process.child.id(), Ordering::Relaxed);
        Ok(Hook::Process(process))
    }

    pub(crate) fn url(&self) -> &str {
        match self {
            Hook::InProcess(h) => &h.url,
            Hook::Process(p) => &p.url,
        }
    }

    /// The CA certificate, base64 of PEM (a `caBundle`).
    pub(crate) fn ca_bundle(&self) -> &str {
        match self {
            Hook::InProcess(h) => &h.ca_bundle,
            Hook::Process(p) => &p.ca_bundle,
        }
    }

    /// Reviews answered since the last call.
    pub(crate) fn take_calls(&mut self) -> Result<usize, Error> {
        match self {
            Hook::InProcess(h) => Ok(h.calls.swap(0, Ordering::Relaxed)),
            Hook::Process(p) => {
                writeln!(p.stdin, "calls")?;
                p.stdin.flush()?;
                Ok(p.line()?.parse()?)
            }
        }
    }
}

/// The webhook's own process; killed when dropped.
pub(crate) struct WebhookProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    url: String,
    ca_bundle: String,
}

impl WebhookProcess {
    fn line(&mut self) -> Result<String, Error> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err("the webhook process exited".into());
        }
        Ok(line.trim_end().to_owned())
    }
}

impl Drop for WebhookProcess {
    fn drop(&mut self) {
        WEBHOOK_PID.store(0, Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of the webhook's own process (see the module docs): a runtime
/// with as many workers as cores, like the server's.
pub(crate) fn serve_child() -> Result<(), Error> {
    let rt = runtime("hook-worker")?;
    let hook = rt.block_on(async { webhook_support::start(REQUIRED_LABEL).await });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}\n{}", hook.url, hook.ca_bundle)?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        if line?.trim() == "calls" {
            writeln!(out, "{}", hook.calls.swap(0, Ordering::Relaxed))?;
            out.flush()?;
        }
    }
    drop(hook);
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}
