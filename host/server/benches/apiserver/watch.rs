//! The watch scenario (issue 2): delivery latency of paced updates to many watchers.

use crate::harness::{
    Api, Cpu, Error, REQUEST_TIMEOUT, Row, configmap, cpu_sample, cpu_since, ms, send,
};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Response, StatusCode, Uri};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// Namespace of the watch scenario.
pub(crate) const NS_WATCH: &str = "bench-watch";
pub(crate) const WATCHERS: usize = 100;
pub(crate) const WATCH_WRITES: usize = 200;
pub(crate) const WATCH_PACE: Duration = Duration::from_millis(5);
/// How long watchers may lag behind the last write before the run gives up.
const WATCH_DRAIN: Duration = Duration::from_secs(10);

const TARGET_WATCH_P99: Duration = Duration::from_millis(50);

/// Watch delivery latency: `watchers` watches on one namespace, then `writes`
/// paced updates of one ConfigMap whose `data.seq` numbers them. Latency is
/// per (watcher, event), from just before the update is sent to when that
/// watcher has parsed the event.
pub(crate) async fn watch(
    api: &Api,
    watchers: usize,
    writes: usize,
    pace: Duration,
) -> Result<Vec<Row>, Error> {
    let collection = format!("/api/v1/namespaces/{NS_WATCH}/configmaps");
    let mut conn = api.connect().await?;
    let (status, body) = send(
        &mut conn,
        api.request(
            Method::POST,
            collection.parse()?,
            Some(("application/json", configmap("target", 1_000_000))),
        ),
    )
    .await?;
    if status != StatusCode::CREATED {
        return Err(format!("creating the watch target: {status}").into());
    }
    let created: serde_json::Value = serde_json::from_slice(&body)?;
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .ok_or("no resourceVersion")?
        .to_string();

    // Open the watches and wait until each has its response headers.
    let watch_uri: Uri =
        format!("{collection}?watch=true&resourceVersion={rv}&timeoutSeconds=300").parse()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let warm = Arc::new(AtomicUsize::new(0));
    let mut opened = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let mut c = api.connect().await?;
        let req = api.request(Method::GET, watch_uri.clone(), None);
        opened.push(tokio::spawn(async move {
            c.ready().await?;
            let resp = c.send_request(req).await?;
            Ok::<_, Error>((c, resp))
        }));
    }
    let mut tasks = Vec::with_capacity(watchers);
    for o in opened {
        let (conn, resp) = timeout(REQUEST_TIMEOUT, o).await???;
        if resp.status() != StatusCode::OK {
            return Err(format!("watch returned {}", resp.status()).into());
        }
        let (warm, stop) = (warm.clone(), stop_rx.clone());
        tasks.push(tokio::spawn(async move {
            let got = watcher(resp, writes, &warm, stop).await;
            drop(conn);
            got
        }));
    }

    // One untimed update, so that every stream is known to flow.
    let patch_uri: Uri = format!("{collection}/target").parse()?;
    let patch = |seq: usize| {
        let body = format!(r#"{{"data":{{"seq":"{seq}"}}}}"#);
        api.request(
            Method::PATCH,
            patch_uri.clone(),
            Some(("application/merge-patch+json", body.into())),
        )
    };
    send(&mut conn, patch(0)).await?;
    wait_warm(&warm, watchers).await;

    // The paced writes.
    let cpu = cpu_sample();
    let started = Instant::now();
    let mut sent = Vec::with_capacity(writes + 1);
    sent.push(started);
    let mut write_latencies = Vec::with_capacity(writes);
    let mut write_errors = 0;
    let mut ticker = tokio::time::interval(pace);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for seq in 1..=writes {
        ticker.tick().await;
        let req = patch(seq);
        let t = Instant::now();
        sent.push(t);
        match send(&mut conn, req).await {
            Ok((StatusCode::OK, _)) => write_latencies.push(t.elapsed().as_micros() as u32),
            _ => write_errors += 1,
        }
    }
    let writes_done = Instant::now();
    let received = drain(tasks, &stop_tx).await?;
    let finished = Instant::now();
    let cpu = cpu_since(&cpu);
    Ok(watch_rows(
        "",
        "paced PATCH",
        WatchRun {
            watchers,
            writes,
            pace,
            started,
            sent,
            write_latencies,
            write_errors,
            writes_done,
            received,
            finished,
            cpu,
        },
    ))
}

/// Waits (bounded) until `watchers` watchers have seen the warm-up event.
pub(crate) async fn wait_warm(warm: &AtomicUsize, watchers: usize) {
    let warm_deadline = Instant::now() + REQUEST_TIMEOUT;
    while warm.load(Ordering::Acquire) < watchers && Instant::now() < warm_deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let warmed = warm.load(Ordering::Acquire);
    if warmed < watchers {
        eprintln!("watch: only {warmed} of {watchers} watchers saw the warm-up event");
    }
}

/// Waits for the watchers to see everything (bounded), then stops them.
pub(crate) async fn drain(
    mut tasks: Vec<JoinHandle<Received>>,
    stop_tx: &tokio::sync::watch::Sender<bool>,
) -> Result<Vec<Received>, Error> {
    let drain_deadline = tokio::time::Instant::now() + WATCH_DRAIN;
    let mut received = Vec::with_capacity(tasks.len());
    for t in &mut tasks {
        match tokio::time::timeout_at(drain_deadline, &mut *t).await {
            Ok(r) => received.push(r?),
            Err(_) => break,
        }
    }
    let _ = stop_tx.send(true);
    for t in tasks.into_iter().skip(received.len()) {
        received.push(timeout(Duration::from_secs(2), t).await??);
    }
    Ok(received)
}

/// What a paced-write watch run measured.
pub(crate) struct WatchRun {
    pub(crate) watchers: usize,
    pub(crate) writes: usize,
    pub(crate) pace: Duration,
    pub(crate) started: Instant,
    /// When write `seq` was sent (index 0: `started`).
    pub(crate) sent: Vec<Instant>,
    pub(crate) write_latencies: Vec<u32>,
    pub(crate) write_errors: u64,
    pub(crate) writes_done: Instant,
    pub(crate) received: Vec<Received>,
    pub(crate) finished: Instant,
    pub(crate) cpu: Option<Cpu>,
}

/// The two rows of a watch run, their scenarios prefixed with `prefix`:
/// the paced writes (`what`) and the delivery to the watchers.
pub(crate) fn watch_rows(prefix: &str, what: &str, run: WatchRun) -> Vec<Row> {
    let WatchRun {
        watchers,
        writes,
        pace,
        started,
        sent,
        mut write_latencies,
        write_errors,
        writes_done,
        received,
        finished,
        cpu,
    } = run;
    let expected = (watchers * writes) as u64;
    let mut latencies = Vec::with_capacity(expected as usize);
    let (mut duplicates, mut out_of_order, mut errors) = (0u64, 0u64, 0u64);
    for got in &received {
        let mut seen = vec![false; writes + 1];
        let mut last = 0;
        for &(seq, at) in &got.events {
            if seq == 0 || seq > writes {
                continue;
            }
            if seen[seq] {
                duplicates += 1;
                continue;
            }
            seen[seq] = true;
            out_of_order += u64::from(seq < last);
            last = seq;
            latencies.push(at.saturating_duration_since(sent[seq]).as_micros() as u32);
        }
        errors += got.errors;
    }
    latencies.sort_unstable();
    let delivered = latencies.len() as u64;
    let mut note = format!(
        "{delivered}/{expected} events delivered ({:.1}%), {writes} writes every {} ms, last delivery {:.0} ms after the last write",
        delivered as f64 * 100.0 / expected as f64,
        pace.as_millis(),
        received
            .iter()
            .filter_map(|g| g.events.last())
            .map(|(_, at)| at.saturating_duration_since(writes_done))
            .max()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    );
    if duplicates + out_of_order + errors > 0 {
        note.push_str(&format!(
            ", {duplicates} duplicates, {out_of_order} out of order, {errors} bad lines"
        ));
    }
    write_latencies.sort_unstable();
    vec![
        Row {
            scenario: format!("{prefix}watch writes ({what})"),
            clients: 1,
            ops: write_latencies.len() as u64,
            errors: write_errors,
            seconds: writes_done.duration_since(started).as_secs_f64(),
            latencies: write_latencies,
            cpu: None,
            note: format!("during watch delivery to {watchers} watchers"),
        },
        Row {
            scenario: format!("{prefix}watch delivery ({watchers} watchers)"),
            clients: watchers,
            ops: delivered,
            errors: expected - delivered,
            seconds: finished.duration_since(started).as_secs_f64(),
            latencies,
            cpu,
            note,
        },
    ]
}

/// What one watcher saw: `(data.seq, when parsed)` per event.
pub(crate) struct Received {
    pub(crate) events: Vec<(usize, Instant)>,
    pub(crate) errors: u64,
}

/// Reads a watch stream line by line until it has `writes` numbered events
/// after the warm-up one, the stream ends, or `stop` is raised.
async fn watcher(
    resp: Response<Incoming>,
    writes: usize,
    warm: &AtomicUsize,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Received {
    #[derive(Deserialize)]
    struct Event<'a> {
        #[serde(rename = "type", borrow)]
        kind: &'a str,
        object: Object,
    }
    #[derive(Deserialize)]
    struct Object {
        #[serde(default)]
        data: HashMap<String, String>,
    }
    let mut out = Received {
        events: Vec::with_capacity(writes + 1),
        errors: 0,
    };
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = stop.wait_for(|s| *s) => return out,
        };
        let Some(Ok(frame)) = frame else { return out };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        let mut consumed = 0;
        while let Some(n) = buf[consumed..].iter().position(|b| *b == b'\n') {
            let line = &buf[consumed..consumed + n];
            consumed += n + 1;
            let seq = match serde_json::from_slice::<Event>(line) {
                Ok(ev) if ev.kind == "MODIFIED" => ev
                    .object
                    .data
                    .get("seq")
                    .and_then(|s| s.parse::<usize>().ok()),
                _ => None,
            };
            let at = Instant::now();
            match seq {
                Some(0) => {
                    warm.fetch_add(1, Ordering::AcqRel);
                }
                Some(seq) => {
                    out.events.push((seq, at));
                    if out.events.len() >= writes {
                        return out;
                    }
                }
                None => out.errors += 1,
            }
        }
        buf.drain(..consumed);
    }
}

/// Issue 2: the watch p99 and delivery targets.
pub(crate) fn print_targets(rows: &[Row]) {
    if let Some(r) = rows
        .iter()
        .find(|r| r.scenario.starts_with("watch delivery"))
    {
        let p99 = r.percentile(0.99).unwrap_or(Duration::MAX);
        let verdict = if p99 <= TARGET_WATCH_P99 {
            "met"
        } else {
            "MISSED"
        };
        println!(
            "target watch p99 <= {} ms with {} watchers: {verdict} ({})",
            TARGET_WATCH_P99.as_millis(),
            r.clients,
            ms(Some(p99))
        );
        let verdict = if r.errors == 0 { "met" } else { "MISSED" };
        println!("target watch delivery 100%: {verdict} ({})", r.note);
    }
}
