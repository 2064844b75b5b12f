//! `hostile-io`: a test fixture that tries to escape the sandbox and reports
//! what happened instead of failing.
//!
//! Configuration: `{"port": N}`, a TCP port on 127.0.0.1 to connect to.
//! `validate` (and `mutate`) always allow, with one audit annotation per
//! attempt whose value starts with `failed:` or `succeeded:`:
//!
//! * `file-read`: read `/etc/passwd`;
//! * `dir-list`: list `/`;
//! * `env`: see any environment variable or argument;
//! * `tcp-std`: `std::net::TcpStream::connect` to 127.0.0.1:port;
//! * `tcp-wasi`: the raw `wasi:sockets/tcp` calls to the same address;
//! * `dns`: resolve `localhost` through `wasi:sockets/ip-name-lookup`.

use wasi::sockets::network::{IpAddress, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};
use wasm_apiserver_plugin_sdk::admission::{AdmissionRequest, AdmissionResponse, Guest};
use wasm_apiserver_plugin_sdk::allow;

fn outcome<T, E: std::fmt::Debug>(r: Result<T, E>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => format!("succeeded: {}", ok(v)),
        Err(e) => format!("failed: {e:?}"),
    }
}

fn tcp_wasi(port: u16) -> Result<(), wasi::sockets::network::ErrorCode> {
    let network = wasi::sockets::instance_network::instance_network();
    let socket = wasi::sockets::tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4)?;
    let addr = IpSocketAddress::Ipv4(Ipv4SocketAddress {
        port,
        address: (127, 0, 0, 1),
    });
    socket.start_connect(&network, addr)?;
    let pollable = socket.subscribe();
    loop {
        match socket.finish_connect() {
            Ok(_streams) => return Ok(()),
            Err(wasi::sockets::network::ErrorCode::WouldBlock) => pollable.block(),
            Err(e) => return Err(e),
        }
    }
}

fn dns() -> Result<Vec<IpAddress>, wasi::sockets::network::ErrorCode> {
    let network = wasi::sockets::instance_network::instance_network();
    let stream = wasi::sockets::ip_name_lookup::resolve_addresses(&network, "localhost")?;
    let pollable = stream.subscribe();
    let mut out = Vec::new();
    loop {
        match stream.resolve_next_address() {
            Ok(Some(addr)) => out.push(addr),
            Ok(None) => return Ok(out),
            Err(wasi::sockets::network::ErrorCode::WouldBlock) => pollable.block(),
            Err(e) => return Err(e),
        }
    }
}

fn probe(config: &str) -> AdmissionResponse {
    let port = serde_json::from_str::<serde_json::Value>(config)
        .ok()
        .and_then(|v| v.get("port").and_then(|p| p.as_u64()))
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(1);

    let file = outcome(std::fs::read_to_string("/etc/passwd"), |s| {
        format!("{} bytes", s.len())
    });
    let dir = outcome(std::fs::read_dir("/"), |d| format!("{} entries", d.count()));
    let vars = std::env::vars().count() + std::env::args().count();
    let env = if vars == 0 {
        "failed: no environment variables or arguments".to_owned()
    } else {
        format!("succeeded: {vars} variables/arguments")
    };
    let tcp_std = outcome(std::net::TcpStream::connect(("127.0.0.1", port)), |_| {
        "connected".to_owned()
    });
    let tcp_wasi = outcome(tcp_wasi(port), |()| "connected".to_owned());
    let dns = outcome(dns(), |a| format!("{} addresses", a.len()));

    let mut response = allow();
    response.audit_annotations = vec![
        ("file-read".to_owned(), file),
        ("dir-list".to_owned(), dir),
        ("env".to_owned(), env),
        ("tcp-std".to_owned(), tcp_std),
        ("tcp-wasi".to_owned(), tcp_wasi),
        ("dns".to_owned(), dns),
    ];
    response
}

struct Plugin;

impl Guest for Plugin {
    fn check_config(_config: String) -> Result<(), String> {
        Ok(())
    }
    fn validate(config: String, _request: AdmissionRequest) -> AdmissionResponse {
        probe(&config)
    }
    fn mutate(config: String, _request: AdmissionRequest) -> AdmissionResponse {
        probe(&config)
    }
}

wasm_apiserver_plugin_sdk::export_admission!(Plugin);
