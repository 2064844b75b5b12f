//! A real `etcd` cluster on free loopback ports for the end-to-end tests:
//! one or more members (Debian's `etcd-server` 3.4), each with its own data
//! dir in one temp dir, killed on drop.
//!
//! Members are probed and inspected through etcd's JSON gateway on the
//! client port (`GET /health`, `POST /v3/maintenance/status`,
//! `POST /v3/kv/range`) with a few lines of HTTP/1.0, so the tests need
//! neither `etcdctl` nor `etcd-client` (and so no `protoc`).
//!
//! Without `etcd` on `PATH`, [`EtcdCluster::start`] panics and says to run
//! `scripts/install-etcd-deps.sh`.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::POLL_INTERVAL;

/// How long a cluster (or a restarted member) may take to elect a leader
/// and report itself healthy.
pub const ETCD_DEADLINE: Duration = Duration::from_secs(30);

/// Bound on one gateway request to a member.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One member: its name, ports and process (`None` while killed).
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// An etcd cluster of local processes; every member is killed on drop.
pub struct EtcdCluster {
    /// Holds `<name>/` (a member's `--data-dir`) and `<name>.log`.
    root: TempDir,
    members: Vec<Member>,
    /// More flags for every member (`start_with_args`).
    extra_args: Vec<String>,
}

impl EtcdCluster {
    /// Starts `members` etcd processes forming one cluster (all peers in
    /// `--initial-cluster`) and waits until every member reports itself
    /// healthy (a leader is elected). Retries on fresh ports if a port was
    /// taken between probing and etcd's bind.
    pub fn start(members: usize) -> EtcdCluster {
        Self::start_with_args(members, &[])
    }

    /// As [`EtcdCluster::start`], every member also given `extra_args`
    /// (e.g. `--quota-backend-bytes`), on restarts too.
    pub fn start_with_args(members: usize, extra_args: &[&str]) -> EtcdCluster {
        assert!(members > 0, "an etcd cluster needs at least one member");
        let mut last_error = String::new();
        for _ in 0..3 {
            let root = tempfile::Builder::new()
                .prefix("wasm-apiserver-etcd-")
                .tempdir()
                .expect("create etcd temp dir");
            let ports = free_ports(2 * members);
            let mut cluster = EtcdCluster {
                root,
                extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
                members: (0..members)
                    .map(|i| Member {
                        name: format!("n{}", i + 1),
                        client_port: ports[2 * i],
                        peer_port: ports[2 * i + 1],
                        child: None,
                    })
                    .collect(),
            };
            for i in 0..members {
                cluster.spawn(i);
            }
            match cluster.wait_healthy(&(0..members).collect::<Vec<_>>(), ETCD_DEADLINE) {
                Ok(()) => return cluster,
                Err(e) => {
                    last_error = format!("{e}\n{}", cluster.logs());
                    eprintln!("etcd cluster did not start, retrying: {last_error}");
                }
            }
        }
        panic!("could not start an etcd cluster of {members}: {last_error}");
    }

    /// Client URLs of all members (`http://127.0.0.1:P`), killed ones too.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The value of `--etcd-servers`: every endpoint, comma-separated.
    pub fn servers_flag(&self) -> String {
        self.endpoints().join(",")
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members (never: [`EtcdCluster::start`]
    /// needs one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Kills member `i` with SIGKILL and reaps it; its data dir stays.
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills every member.
    pub fn kill_all(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
    }

    /// Starts member `i` again on its data dir and ports (it rejoins the
    /// cluster) and waits until it reports itself healthy. Kills it first
    /// if it is still running.
    pub fn restart_member(&mut self, i: usize) {
        self.kill_member(i);
        self.spawn(i);
        if let Err(e) = self.wait_healthy(&[i], ETCD_DEADLINE) {
            panic!("restarted etcd member {i}: {e}\n{}", self.logs());
        }
    }

    /// Starts every killed member again (together, since a cluster needs
    /// a quorum to become healthy) and waits until all are healthy.
    pub fn restart_all(&mut self) {
        let killed: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_none())
            .collect();
        for &i in &killed {
            self.spawn(i);
        }
        if let Err(e) = self.wait_healthy(&killed, ETCD_DEADLINE) {
            panic!("restarted etcd members {killed:?}: {e}\n{}", self.logs());
        }
    }

    /// Index of the current leader, as the running members agree on it;
    /// waits (bounded) through an election.
    pub fn leader(&self) -> usize {
        let end = Instant::now() + ETCD_DEADLINE;
        loop {
            let last = match self.try_leader() {
                Ok(i) => return i,
                Err(e) => e,
            };
            if Instant::now() > end {
                panic!(
                    "no etcd leader within {ETCD_DEADLINE:?}: {last}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Number of keys starting with `prefix`, read from member `i`
    /// (a linearizable read).
    pub fn count_keys(&self, i: usize, prefix: &str) -> std::io::Result<u64> {
        let mut end = prefix.as_bytes().to_vec();
        *end.last_mut().expect("non-empty prefix") += 1;
        let body = format!(
            r#"{{"key":"{}","range_end":"{}","count_only":true}}"#,
            base64(prefix.as_bytes()),
            base64(&end)
        );
        let (status, body) = self.request(i, "POST", "/v3/kv/range", &body)?;
        let doc: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| std::io::Error::other(format!("{status} {body}: {e}")))?;
        // The gateway prints int64 as a string and omits zero values.
        Ok(doc["count"]
            .as_str()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0))
    }

    /// The logs of every member, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for m in &self.members {
            let log = std::fs::read_to_string(self.log_path(&m.name)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n");
            let state = if m.child.is_some() {
                "running"
            } else {
                "killed"
            };
            out.push_str(&format!(
                "--- etcd {} ({state}, client port {}) last log lines ---\n{tail}\n",
                m.name, m.client_port
            ));
        }
        out
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.root.path().join(format!("{name}.log"))
    }

    fn peer_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].peer_port)
    }

    fn spawn(&mut self, i: usize) {
        let initial_cluster = (0..self.members.len())
            .map(|j| format!("{}={}", self.members[j].name, self.peer_url(j)))
            .collect::<Vec<_>>()
            .join(",");
        let token = self
            .root
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (name, client_url, peer_url) = (
            self.members[i].name.clone(),
            self.endpoints()[i].clone(),
            self.peer_url(i),
        );
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(&name))
            .expect("open etcd log");
        let child = Command::new("etcd")
            .args(["--name", &name, "--data-dir"])
            .arg(self.root.path().join(&name))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &token])
            .args(["--logger", "zap", "--log-level", "warn"])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone etcd log handle"))
            .stderr(log)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("`etcd` is not installed: run scripts/install-etcd-deps.sh (as root) first")
            }
            Err(e) => panic!("cannot start etcd: {e}"),
        };
        self.members[i].child = Some(child);
    }

    /// Waits until each member in `which` answers `GET /health` with
    /// `"health":"true"` (it sees a leader), or one of them exits.
    fn wait_healthy(&mut self, which: &[usize], deadline: Duration) -> Result<(), String> {
        let end = Instant::now() + deadline;
        let mut pending: Vec<usize> = which.to_vec();
        while !pending.is_empty() {
            for &i in &pending {
                let member = &mut self.members[i];
                if let Some(child) = member.child.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    member.child = None;
                    return Err(format!("etcd {} exited: {status}", member.name));
                }
            }
            pending.retain(|&i| {
                !matches!(self.request(i, "GET", "/health", ""),
                    Ok((200, body)) if body.contains(r#""health":"true""#))
            });
            if Instant::now() > end {
                return Err(format!(
                    "etcd members {pending:?} not healthy within {deadline:?}"
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        Ok(())
    }

    /// The leader's index if every running member answers its status and
    /// they all name the same, running leader.
    fn try_leader(&self) -> Result<usize, String> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for (i, m) in self.members.iter().enumerate() {
            if m.child.is_none() {
                ids.push(None);
                continue;
            }
            let (status, body) = self
                .request(i, "POST", "/v3/maintenance/status", "{}")
                .map_err(|e| format!("status of {}: {e}", m.name))?;
            let doc: serde_json::Value = serde_json::from_str(&body)
                .map_err(|e| format!("status of {}: {status} {body}: {e}", m.name))?;
            ids.push(doc["header"]["member_id"].as_str().map(str::to_string));
            leaders.push(doc["leader"].as_str().unwrap_or("0").to_string());
        }
        let first = leaders.first().ok_or("no member is running")?;
        if leaders.iter().any(|l| l != first) {
            return Err(format!("members disagree on the leader: {leaders:?}"));
        }
        ids.iter()
            .position(|id| id.as_deref() == Some(first.as_str()))
            .ok_or_else(|| format!("leader {first} is not a running member ({ids:?})"))
    }

    /// One HTTP/1.0 request to member `i`'s client port: status and body.
    fn request(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        let address = ("127.0.0.1", self.members[i].client_port);
        let address = std::net::ToSocketAddrs::to_socket_addrs(&address)?
            .next()
            .expect("loopback address");
        let mut tcp = TcpStream::connect_timeout(&address, PROBE_TIMEOUT)?;
        tcp.set_read_timeout(Some(PROBE_TIMEOUT))?;
        tcp.set_write_timeout(Some(PROBE_TIMEOUT))?;
        write!(
            tcp,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut response = String::new();
        tcp.read_to_string(&mut response)?;
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
        Ok((status, body.to_string()))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.kill_all();
        if std::thread::panicking() && std::env::var_os("E2E_PRINT_SERVER_LOG").is_some() {
            eprintln!("{}", self.logs());
        }
    }
}

/// `n` distinct free loopback ports (all bound at once, then released for
/// etcd to take).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// Standard base64 with padding (the gateway's encoding of `bytes`).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc_4648() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("/registry/", "L3JlZ2lzdHJ5Lw=="),
        ] {
            assert_eq!(super::base64(input.as_bytes()), expected);
        }
    }
}
