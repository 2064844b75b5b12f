//! `stand-in-kubelet`: a kubelet's API for the kubelet-connection tests
//! (upstream's `pkg/kubelet/server` as kube-apiserver sees it), not a
//! product. It serves HTTPS on loopback and accepts only clients whose
//! certificate the given CA signed (the API server's kubelet client
//! certificate), and answers:
//!
//! - `GET /containerLogs/{ns}/{pod}/{container}`: ten known lines,
//!   `line 1` … `line 10`, line N written (10 − N) hours before the
//!   fixture started; `tailLines`, `limitBytes`, `timestamps`,
//!   `sinceSeconds`, `sinceTime`, `previous` (`previous line N`) as the
//!   kubelet reads them; `follow=true` then writes `follow N` every 100 ms
//!   until the client goes. Container `flood` with `follow` writes 64 KiB
//!   chunks as fast as the connection takes them and counts the bytes
//!   handed to the connection (`GET /flood-bytes`).
//! - `/exec/{ns}/{pod}/{container}?command=…&stdin=1&stdout=1&stderr=1&tty=1`
//!   and `/attach/…` (attach runs `sh -c 'echo attached; cat'`) over
//!   WebSocket, `v5.channel.k8s.io` or `v4.channel.k8s.io`: the command
//!   runs as a local process, stdin from channel 0 (closed by v5's
//!   `[255, 0]` or by the socket's end), stdout and stderr on 1 and 2, the
//!   exit status on 3 as the kubelet writes it, resize messages on 4
//!   recorded in the request log.
//! - `/portForward/{ns}/{pod}?port=P` over WebSocket
//!   (`v4.channel.k8s.io`, `portforward.k8s.io`): channels 2i (data) and
//!   2i+1 (error) for the i-th port, each starting with the port as two
//!   little-endian bytes, carried to `127.0.0.1:P`.
//! - any other `GET` (the `nodes/proxy` target): `stand-in kubelet: <path>`.
//!
//! Flags: `--port N` (0: a free one; prints `listening on ADDR`),
//! `--cert FILE --key FILE` (the serving certificate), `--client-ca FILE`,
//! `--request-log FILE` (one line per request:
//! `METHOD PATH?QUERY cn=<client CN>`, plus `resize WxH` lines).

use std::convert::Infallible;
use std::io::Write;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

struct App {
    request_log: Option<Mutex<std::fs::File>>,
    started: chrono::DateTime<chrono::Utc>,
    flood_bytes: AtomicU64,
}

impl App {
    fn log(&self, line: &str) {
        if let Some(f) = &self.request_log {
            let mut f = f.lock().unwrap();
            let _ = writeln!(f, "{line}");
            let _ = f.flush();
        }
    }
}

fn flag(args: &[String], name: &str) -> Option<String> {
    let eq = format!("{name}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if a == name {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(&eq).map(String::from)
        }
    })
}

fn full(status: StatusCode, text: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(text.into()).boxed());
    *r.status_mut() = status;
    r
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port: u16 = flag(&args, "--port").unwrap_or("0".into()).parse()?;
    let cert = PathBuf::from(flag(&args, "--cert").context("--cert")?);
    let key = PathBuf::from(flag(&args, "--key").context("--key")?);
    let ca = PathBuf::from(flag(&args, "--client-ca").context("--client-ca")?);
    let request_log = flag(&args, "--request-log")
        .map(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map(Mutex::new)
        })
        .transpose()?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&ca)? {
        roots.add(c?)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()?;
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(&cert)?.collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let app = Arc::new(App {
        request_log,
        started: chrono::Utc::now(),
        flood_bytes: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    loop {
        let (tcp, _) = listener.accept().await?;
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let cn = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| {
                    let (_, cert) = x509_parser::parse_x509_certificate(c.as_ref()).ok()?;
                    let cn = cert.subject().iter_common_name().next()?;
                    cn.as_str().ok().map(String::from)
                })
                .unwrap_or_default();
            let service = service_fn(move |req| {
                let (app, cn) = (app.clone(), cn.clone());
                async move { Ok::<_, Infallible>(handle(app, cn, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades()
                .await;
        });
    }
}

async fn handle(app: Arc<App>, cn: String, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    app.log(&format!("{} {path}?{query} cn={cn}", req.method()));
    let q: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["flood-bytes"] => full(
            StatusCode::OK,
            app.flood_bytes.load(Ordering::Relaxed).to_string(),
        ),
        ["containerLogs", _ns, _pod, container] => logs(&app, container, &q),
        ["exec", _, _, _] => {
            let command: Vec<String> = q
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect();
            channels(app, req, &q, command)
        }
        ["attach", _, _, _] => {
            let command = ["sh", "-c", "echo attached; cat"]
                .map(String::from)
                .to_vec();
            channels(app, req, &q, command)
        }
        ["portForward", _, _] => port_forward(req, &q),
        _ => full(StatusCode::OK, format!("stand-in kubelet: {path}?{query}")),
    }
}

fn param<'a>(q: &'a [(String, String)], k: &str) -> Option<&'a str> {
    q.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
}

fn truthy(q: &[(String, String)], k: &str) -> bool {
    matches!(param(q, k), Some("1" | "true" | "True"))
}

/// A stream body that writes `follow N` lines, or 64 KiB floods.
struct Follow {
    app: Arc<App>,
    flood: bool,
    n: u64,
    timestamps: bool,
    tick: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl hyper::body::Body for Follow {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.flood {
            // Produced only when hyper asks, that is when the connection
            // takes more: the count shows whether writes block.
            // 64 lines of 1 KiB (a client reads a log line by line).
            let mut line = vec![b'x'; 1023];
            line.push(b'\n');
            let chunk = Bytes::from(line.repeat(64));
            self.app
                .flood_bytes
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        let tick = self
            .tick
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(100))));
        match tick.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                self.tick = None;
                self.n += 1;
                let prefix = if self.timestamps {
                    format!(
                        "{} ",
                        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
                    )
                } else {
                    String::new()
                };
                let line = format!("{prefix}follow {}\n", self.n);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(line)))))
            }
        }
    }
}

fn logs(app: &Arc<App>, container: &str, q: &[(String, String)]) -> Response<Body> {
    let follow = truthy(q, "follow");
    if container == "flood" && follow {
        return Response::new(
            Follow {
                app: app.clone(),
                flood: true,
                n: 0,
                timestamps: false,
                tick: None,
            }
            .boxed(),
        );
    }
    let previous = truthy(q, "previous");
    let timestamps = truthy(q, "timestamps");
    let since = match (param(q, "sinceSeconds"), param(q, "sinceTime")) {
        (Some(s), _) => {
            Some(chrono::Utc::now() - chrono::Duration::seconds(s.parse().unwrap_or(0)))
        }
        (None, Some(t)) => chrono::DateTime::parse_from_rfc3339(t)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc)),
        _ => None,
    };
    let mut lines: Vec<String> = (1..=10)
        .filter_map(|n| {
            let at = app.started - chrono::Duration::hours(10 - n);
            if since.is_some_and(|s| at < s) {
                return None;
            }
            let text = if previous {
                format!("previous line {n}")
            } else {
                format!("line {n}")
            };
            Some(if timestamps {
                format!(
                    "{} {text}\n",
                    at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
                )
            } else {
                format!("{text}\n")
            })
        })
        .collect();
    if let Some(n) = param(q, "tailLines").and_then(|n| n.parse::<usize>().ok()) {
        lines = lines.split_off(lines.len().saturating_sub(n));
    }
    let mut text = lines.concat().into_bytes();
    if let Some(n) = param(q, "limitBytes").and_then(|n| n.parse::<usize>().ok()) {
        text.truncate(n);
    }
    if !follow {
        return full(StatusCode::OK, text);
    }
    let first =
        futures::stream::once(async move { Ok::<_, Infallible>(Frame::data(Bytes::from(text))) });
    let rest = FollowStream(Follow {
        app: app.clone(),
        flood: false,
        n: 0,
        timestamps,
        tick: None,
    });
    Response::new(BodyExt::boxed(StreamBody::new(first.chain(rest))))
}

/// [`Follow`] as a stream of frames.
struct FollowStream(Follow);

impl futures::Stream for FollowStream {
    type Item = Result<Frame<Bytes>, Infallible>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        hyper::body::Body::poll_frame(Pin::new(&mut self.0), cx)
    }
}

/// The WebSocket handshake's answer for the first protocol the client
/// offers among `supported`; `None` with a 400 when none fits.
fn ws_accept(
    req: &Request<Incoming>,
    supported: &[&str],
) -> Result<(Response<Body>, String), Box<Response<Body>>> {
    let headers = req.headers();
    let is_ws = headers
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = headers.get("sec-websocket-key").filter(|_| is_ws) else {
        return Err(Box::new(full(
            StatusCode::BAD_REQUEST,
            "stand-in kubelet: only WebSocket upgrades are served",
        )));
    };
    let offered: Vec<String> = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .collect();
    let Some(protocol) = offered.iter().find(|p| supported.contains(&p.as_str())) else {
        return Err(Box::new(full(
            StatusCode::BAD_REQUEST,
            format!("stand-in kubelet: none of the protocols {offered:?} is supported"),
        )));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let resp = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", accept)
        .header("sec-websocket-protocol", protocol.as_str())
        .body(Full::new(Bytes::new()).boxed())
        .expect("response");
    Ok((resp, protocol.clone()))
}

/// `exec` and `attach`: the channel protocol around a local process.
fn channels(
    app: Arc<App>,
    mut req: Request<Incoming>,
    q: &[(String, String)],
    command: Vec<String>,
) -> Response<Body> {
    let (resp, protocol) = match ws_accept(&req, &["v5.channel.k8s.io", "v4.channel.k8s.io"]) {
        Ok(r) => r,
        Err(e) => return *e,
    };
    let (stdin, tty) = (truthy(q, "stdin"), truthy(q, "tty"));
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        run_channels(
            app,
            ws,
            protocol == "v5.channel.k8s.io",
            command,
            stdin,
            tty,
        )
        .await;
    });
    resp
}

async fn run_channels(
    app: Arc<App>,
    ws: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
    v5: bool,
    command: Vec<String>,
    stdin: bool,
    tty: bool,
) {
    let (sink, mut source) = ws.split();
    let sink = Arc::new(tokio::sync::Mutex::new(sink));
    let shared = sink.clone();
    let send = move |channel: u8, data: &[u8]| {
        let mut msg = Vec::with_capacity(data.len() + 1);
        msg.push(channel);
        msg.extend_from_slice(data);
        let sink = shared.clone();
        async move { sink.lock().await.send(Message::binary(msg)).await }
    };
    let Some((program, args)) = command.split_first() else {
        let _ = send(3, br#"{"metadata":{},"status":"Failure","message":"you must specify at least one command for the container","reason":"BadRequest","code":400}"#).await;
        return;
    };
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let status = serde_json::json!({"metadata": {}, "status": "Failure",
                "message": format!("failed to exec in container: {e}"), "reason": "InternalError",
                "code": 500});
            let _ = send(3, status.to_string().as_bytes()).await;
            close_normally(&sink).await;
            return;
        }
    };
    let mut child_stdin = child.stdin.take();
    // With a TTY there is no separate stderr: it goes to stdout.
    let err_channel = if tty { 1 } else { 2 };
    let pump = |mut r: Box<dyn tokio::io::AsyncRead + Unpin + Send>, channel: u8| {
        let send = send.clone();
        async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match r.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if send(channel, &buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
        }
    };
    let out = tokio::spawn(pump(Box::new(child.stdout.take().unwrap()), 1));
    let err = tokio::spawn(pump(Box::new(child.stderr.take().unwrap()), err_channel));
    let app2 = app.clone();
    let input = tokio::spawn(async move {
        while let Some(Ok(msg)) = source.next().await {
            let data: Vec<u8> = match msg {
                Message::Binary(b) => b.to_vec(),
                Message::Text(t) => t.as_bytes().to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            let Some((&channel, rest)) = data.split_first() else {
                continue;
            };
            match channel {
                0 => {
                    if let Some(w) = child_stdin.as_mut()
                        && w.write_all(rest).await.is_err()
                    {
                        child_stdin = None;
                    }
                }
                4 => {
                    let size: serde_json::Value = serde_json::from_slice(rest).unwrap_or_default();
                    app2.log(&format!("resize {}x{}", size["Width"], size["Height"]));
                }
                255 if v5 && rest.first() == Some(&0) => child_stdin = None,
                _ => {}
            }
        }
        // The socket ended: stdin ends with it.
        drop(child_stdin);
    });
    let status = child.wait().await;
    let _ = out.await;
    let _ = err.await;
    input.abort();
    let status = match status.ok().and_then(|s| s.code()) {
        Some(0) => serde_json::json!({"metadata": {}, "status": "Success"}),
        code => {
            let code = code.unwrap_or(137);
            serde_json::json!({"metadata": {}, "status": "Failure",
                "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", command.join(" ")),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
        }
    };
    let _ = send(3, status.to_string().as_bytes()).await;
    close_normally(&sink).await;
}

type Sink = futures::stream::SplitSink<WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>, Message>;

/// Ends the socket with code 1000, which clients read as the end of
/// every channel (a close without a code is an error to client-go).
async fn close_normally(sink: &tokio::sync::Mutex<Sink>) {
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let mut sink = sink.lock().await;
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await;
    let _ = sink.close().await;
}

/// `portForward` over WebSocket.
fn port_forward(mut req: Request<Incoming>, q: &[(String, String)]) -> Response<Body> {
    let (resp, _) = match ws_accept(
        &req,
        &[
            "v4.channel.k8s.io",
            "portforward.k8s.io",
            "v5.channel.k8s.io",
        ],
    ) {
        Ok(r) => r,
        Err(e) => return *e,
    };
    let ports: Vec<u16> = q
        .iter()
        .filter(|(k, _)| k == "port")
        .flat_map(|(_, v)| {
            v.split(',')
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        run_port_forward(ws, ports).await;
    });
    resp
}

async fn run_port_forward(ws: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>, ports: Vec<u16>) {
    let (sink, mut source) = ws.split();
    let sink = Arc::new(tokio::sync::Mutex::new(sink));
    let send = move |channel: u8, data: Vec<u8>| {
        let sink = sink.clone();
        async move {
            let mut msg = vec![channel];
            msg.extend(data);
            sink.lock().await.send(Message::binary(msg)).await
        }
    };
    let mut writers = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let (data, error) = ((2 * i) as u8, (2 * i + 1) as u8);
        let _ = send(data, port.to_le_bytes().to_vec()).await;
        let _ = send(error, port.to_le_bytes().to_vec()).await;
        match tokio::net::TcpStream::connect(("127.0.0.1", *port)).await {
            Ok(tcp) => {
                let (mut r, w) = tcp.into_split();
                writers.push(Some(w));
                let send = send.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    while let Ok(n) = r.read(&mut buf).await {
                        if n == 0 || send(data, buf[..n].to_vec()).await.is_err() {
                            break;
                        }
                    }
                });
            }
            Err(e) => {
                writers.push(None);
                let _ = send(
                    error,
                    format!("error forwarding port {port}: {e}").into_bytes(),
                )
                .await;
            }
        }
    }
    while let Some(Ok(msg)) = source.next().await {
        let data = match msg {
            Message::Binary(b) => b.to_vec(),
            Message::Text(t) => t.as_bytes().to_vec(),
            Message::Close(_) => break,
            _ => continue,
        };
        let Some((&channel, rest)) = data.split_first() else {
            continue;
        };
        if channel % 2 != 0 {
            continue;
        }
        if let Some(Some(w)) = writers.get_mut(channel as usize / 2)
            && w.write_all(rest).await.is_err()
        {
            writers[channel as usize / 2] = None;
        }
    }
}
