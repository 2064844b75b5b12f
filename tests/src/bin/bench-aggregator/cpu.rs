//! CPU time of the processes in a measurement, from `/proc/PID/stat`: this
//! server, the extension and the benchmark itself, so that a throughput
//! figure comes with where each request's CPU went.

/// `/proc`'s clock ticks per second (Linux's `USER_HZ`).
pub const USER_HZ: f64 = 100.0;

/// The processes whose CPU time is counted: this server, the extension,
/// the benchmark.
pub struct Pids([u32; 3]);

impl Pids {
    /// This server is the benchmark's child named `wasm-apiserver`.
    pub fn find(extension: u32) -> Pids {
        let me = std::process::id();
        let server = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                stat.contains("(wasm-apiserver)")
                    && stat_fields(&stat).get(1) == Some(&me.to_string().as_str())
            })
            .unwrap_or(0);
        Pids([server, extension, me])
    }

    /// User plus system ticks of each so far (0 for one that is gone).
    pub fn ticks(&self) -> [u64; 3] {
        self.0.map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let f = stat_fields(&stat);
            let at = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            // utime and stime: fields 14 and 15, here 11 and 12 (after the
            // pid and the command).
            at(11) + at(12)
        })
    }
}

/// The fields of `/proc/PID/stat` after `(command)`: state, ppid, ….
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect())
}
